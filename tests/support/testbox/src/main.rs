//! testbox: one static multi-call binary that plays every container nodelet's integration tests
//! need (like Kubernetes' agnhost): a server with switchable health for HTTP/TCP/gRPC probes, a
//! process that exits with a chosen code, one that handles or ignores SIGTERM, a memory hog, and a
//! file writer. See README.md for every subcommand and flag.

mod duration;
mod events;
mod grpc;
mod health;
mod http;
mod signals;
mod tcp;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tokio::time::Instant;

use crate::duration::{parse_duration, parse_sleep_length};
use crate::events::Events;
use crate::health::{Health, HealthPolicy};
use crate::signals::{OnSigterm, Termination, TerminationPolicy};

/// Exit code for testbox's own failures (cannot listen, cannot write, cannot allocate), as opposed
/// to codes asked for with `--code` / `--exit-code` / `--sigterm-exit-code`.
const FAILURE_EXIT_CODE: u8 = 1;

#[derive(Parser, Debug)]
#[command(
    name = "testbox",
    version,
    about = "Multi-call test binary for nodelet's integration tests",
    after_help = "With no subcommand, testbox behaves like `serve` with no listeners: it sleeps until SIGTERM."
)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

/// Flags every subcommand accepts (before or after the subcommand name).
#[derive(Args, Debug)]
struct CommonArgs {
    /// What SIGTERM (and SIGINT) does: exit, or ignore (only SIGKILL ends the process).
    #[arg(long, global = true, value_enum, default_value_t = OnSigterm::Exit)]
    on_sigterm: OnSigterm,
    /// With --on-sigterm exit: keep running (and serving) this long after the signal, then exit.
    #[arg(long, global = true, value_parser = parse_duration, default_value = "0s")]
    sigterm_delay: Duration,
    /// Exit code after SIGTERM (0-255).
    #[arg(long, global = true, default_value_t = 0)]
    sigterm_exit_code: u8,
    /// Also append every event as `<RFC 3339 nanos> <event>` to this file.
    #[arg(long, global = true, value_name = "PATH")]
    event_file: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve HTTP/TCP/gRPC health endpoints until a signal or --exit-after.
    Serve(ServeArgs),
    /// Exit with --code, optionally after a delay.
    Exit(ExitArgs),
    /// Sleep for DUR (default: infinity), or until SIGTERM.
    Sleep(SleepArgs),
    /// Allocate and touch N MiB of memory, then exit or hold it.
    Alloc(AllocArgs),
    /// Write (or append) a string to a file, then exit 0.
    Write(WriteArgs),
    /// Copy standard input to standard output until it ends, then exit 0 (for exec/attach
    /// with stdin).
    Cat,
}

#[derive(Args, Debug, Default)]
struct ServeArgs {
    /// Serve HTTP on this port (repeatable).
    #[arg(long = "http", value_name = "PORT")]
    http: Vec<u16>,
    /// Listen on this TCP port and echo connections (repeatable); open only while healthy.
    #[arg(long = "tcp", value_name = "PORT")]
    tcp: Vec<u16>,
    /// Serve grpc.health.v1.Health on this port (repeatable).
    #[arg(long = "grpc", value_name = "PORT")]
    grpc: Vec<u16>,
    /// Also answer gRPC health checks for this service name (repeatable; "" is always served).
    #[arg(long = "grpc-service", value_name = "NAME")]
    grpc_service: Vec<String>,
    /// Address to listen on [default: 0.0.0.0].
    #[arg(long, value_name = "IP")]
    bind_address: Option<IpAddr>,
    /// Healthy only while this file exists.
    #[arg(long, value_name = "PATH")]
    healthy_file: Option<PathBuf>,
    /// Become unhealthy this long after start.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    unhealthy_after: Option<Duration>,
    /// Stay unhealthy until this long after start.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    healthy_after: Option<Duration>,
    /// Exit with --exit-code this long after start.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    exit_after: Option<Duration>,
    /// Exit code for --exit-after.
    #[arg(long, default_value_t = 0)]
    exit_code: u8,
}

#[derive(Args, Debug)]
struct ExitArgs {
    /// Exit code (0-255).
    #[arg(long)]
    code: u8,
    /// Wait this long first (SIGTERM during the wait follows the SIGTERM flags).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    after: Option<Duration>,
}

#[derive(Args, Debug)]
struct SleepArgs {
    /// How long: a duration (`30`, `1.5s`, `2m`) or `infinity`.
    #[arg(value_name = "DUR|infinity", value_parser = parse_sleep_arg, default_value = "infinity")]
    length: SleepLength,
}

#[derive(Debug, Clone, Copy)]
struct SleepLength(Option<Duration>);

fn parse_sleep_arg(input: &str) -> Result<SleepLength, duration::DurationError> {
    parse_sleep_length(input).map(SleepLength)
}

#[derive(Args, Debug)]
struct AllocArgs {
    /// MiB to allocate; every page is written, so it counts as resident memory.
    #[arg(long)]
    mib: u64,
    /// After allocating, keep the memory until SIGTERM instead of exiting 0.
    #[arg(long)]
    hold: bool,
    /// Allocate in chunks of this many MiB (default: all at once) ...
    #[arg(long, value_name = "MIB")]
    chunk_mib: Option<u64>,
    /// ... waiting this long between chunks, for a gradual rise in memory use.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "0s")]
    interval: Duration,
}

#[derive(Args, Debug)]
struct WriteArgs {
    /// File to write; missing parent directories are created.
    #[arg(long)]
    path: PathBuf,
    /// Text to write (no newline is added).
    #[arg(long)]
    content: String,
    /// Append instead of replacing the file.
    #[arg(long)]
    append: bool,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("cannot start the tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    #[error("--{flag} {addr}: cannot listen: {source}")]
    Listen {
        flag: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cat: {0}")]
    Cat(#[source] std::io::Error),
    #[error("write --path {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("alloc --mib {mib}: cannot allocate {chunk_mib} MiB after {done_mib} MiB: {reason}")]
    Alloc {
        mib: u64,
        chunk_mib: u64,
        done_mib: u64,
        reason: String,
    },
}

fn main() {
    let cli = Cli::parse();
    let events = Events::new(cli.common.event_file.clone());
    let code = match run(cli, events.clone()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("testbox: error: {err}");
            events.emit(&format!("error: {err}"));
            FAILURE_EXIT_CODE
        }
    };
    events.emit(&format!("exiting with {code}"));
    // Exit right here: dropping the runtime could wait on tasks blocked in accept().
    std::process::exit(i32::from(code));
}

fn run(cli: Cli, events: Events) -> Result<u8, Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    runtime.block_on(async move {
        let policy = TerminationPolicy {
            on_sigterm: cli.common.on_sigterm,
            delay: cli.common.sigterm_delay,
            exit_code: cli.common.sigterm_exit_code,
        };
        let mut termination =
            Termination::install(policy, events.clone()).map_err(Error::Signals)?;
        signals::spawn_reaper_if_pid1().map_err(Error::Signals)?;
        let command = cli.command.unwrap_or(Command::Serve(ServeArgs::default()));
        events.emit(&format!(
            "started {} (pid {})",
            command_name(&command),
            std::process::id()
        ));
        match command {
            Command::Serve(args) => serve(args, events, &mut termination).await,
            Command::Exit(args) => exit(args, &mut termination).await,
            Command::Sleep(args) => sleep(args, events, &mut termination).await,
            Command::Alloc(args) => alloc(args, events, &mut termination).await,
            Command::Write(args) => write(args, events),
            Command::Cat => cat(),
        }
    })
}

fn command_name(command: &Command) -> &'static str {
    match command {
        Command::Serve(_) => "serve",
        Command::Exit(_) => "exit",
        Command::Sleep(_) => "sleep",
        Command::Alloc(_) => "alloc",
        Command::Write(_) => "write",
        Command::Cat => "cat",
    }
}

/// Resolves after `length`, or never when there is none.
async fn sleep_or_forever(length: Option<Duration>) {
    match length {
        Some(length) => tokio::time::sleep(length).await,
        None => std::future::pending().await,
    }
}

async fn serve(
    args: ServeArgs,
    events: Events,
    termination: &mut Termination,
) -> Result<u8, Error> {
    let policy = HealthPolicy {
        healthy_after: args.healthy_after,
        unhealthy_after: args.unhealthy_after,
        healthy_file: args.healthy_file.clone(),
    };
    let health = Arc::new(Health::new(policy, Instant::now()));
    let changes = Health::clone(&health).spawn_monitor(events.clone());
    let ip = args
        .bind_address
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let listen = |flag: &'static str, port: u16| {
        let addr = SocketAddr::new(ip, port);
        tcp::bind(addr)
            .map(|listener| (addr, listener))
            .map_err(|source| Error::Listen { flag, addr, source })
    };

    for port in &args.http {
        let (addr, listener) = listen("http", *port)?;
        events.emit(&format!("http listening on {addr}"));
        tokio::spawn(http::serve(listener, health.clone(), events.clone()));
    }
    for port in &args.tcp {
        let (addr, listener) = listen("tcp", *port)?;
        events.emit(&format!("tcp listening on {addr}"));
        tokio::spawn(tcp::serve(listener, addr, changes.clone(), events.clone()));
    }
    for port in &args.grpc {
        let (addr, listener) = listen("grpc", *port)?;
        events.emit(&format!("grpc listening on {addr}"));
        let service = grpc::HealthService::new(
            health.clone(),
            changes.clone(),
            &args.grpc_service,
            events.clone(),
        );
        tokio::spawn(grpc::serve(listener, service, events.clone()));
    }

    tokio::select! {
        code = termination.wait() => Ok(code),
        () = sleep_or_forever(args.exit_after) => {
            events.emit("exit-after elapsed");
            Ok(args.exit_code)
        }
    }
}

async fn exit(args: ExitArgs, termination: &mut Termination) -> Result<u8, Error> {
    if let Some(after) = args.after {
        tokio::select! {
            code = termination.wait() => return Ok(code),
            () = tokio::time::sleep(after) => {}
        }
    }
    Ok(args.code)
}

async fn sleep(
    args: SleepArgs,
    events: Events,
    termination: &mut Termination,
) -> Result<u8, Error> {
    tokio::select! {
        code = termination.wait() => Ok(code),
        () = sleep_or_forever(args.length.0) => {
            events.emit("sleep done");
            Ok(0)
        }
    }
}

const MIB: usize = 1 << 20;

async fn alloc(
    args: AllocArgs,
    events: Events,
    termination: &mut Termination,
) -> Result<u8, Error> {
    let chunk_mib = args.chunk_mib.unwrap_or(args.mib).clamp(1, args.mib.max(1));
    let mut held: Vec<Vec<u8>> = Vec::new();
    let mut done_mib = 0;
    while done_mib < args.mib {
        let this_chunk = chunk_mib.min(args.mib - done_mib);
        let chunk = allocate_touched(this_chunk).map_err(|reason| Error::Alloc {
            mib: args.mib,
            chunk_mib: this_chunk,
            done_mib,
            reason,
        })?;
        held.push(chunk);
        done_mib += this_chunk;
        if done_mib < args.mib && !args.interval.is_zero() {
            events.emit(&format!("allocated {done_mib} MiB"));
            tokio::select! {
                code = termination.wait() => return Ok(code),
                () = tokio::time::sleep(args.interval) => {}
            }
        }
    }
    events.emit(&format!("allocated {done_mib} MiB"));
    if !args.hold {
        return Ok(0);
    }
    let code = termination.wait().await;
    drop(held);
    Ok(code)
}

/// `mib` MiB with every byte written, so the pages are really resident (a plain reservation
/// would not count against a memory limit until touched).
fn allocate_touched(mib: u64) -> Result<Vec<u8>, String> {
    let bytes = usize::try_from(mib)
        .ok()
        .and_then(|mib| mib.checked_mul(MIB))
        .ok_or_else(|| "size does not fit in memory".to_owned())?;
    let mut chunk: Vec<u8> = Vec::new();
    chunk
        .try_reserve_exact(bytes)
        .map_err(|err| err.to_string())?;
    chunk.resize(bytes, 0xA5);
    Ok(chunk)
}

fn cat() -> Result<u8, Error> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    std::io::copy(&mut std::io::stdin().lock(), &mut stdout).map_err(Error::Cat)?;
    stdout.flush().map_err(Error::Cat)?;
    Ok(0)
}

fn write(args: WriteArgs, events: Events) -> Result<u8, Error> {
    use std::io::Write as _;
    let fail = |source| Error::Write {
        path: args.path.clone(),
        source,
    };
    if let Some(parent) = args.path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(fail)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(args.append)
        .truncate(!args.append)
        .open(&args.path)
        .map_err(fail)?;
    file.write_all(args.content.as_bytes()).map_err(fail)?;
    file.sync_all().map_err(fail)?;
    events.emit(&format!(
        "wrote {} bytes to {}",
        args.content.len(),
        args.path.display()
    ));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parse_cases() {
        type Check = fn(&Cli) -> bool;
        // (argv, check)
        let cases: Vec<(Vec<&str>, Check)> = vec![
            (vec!["testbox"], |cli| cli.command.is_none()),
            (vec!["testbox", "exit", "--code", "3"], |cli| {
                matches!(
                    &cli.command,
                    Some(Command::Exit(ExitArgs {
                        code: 3,
                        after: None
                    }))
                )
            }),
            (vec!["testbox", "sleep"], |cli| {
                matches!(
                    &cli.command,
                    Some(Command::Sleep(SleepArgs {
                        length: SleepLength(None)
                    }))
                )
            }),
            (
                vec!["testbox", "sleep", "1.5"],
                |cli| matches!(&cli.command, Some(Command::Sleep(SleepArgs { length: SleepLength(Some(d)) })) if *d == Duration::from_millis(1500)),
            ),
            (
                vec![
                    "testbox",
                    "serve",
                    "--http",
                    "8080",
                    "--http",
                    "8081",
                    "--on-sigterm",
                    "ignore",
                ],
                |cli| {
                    cli.common.on_sigterm == OnSigterm::Ignore
                        && matches!(&cli.command, Some(Command::Serve(args)) if args.http == [8080, 8081])
                },
            ),
            (
                vec![
                    "testbox",
                    "--sigterm-delay",
                    "2s",
                    "--sigterm-exit-code",
                    "143",
                    "sleep",
                    "infinity",
                ],
                |cli| {
                    cli.common.sigterm_delay == Duration::from_secs(2)
                        && cli.common.sigterm_exit_code == 143
                },
            ),
        ];
        for (argv, check) in cases {
            let cli = Cli::try_parse_from(&argv).unwrap_or_else(|err| panic!("{argv:?}: {err}"));
            assert!(check(&cli), "{argv:?} parsed as {cli:?}");
        }
    }

    #[test]
    fn parse_rejects() {
        let cases: &[(&[&str], &str)] = &[
            (&["testbox", "exit"], "--code"),
            (&["testbox", "exit", "--code", "256"], "256"),
            (
                &["testbox", "serve", "--unhealthy-after", "soon"],
                "invalid duration \"soon\"",
            ),
            (
                &["testbox", "sleep", "forever"],
                "invalid duration \"forever\"",
            ),
            (&["testbox", "--on-sigterm", "panic"], "panic"),
        ];
        for (argv, want) in cases {
            let err = Cli::try_parse_from(*argv).unwrap_err().to_string();
            assert!(err.contains(want), "{argv:?}: {err}");
        }
    }

    #[test]
    fn allocate_touched_sizes() {
        assert_eq!(allocate_touched(0).unwrap().len(), 0);
        let chunk = allocate_touched(2).unwrap();
        assert_eq!(chunk.len(), 2 * MIB);
        assert!(chunk.iter().all(|b| *b == 0xA5));
        assert!(allocate_touched(u64::MAX).is_err());
    }

    #[test]
    fn write_creates_parents_and_appends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/file");
        let args = |content: &str, append| WriteArgs {
            path: path.clone(),
            content: content.to_owned(),
            append,
        };
        assert_eq!(write(args("one", false), Events::stdout_only()).unwrap(), 0);
        write(args("+two", true), Events::stdout_only()).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one+two");
        write(args("three", false), Events::stdout_only()).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "three");
    }

    #[test]
    fn write_error_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "").unwrap();
        let err = write(
            WriteArgs {
                path: blocker.join("below-a-file"),
                content: String::new(),
                append: false,
            },
            Events::stdout_only(),
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("write --path "), "{err}");
        assert!(err.to_string().contains("below-a-file"), "{err}");
    }
}
