//! The API server's ServiceAccount machinery that every pod on a real cluster depends on:
//!
//! - the objects the controller manager keeps in every namespace: the `default` ServiceAccount
//!   (serviceaccounts-controller) and the `kube-root-ca.crt` ConfigMap (root-ca-cert-publisher);
//! - the ServiceAccount admission plugin (`plugin/pkg/admission/serviceaccount`): a pod gets
//!   `serviceAccountName: default`, the ServiceAccount must exist, and unless
//!   `automountServiceAccountToken: false` (pod first, then ServiceAccount) every init and regular
//!   container mounts a `kube-api-access-<random>` projected volume at
//!   `/var/run/secrets/kubernetes.io/serviceaccount`; mirror pods are left alone but may not
//!   refer to service accounts, secrets or token projections;
//! - the TokenRequest subresource (`pkg/registry/core/serviceaccount/storage/token.go`): a token
//!   for a ServiceAccount, optionally bound to a pod whose name, UID and service account must
//!   match. Tokens are unsigned JWTs (`alg: none`) carrying the API server's claims, so tests can
//!   read what was asked for; nothing verifies them.
//!
//! The decisions are pure functions of JSON values; the store supplies the lookups.

use jiff::Timestamp;
use serde_json::{json, Map, Value};

use crate::error::{ApiError, FieldError};
use crate::resource::ResourceType;

/// The ServiceAccount a pod runs as when it names none.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
/// The ConfigMap with the cluster's CA bundle, in every namespace.
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";
/// Prefix of the admission plugin's projected volume (`ServiceAccountVolumeName + "-"`).
pub const TOKEN_VOLUME_PREFIX: &str = "kube-api-access-";
/// Where every container mounts that volume (`DefaultAPITokenMountPath`).
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// `serviceaccount.WarnOnlyBoundTokenExpirationSeconds`: the admission volume's token lifetime.
pub const ADMISSION_TOKEN_EXPIRATION_SECONDS: i64 = 3607;
/// The issuer, and the API server's audience (`--api-audiences` defaults to the issuer).
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// `SetDefaults_TokenRequestSpec`: one hour when a TokenRequest names no expiration.
pub const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;
const MIN_TOKEN_EXPIRATION_SECONDS: i64 = 600;
const MAX_TOKEN_EXPIRATION_SECONDS: i64 = 1 << 32;
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Not a certificate anyone can verify with: the fixture serves plain HTTP. It has the shape of
/// one so that programs reading `ca.crt` find PEM.
const FIXTURE_CA_PEM: &str = "-----BEGIN CERTIFICATE-----\n\
YXBpc2VydmVyLWZpeHR1cmU6IHRoaXMgaXMgbm90IGEgY2VydGlmaWNhdGUuIFRo\n\
ZSBmaXh0dXJlIHNlcnZlcyBwbGFpbiBIVFRQIG9uIDEyNy4wLjAuMS4=\n\
-----END CERTIFICATE-----\n";

const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// The `default` ServiceAccount the serviceaccounts-controller creates in a namespace.
pub fn default_service_account(namespace: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": DEFAULT_SERVICE_ACCOUNT, "namespace": namespace},
    })
}

/// The `kube-root-ca.crt` ConfigMap the root-ca-cert-publisher creates in a namespace.
pub fn root_ca_config_map(namespace: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": ROOT_CA_CONFIG_MAP,
            "namespace": namespace,
            "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION},
        },
        "data": {"ca.crt": FIXTURE_CA_PEM},
    })
}

/// `TokenVolumeSource()`: token, CA bundle and namespace, with the default mode set explicitly
/// (the admission plugin runs after defaulting).
pub fn token_volume_source() -> Value {
    json!({
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": ADMISSION_TOKEN_EXPIRATION_SECONDS, "path": "token"}},
            {"configMap": {"name": ROOT_CA_CONFIG_MAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ],
    })
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn array_at<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

pub fn is_mirror_pod(pod: &Value) -> bool {
    pod.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
}

/// The ServiceAccount the pod names: `serviceAccountName`, else the deprecated `serviceAccount`
/// (the v1 conversion), else `default` (the admission plugin).
pub fn service_account_name(pod: &Value) -> String {
    let name = str_at(pod, "/spec/serviceAccountName");
    let deprecated = str_at(pod, "/spec/serviceAccount");
    if !name.is_empty() {
        name.to_string()
    } else if !deprecated.is_empty() {
        deprecated.to_string()
    } else {
        DEFAULT_SERVICE_ACCOUNT.to_string()
    }
}

/// Whether the pod refers to any Secret (`podutil.VisitPodSecretNames`).
fn references_secrets(pod: &Value) -> bool {
    let named = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|n| !n.is_empty());
    if array_at(pod, "/spec/imagePullSecrets")
        .iter()
        .any(|s| named(s.get("name")))
    {
        return true;
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in array_at(pod, &format!("/spec/{list}")) {
            if array_at(c, "/envFrom")
                .iter()
                .any(|e| named(e.pointer("/secretRef/name")))
                || array_at(c, "/env")
                    .iter()
                    .any(|e| named(e.pointer("/valueFrom/secretKeyRef/name")))
            {
                return true;
            }
        }
    }
    array_at(pod, "/spec/volumes").iter().any(|v| {
        named(v.pointer("/secret/secretName"))
            || named(v.pointer("/azureFile/secretName"))
            || named(v.pointer("/scaleIO/secretRef/name"))
            || named(v.pointer("/csi/nodePublishSecretRef/name"))
            || [
                "cephfs",
                "cinder",
                "flexVolume",
                "iscsi",
                "rbd",
                "storageos",
            ]
            .iter()
            .any(|k| named(v.pointer(&format!("/{k}/secretRef/name"))))
            || array_at(v, "/projected/sources")
                .iter()
                .any(|s| named(s.pointer("/secret/name")))
    })
}

fn uses_token_projection(pod: &Value) -> bool {
    array_at(pod, "/spec/volumes").iter().any(|v| {
        array_at(v, "/projected/sources")
            .iter()
            .any(|s| s.get("serviceAccountToken").is_some_and(|t| !t.is_null()))
    })
}

/// `shouldAutomount`: the pod's preference wins, then the ServiceAccount's, else true.
fn should_automount(service_account: &Value, pod: &Value) -> bool {
    pod.pointer("/spec/automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| {
            service_account
                .get("automountServiceAccountToken")
                .and_then(Value::as_bool)
        })
        .unwrap_or(true)
}

/// What admission needs to know before it can decide: the ServiceAccount the pod will run as
/// (`None` for a mirror pod, which is not mutated).
pub fn account_to_admit(pod: &Value) -> Option<String> {
    (!is_mirror_pod(pod)).then(|| service_account_name(pod))
}

/// The ServiceAccount admission plugin on pod creation. `service_account` is the account
/// [`account_to_admit`] named, if it exists in the pod's namespace; `volume_suffix` the random
/// part of a new `kube-api-access-` volume. `Err` is the Forbidden detail
/// (`pods "web" is forbidden: <detail>`).
pub fn admit_pod(
    pod: &mut Value,
    namespace: &str,
    service_account: Option<&Value>,
    volume_suffix: &str,
) -> Result<(), String> {
    if is_mirror_pod(pod) {
        if !str_at(pod, "/spec/serviceAccountName").is_empty() {
            return Err("a mirror pod may not reference service accounts".into());
        }
        if references_secrets(pod) {
            return Err("a mirror pod may not reference secrets".into());
        }
        if uses_token_projection(pod) {
            return Err("a mirror pod may not use ServiceAccountToken volume projections".into());
        }
        return Ok(());
    }
    let name = service_account_name(pod);
    let Some(account) = service_account else {
        return Err(format!(
            "error looking up service account {namespace}/{name}: serviceaccount {name:?} not found"
        ));
    };
    let automount = should_automount(account, pod);
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    spec.insert("serviceAccountName".into(), json!(name));
    // The v1 form carries the deprecated alias too.
    spec.insert("serviceAccount".into(), json!(name));
    if automount {
        mount_token_volume(spec, volume_suffix);
    }
    let has_pull_secrets = spec
        .get("imagePullSecrets")
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty());
    let account_pull_secrets = array_at(account, "/imagePullSecrets");
    if !has_pull_secrets && !account_pull_secrets.is_empty() {
        let copied: Vec<Value> = account_pull_secrets
            .iter()
            .map(|s| json!({"name": str_at(s, "/name")}))
            .collect();
        spec.insert("imagePullSecrets".into(), Value::Array(copied));
    }
    Ok(())
}

/// `mountServiceAccountToken`: reuse a `kube-api-access-*` volume the pod already has, else name
/// a new one; every init and regular container without a mount at the token path gets one
/// (read-only); the volume is added when some container needed it.
fn mount_token_volume(spec: &mut Map<String, Value>, volume_suffix: &str) {
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .find(|n| n.starts_with(TOKEN_VOLUME_PREFIX))
        .map(str::to_string);
    let has_volume = existing.is_some();
    let volume_name = existing.unwrap_or_else(|| format!("{TOKEN_VOLUME_PREFIX}{volume_suffix}"));
    let mount = json!({"name": volume_name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    let mut needed = false;
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            let mounts = c.entry("volumeMounts").or_insert_with(|| json!([]));
            if mounts.is_null() {
                *mounts = json!([]);
            }
            let Some(mounts) = mounts.as_array_mut() else {
                continue;
            };
            if mounts
                .iter()
                .any(|m| str_at(m, "/mountPath") == TOKEN_MOUNT_PATH)
            {
                continue;
            }
            mounts.push(mount.clone());
            needed = true;
        }
    }
    if needed && !has_volume {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if volumes.is_null() {
            *volumes = json!([]);
        }
        if let Some(volumes) = volumes.as_array_mut() {
            volumes.push(json!({"name": volume_name, "projected": token_volume_source()}));
        }
    }
}

/// A TokenRequest after defaulting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRequest {
    pub audiences: Vec<String>,
    pub expiration_seconds: i64,
    pub bound: Option<BoundObject>,
}

/// `spec.boundObjectRef`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundObject {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

fn token_request_kind() -> (&'static str, &'static str) {
    ("authentication.k8s.io", "TokenRequest")
}

/// Decodes, defaults (`expirationSeconds` 3600) and validates a TokenRequest body
/// (`ValidateTokenRequest`).
pub fn parse_token_request(body: &Value) -> Result<TokenRequest, ApiError> {
    let typed: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(body.clone()).map_err(|e| {
            ApiError::bad_request(format!(
                "TokenRequest in version \"v1\" cannot be handled as a TokenRequest: {e}"
            ))
        })?;
    let spec = typed.spec.unwrap_or_default();
    let expiration_seconds = spec
        .expiration_seconds
        .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS);
    let field = "spec.expirationSeconds";
    let mut errors = Vec::new();
    if expiration_seconds < MIN_TOKEN_EXPIRATION_SECONDS {
        errors.push(FieldError::invalid(
            field,
            &json!(expiration_seconds),
            "may not specify a duration less than 10 minutes",
        ));
    }
    if expiration_seconds > MAX_TOKEN_EXPIRATION_SECONDS {
        errors.push(FieldError::invalid(
            field,
            &json!(expiration_seconds),
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    if !errors.is_empty() {
        let (group, kind) = token_request_kind();
        return Err(ApiError::invalid_group_kind(group, kind, "", &errors));
    }
    Ok(TokenRequest {
        audiences: spec.audiences.unwrap_or_default(),
        expiration_seconds,
        bound: spec.bound_object_ref.map(|r| BoundObject {
            api_version: r.api_version.unwrap_or_default(),
            kind: r.kind.unwrap_or_default(),
            name: r.name.unwrap_or_default(),
            uid: r.uid.unwrap_or_default(),
        }),
    })
}

/// The objects a token is issued against, as the store found them.
pub struct TokenSubjects<'a> {
    pub namespace: &'a str,
    pub service_account: &'a Value,
    /// The bound pod, when the request names one and it exists.
    pub pod: Option<&'a Value>,
    /// The bound pod's node, when it exists.
    pub node: Option<&'a Value>,
}

/// Checks the bound object of `request` (the pod must exist, run as `service_account` and have
/// the UID the reference names). `pods` is the pods resource, for the API server's messages.
pub fn check_bound_pod(
    request: &TokenRequest,
    service_account: &str,
    pod: Option<&Value>,
    pods: &ResourceType,
) -> Result<(), ApiError> {
    let Some(bound) = &request.bound else {
        return Ok(());
    };
    let group = bound.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if !(group.is_empty() && bound.kind == "Pod") {
        let gvk = if group.is_empty() {
            format!("/{}, Kind={}", bound.api_version, bound.kind)
        } else {
            format!(
                "{group}/{}, Kind={}",
                bound.api_version.rsplit_once('/').map_or("", |(_, v)| v),
                bound.kind
            )
        };
        return Err(ApiError::bad_request(format!(
            "cannot bind token to object of type {gvk}"
        )));
    }
    let Some(pod) = pod else {
        return Err(ApiError::not_found(pods, &bound.name));
    };
    if str_at(pod, "/spec/serviceAccountName") != service_account {
        return Err(ApiError::bad_request(format!(
            "cannot bind token for serviceaccount {service_account:?} to pod running with different serviceaccount name."
        )));
    }
    let uid = str_at(pod, "/metadata/uid");
    if !bound.uid.is_empty() && bound.uid != uid {
        return Err(ApiError::precondition_conflict(
            pods,
            &bound.name,
            &format!(
                "the UID in the bound object reference ({}) does not match the UID in record. The object might have been deleted and then recreated",
                bound.uid
            ),
        ));
    }
    Ok(())
}

/// The issued TokenRequest (the answer of `POST .../serviceaccounts/<name>/token`): the spec with
/// the API server's audiences filled in, and `status.token` / `status.expirationTimestamp`.
pub fn issue_token(
    request: &TokenRequest,
    subjects: &TokenSubjects<'_>,
    now: Timestamp,
    jti: &str,
) -> Value {
    let audiences = if request.audiences.is_empty() {
        vec![ISSUER.to_string()]
    } else {
        request.audiences.clone()
    };
    let iat = now.as_second();
    let exp = iat.saturating_add(request.expiration_seconds);
    let account_name = str_at(subjects.service_account, "/metadata/name");
    let mut private = json!({
        "namespace": subjects.namespace,
        "serviceaccount": {
            "name": account_name,
            "uid": str_at(subjects.service_account, "/metadata/uid"),
        },
    });
    if let Some(pod) = subjects.pod {
        private["pod"] = json!({
            "name": str_at(pod, "/metadata/name"),
            "uid": str_at(pod, "/metadata/uid"),
        });
        if let Some(node) = subjects.node {
            private["node"] = json!({
                "name": str_at(node, "/metadata/name"),
                "uid": str_at(node, "/metadata/uid"),
            });
        }
    }
    let claims = json!({
        "aud": audiences,
        "exp": exp,
        "iat": iat,
        "iss": ISSUER,
        "jti": jti,
        "kubernetes.io": private,
        "nbf": iat,
        "sub": format!("system:serviceaccount:{}:{account_name}", subjects.namespace),
    });
    let expiration = Timestamp::from_second(exp)
        .map(crate::store::format_time)
        .unwrap_or_default();
    let mut spec = json!({
        "audiences": audiences,
        "expirationSeconds": request.expiration_seconds,
        "boundObjectRef": null,
    });
    if let Some(b) = &request.bound {
        spec["boundObjectRef"] =
            json!({"kind": b.kind, "apiVersion": b.api_version, "name": b.name, "uid": b.uid});
    }
    json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {
            "name": account_name,
            "namespace": subjects.namespace,
            "creationTimestamp": null,
        },
        "spec": spec,
        "status": {"token": unsigned_jwt(&claims), "expirationTimestamp": expiration},
    })
}

const BASE64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Base64url without padding, as JWTs are encoded.
fn base64url(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(BASE64URL[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let mut bits = 0u32;
    let mut count = 0;
    let mut out = Vec::new();
    for c in text.bytes() {
        let v = BASE64URL.iter().position(|b| *b == c)?;
        bits = (bits << 6) | u32::try_from(v).ok()?;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push(u8::try_from((bits >> count) & 0xff).ok()?);
        }
    }
    Some(out)
}

/// `header.claims.` with `alg: none`: a JWT in form, signed by nobody.
pub fn unsigned_jwt(claims: &Value) -> String {
    let header = json!({"alg": "none", "typ": "JWT"});
    format!(
        "{}.{}.",
        base64url(header.to_string().as_bytes()),
        base64url(claims.to_string().as_bytes())
    )
}

/// The claims of a token the fixture issued (for tests that check what a client asked for).
pub fn token_claims(token: &str) -> Option<Value> {
    let payload = token.split('.').nth(1)?;
    serde_json::from_slice(&base64url_decode(payload)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::find_by_plural;

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec})
    }

    fn account(extra: Value) -> Value {
        let mut sa = default_service_account("default");
        if let (Some(sa), Some(extra)) = (sa.as_object_mut(), extra.as_object()) {
            sa.extend(extra.clone());
        }
        sa
    }

    #[test]
    fn admission_table() {
        let token_mount = json!({"name": "kube-api-access-abcde", "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
        let token_volume =
            json!({"name": "kube-api-access-abcde", "projected": token_volume_source()});
        let mirror = |spec: Value| {
            let mut p = pod(spec);
            p["metadata"]["annotations"] = json!({MIRROR_ANNOTATION: "hash"});
            p
        };
        type Case = (
            &'static str,
            Value,
            Option<Value>,
            Result<Value, &'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "default account: every init and regular container mounts the new volume",
                pod(json!({"initContainers": [{"name": "i"}], "containers": [{"name": "a"}, {"name": "b", "volumeMounts": [{"name": "x", "mountPath": "/x"}]}], "ephemeralContainers": [{"name": "e"}]})),
                Some(account(json!({}))),
                Ok(json!({
                    "serviceAccountName": "default", "serviceAccount": "default",
                    "initContainers": [{"name": "i", "volumeMounts": [token_mount]}],
                    "containers": [{"name": "a", "volumeMounts": [token_mount]}, {"name": "b", "volumeMounts": [{"name": "x", "mountPath": "/x"}, token_mount]}],
                    "ephemeralContainers": [{"name": "e"}],
                    "volumes": [token_volume],
                })),
            ),
            (
                "the pod opts out",
                pod(json!({"automountServiceAccountToken": false, "containers": [{"name": "a"}]})),
                Some(account(json!({}))),
                Ok(json!({"automountServiceAccountToken": false, "serviceAccountName": "default", "serviceAccount": "default", "containers": [{"name": "a"}]})),
            ),
            (
                "the account opts out, its pull secrets are copied",
                pod(json!({"serviceAccount": "builder", "containers": [{"name": "a"}]})),
                Some(account(json!({"automountServiceAccountToken": false, "imagePullSecrets": [{"name": "reg"}]}))),
                Ok(json!({"serviceAccountName": "builder", "serviceAccount": "builder", "containers": [{"name": "a"}], "imagePullSecrets": [{"name": "reg"}]})),
            ),
            (
                "the pod's choice wins over the account's; a mount at the path is kept; an existing volume is reused",
                pod(json!({"automountServiceAccountToken": true,
                    "containers": [{"name": "a", "volumeMounts": [{"name": "own", "mountPath": TOKEN_MOUNT_PATH}]}, {"name": "b"}],
                    "volumes": [{"name": "kube-api-access-zzzzz", "emptyDir": {}}]})),
                Some(account(json!({"automountServiceAccountToken": false}))),
                Ok(json!({"automountServiceAccountToken": true, "serviceAccountName": "default", "serviceAccount": "default",
                    "containers": [{"name": "a", "volumeMounts": [{"name": "own", "mountPath": TOKEN_MOUNT_PATH}]},
                                   {"name": "b", "volumeMounts": [{"name": "kube-api-access-zzzzz", "readOnly": true, "mountPath": TOKEN_MOUNT_PATH}]}],
                    "volumes": [{"name": "kube-api-access-zzzzz", "emptyDir": {}}]})),
            ),
            (
                "a missing account is forbidden",
                pod(json!({"serviceAccountName": "ghost", "containers": [{"name": "a"}]})),
                None,
                Err("error looking up service account default/ghost: serviceaccount \"ghost\" not found"),
            ),
            (
                "a mirror pod is not mutated",
                mirror(json!({"containers": [{"name": "a"}]})),
                None,
                Ok(json!({"containers": [{"name": "a"}]})),
            ),
            (
                "a mirror pod may not name an account",
                mirror(json!({"serviceAccountName": "default", "containers": [{"name": "a"}]})),
                None,
                Err("a mirror pod may not reference service accounts"),
            ),
            (
                "a mirror pod may not refer to secrets",
                mirror(json!({"containers": [{"name": "a", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]})),
                None,
                Err("a mirror pod may not reference secrets"),
            ),
            (
                "a mirror pod may not project tokens",
                mirror(json!({"containers": [{"name": "a"}], "volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]})),
                None,
                Err("a mirror pod may not use ServiceAccountToken volume projections"),
            ),
        ];
        for (name, mut p, sa, want) in cases {
            let got =
                admit_pod(&mut p, "default", sa.as_ref(), "abcde").map(|()| p["spec"].clone());
            assert_eq!(got, want.map_err(str::to_string), "{name}");
        }
    }

    #[test]
    fn account_names() {
        let cases = [
            (json!({}), "default"),
            (json!({"serviceAccount": "old"}), "old"),
            (
                json!({"serviceAccountName": "new", "serviceAccount": "old"}),
                "new",
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(service_account_name(&pod(spec.clone())), want, "{spec}");
        }
        let mut mirror = pod(json!({}));
        mirror["metadata"]["annotations"] = json!({MIRROR_ANNOTATION: "h"});
        assert_eq!(account_to_admit(&mirror), None);
        assert_eq!(
            account_to_admit(&pod(json!({}))).as_deref(),
            Some("default")
        );
    }

    #[test]
    fn token_requests_are_defaulted_and_validated() {
        type Case = (Value, Result<(i64, usize, bool), &'static str>);
        let cases: Vec<Case> = vec![
            (json!({"spec": {}}), Ok((3600, 0, false))),
            (
                json!({"spec": {"audiences": ["a", "b"], "expirationSeconds": 3607, "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "u"}}}),
                Ok((3607, 2, true)),
            ),
            (
                json!({"spec": {"expirationSeconds": 599}}),
                Err("TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"),
            ),
            (
                json!({"spec": {"expirationSeconds": 4294967297_i64}}),
                Err("TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 4294967297: may not specify a duration larger than 2^32 seconds"),
            ),
        ];
        for (body, want) in cases {
            let got = parse_token_request(&body)
                .map(|r| (r.expiration_seconds, r.audiences.len(), r.bound.is_some()))
                .map_err(|e| e.message);
            assert_eq!(got, want.map_err(str::to_string), "{body}");
        }
        assert_eq!(
            parse_token_request(&json!({"spec": "nope"}))
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn bound_pod_checks() {
        let pods = find_by_plural("", "v1", "pods").unwrap();
        let bound = |kind: &str, uid: &str| TokenRequest {
            audiences: vec![],
            expiration_seconds: 3600,
            bound: Some(BoundObject {
                api_version: "v1".into(),
                kind: kind.into(),
                name: "web".into(),
                uid: uid.into(),
            }),
        };
        let stored = json!({"metadata": {"name": "web", "uid": "u1"}, "spec": {"serviceAccountName": "default"}});
        type Case<'a> = (
            TokenRequest,
            &'a str,
            Option<&'a Value>,
            Result<(), &'a str>,
        );
        let cases: Vec<Case> = vec![
            (bound("Pod", "u1"), "default", Some(&stored), Ok(())),
            (bound("Pod", ""), "default", Some(&stored), Ok(())),
            (
                TokenRequest { bound: None, ..bound("Pod", "") },
                "other",
                None,
                Ok(()),
            ),
            (bound("Pod", "u1"), "default", None, Err("pods \"web\" not found")),
            (
                bound("Pod", "u1"),
                "builder",
                Some(&stored),
                Err("cannot bind token for serviceaccount \"builder\" to pod running with different serviceaccount name."),
            ),
            (
                bound("Pod", "u0"),
                "default",
                Some(&stored),
                Err("Operation cannot be fulfilled on Pod \"web\": the UID in the bound object reference (u0) does not match the UID in record. The object might have been deleted and then recreated"),
            ),
            (
                bound("Node", ""),
                "default",
                None,
                Err("cannot bind token to object of type /v1, Kind=Node"),
            ),
        ];
        for (request, account, pod, want) in cases {
            let got = check_bound_pod(&request, account, pod, pods).map_err(|e| e.message);
            assert_eq!(got, want.map_err(str::to_string), "{request:?}");
        }
    }

    #[test]
    fn issued_tokens_carry_the_claims() {
        let request = TokenRequest {
            audiences: vec![],
            expiration_seconds: 3607,
            bound: Some(BoundObject {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: "web".into(),
                uid: "u1".into(),
            }),
        };
        let sa = json!({"metadata": {"name": "default", "uid": "sa-uid"}});
        let pod = json!({"metadata": {"name": "web", "uid": "u1"}});
        let node = json!({"metadata": {"name": "n1", "uid": "node-uid"}});
        let now: Timestamp = "2024-05-01T10:00:00Z".parse().unwrap();
        let issued = issue_token(
            &request,
            &TokenSubjects {
                namespace: "prod",
                service_account: &sa,
                pod: Some(&pod),
                node: Some(&node),
            },
            now,
            "jti-1",
        );
        assert_eq!(
            issued["status"]["expirationTimestamp"],
            "2024-05-01T11:00:07Z"
        );
        assert_eq!(issued["spec"]["audiences"], json!([ISSUER]));
        assert_eq!(issued["metadata"]["name"], "default");
        let token = issued["status"]["token"].as_str().unwrap();
        assert!(
            token.ends_with('.') && token.matches('.').count() == 2,
            "{token}"
        );
        let claims = token_claims(token).unwrap();
        assert_eq!(
            claims,
            json!({
                "aud": [ISSUER], "exp": now.as_second() + 3607, "iat": now.as_second(), "nbf": now.as_second(),
                "iss": ISSUER, "jti": "jti-1", "sub": "system:serviceaccount:prod:default",
                "kubernetes.io": {
                    "namespace": "prod",
                    "serviceaccount": {"name": "default", "uid": "sa-uid"},
                    "pod": {"name": "web", "uid": "u1"},
                    "node": {"name": "n1", "uid": "node-uid"},
                },
            })
        );
    }

    #[test]
    fn base64url_round_trips() {
        for data in [&b""[..], b"f", b"fo", b"foo", b"foob", b"\xff\xfe\xfd\x00"] {
            let encoded = base64url(data);
            assert!(!encoded.contains('='), "{encoded}");
            assert_eq!(base64url_decode(&encoded).unwrap(), data, "{encoded}");
        }
        assert_eq!(base64url(b"\xfb\xff"), "-_8");
        assert_eq!(base64url_decode("a*"), None);
    }

    #[test]
    fn namespace_objects() {
        let cm = root_ca_config_map("prod");
        assert_eq!(cm["metadata"]["namespace"], "prod");
        assert!(cm["data"]["ca.crt"]
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----\n"));
        assert_eq!(
            default_service_account("prod")["metadata"]["name"],
            "default"
        );
    }
}
