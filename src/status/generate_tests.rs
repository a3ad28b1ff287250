//! Table tests for status generation (container statuses, conditions, the pod status).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStatus, Pod, PodCondition, PodIP, PodReadinessGate,
    PodSpec, PodStatus, Probe, ResourceRequirements, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::generate::sort_ips;
use super::{container_statuses, generate_pod_status, RestartInPlace, StartFailure, StatusInputs};
use crate::cri::{ContainerState as RS, PodRuntime, RuntimeContainer, RuntimeSandbox};
use crate::podspec::qos::qos_class;
use crate::podspec::ContainerKind;

const NOW: i64 = 2_000_000;

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap()
}

fn time(secs: i64) -> Time {
    Time(ts(secs))
}

// ---- builders ----

fn c(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some(format!("{name}:spec")),
        ..Default::default()
    }
}

fn sidecar(name: &str) -> Container {
    Container {
        restart_policy: Some("Always".into()),
        ..c(name)
    }
}

fn probe() -> Option<Probe> {
    Some(Probe::default())
}

fn with_readiness(mut container: Container) -> Container {
    container.readiness_probe = probe();
    container
}

fn with_startup(mut container: Container) -> Container {
    container.startup_probe = probe();
    container
}

fn pod(policy: &str, init: Vec<Container>, containers: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("default".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(policy.into()),
            init_containers: (!init.is_empty()).then_some(init),
            containers,
            ..Default::default()
        }),
        status: None,
    }
}

fn deleting(mut p: Pod) -> Pod {
    p.metadata.deletion_timestamp = Some(time(NOW));
    p
}

/// A runtime instance created at `created` (seconds), started a second later.
fn rc(
    name: &str,
    id: &str,
    created: i64,
    state: RS,
    exit: i32,
    reason: &str,
    restarts: i32,
) -> RuntimeContainer {
    RuntimeContainer {
        id: id.into(),
        name: name.into(),
        sandbox_id: "sb1".into(),
        state,
        attempt: u32::try_from(restarts).unwrap(),
        created_at: ts(created),
        started_at: (state != RS::Created).then(|| ts(created + 1)),
        finished_at: (state == RS::Exited).then(|| ts(created + 5)),
        exit_code: exit,
        reason: reason.into(),
        message: String::new(),
        image: format!("docker.io/library/{name}:1"),
        image_ref: format!("sha256:{name}"),
        hash: String::new(),
        restart_count: restarts,
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        log_path: String::new(),
        termination_message_file: None,
        resources: None,
    }
}

fn running(name: &str, id: &str, created: i64, restarts: i32) -> RuntimeContainer {
    rc(name, id, created, RS::Running, 0, "", restarts)
}

fn exited(
    name: &str,
    id: &str,
    created: i64,
    code: i32,
    reason: &str,
    restarts: i32,
) -> RuntimeContainer {
    rc(name, id, created, RS::Exited, code, reason, restarts)
}

fn sandbox(
    id: &str,
    created: i64,
    ready: bool,
    ips: &[&str],
    host_network: bool,
) -> RuntimeSandbox {
    RuntimeSandbox {
        id: id.into(),
        attempt: 0,
        ready,
        created_at: ts(created),
        ips: ips.iter().map(|s| s.to_string()).collect(),
        host_network,
    }
}

fn runtime(sandboxes: Vec<RuntimeSandbox>, mut containers: Vec<RuntimeContainer>) -> PodRuntime {
    containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    PodRuntime {
        uid: "uid-1".into(),
        sandboxes,
        containers,
        ..Default::default()
    }
}

fn ready_sandbox() -> Vec<RuntimeSandbox> {
    vec![sandbox("sb1", 100, true, &["10.1.0.5"], false)]
}

struct Fixture {
    pod: Pod,
    runtime: PodRuntime,
    previous: Option<PodStatus>,
    failures: BTreeMap<String, StartFailure>,
    readiness: BTreeMap<String, bool>,
    startup: BTreeMap<String, bool>,
    host_ips: Vec<String>,
    terminal: bool,
    restart_in_place: RestartInPlace,
    ready_to_start_condition: bool,
    recursive_read_only: bool,
    resize: Option<crate::status::ResizeView>,
}

impl Fixture {
    fn new(pod: Pod, runtime: PodRuntime) -> Self {
        Fixture {
            pod,
            runtime,
            previous: None,
            failures: BTreeMap::new(),
            readiness: BTreeMap::new(),
            startup: BTreeMap::new(),
            host_ips: vec!["192.168.1.10".into()],
            terminal: false,
            restart_in_place: RestartInPlace::Never,
            ready_to_start_condition: true,
            recursive_read_only: false,
            resize: None,
        }
    }

    fn failure(mut self, name: &str, reason: &str, message: &str) -> Self {
        self.failures.insert(
            name.into(),
            StartFailure {
                reason: reason.into(),
                message: message.into(),
            },
        );
        self
    }

    fn previous(mut self, status: PodStatus) -> Self {
        self.previous = Some(status);
        self
    }

    fn readiness(mut self, id: &str, ok: bool) -> Self {
        self.readiness.insert(id.into(), ok);
        self
    }

    fn startup(mut self, id: &str, ok: bool) -> Self {
        self.startup.insert(id.into(), ok);
        self
    }

    fn inputs(&self) -> StatusInputs<'_> {
        StatusInputs {
            pod: &self.pod,
            runtime: &self.runtime,
            previous: self.previous.as_ref(),
            start_failures: &self.failures,
            readiness: &self.readiness,
            startup: &self.startup,
            host_ips: &self.host_ips,
            pod_is_terminal: self.terminal,
            now: Timestamp::from_nanosecond(i128::from(NOW) * 1_000_000_000 + 700_000_000).unwrap(),
            runtime_name: "containerd",
            restart_in_place: self.restart_in_place,
            ready_to_start_condition: self.ready_to_start_condition,
            resize: self.resize.as_ref(),
            recursive_read_only: self.recursive_read_only,
        }
    }

    fn statuses(&self, kind: ContainerKind) -> Vec<ContainerStatus> {
        container_statuses(&self.inputs(), kind)
    }

    fn status(&self) -> PodStatus {
        generate_pod_status(&self.inputs())
    }
}

// ---- summaries (so tables stay readable and still check every field that matters) ----

fn state_str(state: Option<&ContainerState>) -> String {
    let Some(s) = state else {
        return "none".into();
    };
    if s.running.is_some() {
        "running".into()
    } else if let Some(t) = &s.terminated {
        format!(
            "terminated({},{})",
            t.exit_code,
            t.reason.as_deref().unwrap_or("")
        )
    } else if let Some(w) = &s.waiting {
        format!("waiting({})", w.reason.as_deref().unwrap_or(""))
    } else {
        "-".into()
    }
}

fn describe(s: &ContainerStatus) -> String {
    format!(
        "{} last={} restarts={} ready={} started={}",
        state_str(s.state.as_ref()),
        state_str(s.last_state.as_ref()),
        s.restart_count,
        s.ready,
        s.started.unwrap_or(false)
    )
}

fn running_status(name: &str, restarts: i32) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        restart_count: restarts,
        state: Some(ContainerState {
            running: Some(Default::default()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn terminated_status(name: &str, code: i32, reason: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            terminated: Some(k8s_openapi::api::core::v1::ContainerStateTerminated {
                exit_code: code,
                reason: Some(reason.into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        last_state: Some(ContainerState::default()),
        ..Default::default()
    }
}

fn previous_with(statuses: Vec<ContainerStatus>) -> PodStatus {
    PodStatus {
        container_statuses: Some(statuses),
        ..Default::default()
    }
}

// ---- container statuses ----

#[test]
fn regular_container_status_table() {
    let one = |policy: &str, container: Container| pod(policy, vec![], vec![container]);
    let a = || c("a");
    // (name, fixture, expected summary of container "a")
    let cases: Vec<(&str, Fixture, &str)> = vec![
        (
            "never started",
            Fixture::new(one("Always", a()), runtime(vec![], vec![])),
            "waiting(ContainerCreating) last=- restarts=0 ready=false started=false",
        ),
        (
            "pod with init containers waits for them",
            Fixture::new(pod("Always", vec![c("i")], vec![a()]), runtime(vec![], vec![])),
            "waiting(PodInitializing) last=- restarts=0 ready=false started=false",
        ),
        (
            "running, no probes",
            Fixture::new(one("Always", a()), runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)])),
            "running last=- restarts=0 ready=true started=true",
        ),
        (
            "running, readiness probe not run yet",
            Fixture::new(
                one("Always", with_readiness(a())),
                runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)]),
            ),
            "running last=- restarts=0 ready=false started=true",
        ),
        (
            "running, readiness probe succeeded",
            Fixture::new(
                one("Always", with_readiness(a())),
                runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)]),
            )
            .readiness("c1", true),
            "running last=- restarts=0 ready=true started=true",
        ),
        (
            "running, readiness probe failed",
            Fixture::new(
                one("Always", with_readiness(a())),
                runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)]),
            )
            .readiness("c1", false),
            "running last=- restarts=0 ready=false started=true",
        ),
        (
            "readiness result of an older instance does not count",
            Fixture::new(
                one("Always", with_readiness(a())),
                runtime(ready_sandbox(), vec![running("a", "c2", 300, 1), exited("a", "c1", 200, 1, "Error", 0)]),
            )
            .readiness("c1", true),
            "running last=terminated(1,Error) restarts=1 ready=false started=true",
        ),
        (
            "running, startup probe not passed",
            Fixture::new(
                one("Always", with_startup(a())),
                runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)]),
            ),
            "running last=- restarts=0 ready=false started=false",
        ),
        (
            "running, startup probe passed",
            Fixture::new(
                one("Always", with_startup(a())),
                runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)]),
            )
            .startup("c1", true),
            "running last=- restarts=0 ready=true started=true",
        ),
        (
            "created, not started",
            Fixture::new(one("Always", a()), runtime(ready_sandbox(), vec![rc("a", "c1", 200, RS::Created, 0, "", 0)])),
            "waiting() last=- restarts=0 ready=false started=false",
        ),
        (
            "exited 0, runtime gave no reason",
            Fixture::new(one("Never", a()), runtime(ready_sandbox(), vec![exited("a", "c1", 200, 0, "", 0)])),
            "terminated(0,Completed) last=- restarts=0 ready=false started=false",
        ),
        (
            "exited 3, runtime gave no reason",
            Fixture::new(one("Never", a()), runtime(ready_sandbox(), vec![exited("a", "c1", 200, 3, "", 0)])),
            "terminated(3,Error) last=- restarts=0 ready=false started=false",
        ),
        (
            "oom killed",
            Fixture::new(one("Never", a()), runtime(ready_sandbox(), vec![exited("a", "c1", 200, 137, "OOMKilled", 0)])),
            "terminated(137,OOMKilled) last=- restarts=0 ready=false started=false",
        ),
        (
            "restarted: previous instance is the last state",
            Fixture::new(
                one("Always", a()),
                runtime(ready_sandbox(), vec![running("a", "c2", 300, 1), exited("a", "c1", 200, 1, "Error", 0)]),
            ),
            "running last=terminated(1,Error) restarts=1 ready=true started=true",
        ),
        (
            "only the two newest instances count",
            Fixture::new(
                one("Always", a()),
                runtime(
                    ready_sandbox(),
                    vec![
                        running("a", "c3", 400, 2),
                        exited("a", "c2", 300, 2, "Error", 1),
                        exited("a", "c1", 200, 1, "Error", 0),
                    ],
                ),
            ),
            "running last=terminated(2,Error) restarts=2 ready=true started=true",
        ),
        (
            "crash loop: waiting with the exit as last state",
            Fixture::new(one("Always", a()), runtime(ready_sandbox(), vec![exited("a", "c1", 200, 1, "Error", 3)]))
                .failure("a", "CrashLoopBackOff", "back-off 40s restarting failed container"),
            "waiting(CrashLoopBackOff) last=terminated(1,Error) restarts=3 ready=false started=false",
        ),
        (
            "exited and due to restart, no failure recorded yet",
            Fixture::new(one("Always", a()), runtime(ready_sandbox(), vec![exited("a", "c1", 200, 1, "Error", 0)])),
            "terminated(1,Error) last=- restarts=0 ready=false started=false",
        ),
        (
            "image pull failed before the first start",
            Fixture::new(one("Always", a()), runtime(ready_sandbox(), vec![])).failure("a", "ErrImagePull", "not found"),
            "waiting(ErrImagePull) last=- restarts=0 ready=false started=false",
        ),
        (
            "image never pull after an earlier run",
            Fixture::new(one("OnFailure", a()), runtime(ready_sandbox(), vec![exited("a", "c1", 200, 2, "Error", 0)]))
                .failure("a", "ErrImageNeverPull", "image not present"),
            "waiting(ErrImageNeverPull) last=terminated(2,Error) restarts=0 ready=false started=false",
        ),
        (
            "Never policy: no waiting even with a failure",
            Fixture::new(one("Never", a()), runtime(ready_sandbox(), vec![exited("a", "c1", 200, 1, "Error", 0)]))
                .failure("a", "CrashLoopBackOff", ""),
            "terminated(1,Error) last=- restarts=0 ready=false started=false",
        ),
        (
            "OnFailure after success: no waiting",
            Fixture::new(one("OnFailure", a()), runtime(ready_sandbox(), vec![exited("a", "c1", 200, 0, "Completed", 0)]))
                .failure("a", "CrashLoopBackOff", ""),
            "terminated(0,Completed) last=- restarts=0 ready=false started=false",
        ),
        (
            "container restartPolicy Never overrides pod Always",
            Fixture::new(
                one("Always", Container { restart_policy: Some("Never".into()), ..a() }),
                runtime(ready_sandbox(), vec![exited("a", "c1", 200, 1, "Error", 0)]),
            )
            .failure("a", "CrashLoopBackOff", ""),
            "terminated(1,Error) last=- restarts=0 ready=false started=false",
        ),
        (
            "deleted pod: nothing restarts",
            Fixture::new(deleting(one("Always", a())), runtime(ready_sandbox(), vec![exited("a", "c1", 200, 1, "Error", 0)]))
                .failure("a", "CrashLoopBackOff", ""),
            "terminated(1,Error) last=- restarts=0 ready=false started=false",
        ),
        (
            "unknown state after running",
            Fixture::new(one("Always", a()), runtime(ready_sandbox(), vec![rc("a", "c1", 200, RS::Unknown, 0, "", 2)]))
                .previous(previous_with(vec![running_status("a", 2)])),
            "terminated(137,ContainerStatusUnknown) last=- restarts=3 ready=false started=false",
        ),
        (
            "unknown state, never seen running",
            Fixture::new(one("Always", a()), runtime(ready_sandbox(), vec![rc("a", "c1", 200, RS::Unknown, 0, "", 0)])),
            "waiting() last=- restarts=0 ready=false started=false",
        ),
        (
            "vanished after running",
            Fixture::new(one("Always", a()), runtime(ready_sandbox(), vec![]))
                .previous(previous_with(vec![running_status("a", 1)])),
            "waiting(ContainerCreating) last=terminated(137,ContainerStatusUnknown) restarts=2 ready=false started=false",
        ),
        (
            "vanished after running while being deleted",
            Fixture::new(deleting(one("Always", a())), runtime(ready_sandbox(), vec![]))
                .previous(previous_with(vec![running_status("a", 1)])),
            "waiting(ContainerCreating) last=terminated(137,ContainerStatusUnknown) restarts=1 ready=false started=false",
        ),
        (
            "removed after terminating: the old status stays",
            Fixture::new(one("Never", a()), runtime(ready_sandbox(), vec![]))
                .previous(previous_with(vec![terminated_status("a", 0, "Completed")])),
            "terminated(0,Completed) last=- restarts=0 ready=false started=false",
        ),
    ];
    for (name, fixture, expected) in cases {
        let statuses = fixture.statuses(ContainerKind::Regular);
        assert_eq!(statuses.len(), 1, "{name}");
        assert_eq!(describe(&statuses[0]), expected, "{name}");
    }
}

#[test]
fn init_container_status_table() {
    // (name, fixture, expected summary of init container "i")
    let cases: Vec<(&str, Fixture, &str)> = vec![
        (
            "not started",
            Fixture::new(pod("Always", vec![c("i")], vec![c("a")]), runtime(vec![], vec![])),
            "waiting(PodInitializing) last=- restarts=0 ready=false started=false",
        ),
        (
            "running is not ready",
            Fixture::new(
                pod("Always", vec![c("i")], vec![c("a")]),
                runtime(ready_sandbox(), vec![running("i", "c1", 200, 0)]),
            ),
            "running last=- restarts=0 ready=false started=true",
        ),
        (
            "exited 0 is ready and never waiting",
            Fixture::new(
                pod("Always", vec![c("i")], vec![c("a")]),
                runtime(ready_sandbox(), vec![exited("i", "c1", 200, 0, "Completed", 0)]),
            )
            .failure("i", "CrashLoopBackOff", ""),
            "terminated(0,Completed) last=- restarts=0 ready=true started=false",
        ),
        (
            "failed init waits to restart under Always",
            Fixture::new(
                pod("Always", vec![c("i")], vec![c("a")]),
                runtime(ready_sandbox(), vec![exited("i", "c1", 200, 1, "Error", 2)]),
            )
            .failure("i", "CrashLoopBackOff", "back-off"),
            "waiting(CrashLoopBackOff) last=terminated(1,Error) restarts=2 ready=false started=false",
        ),
        (
            "removed after the pod initialized: treated as completed",
            Fixture::new(
                pod("Always", vec![c("i")], vec![c("a")]),
                runtime(ready_sandbox(), vec![running("a", "c2", 300, 0)]),
            ),
            "terminated(0,Completed) last=- restarts=0 ready=true started=false",
        ),
        (
            "sidecar running without probes is started and ready",
            Fixture::new(
                pod("Always", vec![sidecar("i")], vec![c("a")]),
                runtime(ready_sandbox(), vec![running("i", "c1", 200, 0)]),
            ),
            "running last=- restarts=0 ready=true started=true",
        ),
        (
            "sidecar restarts even when the pod says Never",
            Fixture::new(
                pod("Never", vec![sidecar("i")], vec![c("a")]),
                runtime(ready_sandbox(), vec![exited("i", "c1", 200, 1, "Error", 0), running("a", "c2", 300, 0)]),
            )
            .failure("i", "CrashLoopBackOff", ""),
            "waiting(CrashLoopBackOff) last=terminated(1,Error) restarts=0 ready=false started=false",
        ),
        (
            "removed sidecar is not treated as completed",
            Fixture::new(
                pod("Always", vec![sidecar("i")], vec![c("a")]),
                runtime(ready_sandbox(), vec![running("a", "c2", 300, 0)]),
            ),
            "waiting(PodInitializing) last=- restarts=0 ready=false started=false",
        ),
    ];
    for (name, fixture, expected) in cases {
        let statuses = fixture.statuses(ContainerKind::Init);
        assert_eq!(statuses.len(), 1, "{name}");
        assert_eq!(describe(&statuses[0]), expected, "{name}");
    }
}

/// `recursiveReadOnly` in a mount's status as the kubelet's `resolveRecursiveReadOnly` gives
/// it, on a handler that declares recursive read-only mounts and on one that does not.
#[test]
fn recursive_read_only_in_the_status_table() {
    let mount =
        |read_only: Option<bool>, rro: Option<&str>, propagation: Option<&str>| VolumeMount {
            name: "mnt".into(),
            mount_path: "/mnt".into(),
            read_only,
            recursive_read_only: rro.map(Into::into),
            mount_propagation: propagation.map(Into::into),
            ..Default::default()
        };
    // (case, the mount, on a supporting handler, on one that is not)
    let cases = [
        ("read-write", mount(None, None, None), None, None),
        (
            "read-write, IfPossible",
            mount(Some(false), Some("IfPossible"), None),
            None,
            None,
        ),
        (
            "read-only",
            mount(Some(true), None, None),
            Some("Disabled"),
            Some("Disabled"),
        ),
        (
            "read-only, Disabled",
            mount(Some(true), Some("Disabled"), None),
            Some("Disabled"),
            Some("Disabled"),
        ),
        (
            "read-only, IfPossible",
            mount(Some(true), Some("IfPossible"), None),
            Some("Enabled"),
            Some("Disabled"),
        ),
        (
            "read-only, Enabled, propagation None",
            mount(Some(true), Some("Enabled"), Some("None")),
            Some("Enabled"),
            Some("Disabled"),
        ),
        (
            "read-only, IfPossible, HostToContainer",
            mount(Some(true), Some("IfPossible"), Some("HostToContainer")),
            Some("Disabled"),
            Some("Disabled"),
        ),
        (
            "read-only, unknown mode",
            mount(Some(true), Some("Sometimes"), None),
            Some("Disabled"),
            Some("Disabled"),
        ),
    ];
    for (name, m, supported, unsupported) in cases {
        let mut container = c("a");
        container.volume_mounts = Some(vec![m]);
        for (handler_supports, want) in [(true, supported), (false, unsupported)] {
            // The running instance's status, and the waiting one's before the runtime has it.
            let fixtures = [
                runtime(ready_sandbox(), vec![running("a", "c1", 300, 0)]),
                runtime(vec![], vec![]),
            ]
            .map(|rt| {
                let mut f = Fixture::new(pod("Always", vec![], vec![container.clone()]), rt);
                f.recursive_read_only = handler_supports;
                f
            });
            for fixture in &fixtures {
                let s = &fixture.statuses(ContainerKind::Regular)[0];
                let got = s.volume_mounts.as_ref().unwrap()[0]
                    .recursive_read_only
                    .as_deref();
                assert_eq!(got, want, "{name}, handler supports: {handler_supports}");
            }
        }
    }
}

#[test]
fn container_status_fields_come_from_the_runtime() {
    let mut container = c("a");
    container.volume_mounts = Some(vec![
        VolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            ..Default::default()
        },
        VolumeMount {
            name: "cfg".into(),
            mount_path: "/etc/cfg".into(),
            read_only: Some(true),
            ..Default::default()
        },
    ]);
    let mut old = exited("a", "c1", 200, 1, "Error", 0);
    old.message = "boom".into();
    let f = Fixture::new(
        pod("Always", vec![], vec![container]),
        runtime(ready_sandbox(), vec![running("a", "c2", 300, 1), old]),
    );
    let s = &f.statuses(ContainerKind::Regular)[0];
    assert_eq!(s.container_id.as_deref(), Some("containerd://c2"));
    assert_eq!(s.image, "docker.io/library/a:1");
    assert_eq!(s.image_id, "sha256:a");
    let started_at = s
        .state
        .as_ref()
        .unwrap()
        .running
        .as_ref()
        .unwrap()
        .started_at
        .clone();
    assert_eq!(started_at, Some(time(301)));
    let last = s.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(last.container_id.as_deref(), Some("containerd://c1"));
    assert_eq!(last.message.as_deref(), Some("boom"));
    assert_eq!(last.started_at, Some(time(201)));
    assert_eq!(last.finished_at, Some(time(205)));
    let mounts = s.volume_mounts.as_ref().unwrap();
    assert_eq!(mounts.len(), 2);
    assert_eq!(
        (
            mounts[0].read_only,
            mounts[0].recursive_read_only.as_deref()
        ),
        (None, None)
    );
    assert_eq!(
        (
            mounts[1].read_only,
            mounts[1].recursive_read_only.as_deref()
        ),
        (Some(true), Some("Disabled"))
    );

    // Before the runtime knows the container: the spec's image and an empty last state.
    let f = Fixture::new(pod("Always", vec![], vec![c("a")]), runtime(vec![], vec![]));
    let s = &f.statuses(ContainerKind::Regular)[0];
    assert_eq!(s.image, "a:spec");
    assert_eq!(s.container_id, None);
    assert_eq!(s.last_state, Some(ContainerState::default()));
}

#[test]
fn start_failure_message_is_reported() {
    let f = Fixture::new(pod("Always", vec![], vec![c("a")]), runtime(vec![], vec![])).failure(
        "a",
        "ErrImagePull",
        "rpc error: not found",
    );
    let waiting = f.statuses(ContainerKind::Regular)[0]
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("ErrImagePull"));
    assert_eq!(waiting.message.as_deref(), Some("rpc error: not found"));
}

#[test]
fn statuses_order() {
    let f = Fixture::new(
        pod("Always", vec![c("z"), c("y")], vec![c("b"), c("a"), c("c")]),
        runtime(vec![], vec![]),
    );
    let names = |kind| -> Vec<String> { f.statuses(kind).into_iter().map(|s| s.name).collect() };
    assert_eq!(
        names(ContainerKind::Regular),
        ["a", "b", "c"],
        "regular: by name, like the kubelet"
    );
    assert_eq!(names(ContainerKind::Init), ["z", "y"], "init: spec order");
}

#[test]
fn termination_messages_are_capped() {
    let mut long = exited("a", "c1", 200, 1, "Error", 0);
    long.message = "é".repeat(7000); // 14000 bytes
    let f = Fixture::new(
        pod("Never", vec![], vec![c("a")]),
        runtime(ready_sandbox(), vec![long]),
    );
    let s = &f.statuses(ContainerKind::Regular)[0];
    let message = s
        .state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap()
        .message
        .clone()
        .unwrap();
    assert_eq!(message.len(), 12288);

    let mut long = exited("a", "c1", 200, 1, "Error", 0);
    long.message = "x".repeat(7000);
    let f = Fixture::new(
        pod("Never", vec![], vec![c("a"), c("b")]),
        runtime(ready_sandbox(), vec![long]),
    );
    let s = &f.statuses(ContainerKind::Regular)[0];
    let message = s
        .state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap()
        .message
        .clone()
        .unwrap();
    assert_eq!(message.len(), 6144, "split evenly between containers");
}

// ---- conditions ----

fn cond_str(status: &PodStatus, type_: &str) -> String {
    let Some(c) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
    else {
        return "missing".into();
    };
    let mut s = c.status.clone();
    if let Some(r) = &c.reason {
        s.push(' ');
        s.push_str(r);
    }
    if let Some(m) = &c.message {
        s.push_str(": ");
        s.push_str(m);
    }
    s
}

fn gates(mut p: Pod, names: &[&str]) -> Pod {
    if let Some(spec) = p.spec.as_mut() {
        spec.readiness_gates = Some(
            names
                .iter()
                .map(|n| PodReadinessGate {
                    condition_type: n.to_string(),
                })
                .collect(),
        );
    }
    p
}

fn with_source_conditions(mut p: Pod, conditions: Vec<PodCondition>) -> Pod {
    p.status = Some(PodStatus {
        conditions: Some(conditions),
        ..Default::default()
    });
    p
}

fn cond(type_: &str, status: &str, at: i64) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(time(at)),
        ..Default::default()
    }
}

#[test]
fn pod_ready_to_start_containers_table() {
    let host = |mut p: Pod| {
        if let Some(s) = p.spec.as_mut() {
            s.host_network = Some(true);
        }
        p
    };
    let one = || pod("Always", vec![], vec![c("a")]);
    let cases: Vec<(&str, Pod, Vec<RuntimeSandbox>, &str)> = vec![
        ("no sandbox", one(), vec![], "False"),
        ("ready sandbox with IP", one(), ready_sandbox(), "True"),
        (
            "ready sandbox without IP",
            one(),
            vec![sandbox("sb1", 100, true, &[], false)],
            "False",
        ),
        (
            "host network needs no IP",
            host(one()),
            vec![sandbox("sb1", 100, true, &[], true)],
            "True",
        ),
        (
            "network mode changed",
            host(one()),
            vec![sandbox("sb1", 100, true, &["10.1.0.5"], false)],
            "False",
        ),
        (
            "newest sandbox not ready",
            one(),
            vec![
                sandbox("sb2", 200, false, &[], false),
                sandbox("sb1", 100, true, &["10.1.0.5"], false),
            ],
            "False",
        ),
        (
            "two ready sandboxes",
            one(),
            vec![
                sandbox("sb2", 200, true, &["10.1.0.6"], false),
                sandbox("sb1", 100, true, &["10.1.0.5"], false),
            ],
            "False",
        ),
        (
            "old dead sandbox does not matter",
            one(),
            vec![
                sandbox("sb2", 200, true, &["10.1.0.6"], false),
                sandbox("sb1", 100, false, &[], false),
            ],
            "True",
        ),
    ];
    for (name, p, sandboxes, expected) in cases {
        let f = Fixture::new(p, runtime(sandboxes, vec![]));
        assert_eq!(
            cond_str(&f.status(), "PodReadyToStartContainers"),
            expected,
            "{name}"
        );
    }
}

#[test]
fn readiness_conditions_table() {
    let two_inits = || pod("Always", vec![c("i1"), c("i2")], vec![c("a")]);
    // (name, fixture, Initialized, ContainersReady, Ready)
    let cases: Vec<(&str, Fixture, &str, &str, &str)> = vec![
        (
            "nothing started",
            Fixture::new(pod("Always", vec![], vec![c("a"), c("b")]), runtime(vec![], vec![])),
            "True",
            "False ContainersNotReady: containers with unready status: [a b]",
            "False ContainersNotReady: containers with unready status: [a b]",
        ),
        (
            "all running",
            Fixture::new(
                pod("Always", vec![], vec![c("a"), c("b")]),
                runtime(ready_sandbox(), vec![running("a", "c1", 200, 0), running("b", "c2", 200, 0)]),
            ),
            "True",
            "True",
            "True",
        ),
        (
            "one not ready",
            Fixture::new(
                pod("Always", vec![], vec![c("a"), with_readiness(c("b"))]),
                runtime(ready_sandbox(), vec![running("a", "c1", 200, 0), running("b", "c2", 200, 0)]),
            ),
            "True",
            "False ContainersNotReady: containers with unready status: [b]",
            "False ContainersNotReady: containers with unready status: [b]",
        ),
        (
            "init containers pending",
            Fixture::new(two_inits(), runtime(vec![], vec![])),
            "False ContainersNotInitialized: containers with incomplete status: [i1 i2]",
            "False ContainersNotReady: containers with unready status: [a]",
            "False ContainersNotReady: containers with unready status: [a]",
        ),
        (
            "second init container running",
            Fixture::new(
                two_inits(),
                runtime(ready_sandbox(), vec![exited("i1", "c1", 200, 0, "Completed", 0), running("i2", "c2", 300, 0)]),
            ),
            "False ContainersNotInitialized: containers with incomplete status: [i2]",
            "False ContainersNotReady: containers with unready status: [a]",
            "False ContainersNotReady: containers with unready status: [a]",
        ),
        (
            "init containers done",
            Fixture::new(
                two_inits(),
                runtime(
                    ready_sandbox(),
                    vec![
                        exited("i1", "c1", 200, 0, "Completed", 0),
                        exited("i2", "c2", 300, 0, "Completed", 0),
                        running("a", "c3", 400, 0),
                    ],
                ),
            ),
            "True",
            "True",
            "True",
        ),
        (
            "sidecar not started yet",
            Fixture::new(
                pod("Always", vec![with_startup(sidecar("s"))], vec![c("a")]),
                runtime(ready_sandbox(), vec![running("s", "c1", 200, 0)]),
            ),
            "False ContainersNotInitialized: containers with incomplete status: [s]",
            "False ContainersNotReady: containers with unready status: [s a]",
            "False ContainersNotReady: containers with unready status: [s a]",
        ),
        (
            "sidecar started but not ready",
            Fixture::new(
                pod("Always", vec![with_readiness(sidecar("s"))], vec![c("a")]),
                runtime(ready_sandbox(), vec![running("s", "c1", 200, 0), running("a", "c2", 300, 0)]),
            ),
            "True",
            "False ContainersNotReady: containers with unready status: [s]",
            "False ContainersNotReady: containers with unready status: [s]",
        ),
        (
            "succeeded",
            Fixture::new(
                pod("Never", vec![], vec![c("a")]),
                runtime(ready_sandbox(), vec![exited("a", "c1", 200, 0, "Completed", 0)]),
            ),
            "True PodCompleted",
            "False PodCompleted",
            "False PodCompleted",
        ),
        (
            "failed",
            Fixture::new(
                pod("Never", vec![], vec![c("a")]),
                runtime(ready_sandbox(), vec![exited("a", "c1", 200, 1, "Error", 0)]),
            ),
            "True",
            "False PodFailed",
            "False PodFailed",
        ),
        (
            "readiness gate missing",
            Fixture::new(
                gates(pod("Always", vec![], vec![c("a")]), &["example.com/gate"]),
                runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)]),
            ),
            "True",
            "True",
            "False ReadinessGatesNotReady: corresponding condition of pod readiness gate \"example.com/gate\" does not exist.",
        ),
        (
            "readiness gate false",
            Fixture::new(
                with_source_conditions(
                    gates(pod("Always", vec![], vec![c("a")]), &["example.com/gate"]),
                    vec![cond("example.com/gate", "False", 10)],
                ),
                runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)]),
            ),
            "True",
            "True",
            "False ReadinessGatesNotReady: the status of pod readiness gate \"example.com/gate\" is not \"True\", but False",
        ),
        (
            "two gates, one true one missing",
            Fixture::new(
                with_source_conditions(
                    gates(pod("Always", vec![], vec![c("a")]), &["x.io/one", "x.io/two"]),
                    vec![cond("x.io/one", "True", 10)],
                ),
                runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)]),
            ),
            "True",
            "True",
            "False ReadinessGatesNotReady: corresponding condition of pod readiness gate \"x.io/two\" does not exist.",
        ),
        (
            "readiness gates true",
            Fixture::new(
                with_source_conditions(
                    gates(pod("Always", vec![], vec![c("a")]), &["x.io/one", "x.io/two"]),
                    vec![cond("x.io/one", "True", 10), cond("x.io/two", "True", 10)],
                ),
                runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)]),
            ),
            "True",
            "True",
            "True",
        ),
    ];
    for (name, f, initialized, containers_ready, ready) in cases {
        let s = f.status();
        assert_eq!(
            cond_str(&s, "Initialized"),
            initialized,
            "{name}: Initialized"
        );
        assert_eq!(
            cond_str(&s, "ContainersReady"),
            containers_ready,
            "{name}: ContainersReady"
        );
        assert_eq!(cond_str(&s, "Ready"), ready, "{name}: Ready");
        assert_eq!(cond_str(&s, "PodScheduled"), "True", "{name}: PodScheduled");
    }
}

#[test]
fn condition_transition_times() {
    let running_pod = || {
        Fixture::new(
            pod("Always", vec![], vec![c("a")]),
            runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)]),
        )
    };
    let now = time(NOW); // `now` has 0.7s, truncated like the API does
                         // (name, previous conditions, source conditions, expected Ready time)
    let cases: Vec<(&str, Vec<PodCondition>, Vec<PodCondition>, Time)> = vec![
        ("first status", vec![], vec![], now.clone()),
        (
            "unchanged keeps the time",
            vec![cond("Ready", "True", 50)],
            vec![],
            time(50),
        ),
        (
            "changed takes now",
            vec![cond("Ready", "False", 50)],
            vec![],
            now.clone(),
        ),
        (
            "source status counts when nothing cached",
            vec![],
            vec![cond("Ready", "True", 40)],
            time(40),
        ),
    ];
    for (name, previous, source, expected) in cases {
        let mut f = running_pod();
        if !previous.is_empty() {
            f = f.previous(PodStatus {
                conditions: Some(previous),
                ..Default::default()
            });
        }
        if !source.is_empty() {
            f.pod = with_source_conditions(f.pod, source);
        }
        let ready = f
            .status()
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.last_transition_time, Some(expected), "{name}");
    }
}

#[test]
fn conditions_order_and_foreign_conditions() {
    let f = Fixture::new(
        with_source_conditions(
            gates(pod("Always", vec![], vec![c("a")]), &["example.com/gate"]),
            vec![
                cond("example.com/gate", "True", 10),
                cond("Ready", "False", 10), // kubelet-owned: regenerated, not copied
            ],
        ),
        runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)]),
    )
    .previous(PodStatus {
        conditions: Some(vec![
            cond("example.com/gate", "False", 5), // the source's copy is newer
            PodCondition {
                reason: Some("TerminationByKubelet".into()),
                ..cond("DisruptionTarget", "True", 20)
            },
            cond("other.io/x", "True", 30),
        ]),
        ..Default::default()
    });
    let conditions = f.status().conditions.unwrap();
    let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(
        types,
        [
            "example.com/gate",
            "DisruptionTarget",
            "other.io/x",
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled"
        ]
    );
    assert_eq!(conditions[0].status, "True");
    assert_eq!(conditions[0].last_transition_time, Some(time(10)));
    assert_eq!(
        conditions[1].reason.as_deref(),
        Some("TerminationByKubelet")
    );
    assert_eq!(conditions[1].last_transition_time, Some(time(20)));
    assert_eq!(conditions[5].status, "True", "Ready: gate is True");
}

// ---- pod status ----

#[test]
fn phase_and_terminal_stickiness_table() {
    let running_a = || runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)]);
    let phase_status = |phase: &str, reason: Option<&str>| PodStatus {
        phase: Some(phase.into()),
        reason: reason.map(str::to_string),
        message: reason.map(|r| format!("{r} message")),
        ..Default::default()
    };
    // (name, fixture, expected phase, expected reason)
    let cases: Vec<(&str, Fixture, &str, Option<&str>)> = vec![
        (
            "running",
            Fixture::new(pod("Always", vec![], vec![c("a")]), running_a()),
            "Running",
            None,
        ),
        (
            "previous Succeeded is kept",
            Fixture::new(pod("Always", vec![], vec![c("a")]), running_a())
                .previous(phase_status("Succeeded", None)),
            "Succeeded",
            None,
        ),
        (
            "source Failed is kept",
            Fixture::new(
                Pod {
                    status: Some(phase_status("Failed", None)),
                    ..pod("Always", vec![], vec![c("a")])
                },
                running_a(),
            ),
            "Failed",
            None,
        ),
        (
            "source Failed beats a generated Succeeded",
            Fixture::new(
                Pod {
                    status: Some(phase_status("Failed", None)),
                    ..pod("Never", vec![], vec![c("a")])
                },
                runtime(
                    ready_sandbox(),
                    vec![exited("a", "c1", 200, 0, "Completed", 0)],
                ),
            ),
            "Failed",
            None,
        ),
        (
            "reason stays with an unchanged phase",
            Fixture::new(pod("Always", vec![], vec![c("a")]), running_a())
                .previous(phase_status("Failed", Some("Evicted"))),
            "Failed",
            Some("Evicted"),
        ),
        (
            "reason dropped when the phase moves",
            Fixture::new(pod("Always", vec![], vec![c("a")]), running_a())
                .previous(phase_status("Pending", Some("Whatever"))),
            "Running",
            None,
        ),
        (
            "terminal pod with exited containers",
            Fixture {
                terminal: true,
                ..Fixture::new(
                    pod("Always", vec![], vec![c("a")]),
                    runtime(
                        ready_sandbox(),
                        vec![exited("a", "c1", 200, 0, "Completed", 0)],
                    ),
                )
            },
            "Succeeded",
            None,
        ),
        (
            "restarting sidecar does not make an initialized pod Pending",
            Fixture::new(
                pod("Always", vec![with_startup(sidecar("s"))], vec![c("a")]),
                runtime(
                    ready_sandbox(),
                    vec![running("s", "c2", 300, 1), running("a", "c1", 200, 0)],
                ),
            ),
            "Running",
            None,
        ),
        (
            "sidecar not started before any regular container: Pending",
            Fixture::new(
                pod("Always", vec![with_startup(sidecar("s"))], vec![c("a")]),
                runtime(ready_sandbox(), vec![running("s", "c2", 300, 0)]),
            ),
            "Pending",
            None,
        ),
    ];
    for (name, f, phase, reason) in cases {
        let s = f.status();
        assert_eq!(s.phase.as_deref(), Some(phase), "{name}");
        assert_eq!(s.reason.as_deref(), reason, "{name}");
        assert_eq!(
            s.message.is_some(),
            reason.is_some(),
            "{name}: message follows reason"
        );
    }
}

#[test]
fn start_time_table() {
    let base = || Fixture::new(pod("Always", vec![], vec![c("a")]), runtime(vec![], vec![]));
    let with_start = |secs| PodStatus {
        start_time: Some(time(secs)),
        ..Default::default()
    };
    let cases: Vec<(&str, Fixture, Time)> = vec![
        ("first status: now, whole seconds", base(), time(NOW)),
        (
            "previous start time kept",
            base().previous(with_start(77)),
            time(77),
        ),
        (
            "source start time kept",
            Fixture {
                pod: Pod {
                    status: Some(with_start(66)),
                    ..base().pod
                },
                ..base()
            },
            time(66),
        ),
    ];
    for (name, f, expected) in cases {
        assert_eq!(f.status().start_time, Some(expected), "{name}");
    }
}

/// (name, pod, sandboxes, host IPs, expected hostIPs, expected podIPs)
type IpCase = (
    &'static str,
    Pod,
    Vec<RuntimeSandbox>,
    Vec<&'static str>,
    Vec<&'static str>,
    Vec<&'static str>,
);

#[test]
fn ips_table() {
    let host_pod = || {
        let mut p = pod("Always", vec![], vec![c("a")]);
        if let Some(s) = p.spec.as_mut() {
            s.host_network = Some(true);
        }
        p
    };
    // (name, pod, sandboxes, host IPs, expected hostIPs, expected podIPs)
    let cases: Vec<IpCase> = vec![
        (
            "single stack",
            pod("Always", vec![], vec![c("a")]),
            ready_sandbox(),
            vec!["192.168.1.10"],
            vec!["192.168.1.10"],
            vec!["10.1.0.5"],
        ),
        (
            "dual stack, IPv4 node",
            pod("Always", vec![], vec![c("a")]),
            vec![sandbox(
                "sb1",
                100,
                true,
                &["fd00::5", "10.1.0.5", "10.1.0.6"],
                false,
            )],
            vec!["192.168.1.10", "fd00:1::10"],
            vec!["192.168.1.10", "fd00:1::10"],
            vec!["10.1.0.5", "fd00::5"],
        ),
        (
            "dual stack, IPv6 node",
            pod("Always", vec![], vec![c("a")]),
            vec![sandbox("sb1", 100, true, &["10.1.0.5", "fd00::5"], false)],
            vec!["fd00:1::10", "192.168.1.10"],
            vec!["fd00:1::10", "192.168.1.10"],
            vec!["fd00::5", "10.1.0.5"],
        ),
        (
            "sandbox not ready: no pod IP",
            pod("Always", vec![], vec![c("a")]),
            vec![sandbox("sb1", 100, false, &["10.1.0.5"], false)],
            vec!["192.168.1.10"],
            vec!["192.168.1.10"],
            vec![],
        ),
        (
            "host network takes the node's IPs",
            host_pod(),
            vec![sandbox("sb1", 100, true, &[], true)],
            vec!["192.168.1.10"],
            vec!["192.168.1.10"],
            vec!["192.168.1.10"],
        ),
        (
            "no host IPs known",
            pod("Always", vec![], vec![c("a")]),
            vec![],
            vec![],
            vec![],
            vec![],
        ),
    ];
    for (name, p, sandboxes, host_ips, expected_host, expected_pod) in cases {
        let mut f = Fixture::new(p, runtime(sandboxes, vec![]));
        f.host_ips = host_ips.iter().map(|s| s.to_string()).collect();
        let s = f.status();
        let hosts: Vec<String> = s.host_ips.iter().flatten().map(|h| h.ip.clone()).collect();
        let pods: Vec<String> = s.pod_ips.iter().flatten().map(|p| p.ip.clone()).collect();
        assert_eq!(hosts, expected_host, "{name}: hostIPs");
        assert_eq!(pods, expected_pod, "{name}: podIPs");
        assert_eq!(
            s.host_ip.as_deref(),
            expected_host.first().copied(),
            "{name}: hostIP"
        );
        assert_eq!(
            s.pod_ip.as_deref(),
            expected_pod.first().copied(),
            "{name}: podIP"
        );
    }
}

#[test]
fn sort_ips_ignores_garbage() {
    let ips = vec!["not-an-ip".to_string(), "10.0.0.1".to_string()];
    assert_eq!(sort_ips(&ips, false), ["10.0.0.1"]);
}

/// A pod whose sandbox is no longer ready (terminating, or ended) keeps the IPs it had, as the
/// kubelet's PLEG keeps them; a ready sandbox's IPs win. Kubernetes' `should contain podIPs in
/// status for during termination` [NodeConformance] test found nodelet clearing them.
#[test]
fn pod_ips_outlive_the_sandbox() {
    let previous = PodStatus {
        pod_ip: Some("10.1.0.5".into()),
        pod_ips: Some(vec![PodIP {
            ip: "10.1.0.5".into(),
        }]),
        ..Default::default()
    };
    // (case, sandboxes, previous status, expected pod IPs)
    type Case = (
        &'static str,
        Vec<RuntimeSandbox>,
        Option<PodStatus>,
        Vec<&'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "stopped sandbox: the IPs it had",
            vec![sandbox("sb1", 100, false, &[], false)],
            Some(previous.clone()),
            vec!["10.1.0.5"],
        ),
        (
            "no sandbox left: the IPs it had",
            vec![],
            Some(previous.clone()),
            vec!["10.1.0.5"],
        ),
        (
            "a new sandbox ready: its IPs",
            vec![
                sandbox("sb2", 200, true, &["10.1.0.9"], false),
                sandbox("sb1", 100, false, &[], false),
            ],
            Some(previous.clone()),
            vec!["10.1.0.9"],
        ),
        (
            "never had one: none",
            vec![sandbox("sb1", 100, false, &[], false)],
            None,
            vec![],
        ),
    ];
    for (name, sandboxes, previous, want) in cases {
        let mut f = Fixture::new(
            pod("Never", vec![], vec![c("a")]),
            runtime(sandboxes, vec![]),
        );
        f.host_ips = vec!["192.168.1.10".into()];
        f.previous = previous;
        let s = f.status();
        let pods: Vec<String> = s.pod_ips.iter().flatten().map(|p| p.ip.clone()).collect();
        assert_eq!(pods, want, "{name}");
        assert_eq!(s.pod_ip.as_deref(), want.first().copied(), "{name}");
    }
}

fn resources(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Option<ResourceRequirements> {
    let list = |items: &[(&str, &str)]| {
        (!items.is_empty()).then(|| {
            items
                .iter()
                .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
                .collect::<BTreeMap<_, _>>()
        })
    };
    Some(ResourceRequirements {
        requests: list(requests),
        limits: list(limits),
        ..Default::default()
    })
}

fn with_resources(name: &str, r: Option<ResourceRequirements>) -> Container {
    Container {
        resources: r,
        ..c(name)
    }
}

/// (name, init containers, containers, pod-level resources, expected)
type QosCase = (
    &'static str,
    Vec<Container>,
    Vec<Container>,
    Option<ResourceRequirements>,
    &'static str,
);

#[test]
fn qos_class_table() {
    let full = || {
        resources(
            &[("cpu", "500m"), ("memory", "128Mi")],
            &[("cpu", "0.5"), ("memory", "134217728")],
        )
    };
    // (name, init containers, containers, pod-level resources, expected)
    let cases: Vec<QosCase> = vec![
        ("nothing set", vec![], vec![c("a")], None, "BestEffort"),
        (
            "requests equal limits (different spellings)",
            vec![],
            vec![with_resources("a", full())],
            None,
            "Guaranteed",
        ),
        (
            "limits only (requests default to limits)",
            vec![],
            vec![with_resources(
                "a",
                resources(&[], &[("cpu", "1"), ("memory", "1Gi")]),
            )],
            None,
            "Guaranteed",
        ),
        (
            "request below limit",
            vec![],
            vec![with_resources(
                "a",
                resources(
                    &[("cpu", "250m"), ("memory", "1Gi")],
                    &[("cpu", "1"), ("memory", "1Gi")],
                ),
            )],
            None,
            "Burstable",
        ),
        (
            "cpu only",
            vec![],
            vec![with_resources(
                "a",
                resources(&[("cpu", "1")], &[("cpu", "1")]),
            )],
            None,
            "Burstable",
        ),
        (
            "guaranteed next to best effort",
            vec![],
            vec![with_resources("a", full()), c("b")],
            None,
            "Burstable",
        ),
        (
            "init container counts",
            vec![c("i")],
            vec![with_resources("a", full())],
            None,
            "Burstable",
        ),
        (
            "other resources only",
            vec![],
            vec![with_resources(
                "a",
                resources(&[("ephemeral-storage", "1Gi")], &[]),
            )],
            None,
            "BestEffort",
        ),
        (
            "pod-level resources decide",
            vec![],
            vec![c("a"), c("b")],
            full(),
            "Guaranteed",
        ),
        (
            "zero requests",
            vec![],
            vec![with_resources("a", resources(&[("cpu", "0")], &[]))],
            None,
            "BestEffort",
        ),
    ];
    for (name, init, containers, pod_resources, expected) in cases {
        let mut p = pod("Always", init, containers);
        if let Some(spec) = p.spec.as_mut() {
            spec.resources = pod_resources;
        }
        assert_eq!(qos_class(&p).as_str(), expected, "{name}");
        let f = Fixture::new(p, runtime(vec![], vec![]));
        assert_eq!(
            f.status().qos_class.as_deref(),
            Some(expected),
            "{name}: in status"
        );
    }

    // A class already in the source's status is kept (it never changes for a pod).
    let mut p = pod("Always", vec![], vec![c("a")]);
    p.status = Some(PodStatus {
        qos_class: Some("Guaranteed".into()),
        ..Default::default()
    });
    let f = Fixture::new(p, runtime(vec![], vec![]));
    assert_eq!(f.status().qos_class.as_deref(), Some("Guaranteed"));
}

#[test]
fn observed_generation_and_status_lists() {
    let mut p = pod("Always", vec![c("i")], vec![c("a")]);
    p.metadata.generation = Some(4);
    let f = Fixture::new(p, runtime(vec![], vec![]));
    let s = f.status();
    assert_eq!(s.observed_generation, Some(4));
    assert!(s
        .conditions
        .iter()
        .flatten()
        .all(|c| c.observed_generation == Some(4)));
    assert_eq!(s.init_container_statuses.map(|v| v.len()), Some(1));
    assert_eq!(s.container_statuses.map(|v| v.len()), Some(1));
    assert_eq!(s.phase.as_deref(), Some("Pending"));

    let f = Fixture::new(pod("Always", vec![], vec![c("a")]), runtime(vec![], vec![]));
    let s = f.status();
    assert_eq!(s.observed_generation, None);
    assert_eq!(
        s.init_container_statuses, None,
        "no init containers: field omitted"
    );
}

#[test]
fn regenerating_with_the_previous_status_is_stable() {
    let mut f = Fixture::new(
        pod("Always", vec![], vec![c("a")]),
        runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)]),
    );
    let first = f.status();
    f.previous = Some(first.clone());
    assert_eq!(f.status(), first);
}

#[test]
fn pod_restart_in_place_condition_follows_the_restart() {
    let pod = pod("Always", vec![], vec![c("app")]);
    let runtime = runtime(ready_sandbox(), vec![]);
    let find = |s: &PodStatus| {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "PodRestartInPlace")
            .map(|c| (c.status.clone(), c.last_transition_time.clone()))
    };
    let mut f = Fixture::new(pod.clone(), runtime.clone());
    assert_eq!(
        find(&f.status()),
        None,
        "no condition before any in-place restart"
    );
    f.restart_in_place = RestartInPlace::Killing;
    let during = f.status();
    assert_eq!(find(&during).unwrap().0, "True");
    let mut f = Fixture::new(pod, runtime).previous(during.clone());
    f.restart_in_place = RestartInPlace::Done;
    let after = f.status();
    assert_eq!(find(&after).unwrap().0, "False");
    // Kept (as False) once the restart is over, even when the worker no longer sets it.
    let mut g = Fixture::new(f.pod.clone(), f.runtime.clone()).previous(after.clone());
    g.restart_in_place = RestartInPlace::Never;
    assert_eq!(find(&g.status()).unwrap().0, "False");
}

/// A `RestartAllContainers` restart as the kubelet shows it (Kubernetes' `[NodeConformance]`
/// RestartAllContainers specs check every container has restarted and has a last termination):
/// once the old instances are removed each container waits as `RestartingAllContainers` with
/// that last termination (exit 137) and one more restart; its next instance keeps both.
#[test]
fn an_in_place_restart_shows_every_container_restarted_with_a_last_termination() {
    let pod = pod("Always", vec![c("init"), sidecar("side")], vec![c("app")]);
    // The pod's n-th set of instances (created at n×100 s on), each counting `restarts`.
    let instances = |n: i64, restarts: i32| {
        vec![
            exited("init", &format!("i{n}"), n * 100 + 10, 0, "", restarts),
            running("side", &format!("s{n}"), n * 100 + 20, restarts),
            running("app", &format!("a{n}"), n * 100 + 30, restarts),
        ]
    };
    let before = Fixture::new(pod.clone(), runtime(ready_sandbox(), instances(1, 0))).status();
    let mut removed = Fixture::new(pod.clone(), runtime(ready_sandbox(), vec![])).previous(before);
    removed.restart_in_place = RestartInPlace::Removed;
    let removed = removed.status();
    let all = |s: &PodStatus| -> Vec<(String, String)> {
        let init = s.init_container_statuses.iter().flatten();
        let regular = s.container_statuses.iter().flatten();
        init.chain(regular)
            .map(|c| (c.name.clone(), describe(c)))
            .collect()
    };
    let waiting = "waiting(RestartingAllContainers) last=terminated(137,RestartingAllContainers) restarts=1 ready=false started=false";
    assert_eq!(
        all(&removed),
        [("init", waiting), ("side", waiting), ("app", waiting)]
            .map(|(n, d)| (n.to_string(), d.to_string())),
    );
    // The next instances (the restart counts nodelet carries: one more than before).
    let mut next = Fixture::new(pod, runtime(ready_sandbox(), instances(2, 1))).previous(removed);
    next.restart_in_place = RestartInPlace::Done;
    let after = next.status();
    let last = "last=terminated(137,RestartingAllContainers) restarts=1";
    for (name, shown) in all(&after) {
        assert!(shown.contains(last), "{name}: {shown}");
    }
    assert_eq!(
        all(&after)[0].1,
        format!("terminated(0,Completed) {last} ready=true started=false")
    );
}

/// A restarted container whose old instance the runtime no longer holds keeps its restart
/// count and shows the terminated state it had as its last termination (the kubelet's carry-over).
#[test]
fn a_removed_instance_terminated_state_becomes_the_last_termination() {
    let pod = pod("Always", vec![], vec![c("app")]);
    let mut old = terminated_status("app", 3, "Error");
    old.restart_count = 4;
    old.container_id = Some("containerd://a1".into());
    let previous = PodStatus {
        container_statuses: Some(vec![old]),
        ..Default::default()
    };
    let f = Fixture::new(
        pod,
        runtime(ready_sandbox(), vec![running("app", "a2", 300, 0)]),
    )
    .previous(previous);
    let s = &f.statuses(ContainerKind::Regular)[0];
    assert_eq!(
        describe(s),
        "running last=terminated(3,Error) restarts=5 ready=true started=true"
    );
}

#[test]
fn restart_in_place_states_map_to_the_condition() {
    let cases = [
        (RestartInPlace::Never, None),
        (RestartInPlace::Killing, Some(true)),
        (RestartInPlace::Removed, Some(false)),
        (RestartInPlace::Done, Some(false)),
    ];
    for (state, want) in cases {
        assert_eq!(state.condition(), want, "{state:?}");
    }
    assert_eq!(RestartInPlace::default(), RestartInPlace::Never);
}

/// `PodReadyToStartContainersCondition: false`: the condition is not published, and one left in
/// the previous status by an earlier run with the gate on does not survive either.
#[test]
fn ready_to_start_condition_follows_its_gate() {
    let pod = pod("Always", vec![], vec![c("app")]);
    let runtime = runtime(ready_sandbox(), vec![]);
    let has = |s: &PodStatus| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "PodReadyToStartContainers")
    };
    let on = Fixture::new(pod.clone(), runtime.clone()).status();
    assert!(has(&on), "gate on: {:?}", on.conditions);
    let mut off = Fixture::new(pod, runtime).previous(on);
    off.ready_to_start_condition = false;
    let status = off.status();
    assert!(!has(&status), "gate off: {:?}", status.conditions);
    assert!(
        status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready"),
        "the other conditions stay"
    );
}

/// `status.ephemeralContainerStatuses`, as the kubelet reports them: each waits (the default
/// reason, or its start failure while it has no instance), then running, then terminated with
/// its exit code; never ready, never restarted (a failure after it ran is not shown over its
/// end); sorted by name; absent without ephemeral containers; the pod's phase and conditions
/// do not count them.
#[test]
fn ephemeral_container_statuses_follow_the_runtime() {
    use k8s_openapi::api::core::v1::EphemeralContainer;
    let debugged = |names: &[&str]| {
        let mut p = pod("Always", vec![], vec![c("a")]);
        p.spec.as_mut().unwrap().ephemeral_containers = Some(
            names
                .iter()
                .map(|n| EphemeralContainer {
                    name: n.to_string(),
                    image: Some(format!("{n}:spec")),
                    target_container_name: Some("a".into()),
                    ..Default::default()
                })
                .collect(),
        );
        p
    };
    let state_of = |s: &ContainerStatus| {
        let st = s.state.clone().unwrap();
        if let Some(w) = st.waiting {
            format!("waiting {}", w.reason.unwrap_or_default())
        } else if st.running.is_some() {
            "running".to_string()
        } else {
            let t = st.terminated.unwrap();
            format!(
                "terminated {} {}",
                t.exit_code,
                t.reason.unwrap_or_default()
            )
        }
    };
    // (case, ephemeral names, runtime instances, start failures, want name → state)
    type Case<'a> = (
        &'a str,
        Vec<&'a str>,
        Vec<RuntimeContainer>,
        Vec<(&'a str, &'a str)>,
        Vec<(&'a str, &'a str)>,
    );
    let cases: Vec<Case> = vec![
        (
            "new",
            vec!["dbg"],
            vec![],
            vec![],
            vec![("dbg", "waiting ContainerCreating")],
        ),
        (
            "refused or failing to start",
            vec!["dbg", "bad"],
            vec![],
            vec![("bad", "CreateContainerConfigError")],
            vec![
                ("bad", "waiting CreateContainerConfigError"),
                ("dbg", "waiting ContainerCreating"),
            ],
        ),
        (
            "running",
            vec!["dbg"],
            vec![running("dbg", "e1", 300, 0)],
            vec![],
            vec![("dbg", "running")],
        ),
        (
            "exited, a later failure does not cover it",
            vec!["dbg"],
            vec![exited("dbg", "e1", 300, 3, "", 0)],
            vec![("dbg", "CreateContainerConfigError")],
            vec![("dbg", "terminated 3 Error")],
        ),
        (
            "sorted by name",
            vec!["z", "b"],
            vec![exited("z", "e1", 300, 0, "", 0), running("b", "e2", 301, 0)],
            vec![],
            vec![("b", "running"), ("z", "terminated 0 Completed")],
        ),
    ];
    for (case, names, instances, failures, want) in cases {
        let mut all = vec![running("a", "c1", 200, 0)];
        all.extend(instances);
        let mut f = Fixture::new(debugged(&names), runtime(ready_sandbox(), all));
        for (name, reason) in failures {
            f = f.failure(
                name,
                reason,
                "spec.ephemeralContainers[0].x: Unsupported value: y",
            );
        }
        let statuses = f.statuses(ContainerKind::Ephemeral);
        let got: Vec<(String, String)> = statuses
            .iter()
            .map(|s| (s.name.clone(), state_of(s)))
            .collect();
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect();
        assert_eq!(got, want, "{case}");
        for s in &statuses {
            assert!(!s.ready && s.started.is_none(), "{case}: {s:?}");
            assert_eq!(s.restart_count, 0, "{case}");
        }
        let pod_status = f.status();
        assert_eq!(
            pod_status
                .ephemeral_container_statuses
                .as_ref()
                .map(Vec::len),
            Some(names.len()),
            "{case}"
        );
        assert_eq!(pod_status.phase.as_deref(), Some("Running"), "{case}");
    }
    let plain = Fixture::new(
        pod("Always", vec![], vec![c("a")]),
        runtime(ready_sandbox(), vec![running("a", "c1", 200, 0)]),
    );
    assert_eq!(plain.status().ephemeral_container_statuses, None);
}

/// In-place resize in the status: `resources` of a running instance from the runtime's report
/// where there is one, else from what nodelet applied to that instance (containerd 1.6 reports
/// nothing), else the allocation (the kubelet's default); `allocatedResources` from the
/// allocation; the resize conditions with their generation. The values themselves:
/// `status::resources`' table.
#[test]
fn resize_resources_and_conditions() {
    use crate::status::ResizeView;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let list = |kv: &[(&str, &str)]| {
        Some(
            kv.iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect::<BTreeMap<_, _>>(),
        )
    };
    let applied = ResourceRequirements {
        requests: list(&[("cpu", "100m"), ("memory", "64Mi")]),
        limits: list(&[("cpu", "200m"), ("memory", "128Mi")]),
        ..Default::default()
    };
    let allocated = ResourceRequirements {
        requests: list(&[("cpu", "100m"), ("memory", "64Mi")]),
        limits: list(&[("cpu", "500m"), ("memory", "128Mi")]),
        ..Default::default()
    };
    let view = ResizeView {
        allocated: [("app".to_string(), allocated.clone())].into(),
        actuated: [("app".to_string(), ("app-1".to_string(), applied.clone()))].into(),
        pending: Some((
            "Infeasible".into(),
            "Node didn't have enough capacity: cpu, requested: 9000, capacity: 2000".into(),
            3,
        )),
        in_progress: Some((
            2,
            Some("attempting to set pod memory limit (1) below current usage (2)".into()),
        )),
    };
    let mut pod = pod("Always", vec![], vec![c("app")]);
    pod.metadata.generation = Some(3);
    let app = running("app", "app-1", 100, 0);
    // 1.6: no report → what was applied.
    let mut f = Fixture::new(pod.clone(), runtime(ready_sandbox(), vec![app.clone()]));
    f.resize = Some(view.clone());
    let status = generate_pod_status(&f.inputs());
    let c = &status.container_statuses.as_ref().unwrap()[0];
    assert_eq!(c.resources.as_ref(), Some(&applied));
    assert_eq!(c.allocated_resources, allocated.requests);
    let conds = status.conditions.as_ref().unwrap();
    let pending = conds
        .iter()
        .find(|c| c.type_ == "PodResizePending")
        .unwrap();
    assert_eq!(pending.reason.as_deref(), Some("Infeasible"));
    assert_eq!(pending.observed_generation, Some(3));
    let progress = conds
        .iter()
        .find(|c| c.type_ == "PodResizeInProgress")
        .unwrap();
    assert_eq!(progress.reason.as_deref(), Some("Error"));
    assert_eq!(progress.observed_generation, Some(2));
    // A runtime that reports: its values (quota 50000/100000 = 500m), spelled as allocated.
    let mut reported = app.clone();
    reported.resources = Some(crate::cri::api::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 50_000,
        cpu_shares: 102,
        memory_limit_in_bytes: 128 << 20,
        ..Default::default()
    });
    let mut f = Fixture::new(pod.clone(), runtime(ready_sandbox(), vec![reported]));
    f.resize = Some(view.clone());
    let status = generate_pod_status(&f.inputs());
    let c = &status.container_statuses.as_ref().unwrap()[0];
    assert_eq!(c.resources.as_ref(), Some(&allocated));
    // Another instance than the one applied to and no report: the allocation.
    let other = running("app", "app-2", 100, 1);
    let mut f = Fixture::new(pod.clone(), runtime(ready_sandbox(), vec![other]));
    f.resize = Some(view);
    let status = generate_pod_status(&f.inputs());
    assert_eq!(
        status.container_statuses.as_ref().unwrap()[0].resources,
        Some(allocated)
    );
    // Without a view: no resources, no resize conditions (never the spec).
    let f = Fixture::new(pod, runtime(ready_sandbox(), vec![app]));
    let status = generate_pod_status(&f.inputs());
    assert_eq!(
        status.container_statuses.as_ref().unwrap()[0].resources,
        None
    );
    assert!(!status
        .conditions
        .unwrap()
        .iter()
        .any(|c| c.type_.starts_with("PodResize")));
}
