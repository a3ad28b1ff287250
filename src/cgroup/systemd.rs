//! The `systemd` driver: every cgroup nodelet makes is a slice unit that systemd creates and
//! removes — a transient unit started over D-Bus (`StartTransientUnit`), updated with
//! `SetUnitProperties`, removed with `StopUnit` — as the kubelet does through libcontainer's
//! systemd driver. nodelet never creates or removes a directory in the tree systemd owns.
//!
//! The values go to systemd as unit properties (`CPUWeight`, `CPUQuotaPerSecUSec`,
//! `CPUQuotaPeriodUSec`, `MemoryMax`, `MemoryMin`, `MemoryLow`, `MemoryHigh`, `TasksMax`), the
//! mapping libcontainer's `genV2ResourcesProperties` uses, so they survive a `daemon-reload`.
//! systemd keeps the cpu quota in whole percent of a cpu, so libcontainer rounds
//! `CPUQuotaPerSecUSec` up to the next 10 ms and writes the exact `cpu.max` into the unit's
//! cgroup afterwards (it rewrites every value with its cgroupfs manager; the others are exact
//! already). nodelet writes that one file, into the directory systemd made for the unit.
//!
//! The D-Bus calls are behind [`SystemdBus`], so the unit tests check exactly which units and
//! properties are asked for; [`super::dbus::ZbusSystemd`] is the real one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::fs::{cpu_max, populated_v2};
use super::manager::{
    created_at, uid_of_systemd_name, CgroupError, CgroupManager, FoundPodCgroup, Result, Version,
};
use super::{shares_to_weight, CgroupName, Driver, MemoryHigh, ResourceConfig};

/// A unit property value, typed as systemd's D-Bus API wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropertyValue {
    Bool(bool),
    /// `t`: sizes, weights, microseconds; `u64::MAX` is systemd's infinity.
    U64(u64),
    Str(String),
    /// `as`: unit lists such as `Wants`.
    Strs(Vec<String>),
}

/// `(name, value)` of a unit property.
pub type Property = (String, PropertyValue);

/// systemd's infinity for sizes and times.
pub const INFINITY: u64 = u64::MAX;

fn prop(name: &str, value: PropertyValue) -> Property {
    (name.to_string(), value)
}

/// What `StartTransientUnit` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitStart {
    /// The unit was created and its start job finished with `done`.
    Started,
    /// A unit of that name exists already (systemd's `UnitExists`).
    Exists,
}

/// The systemd manager calls the driver needs (`org.freedesktop.systemd1.Manager`). Each one
/// that queues a job waits for the job to finish.
#[async_trait::async_trait]
pub trait SystemdBus: Send + Sync + std::fmt::Debug {
    /// `StartTransientUnit(unit, "replace", properties, [])`, then wait for the job.
    async fn start_transient_unit(&self, unit: &str, properties: &[Property]) -> Result<UnitStart>;
    /// `SetUnitProperties(unit, runtime=true, properties)`.
    async fn set_unit_properties(&self, unit: &str, properties: &[Property]) -> Result<()>;
    /// `StopUnit(unit, "replace")`, then wait for the job; a unit that does not exist is fine.
    async fn stop_unit(&self, unit: &str) -> Result<()>;
    /// `ResetFailedUnit(unit)`, so that a failed unit does not linger.
    async fn reset_failed_unit(&self, unit: &str) -> Result<()>;
}

/// libcontainer's `addCPUQuota`: the period, and the quota per second of cpu, rounded up to
/// the 10 ms (1 %) systemd can hold; infinity when the quota is unlimited.
fn cpu_quota_properties(cfg: &ResourceConfig, props: &mut Vec<Property>) {
    let period = cfg.cpu_period.unwrap_or(0);
    let quota = cfg.cpu_quota.unwrap_or(0);
    if period != 0 {
        props.push(prop("CPUQuotaPeriodUSec", PropertyValue::U64(period)));
    }
    if quota != 0 || period != 0 {
        let mut per_sec = INFINITY;
        if quota > 0 {
            let period = if period == 0 {
                super::QUOTA_PERIOD
            } else {
                period
            };
            let quota = u64::try_from(quota).unwrap_or(0);
            per_sec = quota.saturating_mul(1_000_000) / period;
            if per_sec % 10_000 != 0 {
                per_sec = (per_sec / 10_000 + 1) * 10_000;
            }
        }
        props.push(prop("CPUQuotaPerSecUSec", PropertyValue::U64(per_sec)));
    }
}

fn bytes(value: i64) -> PropertyValue {
    PropertyValue::U64(u64::try_from(value).unwrap_or(0))
}

/// The unit properties for `cfg` (libcontainer's `genV2ResourcesProperties` and the `unified`
/// conversions for `memory.min/low/high`).
pub fn resource_properties(cfg: &ResourceConfig) -> Vec<Property> {
    let mut props = Vec::new();
    if let Some(limit) = cfg.memory_limit.filter(|l| *l > 0) {
        props.push(prop("MemoryMax", bytes(limit)));
    }
    if let Some(min) = cfg.memory_min {
        props.push(prop("MemoryMin", bytes(min.max(0))));
    }
    if let Some(low) = cfg.memory_low {
        props.push(prop("MemoryLow", bytes(low.max(0))));
    }
    if let Some(high) = cfg.memory_high {
        let value = match high {
            MemoryHigh::Bytes(b) => bytes(b),
            MemoryHigh::Max => PropertyValue::U64(INFINITY),
        };
        props.push(prop("MemoryHigh", value));
    }
    if let Some(shares) = cfg.cpu_shares {
        props.push(prop(
            "CPUWeight",
            PropertyValue::U64(shares_to_weight(shares)),
        ));
    }
    cpu_quota_properties(cfg, &mut props);
    if let Some(pids) = cfg.pids_limit {
        let value = if pids > 0 {
            PropertyValue::U64(u64::try_from(pids).unwrap_or(INFINITY))
        } else {
            PropertyValue::U64(INFINITY)
        };
        props.push(prop("TasksMax", value));
    }
    props
}

/// `(unit, parent slice)` of a cgroup: `kubepods-burstable.slice` in `kubepods.slice`;
/// `kubepods.slice` in the root slice `-.slice`.
pub fn unit_and_parent(cgroup: &CgroupName) -> Result<(String, String)> {
    let path = cgroup.to_systemd();
    let mut parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let unit = parts
        .pop()
        .ok_or_else(|| CgroupError::BadPath(path.clone()))?
        .to_string();
    let parent = parts.pop().unwrap_or("-.slice").to_string();
    Ok((unit, parent))
}

/// The properties a new slice starts with: the parent by `Wants=` (a slice's parent is in its
/// name; `Slice=` is for scopes), accounting for every controller so systemd delegates them to
/// the slice, and no default dependencies, as libcontainer does; then the resources.
pub fn start_properties(unit: &str, parent: &str, cfg: &ResourceConfig) -> Vec<Property> {
    let mut props = vec![
        prop(
            "Description",
            PropertyValue::Str(format!("nodelet cgroup {unit}")),
        ),
        prop("Wants", PropertyValue::Strs(vec![parent.to_string()])),
        prop("DefaultDependencies", PropertyValue::Bool(false)),
        prop("MemoryAccounting", PropertyValue::Bool(true)),
        prop("CPUAccounting", PropertyValue::Bool(true)),
        prop("IOAccounting", PropertyValue::Bool(true)),
        prop("TasksAccounting", PropertyValue::Bool(true)),
    ];
    props.extend(resource_properties(cfg));
    props
}

/// Slices through systemd on the unified hierarchy mounted at `mount`.
#[derive(Debug, Clone)]
pub struct SystemdManager {
    mount: PathBuf,
    bus: Arc<dyn SystemdBus>,
}

impl SystemdManager {
    pub fn new(mount: impl Into<PathBuf>, bus: Arc<dyn SystemdBus>) -> Self {
        SystemdManager {
            mount: mount.into(),
            bus,
        }
    }

    fn cgroup_dir(&self, cgroup: &CgroupName) -> PathBuf {
        self.mount.join(cgroup.to_systemd().trim_start_matches('/'))
    }

    /// The exact `cpu.max`, when systemd's rounded quota differs from it (libcontainer's
    /// cgroupfs pass after `SetUnitProperties`). Only into a directory systemd made.
    fn write_exact_cpu_max(&self, dir: &Path, cfg: &ResourceConfig) -> Result<()> {
        let Some(value) = cpu_max(cfg) else {
            return Ok(());
        };
        if !dir.is_dir() {
            tracing::debug!(dir = %dir.display(), "slice cgroup not realized yet; cpu.max stays systemd's");
            return Ok(());
        }
        let file = dir.join("cpu.max");
        std::fs::write(&file, &value).map_err(|source| CgroupError::Io {
            path: file,
            action: "writing",
            source,
        })
    }
}

/// The hugetlb limits, written into the slice's directory: systemd has no unit property for
/// hugetlb, so libcontainer's systemd manager writes them with its cgroupfs manager after
/// `SetUnitProperties`, as this does. A file the kernel lacks is skipped (see
/// [`super::fs::CgroupWrite::optional`]).
fn write_hugetlb(dir: &Path, cfg: &ResourceConfig) -> Result<()> {
    if cfg.hugetlb_limits.is_empty() {
        return Ok(());
    }
    if !dir.is_dir() {
        tracing::debug!(dir = %dir.display(), "slice cgroup not realized yet; hugetlb limits not written");
        return Ok(());
    }
    for w in super::fs::hugetlb_v2_writes(cfg) {
        let file = dir.join(&w.file);
        if w.optional && !file.exists() {
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

#[async_trait::async_trait]
impl CgroupManager for SystemdManager {
    fn driver(&self) -> Driver {
        Driver::Systemd
    }

    fn version(&self) -> Version {
        Version::V2
    }

    fn dir(&self, cgroup: &CgroupName, _controller: &str) -> PathBuf {
        self.cgroup_dir(cgroup)
    }

    async fn ensure(&self, cgroup: &CgroupName, cfg: &ResourceConfig) -> Result<()> {
        let (unit, parent) = unit_and_parent(cgroup)?;
        let started = self
            .bus
            .start_transient_unit(&unit, &start_properties(&unit, &parent, cfg))
            .await?;
        if started == UnitStart::Exists {
            let props = resource_properties(cfg);
            if !props.is_empty() {
                self.bus.set_unit_properties(&unit, &props).await?;
            }
        }
        let dir = self.cgroup_dir(cgroup);
        self.write_exact_cpu_max(&dir, cfg)?;
        write_hugetlb(&dir, cfg)
    }

    async fn destroy(&self, cgroup: &CgroupName) -> Result<()> {
        // Stopping a slice stops every unit in it: never while anything runs there.
        let dir = self.cgroup_dir(cgroup);
        if populated_v2(&dir)? {
            return Err(CgroupError::InUse { path: dir });
        }
        let (unit, _) = unit_and_parent(cgroup)?;
        self.bus.stop_unit(&unit).await?;
        if let Err(e) = self.bus.reset_failed_unit(&unit).await {
            tracing::debug!(unit, error = %e, "reset-failed after stop");
        }
        Ok(())
    }

    fn populated(&self, cgroup: &CgroupName) -> Result<bool> {
        populated_v2(&self.cgroup_dir(cgroup))
    }

    fn pod_cgroups(&self, tier: &CgroupName) -> Result<Vec<FoundPodCgroup>> {
        let (tier_unit, _) = unit_and_parent(tier)?;
        let dir = self.cgroup_dir(tier);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
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
                let uid = uid_of_systemd_name(&tier_unit, &name)?;
                Some(FoundPodCgroup {
                    name: tier.child(&format!("pod{uid}")),
                    uid,
                    created: created_at(&e.path()),
                })
            })
            .collect();
        found.sort_by(|a, b| a.uid.cmp(&b.uid));
        Ok(found)
    }
}

/// A [`SystemdBus`] that records every call and answers from a script, for tests here and in
/// the node module. `exists` lists units that `StartTransientUnit` reports as existing.
#[cfg(test)]
pub(crate) mod recording {
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Call {
        Start(String, Vec<Property>),
        Set(String, Vec<Property>),
        Stop(String),
        ResetFailed(String),
    }

    #[derive(Debug, Default)]
    pub struct RecordingBus {
        pub calls: Mutex<Vec<Call>>,
        pub exists: Mutex<BTreeSet<String>>,
    }

    impl RecordingBus {
        pub fn calls(&self) -> Vec<Call> {
            self.calls.lock().unwrap().clone()
        }
    }

    #[async_trait::async_trait]
    impl SystemdBus for RecordingBus {
        async fn start_transient_unit(
            &self,
            unit: &str,
            properties: &[Property],
        ) -> Result<UnitStart> {
            self.calls
                .lock()
                .unwrap()
                .push(Call::Start(unit.to_string(), properties.to_vec()));
            let mut exists = self.exists.lock().unwrap();
            if !exists.insert(unit.to_string()) {
                return Ok(UnitStart::Exists);
            }
            Ok(UnitStart::Started)
        }
        async fn set_unit_properties(&self, unit: &str, properties: &[Property]) -> Result<()> {
            self.calls
                .lock()
                .unwrap()
                .push(Call::Set(unit.to_string(), properties.to_vec()));
            Ok(())
        }
        async fn stop_unit(&self, unit: &str) -> Result<()> {
            self.calls
                .lock()
                .unwrap()
                .push(Call::Stop(unit.to_string()));
            self.exists.lock().unwrap().remove(unit);
            Ok(())
        }
        async fn reset_failed_unit(&self, unit: &str) -> Result<()> {
            self.calls
                .lock()
                .unwrap()
                .push(Call::ResetFailed(unit.to_string()));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::recording::{Call, RecordingBus};
    use super::*;

    fn u(v: u64) -> PropertyValue {
        PropertyValue::U64(v)
    }

    fn names(props: &[Property]) -> Vec<&str> {
        props.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn resource_properties_table() {
        let guaranteed = ResourceConfig {
            cpu_shares: Some(205),
            cpu_quota: Some(20_000),
            cpu_period: Some(100_000),
            memory_limit: Some(64 << 20),
            pids_limit: Some(1024),
            memory_min: Some(64 << 20),
            memory_low: Some(0),
            memory_high: Some(MemoryHigh::Max),
            // systemd has no hugetlb property: these go to the files.
            hugetlb_limits: vec![("2MB".into(), 0)],
        };
        assert_eq!(
            resource_properties(&guaranteed),
            vec![
                prop("MemoryMax", u(64 << 20)),
                prop("MemoryMin", u(64 << 20)),
                prop("MemoryLow", u(0)),
                prop("MemoryHigh", u(INFINITY)),
                prop("CPUWeight", u(shares_to_weight(205))),
                prop("CPUQuotaPeriodUSec", u(100_000)),
                prop("CPUQuotaPerSecUSec", u(200_000)),
                prop("TasksMax", u(1024)),
            ]
        );
        // 15m of cpu: 1500 µs per 100 ms = 15 ms per second, which systemd can only hold as
        // 20 ms; the exact value goes to cpu.max.
        let small = ResourceConfig {
            cpu_quota: Some(1500),
            cpu_period: Some(100_000),
            ..Default::default()
        };
        assert_eq!(
            resource_properties(&small),
            vec![
                prop("CPUQuotaPeriodUSec", u(100_000)),
                prop("CPUQuotaPerSecUSec", u(20_000)),
            ]
        );
        // cpu limits not enforced (quota -1), unlimited pids, BestEffort shares
        let unlimited = ResourceConfig {
            cpu_shares: Some(2),
            cpu_quota: Some(-1),
            cpu_period: Some(100_000),
            pids_limit: Some(-1),
            memory_high: Some(MemoryHigh::Bytes(993_210_368)),
            ..Default::default()
        };
        assert_eq!(
            resource_properties(&unlimited),
            vec![
                prop("MemoryHigh", u(993_210_368)),
                prop("CPUWeight", u(1)),
                prop("CPUQuotaPeriodUSec", u(100_000)),
                prop("CPUQuotaPerSecUSec", u(INFINITY)),
                prop("TasksMax", u(INFINITY)),
            ]
        );
        assert!(resource_properties(&ResourceConfig::default()).is_empty());
    }

    #[test]
    fn units_and_their_parents() {
        let cases = [
            ("/kubepods", "kubepods.slice", "-.slice"),
            (
                "/kubepods/burstable",
                "kubepods-burstable.slice",
                "kubepods.slice",
            ),
            (
                "/kubepods/burstable/pod12-34",
                "kubepods-burstable-pod12_34.slice",
                "kubepods-burstable.slice",
            ),
            ("/kubepods/podab", "kubepods-podab.slice", "kubepods.slice"),
            ("/custom/kubepods", "custom-kubepods.slice", "custom.slice"),
        ];
        for (path, unit, parent) in cases {
            assert_eq!(
                unit_and_parent(&CgroupName::parse_cgroupfs(path)).unwrap(),
                (unit.to_string(), parent.to_string()),
                "{path}"
            );
        }
        assert!(unit_and_parent(&CgroupName(vec![])).is_err());
    }

    #[tokio::test]
    async fn ensure_starts_a_transient_slice_then_updates_it_and_writes_the_exact_cpu_max() {
        let mount = tempfile::tempdir().unwrap();
        let bus = Arc::new(RecordingBus::default());
        let manager = SystemdManager::new(mount.path(), bus.clone());
        let pod = CgroupName::parse_cgroupfs("/kubepods/burstable/pod12-34");
        let cfg = ResourceConfig {
            cpu_shares: Some(102),
            cpu_quota: Some(1500),
            cpu_period: Some(100_000),
            memory_limit: Some(96 << 20),
            pids_limit: Some(100),
            ..Default::default()
        };
        // systemd has not realized the cgroup: nothing is written and nothing is created.
        manager.ensure(&pod, &cfg).await.unwrap();
        let dir = mount
            .path()
            .join("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice");
        assert!(
            !dir.exists(),
            "the driver must not create systemd's directories"
        );
        let calls = bus.calls();
        let Call::Start(unit, props) = &calls[0] else {
            panic!("{calls:?}")
        };
        assert_eq!(unit, "kubepods-burstable-pod12_34.slice");
        assert_eq!(
            names(props),
            [
                "Description",
                "Wants",
                "DefaultDependencies",
                "MemoryAccounting",
                "CPUAccounting",
                "IOAccounting",
                "TasksAccounting",
                "MemoryMax",
                "CPUWeight",
                "CPUQuotaPeriodUSec",
                "CPUQuotaPerSecUSec",
                "TasksMax",
            ]
        );
        assert_eq!(
            props[1].1,
            PropertyValue::Strs(vec!["kubepods-burstable.slice".into()])
        );
        assert_eq!(props[2].1, PropertyValue::Bool(false));
        assert_eq!(props[7].1, u(96 << 20));
        assert_eq!(props[8].1, u(17));
        assert_eq!(props[11].1, u(100));

        // Once systemd made the directory, the exact quota lands in cpu.max; a second ensure
        // updates the existing unit with the resource properties only.
        std::fs::create_dir_all(&dir).unwrap();
        manager.ensure(&pod, &cfg).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("cpu.max")).unwrap(),
            "1500 100000"
        );
        let calls = bus.calls();
        assert_eq!(calls.len(), 3, "{calls:?}");
        assert!(matches!(&calls[1], Call::Start(u, _) if u == "kubepods-burstable-pod12_34.slice"));
        let Call::Set(unit, props) = &calls[2] else {
            panic!("{calls:?}")
        };
        assert_eq!(unit, "kubepods-burstable-pod12_34.slice");
        assert_eq!(props, &resource_properties(&cfg));
        // Nothing but cpu.max was written there.
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(files, ["cpu.max"]);

        // Hugetlb limits have no unit property: they go to the slice's files, where the kernel
        // has them (here 2MB with its reservation file, 1GB without).
        for f in ["hugetlb.2MB.max", "hugetlb.2MB.rsvd.max", "hugetlb.1GB.max"] {
            std::fs::write(dir.join(f), "max").unwrap();
        }
        let huge = ResourceConfig {
            hugetlb_limits: vec![("2MB".into(), 4 << 20), ("1GB".into(), 0)],
            ..cfg.clone()
        };
        manager.ensure(&pod, &huge).await.unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(read("hugetlb.2MB.max"), "4194304");
        assert_eq!(read("hugetlb.2MB.rsvd.max"), "4194304");
        assert_eq!(read("hugetlb.1GB.max"), "0");
        assert!(!dir.join("hugetlb.1GB.rsvd.max").exists());
        let Call::Set(_, props) = bus.calls().pop().unwrap() else {
            panic!()
        };
        assert_eq!(props, resource_properties(&cfg), "no property for hugetlb");
    }

    #[tokio::test]
    async fn destroy_stops_the_slice_but_never_one_with_processes() {
        let mount = tempfile::tempdir().unwrap();
        let bus = Arc::new(RecordingBus::default());
        let manager = SystemdManager::new(mount.path(), bus.clone());
        let pod = CgroupName::parse_cgroupfs("/kubepods/podab");
        let dir = mount.path().join("kubepods.slice/kubepods-podab.slice");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cgroup.events"), "populated 1\nfrozen 0\n").unwrap();
        let err = manager.destroy(&pod).await.unwrap_err();
        assert!(matches!(err, CgroupError::InUse { .. }), "{err}");
        assert!(bus.calls().is_empty(), "no StopUnit for a populated slice");

        std::fs::write(dir.join("cgroup.events"), "populated 0\nfrozen 0\n").unwrap();
        manager.destroy(&pod).await.unwrap();
        assert_eq!(
            bus.calls(),
            vec![
                Call::Stop("kubepods-podab.slice".into()),
                Call::ResetFailed("kubepods-podab.slice".into()),
            ]
        );
        assert!(dir.exists(), "systemd removes the directory, not nodelet");
    }

    #[test]
    fn pod_slices_are_listed_with_their_uids() {
        let mount = tempfile::tempdir().unwrap();
        let root = mount.path();
        for d in [
            "kubepods.slice/kubepods-pod11_22.slice",
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podaa_bb.slice",
            "kubepods.slice/kubepods-besteffort.slice",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let manager = SystemdManager::new(root, Arc::new(RecordingBus::default()));
        let kubepods = CgroupName::parse_cgroupfs("/kubepods");
        let found = manager.pod_cgroups(&kubepods).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].uid, "11-22");
        assert_eq!(found[0].name, kubepods.child("pod11-22"));
        let burstable = manager.pod_cgroups(&kubepods.child("burstable")).unwrap();
        assert_eq!(burstable[0].uid, "aa-bb");
    }
}
