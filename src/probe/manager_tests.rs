//! Component tests: the probe manager and its workers on a paused tokio clock, with a scripted
//! runtime answering the exec probes. Times are asserted exactly.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, ExecAction, Pod, PodSpec, PodStatus, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::broadcast;
use tokio::time::Instant;

use super::*;
use crate::clock::Clock;
use crate::cri::{self, api, Runtime};

/// What the scripted runtime does for one `ExecSync` call.
#[derive(Debug, Clone)]
enum Step {
    /// The command exits with this code and output.
    Exit(i32, &'static str),
    /// The runtime never answers.
    Hang,
    /// The runtime enforces the timeout: DeadlineExceeded after `timeout`.
    Deadline,
    /// The runtime fails the call (not a timeout).
    RpcError,
}

/// A `Runtime` whose `ExecSync` follows a script per command (the last step repeats).
#[derive(Default)]
struct ScriptedRuntime {
    steps: Mutex<HashMap<String, VecDeque<Step>>>,
    calls: Mutex<Vec<(Instant, String, String)>>,
}

impl ScriptedRuntime {
    fn script(&self, command: &str, steps: &[Step]) {
        self.steps
            .lock()
            .unwrap()
            .insert(command.to_string(), steps.iter().cloned().collect());
    }

    fn next(&self, command: &str) -> Step {
        let mut steps = self.steps.lock().unwrap();
        let queue = steps.get_mut(command).expect("unscripted command");
        if queue.len() > 1 {
            queue.pop_front().unwrap()
        } else {
            queue.front().cloned().unwrap()
        }
    }

    /// Seconds after `t0` of every exec of `command` (any container).
    fn times(&self, command: &str, t0: Instant) -> Vec<f64> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, _, c)| c == command)
            .map(|(at, _, _)| (*at - t0).as_secs_f64())
            .collect()
    }

    fn containers(&self, command: &str) -> Vec<String> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, _, c)| c == command)
            .map(|(_, id, _)| id.clone())
            .collect()
    }
}

fn unsupported<T>(op: &'static str) -> cri::Result<T> {
    Err(cri::Error::Missing {
        op,
        target: String::new(),
        what: "support in the scripted runtime",
    })
}

#[async_trait]
impl Runtime for ScriptedRuntime {
    async fn version(&self) -> cri::Result<api::VersionResponse> {
        unsupported("version")
    }
    async fn runtime_conditions(&self) -> cri::Result<Vec<api::RuntimeCondition>> {
        unsupported("runtime_conditions")
    }
    async fn run_pod_sandbox(&self, _: api::PodSandboxConfig, _: &str) -> cri::Result<String> {
        unsupported("run_pod_sandbox")
    }
    async fn stop_pod_sandbox(&self, _: &str) -> cri::Result<()> {
        unsupported("stop_pod_sandbox")
    }
    async fn update_container_resources(
        &self,
        _: &str,
        _: api::LinuxContainerResources,
    ) -> cri::Result<()> {
        unsupported("update_container_resources")
    }
    async fn update_pod_sandbox_resources(
        &self,
        _: &str,
        _: api::LinuxContainerResources,
        _: api::LinuxContainerResources,
    ) -> cri::Result<()> {
        unsupported("update_pod_sandbox_resources")
    }
    async fn remove_pod_sandbox(&self, _: &str) -> cri::Result<()> {
        unsupported("remove_pod_sandbox")
    }
    async fn pod_sandbox_status(&self, _: &str) -> cri::Result<api::PodSandboxStatus> {
        unsupported("pod_sandbox_status")
    }
    async fn pod_sandbox_info(
        &self,
        _: &str,
    ) -> cri::Result<std::collections::HashMap<String, String>> {
        unsupported("pod_sandbox_info")
    }
    async fn list_pod_sandbox(
        &self,
        _: Option<api::PodSandboxFilter>,
    ) -> cri::Result<Vec<api::PodSandbox>> {
        unsupported("list_pod_sandbox")
    }
    async fn create_container(
        &self,
        _: &str,
        _: api::ContainerConfig,
        _: api::PodSandboxConfig,
    ) -> cri::Result<String> {
        unsupported("create_container")
    }
    async fn start_container(&self, _: &str) -> cri::Result<()> {
        unsupported("start_container")
    }
    async fn stop_container(&self, _: &str, _: Duration) -> cri::Result<()> {
        unsupported("stop_container")
    }
    async fn remove_container(&self, _: &str) -> cri::Result<()> {
        unsupported("remove_container")
    }
    async fn list_containers(
        &self,
        _: Option<api::ContainerFilter>,
    ) -> cri::Result<Vec<api::Container>> {
        unsupported("list_containers")
    }
    async fn container_status(&self, _: &str) -> cri::Result<api::ContainerStatus> {
        unsupported("container_status")
    }
    async fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> cri::Result<api::ExecSyncResponse> {
        let command = cmd.join(" ");
        self.calls.lock().unwrap().push((
            Instant::now(),
            container_id.to_string(),
            command.clone(),
        ));
        match self.next(&command) {
            Step::Exit(exit_code, out) => Ok(api::ExecSyncResponse {
                stdout: out.as_bytes().to_vec(),
                stderr: Vec::new(),
                exit_code,
            }),
            Step::Hang => {
                std::future::pending::<()>().await;
                unsupported("exec_sync")
            }
            Step::Deadline => {
                // Just inside the worker's own deadline, as the runtime's answer would be.
                tokio::time::sleep(timeout - Duration::from_millis(1)).await;
                Err(cri::Error::Call {
                    op: "exec_sync",
                    target: container_id.to_string(),
                    status: tonic::Status::deadline_exceeded("context deadline exceeded"),
                })
            }
            Step::RpcError => Err(cri::Error::Call {
                op: "exec_sync",
                target: container_id.to_string(),
                status: tonic::Status::not_found("container not found"),
            }),
        }
    }
}

const OK: Step = Step::Exit(0, "ok");
const FAIL: Step = Step::Exit(1, "boom");
const UID: &str = "uid-1";

struct Harness {
    manager: ProbeManager,
    runtime: Arc<ScriptedRuntime>,
    notified: Arc<Mutex<Vec<(Instant, String)>>>,
    events: Arc<Mutex<Vec<(Instant, ProbeEvent)>>>,
    updates: broadcast::Receiver<ProbeUpdate>,
    t0: Instant,
    base: Timestamp,
}

fn base() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

fn harness() -> Harness {
    harness_with_clock(Clock::starting_at(base()))
}

fn harness_with_clock(clock: Clock) -> Harness {
    let runtime = Arc::new(ScriptedRuntime::default());
    let notified = Arc::new(Mutex::new(Vec::new()));
    let events = Arc::new(Mutex::new(Vec::new()));
    let n = notified.clone();
    let e = events.clone();
    let manager = ProbeManager::new(
        runtime.clone(),
        clock,
        Arc::new(move |uid: &str| n.lock().unwrap().push((Instant::now(), uid.to_string()))),
        Arc::new(move |ev: ProbeEvent| e.lock().unwrap().push((Instant::now(), ev))),
    );
    let updates = manager.subscribe();
    Harness {
        manager,
        runtime,
        notified,
        events,
        updates,
        t0: clock.instant_of(base()),
        base: base(),
    }
}

impl Harness {
    /// Sleeps until `secs` after t0 (the paused clock jumps there).
    async fn at(&self, secs: f64) {
        tokio::time::sleep_until(self.t0 + Duration::from_secs_f64(secs)).await;
    }

    fn running(&self, name: &str, id: &str, started_secs: i64) -> RunningContainer {
        RunningContainer {
            name: name.into(),
            id: id.into(),
            started_at: self.base + jiff::SignedDuration::from_secs(started_secs),
            pod_ip: Some("10.0.0.5".into()),
        }
    }

    fn notify_times(&self) -> Vec<f64> {
        self.notified
            .lock()
            .unwrap()
            .iter()
            .map(|(at, uid)| {
                assert_eq!(uid, UID);
                (*at - self.t0).as_secs_f64()
            })
            .collect()
    }

    fn event_messages(&self) -> Vec<(f64, String)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|(at, ev)| ((*at - self.t0).as_secs_f64(), ev.message.clone()))
            .collect()
    }

    fn drain_updates(&mut self) -> Vec<(String, ProbeKind, ProbeResult)> {
        let mut out = Vec::new();
        while let Ok(u) = self.updates.try_recv() {
            out.push((u.container_id, u.kind, u.result));
        }
        out
    }
}

fn exec_probe(command: &str, configure: impl FnOnce(&mut Probe)) -> Option<Probe> {
    let mut probe = Probe {
        exec: Some(ExecAction {
            command: Some(vec![command.to_string()]),
        }),
        ..Default::default()
    };
    configure(&mut probe);
    Some(probe)
}

fn pod(containers: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            uid: Some(UID.into()),
            namespace: Some("default".into()),
            name: Some("web".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn app(configure: impl FnOnce(&mut Container)) -> Container {
    let mut c = Container {
        name: "app".into(),
        image: Some("busybox".into()),
        ..Default::default()
    };
    configure(&mut c);
    c
}

fn map(entries: &[(&str, bool)]) -> BTreeMap<String, bool> {
    entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[tokio::test(start_paused = true)]
async fn liveness_fails_at_the_third_failure_then_holds_until_replaced() {
    let mut h = harness();
    h.runtime.script("live", &[FAIL]);
    let pod = pod(vec![app(|c| c.liveness_probe = exec_probe("live", |_| {}))]);
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);

    h.at(19.5).await;
    assert_eq!(h.runtime.times("live", h.t0), [0.0, 10.0]);
    assert!(h.manager.failed(UID).is_empty());
    assert!(h.notify_times().is_empty());

    h.at(20.5).await;
    assert_eq!(h.runtime.times("live", h.t0), [0.0, 10.0, 20.0]);
    assert_eq!(
        h.manager.failed(UID),
        BTreeMap::from([(
            "c1".to_string(),
            (
                ProbeKind::Liveness,
                "Container app failed liveness probe".to_string()
            )
        )])
    );
    assert_eq!(h.notify_times(), [20.0]);
    assert_eq!(
        h.drain_updates(),
        [("c1".to_string(), ProbeKind::Liveness, ProbeResult::Failure)]
    );
    assert_eq!(
        h.event_messages(),
        [
            (0.0, "Liveness probe failed: boom".to_string()),
            (10.0, "Liveness probe failed: boom".to_string()),
            (20.0, "Liveness probe failed: boom".to_string()),
        ]
    );

    // Held: no more probes of this instance, even when the pod worker syncs again.
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    h.at(60.5).await;
    assert_eq!(h.runtime.times("live", h.t0).len(), 3);
    assert_eq!(h.manager.worker_count(UID), 0);

    // The restarted container gets a fresh worker and a fresh result.
    h.runtime.script("live", &[OK]);
    h.manager.sync_pod(&pod, &[h.running("app", "c2", 61)]);
    assert!(h.manager.failed(UID).is_empty());
    h.at(71.5).await;
    assert_eq!(h.runtime.times("live", h.t0), [0.0, 10.0, 20.0, 61.0, 71.0]);
    assert_eq!(h.runtime.containers("live")[3..], ["c2", "c2"]);
    assert_eq!(h.notify_times(), [20.0], "a seeded result is not a change");
}

#[tokio::test(start_paused = true)]
async fn initial_delay_counts_from_started_at_then_the_period() {
    let h = harness();
    h.runtime.script("live", &[OK]);
    let pod = pod(vec![app(|c| {
        c.liveness_probe = exec_probe("live", |p| {
            p.initial_delay_seconds = Some(15);
            p.period_seconds = Some(10);
        })
    })]);
    // The container started at 5 s; the pod worker first sees it at 8 s.
    h.at(8.0).await;
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 5)]);
    h.at(19.9).await;
    assert!(h.runtime.times("live", h.t0).is_empty());
    h.at(40.5).await;
    assert_eq!(h.runtime.times("live", h.t0), [20.0, 30.0, 40.0]);
}

#[tokio::test(start_paused = true)]
async fn an_old_container_is_probed_at_once() {
    let h = harness();
    h.runtime.script("live", &[OK]);
    let pod = pod(vec![app(|c| {
        c.liveness_probe = exec_probe("live", |p| p.initial_delay_seconds = Some(15))
    })]);
    h.at(100.0).await;
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    h.at(110.5).await;
    assert_eq!(h.runtime.times("live", h.t0), [100.0, 110.0]);
}

#[tokio::test(start_paused = true)]
async fn readiness_failures_before_the_first_success_are_not_counted() {
    let h = harness();
    h.runtime
        .script("ready", &[FAIL, FAIL, OK, FAIL, FAIL, FAIL, OK]);
    let pod = pod(vec![app(|c| {
        c.readiness_probe = exec_probe("ready", |_| {})
    })]);
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    assert_eq!(h.manager.readiness(UID), map(&[("c1", false)]));

    h.at(10.5).await;
    assert_eq!(h.manager.readiness(UID), map(&[("c1", false)]));
    assert!(h.notify_times().is_empty());

    h.at(20.5).await;
    assert_eq!(h.manager.readiness(UID), map(&[("c1", true)]));
    h.at(40.5).await;
    assert_eq!(
        h.manager.readiness(UID),
        map(&[("c1", true)]),
        "two failures"
    );
    h.at(50.5).await;
    assert_eq!(h.manager.readiness(UID), map(&[("c1", false)]), "the third");
    h.at(60.5).await;
    assert_eq!(h.manager.readiness(UID), map(&[("c1", true)]));
    assert_eq!(h.notify_times(), [20.0, 50.0, 60.0]);
    // Every failed attempt is an Unhealthy event, counted or not.
    let failures: Vec<f64> = h.event_messages().into_iter().map(|(t, _)| t).collect();
    assert_eq!(failures, [0.0, 10.0, 30.0, 40.0, 50.0]);
    assert!(h.manager.failed(UID).is_empty(), "readiness never kills");
}

#[tokio::test(start_paused = true)]
async fn success_threshold_is_exact() {
    let h = harness();
    h.runtime.script("ready", &[OK]);
    let pod = pod(vec![app(|c| {
        c.readiness_probe = exec_probe("ready", |p| {
            p.success_threshold = Some(3);
            p.period_seconds = Some(5);
        })
    })]);
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    h.at(9.5).await;
    assert_eq!(h.manager.readiness(UID), map(&[("c1", false)]));
    h.at(10.5).await;
    assert_eq!(h.manager.readiness(UID), map(&[("c1", true)]));
    h.at(60.5).await;
    assert_eq!(
        h.notify_times(),
        [10.0],
        "notified once, not on every success"
    );
}

#[tokio::test(start_paused = true)]
async fn a_timeout_is_a_failure() {
    for (name, step) in [
        ("runtime hangs", Step::Hang),
        ("runtime deadline", Step::Deadline),
    ] {
        let h = harness();
        h.runtime.script("live", &[step]);
        let pod = pod(vec![app(|c| {
            c.liveness_probe = exec_probe("live", |p| {
                p.timeout_seconds = Some(2);
                p.failure_threshold = Some(1);
            })
        })]);
        h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
        h.at(1.5).await;
        assert!(h.manager.failed(UID).is_empty(), "{name}");
        h.at(2.5).await;
        assert_eq!(
            h.manager.failed(UID).keys().collect::<Vec<_>>(),
            ["c1"],
            "{name}"
        );
        let messages: Vec<String> = h.event_messages().into_iter().map(|(_, m)| m).collect();
        assert_eq!(
            messages,
            ["Liveness probe failed: command \"live\" timed out"],
            "{name}"
        );
        h.manager.remove_pod(UID);
    }
}

#[tokio::test(start_paused = true)]
async fn startup_gates_liveness_and_readiness_then_stops() {
    let h = harness();
    h.runtime.script("start", &[FAIL, FAIL, OK]);
    h.runtime.script("live", &[OK]);
    h.runtime.script("ready", &[OK]);
    let pod = pod(vec![app(|c| {
        c.startup_probe = exec_probe("start", |p| p.failure_threshold = Some(30));
        c.liveness_probe = exec_probe("live", |_| {});
        c.readiness_probe = exec_probe("ready", |_| {});
    })]);
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    assert_eq!(h.manager.startup(UID), map(&[("c1", false)]));
    assert!(
        h.manager.readiness(UID).is_empty(),
        "no readiness before startup"
    );

    h.at(19.5).await;
    // Syncs while starting up do not start the gated probes.
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    assert_eq!(h.runtime.times("start", h.t0), [0.0, 10.0]);
    assert!(h.runtime.times("live", h.t0).is_empty());
    assert!(h.runtime.times("ready", h.t0).is_empty());

    h.at(20.5).await;
    assert_eq!(h.manager.startup(UID), map(&[("c1", true)]));
    assert_eq!(h.manager.readiness(UID), map(&[("c1", true)]));
    // Readiness and liveness start at once: their delay (0 s) is long past.
    assert_eq!(h.runtime.times("live", h.t0), [20.0]);
    assert_eq!(h.runtime.times("ready", h.t0), [20.0]);

    h.at(40.5).await;
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    assert_eq!(
        h.runtime.times("start", h.t0),
        [0.0, 10.0, 20.0],
        "startup stopped"
    );
    assert_eq!(h.runtime.times("live", h.t0), [20.0, 30.0, 40.0]);
    assert_eq!(h.manager.worker_count(UID), 2);
    assert_eq!(h.notify_times(), [20.0, 20.0], "started, then ready");
}

#[tokio::test(start_paused = true)]
async fn a_failed_startup_probe_asks_for_a_restart() {
    let h = harness();
    h.runtime.script("start", &[FAIL]);
    h.runtime.script("live", &[OK]);
    let pod = pod(vec![app(|c| {
        c.startup_probe = exec_probe("start", |p| p.failure_threshold = Some(2));
        c.liveness_probe = exec_probe("live", |_| {});
    })]);
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    h.at(10.5).await;
    assert_eq!(
        h.manager.failed(UID),
        BTreeMap::from([(
            "c1".to_string(),
            (
                ProbeKind::Startup,
                "Container app failed startup probe".to_string()
            )
        )])
    );
    assert_eq!(h.manager.startup(UID), map(&[("c1", false)]));
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    h.at(60.5).await;
    assert_eq!(h.runtime.times("start", h.t0), [0.0, 10.0]);
    assert!(h.runtime.times("live", h.t0).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_container_that_stopped_running_loses_its_workers_and_results() {
    let h = harness();
    h.runtime.script("ready", &[OK]);
    let pod = pod(vec![app(|c| {
        c.readiness_probe = exec_probe("ready", |_| {})
    })]);
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    h.at(10.5).await;
    assert_eq!(h.manager.readiness(UID), map(&[("c1", true)]));
    h.manager.sync_pod(&pod, &[]);
    assert_eq!(h.manager.worker_count(UID), 0);
    assert!(h.manager.readiness(UID).is_empty());
    h.at(50.5).await;
    assert_eq!(h.runtime.times("ready", h.t0), [0.0, 10.0]);
}

#[tokio::test(start_paused = true)]
async fn termination_stops_liveness_and_keeps_readiness_until_removal() {
    let h = harness();
    h.runtime.script("live", &[OK]);
    h.runtime.script("ready", &[OK, OK, FAIL]);
    let pod = pod(vec![app(|c| {
        c.liveness_probe = exec_probe("live", |_| {});
        c.readiness_probe = exec_probe("ready", |p| p.failure_threshold = Some(1));
    })]);
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    h.at(5.0).await;
    h.manager.pod_terminating(UID);
    assert_eq!(h.manager.worker_count(UID), 1);
    // A sync during termination does not bring liveness back.
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    assert_eq!(h.manager.worker_count(UID), 1);

    h.at(20.5).await;
    assert_eq!(h.runtime.times("live", h.t0), [0.0]);
    assert_eq!(h.runtime.times("ready", h.t0), [0.0, 10.0, 20.0]);
    assert_eq!(
        h.manager.readiness(UID),
        map(&[("c1", false)]),
        "a failing readiness probe still takes the pod out of service"
    );

    h.manager.remove_pod(UID);
    assert_eq!(h.manager.worker_count(UID), 0);
    assert!(h.manager.readiness(UID).is_empty());
    h.at(60.5).await;
    assert_eq!(h.runtime.times("ready", h.t0).len(), 3);
}

#[tokio::test(start_paused = true)]
async fn errored_attempts_are_retried_at_once_and_not_counted() {
    let h = harness();
    h.runtime.script(
        "live",
        &[Step::RpcError, Step::RpcError, Step::RpcError, FAIL],
    );
    let pod = pod(vec![app(|c| {
        c.liveness_probe = exec_probe("live", |p| p.failure_threshold = Some(1))
    })]);
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    h.at(0.5).await;
    assert_eq!(h.runtime.times("live", h.t0), [0.0, 0.0, 0.0]);
    assert!(h.manager.failed(UID).is_empty());
    h.at(10.5).await;
    assert_eq!(h.manager.failed(UID).len(), 1);
    assert_eq!(
        h.event_messages(),
        [
            (
                0.0,
                "Liveness probe errored: rpc error: code = NotFound desc = container not found"
                    .to_string()
            ),
            (10.0, "Liveness probe failed: boom".to_string()),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn events_name_the_pod_and_container() {
    let h = harness();
    h.runtime.script("ready", &[FAIL]);
    let pod = pod(vec![app(|c| {
        c.readiness_probe = exec_probe("ready", |_| {})
    })]);
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    h.at(0.5).await;
    let events = h.events.lock().unwrap();
    assert_eq!(
        events[0].1,
        ProbeEvent {
            pod_uid: UID.into(),
            pod_namespace: "default".into(),
            pod_name: "web".into(),
            container_name: "app".into(),
            container_kind: crate::podspec::ContainerKind::Regular,
            container_id: "c1".into(),
            kind: ProbeKind::Readiness,
            event_type: "Warning",
            reason: "Unhealthy",
            message: "Readiness probe failed: boom".into(),
        }
    );
}

#[tokio::test(start_paused = true)]
async fn an_adopted_container_keeps_its_reported_state_and_is_spread() {
    let clock = Clock::starting_at(base());
    // nodelet (re)starts 100 s after the container did.
    tokio::time::advance(Duration::from_secs(100)).await;
    let h = harness_with_clock(clock);
    h.runtime.script("start", &[OK]);
    h.runtime.script("ready", &[OK]);
    let mut pod = pod(vec![app(|c| {
        c.startup_probe = exec_probe("start", |_| {});
        c.readiness_probe = exec_probe("ready", |_| {});
    })]);
    pod.status = Some(PodStatus {
        container_statuses: Some(vec![ContainerStatus {
            name: "app".into(),
            container_id: Some("containerd://c1".into()),
            started: Some(true),
            ready: true,
            ..Default::default()
        }]),
        ..Default::default()
    });
    h.manager.sync_pod(&pod, &[h.running("app", "c1", 0)]);
    assert_eq!(h.manager.startup(UID), map(&[("c1", true)]));
    assert_eq!(h.manager.readiness(UID), map(&[("c1", true)]));
    let spread = super::worker::adoption_spread("c1", Duration::from_secs(10)).as_secs_f64();
    assert!(spread > 0.0);
    h.at(100.0 + spread + 10.5).await;
    assert_eq!(
        h.runtime.times("ready", h.t0),
        [100.0 + spread, 110.0 + spread],
        "the first probe is spread, then every period"
    );
    assert!(
        h.runtime.times("start", h.t0).is_empty(),
        "startup already passed"
    );
    assert!(h.notify_times().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_removed_container_stops_being_probed() {
    let h = harness();
    h.runtime.script("ready", &[OK]);
    h.runtime.script("live", &[OK]);
    let with_probe = pod(vec![
        app(|c| c.readiness_probe = exec_probe("ready", |_| {})),
        Container {
            name: "side".into(),
            liveness_probe: exec_probe("live", |_| {}),
            ..Default::default()
        },
    ]);
    let running = [h.running("app", "c1", 0), h.running("side", "c2", 0)];
    h.manager.sync_pod(&with_probe, &running);
    assert_eq!(h.manager.worker_count(UID), 2);
    h.at(0.5).await;
    // The same pod without the sidecar in its spec: its worker goes.
    let without = pod(vec![app(|c| {
        c.readiness_probe = exec_probe("ready", |_| {})
    })]);
    h.manager.sync_pod(&without, &running);
    assert_eq!(h.manager.worker_count(UID), 1);
    h.at(30.5).await;
    assert_eq!(h.runtime.times("live", h.t0), [0.0]);
}
