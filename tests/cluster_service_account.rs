//! Cluster mode on a real containerd: pods get the `kube-api-access-*` volume the API server's
//! ServiceAccount admission plugin adds (the fixture's), and nodelet fills it with a token bound
//! to the pod, the cluster CA bundle and the namespace, as the kubelet does.

mod common;

use std::time::{Duration, Instant};

use apiserver_fixture::serviceaccount::{token_claims, TOKEN_MOUNT_PATH};
use apiserver_fixture::Fixture;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use nodelet::cri::Runtime;
use nodelet_testkit::tail;

const T: Duration = Duration::from_secs(90);

fn running_pod(fixture: &Fixture, namespace: &str, name: &str) -> Option<Pod> {
    let pod: Pod = fixture.get(Some(namespace), name).ok().flatten()?;
    let phase = pod.status.as_ref()?.phase.as_deref()?;
    (phase == "Running").then_some(pod)
}

async fn wait_running(fixture: &Fixture, n: &Nodelet, namespace: &str, name: &str) -> Pod {
    let deadline = Instant::now() + T;
    loop {
        if let Some(p) = running_pod(fixture, namespace, name) {
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
    let fixture = Fixture::start(None).await.unwrap();
    let api = fixture.url();
    let n = Nodelet::start_in_cluster("satoken", &api, "");
    let (ok, _, err) = kubectl(&api, &["create", "namespace", "team"]);
    assert!(ok, "{err}");
    kubectl_apply(
        &api,
        n.dir.path(),
        "app",
        &pod_yaml("app", "team", &n.node, ""),
    );
    kubectl_apply(
        &api,
        n.dir.path(),
        "quiet",
        &pod_yaml(
            "quiet",
            "default",
            &n.node,
            "  automountServiceAccountToken: false\n",
        ),
    );

    let app = wait_running(&fixture, &n, "team", "app").await;
    let uid = app.metadata.uid.clone().unwrap();
    assert_eq!(
        exec(&app, &format!("cat {TOKEN_MOUNT_PATH}/namespace")).await,
        "team"
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
    assert_eq!(claims["sub"], "system:serviceaccount:team:default");
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

    // One TokenRequest for the pod however many times it was synced, bound to it.
    let posts: Vec<_> = fixture
        .request_log()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/token"))
        .collect();
    assert_eq!(posts.len(), 1, "{posts:#?}");
    assert_eq!(
        posts[0].path,
        "/api/v1/namespaces/team/serviceaccounts/default/token"
    );
    let body = posts[0].body.clone().unwrap();
    assert_eq!(body["spec"]["boundObjectRef"]["uid"], uid.as_str());
    assert_eq!(body["spec"]["expirationSeconds"], 3607);

    // A pod that opted out has no token.
    let quiet = wait_running(&fixture, &n, "default", "quiet").await;
    assert_eq!(
        exec(
            &quiet,
            &format!("test -e {TOKEN_MOUNT_PATH} && echo present || echo absent")
        )
        .await,
        "absent"
    );
}
