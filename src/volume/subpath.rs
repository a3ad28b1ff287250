//! subPath mounts as the kubelet makes them (`pkg/volume/util/subpath`: `doSafeMakeDir`,
//! `safeOpenSubPath`, `doBindSubPath`, `CleanSubPaths`).
//!
//! A subPath lies inside a volume that containers can write, so its path string means nothing
//! by the time the runtime resolves it: a sibling container can swap a directory for a symlink
//! to `/` between a check and the runtime's bind mount (CVE-2017-1002101, CVE-2021-25741).
//! So nodelet never hands the runtime `<volume>/<subPath>`. Instead it
//!
//! 1. opens the subPath beneath the volume's directory fd: `openat2` with `RESOLVE_BENEATH`
//!    where the kernel has it, else a component-wise walk of `openat(O_PATH|O_NOFOLLOW)` that
//!    resolves symlinks itself and never leaves the volume. A symlink inside the volume that
//!    stays inside is followed (configMap keys are such links); one that leads out (absolute, or
//!    `..` past the volume's root) fails with the kubelet's "not within volume path". Missing
//!    directories are created with `mkdirat` beneath the already opened parent, with the
//!    volume's mode;
//! 2. bind-mounts that file descriptor (`/proc/self/fd/<fd>`) onto
//!    `<pod dir>/volume-subpaths/<volume>/<container>/<index>` (a directory or a file matching
//!    the source, in a directory only root can write), checks that the mount shows the opened
//!    inode, and hands that path to the runtime;
//! 3. detaches the bind mount once `StartContainer` returned ([`PinnedSubPaths`]): the container
//!    holds its own copy of the mount by then. The kubelet keeps it until the pod's volumes are
//!    torn down; here nothing outlives the start, so removing a container has nothing left to
//!    clean. Leftovers of a crash between mount and start are reused or replaced by the next
//!    start of the container and unmounted by the pod-directory cleanup
//!    (`volume::cleanup_pod_dir`, also run by the garbage collector after a restart).
//!
//! The decisions (which path, which mounts to clean) are pure functions below; the syscalls are
//! in thin functions, tested as root on temporary directories.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, readlinkat, OFlag, OpenHow, ResolveFlag};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::{fchmod, fstat, mkdirat, FileStat, Mode, SFlag};

use crate::cri::api;
use crate::podspec::ConfigError;

/// `<pod dir>/volume-subpaths`, the kubelet's `containerSubPathDirectoryName`.
pub const SUB_PATHS_DIR: &str = "volume-subpaths";
const MOUNTINFO: &str = "/proc/self/mountinfo";
/// Symlinks followed in one subPath before giving up (the kernel's limit).
const MAX_SYMLINKS: usize = 40;
/// `openat2` answers EAGAIN when a rename raced with the lookup; it is asked again this often.
const OPENAT2_RETRIES: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum SubPathError {
    /// The kubelet's `safeOpenSubPath` text.
    #[error("subpath {path:?} not within volume path {volume:?}")]
    NotWithinVolume { path: PathBuf, volume: PathBuf },
    #[error("error opening subpath {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("cannot create directory {}: {source}", path.display())]
    Mkdir {
        path: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("error mounting {} at {}: {source}", path.display(), target.display())]
    Mount {
        path: PathBuf,
        target: PathBuf,
        #[source]
        source: Errno,
    },
    /// What got mounted is not what was opened (the kubelet's `checkSubPathFileEqual`).
    #[error("bind mount at {} does not show the opened subpath", target.display())]
    Mismatch { target: PathBuf },
    #[error("error cleaning subpath mount {}: {source}", path.display())]
    Unmount {
        path: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{field}: {value:?} must be a single path component")]
    Component { field: &'static str, value: String },
}

/// One mount of a container config whose host path is a subPath inside a volume, still to be
/// opened and pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubPathMount {
    /// Index into the config's `mounts`.
    pub mount: usize,
    /// Index into the container's `volumeMounts` (names the bind target, as in the kubelet).
    pub index: usize,
    /// The mount's field path, for example `spec.containers[0].volumeMounts[1]`.
    pub field: String,
    pub volume: String,
    pub container: String,
    /// The volume's host directory.
    pub volume_path: PathBuf,
    /// The validated (relative, no `..`) subPath inside it.
    pub sub_path: String,
}

/// How the subPath is looked up beneath the volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// `openat2(RESOLVE_BENEATH)`, falling back to [`Resolver::Walk`] on ENOSYS.
    Openat2,
    /// Component by component with `openat(O_PATH|O_NOFOLLOW)`, symlinks resolved here.
    Walk,
}

fn single_component(field: &'static str, value: &str) -> Result<(), SubPathError> {
    let mut parts = Path::new(value).components();
    match (parts.next(), parts.next()) {
        (Some(Component::Normal(p)), None) if p == OsStr::new(value) => Ok(()),
        _ => Err(SubPathError::Component {
            field,
            value: value.to_string(),
        }),
    }
}

/// `<pod dir>/volume-subpaths/<volume>/<container>/<index>` (`getSubpathBindTarget`).
pub fn bind_target(
    pod_dir: &Path,
    volume: &str,
    container: &str,
    index: usize,
) -> Result<PathBuf, SubPathError> {
    single_component("volume name", volume)?;
    single_component("container name", container)?;
    Ok(pod_dir
        .join(SUB_PATHS_DIR)
        .join(volume)
        .join(container)
        .join(index.to_string()))
}

/// The subPath's components to open beneath the volume: `.` and empty ones dropped; `..` and
/// absolute paths refused (the API validation already refuses them; this is the last guard).
pub fn sub_path_components(sub_path: &str) -> Option<Vec<OsString>> {
    let mut out = Vec::new();
    for c in Path::new(sub_path).components() {
        match c {
            Component::Normal(p) => out.push(p.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// The bind mounts of `mountinfo` below `<pod dir>/volume-subpaths`, deepest first: what
/// the pod-directory cleanup unmounts before it removes anything.
pub fn sub_path_mounts(mountinfo: &str, pod_dir: &Path) -> Vec<PathBuf> {
    super::mounts::mounts_under(mountinfo, &pod_dir.join(SUB_PATHS_DIR))
}

fn same_file(a: &FileStat, b: &FileStat) -> bool {
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

fn file_type(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

fn join(components: &[OsString]) -> PathBuf {
    components.iter().collect()
}

/// Errors of opening beneath the volume, before they get the volume's paths.
#[derive(Debug)]
enum OpenFailure {
    Escape,
    Open(Errno),
    Mkdir(Errno),
}

fn beneath(dir: BorrowedFd<'_>, path: &Path) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let path = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    let mut tries = 0;
    loop {
        match openat2(dir, path, how) {
            Err(Errno::EAGAIN) if tries < OPENAT2_RETRIES => tries += 1,
            other => return other,
        }
    }
}

/// Creates `name` in `parent` (`doSafeMakeDir`: mkdirat beneath the opened parent, then
/// opened without following a symlink that may have replaced it) and gives it `mode`, which
/// the umask cut.
fn make_dir(parent: BorrowedFd<'_>, name: &OsStr, mode: Mode) -> Result<OwnedFd, OpenFailure> {
    mkdirat(parent, name, mode).map_err(OpenFailure::Mkdir)?;
    let fd = openat(
        parent,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(OpenFailure::Open)?;
    fchmod(&fd, mode).map_err(OpenFailure::Mkdir)?;
    Ok(fd)
}

fn open_with_openat2(
    root: BorrowedFd<'_>,
    components: &[OsString],
    mode: Mode,
) -> Result<OwnedFd, OpenFailure> {
    let map = |e| match e {
        Errno::EXDEV => OpenFailure::Escape,
        e => OpenFailure::Open(e),
    };
    match beneath(root, &join(components)) {
        Err(Errno::ENOENT) => {}
        other => return other.map_err(map),
    }
    // Something is missing: find the first missing directory and create the rest beneath
    // the last one that exists.
    let mut parent = root
        .try_clone_to_owned()
        .map_err(|e| OpenFailure::Open(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))))?;
    for (i, name) in components.iter().enumerate() {
        parent = match beneath(root, &join(&components[..=i])) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => make_dir(parent.as_fd(), name, mode)?,
            Err(e) => return Err(map(e)),
        };
    }
    Ok(parent)
}

fn open_walking(
    root: BorrowedFd<'_>,
    components: &[OsString],
    mode: Mode,
) -> Result<OwnedFd, OpenFailure> {
    // Directories opened so far below the root (never a symlink: each was opened with
    // O_NOFOLLOW from the one before), and the components still to resolve, last first.
    // A component that came out of a symlink's target is never created.
    let mut opened: Vec<OwnedFd> = Vec::new();
    let mut pending: Vec<(OsString, bool)> = components
        .iter()
        .rev()
        .map(|c| (c.clone(), false))
        .collect();
    let mut links = 0;
    while let Some((name, from_link)) = pending.pop() {
        if name.is_empty() || name == "." {
            continue;
        }
        if name == ".." {
            // Lexical: every opened entry is a real directory, so its parent is the one
            // opened before it. Popping past the root leaves the volume.
            if opened.pop().is_none() {
                return Err(OpenFailure::Escape);
            }
            continue;
        }
        let parent = opened.last().map(|f| f.as_fd()).unwrap_or(root);
        let fd = match openat(
            parent,
            name.as_os_str(),
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if !from_link => {
                let fd = make_dir(parent, &name, mode)?;
                opened.push(fd);
                continue;
            }
            Err(e) => return Err(OpenFailure::Open(e)),
        };
        let st = fstat(&fd).map_err(OpenFailure::Open)?;
        if file_type(&st) != SFlag::S_IFLNK {
            opened.push(fd);
            continue;
        }
        links += 1;
        if links > MAX_SYMLINKS {
            return Err(OpenFailure::Open(Errno::ELOOP));
        }
        let target = readlinkat(parent, name.as_os_str()).map_err(OpenFailure::Open)?;
        let target = Path::new(&target);
        if target.has_root() {
            return Err(OpenFailure::Escape);
        }
        let parts: Vec<OsString> = target
            .components()
            .map(|c| c.as_os_str().to_os_string())
            .collect();
        pending.extend(parts.into_iter().rev().map(|c| (c, true)));
    }
    match opened.pop() {
        Some(fd) => Ok(fd),
        None => root
            .try_clone_to_owned()
            .map_err(|e| OpenFailure::Open(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))),
    }
}

/// Opens `sub_path` beneath the directory `root` (an fd of the volume's directory named
/// `volume` in messages), creating missing directories with `mode`, and returns an `O_PATH`
/// (or directory) fd of what it names. Nothing outside `root` is opened or created.
pub fn open_sub_path(
    root: BorrowedFd<'_>,
    volume: &Path,
    sub_path: &str,
    mode: Mode,
    resolver: Resolver,
) -> Result<OwnedFd, SubPathError> {
    let full = volume.join(sub_path);
    let Some(components) = sub_path_components(sub_path) else {
        return Err(SubPathError::NotWithinVolume {
            path: full,
            volume: volume.to_path_buf(),
        });
    };
    let result = match resolver {
        Resolver::Openat2 => match open_with_openat2(root, &components, mode) {
            Err(OpenFailure::Open(Errno::ENOSYS)) => open_walking(root, &components, mode),
            other => other,
        },
        Resolver::Walk => open_walking(root, &components, mode),
    };
    result.map_err(|e| match e {
        OpenFailure::Escape => SubPathError::NotWithinVolume {
            path: full,
            volume: volume.to_path_buf(),
        },
        OpenFailure::Open(source) => SubPathError::Open { path: full, source },
        OpenFailure::Mkdir(source) => SubPathError::Mkdir { path: full, source },
    })
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SubPathError + '_ {
    move |source| SubPathError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn stat_path(path: &Path) -> Result<FileStat, SubPathError> {
    nix::sys::stat::lstat(path).map_err(|e| SubPathError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    })
}

/// Unmounts (detached) whatever is mounted at `target` and removes the mount point, never
/// recursively; a target that is gone is fine.
fn release_target(target: &Path) -> Result<(), SubPathError> {
    loop {
        match umount2(target, MntFlags::MNT_DETACH) {
            Ok(()) => continue, // mounts may be stacked
            Err(Errno::EINVAL) | Err(Errno::ENOENT) => break,
            Err(source) => {
                return Err(SubPathError::Unmount {
                    path: target.to_path_buf(),
                    source,
                })
            }
        }
    }
    let removed = match fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() => fs::remove_dir(target),
        Ok(_) => fs::remove_file(target),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    match removed {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err(target)(e)),
        _ => Ok(()),
    }
}

/// Bind-mounts the opened `fd` onto `target` (`doBindSubPath`). A mount already there that
/// shows the same inode is kept; anything else there is unmounted first. Afterwards the
/// mount must show the opened inode, or it is undone.
pub fn bind_fd(fd: BorrowedFd<'_>, target: &Path, mountinfo: &Path) -> Result<(), SubPathError> {
    let want = fstat(fd).map_err(|e| SubPathError::Io {
        path: target.to_path_buf(),
        source: e.into(),
    })?;
    let table = fs::read_to_string(mountinfo).map_err(io_err(mountinfo))?;
    if super::mounts::is_mount_point(&table, target) {
        if stat_path(target).is_ok_and(|st| same_file(&st, &want)) {
            return Ok(());
        }
        release_target(target)?;
    }
    let parent = target.parent().unwrap_or(target);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(parent)
        .map_err(io_err(parent))?;
    let is_dir = file_type(&want) == SFlag::S_IFDIR;
    // A target of the other type (the subPath changed kind since the last start) goes first.
    match fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() != is_dir => release_target(target)?,
        _ => {}
    }
    let created = if is_dir {
        match fs::DirBuilder::new().mode(0o750).create(target) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            other => other,
        }
    } else {
        // A file serves every other source type: bind-mounting onto it takes the source's.
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o640)
            .custom_flags(libc::O_NOFOLLOW)
            .open(target)
            .map(drop)
    };
    created.map_err(io_err(target))?;
    let source = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    mount(
        Some(&source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|source| SubPathError::Mount {
        path: PathBuf::from(format!("fd {}", fd.as_raw_fd())),
        target: target.to_path_buf(),
        source,
    })?;
    if !stat_path(target).is_ok_and(|st| same_file(&st, &want)) {
        let _ = release_target(target);
        return Err(SubPathError::Mismatch {
            target: target.to_path_buf(),
        });
    }
    Ok(())
}

/// Opens the volume's directory (its path is nodelet's or the admin's, so symlinks in it are
/// followed) and pins `s` onto its bind target under `pod_dir`; returns the target.
fn pin(
    pod_dir: &Path,
    s: &SubPathMount,
    resolver: Resolver,
    mountinfo: &Path,
) -> Result<PathBuf, SubPathError> {
    let target = bind_target(pod_dir, &s.volume, &s.container, s.index)?;
    let root = nix::fcntl::open(
        &s.volume_path,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| SubPathError::Io {
        path: s.volume_path.clone(),
        source: e.into(),
    })?;
    let st = fstat(&root).map_err(|e| SubPathError::Io {
        path: s.volume_path.clone(),
        source: e.into(),
    })?;
    let mode = Mode::from_bits_truncate(st.st_mode & 0o7777);
    let fd = open_sub_path(root.as_fd(), &s.volume_path, &s.sub_path, mode, resolver)?;
    bind_fd(fd.as_fd(), &target, mountinfo)?;
    Ok(target)
}

/// The bind mounts made for one container start. They are detached and their mount points
/// removed when this is dropped: after `StartContainer` returned, or when the start failed
/// on the way.
#[derive(Debug, Default)]
pub struct PinnedSubPaths {
    targets: Vec<PathBuf>,
}

impl PinnedSubPaths {
    /// The bind targets, in the order of the subPaths.
    pub fn targets(&self) -> &[PathBuf] {
        &self.targets
    }

    /// Detaches the bind mounts now (the same as dropping this, with the errors).
    pub fn release(mut self) -> Result<(), SubPathError> {
        self.release_all()
    }

    fn release_all(&mut self) -> Result<(), SubPathError> {
        let mut first = Ok(());
        for target in std::mem::take(&mut self.targets) {
            let done = release_target(&target);
            // The container's directory goes with its last target (non-recursive).
            if done.is_ok() {
                if let Some(dir) = target.parent() {
                    let _ = fs::remove_dir(dir);
                }
            }
            if first.is_ok() {
                first = done;
            }
        }
        first
    }
}

impl Drop for PinnedSubPaths {
    fn drop(&mut self) {
        if let Err(e) = self.release_all() {
            tracing::warn!(error = %e, "releasing subPath bind mounts");
        }
    }
}

/// Opens every subPath `sub_paths` names beneath its volume, bind-mounts each under
/// `pod_dir/volume-subpaths` and points the corresponding mount of `mounts` there. The first
/// failure is returned as the container's `CreateContainerConfigError` (the mounts made so
/// far are released). Keep the result until `StartContainer` returned.
pub fn prepare_sub_paths(
    pod_dir: &Path,
    mounts: &mut [api::Mount],
    sub_paths: &[SubPathMount],
) -> Result<PinnedSubPaths, ConfigError> {
    prepare_sub_paths_with(
        pod_dir,
        mounts,
        sub_paths,
        Resolver::Openat2,
        Path::new(MOUNTINFO),
    )
}

/// [`prepare_sub_paths`] with the resolver and the mountinfo file given.
pub fn prepare_sub_paths_with(
    pod_dir: &Path,
    mounts: &mut [api::Mount],
    sub_paths: &[SubPathMount],
    resolver: Resolver,
    mountinfo: &Path,
) -> Result<PinnedSubPaths, ConfigError> {
    let mut pinned = PinnedSubPaths::default();
    if sub_paths.is_empty() {
        return Ok(pinned);
    }
    let config_error = |s: &SubPathMount, e: SubPathError| ConfigError::SubPath {
        field: format!("{}.subPath", s.field),
        volume: s.volume.clone(),
        container: s.container.clone(),
        path: s.volume_path.join(&s.sub_path),
        reason: e.to_string(),
    };
    // Mount points are compared with mountinfo, which names them canonically.
    let pod_dir = fs::canonicalize(pod_dir).map_err(|e| {
        config_error(
            &sub_paths[0],
            SubPathError::Io {
                path: pod_dir.to_path_buf(),
                source: e,
            },
        )
    })?;
    for s in sub_paths {
        let target = pin(&pod_dir, s, resolver, mountinfo).map_err(|e| config_error(s, e))?;
        if let Some(m) = mounts.get_mut(s.mount) {
            m.host_path = target.to_string_lossy().into_owned();
        }
        pinned.targets.push(target);
    }
    Ok(pinned)
}

/// Unmounts every bind mount under `<pod_dir>/volume-subpaths` (detached) and removes the
/// directory tree there, never recursing through a mount point. `pod_dir` is canonical.
pub fn clean_sub_paths(pod_dir: &Path, mountinfo: &Path) -> Result<(), SubPathError> {
    let table = fs::read_to_string(mountinfo).map_err(io_err(mountinfo))?;
    for target in sub_path_mounts(&table, pod_dir) {
        match umount2(&target, MntFlags::MNT_DETACH) {
            Ok(()) | Err(Errno::EINVAL) | Err(Errno::ENOENT) => {}
            Err(source) => {
                return Err(SubPathError::Unmount {
                    path: target,
                    source,
                })
            }
        }
    }
    let dir = pod_dir.join(SUB_PATHS_DIR);
    super::mounts::remove_tree(&dir).map_err(io_err(&dir))
}

#[cfg(test)]
mod tests;
