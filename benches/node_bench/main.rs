//! nodelet's benchmarks, side by side with the bare runtime measured in the same run:
//!
//!   scripts/bench.sh [PART...] [--runs N] ...     (sets up its own containerd, then runs this)
//!   cargo bench --bench node_bench -- [PART...]   (with the environment of scripts/test-env.sh)
//!
//! Parts: `start` (pod start, 1 and 50 pods, against a minimal CRI client), `reaction` (exit,
//! liveness, readiness, deletion), `footprint` (110 pods with probes; 500 pause pods), `api`
//! (status writes and requests in cluster mode, against the real control plane of
//! scripts/k8s.sh), `eviction` (the cgroup v2 VM).
//! Each prints its table and replaces its block of `docs/benchmarks.md`, leaving the others.
//! Numbers depend on the machine and its load (recorded beside each figure); nothing here is
//! asserted against a limit.

#[path = "../../tests/vm/mod.rs"]
mod vm;

mod agent;
mod api;
mod cluster;
mod eviction;
mod footprint;
mod reaction;
mod report;
mod start;
mod sys;

use std::path::PathBuf;
use std::time::Duration;

use report::Section;

const PARTS: &[&str] = &["start", "reaction", "footprint", "api", "eviction"];
/// The parts measured on every runtime of the run (`NODELET_BENCH_RUNTIMES`).
const RUNTIME_PARTS: &[&str] = &["start", "reaction"];

/// The knobs of a run (defaults are the minimums).
pub struct Options {
    /// Measured rounds of pod start per size.
    pub runs: usize,
    /// Container exits to time.
    pub exits: usize,
    /// Liveness kills, readiness changes (each way) and deletions (at most 10) to time.
    pub reaction_runs: usize,
    /// Pause pods of the large footprint step.
    pub many_pods: usize,
    /// The footprint's steady-state window.
    pub window: Duration,
    /// Wait between "all pods up" and the window.
    pub settle: Duration,
    /// Eviction cycles in the VM.
    pub eviction_runs: usize,
    /// Write `docs/benchmarks.md` (default) or only print.
    pub write: bool,
    /// Seconds of `perf record` on nodelet after the footprint's windows (0: none).
    pub profile: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            runs: 5,
            exits: 200,
            reaction_runs: 20,
            many_pods: 500,
            window: Duration::from_secs(120),
            settle: Duration::from_secs(30),
            eviction_runs: 10,
            write: true,
            profile: 0,
        }
    }
}

const USAGE: &str = "usage: node_bench [start|reaction|footprint|api|eviction ...] \
    [--runs N] [--exits N] [--reaction-runs N] [--many-pods N] [--window SECONDS] \
    [--settle SECONDS] [--eviction-runs N] [--no-write] [--profile SECONDS]";

fn parse(args: &[String]) -> Result<(Vec<String>, Options), String> {
    let mut opts = Options::default();
    let mut parts = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| -> Result<u64, String> {
            let v = it.next().ok_or(format!("{flag} needs a value"))?;
            v.parse()
                .map_err(|_| format!("{flag} {v:?}: not a whole number"))
        };
        match a.as_str() {
            // cargo bench passes --bench to every bench binary.
            "--bench" => {}
            "--runs" => opts.runs = value(a)?.max(1) as usize,
            "--exits" => opts.exits = value(a)?.max(1) as usize,
            "--reaction-runs" => opts.reaction_runs = value(a)?.max(1) as usize,
            // 0 leaves the large step out.
            "--many-pods" => opts.many_pods = value(a)? as usize,
            "--window" => opts.window = Duration::from_secs(value(a)?.max(1)),
            "--settle" => opts.settle = Duration::from_secs(value(a)?),
            "--eviction-runs" => opts.eviction_runs = value(a)?.max(1) as usize,
            "--no-write" => opts.write = false,
            "--profile" => opts.profile = value(a)?,
            "all" => parts.extend(PARTS.iter().map(|p| p.to_string())),
            p if PARTS.contains(&p) => parts.push(p.to_string()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if parts.is_empty() {
        parts = PARTS.iter().map(|p| p.to_string()).collect();
    }
    Ok((parts, opts))
}

fn doc_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/benchmarks.md")
}

/// A new `docs/benchmarks.md`: every part's block, empty until measured.
fn skeleton() -> String {
    let mut s = String::from(
        "# Benchmarks\n\n<!-- bench:header begin -->\n<!-- bench:header end -->\n\n## Results\n\n",
    );
    for p in PARTS {
        s.push_str(&report::block(p, &format!("### {p}\n\nNot measured yet.")));
        s.push_str("\n\n");
    }
    s.push_str("<!-- bench:blocks-end -->\n");
    s
}

fn header(command: &str) -> String {
    format!(
        "Latest run: {}, `{command}`.\n\n- Machine: {}\n- Versions: {}\n",
        sys::now_utc(),
        sys::machine(),
        sys::versions()
    )
}

fn write_doc(section: &Section, command: &str) {
    let path = doc_path();
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|_| skeleton());
    let merged = report::merge(
        &doc,
        &[
            ("header".to_string(), header(command)),
            (section.part.clone(), section.markdown()),
        ],
    );
    if let Err(e) = std::fs::write(&path, merged) {
        eprintln!("cannot write {}: {e}", path.display());
    } else {
        eprintln!("{} updated ({})", path.display(), section.part);
    }
}

fn main() {
    // Inside the VM this binary is the eviction scenario's guest side.
    if std::env::var("NODELET_VM_GUEST").as_deref() == Ok("1") {
        eviction::in_guest();
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (parts, opts) = match parse(&args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    // Before any part writes the doc (see sys::commit).
    let _ = sys::commit();
    let command = std::env::var("NODELET_BENCH_COMMAND")
        .unwrap_or_else(|_| format!("cargo bench --bench node_bench -- {}", parts.join(" ")));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut printed = Vec::new();
    let runtimes: Vec<(String, String)> = agent::runtimes()
        .into_iter()
        .map(|(label, endpoint)| {
            agent::select_runtime(&label, &endpoint);
            (runtime.block_on(sys::runtime_label(&label)), endpoint)
        })
        .collect();
    sys::set_runtime_labels(runtimes.iter().map(|(l, _)| l.clone()).collect());
    for part in &parts {
        // The parts about nodelet's own reaction to the runtime run on every runtime of the
        // run; the heavy ones (footprint, api, eviction's VM) on the first (the current one).
        let on: &[(String, String)] = if RUNTIME_PARTS.contains(&part.as_str()) {
            &runtimes
        } else {
            &runtimes[..1]
        };
        let mut merged: Option<Section> = None;
        for (label, endpoint) in on {
            agent::select_runtime(label, endpoint);
            eprintln!(
                "== {part} on {label}: started {} (load average {:.1})",
                sys::now_utc(),
                sys::load_now()
            );
            let mut section = runtime.block_on(async {
                match part.as_str() {
                    "start" => start::run(&opts).await,
                    "reaction" => reaction::run(&opts).await,
                    "footprint" => footprint::run(&opts).await,
                    "api" => api::run(&opts).await,
                    "eviction" => eviction::run(&opts).await,
                    _ => unreachable!("parts are checked by parse"),
                }
            });
            for row in &mut section.rows {
                if row.runtime.is_empty() {
                    row.runtime.clone_from(label);
                }
            }
            merged = Some(match merged {
                None => section,
                Some(mut m) => {
                    m.rows.extend(section.rows);
                    m
                }
            });
        }
        let section = merged.expect("at least one runtime");
        print!("{}", section.text());
        if opts.write {
            write_doc(&section, &command);
        }
        printed.push(section);
    }
    println!("\nAll parts run:");
    for s in &printed {
        print!("{}", s.text());
    }
    println!("{}", sys::machine());
    println!("{}", sys::versions());
}
