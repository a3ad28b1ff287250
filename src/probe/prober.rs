//! Runs one probe attempt with the right handler (`prober.probe`), retrying prober errors the
//! way the kubelet does, and says which event the attempt deserves.

use std::sync::Arc;
use std::time::Duration;

use super::http::HttpProber;
use super::spec::Handler;
use super::threshold::Outcome;
use super::{exec, grpc, tcp, Attempt, HandlerError, ProbeKind};
use super::{REASON_PROBE_WARNING, REASON_UNHEALTHY};
use crate::cri::Runtime;

/// The kubelet retries an attempt whose prober errored up to this many times at once
/// (`maxProbeRetries`).
pub const MAX_PROBE_RETRIES: usize = 3;

#[derive(Clone)]
pub struct Prober {
    runtime: Arc<dyn Runtime>,
    http: HttpProber,
}

impl Prober {
    pub fn new(runtime: Arc<dyn Runtime>) -> Self {
        Prober {
            runtime,
            http: HttpProber::new(),
        }
    }

    /// One attempt (`runProbeWithRetries`): a prober error is retried at once, up to three
    /// tries; the last answer is returned.
    pub async fn run(
        &self,
        handler: &Result<Handler, HandlerError>,
        container_id: &str,
        timeout: Duration,
    ) -> Attempt {
        let mut last = Attempt::Error(String::new());
        for _ in 0..MAX_PROBE_RETRIES {
            last = self.run_once(handler, container_id, timeout).await;
            if !matches!(last, Attempt::Error(_)) {
                break;
            }
        }
        last
    }

    async fn run_once(
        &self,
        handler: &Result<Handler, HandlerError>,
        container_id: &str,
        timeout: Duration,
    ) -> Attempt {
        match handler {
            Err(e) => Attempt::Error(e.to_string()),
            Ok(Handler::Exec { command }) => {
                exec::probe(self.runtime.as_ref(), container_id, command, timeout).await
            }
            Ok(Handler::Http(target)) => self.http.probe(target, timeout).await,
            Ok(Handler::Tcp { host, port }) => tcp::probe(host, *port, timeout).await,
            Ok(Handler::Grpc {
                host,
                port,
                service,
                tls,
            }) => grpc::probe(host, *port, service, *tls, timeout).await,
        }
    }
}

/// What the threshold state machine sees of an attempt: a warning is a success, an errored
/// attempt is thrown away.
pub fn outcome(attempt: &Attempt) -> Option<Outcome> {
    match attempt {
        Attempt::Success(_) | Attempt::Warning(_) => Some(Outcome::Success),
        Attempt::Failure(_) => Some(Outcome::Failure),
        Attempt::Error(_) => None,
    }
}

/// The event (reason, message) an attempt records, as the kubelet words it.
pub fn event_for(kind: ProbeKind, attempt: &Attempt) -> Option<(&'static str, String)> {
    match attempt {
        Attempt::Success(_) => None,
        Attempt::Warning(out) => {
            Some((REASON_PROBE_WARNING, format!("{kind} probe warning: {out}")))
        }
        Attempt::Failure(out) => Some((REASON_UNHEALTHY, format!("{kind} probe failed: {out}"))),
        Attempt::Error(err) => Some((REASON_UNHEALTHY, format!("{kind} probe errored: {err}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_and_outcome_table() {
        let cases = [
            (
                ProbeKind::Liveness,
                Attempt::Success("ok".into()),
                None,
                Some(Outcome::Success),
            ),
            (
                ProbeKind::Readiness,
                Attempt::Warning("Probe terminated redirects, Response body: moved".into()),
                Some((
                    REASON_PROBE_WARNING,
                    "Readiness probe warning: Probe terminated redirects, Response body: moved",
                )),
                Some(Outcome::Success),
            ),
            (
                ProbeKind::Liveness,
                Attempt::Failure("HTTP probe failed with statuscode: 500".into()),
                Some((
                    REASON_UNHEALTHY,
                    "Liveness probe failed: HTTP probe failed with statuscode: 500",
                )),
                Some(Outcome::Failure),
            ),
            (
                ProbeKind::Startup,
                Attempt::Error("port \"http\" not found".into()),
                Some((
                    REASON_UNHEALTHY,
                    "Startup probe errored: port \"http\" not found",
                )),
                None,
            ),
        ];
        for (kind, attempt, event, want_outcome) in cases {
            assert_eq!(
                event_for(kind, &attempt),
                event.map(|(r, m)| (r, m.to_string())),
                "{attempt:?}"
            );
            assert_eq!(outcome(&attempt), want_outcome, "{attempt:?}");
        }
    }
}
