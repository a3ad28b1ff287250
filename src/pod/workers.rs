//! Pod workers: one task per pod UID, so a pod is never synced twice at once.
//!
//! Each worker runs the state machine of [`super::worker_state`]: it asks [`transition`] what
//! to do next, runs that effect, and feeds the outcome back. Updates never queue up: they are
//! merged into one [`Request`] per pod (the latest pod, and how it ends), which the worker
//! reads through a `watch` channel. It wakes on PLEG events and resyncs every
//! `syncFrequency` even when nothing happened, as the kubelet does.
//!
//! While a termination runs, the worker keeps reading updates: when one asks for a shorter
//! grace period (a force delete, an eviction override through [`PodWorkers::kill_pod`]) it
//! moves the termination's deadline earlier, and the code stopping the containers follows it
//! (see `sync::stop`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::worker_state::PodWork;
use super::worker_state::{transition, Effect, Outcome, Request, State, Wait};
use crate::clock::saturating_deadline;
use crate::cri::model::PodRuntime;
use crate::lifecycle::kill::{KillHandle, PodKiller};
use crate::lifecycle::pods::LivePods;
use crate::metrics::metrics;
use crate::podspec::pod_uid;
use crate::status::{RestartInPlace, StatusMutation};
use crate::sync::executor::{PodMemory, PodSyncer, RuntimeWrites, SyncOutcome};
use crate::sync::grace::{Grace, GraceDeadline};

struct Handle {
    requests: Arc<watch::Sender<Request>>,
    wake: Arc<Notify>,
    /// True while the pod is terminated (what [`KillHandle`]s wait for).
    terminated: Arc<watch::Sender<bool>>,
}

type Registry = Arc<Mutex<HashMap<String, Handle>>>;

#[derive(Clone)]
pub struct PodWorkers {
    syncer: PodSyncer,
    workers: Registry,
    tracker: TaskTracker,
    cancel: CancellationToken,
    resync: Duration,
}

impl PodWorkers {
    pub fn new(syncer: PodSyncer, resync: Duration, cancel: CancellationToken) -> Self {
        PodWorkers {
            syncer,
            workers: Arc::default(),
            tracker: TaskTracker::new(),
            cancel,
            resync,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Handle>> {
        lock(&self.workers)
    }

    /// Hands work to the pod's worker, starting one if needed.
    pub fn update(&self, work: PodWork) {
        self.submit(Change::Work(work));
    }

    /// `kill_pod` (see [`PodKiller`]): ends the pod through its worker, with `grace_override`
    /// and `status` applied to its final status. A pod without a worker does not run on this
    /// node (it was never started, or it is gone already): nothing is started for it, and the
    /// handle says "terminated" at once.
    pub fn kill_pod(
        &self,
        pod: Arc<Pod>,
        grace_override: Option<Duration>,
        status: StatusMutation,
    ) -> KillHandle {
        if !self.has_worker(pod_uid(&pod)) {
            tracing::info!(
                pod.uid = pod_uid(&pod),
                pod.name = pod.metadata.name.as_deref().unwrap_or_default(),
                "kill_pod: the pod has no worker on this node; nothing to end"
            );
            return KillHandle::new(watch::channel(true).1);
        }
        self.end(pod, grace_override, status)
    }

    /// Ends a pod that never ran (an admission rejection): its worker is started in the
    /// terminated state, never starts anything, and publishes `status` as the final status.
    /// The pod manager does this for a pod its source wants, so the worker goes when the
    /// source drops the pod, as every other worker does.
    pub fn reject(&self, pod: Arc<Pod>, status: StatusMutation) -> KillHandle {
        self.end(pod, Some(Duration::ZERO), status)
    }

    fn end(
        &self,
        pod: Arc<Pod>,
        grace_override: Option<Duration>,
        status: StatusMutation,
    ) -> KillHandle {
        tracing::info!(
            pod.uid = pod_uid(&pod),
            pod.name = pod.metadata.name.as_deref().unwrap_or_default(),
            grace_override = ?grace_override,
            reason = status.reason.as_deref().unwrap_or_default(),
            "kill_pod"
        );
        let terminated = self.submit(Change::Kill {
            pod,
            grace: grace_override,
            status,
        });
        KillHandle::new(terminated)
    }

    /// Merges the change into the pod's request, or starts a worker for it; returns the pod's
    /// "terminated" signal.
    fn submit(&self, change: Change) -> watch::Receiver<bool> {
        let pod = change.pod().clone();
        let uid = pod_uid(&pod).to_string();
        if uid.is_empty() {
            tracing::warn!("pod without UID ignored");
            // A signal that says "done" at once: there is nothing to wait for.
            return watch::channel(true).1;
        }
        let mut workers = self.lock();
        if let Some(handle) = workers.get(&uid) {
            handle.requests.send_modify(|r| change.apply(r));
            return handle.terminated.subscribe();
        }
        let requests = Arc::new(watch::channel(change.into_request()).0);
        let wake = Arc::new(Notify::new());
        let terminated = Arc::new(watch::channel(false).0);
        let signal = terminated.subscribe();
        workers.insert(
            uid.clone(),
            Handle {
                requests: requests.clone(),
                wake: wake.clone(),
                terminated: terminated.clone(),
            },
        );
        let worker = Worker {
            uid: uid.clone(),
            syncer: self.syncer.clone(),
            updates: requests.subscribe(),
            requests,
            wake,
            terminated,
            cancel: self.cancel.clone(),
            resync: self.resync,
            registry: self.workers.clone(),
        };
        let span = tracing::info_span!(
            "pod",
            pod.uid = %uid,
            pod.namespace = pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.name = pod.metadata.name.as_deref().unwrap_or_default(),
        );
        self.tracker.spawn(worker.run().instrument(span));
        signal
    }

    /// Something about the pod changed in the runtime: sync it soon.
    pub fn wake(&self, uid: &str) -> bool {
        match self.lock().get(uid) {
            Some(handle) => {
                handle.wake.notify_one();
                true
            }
            None => false,
        }
    }

    pub fn has_worker(&self, uid: &str) -> bool {
        self.lock().contains_key(uid)
    }

    pub fn uids(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Waits for every worker to return (after cancellation).
    pub async fn wait(&self) {
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// A reclaim or removal under [`supervised`]: `done` when it succeeds, `Failed` (logged) when
/// it returns an error.
async fn cleanup<E: std::fmt::Display>(
    what: &'static str,
    effect: impl std::future::Future<Output = Result<(), E>>,
    done: Outcome,
) -> Result<Outcome, ()> {
    supervised(what, async {
        match effect.await {
            Ok(()) => done,
            Err(e) => {
                tracing::warn!(error = %e, effect = what, "the pod's cleanup failed");
                Outcome::Failed
            }
        }
    })
    .await
}

/// Runs one effect of a pod worker, catching a panic in it: logged with what panicked,
/// counted in `pod_worker_panics_total`, and `Err(())` for the worker to carry on.
async fn supervised<F: std::future::Future<Output = Outcome>>(
    what: &'static str,
    effect: F,
) -> Result<Outcome, ()> {
    use futures::FutureExt;
    std::panic::AssertUnwindSafe(effect)
        .catch_unwind()
        .await
        .map_err(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            metrics().pod_worker_panics_total.inc();
            tracing::error!(effect = what, panic = %message, "pod worker panicked; it carries on with fresh memory");
        })
}

fn lock(registry: &Registry) -> MutexGuard<'_, HashMap<String, Handle>> {
    registry.lock().unwrap_or_else(|e| e.into_inner())
}

impl PodKiller for PodWorkers {
    fn kill_pod(
        &self,
        pod: Arc<Pod>,
        grace_override: Option<Duration>,
        status: StatusMutation,
    ) -> KillHandle {
        PodWorkers::kill_pod(self, pod, grace_override, status)
    }
}

impl LivePods for PodWorkers {
    fn live_pods(&self) -> HashSet<String> {
        self.uids().into_iter().collect()
    }
}

/// One update to a pod's request.
enum Change {
    Work(PodWork),
    Kill {
        pod: Arc<Pod>,
        grace: Option<Duration>,
        status: StatusMutation,
    },
}

impl Change {
    fn pod(&self) -> &Arc<Pod> {
        match self {
            Change::Work(work) => work.pod(),
            Change::Kill { pod, .. } => pod,
        }
    }

    fn apply(self, request: &mut Request) {
        match self {
            Change::Work(work) => request.merge(work),
            Change::Kill { pod, grace, status } => request.kill(pod, grace, status),
        }
    }

    fn into_request(self) -> Request {
        match self {
            Change::Work(work) => Request::new(work),
            Change::Kill { pod, grace, status } => {
                let mut request = Request::new(PodWork::Sync(pod.clone()));
                request.kill(pod, grace, status);
                request
            }
        }
    }
}

struct Worker {
    uid: String,
    syncer: PodSyncer,
    /// The pod's request; the worker writes it too (`activeDeadlineSeconds` ends the pod
    /// through the same `kill`, a returned pod starts its request over).
    requests: Arc<watch::Sender<Request>>,
    updates: watch::Receiver<Request>,
    wake: Arc<Notify>,
    terminated: Arc<watch::Sender<bool>>,
    cancel: CancellationToken,
    resync: Duration,
    registry: Registry,
}

/// What a worker keeps between effects.
struct Life {
    state: State,
    memory: PodMemory,
    /// A sync ran (the pod may have run here): decides the final status of a pod ended before
    /// it ever ran.
    ran: bool,
    /// The running termination's deadline: set when it starts, kept across retries so a retry
    /// never restarts the grace period, moved only earlier.
    deadline: Option<watch::Sender<GraceDeadline>>,
    /// Each container's restart count when the pod was last stopped: a pod that comes back
    /// after its removal counts on from there, as the kubelet does from the dead containers it
    /// keeps.
    restart_counts: BTreeMap<String, i32>,
}

impl Worker {
    async fn run(mut self) {
        let mut life = Life {
            state: State::Syncing,
            memory: self.syncer.new_memory(),
            ran: false,
            deadline: None,
            restart_counts: BTreeMap::new(),
        };
        let mut outcome = Outcome::Woke;
        loop {
            if self.cancel.is_cancelled() {
                return;
            }
            let request = self.updates.borrow_and_update().clone();
            let (next, effect) = transition(life.state, request.work(), &outcome);
            if next != life.state {
                tracing::debug!(from = ?life.state, to = ?next, "pod worker state");
            }
            life.state = next;
            if next != State::Terminating {
                life.deadline = None;
            }
            self.terminated.send_if_modified(|t| {
                let was = std::mem::replace(t, next.is_terminated());
                was != *t
            });
            outcome = match effect {
                Effect::Sync => {
                    life.ran = true;
                    let sync = supervised("sync", self.sync(&request.pod, &mut life.memory));
                    sync.await.unwrap_or_else(|()| self.after_panic(&mut life))
                }
                Effect::Terminate => {
                    let terminate = supervised("termination", self.terminate(&mut life));
                    match terminate.await {
                        Ok(outcome) => outcome,
                        Err(()) => self.after_panic(&mut life),
                    }
                }
                Effect::Reclaim => {
                    let reclaim = self.syncer.reclaim(&request.pod);
                    let reclaim = cleanup("reclaim", reclaim, Outcome::Reclaimed);
                    reclaim
                        .await
                        .unwrap_or_else(|()| self.after_panic(&mut life))
                }
                Effect::Remove => {
                    let remove = cleanup(
                        "removal",
                        self.syncer.remove(&request.pod),
                        Outcome::Removed,
                    );
                    remove
                        .await
                        .unwrap_or_else(|()| self.after_panic(&mut life))
                }
                Effect::Restart => {
                    tracing::info!("pod returned after its removal; starting it again");
                    self.requests.send_if_modified(|r| {
                        r.restart();
                        false
                    });
                    life.memory = self.syncer.new_memory();
                    life.memory.restart_count_base = std::mem::take(&mut life.restart_counts);
                    life.ran = false;
                    Outcome::Woke
                }
                Effect::Wait(wait) => {
                    if !self.wait(wait).await {
                        return;
                    }
                    Outcome::Woke
                }
                Effect::Exit => {
                    // Deregister under the lock that updates take: if the pod came back in the
                    // meantime, the next transition starts it over instead of losing it.
                    let mut registry = lock(&self.registry);
                    if self.requests.borrow().returned.is_some() {
                        Outcome::Woke
                    } else {
                        registry.remove(&self.uid);
                        return;
                    }
                }
            };
        }
    }

    /// After a panic in one of the worker's effects: the pod's memory starts over (what the
    /// panic left half-done in it cannot be trusted) and the effect counts as failed, so it is
    /// tried again after the usual wait. The worker itself lives on: its pod is never left
    /// without one.
    fn after_panic(&self, life: &mut Life) -> Outcome {
        life.memory = self.syncer.new_memory();
        life.deadline = None;
        Outcome::Failed
    }

    /// One sync, cut short when an update asks for the pod's end (a `kill_pod`, a delete, an
    /// eviction): the sync is dropped at its next safe point (see [`RuntimeWrites`]) and the
    /// termination that follows stops whatever the sync left running, from the runtime's
    /// listing.
    async fn sync(&self, pod: &Arc<Pod>, memory: &mut PodMemory) -> Outcome {
        let started = Instant::now();
        let writes = memory.runtime_writes.clone();
        let sync = self.syncer.sync(pod, memory);
        let Some(result) = until_ended(sync, &self.updates, &writes).await else {
            tracing::info!(
                after_seconds = started.elapsed().as_secs_f64(),
                "the pod is to end: its sync under way is cut short"
            );
            // An in-place restart cut short is over: the final status does not say it runs.
            if matches!(
                memory.restart_in_place,
                RestartInPlace::Killing | RestartInPlace::Removed
            ) {
                memory.restart_in_place = RestartInPlace::Done;
            }
            return Outcome::Woke;
        };
        metrics()
            .pod_worker_duration_seconds
            .observe(started.elapsed().as_secs_f64());
        match result {
            Ok(SyncOutcome::Terminal) => {
                tracing::info!("pod is terminal; stopping what remains");
                Outcome::Synced(SyncOutcome::Terminal)
            }
            Ok(SyncOutcome::Kill(status)) => {
                // The same kill_pod every other component uses, from inside the worker.
                self.requests
                    .send_modify(|r| r.kill(pod.clone(), None, status.clone()));
                Outcome::Synced(SyncOutcome::Kill(status))
            }
            Ok(outcome) => Outcome::Synced(outcome),
            Err(e) => {
                tracing::warn!(error = %e, "pod sync failed");
                Outcome::Failed
            }
        }
    }

    /// Stops the pod's containers within the grace period, moving its deadline earlier while
    /// updates ask for less, then publishes the final status with the request's mutation.
    async fn terminate(&mut self, life: &mut Life) -> Outcome {
        let request = self.updates.borrow_and_update().clone();
        let grace = request.grace();
        let now = Instant::now();
        let deadline = life
            .deadline
            .get_or_insert_with(|| watch::channel(GraceDeadline::new(now, grace)).0);
        shorten(deadline, grace);
        let current = *deadline.borrow();
        tracing::info!(
            grace_seconds = current.period().as_secs(),
            immediate = current.immediate,
            "terminating pod"
        );
        let watched = Grace::new(deadline.subscribe());
        let stop = self
            .syncer
            .stop_for_termination(&request.pod, &life.memory, &watched);
        tokio::pin!(stop);
        let stopped = loop {
            tokio::select! {
                result = &mut stop => break result,
                _ = self.updates.changed() => {
                    let grace = self.updates.borrow_and_update().grace();
                    if shorten(deadline, grace) {
                        let d = *deadline.borrow();
                        tracing::info!(
                            asked_seconds = grace.as_secs(),
                            grace_seconds = d.period().as_secs(),
                            immediate = d.immediate,
                            "shorter grace period: the termination ends sooner"
                        );
                    }
                }
            }
        };
        let runtime = match stopped {
            Ok(runtime) => runtime,
            Err(e) => {
                tracing::warn!(error = %e, "terminating pod");
                return Outcome::Failed;
            }
        };
        life.restart_counts = restart_counts(&runtime, &life.memory.restart_count_base);
        // The latest request: a kill that arrived while the containers stopped still has its
        // status applied.
        let request = self.updates.borrow().clone();
        let mutation = request.end.as_ref().and_then(|e| e.status.as_ref());
        self.syncer
            .publish_final_status(&request.pod, &runtime, &life.memory, mutation, life.ran)
            .await;
        Outcome::Stopped
    }

    /// Waits as told; false when the worker is cancelled.
    async fn wait(&mut self, wait: Wait) -> bool {
        let until = match wait {
            Wait::Retry(after) => Some(saturating_deadline(Instant::now(), after)),
            Wait::Idle(deadline) => Some(saturating_deadline(
                Instant::now(),
                deadline.map_or(self.resync, |d| d.min(self.resync)),
            )),
            Wait::ForUpdate => None,
        };
        match until {
            Some(until) => tokio::select! {
                _ = self.cancel.cancelled() => false,
                _ = self.updates.changed() => true,
                _ = self.wake.notified() => true,
                _ = tokio::time::sleep_until(until) => true,
            },
            None => tokio::select! {
                _ = self.cancel.cancelled() => false,
                _ = self.updates.changed() => true,
            },
        }
    }
}

/// Runs `sync` to its end, or, once `updates` ask for the pod's end, until no runtime call
/// that must finish is under way (`writes`), then drops it; `None` when it was dropped.
/// Watches a clone of `updates`: an update that does not end the pod stays unseen by the
/// worker's own receiver, so the worker syncs again for it right after this sync.
async fn until_ended<T>(
    sync: impl std::future::Future<Output = T>,
    updates: &watch::Receiver<Request>,
    writes: &RuntimeWrites,
) -> Option<T> {
    tokio::pin!(sync);
    let mut updates = updates.clone();
    let ended = async move {
        loop {
            if updates.borrow_and_update().work().ends_the_pod() {
                return;
            }
            if updates.changed().await.is_err() {
                // The sender lives in the worker itself: never closed while it runs.
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        result = &mut sync => return Some(result),
        () = ended => {}
    }
    tokio::select! {
        biased;
        result = &mut sync => Some(result),
        _quiet = writes.quiesce() => None,
    }
}

/// Each container's highest restart count: among the instances the runtime holds, and the
/// counts an in-place restart carried over.
fn restart_counts(runtime: &PodRuntime, base: &BTreeMap<String, i32>) -> BTreeMap<String, i32> {
    let mut counts = base.clone();
    crate::sync::memory::carry_restart_counts(&mut counts, &runtime.containers);
    counts
}

/// Moves the deadline earlier if `grace` from now ends sooner; true if it moved.
fn shorten(deadline: &watch::Sender<GraceDeadline>, grace: Duration) -> bool {
    let now = Instant::now();
    deadline.send_if_modified(|d| {
        let shorter = d.shortened(grace, now);
        std::mem::replace(d, shorter) != shorter
    })
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use super::*;
    use crate::pod::worker_state::PodWork;

    #[test]
    fn restart_counts_carried_to_a_returning_pod() {
        let instance = |name: &str, restart_count: i32| crate::cri::model::RuntimeContainer {
            name: name.into(),
            restart_count,
            ..Default::default()
        };
        let runtime = PodRuntime {
            containers: vec![instance("web", 3), instance("web", 2), instance("init", 0)],
            ..PodRuntime::empty("u1")
        };
        let counts = |base: &[(&str, i32)]| {
            let base = base.iter().map(|(n, c)| (n.to_string(), *c)).collect();
            restart_counts(&runtime, &base)
                .into_iter()
                .collect::<Vec<_>>()
        };
        assert_eq!(counts(&[]), [("init".into(), 0), ("web".into(), 3)]);
        // An in-place restart removed instances that counted higher, or of another container.
        assert_eq!(
            counts(&[("web", 7), ("gone", 1)]),
            [("gone".into(), 1), ("init".into(), 0), ("web".into(), 7)]
        );
        assert_eq!(
            counts(&[("web", 1)]),
            [("init".into(), 0), ("web".into(), 3)]
        );
        assert!(restart_counts(&PodRuntime::empty("u1"), &BTreeMap::new()).is_empty());
    }

    fn request() -> (watch::Sender<Request>, watch::Receiver<Request>) {
        let mut r = watch::channel(Request::new(PodWork::Sync(Arc::new(Pod::default()))));
        r.1.borrow_and_update();
        r
    }

    fn kill(tx: &watch::Sender<Request>) {
        tx.send_modify(|r| r.kill(Arc::new(Pod::default()), None, StatusMutation::default()));
    }

    /// [`until_ended`] of `sync` while the pod is killed `after` into it.
    async fn until_ended_with_a_kill_after<T>(
        sync: impl Future<Output = T>,
        after: Duration,
        tx: &watch::Sender<Request>,
        rx: &watch::Receiver<Request>,
        writes: &RuntimeWrites,
    ) -> Option<T> {
        let killer = async {
            tokio::time::sleep(after).await;
            kill(tx);
            std::future::pending::<()>().await;
        };
        tokio::select! {
            cut = until_ended(sync, rx, writes) => cut,
            () = killer => unreachable!(),
        }
    }

    /// A sync that ends by itself is waited for; an update that does not end the pod does not
    /// cut it, and stays unseen for the worker's next wait.
    #[tokio::test(start_paused = true)]
    async fn a_sync_runs_to_its_end_unless_the_pod_is_to_end() {
        let (tx, mut rx) = request();
        let writes = RuntimeWrites::default();
        let t0 = Instant::now();
        let sync = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            tx.send_modify(|r| r.merge(PodWork::Sync(Arc::new(Pod::default()))));
            tokio::time::sleep(Duration::from_secs(5)).await;
            "synced"
        };
        assert_eq!(until_ended(sync, &rx, &writes).await, Some("synced"));
        assert_eq!(t0.elapsed(), Duration::from_secs(10));
        assert!(rx.has_changed().unwrap(), "the update is still to be seen");
        rx.borrow_and_update();

        // A kill 3 s into a 60 s step: dropped at once.
        let t0 = Instant::now();
        let sync = tokio::time::sleep(Duration::from_secs(60));
        let cut =
            until_ended_with_a_kill_after(sync, Duration::from_secs(3), &tx, &rx, &writes).await;
        assert_eq!(cut, None);
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
    }

    /// A kill while the sync is inside a call that must finish (it holds `RuntimeWrites`): the
    /// sync goes on until it leaves the call, then is dropped before its next step.
    #[tokio::test(start_paused = true)]
    async fn a_kill_waits_for_a_runtime_write_under_way_then_drops_the_sync() {
        let (tx, rx) = request();
        let writes = RuntimeWrites::default();
        let steps = Arc::new(Mutex::new(Vec::new()));
        let t0 = Instant::now();
        let sync = {
            let (writes, steps) = (writes.clone(), steps.clone());
            async move {
                let guard = writes.enter().await;
                tokio::time::sleep(Duration::from_secs(10)).await;
                steps.lock().unwrap().push("created");
                drop(guard);
                // The next call that must finish: reached after the kill, never entered.
                let _guard = writes.enter().await;
                steps.lock().unwrap().push("second create");
            }
        };
        let cut =
            until_ended_with_a_kill_after(sync, Duration::from_secs(1), &tx, &rx, &writes).await;
        assert_eq!(cut, None);
        assert_eq!(
            t0.elapsed(),
            Duration::from_secs(10),
            "the call under way finished"
        );
        assert_eq!(*steps.lock().unwrap(), ["created"]);
    }
}
