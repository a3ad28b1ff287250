//! Node-pressure eviction for memory on a cgroup v2 node under systemd (the VM test bed, see
//! tests/vm/mod.rs), in cluster mode against the API server fixture, which runs inside the
//! guest next to nodelet. Real hogs (testbox `alloc`) use real memory; `memory.available` is
//! what the kernel's root cgroup says.
//!
//! Thresholds are set relative to what the VM has free when the step begins, so the step does
//! not depend on the VM's size: nodelet starts without a threshold, the pods that should stay
//! start and settle, and nodelet restarts (adopting them) with `memory.available` a little
//! below what is free then.

mod common;
mod vm;

use std::time::{Duration, Instant};

use apiserver_fixture::Fixture;
use common::TESTBOX;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use nodelet_testkit::pod::phase;
use vm::{Driver, Guest, Qos, T};

const MI: u64 = 1 << 20;
/// `memory.available` for the fast hog (see [`fast_hog_is_evicted_before_the_kernel_oom_killer`]).
const FAST_HOG_THRESHOLD: &str = "900Mi";
/// nodelet's PSI signal for [`memory_pressure_stall_evicts_the_throttled_pod`].
const PSI_THRESHOLD: &str = "20%";

#[test]
fn memory_eviction() {
    vm::scenario("memory_eviction", Driver::Systemd, eviction_checks);
}

async fn eviction_checks(node: Guest) {
    let fixture = Fixture::start(None)
        .await
        .expect("start the API server fixture");
    let cluster = Cluster::new(&fixture);
    lower_priority_hog_goes_first_and_guaranteed_never(&node, &cluster).await;
    fast_hog_is_evicted_before_the_kernel_oom_killer(&node, &cluster).await;
    standalone_static_hogs_with_evict_static_pods(&node).await;
    memory_pressure_stall_evicts_the_throttled_pod(&node).await;
}

/// The fixture's address in a kubeconfig nodelet reads, and the configuration lines for it.
struct Cluster<'a> {
    fixture: &'a Fixture,
    extra: String,
}

impl<'a> Cluster<'a> {
    fn new(fixture: &'a Fixture) -> Cluster<'a> {
        let path = "/etc/nodelet/kubeconfig";
        std::fs::write(
            path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fixture\n  cluster:\n    server: {}\n\
                 users:\n- name: nodelet\n  user: {{}}\ncontexts:\n- name: fixture\n  context:\n    \
                 cluster: fixture\n    user: nodelet\ncurrent-context: fixture\n",
                fixture.url()
            ),
        )
        .expect("write kubeconfig");
        Cluster {
            fixture,
            extra: format!(
                "kubeconfig: {path}\nnodeStatusUpdateFrequency: 2s\nnodeLeaseDurationSeconds: 8\n"
            ),
        }
    }

    /// (Re)starts nodelet joined to the fixture, with `eviction` (YAML lines) added.
    fn start_nodelet(&self, node: &Guest, eviction: &str) {
        if node.unit("nodelet.service", "ActiveState") == "active" {
            node.systemctl(&["stop", "nodelet.service"]);
        }
        node.start_nodelet(&format!("{}{eviction}", self.extra));
    }

    fn create(&self, node: &Guest, yaml: &str) {
        let mut pod: Pod = serde_yaml::from_str(yaml).expect("pod yaml");
        pod.spec.as_mut().expect("spec").node_name = Some(node.node.clone());
        self.fixture.create(&pod).expect("create pod");
    }

    fn pod(&self, name: &str) -> Option<Pod> {
        self.fixture
            .get::<Pod>(Some("default"), name)
            .ok()
            .flatten()
    }

    fn node(&self, node: &Guest) -> Option<Node> {
        self.fixture.get::<Node>(None, &node.node).ok().flatten()
    }

    fn events(&self) -> Vec<Event> {
        self.fixture
            .list::<Event>(Some("default"))
            .unwrap_or_default()
    }

    /// Polls `check` against the fixture until it gives a value; fails with nodelet's journal.
    async fn wait<V>(&self, node: &Guest, what: &str, mut check: impl FnMut() -> Option<V>) -> V {
        let deadline = Instant::now() + T;
        loop {
            if let Some(v) = check() {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} after {T:?}\n--- pods in the API ---\n{}\n--- nodelet journal ---\n{}",
                self.pods_summary(),
                node.journal(60)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// One line per pod in the API: phase, reason and each container's state, for failures.
    fn pods_summary(&self) -> String {
        let pods = match self.fixture.list::<Pod>(Some("default")) {
            Ok(pods) => pods,
            Err(e) => return format!("(listing pods: {e})"),
        };
        pods.iter()
            .map(|p| {
                let status = p.status.clone().unwrap_or_default();
                let containers: Vec<String> = status
                    .container_statuses
                    .iter()
                    .flatten()
                    .map(|c| {
                        let state = c.state.clone().unwrap_or_default();
                        let what = if let Some(w) = state.waiting {
                            format!("waiting {}", w.reason.unwrap_or_default())
                        } else if let Some(t) = state.terminated {
                            format!(
                                "terminated {} {}",
                                t.exit_code,
                                t.reason.unwrap_or_default()
                            )
                        } else if state.running.is_some() {
                            "running".to_string()
                        } else {
                            "no state".to_string()
                        };
                        format!("{}={what}", c.name)
                    })
                    .collect();
                format!(
                    "{} phase={} reason={:?} message={:?} containers=[{}]",
                    p.metadata.name.clone().unwrap_or_default(),
                    phase(p),
                    status.reason.unwrap_or_default(),
                    status.message.unwrap_or_default(),
                    containers.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn wait_running(&self, node: &Guest, name: &str) -> Pod {
        self.wait(node, &format!("{name} Running"), || {
            self.pod(name).filter(|p| phase(p) == "Running")
        })
        .await
    }
}

/// A pod of one testbox container; `resources` and `priority` are YAML lines (or "").
fn pod_yaml(name: &str, args: &str, priority: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n\
         {priority}  terminationGracePeriodSeconds: 5\n  containers:\n  - name: main\n    \
         image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [{args}]\n{resources}"
    )
}

/// `memory.available` as nodelet computes it: capacity (`MemTotal`) less the root cgroup's
/// working set (`anon + file − inactive_file` of its `memory.stat`).
fn memory_available() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").expect("/proc/meminfo");
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("MemTotal");
    let stat = std::fs::read_to_string("/sys/fs/cgroup/memory.stat").expect("root memory.stat");
    let field = |name: &str| -> u64 {
        stat.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("root memory.stat has no {name}"))
    };
    let working_set = (field("anon") + field("file")).saturating_sub(field("inactive_file"));
    (total_kib * 1024).saturating_sub(working_set)
}

/// The kernel's OOM kills since boot (`/proc/vmstat` `oom_kill`).
fn kernel_oom_kills() -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .expect("/proc/vmstat")
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
        .expect("/proc/vmstat oom_kill")
}

fn status_reason(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.reason.clone())
        .unwrap_or_default()
}

fn status_message(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default()
}

fn evicted(p: &Pod) -> bool {
    phase(p) == "Failed" && status_reason(p) == "Evicted"
}

fn pod_condition(p: &Pod, type_: &str) -> Option<(String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

fn node_condition(n: &Node, type_: &str) -> Option<(String, String)> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

/// The status a memory eviction leaves: phase, reason, the kubelet's message for container
/// `main` of a pod without requests, and `DisruptionTarget`.
fn assert_memory_evicted(p: &Pod, threshold: &str) {
    let name = p.metadata.name.clone().unwrap_or_default();
    assert_eq!(phase(p), "Failed", "{name}: {:?}", p.status);
    assert_eq!(status_reason(p), "Evicted", "{name}");
    let message = status_message(p);
    let start = format!(
        "The node was low on resource: memory. Threshold quantity: {threshold}, available: "
    );
    assert!(
        message.starts_with(&start)
            && message.contains(". Container main was using ")
            && message.ends_with(", request is 0, has larger consumption of memory. "),
        "{name}: message {message:?}"
    );
    assert_eq!(
        pod_condition(p, "DisruptionTarget"),
        Some(("True".into(), "TerminationByKubelet".into())),
        "{name}: {:?}",
        p.status
    );
}

/// In MiB, rounded down: the threshold's quantity as written in the configuration.
fn mib(bytes: u64) -> u64 {
    bytes / MI
}

/// A `memory.available` threshold met once about 150 MiB more are in use than now.
fn threshold_150mi_below_free(step: &str) -> String {
    let threshold = format!("{}Mi", mib(memory_available()).saturating_sub(150));
    println!("vm scenario: {step}: memory.available threshold {threshold}");
    threshold
}

async fn lower_priority_hog_goes_first_and_guaranteed_never(node: &Guest, cluster: &Cluster<'_>) {
    let _step = node
        .step("memory pressure: the lower-priority hog is evicted first, the Guaranteed pod never");
    cluster.start_nodelet(node, "");
    cluster.create(
        node,
        &pod_yaml(
            "guaranteed",
            "serve",
            "",
            "    resources: {limits: {memory: 64Mi, cpu: 100m}}\n",
        ),
    );
    // The higher-priority hog holds more than the lower-priority one will: ranking by usage
    // alone would pick it; the kubelet's ranking takes priority first.
    cluster.create(
        node,
        &pod_yaml(
            "hog-high",
            "alloc, --mib, \"200\", --hold",
            "  priority: 1000\n",
            "",
        ),
    );
    cluster.wait_running(node, "guaranteed").await;
    cluster.wait_running(node, "hog-high").await;
    node.wait_for("hog-high holding 200 MiB", || hog_rss_at_least(200 * MI))
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The lower-priority hog takes 400 MiB slowly. The condition stays True for three minutes
    // after the eviction relieves the node: the node status and the late pod's rejection must be
    // seen inside that window, and on a loaded host the emulated guest's writes to the fixture
    // can time out for over a minute (CI, 2026-12-03: every node status write failed for 30 s of
    // a 30 s window; 2026-12-07: for the 69 s of a 60 s window).
    let threshold = threshold_150mi_below_free("cluster mode");
    cluster.start_nodelet(
        node,
        &format!(
            "evictionHard: {{memory.available: {threshold}}}\nevictionPressureTransitionPeriod: 180s\n"
        ),
    );
    let passes_before = node
        .wait_metric("nodelet_eviction_passes_total", "an eviction pass", |v| {
            v >= 1.0
        })
        .await;
    cluster.create(
        node,
        &pod_yaml(
            "hog-low",
            "alloc, --mib, \"400\", --chunk-mib, \"4\", --interval, 100ms, --hold",
            "  priority: 0\n",
            "",
        ),
    );
    let low = cluster
        .wait(node, "hog-low evicted", || {
            cluster.pod("hog-low").filter(evicted)
        })
        .await;
    assert_memory_evicted(&low, &threshold);
    let crossing = node
        .metric("nodelet_eviction_crossing_to_kill_seconds_sum")
        .await
        .unwrap_or(f64::NAN);
    println!("vm scenario: memory threshold crossing to kill: {crossing:.3} s (goal ≤ 1 s)");

    // The node says MemoryPressure, with the kubelet's reason, and records the crossing.
    cluster
        .wait(node, "MemoryPressure True on the node", || {
            let n = cluster.node(node)?;
            (node_condition(&n, "MemoryPressure")
                == Some(("True".into(), "KubeletHasInsufficientMemory".into())))
            .then_some(())
        })
        .await;
    let events = cluster
        .wait(node, "the Evicted and EvictionThresholdMet events", || {
            let events = cluster.events();
            let has = |object: &str, reason: &str| {
                events.iter().any(|e| {
                    e.involved_object.name.as_deref() == Some(object)
                        && e.reason.as_deref() == Some(reason)
                })
            };
            (has("hog-low", "Evicted") && has(&node.node, "EvictionThresholdMet")).then_some(events)
        })
        .await;
    let evicted_events: Vec<_> = events
        .iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some("hog-low")
                && e.reason.as_deref() == Some("Evicted")
        })
        .collect();
    assert_eq!(evicted_events.len(), 1, "{evicted_events:?}");
    assert_eq!(evicted_events[0].type_.as_deref(), Some("Warning"));
    assert_eq!(
        evicted_events[0].message.as_deref(),
        Some(status_message(&low).as_str())
    );

    // Under MemoryPressure a new BestEffort pod is rejected.
    cluster.create(node, &pod_yaml("late", "serve", "", ""));
    let late = cluster
        .wait(node, "late rejected", || {
            cluster.pod("late").filter(|p| phase(p) == "Failed")
        })
        .await;
    assert_eq!(status_reason(&late), "Evicted");
    assert_eq!(
        status_message(&late),
        "Pod was rejected: The node had condition: [MemoryPressure]. "
    );

    // Memory is back: the condition clears after the transition period, and by then more passes
    // ran without evicting the higher-priority hog or the Guaranteed pod.
    cluster
        .wait(node, "MemoryPressure False again", || {
            let n = cluster.node(node)?;
            (node_condition(&n, "MemoryPressure").map(|c| c.0) == Some("False".into()))
                .then_some(())
        })
        .await;
    let passes = node.metric_now("nodelet_eviction_passes_total").await;
    assert!(
        passes > passes_before + 5.0,
        "passes {passes_before} → {passes}"
    );
    for name in ["hog-high", "guaranteed"] {
        let p = cluster.pod(name).expect("listed");
        assert_eq!(phase(&p), "Running", "{name}: {:?}", p.status);
    }
    assert_eq!(
        node.metric_now("nodelet_evictions_total").await,
        1.0,
        "one eviction"
    );
    for name in ["hog-high", "hog-low", "late"] {
        let _ = cluster
            .fixture
            .delete::<Pod>(Some("default"), name, &Default::default());
    }
}

/// Whether some process holds at least `bytes` resident (the hog, after allocating).
fn hog_rss_at_least(bytes: u64) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        std::fs::read_to_string(e.path().join("status"))
            .ok()
            .and_then(|s| nodelet_testkit::proc::parse_vm_rss_kib(&s))
            .is_some_and(|kib| kib * 1024 >= bytes)
    })
}

async fn fast_hog_is_evicted_before_the_kernel_oom_killer(node: &Guest, cluster: &Cluster<'_>) {
    let _step = node.step("a hog allocating 100 MiB/s is evicted before the kernel OOM killer");
    cluster
        .wait(node, "the first step's pods gone", || {
            cluster.pod("hog-high").is_none().then_some(())
        })
        .await;
    // A threshold of 900Mi on this 3 GiB VM, so the kill lands while the page cache still holds
    // the binaries. Nearer the bottom the node thrashes first: every binary here is paged in
    // over 9p under emulation. Against 300Mi containerd once took 33 s from StopContainer to its
    // SIGTERM while the hog ran into the kernel's OOM killer; against 600Mi, with the rest of
    // the test command running beside the VM, the guest stalled in reclaim for 9 s and the
    // kernel came first once in seven runs. nodelet's decision came within a second when it
    // could run (printed below).
    cluster.start_nodelet(
        node,
        &format!("evictionHard: {{memory.available: {FAST_HOG_THRESHOLD}}}\nevictionPressureTransitionPeriod: 10s\n"),
    );
    node.wait_metric("nodelet_eviction_passes_total", "an eviction pass", |v| {
        v >= 1.0
    })
    .await;
    let oom_before = kernel_oom_kills();
    let memory_total = memory_available() + 4096 * MI;
    cluster.create(
        node,
        &pod_yaml(
            "fast-hog",
            &format!(
                "alloc, --mib, \"{}\", --chunk-mib, \"10\", --interval, 100ms, --hold",
                mib(memory_total)
            ),
            "",
            "",
        ),
    );
    let hog = cluster
        .wait(node, "fast-hog evicted", || {
            cluster.pod("fast-hog").filter(|p| phase(p) == "Failed")
        })
        .await;
    assert_memory_evicted(&hog, FAST_HOG_THRESHOLD);
    let crossing = node
        .metric("nodelet_eviction_crossing_to_kill_seconds_sum")
        .await
        .unwrap_or(f64::NAN);
    // nodelet restarted for this step: the histogram holds this one eviction.
    println!(
        "vm scenario: fast hog: threshold first observed to kill: {crossing:.3} s (goal ≤ 1 s)"
    );
    // The pass came from the 100 ms memory check, not the manager's 1 s period.
    let wakeups = node
        .metric_now("nodelet_eviction_wakeups_total{source=\"memory_check\"}")
        .await;
    assert!(wakeups >= 1.0, "memory check wake-ups: {wakeups}");
    println!(
        "vm scenario: eviction wake-ups: memory check {wakeups}, PSI {:?}, memory.events {:?}",
        node.metric("nodelet_eviction_wakeups_total{source=\"psi\"}")
            .await,
        node.metric("nodelet_eviction_wakeups_total{source=\"memory_events\"}")
            .await
    );
    assert_eq!(
        kernel_oom_kills(),
        oom_before,
        "the kernel OOM-killed something before nodelet evicted the hog\n{}",
        dmesg_oom()
    );
    let kubepods_events = std::fs::read_to_string("/sys/fs/cgroup/kubepods.slice/memory.events")
        .expect("kubepods memory.events");
    assert!(
        kubepods_events.lines().any(|l| l.trim() == "oom_kill 0"),
        "kubepods.slice memory.events: {kubepods_events}"
    );
    assert!(dmesg_oom().is_empty(), "kernel log: {}", dmesg_oom());
}

/// The kernel log's OOM-killer lines.
fn dmesg_oom() -> String {
    let out = std::process::Command::new("dmesg")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.lines()
        .filter(|l| l.contains("Out of memory") || l.contains("oom-kill"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first step on a standalone node (static pods only, no API server) with
/// `evictStaticPods: true`: static pods are ranked by `spec.priority` like any other.
async fn standalone_static_hogs_with_evict_static_pods(node: &Guest) {
    let _step =
        node.step("standalone, evictStaticPods: the lower-priority static hog is evicted first");
    // Without a kubeconfig: the cluster's pods are no longer this node's and are stopped.
    node.systemctl(&["stop", "nodelet.service"]);
    node.start_nodelet("");
    let static_pod = |name: &str, args: &str, priority: &str, resources: &str| {
        pod_yaml(name, args, priority, resources).replace("  namespace: default\n", "")
    };
    node.write_manifest(
        "guaranteed.yaml",
        &static_pod(
            "guaranteed",
            "serve",
            "",
            "    resources: {limits: {memory: 64Mi, cpu: 100m}}\n",
        ),
    );
    node.write_manifest(
        "hog-high.yaml",
        &static_pod(
            "hog-high",
            "alloc, --mib, \"200\", --hold",
            "  priority: 1000\n",
            "",
        ),
    );
    let running = |p: &Pod| phase(p) == "Running";
    node.wait_pod("guaranteed", "Running", running).await;
    node.wait_pod("hog-high", "Running", running).await;
    node.wait_for("hog-high holding 200 MiB", || hog_rss_at_least(200 * MI))
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let threshold = threshold_150mi_below_free("standalone");
    node.systemctl(&["stop", "nodelet.service"]);
    node.start_nodelet(&format!(
        "evictionHard: {{memory.available: {threshold}}}\nevictStaticPods: true\n"
    ));
    let passes_before = node
        .wait_metric("nodelet_eviction_passes_total", "an eviction pass", |v| {
            v >= 1.0
        })
        .await;
    node.write_manifest(
        "hog-low.yaml",
        &static_pod(
            "hog-low",
            "alloc, --mib, \"400\", --chunk-mib, \"4\", --interval, 100ms, --hold",
            "  priority: 0\n",
            "",
        ),
    );
    let low = node.wait_pod("hog-low", "evicted", evicted).await;
    assert_memory_evicted(&low, &threshold);
    let uid = low.metadata.uid.clone().unwrap_or_default();
    let events = node.events(&uid).await;
    assert!(
        events.contains(&format!("Warning Evicted: {}", status_message(&low))),
        "hog-low's events: {events}"
    );
    // More passes, pressure gone, the others still run; one eviction in all.
    node.wait_metric("nodelet_eviction_passes_total", "more passes", |v| {
        v >= passes_before + 10.0
    })
    .await;
    for name in ["hog-high", "guaranteed"] {
        let p = node.pod(name).await.expect("listed");
        assert_eq!(phase(&p), "Running", "{name}: {:?}", p.status);
    }
    assert_eq!(node.metric_now("nodelet_evictions_total").await, 1.0);
}

/// The node's `some avg10` of `/proc/pressure/memory`, in percent.
fn node_memory_some_avg10() -> f64 {
    let text = std::fs::read_to_string("/proc/pressure/memory").expect("/proc/pressure/memory");
    text.lines()
        .find_map(|l| l.strip_prefix("some "))
        .and_then(|l| l.split_whitespace().find_map(|f| f.strip_prefix("avg10=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("/proc/pressure/memory: {text}"))
}

/// The memory files of `tier` and every cgroup below it (pods and containers), one line each,
/// for the record while the stall runs.
fn cgroup_memory_below(tier: &std::path::Path) -> String {
    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .unwrap_or_default()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        let stat = std::fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
        let shmem = stat
            .lines()
            .find_map(|l| l.strip_prefix("shmem "))
            .unwrap_or("?");
        out.push(format!(
            "  {}: current {} (shmem {shmem}) high {} max {} events [{}] pressure [{}]",
            dir.file_name().unwrap_or_default().to_string_lossy(),
            read("memory.current"),
            read("memory.high"),
            read("memory.max"),
            read("memory.events"),
            read("memory.pressure"),
        ));
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(tier, &mut out);
    out.join("\n")
}

/// nodelet's PSI signal, standalone with `evictStaticPods`: a Burstable static pod (request
/// 16Mi, limit 256Mi; with `memoryThrottlingFactor: 0.1` Memory QoS puts its `memory.high` at
/// 40Mi) keeps writing 248 MiB into its writable layer (tmpfs in the VM, not reclaimable
/// without swap): the kernel throttles it above `memory.high` with penalty sleeps, which PSI
/// counts as memory stall. The node's `memory.pressure.some.avg10` crosses 20 % with plenty of
/// memory free, and the pod (priority 0) goes, not a BestEffort bystander of priority 1000,
/// with nodelet's PSI message; avg10's lag after the kill evicts nothing more.
///
/// Why 0.1 and not the kubelet's 0.9 or a middle value: the penalty grows with the square of
/// how far usage is above `memory.high`, and the time a writer spends outside the penalty
/// (copying and zeroing pages, slow under emulation) grows with the host's load. With 0.5
/// (`memory.high` 136Mi) the node's `some avg10` reached about 85 % on a quiet host but stayed
/// at 7–10 % for three minutes while the rest of the test command ran beside the VM; with 40Mi
/// it held about 80 % with the host's two cores fully loaded.
async fn memory_pressure_stall_evicts_the_throttled_pod(node: &Guest) {
    let _step = node.step(&format!(
        "PSI: memory.pressure.some.avg10 at {PSI_THRESHOLD} evicts the pod stalled on memory.high"
    ));
    // The previous step's static pods go first: a restarted nodelet would start its evicted
    // hog again, and that hog (priority 0) would rank before the stalled pod.
    node.systemctl(&["stop", "nodelet.service"]);
    for file in ["guaranteed.yaml", "hog-high.yaml", "hog-low.yaml"] {
        node.remove_manifest(file);
    }
    node.start_nodelet("");
    for name in ["guaranteed", "hog-high", "hog-low"] {
        node.wait_gone(name).await;
    }
    node.wait_for("the node's memory pressure settled below 5%", || {
        node_memory_some_avg10() < 5.0
    })
    .await;
    // Standalone without thresholds while the bystander starts: a BestEffort pod of higher
    // priority using more memory than it requests (none), ranked after the stalled pod, kept.
    node.systemctl(&["stop", "nodelet.service"]);
    node.start_nodelet("");
    let static_pod = |name: &str, args: &str, priority: &str| {
        pod_yaml(name, args, priority, "").replace("  namespace: default\n", "")
    };
    node.write_manifest(
        "bystander.yaml",
        &static_pod(
            "bystander",
            "alloc, --mib, \"64\", --hold",
            "  priority: 1000\n",
        ),
    );
    node.wait_pod("bystander", "Running", |p| phase(p) == "Running")
        .await;
    node.systemctl(&["stop", "nodelet.service"]);
    node.start_nodelet(&format!(
        "evictionHard: {{memory.pressure.some.avg10: \"{PSI_THRESHOLD}\"}}\nevictStaticPods: true\nmemoryThrottlingFactor: 0.1\n"
    ));
    // The positive sign: nodelet reads the signal (in millionths).
    let series =
        "nodelet_eviction_signal_available{eviction_signal=\"memory.pressure.some.avg10\"}";
    let before = node
        .wait_metric(series, "a PSI reading below the threshold", |v| {
            v < 200_000.0
        })
        .await;
    println!("vm scenario: PSI: memory.pressure.some.avg10 before: {before} ppm");
    node.write_manifest(
        "stall.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: stall\nspec:\n  priority: 0\n  \
             terminationGracePeriodSeconds: 5\n  containers:\n  - name: main\n    image: {TESTBOX}\n    \
             imagePullPolicy: Never\n    resources: {{requests: {{memory: 16Mi}}, limits: {{memory: 256Mi}}}}\n    \
             command: [/bin/sh, -c, 'while :; do dd if=/dev/zero of=/fill bs=1M count=248 2>/dev/null; done']\n"
        ),
    );
    let started = Instant::now();
    let burstable = node.tier_cgroup(Some(Qos::Burstable));
    // What the node's PSI says while the pod runs (for the record and for a failure's reader).
    let progress = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(10)).await;
            let psi = std::fs::read_to_string("/proc/pressure/memory").unwrap_or_default();
            println!(
                "vm scenario: PSI: after {:.0} s: {}\n{}",
                started.elapsed().as_secs_f64(),
                psi.replace('\n', "; "),
                cgroup_memory_below(&burstable)
            );
        }
    });
    let stall = node.wait_pod("stall", "evicted", evicted).await;
    progress.abort();
    println!(
        "vm scenario: PSI: stall evicted {:.1} s after its manifest (node some avg10 now {})",
        started.elapsed().as_secs_f64(),
        node_memory_some_avg10()
    );
    let message = status_message(&stall);
    let start = format!(
        "The node was low on resource: memory. Threshold: memory.pressure.some.avg10 at or above {PSI_THRESHOLD}, observed: "
    );
    assert!(
        message.starts_with(&start)
            && message.contains(". Container main was using ")
            && message.ends_with(", request is 16Mi, has larger consumption of memory. "),
        "stall: message {message:?}"
    );
    println!("vm scenario: PSI: {message}");
    assert_eq!(
        pod_condition(&stall, "DisruptionTarget"),
        Some(("True".into(), "TerminationByKubelet".into())),
        "{:?}",
        stall.status
    );
    let uid = stall.metadata.uid.clone().unwrap_or_default();
    let events = node.events(&uid).await;
    assert!(
        events.contains(&format!("Warning Evicted: {message}")),
        "stall's events: {events}"
    );
    // The stall is gone with the pod; avg10 lags for seconds, and no other pod goes for it.
    let passes = node.metric_now("nodelet_eviction_passes_total").await;
    node.wait_metric("nodelet_eviction_passes_total", "more passes", |v| {
        v >= passes + 10.0
    })
    .await;
    let bystander = node.pod("bystander").await.expect("listed");
    assert_eq!(phase(&bystander), "Running", "{:?}", bystander.status);
    assert_eq!(node.metric_now("nodelet_evictions_total").await, 1.0);
    assert_eq!(
        node.metric_now("nodelet_evictions_total{eviction_signal=\"memory.pressure.some.avg10\"}")
            .await,
        1.0
    );
}
