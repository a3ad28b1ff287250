//! Raw block CSI volumes (`volumeDevices`, `volumeMode: Block`) on a real containerd, end to
//! end: nodelet joined to the API server fixture, the project's CSI node driver
//! (`nodelet-test-csi`, whose block volumes are loop devices) and the real `kubectl`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use apiserver_fixture::Fixture;
use common::*;
use nodelet_testkit::tail;
use serde_json::Value;

const DRIVER: &str = "csi.nodelet.test";
const CAPACITY: u64 = 1 << 30;

/// The driver process, killed (SIGTERM, so it removes its sockets) when dropped.
struct Driver {
    child: Child,
    dir: PathBuf,
}

impl Driver {
    /// Starts `nodelet-test-csi` registering with the nodelet whose root directory is `root`.
    fn start(root: &Path, dir: &Path, extra: &[&str]) -> Driver {
        std::fs::create_dir_all(dir).unwrap();
        let exe = driver_exe();
        let log = std::fs::File::create(dir.join("driver.log")).unwrap();
        let child = Command::new(&exe)
            .args(["--driver-name", DRIVER, "--node-id"])
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
    fn journal(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join("journal"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// How many successful calls of `method` the driver received.
    fn calls(&self, method: &str) -> usize {
        self.journal()
            .iter()
            .filter(|c| c["method"] == method && c["ok"] == true)
            .count()
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
fn driver_exe() -> PathBuf {
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

/// Mount points under `dir` per /proc/self/mountinfo.
fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = std::fs::canonicalize(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(String::from))
        .filter(|m| m.starts_with(&prefix))
        .collect()
}

fn kubectl_json(api: &str, args: &[&str]) -> Option<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (ok, out, _) = kubectl(api, &all);
    ok.then(|| serde_json::from_str(&out).ok()).flatten()
}

fn create(api: &str, dir: &Path, name: &str, yaml: &str) {
    kubectl_apply(api, dir, name, yaml);
}

/// A CSIDriver object for the test driver.
fn csi_driver_yaml(attach_required: bool) -> String {
    format!(
        "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata:\n  name: {DRIVER}\nspec:\n  attachRequired: {attach_required}\n  podInfoOnMount: true\n  fsGroupPolicy: File\n  volumeLifecycleModes: [Persistent, Ephemeral]\n"
    )
}

/// Claim `claim` and a PV of the test driver (handle `handle`) bound to it, as a provisioner and
/// the control plane's binder leave them: the PV's `claimRef` carries the claim's UID, the
/// claim names the PV (its `Bound` phase is [`bind`]'s).
fn create_claim_and_volume(api: &str, dir: &Path, pv: &str, claim: &str, handle: &str) {
    let claim_yaml = format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {claim}\n  namespace: default\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 1Gi}}}}\n  volumeName: {pv}\n  storageClassName: \"\"\n"
    );
    create(api, dir, &format!("claim-{claim}"), &claim_yaml);
    let uid = kubectl_json(api, &["get", "pvc", claim]).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let pv_yaml = format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: {pv}\nspec:\n  capacity: {{storage: 1Gi}}\n  accessModes: [ReadWriteOnce]\n  persistentVolumeReclaimPolicy: Retain\n  claimRef: {{namespace: default, name: {claim}, uid: {uid}}}\n  csi:\n    driver: {DRIVER}\n    volumeHandle: {handle}\n    volumeAttributes: {{color: blue}}\n"
    );
    create(api, dir, &format!("pv-{pv}"), &pv_yaml);
}

/// Marks the claim Bound, as the control plane's binder does.
fn bind(api: &str, claim: &str) {
    let (ok, out, err) = kubectl(
        api,
        &[
            "patch",
            "pvc",
            claim,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"1Gi"}}}"#,
        ],
    );
    assert!(ok, "bind {claim}: {out}{err}");
}

fn phase_of(fixture: &Fixture, name: &str) -> String {
    api_pod(fixture, name)
        .and_then(|p| p.status?.phase)
        .unwrap_or_default()
}

async fn exec(fixture: &Fixture, name: &str, cmd: &str) -> (i32, String) {
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

async fn delete_and_wait(fixture: &Fixture, n: &Nodelet, name: &str) {
    let (ok, out, err) = kubectl(&fixture.url(), &["delete", "pod", name, "--wait=false"]);
    assert!(ok, "{out}{err}");
    wait_api(&format!("{name} gone"), n, || {
        api_pod(fixture, name).is_none().then_some(())
    })
    .await;
}

/// The first scenario's start: fixture, nodelet, driver registered, CSIDriver object.
async fn joined_with_driver(
    test: &str,
    attach_required: bool,
) -> (Fixture, Nodelet, Driver, PathBuf) {
    let fixture = Fixture::start(None).await.unwrap();
    let api = fixture.url();
    let n = Nodelet::start_in_cluster(test, &api, "");
    let root = n.dir.path().join("root");
    let driver = Driver::start(&root, &n.dir.path().join("driver"), &[]);
    let node = n.node.clone();
    wait_api("the driver registered", &n, || {
        let j = kubectl_json(&api, &["get", "csinode", &node])?;
        (j["spec"]["drivers"][0]["name"] == DRIVER).then_some(())
    })
    .await;
    create(
        &api,
        n.dir.path(),
        "csidriver",
        &csi_driver_yaml(attach_required),
    );
    (fixture, n, driver, root)
}

/// A Block claim and its PV (`volumeMode: Block`), bound as the binder leaves them.
fn create_block_claim_and_volume(api: &str, dir: &Path, pv: &str, claim: &str, handle: &str) {
    let claim_yaml = format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {claim}\n  namespace: default\nspec:\n  accessModes: [ReadWriteOnce]\n  volumeMode: Block\n  resources: {{requests: {{storage: 1Gi}}}}\n  volumeName: {pv}\n  storageClassName: \"\"\n"
    );
    create(api, dir, &format!("claim-{claim}"), &claim_yaml);
    let uid = kubectl_json(api, &["get", "pvc", claim]).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let pv_yaml = format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: {pv}\nspec:\n  capacity: {{storage: 1Gi}}\n  accessModes: [ReadWriteOnce]\n  volumeMode: Block\n  persistentVolumeReclaimPolicy: Retain\n  claimRef: {{namespace: default, name: {claim}, uid: {uid}}}\n  csi:\n    driver: {DRIVER}\n    volumeHandle: {handle}\n"
    );
    create(api, dir, &format!("pv-{pv}"), &pv_yaml);
}

fn pod_with_device(name: &str, node: &str, claim: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - name: data\n    persistentVolumeClaim:\n      claimName: {claim}\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n    volumeDevices:\n    - name: data\n      devicePath: /dev/xvda\n"
    )
}

/// Loop devices whose backing file is under `dir` (`losetup --list`).
fn loops_under(dir: &Path) -> Vec<String> {
    let prefix = std::fs::canonicalize(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string();
    let out = Command::new("losetup")
        .args(["--list", "--noheadings", "--output", "NAME,BACK-FILE"])
        .output()
        .expect("losetup (util-linux) is needed for block volumes");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&prefix))
        .map(String::from)
        .collect()
}

/// A pod with a Block claim sees a block device at `devicePath` and writes 4 KiB on it; a second
/// pod, after the first is gone, reads them back. The volume is staged and published with the
/// `block` access type at the kubelet's paths, and nothing stays mounted or attached after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_claim_is_a_device_in_the_container_and_its_data_outlives_the_pod() {
    let (fixture, n, driver, root) = joined_with_driver("csi-block", false).await;
    let api = fixture.url();
    let node = n.node.clone();
    create_block_claim_and_volume(&api, n.dir.path(), "pv-blk", "blk", "vol-blk");
    bind(&api, "blk");

    create(
        &api,
        n.dir.path(),
        "writer",
        &pod_with_device("writer", &node, "blk"),
    );
    wait_api("writer Running", &n, || {
        (phase_of(&fixture, "writer") == "Running").then_some(())
    })
    .await;
    let (code, out) = exec(&fixture, "writer", "test -b /dev/xvda && echo block").await;
    assert_eq!((code, out.trim()), (0, "block"), "{out}");
    let write = "yes nodelet-block | head -c 4096 > /tmp/p && dd if=/tmp/p of=/dev/xvda bs=4096 count=1 conv=fsync 2>/dev/null && md5sum < /tmp/p";
    let (code, written) = exec(&fixture, "writer", write).await;
    assert_eq!(code, 0, "{written}");
    assert!(
        written.starts_with(|c: char| c.is_ascii_hexdigit()),
        "{written}"
    );

    let journal = driver.journal();
    let stage = journal
        .iter()
        .find(|c| c["method"] == "NodeStageVolume")
        .expect("staged");
    let publish = journal
        .iter()
        .find(|c| c["method"] == "NodePublishVolume")
        .expect("published");
    let block = root.join("plugins/kubernetes.io/csi/volumeDevices");
    let text = |v: &Value| v.to_string();
    assert!(
        text(stage).contains(&block.join("staging/pv-blk").display().to_string()),
        "{stage}"
    );
    assert!(
        text(publish).contains(&block.join("publish/pv-blk").display().to_string()),
        "{publish}"
    );
    assert_eq!(stage["block"], true, "{stage}");
    assert_eq!(publish["block"], true, "{publish}");
    assert_eq!(
        loops_under(n.dir.path()).len(),
        1,
        "the driver's loop device"
    );

    delete_and_wait(&fixture, &n, "writer").await;
    wait_api("the block volume unstaged after its pod", &n, || {
        (driver.calls("NodeUnstageVolume") == 1).then_some(())
    })
    .await;
    assert!(mounts_under(&root).is_empty(), "{:?}", mounts_under(&root));
    assert!(loops_under(n.dir.path()).is_empty());

    create(
        &api,
        n.dir.path(),
        "reader",
        &pod_with_device("reader", &node, "blk"),
    );
    wait_api("reader Running", &n, || {
        (phase_of(&fixture, "reader") == "Running").then_some(())
    })
    .await;
    let (code, read) = exec(
        &fixture,
        "reader",
        "dd if=/dev/xvda bs=4096 count=1 2>/dev/null | md5sum",
    )
    .await;
    assert_eq!(
        (code, read.trim()),
        (0, written.trim()),
        "{}",
        tail(&n.logs(), 40)
    );

    delete_and_wait(&fixture, &n, "reader").await;
    wait_api("unstaged again", &n, || {
        (driver.calls("NodeUnstageVolume") == 2).then_some(())
    })
    .await;
    wait_api("nothing mounted, no loop device", &n, || {
        (mounts_under(&root).is_empty() && loops_under(n.dir.path()).is_empty()).then_some(())
    })
    .await;
    // The kubelet's block paths are gone with the volume.
    assert!(!block.join("pv-blk").exists());
    assert!(!block.join("staging/pv-blk").exists());
    assert!(!block.join("publish/pv-blk").exists());
}

/// A Filesystem claim in `volumeDevices` refuses the containers with the kubelet's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filesystem_claim_as_a_device_is_refused_with_the_kubelets_message() {
    let (fixture, n, driver, _root) = joined_with_driver("csi-block-fs", false).await;
    let api = fixture.url();
    let node = n.node.clone();
    create_claim_and_volume(&api, n.dir.path(), "pv-fs", "fs", "vol-fs");
    bind(&api, "fs");
    create(
        &api,
        n.dir.path(),
        "wrong",
        &pod_with_device("wrong", &node, "fs"),
    );
    let message = wait_api("the container refused", &n, || {
        let p = api_pod(&fixture, "wrong")?;
        let waiting = p
            .status?
            .container_statuses?
            .first()?
            .state
            .clone()?
            .waiting?;
        (waiting.reason.as_deref() == Some("CreateContainerConfigError"))
            .then_some(waiting.message.unwrap_or_default())
    })
    .await;
    assert!(
        message
            .contains("volume data has volumeMode Filesystem, but is specified in volumeDevices"),
        "{message}"
    );
    assert_eq!(driver.calls("NodePublishVolume"), 0);
}
