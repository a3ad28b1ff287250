//! Pod start: 1 pod and 50 pods at once (one testbox container each, image present), manifests
//! written → every container running as nodelet's `/pods` reports it, next to the real kubelet
//! doing the same (its read-only `/pods`) and a minimal CRI client doing RunPodSandbox +
//! CreateContainer + StartContainer for the same pods with the same parallelism. Rounds
//! alternate bare, nodelet and kubelet so all three see the same machine.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodelet::cri::remote::RemoteRuntime;
use nodelet::cri::{api, labels, Runtime};

use crate::agent::{self, pod_yaml, Agent, Kind, TESTBOX};
use crate::report::{millis, num, Row, Section, Summary, Verdict};
use crate::sys::{self, LoadMark};
use crate::Options;
use nodelet_testkit::pod::all_running;

/// One pod through the bare CRI: sandbox, then its container created and started; the three
/// calls' durations.
async fn bare_pod(rt: Arc<RemoteRuntime>, node: String, name: String, logs: String) -> [f64; 3] {
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
    let t = Instant::now();
    let id = rt
        .run_pod_sandbox(sandbox.clone(), "")
        .await
        .expect("RunPodSandbox");
    let run = t.elapsed();
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
    let t = Instant::now();
    let cid = rt
        .create_container(&id, container, sandbox)
        .await
        .expect("CreateContainer");
    let create = t.elapsed();
    let t = Instant::now();
    rt.start_container(&cid).await.expect("StartContainer");
    [run, create, t.elapsed()].map(|d| d.as_secs_f64() * 1000.0)
}

/// `n` pods at once through the bare CRI; the time until the last container started.
async fn bare_round(
    rt: &Arc<RemoteRuntime>,
    n: usize,
    round: usize,
    logs: &str,
    calls: &mut [f64; 3],
) -> Duration {
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
        let took = t.await.expect("bare pod task");
        for (sum, ms) in calls.iter_mut().zip(took) {
            *sum += ms;
        }
    }
    let took = started.elapsed();
    agent::remove_sandboxes(rt.clone(), node).await;
    took
}

/// CRI calls nodelet made, by operation: (count, seconds), summed over rounds.
type CriCalls = BTreeMap<String, (f64, f64)>;

/// Adds the growth of the CRI call histograms between two samples to `calls`.
fn add_calls(calls: &mut CriCalls, before: &HashMap<String, f64>, after: &HashMap<String, f64>) {
    for (key, value) in after {
        let grown = value - before.get(key).copied().unwrap_or(0.0);
        let op = |suffix: &str| {
            key.strip_prefix(suffix)?
                .split('"')
                .nth(1)
                .map(str::to_string)
        };
        if let Some(op) = op("_count{") {
            calls.entry(op).or_default().0 += grown;
        } else if let Some(op) = op("_sum{") {
            calls.entry(op).or_default().1 += grown;
        }
    }
}

/// `n` manifests written at once; the time until the agent's `/pods` shows all their
/// containers running.
async fn agent_round(a: &Agent, n: usize, round: usize, calls: &mut CriCalls) -> Duration {
    let names: Vec<String> = (0..n).map(|i| format!("s{n}-{round}-{i}")).collect();
    let full: Vec<String> = names.iter().map(|s| a.pod_name(s)).collect();
    let every = if n == 1 {
        Duration::from_millis(5)
    } else {
        Duration::from_millis(20)
    };
    let before = a.metric_samples(a.kind.cri_calls_metric()).await;
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
    add_calls(
        calls,
        &before,
        &a.metric_samples(a.kind.cri_calls_metric()).await,
    );
    a.remove_all(Duration::from_secs(600)).await;
    took
}

/// [`agent_round`] for the kubelet, continued for the round and stopped again after it.
async fn kubelet_round(
    k: Option<&Agent>,
    n: usize,
    round: usize,
    calls: &mut CriCalls,
) -> Option<Duration> {
    let k = k?;
    k.pause(false);
    // Let it catch up with what it missed while stopped (not timed).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let took = agent_round(k, n, round, calls).await;
    k.pause(true);
    Some(took)
}

/// `op count × mean ms, …; in all N ms of CRI time per pod`.
fn per_pod_calls(calls: &CriCalls, pods: f64) -> String {
    let per_pod: Vec<String> = calls
        .iter()
        .filter(|(_, (count, _))| *count > 0.0)
        .map(|(op, (count, seconds))| {
            format!(
                "{op} {} × {} ms",
                num(count / pods),
                num(seconds * 1000.0 / count)
            )
        })
        .collect();
    let in_calls: f64 = calls.values().map(|(_, s)| s * 1000.0).sum::<f64>() / pods;
    format!(
        "{}; in all {} ms of CRI time per pod",
        per_pod.join(", "),
        num(in_calls)
    )
}

pub async fn run(opts: &Options) -> Section {
    let rt = agent::runtime();
    let logs = tempfile::tempdir().expect("tempdir");
    let logs_path = logs.path().display().to_string();
    let a = Agent::start("start", "").await;
    // The kubelet kills every running pod of the runtime that is not one of its own: it stays
    // stopped (SIGSTOP) while the bare client and nodelet start theirs, and the others' pods
    // are all gone when it runs.
    let kubelet = if agent::kubelet_binary().is_some() && agent::is_primary_runtime() {
        let k = Agent::start_as(Kind::Kubelet, "start", "").await;
        k.pause(true);
        Some(k)
    } else {
        None
    };
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for n in [1usize, 50] {
        let load = LoadMark::start();
        // One unmeasured round first: caches, CNI, the first shim of each kind.
        let mut calls = CriCalls::new();
        let mut bare_calls = [0.0; 3];
        bare_round(&rt, n, 0, &logs_path, &mut bare_calls).await;
        agent_round(&a, n, 0, &mut calls).await;
        let mut kubelet_calls = CriCalls::new();
        kubelet_round(kubelet.as_ref(), n, 0, &mut kubelet_calls).await;
        kubelet_calls.clear();
        calls.clear();
        bare_calls = [0.0; 3];
        // One pod is quick: more rounds for a steadier median.
        let rounds = if n == 1 { opts.runs * 4 } else { opts.runs };
        let (mut bare, mut ours, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
        for round in 1..=rounds {
            bare.push(bare_round(&rt, n, round, &logs_path, &mut bare_calls).await);
            ours.push(agent_round(&a, n, round, &mut calls).await);
            theirs.extend(kubelet_round(kubelet.as_ref(), n, round, &mut kubelet_calls).await);
            eprintln!(
                "start: {n} pod(s), round {round}: bare {:.0} ms, nodelet {:.0} ms, kubelet {} \
                 (load {:.1})",
                bare[round - 1].as_secs_f64() * 1000.0,
                ours[round - 1].as_secs_f64() * 1000.0,
                theirs.last().map_or("—".into(), |t| format!(
                    "{:.0} ms",
                    t.as_secs_f64() * 1000.0
                )),
                sys::load_now()
            );
        }
        let pods = (n * rounds) as f64;
        let kubelet_note = if kubelet.is_some() {
            format!(" The kubelet's: {}.", per_pod_calls(&kubelet_calls, pods))
        } else {
            String::new()
        };
        notes.push(format!(
            "CRI calls per pod while {n} pod{} started (count × mean duration; calls of different \
             pods overlap): {}.{kubelet_note} The bare client's: \
             run_podsandbox {} ms, create_container {} ms, start_container {} ms.",
            if n == 1 { "" } else { "s" },
            per_pod_calls(&calls, pods),
            num(bare_calls[0] / pods),
            num(bare_calls[1] / pods),
            num(bare_calls[2] / pods)
        ));
        let (b, o) = (
            Summary::of(&millis(&bare)).expect("rounds"),
            Summary::of(&millis(&ours)).expect("rounds"),
        );
        let goal = if n == 1 { 1.10 } else { 1.20 };
        let ratio = o.p50 / b.p50;
        let load = load.end();
        let k = Summary::of(&millis(&theirs));
        rows.push(
            Row::new(
                format!(
                    "{n} pod{} started, median ms",
                    if n == 1 { "" } else { "s" }
                ),
                num(o.p50),
            )
            .kubelet(
                k.as_ref().map_or(String::new(), |k| num(k.p50)),
                k.as_ref().map(|k| o.p50 / k.p50),
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
            .kubelet(
                k.as_ref().map_or(String::new(), |k| num(k.p90)),
                k.as_ref().map(|k| o.p90 / k.p90),
            )
            .baseline(num(b.p90), Some(o.p90 / b.p90))
            .load(&load),
        );
    }
    drop(a);
    drop(kubelet);
    Section {
        part: "start".into(),
        title: "Pod start".into(),
        measured: format!("{}, nodelet {}", sys::now_utc(), sys::commit()),
        rows,
        notes: [format!(
            "Each round writes the manifests (testbox `serve --http 8080`, image present) into \
             nodelet's static pod directory at once and polls `/pods` (every 5 ms for one pod, 20 \
             ms for 50) until every container is running; the kubelet's round does the same with \
             the real kubelet (its read-only `/pods`, same configuration, stopped with SIGSTOP \
             while the others run: it kills every running pod of the runtime that is not its \
             own; continued a second before its round); the bare round runs RunPodSandbox + \
             CreateContainer + StartContainer for the same number of pods, all at once, with \
             nodelet's own CRI client. Rounds alternate bare, nodelet and kubelet; one unmeasured round of \
             each comes first; {} measured rounds of one pod, {} of 50. Pods are removed between \
             rounds (not timed).",
            opts.runs * 4,
            opts.runs
        )]
        .into_iter()
        .chain(notes)
        .collect(),
    }
}
