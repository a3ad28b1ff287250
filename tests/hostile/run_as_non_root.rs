//! `runAsNonRoot` against an image that runs as root without saying so: the testbox image has
//! no `USER`, so containerd reports neither a uid nor a user name for it, and the process would
//! run as uid 0. The kubelet (`getImageUser`) reads that as root and refuses the container with
//! `CreateContainerConfigError`; so must nodelet. The same pod with `runAsUser: 1000` runs.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::common::*;
use nodelet_testkit::pod::{container_status, terminated, waiting_reason};
use nodelet_testkit::tail;

const T: Duration = Duration::from_secs(120);

/// A static pod whose container prints its uid and exits.
fn pod(name: &str, pod_security_context: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 5\n\
         \x20 securityContext:\n{pod_security_context}\
         \x20 containers:\n  - name: app\n    image: {TESTBOX}\n    imagePullPolicy: Never\n\
         \x20   command: [\"sh\", \"-c\", \"id -u\"]\n"
    )
}

/// The kubelet's `format.Pod`: `name_namespace(uid)`.
fn format_pod(p: &Pod) -> String {
    format!(
        "{}_{}({})",
        p.metadata.name.as_deref().unwrap_or_default(),
        p.metadata.namespace.as_deref().unwrap_or_default(),
        p.metadata.uid.as_deref().unwrap_or_default()
    )
}

fn waiting_message(p: &Pod, name: &str) -> Option<String> {
    container_status(p, name)?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .message
        .clone()
}

/// The messages of the `Failed` warnings nodelet recorded for the pod's container `app`.
async fn failed_events(n: &Nodelet, p: &Pod) -> Vec<String> {
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let Ok(resp) = reqwest::Client::new()
        .get(format!("{}/events", n.base_url()))
        .timeout(Duration::from_secs(5))
        .send()
        .await
    else {
        return Vec::new();
    };
    let Ok(list) = resp.json::<serde_json::Value>().await else {
        return Vec::new();
    };
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["involvedObject"]["uid"] == uid.as_str()
                && e["involvedObject"]["fieldPath"] == "spec.containers{app}"
                && e["reason"] == "Failed"
                && e["type"] == "Warning"
        })
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

/// How many times nodelet's log says it refused to start the pod's container: a sign of each
/// sync of the pod that events (rate-limited per object, as client-go's are) do not give.
fn refusals_logged(n: &Nodelet, p: &Pod) -> usize {
    let name = format!(
        "pod.name=\"{}\"",
        p.metadata.name.as_deref().unwrap_or_default()
    );
    n.logs()
        .lines()
        .filter(|l| {
            l.contains(&name)
                && l.contains("container failed to start reason=CreateContainerConfigError")
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_non_root_refuses_an_image_without_user() {
    let n = Nodelet::start("run-as-non-root");
    n.write_manifest(
        "rootimage.yaml",
        &pod("rootimage", "    runAsNonRoot: true\n"),
    );
    n.write_manifest(
        "explicitroot.yaml",
        &pod("explicitroot", "    runAsNonRoot: true\n    runAsUser: 0\n"),
    );
    n.write_manifest(
        "nonroot.yaml",
        &pod("nonroot", "    runAsNonRoot: true\n    runAsUser: 1000\n"),
    );

    // The positive control: the same image and check with a non-root user runs, as that user.
    let ok = n
        .wait_pod("nonroot", T, "the container ran and exited", |p| {
            terminated(p, "app").is_some()
        })
        .await;
    assert_eq!(terminated(&ok, "app").map(|t| t.0), Some(0));
    let m = &ok.metadata;
    let log = n
        .dir
        .path()
        .join("logs")
        .join(format!(
            "{}_{}_{}",
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
            m.uid.as_deref().unwrap_or_default()
        ))
        .join("app/0.log");
    let text = std::fs::read_to_string(&log).expect("log of app");
    // One CRI log line: `<time> stdout F 1000`.
    let printed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .collect();
    assert_eq!(printed, ["1000"], "{text:?}");

    for (name, message) in [
        (
            "rootimage",
            "container has runAsNonRoot and image will run as root",
        ),
        (
            "explicitroot",
            "container's runAsUser breaks non-root policy",
        ),
    ] {
        let refused = n
            .wait_pod(name, T, "CreateContainerConfigError", |p| {
                waiting_reason(p, "app").as_deref() == Some("CreateContainerConfigError")
            })
            .await;
        let want = format!(
            "{message} (pod: {:?}, container: app)",
            format_pod(&refused)
        );
        assert_eq!(
            waiting_message(&refused, "app").as_deref(),
            Some(want.as_str()),
            "{name}"
        );
        // The kubelet's event for a config error: `Failed`, `Error: <message>`.
        let event = format!("Error: {want}");
        let deadline = tokio::time::Instant::now() + T;
        while !failed_events(&n, &refused).await.contains(&event) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name}: no Failed event {event:?}: {:?}",
                failed_events(&n, &refused).await
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // Nodelet keeps trying (the pod is synced again, and refused again): still the runtime
        // never gets a container for it.
        let first = refusals_logged(&n, &refused);
        let deadline = tokio::time::Instant::now() + T;
        while refusals_logged(&n, &refused) <= first {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name}: the pod was not synced again\n{}",
                tail(&n.logs(), 40)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let uid = refused.metadata.uid.clone().unwrap_or_default();
        let (_, containers) = n.runtime_objects().await;
        let created: Vec<_> = containers
            .iter()
            .filter(|c| c.labels.get("io.kubernetes.pod.uid") == Some(&uid))
            .collect();
        assert!(created.is_empty(), "{name}: created {created:?}");
        let now = n.pod(name).await.expect("pod listed");
        let status = container_status(&now, "app").expect("status of app");
        assert_eq!(
            waiting_reason(&now, "app").as_deref(),
            Some("CreateContainerConfigError"),
            "{name}: {status:?}"
        );
        assert!(status.container_id.is_none(), "{name}: {status:?}");
        assert!(
            status
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_none(),
            "{name}: {status:?}"
        );
        assert_eq!(status.restart_count, 0, "{name}: {status:?}");
    }
    assert_no_runtime_stalls(&n).await;
}
