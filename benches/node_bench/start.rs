//! Pod start: 1 pod and 50 pods at once (one testbox container each, image present), manifests
//! written → every container running as nodelet's `/pods` reports it, next to a minimal CRI
//! client doing RunPodSandbox + CreateContainer + StartContainer for the same pods with the same
//! parallelism. Rounds alternate bare and nodelet so both see the same machine.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodelet::cri::remote::RemoteRuntime;
use nodelet::cri::{api, labels, Runtime};

use crate::agent::{self, all_running, pod_yaml, Agent, TESTBOX};
use crate::report::{millis, num, Row, Section, Summary, Verdict};
use crate::sys::{self, LoadMark};
use crate::Options;

/// One pod through the bare CRI: sandbox, then its container created and started.
async fn bare_pod(rt: Arc<RemoteRuntime>, node: String, name: String, logs: String) {
    let labels: HashMap<String, String> = [
        (labels::NODE_NAME.to_string(), node),
        (labels::POD_UID.to_string(), name.clone()),
    ]
    .into();
    let sandbox = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.clone(),
            namespace: "bench".into(),
            uid: name.clone(),
            attempt: 0,
        }),
        hostname: name.clone(),
        log_directory: format!("{logs}/{name}"),
        labels: labels.clone(),
        ..Default::default()
    };
    let id = rt
        .run_pod_sandbox(sandbox.clone())
        .await
        .expect("RunPodSandbox");
    let container = api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: "main".into(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: TESTBOX.into(),
            ..Default::default()
        }),
        args: vec!["serve".into(), "--http".into(), "8080".into()],
        log_path: "main/0.log".into(),
        labels,
        ..Default::default()
    };
    let cid = rt
        .create_container(&id, container, sandbox)
        .await
        .expect("CreateContainer");
    rt.start_container(&cid).await.expect("StartContainer");
}

/// `n` pods at once through the bare CRI; the time until the last container started.
async fn bare_round(rt: &Arc<RemoteRuntime>, n: usize, round: usize, logs: &str) -> Duration {
    let node = format!("bench-bare-{}", std::process::id());
    let started = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            tokio::spawn(bare_pod(
                rt.clone(),
                node.clone(),
                format!("bare-{n}-{round}-{i}"),
                logs.to_string(),
            ))
        })
        .collect();
    for t in tasks {
        t.await.expect("bare pod task");
    }
    let took = started.elapsed();
    agent::remove_sandboxes(rt.clone(), node).await;
    took
}

/// `n` manifests written at once; the time until `/pods` shows all their containers running.
async fn nodelet_round(a: &Agent, n: usize, round: usize) -> Duration {
    let names: Vec<String> = (0..n).map(|i| format!("s{n}-{round}-{i}")).collect();
    let full: Vec<String> = names.iter().map(|s| a.pod_name(s)).collect();
    let every = if n == 1 {
        Duration::from_millis(5)
    } else {
        Duration::from_millis(20)
    };
    let started = Instant::now();
    for name in &names {
        a.write_manifest(
            name,
            &pod_yaml(
                name,
                "Always",
                1,
                &[("main", "serve, --http, \"8080\"", "")],
            ),
        );
    }
    agent::wait_pods(
        a,
        "all pods running",
        Duration::from_secs(600),
        every,
        |pods| {
            full.iter().all(|f| {
                pods.iter()
                    .any(|p| p.metadata.name.as_deref() == Some(f) && all_running(p))
            })
        },
    )
    .await;
    let took = started.elapsed();
    a.remove_all(Duration::from_secs(600)).await;
    took
}

pub async fn run(opts: &Options) -> Section {
    let rt = agent::runtime();
    let logs = tempfile::tempdir().expect("tempdir");
    let logs_path = logs.path().display().to_string();
    let a = Agent::start("start", "").await;
    let mut rows = Vec::new();
    for n in [1usize, 50] {
        let load = LoadMark::start();
        // One unmeasured round first: caches, CNI, the first shim of each kind.
        bare_round(&rt, n, 0, &logs_path).await;
        nodelet_round(&a, n, 0).await;
        let (mut bare, mut ours) = (Vec::new(), Vec::new());
        for round in 1..=opts.runs {
            bare.push(bare_round(&rt, n, round, &logs_path).await);
            ours.push(nodelet_round(&a, n, round).await);
            eprintln!(
                "start: {n} pod(s), round {round}: bare {:.0} ms, nodelet {:.0} ms (load {:.1})",
                bare[round - 1].as_secs_f64() * 1000.0,
                ours[round - 1].as_secs_f64() * 1000.0,
                sys::load_now()
            );
        }
        let (b, o) = (
            Summary::of(&millis(&bare)).expect("rounds"),
            Summary::of(&millis(&ours)).expect("rounds"),
        );
        let goal = if n == 1 { 1.10 } else { 1.20 };
        let ratio = o.p50 / b.p50;
        let load = load.end();
        rows.push(
            Row::new(
                format!(
                    "{n} pod{} started, median ms",
                    if n == 1 { "" } else { "s" }
                ),
                num(o.p50),
            )
            .baseline(num(b.p50), Some(ratio))
            .goal(format!("≤ {goal:.2}× bare"), Verdict::at_most(ratio, goal))
            .load(&load),
        );
        rows.push(
            Row::new(
                format!(
                    "{n} pod{} started, p90 ms (of {})",
                    if n == 1 { "" } else { "s" },
                    o.n
                ),
                num(o.p90),
            )
            .baseline(num(b.p90), Some(o.p90 / b.p90))
            .load(&load),
        );
    }
    drop(a);
    Section {
        part: "start".into(),
        title: "Pod start".into(),
        measured: format!("{}, nodelet {}", sys::now_utc(), sys::commit()),
        rows,
        notes: vec![format!(
            "Each round writes the manifests (testbox `serve --http 8080`, image present) into \
             nodelet's static pod directory at once and polls `/pods` (every 5 ms for one pod, 20 \
             ms for 50) until every container is running; the bare round runs RunPodSandbox + \
             CreateContainer + StartContainer for the same number of pods, all at once, with \
             nodelet's own CRI client. Rounds alternate bare and nodelet; one unmeasured round of \
             each comes first; {} measured rounds. Pods are removed between rounds (not timed).",
            opts.runs
        )],
    }
}
