//! The real kubectl (v1.32, /usr/bin/kubectl) against the fixture.

mod common;

use apiserver_fixture::Fixture;
use common::{kubectl, kubectl_ok, manifest, resource_requests, POD_YAML};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Node, NodeCondition, NodeStatus, ObjectReference, Pod, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_get_wide_and_yaml() {
    let fixture = Fixture::start(None).await.unwrap();
    let (_dir, path) = manifest(POD_YAML);
    let out = kubectl_ok(&fixture, &["apply", "-f", &path]).await;
    assert_eq!(out.trim(), "pod/web created");

    let wide = kubectl_ok(&fixture, &["get", "pods", "-o", "wide"]).await;
    let mut lines = wide.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header[..5], ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    assert!(header.contains(&"NODE"), "{wide}");
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row[..4], ["web", "0/1", "Pending", "0"]);
    assert!(row.contains(&"node-1"), "{wide}");

    let yaml = kubectl_ok(&fixture, &["get", "pod", "web", "-o", "yaml"]).await;
    for expected in [
        "terminationGracePeriodSeconds: 30",
        "restartPolicy: Always",
        "imagePullPolicy: IfNotPresent",
        "phase: Pending",
        "qosClass: BestEffort",
        "generation: 1",
        "kubectl.kubernetes.io/last-applied-configuration",
    ] {
        assert!(yaml.contains(expected), "{expected:?} missing from\n{yaml}");
    }

    // kubectl validated on the server (no --validate=false needed): one POST with fieldValidation=Strict.
    let posts: Vec<_> = resource_requests(&fixture)
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].path, "/api/v1/namespaces/default/pods");
    assert_eq!(
        posts[0].query_param("fieldValidation").as_deref(),
        Some("Strict")
    );
    assert_eq!(posts[0].status, 201);

    // A second apply with a new image patches (strategic merge) and bumps the generation.
    let (_dir2, path2) = manifest(&POD_YAML.replace("nginx:1.27", "nginx:1.28"));
    assert_eq!(
        kubectl_ok(&fixture, &["apply", "-f", &path2]).await.trim(),
        "pod/web configured"
    );
    let pod: Pod = fixture.get(Some("default"), "web").unwrap().unwrap();
    assert_eq!(
        pod.spec.unwrap().containers[0].image.as_deref(),
        Some("nginx:1.28")
    );
    assert_eq!(pod.metadata.generation, Some(2));
    let patch = fixture
        .request_log()
        .into_iter()
        .find(|r| r.method == "PATCH")
        .unwrap();
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_rejects_unknown_fields_and_bad_pods() {
    let fixture = Fixture::start(None).await.unwrap();
    let (_d1, typo) = manifest(&POD_YAML.replace(
        "    image: nginx:1.27",
        "    image: nginx:1.27\n    imagePulPolicy: Never",
    ));
    let out = kubectl(&fixture, &["apply", "-f", &typo]).await;
    assert!(!out.success);
    assert!(
        out.stderr.contains(
            r#"strict decoding error: unknown field "spec.containers[0].imagePulPolicy""#
        ),
        "{}",
        out.stderr
    );

    let (_d2, no_image) = manifest(&POD_YAML.replace("    image: nginx:1.27\n", ""));
    let out = kubectl(&fixture, &["apply", "-f", &no_image]).await;
    assert!(!out.success);
    assert!(
        out.stderr
            .contains(r#"Pod "web" is invalid: spec.containers[0].image: Required value"#),
        "{}",
        out.stderr
    );
    assert!(fixture
        .get::<Pod>(Some("default"), "web")
        .unwrap()
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_events_and_leases() {
    let fixture = Fixture::start(None).await.unwrap();
    let node = Node {
        metadata: ObjectMeta {
            name: Some("node-1".into()),
            ..Default::default()
        },
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    fixture.create(&node).unwrap();
    let event = Event {
        metadata: ObjectMeta {
            name: Some("web.1".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            kind: Some("Pod".into()),
            name: Some("web".into()),
            ..Default::default()
        },
        reason: Some("Started".into()),
        message: Some("Started container app".into()),
        type_: Some("Normal".into()),
        ..Default::default()
    };
    fixture.create(&event).unwrap();
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("node-1".into()),
            namespace: Some("kube-node-lease".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("node-1".into()),
            lease_duration_seconds: Some(40),
            ..Default::default()
        }),
    };
    fixture.create(&lease).unwrap();

    let nodes = kubectl_ok(&fixture, &["get", "nodes"]).await;
    let row: Vec<&str> = nodes.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..3], ["node-1", "Ready", "<none>"], "{nodes}");

    let events = kubectl_ok(&fixture, &["get", "events"]).await;
    assert!(
        events.contains("Started")
            && events.contains("pod/web")
            && events.contains("Started container app"),
        "{events}"
    );

    let leases = kubectl_ok(&fixture, &["get", "lease", "-n", "kube-node-lease"]).await;
    let row: Vec<&str> = leases.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..2], ["node-1", "node-1"], "{leases}");

    // The same event through events.k8s.io/v1.
    let grouped = kubectl_ok(
        &fixture,
        &[
            "get",
            "events.v1.events.k8s.io",
            "web.1",
            "-o",
            "jsonpath={.note} {.regarding.name}",
        ],
    )
    .await;
    assert_eq!(grouped, "Started container app web");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_configmap_and_secret() {
    let fixture = Fixture::start(None).await.unwrap();
    kubectl_ok(
        &fixture,
        &["create", "configmap", "cfg", "--from-literal=a=1"],
    )
    .await;
    kubectl_ok(
        &fixture,
        &[
            "create",
            "secret",
            "generic",
            "s1",
            "--from-literal=password=hunter2",
        ],
    )
    .await;
    kubectl_ok(&fixture, &["create", "namespace", "team-a"]).await;
    let cm: ConfigMap = fixture.get(Some("default"), "cfg").unwrap().unwrap();
    assert_eq!(cm.data.unwrap()["a"], "1");
    let secret: Secret = fixture.get(Some("default"), "s1").unwrap().unwrap();
    assert_eq!(secret.data.unwrap()["password"].0, b"hunter2");
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    let listed = kubectl_ok(&fixture, &["get", "cm,secret,ns"]).await;
    for name in ["configmap/cfg", "secret/s1", "namespace/team-a"] {
        assert!(listed.contains(name), "{name} missing from\n{listed}");
    }
    // kubectl's typed clients post protobuf; the log shows the decoded object.
    let post = fixture
        .request_log()
        .into_iter()
        .find(|r| r.path == "/api/v1/namespaces/default/configmaps")
        .unwrap();
    assert_eq!(
        post.content_type.as_deref(),
        Some("application/vnd.kubernetes.protobuf")
    );
    assert_eq!(post.body.unwrap()["data"], json!({"a": "1"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_delete_then_final_delete_with_uid_precondition() {
    let fixture = Fixture::start(None).await.unwrap();
    let (_dir, path) = manifest(POD_YAML);
    kubectl_ok(&fixture, &["apply", "-f", &path]).await;
    let out = kubectl_ok(
        &fixture,
        &["delete", "pod", "web", "--grace-period=5", "--wait=false"],
    )
    .await;
    assert_eq!(out.trim(), r#"pod "web" deleted"#);

    let pod: Pod = fixture
        .get(Some("default"), "web")
        .unwrap()
        .expect("a bound pod stays until the node agent deletes it");
    let uid = pod.metadata.uid.clone().unwrap();
    assert!(pod.metadata.deletion_timestamp.is_some());
    assert_eq!(pod.metadata.deletion_grace_period_seconds, Some(5));
    assert_eq!(pod.metadata.generation, Some(2));
    let listed = kubectl_ok(&fixture, &["get", "pods"]).await;
    assert!(listed.contains("Terminating"), "{listed}");

    // A wrong UID is a Conflict with the API server's message.
    let client = common::http();
    let url = format!("{}/api/v1/namespaces/default/pods/web", fixture.url());
    let response = client
        .delete(&url)
        .json(&json!({"gracePeriodSeconds": 0, "preconditions": {"uid": "not-the-uid"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 409);
    let status: serde_json::Value = response.json().await.unwrap();
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(
        status["message"],
        format!("Operation cannot be fulfilled on Pod \"web\": the UID in the precondition (not-the-uid) does not match the UID in record ({uid}). The object might have been deleted and then recreated")
    );

    // The node agent's final delete removes it.
    fixture.clear_log();
    let response = client
        .delete(&url)
        .json(&json!({"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(fixture
        .get::<Pod>(Some("default"), "web")
        .unwrap()
        .is_none());
    let deletes: Vec<_> = fixture
        .request_log()
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .collect();
    assert_eq!(deletes.len(), 1);
    assert_eq!(deletes[0].path, "/api/v1/namespaces/default/pods/web");
    let body = deletes[0].body.clone().unwrap();
    assert_eq!(body["gracePeriodSeconds"], 0);
    assert_eq!(body["preconditions"]["uid"], uid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_waits_for_the_final_delete() {
    let fixture = Fixture::start(None).await.unwrap();
    let (_dir, path) = manifest(POD_YAML);
    kubectl_ok(&fixture, &["apply", "-f", &path]).await;
    let url = fixture.url();
    let waiting = tokio::spawn(async move {
        tokio::process::Command::new(common::KUBECTL)
            .env("KUBECONFIG", "/dev/null")
            .env("HOME", std::env::temp_dir())
            .args([
                "--server",
                &url,
                "delete",
                "pod",
                "web",
                "--grace-period=30",
                "--timeout=60s",
            ])
            .output()
            .await
            .unwrap()
    });
    // Wait until kubectl's graceful DELETE arrived, then act as the node agent.
    let mut uid = None;
    let deleting = common::eventually(common::KUBECTL_LIMIT, || {
        uid = fixture
            .get::<Pod>(Some("default"), "web")
            .unwrap()
            .filter(|pod| pod.metadata.deletion_timestamp.is_some())
            .and_then(|pod| pod.metadata.uid);
        uid.is_some()
    })
    .await;
    assert!(deleting, "kubectl sent the graceful delete");
    let uid = uid.unwrap();
    // kubectl lists the pod, then watches it by name; the final delete must come after the
    // watch is open, or kubectl sees the pod already gone and never watches.
    let watching = |fixture: &Fixture| {
        fixture.request_log().iter().any(|r| {
            r.is_watch() && r.query_param("fieldSelector").as_deref() == Some("metadata.name=web")
        })
    };
    assert!(
        common::eventually(common::KUBECTL_LIMIT, || watching(&fixture)).await,
        "kubectl waits with a watch on the pod's name"
    );
    assert!(
        !waiting.is_finished(),
        "kubectl must wait while the pod terminates"
    );
    let options = apiserver_fixture::DeleteOptions {
        grace_period_seconds: Some(0),
        preconditions: Some(apiserver_fixture::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    fixture
        .delete::<Pod>(Some("default"), "web", &options)
        .unwrap();
    let output = tokio::time::timeout(common::KUBECTL_LIMIT, waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        r#"pod "web" deleted"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_delete_and_finalizers() {
    let fixture = Fixture::start(None).await.unwrap();
    let (_dir, path) = manifest(POD_YAML);
    kubectl_ok(&fixture, &["apply", "-f", &path]).await;
    let out = kubectl(
        &fixture,
        &["delete", "pod", "web", "--force", "--grace-period=0"],
    )
    .await;
    assert!(out.success, "{}", out.stderr);
    assert!(fixture
        .get::<Pod>(Some("default"), "web")
        .unwrap()
        .is_none());

    // With a finalizer the pod outlives even the final delete.
    let with_finalizer = POD_YAML.replace(
        "  labels:\n",
        "  finalizers:\n  - example.com/hold\n  labels:\n",
    );
    let (_d2, path2) = manifest(&with_finalizer);
    kubectl_ok(&fixture, &["apply", "-f", &path2]).await;
    kubectl_ok(
        &fixture,
        &[
            "delete",
            "pod",
            "web",
            "--grace-period=0",
            "--force",
            "--wait=false",
        ],
    )
    .await;
    let pod: Pod = fixture
        .get(Some("default"), "web")
        .unwrap()
        .expect("finalizers keep the pod");
    assert!(pod.metadata.deletion_timestamp.is_some());
    assert_eq!(pod.metadata.deletion_grace_period_seconds, Some(0));
    // Removing the last finalizer removes it.
    kubectl_ok(
        &fixture,
        &[
            "patch",
            "pod",
            "web",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
    )
    .await;
    assert!(fixture
        .get::<Pod>(Some("default"), "web")
        .unwrap()
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_survives_stop_and_resume() {
    let fixture = Fixture::start(None).await.unwrap();
    kubectl_ok(
        &fixture,
        &["create", "configmap", "cfg", "--from-literal=a=1"],
    )
    .await;
    let rv = fixture.resource_version();
    fixture.stop().await;
    let out = kubectl(
        &fixture,
        &["get", "configmap", "cfg", "--request-timeout=2s"],
    )
    .await;
    assert!(!out.success, "the API server is down");
    fixture.resume().await.unwrap();
    let got = kubectl_ok(
        &fixture,
        &[
            "get",
            "configmap",
            "cfg",
            "-o",
            "jsonpath={.data.a} {.metadata.resourceVersion}",
        ],
    )
    .await;
    assert_eq!(got, format!("1 {rv}"));
    assert_eq!(fixture.resource_version(), rv);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_prints_rows_like_a_real_cluster() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let fixture = Fixture::start(None).await.unwrap();
    let (_dir, path) = manifest(POD_YAML);
    kubectl_ok(&fixture, &["apply", "-f", &path]).await;
    let mut child = tokio::process::Command::new(common::KUBECTL)
        .env("KUBECONFIG", "/dev/null")
        .env("HOME", std::env::temp_dir())
        .args(["--server", &fixture.url(), "get", "pods", "-w"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + common::KUBECTL_LIMIT;
    while let Ok(Ok(Some(line))) = tokio::time::timeout_at(deadline, lines.next_line()).await {
        seen.push(
            line.split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>(),
        );
        if seen.len() == 2 {
            // The initial list printed; now a graceful delete shows up as a Terminating row.
            fixture
                .delete::<Pod>(
                    Some("default"),
                    "web",
                    &apiserver_fixture::DeleteOptions::default(),
                )
                .unwrap();
        }
        if seen
            .last()
            .is_some_and(|row| row.contains(&"Terminating".to_string()))
        {
            break;
        }
    }
    child.kill().await.unwrap();
    assert!(
        seen.len() >= 3,
        "kubectl printed the header, the pod and its deletion: {seen:?}"
    );
    assert_eq!(seen[0][..3], ["NAME", "READY", "STATUS"]);
    assert_eq!(seen[1][..3], ["web", "0/1", "Pending"]);
    let last = seen.last().unwrap();
    assert_eq!(last[..3], ["web", "0/1", "Terminating"], "{seen:?}");
}
