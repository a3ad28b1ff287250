//! The one health state that `/healthz`, the gRPC health service and the TCP listener all follow,
//! so a test can flip liveness/readiness/startup probes of any kind with the same flags.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::events::Events;

/// How often the background monitor re-evaluates health for the TCP listener, gRPC `Watch` and
/// the event log. `/healthz` and gRPC `Check` evaluate on every request instead, so probe results
/// are exact to the request, not to this period.
pub const MONITOR_PERIOD: Duration = Duration::from_millis(100);

/// When the server counts as healthy. All conditions that are set must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthPolicy {
    /// Unhealthy until this long after start (a slow-starting app, for startup probes).
    pub healthy_after: Option<Duration>,
    /// Unhealthy from this long after start on (an app that wedges, for liveness probes).
    pub unhealthy_after: Option<Duration>,
    /// Healthy only while this file exists (`rm` / `touch` it from an exec or a test).
    pub healthy_file: Option<PathBuf>,
}

impl HealthPolicy {
    /// The health decision for `elapsed` time since start, given whether the healthy file exists
    /// (ignored when no file is configured).
    pub fn is_healthy(&self, elapsed: Duration, healthy_file_exists: bool) -> bool {
        let started = self.healthy_after.is_none_or(|after| elapsed >= after);
        let not_yet_wedged = self.unhealthy_after.is_none_or(|after| elapsed < after);
        let file_ok = self.healthy_file.is_none() || healthy_file_exists;
        started && not_yet_wedged && file_ok
    }
}

/// The policy bound to the moment the server started.
#[derive(Debug, Clone)]
pub struct Health {
    policy: HealthPolicy,
    started: Instant,
}

impl Health {
    pub fn new(policy: HealthPolicy, started: Instant) -> Self {
        Self { policy, started }
    }

    /// Evaluates the policy now (one `stat` of the healthy file, if any).
    pub fn is_healthy_now(&self) -> bool {
        let file_exists = self.policy.healthy_file.as_deref().is_some_and(file_exists);
        self.policy.is_healthy(self.started.elapsed(), file_exists)
    }

    /// Spawns the monitor: publishes every change of health on the returned channel and logs it
    /// as an event (`health: healthy` / `health: unhealthy`).
    pub fn spawn_monitor(self, events: Events) -> watch::Receiver<bool> {
        let initial = self.is_healthy_now();
        events.emit(&health_event(initial));
        let (sender, receiver) = watch::channel(initial);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(MONITOR_PERIOD);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let healthy = self.is_healthy_now();
                let changed = sender.send_if_modified(|current| {
                    let changed = *current != healthy;
                    *current = healthy;
                    changed
                });
                if changed {
                    events.emit(&health_event(healthy));
                }
                if sender.is_closed() {
                    return;
                }
            }
        });
        receiver
    }
}

fn health_event(healthy: bool) -> String {
    format!("health: {}", if healthy { "healthy" } else { "unhealthy" })
}

fn file_exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn is_healthy_cases() {
        let file = Some(PathBuf::from("/tmp/healthy"));
        // (name, policy, elapsed, file exists, want healthy)
        let cases: Vec<(&str, HealthPolicy, Duration, bool, bool)> = vec![
            (
                "no conditions",
                HealthPolicy::default(),
                secs(0),
                false,
                true,
            ),
            (
                "healthy_after: before",
                HealthPolicy {
                    healthy_after: Some(secs(5)),
                    ..Default::default()
                },
                Duration::from_millis(4999),
                false,
                false,
            ),
            (
                "healthy_after: exactly at",
                HealthPolicy {
                    healthy_after: Some(secs(5)),
                    ..Default::default()
                },
                secs(5),
                false,
                true,
            ),
            (
                "unhealthy_after: before",
                HealthPolicy {
                    unhealthy_after: Some(secs(10)),
                    ..Default::default()
                },
                Duration::from_millis(9999),
                false,
                true,
            ),
            (
                "unhealthy_after: exactly at",
                HealthPolicy {
                    unhealthy_after: Some(secs(10)),
                    ..Default::default()
                },
                secs(10),
                false,
                false,
            ),
            (
                "window: inside",
                HealthPolicy {
                    healthy_after: Some(secs(2)),
                    unhealthy_after: Some(secs(10)),
                    ..Default::default()
                },
                secs(5),
                false,
                true,
            ),
            (
                "window: after",
                HealthPolicy {
                    healthy_after: Some(secs(2)),
                    unhealthy_after: Some(secs(10)),
                    ..Default::default()
                },
                secs(11),
                false,
                false,
            ),
            (
                "file: present",
                HealthPolicy {
                    healthy_file: file.clone(),
                    ..Default::default()
                },
                secs(0),
                true,
                true,
            ),
            (
                "file: missing",
                HealthPolicy {
                    healthy_file: file.clone(),
                    ..Default::default()
                },
                secs(0),
                false,
                false,
            ),
            (
                "file present but not started yet",
                HealthPolicy {
                    healthy_after: Some(secs(3)),
                    healthy_file: file.clone(),
                    ..Default::default()
                },
                secs(1),
                true,
                false,
            ),
            (
                "file missing after start",
                HealthPolicy {
                    healthy_after: Some(secs(3)),
                    healthy_file: file,
                    ..Default::default()
                },
                secs(4),
                false,
                false,
            ),
        ];
        for (name, policy, elapsed, file_exists, want) in cases {
            assert_eq!(
                policy.is_healthy(elapsed, file_exists),
                want,
                "case {name:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn is_healthy_now_follows_the_file_and_the_clock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("healthy");
        let health = Health::new(
            HealthPolicy {
                healthy_after: Some(secs(2)),
                healthy_file: Some(path.clone()),
                ..Default::default()
            },
            Instant::now(),
        );
        std::fs::write(&path, "").unwrap();
        assert!(!health.is_healthy_now(), "not started yet");
        tokio::time::advance(secs(2)).await;
        assert!(health.is_healthy_now(), "started, file present");
        std::fs::remove_file(&path).unwrap();
        assert!(!health.is_healthy_now(), "file removed");
    }

    #[tokio::test(start_paused = true)]
    async fn monitor_publishes_changes() {
        let health = Health::new(
            HealthPolicy {
                unhealthy_after: Some(secs(1)),
                ..Default::default()
            },
            Instant::now(),
        );
        let mut receiver = health.spawn_monitor(Events::stdout_only());
        assert!(*receiver.borrow_and_update());
        tokio::time::timeout(secs(5), receiver.changed())
            .await
            .unwrap()
            .unwrap();
        assert!(!*receiver.borrow());
    }
}
