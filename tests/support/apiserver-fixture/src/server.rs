//! HTTP: routes, resource handlers and watch streams.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::delete::DeleteOptions;
use crate::discovery;
use crate::error::ApiError;
use crate::log::{self, RequestLog};
use crate::patch::PatchType;
use crate::path;
use crate::protobuf;
use crate::resource::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{
    to_served, EventType, FieldValidation, Store, StoredEvent, WatchStart, WriteOptions,
};
use crate::table;

/// Shared by all handlers.
pub struct AppState {
    pub store: Arc<Store>,
    /// Cancelled when the fixture stops listening; watch streams end with it.
    pub shutdown: Mutex<CancellationToken>,
    pub bookmark_interval: Duration,
    pub server_address: Mutex<String>,
    pub kubelet_client: crate::podlog::KubeletClientConfig,
    pub static_tokens: std::collections::BTreeMap<String, crate::review::UserInfo>,
    pub access_rules: Vec<crate::review::AccessRule>,
    /// Tokens issued through TokenRequest, the ones TokenReview accepts as service account tokens.
    pub issued_tokens: Mutex<std::collections::HashSet<String>>,
    /// What the metrics-server stand-in scraped (`metrics.k8s.io`).
    pub metrics: Arc<crate::metrics::MetricsStore>,
    /// HTTPS, client authentication and the CA that signs CSRs (`FixtureOptions::tls`).
    pub tls: Option<Arc<crate::tls::FixtureTls>>,
    /// The CSR signer's lifetime rules.
    pub signing: crate::csr::SigningPolicy,
    /// Resources (by plural) whose reads are Forbidden, as for a client that lacks the RBAC
    /// rule (`Fixture::forbid_reads`).
    pub forbidden_reads: Mutex<std::collections::BTreeSet<&'static str>>,
}

impl AppState {
    fn shutdown_token(&self) -> CancellationToken {
        self.shutdown
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

pub fn router(state: Arc<AppState>, request_log: Arc<RequestLog>) -> Router {
    Router::new()
        .route(
            "/version",
            get(|State(app): State<Arc<AppState>>| async move {
                json_response(StatusCode::OK, &app.store.profile().version_info())
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/api", get(api_versions))
        .route(
            "/api/v1",
            get(|| async { discovery_response(discovery::resource_list("", "v1")) }),
        )
        .route(
            "/apis",
            get(|| async { json_response(StatusCode::OK, &discovery::api_group_list()) }),
        )
        .route(
            "/apis/{group}",
            get(|Path(group): Path<String>| async move {
                discovery_response(discovery::api_group(&group))
            }),
        )
        .route(
            "/apis/{group}/{version}",
            get(
                |Path((group, version)): Path<(String, String)>| async move {
                    discovery_response(discovery::resource_list(&group, &version))
                },
            ),
        )
        .route(
            "/openapi/v3",
            get(|| async { json_response(StatusCode::OK, &discovery::openapi_v3_root()) }),
        )
        .route(
            "/openapi/v3/{*path}",
            get(|Path(p): Path<String>| async move {
                discovery_response(discovery::openapi_v3_document(&p))
            }),
        )
        .route(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            axum::routing::post(token_review),
        )
        .route(
            "/api/v1/nodes/{name}/proxy",
            axum::routing::any(node_proxy_root),
        )
        .route(
            "/api/v1/nodes/{name}/proxy/{*path}",
            axum::routing::any(node_proxy),
        )
        .route("/apis/metrics.k8s.io/v1beta1/nodes", get(node_metrics_list))
        .route(
            "/apis/metrics.k8s.io/v1beta1/nodes/{name}",
            get(node_metrics_get),
        )
        .route("/apis/metrics.k8s.io/v1beta1/pods", get(pod_metrics_all))
        .route(
            "/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods",
            get(pod_metrics_list),
        )
        .route(
            "/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/{name}",
            get(pod_metrics_get),
        )
        .route(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            axum::routing::post(access_review),
        )
        .fallback(resources)
        .with_state(state.clone())
        .layer(axum::middleware::from_fn_with_state(
            state,
            crate::auth::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            request_log,
            log::log_requests,
        ))
}

async fn api_versions(State(app): State<Arc<AppState>>) -> Response {
    let address = app
        .server_address
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    json_response(StatusCode::OK, &discovery::api_versions(&address))
}

fn discovery_response(doc: Option<Value>) -> Response {
    match doc {
        Some(d) => json_response(StatusCode::OK, &d),
        None => error_response(&ApiError::path_not_found()),
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

pub fn error_response(err: &ApiError) -> Response {
    let status = StatusCode::from_u16(err.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, &err.to_status())
}

fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {}", serde_json::Value::String(w.clone()));
        if let Ok(v) = HeaderValue::from_str(&text) {
            response.headers_mut().append("Warning", v);
        }
    }
    response
}

/// Query parameters of one request.
struct Query(Vec<(String, String)>);

impl Query {
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some("1" | "true"))
    }

    fn write_options(&self) -> Result<WriteOptions, ApiError> {
        let field_validation = match self.get("fieldValidation") {
            None | Some("") | Some("Warn") => FieldValidation::Warn,
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
                )))
            }
        };
        let dry_run = match self.get("dryRun") {
            None | Some("") => false,
            Some("All") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "dryRun: Unsupported value: {other:?}: supported values: \"All\""
                )))
            }
        };
        Ok(WriteOptions {
            dry_run,
            field_validation,
        })
    }

    fn selectors(
        &self,
        rt: &ResourceType,
        name: Option<&str>,
    ) -> Result<(LabelSelector, FieldSelector), ApiError> {
        let labels = LabelSelector::parse(self.get("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let mut field_text = self.get("fieldSelector").unwrap_or("").to_string();
        if let Some(name) = name {
            if !field_text.is_empty() {
                field_text.push(',');
            }
            field_text.push_str(&format!("metadata.name={name}"));
        }
        let fields =
            FieldSelector::parse(&field_text).map_err(|e| ApiError::bad_request(e.to_string()))?;
        fields
            .check_supported(rt.storage)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok((labels, fields))
    }
}

fn parse_json_body(
    rt: &ResourceType,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Value, ApiError> {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if content_type.contains("protobuf") {
        return protobuf::decode(body).map_err(|e| match e {
            protobuf::ProtobufError::UnsupportedKind(_) => {
                ApiError::unsupported_media_type(content_type, ApiError::BODY_MEDIA_TYPES)
            }
            other => ApiError::bad_request(other.to_string()),
        });
    }
    if content_type.contains("cbor") {
        return Err(ApiError::unsupported_media_type(
            content_type,
            ApiError::BODY_MEDIA_TYPES,
        ));
    }
    if content_type.contains("yaml") {
        return serde_yaml::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: {e}",
                rt.kind, rt.version, rt.kind
            ))
        });
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

/// Strips `apiVersion`/`kind` from list items, as the API server's typed lists encode them.
fn list_item(mut obj: Value) -> Value {
    if let Some(m) = obj.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    obj
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

fn review_body(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

async fn token_review(State(app): State<Arc<AppState>>, body: Bytes) -> Response {
    let store = app.store.clone();
    let lookup = |plural: &'static str| {
        let store = store.clone();
        move |ns: &str, name: &str| {
            crate::resource::find_by_plural("", "v1", plural)
                .and_then(|rt| store.get(rt, Some(ns), name).ok())
        }
    };
    let service_account = lookup("serviceaccounts");
    let pod = lookup("pods");
    let issued = app
        .issued_tokens
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let ctx = crate::review::TokenReviewContext {
        now: app.store.now(),
        static_tokens: &app.static_tokens,
        issued: &issued,
        service_account: &service_account,
        pod: &pod,
    };
    match review_body(&body).and_then(|b| crate::review::review_token(&b, &ctx)) {
        Ok(answer) => json_response(StatusCode::CREATED, &answer),
        Err(e) => error_response(&e),
    }
}

async fn access_review(State(app): State<Arc<AppState>>, body: Bytes) -> Response {
    match review_body(&body).and_then(|b| crate::review::review_access(&b, &app.access_rules)) {
        Ok(answer) => json_response(StatusCode::CREATED, &answer),
        Err(e) => error_response(&e),
    }
}

async fn node_proxy_root(
    State(app): State<Arc<AppState>>,
    Path(name): Path<String>,
    method: Method,
    uri: Uri,
) -> Response {
    node_proxy_to(&app, &name, "", &method, &uri).await
}

async fn node_proxy(
    State(app): State<Arc<AppState>>,
    Path((name, path)): Path<(String, String)>,
    method: Method,
    uri: Uri,
) -> Response {
    node_proxy_to(&app, &name, &path, &method, &uri).await
}

/// `GET nodes/{name}/proxy/{path}` (what `kubectl get --raw` and metrics scrapers use): the
/// node's preferred address and kubelet port, as for `pods/log`, then `GET https://...{path}`
/// with the kubelet client certificate; the node agent's status, content type and body come
/// back as they are. A node that cannot be reached is 503 `error trying to reach service: ...`.
/// Only `GET` is proxied (405 otherwise).
async fn node_proxy_to(
    app: &AppState,
    name: &str,
    path: &str,
    method: &Method,
    uri: &Uri,
) -> Response {
    if method != Method::GET {
        return error_response(&ApiError::method_not_allowed());
    }
    let result = async {
        let nodes = crate::resource::find_by_plural("", "v1", "nodes")
            .ok_or_else(|| ApiError::internal("resource types missing"))?;
        let node = app.store.get(nodes, None, name)?;
        let address = crate::podlog::preferred_address(&node)?;
        let port = crate::podlog::kubelet_port(&node);
        let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
        let url = format!("https://{address}:{port}/{path}{query}");
        let client = crate::podlog::kubelet_http_client(&app.kubelet_client)?;
        let unreachable = |e: reqwest::Error| ApiError {
            code: 503,
            reason: "ServiceUnavailable",
            message: format!("error trying to reach service: {e}"),
            details: None,
        };
        let upstream = client.get(&url).send().await.map_err(unreachable)?;
        let status =
            StatusCode::from_u16(upstream.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let content_type = upstream.headers().get(CONTENT_TYPE).cloned();
        let body = upstream.bytes().await.map_err(unreachable)?;
        let mut response = (status, body).into_response();
        if let Some(ct) = content_type {
            response.headers_mut().insert(CONTENT_TYPE, ct);
        }
        Ok::<Response, ApiError>(response)
    }
    .await;
    result.unwrap_or_else(|e| error_response(&e))
}

fn metrics_list(kind: &str, items: Vec<Value>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "kind": kind,
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {},
            "items": items,
        }),
    )
}

fn metrics_item(kind: &str, mut item: Value) -> Response {
    item["kind"] = json!(kind);
    item["apiVersion"] = json!("metrics.k8s.io/v1beta1");
    json_response(StatusCode::OK, &item)
}

fn node_metrics(app: &AppState) -> Vec<Value> {
    app.metrics
        .node_metrics(&|name| crate::metrics::object_labels(&app.store, "nodes", None, name))
}

fn pod_metrics(app: &AppState, namespace: Option<&str>) -> Vec<Value> {
    app.metrics.pod_metrics(namespace, &|ns, name| {
        crate::metrics::object_labels(&app.store, "pods", Some(ns), name)
    })
}

async fn node_metrics_list(State(app): State<Arc<AppState>>) -> Response {
    metrics_list("NodeMetricsList", node_metrics(&app))
}

async fn node_metrics_get(State(app): State<Arc<AppState>>, Path(name): Path<String>) -> Response {
    match node_metrics(&app)
        .into_iter()
        .find(|m| m["metadata"]["name"] == name.as_str())
    {
        Some(item) => metrics_item("NodeMetrics", item),
        None => error_response(&crate::metrics::not_found("nodemetrics", &name)),
    }
}

async fn pod_metrics_all(State(app): State<Arc<AppState>>) -> Response {
    metrics_list("PodMetricsList", pod_metrics(&app, None))
}

async fn pod_metrics_list(
    State(app): State<Arc<AppState>>,
    Path(namespace): Path<String>,
) -> Response {
    metrics_list("PodMetricsList", pod_metrics(&app, Some(&namespace)))
}

async fn pod_metrics_get(
    State(app): State<Arc<AppState>>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    match pod_metrics(&app, Some(&namespace))
        .into_iter()
        .find(|m| m["metadata"]["name"] == name.as_str())
    {
        Some(item) => metrics_item("PodMetrics", item),
        None => error_response(&crate::metrics::not_found("podmetrics", &name)),
    }
}

fn get_pod(app: &AppState, namespace: &str, name: &str) -> Result<Value, ApiError> {
    let pods = crate::resource::find_by_plural("", "v1", "pods")
        .ok_or_else(|| ApiError::internal("resource types missing"))?;
    app.store.get(pods, Some(namespace), name)
}

/// The node agent of a pod (`GetConnectionInfo`): its node's preferred address and kubelet port,
/// `None` for an unbound pod.
fn node_connection(app: &AppState, pod: &Value) -> Result<Option<(String, i64)>, ApiError> {
    let node_name = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if node_name.is_empty() {
        return Ok(None);
    }
    let nodes = crate::resource::find_by_plural("", "v1", "nodes")
        .ok_or_else(|| ApiError::internal("resource types missing"))?;
    let node = app.store.get(nodes, None, node_name)?;
    Ok(Some((
        crate::podlog::preferred_address(&node)?,
        crate::podlog::kubelet_port(&node),
    )))
}

/// `GET pods/{name}/log`: validation, container, node address, then the node agent's stream.
async fn pod_log(
    app: &Arc<AppState>,
    namespace: &str,
    name: &str,
    query: &str,
) -> Result<Response, ApiError> {
    use crate::podlog;
    let opts = podlog::parse_log_options(&log::parse_query(query))?;
    podlog::validate_log_options(&opts, name)?;
    let pod = get_pod(app, namespace, name)?;
    let container = podlog::select_container(&pod, opts.container.as_deref())?;
    let Some((address, port)) = node_connection(app, &pod)? else {
        // LogLocation returns no location for an unbound pod: an empty 200 answer.
        return Ok(podlog::text_response(Body::empty()));
    };
    let url = podlog::kubelet_log_url(&address, port, namespace, name, &container, &opts);
    podlog::stream_from_kubelet(
        &app.kubelet_client,
        &url,
        opts.insecure_skip_tls_verify_backend,
        name,
    )
    .await
}

/// `GET|POST pods/{name}/exec|attach|portforward`: options, pod, container, node (as
/// `streamLocation`/`PortForwardLocation`), then the upgrade-aware proxy to the node agent.
async fn pod_stream(
    app: &Arc<AppState>,
    kind: crate::podstream::StreamKind,
    namespace: &str,
    name: &str,
    mut request: axum::extract::Request,
) -> Result<Response, ApiError> {
    use crate::podstream;
    if request.method() != Method::GET && request.method() != Method::POST {
        return Err(ApiError::method_not_allowed());
    }
    let query = log::parse_query(request.uri().query().unwrap_or(""));
    let opts = podstream::parse_stream_options(kind, &query)?;
    let pod = get_pod(app, namespace, name)?;
    let container = if kind.has_container() {
        crate::podlog::select_container(&pod, opts.container.as_deref())?
    } else {
        String::new()
    };
    let Some((address, port)) = node_connection(app, &pod)? else {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    };
    let headers = request.headers().clone();
    if !podstream::is_upgrade_request(&headers) {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    if podstream::is_websocket_request(&headers) {
        return Err(podstream::websocket_rejected());
    }
    let client_upgrade = request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>()
        .ok_or_else(|| ApiError::internal("request connection cannot be hijacked"))?;
    let target = podstream::UpgradeTarget {
        address: &address,
        port,
        target: podstream::kubelet_stream_target(kind, namespace, name, &container, &opts),
        method: request.method().clone(),
        headers: podstream::forwarded_headers(&headers),
    };
    podstream::proxy_upgrade(
        &app.kubelet_client,
        target,
        client_upgrade,
        app.shutdown_token(),
    )
    .await
}

async fn resources(State(app): State<Arc<AppState>>, request: axum::extract::Request) -> Response {
    if let Ok(target) = path::parse(request.uri().path()) {
        let stream_kind = target
            .subresource
            .as_deref()
            .and_then(crate::podstream::StreamKind::from_subresource);
        match (stream_kind, target.namespace, target.name) {
            (Some(kind), Some(ns), Some(name)) => {
                return pod_stream(&app, kind, &ns, &name, request)
                    .await
                    .unwrap_or_else(|e| error_response(&e));
            }
            (Some(_), _, _) => return error_response(&ApiError::method_not_allowed()),
            _ => {}
        }
    }
    let (parts, body) = request.into_parts();
    let user = parts
        .extensions
        .get::<crate::auth::Authenticated>()
        .map(|a| a.0.clone());
    let (method, uri, headers) = (parts.method, parts.uri, parts.headers);
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => return error_response(&ApiError::bad_request(format!("reading body: {e}"))),
    };
    if let Ok(target) = path::parse(uri.path()) {
        if let Some(e) = forbidden_read(&app, &method, &uri, &target, user.as_ref()) {
            return error_response(&e);
        }
        if target.subresource.as_deref() == Some("log") {
            let result = match (method, target.namespace, target.name) {
                (Method::GET, Some(ns), Some(name)) => {
                    pod_log(&app, &ns, &name, uri.query().unwrap_or("")).await
                }
                _ => Err(ApiError::method_not_allowed()),
            };
            return result.unwrap_or_else(|e| error_response(&e));
        }
    }
    match handle(&app, &method, &uri, &headers, &body, user.as_ref()) {
        Ok(response) => response,
        Err(e) => error_response(&e),
    }
}

/// The authorizer's 403 for a read of a resource `Fixture::forbid_reads` named.
fn forbidden_read(
    app: &AppState,
    method: &Method,
    uri: &axum::http::Uri,
    target: &path::Target,
    user: Option<&crate::review::UserInfo>,
) -> Option<ApiError> {
    if *method != Method::GET
        || !app
            .forbidden_reads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(target.resource.plural)
    {
        return None;
    }
    let watch = uri
        .query()
        .unwrap_or("")
        .split('&')
        .any(|p| p == "watch=1" || p == "watch=true");
    let verb = match (&target.name, watch) {
        (Some(_), _) => "get",
        (None, true) => "watch",
        (None, false) => "list",
    };
    let user = user.map_or("system:anonymous", |u| u.username.as_str());
    Some(ApiError::forbidden_user(
        user,
        verb,
        target.resource,
        target.name.as_deref(),
        target.namespace.as_deref(),
        target.subresource.as_deref(),
    ))
}

/// `PUT certificatesigningrequests/<name>/approval`: the conditions from the body, then — as
/// the controller manager's signer does for an approved request — the certificate (or a Failed
/// condition) in a second write.
fn approve_csr(
    app: &Arc<AppState>,
    rt: &'static ResourceType,
    name: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let request = parse_json_body(rt, headers, body)?;
    let now = app.store.now();
    let written = app.store.modify(rt, None, name, |old| {
        crate::csr::apply_approval(old, &request, now)
    })?;
    sign_csr_if_approved(app, rt, name);
    Ok(json_response(StatusCode::OK, &written.object))
}

/// Issues the certificate of an approved CSR with the fixture's CA (kube-controller-manager's
/// `csrsigning` controller); a fixture without TLS has no CA and signs nothing.
fn sign_csr_if_approved(app: &Arc<AppState>, rt: &'static ResourceType, name: &str) {
    let Some(tls) = app.tls.clone() else { return };
    let policy = app.signing;
    let result = app.store.modify(rt, None, name, |old| {
        if !crate::csr::should_sign(old) {
            return Ok(old.clone());
        }
        let mut new = old.clone();
        new["status"] = crate::csr::signed_status(old, &tls.authority, &policy, app.store.now());
        Ok(new)
    });
    if let Err(error) = result {
        tracing::warn!(csr = name, %error, "signing the certificate signing request");
    }
}

/// `pods/NAME/ephemeralcontainers` (what `kubectl debug` writes): GET gives the pod; PUT takes
/// a pod, PATCH a JSON, merge or strategic merge patch of the served pod; of either only
/// `spec.ephemeralContainers` is written (`Store::update_ephemeral_containers`).
fn ephemeral_containers(
    app: &Arc<AppState>,
    rt: &'static ResourceType,
    ns: &str,
    name: &str,
    method: &Method,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let store = &app.store;
    let requested = match *method {
        Method::GET => {
            return Ok(json_response(
                StatusCode::OK,
                &store.get(rt, Some(ns), name)?,
            ))
        }
        Method::PUT => parse_json_body(rt, headers, body)?,
        Method::PATCH => {
            let content_type = headers
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let patch_type = PatchType::from_content_type(content_type)
                .filter(|t| *t != PatchType::Apply)
                .ok_or_else(|| {
                    ApiError::unsupported_media_type(content_type, ApiError::PATCH_MEDIA_TYPES)
                })?;
            let patch_body: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            let served = store.get(rt, Some(ns), name)?;
            crate::patch::apply(patch_type, rt.kind, &served, &patch_body).map_err(|e| match e {
                crate::patch::PatchError::Malformed(m) => ApiError::bad_request(m),
                crate::patch::PatchError::Unapplicable(m) => ApiError {
                    code: 422,
                    reason: "Invalid",
                    message: m,
                    details: None,
                },
            })?
        }
        _ => return Err(ApiError::method_not_allowed()),
    };
    let written = store.update_ephemeral_containers(ns, name, &requested)?;
    Ok(json_response(StatusCode::OK, &written.object))
}

/// The pod `resize` subresource: GET gives the pod; PUT and PATCH (JSON, merge, strategic
/// merge) may change only the containers' resources and resize policies.
fn resize_pod(
    app: &Arc<AppState>,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    method: &Method,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let store = &app.store;
    let served = store.get(rt, ns, name)?;
    let proposed = match *method {
        Method::GET => return Ok(json_response(StatusCode::OK, &served)),
        Method::PUT => parse_json_body(rt, headers, body)?,
        Method::PATCH => {
            let content_type = headers
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let patch_type = PatchType::from_content_type(content_type)
                .filter(|t| *t != PatchType::Apply)
                .ok_or_else(|| {
                    ApiError::unsupported_media_type(content_type, ApiError::PATCH_MEDIA_TYPES)
                })?;
            let patch_body: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            crate::patch::apply(patch_type, rt.kind, &served, &patch_body)
                .map_err(|e| ApiError::bad_request(format!("{e:?}")))?
        }
        _ => return Err(ApiError::method_not_allowed()),
    };
    let written = store.modify(rt, ns, name, |old| {
        crate::pod::apply_resize(old, &proposed)
            .map_err(|errors| ApiError::invalid(rt, name, &errors))
    })?;
    Ok(json_response(StatusCode::OK, &written.object))
}

fn handle(
    app: &Arc<AppState>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
    user: Option<&crate::review::UserInfo>,
) -> Result<Response, ApiError> {
    let target = path::parse(uri.path()).map_err(|_| ApiError::path_not_found())?;
    let query = Query(log::parse_query(uri.query().unwrap_or("")));
    let rt = target.resource;
    let ns = target.namespace.as_deref();
    let status = target.subresource.is_some();
    let store = &app.store;
    let csr = rt.storage == "certificatesigningrequests";
    if let (true, Some(name), Some("resize")) = (
        rt.is_pod(),
        target.name.as_deref(),
        target.subresource.as_deref(),
    ) {
        return resize_pod(app, rt, ns, name, method, headers, body);
    }
    match (method.clone(), target.name.as_deref()) {
        (Method::PUT, Some(name)) if csr && target.subresource.as_deref() == Some("approval") => {
            approve_csr(app, rt, name, headers, body)
        }
        (Method::PATCH, Some(_)) if csr && target.subresource.as_deref() == Some("approval") => {
            Err(ApiError::method_not_allowed())
        }
        (Method::POST, None) if csr => {
            let opts = query.write_options()?;
            let mut obj = parse_json_body(rt, headers, body)?;
            crate::csr::prepare_create(&mut obj, user)?;
            let written = store.create(rt, ns, obj, &opts)?;
            Ok(with_warnings(
                json_response(StatusCode::CREATED, &written.object),
                &written.warnings,
            ))
        }
        (method, Some(name)) if target.subresource.as_deref() == Some("ephemeralcontainers") => {
            ephemeral_containers(
                app,
                rt,
                ns.unwrap_or("default"),
                name,
                &method,
                headers,
                body,
            )
        }
        (Method::POST, Some(name)) if target.subresource.as_deref() == Some("token") => {
            let request = parse_json_body(rt, headers, body)?;
            let issued = store.create_token(ns.unwrap_or("default"), name, &request)?;
            if let Some(token) = issued.pointer("/status/token").and_then(Value::as_str) {
                app.issued_tokens
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(token.to_string());
            }
            Ok(json_response(StatusCode::CREATED, &issued))
        }
        (_, Some(_)) if target.subresource.as_deref() == Some("token") => {
            Err(ApiError::method_not_allowed())
        }
        (Method::GET, name) if query.flag("watch") => {
            let (labels, fields) = query.selectors(rt, name)?;
            let as_table = wants_table(headers);
            Ok(watch_response(
                app,
                rt,
                ns.map(String::from),
                labels,
                fields,
                &query,
                as_table,
            ))
        }
        (Method::GET, None) => {
            let (labels, fields) = query.selectors(rt, None)?;
            let (items, rv) = store.list(rt, ns, &labels, &fields);
            if wants_table(headers) {
                return Ok(json_response(
                    StatusCode::OK,
                    &table::table(rt, &items, &rv.to_string(), store.now()),
                ));
            }
            let items: Vec<Value> = items.into_iter().map(list_item).collect();
            let list = json!({
                "kind": rt.list_kind(),
                "apiVersion": rt.api_version(),
                "metadata": {"resourceVersion": rv.to_string()},
                "items": items,
            });
            Ok(json_response(StatusCode::OK, &list))
        }
        (Method::GET, Some(name)) => {
            let obj = store.get(rt, ns, name)?;
            if wants_table(headers) && !status {
                let rv = obj
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                return Ok(json_response(
                    StatusCode::OK,
                    &table::table(rt, &[obj], &rv, store.now()),
                ));
            }
            Ok(json_response(StatusCode::OK, &obj))
        }
        (Method::POST, Some(name)) if target.subresource.as_deref() == Some("binding") => {
            let binding = parse_json_body(rt, headers, body)?;
            let node = binding
                .pointer("/target/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if node.is_empty() {
                return Err(ApiError::invalid(
                    rt,
                    name,
                    &[crate::error::FieldError::required("target.name", "")],
                ));
            }
            store.bind_pod(ns.unwrap_or("default"), name, node)?;
            Ok(json_response(
                StatusCode::CREATED,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            ))
        }
        (_, Some(_)) if target.subresource.as_deref() == Some("binding") => {
            Err(ApiError::method_not_allowed())
        }
        (Method::POST, None) => {
            if rt.namespaced && ns.is_none() {
                return Err(ApiError::method_not_allowed());
            }
            let opts = query.write_options()?;
            let obj = parse_json_body(rt, headers, body)?;
            let written = store.create(rt, ns, obj, &opts)?;
            Ok(with_warnings(
                json_response(StatusCode::CREATED, &written.object),
                &written.warnings,
            ))
        }
        (Method::PUT, Some(name)) => {
            let opts = query.write_options()?;
            let obj = parse_json_body(rt, headers, body)?;
            let written = store.update(rt, ns, name, obj, status, &opts)?;
            let code = if written.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(with_warnings(
                json_response(code, &written.object),
                &written.warnings,
            ))
        }
        (Method::PATCH, Some(name)) => {
            let opts = query.write_options()?;
            let content_type = headers
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let patch_type = PatchType::from_content_type(content_type).ok_or_else(|| {
                ApiError::unsupported_media_type(content_type, ApiError::PATCH_MEDIA_TYPES)
            })?;
            if patch_type == PatchType::Apply && query.get("fieldManager").unwrap_or("").is_empty()
            {
                return Err(ApiError {
                    code: 422,
                    reason: "Invalid",
                    message: "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".into(),
                    details: None,
                });
            }
            let patch_body: Value = if patch_type == PatchType::Apply {
                serde_yaml::from_slice(body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
            } else {
                serde_json::from_slice(body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?
            };
            let written = store.patch(rt, ns, name, patch_type, &patch_body, status, &opts)?;
            let code = if written.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(with_warnings(
                json_response(code, &written.object),
                &written.warnings,
            ))
        }
        (Method::DELETE, name) => {
            if status {
                return Err(ApiError::method_not_allowed());
            }
            let options = delete_options(&query, body)?;
            match name {
                Some(name) => Ok(json_response(
                    StatusCode::OK,
                    &store.delete(rt, ns, name, &options)?,
                )),
                None => {
                    let (labels, fields) = query.selectors(rt, None)?;
                    let deleted = store.delete_collection(rt, ns, &labels, &fields, &options)?;
                    let items: Vec<Value> = deleted
                        .into_iter()
                        .filter(|d| d["kind"] != "Status")
                        .map(list_item)
                        .collect();
                    let list = json!({
                        "kind": rt.list_kind(),
                        "apiVersion": rt.api_version(),
                        "metadata": {"resourceVersion": store.resource_version().to_string()},
                        "items": items,
                    });
                    Ok(json_response(StatusCode::OK, &list))
                }
            }
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// DeleteOptions from the query, then the body (the body wins), as the API server decodes them.
fn delete_options(query: &Query, body: &Bytes) -> Result<DeleteOptions, ApiError> {
    let mut options = DeleteOptions::default();
    if let Some(g) = query.get("gracePeriodSeconds") {
        let grace = g.parse::<i64>().map_err(|_| {
            ApiError::bad_request(format!("gracePeriodSeconds: invalid value {g:?}"))
        })?;
        options.grace_period_seconds = Some(grace);
    }
    if let Some(p) = query.get("propagationPolicy") {
        options.propagation_policy = Some(p.to_string());
    }
    if let Some(d) = query.get("dryRun") {
        options.dry_run = vec![d.to_string()];
    }
    if !body.is_empty() {
        let from_body: DeleteOptions = serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!(
                "DeleteOptions in version \"v1\" cannot be handled as a DeleteOptions: {e}"
            ))
        })?;
        if from_body.grace_period_seconds.is_some() {
            options.grace_period_seconds = from_body.grace_period_seconds;
        }
        if from_body.preconditions.is_some() {
            options.preconditions = from_body.preconditions;
        }
        if from_body.propagation_policy.is_some() {
            options.propagation_policy = from_body.propagation_policy;
        }
        if from_body.orphan_dependents.is_some() {
            options.orphan_dependents = from_body.orphan_dependents;
        }
        if !from_body.dry_run.is_empty() {
            options.dry_run = from_body.dry_run;
        }
    }
    Ok(options)
}

/// Which of a watcher's events to send, with the watch cache's selector transitions.
pub struct WatchFilter {
    pub storage: String,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl WatchFilter {
    fn matches(&self, obj: &Value) -> bool {
        self.labels.matches_object(obj) && self.fields.matches_object(&self.storage, obj)
    }

    /// The event type and object to send for a stored event, if any.
    pub fn view(&self, event: &StoredEvent) -> Option<(EventType, Value)> {
        if event.storage != self.storage {
            return None;
        }
        if self
            .namespace
            .as_deref()
            .is_some_and(|ns| ns != event.namespace)
        {
            return None;
        }
        let now_matches = self.matches(&event.object);
        match event.event_type {
            EventType::Added | EventType::Deleted => {
                now_matches.then(|| (event.event_type, event.object.clone()))
            }
            EventType::Modified => {
                let before = event
                    .previous
                    .as_ref()
                    .map_or(now_matches, |p| self.matches(p));
                match (before, now_matches) {
                    (true, true) => Some((EventType::Modified, event.object.clone())),
                    (false, true) => Some((EventType::Added, event.object.clone())),
                    (true, false) => {
                        // The previous content, at the event's resourceVersion.
                        let mut old = event
                            .previous
                            .clone()
                            .unwrap_or_else(|| event.object.clone());
                        if let Some(m) = old.get_mut("metadata").and_then(Value::as_object_mut) {
                            m.insert(
                                "resourceVersion".into(),
                                json!(event.resource_version.to_string()),
                            );
                        }
                        Some((EventType::Deleted, old))
                    }
                    (false, false) => None,
                }
            }
        }
    }
}

fn watch_line(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn bookmark(rt: &ResourceType, rv: u64, initial_events_end: bool) -> Value {
    let mut obj = json!({
        "kind": rt.kind,
        "apiVersion": rt.api_version(),
        "metadata": {"resourceVersion": rv.to_string(), "creationTimestamp": null}
    });
    if initial_events_end {
        obj["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    obj
}

fn watch_response(
    app: &Arc<AppState>,
    rt: &'static ResourceType,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    query: &Query,
    as_table: bool,
) -> Response {
    let send_initial = query.flag("sendInitialEvents");
    let bookmarks = query.flag("allowWatchBookmarks");
    let rv_param = query.get("resourceVersion").unwrap_or("");
    let start = if send_initial || rv_param.is_empty() || rv_param == "0" {
        WatchStart::InitialState
    } else {
        match rv_param.parse::<u64>() {
            Ok(rv) => WatchStart::After(rv),
            Err(_) => {
                return error_response(&ApiError::bad_request(format!(
                    "resourceVersion: Invalid value: {rv_param:?}: must be a non-negative integer"
                )))
            }
        }
    };
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let filter = WatchFilter {
        storage: rt.storage.to_string(),
        namespace,
        labels,
        fields,
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(256);
    let token = app.shutdown_token();
    let bookmark_interval = app.bookmark_interval;
    match app.store.watch(rt, start) {
        Err(e) => {
            // The watch cache answers a too-old resourceVersion with an ERROR event, not an HTTP error.
            let _ = tx.try_send(Ok(watch_line("ERROR", &e.to_status())));
        }
        Ok(started) => {
            tokio::spawn(stream_events(WatchStream {
                rt,
                filter,
                first: started.first,
                receiver: started.receiver,
                start_rv: started.resource_version,
                tx,
                token,
                timeout,
                bookmarks,
                bookmark_interval,
                initial_events_end: send_initial && bookmarks,
                table: as_table.then(|| TableState {
                    store: app.store.clone(),
                    header_sent: false,
                }),
            }));
        }
    }
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

struct WatchStream {
    rt: &'static ResourceType,
    filter: WatchFilter,
    first: Vec<Arc<StoredEvent>>,
    receiver: broadcast::Receiver<Arc<StoredEvent>>,
    start_rv: u64,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    token: CancellationToken,
    timeout: Duration,
    bookmarks: bool,
    bookmark_interval: Duration,
    initial_events_end: bool,
    /// `kubectl get -w` asks for Tables: each event carries a one-row Table (column definitions
    /// on the first only).
    table: Option<TableState>,
}

struct TableState {
    store: Arc<Store>,
    header_sent: bool,
}

impl WatchStream {
    fn render(&mut self, kind: EventType, obj: &Value) -> Bytes {
        let served = to_served(self.rt, obj);
        let Some(t) = &mut self.table else {
            return watch_line(kind.as_str(), &served);
        };
        let rv = served
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let mut rendered = table::table(self.rt, std::slice::from_ref(&served), &rv, t.store.now());
        if t.header_sent {
            rendered["columnDefinitions"] = json!([]);
        }
        t.header_sent = true;
        watch_line(kind.as_str(), &rendered)
    }
}

async fn stream_events(mut w: WatchStream) {
    let send = |tx: &mpsc::Sender<Result<Bytes, Infallible>>, line: Bytes| {
        let tx = tx.clone();
        async move { tx.send(Ok(line)).await.is_ok() }
    };
    let mut last_rv = w.start_rv;
    let first = std::mem::take(&mut w.first);
    for event in &first {
        if let Some((kind, obj)) = w.filter.view(event) {
            let line = w.render(kind, &obj);
            if !send(&w.tx, line).await {
                return;
            }
        }
        last_rv = last_rv.max(event.resource_version);
    }
    if w.initial_events_end
        && !send(
            &w.tx,
            watch_line("BOOKMARK", &bookmark(w.rt, w.start_rv, true)),
        )
        .await
    {
        return;
    }
    let deadline = tokio::time::sleep(w.timeout);
    tokio::pin!(deadline);
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + w.bookmark_interval,
        w.bookmark_interval,
    );
    loop {
        tokio::select! {
            _ = w.token.cancelled() => return,
            _ = &mut deadline => return,
            _ = w.tx.closed() => return,
            _ = ticker.tick(), if w.bookmarks => {
                if !send(&w.tx, watch_line("BOOKMARK", &bookmark(w.rt, last_rv, false))).await {
                    return;
                }
            }
            received = w.receiver.recv() => match received {
                Ok(event) => {
                    if event.resource_version <= w.start_rv {
                        continue;
                    }
                    if event.storage == w.filter.storage {
                        last_rv = event.resource_version;
                    }
                    if let Some((kind, obj)) = w.filter.view(&event) {
                        let line = w.render(kind, &obj);
                        if !send(&w.tx, line).await {
                            return;
                        }
                    }
                }
                // A watcher that falls behind is closed; the client re-watches from its last
                // resourceVersion, as with the API server.
                Err(_) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventType, obj: Value, previous: Option<Value>) -> StoredEvent {
        StoredEvent {
            resource_version: 42,
            event_type: kind,
            storage: "pods".into(),
            namespace: "default".into(),
            object: obj,
            previous,
        }
    }

    #[test]
    fn watch_filter_transitions() {
        let on = |node: &str| json!({"metadata": {"name": "p", "namespace": "default", "resourceVersion": "41"}, "spec": {"nodeName": node}});
        let filter = WatchFilter {
            storage: "pods".into(),
            namespace: None,
            labels: LabelSelector::default(),
            fields: FieldSelector::parse("spec.nodeName=n1").unwrap(),
        };
        let cases = [
            (
                event(EventType::Added, on("n1"), None),
                Some(EventType::Added),
            ),
            (event(EventType::Added, on("n2"), None), None),
            (
                event(EventType::Modified, on("n1"), Some(on("n1"))),
                Some(EventType::Modified),
            ),
            (
                event(EventType::Modified, on("n1"), Some(on(""))),
                Some(EventType::Added),
            ),
            (
                event(EventType::Modified, on("n2"), Some(on("n1"))),
                Some(EventType::Deleted),
            ),
            (event(EventType::Modified, on("n2"), Some(on("n3"))), None),
            (
                event(EventType::Deleted, on("n1"), None),
                Some(EventType::Deleted),
            ),
        ];
        for (ev, want) in cases {
            let got = filter.view(&ev);
            assert_eq!(got.as_ref().map(|(k, _)| *k), want, "{ev:?}");
            if want == Some(EventType::Deleted) && ev.event_type == EventType::Modified {
                let (_, obj) = got.unwrap();
                assert_eq!(
                    obj["spec"]["nodeName"], "n1",
                    "DELETED carries the previous content"
                );
                assert_eq!(obj["metadata"]["resourceVersion"], "42");
            }
        }
        let other_ns = WatchFilter {
            namespace: Some("kube-system".into()),
            fields: FieldSelector::default(),
            ..filter
        };
        assert!(other_ns
            .view(&event(EventType::Added, on("n1"), None))
            .is_none());
    }

    #[test]
    fn delete_options_from_query_and_body() {
        let query = Query(log::parse_query(
            "gracePeriodSeconds=5&propagationPolicy=Background",
        ));
        let body = Bytes::from(
            r#"{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":0,"preconditions":{"uid":"u"}}"#,
        );
        let from_query = delete_options(&query, &Bytes::new()).unwrap();
        assert_eq!(from_query.grace_period_seconds, Some(5));
        assert_eq!(from_query.propagation_policy.as_deref(), Some("Background"));
        let both = delete_options(&query, &body).unwrap();
        assert_eq!(both.grace_period_seconds, Some(0));
        assert_eq!(both.preconditions.unwrap().uid.as_deref(), Some("u"));
        assert!(delete_options(
            &Query(log::parse_query("gracePeriodSeconds=x")),
            &Bytes::new()
        )
        .is_err());
        assert!(delete_options(&Query(vec![]), &Bytes::from("{")).is_err());
    }
}
