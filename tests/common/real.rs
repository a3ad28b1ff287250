//! The real Kubernetes v1.37.2 control plane of `scripts/k8s.sh` as a test's API server.
//!
//! The test command starts one control plane for all tests; each test gets a [`RealServer`]: a
//! namespace of its own (its pods' names cannot meet another test's), an admin kubeconfig whose
//! context is that namespace (what [`super::kubectl`] takes instead of the fixture's URL), and a
//! node identity per nodelet it starts — a client certificate of `system:node:<node>` in
//! `system:nodes` signed by the cluster CA, as kubeadm gives a control-plane node's kubelet — so
//! the Node authorizer and NodeRestriction judge every request nodelet makes. What nodelet asked
//! is read back from the API server's audit log (the policy of `scripts/k8s.sh` records the
//! requests of `system:nodes` with their bodies), as [`LoggedRequest`]s like the fixture's.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;

use apiserver_fixture::LoggedRequest;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// One variable of `scripts/k8s.sh env`; a test without it fails, naming what to run.
pub fn k8s_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: this test needs the real control plane; run it with \
             scripts/test.sh, which builds and starts it (scripts/k8s.sh up)"
        )
    })
}

/// The real kubectl 1.37.2, built beside the control plane.
pub fn kubectl_bin() -> PathBuf {
    Path::new(&k8s_env("NODELET_TEST_K8S_BIN")).join("kubectl")
}

/// What a test asks of its API server, the fixture's or the real one: the tests written for
/// both take `&impl TestApi`.
pub trait TestApi {
    /// What [`super::kubectl`] takes: the fixture's URL, or the real server's kubeconfig.
    fn api(&self) -> String;
    /// The namespace the test's objects are in.
    fn namespace(&self) -> String;
    /// The object, or `None` when the server has none.
    fn object<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<K>;
    /// Every object of a type in a namespace (or all namespaces).
    fn objects<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
    ) -> Vec<K>;
    /// The requests the server logged (the fixture: every request; the real server: those of
    /// the nodes this test started), oldest first.
    fn requests(&self) -> Vec<LoggedRequest>;
    /// Forgets the requests logged so far: [`TestApi::requests`] returns later ones only.
    fn forget_requests(&self);
}

impl TestApi for apiserver_fixture::Fixture {
    fn api(&self) -> String {
        self.url()
    }
    fn namespace(&self) -> String {
        "default".into()
    }
    fn object<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<K> {
        self.get::<K>(namespace, name).ok().flatten()
    }
    fn objects<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
    ) -> Vec<K> {
        self.list::<K>(namespace).expect("the fixture's list")
    }
    fn requests(&self) -> Vec<LoggedRequest> {
        self.request_log()
    }
    fn forget_requests(&self) {
        self.clear_log()
    }
}

/// A test's share of the real control plane; its namespace and nodes are deleted when dropped.
pub struct RealServer {
    namespace: String,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    /// The nodes given an identity, whose requests [`TestApi::requests`] returns.
    nodes: Mutex<Vec<String>>,
    /// Requests before this moment are not returned ([`RealServer::clear_log`]).
    since: Mutex<jiff::Timestamp>,
}

static NAMESPACES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl RealServer {
    /// A namespace of `test`'s own, ready for pods: the ServiceAccount `default` and the
    /// `kube-root-ca.crt` ConfigMap the controller-manager puts in every namespace exist (the
    /// API server refuses a pod before the first; nodelet waits for the second).
    pub fn start(test: &str) -> RealServer {
        let dir = tempfile::Builder::new()
            .prefix("nodelet-real-")
            .tempdir()
            .expect("tempdir");
        let n = NAMESPACES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut namespace: String = format!("{test}-{}-{n}", std::process::id())
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        // A namespace name is a DNS label: 63 characters at most, ending in an alphanumeric.
        if namespace.len() > 63 {
            namespace = namespace[namespace.len() - 63..].to_string();
        }
        let namespace = namespace.trim_matches('-').to_string();
        let kubeconfig = dir.path().join("admin.kubeconfig");
        let admin = k8s_env("NODELET_TEST_KUBECONFIG");
        let ca = k8s_env("NODELET_TEST_K8S_CA");
        let pki = Path::new(&ca)
            .parent()
            .expect("the CA's directory")
            .to_path_buf();
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: real\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\n\
                 users:\n- name: admin\n  user:\n    client-certificate: {pki}/admin.crt\n    client-key: {pki}/admin.key\n\
                 contexts:\n- name: real\n  context: {{cluster: real, user: admin, namespace: {namespace}}}\n\
                 current-context: real\n",
                server = k8s_env("NODELET_TEST_K8S_SERVER"),
                pki = pki.display(),
            ),
        )
        .expect("write the test's kubeconfig");
        assert!(
            Path::new(&admin).exists(),
            "NODELET_TEST_KUBECONFIG={admin} does not exist: is the control plane up?"
        );
        let me = RealServer {
            namespace,
            dir,
            kubeconfig,
            nodes: Mutex::new(Vec::new()),
            since: Mutex::new(jiff::Timestamp::now()),
        };
        me.kubectl_ok(&["create", "namespace", &me.namespace]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let sa = me.kubectl(&["get", "serviceaccount", "default", "-o", "name"]);
            let ca = me.kubectl(&["get", "configmap", "kube-root-ca.crt", "-o", "name"]);
            if sa.0 && ca.0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "namespace {} has no ServiceAccount default or ConfigMap kube-root-ca.crt after \
                 60 s: is the controller-manager running?\n{}{}",
                me.namespace,
                sa.2,
                ca.2
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        me
    }

    /// The admin kubeconfig whose context is the test's namespace.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Runs kubectl as the admin in the test's namespace: (success, stdout, stderr).
    pub fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        super::kubectl(&self.api(), args)
    }

    /// Runs kubectl and expects success; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl(args);
        assert!(ok, "kubectl {args:?} failed:\n{out}\n{err}");
        out
    }

    /// Creates an object (given as JSON or YAML) as the admin; fails the test if refused.
    pub fn create(&self, manifest: &str) {
        let mut child = super::kubectl_command(&self.api(), &["create", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl create");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(manifest.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl create refused:\n{manifest}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kubectl get --raw PATH` decoded; `None` for NotFound. Any other failure fails the test:
    /// a test asserting that an object is gone must not pass because the server did not answer.
    fn raw<T: DeserializeOwned>(&self, path: &str) -> Option<T> {
        let (ok, out, err) = self.kubectl(&["get", "--raw", path]);
        if !ok {
            assert!(
                err.contains("NotFound") || err.contains("not found"),
                "GET {path}: {err}"
            );
            return None;
        }
        Some(serde_json::from_str(&out).unwrap_or_else(|e| panic!("GET {path}: {e}: {out}")))
    }

    /// A kubeconfig that authenticates as node `node` (`system:node:<node>`, group
    /// `system:nodes`), its client certificate signed by the cluster CA; that node's requests
    /// are then among [`TestApi::requests`].
    pub fn node_kubeconfig(&self, node: &str) -> PathBuf {
        let (server, ca, ca_key) = (
            k8s_env("NODELET_TEST_K8S_SERVER"),
            k8s_env("NODELET_TEST_K8S_CA"),
            k8s_env("NODELET_TEST_K8S_CA_KEY"),
        );
        let cluster = nodelet_testkit::cluster::ClusterCa {
            server: &server,
            ca: &ca,
            ca_key: &ca_key,
        };
        let kubeconfig = nodelet_testkit::cluster::node_kubeconfig(&cluster, node, self.dir.path());
        self.nodes.lock().unwrap().push(node.to_string());
        kubeconfig
    }
}

impl RealServer {
    /// Counts `node` as the test's (its requests among [`TestApi::requests`], deleted at the
    /// end) when it got its identity elsewhere: a TLS bootstrap with a bootstrap token.
    pub fn adopt_node(&self, node: &str) {
        self.nodes.lock().unwrap().push(node.to_string());
    }

    /// The audit log's events of `stage` (`ResponseComplete`; `ResponseStarted` for a watch
    /// still open) by one of `users`, since the test started or [`TestApi::forget_requests`],
    /// as [`LoggedRequest`]s.
    pub fn audited(&self, users: &[String], stage: &str) -> Vec<LoggedRequest> {
        let since = *self.since.lock().unwrap();
        let log = std::fs::read_to_string(k8s_env("NODELET_TEST_K8S_AUDIT_LOG"))
            .expect("the API server's audit log");
        log.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["stage"] == stage)
            .filter(|e| {
                e["user"]["username"]
                    .as_str()
                    .is_some_and(|u| users.iter().any(|x| x == u))
            })
            .filter_map(audited_request)
            .filter(|r| r.at >= since)
            .collect()
    }
}

/// A kubeconfig text for the real server that authenticates with `token` (a bootstrap token,
/// as kubeadm's `bootstrap-kubelet.conf`).
pub fn token_kubeconfig(token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: real\n  cluster:\n    server: {}\n    certificate-authority: {}\n\
         users:\n- name: bootstrap\n  user:\n    token: {token}\n\
         contexts:\n- name: real\n  context: {{cluster: real, user: bootstrap}}\ncurrent-context: real\n",
        k8s_env("NODELET_TEST_K8S_SERVER"),
        k8s_env("NODELET_TEST_K8S_CA"),
    )
}

impl TestApi for RealServer {
    fn api(&self) -> String {
        self.kubeconfig.display().to_string()
    }

    fn namespace(&self) -> String {
        self.namespace.clone()
    }

    fn object<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<K> {
        self.raw(&resource_path::<K>(namespace, Some(name)))
    }

    fn objects<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
    ) -> Vec<K> {
        let list: Value = self
            .raw(&resource_path::<K>(namespace, None))
            .unwrap_or_else(|| panic!("the list of {}", K::KIND));
        list["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|v| serde_json::from_value(v).expect("a listed object"))
            .collect()
    }

    fn requests(&self) -> Vec<LoggedRequest> {
        let users: Vec<String> = self
            .nodes
            .lock()
            .unwrap()
            .iter()
            .map(|n| format!("system:node:{n}"))
            .collect();
        self.audited(&users, "ResponseComplete")
    }

    fn forget_requests(&self) {
        *self.since.lock().unwrap() = jiff::Timestamp::now();
    }
}

impl Drop for RealServer {
    fn drop(&mut self) {
        // Not waited for: the namespace's pods are gone with their nodes.
        let _ = self.kubectl(&["delete", "namespace", &self.namespace, "--wait=false"]);
        for node in self.nodes.lock().unwrap().iter() {
            let _ = self.kubectl(&["delete", "node", node, "--wait=false"]);
        }
    }
}

/// An audit event as the fixture logs a request: the HTTP method of its verb, the path and
/// query, the body (the policy's `Request` level), the response code.
fn audited_request(e: Value) -> Option<LoggedRequest> {
    let uri = e["requestURI"].as_str()?;
    let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
    let method = match e["verb"].as_str()? {
        "get" | "list" | "watch" => "GET",
        "create" => "POST",
        "update" => "PUT",
        "patch" => "PATCH",
        "delete" | "deletecollection" => "DELETE",
        _ => return None,
    };
    Some(LoggedRequest {
        at: e["requestReceivedTimestamp"].as_str()?.parse().ok()?,
        method: method.into(),
        path: path.into(),
        query: query.into(),
        body: e.get("requestObject").cloned(),
        content_type: None,
        user_agent: e["userAgent"].as_str().map(String::from),
        status: e["responseStatus"]["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(0),
        user: e["user"]["username"].as_str().map(String::from),
    })
}

/// The API path of a resource type's collection, or of one object of it.
fn resource_path<K: k8s_openapi::Resource>(namespace: Option<&str>, name: Option<&str>) -> String {
    let mut path = if K::GROUP.is_empty() {
        format!("/api/{}", K::VERSION)
    } else {
        format!("/apis/{}/{}", K::GROUP, K::VERSION)
    };
    if let Some(ns) = namespace {
        path.push_str(&format!("/namespaces/{ns}"));
    }
    path.push('/');
    path.push_str(K::URL_PATH_SEGMENT);
    if let Some(name) = name {
        path.push('/');
        path.push_str(name);
    }
    path
}
