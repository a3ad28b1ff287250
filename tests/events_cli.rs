//! `nodelet events` against a local API served in-process (no container runtime needed).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nodelet::clock::Clock;
use nodelet::events::{container_ref, pod_ref, EventRecorder, EventType};
use nodelet::podspec::ContainerKind;
use nodelet::server::{self, ApiState};
use tokio_util::sync::CancellationToken;

fn pod(namespace: &str, name: &str, uid: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn cli(args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodelet"))
        .args(args)
        .output()
        .await
        .expect("run nodelet");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_prints_a_kubectl_table_filtered_by_namespace() {
    let recorder = EventRecorder::new(Clock::system(), "kubelet", "n1");
    let web = pod("default", "web-n1", "u1");
    let etcd = pod("kube-system", "etcd-n1", "u2");
    let app = container_ref(&web, "app", ContainerKind::Regular);
    recorder.record(
        &app,
        EventType::Normal,
        "Pulled",
        "Container image \"busybox\" already present on machine",
    );
    recorder.record(&app, EventType::Normal, "Created", "Created container: app");
    recorder.record(
        &pod_ref(&etcd),
        EventType::Warning,
        "FailedMount",
        "hostPath type check failed",
    );
    recorder.record(
        &app,
        EventType::Normal,
        "Pulled",
        "Container image \"busybox\" already present on machine",
    );

    let r = recorder.clone();
    let state = ApiState {
        pods: Arc::new(Vec::new),
        health: Arc::new(|| Ok(())),
        events: Arc::new(move || r.events()),
        summary: None,
        configz: None,
    };
    let cancel = CancellationToken::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let task = server::serve(
        addr,
        server::router(state),
        cancel.clone(),
        &tokio_util::task::TaskTracker::new(),
    )
    .await
    .unwrap();
    let base = format!("http://{addr}");

    let (ok, out, err) = cli(&["events", "--server", &base]).await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    let header: Vec<&str> = lines[0]
        .split("   ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "LAST SEEN",
            "TYPE",
            "REASON",
            "OBJECT",
            "MESSAGE"
        ],
        "{out}"
    );
    // Sorted by last seen: the repeated Pulled (count 2) is the newest.
    assert!(
        lines[1].contains("Created") && lines[1].contains("pod/web-n1"),
        "{out}"
    );
    assert!(
        lines[2].contains("FailedMount") && lines[2].contains("pod/etcd-n1"),
        "{out}"
    );
    assert!(
        lines[3].contains("Pulled") && lines[3].starts_with("default "),
        "{out}"
    );

    let (ok, out, err) = cli(&["events", "--server", &base, "-n", "kube-system"]).await;
    assert!(ok, "{err}");
    assert!(
        out.starts_with("LAST SEEN   TYPE      REASON        OBJECT        MESSAGE\n"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(
        out.contains("Warning   FailedMount   pod/etcd-n1   hostPath type check failed"),
        "{out}"
    );

    let (ok, out, err) = cli(&["events", "--server", &base, "-n", "nothing-here"]).await;
    assert!(ok, "{err}");
    assert_eq!(out, "");
    assert!(
        err.contains("No resources found in nothing-here namespace."),
        "{err}"
    );

    let (ok, out, err) = cli(&["events", "--server", &base, "-o", "json"]).await;
    assert!(ok, "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list["kind"], "EventList");
    assert_eq!(list["items"].as_array().unwrap().len(), 3);

    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn events_fails_clearly_when_nodelet_is_not_running() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let (ok, _, err) = cli(&["events", "--server", &format!("http://{addr}")]).await;
    assert!(!ok);
    assert!(err.contains(&format!("GET http://{addr}/events")), "{err}");
}
