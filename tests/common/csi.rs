//! Helpers of the CSI end-to-end tests (`tests/csi_driver.rs`, `tests/csi_block.rs`): the
//! project's CSI driver process (`nodelet-test-csi`), the storage objects the control plane would
//! make, and nodelet joined to an API server (the fixture, or the real control plane: there its
//! PV controller binds the claims) with the driver registered.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::real::TestApi;
use serde_json::Value;

use super::*;

pub const DRIVER: &str = "csi.nodelet.test";
pub const CAPACITY: u64 = 1 << 30;

/// The driver process, killed (SIGTERM, so it removes its sockets) when dropped.
pub struct Driver {
    child: Child,
    dir: PathBuf,
}

impl Driver {
    /// Starts `nodelet-test-csi` registering with the nodelet whose root directory is `root`.
    pub fn start(root: &Path, dir: &Path, extra: &[&str]) -> Driver {
        Driver::start_named(DRIVER, root, dir, extra)
    }

    /// [`Driver::start`] under another driver name: a CSIDriver object is the cluster's, so a
    /// test that needs one unlike the others' on the shared control plane names its own.
    pub fn start_named(name: &str, root: &Path, dir: &Path, extra: &[&str]) -> Driver {
        std::fs::create_dir_all(dir).unwrap();
        let exe = driver_exe();
        let log = std::fs::File::create(dir.join("driver.log")).unwrap();
        let child = Command::new(&exe)
            .args(["--driver-name", name, "--node-id"])
            .arg("node-a")
            .arg("--csi-socket")
            .arg(dir.join("csi.sock"))
            .arg("--registration-dir")
            .arg(root.join("plugins_registry"))
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--journal")
            .arg(dir.join("journal"))
            .args([
                "--max-volumes",
                "7",
                "--topology",
                "topology.nodelet.test/zone=z1",
            ])
            .args(["--volume-capacity", &CAPACITY.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", exe.display()));
        Driver {
            child,
            dir: dir.to_path_buf(),
        }
    }

    /// The RPCs the driver received, in order.
    pub fn journal(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join("journal"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// How many successful calls of `method` the driver received.
    pub fn calls(&self, method: &str) -> usize {
        self.journal()
            .iter()
            .filter(|c| c["method"] == method && c["ok"] == true)
            .count()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("driver.log")).unwrap_or_default()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// The driver binary, built beside this test's binary by `cargo build --workspace`; a test
/// without it fails loudly.
pub fn driver_exe() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = dir.join("nodelet-test-csi");
    assert!(
        path.exists(),
        "{} is missing: build the workspace (cargo build --workspace)",
        path.display()
    );
    path
}

/// Mount points strictly below `dir` per /proc/self/mountinfo (`dir` itself may be one: nodelet
/// bind-mounts its rootDir onto itself with shared propagation, as the kubelet does).
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(String::from))
        .filter(|m| Path::new(m) != dir && Path::new(m).starts_with(&dir))
        .collect()
}

pub fn kubectl_json(api: &str, args: &[&str]) -> Option<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (ok, out, _) = kubectl(api, &all);
    ok.then(|| serde_json::from_str(&out).ok()).flatten()
}

pub fn create(api: &str, dir: &Path, name: &str, yaml: &str) {
    kubectl_apply(api, dir, name, yaml);
}

/// A CSIDriver object for the test driver.
pub fn csi_driver_yaml(attach_required: bool) -> String {
    csi_driver_object(DRIVER, attach_required)
}

/// A CSIDriver object for the test driver running as `name`.
pub fn csi_driver_object(name: &str, attach_required: bool) -> String {
    format!(
        "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata:\n  name: {name}\nspec:\n  attachRequired: {attach_required}\n  podInfoOnMount: true\n  fsGroupPolicy: File\n  volumeLifecycleModes: [Persistent, Ephemeral]\n"
    )
}

/// Claim `claim` and a PV of the test driver (handle `handle`) bound to it, as a provisioner and
/// the control plane's binder leave them: the PV's `claimRef` carries the claim's UID, the
/// claim names the PV (its `Bound` phase is [`bind`]'s).
pub fn create_claim_and_volume(
    api: &str,
    ns: &str,
    dir: &Path,
    pv: &str,
    claim: &str,
    handle: &str,
) {
    create_owned_claim_and_volume(api, ns, dir, pv, claim, handle, "");
}

/// [`create_claim_and_volume`] with `owner` (YAML of `metadata.ownerReferences`, or empty).
pub fn create_owned_claim_and_volume(
    api: &str,
    ns: &str,
    dir: &Path,
    pv: &str,
    claim: &str,
    handle: &str,
    owner: &str,
) {
    let uid = create_claim(api, ns, dir, claim, pv, owner);
    create_volume(api, dir, pv, (ns, claim, &uid), DRIVER, handle);
}

/// Claim `claim` for the volume `pv` (which may not exist yet: the PV controller then leaves
/// the claim `Pending`), with `owner` (YAML of `metadata.ownerReferences`, or empty); returns
/// its UID.
pub fn create_claim(api: &str, ns: &str, dir: &Path, claim: &str, pv: &str, owner: &str) -> String {
    let claim_yaml = format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {claim}\n  namespace: {ns}\n{owner}spec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 1Gi}}}}\n  volumeName: {pv}\n  storageClassName: \"\"\n"
    );
    create(api, dir, &format!("claim-{claim}"), &claim_yaml);
    kubectl_json(api, &["get", "pvc", "-n", ns, claim]).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A PV of the test driver running as `driver` (handle `handle`) for the claim `(namespace,
/// name, UID)`, as a provisioner leaves it: its `claimRef` carries the claim's UID.
pub fn create_volume(
    api: &str,
    dir: &Path,
    pv: &str,
    (ns, claim, uid): (&str, &str, &str),
    driver: &str,
    handle: &str,
) {
    let pv_yaml = format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: {pv}\nspec:\n  capacity: {{storage: 1Gi}}\n  accessModes: [ReadWriteOnce]\n  persistentVolumeReclaimPolicy: Retain\n  storageClassName: \"\"\n  claimRef: {{namespace: {ns}, name: {claim}, uid: {uid}}}\n  csi:\n    driver: {driver}\n    volumeHandle: {handle}\n    volumeAttributes: {{color: blue}}\n"
    );
    create(api, dir, &format!("pv-{pv}"), &pv_yaml);
}

/// Waits until the real control plane's PV controller has bound the claim to its volume
/// (`Bound`, both ways).
pub async fn wait_bound(server: &RealServer, n: &Nodelet, claim: &str, pv: &str) {
    wait_api(&format!("{claim} bound by the PV controller"), n, || {
        let c = kubectl_json(&server.api(), &["get", "pvc", claim])?;
        let v = kubectl_json(&server.api(), &["get", "pv", pv])?;
        (c["status"]["phase"] == "Bound" && v["status"]["phase"] == "Bound").then_some(())
    })
    .await;
}

pub fn pod_with_claim(name: &str, node: &str, claim: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - name: data\n    persistentVolumeClaim:\n      claimName: {claim}\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n    volumeMounts:\n    - name: data\n      mountPath: /data\n"
    )
}

pub fn phase_of(fixture: &impl TestApi, name: &str) -> String {
    api_pod(fixture, name)
        .and_then(|p| p.status?.phase)
        .unwrap_or_default()
}

pub async fn exec(fixture: &impl TestApi, name: &str, cmd: &str) -> (i32, String) {
    use nodelet::cri::Runtime;
    let pod = api_pod(fixture, name).unwrap();
    let id = pod.status.unwrap().container_statuses.unwrap()[0]
        .container_id
        .clone()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let r = runtime()
        .exec_sync(
            &id,
            vec!["/bin/sh".into(), "-c".into(), cmd.into()],
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    (
        r.exit_code,
        format!(
            "{}{}",
            String::from_utf8_lossy(&r.stdout),
            String::from_utf8_lossy(&r.stderr)
        ),
    )
}

pub async fn delete_and_wait(fixture: &impl TestApi, n: &Nodelet, name: &str) {
    let (ok, out, err) = kubectl(&fixture.api(), &["delete", "pod", name, "--wait=false"]);
    assert!(ok, "{out}{err}");
    wait_api(&format!("{name} gone"), n, || {
        api_pod(fixture, name).is_none().then_some(())
    })
    .await;
}

/// Joined to the real control plane with the test driver registered and its CSIDriver object
/// (the object is the cluster's: every test that makes it asks the same of it,
/// `attachRequired: false`).
pub async fn joined_real_with_driver(test: &str) -> (RealServer, Nodelet, Driver, PathBuf) {
    let server = RealServer::start(test);
    let api = server.api();
    let n = Nodelet::start_in_real_cluster(test, &server, "");
    let root = n.dir.path().join("root");
    let driver = Driver::start(&root, &n.dir.path().join("driver"), &[]);
    wait_registered(&api, &n, DRIVER).await;
    create(&api, n.dir.path(), "csidriver", &csi_driver_yaml(false));
    (server, n, driver, root)
}

/// Waits until the test driver running as `name` is on the node's CSINode.
pub async fn wait_registered(api: &str, n: &Nodelet, name: &str) {
    let node = n.node.clone();
    wait_api("the driver registered", n, || {
        let j = kubectl_json(api, &["get", "csinode", &node])?;
        (j["spec"]["drivers"][0]["name"] == name).then_some(())
    })
    .await;
}

/// Waits for a `FailedMount` event of pod `pod` in the test's namespace; returns it.
pub async fn wait_failed_mount(api: &str, n: &Nodelet, pod: &str) -> Value {
    wait_api(&format!("a FailedMount event for {pod}"), n, || {
        let j = kubectl_json(api, &["get", "events"])?;
        j["items"]
            .as_array()?
            .iter()
            .find(|e| e["involvedObject"]["name"] == pod && e["reason"] == "FailedMount")
            .cloned()
    })
    .await
}
