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
        std::fs::create_dir_all(&self.dir).map_err(|source| StoreError::Io {
            path: self.dir.clone(),
            source,
        })?;
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

/// Writes a file readable by its owner only (it holds a private key), replacing any file of
/// that name.
pub fn write_private(path: &Path, content: &[u8]) -> Result<(), StoreError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        file.write_all(content)?;
        file.sync_all()
    };
    write().map_err(|source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    })
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
