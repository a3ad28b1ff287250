//! How long a container gets to stop: the kubelet's `setTerminationGracePeriod` and the
//! arithmetic around preStop hooks, as pure functions.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};

/// Why a container is being stopped; decides which grace period applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The pod is terminating (removed, deleted, finished, evicted).
    PodTermination,
    /// Its liveness probe failed.
    LivenessProbe,
    /// Its startup probe failed.
    StartupProbe,
    /// Its spec changed, its state is unknown, or its postStart hook failed.
    Other,
}

/// The kubelet's minimum shutdown window after a preStop hook (`minimumGracePeriodInSeconds`).
pub const MINIMUM_GRACE_PERIOD: Duration = Duration::from_secs(2);

fn secs(v: i64) -> Duration {
    Duration::from_secs(u64::try_from(v).unwrap_or(0))
}

/// The grace period for stopping `container`, by precedence: an explicit override (force
/// delete, eviction), the pod's `deletionGracePeriodSeconds`, the failing probe's own
/// `terminationGracePeriodSeconds` (liveness/startup kills only), the pod's
/// `terminationGracePeriodSeconds`, else 30 s.
pub fn termination_grace_period(
    pod: &Pod,
    container: Option<&Container>,
    reason: StopReason,
    override_: Option<Duration>,
) -> Duration {
    if let Some(grace) = override_ {
        return grace;
    }
    if let Some(g) = pod.metadata.deletion_grace_period_seconds {
        return secs(g);
    }
    let probe = container.and_then(|c| match reason {
        StopReason::LivenessProbe => c.liveness_probe.as_ref(),
        StopReason::StartupProbe => c.startup_probe.as_ref(),
        _ => None,
    });
    if let Some(g) = probe.and_then(|p| p.termination_grace_period_seconds) {
        return secs(g);
    }
    secs(
        pod.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30),
    )
}

/// The StopContainer timeout once a preStop hook has run for `hook_ran`: what is left of the
/// grace period, but at least [`MINIMUM_GRACE_PERIOD`] so a hook that used the whole period
/// still leaves the container a short window after the stop signal. A grace period of zero
/// (force) stays zero: the container is killed at once.
pub fn stop_timeout_after_hook(grace: Duration, hook_ran: Duration) -> Duration {
    if grace.is_zero() {
        return Duration::ZERO;
    }
    // The kubelet counts whole seconds of hook time.
    let used = Duration::from_secs(hook_ran.as_secs());
    grace.saturating_sub(used).max(MINIMUM_GRACE_PERIOD)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, Probe};

    fn pod(spec_grace: Option<i64>, deletion_grace: Option<i64>) -> Pod {
        let mut p = Pod {
            spec: Some(PodSpec {
                termination_grace_period_seconds: spec_grace,
                ..Default::default()
            }),
            ..Default::default()
        };
        p.metadata.deletion_grace_period_seconds = deletion_grace;
        p
    }

    fn container(liveness: Option<i64>, startup: Option<i64>) -> Container {
        let probe = |g: Option<i64>| {
            Some(Probe {
                termination_grace_period_seconds: g,
                ..Default::default()
            })
        };
        Container {
            name: "c".into(),
            liveness_probe: probe(liveness),
            startup_probe: probe(startup),
            ..Default::default()
        }
    }

    #[test]
    fn grace_period_precedence() {
        use StopReason::*;
        // (case, spec grace, deletion grace, liveness probe grace, startup probe grace, reason, override, want secs)
        type Case = (
            &'static str,
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<i64>,
            StopReason,
            Option<u64>,
            u64,
        );
        let cases: Vec<Case> = vec![
            (
                "default 30",
                None,
                None,
                None,
                None,
                PodTermination,
                None,
                30,
            ),
            (
                "pod spec",
                Some(7),
                None,
                None,
                None,
                PodTermination,
                None,
                7,
            ),
            (
                "deletion grace wins over spec",
                Some(7),
                Some(3),
                None,
                None,
                PodTermination,
                None,
                3,
            ),
            (
                "deletion grace wins over probe",
                Some(7),
                Some(3),
                Some(1),
                None,
                LivenessProbe,
                None,
                3,
            ),
            (
                "liveness probe grace on liveness kill",
                Some(60),
                None,
                Some(5),
                None,
                LivenessProbe,
                None,
                5,
            ),
            (
                "startup probe grace on startup kill",
                Some(60),
                None,
                Some(5),
                Some(9),
                StartupProbe,
                None,
                9,
            ),
            (
                "probe grace ignored on termination",
                Some(60),
                None,
                Some(5),
                Some(9),
                PodTermination,
                None,
                60,
            ),
            (
                "liveness kill without probe grace",
                Some(60),
                None,
                None,
                None,
                LivenessProbe,
                None,
                60,
            ),
            (
                "override wins",
                Some(60),
                Some(30),
                Some(5),
                None,
                LivenessProbe,
                Some(0),
                0,
            ),
            (
                "deletion grace zero",
                Some(60),
                Some(0),
                None,
                None,
                PodTermination,
                None,
                0,
            ),
        ];
        for (name, spec, deletion, live, start, reason, override_, want) in cases {
            let p = pod(spec, deletion);
            let c = container(live, start);
            assert_eq!(
                termination_grace_period(&p, Some(&c), reason, override_.map(Duration::from_secs)),
                Duration::from_secs(want),
                "{name}"
            );
        }
    }

    #[test]
    fn stop_timeout_after_a_pre_stop_hook() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // (grace, hook ran, timeout)
        let cases = [
            (s(30), ms(0), s(30)),
            (s(30), ms(10_900), s(20)),
            (s(10), s(9), s(2)),
            (s(10), s(10), s(2)),
            (s(10), s(25), s(2)),
            (s(1), ms(0), s(2)),
            (s(0), ms(0), s(0)),
        ];
        for (grace, ran, want) in cases {
            assert_eq!(
                stop_timeout_after_hook(grace, ran),
                want,
                "grace {grace:?} hook {ran:?}"
            );
        }
    }
}
