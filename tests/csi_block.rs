//! Raw block CSI volumes (`volumeDevices`, `volumeMode: Block`) on a real containerd, end to
//! end: nodelet joined to the real v1.37.2 control plane (its PV controller binds the claims),
//! the project's CSI node driver
//! (`nodelet-test-csi`, whose block volumes are loop devices) and the real `kubectl`.

mod common;

use std::path::Path;
use std::process::Command;

use common::csi::*;
use common::*;
use nodelet_testkit::tail;
use serde_json::Value;

/// A Block claim and its PV (`volumeMode: Block`), bound as the binder leaves them.
fn create_block_claim_and_volume(
    api: &str,
    ns: &str,
    dir: &Path,
    pv: &str,
    claim: &str,
    handle: &str,
) {
    let claim_yaml = format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {claim}\n  namespace: {ns}\nspec:\n  accessModes: [ReadWriteOnce]\n  volumeMode: Block\n  resources: {{requests: {{storage: 1Gi}}}}\n  volumeName: {pv}\n  storageClassName: \"\"\n"
    );
    create(api, dir, &format!("claim-{claim}"), &claim_yaml);
    let uid = kubectl_json(api, &["get", "pvc", "-n", ns, claim]).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let pv_yaml = format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: {pv}\nspec:\n  capacity: {{storage: 1Gi}}\n  accessModes: [ReadWriteOnce]\n  volumeMode: Block\n  persistentVolumeReclaimPolicy: Retain\n  claimRef: {{namespace: {ns}, name: {claim}, uid: {uid}}}\n  csi:\n    driver: {DRIVER}\n    volumeHandle: {handle}\n"
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
    let (server, n, driver, root) = joined_real_with_driver("csi-block").await;
    let api = server.api();
    let ns = server.namespace();
    let node = n.node.clone();
    // The PV's name is the cluster's: the test's own. The real PV controller binds the two.
    let pv = format!("{ns}-blk");
    create_block_claim_and_volume(&api, &ns, n.dir.path(), &pv, "blk", "vol-blk");
    wait_bound(&server, &n, "blk", &pv).await;

    create(
        &api,
        n.dir.path(),
        "writer",
        &pod_with_device("writer", &node, "blk"),
    );
    wait_api("writer Running", &n, || {
        (phase_of(&server, "writer") == "Running").then_some(())
    })
    .await;
    let (code, out) = exec(&server, "writer", "test -b /dev/xvda && echo block").await;
    assert_eq!((code, out.trim()), (0, "block"), "{out}");
    let write = "yes nodelet-block | head -c 4096 > /tmp/p && dd if=/tmp/p of=/dev/xvda bs=4096 count=1 conv=fsync 2>/dev/null && md5sum < /tmp/p";
    let (code, written) = exec(&server, "writer", write).await;
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
        text(stage).contains(&block.join("staging").join(&pv).display().to_string()),
        "{stage}"
    );
    assert!(
        text(publish).contains(&block.join("publish").join(&pv).display().to_string()),
        "{publish}"
    );
    assert_eq!(stage["block"], true, "{stage}");
    assert_eq!(publish["block"], true, "{publish}");
    assert_eq!(
        loops_under(n.dir.path()).len(),
        1,
        "the driver's loop device"
    );

    delete_and_wait(&server, &n, "writer").await;
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
        (phase_of(&server, "reader") == "Running").then_some(())
    })
    .await;
    let (code, read) = exec(
        &server,
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

    delete_and_wait(&server, &n, "reader").await;
    wait_api("unstaged again", &n, || {
        (driver.calls("NodeUnstageVolume") == 2).then_some(())
    })
    .await;
    wait_api("nothing mounted, no loop device", &n, || {
        (mounts_under(&root).is_empty() && loops_under(n.dir.path()).is_empty()).then_some(())
    })
    .await;
    // The kubelet's block paths are gone with the volume.
    assert!(!block.join(&pv).exists());
    assert!(!block.join("staging").join(&pv).exists());
    assert!(!block.join("publish").join(&pv).exists());
    server.kubectl(&["delete", "pv", &pv, "--wait=false"]);
}

/// A Filesystem claim in `volumeDevices` refuses the containers with the kubelet's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filesystem_claim_as_a_device_is_refused_with_the_kubelets_message() {
    let (server, n, driver, _root) = joined_real_with_driver("csi-block-fs").await;
    let api = server.api();
    let ns = server.namespace();
    let node = n.node.clone();
    let pv = format!("{ns}-fs");
    create_claim_and_volume(&api, &ns, n.dir.path(), &pv, "fs", "vol-fs");
    wait_bound(&server, &n, "fs", &pv).await;
    create(
        &api,
        n.dir.path(),
        "wrong",
        &pod_with_device("wrong", &node, "fs"),
    );
    let message = wait_api("the container refused", &n, || {
        let p = api_pod(&server, "wrong")?;
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
