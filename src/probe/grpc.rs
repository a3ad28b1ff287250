//! The `grpc` handler (`pkg/probe/grpc`): `grpc.health.v1.Health/Check` with the probe's
//! service name, plaintext. SERVING is a success; anything else, and every error, is a
//! failure (the kubelet mimics `grpc_health_probe`).

use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::exec::grpc_status_text;
use super::spec::{join_host_port, PROBE_USER_AGENT};
use super::Attempt;
use crate::config::format_duration;

/// How long to wait between connection attempts (grpc-go's initial reconnect backoff).
const RECONNECT_BACKOFF: Duration = Duration::from_secs(1);

/// Checks `service` at `host:port` within `timeout` (dial and call together).
pub async fn probe(host: &str, port: u16, service: &str, timeout: Duration) -> Attempt {
    let addr = join_host_port(host, port);
    let deadline = crate::clock::saturating_deadline(Instant::now(), timeout);
    let channel = match connect(&addr, deadline).await {
        Ok(c) => c,
        Err(ConnectError::Timeout) => {
            return Attempt::Failure(format!(
                "timeout: failed to connect service {addr:?} within {}: context deadline exceeded",
                format_duration(timeout)
            ))
        }
        Err(ConnectError::Other(e)) => {
            return Attempt::Failure(format!("error: failed to connect service at {addr:?}: {e}"))
        }
    };
    let mut client = HealthClient::new(channel);
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: service.to_string(),
    });
    let remaining = deadline.saturating_duration_since(Instant::now());
    request.set_timeout(remaining);
    let response = tokio::time::timeout(remaining, client.check(request)).await;
    match response {
        Err(_) => Attempt::Failure(rpc_timeout(timeout)),
        Ok(Err(status)) => Attempt::Failure(match status.code() {
            tonic::Code::Unimplemented => format!(
                "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                status.message()
            ),
            tonic::Code::DeadlineExceeded => rpc_timeout(timeout),
            _ => format!(
                "error: health rpc probe failed: {}",
                grpc_status_text(&status)
            ),
        }),
        Ok(Ok(resp)) => serving_verdict(resp.into_inner().status),
    }
}

/// SERVING is healthy; any other status is named as grpc-go names it.
pub fn serving_verdict(status: i32) -> Attempt {
    match ServingStatus::try_from(status) {
        Ok(ServingStatus::Serving) => Attempt::Success("service healthy".to_string()),
        Ok(other) => Attempt::Failure(format!(
            "service unhealthy (responded with {:?})",
            other.as_str_name()
        )),
        Err(_) => Attempt::Failure(format!("service unhealthy (responded with \"{status}\")")),
    }
}

fn rpc_timeout(timeout: Duration) -> String {
    format!(
        "timeout: health rpc did not complete within {}",
        format_duration(timeout)
    )
}

enum ConnectError {
    Timeout,
    Other(String),
}

/// Connects like grpc-go's blocking dial: a refused connection is retried until the deadline,
/// so a port nobody listens on reports the timeout, as the kubelet's probe does.
async fn connect(addr: &str, deadline: Instant) -> Result<Channel, ConnectError> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| ConnectError::Other(e.to_string()))?
        .user_agent(PROBE_USER_AGENT)
        .map_err(|e| ConnectError::Other(e.to_string()))?;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(ConnectError::Timeout);
        }
        let attempt = endpoint.clone().connect_timeout(remaining);
        match tokio::time::timeout(remaining, attempt.connect()).await {
            Ok(Ok(channel)) => return Ok(channel),
            Ok(Err(e)) => {
                tracing::trace!(addr, error = %e, "gRPC probe connection failed, retrying");
                let wait =
                    RECONNECT_BACKOFF.min(deadline.saturating_duration_since(Instant::now()));
                tokio::time::sleep(wait).await;
            }
            Err(_) => return Err(ConnectError::Timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_verdict_table() {
        let cases = [
            (1, Attempt::Success("service healthy".into())),
            (
                2,
                Attempt::Failure("service unhealthy (responded with \"NOT_SERVING\")".into()),
            ),
            (
                0,
                Attempt::Failure("service unhealthy (responded with \"UNKNOWN\")".into()),
            ),
            (
                3,
                Attempt::Failure("service unhealthy (responded with \"SERVICE_UNKNOWN\")".into()),
            ),
            (
                9,
                Attempt::Failure("service unhealthy (responded with \"9\")".into()),
            ),
        ];
        for (status, want) in cases {
            assert_eq!(serving_verdict(status), want, "{status}");
        }
    }
}
