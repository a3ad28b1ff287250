//! The HTTP server: a target for HTTP probes (`/healthz`, `/redirect`, `/status/<code>`,
//! `/slow`) and a way to see what the prober sent (`/headers`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use tokio::net::TcpListener;

use crate::duration::parse_duration;
use crate::events::Events;
use crate::health::Health;

#[derive(Clone)]
struct AppState {
    health: Arc<Health>,
    events: Events,
}

pub fn router(health: Arc<Health>, events: Events) -> Router {
    let state = AppState { health, events };
    Router::new()
        .route("/healthz", get(healthz))
        .route("/", get(hostname))
        .route("/hostname", get(hostname))
        .route("/headers", get(headers))
        .route("/redirect", get(redirect))
        .route("/status/{code}", get(status))
        .route("/echo", get(echo))
        .route("/slow", get(slow))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), log_request))
        .with_state(state)
}

pub async fn serve(listener: TcpListener, health: Arc<Health>, events: Events) {
    let app = router(health, events.clone());
    if let Err(err) = axum::serve(listener, app).await {
        events.emit(&format!("http server failed: {err}"));
    }
}

/// Logs `http <METHOD> <path?query> -> <status>` once the response is known, so a test can count
/// probe requests and see their results in the event file.
async fn log_request(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let target = request.uri().path_and_query().map_or_else(
        || request.uri().path().to_owned(),
        |pq| pq.as_str().to_owned(),
    );
    let response = next.run(request).await;
    state.events.emit(&format!(
        "http {method} {target} -> {}",
        response.status().as_u16()
    ));
    response
}

async fn healthz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.health.is_healthy_now() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::INTERNAL_SERVER_ERROR, "unhealthy")
    }
}

async fn hostname() -> Response {
    match nix::unistd::gethostname() {
        Ok(name) => name.to_string_lossy().into_owned().into_response(),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("gethostname: {err}"),
        )
            .into_response(),
    }
}

/// Request headers as a JSON object `{lower-case name: value}`; repeated headers are joined
/// with ", " (RFC 9110 list syntax), so tests can compare one string per header.
pub fn headers_json(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        out.entry(name.as_str().to_owned())
            .and_modify(|joined| {
                joined.push_str(", ");
                joined.push_str(&value);
            })
            .or_insert(value);
    }
    out
}

async fn headers(headers: HeaderMap) -> Json<BTreeMap<String, String>> {
    Json(headers_json(&headers))
}

#[derive(Deserialize)]
struct RedirectQuery {
    to: Option<String>,
    code: Option<u16>,
}

/// Why a `/redirect` request cannot be answered with a redirect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedirectError {
    MissingTo,
    NotARedirectCode(u16),
}

/// The redirect to send: `code` defaults to 302 and must be a 3xx status.
pub fn redirect_target(
    to: Option<&str>,
    code: Option<u16>,
) -> Result<(u16, String), RedirectError> {
    let code = code.unwrap_or(302);
    if !(300..=399).contains(&code) {
        return Err(RedirectError::NotARedirectCode(code));
    }
    match to {
        Some(to) if !to.is_empty() => Ok((code, to.to_owned())),
        _ => Err(RedirectError::MissingTo),
    }
}

async fn redirect(Query(query): Query<RedirectQuery>) -> Response {
    match redirect_target(query.to.as_deref(), query.code) {
        Ok((code, location)) => match StatusCode::from_u16(code) {
            Ok(status) => (status, [(header::LOCATION, location)]).into_response(),
            Err(_) => (StatusCode::BAD_REQUEST, format!("bad code {code}")).into_response(),
        },
        Err(RedirectError::MissingTo) => {
            (StatusCode::BAD_REQUEST, "query parameter `to` is required").into_response()
        }
        Err(RedirectError::NotARedirectCode(code)) => (
            StatusCode::BAD_REQUEST,
            format!("code {code} is not a redirect (300-399)"),
        )
            .into_response(),
    }
}

async fn status(Path(code): Path<String>) -> Response {
    match code
        .parse::<u16>()
        .ok()
        .and_then(|code| StatusCode::from_u16(code).ok())
    {
        Some(status) if (200..=599).contains(&status.as_u16()) => {
            (status, status.as_u16().to_string()).into_response()
        }
        _ => (
            StatusCode::BAD_REQUEST,
            format!("invalid status code {code:?} (use 200-599)"),
        )
            .into_response(),
    }
}

#[derive(Deserialize)]
struct EchoQuery {
    msg: Option<String>,
}

async fn echo(Query(query): Query<EchoQuery>) -> String {
    query.msg.unwrap_or_default()
}

#[derive(Deserialize)]
struct SlowQuery {
    delay: Option<String>,
}

/// Answers after `delay` (default 1s): a target for probe `timeoutSeconds`.
async fn slow(Query(query): Query<SlowQuery>) -> Response {
    let delay = query.delay.as_deref().unwrap_or("1s");
    match parse_duration(delay) {
        Ok(delay) => {
            tokio::time::sleep(delay).await;
            (StatusCode::OK, "ok").into_response()
        }
        Err(err) => (StatusCode::BAD_REQUEST, err.to_string()).into_response(),
    }
}

async fn not_found() -> (StatusCode, &'static str) {
    (StatusCode::NOT_FOUND, "not found")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthPolicy;
    use axum::http::HeaderValue;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn redirect_target_cases() {
        type Case = (
            Option<&'static str>,
            Option<u16>,
            Result<(u16, &'static str), RedirectError>,
        );
        let cases: &[Case] = &[
            (Some("/healthz"), None, Ok((302, "/healthz"))),
            (
                Some("http://127.0.0.1:9/x"),
                Some(301),
                Ok((301, "http://127.0.0.1:9/x")),
            ),
            (Some("/a"), Some(307), Ok((307, "/a"))),
            (None, None, Err(RedirectError::MissingTo)),
            (Some(""), Some(302), Err(RedirectError::MissingTo)),
            (
                Some("/a"),
                Some(200),
                Err(RedirectError::NotARedirectCode(200)),
            ),
            (
                Some("/a"),
                Some(400),
                Err(RedirectError::NotARedirectCode(400)),
            ),
        ];
        for (to, code, want) in cases {
            let got = redirect_target(*to, *code);
            let want = want.clone().map(|(c, l)| (c, l.to_owned()));
            assert_eq!(got, want, "to={to:?} code={code:?}");
        }
    }

    #[test]
    fn headers_json_joins_repeated_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("user-agent", HeaderValue::from_static("kube-probe/1.37"));
        headers.append("accept", HeaderValue::from_static("text/plain"));
        headers.append("accept", HeaderValue::from_static("*/*"));
        let json = headers_json(&headers);
        assert_eq!(json["user-agent"], "kube-probe/1.37");
        assert_eq!(json["accept"], "text/plain, */*");
        assert_eq!(json.len(), 2);
    }

    /// Sends one HTTP/1.0 request to a real listener and returns (status, headers+body text).
    async fn get(addr: std::net::SocketAddr, target: &str) -> (u16, String) {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {target} HTTP/1.0\r\nHost: test\r\nX-Probe: yes\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap();
        (status, response)
    }

    #[tokio::test]
    async fn routes_answer_over_real_http() {
        let dir = tempfile::tempdir().unwrap();
        let healthy_file = dir.path().join("healthy");
        let health = Arc::new(Health::new(
            HealthPolicy {
                healthy_file: Some(healthy_file.clone()),
                ..Default::default()
            },
            tokio::time::Instant::now(),
        ));
        let events_path = dir.path().join("events");
        let events = Events::new(Some(events_path.clone()));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, health, events));

        // (target, want status, want text in the response)
        let cases: &[(&str, u16, &str)] = &[
            ("/healthz", 500, "unhealthy"),
            ("/echo?msg=hello%20there", 200, "hello there"),
            ("/status/418", 418, "418"),
            ("/status/99", 400, "invalid status code"),
            ("/status/abc", 400, "invalid status code"),
            ("/redirect?to=/healthz", 302, "location: /healthz"),
            (
                "/redirect?to=http://x/y&code=301",
                301,
                "location: http://x/y",
            ),
            ("/redirect?to=/a&code=200", 400, "not a redirect"),
            ("/headers", 200, "\"x-probe\":\"yes\""),
            ("/slow?delay=10ms", 200, "ok"),
            ("/slow?delay=soon", 400, "invalid duration"),
            ("/nope", 404, "not found"),
        ];
        for (target, want_status, want_text) in cases {
            let (status, text) = get(addr, target).await;
            assert_eq!(status, *want_status, "GET {target}: {text}");
            assert!(
                text.to_lowercase().contains(&want_text.to_lowercase()),
                "GET {target}: {text:?} should contain {want_text:?}"
            );
        }

        std::fs::write(&healthy_file, "").unwrap();
        let (status, text) = get(addr, "/healthz").await;
        assert_eq!((status, text.ends_with("ok")), (200, true), "{text}");

        let (status, text) = get(addr, "/hostname").await;
        let hostname = nix::unistd::gethostname().unwrap();
        assert_eq!(status, 200);
        assert!(text.ends_with(hostname.to_str().unwrap()), "{text}");

        let log = std::fs::read_to_string(&events_path).unwrap();
        assert!(log.contains(" http GET /healthz -> 500\n"), "{log}");
        assert!(log.contains(" http GET /status/418 -> 418\n"), "{log}");
    }
}
