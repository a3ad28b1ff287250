//! Mount points: reading `/proc/self/mountinfo` (pure parsing, table-tested) and the bind mounts
//! the driver makes.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};

#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("cannot read /proc/self/mountinfo: {0}")]
    MountInfo(#[source] std::io::Error),
    #[error("bind mount of {source_path} on {target}: {errno}")]
    Bind {
        source_path: String,
        target: String,
        errno: Errno,
    },
    #[error("read-only remount of {target}: {errno}")]
    Remount { target: String, errno: Errno },
    #[error("unmount of {target}: {errno}")]
    Unmount { target: String, errno: Errno },
}

/// One line of mountinfo, the fields the driver uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// The directory within the source filesystem that is mounted (field 4).
    pub root: PathBuf,
    /// Where it is mounted (field 5).
    pub mount_point: PathBuf,
    /// The per-mount options (field 6): `ro` or `rw` first.
    pub read_only: bool,
}

/// mountinfo escapes space, tab, newline and backslash in paths as `\ooo` octal.
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(byte) = u8::try_from(value) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    PathBuf::from(OsString::from_vec(out))
}

/// Parses mountinfo text; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            if fields.len() < 6 {
                return None;
            }
            Some(MountEntry {
                root: unescape(fields[3]),
                mount_point: unescape(fields[4]),
                read_only: fields[5].split(',').any(|option| option == "ro"),
            })
        })
        .collect()
}

/// The mount visible at `path` (the last one mounted there covers the others).
pub fn mount_at<'a>(entries: &'a [MountEntry], path: &Path) -> Option<&'a MountEntry> {
    entries.iter().rev().find(|entry| entry.mount_point == path)
}

pub fn read_mountinfo() -> Result<Vec<MountEntry>, MountError> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").map_err(MountError::MountInfo)?;
    Ok(parse_mountinfo(&text))
}

/// A path as mountinfo shows it: symlinks in the (trusted) CO path resolved when it exists.
pub fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The mount at `path` now, if any.
pub fn current_mount(path: &Path) -> Result<Option<MountEntry>, MountError> {
    let entries = read_mountinfo()?;
    Ok(mount_at(&entries, &canonical(path)).cloned())
}

/// Bind-mounts `source` on `target`, read-only when asked (a bind mount ignores `MS_RDONLY`, so
/// it takes a second, remounting call).
pub fn bind(source: &Path, target: &Path, read_only: bool) -> Result<(), MountError> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|errno| MountError::Bind {
        source_path: source.display().to_string(),
        target: target.display().to_string(),
        errno,
    })?;
    if read_only {
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
        if let Err(errno) = mount(None::<&str>, target, None::<&str>, flags, None::<&str>) {
            let _ = umount2(target, MntFlags::empty());
            return Err(MountError::Remount {
                target: target.display().to_string(),
                errno,
            });
        }
    }
    Ok(())
}

/// Unmounts `target`; a path that is not mounted (EINVAL) or is gone (ENOENT) is fine. Returns
/// whether something was unmounted.
pub fn unmount(target: &Path) -> Result<bool, MountError> {
    match umount2(target, MntFlags::UMOUNT_NOFOLLOW) {
        Ok(()) => Ok(true),
        Err(Errno::EINVAL | Errno::ENOENT) => Ok(false),
        Err(errno) => Err(MountError::Unmount {
            target: target.display().to_string(),
            errno,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /tmp rw,nosuid shared:2 - tmpfs tmpfs rw
41 40 8:1 /state/volumes/v1 /tmp/stage\\040dir rw,relatime shared:1 - ext4 /dev/sda1 rw
42 40 8:1 /state/volumes/v1 /tmp/pub ro,relatime shared:1 - ext4 /dev/sda1 rw
43 40 8:1 /state/volumes/v2 /tmp/pub rw,relatime shared:1 - ext4 /dev/sda1 rw
short line
";

    #[test]
    fn mountinfo_lines_parse_with_escapes() {
        let entries = parse_mountinfo(SAMPLE);
        assert_eq!(entries.len(), 5);
        assert_eq!(entries[2].mount_point, PathBuf::from("/tmp/stage dir"));
        assert_eq!(entries[2].root, PathBuf::from("/state/volumes/v1"));
        assert!(!entries[2].read_only);
        assert!(entries[3].read_only);
    }

    #[test]
    fn the_last_mount_at_a_path_is_the_visible_one() {
        let entries = parse_mountinfo(SAMPLE);
        let cases: &[(&str, Option<&str>)] = &[
            ("/tmp/pub", Some("/state/volumes/v2")),
            ("/tmp/stage dir", Some("/state/volumes/v1")),
            ("/tmp/other", None),
            ("/", Some("/")),
        ];
        for (path, root) in cases {
            let found = mount_at(&entries, Path::new(path)).map(|e| e.root.clone());
            assert_eq!(found, root.map(PathBuf::from), "{path}");
        }
    }

    #[test]
    fn unescape_leaves_odd_backslashes() {
        let cases = [
            ("a\\040b", "a b"),
            ("a\\134b", "a\\b"),
            ("a\\9b", "a\\9b"),
            ("end\\04", "end\\04"),
            ("x\\", "x\\"),
        ];
        for (input, want) in cases {
            assert_eq!(unescape(input), PathBuf::from(want), "{input}");
        }
    }
}
