//! The pod's `fsGroup` on a published CSI volume, as the kubelet's `SetVolumeOwnership`: every
//! directory and regular file gets the group, group read and write (read only for a read-only
//! volume), directories also group search and setgid. The volume's content is written by
//! containers, so nothing is followed: each entry is opened with `O_NOFOLLOW` (`O_PATH` for
//! files, so no device or FIFO is ever opened for reading) and changed through that descriptor;
//! symlinks and special files are left alone. `OnRootMismatch` skips the walk when the root
//! already has the group and the bits (`requiresPermissionChange`).

use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nix::fcntl::{open, openat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, Mode, SFlag};
use nix::unistd::{fchownat, Gid};

const RW: u32 = 0o660;
const RO: u32 = 0o440;
const SEARCH: u32 = 0o110;
const SETGID: u32 = 0o2000;
const MAX_DEPTH: usize = 512;

/// The mode an entry gets: `mode` with the group bits the kubelet adds.
pub fn wanted_mode(mode: u32, is_dir: bool, read_only: bool) -> u32 {
    let mut add = if read_only { RO } else { RW };
    if is_dir {
        add |= SEARCH | SETGID;
    }
    mode | add
}

/// Whether the root already has what the walk would give it (`OnRootMismatch` then skips).
pub fn root_matches(gid: u32, mode: u32, root_gid: u32, read_only: bool) -> bool {
    root_gid == gid && wanted_mode(mode & 0o7777, true, read_only) == mode & 0o7777
}

fn change(fd: BorrowedFd<'_>, gid: u32, is_dir: bool, read_only: bool) -> io::Result<()> {
    fchownat(
        fd,
        "",
        None,
        Some(Gid::from_raw(gid)),
        AtFlags::AT_EMPTY_PATH,
    )?;
    let mode = fstat(fd)?.st_mode & 0o7777;
    let want = wanted_mode(mode, is_dir, read_only);
    if want != mode {
        if is_dir {
            fchmod(fd, Mode::from_bits_truncate(want))?;
        } else {
            // An O_PATH descriptor: chmod through its /proc link, which is the file itself.
            fs::set_permissions(
                format!("/proc/self/fd/{}", fd.as_raw_fd()),
                fs::Permissions::from_mode(want),
            )?;
        }
    }
    Ok(())
}

/// Applies `gid` to the volume published at `target`. Returns whether it walked (false when
/// `on_root_mismatch` found the root already right).
///
/// The walk streams each directory (no list of its entries is held, however many a container
/// made) and goes depth first, so it holds two descriptors per level, [`MAX_DEPTH`] levels at
/// most.
pub fn set_volume_ownership(
    target: &Path,
    gid: u32,
    read_only: bool,
    on_root_mismatch: bool,
) -> io::Result<bool> {
    let root = open(
        target,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let st = fstat(root.as_fd())?;
    if on_root_mismatch && root_matches(gid, st.st_mode, st.st_gid, read_only) {
        return Ok(false);
    }
    change(root.as_fd(), gid, true, read_only)?;
    walk(root, gid, read_only, 0)?;
    Ok(true)
}

/// Changes everything below the directory `dir`.
fn walk(dir: OwnedFd, gid: u32, read_only: bool, depth: usize) -> io::Result<()> {
    // The listing reads through a duplicate; `dir` stays free for the `*at` calls.
    let mut listing = nix::dir::Dir::from_fd(nix::unistd::dup(&dir)?)?;
    for entry in listing.iter() {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let fd = match openat(
            dir.as_fd(),
            name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ENOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        let kind = SFlag::from_bits_truncate(fstat(fd.as_fd())?.st_mode) & SFlag::S_IFMT;
        if kind == SFlag::S_IFREG {
            change(fd.as_fd(), gid, false, read_only)?;
        } else if kind == SFlag::S_IFDIR {
            let sub = match openat(
                dir.as_fd(),
                name,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                // Replaced meanwhile (by a symlink, say): left alone.
                Err(
                    nix::errno::Errno::ENOENT
                    | nix::errno::Errno::ELOOP
                    | nix::errno::Errno::ENOTDIR,
                ) => continue,
                Err(e) => return Err(e.into()),
            };
            change(sub.as_fd(), gid, true, read_only)?;
            if depth + 1 < MAX_DEPTH {
                walk(sub, gid, read_only, depth + 1)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn modes_table() {
        for (mode, dir, ro, want) in [
            (0o600, false, false, 0o660),
            (0o600, false, true, 0o640),
            (0o700, true, false, 0o2770),
            (0o755, true, true, 0o2755),
            (0o644, false, false, 0o664),
        ] {
            assert_eq!(
                wanted_mode(mode, dir, ro),
                want,
                "{mode:o} dir={dir} ro={ro}"
            );
        }
        assert!(root_matches(5, 0o2770, 5, false));
        assert!(!root_matches(5, 0o2770, 6, false));
        assert!(!root_matches(5, 0o770, 5, false));
    }

    #[test]
    fn ownership_reaches_every_file_and_follows_no_link() {
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("vol");
        fs::create_dir_all(vol.join("a/b")).unwrap();
        fs::write(vol.join("a/b/f"), "x").unwrap();
        fs::set_permissions(vol.join("a/b/f"), fs::Permissions::from_mode(0o600)).unwrap();
        // Outside the volume, and links to it a container planted.
        let outside = tmp.path().join("outside");
        fs::write(&outside, "secret").unwrap();
        fs::set_permissions(&outside, fs::Permissions::from_mode(0o600)).unwrap();
        fs::create_dir(tmp.path().join("outdir")).unwrap();
        std::os::unix::fs::symlink(&outside, vol.join("link")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("outdir"), vol.join("a/dirlink")).unwrap();
        let gid = 4242;
        assert!(set_volume_ownership(&vol, gid, false, false).unwrap());
        for p in ["", "a", "a/b"] {
            let m = fs::metadata(vol.join(p)).unwrap();
            assert_eq!(m.gid(), gid, "{p}");
            assert_eq!(m.mode() & 0o2070, 0o2070, "{p}");
        }
        let f = fs::metadata(vol.join("a/b/f")).unwrap();
        assert_eq!((f.gid(), f.mode() & 0o7777), (gid, 0o660));
        let o = fs::metadata(&outside).unwrap();
        assert_eq!(
            (o.gid(), o.mode() & 0o7777),
            (0, 0o600),
            "nothing outside changed"
        );
        assert_ne!(fs::metadata(tmp.path().join("outdir")).unwrap().gid(), gid);
        // OnRootMismatch: the root is right now, so nothing is walked.
        assert!(!set_volume_ownership(&vol, gid, false, true).unwrap());
        assert!(set_volume_ownership(&vol, gid + 1, false, true).unwrap());
    }
}
