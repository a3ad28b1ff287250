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

/// The kubelet's `terminationOrdering`: regular containers stop first (in parallel); each
/// sidecar waits for every regular container and then for the sidecar after it in the spec, so
/// sidecars stop in reverse order. Waiting never outlasts the grace period.
pub struct TerminationOrdering {
    prereqs: std::collections::HashMap<String, Vec<tokio_util::sync::CancellationToken>>,
    terminated: std::collections::HashMap<String, tokio_util::sync::CancellationToken>,
}

/// Pure: for each container, the containers whose termination it waits for.
pub fn termination_prerequisites(
    pod: &Pod,
    running: &[&str],
) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut prereqs = std::collections::BTreeMap::new();
    let regular: Vec<String> = crate::podspec::regular_containers(pod)
        .iter()
        .map(|c| c.name.clone())
        .filter(|n| running.contains(&n.as_str()))
        .collect();
    let mut later_sidecar: Option<String> = None;
    for c in crate::podspec::init_containers(pod).iter().rev() {
        if c.restart_policy.as_deref() != Some("Always") {
            continue;
        }
        let mut waits = regular.clone();
        if let Some(next) = &later_sidecar {
            if running.contains(&next.as_str()) {
                waits.push(next.clone());
            }
        }
        prereqs.insert(c.name.clone(), waits);
        later_sidecar = Some(c.name.clone());
    }
    prereqs
}

impl TerminationOrdering {
    pub fn new(pod: &Pod, running: &[&str]) -> Self {
        use tokio_util::sync::CancellationToken;
        let mut terminated = std::collections::HashMap::new();
        for c in crate::podspec::regular_containers(pod)
            .iter()
            .chain(crate::podspec::init_containers(pod))
        {
            let token = CancellationToken::new();
            if !running.contains(&c.name.as_str()) {
                // Nothing waits for a container that is not running.
                token.cancel();
            }
            terminated.insert(c.name.clone(), token);
        }
        let prereqs = termination_prerequisites(pod, running)
            .into_iter()
            .map(|(name, waits)| {
                let tokens = waits
                    .iter()
                    .filter_map(|w| terminated.get(w).cloned())
                    .collect();
                (name, tokens)
            })
            .collect();
        TerminationOrdering {
            prereqs,
            terminated,
        }
    }

    /// Waits until `name` may stop, at most `grace`; returns how long it waited.
    pub async fn wait_for_turn(&self, name: &str, grace: Duration) -> Duration {
        if grace.is_zero() {
            return Duration::ZERO;
        }
        let started = tokio::time::Instant::now();
        let deadline = started + grace;
        for token in self.prereqs.get(name).into_iter().flatten() {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        started.elapsed()
    }

    pub fn container_terminated(&self, name: &str) {
        if let Some(token) = self.terminated.get(name) {
            token.cancel();
        }
    }
}

#[cfg(test)]
mod ordering_tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    #[test]
    fn sidecars_wait_for_main_containers_and_later_sidecars() {
        let c = |n: &str, sidecar: bool| Container {
            name: n.into(),
            restart_policy: sidecar.then(|| "Always".to_string()),
            ..Default::default()
        };
        let pod = Pod {
            spec: Some(PodSpec {
                init_containers: Some(vec![
                    c("init1", false),
                    c("s1", true),
                    c("init2", false),
                    c("s2", true),
                ]),
                containers: vec![c("a", false), c("b", false)],
                ..Default::default()
            }),
            ..Default::default()
        };
        let all = termination_prerequisites(&pod, &["a", "b", "s1", "s2"]);
        assert_eq!(
            all.get("s2").unwrap(),
            &vec!["a".to_string(), "b".to_string()]
        );
        assert_eq!(
            all.get("s1").unwrap(),
            &vec!["a".to_string(), "b".to_string(), "s2".to_string()]
        );
        assert!(!all.contains_key("a") && !all.contains_key("init1"));
        // Containers that are not running are not waited for.
        let some = termination_prerequisites(&pod, &["b", "s1"]);
        assert_eq!(some.get("s1").unwrap(), &vec!["b".to_string()]);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_ends_at_the_turn_or_the_grace_period() {
        let c = |n: &str, sidecar: bool| Container {
            name: n.into(),
            restart_policy: sidecar.then(|| "Always".to_string()),
            ..Default::default()
        };
        let pod = Pod {
            spec: Some(PodSpec {
                init_containers: Some(vec![c("s1", true)]),
                containers: vec![c("a", false)],
                ..Default::default()
            }),
            ..Default::default()
        };
        let o = std::sync::Arc::new(TerminationOrdering::new(&pod, &["a", "s1"]));
        let o2 = o.clone();
        let waiter =
            tokio::spawn(async move { o2.wait_for_turn("s1", Duration::from_secs(30)).await });
        tokio::time::sleep(Duration::from_secs(4)).await;
        o.container_terminated("a");
        assert_eq!(waiter.await.unwrap().as_secs(), 4);
        // Nobody terminates: the wait ends with the grace period.
        let o = TerminationOrdering::new(&pod, &["a", "s1"]);
        assert_eq!(
            o.wait_for_turn("s1", Duration::from_secs(10))
                .await
                .as_secs(),
            10
        );
        assert_eq!(
            o.wait_for_turn("a", Duration::from_secs(10))
                .await
                .as_secs(),
            0
        );
    }
}
