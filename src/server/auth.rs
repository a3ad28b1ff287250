//! Authentication and authorization of the kubelet API (`port`), as the kubelet's
//! `InstallAuthFilter`: every request is authenticated (client certificate, then bearer token
//! through a TokenReview, then anonymous if enabled — else 401 `Unauthorized`), then authorized
//! as an action on `nodes/<subresource>` of this node (AlwaysAllow, or a SubjectAccessReview —
//! a denial is 403 `Forbidden (user=…, verb=…, resource=nodes, subresource=…)`).
//!
//! The decisions (which attributes a request has, who a certificate names, what a review
//! answer means) are pure functions; the API server calls sit behind [`TokenReviewer`] and
//! [`AccessReviewer`], and their answers are cached for the configured times, as the kubelet's
//! webhook authenticator and authorizer cache them.
//!
//! Reviews are bounded: at most [`REVIEW_CONCURRENCY`] TokenReviews and as many
//! SubjectAccessReviews are in flight at once, and a request that would start one more is
//! refused at once with 429 (it never queues). Anyone who can reach the port can send bearer
//! tokens nothing has cached, so without the cap a flood of made-up tokens would turn into a
//! flood of TokenReviews; they also go through a client of their own (`cluster::ApiClients`),
//! so they never take tokens from the bucket that pod status writes and events wait on.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::config::{Authentication, Authorization, AuthorizationMode};

pub const USER_ANONYMOUS: &str = "system:anonymous";
pub const GROUP_UNAUTHENTICATED: &str = "system:unauthenticated";
pub const GROUP_AUTHENTICATED: &str = "system:authenticated";

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    fn anonymous() -> UserInfo {
        UserInfo {
            name: USER_ANONYMOUS.into(),
            groups: vec![GROUP_UNAUTHENTICATED.into()],
            ..Default::default()
        }
    }

    /// Authenticated users are also in `system:authenticated`, as the kubelet's delegating
    /// authenticator adds it.
    fn authenticated(mut self) -> UserInfo {
        if !self.groups.iter().any(|g| g == GROUP_AUTHENTICATED) {
            self.groups.push(GROUP_AUTHENTICATED.into());
        }
        self
    }
}

/// The identity of a verified client certificate (set by the TLS server on every request of
/// the connection): user = subject CN, groups = subject O, as the kubelet's x509
/// authenticator maps them. `None` when the client sent no certificate.
#[derive(Debug, Clone, Default)]
pub struct PeerIdentity(pub Option<UserInfo>);

/// The address a request's connection came from (each connection's, as [`PeerIdentity`]):
/// reviews are shared out per address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub std::net::IpAddr);

/// User of a DER certificate: CN and O of its subject. `None` without a CN.
pub fn user_from_certificate(der: &[u8]) -> Option<UserInfo> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(String::from))
        .collect();
    Some(UserInfo {
        name,
        groups,
        ..Default::default()
    })
}

/// What a request asks to do, in authorization terms (the kubelet's
/// `GetRequestAttributes`): always `nodes/<subresource>` of this node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestAttributes {
    pub verb: &'static str,
    pub subresource: &'static str,
    pub node: String,
}

/// The API verb of an HTTP method, as the kubelet maps it (others map to nothing).
pub fn api_verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
}

/// `path` is `prefix` or below it (`/stats`, `/stats/summary`, not `/statsfoo`).
fn is_subpath(path: &str, prefix: &str) -> bool {
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The attributes to check for a request, most specific first: `/stats`, `/metrics`,
/// `/logs` map to `stats`, `metrics`, `log`; `/pods` and `/healthz` to `pods` and `healthz`
/// and then `proxy` (the kubelet's fine-grained authorization: either grants access); all
/// else (`/containerLogs`, `/exec`, ...) to `proxy`.
pub fn request_attributes(method: &Method, path: &str, node: &str) -> Vec<RequestAttributes> {
    let verb = api_verb(method);
    let attrs = |subresource| RequestAttributes {
        verb,
        subresource,
        node: node.to_string(),
    };
    if is_subpath(path, "/stats") {
        vec![attrs("stats")]
    } else if is_subpath(path, "/metrics") {
        vec![attrs("metrics")]
    } else if is_subpath(path, "/logs") {
        vec![attrs("log")]
    } else if is_subpath(path, "/pods") {
        vec![attrs("pods"), attrs("proxy")]
    } else if is_subpath(path, "/healthz") {
        vec![attrs("healthz"), attrs("proxy")]
    } else {
        vec![attrs("proxy")]
    }
}

/// The kubelet's 403 text.
pub fn forbidden_message(user: &UserInfo, attrs: &RequestAttributes) -> String {
    format!(
        "Forbidden (user={}, verb={}, resource=nodes, subresource={})",
        user.name, attrs.verb, attrs.subresource
    )
}

/// Bearer token of an `Authorization` header (`Bearer <token>`, scheme case-insensitive).
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// An answer the API server could not give (unreachable, refused the review).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct ReviewError(pub String);

/// Checks a bearer token (a TokenReview in the kubelet).
#[async_trait]
pub trait TokenReviewer: Send + Sync {
    /// `Ok(None)`: the token does not authenticate anyone.
    async fn review_token(&self, token: &str) -> Result<Option<UserInfo>, ReviewError>;
}

/// Asks whether a user may do something (a SubjectAccessReview in the kubelet).
#[async_trait]
pub trait AccessReviewer: Send + Sync {
    async fn review_access(
        &self,
        user: &UserInfo,
        attrs: &RequestAttributes,
    ) -> Result<bool, ReviewError>;
}

/// The reviews through the API server.
pub struct ApiReviews {
    client: kube::Client,
}

impl ApiReviews {
    pub fn new(client: kube::Client) -> ApiReviews {
        ApiReviews { client }
    }
}

fn review_error(what: &str, error: kube::Error) -> ReviewError {
    ReviewError(format!("{what}: {error}"))
}

#[async_trait]
impl TokenReviewer for ApiReviews {
    async fn review_token(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..Default::default()
        };
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| review_error("creating a TokenReview", e))?;
        let status = answer.status.unwrap_or_default();
        if let Some(error) = status.error.filter(|e| !e.is_empty()) {
            return Err(ReviewError(format!("TokenReview: {error}")));
        }
        if status.authenticated != Some(true) {
            return Ok(None);
        }
        let user = status.user.unwrap_or_default();
        Ok(Some(UserInfo {
            name: user.username.unwrap_or_default(),
            uid: user.uid.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default(),
        }))
    }
}

/// The SubjectAccessReview the kubelet sends for a request.
pub fn access_review(user: &UserInfo, attrs: &RequestAttributes) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
            groups: Some(user.groups.clone()),
            extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(attrs.verb.to_string()),
                group: Some(String::new()),
                version: Some("v1".into()),
                resource: Some("nodes".into()),
                subresource: Some(attrs.subresource.to_string()),
                name: Some(attrs.node.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[async_trait]
impl AccessReviewer for ApiReviews {
    async fn review_access(
        &self,
        user: &UserInfo,
        attrs: &RequestAttributes,
    ) -> Result<bool, ReviewError> {
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &access_review(user, attrs))
            .await
            .map_err(|e| review_error("creating a SubjectAccessReview", e))?;
        let status = answer.status.unwrap_or_default();
        if status.allowed {
            return Ok(true);
        }
        match status.evaluation_error.filter(|e| !e.is_empty()) {
            // No decision and an error: the webhook failed, which is not a denial.
            Some(error) if status.denied != Some(true) => {
                Err(ReviewError(format!("SubjectAccessReview: {error}")))
            }
            _ => Ok(false),
        }
    }
}

/// How many TokenReviews (and, separately, SubjectAccessReviews) may be in flight at once;
/// a request that needs one more gets 429 at once. Cached answers take no slot.
pub const REVIEW_CONCURRENCY: usize = 4;

/// How many of those one client address may hold: a client sending made-up tokens as fast as
/// it can leaves the other slots to everyone else (metrics-server, Prometheus).
pub const REVIEWS_PER_CLIENT: usize = 2;

/// The review slots each client address holds now.
#[derive(Debug, Default)]
struct ClientSlots(Mutex<HashMap<Option<std::net::IpAddr>, usize>>);

/// A client's slot, given back when dropped.
struct ClientSlot<'a> {
    slots: &'a ClientSlots,
    client: Option<std::net::IpAddr>,
}

impl ClientSlots {
    /// One more slot for `client`, unless it holds [`REVIEWS_PER_CLIENT`] already. Requests
    /// without an address (a plain-HTTP listener) share one.
    fn take(&self, client: Option<std::net::IpAddr>) -> Option<ClientSlot<'_>> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let count = held.entry(client).or_default();
        if *count >= REVIEWS_PER_CLIENT {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            slots: self,
            client,
        })
    }
}

impl Drop for ClientSlot<'_> {
    fn drop(&mut self) {
        let mut held = self.slots.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&self.client) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.client);
            }
        }
    }
}

/// The 429 text for a review that found every slot taken.
pub fn too_many_reviews(what: &str) -> String {
    format!(
        "Too many requests: {REVIEW_CONCURRENCY} {what}s are already in flight to the API server; retry later"
    )
}

/// The 429 text for a client that holds all its review slots.
pub fn too_many_client_reviews() -> String {
    format!(
        "Too many requests: this client already has {REVIEWS_PER_CLIENT} reviews in flight to the API server; retry later"
    )
}

/// Answers kept for a while (the webhook caches). Errors are never cached.
struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

/// Entries beyond this are dropped oldest-first, so a flood of distinct tokens cannot grow it.
const CACHE_LIMIT: usize = 1024;

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    fn new() -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(_, expires)| Instant::now() < *expires)
            .map(|(v, _)| v.clone())
    }

    fn put(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        entries.retain(|_, (_, expires)| now < *expires);
        if entries.len() >= CACHE_LIMIT {
            if let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, (_, expires))| *expires)
                .map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
        }
        entries.insert(key, (value, crate::clock::saturating_deadline(now, ttl)));
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 401: nothing authenticated the request.
    Unauthorized,
    /// 403 with the kubelet's message.
    Forbidden(String),
    /// 500: the API server could not answer a review.
    Error(String),
    /// 429: every review slot is taken (a flood of unknown tokens, say); the client may retry.
    TooManyRequests(String),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (code, text) = match self {
            Refusal::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized".to_string()),
            Refusal::Forbidden(message) => (StatusCode::FORBIDDEN, message),
            Refusal::Error(message) => (StatusCode::INTERNAL_SERVER_ERROR, message),
            Refusal::TooManyRequests(message) => {
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [
                        (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                        (header::RETRY_AFTER, "1"),
                    ],
                    message,
                )
                    .into_response()
            }
        };
        (
            code,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            text,
        )
            .into_response()
    }
}

/// Everything the auth filter needs, built from the configuration.
pub struct KubeletAuth {
    node: String,
    anonymous: bool,
    tokens: Option<Arc<dyn TokenReviewer>>,
    token_ttl: Duration,
    /// Tokens the API server authenticated, apart from those it did not: a flood of made-up
    /// tokens fills only `rejected_tokens` and never pushes a good token out.
    token_cache: TtlCache<[u8; 32], UserInfo>,
    rejected_tokens: TtlCache<[u8; 32], ()>,
    /// TokenReview slots per client address ([`REVIEWS_PER_CLIENT`]); a SubjectAccessReview
    /// needs an authenticated user first.
    client_slots: ClientSlots,
    access: Option<Arc<dyn AccessReviewer>>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
    access_cache: TtlCache<(UserInfo, RequestAttributes), bool>,
    /// Slots for TokenReviews in flight ([`REVIEW_CONCURRENCY`]).
    token_slots: Semaphore,
    /// Slots for SubjectAccessReviews in flight ([`REVIEW_CONCURRENCY`]).
    access_slots: Semaphore,
}

impl KubeletAuth {
    /// `reviews` is the API server (cluster mode) or `None` (standalone): then bearer tokens
    /// authenticate nobody, and `Webhook` authorization denies everything — there is no one
    /// to ask, and allowing would be worse.
    pub fn new(
        node: &str,
        authentication: &Authentication,
        authorization: &Authorization,
        tokens: Option<Arc<dyn TokenReviewer>>,
        access: Option<Arc<dyn AccessReviewer>>,
    ) -> KubeletAuth {
        KubeletAuth {
            node: node.to_string(),
            anonymous: authentication.anonymous_enabled,
            tokens: tokens.filter(|_| authentication.webhook_enabled),
            token_ttl: authentication.webhook_cache_ttl,
            token_cache: TtlCache::new(),
            rejected_tokens: TtlCache::new(),
            client_slots: ClientSlots::default(),
            access: match authorization.mode {
                AuthorizationMode::AlwaysAllow => None,
                AuthorizationMode::Webhook => Some(access.unwrap_or_else(|| Arc::new(NoApiServer))),
            },
            allowed_ttl: authorization.cache_authorized_ttl,
            denied_ttl: authorization.cache_unauthorized_ttl,
            access_cache: TtlCache::new(),
            token_slots: Semaphore::new(REVIEW_CONCURRENCY),
            access_slots: Semaphore::new(REVIEW_CONCURRENCY),
        }
    }

    /// Who made the request: the client certificate's user, else the bearer token's, else
    /// anonymous when enabled. `client` is the connection's address.
    pub async fn authenticate(
        &self,
        peer: Option<&UserInfo>,
        client: Option<std::net::IpAddr>,
        authorization: Option<&str>,
    ) -> Result<UserInfo, Refusal> {
        if let Some(user) = peer {
            return Ok(user.clone().authenticated());
        }
        if let (Some(token), Some(reviewer)) = (authorization.and_then(bearer_token), &self.tokens)
        {
            let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            let answer = if let Some(user) = self.token_cache.get(&key) {
                Some(user)
            } else if self.rejected_tokens.get(&key).is_some() {
                None
            } else {
                let Some(_client_slot) = self.client_slots.take(client) else {
                    tracing::debug!(
                        ?client,
                        "the client holds all its review slots; refusing the request"
                    );
                    return Err(Refusal::TooManyRequests(too_many_client_reviews()));
                };
                let Ok(_slot) = self.token_slots.try_acquire() else {
                    tracing::debug!("TokenReview slots all taken; refusing the request");
                    return Err(Refusal::TooManyRequests(too_many_reviews("TokenReview")));
                };
                let answer = reviewer.review_token(token).await.map_err(|e| {
                    tracing::warn!(error = %e, "unable to authenticate the request");
                    Refusal::Unauthorized
                })?;
                match &answer {
                    Some(user) => self.token_cache.put(key, user.clone(), self.token_ttl),
                    None => self.rejected_tokens.put(key, (), self.token_ttl),
                }
                answer
            };
            if let Some(user) = answer {
                return Ok(user.authenticated());
            }
        }
        if self.anonymous {
            return Ok(UserInfo::anonymous());
        }
        Err(Refusal::Unauthorized)
    }

    /// Whether `user` may make this request: allowed when any of its attributes is.
    pub async fn authorize(
        &self,
        user: &UserInfo,
        method: &Method,
        path: &str,
    ) -> Result<(), Refusal> {
        let Some(reviewer) = &self.access else {
            return Ok(());
        };
        let candidates = request_attributes(method, path, &self.node);
        for attrs in &candidates {
            let key = (user.clone(), attrs.clone());
            let allowed = match self.access_cache.get(&key) {
                Some(allowed) => allowed,
                None => {
                    let Ok(_slot) = self.access_slots.try_acquire() else {
                        tracing::debug!(
                            "SubjectAccessReview slots all taken; refusing the request"
                        );
                        return Err(Refusal::TooManyRequests(too_many_reviews(
                            "SubjectAccessReview",
                        )));
                    };
                    let allowed = reviewer.review_access(user, attrs).await.map_err(|e| {
                        // The cause is logged, not sent: it is the API server's or a webhook's
                        // text, not the client's business (the kubelet's answer has none).
                        tracing::error!(
                            error = %e.0,
                            user = %user.name,
                            verb = attrs.verb,
                            subresource = attrs.subresource,
                            "Authorization error"
                        );
                        Refusal::Error(format!(
                            "Authorization error (user={}, verb={}, resource=nodes, subresource={})",
                            user.name, attrs.verb, attrs.subresource
                        ))
                    })?;
                    let ttl = if allowed {
                        self.allowed_ttl
                    } else {
                        self.denied_ttl
                    };
                    self.access_cache.put(key, allowed, ttl);
                    allowed
                }
            };
            if allowed {
                return Ok(());
            }
        }
        // The message names the most general attributes tried, as the kubelet's does.
        let last = candidates.last().cloned().unwrap_or(RequestAttributes {
            verb: "",
            subresource: "proxy",
            node: self.node.clone(),
        });
        Err(Refusal::Forbidden(forbidden_message(user, &last)))
    }
}

/// Standalone mode with `Webhook` authorization: nobody to ask.
struct NoApiServer;

#[async_trait]
impl AccessReviewer for NoApiServer {
    async fn review_access(
        &self,
        _: &UserInfo,
        _: &RequestAttributes,
    ) -> Result<bool, ReviewError> {
        Err(ReviewError(
            "no API server to ask (standalone mode); use authorization mode AlwaysAllow".into(),
        ))
    }
}

/// The axum middleware: authenticate, authorize, then run the handler.
pub async fn require_auth(
    State(auth): State<Arc<KubeletAuth>>,
    request: Request,
    next: Next,
) -> Response {
    let peer = request
        .extensions()
        .get::<PeerIdentity>()
        .and_then(|p| p.0.clone());
    let client = request.extensions().get::<ClientAddr>().map(|c| c.0);
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let user = match auth
        .authenticate(peer.as_ref(), client, header.as_deref())
        .await
    {
        Ok(user) => user,
        Err(refusal) => return refusal.into_response(),
    };
    if let Err(refusal) = auth
        .authorize(&user, request.method(), request.uri().path())
        .await
    {
        tracing::info!(user = %user.name, path = %request.uri().path(), "kubelet API request refused");
        return refusal.into_response();
    }
    next.run(request).await
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
