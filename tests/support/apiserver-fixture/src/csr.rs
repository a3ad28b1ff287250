//! CertificateSigningRequests (`certificates.k8s.io/v1`) as the API server and
//! kube-controller-manager's `csrsigning` controller handle them: creation (the requester's
//! identity written into the spec, the request checked), the `/approval` subresource (what
//! `kubectl certificate approve|deny` writes), and signing an approved request with the
//! fixture's CA, with the controller's lifetime rules (`--cluster-signing-duration`,
//! `spec.expirationSeconds`, 5 minutes of backdating) and the kubelet signers' checks.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{json, Value};

use crate::error::{ApiError, FieldError};
use crate::resource::ResourceType;
use crate::review::UserInfo;
use crate::store::format_time;

pub const CLIENT_KUBELET_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
/// The signers the fixture's `csrsigning` controller issues for (a request for another signer
/// stays approved and unsigned, as in a cluster without that signer).
pub const SIGNERS: &[&str] = &[CLIENT_KUBELET_SIGNER, KUBELET_SERVING_SIGNER, CLIENT_SIGNER];

/// The usages the API accepts (`certificates.KeyUsage`).
const KNOWN_USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

/// The signer's lifetime rules (kube-controller-manager's `csrsigning` controller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SigningPolicy {
    /// `--cluster-signing-duration` (default a year): the longest lifetime issued.
    pub duration: Duration,
    /// Every certificate starts this much before it is signed (clock skew).
    pub backdate: Duration,
    /// Below this lifetime the end is not backdated too.
    pub short: Duration,
}

impl Default for SigningPolicy {
    fn default() -> Self {
        SigningPolicy {
            duration: Duration::from_secs(365 * 24 * 3600),
            backdate: Duration::from_secs(5 * 60),
            short: Duration::from_secs(8 * 3600),
        }
    }
}

impl SigningPolicy {
    /// The lifetime for `spec.expirationSeconds`: the request if it is between 10 minutes and
    /// the signing duration, else the nearer bound (the signer's `duration`).
    pub fn lifetime(&self, expiration_seconds: Option<i64>) -> Duration {
        match expiration_seconds {
            None => self.duration,
            Some(seconds) => {
                let requested = Duration::from_secs(seconds.max(0) as u64);
                requested.clamp(Duration::from_secs(600).min(self.duration), self.duration)
            }
        }
    }

    /// `(notBefore, notAfter)` for a certificate signed at `now` (`PermissiveSigningPolicy`):
    /// backdated start; the end backdated too unless the lifetime is short.
    pub fn validity(&self, now: Timestamp, lifetime: Duration) -> (Timestamp, Timestamp) {
        let sub = |d: Duration| now - jiff::SignedDuration::try_from(d).unwrap_or_default();
        let add = |d: Duration| now + jiff::SignedDuration::try_from(d).unwrap_or_default();
        let not_before = sub(self.backdate);
        let not_after = if lifetime < self.short {
            add(lifetime)
        } else {
            add(lifetime.saturating_sub(self.backdate))
        };
        (not_before, not_after)
    }
}

fn csr_type() -> &'static ResourceType {
    crate::resource::find_by_plural("certificates.k8s.io", "v1", "certificatesigningrequests")
        .expect("the CSR resource is served")
}

fn invalid(name: &str, errors: &[FieldError]) -> ApiError {
    ApiError::invalid(csr_type(), name, errors)
}

fn decode_request(obj: &Value) -> Option<Vec<u8>> {
    use base64::Engine;
    let text = obj.pointer("/spec/request")?.as_str()?;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// The parsed PKCS#10 request of a CSR (its signature checked).
fn parse_request(pem: &[u8]) -> Result<rcgen::CertificateSigningRequestParams, String> {
    let text = std::str::from_utf8(pem).map_err(|_| "not PEM text".to_string())?;
    if !text.contains("-----BEGIN CERTIFICATE REQUEST-----") {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    }
    rcgen::CertificateSigningRequestParams::from_pem(text).map_err(|e| e.to_string())
}

/// The API server's create of a CSR: status dropped, `spec.username`/`uid`/`groups`/`extra`
/// set from the requester, then validation (`ValidateCertificateSigningRequestCreate`).
pub fn prepare_create(obj: &mut Value, user: Option<&UserInfo>) -> Result<(), ApiError> {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if let Some(map) = obj.as_object_mut() {
        map.remove("status");
    }
    let spec = obj
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| invalid(&name, &[FieldError::required("spec", "")]))?;
    for field in ["username", "uid", "groups", "extra"] {
        spec.remove(field);
    }
    if let Some(user) = user {
        if !user.username.is_empty() {
            spec.insert("username".into(), json!(user.username));
        }
        if !user.uid.is_empty() {
            spec.insert("uid".into(), json!(user.uid));
        }
        if !user.groups.is_empty() {
            spec.insert("groups".into(), json!(user.groups));
        }
        if !user.extra.is_empty() {
            spec.insert("extra".into(), json!(user.extra));
        }
    }
    let mut errors = Vec::new();
    match decode_request(obj) {
        None => errors.push(FieldError::required("spec.request", "")),
        Some(pem) => {
            if let Err(reason) = parse_request(&pem) {
                errors.push(FieldError::invalid(
                    "spec.request",
                    &json!("<request>"),
                    &reason,
                ));
            }
        }
    }
    let signer = obj
        .pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if signer.is_empty() {
        errors.push(FieldError::required("spec.signerName", ""));
    } else if !signer.contains('/') || signer.starts_with('/') || signer.ends_with('/') {
        errors.push(FieldError::invalid(
            "spec.signerName",
            &json!(signer),
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
    }
    let usages: Vec<&str> = obj
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .map(|u| u.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if usages.is_empty() {
        errors.push(FieldError::required("spec.usages", ""));
    }
    for (i, usage) in usages.iter().enumerate() {
        if !KNOWN_USAGES.contains(usage) {
            errors.push(FieldError {
                reason: "FieldValueNotSupported",
                field: format!("spec.usages[{i}]"),
                message: format!(
                    "Unsupported value: {usage:?}: supported values: {}",
                    KNOWN_USAGES
                        .iter()
                        .map(|u| format!("{u:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        } else if usages[..i].contains(usage) {
            errors.push(FieldError {
                reason: "FieldValueDuplicate",
                field: format!("spec.usages[{i}]"),
                message: format!("Duplicate value: {usage:?}"),
            });
        }
    }
    if let Some(seconds) = obj
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
    {
        if seconds < 600 {
            errors.push(FieldError::invalid(
                "spec.expirationSeconds",
                &json!(seconds),
                "may not specify a duration less than 600 seconds (10 minutes)",
            ));
        }
    }
    if !errors.is_empty() {
        return Err(invalid(&name, &errors));
    }
    Ok(())
}

fn conditions(obj: &Value) -> Vec<Value> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn has_condition(conditions: &[Value], kind: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

/// A write of the `/approval` subresource: only `status.conditions` is taken from the body
/// (everything else stays as stored), with the API server's condition rules and timestamps.
pub fn apply_approval(old: &Value, body: &Value, now: Timestamp) -> Result<Value, ApiError> {
    let name = old
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let rv = body
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let old_rv = old
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !rv.is_empty() && rv != old_rv {
        return Err(ApiError::update_conflict(csr_type(), &name));
    }
    let old_conditions = conditions(old);
    let mut new_conditions = conditions(body);
    let now_text = format_time(now);
    let mut errors = Vec::new();
    for (i, condition) in new_conditions.iter_mut().enumerate() {
        let kind = condition
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let status = condition
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let path = format!("status.conditions[{i}]");
        if kind.is_empty() {
            errors.push(FieldError::required(format!("{path}.type"), ""));
        }
        if !["True", "False", "Unknown"].contains(&status.as_str()) {
            errors.push(FieldError {
                reason: "FieldValueNotSupported",
                field: format!("{path}.status"),
                message: format!(
                    "Unsupported value: {status:?}: supported values: \"False\", \"True\", \"Unknown\""
                ),
            });
        } else if ["Approved", "Denied", "Failed"].contains(&kind.as_str()) && status != "True" {
            errors.push(FieldError {
                reason: "FieldValueNotSupported",
                field: format!("{path}.status"),
                message: format!("Unsupported value: {status:?}: supported values: \"True\""),
            });
        }
        if new_conditions_before(&kind, i, &conditions(body)) {
            errors.push(FieldError {
                reason: "FieldValueDuplicate",
                field: format!("{path}.type"),
                message: format!("Duplicate value: {kind:?}"),
            });
        }
        // Timestamps the client left out are the server's (`populateConditionTimestamps`).
        let previous = old_conditions
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(kind.as_str()));
        if let Some(map) = condition.as_object_mut() {
            if map.get("lastUpdateTime").is_none_or(Value::is_null) {
                map.insert("lastUpdateTime".into(), json!(now_text));
            }
            if map.get("lastTransitionTime").is_none_or(Value::is_null) {
                let kept = previous
                    .filter(|p| p.get("status").and_then(Value::as_str) == Some(status.as_str()))
                    .and_then(|p| p.get("lastTransitionTime").cloned());
                map.insert(
                    "lastTransitionTime".into(),
                    kept.unwrap_or_else(|| json!(now_text)),
                );
            }
        }
    }
    if has_condition(&new_conditions, "Approved") && has_condition(&new_conditions, "Denied") {
        errors.push(FieldError::invalid(
            "status.conditions",
            &json!("Approved"),
            "Approved and Denied conditions are mutually exclusive",
        ));
    }
    for kind in ["Approved", "Denied", "Failed"] {
        if has_condition(&old_conditions, kind) && !has_condition(&new_conditions, kind) {
            errors.push(FieldError::forbidden(
                "status.conditions",
                &format!("updates may not remove a condition of type {kind:?}"),
            ));
        }
    }
    if !errors.is_empty() {
        return Err(invalid(&name, &errors));
    }
    let mut new = old.clone();
    let status = new
        .as_object_mut()
        .map(|m| m.entry("status").or_insert_with(|| json!({})));
    if let Some(Value::Object(status)) = status {
        status.insert("conditions".into(), Value::Array(new_conditions));
    }
    Ok(new)
}

fn new_conditions_before(kind: &str, index: usize, all: &[Value]) -> bool {
    all[..index.min(all.len())]
        .iter()
        .any(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

/// Whether the signer should issue now: approved, not denied or failed, no certificate yet,
/// and a signer the fixture has.
pub fn should_sign(obj: &Value) -> bool {
    let c = conditions(obj);
    let signer = obj
        .pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or("");
    has_condition(&c, "Approved")
        && !has_condition(&c, "Denied")
        && !has_condition(&c, "Failed")
        && obj
            .pointer("/status/certificate")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        && SIGNERS.contains(&signer)
}

/// The signer's check of a request for the kubelet signers (`ValidateKubeletClientCSR`,
/// `ValidateKubeletServingCSR`) and the client signer: `Err(reason)` fails the CSR.
pub fn check_for_signer(
    signer: &str,
    request: &rcgen::CertificateSigningRequestParams,
    usages: &[String],
) -> Result<(), String> {
    let params = &request.params;
    let text = |t: rcgen::DnType| -> Vec<String> {
        params
            .distinguished_name
            .iter()
            .filter(|(kind, _)| **kind == t)
            .map(|(_, v)| match v {
                rcgen::DnValue::PrintableString(s) => s.as_str().to_string(),
                rcgen::DnValue::Utf8String(s) => s.clone(),
                other => format!("{other:?}"),
            })
            .collect()
    };
    let cn = text(rcgen::DnType::CommonName).join("");
    let orgs = text(rcgen::DnType::OrganizationName);
    let has = |u: &str| usages.iter().any(|x| x == u);
    let only = |allowed: &[&str]| usages.iter().all(|u| allowed.contains(&u.as_str()));
    let (dns, ips, others) = params
        .subject_alt_names
        .iter()
        .fold((0, 0, 0), |(d, i, o), san| match san {
            rcgen::SanType::DnsName(_) => (d + 1, i, o),
            rcgen::SanType::IpAddress(_) => (d, i + 1, o),
            _ => (d, i, o + 1),
        });
    match signer {
        CLIENT_KUBELET_SIGNER => {
            if orgs != ["system:nodes"] {
                return Err("subject organization is not system:nodes".into());
            }
            if !cn.starts_with("system:node:") {
                return Err("subject common name does not begin with system:node:".into());
            }
            if dns + ips + others > 0 {
                return Err("subjectAltNames are not allowed".into());
            }
            if !has("client auth")
                || !only(&["digital signature", "key encipherment", "client auth"])
            {
                return Err(format!("usages did not match [digital signature client auth] or [digital signature key encipherment client auth]: {usages:?}"));
            }
        }
        KUBELET_SERVING_SIGNER => {
            if orgs != ["system:nodes"] {
                return Err("subject organization is not system:nodes".into());
            }
            if !cn.starts_with("system:node:") {
                return Err("subject common name does not begin with system:node:".into());
            }
            if dns + ips == 0 {
                return Err("DNS or IP subjectAltName is required".into());
            }
            if others > 0 {
                return Err("email and URI subjectAltNames are not allowed".into());
            }
            if !has("server auth")
                || !only(&["digital signature", "key encipherment", "server auth"])
            {
                return Err(format!("usages did not match [digital signature server auth] or [digital signature key encipherment server auth]: {usages:?}"));
            }
        }
        _ => {
            if !has("client auth") {
                return Err("usages must include client auth".into());
            }
        }
    }
    Ok(())
}

/// The key usages of the issued certificate from the CSR's usages.
pub fn usages_to_params(params: &mut rcgen::CertificateParams, usages: &[String]) {
    use rcgen::{ExtendedKeyUsagePurpose as E, KeyUsagePurpose as K};
    params.key_usages.clear();
    params.extended_key_usages.clear();
    for usage in usages {
        match usage.as_str() {
            "signing" | "digital signature" => params.key_usages.push(K::DigitalSignature),
            "content commitment" => params.key_usages.push(K::ContentCommitment),
            "key encipherment" => params.key_usages.push(K::KeyEncipherment),
            "key agreement" => params.key_usages.push(K::KeyAgreement),
            "data encipherment" => params.key_usages.push(K::DataEncipherment),
            "cert sign" => params.key_usages.push(K::KeyCertSign),
            "crl sign" => params.key_usages.push(K::CrlSign),
            "encipher only" => params.key_usages.push(K::EncipherOnly),
            "decipher only" => params.key_usages.push(K::DecipherOnly),
            "any" => params.extended_key_usages.push(E::Any),
            "server auth" => params.extended_key_usages.push(E::ServerAuth),
            "client auth" => params.extended_key_usages.push(E::ClientAuth),
            "code signing" => params.extended_key_usages.push(E::CodeSigning),
            "email protection" => params.extended_key_usages.push(E::EmailProtection),
            "timestamping" => params.extended_key_usages.push(E::TimeStamping),
            "ocsp signing" => params.extended_key_usages.push(E::OcspSigning),
            _ => {}
        }
    }
}

/// What the signer writes into the status of an approved CSR: the certificate, or a Failed
/// condition with the reason (`SignerValidationFailure`).
pub fn signed_status(
    obj: &Value,
    ca: &crate::tls::Authority,
    policy: &SigningPolicy,
    now: Timestamp,
) -> Value {
    let signer = obj
        .pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let usages: Vec<String> = obj
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .map(|u| {
            u.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let mut status = obj.get("status").cloned().unwrap_or_else(|| json!({}));
    let failed = |status: &mut Value, reason: &str, message: String| {
        let mut list = conditions(&json!({"status": status.clone()}));
        list.push(json!({
            "type": "Failed", "status": "True", "reason": reason, "message": message,
            "lastUpdateTime": format_time(now), "lastTransitionTime": format_time(now),
        }));
        status["conditions"] = Value::Array(list);
    };
    let request = match decode_request(obj).map(|pem| parse_request(&pem)) {
        Some(Ok(request)) => request,
        Some(Err(reason)) => {
            failed(&mut status, "SignerValidationFailure", reason);
            return status;
        }
        None => {
            failed(&mut status, "SignerValidationFailure", "no request".into());
            return status;
        }
    };
    if let Err(reason) = check_for_signer(&signer, &request, &usages) {
        failed(&mut status, "SignerValidationFailure", reason);
        return status;
    }
    let lifetime = policy.lifetime(
        obj.pointer("/spec/expirationSeconds")
            .and_then(Value::as_i64),
    );
    let (not_before, not_after) = policy.validity(now, lifetime);
    match ca.sign(request, &usages, not_before, not_after) {
        Ok(pem) => {
            use base64::Engine;
            status["certificate"] = json!(base64::engine::general_purpose::STANDARD.encode(pem));
        }
        Err(reason) => failed(&mut status, "SigningError", reason),
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetime_and_validity_follow_the_signer() {
        let two_minutes = SigningPolicy {
            duration: Duration::from_secs(120),
            ..Default::default()
        };
        let year = SigningPolicy::default();
        // (policy, expirationSeconds, lifetime)
        let cases: &[(&SigningPolicy, Option<i64>, u64)] = &[
            (&year, None, 365 * 24 * 3600),
            (&year, Some(3600), 3600),
            (&year, Some(60), 600),
            (&year, Some(10 * 365 * 24 * 3600), 365 * 24 * 3600),
            (&two_minutes, None, 120),
            (&two_minutes, Some(3600), 120),
        ];
        for (policy, requested, want) in cases {
            assert_eq!(
                policy.lifetime(*requested),
                Duration::from_secs(*want),
                "{requested:?} under {:?}",
                policy.duration
            );
        }
        let now: Timestamp = "2030-01-01T01:00:00Z".parse().unwrap();
        let (nb, na) = two_minutes.validity(now, Duration::from_secs(120));
        assert_eq!(nb.to_string(), "2030-01-01T00:55:00Z");
        assert_eq!(na.to_string(), "2030-01-01T01:02:00Z");
        let (nb, na) = year.validity(now, Duration::from_secs(24 * 3600));
        assert_eq!(nb.to_string(), "2030-01-01T00:55:00Z");
        assert_eq!(na.to_string(), "2030-01-02T00:55:00Z");
    }

    fn csr(conditions: Value) -> Value {
        json!({"metadata": {"name": "csr-1", "resourceVersion": "7"}, "spec": {"signerName": CLIENT_KUBELET_SIGNER},
               "status": {"conditions": conditions}})
    }

    #[test]
    fn approval_rules() {
        let now: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let approved = json!([{"type": "Approved", "status": "True", "reason": "KubectlApprove"}]);
        let new = apply_approval(&csr(json!([])), &csr(approved.clone()), now).unwrap();
        let c = &new["status"]["conditions"][0];
        assert_eq!(c["lastUpdateTime"], "2030-01-01T00:00:00Z");
        assert_eq!(c["lastTransitionTime"], "2030-01-01T00:00:00Z");
        assert_eq!(
            new["spec"]["signerName"], CLIENT_KUBELET_SIGNER,
            "spec kept"
        );
        assert!(should_sign(&new));
        let cases: Vec<(Value, Value, &str)> = vec![
            (
                csr(json!([])),
                csr(
                    json!([{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]),
                ),
                "Approved and Denied conditions are mutually exclusive",
            ),
            (
                csr(approved.clone()),
                csr(json!([])),
                "updates may not remove a condition of type \"Approved\"",
            ),
            (
                csr(json!([])),
                csr(json!([{"type": "Approved", "status": "False"}])),
                "Unsupported value: \"False\"",
            ),
            (
                csr(json!([])),
                csr(
                    json!([{"type": "Approved", "status": "True"}, {"type": "Approved", "status": "True"}]),
                ),
                "Duplicate value: \"Approved\"",
            ),
        ];
        for (old, body, want) in cases {
            let err = apply_approval(&old, &body, now).unwrap_err();
            assert!(err.message.contains(want), "{}", err.message);
            assert_eq!(err.code, 422);
        }
        let mut stale = csr(approved);
        stale["metadata"]["resourceVersion"] = json!("3");
        assert_eq!(
            apply_approval(&csr(json!([])), &stale, now)
                .unwrap_err()
                .code,
            409
        );
        let denied = apply_approval(
            &csr(json!([])),
            &csr(json!([{"type": "Denied", "status": "True"}])),
            now,
        )
        .unwrap();
        assert!(!should_sign(&denied));
    }

    fn request(cn: &str, orgs: &[&str], sans: &[&str]) -> rcgen::CertificateSigningRequestParams {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        for o in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        parse_request(pem.as_bytes()).unwrap()
    }

    #[test]
    fn kubelet_signers_check_subject_names_and_usages() {
        let client = vec!["digital signature".to_string(), "client auth".to_string()];
        let serving = vec!["digital signature".to_string(), "server auth".to_string()];
        let cases: Vec<(
            &str,
            rcgen::CertificateSigningRequestParams,
            &Vec<String>,
            Option<&str>,
        )> = vec![
            (
                CLIENT_KUBELET_SIGNER,
                request("system:node:n1", &["system:nodes"], &[]),
                &client,
                None,
            ),
            (
                CLIENT_KUBELET_SIGNER,
                request("n1", &["system:nodes"], &[]),
                &client,
                Some("does not begin with system:node:"),
            ),
            (
                CLIENT_KUBELET_SIGNER,
                request("system:node:n1", &["other"], &[]),
                &client,
                Some("not system:nodes"),
            ),
            (
                CLIENT_KUBELET_SIGNER,
                request("system:node:n1", &["system:nodes"], &["n1"]),
                &client,
                Some("subjectAltNames are not allowed"),
            ),
            (
                CLIENT_KUBELET_SIGNER,
                request("system:node:n1", &["system:nodes"], &[]),
                &serving,
                Some("usages did not match"),
            ),
            (
                KUBELET_SERVING_SIGNER,
                request("system:node:n1", &["system:nodes"], &["n1", "10.0.0.7"]),
                &serving,
                None,
            ),
            (
                KUBELET_SERVING_SIGNER,
                request("system:node:n1", &["system:nodes"], &[]),
                &serving,
                Some("DNS or IP subjectAltName is required"),
            ),
            (CLIENT_SIGNER, request("alice", &[], &[]), &client, None),
        ];
        for (signer, request, usages, want) in cases {
            let got = check_for_signer(signer, &request, usages);
            match want {
                None => assert!(got.is_ok(), "{signer}: {got:?}"),
                Some(text) => assert!(
                    got.as_ref().is_err_and(|e| e.contains(text)),
                    "{signer}: {got:?}"
                ),
            }
        }
    }
}
