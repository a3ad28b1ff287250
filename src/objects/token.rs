//! Service account tokens for `serviceAccountToken` projected volume sources: the kubelet's token
//! manager (`pkg/kubelet/token/token_manager.go`).
//!
//! A token is asked for with a TokenRequest (`POST /api/v1/namespaces/<ns>/serviceaccounts/<sa>/token`,
//! `authentication.k8s.io/v1`) bound to the pod, so it stops being valid when the pod is gone.
//! Tokens are cached per request (service account, namespace, audiences, expiration, bound pod)
//! and handed out again until [`needs_refresh`] says they are old: 80% of their lifetime passed,
//! or 24 hours, or they were issued "in the future" (the clock moved back). A refresh that fails
//! keeps the old token while it is still valid, as the kubelet does; once it has expired the
//! read fails.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::api::authentication::v1 as authv1;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::Client;

use super::{ObjectError, ObjectSource, Result};
use crate::clock::Clock;

/// Tokens older than this are refreshed whatever their lifetime (`maxTTL`).
pub const MAX_TOKEN_AGE: Duration = Duration::from_secs(24 * 60 * 60);
/// The largest random head start a refresh gets, so that the tokens of many pods issued
/// together are not all refreshed in the same second (`maxJitter`).
pub const MAX_REFRESH_JITTER: Duration = Duration::from_secs(10);

/// What one `serviceAccountToken` source asks the API server for; also the cache key (the
/// kubelet's `keyFunc`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokenRequest {
    pub namespace: String,
    pub service_account: String,
    /// Empty: the API server's own audiences.
    pub audiences: Vec<String>,
    pub expiration_seconds: i64,
    /// The pod the token is bound to.
    pub pod_name: String,
    pub pod_uid: String,
}

impl fmt::Display for TokenRequest {
    /// Names the request in logs and errors without the token: `"default"/"prod"/[]/3607/pod "web" (uid)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}/{:?}/{:?}/{}/pod {:?} ({})",
            self.service_account,
            self.namespace,
            self.audiences,
            self.expiration_seconds,
            self.pod_name,
            self.pod_uid
        )
    }
}

/// A token as the API server issued it. `Debug` shows its times, not the token.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedToken {
    pub token: String,
    /// `status.expirationTimestamp`.
    pub expires: Timestamp,
    /// `expires` minus the answer's `spec.expirationSeconds` (the kubelet's `iat`): the API server
    /// may shorten the lifetime it was asked for.
    pub issued: Timestamp,
}

impl std::fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedToken")
            .field("token", &crate::redact::secret(&self.token))
            .field("expires", &self.expires)
            .field("issued", &self.issued)
            .finish()
    }
}

/// Why one TokenRequest failed: the API server's message when it sent one.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct TokenRequestError {
    pub message: String,
    #[source]
    pub source: Option<kube::Error>,
}

impl TokenRequestError {
    pub fn new(message: impl Into<String>) -> TokenRequestError {
        TokenRequestError {
            message: message.into(),
            source: None,
        }
    }
}

/// Where tokens come from: one TokenRequest per call, no caching.
#[async_trait]
pub trait TokenIssuer: Send + Sync {
    async fn request_token(
        &self,
        request: &TokenRequest,
    ) -> std::result::Result<IssuedToken, TokenRequestError>;
}

/// The API server's TokenRequest subresource.
#[derive(Clone)]
pub struct ApiTokenIssuer {
    client: Client,
}

impl ApiTokenIssuer {
    pub fn new(client: Client) -> ApiTokenIssuer {
        ApiTokenIssuer { client }
    }
}

/// The TokenRequest body: audiences, expiration and `boundObjectRef: {kind: Pod, apiVersion: v1,
/// name, uid}`, as the projected volume plugin builds it.
pub fn token_request_body(request: &TokenRequest) -> authv1::TokenRequest {
    authv1::TokenRequest {
        spec: Some(authv1::TokenRequestSpec {
            audiences: Some(request.audiences.clone()),
            expiration_seconds: Some(request.expiration_seconds),
            bound_object_ref: Some(authv1::BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(request.pod_name.clone()),
                uid: Some(request.pod_uid.clone()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Reads the token and its times from the API server's answer.
pub fn issued_token(
    answer: &authv1::TokenRequest,
    asked_seconds: i64,
) -> std::result::Result<IssuedToken, TokenRequestError> {
    let status = answer.status.as_ref();
    let token = status
        .and_then(|s| s.token.clone())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| TokenRequestError::new("the TokenRequest answer has no status.token"))?;
    let expires = status
        .and_then(|s| s.expiration_timestamp.as_ref())
        .map(|t| t.0)
        .ok_or_else(|| {
            TokenRequestError::new("the TokenRequest answer has no status.expirationTimestamp")
        })?;
    let seconds = answer
        .spec
        .as_ref()
        .and_then(|s| s.expiration_seconds)
        .unwrap_or(asked_seconds);
    let issued = Timestamp::from_second(expires.as_second().saturating_sub(seconds))
        .map_err(|e| TokenRequestError::new(format!("expirationSeconds {seconds}: {e}")))?;
    Ok(IssuedToken {
        token,
        expires,
        issued,
    })
}

#[async_trait]
impl TokenIssuer for ApiTokenIssuer {
    async fn request_token(
        &self,
        request: &TokenRequest,
    ) -> std::result::Result<IssuedToken, TokenRequestError> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &request.namespace);
        let answer = api
            .create_token_request(
                &request.service_account,
                &PostParams::default(),
                &token_request_body(request),
            )
            .await
            .map_err(|source| {
                let message = match &source {
                    kube::Error::Api(status) if !status.message.is_empty() => {
                        status.message.clone()
                    }
                    other => other.to_string(),
                };
                TokenRequestError {
                    message,
                    source: Some(source),
                }
            })?;
        issued_token(&answer, request.expiration_seconds)
    }
}

/// Whether a token issued at `issued` that expires at `expires` should be replaced at `now`
/// (`requiresRefresh`): it is older than 24 hours, or less than 20% of its lifetime is left, or
/// it was issued after `now` (the clock moved back). `jitter` moves both limits earlier.
pub fn needs_refresh(
    issued: Timestamp,
    expires: Timestamp,
    now: Timestamp,
    jitter: Duration,
) -> bool {
    const NANOS: i128 = 1_000_000_000;
    let (issued, expires, now) = (
        issued.as_nanosecond(),
        expires.as_nanosecond(),
        now.as_nanosecond(),
    );
    let jitter = i128::try_from(jitter.as_nanos()).unwrap_or(i128::MAX);
    let max_age = i128::from(MAX_TOKEN_AGE.as_secs()) * NANOS;
    if now > issued + max_age - jitter {
        return true;
    }
    // 20% of the lifetime in whole seconds, as the kubelet computes it.
    let lifetime_seconds = (expires - issued) / NANOS;
    let margin = lifetime_seconds * 20 / 100 * NANOS;
    if now > expires - margin - jitter {
        return true;
    }
    now < issued
}

/// A random refresh head start below `max` (0 for `max` 0).
fn random_jitter(max: Duration) -> Duration {
    let millis = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if millis == 0 {
        return Duration::ZERO;
    }
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(millis);
    Duration::from_millis(hasher.finish() % millis)
}

/// The kubelet's token manager: tokens by request, refreshed by [`needs_refresh`].
pub struct TokenManager {
    issuer: Arc<dyn TokenIssuer>,
    clock: Clock,
    max_jitter: Duration,
    cache: Mutex<HashMap<TokenRequest, IssuedToken>>,
}

impl TokenManager {
    pub fn new(issuer: Arc<dyn TokenIssuer>, clock: Clock) -> TokenManager {
        TokenManager {
            issuer,
            clock,
            max_jitter: MAX_REFRESH_JITTER,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// A different largest jitter (0 makes refreshes exactly predictable, for tests).
    pub fn with_max_jitter(mut self, max_jitter: Duration) -> TokenManager {
        self.max_jitter = max_jitter;
        self
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<TokenRequest, IssuedToken>> {
        // Nothing panics while holding the lock; if something did, the map is still whole.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The token for `request` now (see [`TokenManager::token_at`]).
    pub async fn token(&self, request: &TokenRequest) -> Result<String> {
        self.token_at(request, self.clock.now()).await
    }

    /// The token for `request` at `now` (`GetServiceAccountToken`): the cached one while it
    /// needs no refresh; else a new one from the API server; if that fails, the cached one while
    /// it has not expired.
    pub async fn token_at(&self, request: &TokenRequest, now: Timestamp) -> Result<String> {
        let cached = self.lock().get(request).cloned();
        if let Some(c) = &cached {
            if !needs_refresh(c.issued, c.expires, now, random_jitter(self.max_jitter)) {
                return Ok(c.token.clone());
            }
        }
        match self.issuer.request_token(request).await {
            Ok(issued) => {
                let token = issued.token.clone();
                let mut cache = self.lock();
                cache.insert(request.clone(), issued);
                // The kubelet sweeps expired tokens every minute; every new token is as good.
                cache.retain(|_, t| t.expires >= now);
                Ok(token)
            }
            Err(e) => match cached {
                None => Err(ObjectError::TokenFetch {
                    namespace: request.namespace.clone(),
                    service_account: request.service_account.clone(),
                    message: e.message,
                    source: e.source,
                }),
                Some(c) if now > c.expires => Err(ObjectError::TokenExpired {
                    key: request.to_string(),
                    message: e.message,
                }),
                Some(c) => {
                    tracing::error!(key = %request, error = %e.message, "couldn't update token; the current one is still valid");
                    Ok(c.token)
                }
            },
        }
    }

    /// Drops the tokens bound to a pod that is gone (`DeleteServiceAccountToken`).
    pub fn forget_pod(&self, uid: &str) {
        self.lock().retain(|r, _| r.pod_uid != uid);
    }

    /// How many tokens are cached.
    pub fn cached(&self) -> usize {
        self.lock().len()
    }
}

impl fmt::Debug for TokenManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys only: tokens are secrets.
        let keys: Vec<String> = self.lock().keys().map(ToString::to_string).collect();
        f.debug_struct("TokenManager")
            .field("max_jitter", &self.max_jitter)
            .field("cached", &keys)
            .finish_non_exhaustive()
    }
}

/// Tokens read for one pod, by request, so that building volume payloads stays a pure function
/// of what was read.
#[derive(Clone, Default)]
pub struct FetchedTokens {
    tokens: BTreeMap<TokenRequest, std::result::Result<String, String>>,
}

/// The requests and their errors; a token shows only that it is there.
impl std::fmt::Debug for FetchedTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.tokens.iter().map(|(request, answer)| {
                (
                    request,
                    answer
                        .as_ref()
                        .map(crate::redact::secret)
                        .map_err(|e| e.as_str()),
                )
            }))
            .finish()
    }
}

impl FetchedTokens {
    /// Asks `source` for each request once.
    pub async fn fetch(
        source: &dyn ObjectSource,
        requests: impl IntoIterator<Item = TokenRequest>,
    ) -> FetchedTokens {
        let mut out = FetchedTokens::default();
        for request in requests {
            if out.tokens.contains_key(&request) {
                continue;
            }
            let read = source
                .service_account_token(&request)
                .await
                .map_err(|e| e.to_string());
            out.tokens.insert(request, read);
        }
        out
    }

    pub fn insert(&mut self, request: TokenRequest, read: std::result::Result<String, String>) {
        self.tokens.insert(request, read);
    }

    /// The token read for `request`, or why there is none; a request that was not read is
    /// reported as standalone nodelet reports every request.
    pub fn get(&self, request: &TokenRequest) -> std::result::Result<&str, String> {
        match self.tokens.get(request) {
            Some(Ok(token)) => Ok(token),
            Some(Err(message)) => Err(message.clone()),
            None => Err(ObjectError::NoApiClientForToken {
                namespace: request.namespace.clone(),
                service_account: request.service_account.clone(),
            }
            .to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn needs_refresh_table() {
        let issued = ts("2024-05-01T10:00:00Z");
        // 3600 s: refresh once less than 720 s are left, i.e. after 10:48:00.
        let hour = ts("2024-05-01T11:00:00Z");
        let two_days = ts("2024-05-03T10:00:00Z");
        let none = Duration::ZERO;
        let ten = Duration::from_secs(10);
        let cases = [
            ("fresh", hour, "2024-05-01T10:01:00Z", none, false),
            (
                "79% of the lifetime",
                hour,
                "2024-05-01T10:47:24Z",
                none,
                false,
            ),
            ("exactly 80%", hour, "2024-05-01T10:48:00Z", none, false),
            ("just past 80%", hour, "2024-05-01T10:48:01Z", none, true),
            (
                "jitter moves the limit earlier",
                hour,
                "2024-05-01T10:47:55Z",
                ten,
                true,
            ),
            (
                "jitter, still early",
                hour,
                "2024-05-01T10:47:49Z",
                ten,
                false,
            ),
            ("expired", hour, "2024-05-01T11:00:01Z", none, true),
            (
                "issued in the future",
                hour,
                "2024-05-01T09:59:59Z",
                none,
                true,
            ),
            (
                "48 h token at 23 h",
                two_days,
                "2024-05-02T09:00:00Z",
                none,
                false,
            ),
            (
                "48 h token at 24 h",
                two_days,
                "2024-05-02T10:00:00Z",
                none,
                false,
            ),
            (
                "48 h token past 24 h",
                two_days,
                "2024-05-02T10:00:01Z",
                none,
                true,
            ),
            (
                "48 h token, 24 h minus jitter",
                two_days,
                "2024-05-02T09:59:55Z",
                ten,
                true,
            ),
        ];
        for (name, expires, now, jitter, want) in cases {
            assert_eq!(
                needs_refresh(issued, expires, ts(now), jitter),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn lifetime_margin_uses_whole_seconds() {
        // 3607 s: 20% is 721 s (721.4 truncated), so the limit is 10:48:06.
        let issued = ts("2024-05-01T10:00:00Z");
        let expires = ts("2024-05-01T11:00:07Z");
        assert!(!needs_refresh(
            issued,
            expires,
            ts("2024-05-01T10:48:06Z"),
            Duration::ZERO
        ));
        assert!(needs_refresh(
            issued,
            expires,
            ts("2024-05-01T10:48:06.5Z"),
            Duration::ZERO
        ));
    }

    #[test]
    fn random_jitter_stays_below_its_maximum() {
        assert_eq!(random_jitter(Duration::ZERO), Duration::ZERO);
        for _ in 0..100 {
            assert!(random_jitter(MAX_REFRESH_JITTER) < MAX_REFRESH_JITTER);
        }
    }

    /// Issues `token-1`, `token-2`, ... valid for the asked lifetime from `now`; fails while
    /// `failing` is set.
    struct CountingIssuer {
        now: Mutex<Timestamp>,
        calls: AtomicUsize,
        failing: Mutex<Option<String>>,
    }

    #[async_trait]
    impl TokenIssuer for CountingIssuer {
        async fn request_token(
            &self,
            request: &TokenRequest,
        ) -> std::result::Result<IssuedToken, TokenRequestError> {
            if let Some(message) = self.failing.lock().unwrap().clone() {
                return Err(TokenRequestError::new(message));
            }
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            let issued = *self.now.lock().unwrap();
            Ok(IssuedToken {
                token: format!("token-{n}"),
                expires: issued
                    .checked_add(jiff::SignedDuration::from_secs(request.expiration_seconds))
                    .unwrap(),
                issued,
            })
        }
    }

    fn request(uid: &str) -> TokenRequest {
        TokenRequest {
            namespace: "prod".into(),
            service_account: "default".into(),
            audiences: vec![],
            expiration_seconds: 3600,
            pod_name: "web".into(),
            pod_uid: uid.into(),
        }
    }

    #[tokio::test]
    async fn manager_caches_refreshes_and_keeps_a_valid_token_when_refresh_fails() {
        let start = ts("2024-05-01T10:00:00Z");
        let issuer = Arc::new(CountingIssuer {
            now: Mutex::new(start),
            calls: AtomicUsize::new(0),
            failing: Mutex::new(None),
        });
        let manager = TokenManager::new(issuer.clone(), Clock::starting_at(start))
            .with_max_jitter(Duration::ZERO);
        let at = |s: &str| ts(s);
        let r = request("uid-1");

        assert_eq!(manager.token_at(&r, start).await.unwrap(), "token-1");
        // a cache hit: no request
        assert_eq!(
            manager
                .token_at(&r, at("2024-05-01T10:47:00Z"))
                .await
                .unwrap(),
            "token-1"
        );
        assert_eq!(issuer.calls.load(Ordering::SeqCst), 1);
        // other audiences are another token
        let other = TokenRequest {
            audiences: vec!["vault".into()],
            ..r.clone()
        };
        assert_eq!(manager.token_at(&other, start).await.unwrap(), "token-2");
        assert_eq!(manager.cached(), 2);

        // past 80%: refreshed
        *issuer.now.lock().unwrap() = at("2024-05-01T10:50:00Z");
        assert_eq!(
            manager
                .token_at(&r, at("2024-05-01T10:50:00Z"))
                .await
                .unwrap(),
            "token-3"
        );

        // the refresh of token-3 fails at 11:40 (past its 80%): it is still valid, so kept
        *issuer.failing.lock().unwrap() = Some("connection refused".into());
        assert_eq!(
            manager
                .token_at(&r, at("2024-05-01T11:40:00Z"))
                .await
                .unwrap(),
            "token-3"
        );
        // once it expired, the read fails with the kubelet's message
        let err = manager
            .token_at(&r, at("2024-05-01T11:50:01Z"))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "token \"default\"/\"prod\"/[]/3600/pod \"web\" (uid-1) expired and refresh failed: connection refused"
        );
        // a request never served before fails with the fetch error
        let err = manager
            .token_at(&request("uid-2"), start)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "failed to fetch token: connection refused");

        // a pod that is gone takes its tokens with it
        manager.forget_pod("uid-1");
        assert_eq!(manager.cached(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn manager_follows_the_paused_clock() {
        let start = ts("2024-05-01T10:00:00Z");
        let issuer = Arc::new(CountingIssuer {
            now: Mutex::new(start),
            calls: AtomicUsize::new(0),
            failing: Mutex::new(None),
        });
        let manager = TokenManager::new(issuer.clone(), Clock::starting_at(start));
        let r = request("uid-1");
        assert_eq!(manager.token(&r).await.unwrap(), "token-1");
        tokio::time::advance(Duration::from_secs(40 * 60)).await;
        assert_eq!(manager.token(&r).await.unwrap(), "token-1");
        tokio::time::advance(Duration::from_secs(9 * 60)).await;
        assert_eq!(manager.token(&r).await.unwrap(), "token-2");
        assert_eq!(issuer.calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn issued_tokens_from_answers() {
        let answer = |token: Option<&str>, expires: Option<&str>, seconds: Option<i64>| {
            authv1::TokenRequest {
                spec: Some(authv1::TokenRequestSpec {
                    expiration_seconds: seconds,
                    ..Default::default()
                }),
                status: Some(authv1::TokenRequestStatus {
                    token: token.map(str::to_string),
                    expiration_timestamp: expires
                        .map(|e| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts(e))),
                }),
                ..Default::default()
            }
        };
        type Case<'a> = (
            authv1::TokenRequest,
            std::result::Result<(&'a str, &'a str), &'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                answer(Some("t"), Some("2024-05-01T11:00:07Z"), Some(3607)),
                Ok(("t", "2024-05-01T10:00:00Z")),
            ),
            (
                // the API server capped the lifetime at 1800 s
                answer(Some("t"), Some("2024-05-01T10:30:00Z"), Some(1800)),
                Ok(("t", "2024-05-01T10:00:00Z")),
            ),
            (
                // no spec in the answer: the asked lifetime
                answer(Some("t"), Some("2024-05-01T11:00:07Z"), None),
                Ok(("t", "2024-05-01T10:00:00Z")),
            ),
            (
                answer(None, Some("2024-05-01T11:00:07Z"), None),
                Err("the TokenRequest answer has no status.token"),
            ),
            (
                answer(Some(""), Some("2024-05-01T11:00:07Z"), None),
                Err("the TokenRequest answer has no status.token"),
            ),
            (
                answer(Some("t"), None, None),
                Err("the TokenRequest answer has no status.expirationTimestamp"),
            ),
        ];
        for (answer, want) in cases {
            let got = issued_token(&answer, 3607)
                .map(|t| (t.token, t.issued.to_string()))
                .map_err(|e| e.message);
            let want = want
                .map(|(t, i)| (t.to_string(), i.to_string()))
                .map_err(str::to_string);
            assert_eq!(got, want, "{answer:?}");
        }
    }

    #[test]
    fn request_body_binds_the_pod() {
        let mut r = request("uid-1");
        r.audiences = vec!["vault".into()];
        let body = serde_json::to_value(token_request_body(&r)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "metadata": {},
                "spec": {
                    "audiences": ["vault"],
                    "expirationSeconds": 3600,
                    "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": "uid-1"},
                },
            })
        );
    }

    /// `{:?}` of every credential-bearing type of this module holds no secret (and still says
    /// what it is); `crate::redact` is how they do it.
    #[test]
    fn credential_types_debug_without_secrets() {
        let nb: jiff::Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let token = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXRva2Vu.sig".to_string();
        let mut fetched_tokens = FetchedTokens::default();
        fetched_tokens.insert(
            TokenRequest {
                namespace: "prod".into(),
                service_account: "builder".into(),
                audiences: vec![],
                expiration_seconds: 3607,
                pod_name: "web".into(),
                pod_uid: "u1".into(),
            },
            Ok(token.clone()),
        );
        crate::redact::assert_debug_redacted(vec![
            (
                "IssuedToken",
                format!(
                    "{:?}",
                    IssuedToken {
                        token: token.clone(),
                        expires: nb,
                        issued: nb,
                    }
                ),
                vec![token.clone(), "c2VjcmV0".into()],
                vec!["token: <redacted>", "2030-01-01"],
            ),
            (
                "FetchedTokens",
                format!("{fetched_tokens:?}"),
                vec![token.clone(), "c2VjcmV0".into()],
                vec!["builder", "Ok(<redacted>)"],
            ),
        ]);
    }
}
