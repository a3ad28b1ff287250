//! Helpers shared by the integration tests: running the real kubectl against a fixture, raw HTTP.

#![allow(dead_code)]

use std::time::Duration;

use apiserver_fixture::{Fixture, LoggedRequest};
use serde_json::Value;

pub const KUBECTL: &str = "/usr/bin/kubectl";

pub struct KubectlOutput {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `kubectl --server URL ARGS...` with an empty kubeconfig; the fixture keeps serving because
/// the command runs as a child process awaited by tokio.
pub async fn kubectl(fixture: &Fixture, args: &[&str]) -> KubectlOutput {
    let output = tokio::process::Command::new(KUBECTL)
        .env("KUBECONFIG", "/dev/null")
        .env("HOME", std::env::temp_dir())
        .arg("--server")
        .arg(fixture.url())
        .args(args)
        .output()
        .await
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
