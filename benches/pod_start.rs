//! Pod start and exit-detection latency on a real containerd.
//!
//!   eval "$(scripts/test-env.sh up)"; cargo bench --bench pod_start
//!
//! Measures, each over several rounds (median and min/max):
//! 1. the bare CRI calls for a two-container pod (RunPodSandbox, then CreateContainer +
//!    StartContainer twice) — the floor;
//! 2. nodelet: manifest written → both containers running in `/pods`;
//! 3. nodelet: a container's `finishedAt` → the terminated state visible in `/pods`
//!    (how fast an exit reaches status; the kubelet's relist alone takes up to 1 s).
//!
//! Timings depend on the machine and its load; this prints numbers, it asserts nothing.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use nodelet::cri::remote::RemoteRuntime;
use nodelet::cri::{api, labels, Runtime};

const ROUNDS: usize = 5;
const IMAGE: &str = "localhost/testbox:1";

fn endpoint() -> String {
    std::env::var("NODELET_TEST_CRI").unwrap_or_else(|_| {
        eprintln!("NODELET_TEST_CRI is not set: run `eval \"$(scripts/test-env.sh up)\"` first");
        std::process::exit(2)
    })
}

fn summary(name: &str, mut v: Vec<Duration>) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name:<55} median {:>7.1} ms   min {:>7.1} ms   max {:>7.1} ms   (n={})",
        ms(v[v.len() / 2]),
        ms(v[0]),
        ms(v[v.len() - 1]),
        v.len()
    );
}

async fn bare_cri(rt: &RemoteRuntime, round: usize, logs: &std::path::Path) -> Duration {
    let node = format!("bench-bare-{}", std::process::id());
    let labels: HashMap<String, String> = [
        (labels::NODE_NAME.to_string(), node),
        (labels::POD_UID.to_string(), format!("bare-{round}")),
    ]
    .into();
    let sandbox = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: format!("bare-{round}"),
            namespace: "bench".into(),
            uid: format!("bare-{round}"),
            attempt: 0,
        }),
        hostname: format!("bare-{round}"),
        log_directory: logs.join(format!("bare-{round}")).display().to_string(),
        labels: labels.clone(),
        ..Default::default()
    };
    let started = Instant::now();
    let id = rt
        .run_pod_sandbox(sandbox.clone())
        .await
        .expect("RunPodSandbox");
    for (name, port) in [("one", "8080"), ("two", "8081")] {
        let c = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(api::ImageSpec {
                image: IMAGE.into(),
                ..Default::default()
            }),
            args: vec!["serve".into(), "--http".into(), port.into()],
            log_path: format!("{name}/0.log"),
            labels: labels.clone(),
            ..Default::default()
        };
        let cid = rt
            .create_container(&id, c, sandbox.clone())
            .await
            .expect("CreateContainer");
        rt.start_container(&cid).await.expect("StartContainer");
    }
    let took = started.elapsed();
    let _ = rt.stop_pod_sandbox(&id).await;
    let _ = rt.remove_pod_sandbox(&id).await;
    took
}

async fn pods(port: u16) -> Vec<Pod> {
    let Ok(resp) = reqwest::get(format!("http://127.0.0.1:{port}/pods")).await else {
        return vec![];
    };
    let Ok(v) = resp.json::<serde_json::Value>().await else {
        return vec![];
    };
    serde_json::from_value(v["items"].clone()).unwrap_or_default()
}

fn manifest(name: &str, policy: &str, containers: &[(&str, &str)]) -> String {
    let mut s = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 1\n  containers:\n"
    );
    for (c, args) in containers {
        s.push_str(&format!(
            "  - name: {c}\n    image: {IMAGE}\n    imagePullPolicy: Never\n    args: [{args}]\n"
        ));
    }
    s
}

#[tokio::main]
async fn main() {
    let endpoint = endpoint();
    let rt = RemoteRuntime::connect(&endpoint, &endpoint, Duration::from_secs(60)).expect("CRI");
    let dir = tempfile::tempdir().expect("tempdir");

    let mut bare = Vec::new();
    for round in 0..ROUNDS {
        bare.push(bare_cri(&rt, round, dir.path()).await);
    }

    let manifests = dir.path().join("manifests");
    std::fs::create_dir_all(&manifests).expect("mkdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let node = format!("bench-{}", std::process::id());
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             containerRuntimeEndpoint: {endpoint}\nstaticPodPath: {m}\nfileCheckFrequency: 20s\n\
             podLogsDir: {d}/logs\nrootDir: {d}/root\nnodeName: {node}\nreadOnlyPort: {port}\nhealthzPort: 0\nport: 0\n\
             failCgroupV1: false\n",
            m = manifests.display(),
            d = dir.path().display()
        ),
    )
    .expect("config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodelet"))
        .args(["run", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::null())
        .spawn()
        .expect("nodelet");
    while reqwest::get(format!("http://127.0.0.1:{port}/healthz"))
        .await
        .is_err()
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut start = Vec::new();
    let mut exit = Vec::new();
    for round in 0..ROUNDS {
        let name = format!("start{round}");
        let body = manifest(
            &name,
            "Always",
            &[
                ("one", "serve, --http, \"8080\""),
                ("two", "serve, --http, \"8081\""),
            ],
        );
        let tmp = dir.path().join(".tmp");
        std::fs::write(&tmp, body).expect("write");
        let t0 = Instant::now();
        std::fs::rename(&tmp, manifests.join(format!("{name}.yaml"))).expect("rename");
        let full = format!("{name}-{node}");
        loop {
            let ready = pods(port).await.into_iter().any(|p| {
                p.metadata.name.as_deref() == Some(full.as_str())
                    && p.status
                        .as_ref()
                        .and_then(|s| s.container_statuses.as_ref())
                        .is_some_and(|cs| {
                            cs.len() == 2
                                && cs
                                    .iter()
                                    .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
                        })
            });
            if ready {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        start.push(t0.elapsed());

        // Exit detection: a container exits after 1 s; compare its finishedAt with the moment
        // the terminated state shows in /pods.
        let name = format!("exit{round}");
        std::fs::write(
            manifests.join(format!("{name}.yaml")),
            manifest(
                &name,
                "Never",
                &[("main", "exit, --code, \"0\", --after, 1s")],
            ),
        )
        .expect("write");
        let full = format!("{name}-{node}");
        let finished = loop {
            let found = pods(port).await.into_iter().find_map(|p| {
                if p.metadata.name.as_deref() != Some(full.as_str()) {
                    return None;
                }
                p.status?
                    .container_statuses?
                    .first()?
                    .state
                    .clone()?
                    .terminated?
                    .finished_at
            });
            if let Some(t) = found {
                break t;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let seen = jiff::Timestamp::now();
        // finishedAt has whole-second precision in the API; use the runtime's exact value.
        let exact = exact_finished_at(&rt, &node, "main")
            .await
            .unwrap_or(finished.0);
        exit.push(Duration::try_from(seen.duration_since(exact)).unwrap_or_default());
    }
    let _ = child.kill();
    let _ = child.wait();
    // Leave nothing behind.
    let selector: HashMap<String, String> = [(labels::NODE_NAME.to_string(), node)].into();
    if let Ok(sandboxes) = rt
        .list_pod_sandbox(Some(api::PodSandboxFilter {
            label_selector: selector,
            ..Default::default()
        }))
        .await
    {
        for s in sandboxes {
            let _ = rt.stop_pod_sandbox(&s.id).await;
            let _ = rt.remove_pod_sandbox(&s.id).await;
        }
    }

    println!();
    summary("bare CRI: sandbox + 2 × (create + start)", bare);
    summary("nodelet: manifest written → 2 containers running", start);
    summary("nodelet: container finishedAt → terminated in /pods", exit);
}

async fn exact_finished_at(rt: &RemoteRuntime, node: &str, name: &str) -> Option<jiff::Timestamp> {
    let selector: HashMap<String, String> = [
        (labels::NODE_NAME.to_string(), node.to_string()),
        (labels::CONTAINER_NAME.to_string(), name.to_string()),
    ]
    .into();
    let containers = rt
        .list_containers(Some(api::ContainerFilter {
            label_selector: selector,
            ..Default::default()
        }))
        .await
        .ok()?;
    let mut latest = None;
    for c in containers {
        let s = rt.container_status(&c.id).await.ok()?;
        if s.finished_at > 0 {
            let t = jiff::Timestamp::from_nanosecond(i128::from(s.finished_at)).ok()?;
            if latest.is_none_or(|l| t > l) {
                latest = Some(t);
            }
        }
    }
    latest
}
