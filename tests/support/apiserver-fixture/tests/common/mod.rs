//! Helpers shared by the integration tests: running the real kubectl against a fixture, raw HTTP.

#![allow(dead_code)]

use std::time::Duration;

use apiserver_fixture::{Fixture, LoggedRequest};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::Value;

pub const KUBECTL: &str = "/usr/bin/kubectl";

/// How long one kubectl command may take; generous because CI machines are shared and slow.
pub const KUBECTL_LIMIT: Duration = Duration::from_secs(120);

/// Polls `condition` every 50 ms until it holds or `limit` has passed; returns whether it held.
pub async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub struct KubectlOutput {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `kubectl --server URL ARGS...` with an empty kubeconfig; the fixture keeps serving because
/// the command runs as a child process awaited by tokio.
pub async fn kubectl(fixture: &Fixture, args: &[&str]) -> KubectlOutput {
    let command = tokio::process::Command::new(KUBECTL)
        .env("KUBECONFIG", "/dev/null")
        .env("HOME", std::env::temp_dir())
        .arg("--server")
        .arg(fixture.url())
        .args(args)
        .kill_on_drop(true)
        .output();
    // A hung kubectl fails the test with its arguments instead of stalling the whole run.
    let output = tokio::time::timeout(KUBECTL_LIMIT, command)
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish in {KUBECTL_LIMIT:?}"))
        .unwrap_or_else(|e| {
            panic!("running {KUBECTL}: {e} (the kubectl integration tests need it installed)")
        });
    KubectlOutput {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// kubectl that must succeed; returns stdout.
pub async fn kubectl_ok(fixture: &Fixture, args: &[&str]) -> String {
    let out = kubectl(fixture, args).await;
    assert!(
        out.success,
        "kubectl {args:?} failed:\nstdout: {}\nstderr: {}",
        out.stdout, out.stderr
    );
    out.stdout
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

pub const POD_YAML: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  nodeName: node-1
  containers:
  - name: app
    image: nginx:1.27
    ports:
    - containerPort: 80
";

/// Writes a manifest to a temp dir and returns (dir guard, path).
pub fn manifest(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("manifest.yaml");
    std::fs::write(&path, text).unwrap();
    let p = path.display().to_string();
    (dir, p)
}

/// Requests that are not discovery/openapi.
pub fn resource_requests(fixture: &Fixture) -> Vec<LoggedRequest> {
    fixture
        .request_log()
        .into_iter()
        .filter(|r| {
            !(r.path == "/version"
                || r.path == "/api"
                || r.path == "/apis"
                || r.path == "/api/v1"
                || r.path.starts_with("/openapi")
                || (r.path.starts_with("/apis/") && r.path.matches('/').count() <= 3))
        })
        .collect()
}

/// Reads watch lines from a streaming response until `count` lines arrived (or 10 s passed).
pub async fn read_watch_lines(response: &mut reqwest::Response, count: usize) -> Vec<Value> {
    let mut buffer = String::new();
    let mut lines = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while lines.len() < count {
        let chunk = tokio::time::timeout_at(deadline, response.chunk()).await;
        match chunk {
            Ok(Ok(Some(bytes))) => {
                buffer.push_str(&String::from_utf8_lossy(&bytes));
                while let Some(pos) = buffer.find('\n') {
                    let line: String = buffer.drain(..=pos).collect();
                    lines.push(serde_json::from_str(line.trim()).unwrap());
                }
            }
            _ => break,
        }
    }
    lines
}

/// A CA, a node agent serving certificate for 127.0.0.1 and a kubelet client identity.
pub struct Pki {
    pub ca_pem: String,
    pub ca_der: CertificateDer<'static>,
    pub serving_der: CertificateDer<'static>,
    pub serving_key: Vec<u8>,
    pub client_pem: String,
    pub client_der: CertificateDer<'static>,
}

pub fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "nodelet-test-ca");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let serving_key = KeyPair::generate().unwrap();
    let serving = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&serving_key, &issuer)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver-kubelet-client");
    let client = client_params.signed_by(&client_key, &issuer).unwrap();
    Pki {
        ca_pem: ca.pem(),
        ca_der: ca.der().clone(),
        serving_der: serving.der().clone(),
        serving_key: serving_key.serialize_der(),
        client_pem: format!("{}{}", client.pem(), client_key.serialize_pem()),
        client_der: client.der().clone(),
    }
}

/// The stand-in node agent's TLS: its serving certificate, client certificates signed by the CA
/// required.
pub fn tls_acceptor(pki: &Pki) -> tokio_rustls::TlsAcceptor {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.ca_der.clone()).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![pki.serving_der.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.serving_key.clone())),
        )
        .unwrap();
    tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config))
}
