//! Two tenants fill their emptyDirs with millions of hard links (no disk space, tens of
//! seconds to unlink) and are deleted at once (issue 40). Removing such a directory on one of
//! nodelet's two async workers stalled the whole runtime: the runtime check timed out,
//! `/healthz` answered 500 for seconds, and in cluster mode the Lease went unrenewed. Now a
//! gone pod's directory is renamed into `<rootDir>/trash` and deleted by a thread of its own;
//! meanwhile every answer of nodelet comes at once, the node joined to the real API server
//! renews its Lease and stays Ready, and the runtime watchdog sees no long poll.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use nodelet_testkit::tail;

/// Entries each emptyDir must hold.
const ENTRIES: u64 = 2_000_000;

/// The slowest answer allowed while the directories are deleted.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// A pod whose container makes 1000 files and doubles them with `cp -al` eleven times
/// (2,048,000 hard links and 4,094 directories, no data), counts what it made, and waits.
fn manifest(name: &str) -> String {
    let script = r#"set -e
mkdir -p /data/g0
cd /data/g0
i=0
while [ $i -lt 1000 ]; do : > f$i; i=$((i+1)); done
cd /data
n=0
while [ $n -lt 11 ]; do
  cp -al g$n h
  mkdir g$((n+1))
  mv g$n h g$((n+1))/
  n=$((n+1))
done
find /data/g11 | wc -l > /data/count.tmp
mv /data/count.tmp /data/count
exec sleep 1000000"#;
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: data
    emptyDir: {{}}
  containers:
  - name: links
    image: {TESTBOX}
    imagePullPolicy: Never
    command: [\"/bin/sh\", \"-c\", {script}]
    volumeMounts:
    - {{name: data, mountPath: /data}}
",
        script = serde_json::to_string(script).expect("json string"),
    )
}

/// What the poller saw: every answer's status and the slowest answer.
#[derive(Default, Debug)]
struct Answers {
    requests: u64,
    failures: Vec<String>,
    slowest: Duration,
    slowest_path: &'static str,
}

/// What the API server showed each second: the Lease's renewals and any sample in which the
/// Node was not Ready.
#[derive(Default, Debug)]
struct Seen {
    renewals: Vec<jiff::Timestamp>,
    not_ready: Vec<String>,
    samples: u64,
}

/// Samples the node's Lease and Ready condition every second until `stop`.
fn watch_node(
    server: Arc<RealServer>,
    node: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Seen> {
    std::thread::spawn(move || {
        let mut seen = Seen::default();
        while !stop.load(Ordering::Relaxed) {
            let renewed = server
                .object::<k8s_openapi::api::coordination::v1::Lease>(Some("kube-node-lease"), &node)
                .and_then(|l| l.spec?.renew_time)
                .map(|t| t.0);
            if let Some(t) = renewed {
                if seen.renewals.last() != Some(&t) {
                    seen.renewals.push(t);
                }
            }
            let ready = server
                .object::<k8s_openapi::api::core::v1::Node>(None, &node)
                .and_then(|n| n.status?.conditions)
                .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"));
            match ready {
                Some(c) if c.status == "True" => {}
                other => seen.not_ready.push(format!(
                    "{}: {:?}",
                    jiff::Timestamp::now(),
                    other.map(|c| (c.status, c.message))
                )),
            }
            seen.samples += 1;
            std::thread::sleep(Duration::from_secs(1));
        }
        seen
    })
}

/// Two pods with 2 million entries each in their emptyDirs are deleted at once, on a node
/// joined to the real API server (Lease of 8 s, renewed every 2 s). While their directories go,
/// `/healthz` and `/metrics` are read every 100 ms: each answer is 200 and comes within a
/// second; nodelet never logs a runtime check without an answer; the Lease is renewed with
/// no gap as long as its duration and the Node stays Ready; and no poll of an async worker takes
/// a second (`LONGEST_POLL_IN_TESTS`; the removal on a worker held one for 19.7 s). The
/// directories leave `pods/` at once and the trash is empty at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_two_pods_with_millions_of_entries_stalls_nothing() {
    let server = Arc::new(RealServer::start("mass-deletion"));
    let n = Nodelet::start_in_real_cluster("mass_deletion", &server, "");
    let root = std::fs::canonicalize(n.dir.path())
        .expect("test dir")
        .join("root");
    let names = ["links-a", "links-b"];
    for name in names {
        n.write_manifest(&format!("{name}.yaml"), &manifest(name));
    }
    let mut dirs = Vec::new();
    for name in names {
        let pod = n
            .wait_pod(name, Duration::from_secs(180), "running", |p| {
                p.metadata.uid.is_some()
                    && p.status
                        .as_ref()
                        .and_then(|s| s.phase.as_deref())
                        .is_some_and(|ph| ph == "Running")
            })
            .await;
        dirs.push(root.join("pods").join(pod.metadata.uid.expect("uid")));
    }
    let started = Instant::now();
    for dir in &dirs {
        let count = dir.join("volumes/kubernetes.io~empty-dir/data/count");
        let entries = loop {
            if let Ok(text) = std::fs::read_to_string(&count) {
                break text.trim().parse::<u64>().expect("a count");
            }
            assert!(
                started.elapsed() < Duration::from_secs(1200),
                "{} not written in 20 min\n{}",
                count.display(),
                tail(&n.logs(), 30)
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        assert!(
            entries >= ENTRIES,
            "{}: only {entries} entries",
            dir.display()
        );
        println!("{}: {entries} entries", dir.display());
    }
    println!("the links were made in {:?}", started.elapsed());

    // The positive signs: nodelet answers, healthy, and the node is Ready with its Lease
    // renewed, before anything is deleted.
    let api = nodelet_testkit::api::NodeletApi::new(n.base_url(), Duration::from_secs(10));
    assert_eq!(
        api.get("/healthz").await.as_deref(),
        Some("ok"),
        "healthy before the deletion"
    );
    let ready_by = Instant::now() + Duration::from_secs(120);
    while n
        .metric("nodelet_node_lease_writes_total")
        .await
        .unwrap_or(0.0)
        < 2.0
    {
        assert!(
            Instant::now() < ready_by,
            "no Lease renewal
{}",
            tail(&n.logs(), 30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let node_stop = Arc::new(AtomicBool::new(false));
    let node_watch = watch_node(server.clone(), n.node.clone(), node_stop.clone());

    let answers = Arc::new(Mutex::new(Answers::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (answers, stop, base) = (answers.clone(), stop.clone(), n.base_url());
        tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("client");
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let path = if round % 5 == 4 {
                    "/metrics"
                } else {
                    "/healthz"
                };
                round += 1;
                let asked = Instant::now();
                let outcome = match client.get(format!("{base}{path}")).send().await {
                    Ok(resp) => {
                        let status = resp.status();
                        let body = resp.bytes().await.map(|_| ()).map_err(|e| e.to_string());
                        match (status.as_u16(), body) {
                            (200, Ok(())) => Ok(()),
                            (code, _) => Err(format!("{path}: {code}")),
                        }
                    }
                    Err(e) => Err(format!("{path}: {e}")),
                };
                let took = asked.elapsed();
                {
                    let mut a = answers.lock().unwrap();
                    a.requests += 1;
                    if let Err(e) = outcome {
                        a.failures.push(e);
                    }
                    if took > a.slowest {
                        a.slowest = took;
                        a.slowest_path = path;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let deleted = Instant::now();
    for name in names {
        n.remove_manifest(&format!("{name}.yaml"));
    }
    for name in names {
        n.wait_gone(name, Duration::from_secs(180)).await;
    }
    let pods_gone = deleted.elapsed();
    let left_pods = loop {
        if dirs.iter().all(|d| !d.exists()) {
            break deleted.elapsed();
        }
        assert!(
            deleted.elapsed() < Duration::from_secs(300),
            "the pod directories are still in pods/\n{}",
            tail(&n.logs(), 30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let trash = root.join("trash");
    let emptied = loop {
        let inside = std::fs::read_dir(&trash).map(|d| d.count()).unwrap_or(0);
        if inside == 0 {
            break deleted.elapsed();
        }
        assert!(
            deleted.elapsed() < Duration::from_secs(900),
            "{inside} entries still in {} after 15 min\n{}",
            trash.display(),
            tail(&n.logs(), 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // A few more answers after the deletion ended.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    poller.await.expect("poller");
    node_stop.store(true, Ordering::Relaxed);
    let seen = tokio::task::spawn_blocking(move || node_watch.join().expect("node watcher"))
        .await
        .expect("join");
    // The longest time the Lease went unrenewed, as the API server saw it.
    let longest_gap = seen
        .renewals
        .windows(2)
        .map(|w| w[1].duration_since(w[0]))
        .max()
        .unwrap_or_default();

    let answers = std::mem::take(&mut *answers.lock().unwrap());
    println!(
        "deleted at 0 s: pods gone {pods_gone:?}, directories out of pods/ {left_pods:?}, \
         trash empty {emptied:?}; {} answers, the slowest {:?} ({}); \
         Lease renewed {} times in {} samples, longest gap {longest_gap:#}",
        answers.requests,
        answers.slowest,
        answers.slowest_path,
        seen.renewals.len(),
        seen.samples,
    );
    let log = n.logs();
    assert!(answers.requests > 10, "{answers:?}");
    assert!(
        answers.failures.is_empty(),
        "answers that failed: {:?}\n{}",
        answers.failures,
        tail(&log, 40)
    );
    assert!(
        answers.slowest < ANSWER_WITHIN,
        "an answer took {:?} ({})\n{}",
        answers.slowest,
        answers.slowest_path,
        tail(&log, 40)
    );
    assert!(
        seen.not_ready.is_empty(),
        "the Node was not Ready: {:?}",
        seen.not_ready
    );
    assert!(
        seen.renewals.len() >= 5,
        "the Lease was renewed only {} times in {} s",
        seen.renewals.len(),
        seen.samples
    );
    assert!(
        longest_gap < jiff::SignedDuration::from_secs(8),
        "the Lease went {longest_gap:#} without renewal (its duration: 8 s)"
    );
    assert!(
        !log.contains("no answer to Status"),
        "the runtime check timed out during the deletion\n{}",
        tail(&log, 40)
    );
    assert_no_runtime_stalls(&n).await;
    assert!(
        log.contains("deleted from the trash"),
        "the trash's emptier did not log its work\n{}",
        tail(&log, 40)
    );
}
