//! Node-pressure eviction on a real containerd, with thresholds this host certainly meets (or
//! certainly does not): `pid.available` below 100000000, more than any `pid_max` allows, so
//! PIDPressure holds from the first pass. Standalone with `evictStaticPods: true`, and in
//! cluster mode against the real v1.37.2 control plane with the real `kubectl`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use nodelet_testkit::pod::{all_running, phase, running_ids};
use nodelet_testkit::tail;

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

    // Admission under pressure: a new static pod, evictable with evictStaticPods, is rejected
    // as the kubelet's `Admit` rejects a non-critical pod; a new critical one is admitted.
    n.write_manifest("late.yaml", &static_pod("late", ""));
    n.write_manifest(
        "late-critical.yaml",
        &static_pod(
            "late-critical",
            "  priorityClassName: system-node-critical\n",
        ),
    );
    let late = n
        .wait_pod("late", T, "late rejected", |p| phase(p) == "Failed")
        .await;
    assert_eq!(status_reason(&late).as_deref(), Some("Evicted"));
    assert_eq!(
        status_message(&late),
        "Pod was rejected: The node had condition: [PIDPressure]. "
    );
    assert!(
        late.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_none_or(|c| c.iter().all(|c| c.container_id.is_none())),
        "late never started a container: {:?}",
        late.status
    );
    let rejected = events_with(&local_events(&n).await, &n.pod_name("late"), "Evicted");
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(
        rejected[0]["message"],
        "The node had condition: [PIDPressure]. "
    );
    n.wait_pod("late-critical", T, "late-critical running", all_running)
        .await;
}

/// Without `evictStaticPods`, static pods are critical as the kubelet's: under pressure none is
/// evicted and a new one is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_evict_static_pods_static_pods_stay_critical_under_pressure() {
    let mut n = Nodelet::prepare_with("evict_static_off", ALWAYS_MET);
    n.write_manifest("first.yaml", &static_pod("first", ""));
    n.launch();
    n.wait_pod("first", T, "first running", all_running).await;
    // The positive sign: the manager saw the pressure and found no pod it may evict.
    let deadline = Instant::now() + T;
    while !n.logs().contains("eviction manager: no pod may be evicted") {
        assert!(
            Instant::now() < deadline,
            "the manager never looked for a pod\n{}",
            tail(&n.logs(), 60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    n.write_manifest("second.yaml", &static_pod("second", ""));
    n.wait_pod("second", T, "second running under pressure", all_running)
        .await;
    let first = n.pod("first").await.expect("first listed");
    assert!(all_running(&first), "first: {:?}", first.status);
    assert_eq!(n.metric("nodelet_evictions_total").await, None);
    assert!(!n.logs().contains("pod rejected at admission"));
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

fn bound_pod(name: &str, namespace: &str, node: &str, priority: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  nodeName: {node}\n{priority}  terminationGracePeriodSeconds: 5\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n"
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
    let server = RealServer::start("evict-cluster");
    let api = server.api();
    let ns = server.namespace();
    let mut n = Nodelet::prepare_in_real_cluster(
        "evict_cluster",
        &server,
        &format!("{ALWAYS_MET}podCleanup:\n  retention: 3s\n"),
    );
    // Priorities through PriorityClasses of the test's own (the API server's Priority admission
    // refuses a bare `priority`).
    for (class, value) in [("last", -10), ("high", 1000)] {
        server.create(&format!(
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: {ns}-{class}\nvalue: {value}\n"
        ));
    }
    // Bound before nodelet starts, so they are admitted before the first pass sees pressure.
    // `owned` (lowest priority, goes first) has a controller: the owner-aware cleanup of
    // seed 001 deletes it after the retention. The owner exists (the garbage collector deletes
    // a pod whose owner does not) and is managed by no controller: a ConfigMap.
    server.kubectl_ok(&["create", "configmap", "rs"]);
    let rs: k8s_openapi::api::core::v1::ConfigMap =
        server.object(Some(&ns), "rs").expect("the owner");
    let owned = bound_pod(
        "owned",
        &ns,
        &n.node,
        &format!("  priorityClassName: {ns}-last\n"),
    )
    .replace(
        "  namespace: ",
        &format!(
            "  ownerReferences:\n  - {{apiVersion: v1, kind: ConfigMap, name: rs, uid: {}, controller: true}}\n  namespace: ",
            rs.metadata.uid.unwrap()
        ),
    );
    server.create(&owned);
    for (name, priority) in [
        ("low", String::new()),
        ("high", format!("  priorityClassName: {ns}-high\n")),
        (
            "critical",
            "  priorityClassName: system-node-critical\n".to_string(),
        ),
    ] {
        server.create(&bound_pod(name, &ns, &n.node, &priority));
    }
    n.launch();
    let low = wait_api("low evicted in the API", &n, || {
        api_pod(&server, "low").filter(evicted)
    })
    .await;
    assert_evicted_status(&low);
    let high = wait_api("high evicted next", &n, || {
        api_pod(&server, "high").filter(evicted)
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
        // The pods' events in the test's namespace, the node's in `default`.
        let mut items = Vec::new();
        let mut ok = true;
        for namespace in [ns.as_str(), "default"] {
            let (listed, out, _) = kubectl(&api, &["get", "events", "-n", namespace, "-o", "json"]);
            let v: serde_json::Value = serde_json::from_str(&out).ok()?;
            items.extend(v["items"].as_array()?.iter().cloned());
            ok &= listed;
        }
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
        let node = server.object::<Node>(None, &n.node)?;
        (node_condition(&node, "PIDPressure")
            == Some(("True".into(), "KubeletHasInsufficientPID".into())))
        .then_some(())
    })
    .await;

    // A new pod is rejected: the condition named.
    kubectl_apply(
        &api,
        n.dir.path(),
        "late",
        &bound_pod("late", &ns, &n.node, ""),
    );
    let late = wait_api("late rejected", &n, || {
        api_pod(&server, "late").filter(|p| phase(p) == "Failed")
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
    let critical = api_pod(&server, "critical").expect("critical in the API");
    assert_eq!(phase(&critical), "Running", "{:?}", critical.status);
    assert_eq!(n.metric("nodelet_evictions_total").await, Some(3.0));
    // The evicted pod with a controller is deleted after the retention (seed 001), with
    // nodelet's DELETE; bare evicted pods stay visible (podCleanup's default).
    wait_api("owned deleted after the retention", &n, || {
        api_pod(&server, "owned").is_none().then_some(())
    })
    .await;
    let delete = server
        .requests()
        .into_iter()
        .find(|r| r.method == "DELETE" && r.path.ends_with("/pods/owned"))
        .expect("nodelet's DELETE of owned");
    assert!(delete.body.unwrap()["preconditions"]["uid"].is_string());
    assert!(
        api_pod(&server, "low").is_some(),
        "a bare evicted pod is kept"
    );
    for class in ["last", "high"] {
        server.kubectl(&["delete", "priorityclass", &format!("{ns}-{class}")]);
    }
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
        let (summary, pod) = summary_pod(&n, &under_name).await;
        let used = pod
            .and_then(|p| p["volume"].as_array().cloned())
            .into_iter()
            .flatten()
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

/// A static pod whose container `main` has an `ephemeral-storage` limit and writes
/// `rootfs_kib` KiB into its writable layer and `volume_kib` KiB into an emptyDir without a
/// `sizeLimit`, then sleeps; `spec` adds spec lines, `containers` more containers (YAML).
fn storage_pod(
    name: &str,
    limit: &str,
    (rootfs_kib, volume_kib): (u32, u32),
    spec: &str,
    containers: &str,
) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 5\n{spec}  \
         volumes:\n  - name: scratch\n    emptyDir: {{}}\n  containers:\n  - name: main\n    \
         image: {TESTBOX}\n    imagePullPolicy: Never\n    \
         resources: {{limits: {{ephemeral-storage: {limit}}}}}\n    \
         command: [/bin/sh, -c, 'dd if=/dev/zero of=/fill bs=1024 count={rootfs_kib} && dd if=/dev/zero of=/scratch/f bs=1024 count={volume_kib} && exec sleep 3600']\n    \
         volumeMounts:\n    - {{name: scratch, mountPath: /scratch}}\n{containers}"
    )
}

/// The Summary's ephemeral-storage use of pod `name` (bytes), 0 while unmeasured.
async fn pod_ephemeral_used(n: &Nodelet, name: &str) -> u64 {
    summary_pod(n, &n.pod_name(name))
        .await
        .1
        .and_then(|p| p["ephemeral-storage"]["usedBytes"].as_u64())
        .unwrap_or(0)
}

/// nodelet's `/stats/summary`, and in it the entry of the pod named `full_name` (as listed).
async fn summary_pod(
    n: &Nodelet,
    full_name: &str,
) -> (serde_json::Value, Option<serde_json::Value>) {
    let summary: serde_json::Value = reqwest::get(format!("{}/stats/summary", n.base_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pod = summary["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["podRef"]["name"] == full_name)
        .cloned();
    (summary, pod)
}

/// Local storage on the writable layer: a container over its own `ephemeral-storage` limit,
/// and a pod over its containers' limits plus its `spec.overhead` (the kubelet's `PodLimits`),
/// each evicted with the kubelet's message; a pod over its containers' limits but within the
/// overhead-included total stays, through passes that saw its usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_and_pods_over_their_ephemeral_storage_limits_are_evicted() {
    let mut n = Nodelet::prepare_with(
        "evict_ephemeral",
        &format!("{NEVER_MET}evictStaticPods: true\n"),
    );
    // main: 2 MiB in its writable layer against its own 1Mi; the second container's 10Mi keeps
    // the pod total clear, so the container's own limit is what it breaks.
    n.write_manifest(
        "container-over.yaml",
        &storage_pod(
            "container-over",
            "1Mi",
            (2048, 0),
            "",
            &format!(
                "  - name: roomy\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n    \
                 resources: {{limits: {{ephemeral-storage: 10Mi}}}}\n"
            ),
        ),
    );
    let overhead = "  overhead: {ephemeral-storage: 2Mi}\n";
    // 512 KiB in the layer (within main's 2Mi), 4 MiB in the emptyDir: over 2Mi + 2Mi overhead.
    n.write_manifest(
        "pod-over.yaml",
        &storage_pod("pod-over", "2Mi", (512, 4096), overhead, ""),
    );
    // 512 KiB + 2.5 MiB: over the containers' 2Mi, within 2Mi + 2Mi overhead.
    n.write_manifest(
        "pod-under.yaml",
        &storage_pod("pod-under", "2Mi", (512, 2560), overhead, ""),
    );
    n.launch();
    let long = Duration::from_secs(180);
    let over = n
        .wait_pod("container-over", long, "container-over evicted", evicted)
        .await;
    assert_eq!(
        status_message(&over),
        "Container main exceeded its local ephemeral storage limit \"1Mi\". "
    );
    let pod_over = n
        .wait_pod("pod-over", long, "pod-over evicted", evicted)
        .await;
    assert_eq!(
        status_message(&pod_over),
        "Pod ephemeral local storage usage exceeds the total limit of containers 4Mi. "
    );
    let events = local_events(&n).await;
    for p in [&over, &pod_over] {
        assert_eq!(condition(p, "DisruptionTarget"), None);
        let name = p.metadata.name.clone().unwrap_or_default();
        let e = events_with(&events, &name, "Evicted");
        assert_eq!(e.len(), 1, "{name}: {events:?}");
        assert_eq!(e[0]["message"].as_str(), Some(status_message(p).as_str()));
    }
    assert_eq!(
        n.metric("nodelet_evictions_total{eviction_signal=\"ephemeralcontainerfs.limit\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(
        n.metric("nodelet_evictions_total{eviction_signal=\"ephemeralpodfs.limit\"}")
            .await,
        Some(1.0)
    );
    // The positive sign: pod-under's use measured above its containers' 2Mi; then two more
    // full passes ran, and it still runs.
    let deadline = Instant::now() + long;
    while pod_ephemeral_used(&n, "pod-under").await <= 2 << 20 {
        assert!(
            Instant::now() < deadline,
            "pod-under's use never measured above 2Mi\n{}",
            tail(&n.logs(), 40)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let passes = n
        .metric("nodelet_eviction_passes_total")
        .await
        .unwrap_or(0.0);
    wait_metric_at_least(&n, "nodelet_eviction_passes_total", passes + 22.0).await;
    let under = n.pod("pod-under").await.expect("pod-under listed");
    assert!(all_running(&under), "pod-under: {:?}", under.status);
    assert_eq!(n.metric("nodelet_evictions_total").await, Some(2.0));
}

/// A memory-backed emptyDir: its tmpfs is sized to the `sizeLimit` (the kubelet's
/// SizeMemoryBackedVolumes: the smallest of sizeLimit, the pod's memory limit and node
/// allocatable), and what is written into it is charged to the pod's memory cgroup, so it is
/// the pod's memory in the Summary (and in memory-pressure ranking).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_empty_dir_is_sized_to_its_limit_and_counts_as_the_pods_memory() {
    let mut n = Nodelet::prepare_with("evict_memory_dir", NEVER_MET);
    n.write_manifest(
        "mem.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: mem\nspec:\n  terminationGracePeriodSeconds: 5\n  \
             volumes:\n  - name: ram\n    emptyDir: {{medium: Memory, sizeLimit: 24Mi}}\n  containers:\n  - name: main\n    \
             image: {TESTBOX}\n    imagePullPolicy: Never\n    \
             resources: {{limits: {{memory: 256Mi}}}}\n    \
             command: [/bin/sh, -c, 'dd if=/dev/zero of=/ram/f bs=1M count=16 && exec sleep 3600']\n    \
             volumeMounts:\n    - {{name: ram, mountPath: /ram}}\n"
        ),
    );
    n.launch();
    let pod = n.wait_pod("mem", T, "mem running", all_running).await;
    let uid = pod.metadata.uid.clone().expect("uid");
    let suffix = format!("{uid}/volumes/kubernetes.io~empty-dir/ram");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let line = mountinfo
        .lines()
        .find(|l| {
            l.split_whitespace()
                .nth(4)
                .is_some_and(|m| m.ends_with(&suffix))
        })
        .unwrap_or_else(|| panic!("no mount of {suffix}:\n{mountinfo}"));
    assert!(
        line.contains(" - tmpfs ") && line.contains("size=24576k"),
        "a tmpfs of 24Mi (min of sizeLimit 24Mi and the pod's 256Mi): {line}"
    );
    // The 16 MiB written are the pod's memory: its working set is at least that.
    let name = n.pod_name("mem");
    let deadline = Instant::now() + T;
    loop {
        let (summary, pod) = summary_pod(&n, &name).await;
        let working_set = pod
            .and_then(|p| p["memory"]["workingSetBytes"].as_u64())
            .unwrap_or(0);
        if working_set >= 16 << 20 {
            println!("memory emptyDir: pod working set {working_set} bytes after 16 MiB written");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pod's working set never reached 16 MiB (last {working_set}): {}",
            summary["pods"]
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
