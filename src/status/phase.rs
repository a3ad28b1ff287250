//! The pod phase, as the kubelet's `getPhase` computes it (with the ContainerRestartRules
//! feature, on by default since Kubernetes 1.35).

use k8s_openapi::api::core::v1::{
    Container, ContainerStateTerminated, ContainerStatus, Pod, PodStatus,
};

use super::generate::{
    init_containers, is_sidecar, last_terminated, regular_containers, running, terminated, waiting,
    RESTARTING_ALL_CONTAINERS,
};

use crate::podspec::restart::{container_should_restart, restart_all_containers_on_exit};
use crate::podspec::Phase;

/// True for the phases a pod never leaves.
pub fn is_terminal_phase(phase: Option<&str>) -> bool {
    phase.and_then(Phase::parse).is_some_and(Phase::is_terminal)
}

/// The kubelet's rule that a pod reaches a terminal phase only once none of its containers can
/// run (its status manager's `mergePodStatus` with `couldHaveRunningContainers`): `generated`
/// as it is, except that while `containers_may_run` a move into Succeeded or Failed keeps the
/// phase, reason and message of `previous` (Pending when there is none). An init container
/// that fails under `restartPolicy: Never` makes the phase Failed at once, while the sidecars
/// started before it still run until the pod's termination stops them; the phase follows then.
pub fn hold_terminal_phase(
    previous: Option<&PodStatus>,
    mut generated: PodStatus,
    containers_may_run: bool,
) -> PodStatus {
    let previous_phase = previous.and_then(|p| p.phase.as_deref());
    if containers_may_run
        && is_terminal_phase(generated.phase.as_deref())
        && !is_terminal_phase(previous_phase)
    {
        generated.phase = Some(previous_phase.unwrap_or("Pending").to_string());
        generated.reason = previous.and_then(|p| p.reason.clone());
        generated.message = previous.and_then(|p| p.message.clone());
    }
    generated
}

/// The kubelet's `getPhase` for `statuses` (init and regular container statuses together).
///
/// Whether the pod has been initialized before (a regular container has run) is taken from the
/// statuses themselves; [`get_phase_with_initialized`] takes it from the caller, as the kubelet
/// does from the runtime's active sandbox.
pub fn get_phase(pod: &Pod, statuses: &[ContainerStatus], pod_is_terminal: bool) -> String {
    let regular = regular_containers(pod);
    let has_initialized = statuses.iter().any(|s| {
        regular.iter().any(|c| c.name == s.name)
            && (running(s).is_some() || terminated(s).is_some())
    });
    get_phase_with_initialized(pod, statuses, pod_is_terminal, has_initialized)
}

#[derive(Default)]
struct Counts {
    pending_regular_init: usize,
    pending_sidecars: usize,
    failed_init_not_restartable: usize,
    unknown: usize,
    running: usize,
    waiting: usize,
    stopped: usize,
    stopped_not_restartable: usize,
    succeeded: usize,
}

/// [`get_phase`] with `pod_has_initialized` given: true once a regular container of the current
/// sandbox has been created, so sidecars restarting later do not put the pod back to Pending.
///
/// As the kubelet (its TODO #116484), a static pod is never made terminal by its termination:
/// its phase follows its containers and restart policy, so a static pod that comes back under
/// the same UID (its manifest removed and written again) reports Running again, where a
/// terminal phase could never be left.
pub fn get_phase_with_initialized(
    pod: &Pod,
    statuses: &[ContainerStatus],
    pod_is_terminal: bool,
    pod_has_initialized: bool,
) -> String {
    let find = |name: &str| statuses.iter().find(|s| s.name == name);
    // The kubelet's `ContainerShouldRestart` counts a `RestartAllContainers` rule as a restart
    // (its gate is on), and a container an in-place restart ended is started again whatever its
    // policy says: neither makes the pod terminal.
    let restartable = |container: &Container, pod: &Pod, t: &ContainerStateTerminated| {
        container_should_restart(container, pod, t.exit_code)
            || restart_all_containers_on_exit(container, t.exit_code)
            || t.reason.as_deref() == Some(RESTARTING_ALL_CONTAINERS)
    };
    let mut n = Counts::default();

    for container in init_containers(pod).iter().filter(|c| !is_sidecar(c)) {
        let Some(status) = find(&container.name) else {
            n.pending_regular_init += 1;
            continue;
        };
        if running(status).is_some() {
            n.pending_regular_init += 1;
        } else if let Some(t) = terminated(status) {
            if t.exit_code != 0 && !restartable(container, pod, t) {
                n.failed_init_not_restartable += 1;
            }
        } else if waiting(status).is_some() {
            match last_terminated(status) {
                Some(t) => {
                    if t.exit_code != 0 && !restartable(container, pod, t) {
                        n.failed_init_not_restartable += 1;
                    }
                }
                None => n.pending_regular_init += 1,
            }
        } else {
            n.pending_regular_init += 1;
        }
    }

    for container in init_containers(pod).iter().filter(|c| is_sidecar(c)) {
        let Some(status) = find(&container.name) else {
            n.unknown += 1;
            continue;
        };
        if running(status).is_some() {
            if status.started != Some(true) {
                n.pending_sidecars += 1;
            }
            n.running += 1;
        } else if terminated(status).is_some() {
            // A stopped sidecar does not count towards the phase.
        } else if waiting(status).is_some() {
            if last_terminated(status).is_none() {
                n.pending_sidecars += 1;
                n.waiting += 1;
            }
        } else {
            n.pending_sidecars += 1;
            n.unknown += 1;
        }
    }

    for container in regular_containers(pod) {
        let Some(status) = find(&container.name) else {
            n.unknown += 1;
            continue;
        };
        if running(status).is_some() {
            n.running += 1;
        } else if let Some(t) = terminated(status) {
            n.stopped += 1;
            if !restartable(container, pod, t) {
                n.stopped_not_restartable += 1;
            }
            if t.exit_code == 0 {
                n.succeeded += 1;
            }
        } else if waiting(status).is_some() {
            match last_terminated(status) {
                Some(t) => {
                    n.stopped += 1;
                    if !restartable(container, pod, t) {
                        n.stopped_not_restartable += 1;
                    }
                }
                None => n.waiting += 1,
            }
        } else {
            n.unknown += 1;
        }
    }

    let pod_is_terminal = pod_is_terminal && !crate::podspec::qos::is_static_pod(pod);
    phase_from_counts(&n, pod_is_terminal, pod_has_initialized).into()
}

fn phase_from_counts(n: &Counts, pod_is_terminal: bool, pod_has_initialized: bool) -> Phase {
    if n.failed_init_not_restartable > 0 {
        return Phase::Failed;
    }
    if n.pending_regular_init > 0 || (n.pending_sidecars > 0 && !pod_has_initialized) {
        return Phase::Pending;
    }
    if n.waiting > 0 {
        return Phase::Pending;
    }
    if n.running > 0 && n.unknown == 0 {
        return Phase::Running;
    }
    if n.running == 0 && n.stopped > 0 && n.unknown == 0 {
        if pod_is_terminal || n.stopped == n.stopped_not_restartable {
            return if n.stopped == n.succeeded {
                Phase::Succeeded
            } else {
                Phase::Failed
            };
        }
        // At least one container is going to be restarted.
        return Phase::Running;
    }
    Phase::Pending
}

#[cfg(test)]
mod hold_tests {
    use super::*;

    fn status(phase: &str, reason: Option<&str>) -> PodStatus {
        PodStatus {
            phase: Some(phase.to_string()),
            reason: reason.map(str::to_string),
            message: reason.map(|r| format!("{r} message")),
            ..Default::default()
        }
    }

    #[test]
    fn a_terminal_phase_waits_until_no_container_may_run() {
        // (case, previous, generated, containers may run, want phase, want reason)
        type Case = (
            &'static str,
            Option<PodStatus>,
            PodStatus,
            bool,
            &'static str,
            Option<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "init failed, sidecar runs: held",
                Some(status("Pending", None)),
                status("Failed", None),
                true,
                "Pending",
                None,
            ),
            (
                "held with the previous reason",
                Some(status("Running", Some("R"))),
                status("Succeeded", None),
                true,
                "Running",
                Some("R"),
            ),
            (
                "no previous status: Pending",
                None,
                status("Failed", Some("X")),
                true,
                "Pending",
                None,
            ),
            (
                "nothing runs: terminal at once",
                Some(status("Pending", None)),
                status("Failed", None),
                false,
                "Failed",
                None,
            ),
            (
                "already terminal: stays",
                Some(status("Failed", None)),
                status("Failed", Some("E")),
                true,
                "Failed",
                Some("E"),
            ),
            (
                "non-terminal moves freely",
                Some(status("Pending", None)),
                status("Running", None),
                true,
                "Running",
                None,
            ),
        ];
        for (case, previous, generated, may_run, phase, reason) in cases {
            let got = hold_terminal_phase(previous.as_ref(), generated, may_run);
            assert_eq!(got.phase.as_deref(), Some(phase), "{case}");
            assert_eq!(got.reason.as_deref(), reason, "{case}");
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        Container, ContainerRestartRule, ContainerRestartRuleOnExitCodes, ContainerState,
        ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, PodSpec,
    };

    use super::*;

    const PENDING: &str = Phase::Pending.as_str();
    const RUNNING: &str = Phase::Running.as_str();
    const SUCCEEDED: &str = Phase::Succeeded.as_str();
    const FAILED: &str = Phase::Failed.as_str();

    fn container(name: &str) -> Container {
        Container {
            name: name.into(),
            image: Some("img".into()),
            ..Default::default()
        }
    }

    fn sidecar(name: &str) -> Container {
        Container {
            restart_policy: Some("Always".into()),
            ..container(name)
        }
    }

    fn static_pod(mut pod: Pod) -> Pod {
        pod.metadata.annotations = Some(
            [(
                "kubernetes.io/config.source".to_string(),
                "file".to_string(),
            )]
            .into(),
        );
        pod
    }

    fn pod(policy: &str, init: Vec<Container>, regular: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                init_containers: Some(init),
                containers: regular,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn status(name: &str, state: ContainerState, last: ContainerState) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(state),
            last_state: Some(last),
            ..Default::default()
        }
    }

    fn run(name: &str) -> ContainerStatus {
        status(
            name,
            ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            },
            ContainerState::default(),
        )
    }

    fn started(mut s: ContainerStatus, started: bool) -> ContainerStatus {
        s.started = Some(started);
        s
    }

    fn exited(name: &str, code: i32) -> ContainerStatus {
        status(name, term(code), ContainerState::default())
    }

    fn term(code: i32) -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn wait(name: &str) -> ContainerStatus {
        status(
            name,
            ContainerState {
                waiting: Some(ContainerStateWaiting::default()),
                ..Default::default()
            },
            ContainerState::default(),
        )
    }

    /// Waiting to be restarted after exiting with `code`.
    fn crashed(name: &str, code: i32) -> ContainerStatus {
        let mut s = wait(name);
        s.last_state = Some(term(code));
        s
    }

    fn no_state(name: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            ..Default::default()
        }
    }

    /// `restartPolicy: Never` with a `RestartAllContainers` rule on `code`.
    fn restart_all_on(mut c: Container, code: i32) -> Container {
        c.restart_policy = Some("Never".into());
        c.restart_policy_rules = Some(vec![k8s_openapi::api::core::v1::ContainerRestartRule {
            action: "RestartAllContainers".into(),
            exit_codes: Some(
                k8s_openapi::api::core::v1::ContainerRestartRuleOnExitCodes {
                    operator: "In".into(),
                    values: Some(vec![code]),
                },
            ),
        }]);
        c
    }

    #[test]
    fn phase_table() {
        let one = |policy: &str| pod(policy, vec![], vec![container("a")]);
        let two = |policy: &str| pod(policy, vec![], vec![container("a"), container("b")]);
        let with_init = |policy: &str| {
            pod(
                policy,
                vec![container("i1"), container("i2")],
                vec![container("a")],
            )
        };
        let with_sidecar = |policy: &str| pod(policy, vec![sidecar("s")], vec![container("a")]);

        // (name, pod, statuses, pod_is_terminal, expected)
        let cases: Vec<(&str, Pod, Vec<ContainerStatus>, bool, &str)> = vec![
            ("no status yet", one("Always"), vec![], false, PENDING),
            ("waiting", one("Always"), vec![wait("a")], false, PENDING),
            ("running", one("Always"), vec![run("a")], false, RUNNING),
            (
                "one running one unknown",
                two("Always"),
                vec![run("a")],
                false,
                PENDING,
            ),
            (
                "one running one waiting",
                two("Always"),
                vec![run("a"), wait("b")],
                false,
                PENDING,
            ),
            (
                "status without state",
                one("Always"),
                vec![no_state("a")],
                false,
                PENDING,
            ),
            (
                "running and exited always",
                two("Always"),
                vec![run("a"), exited("b", 0)],
                false,
                RUNNING,
            ),
            (
                "exited 0 always restarts",
                one("Always"),
                vec![exited("a", 0)],
                false,
                RUNNING,
            ),
            (
                "exited 1 always restarts",
                one("Always"),
                vec![exited("a", 1)],
                false,
                RUNNING,
            ),
            (
                "crash loop always",
                one("Always"),
                vec![crashed("a", 1)],
                false,
                RUNNING,
            ),
            (
                "exited 0 on failure",
                one("OnFailure"),
                vec![exited("a", 0)],
                false,
                SUCCEEDED,
            ),
            (
                "exited 1 on failure restarts",
                one("OnFailure"),
                vec![exited("a", 1)],
                false,
                RUNNING,
            ),
            (
                "crash loop on failure",
                one("OnFailure"),
                vec![crashed("a", 2)],
                false,
                RUNNING,
            ),
            (
                "exited 0 never",
                one("Never"),
                vec![exited("a", 0)],
                false,
                SUCCEEDED,
            ),
            (
                "exited 1 never",
                one("Never"),
                vec![exited("a", 1)],
                false,
                FAILED,
            ),
            (
                "mixed never",
                two("Never"),
                vec![exited("a", 0), exited("b", 3)],
                false,
                FAILED,
            ),
            (
                "both succeeded never",
                two("Never"),
                vec![exited("a", 0), exited("b", 0)],
                false,
                SUCCEEDED,
            ),
            (
                "terminal pod all succeeded",
                one("Always"),
                vec![exited("a", 0)],
                true,
                SUCCEEDED,
            ),
            (
                "terminal pod one failed",
                two("Always"),
                vec![exited("a", 0), exited("b", 137)],
                true,
                FAILED,
            ),
            (
                "terminal pod waiting after crash",
                one("Always"),
                vec![crashed("a", 1)],
                true,
                FAILED,
            ),
            (
                "terminal but still running",
                one("Always"),
                vec![run("a")],
                true,
                RUNNING,
            ),
            // Init containers.
            (
                "init not started",
                with_init("Always"),
                vec![],
                false,
                PENDING,
            ),
            (
                "init running",
                with_init("Always"),
                vec![run("i1")],
                false,
                PENDING,
            ),
            (
                "first init done",
                with_init("Always"),
                vec![exited("i1", 0), wait("i2")],
                false,
                PENDING,
            ),
            (
                "init failed always retries",
                with_init("Always"),
                vec![exited("i1", 1)],
                false,
                PENDING,
            ),
            (
                "init crash loop on failure",
                with_init("OnFailure"),
                vec![crashed("i1", 1)],
                false,
                PENDING,
            ),
            (
                "init failed never",
                with_init("Never"),
                vec![exited("i1", 1), wait("a")],
                false,
                FAILED,
            ),
            (
                "init failed never under a RestartAllContainers rule",
                pod(
                    "Never",
                    vec![restart_all_on(container("i1"), 42)],
                    vec![container("a")],
                ),
                vec![exited("i1", 42), wait("a")],
                false,
                PENDING,
            ),
            (
                "main failed never under a RestartAllContainers rule",
                pod("Never", vec![], vec![restart_all_on(container("a"), 42)]),
                vec![exited("a", 42)],
                false,
                RUNNING,
            ),
            (
                "init crashed never",
                with_init("Never"),
                vec![crashed("i1", 1)],
                false,
                FAILED,
            ),
            (
                "inits done main running",
                with_init("Always"),
                vec![exited("i1", 0), exited("i2", 0), run("a")],
                false,
                RUNNING,
            ),
            (
                "inits done main waiting",
                with_init("Always"),
                vec![exited("i1", 0), exited("i2", 0), wait("a")],
                false,
                PENDING,
            ),
            // Sidecars.
            (
                "sidecar not created",
                with_sidecar("Always"),
                vec![],
                false,
                PENDING,
            ),
            (
                "sidecar waiting",
                with_sidecar("Always"),
                vec![wait("s")],
                false,
                PENDING,
            ),
            (
                "sidecar running not started",
                with_sidecar("Always"),
                vec![started(run("s"), false), wait("a")],
                false,
                PENDING,
            ),
            (
                "sidecar started main running",
                with_sidecar("Always"),
                vec![started(run("s"), true), run("a")],
                false,
                RUNNING,
            ),
            (
                "sidecar running, main done, never",
                with_sidecar("Never"),
                vec![started(run("s"), true), exited("a", 0)],
                false,
                RUNNING,
            ),
            (
                "sidecar stopped, main done, never",
                with_sidecar("Never"),
                vec![exited("s", 137), exited("a", 0)],
                false,
                SUCCEEDED,
            ),
            (
                "sidecar crashed, main failed, never",
                with_sidecar("Never"),
                vec![crashed("s", 1), exited("a", 1)],
                false,
                FAILED,
            ),
            (
                "sidecar status without state",
                with_sidecar("Always"),
                vec![no_state("s"), run("a")],
                false,
                PENDING,
            ),
            (
                "terminated, always",
                one("Always"),
                vec![exited("a", 0)],
                true,
                SUCCEEDED,
            ),
            (
                "terminated static pod, always: not terminal (the kubelet's TODO #116484)",
                static_pod(one("Always")),
                vec![exited("a", 137)],
                true,
                RUNNING,
            ),
            (
                "terminated static pod, never: its containers decide",
                static_pod(one("Never")),
                vec![exited("a", 1)],
                true,
                FAILED,
            ),
        ];
        for (name, pod, statuses, terminal, expected) in cases {
            assert_eq!(get_phase(&pod, &statuses, terminal), expected, "{name}");
        }
    }

    #[test]
    fn restarting_sidecar_keeps_initialized_pod_running() {
        let p = pod("Always", vec![sidecar("s")], vec![container("a")]);
        let statuses = vec![started(run("s"), false), run("a")];
        // (pod_has_initialized, expected)
        let cases = [(true, RUNNING), (false, PENDING)];
        for (initialized, expected) in cases {
            assert_eq!(
                get_phase_with_initialized(&p, &statuses, false, initialized),
                expected,
                "initialized={initialized}"
            );
        }
    }

    #[test]
    fn container_should_restart_table() {
        let rules = |op: &str, codes: Vec<i32>| {
            Some(vec![ContainerRestartRule {
                action: "Restart".into(),
                exit_codes: Some(ContainerRestartRuleOnExitCodes {
                    operator: op.into(),
                    values: Some(codes),
                }),
            }])
        };
        let with = |policy: Option<&str>, r| Container {
            restart_policy: policy.map(str::to_string),
            restart_policy_rules: r,
            ..container("c")
        };
        let no_policy_pod = Pod {
            spec: Some(PodSpec::default()),
            ..Default::default()
        };
        // (name, container, pod, exit code, expected)
        let cases: Vec<(&str, Container, Pod, i32, bool)> = vec![
            (
                "pod default is Always",
                container("c"),
                no_policy_pod,
                0,
                true,
            ),
            ("pod Always", container("c"), one("Always"), 0, true),
            (
                "pod OnFailure exit 0",
                container("c"),
                one("OnFailure"),
                0,
                false,
            ),
            (
                "pod OnFailure exit 1",
                container("c"),
                one("OnFailure"),
                1,
                true,
            ),
            ("pod Never", container("c"), one("Never"), 1, false),
            (
                "container Always beats pod Never",
                with(Some("Always"), None),
                one("Never"),
                0,
                true,
            ),
            (
                "container Never beats pod Always",
                with(Some("Never"), None),
                one("Always"),
                1,
                false,
            ),
            (
                "container OnFailure exit 0",
                with(Some("OnFailure"), None),
                one("Always"),
                0,
                false,
            ),
            (
                "rule In matches",
                with(Some("Never"), rules("In", vec![42])),
                one("Never"),
                42,
                true,
            ),
            (
                "rule In misses",
                with(Some("Never"), rules("In", vec![42])),
                one("Never"),
                1,
                false,
            ),
            (
                "rule NotIn matches",
                with(Some("Never"), rules("NotIn", vec![0])),
                one("Never"),
                3,
                true,
            ),
            (
                "rule NotIn misses",
                with(Some("Never"), rules("NotIn", vec![0])),
                one("Never"),
                0,
                false,
            ),
        ];
        fn one(policy: &str) -> Pod {
            pod(policy, vec![], vec![container("c")])
        }
        for (name, c, p, code, expected) in cases {
            assert_eq!(container_should_restart(&c, &p, code), expected, "{name}");
        }
    }

    #[test]
    fn terminal_phases() {
        let cases = [
            (Some("Succeeded"), true),
            (Some("Failed"), true),
            (Some("Running"), false),
            (Some("Pending"), false),
            (None, false),
        ];
        for (phase, expected) in cases {
            assert_eq!(is_terminal_phase(phase), expected, "{phase:?}");
        }
    }
}
