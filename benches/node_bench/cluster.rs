//! The real control plane of `scripts/k8s.sh` (Kubernetes v1.37.2) for the `api` part:
//! scripts/bench.sh starts it and exports `scripts/k8s.sh env`. The benchmark talks to it with
//! the real kubectl as the admin, gives each agent a node identity (a client certificate of
//! `system:node:<node>` signed by the cluster CA, as conformance.sh and the tests do), and counts
//! what each agent asked from the API server's audit log (the policy of scripts/k8s.sh records
//! every request of `system:nodes`).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::report::{parse_audit, Audited};

/// The real kubectl with one kubeconfig: the host's admin here, the guest's in the eviction
/// part's VM.
pub struct Kubectl {
    pub bin: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Kubectl {
    /// `kubectl ARGS`, with `input` on its stdin: (success, stdout, stderr).
    pub fn run(&self, args: &[&str], input: Option<&str>) -> (bool, String, String) {
        let mut child = match Command::new(&self.bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => return (false, String::new(), format!("run kubectl: {e}")),
        };
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            let _ = stdin.write_all(text.as_bytes());
        }
        match child.wait_with_output() {
            Ok(out) => (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ),
            Err(e) => (false, String::new(), format!("kubectl: {e}")),
        }
    }
}

/// What the part needs of `scripts/k8s.sh env`.
pub struct Cluster {
    pub server: String,
    pub ca: String,
    ca_key: String,
    pub admin: Kubectl,
    audit_log: PathBuf,
}

impl Cluster {
    /// The control plane of `scripts/k8s.sh env`'s variables; `None` when they are not set.
    pub fn from_env() -> Option<Cluster> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Some(Cluster {
            server: var("NODELET_TEST_K8S_SERVER")?,
            ca: var("NODELET_TEST_K8S_CA")?,
            ca_key: var("NODELET_TEST_K8S_CA_KEY")?,
            admin: Kubectl {
                bin: Path::new(&var("NODELET_TEST_K8S_BIN")?).join("kubectl"),
                kubeconfig: var("NODELET_TEST_KUBECONFIG")?.into(),
            },
            audit_log: var("NODELET_TEST_K8S_AUDIT_LOG")?.into(),
        })
    }

    /// kubectl as the admin: (success, stdout, stderr).
    pub fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        self.admin.run(args, None)
    }

    /// kubectl as the admin, which must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl(args);
        assert!(ok, "kubectl {args:?} failed:\n{out}\n{err}");
        out
    }

    /// `kubectl create -f -` of `manifests` (YAML documents).
    pub fn create(&self, manifests: &str) {
        let (ok, _, err) = self.admin.run(&["create", "-f", "-"], Some(manifests));
        assert!(ok, "kubectl create refused: {err}");
    }

    /// Creates `namespace` and waits for its ServiceAccount `default` (the API server refuses
    /// pods before the controller-manager made it).
    pub fn create_namespace(&self, namespace: &str) {
        self.kubectl_ok(&["create", "namespace", namespace]);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self
            .kubectl(&["-n", namespace, "get", "serviceaccount", "default"])
            .0
        {
            assert!(
                Instant::now() < deadline,
                "namespace {namespace} has no ServiceAccount default after 60 s: is the \
                 controller-manager running?"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A kubeconfig in `dir` that authenticates as node `node` (`system:node:<node>` in
    /// `system:nodes`, its certificate signed by the cluster CA).
    pub fn node_kubeconfig(&self, node: &str, dir: &Path) -> PathBuf {
        let ca = nodelet_testkit::cluster::ClusterCa {
            server: &self.server,
            ca: &self.ca,
            ca_key: &self.ca_key,
        };
        nodelet_testkit::cluster::node_kubeconfig(&ca, node, dir)
    }

    /// Where the audit log ends now: [`Cluster::audited_since`] reads what comes after.
    pub fn audit_mark(&self) -> u64 {
        std::fs::metadata(&self.audit_log).map_or(0, |m| m.len())
    }

    /// The requests logged after `mark` (the whole log when it was rotated since: shorter
    /// than the mark).
    pub fn audited_since(&self, mark: u64) -> Vec<Audited> {
        let mut file = std::fs::File::open(&self.audit_log).expect("the API server's audit log");
        let len = file.metadata().map_or(0, |m| m.len());
        let from = if len >= mark { mark } else { 0 };
        file.seek(SeekFrom::Start(from))
            .expect("seek the audit log");
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).expect("read the audit log");
        parse_audit(&String::from_utf8_lossy(&bytes))
    }
}
