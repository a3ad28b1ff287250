//! One probe worker: probes one container instance for one kind, on its period, until it is
//! stopped or reaches a verdict that ends its job (liveness failed, startup finished).

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Container;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::manager::Inner;
use super::prober::{event_for, outcome};
use super::spec::{resolve_handler, ProbeSettings};
use super::threshold::{step, Outcome, ThresholdState, Thresholds};
use super::{ProbeKind, ProbeResult};
use crate::clock::saturating_deadline;

/// The container instance a worker probes: an immutable snapshot taken when the worker
/// starts, so a worker can never end up probing another instance.
#[derive(Debug, Clone)]
pub(super) struct Target {
    pub pod_uid: String,
    pub pod_namespace: String,
    pub pod_name: String,
    pub container: Arc<Container>,
    /// Where the container is in the spec (a sidecar is in `initContainers`).
    pub container_kind: crate::podspec::ContainerKind,
    pub container_id: String,
    pub started_at: Timestamp,
    pub pod_ip: String,
}

/// When the first probe runs: `initialDelaySeconds` after the container started (at once if
/// that is past), plus `spread` for an adopted container.
pub fn first_probe_at(
    started_at: Instant,
    initial_delay: Duration,
    now: Instant,
    spread: Duration,
) -> Instant {
    saturating_deadline(
        saturating_deadline(started_at, initial_delay).max(now),
        spread,
    )
}

/// A deterministic spread over one period for containers that were already running when
/// nodelet started, so re-adopting a node's worth of containers does not probe them all in
/// the same instant (the kubelet uses a random fraction of the period).
pub fn adoption_spread(container_id: &str, period: Duration) -> Duration {
    // FNV-1a: stable across runs and platforms, unlike the std hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in container_id.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let period_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1);
    Duration::from_millis(hash % period_ms)
}

pub(super) async fn run(
    inner: Arc<Inner>,
    target: Target,
    kind: ProbeKind,
    serial: u64,
    initial: ProbeResult,
    token: CancellationToken,
) {
    probe_loop(&inner, &target, kind, serial, initial, &token).await;
    // The kubelet's worker deletes its series when it stops: they end with the container.
    let probes = crate::metrics::probe_metrics();
    for result in PROBE_RESULTS {
        probes
            .probe_total
            .remove(&result_labels(&target, kind, result));
    }
    probes
        .probe_duration_seconds
        .remove(&duration_labels(&target, kind));
    inner.worker_exited(&target, kind, serial);
}

/// The values of `prober_probe_total`'s `result` label.
const PROBE_RESULTS: [&str; 3] = ["successful", "failed", "unknown"];

/// The `result` label of an attempt's outcome (`None`: the probe could not say).
fn result_label(outcome: Option<Outcome>) -> &'static str {
    match outcome {
        Some(Outcome::Success) => "successful",
        Some(Outcome::Failure) => "failed",
        None => "unknown",
    }
}

/// Whether an attempt's duration goes into `prober_probe_duration_seconds`: the kubelet's
/// worker observes successful and unknown attempts, not failed ones.
fn duration_observed(outcome: Option<Outcome>) -> bool {
    outcome != Some(Outcome::Failure)
}

fn result_labels(
    target: &Target,
    kind: ProbeKind,
    result: &str,
) -> crate::metrics::ProbeResultLabels {
    crate::metrics::ProbeResultLabels {
        container: target.container.name.clone(),
        namespace: target.pod_namespace.clone(),
        pod: target.pod_name.clone(),
        pod_uid: target.pod_uid.clone(),
        probe_type: kind.as_str().to_string(),
        result: result.to_string(),
    }
}

fn duration_labels(target: &Target, kind: ProbeKind) -> crate::metrics::ProbeDurationLabels {
    crate::metrics::ProbeDurationLabels {
        container: target.container.name.clone(),
        namespace: target.pod_namespace.clone(),
        pod: target.pod_name.clone(),
        probe_type: kind.as_str().to_string(),
    }
}

async fn probe_loop(
    inner: &Arc<Inner>,
    target: &Target,
    kind: ProbeKind,
    serial: u64,
    initial: ProbeResult,
    token: &CancellationToken,
) {
    let Some(probe) = kind.spec(&target.container) else {
        return;
    };
    let settings = ProbeSettings::from_probe(probe);
    let thresholds = Thresholds {
        success: settings.success_threshold,
        failure: settings.failure_threshold,
    };
    let handler = resolve_handler(probe, &target.container, &target.pod_ip);
    let spread = if target.started_at < inner.created_at {
        adoption_spread(&target.container_id, settings.period)
    } else {
        Duration::ZERO
    };
    let first = first_probe_at(
        inner.clock.instant_of(target.started_at),
        settings.initial_delay,
        Instant::now(),
        spread,
    );
    let mut ticker = tokio::time::interval_at(first, settings.period);
    // A probe that overruns its period (a long timeout) skips ticks rather than bursting.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut state = ThresholdState::new(kind);
    state.result = initial;
    loop {
        tokio::select! {
            biased;
            _ = token.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let started = Instant::now();
        let attempt = tokio::select! {
            biased;
            // A stopped worker abandons its probe: its answer would be about a container
            // nobody asks about any more.
            _ = token.cancelled() => return,
            a = inner.prober.run(&handler, &target.container_id, settings.timeout) => a,
        };
        let took = started.elapsed();
        tracing::trace!(?attempt, "probe attempt");
        if let Some((reason, message)) = event_for(kind, &attempt) {
            inner.record_event(target, kind, reason, message);
        }
        let outcome = outcome(&attempt);
        let result = result_label(outcome);
        crate::metrics::metrics()
            .prober_probe_total
            .get_or_create(&crate::metrics::ProbeLabels {
                probe_type: kind.as_str().to_string(),
                result: result.to_string(),
            })
            .inc();
        let probes = crate::metrics::probe_metrics();
        probes
            .probe_total
            .get_or_create(&result_labels(target, kind, result))
            .inc();
        if duration_observed(outcome) {
            probes
                .probe_duration_seconds
                .get_or_create(&duration_labels(target, kind))
                .observe(took.as_secs_f64());
        }
        let Some(outcome) = outcome else {
            continue;
        };
        let (next, changed) = step(kind, state, outcome, thresholds);
        state = next;
        if changed && !inner.publish(target, kind, serial, state.result) {
            return;
        }
        if state.held {
            tracing::debug!(result = ?state.result, "probe worker done with this container");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_probe_at_table() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let cases = [
            ("no delay, fresh container", t0, s(0), t0, s(0), t0),
            ("delay still ahead", t0, s(15), t0 + s(3), s(0), t0 + s(15)),
            (
                "delay already past",
                t0,
                s(15),
                t0 + s(40),
                s(0),
                t0 + s(40),
            ),
            (
                "adopted gets the spread",
                t0,
                s(0),
                t0 + s(40),
                s(2),
                t0 + s(42),
            ),
        ];
        for (name, started, delay, now, spread, want) in cases {
            assert_eq!(first_probe_at(started, delay, now, spread), want, "{name}");
        }
    }

    /// The longest periods the API allows (int32 seconds) and longer durations never overflow
    /// the instant of the first probe.
    #[test]
    fn first_probe_of_extreme_delays_saturates() {
        use crate::clock::FAR_FUTURE;
        let t0 = Instant::now();
        let max32 = Duration::from_secs(u64::from(i32::MAX.unsigned_abs()));
        // (case, initial delay, spread, want offset from t0)
        let cases = [
            ("int32 max delay", max32, Duration::ZERO, max32),
            ("int32 max delay and spread", max32, max32, max32 * 2),
            (
                "duration max delay",
                Duration::MAX,
                Duration::ZERO,
                FAR_FUTURE,
            ),
            (
                "duration max both",
                Duration::MAX,
                Duration::MAX,
                FAR_FUTURE * 2,
            ),
        ];
        for (name, delay, spread, want) in cases {
            assert_eq!(first_probe_at(t0, delay, t0, spread) - t0, want, "{name}");
        }
        let spread = adoption_spread("c", max32);
        assert!(spread < max32);
    }

    #[test]
    fn result_and_duration_table() {
        // (outcome, result label, duration observed)
        let cases = [
            (Some(Outcome::Success), "successful", true),
            (Some(Outcome::Failure), "failed", false),
            (None, "unknown", true),
        ];
        for (outcome, label, observed) in cases {
            assert_eq!(result_label(outcome), label, "{outcome:?}");
            assert_eq!(duration_observed(outcome), observed, "{outcome:?}");
            assert!(PROBE_RESULTS.contains(&label), "{label} is removed on stop");
        }
    }

    #[test]
    fn series_labels_name_the_container_instance() {
        let target = Target {
            pod_uid: "uid-1".into(),
            pod_namespace: "default".into(),
            pod_name: "web".into(),
            container: Arc::new(Container {
                name: "app".into(),
                ..Default::default()
            }),
            container_kind: crate::podspec::ContainerKind::Regular,
            container_id: "c1".into(),
            started_at: Timestamp::UNIX_EPOCH,
            pod_ip: String::new(),
        };
        let r = result_labels(&target, ProbeKind::Readiness, "failed");
        assert_eq!(
            (
                r.container.as_str(),
                r.namespace.as_str(),
                r.pod.as_str(),
                r.pod_uid.as_str(),
                r.probe_type.as_str(),
                r.result.as_str()
            ),
            ("app", "default", "web", "uid-1", "Readiness", "failed")
        );
        let d = duration_labels(&target, ProbeKind::Startup);
        assert_eq!(
            (d.container, d.namespace, d.pod, d.probe_type),
            (
                "app".into(),
                "default".into(),
                "web".into(),
                "Startup".into()
            )
        );
    }

    #[test]
    fn adoption_spread_stays_within_a_period() {
        let period = Duration::from_secs(10);
        let ids = ["a", "b", "0123456789abcdef", ""];
        for id in ids {
            let spread = adoption_spread(id, period);
            assert!(spread < period, "{id}: {spread:?}");
            assert_eq!(spread, adoption_spread(id, period), "{id}: deterministic");
        }
        assert_ne!(
            adoption_spread("container-one", period),
            adoption_spread("container-two", period)
        );
    }
}
