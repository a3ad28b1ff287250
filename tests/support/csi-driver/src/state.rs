//! The driver's state directory: backing storage and per-volume records. Every entry is created,
//! opened and removed beneath a directory fd with `O_NOFOLLOW`: the volume contents are the
//! container's to write, and a symlink planted there is never followed out of the state dir.
//!
//! ```text
//! <state>/volumes/<id>      backing directory of a mount volume
//! <state>/block/<id>.img    sparse backing file of a block volume
//! <state>/block/<id>.dev    the loop device it is attached to
//! <state>/capacity/<id>     the volume's size after NodeExpandVolume (bytes, decimal)
//! <state>/ephemeral/<id>    marks an inline (ephemeral) volume, removed at unpublish
//! <state>/abnormal/<id>     written by a test: the volume's condition is abnormal, content = message
//! ```
//! `<id>` is the volume id escaped to one path component ([`escape_id`]).

use std::ffi::{CStr, CString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{ftruncate, unlinkat, UnlinkatFlags};

/// The subdirectories of the state dir.
pub const VOLUMES: &str = "volumes";
pub const BLOCK: &str = "block";
pub const CAPACITY: &str = "capacity";
pub const EPHEMERAL: &str = "ephemeral";
pub const ABNORMAL: &str = "abnormal";
const SUBDIRS: [&str; 5] = [VOLUMES, BLOCK, CAPACITY, EPHEMERAL, ABNORMAL];

/// How deep and how many entries the walks (used bytes, removal) go before they stop.
const MAX_DEPTH: usize = 64;
const MAX_ENTRIES: usize = 200_000;
/// Records (capacity, device, condition message) are small.
const MAX_RECORD: u64 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("volume id {0:?} is too long once escaped to a file name")]
    IdTooLong(String),
    #[error("{op} {path}: {errno}")]
    Sys {
        op: &'static str,
        path: String,
        errno: Errno,
    },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a directory or regular file the driver made")]
    Unexpected { path: String },
    #[error("{path} has more than {MAX_DEPTH} levels or {MAX_ENTRIES} entries")]
    TooBig { path: String },
}

/// `id` as one file name: ASCII letters, digits, `-` and `_` kept, every other byte `%XX`, so
/// `.`, `..` and `/` cannot come out of it.
pub fn escape_id(id: &str) -> Result<String, StateError> {
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    // Room for the `.img`/`.dev` suffixes within NAME_MAX.
    if out.len() > 250 {
        return Err(StateError::IdTooLong(id.to_string()));
    }
    Ok(out)
}

/// `/proc/self/fd/N`: a path naming exactly the file `fd` holds, whatever happens to the names
/// leading to it (the source of a bind mount).
pub fn fd_path(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn cstring(name: &str) -> CString {
    // Escaped ids and the fixed names hold no NUL.
    CString::new(name).unwrap_or_default()
}

pub struct StateDir {
    path: PathBuf,
    root: OwnedFd,
}

const DIR_FLAGS: OFlag = OFlag::O_DIRECTORY
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC)
    .union(OFlag::O_RDONLY);

impl StateDir {
    /// Creates (the CLI's path is trusted) and opens the state dir and its subdirectories.
    pub fn open(path: &Path) -> Result<Self, StateError> {
        std::fs::create_dir_all(path).map_err(|source| StateError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let root =
            nix::fcntl::open(path, DIR_FLAGS, Mode::empty()).map_err(|errno| StateError::Sys {
                op: "open",
                path: path.display().to_string(),
                errno,
            })?;
        let state = Self {
            path: path.to_path_buf(),
            root,
        };
        for sub in SUBDIRS {
            state.mkdir_in(state.root.as_fd(), sub, &state.path)?;
        }
        Ok(state)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn shown(&self, sub: &str, name: &str) -> String {
        self.path.join(sub).join(name).display().to_string()
    }

    fn mkdir_in(&self, dir: BorrowedFd<'_>, name: &str, shown: &Path) -> Result<(), StateError> {
        match mkdirat(dir, name, Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(Errno::EEXIST) => Ok(()),
            Err(errno) => Err(StateError::Sys {
                op: "mkdir",
                path: shown.join(name).display().to_string(),
                errno,
            }),
        }
    }

    fn subdir(&self, sub: &str) -> Result<OwnedFd, StateError> {
        openat(self.root.as_fd(), sub, DIR_FLAGS, Mode::empty()).map_err(|errno| StateError::Sys {
            op: "open",
            path: self.path.join(sub).display().to_string(),
            errno,
        })
    }

    /// The backing directory of volume `id`, created if missing; an `O_PATH` fd on it.
    pub fn ensure_volume_dir(&self, id: &str) -> Result<OwnedFd, StateError> {
        let name = escape_id(id)?;
        let volumes = self.subdir(VOLUMES)?;
        self.mkdir_in(volumes.as_fd(), &name, &self.path.join(VOLUMES))?;
        self.open_volume_dir(&volumes, &name)?
            .ok_or_else(|| StateError::Unexpected {
                path: self.shown(VOLUMES, &name),
            })
    }

    /// The backing directory of volume `id` if it exists.
    pub fn volume_dir(&self, id: &str) -> Result<Option<OwnedFd>, StateError> {
        let name = escape_id(id)?;
        let volumes = self.subdir(VOLUMES)?;
        self.open_volume_dir(&volumes, &name)
    }

    fn open_volume_dir(
        &self,
        volumes: &OwnedFd,
        name: &str,
    ) -> Result<Option<OwnedFd>, StateError> {
        let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        match openat(volumes.as_fd(), name, flags, Mode::empty()) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::ENOENT) => Ok(None),
            Err(errno) => Err(StateError::Sys {
                op: "open",
                path: self.shown(VOLUMES, name),
                errno,
            }),
        }
    }

    /// Removes the backing directory of `id` and everything in it, never following a symlink.
    pub fn remove_volume_dir(&self, id: &str) -> Result<(), StateError> {
        let name = escape_id(id)?;
        let volumes = self.subdir(VOLUMES)?;
        let mut budget = MAX_ENTRIES;
        remove_entry(volumes.as_fd(), &cstring(&name), 0, &mut budget).map_err(|err| match err {
            WalkError::Sys(errno) => StateError::Sys {
                op: "remove",
                path: self.shown(VOLUMES, &name),
                errno,
            },
            WalkError::TooBig => StateError::TooBig {
                path: self.shown(VOLUMES, &name),
            },
        })
    }

    /// Bytes in regular files under the backing directory of `id` (apparent sizes), a walk
    /// bounded in depth and entries that never follows symlinks; `None` without a backing dir.
    pub fn used_bytes(&self, id: &str) -> Result<Option<u64>, StateError> {
        let name = escape_id(id)?;
        let volumes = self.subdir(VOLUMES)?;
        let dir = match openat(volumes.as_fd(), name.as_str(), DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(errno) => {
                return Err(StateError::Sys {
                    op: "open",
                    path: self.shown(VOLUMES, &name),
                    errno,
                })
            }
        };
        let mut budget = MAX_ENTRIES;
        let mut total = 0u64;
        sum_sizes(dir, 0, &mut budget, &mut total).map_err(|errno| StateError::Sys {
            op: "walk",
            path: self.shown(VOLUMES, &name),
            errno,
        })?;
        Ok(Some(total))
    }

    /// A small record file `<state>/<sub>/<name>`, `None` if absent.
    pub fn read_record(&self, sub: &str, name: &str) -> Result<Option<String>, StateError> {
        let dir = self.subdir(sub)?;
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let fd = match openat(dir.as_fd(), name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(errno) => {
                return Err(StateError::Sys {
                    op: "open",
                    path: self.shown(sub, name),
                    errno,
                })
            }
        };
        let stat = fstat(&fd).map_err(|errno| StateError::Sys {
            op: "stat",
            path: self.shown(sub, name),
            errno,
        })?;
        if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Err(StateError::Unexpected {
                path: self.shown(sub, name),
            });
        }
        let mut text = String::new();
        std::fs::File::from(fd)
            .take(MAX_RECORD)
            .read_to_string(&mut text)
            .map_err(|source| StateError::Io {
                path: self.shown(sub, name),
                source,
            })?;
        Ok(Some(text))
    }

    /// Writes a record through a temporary file and a rename, so a reader sees old or new.
    pub fn write_record(&self, sub: &str, name: &str, content: &str) -> Result<(), StateError> {
        let dir = self.subdir(sub)?;
        let tmp = format!(".{name}.tmp");
        let _ = unlinkat(dir.as_fd(), tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(
            dir.as_fd(),
            tmp.as_str(),
            flags,
            Mode::from_bits_truncate(0o644),
        )
        .map_err(|errno| StateError::Sys {
            op: "create",
            path: self.shown(sub, &tmp),
            errno,
        })?;
        std::fs::File::from(fd)
            .write_all(content.as_bytes())
            .map_err(|source| StateError::Io {
                path: self.shown(sub, &tmp),
                source,
            })?;
        nix::fcntl::renameat(dir.as_fd(), tmp.as_str(), dir.as_fd(), name).map_err(|errno| {
            StateError::Sys {
                op: "rename",
                path: self.shown(sub, name),
                errno,
            }
        })
    }

    /// Removes a record file; absent is fine.
    pub fn remove_record(&self, sub: &str, name: &str) -> Result<(), StateError> {
        let dir = self.subdir(sub)?;
        match unlinkat(dir.as_fd(), name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(errno) => Err(StateError::Sys {
                op: "unlink",
                path: self.shown(sub, name),
                errno,
            }),
        }
    }

    /// The sparse backing file of block volume `id`, created or grown to `size` bytes; its path.
    pub fn ensure_block_image(&self, id: &str, size: u64) -> Result<PathBuf, StateError> {
        let name = format!("{}.img", escape_id(id)?);
        let dir = self.subdir(BLOCK)?;
        let flags = OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(
            dir.as_fd(),
            name.as_str(),
            flags,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|errno| StateError::Sys {
            op: "create",
            path: self.shown(BLOCK, &name),
            errno,
        })?;
        let stat = fstat(&fd).map_err(|errno| StateError::Sys {
            op: "stat",
            path: self.shown(BLOCK, &name),
            errno,
        })?;
        if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Err(StateError::Unexpected {
                path: self.shown(BLOCK, &name),
            });
        }
        let size = i64::try_from(size).unwrap_or(i64::MAX);
        if stat.st_size < size {
            ftruncate(&fd, size).map_err(|errno| StateError::Sys {
                op: "truncate",
                path: self.shown(BLOCK, &name),
                errno,
            })?;
        }
        Ok(self.path.join(BLOCK).join(name))
    }
}

enum WalkError {
    Sys(Errno),
    TooBig,
}

impl From<Errno> for WalkError {
    fn from(errno: Errno) -> Self {
        WalkError::Sys(errno)
    }
}

fn is_dot(name: &CStr) -> bool {
    matches!(name.to_bytes(), b"." | b"..")
}

/// The names in directory `fd` (without `.` and `..`).
fn entries(fd: &OwnedFd) -> Result<Vec<CString>, Errno> {
    let dup = fd.try_clone().map_err(|_| Errno::EMFILE)?;
    let mut dir = Dir::from_fd(dup)?;
    let mut names = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        if !is_dot(entry.file_name()) {
            names.push(entry.file_name().to_owned());
        }
    }
    Ok(names)
}

fn is_dir(dir: BorrowedFd<'_>, name: &CStr) -> Result<Option<bool>, Errno> {
    match fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(
            SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR,
        )),
        Err(Errno::ENOENT) => Ok(None),
        Err(errno) => Err(errno),
    }
}

/// Removes `name` in `dir`: a directory with its contents (opened with `O_NOFOLLOW`, so a
/// symlink is unlinked, never entered).
fn remove_entry(
    dir: BorrowedFd<'_>,
    name: &CStr,
    depth: usize,
    budget: &mut usize,
) -> Result<(), WalkError> {
    *budget = budget.checked_sub(1).ok_or(WalkError::TooBig)?;
    match is_dir(dir, name)? {
        None => Ok(()),
        Some(false) => match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(errno) => Err(errno.into()),
        },
        Some(true) => {
            if depth >= MAX_DEPTH {
                return Err(WalkError::TooBig);
            }
            let child = openat(dir, name, DIR_FLAGS, Mode::empty())?;
            for entry in entries(&child)? {
                remove_entry(child.as_fd(), &entry, depth + 1, budget)?;
            }
            match unlinkat(dir, name, UnlinkatFlags::RemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => Ok(()),
                Err(errno) => Err(errno.into()),
            }
        }
    }
}

/// Adds the sizes of the regular files under directory `fd` to `total`; stops quietly at the
/// depth and entry bounds.
fn sum_sizes(fd: OwnedFd, depth: usize, budget: &mut usize, total: &mut u64) -> Result<(), Errno> {
    for name in entries(&fd)? {
        if *budget == 0 {
            return Ok(());
        }
        *budget -= 1;
        let stat = match fstatat(
            fd.as_fd(),
            name.as_c_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(stat) => stat,
            Err(Errno::ENOENT) => continue,
            Err(errno) => return Err(errno),
        };
        let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
        if kind == SFlag::S_IFREG {
            *total = total.saturating_add(u64::try_from(stat.st_size).unwrap_or(0));
        } else if kind == SFlag::S_IFDIR && depth < MAX_DEPTH {
            match openat(fd.as_fd(), name.as_c_str(), DIR_FLAGS, Mode::empty()) {
                Ok(child) => sum_sizes(child, depth + 1, budget, total)?,
                Err(Errno::ENOENT) => {}
                Err(errno) => return Err(errno),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn ids_escape_to_one_safe_component() {
        let cases = [
            ("pvc-123_abc", "pvc-123_abc"),
            (".", "%2E"),
            ("..", "%2E%2E"),
            ("a/b", "a%2Fb"),
            ("../../etc", "%2E%2E%2F%2E%2E%2Fetc"),
            ("vol id", "vol%20id"),
            ("ü", "%C3%BC"),
        ];
        for (id, want) in cases {
            assert_eq!(escape_id(id).unwrap(), want, "{id}");
        }
        assert!(matches!(
            escape_id(&"/".repeat(90)),
            Err(StateError::IdTooLong(_))
        ));
    }

    #[test]
    fn removal_and_walk_never_follow_symlinks_out() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), vec![0u8; 5000]).unwrap();
        let state = StateDir::open(&dir.path().join("state")).unwrap();
        state.ensure_volume_dir("v/1").unwrap();
        let backing = dir.path().join("state/volumes/v%2F1");
        std::fs::create_dir(backing.join("sub")).unwrap();
        std::fs::write(backing.join("sub/file"), vec![0u8; 1000]).unwrap();
        std::fs::write(backing.join("top"), vec![0u8; 24]).unwrap();
        symlink(&outside, backing.join("link")).unwrap();
        symlink(&outside, backing.join("sub/link")).unwrap();

        assert_eq!(state.used_bytes("v/1").unwrap(), Some(1024));
        assert_eq!(state.used_bytes("absent").unwrap(), None);
        state.remove_volume_dir("v/1").unwrap();
        assert!(!backing.exists());
        assert!(outside.join("keep").exists());
        assert!(state.volume_dir("v/1").unwrap().is_none());
        state.remove_volume_dir("v/1").unwrap();
    }

    #[test]
    fn records_round_trip_and_symlinked_records_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        assert_eq!(state.read_record(CAPACITY, "v").unwrap(), None);
        state.write_record(CAPACITY, "v", "2048").unwrap();
        assert_eq!(
            state.read_record(CAPACITY, "v").unwrap().as_deref(),
            Some("2048")
        );
        state.write_record(CAPACITY, "v", "4096").unwrap();
        assert_eq!(
            state.read_record(CAPACITY, "v").unwrap().as_deref(),
            Some("4096")
        );
        state.remove_record(CAPACITY, "v").unwrap();
        state.remove_record(CAPACITY, "v").unwrap();
        symlink("/etc/hostname", dir.path().join("abnormal/x")).unwrap();
        assert!(state.read_record(ABNORMAL, "x").is_err());
    }

    #[test]
    fn block_images_are_sparse_and_only_grow() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let path = state.ensure_block_image("b", 1 << 20).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
        state.ensure_block_image("b", 4096).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
        state.ensure_block_image("b", 2 << 20).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 << 20);
    }
}
