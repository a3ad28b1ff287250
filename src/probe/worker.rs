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
    inner.worker_exited(&target, kind, serial);
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
        let attempt = tokio::select! {
            biased;
            // A stopped worker abandons its probe: its answer would be about a container
            // nobody asks about any more.
            _ = token.cancelled() => return,
            a = inner.prober.run(&handler, &target.container_id, settings.timeout) => a,
        };
        tracing::trace!(?attempt, "probe attempt");
        if let Some((reason, message)) = event_for(kind, &attempt) {
            inner.record_event(target, kind, reason, message);
        }
        let outcome = outcome(&attempt);
        let result = match outcome {
            Some(Outcome::Success) => "successful",
            Some(Outcome::Failure) => "failed",
            None => "unknown",
        };
        crate::metrics::metrics()
            .prober_probe_total
            .get_or_create(&crate::metrics::ProbeLabels {
                probe_type: kind.as_str().to_string(),
                result: result.to_string(),
            })
            .inc();
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
