//! The request log: every request, in the order the responses were produced, for tests to assert on
//! ("exactly one DELETE of ... with gracePeriodSeconds 0", "no PATCH of pods/status").

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{CONTENT_TYPE, USER_AGENT};
use axum::middleware::Next;
use axum::response::Response;
use jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;

/// One logged request.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoggedRequest {
    pub at: Timestamp,
    pub method: String,
    pub path: String,
    /// The raw query string (still percent-encoded), "" if none.
    pub query: String,
    /// The body decoded as JSON (or YAML for apply patches); other non-empty bodies as a string.
    pub body: Option<Value>,
    pub content_type: Option<String>,
    pub user_agent: Option<String>,
    pub status: u16,
    /// Who made the request (fixtures serving HTTPS authenticate; `None`: anonymous, or no
    /// authentication at all).
    pub user: Option<String>,
}

impl LoggedRequest {
    /// A decoded query parameter (`gracePeriodSeconds`, `fieldSelector`, ...).
    pub fn query_param(&self, name: &str) -> Option<String> {
        parse_query(&self.query)
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }

    pub fn is_watch(&self) -> bool {
        matches!(self.query_param("watch").as_deref(), Some("1" | "true"))
    }
}

/// Decodes `a=b&c=d%20e` (with `+` as space) into pairs.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(hi), Some(lo)) => {
                        out.push((hi * 16 + lo) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Decodes a request body for the log (and the handlers): JSON, YAML for apply patches.
pub fn decode_body(content_type: Option<&str>, bytes: &[u8]) -> Option<Value> {
    if bytes.is_empty() {
        return None;
    }
    if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
        return Some(v);
    }
    if content_type.is_some_and(|c| c.contains("protobuf")) {
        if let Ok(v) = crate::protobuf::decode(bytes) {
            return Some(v);
        }
    }
    if content_type.is_some_and(|c| c.contains("yaml")) {
        if let Ok(v) = serde_yaml::from_slice::<Value>(bytes) {
            return Some(v);
        }
    }
    Some(Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

#[derive(Debug, Default)]
pub struct RequestLog {
    entries: Mutex<Vec<LoggedRequest>>,
}

impl RequestLog {
    pub fn push(&self, entry: LoggedRequest) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(entry);
    }

    pub fn entries(&self) -> Vec<LoggedRequest> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// Largest request body accepted (the API server's limit is 3 MiB).
const BODY_LIMIT: usize = 3 * 1024 * 1024;

/// Middleware: buffers the body, runs the request, logs it with the response status.
pub async fn log_requests(
    State(log): State<Arc<RequestLog>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let bytes: Bytes = match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(b) => b,
        Err(_) => Bytes::new(),
    };
    let header = |name| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    let content_type = header(CONTENT_TYPE);
    let user_agent = header(USER_AGENT);
    let method = parts.method.to_string();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let body_value = decode_body(content_type.as_deref(), &bytes);
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    let user = response
        .extensions()
        .get::<crate::auth::Authenticated>()
        .map(|a| a.0.username.clone());
    log.push(LoggedRequest {
        at: Timestamp::now(),
        method,
        path,
        query,
        body: body_value,
        content_type,
        user_agent,
        status: response.status().as_u16(),
        user,
    });
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn query_decoding() {
        let cases = [
            ("", vec![]),
            ("watch=1", vec![("watch", "1")]),
            (
                "fieldSelector=spec.nodeName%3Dnode-1&labelSelector=a+in+(b)",
                vec![
                    ("fieldSelector", "spec.nodeName=node-1"),
                    ("labelSelector", "a in (b)"),
                ],
            ),
            ("x=%zz", vec![("x", "%zz")]),
            ("flag", vec![("flag", "")]),
        ];
        for (query, want) in cases {
            let got = parse_query(query);
            let want: Vec<(String, String)> = want
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(got, want, "{query}");
        }
    }

    #[test]
    fn body_decoding() {
        let cases = [
            (None, "", None),
            (
                Some("application/json"),
                r#"{"a":1}"#,
                Some(json!({"a": 1})),
            ),
            (
                Some("application/apply-patch+yaml"),
                "a: 1\nb: x\n",
                Some(json!({"a": 1, "b": "x"})),
            ),
            (Some("text/plain"), "hello", Some(json!("hello"))),
        ];
        for (ct, body, want) in cases {
            assert_eq!(decode_body(ct, body.as_bytes()), want, "{body}");
        }
    }

    #[test]
    fn logged_request_helpers() {
        let entry = LoggedRequest {
            at: Timestamp::UNIX_EPOCH,
            method: "GET".into(),
            path: "/api/v1/pods".into(),
            query: "watch=true&gracePeriodSeconds=0".into(),
            body: None,
            content_type: None,
            user_agent: None,
            status: 200,
            user: None,
        };
        assert!(entry.is_watch());
        assert_eq!(
            entry.query_param("gracePeriodSeconds").as_deref(),
            Some("0")
        );
        assert_eq!(entry.query_param("nope"), None);
    }
}
