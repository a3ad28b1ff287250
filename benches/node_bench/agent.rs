//! One agent process for a benchmark part: nodelet (the release binary) or, for the kubelet
//! column, the real kubelet v1.37.2, each with its own node name, directories and read-only API
//! port and the same KubeletConfiguration (the kubelet's defaults for everything a benchmark
//! does not set), against the benchmark's containerd. Dropping it kills the process and removes
//! every sandbox of its node (and the kubelet's cgroup tree), so a failed part leaves nothing
//! behind.

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

/// The real kubelet to compare with: `NODELET_BENCH_KUBELET` (scripts/bench.sh builds v1.37.2
/// with scripts/k8s.sh and sets it); `None` when it is not set.
pub fn kubelet_binary() -> Option<String> {
    std::env::var("NODELET_BENCH_KUBELET")
        .ok()
        .filter(|p| !p.is_empty() && Path::new(p).exists())
}

/// Which agent a benchmark process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Nodelet,
    Kubelet,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Nodelet => "nodelet",
            Kind::Kubelet => "kubelet",
        }
    }

    /// Its CRI call histogram (the kubelet's name with its own prefix: the same buckets).
    pub fn cri_calls_metric(self) -> &'static str {
        match self {
            Kind::Nodelet => "nodelet_runtime_operations_duration_seconds",
            Kind::Kubelet => "kubelet_runtime_operations_duration_seconds",
        }
    }
}

/// A node's identity in a real cluster (the `api` part): its kubeconfig, and the cluster CA
/// that signs the clients of its kubelet API.
pub struct Join {
    pub kubeconfig: PathBuf,
    pub client_ca: String,
}

/// The KubeletConfiguration both agents read: what a benchmark must set, the rest defaults.
fn config_text(
    kind: Kind,
    endpoint: &str,
    dir: &Path,
    node: &str,
    ports: (u16, u16),
    join: Option<&Join>,
) -> String {
    let (read_only, kubelet_api) = ports;
    let mut text = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         containerRuntimeEndpoint: {endpoint}\nstaticPodPath: {d}/manifests\n\
         podLogsDir: {d}/logs\naddress: 127.0.0.1\nreadOnlyPort: {read_only}\nhealthzPort: 0\n\
         # This machine is a cgroup v1 host, which both refuse by default since 1.35.\n\
         failCgroupV1: false\nfailSwapOn: false\ncgroupDriver: cgroupfs\n\
         # The shared disk may run above the 85 % image GC threshold: the benchmark's images stay.\n\
         imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n",
        d = dir.display()
    );
    if let Some(join) = join {
        // Joined to a cluster both serve their kubelet API as a kubeadm node does (and as
        // scripts/conformance.sh configures both): clients authenticated by the cluster CA or
        // the API server's TokenReview, authorized by its SubjectAccessReview.
        text.push_str(&format!(
            "port: {kubelet_api}\n\
             authentication: {{anonymous: {{enabled: false}}, webhook: {{enabled: true}}, \
             x509: {{clientCAFile: {}}}}}\nauthorization: {{mode: Webhook}}\n",
            join.client_ca
        ));
    }
    match kind {
        // nodelet reads these from the file; standalone, `port: 0` leaves its kubelet API
        // unbound.
        Kind::Nodelet => {
            text.push_str(&format!(
                "rootDir: {d}/root\nnodeName: {node}\ncontainerLogLinksDir: {d}/containers\n",
                d = dir.display()
            ));
            match join {
                Some(join) => {
                    text.push_str(&format!("kubeconfig: {}\n", join.kubeconfig.display()))
                }
                None => text.push_str("port: 0\n"),
            }
        }
        // The kubelet takes the root directory, node name and kubeconfig as flags, and needs
        // a port. It kills the processes of every pod cgroup under its kubepods that is not
        // one of its pods: its tree is a cgroup of its own, apart from nodelet's `/kubepods`.
        Kind::Kubelet => {
            text.push_str(&format!("cgroupRoot: {}\n", kubelet_cgroup_root(node)));
            // Without an API server (standalone) it cannot ask one to authorize requests: its
            // API on 127.0.0.1 allows them, as a standalone kubelet must be configured.
            if join.is_none() {
                text.push_str(&format!(
                    "port: {kubelet_api}\n\
                     authentication: {{anonymous: {{enabled: true}}, webhook: {{enabled: false}}}}\n\
                     authorization: {{mode: AlwaysAllow}}\n"
                ));
            }
        }
    }
    text
}

/// The node name of `kind`'s agent in `part` (a cluster identity is made for it before the
/// agent starts).
pub fn node_name(kind: Kind, part: &str) -> String {
    format!("bench-{part}-{}-{}", kind.name(), std::process::id())
}

fn kubelet_cgroup_root(node: &str) -> String {
    format!("/{node}")
}

/// The cgroup hierarchies of this machine: every v1 controller mount, or the v2 tree.
fn cgroup_hierarchies() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.procs").exists() {
        return vec![root.to_path_buf()];
    }
    std::fs::read_dir(root)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.join("cgroup.procs").exists())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes an (empty of processes) cgroup tree, children first.
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

pub struct Agent {
    pub kind: Kind,
    pub node: String,
    pub dir: tempfile::TempDir,
    pub manifests: PathBuf,
    child: Option<Child>,
    command: Vec<String>,
    api: NodeletApi,
}

impl Agent {
    /// Starts nodelet with `extra` (YAML lines) added to a configuration that sets only what a
    /// benchmark must (endpoint, paths, node name, the read-only port) and waits for `/healthz`.
    pub async fn start(part: &str, extra: &str) -> Agent {
        Agent::start_as(Kind::Nodelet, part, extra).await
    }

    /// [`Agent::start`] for either agent, with the same configuration; panics for the kubelet
    /// when [`kubelet_binary`] is not set.
    pub async fn start_as(kind: Kind, part: &str, extra: &str) -> Agent {
        Agent::start_joined(kind, part, extra, None).await
    }

    /// [`Agent::start_as`], joined to a cluster as node [`node_name`] when `join` is given.
    pub async fn start_joined(kind: Kind, part: &str, extra: &str, join: Option<&Join>) -> Agent {
        let endpoint = endpoint();
        let node = node_name(kind, part);
        let dir = tempfile::Builder::new()
            .prefix("nodelet-bench-")
            .tempdir()
            .expect("tempdir");
        let manifests = dir.path().join("manifests");
        std::fs::create_dir_all(&manifests).expect("mkdir manifests");
        let port = free_port();
        let config = dir.path().join("config.yaml");
        let has = |field: &str| extra.lines().any(|l| l.starts_with(&format!("{field}:")));
        let mut text = config_text(
            kind,
            &endpoint,
            dir.path(),
            &node,
            (port, free_port()),
            join,
        );
        if !has("evictionHard") {
            // The kubelet's default memory threshold only: the shared disk hovers near the
            // default `imagefs.available: 15%`, which would evict the benchmark's pods.
            text.push_str("evictionHard: {memory.available: \"100Mi\"}\n");
        }
        text.push_str(extra);
        std::fs::write(&config, text).expect("write config");
        let d = dir.path().display();
        let command: Vec<String> = match kind {
            Kind::Nodelet => vec![
                nodelet_binary(),
                "run".into(),
                "--config".into(),
                config.display().to_string(),
            ],
            Kind::Kubelet => {
                let kubelet = kubelet_binary()
                    .expect("NODELET_BENCH_KUBELET names no kubelet (scripts/bench.sh sets it)");
                // Its cgroupRoot must exist in every hierarchy.
                for h in cgroup_hierarchies() {
                    let _ = std::fs::create_dir_all(h.join(&kubelet_cgroup_root(&node)[1..]));
                }
                let mut command = vec![
                    kubelet,
                    "--config".into(),
                    config.display().to_string(),
                    format!("--root-dir={d}/root"),
                    format!("--cert-dir={d}/pki"),
                    format!("--hostname-override={node}"),
                ];
                if let Some(join) = join {
                    command.push(format!("--kubeconfig={}", join.kubeconfig.display()));
                }
                command
            }
        };
        let mut me = Agent {
            kind,
            node,
            manifests,
            child: None,
            command,
            api: NodeletApi::new(format!("http://127.0.0.1:{port}"), Duration::from_secs(10)),
            dir,
        };
        me.spawn();
        me.wait_healthy().await;
        me
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("agent.log"))
            .expect("log file");
        let child = Command::new(&self.command[0])
            .args(&self.command[1..])
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.command[0]));
        self.child = Some(child);
    }

    async fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.get("/healthz").await.is_none() {
            assert!(
                Instant::now() < deadline,
                "{} did not answer /healthz in 120 s\n{}",
                self.kind.name(),
                self.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills the agent (SIGKILL: a crash, or a restart that gives it no time to tidy up) and
    /// starts it again with the same configuration and directories; returns when it was
    /// started again, without waiting for it to answer.
    pub fn restart(&mut self) -> Instant {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let at = Instant::now();
        self.spawn();
        at
    }

    /// Stops (SIGSTOP) or continues (SIGCONT) the agent: a stopped kubelet does not kill the
    /// pods another client starts on the same runtime meanwhile.
    pub fn pause(&self, stopped: bool) {
        let signal = if stopped { "-STOP" } else { "-CONT" };
        let _ = Command::new("kill")
            .args([signal, &self.pid().to_string()])
            .status();
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default();
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

    /// Removes every manifest and waits until the agent lists no pod and the runtime holds no
    /// ready sandbox of this node; then removes its stopped sandboxes (the kubelet leaves them
    /// to its garbage collection, a minute later).
    pub async fn remove_all(&self, timeout: Duration) {
        if let Ok(entries) = std::fs::read_dir(&self.manifests) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let deadline = Instant::now() + timeout;
        let rt = runtime();
        loop {
            let listed = self.pods().await.map(|p| p.len());
            let ready = sandboxes_of(&rt, &self.node)
                .await
                .iter()
                .filter(|s| s.state == api::PodSandboxState::SandboxReady as i32)
                .count();
            if listed == Some(0) && ready == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{listed:?} pods and {ready} ready sandboxes left {timeout:?} after the \
                 manifests were removed\n{}",
                self.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        remove_sandboxes(rt, self.node.clone()).await;
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let node = self.node.clone();
        let kubelet = self.kind == Kind::Kubelet;
        let dir = self.dir.path().to_path_buf();
        // Drop may run inside a tokio runtime: clean up on a thread with a private one.
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                // The CRI client spawns its connection task: create it inside the runtime.
                rt.block_on(async { remove_sandboxes(runtime(), node.clone()).await });
            }
            if kubelet {
                for h in cgroup_hierarchies() {
                    remove_cgroup_tree(&h.join(&kubelet_cgroup_root(&node)[1..]));
                }
            }
            // Both agents bind-mount their root directory onto itself where its mount is
            // private (shared propagation), and a killed agent leaves its pods' volumes:
            // deepest first, so the directory can go.
            let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
            for point in nodelet::volume::mounts::mounts_under(&table, &dir) {
                let _ = nix::mount::umount2(&point, nix::mount::MntFlags::MNT_DETACH);
            }
        })
        .join();
    }
}

/// The sandboxes of `node`: labelled with it (nodelet's, and the bare client's), or a static
/// pod's, whose name ends with the node's (the kubelet labels no sandbox with its node).
pub async fn sandboxes_of(rt: &RemoteRuntime, node: &str) -> Vec<api::PodSandbox> {
    let suffix = format!("-{node}");
    rt.list_pod_sandbox(None)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|s| {
            s.labels.get(labels::NODE_NAME).map(String::as_str) == Some(node)
                || s.metadata
                    .as_ref()
                    .is_some_and(|m| m.name.ends_with(&suffix))
        })
        .collect()
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

/// Whether the parts run on the first runtime of the run (the current containerd): the kubelet
/// column is measured there only (the kubelet v1.37 is not for containerd 1.6).
pub fn is_primary_runtime() -> bool {
    runtimes().first().map(|(_, e)| e.as_str()) == Some(endpoint().as_str())
}
