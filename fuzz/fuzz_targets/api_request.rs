//! A request to the kubelet API as nodelet serves it: method, path and query through the real
//! router, the authentication and authorization layer (which maps the path to a `nodes/<sub>`
//! attribute, `request_attributes`) and the handlers. Every request is answered; none panics.
#![no_main]

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{Method, Request, Uri};
use axum::Router;
use libfuzzer_sys::fuzz_target;
use nodelet::config::{Authentication, Authorization, AuthorizationMode};
use nodelet::logs::LogOptions;
use nodelet::server::auth::{
    AccessReviewer, KubeletAuth, RequestAttributes, ReviewError, UserInfo,
};
use nodelet::server::{kubelet_api_router, ApiState, ContainerLogSource, LogRefusal};
use tower::ServiceExt;

/// Allows every request, so that the fuzzer reaches the handlers behind the authorizer.
struct AllowAll;

#[async_trait::async_trait]
impl AccessReviewer for AllowAll {
    async fn review_access(
        &self,
        _: &UserInfo,
        _: &RequestAttributes,
    ) -> Result<bool, ReviewError> {
        Ok(true)
    }
}

/// Decodes the log options as the real log source does, then answers with an empty log.
struct Logs;

#[async_trait::async_trait]
impl ContainerLogSource for Logs {
    async fn container_logs(
        &self,
        _namespace: &str,
        _pod: &str,
        _container: &str,
        query: &str,
    ) -> Result<Body, LogRefusal> {
        let now = jiff::Timestamp::from_second(1_800_000_000).expect("a valid time");
        LogOptions::from_query(query, now).map_err(|e| LogRefusal {
            code: axum::http::StatusCode::BAD_REQUEST,
            message: e.to_string(),
        })?;
        Ok(Body::empty())
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

fn router() -> Router {
    static ROUTER: OnceLock<Router> = OnceLock::new();
    ROUTER
        .get_or_init(|| {
            let state = ApiState {
                pods: Arc::new(Vec::new),
                health: Arc::new(|| Ok(())),
                events: Arc::new(Vec::new),
                summary: None,
                configz: None,
            };
            let authentication = Authentication {
                anonymous_enabled: true,
                ..Authentication::default()
            };
            let authorization = Authorization {
                mode: AuthorizationMode::Webhook,
                ..Authorization::default()
            };
            let auth = KubeletAuth::new(
                "node-1",
                &authentication,
                &authorization,
                None,
                Some(Arc::new(AllowAll)),
            );
            kubelet_api_router(state, Arc::new(Logs), None, Arc::new(auth))
        })
        .clone()
}

fuzz_target!(|data: &[u8]| {
    let Some((&method, target)) = data.split_first() else {
        return;
    };
    let method = match method % 4 {
        0 => Method::GET,
        1 => Method::POST,
        2 => Method::PUT,
        _ => Method::DELETE,
    };
    // What hyper would refuse before routing never reaches nodelet.
    let Ok(uri) = Uri::try_from(target) else {
        return;
    };
    let Ok(request) = Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
    else {
        return;
    };
    let response = runtime()
        .block_on(router().oneshot(request))
        .expect("the router always answers");
    assert!(response.status().as_u16() >= 200);
});
