//! The status manager's API server side (cluster mode): deliver every status nodelet generates
//! to the pod's API object, send the final DELETE of a pod whose deletion was requested once its
//! resources are reclaimed, and delete failed pods nobody will ever delete.
//!
//! This is the kubelet's `status_manager.go` `syncBatch`/`syncPod`, with these differences:
//!
//! * The API's view of a pod comes from the shared reflector [`Store`], not from a GET per sync.
//! * **What to write is decided from nodelet's own record**, never from the server's echo: a
//!   new status version is written when it differs from the status nodelet last wrote
//!   successfully for that UID (the kubelet's `apiStatusVersions`, plus the status itself), and
//!   only the fields that differ from the API's copy go out. At steady state nothing is sent.
//! * The server's copy is consulted for writing only by the periodic reconcile (the kubelet's
//!   `needsReconcile`, every [`RECONCILE_PERIOD`]): it restores what someone else changed. A
//!   difference that a successful write did not remove (a server that drops or normalizes a
//!   field) is logged once, naming the field path, and retried with an exponential backoff up
//!   to [`CONVERGENCE_BACKOFF_MAX`] instead of at every reconcile.
//! * Status fields the API server's release does not store are not sent at all
//!   ([`crate::cluster::api_fields`]; the release is read from `/version` at start and after
//!   the server was unreachable).
//! * A failed request is retried with a per-pod exponential backoff, and the reconcile
//!   re-checks every cached pod, so a status produced while the API server was unreachable is
//!   delivered when it comes back (krustlet patched once and forgot).
//! * Writes are counted per pod (`nodelet_pod_status_writes_total`), and a pod written more than
//!   [`ApiStatusSyncOptions::writes_per_minute_warning`] times in a minute is logged.
//! * Failed pods the node failed (evicted, rejected at admission, terminated by a node shutdown)
//!   and nobody deleted are deleted after a retention ([`should_clean_up`]); the kubelet never
//!   deletes them, because its `canBeDeleted` needs a `deletionTimestamp` nobody sets (seed
//!   001). A pod that failed on its own (its containers, its deadline) is never deleted.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions, PropagationPolicy};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::generate::{
    CONTAINERS_READY, DISRUPTION_TARGET, EVICTED_REASON, INITIALIZED,
    POD_READY_TO_START_CONTAINERS, POD_RESTART_IN_PLACE, POD_SCHEDULED, READY,
    REJECTED_MESSAGE_PREFIX, TERMINATION_BY_KUBELET,
};
use super::manager::{StatusManager, VersionedStatus};
use super::patch::{changed_paths, status_patch};
use super::phase::is_terminal_phase;
use crate::clock::Clock;
use crate::cluster::api_fields::strip_pod_status;
use crate::cluster::convergence::{after_write, decide_write, NonConvergence, WriteDecision};
use crate::cluster::{ApiServerVersion, Release};
use crate::config::PodCleanup;
use crate::metrics::{metrics, PodLabels};
use crate::podspec::is_mirror_pod;
use crate::podspec::Phase;
use crate::podspec::CONFIG_SOURCE_ANNOTATION;
use crate::podspec::{annotation, MIRROR_ANNOTATION};
use crate::source::{CONFIG_HASH_ANNOTATION, FILE_SOURCE};

/// The kubelet's status `syncPeriod`: how often every cached status is compared with the API.
pub const RECONCILE_PERIOD: Duration = Duration::from_secs(10);

/// The longest wait between reconcile writes of a difference that writing does not remove.
pub const CONVERGENCE_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// Status writes of one pod in a minute above which nodelet warns: more than the busiest
/// legitimate lifecycle (a readiness probe flapping every few seconds) produces.
pub const WRITES_PER_MINUTE_WARNING: usize = 30;

/// Reasons of the Ready/ContainersReady conditions forced to False for a terminal phase
/// (`generatePodReadyConditionForTerminalPhase`).
const POD_FAILED_REASON: &str = "PodFailed";
const POD_COMPLETED_REASON: &str = "PodCompleted";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("pod {pod} (uid {uid}): encoding the status patch: {source}")]
    Encode {
        pod: String,
        uid: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("pod {pod} (uid {uid}): {request}: {source}")]
    Request {
        pod: String,
        uid: String,
        /// `PATCH pods/web/status`, `DELETE pods/web (final, grace 0)`, ...
        request: String,
        #[source]
        source: kube::Error,
    },
    #[error("pod {pod} (uid {uid}): {request}: no answer within {timeout:?}")]
    Timeout {
        pod: String,
        uid: String,
        request: String,
        timeout: Duration,
    },
}

impl Error {
    /// The API server did not answer (connection refused, timeout, ...): other requests of the
    /// same pass would fail the same way, so the pass stops and the backoff decides when to try.
    fn is_unreachable(&self) -> bool {
        match self {
            Error::Encode { .. } => false,
            Error::Timeout { .. } => true,
            Error::Request { source, .. } => !matches!(source, kube::Error::Api(_)),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Tuning of [`ApiStatusSync`]; the defaults are the kubelet's periods.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiStatusSyncOptions {
    /// Every cached pod is compared with the API this often ([`RECONCILE_PERIOD`]).
    pub reconcile_period: Duration,
    /// First retry delay of a pod whose request failed; doubled per failure ...
    pub backoff_initial: Duration,
    /// ... up to this.
    pub backoff_max: Duration,
    /// A request without an answer after this counts as failed (the client's own timeouts
    /// are minutes long; one silent API server must not stall every pod).
    pub request_timeout: Duration,
    /// Failed-pod cleanup (`podCleanup` in the configuration).
    pub pod_cleanup: PodCleanup,
    /// A difference a write did not remove is written again after `reconcile_period`, then
    /// twice as long each time, up to this.
    pub convergence_backoff_max: Duration,
    /// Leave out the status fields the API server's release does not store. Off only in tests
    /// that stand for a server which drops something nodelet does not know about.
    pub strip_unsupported_fields: bool,
    /// Warn when one pod's status is written more often than this in a minute.
    pub writes_per_minute_warning: usize,
}

impl Default for ApiStatusSyncOptions {
    fn default() -> Self {
        ApiStatusSyncOptions {
            reconcile_period: RECONCILE_PERIOD,
            backoff_initial: Duration::from_millis(500),
            backoff_max: RECONCILE_PERIOD,
            request_timeout: Duration::from_secs(10),
            pod_cleanup: PodCleanup::default(),
            convergence_backoff_max: CONVERGENCE_BACKOFF_MAX,
            strip_unsupported_fields: true,
            writes_per_minute_warning: WRITES_PER_MINUTE_WARNING,
        }
    }
}

/// What the sync did, for tests (the same numbers are in `/metrics`).
#[derive(Debug, Default)]
pub struct ApiStatusSyncStats {
    reconciles: AtomicU64,
    writes: AtomicU64,
}

impl ApiStatusSyncStats {
    /// Periodic passes over every cached pod: a test proving "no writes" first sees these move.
    pub fn reconciles(&self) -> u64 {
        self.reconciles.load(Ordering::Relaxed)
    }
    /// Status PATCHes answered by the API server.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }
}

// ---- pure decisions ----

/// A pod from the static manifest directory (`kubernetes.io/config.source: file`).
pub fn is_static_pod(pod: &Pod) -> bool {
    annotation(pod, CONFIG_SOURCE_ANNOTATION) == Some(FILE_SOURCE)
}

/// What the API holds under a cached pod's namespace/name.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiPod {
    /// The pod's own API object: same UID, or for a static pod its mirror pod.
    Found(Arc<Pod>),
    /// Nothing (not created yet, or deleted).
    Missing,
    /// Another object under the same name: a pod deleted and recreated (other UID), or a
    /// mirror pod of another version of the static manifest. Never patched or deleted with
    /// this pod's status.
    Other { uid: String },
}

/// Matches the API object found under `local`'s namespace/name (the kubelet's
/// `translatePodUID` + the recreated-pod check of `syncPod`): a static pod's status goes to
/// its mirror pod (`config.mirror` = the static pod's `config.hash`), any other pod's only to
/// the object with its UID.
pub fn match_api_pod(local: &Pod, candidate: Option<Arc<Pod>>) -> ApiPod {
    let Some(candidate) = candidate else {
        return ApiPod::Missing;
    };
    let uid = candidate.metadata.uid.clone().unwrap_or_default();
    let matches = if is_static_pod(local) {
        let hash = annotation(local, CONFIG_HASH_ANNOTATION)
            .or(local.metadata.uid.as_deref())
            .unwrap_or_default();
        annotation(&candidate, MIRROR_ANNOTATION) == Some(hash)
    } else {
        !uid.is_empty() && local.metadata.uid.as_deref() == Some(uid.as_str())
    };
    if matches {
        ApiPod::Found(candidate)
    } else {
        ApiPod::Other { uid }
    }
}

/// Conditions nodelet generates and owns (`PodConditionsByKubelet`, plus `PodRestartInPlace`
/// which only nodelet writes): its copy replaces the API's.
fn is_nodelet_condition(type_: &str) -> bool {
    matches!(
        type_,
        POD_SCHEDULED
            | READY
            | INITIALIZED
            | CONTAINERS_READY
            | POD_READY_TO_START_CONTAINERS
            | POD_RESTART_IN_PLACE
            | super::generate::POD_RESIZE_PENDING
            | super::generate::POD_RESIZE_IN_PROGRESS
    )
}

fn replace_or_append(conditions: &mut Vec<PodCondition>, c: PodCondition) {
    match conditions.iter_mut().find(|x| x.type_ == c.type_) {
        Some(existing) => *existing = c,
        None => conditions.push(c),
    }
}

/// `podutil.UpdatePodCondition`, with the transition judged against the API's copy of the
/// condition (`api`): a condition whose status the API already has keeps the API's
/// `lastTransitionTime`, so re-sending a status never moves it (and never causes a PATCH).
fn update_condition(
    conditions: &mut Vec<PodCondition>,
    mut c: PodCondition,
    api: &[PodCondition],
    now: Timestamp,
) {
    c.last_transition_time = match api.iter().find(|x| x.type_ == c.type_) {
        Some(o) if o.status == c.status => o.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    if c.observed_generation.is_none() {
        c.observed_generation = conditions
            .iter()
            .find(|x| x.type_ == c.type_)
            .and_then(|o| o.observed_generation);
    }
    replace_or_append(conditions, c);
}

/// The kubelet's `mergePodStatus`, plus the guarantees the API server's copy needs from this
/// side: the status nodelet wants written over `api` (the API object's status), from `ours`
/// (the status manager's).
///
/// * Conditions nodelet does not own (readiness gates, `DisruptionTarget` set by others, ...)
///   are the API's; nodelet's own ones are its own. Nodelet's `DisruptionTarget` is sent only
///   with the move to a terminal phase, with a fresh transition time (so it is not announced
///   while containers may still run).
/// * `delay_terminal` (containers may still run) keeps the API's phase, reason and message.
/// * A terminal phase in the API is never left; `startTime` never changes once the API has one;
///   `observedGeneration` never goes back.
/// * A terminal phase never goes out with Ready/ContainersReady True (issue 108594).
pub fn merge_pod_status(
    api: &PodStatus,
    ours: &PodStatus,
    delay_terminal: bool,
    now: Timestamp,
) -> PodStatus {
    let mut merged = ours.clone();
    let api_terminal = is_terminal_phase(api.phase.as_deref());
    let transitioning = !api_terminal && is_terminal_phase(ours.phase.as_deref());

    let api_conditions = api.conditions.as_deref().unwrap_or(&[]);
    let mut conditions: Vec<PodCondition> = api_conditions
        .iter()
        .filter(|c| !is_nodelet_condition(&c.type_))
        .cloned()
        .collect();
    for c in ours.conditions.iter().flatten() {
        if is_nodelet_condition(&c.type_) {
            conditions.push(c.clone());
        } else if c.type_ == DISRUPTION_TARGET && transitioning && !delay_terminal {
            update_condition(&mut conditions, c.clone(), api_conditions, now);
        }
    }

    if transitioning && delay_terminal {
        merged.phase.clone_from(&api.phase);
        merged.reason.clone_from(&api.reason);
        merged.message.clone_from(&api.message);
    }
    if api_terminal && merged.phase != api.phase {
        merged.phase.clone_from(&api.phase);
        merged.reason.clone_from(&api.reason);
        merged.message.clone_from(&api.message);
    }
    if api.start_time.is_some() {
        merged.start_time.clone_from(&api.start_time);
    }
    merged.observed_generation = merged.observed_generation.max(api.observed_generation);

    let terminal_reason = match merged.phase.as_deref().and_then(Phase::parse) {
        Some(Phase::Failed) => Some(POD_FAILED_REASON),
        Some(Phase::Succeeded) => Some(POD_COMPLETED_REASON),
        _ => None,
    };
    if let Some(reason) = terminal_reason {
        let any_ready = conditions
            .iter()
            .any(|c| (c.type_ == READY || c.type_ == CONTAINERS_READY) && c.status == "True");
        if any_ready {
            for type_ in [CONTAINERS_READY, READY] {
                let c = PodCondition {
                    type_: type_.to_string(),
                    status: "False".to_string(),
                    reason: Some(reason.to_string()),
                    ..Default::default()
                };
                update_condition(&mut conditions, c, api_conditions, now);
            }
        }
    }
    merged.conditions = (!conditions.is_empty()).then_some(conditions);
    merged
}

/// The kubelet's `canBeDeleted`: the final DELETE (grace 0) goes out for a pod whose deletion
/// was requested (`deletionTimestamp`), whose terminal phase the API already shows, and whose
/// resources nodelet has reclaimed. Mirror pods are never deleted this way.
pub fn can_be_deleted(api_pod: &Pod, reclaimed: bool) -> bool {
    api_pod.metadata.deletion_timestamp.is_some()
        && !is_mirror_pod(api_pod)
        && is_terminal_phase(api_pod.status.as_ref().and_then(|s| s.phase.as_deref()))
        && reclaimed
}

fn has_controller(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true))
}

/// When a failed pod nodelet will clean up becomes due: `None` if it never will (cleanup off,
/// not Failed in the API, not failed by the node ([`failed_by_node`]), deletion already
/// requested, a mirror pod, bound to another node, a bare pod without `barePods`, or no terminal
/// phase published by this node).
pub fn cleanup_deadline(
    pod: &Pod,
    node_name: &str,
    terminal_since: Option<Timestamp>,
    cfg: &PodCleanup,
) -> Option<Timestamp> {
    let eligible = cfg.enabled
        && pod.metadata.deletion_timestamp.is_none()
        && Phase::of(pod.status.as_ref()) == Some(Phase::Failed)
        && failed_by_node(pod.status.as_ref())
        && !is_mirror_pod(pod)
        && pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name)
        && (has_controller(pod) || cfg.bare_pods);
    if !eligible {
        return None;
    }
    let retention = jiff::SignedDuration::try_from(cfg.retention).ok()?;
    terminal_since?.checked_add(retention).ok()
}

/// Whether a Failed `status` is one the node gave the pod, told apart by what nodelet itself
/// wrote: evicted (reason `Evicted`), rejected at admission (message `Pod was rejected: …`),
/// or ended by the node agent (`DisruptionTarget` True with reason `TerminationByKubelet`: node
/// shutdown, eviction). A pod whose containers failed, or that ran past
/// `activeDeadlineSeconds` (reason `DeadlineExceeded`), failed on its own: its record is what a
/// Job or a person reads, and it stays. Read from the status, so it holds across restarts.
pub fn failed_by_node(status: Option<&PodStatus>) -> bool {
    let Some(status) = status else {
        return false;
    };
    let terminated_by_node = status.conditions.iter().flatten().any(|c| {
        c.type_ == DISRUPTION_TARGET
            && c.status == "True"
            && c.reason.as_deref() == Some(TERMINATION_BY_KUBELET)
    });
    status.reason.as_deref() == Some(EVICTED_REASON)
        || status
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with(REJECTED_MESSAGE_PREFIX))
        || terminated_by_node
}

/// Failed-pod cleanup: a pod this node made Failed ([`failed_by_node`]: evicted, rejected at
/// admission, terminated by a node shutdown) that nobody deleted is deleted `retention` after
/// nodelet published its terminal phase (`terminal_since`), if a controller owns it (it makes a
/// replacement; the failed one is only a record) or `barePods` is set. See
/// [`cleanup_deadline`] for the rest.
pub fn should_clean_up(
    pod: &Pod,
    node_name: &str,
    terminal_since: Option<Timestamp>,
    now: Timestamp,
    cfg: &PodCleanup,
) -> bool {
    cleanup_deadline(pod, node_name, terminal_since, cfg).is_some_and(|due| now >= due)
}

use crate::cluster::convergence::backoff_delay;

/// Conditions the merge takes from the API's copy (readiness gates and the like): not part of
/// what nodelet itself wrote.
fn without_foreign_conditions(status: &PodStatus) -> PodStatus {
    let mut status = status.clone();
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| is_nodelet_condition(&c.type_) || c.type_ == DISRUPTION_TARGET);
    }
    status
}

/// Whether `desired` says nothing that `written` (the status nodelet last wrote) did not say,
/// as the API serializes them (whole seconds) and leaving out conditions others own.
pub fn same_as_written(written: &PodStatus, desired: &PodStatus) -> bool {
    let json = |s: &PodStatus| serde_json::to_value(without_foreign_conditions(s)).ok();
    match (json(written), json(desired)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

// ---- the task ----

/// Our own last write of a pod, for as long as the store has not caught up with it.
#[derive(Debug)]
struct Written {
    /// resourceVersions our writes replaced: a store still showing one of them is stale.
    superseded: Vec<String>,
    pod: Arc<Pod>,
}

#[derive(Debug, Default)]
struct PodSync {
    /// The kubelet's `apiStatusVersions`: the status version last delivered (written, or found
    /// already in the API).
    delivered_version: Option<u64>,
    /// The status last written successfully (or found already in the API), as it was sent:
    /// new versions are compared with this, not with the server's copy.
    last_written: Option<PodStatus>,
    failures: u32,
    retry_at: Option<Instant>,
    written: Option<Written>,
    /// The API object under this pod's name is another pod; logged once.
    reported_other: bool,
    /// Differences the last write did not remove.
    stuck: Option<NonConvergence>,
    /// When this pod's recent writes were answered (the last minute).
    recent_writes: VecDeque<Instant>,
    /// When the write-rate warning was last logged for this pod.
    rate_warned_at: Option<Instant>,
}

impl PodSync {
    /// The API's current view: the store's object, unless the store still shows a version our
    /// own PATCH replaced (the watch event is on its way) — then the PATCH's answer.
    fn api_view(&mut self, stored: Arc<Pod>) -> Arc<Pod> {
        let Some(written) = &self.written else {
            return stored;
        };
        let rv = stored
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default();
        if written.superseded.iter().any(|s| s == rv) {
            return written.pod.clone();
        }
        self.written = None;
        stored
    }

    fn record_write(&mut self, base: &Pod, answer: Pod) -> Arc<Pod> {
        let mut superseded = self
            .written
            .take()
            .map(|w| w.superseded)
            .unwrap_or_default();
        if let Some(rv) = &base.metadata.resource_version {
            superseded.push(rv.clone());
        }
        let pod = Arc::new(answer);
        self.written = Some(Written {
            superseded,
            pod: pod.clone(),
        });
        pod
    }

    /// Counts a write at `now`; returns how many there were in the minute up to `now` when
    /// that is above `bound` and no warning went out in the last minute.
    fn count_write(&mut self, now: Instant, bound: usize) -> Option<usize> {
        const MINUTE: Duration = Duration::from_secs(60);
        self.recent_writes.push_back(now);
        while self
            .recent_writes
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= MINUTE)
        {
            self.recent_writes.pop_front();
        }
        let count = self.recent_writes.len();
        let quiet = self
            .rate_warned_at
            .is_none_or(|t| now.saturating_duration_since(t) >= MINUTE);
        (count > bound && quiet).then(|| {
            self.rate_warned_at = Some(now);
            count
        })
    }
}

#[derive(Debug, Default)]
struct SyncState {
    pods: HashMap<String, PodSync>,
    /// UIDs whose one DELETE (final or cleanup) has been answered. Kept apart from `pods` (and
    /// pruned only once the UID is gone from both the cache and the API) so that a status
    /// re-added for the same UID can never cause a second DELETE.
    deleted: HashSet<String>,
    /// The pod each per-pod metric series is labelled with, to remove it when the pod goes.
    labels: HashMap<String, PodLabels>,
    /// Field paths already logged as not converging (each is logged once).
    reported_paths: HashSet<String>,
}

/// What [`ApiStatusSync::sync_pod`] did for one pod.
#[derive(Debug, Default)]
struct PodSynced {
    /// A cleanup deletion that is pending until then.
    cleanup_due: Option<Timestamp>,
    /// A status PATCH went out (and was answered).
    wrote: bool,
    /// Fields that write left different on the server that were not stuck before.
    newly_stuck: Vec<String>,
}

/// The status manager's API server sync. Build with [`ApiStatusSync::new`], run with
/// [`ApiStatusSync::run`] in its own task.
pub struct ApiStatusSync {
    statuses: StatusManager,
    client: kube::Client,
    pods: Store<Pod>,
    node_name: String,
    clock: Clock,
    options: ApiStatusSyncOptions,
    server: ApiServerVersion,
    stats: Arc<ApiStatusSyncStats>,
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

fn labels_of(pod: &Pod) -> PodLabels {
    PodLabels {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        pod: pod.metadata.name.clone().unwrap_or_default(),
    }
}

impl ApiStatusSync {
    /// `pods` is the reflector store of every pod bound to `node_name` (mirror pods included);
    /// `clock` stamps transition times and counts cleanup retention.
    pub fn new(
        statuses: StatusManager,
        client: kube::Client,
        pods: Store<Pod>,
        node_name: impl Into<String>,
        clock: Clock,
        options: ApiStatusSyncOptions,
    ) -> Self {
        ApiStatusSync {
            statuses,
            client,
            pods,
            node_name: node_name.into(),
            clock,
            options,
            server: ApiServerVersion::new(),
            stats: Arc::new(ApiStatusSyncStats::default()),
        }
    }

    /// Shares the API server's version with the other writers (one `/version` read for all).
    pub fn with_server_version(mut self, server: ApiServerVersion) -> Self {
        self.server = server;
        self
    }

    pub fn stats(&self) -> Arc<ApiStatusSyncStats> {
        self.stats.clone()
    }

    /// Syncs until `cancel` fires. Wakes on every status change (bursts coalesce: one pass sees
    /// all of them), at the earliest per-pod retry or cleanup deadline, and every
    /// `reconcile_period`; sleeps otherwise.
    pub async fn run(self, cancel: CancellationToken) {
        let mut changes = self.statuses.subscribe();
        tokio::select! {
            _ = cancel.cancelled() => return,
            ready = self.pods.wait_until_ready() => {
                if ready.is_err() {
                    tracing::error!("the pod store's writer is gone; pod statuses will not reach the API server");
                    return;
                }
            }
        }
        let mut state = SyncState::default();
        let mut next_reconcile = Instant::now();
        loop {
            changes.borrow_and_update();
            let now = Instant::now();
            let full = now >= next_reconcile;
            if full {
                next_reconcile = now + self.options.reconcile_period;
            }
            let wake = match self.pass(&mut state, full).await {
                Some(at) => at.min(next_reconcile),
                None => next_reconcile,
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// One look at every cached pod; `full` (the reconcile) also compares statuses whose version
    /// was already delivered with the API's copy (the kubelet's `needsReconcile`). Returns the
    /// earliest future retry or cleanup deadline.
    async fn pass(&self, state: &mut SyncState, full: bool) -> Option<Instant> {
        let release = self
            .server
            .refresh_if_stale(&self.client, self.options.request_timeout)
            .await;
        let cached = self.statuses.versioned();
        let live: HashSet<&str> = cached
            .iter()
            .filter_map(|v| v.pod.metadata.uid.as_deref())
            .collect();
        state.pods.retain(|uid, _| live.contains(uid.as_str()));
        state.labels.retain(|uid, labels| {
            let keep = live.contains(uid.as_str());
            if !keep {
                metrics().pod_status_writes_total.remove(labels);
            }
            keep
        });
        if full && !state.deleted.is_empty() {
            let in_api: HashSet<String> = self
                .pods
                .state()
                .iter()
                .filter_map(|p| p.metadata.uid.clone())
                .collect();
            state
                .deleted
                .retain(|uid| live.contains(uid.as_str()) || in_api.contains(uid));
        }

        let mut wake: Option<Instant> = None;
        let mut earliest = |at: Instant| wake = Some(wake.map_or(at, |w| w.min(at)));
        let now = Instant::now();
        for v in &cached {
            let Some(uid) = v.pod.metadata.uid.clone() else {
                continue;
            };
            let pod_sync = state.pods.entry(uid.clone()).or_default();
            if let Some(at) = pod_sync.retry_at.filter(|at| *at > now) {
                earliest(at);
                continue;
            }
            let outcome = self
                .sync_pod(v, pod_sync, &mut state.deleted, full, release)
                .await;
            match outcome {
                Ok(synced) => {
                    pod_sync.failures = 0;
                    pod_sync.retry_at = None;
                    if let Some(due) = synced.cleanup_due {
                        earliest(self.clock.instant_of(due));
                    }
                    if synced.wrote {
                        state
                            .labels
                            .entry(uid.clone())
                            .or_insert_with(|| labels_of(&v.pod));
                        for path in &synced.newly_stuck {
                            if state.reported_paths.insert(path.clone()) {
                                tracing::warn!(
                                    pod = %pod_key(&v.pod),
                                    pod.uid = %uid,
                                    field = %path,
                                    api_server = %release,
                                    retry_in = ?pod_sync.stuck.as_ref().map(|s| s.retry_at.saturating_duration_since(Instant::now())),
                                    "the API server does not store this status field as sent; not writing it again at every reconcile (backing off)"
                                );
                            }
                        }
                    }
                }
                Err(err) => {
                    pod_sync.failures += 1;
                    let delay = backoff_delay(
                        pod_sync.failures,
                        self.options.backoff_initial,
                        self.options.backoff_max,
                    );
                    let at = Instant::now() + delay;
                    pod_sync.retry_at = Some(at);
                    earliest(at);
                    tracing::info!(
                        pod = %pod_key(&v.pod),
                        pod.uid = %uid,
                        failures = pod_sync.failures,
                        retry_in = ?delay,
                        error = %err,
                        "pod status sync failed"
                    );
                    if err.is_unreachable() {
                        self.server.mark_unreachable();
                        break;
                    }
                }
            }
        }
        if full {
            self.stats.reconciles.fetch_add(1, Ordering::Relaxed);
            metrics().pod_status_reconciles_total.inc();
            let stuck = state.pods.values().filter(|p| p.stuck.is_some()).count();
            metrics()
                .pod_status_nonconverging
                .set(i64::try_from(stuck).unwrap_or(i64::MAX));
        }
        wake
    }

    /// The status to write over the API's `api_status`: the kubelet's merge of nodelet's
    /// status `ours`, without the fields the server's `release` does not store.
    fn desired_status(
        &self,
        api_status: &PodStatus,
        ours: &PodStatus,
        release: Release,
    ) -> PodStatus {
        let merged = merge_pod_status(api_status, ours, false, self.clock.now());
        if self.options.strip_unsupported_fields {
            strip_pod_status(merged, release)
        } else {
            merged
        }
    }

    /// Brings one pod's status in line (see [`decide_write`]), then sends the one final or
    /// cleanup DELETE when due.
    async fn sync_pod(
        &self,
        v: &VersionedStatus,
        pod_sync: &mut PodSync,
        deleted: &mut HashSet<String>,
        full: bool,
        release: Release,
    ) -> Result<PodSynced> {
        let mut synced = PodSynced::default();
        let local = &v.pod;
        let uid = local.metadata.uid.clone().unwrap_or_default();
        let Some(ours) = local.status.as_ref() else {
            return Ok(synced);
        };
        let (Some(namespace), Some(name)) = (
            local.metadata.namespace.as_deref(),
            local.metadata.name.as_deref(),
        ) else {
            return Ok(synced);
        };
        let stored = self.pods.get(&ObjectRef::new(name).within(namespace));
        let mut api_pod = match match_api_pod(local, stored) {
            ApiPod::Found(pod) => pod_sync.api_view(pod),
            // Nothing to deliver to yet (a mirror pod not created, a pod not in the store);
            // the next pass looks again.
            ApiPod::Missing => return Ok(synced),
            ApiPod::Other { uid: other } => {
                if !std::mem::replace(&mut pod_sync.reported_other, true) {
                    tracing::info!(
                        pod = %pod_key(local),
                        pod.uid = %uid,
                        api.uid = %other,
                        "the API object under this name is another pod (deleted and recreated?); not syncing its status"
                    );
                }
                return Ok(synced);
            }
        };
        pod_sync.reported_other = false;
        let api_uid = api_pod.metadata.uid.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);

        let new_version = pod_sync.delivered_version != Some(v.version);
        if full || new_version {
            let api_status = api_pod.status.clone().unwrap_or_default();
            let desired = self.desired_status(&api_status, ours, release);
            let changed_since_written = new_version
                && !pod_sync
                    .last_written
                    .as_ref()
                    .is_some_and(|w| same_as_written(w, &desired));
            let server_diff = changed_paths(&api_status, &desired);
            let now = Instant::now();
            let decision = decide_write(
                changed_since_written,
                full,
                &server_diff,
                pod_sync.stuck.as_ref(),
                now,
            );
            match decision {
                WriteDecision::Nothing if server_diff.is_empty() => {
                    // The API has it: delivered, and whatever did not converge before has.
                    pod_sync.last_written = Some(desired);
                    pod_sync.stuck = None;
                }
                WriteDecision::Nothing | WriteDecision::BackingOff => {
                    tracing::trace!(pod = %pod_key(local), pod.uid = %uid, ?decision, differences = ?server_diff, "not writing");
                }
                WriteDecision::Change | WriteDecision::Reconcile => {
                    let patch =
                        status_patch(&api_uid, &api_status, &desired).map_err(|source| {
                            Error::Encode {
                                pod: pod_key(local),
                                uid: uid.clone(),
                                source,
                            }
                        })?;
                    if let Some(patch) = patch {
                        let request = format!("PATCH pods/{name}/status");
                        tracing::debug!(pod = %pod_key(local), pod.uid = %uid, ?decision, %patch, "patching pod status");
                        let answer = self
                            .request(local, &request, async {
                                api.patch_status(
                                    name,
                                    &PatchParams::default(),
                                    &Patch::Strategic(patch),
                                )
                                .await
                            })
                            .await;
                        let answer = match answer {
                            Ok(pod) => pod,
                            // Deleted meanwhile: nothing to deliver to.
                            Err(Error::Request {
                                source: kube::Error::Api(status),
                                ..
                            }) if status.is_not_found() => return Ok(synced),
                            Err(err) => return Err(err),
                        };
                        api_pod = pod_sync.record_write(&api_pod, answer);
                        synced.wrote = true;
                        self.count_write(local, pod_sync);
                        let stored_status = api_pod.status.clone().unwrap_or_default();
                        let residual = changed_paths(&stored_status, &desired);
                        let previous = pod_sync.stuck.take();
                        pod_sync.stuck = after_write(
                            previous.as_ref(),
                            residual,
                            Instant::now(),
                            self.options.reconcile_period,
                            self.options.convergence_backoff_max,
                        );
                        if let Some(stuck) = &pod_sync.stuck {
                            let known = previous.map(|p| p.paths).unwrap_or_default();
                            synced.newly_stuck = stuck
                                .paths
                                .iter()
                                .filter(|p| !known.contains(p))
                                .cloned()
                                .collect();
                            tracing::debug!(
                                pod = %pod_key(local),
                                pod.uid = %uid,
                                fields = ?stuck.paths,
                                writes = stuck.writes,
                                "the API server's copy still differs after the write"
                            );
                        }
                    }
                    pod_sync.last_written = Some(desired);
                }
            }
            pod_sync.delivered_version = Some(v.version);
        }

        let api_phase = api_pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if is_terminal_phase(ours.phase.as_deref()) && api_phase == ours.phase.as_deref() {
            self.statuses
                .mark_terminal_published(&uid, self.clock.now());
        }
        if deleted.contains(&uid) || is_static_pod(local) {
            return Ok(synced);
        }

        let lifecycle = self.statuses.lifecycle(&uid);
        let (why, params) = if can_be_deleted(&api_pod, lifecycle.reclaimed) {
            (
                "final, grace 0",
                DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(api_uid.clone()),
                        resource_version: None,
                    }),
                    ..Default::default()
                },
            )
        } else {
            let cfg = &self.options.pod_cleanup;
            match cleanup_deadline(&api_pod, &self.node_name, lifecycle.terminal_since, cfg) {
                Some(due) if self.clock.now() >= due => (
                    "failed-pod cleanup",
                    DeleteParams {
                        propagation_policy: Some(PropagationPolicy::Background),
                        preconditions: Some(Preconditions {
                            uid: Some(api_uid.clone()),
                            resource_version: None,
                        }),
                        ..Default::default()
                    },
                ),
                Some(due) => {
                    synced.cleanup_due = Some(due);
                    return Ok(synced);
                }
                None => return Ok(synced),
            }
        };
        let request = format!("DELETE pods/{name} ({why})");
        let answer = self
            .request(local, &request, async { api.delete(name, &params).await })
            .await;
        match answer {
            Ok(_) => {
                tracing::info!(pod = %pod_key(local), pod.uid = %uid, "{request}: sent");
            }
            // Gone already, or the name now holds another pod: either way this pod's object
            // is not there to delete.
            Err(Error::Request {
                source: kube::Error::Api(status),
                ..
            }) if status.is_not_found() || status.is_conflict() => {
                tracing::info!(pod = %pod_key(local), pod.uid = %uid, reason = %status.reason, "{request}: nothing to delete");
            }
            Err(err) => return Err(err),
        }
        deleted.insert(uid);
        Ok(synced)
    }

    /// Counts a status write of `pod` (metric, rate warning).
    fn count_write(&self, pod: &Pod, pod_sync: &mut PodSync) {
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        metrics()
            .pod_status_writes_total
            .get_or_create(&labels_of(pod))
            .inc();
        let bound = self.options.writes_per_minute_warning;
        if let Some(count) = pod_sync.count_write(Instant::now(), bound) {
            tracing::warn!(
                pod = %pod_key(pod),
                pod.uid = pod.metadata.uid.as_deref().unwrap_or_default(),
                writes = count,
                bound,
                "pod status written more often than expected in the last minute"
            );
        }
    }

    async fn request<T>(
        &self,
        pod: &Pod,
        request: &str,
        call: impl std::future::Future<Output = kube::Result<T>>,
    ) -> Result<T> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        match tokio::time::timeout(self.options.request_timeout, call).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(source)) => Err(Error::Request {
                pod: pod_key(pod),
                uid,
                request: request.to_string(),
                source,
            }),
            Err(_) => Err(Error::Timeout {
                pod: pod_key(pod),
                uid,
                request: request.to_string(),
                timeout: self.options.request_timeout,
            }),
        }
    }
}

#[cfg(test)]
#[path = "api_sync_tests.rs"]
mod tests;
