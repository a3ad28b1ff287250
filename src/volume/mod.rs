//! Pod volumes and the pod's directory: emptyDir directories and tmpfs mounts, hostPath type
//! checks, configMap/secret/downwardAPI/projected volumes projected with the kubelet's atomic
//! writer ([`api`]), the managed /etc/hosts file, termination-message files, and removing all
//! of it when the pod is gone. The layout is the kubelet's, under the configured root
//! directory:
//!
//! ```text
//! <root>/pods/<uid>/etc-hosts
//! <root>/pods/<uid>/volumes/kubernetes.io~empty-dir/<volume>
//! <root>/pods/<uid>/volumes/kubernetes.io~configmap/<volume>/..data -> ..<timestamp>
//! <root>/pods/<uid>/volumes/kubernetes.io~secret/<volume>          (tmpfs)
//! <root>/pods/<uid>/volumes/kubernetes.io~downward-api/<volume>    (tmpfs)
//! <root>/pods/<uid>/volumes/kubernetes.io~projected/<volume>       (tmpfs)
//! <root>/pods/<uid>/containers/<container>/<random>      termination-message files
//! <root>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>   subPath bind mounts
//! <root>/pods/<uid>/volumes/kubernetes.io~csi/<spec>/mount        CSI targets ([`csi`])
//! ```

pub mod api;
pub mod atomic_writer;
pub mod csi;
pub mod emptydir;
pub mod env_file;
pub mod hostpath;
pub mod hosts;
pub mod mounts;
pub mod projection;
pub mod subpath;
pub mod trash;

pub use api::{update_api_volumes, ApiVolumeContext, ApiVolumes};
pub use projection::NodeAllocatable;

use std::collections::BTreeMap;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, Volume};

use crate::podspec::hostname::pod_hostname_and_domain;
use crate::podspec::ConfigError;
use crate::quantity::Quantity;
use emptydir::Medium;
use hostpath::{CheckError, HostPathType};

const MOUNTINFO: &str = "/proc/self/mountinfo";
const NODE_HOSTS: &str = "/etc/hosts";

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// The kubelet's own event text for a failed hostPath check.
    #[error("MountVolume.SetUp failed for volume {volume:?} : hostPath type check failed: {} is not a {what} (type {type_})", path.display())]
    HostPathType {
        volume: String,
        path: PathBuf,
        type_: String,
        what: &'static str,
    },
    #[error("MountVolume.SetUp failed for volume {volume:?} : {type_} is an invalid volume type")]
    InvalidHostPathType { volume: String, type_: String },
    #[error("MountVolume.SetUp failed for volume {volume:?} : {}: {source}", path.display())]
    SetUp {
        volume: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Mounting a memory-backed emptyDir failed, e.g. EPERM without CAP_SYS_ADMIN.
    #[error("MountVolume.SetUp failed for volume {volume:?} : mount tmpfs at {}: {source}", path.display())]
    Tmpfs {
        volume: String,
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    /// A hugepages emptyDir whose page size the pod's requests do not settle (the kubelet's
    /// `getPageSizeMountOption` errors).
    #[error("MountVolume.SetUp failed for volume {volume:?} : {error}")]
    HugePagesMedium {
        volume: String,
        #[source]
        error: crate::podspec::hugepages::HugepagesError,
    },
    /// Mounting a hugepages emptyDir failed (EPERM without CAP_SYS_ADMIN, a page size the
    /// kernel lacks).
    #[error("MountVolume.SetUp failed for volume {volume:?} : mount hugetlbfs ({option}) at {}: {source}", path.display())]
    Hugetlbfs {
        volume: String,
        path: PathBuf,
        option: String,
        #[source]
        source: nix::Error,
    },
    /// A configMap, secret, downwardAPI or projected volume could not be set up or refreshed:
    /// the kubelet's `FailedMount` event text.
    #[error("MountVolume.SetUp failed for volume {volume:?} : {message}")]
    MountFailed { volume: String, message: String },
    #[error("volume {volume:?}: {kind} volumes are not supported yet")]
    Unsupported { volume: String, kind: String },
    #[error("{field}: Invalid value: {value:?}: {reason}")]
    Invalid {
        field: String,
        value: String,
        reason: String,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("unmount {}: {source}", path.display())]
    Unmount {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    /// A pod directory is only removed once nothing is mounted below it.
    #[error("refusing to remove {}: {} is still mounted", pod_dir.display(), mount.display())]
    StillMounted { pod_dir: PathBuf, mount: PathBuf },
    #[error("cleaning up subPath mounts of {}: {source}", pod_dir.display())]
    SubPaths {
        pod_dir: PathBuf,
        #[source]
        source: subpath::SubPathError,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `<root>/pods/<uid>`.
pub fn pod_dir(root_dir: &Path, uid: &str) -> PathBuf {
    root_dir.join("pods").join(uid)
}

/// A name that is safe as one path component (API validation makes volume and container names
/// DNS labels and UIDs UUIDs; this guards the filesystem against a source that did not check).
fn check_component(field: &str, value: &str) -> Result<(), VolumeError> {
    if value.is_empty()
        || value == "."
        || value == ".."
        || value.contains('/')
        || value.contains('\0')
    {
        return Err(VolumeError::Invalid {
            field: field.to_string(),
            value: value.to_string(),
            reason: "must be a single path component".to_string(),
        });
    }
    Ok(())
}

/// The pod's UID, checked to be one path component (it names the pod's directory).
pub(crate) fn checked_pod_uid(pod: &Pod) -> Result<&str, VolumeError> {
    let uid = crate::podspec::pod_uid(pod);
    check_component("metadata.uid", uid)?;
    Ok(uid)
}

/// Creates the pod's data directories (`makePodDataDirs`): the pod dir, `volumes/` and
/// `plugins/`, mode 0750.
pub fn make_pod_dirs(root_dir: &Path, uid: &str) -> Result<PathBuf, VolumeError> {
    check_component("metadata.uid", uid)?;
    let dir = pod_dir(root_dir, uid);
    for d in [dir.clone(), dir.join("volumes"), dir.join("plugins")] {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(&d)
            .map_err(io_err(&d))?;
    }
    Ok(dir)
}

/// The API's name for the kind of a volume source (`configMap`, `secret`, …), for messages.
fn volume_kind(volume: &Volume) -> String {
    serde_json::to_value(volume)
        .ok()
        .and_then(|v| {
            v.as_object()
                .and_then(|o| o.keys().find(|k| k.as_str() != "name").cloned())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// Sets up the emptyDir and hostPath volumes of the pod and returns volume name → host path,
/// for the container configs. emptyDirs are created (0777) and, for `medium: Memory`, backed
/// by a tmpfs sized as the kubelet sizes it (pod memory limit, `sizeLimit`); hostPaths are
/// checked against their `type` and created for the `…OrCreate` types. Safe to call on every
/// sync: existing directories are kept and a tmpfs is not mounted twice. configMap, secret,
/// downwardAPI and projected volumes are left to [`update_api_volumes`], which adds their
/// paths.
pub fn prepare_pod_volumes(
    pod: &Pod,
    root_dir: &Path,
) -> Result<BTreeMap<String, PathBuf>, VolumeError> {
    prepare_pod_volumes_with(pod, root_dir, None, Path::new(MOUNTINFO))
}

/// [`prepare_pod_volumes`] with the node's allocatable memory (the upper bound for a
/// memory-backed emptyDir) and the mountinfo file to consult.
pub fn prepare_pod_volumes_with(
    pod: &Pod,
    root_dir: &Path,
    node_allocatable_memory: Option<i64>,
    mountinfo: &Path,
) -> Result<BTreeMap<String, PathBuf>, VolumeError> {
    let uid = checked_pod_uid(pod)?;
    let dir = make_pod_dirs(root_dir, uid)?;
    let mut paths = BTreeMap::new();
    for (i, volume) in pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .enumerate()
    {
        let field = format!("spec.volumes[{i}]");
        check_component(&format!("{field}.name"), &volume.name)?;
        // Image volumes are mounted by the runtime from their image (`sync::start`).
        if projection::ApiVolumeKind::of(volume).is_some() || volume.image.is_some() {
            continue;
        }
        // Mounted by the CSI volume manager (`csi::CsiVolumes::mount_pod`).
        if volume.persistent_volume_claim.is_some()
            || volume.ephemeral.is_some()
            || volume.csi.is_some()
        {
            continue;
        }
        let path = if let Some(empty) = &volume.empty_dir {
            let medium =
                Medium::parse(empty.medium.as_deref()).ok_or_else(|| VolumeError::Unsupported {
                    volume: volume.name.clone(),
                    kind: format!(
                        "emptyDir medium {:?}",
                        empty.medium.as_deref().unwrap_or_default()
                    ),
                })?;
            let size_limit = match &empty.size_limit {
                None => None,
                Some(q) => Some(
                    Quantity::try_from(q)
                        .map_err(|e| VolumeError::Invalid {
                            field: format!("{field}.emptyDir.sizeLimit"),
                            value: q.0.clone(),
                            reason: e.reason.to_string(),
                        })?
                        .value(),
                ),
            };
            // Decided before anything is created: a pod whose requests do not name one page
            // size gets the kubelet's error.
            let hugepages_option = match medium {
                Medium::HugePages => Some(
                    crate::podspec::hugepages::page_size_mount_option(
                        empty.medium.as_deref().unwrap_or_default(),
                        pod,
                    )
                    .map_err(|error| VolumeError::HugePagesMedium {
                        volume: volume.name.clone(),
                        error,
                    })?,
                ),
                Medium::Disk | Medium::Memory => None,
            };
            let path = emptydir::empty_dir_path(&dir, &volume.name);
            setup_empty_dir(
                pod,
                &volume.name,
                &path,
                medium,
                size_limit,
                node_allocatable_memory,
                mountinfo,
                hugepages_option.as_deref(),
            )?;
            path
        } else if let Some(host) = &volume.host_path {
            let path = PathBuf::from(&host.path);
            let type_ = host.type_.clone().unwrap_or_default();
            let kind = HostPathType::parse(Some(&type_)).ok_or_else(|| {
                VolumeError::InvalidHostPathType {
                    volume: volume.name.clone(),
                    type_: type_.clone(),
                }
            })?;
            hostpath::check_host_path(&path, kind).map_err(|e| match e {
                CheckError::NotA(what) => VolumeError::HostPathType {
                    volume: volume.name.clone(),
                    path: path.clone(),
                    type_: type_.clone(),
                    what,
                },
                CheckError::Create(source) => VolumeError::SetUp {
                    volume: volume.name.clone(),
                    path: path.clone(),
                    source,
                },
            })?;
            path
        } else {
            return Err(VolumeError::Unsupported {
                volume: volume.name.clone(),
                kind: volume_kind(volume),
            });
        };
        paths.insert(volume.name.clone(), path);
    }
    Ok(paths)
}

#[allow(clippy::too_many_arguments)]
fn setup_empty_dir(
    pod: &Pod,
    volume: &str,
    path: &Path,
    medium: Medium,
    size_limit: Option<i64>,
    node_allocatable_memory: Option<i64>,
    mountinfo: &Path,
    hugepages_option: Option<&str>,
) -> Result<(), VolumeError> {
    let set_up = |source| VolumeError::SetUp {
        volume: volume.to_string(),
        path: path.to_path_buf(),
        source,
    };
    emptydir::setup_dir(path).map_err(set_up)?;
    match (medium, hugepages_option) {
        (Medium::Disk, _) => {}
        (Medium::Memory, _) => mount_memory_medium(
            pod,
            volume,
            path,
            size_limit,
            node_allocatable_memory,
            mountinfo,
        )?,
        (Medium::HugePages, Some(option)) => {
            mount_hugepages_medium(volume, path, option, mountinfo)?
        }
        (Medium::HugePages, None) => {
            unreachable!("the caller decides the page size of every hugepages emptyDir")
        }
    }
    let fs_group = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group);
    if let Some(gid) = fs_group {
        let gid = u32::try_from(gid).map_err(|_| VolumeError::Invalid {
            field: "spec.securityContext.fsGroup".into(),
            value: gid.to_string(),
            reason: "must be between 0 and 4294967295".into(),
        })?;
        emptydir::apply_fs_group(path, gid).map_err(set_up)?;
    }
    Ok(())
}

/// The directory of a medium-backed emptyDir to mount a filesystem on, as the mount table
/// names it; `None` when something is mounted there already (set up before a restart).
fn unmounted_medium_dir(
    volume: &str,
    path: &Path,
    mountinfo: &Path,
) -> Result<Option<PathBuf>, VolumeError> {
    let table = fs::read_to_string(mountinfo).map_err(io_err(mountinfo))?;
    let canonical = fs::canonicalize(path).map_err(|source| VolumeError::SetUp {
        volume: volume.to_string(),
        path: path.to_path_buf(),
        source,
    })?;
    Ok((!mounts::is_mount_point(&table, &canonical)).then_some(canonical))
}

/// A memory-backed emptyDir: a tmpfs on the directory, unless one is there already.
fn mount_memory_medium(
    pod: &Pod,
    volume: &str,
    path: &Path,
    size_limit: Option<i64>,
    node_allocatable_memory: Option<i64>,
    mountinfo: &Path,
) -> Result<(), VolumeError> {
    let Some(canonical) = unmounted_medium_dir(volume, path, mountinfo)? else {
        return Ok(());
    };
    let size = emptydir::tmpfs_size(pod, size_limit, node_allocatable_memory);
    // The tmpfs root keeps its own mode, 01777, as in the kubelet (`setupTmpfs` mounts after
    // `setupDir`): the sticky bit shows, and `fsGroup` adds setgid to it.
    emptydir::mount_tmpfs(&canonical, size).map_err(|source| VolumeError::Tmpfs {
        volume: volume.to_string(),
        path: path.to_path_buf(),
        source,
    })
}

/// A hugepages emptyDir: a hugetlbfs on the directory, unless one is there already (the
/// kubelet's `setupHugepages`; like it, the mount's root keeps hugetlbfs' own mode).
fn mount_hugepages_medium(
    volume: &str,
    path: &Path,
    option: &str,
    mountinfo: &Path,
) -> Result<(), VolumeError> {
    let Some(canonical) = unmounted_medium_dir(volume, path, mountinfo)? else {
        return Ok(());
    };
    emptydir::mount_hugetlbfs(&canonical, option).map_err(|source| VolumeError::Hugetlbfs {
        volume: volume.to_string(),
        path: path.to_path_buf(),
        option: option.to_string(),
        source,
    })
}

/// Writes the pod's managed hosts file (`ensureHostsFile`) and returns its path, for the
/// containers' /etc/hosts mount. Rewritten in place on every call so running containers, which
/// bind-mount the file, see the same inode. `cluster_domain` gives the FQDN line of pods with a
/// subdomain.
pub fn write_etc_hosts(
    root_dir: &Path,
    pod: &Pod,
    pod_ips: &[String],
    cluster_domain: &str,
) -> Result<PathBuf, VolumeError> {
    write_etc_hosts_from(
        root_dir,
        pod,
        pod_ips,
        cluster_domain,
        Path::new(NODE_HOSTS),
    )
}

/// [`write_etc_hosts`] with the node's hosts file given (host-network pods copy it).
pub fn write_etc_hosts_from(
    root_dir: &Path,
    pod: &Pod,
    pod_ips: &[String],
    cluster_domain: &str,
    node_hosts: &Path,
) -> Result<PathBuf, VolumeError> {
    let uid = checked_pod_uid(pod)?;
    let dir = make_pod_dirs(root_dir, uid)?;
    let spec = pod.spec.as_ref();
    let aliases = spec
        .and_then(|s| s.host_aliases.as_deref())
        .unwrap_or_default();
    let content = if spec.and_then(|s| s.host_network) == Some(true) {
        let node = fs::read_to_string(node_hosts).map_err(io_err(node_hosts))?;
        hosts::host_network_hosts_content(&node, aliases)
    } else {
        let (hostname, domain) = pod_hostname_and_domain(pod, cluster_domain)?;
        hosts::managed_hosts_content(pod_ips, &hostname, &domain, aliases)
    };
    let path = dir.join("etc-hosts");
    fs::write(&path, content).map_err(io_err(&path))?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).map_err(io_err(&path))?;
    Ok(path)
}

/// Eight random hex digits, like the kubelet's `makeUID`.
fn random_id() -> String {
    format!("{:08x}", random_number())
}

/// A random decimal number, the suffix Go's `MkdirTemp` gives a temporary directory.
fn random_number() -> u32 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.finish() as u32
}

/// Creates an empty termination-message file for a new instance of `container` and returns its
/// path, to be mounted at the container's terminationMessagePath. Each instance gets its own
/// file (mode 0666 so any container user can write it) under `<pod>/containers/<name>/`, so the
/// message of the previous instance survives a restart.
pub fn termination_message_file(
    root_dir: &Path,
    uid: &str,
    container: &str,
) -> Result<PathBuf, VolumeError> {
    check_component("metadata.uid", uid)?;
    check_component("container name", container)?;
    let dir = pod_dir(root_dir, uid).join("containers").join(container);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(&dir)
        .map_err(io_err(&dir))?;
    loop {
        let path = dir.join(random_id());
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(&path)
        {
            Ok(_) => {
                fs::set_permissions(&path, fs::Permissions::from_mode(0o666))
                    .map_err(io_err(&path))?;
                return Ok(path);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
}

/// Reads what an exited container left in its termination-message file `path` (as the runtime
/// reports the mount's host path): the last `max` bytes, as the kubelet's `tail.ReadAtMost`.
///
/// The file was written by the container, so it is read without trusting it: `path` must be a
/// file nodelet made ([`termination_message_file`]: `<root>/pods/<uid>/containers/<name>/<file>`),
/// its directory is opened with `O_NOFOLLOW` and the file beneath it with `O_NOFOLLOW` (a
/// symlink in its place is an error, never followed) and `O_NONBLOCK` (a FIFO cannot hang the
/// reader); anything but a regular file is refused; at most `max` bytes are read into a buffer
/// of at most `max` bytes, however large the file. A missing file is `NotFound`, as for the
/// kubelet (the caller then falls back to the logs where the policy says so).
pub fn read_termination_message(root_dir: &Path, path: &Path, max: u64) -> io::Result<Vec<u8>> {
    use nix::fcntl::{open, openat, OFlag};
    use nix::sys::stat::Mode;
    use std::io::{Read, Seek, SeekFrom};
    use std::path::Component;

    let not_ours = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a termination-message file of this node agent",
        )
    };
    let rel = path
        .strip_prefix(root_dir.join("pods"))
        .map_err(|_| not_ours())?;
    let parts: Vec<_> = rel.components().collect();
    if parts.len() != 4
        || parts[1] != Component::Normal("containers".as_ref())
        || !parts.iter().all(|c| matches!(c, Component::Normal(_)))
    {
        return Err(not_ours());
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(not_ours());
    };
    let dir_fd = open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let fd = openat(
        &dir_fd,
        name,
        OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let mut file = fs::File::from(fd);
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let start = meta.len().saturating_sub(max);
    file.seek(SeekFrom::Start(start))?;
    let mut data = Vec::with_capacity(usize::try_from(meta.len().min(max)).unwrap_or(0));
    // `take`: the file may have grown since fstat (another instance cannot write it, but a
    // process left behind in the container's namespaces could).
    file.take(max).read_to_end(&mut data)?;
    Ok(data)
}

/// Removes the pod's directory once the pod is gone: unmounts the subPath bind mounts under
/// `volume-subpaths` and the tmpfs volumes (never a CSI target: the driver unmounts those),
/// then moves the directory into the `trash`, whose own thread deletes it without following
/// symlinks or crossing a mount point. Anything else still mounted below the directory (which
/// nodelet did not mount) stops the removal rather than deleting through it. Blocking (a few
/// syscalls and reads of the mount table, whatever the directory holds): call it on a
/// blocking thread.
pub fn cleanup_pod_dir(
    root_dir: &Path,
    uid: &str,
    trash: &trash::Trash,
) -> Result<(), VolumeError> {
    cleanup_pod_dir_with(root_dir, uid, Path::new(MOUNTINFO), trash)
}

/// [`cleanup_pod_dir`] with the mountinfo file given.
pub fn cleanup_pod_dir_with(
    root_dir: &Path,
    uid: &str,
    mountinfo: &Path,
    trash: &trash::Trash,
) -> Result<(), VolumeError> {
    check_component("metadata.uid", uid)?;
    let dir = pod_dir(root_dir, uid);
    let dir = match fs::canonicalize(&dir) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(&dir)(e)),
    };
    let read = || fs::read_to_string(mountinfo).map_err(io_err(mountinfo));
    // subPath bind mounts first (leftovers of a start nodelet did not finish): they pin
    // directories of the volumes below.
    subpath::clean_sub_paths(&dir, mountinfo).map_err(|e| VolumeError::SubPaths {
        pod_dir: dir.clone(),
        source: e,
    })?;
    let volumes = dir.join("volumes");
    // CSI targets are the driver's to unmount (`csi::CsiVolumes::unmount_pod`): one still
    // mounted here keeps the directory (StillMounted below) until the driver has unpublished.
    let csi_targets = volumes.join(csi::paths::CSI_POD_PLUGIN_DIR);
    for mount in mounts::mounts_under(&read()?, &dir) {
        if mount.starts_with(&volumes) && !mount.starts_with(&csi_targets) {
            nix::mount::umount(&mount).map_err(|source| VolumeError::Unmount {
                path: mount.clone(),
                source,
            })?;
        }
    }
    if let Some(mount) = mounts::mounts_under(&read()?, &dir).into_iter().next() {
        return Err(VolumeError::StillMounted {
            pod_dir: dir,
            mount,
        });
    }
    // Never through a mount point, even one mounted after the check above: the trash's
    // emptier leaves such an entry where it is.
    trash.discard(&dir).map_err(io_err(&dir))
}

/// Whether the pod has volumes whose content comes from the API or the pod itself
/// (configMap, secret, downwardAPI, projected): they are written, and refreshed, on every sync.
pub fn has_api_volumes(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| {
            v.config_map.is_some()
                || v.secret.is_some()
                || v.downward_api.is_some()
                || v.projected.is_some()
        })
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use k8s_openapi::api::core::v1::{
        ConfigMapVolumeSource, EmptyDirVolumeSource, HostAlias, HostPathVolumeSource,
        NFSVolumeSource, PodSpec,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn pod(volumes: Vec<Volume>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("uid-1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                volumes: Some(volumes),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn host_path(name: &str, path: &Path, type_: &str) -> Volume {
        Volume {
            name: name.into(),
            host_path: Some(HostPathVolumeSource {
                path: path.to_string_lossy().into_owned(),
                type_: (!type_.is_empty()).then(|| type_.to_string()),
            }),
            ..Default::default()
        }
    }

    fn empty_dir(name: &str, medium: Option<&str>, size: Option<&str>) -> Volume {
        Volume {
            name: name.into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: medium.map(str::to_string),
                size_limit: size.map(|s| ApiQuantity(s.into())),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pod_dir_layout() {
        assert_eq!(
            pod_dir(Path::new("/var/lib/nodelet"), "u1"),
            PathBuf::from("/var/lib/nodelet/pods/u1")
        );
    }

    #[test]
    fn host_path_type_table() {
        let host = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        let h = host.path();
        fs::create_dir(h.join("dir")).unwrap();
        fs::write(h.join("file"), "x").unwrap();
        let _listener = UnixListener::bind(h.join("sock")).unwrap();
        let cases: Vec<(&str, PathBuf, Result<(), &str>)> = vec![
            ("", h.join("missing"), Ok(())),
            ("Directory", h.join("dir"), Ok(())),
            (
                "Directory",
                h.join("file"),
                Err("is not a directory (type Directory)"),
            ),
            (
                "Directory",
                h.join("missing"),
                Err("is not a directory (type Directory)"),
            ),
            ("DirectoryOrCreate", h.join("new/nested"), Ok(())),
            (
                "DirectoryOrCreate",
                h.join("file"),
                Err("is not a directory (type DirectoryOrCreate)"),
            ),
            ("File", h.join("file"), Ok(())),
            ("File", h.join("dir"), Err("is not a file (type File)")),
            ("FileOrCreate", h.join("created"), Ok(())),
            (
                "FileOrCreate",
                h.join("dir"),
                Err("is not a file (type FileOrCreate)"),
            ),
            ("Socket", h.join("sock"), Ok(())),
            (
                "Socket",
                h.join("file"),
                Err("is not a socket file (type Socket)"),
            ),
            ("CharDevice", PathBuf::from("/dev/null"), Ok(())),
            (
                "CharDevice",
                h.join("file"),
                Err("is not a character device (type CharDevice)"),
            ),
            (
                "BlockDevice",
                PathBuf::from("/dev/null"),
                Err("is not a block device (type BlockDevice)"),
            ),
        ];
        for (type_, path, want) in cases {
            let p = pod(vec![host_path("v", &path, type_)]);
            match (prepare_pod_volumes(&p, root.path()), want) {
                (Ok(paths), Ok(())) => assert_eq!(paths["v"], path, "{type_}"),
                (Err(err), Err(want)) => {
                    let msg = err.to_string();
                    assert!(
                        msg.starts_with("MountVolume.SetUp failed for volume \"v\" : hostPath type check failed: "),
                        "{msg}"
                    );
                    assert!(msg.contains(&path.display().to_string()), "{msg}");
                    assert!(msg.ends_with(want), "{msg}");
                }
                (got, want) => panic!("{type_} {}: got {got:?}, want {want:?}", path.display()),
            }
        }
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&h.join("new/nested")), 0o755);
        assert_eq!(mode(&h.join("created")), 0o644);
        assert!(fs::metadata(h.join("created")).unwrap().is_file());

        let p = pod(vec![host_path("v", h, "Sometimes")]);
        assert_eq!(
            prepare_pod_volumes(&p, root.path())
                .unwrap_err()
                .to_string(),
            "MountVolume.SetUp failed for volume \"v\" : Sometimes is an invalid volume type"
        );
        // FileOrCreate does not create parents, as in the kubelet
        let p = pod(vec![host_path("v", &h.join("no/parent"), "FileOrCreate")]);
        assert!(matches!(
            prepare_pod_volumes(&p, root.path()),
            Err(VolumeError::SetUp { .. })
        ));
    }

    #[test]
    fn empty_dirs_are_created_and_cleanup_removes_them() {
        let root = tempfile::tempdir().unwrap();
        let p = pod(vec![
            empty_dir("cache", None, None),
            empty_dir("data", Some(""), Some("1Gi")),
        ]);
        let paths = prepare_pod_volumes(&p, root.path()).unwrap();
        let cache = root
            .path()
            .join("pods/uid-1/volumes/kubernetes.io~empty-dir/cache");
        assert_eq!(paths["cache"], cache);
        assert_eq!(
            fs::metadata(&cache).unwrap().permissions().mode() & 0o777,
            0o777
        );
        fs::write(cache.join("f"), "data").unwrap();
        // a second sync keeps the contents
        prepare_pod_volumes(&p, root.path()).unwrap();
        assert_eq!(fs::read_to_string(cache.join("f")).unwrap(), "data");

        cleanup_pod_dir(root.path(), "uid-1", &trash::Trash::new(root.path()).0).unwrap();
        assert!(!root.path().join("pods/uid-1").exists());
        // already gone: nothing to do
        cleanup_pod_dir(root.path(), "uid-1", &trash::Trash::new(root.path()).0).unwrap();
    }

    #[test]
    fn memory_empty_dir_mounts_tmpfs_or_names_the_volume() {
        let root = tempfile::tempdir().unwrap();
        let p = pod(vec![empty_dir("shm", Some("Memory"), Some("16Mi"))]);
        match prepare_pod_volumes(&p, root.path()) {
            Ok(paths) => {
                // running with CAP_SYS_ADMIN: a real tmpfs, sized by sizeLimit
                let path = fs::canonicalize(&paths["shm"]).unwrap();
                let table = fs::read_to_string(MOUNTINFO).unwrap();
                let line = table
                    .lines()
                    .find(|l| l.split(' ').nth(4) == Some(path.to_str().unwrap()))
                    .expect("mounted");
                assert!(
                    line.contains("tmpfs") && line.contains("size=16384k"),
                    "{line}"
                );
                // the tmpfs root's own mode, sticky, as the kubelet leaves it (Kubernetes'
                // EmptyDir fsGroup tests read `dtrwxrwxrwx`)
                let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
                assert_eq!(mode(&path), 0o1777);
                // idempotent: no second mount on the next sync, the mode kept
                prepare_pod_volumes(&p, root.path()).unwrap();
                assert_eq!(mode(&path), 0o1777);
                let table = fs::read_to_string(MOUNTINFO).unwrap();
                assert_eq!(
                    mounts::mounts_under(&table, path.parent().unwrap()).len(),
                    1
                );
                cleanup_pod_dir(root.path(), "uid-1", &trash::Trash::new(root.path()).0).unwrap();
                let table = fs::read_to_string(MOUNTINFO).unwrap();
                assert!(!mounts::is_mount_point(&table, &path));
                assert!(!root.path().join("pods/uid-1").exists());
            }
            Err(err @ VolumeError::Tmpfs { .. }) => {
                assert!(err
                    .to_string()
                    .starts_with("MountVolume.SetUp failed for volume \"shm\" : mount tmpfs at "));
                cleanup_pod_dir(root.path(), "uid-1", &trash::Trash::new(root.path()).0).unwrap();
            }
            Err(other) => panic!("{other}"),
        }
    }

    #[test]
    fn cleanup_refuses_to_delete_through_a_foreign_mount() {
        let root = tempfile::tempdir().unwrap();
        let dir = make_pod_dirs(root.path(), "uid-1").unwrap();
        let canonical = fs::canonicalize(&dir).unwrap();
        let foreign = canonical.join("plugins/bind");
        fs::create_dir(&foreign).unwrap();
        let mountinfo = root.path().join("mountinfo");
        fs::write(
            &mountinfo,
            format!(
                "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n90 22 8:1 /x {} rw - ext4 /dev/sda1 rw\n",
                foreign.display()
            ),
        )
        .unwrap();
        let err = cleanup_pod_dir_with(
            root.path(),
            "uid-1",
            &mountinfo,
            &trash::Trash::new(root.path()).0,
        )
        .unwrap_err();
        assert!(matches!(err, VolumeError::StillMounted { .. }), "{err}");
        assert!(foreign.exists());
    }

    #[test]
    fn unsupported_and_invalid_volumes() {
        let root = tempfile::tempdir().unwrap();
        let cases = [
            (
                Volume {
                    name: "share".into(),
                    nfs: Some(NFSVolumeSource {
                        server: "nfs".into(),
                        path: "/x".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                "volume \"share\": nfs volumes are not supported yet",
            ),
            (
                // No container requests hugepages: the kubelet's error, before any mount.
                empty_dir("huge", Some("HugePages"), None),
                "MountVolume.SetUp failed for volume \"huge\" : medium HugePages: hugePages storage requested, but there is no resource request for huge pages",
            ),
            (
                empty_dir("huge", Some("Hugepages"), None),
                "volume \"huge\": emptyDir medium \"Hugepages\" volumes are not supported yet",
            ),
            (
                empty_dir("bad", None, Some("lots")),
                "spec.volumes[0].emptyDir.sizeLimit: Invalid value: \"lots\":",
            ),
            (
                empty_dir("../escape", None, None),
                "spec.volumes[0].name: Invalid value: \"../escape\": must be a single path component",
            ),
        ];
        for (volume, want) in cases {
            let err = prepare_pod_volumes(&pod(vec![volume]), root.path())
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(want), "{err}");
        }
        assert!(!root.path().join("pods/escape").exists());
    }

    #[test]
    fn api_volumes_are_left_to_update_api_volumes() {
        let root = tempfile::tempdir().unwrap();
        let p = pod(vec![
            Volume {
                name: "cfg".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: "settings".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            empty_dir("cache", None, None),
        ]);
        let paths = prepare_pod_volumes(&p, root.path()).unwrap();
        assert_eq!(paths.keys().collect::<Vec<_>>(), ["cache"]);
        assert!(!root
            .path()
            .join("pods/uid-1/volumes/kubernetes.io~configmap")
            .exists());
    }

    #[test]
    fn etc_hosts_file() {
        let root = tempfile::tempdir().unwrap();
        let mut p = pod(vec![]);
        let spec = p.spec.as_mut().unwrap();
        spec.hostname = Some("foo".into());
        spec.subdomain = Some("bar".into());
        spec.host_aliases = Some(vec![HostAlias {
            ip: "1.2.3.4".into(),
            hostnames: Some(vec!["db".into()]),
        }]);
        let path = write_etc_hosts(root.path(), &p, &["10.0.0.5".into()], "cluster.local").unwrap();
        assert_eq!(path, root.path().join("pods/uid-1/etc-hosts"));
        let content = fs::read_to_string(&path).unwrap();
        assert!(content.starts_with(hosts::MANAGED_HOSTS_HEADER));
        assert!(
            content.contains("10.0.0.5\tfoo.bar.ns.svc.cluster.local\tfoo\n"),
            "{content}"
        );
        assert!(content.ends_with("1.2.3.4\tdb\n"));
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );

        // rewritten in place: the same inode, new content
        use std::os::unix::fs::MetadataExt;
        let inode = fs::metadata(&path).unwrap().ino();
        write_etc_hosts(root.path(), &p, &["10.0.0.6".into()], "cluster.local").unwrap();
        assert_eq!(fs::metadata(&path).unwrap().ino(), inode);
        assert!(fs::read_to_string(&path).unwrap().contains("10.0.0.6\t"));

        let node_hosts = root.path().join("node-hosts");
        fs::write(&node_hosts, "127.0.0.1 localhost\n").unwrap();
        p.spec.as_mut().unwrap().host_network = Some(true);
        let path =
            write_etc_hosts_from(root.path(), &p, &[], "cluster.local", &node_hosts).unwrap();
        let content = fs::read_to_string(&path).unwrap();
        assert!(content
            .starts_with("# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n"));
    }

    #[test]
    fn termination_messages_are_read_bounded_without_following_symlinks() {
        let root = tempfile::tempdir().unwrap();
        let path = termination_message_file(root.path(), "uid-1", "app").unwrap();
        let read = |p: &Path| read_termination_message(root.path(), p, 4096);

        // Empty, then a message.
        assert_eq!(read(&path).unwrap(), b"");
        fs::write(&path, "the end\n").unwrap();
        assert_eq!(read(&path).unwrap(), b"the end\n");

        // Oversize: the last 4096 bytes, as `tail.ReadAtMost`.
        let big: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        fs::write(&path, &big).unwrap();
        let got = read(&path).unwrap();
        assert_eq!(got.len(), 4096);
        assert_eq!(got, big[big.len() - 4096..]);

        // Missing: NotFound, so the caller can fall back to the logs.
        let dir = path.parent().unwrap();
        assert_eq!(
            read(&dir.join("gone")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );

        // A symlink in place of the file is not followed (ELOOP), whatever it points at.
        let secret = root.path().join("secret");
        fs::write(&secret, "host secret").unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let err = read(&link).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(nix::libc::ELOOP), "{err}");

        // A symlinked directory on the way is not followed either.
        let pods_c = root.path().join("pods/uid-2/containers");
        fs::create_dir_all(&pods_c).unwrap();
        std::os::unix::fs::symlink(dir, pods_c.join("app")).unwrap();
        let via = pods_c.join("app").join(path.file_name().unwrap());
        assert!(read(&via).is_err());

        // A FIFO is refused without blocking; so is a directory.
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(read(&fifo).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        fs::create_dir(dir.join("d")).unwrap();
        assert!(read(&dir.join("d")).is_err());

        // Only nodelet's own termination-message files.
        for other in [
            secret.clone(),
            root.path().join("pods/uid-1/volumes/x/y"),
            root.path().join("pods/uid-1/containers/app/../../etc"),
        ] {
            assert_eq!(
                read(&other).unwrap_err().kind(),
                io::ErrorKind::InvalidInput,
                "{}",
                other.display()
            );
        }
    }

    #[test]
    fn termination_message_files_are_unique_and_writable() {
        let root = tempfile::tempdir().unwrap();
        let a = termination_message_file(root.path(), "uid-1", "app").unwrap();
        let b = termination_message_file(root.path(), "uid-1", "app").unwrap();
        assert_ne!(a, b);
        assert_eq!(
            a.parent().unwrap(),
            root.path().join("pods/uid-1/containers/app")
        );
        assert_eq!(a.file_name().unwrap().len(), 8);
        assert_eq!(
            fs::metadata(&a).unwrap().permissions().mode() & 0o777,
            0o666
        );
        assert_eq!(fs::metadata(&a).unwrap().len(), 0);
        assert!(termination_message_file(root.path(), "uid-1", "../x").is_err());
    }
}
