//! CSI volumes on a real containerd, end to end: nodelet joined to the real v1.37.2 control
//! plane (its PV controller binds the claims, its attach/detach and ephemeral-volume controllers
//! make VolumeAttachments and claims), the
//! project's CSI node driver (`nodelet-test-csi`, a separate process registering through
//! `<rootDir>/plugins_registry` as DaemonSet drivers do), and the real `kubectl`.

mod common;

use std::path::Path;
use std::time::Duration;

use common::csi::*;
use common::*;
use nodelet_testkit::tail;
use serde_json::Value;

/// The test driver's name where its CSIDriver object says `attachRequired: true`.
const ATTACHABLE: &str = "attach.csi.nodelet.test";

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
/// `FailedMount` event naming the claim, nothing is staged; once the volume appears and the
/// real PV controller binds the claim to it, the pod runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbound_claim_keeps_the_pod_creating_until_it_is_bound() {
    let (server, n, driver, root) = joined_real_with_driver("csi-unbound").await;
    let api = server.api();
    let ns = server.namespace();
    // The claim names a volume that does not exist yet: the PV controller leaves it Pending.
    let pv = format!("{ns}-late");
    let uid = create_claim(&api, &ns, n.dir.path(), "late", &pv, "");
    create(
        &api,
        n.dir.path(),
        "pod",
        &pod_with_claim("waiter", &n.node, "late"),
    );
    let event = wait_failed_mount(&api, &n, "waiter").await;
    let message = event["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.contains(&format!("{ns}/late")) && message.contains("not bound"),
        "{message}"
    );
    let waiting = api_pod(&server, "waiter").and_then(|p| {
        p.status?
            .container_statuses?
            .first()?
            .state
            .clone()?
            .waiting?
            .reason
    });
    assert_eq!(waiting.as_deref(), Some("ContainerCreating"));
    let claim = kubectl_json(&api, &["get", "pvc", "late"]).unwrap();
    assert_eq!(claim["status"]["phase"], "Pending", "{claim}");
    assert_eq!(
        driver.calls("NodeStageVolume"),
        0,
        "{:#?}",
        driver.journal()
    );
    create_volume(
        &api,
        n.dir.path(),
        &pv,
        (&ns, "late", &uid),
        DRIVER,
        "vol-late",
    );
    wait_bound(&server, &n, "late", &pv).await;
    wait_api("waiter Running once bound", &n, || {
        (phase_of(&server, "waiter") == "Running").then_some(())
    })
    .await;
    delete_and_wait(&server, &n, "waiter").await;
    wait_api("nothing mounted after the pod", &n, || {
        mounts_under(&root).is_empty().then_some(())
    })
    .await;
    server.kubectl(&["delete", "pv", &pv, "--wait=false"]);
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

/// An attachable volume (the CSIDriver's `attachRequired`): the real attach/detach controller
/// makes the VolumeAttachment; until the attacher (the test, in the CSI external-attacher's
/// place) reports it attached, the pod waits with a `FailedMount`; then the controller records
/// it in the Node's `volumesAttached`, the attachment's metadata is the publish context, and the
/// volume is in `volumesInUse` until the pod is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attachable_volume_waits_for_its_attachment_and_is_in_use() {
    let server = RealServer::start("csi-attach");
    let api = server.api();
    let ns = server.namespace();
    let n = Nodelet::start_in_real_cluster("csi-attach", &server, "");
    // A CSIDriver with `attachRequired` is the cluster's: under a name no other test uses.
    let driver = Driver::start_named(
        ATTACHABLE,
        &n.dir.path().join("root"),
        &n.dir.path().join("driver"),
        &[],
    );
    let node = n.node.clone();
    wait_registered(&api, &n, ATTACHABLE).await;
    create(
        &api,
        n.dir.path(),
        "csidriver",
        &csi_driver_object(ATTACHABLE, true),
    );
    let pv = format!("{ns}-a");
    // The handle is the test's own: the VolumeAttachment's name is made of it.
    let handle = format!("vol-{ns}");
    let uid = create_claim(&api, &ns, n.dir.path(), "a", &pv, "");
    create_volume(
        &api,
        n.dir.path(),
        &pv,
        (&ns, "a", &uid),
        ATTACHABLE,
        &handle,
    );
    wait_bound(&server, &n, "a", &pv).await;
    create(
        &api,
        n.dir.path(),
        "pod",
        &pod_with_claim("attached", &node, "a"),
    );
    // The attach/detach controller's VolumeAttachment, under the name the kubelet expects.
    let name = {
        use sha2::Digest;
        format!(
            "csi-{}",
            hex::encode(sha2::Sha256::digest(format!("{handle}{ATTACHABLE}{node}")))
        )
    };
    let va = wait_api("the controller's VolumeAttachment", &n, || {
        kubectl_json(&api, &["get", "volumeattachment", &name])
    })
    .await;
    assert_eq!(va["spec"]["attacher"], ATTACHABLE, "{va}");
    assert_eq!(va["spec"]["nodeName"], node.as_str(), "{va}");
    assert_eq!(
        va["spec"]["source"]["persistentVolumeName"],
        pv.as_str(),
        "{va}"
    );
    // While the volume is not attached.
    wait_failed_mount(&api, &n, "attached").await;
    assert_eq!(driver.calls("NodeStageVolume"), 0);
    // The external attacher's part: the attachment done, with metadata for the node.
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
    let unique = format!("kubernetes.io/csi/{ATTACHABLE}^{handle}");
    wait_api("the controller's volumesAttached on the Node", &n, || {
        let j = kubectl_json(&api, &["get", "node", &node])?;
        j["status"]["volumesAttached"]
            .as_array()?
            .iter()
            .any(|v| v["name"] == unique.as_str())
            .then_some(())
    })
    .await;
    wait_api("attached Running", &n, || {
        (phase_of(&server, "attached") == "Running").then_some(())
    })
    .await;
    let stage = driver
        .journal()
        .into_iter()
        .find(|c| c["method"] == "NodeStageVolume")
        .unwrap();
    assert_eq!(stage["publish_context"]["lun"], "3", "{stage}");
    wait_api("the volume in volumesInUse", &n, || {
        let j = kubectl_json(&api, &["get", "node", &node])?;
        j["status"]["volumesInUse"]
            .as_array()?
            .iter()
            .any(|v| v == unique.as_str())
            .then_some(())
    })
    .await;
    delete_and_wait(&server, &n, "attached").await;
    wait_api("volumesInUse empty after the pod", &n, || {
        let j = kubectl_json(&api, &["get", "node", &node])?;
        j["status"]["volumesInUse"]
            .as_array()
            .is_none_or(|v| v.is_empty())
            .then_some(())
    })
    .await;
    // Only then may the controller detach: it deletes the VolumeAttachment.
    wait_api("the VolumeAttachment deleted by the controller", &n, || {
        let (ok, out, err) = kubectl(&api, &["get", "volumeattachment", &name]);
        (!ok && format!("{out}{err}").contains("NotFound")).then_some(())
    })
    .await;
    server.kubectl(&["delete", "pv", &pv, "--wait=false"]);
}

/// A generic ephemeral volume: the real ephemeral-volume controller makes the claim
/// `<pod>-<volume>`, owned by the pod; the pod waits for it to be bound (the test plays the
/// provisioner, the real PV controller binds), then runs with it; the volume goes with the pod,
/// and the claim with it (the garbage collector).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generic_ephemeral_volume_uses_the_claim_made_for_the_pod() {
    let (server, n, driver, root) = joined_real_with_driver("csi-ephemeral").await;
    let api = server.api();
    let ns = server.namespace();
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: eph\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - name: scratch\n    ephemeral:\n      volumeClaimTemplate:\n        spec:\n          accessModes: [ReadWriteOnce]\n          storageClassName: \"\"\n          resources: {{requests: {{storage: 1Gi}}}}\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n    volumeMounts:\n    - name: scratch\n      mountPath: /scratch\n",
        node = n.node
    );
    create(&api, n.dir.path(), "eph", &yaml);
    let uid = api_pod(&server, "eph").unwrap().metadata.uid.unwrap();
    let claim = wait_api("the claim the controller made for the pod", &n, || {
        kubectl_json(&api, &["get", "pvc", "eph-scratch"])
    })
    .await;
    let owner = &claim["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            &owner["kind"],
            &owner["name"],
            &owner["uid"],
            &owner["controller"]
        ),
        (
            &Value::from("Pod"),
            &Value::from("eph"),
            &Value::from(uid.as_str()),
            &Value::from(true)
        ),
        "{claim}"
    );
    // While the claim is not bound.
    wait_failed_mount(&api, &n, "eph").await;
    assert_eq!(driver.calls("NodeStageVolume"), 0);
    let pv = format!("{ns}-eph");
    let claim_uid = claim["metadata"]["uid"].as_str().unwrap();
    create_volume(
        &api,
        n.dir.path(),
        &pv,
        (&ns, "eph-scratch", claim_uid),
        DRIVER,
        "vol-eph",
    );
    wait_bound(&server, &n, "eph-scratch", &pv).await;
    wait_api("eph Running with its claim", &n, || {
        (phase_of(&server, "eph") == "Running").then_some(())
    })
    .await;
    let (code, out) = exec(&server, "eph", "echo e > /scratch/f && cat /scratch/f").await;
    assert_eq!((code, out.trim()), (0, "e"));
    assert_eq!(
        driver.calls("NodePublishVolume"),
        1,
        "{:#?}",
        driver.journal()
    );
    delete_and_wait(&server, &n, "eph").await;
    wait_api("the ephemeral volume torn down", &n, || {
        (driver.calls("NodeUnstageVolume") == 1 && mounts_under(&root).is_empty()).then_some(())
    })
    .await;
    wait_api("the claim deleted with its pod", &n, || {
        let (ok, out, err) = kubectl(&api, &["get", "pvc", "eph-scratch"]);
        (!ok && format!("{out}{err}").contains("NotFound")).then_some(())
    })
    .await;
    server.kubectl(&["delete", "pv", &pv, "--wait=false"]);
}

/// The test driver under this name hangs in every NodePublishVolume (`--hang-publish`).
const HUNG: &str = "hang.csi.nodelet.test";

/// A pod of `node` with an inline CSI volume of `driver` (none: no volume at all).
fn inline_pod(name: &str, node: &str, driver: Option<&str>) -> String {
    let (volumes, mounts) = match driver {
        Some(driver) => (
            format!("  volumes:\n  - name: scratch\n    csi:\n      driver: {driver}\n      volumeAttributes: {{size: small}}\n"),
            "    volumeMounts:\n    - name: scratch\n      mountPath: /scratch\n",
        ),
        None => (String::new(), ""),
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 1\n{volumes}  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n{mounts}"
    )
}

/// A second driver process hangs in NodePublishVolume (issue 40): its pod waits in
/// ContainerCreating, and meanwhile a pod with a volume of the working driver and a pod without
/// volumes start, run and are deleted as usual (before this, one CSI manager lock held across
/// the hung call stopped every other mount and every pod's removal). The hung call ends at the
/// kubelet's 2-minute CSI timeout, after this test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_hung_in_a_publish_holds_up_only_its_own_volume() {
    let (server, n, driver, root) = joined_real_with_driver("csi-hung").await;
    let api = server.api();
    let hung = Driver::start_named(
        HUNG,
        &root,
        &n.dir.path().join("hung-driver"),
        &["--hang-publish"],
    );
    create(
        &api,
        n.dir.path(),
        "hung-csidriver",
        &csi_driver_object(HUNG, false),
    );
    let node = n.node.clone();
    wait_api("both drivers registered", &n, || {
        let j = kubectl_json(&api, &["get", "csinode", &node])?;
        let names: Vec<&str> = j["spec"]["drivers"]
            .as_array()?
            .iter()
            .filter_map(|d| d["name"].as_str())
            .collect();
        (names.contains(&DRIVER) && names.contains(&HUNG)).then_some(())
    })
    .await;

    create(
        &api,
        n.dir.path(),
        "stuck",
        &inline_pod("stuck", &node, Some(HUNG)),
    );
    // Journaled as received (the call never ends, so never `ok`).
    let publishes = |d: &Driver| {
        d.journal()
            .iter()
            .filter(|c| c["method"] == "NodePublishVolume")
            .count()
    };
    wait_api("the hung driver asked to publish", &n, || {
        (publishes(&hung) == 1).then_some(())
    })
    .await;

    // Meanwhile, the rest of the node goes on.
    create(
        &api,
        n.dir.path(),
        "fine",
        &inline_pod("fine", &node, Some(DRIVER)),
    );
    create(
        &api,
        n.dir.path(),
        "plain",
        &inline_pod("plain", &node, None),
    );
    for pod in ["fine", "plain"] {
        wait_api(&format!("{pod} Running"), &n, || {
            (phase_of(&server, pod) == "Running").then_some(())
        })
        .await;
    }
    let (code, out) = exec(&server, "fine", "echo x > /scratch/f && cat /scratch/f").await;
    assert_eq!((code, out.trim()), (0, "x"));
    for pod in ["fine", "plain"] {
        delete_and_wait(&server, &n, pod).await;
    }
    wait_api("the working driver's volume unpublished", &n, || {
        (driver.calls("NodeUnpublishVolume") == 1).then_some(())
    })
    .await;

    // The hung pod still waits for its volume (the call is within its 2-minute timeout).
    assert_eq!(phase_of(&server, "stuck"), "Pending");
    assert_eq!(
        publishes(&hung),
        1,
        "the publish was asked again while the first one hung\n{}",
        tail(&n.logs(), 30)
    );
    assert_no_runtime_stalls(&n).await;
}
