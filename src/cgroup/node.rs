//! The node's cgroup tree, whatever the driver: `kubepods` with node allocatable, the Burstable
//! and BestEffort tiers with their shares (the kubelet's QoS container manager), the pod cgroups,
//! the Memory QoS sums on the ancestors, and the sweep of pod cgroups whose pods went away while
//! nodelet was not running.
//!
//! The decisions are pure functions ([`tier_configs`], [`orphan_decision`],
//! [`expected_v2_files`]); [`NodeCgroups`] applies them through a [`CgroupManager`].

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;

use super::allocatable::{self, NodeResources};
use super::fs::cpu_max;
use super::manager::{CgroupError, CgroupManager, FoundPodCgroup, Result};
use super::memory_qos::{self, TierRequests};
use super::{
    milli_cpu_to_shares, pod_cgroup_config, shares_to_weight, CgroupName, MemoryHigh,
    PodCgroupSettings, ResourceConfig, MIN_SHARES,
};
use crate::config::memory_qos::MemoryQos;
use crate::config::reserved::Reserved;
use crate::podspec::qos::{qos_class, QosClass};
use crate::podspec::resources::pod_resources_with_overhead;

/// How young a pod cgroup without a sandbox may be and still be left alone by the start-up
/// sweep: a pod being started right now (its cgroup is made just before its sandbox) is not an
/// orphan.
pub const ORPHAN_MIN_AGE: Duration = Duration::from_secs(60);

/// Node-wide inputs of the cgroup tree (from the configuration and the machine).
#[derive(Debug, Clone)]
pub struct NodeCgroupConfig {
    /// `cgroupRoot`, cgroupfs form.
    pub cgroup_root: String,
    pub pod: PodCgroupSettings,
    pub capacity: NodeResources,
    /// `kubeReserved` + `systemReserved`.
    pub reserved: Reserved,
    /// `enforceNodeAllocatable` contains `pods`.
    pub enforce_pods: bool,
}

/// What one active pod adds to its tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodShare {
    pub class: QosClass,
    pub cpu_request_milli: i64,
    pub memory_request: i64,
}

impl PodShare {
    pub fn of(pod: &Pod) -> PodShare {
        // The QoS tiers count the pod's overhead, as the kubelet's `PodRequests` does.
        let r = pod_resources_with_overhead(pod);
        PodShare {
            class: qos_class(pod),
            cpu_request_milli: r.cpu_request_milli,
            memory_request: r.memory_request,
        }
    }
}

/// What the QoS tiers get for a set of active pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierConfigs {
    /// Only the Memory QoS protection of `kubepods` (its limits come from node allocatable).
    pub kubepods: ResourceConfig,
    pub burstable: ResourceConfig,
    pub besteffort: ResourceConfig,
}

/// The QoS container manager's `UpdateCgroups`: the Burstable tier's shares are the sum of the
/// Burstable pods' cpu requests, the BestEffort tier's the minimum; on cgroup v2 the Memory QoS
/// sums (or zeros, which reset them) on `kubepods` and the Burstable tier.
pub fn tier_configs<'a>(
    pods: impl IntoIterator<Item = &'a PodShare>,
    qos: MemoryQos,
    cgroup_v2: bool,
) -> TierConfigs {
    let mut burstable_cpu = 0i64;
    let mut requests = TierRequests::default();
    for p in pods {
        match p.class {
            QosClass::Burstable => {
                burstable_cpu = burstable_cpu.saturating_add(p.cpu_request_milli);
                requests.burstable = requests.burstable.saturating_add(p.memory_request);
            }
            QosClass::Guaranteed => {
                requests.guaranteed = requests.guaranteed.saturating_add(p.memory_request);
            }
            QosClass::BestEffort => {}
        }
    }
    let mut kubepods = ResourceConfig::default();
    let mut burstable = ResourceConfig {
        cpu_shares: Some(milli_cpu_to_shares(burstable_cpu)),
        ..Default::default()
    };
    if cgroup_v2 {
        let (min, low, burstable_low) = memory_qos::ancestor_protection(requests, qos);
        kubepods.memory_min = Some(min);
        kubepods.memory_low = Some(low);
        burstable.memory_low = Some(burstable_low);
    }
    TierConfigs {
        kubepods,
        burstable,
        besteffort: ResourceConfig {
            cpu_shares: Some(MIN_SHARES),
            ..Default::default()
        },
    }
}

/// What the start-up sweep does with one pod cgroup found on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrphanDecision {
    /// Its pod has a sandbox in the runtime: it is adopted, not swept.
    Keep,
    /// Made less than [`ORPHAN_MIN_AGE`] ago: possibly a pod starting right now.
    TooYoung,
    /// Processes still run in it: never removed.
    Populated,
    Remove,
}

pub fn orphan_decision(
    found: &FoundPodCgroup,
    pods_in_runtime: &HashSet<String>,
    now: SystemTime,
    min_age: Duration,
    populated: bool,
) -> OrphanDecision {
    if pods_in_runtime.contains(&found.uid) {
        return OrphanDecision::Keep;
    }
    if populated {
        return OrphanDecision::Populated;
    }
    let young = found
        .created
        .is_some_and(|c| now.duration_since(c).unwrap_or(Duration::ZERO) < min_age);
    if young {
        return OrphanDecision::TooYoung;
    }
    OrphanDecision::Remove
}

/// What the sweep did, by pod UID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub removed: Vec<String>,
    pub kept: Vec<(String, OrphanDecision)>,
    pub failed: Vec<(String, String)>,
}

/// The cgroup v2 files of a cgroup configured with `cfg`, with the kernel's defaults for what
/// `cfg` leaves unset — what the VM checks read back, for either driver (systemd writes the same
/// values from the unit properties, and nodelet writes the exact `cpu.max`).
pub fn expected_v2_files(cfg: &ResourceConfig) -> BTreeMap<&'static str, String> {
    let high = match cfg.memory_high {
        Some(MemoryHigh::Bytes(b)) => b.to_string(),
        _ => "max".to_string(),
    };
    BTreeMap::from([
        (
            "cpu.weight",
            cfg.cpu_shares.map_or(100, shares_to_weight).to_string(),
        ),
        (
            "cpu.max",
            cpu_max(cfg).unwrap_or_else(|| format!("max {}", super::QUOTA_PERIOD)),
        ),
        (
            "memory.max",
            cfg.memory_limit
                .filter(|l| *l > 0)
                .map_or_else(|| "max".to_string(), |l| l.to_string()),
        ),
        ("memory.min", cfg.memory_min.unwrap_or(0).max(0).to_string()),
        ("memory.low", cfg.memory_low.unwrap_or(0).max(0).to_string()),
        ("memory.high", high),
        (
            "pids.max",
            cfg.pids_limit
                .filter(|p| *p > 0)
                .map_or_else(|| "max".to_string(), |p| p.to_string()),
        ),
    ])
}

/// Where a pod's cgroup is below the cgroup v2 mount for `driver`, and what its files must read:
/// for checks from outside nodelet (the VM scenario reads the files and compares).
pub fn expected_pod_cgroup(
    pod: &Pod,
    settings: &PodCgroupSettings,
    driver: super::Driver,
    cgroup_root: &str,
) -> (PathBuf, BTreeMap<&'static str, String>) {
    let name = super::pod_cgroup_name(pod, cgroup_root);
    let path = PathBuf::from(name.to_driver(driver).trim_start_matches('/'));
    (path, expected_v2_files(&pod_cgroup_config(pod, settings)))
}

#[derive(Debug, Default)]
struct TierState {
    pods: BTreeMap<String, PodShare>,
    applied: Option<TierConfigs>,
}

/// The node's cgroups through one manager.
#[derive(Debug)]
pub struct NodeCgroups {
    manager: Arc<dyn CgroupManager>,
    config: NodeCgroupConfig,
    kubepods: CgroupName,
    state: tokio::sync::Mutex<TierState>,
}

impl NodeCgroups {
    pub fn new(manager: Arc<dyn CgroupManager>, config: NodeCgroupConfig) -> NodeCgroups {
        let kubepods = super::kubepods_cgroup_name(&config.cgroup_root);
        NodeCgroups {
            manager,
            config,
            kubepods,
            state: Default::default(),
        }
    }

    pub fn manager(&self) -> &Arc<dyn CgroupManager> {
        &self.manager
    }

    pub fn settings(&self) -> &PodCgroupSettings {
        &self.config.pod
    }

    /// `kubepods` and its tiers.
    pub fn tiers(&self) -> [CgroupName; 3] {
        [
            self.kubepods.clone(),
            self.kubepods.child("burstable"),
            self.kubepods.child("besteffort"),
        ]
    }

    /// The pod's cgroup, as [`super::pod_cgroup_name`] names it.
    pub fn pod_cgroup(&self, pod: &Pod) -> CgroupName {
        super::pod_cgroup_name(pod, &self.config.cgroup_root)
    }

    /// Where the pod's cgroup is on disk (for v1: in the cpu hierarchy).
    pub fn pod_cgroup_dir(&self, pod: &Pod) -> PathBuf {
        self.manager.dir(&self.pod_cgroup(pod), "cpu")
    }

    /// What the pod's cgroup gets.
    pub fn pod_config(&self, pod: &Pod) -> ResourceConfig {
        pod_cgroup_config(pod, &self.config.pod)
    }

    /// At start (the kubelet's `setupNode`): checks `cgroupRoot` and the reservations, then
    /// creates or updates `kubepods` with node allocatable and the QoS tiers. An error stops
    /// nodelet, as it stops the kubelet.
    pub async fn start(&self) -> Result<()> {
        let root = CgroupName::parse_cgroupfs(&self.config.cgroup_root);
        if !root.0.is_empty() && !self.manager.exists(&root) {
            return Err(CgroupError::RootMissing {
                path: self.manager.dir(&root, "cpu"),
            });
        }
        allocatable::validate(self.config.capacity, self.config.reserved)?;
        let cfg = allocatable::kubepods_config(
            self.config.capacity,
            self.config.reserved,
            self.config.enforce_pods,
        );
        self.manager.ensure(&self.kubepods, &cfg).await?;
        tracing::info!(cgroup = %self.manager.literal(&self.kubepods), ?cfg, enforce_pods = self.config.enforce_pods, "node allocatable applied to the pods' cgroup");
        let mut state = self.state.lock().await;
        self.apply_tiers(&mut state).await
    }

    async fn apply_tiers(&self, state: &mut TierState) -> Result<()> {
        let configs = tier_configs(
            state.pods.values(),
            self.config.pod.memory_qos,
            self.config.pod.cgroup_v2,
        );
        if state.applied.as_ref() == Some(&configs) {
            return Ok(());
        }
        let [kubepods, burstable, besteffort] = self.tiers();
        // Ancestors before descendants: protection must be granted from the top down.
        if configs.kubepods != ResourceConfig::default() {
            self.manager.ensure(&kubepods, &configs.kubepods).await?;
        }
        self.manager.ensure(&burstable, &configs.burstable).await?;
        self.manager
            .ensure(&besteffort, &configs.besteffort)
            .await?;
        tracing::debug!(?configs, "QoS tiers updated");
        state.applied = Some(configs);
        Ok(())
    }

    /// Before the pod's sandbox: the tiers count the pod, then its cgroup is made (or, for a pod
    /// adopted after a restart, updated) with its values.
    pub async fn ensure_pod(&self, pod: &Pod) -> Result<CgroupName> {
        let name = self.pod_cgroup(pod);
        self.ensure_pod_with(
            pod.metadata.uid.as_deref().unwrap_or_default(),
            PodShare::of(pod),
            &name,
            &self.pod_config(pod),
        )
        .await?;
        Ok(name)
    }

    /// [`Self::ensure_pod`] from values derived before (the pod's sync plan): the pod's share of
    /// its tier, its cgroup's name and what to write to it.
    pub async fn ensure_pod_with(
        &self,
        uid: &str,
        share: PodShare,
        name: &CgroupName,
        config: &ResourceConfig,
    ) -> Result<()> {
        {
            let mut state = self.state.lock().await;
            state.pods.insert(uid.to_string(), share);
            self.apply_tiers(&mut state).await?;
        }
        self.manager.ensure(name, config).await
    }

    /// The pod's containers are all stopped: its tier no longer counts it.
    pub async fn pod_terminated(&self, uid: &str) -> Result<()> {
        let mut state = self.state.lock().await;
        if state.pods.remove(uid).is_some() {
            self.apply_tiers(&mut state).await?;
        }
        Ok(())
    }

    /// After the pod's sandbox is gone: removes its cgroup and updates the tiers.
    pub async fn remove_pod(&self, pod: &Pod) -> Result<()> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let result = self.manager.destroy(&self.pod_cgroup(pod)).await;
        self.pod_terminated(&uid).await?;
        result
    }

    /// At start, once the runtime answers: removes the pod cgroups whose pods have no sandbox in
    /// the runtime (they went away while nodelet was down) — never one with processes in it,
    /// nor one younger than `min_age`.
    pub async fn sweep_orphans(
        &self,
        pods_in_runtime: &HashSet<String>,
        now: SystemTime,
        min_age: Duration,
    ) -> SweepReport {
        let mut report = SweepReport::default();
        for tier in self.tiers() {
            let found = match self.manager.pod_cgroups(&tier) {
                Ok(found) => found,
                Err(e) => {
                    report
                        .failed
                        .push((self.manager.literal(&tier), e.to_string()));
                    continue;
                }
            };
            for f in found {
                let populated = match self.manager.populated(&f.name) {
                    Ok(p) => p,
                    Err(e) => {
                        report.failed.push((f.uid.clone(), e.to_string()));
                        continue;
                    }
                };
                match orphan_decision(&f, pods_in_runtime, now, min_age, populated) {
                    OrphanDecision::Remove => match self.manager.destroy(&f.name).await {
                        Ok(()) => {
                            tracing::info!(pod.uid = %f.uid, cgroup = %self.manager.literal(&f.name), "removed the cgroup of a pod that is gone");
                            report.removed.push(f.uid);
                        }
                        Err(e) => report.failed.push((f.uid, e.to_string())),
                    },
                    decision => report.kept.push((f.uid, decision)),
                }
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::super::fs::CgroupfsManager;
    use super::super::manager::Version;
    use super::super::systemd::recording::{Call, RecordingBus};
    use super::super::systemd::{PropertyValue, SystemdManager};
    use super::*;
    use crate::config::memory_qos::ReservationPolicy;
    use crate::podspec::resources::test_support::{container, pod};

    const GI: i64 = 1 << 30;
    const MI: i64 = 1 << 20;

    fn with_uid(mut p: Pod, uid: &str) -> Pod {
        p.metadata.uid = Some(uid.to_string());
        p
    }

    fn tiered() -> MemoryQos {
        MemoryQos {
            throttling_factor: Some(0.9),
            reservation: ReservationPolicy::TieredReservation,
        }
    }

    fn config(v2: bool, qos: MemoryQos) -> NodeCgroupConfig {
        NodeCgroupConfig {
            cgroup_root: "/".into(),
            pod: PodCgroupSettings {
                pod_pids_limit: 1024,
                memory_qos: qos,
                node_allocatable_memory: 8 * GI,
                cgroup_v2: v2,
                ..Default::default()
            },
            capacity: NodeResources {
                cpu_milli: 2000,
                memory: 9 * GI,
                pids: Some(32768),
            },
            reserved: Reserved {
                cpu_milli: 500,
                memory: GI,
                pids: 768,
                ..Default::default()
            },
            enforce_pods: true,
        }
    }

    /// A cgroup v2 root with every controller available, as the kernel shows it.
    fn v2_root() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.controllers"), "cpu io memory pids").unwrap();
        dir
    }

    fn read(dir: &std::path::Path, file: &str) -> String {
        let path = dir.join(file);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn guaranteed() -> Pod {
        with_uid(
            pod(vec![container("g", "", "cpu=200m,memory=64Mi")], vec![]),
            "g-1",
        )
    }

    fn burstable() -> Pod {
        with_uid(
            pod(
                vec![container("b", "cpu=250m,memory=256Mi", "memory=1Gi")],
                vec![],
            ),
            "b-1",
        )
    }

    fn best_effort() -> Pod {
        with_uid(pod(vec![container("e", "", "")], vec![]), "e-1")
    }

    #[test]
    fn tier_configs_table() {
        let shares = [
            PodShare {
                class: QosClass::Burstable,
                cpu_request_milli: 250,
                memory_request: 256 * MI,
            },
            PodShare {
                class: QosClass::Burstable,
                cpu_request_milli: 750,
                memory_request: 256 * MI,
            },
            PodShare {
                class: QosClass::Guaranteed,
                cpu_request_milli: 1000,
                memory_request: GI,
            },
            PodShare {
                class: QosClass::BestEffort,
                cpu_request_milli: 0,
                memory_request: 0,
            },
        ];
        let t = tier_configs(&shares, tiered(), true);
        assert_eq!(t.burstable.cpu_shares, Some(1024));
        assert_eq!(t.burstable.memory_low, Some(512 * MI));
        assert_eq!(t.besteffort.cpu_shares, Some(2));
        assert_eq!(t.kubepods.memory_min, Some(GI + 512 * MI));
        assert_eq!(t.kubepods.memory_low, Some(512 * MI));
        // No pods: the minimum shares, and zeros that reset the protection.
        let empty = tier_configs(&[], tiered(), true);
        assert_eq!(empty.burstable.cpu_shares, Some(2));
        assert_eq!(empty.kubepods.memory_min, Some(0));
        // Policy None: zeros. cgroup v1: no memory values at all.
        assert_eq!(
            tier_configs(&shares, MemoryQos::OFF, true)
                .kubepods
                .memory_min,
            Some(0)
        );
        let v1 = tier_configs(&shares, tiered(), false);
        assert_eq!(v1.kubepods, ResourceConfig::default());
        assert_eq!(v1.burstable.memory_low, None);
    }

    #[test]
    fn orphan_decisions() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        let found = |uid: &str, age: Option<u64>| FoundPodCgroup {
            uid: uid.into(),
            name: CgroupName::parse_cgroupfs(&format!("/kubepods/pod{uid}")),
            created: age.map(|a| now - Duration::from_secs(a)),
        };
        let running: HashSet<String> = ["alive".to_string()].into();
        let cases = [
            (found("alive", Some(3600)), false, OrphanDecision::Keep),
            (found("alive", Some(3600)), true, OrphanDecision::Keep),
            (found("gone", Some(3600)), false, OrphanDecision::Remove),
            (found("gone", None), false, OrphanDecision::Remove),
            (found("gone", Some(3600)), true, OrphanDecision::Populated),
            (found("starting", Some(5)), false, OrphanDecision::TooYoung),
        ];
        for (f, populated, want) in cases {
            assert_eq!(
                orphan_decision(&f, &running, now, ORPHAN_MIN_AGE, populated),
                want,
                "{f:?} populated={populated}"
            );
        }
    }

    #[tokio::test]
    async fn cgroupfs_v2_tree_with_allocatable_tiers_pods_and_memory_qos() {
        let root = v2_root();
        let manager = Arc::new(CgroupfsManager::new(root.path(), Version::V2));
        let cgroups = NodeCgroups::new(manager, config(true, tiered()));
        cgroups.start().await.unwrap();
        let r = root.path();
        // kubepods: 2000m − 500m = 1500m → 1536 shares; 9Gi − 1Gi; 32768 − 768 pids.
        assert_eq!(
            read(r, "kubepods/cpu.weight"),
            shares_to_weight(1536).to_string()
        );
        assert_eq!(read(r, "kubepods/memory.max"), (8 * GI).to_string());
        assert_eq!(read(r, "kubepods/pids.max"), "32000");
        assert_eq!(read(r, "kubepods/memory.min"), "0");
        assert_eq!(read(r, "kubepods/burstable/cpu.weight"), "1");
        assert_eq!(read(r, "kubepods/burstable/memory.low"), "0");
        assert_eq!(read(r, "kubepods/besteffort/cpu.weight"), "1");

        for p in [guaranteed(), burstable(), best_effort()] {
            cgroups.ensure_pod(&p).await.unwrap();
        }
        // Guaranteed: directly under kubepods, every limit, memory.min, no throttling.
        let g = r.join("kubepods/podg-1");
        assert_eq!(read(&g, "cpu.weight"), shares_to_weight(204).to_string());
        assert_eq!(read(&g, "cpu.max"), "20000 100000");
        assert_eq!(read(&g, "memory.max"), (64 * MI).to_string());
        assert_eq!(read(&g, "memory.min"), (64 * MI).to_string());
        assert_eq!(read(&g, "memory.low"), "0");
        assert_eq!(read(&g, "memory.high"), "max");
        assert_eq!(read(&g, "pids.max"), "1024");
        // Burstable: the seed's example on the pod, memory.low, no cpu.max (no cpu limit).
        let b = r.join("kubepods/burstable/podb-1");
        assert_eq!(read(&b, "memory.high"), "993210368");
        assert_eq!(read(&b, "memory.low"), (256 * MI).to_string());
        assert_eq!(read(&b, "memory.min"), "0");
        assert_eq!(read(&b, "memory.max"), GI.to_string());
        assert!(!b.join("cpu.max").exists());
        // BestEffort: minimum weight, throttled below the node's allocatable memory.
        let e = r.join("kubepods/besteffort/pode-1");
        assert_eq!(read(&e, "cpu.weight"), "1");
        assert_eq!(
            read(&e, "memory.high"),
            memory_qos::memory_high(0, 8 * GI, 0.9, 4096)
                .unwrap()
                .to_string()
        );
        assert!(!e.join("memory.max").exists());
        // Tiers follow the pods: shares of the Burstable requests, the seed's sums.
        assert_eq!(
            read(r, "kubepods/burstable/cpu.weight"),
            shares_to_weight(256).to_string()
        );
        assert_eq!(
            read(r, "kubepods/burstable/memory.low"),
            (256 * MI).to_string()
        );
        assert_eq!(
            read(r, "kubepods/memory.min"),
            (64 * MI + 256 * MI).to_string()
        );
        assert_eq!(read(r, "kubepods/memory.low"), (256 * MI).to_string());
        // What the VM checks compare against is what was written, at the path they compute.
        for p in [guaranteed(), burstable(), best_effort()] {
            let (path, files) =
                expected_pod_cgroup(&p, cgroups.settings(), super::super::Driver::Cgroupfs, "/");
            for (file, value) in files {
                match std::fs::read_to_string(r.join(&path).join(file)) {
                    Ok(written) => assert_eq!(written, value, "{} {file}", path.display()),
                    // Not written: then the kernel's default is what the VM will read.
                    Err(_) => assert!(
                        ["max", "max 100000", "0"].contains(&value.as_str()),
                        "{} {file} = {value} was not written",
                        path.display()
                    ),
                }
            }
        }
        let (path, _) = expected_pod_cgroup(
            &burstable(),
            cgroups.settings(),
            super::super::Driver::Systemd,
            "/",
        );
        assert_eq!(
            path,
            PathBuf::from(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podb_1.slice"
            )
        );

        // The Burstable pod goes: its cgroup (empty here) and its share with it.
        std::fs::remove_dir_all(&b).unwrap();
        std::fs::create_dir(&b).unwrap();
        cgroups.remove_pod(&burstable()).await.unwrap();
        assert!(!b.exists());
        assert_eq!(read(r, "kubepods/burstable/cpu.weight"), "1");
        assert_eq!(read(r, "kubepods/burstable/memory.low"), "0");
        assert_eq!(read(r, "kubepods/memory.min"), (64 * MI).to_string());
    }

    #[tokio::test]
    async fn turning_memory_qos_off_resets_what_it_wrote() {
        let root = v2_root();
        let r = root.path();
        let manager = Arc::new(CgroupfsManager::new(r, Version::V2));
        let on = NodeCgroups::new(manager.clone(), config(true, tiered()));
        on.start().await.unwrap();
        on.ensure_pod(&burstable()).await.unwrap();
        assert_ne!(read(r, "kubepods/memory.min"), "0");
        // nodelet restarts with Memory QoS off and adopts the pod.
        let off = NodeCgroups::new(manager, config(true, MemoryQos::OFF));
        off.start().await.unwrap();
        assert_eq!(read(r, "kubepods/memory.min"), "0");
        assert_eq!(read(r, "kubepods/memory.low"), "0");
        assert_eq!(read(r, "kubepods/burstable/memory.low"), "0");
        off.ensure_pod(&burstable()).await.unwrap();
        let b = r.join("kubepods/burstable/podb-1");
        assert_eq!(read(&b, "memory.high"), "max");
        assert_eq!(read(&b, "memory.low"), "0");
        assert_eq!(read(&b, "memory.min"), "0");
    }

    #[tokio::test]
    async fn cgroupfs_v1_tree_has_shares_limits_and_pids_but_no_memory_qos() {
        let root = tempfile::tempdir().unwrap();
        for h in ["cpu", "memory", "pids"] {
            std::fs::create_dir(root.path().join(h)).unwrap();
        }
        let manager = Arc::new(CgroupfsManager::new(root.path(), Version::V1));
        let cgroups = NodeCgroups::new(manager, config(false, tiered()));
        cgroups.start().await.unwrap();
        cgroups.ensure_pod(&burstable()).await.unwrap();
        cgroups.ensure_pod(&guaranteed()).await.unwrap();
        let r = root.path();
        assert_eq!(read(r, "cpu/kubepods/cpu.shares"), "1536");
        assert_eq!(
            read(r, "memory/kubepods/memory.limit_in_bytes"),
            (8 * GI).to_string()
        );
        assert_eq!(read(r, "pids/kubepods/pids.max"), "32000");
        assert_eq!(read(r, "cpu/kubepods/burstable/cpu.shares"), "256");
        assert_eq!(read(r, "cpu/kubepods/besteffort/cpu.shares"), "2");
        assert_eq!(read(r, "pids/kubepods/burstable/podb-1/pids.max"), "1024");
        assert_eq!(read(r, "cpu/kubepods/podg-1/cpu.cfs_quota_us"), "20000");
        assert!(!r
            .join("memory/kubepods/burstable/podb-1/memory.high")
            .exists());
        assert!(!r.join("memory/kubepods/memory.min").exists());
    }

    #[tokio::test]
    async fn a_missing_cgroup_root_or_an_oversized_reservation_stops_the_start() {
        let root = v2_root();
        let manager = Arc::new(CgroupfsManager::new(root.path(), Version::V2));
        let mut cfg = config(true, tiered());
        cfg.cgroup_root = "/nodelet-missing".into();
        let err = NodeCgroups::new(manager.clone(), cfg)
            .start()
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("nodelet-missing") && err.contains("does not exist"),
            "{err}"
        );
        let mut cfg = config(true, tiered());
        cfg.reserved.memory = 10 * GI;
        let err = NodeCgroups::new(manager, cfg)
            .start()
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"memory\"") && err.contains("reservation"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn systemd_driver_asks_systemd_for_every_slice() {
        let mount = tempfile::tempdir().unwrap();
        let bus = Arc::new(RecordingBus::default());
        let manager = Arc::new(SystemdManager::new(mount.path(), bus.clone()));
        let cgroups = NodeCgroups::new(manager, config(true, tiered()));
        cgroups.start().await.unwrap();
        cgroups.ensure_pod(&burstable()).await.unwrap();
        cgroups.ensure_pod(&guaranteed()).await.unwrap();
        let started: Vec<String> = bus
            .calls()
            .iter()
            .filter_map(|c| match c {
                Call::Start(unit, _) => Some(unit.clone()),
                _ => None,
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(
            started,
            [
                "kubepods-besteffort.slice",
                "kubepods-burstable-podb_1.slice",
                "kubepods-burstable.slice",
                "kubepods-podg_1.slice",
                "kubepods.slice",
            ]
        );
        let props_of = |unit: &str| -> Vec<(String, PropertyValue)> {
            bus.calls()
                .iter()
                .rev()
                .find_map(|c| match c {
                    Call::Start(u, p) | Call::Set(u, p) if u == unit => Some(p.clone()),
                    _ => None,
                })
                .unwrap()
        };
        let get = |props: &[(String, PropertyValue)], name: &str| {
            props
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let g = props_of("kubepods-podg_1.slice");
        assert_eq!(get(&g, "MemoryMax"), Some(PropertyValue::U64(64 << 20)));
        assert_eq!(get(&g, "MemoryMin"), Some(PropertyValue::U64(64 << 20)));
        assert_eq!(
            get(&g, "CPUQuotaPerSecUSec"),
            Some(PropertyValue::U64(200_000))
        );
        assert_eq!(get(&g, "TasksMax"), Some(PropertyValue::U64(1024)));
        assert_eq!(
            get(&g, "Wants"),
            Some(PropertyValue::Strs(vec!["kubepods.slice".into()]))
        );
        let b = props_of("kubepods-burstable-podb_1.slice");
        assert_eq!(get(&b, "MemoryHigh"), Some(PropertyValue::U64(993_210_368)));
        assert_eq!(get(&b, "MemoryLow"), Some(PropertyValue::U64(256 << 20)));
        assert_eq!(get(&b, "CPUQuotaPerSecUSec"), None);
        // The tiers were updated as the pods came: the last Burstable-tier update carries the
        // Burstable pod's share, and kubepods both pods' memory.min sum.
        let tier = props_of("kubepods-burstable.slice");
        assert_eq!(
            get(&tier, "CPUWeight"),
            Some(PropertyValue::U64(shares_to_weight(256)))
        );
        assert_eq!(get(&tier, "MemoryLow"), Some(PropertyValue::U64(256 << 20)));
        let kubepods = props_of("kubepods.slice");
        assert_eq!(
            get(&kubepods, "MemoryMin"),
            Some(PropertyValue::U64((256 + 64) << 20))
        );
        let first_kubepods = bus
            .calls()
            .into_iter()
            .find_map(|c| match c {
                Call::Start(u, p) if u == "kubepods.slice" => Some(p),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            get(&first_kubepods, "Wants"),
            Some(PropertyValue::Strs(vec!["-.slice".into()]))
        );
        assert_eq!(
            get(&first_kubepods, "MemoryMax"),
            Some(PropertyValue::U64(8 << 30))
        );
        assert_eq!(
            get(&first_kubepods, "TasksMax"),
            Some(PropertyValue::U64(32000))
        );
        // No directory was made under the mount: systemd owns that tree.
        assert_eq!(std::fs::read_dir(mount.path()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn the_sweep_removes_only_old_empty_cgroups_of_pods_the_runtime_does_not_have() {
        let root = v2_root();
        let r = root.path();
        let manager = Arc::new(CgroupfsManager::new(r, Version::V2));
        let cgroups = NodeCgroups::new(manager, config(true, MemoryQos::OFF));
        cgroups.start().await.unwrap();
        for (dir, populated) in [
            ("kubepods/podgone", false),
            ("kubepods/burstable/podgone2", false),
            ("kubepods/besteffort/podbusy", true),
            ("kubepods/burstable/podalive", false),
        ] {
            std::fs::create_dir_all(r.join(dir)).unwrap();
            let events = if populated {
                "populated 1\n"
            } else {
                "populated 0\n"
            };
            // cgroup.events is a kernel file; in the fake tree it must not block rmdir, so it
            // exists only where the cgroup is busy.
            if populated {
                std::fs::write(r.join(dir).join("cgroup.events"), events).unwrap();
            }
        }
        let alive: HashSet<String> = ["alive".to_string()].into();
        // Everything is seconds old: nothing is swept yet.
        let report = cgroups
            .sweep_orphans(&alive, SystemTime::now(), ORPHAN_MIN_AGE)
            .await;
        assert!(report.removed.is_empty(), "{report:?}");
        // An hour later, the gone pods' cgroups go; the busy one and the alive one stay.
        let later = SystemTime::now() + Duration::from_secs(3600);
        let report = cgroups.sweep_orphans(&alive, later, ORPHAN_MIN_AGE).await;
        let removed: BTreeSet<_> = report.removed.iter().cloned().collect();
        assert_eq!(removed, ["gone".to_string(), "gone2".to_string()].into());
        assert!(!r.join("kubepods/podgone").exists());
        assert!(r.join("kubepods/besteffort/podbusy").exists());
        assert!(r.join("kubepods/burstable/podalive").exists());
        assert!(report
            .kept
            .contains(&("busy".to_string(), OrphanDecision::Populated)));
        assert!(report
            .kept
            .contains(&("alive".to_string(), OrphanDecision::Keep)));
    }
}
