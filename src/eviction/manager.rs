//! The eviction manager: a thin loop around the pure pass ([`super::threshold::pass`]), as the
//! kubelet's `managerImpl.synchronize`. Each pass reads the signals from the Summary
//! ([`super::signals::observations`]), works out the met thresholds and node conditions, and
//! when a threshold's grace period has elapsed: records `EvictionThresholdMet` on the node,
//! frees node-level resources first for disk signals (dead containers, unused images) and
//! stops there when that cleared every threshold (with its minimum reclaim); otherwise ranks
//! the active pods ([`super::rank::rank`]) and ends the first one that may go, through
//! `kill_pod`, with the kubelet's status, message, `DisruptionTarget` condition and event. At
//! most one pod per pass, and the next pass waits for that pod's cleanup.
//!
//! Timing: the kubelet passes every 10 s. nodelet passes every `check_period` (1 s) on the
//! cheap CPU-and-memory summary, reusing the last full readings of the other signals, and on a
//! full summary every `housekeeping_period` (10 s) or while a non-memory threshold is met.
//! Between them, [`EvictionManager::waker`] takes the wake-ups of `super::notify` (the memory
//! check, PSI, `memory.events`); [`next_pass`] decides which of them start a pass at once: a
//! fresh crossing of a memory threshold always, any wake-up after a pass that acted (evicted a
//! pod, reclaimed at node level), none after a pass that found nothing to do — those sources
//! keep firing for as long as a pressure lasts, and a pass started by each would run pass
//! after pass, as fast as one takes (issue 37). What a pass finds is logged when it first
//! appears and when it changes or clears ([`announces_attempt`], [`report`]), not on every pass.
//!
//! The effects are behind small traits (`lifecycle`'s [`ActivePods`] and [`PodKiller`],
//! [`NodeReclaim`], the stats' [`SummarySource`]), so the loop has paused-clock tests with
//! fakes. [`PressureView`] is what the rest of nodelet reads: the node status its
//! [`Pressure`], the pod manager its admission ([`PodAdmitHandler`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition, Toleration};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::local_storage;
use super::notify::{WakeKind, Waker};
use super::rank::{
    evictable, eviction_message, pressure_eviction_message, rank, Candidate, ContainerUsage,
};
use super::signals::observations;
use super::threshold::{pass, stall_persists, thresholds_met, Observation, PassState, StallMark};
use crate::config::eviction::{NodeCondition, Resource, Signal, Threshold, STALL_CAPACITY};
use crate::events::{node_ref, pod_ref, EventRecorder, EventType};
use crate::lifecycle::admission::{AdmitResult, PodAdmitAttributes, PodAdmitHandler, Rejection};
use crate::lifecycle::kill::{KillHandle, PodKiller};
use crate::lifecycle::pods::ActivePods;
use crate::lifecycle::pressure::Pressure;
use crate::podspec::pod_uid;
use crate::podspec::qos::{qos_class, QosClass};
use crate::quantity::Quantity;
use crate::stats::summary::{PodStats, Summary};
use crate::stats::{Scope, SummarySource};
use crate::status::StatusMutation;

/// The kubelet's `Reason` of evicted and rejected pods.
pub const REASON_EVICTED: &str = "Evicted";
/// The grace period of a hard eviction (`immediateEvictionGracePeriodSeconds`).
pub const HARD_EVICTION_GRACE: Duration = Duration::from_secs(1);
/// How long a pass waits for the evicted pod's cleanup (`podCleanupTimeout`).
pub const POD_CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
/// The kubelet's eviction period (`evictionMonitoringPeriod`).
pub const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(10);
/// nodelet's short period between two cheap passes.
pub const CHECK_PERIOD: Duration = Duration::from_secs(1);
/// The shortest time between two passes [`next_pass`] allows, whatever `check_period` says:
/// a loop must not wake itself.
pub const MIN_PASS_SPACING: Duration = Duration::from_millis(100);
/// The taint a BestEffort pod must tolerate to be admitted under memory pressure.
pub const TAINT_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";

/// Node-level reclaim for disk signals: remove dead containers and unused images. Errors are
/// the implementation's to log; the pass re-reads the signals either way.
#[async_trait::async_trait]
pub trait NodeReclaim: Send + Sync {
    async fn delete_unused_containers(&self);
    async fn delete_unused_images(&self);
}

/// How the manager is set up.
#[derive(Debug, Clone)]
pub struct Settings {
    pub thresholds: Vec<Threshold>,
    pub pressure_transition_period: Duration,
    pub max_pod_grace_period_seconds: i64,
    pub evict_static_pods: bool,
    /// Whether the image filesystem is its own (then `nodefs` reclaim removes containers only,
    /// and `imagefs` reclaim removes images too), as the kubelet's `buildSignalToNodeReclaimFuncs`.
    pub split_image_fs: bool,
    pub housekeeping_period: Duration,
    pub check_period: Duration,
    pub node_name: String,
}

/// What the manager tells the rest of nodelet: the node conditions (node status, admission).
#[derive(Debug, Clone)]
pub struct PressureView {
    conditions: watch::Receiver<BTreeSet<NodeCondition>>,
    /// `evictStaticPods`: static pods are not critical, so admission may reject them too.
    evict_static_pods: bool,
}

impl PressureView {
    /// A view that never reports pressure (no eviction manager).
    pub fn none() -> PressureView {
        PressureView {
            conditions: watch::channel(BTreeSet::new()).1,
            evict_static_pods: false,
        }
    }

    pub fn conditions(&self) -> BTreeSet<NodeCondition> {
        self.conditions.borrow().clone()
    }

    /// The node status' view of it.
    pub fn pressure(&self) -> Pressure {
        let c = self.conditions.borrow();
        Pressure {
            memory: c.contains(&NodeCondition::MemoryPressure),
            disk: c.contains(&NodeCondition::DiskPressure),
            pid: c.contains(&NodeCondition::PidPressure),
        }
    }
}

/// The kubelet's eviction `Admit` against the current conditions.
impl PodAdmitHandler for PressureView {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> AdmitResult {
        admit(attrs.pod, &self.conditions.borrow(), self.evict_static_pods)
            .map_err(|(reason, message)| Rejection { reason, message })
    }
}

/// The kubelet's eviction admission (`managerImpl.Admit`): under no pressure every pod; a
/// critical pod always; under memory pressure alone every pod but BestEffort ones that do not
/// tolerate `node.kubernetes.io/memory-pressure`; under disk or PID pressure none. A rejection
/// is `(reason, message)`: `Evicted`, `The node had condition: [DiskPressure]. `. With
/// `evict_static_pods` a static pod is critical only by its priority, as in ranking
/// ([`evictable`]): one the manager could evict is not admitted under pressure either.
pub fn admit(
    pod: &Pod,
    conditions: &BTreeSet<NodeCondition>,
    evict_static_pods: bool,
) -> Result<(), (String, String)> {
    if conditions.is_empty() || !evictable(pod, evict_static_pods) {
        return Ok(());
    }
    let only_memory = conditions.len() == 1 && conditions.contains(&NodeCondition::MemoryPressure);
    if only_memory && (qos_class(pod) != QosClass::BestEffort || tolerates_memory_pressure(pod)) {
        return Ok(());
    }
    let names: Vec<&str> = conditions.iter().map(|c| c.name()).collect();
    Err((
        REASON_EVICTED.to_string(),
        format!("The node had condition: [{}]. ", names.join(" ")),
    ))
}

/// `TolerationsTolerateTaint` for the `NoSchedule` memory-pressure taint (empty value).
fn tolerates_memory_pressure(pod: &Pod) -> bool {
    let tolerations: &[Toleration] = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    tolerations.iter().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == "NoSchedule");
        let key = t.key.as_deref().unwrap_or_default();
        let op = t.operator.as_deref().unwrap_or("Equal");
        let key_ok = if key.is_empty() {
            op == "Exists"
        } else {
            key == TAINT_MEMORY_PRESSURE
        };
        let value_ok = op == "Exists" || t.value.as_deref().unwrap_or_default().is_empty();
        effect_ok && key_ok && value_ok
    })
}

/// The grace period an eviction gives `pod` (`evictPod`'s override): 1 s for a hard
/// threshold; for a soft one `evictionMaxPodGracePeriod`, or the pod's own grace period when
/// that is shorter.
pub fn grace_period(threshold: &Threshold, pod: &Pod, max_pod_grace_seconds: i64) -> Duration {
    if threshold.is_hard() {
        return HARD_EVICTION_GRACE;
    }
    let mut seconds = max_pod_grace_seconds;
    if let Some(own) = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
    {
        seconds = seconds.min(own);
    }
    crate::clock::seconds_from_api(seconds)
}

/// The pod's ephemeral-storage request as `GetResourceRequestQuantity` has it: the containers'
/// (init steps included, KEP-753) plus the pod's overhead.
fn ephemeral_request(pod: &Pod) -> i64 {
    use crate::podspec::resources::{pod_overhead, pod_requests};
    let containers = pod_requests(pod).ephemeral_storage.unwrap_or(0);
    let overhead = pod_overhead(pod)
        .and_then(|o| o.ephemeral_storage)
        .unwrap_or(0);
    containers.saturating_add(overhead)
}

/// A container's request of `resource` as written (for the message) and its value; `("0", 0)`
/// without one.
fn request_text(c: &k8s_openapi::api::core::v1::Container, resource: &str) -> (String, i64) {
    let written = c
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(resource))
        .map(|q| q.0.clone());
    match written {
        Some(text) => {
            let value = Quantity::parse(&text).map(|q| q.value()).unwrap_or(0);
            (text, value)
        }
        None => ("0".to_string(), 0),
    }
}

/// A pod as ranking sees it for `resource`.
pub fn candidate(pod: &Pod, stats: Option<&PodStats>, resource: Resource) -> Candidate {
    let (request, usage) = match resource {
        Resource::Memory => (
            // `GetResourceRequestQuantity`: the pod's overhead counts.
            crate::podspec::resources::pod_resources_with_overhead(pod).memory_request,
            stats
                .and_then(|s| s.memory.as_ref())
                .and_then(|m| m.working_set_bytes)
                .map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
        ),
        Resource::EphemeralStorage => (
            ephemeral_request(pod),
            stats
                .and_then(|s| s.ephemeral_storage.as_ref())
                .and_then(|f| f.used_bytes)
                .map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
        ),
        Resource::Inodes => (
            0,
            stats
                .and_then(|s| s.ephemeral_storage.as_ref())
                .and_then(|f| f.inodes_used)
                .map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
        ),
        Resource::Pids => (0, None),
    };
    Candidate {
        uid: pod_uid(pod).to_string(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        priority: pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
        request,
        usage,
        processes: stats
            .and_then(|s| s.process_stats.as_ref())
            .and_then(|p| p.process_count),
    }
}

/// Each container's usage of `resource` and its request, for the message.
fn container_usage(pod: &Pod, stats: Option<&PodStats>, resource: Resource) -> Vec<ContainerUsage> {
    let Some(stats) = stats else {
        return Vec::new();
    };
    crate::podspec::regular_containers(pod)
        .iter()
        .filter_map(|c| {
            let s = stats.containers.iter().find(|s| s.name == c.name)?;
            let (request, request_value, usage) = match resource {
                Resource::Memory => {
                    let (text, value) = request_text(c, "memory");
                    (text, value, s.memory.as_ref()?.working_set_bytes?)
                }
                Resource::EphemeralStorage => {
                    let (text, value) = request_text(c, "ephemeral-storage");
                    let used = s.rootfs.as_ref().and_then(|f| f.used_bytes).unwrap_or(0)
                        + s.logs.as_ref().and_then(|f| f.used_bytes).unwrap_or(0);
                    (text, value, used)
                }
                _ => return None,
            };
            Some(ContainerUsage {
                name: c.name.clone(),
                usage: i64::try_from(usage).unwrap_or(i64::MAX),
                request,
                request_value,
            })
        })
        .collect()
}

/// What one pass did.
#[derive(Debug)]
pub enum PassResult {
    /// No threshold to act on.
    Nothing,
    /// Node-level reclaim cleared the thresholds.
    Reclaimed,
    /// This pod was evicted; the handle resolves at its cleanup.
    Evicted { uid: String, handle: KillHandle },
    /// A threshold to act on, but no pod that may go.
    NoCandidate,
    /// The summary could not be read.
    NoStats,
}

impl PassResult {
    /// Whether the pass did something (evicted, reclaimed), so that a wake-up right after it
    /// may find more to do.
    pub fn acted(&self) -> bool {
        matches!(self, PassResult::Evicted { .. } | PassResult::Reclaimed)
    }
}

/// What [`next_pass`] weighs of the last pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastPass {
    /// When it ended (after the evicted pod's cleanup, when it evicted one).
    pub ended: Instant,
    /// It evicted a pod or reclaimed at node level ([`PassResult::acted`]).
    pub acted: bool,
    /// It saw a `memory.available` threshold met: a crossing the memory check reports then is
    /// no news to the manager.
    pub memory_met: bool,
}

/// When the loop starts its next pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// The periodic pass.
    pub due: Instant,
    /// From when a [`WakeKind::Crossing`] starts a pass (no sooner than `due`: none does).
    pub crossing_from: Instant,
    /// From when a [`WakeKind::Hint`] starts one.
    pub hint_from: Instant,
}

impl Schedule {
    /// From when a wake-up of `kind` starts a pass, if before the periodic one.
    pub fn wake_from(&self, kind: WakeKind) -> Option<Instant> {
        let from = match kind {
            WakeKind::Crossing => self.crossing_from,
            WakeKind::Hint => self.hint_from,
        };
        (from < self.due).then_some(from)
    }
}

/// When the pass after `last` starts: every `check_period` (at least [`MIN_PASS_SPACING`]); a
/// wake-up starts it at once after a pass that acted, and a fresh crossing of a memory
/// threshold after any pass that did not already see one met. After a pass that found nothing
/// to do, the wake-ups are no news (the notifiers fire for as long as a pressure lasts) and
/// the periodic pass answers them.
pub fn next_pass(last: LastPass, check_period: Duration) -> Schedule {
    let due = last.ended + check_period.max(MIN_PASS_SPACING);
    let at_once = |yes: bool| if yes { last.ended } else { due };
    Schedule {
        due,
        crossing_from: at_once(last.acted || !last.memory_met),
        hint_from: at_once(last.acted),
    }
}

/// Resolves at a wake-up of `kind` that `schedule` lets start a pass (one stored earlier
/// counts from the schedule's instant for it); never when none does.
async fn woken(wake: &Waker, kind: WakeKind, schedule: Schedule) {
    let Some(from) = schedule.wake_from(kind) else {
        return std::future::pending().await;
    };
    tokio::time::sleep_until(from).await;
    wake.woken(kind).await;
}

/// What a pass found, as the log reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Finding {
    /// No threshold acted on.
    #[default]
    Quiet,
    /// Acting on this signal's threshold: reclaimed, evicted, or about to.
    Acting(Signal),
    /// Acting on this signal's threshold, and no pod may be evicted.
    NoPod(Signal),
}

impl Finding {
    pub fn signal(self) -> Option<Signal> {
        match self {
            Finding::Quiet => None,
            Finding::Acting(s) | Finding::NoPod(s) => Some(s),
        }
    }
}

/// Whether a pass that acts on `signal` logs `attempting to reclaim`: when the last pass did
/// not act on it. A pressure that lasts is one attempt, however many passes it takes.
pub fn announces_attempt(last: Finding, signal: Signal) -> bool {
    last.signal() != Some(signal)
}

/// What the end of a pass logs of its finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// WARN `no pod may be evicted`.
    NoPod(Signal),
    /// INFO `no threshold to act on now`: what the last pass acted on is over.
    Over(Signal),
}

/// What a pass that found `now` logs after one that found `last`: a finding when it first
/// appears or changes, and when it clears; nothing when it repeats.
pub fn report(last: Finding, now: Finding) -> Option<Report> {
    match (last, now) {
        (last, Finding::NoPod(s)) if last != now => Some(Report::NoPod(s)),
        (last, Finding::Quiet) => last.signal().map(Report::Over),
        _ => None,
    }
}

pub struct EvictionManager {
    settings: Settings,
    summary: Arc<dyn SummarySource>,
    pods: Arc<dyn ActivePods>,
    killer: Arc<dyn PodKiller>,
    reclaim: Arc<dyn NodeReclaim>,
    events: EventRecorder,
    wake: Arc<Waker>,
    conditions: watch::Sender<BTreeSet<NodeCondition>>,
    state: PassState,
    /// The last full summary's readings, for the signals a cheap summary lacks.
    last_full: BTreeMap<Signal, Observation>,
    next_full: Option<Instant>,
    /// The last summary read failed (logged once, not every second).
    stats_failing: bool,
    /// The last `EvictionThresholdMet` event, per resource: repeated at most every
    /// `housekeeping_period` (the kubelet's rate; nodelet passes ten times as often).
    last_threshold_event: BTreeMap<Resource, Instant>,
    /// The last node-level reclaim: at most one per `housekeeping_period`, as the kubelet's.
    last_reclaim: Option<Instant>,
    /// After an eviction, the PSI counters as the first pass after its cleanup read them: a
    /// met PSI threshold evicts again only when the stall since then is still at or above it
    /// ([`stall_persists`]). Dropped when the threshold clears.
    stall_marks: BTreeMap<Signal, StallMark>,
    /// An eviction happened; the next pass takes the stall marks.
    stall_mark_pending: bool,
    /// What the last pass found (for what this one logs).
    finding: Finding,
    /// The signal this pass acts on, once chosen.
    acting: Option<Signal>,
}

/// The `total` counter of a PSI signal's line in the node's memory pressure.
fn stall_total(summary: &Summary, signal: Signal) -> Option<u64> {
    let psi = summary.node.memory.as_ref()?.psi.as_ref()?;
    match signal {
        Signal::MemoryPressureSomeAvg10 => Some(psi.some.total),
        Signal::MemoryPressureFullAvg10 => Some(psi.full.total),
        _ => None,
    }
}

impl EvictionManager {
    pub fn new(
        settings: Settings,
        summary: Arc<dyn SummarySource>,
        pods: Arc<dyn ActivePods>,
        killer: Arc<dyn PodKiller>,
        reclaim: Arc<dyn NodeReclaim>,
        events: EventRecorder,
    ) -> EvictionManager {
        EvictionManager {
            settings,
            summary,
            pods,
            killer,
            reclaim,
            events,
            wake: Arc::new(Waker::default()),
            conditions: watch::channel(BTreeSet::new()).0,
            state: PassState::default(),
            last_full: BTreeMap::new(),
            next_full: None,
            stats_failing: false,
            last_threshold_event: BTreeMap::new(),
            last_reclaim: None,
            stall_marks: BTreeMap::new(),
            stall_mark_pending: false,
            finding: Finding::Quiet,
            acting: None,
        }
    }

    /// The pressure notifiers' hook: a wake-up may start a pass before its period
    /// ([`next_pass`]).
    pub fn waker(&self) -> Arc<Waker> {
        self.wake.clone()
    }

    pub fn pressure(&self) -> PressureView {
        PressureView {
            conditions: self.conditions.subscribe(),
            evict_static_pods: self.settings.evict_static_pods,
        }
    }

    /// Passes until `cancel`: every `check_period`, or sooner when a wake-up says so
    /// ([`next_pass`]); after an eviction, the next pass waits for the pod's cleanup (at most
    /// [`POD_CLEANUP_TIMEOUT`]).
    pub async fn run(mut self, cancel: CancellationToken) {
        // Before the first pass, any wake-up starts one.
        let mut last = LastPass {
            ended: Instant::now(),
            acted: true,
            memory_met: false,
        };
        loop {
            let schedule = next_pass(last, self.settings.check_period);
            tokio::select! {
                _ = tokio::time::sleep_until(schedule.due) => {}
                _ = woken(&self.wake, WakeKind::Crossing, schedule) => {}
                _ = woken(&self.wake, WakeKind::Hint, schedule) => {}
                _ = cancel.cancelled() => return,
            }
            self.wake.answered();
            let result = self.synchronize().await;
            let acted = result.acted();
            if let PassResult::Evicted { uid, handle } = result {
                tokio::select! {
                    r = tokio::time::timeout(POD_CLEANUP_TIMEOUT, handle.terminated()) => {
                        if r.is_err() {
                            tracing::warn!(pod.uid = %uid, "eviction manager: timed out waiting for the evicted pod's cleanup");
                        }
                    }
                    _ = cancel.cancelled() => return,
                }
            }
            last = LastPass {
                ended: Instant::now(),
                acted,
                memory_met: self
                    .state
                    .first_observed
                    .keys()
                    .any(|t| t.signal == Signal::MemoryAvailable),
            };
        }
    }

    /// Whether this pass reads the full summary: every `housekeeping_period`, and on every
    /// pass while a threshold of a signal the cheap summary lacks is met.
    fn wants_full(&self, now: Instant) -> bool {
        self.next_full.is_none_or(|at| now >= at)
            || self
                .state
                .first_observed
                .keys()
                .any(|t| t.signal.resource() != Resource::Memory)
    }

    async fn read(
        &mut self,
        full: bool,
        now: Instant,
    ) -> Option<(Summary, BTreeMap<Signal, Observation>)> {
        // Between full passes only the node: the memory signals are node-level, and the pods
        // are read when one has to be chosen (`synchronize`), so a pass costs the same with 500
        // pods as with none.
        let scope = if full { Scope::Full } else { Scope::Node };
        let summary = match self.summary.summary(scope).await {
            Ok(s) => {
                if std::mem::take(&mut self.stats_failing) {
                    tracing::info!("eviction manager: the stats summary is readable again");
                }
                s
            }
            Err(e) => {
                if !std::mem::replace(&mut self.stats_failing, true) {
                    tracing::warn!(error = %e, "eviction manager: reading the stats summary failed; no eviction until it works (logged once)");
                }
                return None;
            }
        };
        let fresh = observations(&summary);
        let readings = if full {
            self.last_full = fresh.clone();
            self.next_full = Some(now + self.settings.housekeeping_period);
            fresh
        } else {
            let mut merged = self.last_full.clone();
            merged.retain(|s, _| s.resource() != Resource::Memory);
            merged.extend(fresh);
            merged
        };
        Some((summary, readings))
    }

    /// One pass (the kubelet's `synchronize`), and the log of what it found against the last.
    #[tracing::instrument(name = "eviction_pass", skip_all, fields(full))]
    pub async fn synchronize(&mut self) -> PassResult {
        self.acting = None;
        let result = self.pass_once().await;
        let finding = match (&result, self.acting) {
            // Nothing read, nothing learnt: the last finding stands.
            (PassResult::NoStats, _) => self.finding,
            (_, None) => Finding::Quiet,
            (PassResult::NoCandidate, Some(signal)) => Finding::NoPod(signal),
            (_, Some(signal)) => Finding::Acting(signal),
        };
        match report(self.finding, finding) {
            Some(Report::NoPod(signal)) => {
                tracing::warn!(signal = %signal, "eviction manager: no pod may be evicted");
            }
            Some(Report::Over(signal)) => {
                tracing::info!(signal = %signal, "eviction manager: no threshold to act on now");
            }
            None => {}
        }
        self.finding = finding;
        result
    }

    async fn pass_once(&mut self) -> PassResult {
        let now = Instant::now();
        let metrics = crate::metrics::metrics();
        metrics.eviction_passes_total.inc();
        let full = self.wants_full(now);
        tracing::Span::current().record("full", full);
        let Some((mut summary, readings)) = self.read(full, now).await else {
            return PassResult::NoStats;
        };
        for (signal, o) in &readings {
            metrics
                .eviction_signal_available
                .get_or_create(&crate::metrics::SignalLabels {
                    eviction_signal: signal.name().to_string(),
                })
                .set(o.available);
        }
        let (state, outcome) = pass(
            &self.state,
            &self.settings.thresholds,
            &readings,
            self.settings.pressure_transition_period,
            now,
        );
        let first_observed = state.first_observed.clone();
        self.state = state;
        self.conditions.send_if_modified(|c| {
            if *c == outcome.conditions {
                return false;
            }
            tracing::info!(conditions = ?outcome.conditions, "eviction manager: node conditions changed");
            *c = outcome.conditions.clone();
            true
        });
        if full {
            if let Some(result) = self.local_storage_evictions(&summary) {
                return result;
            }
        }
        self.stall_marks
            .retain(|signal, _| first_observed.keys().any(|t| t.signal == *signal));
        if std::mem::take(&mut self.stall_mark_pending) {
            for signal in [
                Signal::MemoryPressureSomeAvg10,
                Signal::MemoryPressureFullAvg10,
            ] {
                if let Some(total_us) = stall_total(&summary, signal) {
                    self.stall_marks
                        .insert(signal, StallMark { at: now, total_us });
                }
            }
        }
        let settled = |t: &&Threshold| {
            let Some(mark) = self.stall_marks.get(&t.signal) else {
                return true;
            };
            let persists = stall_total(&summary, t.signal).is_some_and(|total| {
                stall_persists(*mark, total, now, t.value.amount(STALL_CAPACITY))
            });
            if !persists {
                tracing::debug!(signal = %t.signal, "eviction manager: memory pressure stall since the last eviction is below the threshold; waiting");
            }
            persists
        };
        let Some(threshold) = outcome.act_on.iter().find(settled).copied() else {
            return PassResult::Nothing;
        };
        let resource = threshold.signal.resource();
        self.acting = Some(threshold.signal);
        if announces_attempt(self.finding, threshold.signal) {
            tracing::warn!(signal = %threshold.signal, resource = resource.name(), "eviction manager: attempting to reclaim");
        }
        let period = self.settings.housekeeping_period;
        if self
            .last_threshold_event
            .get(&resource)
            .is_none_or(|at| now.saturating_duration_since(*at) >= period)
        {
            self.last_threshold_event.insert(resource, now);
            self.events.record(
                &node_ref(&self.settings.node_name),
                EventType::Warning,
                "EvictionThresholdMet",
                format!("Attempting to reclaim {}", resource.name()),
            );
        }
        if self
            .last_reclaim
            .is_none_or(|at| now.saturating_duration_since(at) >= period)
            && self.reclaim_node_level(threshold.signal).await
        {
            return PassResult::Reclaimed;
        }
        if !full {
            // This pass read only the node: ranking needs the pods' numbers, the full ones for
            // disk or PIDs.
            let scope = if resource == Resource::Memory {
                Scope::CpuAndMemory
            } else {
                Scope::Full
            };
            match self.summary.summary(scope).await {
                Ok(s) => summary = s,
                Err(e) => {
                    tracing::warn!(error = %e, "eviction manager: reading the stats summary");
                    return PassResult::NoStats;
                }
            }
        }
        let Some(observed) = readings.get(&threshold.signal).copied() else {
            return PassResult::Nothing;
        };
        let pods = self.pods.active_pods();
        let stats_of = |pod: &Pod| summary.pods.iter().find(|s| s.pod_ref.uid == pod_uid(pod));
        let mut candidates: Vec<Candidate> = pods
            .iter()
            .filter(|p| evictable(p, self.settings.evict_static_pods))
            .map(|p| candidate(p, stats_of(p), resource))
            .collect();
        rank(resource, &mut candidates);
        let Some(chosen) = candidates.first() else {
            return PassResult::NoCandidate;
        };
        let Some(pod) = pods.iter().find(|p| pod_uid(p) == chosen.uid).cloned() else {
            return PassResult::NoCandidate;
        };
        let usage = container_usage(&pod, stats_of(&pod), resource);
        let message = if threshold.signal.is_pressure_stall() {
            pressure_eviction_message(
                threshold.signal,
                threshold.value.amount(observed.capacity),
                observed.available,
                &usage,
            )
        } else {
            eviction_message(
                resource,
                threshold.value.amount(observed.capacity),
                observed.available,
                &usage,
            )
        };
        let grace = grace_period(&threshold, &pod, self.settings.max_pod_grace_period_seconds);
        tracing::warn!(
            pod.uid = %chosen.uid,
            pod.name = %chosen.name,
            signal = %threshold.signal,
            grace = ?grace,
            message = %message,
            "eviction manager: evicting pod"
        );
        self.events.record(
            &pod_ref(&pod),
            EventType::Warning,
            REASON_EVICTED,
            message.clone(),
        );
        let status =
            StatusMutation::failed(REASON_EVICTED, message.clone()).with_condition(PodCondition {
                type_: "DisruptionTarget".to_string(),
                status: "True".to_string(),
                reason: Some("TerminationByKubelet".to_string()),
                message: Some(message),
                ..Default::default()
            });
        let handle = self.killer.kill_pod(pod.clone(), Some(grace), status);
        self.stall_mark_pending = true;
        metrics
            .evictions_total
            .get_or_create(&crate::metrics::SignalLabels {
                eviction_signal: threshold.signal.name().to_string(),
            })
            .inc();
        if let Some(at) = first_observed.get(&threshold) {
            let seconds = Instant::now().saturating_duration_since(*at).as_secs_f64();
            metrics.eviction_crossing_to_kill_seconds.observe(seconds);
            tracing::info!(seconds, signal = %threshold.signal, "eviction manager: threshold first observed → kill");
        }
        PassResult::Evicted {
            uid: chosen.uid.clone(),
            handle,
        }
    }

    /// The kubelet's `localStorageEviction`, on full passes (volume and writable-layer usage
    /// are in the full summary only): every evictable pod over an emptyDir `sizeLimit` or its
    /// `ephemeral-storage` limits goes at once with the hard grace period — not one per pass,
    /// and before any threshold is acted on. No `DisruptionTarget` condition: the kubelet sets
    /// none for these. The pass waits for the first one's cleanup.
    fn local_storage_evictions(&mut self, summary: &Summary) -> Option<PassResult> {
        let mut evicted: Option<PassResult> = None;
        for pod in self.pods.active_pods() {
            if !evictable(&pod, self.settings.evict_static_pods) {
                continue;
            }
            let Some(stats) = summary.pods.iter().find(|s| s.pod_ref.uid == pod_uid(&pod)) else {
                continue;
            };
            let Some(violation) =
                local_storage::violation(&pod, stats, self.settings.split_image_fs)
            else {
                continue;
            };
            let message = violation.message();
            tracing::warn!(
                pod.uid = %pod_uid(&pod),
                pod.name = pod.metadata.name.as_deref().unwrap_or_default(),
                message = %message,
                "eviction manager: evicting pod over its local storage limits"
            );
            self.events.record(
                &pod_ref(&pod),
                EventType::Warning,
                REASON_EVICTED,
                message.clone(),
            );
            let handle = self.killer.kill_pod(
                pod.clone(),
                Some(HARD_EVICTION_GRACE),
                StatusMutation::failed(REASON_EVICTED, message),
            );
            crate::metrics::metrics()
                .evictions_total
                .get_or_create(&crate::metrics::SignalLabels {
                    eviction_signal: violation.signal_label().to_string(),
                })
                .inc();
            if evicted.is_none() {
                evicted = Some(PassResult::Evicted {
                    uid: pod_uid(&pod).to_string(),
                    handle,
                });
            }
        }
        evicted
    }

    /// Dead containers (and, for the image filesystem, unused images) first; true when the
    /// signals read afterwards meet no threshold, minimum reclaim included.
    async fn reclaim_node_level(&mut self, signal: Signal) -> bool {
        let (containers, images) = match signal {
            Signal::NodeFsAvailable | Signal::NodeFsInodesFree => {
                (true, !self.settings.split_image_fs)
            }
            Signal::ImageFsAvailable
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsAvailable
            | Signal::ContainerFsInodesFree => (true, true),
            _ => return false,
        };
        self.last_reclaim = Some(Instant::now());
        if containers {
            self.reclaim.delete_unused_containers().await;
        }
        if images {
            self.reclaim.delete_unused_images().await;
        }
        let Some((_, readings)) = self.read(true, Instant::now()).await else {
            return false;
        };
        if thresholds_met(&self.settings.thresholds, &readings, true).is_empty() {
            tracing::info!(signal = %signal, "eviction manager: node-level reclaim relieved the pressure without evicting pods");
            return true;
        }
        false
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
