//! Component tests: interruptible termination and `kill_pod`, against the in-memory fake
//! runtime with tokio's clock paused, so the grace period arithmetic is exact.

mod harness;

use std::sync::Arc;
use std::time::Duration;

use harness::*;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodelet::lifecycle::kill::PodKiller;
use nodelet::pod::manager::PodManager;
use nodelet::pod::worker_state::PodWork;
use nodelet::source::SourceSnapshot;
use nodelet::status::StatusMutation;
use tokio::time::Instant;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The pod with `terminationGracePeriodSeconds: grace`.
fn with_grace(p: Arc<Pod>, grace: i64) -> Arc<Pod> {
    let mut p = (*p).clone();
    p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(grace);
    Arc::new(p)
}

/// The pod as the API server shows it once deleted with `grace` (0: a force delete).
fn deleting(p: &Arc<Pod>, grace: i64) -> Arc<Pod> {
    let mut p = (**p).clone();
    p.metadata.deletion_timestamp = Some(Time("2026-01-01T00:01:00Z".parse().unwrap()));
    p.metadata.deletion_grace_period_seconds = Some(grace);
    Arc::new(p)
}

/// StopContainer calls since `t0`: (seconds after `t0`, detail).
fn stops_since(h: &Harness, t0: Instant) -> Vec<(u64, String)> {
    h.fake
        .calls()
        .into_iter()
        .filter(|c| c.op == "stop_container")
        .map(|c| ((c.at - t0).as_secs(), c.detail))
        .collect()
}

/// The exit code of the pod's container `name` in its published status, once terminated.
fn exit_code(h: &Harness, uid: &str, name: &str) -> Option<i32> {
    h.status
        .status(uid)?
        .container_statuses?
        .into_iter()
        .find(|c| c.name == name)?
        .state?
        .terminated
        .map(|t| t.exit_code)
}

fn evicted() -> StatusMutation {
    StatusMutation::failed(
        "Evicted",
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi.",
    )
    .with_condition(PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        reason: Some("TerminationByKubelet".into()),
        message: Some("The node was low on resource: memory.".into()),
        ..Default::default()
    })
}

async fn running(h: &Harness, p: &Arc<Pod>) {
    h.workers.update(PodWork::Sync(p.clone()));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
}

/// A pod deleted with a 30 s grace period whose container ignores SIGTERM; 5 s in, a force
/// delete (grace 0): the container is SIGKILLed at once instead of 25 s later, the pod is
/// terminal and reclaimed within the 2 s floor.
#[tokio::test(start_paused = true)]
async fn force_delete_during_a_30s_grace_period_ends_the_pod_within_the_2s_floor() {
    let h = harness().await;
    h.fake.set_ignores_sigterm("a");
    let p = with_grace(pod("f1", "Always", &["a"], "localhost/app:1"), 30);
    running(&h, &p).await;
    let t0 = Instant::now();
    h.workers.update(PodWork::Delete {
        pod: deleting(&p, 30),
    });
    h.settle("StopContainer with the 30 s grace period", |h| {
        stops_since(h, t0) == [(0, "timeout=30".to_string())]
    })
    .await;
    tokio::time::sleep(secs(5)).await;
    assert_eq!(h.fake.running_container_names(), ["a"], "still stopping");
    let forced = Instant::now();
    h.workers.update(PodWork::Delete {
        pod: deleting(&p, 0),
    });
    h.settle("reclaimed", |h| h.status.lifecycle("f1").reclaimed)
        .await;
    let took = forced.elapsed();
    assert!(took <= secs(2), "ended {took:?} after the force delete");
    assert_eq!(
        stops_since(&h, t0),
        [(0, "timeout=30".to_string()), (5, "timeout=0".to_string())],
        "the running StopContainer was replaced by one with no grace"
    );
    assert!(matches!(h.phase("f1").as_str(), "Failed" | "Succeeded"));
    assert_eq!(exit_code(&h, "f1", "a"), Some(137), "SIGKILLed");
    assert_eq!(h.fake.container_count(), 0, "containers removed");
    h.cancel.cancel();
}

/// The deletion shows in the status manager's pod (what `/pods` serves) when the termination
/// starts, as the kubelet's `SyncTerminatingPod` publishes first: not 25 s later, when the
/// container that ignores SIGTERM is finally gone.
#[tokio::test(start_paused = true)]
async fn a_deleted_pod_shows_its_deletion_while_its_containers_stop() {
    let h = harness().await;
    h.fake.set_ignores_sigterm("a");
    let p = with_grace(pod("d1", "Always", &["a"], "localhost/app:1"), 30);
    running(&h, &p).await;
    let t0 = Instant::now();
    h.workers.update(PodWork::Delete {
        pod: deleting(&p, 30),
    });
    h.settle("StopContainer with the 30 s grace period", |h| {
        stops_since(h, t0) == [(0, "timeout=30".to_string())]
    })
    .await;
    let shown = |h: &Harness| {
        h.status
            .pods()
            .iter()
            .find(|p| p.metadata.uid.as_deref() == Some("d1"))
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
    };
    assert!(
        shown(&h),
        "the deletion is not shown while the container stops"
    );
    assert_eq!(h.fake.running_container_names(), ["a"], "still stopping");
    h.cancel.cancel();
}

/// The runtime refusing to stop a container of a pod being deleted is the kubelet's
/// `FailedKillPod` event, with the refusal in its words.
#[tokio::test(start_paused = true)]
async fn a_refused_stop_is_a_failed_kill_pod_event() {
    let h = harness().await;
    let p = with_grace(pod("k1", "Always", &["a"], "localhost/app:1"), 30);
    running(&h, &p).await;
    h.fake
        .fail_next("stop_container", tonic::Status::unknown("task is stuck"));
    h.workers.update(PodWork::Delete {
        pod: deleting(&p, 30),
    });
    let event = h.event("FailedKillPod").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.message.as_deref(),
        Some(
            r#"error killing pod: failed to "KillContainer" for "a" with KillContainerError: "rpc error: code = Unknown desc = task is stuck""#
        )
    );
    assert_eq!(event.involved_object.uid.as_deref(), Some("k1"));
    h.cancel.cancel();
}

/// A preStop hook still running is cut off when a shorter grace period arrives; the container
/// then gets the 2 s minimum window after its stop signal — none after a force.
#[tokio::test(start_paused = true)]
async fn a_shorter_grace_cuts_a_running_pre_stop_hook_short() {
    // (asked grace, stop signal at (s after the kill), StopContainer timeout, terminated at)
    let cases = [
        (Some(1), 6, "timeout=2", 8),
        (Some(0), 5, "timeout=0", 5),
        (Some(10), 15, "timeout=2", 17),
    ];
    for (asked, signal_at, timeout, done_at) in cases {
        let h = harness().await;
        h.fake.set_ignores_sigterm("a");
        h.fake.set_exec_behaviour("a", 0, secs(100));
        let p = with_lifecycle(
            with_grace(pod("f2", "Always", &["a"], "localhost/app:1"), 30),
            |c| {
                c.lifecycle = Some(k8s_openapi::api::core::v1::Lifecycle {
                    pre_stop: Some(exec_handler(&["sleep", "100"])),
                    ..Default::default()
                });
            },
        );
        running(&h, &p).await;
        let t0 = Instant::now();
        h.workers.update(PodWork::Kill {
            pod: p.clone(),
            grace: None,
            remove: false,
        });
        h.settle("preStop running", |h| {
            !h.fake.calls_of("exec_sync").is_empty()
        })
        .await;
        tokio::time::sleep(secs(5)).await;
        let killed = h.workers.kill_pod(p.clone(), asked.map(secs), evicted());
        killed.terminated().await;
        let case = format!("asked {asked:?}");
        assert_eq!(t0.elapsed().as_secs(), done_at, "{case}");
        assert_eq!(
            stops_since(&h, t0),
            [(signal_at, timeout.to_string())],
            "{case}"
        );
        assert_eq!(exit_code(&h, "f2", "a"), Some(137), "{case}");
        assert_eq!(h.phase("f2"), "Failed", "{case}");
        h.cancel.cancel();
    }
}

/// A preStop hook that outlives the grace period is not cancelled when the period ends (the
/// kubelet runs hooks without a timeout and only stops waiting): the container gets its stop
/// signal then and the 2 s minimum window, and the hook's command ends with the container
/// (Kubernetes' "The PreStop hooks don't exit" conformance test times it at about 32 s of a
/// 30 s grace period). A hook shorter than the period is never cancelled.
#[tokio::test(start_paused = true)]
async fn a_pre_stop_hook_outliving_the_grace_period_runs_until_the_container_is_stopped() {
    // (the hook's command runs (s), StopContainer at (s), its timeout, the hook cancelled at (s))
    let cases = [(100, 30, "timeout=2", Some(32)), (5, 5, "timeout=25", None)];
    for (runs, stop_at, timeout, cancelled_at) in cases {
        let h = harness().await;
        h.fake.set_ignores_sigterm("a");
        h.fake.set_exec_behaviour("a", 0, secs(runs));
        let p = with_lifecycle(
            with_grace(pod("f5", "Never", &["a"], "localhost/app:1"), 30),
            |c| {
                c.lifecycle = Some(k8s_openapi::api::core::v1::Lifecycle {
                    pre_stop: Some(exec_handler(&["sleep", "forever"])),
                    ..Default::default()
                });
            },
        );
        running(&h, &p).await;
        let t0 = Instant::now();
        let killed = h
            .workers
            .kill_pod(p.clone(), None, StatusMutation::default());
        killed.terminated().await;
        let case = format!("a hook of {runs} s");
        assert_eq!(
            stops_since(&h, t0),
            [(stop_at, timeout.to_string())],
            "{case}"
        );
        let cancelled: Vec<u64> = h
            .fake
            .calls()
            .into_iter()
            .filter(|c| c.op == "exec_sync_cancelled")
            .map(|c| (c.at - t0).as_secs())
            .collect();
        assert_eq!(cancelled, Vec::from_iter(cancelled_at), "{case}");
        let reasons: Vec<String> = h
            .events
            .events()
            .into_iter()
            .filter_map(|e| e.reason)
            .collect();
        assert!(
            reasons.iter().all(|r| r != "FailedPreStopHook"),
            "{case}: the hook did not fail: {reasons:?}"
        );
        h.cancel.cancel();
    }
}

/// A longer grace period asked during a termination does not lengthen it: the container that
/// ignores SIGTERM is SIGKILLed when the first (10 s) period ends — and a preStop hook still
/// running is cut off at its end, then gets the 2 s window.
#[tokio::test(start_paused = true)]
async fn a_longer_grace_later_does_not_extend_the_termination() {
    // (preStop hook, StopContainer at (s), its timeout, terminated at (s))
    let cases = [(false, 0, "timeout=10", 10), (true, 10, "timeout=2", 12)];
    for (hook, stop_at, timeout, done_at) in cases {
        let h = harness().await;
        h.fake.set_ignores_sigterm("a");
        h.fake.set_exec_behaviour("a", 0, secs(100));
        let mut p = with_grace(pod("f3", "Always", &["a"], "localhost/app:1"), 10);
        if hook {
            p = with_lifecycle(p, |c| {
                c.lifecycle = Some(k8s_openapi::api::core::v1::Lifecycle {
                    pre_stop: Some(exec_handler(&["sleep", "100"])),
                    ..Default::default()
                });
            });
        }
        running(&h, &p).await;
        let t0 = Instant::now();
        let first = h
            .workers
            .kill_pod(p.clone(), None, StatusMutation::default());
        h.settle("stopping", |h| {
            !stops_since(h, t0).is_empty() || !h.fake.calls_of("exec_sync").is_empty()
        })
        .await;
        tokio::time::sleep(secs(2)).await;
        let longer = h.workers.kill_pod(p.clone(), Some(secs(60)), evicted());
        h.workers.update(PodWork::Delete {
            pod: deleting(&p, 60),
        });
        assert!(!longer.is_terminated());
        first.terminated().await;
        let case = format!("preStop hook: {hook}");
        assert_eq!(
            t0.elapsed().as_secs(),
            done_at,
            "{case}: the first grace period stands"
        );
        assert!(longer.is_terminated(), "{case}");
        assert_eq!(
            stops_since(&h, t0),
            [(stop_at, timeout.to_string())],
            "{case}: one StopContainer, never a longer one"
        );
        assert_eq!(exit_code(&h, "f3", "a"), Some(137), "{case}");
        h.settle("reclaimed (the deletion still applies)", |h| {
            h.status.lifecycle("f3").reclaimed
        })
        .await;
        h.cancel.cancel();
    }
}

/// `kill_pod` with a status mutation: the pod keeps its phase while its container stops, then
/// its final status says exactly what the mutation says, in one status version; a later kill
/// of the terminated pod changes nothing.
#[tokio::test(start_paused = true)]
async fn kill_pod_applies_its_status_mutation_to_the_final_status_once() {
    let h = harness().await;
    h.fake.set_ignores_sigterm("a");
    let p = pod("f4", "Always", &["a"], "localhost/app:1");
    running(&h, &p).await;
    // Every status version the status manager publishes for the pod.
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    tokio::spawn({
        let status = h.status.clone();
        let seen = seen.clone();
        let mut changes = h.status.subscribe();
        async move {
            while changes.changed().await.is_ok() {
                if let Some(v) = status.get("f4") {
                    seen.lock()
                        .unwrap()
                        .push((v.version, v.pod.status.clone().unwrap()));
                }
            }
        }
    });
    let killer: Arc<dyn PodKiller> = Arc::new(h.workers.clone());
    let t0 = Instant::now();
    let killed = killer.kill_pod(p.clone(), None, evicted());
    // The positive sign first: the termination is under way (StopContainer was called).
    h.settle("stopping", |h| !stops_since(h, t0).is_empty())
        .await;
    tokio::time::sleep(secs(3)).await;
    assert_eq!(
        h.phase("f4"),
        "Running",
        "no terminal phase while a container runs"
    );
    assert!(!killed.is_terminated());
    killed.clone().terminated().await;
    assert_eq!(t0.elapsed(), secs(7), "the pod's own grace period");

    let status = h.status.status("f4").unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(status.reason.as_deref(), Some("Evicted"));
    assert_eq!(status.message, evicted().message);
    let disruption: Vec<&PodCondition> = status
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.type_ == "DisruptionTarget")
        .collect();
    assert_eq!(disruption.len(), 1, "{:?}", status.conditions);
    assert_eq!(
        disruption[0].reason.as_deref(),
        Some("TerminationByKubelet")
    );
    assert_eq!(exit_code(&h, "f4", "a"), Some(137));
    let final_version = h.status.get("f4").unwrap().version;

    // Killing the terminated pod again, then deleting it: the deletion is carried out (the
    // worker is alive and reading updates), and the final status is never rebuilt.
    let again = h.workers.kill_pod(
        p.clone(),
        Some(Duration::ZERO),
        StatusMutation::failed("Other", "x"),
    );
    assert!(again.is_terminated(), "already terminated");
    h.workers.update(PodWork::Delete {
        pod: deleting(&p, 0),
    });
    h.settle("reclaimed", |h| h.status.lifecycle("f4").reclaimed)
        .await;
    tokio::time::sleep(secs(300)).await;
    assert_eq!(h.status.get("f4").unwrap().version, final_version);
    assert_eq!(
        h.status.status("f4").unwrap().reason.as_deref(),
        Some("Evicted")
    );
    let seen = seen.lock().unwrap().clone();
    // (The reclaim wakes the status readers too, without a new version.)
    let mut failed: Vec<u64> = seen
        .iter()
        .filter(|(_, s)| s.phase.as_deref() == Some("Failed"))
        .map(|(v, _)| *v)
        .collect();
    failed.dedup();
    assert_eq!(
        failed,
        [final_version],
        "one version carries the mutation: {seen:#?}"
    );
    assert!(
        seen.iter()
            .filter(|(v, _)| *v < final_version)
            .all(|(_, s)| s.reason.is_none()
                && !s
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "DisruptionTarget")),
        "nothing of it before the final status"
    );
    h.cancel.cancel();
}

/// Through the pod manager, as in cluster mode: a pod deleted with 30 s, then force-deleted.
/// The API server removes it at once; its DELETED object (grace 0) ends the termination under
/// way, and the pod is removed and forgotten within the 2 s floor.
#[tokio::test(start_paused = true)]
async fn an_api_pod_removed_by_a_force_delete_is_killed_at_once() {
    let h = harness().await;
    h.fake.set_ignores_sigterm("a");
    let p = with_grace(pod("f5", "Always", &["a"], "localhost/app:1"), 30);
    let (mut manager, _ready) =
        PodManager::new(h.workers.clone(), h.fake.clone(), "node1".into(), vec![]);
    let snapshot = |pods: Vec<Arc<Pod>>, deleted: Vec<Arc<Pod>>| SourceSnapshot {
        source: nodelet::source::api::API_SOURCE,
        pods: pods.into_iter().map(|p| (*p).clone()).collect(),
        errors: vec![],
        deleted: deleted.into_iter().map(|p| (*p).clone()).collect(),
    };
    manager.apply(snapshot(vec![p.clone()], vec![]));
    h.settle("running", |h| h.fake.running_container_names() == ["a"])
        .await;
    let t0 = Instant::now();
    manager.apply(snapshot(vec![deleting(&p, 30)], vec![]));
    h.settle("stopping with 30 s", |h| {
        stops_since(h, t0) == [(0, "timeout=30".to_string())]
    })
    .await;
    tokio::time::sleep(secs(5)).await;
    // The force delete: the MODIFIED (grace 0) and DELETED events came in one snapshot.
    manager.apply(snapshot(vec![], vec![deleting(&p, 0)]));
    let forced = Instant::now();
    h.settle("removed and forgotten", |h| {
        !h.workers.has_worker("f5") && h.fake.container_count() == 0
    })
    .await;
    assert!(forced.elapsed() <= secs(2), "took {:?}", forced.elapsed());
    assert_eq!(
        stops_since(&h, t0),
        [(0, "timeout=30".to_string()), (5, "timeout=0".to_string())]
    );
    assert!(h.status.status("f5").is_none(), "status forgotten");
    h.cancel.cancel();
}

/// `kill_pod` of a pod that never ran (admission rejection): it is never started, its final
/// status is only the mutation and its QoS class (the kubelet's `rejectPod`), and once its
/// source drops it (the removal the pod manager sends), its worker and status go.
#[tokio::test(start_paused = true)]
async fn a_pod_killed_before_it_ran_is_never_started_and_is_forgotten_when_unwanted() {
    let h = harness().await;
    let p = pod("f6", "Always", &["a"], "localhost/app:1");
    let rejected = StatusMutation::failed(
        "OutOfcpu",
        "Pod was rejected: Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000",
    );
    h.workers
        .reject(p.clone(), rejected.clone())
        .terminated()
        .await;
    let status = h.status.status("f6").unwrap();
    assert_eq!(
        status,
        k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Failed".into()),
            reason: rejected.reason.clone(),
            message: rejected.message.clone(),
            qos_class: Some("BestEffort".into()),
            ..Default::default()
        }
    );
    // An update and two resync periods later, the pod is still only rejected; a canary pod
    // failing at its deadline meanwhile shows the workers were acting all along.
    h.workers.update(PodWork::Sync(p.clone()));
    h.start_canary("f6-canary", 60).await;
    tokio::time::sleep(secs(120)).await;
    h.assert_canary_failed("f6-canary");
    assert_eq!(h.status.status("f6").unwrap(), status);

    assert!(h.workers.has_worker("f6"));
    h.workers.update(PodWork::Kill {
        pod: p.clone(),
        grace: None,
        remove: true,
    });
    h.settle("worker and status gone", |h| {
        !h.workers.has_worker("f6") && h.status.status("f6").is_none()
    })
    .await;
    // The worker was alive and reading updates all along (it carried out the removal), and
    // never started anything. The canary's own sandbox and container are set apart first
    // (and must be there: they are the sign the workers ran).
    let (canary_sandboxes, sandboxes): (Vec<_>, Vec<_>) = h
        .fake
        .calls_of("run_pod_sandbox")
        .into_iter()
        .partition(|t| t == "default/f6-canary-node1");
    let (canary_containers, containers): (Vec<_>, Vec<_>) = h
        .fake
        .calls_of("create_container")
        .into_iter()
        .partition(|t| t == "canary");
    assert_eq!((canary_sandboxes.len(), canary_containers.len()), (1, 1));
    assert!(sandboxes.is_empty());
    assert!(containers.is_empty());
    h.cancel.cancel();
}

/// `kill_pod` of a pod that has no worker (gone already, or never on this node) starts
/// nothing: the handle is done at once and no worker appears, while a worked pod next to it
/// is ended as asked.
#[tokio::test(start_paused = true)]
async fn kill_pod_of_a_pod_without_a_worker_starts_nothing() {
    let h = harness().await;
    let running = pod("f7", "Always", &["a"], "localhost/app:1");
    h.workers.update(PodWork::Sync(running.clone()));
    h.settle("f7 running", |h| h.fake.running_container_names() == ["a"])
        .await;
    let stranger = pod("f8", "Always", &["a"], "localhost/app:1");
    let handle = h.workers.kill_pod(stranger, None, evicted());
    assert!(handle.is_terminated(), "nothing to wait for");
    // The positive sign that kills are carried out: the running pod is ended.
    h.workers
        .kill_pod(running, Some(Duration::ZERO), evicted())
        .terminated()
        .await;
    assert!(h.fake.running_container_names().is_empty());
    assert!(!h.workers.has_worker("f8"));
    assert!(h.status.status("f8").is_none());
    assert_eq!(
        h.fake.calls_of("run_pod_sandbox").len(),
        1,
        "only f7's sandbox"
    );
    h.cancel.cancel();
}

/// Paused time since `t0` in whole seconds.
fn secs_since(t0: Instant) -> u64 {
    t0.elapsed().as_secs()
}

/// A sync waiting in a postStart hook that runs for 100 s: `kill_pod` cuts the sync short
/// (as the kubelet cancels the sync's context), the termination stops the container within
/// the pod's 7 s grace period instead of after the hook, and the final status carries the
/// kill's mutation.
#[tokio::test(start_paused = true)]
async fn kill_pod_cuts_a_sync_waiting_in_a_post_start_hook_short() {
    let h = harness().await;
    h.fake.set_exec_behaviour("a", 0, secs(100));
    let p = with_lifecycle(pod("c1", "Always", &["a"], "localhost/app:1"), |c| {
        c.lifecycle = Some(k8s_openapi::api::core::v1::Lifecycle {
            post_start: Some(exec_handler(&["sleep", "100"])),
            ..Default::default()
        });
    });
    h.workers.update(PodWork::Sync(p.clone()));
    h.settle("the postStart hook runs", |h| {
        !h.fake.calls_of("exec_sync").is_empty()
    })
    .await;
    tokio::time::sleep(secs(5)).await;
    assert_eq!(
        h.fake.running_container_names(),
        ["a"],
        "hook still running"
    );
    let t0 = Instant::now();
    let killed = h.workers.kill_pod(p.clone(), None, evicted());
    killed.terminated().await;
    assert!(
        secs_since(t0) <= 7,
        "terminated {:?} after kill_pod (grace 7 s; the hook had 95 s left)",
        t0.elapsed()
    );
    assert_eq!(stops_since(&h, t0).len(), 1, "the container was stopped");
    assert!(h.fake.running_container_names().is_empty());
    let status = h.status.status("c1").unwrap();
    assert_eq!(
        (status.phase.as_deref(), status.reason.as_deref()),
        (Some("Failed"), Some("Evicted"))
    );
    h.cancel.cancel();
}

/// The last session's finding: a sync stopping a SIGTERM-ignoring container with its 30 s
/// grace period (a spec change restarts it) held `kill_pod` for those 30 s. Now the sync is
/// cut short and the termination's StopContainer with the 2 s override ends the pod in 2 s.
#[tokio::test(start_paused = true)]
async fn kill_pod_cuts_a_sync_stopping_a_container_short() {
    let h = harness().await;
    h.fake.set_ignores_sigterm("a");
    h.fake.add_image("localhost/app:2");
    let p = with_grace(pod("c2", "Always", &["a"], "localhost/app:1"), 30);
    running(&h, &p).await;
    let changed = with_lifecycle(p.clone(), |c| c.image = Some("localhost/app:2".into()));
    let t0 = Instant::now();
    h.workers.update(PodWork::Sync(changed.clone()));
    h.settle("the sync stops the old container with its 30 s", |h| {
        stops_since(h, t0) == [(0, "timeout=30".to_string())]
    })
    .await;
    tokio::time::sleep(secs(3)).await;
    let killed_at = Instant::now();
    let killed = h
        .workers
        .kill_pod(changed.clone(), Some(secs(2)), evicted());
    killed.terminated().await;
    assert_eq!(
        killed_at.elapsed(),
        secs(2),
        "the override's 2 s, not the sync's remaining 27 s"
    );
    assert_eq!(
        stops_since(&h, t0),
        [(0, "timeout=30".to_string()), (3, "timeout=2".to_string())]
    );
    assert!(
        h.fake.calls_of("create_container").len() == 1,
        "no new container was started for the changed spec: {:?}",
        h.fake.calls_of("create_container")
    );
    assert_eq!(h.phase("c2"), "Failed");
    h.cancel.cancel();
}

/// A sync waiting for a 60 s image pull: `kill_pod` ends the pod at once (nothing runs), no
/// container is created afterwards.
#[tokio::test(start_paused = true)]
async fn kill_pod_cuts_a_sync_waiting_for_an_image_pull_short() {
    let h = harness().await;
    h.fake.add_pullable_image("localhost/slow:1");
    h.fake.set_pull_delay(secs(60));
    let mut p = (*pod("c3", "Always", &["a"], "localhost/slow:1")).clone();
    p.spec.as_mut().unwrap().containers[0].image_pull_policy = Some("Always".into());
    let p = Arc::new(p);
    h.workers.update(PodWork::Sync(p.clone()));
    h.settle("pulling", |h| !h.fake.calls_of("pull_image").is_empty())
        .await;
    tokio::time::sleep(secs(5)).await;
    let t0 = Instant::now();
    h.workers
        .kill_pod(p.clone(), None, evicted())
        .terminated()
        .await;
    assert!(secs_since(t0) <= 1, "took {:?}", t0.elapsed());
    tokio::time::sleep(secs(120)).await;
    assert!(
        h.fake.calls_of("create_container").is_empty(),
        "nothing was created after the kill"
    );
    assert_eq!(h.phase("c3"), "Failed");
    h.cancel.cancel();
}

/// A CreateContainer under way is never abandoned: the kill waits for it (and its
/// StartContainer), then the termination, listing the runtime, stops the new container, so
/// nothing outlives the pod.
#[tokio::test(start_paused = true)]
async fn kill_pod_lets_a_create_container_under_way_finish_then_stops_it() {
    let h = harness().await;
    h.fake.set_create_delay(secs(10));
    let p = pod("c4", "Always", &["a"], "localhost/app:1");
    h.workers.update(PodWork::Sync(p.clone()));
    h.settle("creating", |h| {
        !h.fake.calls_of("create_container").is_empty()
    })
    .await;
    let t0 = Instant::now();
    let killed = h.workers.kill_pod(p.clone(), Some(secs(2)), evicted());
    killed.terminated().await;
    // The create began a settle step (≤ 10 ms) before t0; the container stops at once.
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(9_900) && took <= secs(12),
        "the create's remaining 10 s, then at most the 2 s grace: {took:?}"
    );
    assert_eq!(
        h.fake.calls_of("start_container").len(),
        1,
        "the create's start ran"
    );
    assert_eq!(
        stops_since(&h, t0).len(),
        1,
        "the new container was stopped"
    );
    assert!(h.fake.running_container_names().is_empty());
    assert_eq!(h.phase("c4"), "Failed");
    h.cancel.cancel();
}

/// Standalone mode: while the node shuts down, a new static pod is rejected (`NodeShutdown`)
/// and never started, as the kubelet's shutdown admit handler applies to every pod source; a
/// static pod admitted before the mark keeps running (the shutdown manager ends it), and once
/// the mark is lifted a new static pod is admitted again.
#[tokio::test(start_paused = true)]
async fn a_new_static_pod_is_rejected_while_the_node_shuts_down() {
    let h = harness().await;
    let (mark, marked) = tokio::sync::watch::channel(false);
    let (manager, _ready) =
        PodManager::new(h.workers.clone(), h.fake.clone(), "node1".into(), vec![]);
    let mut manager = manager.with_static_admission(nodelet::pod::manager::StaticAdmission {
        handlers: vec![
            Arc::new(nodelet::eviction::manager::PressureView::none()),
            Arc::new(nodelet::lifecycle::shutdown::ShutdownView::following(
                marked,
            )),
        ],
        events: h.events.0.clone(),
    });
    let files = |pods: &[&Arc<Pod>]| SourceSnapshot {
        source: nodelet::source::FILE_SOURCE,
        pods: pods.iter().map(|p| (***p).clone()).collect(),
        errors: vec![],
        deleted: vec![],
    };
    let before = pod("s1", "Always", &["a"], "localhost/app:1");
    manager.apply(files(&[&before]));
    h.settle("admitted before the shutdown", |h| {
        h.phase("s1") == "Running"
    })
    .await;
    mark.send_replace(true);
    let during = pod("s2", "Always", &["b"], "localhost/app:1");
    manager.apply(files(&[&before, &during]));
    h.settle("rejected", |h| h.phase("s2") == "Failed").await;
    let status = h.status.status("s2").unwrap();
    assert_eq!(status.reason.as_deref(), Some("NodeShutdown"));
    assert_eq!(
        status.message.as_deref(),
        Some("Pod was rejected: Pod was rejected as the node is shutting down.")
    );
    assert_eq!(h.phase("s1"), "Running", "an admitted pod is not rejected");
    mark.send_replace(false);
    let after = pod("s3", "Always", &["c"], "localhost/app:1");
    manager.apply(files(&[&before, &during, &after]));
    h.settle("admitted after the mark", |h| h.phase("s3") == "Running")
        .await;
    assert_eq!(
        h.fake.running_container_names(),
        ["a", "c"],
        "the rejected pod's container never ran"
    );
    assert!(
        !h.fake.calls_of("create_container").iter().any(|n| n == "b"),
        "nothing was created for the rejected pod"
    );
    assert!(h
        .events
        .events()
        .iter()
        .any(|e| e.reason.as_deref() == Some("NodeShutdown")));
    h.cancel.cancel();
}

/// A pod field nodelet refuses (`podspec::field_support`) rejects the pod at admission, static
/// pods included: Failed with `PodFieldNotSupported`, `Pod was rejected: <field>: Unsupported
/// value: <value>: <why>` and a Warning event with the same text; no sandbox is created (it
/// used to wait in ContainerCreating with a `FailedCreatePodSandBox` event).
#[tokio::test(start_paused = true)]
async fn a_static_pod_with_a_refused_field_is_rejected_at_admission_with_an_event() {
    let h = harness().await;
    let (manager, _ready) =
        PodManager::new(h.workers.clone(), h.fake.clone(), "node1".into(), vec![]);
    let mut manager = manager.with_static_admission(nodelet::pod::manager::StaticAdmission {
        handlers: vec![Arc::new(
            nodelet::pod::field_admission::PodFieldsAdmitHandler,
        )],
        events: h.events.0.clone(),
    });
    let mut refused = (*pod("u1", "Always", &["a"], "localhost/app:1")).clone();
    refused.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(
        serde_json::json!({"name": "v", "nfs": {"server": "s", "path": "/x"}}),
    )
    .unwrap()]);
    let plain = pod("p1", "Always", &["b"], "localhost/app:1");
    manager.apply(SourceSnapshot {
        source: nodelet::source::FILE_SOURCE,
        pods: vec![refused, (*plain).clone()],
        errors: vec![],
        deleted: vec![],
    });
    h.settle("rejected", |h| h.phase("u1") == "Failed").await;
    h.settle("the other pod runs", |h| h.phase("p1") == "Running")
        .await;
    let status = h.status.status("u1").unwrap();
    assert_eq!(status.reason.as_deref(), Some("PodFieldNotSupported"));
    let message = "spec.volumes[0].nfs: Unsupported value: v: nodelet has no volume plugin for this volume type yet (it mounts emptyDir, hostPath, configMap, secret, downwardAPI, projected, image, and through CSI drivers persistentVolumeClaim, ephemeral and csi volumes)";
    assert_eq!(
        status.message.as_deref(),
        Some(format!("Pod was rejected: {message}").as_str())
    );
    let events = h.events.events();
    let event = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("PodFieldNotSupported"))
        .expect("a PodFieldNotSupported event");
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.message.as_deref(), Some(message));
    assert_eq!(
        h.fake.calls_of("run_pod_sandbox").len(),
        1,
        "only the admitted pod got a sandbox"
    );
    assert_eq!(h.fake.running_container_names(), ["b"]);
    h.cancel.cancel();
}

/// Cluster mode: an ephemeral container added to a running API pod (`kubectl debug`) is not
/// run, and a Warning event `PodFieldNotSupported` names it; the pod is not rejected (the
/// API server lets ephemeral containers only into running pods, which a rejection would kill).
#[tokio::test(start_paused = true)]
async fn an_ephemeral_container_added_to_a_running_pod_is_started_beside_the_others() {
    let h = harness().await;
    let (manager, _ready) =
        PodManager::new(h.workers.clone(), h.fake.clone(), "node1".into(), vec![]);
    let mut manager = manager.with_admission(nodelet::pod::manager::Admission {
        status: h.status.clone(),
        events: h.events.0.clone(),
        handlers: vec![Arc::new(
            nodelet::pod::field_admission::PodFieldsAdmitHandler,
        )],
    });
    let api = |pod: &Pod| SourceSnapshot {
        source: nodelet::source::api::API_SOURCE,
        pods: vec![pod.clone()],
        errors: vec![],
        deleted: vec![],
    };
    let running = (*pod("e1", "Always", &["a"], "localhost/app:1")).clone();
    manager.apply(api(&running));
    h.settle("running", |h| h.phase("e1") == "Running").await;
    let mut debugged = running.clone();
    debugged.spec.as_mut().unwrap().ephemeral_containers =
        Some(vec![k8s_openapi::api::core::v1::EphemeralContainer {
            name: "debugger".into(),
            image: Some("localhost/app:1".into()),
            ..Default::default()
        }]);
    manager.apply(api(&debugged));
    h.settle("the ephemeral container runs", |h| {
        h.fake
            .running_container_names()
            .contains(&"debugger".to_string())
    })
    .await;
    assert_eq!(
        h.fake.running_container_names(),
        ["a", "debugger"],
        "started beside the pod's container, not instead of it"
    );
    assert_eq!(h.phase("e1"), "Running", "not rejected");
    assert!(
        !h.events
            .events()
            .iter()
            .any(|e| e.reason.as_deref() == Some("PodFieldNotSupported")),
        "an ephemeral container is honoured, not reported as unsupported"
    );
    h.cancel.cancel();
}
