//! CSI volumes on a real containerd, end to end: nodelet joined to the real v1.37.2 control
//! plane (the first test: its PV controller binds the claim) or the API server fixture, the
//! project's CSI node driver (`nodelet-test-csi`, a separate process registering through
//! `<rootDir>/plugins_registry` as DaemonSet drivers do), and the real `kubectl`.

mod common;

use std::path::Path;
use std::time::Duration;

use common::csi::*;
use common::*;
use nodelet_testkit::tail;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_driver_serves_a_claim_that_outlives_its_pods() {
    let (server, n, _port, _certs) = join_real_with_kubelet_api("csi-claim", "");
    let api = server.api();
    let ns = server.namespace();
    let root = n.dir.path().join("root");
    let driver = Driver::start(&root, &n.dir.path().join("driver"), &[]);
    let node = n.node.clone();

    // Registration: the CSINode lists the driver with its node ID, topology key and count.
    let csinode = wait_api("the driver in the CSINode", &n, || {
        let j = kubectl_json(&api, &["get", "csinode", &node])?;
        let d = j["spec"]["drivers"].as_array()?.first()?.clone();
        (d["name"] == DRIVER).then_some(d)
    })
    .await;
    assert_eq!(csinode["nodeID"], "node-a", "{csinode}");
    assert_eq!(csinode["allocatable"]["count"], 7, "{csinode}");
    assert_eq!(
        csinode["topologyKeys"],
        serde_json::json!(["topology.nodelet.test/zone"])
    );
    let node_json = kubectl_json(&api, &["get", "node", &node]).unwrap();
    assert_eq!(
        node_json["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"],
        format!("{{\"{DRIVER}\":\"node-a\"}}"),
        "{}",
        driver.log()
    );

    create(&api, n.dir.path(), "csidriver", &csi_driver_yaml(false));
    // The PV's name is the cluster's: the test's own. The real PV controller binds the two.
    let pv = format!("{ns}-data");
    create_claim_and_volume(&api, &ns, n.dir.path(), &pv, "data", "vol-data");
    wait_bound(&server, &n, "data", &pv).await;

    // Two pods on one claim: staged once, published twice; the file one writes the other reads.
    for pod in ["writer", "reader"] {
        create(&api, n.dir.path(), pod, &pod_with_claim(pod, &node, "data"));
    }
    for pod in ["writer", "reader"] {
        wait_api(&format!("{pod} Running"), &n, || {
            (phase_of(&server, pod) == "Running").then_some(())
        })
        .await;
    }
    let (code, out) = exec(&server, "writer", "echo kept > /data/f && cat /data/f").await;
    assert_eq!((code, out.trim()), (0, "kept"));
    let (code, out) = exec(&server, "reader", "cat /data/f").await;
    assert_eq!((code, out.trim()), (0, "kept"));
    assert_eq!(
        driver.calls("NodeStageVolume"),
        1,
        "{:#?}",
        driver.journal()
    );
    assert_eq!(
        driver.calls("NodePublishVolume"),
        2,
        "{:#?}",
        driver.journal()
    );
    let publish = driver
        .journal()
        .into_iter()
        .find(|c| c["method"] == "NodePublishVolume")
        .unwrap();
    assert_eq!(publish["volume_context"]["color"], "blue", "{publish}");
    assert_eq!(
        publish["volume_context"]["csi.storage.k8s.io/pod.namespace"], ns,
        "{publish}"
    );

    // volumesInUse in the node status; the driver's capacity in the Summary API.
    let summary = wait_api("the volume's capacity in /stats/summary", &n, || {
        let (ok, out, _) = kubectl(
            &api,
            &[
                "get",
                "--raw",
                &format!("/api/v1/nodes/{node}/proxy/stats/summary"),
            ],
        );
        let j: Value = serde_json::from_str(&out).ok()?;
        let pods = j["pods"].as_array()?;
        let writer = pods.iter().find(|p| p["podRef"]["name"] == "writer")?;
        let v = writer["volume"]
            .as_array()?
            .iter()
            .find(|v| v["name"] == "data")?
            .clone();
        (ok && v["capacityBytes"].as_u64() == Some(CAPACITY)).then_some(v)
    })
    .await;
    assert_eq!(summary["pvcRef"]["name"], "data", "{summary}");
    assert_eq!(summary["pvcRef"]["namespace"], ns.as_str(), "{summary}");

    // The last pod out unstages; nothing stays mounted under the root directory.
    delete_and_wait(&server, &n, "writer").await;
    wait_api("writer unpublished", &n, || {
        (driver.calls("NodeUnpublishVolume") == 1).then_some(())
    })
    .await;
    assert_eq!(
        driver.calls("NodeUnstageVolume"),
        0,
        "{:#?}",
        driver.journal()
    );
    delete_and_wait(&server, &n, "reader").await;
    wait_api("the volume unstaged after the last pod", &n, || {
        (driver.calls("NodeUnstageVolume") == 1).then_some(())
    })
    .await;
    wait_api("nothing mounted under the root dir", &n, || {
        mounts_under(&root).is_empty().then_some(())
    })
    .await;

    // A new pod on the same claim reads what the first one wrote.
    create(
        &api,
        n.dir.path(),
        "again",
        &pod_with_claim("again", &node, "data"),
    );
    wait_api("again Running", &n, || {
        (phase_of(&server, "again") == "Running").then_some(())
    })
    .await;
    let (code, out) = exec(&server, "again", "cat /data/f").await;
    assert_eq!((code, out.trim()), (0, "kept"), "{}", tail(&n.logs(), 40));
    delete_and_wait(&server, &n, "again").await;
    wait_api("nothing mounted after the last pod", &n, || {
        mounts_under(&root).is_empty().then_some(())
    })
    .await;

    // The driver going away deregisters it.
    drop(driver);
    wait_api("the driver gone from the CSINode", &n, || {
        let j = kubectl_json(&api, &["get", "csinode", &node])?;
        j["spec"]["drivers"]
            .as_array()
            .is_none_or(|d| d.is_empty())
            .then_some(())
    })
    .await;
    server.kubectl(&["delete", "pv", &pv, "--wait=false"]);
}

/// The kubelet's wait for an unbound claim: the pod stays `ContainerCreating` with a
/// `FailedMount` event naming the claim, nothing is staged; bound, the pod runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbound_claim_keeps_the_pod_creating_until_it_is_bound() {
    let (fixture, n, driver, root) = joined_with_driver("csi-unbound", false).await;
    let api = fixture.url();
    create_claim_and_volume(&api, "default", n.dir.path(), "pv-late", "late", "vol-late");
    create(
        &api,
        n.dir.path(),
        "pod",
        &pod_with_claim("waiter", &n.node, "late"),
    );
    let event = wait_api("a FailedMount event for the unbound claim", &n, || {
        let j = kubectl_json(&api, &["get", "events", "-n", "default"])?;
        j["items"]
            .as_array()?
            .iter()
            .find(|e| e["involvedObject"]["name"] == "waiter" && e["reason"] == "FailedMount")
            .cloned()
    })
    .await;
    let message = event["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.contains("default/late") && message.contains("not bound"),
        "{message}"
    );
    let waiting = api_pod(&fixture, "waiter").and_then(|p| {
        p.status?
            .container_statuses?
            .first()?
            .state
            .clone()?
            .waiting?
            .reason
    });
    assert_eq!(waiting.as_deref(), Some("ContainerCreating"));
    assert_eq!(
        driver.calls("NodeStageVolume"),
        0,
        "{:#?}",
        driver.journal()
    );
    bind(&api, "late");
    wait_api("waiter Running once bound", &n, || {
        (phase_of(&fixture, "waiter") == "Running").then_some(())
    })
    .await;
    delete_and_wait(&fixture, &n, "waiter").await;
    wait_api("nothing mounted after the pod", &n, || {
        mounts_under(&root).is_empty().then_some(())
    })
    .await;
}

/// A restart of nodelet while a pod runs keeps the volume mounted (no second stage or
/// publish, the same container), and the mounts go with the pod afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_the_mounts_and_the_pods_delete_removes_them() {
    let (server, mut n, driver, root) = joined_real_with_driver("csi-restart").await;
    let api = server.api();
    let ns = server.namespace();
    // The PV's name is the cluster's: the test's own. The real PV controller binds the two.
    let pv = format!("{ns}-r");
    create_claim_and_volume(&api, &ns, n.dir.path(), &pv, "r", "vol-r");
    wait_bound(&server, &n, "r", &pv).await;
    create(
        &api,
        n.dir.path(),
        "pod",
        &pod_with_claim("keeper", &n.node, "r"),
    );
    wait_api("keeper Running", &n, || {
        (phase_of(&server, "keeper") == "Running").then_some(())
    })
    .await;
    let (code, _) = exec(&server, "keeper", "echo before > /data/f").await;
    assert_eq!(code, 0);
    let csi_mounts = |root: &Path| -> Vec<String> {
        mounts_under(root)
            .into_iter()
            .filter(|m| m.contains("kubernetes.io/csi/") || m.contains("kubernetes.io~csi/"))
            .collect()
    };
    let before = csi_mounts(&root);
    assert_eq!(before.len(), 2, "a global mount and a target: {before:?}");
    let container = api_pod(&server, "keeper")
        .unwrap()
        .status
        .unwrap()
        .container_statuses
        .unwrap()[0]
        .container_id
        .clone();

    n.restart();
    wait_api("the driver registered again", &n, || {
        let j = kubectl_json(&api, &["get", "csinode", &n.node])?;
        (j["spec"]["drivers"][0]["name"] == DRIVER).then_some(())
    })
    .await;
    // A positive sign the restarted nodelet synced the pod: a status written after the restart.
    n.wait_more_syncs(2, Duration::from_secs(90)).await;
    assert_eq!(csi_mounts(&root), before, "{}", tail(&n.logs(), 40));
    let (code, out) = exec(&server, "keeper", "cat /data/f").await;
    assert_eq!((code, out.trim()), (0, "before"));
    let now = api_pod(&server, "keeper")
        .unwrap()
        .status
        .unwrap()
        .container_statuses
        .unwrap()[0]
        .container_id
        .clone();
    assert_eq!(now, container, "the same container");
    assert_eq!(
        driver.calls("NodeStageVolume"),
        1,
        "{:#?}",
        driver.journal()
    );
    assert_eq!(
        driver.calls("NodePublishVolume"),
        1,
        "{:#?}",
        driver.journal()
    );

    // The claim grown while the pod runs, as the resize controller leaves it (the volume
    // larger, the claim's status asking the node): the node grows the filesystem and records
    // the new capacity on the claim.
    for (kind, name, subresource, patch) in [
        (
            "pv",
            pv.as_str(),
            None,
            r#"{"spec":{"capacity":{"storage":"2Gi"}}}"#,
        ),
        (
            "pvc",
            "r",
            Some("--subresource=status"),
            r#"{"status":{"allocatedResourceStatuses":{"storage":"NodeResizePending"},"allocatedResources":{"storage":"2Gi"}}}"#,
        ),
    ] {
        let mut args = vec!["patch", kind, name, "--type=merge", "-p", patch];
        args.extend(subresource);
        let (ok, out, err) = kubectl(&api, &args);
        assert!(ok, "{out}{err}");
    }
    let grown = wait_api("the claim's capacity after NodeExpandVolume", &n, || {
        let j = kubectl_json(&api, &["get", "pvc", "r"])?;
        (j["status"]["capacity"]["storage"] == "2Gi").then_some(j)
    })
    .await;
    assert!(
        grown["status"]["allocatedResourceStatuses"]["storage"].is_null(),
        "{grown}"
    );
    let expand = driver
        .journal()
        .into_iter()
        .find(|c| c["method"] == "NodeExpandVolume" && c["ok"] == true)
        .expect("a NodeExpandVolume call");
    assert!(
        expand.to_string().contains(&(2u64 << 30).to_string()),
        "{expand}"
    );
    wait_api("the FileSystemResizeSuccessful event", &n, || {
        let j = kubectl_json(&api, &["get", "events", "-n", &ns])?;
        j["items"]
            .as_array()?
            .iter()
            .any(|e| {
                e["involvedObject"]["name"] == "keeper"
                    && e["reason"] == "FileSystemResizeSuccessful"
            })
            .then_some(())
    })
    .await;

    delete_and_wait(&server, &n, "keeper").await;
    wait_api("unpublished and unstaged after the restart", &n, || {
        (driver.calls("NodeUnstageVolume") == 1 && mounts_under(&root).is_empty()).then_some(())
    })
    .await;
    assert_eq!(
        driver.calls("NodeUnpublishVolume"),
        1,
        "{:#?}",
        driver.journal()
    );
    server.kubectl(&["delete", "pv", &pv, "--wait=false"]);
}

/// An inline CSI volume (the CSIDriver allows `Ephemeral`): published without staging, with
/// the pod's information, writable, and gone with the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_csi_volume_is_published_for_the_pod_alone() {
    let (server, n, driver, root) = joined_real_with_driver("csi-inline").await;
    let api = server.api();
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: inline\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - name: scratch\n    csi:\n      driver: {DRIVER}\n      volumeAttributes: {{size: small}}\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n    volumeMounts:\n    - name: scratch\n      mountPath: /scratch\n",
        node = n.node
    );
    create(&api, n.dir.path(), "inline", &yaml);
    wait_api("inline Running", &n, || {
        (phase_of(&server, "inline") == "Running").then_some(())
    })
    .await;
    let (code, out) = exec(&server, "inline", "echo x > /scratch/f && cat /scratch/f").await;
    assert_eq!((code, out.trim()), (0, "x"));
    let publish = driver
        .journal()
        .into_iter()
        .find(|c| c["method"] == "NodePublishVolume")
        .unwrap();
    assert_eq!(
        publish["volume_context"]["csi.storage.k8s.io/ephemeral"], "true",
        "{publish}"
    );
    assert_eq!(
        publish["volume_context"]["csi.storage.k8s.io/pod.name"], "inline",
        "{publish}"
    );
    assert_eq!(publish["volume_context"]["size"], "small", "{publish}");
    assert!(
        publish["volume_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("csi-")),
        "{publish}"
    );
    assert_eq!(driver.calls("NodeStageVolume"), 0);
    delete_and_wait(&server, &n, "inline").await;
    wait_api("the inline volume unpublished", &n, || {
        (driver.calls("NodeUnpublishVolume") == 1 && mounts_under(&root).is_empty()).then_some(())
    })
    .await;
}

/// An attachable volume (the CSIDriver's `attachRequired`) waits for its VolumeAttachment,
/// gets the attachment's metadata as publish context, and is listed in `volumesInUse`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attachable_volume_waits_for_its_attachment_and_is_in_use() {
    let (fixture, n, driver, _root) = joined_with_driver("csi-attach", true).await;
    let api = fixture.url();
    create_claim_and_volume(&api, "default", n.dir.path(), "pv-a", "a", "vol-a");
    bind(&api, "a");
    create(
        &api,
        n.dir.path(),
        "pod",
        &pod_with_claim("attached", &n.node, "a"),
    );
    // The attach/detach controller's VolumeAttachment, under the kubelet's name for it.
    let name = {
        use sha2::Digest;
        format!(
            "csi-{}",
            hex::encode(sha2::Sha256::digest(format!("vol-a{DRIVER}{}", n.node)))
        )
    };
    wait_api("a FailedMount while the volume is not attached", &n, || {
        let j = kubectl_json(&api, &["get", "events", "-n", "default"])?;
        j["items"]
            .as_array()?
            .iter()
            .any(|e| e["involvedObject"]["name"] == "attached" && e["reason"] == "FailedMount")
            .then_some(())
    })
    .await;
    assert_eq!(driver.calls("NodeStageVolume"), 0);
    // The attach/detach controller's two records: the Node's volumesAttached and the
    // VolumeAttachment's status.
    let unique = format!("kubernetes.io/csi/{DRIVER}^vol-a");
    let attached =
        format!(r#"{{"status":{{"volumesAttached":[{{"name":"{unique}","devicePath":""}}]}}}}"#);
    let (ok, out, err) = kubectl(
        &api,
        &[
            "patch",
            "node",
            &n.node,
            "--subresource=status",
            "--type=merge",
            "-p",
            &attached,
        ],
    );
    assert!(ok, "{out}{err}");
    create(
        &api,
        n.dir.path(),
        "va",
        &format!("apiVersion: storage.k8s.io/v1\nkind: VolumeAttachment\nmetadata:\n  name: {name}\nspec:\n  attacher: {DRIVER}\n  nodeName: {node}\n  source: {{persistentVolumeName: pv-a}}\n", node = n.node),
    );
    let (ok, out, err) = kubectl(
        &api,
        &[
            "patch",
            "volumeattachment",
            &name,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"attached":true,"attachmentMetadata":{"lun":"3"}}}"#,
        ],
    );
    assert!(ok, "{out}{err}");
    wait_api("attached Running", &n, || {
        (phase_of(&fixture, "attached") == "Running").then_some(())
    })
    .await;
    let stage = driver
        .journal()
        .into_iter()
        .find(|c| c["method"] == "NodeStageVolume")
        .unwrap();
    assert_eq!(stage["publish_context"]["lun"], "3", "{stage}");
    wait_api("the volume in volumesInUse", &n, || {
        let j = kubectl_json(&api, &["get", "node", &n.node])?;
        j["status"]["volumesInUse"]
            .as_array()?
            .iter()
            .any(|v| v == unique.as_str())
            .then_some(())
    })
    .await;
    delete_and_wait(&fixture, &n, "attached").await;
    wait_api("volumesInUse empty after the pod", &n, || {
        let j = kubectl_json(&api, &["get", "node", &n.node])?;
        j["status"]["volumesInUse"]
            .as_array()
            .is_none_or(|v| v.is_empty())
            .then_some(())
    })
    .await;
}

/// A generic ephemeral volume: the pod waits for the claim `<pod>-<volume>` the control plane
/// makes for it, owned by the pod, then runs with it; the volume goes with the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generic_ephemeral_volume_uses_the_claim_made_for_the_pod() {
    let (fixture, n, driver, root) = joined_with_driver("csi-ephemeral", false).await;
    let api = fixture.url();
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: eph\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - name: scratch\n    ephemeral:\n      volumeClaimTemplate:\n        spec:\n          accessModes: [ReadWriteOnce]\n          resources: {{requests: {{storage: 1Gi}}}}\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n    volumeMounts:\n    - name: scratch\n      mountPath: /scratch\n",
        node = n.node
    );
    create(&api, n.dir.path(), "eph", &yaml);
    wait_api("a FailedMount while the claim does not exist", &n, || {
        let j = kubectl_json(&api, &["get", "events", "-n", "default"])?;
        j["items"]
            .as_array()?
            .iter()
            .any(|e| e["involvedObject"]["name"] == "eph" && e["reason"] == "FailedMount")
            .then_some(())
    })
    .await;
    let uid = api_pod(&fixture, "eph").unwrap().metadata.uid.unwrap();
    let owner = format!(
        "  ownerReferences:\n  - {{apiVersion: v1, kind: Pod, name: eph, uid: {uid}, controller: true, blockOwnerDeletion: true}}\n"
    );
    create_owned_claim_and_volume(
        &api,
        "default",
        n.dir.path(),
        "pv-eph",
        "eph-scratch",
        "vol-eph",
        &owner,
    );
    bind(&api, "eph-scratch");
    wait_api("eph Running with its claim", &n, || {
        (phase_of(&fixture, "eph") == "Running").then_some(())
    })
    .await;
    let (code, out) = exec(&fixture, "eph", "echo e > /scratch/f && cat /scratch/f").await;
    assert_eq!((code, out.trim()), (0, "e"));
    assert_eq!(
        driver.calls("NodePublishVolume"),
        1,
        "{:#?}",
        driver.journal()
    );
    delete_and_wait(&fixture, &n, "eph").await;
    wait_api("the ephemeral volume torn down", &n, || {
        (driver.calls("NodeUnstageVolume") == 1 && mounts_under(&root).is_empty()).then_some(())
    })
    .await;
}
