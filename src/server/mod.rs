//! nodelet's HTTP APIs.
//!
//! - The read-only API (`readOnlyPort`, off by default, unauthenticated): `/healthz`, `/pods`
//!   (a PodList in the Kubernetes JSON shape), `/events` (an EventList of the local event log),
//!   `/metrics` (Prometheus text), `/metrics/resource` (the kubelet's resource metrics),
//!   `/metrics/cadvisor` (cAdvisor's container series), `/metrics/probes` (the kubelet's
//!   prober metrics), `/stats/summary` (the kubelet's Summary API); [`status_page`] adds `/`
//!   (the status page) and `/node` there.
//! - The kubelet API (`port`, HTTPS, [`auth`] and [`tls`]): `/healthz`, `/pods`, `/metrics`,
//!   `/metrics/resource`, `/metrics/cadvisor`, `/metrics/probes` (authorized as
//!   `nodes/metrics`), `/stats/summary` (authorized as `nodes/stats`), `/configz` (the
//!   resolved configuration, `nodes/proxy`) and
//!   `/containerLogs/{namespace}/{pod}/{container}`, which the API server proxies for
//!   `kubectl logs`.

pub mod auth;
pub mod charts;
pub mod connection;
pub mod container_logs;
pub mod history;
pub mod status_page;
pub mod streaming;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use k8s_openapi::api::core::v1::{Event, Pod};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::kubelet_server::KubeletServer;
use crate::events::FieldSelector;
use crate::metrics::metrics;
use crate::stats::{Scope, SummarySource};

/// Everything the API reads, as small closures so the server does not depend on how the
/// rest of nodelet is wired.
#[derive(Clone)]
pub struct ApiState {
    pub pods: Arc<dyn Fn() -> Vec<Arc<Pod>> + Send + Sync>,
    /// `Ok` when healthy, else the reasons.
    pub health: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
    /// The local event log, least recently updated first (`EventRecorder::events`).
    pub events: Arc<dyn Fn() -> Vec<Event> + Send + Sync>,
    /// The Summary API; `None` answers `/stats/summary` with 404.
    pub summary: Option<Arc<dyn SummarySource>>,
    /// The body of `/configz` (`config::configz`), served on the kubelet API only, as the
    /// kubelet serves it among its debugging handlers; `None` answers 404.
    pub configz: Option<Arc<serde_json::Value>>,
}

pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/pods", get(pods))
        .route("/pods/", get(pods))
        .route("/events", get(events))
        .route("/events/", get(events))
        .route("/metrics", get(metrics_text))
        .route("/metrics/resource", get(metrics_resource))
        .route("/metrics/cadvisor", get(metrics_cadvisor))
        .route("/metrics/probes", get(metrics_probes))
        .route("/stats/summary", get(stats_summary))
        .with_state(state)
}

/// A container's log as the kubelet API serves it; implemented over the runtime and the pod
/// list in `main.rs`, so the server does not depend on how logs are found.
#[async_trait::async_trait]
pub trait ContainerLogSource: Send + Sync {
    /// The body of `GET /containerLogs/{namespace}/{pod}/{container}?{query}`, streamed.
    async fn container_logs(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        query: &str,
    ) -> Result<axum::body::Body, LogRefusal>;
}

/// Why a log request fails: the HTTP status and the kubelet's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRefusal {
    pub code: StatusCode,
    pub message: String,
}

/// The kubelet API (`port`) with every handler installed (the kubelet's defaults): see
/// [`kubelet_api_router_with`].
pub fn kubelet_api_router(
    state: ApiState,
    logs: Arc<dyn ContainerLogSource>,
    streaming: Option<streaming::StreamingState>,
    auth: Arc<auth::KubeletAuth>,
) -> Router {
    kubelet_api_router_with(state, logs, streaming, auth, &KubeletServer::default())
}

/// The kubelet API (`port`): what the read-only API serves but `/events`, plus `/configz`,
/// `/containerLogs` and the streaming endpoints when `handlers` installs the debugging
/// handlers, every request authenticated and authorized by `auth` — the endpoints the
/// settings turn off included, as the kubelet's filter runs before its disabled handlers.
pub fn kubelet_api_router_with(
    state: ApiState,
    logs: Arc<dyn ContainerLogSource>,
    streaming: Option<streaming::StreamingState>,
    auth: Arc<auth::KubeletAuth>,
    handlers: &KubeletServer,
) -> Router {
    let base = Router::new()
        .route("/healthz", get(healthz))
        .route("/pods", get(pods))
        .route("/pods/", get(pods))
        .route("/metrics", get(metrics_text))
        .route("/metrics/resource", get(metrics_resource))
        .route("/metrics/cadvisor", get(metrics_cadvisor))
        .route("/metrics/probes", get(metrics_probes))
        .route("/stats/summary", get(stats_summary));
    let mut router: Router = if handlers.enable_debugging_handlers {
        // `/configz` is one of the kubelet's `InstallAuthRequiredHandlers`, installed only
        // with the debugging handlers.
        let logs_router = Router::new()
            .route(
                "/containerLogs/{namespace}/{pod}/{container}",
                get(container_logs),
            )
            .with_state(logs);
        base.route("/configz", get(configz))
            .with_state(state)
            .merge(logs_router)
            .merge(
                streaming
                    .map(streaming::streaming_router)
                    .unwrap_or_default(),
            )
    } else {
        base.with_state(state)
    };
    for endpoint in disabled_endpoints(handlers) {
        let message = endpoint.message;
        let answer = move || async move { disabled_answer(message) };
        router = match endpoint.path.strip_suffix('/') {
            // A Go `ServeMux` pattern ending in `/` holds its whole subtree.
            Some(_) => router
                .route(endpoint.path, any(answer))
                .route(&format!("{}{{*rest}}", endpoint.path), any(answer)),
            None => router.route(endpoint.path, any(answer)),
        };
    }
    router.layer(axum::middleware::from_fn_with_state(
        auth,
        auth::require_auth,
    ))
}

/// An endpoint the kubelet answers with 405 and a message because its settings left the
/// handler out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DisabledEndpoint {
    /// A path, or with a trailing `/` a whole subtree.
    pub path: &'static str,
    pub message: &'static str,
}

/// What the kubelet's `NewServer` installs in place of the handlers the settings turn off:
/// without debugging handlers `InstallDebuggingDisabledHandlers` (run, exec, attach,
/// portForward, containerLogs, runningpods, pprof, logs; `/configz` and `/debug/flags/v` are
/// then simply absent); with them, `InstallSystemLogHandler`, `InstallProfilingHandler` and
/// `InstallDebugFlagsHandler` each put a disabled handler on their path when switched off.
pub fn disabled_endpoints(handlers: &KubeletServer) -> Vec<DisabledEndpoint> {
    let endpoint = |path, message| DisabledEndpoint { path, message };
    if !handlers.enable_debugging_handlers {
        return [
            "/run/",
            "/exec/",
            "/attach/",
            "/portForward/",
            "/containerLogs/",
            "/runningpods/",
            "/debug/pprof/",
            "/logs/",
        ]
        .into_iter()
        .map(|path| endpoint(path, "Debug endpoints are disabled."))
        .collect();
    }
    let mut out = Vec::new();
    if !handlers.enable_system_log_handler {
        out.push(endpoint("/logs/", "logs endpoint is disabled."));
    }
    if !handlers.enable_profiling_handler {
        out.push(endpoint("/debug/pprof/", "profiling endpoint is disabled."));
    }
    if !handlers.enable_debug_flags_handler {
        out.push(endpoint("/debug/flags/v", "flags endpoint is disabled."));
    }
    out
}

/// Go's `http.Error(w, message, http.StatusMethodNotAllowed)`.
fn disabled_answer(message: &str) -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        format!("{message}\n"),
    )
        .into_response()
}

async fn container_logs(
    State(logs): State<Arc<dyn ContainerLogSource>>,
    axum::extract::Path((namespace, pod, container)): axum::extract::Path<(String, String, String)>,
    uri: axum::http::Uri,
) -> Response {
    let query = uri.query().unwrap_or("");
    match logs
        .container_logs(&namespace, &pod, &container, query)
        .await
    {
        Ok(body) => ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response(),
        Err(refusal) => (
            refusal.code,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            refusal.message,
        )
            .into_response(),
    }
}

/// Only `/healthz`, for the separate healthz port (the kubelet's `healthzPort`).
pub fn healthz_router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .with_state(state)
}

async fn healthz(State(state): State<ApiState>) -> Response {
    match (state.health)() {
        Ok(()) => (StatusCode::OK, "ok").into_response(),
        Err(reason) => (StatusCode::INTERNAL_SERVER_ERROR, reason).into_response(),
    }
}

async fn pods(State(state): State<ApiState>) -> Response {
    let pods = (state.pods)();
    let items: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
    list_response("PodList", &items)
}

/// A `v1` list object (`PodList`, `EventList`) as JSON.
fn list_response<T: serde::Serialize>(kind: &str, items: &[T]) -> Response {
    let list = serde_json::json!({
        "kind": kind,
        "apiVersion": "v1",
        "metadata": {},
        "items": items,
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        list.to_string(),
    )
        .into_response()
}

/// `GET /events`: an `EventList`, least recently updated first. Filters, both optional and
/// combined with AND: `?pod=<uid>` (the events of one pod and its containers) and
/// `?fieldSelector=…` with the API server's syntax and event fields (so
/// `fieldSelector=involvedObject.uid=<uid>` is the same as `pod=<uid>`). A selector the API
/// server would reject is a 400 with its message, as a `Status`.
async fn events(
    State(state): State<ApiState>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let mut selector = match query.get("fieldSelector").map(|s| FieldSelector::parse(s)) {
        None => FieldSelector::default(),
        Some(Ok(selector)) => selector,
        Some(Err(e)) => return bad_request(&e.to_string()),
    };
    if let Some(uid) = query.get("pod") {
        selector = selector.and(FieldSelector::involved_uid(uid));
    }
    let items: Vec<Event> = (state.events)()
        .into_iter()
        .filter(|e| selector.matches(e))
        .collect();
    list_response("EventList", &items)
}

/// A `Status` failure as the API server sends it for a bad request.
fn bad_request(message: &str) -> Response {
    let status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "BadRequest",
        "code": 400,
    });
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        status.to_string(),
    )
        .into_response()
}

/// `GET /stats/summary[?only_cpu_and_memory=true]`: the Summary API JSON; a failure is a 500
/// with `Internal Error: <reason>`, as the kubelet answers.
async fn stats_summary(
    State(state): State<ApiState>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(source) = &state.summary else {
        return (StatusCode::NOT_FOUND, "404 page not found").into_response();
    };
    let scope = if query.get("only_cpu_and_memory").map(String::as_str) == Some("true") {
        Scope::CpuAndMemory
    } else {
        Scope::Full
    };
    match source.summary(scope).await {
        Ok(summary) => match serde_json::to_string(&summary) {
            Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("Internal Error: {e}"),
            )
                .into_response(),
        },
        Err(e) => {
            tracing::warn!(error = %e, "/stats/summary");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("Internal Error: {e}"),
            )
                .into_response()
        }
    }
}

/// `GET /metrics/resource`: the kubelet's resource metrics from the CPU-and-memory Summary (as
/// the kubelet's collector reads it); a failed read is the two scrape-error gauges at 1, still
/// a 200, as the kubelet answers. 404 without a Summary provider.
async fn metrics_resource(State(state): State<ApiState>) -> Response {
    let Some(source) = &state.summary else {
        return (StatusCode::NOT_FOUND, "404 page not found").into_response();
    };
    let summary = source.summary(Scope::CpuAndMemory).await;
    if let Err(e) = &summary {
        tracing::warn!(error = %e, "/metrics/resource");
    }
    (
        [(
            header::CONTENT_TYPE,
            crate::stats::resource_metrics::CONTENT_TYPE,
        )],
        crate::stats::resource_metrics::encode(summary.as_ref()),
    )
        .into_response()
}

/// `GET /metrics/cadvisor`: cAdvisor's container series from one gathering of the Summary's
/// readings; a failed gathering is `container_scrape_error 1`, still a 200, as cAdvisor's
/// collector answers. 404 without a Summary provider.
async fn metrics_cadvisor(State(state): State<ApiState>) -> Response {
    let Some(source) = &state.summary else {
        return (StatusCode::NOT_FOUND, "404 page not found").into_response();
    };
    let input = source.cadvisor().await;
    if let Err(e) = &input {
        tracing::warn!(error = %e, "/metrics/cadvisor");
    }
    (
        [(header::CONTENT_TYPE, crate::stats::cadvisor::CONTENT_TYPE)],
        crate::stats::cadvisor::encode(input.as_ref()),
    )
        .into_response()
}

/// `GET /metrics/probes`: the kubelet's prober metrics, per container.
async fn metrics_probes() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            crate::metrics::OPENMETRICS_CONTENT_TYPE,
        )],
        crate::metrics::probe_metrics().encode(),
    )
        .into_response()
}

/// `GET /configz`: the resolved configuration as the kubelet shows it.
async fn configz(State(state): State<ApiState>) -> Response {
    match &state.configz {
        Some(value) => (
            [(header::CONTENT_TYPE, "application/json")],
            value.to_string(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "404 page not found").into_response(),
    }
}

async fn metrics_text() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics().encode(),
    )
        .into_response()
}

#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct BindError {
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Binds now (so a taken port fails startup with a clear error) and serves until cancelled:
/// the accept loop is a task of `tasks` (the returned handle), each connection another, with
/// the limits of [`connection`]; on `cancel` the loop ends and the connections shut down
/// gracefully.
pub async fn serve(
    addr: SocketAddr,
    app: Router,
    cancel: CancellationToken,
    tasks: &TaskTracker,
) -> Result<tokio::task::JoinHandle<()>, BindError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { addr, source })?;
    Ok(serve_listener(listener, app, cancel, tasks))
}

/// Serves `app` on a listener already bound (by [`serve`], or by a test on port 0).
pub fn serve_listener(
    listener: tokio::net::TcpListener,
    app: Router,
    cancel: CancellationToken,
    tasks: &TaskTracker,
) -> tokio::task::JoinHandle<()> {
    if let Ok(bound) = listener.local_addr() {
        tracing::info!(%bound, "serving local API");
    }
    let app = connection::limited(app);
    let connections = tasks.clone();
    tasks.spawn(async move {
        while let Some((stream, remote)) = connection::accept(&listener, &cancel, "local API").await
        {
            let app = app.clone();
            let cancel = cancel.clone();
            connections.spawn(async move {
                if let Err(error) = connection::serve_connection(stream, app, cancel).await {
                    tracing::debug!(%error, %remote, "local API connection");
                }
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[tokio::test]
    async fn serves_pods_health_and_metrics() {
        let pod = Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some("web-node1".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        });
        let healthy = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let h = healthy.clone();
        let state = ApiState {
            pods: Arc::new(move || vec![pod.clone()]),
            health: Arc::new(move || {
                if h.load(std::sync::atomic::Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err("pleg is not healthy".into())
                }
            }),
            events: Arc::new(Vec::new),
            summary: None,
            configz: None,
        };
        let cancel = CancellationToken::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = serve_listener(listener, router(state), cancel.clone(), &TaskTracker::new());
        let client = reqwest::Client::new();
        let base = format!("http://{addr}");

        let list: serde_json::Value = client
            .get(format!("{base}/pods"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(list["kind"], "PodList");
        assert_eq!(list["items"][0]["metadata"]["name"], "web-node1");

        let r = client.get(format!("{base}/healthz")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        // No summary provider wired: the kubelet's 404.
        for path in ["/stats/summary", "/metrics/resource", "/metrics/cadvisor"] {
            let r = client.get(format!("{base}{path}")).send().await.unwrap();
            assert_eq!(r.status(), 404, "{path}");
        }
        healthy.store(false, std::sync::atomic::Ordering::SeqCst);
        let r = client.get(format!("{base}/healthz")).send().await.unwrap();
        assert_eq!(r.status(), 500);
        assert_eq!(r.text().await.unwrap(), "pleg is not healthy");

        let text = client
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            text.contains("# TYPE nodelet_pleg_relist_duration_seconds histogram"),
            "{text}"
        );

        cancel.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn serves_events_filtered_by_pod_or_field_selector() {
        use crate::clock::Clock;
        use crate::events::{container_ref, pod_ref, EventRecorder, EventType};
        use crate::podspec::ContainerKind;

        let pod = |name: &str, uid: &str| Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let (web, db) = (pod("web-n1", "u1"), pod("db-n1", "u2"));
        let recorder = EventRecorder::new(Clock::system(), "kubelet", "n1");
        let app = container_ref(&web, "app", ContainerKind::Regular);
        recorder.record(
            &app,
            EventType::Normal,
            "Pulling",
            "Pulling image \"busybox\"",
        );
        recorder.record(
            &pod_ref(&db),
            EventType::Warning,
            "FailedMount",
            "no such file",
        );
        recorder.record(
            &app,
            EventType::Warning,
            "BackOff",
            "Back-off restarting failed container app in pod web-n1_default(u1)",
        );

        let r = recorder.clone();
        let state = ApiState {
            pods: Arc::new(Vec::new),
            health: Arc::new(|| Ok(())),
            events: Arc::new(move || r.events()),
            summary: None,
            configz: None,
        };
        let cancel = CancellationToken::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = serve_listener(listener, router(state), cancel.clone(), &TaskTracker::new());
        let client = reqwest::Client::new();

        // (query, status, reasons in order)
        let cases: &[(&str, u16, &[&str])] = &[
            ("", 200, &["Pulling", "FailedMount", "BackOff"]),
            ("?pod=u1", 200, &["Pulling", "BackOff"]),
            (
                "?fieldSelector=involvedObject.uid%3Du2",
                200,
                &["FailedMount"],
            ),
            ("?fieldSelector=type%3DWarning&pod=u1", 200, &["BackOff"]),
            ("?pod=nope", 200, &[]),
            ("?fieldSelector=spec.nodeName%3Dn1", 400, &[]),
        ];
        for (query, status, reasons) in cases {
            let r = client
                .get(format!("http://{addr}/events{query}"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), *status, "{query}");
            let body: serde_json::Value = r.json().await.unwrap();
            if *status != 200 {
                assert_eq!(body["kind"], "Status", "{query}");
                assert_eq!(
                    body["message"], "field label not supported: spec.nodeName",
                    "{query}"
                );
                continue;
            }
            assert_eq!(body["kind"], "EventList", "{query}");
            assert_eq!(body["apiVersion"], "v1", "{query}");
            let got: Vec<&str> = body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["reason"].as_str().unwrap())
                .collect();
            assert_eq!(got, *reasons, "{query}");
        }

        let all: serde_json::Value = client
            .get(format!("http://{addr}/events"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let first = &all["items"][0];
        assert_eq!(first["kind"], "Event");
        assert_eq!(first["involvedObject"]["fieldPath"], "spec.containers{app}");
        assert_eq!(first["source"]["component"], "kubelet");
        assert_eq!(first["reportingInstance"], "n1");
        assert!(first["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("web-n1."));

        cancel.cancel();
        task.await.unwrap();
    }

    /// A provider that fails, as when the runtime does not answer.
    struct Unreachable;

    #[async_trait::async_trait]
    impl SummarySource for Unreachable {
        async fn summary(&self, _: Scope) -> crate::stats::Result<crate::stats::Summary> {
            Err(crate::stats::Error::Task("runtime down".into()))
        }
    }

    #[tokio::test]
    async fn a_failing_summary_is_a_500_with_the_reason() {
        let state = ApiState {
            pods: Arc::new(Vec::new),
            health: Arc::new(|| Ok(())),
            events: Arc::new(Vec::new),
            summary: Some(Arc::new(Unreachable)),
            configz: None,
        };
        let cancel = CancellationToken::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = serve_listener(listener, router(state), cancel.clone(), &TaskTracker::new());
        let r = reqwest::get(format!("http://{addr}/stats/summary"))
            .await
            .unwrap();
        assert_eq!(r.status(), 500);
        assert_eq!(
            r.text().await.unwrap(),
            "Internal Error: stats reader task: runtime down"
        );
        // /metrics/resource answers 200 with the error gauges up, as the kubelet's collector.
        let r = reqwest::get(format!("http://{addr}/metrics/resource"))
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        assert!(text.contains("\nresource_scrape_error 1\n"), "{text}");
        assert!(!text.contains("container_"), "{text}");
        // So does /metrics/cadvisor, with cAdvisor's one error gauge (this source has no
        // cgroup readings at all).
        let r = reqwest::get(format!("http://{addr}/metrics/cadvisor"))
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        assert!(text.ends_with("\ncontainer_scrape_error 1\n"), "{text}");
        // /configz is the kubelet API's only.
        let r = reqwest::get(format!("http://{addr}/configz"))
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        cancel.cancel();
        task.await.unwrap();
    }

    #[test]
    fn disabled_endpoints_follow_the_kubelets_new_server() {
        let on = KubeletServer::default();
        let table: &[(KubeletServer, &[(&str, &str)])] = &[
            (on.clone(), &[]),
            (
                KubeletServer {
                    enable_debugging_handlers: false,
                    // Without debugging handlers the companions do not matter.
                    enable_system_log_handler: false,
                    ..on.clone()
                },
                &[
                    ("/run/", "Debug endpoints are disabled."),
                    ("/exec/", "Debug endpoints are disabled."),
                    ("/attach/", "Debug endpoints are disabled."),
                    ("/portForward/", "Debug endpoints are disabled."),
                    ("/containerLogs/", "Debug endpoints are disabled."),
                    ("/runningpods/", "Debug endpoints are disabled."),
                    ("/debug/pprof/", "Debug endpoints are disabled."),
                    ("/logs/", "Debug endpoints are disabled."),
                ],
            ),
            (
                KubeletServer {
                    enable_system_log_handler: false,
                    ..on.clone()
                },
                &[("/logs/", "logs endpoint is disabled.")],
            ),
            (
                KubeletServer {
                    enable_profiling_handler: false,
                    enable_debug_flags_handler: false,
                    ..on.clone()
                },
                &[
                    ("/debug/pprof/", "profiling endpoint is disabled."),
                    ("/debug/flags/v", "flags endpoint is disabled."),
                ],
            ),
        ];
        for (settings, want) in table {
            let got: Vec<(&str, &str)> = disabled_endpoints(settings)
                .into_iter()
                .map(|e| (e.path, e.message))
                .collect();
            assert_eq!(&got, want, "{settings:?}");
        }
    }
}
