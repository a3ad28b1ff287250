//! Cluster mode on a real containerd and the real v1.37.2 control plane: pods get the
//! `kube-api-access-*` volume the API server's ServiceAccount admission plugin adds, and nodelet
//! fills it with a token bound to the pod (a TokenRequest the Node authorizer allows for pods on
//! the node; the token signed by the API server and accepted by its TokenReview), the cluster CA
//! bundle (the controller-manager's `kube-root-ca.crt`) and the namespace, as the kubelet does.

mod common;

use std::time::{Duration, Instant};

use apiserver_fixture::serviceaccount::{token_claims, TOKEN_MOUNT_PATH};
use common::*;
use k8s_openapi::api::core::v1::Pod;
use nodelet::cri::Runtime;
use nodelet_testkit::tail;

const T: Duration = Duration::from_secs(90);

fn running_pod(server: &RealServer, namespace: &str, name: &str) -> Option<Pod> {
    let pod: Pod = server.object(Some(namespace), name)?;
    let phase = pod.status.as_ref()?.phase.as_deref()?;
    (phase == "Running").then_some(pod)
}

async fn wait_running(server: &RealServer, n: &Nodelet, namespace: &str, name: &str) -> Pod {
    let deadline = Instant::now() + T;
    loop {
        if let Some(p) = running_pod(server, namespace, name) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {namespace}/{name} Running\n{}",
            tail(&n.logs(), 60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs a shell command in the pod's first container; stdout, trimmed.
async fn exec(pod: &Pod, cmd: &str) -> String {
    let id = pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
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
    String::from_utf8_lossy(&r.stdout).trim().to_string()
}

fn pod_yaml(name: &str, namespace: &str, node: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 2\n{extra_spec}  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_volume_reaches_the_container() {
    let server = RealServer::start("satoken");
    let api = server.api();
    let team = server.namespace();
    let n = Nodelet::start_in_real_cluster("satoken", &server, "");
    kubectl_apply(
        &api,
        n.dir.path(),
        "app",
        &pod_yaml("app", &team, &n.node, ""),
    );
    kubectl_apply(
        &api,
        n.dir.path(),
        "quiet",
        &pod_yaml(
            "quiet",
            &team,
            &n.node,
            "  automountServiceAccountToken: false\n",
        ),
    );

    let app = wait_running(&server, &n, &team, "app").await;
    let uid = app.metadata.uid.clone().unwrap();
    assert_eq!(
        exec(&app, &format!("cat {TOKEN_MOUNT_PATH}/namespace")).await,
        team
    );
    assert_eq!(
        exec(&app, &format!("ls {TOKEN_MOUNT_PATH}")).await,
        "ca.crt\nnamespace\ntoken"
    );
    assert!(exec(&app, &format!("cat {TOKEN_MOUNT_PATH}/ca.crt"))
        .await
        .starts_with("-----BEGIN CERTIFICATE-----"));
    let token = exec(&app, &format!("cat {TOKEN_MOUNT_PATH}/token")).await;
    let claims = token_claims(&token).unwrap_or_else(|| panic!("not a JWT: {token:?}"));
    assert_eq!(
        claims["sub"],
        format!("system:serviceaccount:{team}:default")
    );
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid.as_str());
    assert_eq!(claims["kubernetes.io"]["node"]["name"], n.node.as_str());
    // Read-only, as the admission plugin mounts it.
    assert_eq!(
        exec(
            &app,
            &format!("touch {TOKEN_MOUNT_PATH}/x 2>/dev/null && echo writable || echo read-only")
        )
        .await,
        "read-only"
    );

    // The API server takes the token back: its TokenReview authenticates the pod's service
    // account, bound to this pod.
    let review = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    });
    let file = n.dir.path().join("review.json");
    std::fs::write(&file, review.to_string()).unwrap();
    let answer = server.kubectl_ok(&["create", "-f", file.to_str().unwrap(), "-o", "json"]);
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["status"]["authenticated"], true, "{answer:#}");
    assert_eq!(
        answer["status"]["user"]["username"],
        format!("system:serviceaccount:{team}:default"),
        "{answer:#}"
    );
    assert_eq!(
        answer["status"]["user"]["extra"]["authentication.kubernetes.io/pod-uid"][0],
        uid.as_str(),
        "{answer:#}"
    );
    // The CA bundle is the cluster's.
    let cluster_ca = std::fs::read_to_string(real::k8s_env("NODELET_TEST_K8S_CA")).unwrap();
    assert_eq!(
        exec(&app, &format!("cat {TOKEN_MOUNT_PATH}/ca.crt")).await,
        cluster_ca.trim()
    );

    // One TokenRequest for the pod however many times it was synced, bound to it.
    let posts: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/token"))
        .collect();
    assert_eq!(posts.len(), 1, "{posts:#?}");
    assert_eq!(
        posts[0].path,
        format!("/api/v1/namespaces/{team}/serviceaccounts/default/token")
    );
    let body = posts[0].body.clone().unwrap();
    assert_eq!(body["spec"]["boundObjectRef"]["uid"], uid.as_str());
    assert_eq!(body["spec"]["expirationSeconds"], 3607);

    // A pod that opted out has no token.
    let quiet = wait_running(&server, &n, &team, "quiet").await;
    assert_eq!(
        exec(
            &quiet,
            &format!("test -e {TOKEN_MOUNT_PATH} && echo present || echo absent")
        )
        .await,
        "absent"
    );
}
