//! The `cgroupfs` driver: cgroups are directories nodelet creates under the mount point, with
//! the values written into their files — on cgroup v1 one hierarchy per controller, on v2 the
//! unified tree with the controllers delegated down through `cgroup.subtree_control`.
//!
//! The kubelet's pod container manager writes `ResourceConfigForPod` (see
//! [`super::pod_cgroup_config`]) to `/kubepods[/<qos>]/pod<uid>` before the runtime places the
//! sandbox and the containers below it, so the pod as a whole (containers, sidecars, init steps
//! and the sandbox) is bounded by its effective resources. The mount point is a parameter so
//! that every write is tested in a temporary directory.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::manager::{
    created_at, uid_of_cgroupfs_name, CgroupError, CgroupManager, FoundPodCgroup, Result, Version,
};
use super::{shares_to_weight, CgroupName, Driver, MemoryHigh, ResourceConfig};

/// One value written to a cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupWrite {
    /// The controller: on v1 the hierarchy's directory under the mount point; on v2 the
    /// controller that must be enabled in the parent's `cgroup.subtree_control`.
    pub controller: &'static str,
    pub file: String,
    pub value: String,
    /// A file the kernel may lack (hugetlb's `.rsvd` limits before Linux 5.7, hugetlb files
    /// where the controller is not enabled): skipped when absent, as libcontainer skips them.
    pub optional: bool,
}

fn write(controller: &'static str, file: impl Into<String>, value: String) -> CgroupWrite {
    CgroupWrite {
        controller,
        file: file.into(),
        value,
        optional: false,
    }
}

/// The hugetlb limits (libcontainer's `HugeTlbGroup.Set` / fs2 `setHugeTlb`): each page size's
/// limit, and the same value as its reservation limit where the kernel has one. `suffix` is the
/// version's file suffix (`limit_in_bytes` on v1, `max` on v2).
fn hugetlb_writes(cfg: &ResourceConfig, suffix: &str, writes: &mut Vec<CgroupWrite>) {
    for (size, limit) in &cfg.hugetlb_limits {
        // A host without the hugetlb controller enabled lacks the files: the container's
        // limits still reach the runtime through the CRI.
        writes.push(CgroupWrite {
            optional: true,
            ..write(
                "hugetlb",
                format!("hugetlb.{size}.{suffix}"),
                limit.to_string(),
            )
        });
        writes.push(CgroupWrite {
            optional: true,
            ..write(
                "hugetlb",
                format!("hugetlb.{size}.rsvd.{suffix}"),
                limit.to_string(),
            )
        });
    }
}

/// The files and values for a cgroup, in the order they must be written (the CFS period before
/// the quota it is measured against).
pub fn cgroup_writes(version: Version, cfg: &ResourceConfig) -> Vec<CgroupWrite> {
    match version {
        Version::V1 => v1_writes(cfg),
        Version::V2 => v2_writes(cfg),
    }
}

fn pids_value(limit: i64) -> String {
    if limit > 0 {
        limit.to_string()
    } else {
        "max".to_string()
    }
}

fn v1_writes(cfg: &ResourceConfig) -> Vec<CgroupWrite> {
    let mut writes = Vec::new();
    if let Some(shares) = cfg.cpu_shares {
        writes.push(write("cpu", "cpu.shares", shares.to_string()));
    }
    if let Some(period) = cfg.cpu_period {
        writes.push(write("cpu", "cpu.cfs_period_us", period.to_string()));
    }
    if let Some(quota) = cfg.cpu_quota {
        writes.push(write("cpu", "cpu.cfs_quota_us", quota.to_string()));
    }
    if let Some(limit) = cfg.memory_limit.filter(|l| *l > 0) {
        writes.push(write("memory", "memory.limit_in_bytes", limit.to_string()));
    }
    if let Some(pids) = cfg.pids_limit {
        writes.push(write("pids", "pids.max", pids_value(pids)));
    }
    hugetlb_writes(cfg, "limit_in_bytes", &mut writes);
    // memory.min/low/high do not exist on v1.
    writes
}

/// The cgroup v2 hugetlb files alone, for the systemd driver (systemd has no property for them).
pub fn hugetlb_v2_writes(cfg: &ResourceConfig) -> Vec<CgroupWrite> {
    let mut writes = Vec::new();
    hugetlb_writes(cfg, "max", &mut writes);
    writes
}

/// The `cpu.max` line: `<quota|max> <period>`.
pub fn cpu_max(cfg: &ResourceConfig) -> Option<String> {
    if cfg.cpu_quota.is_none() && cfg.cpu_period.is_none() {
        return None;
    }
    let quota = match cfg.cpu_quota {
        Some(q) if q > 0 => q.to_string(),
        _ => "max".to_string(),
    };
    let period = cfg.cpu_period.unwrap_or(super::QUOTA_PERIOD);
    Some(format!("{quota} {period}"))
}

fn v2_writes(cfg: &ResourceConfig) -> Vec<CgroupWrite> {
    let mut writes = Vec::new();
    if let Some(shares) = cfg.cpu_shares {
        writes.push(write(
            "cpu",
            "cpu.weight",
            shares_to_weight(shares).to_string(),
        ));
    }
    if let Some(max) = cpu_max(cfg) {
        writes.push(write("cpu", "cpu.max", max));
    }
    // Protection before the limit: a lower memory.max never has to fight a stale memory.min.
    if let Some(min) = cfg.memory_min {
        writes.push(write("memory", "memory.min", min.max(0).to_string()));
    }
    if let Some(low) = cfg.memory_low {
        writes.push(write("memory", "memory.low", low.max(0).to_string()));
    }
    if let Some(high) = cfg.memory_high {
        let value = match high {
            MemoryHigh::Bytes(b) => b.to_string(),
            MemoryHigh::Max => "max".to_string(),
        };
        writes.push(write("memory", "memory.high", value));
    }
    if let Some(limit) = cfg.memory_limit.filter(|l| *l > 0) {
        writes.push(write("memory", "memory.max", limit.to_string()));
    }
    if let Some(pids) = cfg.pids_limit {
        writes.push(write("pids", "pids.max", pids_value(pids)));
    }
    hugetlb_writes(cfg, "max", &mut writes);
    writes
}

/// The controllers whose files nodelet writes.
const NEEDED_CONTROLLERS: &[&str] = &["cpu", "memory", "pids"];

/// Creates, configures and removes cgroups under one cgroup mount point.
#[derive(Debug, Clone)]
pub struct CgroupfsManager {
    mount: PathBuf,
    version: Version,
}

impl CgroupfsManager {
    pub fn new(mount: impl Into<PathBuf>, version: Version) -> Self {
        CgroupfsManager {
            mount: mount.into(),
            version,
        }
    }

    /// The node's hierarchy at `mount` (normally `/sys/fs/cgroup`).
    pub fn detect(mount: &Path) -> Self {
        CgroupfsManager::new(mount, Version::detect(mount))
    }

    pub fn mount(&self) -> &Path {
        &self.mount
    }

    fn path_dir(&self, controller: &str, relative: &Path) -> PathBuf {
        match self.version {
            Version::V1 => self.mount.join(controller).join(relative),
            Version::V2 => self.mount.join(relative),
        }
    }

    /// Writes `cfg` into the cgroup at `cgroupfs_path` (`/kubepods/burstable/pod<uid>`), which
    /// is created first. On v1 a controller whose hierarchy is not mounted is skipped; on v2 the
    /// controllers are delegated from the root down to the cgroup's parent first, as the files
    /// only exist where the parent enables the controller.
    pub fn ensure_path(&self, cgroupfs_path: &str, cfg: &ResourceConfig) -> Result<()> {
        let relative = relative(cgroupfs_path)?;
        let writes = cgroup_writes(self.version, cfg);
        match self.version {
            Version::V2 => {
                self.enable_controllers(&relative)?;
                let dir = self.mount.join(&relative);
                create_dir(&dir)?;
            }
            Version::V1 => {
                // The cgroup exists in the hierarchies the kubelet checks, even without values.
                for controller in ["cpu", "memory", "pids", "hugetlb"] {
                    if self.mount.join(controller).is_dir() {
                        create_dir(&self.path_dir(controller, &relative))?;
                    }
                }
            }
        }
        for w in &writes {
            if self.version == Version::V1 && !self.mount.join(w.controller).is_dir() {
                tracing::debug!(
                    controller = w.controller,
                    "cgroup v1 controller not mounted"
                );
                continue;
            }
            let file = self.path_dir(w.controller, &relative).join(&w.file);
            if w.optional && !file.exists() {
                tracing::debug!(path = %file.display(), "optional cgroup file absent; skipped");
                continue;
            }
            std::fs::write(&file, &w.value).map_err(|source| CgroupError::Io {
                path: file,
                action: "writing",
                source,
            })?;
        }
        Ok(())
    }

    /// v2: from the root down to the cgroup's parent, create each level and delegate every
    /// controller it has (per its `cgroup.controllers`) to its children, as libcontainer's
    /// `CreateCgroupPath` does.
    fn enable_controllers(&self, relative: &Path) -> Result<()> {
        let mut dir = self.mount.clone();
        let levels: Vec<_> = relative.components().collect();
        for (depth, component) in std::iter::once(None)
            .chain(levels.iter().map(Some))
            .enumerate()
        {
            if let Some(c) = component {
                dir.push(c);
                create_dir(&dir)?;
            }
            if depth == levels.len() {
                break; // the cgroup itself: its children are the runtime's business
            }
            let available =
                std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
            let enabled =
                std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            let missing: Vec<String> = available
                .split_whitespace()
                .filter(|c| !enabled.split_whitespace().any(|e| e == *c))
                .map(|c| format!("+{c}"))
                .collect();
            if missing.is_empty() {
                continue;
            }
            let file = dir.join("cgroup.subtree_control");
            if std::fs::write(&file, missing.join(" ")).is_ok() {
                continue;
            }
            // One by one, as runc does: a controller the kernel will not delegate here (one
            // nodelet does not write, such as rdma or misc) must not keep the others away.
            for controller in &missing {
                if let Err(source) = std::fs::write(&file, controller) {
                    if NEEDED_CONTROLLERS.contains(&controller.trim_start_matches('+')) {
                        return Err(CgroupError::Io {
                            path: file,
                            action: "enabling controllers",
                            source,
                        });
                    }
                    tracing::debug!(path = %file.display(), controller, error = %source, "controller not delegated");
                }
            }
        }
        Ok(())
    }

    /// The directories of `cgroupfs_path`: one on v2, one per mounted hierarchy on v1 (the
    /// runtime creates the path in every one).
    fn all_dirs(&self, relative: &Path) -> Result<Vec<PathBuf>> {
        Ok(match self.version {
            Version::V2 => vec![self.mount.join(relative)],
            Version::V1 => match std::fs::read_dir(&self.mount) {
                Ok(entries) => entries
                    .flatten()
                    // `cpu` and `cpuacct` may be links to `cpu,cpuacct`: the real hierarchies only.
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path().join(relative))
                    .collect(),
                Err(source) => {
                    return Err(CgroupError::Io {
                        path: self.mount.clone(),
                        action: "listing hierarchies",
                        source,
                    })
                }
            },
        })
    }

    /// Removes the cgroup at `cgroupfs_path` once nothing runs in it: from every mounted
    /// hierarchy on v1, with any empty child cgroups the runtime left behind. Missing
    /// directories are fine; a cgroup with processes is [`CgroupError::InUse`] (it is tried
    /// again when the pod is removed next time).
    pub fn remove_path(&self, cgroupfs_path: &str) -> Result<()> {
        let relative = relative(cgroupfs_path)?;
        for dir in self.all_dirs(&relative)? {
            remove_tree(&dir)?;
        }
        Ok(())
    }

    fn populated_path(&self, relative: &Path) -> Result<bool> {
        match self.version {
            Version::V2 => populated_v2(&self.mount.join(relative)),
            Version::V1 => {
                for dir in self.all_dirs(relative)? {
                    if has_processes(&dir)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
        }
    }
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| CgroupError::Io {
        path: dir.to_path_buf(),
        action: "creating",
        source,
    })
}

/// Removes `dir` and the (empty) cgroups below it, deepest first. rmdir(2) on a cgroup fails
/// while processes are in it, so nothing running is ever removed.
fn remove_tree(dir: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(CgroupError::Io {
                path: dir.to_path_buf(),
                action: "listing",
                source,
            })
        }
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path())?;
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        // EBUSY: processes or child cgroups; ENOTEMPTY: content that is not a cgroup's.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::ENOTEMPTY)) => {
            Err(CgroupError::InUse {
                path: dir.to_path_buf(),
            })
        }
        Err(source) => Err(CgroupError::Io {
            path: dir.to_path_buf(),
            action: "removing",
            source,
        }),
    }
}

/// v2: `populated 1` in `cgroup.events` covers the cgroup and everything below it. A missing
/// cgroup is not populated.
pub fn populated_v2(dir: &Path) -> Result<bool> {
    let file = dir.join("cgroup.events");
    match std::fs::read_to_string(&file) {
        Ok(events) => Ok(events
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["populated", "1"])),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(has_processes(dir)?),
        Err(source) => Err(CgroupError::Io {
            path: file,
            action: "reading",
            source,
        }),
    }
}

/// Any pid in `cgroup.procs` of `dir` or of a cgroup below it.
fn has_processes(dir: &Path) -> Result<bool> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(CgroupError::Io {
                path: dir.to_path_buf(),
                action: "listing",
                source,
            })
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            if has_processes(&path)? {
                return Ok(true);
            }
        } else if entry.file_name() == "cgroup.procs" {
            let procs = std::fs::read_to_string(&path).map_err(|source| CgroupError::Io {
                path: path.clone(),
                action: "reading",
                source,
            })?;
            if procs.split_whitespace().next().is_some() {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

#[async_trait::async_trait]
impl CgroupManager for CgroupfsManager {
    fn driver(&self) -> Driver {
        Driver::Cgroupfs
    }

    fn version(&self) -> Version {
        self.version
    }

    fn dir(&self, cgroup: &CgroupName, controller: &str) -> PathBuf {
        self.path_dir(
            controller,
            Path::new(cgroup.to_cgroupfs().trim_start_matches('/')),
        )
    }

    async fn ensure(&self, cgroup: &CgroupName, cfg: &ResourceConfig) -> Result<()> {
        self.ensure_path(&cgroup.to_cgroupfs(), cfg)
    }

    async fn destroy(&self, cgroup: &CgroupName) -> Result<()> {
        self.remove_path(&cgroup.to_cgroupfs())
    }

    fn populated(&self, cgroup: &CgroupName) -> Result<bool> {
        self.populated_path(&relative(&cgroup.to_cgroupfs())?)
    }

    fn pod_cgroups(&self, tier: &CgroupName) -> Result<Vec<FoundPodCgroup>> {
        let dir = self.dir(tier, "cpu");
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(CgroupError::Io {
                    path: dir,
                    action: "listing",
                    source,
                })
            }
        };
        let mut found: Vec<FoundPodCgroup> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let uid = uid_of_cgroupfs_name(&name)?.to_string();
                Some(FoundPodCgroup {
                    uid,
                    name: tier.child(&name),
                    created: created_at(&e.path()),
                })
            })
            .collect();
        found.sort_by(|a, b| a.uid.cmp(&b.uid));
        Ok(found)
    }
}

/// `/kubepods/pod1` → `kubepods/pod1`; refuses `..` and empty paths so that nothing outside the
/// cgroup mount is ever created or removed.
fn relative(cgroupfs_path: &str) -> Result<PathBuf> {
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
    ) -> ResourceConfig {
        ResourceConfig {
            cpu_shares: Some(shares),
            cpu_quota: quota,
            cpu_period: period,
            memory_limit: memory,
            ..Default::default()
        }
    }

    fn rendered(writes: Vec<CgroupWrite>) -> Vec<String> {
        writes
            .into_iter()
            .map(|w| format!("{}/{}={}", w.controller, w.file, w.value))
            .collect()
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn cgroup_writes_table() {
        let guaranteed = cfg(512, Some(50_000), Some(100_000), Some(64 << 20));
        let burstable_no_limits = cfg(256, None, None, None);
        let unenforced = cfg(1024, Some(-1), Some(100_000), Some(1 << 30));
        let memory_qos = ResourceConfig {
            pids_limit: Some(1024),
            memory_min: Some(0),
            memory_low: Some(256 << 20),
            memory_high: Some(MemoryHigh::Bytes(993_210_368)),
            ..cfg(256, None, None, Some(1 << 30))
        };
        let reset = ResourceConfig {
            pids_limit: Some(-1),
            memory_min: Some(0),
            memory_low: Some(0),
            memory_high: Some(MemoryHigh::Max),
            ..cfg(2, None, None, None)
        };
        let hugetlb = ResourceConfig {
            hugetlb_limits: vec![("2MB".into(), 4 << 20), ("1GB".into(), 0)],
            ..cfg(256, None, None, None)
        };
        let cases: Vec<(&str, Version, ResourceConfig, Vec<&str>)> = vec![
            (
                "guaranteed v1",
                Version::V1,
                guaranteed.clone(),
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
                guaranteed.clone(),
                vec![
                    "cpu/cpu.weight=59",
                    "cpu/cpu.max=50000 100000",
                    "memory/memory.max=67108864",
                ],
            ),
            (
                "burstable without limits v1",
                Version::V1,
                burstable_no_limits.clone(),
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
                unenforced.clone(),
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
                unenforced.clone(),
                vec![
                    "cpu/cpu.weight=100",
                    "cpu/cpu.max=max 100000",
                    "memory/memory.max=1073741824",
                ],
            ),
            (
                "memory qos and pids v2",
                Version::V2,
                memory_qos.clone(),
                vec![
                    "cpu/cpu.weight=35",
                    "memory/memory.min=0",
                    "memory/memory.low=268435456",
                    "memory/memory.high=993210368",
                    "memory/memory.max=1073741824",
                    "pids/pids.max=1024",
                ],
            ),
            (
                "memory qos values do not exist on v1; pids do",
                Version::V1,
                memory_qos.clone(),
                vec![
                    "cpu/cpu.shares=256",
                    "memory/memory.limit_in_bytes=1073741824",
                    "pids/pids.max=1024",
                ],
            ),
            (
                "reset v2",
                Version::V2,
                reset.clone(),
                vec![
                    "cpu/cpu.weight=1",
                    "memory/memory.min=0",
                    "memory/memory.low=0",
                    "memory/memory.high=max",
                    "pids/pids.max=max",
                ],
            ),
            (
                "hugetlb v1",
                Version::V1,
                hugetlb.clone(),
                vec![
                    "cpu/cpu.shares=256",
                    "hugetlb/hugetlb.2MB.limit_in_bytes=4194304",
                    "hugetlb/hugetlb.2MB.rsvd.limit_in_bytes=4194304",
                    "hugetlb/hugetlb.1GB.limit_in_bytes=0",
                    "hugetlb/hugetlb.1GB.rsvd.limit_in_bytes=0",
                ],
            ),
            (
                "hugetlb v2",
                Version::V2,
                hugetlb.clone(),
                vec![
                    "cpu/cpu.weight=35",
                    "hugetlb/hugetlb.2MB.max=4194304",
                    "hugetlb/hugetlb.2MB.rsvd.max=4194304",
                    "hugetlb/hugetlb.1GB.max=0",
                    "hugetlb/hugetlb.1GB.rsvd.max=0",
                ],
            ),
        ];
        for (name, version, c, want) in cases {
            assert_eq!(rendered(cgroup_writes(version, &c)), want, "{name}");
        }
    }

    #[test]
    fn hugetlb_files_are_written_where_the_kernel_has_them() {
        let mount = tempfile::tempdir().unwrap();
        for h in ["cpu", "hugetlb"] {
            std::fs::create_dir(mount.path().join(h)).unwrap();
        }
        // The kernel makes the files when it makes the cgroup; here: the limits, and the
        // reservation limit only for 2MB (a kernel before 5.7 has none).
        let dir = mount.path().join("hugetlb/kubepods/pod1");
        std::fs::create_dir_all(&dir).unwrap();
        for f in [
            "hugetlb.2MB.limit_in_bytes",
            "hugetlb.2MB.rsvd.limit_in_bytes",
            "hugetlb.1GB.limit_in_bytes",
        ] {
            std::fs::write(dir.join(f), "9223372036854771712").unwrap();
        }
        let c = ResourceConfig {
            hugetlb_limits: vec![("2MB".into(), 4 << 20), ("1GB".into(), 0)],
            ..cfg(256, None, None, None)
        };
        let cgroups = CgroupfsManager::new(mount.path(), Version::V1);
        cgroups.ensure_path("/kubepods/pod1", &c).unwrap();
        assert_eq!(read(&dir.join("hugetlb.2MB.limit_in_bytes")), "4194304");
        assert_eq!(
            read(&dir.join("hugetlb.2MB.rsvd.limit_in_bytes")),
            "4194304"
        );
        assert_eq!(read(&dir.join("hugetlb.1GB.limit_in_bytes")), "0");
        assert!(!dir.join("hugetlb.1GB.rsvd.limit_in_bytes").exists());
        // No hugetlb hierarchy mounted: nothing written, no error.
        let bare = tempfile::tempdir().unwrap();
        std::fs::create_dir(bare.path().join("cpu")).unwrap();
        CgroupfsManager::new(bare.path(), Version::V1)
            .ensure_path("/kubepods/pod1", &c)
            .unwrap();
        assert!(!bare.path().join("hugetlb").exists());
    }

    #[test]
    fn v1_writes_each_controller_hierarchy_and_skips_unmounted_ones() {
        let mount = tempfile::tempdir().unwrap();
        std::fs::create_dir(mount.path().join("cpu")).unwrap();
        std::fs::create_dir(mount.path().join("pids")).unwrap();
        // no memory hierarchy mounted
        let cgroups = CgroupfsManager::new(mount.path(), Version::V1);
        let c = ResourceConfig {
            pids_limit: Some(100),
            ..cfg(512, Some(50_000), Some(100_000), Some(64 << 20))
        };
        cgroups.ensure_path("/kubepods/pod1", &c).unwrap();
        let dir = mount.path().join("cpu/kubepods/pod1");
        assert_eq!(read(&dir.join("cpu.shares")), "512");
        assert_eq!(read(&dir.join("cpu.cfs_period_us")), "100000");
        assert_eq!(read(&dir.join("cpu.cfs_quota_us")), "50000");
        assert_eq!(
            read(&mount.path().join("pids/kubepods/pod1/pids.max")),
            "100"
        );
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
        std::fs::write(root.join("kubepods/cgroup.controllers"), "cpu memory pids").unwrap();
        std::fs::write(
            root.join("kubepods/burstable/cgroup.controllers"),
            "cpu memory pids",
        )
        .unwrap();
        std::fs::write(
            root.join("kubepods/burstable/cgroup.subtree_control"),
            "cpu memory pids",
        )
        .unwrap();
        let cgroups = CgroupfsManager::new(root, Version::V2);
        let c = ResourceConfig {
            pids_limit: Some(64),
            ..cfg(256, None, None, Some(128 << 20))
        };
        cgroups
            .ensure_path("/kubepods/burstable/poduid-1", &c)
            .unwrap();
        let read = |p: &str| read(&root.join(p));
        // Every controller the level has, except those already enabled.
        assert_eq!(read("cgroup.subtree_control"), "+cpuset +io +memory +pids");
        assert_eq!(
            read("kubepods/cgroup.subtree_control"),
            "+cpu +memory +pids"
        );
        assert_eq!(
            read("kubepods/burstable/cgroup.subtree_control"),
            "cpu memory pids"
        );
        assert_eq!(read("kubepods/burstable/poduid-1/cpu.weight"), "35");
        assert_eq!(read("kubepods/burstable/poduid-1/memory.max"), "134217728");
        assert_eq!(read("kubepods/burstable/poduid-1/pids.max"), "64");
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
        // control files do not count as content), missing in the third; an empty container
        // cgroup left below one of them goes too.
        std::fs::create_dir_all(root.join("cpu,cpuacct/kubepods/pod1/leftover")).unwrap();
        std::fs::create_dir_all(root.join("memory/kubepods/pod1")).unwrap();
        let cgroups = CgroupfsManager::new(root, Version::V1);
        cgroups.remove_path("/kubepods/pod1").unwrap();
        assert!(!root.join("cpu,cpuacct/kubepods/pod1").exists());
        assert!(!root.join("memory/kubepods/pod1").exists());
        assert!(
            root.join("memory/kubepods").exists(),
            "only the pod level goes"
        );
        // Gone already: still fine.
        cgroups.remove_path("/kubepods/pod1").unwrap();
    }

    #[test]
    fn populated_reads_cgroup_events_on_v2_and_procs_on_v1() {
        let mount = tempfile::tempdir().unwrap();
        let root = mount.path();
        let v2 = CgroupfsManager::new(root, Version::V2);
        let pod = CgroupName::parse_cgroupfs("/kubepods/pod1");
        std::fs::create_dir_all(root.join("kubepods/pod1")).unwrap();
        std::fs::write(
            root.join("kubepods/pod1/cgroup.events"),
            "populated 1\nfrozen 0\n",
        )
        .unwrap();
        assert!(v2.populated(&pod).unwrap());
        std::fs::write(
            root.join("kubepods/pod1/cgroup.events"),
            "populated 0\nfrozen 0\n",
        )
        .unwrap();
        assert!(!v2.populated(&pod).unwrap());
        assert!(!v2
            .populated(&CgroupName::parse_cgroupfs("/kubepods/gone"))
            .unwrap());

        let v1 = CgroupfsManager::new(root.join("v1"), Version::V1);
        std::fs::create_dir_all(root.join("v1/memory/kubepods/pod1/sandbox")).unwrap();
        std::fs::create_dir_all(root.join("v1/cpu/kubepods/pod1")).unwrap();
        std::fs::write(root.join("v1/cpu/kubepods/pod1/cgroup.procs"), "").unwrap();
        assert!(!v1.populated(&pod).unwrap());
        std::fs::write(
            root.join("v1/memory/kubepods/pod1/sandbox/cgroup.procs"),
            "4242\n",
        )
        .unwrap();
        assert!(v1.populated(&pod).unwrap());
    }

    #[test]
    fn pod_cgroups_are_listed_with_their_uids() {
        let mount = tempfile::tempdir().unwrap();
        let root = mount.path();
        for d in [
            "cpu/kubepods/podaaa",
            "cpu/kubepods/burstable/podbbb",
            "cpu/kubepods/besteffort",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("cpu/kubepods/cpu.shares"), "2048").unwrap();
        let v1 = CgroupfsManager::new(root, Version::V1);
        let kubepods = CgroupName::parse_cgroupfs("/kubepods");
        let found = v1.pod_cgroups(&kubepods).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].uid, "aaa");
        assert_eq!(found[0].name.to_cgroupfs(), "/kubepods/podaaa");
        assert!(found[0].created.is_some());
        let burstable = v1.pod_cgroups(&kubepods.child("burstable")).unwrap();
        assert_eq!(burstable[0].uid, "bbb");
        assert!(v1
            .pod_cgroups(&kubepods.child("missing"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn paths_outside_the_mount_are_refused() {
        let mount = tempfile::tempdir().unwrap();
        let cgroups = CgroupfsManager::new(mount.path(), Version::V2);
        for bad in ["", "/", "/kubepods/../../etc", "kubepods/./pod"] {
            let err = cgroups.remove_path(bad).unwrap_err();
            assert!(matches!(err, CgroupError::BadPath(_)), "{bad:?}: {err}");
            let err = cgroups
                .ensure_path(bad, &cfg(2, None, None, None))
                .unwrap_err();
            assert!(matches!(err, CgroupError::BadPath(_)), "{bad:?}: {err}");
        }
    }
}
