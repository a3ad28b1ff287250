//! `pods/exec`, `pods/attach` and `pods/portforward`: what the API server's connect subresources
//! do (`pkg/registry/core/pod/rest/subresources.go`, `ExecLocation`/`AttachLocation`/
//! `PortForwardLocation` in `pkg/registry/core/pod/strategy.go`) and how
//! `k8s.io/apimachinery/pkg/util/proxy/upgradeaware.go` relays the upgrade to the node agent.
//!
//! The API server does not validate these options itself (no command or stream checks): the
//! node agent answers bad ones (e.g. 400 `you must specify at least 1 of stdin, stdout, stderr`)
//! and that answer is echoed back. WebSocket upgrades are refused with a 400: the real server
//! translates them to SPDY since 1.30, the fixture does not, and kubectl falls back to SPDY on
//! any non-101 answer.
//!
//! The decisions are pure functions; `proxy_upgrade` is the one effect.

use std::sync::Arc;

use axum::body::Body;
use axum::http::header::{
    AUTHORIZATION, CONNECTION, CONTENT_LENGTH, HOST, TRANSFER_ENCODING, UPGRADE,
};
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use axum::response::Response;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::podlog::{encode_query, join_host_port, query_bool, KubeletClientConfig};

/// Largest body of a non-101 answer echoed from the node agent.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Which connect subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Exec,
    Attach,
    PortForward,
}

impl StreamKind {
    /// The subresource name in the API path.
    pub fn from_subresource(sub: &str) -> Option<StreamKind> {
        match sub {
            "exec" => Some(StreamKind::Exec),
            "attach" => Some(StreamKind::Attach),
            "portforward" => Some(StreamKind::PortForward),
            _ => None,
        }
    }

    /// The first path segment on the node agent.
    fn kubelet_segment(self) -> &'static str {
        match self {
            StreamKind::Exec => "exec",
            StreamKind::Attach => "attach",
            StreamKind::PortForward => "portForward",
        }
    }

    /// Exec and attach name a container; port-forward is for the whole pod.
    pub fn has_container(self) -> bool {
        self != StreamKind::PortForward
    }
}

/// `PodExecOptions`, `PodAttachOptions` or `PodPortForwardOptions` as decoded from the query
/// (fields a kind does not have stay at their defaults).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamOptions {
    pub container: Option<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
    pub command: Vec<String>,
    pub ports: Vec<i32>,
}

/// Decodes the query of a connect request; unknown parameters are ignored, as the API server's
/// parameter codec does. Only a port that is not an int32 is an error (400).
pub fn parse_stream_options(
    kind: StreamKind,
    query: &[(String, String)],
) -> Result<StreamOptions, ApiError> {
    let mut opts = StreamOptions::default();
    for (name, value) in query {
        match (kind, name.as_str()) {
            (StreamKind::PortForward, "ports") => {
                let port = value.parse::<i32>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "ports: strconv.ParseInt: parsing {value:?}: invalid syntax"
                    ))
                })?;
                opts.ports.push(port);
            }
            (StreamKind::PortForward, _) => {}
            (_, "container") if !value.is_empty() => opts.container = Some(value.clone()),
            (_, "stdin") => opts.stdin = query_bool(value),
            (_, "stdout") => opts.stdout = query_bool(value),
            (_, "stderr") => opts.stderr = query_bool(value),
            (_, "tty") => opts.tty = query_bool(value),
            (StreamKind::Exec, "command") => opts.command.push(value.clone()),
            _ => {}
        }
    }
    Ok(opts)
}

/// `streamParams` then `url.Values.Encode()`: sorted by key, booleans as `1`, `command` repeated
/// in order, port-forward ports joined with commas under `port` (`api.PortHeader`). The
/// container is in the path, not the query.
pub fn kubelet_stream_query(kind: StreamKind, opts: &StreamOptions) -> String {
    let mut params: Vec<(&str, String)> = Vec::new();
    match kind {
        StreamKind::Exec | StreamKind::Attach => {
            for (name, set) in [
                ("stdin", opts.stdin),
                ("stdout", opts.stdout),
                ("stderr", opts.stderr),
                ("tty", opts.tty),
            ] {
                if set {
                    params.push((name, "1".into()));
                }
            }
            if kind == StreamKind::Exec {
                params.extend(opts.command.iter().map(|c| ("command", c.clone())));
            }
        }
        StreamKind::PortForward => {
            if !opts.ports.is_empty() {
                let ports: Vec<String> = opts.ports.iter().map(i32::to_string).collect();
                params.push(("port", ports.join(",")));
            }
        }
    }
    encode_query(params)
}

/// The origin-form target on the node agent: `/exec/{ns}/{pod}/{container}?...`,
/// `/attach/...`, `/portForward/{ns}/{pod}?...`.
pub fn kubelet_stream_target(
    kind: StreamKind,
    namespace: &str,
    pod: &str,
    container: &str,
    opts: &StreamOptions,
) -> String {
    let mut target = format!("/{}/{namespace}/{pod}", kind.kubelet_segment());
    if kind.has_container() {
        target.push('/');
        target.push_str(container);
    }
    let query = kubelet_stream_query(kind, opts);
    if !query.is_empty() {
        target.push('?');
        target.push_str(&query);
    }
    target
}

fn header_tokens<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = String> + 'a {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
}

/// `httpstream.IsUpgradeRequest`: a `Connection` header with the `upgrade` token.
pub fn is_upgrade_request(headers: &HeaderMap) -> bool {
    header_tokens(headers, "connection").any(|t| t == "upgrade")
}

/// `wsstream.IsWebSocketRequest`: an upgrade request to `websocket`.
pub fn is_websocket_request(headers: &HeaderMap) -> bool {
    is_upgrade_request(headers) && header_tokens(headers, "upgrade").any(|t| t == "websocket")
}

/// The fixture's answer to a WebSocket upgrade: a 400 that client-go turns into an
/// `UpgradeFailureError`, on which kubectl retries over SPDY.
pub fn websocket_rejected() -> ApiError {
    ApiError::bad_request(
        "the fixture does not translate WebSocket streams to SPDY: use an SPDY/3.1 upgrade",
    )
}

/// What goes to the node agent: the client's headers (the upgrade ones included: `Connection`,
/// `Upgrade`, every `X-Stream-Protocol-Version`) without `Authorization` (the API server's
/// authentication filter removes it), `Host` (the node agent's) and body framing (no body).
pub fn forwarded_headers(headers: &HeaderMap) -> HeaderMap {
    let mut out = headers.clone();
    for name in [AUTHORIZATION, HOST, CONTENT_LENGTH, TRANSFER_ENCODING] {
        out.remove(name);
    }
    out
}

/// Accepts any serving certificate: the real server's behaviour without
/// `--kubelet-certificate-authority`.
#[derive(Debug)]
struct AcceptAnyServerCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
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
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The TLS client towards node agents: the kubelet client identity, and verification with the
/// configured CA only.
pub fn tls_client_config(config: &KubeletClientConfig) -> Result<rustls::ClientConfig, ApiError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ApiError::internal(format!("kubelet client TLS: {e}")))?;
    let builder = match &config.ca_pem {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca) {
                let cert = cert.map_err(|e| {
                    ApiError::internal(format!("kubelet certificate authority: {e}"))
                })?;
                roots.add(cert).map_err(|e| {
                    ApiError::internal(format!("kubelet certificate authority: {e}"))
                })?;
            }
            builder.with_root_certificates(roots)
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert(provider))),
    };
    match &config.identity_pem {
        Some(pem) => {
            let certs = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ApiError::internal(format!("kubelet client certificate: {e}")))?;
            let key = PrivateKeyDer::from_pem_slice(pem)
                .map_err(|e| ApiError::internal(format!("kubelet client key: {e}")))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| ApiError::internal(format!("kubelet client certificate: {e}")))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// Where the upgrade goes and what it carries.
pub struct UpgradeTarget<'a> {
    pub address: &'a str,
    pub port: i64,
    /// Origin-form path and query on the node agent.
    pub target: String,
    pub method: Method,
    /// The client's headers, already through `forwarded_headers`.
    pub headers: HeaderMap,
}

/// `dial` failures become what `UpgradeAwareHandler` answers through the error responder: a
/// 500 without reason, the Go error's text.
fn dial_error(err: impl std::fmt::Display) -> ApiError {
    ApiError::unknown(500, format!("error dialing backend: {err}"))
}

/// Sends the upgrade request to the node agent over TLS. On 101 the answer to the client is a
/// 101 with the node agent's headers, and a task relays bytes between the two upgraded
/// connections until either side closes (or the fixture stops). A 4xx/5xx answer is echoed as
/// is (status, headers, body) on a connection that then closes; any other status is a 500
/// `invalid upgrade response: status code N`.
pub async fn proxy_upgrade(
    config: &KubeletClientConfig,
    upstream: UpgradeTarget<'_>,
    client_upgrade: OnUpgrade,
    shutdown: CancellationToken,
) -> Result<Response, ApiError> {
    let host = join_host_port(upstream.address, upstream.port);
    let tls = tls_client_config(config)?;
    let server_name = ServerName::try_from(upstream.address.to_string()).map_err(dial_error)?;
    let tcp = tokio::net::TcpStream::connect(host.as_str())
        .await
        .map_err(|e| dial_error(format!("dial tcp {host}: {e}")))?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(server_name, tcp)
        .await
        .map_err(dial_error)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(dial_error)?;
    tokio::spawn(async move {
        // Ends when the node agent closes; errors surface on the response or the relay.
        let _ = connection.with_upgrades().await;
    });
    let mut request = Request::builder()
        .method(upstream.method)
        .uri(upstream.target.as_str())
        .body(Body::empty())
        .map_err(|e| ApiError::internal(format!("kubelet request: {e}")))?;
    *request.headers_mut() = upstream.headers;
    let host_value =
        HeaderValue::from_str(&host).map_err(|e| ApiError::internal(format!("host: {e}")))?;
    request.headers_mut().insert(HOST, host_value);
    let mut answer = sender.send_request(request).await.map_err(dial_error)?;
    let status = answer.status();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        if status.as_u16() < 400 {
            return Err(ApiError::unknown(
                500,
                format!("invalid upgrade response: status code {}", status.as_u16()),
            ));
        }
        let headers = answer.headers().clone();
        let body = axum::body::to_bytes(Body::new(answer.into_body()), MAX_ERROR_BODY)
            .await
            .unwrap_or_default();
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = status;
        for (name, value) in headers.iter() {
            if name != CONTENT_LENGTH && name != TRANSFER_ENCODING && name != CONNECTION {
                response.headers_mut().append(name, value.clone());
            }
        }
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        return Ok(response);
    }
    let backend_upgrade = hyper::upgrade::on(&mut answer);
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *response.headers_mut() = answer.headers().clone();
    if !response.headers().contains_key(UPGRADE) {
        // hyper only hands over the connection of a 101 that names the protocol.
        return Err(ApiError::unknown(
            500,
            "invalid upgrade response: no Upgrade header".to_string(),
        ));
    }
    tokio::spawn(async move {
        let (client, backend) = match tokio::join!(client_upgrade, backend_upgrade) {
            (Ok(c), Ok(b)) => (c, b),
            (c, b) => {
                tracing::debug!(client = ?c.err(), backend = ?b.err(), "upgrade relay not started");
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut backend = TokioIo::new(backend);
        tokio::select! {
            _ = shutdown.cancelled() => {}
            result = tokio::io::copy_bidirectional(&mut client, &mut backend) => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "upgrade relay ended");
                }
            }
        }
    });
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::parse_query;

    #[test]
    fn options_become_the_kubelet_target() {
        // (kind, client query, container, node agent target) or Err(message)
        let cases: &[(StreamKind, &str, &str, Result<&str, &str>)] = &[
            (
                StreamKind::Exec,
                "command=sh&command=-c&command=echo+hi%26bye&container=app&stdin=true&stdout=true&stderr=true&tty=false",
                "app",
                Ok("/exec/default/web/app?command=sh&command=-c&command=echo+hi%26bye&stderr=1&stdin=1&stdout=1"),
            ),
            (
                StreamKind::Exec,
                "stdout=1&tty=1&command=ls",
                "app",
                Ok("/exec/default/web/app?command=ls&stdout=1&tty=1"),
            ),
            // No command and no streams: forwarded; the node agent decides.
            (StreamKind::Exec, "", "app", Ok("/exec/default/web/app")),
            (
                StreamKind::Attach,
                "stdin=true&stdout=true&tty=true&command=ignored",
                "app",
                Ok("/attach/default/web/app?stdin=1&stdout=1&tty=1"),
            ),
            (
                StreamKind::PortForward,
                "ports=8080&ports=443",
                "",
                Ok("/portForward/default/web?port=8080%2C443"),
            ),
            (StreamKind::PortForward, "", "", Ok("/portForward/default/web")),
            (
                StreamKind::PortForward,
                "ports=http",
                "",
                Err("ports: strconv.ParseInt: parsing \"http\": invalid syntax"),
            ),
        ];
        for (kind, query, container, want) in cases {
            let got = parse_stream_options(*kind, &parse_query(query))
                .map(|o| kubelet_stream_target(*kind, "default", "web", container, &o));
            match (got, want) {
                (Ok(t), Ok(w)) => assert_eq!(t, *w, "{query}"),
                (Err(e), Err(w)) => {
                    assert_eq!((e.code, e.message.as_str()), (400, *w), "{query}")
                }
                (got, want) => panic!("{query}: got {got:?}, want {want:?}"),
            }
        }
        let o = parse_stream_options(StreamKind::Exec, &parse_query("container=side")).unwrap();
        assert_eq!(o.container.as_deref(), Some("side"));
    }

    #[test]
    fn upgrade_and_websocket_detection() {
        let headers = |pairs: &[(&str, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(
                    axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            h
        };
        // (headers, upgrade?, websocket?)
        let cases = [
            (headers(&[]), false, false),
            (headers(&[("Upgrade", "SPDY/3.1")]), false, false),
            (
                headers(&[("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")]),
                true,
                false,
            ),
            (
                headers(&[
                    ("Connection", "keep-alive, Upgrade"),
                    ("Upgrade", "websocket"),
                ]),
                true,
                true,
            ),
            (
                headers(&[("Connection", "upgrade"), ("Upgrade", "WebSocket")]),
                true,
                true,
            ),
        ];
        for (h, upgrade, websocket) in cases {
            assert_eq!(is_upgrade_request(&h), upgrade, "{h:?}");
            assert_eq!(is_websocket_request(&h), websocket, "{h:?}");
        }
        let forwarded = forwarded_headers(&headers(&[
            ("Connection", "Upgrade"),
            ("Upgrade", "SPDY/3.1"),
            ("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
            ("X-Stream-Protocol-Version", "channel.k8s.io"),
            ("Authorization", "Bearer t"),
            ("Host", "127.0.0.1:6443"),
            ("Content-Length", "0"),
        ]));
        let mut names: Vec<String> = forwarded.keys().map(|k| k.to_string()).collect();
        names.sort();
        assert_eq!(
            names,
            ["connection", "upgrade", "x-stream-protocol-version"]
        );
        assert_eq!(
            forwarded
                .get_all("x-stream-protocol-version")
                .iter()
                .count(),
            2
        );
    }

    #[test]
    fn tls_config_needs_valid_pem() {
        let config = KubeletClientConfig {
            identity_pem: Some(b"not pem".to_vec()),
            ca_pem: None,
        };
        let e = tls_client_config(&config).unwrap_err();
        assert_eq!(e.code, 500);
        assert!(tls_client_config(&KubeletClientConfig::default()).is_ok());
    }
}
