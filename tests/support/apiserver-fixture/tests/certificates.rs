//! The fixture serving HTTPS (`FixtureOptions::tls`): who may do what, and the
//! CertificateSigningRequest API driven with the real kubectl — create with a bootstrap token,
//! `kubectl get csr`, `kubectl certificate approve|deny`, the signer's certificate and its
//! checks, and the issued certificate authenticating its subject.

mod common;

use std::path::Path;
use std::time::Duration;

use apiserver_fixture::csr::SigningPolicy;
use apiserver_fixture::{Fixture, FixtureOptions, TlsOptions};
use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

async fn kubectl_as(kubeconfig: &Path, args: &[&str]) -> KubectlOutput {
    let output = tokio::process::Command::new(KUBECTL)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", std::env::temp_dir())
        .args(args)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(KUBECTL_LIMIT, output)
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish"))
        .unwrap_or_else(|e| panic!("running {KUBECTL}: {e}"));
    KubectlOutput {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A key and its PEM certificate request for `cn` in `orgs`.
fn request(cn: &str, orgs: &[&str]) -> (rcgen::KeyPair, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    for o in orgs {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, *o);
    }
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let pem = params.serialize_request(&key).unwrap().pem().unwrap();
    (key, pem)
}

fn csr_yaml(name: &str, pem: &str, signer: &str, extra: &str) -> String {
    use base64::Engine;
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: {name}\nspec:\n  \
         request: {}\n  signerName: {signer}\n  usages: [digital signature, client auth]\n  username: someone-else\n{extra}",
        base64::engine::general_purpose::STANDARD.encode(pem)
    )
}

fn csr(fixture: &Fixture, name: &str) -> CertificateSigningRequest {
    fixture.get(None, name).unwrap().expect("the CSR")
}

fn conditions(csr: &CertificateSigningRequest) -> Vec<String> {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|c| c.iter().map(|c| c.type_.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn csrs_are_created_approved_signed_and_the_certificate_authenticates() {
    let fixture = Fixture::start_with(FixtureOptions {
        tls: Some(TlsOptions {
            signing: SigningPolicy {
                duration: Duration::from_secs(3600),
                ..Default::default()
            },
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(fixture.url().starts_with("https://127.0.0.1:"));
    let dir = tempfile::tempdir().unwrap();
    let admin = dir.path().join("admin.conf");
    std::fs::write(
        &admin,
        fixture
            .client_kubeconfig("kubernetes-admin", &["system:masters"])
            .unwrap(),
    )
    .unwrap();
    let token = fixture
        .create_bootstrap_token("abcdef", "0123456789abcdef")
        .unwrap();
    let bootstrap = dir.path().join("bootstrap.conf");
    std::fs::write(
        &bootstrap,
        fixture.kubeconfig(&format!("{{token: {token}}}")),
    )
    .unwrap();

    // Anonymous: the public paths only.
    let ca = reqwest::Certificate::from_pem(fixture.ca_pem().unwrap().as_bytes()).unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(ca)
        .build()
        .unwrap();
    let version = client
        .get(format!("{}/version", fixture.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(version.status(), 200);
    let nodes = client
        .get(format!("{}/api/v1/nodes", fixture.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(nodes.status(), 401);
    let wrong = client
        .get(format!("{}/api/v1/nodes", fixture.url()))
        .bearer_auth("abcdef.ffffffffffffffff")
        .send()
        .await
        .unwrap();
    assert_eq!(
        wrong.status(),
        401,
        "a bootstrap token with the wrong secret"
    );

    // The bootstrap token may not read nodes, but may create CSRs (as itself, whatever the
    // body says) and list them.
    let out = kubectl_as(&bootstrap, &["get", "nodes"]).await;
    assert!(!out.success);
    assert!(
        out.stderr.contains("nodes is forbidden: User \"system:bootstrap:abcdef\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"),
        "{}",
        out.stderr
    );
    let (key, pem) = request("system:node:n1", &["system:nodes"]);
    let name = "node-csr-Ab_c9";
    let file = dir.path().join("csr.yaml");
    std::fs::write(
        &file,
        csr_yaml(
            name,
            &pem,
            "kubernetes.io/kube-apiserver-client-kubelet",
            "  expirationSeconds: 1800\n",
        ),
    )
    .unwrap();
    let out = kubectl_as(&bootstrap, &["create", "-f", file.to_str().unwrap()]).await;
    assert!(out.success, "{}{}", out.stdout, out.stderr);
    let stored = csr(&fixture, name);
    assert_eq!(
        stored.spec.username.as_deref(),
        Some("system:bootstrap:abcdef")
    );
    let groups = stored.spec.groups.clone().unwrap_or_default();
    assert!(
        groups.contains(&"system:bootstrappers".to_string())
            && groups.contains(&"system:bootstrappers:kubeadm:default-node-token".to_string())
            && groups.contains(&"system:authenticated".to_string()),
        "{groups:?}"
    );
    let out = kubectl_as(&bootstrap, &["get", "csr", "-o", "name"]).await;
    assert!(
        out.success && out.stdout.contains(name),
        "{}{}",
        out.stdout,
        out.stderr
    );

    // kubectl get csr, as an administrator.
    let table = kubectl_as(&admin, &["get", "csr"]).await;
    assert!(table.success, "{}", table.stderr);
    let header: Vec<&str> = table
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "AGE",
            "SIGNERNAME",
            "REQUESTOR",
            "REQUESTEDDURATION",
            "CONDITION"
        ]
    );
    let row: Vec<&str> = table
        .stdout
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        (row[0], row[2], row[3], row[4], row[5]),
        (
            name,
            "kubernetes.io/kube-apiserver-client-kubelet",
            "system:bootstrap:abcdef",
            "30m",
            "Pending"
        )
    );

    // The bootstrap token may not approve its own request; the administrator does.
    let out = kubectl_as(&bootstrap, &["certificate", "approve", name]).await;
    assert!(!out.success, "{}", out.stdout);
    let out = kubectl_as(&admin, &["certificate", "approve", name]).await;
    assert!(out.success, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("approved"), "{}", out.stdout);
    let issued = csr(&fixture, name);
    assert_eq!(conditions(&issued), vec!["Approved"]);
    let approved = &issued.status.as_ref().unwrap().conditions.as_ref().unwrap()[0];
    assert_eq!(approved.status, "True");
    assert_eq!(approved.reason.as_deref(), Some("KubectlApprove"));
    assert!(approved.last_update_time.is_some() && approved.last_transition_time.is_some());
    let table = kubectl_as(&admin, &["get", "csr", name, "--no-headers"]).await;
    assert!(table.stdout.contains("Approved,Issued"), "{}", table.stdout);

    // The certificate: the request's subject, the signer's validity, signed by the CA.
    let cert_pem = issued.status.unwrap().certificate.unwrap().0;
    let (_, block) = x509_parser::pem::parse_x509_pem(&cert_pem).unwrap();
    let cert = block.parse_x509().unwrap();
    let subject = cert.subject();
    let cn: Vec<&str> = subject
        .iter_common_name()
        .filter_map(|a| a.as_str().ok())
        .collect();
    let orgs: Vec<&str> = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok())
        .collect();
    assert_eq!((cn, orgs), (vec!["system:node:n1"], vec!["system:nodes"]));
    assert_eq!(cert.issuer().to_string(), "CN=kubernetes");
    let now = jiff::Timestamp::now().as_second();
    let not_before = cert.validity().not_before.timestamp();
    let not_after = cert.validity().not_after.timestamp();
    assert!(
        (now - 300 - 5..=now - 300 + 5).contains(&not_before),
        "backdated 5 minutes: {not_before} vs {now}"
    );
    assert!(
        (now + 1800 - 5..=now + 1800 + 5).contains(&not_after),
        "expirationSeconds: {not_after} vs {now}"
    );
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.server_auth);

    // It authenticates its subject.
    use base64::Engine;
    let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
    let node_conf = dir.path().join("node.conf");
    std::fs::write(
        &node_conf,
        fixture.kubeconfig(&format!(
            "{{client-certificate-data: {}, client-key-data: {}}}",
            b64(&cert_pem),
            b64(key.serialize_pem().as_bytes())
        )),
    )
    .unwrap();
    fixture.clear_log();
    let out = kubectl_as(&node_conf, &["get", "nodes"]).await;
    assert!(out.success, "{}", out.stderr);
    let list = fixture
        .request_log()
        .into_iter()
        .find(|r| r.path == "/api/v1/nodes")
        .unwrap();
    assert_eq!(list.user.as_deref(), Some("system:node:n1"));

    // The signer's checks fail a request that breaks its rules; a denial issues nothing.
    let (_, alice) = request("alice", &[]);
    std::fs::write(
        &file,
        csr_yaml(
            "bad-subject",
            &alice,
            "kubernetes.io/kube-apiserver-client-kubelet",
            "",
        ),
    )
    .unwrap();
    assert!(
        kubectl_as(&admin, &["create", "-f", file.to_str().unwrap()])
            .await
            .success
    );
    assert!(
        kubectl_as(&admin, &["certificate", "approve", "bad-subject"])
            .await
            .success
    );
    let failed = csr(&fixture, "bad-subject");
    assert_eq!(conditions(&failed), vec!["Approved", "Failed"]);
    let reason = failed.status.as_ref().unwrap().conditions.as_ref().unwrap()[1]
        .reason
        .clone();
    assert_eq!(reason.as_deref(), Some("SignerValidationFailure"));
    assert!(failed.status.unwrap().certificate.is_none());
    std::fs::write(
        &file,
        csr_yaml(
            "to-deny",
            &pem,
            "kubernetes.io/kube-apiserver-client-kubelet",
            "",
        ),
    )
    .unwrap();
    assert!(
        kubectl_as(&admin, &["create", "-f", file.to_str().unwrap()])
            .await
            .success
    );
    let out = kubectl_as(&admin, &["certificate", "deny", "to-deny"]).await;
    assert!(out.success, "{}", out.stderr);
    let denied = csr(&fixture, "to-deny");
    assert_eq!(conditions(&denied), vec!["Denied"]);
    assert!(denied.status.unwrap().certificate.is_none());
    // kubectl itself refuses to approve a denied request; the server's rule (Approved and
    // Denied exclude each other) is `csr::tests::approval_rules`.
    let out = kubectl_as(&admin, &["certificate", "approve", "to-deny"]).await;
    assert!(
        !out.success && out.stderr.contains("already Denied"),
        "{}",
        out.stderr
    );

    // Validation on create.
    std::fs::write(
        &file,
        csr_yaml(
            "short",
            &pem,
            "kubernetes.io/kube-apiserver-client-kubelet",
            "  expirationSeconds: 60\n",
        ),
    )
    .unwrap();
    let out = kubectl_as(&admin, &["create", "-f", file.to_str().unwrap()]).await;
    assert!(!out.success);
    assert!(
        out.stderr.contains("spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 600 seconds (10 minutes)"),
        "{}",
        out.stderr
    );
}
