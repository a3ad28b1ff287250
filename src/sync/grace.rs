//! How long a container gets to stop: the kubelet's `setTerminationGracePeriod` and the
//! arithmetic around preStop hooks, as pure functions; and the deadline of a pod's termination,
//! which a shorter grace period (force delete, eviction) moves earlier while its containers stop.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::clock::{saturating_deadline, seconds_from_api};

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

/// Any int64 is a valid grace period in the API: negative is zero, the longest is
/// [`crate::clock::FAR_FUTURE`], so every deadline below can be computed.
fn secs(v: i64) -> Duration {
    seconds_from_api(v)
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

/// The grace period a pod termination asks for — one request's share of the kubelet's
/// `calculateEffectiveGracePeriod`: the pod's own (`deletionGracePeriodSeconds`, else
/// `terminationGracePeriodSeconds`, else 30 s), or the override (force, eviction, node
/// shutdown) — which, against a deletion grace period the API server set, applies only when
/// shorter.
pub fn pod_grace_period(pod: &Pod, override_: Option<Duration>) -> Duration {
    let own = termination_grace_period(pod, None, StopReason::PodTermination, None);
    match override_ {
        None => own,
        Some(o) if pod.metadata.deletion_grace_period_seconds.is_some() => o.min(own),
        Some(o) => o,
    }
}

/// The grace period of one termination as a deadline: it counts from `started` and ends at
/// `ends`. A shorter grace period asked later moves `ends` earlier; a longer one never moves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraceDeadline {
    pub started: Instant,
    pub ends: Instant,
    /// A grace period of zero was asked (force): no preStop hook, no minimum window, SIGKILL
    /// at once.
    pub immediate: bool,
}

impl GraceDeadline {
    pub fn new(started: Instant, grace: Duration) -> Self {
        GraceDeadline {
            started,
            ends: saturating_deadline(started, grace),
            immediate: grace.is_zero(),
        }
    }

    /// The whole grace period as it stands now.
    pub fn period(&self) -> Duration {
        self.ends.saturating_duration_since(self.started)
    }

    /// The deadline after `grace` is asked for at `now`: it ends at `now + grace` if that is
    /// sooner (zero: at once), else nothing changes. Unlike the kubelet, which restarts the
    /// termination with the shorter period counted from `now`, a shorter request never ends
    /// later than the running one would have.
    pub fn shortened(self, grace: Duration, now: Instant) -> GraceDeadline {
        if self.immediate {
            return self;
        }
        if grace.is_zero() {
            return GraceDeadline {
                ends: self.ends.min(now),
                immediate: true,
                ..self
            };
        }
        GraceDeadline {
            ends: self.ends.min(saturating_deadline(now, grace)),
            ..self
        }
    }

    /// When a container that got its stop signal at `signalled` is SIGKILLed: at once after a
    /// force; otherwise when the grace period ends, but never less than
    /// [`MINIMUM_GRACE_PERIOD`] after the signal (what [`stop_timeout_after_hook`] gives a
    /// container whose preStop hook, or wait for its turn, used the period up).
    pub fn kill_at(&self, signalled: Instant) -> Instant {
        if self.immediate {
            return signalled.max(self.ends);
        }
        let used = signalled.saturating_duration_since(self.started);
        saturating_deadline(signalled, stop_timeout_after_hook(self.period(), used))
    }
}

/// A termination's deadline as the code stopping its containers sees it: the current value,
/// and waits that follow it when the pod worker moves it (a `watch` of the deadline, so a
/// shorter grace period reaches a preStop hook or a StopContainer call already under way).
#[derive(Debug, Clone)]
pub struct Grace {
    rx: watch::Receiver<GraceDeadline>,
}

impl Grace {
    /// Follows the deadline that `rx`'s sender moves.
    pub fn new(rx: watch::Receiver<GraceDeadline>) -> Self {
        Grace { rx }
    }

    /// A deadline nobody moves: `grace` from now (one container killed by a probe, a spec
    /// change, an in-place restart).
    pub fn fixed(grace: Duration) -> Self {
        let (_, rx) = watch::channel(GraceDeadline::new(Instant::now(), grace));
        Grace { rx }
    }

    pub fn current(&self) -> GraceDeadline {
        *self.rx.borrow()
    }

    /// Resolves when the deadline moves; never, once nobody can move it.
    pub async fn moved(&mut self) {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves when the grace period is over (at once after a force), following every move.
    pub async fn expired(&mut self) {
        loop {
            let d = self.current();
            if d.immediate {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(d.ends) => return,
                _ = self.moved() => {}
            }
        }
    }
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

#[cfg(test)]
mod deadline_tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    /// A pod with the given `terminationGracePeriodSeconds` and `deletionGracePeriodSeconds`.
    fn pod_with_grace(spec: Option<i64>, deletion: Option<i64>) -> Pod {
        let mut p = Pod {
            spec: Some(PodSpec {
                termination_grace_period_seconds: spec,
                ..Default::default()
            }),
            ..Default::default()
        };
        p.metadata.deletion_grace_period_seconds = deletion;
        p
    }

    #[test]
    fn pod_grace_period_with_and_without_an_override() {
        let pod = pod_with_grace;
        // (case, spec grace, deletion grace, override, want secs)
        let cases = [
            ("pod's own", Some(60), None, None, 60),
            ("default 30", None, None, None, 30),
            ("deletion grace", Some(60), Some(5), None, 5),
            ("override replaces the spec", Some(60), None, Some(10), 10),
            (
                "override longer than the spec still applies",
                Some(5),
                None,
                Some(10),
                10,
            ),
            (
                "override shorter than the deletion grace",
                Some(60),
                Some(30),
                Some(10),
                10,
            ),
            (
                "deletion grace shorter than the override",
                Some(60),
                Some(3),
                Some(10),
                3,
            ),
            ("force", Some(60), Some(30), Some(0), 0),
            ("force delete through the API", Some(60), Some(0), None, 0),
        ];
        for (name, spec, deletion, override_, want) in cases {
            assert_eq!(
                pod_grace_period(&pod(spec, deletion), override_.map(Duration::from_secs)),
                Duration::from_secs(want),
                "{name}"
            );
        }
    }

    #[test]
    fn a_deadline_only_moves_earlier() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let at = |secs: u64| t0 + s(secs);
        let d30 = GraceDeadline::new(t0, s(30));
        // (case, deadline, asked grace, asked at (s), want end (s), want immediate)
        let cases = [
            ("shorter ends sooner", d30, s(10), 5, 15, false),
            (
                "shorter from later on ends at the old end",
                d30,
                s(10),
                25,
                30,
                false,
            ),
            ("longer never lengthens", d30, s(60), 5, 30, false),
            ("same changes nothing", d30, s(30), 0, 30, false),
            ("force ends now", d30, s(0), 5, 5, true),
            ("force after the end keeps the end", d30, s(0), 40, 30, true),
            (
                "nothing after a force",
                d30.shortened(s(0), at(5)),
                s(1),
                6,
                5,
                true,
            ),
        ];
        for (name, d, grace, asked, want_end, want_immediate) in cases {
            let got = d.shortened(grace, at(asked));
            assert_eq!(got.started, t0, "{name}");
            assert_eq!(got.ends, at(want_end), "{name}");
            assert_eq!(got.immediate, want_immediate, "{name}");
        }
        assert!(GraceDeadline::new(t0, s(0)).immediate);
        assert_eq!(d30.shortened(s(10), at(5)).period(), s(15));
    }

    #[test]
    fn kill_time_after_the_stop_signal() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let at = |secs: u64| t0 + s(secs);
        let d30 = GraceDeadline::new(t0, s(30));
        // (case, deadline, signalled at (s), want SIGKILL at (s))
        let cases = [
            ("signalled at the start: the whole period", d30, 0, 30),
            ("after a 10 s preStop: what is left", d30, 10, 30),
            ("after a hook that used it all: 2 s window", d30, 30, 32),
            ("hook outlived the period: 2 s window", d30, 35, 37),
            ("shortened to 15 s", d30.shortened(s(10), at(5)), 0, 15),
            (
                "shortened below the window after the signal",
                d30.shortened(s(1), at(13)),
                13,
                15,
            ),
            (
                "force after the signal: at the force",
                d30.shortened(s(0), at(5)),
                0,
                5,
            ),
            (
                "force before the signal: at the signal",
                d30.shortened(s(0), at(5)),
                7,
                7,
            ),
            (
                "grace 1 s still gets the window",
                GraceDeadline::new(t0, s(1)),
                0,
                2,
            ),
            ("grace 0: at once", GraceDeadline::new(t0, s(0)), 0, 0),
        ];
        for (name, d, signalled, want) in cases {
            assert_eq!(d.kill_at(at(signalled)), at(want), "{name}");
        }
    }

    /// Any int64 is a valid grace period in the API (and an override can be any duration):
    /// the grace period saturates at `FAR_FUTURE`, and no deadline computed from it panics.
    #[test]
    fn extreme_grace_periods_saturate() {
        use crate::clock::FAR_FUTURE;
        use k8s_openapi::api::core::v1::Probe;
        let pod = pod_with_grace;
        let probe_grace = |g: i64| Container {
            name: "c".into(),
            liveness_probe: Some(Probe {
                termination_grace_period_seconds: Some(g),
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = Duration::from_secs;
        // (case, spec grace, deletion grace, probe grace, reason, override, want)
        type Case = (
            &'static str,
            Option<i64>,
            Option<i64>,
            i64,
            StopReason,
            Option<Duration>,
            Duration,
        );
        let cases: [Case; 9] = [
            (
                "spec int64 max",
                Some(i64::MAX),
                None,
                1,
                StopReason::PodTermination,
                None,
                FAR_FUTURE,
            ),
            (
                "spec int64 min",
                Some(i64::MIN),
                None,
                1,
                StopReason::PodTermination,
                None,
                s(0),
            ),
            (
                "deletion int64 max",
                Some(5),
                Some(i64::MAX),
                1,
                StopReason::PodTermination,
                None,
                FAR_FUTURE,
            ),
            (
                "deletion int64 min",
                Some(5),
                Some(i64::MIN),
                1,
                StopReason::PodTermination,
                None,
                s(0),
            ),
            (
                "probe int64 max",
                Some(5),
                None,
                i64::MAX,
                StopReason::LivenessProbe,
                None,
                FAR_FUTURE,
            ),
            (
                "probe -1",
                Some(5),
                None,
                -1,
                StopReason::LivenessProbe,
                None,
                s(0),
            ),
            (
                "100 years and one second",
                Some(3_153_600_001),
                None,
                1,
                StopReason::PodTermination,
                None,
                FAR_FUTURE,
            ),
            (
                "override of Duration::MAX",
                Some(5),
                None,
                1,
                StopReason::PodTermination,
                Some(Duration::MAX),
                Duration::MAX,
            ),
            (
                "force over int64 max",
                Some(i64::MAX),
                Some(i64::MAX),
                i64::MAX,
                StopReason::LivenessProbe,
                Some(s(0)),
                s(0),
            ),
        ];
        let t0 = Instant::now();
        for (name, spec, deletion, probe, reason, override_, want) in cases {
            let p = pod(spec, deletion);
            let grace = termination_grace_period(&p, Some(&probe_grace(probe)), reason, override_);
            assert_eq!(grace, want, "{name}");
            // Every deadline of it can be computed; none ends later than FAR_FUTURE.
            let d = GraceDeadline::new(t0, grace);
            assert_eq!(d.period(), grace.min(FAR_FUTURE), "{name}");
            let kill_at = d.kill_at(t0 + s(3600));
            assert!(kill_at <= t0 + s(3600) + FAR_FUTURE, "{name}");
            let longer = d.shortened(Duration::MAX, t0 + s(1));
            assert_eq!(
                longer.ends, d.ends,
                "{name}: a longer grace never lengthens"
            );
            let forced = d.shortened(s(0), t0 + s(1));
            assert!(forced.immediate, "{name}");
            assert_eq!(forced.kill_at(t0 + s(1)), t0 + s(1), "{name}");
            let _ = pod_grace_period(&p, override_);
        }
        // The StopContainer timeout for the longest grace period: whole seconds that containerd
        // can turn into int64 nanoseconds without wrapping to a negative (SIGKILL at once).
        let d = GraceDeadline::new(t0, seconds_from_api(i64::MAX));
        let timeout = d.kill_at(t0) - t0;
        assert_eq!(timeout, FAR_FUTURE);
        assert!(i64::try_from(u128::from(timeout.as_secs()) * 1_000_000_000).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn expiry_follows_the_deadline_as_it_moves() {
        let t0 = Instant::now();
        let (tx, rx) = watch::channel(GraceDeadline::new(t0, Duration::from_secs(30)));
        let mut grace = Grace::new(rx);
        let waiter = tokio::spawn(async move {
            grace.expired().await;
            t0.elapsed()
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        tx.send_modify(|d| *d = d.shortened(Duration::from_secs(60), Instant::now()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        tx.send_modify(|d| *d = d.shortened(Duration::from_secs(4), Instant::now()));
        assert_eq!(waiter.await.unwrap(), Duration::from_secs(10));
        // A fixed deadline expires on time even though nobody holds its sender.
        let mut fixed = Grace::fixed(Duration::from_secs(3));
        let t1 = Instant::now();
        fixed.expired().await;
        assert_eq!(t1.elapsed(), Duration::from_secs(3));
        Grace::fixed(Duration::ZERO).expired().await;
        assert_eq!(t1.elapsed(), Duration::from_secs(3), "zero expires at once");
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

    /// Waits until `name` may stop, at most until the grace period ends; returns how long it
    /// waited.
    pub async fn wait_for_turn(&self, name: &str, grace: &mut Grace) -> Duration {
        let started = tokio::time::Instant::now();
        for token in self.prereqs.get(name).into_iter().flatten() {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = grace.expired() => break,
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
        let waiter = tokio::spawn(async move {
            o2.wait_for_turn("s1", &mut Grace::fixed(Duration::from_secs(30)))
                .await
        });
        tokio::time::sleep(Duration::from_secs(4)).await;
        o.container_terminated("a");
        assert_eq!(waiter.await.unwrap().as_secs(), 4);
        // Nobody terminates: the wait ends with the grace period.
        let o = TerminationOrdering::new(&pod, &["a", "s1"]);
        assert_eq!(
            o.wait_for_turn("s1", &mut Grace::fixed(Duration::from_secs(10)))
                .await
                .as_secs(),
            10
        );
        assert_eq!(
            o.wait_for_turn("a", &mut Grace::fixed(Duration::from_secs(10)))
                .await
                .as_secs(),
            0
        );
    }
}
