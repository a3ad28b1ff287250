//! API writes in cluster mode, against the project's API server fixture (in this process, its
//! request log is the count): pod status writes during a 110-pod start, per minute at steady
//! state with 110 pods, and per pod state change (every pod's readiness flipped once each way).

use std::time::{Duration, Instant};

use apiserver_fixture::{Fixture, LoggedRequest};
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::agent::{Agent, TESTBOX};
use crate::report::{num, Row, Section, Verdict};
use crate::sys::{self, LoadMark};
use crate::Options;

const PODS: usize = 110;
const T: Duration = Duration::from_secs(600);

fn is_pod_status_write(r: &LoggedRequest) -> bool {
    matches!(r.method.as_str(), "PATCH" | "PUT")
        && r.path.contains("/pods/")
        && r.path.ends_with("/status")
}

fn is_write(r: &LoggedRequest) -> bool {
    !matches!(r.method.as_str(), "GET" | "HEAD" | "OPTIONS")
}

fn is_event_write(r: &LoggedRequest) -> bool {
    is_write(r) && r.path.contains("/events")
}

fn pod_yaml(name: &str, node: &str, dir: &std::path::Path) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  nodeName: {node}\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: web\n    image: {TESTBOX}\n    \
         imagePullPolicy: Never\n    args: [serve, --http, \"8080\", --healthy-file, /bench/healthy]\n    \
         volumeMounts:\n    - {{name: bench, mountPath: /bench}}\n    \
         readinessProbe:\n      httpGet: {{path: /healthz, port: 8080}}\n      periodSeconds: 5\n  \
         volumes:\n  - name: bench\n    hostPath: {{path: {}, type: Directory}}\n",
        dir.display()
    )
}

fn ready_count(fixture: &Fixture) -> (usize, usize) {
    let pods = fixture.list::<Pod>(Some("default")).unwrap_or_default();
    let ready = pods
        .iter()
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count();
    (ready, pods.len())
}

async fn wait_until(what: &str, a: &Agent, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "no {what} after {T:?}\n{}",
            a.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the status sync finished one more full reconcile (its counter moved).
async fn one_more_reconcile(a: &Agent) {
    let name = "nodelet_pod_status_reconciles_total";
    let start = a.metric(name).await.unwrap_or(0.0);
    let deadline = Instant::now() + T;
    while a.metric(name).await.unwrap_or(0.0) <= start {
        assert!(Instant::now() < deadline, "no status reconcile in {T:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The pod status writes and event writes in the log, and the number of pods written.
fn count(log: &[LoggedRequest]) -> (usize, usize, usize) {
    let status: Vec<&LoggedRequest> = log.iter().filter(|r| is_pod_status_write(r)).collect();
    let mut pods: Vec<&str> = status.iter().map(|r| r.path.as_str()).collect();
    pods.sort();
    pods.dedup();
    (
        status.len(),
        pods.len(),
        log.iter().filter(|r| is_event_write(r)).count(),
    )
}

/// Flips every pod's readiness (the shared health file) and waits until the API shows it, then
/// one reconcile more; returns what was written meanwhile.
async fn flip(
    fixture: &Fixture,
    a: &Agent,
    health: &std::path::Path,
    ready: bool,
) -> Vec<LoggedRequest> {
    fixture.clear_log();
    if ready {
        std::fs::write(health, "").expect("health file");
    } else {
        std::fs::remove_file(health).expect("rm health file");
    }
    let want = if ready { PODS } else { 0 };
    wait_until(&format!("{want} pods Ready in the API"), a, || {
        ready_count(fixture).0 == want
    })
    .await;
    // Anything still to come would come with the next reconcile (10 s) at the latest.
    tokio::time::sleep(Duration::from_secs(5)).await;
    one_more_reconcile(a).await;
    fixture.request_log()
}

pub async fn run(_opts: &Options) -> Section {
    let fixture = Fixture::start(None)
        .await
        .expect("start the API server fixture");
    let dir = tempfile::Builder::new()
        .prefix("nodelet-bench-api-")
        .tempdir()
        .expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fixture\n  cluster:\n    server: {}\n\
             users:\n- name: nodelet\n  user: {{}}\ncontexts:\n- name: fixture\n  context:\n    \
             cluster: fixture\n    user: nodelet\ncurrent-context: fixture\n",
            fixture.url()
        ),
    )
    .expect("kubeconfig");
    let health_dir = dir.path().join("health");
    std::fs::create_dir_all(&health_dir).expect("mkdir");
    let health = health_dir.join("healthy");
    std::fs::write(&health, "").expect("health file");
    let a = Agent::start(
        "api",
        &format!(
            "kubeconfig: {}\nmaxPods: {}\n",
            kubeconfig.display(),
            PODS + 10
        ),
    )
    .await;
    wait_until("the node registered", &a, || {
        fixture.get::<Node>(None, &a.node).ok().flatten().is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    // A 110-pod start: from creation until every pod is Ready and one reconcile more.
    let load = LoadMark::start();
    fixture.clear_log();
    let started = Instant::now();
    for i in 0..PODS {
        let pod: Pod =
            serde_yaml::from_str(&pod_yaml(&format!("p{i}"), &a.node, &health_dir)).expect("pod");
        fixture.create(&pod).expect("create pod");
    }
    wait_until("110 pods Ready in the API", &a, || {
        ready_count(&fixture).0 == PODS
    })
    .await;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    one_more_reconcile(&a).await;
    let (start_writes, start_pods, start_events) = count(&fixture.request_log());
    let load_start = load.end();
    eprintln!(
        "api: 110-pod start: {start_writes} status writes for {start_pods} pods, {start_events} \
         event writes, all Ready in {:.1} s",
        took.as_secs_f64()
    );

    // Steady state: one minute after a reconcile.
    one_more_reconcile(&a).await;
    let reconciles0 = a
        .metric("nodelet_pod_status_reconciles_total")
        .await
        .unwrap_or(0.0);
    let load = LoadMark::start();
    fixture.clear_log();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let log = fixture.request_log();
    let reconciles = a
        .metric("nodelet_pod_status_reconciles_total")
        .await
        .unwrap_or(0.0)
        - reconciles0;
    let load_steady = load.end();
    let (steady_status, _, steady_events) = count(&log);
    let node_status = format!("/api/v1/nodes/{}/status", a.node);
    let steady_node = log
        .iter()
        .filter(|r| is_write(r) && r.path == node_status)
        .count();
    let steady_lease = log
        .iter()
        .filter(|r| is_write(r) && r.path.contains("/leases/"))
        .count();
    let steady_all = log.iter().filter(|r| is_write(r)).count();

    // One state change per pod each way: readiness off, then on again.
    let load = LoadMark::start();
    let off = flip(&fixture, &a, &health, false).await;
    let on = flip(&fixture, &a, &health, true).await;
    let load_flip = load.end();
    let (off_writes, off_pods, off_events) = count(&off);
    let (on_writes, on_pods, _) = count(&on);
    let per_change = (off_writes + on_writes) as f64 / (2 * PODS) as f64;
    eprintln!(
        "api: readiness off: {off_writes} status writes ({off_pods} pods, {off_events} events); \
         on: {on_writes} ({on_pods} pods)"
    );

    let mut rows = vec![
        Row::new(
            "status writes per pod state change (readiness off, then on, 110 pods)",
            format!(
                "{} ({} + {} writes for 220 changes)",
                num(per_change),
                off_writes,
                on_writes
            ),
        )
        .goal("1", Verdict::at_most(per_change, 1.0))
        .load(&load_flip),
        Row::new(
            "status writes per minute at steady state, 110 pods",
            format!(
                "{steady_status} (in {} reconciles; all writes {steady_all}: node status {steady_node}, lease {steady_lease}, events {steady_events})",
                num(reconciles)
            ),
        )
        .goal("0", Verdict::at_most(steady_status as f64, 0.0))
        .load(&load_steady),
        Row::new(
            "status writes during a 110-pod start (created → all Ready + one reconcile)",
            format!(
                "{start_writes} ({} per pod; {start_events} event writes; all Ready in {:.1} s)",
                num(start_writes as f64 / PODS as f64),
                took.as_secs_f64()
            ),
        )
        .load(&load_start),
    ];
    rows[0].baseline = String::new();
    drop(a);
    Section {
        part: "api".into(),
        title: "API writes (cluster mode)".into(),
        measured: format!("{}, nodelet {}", sys::now_utc(), sys::commit()),
        rows,
        notes: vec![
            "nodelet joined to the API server fixture (`apiserver-fixture`, in the benchmark's \
             process; its request log is the count) with the kubelet's defaults (node status every \
             10 s, reported every 5 min or on change; Lease renewed every 10 s). 110 pods (testbox \
             `serve` with an HTTP readiness probe every 5 s, one health file shared on a hostPath \
             volume) are created bound to the node at once. A status write is a PATCH or PUT of \
             `pods/NAME/status`. Readiness is flipped for all pods at once by removing and \
             re-creating the health file; each flip is counted until the API shows it for every \
             pod, 5 s more and one more status reconcile (the sync compares every pod with the API \
             every 10 s)."
                .into(),
            "Each pod passes through at least three statuses on its way up (Pending / \
             `ContainerCreating`, Running not Ready, Ready), so about 3 writes per pod during a \
             start is the uncoalesced count; fewer means changes were merged."
                .into(),
        ],
    }
}
