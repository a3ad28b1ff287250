//! Pod status: what the kubelet reports for a pod, computed from the desired pod, the runtime's
//! view of it, probe results and the last reported status.
//!
//! * [`generate_pod_status`] is the kubelet's `generateAPIPodStatus` (phase, conditions,
//!   container statuses, IPs, QoS class, start time) as one pure function of [`StatusInputs`].
//! * [`get_phase`] is the kubelet's `getPhase`.
//! * [`container_statuses`] is the kubelet's `convertToAPIContainerStatuses` plus the probe
//!   manager's `ready`/`started` rules.
//! * [`StatusManager`] is the versioned status cache the local API (and later the API server
//!   sync) reads; it enforces the rules the kubelet's status manager enforces (terminal phase is
//!   never left, `startTime` never changes, unchanged statuses do not bump the version).
//! * [`StatusMutation`] is what whoever ends a pod (`kill_pod`) wants its final status to say.
//! * [`terminate_pod_status`] is the status manager's `TerminatePod`: the final status of a pod
//!   whose termination is over reports every container terminated and a terminal phase.
//! * [`printer`] renders pods the way `kubectl get pods` does.
//! * [`api_sync`] delivers the cached statuses to the API server (cluster mode), sends the final
//!   DELETE of pods whose deletion was requested, and cleans up failed pods.

pub mod api_sync;
mod generate;
#[cfg(test)]
mod generate_tests;
mod manager;
mod mutation;
pub mod patch;
mod phase;
pub mod printer;
mod resources;
pub mod restart;
mod terminate;

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodStatus};

use crate::cri::PodRuntime;

pub use api_sync::{ApiStatusSync, ApiStatusSyncOptions, ApiStatusSyncStats};
pub use generate::{container_statuses, generate_pod_status, REJECTED_MESSAGE_PREFIX};
pub use manager::{PodLifecycle, StatusManager, VersionedStatus};
pub use mutation::StatusMutation;
pub use phase::{get_phase, get_phase_with_initialized, hold_terminal_phase};
pub use terminate::{terminate_pod_status, TERMINATED_UNKNOWN_MESSAGE};

/// Waiting reason of a container that has not been created yet (pod without init containers).
pub const CONTAINER_CREATING: &str = "ContainerCreating";
/// Waiting reason of a regular container while the pod's init containers run.
pub const POD_INITIALIZING: &str = "PodInitializing";
/// Terminated reason of a container the runtime lost track of after it had been running.
pub const CONTAINER_STATUS_UNKNOWN: &str = "ContainerStatusUnknown";

/// The kubelet's "reason cache" entry: why the last attempt to start a container failed
/// (`ErrImagePull`, `ErrImageNeverPull`, `ImagePullBackOff`, `CreateContainerConfigError`,
/// `CreateContainerError`, `RunContainerError`, `CrashLoopBackOff`, ...). It becomes the
/// container's waiting reason while the container is due to be (re)started.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StartFailure {
    pub reason: String,
    pub message: String,
}

/// Everything [`generate_pod_status`] needs; it reads nothing else, so the same inputs always
/// give the same status.
#[derive(Debug, Clone, Copy)]
pub struct StatusInputs<'a> {
    /// The desired pod (spec + metadata; `status` is the one last seen from the source).
    pub pod: &'a Pod,
    /// What the runtime has: sandboxes and every container instance, newest first.
    pub runtime: &'a PodRuntime,
    /// The last status nodelet generated for this UID (the status manager's cached one).
    pub previous: Option<&'a PodStatus>,
    /// Last start failure by container name.
    pub start_failures: &'a BTreeMap<String, StartFailure>,
    /// Readiness probe result by runtime container ID (the bare ID, without `containerd://`).
    /// Absent: a running container with no readinessProbe is ready, one with a readinessProbe
    /// is not.
    pub readiness: &'a BTreeMap<String, bool>,
    /// Startup probe result by runtime container ID. Absent: started iff running and the
    /// container has no startupProbe.
    pub startup: &'a BTreeMap<String, bool>,
    /// The node's IPs, primary first (at most one per address family is used).
    pub host_ips: &'a [String],
    /// The pod worker decided no container of this pod will run again.
    pub pod_is_terminal: bool,
    /// Wall-clock time for new condition transitions and the first `startTime`.
    pub now: Timestamp,
    /// Runtime name used in container IDs (`containerd` gives `containerd://<id>`).
    pub runtime_name: &'a str,
    /// Where the pod is in a `RestartAllContainers` restart (the `PodRestartInPlace`
    /// condition).
    pub restart_in_place: RestartInPlace,
    /// The `PodReadyToStartContainersCondition` feature gate: whether the status carries the
    /// `PodReadyToStartContainers` condition.
    pub ready_to_start_condition: bool,
    /// In-place resize: what is allocated and applied per container, and the resize
    /// conditions. `None`: no `resources`/`allocatedResources` and no resize conditions.
    pub resize: Option<&'a ResizeView>,
    /// The pod's runtime handler declares recursive read-only mounts: a read-only mount's
    /// `recursiveReadOnly` in the status is `Enabled` where its mode resolves to recursive.
    pub recursive_read_only: bool,
}

/// What the status shows of in-place resize (the allocation manager's view, in plain types).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResizeView {
    /// The allocated resources by container name.
    pub allocated: BTreeMap<String, k8s_openapi::api::core::v1::ResourceRequirements>,
    /// What nodelet last applied, by container name: (container ID, resources). The status's
    /// `resources` of a running instance when the runtime reports none (containerd 1.6).
    pub actuated: BTreeMap<String, (String, k8s_openapi::api::core::v1::ResourceRequirements)>,
    /// `PodResizePending`: reason, message, generation.
    pub pending: Option<(String, String, i64)>,
    /// `PodResizeInProgress`: generation, and the error message of a failed attempt.
    pub in_progress: Option<(i64, Option<String>)>,
}

/// Where a pod is in a `RestartAllContainers` restart in place, which the executor keeps
/// between syncs and the status shows as the `PodRestartInPlace` condition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RestartInPlace {
    /// The pod never restarted in place: no condition.
    #[default]
    Never,
    /// Every container is being killed: the condition is True.
    Killing,
    /// Every old instance was just removed; the status about to be published is the pod's
    /// fresh start, in which the old instances are gone on purpose (not vanished). False.
    Removed,
    /// The restart is over: False.
    Done,
}

impl RestartInPlace {
    /// The `PodRestartInPlace` condition's status; `None` adds no condition.
    pub fn condition(self) -> Option<bool> {
        match self {
            RestartInPlace::Never => None,
            RestartInPlace::Killing => Some(true),
            RestartInPlace::Removed | RestartInPlace::Done => Some(false),
        }
    }
}
