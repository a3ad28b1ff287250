//! nodelet joined to a real Kubernetes v1.37.2 control plane — etcd, kube-apiserver with the
//! Node authorizer and NodeRestriction, kube-controller-manager, kube-scheduler, built from
//! their Go modules and started by `scripts/k8s.sh` — on the real containerd, driven with the
//! real kubectl 1.37.2 built beside them:
//!
//! - the join as a node does it: a bootstrap token only, the client CSR approved and signed by
//!   the real controller-manager, the serving CSR approved here (`kubectl certificate
//!   approve`), the Node registered and Ready with nodelet's version and runtime;
//! - a Deployment of 3 replicas placed on the node by the real scheduler and running;
//! - `kubectl logs`, `exec` and `port-forward` through the real API server to nodelet's
//!   kubelet API (the server's kubelet client certificate; nodelet's TokenReview and
//!   SubjectAccessReview answered by the real server);
//! - `kubectl delete pod` ends with nodelet's final DELETE, and `kubectl drain` evicts through
//!   the Eviction API;
//! - the Node authorizer never refuses a request nodelet makes (the API server's audit log of
//!   the node's requests, `scripts/k8s.sh`'s policy).
//!
//! Needs the environment of `scripts/k8s.sh env` (the test command sets it up); fails loudly
//! without it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::real::k8s_env;
use common::*;
use nodelet_testkit::port::free_port;
use nodelet_testkit::tail;
use serde_json::Value;

const T: Duration = Duration::from_secs(120);

/// The real kubectl 1.37.2 as the cluster's admin (`system:masters`), in no namespace of a
/// test's own: [`kubectl_command`] with the admin kubeconfig of `scripts/k8s.sh`.
struct Kubectl {
    kubeconfig: String,
}

impl Kubectl {
    fn admin() -> Kubectl {
        Kubectl {
            kubeconfig: k8s_env("NODELET_TEST_KUBECONFIG"),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        kubectl_command(&self.kubeconfig, args)
    }

    /// Runs kubectl; (success, stdout, stderr).
    fn run(&self, args: &[&str]) -> (bool, String, String) {
        kubectl(&self.kubeconfig, args)
    }

    /// Runs kubectl and expects success; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args);
        assert!(ok, "kubectl {args:?} failed:\n{out}\n{err}");
        out
    }

    /// `kubectl get ... -o json`, or `None` when kubectl fails (not found).
    fn json(&self, args: &[&str]) -> Option<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let (ok, out, _) = self.run(&all);
        ok.then(|| serde_json::from_str(&out).ok()).flatten()
    }
}

/// [`wait_within`] with the cluster's last events beside nodelet's log.
async fn wait_for<T>(
    what: &str,
    n: &Nodelet,
    k: &Kubectl,
    timeout: Duration,
    check: impl FnMut() -> Option<T>,
) -> T {
    wait_within(what, n, timeout, check, || {
        let (_, events, _) = k.run(&["get", "events", "-A", "--sort-by=.lastTimestamp"]);
        format!("--- events ---\n{}", tail(&events, 30))
    })
    .await
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The Node's `Ready` condition status ("True", "False", "Unknown"), or "" before it exists.
fn node_ready(node: &Value) -> String {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| str_at(c, "/type") == "Ready")
        .map(|c| str_at(c, "/status").to_string())
        .unwrap_or_default()
}

/// The CSRs `username` made with `signer` at or after `since`, with their conditions' types.
fn csrs_of(
    k: &Kubectl,
    username: &str,
    signer: &str,
    since: jiff::Timestamp,
) -> Vec<(String, Vec<String>)> {
    let Some(list) = k.json(&["get", "csr"]) else {
        return Vec::new();
    };
    list.pointer("/items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| {
            str_at(c, "/spec/username") == username
                && str_at(c, "/spec/signerName") == signer
                // The API's times have whole seconds.
                && str_at(c, "/metadata/creationTimestamp")
                    .parse::<jiff::Timestamp>()
                    .is_ok_and(|t| t >= since.round(jiff::Unit::Second).unwrap_or(since) - jiff::SignedDuration::from_secs(1))
        })
        .map(|c| {
            let conditions = c
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|x| str_at(x, "/type").to_string())
                .collect();
            (str_at(c, "/metadata/name").to_string(), conditions)
        })
        .collect()
}

/// The first client-certificate CSR (`kube-apiserver-client-kubelet`) `username` made at or
/// after `started` that is approved (by the controller-manager: nothing else approves them).
/// Four minutes: a renewal comes up to 105 s after the certificate it replaces was issued.
async fn client_csr_approved(
    n: &Nodelet,
    k: &Kubectl,
    username: &str,
    started: jiff::Timestamp,
) -> (String, Vec<String>) {
    wait_for(
        &format!("a client CSR of {username} approved"),
        n,
        k,
        Duration::from_secs(240),
        || {
            csrs_of(
                k,
                username,
                "kubernetes.io/kube-apiserver-client-kubelet",
                started,
            )
            .into_iter()
            .find(|(_, c)| c.iter().any(|t| t == "Approved"))
        },
    )
    .await
}

/// A nodelet configured as kubeadm configures a kubelet to join: a bootstrap-token kubeconfig,
/// client and serving certificates through CSRs, webhook authentication and authorization,
/// the kubelet API on every address (the API server reaches it at the node's InternalIP).
fn joining_nodelet(test: &str) -> (Nodelet, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("nodelet-join-")
        .tempdir()
        .expect("tempdir")
        .keep();
    let ca = k8s_env("NODELET_TEST_K8S_CA");
    let bootstrap = dir.join("bootstrap-kubelet.conf");
    std::fs::write(
        &bootstrap,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: k8s\n  cluster:\n    server: {}\n    certificate-authority: {ca}\n\
             users:\n- name: bootstrap\n  user:\n    token: {}\ncontexts:\n- name: k8s\n  context: {{cluster: k8s, user: bootstrap}}\n\
             current-context: k8s\n",
            k8s_env("NODELET_TEST_K8S_SERVER"),
            k8s_env("NODELET_TEST_K8S_BOOTSTRAP_TOKEN"),
        ),
    )
    .expect("write the bootstrap kubeconfig");
    let extra = format!(
        "address: 0.0.0.0\nport: {port}\n\
         kubeconfig: {dir}/kubelet.conf\nbootstrapKubeconfig: {bootstrap}\ncertDir: {dir}/pki\n\
         rotateCertificates: true\nserverTLSBootstrap: true\n\
         authentication:\n  anonymous: {{enabled: false}}\n  webhook: {{enabled: true, cacheTTL: 0s}}\n  x509: {{clientCAFile: {ca}}}\n\
         authorization:\n  mode: Webhook\n  webhook: {{cacheAuthorizedTTL: 0s, cacheUnauthorizedTTL: 0s}}\n\
         nodeStatusUpdateFrequency: 2s\nnodeLeaseDurationSeconds: 10\n",
        port = free_port(),
        dir = dir.display(),
        bootstrap = bootstrap.display(),
    );
    (Nodelet::prepare_with(test, &extra), dir)
}

/// The bootstrap token's ID: the user the CSR's `spec.username` names (`system:bootstrap:ID`).
fn bootstrap_user() -> String {
    let token = k8s_env("NODELET_TEST_K8S_BOOTSTRAP_TOKEN");
    let id = token.split('.').next().unwrap_or_default();
    format!("system:bootstrap:{id}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_a_real_control_plane_and_runs_a_deployment_on_it() {
    let k = Kubectl::admin();
    let version = k.ok(&["version", "-o", "json"]);
    assert!(
        version.contains("\"gitVersion\": \"v1.37.2\""),
        "the real v1.37.2 server: {version}"
    );
    let started = jiff::Timestamp::now();
    let (mut n, join_dir) = joining_nodelet("real-join");
    let node = n.node.clone();
    n.launch();

    // The client certificate: the bootstrap CSR approved and issued by the controller-manager.
    let client = client_csr_approved(&n, &k, &bootstrap_user(), started).await;
    eprintln!("client CSR {} approved by the controller-manager", client.0);
    // The Node registers with its new identity and becomes Ready.
    let registered = wait_for("the Node Ready", &n, &k, T, || {
        k.json(&["get", "node", &node])
            .filter(|v| node_ready(v) == "True")
    })
    .await;
    assert!(
        str_at(&registered, "/status/nodeInfo/kubeletVersion").contains("nodelet"),
        "{registered:#}"
    );
    assert!(
        str_at(&registered, "/status/nodeInfo/containerRuntimeVersion")
            .starts_with("containerd://"),
        "{registered:#}"
    );
    let wide = k.ok(&["get", "node", &node, "-o", "wide"]);
    assert!(
        wide.contains("Ready") && wide.contains("containerd://"),
        "{wide}"
    );

    // The serving certificate: nodelet's CSR, approved as a cluster admin does.
    let node_user = format!("system:node:{node}");
    let serving = wait_for("a serving CSR", &n, &k, T, || {
        csrs_of(&k, &node_user, "kubernetes.io/kubelet-serving", started)
            .into_iter()
            .next()
    })
    .await;
    k.ok(&["certificate", "approve", &serving.0]);

    // A Deployment of 3 replicas, placed on this node by the real scheduler.
    let ns = format!("real-{}", std::process::id());
    k.ok(&["create", "namespace", &ns]);
    // A label of this run only: a drain selects by it, and the control plane may hold pods of
    // other runs.
    let app = ns.clone();
    let selector = format!("app={app}");
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: {ns}}}\nspec:\n  replicas: 3\n  \
         selector: {{matchLabels: {{app: {app}}}}}\n  template:\n    metadata: {{labels: {{app: {app}}}}}\n    spec:\n      \
         nodeSelector: {{kubernetes.io/hostname: {node}}}\n      terminationGracePeriodSeconds: 5\n      containers:\n      \
         - name: web\n        image: {TESTBOX}\n        imagePullPolicy: Never\n        args: [serve, --http, \"8080\"]\n"
    );
    let manifest = n.dir.path().join("deployment.yaml");
    std::fs::write(&manifest, deployment).expect("write the deployment");
    k.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    let running = |k: &Kubectl| -> Vec<String> {
        k.json(&["get", "pods", "-n", &ns, "-l", &selector])
            .and_then(|v| v.pointer("/items").and_then(Value::as_array).cloned())
            .unwrap_or_default()
            .iter()
            .filter(|p| {
                str_at(p, "/spec/nodeName") == node
                    && str_at(p, "/status/phase") == "Running"
                    && p.pointer("/metadata/deletionTimestamp").is_none()
            })
            .map(|p| str_at(p, "/metadata/name").to_string())
            .collect()
    };
    let pods = wait_for("3 replicas running on the node", &n, &k, T, || {
        Some(running(&k)).filter(|p| p.len() == 3)
    })
    .await;
    let pod = &pods[0];

    // Through the real API server to nodelet's kubelet API.
    let logs = k.ok(&["logs", "-n", &ns, pod]);
    assert!(logs.contains("started serve"), "{logs}");
    let exec = k.ok(&["exec", "-n", &ns, pod, "--", "ls", "/"]);
    assert!(exec.lines().any(|l| l == "etc"), "{exec}");
    let local = free_port();
    let mut forward = k
        .command(&["port-forward", "-n", &ns, pod, &format!("{local}:8080")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl port-forward");
    let answer = wait_for("an answer through port-forward", &n, &k, T, || {
        Command::new("curl")
            .args([
                "-s",
                "-m",
                "2",
                &format!("http://127.0.0.1:{local}/healthz"),
            ])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    })
    .await;
    let _ = forward.kill();
    let _ = forward.wait();
    assert_eq!(answer.trim(), "ok");

    // kubectl delete: graceful, then nodelet's final DELETE removes the object.
    k.ok(&[
        "delete",
        "pod",
        "-n",
        &ns,
        pod,
        "--wait=true",
        "--timeout=60s",
    ]);
    assert!(
        k.json(&["get", "pod", "-n", &ns, pod]).is_none(),
        "the pod is gone from the API"
    );
    // The ReplicaSet replaces it; then a drain evicts all three through the Eviction API.
    wait_for("3 replicas again", &n, &k, T, || {
        Some(running(&k)).filter(|p| p.len() == 3)
    })
    .await;
    let drained = k.ok(&[
        "drain",
        &node,
        &format!("--pod-selector={selector}"),
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=90s",
    ]);
    assert_eq!(
        drained.matches(" evicted").count(),
        3,
        "three evictions: {drained}"
    );
    assert!(running(&k).is_empty(), "nothing runs on the drained node");

    // The Node authorizer and NodeRestriction refused nothing nodelet asked in all of this:
    // every request under the node's identity (and its bootstrap requests) is in the audit
    // log with its response code.
    let audit = std::fs::read_to_string(k8s_env("NODELET_TEST_K8S_AUDIT_LOG")).expect("audit log");
    let mine: Vec<Value> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            let user = str_at(e, "/user/username");
            user == node_user
                || (user == bootstrap_user()
                    && str_at(e, "/requestReceivedTimestamp")
                        .parse::<jiff::Timestamp>()
                        .is_ok_and(|t| t >= started))
        })
        .collect();
    assert!(
        mine.len() > 20,
        "the audit log has the node's requests: {}",
        mine.len()
    );
    let refused: Vec<String> = mine
        .iter()
        .filter(|e| e.pointer("/responseStatus/code").and_then(Value::as_i64) == Some(403))
        .map(|e| format!("{} {}", str_at(e, "/verb"), str_at(e, "/requestURI")))
        .collect();
    assert!(
        refused.is_empty(),
        "refused by the API server: {refused:#?}"
    );
    eprintln!("{} requests of the node audited, none refused", mine.len());
    // The check can fail: a request the Node authorizer refuses (a Secret no pod of the node
    // uses), made with the node's own client certificate, is in the log as a 403.
    let identity = join_dir.join("pki/kubelet-client-current.pem");
    let forbidden = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
        .arg(k8s_env("NODELET_TEST_K8S_CA"))
        .arg("--cert")
        .arg(&identity)
        .arg(format!(
            "{}/api/v1/namespaces/kube-system/secrets/nodelet-not-yours",
            k8s_env("NODELET_TEST_K8S_SERVER")
        ))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&forbidden.stdout), "403");
    let audit = std::fs::read_to_string(k8s_env("NODELET_TEST_K8S_AUDIT_LOG")).expect("audit log");
    let refused_now = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            str_at(e, "/user/username") == node_user
                && e.pointer("/responseStatus/code").and_then(Value::as_i64) == Some(403)
        })
        .count();
    assert_eq!(refused_now, 1, "the audit log shows a refusal");

    k.run(&["delete", "namespace", &ns, "--wait=false"]);
    drop(n);
    k.run(&["delete", "node", &node, "--wait=false"]);
    let _ = std::fs::remove_dir_all(&join_dir);
}

/// The serial number and NotAfter of the PEM certificate at `path`.
fn certificate_of(path: &Path) -> Option<(String, jiff::Timestamp)> {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-enddate", "-in"])
        .arg(path)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let serial = text.lines().find_map(|l| l.strip_prefix("serial="))?;
    // `notAfter=Dec  6 09:40:00 2026 GMT`
    let end = text.lines().find_map(|l| l.strip_prefix("notAfter="))?;
    let end = end
        .trim_end_matches(" GMT")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let end = jiff::civil::DateTime::strptime("%b %d %H:%M:%S %Y", &end)
        .ok()?
        .to_zoned(jiff::tz::TimeZone::UTC)
        .ok()?
        .timestamp();
    out.status.success().then(|| (serial.to_string(), end))
}

/// The Lease's `renewTime`.
fn lease_renewed(k: &Kubectl, node: &str) -> Option<jiff::Timestamp> {
    let lease = k.json(&["get", "lease", "-n", "kube-node-lease", node])?;
    str_at(&lease, "/spec/renewTime").parse().ok()
}

/// Client certificate rotation through the real signer: the controller-manager signs for
/// `NODELET_TEST_K8S_SIGNING_DURATION` (150 s, `scripts/k8s.sh`), so nodelet renews 15-105 s
/// after its bootstrap certificate was issued — a CSR made with its current certificate
/// (`system:node:<node>`), approved by the controller-manager (`selfnodeclient`) and signed — and
/// still talks to the API server once the first certificate has expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotates_its_client_certificate_through_the_real_signer() {
    let k = Kubectl::admin();
    let started = jiff::Timestamp::now();
    let (mut n, join_dir) = joining_nodelet("real-rotate");
    let node = n.node.clone();
    n.launch();
    client_csr_approved(&n, &k, &bootstrap_user(), started).await;
    let current = join_dir.join("pki/kubelet-client-current.pem");
    let first = wait_for("the first client certificate", &n, &k, T, || {
        certificate_of(&current)
    })
    .await;
    let lifetime = first.1.duration_since(jiff::Timestamp::now());
    assert!(
        lifetime < jiff::SignedDuration::from_secs(300),
        "the signer's short duration ({}) applies: the certificate ends {} from now",
        k8s_env("NODELET_TEST_K8S_SIGNING_DURATION"),
        lifetime
    );
    wait_for("the Node Ready", &n, &k, T, || {
        k.json(&["get", "node", &node])
            .filter(|v| node_ready(v) == "True")
    })
    .await;

    // The renewal, made with the node's own certificate and approved by the controller-manager.
    let node_user = format!("system:node:{node}");
    let renewal = client_csr_approved(&n, &k, &node_user, started).await;
    eprintln!("renewal CSR {} approved", renewal.0);
    let second = wait_for("the renewed certificate in use", &n, &k, T, || {
        certificate_of(&current).filter(|c| c.0 != first.0)
    })
    .await;
    assert!(second.1 > first.1, "the new certificate ends later");

    // Past the first certificate's end, nodelet still renews its Lease: it speaks with the new
    // certificate.
    let expired = first.1 + jiff::SignedDuration::from_secs(2);
    let wait = expired.duration_since(jiff::Timestamp::now());
    if wait.is_positive() {
        tokio::time::sleep(Duration::try_from(wait).unwrap_or_default()).await;
    }
    wait_for(
        "a Lease renewal after the first certificate expired",
        &n,
        &k,
        T,
        || lease_renewed(&k, &node).filter(|t| *t > expired),
    )
    .await;
    let after = k.json(&["get", "node", &node]).expect("the Node");
    assert_eq!(node_ready(&after), "True", "{after:#}");
    drop(n);
    k.run(&["delete", "node", &node, "--wait=false"]);
    let _ = std::fs::remove_dir_all(&join_dir);
}
