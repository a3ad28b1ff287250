//! The machine and its processes, from `/proc`: load average, CPU time and resident memory of
//! nodelet, containerd and containerd's shims, and the facts `docs/benchmarks.md` records.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::report::{parse_loadavg, parse_stat_ticks, LoadSpan, ProcSample};
use nodelet_testkit::proc::parse_vm_rss_kib;

/// The 1-minute load average now.
pub fn load_now() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| parse_loadavg(&t))
        .unwrap_or(f64::NAN)
}

/// Starts a load span; [`LoadMark::end`] closes it.
pub struct LoadMark(f64);

impl LoadMark {
    pub fn start() -> LoadMark {
        LoadMark(load_now())
    }

    pub fn end(&self) -> LoadSpan {
        LoadSpan {
            start: self.0,
            end: load_now(),
        }
    }
}

pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf only reads a constant of the running system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

/// One process's CPU ticks (own and reaped children's) and RSS; `None` once it is gone.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(ProcSample {
        ticks: parse_stat_ticks(&stat)?,
        rss_kib: parse_vm_rss_kib(&status).unwrap_or(0),
    })
}

fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
    )
}

fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The test containerd's socket path (from `NODELET_TEST_CRI`).
pub fn containerd_socket(endpoint: &str) -> PathBuf {
    PathBuf::from(endpoint.trim_start_matches("unix://"))
}

/// containerd's process: `scripts/containerd.sh` writes its PID next to its socket.
pub fn containerd_pid(socket: &Path) -> Option<u32> {
    let pidfile = socket.with_file_name("containerd.pid");
    std::fs::read_to_string(pidfile).ok()?.trim().parse().ok()
}

/// The shims of the containerd listening on `socket` (`containerd-shim-runc-v2 ... -address
/// SOCKET ...`): never another instance's.
pub fn shim_pids(socket: &Path) -> Vec<u32> {
    let socket = socket.display().to_string();
    pids()
        .into_iter()
        .filter(|pid| {
            cmdline(*pid).is_some_and(|argv| {
                argv.first()
                    .is_some_and(|a| a.ends_with("containerd-shim-runc-v2"))
                    && argv
                        .windows(2)
                        .any(|w| w[0] == "-address" && w[1] == socket)
            })
        })
        .collect()
}

/// CPU (cores) and RSS of a set of processes over a window.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub cores: f64,
    pub rss_mib_avg: f64,
    pub rss_mib_max: f64,
    pub processes: usize,
}

/// What the window watches: nodelet, containerd, and the shims (found again at each sample,
/// summed).
pub struct Watched {
    pub nodelet: u32,
    pub containerd: Option<u32>,
    pub socket: PathBuf,
}

pub struct WindowResult {
    pub nodelet: Usage,
    pub containerd: Usage,
    pub shims: Usage,
    pub load: LoadSpan,
}

fn sum(pids: &[u32]) -> ProcSample {
    pids.iter()
        .filter_map(|p| sample(*p))
        .fold(ProcSample::default(), |a, s| ProcSample {
            ticks: a.ticks + s.ticks,
            rss_kib: a.rss_kib + s.rss_kib,
        })
}

/// Watches for `window`, sampling RSS every `every`; CPU is the difference of the tick
/// counters at both ends (a shim that exits meanwhile would be lost, none should).
pub async fn window(w: &Watched, window: Duration, every: Duration) -> WindowResult {
    let load = crate::sys::LoadMark::start();
    let shims = shim_pids(&w.socket);
    let containerd: Vec<u32> = w.containerd.into_iter().collect();
    let groups: [&[u32]; 3] = [&[w.nodelet], &containerd, &shims];
    let first: Vec<ProcSample> = groups.iter().map(|g| sum(g)).collect();
    let started = Instant::now();
    let mut rss: [Vec<f64>; 3] = Default::default();
    let mut last = first.clone();
    while started.elapsed() < window {
        tokio::time::sleep(every.min(window.saturating_sub(started.elapsed()))).await;
        last = groups.iter().map(|g| sum(g)).collect();
        for (i, s) in last.iter().enumerate() {
            rss[i].push(s.rss_kib as f64 / 1024.0);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let hz = clock_ticks();
    let usage = |i: usize, processes: usize| {
        let r = &rss[i];
        Usage {
            cores: last[i].ticks.saturating_sub(first[i].ticks) as f64 / hz / seconds,
            rss_mib_avg: r.iter().sum::<f64>() / r.len().max(1) as f64,
            rss_mib_max: r.iter().copied().fold(0.0, f64::max),
            processes,
        }
    };
    WindowResult {
        nodelet: usage(0, 1),
        containerd: usage(1, containerd.len()),
        shims: usage(2, shims.len()),
        load: load.end(),
    }
}

/// The machine line of the report: cores, memory, kernel, load average.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0 / 1024.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = loadavg.split_whitespace().take(3).collect();
    format!(
        "{cores} cores ({cpu}), {mem_gib:.1} GiB memory, Linux {kernel}, load average {} at the end",
        load.join(" ")
    )
}

fn first_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

/// `label`, or else the runtime's own name and version from its CRI Version answer
/// (`containerd 2.1.9`), for the tables' runtime column.
pub async fn runtime_label(label: &str) -> String {
    use nodelet::cri::Runtime;
    if !label.is_empty() {
        return label.to_string();
    }
    match crate::agent::runtime().version().await {
        Ok(v) => format!(
            "{} {}",
            v.runtime_name,
            v.runtime_version.trim_start_matches('v')
        ),
        Err(_) => "containerd".into(),
    }
}

/// The runtimes of the run as their CRI Version answers name them (set by `main` once).
static RUNTIME_LABELS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

pub fn set_runtime_labels(labels: Vec<String>) {
    let _ = RUNTIME_LABELS.set(labels);
}

/// nodelet's commit (with `-dirty` for uncommitted changes), the runtimes' and runc's versions.
pub fn versions() -> String {
    let containerd = RUNTIME_LABELS
        .get()
        .map(|l| l.join(" and "))
        .unwrap_or_else(|| "containerd ?".into());
    let runc = first_line("runc", &["--version"]);
    let runc = runc.split_whitespace().nth(2).unwrap_or("?");
    let build = if cfg!(debug_assertions) {
        "debug build: not for figures"
    } else {
        "release build"
    };
    let nodelet = match std::env::var("NODELET_BENCH_NODELET") {
        Ok(path) if !path.is_empty() => format!("nodelet binary {path} (NODELET_BENCH_NODELET)"),
        _ => format!("nodelet {} ({build})", commit()),
    };
    format!("{nodelet}, {containerd}, runc {runc}")
}

/// The commit measured, read once when the run starts: the parts rewrite
/// `docs/benchmarks.md` as they go, which must not make later parts look `-dirty`.
pub fn commit() -> String {
    static COMMIT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    COMMIT
        .get_or_init(|| {
            if let Ok(path) = std::env::var("NODELET_BENCH_NODELET") {
                if !path.is_empty() {
                    return format!("binary {path}");
                }
            }
            first_line(
                "git",
                &[
                    "-C",
                    env!("CARGO_MANIFEST_DIR"),
                    "describe",
                    "--always",
                    "--dirty",
                    "--abbrev=10",
                ],
            )
        })
        .clone()
}

/// `2026-12-02 10:31 UTC`.
pub fn now_utc() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%d %H:%M UTC")
        .to_string()
}

/// Samples `pid` with `perf record -e cpu-clock` (software sampling: this machine's perf has no
/// hardware counters) for `seconds`, with DWARF call graphs, and writes two reports next to
/// the data in `target/bench-profiles/NAME.*`: by symbol (self time) and by caller chain.
/// Returns the first lines of the symbol report, or why there is none.
pub async fn profile(pid: u32, seconds: u64, name: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-profiles");
    let _ = std::fs::create_dir_all(&dir);
    let data = dir.join(format!("{name}.perf.data"));
    let record = tokio::process::Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-F",
            "999",
            "--call-graph",
            "dwarf,16384",
        ])
        .arg("-p")
        .arg(pid.to_string())
        .arg("-o")
        .arg(&data)
        .args(["--", "sleep", &seconds.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .await;
    if !record.is_ok_and(|s| s.success()) {
        return "perf record failed (is perf installed and allowed?)".into();
    }
    let report = |args: &[&str], out: &str| {
        let path = dir.join(format!("{name}.{out}.txt"));
        let text = Command::new("perf")
            .args(["report", "--stdio", "-i"])
            .arg(&data)
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let _ = std::fs::write(&path, &text);
        text
    };
    let flat = report(
        &[
            "--no-children",
            "--sort",
            "symbol",
            "-g",
            "none",
            "--percent-limit",
            "0.5",
        ],
        "symbols",
    );
    report(
        &[
            "--children",
            "--sort",
            "symbol",
            "-g",
            "caller,0.5,callee,function,percent",
            "--percent-limit",
            "3",
        ],
        "callers",
    );
    let top: Vec<&str> = flat
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .take(30)
        .collect();
    format!("{} (reports in {})", top.join("\n"), dir.display())
}
