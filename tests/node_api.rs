//! Node registration, node status and the Lease against the API server fixture.
//!
//! Timings run on tokio's paused clock: the fixture answers on loopback inside the same
//! runtime, so virtual time only moves while every task waits on a timer, and "every 10 s"
//! is asserted exactly.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiserver_fixture::Fixture;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use nodelet::clock::Clock;
use nodelet::config::{Config, Environment};
use nodelet::cri::fake::FakeRuntime;
use nodelet::events::api_sink::ApiEventSink;
use nodelet::events::EventRecorder;
use nodelet::lifecycle::pressure::Pressure;
use nodelet::node::{NodeAgent, NodeCounters, NodeFacts, NodeSettings};
use nodelet::stats::machine::MachineInfo;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const START: &str = "2026-01-01T00:00:00Z";

fn client(fixture: &Fixture) -> kube::Client {
    kube::Client::try_from(kube::Config::new(fixture.url().parse().unwrap())).unwrap()
}

fn settings(name: &str) -> NodeSettings {
    let config = Config::defaults(&Environment {
        hostname: name.into(),
    });
    nodelet::agent::settings::node(&config)
}

fn facts() -> NodeFacts {
    NodeFacts {
        machine: MachineInfo {
            num_cores: 2,
            memory_capacity: 4_028_580 * 1024,
            // A node with swap: it reports `nodeInfo.swap` (a node without sends nothing).
            swap_capacity: 1 << 30,
            hugepages: vec![(2 << 20, 0)],
            ephemeral_storage_capacity: Some(30_832_548 * 1024),
            kernel_version: "6.1.0-18-amd64".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            machine_id: "machine".into(),
            boot_id: "boot".into(),
            system_uuid: "uuid".into(),
        },
        internal_ip: Some("10.0.0.7".parse().unwrap()),
        container_runtime_version: "containerd://1.6.20".into(),
    }
}

/// Health the test can flip while the agent runs.
type Health = Arc<Mutex<Vec<String>>>;

struct Running {
    cancel: CancellationToken,
    counters: Arc<NodeCounters>,
    health: Health,
    /// Calls of the health closure: one per node status computation (and one for the Node
    /// registered). The sign that the status loop ran, whether it read the Node from its watch
    /// or with a GET.
    computations: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn computations(&self) -> usize {
        self.computations.load(Ordering::SeqCst)
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.unwrap();
    }
}

fn start(fixture: &Fixture, settings: NodeSettings) -> Running {
    start_with(fixture, settings, |agent| agent)
}

/// [`start`], with images, events or other additions to the agent.
fn start_with(
    fixture: &Fixture,
    settings: NodeSettings,
    extend: impl FnOnce(NodeAgent) -> NodeAgent,
) -> Running {
    let health: Health = Arc::new(Mutex::new(Vec::new()));
    let computations = Arc::new(AtomicUsize::new(0));
    let agent = extend(NodeAgent::new(
        settings,
        facts(),
        Arc::new({
            let (health, computations) = (health.clone(), computations.clone());
            move || {
                computations.fetch_add(1, Ordering::SeqCst);
                health.lock().unwrap().clone()
            }
        }),
        Arc::new(Pressure::default),
        Clock::starting_at(START.parse().unwrap()),
    ));
    let counters = agent.counters();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(agent.run(client(fixture), cancel.clone()));
    Running {
        cancel,
        counters,
        health,
        computations,
        task,
    }
}

fn count(fixture: &Fixture, method: &str, path: &str) -> usize {
    fixture
        .request_log()
        .iter()
        .filter(|r| r.method == method && r.path == path)
        .count()
}

fn ready(node: &Node) -> NodeCondition {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .cloned()
        .expect("a Ready condition")
}

fn node(fixture: &Fixture, name: &str) -> Node {
    fixture.get::<Node>(None, name).unwrap().expect("the node")
}

async fn sleep_until(start: Instant, seconds: f64) {
    tokio::time::sleep_until(start + Duration::from_secs_f64(seconds)).await;
}

/// Allocatable holds back the configured hard `memory.available` threshold (and the configured
/// `nodefs.available` one), not the kubelet's defaults.
#[tokio::test(start_paused = true)]
async fn allocatable_holds_back_the_configured_hard_thresholds() {
    let fixture = Fixture::start(None).await.unwrap();
    let text = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                evictionHard: {memory.available: 500Mi, nodefs.available: 1Gi}\n\
                kubeReserved: {memory: 100Mi}\n";
    let config = nodelet::config::parse(
        text,
        std::path::Path::new("c.yaml"),
        &Environment {
            hostname: "node-e".into(),
        },
    )
    .unwrap()
    .config;
    let t0 = Instant::now();
    let running = start(&fixture, nodelet::agent::settings::node(&config));
    sleep_until(t0, 1.0).await;
    let allocatable = node(&fixture, "node-e")
        .status
        .unwrap()
        .allocatable
        .unwrap();
    // 4028580Ki − 500Mi − 100Mi; 30832548Ki − 1Gi.
    assert_eq!(allocatable["memory"].0, "3414180Ki");
    assert_eq!(allocatable["ephemeral-storage"].0, "29783972Ki");
    running.stop().await;
}

/// `podsPerCore` caps the pod capacity at that many per CPU (2 here), `providerID` is the
/// Node's `spec.providerID`, both from a configuration file.
#[tokio::test(start_paused = true)]
async fn pods_per_core_and_provider_id_shape_the_registered_node() {
    let fixture = Fixture::start(None).await.unwrap();
    let text = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                podsPerCore: 7\nproviderID: gce://project/zone/node-p\n";
    let config = nodelet::config::parse(
        text,
        std::path::Path::new("c.yaml"),
        &Environment {
            hostname: "node-p".into(),
        },
    )
    .unwrap()
    .config;
    let t0 = Instant::now();
    let running = start(&fixture, nodelet::agent::settings::node(&config));
    sleep_until(t0, 1.0).await;
    let node = node(&fixture, "node-p");
    assert_eq!(
        node.spec.as_ref().unwrap().provider_id.as_deref(),
        Some("gce://project/zone/node-p")
    );
    let status = node.status.unwrap();
    // min(maxPods 110, 7 × 2 CPUs).
    assert_eq!(status.capacity.unwrap()["pods"].0, "14");
    assert_eq!(status.allocatable.unwrap()["pods"].0, "14");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn register_creates_the_node_with_labels_taints_and_capacity() {
    let fixture = Fixture::start(None).await.unwrap();
    let mut settings = settings("node-a");
    settings.node_labels = BTreeMap::from([("node-role.kubernetes.io/worker".into(), "".into())]);
    settings.register_with_taints = vec![Taint {
        key: "dedicated".into(),
        value: Some("gpu".into()),
        effect: "NoSchedule".into(),
        ..Default::default()
    }];
    let t0 = Instant::now();
    let running = start(&fixture, settings);
    sleep_until(t0, 1.0).await;

    assert_eq!(count(&fixture, "POST", "/api/v1/nodes"), 1);
    let node = node(&fixture, "node-a");
    let labels = node.metadata.labels.clone().unwrap();
    let arch = nodelet::stats::machine::go_arch(std::env::consts::ARCH);
    for (key, value) in [
        ("kubernetes.io/hostname", "node-a"),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", arch),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", arch),
        ("node-role.kubernetes.io/worker", ""),
    ] {
        assert_eq!(labels.get(key).map(String::as_str), Some(value), "{key}");
    }
    assert_eq!(
        node.metadata.annotations.as_ref().unwrap()
            ["volumes.kubernetes.io/controller-managed-attach-detach"],
        "true"
    );
    let taints = node.spec.as_ref().unwrap().taints.clone().unwrap();
    assert_eq!(taints.len(), 1);
    assert_eq!(
        (
            taints[0].key.as_str(),
            taints[0].value.as_deref(),
            taints[0].effect.as_str()
        ),
        ("dedicated", Some("gpu"), "NoSchedule")
    );
    let status = node.status.clone().unwrap();
    let capacity = status.capacity.unwrap();
    let allocatable = status.allocatable.unwrap();
    let quantity = |map: &BTreeMap<_, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
                    key: &str| map.get(key).map(|q| q.0.clone());
    assert_eq!(quantity(&capacity, "cpu").as_deref(), Some("2"));
    assert_eq!(quantity(&capacity, "memory").as_deref(), Some("4028580Ki"));
    assert_eq!(quantity(&capacity, "pods").as_deref(), Some("110"));
    assert_eq!(
        quantity(&capacity, "ephemeral-storage").as_deref(),
        Some("30832548Ki")
    );
    assert_eq!(quantity(&capacity, "hugepages-2Mi").as_deref(), Some("0"));
    // 100Mi held back for the memory.available eviction threshold.
    assert_eq!(
        quantity(&allocatable, "memory").as_deref(),
        Some("3926180Ki")
    );
    let ready = ready(&node);
    assert_eq!(
        (
            ready.status.as_str(),
            ready.reason.as_deref(),
            ready.message.as_deref()
        ),
        (
            "True",
            Some("KubeletReady"),
            Some("kubelet is posting ready status")
        )
    );
    let info = status.node_info.unwrap();
    assert_eq!(info.container_runtime_version, "containerd://1.6.20");
    assert_eq!(
        info.kubelet_version,
        nodelet::node::status::kubelet_version()
    );
    assert_eq!(info.os_image, "Debian GNU/Linux 12 (bookworm)");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_existing_node_keeps_foreign_labels_and_gets_the_defaults_back() {
    let fixture = Fixture::start(None).await.unwrap();
    fixture
        .create(&Node {
            metadata: ObjectMeta {
                name: Some("node-b".into()),
                labels: Some(BTreeMap::from([
                    ("team".into(), "blue".into()),
                    ("kubernetes.io/hostname".into(), "stale".into()),
                ])),
                ..Default::default()
            },
            spec: Some(Default::default()),
            ..Default::default()
        })
        .unwrap();
    let mut settings = settings("node-b");
    settings.node_labels = BTreeMap::from([("zone".into(), "a".into())]);
    let t0 = Instant::now();
    let running = start(&fixture, settings);
    sleep_until(t0, 1.0).await;

    let node = node(&fixture, "node-b");
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["team"], "blue", "foreign label kept");
    assert_eq!(
        labels["kubernetes.io/hostname"], "node-b",
        "default label reconciled"
    );
    assert_eq!(labels["kubernetes.io/os"], "linux");
    // As with the kubelet, nodeLabels only apply when the Node is created.
    assert!(!labels.contains_key("zone"));
    assert_eq!(count(&fixture, "POST", "/api/v1/nodes"), 1, "create tried");
    assert_eq!(
        count(&fixture, "PATCH", "/api/v1/nodes/node-b"),
        1,
        "one reconcile"
    );
    // The status loop filled in the status of the existing Node.
    assert_eq!(ready(&node).status, "True");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn status_is_patched_only_on_change_or_at_the_report_frequency() {
    let fixture = Fixture::start(None).await.unwrap();
    let status_path = "/api/v1/nodes/node-c/status";
    let t0 = Instant::now();
    // Defaults: update every 10 s, report every 5 min.
    let running = start(&fixture, settings("node-c"));

    sleep_until(t0, 5.0).await;
    assert_eq!(
        count(&fixture, "PATCH", status_path),
        1,
        "first report at start"
    );
    let computed = running.computations();
    sleep_until(t0, 295.0).await;
    assert_eq!(count(&fixture, "PATCH", status_path), 1, "nothing changed");
    // Whether each update read the watch of the Node or, while the watch had not delivered
    // the first report yet, GOT it.
    assert_eq!(
        running.computations() - computed,
        29,
        "but the status was computed every 10 s (10 … 290 s)"
    );
    sleep_until(t0, 305.0).await;
    assert_eq!(count(&fixture, "PATCH", status_path), 2, "report frequency");
    let heartbeat = ready(&node(&fixture, "node-c"))
        .last_heartbeat_time
        .unwrap()
        .0;
    assert_eq!(heartbeat.to_string(), "2026-01-01T00:05:00Z");

    // A change goes out at the next update, not at the next report.
    *running.health.lock().unwrap() = vec!["container runtime is down".into()];
    sleep_until(t0, 315.0).await;
    assert_eq!(count(&fixture, "PATCH", status_path), 3);
    let condition = ready(&node(&fixture, "node-c"));
    assert_eq!(
        (
            condition.status.as_str(),
            condition.reason.as_deref(),
            condition.message.as_deref()
        ),
        (
            "False",
            Some("KubeletNotReady"),
            Some("container runtime is down")
        )
    );
    assert_eq!(
        condition.last_transition_time.unwrap().0.to_string(),
        "2026-01-01T00:05:10Z"
    );
    let patch = fixture
        .request_log()
        .into_iter()
        .rfind(|r| r.method == "PATCH" && r.path == status_path)
        .unwrap();
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );
    let body = patch.body.unwrap();
    // Every condition carries a new heartbeat (as in the kubelet's patch); nothing else that
    // stayed the same is sent.
    let conditions = body["status"]["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 4, "{body}");
    assert_eq!(
        body["status"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["conditions"],
        "{body}"
    );

    *running.health.lock().unwrap() = Vec::new();
    sleep_until(t0, 325.0).await;
    assert_eq!(count(&fixture, "PATCH", status_path), 4);
    assert_eq!(ready(&node(&fixture, "node-c")).status, "True");
    // Quiet again until one report period after the last patch (t = 320 → 620).
    sleep_until(t0, 615.0).await;
    assert_eq!(count(&fixture, "PATCH", status_path), 4);
    sleep_until(t0, 625.0).await;
    assert_eq!(count(&fixture, "PATCH", status_path), 5);
    assert_eq!(
        running
            .counters
            .status_patches
            .load(std::sync::atomic::Ordering::Relaxed),
        5
    );
    running.stop().await;
}

/// Until `done` holds, giving the runtime's I/O a turn every millisecond of real time without
/// moving the paused clock (at most 10 s): what crosses loopback sockets may need real time
/// (the fixture's writes wait for the client's delayed ACK) where virtual time would race ahead.
async fn until_delivered(mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let paused_at = Instant::now();
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "not delivered within 10 s"
        );
        std::thread::sleep(Duration::from_millis(1));
        tokio::task::yield_now().await;
    }
    assert_eq!(Instant::now(), paused_at, "the clock did not move");
}

#[tokio::test(start_paused = true)]
async fn a_status_someone_else_changed_is_put_right_at_the_next_update() {
    let fixture = Fixture::start(None).await.unwrap();
    let t0 = Instant::now();
    let taints = Arc::new(tokio::sync::watch::channel(Vec::<Taint>::new()).0);
    let running = start_with(&fixture, settings("node-u"), |agent| {
        agent.with_taints(taints.clone())
    });
    sleep_until(t0, 42.0).await;
    // What the node lifecycle controller writes when heartbeats stop arriving: the conditions
    // Unknown, then the `unreachable` taint.
    let mut stale = node(&fixture, "node-u");
    for condition in stale.status.as_mut().unwrap().conditions.as_mut().unwrap() {
        condition.status = "Unknown".into();
        condition.reason = Some("NodeStatusUnknown".into());
        condition.message = Some("Kubelet stopped posting node status.".into());
    }
    fixture.replace(&stale, true).unwrap();
    let mut tainted = node(&fixture, "node-u");
    let unreachable = Taint {
        key: "node.kubernetes.io/unreachable".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    tainted.spec.get_or_insert_with(Default::default).taints = Some(vec![unreachable.clone()]);
    fixture.replace(&tainted, false).unwrap();
    let patches = count(&fixture, "PATCH", "/api/v1/nodes/node-u/status");
    let gets = count(&fixture, "GET", "/api/v1/nodes/node-u");
    // The watch of the Node delivers both (the taint after the status: events are ordered);
    // the taint reaches admission at once, not at the next status update.
    let mut admission = taints.subscribe();
    until_delivered(|| admission.borrow_and_update().contains(&unreachable)).await;

    sleep_until(t0, 55.0).await;
    assert_eq!(
        count(&fixture, "PATCH", "/api/v1/nodes/node-u/status"),
        patches + 1
    );
    assert_eq!(
        count(&fixture, "GET", "/api/v1/nodes/node-u"),
        gets,
        "seen through the watch, without a GET"
    );
    let ready = ready(&node(&fixture, "node-u"));
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("True", Some("KubeletReady"))
    );
    assert_eq!(
        ready.last_transition_time.unwrap().0.to_string(),
        "2026-01-01T00:00:50Z"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn lease_is_created_owned_by_the_node_and_renewed_every_10s() {
    let fixture = Fixture::start(None).await.unwrap();
    let created = fixture
        .create(&Node {
            metadata: ObjectMeta {
                name: Some("node-d".into()),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
    let t0 = Instant::now();
    let running = start(&fixture, settings("node-d"));

    let mut renew_times = Vec::new();
    for second in 0..=65 {
        sleep_until(t0, f64::from(second) + 0.5).await;
        if let Some(lease) = fixture
            .get::<Lease>(Some("kube-node-lease"), "node-d")
            .unwrap()
        {
            let renewed = lease.spec.unwrap().renew_time.unwrap().0;
            if renew_times.last() != Some(&renewed) {
                renew_times.push(renewed);
            }
        }
    }
    let seconds: Vec<i64> = renew_times
        .iter()
        .map(|t| t.as_second() - START.parse::<jiff::Timestamp>().unwrap().as_second())
        .collect();
    assert_eq!(seconds, vec![0, 10, 20, 30, 40, 50, 60]);

    let lease: Lease = fixture
        .get(Some("kube-node-lease"), "node-d")
        .unwrap()
        .unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("node-d"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    let owner = &lease.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str()
        ),
        ("v1", "Node", "node-d")
    );
    assert_eq!(Some(&owner.uid), created.metadata.uid.as_ref());

    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-d";
    assert_eq!(
        count(
            &fixture,
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        ),
        1
    );
    // Renewals write the Lease last written: no GET before each PUT.
    assert_eq!(count(&fixture, "PUT", lease_path), 6);
    assert_eq!(count(&fixture, "GET", lease_path), 1, "only the first look");
    assert_eq!(
        running
            .counters
            .lease_writes
            .load(std::sync::atomic::Ordering::Relaxed),
        7,
        "one create, six renewals"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_loops_recover_after_the_api_server_comes_back() {
    let fixture = Fixture::start(None).await.unwrap();
    let t0 = Instant::now();
    let running = start(&fixture, settings("node-e"));
    sleep_until(t0, 15.0).await;
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-e";
    let lease_writes_before = count(&fixture, "PUT", lease_path);
    assert!(lease_writes_before >= 1);

    fixture.stop().await;
    // The runtime goes down while the API server is away: the change must not be lost.
    *running.health.lock().unwrap() = vec!["container runtime is down".into()];
    sleep_until(t0, 120.0).await;
    fixture.resume().await.unwrap();
    // Lease back-off is at most 7 s; status updates every 10 s.
    sleep_until(t0, 135.0).await;

    let lease: Lease = fixture
        .get(Some("kube-node-lease"), "node-e")
        .unwrap()
        .unwrap();
    let renewed = lease.spec.unwrap().renew_time.unwrap().0;
    let start: jiff::Timestamp = START.parse().unwrap();
    let renewed_at = renewed.as_second() - start.as_second();
    assert!(
        (120..=135).contains(&renewed_at),
        "lease renewed after the outage, at {renewed_at}s"
    );
    let condition = ready(&node(&fixture, "node-e"));
    assert_eq!(
        (condition.status.as_str(), condition.message.as_deref()),
        ("False", Some("container runtime is down"))
    );
    // And the lease keeps its rhythm afterwards.
    let writes = count(&fixture, "PUT", lease_path);
    sleep_until(t0, 165.0).await;
    assert_eq!(count(&fixture, "PUT", lease_path), writes + 3);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn without_register_node_nothing_is_created_until_the_node_exists() {
    let fixture = Fixture::start(None).await.unwrap();
    let mut settings = settings("node-f");
    settings.register_node = false;
    let t0 = Instant::now();
    let running = start(&fixture, settings);
    sleep_until(t0, 30.0).await;
    assert_eq!(count(&fixture, "POST", "/api/v1/nodes"), 0);
    assert!(fixture
        .get::<Lease>(Some("kube-node-lease"), "node-f")
        .unwrap()
        .is_none());

    // An operator creates the Node: the next rounds report its status and create the Lease.
    fixture
        .create(&Node {
            metadata: ObjectMeta {
                name: Some("node-f".into()),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
    sleep_until(t0, 45.0).await;
    assert_eq!(ready(&node(&fixture, "node-f")).status, "True");
    assert!(fixture
        .get::<Lease>(Some("kube-node-lease"), "node-f")
        .unwrap()
        .is_some());
    running.stop().await;
}

fn write_kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: node\ncontexts:\n- name: node\n  context: {{cluster: fixture, user: node}}\nclusters:\n- name: fixture\n  cluster: {{server: '{server}'}}\nusers:\n- name: node\n  user: {{token: secret}}\n"
        ),
    )
    .unwrap();
    path
}

#[tokio::test(start_paused = true)]
async fn the_client_waits_for_tokens_and_a_watch_takes_one() {
    let fixture = Fixture::start(None).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::defaults(&Environment {
        hostname: "n".into(),
    });
    config.kubeconfig = Some(write_kubeconfig(dir.path(), &fixture.url()));
    config.kube_api_qps = 2;
    config.kube_api_burst = 2;
    let client = nodelet::cluster::client(&nodelet::agent::settings::clients(&config))
        .await
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(client);

    // Two at once, then one every half second; none fails.
    let t0 = Instant::now();
    for _ in 0..6 {
        namespaces.get("default").await.unwrap();
    }
    assert_eq!(t0.elapsed(), Duration::from_secs(2));
    assert_eq!(count(&fixture, "GET", "/api/v1/namespaces/default"), 6);

    // Refill, then a watch (one token however long it streams) and a GET go through at once;
    // the next GET waits.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let t1 = Instant::now();
    let watch = namespaces
        .watch(&kube::api::WatchParams::default().timeout(290), "0")
        .await
        .unwrap();
    namespaces.get("default").await.unwrap();
    assert_eq!(t1.elapsed(), Duration::ZERO);
    namespaces.get("default").await.unwrap();
    assert_eq!(t1.elapsed(), Duration::from_millis(500));
    drop(watch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_nodes_shows_the_node_ready() {
    let fixture = Fixture::start(None).await.unwrap();
    let mut settings = settings("node-k");
    settings.update_frequency = Duration::from_millis(200);
    let running = start(&fixture, settings);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let ready_now = fixture
            .get::<Node>(None, "node-k")
            .unwrap()
            .is_some_and(|n| ready(&n).status == "True");
        if ready_now {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "node never became Ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let url = fixture.url();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("/usr/bin/kubectl")
            .env("KUBECONFIG", "/dev/null")
            .args(["--server", &url, "get", "nodes", "-o", "wide"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("node-k "))
        .unwrap_or_else(|| panic!("no node-k row in:\n{stdout}"));
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(columns[1], "Ready", "{stdout}");
    assert!(
        columns.contains(&nodelet::node::status::kubelet_version().as_str()),
        "{stdout}"
    );
    assert!(columns.contains(&"10.0.0.7"), "INTERNAL-IP: {stdout}");
    running.stop().await;
}

/// `(type, reason, message)` of the events about Node `name`, oldest first.
fn node_events(recorder: &EventRecorder, name: &str) -> Vec<(String, String, String)> {
    recorder
        .events()
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Node")
                && e.involved_object.name.as_deref() == Some(name)
        })
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn node_events_and_images_follow_the_reported_status() {
    let fixture = Fixture::start(None).await.unwrap();
    let clock = Clock::starting_at(START.parse().unwrap());
    let runtime = Arc::new(FakeRuntime::new(clock));
    runtime.add_image("localhost/pause:1");
    runtime.add_image("localhost/testbox:1");
    let recorder = EventRecorder::new(clock, "kubelet", "node-e");
    let cancel = CancellationToken::new();
    let sink = ApiEventSink::new(client(&fixture), Default::default());
    let sink_task = tokio::spawn(sink.run(recorder.subscribe(), cancel.clone()));
    let t0 = Instant::now();
    let running = start_with(&fixture, settings("node-e"), |agent| {
        agent
            .with_images(runtime.clone())
            .with_events(recorder.clone())
    });
    sleep_until(t0, 1.0).await;

    let images = node(&fixture, "node-e").status.unwrap().images.unwrap();
    let mut names: Vec<String> = images.into_iter().flat_map(|i| i.names.unwrap()).collect();
    names.sort();
    assert_eq!(names, ["localhost/pause:1", "localhost/testbox:1"]);
    let announced = |reason: &str| {
        (
            "Normal".to_string(),
            reason.to_string(),
            format!("Node node-e status is now: {reason}"),
        )
    };
    assert_eq!(
        node_events(&recorder, "node-e"),
        [
            announced("NodeHasSufficientMemory"),
            announced("NodeHasNoDiskPressure"),
            announced("NodeHasSufficientPID"),
            announced("NodeReady"),
        ]
    );

    // Quiet while nothing changes; a transition is announced once, with the patch.
    sleep_until(t0, 35.0).await;
    assert_eq!(node_events(&recorder, "node-e").len(), 4);
    *running.health.lock().unwrap() = vec!["container runtime is down".into()];
    sleep_until(t0, 45.0).await;
    assert_eq!(
        node_events(&recorder, "node-e").last(),
        Some(&announced("NodeNotReady"))
    );
    *running.health.lock().unwrap() = Vec::new();
    // A new image reaches the status at the next update.
    runtime.add_image("localhost/extra:1");
    sleep_until(t0, 55.0).await;
    // The second NodeReady is counted on the first (the correlator), not listed twice.
    let events = node_events(&recorder, "node-e");
    assert_eq!(events.len(), 5, "{events:?}");
    assert_eq!(events.last(), Some(&announced("NodeReady")));
    let images = node(&fixture, "node-e").status.unwrap().images.unwrap();
    assert_eq!(images.len(), 3);

    // The API server has them in `default`, about the Node (UID = its name, as the kubelet's).
    let api: Vec<Event> = fixture
        .list::<Event>(Some("default"))
        .unwrap()
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("Node"))
        .collect();
    let mut reasons: Vec<String> = api.iter().filter_map(|e| e.reason.clone()).collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            "NodeHasNoDiskPressure",
            "NodeHasSufficientMemory",
            "NodeHasSufficientPID",
            "NodeNotReady",
            "NodeReady"
        ],
        "NodeReady twice is one event with count 2"
    );
    let ready = api
        .iter()
        .find(|e| e.reason.as_deref() == Some("NodeReady"))
        .unwrap();
    assert_eq!(ready.count, Some(2));
    assert_eq!(ready.involved_object.uid.as_deref(), Some("node-e"));
    running.stop().await;
    cancel.cancel();
    sink_task.await.unwrap();
}

/// The virtual seconds (since `t0`) at which the count of `method path` requests grew, sampled
/// every second for `seconds`.
async fn request_times(
    fixture: &Fixture,
    t0: Instant,
    method: &str,
    path: &str,
    seconds: u32,
) -> Vec<u32> {
    let mut times = Vec::new();
    let mut seen = 0;
    for second in 0..seconds {
        sleep_until(t0, f64::from(second) + 0.5).await;
        let now = count(fixture, method, path);
        for _ in seen..now {
            times.push(second);
        }
        seen = now;
    }
    times
}

fn fixture_options(server: apiserver_fixture::ServerProfile) -> apiserver_fixture::FixtureOptions {
    apiserver_fixture::FixtureOptions {
        server,
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_server_that_drops_a_node_status_field_gets_bounded_writes() {
    // A server that says it is v1.37 but does not store `nodeInfo.swap` (as if a webhook
    // removed it): nodelet's version table cannot know, so only the convergence backoff
    // keeps the writes bounded.
    // It also drops the Lease's `leaseDurationSeconds`, which every renewal sets again.
    let fixture = Fixture::start_with(fixture_options(apiserver_fixture::ServerProfile {
        release: apiserver_fixture::Release::NEWEST,
        dropped: vec![
            "Node:status.nodeInfo.swap".parse().unwrap(),
            "Lease:spec.leaseDurationSeconds".parse().unwrap(),
        ],
        ..Default::default()
    }))
    .await
    .unwrap();
    let clock = Clock::starting_at(START.parse().unwrap());
    let recorder = EventRecorder::new(clock, "kubelet", "node-x");
    let cancel = CancellationToken::new();
    let sink = ApiEventSink::new(client(&fixture), Default::default());
    let sink_stats = sink.stats();
    let sink_task = tokio::spawn(sink.run(recorder.subscribe(), cancel.clone()));
    let t0 = Instant::now();
    // Defaults: update every 10 s, report every 5 min, Lease renewed every 10 s.
    let running = start_with(&fixture, settings("node-x"), |agent| {
        agent.with_events(recorder.clone())
    });
    let patches = request_times(&fixture, t0, "PATCH", "/api/v1/nodes/node-x/status", 1300).await;
    // Without the backoff this is every 10 s (130 PATCHes). With it: the first report, then
    // the difference again after 10, 20, 40, 80, 160 s, then every 300 s (which is also the
    // report frequency).
    assert_eq!(patches, vec![0, 10, 30, 70, 150, 310, 610, 910, 1210]);
    let updates = running.computations();
    assert!(
        updates >= 129,
        "the status was still computed every 10 s: {updates}"
    );
    assert!(node(&fixture, "node-x")
        .status
        .unwrap()
        .node_info
        .unwrap()
        .swap
        .is_none());
    // The Lease: one renewal per interval whatever the server keeps of it (1300 s / 10 s).
    let renewals = count(
        &fixture,
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-x",
    );
    assert_eq!(renewals, 129, "one create, then a renewal every 10 s");
    // Events: the four conditions announced with the first report, none for the rewrites.
    assert_eq!(node_events(&recorder, "node-x").len(), 4);
    assert_eq!(sink_stats.written(), 4);

    // A real change still goes out at the next update, not after the backoff.
    *running.health.lock().unwrap() = vec!["container runtime is down".into()];
    sleep_until(t0, 1315.0).await;
    assert_eq!(
        count(&fixture, "PATCH", "/api/v1/nodes/node-x/status"),
        patches.len() + 1
    );
    assert_eq!(ready(&node(&fixture, "node-x")).status, "False");
    running.stop().await;
    cancel.cancel();
    sink_task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_older_server_is_not_sent_the_node_status_fields_it_lacks() {
    let fixture = Fixture::start_with(fixture_options(apiserver_fixture::ServerProfile::release(
        apiserver_fixture::Release::new(1, 32),
    )))
    .await
    .unwrap();
    let t0 = Instant::now();
    let running = start(&fixture, settings("node-o"));
    let patches = request_times(&fixture, t0, "PATCH", "/api/v1/nodes/node-o/status", 620).await;
    assert_eq!(patches, vec![0, 300, 600], "only the report frequency");
    assert_eq!(
        count(&fixture, "GET", "/version"),
        2,
        "read at start and again after ten minutes"
    );
    let sent: Vec<_> = fixture
        .request_log()
        .into_iter()
        .filter(|r| r.path.starts_with("/api/v1/nodes"))
        .filter_map(|r| r.body)
        .collect();
    assert!(!sent.is_empty());
    for body in sent {
        assert!(
            body.pointer("/status/nodeInfo/swap").is_none(),
            "nodeInfo.swap sent to a v1.32 server: {body}"
        );
    }
    running.stop().await;
}
