//! Cgroups: QoS classes, the pod's effective resources, the cpu/memory values the kubelet
//! writes (`pkg/kubelet/cm/helpers_linux.go`), and the names of QoS and pod cgroups under both
//! cgroup drivers (`pkg/kubelet/cm/cgroup_manager_linux.go`, `pod_container_manager_linux.go`).

pub mod fs;
pub mod qos;
pub mod resources;

use k8s_openapi::api::core::v1::Pod;

pub use qos::{oom_score_adj, qos_class, QosClass};

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

/// The pod's effective resources: requests and limits as the scheduler and the pod cgroup see
/// them. `None` limits are unbounded: some container (or init step) sets no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodResources {
    pub cpu_request_milli: i64,
    pub cpu_limit_milli: Option<i64>,
    pub memory_request: i64,
    pub memory_limit: Option<i64>,
}

/// Effective pod resources per the seed (Init containers / sidecar containers, "resource sharing
/// within containers"): the effective init request is the largest any init step needs (an init
/// container on top of the sidecars started before it); the pod needs the larger of that and
/// the sum over app containers and sidecars. Pod-level `spec.resources` replace the aggregate.
pub fn effective_pod_resources(pod: &Pod) -> PodResources {
    let requests = resources::pod_requests(pod);
    let (limits, cpu_declared, memory_declared) = resources::pod_limits(pod);
    PodResources {
        cpu_request_milli: requests.cpu_milli.unwrap_or(0),
        cpu_limit_milli: cpu_declared.then(|| limits.cpu_milli.unwrap_or(0)),
        memory_request: requests.memory.unwrap_or(0),
        memory_limit: memory_declared.then(|| limits.memory.unwrap_or(0)),
    }
}

/// What the kubelet writes to a pod cgroup (`ResourceConfigForPod`). `None` fields stay unset
/// (unlimited / inherited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodResourceConfig {
    pub cpu_shares: u64,
    /// Microseconds per `cpu_period`; -1 when cpu limits are not enforced.
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    pub memory_limit: Option<i64>,
}

/// The pod cgroup's settings by QoS class: Guaranteed pods get shares, quota and memory limit;
/// Burstable pods get shares plus whichever limits every container declares; BestEffort pods
/// get the minimum shares only. `enforce_cpu_limits` is the kubelet's `cpuCFSQuota`.
pub fn pod_resource_config(
    pod: &Pod,
    enforce_cpu_limits: bool,
    cpu_period: u64,
) -> PodResourceConfig {
    let r = effective_pod_resources(pod);
    let (limits, _, _) = resources::pod_limits(pod);
    let shares = milli_cpu_to_shares(r.cpu_request_milli);
    let quota = if enforce_cpu_limits {
        milli_cpu_to_quota(limits.cpu_milli.unwrap_or(0), cpu_period)
    } else {
        -1
    };
    match qos_class(pod) {
        QosClass::Guaranteed => PodResourceConfig {
            cpu_shares: shares,
            cpu_quota: Some(quota),
            cpu_period: Some(cpu_period),
            memory_limit: Some(limits.memory.unwrap_or(0)),
        },
        QosClass::Burstable => PodResourceConfig {
            cpu_shares: shares,
            cpu_quota: r.cpu_limit_milli.map(|_| quota),
            cpu_period: r.cpu_limit_milli.map(|_| cpu_period),
            memory_limit: r.memory_limit,
        },
        QosClass::BestEffort => PodResourceConfig {
            cpu_shares: MIN_SHARES,
            cpu_quota: None,
            cpu_period: None,
            memory_limit: None,
        },
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

/// The QoS-tier cgroup a pod of `class` lives in: Guaranteed pods sit directly under
/// `kubepods`, the other tiers under `kubepods/burstable` and `kubepods/besteffort`.
pub fn qos_cgroup_name(class: QosClass, cgroup_root: &str) -> CgroupName {
    let root = CgroupName::parse_cgroupfs(cgroup_root).child(KUBEPODS);
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
    fn a_plain_directory_is_not_cgroup2() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!super::is_cgroup2_unified(dir.path()));
        assert!(!super::is_cgroup2_unified(&dir.path().join("missing")));
    }

    use super::resources::test_support::{container, pod, sidecar};
    use super::*;

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
    fn effective_resources_follow_the_seed() {
        // app 100m + sidecar 200m = 300m; init 500m after the sidecar needs 700m → 700m
        let p = pod(
            vec![container(
                "app",
                "cpu=100m,memory=100Mi",
                "cpu=1,memory=200Mi",
            )],
            vec![
                sidecar("side", "cpu=200m,memory=50Mi", "cpu=1,memory=50Mi"),
                container("init", "cpu=500m,memory=10Mi", "cpu=2,memory=10Mi"),
            ],
        );
        assert_eq!(
            effective_pod_resources(&p),
            PodResources {
                cpu_request_milli: 700,
                // app + side = 2 cpu; side + init = 3 cpu → 3 cpu
                cpu_limit_milli: Some(3000),
                memory_request: 150 << 20,
                memory_limit: Some(250 << 20),
            }
        );
        // one container without a memory limit makes the pod unbounded for memory
        let p = pod(
            vec![
                container("a", "cpu=100m", "cpu=1,memory=1Gi"),
                container("b", "cpu=100m", "cpu=1"),
            ],
            vec![],
        );
        let r = effective_pod_resources(&p);
        assert_eq!((r.cpu_limit_milli, r.memory_limit), (Some(2000), None));
    }

    #[test]
    fn pod_resource_config_by_qos() {
        let guaranteed = pod(vec![container("a", "", "cpu=500m,memory=1Gi")], vec![]);
        assert_eq!(
            pod_resource_config(&guaranteed, true, QUOTA_PERIOD),
            PodResourceConfig {
                cpu_shares: 512,
                cpu_quota: Some(50_000),
                cpu_period: Some(QUOTA_PERIOD),
                memory_limit: Some(1 << 30),
            }
        );
        let burstable = pod(vec![container("a", "cpu=250m", "memory=1Gi")], vec![]);
        assert_eq!(
            pod_resource_config(&burstable, true, QUOTA_PERIOD),
            PodResourceConfig {
                cpu_shares: 256,
                cpu_quota: None,
                cpu_period: None,
                memory_limit: Some(1 << 30),
            }
        );
        assert_eq!(
            pod_resource_config(&guaranteed, false, QUOTA_PERIOD).cpu_quota,
            Some(-1)
        );
        let best_effort = pod(vec![container("a", "", "")], vec![]);
        assert_eq!(
            pod_resource_config(&best_effort, true, QUOTA_PERIOD),
            PodResourceConfig {
                cpu_shares: 2,
                cpu_quota: None,
                cpu_period: None,
                memory_limit: None,
            }
        );
    }
}
