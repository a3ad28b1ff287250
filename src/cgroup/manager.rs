//! The cgroup manager: one interface, a variant per cgroup driver (youki's shape, the kubelet's
//! `CgroupManager`). [`super::fs::CgroupfsManager`] creates directories and writes files under a
//! mount point; [`super::systemd::SystemdManager`] asks systemd for transient slice units over
//! D-Bus. Both take the cgroup mount point as a parameter, so tests run them on temporary trees.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{CgroupName, Driver, ResourceConfig};

/// Which cgroup hierarchy the node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// One hierarchy per controller: `<mount>/<controller>/<path>`.
    V1,
    /// The unified hierarchy: `<mount>/<path>`.
    V2,
}

impl Version {
    /// The hierarchy mounted at `mount` (normally `/sys/fs/cgroup`).
    pub fn detect(mount: &Path) -> Version {
        if super::is_cgroup2_unified(mount) {
            Version::V2
        } else {
            Version::V1
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cgroup {path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("cgroup path {0:?} is not below the cgroup root")]
    BadPath(String),
    #[error("cgroup {path} is still in use (processes or child cgroups left in it)")]
    InUse { path: PathBuf },
    #[error("cgroupRoot {path}: the cgroup does not exist (create it, or use \"/\")")]
    RootMissing { path: PathBuf },
    /// A D-Bus call to systemd failed.
    #[error(
        "systemd unit {unit}: {method}{}: {message}",
        properties_suffix(properties)
    )]
    Systemd {
        unit: String,
        method: &'static str,
        /// The properties the call carried, by name (`MemoryMax`, `CPUWeight`, ...).
        properties: Vec<String>,
        message: String,
    },
    /// systemd ran the job but it did not finish with `done`.
    #[error("systemd unit {unit}: {method} job {job} finished with {result:?}")]
    Job {
        unit: String,
        method: &'static str,
        job: String,
        result: String,
    },
    #[error("systemd unit {unit}: {method} job {job} did not finish within {after:?}")]
    JobTimeout {
        unit: String,
        method: &'static str,
        job: String,
        after: std::time::Duration,
    },
    /// No connection to systemd on the bus (or no systemd on it).
    #[error("systemd over D-Bus: {message}")]
    Bus { message: String },
    #[error(transparent)]
    Reservation(#[from] super::allocatable::ReservationTooLarge),
}

fn properties_suffix(properties: &[String]) -> String {
    if properties.is_empty() {
        String::new()
    } else {
        format!(" (properties {})", properties.join(", "))
    }
}

pub type Result<T, E = CgroupError> = std::result::Result<T, E>;

/// A pod cgroup found on disk below a QoS tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundPodCgroup {
    pub uid: String,
    pub name: CgroupName,
    /// When its directory was created (its change time), when the filesystem tells.
    pub created: Option<SystemTime>,
}

/// Creates, configures, lists and removes cgroups of one driver.
#[async_trait::async_trait]
pub trait CgroupManager: Send + Sync + std::fmt::Debug {
    fn driver(&self) -> Driver;

    fn version(&self) -> Version;

    /// The literal name the runtime gets as cgroup parent (`/kubepods/burstable/pod<uid>`, or
    /// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`).
    fn literal(&self, cgroup: &CgroupName) -> String {
        cgroup.to_driver(self.driver())
    }

    /// Where the cgroup's directory is (for v1: in the hierarchy of `controller`).
    fn dir(&self, cgroup: &CgroupName, controller: &str) -> PathBuf;

    /// Whether the cgroup exists (for v1: in the cpu hierarchy, as the kubelet checks).
    fn exists(&self, cgroup: &CgroupName) -> bool {
        self.dir(cgroup, "cpu").is_dir()
    }

    /// Creates the cgroup when it is missing and applies `cfg` to it. Idempotent: an existing
    /// cgroup is only updated.
    async fn ensure(&self, cgroup: &CgroupName, cfg: &ResourceConfig) -> Result<()>;

    /// Removes the cgroup once nothing runs in it; a missing one is fine, one still in use is
    /// [`CgroupError::InUse`] and stays.
    async fn destroy(&self, cgroup: &CgroupName) -> Result<()>;

    /// Whether any process runs in the cgroup or below it.
    fn populated(&self, cgroup: &CgroupName) -> Result<bool>;

    /// The pod cgroups directly below `tier` (`pod<uid>` or `<tier>-pod<uid_>.slice`).
    fn pod_cgroups(&self, tier: &CgroupName) -> Result<Vec<FoundPodCgroup>>;
}

/// `uid` of a cgroupfs pod cgroup's directory name (`pod<uid>`).
pub fn uid_of_cgroupfs_name(name: &str) -> Option<&str> {
    name.strip_prefix("pod").filter(|u| !u.is_empty())
}

/// `uid` of a systemd pod slice below `tier_unit` (`kubepods-burstable.slice`): the unit
/// `kubepods-burstable-pod<uid with _>.slice`, with `_` turned back into `-`.
pub fn uid_of_systemd_name(tier_unit: &str, name: &str) -> Option<String> {
    let prefix = format!("{}-pod", tier_unit.strip_suffix(".slice")?);
    let uid = name.strip_prefix(&prefix)?.strip_suffix(".slice")?;
    (!uid.is_empty() && !uid.contains('-')).then(|| uid.replace('_', "-"))
}

/// A cgroup's directory change time (its creation time on cgroupfs), if the filesystem has it.
pub fn created_at(dir: &Path) -> Option<SystemTime> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir).ok()?;
    let secs = u64::try_from(meta.ctime()).ok()?;
    let nanos = u32::try_from(meta.ctime_nsec()).unwrap_or(0);
    SystemTime::UNIX_EPOCH.checked_add(std::time::Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_uids_from_names() {
        assert_eq!(uid_of_cgroupfs_name("pod1234-5678"), Some("1234-5678"));
        assert_eq!(uid_of_cgroupfs_name("pod"), None);
        assert_eq!(uid_of_cgroupfs_name("burstable"), None);
        let cases = [
            (
                "kubepods-burstable.slice",
                "kubepods-burstable-pod1234_5678.slice",
                Some("1234-5678"),
            ),
            ("kubepods.slice", "kubepods-podabc.slice", Some("abc")),
            // the Burstable tier itself is not a pod of kubepods
            ("kubepods.slice", "kubepods-burstable.slice", None),
            ("kubepods.slice", "kubepods-pod.slice", None),
            ("kubepods.slice", "kubepods-poda-b.slice", None),
            ("kubepods.slice", "cri-containerd-1.scope", None),
        ];
        for (tier, name, want) in cases {
            assert_eq!(
                uid_of_systemd_name(tier, name).as_deref(),
                want,
                "{tier} {name}"
            );
        }
    }
}
