//! `apiserver-fixture --port N [--state FILE] [--server-version 1.32] [--drop-field KIND:PATH]`: the fixture as a process, for manual use with
//! kubectl (`kubectl --server http://127.0.0.1:N get pods`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use apiserver_fixture::{DroppedField, Fixture, FixtureOptions, Release, ServerProfile};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "apiserver-fixture",
    about = "In-memory Kubernetes API server for tests (plain HTTP on 127.0.0.1)"
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
        ..FixtureOptions::default()
    };
    let fixture = match Fixture::start_with(options).await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("apiserver-fixture: {e}");
            return ExitCode::FAILURE;
        }
    };
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
