//! The pod cgroup on disk: created with the pod's limits before its sandbox, removed after it.
//!
//! The kubelet's pod container manager writes `ResourceConfigForPod` (see
//! [`super::pod_resource_config`]) to `/kubepods[/<qos>]/pod<uid>` before the runtime places the
//! sandbox and the containers below it, so the pod as a whole (containers, sidecars, init steps
//! and the sandbox) is bounded by its effective resources. nodelet does the same for the
//! `cgroupfs` driver, on cgroup v1 (one hierarchy per controller) and v2 (the unified tree).
//! The mount point is a parameter so that the writes are tested in a temporary directory.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::PodResourceConfig;

/// Which cgroup hierarchy the node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// One hierarchy per controller: `<mount>/<controller>/<path>`.
    V1,
    /// The unified hierarchy: `<mount>/<path>`.
    V2,
}

/// One value written to a pod cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupWrite {
    /// The controller: on v1 the hierarchy's directory under the mount point; on v2 the
    /// controller that must be enabled in the parent's `cgroup.subtree_control`.
    pub controller: &'static str,
    pub file: &'static str,
    pub value: String,
}

/// cpu.weight (v2) for cpu.shares (v1), as runc and the kubelet convert it: the shares range
/// [2, 262144] maps linearly onto the weight range [1, 10000].
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    1 + (shares.saturating_sub(2) * 9999) / 262_142
}

/// The files and values for a pod cgroup, in the order they must be written (the CFS period
/// before the quota it is measured against).
pub fn pod_cgroup_writes(version: Version, cfg: &PodResourceConfig) -> Vec<CgroupWrite> {
    let write = |controller, file, value: String| CgroupWrite {
        controller,
        file,
        value,
    };
    let mut writes = Vec::new();
    match version {
        Version::V1 => {
            writes.push(write("cpu", "cpu.shares", cfg.cpu_shares.to_string()));
            if let Some(period) = cfg.cpu_period {
                writes.push(write("cpu", "cpu.cfs_period_us", period.to_string()));
            }
            if let Some(quota) = cfg.cpu_quota {
                writes.push(write("cpu", "cpu.cfs_quota_us", quota.to_string()));
            }
            if let Some(limit) = cfg.memory_limit.filter(|l| *l > 0) {
                writes.push(write("memory", "memory.limit_in_bytes", limit.to_string()));
            }
        }
        Version::V2 => {
            writes.push(write(
                "cpu",
                "cpu.weight",
                shares_to_weight(cfg.cpu_shares).to_string(),
            ));
            if cfg.cpu_quota.is_some() || cfg.cpu_period.is_some() {
                let quota = match cfg.cpu_quota {
                    Some(q) if q > 0 => q.to_string(),
                    _ => "max".to_string(),
                };
                let period = cfg.cpu_period.unwrap_or(super::QUOTA_PERIOD);
                writes.push(write("cpu", "cpu.max", format!("{quota} {period}")));
            }
            if let Some(limit) = cfg.memory_limit.filter(|l| *l > 0) {
                writes.push(write("memory", "memory.max", limit.to_string()));
            }
        }
    }
    writes
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("pod cgroup {path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("pod cgroup path {0:?} is not below the cgroup root")]
    BadPath(String),
}

/// Creates, configures and removes pod cgroups under one cgroup mount point.
#[derive(Debug, Clone)]
pub struct PodCgroups {
    mount: PathBuf,
    version: Version,
}

impl PodCgroups {
    pub fn new(mount: impl Into<PathBuf>, version: Version) -> Self {
        PodCgroups {
            mount: mount.into(),
            version,
        }
    }

    /// The node's hierarchy at `mount` (normally `/sys/fs/cgroup`).
    pub fn detect(mount: &Path) -> Self {
        let version = if super::is_cgroup2_unified(mount) {
            Version::V2
        } else {
            Version::V1
        };
        PodCgroups::new(mount, version)
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// Where `cgroupfs_path` (`/kubepods/burstable/pod<uid>`) lives for `controller`.
    fn dir(&self, controller: &str, relative: &Path) -> PathBuf {
        match self.version {
            Version::V1 => self.mount.join(controller).join(relative),
            Version::V2 => self.mount.join(relative),
        }
    }

    /// Creates the pod cgroup at `cgroupfs_path` (as given to the runtime as cgroup parent) and
    /// writes `cfg` into it. On v1 a controller whose hierarchy is not mounted is skipped; on v2
    /// the controllers are enabled in every ancestor's `cgroup.subtree_control` first, as the
    /// files only exist where the parent delegates the controller.
    pub fn ensure(&self, cgroupfs_path: &str, cfg: &PodResourceConfig) -> Result<(), CgroupError> {
        let relative = relative(cgroupfs_path)?;
        let writes = pod_cgroup_writes(self.version, cfg);
        if self.version == Version::V2 {
            let mut controllers: Vec<&str> = writes.iter().map(|w| w.controller).collect();
            controllers.dedup();
            self.enable_controllers(&relative, &controllers)?;
        }
        for w in &writes {
            if self.version == Version::V1 && !self.mount.join(w.controller).is_dir() {
                tracing::debug!(
                    controller = w.controller,
                    "cgroup v1 controller not mounted"
                );
                continue;
            }
            let dir = self.dir(w.controller, &relative);
            std::fs::create_dir_all(&dir).map_err(|source| CgroupError::Io {
                path: dir.clone(),
                action: "creating",
                source,
            })?;
            let file = dir.join(w.file);
            std::fs::write(&file, &w.value).map_err(|source| CgroupError::Io {
                path: file,
                action: "writing",
                source,
            })?;
        }
        Ok(())
    }

    /// v2: from the root down to the pod cgroup's parent, create each level and delegate the
    /// controllers it has (per its `cgroup.controllers`) to its children.
    fn enable_controllers(&self, relative: &Path, wanted: &[&str]) -> Result<(), CgroupError> {
        let mut dir = self.mount.clone();
        let levels: Vec<_> = relative.components().collect();
        for (depth, component) in std::iter::once(None)
            .chain(levels.iter().map(Some))
            .enumerate()
        {
            if let Some(c) = component {
                dir.push(c);
                std::fs::create_dir_all(&dir).map_err(|source| CgroupError::Io {
                    path: dir.clone(),
                    action: "creating",
                    source,
                })?;
            }
            if depth == levels.len() {
                break; // the pod cgroup itself: its children are the runtime's business
            }
            let available =
                std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
            let enabled =
                std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            let missing: Vec<String> = wanted
                .iter()
                .filter(|c| available.split_whitespace().any(|a| a == **c))
                .filter(|c| !enabled.split_whitespace().any(|e| e == **c))
                .map(|c| format!("+{c}"))
                .collect();
            if missing.is_empty() {
                continue;
            }
            let file = dir.join("cgroup.subtree_control");
            std::fs::write(&file, missing.join(" ")).map_err(|source| CgroupError::Io {
                path: file,
                action: "enabling controllers",
                source,
            })?;
        }
        Ok(())
    }

    /// Removes the pod cgroup once nothing runs in it (the runtime removed the containers' and
    /// the sandbox's cgroups below it): on v1 from every mounted hierarchy, as the runtime creates
    /// the path in each. Missing directories are fine; a cgroup still in use is an error (it is
    /// tried again when the pod is removed next time).
    pub fn remove(&self, cgroupfs_path: &str) -> Result<(), CgroupError> {
        let relative = relative(cgroupfs_path)?;
        let dirs: Vec<PathBuf> = match self.version {
            Version::V2 => vec![self.mount.join(&relative)],
            Version::V1 => match std::fs::read_dir(&self.mount) {
                Ok(entries) => entries
                    .flatten()
                    // `cpu` and `cpuacct` are links to `cpu,cpuacct`: the real hierarchies only.
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path().join(&relative))
                    .collect(),
                Err(source) => {
                    return Err(CgroupError::Io {
                        path: self.mount.clone(),
                        action: "listing hierarchies",
                        source,
                    })
                }
            },
        };
        for dir in dirs {
            match std::fs::remove_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(CgroupError::Io {
                        path: dir,
                        action: "removing",
                        source,
                    })
                }
            }
        }
        Ok(())
    }
}

/// `/kubepods/pod1` → `kubepods/pod1`; refuses `..` and empty paths so that nothing outside the
/// cgroup mount is ever created or removed.
fn relative(cgroupfs_path: &str) -> Result<PathBuf, CgroupError> {
    let parts: Vec<&str> = cgroupfs_path.split('/').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() || parts.iter().any(|p| *p == "." || *p == "..") {
        return Err(CgroupError::BadPath(cgroupfs_path.to_string()));
    }
    Ok(parts.iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(
        shares: u64,
        quota: Option<i64>,
        period: Option<u64>,
        memory: Option<i64>,
    ) -> PodResourceConfig {
        PodResourceConfig {
            cpu_shares: shares,
            cpu_quota: quota,
            cpu_period: period,
            memory_limit: memory,
        }
    }

    fn rendered(writes: Vec<CgroupWrite>) -> Vec<String> {
        writes
            .into_iter()
            .map(|w| format!("{}/{}={}", w.controller, w.file, w.value))
            .collect()
    }

    #[test]
    fn pod_cgroup_writes_table() {
        let guaranteed = cfg(512, Some(50_000), Some(100_000), Some(64 << 20));
        let burstable_no_limits = cfg(256, None, None, None);
        let unenforced = cfg(1024, Some(-1), Some(100_000), Some(1 << 30));
        let cases: Vec<(&str, Version, PodResourceConfig, Vec<&str>)> = vec![
            (
                "guaranteed v1",
                Version::V1,
                guaranteed,
                vec![
                    "cpu/cpu.shares=512",
                    "cpu/cpu.cfs_period_us=100000",
                    "cpu/cpu.cfs_quota_us=50000",
                    "memory/memory.limit_in_bytes=67108864",
                ],
            ),
            (
                "guaranteed v2",
                Version::V2,
                guaranteed,
                vec![
                    "cpu/cpu.weight=20",
                    "cpu/cpu.max=50000 100000",
                    "memory/memory.max=67108864",
                ],
            ),
            (
                "burstable without limits v1",
                Version::V1,
                burstable_no_limits,
                vec!["cpu/cpu.shares=256"],
            ),
            (
                "besteffort v2",
                Version::V2,
                cfg(2, None, None, None),
                vec!["cpu/cpu.weight=1"],
            ),
            (
                "cpu limits not enforced v1",
                Version::V1,
                unenforced,
                vec![
                    "cpu/cpu.shares=1024",
                    "cpu/cpu.cfs_period_us=100000",
                    "cpu/cpu.cfs_quota_us=-1",
                    "memory/memory.limit_in_bytes=1073741824",
                ],
            ),
            (
                "cpu limits not enforced v2",
                Version::V2,
                unenforced,
                vec![
                    "cpu/cpu.weight=39",
                    "cpu/cpu.max=max 100000",
                    "memory/memory.max=1073741824",
                ],
            ),
        ];
        for (name, version, c, want) in cases {
            assert_eq!(rendered(pod_cgroup_writes(version, &c)), want, "{name}");
        }
    }

    #[test]
    fn shares_to_weight_table() {
        // (shares, weight) as runc's ConvertCPUSharesToCgroupV2Value.
        let cases = [(0, 0), (2, 1), (1024, 39), (262_144, 10_000)];
        for (shares, weight) in cases {
            assert_eq!(shares_to_weight(shares), weight, "{shares}");
        }
    }

    #[test]
    fn v1_writes_each_controller_hierarchy_and_skips_unmounted_ones() {
        let mount = tempfile::tempdir().unwrap();
        std::fs::create_dir(mount.path().join("cpu")).unwrap();
        // no memory hierarchy mounted
        let cgroups = PodCgroups::new(mount.path(), Version::V1);
        cgroups
            .ensure(
                "/kubepods/pod1",
                &cfg(512, Some(50_000), Some(100_000), Some(64 << 20)),
            )
            .unwrap();
        let dir = mount.path().join("cpu/kubepods/pod1");
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(read("cpu.shares"), "512");
        assert_eq!(read("cpu.cfs_period_us"), "100000");
        assert_eq!(read("cpu.cfs_quota_us"), "50000");
        assert!(!mount.path().join("memory").exists());
    }

    #[test]
    fn v2_delegates_controllers_down_to_the_pod_cgroup() {
        let mount = tempfile::tempdir().unwrap();
        let root = mount.path();
        std::fs::write(root.join("cgroup.controllers"), "cpuset cpu io memory pids").unwrap();
        std::fs::write(root.join("cgroup.subtree_control"), "cpu").unwrap();
        // What the kernel would show below: kubepods gets the controllers its parent delegates.
        std::fs::create_dir_all(root.join("kubepods/burstable")).unwrap();
        std::fs::write(root.join("kubepods/cgroup.controllers"), "cpu memory").unwrap();
        std::fs::write(
            root.join("kubepods/burstable/cgroup.controllers"),
            "cpu memory",
        )
        .unwrap();
        std::fs::write(
            root.join("kubepods/burstable/cgroup.subtree_control"),
            "cpu memory",
        )
        .unwrap();
        let cgroups = PodCgroups::new(root, Version::V2);
        cgroups
            .ensure(
                "/kubepods/burstable/poduid-1",
                &cfg(256, None, None, Some(128 << 20)),
            )
            .unwrap();
        let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        // The root had cpu already: only memory is added; kubepods gets both; burstable has both.
        assert_eq!(read("cgroup.subtree_control"), "+memory");
        assert_eq!(read("kubepods/cgroup.subtree_control"), "+cpu +memory");
        assert_eq!(
            read("kubepods/burstable/cgroup.subtree_control"),
            "cpu memory"
        );
        assert_eq!(read("kubepods/burstable/poduid-1/cpu.weight"), "10");
        assert_eq!(read("kubepods/burstable/poduid-1/memory.max"), "134217728");
        assert!(!root.join("kubepods/burstable/poduid-1/cpu.max").exists());
    }

    #[test]
    fn remove_takes_the_path_out_of_every_hierarchy_and_tolerates_missing_ones() {
        let mount = tempfile::tempdir().unwrap();
        let root = mount.path();
        for h in ["cpu,cpuacct", "memory", "pids"] {
            std::fs::create_dir_all(root.join(h)).unwrap();
        }
        std::os::unix::fs::symlink(root.join("cpu,cpuacct"), root.join("cpu")).unwrap();
        // As the runtime leaves them: the pod path in two hierarchies (empty: the kernel's
        // control files do not count as content), missing in the third.
        std::fs::create_dir_all(root.join("cpu,cpuacct/kubepods/pod1")).unwrap();
        std::fs::create_dir_all(root.join("memory/kubepods/pod1")).unwrap();
        let cgroups = PodCgroups::new(root, Version::V1);
        cgroups.remove("/kubepods/pod1").unwrap();
        assert!(!root.join("cpu,cpuacct/kubepods/pod1").exists());
        assert!(!root.join("memory/kubepods/pod1").exists());
        assert!(
            root.join("memory/kubepods").exists(),
            "only the pod level goes"
        );
        // Gone already: still fine.
        cgroups.remove("/kubepods/pod1").unwrap();
        // A cgroup with something left below it is reported.
        std::fs::create_dir_all(root.join("memory/kubepods/pod2/container")).unwrap();
        let err = cgroups.remove("/kubepods/pod2").unwrap_err().to_string();
        assert!(err.contains("memory/kubepods/pod2: removing"), "{err}");
    }

    #[test]
    fn paths_outside_the_mount_are_refused() {
        let mount = tempfile::tempdir().unwrap();
        let cgroups = PodCgroups::new(mount.path(), Version::V2);
        for bad in ["", "/", "/kubepods/../../etc", "kubepods/./pod"] {
            let err = cgroups.remove(bad).unwrap_err();
            assert!(matches!(err, CgroupError::BadPath(_)), "{bad:?}: {err}");
            let err = cgroups.ensure(bad, &cfg(2, None, None, None)).unwrap_err();
            assert!(matches!(err, CgroupError::BadPath(_)), "{bad:?}: {err}");
        }
    }
}
