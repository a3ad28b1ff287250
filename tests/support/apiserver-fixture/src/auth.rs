//! Who is calling, when the fixture serves HTTPS (`FixtureOptions::tls`): the API server's
//! authenticators in its order — a client certificate signed by the fixture's CA (user = CN,
//! groups = O), a bearer token (the static token file, then bootstrap tokens: Secrets
//! `kube-system/bootstrap-token-<id>`), else anonymous — and the little authorization the
//! node join flow depends on: anonymous requests reach only the public health and version
//! paths (401 elsewhere), bootstrap tokens (`system:bootstrappers`) only discovery and
//! CertificateSigningRequests (403 elsewhere), as kubeadm's RBAC bindings allow. Other users
//! may do everything (there is no Node authorizer or RBAC beyond this).
//!
//! Without TLS nothing is checked and requests carry no user, as before.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use jiff::Timestamp;
use serde_json::Value;

use crate::error::ApiError;
use crate::review::UserInfo;
use crate::server::AppState;
use crate::tls::PeerCertificates;

/// The authenticated user of a request, in the response's extensions for the request log.
#[derive(Debug, Clone)]
pub struct Authenticated(pub UserInfo);

pub const BOOTSTRAPPERS: &str = "system:bootstrappers";
pub const AUTHENTICATED: &str = "system:authenticated";

/// Paths anyone may read (`system:public-info-viewer`).
const PUBLIC_PATHS: &[&str] = &["/healthz", "/livez", "/readyz", "/version", "/version/"];

/// Authenticates and authorizes each request; the user goes into the request's extensions for
/// the handlers (a CSR records its requester) and into the response's for the log.
pub async fn authenticate(
    State(app): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(tls) = app.tls.as_ref() else {
        return next.run(request).await;
    };
    let now = app.store.now();
    let user = match identify(&app, tls, &request, now) {
        Ok(user) => user,
        Err(message) => {
            tracing::debug!(path = %request.uri().path(), %message, "unauthorized");
            return crate::server::error_response(&ApiError::unauthorized());
        }
    };
    let path = request.uri().path().to_string();
    match &user {
        None if !PUBLIC_PATHS.contains(&path.as_str()) => {
            return crate::server::error_response(&ApiError::unauthorized());
        }
        Some(user) if user.groups.iter().any(|g| g == BOOTSTRAPPERS) => {
            if let Err(error) =
                bootstrapper_may(user, request.method(), &path, request.uri().query())
            {
                return crate::server::error_response(&error);
            }
        }
        _ => {}
    }
    if let Some(user) = &user {
        request.extensions_mut().insert(Authenticated(user.clone()));
    }
    let mut response = next.run(request).await;
    if let Some(user) = user {
        response.extensions_mut().insert(Authenticated(user));
    }
    response
}

/// The user of a request: `Ok(None)` for anonymous, `Err` for credentials that do not
/// authenticate (an expired or foreign certificate, an unknown token): 401.
fn identify(
    app: &AppState,
    tls: &crate::tls::FixtureTls,
    request: &Request,
    now: Timestamp,
) -> Result<Option<UserInfo>, String> {
    if let Some(peer) = request.extensions().get::<PeerCertificates>() {
        if let Some((name, mut groups)) = tls.authenticate(peer, now)? {
            groups.push(AUTHENTICATED.to_string());
            return Ok(Some(UserInfo {
                username: name,
                groups,
                ..Default::default()
            }));
        }
    }
    let token = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(token) = token else {
        return Ok(None);
    };
    if let Some(user) = app.static_tokens.get(token) {
        let mut user = user.clone();
        user.groups.push(AUTHENTICATED.to_string());
        return Ok(Some(user));
    }
    if let Some(user) = bootstrap_token_user(app, token, now)? {
        return Ok(Some(user));
    }
    Err("invalid bearer token".into())
}

/// A bootstrap token `<id>.<secret>` (`[a-z0-9]{6}.[a-z0-9]{16}`) and its Secret: type
/// `bootstrap.kubernetes.io/token`, the same secret, `usage-bootstrap-authentication: "true"`,
/// not past `expiration`. User `system:bootstrap:<id>`, groups `system:bootstrappers` and
/// `auth-extra-groups`.
fn bootstrap_token_user(
    app: &AppState,
    token: &str,
    now: Timestamp,
) -> Result<Option<UserInfo>, String> {
    let Some((id, secret)) = token.split_once('.') else {
        return Ok(None);
    };
    let shaped = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    if !shaped(id, 6) || !shaped(secret, 16) {
        return Ok(None);
    }
    let secrets = crate::resource::find_by_plural("", "v1", "secrets")
        .ok_or_else(|| "no secrets resource".to_string())?;
    let stored = app
        .store
        .get(
            secrets,
            Some("kube-system"),
            &format!("bootstrap-token-{id}"),
        )
        .map_err(|_| format!("no bootstrap token secret for {id}"))?;
    let data = |key: &str| -> String {
        use base64::Engine;
        stored
            .pointer(&format!("/data/{key}"))
            .and_then(Value::as_str)
            .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_default()
    };
    if stored.get("type").and_then(Value::as_str) != Some("bootstrap.kubernetes.io/token") {
        return Err("the bootstrap token secret has the wrong type".into());
    }
    if data("token-secret") != secret || data("usage-bootstrap-authentication") != "true" {
        return Err("bootstrap token does not match or may not authenticate".into());
    }
    let expiration = data("expiration");
    if !expiration.is_empty() {
        match expiration.parse::<Timestamp>() {
            Ok(at) if at > now => {}
            _ => return Err("bootstrap token expired".into()),
        }
    }
    let mut groups = vec![BOOTSTRAPPERS.to_string()];
    groups.extend(
        data("auth-extra-groups")
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(String::from),
    );
    groups.push(AUTHENTICATED.to_string());
    Ok(Some(UserInfo {
        username: format!("system:bootstrap:{id}"),
        groups,
        ..Default::default()
    }))
}

/// What kubeadm lets bootstrap tokens do (`system:node-bootstrapper` and discovery): create,
/// get, list and watch CertificateSigningRequests; read discovery and the public paths.
fn bootstrapper_may(
    user: &UserInfo,
    method: &axum::http::Method,
    path: &str,
    query: Option<&str>,
) -> Result<(), ApiError> {
    let discovery = path == "/api"
        || path == "/apis"
        || path.starts_with("/api/v1") && path.trim_end_matches('/').matches('/').count() == 2
        || path.starts_with("/apis/") && path.trim_end_matches('/').matches('/').count() <= 3
        || path.starts_with("/openapi");
    if PUBLIC_PATHS.contains(&path) || (discovery && method == axum::http::Method::GET) {
        return Ok(());
    }
    let verb = verb_of(method, path, query);
    let Ok(target) = crate::path::parse(path) else {
        return Err(ApiError::forbidden_path(&user.username, &verb, path));
    };
    let rt = target.resource;
    let csr = rt.group == "certificates.k8s.io" && rt.plural == "certificatesigningrequests";
    if csr
        && target.subresource.is_none()
        && ["create", "get", "list", "watch"].contains(&verb.as_str())
    {
        return Ok(());
    }
    Err(ApiError::forbidden_user(
        &user.username,
        &verb,
        rt,
        target.name.as_deref(),
        target.namespace.as_deref(),
        target.subresource.as_deref(),
    ))
}

/// The API server's verb for a request.
fn verb_of(method: &axum::http::Method, path: &str, query: Option<&str>) -> String {
    use axum::http::Method;
    let named = crate::path::parse(path)
        .map(|t| t.name.is_some())
        .unwrap_or(true);
    let watch = query.is_some_and(|q| {
        crate::log::parse_query(q)
            .iter()
            .any(|(k, v)| k == "watch" && (v == "true" || v == "1"))
    });
    match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "get",
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    #[test]
    fn bootstrappers_reach_csrs_and_discovery_only() {
        let user = UserInfo::new("system:bootstrap:abcdef", "", &[BOOTSTRAPPERS]);
        type Case<'a> = (Method, &'a str, Option<&'a str>, Result<(), &'a str>);
        let cases: &[Case] = &[
            (Method::POST, "/apis/certificates.k8s.io/v1/certificatesigningrequests", None, Ok(())),
            (Method::GET, "/apis/certificates.k8s.io/v1/certificatesigningrequests/csr-1", None, Ok(())),
            (Method::GET, "/apis/certificates.k8s.io/v1/certificatesigningrequests", Some("watch=true"), Ok(())),
            (Method::GET, "/api", None, Ok(())),
            (Method::GET, "/apis/certificates.k8s.io/v1", None, Ok(())),
            (Method::GET, "/version", None, Ok(())),
            (
                Method::PUT,
                "/apis/certificates.k8s.io/v1/certificatesigningrequests/csr-1/approval",
                None,
                Err("certificatesigningrequests.certificates.k8s.io \"csr-1\" is forbidden: User \"system:bootstrap:abcdef\" cannot update resource \"certificatesigningrequests/approval\" in API group \"certificates.k8s.io\" at the cluster scope"),
            ),
            (
                Method::POST,
                "/api/v1/nodes",
                None,
                Err("nodes is forbidden: User \"system:bootstrap:abcdef\" cannot create resource \"nodes\" in API group \"\" at the cluster scope"),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/pods",
                Some("watch=1"),
                Err("pods is forbidden: User \"system:bootstrap:abcdef\" cannot watch resource \"pods\" in API group \"\" in the namespace \"default\""),
            ),
        ];
        for (method, path, query, want) in cases {
            let got = bootstrapper_may(&user, method, path, *query).map_err(|e| e.message);
            assert_eq!(got, want.map_err(String::from), "{method} {path}");
        }
    }
}
