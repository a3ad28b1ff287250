//! The node's cgroup tree as the kubelet's container manager sets it up at start, and the sweep
//! of pod cgroups left behind by pods that went away while nodelet was down.

use std::collections::HashSet;
use std::sync::Arc;

use super::{HostPaths, StartError};
use crate::cgroup::node::{NodeCgroupConfig, NodeCgroups, ORPHAN_MIN_AGE};
use crate::cgroup::{allocatable, manager, memory_qos, PodCgroupSettings};
use crate::config::memory_qos::MemoryQos;
use crate::config::{kubelet_fields, CgroupDriver, Config};
use crate::cri::{labels, Runtime};
use crate::stats::machine::NodeInfo;

/// The node's cgroup settings and, with `cgroupsPerQOS`, its cgroup tree (node allocatable on
/// `kubepods`, the QoS tiers), set up under `paths.cgroup`.
pub(super) async fn setup(
    cfg: &Config,
    node: &NodeInfo,
    paths: &HostPaths,
) -> Result<(PodCgroupSettings, Option<Arc<NodeCgroups>>), StartError> {
    let mount = paths.cgroup.as_path();
    let version = manager::Version::detect(mount);
    let cgroup_v2 = version == manager::Version::V2;
    let gate = cfg.feature_enabled(kubelet_fields::MEMORY_QOS);
    let configured = cfg.memory_qos();
    let memory_qos = MemoryQos::effective(configured, gate, cgroup_v2);
    if configured != MemoryQos::OFF && memory_qos == MemoryQos::OFF {
        tracing::warn!(
            "memoryThrottlingFactor/memoryReservationPolicy need cgroup v2; ignored on this cgroup v1 node"
        );
    }
    if cgroup_v2 {
        let release =
            std::fs::read_to_string(paths.proc.join("sys/kernel/osrelease")).unwrap_or_default();
        if let Some(warning) = memory_qos::kernel_warning(release.trim(), gate) {
            tracing::warn!("{warning}");
        }
    }
    let capacity = allocatable::NodeResources {
        cpu_milli: node.cpu_capacity_milli(),
        memory: i64::try_from(node.memory_capacity()).unwrap_or(i64::MAX),
        pids: allocatable::pid_capacity(&paths.proc),
    };
    let reserved = cfg.kube_reserved.plus(cfg.system_reserved);
    let page_size = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096);
    let settings = PodCgroupSettings {
        enforce_cpu_limits: true,
        cpu_period: crate::cgroup::QUOTA_PERIOD,
        pod_pids_limit: cfg.pod_pids_limit,
        memory_qos,
        node_allocatable_memory: allocatable::allocatable(capacity, reserved).memory,
        page_size,
        cgroup_v2,
        hugepage_sizes: node
            .machine
            .hugepages
            .iter()
            .map(|(size, _)| *size)
            .collect(),
    };
    if !cfg.cgroups_per_qos {
        return Ok((settings, None));
    }
    let manager: Arc<dyn manager::CgroupManager> = match cfg.cgroup_driver {
        CgroupDriver::Cgroupfs => Arc::new(crate::cgroup::fs::CgroupfsManager::new(mount, version)),
        CgroupDriver::Systemd if !cgroup_v2 => {
            tracing::warn!("cgroupDriver systemd on a cgroup v1 host: nodelet leaves the pod cgroups to the runtime (no pod-level limits, no QoS tiers)");
            return Ok((settings, None));
        }
        CgroupDriver::Systemd => {
            let bus = crate::cgroup::dbus::ZbusSystemd::connect()
                .await
                .map_err(|error| StartError::Cgroups {
                    what: "cgroupDriver systemd: talking to systemd over D-Bus",
                    error,
                })?;
            Arc::new(crate::cgroup::systemd::SystemdManager::new(
                mount,
                Arc::new(bus),
            ))
        }
    };
    let cgroups = NodeCgroups::new(
        manager,
        NodeCgroupConfig {
            cgroup_root: cfg.cgroup_root.clone(),
            pod: settings.clone(),
            capacity,
            reserved,
            enforce_pods: cfg.enforces_pods_allocatable(),
        },
    );
    cgroups.start().await.map_err(|error| StartError::Cgroups {
        what: "setting up the pods' cgroups (kubepods and the QoS tiers)",
        error,
    })?;
    Ok((settings, Some(Arc::new(cgroups))))
}

/// Removes the cgroups of pods that went away while nodelet was down: those whose UID no
/// sandbox in the runtime carries (of any node: other CRI clients' pods are left alone too).
pub(super) async fn sweep_orphans(cgroups: &NodeCgroups, runtime: &dyn Runtime) {
    let sandboxes = match runtime.list_pod_sandbox(None).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "listing sandboxes; orphaned pod cgroups are not swept");
            return;
        }
    };
    let uids: HashSet<String> = sandboxes
        .iter()
        .filter_map(|s| s.labels.get(labels::POD_UID).cloned())
        .collect();
    let report = cgroups
        .sweep_orphans(&uids, std::time::SystemTime::now(), ORPHAN_MIN_AGE)
        .await;
    for (uid, error) in &report.failed {
        tracing::warn!(pod.uid = %uid, error = %error, "removing an orphaned pod cgroup");
    }
    tracing::info!(
        removed = report.removed.len(),
        kept = report.kept.len(),
        failed = report.failed.len(),
        "orphaned pod cgroups swept"
    );
}
