//! `compute_pod_actions`: what has to happen to bring a pod's runtime state to its spec.
//!
//! A pure function of the desired pod and what the runtime reports, like the kubelet's
//! `computePodActions`: (re)create the sandbox when it is missing, dead, duplicated or lost its IP;
//! run init containers one at a time; start containers that should (re)start per the restart
//! policy; kill containers whose spec changed; and kill the whole pod when nothing is left to run.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::restart::should_container_be_restarted;
use crate::cri::{ContainerState, PodRuntime, RuntimeContainer};
use crate::podspec::{
    host_network, init_containers, regular_containers as containers,
    restart_policy as pod_restart_policy,
};

/// Why a running container is being killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// Its spec (hash) changed; it is restarted whatever the restart policy.
    SpecChanged,
    /// The runtime does not know its state; killed before a restart to avoid two instances.
    UnknownState,
    /// Its liveness probe failed.
    LivenessProbe,
    /// Its startup probe failed.
    StartupProbe,
}

impl KillReason {
    /// Which grace period applies to the kill.
    pub fn stop_reason(self) -> super::kill::StopReason {
        use super::kill::StopReason;
        match self {
            KillReason::LivenessProbe => StopReason::LivenessProbe,
            KillReason::StartupProbe => StopReason::StartupProbe,
            KillReason::SpecChanged | KillReason::UnknownState => StopReason::Other,
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

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodActions {
    /// Stop every running container and every sandbox of the pod first.
    pub kill_pod: bool,
    /// Create a new sandbox (after `kill_pod`, when both are set).
    pub create_sandbox: bool,
    /// The sandbox to start containers in, when not creating one.
    pub sandbox_id: Option<String>,
    /// Attempt number for the new sandbox.
    pub attempt: u32,
    /// Index into `spec.initContainers` of the init container to start next.
    pub next_init_container: Option<usize>,
    /// Indices into `spec.containers`, in spec order.
    pub containers_to_start: Vec<usize>,
    pub containers_to_kill: Vec<ContainerToKill>,
    /// Exited container instances that no status needs any more (older than the previous one).
    pub containers_to_remove: Vec<String>,
    /// Old, not-ready sandboxes with nothing left in them worth keeping.
    pub sandboxes_to_remove: Vec<String>,
}

impl PodActions {
    /// True when executing these actions changes nothing.
    pub fn is_empty(&self) -> bool {
        !self.kill_pod
            && !self.create_sandbox
            && self.next_init_container.is_none()
            && self.containers_to_start.is_empty()
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
}

/// Whether the pod needs a new sandbox: none exists, more than one is ready, the newest is not
/// ready, or it has no IP although the pod is not on the host network. Returns the next attempt
/// number and the ID of the newest sandbox.
pub fn pod_sandbox_changed(pod: &Pod, runtime: &PodRuntime) -> (bool, u32, Option<String>) {
    let Some(newest) = runtime.sandbox() else {
        return (true, 0, None);
    };
    let ready = runtime.sandboxes.iter().filter(|s| s.ready).count();
    let next = newest.attempt + 1;
    if ready > 1 || !newest.ready {
        return (true, next, Some(newest.id.clone()));
    }
    if newest.host_network != host_network(pod) {
        return (true, next, None);
    }
    if !host_network(pod) && newest.ips.is_empty() {
        return (true, next, Some(newest.id.clone()));
    }
    (false, newest.attempt, Some(newest.id.clone()))
}

fn succeeded(runtime: &PodRuntime, name: &str) -> bool {
    runtime
        .latest(name)
        .is_some_and(|c| c.state == ContainerState::Exited && c.exit_code == 0)
}

/// Init containers that are done: the newest instance exited 0.
fn init_done(runtime: &PodRuntime, name: &str) -> bool {
    succeeded(runtime, name)
}

/// The classic init container walk: the first init container that has not succeeded, whether
/// the last attempt failed, and whether initialization is complete.
fn next_init_container<'a>(
    pod: &'a Pod,
    runtime: &'a PodRuntime,
) -> (
    Option<(usize, &'a Container)>,
    Option<&'a RuntimeContainer>,
    bool,
) {
    let inits = init_containers(pod);
    for (idx, c) in inits.iter().enumerate() {
        if init_done(runtime, &c.name) {
            continue;
        }
        return (Some((idx, c)), runtime.latest(&c.name), false);
    }
    (None, None, true)
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

pub fn compute_pod_actions(inputs: &ActionInputs<'_>) -> PodActions {
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
        if to_start.is_empty() && next_init_container(pod, runtime).2 {
            actions.create_sandbox = false;
            return actions;
        }
        if !init_containers(pod).is_empty() {
            // A new sandbox re-runs every init container from the first.
            actions.next_init_container = Some(0);
            return actions;
        }
        actions.containers_to_start = to_start;
        return actions;
    }

    // Initialization: one init container at a time, each must exit 0 before the next.
    let (next, last, done) = next_init_container(pod, runtime);
    if !done {
        if let Some((idx, container)) = next {
            let failed =
                last.is_some_and(|l| l.state == ContainerState::Exited && l.exit_code != 0);
            if failed && !restart_on_failure {
                actions.kill_pod = true;
                return actions;
            }
            match last.map(|l| l.state) {
                Some(ContainerState::Running) | Some(ContainerState::Created) => {}
                Some(ContainerState::Unknown) => {
                    let l = last.expect("matched Some");
                    actions.containers_to_kill.push(ContainerToKill {
                        container_id: l.id.clone(),
                        name: container.name.clone(),
                        reason: KillReason::UnknownState,
                        message: format!(
                            "Init container {} is in \"unknown\" state, try killing it before restart",
                            container.name
                        ),
                    });
                    actions.next_init_container = Some(idx);
                }
                _ => actions.next_init_container = Some(idx),
            }
        }
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
                        super::restart::container_should_restart(container, pod, 137),
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
    }
    actions
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
            attempt: 0,
            created_at: ts(created),
            started_at: None,
            finished_at: None,
            exit_code: exit,
            reason: String::new(),
            message: String::new(),
            image: "img".into(),
            image_ref: String::new(),
            hash: "h".into(),
            restart_count: 0,
            labels: Default::default(),
            annotations: Default::default(),
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
                    next_init_container: Some(0),
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
                    next_init_container: Some(1),
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
                    next_init_container: Some(0),
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
        });
        assert!(got.kill_pod);
        assert!(got.containers_to_start.is_empty());
    }
}
