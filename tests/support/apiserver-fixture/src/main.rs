//! `apiserver-fixture --port N [--state FILE] [--server-version 1.32] [--drop-field KIND:PATH]`: the fixture as a process, for manual use with
//! kubectl (`kubectl --server http://127.0.0.1:N get pods`). With `--tls DIR` it serves HTTPS
//! with its own CA and writes `admin.conf` and `bootstrap-kubelet.conf` there for kubectl and a
//! joining node.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use apiserver_fixture::{
    DroppedField, Fixture, FixtureOptions, Release, ServerProfile, TlsOptions,
};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "apiserver-fixture",
    about = "In-memory Kubernetes API server for tests (plain HTTP on 127.0.0.1, or HTTPS with --tls)"
)]
struct Args {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 6443)]
    port: u16,
    /// JSON file that keeps the objects across restarts (loaded at start, written after each write).
    #[arg(long)]
    state: Option<PathBuf>,
    /// Seconds between BOOKMARK events on watches that allow them.
    #[arg(long, default_value_t = 60)]
    bookmark_interval: u64,
    /// Print every request to stderr as a JSON line.
    #[arg(long)]
    log_requests: bool,
    /// Be a server of this release (`1.32`): `/version` says so and status fields newer than
    /// it are not stored.
    #[arg(long, default_value = "1.37")]
    server_version: Release,
    /// Also drop this field on every write, as a server with a feature gate turned off does
    /// (`Pod:status.conditions[].observedGeneration`); repeatable.
    #[arg(long = "drop-field")]
    drop_fields: Vec<DroppedField>,
    /// Record every pod and node write in an annotation, as a mutating webhook would, so that
    /// even a write that changes nothing else is a new resourceVersion and a watch event.
    #[arg(long)]
    stamp_writes: bool,
    /// Serve HTTPS with a CA of the fixture's own, authenticate requests, sign approved CSRs;
    /// write `ca.crt`, `admin.conf` (system:masters) and `bootstrap-kubelet.conf` (a bootstrap
    /// token) into this directory.
    #[arg(long)]
    tls: Option<PathBuf>,
    /// Seconds of certificate lifetime the CSR signer gives (`--cluster-signing-duration`).
    #[arg(long, default_value_t = 365 * 24 * 3600)]
    cluster_signing_duration: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let options = FixtureOptions {
        port: Some(args.port),
        state_file: args.state,
        bookmark_interval: Duration::from_secs(args.bookmark_interval.max(1)),
        server: ServerProfile {
            release: args.server_version,
            dropped: args.drop_fields,
            stamp_writes: args.stamp_writes,
        },
        tls: args.tls.as_ref().map(|_| TlsOptions {
            signing: apiserver_fixture::csr::SigningPolicy {
                duration: Duration::from_secs(args.cluster_signing_duration.max(1)),
                ..Default::default()
            },
        }),
        ..FixtureOptions::default()
    };
    let fixture = match Fixture::start_with(options).await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("apiserver-fixture: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(dir) = &args.tls {
        if let Err(e) = write_tls_files(&fixture, dir) {
            eprintln!("apiserver-fixture: {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    }
    println!("{}", fixture.url());
    let mut printed = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tick.tick(), if args.log_requests => {
                let log = fixture.request_log();
                for entry in log.iter().skip(printed) {
                    if let Ok(line) = serde_json::to_string(entry) {
                        eprintln!("{line}");
                    }
                }
                printed = log.len();
            }
        }
    }
    fixture.stop().await;
    ExitCode::SUCCESS
}

/// The files a cluster's users and joining nodes need.
fn write_tls_files(fixture: &Fixture, dir: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    write("ca.crt", &fixture.ca_pem().unwrap_or_default())?;
    let admin = fixture
        .client_kubeconfig("kubernetes-admin", &["system:masters"])
        .map_err(|e| e.to_string())?;
    write("admin.conf", &admin)?;
    let token = fixture
        .create_bootstrap_token("abcdef", "0123456789abcdef")
        .map_err(|e| e.to_string())?;
    write(
        "bootstrap-kubelet.conf",
        &fixture.kubeconfig(&format!("{{token: {token}}}")),
    )
}
