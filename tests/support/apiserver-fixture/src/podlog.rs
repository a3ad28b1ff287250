//! `GET /api/v1/namespaces/{ns}/pods/{name}/log`: what the API server's pod log REST does
//! (`pkg/registry/core/pod/rest/log.go`, `LogLocation` in `pkg/registry/core/pod/strategy.go`,
//! `NodeConnectionInfoGetter` in `pkg/kubelet/client`): validate the options, pick the container,
//! find the node's address and kubelet port, and stream the node agent's
//! `/containerLogs/{ns}/{pod}/{container}` back, presenting the kubelet client certificate.
//!
//! The decisions are pure functions of JSON values; `stream_from_kubelet` is the one effect.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderValue;
use axum::response::Response;
use jiff::Timestamp;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::error::{ApiError, FieldError};

/// `--kubelet-port`: used when the node reports no `daemonEndpoints.kubeletEndpoint.Port`.
pub const DEFAULT_KUBELET_PORT: i64 = 10250;

/// The fixture's `--kubelet-preferred-address-types`. The real default starts with `Hostname`;
/// the fixture prefers `InternalIP` because test nodes are reachable by IP, not by name.
pub const PREFERRED_ADDRESS_TYPES: &[&str] = &["InternalIP", "Hostname"];

/// Largest body of an error answer read from the node agent (`maxReadLength`).
const MAX_ERROR_BODY: usize = 50_000;

/// How the fixture connects to node agents (`--kubelet-client-certificate`/`--kubelet-client-key`
/// and `--kubelet-certificate-authority` of the real server).
#[derive(Clone, Debug, Default)]
pub struct KubeletClientConfig {
    /// PEM certificate chain followed by its PEM private key, presented to the node agent.
    pub identity_pem: Option<Vec<u8>>,
    /// PEM CA bundle that signs node agents' serving certificates; without it the serving
    /// certificate is not verified (as the real server without `--kubelet-certificate-authority`).
    pub ca_pem: Option<Vec<u8>>,
}

/// `PodLogOptions` as decoded from the query.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodLogOptions {
    pub container: Option<String>,
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub since_seconds: Option<i64>,
    pub since_time: Option<Timestamp>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
    pub insecure_skip_tls_verify_backend: bool,
}

/// The query parameter conversion of the API server: a bool is false only for `0`/`false`.
pub(crate) fn query_bool(value: &str) -> bool {
    !(value == "0" || value.eq_ignore_ascii_case("false"))
}

fn query_int(name: &str, value: &str) -> Result<Option<i64>, ApiError> {
    if value.is_empty() {
        return Ok(None);
    }
    value.parse::<i64>().map(Some).map_err(|_| {
        ApiError::bad_request(format!(
            "{name}: strconv.ParseInt: parsing {value:?}: invalid syntax"
        ))
    })
}

/// Decodes the query of a `pods/log` request (unknown parameters are ignored, as the API server's
/// parameter codec does).
pub fn parse_log_options(query: &[(String, String)]) -> Result<PodLogOptions, ApiError> {
    let mut opts = PodLogOptions::default();
    for (name, value) in query {
        match name.as_str() {
            "container" if !value.is_empty() => opts.container = Some(value.clone()),
            "follow" => opts.follow = query_bool(value),
            "previous" => opts.previous = query_bool(value),
            "timestamps" => opts.timestamps = query_bool(value),
            "insecureSkipTLSVerifyBackend" => {
                opts.insecure_skip_tls_verify_backend = query_bool(value)
            }
            "sinceSeconds" => opts.since_seconds = query_int(name, value)?,
            "tailLines" => opts.tail_lines = query_int(name, value)?,
            "limitBytes" => opts.limit_bytes = query_int(name, value)?,
            "sinceTime" if !value.is_empty() => {
                let t = value.parse::<Timestamp>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "sinceTime: parsing time {value:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse"
                    ))
                })?;
                opts.since_time = Some(t);
            }
            _ => {}
        }
    }
    Ok(opts)
}

/// `ValidatePodLogOptions`: a 422 `PodLogOptions "<pod>" is invalid: ...` for bad values.
pub fn validate_log_options(opts: &PodLogOptions, pod: &str) -> Result<(), ApiError> {
    let mut errors = Vec::new();
    if let Some(t) = opts.tail_lines.filter(|t| *t < 0) {
        errors.push(FieldError::invalid(
            "tailLines",
            &json!(t),
            "must be greater than or equal to 0",
        ));
    }
    if let Some(l) = opts.limit_bytes.filter(|l| *l < 1) {
        errors.push(FieldError::invalid(
            "limitBytes",
            &json!(l),
            "must be greater than 0",
        ));
    }
    match (opts.since_seconds, opts.since_time) {
        (Some(_), Some(_)) => errors.push(FieldError::forbidden(
            "",
            "at most one of `sinceTime` or `sinceSeconds` may be specified",
        )),
        (Some(s), None) if s < 1 => errors.push(FieldError::invalid(
            "sinceSeconds",
            &json!(s),
            "must be greater than 0",
        )),
        _ => {}
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_group_kind(
            "",
            "PodLogOptions",
            pod,
            &errors,
        ))
    }
}

fn container_names(pod: &Value, pointer: &str) -> Vec<String> {
    pod.pointer(pointer)
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// `validateContainer`: the requested container must exist (init, regular or ephemeral); with
/// none requested the pod must have exactly one regular container. The
/// `kubectl.kubernetes.io/default-container` annotation is kubectl's business, not the server's.
pub fn select_container(pod: &Value, requested: Option<&str>) -> Result<String, ApiError> {
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let regular = container_names(pod, "/spec/containers");
    // VisitContainers order: init containers, containers, ephemeral containers.
    let all: Vec<String> = container_names(pod, "/spec/initContainers")
        .into_iter()
        .chain(regular.iter().cloned())
        .chain(container_names(pod, "/spec/ephemeralContainers"))
        .collect();
    match requested {
        Some(c) if all.iter().any(|n| n == c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => match regular.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}"
            ))),
            _ => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                all.join(" ")
            ))),
        },
    }
}

/// `nodeutil.GetPreferredNodeAddress` with `PREFERRED_ADDRESS_TYPES`; the error is the real
/// server's `NoMatchError`, answered as a 500 without a reason.
pub fn preferred_address(node: &Value) -> Result<String, ApiError> {
    let addresses = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for wanted in PREFERRED_ADDRESS_TYPES {
        let found = addresses.iter().find(|a| {
            a["type"].as_str() == Some(*wanted)
                && a["address"].as_str().is_some_and(|s| !s.is_empty())
        });
        if let Some(a) = found.and_then(|a| a["address"].as_str()) {
            return Ok(a.to_string());
        }
    }
    // Go's %v of []NodeAddress: [{InternalIP 10.0.0.1} {Hostname n1}]
    let known: Vec<String> = addresses
        .iter()
        .map(|a| {
            format!(
                "{{{} {}}}",
                a["type"].as_str().unwrap_or(""),
                a["address"].as_str().unwrap_or("")
            )
        })
        .collect();
    Err(ApiError::unknown(
        500,
        format!(
            "no preferred addresses found; known addresses: [{}]",
            known.join(" ")
        ),
    ))
}

/// `status.daemonEndpoints.kubeletEndpoint.Port`, or `--kubelet-port` when it is not positive.
pub fn kubelet_port(node: &Value) -> i64 {
    node.pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_i64)
        .filter(|p| *p > 0)
        .unwrap_or(DEFAULT_KUBELET_PORT)
}

/// Go's `url.QueryEscape`.
pub(crate) fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

/// The query `LogLocation` sends to the node agent: `url.Values.Encode()`, so sorted by key.
pub fn kubelet_query(opts: &PodLogOptions) -> String {
    let mut params: Vec<(&str, String)> = Vec::new();
    if opts.follow {
        params.push(("follow", "true".into()));
    }
    if opts.previous {
        params.push(("previous", "true".into()));
    }
    if opts.timestamps {
        params.push(("timestamps", "true".into()));
    }
    if let Some(s) = opts.since_seconds {
        params.push(("sinceSeconds", s.to_string()));
    }
    if let Some(t) = opts.since_time {
        // time.RFC3339 of a UTC time: whole seconds, `Z`.
        params.push(("sinceTime", t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()));
    }
    if let Some(t) = opts.tail_lines {
        params.push(("tailLines", t.to_string()));
    }
    if let Some(l) = opts.limit_bytes {
        params.push(("limitBytes", l.to_string()));
    }
    encode_query(params)
}

/// Go's `url.Values.Encode`: keys sorted (stably, so repeated keys keep their order), each
/// pair escaped, joined with `&`.
pub(crate) fn encode_query(mut params: Vec<(&str, String)>) -> String {
    params.sort_by(|a, b| a.0.cmp(b.0));
    params
        .iter()
        .map(|(k, v)| format!("{}={}", query_escape(k), query_escape(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Go's `net.JoinHostPort`: IPv6 addresses in brackets.
pub fn join_host_port(address: &str, port: i64) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// `https://<address>:<port>/containerLogs/<ns>/<pod>/<container>?<query>` (IPv6 in brackets, as
/// `net.JoinHostPort` writes it).
pub fn kubelet_log_url(
    address: &str,
    port: i64,
    namespace: &str,
    pod: &str,
    container: &str,
    opts: &PodLogOptions,
) -> String {
    let host = join_host_port(address, port);
    let query = kubelet_query(opts);
    let mut url = format!("https://{host}/containerLogs/{namespace}/{pod}/{container}");
    if !query.is_empty() {
        url.push('?');
        url.push_str(&query);
    }
    url
}

/// `GenericHttpResponseChecker` for `pods/log`: how a node agent's non-2xx answer reaches the
/// client (`NewGenericServerResponse` with an empty verb, hence `( pods/log web)`).
pub fn kubelet_error(code: u16, body: &str, pod: &str) -> ApiError {
    let (reason, message) = match code {
        500 => {
            return ApiError::internal(format!("Internal error occurred: {body}"));
        }
        400 => return ApiError::bad_request(body.to_string()),
        409 => ("Conflict", "the server reported a conflict".to_string()),
        404 => (
            "NotFound",
            "the server could not find the requested resource".to_string(),
        ),
        401 => (
            "Unauthorized",
            "the server has asked for the client to provide credentials".to_string(),
        ),
        403 => ("Forbidden", body.to_string()),
        405 => (
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource".to_string(),
        ),
        422 => (
            "Invalid",
            "the server rejected our request due to an error in our request".to_string(),
        ),
        503 => (
            "ServiceUnavailable",
            "the server is currently unable to handle the request".to_string(),
        ),
        429 => (
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later"
                .to_string(),
        ),
        c if c >= 500 => (
            "InternalError",
            format!("an error on the server ({body:?}) has prevented the request from succeeding"),
        ),
        c => (
            "",
            format!(
                "the server responded with the status code {c} but did not return more information"
            ),
        ),
    };
    let details = json!({
        "name": pod,
        "kind": "pods/log",
        "causes": [{"reason": "UnexpectedServerResponse", "message": body}],
    });
    ApiError {
        code,
        reason,
        message: format!("{message} ( pods/log {pod})"),
        details: Some(details),
    }
}

fn http_client(
    config: &KubeletClientConfig,
    skip_verify: bool,
) -> Result<reqwest::Client, ApiError> {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .redirect(reqwest::redirect::Policy::none())
        .tls_built_in_root_certs(false);
    if let Some(pem) = &config.identity_pem {
        let identity = reqwest::Identity::from_pem(pem)
            .map_err(|e| ApiError::internal(format!("kubelet client certificate: {e}")))?;
        builder = builder.identity(identity);
    }
    match (&config.ca_pem, skip_verify) {
        (Some(ca), false) => {
            let certs = reqwest::Certificate::from_pem_bundle(ca)
                .map_err(|e| ApiError::internal(format!("kubelet certificate authority: {e}")))?;
            for c in certs {
                builder = builder.add_root_certificate(c);
            }
        }
        _ => builder = builder.danger_accept_invalid_certs(true),
    }
    builder
        .build()
        .map_err(|e| ApiError::internal(format!("kubelet client: {e}")))
}

/// The HTTPS client the fixture reaches node agents with (`nodes/proxy`): the kubelet client
/// certificate, the serving certificate verified against the CA when one is set.
pub fn kubelet_http_client(config: &KubeletClientConfig) -> Result<reqwest::Client, ApiError> {
    http_client(config, false)
}

/// Go's `*url.Error` text for a failed `GET`, e.g. `Get "https://...": connection refused`.
fn transport_error(url: &str, err: &reqwest::Error) -> ApiError {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    ApiError::unknown(500, format!("Get {url:?}: {text}"))
}

/// Requests `url` from the node agent and answers with its body as it arrives (each chunk is
/// forwarded at once, so `follow=true` clients see lines as they are written).
pub async fn stream_from_kubelet(
    config: &KubeletClientConfig,
    url: &str,
    skip_verify: bool,
    pod: &str,
) -> Result<Response, ApiError> {
    let client = http_client(config, skip_verify)?;
    let mut upstream = client
        .get(url)
        .send()
        .await
        .map_err(|e| transport_error(url, &e))?;
    let code = upstream.status().as_u16();
    if !(200..=206).contains(&code) {
        let mut body = Vec::new();
        while let Ok(Some(chunk)) = upstream.chunk().await {
            body.extend_from_slice(&chunk);
            if body.len() >= MAX_ERROR_BODY {
                body.truncate(MAX_ERROR_BODY);
                break;
            }
        }
        return Err(kubelet_error(code, &String::from_utf8_lossy(&body), pod));
    }
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(16);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tx.closed() => return,
                chunk = upstream.chunk() => match chunk {
                    Ok(Some(bytes)) => {
                        if tx.send(Ok(bytes)).await.is_err() {
                            return;
                        }
                    }
                    // The node agent closed the stream (or broke it): the client's stream ends.
                    Ok(None) | Err(_) => return,
                }
            }
        }
    });
    Ok(text_response(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    )))
}

/// 200 `text/plain` (`LocationStreamer.ContentType`).
pub fn text_response(body: Body) -> Response {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::parse_query;

    fn opts(q: &str) -> Result<PodLogOptions, ApiError> {
        parse_log_options(&parse_query(q))
    }

    #[test]
    fn options_are_parsed_and_validated() {
        // (query, Ok(kubelet query) or Err((code, message)))
        type Want = Result<&'static str, (u16, &'static str)>;
        let cases: &[(&str, Want)] = &[
            ("", Ok("")),
            ("container=app", Ok("")),
            (
                "follow=true&previous=1&timestamps=true&tailLines=10&limitBytes=5",
                Ok("follow=true&limitBytes=5&previous=true&tailLines=10&timestamps=true"),
            ),
            ("follow=false&previous=0", Ok("")),
            ("sinceSeconds=30", Ok("sinceSeconds=30")),
            (
                "sinceTime=2026-01-02T03:04:05.678Z",
                Ok("sinceTime=2026-01-02T03%3A04%3A05Z"),
            ),
            (
                "tailLines=-1",
                Err((422, "PodLogOptions \"web\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0")),
            ),
            (
                "limitBytes=0",
                Err((422, "PodLogOptions \"web\" is invalid: limitBytes: Invalid value: 0: must be greater than 0")),
            ),
            (
                "sinceSeconds=0",
                Err((422, "PodLogOptions \"web\" is invalid: sinceSeconds: Invalid value: 0: must be greater than 0")),
            ),
            (
                "sinceSeconds=5&sinceTime=2026-01-02T03:04:05Z",
                Err((422, "PodLogOptions \"web\" is invalid: : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified")),
            ),
            (
                "tailLines=-1&limitBytes=-2",
                Err((422, "PodLogOptions \"web\" is invalid: [tailLines: Invalid value: -1: must be greater than or equal to 0, limitBytes: Invalid value: -2: must be greater than 0]")),
            ),
            ("tailLines=x", Err((400, "tailLines: strconv.ParseInt: parsing \"x\": invalid syntax"))),
        ];
        for (query, want) in cases {
            let got = opts(query).and_then(|o| validate_log_options(&o, "web").map(|_| o));
            match (got, want) {
                (Ok(o), Ok(q)) => assert_eq!(kubelet_query(&o), *q, "{query}"),
                (Err(e), Err((code, message))) => {
                    assert_eq!((e.code, e.message.as_str()), (*code, *message), "{query}")
                }
                (got, want) => panic!("{query}: got {got:?}, want {want:?}"),
            }
        }
        assert_eq!(
            opts("container=app").unwrap().container.as_deref(),
            Some("app")
        );
        assert!(
            opts("insecureSkipTLSVerifyBackend=true")
                .unwrap()
                .insecure_skip_tls_verify_backend
        );
    }

    #[test]
    fn container_selection() {
        let pod = |containers: &[&str], init: &[&str]| {
            let c: Vec<Value> = containers.iter().map(|n| json!({"name": n})).collect();
            let i: Vec<Value> = init.iter().map(|n| json!({"name": n})).collect();
            json!({"metadata": {"name": "web"}, "spec": {"containers": c, "initContainers": i}})
        };
        let cases: &[(Value, Option<&str>, Result<&str, &str>)] = &[
            (pod(&["app"], &[]), None, Ok("app")),
            (pod(&["app"], &["init"]), None, Ok("app")),
            (pod(&["app", "side"], &["init"]), Some("init"), Ok("init")),
            (pod(&["app", "side"], &[]), Some("side"), Ok("side")),
            (
                pod(&["a", "b"], &[]),
                None,
                Err("a container name must be specified for pod web, choose one of: [a b]"),
            ),
            (
                pod(&["a", "b"], &["i"]),
                None,
                Err("a container name must be specified for pod web, choose one of: [i a b]"),
            ),
            (
                pod(&[], &[]),
                None,
                Err("a container name must be specified for pod web"),
            ),
            (
                pod(&["app"], &[]),
                Some("nope"),
                Err("container nope is not valid for pod web"),
            ),
        ];
        for (p, requested, want) in cases {
            let got = select_container(p, *requested);
            match (got, want) {
                (Ok(c), Ok(w)) => assert_eq!(c, *w),
                (Err(e), Err(w)) => {
                    assert_eq!(e.code, 400);
                    assert_eq!(e.reason, "BadRequest");
                    assert_eq!(e.message, *w);
                }
                (got, want) => panic!("{p}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn node_address_and_port() {
        let node = |addresses: Value, port: Value| json!({"status": {"addresses": addresses, "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}});
        let cases: &[(Value, Result<&str, &str>, i64)] = &[
            (
                node(
                    json!([{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.1"}]),
                    json!(10251),
                ),
                Ok("10.0.0.1"),
                10251,
            ),
            (
                node(json!([{"type": "Hostname", "address": "n1"}]), json!(0)),
                Ok("n1"),
                10250,
            ),
            (
                node(
                    json!([{"type": "ExternalIP", "address": "1.2.3.4"}]),
                    json!(null),
                ),
                Err("no preferred addresses found; known addresses: [{ExternalIP 1.2.3.4}]"),
                10250,
            ),
            (
                json!({"status": {}}),
                Err("no preferred addresses found; known addresses: []"),
                10250,
            ),
        ];
        for (n, want, port) in cases {
            match (preferred_address(n), want) {
                (Ok(a), Ok(w)) => assert_eq!(a, *w),
                (Err(e), Err(w)) => {
                    assert_eq!(e.code, 500);
                    assert_eq!(e.message, *w);
                    assert!(e.to_status().get("reason").is_none(), "no reason: {e:?}");
                }
                (got, want) => panic!("{n}: got {got:?}, want {want:?}"),
            }
            assert_eq!(kubelet_port(n), *port, "{n}");
        }
        let o = PodLogOptions {
            follow: true,
            ..Default::default()
        };
        assert_eq!(
            kubelet_log_url("10.0.0.1", 10250, "default", "web", "app", &o),
            "https://10.0.0.1:10250/containerLogs/default/web/app?follow=true"
        );
        assert_eq!(
            kubelet_log_url("fd00::1", 10250, "ns", "p", "c", &PodLogOptions::default()),
            "https://[fd00::1]:10250/containerLogs/ns/p/c"
        );
    }

    #[test]
    fn kubelet_errors_become_statuses() {
        // (code, body, reason, message)
        let cases: &[(u16, &str, &str, &str)] = &[
            (
                404,
                "404 page not found",
                "NotFound",
                "the server could not find the requested resource ( pods/log web)",
            ),
            (
                403,
                "Forbidden (user=kube-apiserver, verb=get, resource=nodes, subresource=proxy)",
                "Forbidden",
                "Forbidden (user=kube-apiserver, verb=get, resource=nodes, subresource=proxy) ( pods/log web)",
            ),
            (400, "bad tail", "BadRequest", "bad tail"),
            (500, "boom", "InternalError", "Internal error occurred: boom"),
            (
                502,
                "gw",
                "InternalError",
                "an error on the server (\"gw\") has prevented the request from succeeding ( pods/log web)",
            ),
            (
                418,
                "tea",
                "",
                "the server responded with the status code 418 but did not return more information ( pods/log web)",
            ),
        ];
        for (code, body, reason, message) in cases {
            let e = kubelet_error(*code, body, "web");
            assert_eq!(
                (e.code, e.reason, e.message.as_str()),
                (*code, *reason, *message)
            );
        }
        let status = kubelet_error(404, "gone", "web").to_status();
        assert_eq!(status["details"]["kind"], "pods/log");
        assert_eq!(status["details"]["name"], "web");
        assert_eq!(
            status["details"]["causes"],
            json!([{"reason": "UnexpectedServerResponse", "message": "gone"}])
        );
    }
}
