//! The shutdown sequence on a paused clock, with a fake logind and a fake pod killer whose
//! pods take a set time to stop on SIGTERM (or ignore it and last their whole grace period).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::lifecycle::kill::KillHandle;
use crate::nodeshutdown::groups::{effective_periods, SYSTEM_CRITICAL_PRIORITY};
use crate::nodeshutdown::state::STATE_FILE;

#[derive(Default)]
struct LogindState {
    delay: Duration,
    /// `reload` sets the delay from this drop-in (as logind reading its configuration).
    reads_drop_in: Option<PathBuf>,
    reloads: usize,
    locks_taken: usize,
    locks_held: usize,
    connections: usize,
    signals: Option<mpsc::UnboundedSender<bool>>,
}

#[derive(Clone, Default)]
struct FakeLogind(Arc<Mutex<LogindState>>);

struct Held(Arc<Mutex<LogindState>>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.lock().unwrap().locks_held -= 1;
    }
}

#[async_trait::async_trait]
impl Logind for FakeLogind {
    async fn inhibit_delay_max(&self) -> Result<Duration, LogindError> {
        Ok(self.0.lock().unwrap().delay)
    }

    async fn inhibit_shutdown(&self) -> Result<InhibitLock, LogindError> {
        let mut s = self.0.lock().unwrap();
        s.locks_taken += 1;
        s.locks_held += 1;
        Ok(InhibitLock::new(Held(self.0.clone())))
    }

    async fn reload(&self) -> Result<(), LogindError> {
        let mut s = self.0.lock().unwrap();
        s.reloads += 1;
        if let Some(path) = &s.reads_drop_in {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if let Some(secs) = text
                .lines()
                .find_map(|l| l.strip_prefix("InhibitDelayMaxSec="))
            {
                s.delay = Duration::from_secs(secs.parse().unwrap());
            }
        }
        Ok(())
    }

    async fn prepare_for_shutdown(
        &self,
    ) -> Result<futures::stream::BoxStream<'static, bool>, LogindError> {
        let (tx, rx) = mpsc::unbounded();
        self.0.lock().unwrap().signals = Some(tx);
        Ok(rx.boxed())
    }
}

impl FakeLogind {
    fn signal(&self, active: bool) {
        let s = self.0.lock().unwrap();
        s.signals
            .as_ref()
            .expect("subscribed")
            .unbounded_send(active)
            .unwrap();
    }
    fn get<T>(&self, f: impl FnOnce(&LogindState) -> T) -> T {
        f(&self.0.lock().unwrap())
    }
}

#[derive(Debug, Clone)]
struct Kill {
    name: String,
    grace: Duration,
    status: StatusMutation,
    at: Duration,
}

/// Ends pods after `stop_after[name]` (on SIGTERM), or at their grace period when that is
/// shorter or they are not listed (they ignore SIGTERM).
struct FakeKiller {
    start: Instant,
    stop_after: BTreeMap<String, Duration>,
    kills: Mutex<Vec<Kill>>,
}

impl PodKiller for FakeKiller {
    fn kill_pod(
        &self,
        pod: Arc<Pod>,
        grace_override: Option<Duration>,
        status: StatusMutation,
    ) -> KillHandle {
        let name = pod.metadata.name.clone().unwrap();
        let grace = grace_override.expect("node shutdown always overrides the grace period");
        self.kills.lock().unwrap().push(Kill {
            name: name.clone(),
            grace,
            status,
            at: Instant::now() - self.start,
        });
        let stop = self
            .stop_after
            .get(&name)
            .copied()
            .unwrap_or(grace)
            .min(grace);
        let (done, rx) = watch::channel(false);
        tokio::spawn(async move {
            tokio::time::sleep(stop).await;
            let _ = done.send(true);
        });
        KillHandle::new(rx)
    }
}

struct Pods(Vec<Arc<Pod>>);

impl ActivePods for Pods {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.0.clone()
    }
}

fn pod(name: &str, priority: Option<i32>, grace: Option<i64>) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: Some(PodSpec {
            priority,
            termination_grace_period_seconds: grace,
            ..Default::default()
        }),
        ..Default::default()
    })
}

struct Rig {
    logind: FakeLogind,
    killer: Arc<FakeKiller>,
    view: ShutdownView,
    events: EventRecorder,
    settings: Settings,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Rig {
    fn kills(&self) -> Vec<Kill> {
        self.killer.kills.lock().unwrap().clone()
    }
    fn kill_times(&self) -> Vec<(String, u64, u64)> {
        self.kills()
            .iter()
            .map(|k| (k.name.clone(), k.at.as_secs(), k.grace.as_secs()))
            .collect()
    }
    fn state(&self) -> ShutdownState {
        state::load(&self.settings.state_file).unwrap()
    }
}

/// 30 s in total, 10 s of it for critical pods: regular pods get 20 s.
fn start(pods: Vec<Arc<Pod>>, stop_after: &[(&str, u64)], delay: Duration) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        periods: effective_periods(&[], Duration::from_secs(30), Duration::from_secs(10)),
        drop_in: dir.path().join("logind.conf.d/99-nodelet.conf"),
        state_file: dir.path().join(STATE_FILE),
        node_name: "node-1".into(),
    };
    start_with(settings, pods, stop_after, delay, dir)
}

fn start_with(
    settings: Settings,
    pods: Vec<Arc<Pod>>,
    stop_after: &[(&str, u64)],
    delay: Duration,
    dir: tempfile::TempDir,
) -> Rig {
    let logind = FakeLogind::default();
    {
        let mut s = logind.0.lock().unwrap();
        s.delay = delay;
        s.reads_drop_in = Some(settings.drop_in.clone());
    }
    let killer = Arc::new(FakeKiller {
        start: Instant::now(),
        stop_after: stop_after
            .iter()
            .map(|(n, s)| (n.to_string(), Duration::from_secs(*s)))
            .collect(),
        kills: Mutex::new(Vec::new()),
    });
    let clock = Clock::starting_at("2026-12-01T10:00:00Z".parse().unwrap());
    let events = EventRecorder::new(clock, "nodelet", "node-1");
    let connect: Connect = {
        let logind = logind.clone();
        Arc::new(move || {
            let logind = logind.clone();
            Box::pin(async move {
                logind.0.lock().unwrap().connections += 1;
                Ok(Arc::new(logind) as Arc<dyn Logind>)
            })
        })
    };
    let manager = ShutdownManager::new(
        settings.clone(),
        connect,
        Arc::new(Pods(pods)),
        killer.clone(),
        events.clone(),
        clock,
    );
    let view = manager.view();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(manager.run(cancel.clone()));
    Rig {
        logind,
        killer,
        view,
        events,
        settings,
        cancel,
        task,
        _dir: dir,
    }
}

/// Waits (on the paused clock) until `f` holds; the manager is alive when it does.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

async fn locked(rig: &Rig) {
    until("the lock is held and signals subscribed", || {
        rig.logind.get(|s| s.locks_held == 1 && s.signals.is_some())
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn groups_end_lowest_priority_first_each_within_its_period() {
    let rig = start(
        vec![
            pod("critical", Some(SYSTEM_CRITICAL_PRIORITY), None),
            pod("web", None, None),
            pod("stubborn", Some(1000), None),
            pod("quick", Some(-5), Some(5)),
        ],
        // web stops 2 s after SIGTERM; stubborn ignores it; critical stops after 3 s.
        &[("web", 2), ("critical", 3)],
        Duration::from_secs(60),
    );
    locked(&rig).await;
    assert!(!rig.view.is_shutting_down());
    let t0 = Instant::now();
    rig.logind.signal(true);
    until("marked shutting down", || rig.view.is_shutting_down()).await;

    until("the lock is released", || {
        rig.logind.get(|s| s.locks_held == 0)
    })
    .await;
    let done = Instant::now() - t0;
    // The regular group waits its whole 20 s (stubborn lasts its grace period); the critical
    // group starts then and is done 3 s later.
    assert_eq!(done.as_secs(), 23, "{done:?}");
    let mut kills = rig.kill_times();
    kills.sort();
    assert_eq!(
        kills,
        vec![
            ("critical".to_string(), 20, 10),
            ("quick".to_string(), 0, 5),
            ("stubborn".to_string(), 0, 20),
            ("web".to_string(), 0, 20),
        ]
    );
    for kill in rig.kills() {
        let status = &kill.status;
        assert_eq!(status.phase.as_deref(), Some("Failed"), "{}", kill.name);
        assert_eq!(status.reason.as_deref(), Some("Terminated"));
        assert_eq!(
            status.message.as_deref(),
            Some("Pod was terminated in response to imminent node shutdown.")
        );
        let c = &status.conditions[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_deref()),
            ("DisruptionTarget", "True", Some("TerminationByKubelet"))
        );
    }
    // Still marked after the sequence (until a cancellation), and the state file tells.
    assert!(rig.view.is_shutting_down());
    let state = rig.state();
    let (start, end) = (state.start.unwrap(), state.end.unwrap());
    assert_eq!(end.duration_since(start).as_secs(), 23);
    let events: Vec<(String, String)> = rig
        .events
        .events()
        .iter()
        .map(|e| {
            (
                e.reason.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        events.contains(&(
            "NodeShutdown".into(),
            "Shutdown manager detected shutdown event".into()
        )),
        "{events:?}"
    );
    // A repeated signal does nothing.
    rig.logind.signal(true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(rig.kills().len(), 4);
    rig.cancel.cancel();
    rig.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_next_group_starts_as_soon_as_the_last_pod_is_gone() {
    let rig = start(
        vec![
            pod("a", None, None),
            pod("b", Some(10), None),
            pod("critical", Some(SYSTEM_CRITICAL_PRIORITY + 5), None),
        ],
        &[("a", 1), ("b", 4), ("critical", 1)],
        Duration::from_secs(30),
    );
    locked(&rig).await;
    let t0 = Instant::now();
    rig.logind.signal(true);
    until("the lock is released", || {
        rig.logind.get(|s| s.locks_held == 0)
    })
    .await;
    assert_eq!((Instant::now() - t0).as_secs(), 5);
    let mut kills = rig.kill_times();
    kills.sort();
    assert_eq!(
        kills,
        vec![
            ("a".to_string(), 0, 20),
            ("b".to_string(), 0, 20),
            ("critical".to_string(), 4, 10),
        ]
    );
    // Enough delay already: no drop-in, no reload.
    assert!(!rig.settings.drop_in.exists());
    assert_eq!(rig.logind.get(|s| s.reloads), 0);
    rig.cancel.cancel();
    rig.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_shutdown_stops_the_sequence_and_takes_the_lock_again() {
    let rig = start(
        vec![
            pod("web", None, None),
            pod("critical", Some(SYSTEM_CRITICAL_PRIORITY), None),
        ],
        &[],
        Duration::from_secs(30),
    );
    locked(&rig).await;
    rig.logind.signal(true);
    until("marked", || rig.view.is_shutting_down()).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    rig.logind.signal(false);
    until("un-marked", || !rig.view.is_shutting_down()).await;
    until("a new lock, the old one released", || {
        rig.logind.get(|s| s.locks_taken == 2 && s.locks_held == 1)
    })
    .await;
    // The critical group never starts.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(rig.kill_times(), vec![("web".to_string(), 0, 20)]);
    assert_eq!(rig.logind.get(|s| s.locks_held), 1);
    let messages: Vec<String> = rig
        .events
        .events()
        .iter()
        .filter_map(|e| e.message.clone())
        .collect();
    assert!(
        messages.contains(&"Shutdown manager detected shutdown cancellation".to_string()),
        "{messages:?}"
    );
    // And a second shutdown goes through.
    rig.logind.signal(true);
    until("the second lock is released", || {
        rig.logind.get(|s| s.locks_held == 0)
    })
    .await;
    assert_eq!(rig.kills().len(), 3);
    rig.cancel.cancel();
    rig.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_short_logind_delay_is_raised_through_the_drop_in() {
    let rig = start(vec![], &[], Duration::from_secs(5));
    locked(&rig).await;
    let text = std::fs::read_to_string(&rig.settings.drop_in).unwrap();
    assert!(text.contains("[Login]\nInhibitDelayMaxSec=30\n"), "{text}");
    assert_eq!(
        rig.logind.get(|s| (s.reloads, s.delay)),
        (1, Duration::from_secs(30))
    );
    // No pods: the shutdown releases the lock at once.
    rig.logind.signal(true);
    until("released", || rig.logind.get(|s| s.locks_held == 0)).await;
    rig.cancel.cancel();
    rig.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_delay_logind_will_not_raise_means_no_lock_and_retries() {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        periods: effective_periods(&[], Duration::from_secs(30), Duration::ZERO),
        drop_in: dir.path().join("99-nodelet.conf"),
        state_file: dir.path().join(STATE_FILE),
        node_name: "node-1".into(),
    };
    let rig = start_with(settings, vec![], &[], Duration::from_secs(5), dir);
    // logind ignores the drop-in (another file overrides it, say).
    rig.logind.0.lock().unwrap().reads_drop_in = Some(PathBuf::from("/nonexistent"));
    until("several attempts", || {
        rig.logind.get(|s| s.connections >= 3)
    })
    .await;
    assert_eq!(rig.logind.get(|s| s.locks_taken), 0);
    assert!(rig.logind.get(|s| s.reloads) >= 3);
    // Once logind allows it, the next attempt takes the lock.
    rig.logind.0.lock().unwrap().delay = Duration::from_secs(30);
    locked(&rig).await;
    rig.cancel.cancel();
    rig.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lost_connection_is_made_again() {
    let rig = start(vec![], &[], Duration::from_secs(30));
    locked(&rig).await;
    // The bus goes away: the stream ends, the lock with it.
    rig.logind.0.lock().unwrap().signals = None;
    until("connected again", || {
        rig.logind
            .get(|s| s.connections == 2 && s.signals.is_some())
    })
    .await;
    until("a new lock", || {
        rig.logind.get(|s| s.locks_taken == 2 && s.locks_held == 1)
    })
    .await;
    rig.cancel.cancel();
    rig.task.await.unwrap();
    assert_eq!(
        rig.logind.get(|s| s.locks_held),
        0,
        "stopping releases the lock"
    );
}

#[test]
fn the_state_machine() {
    assert_eq!(transition(false, true), Transition::Start);
    assert_eq!(transition(true, true), Transition::Ignore);
    assert_eq!(transition(true, false), Transition::Cancel);
    assert_eq!(transition(false, false), Transition::Ignore);
}

#[test]
fn the_shutdown_metrics_are_the_state_files_times_in_epoch_seconds() {
    let t = |s: &str| Some(s.parse::<jiff::Timestamp>().unwrap());
    let cases = [
        (ShutdownState::default(), (None, None)),
        (
            ShutdownState {
                start: t("2026-12-01T20:00:00.250Z"),
                end: None,
            },
            (Some(1_796_155_200.25), None),
        ),
        (
            ShutdownState {
                start: t("2026-12-01T20:00:00Z"),
                end: t("2026-12-01T20:01:30Z"),
            },
            (Some(1_796_155_200.0), Some(1_796_155_290.0)),
        ),
    ];
    for (state, want) in cases {
        assert_eq!(metric_seconds(&state), want, "{state:?}");
    }
    let text = crate::metrics::metrics().encode();
    for name in [
        "nodelet_graceful_shutdown_start_time_seconds",
        "nodelet_graceful_shutdown_end_time_seconds",
    ] {
        assert!(text.contains(&format!("# TYPE {name} gauge")), "{name}");
    }
}
