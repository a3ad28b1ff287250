//! What one client may cost the node, the same on both APIs: every connection is served by
//! hyper's HTTP/1 with the limits below, and a request that declares a body larger than any
//! request of the APIs needs is refused before a handler runs.
//!
//! The kubelet relies on Go's `http.Server` with `MaxHeaderBytes: 1 << 20` and no header
//! timeout on the read-only port. nodelet keeps a request head to 64 KiB (a bearer token or a
//! client certificate's request is a few KiB), at most 100 header fields, 10 s to send it,
//! and 64 KiB of declared body (no handler reads a body: `exec`, `attach` and `portForward`
//! upgrade the connection, everything else is a GET).

use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

/// The request line and headers together, bytes; more is answered `431`.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Header fields per request; more is answered `431`.
pub const MAX_HEADERS: usize = 100;
/// How long a client may take to send a request's head; then the connection is closed.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest `Content-Length` a request may declare; more is answered `413`.
pub const MAX_BODY_BYTES: u64 = 64 * 1024;

/// The router with the body limit in front of every route.
pub fn limited(router: Router) -> Router {
    router.layer(axum::middleware::from_fn(refuse_large_bodies))
}

async fn refuse_large_bodies(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match declared {
        Some(length) if length > MAX_BODY_BYTES => (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body of {length} bytes is over the limit of {MAX_BODY_BYTES}"),
        )
            .into_response(),
        _ => next.run(request).await,
    }
}

/// The next connection of `listener`, or `None` once `cancel` fires. A failed accept (out of
/// file descriptors, a connection reset before it was taken) is logged with `api` and retried
/// after 100 ms rather than ending the server.
pub async fn accept(
    listener: &tokio::net::TcpListener,
    cancel: &CancellationToken,
    api: &str,
) -> Option<(tokio::net::TcpStream, std::net::SocketAddr)> {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => return Some(conn),
                Err(error) => {
                    tracing::warn!(%error, "{api} accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = cancel.cancelled() => return None,
        }
    }
}

/// Serves one connection with the limits until the client closes it or `cancel` (then
/// gracefully: the request under way is answered, the connection closed). Upgrades (exec,
/// attach, port-forward) are allowed.
pub async fn serve_connection<I>(
    io: I,
    router: Router,
    cancel: CancellationToken,
) -> hyper::Result<()>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_header_size(MAX_HEADER_BYTES)
        .max_headers(MAX_HEADERS)
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(router))
        .with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => result,
        _ = cancel.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server of one route on loopback: its address.
    async fn server() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = limited(Router::new().route("/pods", get(|| async { "pods" })));
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let router = router.clone();
                tokio::spawn(serve_connection(stream, router, CancellationToken::new()));
            }
        });
        addr
    }

    /// Sends `request` raw and reads until the server closes or 64 KiB came: the status line.
    async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        // The server may answer (and close) before it read all of an oversized request.
        let _ = stream.write_all(request).await;
        let mut answer = vec![0; 65536];
        let mut read = 0;
        while read < answer.len() {
            match stream.read(&mut answer[read..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
            if answer[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
        let text = String::from_utf8_lossy(&answer[..read]).into_owned();
        text.lines().next().unwrap_or_default().to_string()
    }

    fn get_with(headers: &str) -> Vec<u8> {
        format!("GET /pods HTTP/1.1\r\nhost: node\r\n{headers}connection: close\r\n\r\n")
            .into_bytes()
    }

    #[tokio::test]
    async fn limits_of_a_request_table() {
        let addr = server().await;
        let big = "x".repeat(MAX_HEADER_BYTES);
        let many: String = (0..MAX_HEADERS).map(|i| format!("x-h{i}: v\r\n")).collect();
        let few: String = (0..MAX_HEADERS - 3)
            .map(|i| format!("x-h{i}: v\r\n"))
            .collect();
        let cases: [(&str, Vec<u8>, &str); 7] = [
            ("a plain GET", get_with(""), "HTTP/1.1 200 OK"),
            (
                "a header of 8 KiB (a long bearer token)",
                get_with(&format!("authorization: Bearer {}\r\n", "t".repeat(8192))),
                "HTTP/1.1 200 OK",
            ),
            (
                "a head over the byte limit",
                get_with(&format!("x-big: {big}\r\n")),
                "HTTP/1.1 431 Request Header Fields Too Large",
            ),
            (
                "as many fields as allowed (with host and connection)",
                get_with(&few),
                "HTTP/1.1 200 OK",
            ),
            (
                "more fields than allowed",
                get_with(&many),
                "HTTP/1.1 431 Request Header Fields Too Large",
            ),
            (
                "a declared body at the limit",
                get_with(&format!("content-length: {MAX_BODY_BYTES}\r\n")),
                "HTTP/1.1 200 OK",
            ),
            (
                "a declared body over the limit",
                get_with(&format!("content-length: {}\r\n", MAX_BODY_BYTES + 1)),
                "HTTP/1.1 413 Payload Too Large",
            ),
        ];
        for (what, request, want) in cases {
            let mut request = request;
            if what == "a declared body at the limit" {
                request.extend(std::iter::repeat_n(b'b', MAX_BODY_BYTES as usize));
            }
            assert_eq!(exchange(addr, &request).await, want, "{what}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_finishes_its_head_is_disconnected() {
        let addr = server().await;
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /pods HTTP/1.1\r\nhost: n")
            .await
            .unwrap();
        let started = tokio::time::Instant::now();
        let mut rest = Vec::new();
        // With the clock paused, time jumps while the server waits for the rest of the head;
        // the server answers 408 or just closes, and the read ends.
        let _ = stream.read_to_end(&mut rest).await;
        let waited = started.elapsed();
        assert!(
            waited >= HEADER_TIMEOUT && waited < HEADER_TIMEOUT + Duration::from_secs(1),
            "disconnected after {waited:?}"
        );
    }
}
