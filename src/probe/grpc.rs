//! The `grpc` handler (`pkg/probe/grpc`): `grpc.health.v1.Health/Check` with the probe's
//! service name, plaintext or (`mode: TLS`) over TLS without certificate verification, as the
//! kubelet's. SERVING is a success; anything else, and every error, is a failure (the kubelet
//! mimics `grpc_health_probe`).

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

/// Checks `service` at `host:port` within `timeout` (dial and call together); `tls` dials TLS
/// (ALPN `h2`) and accepts any certificate, as the kubelet's `mode: TLS`.
pub async fn probe(host: &str, port: u16, service: &str, tls: bool, timeout: Duration) -> Attempt {
    let addr = join_host_port(host, port);
    let deadline = crate::clock::saturating_deadline(Instant::now(), timeout);
    let channel = match connect(&addr, tls, deadline).await {
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
async fn connect(addr: &str, tls: bool, deadline: Instant) -> Result<Channel, ConnectError> {
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
        let connected = if tls {
            let connector = tls_connector(addr.to_string());
            tokio::time::timeout(remaining, attempt.connect_with_connector(connector)).await
        } else {
            tokio::time::timeout(remaining, attempt.connect()).await
        };
        match connected {
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

/// Dials `addr` over TCP, then TLS with ALPN `h2` and no certificate verification (the
/// kubelet's `credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})`).
fn tls_connector(
    addr: String,
) -> impl tower::Service<
    tonic::transport::Uri,
    Response = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
    Error = std::io::Error,
    Future = impl std::future::Future<
        Output = std::io::Result<
            hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
        >,
    > + Send,
> + Clone
       + Send
       + 'static {
    tower::service_fn(move |_uri: tonic::transport::Uri| {
        let addr = addr.clone();
        async move {
            let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(std::io::Error::other)?
                .dangerous()
                .with_custom_certificate_verifier(std::sync::Arc::new(AnyCertificate(provider)))
                .with_no_client_auth();
            config.alpn_protocols = vec![b"h2".to_vec()];
            let tcp = tokio::net::TcpStream::connect(&addr).await?;
            // The server name only goes into SNI; with verification off it is not checked.
            let host = addr
                .rsplit_once(':')
                .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
                .unwrap_or(&addr);
            let name = rustls_pki_types::ServerName::try_from(host.to_string())
                .map_err(std::io::Error::other)?;
            let stream = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
                .connect(name, tcp)
                .await?;
            Ok(hyper_util::rt::TokioIo::new(stream))
        }
    })
}

/// Accepts any server certificate (`InsecureSkipVerify`); the handshake's signatures are still
/// checked, so the session is encrypted to whoever holds the key it presented.
#[derive(Debug)]
struct AnyCertificate(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
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
