//! Component tests (fake runtime, paused clock): init containers, sidecars, termination order,
//! RestartAllContainers.

mod harness;

use std::sync::Arc;
use std::time::Duration;

use harness::*;
use k8s_openapi::api::core::v1::{
    Container, ContainerRestartRule, ContainerRestartRuleOnExitCodes, Lifecycle, Pod,
};
use nodelet::pod::worker_state::PodWork;

fn c(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("localhost/app:1".into()),
        image_pull_policy: Some("Never".into()),
        ..Default::default()
    }
}

fn sidecar(name: &str) -> Container {
    Container {
        restart_policy: Some("Always".into()),
        ..c(name)
    }
}

fn pod_with(
    uid: &str,
    policy: &str,
    inits: Vec<Container>,
    containers: Vec<Container>,
) -> Arc<Pod> {
    let mut p = (*pod(uid, policy, &[], "localhost/app:1")).clone();
    let spec = p.spec.as_mut().unwrap();
    spec.init_containers = Some(inits);
    spec.containers = containers;
    Arc::new(p)
}

impl Harness {
    fn started(&self) -> Vec<String> {
        self.fake.calls_of("start_container")
    }
}

#[tokio::test(start_paused = true)]
async fn init_containers_run_one_at_a_time_then_all_regular_containers() {
    let h = harness().await;
    let p = pod_with(
        "i1",
        "Always",
        vec![c("init1"), c("init2")],
        vec![c("a"), c("b")],
    );
    h.workers.update(PodWork::Sync(p));
    h.settle("init1 running", |h| h.started() == ["init1"])
        .await;
    let status = h.status.status("i1").unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    let initialized = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Initialized")
        .unwrap();
    assert_eq!(initialized.status, "False");
    assert_eq!(
        initialized.reason.as_deref(),
        Some("ContainersNotInitialized")
    );
    assert_eq!(
        initialized.message.as_deref(),
        Some("containers with incomplete status: [init1 init2]")
    );
    let waiting = status.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("PodInitializing"));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.started(), ["init1"], "init2 waits for init1 to exit");
    h.fake.exit_container("init1", 0);
    h.workers.wake("i1");
    h.settle("init2 running", |h| h.started() == ["init1", "init2"])
        .await;
    h.fake.exit_container("init2", 0);
    h.workers.wake("i1");
    h.settle("regular containers running", |h| {
        h.started() == ["init1", "init2", "a", "b"]
    })
    .await;
    h.settle("Running", |h| h.phase("i1") == "Running").await;
    // A restart of a regular container never re-runs init containers.
    h.fake.exit_container("a", 1);
    h.workers.wake("i1");
    h.settle("a restarted", |h| h.restart_count("i1", "a") == 1)
        .await;
    assert_eq!(h.started(), ["init1", "init2", "a", "b", "a"]);
    h.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn failing_init_container_is_retried_under_always_and_fails_the_pod_under_never() {
    let h = harness().await;
    h.workers.update(PodWork::Sync(pod_with(
        "i2",
        "Always",
        vec![c("init1")],
        vec![c("a")],
    )));
    h.settle("init1 running", |h| h.started() == ["init1"])
        .await;
    h.fake.exit_container("init1", 1);
    h.workers.wake("i2");
    h.settle("init1 retried at once", |h| {
        h.started() == ["init1", "init1"]
    })
    .await;
    h.fake.exit_container("init1", 1);
    h.workers.wake("i2");
    // The positive sign first: the worker saw the second exit and reports the back-off.
    h.settle("init1 in CrashLoopBackOff", |h| {
        h.status
            .status("i2")
            .and_then(|s| s.init_container_statuses)
            .and_then(|cs| cs.into_iter().find(|c| c.name == "init1"))
            .and_then(|c| c.state?.waiting?.reason)
            .as_deref()
            == Some("CrashLoopBackOff")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.started().len(), 2, "then it backs off");
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(h.started().len(), 3, "10 s later it runs again");
    h.cancel.cancel();

    let h = harness().await;
    h.workers.update(PodWork::Sync(pod_with(
        "i3",
        "Never",
        vec![c("init1")],
        vec![c("a")],
    )));
    h.settle("init1 running", |h| h.started() == ["init1"])
        .await;
    h.fake.exit_container("init1", 2);
    h.workers.wake("i3");
    h.settle("Failed", |h| h.phase("i3") == "Failed").await;
    assert_eq!(h.started(), ["init1"], "never retried, main never started");
    h.cancel.cancel();
}

/// An init container failing under `restartPolicy: Never` after a sidecar started fails the
/// pod, but the phase shows Failed only once the sidecar is stopped (the kubelet's status
/// manager holds a terminal phase while containers may run; Kubernetes' conformance test
/// "Should begin initializing the pod, restartPolicy=Never" reads the sidecar's last words
/// as soon as the phase is Failed). The sidecar ignores SIGTERM: it is stopped when the 7 s
/// grace period ends, and until then the pod is Pending.
#[tokio::test(start_paused = true)]
async fn a_failed_init_container_fails_the_pod_only_once_its_sidecars_are_stopped() {
    let h = harness().await;
    h.fake.set_ignores_sigterm("side");
    h.workers.update(PodWork::Sync(pod_with(
        "i9",
        "Never",
        vec![sidecar("side"), c("init2")],
        vec![c("a")],
    )));
    h.settle("init2 running", |h| h.started() == ["side", "init2"])
        .await;
    h.fake.exit_container("init2", 1);
    h.workers.wake("i9");
    h.settle("the sidecar being stopped", |h| {
        !h.fake.calls_of("stop_container").is_empty()
    })
    .await;
    let held = h.status.status("i9").unwrap();
    assert_eq!(held.phase.as_deref(), Some("Pending"), "{held:?}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.phase("i9"), "Pending", "the sidecar still runs");
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.settle("Failed", |h| h.phase("i9") == "Failed").await;
    let side = h
        .status
        .status("i9")
        .and_then(|s| s.init_container_statuses)
        .and_then(|cs| cs.into_iter().find(|c| c.name == "side"))
        .unwrap();
    assert!(
        side.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some(),
        "Failed comes with the sidecar terminated: {side:?}"
    );
    assert_eq!(h.started(), ["side", "init2"], "main never started");
    h.cancel.cancel();
}

/// init1, sidecar1, init2, sidecar2, init3, main: each starts after the one before it is done
/// (an init container exited 0, a sidecar running); a sidecar with a startup probe only counts
/// once the probe succeeded.
#[tokio::test(start_paused = true)]
async fn sidecars_start_in_their_place_and_gate_on_their_startup_probe() {
    let h = harness().await;
    let mut sidecar2 = sidecar("sidecar2");
    sidecar2.startup_probe = Some(exec_probe(1, 30));
    h.fake.set_exec_behaviour("sidecar2", 1, Duration::ZERO);
    let p = pod_with(
        "s1",
        "Never",
        vec![
            c("init1"),
            sidecar("sidecar1"),
            c("init2"),
            sidecar2,
            c("init3"),
        ],
        vec![c("main")],
    );
    h.workers.update(PodWork::Sync(p));
    h.settle("init1", |h| h.started() == ["init1"]).await;
    h.fake.exit_container("init1", 0);
    h.workers.wake("s1");
    h.settle("sidecar1 then init2", |h| {
        h.started() == ["init1", "sidecar1", "init2"]
    })
    .await;
    h.fake.exit_container("init2", 0);
    h.workers.wake("s1");
    h.settle("sidecar2", |h| {
        h.started().last().map(String::as_str) == Some("sidecar2")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The positive sign: the startup probe ran (and failed) meanwhile.
    let probed = h.fake.calls_of("exec_sync");
    assert!(
        probed.iter().filter(|t| *t == "sidecar2").count() >= 2,
        "sidecar2's startup probe ran: {probed:?}"
    );
    assert_eq!(
        h.started().last().map(String::as_str),
        Some("sidecar2"),
        "init3 waits for sidecar2's startup probe"
    );
    h.fake.set_exec_behaviour("sidecar2", 0, Duration::ZERO);
    // The startup probe runs every second.
    tokio::time::sleep(Duration::from_secs(1)).await;
    h.settle("init3 after the startup probe", |h| {
        h.started().last().map(String::as_str) == Some("init3")
    })
    .await;
    h.fake.exit_container("init3", 0);
    h.workers.wake("s1");
    h.settle("main", |h| {
        h.started().last().map(String::as_str) == Some("main")
    })
    .await;
    assert_eq!(
        h.fake.running_container_names(),
        ["main", "sidecar1", "sidecar2"]
    );
    // A sidecar that exits is restarted, whatever the pod's restartPolicy (Never here).
    h.fake.exit_container("sidecar1", 1);
    h.workers.wake("s1");
    h.settle("sidecar1 restarted", |h| {
        h.fake.running_container_names() == ["main", "sidecar1", "sidecar2"]
    })
    .await;
    // When main is done for good, the sidecars are stopped and the pod succeeds.
    h.fake.exit_container("main", 0);
    h.workers.wake("s1");
    h.settle("Succeeded", |h| h.phase("s1") == "Succeeded")
        .await;
    h.settle("sidecars stopped", |h| {
        h.fake.running_container_names().is_empty()
    })
    .await;
    h.cancel.cancel();
}

/// Regular containers stop first, in parallel, their preStop hooks in parallel; sidecars stop
/// after the last of them, in reverse spec order.
#[tokio::test(start_paused = true)]
async fn termination_stops_regular_containers_then_sidecars_in_reverse_order() {
    let h = harness().await;
    let with_pre_stop = |mut c: Container| {
        c.lifecycle = Some(Lifecycle {
            pre_stop: Some(exec_handler(&["drain"])),
            ..Default::default()
        });
        c
    };
    h.fake.set_exec_behaviour("a", 0, Duration::from_secs(3));
    h.fake.set_exec_behaviour("b", 0, Duration::from_secs(3));
    let p = pod_with(
        "t1",
        "Always",
        vec![sidecar("s1"), sidecar("s2")],
        vec![with_pre_stop(c("a")), with_pre_stop(c("b"))],
    );
    h.workers.update(PodWork::Sync(p.clone()));
    h.settle("all running", |h| {
        h.fake.running_container_names() == ["a", "b", "s1", "s2"]
    })
    .await;
    let t0 = tokio::time::Instant::now();
    h.workers.update(PodWork::Kill {
        pod: p,
        grace: None,
        remove: false,
    });
    for _ in 0..100 {
        if h.fake.running_container_names().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let calls = h.fake.calls();
    let hooks: Vec<(String, u64)> = calls
        .iter()
        .filter(|c| c.op == "exec_sync")
        .map(|c| (c.target.clone(), (c.at - t0).as_secs()))
        .collect();
    assert_eq!(hooks.len(), 2);
    assert!(
        hooks.iter().all(|(_, at)| *at == 0),
        "preStop hooks run in parallel: {hooks:?}"
    );
    let stops: Vec<(String, u64)> = calls
        .iter()
        .filter(|c| c.op == "stop_container")
        .map(|c| (c.target.clone(), (c.at - t0).as_secs()))
        .collect();
    let names: Vec<&str> = stops.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        &names[2..],
        ["s2", "s1"],
        "sidecars in reverse order, after the regular ones: {stops:?}"
    );
    let mut regular: Vec<&str> = names[..2].to_vec();
    regular.sort();
    assert_eq!(regular, ["a", "b"]);
    assert!(
        stops.iter().all(|(_, at)| *at == 3),
        "all stops after the 3 s hooks: {stops:?}"
    );
    h.cancel.cancel();
}

/// When the grace period runs out before the regular containers exit, every remaining
/// container gets the short final window at once.
#[tokio::test(start_paused = true)]
async fn grace_expiry_kills_everything_left() {
    let h = harness().await;
    h.fake.set_ignores_sigterm("a");
    let p = pod_with(
        "t2",
        "Always",
        vec![sidecar("s1"), sidecar("s2")],
        vec![c("a")],
    );
    h.workers.update(PodWork::Sync(p.clone()));
    h.settle("all running", |h| {
        h.fake.running_container_names() == ["a", "s1", "s2"]
    })
    .await;
    let t0 = tokio::time::Instant::now();
    h.workers.update(PodWork::Kill {
        pod: p,
        grace: None,
        remove: false,
    });
    for _ in 0..200 {
        if h.fake.running_container_names().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stops: Vec<(String, u64, String)> = h
        .fake
        .calls()
        .into_iter()
        .filter(|c| c.op == "stop_container")
        .map(|c| (c.target.clone(), (c.at - t0).as_secs(), c.detail))
        .collect();
    assert_eq!(
        stops,
        [
            ("a".to_string(), 0, "timeout=7".to_string()),
            ("s2".to_string(), 7, "timeout=2".to_string()),
            ("s1".to_string(), 7, "timeout=2".to_string()),
        ],
        "the pod's grace period is 7 s"
    );
    h.cancel.cancel();
}

/// The seed's ml-worker: a sidecar exiting 88 under a RestartAllContainers rule restarts the
/// pod in place — every container killed at once, init containers re-run, same sandbox.
#[tokio::test(start_paused = true)]
async fn restart_all_containers_restarts_the_pod_in_place() {
    let h = harness().await;
    let mut watcher = sidecar("watcher-sidecar");
    watcher.restart_policy_rules = Some(vec![ContainerRestartRule {
        action: "RestartAllContainers".into(),
        exit_codes: Some(ContainerRestartRuleOnExitCodes {
            operator: "In".into(),
            values: Some(vec![88]),
        }),
    }]);
    let p = pod_with(
        "r1",
        "Never",
        vec![c("setup-environment"), watcher],
        vec![c("main-application")],
    );
    h.workers.update(PodWork::Sync(p));
    h.settle("setup", |h| h.started() == ["setup-environment"])
        .await;
    h.fake.exit_container("setup-environment", 0);
    h.workers.wake("r1");
    h.settle("running", |h| {
        h.fake.running_container_names() == ["main-application", "watcher-sidecar"]
    })
    .await;
    h.fake.clear_calls();
    h.fake.exit_container("watcher-sidecar", 88);
    h.workers.wake("r1");
    h.settle("setup runs again", |h| h.started() == ["setup-environment"])
        .await;
    let calls = h.fake.calls();
    let stop = calls
        .iter()
        .find(|c| c.op == "stop_container")
        .expect("main killed");
    assert_eq!(
        (stop.target.as_str(), stop.detail.as_str()),
        ("main-application", "timeout=0")
    );
    assert!(
        calls
            .iter()
            .all(|c| c.op != "run_pod_sandbox" && c.op != "stop_pod_sandbox"),
        "the sandbox is kept"
    );
    let condition = |h: &Harness| {
        h.status
            .status("r1")
            .and_then(|s| s.conditions)
            .and_then(|cs| cs.into_iter().find(|c| c.type_ == "PodRestartInPlace"))
            .map(|c| c.status)
    };
    assert_eq!(
        condition(&h).as_deref(),
        Some("False"),
        "PodRestartInPlace is False once the kill is done"
    );
    h.fake.exit_container("setup-environment", 0);
    h.workers.wake("r1");
    h.settle("all running again", |h| {
        h.fake.running_container_names() == ["main-application", "watcher-sidecar"]
    })
    .await;
    assert_eq!(h.phase("r1"), "Running");
    assert_eq!(
        h.restart_count("r1", "main-application"),
        1,
        "restart counts go on"
    );
    // Every container shows the restart and what ended its instance before (the kubelet's
    // RestartingAllContainers), though the runtime no longer holds that instance.
    let status = h.status.status("r1").expect("a status");
    let shown: Vec<_> = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .collect();
    assert_eq!(shown.len(), 3);
    for s in shown {
        let last = s.last_state.as_ref().and_then(|l| l.terminated.as_ref());
        assert!(
            s.restart_count >= 1
                && last.is_some_and(|t| t.reason.as_deref() == Some("RestartingAllContainers")),
            "{}: {s:?}",
            s.name
        );
    }
    h.cancel.cancel();
}

/// The prober's events point at the container's place in the spec, as the kubelet's
/// `fieldPath` does: `spec.initContainers{name}` for a sidecar, `spec.containers{name}` for a
/// regular container.
#[tokio::test(start_paused = true)]
async fn probe_events_of_a_sidecar_name_its_place_in_init_containers() {
    let h = harness().await;
    let mut side = sidecar("side");
    side.readiness_probe = Some(exec_probe(1, 1));
    let mut app = c("app");
    app.readiness_probe = Some(exec_probe(1, 1));
    h.fake.set_exec_behaviour("side", 1, Duration::ZERO);
    h.fake.set_exec_behaviour("app", 1, Duration::ZERO);
    h.workers.update(PodWork::Sync(pod_with(
        "p1",
        "Always",
        vec![side],
        vec![app],
    )));
    let unhealthy = |h: &Harness| -> Vec<(String, String)> {
        let mut seen: Vec<(String, String)> = h
            .events
            .events()
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("Unhealthy"))
            .map(|e| {
                (
                    e.message.unwrap_or_default(),
                    e.involved_object.field_path.unwrap_or_default(),
                )
            })
            .collect();
        seen.sort();
        seen.dedup();
        seen
    };
    h.settle("both readiness probes failed", |h| unhealthy(h).len() >= 2)
        .await;
    let paths: Vec<String> = unhealthy(&h).into_iter().map(|(_, path)| path).collect();
    assert_eq!(
        paths,
        ["spec.containers{app}", "spec.initContainers{side}"],
        "{:#?}",
        unhealthy(&h)
    );
    h.cancel.cancel();
}
