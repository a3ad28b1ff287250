//! Component tests of the composition root (`nodelet::agent`), started the way the other
//! component tests start it (the harness) and the way `main` does (`NodeletBuilder`): what the
//! builder wires, and that shutdown waits for every task it started.

mod harness;

use std::time::Duration;

use harness::*;
use nodelet::pod::worker_state::PodWork;

/// With no pod source configured, nodelet is ready at once, and its first event is the
/// node's `Starting`.
#[tokio::test(start_paused = true)]
async fn without_pod_sources_it_is_ready_and_has_recorded_starting() {
    let h = harness().await;
    tokio::time::timeout(Duration::from_secs(10), h.nodelet.ready())
        .await
        .expect("ready within 10 s of paused time");
    let node_events: Vec<(String, String)> = h
        .nodelet
        .events()
        .events()
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("Node"))
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.involved_object.name.unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(node_events, [("Starting".to_string(), "node1".to_string())]);
    h.cancel.cancel();
}

/// `shutdown` cancels the tree and returns once every task has: the probe workers among them,
/// which stop probing.
#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_every_task_and_probing_stops() {
    let h = harness().await;
    let p = with_lifecycle(pod("a1", "Always", &["a"], "localhost/app:1"), |c| {
        c.readiness_probe = Some(exec_probe(1, 3));
    });
    h.workers.update(PodWork::Sync(p));
    // The positive sign first: the probe runs, every second.
    for _ in 0..100 {
        if h.fake.calls_of("exec_sync").len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        h.fake.calls_of("exec_sync").len() >= 3,
        "the readiness probe never ran three times"
    );
    let Harness { nodelet, fake, .. } = h;
    assert!(
        nodelet.shutdown(Duration::from_secs(5)).await,
        "some task was still running 5 s after the cancellation"
    );
    let probes = fake.calls_of("exec_sync").len();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        fake.calls_of("exec_sync").len(),
        probes,
        "a probe ran after shutdown"
    );
}

/// The read-only API runs in nodelet's tasks: it serves the pods the workers publish and a
/// healthy PLEG (so the relist runs), and once `shutdown` returned its port is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_only_api_is_one_of_its_tasks_and_stops_with_it() {
    let port = nodelet_testkit::port::free_port();
    let h = harness_with((Duration::from_secs(10), Duration::from_secs(300)), |cfg| {
        cfg.address = "127.0.0.1".parse().unwrap();
        cfg.read_only_port = port;
    })
    .await;
    h.workers.update(PodWork::Sync(pod(
        "r1",
        "Always",
        &["a"],
        "localhost/app:1",
    )));
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (health, pods) = loop {
        let health = match client.get(format!("{base}/healthz")).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(e) => e.to_string(),
        };
        let pods: serde_json::Value = client
            .get(format!("{base}/pods"))
            .send()
            .await
            .expect("GET /pods")
            .json()
            .await
            .expect("a PodList");
        let listed = pods["items"]
            .as_array()
            .is_some_and(|items| items.iter().any(|p| p["metadata"]["uid"] == "r1"));
        if (health == "ok" && listed) || std::time::Instant::now() > deadline {
            break (health, pods);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(health, "ok", "the PLEG never relisted");
    assert_eq!(pods["items"][0]["metadata"]["uid"], "r1", "{pods:#}");
    drop(client);
    let Harness { nodelet, .. } = h;
    assert!(
        nodelet.shutdown(Duration::from_secs(20)).await,
        "some task was still running 20 s after the cancellation"
    );
    std::net::TcpListener::bind(("127.0.0.1", port))
        .unwrap_or_else(|e| panic!("port {port} still taken after shutdown: {e}"));
}

/// The runtime's `NetworkReady=false` (containerd before a CNI configuration exists) holds a
/// pod on the pod network, with the kubelet's `NetworkNotReady` event, and lets a pod on the
/// host's network start; once the network is ready the held pod starts.
#[tokio::test(start_paused = true)]
async fn a_pod_waits_for_the_runtimes_network_and_a_host_network_pod_does_not() {
    let h = harness().await;
    h.fake.set_network_not_ready(Some((
        "NetworkPluginNotReady",
        "Network plugin returns error: cni plugin not initialized",
    )));
    // The next runtime check (every 5 s) reads the condition.
    let checks = h.fake.calls_of("status").len();
    for _ in 0..100 {
        if h.fake.calls_of("status").len() > checks {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        h.fake.calls_of("status").len() > checks,
        "the runtime's status was not read again within 10 s"
    );
    let mut host = (*pod("h1", "Always", &["host"], "localhost/app:1")).clone();
    host.spec.as_mut().unwrap().host_network = Some(true);
    h.workers.update(PodWork::Sync(std::sync::Arc::new(host)));
    h.workers.update(PodWork::Sync(pod(
        "n1",
        "Always",
        &["net"],
        "localhost/app:1",
    )));
    h.wait_running(&["host"], "the host-network pod runs").await;
    let event = h.event("NetworkNotReady").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.involved_object.uid.as_deref(),
        Some("n1"),
        "the event is about the held pod"
    );
    assert_eq!(
        event.message.as_deref(),
        Some(
            "network is not ready: container runtime network not ready: NetworkReady=false \
             reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin \
             not initialized"
        )
    );
    // Held across its retries: no sandbox, the pod Pending.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        h.fake.sandbox_count(),
        1,
        "only the host-network pod's sandbox"
    );
    assert_eq!(h.phase("n1"), "Pending");
    assert!(
        h.events
            .events()
            .iter()
            .filter(|e| e.reason.as_deref() == Some("NetworkNotReady"))
            .map(|e| e.count.unwrap_or(1))
            .sum::<i32>()
            >= 2,
        "the held pod's event repeats with its retries"
    );

    h.fake.set_network_not_ready(None);
    h.wait_running(
        &["host", "net"],
        "the held pod starts once the network is ready",
    )
    .await;
}
