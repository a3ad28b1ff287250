//! The API server sink of the event recorder (cluster mode): client-go's `recordToSink`.
//!
//! Every event the recorder accepts (already correlated: aggregated, counted, spam-filtered) is
//! written to the API: created when its `count` is 1, patched (`count`, `lastTimestamp`,
//! `message`) when it is a repeat, created after all if the patch finds no event (it expired or
//! its creation was lost). The sink runs in its own task on its own subscription, so nodelet
//! never waits on it: a sink far behind loses the oldest events (counted in
//! [`EventSinkStats::lost`]) instead of slowing the recorder. A write the server refuses is
//! dropped at once (it would be refused again); one that cannot reach the server is retried
//! [`EventSinkOptions::max_attempts`] times, then dropped with an error log.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// client-go's `maxTriesPerEvent`.
pub const MAX_ATTEMPTS: u32 = 12;
/// client-go's `defaultSleepDuration` between attempts.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSinkOptions {
    /// Attempts per event while the API server cannot be reached.
    pub max_attempts: u32,
    /// Wait between attempts (the first wait is a random part of it, so that nodes do not all
    /// retry at the same instant after an API server outage).
    pub retry_interval: Duration,
    /// An attempt without an answer after this has failed.
    pub request_timeout: Duration,
}

impl Default for EventSinkOptions {
    fn default() -> Self {
        EventSinkOptions {
            max_attempts: MAX_ATTEMPTS,
            retry_interval: RETRY_INTERVAL,
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// What the sink did, for metrics and tests.
#[derive(Debug, Default)]
pub struct EventSinkStats {
    written: AtomicU64,
    rejected: AtomicU64,
    dropped: AtomicU64,
    lost: AtomicU64,
}

impl EventSinkStats {
    /// Events created or patched in the API.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }
    /// Events the API server refused (invalid, namespace terminating, already exists).
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }
    /// Events given up after `max_attempts` failed attempts to reach the API server.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
    /// Events the sink never saw because it fell too far behind the recorder.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

/// The outcome of one attempt to write one event.
#[derive(Debug)]
enum Attempt {
    Written,
    /// The server answered with an error: retrying would get the same answer.
    Rejected(kube::Error),
    /// No answer (transport error, timeout): worth another attempt.
    Unreachable(String),
}

pub struct ApiEventSink {
    client: kube::Client,
    options: EventSinkOptions,
    stats: Arc<EventSinkStats>,
}

fn event_key(event: &Event) -> String {
    format!(
        "{}/{}",
        event.metadata.namespace.as_deref().unwrap_or_default(),
        event.metadata.name.as_deref().unwrap_or_default()
    )
}

/// A fraction of `interval` that differs between events (client-go randomizes the first wait).
fn first_wait(event: &Event, interval: Duration) -> Duration {
    let mut hasher = DefaultHasher::new();
    event.metadata.name.hash(&mut hasher);
    let permille = u32::try_from(hasher.finish() % 1000).unwrap_or(0);
    interval * permille / 1000
}

impl ApiEventSink {
    pub fn new(client: kube::Client, options: EventSinkOptions) -> Self {
        ApiEventSink {
            client,
            options,
            stats: Arc::new(EventSinkStats::default()),
        }
    }

    pub fn stats(&self) -> Arc<EventSinkStats> {
        self.stats.clone()
    }

    /// Writes every event from `events` (an [`super::EventRecorder::subscribe`] receiver) until
    /// `cancel` fires or the recorder is gone.
    pub async fn run(self, mut events: broadcast::Receiver<Event>, cancel: CancellationToken) {
        loop {
            let event = tokio::select! {
                _ = cancel.cancelled() => return,
                received = events.recv() => match received {
                    Ok(event) => event,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        self.stats.lost.fetch_add(missed, Ordering::Relaxed);
                        tracing::warn!(missed, "event sink fell behind; events lost");
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = self.write_with_retries(&event) => {}
            }
        }
    }

    async fn write_with_retries(&self, event: &Event) {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.write(event).await {
                Attempt::Written => {
                    self.stats.written.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Attempt::Rejected(err) => {
                    self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(event = %event_key(event), reason = ?event.reason, error = %err, "server rejected event (will not retry)");
                    return;
                }
                Attempt::Unreachable(err) if attempts >= self.options.max_attempts => {
                    self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(event = %event_key(event), reason = ?event.reason, attempts, error = %err, "unable to write event (retry limit exceeded); dropped");
                    return;
                }
                Attempt::Unreachable(err) => {
                    let wait = if attempts == 1 {
                        first_wait(event, self.options.retry_interval)
                    } else {
                        self.options.retry_interval
                    };
                    tracing::debug!(event = %event_key(event), attempts, error = %err, retry_in = ?wait, "unable to write event; will retry");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// client-go's `recordEvent`: patch a repeat, create a new one (or a repeat whose event is
    /// gone).
    async fn write(&self, event: &Event) -> Attempt {
        let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let name = event.metadata.name.clone().unwrap_or_default();
        if event.count.unwrap_or(1) > 1 {
            let patch = json!({
                "count": event.count,
                "lastTimestamp": event.last_timestamp,
                "message": event.message,
            });
            let patched = self
                .timed(api.patch(&name, &PatchParams::default(), &Patch::Strategic(patch)))
                .await;
            match patched {
                Err(Attempt::Rejected(kube::Error::Api(status))) if status.is_not_found() => {}
                Err(attempt) => return attempt,
                Ok(_) => return Attempt::Written,
            }
        }
        let mut new = event.clone();
        new.metadata.resource_version = None;
        match self.timed(api.create(&PostParams::default(), &new)).await {
            Ok(_) => Attempt::Written,
            Err(attempt) => attempt,
        }
    }

    async fn timed<T>(
        &self,
        call: impl std::future::Future<Output = kube::Result<T>>,
    ) -> Result<T, Attempt> {
        match tokio::time::timeout(self.options.request_timeout, call).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(err @ kube::Error::Api(_))) => Err(Attempt::Rejected(err)),
            Ok(Err(err)) => Err(Attempt::Unreachable(err.to_string())),
            Err(_) => Err(Attempt::Unreachable(format!(
                "no answer within {:?}",
                self.options.request_timeout
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn event(name: &str) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn first_wait_is_a_part_of_the_interval_that_varies() {
        let interval = Duration::from_secs(10);
        let waits: Vec<Duration> = ["a.1", "b.2", "c.3", "d.4", "e.5"]
            .iter()
            .map(|n| first_wait(&event(n), interval))
            .collect();
        assert!(waits.iter().all(|w| *w < interval), "{waits:?}");
        assert!(
            waits.iter().any(|w| *w != waits[0]),
            "not all the same: {waits:?}"
        );
        assert_eq!(first_wait(&event("a.1"), interval), waits[0], "stable");
    }
}
