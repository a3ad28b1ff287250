//! Is the container runtime reachable? The kubelet's `runtimeState` and `updateRuntimeUp`:
//! a loop asks the runtime every [`RUNTIME_CHECK_PERIOD`], and the runtime counts as down when
//! no check succeeded for a while. The node's `Ready` condition and `/healthz` report it.
//!
//! How long "a while" is depends on how the checks failed:
//! * a runtime that **answers with an error** or cannot be reached (connection refused, the
//!   socket gone) is down after [`RUNTIME_DOWN_AFTER`] (10 s), not the kubelet's 30 s
//!   (`maxWaitForContainerRuntime`): an outage shows within 10–15 s instead of 30–35 s;
//! * a runtime that **does not answer in time** ([`RUNTIME_CHECK_TIMEOUT`]) is down only after
//!   the kubelet's 30 s ([`RUNTIME_SLOW_DOWN_AFTER`]): a busy runtime on a loaded node (a
//!   hundred crash-looping pods on two cores) or a nodelet whose own threads were late to read
//!   the answer is slow, not down, and must not turn the node NotReady and `/healthz` 500.
//!
//! `/healthz` includes it (the kubelet's reports only its sync loop and PLEG, and stays `ok`
//! with the runtime gone until the PLEG's 3 minutes pass).
//!
//! The check is the runtime's `Status` call, and its two conditions are read as the kubelet
//! reads them: `RuntimeReady=false` is an error of the node's `Ready` condition ("container
//! runtime not ready: …"), and `NetworkReady=false` (containerd before a CNI configuration
//! exists) is the network error ("container runtime network not ready: …") that keeps the node
//! `Ready=False` and holds every pod not on the host's network ([`RuntimeHealth::network`]).
//! Until the first answer the network's state is unknown, as the kubelet's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{api, Runtime};

/// How often the runtime is asked (the kubelet's `updateRuntimeUp` period).
pub const RUNTIME_CHECK_PERIOD: Duration = Duration::from_secs(5);
/// How long one check may take before it counts as failed.
pub const RUNTIME_CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// Without a successful check for this long, a runtime whose checks fail is down.
pub const RUNTIME_DOWN_AFTER: Duration = Duration::from_secs(10);
/// Without a successful check for this long, a runtime whose checks time out is down (the
/// kubelet's `maxWaitForContainerRuntime`).
pub const RUNTIME_SLOW_DOWN_AFTER: Duration = Duration::from_secs(30);

/// The kubelet's message for a runtime that stopped answering.
pub const RUNTIME_DOWN: &str = "container runtime is down";

/// The kubelet's network error before the runtime's first answer (`ErrNetworkUnknown`).
pub const NETWORK_STATE_UNKNOWN: &str = "network state unknown";

/// What the checks saw so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeChecks {
    /// When a check last succeeded (the runtime answered, and answered ready).
    pub last_success: Option<Instant>,
    /// The error of the last check, if it failed.
    pub last_error: Option<String>,
    /// The last check failed by taking longer than [`RUNTIME_CHECK_TIMEOUT`], not by an error.
    pub last_was_slow: bool,
    /// The last answer said `RuntimeReady=false`: the kubelet's "container runtime not
    /// ready: …". The runtime answers, so it counts as down only after the slow threshold.
    pub not_ready: Option<String>,
}

/// The errors a `Status` answer's conditions mean, in the kubelet's words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConditionErrors {
    /// `RuntimeReady` false or missing.
    pub runtime: Option<String>,
    /// `NetworkReady` false or missing.
    pub network: Option<String>,
}

/// The kubelet's `updateRuntimeUp` over a `Status` answer's conditions: a condition that is
/// missing or false is an error quoting it as the kubelet prints a `RuntimeCondition`
/// (`NetworkReady=false reason:… message:…`, `<nil>` when missing).
pub fn condition_errors(conditions: &[api::RuntimeCondition]) -> ConditionErrors {
    let error = |type_: &str, what: &str| {
        let condition = conditions.iter().find(|c| c.r#type == type_);
        if condition.is_some_and(|c| c.status) {
            return None;
        }
        let quoted = condition.map_or_else(
            || "<nil>".to_string(),
            |c| {
                format!(
                    "{}={} reason:{} message:{}",
                    c.r#type, c.status, c.reason, c.message
                )
            },
        );
        Some(format!("{what}: {quoted}"))
    };
    ConditionErrors {
        runtime: error("RuntimeReady", "container runtime not ready"),
        network: error("NetworkReady", "container runtime network not ready"),
    }
}

/// `Err(reason)` when the runtime counts as down at `now`: no successful check within
/// `down_after`, or within `slow_down_after` when the last check only timed out or the runtime
/// answered not ready. Before the first check has finished the runtime is taken as up:
/// nodelet only starts once the runtime answered its Version call.
pub fn runtime_errors(
    checks: &RuntimeChecks,
    started: Instant,
    now: Instant,
    down_after: Duration,
    slow_down_after: Duration,
) -> Result<(), String> {
    let since = checks.last_success.unwrap_or(started);
    let threshold = if checks.last_was_slow || checks.not_ready.is_some() {
        slow_down_after
    } else {
        down_after
    };
    if now.saturating_duration_since(since) < threshold {
        return Ok(());
    }
    Err(match &checks.last_error {
        Some(error) => format!("{RUNTIME_DOWN}: {error}"),
        None => RUNTIME_DOWN.to_string(),
    })
}

/// The runtime's health, kept current by [`RuntimeHealth::run`].
#[derive(Clone)]
pub struct RuntimeHealth {
    runtime: Arc<dyn Runtime>,
    started: Instant,
    checks: Arc<Mutex<RuntimeChecks>>,
    /// The network error of the last answer (`None`: `NetworkReady=true`).
    network: Arc<watch::Sender<Option<String>>>,
}

impl RuntimeHealth {
    pub fn new(runtime: Arc<dyn Runtime>) -> RuntimeHealth {
        RuntimeHealth {
            runtime,
            started: Instant::now(),
            checks: Arc::default(),
            network: Arc::new(watch::Sender::new(Some(NETWORK_STATE_UNKNOWN.to_string()))),
        }
    }

    /// The kubelet's `runtimeState.networkErrors`: why the runtime's network is not ready,
    /// `None` once it is.
    pub fn network_error(&self) -> Option<String> {
        self.network.borrow().clone()
    }

    /// The network error as it changes (what holds and releases pods off the host network).
    pub fn network(&self) -> watch::Receiver<Option<String>> {
        self.network.subscribe()
    }

    /// The runtime's own `RuntimeReady=false`, quoted, while the last answer said so.
    pub fn not_ready(&self) -> Option<String> {
        self.checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .not_ready
            .clone()
    }

    /// `Err(reason)` while the runtime is down (see [`runtime_errors`]).
    pub fn status(&self) -> Result<(), String> {
        let checks = self
            .checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        runtime_errors(
            &checks,
            self.started,
            Instant::now(),
            RUNTIME_DOWN_AFTER,
            RUNTIME_SLOW_DOWN_AFTER,
        )
    }

    /// One check: the runtime's Status call, within [`RUNTIME_CHECK_TIMEOUT`].
    pub async fn check(&self) {
        let result =
            tokio::time::timeout(RUNTIME_CHECK_TIMEOUT, self.runtime.runtime_conditions()).await;
        let (error, slow) = match result {
            Ok(Ok(conditions)) => {
                self.answered(condition_errors(&conditions));
                return;
            }
            Ok(Err(e)) => (e.to_string(), false),
            Err(_) => (
                format!("no answer to Status within {RUNTIME_CHECK_TIMEOUT:?}"),
                true,
            ),
        };
        let mut checks = self.checks.lock().unwrap_or_else(|e| e.into_inner());
        if checks.last_error.is_none() {
            tracing::warn!(%error, "container runtime check failed");
        }
        checks.last_error = Some(error);
        checks.last_was_slow = slow;
    }

    /// The runtime answered: its conditions become the runtime's and the network's state.
    fn answered(&self, errors: ConditionErrors) {
        self.network.send_if_modified(|network| {
            if *network == errors.network {
                return false;
            }
            match &errors.network {
                Some(error) => tracing::warn!(%error, "container runtime network not ready"),
                None => tracing::info!("container runtime network ready"),
            }
            *network = errors.network;
            true
        });
        let mut checks = self.checks.lock().unwrap_or_else(|e| e.into_inner());
        if checks.last_error.take().is_some() {
            tracing::info!("container runtime answers again");
        }
        checks.last_was_slow = false;
        if checks.not_ready != errors.runtime {
            match &errors.runtime {
                Some(error) => tracing::warn!(%error, "container runtime not ready"),
                None => tracing::info!("container runtime ready"),
            }
        }
        match errors.runtime {
            // The kubelet's `updateRuntimeUp` returns before recording the sync.
            Some(error) => checks.not_ready = Some(error),
            None => {
                checks.not_ready = None;
                checks.last_success = Some(Instant::now());
            }
        }
    }

    /// Checks every [`RUNTIME_CHECK_PERIOD`] until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        let mut ticker = tokio::time::interval(RUNTIME_CHECK_PERIOD);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticker.tick() => {}
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = self.check() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_runtime() -> Arc<super::super::fake::FakeRuntime> {
        Arc::new(super::super::fake::FakeRuntime::new(
            crate::clock::Clock::starting_at("2026-01-01T00:00:00Z".parse().unwrap()),
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn runtime_errors_table() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let after = |secs| t0 + s(secs);
        let cases: Vec<(&str, RuntimeChecks, Instant, Result<(), String>)> = vec![
            (
                "no check yet, just started",
                RuntimeChecks::default(),
                after(3),
                Ok(()),
            ),
            (
                "no check finished for the whole threshold",
                RuntimeChecks::default(),
                after(10),
                Err(RUNTIME_DOWN.into()),
            ),
            (
                "a success 9 s ago",
                RuntimeChecks {
                    last_success: Some(after(1)),
                    last_error: None,
                    last_was_slow: false,
                    not_ready: None,
                },
                after(10),
                Ok(()),
            ),
            (
                "a failure after a recent success is not down yet",
                RuntimeChecks {
                    last_success: Some(after(20)),
                    last_error: Some("connection refused".into()),
                    last_was_slow: false,
                    not_ready: None,
                },
                after(25),
                Ok(()),
            ),
            (
                "failures for 10 s name the last error",
                RuntimeChecks {
                    last_success: Some(after(20)),
                    last_error: Some("connection refused".into()),
                    last_was_slow: false,
                    not_ready: None,
                },
                after(30),
                Err("container runtime is down: connection refused".into()),
            ),
            (
                "slow answers for 10 s: slow, not down",
                RuntimeChecks {
                    last_success: Some(after(20)),
                    last_error: Some("no answer to Status within 5s".into()),
                    last_was_slow: true,
                    not_ready: None,
                },
                after(30),
                Ok(()),
            ),
            (
                "slow answers for 29 s: still not down",
                RuntimeChecks {
                    last_success: Some(after(20)),
                    last_error: Some("no answer to Status within 5s".into()),
                    last_was_slow: true,
                    not_ready: None,
                },
                after(49),
                Ok(()),
            ),
            (
                "no answer for the kubelet's 30 s: down",
                RuntimeChecks {
                    last_success: Some(after(20)),
                    last_error: Some("no answer to Status within 5s".into()),
                    last_was_slow: true,
                    not_ready: None,
                },
                after(50),
                Err("container runtime is down: no answer to Status within 5s".into()),
            ),
            (
                "answered not ready for 29 s: not down yet",
                RuntimeChecks {
                    last_success: Some(after(20)),
                    last_error: None,
                    last_was_slow: false,
                    not_ready: Some("container runtime not ready: <nil>".into()),
                },
                after(49),
                Ok(()),
            ),
            (
                "answered not ready for the kubelet's 30 s: down",
                RuntimeChecks {
                    last_success: Some(after(20)),
                    last_error: None,
                    last_was_slow: false,
                    not_ready: Some("container runtime not ready: <nil>".into()),
                },
                after(50),
                Err(RUNTIME_DOWN.into()),
            ),
        ];
        for (name, checks, now, want) in cases {
            assert_eq!(
                runtime_errors(
                    &checks,
                    t0,
                    now,
                    RUNTIME_DOWN_AFTER,
                    RUNTIME_SLOW_DOWN_AFTER
                ),
                want,
                "{name}"
            );
        }
    }

    /// The loop on the fake runtime: failing Version calls make it down after the threshold,
    /// one success makes it up again.
    #[tokio::test(start_paused = true)]
    async fn down_after_failed_checks_and_up_after_one_success() {
        let fake = fake_runtime();
        let health = RuntimeHealth::new(fake.clone());
        health.check().await;
        assert_eq!(health.status(), Ok(()));
        for _ in 0..3 {
            fake.fail_next("status", tonic::Status::unavailable("connection refused"));
            tokio::time::sleep(RUNTIME_CHECK_PERIOD).await;
            health.check().await;
        }
        let reason = health
            .status()
            .expect_err("down after 15 s of failed checks");
        assert!(reason.starts_with(RUNTIME_DOWN), "{reason}");
        assert!(reason.contains("connection refused"), "{reason}");
        health.check().await;
        assert_eq!(health.status(), Ok(()));
    }

    #[test]
    fn condition_errors_table() {
        let condition =
            |type_: &str, status: bool, reason: &str, message: &str| api::RuntimeCondition {
                r#type: type_.into(),
                status,
                reason: reason.into(),
                message: message.into(),
            };
        let ready = |type_: &str| condition(type_, true, "", "");
        let cases = vec![
            (
                "both ready",
                vec![ready("RuntimeReady"), ready("NetworkReady")],
                ConditionErrors::default(),
            ),
            (
                // containerd without a CNI configuration, in the kubelet's words.
                "network not ready",
                vec![
                    ready("RuntimeReady"),
                    condition(
                        "NetworkReady",
                        false,
                        "NetworkPluginNotReady",
                        "Network plugin returns error: cni plugin not initialized",
                    ),
                ],
                ConditionErrors {
                    runtime: None,
                    network: Some(
                        "container runtime network not ready: NetworkReady=false \
                         reason:NetworkPluginNotReady message:Network plugin returns error: \
                         cni plugin not initialized"
                            .into(),
                    ),
                },
            ),
            (
                "runtime not ready",
                vec![
                    condition("RuntimeReady", false, "Broken", "shim gone"),
                    ready("NetworkReady"),
                ],
                ConditionErrors {
                    runtime: Some(
                        "container runtime not ready: RuntimeReady=false reason:Broken \
                         message:shim gone"
                            .into(),
                    ),
                    network: None,
                },
            ),
            (
                "no conditions at all",
                vec![],
                ConditionErrors {
                    runtime: Some("container runtime not ready: <nil>".into()),
                    network: Some("container runtime network not ready: <nil>".into()),
                },
            ),
        ];
        for (name, conditions, want) in cases {
            assert_eq!(condition_errors(&conditions), want, "{name}");
        }
    }

    /// The network's state follows the runtime's answers: unknown before the first, then
    /// each change reaches a subscriber.
    #[tokio::test(start_paused = true)]
    async fn network_state_follows_the_answers() {
        let fake = fake_runtime();
        let health = RuntimeHealth::new(fake.clone());
        let mut network = health.network();
        assert_eq!(
            health.network_error().as_deref(),
            Some(NETWORK_STATE_UNKNOWN)
        );
        fake.set_network_not_ready(Some(("NetworkPluginNotReady", "no config")));
        health.check().await;
        assert!(network.has_changed().unwrap());
        let error = network.borrow_and_update().clone().expect("not ready");
        assert!(
            error.ends_with("reason:NetworkPluginNotReady message:no config"),
            "{error}"
        );
        // The same answer again is no change.
        health.check().await;
        assert!(!network.has_changed().unwrap());
        // A failed check leaves the network's state as it was.
        fake.fail_next("status", tonic::Status::unavailable("connection refused"));
        health.check().await;
        assert!(!network.has_changed().unwrap());
        fake.set_network_not_ready(None);
        health.check().await;
        assert!(network.has_changed().unwrap());
        assert_eq!(*network.borrow_and_update(), None);
        assert_eq!(health.status(), Ok(()));
        assert_eq!(health.not_ready(), None);
    }
}
