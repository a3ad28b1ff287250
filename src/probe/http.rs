//! The `httpGet` handler (`pkg/probe/http`): a GET with the kubelet's headers, redirects
//! followed only to the same host, HTTPS without certificate verification, no proxy, no
//! keep-alive, and at most 10 KiB of the body read.

use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use reqwest::redirect::{Attempt as RedirectAttempt, Policy};
use reqwest::Url;

use super::spec::HttpTarget;
use super::Attempt;

/// The kubelet reads at most this much of a response body (`maxRespBodyLength`).
pub const MAX_BODY: usize = 10 * 1024;

/// The kubelet follows at most this many redirects (Go's client default).
pub const MAX_REDIRECTS: usize = 10;

/// What to do with one redirect (`RedirectChecker(false)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectAction {
    Follow,
    /// Another host: do not follow; the redirect response itself is the answer, which the
    /// probe reports as a success with a `ProbeWarning`.
    Stop,
    /// The limit was reached: like a redirect to another host, the last redirect response is the
    /// answer — a success with a `ProbeWarning`, as the Kubernetes documentation (and the seed)
    /// specify. (The kubelet's code fails the probe with "stopped after 10 redirects" instead.)
    TooMany,
}

/// `original_host` is the host of the first request, `next_host` the redirect target's,
/// `requests_so_far` how many requests the chain has sent (the first one included).
///
/// The host compares without the port (Go's `URL.Hostname()`), so a redirect to another port
/// or from http to https on the same host is followed.
pub fn redirect_action(
    original_host: Option<&str>,
    next_host: Option<&str>,
    requests_so_far: usize,
) -> RedirectAction {
    if original_host != next_host {
        RedirectAction::Stop
    } else if requests_so_far >= MAX_REDIRECTS {
        RedirectAction::TooMany
    } else {
        RedirectAction::Follow
    }
}

#[derive(Debug, thiserror::Error)]
#[error("stopped after 10 redirects")]
struct TooManyRedirects;

fn redirect_policy(attempt: RedirectAttempt) -> reqwest::redirect::Action {
    let original = attempt.previous().first().and_then(Url::host_str);
    let action = redirect_action(original, attempt.url().host_str(), attempt.previous().len());
    match action {
        RedirectAction::Follow => attempt.follow(),
        RedirectAction::Stop => attempt.stop(),
        RedirectAction::TooMany => attempt.stop(),
    }
}

/// One client for all HTTP probes: it holds no connections between probes.
#[derive(Clone)]
pub struct HttpProber {
    client: Result<reqwest::Client, String>,
    /// For `protocol: HTTP2`: h2c with prior knowledge.
    h2c: Result<reqwest::Client, String>,
}

impl HttpProber {
    pub fn new() -> Self {
        let builder = || {
            reqwest::Client::builder()
                // The kubelet's transport ignores the node's proxy settings.
                .no_proxy()
                .redirect(Policy::custom(redirect_policy))
                // HTTPS probes skip certificate verification, as the kubelet's do.
                .danger_accept_invalid_certs(true)
                // DisableKeepAlives: every probe opens a new connection.
                .pool_max_idle_per_host(0)
        };
        let built = |b: reqwest::Result<reqwest::Client>| {
            b.map_err(|e| format!("building the HTTP probe client: {e}"))
        };
        // The kubelet's transport has its own TLS config, which keeps Go's client on HTTP/1.1
        // even for HTTPS.
        let client = built(builder().http1_only().build());
        let h2c = built(builder().http2_prior_knowledge().build());
        HttpProber { client, h2c }
    }

    /// One GET (`DoHTTPProbe`). Status 200–299 is a success, 300–399 (a redirect that was not
    /// followed) a success with a warning, anything else or a transport error a failure.
    pub async fn probe(&self, target: &HttpTarget, timeout: Duration) -> Attempt {
        let client = match if target.h2c { &self.h2c } else { &self.client } {
            Ok(c) => c,
            Err(e) => return Attempt::Error(e.clone()),
        };
        let url = match Url::parse(&target.url) {
            Ok(u) => u,
            Err(e) => return Attempt::Error(format!("parse {:?}: {e}", target.url)),
        };
        let mut request = client.get(url.clone()).timeout(timeout);
        for (name, value) in &target.headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("net/http: invalid header field name {name:?}"))
                .and_then(|n| {
                    HeaderValue::from_str(value)
                        .map(|v| (n, v))
                        .map_err(|_| format!("net/http: invalid header field value for {name:?}"))
                });
            match header {
                Ok((n, v)) => request = request.header(n, v),
                Err(msg) => return Attempt::Failure(format!("Get {:?}: {msg}", url.as_str())),
            }
        }
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) => return Attempt::Failure(request_error_message(&e, &url)),
        };
        let status = response.status().as_u16();
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = MAX_BODY - body.len();
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if body.len() >= MAX_BODY {
                        tracing::trace!(url = %url, "probe response body truncated");
                        break;
                    }
                }
                Ok(None) => break,
                // A body that cannot be read is a prober error in the kubelet: the attempt
                // is thrown away rather than counted.
                Err(e) => return Attempt::Error(request_error_message(&e, &url)),
            }
        }
        let body = String::from_utf8_lossy(&body).into_owned();
        classify_status(status, body)
    }
}

impl Default for HttpProber {
    fn default() -> Self {
        Self::new()
    }
}

/// The kubelet's verdict on a final response status.
pub fn classify_status(status: u16, body: String) -> Attempt {
    match status {
        200..=299 => Attempt::Success(body),
        300..=399 => Attempt::Warning(format!("Probe terminated redirects, Response body: {body}")),
        // The user-facing failure message must not carry the body (kubernetes#99425).
        _ => Attempt::Failure(format!("HTTP probe failed with statuscode: {status}")),
    }
}

/// Go's `*url.Error` text: `Get "<url>": <cause>`, with the causes worded as Go words them.
fn request_error_message(err: &reqwest::Error, fallback: &Url) -> String {
    let url = err.url().unwrap_or(fallback);
    let cause = if err.is_redirect() {
        TooManyRedirects.to_string()
    } else if err.is_timeout() {
        if err.is_body() || err.is_decode() {
            "context deadline exceeded (Client.Timeout or context cancellation while reading body)"
                .to_string()
        } else {
            "context deadline exceeded (Client.Timeout exceeded while awaiting headers)".to_string()
        }
    } else if err.is_connect() {
        match find_io_error(err) {
            Some(io) => format!(
                "dial tcp {}: {}",
                host_port(url),
                super::tcp::connect_error_text(io)
            ),
            None => format!("dial tcp {}: {}", host_port(url), error_chain(err)),
        }
    } else {
        error_chain(err)
    };
    format!("Get {:?}: {cause}", url.as_str())
}

fn host_port(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

fn find_io_error(err: &reqwest::Error) -> Option<&std::io::Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        source = s.source();
    }
    None
}

/// The innermost causes joined with ": " (reqwest's own Display says only "error sending
/// request").
fn error_chain(err: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(s) = source {
        parts.push(s.to_string());
        source = s.source();
    }
    if parts.is_empty() {
        err.to_string()
    } else {
        parts.join(": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_action_table() {
        let cases = [
            (
                "same host",
                Some("10.0.0.5"),
                Some("10.0.0.5"),
                1,
                RedirectAction::Follow,
            ),
            (
                "other host",
                Some("10.0.0.5"),
                Some("example.com"),
                1,
                RedirectAction::Stop,
            ),
            (
                "other host wins over the limit",
                Some("a"),
                Some("b"),
                10,
                RedirectAction::Stop,
            ),
            (
                "ninth redirect followed",
                Some("a"),
                Some("a"),
                9,
                RedirectAction::Follow,
            ),
            (
                "tenth redirect refused",
                Some("a"),
                Some("a"),
                10,
                RedirectAction::TooMany,
            ),
            (
                "no host to a host",
                None,
                Some("a"),
                1,
                RedirectAction::Stop,
            ),
        ];
        for (name, original, next, so_far, want) in cases {
            assert_eq!(redirect_action(original, next, so_far), want, "{name}");
        }
    }

    #[test]
    fn classify_status_table() {
        let cases = [
            (200, Attempt::Success("body".into())),
            (204, Attempt::Success("body".into())),
            (
                302,
                Attempt::Warning("Probe terminated redirects, Response body: body".into()),
            ),
            (
                399,
                Attempt::Warning("Probe terminated redirects, Response body: body".into()),
            ),
            (
                400,
                Attempt::Failure("HTTP probe failed with statuscode: 400".into()),
            ),
            (
                500,
                Attempt::Failure("HTTP probe failed with statuscode: 500".into()),
            ),
            (
                199,
                Attempt::Failure("HTTP probe failed with statuscode: 199".into()),
            ),
        ];
        for (status, want) in cases {
            assert_eq!(classify_status(status, "body".into()), want, "{status}");
        }
    }
}
