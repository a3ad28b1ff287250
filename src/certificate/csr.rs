//! CertificateSigningRequests (`certificates.k8s.io/v1`): a new key and its PKCS#10 request
//! for a [`Template`], the CSR object, creating it and waiting until it is approved and issued
//! (client-go's `csr.RequestCertificate` and `csr.WaitForCertificate`).

use crate::backoff::watch::backoff_watch;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;

use super::schedule::Template;

/// The signer of node client certificates (`certificatesv1.KubeAPIServerClientKubeletSignerName`).
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of kubelet serving certificates (`certificatesv1.KubeletServingSignerName`).
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// The usages of an ECDSA node client certificate (no key encipherment: that is for RSA keys).
pub const CLIENT_USAGES: &[&str] = &["digital signature", "client auth"];
/// The usages of an ECDSA kubelet serving certificate.
pub const SERVING_USAGES: &[&str] = &["digital signature", "server auth"];

/// `system:nodes`, the group of every node identity.
pub const NODES_GROUP: &str = "system:nodes";

/// `system:node:<name>`.
pub fn node_user(node_name: &str) -> String {
    format!("system:node:{node_name}")
}

/// What a node asks for its client certificate (`CN=system:node:<name>, O=system:nodes`).
pub fn client_template(node_name: &str) -> Template {
    Template {
        common_name: node_user(node_name),
        organizations: vec![NODES_GROUP.to_string()],
        dns_names: Vec::new(),
        ips: Vec::new(),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    #[error("generating a key or a certificate request: {0}")]
    Generate(String),
    #[error("creating CertificateSigningRequest: {0}")]
    Create(#[source] kube::Error),
    #[error(
        "CertificateSigningRequest {name} exists and was made for another key or signer; \
         delete it or remove {key_file}"
    )]
    Incompatible { name: String, key_file: String },
    #[error("watching CertificateSigningRequest {name}: {source}")]
    Watch {
        name: String,
        #[source]
        source: watcher::Error,
    },
    #[error("certificate signing request {name} is denied, reason: {reason}, message: {message}")]
    Denied {
        name: String,
        reason: String,
        message: String,
    },
    #[error("certificate signing request {name} failed, reason: {reason}, message: {message}")]
    Failed {
        name: String,
        reason: String,
        message: String,
    },
    #[error("certificate signing request {name} was not issued within {timeout:?}")]
    Timeout { name: String, timeout: Duration },
    #[error("certificate signing request {name} was deleted (or replaced) before it was issued")]
    Gone { name: String },
    #[error("stopped while waiting for certificate signing request {name}")]
    Cancelled { name: String },
}

/// A new ECDSA P-256 key, as the kubelet makes for each certificate.
pub fn generate_key() -> Result<rcgen::KeyPair, CsrError> {
    rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| CsrError::Generate(e.to_string()))
}

/// The PEM PKCS#10 request of `key` for `template` (`cert.MakeCSRFromTemplate`).
pub fn request_pem(key: &rcgen::KeyPair, template: &Template) -> Result<String, CsrError> {
    let mut sans: Vec<rcgen::SanType> = Vec::new();
    for name in &template.dns_names {
        let name = name
            .clone()
            .try_into()
            .map_err(|e: rcgen::Error| CsrError::Generate(format!("DNS name {name:?}: {e}")))?;
        sans.push(rcgen::SanType::DnsName(name));
    }
    sans.extend(template.ips.iter().map(|ip| rcgen::SanType::IpAddress(*ip)));
    let mut params = rcgen::CertificateParams::default();
    params.subject_alt_names = sans;
    let mut subject = rcgen::DistinguishedName::new();
    for o in &template.organizations {
        subject.push(rcgen::DnType::OrganizationName, o.as_str());
    }
    subject.push(rcgen::DnType::CommonName, template.common_name.as_str());
    params.distinguished_name = subject;
    params
        .serialize_request(key)
        .and_then(|csr| csr.pem())
        .map_err(|e| CsrError::Generate(e.to_string()))
}

/// `node-csr-<digest>`: the name the kubelet gives its bootstrap request, the same for the same
/// key, subject and usages, so a restarted kubelet finds its pending request instead of making
/// another (`digestedName`: SHA-512/256 over the base64url of each part, `|`-delimited).
pub fn digested_name(public_key_info: &[u8], template: &Template, usages: &[&str]) -> String {
    use base64::Engine;
    use sha2::Digest;
    let encode = |data: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data);
    let mut hash = sha2::Sha512_256::new();
    let mut write = |data: &[u8]| {
        hash.update(encode(data).as_bytes());
        hash.update(b"|");
    };
    write(public_key_info);
    write(template.common_name.as_bytes());
    for o in &template.organizations {
        write(o.as_bytes());
    }
    for usage in usages {
        write(usage.as_bytes());
    }
    format!("node-csr-{}", encode(&hash.finalize()))
}

/// The CSR object: `name` set, or `generateName: csr-` (the API server fills in the user).
pub fn csr_object(
    name: Option<&str>,
    request_pem: &str,
    signer: &str,
    usages: &[&str],
    expiration: Option<Duration>,
) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: name.map(String::from),
            generate_name: name.is_none().then(|| "csr-".to_string()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request_pem.as_bytes().to_vec()),
            signer_name: signer.to_string(),
            usages: Some(usages.iter().map(|u| u.to_string()).collect()),
            expiration_seconds: expiration.map(|d| i32::try_from(d.as_secs()).unwrap_or(i32::MAX)),
            ..Default::default()
        },
        status: None,
    }
}

/// Creates the CSR; returns its name and UID. With a fixed name that already exists, the
/// existing request is reused when it carries the same public key and signer (a restart while
/// it was pending), and is an error otherwise.
pub async fn create(
    client: &kube::Client,
    csr: &CertificateSigningRequest,
    public_key_info: &[u8],
    key_file: &str,
) -> Result<(String, String), CsrError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let created = match api.create(&PostParams::default(), csr).await {
        Ok(created) => created,
        Err(kube::Error::Api(status)) if status.code == 409 && csr.metadata.name.is_some() => {
            let name = csr.metadata.name.clone().unwrap_or_default();
            let existing = api.get(&name).await.map_err(CsrError::Create)?;
            if !same_request(&existing, csr, public_key_info) {
                return Err(CsrError::Incompatible {
                    name,
                    key_file: key_file.to_string(),
                });
            }
            existing
        }
        Err(e) => return Err(CsrError::Create(e)),
    };
    Ok((
        created.metadata.name.unwrap_or_default(),
        created.metadata.uid.unwrap_or_default(),
    ))
}

/// The existing request is for the same key and signer (client-go's `ensureCompatible`).
fn same_request(
    existing: &CertificateSigningRequest,
    wanted: &CertificateSigningRequest,
    public_key_info: &[u8],
) -> bool {
    existing.spec.signer_name == wanted.spec.signer_name
        && request_public_key(&existing.spec.request.0).as_deref() == Some(public_key_info)
}

/// The SubjectPublicKeyInfo of a PEM PKCS#10 request.
pub fn request_public_key(pem: &[u8]) -> Option<Vec<u8>> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    use x509_parser::prelude::FromDer;
    let (_, request) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
            .ok()?;
    Some(request.certification_request_info.subject_pki.raw.to_vec())
}

/// What a CSR's status says about its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    /// Approved and signed: the certificate chain, PEM.
    Issued(Vec<u8>),
    Denied {
        reason: String,
        message: String,
    },
    Failed {
        reason: String,
        message: String,
    },
}

/// The outcome of a CSR from its conditions and certificate (`WaitForCertificate`'s check):
/// Denied and Failed end it; Approved ends it once the certificate is there.
pub fn outcome(csr: &CertificateSigningRequest) -> Outcome {
    let Some(status) = &csr.status else {
        return Outcome::Pending;
    };
    let mut approved = false;
    for condition in status.conditions.iter().flatten() {
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        match condition.type_.as_str() {
            "Denied" => {
                return Outcome::Denied {
                    reason: text(&condition.reason),
                    message: text(&condition.message),
                }
            }
            "Failed" => {
                return Outcome::Failed {
                    reason: text(&condition.reason),
                    message: text(&condition.message),
                }
            }
            "Approved" => approved = true,
            _ => {}
        }
    }
    match &status.certificate {
        Some(cert) if approved && !cert.0.is_empty() => Outcome::Issued(cert.0.clone()),
        _ => Outcome::Pending,
    }
}

/// Watches the CSR `name` (and only the object with `uid`) until it is issued, denied or failed,
/// `timeout` passes or `cancel` fires. The watch resumes by itself after the API server goes
/// away.
pub async fn wait_for_certificate(
    client: &kube::Client,
    name: &str,
    uid: &str,
    timeout: Duration,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<Vec<u8>, CsrError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    // kube's watcher retries on the next poll, at once: without a backoff an unreachable
    // API server is reconnected to in a tight loop (a warning each time) until `timeout`.
    let stream = backoff_watch(watcher(api, config));
    let wait = async {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let csr = match event {
                Ok(watcher::Event::Apply(csr) | watcher::Event::InitApply(csr)) => csr,
                Ok(watcher::Event::Delete(csr)) if csr.metadata.uid.as_deref() == Some(uid) => {
                    return Err(CsrError::Gone {
                        name: name.to_string(),
                    })
                }
                Ok(_) => continue,
                Err(error) => {
                    // The backoff above spaces the retries; say why nothing arrives.
                    tracing::warn!(csr = name, %error, "watching the certificate signing request");
                    continue;
                }
            };
            if !uid.is_empty() && csr.metadata.uid.as_deref() != Some(uid) {
                continue;
            }
            match outcome(&csr) {
                Outcome::Pending => {}
                Outcome::Issued(pem) => return Ok(pem),
                Outcome::Denied { reason, message } => {
                    return Err(CsrError::Denied {
                        name: name.to_string(),
                        reason,
                        message,
                    })
                }
                Outcome::Failed { reason, message } => {
                    return Err(CsrError::Failed {
                        name: name.to_string(),
                        reason,
                        message,
                    })
                }
            }
        }
        Err(CsrError::Gone {
            name: name.to_string(),
        })
    };
    tokio::select! {
        result = tokio::time::timeout(timeout, wait) => result.unwrap_or_else(|_| Err(CsrError::Timeout {
            name: name.to_string(),
            timeout,
        })),
        _ = cancel.cancelled() => Err(CsrError::Cancelled { name: name.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestStatus,
    };

    /// An API server that accepts and hangs up at once: the wait retries its watch with a
    /// backoff, a few times a second at most, not as fast as connections fail.
    #[tokio::test]
    async fn waiting_on_an_unreachable_api_server_backs_off() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        let server = tokio::spawn(async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    return;
                };
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                drop(conn);
            }
        });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let cancel = tokio_util::sync::CancellationToken::new();
        let result =
            wait_for_certificate(&client, "csr-1", "", Duration::from_secs(2), &cancel).await;
        assert!(
            matches!(result, Err(CsrError::Timeout { .. })),
            "{result:?}"
        );
        let attempts = accepted.load(std::sync::atomic::Ordering::Relaxed);
        // The default backoff: 0.8 s, then about 1.6 s: two or three connections in 2 s.
        assert!((1..=5).contains(&attempts), "{attempts} connections in 2 s");
        server.abort();
    }

    #[test]
    fn request_carries_the_subject_and_names() {
        let key = generate_key().unwrap();
        let template = Template {
            common_name: "system:node:n1".into(),
            organizations: vec!["system:nodes".into()],
            dns_names: vec!["n1".into()],
            ips: vec!["10.0.0.7".parse().unwrap()],
        };
        let pem = request_pem(&key, &template).unwrap();
        let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        use x509_parser::prelude::FromDer;
        let (_, request) =
            x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
                .unwrap();
        let subject = &request.certification_request_info.subject;
        assert_eq!(subject.to_string(), "O=system:nodes, CN=system:node:n1");
        let sans: Vec<String> = request
            .requested_extensions()
            .into_iter()
            .flatten()
            .filter_map(|e| match e {
                x509_parser::extensions::ParsedExtension::SubjectAlternativeName(san) => Some(
                    san.general_names
                        .iter()
                        .map(|n| n.to_string())
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            })
            .flatten()
            .collect();
        // x509-parser shows an IP name as its bytes.
        assert_eq!(sans, vec!["DNSName(n1)", "IPAddress(0a:00:00:07)"]);
        assert_eq!(
            request_public_key(pem.as_bytes()).unwrap(),
            rcgen::PublicKeyData::subject_public_key_info(&key)
        );
    }

    #[test]
    fn digested_name_depends_on_key_subject_and_usages() {
        let key = generate_key().unwrap();
        let other = generate_key().unwrap();
        let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
        let t = client_template("n1");
        let name = digested_name(&spki, &t, CLIENT_USAGES);
        assert!(name.starts_with("node-csr-"), "{name}");
        // 32 bytes of SHA-512/256, base64url without padding.
        assert_eq!(name.len(), "node-csr-".len() + 43, "{name}");
        assert_eq!(name, digested_name(&spki, &t, CLIENT_USAGES), "stable");
        let other_spki = rcgen::PublicKeyData::subject_public_key_info(&other);
        for different in [
            digested_name(&other_spki, &t, CLIENT_USAGES),
            digested_name(&spki, &client_template("n2"), CLIENT_USAGES),
            digested_name(&spki, &t, SERVING_USAGES),
        ] {
            assert_ne!(name, different);
        }
    }

    #[test]
    fn digested_name_matches_the_kubelets_construction() {
        // The digest of the parts "a", "b", "c", "d" (SPKI, CN, O, usage), each base64url
        // encoded and followed by '|', computed independently of `digested_name`.
        use base64::Engine;
        use sha2::Digest;
        let mut hash = sha2::Sha512_256::new();
        hash.update(b"YQ|Yg|Yw|ZA|");
        let want = format!(
            "node-csr-{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash.finalize())
        );
        let template = Template {
            common_name: "b".into(),
            organizations: vec!["c".into()],
            ..Default::default()
        };
        assert_eq!(digested_name(b"a", &template, &["d"]), want);
    }

    fn csr_with(conditions: &[(&str, &str)], cert: Option<&str>) -> CertificateSigningRequest {
        let mut csr = csr_object(Some("x"), "pem", CLIENT_SIGNER, CLIENT_USAGES, None);
        csr.status = Some(CertificateSigningRequestStatus {
            certificate: cert.map(|c| ByteString(c.as_bytes().to_vec())),
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, reason)| CertificateSigningRequestCondition {
                        type_: t.to_string(),
                        status: "True".into(),
                        reason: Some(reason.to_string()),
                        message: Some(format!("{t} by test")),
                        ..Default::default()
                    })
                    .collect(),
            ),
        });
        csr
    }

    #[test]
    fn outcome_table() {
        let denied = Outcome::Denied {
            reason: "No".into(),
            message: "Denied by test".into(),
        };
        let cases: Vec<(CertificateSigningRequest, Outcome)> = vec![
            (
                csr_object(None, "pem", CLIENT_SIGNER, CLIENT_USAGES, None),
                Outcome::Pending,
            ),
            (csr_with(&[], None), Outcome::Pending),
            (csr_with(&[("Approved", "Ok")], None), Outcome::Pending),
            (csr_with(&[("Approved", "Ok")], Some("")), Outcome::Pending),
            (
                csr_with(&[("Approved", "Ok")], Some("CERT")),
                Outcome::Issued(b"CERT".to_vec()),
            ),
            // A certificate without approval is not taken.
            (csr_with(&[], Some("CERT")), Outcome::Pending),
            (csr_with(&[("Denied", "No")], None), denied.clone()),
            (
                csr_with(&[("Approved", "Ok"), ("Failed", "Bad")], None),
                Outcome::Failed {
                    reason: "Bad".into(),
                    message: "Failed by test".into(),
                },
            ),
        ];
        for (csr, want) in cases {
            assert_eq!(outcome(&csr), want, "{:?}", csr.status);
        }
        let object = csr_object(
            None,
            "pem",
            SERVING_SIGNER,
            SERVING_USAGES,
            Some(Duration::from_secs(3600)),
        );
        assert_eq!(object.metadata.generate_name.as_deref(), Some("csr-"));
        assert_eq!(object.spec.expiration_seconds, Some(3600));
        assert_eq!(
            object.spec.usages.as_deref(),
            Some(&["digital signature".to_string(), "server auth".to_string()][..])
        );
    }
}
