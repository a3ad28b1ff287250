//! The review APIs a node agent calls to authenticate and authorize its own clients (the
//! kubelet's webhook authentication and authorization):
//!
//! - `POST /apis/authentication.k8s.io/v1/tokenreviews` (`pkg/registry/authentication/tokenreview`):
//!   tokens the fixture issued through TokenRequest are service account tokens (checked as
//!   `pkg/serviceaccount` does: expiry with go-jose's one-minute leeway, audiences, the account
//!   and the bound pod still existing with the same UIDs); static tokens from `FixtureOptions`
//!   are the `--token-auth-file` users; anything else is `authenticated: false`.
//! - `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`
//!   (`pkg/registry/authorization/subjectaccessreview`): answered from `AccessRule`s, first match
//!   wins, default allow (as `--authorization-mode=AlwaysAllow`).
//!
//! Both are create-only and store nothing. The decisions are pure functions of JSON values; the
//! caller supplies lookups of service accounts and pods.

use std::collections::{BTreeMap, HashSet};

use jiff::Timestamp;
use serde_json::{json, Value};

use crate::error::{ApiError, FieldError};
use crate::serviceaccount::{self, ISSUER};

/// go-jose's `DefaultLeeway`: a token is still valid this long after `exp`.
const EXPIRY_LEEWAY_SECONDS: i64 = 60;

/// Who a token belongs to (`authentication.k8s.io/v1` `UserInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    pub fn new(username: &str, uid: &str, groups: &[&str]) -> Self {
        UserInfo {
            username: username.into(),
            uid: uid.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: BTreeMap::new(),
        }
    }

    fn to_json(&self) -> Value {
        let mut v = json!({});
        if !self.username.is_empty() {
            v["username"] = json!(self.username);
        }
        if !self.uid.is_empty() {
            v["uid"] = json!(self.uid);
        }
        if !self.groups.is_empty() {
            v["groups"] = json!(self.groups);
        }
        if !self.extra.is_empty() {
            v["extra"] = json!(self.extra);
        }
        v
    }
}

/// An authorizer's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// An explicit deny (`status.denied: true`), as a webhook authorizer can answer.
    Deny,
    /// No authorizer allowed it (RBAC's answer when nothing grants it): `allowed: false` only.
    NoOpinion,
}

/// One authorization rule; `None` fields match anything. For `subresource`, `Some("")` matches
/// only requests without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRule {
    pub user: Option<String>,
    pub group: Option<String>,
    pub verb: Option<String>,
    pub namespace: Option<String>,
    pub resource: Option<String>,
    pub subresource: Option<String>,
    pub decision: Decision,
    pub reason: String,
}

impl AccessRule {
    /// Denies everything `user` asks.
    pub fn deny_user(user: &str, reason: &str) -> Self {
        AccessRule {
            user: Some(user.into()),
            group: None,
            verb: None,
            namespace: None,
            resource: None,
            subresource: None,
            decision: Decision::Deny,
            reason: reason.into(),
        }
    }

    /// Denies `user` one verb on one resource/subresource (`""` for none).
    pub fn deny(user: &str, verb: &str, resource: &str, subresource: &str, reason: &str) -> Self {
        AccessRule {
            verb: Some(verb.into()),
            resource: Some(resource.into()),
            subresource: Some(subresource.into()),
            ..AccessRule::deny_user(user, reason)
        }
    }

    fn matches(&self, request: &AccessRequest) -> bool {
        let field = |rule: &Option<String>, value: &str| rule.as_deref().is_none_or(|r| r == value);
        field(&self.user, &request.user)
            && self
                .group
                .as_deref()
                .is_none_or(|g| request.groups.iter().any(|x| x == g))
            && field(&self.verb, &request.verb)
            && field(&self.namespace, &request.namespace)
            && field(&self.resource, &request.resource)
            && field(&self.subresource, &request.subresource)
            && !(request.non_resource && self.resource.is_some())
    }
}

/// What a SubjectAccessReview asks, flattened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessRequest {
    pub user: String,
    pub groups: Vec<String>,
    pub verb: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub non_resource: bool,
}

/// The first matching rule's decision and reason; `Allow` with no reason when none matches.
pub fn authorize(rules: &[AccessRule], request: &AccessRequest) -> (Decision, String) {
    rules
        .iter()
        .find(|r| r.matches(request))
        .map(|r| (r.decision, r.reason.clone()))
        .unwrap_or((Decision::Allow, String::new()))
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn strings_at(v: &Value, pointer: &str) -> Vec<String> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn check_kind(body: &Value, group: &str, kind: &str) -> Result<(), ApiError> {
    let api_version = str_at(body, "/apiVersion");
    let body_kind = str_at(body, "/kind");
    if (!api_version.is_empty() && api_version != format!("{group}/v1"))
        || (!body_kind.is_empty() && body_kind != kind)
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({group}/v1)"
        )));
    }
    Ok(())
}

/// The answer object: the request with `status`, as the API server echoes it.
fn answer(body: &Value, group: &str, kind: &str, status: Value) -> Value {
    let mut out = body.clone();
    out["apiVersion"] = json!(format!("{group}/v1"));
    out["kind"] = json!(kind);
    if !out["metadata"].is_object() {
        out["metadata"] = json!({});
    }
    out["metadata"]["creationTimestamp"] = Value::Null;
    out["status"] = status;
    out
}

/// `POST subjectaccessreviews`: validation (`ValidateSubjectAccessReviewSpec`) and the decision.
pub fn review_access(body: &Value, rules: &[AccessRule]) -> Result<Value, ApiError> {
    const GROUP: &str = "authorization.k8s.io";
    check_kind(body, GROUP, "SubjectAccessReview")?;
    let spec = &body["spec"];
    let resource = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    let user = str_at(spec, "/user");
    let groups = strings_at(spec, "/groups");
    let mut errors = Vec::new();
    match (resource, non_resource) {
        (Some(_), Some(n)) => errors.push(FieldError::invalid(
            "spec.nonResourceAttributes",
            &json!(n.to_string()),
            "cannot be specified in combination with resourceAttributes",
        )),
        (None, None) => errors.push(FieldError::invalid(
            "spec.resourceAttributes",
            &json!("null"),
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => {}
    }
    if user.is_empty() && groups.is_empty() {
        errors.push(FieldError::invalid(
            "spec.user",
            &json!(user),
            "at least one of user or group must be specified",
        ));
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid_group_kind(
            GROUP,
            "SubjectAccessReview",
            "",
            &errors,
        ));
    }
    let request = match (resource, non_resource) {
        (Some(r), _) => AccessRequest {
            user: user.into(),
            groups,
            verb: str_at(r, "/verb").into(),
            namespace: str_at(r, "/namespace").into(),
            resource: str_at(r, "/resource").into(),
            subresource: str_at(r, "/subresource").into(),
            non_resource: false,
        },
        (None, n) => AccessRequest {
            user: user.into(),
            groups,
            verb: n.map(|n| str_at(n, "/verb")).unwrap_or("").into(),
            non_resource: true,
            ..AccessRequest::default()
        },
    };
    let (decision, reason) = authorize(rules, &request);
    // SubjectAccessReviewStatus: `allowed` always, `denied`/`reason` omitempty.
    let mut status = json!({"allowed": decision == Decision::Allow});
    if decision == Decision::Deny {
        status["denied"] = json!(true);
    }
    if !reason.is_empty() {
        status["reason"] = json!(reason);
    }
    Ok(answer(body, GROUP, "SubjectAccessReview", status))
}

/// What the token review needs from the fixture.
pub struct TokenReviewContext<'a> {
    pub now: Timestamp,
    pub static_tokens: &'a BTreeMap<String, UserInfo>,
    /// Tokens this fixture issued through TokenRequest.
    pub issued: &'a HashSet<String>,
    /// `(namespace, name)` → the stored ServiceAccount.
    pub service_account: &'a dyn Fn(&str, &str) -> Option<Value>,
    /// `(namespace, name)` → the stored Pod.
    pub pod: &'a dyn Fn(&str, &str) -> Option<Value>,
}

/// The outcome of authenticating one token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authenticated {
    Yes {
        user: UserInfo,
        audiences: Vec<String>,
    },
    /// Not authenticated; `error` is `status.error` ("" for a token nobody recognizes).
    No { error: String },
}

fn intersect(a: &[String], b: &[String]) -> Vec<String> {
    a.iter().filter(|x| b.contains(x)).cloned().collect()
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn go_quoted(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// Authenticates `token` for `requested` audiences (the API server's when empty).
pub fn authenticate(
    token: &str,
    requested: &[String],
    ctx: &TokenReviewContext<'_>,
) -> Authenticated {
    let api_audiences = vec![ISSUER.to_string()];
    let requested = if requested.is_empty() {
        api_audiences.clone()
    } else {
        requested.to_vec()
    };
    let no = |error: String| Authenticated::No { error };
    if let Some(user) = ctx.static_tokens.get(token) {
        // WrapAudienceAgnosticToken: only for the API server's own audiences.
        let audiences = intersect(&api_audiences, &requested);
        if audiences.is_empty() {
            return no(String::new());
        }
        let mut user = user.clone();
        if !user.groups.iter().any(|g| g == "system:authenticated") {
            user.groups.push("system:authenticated".into());
        }
        return Authenticated::Yes { user, audiences };
    }
    if !ctx.issued.contains(token) {
        return no(String::new());
    }
    let Some(claims) = serviceaccount::token_claims(token) else {
        return no(String::new());
    };
    let now = ctx.now.as_second();
    if claims["exp"]
        .as_i64()
        .is_some_and(|exp| now > exp + EXPIRY_LEEWAY_SECONDS)
    {
        return no("service account token has expired".into());
    }
    if claims["nbf"]
        .as_i64()
        .is_some_and(|nbf| now < nbf - EXPIRY_LEEWAY_SECONDS)
    {
        return no("service account token is not valid yet".into());
    }
    let token_audiences = match &claims["aud"] {
        Value::String(s) => vec![s.clone()],
        other => strings_at(other, ""),
    };
    let audiences = intersect(&token_audiences, &requested);
    if audiences.is_empty() {
        return no(format!(
            "token audiences {} is invalid for the target audiences {}",
            go_quoted(&token_audiences),
            go_quoted(&requested)
        ));
    }
    let private = &claims["kubernetes.io"];
    let namespace = str_at(private, "/namespace");
    let account = str_at(private, "/serviceaccount/name");
    let account_uid = str_at(private, "/serviceaccount/uid");
    let Some(stored) = (ctx.service_account)(namespace, account) else {
        return no(format!("serviceaccounts {account:?} not found"));
    };
    let stored_uid = str_at(&stored, "/metadata/uid");
    if stored_uid != account_uid {
        return no(format!(
            "service account UID ({stored_uid}) does not match claim ({account_uid})"
        ));
    }
    let mut extra = BTreeMap::new();
    if let Some(pod) = private.get("pod").filter(|p| p.is_object()) {
        let pod_name = str_at(pod, "/name");
        let pod_uid = str_at(pod, "/uid");
        let Some(stored) = (ctx.pod)(namespace, pod_name) else {
            return no(format!("pods {pod_name:?} not found"));
        };
        let stored_uid = str_at(&stored, "/metadata/uid");
        if stored_uid != pod_uid {
            return no(format!(
                "pod UID ({stored_uid}) does not match claim ({pod_uid})"
            ));
        }
        extra.insert(
            "authentication.kubernetes.io/pod-name".to_string(),
            vec![pod_name.to_string()],
        );
        extra.insert(
            "authentication.kubernetes.io/pod-uid".to_string(),
            vec![pod_uid.to_string()],
        );
    }
    if let Some(node) = private.get("node").filter(|n| n.is_object()) {
        extra.insert(
            "authentication.kubernetes.io/node-name".to_string(),
            vec![str_at(node, "/name").to_string()],
        );
        extra.insert(
            "authentication.kubernetes.io/node-uid".to_string(),
            vec![str_at(node, "/uid").to_string()],
        );
    }
    let jti = claims["jti"].as_str().unwrap_or("");
    if !jti.is_empty() {
        extra.insert(
            "authentication.kubernetes.io/credential-id".to_string(),
            vec![format!("JTI={jti}")],
        );
    }
    Authenticated::Yes {
        user: UserInfo {
            username: format!("system:serviceaccount:{namespace}:{account}"),
            uid: account_uid.to_string(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
            extra,
        },
        audiences,
    }
}

/// `POST tokenreviews`: the TokenReview with `status` filled in.
pub fn review_token(body: &Value, ctx: &TokenReviewContext<'_>) -> Result<Value, ApiError> {
    const GROUP: &str = "authentication.k8s.io";
    check_kind(body, GROUP, "TokenReview")?;
    let token = str_at(body, "/spec/token");
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let requested = strings_at(body, "/spec/audiences");
    // TokenReviewStatus: authenticated/audiences/error omitempty, user always (an empty object).
    let status = match authenticate(token, &requested, ctx) {
        Authenticated::Yes { user, audiences } => {
            json!({"authenticated": true, "user": user.to_json(), "audiences": audiences})
        }
        Authenticated::No { error } if error.is_empty() => json!({"user": {}}),
        Authenticated::No { error } => json!({"user": {}, "error": error}),
    };
    Ok(answer(body, GROUP, "TokenReview", status))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sar(spec: Value) -> Value {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
    }

    #[test]
    fn access_reviews() {
        let rules = vec![
            AccessRule::deny(
                "system:node:n1",
                "get",
                "nodes",
                "proxy",
                "no proxy for you",
            ),
            AccessRule::deny_user("mallory", "mallory is banned"),
            AccessRule {
                group: Some("system:unauthenticated".into()),
                decision: Decision::NoOpinion,
                reason: String::new(),
                ..AccessRule::deny_user("", "")
            }
            .any_user(),
        ];
        let ra = |user: &str, verb: &str, resource: &str, sub: &str| {
            sar(
                json!({"user": user, "resourceAttributes": {"verb": verb, "resource": resource, "subresource": sub, "name": "n1"}}),
            )
        };
        // (request, Ok(status) or Err(message))
        let cases: Vec<(Value, Result<Value, &str>)> = vec![
            (ra("alice", "get", "nodes", "proxy"), Ok(json!({"allowed": true}))),
            (ra("system:node:n1", "get", "nodes", "proxy"), Ok(json!({"allowed": false, "denied": true, "reason": "no proxy for you"}))),
            (ra("system:node:n1", "get", "nodes", "log"), Ok(json!({"allowed": true}))),
            (ra("system:node:n1", "get", "nodes", ""), Ok(json!({"allowed": true}))),
            (ra("system:node:n1", "list", "nodes", "proxy"), Ok(json!({"allowed": true}))),
            (ra("mallory", "get", "pods", ""), Ok(json!({"allowed": false, "denied": true, "reason": "mallory is banned"}))),
            (
                sar(json!({"user": "mallory", "nonResourceAttributes": {"path": "/healthz", "verb": "get"}})),
                Ok(json!({"allowed": false, "denied": true, "reason": "mallory is banned"})),
            ),
            (
                sar(json!({"groups": ["system:unauthenticated"], "resourceAttributes": {"verb": "get", "resource": "pods"}})),
                Ok(json!({"allowed": false})),
            ),
            (
                sar(json!({"user": "alice"})),
                Err("SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified"),
            ),
            (
                sar(json!({"resourceAttributes": {"verb": "get"}})),
                Err("SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified"),
            ),
        ];
        for (request, want) in cases {
            match (review_access(&request, &rules), want) {
                (Ok(got), Ok(status)) => {
                    assert_eq!(got["status"], status, "{request}");
                    assert_eq!(got["spec"], request["spec"]);
                    assert_eq!(got["kind"], "SubjectAccessReview");
                }
                (Err(e), Err(message)) => {
                    assert_eq!(e.code, 422);
                    assert_eq!(e.message, message);
                }
                (got, want) => panic!("{request}: got {got:?}, want {want:?}"),
            }
        }
        assert_eq!(
            review_access(&sar(json!({"user": "a", "resourceAttributes": {}})), &[]).unwrap()
                ["status"],
            json!({"allowed": true}),
            "no rules: allow everything"
        );
    }

    impl AccessRule {
        fn any_user(mut self) -> Self {
            self.user = None;
            self
        }
    }

    fn issued_token(claims: Value) -> String {
        serviceaccount::unsigned_jwt(&claims)
    }

    #[test]
    fn token_reviews() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let claims = |exp: i64, aud: Value, pod_uid: &str| {
            json!({
                "aud": aud, "exp": exp, "iat": exp - 3600, "nbf": exp - 3600, "iss": ISSUER, "jti": "j1",
                "sub": "system:serviceaccount:default:builder",
                "kubernetes.io": {
                    "namespace": "default",
                    "serviceaccount": {"name": "builder", "uid": "sa-uid"},
                    "pod": {"name": "web", "uid": pod_uid},
                    "node": {"name": "n1", "uid": "node-uid"}
                }
            })
        };
        let now_s = now.as_second();
        let good = issued_token(claims(now_s + 600, json!([ISSUER]), "pod-uid"));
        let custom_aud = issued_token(claims(now_s + 600, json!(["vault"]), "pod-uid"));
        let expired = issued_token(claims(now_s - 61, json!([ISSUER]), "pod-uid"));
        let in_leeway = issued_token(claims(now_s - 59, json!([ISSUER]), "pod-uid"));
        let other_pod = issued_token(claims(now_s + 600, json!([ISSUER]), "old-pod-uid"));
        let forged = issued_token(claims(now_s + 600, json!([ISSUER]), "pod-uid")) + "x";
        let issued: HashSet<String> = [&good, &custom_aud, &expired, &in_leeway, &other_pod]
            .into_iter()
            .cloned()
            .collect();
        let mut static_tokens = BTreeMap::new();
        static_tokens.insert(
            "s3cret".to_string(),
            UserInfo::new("admin", "admin-uid", &["system:masters"]),
        );
        let account = |ns: &str, name: &str| {
            (ns == "default" && name == "builder")
                .then(|| json!({"metadata": {"name": "builder", "uid": "sa-uid"}}))
        };
        let pod = |ns: &str, name: &str| {
            (ns == "default" && name == "web")
                .then(|| json!({"metadata": {"name": "web", "uid": "pod-uid"}}))
        };
        let ctx = TokenReviewContext {
            now,
            static_tokens: &static_tokens,
            issued: &issued,
            service_account: &account,
            pod: &pod,
        };
        // (token, audiences, Some(username, audiences) or Err(error))
        type Want<'a> = Result<(&'a str, Vec<&'a str>), &'a str>;
        let cases: Vec<(&str, Vec<&str>, Want)> = vec![
            (&good, vec![], Ok(("system:serviceaccount:default:builder", vec![ISSUER]))),
            (&good, vec!["other", ISSUER], Ok(("system:serviceaccount:default:builder", vec![ISSUER]))),
            (&good, vec!["vault"], Err("token audiences [\"https://kubernetes.default.svc.cluster.local\"] is invalid for the target audiences [\"vault\"]")),
            (&custom_aud, vec!["vault"], Ok(("system:serviceaccount:default:builder", vec!["vault"]))),
            (&custom_aud, vec![], Err("token audiences [\"vault\"] is invalid for the target audiences [\"https://kubernetes.default.svc.cluster.local\"]")),
            (&expired, vec![], Err("service account token has expired")),
            (&in_leeway, vec![], Ok(("system:serviceaccount:default:builder", vec![ISSUER]))),
            (&other_pod, vec![], Err("pod UID (pod-uid) does not match claim (old-pod-uid)")),
            (&forged, vec![], Err("")),
            ("random", vec![], Err("")),
            ("s3cret", vec![], Ok(("admin", vec![ISSUER]))),
            ("s3cret", vec!["vault"], Err("")),
        ];
        for (token, auds, want) in cases {
            let auds: Vec<String> = auds.into_iter().map(String::from).collect();
            match (authenticate(token, &auds, &ctx), want) {
                (Authenticated::Yes { user, audiences }, Ok((name, want_auds))) => {
                    assert_eq!(user.username, name, "{token}");
                    assert_eq!(audiences, want_auds, "{token}");
                    assert!(user.groups.contains(&"system:authenticated".to_string()));
                }
                (Authenticated::No { error }, Err(want_error)) => {
                    assert_eq!(error, want_error, "{token} {auds:?}")
                }
                (got, want) => panic!("{token} {auds:?}: got {got:?}, want {want:?}"),
            }
        }
        let Authenticated::Yes { user, .. } = authenticate(&good, &[], &ctx) else {
            panic!("good token");
        };
        assert_eq!(
            user.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:default",
                "system:authenticated"
            ]
        );
        assert_eq!(user.uid, "sa-uid");
        assert_eq!(user.extra["authentication.kubernetes.io/pod-name"], ["web"]);
        assert_eq!(user.extra["authentication.kubernetes.io/node-name"], ["n1"]);
        assert_eq!(
            user.extra["authentication.kubernetes.io/credential-id"],
            ["JTI=j1"]
        );
        let Authenticated::Yes { user, .. } = authenticate("s3cret", &[], &ctx) else {
            panic!("static token");
        };
        assert_eq!(user.groups, ["system:masters", "system:authenticated"]);

        let review = |spec: Value| {
            review_token(
                &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}),
                &ctx,
            )
        };
        let answered = review(json!({"token": "random"})).unwrap();
        assert_eq!(answered["status"], json!({"user": {}}));
        assert_eq!(answered["spec"]["token"], "random");
        let answered = review(json!({"token": expired})).unwrap();
        assert_eq!(
            answered["status"],
            json!({"user": {}, "error": "service account token has expired"})
        );
        let answered = review(json!({"token": "s3cret"})).unwrap();
        assert_eq!(answered["status"]["authenticated"], true);
        assert_eq!(answered["status"]["user"]["username"], "admin");
        assert_eq!(answered["status"]["audiences"], json!([ISSUER]));
        let err = review(json!({})).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (400, "token is required for TokenReview in authentication")
        );
    }
}
