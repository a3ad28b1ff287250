//! emptyDir volumes (`pkg/volume/emptydir/empty_dir.go`): a world-writable directory in the
//! pod's directory, or a tmpfs mounted there for `medium: Memory`.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

use crate::cgroup;

/// The plugin directory name the kubelet uses under `<pod>/volumes/`.
pub const PLUGIN_DIR: &str = "kubernetes.io~empty-dir";

/// `<pod dir>/volumes/kubernetes.io~empty-dir/<volume>`.
pub fn empty_dir_path(pod_dir: &Path, volume: &str) -> PathBuf {
    pod_dir.join("volumes").join(PLUGIN_DIR).join(volume)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    /// `""`: the node's disk.
    Disk,
    /// `Memory`: a tmpfs, counted against the pod's memory.
    Memory,
    /// `HugePages` or `HugePages-<size>`: a hugetlbfs of the page size the pod requests.
    HugePages,
}

impl Medium {
    /// `None` for a medium the API does not define.
    pub fn parse(value: Option<&str>) -> Option<Medium> {
        match value.unwrap_or_default() {
            "" => Some(Medium::Disk),
            "Memory" => Some(Medium::Memory),
            m if crate::podspec::hugepages::is_hugepages_medium(m) => Some(Medium::HugePages),
            _ => None,
        }
    }
}

/// Mounts a hugetlbfs at `path` with `option` (`pagesize=2Mi`), as the kubelet's
/// `setupHugepages` does (source `nodev`; needs CAP_SYS_ADMIN).
pub fn mount_hugetlbfs(path: &Path, option: &str) -> nix::Result<()> {
    nix::mount::mount(
        Some("nodev"),
        path,
        Some("hugetlbfs"),
        nix::mount::MsFlags::empty(),
        Some(option),
    )
}

/// The tmpfs size for a memory-backed emptyDir (`calculateEmptyDirMemorySize`): the node's
/// allocatable memory, lowered to the pod's memory limit and then to the volume's `sizeLimit`
/// when those are smaller. `None` (no bound known) leaves the kernel default, half of RAM.
pub fn tmpfs_size(
    pod: &Pod,
    size_limit: Option<i64>,
    node_allocatable_memory: Option<i64>,
) -> Option<i64> {
    let mut size = node_allocatable_memory.filter(|m| *m > 0);
    let mut lower = |candidate: Option<i64>| {
        if let Some(c) = candidate.filter(|c| *c > 0) {
            if size.is_none_or(|s| c <= s) {
                size = Some(c);
            }
        }
    };
    lower(cgroup::pod_resource_config(pod, false, cgroup::QUOTA_PERIOD).memory_limit);
    lower(size_limit);
    size
}

/// Creates the volume directory (and its parents) with mode 0777, as the kubelet does so any
/// container user can write to it; an existing directory whose permission bits are not 0777
/// gets 0777 (the kubelet's `setupDir`: setgid from `fsGroup` and the sticky bit of a tmpfs
/// root stay when the permission bits are right).
pub fn setup_dir(path: &Path) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(parent)?;
    }
    match fs::DirBuilder::new().mode(0o777).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => {}
        Err(e) => return Err(e),
    }
    if fs::metadata(path)?.permissions().mode() & 0o777 != 0o777 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o777))?;
    }
    Ok(())
}

/// The bits `SetVolumeOwnership` adds to a volume directory for `fsGroup`: group read, write
/// and search, and setgid so that what containers create inside inherits the group.
const FS_GROUP_DIR_BITS: u32 = 0o2770;

/// The pod's `fsGroup` on the volume's root (the kubelet's `SetVolumeOwnership` for an emptyDir,
/// which is empty when it is set up): group `gid`, group rwx and setgid. The directory is opened
/// with `O_NOFOLLOW` and changed through that descriptor, so a symlink put in its place is
/// never followed. `OnRootMismatch` and `Always` act alike here: the root is the only entry a
/// fresh volume has, and what containers create later inherits the group through setgid.
pub fn apply_fs_group(path: &Path, gid: u32) -> io::Result<()> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::{fchmod, fstat, Mode};
    let fd = open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    nix::unistd::fchown(&fd, None, Some(nix::unistd::Gid::from_raw(gid)))?;
    let mode = fstat(&fd)?.st_mode & 0o7777;
    let wanted = mode | FS_GROUP_DIR_BITS;
    if wanted != mode {
        fchmod(&fd, Mode::from_bits_truncate(wanted))?;
    }
    Ok(())
}

/// The tmpfs mount options: `size=<bytes>` when a size is known.
pub fn tmpfs_options(size: Option<i64>) -> Option<String> {
    size.map(|s| format!("size={s}"))
}

/// Mounts a tmpfs at `path` (needs CAP_SYS_ADMIN).
pub fn mount_tmpfs(path: &Path, size: Option<i64>) -> nix::Result<()> {
    let options = tmpfs_options(size);
    nix::mount::mount(
        Some("tmpfs"),
        path,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        options.as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podspec::resources::test_support::{container, pod};

    const GI: i64 = 1 << 30;

    #[test]
    fn tmpfs_size_table() {
        let limited = pod(vec![container("a", "", "cpu=1,memory=2Gi")], vec![]);
        let unlimited = pod(vec![container("a", "cpu=1", "")], vec![]);
        let cases = [
            (&unlimited, None, None, None),
            (&unlimited, None, Some(8 * GI), Some(8 * GI)),
            (&limited, None, Some(8 * GI), Some(2 * GI)),
            (&limited, None, None, Some(2 * GI)),
            (&limited, Some(GI), Some(8 * GI), Some(GI)),
            // a sizeLimit above the pod's limit does not raise it
            (&limited, Some(4 * GI), Some(8 * GI), Some(2 * GI)),
            (&unlimited, Some(16 * GI), Some(8 * GI), Some(8 * GI)),
            (&unlimited, Some(0), Some(8 * GI), Some(8 * GI)),
        ];
        for (p, size_limit, allocatable, want) in cases {
            assert_eq!(
                tmpfs_size(p, size_limit, allocatable),
                want,
                "{size_limit:?} {allocatable:?}"
            );
        }
    }

    #[test]
    fn options_and_media() {
        assert_eq!(tmpfs_options(Some(1024)).as_deref(), Some("size=1024"));
        assert_eq!(tmpfs_options(None), None);
        assert_eq!(Medium::parse(None), Some(Medium::Disk));
        assert_eq!(Medium::parse(Some("Memory")), Some(Medium::Memory));
        assert_eq!(
            Medium::parse(Some("HugePages-2Mi")),
            Some(Medium::HugePages)
        );
        assert_eq!(Medium::parse(Some("HugePages")), Some(Medium::HugePages));
        assert_eq!(Medium::parse(Some("Hugepages")), None);
        assert_eq!(Medium::parse(Some("Disk")), None);
    }

    #[test]
    fn setup_dir_is_world_writable_and_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let path = empty_dir_path(dir.path(), "cache");
        setup_dir(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
        setup_dir(&path).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
            0o777
        );
        assert!(path.ends_with("volumes/kubernetes.io~empty-dir/cache"));
    }

    #[test]
    fn fs_group_gives_the_group_and_setgid_without_following_a_symlink() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let vol = dir.path().join("vol");
        setup_dir(&vol).expect("setup");
        apply_fs_group(&vol, 2000).expect("fsGroup");
        let meta = fs::metadata(&vol).expect("stat");
        assert_eq!(meta.gid(), 2000);
        assert_eq!(meta.permissions().mode() & 0o7777, 0o2777);
        // Set up again (a second sync): the mode stays.
        setup_dir(&vol).expect("setup again");
        apply_fs_group(&vol, 2000).expect("fsGroup again");
        assert_eq!(
            fs::metadata(&vol).expect("stat").permissions().mode() & 0o7777,
            0o2777
        );

        // A symlink in the volume's place: refused, its target untouched.
        let target = dir.path().join("target");
        fs::create_dir(&target).expect("target");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        assert!(apply_fs_group(&link, 3000).is_err());
        assert_ne!(fs::metadata(&target).expect("stat").gid(), 3000);
    }
}
