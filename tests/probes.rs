//! Probes on a real containerd, against real HTTP, TCP and gRPC endpoints served by `testbox`
//! in the pod, through the real `nodelet` binary.

mod common;

use std::time::Duration;

use common::*;
use nodelet::cri::Runtime;
use nodelet_testkit::pod::{all_running, container_status, is_ready, restart_count};

const T: Duration = Duration::from_secs(90);

fn probe_pod(name: &str, args: &str, probes: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n\
         \x20 - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [{args}]\n    ports:\n    - name: http\n      containerPort: 8080\n{probes}"
    )
}

async fn events(n: &Nodelet) -> Vec<(String, String)> {
    let v: serde_json::Value = reqwest::get(format!("{}/events", n.base_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_string(),
                e["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_liveness_turning_unhealthy_restarts_the_container() {
    let n = Nodelet::start("http-liveness");
    n.write_manifest(
        "p.yaml",
        &probe_pod(
            "p",
            "serve, --http, \"8080\", --unhealthy-after, 3s",
            "    livenessProbe:\n      httpGet:\n        path: /healthz\n        port: http\n      periodSeconds: 1\n      failureThreshold: 2\n",
        ),
    );
    n.wait_pod("p", T, "restarted by liveness", |p| {
        restart_count(p, "main") >= 1
    })
    .await;
    let ev = events(&n).await;
    assert!(
        ev.iter().any(|(r, m)| r == "Unhealthy"
            && m.contains("Liveness probe failed: HTTP probe failed with statuscode: 500")),
        "{ev:#?}"
    );
    assert!(
        ev.iter()
            .any(|(r, m)| r == "Killing" && m.contains("failed liveness probe")),
        "{ev:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_liveness_on_an_open_port_does_not_restart() {
    let n = Nodelet::start("tcp-liveness");
    n.write_manifest(
        "p.yaml",
        &probe_pod(
            "p",
            "serve, --tcp, \"9000\"",
            // A probe that runs before the listener is up would fail (as with the kubelet):
            // give the container its usual second, and room for one slow probe on a busy machine.
            "    livenessProbe:\n      tcpSocket:\n        port: 9000\n      initialDelaySeconds: 1\n      periodSeconds: 1\n      failureThreshold: 3\n",
        ),
    );
    n.wait_pod("p", T, "running", all_running).await;
    // The positive sign first: the liveness probe has run, more times than its failure
    // threshold (a failing probe would have asked for a restart by then).
    for _ in 0..4 {
        n.wait_metric_advance("nodelet_prober_probe_total", T).await;
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    let p = n.pod("p").await.unwrap();
    assert_eq!(restart_count(&p, "main"), 0);
    assert!(is_ready(&p));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_liveness_on_the_wrong_port_restarts() {
    let n = Nodelet::start("grpc-liveness");
    n.write_manifest(
        "p.yaml",
        &probe_pod(
            "p",
            "serve, --grpc, \"9090\"",
            "    livenessProbe:\n      grpc:\n        port: 9091\n      periodSeconds: 1\n      failureThreshold: 1\n",
        ),
    );
    n.wait_pod("p", T, "restarted", |p| restart_count(p, "main") >= 1)
        .await;
    // The right port is healthy: readiness on 9090 makes the pod Ready.
    let m = Nodelet::start("grpc-ready");
    m.write_manifest(
        "q.yaml",
        &probe_pod(
            "q",
            "serve, --grpc, \"9090\"",
            "    readinessProbe:\n      grpc:\n        port: 9090\n      periodSeconds: 1\n",
        ),
    );
    m.wait_pod("q", T, "Ready", is_ready).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_liveness_that_times_out_restarts() {
    let n = Nodelet::start("exec-timeout");
    n.write_manifest(
        "p.yaml",
        &probe_pod(
            "p",
            "serve",
            "    livenessProbe:\n      exec:\n        command: [/bin/sh, -c, \"sleep 5\"]\n      timeoutSeconds: 1\n      periodSeconds: 2\n      failureThreshold: 1\n",
        ),
    );
    n.wait_pod("p", T, "restarted", |p| restart_count(p, "main") >= 1)
        .await;
    let ev = events(&n).await;
    assert!(
        ev.iter()
            .any(|(r, m)| r == "Unhealthy" && m.contains("timed out")),
        "{ev:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_readiness_keeps_the_pod_not_ready_without_restarts_until_healthy() {
    let n = Nodelet::start("readiness");
    n.write_manifest(
        "p.yaml",
        &probe_pod(
            "p",
            "serve, --http, \"8080\", --healthy-file, /tmp/ready",
            "    readinessProbe:\n      httpGet:\n        path: /healthz\n        port: 8080\n      periodSeconds: 1\n",
        ),
    );
    let p = n.wait_pod("p", T, "running", all_running).await;
    // The positive sign first: the readiness probe has run.
    n.wait_metric_advance("nodelet_prober_probe_total", T).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let p2 = n.pod("p").await.unwrap();
    assert!(!is_ready(&p2), "not Ready while the probe fails");
    assert_eq!(restart_count(&p2, "main"), 0);
    let ready_cond = p2
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready_cond.reason.as_deref(), Some("ContainersNotReady"));
    // Make it healthy from inside the container.
    let id = container_status(&p, "main")
        .unwrap()
        .container_id
        .clone()
        .unwrap();
    let id = id.trim_start_matches("containerd://");
    let r = runtime()
        .exec_sync(
            id,
            vec!["touch".into(), "/tmp/ready".into()],
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(r.exit_code, 0);
    let p3 = n.wait_pod("p", T, "Ready", is_ready).await;
    assert_eq!(restart_count(&p3, "main"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_probe_holds_back_liveness() {
    let n = Nodelet::start("startup");
    // Healthy only after 6 s: liveness alone (failureThreshold 1) would kill it; the startup
    // probe (30 × 1 s) holds liveness back until then.
    n.write_manifest(
        "p.yaml",
        &probe_pod(
            "p",
            "serve, --http, \"8080\", --healthy-after, 6s",
            "    startupProbe:\n      httpGet:\n        path: /healthz\n        port: 8080\n      periodSeconds: 1\n      failureThreshold: 30\n\
             \x20   livenessProbe:\n      httpGet:\n        path: /healthz\n        port: 8080\n      periodSeconds: 1\n      failureThreshold: 1\n",
        ),
    );
    let p = n.wait_pod("p", T, "started and Ready", is_ready).await;
    assert_eq!(restart_count(&p, "main"), 0);
    assert_eq!(
        container_status(&p, "main").and_then(|c| c.started),
        Some(true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_local_followed_foreign_is_success_with_a_warning() {
    let n = Nodelet::start("redirects");
    // A local redirect to a failing page is followed: the probe fails, the pod is not Ready.
    n.write_manifest(
        "local.yaml",
        &probe_pod(
            "local",
            "serve, --http, \"8080\"",
            "    readinessProbe:\n      httpGet:\n        path: /redirect?to=/status/500\n        port: 8080\n      periodSeconds: 1\n",
        ),
    );
    // A redirect to another host is not followed and counts as success, with a ProbeWarning.
    n.write_manifest(
        "foreign.yaml",
        &probe_pod(
            "foreign",
            "serve, --http, \"8080\"",
            "    readinessProbe:\n      httpGet:\n        path: /redirect?to=http://nodelet.invalid:1/\n        port: 8080\n      periodSeconds: 1\n",
        ),
    );
    n.wait_pod("foreign", T, "Ready", is_ready).await;
    n.wait_pod("local", T, "running", all_running).await;
    // The positive sign first: the probes keep running.
    n.wait_metric_advance("nodelet_prober_probe_total", T).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !is_ready(&n.pod("local").await.unwrap()),
        "the followed redirect reached a 500"
    );
    let ev = events(&n).await;
    assert!(
        ev.iter()
            .any(|(r, m)| r == "ProbeWarning" && m.contains("Probe terminated redirects")),
        "{ev:#?}"
    );
    assert!(
        ev.iter()
            .any(|(r, m)| r == "Unhealthy" && m.contains("statuscode: 500")),
        "{ev:#?}"
    );
}

/// `httpGet.protocol: HTTP2` speaks HTTP/2 over cleartext TCP with prior knowledge (h2c), as the
/// kubelet's `H2CContainerProbe`: testbox's gRPC port is served by an HTTP/2-only server
/// (tonic), which the h2c probe reaches and an HTTP/1.1 probe of the same port cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_probe_reaches_an_http2_only_server() {
    let n = Nodelet::start("h2c-probe");
    let probe = |protocol: &str| {
        format!(
            "    readinessProbe:\n      httpGet:\n        port: 9090\n        path: /healthz\n{protocol}      periodSeconds: 1\n"
        )
    };
    n.write_manifest(
        "h2.yaml",
        &probe_pod(
            "h2",
            "serve, --grpc, \"9090\"",
            &probe("        protocol: HTTP2\n"),
        ),
    );
    n.write_manifest(
        "h1.yaml",
        &probe_pod("h1", "serve, --grpc, \"9090\"", &probe("")),
    );
    n.wait_pod("h2", T, "Ready through an h2c probe", is_ready)
        .await;
    // The HTTP/1.1 probe of the same server fails, with the kubelet's Unhealthy event.
    n.wait_pod("h1", T, "running", all_running).await;
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let ev = events(&n).await;
        if ev
            .iter()
            .any(|(r, m)| r == "Unhealthy" && m.starts_with("Readiness probe failed"))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no failed HTTP/1.1 readiness probe: {ev:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(!is_ready(&n.pod("h1").await.expect("h1")));
}
