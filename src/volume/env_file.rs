//! Reading an environment file (`fileKeyRef`) out of a pod's emptyDir. The volume is the
//! container's to write, so the file is hostile: it is opened beneath the volume's directory
//! with symlinks resolved inside it (`openat2` `RESOLVE_IN_ROOT`, the kernel's form of the
//! kubelet's `securejoin.SecureJoin`, without its check-then-open race), must be a regular
//! file (a FIFO cannot stall the read: it is opened non-blocking and refused), and is read up
//! to a bound.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, Mode, SFlag};

/// How much of an environment file is read: more than any environment a process can be given
/// (the kernel takes 128 KiB per variable, and all of them must fit a quarter of the stack).
pub const MAX_ENV_FILE: u64 = 4 << 20;

/// `openat2` answers EAGAIN when a rename raced the lookup; it is retried this often.
const OPENAT2_RETRIES: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum EnvFileReadError {
    #[error("path {path:?} must not contain '..'")]
    BadPath { path: String },
    #[error("open {}: {source}", path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("{} is not a regular file", path.display())]
    NotAFile { path: PathBuf },
    #[error("read {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
}

/// The first `limit` bytes of the file `rel` beneath `volume_dir`, and whether there was more.
/// Blocking: call it off the async runtime.
pub fn read_env_file(
    volume_dir: &Path,
    rel: &str,
    limit: u64,
) -> Result<(Vec<u8>, bool), EnvFileReadError> {
    let full = volume_dir.join(rel);
    let rel_path = Path::new(rel);
    if rel.is_empty()
        || rel_path
            .components()
            .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(EnvFileReadError::BadPath { path: rel.into() });
    }
    let open_err = |source: io::Error| EnvFileReadError::Open {
        path: full.clone(),
        source,
    };
    let dir: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(volume_dir)
        .map_err(open_err)?
        .into();
    let file = open_in_root(&dir, rel_path).map_err(|e| open_err(e.into()))?;
    let stat = fstat(&file).map_err(|e| open_err(e.into()))?;
    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err(EnvFileReadError::NotAFile { path: full });
    }
    let mut content = Vec::new();
    std::fs::File::from(file)
        .take(limit.saturating_add(1))
        .read_to_end(&mut content)
        .map_err(|source| EnvFileReadError::Read {
            path: full.clone(),
            source,
        })?;
    let truncated = content.len() as u64 > limit;
    content.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok((content, truncated))
}

const LEAF: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_NONBLOCK)
    .union(OFlag::O_NOCTTY)
    .union(OFlag::O_CLOEXEC);

/// Opens `rel` beneath `dir`, symlinks resolved as if `dir` were the root. On a kernel
/// without `openat2` (before 5.6) every element is opened without following a symlink.
fn open_in_root(dir: &OwnedFd, rel: &Path) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(LEAF)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    for _ in 0..OPENAT2_RETRIES {
        match openat2(dir.as_fd(), rel, how) {
            Err(Errno::EAGAIN) => continue,
            Err(Errno::ENOSYS) => return open_no_symlinks(dir, rel),
            other => return other,
        }
    }
    Err(Errno::EAGAIN)
}

fn open_no_symlinks(dir: &OwnedFd, rel: &Path) -> nix::Result<OwnedFd> {
    let names: Vec<&OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    let Some((last, parents)) = names.split_last() else {
        return Err(Errno::EISDIR);
    };
    let mut current: Option<OwnedFd> = None;
    for name in parents {
        let base = current.as_ref().unwrap_or(dir).as_fd();
        current = Some(openat(
            base,
            *name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?);
    }
    let base = current.as_ref().unwrap_or(dir).as_fd();
    openat(base, *last, LEAF | OFlag::O_NOFOLLOW, Mode::empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn reads_beneath_the_volume_only() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.env"), "S='host'\n").unwrap();
        let volume = tempfile::tempdir().unwrap();
        let v = volume.path();
        std::fs::create_dir(v.join("sub")).unwrap();
        std::fs::write(v.join("sub/a.env"), "A='1'\n").unwrap();
        // A link within the volume is followed inside it; absolute links and `..` resolve
        // against the volume as the root, never the host's.
        symlink("sub/a.env", v.join("inside.env")).unwrap();
        symlink(outside.path().join("secret.env"), v.join("abs.env")).unwrap();
        symlink("../../../../../../etc/hostname", v.join("up.env")).unwrap();
        symlink("/sub/a.env", v.join("rooted.env")).unwrap();
        nix::unistd::mkfifo(&v.join("fifo.env"), Mode::from_bits_truncate(0o600)).unwrap();

        let read = |rel: &str| {
            read_env_file(v, rel, 1024).map(|(c, t)| (String::from_utf8(c).unwrap(), t))
        };
        assert_eq!(read("sub/a.env").unwrap(), ("A='1'\n".into(), false));
        assert_eq!(read("./sub/a.env").unwrap().0, "A='1'\n");
        // The API allows an absolute path: it is taken inside the volume, as SecureJoin does.
        assert_eq!(read("/sub/a.env").unwrap().0, "A='1'\n");
        assert_eq!(read("inside.env").unwrap().0, "A='1'\n");
        assert_eq!(read("rooted.env").unwrap().0, "A='1'\n");
        for escaping in ["abs.env", "up.env"] {
            let err = read(escaping).unwrap_err();
            assert!(
                matches!(err, EnvFileReadError::Open { .. }),
                "{escaping}: {err}"
            );
        }
        assert!(matches!(
            read("fifo.env").unwrap_err(),
            EnvFileReadError::NotAFile { .. }
        ));
        assert!(matches!(
            read("sub").unwrap_err(),
            EnvFileReadError::NotAFile { .. }
        ));
        assert!(matches!(
            read("missing.env").unwrap_err(),
            EnvFileReadError::Open { .. }
        ));
        assert!(matches!(
            read("/etc/hostname").unwrap_err(),
            EnvFileReadError::Open { .. }
        ));
        for bad in ["", "../x.env", "sub/../../x", "/.."] {
            assert!(
                matches!(read(bad).unwrap_err(), EnvFileReadError::BadPath { .. }),
                "{bad}"
            );
        }
        // The volume directory itself replaced by a link is not followed.
        let link = outside.path().join("volume-link");
        symlink(v, &link).unwrap();
        assert!(read_env_file(&link, "sub/a.env", 1024).is_err());
    }

    #[test]
    fn reads_at_most_the_limit() {
        let volume = tempfile::tempdir().unwrap();
        std::fs::write(volume.path().join("big.env"), "x".repeat(100)).unwrap();
        let (content, truncated) = read_env_file(volume.path(), "big.env", 10).unwrap();
        assert_eq!((content.len(), truncated), (10, true));
        let (content, truncated) = read_env_file(volume.path(), "big.env", 100).unwrap();
        assert_eq!((content.len(), truncated), (100, false));
    }

    #[test]
    fn without_openat2_no_link_is_followed() {
        let volume = tempfile::tempdir().unwrap();
        let v = volume.path();
        std::fs::create_dir(v.join("sub")).unwrap();
        std::fs::write(v.join("sub/a.env"), "A='1'\n").unwrap();
        symlink("sub", v.join("link")).unwrap();
        symlink("sub/a.env", v.join("file-link")).unwrap();
        let dir: OwnedFd = std::fs::File::open(v).unwrap().into();
        assert!(open_no_symlinks(&dir, Path::new("sub/a.env")).is_ok());
        for linked in ["link/a.env", "file-link"] {
            let err = open_no_symlinks(&dir, Path::new(linked)).unwrap_err();
            assert!(
                matches!(err, Errno::ELOOP | Errno::ENOTDIR),
                "{linked}: {err}"
            );
        }
    }
}
