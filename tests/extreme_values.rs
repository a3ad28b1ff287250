//! Component tests: a pod whose durations are the largest the API accepts (grace periods of
//! 2^63 − 1 s, probe timings of 2^31 − 1 s, a preStop sleep of 2^63 − 1 s) runs, its
//! termination starts and waits as asked, and a kill with a grace period of 0 ends it — with no
//! pod worker panicking on the way. Fake runtime, tokio's clock paused.

mod harness;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use harness::*;
use k8s_openapi::api::core::v1::{
    ExecAction, Lifecycle, LifecycleHandler, Pod, Probe, SleepAction,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodelet::pod::manager::PodManager;
use nodelet::pod::worker_state::PodWork;
use nodelet::source::SourceSnapshot;
use nodelet::status::StatusMutation;
use tokio::time::Instant;

/// Panics anywhere in this test binary (a pod worker's task included) since it started: a
/// panicking worker task does not fail the test by itself, so the tests count them.
fn panics() -> usize {
    static COUNT: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
    let count = COUNT.get_or_init(|| {
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            seen.fetch_add(1, Ordering::SeqCst);
            default(info);
        }));
        count
    });
    count.load(Ordering::SeqCst)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A probe that runs `check` in the container, every timing at the API's largest int32.
fn probe(initial_delay: i32, grace: Option<i64>) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(vec!["check".into()]),
        }),
        initial_delay_seconds: Some(initial_delay),
        period_seconds: Some(i32::MAX),
        timeout_seconds: Some(i32::MAX),
        success_threshold: Some(1),
        failure_threshold: Some(i32::MAX),
        termination_grace_period_seconds: grace,
        ..Default::default()
    }
}

/// Container `a` (it ignores SIGTERM) with every duration at its extreme: grace 2^63 − 1 s
/// (pod and probes), `activeDeadlineSeconds` 2^31 − 1, probe periods and timeouts 2^31 − 1 s,
/// a startup and a readiness probe that run at once, a liveness probe 2^31 − 1 s later, and a
/// preStop hook that sleeps 2^63 − 1 s.
fn extreme_pod(uid: &str) -> Arc<Pod> {
    let mut p = (*pod(uid, "Always", &["a"], "localhost/app:1")).clone();
    let spec = p.spec.as_mut().unwrap();
    spec.termination_grace_period_seconds = Some(i64::MAX);
    spec.active_deadline_seconds = Some(i64::from(i32::MAX));
    let c = &mut spec.containers[0];
    c.startup_probe = Some(probe(0, Some(i64::MAX)));
    c.readiness_probe = Some(probe(0, None));
    c.liveness_probe = Some(probe(i32::MAX, Some(i64::MAX)));
    c.lifecycle = Some(Lifecycle {
        pre_stop: Some(LifecycleHandler {
            sleep: Some(SleepAction { seconds: i64::MAX }),
            ..Default::default()
        }),
        ..Default::default()
    });
    Arc::new(p)
}

/// The pod as the API server shows it once deleted with `grace` (0: a force delete).
fn deleting(p: &Arc<Pod>, grace: i64) -> Arc<Pod> {
    let mut p = (**p).clone();
    p.metadata.deletion_timestamp = Some(Time("2026-01-01T00:01:00Z".parse().unwrap()));
    p.metadata.deletion_grace_period_seconds = Some(grace);
    Arc::new(p)
}

fn ready(h: &Harness, uid: &str) -> bool {
    h.status
        .status(uid)
        .and_then(|s| s.container_statuses)
        .is_some_and(|cs| cs.iter().any(|c| c.name == "a" && c.ready))
}

fn killing_events(h: &Harness) -> usize {
    h.events
        .events()
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Killing"))
        .count()
}

fn stops(h: &Harness) -> Vec<String> {
    h.fake
        .calls()
        .into_iter()
        .filter(|c| c.op == "stop_container")
        .map(|c| c.detail)
        .collect()
}

/// Runs, is deleted with its 2^63 − 1 s grace period (the preStop sleep holds the container
/// an hour later), shrugs off an override longer than any grace period, and a kill with grace 0
/// (an eviction's force, a force delete) SIGKILLs it at once and ends the pod.
#[tokio::test(start_paused = true)]
async fn a_pod_of_extreme_durations_runs_and_a_kill_of_grace_0_ends_it() {
    let panics_before = panics();
    let h = harness().await;
    h.fake.set_ignores_sigterm("a");
    let p = extreme_pod("x1");
    h.workers.update(PodWork::Sync(p.clone()));
    h.settle(
        "running and ready (startup and readiness probes ran)",
        |h| {
            h.fake.running_container_names() == ["a"]
                && h.phase("x1") == "Running"
                && ready(h, "x1")
        },
    )
    .await;

    let t0 = Instant::now();
    h.workers.update(PodWork::Delete {
        pod: deleting(&p, i64::MAX),
    });
    h.settle("the termination started (Killing)", |h| {
        killing_events(h) == 1
    })
    .await;
    tokio::time::sleep(secs(3600)).await;
    assert_eq!(
        h.fake.running_container_names(),
        ["a"],
        "an hour into a grace period of 2^63 - 1 s the preStop sleep still holds the container"
    );
    assert!(
        stops(&h).is_empty(),
        "no StopContainer yet: {:?}",
        stops(&h)
    );
    assert!(!h.status.lifecycle("x1").reclaimed);

    // An override longer than any grace period (a node shutdown group of int64 seconds, say)
    // never lengthens the termination and breaks nothing.
    let longer = h.workers.kill_pod(
        p.clone(),
        Some(Duration::MAX),
        StatusMutation::failed("Shutdown", "longest"),
    );
    tokio::time::sleep(secs(60)).await;
    assert!(!longer.is_terminated());
    assert_eq!(h.fake.running_container_names(), ["a"]);

    let forced = Instant::now();
    let killed = h.workers.kill_pod(
        p.clone(),
        Some(Duration::ZERO),
        StatusMutation::failed("Evicted", "grace 0"),
    );
    tokio::time::timeout(secs(10), killed.terminated())
        .await
        .expect("the kill of grace 0 ends the pod");
    assert!(forced.elapsed() <= secs(2), "took {:?}", forced.elapsed());
    assert!(h.fake.running_container_names().is_empty());
    assert_eq!(stops(&h), ["timeout=0"], "SIGKILL at once");
    h.settle("reclaimed", |h| h.status.lifecycle("x1").reclaimed)
        .await;
    assert_eq!(h.fake.container_count(), 0, "containers removed");
    assert!(t0.elapsed() >= secs(3660));
    assert_eq!(panics(), panics_before, "a pod worker panicked");
    h.cancel.cancel();
}

/// Through the pod manager, as in cluster mode: the API pod is deleted with 2^63 − 1 s (the
/// grace period the API server copies from the spec), then force-deleted; the DELETED object
/// (grace 0) ends the termination at once and the pod is removed and forgotten.
#[tokio::test(start_paused = true)]
async fn an_api_pod_of_grace_int64_max_is_removed_by_a_force_delete() {
    let panics_before = panics();
    let h = harness().await;
    h.fake.set_ignores_sigterm("a");
    let p = extreme_pod("x2");
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
    manager.apply(snapshot(vec![deleting(&p, i64::MAX)], vec![]));
    h.settle("the termination started (Killing)", |h| {
        killing_events(h) == 1
    })
    .await;
    tokio::time::sleep(secs(600)).await;
    assert_eq!(
        h.fake.running_container_names(),
        ["a"],
        "still in its grace period"
    );
    let forced = Instant::now();
    manager.apply(snapshot(vec![], vec![deleting(&p, 0)]));
    h.settle("removed and forgotten", |h| {
        !h.workers.has_worker("x2") && h.fake.container_count() == 0
    })
    .await;
    assert!(forced.elapsed() <= secs(2), "took {:?}", forced.elapsed());
    assert_eq!(stops(&h), ["timeout=0"]);
    assert!(h.status.status("x2").is_none(), "status forgotten");
    assert_eq!(panics(), panics_before, "a pod worker panicked");
    h.cancel.cancel();
}
