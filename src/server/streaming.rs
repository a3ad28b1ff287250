//! `kubectl exec`, `attach` and `port-forward` on the kubelet API: `/exec`, `/attach` and
//! `/portForward`, as the kubelet serves them. The request's options become a CRI
//! `Exec`/`Attach`/`PortForward` call, which answers with a URL on the runtime's streaming
//! server; the client's upgrade request (SPDY or WebSocket) is then relayed to that URL and, once
//! the runtime switched protocols, bytes are copied both ways — the kubelet's `proxyStream`.
//! The protocol itself (SPDY streams, remotecommand channels) is spoken by the client and the
//! runtime; nodelet only checks, chooses the container, and relays.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::cri::{api, labels, Runtime, StreamingRuntime};
use crate::places::{Limits, Owner, Permit, Places};

/// What the streaming endpoints need.
#[derive(Clone)]
pub struct StreamingState {
    pub runtime: Arc<dyn Runtime>,
    pub streaming: Arc<dyn StreamingRuntime>,
    /// nodelet's pods with their statuses (`StatusManager::pods`).
    pub pods: Arc<dyn Fn() -> Vec<Arc<Pod>> + Send + Sync>,
    /// `streamingConnectionIdleTimeout`: a relayed stream with no byte either way for this
    /// long is closed; zero: never.
    pub idle_timeout: Duration,
    /// The sessions relayed now (exec, attach and port-forward together), against
    /// [`MAX_SESSIONS`] on the node and a share of it per namespace and pod.
    pub sessions: Places,
}

/// Sessions relayed at once. Each holds two connections, a task and its copy buffers (tens of
/// KiB); the runtime's streaming server keeps its own cap (1000 requests in flight in
/// containerd's, as in the kubelet's library). One namespace may hold a quarter of them and
/// one pod an eighth ([`Limits::shared`]).
pub const MAX_SESSIONS: usize = 256;

/// The places for sessions a node serves.
pub fn session_places() -> Places {
    Places::new(Limits::shared(MAX_SESSIONS))
}

/// The refusal of a session past a cap: what the kubelet answers when the streaming server's
/// requests in flight are at their cap (`streaming.WriteError` of `ResourceExhausted`): 429,
/// `Retry-After` of the cache's TTL, the gRPC error's text.
pub const TOO_MANY_SESSIONS: &str =
    "rpc error: code = ResourceExhausted desc = maximum number of in-flight requests exceeded";

/// The routes, both with and without the pod UID in the path, as the kubelet has them.
pub fn streaming_router(state: StreamingState) -> Router {
    Router::new()
        .route("/exec/{namespace}/{pod}/{container}", any(exec))
        .route("/exec/{namespace}/{pod}/{uid}/{container}", any(exec))
        .route("/attach/{namespace}/{pod}/{container}", any(attach))
        .route("/attach/{namespace}/{pod}/{uid}/{container}", any(attach))
        .route("/portForward/{namespace}/{pod}", any(port_forward))
        .route("/portForward/{namespace}/{pod}/{uid}", any(port_forward))
        .with_state(state)
}

/// A refusal before any stream exists: status and text, as the kubelet writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRefusal {
    pub code: StatusCode,
    pub message: String,
    /// `Retry-After` in seconds, for a refusal that says when to come back.
    pub retry_after: Option<u32>,
}

impl StreamRefusal {
    fn new(code: StatusCode, message: impl Into<String>) -> Self {
        StreamRefusal {
            code,
            message: message.into(),
            retry_after: None,
        }
    }
}

impl IntoResponse for StreamRefusal {
    fn into_response(self) -> Response {
        let mut response = (
            self.code,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            self.message,
        )
            .into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
        }
        response
    }
}

/// The stream options of `/exec` and `/attach` (the kubelet's `remotecommand.NewOptions`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamOptions {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// Decodes the query: `command` repeated, the streams on only as `1` (as the kubelet reads
/// them), at least one stream, and no separate stderr with a TTY (a terminal has one output).
pub fn stream_options(query: &str) -> Result<StreamOptions, String> {
    let mut options = StreamOptions::default();
    for (key, value) in crate::query::form_pairs(query) {
        match key.as_str() {
            "command" => options.command.push(value),
            "input" | "stdin" => options.stdin = value == "1",
            "output" | "stdout" => options.stdout = value == "1",
            "error" | "stderr" => options.stderr = value == "1",
            "tty" => options.tty = value == "1",
            _ => {}
        }
    }
    if !options.stdin && !options.stdout && !options.stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    if options.tty && options.stderr {
        options.stderr = false;
    }
    Ok(options)
}

/// The pod named in the path (and with this UID when the path has one).
fn find_pod(
    state: &StreamingState,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<Arc<Pod>, StreamRefusal> {
    (state.pods)()
        .into_iter()
        .find(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && p.metadata.name.as_deref() == Some(name)
                && uid.is_none_or(|u| p.metadata.uid.as_deref() == Some(u))
        })
        .ok_or_else(|| StreamRefusal::new(StatusCode::NOT_FOUND, "pod does not exist"))
}

/// The runtime ID of the container's current instance, from the pod's status (regular, init
/// or ephemeral): the kubelet's `findContainer`.
pub fn running_container_id(pod: &Pod, container: &str) -> Option<String> {
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .chain(status.ephemeral_container_statuses.iter().flatten())
        .find(|s| s.name == container)
        .and_then(|s| s.container_id.clone())
        .filter(|id| !id.is_empty())
        .map(|id| match id.split_once("://") {
            Some((_, id)) => id.to_string(),
            None => id,
        })
}

fn container_id(pod: &Pod, container: &str) -> Result<String, StreamRefusal> {
    running_container_id(pod, container).ok_or_else(|| {
        StreamRefusal::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("container not found ({container:?})"),
        )
    })
}

/// A CRI error as the kubelet's `streaming.WriteError` answers it: the gRPC code mapped to
/// HTTP, the message as text.
fn runtime_refusal(error: crate::cri::Error) -> StreamRefusal {
    let code = match &error {
        crate::cri::Error::Call { status, .. } => match status.code() {
            tonic::Code::NotFound => StatusCode::NOT_FOUND,
            tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
            tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            tonic::Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        },
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    StreamRefusal::new(code, error.to_string())
}

/// Path parameters: `namespace`, `pod`, `container` (not for port-forward) and, in the
/// longer form of each route, `uid`.
type Params = Path<HashMap<String, String>>;

fn param<'a>(params: &'a HashMap<String, String>, name: &str) -> &'a str {
    params.get(name).map_or("", String::as_str)
}

async fn exec(
    State(state): State<StreamingState>,
    Path(params): Params,
    request: Request,
) -> Response {
    remote_command(state, Kind::Exec, &params, request).await
}

async fn attach(
    State(state): State<StreamingState>,
    Path(params): Params,
    request: Request,
) -> Response {
    remote_command(state, Kind::Attach, &params, request).await
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Exec,
    Attach,
}

async fn remote_command(
    state: StreamingState,
    kind: Kind,
    params: &HashMap<String, String>,
    request: Request,
) -> Response {
    let (namespace, pod_name, container) = (
        param(params, "namespace"),
        param(params, "pod"),
        param(params, "container"),
    );
    let uid = params.get("uid").map(String::as_str);
    // Not borrowed across the awaits below: a request body is not `Sync`.
    let query = request.uri().query().unwrap_or("").to_string();
    let result = async {
        let options =
            stream_options(&query).map_err(|m| StreamRefusal::new(StatusCode::BAD_REQUEST, m))?;
        let pod = find_pod(&state, namespace, pod_name, uid)?;
        let id = container_id(&pod, container)?;
        let permit = take_place(&state, &pod)?;
        let url = match kind {
            Kind::Exec => state
                .streaming
                .exec(api::ExecRequest {
                    container_id: id,
                    cmd: options.command,
                    tty: options.tty,
                    stdin: options.stdin,
                    stdout: options.stdout,
                    stderr: options.stderr,
                })
                .await
                .map_err(runtime_refusal)?,
            Kind::Attach => state
                .streaming
                .attach(api::AttachRequest {
                    container_id: id,
                    stdin: options.stdin,
                    tty: options.tty,
                    stdout: options.stdout,
                    stderr: options.stderr,
                })
                .await
                .map_err(runtime_refusal)?,
        };
        Ok::<_, StreamRefusal>((url, permit))
    }
    .await;
    match result {
        Ok((url, permit)) => relay_upgrade(request, &url, state.idle_timeout, permit).await,
        Err(refusal) => refusal.into_response(),
    }
}

async fn port_forward(
    State(state): State<StreamingState>,
    Path(params): Params,
    request: Request,
) -> Response {
    let uid = params.get("uid").map(String::as_str);
    forward(
        state,
        param(&params, "namespace"),
        param(&params, "pod"),
        uid,
        request,
    )
    .await
}

/// `/portForward`: the pod's ready sandbox; the ports travel inside the stream (SPDY stream
/// headers), so the CRI call names none, as the kubelet's.
async fn forward(
    state: StreamingState,
    namespace: &str,
    pod_name: &str,
    uid: Option<&str>,
    request: Request,
) -> Response {
    let result = async {
        let pod = find_pod(&state, namespace, pod_name, uid)?;
        let permit = take_place(&state, &pod)?;
        let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
        let sandboxes = state
            .runtime
            .list_pod_sandbox(Some(api::PodSandboxFilter {
                state: Some(api::PodSandboxStateValue {
                    state: api::PodSandboxState::SandboxReady as i32,
                }),
                label_selector: [(labels::POD_UID.to_string(), pod_uid)]
                    .into_iter()
                    .collect(),
                ..Default::default()
            }))
            .await
            .map_err(runtime_refusal)?;
        let sandbox = sandboxes
            .into_iter()
            .max_by_key(|s| s.created_at)
            .ok_or_else(|| {
                StreamRefusal::new(StatusCode::INTERNAL_SERVER_ERROR, "pod not found")
            })?;
        let url = state
            .streaming
            .port_forward(api::PortForwardRequest {
                pod_sandbox_id: sandbox.id,
                port: Vec::new(),
            })
            .await
            .map_err(runtime_refusal)?;
        Ok::<_, StreamRefusal>((url, permit))
    }
    .await;
    match result {
        Ok((url, permit)) => relay_upgrade(request, &url, state.idle_timeout, permit).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// A session's place, taken before the runtime is asked for a URL (a refused session costs the
/// runtime nothing).
fn take_place(state: &StreamingState, pod: &Pod) -> Result<Permit, StreamRefusal> {
    let owner = Owner {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
    };
    state.sessions.admit(&owner).map_err(|cap| {
        tracing::warn!(
            ?cap,
            namespace = %owner.namespace,
            pod.uid = %owner.pod_uid,
            "refused a stream session: too many are relayed"
        );
        StreamRefusal {
            code: StatusCode::TOO_MANY_REQUESTS,
            message: TOO_MANY_SESSIONS.to_string(),
            retry_after: Some(60),
        }
    })
}

/// Headers that belong to one hop and are not relayed (besides the upgrade pair, which is).
fn hop_by_hop(name: &header::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "authorization"
            | "host"
    )
}

/// Relays an upgrade request to the runtime's streaming URL (plain HTTP on loopback for
/// containerd) and, on `101 Switching Protocols`, joins the two connections, holding the
/// session's `permit` until they close. Any other answer
/// goes back to the client as it came. The joined streams are closed after `idle_timeout`
/// without a byte either way (zero: never), as the kubelet's streaming server closes an idle
/// connection.
pub async fn relay_upgrade(
    mut request: Request,
    url: &str,
    idle_timeout: Duration,
    permit: Permit,
) -> Response {
    let bad_gateway =
        |message: String| StreamRefusal::new(StatusCode::BAD_GATEWAY, message).into_response();
    let target: Uri = match url.parse() {
        Ok(uri) => uri,
        Err(e) => return bad_gateway(format!("runtime streaming URL {url:?}: {e}")),
    };
    let (Some(host), Some(scheme)) = (target.host(), target.scheme_str()) else {
        return bad_gateway(format!("runtime streaming URL {url:?} has no host"));
    };
    if scheme != "http" {
        return bad_gateway(format!(
            "runtime streaming URL {url:?}: only http is supported"
        ));
    }
    let port = target.port_u16().unwrap_or(80);
    let stream = match tokio::net::TcpStream::connect((host, port)).await {
        Ok(stream) => stream,
        Err(e) => {
            return bad_gateway(format!(
                "connecting to the runtime streaming server {url}: {e}"
            ))
        }
    };
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream)).await {
            Ok(pair) => pair,
            Err(e) => return bad_gateway(format!("runtime streaming server {url}: {e}")),
        };
    tokio::spawn(async move {
        if let Err(error) = connection.with_upgrades().await {
            tracing::debug!(%error, "runtime streaming connection");
        }
    });

    let path = target
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let mut upstream = hyper::Request::builder()
        .method(request.method().clone())
        .uri(path);
    for (name, value) in request.headers() {
        if !hop_by_hop(name) {
            upstream = upstream.header(name, value);
        }
    }
    let client_upgrade = hyper::upgrade::on(&mut request);
    drop(request);
    let authority = target
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_default();
    let upstream = match upstream.header(header::HOST, authority).body(Body::empty()) {
        Ok(upstream) => upstream,
        Err(e) => return bad_gateway(format!("relaying to {url}: {e}")),
    };
    let mut response = match sender.send_request(upstream).await {
        Ok(response) => response,
        Err(e) => return bad_gateway(format!("runtime streaming server {url}: {e}")),
    };
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        let (parts, body) = response.into_parts();
        return Response::from_parts(parts, Body::new(body));
    }
    let runtime_upgrade = hyper::upgrade::on(&mut response);
    tokio::spawn(async move {
        // The session's place is held until both sides are done.
        let _permit = permit;
        let (client, runtime) = match tokio::try_join!(client_upgrade, runtime_upgrade) {
            Ok(pair) => pair,
            Err(error) => {
                tracing::debug!(%error, "stream upgrade");
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut runtime = TokioIo::new(runtime);
        match relay(&mut client, &mut runtime, idle_timeout).await {
            Ok(RelayEnd::Closed) => {}
            Ok(RelayEnd::Idle) => {
                tracing::debug!(
                    ?idle_timeout,
                    "stream closed after streamingConnectionIdleTimeout without traffic"
                )
            }
            Err(error) => tracing::debug!(%error, "stream relay ended"),
        }
    });
    let mut answer = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    for (name, value) in response.headers() {
        answer = answer.header(name, value);
    }
    answer
        .body(Body::empty())
        .unwrap_or_else(|_| StatusCode::SWITCHING_PROTOCOLS.into_response())
}

/// How a relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayEnd {
    /// Both sides closed.
    Closed,
    /// `streamingConnectionIdleTimeout` passed without a byte either way.
    Idle,
}

/// When an idle stream is to be closed: `idle` after the last byte; never for a zero timeout
/// or one too large to be a point in time (a huge configured value saturates to "never"
/// rather than overflowing the clock).
pub fn idle_deadline(last_activity: Instant, idle: Duration) -> Option<Instant> {
    if idle.is_zero() {
        return None;
    }
    last_activity.checked_add(idle)
}

/// Copies bytes both ways between `a` and `b` until both are closed, or until `idle` passes
/// without a byte read from either (then both are dropped by the caller, closing them).
pub async fn relay<A, B>(a: &mut A, b: &mut B, idle: Duration) -> std::io::Result<RelayEnd>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (touch, last) = tokio::sync::watch::channel(Instant::now());
    let mut a = Touching {
        inner: a,
        touch: &touch,
    };
    let mut b = Touching {
        inner: b,
        touch: &touch,
    };
    let copy = tokio::io::copy_bidirectional(&mut a, &mut b);
    tokio::pin!(copy);
    loop {
        let Some(deadline) = idle_deadline(*last.borrow(), idle) else {
            return copy.await.map(|_| RelayEnd::Closed);
        };
        tokio::select! {
            result = &mut copy => return result.map(|_| RelayEnd::Closed),
            _ = tokio::time::sleep_until(deadline) => {
                // Traffic since the deadline was set moves it; otherwise the stream is idle.
                if idle_deadline(*last.borrow(), idle).is_some_and(|d| d <= Instant::now()) {
                    return Ok(RelayEnd::Idle);
                }
            }
        }
    }
}

/// A stream that records the time of each read that returned bytes.
struct Touching<'a, S> {
    inner: &'a mut S,
    touch: &'a tokio::sync::watch::Sender<Instant>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Touching<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut *self.inner).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch.send_replace(Instant::now());
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Touching<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_options_table() {
        let ok = |command: &[&str], stdin, stdout, stderr, tty| StreamOptions {
            command: command.iter().map(|s| s.to_string()).collect(),
            stdin,
            stdout,
            stderr,
            tty,
        };
        let cases = [
            (
                "command=ls&command=-l%20a&stdout=1&stderr=1",
                Ok(ok(&["ls", "-l a"], false, true, true, false)),
            ),
            (
                "command=sh&stdin=1&stdout=1&tty=1&stderr=1",
                Ok(ok(&["sh"], true, true, false, true)),
            ),
            (
                "command=x+y&output=1",
                Ok(ok(&["x y"], false, true, false, false)),
            ),
            (
                "stdout=true&command=ls",
                Err("you must specify at least 1 of stdin, stdout, stderr".to_string()),
            ),
            (
                "command=ls",
                Err("you must specify at least 1 of stdin, stdout, stderr".to_string()),
            ),
            (
                "command=%E2%9C%93%2&stdout=1",
                Ok(ok(&["✓%2"], false, true, false, false)),
            ),
            (
                "command=%zz%&stdout=1",
                Ok(ok(&["%zz%"], false, true, false, false)),
            ),
        ];
        for (query, want) in cases {
            assert_eq!(stream_options(query), want, "{query}");
        }
    }

    #[test]
    fn container_id_from_status() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "status": {
                "containerStatuses": [{"name": "app", "containerID": "containerd://abc", "image": "", "imageID": "", "ready": true, "restartCount": 0}],
                "initContainerStatuses": [{"name": "init", "containerID": "def", "image": "", "imageID": "", "ready": false, "restartCount": 0}]
            }
        }))
        .unwrap();
        assert_eq!(running_container_id(&pod, "app").as_deref(), Some("abc"));
        assert_eq!(running_container_id(&pod, "init").as_deref(), Some("def"));
        assert_eq!(running_container_id(&pod, "nope"), None);
    }

    #[test]
    fn idle_deadline_table() {
        let now = Instant::now();
        assert_eq!(idle_deadline(now, Duration::ZERO), None, "zero: no timeout");
        assert_eq!(
            idle_deadline(now, Duration::from_secs(2)),
            Some(now + Duration::from_secs(2))
        );
        assert_eq!(
            idle_deadline(now, Duration::MAX),
            None,
            "saturates to never"
        );
        assert_eq!(
            idle_deadline(now, Duration::from_secs(u64::MAX / 2)),
            None,
            "a value past the clock's range is never, not a panic"
        );
    }

    /// Two relayed pairs: `client` ↔ relay ↔ `runtime`.
    fn pairs() -> (
        tokio::io::DuplexStream,
        tokio::io::DuplexStream,
        tokio::io::DuplexStream,
        tokio::io::DuplexStream,
    ) {
        let (client, relay_a) = tokio::io::duplex(1024);
        let (relay_b, runtime) = tokio::io::duplex(1024);
        (client, relay_a, relay_b, runtime)
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_stream_is_closed_after_the_timeout_and_traffic_keeps_it_open() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, mut a, mut b, mut runtime) = pairs();
        let idle = Duration::from_secs(10);
        let start = Instant::now();
        let relay = tokio::spawn(async move { relay(&mut a, &mut b, idle).await });
        // Bytes every 6 s, each way in turn, for 30 s: never 10 s of silence.
        let mut buf = [0u8; 4];
        for round in 0..5 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            if round % 2 == 0 {
                client.write_all(b"ping").await.unwrap();
                runtime.read_exact(&mut buf).await.unwrap();
            } else {
                runtime.write_all(b"pong").await.unwrap();
                client.read_exact(&mut buf).await.unwrap();
            }
        }
        assert!(!relay.is_finished(), "traffic keeps the stream open");
        let quiet = Instant::now();
        let end = relay.await.unwrap().unwrap();
        assert_eq!(end, RelayEnd::Idle);
        assert_eq!(
            quiet.elapsed(),
            idle,
            "closed exactly one timeout after the last byte"
        );
        assert_eq!(start.elapsed(), Duration::from_secs(40));
        // The relay's halves are gone: both ends see the stream closed.
        assert_eq!(client.read(&mut buf).await.unwrap(), 0);
        assert_eq!(runtime.read(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_or_huge_timeout_never_closes_and_both_sides_closing_ends_the_relay() {
        for idle in [Duration::ZERO, Duration::MAX] {
            let (client, mut a, mut b, runtime) = pairs();
            let relay = tokio::spawn(async move { relay(&mut a, &mut b, idle).await });
            tokio::time::sleep(Duration::from_secs(365 * 24 * 3600)).await;
            assert!(!relay.is_finished(), "{idle:?}: a year of silence");
            drop(client);
            drop(runtime);
            assert_eq!(relay.await.unwrap().unwrap(), RelayEnd::Closed, "{idle:?}");
        }
    }
}
