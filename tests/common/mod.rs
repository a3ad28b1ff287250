//! Harness for integration tests against a real containerd.
//!
//! Each test starts its own `nodelet` process (the real binary) with its own node name, root
//! directory, manifest directory and API port, against the project-local containerd that
//! `scripts/test.sh` starts. Because nodelet only manages sandboxes labelled with its node name,
//! tests run in parallel on one containerd without seeing each other's pods.
//!
//! There is no silent skip: without `NODELET_TEST_CRI` (set by `scripts/test.sh`) every
//! integration test fails with instructions.

#![allow(dead_code)]

pub mod csi;
pub mod real;

pub use real::{RealServer, TestApi};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use nodelet::cri::remote::RemoteRuntime;
use nodelet::cri::{api, labels, Runtime};
use nodelet_testkit::api::{NodeletApi, Wait};
use nodelet_testkit::port::free_port;
use nodelet_testkit::tail;

pub const TESTBOX: &str = "localhost/testbox:1";

/// The CRI endpoint of the test containerd. Panics (fails the test) when the environment is
/// missing: integration tests never pass by skipping.
pub fn cri_endpoint() -> String {
    match std::env::var("NODELET_TEST_CRI") {
        Ok(e) if !e.is_empty() => {
            let path = e.trim_start_matches("unix://");
            assert!(
                Path::new(path).exists(),
                "NODELET_TEST_CRI={e} but the socket does not exist: is the test containerd running? \
                 Run the tests with scripts/test.sh (or `scripts/containerd.sh start`)."
            );
            e
        }
        _ => panic!(
            "NODELET_TEST_CRI is not set: integration tests need the project's containerd. \
             Run them with scripts/test.sh, which installs and starts it."
        ),
    }
}

pub fn runtime() -> Arc<RemoteRuntime> {
    let e = cri_endpoint();
    Arc::new(RemoteRuntime::connect(&e, &e, Duration::from_secs(30)).expect("CRI client"))
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// `field: value` unless `extra` sets the field itself (YAML refuses a key given twice).
fn default_line(extra: &str, field: &str, value: &str) -> String {
    if extra.lines().any(|l| l.starts_with(&format!("{field}:"))) {
        String::new()
    } else {
        format!("{field}: {value}\n")
    }
}

pub struct Nodelet {
    pub node: String,
    pub dir: tempfile::TempDir,
    pub manifests: PathBuf,
    pub port: u16,
    pub config: PathBuf,
    child: Option<Child>,
    log: PathBuf,
    runs: u32,
}

impl Nodelet {
    /// Starts nodelet with a fresh node name, directories and port.
    pub fn start(test: &str) -> Nodelet {
        Self::start_with(test, "")
    }

    /// Joins the cluster of the API server at `api_url` (a kubeconfig is written for it);
    /// `extra` is appended to the configuration.
    pub fn start_in_cluster(test: &str, api_url: &str, extra: &str) -> Nodelet {
        let mut me = Self::prepare_in_cluster(test, api_url, extra);
        me.spawn();
        me
    }

    /// [`Nodelet::start_in_cluster`] without starting the process: the node's name is known,
    /// so a test can create what must exist before nodelet first looks, then
    /// [`Nodelet::launch`]es it.
    pub fn prepare_in_cluster(test: &str, api_url: &str, extra: &str) -> Nodelet {
        let dir = tempfile::Builder::new()
            .prefix("nodelet-kubeconfig-")
            .tempdir()
            .expect("tempdir");
        let path = dir.keep().join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fixture\n  cluster:\n    server: {api_url}\n\
                 users:\n- name: nodelet\n  user: {{}}\ncontexts:\n- name: fixture\n  context:\n    cluster: fixture\n    user: nodelet\n\
                 current-context: fixture\n"
            ),
        )
        .expect("write kubeconfig");
        Self::prepare_with(
            test,
            &format!(
                "kubeconfig: {}\nnodeStatusUpdateFrequency: 2s\nnodeLeaseDurationSeconds: 8\n{extra}",
                path.display()
            ),
        )
    }

    /// Joins the real control plane as a node of `server`'s test (its own client certificate
    /// as `system:node:<node>`); `extra` is appended to the configuration.
    pub fn start_in_real_cluster(test: &str, server: &RealServer, extra: &str) -> Nodelet {
        let mut me = Self::prepare_in_real_cluster(test, server, extra);
        me.spawn();
        me
    }

    /// [`Nodelet::start_in_real_cluster`] without starting the process.
    pub fn prepare_in_real_cluster(test: &str, server: &RealServer, extra: &str) -> Nodelet {
        let dir = tempfile::Builder::new()
            .prefix("nodelet-kubeconfig-")
            .tempdir()
            .expect("tempdir")
            .keep();
        let path = dir.join("kubeconfig");
        // Quicker than the kubelet's 10 s and 40 s, so tests see changes soon, unless `extra`
        // sets them.
        let me = Self::prepare_with(
            test,
            &format!(
                "kubeconfig: {}\n{}{}{extra}",
                path.display(),
                default_line(extra, "nodeStatusUpdateFrequency", "2s"),
                default_line(extra, "nodeLeaseDurationSeconds", "8"),
            ),
        );
        // The node's name is known now; nodelet reads the file when it starts.
        std::fs::copy(server.node_kubeconfig(&me.node), &path).expect("the node's kubeconfig");
        me
    }

    pub fn start_with(test: &str, extra: &str) -> Nodelet {
        let mut me = Self::prepare_with(test, extra);
        me.spawn();
        me
    }

    /// Starts a prepared nodelet.
    pub fn launch(&mut self) {
        self.spawn();
    }

    /// The directories and configuration of [`Nodelet::start_with`], without starting it (a
    /// test writes manifests first, so the first scan sees them all).
    pub fn prepare_with(test: &str, extra: &str) -> Nodelet {
        let endpoint = cri_endpoint();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let node = format!("it-{}-{}-{n}", test.replace('_', "-"), std::process::id());
        let dir = tempfile::Builder::new()
            .prefix("nodelet-it-")
            .tempdir()
            .expect("tempdir");
        let manifests = dir.path().join("manifests");
        std::fs::create_dir_all(&manifests).expect("mkdir manifests");
        let port = free_port();
        let config = dir.path().join("config.yaml");
        let text = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\n\
             kind: KubeletConfiguration\n\
             containerRuntimeEndpoint: {endpoint}\n\
             staticPodPath: {manifests}\n\
             fileCheckFrequency: 2s\n\
             syncFrequency: 10s\n\
             podLogsDir: {logs}\n\
             containerLogLinksDir: {links}\n\
             rootDir: {root}\n\
             nodeName: {node}\n\
             {address}\
             readOnlyPort: {port}\n\
             healthzPort: 0\n\
             {kubelet_port}\
             plegRelistPeriod: 2s\n\
             {fail_cgroup_v1}\
             {eviction_hard}\
             logging:\n  verbosity: 2\n{extra}",
            links = dir.path().join("containers").display(),
            manifests = manifests.display(),
            // Tests run side by side: the kubelet API only where a test asks for a port, and
            // loopback unless a test needs the node's address.
            kubelet_port = default_line(extra, "port", "0"),
            address = default_line(extra, "address", "127.0.0.1"),
            // This machine is a cgroup v1 host, which nodelet (as the kubelet since 1.35)
            // refuses unless told otherwise.
            fail_cgroup_v1 = default_line(extra, "failCgroupV1", "false"),
            // The shared test disk hovers around 15% free, where the kubelet's default
            // `imagefs.available: 15%` fires and evicts (and rejects) every test's pods. The
            // manager still runs; tests of eviction set their own thresholds.
            eviction_hard = default_line(extra, "evictionHard", "{memory.available: \"1Mi\"}"),
            logs = dir.path().join("logs").display(),
            root = dir.path().join("root").display(),
        );
        std::fs::write(&config, text).expect("write config");
        let me = Nodelet {
            node,
            log: dir.path().join("nodelet.log"),
            dir,
            manifests,
            port,
            config,
            child: None,
            runs: 0,
        };
        me
    }

    fn spawn(&mut self) {
        self.runs += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_nodelet"))
            .args(["run", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "nodelet=debug,info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn nodelet");
        self.child = Some(child);
    }

    /// Starts this nodelet with a command of the test's own (kubelet flags, a systemd unit's
    /// `ExecStart`) instead of `nodelet run --config`; its output goes to the same log and the
    /// cleanup is the same.
    pub fn launch_command(&mut self, mut command: Command) {
        self.runs += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = command
            .env("RUST_LOG", "nodelet=debug,info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn nodelet");
        self.child = Some(child);
    }

    /// The process id of the running nodelet.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// `Some(status)` once the started nodelet process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// Starts nodelet again after [`Nodelet::kill9`] (same configuration and directories).
    pub fn relaunch(&mut self) {
        assert!(self.child.is_none(), "nodelet still runs");
        self.spawn();
    }

    /// SIGKILL, as an OOM kill or a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn write_manifest(&self, file: &str, body: &str) {
        // Write then rename, as an operator's tooling should, so the source never reads half a file.
        let tmp = self.dir.path().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, body).expect("write manifest");
        std::fs::rename(&tmp, self.manifests.join(file)).expect("rename manifest");
    }

    pub fn remove_manifest(&self, file: &str) {
        std::fs::remove_file(self.manifests.join(file)).expect("remove manifest");
    }

    pub fn pod_name(&self, name: &str) -> String {
        format!("{name}-{}", self.node)
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// This nodelet's read-only API (a client of its own, as every call here had).
    pub fn api(&self) -> NodeletApi {
        NodeletApi::new(self.base_url(), Duration::from_secs(5))
    }

    /// A counter (or a histogram's `_count`) from `/metrics`, summed over its label sets.
    pub async fn metric(&self, name: &str) -> Option<f64> {
        self.api().metric(name).await
    }

    /// Waits until the counter `name` grows past its value now: the positive sign that the part
    /// it counts is alive and has run once more, which a test proving an absence ("not
    /// restarted") waits for before it looks.
    pub async fn wait_metric_advance(&self, name: &str, timeout: Duration) {
        // A counter family shows no series before its first count: absent is zero. (A wrong
        // name fails all the same, at the deadline.)
        let start = self.metric(name).await.unwrap_or(0.0);
        let deadline = Instant::now() + timeout;
        loop {
            if self.metric(name).await.is_some_and(|now| now > start) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not move from {start} in {timeout:?}\n{}",
                tail(&self.logs(), 40)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the pod workers finished `count` more syncs (of all pods together) than when
    /// called: the positive sign that what a sync decides (adopt or restart a container, start,
    /// kill) has been decided since, which a test proving an absence waits for before it looks.
    pub async fn wait_more_syncs(&self, count: u32, timeout: Duration) {
        let name = "nodelet_pod_worker_duration_seconds_count";
        let start = self.metric(name).await.unwrap_or(0.0);
        let deadline = Instant::now() + timeout;
        loop {
            if self
                .metric(name)
                .await
                .is_some_and(|now| now >= start + f64::from(count))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not {count} pod syncs after {start} in {timeout:?}\n{}",
                tail(&self.logs(), 40)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn pods(&self) -> Option<Vec<Pod>> {
        self.api().pods().await
    }

    /// A pod by its exact name (API pods are not renamed like static pods).
    pub async fn pod_exact(&self, name: &str) -> Option<Pod> {
        self.api().pod(name).await
    }

    pub async fn pod(&self, name: &str) -> Option<Pod> {
        self.api().pod(&self.pod_name(name)).await
    }

    /// Polls the local API until the pod satisfies `check`; fails with the last state and the
    /// nodelet log after `timeout`.
    pub async fn wait_pod(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        check: impl Fn(&Pod) -> bool,
    ) -> Pod {
        self.api()
            .wait_pod(&self.pod_name(name), wait(timeout), what, check, || {
                format!("--- nodelet log ---\n{}", tail(&self.logs(), 80))
            })
            .await
    }

    pub async fn wait_gone(&self, name: &str, timeout: Duration) {
        self.api()
            .wait_gone(&self.pod_name(name), wait(timeout), || {
                tail(&self.logs(), 60)
            })
            .await
    }

    /// Sandboxes and containers the runtime holds for this node.
    pub async fn runtime_objects(&self) -> (Vec<api::PodSandbox>, Vec<api::Container>) {
        let rt = runtime();
        let selector: std::collections::HashMap<String, String> =
            [(labels::NODE_NAME.to_string(), self.node.clone())].into();
        let sandboxes = rt
            .list_pod_sandbox(Some(api::PodSandboxFilter {
                label_selector: selector.clone(),
                ..Default::default()
            }))
            .await
            .expect("list sandboxes");
        let containers = rt
            .list_containers(Some(api::ContainerFilter {
                label_selector: selector,
                ..Default::default()
            }))
            .await
            .expect("list containers");
        (sandboxes, containers)
    }

    /// Runs `nodelet <args>` and returns (success, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (bool, String, String) {
        cli(args)
    }
}

pub fn cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodelet"))
        .args(args)
        .output()
        .expect("run nodelet");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

impl Drop for Nodelet {
    fn drop(&mut self) {
        self.kill9();
        // Leave nothing behind in the shared containerd, even when the test failed.
        let node = self.node.clone();
        let cleanup = async move {
            let rt = runtime();
            let selector: std::collections::HashMap<String, String> =
                [(labels::NODE_NAME.to_string(), node)].into();
            if let Ok(sandboxes) = rt
                .list_pod_sandbox(Some(api::PodSandboxFilter {
                    label_selector: selector,
                    ..Default::default()
                }))
                .await
            {
                // Eight at a time: a test with 110 pods would otherwise wait minutes for
                // one network teardown after the other.
                use futures::StreamExt;
                futures::stream::iter(sandboxes)
                    .for_each_concurrent(8, |s| {
                        let rt = rt.clone();
                        async move {
                            let _ = rt.stop_pod_sandbox(&s.id).await;
                            let _ = rt.remove_pod_sandbox(&s.id).await;
                            if let Some(uid) = s.labels.get(labels::POD_UID) {
                                remove_pod_cgroups(uid);
                            }
                        }
                    })
                    .await;
            }
        };
        // Drop may run inside or outside a tokio runtime; use a private one on a thread.
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(cleanup);
            }
        })
        .join();
        // nodelet bind-mounts its root directory onto itself (shared propagation, as the
        // kubelet does where the host's mount is private, as on this machine); a killed nodelet
        // leaves it and its pods' volumes mounted.
        unmount_below(self.dir.path());
    }
}

/// Unmounts (lazily) every mount at or below `dir`, deepest first, so the test's directory can
/// be removed.
pub fn unmount_below(dir: &Path) {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for point in nodelet::volume::mounts::mounts_under(&table, dir)
        .into_iter()
        .chain(nodelet::volume::mounts::is_mount_point(&table, dir).then(|| dir.to_path_buf()))
    {
        let _ = nix::mount::umount2(&point, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Removes the (empty) pod cgroups nodelet made for `uid`, whatever its QoS tier: a killed
/// nodelet cannot, and the machine's cgroup tree is shared by every test.
fn remove_pod_cgroups(uid: &str) {
    let cgroups = nodelet::cgroup::fs::CgroupfsManager::detect(Path::new("/sys/fs/cgroup"));
    for tier in ["", "/burstable", "/besteffort"] {
        let _ = cgroups.remove_path(&format!("/kubepods{tier}/pod{uid}"));
    }
}

/// `timeout`, looking every 200 ms.
fn wait(timeout: Duration) -> Wait {
    Wait {
        timeout,
        poll: Duration::from_millis(200),
    }
}

pub fn testbox_pod(name: &str, policy: &str, containers: &[(&str, &[&str])]) -> String {
    let mut s = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 5\n  containers:\n"
    );
    for (cname, args) in containers {
        let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
        s.push_str(&format!(
            "  - name: {cname}\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [{}]\n",
            args.join(", ")
        ));
    }
    s
}

pub fn dir_of(p: &Path) -> PathBuf {
    p.to_path_buf()
}

/// The real `kubectl`, not yet run, against `api`: the URL of an API server fixture (no
/// authentication), or the kubeconfig of a [`RealServer`] (a path: the real control plane,
/// as its admin, in the test's namespace, with the kubectl built beside it).
pub fn kubectl_command(api: &str, args: &[&str]) -> Command {
    if api.starts_with('/') {
        let mut command = Command::new(real::kubectl_bin());
        command.arg("--kubeconfig").arg(api).args(args);
        return command;
    }
    let mut command = Command::new("kubectl");
    command
        .env("KUBECONFIG", "/dev/null")
        .arg("--server")
        .arg(api)
        .args(args);
    command
}

/// [`kubectl_command`] as the words of a shell command line (for `script`, which runs kubectl
/// under a terminal).
pub fn kubectl_shell(api: &str) -> String {
    if api.starts_with('/') {
        format!("{} --kubeconfig {api}", real::kubectl_bin().display())
    } else {
        format!("KUBECONFIG=/dev/null kubectl --server {api}")
    }
}

/// Every version of a pod the API server stores from now on, read through a watch
/// (`kubectl get pod --watch -o json` into a file), so that a state published for a moment
/// cannot be missed between two polls.
pub struct PodVersions {
    watch: Child,
    file: PathBuf,
}

impl PodVersions {
    /// Starts the watch and waits for its first version (the pod as it is now).
    pub async fn start(api: &str, n: &Nodelet, name: &str) -> PodVersions {
        Self::start_in(api, n, None, name).await
    }

    /// [`PodVersions::start`] in `namespace` (a static pod's mirror is in its manifest's
    /// namespace, not the test's), or the default one.
    pub async fn start_in(
        api: &str,
        n: &Nodelet,
        namespace: Option<&str>,
        name: &str,
    ) -> PodVersions {
        let file = n.dir.path().join(format!("{name}.versions.json"));
        let mut args = vec!["get", "pod", name, "--watch", "-o", "json"];
        if let Some(ns) = namespace {
            args.extend(["--namespace", ns]);
        }
        let watch = kubectl_command(api, &args)
            .stdout(std::fs::File::create(&file).expect("the versions file"))
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl get --watch");
        let versions = PodVersions { watch, file };
        wait_api("the watch's first version", n, || {
            (!versions.read().is_empty()).then_some(())
        })
        .await;
        versions
    }

    /// The versions seen so far, oldest first.
    pub fn read(&self) -> Vec<Pod> {
        let text = std::fs::read_to_string(&self.file).unwrap_or_default();
        serde_json::Deserializer::from_str(&text)
            .into_iter::<Pod>()
            .map_while(Result::ok)
            .collect()
    }

    /// Every version up to and including `pod` (as read from the API), once the watch has it.
    pub async fn through(&self, n: &Nodelet, pod: &Pod) -> Vec<Pod> {
        let rv = pod.metadata.resource_version.clone();
        wait_api("the watch at the version read", n, || {
            let all = self.read();
            all.iter()
                .any(|p| p.metadata.resource_version == rv)
                .then_some(all)
        })
        .await
    }
}

impl Drop for PodVersions {
    fn drop(&mut self) {
        let _ = self.watch.kill();
        let _ = self.watch.wait();
    }
}

/// Runs `kubectl`: (success, stdout, stderr).
pub fn kubectl(api: &str, args: &[&str]) -> (bool, String, String) {
    let out = kubectl_command(api, args).output().expect("run kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kubectl apply -f` of `yaml`, written to `<dir>/<name>.yaml`; fails the test if refused.
pub fn kubectl_apply(api: &str, dir: &Path, name: &str, yaml: &str) {
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, yaml).unwrap();
    let (ok, out, err) = kubectl(api, &["apply", "-f", file.to_str().unwrap()]);
    assert!(ok, "kubectl apply: {out}{err}");
}

/// A certificate authority for tests, and the client certificates it signs.
pub struct TestCa {
    params: rcgen::CertificateParams,
    pub cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        TestCa { params, cert, key }
    }

    /// A serving certificate for the IP address `ip`, and its key: (certificate PEM, key PEM).
    pub fn server_pem(&self, ip: std::net::IpAddr) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![rcgen::SanType::IpAddress(ip)];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A client certificate for user `cn` in group `o` and its key, PEM, one after the other.
    pub fn client_pem(&self, cn: &str, o: &str) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, o);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        format!("{}{}", cert.pem(), key.serialize_pem())
    }
}
/// `kubectl delete pod NAME --grace-period=0 --force` against the API server at `api`, then
/// waits until the pod is gone from the API and nodelet's sandboxes and containers are gone from
/// the runtime (at most `timeout`); returns the time from the force delete to an empty runtime.
pub async fn force_delete_until_gone(
    fixture: &impl TestApi,
    n: &Nodelet,
    name: &str,
    timeout: Duration,
) -> Duration {
    let forced = Instant::now();
    let (ok, out, err) = kubectl(
        &fixture.api(),
        &["delete", "pod", name, "--grace-period=0", "--force"],
    );
    assert!(ok, "force delete: {out}{err}");
    assert!(api_pod(fixture, name).is_none(), "gone from the API");
    loop {
        let (sandboxes, containers) = n.runtime_objects().await;
        if sandboxes.is_empty() && containers.is_empty() {
            return forced.elapsed();
        }
        assert!(
            forced.elapsed() < timeout,
            "still in the runtime {timeout:?} after the force delete: {sandboxes:#?}\n{containers:#?}\n{}",
            tail(&n.logs(), 60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A pod of the test's namespace (`default` in a fixture) as the API server has it.
pub fn api_pod(server: &impl TestApi, name: &str) -> Option<Pod> {
    server.object::<Pod>(Some(&server.namespace()), name)
}

/// Polls `check` (against the API server fixture, say) every 200 ms until it gives a value;
/// fails after 90 s with `what` and the tail of nodelet's log.
pub async fn wait_api<T>(what: &str, n: &Nodelet, check: impl FnMut() -> Option<T>) -> T {
    wait_within(what, n, Duration::from_secs(90), check, String::new).await
}

/// Polls `check` every 200 ms until it gives a value; fails after `timeout` with `what`,
/// `context()` (what else the test can tell, such as the cluster's events) and the tail of
/// nodelet's log.
pub async fn wait_within<T>(
    what: &str,
    n: &Nodelet,
    timeout: Duration,
    mut check: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}\n{}\n--- nodelet ---\n{}",
            context(),
            tail(&n.logs(), 80)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The DELETE with `gracePeriodSeconds: 0` that ends a pod in the API (nodelet's last word on it).
pub fn is_final_delete(r: &apiserver_fixture::LoggedRequest, pod: &str) -> bool {
    r.method == "DELETE"
        && r.path.ends_with(&format!("/pods/{pod}"))
        && r.body
            .as_ref()
            .is_some_and(|b| b["gracePeriodSeconds"] == 0)
}

/// Waits until the status manager finished one more full reconcile with the API server (its
/// counter moved): the moment a nodelet that would resend something has done so.
pub async fn one_more_reconcile(n: &Nodelet) {
    let name = "nodelet_pod_status_reconciles_total";
    let start = n
        .metric(name)
        .await
        .unwrap_or_else(|| panic!("{name} in /metrics"));
    let timeout = Duration::from_secs(90);
    let deadline = Instant::now() + timeout;
    loop {
        if n.metric(name).await.is_some_and(|now| now > start) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no status reconcile in {timeout:?}\n{}",
            tail(&n.logs(), 60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A CA and the API server's kubelet client identity (PEM certificate + key) it signed, as
/// `--kubelet-client-certificate`/`--kubelet-client-key` on a real cluster.
pub fn kubelet_client_identity(dir: &Path) -> (PathBuf, Vec<u8>) {
    let ca = TestCa::new("kubernetes");
    let ca_file = dir.join("ca.crt");
    std::fs::write(&ca_file, ca.cert.pem()).unwrap();
    let identity = ca.client_pem("kube-apiserver-kubelet-client", "kubeadm:cluster-admins");
    // For a client (curl) of the test's own.
    std::fs::write(dir.join(IDENTITY_PEM), &identity).unwrap();
    (ca_file, identity.into_bytes())
}

/// The kubelet client identity's file (certificate and key) in the certificates' directory.
pub const IDENTITY_PEM: &str = "kubelet-client.pem";

/// A fixture (set up by `options`) that proxies to node agents with its kubelet client
/// certificate, and a nodelet joined to it serving the kubelet API (trusting that certificate's
/// CA; `extra` appended to its configuration), so `kubectl logs`, `exec` and `get --raw
/// /api/v1/nodes/<node>/proxy/…` reach it. Returns the kubelet API port and the certificates'
/// directory.
pub async fn join_with_kubelet_api(
    test: &str,
    options: apiserver_fixture::FixtureOptions,
    extra: &str,
) -> (apiserver_fixture::Fixture, Nodelet, u16, tempfile::TempDir) {
    let certs = tempfile::tempdir().unwrap();
    let (ca_file, identity) = kubelet_client_identity(certs.path());
    let fixture = apiserver_fixture::Fixture::start_with(apiserver_fixture::FixtureOptions {
        kubelet_client: apiserver_fixture::KubeletClientConfig {
            identity_pem: Some(identity),
            ca_pem: None,
        },
        ..options
    })
    .await
    .unwrap();
    let kubelet_port = nodelet_testkit::port::free_port();
    let n = Nodelet::start_in_cluster(
        test,
        &fixture.url(),
        &format!(
            // The API server reaches the kubelet API at the node's InternalIP (the address
            // nodelet detects), as on a real node.
            "address: 0.0.0.0\nport: {kubelet_port}\nauthentication:\n  x509:\n    clientCAFile: {}\n{extra}",
            ca_file.display()
        ),
    );
    (fixture, n, kubelet_port, certs)
}

/// `kubectl logs -f` of a pod, its lines passed on by a thread until it is dropped.
pub struct LogFollower {
    pub child: std::process::Child,
    pub lines: std::sync::mpsc::Receiver<String>,
}

impl LogFollower {
    pub fn start(api: &str, pod: &str) -> LogFollower {
        let mut child = kubectl_command(api, &["logs", "-f", pod, "--tail=0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("kubectl logs -f (is kubectl installed?)");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        LogFollower { child, lines }
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }

    /// Asks the testbox server at `pod_ip:8080` for `/healthz` until the follower shows its
    /// access line (until the follow stream is open, a request's line may fall before it: hence
    /// asking again); fails after 90 s or when `kubectl` ends, with `n`'s log tail.
    pub async fn until_healthz_line(&mut self, pod_ip: &str, n: &Nodelet) -> Vec<String> {
        let want = "testbox: http GET /healthz -> 200";
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut seen: Vec<String> = Vec::new();
        while !seen.iter().any(|l| l == want) {
            assert!(
                self.running(),
                "kubectl logs -f ended: {seen:?}\n{}",
                tail(&n.logs(), 40)
            );
            assert!(
                Instant::now() < deadline,
                "kubectl logs -f showed {seen:?}\n{}",
                tail(&n.logs(), 40)
            );
            let _ = reqwest::Client::new()
                .get(format!("http://{pod_ip}:8080/healthz"))
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(500)) {
                seen.push(line);
            }
        }
        seen
    }
}

impl Drop for LogFollower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A test's share of the real control plane and a nodelet joined to it serving the kubelet API
/// to the real API server: the API server's kubelet client certificate is signed by the cluster
/// CA, which nodelet trusts (`extra` appended to its configuration). Returns the kubelet API
/// port and a directory with that client identity ([`IDENTITY_PEM`]) for a client of the
/// test's own.
pub fn join_real_with_kubelet_api(
    test: &str,
    extra: &str,
) -> (RealServer, Nodelet, u16, tempfile::TempDir) {
    let server = RealServer::start(test);
    let certs = tempfile::tempdir().unwrap();
    let ca = real::k8s_env("NODELET_TEST_K8S_CA");
    let pki = Path::new(&ca).parent().expect("the CA's directory");
    let identity = [
        std::fs::read_to_string(pki.join("apiserver-kubelet-client.crt")).unwrap(),
        std::fs::read_to_string(pki.join("apiserver-kubelet-client.key")).unwrap(),
    ]
    .concat();
    std::fs::write(certs.path().join(IDENTITY_PEM), identity).unwrap();
    let kubelet_port = free_port();
    let n = Nodelet::start_in_real_cluster(
        test,
        &server,
        &format!(
            // The API server reaches the kubelet API at the node's InternalIP (the address
            // nodelet detects), as on a real node.
            "address: 0.0.0.0\nport: {kubelet_port}\nauthentication:\n  x509:\n    clientCAFile: {ca}\n{extra}"
        ),
    );
    (server, n, kubelet_port, certs)
}

/// The longest poll of an async worker a test accepts. The watchdog's own threshold is 100 ms
/// (`nodelet::watchdog::SLOW_POLL`), and on an idle machine the tests stay under it; but these
/// are debug builds on a loaded 2-core CI host, where a TLS handshake or a preempted thread makes
/// polls of 100–220 ms (seen in a fresh-clone CI run). A blocking call of the kind the watchdog
/// is for — a tenant-sized directory walk, a wait on another process — holds a worker for
/// seconds (19.7 s in the mass-deletion test before the fix): a second separates the two.
pub const LONGEST_POLL_IN_TESTS: std::time::Duration = std::time::Duration::from_secs(1);

/// The most CPU time one poll may use on its worker: the watchdog's own 100 ms, held strictly.
/// CPU time is what the task itself did on the worker (a walk's system calls included), so a
/// loaded host's preemption does not count, and crypto is optimised even in debug builds
/// (`Cargo.toml`), so a TLS handshake is not 100 ms of work either.
pub const MOST_POLL_CPU_IN_TESTS: std::time::Duration = nodelet::watchdog::SLOW_POLL;

/// The runtime watchdog's verdict on `n` (issue 40): no poll of an async worker used
/// [`MOST_POLL_CPU_IN_TESTS`] (100 ms) of CPU time, and none took [`LONGEST_POLL_IN_TESTS`]
/// or longer. Its stalls (polls of 100 ms or longer) are printed with
/// the log lines that name their tasks.
pub async fn assert_no_runtime_stalls(n: &Nodelet) {
    let metrics = n.api().metrics().await.expect("nodelet's /metrics");
    let stalls = nodelet_testkit::prom::metric_sum(&metrics, "nodelet_runtime_stalls_total");
    let longest =
        nodelet_testkit::prom::metric_sum(&metrics, "nodelet_runtime_longest_poll_seconds")
            .expect("nodelet_runtime_longest_poll_seconds");
    let longest_cpu =
        nodelet_testkit::prom::metric_sum(&metrics, "nodelet_runtime_longest_poll_cpu_seconds")
            .expect("nodelet_runtime_longest_poll_cpu_seconds");
    let stalled: Vec<String> = n
        .logs()
        .lines()
        .filter(|l| l.contains("kept an async runtime worker"))
        .map(String::from)
        .collect();
    println!(
        "runtime watchdog: {stalls:?} polls of 100 ms or longer, the longest {longest:.3} s, \
         the most CPU in one poll {longest_cpu:.3} s\n{}",
        stalled.join("\n")
    );
    assert!(
        longest_cpu < MOST_POLL_CPU_IN_TESTS.as_secs_f64(),
        "a poll worked on an async runtime worker for {longest_cpu:.3} s of CPU time:\n{}",
        stalled.join("\n")
    );
    assert!(
        longest < LONGEST_POLL_IN_TESTS.as_secs_f64(),
        "a poll kept an async runtime worker for {longest:.3} s:\n{}",
        stalled.join("\n")
    );
}
