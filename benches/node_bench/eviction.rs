//! Eviction in the cgroup v2 VM (tests/vm/mod.rs: qemu under software emulation, systemd as
//! PID 1, containerd and nodelet as units). The VM boots once and the cycle repeats inside it:
//! a Burstable static pod allocates 10 MiB every 100 ms until `memory.available` (the root
//! cgroup's working set against `MemTotal`, as nodelet computes it) crosses the hard threshold,
//! and is evicted. The guest samples `memory.available` every 10 ms itself, so the crossing is
//! timed from outside nodelet; the kill is timed by nodelet's log line that issues it and by the
//! runtime's `finishedAt` of the hog's container (the process dead).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use nodelet::cri::{api, labels, Runtime};

use crate::report::{ms_between, num, Row, Section, Summary, Verdict};
use crate::sys::{self, LoadMark};
use crate::vm::{self, Driver, Guest};
use crate::Options;

/// The VM scenario's name (the guest checks it was booted for it).
pub const SCENARIO: &str = "eviction_bench";
const MI: u64 = 1 << 20;
const RESULT: &str = "BENCH-EVICTION-RESULT ";
/// How far below what is free at the start the threshold sits.
const HEADROOM_MIB: u64 = 300;
/// The number of cycles, for the guest (the host passes it through `scripts/vm.sh --env`).
const RUNS_VAR: &str = "NODELET_BENCH_EVICTION_RUNS";

/// Guest side: runs the scenario this VM was booted for.
pub fn in_guest() {
    let runs = std::env::var(RUNS_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    vm::scenario_with(SCENARIO, Driver::Systemd, Duration::ZERO, &[], |g| {
        guest(g, runs)
    });
}

/// Host side: boots the VM once for `runs` cycles and turns the guest's results into a table.
pub async fn run(opts: &Options) -> Section {
    let runs = opts.eviction_runs;
    let load = LoadMark::start();
    // Boot, containerd, images: about two minutes under emulation; then each cycle.
    let timeout = Duration::from_secs(600 + 90 * runs as u64);
    let lines = tokio::task::spawn_blocking(move || {
        vm::scenario_with(
            SCENARIO,
            Driver::Systemd,
            timeout,
            &[(RUNS_VAR, runs.to_string())],
            |g| guest(g, runs),
        )
    })
    .await
    .expect("the VM run");
    let load = load.end();
    let results: Vec<serde_json::Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str(&l[l.find(RESULT)? + RESULT.len()..]).ok())
        .collect();
    let field = |name: &str| -> Vec<f64> {
        results
            .iter()
            .filter_map(|r| r.get(name)?.as_f64())
            .collect()
    };
    let decided = Summary::of(&field("crossing_to_kill_issued_ms"));
    let dead = Summary::of(&field("crossing_to_dead_ms"));
    let inside = Summary::of(&field("first_pass_to_kill_ms"));
    let short = |s: &Option<Summary>| {
        s.as_ref().map_or("—".to_string(), |s| {
            format!("p50 {} / max {} (n={})", num(s.p50), num(s.max), s.n)
        })
    };
    let mut rows = vec![Row::new(
        "memory.available crossing → kill issued (nodelet's log line), ms",
        short(&decided),
    )
    .goal(
        "≤ 1 s",
        decided
            .as_ref()
            .map_or(Verdict::Misses, |s| Verdict::at_most(s.max, 1000.0)),
    )
    .load(&load)];
    rows.push(
        Row::new(
            "memory.available crossing → hog's process dead (runtime `finishedAt`), ms",
            short(&dead),
        )
        .load(&load),
    );
    rows.push(
        Row::new(
            "nodelet's own view: pass that first saw the threshold → kill issued, ms",
            short(&inside),
        )
        .load(&load),
    );
    Section {
        part: "eviction".into(),
        title: "Eviction (cgroup v2 VM)".into(),
        measured: format!("{}, nodelet {}", sys::now_utc(), sys::commit()),
        rows,
        notes: vec![format!(
            "One VM boot (qemu `-accel tcg`, 2 vCPUs, 3 GiB, systemd driver; everything runs \
             several times slower than on real hardware), {runs} cycles inside it: nodelet \
             standalone with `evictStaticPods: true` and `evictionHard: memory.available` \
             {HEADROOM_MIB} MiB below what is available when it starts; each cycle writes a \
             Burstable static pod (request 1Mi) that allocates 10 MiB every 100 ms, samples \
             `memory.available` every 10 ms from `/sys/fs/cgroup/memory.stat` and `/proc/meminfo` \
             (nodelet's formula) for the crossing, reads the time of nodelet's `eviction manager: \
             evicting pod` log line (kill issued: hard eviction, grace 0) and the container's \
             `finishedAt`, then removes the pod and waits for the memory to come back. The load \
             average is the host's."
        )],
    }
}

/// `memory.available` as nodelet computes it: `MemTotal` less the root cgroup's working set.
fn memory_available() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string("/sys/fs/cgroup/memory.stat").unwrap_or_default();
    let field = |name: &str| -> u64 {
        stat.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let working_set = (field("anon") + field("file")).saturating_sub(field("inactive_file"));
    (total_kib * 1024).saturating_sub(working_set)
}

fn hog_yaml(name: &str, mib: u64) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 5\n  \
         containers:\n  - name: main\n    image: localhost/testbox:1\n    imagePullPolicy: Never\n    \
         args: [alloc, --mib, \"{mib}\", --chunk-mib, \"10\", --interval, 100ms, --hold]\n    \
         resources: {{requests: {{memory: 1Mi}}}}\n"
    )
}

/// The time of the first line of nodelet's journal that contains every one of `needles`
/// (tracing's text lines start with an RFC 3339 timestamp).
fn journal_time(g: &Guest, needles: &[&str]) -> Option<Timestamp> {
    g.journal_lines(needles[0])
        .iter()
        .find(|l| needles.iter().all(|n| l.contains(n)))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
}

async fn wait(what: &str, g: &Guest, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "no {what} after {timeout:?}\n{}",
            g.journal(40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Guest side: nodelet with the threshold, then `runs` eviction cycles; one result line each.
async fn guest(g: Guest, runs: usize) {
    let available = memory_available();
    let threshold = available / MI - HEADROOM_MIB;
    println!(
        "bench: memory.available {} MiB, threshold {threshold} MiB",
        available / MI
    );
    std::fs::create_dir_all(&g.manifests).expect("manifests");
    let config = g
        .config(&format!(
            "evictionHard: {{memory.available: \"{threshold}Mi\"}}\nevictStaticPods: true\n\
             evictionPressureTransitionPeriod: 5s\n"
        ))
        // Operator-level logging, as a node runs; the eviction lines are warnings.
        .replace("  verbosity: 4\n", "  verbosity: 0\n");
    std::fs::write("/etc/nodelet/config.yaml", config).expect("config");
    g.systemctl(&["start", "nodelet.service"]);
    g.wait_metric("nodelet_eviction_passes_total", "an eviction pass", |v| {
        v >= 1.0
    })
    .await;
    let rt = crate::agent::runtime();
    for i in 0..runs {
        let name = format!("hog{i}");
        let full = g.pod_name(&name);
        // Memory back above the threshold with room to spare.
        wait("memory back", &g, Duration::from_secs(180), || {
            memory_available() / MI > threshold + 200
        })
        .await;
        let sum_before = g
            .metric("nodelet_eviction_crossing_to_kill_seconds_sum")
            .await
            .unwrap_or(0.0);
        // Enough to cross and go 200 MiB past, well short of an OOM.
        let mib = (memory_available() / MI).saturating_sub(threshold) + 200;
        g.write_manifest(&format!("{name}.yaml"), &hog_yaml(&name, mib));
        let crossed: Arc<Mutex<Option<Timestamp>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (crossed, stop) = (crossed.clone(), stop.clone());
            let limit = threshold * MI;
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if memory_available() < limit {
                        let mut c = crossed.lock().unwrap_or_else(|e| e.into_inner());
                        if c.is_none() {
                            *c = Some(Timestamp::now());
                        }
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        let evicted = g
            .wait_pod(&name, "evicted", |p| {
                p.status
                    .as_ref()
                    .is_some_and(|s| s.reason.as_deref() == Some("Evicted"))
            })
            .await;
        stop.store(true, Ordering::Relaxed);
        let _ = sampler.join();
        let crossed = *crossed.lock().unwrap_or_else(|e| e.into_inner());
        let uid = evicted.metadata.uid.clone().unwrap_or_default();
        let issued = journal_time(&g, &["eviction manager: evicting pod", &uid]);
        let selector = [
            (labels::NODE_NAME.to_string(), g.node.clone()),
            (labels::POD_NAME.to_string(), full.clone()),
        ]
        .into();
        let mut dead = None;
        for c in rt
            .list_containers(Some(api::ContainerFilter {
                label_selector: selector,
                ..Default::default()
            }))
            .await
            .unwrap_or_default()
        {
            if let Ok(s) = rt.container_status(&c.id).await {
                if s.finished_at > 0 {
                    dead = Timestamp::from_nanosecond(i128::from(s.finished_at)).ok();
                }
            }
        }
        let sum_after = g
            .metric("nodelet_eviction_crossing_to_kill_seconds_sum")
            .await
            .unwrap_or(0.0);
        let result = serde_json::json!({
            "run": i,
            "crossing_to_kill_issued_ms": crossed.zip(issued).map(|(c, k)| ms_between(c, k)),
            "crossing_to_dead_ms": crossed.zip(dead).map(|(c, d)| ms_between(c, d)),
            "first_pass_to_kill_ms": (sum_after - sum_before) * 1000.0,
        });
        println!("{RESULT}{result}");
        g.remove_manifest(&format!("{name}.yaml"));
        g.wait_gone(&name).await;
    }
}
