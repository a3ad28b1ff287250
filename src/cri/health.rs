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

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Runtime;

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

/// What the checks saw so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeChecks {
    /// When a check last succeeded.
    pub last_success: Option<Instant>,
    /// The error of the last check, if it failed.
    pub last_error: Option<String>,
    /// The last check failed by taking longer than [`RUNTIME_CHECK_TIMEOUT`], not by an error.
    pub last_was_slow: bool,
}

/// `Err(reason)` when the runtime counts as down at `now`: no successful check within
/// `down_after`, or within `slow_down_after` when the last check only timed out. Before the
/// first check has finished the runtime is taken as up: nodelet only starts once the runtime
/// answered its Version call.
pub fn runtime_errors(
    checks: &RuntimeChecks,
    started: Instant,
    now: Instant,
    down_after: Duration,
    slow_down_after: Duration,
) -> Result<(), String> {
    let since = checks.last_success.unwrap_or(started);
    let threshold = if checks.last_was_slow {
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
}

impl RuntimeHealth {
    pub fn new(runtime: Arc<dyn Runtime>) -> RuntimeHealth {
        RuntimeHealth {
            runtime,
            started: Instant::now(),
            checks: Arc::default(),
        }
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

    /// One check: the runtime's Version call, within [`RUNTIME_CHECK_TIMEOUT`].
    pub async fn check(&self) {
        let result = tokio::time::timeout(RUNTIME_CHECK_TIMEOUT, self.runtime.version()).await;
        let (error, slow) = match result {
            Ok(Ok(_)) => (None, false),
            Ok(Err(e)) => (Some(e.to_string()), false),
            Err(_) => (
                Some(format!(
                    "no answer to Version within {RUNTIME_CHECK_TIMEOUT:?}"
                )),
                true,
            ),
        };
        let mut checks = self.checks.lock().unwrap_or_else(|e| e.into_inner());
        match error {
            None => {
                if checks.last_error.take().is_some() {
                    tracing::info!("container runtime answers again");
                }
                checks.last_success = Some(Instant::now());
                checks.last_was_slow = false;
            }
            Some(error) => {
                if checks.last_error.is_none() {
                    tracing::warn!(%error, "container runtime check failed");
                }
                checks.last_error = Some(error);
                checks.last_was_slow = slow;
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
                },
                after(30),
                Err("container runtime is down: connection refused".into()),
            ),
            (
                "slow answers for 10 s: slow, not down",
                RuntimeChecks {
                    last_success: Some(after(20)),
                    last_error: Some("no answer to Version within 5s".into()),
                    last_was_slow: true,
                },
                after(30),
                Ok(()),
            ),
            (
                "slow answers for 29 s: still not down",
                RuntimeChecks {
                    last_success: Some(after(20)),
                    last_error: Some("no answer to Version within 5s".into()),
                    last_was_slow: true,
                },
                after(49),
                Ok(()),
            ),
            (
                "no answer for the kubelet's 30 s: down",
                RuntimeChecks {
                    last_success: Some(after(20)),
                    last_error: Some("no answer to Version within 5s".into()),
                    last_was_slow: true,
                },
                after(50),
                Err("container runtime is down: no answer to Version within 5s".into()),
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
        let fake = Arc::new(super::super::fake::FakeRuntime::new(
            crate::clock::Clock::starting_at("2026-01-01T00:00:00Z".parse().unwrap()),
        ));
        let health = RuntimeHealth::new(fake.clone());
        health.check().await;
        assert_eq!(health.status(), Ok(()));
        for _ in 0..3 {
            fake.fail_next("version", tonic::Status::unavailable("connection refused"));
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
}
