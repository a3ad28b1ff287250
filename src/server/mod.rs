//! The local read-only HTTP API: `/healthz`, `/pods` (a PodList in the Kubernetes JSON shape),
//! `/metrics` (Prometheus text). It binds loopback by default (`address`), like the kubelet's
//! healthz endpoint, because it is unauthenticated.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;

use crate::metrics::metrics;

/// Everything the API reads, as small closures so the server does not depend on how the
/// rest of nodelet is wired.
#[derive(Clone)]
pub struct ApiState {
    pub pods: Arc<dyn Fn() -> Vec<Arc<Pod>> + Send + Sync>,
    /// `Ok` when healthy, else the reasons.
    pub health: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
}

pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/pods", get(pods))
        .route("/pods/", get(pods))
        .route("/metrics", get(metrics_text))
        .with_state(state)
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
    let list = serde_json::json!({
        "kind": "PodList",
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

/// Binds now (so a taken port fails startup with a clear error) and serves until cancelled.
pub async fn serve(
    addr: SocketAddr,
    app: Router,
    cancel: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, BindError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { addr, source })?;
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!(%bound, "serving local API");
    Ok(tokio::spawn(async move {
        let shutdown = async move { cancel.cancelled().await };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "local API server stopped");
        }
    }))
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
        };
        let cancel = CancellationToken::new();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let task = serve(addr, router(state), cancel.clone()).await.unwrap();
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
}
