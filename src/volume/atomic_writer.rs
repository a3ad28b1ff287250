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
//!
//! Containers get these volumes read-only, but the writer trusts nothing it finds in the
//! volume directory anyway (a volume set up by an older nodelet was writable, and a bug
//! elsewhere must not turn into a host write): every operation is made beneath a directory fd
//! of the volume opened with `O_NOFOLLOW` (`openat`, `mkdirat`, `symlinkat`, `renameat`,
//! `unlinkat`, `readlinkat`), nothing is ever followed out of it, and `..data` is only believed
//! when it is a symlink to one `..<timestamp>` directory entry of the volume itself. Anything
//! else is corrupt: the writer removes the entry (the link itself, never what it points to)
//! and writes a fresh payload.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, renameat, OFlag};
use nix::sys::stat::{fchmod, fstat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{fchown, symlinkat, unlinkat, Uid, UnlinkatFlags};

const DATA_DIR: &str = "..data";
const NEW_DATA_DIR: &str = "..data_tmp";
const MAX_FILE_NAME_LENGTH: usize = 255;
const MAX_PATH_LENGTH: usize = 4096;
/// The deepest directory the writer descends into: a valid payload path (at most 4096
/// characters) has at most 2048 elements.
const MAX_DEPTH: usize = MAX_PATH_LENGTH / 2 + 1;

/// A hook run on a freshly written data directory before it is swapped in. It gets the volume
/// directory and the new data directory as fds opened with `O_NOFOLLOW` (the kubelet applies
/// fsGroup ownership there); see [`for_each_beneath`].
pub type SetPerms<'a> = &'a dyn Fn(BorrowedFd<'_>, BorrowedFd<'_>) -> io::Result<()>;

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

/// A failed `*at` call on `rel` beneath the volume directory `target`.
fn at_err<'a>(target: &'a Path, rel: &'a str) -> impl FnOnce(Errno) -> WriteError + 'a {
    move |errno| WriteError::Io {
        path: target.join(rel),
        source: io::Error::from(errno),
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

/// True when `name` is a data directory name this writer makes: `..`, a UTC timestamp
/// `YYYY_MM_DD_HH_MM_SS`, `.`, and the decimal suffix of Go's `MkdirTemp`. The only target
/// `..data` may have: one entry of the volume directory itself (no `/`, not `.` or `..`, not
/// the writer's other names).
pub fn is_data_dir_name(name: &[u8]) -> bool {
    const SHAPE: &[u8] = b"..dddd_dd_dd_dd_dd_dd.";
    if name.len() <= SHAPE.len() || name.len() > SHAPE.len() + 20 {
        return false;
    }
    let (head, suffix) = name.split_at(SHAPE.len());
    let head_ok = head.iter().zip(SHAPE).all(|(c, s)| match s {
        b'd' => c.is_ascii_digit(),
        _ => c == s,
    });
    head_ok && suffix.iter().all(u8::is_ascii_digit)
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

/// Flags for a directory the writer descends into: the last component must not be a symlink.
fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Opens the directory `name` beneath `dir` without following a symlink (`ELOOP` or
/// `ENOTDIR` when `name` is one).
fn open_dir_at<P: ?Sized + nix::NixPath>(dir: BorrowedFd<'_>, name: &P) -> nix::Result<OwnedFd> {
    openat(dir, name, dir_flags(), Mode::empty())
}

fn file_kind(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT
}

/// The names in `dir` but `.` and `..`, read through a fresh descriptor of the same directory.
fn list(dir: BorrowedFd<'_>) -> nix::Result<Vec<OsString>> {
    let mut d = Dir::openat(dir, ".", dir_flags(), Mode::empty())?;
    let mut out = Vec::new();
    for entry in d.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(OsStr::from_bytes(name).to_owned());
        }
    }
    Ok(out)
}

fn join_rel(rel: &str, name: &OsStr) -> String {
    let name = name.to_string_lossy();
    if rel.is_empty() {
        name.into_owned()
    } else {
        format!("{rel}/{name}")
    }
}

/// Removes the entry `name` of `dir`: anything but a directory (a symlink included) is
/// unlinked; a directory is emptied beneath descriptors opened with `O_NOFOLLOW` and then
/// removed. Never follows a symlink; a missing entry is no error.
fn remove_entry(dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<()> {
    struct Level {
        fd: OwnedFd,
        names: Vec<OsString>,
        name: OsString,
    }
    match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => return Ok(()),
        Err(Errno::EISDIR) => {}
        Err(e) => return Err(e),
    }
    let fd = match open_dir_at(dir, name) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(()),
        // swapped for something else since the unlink: unlink that
        Err(Errno::ENOTDIR | Errno::ELOOP) => {
            return unlinkat(dir, name, UnlinkatFlags::NoRemoveDir)
        }
        Err(e) => return Err(e),
    };
    let names = list(fd.as_fd())?;
    let mut stack = vec![Level {
        fd,
        names,
        name: name.to_owned(),
    }];
    while let Some(top) = stack.last_mut() {
        let Some(child) = top.names.pop() else {
            let Some(done) = stack.pop() else { break };
            let parent = stack.last().map_or(dir, |l| l.fd.as_fd());
            match unlinkat(parent, done.name.as_os_str(), UnlinkatFlags::RemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(e) => return Err(e),
            }
            continue;
        };
        match unlinkat(
            top.fd.as_fd(),
            child.as_os_str(),
            UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) | Err(Errno::ENOENT) => continue,
            Err(Errno::EISDIR) => {}
            Err(e) => return Err(e),
        }
        match open_dir_at(top.fd.as_fd(), child.as_os_str()) {
            Ok(fd) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(Errno::ELOOP);
                }
                let names = list(fd.as_fd())?;
                stack.push(Level {
                    fd,
                    names,
                    name: child,
                });
            }
            Err(Errno::ENOENT) => {}
            Err(Errno::ENOTDIR | Errno::ELOOP) => unlinkat(
                top.fd.as_fd(),
                child.as_os_str(),
                UnlinkatFlags::NoRemoveDir,
            )?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Relative paths of everything below `dir` (files and directories), without following
/// symlinks. `None` when the tree is deeper than any payload this writer makes.
fn walk(dir: BorrowedFd<'_>) -> nix::Result<Option<BTreeSet<String>>> {
    let mut out = BTreeSet::new();
    let mut stack: Vec<(Option<OwnedFd>, String, usize)> = vec![(None, String::new(), 0)];
    while let Some((fd, rel, depth)) = stack.pop() {
        let here = fd.as_ref().map_or(dir, |f| f.as_fd());
        for name in list(here)? {
            let child_rel = join_rel(&rel, &name);
            match open_dir_at(here, name.as_os_str()) {
                Ok(child) => {
                    if depth + 1 >= MAX_DEPTH {
                        return Ok(None);
                    }
                    stack.push((Some(child), child_rel.clone(), depth + 1));
                }
                Err(Errno::ENOTDIR | Errno::ELOOP | Errno::ENOENT | Errno::EACCES) => {}
                Err(e) => return Err(e),
            }
            out.insert(child_rel);
        }
    }
    Ok(Some(out))
}

/// Opens `path` (relative, validated) beneath `dir`, every element without following a
/// symlink; `None` when some element is missing, a symlink or of the wrong kind.
fn open_beneath(dir: BorrowedFd<'_>, path: &str, leaf: OFlag) -> nix::Result<Option<OwnedFd>> {
    let mut parts = path.split('/').peekable();
    let mut current: Option<OwnedFd> = None;
    while let Some(part) = parts.next() {
        let base = current.as_ref().map_or(dir, |f| f.as_fd());
        let opened = if parts.peek().is_some() {
            open_dir_at(base, part)
        } else {
            openat(base, part, leaf, Mode::empty())
        };
        match opened {
            Ok(fd) => current = Some(fd),
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP | Errno::ENXIO) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(current)
}

/// True when some file of `payload` is missing from the data directory `old`, is not a
/// regular file, or has other content (`shouldWritePayload`; like the kubelet, modes are not
/// compared). Reads no more of a file than its expected size and one byte.
fn should_write_payload(payload: &Payload, old: BorrowedFd<'_>) -> nix::Result<bool> {
    let leaf = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    for (path, file) in payload {
        let Some(fd) = open_beneath(old, path, leaf)? else {
            return Ok(true);
        };
        let stat = fstat(fd.as_fd())?;
        let size = u64::try_from(stat.st_size).unwrap_or(u64::MAX);
        if file_kind(&stat) != SFlag::S_IFREG || size != file.data.len() as u64 {
            return Ok(true);
        }
        let mut content = Vec::with_capacity(file.data.len());
        fs::File::from(fd)
            .take(file.data.len() as u64 + 1)
            .read_to_end(&mut content)
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        if content != file.data {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `..YYYY_MM_DD_HH_MM_SS.` in UTC, the prefix of a data directory's name.
fn timestamp_prefix(now: jiff::Timestamp) -> String {
    now.strftime("..%Y_%m_%d_%H_%M_%S.").to_string()
}

/// Creates a new data directory in `vol` named after `now` with a random suffix (Go's
/// `MkdirTemp`), mode 0755 so any container user can descend into it; returns its name and
/// descriptor.
fn new_timestamp_dir(
    target: &Path,
    vol: BorrowedFd<'_>,
    now: jiff::Timestamp,
) -> Result<(String, OwnedFd), WriteError> {
    let prefix = timestamp_prefix(now);
    loop {
        let name = format!("{prefix}{}", super::random_number());
        match mkdirat(vol, name.as_str(), Mode::from_bits_truncate(0o700)) {
            Ok(()) => {}
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(at_err(target, &name)(e)),
        }
        let fd = open_dir_at(vol, name.as_str()).map_err(at_err(target, &name))?;
        fchmod(fd.as_fd(), Mode::from_bits_truncate(0o755)).map_err(at_err(target, &name))?;
        return Ok((name, fd));
    }
}

/// Writes every file below the new data directory `dir` (named `dir_name` in `target`) with
/// exactly its mode, whatever the umask, owned by its `fs_user` when it has one. Parent
/// directories are made and entered beneath `dir`; files are created exclusively.
fn write_payload_to_dir(
    target: &Path,
    dir_name: &str,
    payload: &Payload,
    dir: BorrowedFd<'_>,
) -> Result<(), WriteError> {
    for (path, file) in payload {
        let rel = format!("{dir_name}/{path}");
        let err = at_err(target, &rel);
        let (parents, leaf) = match path.rsplit_once('/') {
            Some((parents, leaf)) => (Some(parents), leaf),
            None => (None, path.as_str()),
        };
        let mut current: Option<OwnedFd> = None;
        for part in parents.into_iter().flat_map(|p| p.split('/')) {
            let base = current.as_ref().map_or(dir, |f| f.as_fd());
            match mkdirat(base, part, Mode::from_bits_truncate(0o777)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(at_err(target, &rel)(e)),
            }
            current = Some(open_dir_at(base, part).map_err(at_err(target, &rel))?);
        }
        let base = current.as_ref().map_or(dir, |f| f.as_fd());
        let mode = Mode::from_bits_truncate(file.mode & 0o7777);
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(base, leaf, flags, mode).map_err(at_err(target, &rel))?;
        let mut f = fs::File::from(fd);
        io::Write::write_all(&mut f, &file.data).map_err(io_err(&target.join(&rel)))?;
        fchmod(f.as_fd(), mode).map_err(at_err(target, &rel))?;
        if let Some(uid) = file.fs_user {
            fchown(f.as_fd(), Some(Uid::from_raw(uid)), None).map_err(err)?;
        }
    }
    Ok(())
}

/// Calls `visit` with `dir` itself and then with every directory and regular file beneath it,
/// each opened without following a symlink (symlinks and special files are skipped); the flag
/// says whether the descriptor is a directory. For hooks such as fsGroup ownership, which must
/// change nothing outside the tree.
pub fn for_each_beneath(
    dir: BorrowedFd<'_>,
    visit: &mut dyn FnMut(BorrowedFd<'_>, bool) -> io::Result<()>,
) -> io::Result<()> {
    visit(dir, true)?;
    let leaf = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let mut stack: Vec<(Option<OwnedFd>, usize)> = vec![(None, 0)];
    while let Some((fd, depth)) = stack.pop() {
        let here = fd.as_ref().map_or(dir, |f| f.as_fd());
        for name in list(here)? {
            let child = match openat(here, name.as_os_str(), leaf, Mode::empty()) {
                Ok(child) => child,
                Err(Errno::ELOOP | Errno::ENOENT | Errno::ENXIO) => continue,
                Err(e) => return Err(e.into()),
            };
            let kind = file_kind(&fstat(child.as_fd())?);
            if kind == SFlag::S_IFDIR {
                visit(child.as_fd(), true)?;
                if depth + 1 < MAX_DEPTH {
                    stack.push((Some(child), depth + 1));
                }
            } else if kind == SFlag::S_IFREG {
                visit(child.as_fd(), false)?;
            }
        }
    }
    Ok(())
}

/// The top-level symlinks into `..data` (`createUserVisibleFiles`): one per first path
/// element. A missing link is created; anything else in its place (a file, a directory, a
/// link elsewhere) is removed without being followed, and the link created.
fn create_user_visible_files(
    target: &Path,
    payload: &Payload,
    vol: BorrowedFd<'_>,
) -> Result<(), WriteError> {
    let tops: BTreeSet<&str> = payload
        .keys()
        .map(|p| p.split('/').next().unwrap_or(p))
        .collect();
    for top in tops {
        let want = format!("{DATA_DIR}/{top}");
        match readlinkat(vol, top) {
            Ok(link) if link.as_bytes() == want.as_bytes() => continue,
            Err(Errno::ENOENT) => {}
            Ok(_) | Err(Errno::EINVAL) => {
                tracing::warn!(path = %target.join(top).display(), "replacing a foreign entry in the place of a volume file");
                remove_entry(vol, OsStr::new(top)).map_err(at_err(target, top))?;
            }
            Err(e) => return Err(at_err(target, top)(e)),
        }
        symlinkat(want.as_str(), vol, top).map_err(at_err(target, top))?;
    }
    Ok(())
}

/// The current data directory of the volume: `..data` when it is a symlink to one entry of
/// the volume named like a data directory that is a directory (opened without following a
/// symlink). Any other `..data` is corrupt and removed (the entry itself); then there is no
/// current data and the caller writes a fresh payload.
fn current_data(
    target: &Path,
    vol: BorrowedFd<'_>,
) -> Result<Option<(String, OwnedFd)>, WriteError> {
    let link = match readlinkat(vol, DATA_DIR) {
        Ok(link) => Some(link),
        Err(Errno::ENOENT) => return Ok(None),
        // not a symlink
        Err(Errno::EINVAL) => None,
        Err(e) => return Err(at_err(target, DATA_DIR)(e)),
    };
    if let Some(name) = link
        .as_ref()
        .filter(|l| is_data_dir_name(l.as_bytes()))
        .and_then(|l| l.to_str())
    {
        match open_dir_at(vol, name) {
            Ok(fd) => return Ok(Some((name.to_string(), fd))),
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => {}
            Err(e) => return Err(at_err(target, name)(e)),
        }
    }
    tracing::warn!(
        path = %target.join(DATA_DIR).display(),
        target = ?link,
        "volume data link is corrupt; removing it and writing the data again"
    );
    remove_entry(vol, OsStr::new(DATA_DIR)).map_err(at_err(target, DATA_DIR))?;
    Ok(None)
}

/// Atomically projects `payload` into `target` (which must exist and be a directory, not a
/// symlink) as the kubelet's `AtomicWriter.Write` does. `set_perms` runs on a freshly written
/// data directory before it is swapped in (the kubelet applies fsGroup ownership there). `now`
/// names the new data directory.
pub fn write_payload(
    target: &Path,
    payload: &Payload,
    now: jiff::Timestamp,
    set_perms: Option<SetPerms<'_>>,
) -> Result<WriteOutcome, WriteError> {
    let payload = clean_payload(payload)?;
    let vol = nix::fcntl::open(target, dir_flags(), Mode::empty()).map_err(at_err(target, ""))?;
    let vol = vol.as_fd();
    let old = current_data(target, vol)?;

    let mut to_remove = BTreeSet::new();
    let mut write = true;
    if let Some((old_name, old_fd)) = &old {
        let keep = paths_with_parents(&payload);
        match walk(old_fd.as_fd()).map_err(at_err(target, old_name))? {
            Some(current) => {
                to_remove = current.difference(&keep).cloned().collect();
                let changed = should_write_payload(&payload, old_fd.as_fd())
                    .map_err(at_err(target, old_name))?;
                write = changed || !to_remove.is_empty();
            }
            None => write = true,
        }
    }

    let mut outcome = WriteOutcome::Unchanged;
    if write {
        let (ts_name, ts_fd) = new_timestamp_dir(target, vol, now)?;
        let swap = || -> Result<(), WriteError> {
            write_payload_to_dir(target, &ts_name, &payload, ts_fd.as_fd())?;
            if let Some(set_perms) = set_perms {
                set_perms(vol, ts_fd.as_fd()).map_err(io_err(&target.join(&ts_name)))?;
            }
            // A crash between symlink and rename leaves a stale temporary link behind.
            remove_entry(vol, OsStr::new(NEW_DATA_DIR)).map_err(at_err(target, NEW_DATA_DIR))?;
            symlinkat(ts_name.as_str(), vol, NEW_DATA_DIR).map_err(at_err(target, NEW_DATA_DIR))?;
            renameat(vol, NEW_DATA_DIR, vol, DATA_DIR).map_err(|e| {
                let _ = unlinkat(vol, NEW_DATA_DIR, UnlinkatFlags::NoRemoveDir);
                at_err(target, DATA_DIR)(e)
            })
        };
        if let Err(e) = swap() {
            let _ = remove_entry(vol, OsStr::new(&ts_name));
            return Err(e);
        }
        outcome = WriteOutcome::Written(ts_name);
    }

    create_user_visible_files(target, &payload, vol)?;

    // Only top-level links are removed; deeper paths vanish with the old data directory. The
    // writer's own `..` names are never payload paths.
    let mut last_err = None;
    for path in to_remove
        .iter()
        .filter(|p| !p.contains('/') && !p.starts_with(".."))
    {
        if let Err(e) = remove_entry(vol, OsStr::new(path)) {
            tracing::warn!(path = %target.join(path).display(), error = %e, "pruning old user-visible path");
            last_err = Some(at_err(target, path)(e));
        }
    }
    if let Some(e) = last_err {
        return Err(e);
    }

    if let WriteOutcome::Written(new) = &outcome {
        // The old data directory, and any other data directory or temporary link left by a
        // crash or a corrupt `..data`: removed beneath the volume fd, never followed.
        let names = list(vol).map_err(at_err(target, ""))?;
        for name in names {
            let bytes = name.as_bytes();
            let stale = (is_data_dir_name(bytes) && bytes != new.as_bytes())
                || bytes == NEW_DATA_DIR.as_bytes();
            if stale {
                let rel = name.to_string_lossy().into_owned();
                remove_entry(vol, &name).map_err(at_err(target, &rel))?;
            }
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{symlink, PermissionsExt};

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
        // the hook gets the volume directory and the new data directory, with its files
        let record = |vol: BorrowedFd<'_>, data: BorrowedFd<'_>| {
            let a = openat(
                data,
                "a",
                OFlag::O_RDONLY | OFlag::O_NOFOLLOW,
                Mode::empty(),
            )?;
            assert_eq!(file_kind(&fstat(a.as_fd())?), SFlag::S_IFREG);
            seen.borrow_mut()
                .push((fstat(vol)?.st_ino, fstat(data)?.st_ino));
            Ok(())
        };
        let p = payload(&[("a", "1", 0o644)]);
        let WriteOutcome::Written(ts) =
            write_payload(dir.path(), &p, now(), Some(&record)).unwrap()
        else {
            panic!("expected a write")
        };
        use std::os::unix::fs::MetadataExt;
        let ino = |p: &Path| fs::symlink_metadata(p).unwrap().ino();
        assert_eq!(
            *seen.borrow(),
            [(ino(dir.path()), ino(&dir.path().join(&ts)))]
        );

        let fail = |_: BorrowedFd<'_>, _: BorrowedFd<'_>| Err(io::Error::other("no chown"));
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

    /// A directory outside the volume with files in it, and a way to see that nothing in it
    /// changed (entries, kinds, modes, owners, contents).
    struct Outside(tempfile::TempDir);

    impl Outside {
        fn new() -> Outside {
            let dir = tempfile::tempdir().unwrap();
            fs::write(dir.path().join("a"), "precious").unwrap();
            fs::set_permissions(dir.path().join("a"), fs::Permissions::from_mode(0o600)).unwrap();
            fs::create_dir(dir.path().join("d")).unwrap();
            fs::write(dir.path().join("d/f"), "also precious").unwrap();
            fs::set_permissions(dir.path().join("d"), fs::Permissions::from_mode(0o700)).unwrap();
            Outside(dir)
        }

        fn path(&self) -> &Path {
            self.0.path()
        }

        fn snapshot(&self) -> Vec<(String, u32, u32, u32, Vec<u8>)> {
            use std::os::unix::fs::MetadataExt;
            let mut out = Vec::new();
            let mut stack = vec![self.path().to_path_buf()];
            while let Some(dir) = stack.pop() {
                let meta = fs::symlink_metadata(&dir).unwrap();
                out.push((
                    dir.display().to_string(),
                    meta.mode(),
                    meta.uid(),
                    meta.gid(),
                    Vec::new(),
                ));
                for entry in fs::read_dir(&dir).unwrap() {
                    let path = entry.unwrap().path();
                    let meta = fs::symlink_metadata(&path).unwrap();
                    if meta.is_dir() {
                        stack.push(path);
                    } else {
                        let data = fs::read(&path).unwrap();
                        out.push((
                            path.display().to_string(),
                            meta.mode(),
                            meta.uid(),
                            meta.gid(),
                            data,
                        ));
                    }
                }
            }
            out.sort();
            out
        }
    }

    fn data_dir_of(dir: &Path) -> String {
        let link = fs::read_link(dir.join("..data")).unwrap();
        let name = link.to_str().unwrap().to_string();
        assert!(is_data_dir_name(name.as_bytes()), "{name}");
        assert!(fs::symlink_metadata(dir.join(&name)).unwrap().is_dir());
        name
    }

    #[test]
    fn data_dir_name_table() {
        let cases: &[(&str, bool)] = &[
            ("..2024_05_01_10_00_00.1234567890", true),
            ("..2024_05_01_10_00_00.1", true),
            ("..2024_05_01_10_00_00.", false),
            ("..2024_05_01_10_00_00.12a", false),
            ("..2024_05_01_10_00_00.1/x", false),
            ("..2024_05_01_10_00_00.1/../../x", false),
            ("../outside", false),
            ("..", false),
            ("..data", false),
            ("..data_tmp", false),
            ("/etc", false),
            ("..2024-05-01_10_00_00.1", false),
            ("2024_05_01_10_00_00.1", false),
            ("..2024_05_01_10_00_00.123456789012345678901", false),
        ];
        for (name, want) in cases {
            assert_eq!(is_data_dir_name(name.as_bytes()), *want, "{name}");
        }
    }

    /// `..data` re-pointed at a host directory (absolute, relative through `..`, a relative
    /// path with a `/`), at a non-directory, or replaced by a file or a directory: the writer
    /// removes the entry itself, writes a fresh payload, and nothing outside the volume is
    /// read into the volume, written, chmodded or removed.
    #[test]
    fn corrupt_data_link_is_replaced_and_never_followed() {
        type Plant = fn(&Path, &Path);
        let cases: &[(&str, Plant)] = &[
            ("absolute", |vol, out| {
                symlink(out, vol.join("..data")).unwrap()
            }),
            ("dot-dot", |vol, out| {
                let rel = Path::new("..").join(out.file_name().unwrap());
                symlink(rel, vol.join("..data")).unwrap()
            }),
            ("deep relative", |vol, out| {
                // from the volume up to `/`, then down to the outside directory
                let ups = vol.components().count() - 1;
                let rel =
                    PathBuf::from(vec![".."; ups].join("/")).join(out.strip_prefix("/").unwrap());
                symlink(&rel, vol.join("..data")).unwrap()
            }),
            ("data-shaped name that is a link out", |vol, out| {
                let name = "..2024_05_01_09_00_00.42";
                symlink(out, vol.join(name)).unwrap();
                symlink(name, vol.join("..data")).unwrap()
            }),
            ("data-shaped name that is missing", |vol, _| {
                symlink("..2024_05_01_09_00_00.43", vol.join("..data")).unwrap()
            }),
            ("a regular file", |vol, _| {
                fs::write(vol.join("..data"), "x").unwrap()
            }),
            ("a directory with a link out", |vol, out| {
                fs::create_dir(vol.join("..data")).unwrap();
                symlink(out, vol.join("..data/a")).unwrap()
            }),
        ];
        for (case, plant) in cases {
            // the volume and the outside directory are siblings, so `../<name>` reaches it
            let parent = tempfile::tempdir().unwrap();
            let outside = Outside(tempfile::tempdir_in(parent.path()).unwrap());
            fs::write(outside.path().join("a"), "precious").unwrap();
            fs::set_permissions(outside.path().join("a"), fs::Permissions::from_mode(0o600))
                .unwrap();
            fs::create_dir(outside.path().join("gone")).unwrap();
            let before = outside.snapshot();
            let vol = parent.path().join("vol");
            fs::create_dir(&vol).unwrap();
            let first = payload(&[("a", "1", 0o644)]);
            write_payload(&vol, &first, now(), None).unwrap();
            let old = data_dir_of(&vol);
            fs::remove_file(vol.join("..data")).unwrap();
            plant(&vol, outside.path());

            let chmod_all = |_: BorrowedFd<'_>, data: BorrowedFd<'_>| {
                for_each_beneath(data, &mut |fd, _| {
                    fchmod(fd, Mode::from_bits_truncate(0o777)).map_err(io::Error::from)
                })
            };
            let second = payload(&[("a", "2", 0o644), ("b", "3", 0o600)]);
            let outcome = write_payload(&vol, &second, now(), Some(&chmod_all));
            assert!(
                matches!(outcome, Ok(WriteOutcome::Written(_))),
                "{case}: {outcome:?}"
            );
            assert_eq!(outside.snapshot(), before, "{case}: outside changed");
            let data = data_dir_of(&vol);
            assert_ne!(data, old, "{case}");
            assert_eq!(fs::read_to_string(vol.join("a")).unwrap(), "2", "{case}");
            assert_eq!(fs::read_to_string(vol.join("b")).unwrap(), "3", "{case}");
            // a second pass finds the volume sound
            assert_eq!(
                write_payload(&vol, &second, now(), None).unwrap(),
                WriteOutcome::Unchanged,
                "{case}"
            );
            // no stale data directory, link or planted entry is left behind
            let mut names = listing(&vol);
            names.retain(|n| n != "<ts>");
            assert_eq!(names, ["..data", "a", "b"], "{case}");
        }
    }

    /// The old data directory (or something in it) swapped for a symlink out of the volume:
    /// comparing, pruning and removing it never follow the link.
    #[test]
    fn old_data_dir_swapped_for_a_link_is_not_followed() {
        type Plant = fn(&Path, &str, &Path);
        let cases: &[(&str, Plant)] = &[
            ("the data dir", |vol, old, out| {
                fs::remove_dir_all(vol.join(old)).unwrap();
                symlink(out, vol.join(old)).unwrap();
            }),
            ("a directory in it", |vol, old, out| {
                fs::remove_dir_all(vol.join(old).join("sub")).unwrap();
                symlink(out, vol.join(old).join("sub")).unwrap();
            }),
            ("a file in it", |vol, old, out| {
                fs::remove_file(vol.join(old).join("a")).unwrap();
                symlink(out.join("a"), vol.join(old).join("a")).unwrap();
            }),
        ];
        for (case, plant) in cases {
            let outside = Outside::new();
            let before = outside.snapshot();
            let vol = tempfile::tempdir().unwrap();
            let first = payload(&[("a", "precious", 0o644), ("sub/c", "x", 0o644)]);
            write_payload(vol.path(), &first, now(), None).unwrap();
            let old = data_dir_of(vol.path());
            plant(vol.path(), &old, outside.path());

            // the same payload: a link where a file was is a change, never "unchanged"
            let outcome = write_payload(vol.path(), &first, now(), None).unwrap();
            assert!(
                matches!(outcome, WriteOutcome::Written(_)),
                "{case}: {outcome:?}"
            );
            assert_eq!(outside.snapshot(), before, "{case}: outside changed");
            assert!(
                fs::symlink_metadata(vol.path().join(&old)).is_err(),
                "{case}"
            );
            assert_eq!(
                fs::read_to_string(vol.path().join("a")).unwrap(),
                "precious"
            );
            assert_eq!(fs::read_to_string(vol.path().join("sub/c")).unwrap(), "x");
        }
    }

    /// A top-level name replaced by a link to a host file, by a regular file, or by a
    /// directory holding a link out: the writer replaces the entry (never writing, truncating
    /// or chmodding through it) with its link into `..data`.
    #[test]
    fn planted_top_level_entries_are_replaced_without_following() {
        type Plant = fn(&Path, &Path);
        let cases: &[(&str, Plant)] = &[
            ("link to a host file", |vol, out| {
                symlink(out.join("a"), vol.join("a")).unwrap()
            }),
            ("link to a host dir", |vol, out| {
                symlink(out, vol.join("a")).unwrap()
            }),
            ("regular file", |vol, _| {
                fs::write(vol.join("a"), "planted").unwrap()
            }),
            ("directory with a link out", |vol, out| {
                fs::create_dir(vol.join("a")).unwrap();
                symlink(out.join("a"), vol.join("a/a")).unwrap()
            }),
        ];
        for (case, plant) in cases {
            let outside = Outside::new();
            let before = outside.snapshot();
            let vol = tempfile::tempdir().unwrap();
            let p = payload(&[("a", "mine", 0o644)]);
            write_payload(vol.path(), &p, now(), None).unwrap();
            fs::remove_file(vol.path().join("a")).unwrap();
            plant(vol.path(), outside.path());
            for round in 0..2 {
                let changed = payload(&[("a", if round == 0 { "mine" } else { "new" }, 0o600)]);
                write_payload(vol.path(), &changed, now(), None).unwrap();
            }
            assert_eq!(outside.snapshot(), before, "{case}: outside changed");
            assert_eq!(
                fs::read_link(vol.path().join("a")).unwrap(),
                PathBuf::from("..data/a"),
                "{case}"
            );
            assert_eq!(
                fs::read_to_string(vol.path().join("a")).unwrap(),
                "new",
                "{case}"
            );
        }
    }

    /// The set-permissions hook (fsGroup) reaches only the new data directory: links a
    /// container planted elsewhere in the volume (`..data`, a top-level name, the old data)
    /// lead nowhere.
    #[test]
    fn set_perms_changes_nothing_outside_the_new_data() {
        let parent = tempfile::tempdir().unwrap();
        let outside = Outside(tempfile::tempdir_in(parent.path()).unwrap());
        fs::write(outside.path().join("a"), "precious").unwrap();
        fs::set_permissions(outside.path().join("a"), fs::Permissions::from_mode(0o600)).unwrap();
        let before = outside.snapshot();
        let vol = parent.path().join("vol");
        fs::create_dir(&vol).unwrap();
        write_payload(
            &vol,
            &payload(&[("a", "1", 0o600), ("d/e", "2", 0o600)]),
            now(),
            None,
        )
        .unwrap();
        let old = data_dir_of(&vol);
        symlink(outside.path().join("a"), vol.join(&old).join("planted")).unwrap();
        fs::remove_file(vol.join("a")).unwrap();
        symlink(outside.path().join("a"), vol.join("a")).unwrap();
        fs::remove_file(vol.join("..data")).unwrap();
        let rel = Path::new("..").join(outside.path().file_name().unwrap());
        symlink(&rel, vol.join("..data")).unwrap();

        let visited = std::cell::RefCell::new(Vec::new());
        let hook = |_: BorrowedFd<'_>, data: BorrowedFd<'_>| {
            for_each_beneath(data, &mut |fd, is_dir| {
                visited.borrow_mut().push(is_dir);
                fchmod(fd, Mode::from_bits_truncate(0o777))?;
                fchown(fd, None, Some(nix::unistd::getegid())).map_err(io::Error::from)
            })
        };
        let p = payload(&[("a", "9", 0o600), ("d/e", "2", 0o600)]);
        write_payload(&vol, &p, now(), Some(&hook)).unwrap();
        assert_eq!(outside.snapshot(), before);
        // the data directory, `d`, `a` and `d/e`
        let mut seen = visited.into_inner();
        seen.sort();
        assert_eq!(seen, [false, false, true, true]);
        let data = data_dir_of(&vol);
        assert_eq!(mode(&vol.join(&data).join("a")), 0o777);
        assert_eq!(fs::read_to_string(vol.join("a")).unwrap(), "9");
    }

    /// Anything in place of a file of the data directory — a FIFO that would block a reader,
    /// a huge file — is compared without blocking and without reading more than the expected
    /// size.
    #[test]
    fn comparing_old_data_neither_blocks_nor_reads_past_the_expected_size() {
        let vol = tempfile::tempdir().unwrap();
        let p = payload(&[("a", "1", 0o644), ("b", "2", 0o644)]);
        write_payload(vol.path(), &p, now(), None).unwrap();
        let old = data_dir_of(vol.path());
        fs::remove_file(vol.path().join(&old).join("a")).unwrap();
        nix::unistd::mkfifo(
            &vol.path().join(&old).join("a"),
            Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        assert!(matches!(
            write_payload(vol.path(), &p, now(), None).unwrap(),
            WriteOutcome::Written(_)
        ));
        assert_eq!(fs::read_to_string(vol.path().join("a")).unwrap(), "1");

        // a sparse 64 GiB file in place of `b` is not read: its size already differs
        let old = data_dir_of(vol.path());
        let b = vol.path().join(&old).join("b");
        fs::remove_file(&b).unwrap();
        fs::File::create(&b).unwrap().set_len(1 << 36).unwrap();
        assert!(matches!(
            write_payload(vol.path(), &p, now(), None).unwrap(),
            WriteOutcome::Written(_)
        ));
        assert_eq!(fs::read_to_string(vol.path().join("b")).unwrap(), "2");
    }
}
