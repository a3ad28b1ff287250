//! The kubelet's atomic writer (`pkg/volume/util/atomic_writer.go`): projects a set of files
//! into a volume directory so that a reader never sees a half-updated set.
//!
//! ```text
//! <dir>/..2024_05_01_10_00_00.1234567890/   the files of one version (0755)
//! <dir>/..data -> ..2024_05_01_10_00_00.1234567890
//! <dir>/<key>  -> ..data/<key>              one symlink per top-level path
//! ```
//!
//! An update writes a new timestamped directory, points a `..data_tmp` symlink at it and
//! renames that over `..data` (rename is atomic), then removes the top-level links of paths
//! that are gone and the old directory. Containers that mount the volume directory see the new
//! files at once; a `subPath` mount of one file keeps the inode it was given.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::{symlink, DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

const DATA_DIR: &str = "..data";
const NEW_DATA_DIR: &str = "..data_tmp";
const MAX_FILE_NAME_LENGTH: usize = 255;
const MAX_PATH_LENGTH: usize = 4096;

/// A hook run on a freshly written data directory (its path) before it is swapped in.
pub type SetPerms<'a> = &'a dyn Fn(&Path) -> io::Result<()>;

/// One file of a payload: its bytes, its mode and, for service account tokens of a pod whose
/// containers all run as one user, that user as its owner (`FsUser`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
    pub fs_user: Option<u32>,
}

/// Relative path → file.
pub type Payload = BTreeMap<String, FileProjection>;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The kubelet's `validatePath` messages.
    #[error("invalid path: {0}")]
    InvalidPath(String),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> WriteError + '_ {
    move |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The data directory already held this payload; only missing top-level links were added.
    Unchanged,
    /// A new data directory (its name) was written and swapped in.
    Written(String),
}

/// `validatePath`: payload paths are relative, have no `..` element, do not start with `..`
/// (the writer's own names), and respect the filesystem's name and path lengths.
pub fn validate_path(target: &str) -> Result<(), WriteError> {
    let invalid = |msg: String| Err(WriteError::InvalidPath(msg));
    if target.is_empty() {
        return invalid(format!("must not be empty: {target:?}"));
    }
    if target.starts_with('/') {
        return invalid(format!("must be relative path: {target}"));
    }
    if target.len() > MAX_PATH_LENGTH {
        return invalid(format!(
            "must be less than or equal to {MAX_PATH_LENGTH} characters"
        ));
    }
    let items: Vec<&str> = target.split('/').collect();
    for item in &items {
        if *item == ".." {
            return invalid(format!("must not contain '..': {target}"));
        }
        if item.len() > MAX_FILE_NAME_LENGTH {
            return invalid(format!(
                "filenames must be less than or equal to {MAX_FILE_NAME_LENGTH} characters"
            ));
        }
    }
    if items[0].starts_with("..") && items[0].len() > 2 {
        return invalid(format!("must not start with '..': {target}"));
    }
    Ok(())
}

/// `filepath.Clean` for a validated relative path: drops `.` elements and repeated slashes.
fn clean(target: &str) -> String {
    let parts: Vec<&str> = Path::new(target)
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => p.to_str(),
            _ => None,
        })
        .collect();
    if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    }
}

/// Validates every path and returns the payload keyed by cleaned paths.
pub fn clean_payload(payload: &Payload) -> Result<Payload, WriteError> {
    let mut out = Payload::new();
    for (path, file) in payload {
        validate_path(path)?;
        out.insert(clean(path), file.clone());
    }
    Ok(out)
}

/// Every path of `payload` with all its parent directories (`pathsToRemove`'s "new paths").
fn paths_with_parents(payload: &Payload) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for path in payload.keys() {
        let mut current = path.as_str();
        loop {
            out.insert(current.to_string());
            match current.rfind('/') {
                Some(i) => current = &current[..i],
                None => break,
            }
        }
    }
    out
}

/// Relative paths of everything below `dir` (files and directories), without following
/// symlinks.
fn walk(dir: &Path) -> io::Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, rel)) = stack.pop() {
        for entry in fs::read_dir(&path)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let child_rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if entry.file_type()?.is_dir() {
                stack.push((entry.path(), child_rel.clone()));
            }
            out.insert(child_rel);
        }
    }
    Ok(out)
}

/// True when some file of `payload` is missing from `old_dir` or has other content
/// (`shouldWritePayload`; like the kubelet, modes are not compared).
fn should_write_payload(payload: &Payload, old_dir: &Path) -> io::Result<bool> {
    for (path, file) in payload {
        let full = old_dir.join(path);
        match fs::symlink_metadata(&full) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        if fs::read(&full)? != file.data {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `..YYYY_MM_DD_HH_MM_SS.` in UTC, the prefix of a data directory's name.
fn timestamp_prefix(now: jiff::Timestamp) -> String {
    now.strftime("..%Y_%m_%d_%H_%M_%S.").to_string()
}

/// Creates a new data directory named after `now` with a random suffix (Go's `MkdirTemp`),
/// mode 0755 so any container user can descend into it.
fn new_timestamp_dir(target: &Path, now: jiff::Timestamp) -> Result<PathBuf, WriteError> {
    let prefix = timestamp_prefix(now);
    loop {
        let dir = target.join(format!("{prefix}{}", super::random_number()));
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
                    .map_err(io_err(&dir))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(&dir)(e)),
        }
    }
}

/// Writes every file below `dir` with exactly its mode, whatever the umask, owned by its
/// `fs_user` when it has one.
fn write_payload_to_dir(payload: &Payload, dir: &Path) -> Result<(), WriteError> {
    for (path, file) in payload {
        let full = dir.join(path);
        if let Some(parent) = full.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o777)
                .create(parent)
                .map_err(io_err(parent))?;
        }
        let mode = file.mode & 0o7777;
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&full)
            .map_err(io_err(&full))?;
        io::Write::write_all(&mut f, &file.data).map_err(io_err(&full))?;
        fs::set_permissions(&full, fs::Permissions::from_mode(mode)).map_err(io_err(&full))?;
        if let Some(uid) = file.fs_user {
            std::os::unix::fs::chown(&full, Some(uid), None).map_err(io_err(&full))?;
        }
    }
    Ok(())
}

/// The top-level symlinks into `..data` (`createUserVisibleFiles`): one per first path
/// element, created when missing.
fn create_user_visible_files(payload: &Payload, target: &Path) -> Result<(), WriteError> {
    let tops: BTreeSet<&str> = payload
        .keys()
        .map(|p| p.split('/').next().unwrap_or(p))
        .collect();
    for top in tops {
        let visible = target.join(top);
        match fs::symlink_metadata(&visible) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                symlink(Path::new(DATA_DIR).join(top), &visible).map_err(io_err(&visible))?;
            }
            Err(e) => return Err(io_err(&visible)(e)),
        }
    }
    Ok(())
}

/// Atomically projects `payload` into `target` (which must exist) as the kubelet's
/// `AtomicWriter.Write` does. `set_perms` runs on a freshly written data directory before it
/// is swapped in (the kubelet applies fsGroup ownership there). `now` names the new data
/// directory.
pub fn write_payload(
    target: &Path,
    payload: &Payload,
    now: jiff::Timestamp,
    set_perms: Option<SetPerms<'_>>,
) -> Result<WriteOutcome, WriteError> {
    let payload = clean_payload(payload)?;
    let data_dir = target.join(DATA_DIR);
    let old_ts = match fs::read_link(&data_dir) {
        Ok(link) => Some(link),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(&data_dir)(e)),
    };

    let mut to_remove = BTreeSet::new();
    let mut write = true;
    if let Some(old) = &old_ts {
        let old_path = target.join(old);
        let current = match walk(&old_path) {
            Ok(paths) => paths,
            Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeSet::new(),
            Err(e) => return Err(io_err(&old_path)(e)),
        };
        let keep = paths_with_parents(&payload);
        to_remove = current.difference(&keep).cloned().collect();
        let changed = should_write_payload(&payload, &old_path).map_err(io_err(&old_path))?;
        write = changed || !to_remove.is_empty();
    }

    let mut outcome = WriteOutcome::Unchanged;
    if write {
        let ts_dir = new_timestamp_dir(target, now)?;
        let ts_name = ts_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let swap = || -> Result<(), WriteError> {
            write_payload_to_dir(&payload, &ts_dir)?;
            if let Some(set_perms) = set_perms {
                set_perms(&ts_dir).map_err(io_err(&ts_dir))?;
            }
            let new_link = target.join(NEW_DATA_DIR);
            // A crash between symlink and rename leaves a stale temporary link behind.
            match fs::remove_file(&new_link) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(&new_link)(e)),
                _ => {}
            }
            symlink(&ts_name, &new_link).map_err(io_err(&new_link))?;
            fs::rename(&new_link, &data_dir).map_err(|e| {
                let _ = fs::remove_file(&new_link);
                io_err(&data_dir)(e)
            })
        };
        if let Err(e) = swap() {
            let _ = fs::remove_dir_all(&ts_dir);
            return Err(e);
        }
        outcome = WriteOutcome::Written(ts_name);
    }

    create_user_visible_files(&payload, target)?;

    // Only top-level links are removed; deeper paths vanish with the old data directory.
    let mut last_err = None;
    for path in to_remove.iter().filter(|p| !p.contains('/')) {
        let visible = target.join(path);
        if let Err(e) = fs::remove_file(&visible) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %visible.display(), error = %e, "pruning old user-visible path");
                last_err = Some(io_err(&visible)(e));
            }
        }
    }
    if let Some(e) = last_err {
        return Err(e);
    }

    if let (true, Some(old)) = (write, old_ts) {
        let old_path = target.join(old);
        match fs::remove_dir_all(&old_path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(&old_path)(e)),
            _ => {}
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: &str, mode: u32) -> FileProjection {
        FileProjection {
            data: data.as_bytes().to_vec(),
            mode,
            fs_user: None,
        }
    }

    fn payload(files: &[(&str, &str, u32)]) -> Payload {
        files
            .iter()
            .map(|(p, d, m)| (p.to_string(), file(d, *m)))
            .collect()
    }

    fn now() -> jiff::Timestamp {
        "2024-05-01T10:00:00Z".parse().unwrap()
    }

    /// Top-level names in `dir`, with `..`-names reduced to their role.
    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .map(|n| {
                if n.starts_with("..2024_05_01_10_00_00.") {
                    "<ts>".to_string()
                } else {
                    n
                }
            })
            .collect();
        names.sort();
        names
    }

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn validate_path_table() {
        let long_name = "a".repeat(256);
        let long_path = format!("{}/b", "a/".repeat(2100));
        let cases: Vec<(&str, Option<String>)> = vec![
            ("key", None),
            ("dir/key", None),
            ("./key", None),
            ("..", Some("invalid path: must not contain '..': ..".into())),
            ("a/..b", None),
            ("", Some("invalid path: must not be empty: \"\"".into())),
            (
                "/etc/x",
                Some("invalid path: must be relative path: /etc/x".into()),
            ),
            (
                "a/../b",
                Some("invalid path: must not contain '..': a/../b".into()),
            ),
            (
                "..data",
                Some("invalid path: must not start with '..': ..data".into()),
            ),
            (
                "..a/b",
                Some("invalid path: must not start with '..': ..a/b".into()),
            ),
            (
                &long_name,
                Some("invalid path: filenames must be less than or equal to 255 characters".into()),
            ),
            (
                &long_path,
                Some("invalid path: must be less than or equal to 4096 characters".into()),
            ),
        ];
        for (path, want) in cases {
            let got = validate_path(path).err().map(|e| e.to_string());
            assert_eq!(got, want, "{path}");
        }
    }

    #[test]
    fn clean_table() {
        let cases = [("a", "a"), ("./a", "a"), ("a//b", "a/b"), ("a/./b/", "a/b")];
        for (input, want) in cases {
            assert_eq!(clean(input), want, "{input}");
        }
    }

    #[test]
    fn initial_write_lays_out_data_dir_and_links() {
        let dir = tempfile::tempdir().unwrap();
        let p = payload(&[
            ("app.conf", "port=80", 0o644),
            ("nested/deep/file", "x", 0o400),
            ("nested/other", "y", 0o600),
        ]);
        let outcome = write_payload(dir.path(), &p, now(), None).unwrap();
        let WriteOutcome::Written(ts) = outcome else {
            panic!("expected a write")
        };
        assert!(ts.starts_with("..2024_05_01_10_00_00."), "{ts}");
        assert_eq!(
            listing(dir.path()),
            ["..data", "<ts>", "app.conf", "nested"]
        );
        assert_eq!(
            fs::read_link(dir.path().join("..data")).unwrap(),
            PathBuf::from(&ts)
        );
        assert_eq!(
            fs::read_link(dir.path().join("app.conf")).unwrap(),
            PathBuf::from("..data/app.conf")
        );
        assert_eq!(
            fs::read_link(dir.path().join("nested")).unwrap(),
            PathBuf::from("..data/nested")
        );
        assert_eq!(
            fs::read_to_string(dir.path().join("nested/deep/file")).unwrap(),
            "x"
        );
        let cases = [
            ("app.conf", 0o644),
            ("nested/deep/file", 0o400),
            ("nested/other", 0o600),
        ];
        for (path, want) in cases {
            assert_eq!(mode(&dir.path().join(&ts).join(path)), want, "{path}");
        }
        assert_eq!(mode(&dir.path().join(&ts)), 0o755);
    }

    #[test]
    fn update_swaps_data_and_prunes_removed_keys() {
        let dir = tempfile::tempdir().unwrap();
        let first = payload(&[("a", "1", 0o644), ("b", "2", 0o644), ("sub/c", "3", 0o644)]);
        let WriteOutcome::Written(old) = write_payload(dir.path(), &first, now(), None).unwrap()
        else {
            panic!("expected a write")
        };
        // a reader holding the old file keeps its content
        let held = fs::File::open(dir.path().join("a")).unwrap();

        // the same payload again: nothing written
        assert_eq!(
            write_payload(dir.path(), &first, now(), None).unwrap(),
            WriteOutcome::Unchanged
        );
        assert_eq!(
            fs::read_link(dir.path().join("..data")).unwrap(),
            PathBuf::from(&old)
        );

        let second = payload(&[("a", "one", 0o644), ("d", "4", 0o644)]);
        let WriteOutcome::Written(new) = write_payload(dir.path(), &second, now(), None).unwrap()
        else {
            panic!("expected a write")
        };
        assert_ne!(old, new);
        assert_eq!(listing(dir.path()), ["..data", "<ts>", "a", "d"]);
        assert!(!dir.path().join(&old).exists());
        assert_eq!(fs::read_to_string(dir.path().join("a")).unwrap(), "one");
        assert_eq!(fs::read_to_string(dir.path().join("d")).unwrap(), "4");
        assert!(fs::symlink_metadata(dir.path().join("b")).is_err());
        assert!(fs::symlink_metadata(dir.path().join("sub")).is_err());
        assert_eq!(io::read_to_string(held).unwrap(), "1");

        // removing a key alone (no content change) is a write too
        let third = payload(&[("a", "one", 0o644)]);
        assert!(matches!(
            write_payload(dir.path(), &third, now(), None).unwrap(),
            WriteOutcome::Written(_)
        ));
        assert_eq!(listing(dir.path()), ["..data", "<ts>", "a"]);
    }

    #[test]
    fn unchanged_payload_recreates_missing_links() {
        let dir = tempfile::tempdir().unwrap();
        let p = payload(&[("a", "1", 0o644)]);
        write_payload(dir.path(), &p, now(), None).unwrap();
        fs::remove_file(dir.path().join("a")).unwrap();
        assert_eq!(
            write_payload(dir.path(), &p, now(), None).unwrap(),
            WriteOutcome::Unchanged
        );
        assert_eq!(fs::read_to_string(dir.path().join("a")).unwrap(), "1");
    }

    #[test]
    fn modes_are_exact_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let p = payload(&[("w", "x", 0o777), ("r", "x", 0o444), ("s", "x", 0o2755)]);
        let WriteOutcome::Written(ts) = write_payload(dir.path(), &p, now(), None).unwrap() else {
            panic!("expected a write")
        };
        for (path, want) in [("w", 0o777), ("r", 0o444), ("s", 0o2755)] {
            assert_eq!(mode(&dir.path().join(&ts).join(path)), want, "{path}");
        }
    }

    #[test]
    fn files_with_an_fs_user_are_owned_by_it() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        // Another user needs privilege; without it the process's own user still proves the
        // owner is set from the projection.
        let me = nix::unistd::geteuid();
        let user = if me.is_root() { 4242 } else { me.as_raw() };
        let mut p = payload(&[("token", "t0k", 0o600), ("ca.crt", "pem", 0o644)]);
        if let Some(token) = p.get_mut("token") {
            token.fs_user = Some(user);
        }
        let WriteOutcome::Written(ts) = write_payload(dir.path(), &p, now(), None).unwrap() else {
            panic!("expected a write")
        };
        let owner = |name: &str| fs::metadata(dir.path().join(&ts).join(name)).unwrap().uid();
        assert_eq!(owner("token"), user);
        assert_eq!(owner("ca.crt"), me.as_raw());
        assert_eq!(mode(&dir.path().join(&ts).join("token")), 0o600);
    }

    #[test]
    fn set_perms_runs_on_new_data_and_failures_leave_old_data() {
        let dir = tempfile::tempdir().unwrap();
        let seen = std::cell::RefCell::new(Vec::new());
        let record = |p: &Path| {
            seen.borrow_mut().push(p.to_path_buf());
            Ok(())
        };
        let p = payload(&[("a", "1", 0o644)]);
        write_payload(dir.path(), &p, now(), Some(&record)).unwrap();
        assert_eq!(seen.borrow().len(), 1);
        assert!(seen.borrow()[0].join("a").is_file());

        let fail = |_: &Path| Err(io::Error::other("no chown"));
        let err = write_payload(
            dir.path(),
            &payload(&[("a", "2", 0o644)]),
            now(),
            Some(&fail),
        )
        .unwrap_err();
        assert!(err.to_string().ends_with("no chown"), "{err}");
        assert_eq!(fs::read_to_string(dir.path().join("a")).unwrap(), "1");
        assert_eq!(listing(dir.path()), ["..data", "<ts>", "a"]);

        let bad = payload(&[("../escape", "x", 0o644)]);
        assert!(matches!(
            write_payload(dir.path(), &bad, now(), None),
            Err(WriteError::InvalidPath(_))
        ));
    }

    #[test]
    fn empty_payload_is_an_empty_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        write_payload(dir.path(), &Payload::new(), now(), None).unwrap();
        assert_eq!(listing(dir.path()), ["..data", "<ts>"]);
        assert_eq!(
            write_payload(dir.path(), &Payload::new(), now(), None).unwrap(),
            WriteOutcome::Unchanged
        );
    }
}
