//! Footprint: an idle nodelet (no pods) over 90 s; 110 pods with an exec liveness and an HTTP readiness probe each (period 10 s):
//! nodelet's CPU (cores, from `/proc/PID/stat`) over a two-minute window and its RSS, next to
//! containerd's and its shims' in the same window. Then 500 pause pods (`maxPods` raised): the
//! time to bring them up, and nodelet's CPU and RSS per pod.

use std::time::{Duration, Instant};

use crate::agent::{self, Agent, Kind, PAUSE, TESTBOX};
use crate::report::{num, LoadSpan, Row, Section, Verdict};
use crate::sys::{self, LoadMark, Watched, WindowResult};
use crate::Options;
use nodelet_testkit::pod::{all_running, is_ready};

const PROBED_PODS: usize = 110;

/// How long an idle nodelet (no pods) is watched: long enough for every periodic task
/// (relist 5 s, housekeeping, the node status) to run several times.
const IDLE_WINDOW: Duration = Duration::from_secs(90);

fn probed_pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  \
         containers:\n  - name: web\n    image: {TESTBOX}\n    imagePullPolicy: Never\n    \
         args: [serve, --http, \"8080\"]\n    \
         livenessProbe:\n      exec: {{command: [/bin/true]}}\n      periodSeconds: 10\n      timeoutSeconds: 5\n    \
         readinessProbe:\n      httpGet: {{path: /healthz, port: 8080}}\n      periodSeconds: 10\n      timeoutSeconds: 5\n"
    )
}

fn pause_pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  \
         containers:\n  - name: pause\n    image: {PAUSE}\n    imagePullPolicy: Never\n"
    )
}

/// Container restarts of all pods, as `/pods` reports them.
async fn restarts(a: &Agent) -> i64 {
    a.pods()
        .await
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.status.as_ref()?.container_statuses.as_ref())
        .flatten()
        .map(|c| i64::from(c.restart_count))
        .sum()
}

fn rss_mib(pid: u32) -> f64 {
    sys::sample(pid).map_or(f64::NAN, |s| s.rss_kib as f64 / 1024.0)
}

/// Writes `count` manifests at once and waits until `/pods` shows them all running (and Ready
/// when `ready`); returns the time it took and RSS samples (pods up, MiB) taken on the way.
async fn bring_up(
    a: &Agent,
    count: usize,
    manifest: impl Fn(&str) -> String,
    ready: bool,
) -> (Duration, Vec<(usize, f64)>) {
    let started = Instant::now();
    for i in 0..count {
        let name = format!("p{i}");
        a.write_manifest(&name, &manifest(&name));
    }
    let mut samples = Vec::new();
    let deadline = started + Duration::from_secs(1800);
    loop {
        if let Some(pods) = a.pods().await {
            let up = pods
                .iter()
                .filter(|p| all_running(p) && (!ready || is_ready(p)))
                .count();
            samples.push((up, rss_mib(a.pid())));
            if up == count {
                return (started.elapsed(), samples);
            }
        }
        assert!(
            Instant::now() < deadline,
            "{count} pods not up in 30 min\n{}",
            a.log_tail(30)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// What one agent costs idle and with the 110 probed pods, and how long its restart takes.
struct Probed {
    idle: WindowResult,
    idle_rss: f64,
    took: Duration,
    load_up: LoadSpan,
    window: WindowResult,
    restarted: i64,
    /// Killed and started again → every pod running and Ready again in `/pods`.
    restart: Duration,
    restart_load: LoadSpan,
    /// Container restarts the agent's own restart caused.
    restart_restarted: i64,
}

/// Kills the agent, starts it again, and waits until `/pods` shows every one of `count` pods
/// running and Ready again (a restarted agent first lists its pods without status, or not at
/// all); the time from the new process's start.
async fn restart_until_current(a: &mut Agent, count: usize) -> Duration {
    let started = a.restart();
    let deadline = started + Duration::from_secs(900);
    loop {
        if let Some(pods) = a.pods().await {
            if pods
                .iter()
                .filter(|p| all_running(p) && is_ready(p))
                .count()
                == count
            {
                return started.elapsed();
            }
        }
        assert!(
            Instant::now() < deadline,
            "{count} pods not current again 15 min after a restart\n{}",
            a.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The idle window, then the 110 probed pods brought up, settled and watched, then a restart of
/// the agent with them; leaves no pod behind.
async fn probed(
    kind: Kind,
    opts: &Options,
    containerd: Option<u32>,
    socket: &std::path::Path,
) -> Probed {
    let mut a = Agent::start_as(kind, "footprint", "").await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_rss = rss_mib(a.pid());
    let watched = |a: &Agent| Watched {
        nodelet: a.pid(),
        containerd,
        socket: socket.to_path_buf(),
    };
    let idle = sys::window(&watched(&a), IDLE_WINDOW, Duration::from_secs(5)).await;
    eprintln!("footprint: {} idle: {:?}", kind.name(), idle.nodelet);
    let load = LoadMark::start();
    let (took, _) = bring_up(&a, PROBED_PODS, probed_pod, true).await;
    let load_up = load.end();
    eprintln!(
        "footprint: {} {PROBED_PODS} probed pods Ready in {:.1} s",
        kind.name(),
        took.as_secs_f64()
    );
    // Let the start's work and the probes' first round settle.
    tokio::time::sleep(opts.settle).await;
    let restarts_before = restarts(&a).await;
    let window = sys::window(&watched(&a), opts.window, Duration::from_secs(5)).await;
    let restarted = restarts(&a).await - restarts_before;
    eprintln!(
        "footprint: {} with 110 pods: {:?}, containerd {:?}, shims {:?}",
        kind.name(),
        window.nodelet,
        window.containerd,
        window.shims
    );
    if opts.profile > 0 && kind == Kind::Nodelet {
        let top = sys::profile(a.pid(), opts.profile, "footprint-110").await;
        eprintln!("footprint: nodelet with 110 pods, perf by symbol:\n{top}");
    }
    let before = restarts(&a).await;
    let restart_load = LoadMark::start();
    let restart = restart_until_current(&mut a, PROBED_PODS).await;
    let restart_load = restart_load.end();
    let restart_restarted = restarts(&a).await - before;
    eprintln!(
        "footprint: {} restarted with {PROBED_PODS} pods: all current again in {:.2} s",
        kind.name(),
        restart.as_secs_f64()
    );
    a.remove_all(Duration::from_secs(900)).await;
    Probed {
        idle,
        idle_rss,
        took,
        load_up,
        window,
        restarted,
        restart,
        restart_load,
        restart_restarted,
    }
}

pub async fn run(opts: &Options) -> Section {
    let endpoint = agent::endpoint();
    let socket = sys::containerd_socket(&endpoint);
    let containerd = sys::containerd_pid(&socket);
    let mut rows = Vec::new();
    let mut notes = Vec::new();

    // nodelet, then the kubelet: never both at once (the kubelet kills every running pod of the
    // runtime that is not its own).
    let ours = probed(Kind::Nodelet, opts, containerd, &socket).await;
    let theirs = match agent::kubelet_binary() {
        Some(_) => Some(probed(Kind::Kubelet, opts, containerd, &socket).await),
        None => None,
    };
    // One figure for both agents: nodelet's cell, the kubelet's, and nodelet ÷ kubelet of `of`.
    let cells = |of: fn(&Probed) -> f64, show: fn(&Probed) -> String| {
        let (k, r) = theirs.as_ref().map_or((String::new(), None), |k| {
            (show(k), Some(of(&ours) / of(k)))
        });
        (show(&ours), k, r)
    };

    let w = &ours.idle;
    let (o, k, r) = cells(
        |p| p.idle.nodelet.cores,
        |p| {
            format!(
                "{}; {} ({})",
                num(p.idle.nodelet.cores),
                num(p.idle.nodelet.rss_mib_avg),
                num(p.idle.nodelet.rss_mib_max)
            )
        },
    );
    rows.push(
        Row::new(
            format!(
                "idle, no pods: CPU over {} s, cores; RSS, MiB (average; max)",
                IDLE_WINDOW.as_secs()
            ),
            o,
        )
        .kubelet(k, r)
        .baseline(format!("containerd {}", num(w.containerd.cores)), None)
        .goal("≤ 0.005 cores", Verdict::at_most(w.nodelet.cores, 0.005))
        .load(&w.load),
    );
    let w = &ours.window;
    let load = w.load;
    let window_s = opts.window.as_secs();
    let (o, k, r) = cells(|p| p.window.nodelet.cores, |p| num(p.window.nodelet.cores));
    rows.push(
        Row::new(
            format!("110 pods with probes: CPU over {window_s} s, cores"),
            o,
        )
        .kubelet(k, r)
        .baseline(
            format!(
                "containerd {} + {} shims {}",
                num(w.containerd.cores),
                w.shims.processes,
                num(w.shims.cores)
            ),
            Some(w.nodelet.cores / (w.containerd.cores + w.shims.cores)),
        )
        .goal("≤ 0.01", Verdict::at_most(w.nodelet.cores, 0.01))
        .load(&load),
    );
    let (o, k, r) = cells(
        |p| p.window.nodelet.rss_mib_avg,
        |p| {
            format!(
                "{} ({})",
                num(p.window.nodelet.rss_mib_avg),
                num(p.window.nodelet.rss_mib_max)
            )
        },
    );
    rows.push(
        Row::new(
            "110 pods with probes: RSS, MiB (average over the window; max)",
            o,
        )
        .kubelet(k, r)
        .baseline(
            format!(
                "containerd {} + shims {}",
                num(w.containerd.rss_mib_avg),
                num(w.shims.rss_mib_avg)
            ),
            Some(w.nodelet.rss_mib_avg / (w.containerd.rss_mib_avg + w.shims.rss_mib_avg)),
        )
        .goal("≤ 30 MiB", Verdict::at_most(w.nodelet.rss_mib_avg, 30.0))
        .load(&load),
    );
    let (o, k, r) = cells(
        |p| p.took.as_secs_f64(),
        |p| {
            format!(
                "{:.1} s; idle {} MiB",
                p.took.as_secs_f64(),
                num(p.idle_rss)
            )
        },
    );
    rows.push(
        Row::new(
            "110 pods with probes: manifests written → all Ready, s; RSS idle before, MiB",
            o,
        )
        .kubelet(k, r)
        .load(&ours.load_up),
    );
    let (o, k, _) = cells(|_| 1.0, |p| p.restarted.to_string());
    rows.push(
        Row::new(
            "110 pods with probes: container restarts during the window (a steady state has none)",
            o,
        )
        .kubelet(k, None)
        .load(&load),
    );
    let (o, k, r) = cells(
        |p| p.restart.as_secs_f64(),
        |p| {
            format!(
                "{:.2} s ({} container restarts)",
                p.restart.as_secs_f64(),
                p.restart_restarted
            )
        },
    );
    rows.push(
        Row::new(
            "agent killed and started again with the 110 pods → every pod running and Ready in \
             `/pods` again, s",
            o,
        )
        .kubelet(k, r)
        .load(&ours.restart_load),
    );
    notes.push(format!(
        "The kubelet column: the real kubelet v1.37.2 (`k8s.io/kubernetes/cmd/kubelet`, built by \
         scripts/k8s.sh), standalone, with the same KubeletConfiguration (plus its own \
         `cgroupRoot`, and anonymous access to its API on 127.0.0.1, which a kubelet without an \
         API server needs), measured after nodelet on the same containerd (never both at \
         once: the kubelet kills every running pod of the runtime that is not one of its own). \
         Restart: SIGKILL, the same command again; timed from the new process's start until its \
         `/pods` (polled every 20 ms) shows all {PROBED_PODS} pods running and Ready."
    ));
    notes.push(format!(
        "Idle: the same nodelet before any pod, 10 s after its start, watched for {} s the \
         same way (an idle nodelet must sleep: `tests/idle_cpu.rs` guards it with < 2% of a core \
         in the test command).",
        IDLE_WINDOW.as_secs()
    ));
    notes.push(format!(
        "110 pods: testbox `serve --http 8080` with an exec liveness probe (`/bin/true`) and an \
         HTTP readiness probe (`/healthz`), both every 10 s with a 5 s timeout (under a loaded \
         machine's `runc exec` the default 1 s fails probes and restarts containers, which is not \
         a steady state); the kubelet's defaults otherwise \
         (relist 5 s, sync 1 min, eviction passes 1 s/10 s). After all are Ready and {} s of \
         settling, CPU is the growth of utime+stime+cutime+cstime in `/proc/PID/stat` over {} s \
         (for the shims: the sum over every shim of this containerd, so the exec probes' `runc \
         exec` children, which the shims reap, are counted there); RSS is VmRSS sampled every 5 s. \
         Ratio: nodelet / (containerd + shims).",
        opts.settle.as_secs(),
        window_s
    ));

    // 500 pause pods.
    let count = opts.many_pods;
    if count == 0 {
        return Section {
            part: "footprint".into(),
            title: "Footprint".into(),
            measured: format!("{}, nodelet {}", sys::now_utc(), sys::commit()),
            rows,
            notes,
        };
    }
    let a = Agent::start("footprint500", &format!("maxPods: {}\n", count + 10)).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle = rss_mib(a.pid());
    let idle_window = sys::window(
        &Watched {
            nodelet: a.pid(),
            containerd,
            socket: socket.clone(),
        },
        Duration::from_secs(30),
        Duration::from_secs(5),
    )
    .await;
    let load = LoadMark::start();
    let (took, samples) = bring_up(&a, count, pause_pod, false).await;
    let load_up = load.end();
    eprintln!(
        "footprint: {count} pause pods running in {:.1} s",
        took.as_secs_f64()
    );
    tokio::time::sleep(opts.settle).await;
    let w = sys::window(
        &Watched {
            nodelet: a.pid(),
            containerd,
            socket: socket.clone(),
        },
        opts.window,
        Duration::from_secs(5),
    )
    .await;
    rows.push(
        Row::new(
            format!("{count} pause pods: manifests written → all running, s"),
            format!("{:.1}", took.as_secs_f64()),
        )
        .load(&load_up),
    );
    let per_pod_kib = (w.nodelet.rss_mib_avg - idle) * 1024.0 / count as f64;
    rows.push(
        Row::new(
            format!(
                "{count} pause pods: RSS, MiB (idle {}; growth per pod, KiB)",
                num(idle)
            ),
            format!(
                "{} ({} KiB/pod)",
                num(w.nodelet.rss_mib_avg),
                num(per_pod_kib)
            ),
        )
        .baseline(
            format!(
                "containerd {} + {} shims {}",
                num(w.containerd.rss_mib_avg),
                w.shims.processes,
                num(w.shims.rss_mib_avg)
            ),
            Some(w.nodelet.rss_mib_avg / (w.containerd.rss_mib_avg + w.shims.rss_mib_avg)),
        )
        .goal(
            "≤ 100 MiB, linear",
            Verdict::at_most(w.nodelet.rss_mib_avg, 100.0),
        )
        .load(&w.load),
    );
    let per_pod_mcores = (w.nodelet.cores - idle_window.nodelet.cores) * 1000.0 / count as f64;
    rows.push(
        Row::new(
            format!(
                "{count} pause pods: CPU over {window_s} s, cores (idle {}; growth per pod, millicores)",
                num(idle_window.nodelet.cores)
            ),
            format!("{} ({} m/pod)", num(w.nodelet.cores), num(per_pod_mcores)),
        )
        .baseline(
            format!(
                "containerd {} + shims {}",
                num(w.containerd.cores),
                num(w.shims.cores)
            ),
            Some(w.nodelet.cores / (w.containerd.cores + w.shims.cores)),
        )
        .load(&w.load),
    );
    let curve: Vec<String> = [100usize, 200, 300, 400, count]
        .iter()
        .filter_map(|n| {
            samples
                .iter()
                .find(|(up, _)| up >= n)
                .map(|(up, rss)| format!("{up} pods {} MiB", num(*rss)))
        })
        .collect();
    notes.push(format!(
        "{count} pause pods (one `localhost/pause:1` container each, no probes; `maxPods: {}`), all \
         manifests written at once. RSS on the way up (sampled every second while they start): \
         {}. The per-pod figures compare the steady window with nodelet idle before the pods \
         (RSS after 10 s, CPU over 30 s).",
        count + 10,
        curve.join(", ")
    ));
    if opts.profile > 0 {
        let top = sys::profile(a.pid(), opts.profile, "footprint-500").await;
        eprintln!("footprint: nodelet with {count} pods, perf by symbol:\n{top}");
    }
    a.remove_all(Duration::from_secs(1800)).await;
    drop(a);

    Section {
        part: "footprint".into(),
        title: "Footprint".into(),
        measured: format!("{}, nodelet {}", sys::now_utc(), sys::commit()),
        rows,
        notes,
    }
}
