//! Fault tests on a real containerd: nodelet killed with SIGKILL, containerd stopped under it,
//! the API server away, a node full of crash-looping pods, a static pod directory rewritten in
//! a loop. Each test first waits for a positive sign (pods Running, a counter moving) before it
//! proves an absence, and prints what it measured (`cargo test --test faults -- --nocapture`).
//!
//! The containerd outage stops the one containerd every test of this binary uses, so it takes
//! [`CONTAINERD`] exclusively; the other tests share it. The three tests with 20 to 110 pods run
//! one at a time ([`MANY_PODS`]); the API server outage runs beside them (3 pods, mostly
//! waiting). The binary takes about six minutes on a quiet 2-core machine.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use apiserver_fixture::{Fixture, LoggedRequest};
use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use nodelet::cri::Runtime;
use nodelet_testkit::pod::{
    all_running, container_status, phase, restart_count, running_ids, terminated,
};
use nodelet_testkit::tail;

/// Held shared by every test, exclusively by the one that stops containerd.
static CONTAINERD: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());
/// Held by the tests that start 20 or more pods: one at a time, so that they do not slow
/// each other past their deadlines on a 2-core machine.
static MANY_PODS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Deadlines are generous: the machine is shared, and 50 or 110 sandboxes take a while.
const T: Duration = Duration::from_secs(90);
const MANY: Duration = Duration::from_secs(420);

/// What the runtime holds for a node: sandbox IDs, and per container ID its pod, name,
/// attempt and state.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RuntimeSnapshot {
    sandboxes: BTreeSet<String>,
    containers: BTreeMap<String, (String, String, u32, i32)>,
}

async fn runtime_snapshot(n: &Nodelet) -> RuntimeSnapshot {
    let (sandboxes, containers) = n.runtime_objects().await;
    RuntimeSnapshot {
        sandboxes: sandboxes.into_iter().map(|s| s.id).collect(),
        containers: containers
            .into_iter()
            .map(|c| {
                let pod = c
                    .labels
                    .get("io.kubernetes.pod.name")
                    .cloned()
                    .unwrap_or_default();
                let meta = c.metadata.unwrap_or_default();
                (c.id, (pod, meta.name, meta.attempt, c.state))
            })
            .collect(),
    }
}

/// Restart counts per pod and container, from `/pods`.
fn restart_counts(pods: &[Pod]) -> BTreeMap<(String, String), i32> {
    pods.iter()
        .flat_map(|p| {
            let pod = p.metadata.name.clone().unwrap_or_default();
            p.status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
                .map(move |c| ((pod.clone(), c.name.clone()), c.restart_count))
        })
        .collect()
}

/// Polls `/pods` until `count` pods are Running with every container running.
async fn wait_all_running(n: &Nodelet, count: usize, timeout: Duration) -> Vec<Pod> {
    let deadline = Instant::now() + timeout;
    let mut running = 0;
    loop {
        if let Some(pods) = n.pods().await {
            running = pods
                .iter()
                .filter(|p| phase(p) == "Running" && all_running(p))
                .count();
            if running == count && pods.len() == count {
                return pods;
            }
        }
        assert!(
            Instant::now() < deadline,
            "only {running} of {count} pods Running after {timeout:?}\n{}",
            tail(&n.logs(), 60)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the pod workers finished `syncs` more syncs than now: after a restart or an
/// outage, the sign that every worker has looked at its pod again (the periodic resync at
/// `syncFrequency` syncs each pod), which a test proving "nothing was restarted" waits for.
async fn wait_worker_syncs(n: &Nodelet, syncs: f64, timeout: Duration) {
    let name = "nodelet_pod_worker_duration_seconds_count";
    let start = n.metric(name).await.unwrap_or(0.0);
    let deadline = Instant::now() + timeout;
    loop {
        if n.metric(name).await.is_some_and(|now| now >= start + syncs) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} did not advance by {syncs} from {start} in {timeout:?}\n{}",
            tail(&n.logs(), 40)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `VmRSS` of a process, KiB.
fn rss_kib(pid: u32) -> u64 {
    nodelet_testkit::proc::vm_rss_kib(pid).expect("VmRSS")
}

/// User plus system CPU time of a process so far, from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc stat");
    // Fields after the command (which may contain spaces) close with ')': state is field 3,
    // utime 14 and stime 15.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let hz: u64 = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100);
    Duration::from_millis(ticks * 1000 / hz)
}

fn sleeper(name: &str) -> String {
    testbox_pod(name, "Always", &[("main", &["sleep"])])
}

// ---------------------------------------------------------------------------------------------
// 1. SIGKILL with 50 pods running

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_with_50_pods_running_restarts_no_container() {
    let _shared = CONTAINERD.read().await;
    let _many = MANY_PODS.lock().await;
    const PODS: usize = 50;
    let mut n = Nodelet::prepare_with("sigkill", "");
    for i in 0..PODS {
        n.write_manifest(&format!("p{i}.yaml"), &sleeper(&format!("p{i}")));
    }
    let started = Instant::now();
    n.launch();
    let before_pods = wait_all_running(&n, PODS, MANY).await;
    println!(
        "sigkill: {PODS} pods Running {:.1?} after the start",
        started.elapsed()
    );
    let before = runtime_snapshot(&n).await;
    assert_eq!(before.sandboxes.len(), PODS, "{before:#?}");
    assert_eq!(before.containers.len(), PODS, "{before:#?}");

    n.kill9();
    let killed = Instant::now();
    n.relaunch();
    let after_pods = wait_all_running(&n, PODS, MANY).await;
    let back = killed.elapsed();
    println!("sigkill: every pod reported Running again {back:.1?} after SIGKILL and restart");

    // The positive sign: every worker synced its pod once more after the status was back
    // (the periodic resync), the moment a nodelet that lost track would recreate something.
    wait_worker_syncs(&n, PODS as f64, T).await;
    let after = runtime_snapshot(&n).await;
    assert_eq!(
        after, before,
        "the runtime's sandboxes or containers changed across the restart"
    );
    let running = after
        .containers
        .values()
        .filter(|(_, _, _, state)| {
            *state == nodelet::cri::api::ContainerState::ContainerRunning as i32
        })
        .count();
    assert_eq!(running, PODS, "{after:#?}");
    let counts = restart_counts(&after_pods);
    assert_eq!(counts, restart_counts(&before_pods));
    assert!(counts.values().all(|c| *c == 0), "{counts:?}");
    // And /pods reports the very containers that ran before.
    let ids = |pods: &[Pod]| -> BTreeSet<String> { pods.iter().flat_map(running_ids).collect() };
    assert_eq!(ids(&after_pods), ids(&before_pods));
    println!(
        "sigkill: {} containers, 0 restarted or recreated (IDs and attempts equal); status back in {back:.1?}",
        after.containers.len()
    );
}

// ---------------------------------------------------------------------------------------------
// 2. containerd stopped for 20 s under a running nodelet

/// `scripts/containerd.sh <command>` for this test instance (the `NODELET_TEST_*` variables
/// of the environment choose it).
fn containerd_script(command: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/containerd.sh");
    let out = std::process::Command::new(script)
        .arg(command)
        .output()
        .expect("run scripts/containerd.sh");
    assert!(
        out.status.success(),
        "containerd.sh {command}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts the containerd daemon again if the test ends (or fails) while it is stopped.
struct ContainerdOutage {
    stopped: bool,
}

impl ContainerdOutage {
    fn begin() -> ContainerdOutage {
        containerd_script("daemon-stop");
        ContainerdOutage { stopped: true }
    }

    fn end(&mut self) {
        if std::mem::take(&mut self.stopped) {
            containerd_script("daemon-start");
        }
    }
}

impl Drop for ContainerdOutage {
    fn drop(&mut self) {
        self.end();
    }
}

/// What nodelet logs once it follows containerd's task events.
const FOLLOWING: &str = "following containerd task events";

async fn healthz(n: &Nodelet) -> Option<(u16, String)> {
    let r = reqwest::Client::new()
        .get(format!("{}/healthz", n.base_url()))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    let code = r.status().as_u16();
    Some((code, r.text().await.unwrap_or_default()))
}

/// The node's `Ready` condition (status, message) in the API server, fixture or real.
fn node_ready(api: &impl TestApi, node: &str) -> Option<(String, String)> {
    let node: Node = api.object(None, node)?;
    let ready = node
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "Ready")?;
    Some((ready.status, ready.message.unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_away_for_20s_nodelet_reports_it_reconnects_and_restarts_nothing() {
    let _exclusive = CONTAINERD.write().await;
    const PODS: usize = 3;
    let fixture = Fixture::start(None).await.unwrap();
    let mut n = Nodelet::prepare_in_cluster("ctd-outage", &fixture.url(), "");
    for i in 0..PODS {
        n.write_manifest(&format!("p{i}.yaml"), &sleeper(&format!("p{i}")));
    }
    n.launch();
    wait_all_running(&n, PODS, T).await;
    let node = n.node.clone();
    wait_api("the node Ready", &n, || {
        node_ready(&fixture, &node).filter(|(s, _)| s == "True")
    })
    .await;
    assert_eq!(healthz(&n).await.map(|h| h.0), Some(200));
    let before = runtime_snapshot(&n).await;
    let pid = n.pid().unwrap();
    let subscriptions = n.logs().matches(FOLLOWING).count();
    assert!(
        subscriptions >= 1,
        "nodelet never followed containerd's events\n{}",
        tail(&n.logs(), 60)
    );

    let mut outage = ContainerdOutage::begin();
    let stopped = Instant::now();
    // A pod created while containerd is away.
    n.write_manifest("late.yaml", &sleeper("late"));
    let mut unhealthy = None;
    let mut not_ready = None;
    while stopped.elapsed() < Duration::from_secs(20) {
        let h = healthz(&n).await;
        assert!(h.is_some(), "/healthz did not answer during the outage");
        if let Some((code, body)) = h.filter(|(code, _)| *code != 200) {
            unhealthy.get_or_insert((stopped.elapsed(), code, body));
        }
        if let Some((_, message)) = node_ready(&fixture, &node).filter(|(s, _)| s == "False") {
            not_ready.get_or_insert((stopped.elapsed(), message));
        }
        assert!(
            n.pods().await.is_some(),
            "/pods did not answer during the outage"
        );
        assert!(
            n.exited().is_none(),
            "nodelet exited during the outage\n{}",
            tail(&n.logs(), 60)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    outage.end();
    let resumed = Instant::now();
    let (unhealthy_after, code, body) =
        unhealthy.expect("/healthz stayed ok for 20 s without containerd");
    println!("containerd outage: /healthz {code} {unhealthy_after:.1?} after the stop: {body}");
    assert!(body.contains("container runtime is down"), "{body}");
    let (not_ready_after, message) =
        not_ready.expect("the node stayed Ready for 20 s without containerd");
    println!("containerd outage: node Ready=False {not_ready_after:.1?} after the stop: {message}");
    assert!(message.contains("container runtime is down"), "{message}");

    // Back: healthy, Ready, the late pod runs, its start came through the event stream.
    let healthy_again = loop {
        if healthz(&n).await.is_some_and(|h| h.0 == 200) {
            break resumed.elapsed();
        }
        assert!(
            resumed.elapsed() < T,
            "/healthz never ok again\n{}",
            tail(&n.logs(), 60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    wait_api("the node Ready again", &n, || {
        node_ready(&fixture, &node).filter(|(s, _)| s == "True")
    })
    .await;
    let ready_again = resumed.elapsed();
    n.wait_pod(
        "late",
        T,
        "the pod created during the outage Running",
        |p| phase(p) == "Running" && all_running(p),
    )
    .await;
    let late_running = resumed.elapsed();
    // The event stream: containerd answers a subscription with its first event, and nodelet
    // logs that it follows the stream then. An exec in a running container makes task events
    // (ignored for the pods, restarting nothing) until the log shows it subscribed again.
    let some_container = before.containers.keys().next().unwrap().clone();
    let deadline = Instant::now() + T;
    while n.logs().matches(FOLLOWING).count() <= subscriptions {
        assert!(
            Instant::now() < deadline,
            "nodelet did not follow containerd's events again after the restart\n{}",
            tail(&n.logs(), 60)
        );
        runtime()
            .exec_sync(
                &some_container,
                vec![
                    "/testbox".into(),
                    "exit".into(),
                    "--code".into(),
                    "0".into(),
                ],
                Duration::from_secs(10),
            )
            .await
            .expect("exec in a running container");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let stream_back = resumed.elapsed();
    println!(
        "containerd outage: after the start: /healthz ok in {healthy_again:.1?}, node Ready in {ready_again:.1?}, \
         the late pod Running in {late_running:.1?}, containerd events flowing in {stream_back:.1?}"
    );
    assert_eq!(n.pid(), Some(pid));
    assert!(
        n.exited().is_none(),
        "nodelet exited\n{}",
        tail(&n.logs(), 60)
    );

    // The positive sign (every worker synced again), then: nothing was restarted.
    wait_worker_syncs(&n, (PODS + 1) as f64, T).await;
    let after = runtime_snapshot(&n).await;
    assert_eq!(after.sandboxes.len(), PODS + 1, "{after:#?}");
    for (id, c) in &before.containers {
        assert_eq!(
            after.containers.get(id),
            Some(c),
            "container {id} changed: {after:#?}"
        );
    }
    assert!(
        before.sandboxes.is_subset(&after.sandboxes),
        "{before:#?}\n{after:#?}"
    );
    let pods = wait_all_running(&n, PODS + 1, T).await;
    let counts = restart_counts(&pods);
    assert!(counts.values().all(|c| *c == 0), "{counts:?}");
}

// ---------------------------------------------------------------------------------------------
// 3. The API server away for 60 s

fn api_pod_yaml(name: &str, node: &str, policy: &str, grace: u32, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: {node}\n  restartPolicy: {policy}\n  \
         terminationGracePeriodSeconds: {grace}\n  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [{}]\n",
        args.join(", ")
    )
}

/// The pod a status PATCH is for, if it is one.
fn status_patch_of(r: &LoggedRequest) -> Option<String> {
    if r.method != "PATCH" || !r.path.ends_with("/status") {
        return None;
    }
    let rest = r.path.strip_suffix("/status")?;
    let (before, name) = rest.rsplit_once('/')?;
    before.ends_with("/pods").then(|| name.to_string())
}

async fn wait_reconciles(n: &Nodelet, count: u32) {
    for _ in 0..count {
        one_more_reconcile(n).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_away_for_60s_every_status_arrives_in_order_and_the_delete_once() {
    let _shared = CONTAINERD.read().await;
    let fixture = Fixture::start(None).await.unwrap();
    let api = fixture.url();
    let n = Nodelet::start_in_cluster("api-away", &api, "");
    let node = n.node.clone();
    let dir = n.dir.path().to_path_buf();
    // Fails 15 s after its start (during the outage).
    let job = api_pod_yaml(
        "job",
        &node,
        "Never",
        5,
        &["exit", "--code", "3", "--after", "15s"],
    );
    // Exits every 2 s: restarts (10 s, 20 s, 40 s of backoff) while the server is away.
    let crash = api_pod_yaml(
        "crash",
        &node,
        "Always",
        5,
        &["exit", "--code", "1", "--after", "2s"],
    );
    let steady = api_pod_yaml("steady", &node, "Always", 5, &["sleep"]);
    // Deleted just before the outage; it takes 10 s to stop, so its final DELETE falls in it.
    let gone = api_pod_yaml(
        "gone",
        &node,
        "Always",
        30,
        &["sleep", "--sigterm-delay", "10s"],
    );
    for (name, yaml) in [("steady", &steady), ("gone", &gone), ("crash", &crash)] {
        kubectl_apply(&api, &dir, name, yaml);
    }
    for name in ["steady", "gone"] {
        wait_api(&format!("{name} Running in the API"), &n, || {
            api_pod(&fixture, name).filter(|p| phase(p) == "Running")
        })
        .await;
    }
    kubectl_apply(&api, &dir, "job", &job);
    wait_api("job Running in the API", &n, || {
        api_pod(&fixture, "job").filter(|p| phase(p) == "Running")
    })
    .await;
    let (ok, _, err) = kubectl(&api, &["delete", "pod", "gone", "--wait=false"]);
    assert!(ok, "{err}");
    // nodelet saw the deletion (its local copy carries the timestamp) before the server goes.
    let deadline = Instant::now() + T;
    while n
        .pod_exact("gone")
        .await
        .is_none_or(|p| p.metadata.deletion_timestamp.is_none())
    {
        assert!(
            Instant::now() < deadline,
            "nodelet never saw the deletion\n{}",
            tail(&n.logs(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pid = n.pid().unwrap();
    let rss_before = rss_kib(pid);
    assert!(
        !fixture
            .request_log()
            .iter()
            .any(|r| is_final_delete(r, "gone")),
        "the final DELETE came before the outage: the test would prove nothing"
    );
    fixture.stop().await;
    let stopped = Instant::now();

    // Away: the job fails, the crash loop restarts, the deleted pod stops; nodelet sees it all.
    let mut rss_max = rss_before;
    let mut seen_job_failed = false;
    let mut crash_restarts = 0;
    let mut gone_stopped = false;
    while stopped.elapsed() < Duration::from_secs(60) {
        rss_max = rss_max.max(rss_kib(pid));
        if let Some(pods) = n.pods().await {
            let find = |name: &str| {
                pods.iter()
                    .find(|p| p.metadata.name.as_deref() == Some(name))
            };
            seen_job_failed |= find("job").is_some_and(|p| phase(p) == "Failed");
            crash_restarts = find("crash").map_or(crash_restarts, |p| restart_count(p, "main"));
            gone_stopped |= find("gone").is_none_or(|p| !all_running(p));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let rss_end = rss_kib(pid);
    assert!(
        seen_job_failed,
        "the job did not fail locally during the outage"
    );
    assert!(
        crash_restarts >= 2,
        "crash restarted only {crash_restarts} times during the outage"
    );
    assert!(
        gone_stopped,
        "the deleted pod did not stop during the outage"
    );
    let local = n.pods().await.expect("/pods");
    let local_restarts = restart_counts(&local);
    println!(
        "api away: nodelet RSS {rss_before} KiB before, {rss_max} KiB at most and {rss_end} KiB after 60 s away \
         (crash restarted {crash_restarts} times meanwhile)"
    );
    assert!(
        rss_max < rss_before + 64 * 1024,
        "RSS grew from {rss_before} KiB to {rss_max} KiB while the API server was away"
    );

    let mark = fixture.request_log().len();
    fixture.resume().await.unwrap();
    let resumed = Instant::now();
    let failed = wait_api("the job's Failed status in the API", &n, || {
        api_pod(&fixture, "job").filter(|p| phase(p) == "Failed")
    })
    .await;
    assert_eq!(terminated(&failed, "main"), Some((3, "Error".into())));
    let job_back = resumed.elapsed();
    let want = local_restarts[&("crash".to_string(), "main".to_string())];
    wait_api("crash's restarts in the API", &n, || {
        api_pod(&fixture, "crash").filter(|p| restart_count(p, "main") >= want)
    })
    .await;
    let crash_back = resumed.elapsed();
    wait_api("gone deleted from the API", &n, || {
        api_pod(&fixture, "gone").is_none().then_some(())
    })
    .await;
    let gone_back = resumed.elapsed();
    println!(
        "api away: after the return: job Failed in {job_back:.1?}, crash's {want} restarts in {crash_back:.1?}, \
         gone's final DELETE in {gone_back:.1?}"
    );
    let steady_api = api_pod(&fixture, "steady").expect("steady in the API");
    assert_eq!(phase(&steady_api), "Running");
    assert_eq!(restart_count(&steady_api, "main"), 0);

    // Then two full reconciles: a nodelet that resent the DELETE or an old status would have.
    wait_reconciles(&n, 2).await;
    let log = fixture.request_log();
    let deletes = log.iter().filter(|r| is_final_delete(r, "gone")).count();
    assert_eq!(deletes, 1, "final DELETEs of gone: {deletes}");
    // In order: after the return no status write goes back (a Failed job never Running again,
    // a restart count never lower than one written before it).
    let mut job_failed = false;
    let mut crash_max = 0;
    for r in &log[mark..] {
        let Some(pod) = status_patch_of(r) else {
            continue;
        };
        let body = r.body.clone().unwrap_or_default();
        let phase_written = body["status"]["phase"].as_str().map(str::to_string);
        if pod == "job" {
            if job_failed {
                assert_ne!(
                    phase_written.as_deref(),
                    Some("Running"),
                    "job went back: {r:?}"
                );
            }
            job_failed |= phase_written.as_deref() == Some("Failed");
        }
        if pod == "crash" {
            for cs in body["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if let Some(count) = cs["restartCount"].as_i64() {
                    assert!(
                        count >= crash_max,
                        "crash's restartCount went back to {count} after {crash_max}: {r:?}"
                    );
                    crash_max = count;
                }
            }
        }
    }
    assert!(
        job_failed,
        "no status PATCH of job wrote Failed after the return"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. 110 pods crash-looping at once

/// What one poll of the local API saw: whether it answered, and how long it took.
#[derive(Debug, Default)]
struct Responsiveness {
    requests: u32,
    failures: Vec<String>,
    slowest: Duration,
}

/// Polls `/healthz` and `/pods` every 500 ms until `stop` is set.
async fn poll_api(
    base: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Responsiveness {
    let client = reqwest::Client::new();
    let mut seen = Responsiveness::default();
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        for path in ["/healthz", "/pods"] {
            let asked = Instant::now();
            let answer = client
                .get(format!("{base}{path}"))
                .timeout(Duration::from_secs(10))
                .send()
                .await;
            let answer = match answer {
                Ok(r) if r.status().is_success() => {
                    r.bytes().await.map(|_| ()).map_err(|e| e.to_string())
                }
                Ok(r) => Err(format!(
                    "{}: {}",
                    r.status(),
                    r.text().await.unwrap_or_default()
                )),
                Err(e) => Err(e.to_string()),
            };
            seen.requests += 1;
            seen.slowest = seen.slowest.max(asked.elapsed());
            if let Err(e) = answer {
                seen.failures
                    .push(format!("{path} after {:.1?}: {e}", asked.elapsed()));
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    seen
}

fn parse_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> i64 {
    t.0.as_second()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_looping_110_pods_the_api_answers_and_every_backoff_is_honoured() {
    let _shared = CONTAINERD.read().await;
    let _many = MANY_PODS.lock().await;
    const PODS: usize = 110;
    let mut n = Nodelet::prepare_with("crashloop", "maxPods: 110\n");
    for i in 0..PODS {
        n.write_manifest(
            &format!("c{i}.yaml"),
            &testbox_pod(
                &format!("c{i}"),
                "Always",
                &[("main", &["exit", "--code", "1"])],
            ),
        );
    }
    n.launch();
    // Polled from the moment it first answers (it binds its port during start-up).
    let deadline = Instant::now() + T;
    while healthz(&n).await.is_none() {
        assert!(
            Instant::now() < deadline,
            "the local API never answered\n{}",
            tail(&n.logs(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = tokio::spawn(poll_api(n.base_url(), stop.clone()));
    let started = Instant::now();
    // Every run of every container, by pod and attempt (0 for the first run): (startedAt,
    // finishedAt) in seconds. A run is told by its container ID: the status's own ID is the
    // newest instance, whose attempt is the restart count; a last state with another ID is the
    // instance before it.
    let mut runs: BTreeMap<String, BTreeMap<i32, (i64, i64)>> = BTreeMap::new();
    // Restarts that can be checked against a backoff: consecutive attempts k-1 and k, k ≥ 2,
    // both seen. One for every pod, two for half of them: on a loaded machine the last of 110
    // sandboxes can start minutes after the first, and a poll can miss a run (the waits grow,
    // so a later pair is seen instead).
    let checkable = |r: &BTreeMap<i32, (i64, i64)>| {
        r.keys()
            .filter(|&&k| k >= 2 && r.contains_key(&(k - 1)))
            .count()
    };
    let deadline = started + MANY;
    loop {
        if let Some(pods) = n.pods().await {
            for p in &pods {
                let Some(cs) = container_status(p, "main") else {
                    continue;
                };
                let terminated = [cs.state.as_ref(), cs.last_state.as_ref()]
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.terminated.as_ref());
                for t in terminated {
                    let newest = t.container_id.is_some() && t.container_id == cs.container_id;
                    let attempt = if newest {
                        cs.restart_count
                    } else {
                        cs.restart_count - 1
                    };
                    if let (Some(s), Some(f)) = (&t.started_at, &t.finished_at) {
                        runs.entry(p.metadata.name.clone().unwrap_or_default())
                            .or_default()
                            .insert(attempt, (parse_time(s), parse_time(f)));
                    }
                }
            }
        }
        let one = runs.values().filter(|r| checkable(r) >= 1).count();
        let two = runs.values().filter(|r| checkable(r) >= 2).count();
        if one == PODS && two >= PODS / 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after {MANY:?} {one} of {PODS} containers had a restart with a backoff seen, {two} \
             two of them\n{}",
            tail(&n.logs(), 60)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let looped = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = poller.await.unwrap();
    println!(
        "crashloop: {PODS} pods seen restarted after a backoff, {} of them twice, in {looped:.1?}; \
         local API: {} requests, slowest {:.1?}, {} failed",
        runs.values().filter(|r| checkable(r) >= 2).count(),
        seen.requests,
        seen.slowest,
        seen.failures.len()
    );
    assert!(
        seen.failures.is_empty(),
        "the local API did not answer: {:?}",
        seen.failures
    );
    assert!(seen.requests > 20, "the poller barely ran: {seen:?}");

    // The kubelet's schedule (`doBackOff`): the first restart is not delayed; restart k ≥ 2
    // waits 10 s · 2^(k-2) after the exit of attempt k-1. Timestamps have whole seconds, so one
    // second of slack. Every observed pair of consecutive attempts is checked.
    let mut checked = 0;
    let mut worst_excess = 0i64;
    let mut first_restart_latest = 0i64;
    for (pod, runs) in &runs {
        for (&attempt, &(start, _)) in runs {
            let Some(&(_, previous_exit)) = runs.get(&(attempt - 1)) else {
                continue;
            };
            let waited = start - previous_exit;
            if attempt == 1 {
                first_restart_latest = first_restart_latest.max(waited);
                continue;
            }
            let backoff = 10i64 << (attempt - 2).min(5);
            assert!(
                waited >= backoff - 1,
                "{pod}: restart {attempt} came {waited} s after the exit of attempt {}, before its \
                 {backoff} s backoff: {runs:?}",
                attempt - 1
            );
            checked += 1;
            worst_excess = worst_excess.max(waited - backoff);
        }
    }
    assert!(
        checked >= PODS + PODS / 2,
        "only {checked} restarts checked"
    );
    println!(
        "crashloop: {checked} restarts waited their backoff; the latest came {worst_excess} s after \
         it; the slowest first restart (no backoff) came {first_restart_latest} s after the exit"
    );
}

// ---------------------------------------------------------------------------------------------
// 5. A static pod directory of 1,000 files rewritten in a loop

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_manifests_rewritten_in_a_loop_flap_no_pod() {
    let _shared = CONTAINERD.read().await;
    let _many = MANY_PODS.lock().await;
    const FILES: usize = 1000;
    const PODS: usize = 20;
    // 1,000 manifests: 20 pods, each also defined by 49 more files of the same pod name
    // (`d<i>-<copy>.yaml`). The first path in order wins (`m<i>.yaml`), the others are reported
    // as duplicates: every file is read and parsed at each change, 20 pods run.
    let mut n = Nodelet::prepare_with("rewrites", "");
    let file = |k: usize| {
        if k < PODS {
            format!("m{k}.yaml")
        } else {
            format!("d{}-{}.yaml", k % PODS, k / PODS)
        }
    };
    let body = |k: usize| sleeper(&format!("m{}", k % PODS));
    for k in 0..FILES {
        n.write_manifest(&file(k), &body(k));
    }
    n.launch();
    let pods = wait_all_running(&n, PODS, MANY).await;
    let before = runtime_snapshot(&n).await;
    assert_eq!(before.sandboxes.len(), PODS, "{before:#?}");
    let uids: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    let pid = n.pid().unwrap();
    let cpu_before = cpu_time(pid);
    let loop_started = Instant::now();
    let mut rounds = 0;
    while loop_started.elapsed() < Duration::from_secs(15) {
        for k in 0..FILES {
            if (k + rounds) % 2 == 0 {
                // By rename, as `write_manifest` does.
                n.write_manifest(&file(k), &body(k));
            } else {
                // In place: truncated, then written.
                std::fs::write(n.manifests.join(file(k)), body(k)).unwrap();
            }
        }
        rounds += 1;
    }
    let looped = loop_started.elapsed();
    let cpu = cpu_time(pid).saturating_sub(cpu_before);
    println!(
        "rewrites: {rounds} rounds over {FILES} files ({} rewrites) in {looped:.1?}; nodelet CPU {cpu:.1?} \
         ({:.0}% of one core)",
        rounds * FILES,
        cpu.as_secs_f64() / looped.as_secs_f64() * 100.0
    );
    assert!(rounds >= 2, "only {rounds} rounds of rewrites");
    // The positive sign that the source still reads the directory after the storm: one pod's
    // file removed, its pod goes (the next file of its name, `d0-1.yaml`, would win: remove
    // the pod's every file).
    let gone = 0;
    for k in (0..FILES).filter(|k| k % PODS == gone) {
        n.remove_manifest(&file(k));
    }
    n.wait_gone(&format!("m{gone}"), T).await;
    let after = runtime_snapshot(&n).await;
    let removed = n.pod_name(&format!("m{gone}"));
    let mut expected = before.clone();
    expected
        .containers
        .retain(|_, (pod, _, _, _)| *pod != removed);
    let removed_sandboxes: Vec<_> = before.sandboxes.difference(&after.sandboxes).collect();
    assert_eq!(removed_sandboxes.len(), 1, "{before:#?}\n{after:#?}");
    assert!(
        after.sandboxes.is_subset(&before.sandboxes),
        "a sandbox was created: {after:#?}"
    );
    assert_eq!(
        after.containers, expected.containers,
        "a container was recreated"
    );
    let pods = wait_all_running(&n, PODS - 1, T).await;
    let uids_after: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    assert!(uids_after.is_subset(&uids), "a pod changed its UID");
    assert!(
        cpu < looped,
        "nodelet used {cpu:?} of CPU in {looped:?} of rewrites (a core's worth, busy)"
    );
}

// ---------------------------------------------------------------------------------------------
// 6. containerd without a CNI configuration (the CNI DaemonSet not there yet), then with one

/// This instance's CNI configuration, the one file in containerd's `conf_dir`
/// (`scripts/lib.sh`).
fn cni_conflist() -> std::path::PathBuf {
    let var = std::env::var("NODELET_TEST_VAR").unwrap_or_else(|_| "/var/lib/nodelet-test".into());
    let network =
        std::env::var("NODELET_TEST_CNI_NETWORK").unwrap_or_else(|_| "nodelet-test".into());
    std::path::Path::new(&var)
        .join("cni/net.d")
        .join(format!("10-{network}.conflist"))
}

/// Moves the CNI configuration out of containerd's sight (a name libcni does not read) and
/// back when the test ends, or fails.
struct CniConfigAway {
    conflist: std::path::PathBuf,
    away: Option<std::path::PathBuf>,
}

impl CniConfigAway {
    fn begin() -> CniConfigAway {
        let conflist = cni_conflist();
        let away = conflist.with_extension("away");
        std::fs::rename(&conflist, &away)
            .unwrap_or_else(|e| panic!("move {} away: {e}", conflist.display()));
        CniConfigAway {
            conflist,
            away: Some(away),
        }
    }

    fn end(&mut self) {
        if let Some(away) = self.away.take() {
            std::fs::rename(&away, &self.conflist).expect("put the CNI configuration back");
        }
    }
}

impl Drop for CniConfigAway {
    fn drop(&mut self) {
        self.end();
    }
}

/// containerd's `NetworkReady` condition as its CRI `Status` reports it.
async fn network_condition() -> nodelet::cri::api::RuntimeCondition {
    runtime()
        .runtime_conditions()
        .await
        .expect("containerd answers Status")
        .into_iter()
        .find(|c| c.r#type == "NetworkReady")
        .expect("containerd reports NetworkReady")
}

fn api_phase(server: &RealServer, name: &str) -> String {
    server
        .object::<Pod>(Some(&server.namespace()), name)
        .and_then(|p| p.status?.phase)
        .unwrap_or_default()
}

/// With containerd's `NetworkReady=false` (no CNI configuration yet, as before a CNI DaemonSet
/// has written one), the node joins `Ready=False` with the kubelet's message quoting
/// containerd's condition, a pod on the host's network runs, and a pod on the pod network
/// waits with `NetworkNotReady` events and no sandbox. Once a configuration appears the node
/// turns Ready and the waiting pod starts (woken by the change, not at a retry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_cni_configuration_the_node_is_not_ready_and_pods_wait_for_one() {
    let _exclusive = CONTAINERD.write().await;
    let server = RealServer::start("cni-readiness");
    // The positive sign first: containerd's network is ready with its configuration.
    assert!(
        network_condition().await.status,
        "containerd's network is not ready even with its CNI configuration"
    );
    let mut away = CniConfigAway::begin();
    let start = Instant::now();
    let condition = loop {
        let c = network_condition().await;
        if !c.status {
            break c;
        }
        assert!(
            start.elapsed() < T,
            "containerd still reports NetworkReady=true {T:?} after its CNI configuration went"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!(
        "cni readiness: containerd NetworkReady=false after {:.1?}: reason:{} message:{}",
        start.elapsed(),
        condition.reason,
        condition.message
    );
    let want_node = format!(
        "container runtime network not ready: NetworkReady=false reason:{} message:{}",
        condition.reason, condition.message
    );

    let n = Nodelet::start_in_real_cluster("cni-readiness", &server, "");
    let node = n.node.clone();
    // The first statuses may also say the PLEG has not relisted yet (the kubelet's too).
    let (status, message) = wait_api("the node registered, not Ready for its network", &n, || {
        node_ready(&server, &node)
            .filter(|(s, m)| s == "False" && !m.contains("PLEG") && m.contains("network"))
    })
    .await;
    println!("cni readiness: node Ready={status}: {message}");
    assert_eq!(message, want_node, "the node's Ready message");
    let pod = |name: &str, spec: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 2\n{spec}  containers:\n  - name: main\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    args: [serve]\n"
        )
    };
    server.create(&pod("hostnet", "  hostNetwork: true\n"));
    server.create(&pod("podnet", ""));
    wait_api("the host-network pod Running", &n, || {
        (api_phase(&server, "hostnet") == "Running").then_some(())
    })
    .await;
    let events = wait_api("a NetworkNotReady event of the waiting pod", &n, || {
        let out = server.kubectl_ok(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=podnet,reason=NetworkNotReady",
            "-o",
            "json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).ok()?;
        let items = v["items"].as_array()?.clone();
        (!items.is_empty()).then_some(items)
    })
    .await;
    let event_message = events[0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    println!("cni readiness: event NetworkNotReady: {event_message}");
    assert_eq!(events[0]["type"], "Warning");
    assert_eq!(event_message, format!("network is not ready: {want_node}"));
    assert_eq!(api_phase(&server, "podnet"), "Pending");
    let (sandboxes, _) = n.runtime_objects().await;
    let names: Vec<String> = sandboxes
        .iter()
        .filter_map(|s| s.metadata.as_ref().map(|m| m.name.clone()))
        .collect();
    assert!(
        names.iter().any(|n| n == "hostnet") && !names.iter().any(|n| n == "podnet"),
        "sandboxes while the network is not ready: {names:?}"
    );

    away.end();
    let restored = Instant::now();
    wait_api(
        "the waiting pod Running once the network is ready",
        &n,
        || (api_phase(&server, "podnet") == "Running").then_some(()),
    )
    .await;
    let running_after = restored.elapsed();
    wait_api("the node Ready", &n, || {
        node_ready(&server, &node).filter(|(s, _)| s == "True")
    })
    .await;
    println!(
        "cni readiness: configuration back; podnet Running {running_after:.1?} later (the \
         kubelet: its next pod worker retry, up to 15 s), node Ready {:.1?} later",
        restored.elapsed()
    );
}
