//! The pod status the kubelet reports: `generateAPIPodStatus`, `convertToAPIContainerStatuses`,
//! the probe manager's `ready`/`started` rules, `pkg/kubelet/status/generate.go` conditions and
//! the status manager's timestamp rules, as pure functions.

use std::collections::HashMap;
use std::net::IpAddr;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
    VolumeMountStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::phase::{get_phase_with_initialized, is_terminal_phase};
use super::restart::should_container_be_restarted;
use super::{
    ResizeView, RestartInPlace, StatusInputs, CONTAINER_CREATING, CONTAINER_STATUS_UNKNOWN,
    POD_INITIALIZING,
};
use crate::cri::{ContainerState as RuntimeState, PodRuntime, RuntimeContainer};
use crate::podspec::Phase;

pub const POD_SCHEDULED: &str = "PodScheduled";
pub const POD_RESTART_IN_PLACE: &str = "PodRestartInPlace";
pub const POD_READY_TO_START_CONTAINERS: &str = "PodReadyToStartContainers";
pub const INITIALIZED: &str = "Initialized";
pub const CONTAINERS_READY: &str = "ContainersReady";
pub const READY: &str = "Ready";
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
pub const POD_RESIZE_PENDING: &str = "PodResizePending";
pub const POD_RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";
/// `DisruptionTarget`'s reason when the node agent itself ended the pod (eviction, node
/// shutdown, preemption).
pub const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";
/// How the message of every admission rejection begins (the kubelet's `rejectPod`).
pub const REJECTED_MESSAGE_PREFIX: &str = "Pod was rejected: ";
/// The pod status reason of an eviction, and of a rejection under node pressure.
pub const EVICTED_REASON: &str = "Evicted";

/// The waiting reason and last termination of a container an in-place restart
/// (`RestartAllContainers`) removed, until its next instance exists.
pub const RESTARTING_ALL_CONTAINERS: &str = "RestartingAllContainers";
const RESTARTING_ALL_CONTAINERS_MESSAGE: &str =
    "The container is removed because RestartAllContainers in place";

const UNKNOWN_CONTAINER_STATUSES: &str = "UnknownContainerStatuses";
const POD_COMPLETED: &str = "PodCompleted";
const POD_FAILED: &str = "PodFailed";
const CONTAINERS_NOT_READY: &str = "ContainersNotReady";
const CONTAINERS_NOT_INITIALIZED: &str = "ContainersNotInitialized";
const READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";

/// The kubelet's `MaxPodTerminationMessageLogLength`: termination messages of all containers
/// together are cut to this many bytes, split evenly between containers.
const MAX_POD_TERMINATION_MESSAGE_LENGTH: usize = 1024 * 12;

use crate::podspec::ContainerKind;

// ---- small accessors shared with phase.rs ----

pub(super) use crate::podspec::{init_containers, is_sidecar, regular_containers};

pub(super) fn running(s: &ContainerStatus) -> Option<&ContainerStateRunning> {
    s.state.as_ref().and_then(|st| st.running.as_ref())
}

pub(super) fn terminated(s: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    s.state.as_ref().and_then(|st| st.terminated.as_ref())
}

pub(super) fn waiting(s: &ContainerStatus) -> Option<&ContainerStateWaiting> {
    s.state.as_ref().and_then(|st| st.waiting.as_ref())
}

pub(super) fn last_terminated(s: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    s.last_state.as_ref().and_then(|st| st.terminated.as_ref())
}

use crate::podspec::host_network;

/// Go omits empty strings (`omitempty`); so do we.
fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// API times have second precision; truncating here keeps a regenerated status equal to the
/// cached one (and to what the API server would store).
fn api_time(ts: Timestamp) -> Time {
    Time(Timestamp::from_second(ts.as_second()).unwrap_or(ts))
}

fn waiting_state(reason: Option<String>, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting { reason, message }),
        ..Default::default()
    }
}

fn terminated_state(t: ContainerStateTerminated) -> ContainerState {
    ContainerState {
        terminated: Some(t),
        ..Default::default()
    }
}

/// The status the kubelet compares against: its cached one, else the one the source gave.
fn old_status<'a>(inputs: &StatusInputs<'a>) -> Option<&'a PodStatus> {
    inputs.previous.or(inputs.pod.status.as_ref())
}

// ---- container statuses ----

/// The kubelet's `convertToAPIContainerStatuses` for one container list, with `ready` and
/// `started` set by the probe rules of [`StatusInputs`].
///
/// Init container statuses come in spec order; regular and ephemeral ones sorted by name, as
/// the kubelet sorts them (`SortedContainerStatuses`). Ephemeral ones are never ready and
/// have no `started` (the prober does not touch them), and are never restarted: one waits
/// with its start failure only while it has no instance.
pub fn container_statuses(inputs: &StatusInputs, kind: ContainerKind) -> Vec<ContainerStatus> {
    let pod = inputs.pod;
    let runtime = inputs.runtime;
    let ephemeral;
    let containers: &[Container] = match kind {
        ContainerKind::Init => init_containers(pod),
        ContainerKind::Regular => regular_containers(pod),
        ContainerKind::Ephemeral => {
            ephemeral = crate::podspec::ephemeral_as_containers(pod);
            &ephemeral
        }
    };
    let has_init_containers = !init_containers(pod).is_empty();
    let default_reason = if has_init_containers {
        POD_INITIALIZING
    } else {
        CONTAINER_CREATING
    };
    let old: HashMap<&str, &ContainerStatus> = old_status(inputs)
        .and_then(|s| match kind {
            ContainerKind::Init => s.init_container_statuses.as_ref(),
            ContainerKind::Regular => s.container_statuses.as_ref(),
            ContainerKind::Ephemeral => s.ephemeral_container_statuses.as_ref(),
        })
        .into_iter()
        .flatten()
        .map(|s| (s.name.as_str(), s))
        .collect();

    // 1. Every container starts out waiting with the default reason; a container the runtime
    //    no longer knows keeps what was reported before (all of it if it had terminated).
    let mut statuses: Vec<ContainerStatus> = containers
        .iter()
        .map(|c| {
            let mut status = ContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                state: Some(waiting_state(Some(default_reason.to_string()), None)),
                last_state: Some(ContainerState::default()),
                volume_mounts: volume_mount_statuses(c, inputs.recursive_read_only),
                ..Default::default()
            };
            if let Some(o) = old.get(c.name.as_str()) {
                if terminated(o).is_some() {
                    status = (*o).clone();
                } else {
                    status.restart_count = o.restart_count;
                    status.last_state.clone_from(&o.last_state);
                }
            }
            status
        })
        .collect();
    let index: HashMap<&str, usize> = containers
        .iter()
        .enumerate()
        .map(|(i, c)| (c.name.as_str(), i))
        .collect();

    // 2. A container that was running and vanished from the runtime did terminate, even if
    //    we cannot know how; without this the pod would fall back to Pending. One an in-place
    //    restart removed waits for its next instance, terminated by the restart.
    for c in containers {
        if runtime.latest(&c.name).is_some() {
            continue;
        }
        let Some(o) = old.get(c.name.as_str()) else {
            continue;
        };
        if inputs.restart_in_place == RestartInPlace::Removed && waiting(o).is_none() {
            if let Some(&i) = index.get(c.name.as_str()) {
                let status = &mut statuses[i];
                status.state = Some(waiting_state(
                    Some(RESTARTING_ALL_CONTAINERS.into()),
                    Some(RESTARTING_ALL_CONTAINERS_MESSAGE.into()),
                ));
                status.last_state = Some(terminated_state(ContainerStateTerminated {
                    reason: Some(RESTARTING_ALL_CONTAINERS.into()),
                    message: Some(RESTARTING_ALL_CONTAINERS_MESSAGE.into()),
                    exit_code: 137,
                    ..Default::default()
                }));
                status.restart_count = o.restart_count.saturating_add(1);
                status.container_id = None;
                status.image_id = String::new();
                status.started = None;
                status.ready = false;
            }
            continue;
        }
        if terminated(o).is_some() || running(o).is_none() {
            continue;
        }
        let Some(status) = index.get(c.name.as_str()).map(|&i| &mut statuses[i]) else {
            continue;
        };
        let is_default_waiting =
            waiting(status).and_then(|w| w.reason.as_deref()) == Some(default_reason);
        if !is_default_waiting || last_terminated(status).is_some() {
            continue;
        }
        status.last_state = Some(terminated_state(ContainerStateTerminated {
            reason: Some(CONTAINER_STATUS_UNKNOWN.into()),
            message: Some(
                "The container could not be located when the pod was deleted.  The container used to be Running"
                    .into(),
            ),
            exit_code: 137,
            ..Default::default()
        }));
        if pod.metadata.deletion_timestamp.is_none() {
            status.restart_count += 1;
        }
    }

    // 3. The newest runtime instance gives the state, the one before it the last state.
    let mut seen: HashMap<&str, u8> = HashMap::new();
    for instance in &runtime.containers {
        let Some(&i) = index.get(instance.name.as_str()) else {
            continue;
        };
        let count = seen.entry(instance.name.as_str()).or_insert(0);
        if *count >= 2 {
            continue;
        }
        let mut converted = convert_instance(
            instance,
            old.get(instance.name.as_str()).copied(),
            &containers[i],
            inputs.runtime_name,
            inputs.recursive_read_only,
        );
        if *count == 0 {
            apply_resources(inputs.resize, instance, &mut converted);
            if let Some(o) = old.get(instance.name.as_str()) {
                carry_over(o, instance, &mut converted);
            }
            statuses[i] = converted;
        } else {
            statuses[i].last_state = converted.state;
        }
        *count += 1;
    }

    // 4. A container due to be (re)started shows why its last start failed.
    for (c, status) in containers.iter().zip(statuses.iter_mut()) {
        let latest = runtime.latest(&c.name);
        if kind == ContainerKind::Init {
            if latest.is_some_and(|l| l.state == RuntimeState::Exited && l.exit_code == 0) {
                continue;
            }
            if latest.is_none()
                && any_regular_container_created(pod, runtime)
                && !is_sidecar(c)
                && waiting(status).is_some()
            {
                status.state = Some(terminated_state(ContainerStateTerminated {
                    reason: Some("Completed".into()),
                    message: Some(
                        "Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally"
                            .into(),
                    ),
                    exit_code: 0,
                    ..Default::default()
                }));
                continue;
            }
        }
        if kind == ContainerKind::Ephemeral {
            // Started once: only one that never got an instance waits for a start.
            if latest.is_some() {
                continue;
            }
        } else if !should_container_be_restarted(c, pod, runtime) {
            continue;
        }
        let Some(failure) = inputs.start_failures.get(&c.name) else {
            continue;
        };
        if terminated(status).is_some() {
            status.last_state.clone_from(&status.state);
        }
        status.state = Some(waiting_state(
            Some(failure.reason.clone()),
            non_empty(&failure.message),
        ));
    }

    // 5. Probe results, message limits, order.
    let total = regular_containers(pod).len() + init_containers(pod).len();
    let bytes_per_status = MAX_POD_TERMINATION_MESSAGE_LENGTH / total.max(1);
    for (c, status) in containers.iter().zip(statuses.iter_mut()) {
        if kind == ContainerKind::Ephemeral {
            // No probes, never ready: the kubelet's prober leaves ephemeral statuses alone.
            status.ready = false;
            status.started = None;
        } else {
            apply_probe_results(inputs, kind, c, status);
        }
        truncate_messages(status, bytes_per_status);
    }
    if kind != ContainerKind::Init {
        statuses.sort_by(|a, b| a.name.cmp(&b.name));
    }
    statuses
}

fn any_regular_container_created(pod: &Pod, runtime: &PodRuntime) -> bool {
    regular_containers(pod)
        .iter()
        .any(|c| runtime.latest(&c.name).is_some())
}

/// What the newest instance's status keeps of the status before it when the runtime no
/// longer holds the instance that status described (the kubelet's rule under
/// `RestartAllContainersOnContainerExits`, on in v1.37: an in-place restart removes the old
/// instances): the restart count never goes down, and a terminated state that was shown becomes
/// the last termination. An older instance the runtime still holds overrides the last
/// termination afterwards, as before.
fn carry_over(old: &ContainerStatus, instance: &RuntimeContainer, new: &mut ContainerStatus) {
    new.restart_count = new.restart_count.max(old.restart_count);
    if old.container_id != new.container_id && terminated(old).is_some() {
        new.last_state = old.state.clone();
    } else if let Some(last) = last_terminated(old) {
        new.last_state = Some(terminated_state(last.clone()));
    }
    if running(new).is_some()
        && terminated(old).is_some()
        && old.restart_count >= instance.restart_count
    {
        new.restart_count = old.restart_count.saturating_add(1);
    }
}

/// One runtime instance as an API container status (the kubelet's `convertContainerStatus`).
fn convert_instance(
    instance: &RuntimeContainer,
    old: Option<&ContainerStatus>,
    spec: &Container,
    runtime_name: &str,
    recursive_read_only: bool,
) -> ContainerStatus {
    let container_id = format!("{runtime_name}://{}", instance.id);
    let mut restart_count = instance.restart_count;
    let state = match instance.state {
        RuntimeState::Running => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: instance.started_at.map(api_time),
            }),
            ..Default::default()
        },
        RuntimeState::Created => waiting_state(None, None),
        RuntimeState::Exited => {
            let reason = if !instance.reason.is_empty() {
                instance.reason.clone()
            } else if instance.exit_code == 0 {
                "Completed".to_string()
            } else {
                "Error".to_string()
            };
            terminated_state(ContainerStateTerminated {
                exit_code: instance.exit_code,
                reason: Some(reason),
                message: non_empty(&instance.message),
                started_at: instance.started_at.map(api_time),
                finished_at: instance.finished_at.map(api_time),
                container_id: Some(container_id.clone()),
                signal: None,
            })
        }
        RuntimeState::Unknown => match old {
            Some(o) if running(o).is_some() => {
                // It was running and the runtime lost it: it terminated, we do not know how.
                // "Never ran" and "ran and failed" must stay distinct, or a run-once pod would
                // run twice.
                restart_count = o.restart_count + 1;
                terminated_state(ContainerStateTerminated {
                    reason: Some(CONTAINER_STATUS_UNKNOWN.into()),
                    message: Some(
                        "The container could not be located when the pod was terminated".into(),
                    ),
                    exit_code: 137,
                    ..Default::default()
                })
            }
            _ => waiting_state(None, None),
        },
    };
    ContainerStatus {
        name: instance.name.clone(),
        restart_count,
        image: instance.image.clone(),
        image_id: instance.image_ref.clone(),
        container_id: Some(container_id),
        state: Some(state),
        last_state: Some(ContainerState::default()),
        volume_mounts: volume_mount_statuses(spec, recursive_read_only),
        // InPlacePodVerticalScaling: filled by `apply_resources` from the runtime's report,
        // what nodelet applied and the allocation, never from the spec.
        resources: None,
        allocated_resources: None,
        ..Default::default()
    }
}

/// `containerStatuses[].allocatedResources` (the allocated requests) and `.resources` (the
/// kubelet's `convertContainerStatusResources`): of a running instance, the allocation with the
/// runtime's values (`resources::running`); of one that is not running, the allocation.
fn apply_resources(
    view: Option<&ResizeView>,
    instance: &RuntimeContainer,
    status: &mut ContainerStatus,
) {
    let Some(view) = view else { return };
    let allocated = view.allocated.get(&instance.name);
    status.allocated_resources = allocated
        .and_then(|r| r.requests.clone())
        .filter(|r| !r.is_empty());
    if instance.state != RuntimeState::Running {
        status.resources = Some(allocated.cloned().unwrap_or_default());
        return;
    }
    let applied = view
        .actuated
        .get(&instance.name)
        .filter(|(id, _)| *id == instance.id)
        .map(|(_, r)| r);
    status.resources = Some(super::resources::running(
        allocated,
        instance.resources.as_ref(),
        applied,
    ));
}

/// RecursiveReadOnlyMounts (GA): every mount is reported, a read-only one with its
/// `recursiveReadOnly` as the kubelet resolves it: `Enabled` where the mount asks for it
/// (`Enabled`, or `IfPossible` on a handler that declares recursive read-only mounts) and the
/// mount allows it (read-only, no propagation), else `Disabled` (the kubelet's
/// `resolveRecursiveReadOnly`; a mount it refuses never ran).
fn volume_mount_statuses(
    container: &Container,
    recursive_supported: bool,
) -> Option<Vec<VolumeMountStatus>> {
    let mounts = container.volume_mounts.as_ref()?;
    if mounts.is_empty() {
        return None;
    }
    Some(
        mounts
            .iter()
            .map(|m| {
                let read_only = m.read_only.unwrap_or(false);
                VolumeMountStatus {
                    name: m.name.clone(),
                    mount_path: m.mount_path.clone(),
                    read_only: read_only.then_some(true),
                    recursive_read_only: read_only.then(|| {
                        // The kubelet's errors read as not recursive (such a mount never ran).
                        if crate::podspec::recursive_read_only::resolve(m, recursive_supported)
                            .unwrap_or(false)
                        {
                            "Enabled".to_string()
                        } else {
                            "Disabled".to_string()
                        }
                    }),
                    volume_status: None,
                }
            })
            .collect(),
    )
}

/// The probe manager's `UpdatePodStatus`: `started` and `ready` from probe results, or from the
/// absence of a probe.
fn apply_probe_results(
    inputs: &StatusInputs,
    kind: ContainerKind,
    spec: &Container,
    status: &mut ContainerStatus,
) {
    // Only the newest instance can be running, so its ID is the one probes are keyed by.
    let id = inputs
        .runtime
        .latest(&spec.name)
        .map(|c| c.id.as_str())
        .unwrap_or_default();
    let is_running = running(status).is_some();
    let started = is_running
        && inputs
            .startup
            .get(id)
            .copied()
            .unwrap_or(spec.startup_probe.is_none());
    status.started = Some(started);

    if kind == ContainerKind::Init && !is_sidecar(spec) {
        status.ready = terminated(status).is_some_and(|t| t.exit_code == 0);
        return;
    }
    status.ready = started
        && (inputs.readiness.get(id).copied() == Some(true) || spec.readiness_probe.is_none());
}

fn truncate_messages(status: &mut ContainerStatus, max_bytes: usize) {
    for state in [status.state.as_mut(), status.last_state.as_mut()]
        .into_iter()
        .flatten()
    {
        if let Some(message) = state.terminated.as_mut().and_then(|t| t.message.as_mut()) {
            if message.len() > max_bytes {
                let mut cut = max_bytes;
                while !message.is_char_boundary(cut) {
                    cut -= 1;
                }
                message.truncate(cut);
            }
        }
    }
}

// ---- conditions ----

/// The kubelet's condition types; everything else in `status.conditions` belongs to someone
/// else and is carried over untouched.
fn is_kubelet_condition(type_: &str) -> bool {
    matches!(
        type_,
        POD_SCHEDULED
            | READY
            | INITIALIZED
            | CONTAINERS_READY
            | POD_READY_TO_START_CONTAINERS
            | POD_RESIZE_PENDING
            | POD_RESIZE_IN_PROGRESS
    )
}

fn condition(
    type_: &str,
    status: bool,
    reason: Option<&str>,
    message: Option<String>,
    generation: Option<i64>,
) -> PodCondition {
    PodCondition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.map(str::to_string),
        message,
        observed_generation: generation,
        ..Default::default()
    }
}

fn find<'a>(statuses: &'a [ContainerStatus], name: &str) -> Option<&'a ContainerStatus> {
    statuses.iter().find(|s| s.name == name)
}

/// Go's `fmt.Sprintf("%s", []string{"a", "b"})`.
fn go_list(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

/// `HasAnyRegularContainerStarted`: a regular container is running or has terminated, so the
/// init containers must have completed at some point.
fn any_regular_container_started(pod: &Pod, statuses: &[ContainerStatus]) -> bool {
    regular_containers(pod).iter().any(|c| {
        find(statuses, &c.name).is_some_and(|s| running(s).is_some() || terminated(s).is_some())
    })
}

/// `PodReadyToStartContainers`: true when the kubelet would not need a new sandbox (the newest
/// one is the only ready one, has the right network mode and, unless host-network, an IP).
fn ready_to_start_containers(pod: &Pod, runtime: &PodRuntime) -> bool {
    let Some(newest) = runtime.sandbox() else {
        return false;
    };
    let ready_count = runtime.sandboxes.iter().filter(|s| s.ready).count();
    if ready_count > 1 || !newest.ready {
        return false;
    }
    let host = host_network(pod);
    if newest.host_network != host {
        return false;
    }
    host || !newest.ips.is_empty()
}

fn initialized_condition(
    pod: &Pod,
    statuses: &[ContainerStatus],
    phase: &str,
    generation: Option<i64>,
) -> PodCondition {
    let inits = init_containers(pod);
    if statuses.is_empty() && !inits.is_empty() {
        return condition(
            INITIALIZED,
            false,
            Some(UNKNOWN_CONTAINER_STATUSES),
            None,
            generation,
        );
    }
    let mut unknown = Vec::new();
    let mut incomplete = Vec::new();
    for c in inits {
        match find(statuses, &c.name) {
            None => unknown.push(c.name.as_str()),
            Some(s) => {
                let done = if is_sidecar(c) {
                    s.started == Some(true)
                } else {
                    s.ready
                };
                if !done {
                    incomplete.push(c.name.as_str());
                }
            }
        }
    }
    if Phase::parse(phase) == Some(Phase::Succeeded) && unknown.is_empty() {
        return condition(INITIALIZED, true, Some(POD_COMPLETED), None, generation);
    }
    if any_regular_container_started(pod, statuses) {
        return condition(INITIALIZED, true, None, None, generation);
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!(
            "containers with unknown status: {}",
            go_list(&unknown)
        ));
    }
    if !incomplete.is_empty() {
        messages.push(format!(
            "containers with incomplete status: {}",
            go_list(&incomplete)
        ));
    }
    if messages.is_empty() {
        return condition(INITIALIZED, true, None, None, generation);
    }
    condition(
        INITIALIZED,
        false,
        Some(CONTAINERS_NOT_INITIALIZED),
        Some(messages.join(", ")),
        generation,
    )
}

fn containers_ready_condition(
    pod: &Pod,
    statuses: &[ContainerStatus],
    phase: &str,
    generation: Option<i64>,
) -> PodCondition {
    if statuses.is_empty() {
        return condition(
            CONTAINERS_READY,
            false,
            Some(UNKNOWN_CONTAINER_STATUSES),
            None,
            generation,
        );
    }
    let mut unknown = Vec::new();
    let mut unready = Vec::new();
    let counted = init_containers(pod)
        .iter()
        .filter(|c| is_sidecar(c))
        .chain(regular_containers(pod));
    for c in counted {
        match find(statuses, &c.name) {
            None => unknown.push(c.name.as_str()),
            Some(s) if !s.ready => unready.push(c.name.as_str()),
            Some(_) => {}
        }
    }
    if Phase::parse(phase) == Some(Phase::Succeeded) && unknown.is_empty() {
        return condition(
            CONTAINERS_READY,
            false,
            Some(POD_COMPLETED),
            None,
            generation,
        );
    }
    if Phase::parse(phase) == Some(Phase::Failed) {
        return condition(CONTAINERS_READY, false, Some(POD_FAILED), None, generation);
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!(
            "containers with unknown status: {}",
            go_list(&unknown)
        ));
    }
    if !unready.is_empty() {
        messages.push(format!(
            "containers with unready status: {}",
            go_list(&unready)
        ));
    }
    if messages.is_empty() {
        return condition(CONTAINERS_READY, true, None, None, generation);
    }
    condition(
        CONTAINERS_READY,
        false,
        Some(CONTAINERS_NOT_READY),
        Some(messages.join(", ")),
        generation,
    )
}

fn ready_condition(
    pod: &Pod,
    conditions: &[PodCondition],
    containers_ready: &PodCondition,
    generation: Option<i64>,
) -> PodCondition {
    if containers_ready.status != "True" {
        return PodCondition {
            type_: READY.to_string(),
            ..containers_ready.clone()
        };
    }
    let gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_deref())
        .unwrap_or(&[]);
    let mut messages = Vec::new();
    for gate in gates {
        match conditions.iter().find(|c| c.type_ == gate.condition_type) {
            None => messages.push(format!(
                "corresponding condition of pod readiness gate {:?} does not exist.",
                gate.condition_type
            )),
            Some(c) if c.status != "True" => messages.push(format!(
                "the status of pod readiness gate {:?} is not \"True\", but {}",
                gate.condition_type, c.status
            )),
            Some(_) => {}
        }
    }
    if messages.is_empty() {
        return condition(READY, true, None, None, generation);
    }
    condition(
        READY,
        false,
        Some(READINESS_GATES_NOT_READY),
        Some(messages.join(", ")),
        generation,
    )
}

/// All conditions in the kubelet's order: conditions owned by others (from the source's status,
/// then `DisruptionTarget` and other foreign ones from the previous status), then
/// `PodReadyToStartContainers`, `Initialized`, `Ready`, `ContainersReady`, `PodScheduled`.
/// A kubelet-owned condition whose status did not change keeps its `lastTransitionTime`.
fn pod_conditions(
    inputs: &StatusInputs,
    all: &[ContainerStatus],
    phase: &str,
) -> Vec<PodCondition> {
    let pod = inputs.pod;
    let generation = pod.metadata.generation.filter(|g| *g != 0);
    let mut conditions: Vec<PodCondition> = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| !is_kubelet_condition(&c.type_))
        .cloned()
        .collect();
    for c in inputs
        .previous
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| !is_kubelet_condition(&c.type_))
    {
        match conditions.iter_mut().find(|x| x.type_ == c.type_) {
            // The disruption condition is set once by nodelet itself: its copy wins.
            Some(existing) if c.type_ == DISRUPTION_TARGET => *existing = c.clone(),
            Some(_) => {}
            None => conditions.push(c.clone()),
        }
    }

    if inputs.ready_to_start_condition {
        conditions.push(condition(
            POD_READY_TO_START_CONTAINERS,
            ready_to_start_containers(pod, inputs.runtime),
            None,
            None,
            generation,
        ));
    }
    conditions.push(initialized_condition(pod, all, phase, generation));
    let containers_ready = containers_ready_condition(pod, all, phase, generation);
    let ready = ready_condition(pod, &conditions, &containers_ready, generation);
    conditions.push(ready);
    conditions.push(containers_ready);
    conditions.push(condition(POD_SCHEDULED, true, None, None, generation));
    if let Some(view) = inputs.resize {
        // The kubelet's resize conditions: each carries the generation it was set for.
        if let Some((reason, message, gen)) = &view.pending {
            conditions.push(condition(
                POD_RESIZE_PENDING,
                true,
                Some(reason),
                Some(message.clone()),
                Some(*gen).filter(|g| *g != 0),
            ));
        }
        if let Some((gen, error)) = &view.in_progress {
            conditions.push(condition(
                POD_RESIZE_IN_PROGRESS,
                true,
                error.as_ref().map(|_| crate::podspec::resize::REASON_ERROR),
                error.clone(),
                Some(*gen).filter(|g| *g != 0),
            ));
        }
    }
    if let Some(restarting) = inputs.restart_in_place.condition() {
        conditions.retain(|c| c.type_ != POD_RESTART_IN_PLACE);
        conditions.push(condition(
            POD_RESTART_IN_PLACE,
            restarting,
            None,
            None,
            generation,
        ));
    }

    let old = old_status(inputs)
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[]);
    for c in conditions.iter_mut().filter(|c| {
        is_kubelet_condition(&c.type_)
            || (c.type_ == POD_RESTART_IN_PLACE && inputs.restart_in_place.condition().is_some())
    }) {
        let kept = old
            .iter()
            .find(|o| o.type_ == c.type_ && o.status == c.status)
            .and_then(|o| o.last_transition_time.clone());
        c.last_transition_time = Some(kept.unwrap_or_else(|| api_time(inputs.now)));
    }
    conditions
}

// ---- IPs, QoS ----

fn parse_ip(s: &str) -> Option<IpAddr> {
    s.parse().ok()
}

/// The kubelet's `sortPodIPs`: the first IP of the node's primary family (IPv4 when unknown),
/// then the first of the other family.
pub(super) fn sort_ips(ips: &[String], primary_is_v6: bool) -> Vec<String> {
    let parsed: Vec<IpAddr> = ips.iter().filter_map(|s| parse_ip(s)).collect();
    let first_v6 = parsed.iter().find(|ip| ip.is_ipv6());
    let first_v4 = parsed.iter().find(|ip| ip.is_ipv4());
    let (primary, secondary) = if primary_is_v6 {
        (first_v6, first_v4)
    } else {
        (first_v4, first_v6)
    };
    primary
        .into_iter()
        .chain(secondary)
        .map(IpAddr::to_string)
        .collect()
}

/// `(hostIPs, podIPs)`. Pod IPs come from the newest sandbox while it is ready; while no
/// sandbox of the pod is ready (a terminating or ended pod) the pod keeps the IPs it had, as the
/// kubelet's PLEG keeps them (`getPodIPs`); host-network pods without an IP get the node's.
fn pod_and_host_ips(inputs: &StatusInputs) -> (Vec<String>, Vec<String>) {
    let primary_is_v6 = inputs
        .host_ips
        .first()
        .and_then(|s| parse_ip(s))
        .is_some_and(|ip| ip.is_ipv6());
    let host_ips = sort_ips(inputs.host_ips, primary_is_v6);
    let sandbox_ips = inputs
        .runtime
        .sandbox()
        .filter(|s| s.ready)
        .map(|s| s.ips.as_slice())
        .unwrap_or(&[]);
    let mut pod_ips = sort_ips(sandbox_ips, primary_is_v6);
    if pod_ips.is_empty() && !inputs.runtime.sandboxes.iter().any(|s| s.ready) {
        pod_ips = inputs
            .previous
            .and_then(|p| p.pod_ips.as_ref())
            .into_iter()
            .flatten()
            .map(|ip| ip.ip.clone())
            .collect();
    }
    if host_network(inputs.pod) && pod_ips.is_empty() {
        pod_ips.clone_from(&host_ips);
    }
    (host_ips, pod_ips)
}

// ---- the pod status ----

/// The kubelet's `generateAPIPodStatus` plus the status manager's timestamp rules.
///
/// Phase: `getPhase`, except that a phase of Succeeded/Failed in the previous status or the
/// source's status is never left; reason and message stay with an unchanged phase.
/// `startTime` is set once and never changes.
pub fn generate_pod_status(inputs: &StatusInputs) -> PodStatus {
    let pod = inputs.pod;
    let source_status = pod.status.as_ref();
    let old = old_status(inputs);

    let init_statuses = container_statuses(inputs, ContainerKind::Init);
    let regular_statuses = container_statuses(inputs, ContainerKind::Regular);
    let ephemeral_statuses = container_statuses(inputs, ContainerKind::Ephemeral);
    let all: Vec<ContainerStatus> = init_statuses
        .iter()
        .chain(&regular_statuses)
        .cloned()
        .collect();

    // A regular container in the current (ready) sandbox means init containers have completed.
    let active_sandbox = inputs.runtime.sandbox().filter(|s| s.ready);
    let has_initialized = active_sandbox.is_some_and(|sandbox| {
        inputs.runtime.containers.iter().any(|c| {
            c.sandbox_id == sandbox.id && regular_containers(pod).iter().any(|r| r.name == c.name)
        })
    });
    let mut phase = get_phase_with_initialized(pod, &all, inputs.pod_is_terminal, has_initialized);
    let old_phase = old.and_then(|s| s.phase.as_deref());
    let source_phase = source_status.and_then(|s| s.phase.as_deref());
    if !is_terminal_phase(Some(&phase)) {
        if is_terminal_phase(old_phase) {
            phase = old_phase.unwrap_or_default().to_string();
        } else if is_terminal_phase(source_phase) {
            phase = source_phase.unwrap_or_default().to_string();
        }
    }
    if is_terminal_phase(source_phase) && source_phase != Some(phase.as_str()) {
        phase = source_phase.unwrap_or_default().to_string();
    }

    let (mut reason, mut message) = (None, None);
    if old_phase == Some(phase.as_str()) {
        reason = old
            .and_then(|s| s.reason.clone())
            .filter(|r| !r.is_empty())
            .or_else(|| source_status.and_then(|s| s.reason.clone()));
        message = old
            .and_then(|s| s.message.clone())
            .filter(|m| !m.is_empty())
            .or_else(|| source_status.and_then(|s| s.message.clone()));
    }

    let conditions = pod_conditions(inputs, &all, &phase);
    let (host_ips, pod_ips) = pod_and_host_ips(inputs);
    let qos = source_status
        .and_then(|s| s.qos_class.clone())
        .filter(|q| !q.is_empty())
        .unwrap_or_else(|| crate::podspec::qos::qos_class(pod).as_str().to_string());
    let start_time = inputs
        .previous
        .and_then(|s| s.start_time.clone())
        .or_else(|| source_status.and_then(|s| s.start_time.clone()))
        .unwrap_or_else(|| api_time(inputs.now));

    PodStatus {
        phase: Some(phase),
        reason,
        message,
        conditions: Some(conditions),
        host_ip: host_ips.first().cloned(),
        host_ips: (!host_ips.is_empty()).then(|| {
            host_ips
                .iter()
                .map(|ip| HostIP { ip: ip.clone() })
                .collect()
        }),
        pod_ip: pod_ips.first().cloned(),
        pod_ips: (!pod_ips.is_empty())
            .then(|| pod_ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        qos_class: Some(qos),
        start_time: Some(start_time),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: (!regular_statuses.is_empty()).then_some(regular_statuses),
        ephemeral_container_statuses: (!ephemeral_statuses.is_empty())
            .then_some(ephemeral_statuses),
        observed_generation: pod.metadata.generation.filter(|g| *g != 0),
        ..Default::default()
    }
}
