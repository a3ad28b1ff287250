//! Cgroups: the cpu/memory/pid values the kubelet writes (`pkg/kubelet/cm/helpers_linux.go`),
//! and the names of QoS and pod cgroups under both cgroup drivers
//! (`pkg/kubelet/cm/cgroup_manager_linux.go`, `pod_container_manager_linux.go`). The pod's QoS
//! class and effective resources are pod knowledge, in [`crate::podspec::qos`] and
//! [`crate::podspec::resources`].
//!
//! The pure parts are here and in [`memory_qos`], [`allocatable`] and [`oom`]; the effects go
//! through one [`manager::CgroupManager`] with a variant per driver ([`fs`] for cgroupfs,
//! [`systemd`] over [`dbus`]), which [`node::NodeCgroups`] drives: `kubepods`, the QoS tiers,
//! the pod cgroups and the start-up sweep. Every path is a parameter.

pub mod allocatable;
pub mod dbus;
pub mod fs;
pub mod manager;
pub mod memory_qos;
pub mod node;
pub mod oom;
pub mod swap;
pub mod systemd;

use k8s_openapi::api::core::v1::Pod;

use crate::podspec::qos::{qos_class, QosClass};
use crate::podspec::resources::pod_resources_with_overhead;

/// Smallest cpu.shares the kubelet writes (the kernel's minimum).
pub const MIN_SHARES: u64 = 2;
/// Largest cpu.shares the kernel accepts.
pub const MAX_SHARES: u64 = 262_144;
pub const SHARES_PER_CPU: i64 = 1024;
pub const MILLI_CPU_TO_CPU: i64 = 1000;
/// The CFS period the kubelet uses unless configured otherwise: 100 ms, in microseconds.
pub const QUOTA_PERIOD: u64 = 100_000;
/// The kernel's smallest CFS quota: 1 ms, in microseconds.
pub const MIN_QUOTA_PERIOD: i64 = 1000;

/// cpu.shares for a cpu request (`MilliCPUToShares`): 1024 per cpu, within the kernel's range.
/// Zero maps to 2 rather than "unset" (which the kernel would treat as 1024).
pub fn milli_cpu_to_shares(milli: i64) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    let shares = i128::from(milli) * i128::from(SHARES_PER_CPU) / i128::from(MILLI_CPU_TO_CPU);
    u64::try_from(shares)
        .unwrap_or(MAX_SHARES)
        .clamp(MIN_SHARES, MAX_SHARES)
}

/// CFS quota in microseconds per `period` for a cpu limit (`milliCPUToQuota`); 0 means no limit.
/// A non-zero quota is at least 1 ms, the kernel's minimum.
pub fn milli_cpu_to_quota(milli: i64, period: u64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    let quota = i128::from(milli) * i128::from(period) / i128::from(MILLI_CPU_TO_CPU);
    i64::try_from(quota)
        .unwrap_or(i64::MAX)
        .max(MIN_QUOTA_PERIOD)
}

/// What to set on one cgroup, driver- and version-independent (the kubelet's
/// `ResourceConfig`). `None` fields are left as they are: unlimited or inherited for a cgroup
/// nodelet creates, untouched for one that exists.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceConfig {
    pub cpu_shares: Option<u64>,
    /// Microseconds per `cpu_period`; -1 when cpu limits are not enforced.
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    /// `memory.max` / `memory.limit_in_bytes` in bytes.
    pub memory_limit: Option<i64>,
    /// `pids.max`; -1 = `max`.
    pub pids_limit: Option<i64>,
    /// cgroup v2 only: `memory.min`.
    pub memory_min: Option<i64>,
    /// cgroup v2 only: `memory.low`.
    pub memory_low: Option<i64>,
    /// cgroup v2 only: `memory.high`.
    pub memory_high: Option<MemoryHigh>,
    /// `hugetlb.<page size>.max` (v2) / `.limit_in_bytes` (v1) in bytes, by page-size string
    /// ("2MB"); empty leaves them alone.
    pub hugetlb_limits: Vec<(String, u64)>,
}

/// A `memory.high` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryHigh {
    Bytes(i64),
    /// No throttling (`max`): what an unset value resets to.
    Max,
}

/// What the kubelet writes to a pod cgroup (`ResourceConfigForPod`) for cpu and memory: shares,
/// and the quota and memory limit when every container declares one; Guaranteed pods always get
/// all three, BestEffort pods the minimum shares only. `enforce_cpu_limits` is the kubelet's
/// `cpuCFSQuota`.
pub fn pod_resource_config(pod: &Pod, enforce_cpu_limits: bool, cpu_period: u64) -> ResourceConfig {
    // The pod's overhead counts, as in `ResourceConfigForPod` (`PodRequests`/`PodLimits` with
    // overhead): the sandbox's own processes (a VM, gVisor's sentry) live in this cgroup.
    let r = pod_resources_with_overhead(pod);
    let shares = milli_cpu_to_shares(r.cpu_request_milli);
    let quota = if enforce_cpu_limits {
        milli_cpu_to_quota(r.cpu_limit_milli.unwrap_or(0), cpu_period)
    } else {
        -1
    };
    match qos_class(pod) {
        QosClass::Guaranteed => ResourceConfig {
            cpu_shares: Some(shares),
            cpu_quota: Some(quota),
            cpu_period: Some(cpu_period),
            memory_limit: Some(r.memory_limit.unwrap_or(0)),
            ..Default::default()
        },
        QosClass::Burstable => ResourceConfig {
            cpu_shares: Some(shares),
            cpu_quota: r.cpu_limit_milli.map(|_| quota),
            cpu_period: r.cpu_limit_milli.map(|_| cpu_period),
            memory_limit: r.memory_limit,
            ..Default::default()
        },
        QosClass::BestEffort => ResourceConfig {
            cpu_shares: Some(MIN_SHARES),
            ..Default::default()
        },
    }
}

/// Node-wide settings that shape every pod cgroup.
#[derive(Debug, Clone, PartialEq)]
pub struct PodCgroupSettings {
    /// `cpuCFSQuota`.
    pub enforce_cpu_limits: bool,
    /// `cpuCFSQuotaPeriod` in microseconds.
    pub cpu_period: u64,
    /// `podPidsLimit`: `pids.max` of every pod cgroup when above 0.
    pub pod_pids_limit: i64,
    /// Memory QoS in effect (after the gate and the cgroup version).
    pub memory_qos: crate::config::memory_qos::MemoryQos,
    /// The node's allocatable memory (capacity − `kubeReserved` − `systemReserved`): the limit
    /// `memory.high` is computed against when a pod or container has none.
    pub node_allocatable_memory: i64,
    pub page_size: i64,
    /// Whether the node runs cgroup v2: Memory QoS values are only written there.
    pub cgroup_v2: bool,
    /// The node's hugepage sizes in bytes: each gets a hugetlb limit on every pod cgroup, 0 where
    /// the pod requests none (the kubelet's cgroup manager, `toResources`).
    pub hugepage_sizes: Vec<u64>,
}

impl Default for PodCgroupSettings {
    fn default() -> Self {
        PodCgroupSettings {
            enforce_cpu_limits: true,
            cpu_period: QUOTA_PERIOD,
            pod_pids_limit: -1,
            memory_qos: crate::config::memory_qos::MemoryQos::OFF,
            node_allocatable_memory: 0,
            page_size: 4096,
            cgroup_v2: false,
            hugepage_sizes: Vec::new(),
        }
    }
}

/// Everything nodelet sets on a pod's cgroup: [`pod_resource_config`], `pids.max` from
/// `podPidsLimit`, and on cgroup v2 the Memory QoS values — always all three of them, so that a
/// pod cgroup configured under an earlier Memory QoS setting is reset.
pub fn pod_cgroup_config(pod: &Pod, settings: &PodCgroupSettings) -> ResourceConfig {
    let mut cfg = pod_resource_config(pod, settings.enforce_cpu_limits, settings.cpu_period);
    if settings.pod_pids_limit > 0 {
        cfg.pids_limit = Some(settings.pod_pids_limit);
    }
    // Every QoS class: a pod that requests no hugepages must not use any.
    cfg.hugetlb_limits =
        crate::podspec::hugepages::pod_hugetlb_limits(pod, &settings.hugepage_sizes);
    if settings.cgroup_v2 {
        let r = pod_resources_with_overhead(pod);
        let (min, low, high) = memory_qos::pod_values(
            qos_class(pod),
            r.memory_request,
            r.memory_limit,
            settings.memory_qos,
            settings.node_allocatable_memory,
            settings.page_size,
        );
        cfg.memory_min = Some(min);
        cfg.memory_low = Some(low);
        cfg.memory_high = Some(high.map_or(MemoryHigh::Max, MemoryHigh::Bytes));
    }
    cfg
}

/// cpu.weight (v2) for cpu.shares (v1), as the kubelet converts it (opencontainers/cgroups'
/// `ConvertCPUSharesToCgroupV2Value` since runc 1.3 / Kubernetes 1.34): a quadratic in log2 of
/// the shares that maps 2 → 1, 1024 → 100 (both kernels' defaults) and 262144 → 10000. The
/// earlier linear mapping gave 1024 shares a weight of 39, below an unconfigured cgroup's 100.
pub fn shares_to_weight(shares: u64) -> u64 {
    match shares {
        0 => 0,
        1..=2 => 1,
        MAX_SHARES.. => 10_000,
        _ => {
            let l = (shares as f64).log2();
            let exponent = (l * l + 125.0 * l) / 612.0 - 7.0 / 34.0;
            10f64.powf(exponent).ceil() as u64
        }
    }
}

/// The cgroup driver, as configured (`cgroupDriver`).
pub use crate::config::CgroupDriver as Driver;

/// The name of the top-level cgroup for pods.
pub const KUBEPODS: &str = "kubepods";

/// A driver-independent cgroup name: its components from the root (`cm.CgroupName`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupName(pub Vec<String>);

impl CgroupName {
    /// Components of a cgroupfs path such as `/` or `/custom/root` (`ParseCgroupfsToCgroupName`).
    pub fn parse_cgroupfs(path: &str) -> Self {
        CgroupName(
            path.split('/')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    pub fn child(&self, name: &str) -> Self {
        let mut parts = self.0.clone();
        parts.push(name.to_string());
        CgroupName(parts)
    }

    /// `/a/b/c` (`ToCgroupfs`).
    pub fn to_cgroupfs(&self) -> String {
        format!("/{}", self.0.join("/"))
    }

    /// The systemd slice path, e.g. `/kubepods.slice/kubepods-burstable.slice/
    /// kubepods-burstable-pod1234_5678.slice` (`ToSystemd`): systemd encodes the hierarchy in
    /// the unit name with `-`, so dashes inside a component become `_`.
    pub fn to_systemd(&self) -> String {
        if self.0.is_empty() {
            return "/".to_string();
        }
        let escaped: Vec<String> = self.0.iter().map(|p| p.replace('-', "_")).collect();
        let mut path = String::new();
        for depth in 1..=escaped.len() {
            path.push('/');
            path.push_str(&escaped[..depth].join("-"));
            path.push_str(".slice");
        }
        path
    }

    pub fn to_driver(&self, driver: Driver) -> String {
        match driver {
            Driver::Cgroupfs => self.to_cgroupfs(),
            Driver::Systemd => self.to_systemd(),
        }
    }
}

/// `kubepods` under `cgroupRoot`: the cgroup of all pods (the kubelet's `pods` system container).
pub fn kubepods_cgroup_name(cgroup_root: &str) -> CgroupName {
    CgroupName::parse_cgroupfs(cgroup_root).child(KUBEPODS)
}

/// The QoS-tier cgroup a pod of `class` lives in: Guaranteed pods sit directly under
/// `kubepods`, the other tiers under `kubepods/burstable` and `kubepods/besteffort`.
pub fn qos_cgroup_name(class: QosClass, cgroup_root: &str) -> CgroupName {
    let root = kubepods_cgroup_name(cgroup_root);
    match class {
        QosClass::Guaranteed => root,
        QosClass::Burstable => root.child("burstable"),
        QosClass::BestEffort => root.child("besteffort"),
    }
}

/// The pod's cgroup name: `pod<uid>` under its QoS tier (`GetPodContainerName`).
pub fn pod_cgroup_name(pod: &Pod, cgroup_root: &str) -> CgroupName {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    qos_cgroup_name(qos_class(pod), cgroup_root).child(&format!("pod{uid}"))
}

/// The cgroup parent the kubelet passes to the runtime for the pod's sandbox and containers:
/// `/kubepods/burstable/pod<uid>` (cgroupfs) or
/// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice` (systemd;
/// containerd uses the last element). Empty when `cgroupsPerQOS` is off, as the kubelet's
/// no-op pod container manager returns, leaving placement to the runtime.
pub fn pod_cgroup_parent(
    pod: &Pod,
    driver: Driver,
    cgroup_root: &str,
    cgroups_per_qos: bool,
) -> String {
    if !cgroups_per_qos {
        return String::new();
    }
    pod_cgroup_name(pod, cgroup_root).to_driver(driver)
}

/// The kubelet's refusal of a cgroup v1 host (`failCgroupV1`, on by default since 1.35).
pub const CGROUP_V1_REFUSAL: &str = "kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is unsupported and will be removed in a future release";

/// What the kubelet logs when `failCgroupV1: false` lets it run on cgroup v1.
pub const CGROUP_V1_WARNING: &str = "cgroup v1 detected. cgroup v1 support is unsupported and will be removed in a future release. Please migrate to cgroup v2. More information at https://git.k8s.io/enhancements/keps/sig-node/5573-cgroup-v1-unsupported";

/// The kubelet's `validateKubeletOSConfiguration` for the cgroup version: on a cgroup v1 host,
/// `Err` with the kubelet's message unless `failCgroupV1` is false, and then `Ok` with the
/// warning to log.
pub fn check_cgroup_version(
    fail_cgroup_v1: bool,
    unified: bool,
) -> Result<Option<&'static str>, String> {
    match (unified, fail_cgroup_v1) {
        (true, _) => Ok(None),
        (false, true) => Err(format!(
            "failed to validate kubelet configuration, error: {CGROUP_V1_REFUSAL} (failCgroupV1 is true; set failCgroupV1: false to run on this cgroup v1 host anyway)"
        )),
        (false, false) => Ok(Some(CGROUP_V1_WARNING)),
    }
}

/// Where the node's cgroup hierarchy is mounted.
pub const CGROUP_MOUNT: &str = "/sys/fs/cgroup";

/// True when `mount_point` (normally `/sys/fs/cgroup`) is the unified cgroup v2 hierarchy. Hybrid
/// hosts (v1 controllers with a v2 mount at `/sys/fs/cgroup/unified`) are not unified.
pub fn is_cgroup2_unified(mount_point: &std::path::Path) -> bool {
    match nix::sys::statfs::statfs(mount_point) {
        Ok(fs) => fs.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cgroup_v1_is_refused_unless_allowed() {
        assert_eq!(check_cgroup_version(true, true), Ok(None));
        assert_eq!(check_cgroup_version(false, true), Ok(None));
        assert_eq!(
            check_cgroup_version(false, false),
            Ok(Some(CGROUP_V1_WARNING))
        );
        let err = check_cgroup_version(true, false).unwrap_err();
        assert!(err.contains(CGROUP_V1_REFUSAL), "{err}");
        assert!(err.contains("failCgroupV1: false"), "{err}");
    }

    #[test]
    fn pod_cgroup_config_adds_pids_and_memory_qos_on_v2_only() {
        use crate::config::memory_qos::{MemoryQos, ReservationPolicy};
        let p = pod(vec![container("a", "memory=256Mi", "memory=1Gi")], vec![]);
        let settings = PodCgroupSettings {
            pod_pids_limit: 512,
            memory_qos: MemoryQos {
                throttling_factor: Some(0.9),
                reservation: ReservationPolicy::TieredReservation,
            },
            node_allocatable_memory: 8 << 30,
            cgroup_v2: true,
            ..Default::default()
        };
        let cfg = pod_cgroup_config(&p, &settings);
        assert_eq!(cfg.pids_limit, Some(512));
        assert_eq!(cfg.memory_limit, Some(1 << 30));
        assert_eq!(cfg.memory_high, Some(MemoryHigh::Bytes(993_210_368)));
        assert_eq!(cfg.memory_low, Some(256 << 20));
        assert_eq!(cfg.memory_min, Some(0));
        let v1 = pod_cgroup_config(
            &p,
            &PodCgroupSettings {
                cgroup_v2: false,
                ..settings
            },
        );
        assert_eq!(
            (v1.memory_high, v1.memory_low, v1.memory_min),
            (None, None, None)
        );
        assert_eq!(v1.pids_limit, Some(512));
        let unlimited = pod_cgroup_config(&p, &PodCgroupSettings::default());
        assert_eq!(unlimited.pids_limit, None);
    }

    #[test]
    fn pod_cgroup_config_limits_hugetlb_for_every_node_size() {
        let settings = PodCgroupSettings {
            hugepage_sizes: vec![2 << 20, 1 << 30],
            ..Default::default()
        };
        let asks = pod(
            vec![
                container("a", "", "memory=64Mi,hugepages-2Mi=4Mi"),
                container("b", "", "memory=64Mi,hugepages-2Mi=2Mi"),
            ],
            vec![],
        );
        assert_eq!(
            pod_cgroup_config(&asks, &settings).hugetlb_limits,
            vec![("2MB".to_string(), 6 << 20), ("1GB".to_string(), 0)]
        );
        // A pod without hugepages (any QoS class) may use none.
        let none = pod(vec![container("a", "", "")], vec![]);
        assert_eq!(
            pod_cgroup_config(&none, &settings).hugetlb_limits,
            vec![("2MB".to_string(), 0), ("1GB".to_string(), 0)]
        );
        // A node without hugepage sizes writes nothing for a pod that asks none.
        assert!(pod_cgroup_config(&none, &PodCgroupSettings::default())
            .hugetlb_limits
            .is_empty());
    }

    #[test]
    fn a_plain_directory_is_not_cgroup2() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!super::is_cgroup2_unified(dir.path()));
        assert!(!super::is_cgroup2_unified(&dir.path().join("missing")));
    }

    use super::*;
    use crate::podspec::resources::test_support::{container, pod};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn shares_table() {
        let cases = [
            (0, 2),
            (1, 2),
            (2, 2),
            (3, 3),
            (10, 10),
            (100, 102),
            (250, 256),
            (1000, 1024),
            (1500, 1536),
            (256_000, 262_144),
            (300_000, 262_144),
            (-5, 2),
        ];
        for (milli, want) in cases {
            assert_eq!(milli_cpu_to_shares(milli), want, "{milli}m");
        }
    }

    #[test]
    fn shares_to_weight_table() {
        // The kubelet's (opencontainers/cgroups) values.
        let cases = [
            (0, 0),
            (1, 1),
            (2, 1),
            (3, 2),
            (102, 17),
            (256, 35),
            (512, 59),
            (1024, 100),
            (2048, 174),
            (262_143, 10_000),
            (262_144, 10_000),
            (u64::MAX, 10_000),
        ];
        for (shares, weight) in cases {
            assert_eq!(shares_to_weight(shares), weight, "{shares}");
        }
    }

    #[test]
    fn quota_table() {
        let cases = [
            (0, QUOTA_PERIOD, 0),
            (1, QUOTA_PERIOD, 1000),
            (5, QUOTA_PERIOD, 1000),
            (10, QUOTA_PERIOD, 1000),
            (20, QUOTA_PERIOD, 2000),
            (200, QUOTA_PERIOD, 20_000),
            (1000, QUOTA_PERIOD, 100_000),
            (1500, QUOTA_PERIOD, 150_000),
            (1000, 50_000, 50_000),
            (5, 50_000, 1000),
        ];
        for (milli, period, want) in cases {
            assert_eq!(milli_cpu_to_quota(milli, period), want, "{milli}m/{period}");
        }
    }

    fn with_uid(mut p: Pod, uid: &str) -> Pod {
        p.metadata.uid = Some(uid.to_string());
        p
    }

    #[test]
    fn pod_cgroup_parent_table() {
        let guaranteed = with_uid(
            pod(vec![container("a", "", "cpu=1,memory=1Gi")], vec![]),
            "1234-5678",
        );
        let burstable = with_uid(pod(vec![container("a", "cpu=1", "")], vec![]), "1234-5678");
        let best_effort = with_uid(pod(vec![container("a", "", "")], vec![]), "abcd");
        let cases = [
            (
                &guaranteed,
                Driver::Cgroupfs,
                "/",
                true,
                "/kubepods/pod1234-5678",
            ),
            (
                &burstable,
                Driver::Cgroupfs,
                "/",
                true,
                "/kubepods/burstable/pod1234-5678",
            ),
            (
                &best_effort,
                Driver::Cgroupfs,
                "/",
                true,
                "/kubepods/besteffort/podabcd",
            ),
            (
                &burstable,
                Driver::Cgroupfs,
                "/custom",
                true,
                "/custom/kubepods/burstable/pod1234-5678",
            ),
            (
                &guaranteed,
                Driver::Systemd,
                "/",
                true,
                "/kubepods.slice/kubepods-pod1234_5678.slice",
            ),
            (
                &burstable,
                Driver::Systemd,
                "/",
                true,
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice",
            ),
            (
                &best_effort,
                Driver::Systemd,
                "/",
                true,
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podabcd.slice",
            ),
            (&burstable, Driver::Cgroupfs, "/", false, ""),
            (&burstable, Driver::Systemd, "/", false, ""),
        ];
        for (p, driver, root, per_qos, want) in cases {
            assert_eq!(
                pod_cgroup_parent(p, driver, root, per_qos),
                want,
                "{driver:?} {root}"
            );
        }
    }

    #[test]
    fn pod_resource_config_by_qos() {
        let guaranteed = pod(vec![container("a", "", "cpu=500m,memory=1Gi")], vec![]);
        assert_eq!(
            pod_resource_config(&guaranteed, true, QUOTA_PERIOD),
            ResourceConfig {
                cpu_shares: Some(512),
                cpu_quota: Some(50_000),
                cpu_period: Some(QUOTA_PERIOD),
                memory_limit: Some(1 << 30),
                ..Default::default()
            }
        );
        let burstable = pod(vec![container("a", "cpu=250m", "memory=1Gi")], vec![]);
        assert_eq!(
            pod_resource_config(&burstable, true, QUOTA_PERIOD),
            ResourceConfig {
                cpu_shares: Some(256),
                memory_limit: Some(1 << 30),
                ..Default::default()
            }
        );
        assert_eq!(
            pod_resource_config(&guaranteed, false, QUOTA_PERIOD).cpu_quota,
            Some(-1)
        );
        // The pod's overhead (its RuntimeClass's) is in the pod cgroup's values.
        let mut with_overhead = guaranteed.clone();
        with_overhead.spec.as_mut().unwrap().overhead = Some(
            [
                ("cpu".to_string(), Quantity("250m".into())),
                ("memory".to_string(), Quantity("128Mi".into())),
            ]
            .into(),
        );
        assert_eq!(
            pod_resource_config(&with_overhead, true, QUOTA_PERIOD),
            ResourceConfig {
                cpu_shares: Some(768),
                cpu_quota: Some(75_000),
                cpu_period: Some(QUOTA_PERIOD),
                memory_limit: Some((1 << 30) + (128 << 20)),
                ..Default::default()
            }
        );
        let best_effort = pod(vec![container("a", "", "")], vec![]);
        assert_eq!(
            pod_resource_config(&best_effort, true, QUOTA_PERIOD),
            ResourceConfig {
                cpu_shares: Some(2),
                ..Default::default()
            }
        );
    }
}
