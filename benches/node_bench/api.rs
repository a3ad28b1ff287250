//! API requests in cluster mode, against the real control plane of `scripts/k8s.sh` (Kubernetes
//! v1.37.2), for nodelet and then the real kubelet joined to it as a node on the same containerd
//! with the same KubeletConfiguration: pod status writes during a 110-pod start, per minute at
//! steady state with 110 pods, and per pod state change (every pod's readiness flipped once each
//! way), and every request the agent makes at steady state. The API server's audit log is the
//! count: each agent authenticates as its own node, `system:node:<node>`.

use std::path::Path;
use std::time::{Duration, Instant};

use nodelet::cri::Runtime;

use crate::agent::{self, Agent, Join, Kind, TESTBOX};
use crate::cluster::Cluster;
use crate::report::{
    audit_summary, audited_between, num, ratio, summary_text, Audited, LoadSpan, Row, Section,
    Verdict,
};
use crate::sys::{self, LoadMark};
use crate::Options;

const PODS: usize = 110;
const T: Duration = Duration::from_secs(600);
const STEADY: Duration = Duration::from_secs(60);
/// How long after the last pod was Ready the steady window starts: the kubelet writes each
/// pod's `status.resources` once more about a minute after the pod started (measured on the
/// 2026-12-07 run: 109 such writes in a window that began 25 s after), which is its start,
/// not its steady state.
const AFTER_START: Duration = Duration::from_secs(75);
/// The kubelet's status manager compares every pod with the API server on this period
/// (`syncPeriod` in pkg/kubelet/status/status_manager.go); nodelet's reconcile has the same
/// period and a counter to wait on.
const KUBELET_STATUS_SYNC: Duration = Duration::from_secs(10);

fn pod_yaml(name: &str, namespace: &str, node: &str, dir: &Path) -> String {
    // No service account token: the fixture's pods of the earlier runs had none, and a token
    // (a TokenRequest per pod, refreshed) is not what these figures are about.
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  nodeName: {node}\n  \
         automountServiceAccountToken: false\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: web\n    \
         image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve, --http, \"8080\", --healthy-file, /bench/healthy]\n    \
         volumeMounts:\n    - {{name: bench, mountPath: /bench}}\n    \
         readinessProbe:\n      httpGet: {{path: /healthz, port: 8080}}\n      periodSeconds: 5\n  \
         volumes:\n  - name: bench\n    hostPath: {{path: {}, type: Directory}}\n",
        dir.display()
    )
}

/// (Ready, all) of the namespace's pods, as the API server has them.
fn ready_count(cluster: &Cluster, namespace: &str) -> (usize, usize) {
    let (ok, out, _) = cluster.kubectl(&[
        "-n",
        namespace,
        "get",
        "pods",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#,
    ]);
    if !ok {
        return (0, usize::MAX);
    }
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    let ready = lines.iter().filter(|l| l.ends_with(" True")).count();
    (ready, lines.len())
}

async fn wait_until(what: &str, a: &Agent, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "no {what} after {T:?}\n{}",
            a.log_tail(40)
        );
        // kubectl's own start costs CPU on this 2-core machine: poll gently.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the agent compared every pod with the API server once more: nodelet's reconcile
/// counter moved; the kubelet has no such counter, and its status sync runs every 10 s.
async fn one_more_reconcile(a: &Agent) {
    if a.kind == Kind::Kubelet {
        tokio::time::sleep(KUBELET_STATUS_SYNC).await;
        return;
    }
    let name = "nodelet_pod_status_reconciles_total";
    let start = a.metric(name).await.unwrap_or(0.0);
    let deadline = Instant::now() + T;
    while a.metric(name).await.unwrap_or(0.0) <= start {
        assert!(Instant::now() < deadline, "no status reconcile in {T:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What one agent asked of the API server in each phase.
struct Measured {
    start: Vec<Audited>,
    took: Duration,
    steady: Vec<Audited>,
    off: Vec<Audited>,
    on: Vec<Audited>,
    load_start: LoadSpan,
    load_steady: LoadSpan,
    load_flip: LoadSpan,
}

/// A phase of the measurement: its node's requests received between `begin` and the end.
struct Phase<'a> {
    cluster: &'a Cluster,
    user: String,
    mark: u64,
    begin: jiff::Timestamp,
}

impl<'a> Phase<'a> {
    fn begin(cluster: &'a Cluster, node: &str) -> Phase<'a> {
        Phase {
            cluster,
            user: format!("system:node:{node}"),
            mark: cluster.audit_mark(),
            begin: jiff::Timestamp::now(),
        }
    }

    fn end(self) -> Vec<Audited> {
        let end = jiff::Timestamp::now();
        let all = self.cluster.audited_since(self.mark);
        audited_between(&all, &self.user, self.begin, end)
            .into_iter()
            .cloned()
            .collect()
    }
}

/// Flips every pod's readiness (the shared health file) and waits until the API shows it, then
/// 5 s and one reconcile more; returns what the node asked meanwhile.
async fn flip(
    cluster: &Cluster,
    a: &Agent,
    namespace: &str,
    health: &Path,
    ready: bool,
) -> Vec<Audited> {
    let phase = Phase::begin(cluster, &a.node);
    if ready {
        std::fs::write(health, "").expect("health file");
    } else {
        std::fs::remove_file(health).expect("rm health file");
    }
    let want = if ready { PODS } else { 0 };
    wait_until(&format!("{want} pods Ready in the API"), a, || {
        ready_count(cluster, namespace).0 == want
    })
    .await;
    // Anything still to come would come with the next reconcile (10 s) at the latest.
    tokio::time::sleep(Duration::from_secs(5)).await;
    one_more_reconcile(a).await;
    phase.end()
}

/// Stops and removes what is left in the runtime of the namespace's pods (the kubelet leaves its
/// stopped sandboxes to its garbage collection, and labels none with its node).
async fn remove_namespace_sandboxes(namespace: &str) {
    let rt = agent::runtime();
    for s in rt.list_pod_sandbox(None).await.unwrap_or_default() {
        if s.metadata
            .as_ref()
            .is_some_and(|m| m.namespace == namespace)
        {
            let _ = rt.stop_pod_sandbox(&s.id).await;
            let _ = rt.remove_pod_sandbox(&s.id).await;
        }
    }
}

/// One agent joined as a node: a 110-pod start, the steady state, readiness off and on.
async fn measure(kind: Kind, cluster: &Cluster, dir: &Path) -> Measured {
    let node = agent::node_name(kind, "api");
    let namespace = format!("{node}-pods");
    cluster.create_namespace(&namespace);
    let join = Join {
        kubeconfig: cluster.node_kubeconfig(&node, dir),
        client_ca: cluster.ca.clone(),
    };
    let health_dir = dir.join(format!("health-{}", kind.name()));
    std::fs::create_dir_all(&health_dir).expect("mkdir");
    let health = health_dir.join("healthy");
    std::fs::write(&health, "").expect("health file");
    let a = Agent::start_joined(
        kind,
        "api",
        &format!("maxPods: {}\n", PODS + 10),
        Some(&join),
    )
    .await;
    assert_eq!(a.node, node);
    wait_until("the node registered and Ready", &a, || {
        cluster
            .kubectl(&[
                "get",
                "node",
                &node,
                "-o",
                r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#,
            ])
            .1
            == "True"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    // A 110-pod start: from creation until every pod is Ready and one reconcile more.
    let load = LoadMark::start();
    let phase = Phase::begin(cluster, &node);
    let started = Instant::now();
    let pods: Vec<String> = (0..PODS)
        .map(|i| pod_yaml(&format!("p{i}"), &namespace, &node, &health_dir))
        .collect();
    cluster.create(&pods.join("---\n"));
    wait_until("110 pods Ready in the API", &a, || {
        ready_count(cluster, &namespace).0 == PODS
    })
    .await;
    let took = started.elapsed();
    let all_ready = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    one_more_reconcile(&a).await;
    let start = phase.end();
    let load_start = load.end();
    eprintln!(
        "api: {}: 110-pod start: all Ready in {:.1} s; {}",
        kind.name(),
        took.as_secs_f64(),
        summary_text(&audit_summary(&start))
    );

    // Steady state: a minute after a reconcile, once the start's late writes are over.
    tokio::time::sleep_until(tokio::time::Instant::from_std(all_ready + AFTER_START)).await;
    one_more_reconcile(&a).await;
    let load = LoadMark::start();
    let phase = Phase::begin(cluster, &node);
    tokio::time::sleep(STEADY).await;
    let steady = phase.end();
    let load_steady = load.end();
    eprintln!(
        "api: {}: steady {} s: {}",
        kind.name(),
        STEADY.as_secs(),
        summary_text(&audit_summary(&steady))
    );

    // One state change per pod each way: readiness off, then on again.
    let load = LoadMark::start();
    let off = flip(cluster, &a, &namespace, &health, false).await;
    let on = flip(cluster, &a, &namespace, &health, true).await;
    let load_flip = load.end();
    eprintln!(
        "api: {}: readiness off: {}\napi: {}: readiness on: {}",
        kind.name(),
        summary_text(&audit_summary(&off)),
        kind.name(),
        summary_text(&audit_summary(&on))
    );

    // The pods deleted through the API (the agent stops them, as in a cluster), then the agent,
    // what is left in the runtime, the node and the namespace.
    let _ = cluster.kubectl(&["-n", &namespace, "delete", "pods", "--all", "--wait=false"]);
    let deadline = Instant::now() + Duration::from_secs(300);
    while ready_count(cluster, &namespace).1 != 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let _ = cluster.kubectl(&[
        "-n",
        &namespace,
        "delete",
        "pods",
        "--all",
        "--grace-period=0",
        "--force",
    ]);
    drop(a);
    remove_namespace_sandboxes(&namespace).await;
    let _ = cluster.kubectl(&["delete", "node", &node, "--wait=false"]);
    let _ = cluster.kubectl(&["delete", "namespace", &namespace, "--wait=false"]);
    Measured {
        start,
        took,
        steady,
        off,
        on,
        load_start,
        load_steady,
        load_flip,
    }
}

/// One phase's requests of a [`Measured`].
type PhaseOf = fn(&Measured) -> &[Audited];

fn count(requests: &[Audited], what: fn(&Audited) -> bool) -> usize {
    requests.iter().filter(|r| what(r)).count()
}

/// The number of pods among `requests`' status writes.
fn pods_written(requests: &[Audited]) -> usize {
    let mut names: Vec<&str> = requests
        .iter()
        .filter(|r| r.is_pod_status_write())
        .map(|r| r.name.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    names.len()
}

/// Status writes per pod state change, and the cell.
fn per_change(m: &Measured) -> (f64, String) {
    let (off, on) = (
        count(&m.off, Audited::is_pod_status_write),
        count(&m.on, Audited::is_pod_status_write),
    );
    let v = (off + on) as f64 / (2 * PODS) as f64;
    let events = count(&m.off, Audited::is_event_write) + count(&m.on, Audited::is_event_write);
    (
        v,
        format!(
            "{} ({off} + {on} writes for 220 changes; {events} event writes)",
            num(v)
        ),
    )
}

/// Status writes per minute at steady state, and the cell.
fn steady_status(m: &Measured) -> (f64, String) {
    let status =
        count(&m.steady, Audited::is_pod_status_write) as f64 * 60.0 / STEADY.as_secs_f64();
    let writes: Vec<Audited> = m.steady.iter().filter(|r| r.is_write()).cloned().collect();
    (
        status,
        format!(
            "{} (all writes in {} s: {})",
            num(status),
            STEADY.as_secs(),
            summary_text(&audit_summary(&writes))
        ),
    )
}

/// Requests per second at steady state, and the cell.
fn steady_rate(m: &Measured) -> (f64, String) {
    let rate = m.steady.len() as f64 / STEADY.as_secs_f64();
    (
        rate,
        format!(
            "{} ({} in {} s: {})",
            num(rate),
            m.steady.len(),
            STEADY.as_secs(),
            summary_text(&audit_summary(&m.steady))
        ),
    )
}

/// Status writes during the start, and the cell.
fn start_writes(m: &Measured) -> (f64, String) {
    let writes = count(&m.start, Audited::is_pod_status_write);
    (
        writes as f64,
        format!(
            "{writes} ({} per pod, {} pods; {} event writes; {} requests in all; all Ready in {:.1} s)",
            num(writes as f64 / PODS as f64),
            pods_written(&m.start),
            count(&m.start, Audited::is_event_write),
            m.start.len(),
            m.took.as_secs_f64()
        ),
    )
}

pub async fn run(_opts: &Options) -> Section {
    let cluster = Cluster::from_env().unwrap_or_else(|| {
        eprintln!(
            "the api part needs the real control plane: run it with scripts/bench.sh, which \
             starts scripts/k8s.sh's and exports its environment (scripts/k8s.sh env)"
        );
        std::process::exit(2)
    });
    let dir = tempfile::Builder::new()
        .prefix("nodelet-bench-api-")
        .tempdir()
        .expect("tempdir");
    // nodelet, then the kubelet: never both at once (the kubelet kills every running pod of the
    // runtime that is not its own).
    let ours = measure(Kind::Nodelet, &cluster, dir.path()).await;
    let theirs = match agent::kubelet_binary() {
        Some(_) => Some(measure(Kind::Kubelet, &cluster, dir.path()).await),
        None => None,
    };
    // One figure for both agents: nodelet's cell, the kubelet's, nodelet ÷ kubelet, the loads.
    let row =
        |figure: &str, of: fn(&Measured) -> (f64, String), load: fn(&Measured) -> LoadSpan| {
            let (v, cell) = of(&ours);
            let mut row = Row::new(figure, cell).load(&load(&ours));
            if let Some(k) = &theirs {
                let (kv, kcell) = of(k);
                row = row.kubelet(kcell, ratio(v, kv));
                row.load = format!("{}; kubelet {}", row.load, load(k));
            }
            (v, row)
        };
    let (v, change) = row(
        "status writes per pod state change (readiness off, then on, 110 pods)",
        per_change,
        |m| m.load_flip,
    );
    let change = change.goal("1", Verdict::at_most(v, 1.0));
    let (v, steady) = row(
        "status writes per minute at steady state, 110 pods",
        steady_status,
        |m| m.load_steady,
    );
    let steady = steady.goal("0", Verdict::at_most(v, 0.0));
    let (_, rate) = row(
        "requests per second at steady state, 110 pods (every request of the node, by verb and resource)",
        steady_rate,
        |m| m.load_steady,
    );
    let (_, start) = row(
        "status writes during a 110-pod start (created → all Ready + one reconcile)",
        start_writes,
        |m| m.load_start,
    );
    let mut notes = vec![
        "Each agent joined in turn as a node (a client certificate of `system:node:<node>` \
         signed by the cluster CA) to the real control plane of `scripts/k8s.sh` (kube-apiserver, \
         etcd, controller-manager, scheduler of Kubernetes v1.37.2), on the same containerd with \
         the same KubeletConfiguration (the kubelet's defaults: node status every 10 s, reported \
         every 5 min or on change; Lease renewed every 10 s; its kubelet API on 127.0.0.1 with \
         webhook authentication and authorization, as scripts/conformance.sh runs both; the \
         kubelet with its own `cgroupRoot`). The API server's audit log is the count: every \
         request of the node's user received in the phase, each once (a watch when it \
         starts). 110 pods (testbox `serve` with an HTTP readiness probe every 5 s, one health \
         file shared on a hostPath volume, no service account token) are created with \
         `nodeName` set, in one `kubectl create`. A status write is a PATCH or PUT of \
         `pods/NAME/status`. Readiness is flipped for all pods at once by removing and \
         re-creating the health file; each flip is counted until the API shows it for every \
         pod, 5 s more and one more status reconcile (nodelet: its reconcile counter; the \
         kubelet: its status sync's 10 s period). The steady state is the minute after a \
         reconcile at least 75 s after the last pod was Ready (the kubelet writes each pod's \
         `status.resources` once more about a minute after its start)."
            .into(),
        "Each pod passes through at least three statuses on its way up (Pending / \
         `ContainerCreating`, Running not Ready, Ready), so about 3 writes per pod during a \
         start is the uncoalesced count; fewer means changes were merged."
            .into(),
    ];
    let phases: [(&str, PhaseOf); 3] = [
        ("the 110-pod start", |m| &m.start),
        ("readiness off", |m| &m.off),
        ("readiness on", |m| &m.on),
    ];
    for (phase, of) in phases {
        let mut note = format!(
            "Requests during {phase}: nodelet {}",
            summary_text(&audit_summary(of(&ours)))
        );
        if let Some(k) = &theirs {
            note.push_str(&format!(
                "; the kubelet {}",
                summary_text(&audit_summary(of(k)))
            ));
        }
        note.push('.');
        notes.push(note);
    }
    Section {
        part: "api".into(),
        title: "API requests (cluster mode)".into(),
        measured: format!("{}, nodelet {}", sys::now_utc(), sys::commit()),
        rows: vec![change, steady, rate, start],
        notes,
    }
}
