//! The node-wide settings a pod's sync reads (from the configuration and the machine).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::cgroup;

/// Node-wide settings the executor needs (from the configuration).
#[derive(Debug, Clone)]
pub struct SyncSettings {
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
    /// Where the `/var/log/containers` links go (`logs::links`).
    pub container_log_links_dir: PathBuf,
    pub cgroup_driver: cgroup::Driver,
    pub cgroup_root: String,
    pub cgroups_per_qos: bool,
    pub cluster_dns: Vec<std::net::IpAddr>,
    pub cluster_domain: String,
    pub resolv_conf: Option<PathBuf>,
    /// The runtime's name for `containerID` (`containerd://<id>`).
    pub runtime_name: String,
    /// Restart backoff (initial, max): 10 s / 300 s by default, see `crashLoopBackOff`.
    pub crash_loop_backoff: (Duration, Duration),
    /// Whether the node is on the unified cgroup v2 hierarchy.
    pub cgroup_v2: bool,
    /// `singleProcessOOMKill`: leave `memory.oom.group` alone (cgroup v2).
    pub single_process_oom_kill: bool,
    /// `memorySwap.swapBehavior`.
    pub swap_behavior: crate::config::swap::SwapBehavior,
    /// The kernel's swap controller is there (`cgroup::swap::controller_available`): without
    /// it, containers' resources say nothing about swap.
    pub swap_controller: bool,
    /// `seccompDefault`: RuntimeDefault for containers whose pod names no seccomp profile.
    pub seccomp_default: bool,
    /// What the runtime's `Status` declared it supports (recursive read-only mounts per
    /// handler, `supplementalGroupsPolicy`).
    pub runtime_features: crate::cri::features::RuntimeFeaturesView,
    /// The `PodReadyToStartContainersCondition` gate: publish that condition.
    pub ready_to_start_condition: bool,
    /// The node's cgroup tree (`cgroupsPerQOS`): pod cgroups with their limits, QoS tiers;
    /// `None` leaves the pod cgroup to the runtime, without pod-level limits.
    pub cgroups: Option<Arc<cgroup::node::NodeCgroups>>,
    /// What shapes pod and container cgroup values, Memory QoS among them (containers get it
    /// through the CRI even without `cgroupsPerQOS`).
    pub pod_cgroup: cgroup::PodCgroupSettings,
    /// The Node's `status.allocatable` (`node::status::allocatable`): the Downward API's
    /// `limits.*` of a container without a limit (and without a pod-level one).
    pub node_allocatable: crate::podspec::resources::NodeAllocatable,
    /// The `UserNamespacesSupport` gate.
    pub user_namespaces_gate: bool,
    /// What the runtime does with image volumes (from its `Version` answer): a container whose
    /// image volume mounts it cannot honour is not created (`CreateContainerConfigError`).
    pub image_volumes: crate::podspec::image_volume::ImageVolumeSupport,
    /// The pods' user-namespace ranges (`None` with the gate off).
    pub userns: Option<Arc<crate::userns::UsernsManager>>,
    /// The CSI volume manager (`None`: pods with PVC, ephemeral or inline CSI volumes wait).
    pub csi_volumes: Option<Arc<crate::volume::csi::CsiVolumes>>,
    /// Where a gone pod's directory is moved to be deleted off the async runtime.
    pub trash: Arc<crate::volume::trash::Trash>,
}
