//! `compute_pod_actions`: what has to happen to bring a pod's runtime state to its spec.
//!
//! A pure function of the desired pod and what the runtime reports, like the kubelet's
//! `computePodActions`: (re)create the sandbox when it is missing, dead, duplicated or lost its IP;
//! run init containers one at a time, starting sidecars (restartable init containers) in their
//! place and keeping them running; start containers that should (re)start per the restart
//! policy; kill containers whose spec changed or whose probes failed; restart the whole pod in
//! place on a `RestartAllContainers` rule; and kill the pod when nothing is left to run.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cri::{ContainerState, PodRuntime, RuntimeContainer};
use crate::podspec::field_support::ephemeral_refusals;
use crate::podspec::restart::restart_all_containers_on_exit;
use crate::podspec::{
    ephemeral_containers, host_network, init_containers, is_sidecar,
    regular_containers as containers, restart_policy as pod_restart_policy,
};
use crate::status::restart::should_container_be_restarted;
use crate::status::StatusMutation;

/// Why a running container is being killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// Its spec (hash) changed; it is restarted whatever the restart policy.
    SpecChanged,
    /// The runtime does not know its state; killed before a restart to avoid two instances.
    UnknownState,
    /// An in-place resize changed a resource whose `resizePolicy` is `RestartContainer`.
    ResizeRestart,
    /// Its liveness probe failed.
    LivenessProbe,
    /// Its startup probe failed.
    StartupProbe,
}

impl KillReason {
    /// Which grace period applies to the kill.
    pub fn stop_reason(self) -> super::grace::StopReason {
        use super::grace::StopReason;
        match self {
            KillReason::LivenessProbe => StopReason::LivenessProbe,
            KillReason::StartupProbe => StopReason::StartupProbe,
            KillReason::SpecChanged | KillReason::UnknownState | KillReason::ResizeRestart => {
                StopReason::Other
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerToKill {
    pub container_id: String,
    pub name: String,
    pub reason: KillReason,
    pub message: String,
}

/// How a pod ends, decided before any container action: when set, nothing else is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodEnd {
    /// The pod fails with this reason and message in its final status (and an event of that
    /// reason), and is terminated through its worker: `activeDeadlineSeconds` has passed
    /// ([`PodFailure::DEADLINE_EXCEEDED`]).
    Fail(PodFailure),
    /// The pod's phase is terminal (Succeeded or Failed): nothing runs again.
    Terminal,
}

/// The reason a pod past its `activeDeadlineSeconds` fails with (the kubelet's).
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// Its message (the kubelet's).
pub const DEADLINE_EXCEEDED_MESSAGE: &str =
    "Pod was active on the node longer than the specified deadline";

/// Why the pod fails: what its final status (phase `Failed`) and its event say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodFailure {
    pub reason: &'static str,
    pub message: &'static str,
}

impl PodFailure {
    /// `activeDeadlineSeconds` has passed (the kubelet's reason and message).
    pub const DEADLINE_EXCEEDED: PodFailure = PodFailure {
        reason: DEADLINE_EXCEEDED,
        message: DEADLINE_EXCEEDED_MESSAGE,
    };

    /// The final status' phase, reason and message, applied once by the pod worker.
    pub fn status_mutation(&self) -> StatusMutation {
        StatusMutation::failed(self.reason, self.message)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodActions {
    /// The pod ends instead of being synced; every other field is empty then.
    pub end: Option<PodEnd>,
    /// Stop every running container and every sandbox of the pod first.
    pub kill_pod: bool,
    /// Create a new sandbox (after `kill_pod`, when both are set).
    pub create_sandbox: bool,
    /// The sandbox to start containers in, when not creating one.
    pub sandbox_id: Option<String>,
    /// Attempt number for the new sandbox.
    pub attempt: u32,
    /// Indices into `spec.initContainers` to start, in spec order: the next regular init
    /// container and/or sidecars to (re)start.
    pub init_containers_to_start: Vec<usize>,
    /// Of `init_containers_to_start`, the ones whose failure to start does not hold back the
    /// containers after them (sidecars). A regular init container that could not start stops
    /// the starts of this sync there: nothing after it may run before it has.
    pub init_failure_continues: Vec<usize>,
    /// A container exited under a `RestartAllContainers` rule (its name): kill every container
    /// at once, keep the sandbox, and start over from the first init container.
    pub restart_all: Option<String>,
    /// Indices into `spec.containers`, in spec order.
    pub containers_to_start: Vec<usize>,
    /// Indices into `spec.ephemeralContainers` to start, in spec order
    /// ([`ephemeral_containers_to_start`]); started before the init and regular containers.
    pub ephemeral_containers_to_start: Vec<usize>,
    pub containers_to_kill: Vec<ContainerToKill>,
    /// Exited container instances that no status needs any more (older than the previous one).
    pub containers_to_remove: Vec<String>,
    /// Old, not-ready sandboxes with nothing left in them worth keeping.
    pub sandboxes_to_remove: Vec<String>,
}

impl PodActions {
    /// True when executing these actions changes nothing.
    pub fn is_empty(&self) -> bool {
        self.end.is_none()
            && !self.kill_pod
            && !self.create_sandbox
            && self.init_containers_to_start.is_empty()
            && self.restart_all.is_none()
            && self.containers_to_start.is_empty()
            && self.ephemeral_containers_to_start.is_empty()
            && self.containers_to_kill.is_empty()
            && self.containers_to_remove.is_empty()
            && self.sandboxes_to_remove.is_empty()
    }
}

pub struct ActionInputs<'a> {
    pub pod: &'a Pod,
    pub runtime: &'a PodRuntime,
    /// The current spec hash of each container by name (init and regular).
    pub spec_hashes: &'a BTreeMap<String, String>,
    /// Running containers whose liveness or startup probe failed, by container ID
    /// (`KillReason::LivenessProbe` or `KillReason::StartupProbe`).
    pub probe_failures: &'a BTreeMap<String, KillReason>,
    /// Startup probe results by container ID (true = succeeded); a sidecar with a startup probe
    /// counts as started only once it is true.
    pub startup: &'a BTreeMap<String, bool>,
    /// What is left of `activeDeadlineSeconds` (`None` without one); zero means it passed.
    pub deadline_remaining: Option<Duration>,
    /// The status just published has a terminal phase.
    pub phase_terminal: bool,
    /// Running containers a resize restarts (`resizePolicy: RestartContainer`), by name.
    pub resize_restarts: &'a std::collections::BTreeSet<String>,
}

/// Whether the pod ends now instead of being synced: a passed deadline fails a pod that is not
/// terminal yet; a terminal pod runs nothing again.
pub fn pod_end(deadline_remaining: Option<Duration>, phase_terminal: bool) -> Option<PodEnd> {
    if phase_terminal {
        Some(PodEnd::Terminal)
    } else if deadline_remaining == Some(Duration::ZERO) {
        Some(PodEnd::Fail(PodFailure::DEADLINE_EXCEEDED))
    } else {
        None
    }
}

/// Why a pod needs a new sandbox (the kubelet's `podSandboxChanged` reasons, which it logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxChange {
    /// The runtime has no sandbox for the pod.
    NoSandbox,
    /// More than one of its sandboxes is ready.
    SeveralReady,
    /// The newest sandbox is not ready.
    NotReady,
    /// The newest sandbox's network mode (host or pod) is not the spec's.
    NetworkModeChanged,
    /// The newest sandbox has no IP although the pod is not on the host network.
    NoIp,
}

impl std::fmt::Display for SandboxChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SandboxChange::NoSandbox => "no sandbox for the pod",
            SandboxChange::SeveralReady => "more than one sandbox is ready",
            SandboxChange::NotReady => "the newest sandbox is not ready",
            SandboxChange::NetworkModeChanged => "the sandbox's network mode is not the spec's",
            SandboxChange::NoIp => "the sandbox has no IP",
        })
    }
}

/// Why the pod needs a new sandbox, if it does: none exists, more than one is ready, the newest
/// is not ready, its network mode is not the spec's, or it has no IP although the pod is not
/// on the host network.
pub fn sandbox_change(pod: &Pod, runtime: &PodRuntime) -> Option<SandboxChange> {
    let Some(newest) = runtime.sandbox() else {
        return Some(SandboxChange::NoSandbox);
    };
    let ready = runtime.sandboxes.iter().filter(|s| s.ready).count();
    if ready > 1 {
        return Some(SandboxChange::SeveralReady);
    }
    if !newest.ready {
        return Some(SandboxChange::NotReady);
    }
    if newest.host_network != host_network(pod) {
        return Some(SandboxChange::NetworkModeChanged);
    }
    if !host_network(pod) && newest.ips.is_empty() {
        return Some(SandboxChange::NoIp);
    }
    None
}

/// Whether the pod needs a new sandbox ([`sandbox_change`]). Returns the next attempt number
/// and the ID of the newest sandbox.
pub fn pod_sandbox_changed(pod: &Pod, runtime: &PodRuntime) -> (bool, u32, Option<String>) {
    let Some(newest) = runtime.sandbox() else {
        return (true, 0, None);
    };
    match sandbox_change(pod, runtime) {
        None => (false, newest.attempt, Some(newest.id.clone())),
        Some(SandboxChange::NetworkModeChanged) => (true, newest.attempt.saturating_add(1), None),
        Some(_) => (
            true,
            newest.attempt.saturating_add(1),
            Some(newest.id.clone()),
        ),
    }
}

fn succeeded(runtime: &PodRuntime, name: &str) -> bool {
    runtime
        .latest(name)
        .is_some_and(|c| c.state == ContainerState::Exited && c.exit_code == 0)
}

/// The kubelet's `isInitContainerFailed`.
fn init_failed(c: &RuntimeContainer) -> bool {
    c.reason.contains("OOMKilled")
        || (c.state == ContainerState::Exited && c.exit_code != 0)
        || c.state == ContainerState::Unknown
}

/// A container exited under a `RestartAllContainers` rule and has not been handled yet (the
/// executor removes every instance when it restarts the pod, so each exit triggers once).
fn restart_all_trigger(pod: &Pod, runtime: &PodRuntime) -> Option<String> {
    init_containers(pod)
        .iter()
        .chain(containers(pod))
        .find_map(|c| {
            let latest = runtime.latest(&c.name)?;
            (latest.state == ContainerState::Exited
                && restart_all_containers_on_exit(c, latest.exit_code))
            .then(|| c.name.clone())
        })
}

fn spec_changed(
    container: &Container,
    running: &RuntimeContainer,
    hashes: &BTreeMap<String, String>,
) -> bool {
    match hashes.get(&container.name) {
        // An instance without a recorded hash was not created by nodelet's current rules;
        // treat it as unchanged rather than restarting it on adoption.
        Some(hash) => !running.hash.is_empty() && running.hash != *hash,
        None => false,
    }
}

/// Exited instances beyond the newest two of each name (the newest is `state`, the next is
/// `lastState`; anything older is history only garbage collection would keep).
fn prunable_containers(runtime: &PodRuntime) -> Vec<String> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for c in &runtime.containers {
        let n = seen.entry(c.name.as_str()).or_default();
        *n += 1;
        if *n > 2 && c.state == ContainerState::Exited {
            out.push(c.id.clone());
        }
    }
    out
}

/// The ephemeral containers to start now (the kubelet's `EphemeralContainersToStart`), as
/// indices into `spec.ephemeralContainers`: only into a running pod (its newest sandbox ready
/// and fit to keep, the pod not being deleted), only those the runtime has no record of by
/// name (an ephemeral container runs once: never restarted after it exits), and not those
/// that set a field nodelet refuses (`field_support::ephemeral_refusals`: they wait with the
/// refusal as their status). They may start before the pod is initialized, as the kubelet's.
pub fn ephemeral_containers_to_start(pod: &Pod, runtime: &PodRuntime) -> Vec<usize> {
    if pod.metadata.deletion_timestamp.is_some() || sandbox_change(pod, runtime).is_some() {
        return Vec::new();
    }
    ephemeral_containers(pod)
        .iter()
        .enumerate()
        .filter(|(_, e)| runtime.latest(&e.name).is_none())
        .filter(|(i, _)| ephemeral_refusals(pod, *i).is_empty())
        .map(|(i, _)| i)
        .collect()
}

/// What to do with the pod now (the kubelet's `computePodActions`), including what the
/// executor does when a start fails (`init_failure_continues`).
pub fn compute_pod_actions(inputs: &ActionInputs<'_>) -> PodActions {
    let mut actions = decide_pod_actions(inputs);
    actions.init_failure_continues = actions
        .init_containers_to_start
        .iter()
        .copied()
        .filter(|i| init_containers(inputs.pod).get(*i).is_some_and(is_sidecar))
        .collect();
    actions
}

fn decide_pod_actions(inputs: &ActionInputs<'_>) -> PodActions {
    if let Some(end) = pod_end(inputs.deadline_remaining, inputs.phase_terminal) {
        return PodActions {
            end: Some(end),
            ..Default::default()
        };
    }
    let pod = inputs.pod;
    let runtime = inputs.runtime;
    let (create_sandbox, attempt, sandbox_id) = pod_sandbox_changed(pod, runtime);
    let mut actions = PodActions {
        kill_pod: create_sandbox,
        create_sandbox,
        sandbox_id: sandbox_id.clone(),
        attempt,
        containers_to_remove: prunable_containers(runtime),
        ..Default::default()
    };
    let newest_sandbox = runtime.sandbox().map(|s| s.id.clone());
    actions.sandboxes_to_remove = runtime
        .sandboxes
        .iter()
        .filter(|s| Some(&s.id) != newest_sandbox.as_ref() && !s.ready)
        .filter(|s| !runtime.containers.iter().any(|c| c.sandbox_id == s.id))
        .map(|s| s.id.clone())
        .collect();

    let restart_on_failure = pod_restart_policy(pod) != "Never";
    if create_sandbox {
        actions.sandbox_id = None;
        // A pod that will not restart anything and already ran its containers does not get a
        // new sandbox just to be killed again.
        if !restart_on_failure && attempt != 0 && !runtime.containers.is_empty() {
            actions.create_sandbox = false;
            return actions;
        }
        let to_start: Vec<usize> = containers(pod)
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                !(pod_restart_policy(pod) == "OnFailure" && succeeded(runtime, &c.name))
            })
            .map(|(i, _)| i)
            .collect();
        // Initialization is done if any regular container was ever created; with nothing left
        // to start there is no reason for a new sandbox.
        let initialized = containers(pod)
            .iter()
            .any(|c| runtime.latest(&c.name).is_some());
        if to_start.is_empty() && initialized {
            actions.create_sandbox = false;
            return actions;
        }
        if !init_containers(pod).is_empty() {
            // A new sandbox re-runs every init container from the first; the old instances
            // are purged so they cannot count as done.
            actions.init_containers_to_start = vec![0];
            for c in init_containers(pod) {
                for instance in runtime.instances(&c.name) {
                    if instance.state != ContainerState::Running
                        && !actions.containers_to_remove.contains(&instance.id)
                    {
                        actions.containers_to_remove.push(instance.id.clone());
                    }
                }
            }
            return actions;
        }
        actions.containers_to_start = to_start;
        return actions;
    }

    if let Some(trigger) = restart_all_trigger(pod, runtime) {
        actions.restart_all = Some(trigger);
        actions.containers_to_remove.clear();
        return actions;
    }
    // Ephemeral containers may start even if initialization is not complete yet.
    actions.ephemeral_containers_to_start = ephemeral_containers_to_start(pod, runtime);

    let initialized = compute_init_container_actions(inputs, &mut actions);
    if actions.kill_pod {
        actions.ephemeral_containers_to_start.clear();
    }
    if actions.kill_pod || !initialized {
        // Initialization failed or is still in progress: regular containers wait.
        return actions;
    }

    let mut keep = 0;
    for (idx, container) in containers(pod).iter().enumerate() {
        let latest = runtime.latest(&container.name);
        match latest {
            Some(c) if c.state == ContainerState::Running => {
                let (reason, message, restart) = if spec_changed(container, c, inputs.spec_hashes) {
                    // A changed spec restarts the container whatever the restart policy.
                    let m = format!("Container {} definition changed", container.name);
                    (KillReason::SpecChanged, m, true)
                } else if inputs.resize_restarts.contains(&container.name) {
                    // As the kubelet: the resize restarts it whatever the restart policy.
                    let m = format!("Container {} resize requires restart", container.name);
                    (KillReason::ResizeRestart, m, true)
                } else if let Some(probe) = inputs.probe_failures.get(&c.id) {
                    let which = if *probe == KillReason::StartupProbe {
                        "startup"
                    } else {
                        "liveness"
                    };
                    let m = format!("Container {} failed {which} probe", container.name);
                    // Restarted if a failure (exit 137) would be restarted.
                    (
                        *probe,
                        m,
                        crate::podspec::restart::container_should_restart(container, pod, 137),
                    )
                } else {
                    keep += 1;
                    continue;
                };
                actions.containers_to_kill.push(ContainerToKill {
                    container_id: c.id.clone(),
                    name: container.name.clone(),
                    reason,
                    message: if restart {
                        format!("{message}, will be restarted")
                    } else {
                        message
                    },
                });
                if restart {
                    actions.containers_to_start.push(idx);
                }
            }
            _ => {
                if should_container_be_restarted(container, pod, runtime) {
                    actions.containers_to_start.push(idx);
                    if let Some(c) = latest.filter(|c| c.state == ContainerState::Unknown) {
                        actions.containers_to_kill.push(ContainerToKill {
                            container_id: c.id.clone(),
                            name: container.name.clone(),
                            reason: KillReason::UnknownState,
                            message: format!(
                                "Container {} is in \"unknown\" state, try killing it before restart",
                                container.name
                            ),
                        });
                    }
                }
            }
        }
    }
    if keep == 0 && actions.containers_to_start.is_empty() {
        actions.kill_pod = true;
        // Sidecars do not keep a pod alive whose regular containers are done for good, nor
        // do ephemeral containers.
        actions.init_containers_to_start.clear();
        actions.ephemeral_containers_to_start.clear();
    }
    actions
}

/// The kubelet's `computeInitContainerActions` (sidecar-aware): walks the init containers from
/// the last one that has a status back to the first, decides which to (re)start, and returns
/// whether the pod has been initialized. Regular init containers run one at a time and must
/// exit 0; a sidecar counts as started once it runs (and its startup probe, if any, succeeded),
/// and is restarted whenever it exits.
fn compute_init_container_actions(inputs: &ActionInputs<'_>, actions: &mut PodActions) -> bool {
    let pod = inputs.pod;
    let runtime = inputs.runtime;
    let inits = init_containers(pod);
    if inits.is_empty() {
        return true;
    }
    // A created or running regular container means initialization happened before.
    let mut initialized = containers(pod).iter().any(|c| {
        runtime
            .latest(&c.name)
            .is_some_and(|s| matches!(s.state, ContainerState::Created | ContainerState::Running))
    });
    let mut previously_initialized = initialized;
    let restart_on_failure = pod_restart_policy(pod) != "Never";
    let mut to_start: Vec<usize> = Vec::new();
    let last = inits.len() - 1;
    let kill = |actions: &mut PodActions, status: &RuntimeContainer, reason, message: String| {
        actions.containers_to_kill.push(ContainerToKill {
            container_id: status.id.clone(),
            name: status.name.clone(),
            reason,
            message,
        });
    };

    for (i, container) in inits.iter().enumerate().rev() {
        let sidecar = is_sidecar(container);
        let Some(status) = runtime.latest(&container.name) else {
            // Initialized before but its status is gone: a sidecar is started again.
            if previously_initialized && sidecar {
                to_start.push(i);
            }
            continue;
        };
        if previously_initialized && !sidecar {
            // After initialization only sidecars are kept running.
            continue;
        }
        match status.state {
            ContainerState::Created => to_start.push(i),
            ContainerState::Running if sidecar => {
                let probe_failure = inputs.probe_failures.get(&status.id).copied();
                if container.startup_probe.is_some() {
                    if probe_failure == Some(KillReason::StartupProbe) {
                        let m = format!("Init container {} failed startup probe", container.name);
                        kill(actions, status, KillReason::StartupProbe, m);
                        to_start.push(i);
                    }
                    if inputs.startup.get(&status.id) != Some(&true) {
                        // Not started yet: the next init container waits.
                        if !previously_initialized {
                            previously_initialized = true;
                        }
                        continue;
                    }
                }
                if i == last {
                    initialized = true;
                } else if !previously_initialized {
                    // Started for the first time: the next init container may go.
                    to_start.push(i + 1);
                }
                if spec_changed(container, status, inputs.spec_hashes) {
                    let m = format!("Init container {} definition changed", container.name);
                    kill(actions, status, KillReason::SpecChanged, m);
                    to_start.push(i);
                } else if inputs.resize_restarts.contains(&container.name) {
                    let m = format!("Init container {} resize requires restart", container.name);
                    kill(actions, status, KillReason::ResizeRestart, m);
                    to_start.push(i);
                } else if probe_failure == Some(KillReason::LivenessProbe) {
                    let m = format!("Init container {} failed liveness probe", container.name);
                    kill(actions, status, KillReason::LivenessProbe, m);
                    to_start.push(i);
                }
            }
            // A regular init container that is running: wait for it to finish.
            ContainerState::Running => {}
            ContainerState::Exited if sidecar => to_start.push(i),
            ContainerState::Exited => {
                if init_failed(status) {
                    // The container's own restartPolicy wins over the pod's (rules are not
                    // evaluated: the exit may not be a failure the rules describe).
                    let restart = match container.restart_policy.as_deref() {
                        Some(policy) => policy != "Never",
                        None => restart_on_failure,
                    };
                    if !restart {
                        actions.kill_pod = true;
                        actions.init_containers_to_start.clear();
                        return false;
                    }
                    to_start.push(i);
                } else if i == last {
                    initialized = true;
                } else {
                    to_start.push(i + 1);
                }
            }
            ContainerState::Unknown => {
                if !sidecar && !restart_on_failure {
                    actions.kill_pod = true;
                    actions.init_containers_to_start.clear();
                    return false;
                }
                let m = format!(
                    "Init container {} is in \"unknown\" state, try killing it before restart",
                    container.name
                );
                kill(actions, status, KillReason::UnknownState, m);
                to_start.push(i);
            }
        }
        if !previously_initialized {
            // Everything before this init container has been initialized.
            previously_initialized = true;
        }
    }
    if !previously_initialized {
        to_start.push(0);
    }
    to_start.reverse();
    to_start.dedup();
    actions.init_containers_to_start = to_start;
    initialized
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::RuntimeSandbox;
    use jiff::Timestamp;
    use k8s_openapi::api::core::v1::PodSpec;

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn pod(policy: &str, names: &[&str], inits: &[&str]) -> Pod {
        let c = |n: &&str| Container {
            name: n.to_string(),
            image: Some("img".into()),
            ..Default::default()
        };
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                containers: names.iter().map(c).collect(),
                init_containers: if inits.is_empty() {
                    None
                } else {
                    Some(inits.iter().map(c).collect())
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sandbox(id: &str, attempt: u32, ready: bool, created: i64) -> RuntimeSandbox {
        RuntimeSandbox {
            id: id.into(),
            attempt,
            ready,
            created_at: ts(created),
            ips: if ready {
                vec!["10.0.0.1".into()]
            } else {
                vec![]
            },
            host_network: false,
        }
    }

    fn ctr(
        name: &str,
        id: &str,
        state: ContainerState,
        exit: i32,
        created: i64,
    ) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            name: name.into(),
            sandbox_id: "s1".into(),
            state,
            created_at: ts(created),
            exit_code: exit,
            image: "img".into(),
            hash: "h".into(),
            ..Default::default()
        }
    }

    fn runtime(sandboxes: Vec<RuntimeSandbox>, containers: Vec<RuntimeContainer>) -> PodRuntime {
        let mut r = PodRuntime {
            uid: "u".into(),
            sandboxes,
            containers,
            ..Default::default()
        };
        r.sort();
        r
    }

    fn hashes(names: &[&str]) -> BTreeMap<String, String> {
        names
            .iter()
            .map(|n| (n.to_string(), "h".to_string()))
            .collect()
    }

    use ContainerState::*;

    /// `pod("Always", ["a"], inits)` with ephemeral containers named `eph` (`refused` ones set
    /// `volumeMounts[].bindMountOptions`, a field nodelet refuses).
    fn debugged(inits: &[&str], eph: &[&str], refused: &[&str]) -> Pod {
        use k8s_openapi::api::core::v1::{EphemeralContainer, VolumeMount};
        let mut p = pod("Always", &["a"], inits);
        let e = |n: &&str| EphemeralContainer {
            name: n.to_string(),
            image: Some("img".into()),
            target_container_name: Some("a".into()),
            volume_mounts: refused.contains(n).then(|| {
                vec![VolumeMount {
                    name: "v".into(),
                    mount_path: "/v".into(),
                    bind_mount_options: Some(vec!["noexec".into()]),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        };
        p.spec.as_mut().unwrap().ephemeral_containers = Some(eph.iter().map(e).collect());
        p
    }

    #[test]
    fn ephemeral_containers_to_start_table() {
        let ready = || vec![sandbox("s1", 0, true, 1)];
        let deleted = {
            let mut p = debugged(&[], &["d1"], &[]);
            p.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts(50)));
            p
        };
        // (case, pod, sandboxes, containers, want)
        type Case<'a> = (
            &'a str,
            Pod,
            Vec<RuntimeSandbox>,
            Vec<RuntimeContainer>,
            Vec<usize>,
        );
        let cases: Vec<Case> = vec![
            (
                "none in the spec",
                debugged(&[], &[], &[]),
                ready(),
                vec![ctr("a", "c1", Running, 0, 2)],
                vec![],
            ),
            (
                "a new one starts",
                debugged(&[], &["d1"], &[]),
                ready(),
                vec![ctr("a", "c1", Running, 0, 2)],
                vec![0],
            ),
            (
                "only the ones never started, in spec order",
                debugged(&[], &["d1", "d2", "d3"], &[]),
                ready(),
                vec![
                    ctr("a", "c1", Running, 0, 2),
                    ctr("d2", "c2", Running, 0, 3),
                ],
                vec![0, 2],
            ),
            (
                "an exited one is never restarted (exit 0 or not)",
                debugged(&[], &["d1", "d2"], &[]),
                ready(),
                vec![
                    ctr("a", "c1", Running, 0, 2),
                    ctr("d1", "c2", Exited, 0, 3),
                    ctr("d2", "c3", Exited, 1, 3),
                ],
                vec![],
            ),
            (
                "no sandbox: nothing",
                debugged(&[], &["d1"], &[]),
                vec![],
                vec![],
                vec![],
            ),
            (
                "sandbox not ready: nothing",
                debugged(&[], &["d1"], &[]),
                vec![sandbox("s1", 0, false, 1)],
                vec![],
                vec![],
            ),
            (
                "the pod is being deleted: nothing",
                deleted,
                ready(),
                vec![ctr("a", "c1", Running, 0, 2)],
                vec![],
            ),
            (
                "a refused field: not started",
                debugged(&[], &["d1", "d2"], &["d1"]),
                ready(),
                vec![ctr("a", "c1", Running, 0, 2)],
                vec![1],
            ),
            (
                "before initialization is done",
                debugged(&["i1"], &["d1"], &[]),
                ready(),
                vec![ctr("i1", "c1", Running, 0, 2)],
                vec![0],
            ),
        ];
        for (case, p, sandboxes, containers, want) in cases {
            let rt = runtime(sandboxes, containers);
            assert_eq!(ephemeral_containers_to_start(&p, &rt), want, "{case}");
            let names: Vec<String> = std::iter::once("a".to_string())
                .chain(init_containers(&p).iter().map(|c| c.name.clone()))
                .collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let actions = compute_pod_actions(&ActionInputs {
                pod: &p,
                runtime: &rt,
                spec_hashes: &hashes(&names),
                probe_failures: &BTreeMap::new(),
                startup: &BTreeMap::new(),
                deadline_remaining: None,
                phase_terminal: false,
                resize_restarts: &Default::default(),
            });
            if !actions.create_sandbox {
                assert_eq!(
                    actions.ephemeral_containers_to_start, want,
                    "{case}: actions"
                );
            } else {
                assert!(
                    actions.ephemeral_containers_to_start.is_empty(),
                    "{case}: a new sandbox first"
                );
            }
        }
    }

    /// A pod whose regular containers are done for good is killed; its ephemeral containers
    /// do not keep it alive, and none is started into it.
    #[test]
    fn ephemeral_containers_do_not_keep_a_finished_pod_alive() {
        let mut p = debugged(&[], &["d1"], &[]);
        p.spec.as_mut().unwrap().restart_policy = Some("Never".into());
        let rt = runtime(
            vec![sandbox("s1", 0, true, 1)],
            vec![ctr("a", "c1", Exited, 0, 2)],
        );
        let actions = compute_pod_actions(&ActionInputs {
            pod: &p,
            runtime: &rt,
            spec_hashes: &hashes(&["a"]),
            probe_failures: &BTreeMap::new(),
            startup: &BTreeMap::new(),
            deadline_remaining: None,
            phase_terminal: false,
            resize_restarts: &Default::default(),
        });
        assert!(actions.kill_pod);
        assert!(actions.ephemeral_containers_to_start.is_empty());
    }

    #[test]
    fn sandbox_change_reasons() {
        let p = pod("Always", &["a"], &[]);
        let mut host = pod("Always", &["a"], &[]);
        host.spec.as_mut().unwrap().host_network = Some(true);
        let no_ip = RuntimeSandbox {
            ips: vec![],
            ..sandbox("s1", 0, true, 1)
        };
        let host_sandbox = RuntimeSandbox {
            ips: vec![],
            host_network: true,
            ..sandbox("s1", 0, true, 1)
        };
        // (name, pod, sandboxes, why a new one, (changed, next attempt))
        type Case<'a> = (
            &'a str,
            &'a Pod,
            Vec<RuntimeSandbox>,
            Option<SandboxChange>,
            (bool, u32),
        );
        let cases: [Case; 7] = [
            (
                "none",
                &p,
                vec![],
                Some(SandboxChange::NoSandbox),
                (true, 0),
            ),
            (
                "ready",
                &p,
                vec![sandbox("s1", 0, true, 1)],
                None,
                (false, 0),
            ),
            (
                "newest not ready",
                &p,
                vec![sandbox("s1", 0, true, 1), sandbox("s2", 1, false, 2)],
                Some(SandboxChange::NotReady),
                (true, 2),
            ),
            (
                "two ready",
                &p,
                vec![sandbox("s1", 0, true, 1), sandbox("s2", 1, true, 2)],
                Some(SandboxChange::SeveralReady),
                (true, 2),
            ),
            (
                "no ip",
                &p,
                vec![no_ip],
                Some(SandboxChange::NoIp),
                (true, 1),
            ),
            (
                "host network needs no ip",
                &host,
                vec![host_sandbox.clone()],
                None,
                (false, 0),
            ),
            (
                "network mode changed",
                &p,
                vec![host_sandbox],
                Some(SandboxChange::NetworkModeChanged),
                (true, 1),
            ),
        ];
        for (name, pod, sandboxes, want, (changed, attempt)) in cases {
            let r = runtime(sandboxes, vec![]);
            assert_eq!(sandbox_change(pod, &r), want, "{name}");
            let (c, a, _) = pod_sandbox_changed(pod, &r);
            assert_eq!((c, a), (changed, attempt), "{name}");
        }
    }

    #[test]
    fn table() {
        struct Case {
            name: &'static str,
            pod: Pod,
            runtime: PodRuntime,
            hashes: BTreeMap<String, String>,
            probes: BTreeMap<String, KillReason>,
            want: PodActions,
        }
        let ready = || vec![sandbox("s1", 0, true, 1)];
        let cases = vec![
            Case {
                name: "new pod: create sandbox, start all",
                pod: pod("Always", &["a", "b"], &[]),
                runtime: runtime(vec![], vec![]),
                hashes: hashes(&["a", "b"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    kill_pod: true,
                    create_sandbox: true,
                    containers_to_start: vec![0, 1],
                    ..Default::default()
                },
            },
            Case {
                name: "all running, nothing to do",
                pod: pod("Always", &["a", "b"], &[]),
                runtime: runtime(
                    ready(),
                    vec![ctr("a", "c1", Running, 0, 2), ctr("b", "c2", Running, 0, 2)],
                ),
                hashes: hashes(&["a", "b"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    sandbox_id: Some("s1".into()),
                    ..Default::default()
                },
            },
            Case {
                name: "Always restarts exit 0",
                pod: pod("Always", &["a"], &[]),
                runtime: runtime(ready(), vec![ctr("a", "c1", Exited, 0, 2)]),
                hashes: hashes(&["a"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    sandbox_id: Some("s1".into()),
                    containers_to_start: vec![0],
                    ..Default::default()
                },
            },
            Case {
                name: "OnFailure does not restart exit 0, kills the pod",
                pod: pod("OnFailure", &["a"], &[]),
                runtime: runtime(ready(), vec![ctr("a", "c1", Exited, 0, 2)]),
                hashes: hashes(&["a"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    kill_pod: true,
                    sandbox_id: Some("s1".into()),
                    ..Default::default()
                },
            },
            Case {
                name: "OnFailure restarts exit 1",
                pod: pod("OnFailure", &["a"], &[]),
                runtime: runtime(ready(), vec![ctr("a", "c1", Exited, 1, 2)]),
                hashes: hashes(&["a"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    sandbox_id: Some("s1".into()),
                    containers_to_start: vec![0],
                    ..Default::default()
                },
            },
            Case {
                name: "Never: one exited, one running: keep",
                pod: pod("Never", &["a", "b"], &[]),
                runtime: runtime(
                    ready(),
                    vec![ctr("a", "c1", Exited, 3, 2), ctr("b", "c2", Running, 0, 2)],
                ),
                hashes: hashes(&["a", "b"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    sandbox_id: Some("s1".into()),
                    ..Default::default()
                },
            },
            Case {
                name: "Never: dead sandbox after containers ran: no new sandbox",
                pod: pod("Never", &["a"], &[]),
                runtime: runtime(
                    vec![sandbox("s1", 0, false, 1)],
                    vec![ctr("a", "c1", Exited, 0, 2)],
                ),
                hashes: hashes(&["a"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    kill_pod: true,
                    attempt: 1,
                    ..Default::default()
                },
            },
            Case {
                name: "dead sandbox under Always: recreate with next attempt, start all",
                pod: pod("Always", &["a"], &[]),
                runtime: runtime(
                    vec![sandbox("s1", 0, false, 1)],
                    vec![ctr("a", "c1", Exited, 137, 2)],
                ),
                hashes: hashes(&["a"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    kill_pod: true,
                    create_sandbox: true,
                    attempt: 1,
                    containers_to_start: vec![0],
                    ..Default::default()
                },
            },
            Case {
                name: "OnFailure with new sandbox skips succeeded containers",
                pod: pod("OnFailure", &["a", "b"], &[]),
                runtime: runtime(
                    vec![sandbox("s1", 0, false, 1)],
                    vec![ctr("a", "c1", Exited, 0, 2), ctr("b", "c2", Exited, 1, 2)],
                ),
                hashes: hashes(&["a", "b"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    kill_pod: true,
                    create_sandbox: true,
                    attempt: 1,
                    containers_to_start: vec![1],
                    ..Default::default()
                },
            },
            Case {
                name: "spec change kills and restarts even under Never",
                pod: pod("Never", &["a"], &[]),
                runtime: runtime(ready(), vec![ctr("a", "c1", Running, 0, 2)]),
                hashes: [("a".to_string(), "new".to_string())].into(),
                probes: BTreeMap::new(),
                want: PodActions {
                    sandbox_id: Some("s1".into()),
                    containers_to_start: vec![0],
                    containers_to_kill: vec![ContainerToKill {
                        container_id: "c1".into(),
                        name: "a".into(),
                        reason: KillReason::SpecChanged,
                        message: "Container a definition changed, will be restarted".into(),
                    }],
                    ..Default::default()
                },
            },
            Case {
                name: "liveness failure: kill and restart under Always",
                pod: pod("Always", &["a"], &[]),
                runtime: runtime(ready(), vec![ctr("a", "c1", Running, 0, 2)]),
                hashes: hashes(&["a"]),
                probes: [("c1".to_string(), KillReason::LivenessProbe)].into(),
                want: PodActions {
                    sandbox_id: Some("s1".into()),
                    containers_to_start: vec![0],
                    containers_to_kill: vec![ContainerToKill {
                        container_id: "c1".into(),
                        name: "a".into(),
                        reason: KillReason::LivenessProbe,
                        message: "Container a failed liveness probe, will be restarted".into(),
                    }],
                    ..Default::default()
                },
            },
            Case {
                name: "startup failure under Never: kill, no restart",
                pod: pod("Never", &["a"], &[]),
                runtime: runtime(ready(), vec![ctr("a", "c1", Running, 0, 2)]),
                hashes: hashes(&["a"]),
                probes: [("c1".to_string(), KillReason::StartupProbe)].into(),
                want: PodActions {
                    kill_pod: true,
                    sandbox_id: Some("s1".into()),
                    containers_to_kill: vec![ContainerToKill {
                        container_id: "c1".into(),
                        name: "a".into(),
                        reason: KillReason::StartupProbe,
                        message: "Container a failed startup probe".into(),
                    }],
                    ..Default::default()
                },
            },
            Case {
                name: "probe failure of an old instance is ignored",
                pod: pod("Always", &["a"], &[]),
                runtime: runtime(ready(), vec![ctr("a", "c2", Running, 0, 2)]),
                hashes: hashes(&["a"]),
                probes: [("c1".to_string(), KillReason::LivenessProbe)].into(),
                want: PodActions {
                    sandbox_id: Some("s1".into()),
                    ..Default::default()
                },
            },
            Case {
                name: "unknown state: kill then start",
                pod: pod("Always", &["a"], &[]),
                runtime: runtime(ready(), vec![ctr("a", "c1", Unknown, 0, 2)]),
                hashes: hashes(&["a"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    sandbox_id: Some("s1".into()),
                    containers_to_start: vec![0],
                    containers_to_kill: vec![ContainerToKill {
                        container_id: "c1".into(),
                        name: "a".into(),
                        reason: KillReason::UnknownState,
                        message:
                            "Container a is in \"unknown\" state, try killing it before restart"
                                .into(),
                    }],
                    ..Default::default()
                },
            },
            Case {
                name: "prunes instances older than the previous one",
                pod: pod("Always", &["a"], &[]),
                runtime: runtime(
                    ready(),
                    vec![
                        ctr("a", "c1", Exited, 1, 2),
                        ctr("a", "c2", Exited, 1, 3),
                        ctr("a", "c3", Running, 0, 4),
                    ],
                ),
                hashes: hashes(&["a"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    sandbox_id: Some("s1".into()),
                    containers_to_remove: vec!["c1".into()],
                    ..Default::default()
                },
            },
            Case {
                name: "two ready sandboxes: recreate",
                pod: pod("Always", &["a"], &[]),
                runtime: runtime(
                    vec![sandbox("s1", 0, true, 1), sandbox("s2", 1, true, 2)],
                    vec![],
                ),
                hashes: hashes(&["a"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    kill_pod: true,
                    create_sandbox: true,
                    attempt: 2,
                    containers_to_start: vec![0],
                    ..Default::default()
                },
            },
            Case {
                name: "old empty dead sandbox is removed",
                pod: pod("Always", &["a"], &[]),
                runtime: runtime(
                    vec![sandbox("s0", 0, false, 1), sandbox("s1", 1, true, 2)],
                    vec![ctr("a", "c1", Running, 0, 3)],
                ),
                hashes: hashes(&["a"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    sandbox_id: Some("s1".into()),
                    attempt: 1,
                    sandboxes_to_remove: vec!["s0".into()],
                    ..Default::default()
                },
            },
            Case {
                name: "init containers: new sandbox starts the first",
                pod: pod("Always", &["a"], &["i1", "i2"]),
                runtime: runtime(vec![], vec![]),
                hashes: hashes(&["a", "i1", "i2"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    kill_pod: true,
                    create_sandbox: true,
                    init_containers_to_start: vec![0],
                    ..Default::default()
                },
            },
            Case {
                name: "init containers: second after first succeeded",
                pod: pod("Always", &["a"], &["i1", "i2"]),
                runtime: runtime(ready(), vec![ctr("i1", "c1", Exited, 0, 2)]),
                hashes: hashes(&["a", "i1", "i2"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    sandbox_id: Some("s1".into()),
                    init_containers_to_start: vec![1],
                    ..Default::default()
                },
            },
            Case {
                name: "init containers: running one is waited for",
                pod: pod("Always", &["a"], &["i1"]),
                runtime: runtime(ready(), vec![ctr("i1", "c1", Running, 0, 2)]),
                hashes: hashes(&["a", "i1"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    sandbox_id: Some("s1".into()),
                    ..Default::default()
                },
            },
            Case {
                name: "init failure under Never kills the pod",
                pod: pod("Never", &["a"], &["i1"]),
                runtime: runtime(ready(), vec![ctr("i1", "c1", Exited, 1, 2)]),
                hashes: hashes(&["a", "i1"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    kill_pod: true,
                    sandbox_id: Some("s1".into()),
                    ..Default::default()
                },
            },
            Case {
                name: "init failure under Always is retried",
                pod: pod("Always", &["a"], &["i1"]),
                runtime: runtime(ready(), vec![ctr("i1", "c1", Exited, 1, 2)]),
                hashes: hashes(&["a", "i1"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    sandbox_id: Some("s1".into()),
                    init_containers_to_start: vec![0],
                    ..Default::default()
                },
            },
            Case {
                name: "initialized: regular containers start together",
                pod: pod("Always", &["a", "b"], &["i1"]),
                runtime: runtime(ready(), vec![ctr("i1", "c1", Exited, 0, 2)]),
                hashes: hashes(&["a", "b", "i1"]),
                probes: BTreeMap::new(),
                want: PodActions {
                    sandbox_id: Some("s1".into()),
                    containers_to_start: vec![0, 1],
                    ..Default::default()
                },
            },
        ];
        for case in cases {
            let got = compute_pod_actions(&ActionInputs {
                pod: &case.pod,
                runtime: &case.runtime,
                spec_hashes: &case.hashes,
                probe_failures: &case.probes,
                startup: &BTreeMap::new(),
                deadline_remaining: None,
                phase_terminal: false,
                resize_restarts: &Default::default(),
            });
            assert_eq!(got, case.want, "case: {}", case.name);
        }
    }

    #[test]
    fn deleted_pod_restarts_nothing() {
        let mut p = pod("Always", &["a"], &[]);
        p.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts(5)));
        let r = runtime(
            vec![sandbox("s1", 0, true, 1)],
            vec![ctr("a", "c1", Exited, 1, 2)],
        );
        let got = compute_pod_actions(&ActionInputs {
            pod: &p,
            runtime: &r,
            spec_hashes: &hashes(&["a"]),
            probe_failures: &BTreeMap::new(),
            startup: &BTreeMap::new(),
            deadline_remaining: None,
            phase_terminal: false,
            resize_restarts: &Default::default(),
        });
        assert!(got.kill_pod);
        assert!(got.containers_to_start.is_empty());
    }
}

#[cfg(test)]
mod sidecar_tests {
    use super::*;
    use crate::cri::RuntimeSandbox;
    use jiff::Timestamp;
    use k8s_openapi::api::core::v1::{
        ContainerRestartRule, ContainerRestartRuleOnExitCodes, PodSpec, Probe,
    };
    use ContainerState::*;

    fn c(name: &str) -> Container {
        Container {
            name: name.into(),
            image: Some("img".into()),
            ..Default::default()
        }
    }

    fn sidecar(name: &str) -> Container {
        Container {
            restart_policy: Some("Always".into()),
            ..c(name)
        }
    }

    /// inits: i1, s1 (sidecar), i2; containers: a.
    fn pod(policy: &str, s1: Container) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                init_containers: Some(vec![c("i1"), s1, c("i2")]),
                containers: vec![c("a")],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ctr(
        name: &str,
        id: &str,
        state: ContainerState,
        exit: i32,
        created: i64,
    ) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            name: name.into(),
            sandbox_id: "s".into(),
            state,
            created_at: Timestamp::from_second(created).unwrap(),
            exit_code: exit,
            image: "img".into(),
            hash: "h".into(),
            ..Default::default()
        }
    }

    fn runtime(containers: Vec<RuntimeContainer>) -> PodRuntime {
        let mut r = PodRuntime {
            uid: "u".into(),
            sandboxes: vec![RuntimeSandbox {
                id: "s".into(),
                attempt: 0,
                ready: true,
                created_at: Timestamp::from_second(1).unwrap(),
                ips: vec!["10.0.0.1".into()],
                host_network: false,
            }],
            containers,
            ..Default::default()
        };
        r.sort();
        r
    }

    fn actions(pod: &Pod, runtime: &PodRuntime, startup: &[(&str, bool)]) -> PodActions {
        let hashes = ["i1", "s1", "i2", "a"]
            .iter()
            .map(|n| (n.to_string(), "h".to_string()))
            .collect();
        let startup = startup.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        compute_pod_actions(&ActionInputs {
            pod,
            runtime,
            spec_hashes: &hashes,
            probe_failures: &BTreeMap::new(),
            startup: &startup,
            deadline_remaining: None,
            phase_terminal: false,
            resize_restarts: &Default::default(),
        })
    }

    fn with_startup_probe(mut s: Container) -> Container {
        s.startup_probe = Some(Probe::default());
        s
    }

    #[test]
    fn table() {
        // (case, pod, instances, startup results, init to start, regular to start, kill pod)
        type Case = (
            &'static str,
            Pod,
            Vec<RuntimeContainer>,
            Vec<(&'static str, bool)>,
            Vec<usize>,
            Vec<usize>,
            bool,
        );
        let cases: Vec<Case> = vec![
            (
                "nothing ran yet: first init",
                pod("Always", sidecar("s1")),
                vec![],
                vec![],
                vec![0],
                vec![],
                false,
            ),
            (
                "i1 running: wait",
                pod("Always", sidecar("s1")),
                vec![ctr("i1", "1", Running, 0, 2)],
                vec![],
                vec![],
                vec![],
                false,
            ),
            (
                "i1 done: start the sidecar",
                pod("Always", sidecar("s1")),
                vec![ctr("i1", "1", Exited, 0, 2)],
                vec![],
                vec![1],
                vec![],
                false,
            ),
            (
                "sidecar running: start i2",
                pod("Always", sidecar("s1")),
                vec![ctr("i1", "1", Exited, 0, 2), ctr("s1", "2", Running, 0, 3)],
                vec![],
                vec![2],
                vec![],
                false,
            ),
            (
                "sidecar with startup probe not started: wait",
                pod("Always", with_startup_probe(sidecar("s1"))),
                vec![ctr("i1", "1", Exited, 0, 2), ctr("s1", "2", Running, 0, 3)],
                vec![("2", false)],
                vec![],
                vec![],
                false,
            ),
            (
                "sidecar startup probe succeeded: start i2",
                pod("Always", with_startup_probe(sidecar("s1"))),
                vec![ctr("i1", "1", Exited, 0, 2), ctr("s1", "2", Running, 0, 3)],
                vec![("2", true)],
                vec![2],
                vec![],
                false,
            ),
            (
                "initialized: regular containers start",
                pod("Always", sidecar("s1")),
                vec![
                    ctr("i1", "1", Exited, 0, 2),
                    ctr("s1", "2", Running, 0, 3),
                    ctr("i2", "3", Exited, 0, 4),
                ],
                vec![],
                vec![],
                vec![0],
                false,
            ),
            (
                "sidecar exited after initialization: restarted, main kept",
                pod("Never", sidecar("s1")),
                vec![
                    ctr("i1", "1", Exited, 0, 2),
                    ctr("s1", "2", Exited, 1, 3),
                    ctr("i2", "3", Exited, 0, 4),
                    ctr("a", "4", Running, 0, 5),
                ],
                vec![],
                vec![1],
                vec![],
                false,
            ),
            (
                "main done for good: sidecars do not keep the pod alive",
                pod("Never", sidecar("s1")),
                vec![
                    ctr("i1", "1", Exited, 0, 2),
                    ctr("s1", "2", Running, 0, 3),
                    ctr("i2", "3", Exited, 0, 4),
                    ctr("a", "4", Exited, 0, 5),
                ],
                vec![],
                vec![],
                vec![],
                true,
            ),
            (
                "init failure under Never fails the pod",
                pod("Never", sidecar("s1")),
                vec![
                    ctr("i1", "1", Exited, 0, 2),
                    ctr("s1", "2", Running, 0, 3),
                    ctr("i2", "3", Exited, 1, 4),
                ],
                vec![],
                vec![],
                vec![],
                true,
            ),
            (
                "init failure under Always (= OnFailure) retries it",
                pod("Always", sidecar("s1")),
                vec![
                    ctr("i1", "1", Exited, 0, 2),
                    ctr("s1", "2", Running, 0, 3),
                    ctr("i2", "3", Exited, 1, 4),
                ],
                vec![],
                vec![2],
                vec![],
                false,
            ),
            (
                "init success under Always is not re-run after a main restart",
                pod("Always", sidecar("s1")),
                vec![
                    ctr("i1", "1", Exited, 0, 2),
                    ctr("s1", "2", Running, 0, 3),
                    ctr("i2", "3", Exited, 0, 4),
                    ctr("a", "4", Exited, 1, 5),
                ],
                vec![],
                vec![],
                vec![0],
                false,
            ),
        ];
        for (name, pod, instances, startup, init, regular, kill) in cases {
            let rt = runtime(instances);
            let got = actions(&pod, &rt, &startup);
            assert_eq!(
                (
                    got.init_containers_to_start.clone(),
                    got.containers_to_start.clone(),
                    got.kill_pod
                ),
                (init, regular, kill),
                "case: {name}: {got:?}"
            );
        }
    }

    #[test]
    fn only_a_sidecars_failed_start_lets_the_next_containers_start() {
        // (case, instances, init to start, of which a failed start does not stop the sync)
        type Case = (&'static str, Vec<RuntimeContainer>, Vec<usize>, Vec<usize>);
        let cases: Vec<Case> = vec![
            ("first init container", vec![], vec![0], vec![]),
            (
                "the sidecar after it",
                vec![ctr("i1", "1", Exited, 0, 2)],
                vec![1],
                vec![1],
            ),
            (
                "the regular init container after a running sidecar",
                vec![ctr("i1", "1", Exited, 0, 2), ctr("s1", "2", Running, 0, 3)],
                vec![2],
                vec![],
            ),
            (
                "a sidecar restarted while the main container runs",
                vec![
                    ctr("i1", "1", Exited, 0, 2),
                    ctr("s1", "2", Exited, 1, 3),
                    ctr("i2", "3", Exited, 0, 4),
                    ctr("a", "4", Running, 0, 5),
                ],
                vec![1],
                vec![1],
            ),
        ];
        for (name, instances, init, continues) in cases {
            let got = actions(&pod("Always", sidecar("s1")), &runtime(instances), &[]);
            assert_eq!(
                (
                    got.init_containers_to_start.clone(),
                    got.init_failure_continues.clone()
                ),
                (init, continues),
                "case: {name}: {got:?}"
            );
        }
    }

    #[test]
    fn a_passed_deadline_fails_the_pod_with_the_kubelets_reason() {
        let end = pod_end(Some(Duration::ZERO), false);
        let Some(PodEnd::Fail(failure)) = end else {
            panic!("a passed deadline must fail the pod: {end:?}");
        };
        let m = failure.status_mutation();
        assert_eq!(m.phase.as_deref(), Some("Failed"));
        assert_eq!(m.reason.as_deref(), Some("DeadlineExceeded"));
        assert_eq!(
            m.message.as_deref(),
            Some("Pod was active on the node longer than the specified deadline")
        );
    }

    #[test]
    fn restart_all_containers_rule_triggers_once_on_its_exit_code() {
        let mut s1 = sidecar("s1");
        s1.restart_policy_rules = Some(vec![ContainerRestartRule {
            action: "RestartAllContainers".into(),
            exit_codes: Some(ContainerRestartRuleOnExitCodes {
                operator: "In".into(),
                values: Some(vec![88]),
            }),
        }]);
        let p = pod("Never", s1);
        let base = vec![
            ctr("i1", "1", Exited, 0, 2),
            ctr("i2", "3", Exited, 0, 4),
            ctr("a", "4", Running, 0, 5),
        ];
        let mut with = base.clone();
        with.push(ctr("s1", "2", Exited, 88, 3));
        let got = actions(&p, &runtime(with), &[]);
        assert_eq!(got.restart_all.as_deref(), Some("s1"));
        let mut other = base;
        other.push(ctr("s1", "2", Exited, 1, 3));
        let got = actions(&p, &runtime(other), &[]);
        assert_eq!(got.restart_all, None, "exit 1 is a plain sidecar restart");
        assert_eq!(got.init_containers_to_start, vec![1]);
    }
}

#[cfg(test)]
mod pod_end_tests {
    use super::*;

    #[test]
    fn pod_end_table() {
        let s = Duration::from_secs;
        // (deadline remaining, phase terminal, expected)
        let cases = [
            (None, false, None),
            (Some(s(5)), false, None),
            (
                Some(Duration::ZERO),
                false,
                Some(PodEnd::Fail(PodFailure::DEADLINE_EXCEEDED)),
            ),
            (Some(Duration::ZERO), true, Some(PodEnd::Terminal)),
            (None, true, Some(PodEnd::Terminal)),
            (Some(s(5)), true, Some(PodEnd::Terminal)),
        ];
        for (deadline, terminal, want) in cases {
            assert_eq!(pod_end(deadline, terminal), want, "{deadline:?} {terminal}");
        }
    }

    #[test]
    fn an_ended_pod_gets_no_other_action() {
        let pod = Pod::default();
        // No sandbox at all: without the end, the actions would create one.
        let runtime = PodRuntime::default();
        let none = BTreeMap::new();
        let hashes = BTreeMap::new();
        for (deadline, terminal, end) in [
            (
                Some(Duration::ZERO),
                false,
                PodEnd::Fail(PodFailure::DEADLINE_EXCEEDED),
            ),
            (None, true, PodEnd::Terminal),
        ] {
            let got = compute_pod_actions(&ActionInputs {
                pod: &pod,
                runtime: &runtime,
                spec_hashes: &hashes,
                probe_failures: &none,
                startup: &BTreeMap::new(),
                deadline_remaining: deadline,
                phase_terminal: terminal,
                resize_restarts: &Default::default(),
            });
            assert_eq!(
                got,
                PodActions {
                    end: Some(end),
                    ..Default::default()
                }
            );
            assert!(!got.is_empty());
        }
    }
}
