//! Node-pressure eviction on a real containerd, with thresholds this host certainly meets (or
//! certainly does not): `pid.available` below 100000000, more than any `pid_max` allows, so
//! PIDPressure holds from the first pass. Standalone with `evictStaticPods: true`, and in
//! cluster mode against the API server fixture with the real `kubectl`.

mod common;

use std::time::{Duration, Instant};

use apiserver_fixture::Fixture;
use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};

const T: Duration = Duration::from_secs(90);
/// More PIDs than any Linux `pid_max` (at most 4194304): always met.
const ALWAYS_MET: &str = "evictionHard: {pid.available: \"100000000\"}\n";
/// One PID: never met.
const NEVER_MET: &str = "evictionHard: {pid.available: \"1\"}\n";
const PID_MESSAGE_START: &str =
    "The node was low on resource: pids. Threshold quantity: 100000000, available: ";

fn static_pod(name: &str, priority: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{priority}  terminationGracePeriodSeconds: 5\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n"
    )
}

fn status_reason(p: &Pod) -> Option<String> {
    p.status.as_ref()?.reason.clone()
}

fn status_message(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default()
}

fn condition(p: &Pod, type_: &str) -> Option<(String, Option<String>)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

fn evicted(p: &Pod) -> bool {
    phase(p) == "Failed" && status_reason(p).as_deref() == Some("Evicted")
}

/// The status an eviction for PID pressure leaves, exactly as the kubelet's.
fn assert_evicted_status(p: &Pod) {
    assert_eq!(phase(p), "Failed");
    assert_eq!(status_reason(p).as_deref(), Some("Evicted"));
    let message = status_message(p);
    assert!(
        message.starts_with(PID_MESSAGE_START) && message.ends_with(". "),
        "message: {message:?}"
    );
    let available: i64 = message[PID_MESSAGE_START.len()..message.len() - 2]
        .parse()
        .unwrap_or_else(|_| panic!("available is a count: {message:?}"));
    assert!(available > 0 && available < 100_000_000, "{message:?}");
    assert_eq!(
        condition(p, "DisruptionTarget"),
        Some(("True".into(), Some("TerminationByKubelet".into())))
    );
}

/// Positions of the manager's "evicting pod" log lines naming each pod.
fn eviction_order(n: &Nodelet, names: &[&str]) -> Vec<Option<usize>> {
    let logs = n.logs();
    let lines: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("eviction manager: evicting pod"))
        .collect();
    names
        .iter()
        .map(|name| lines.iter().position(|l| l.contains(name)))
        .collect()
}

async fn local_events(n: &Nodelet) -> Vec<serde_json::Value> {
    let Ok(resp) = reqwest::Client::new()
        .get(format!("{}/events", n.base_url()))
        .timeout(Duration::from_secs(5))
        .send()
        .await
    else {
        return Vec::new();
    };
    let v: serde_json::Value = resp.json().await.unwrap_or_default();
    v.get("items")
        .and_then(|i| i.as_array())
        .cloned()
        .unwrap_or_default()
}

fn events_with(events: &[serde_json::Value], object: &str, reason: &str) -> Vec<serde_json::Value> {
    events
        .iter()
        .filter(|e| {
            e["involvedObject"]["name"].as_str() == Some(object)
                && e["reason"].as_str() == Some(reason)
        })
        .cloned()
        .collect()
}

/// Waits until `/metrics`' `name` reaches `at_least`.
async fn wait_metric_at_least(n: &Nodelet, name: &str, at_least: f64) {
    let deadline = Instant::now() + T;
    loop {
        if n.metric(name).await.is_some_and(|v| v >= at_least) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} did not reach {at_least}\n{}",
            tail(&n.logs(), 60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_static_pods_are_evicted_lowest_priority_first_and_critical_never() {
    let mut n = Nodelet::prepare_with(
        "evict_static",
        &format!("{ALWAYS_MET}evictStaticPods: true\n"),
    );
    // Written before nodelet starts, so its first scan (before the first pass) has them all.
    n.write_manifest("low.yaml", &static_pod("low", "  priority: 0\n"));
    n.write_manifest("high.yaml", &static_pod("high", "  priority: 1000\n"));
    n.write_manifest(
        "critical.yaml",
        &static_pod("critical", "  priorityClassName: system-node-critical\n"),
    );
    n.launch();
    let low = n.wait_pod("low", T, "low evicted", evicted).await;
    assert_evicted_status(&low);
    let high = n.wait_pod("high", T, "high evicted next", evicted).await;
    assert_evicted_status(&high);
    let order = eviction_order(&n, &[&n.pod_name("low"), &n.pod_name("high")]);
    assert!(
        matches!(order[..], [Some(a), Some(b)] if a < b),
        "low before high: {order:?}\n{}",
        tail(&n.logs(), 60)
    );
    // Exactly one Warning `Evicted` event on each, and the node's EvictionThresholdMet.
    let events = local_events(&n).await;
    for pod in [n.pod_name("low"), n.pod_name("high")] {
        let evicted = events_with(&events, &pod, "Evicted");
        assert_eq!(evicted.len(), 1, "{pod}: {evicted:?}");
        assert_eq!(evicted[0]["type"], "Warning");
        assert_eq!(evicted[0]["count"].as_i64().unwrap_or(1), 1);
        assert!(evicted[0]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(PID_MESSAGE_START)));
    }
    let met = events_with(&events, &n.node, "EvictionThresholdMet");
    assert!(
        !met.is_empty(),
        "node event EvictionThresholdMet: {events:?}"
    );
    assert_eq!(met[0]["message"], "Attempting to reclaim pids");

    // The critical pod is never evicted: more passes ran after both evictions, pressure
    // still met, and it still runs.
    let passes = n
        .metric("nodelet_eviction_passes_total")
        .await
        .unwrap_or(0.0);
    wait_metric_at_least(&n, "nodelet_eviction_passes_total", passes + 3.0).await;
    let critical = n.pod("critical").await.expect("critical listed");
    assert!(
        all_running(&critical),
        "critical still running: {:?}",
        critical.status
    );
    assert_eq!(n.metric("nodelet_evictions_total").await, Some(2.0));
    assert!(n.logs().contains("eviction manager: no pod may be evicted"));
    // The crossing → kill time of both evictions was measured.
    assert_eq!(
        n.metric("nodelet_eviction_crossing_to_kill_seconds_count")
            .await,
        Some(2.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threshold_the_node_does_not_meet_evicts_nothing() {
    let mut n = Nodelet::prepare_with(
        "evict_never",
        &format!("{NEVER_MET}evictStaticPods: true\n"),
    );
    n.write_manifest("calm.yaml", &static_pod("calm", ""));
    n.launch();
    n.wait_pod("calm", T, "calm running", all_running).await;
    // The positive sign: the manager passed (with a full summary, every 10 s) several times
    // while the pod ran.
    let passes = n
        .metric("nodelet_eviction_passes_total")
        .await
        .unwrap_or(0.0);
    wait_metric_at_least(&n, "nodelet_eviction_passes_total", passes + 12.0).await;
    assert!(
        n.metric("nodelet_eviction_signal_available")
            .await
            .is_some(),
        "signals were read"
    );
    let calm = n.pod("calm").await.expect("calm listed");
    assert!(all_running(&calm), "calm still running: {:?}", calm.status);
    assert_eq!(
        n.metric("nodelet_evictions_total").await,
        None,
        "no eviction counted"
    );
    assert!(events_with(&local_events(&n).await, &n.node, "EvictionThresholdMet").is_empty());
}

fn bound_pod(name: &str, node: &str, priority: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  nodeName: {node}\n{priority}  terminationGracePeriodSeconds: 5\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n"
    )
}

fn node_condition(node: &Node, type_: &str) -> Option<(String, String)> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_eviction_status_events_node_condition_and_admission() {
    let fixture = Fixture::start(None).await.unwrap();
    let api = fixture.url();
    let mut n = Nodelet::prepare_in_cluster(
        "evict_cluster",
        &api,
        &format!("{ALWAYS_MET}podCleanup:\n  retention: 3s\n"),
    );
    // Bound before nodelet starts, so they are admitted before the first pass sees pressure.
    // `owned` (lowest priority, goes first) has a controller: the owner-aware cleanup of
    // seed 001 deletes it after the retention.
    let mut owned: Pod =
        serde_yaml::from_str(&bound_pod("owned", &n.node, "  priority: -10\n")).unwrap();
    owned.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "rs".into(),
            uid: "11111111-2222-3333-4444-555555555555".into(),
            controller: Some(true),
            ..Default::default()
        },
    ]);
    fixture.create(&owned).unwrap();
    for (name, priority) in [
        ("low", "  priority: 0\n"),
        ("high", "  priority: 1000\n"),
        ("critical", "  priorityClassName: system-node-critical\n"),
    ] {
        let pod: Pod = serde_yaml::from_str(&bound_pod(name, &n.node, priority)).unwrap();
        fixture.create(&pod).unwrap();
    }
    n.launch();
    let low = wait_api("low evicted in the API", &n, || {
        api_pod(&fixture, "low").filter(evicted)
    })
    .await;
    assert_evicted_status(&low);
    let high = wait_api("high evicted next", &n, || {
        api_pod(&fixture, "high").filter(evicted)
    })
    .await;
    assert_evicted_status(&high);
    let order = eviction_order(&n, &["pod.name=owned", "pod.name=low", "pod.name=high"]);
    assert!(
        matches!(order[..], [Some(a), Some(b), Some(c)] if a < b && b < c),
        "owned, then low, then high: {order:?}\n{}",
        tail(&n.logs(), 60)
    );
    // kubectl reads the reason. (Its table prints the container's `Completed` over the pod's
    // reason, for the kubelet's evicted pods just the same.)
    let (ok, out, err) = kubectl(
        &api,
        &["get", "pod", "low", "-o", "jsonpath={.status.reason}"],
    );
    assert!(ok && out == "Evicted", "kubectl get pod low: {out}{err}");

    // One Warning `Evicted` event per evicted pod, and the node's EvictionThresholdMet, in
    // the API server's events.
    let events = wait_api("the events in the API", &n, || {
        let (ok, out, _) = kubectl(&api, &["get", "events", "-n", "default", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).ok()?;
        let items = v["items"].as_array()?.clone();
        (ok && events_with(&items, "low", "Evicted").len() == 1
            && events_with(&items, "high", "Evicted").len() == 1
            && !events_with(&items, &n.node, "EvictionThresholdMet").is_empty())
        .then_some(items)
    })
    .await;
    let e = &events_with(&events, "low", "Evicted")[0];
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["message"].as_str(), Some(status_message(&low).as_str()));

    // The node condition goes True, with the kubelet's reason.
    wait_api("PIDPressure True on the node", &n, || {
        let node = fixture.get::<Node>(None, &n.node).ok().flatten()?;
        (node_condition(&node, "PIDPressure")
            == Some(("True".into(), "KubeletHasInsufficientPID".into())))
        .then_some(())
    })
    .await;

    // A new pod is rejected: the condition named.
    kubectl_apply(&api, n.dir.path(), "late", &bound_pod("late", &n.node, ""));
    let late = wait_api("late rejected", &n, || {
        api_pod(&fixture, "late").filter(|p| phase(p) == "Failed")
    })
    .await;
    assert_eq!(status_reason(&late).as_deref(), Some("Evicted"));
    assert_eq!(
        status_message(&late),
        "Pod was rejected: The node had condition: [PIDPressure]. "
    );

    // The critical pod: never evicted. More passes ran after both evictions and the rejection.
    let passes = n
        .metric("nodelet_eviction_passes_total")
        .await
        .unwrap_or(0.0);
    wait_metric_at_least(&n, "nodelet_eviction_passes_total", passes + 3.0).await;
    let critical = api_pod(&fixture, "critical").expect("critical in the API");
    assert_eq!(phase(&critical), "Running", "{:?}", critical.status);
    assert_eq!(n.metric("nodelet_evictions_total").await, Some(3.0));
    // The evicted pod with a controller is deleted after the retention (seed 001), with
    // nodelet's DELETE; bare evicted pods stay visible (podCleanup's default).
    wait_api("owned deleted after the retention", &n, || {
        api_pod(&fixture, "owned").is_none().then_some(())
    })
    .await;
    let delete = fixture
        .request_log()
        .into_iter()
        .find(|r| r.method == "DELETE" && r.path.ends_with("/pods/owned"))
        .expect("nodelet's DELETE of owned");
    assert!(delete.body.unwrap()["preconditions"]["uid"].is_string());
    assert!(
        api_pod(&fixture, "low").is_some(),
        "a bare evicted pod is kept"
    );
}

/// A static pod writing `kib` KiB into its emptyDir `cache` (limited to 1Mi), then sleeping.
fn writer_pod(name: &str, kib: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 5\n  \
         volumes:\n  - name: cache\n    emptyDir: {{sizeLimit: 1Mi}}\n  containers:\n  - name: main\n    \
         image: {TESTBOX}\n    imagePullPolicy: Never\n    command: [/bin/sh, -c, 'dd if=/dev/zero of=/cache/f bs=1024 count={kib} && exec sleep 3600']\n    \
         volumeMounts:\n    - {{name: cache, mountPath: /cache}}\n"
    )
}

/// Local storage: an emptyDir over its `sizeLimit` is evicted with the kubelet's message (and
/// no node threshold met); one below its limit stays, through passes that saw its usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_dir_over_its_size_limit_is_evicted_and_one_below_is_not() {
    let mut n = Nodelet::prepare_with(
        "evict_emptydir",
        &format!("{NEVER_MET}evictStaticPods: true\n"),
    );
    n.write_manifest("over.yaml", &writer_pod("over", 2048));
    n.write_manifest("under.yaml", &writer_pod("under", 512));
    n.launch();
    // Volumes are walked at most once a minute: allow for a walk that came before the write.
    let long = Duration::from_secs(180);
    let over = n.wait_pod("over", long, "over evicted", evicted).await;
    assert_eq!(phase(&over), "Failed");
    assert_eq!(
        status_message(&over),
        "Usage of EmptyDir volume \"cache\" exceeds the limit \"1Mi\". "
    );
    assert_eq!(
        condition(&over, "DisruptionTarget"),
        None,
        "no DisruptionTarget for local storage, as the kubelet"
    );
    let events = local_events(&n).await;
    let e = events_with(&events, &n.pod_name("over"), "Evicted");
    assert_eq!(e.len(), 1, "{events:?}");
    assert_eq!(
        e[0]["message"].as_str(),
        Some(status_message(&over).as_str())
    );
    assert_eq!(
        n.metric("nodelet_evictions_total{eviction_signal=\"emptydirfs.limit\"}")
            .await,
        Some(1.0)
    );
    // The positive sign: the summary has measured `under`'s 512 KiB; then two more full passes
    // (every 10 s) ran, and it still runs.
    let under_name = n.pod_name("under");
    let deadline = Instant::now() + long;
    loop {
        let summary: serde_json::Value = reqwest::get(format!("{}/stats/summary", n.base_url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let used = summary["pods"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["podRef"]["name"] == under_name.as_str())
            .flat_map(|p| p["volume"].as_array().cloned().unwrap_or_default())
            .find(|v| v["name"] == "cache")
            .and_then(|v| v["usedBytes"].as_u64())
            .unwrap_or(0);
        if used >= 512 * 1024 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "under's emptyDir never measured: {summary}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let passes = n
        .metric("nodelet_eviction_passes_total")
        .await
        .unwrap_or(0.0);
    wait_metric_at_least(&n, "nodelet_eviction_passes_total", passes + 22.0).await;
    let under = n.pod("under").await.expect("under listed");
    assert!(
        all_running(&under),
        "under still running: {:?}",
        under.status
    );
    assert_eq!(n.metric("nodelet_evictions_total").await, Some(1.0));
}

/// `pid.available` as nodelet reads it: min(`pid_max`, `threads-max`) − the tasks in
/// `/proc/loadavg`.
fn pids_available() -> i64 {
    let read = |p: &str| -> i64 {
        std::fs::read_to_string(p)
            .unwrap_or_else(|e| panic!("{p}: {e}"))
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{p}: {e}"))
    };
    let limit = read("/proc/sys/kernel/pid_max").min(read("/proc/sys/kernel/threads-max"));
    let loadavg = std::fs::read_to_string("/proc/loadavg").expect("/proc/loadavg");
    let tasks: i64 = loadavg
        .split_whitespace()
        .nth(3)
        .and_then(|f| f.split_once('/'))
        .and_then(|(_, total)| total.parse().ok())
        .unwrap_or_else(|| panic!("/proc/loadavg: {loadavg}"));
    limit - tasks
}

/// A PID-hungry pod: with `pid.available` set 1500 below what the node has free, a pod that
/// starts 2500 processes is evicted (PID ranking: priority, then process count), a quiet pod of
/// the same priority is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pid_hungry_pod_is_evicted_under_a_low_pid_available_threshold() {
    let threshold = pids_available() - 1500;
    let mut n = Nodelet::prepare_with(
        "evict_pids",
        &format!("evictionHard: {{pid.available: \"{threshold}\"}}\nevictStaticPods: true\n"),
    );
    n.write_manifest("quiet.yaml", &static_pod("quiet", ""));
    n.launch();
    let quiet = n.wait_pod("quiet", T, "quiet running", all_running).await;
    let passes = n
        .metric("nodelet_eviction_passes_total")
        .await
        .unwrap_or(0.0);
    wait_metric_at_least(&n, "nodelet_eviction_passes_total", passes + 2.0).await;
    assert_eq!(
        n.metric("nodelet_evictions_total").await.unwrap_or(0.0),
        0.0,
        "nothing yet"
    );
    n.write_manifest(
        "hungry.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hungry\nspec:\n  terminationGracePeriodSeconds: 5\n  \
             containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    \
             command: [/bin/sh, -c, 'i=0; while [ $i -lt 2500 ]; do sleep 3600 & i=$((i+1)); done; wait']\n"
        ),
    );
    let hungry = n.wait_pod("hungry", T, "hungry evicted", evicted).await;
    let message = status_message(&hungry);
    assert!(
        message.starts_with(&format!(
            "The node was low on resource: pids. Threshold quantity: {threshold}, available: "
        )),
        "{message:?}"
    );
    let passes = n
        .metric("nodelet_eviction_passes_total")
        .await
        .unwrap_or(0.0);
    wait_metric_at_least(&n, "nodelet_eviction_passes_total", passes + 3.0).await;
    let now = n.pod("quiet").await.expect("quiet listed");
    assert!(all_running(&now), "quiet still running: {:?}", now.status);
    assert_eq!(
        running_ids(&now),
        running_ids(&quiet),
        "quiet's container kept"
    );
    assert_eq!(
        n.metric("nodelet_evictions_total{eviction_signal=\"pid.available\"}")
            .await,
        Some(1.0)
    );
}
