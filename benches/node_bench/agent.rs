//! One nodelet process (the release binary) for a benchmark part: its own node name, directories
//! and read-only API port, the kubelet's defaults for everything else, against the benchmark's
//! containerd. Dropping it kills the process and removes every sandbox labelled with its node
//! name, so a failed part leaves nothing behind.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use nodelet::cri::remote::RemoteRuntime;
use nodelet::cri::{api, labels, Runtime};
use nodelet_testkit::api::NodeletApi;
use nodelet_testkit::port::free_port;
use nodelet_testkit::prom;

pub const TESTBOX: &str = "localhost/testbox:1";
pub const PAUSE: &str = "localhost/pause:1";

/// The benchmark's CRI endpoint; exits with instructions when it is not set up.
/// The runtime the parts run against now: chosen by `main` for each runtime of the run
/// ([`runtimes`]); unset, `NODELET_TEST_CRI`.
static SELECTED: std::sync::RwLock<Option<(String, String)>> = std::sync::RwLock::new(None);

/// The runtimes of this run, `(label, endpoint)`, from `NODELET_BENCH_RUNTIMES`
/// (`label=unix:///…` separated by commas; scripts/bench.sh sets it to containerd 2.x and 1.6),
/// else the one of `NODELET_TEST_CRI`, labelled by its CRI Version answer later.
pub fn runtimes() -> Vec<(String, String)> {
    let listed: Vec<(String, String)> = std::env::var("NODELET_BENCH_RUNTIMES")
        .unwrap_or_default()
        .split(',')
        .filter_map(|item| {
            let (label, endpoint) = item.trim().split_once('=')?;
            Some((label.to_string(), endpoint.to_string()))
        })
        .collect();
    if listed.is_empty() {
        vec![(String::new(), endpoint())]
    } else {
        listed
    }
}

/// Makes the parts run against `endpoint` (labelled `label` in the tables).
pub fn select_runtime(label: &str, endpoint: &str) {
    *SELECTED.write().unwrap_or_else(|e| e.into_inner()) =
        Some((label.to_string(), endpoint.to_string()));
}

pub fn endpoint() -> String {
    if let Some((_, e)) = SELECTED.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return e.clone();
    }
    match std::env::var("NODELET_TEST_CRI") {
        Ok(e) if Path::new(e.trim_start_matches("unix://")).exists() => e,
        _ => {
            eprintln!(
                "NODELET_TEST_CRI is not set or its socket is missing: run the benchmarks with \
                 scripts/bench.sh (it starts a containerd of its own)"
            );
            std::process::exit(2)
        }
    }
}

pub fn runtime() -> Arc<RemoteRuntime> {
    let e = endpoint();
    Arc::new(RemoteRuntime::connect(&e, &e, Duration::from_secs(120)).expect("CRI client"))
}

/// The nodelet binary under test: this build's, or `NODELET_BENCH_NODELET` (another build, to
/// compare before and after a change in the same conditions).
pub fn nodelet_binary() -> String {
    std::env::var("NODELET_BENCH_NODELET")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_nodelet").to_string())
}

pub struct Agent {
    pub node: String,
    pub dir: tempfile::TempDir,
    pub manifests: PathBuf,
    child: Option<Child>,
    api: NodeletApi,
}

impl Agent {
    /// Starts nodelet with `extra` (YAML lines) added to a configuration that sets only what a
    /// benchmark must (endpoint, paths, node name, the read-only port) and waits for `/healthz`.
    pub async fn start(part: &str, extra: &str) -> Agent {
        let endpoint = endpoint();
        let node = format!("bench-{part}-{}", std::process::id());
        let dir = tempfile::Builder::new()
            .prefix("nodelet-bench-")
            .tempdir()
            .expect("tempdir");
        let manifests = dir.path().join("manifests");
        std::fs::create_dir_all(&manifests).expect("mkdir manifests");
        let port = free_port();
        let config = dir.path().join("config.yaml");
        let has = |field: &str| extra.lines().any(|l| l.starts_with(&format!("{field}:")));
        let mut text = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             containerRuntimeEndpoint: {endpoint}\nstaticPodPath: {m}\npodLogsDir: {d}/logs\n\
             rootDir: {d}/root\nnodeName: {node}\naddress: 127.0.0.1\nreadOnlyPort: {port}\n\
             healthzPort: 0\nport: 0\n\
             # This machine is a cgroup v1 host, which nodelet (as the kubelet since 1.35) refuses by default.\n\
             failCgroupV1: false\n",
            m = manifests.display(),
            d = dir.path().display()
        );
        if !has("evictionHard") {
            // The kubelet's default memory threshold only: the shared disk hovers near the
            // default `imagefs.available: 15%`, which would evict the benchmark's pods.
            text.push_str("evictionHard: {memory.available: \"100Mi\"}\n");
        }
        text.push_str(extra);
        std::fs::write(&config, text).expect("write config");
        let log = std::fs::File::create(dir.path().join("nodelet.log")).expect("log file");
        let child = Command::new(nodelet_binary())
            .args(["run", "--config"])
            .arg(&config)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nodelet");
        let me = Agent {
            node,
            dir,
            manifests,
            child: Some(child),
            api: NodeletApi::new(format!("http://127.0.0.1:{port}"), Duration::from_secs(10)),
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while me.get("/healthz").await.is_none() {
            assert!(
                Instant::now() < deadline,
                "nodelet did not answer /healthz in 120 s\n{}",
                me.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        me
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("nodelet.log")).unwrap_or_default();
        nodelet_testkit::tail(&text, lines)
    }

    pub async fn get(&self, path: &str) -> Option<String> {
        self.api.get(path).await
    }

    /// The pods of `/pods`; `None` while nodelet does not answer.
    pub async fn pods(&self) -> Option<Vec<Pod>> {
        self.api.pods().await
    }

    /// A counter or gauge of `/metrics`, summed over its series.
    pub async fn metric(&self, name: &str) -> Option<f64> {
        self.api.metric(name).await
    }

    /// The samples of a metric family (`name` plus its `_sum`/`_count` suffix), by their label
    /// text (`{operation_type="run_pod_sandbox"}`).
    pub async fn metric_samples(&self, name: &str) -> HashMap<String, f64> {
        let text = self.get("/metrics").await.unwrap_or_default();
        prom::samples(&text)
            .filter_map(|s| {
                let suffix = s.name.strip_prefix(name)?;
                let key = if s.labels.is_empty() {
                    suffix.to_string()
                } else {
                    format!("{suffix}{{{}}}", s.labels)
                };
                Some((key, s.value))
            })
            .collect()
    }

    /// Writes a manifest as tooling should (write, then rename into the directory).
    pub fn write_manifest(&self, name: &str, body: &str) {
        let tmp = self.dir.path().join(format!(".{name}.yaml.tmp"));
        std::fs::write(&tmp, body).expect("write manifest");
        std::fs::rename(&tmp, self.manifests.join(format!("{name}.yaml"))).expect("rename");
    }

    pub fn remove_manifest(&self, name: &str) {
        let _ = std::fs::remove_file(self.manifests.join(format!("{name}.yaml")));
    }

    pub fn pod_name(&self, name: &str) -> String {
        format!("{name}-{}", self.node)
    }

    /// Removes every manifest and waits until nodelet lists no pod and the runtime holds no
    /// sandbox of this node.
    pub async fn remove_all(&self, timeout: Duration) {
        if let Ok(entries) = std::fs::read_dir(&self.manifests) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let deadline = Instant::now() + timeout;
        loop {
            let listed = self.pods().await.map(|p| p.len());
            let sandboxes = sandboxes_of(&runtime(), &self.node).await.len();
            if listed == Some(0) && sandboxes == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{listed:?} pods and {sandboxes} sandboxes left {timeout:?} after the manifests \
                 were removed\n{}",
                self.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let node = self.node.clone();
        // Drop may run inside a tokio runtime: clean up on a thread with a private one.
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                // The CRI client spawns its connection task: create it inside the runtime.
                rt.block_on(async move { remove_sandboxes(runtime(), node).await });
            }
        })
        .join();
    }
}

fn node_selector(node: &str) -> HashMap<String, String> {
    [(labels::NODE_NAME.to_string(), node.to_string())].into()
}

pub async fn sandboxes_of(rt: &RemoteRuntime, node: &str) -> Vec<api::PodSandbox> {
    rt.list_pod_sandbox(Some(api::PodSandboxFilter {
        label_selector: node_selector(node),
        ..Default::default()
    }))
    .await
    .unwrap_or_default()
}

/// Stops and removes every sandbox labelled with `node` (eight at a time), and the pod cgroups
/// nodelet made for them.
pub async fn remove_sandboxes(rt: Arc<RemoteRuntime>, node: String) {
    let sandboxes = sandboxes_of(&rt, &node).await;
    futures::stream::iter(sandboxes)
        .for_each_concurrent(8, |s| {
            let rt = rt.clone();
            async move {
                let _ = rt.stop_pod_sandbox(&s.id).await;
                let _ = rt.remove_pod_sandbox(&s.id).await;
                if let Some(uid) = s.labels.get(labels::POD_UID) {
                    let cgroups =
                        nodelet::cgroup::fs::CgroupfsManager::detect(Path::new("/sys/fs/cgroup"));
                    for tier in ["", "/burstable", "/besteffort"] {
                        let _ = cgroups.remove_path(&format!("/kubepods{tier}/pod{uid}"));
                    }
                }
            }
        })
        .await;
}

/// A pod of testbox containers (`args` as YAML flow lists), each with `extra` container lines.
pub fn pod_yaml(name: &str, policy: &str, grace: u32, containers: &[(&str, &str, &str)]) -> String {
    let mut s = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: {policy}\n  \
         terminationGracePeriodSeconds: {grace}\n  containers:\n"
    );
    for (c, args, extra) in containers {
        s.push_str(&format!(
            "  - name: {c}\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [{args}]\n{extra}"
        ));
    }
    s
}

/// Waits until `check` holds for the pods of `/pods`, polling every `every`; fails after
/// `timeout` with nodelet's log.
pub async fn wait_pods(
    agent: &Agent,
    what: &str,
    timeout: Duration,
    every: Duration,
    check: impl Fn(&[Pod]) -> bool,
) {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(pods) = agent.pods().await {
            if check(&pods) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no {what} after {timeout:?}\n{}",
            agent.log_tail(40)
        );
        tokio::time::sleep(every).await;
    }
}
