//! The node shutdown manager: the kubelet's `nodeshutdown.managerImpl` on Linux.
//!
//! At start it reads logind's `InhibitDelayMaxUSec`; when that is shorter than the sum of the
//! groups' periods it writes the logind drop-in, has logind reload and reads the delay again
//! (an error when it is still too short). It then takes a `delay` inhibitor lock on shutdown
//! and waits for `PrepareForShutdown`:
//!
//! * `true`: the node is marked shutting down ([`ShutdownView`]: admission rejects new pods
//!   with `NodeShutdown`, the node reports `Ready=False`, `node is shutting down`), a
//!   `NodeShutdown` event is recorded, and the pods are ended group by group, lowest priority
//!   first, through `kill_pod` (Failed, `Terminated`, the kubelet's message, `DisruptionTarget`
//!   True / `TerminationByKubelet`), each with the shorter of its group's period and its own
//!   grace period; the next group starts when the last pod of this one is terminated or the
//!   group's period is over. The lock is released at the end, and logind goes on.
//! * `false` (the shutdown was cancelled): the mark is removed and the lock taken again. Unlike
//!   the kubelet, whose sequence blocks its event loop, a cancellation during the sequence
//!   stops it before the next group; pods already ended stay ended (as the kubelet's).
//!
//! The state file records when the last sequence started and ended. When the bus connection
//! ends, or the start fails, the manager tries again (after 1 s, doubling up to a minute on
//! failures; the kubelet retries every second only after a working start).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use k8s_openapi::api::core::v1::PodCondition;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::groups::{group_by_priority, period_requested, pod_grace_period};
use super::logind::{check_delay, write_drop_in, DelayCheck, InhibitLock, Logind, LogindError};
use super::state::{self, ShutdownState};
use super::{NODE_SHUTDOWN_MESSAGE, NODE_SHUTDOWN_REASON};
use crate::clock::Clock;
use crate::config::shutdown::GracePeriodByPriority;
use crate::events::{node_ref, EventRecorder, EventType};
use crate::lifecycle::kill::PodKiller;
use crate::lifecycle::pods::ActivePods;
use crate::lifecycle::shutdown::ShutdownView;
use crate::metrics::metrics;
use crate::podspec::pod_uid;
use crate::status::StatusMutation;

/// The first wait before connecting again (the kubelet's `dbusReconnectPeriod`).
pub const RECONNECT_PERIOD: Duration = Duration::from_secs(1);
/// The longest wait between two failed starts.
pub const RECONNECT_PERIOD_MAX: Duration = Duration::from_secs(60);

/// The wait before connecting to logind again after `failures` failed tries in a row: 1 s,
/// doubling, at most a minute.
fn reconnect_wait(failures: u32) -> Duration {
    crate::backoff::exponential(RECONNECT_PERIOD, failures, RECONNECT_PERIOD_MAX)
}

/// How long logind gets to re-read its configuration after the SIGHUP.
const RELOAD_WAIT: Duration = Duration::from_secs(2);
const RELOAD_POLL: Duration = Duration::from_millis(100);
/// The node event's reason (the kubelet's `events.NodeShutdown`).
pub const EVENT_NODE_SHUTDOWN: &str = "NodeShutdown";

/// How the manager is set up.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The groups, lowest priority first (never empty: no groups, no manager).
    pub periods: Vec<GracePeriodByPriority>,
    /// The logind drop-in written when logind's delay is too short.
    pub drop_in: PathBuf,
    /// `graceful_node_shutdown_state` under the root directory.
    pub state_file: PathBuf,
    pub node_name: String,
}

/// What a `PrepareForShutdown` signal does, given whether the node is marked shutting down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Mark the node, end the pods, release the lock.
    Start,
    /// Un-mark the node, stop the sequence, take the lock again.
    Cancel,
    /// A repeat of what is already so.
    Ignore,
}

/// The state machine: `shutting_down` is the current mark, `active` the signal's argument.
pub fn transition(shutting_down: bool, active: bool) -> Transition {
    match (shutting_down, active) {
        (false, true) => Transition::Start,
        (true, false) => Transition::Cancel,
        _ => Transition::Ignore,
    }
}

/// The final status of a pod ended by a node shutdown.
pub fn shutdown_status() -> StatusMutation {
    StatusMutation::failed(NODE_SHUTDOWN_REASON, NODE_SHUTDOWN_MESSAGE).with_condition(
        PodCondition {
            type_: "DisruptionTarget".to_string(),
            status: "True".to_string(),
            reason: Some("TerminationByKubelet".to_string()),
            message: Some(NODE_SHUTDOWN_MESSAGE.to_string()),
            ..Default::default()
        },
    )
}

/// Makes a logind connection (a new one after each loss).
pub type Connect =
    Arc<dyn Fn() -> BoxFuture<'static, Result<Arc<dyn Logind>, LogindError>> + Send + Sync>;

/// The system bus.
pub fn system_bus() -> Connect {
    Arc::new(|| {
        Box::pin(async {
            let logind = super::dbus::ZbusLogind::connect(None).await?;
            Ok(Arc::new(logind) as Arc<dyn Logind>)
        })
    })
}

#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    Logind(#[from] LogindError),
    #[error("logind's PrepareForShutdown signals ended (the bus connection is gone)")]
    StreamEnded,
}

pub struct ShutdownManager {
    settings: Settings,
    connect: Connect,
    pods: Arc<dyn ActivePods>,
    killer: Arc<dyn PodKiller>,
    events: EventRecorder,
    clock: Clock,
    shutting_down: watch::Sender<bool>,
}

impl ShutdownManager {
    pub fn new(
        settings: Settings,
        connect: Connect,
        pods: Arc<dyn ActivePods>,
        killer: Arc<dyn PodKiller>,
        events: EventRecorder,
        clock: Clock,
    ) -> ShutdownManager {
        ShutdownManager {
            settings,
            connect,
            pods,
            killer,
            events,
            clock,
            shutting_down: watch::channel(false).0,
        }
    }

    pub fn view(&self) -> ShutdownView {
        ShutdownView::following(self.shutting_down.subscribe())
    }

    /// Runs until cancelled, connecting again whenever the connection ends or a start fails.
    pub async fn run(self, cancel: CancellationToken) {
        tracing::info!(
            periods = ?self.settings.periods,
            requested = ?period_requested(&self.settings.periods),
            "node shutdown manager: starting"
        );
        match state::load(&self.settings.state_file) {
            Ok(
                last @ ShutdownState {
                    start: Some(start),
                    end,
                },
            ) => {
                tracing::info!(
                    %start,
                    end = %end.map_or_else(|| "never".to_string(), |e| e.to_string()),
                    "node shutdown manager: the last graceful shutdown"
                );
                publish_metrics(&last);
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "node shutdown manager: reading the state"),
        }
        // Failures since the last good connection: the wait doubles from RECONNECT_PERIOD.
        let mut failures = 0u32;
        loop {
            match self.watch(&cancel).await {
                Ok(()) => return,
                Err(StartError::StreamEnded) => {
                    tracing::warn!(
                        "node shutdown manager: logind's signals ended; connecting again"
                    );
                    failures = 0;
                }
                Err(StartError::Logind(error)) => {
                    let retry_in = reconnect_wait(failures);
                    tracing::error!(%error, ?retry_in, "node shutdown manager: unable to watch the node for shutdown events");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(reconnect_wait(failures)) => {}
                _ = cancel.cancelled() => return,
            }
            failures = failures.saturating_add(1);
        }
    }

    /// Raises logind's delay through the drop-in when it is shorter than the periods need.
    async fn ensure_delay(&self, logind: &dyn Logind) -> Result<(), LogindError> {
        let requested = period_requested(&self.settings.periods);
        let current = logind.inhibit_delay_max().await?;
        let DelayCheck::Raise(delay) = check_delay(requested, current) else {
            return Ok(());
        };
        tracing::info!(current = ?current, requested = ?delay, path = %self.settings.drop_in.display(), "node shutdown manager: raising logind's InhibitDelayMaxSec");
        write_drop_in(&self.settings.drop_in, delay)?;
        logind.reload().await?;
        // logind re-reads its configuration when it handles the signal, not before the call
        // returns: read again for a little while.
        let deadline = tokio::time::Instant::now() + RELOAD_WAIT;
        loop {
            let current = logind.inhibit_delay_max().await?;
            if current >= requested {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(LogindError::DelayTooShort {
                    requested,
                    current,
                    path: self.settings.drop_in.clone(),
                });
            }
            tokio::time::sleep(RELOAD_POLL).await;
        }
    }

    fn mark(&self, shutting_down: bool) {
        self.shutting_down.send_replace(shutting_down);
        let message = if shutting_down {
            "Shutdown manager detected shutdown event"
        } else {
            "Shutdown manager detected shutdown cancellation"
        };
        self.events.record(
            &node_ref(&self.settings.node_name),
            EventType::Normal,
            EVENT_NODE_SHUTDOWN,
            message.to_string(),
        );
    }

    /// One connection: the start (delay, lock, subscription), then the signals until the
    /// stream ends (`Err(StreamEnded)`) or nodelet stops (`Ok`).
    async fn watch(&self, cancel: &CancellationToken) -> Result<(), StartError> {
        let logind = (self.connect)().await?;
        self.ensure_delay(logind.as_ref()).await?;
        // Subscribed before the lock is taken, so no signal the lock causes is missed.
        let mut signals = logind.prepare_for_shutdown().await?;
        let mut lock = Some(logind.inhibit_shutdown().await?);
        tracing::info!(
            delay = ?period_requested(&self.settings.periods),
            "node shutdown manager: holding a delay inhibitor lock on shutdown"
        );
        let mut sequence: Option<BoxFuture<'_, ()>> = None;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                signal = signals.next() => {
                    let Some(active) = signal else {
                        return Err(StartError::StreamEnded);
                    };
                    let marked = *self.shutting_down.borrow();
                    match transition(marked, active) {
                        Transition::Start => {
                            tracing::warn!("node shutdown manager: the node is shutting down; ending pods");
                            self.mark(true);
                            sequence = Some(Box::pin(self.end_pods(lock.take())));
                        }
                        Transition::Cancel => {
                            tracing::info!(
                                stopped_sequence = sequence.is_some(),
                                "node shutdown manager: the shutdown was cancelled"
                            );
                            sequence = None;
                            self.mark(false);
                            // The old lock (if the sequence had not released it) goes after
                            // the new one is held, so the node is never without one.
                            let old = lock.take();
                            match logind.inhibit_shutdown().await {
                                Ok(new) => lock = Some(new),
                                Err(error) => tracing::error!(%error, "node shutdown manager: taking the inhibitor lock again"),
                            }
                            drop(old);
                        }
                        Transition::Ignore => {
                            tracing::debug!(active, "node shutdown manager: repeated PrepareForShutdown");
                        }
                    }
                }
                () = async { sequence.as_mut().expect("guarded").await }, if sequence.is_some() => {
                    sequence = None;
                }
            }
        }
    }

    /// The kubelet's `processShutdownEvent`: the groups in turn, then the lock released.
    async fn end_pods(&self, lock: Option<InhibitLock>) {
        let start = self.clock.now();
        // The file is fsync'd: written on a blocking thread, never on a runtime worker.
        let store = |state: ShutdownState| {
            publish_metrics(&state);
            let path = self.settings.state_file.clone();
            async move {
                let written = tokio::task::spawn_blocking(move || state::store(&path, &state))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()));
                if let Err(error) = written {
                    tracing::warn!(%error, "node shutdown manager: storing the state");
                }
            }
        };
        store(ShutdownState {
            start: Some(start),
            end: None,
        })
        .await;
        let pods = self.pods.active_pods();
        for group in group_by_priority(&self.settings.periods, &pods) {
            if group.pods.is_empty() {
                continue;
            }
            let seconds = group.period.shutdown_grace_period_seconds;
            tracing::info!(
                priority = group.period.priority,
                period_seconds = seconds,
                pods = group.pods.len(),
                "node shutdown manager: ending a priority group"
            );
            let handles: Vec<_> = group
                .pods
                .iter()
                .map(|pod| {
                    let grace = pod_grace_period(seconds, pod);
                    tracing::info!(
                        pod.uid = pod_uid(pod),
                        pod.name = pod.metadata.name.as_deref().unwrap_or_default(),
                        grace = ?grace,
                        "node shutdown manager: ending pod"
                    );
                    self.killer
                        .kill_pod(pod.clone(), Some(grace), shutdown_status())
                        .terminated()
                })
                .collect();
            let period = crate::clock::seconds_from_api(seconds);
            match tokio::time::timeout(period, futures::future::join_all(handles)).await {
                Ok(_) => tracing::info!(
                    priority = group.period.priority,
                    "node shutdown manager: every pod of the group is terminated"
                ),
                Err(_) => tracing::warn!(
                    priority = group.period.priority,
                    period_seconds = seconds,
                    "node shutdown manager: the group's period is over; going on"
                ),
            }
        }
        store(ShutdownState {
            start: Some(start),
            end: Some(self.clock.now()),
        })
        .await;
        drop(lock);
        tracing::info!(
            "node shutdown manager: done; the inhibitor lock is released, the node will shut down"
        );
    }
}

/// The shutdown's times as the metrics' values: seconds since the epoch, `None` for a time
/// not reached (the metric keeps its value).
pub fn metric_seconds(state: &ShutdownState) -> (Option<f64>, Option<f64>) {
    let seconds = |t: Option<jiff::Timestamp>| t.map(|t| t.as_millisecond() as f64 / 1000.0);
    (seconds(state.start), seconds(state.end))
}

fn publish_metrics(state: &ShutdownState) {
    let (start, end) = metric_seconds(state);
    if let Some(start) = start {
        metrics().graceful_shutdown_start_time_seconds.set(start);
    }
    if let Some(end) = end {
        metrics().graceful_shutdown_end_time_seconds.set(end);
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
