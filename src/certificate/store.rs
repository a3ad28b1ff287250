//! The certificate files, laid out as the kubelet's `certificate.FileStore`: each issued pair
//! is written once as `<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` (certificate chain, then key;
//! readable by root only) and `<prefix>-current.pem` is a symlink to the newest, swapped in
//! with a rename so a reader never sees a half-written pair. Kubeconfigs and operators point at
//! the `-current` name.

use std::path::{Path, PathBuf};

use jiff::Timestamp;

use super::pair::{CertifiedPair, PairError};

/// `kubelet-client`: the node's client certificate.
pub const CLIENT_PREFIX: &str = "kubelet-client";
/// `kubelet-server`: the kubelet API's serving certificate.
pub const SERVER_PREFIX: &str = "kubelet-server";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Invalid {
        path: PathBuf,
        #[source]
        source: PairError,
    },
}

/// One certificate's files in a directory.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
    prefix: &'static str,
    /// A certificate and key configured elsewhere (`tlsCertFile`/`tlsPrivateKeyFile`, or the
    /// kubeconfig's), used when the store has none of its own yet.
    fallback: Option<(PathBuf, PathBuf)>,
}

impl FileStore {
    pub fn new(dir: &Path, prefix: &'static str, fallback: Option<(PathBuf, PathBuf)>) -> Self {
        FileStore {
            dir: dir.to_path_buf(),
            prefix,
            fallback,
        }
    }

    /// `<dir>/<prefix>-current.pem`: what kubeconfigs name.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The current pair: `<prefix>-current.pem`, else the fallback files, else `None`. A file
    /// that exists but does not hold a certificate and its key is an error naming it.
    pub fn current(&self) -> Result<Option<CertifiedPair>, StoreError> {
        let current = self.current_path();
        // The pair holds the private key: a file left readable by others is fixed first.
        if let Some(target) = link_target_in(&self.dir, &current) {
            restrict_private_file(&target)?;
        }
        if let Some(pem) = read_if_exists(&current)? {
            return CertifiedPair::from_combined_pem(&pem)
                .map(Some)
                .map_err(|source| StoreError::Invalid {
                    path: current,
                    source,
                });
        }
        if let Some((cert, key)) = &self.fallback {
            if let (Some(cert_pem), Some(key_pem)) = (read_if_exists(cert)?, read_if_exists(key)?) {
                return CertifiedPair::from_pem(&cert_pem, &key_pem)
                    .map(Some)
                    .map_err(|source| StoreError::Invalid {
                        path: cert.clone(),
                        source,
                    });
            }
        }
        Ok(None)
    }

    /// Writes a newly issued pair and makes it current; returns it parsed. The pair is checked
    /// before anything is written: a bad certificate never becomes current.
    pub fn update(
        &self,
        cert_pem: &[u8],
        key_pem: &[u8],
        now: Timestamp,
    ) -> Result<CertifiedPair, StoreError> {
        let pair =
            CertifiedPair::from_pem(cert_pem, key_pem).map_err(|source| StoreError::Invalid {
                path: self.current_path(),
                source,
            })?;
        ensure_private_dir(&self.dir)?;
        let name = format!("{}-{}.pem", self.prefix, file_time(now));
        let file = self.dir.join(&name);
        write_private(&file, pair.combined_pem().as_bytes())?;
        // A fresh symlink next to the current one, renamed over it: atomic, as the kubelet's
        // `updateSymlink` (through `<prefix>-updated.pem`).
        let updated = self.dir.join(format!("{}-updated.pem", self.prefix));
        let _ = std::fs::remove_file(&updated);
        std::os::unix::fs::symlink(&name, &updated).map_err(|source| StoreError::Io {
            path: updated.clone(),
            source,
        })?;
        let current = self.current_path();
        std::fs::rename(&updated, &current).map_err(|source| StoreError::Io {
            path: current,
            source,
        })?;
        Ok(pair)
    }
}

/// `2006-01-02-15-04-05`, UTC: the kubelet's pair file time format.
pub fn file_time(now: Timestamp) -> String {
    now.strftime("%Y-%m-%d-%H-%M-%S").to_string()
}

fn read_if_exists(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StoreError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The mode of a file that holds a private key or a token.
pub const PRIVATE_FILE_MODE: u32 = 0o600;
/// The mode of the certificate directory (`certDir`).
pub const PRIVATE_DIR_MODE: u32 = 0o700;

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Makes an open file owner-only and owned by this process's user: `fchmod`/`fchown` on the
/// descriptor, never on the path (which could be swapped in between). Returns whether it had
/// to change anything.
fn restrict_open(file: &std::fs::File, mode: u32) -> std::io::Result<bool> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = file.metadata()?;
    let mut changed = false;
    let (uid, gid) = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    if meta.uid() != uid || meta.gid() != gid {
        std::os::unix::fs::fchown(file, Some(uid), Some(gid))?;
        changed = true;
    }
    if meta.mode() & 0o7777 != mode {
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        changed = true;
    }
    Ok(changed)
}

/// Writes a file readable by its owner only (it holds a private key), replacing the content of
/// any file of that name. A symlink at `path` is refused (`O_NOFOLLOW`), and a file that
/// already exists with a wider mode (or another owner) is made 0600 through the open
/// descriptor before anything is written to it.
pub fn write_private(path: &Path, content: &[u8]) -> Result<(), StoreError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(PRIVATE_FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?;
        if !file.metadata()?.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        restrict_open(&file, PRIVATE_FILE_MODE)?;
        file.write_all(content)?;
        file.sync_all()
    };
    write().map_err(io_error(path))
}

/// Makes an existing key file owner-only (0600, this process's user) if it is not: opened
/// without following a symlink, changed through the descriptor. `Ok(false)` when there is no
/// such file or nothing had to change.
pub fn restrict_private_file(path: &Path) -> Result<bool, StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        // O_NONBLOCK: a FIFO planted at the path must not hang the open.
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => return Err(io_error(path)(source)),
    };
    let meta = file.metadata().map_err(io_error(path))?;
    if !meta.is_file() {
        return Err(io_error(path)(std::io::Error::other("not a regular file")));
    }
    let changed = restrict_open(&file, PRIVATE_FILE_MODE).map_err(io_error(path))?;
    if changed {
        tracing::warn!(path = %path.display(), "a key file was readable by others or owned by another user; made it 0600 and owned by this process's user");
    }
    Ok(changed)
}

/// Creates `dir` (and its parents) if needed and makes it 0700: the certificate directory
/// holds private keys, and nobody else needs to list it. An existing directory with a wider
/// mode is narrowed through an open descriptor. `dir` itself is the operator's setting, so a
/// symlink there is followed.
pub fn ensure_private_dir(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io_error(parent))?;
    }
    match std::fs::DirBuilder::new()
        .mode(PRIVATE_DIR_MODE)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(io_error(dir)(source)),
    }
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)
        .map_err(io_error(dir))?;
    if restrict_open(&handle, PRIVATE_DIR_MODE).map_err(io_error(dir))? {
        tracing::info!(dir = %dir.display(), "made the certificate directory 0700");
    }
    Ok(())
}

/// The file a `<prefix>-current.pem` link names, when it is in the store's directory (the
/// kubelet writes an absolute target, nodelet a bare name).
fn link_target_in(dir: &Path, link: &Path) -> Option<PathBuf> {
    let target = std::fs::read_link(link).ok()?;
    let target = if target.is_absolute() {
        target
    } else {
        dir.join(target)
    };
    (target.parent() == Some(dir)).then_some(target)
}

#[cfg(test)]
mod tests {
    use super::super::pair::tests::issued;
    use super::*;

    #[test]
    fn update_writes_a_dated_file_and_swaps_the_current_link() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path(), CLIENT_PREFIX, None);
        assert!(store.current().unwrap().is_none(), "empty store");
        let nb: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let na: Timestamp = "2030-01-01T01:00:00Z".parse().unwrap();
        let (c1, k1) = issued("system:node:a", &["system:nodes"], &[], nb, na);
        let first = store
            .update(
                c1.as_bytes(),
                k1.as_bytes(),
                "2030-01-01T00:00:05Z".parse().unwrap(),
            )
            .unwrap();
        let (c2, k2) = issued("system:node:a", &["system:nodes"], &[], nb, na);
        let second = store
            .update(
                c2.as_bytes(),
                k2.as_bytes(),
                "2030-01-01T00:40:00Z".parse().unwrap(),
            )
            .unwrap();
        assert_ne!(first.info.serial, second.info.serial);
        let link = std::fs::read_link(store.current_path()).unwrap();
        assert_eq!(link, Path::new("kubelet-client-2030-01-01-00-40-00.pem"));
        assert!(dir
            .path()
            .join("kubelet-client-2030-01-01-00-00-05.pem")
            .exists());
        assert!(!dir.path().join("kubelet-client-updated.pem").exists());
        let current = store.current().unwrap().unwrap();
        assert_eq!(current.info.serial, second.info.serial);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(link))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    fn mode_of(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    fn set_mode(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A key file that already exists with a wider mode ends 0600 when it is written again;
    /// a symlink at its name is refused, never followed.
    #[test]
    fn write_private_narrows_an_existing_file_and_refuses_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k.pem");
        for mode in [0o644, 0o666, 0o640, 0o604, 0o4755] {
            std::fs::write(&key, "old").unwrap();
            set_mode(&key, mode);
            write_private(&key, b"secret").unwrap();
            assert_eq!(mode_of(&key), 0o600, "from {mode:o}");
            assert_eq!(std::fs::read(&key).unwrap(), b"secret");
        }
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "untouched").unwrap();
        set_mode(&elsewhere, 0o644);
        let link = dir.path().join("link.pem");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        assert!(write_private(&link, b"secret").is_err());
        assert_eq!(std::fs::read(&elsewhere).unwrap(), b"untouched");
        assert_eq!(mode_of(&elsewhere), 0o644);
    }

    /// Kept key files are narrowed on load: the store's current pair, through its link.
    #[test]
    fn existing_key_files_and_the_cert_dir_are_made_private() {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("pki");
        std::fs::create_dir(&certs).unwrap();
        set_mode(&certs, 0o755);
        let store = FileStore::new(&certs, CLIENT_PREFIX, None);
        let nb: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let (c, k) = issued("system:node:a", &["system:nodes"], &[], nb, nb);
        store.update(c.as_bytes(), k.as_bytes(), nb).unwrap();
        assert_eq!(mode_of(&certs), 0o700, "certDir");
        let target = certs.join(std::fs::read_link(store.current_path()).unwrap());
        set_mode(&target, 0o644);
        assert!(store.current().unwrap().is_some());
        assert_eq!(mode_of(&target), 0o600, "the current pair");
        // The kubelet's absolute link target is followed as well, inside the directory only.
        std::fs::remove_file(store.current_path()).unwrap();
        std::os::unix::fs::symlink(&target, store.current_path()).unwrap();
        set_mode(&target, 0o664);
        assert!(store.current().unwrap().is_some());
        assert_eq!(mode_of(&target), 0o600);

        // restrict_private_file: a missing file is no change, a symlink is refused.
        let key = dir.path().join("kubelet.key");
        assert!(!restrict_private_file(&key).unwrap());
        std::fs::write(&key, "k").unwrap();
        set_mode(&key, 0o644);
        assert!(restrict_private_file(&key).unwrap());
        assert_eq!(mode_of(&key), 0o600);
        assert!(!restrict_private_file(&key).unwrap(), "already private");
        let link = dir.path().join("link.key");
        std::os::unix::fs::symlink(&key, &link).unwrap();
        assert!(restrict_private_file(&link).is_err());

        // ensure_private_dir: created 0700, or narrowed when it exists.
        let fresh = dir.path().join("a/b/certs");
        ensure_private_dir(&fresh).unwrap();
        assert_eq!(mode_of(&fresh), 0o700);
        set_mode(&fresh, 0o777);
        ensure_private_dir(&fresh).unwrap();
        assert_eq!(mode_of(&fresh), 0o700);
    }

    #[test]
    fn falls_back_to_configured_files_and_names_bad_ones() {
        let dir = tempfile::tempdir().unwrap();
        let nb: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let (cert, key) = issued("kubelet", &[], &["n1"], nb, nb);
        let cert_path = dir.path().join("tls.crt");
        let key_path = dir.path().join("tls.key");
        std::fs::write(&cert_path, &cert).unwrap();
        std::fs::write(&key_path, &key).unwrap();
        let store = FileStore::new(
            &dir.path().join("pki"),
            SERVER_PREFIX,
            Some((cert_path.clone(), key_path)),
        );
        assert_eq!(
            store.current().unwrap().unwrap().info.common_name,
            "kubelet"
        );
        // A current file of the store's own wins; a broken one is an error naming it.
        std::fs::create_dir_all(dir.path().join("pki")).unwrap();
        std::fs::write(store.current_path(), "garbage").unwrap();
        let error = store.current().unwrap_err().to_string();
        assert!(
            error.contains("kubelet-server-current.pem") && error.contains("no PEM certificate"),
            "{error}"
        );
        // Nothing is written for a pair that does not parse.
        std::fs::remove_file(store.current_path()).unwrap();
        let error = store
            .update(b"nope", key.as_bytes(), nb)
            .unwrap_err()
            .to_string();
        assert!(error.contains("no PEM certificate"), "{error}");
        assert!(!store.current_path().exists());
    }
}
