//! Pod workers: one task per pod UID, so a pod is never synced twice at once.
//!
//! A worker moves Syncing → Terminating → Terminated. It reads only the latest update (a `watch`
//! channel: newer updates replace older ones that were not yet seen), wakes on PLEG events, and
//! resyncs every `syncFrequency` even when nothing happened, as the kubelet does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::metrics::metrics;
use crate::sync::executor::{pod_uid, PodSyncer, SyncOutcome};

/// What the pod manager wants of a pod.
#[derive(Debug, Clone)]
pub enum PodWork {
    /// Keep the pod running as this spec says.
    Sync(Arc<Pod>),
    /// Stop the pod (with `grace`, else its own grace period); with `remove`, also delete
    /// everything it left and forget it.
    Kill {
        pod: Arc<Pod>,
        grace: Option<Duration>,
        remove: bool,
    },
    /// The API server set the pod's deletionTimestamp: terminate it (its
    /// `deletionGracePeriodSeconds` applies), remove its containers, sandbox and volumes, and
    /// report it reclaimed so the final DELETE can go out. The status stays until the pod is
    /// gone from the API.
    Delete { pod: Arc<Pod> },
}

impl PodWork {
    pub fn pod(&self) -> &Arc<Pod> {
        match self {
            PodWork::Sync(pod) | PodWork::Kill { pod, .. } | PodWork::Delete { pod } => pod,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Syncing,
    /// Containers are stopped and the status is final. `comes_back` is true when the pod was
    /// being removed: a later `Sync` for the same UID means it returned (a static pod manifest
    /// restored unchanged) and starts it afresh. A pod that finished or was killed in place
    /// stays terminated, as in the kubelet.
    Terminated {
        comes_back: bool,
    },
}

struct Handle {
    updates: watch::Sender<PodWork>,
    wake: Arc<Notify>,
}

#[derive(Clone)]
pub struct PodWorkers {
    syncer: PodSyncer,
    workers: Arc<Mutex<HashMap<String, Handle>>>,
    tracker: TaskTracker,
    cancel: CancellationToken,
    resync: Duration,
}

/// Delay before retrying a sync that failed (runtime unreachable, ...).
const ERROR_RETRY: Duration = Duration::from_secs(2);

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
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands work to the pod's worker, starting one if needed.
    pub fn update(&self, work: PodWork) {
        let uid = pod_uid(work.pod()).to_string();
        if uid.is_empty() {
            tracing::warn!("pod without UID ignored");
            return;
        }
        let mut workers = self.lock();
        if let Some(handle) = workers.get(&uid) {
            handle.updates.send_replace(work);
            return;
        }
        let (tx, rx) = watch::channel(work);
        let wake = Arc::new(Notify::new());
        workers.insert(
            uid.clone(),
            Handle {
                updates: tx,
                wake: wake.clone(),
            },
        );
        let worker = Worker {
            uid: uid.clone(),
            syncer: self.syncer.clone(),
            updates: rx,
            wake,
            cancel: self.cancel.clone(),
            resync: self.resync,
            registry: self.workers.clone(),
        };
        let pod = worker.updates.borrow().pod().clone();
        let span = tracing::info_span!(
            "pod",
            pod.uid = %uid,
            pod.namespace = pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.name = pod.metadata.name.as_deref().unwrap_or_default(),
        );
        self.tracker.spawn(worker.run().instrument(span));
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

struct Worker {
    uid: String,
    syncer: PodSyncer,
    updates: watch::Receiver<PodWork>,
    wake: Arc<Notify>,
    cancel: CancellationToken,
    resync: Duration,
    registry: Arc<Mutex<HashMap<String, Handle>>>,
}

enum Next {
    /// Loop again at once.
    Now,
    /// Wait for an update, a wake-up, or this deadline.
    WaitUntil(Instant),
    /// Wait for an update only.
    WaitForUpdate,
    Exit,
}

impl Worker {
    async fn run(mut self) {
        let mut phase = Phase::Syncing;
        let mut memory = self.syncer.new_memory();
        // Set once a deleted pod's containers, sandbox and volumes are gone.
        let mut reclaimed = false;
        loop {
            let work = self.updates.borrow_and_update().clone();
            let next = match (&work, phase) {
                (PodWork::Sync(pod), Phase::Syncing) => {
                    let started = Instant::now();
                    let result = self.syncer.sync(pod, &mut memory).await;
                    metrics()
                        .pod_worker_duration_seconds
                        .observe(started.elapsed().as_secs_f64());
                    match result {
                        Ok(SyncOutcome::Acted) => Next::Now,
                        Ok(SyncOutcome::Retry(after)) => Next::WaitUntil(Instant::now() + after),
                        Ok(SyncOutcome::Idle(deadline)) => Next::WaitUntil(
                            Instant::now() + deadline.map_or(self.resync, |d| d.min(self.resync)),
                        ),
                        Ok(SyncOutcome::Terminal) => {
                            tracing::info!("pod is terminal; stopping what remains");
                            match self.syncer.terminate(pod, None, &memory).await {
                                Ok(()) => {
                                    phase = Phase::Terminated { comes_back: false };
                                    Next::WaitForUpdate
                                }
                                Err(e) => {
                                    tracing::warn!(error = %e, "terminating pod");
                                    Next::WaitUntil(Instant::now() + ERROR_RETRY)
                                }
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "pod sync failed");
                            Next::WaitUntil(Instant::now() + ERROR_RETRY)
                        }
                    }
                }
                (PodWork::Sync(_), Phase::Terminated { comes_back: true }) => {
                    tracing::info!("pod returned after termination; starting it again");
                    phase = Phase::Syncing;
                    memory = self.syncer.new_memory();
                    Next::Now
                }
                (PodWork::Sync(_), Phase::Terminated { comes_back: false }) => Next::WaitForUpdate,
                (PodWork::Delete { pod }, _) if !reclaimed => {
                    let result = if matches!(phase, Phase::Terminated { .. }) {
                        Ok(())
                    } else {
                        tracing::info!("pod deleted through the API; terminating");
                        self.syncer.terminate(pod, None, &memory).await
                    };
                    match result {
                        Ok(()) => match self.syncer.reclaim(pod).await {
                            Ok(()) => {
                                reclaimed = true;
                                phase = Phase::Terminated { comes_back: false };
                                Next::WaitForUpdate
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "reclaiming the pod's resources");
                                phase = Phase::Terminated { comes_back: false };
                                Next::WaitUntil(Instant::now() + ERROR_RETRY)
                            }
                        },
                        Err(e) => {
                            tracing::warn!(error = %e, "terminating pod");
                            Next::WaitUntil(Instant::now() + ERROR_RETRY)
                        }
                    }
                }
                // Reclaimed: nothing to do until the pod is gone from the API.
                (PodWork::Delete { .. }, _) => Next::WaitForUpdate,
                (PodWork::Kill { pod, grace, remove }, _) => {
                    let result = if matches!(phase, Phase::Terminated { .. }) {
                        Ok(())
                    } else {
                        tracing::info!(grace_override = ?grace, "terminating pod");
                        self.syncer.terminate(pod, *grace, &memory).await
                    };
                    match result {
                        Err(e) => {
                            tracing::warn!(error = %e, "terminating pod");
                            Next::WaitUntil(Instant::now() + ERROR_RETRY)
                        }
                        Ok(()) => {
                            phase = Phase::Terminated {
                                comes_back: *remove,
                            };
                            if !*remove {
                                Next::WaitForUpdate
                            } else {
                                match self.syncer.remove(pod).await {
                                    Ok(()) => Next::Exit,
                                    Err(e) => {
                                        tracing::warn!(error = %e, "removing pod");
                                        Next::WaitUntil(Instant::now() + ERROR_RETRY)
                                    }
                                }
                            }
                        }
                    }
                }
            };
            match next {
                Next::Now => {
                    if self.cancel.is_cancelled() {
                        return;
                    }
                }
                Next::Exit => {
                    // Deregister under the lock; if a new update arrived meanwhile (the same pod
                    // came back), start over instead of losing it.
                    let mut registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
                    if self.updates.has_changed().unwrap_or(false) {
                        drop(registry);
                        phase = Phase::Syncing;
                        memory = self.syncer.new_memory();
                        continue;
                    }
                    registry.remove(&self.uid);
                    return;
                }
                Next::WaitUntil(deadline) => {
                    tokio::select! {
                        _ = self.cancel.cancelled() => return,
                        changed = self.updates.changed() => if changed.is_err() { return },
                        _ = self.wake.notified() => {}
                        _ = tokio::time::sleep_until(deadline) => {}
                    }
                }
                Next::WaitForUpdate => {
                    tokio::select! {
                        _ = self.cancel.cancelled() => return,
                        changed = self.updates.changed() => if changed.is_err() { return },
                    }
                }
            }
        }
    }
}
