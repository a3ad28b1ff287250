//! Reading `/proc/self/mountinfo`: which directories are mount points. nodelet never deletes a
//! pod directory while something is still mounted below it, and never mounts a tmpfs twice.
//! [`make_rshared`] puts the root directory on a shared mount, as the kubelet does.
//! [`remove_tree`] deletes a directory tree without following symlinks and without ever
//! descending into another mount (a volume's or the host's).

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// Undoes the octal escapes the kernel uses in mountinfo paths (`\040` for a space, `\011`,
/// `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(b) = u8::try_from(value) {
                    out.push(b);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount points listed in a mountinfo file, in file order (parents before children).
pub fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape(p)))
        .collect()
}

pub fn is_mount_point(mountinfo: &str, path: &Path) -> bool {
    mount_points(mountinfo).iter().any(|m| m == path)
}

/// Whether `path` lies on a mount with shared propagation (an optional field `shared:N` in its
/// mountinfo line), as the kubelet's `isShared` decides: the mount is the last listed one whose
/// mount point contains `path` (a later mount over the same point hides an earlier one).
/// `path` must be absolute with its symlinks resolved, as mountinfo's paths are.
pub fn on_shared_mount(mountinfo: &str, path: &Path) -> bool {
    mountinfo
        .lines()
        .rev()
        .find_map(|line| {
            let mut fields = line.split(' ');
            let point = PathBuf::from(unescape(fields.nth(4)?));
            if !path.starts_with(&point) {
                return None;
            }
            // After the mount options (field 6) come the optional fields, up to a lone `-`.
            let mut optional = fields.skip(1).take_while(|f| *f != "-");
            Some(optional.any(|f| f.starts_with("shared:")))
        })
        .unwrap_or(false)
}

/// What [`make_rshared`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// The directory's mount already propagates: nothing was mounted.
    AlreadyShared,
    /// The directory was bind-mounted onto itself and made recursively shared.
    BindMounted,
}

/// Makes the directory `path` lie on a shared mount, as the kubelet does with its root directory
/// when it starts (`MakeRShared`): unless its mount already propagates, `path` is bind-mounted
/// onto itself and marked recursively shared. A container's `mountPropagation: Bidirectional`
/// mount of a directory beneath it needs this (containerd refuses one on a private mount), and
/// mounts a driver makes there (CSI, a storage plugin) then reach the host and every pod.
/// `proc` is where `/proc` is mounted.
pub fn make_rshared(path: &Path, proc: &Path) -> io::Result<Propagation> {
    use nix::mount::{mount, MsFlags};
    let path = fs::canonicalize(path)?;
    let mountinfo = fs::read_to_string(proc.join("self/mountinfo"))?;
    if on_shared_mount(&mountinfo, &path) {
        return Ok(Propagation::AlreadyShared);
    }
    let failed = |what: &str, e: Errno| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("{what} {}: {e}", path.display()),
        )
    };
    mount(
        Some(&path),
        &path,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| failed("bind-mounting", e))?;
    mount(
        None::<&str>,
        &path,
        None::<&str>,
        MsFlags::MS_SHARED | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| failed("making rshared", e))?;
    Ok(Propagation::BindMounted)
}

/// Mount points strictly below `dir`, deepest first (the order to unmount them in).
pub fn mounts_under(mountinfo: &str, dir: &Path) -> Vec<PathBuf> {
    let mut below: Vec<PathBuf> = mount_points(mountinfo)
        .into_iter()
        .filter(|m| m != dir && m.starts_with(dir))
        .collect();
    below.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    below.dedup();
    below
}

/// Which mount a directory belongs to: the mount ID from `statx` where the kernel reports it
/// (Linux 5.8+; it tells bind mounts of the same filesystem apart), else the device number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MountKey {
    Id(u64),
    Dev(u64),
}

fn mount_key(fd: BorrowedFd<'_>) -> io::Result<MountKey> {
    // SAFETY: `libc::statx` is plain old data, for which all-zero bytes are a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is a valid open descriptor for the duration of the call, the path is a
    // NUL-terminated empty string (with AT_EMPTY_PATH the call is about `fd` itself), and
    // `stx` is a writable `struct statx` the kernel fills at most.
    let rc = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_MNT_ID,
            &mut stx,
        )
    };
    if rc == 0 && stx.stx_mask & libc::STATX_MNT_ID != 0 {
        return Ok(MountKey::Id(stx.stx_mnt_id));
    }
    let st = fstat(fd).map_err(io::Error::from)?;
    Ok(MountKey::Dev(st.st_dev))
}

const MAX_DEPTH: usize = 512;
/// Entries read from a directory at a time, so a huge directory costs bounded memory.
const BATCH: usize = 1024;

fn open_dir_at(dir: BorrowedFd<'_>, name: &OsString) -> nix::Result<OwnedFd> {
    openat(
        dir,
        name.as_os_str(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Up to [`BATCH`] names in the directory `fd` (read through its `/proc/self/fd` link, which
/// is the opened directory itself whatever its path has become).
fn read_names(fd: BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    let path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    let mut out = Vec::new();
    for entry in fs::read_dir(path)? {
        out.push(entry?.file_name());
        if out.len() >= BATCH {
            break;
        }
    }
    Ok(out)
}

fn crossing(path: &Path) -> io::Error {
    io::Error::other(format!(
        "{} is a mount point: not removing anything below it",
        path.display()
    ))
}

fn remove_contents(
    dir: BorrowedFd<'_>,
    path: &Path,
    key: MountKey,
    depth: usize,
) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::other(format!("{}: too deep", path.display())));
    }
    loop {
        let names = read_names(dir)?;
        if names.is_empty() {
            return Ok(());
        }
        for name in names {
            let child = path.join(&name);
            let st = match fstatat(
                dir,
                name.as_os_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            ) {
                Ok(st) => st,
                Err(Errno::ENOENT) => continue,
                Err(e) => return Err(e.into()),
            };
            let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
            if kind == SFlag::S_IFDIR {
                let fd = match open_dir_at(dir, &name) {
                    Ok(fd) => fd,
                    Err(Errno::ENOENT) => continue,
                    Err(e) => return Err(e.into()),
                };
                if mount_key(fd.as_fd())? != key {
                    return Err(crossing(&child));
                }
                remove_contents(fd.as_fd(), &child, key, depth + 1)?;
                match unlinkat(dir, name.as_os_str(), UnlinkatFlags::RemoveDir) {
                    Ok(()) | Err(Errno::ENOENT) => {}
                    Err(Errno::EBUSY) => return Err(crossing(&child)),
                    Err(e) => return Err(e.into()),
                }
            } else {
                // A file that is a mount point answers EBUSY and stays.
                match unlinkat(dir, name.as_os_str(), UnlinkatFlags::NoRemoveDir) {
                    Ok(()) | Err(Errno::ENOENT) => {}
                    Err(Errno::EBUSY) => return Err(crossing(&child)),
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
}

/// Removes the directory `path` and everything below it, like `remove_dir_all`, but never
/// follows a symlink and never descends into a directory of another mount: meeting one is an
/// error and that directory's contents stay. A missing `path` is fine.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let fd = match nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => {
            return Err(io::Error::new(
                io::Error::from(e).kind(),
                format!("{}: {e}", path.display()),
            ))
        }
    };
    let key = mount_key(fd.as_fd())?;
    remove_contents(fd.as_fd(), path, key, 0)?;
    drop(fd);
    match fs::remove_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(crossing(path)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
25 22 0:21 / /proc rw,nosuid - proc proc rw
90 22 0:50 / /var/lib/nodelet/pods/u1/volumes/kubernetes.io~empty-dir/cache rw - tmpfs tmpfs rw,size=1024k
91 90 0:51 / /var/lib/nodelet/pods/u1/volumes/kubernetes.io~empty-dir/cache/inner rw - tmpfs tmpfs rw
92 22 0:52 / /var/lib/nodelet/pods/u10/volumes/kubernetes.io~empty-dir/x rw - tmpfs tmpfs rw
93 22 0:53 / /mnt/with\\040space rw - tmpfs tmpfs rw
";

    #[test]
    fn shared_mount_table() {
        let mountinfo = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 8:2 / /srv rw,relatime - ext4 /dev/sda2 rw
31 30 8:2 /data /srv/nodelet rw master:4 shared:7 - ext4 /dev/sda2 rw
32 30 8:2 /data /srv/nodelet rw master:4 - ext4 /dev/sda2 rw
40 22 0:60 / /var/lib/with\\040space rw,relatime - tmpfs tmpfs rw
41 22 0:61 / /opt/shared rw - tmpfs shared:9 rw
";
        let cases = [
            ("/", true),
            ("/var/lib/nodelet", true),
            ("/srv", false),
            ("/srv/other", false),
            // The last mount over /srv/nodelet hides the shared one listed before it.
            ("/srv/nodelet", false),
            ("/srv/nodelet/pods", false),
            ("/srv/nodeletx", false),
            ("/var/lib/with space/root", false),
            // `shared:` after the `-` is the source, not a propagation field.
            ("/opt/shared", false),
        ];
        for (path, want) in cases {
            assert_eq!(on_shared_mount(mountinfo, Path::new(path)), want, "{path}");
        }
        assert!(!on_shared_mount("", Path::new("/")), "no mounts listed");
    }

    #[test]
    fn mount_point_table() {
        let cases = [
            ("/", true),
            ("/proc", true),
            (
                "/var/lib/nodelet/pods/u1/volumes/kubernetes.io~empty-dir/cache",
                true,
            ),
            ("/var/lib/nodelet/pods/u1", false),
            ("/mnt/with space", true),
            ("/mnt/with\\040space", false),
        ];
        for (path, want) in cases {
            assert_eq!(is_mount_point(MOUNTINFO, Path::new(path)), want, "{path}");
        }
    }

    #[test]
    fn mounts_under_are_deepest_first_and_exclude_siblings() {
        let got = mounts_under(MOUNTINFO, Path::new("/var/lib/nodelet/pods/u1"));
        assert_eq!(
            got,
            [
                PathBuf::from(
                    "/var/lib/nodelet/pods/u1/volumes/kubernetes.io~empty-dir/cache/inner"
                ),
                PathBuf::from("/var/lib/nodelet/pods/u1/volumes/kubernetes.io~empty-dir/cache"),
            ]
        );
        assert!(mounts_under(MOUNTINFO, Path::new("/var/lib/nodelet/pods/u2")).is_empty());
    }

    #[test]
    fn unescape_table() {
        let cases = [
            ("a\\040b", "a b"),
            ("tab\\011", "tab\t"),
            ("back\\134slash", "back\\slash"),
            ("x\\04", "x\\04"),
            ("plain", "plain"),
        ];
        for (input, want) in cases {
            assert_eq!(unescape(input), want);
        }
    }
}
