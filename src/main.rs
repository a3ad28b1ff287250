//! The `nodelet` command: `run`, `validate`, `pods`, `events`, `top`, `version`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;

use nodelet::agent::{NodeletBuilder, StartError};
use nodelet::config::{self, Config, Environment, LogFormat};
use nodelet::events::event_table;
use nodelet::source;
use nodelet::status::printer;

#[derive(Parser)]
#[command(
    name = "nodelet",
    version,
    about = "A node agent that does the kubelet's job on one node"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the node agent.
    Run(RunArgs),
    /// Check a configuration file (and optionally pod manifests) and report every problem.
    Validate {
        /// KubeletConfiguration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Static pod manifest(s) to check as the static pod source would.
        #[arg(long = "manifest")]
        manifests: Vec<PathBuf>,
        /// Node name used to name and check manifests (default: from the config, else the hostname).
        #[arg(long)]
        node_name: Option<String>,
    },
    /// List the pods of a running nodelet, like `kubectl get pods`.
    Pods {
        /// Base URL of nodelet's read-only API.
        #[arg(long)]
        server: Option<String>,
        /// Read the API address and port from this configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Only pods of this namespace.
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Always show the NAMESPACE column.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Print the PodList JSON instead of a table.
        #[arg(short = 'o', long, value_parser = ["json", "table"], default_value = "table")]
        output: String,
    },
    /// List the events of a running nodelet, like `kubectl get events`.
    Events {
        /// Base URL of nodelet's read-only API.
        #[arg(long)]
        server: Option<String>,
        /// Read the API address and port from this configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Only events of this namespace.
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Print the EventList JSON instead of a table.
        #[arg(short = 'o', long, value_parser = ["json", "table"], default_value = "table")]
        output: String,
    },
    /// Show the CPU and memory of the pods or of the node, like `kubectl top pod|node`, from
    /// the local API's `/stats/summary`.
    Top {
        /// `pod` (`pods`, `po`) or `node` (`nodes`, `no`).
        #[arg(value_parser = ["pod", "pods", "po", "node", "nodes", "no"], default_value = "pod")]
        resource: String,
        /// Base URL of nodelet's read-only API.
        #[arg(long)]
        server: Option<String>,
        /// Read the API address and port from this configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Only pods of this namespace.
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Always show the NAMESPACE column.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
    /// Print the version.
    Version,
}

#[derive(clap::Args)]
struct RunArgs {
    /// KubeletConfiguration file.
    #[arg(long, default_value = "/etc/nodelet/config.yaml")]
    config: PathBuf,
    /// Overrides `nodeName`.
    #[arg(long)]
    node_name: Option<String>,
    /// Overrides `containerRuntimeEndpoint` (and the image and containerd endpoints that default to it).
    #[arg(long)]
    container_runtime_endpoint: Option<String>,
    /// Overrides `rootDir`.
    #[arg(long)]
    root_dir: Option<PathBuf>,
    /// Overrides `staticPodPath`.
    #[arg(long)]
    static_pod_path: Option<PathBuf>,
    /// Overrides `podLogsDir`.
    #[arg(long)]
    pod_logs_dir: Option<PathBuf>,
    /// Overrides `readOnlyPort`.
    #[arg(long)]
    read_only_port: Option<u16>,
    /// Overrides `healthzPort`.
    #[arg(long)]
    healthz_port: Option<u16>,
}

fn main() -> std::process::ExitCode {
    nodelet::allocator::limit_arenas();
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if invoked_as_kubelet(&args) {
        return exit_code(kubelet_command(&args[1..]));
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run_command(args),
        Command::Validate {
            config,
            manifests,
            node_name,
        } => validate(config, manifests, node_name),
        Command::Pods {
            server,
            config,
            namespace,
            all_namespaces,
            output,
        } => pods(server, config, namespace, all_namespaces, &output),
        Command::Events {
            server,
            config,
            namespace,
            output,
        } => events(server, config, namespace, &output),
        Command::Top {
            resource,
            server,
            config,
            namespace,
            all_namespaces,
        } => top(&resource, server, config, namespace, all_namespaces),
        Command::Version => {
            println!("nodelet {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
    };
    exit_code(result)
}

fn exit_code(result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nodelet: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// nodelet runs as the kubelet when started under that name (a `kubelet` symlink, as a unit
/// written for the kubelet starts it) or with kubelet flags instead of a subcommand
/// (`nodelet --config=... --kubeconfig=...`). `nodelet --help` and `--version` stay nodelet's.
fn invoked_as_kubelet(args: &[String]) -> bool {
    let program = args
        .first()
        .map(std::path::Path::new)
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str());
    if program == Some("kubelet") {
        return true;
    }
    args.get(1).is_some_and(|first| {
        first.starts_with('-') && !["-h", "--help", "-V", "--version"].contains(&first.as_str())
    })
}

/// The kubelet's command line (`config::flags`): flags over the `--config` file, then run.
fn kubelet_command(args: &[String]) -> anyhow::Result<()> {
    let cwd = std::env::current_dir().context("reading the working directory")?;
    let line = config::flags::parse(args, &cwd)?;
    if line.help {
        print!("{}", config::flags::usage());
        return Ok(());
    }
    if line.version {
        println!("Kubernetes {}", nodelet::node::status::kubelet_version());
        return Ok(());
    }
    let loaded = config::load_kubelet(&line, &Environment::detect())?;
    for warning in &loaded.warnings {
        eprintln!("nodelet: warning: {warning}");
    }
    let source = line
        .config_file
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "kubelet flags".to_string());
    start(loaded.config, &source)
}

fn load_config(path: &std::path::Path) -> anyhow::Result<Config> {
    let loaded = config::load(path, &Environment::detect())?;
    for warning in &loaded.warnings {
        eprintln!("nodelet: warning: {}: {warning}", path.display());
    }
    Ok(loaded.config)
}

fn validate(
    config_path: Option<PathBuf>,
    manifests: Vec<PathBuf>,
    node_name: Option<String>,
) -> anyhow::Result<()> {
    if config_path.is_none() && manifests.is_empty() {
        bail!("nothing to validate: give --config FILE and/or --manifest FILE");
    }
    let mut problems = 0usize;
    let mut node = node_name;
    if let Some(path) = &config_path {
        match config::load(path, &Environment::detect()) {
            Ok(loaded) => {
                for w in &loaded.warnings {
                    println!("{}: warning: {w}", path.display());
                }
                println!("{}: ok", path.display());
                if let (Some(file), Some(bin_dir)) = (
                    &loaded.config.image_credential_provider_config,
                    &loaded.config.image_credential_provider_bin_dir,
                ) {
                    match nodelet::images::provider::load_config(file, bin_dir) {
                        Ok(providers) => println!(
                            "{}: ok ({} credential provider(s))",
                            file.display(),
                            providers.len()
                        ),
                        Err(e) => {
                            problems += 1;
                            println!("{e}");
                        }
                    }
                }
                let unified = nodelet::cgroup::is_cgroup2_unified(std::path::Path::new(
                    nodelet::cgroup::CGROUP_MOUNT,
                ));
                if !unified && loaded.config.fail_cgroup_v1 {
                    println!(
                        "{}: note: this host runs cgroup v1, which `nodelet run` refuses with this file (failCgroupV1 is true)",
                        path.display()
                    );
                }
                node.get_or_insert(loaded.config.node_name);
            }
            Err(e) => {
                problems += 1;
                println!("{e}");
            }
        }
    }
    let node = node.unwrap_or_else(|| Environment::detect().hostname.to_lowercase());
    for path in &manifests {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        match source::parse_manifest(&bytes, path, &node) {
            Ok(pod) => println!(
                "{}: ok (pod {}/{}, uid {})",
                path.display(),
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.name.as_deref().unwrap_or_default(),
                pod.metadata.uid.as_deref().unwrap_or_default()
            ),
            Err(errors) => {
                problems += 1;
                for e in errors {
                    println!("{e}");
                }
            }
        }
    }
    if problems > 0 {
        bail!("{problems} file(s) with problems");
    }
    Ok(())
}

fn pods(
    server: Option<String>,
    config_path: Option<PathBuf>,
    namespace: Option<String>,
    all_namespaces: bool,
    output: &str,
) -> anyhow::Result<()> {
    let base = local_api_base(server, config_path)?;
    let url = format!("{}/pods", base.trim_end_matches('/'));
    let body = get_json(&url, &[])?;
    if output == "json" {
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(());
    }
    let items = body.get("items").cloned().unwrap_or_default();
    let mut pods: Vec<Pod> = serde_json::from_value(items).context("decoding the pod list")?;
    if let Some(ns) = &namespace {
        pods.retain(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()));
    }
    if pods.is_empty() {
        match namespace {
            Some(ns) => eprintln!("No resources found in {ns} namespace."),
            None => eprintln!("No resources found."),
        }
        return Ok(());
    }
    let namespaces: std::collections::BTreeSet<_> =
        pods.iter().map(|p| p.metadata.namespace.clone()).collect();
    let show_ns = all_namespaces || (namespace.is_none() && namespaces.len() > 1);
    print!(
        "{}",
        printer::pod_table(&pods, jiff::Timestamp::now(), show_ns)
    );
    Ok(())
}

/// `GET url?query` from the local API as JSON, for the CLI commands (a 10 s limit; a non-2xx
/// answer is an error naming the URL).
fn get_json(url: &str, query: &[(&str, String)]) -> anyhow::Result<serde_json::Value> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let resp = reqwest::Client::new()
            .get(url)
            .query(query)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        if !resp.status().is_success() {
            bail!("GET {url}: {}", resp.status());
        }
        resp.json().await.with_context(|| format!("decoding {url}"))
    })
}

/// The base URL of the local API: `--server`, else the address and `readOnlyPort` of `--config`,
/// else the kubelet's default read-only port on loopback.
fn local_api_base(server: Option<String>, config_path: Option<PathBuf>) -> anyhow::Result<String> {
    Ok(match (server, config_path) {
        (Some(s), _) => s.trim_end_matches('/').to_string(),
        (None, Some(path)) => {
            let cfg = load_config(&path)?;
            if cfg.read_only_port == 0 {
                bail!(
                    "{}: readOnlyPort is 0 (the local API is disabled)",
                    path.display()
                );
            }
            let host = if cfg.address.is_unspecified() {
                "127.0.0.1".to_string()
            } else {
                cfg.address.to_string()
            };
            format!("http://{host}:{}", cfg.read_only_port)
        }
        (None, None) => "http://127.0.0.1:10255".to_string(),
    })
}

fn events(
    server: Option<String>,
    config_path: Option<PathBuf>,
    namespace: Option<String>,
    output: &str,
) -> anyhow::Result<()> {
    let url = format!("{}/events", local_api_base(server, config_path)?);
    let mut query = Vec::new();
    if let Some(ns) = &namespace {
        query.push(("fieldSelector", format!("metadata.namespace={ns}")));
    }
    let body = get_json(&url, &query)?;
    if output == "json" {
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(());
    }
    let items = body.get("items").cloned().unwrap_or_default();
    let events: Vec<k8s_openapi::api::core::v1::Event> =
        serde_json::from_value(items).context("decoding the event list")?;
    if events.is_empty() {
        match namespace {
            Some(ns) => eprintln!("No resources found in {ns} namespace."),
            None => eprintln!("No resources found."),
        }
        return Ok(());
    }
    print!("{}", event_table(&events, jiff::Timestamp::now()));
    Ok(())
}

/// `nodelet top pod|node`: the CPU-and-memory Summary as `kubectl top` prints it; the node's
/// percentages are of the allocatable the local API's `/node` reports.
fn top(
    resource: &str,
    server: Option<String>,
    config_path: Option<PathBuf>,
    namespace: Option<String>,
    all_namespaces: bool,
) -> anyhow::Result<()> {
    use nodelet::stats::top;
    let base = local_api_base(server, config_path)?;
    let body = get_json(
        &format!("{base}/stats/summary"),
        &[("only_cpu_and_memory", "true".to_string())],
    )?;
    let summary: nodelet::stats::Summary =
        serde_json::from_value(body).context("decoding the stats summary")?;
    if matches!(resource, "node" | "nodes" | "no") {
        let node = get_json(&format!("{base}/node"), &[])?;
        let quantity = |name: &str| -> anyhow::Result<nodelet::quantity::Quantity> {
            let text = node["status"]["allocatable"][name]
                .as_str()
                .with_context(|| format!("{base}/node has no status.allocatable.{name}"))?;
            nodelet::quantity::Quantity::parse(text).map_err(|e| {
                anyhow::anyhow!("{base}/node: status.allocatable.{name} {text:?}: {e}")
            })
        };
        let allocatable = top::Allocatable {
            cpu_milli: u64::try_from(quantity("cpu")?.milli_value()).unwrap_or(0),
            memory_bytes: u64::try_from(quantity("memory")?.value()).unwrap_or(0),
        };
        print!("{}", top::node_table(&summary, allocatable));
        return Ok(());
    }
    // As `nodelet pods`: every namespace unless one is given, the NAMESPACE column when
    // asked for or when the pods span several.
    let namespaces: std::collections::BTreeSet<&str> = summary
        .pods
        .iter()
        .map(|p| p.pod_ref.namespace.as_str())
        .collect();
    let with_namespace = all_namespaces || (namespace.is_none() && namespaces.len() > 1);
    match top::pod_table(&summary, namespace.as_deref(), with_namespace) {
        Some(table) => print!("{table}"),
        None => match namespace {
            Some(ns) => eprintln!("No resources found in {ns} namespace."),
            None => eprintln!("No resources found"),
        },
    }
    Ok(())
}

fn init_tracing(cfg: &Config) {
    use tracing_subscriber::EnvFilter;
    // The kubelet's -v levels: up to 2 is the normal operator level, 4 is debugging.
    let default = match cfg.logging.verbosity {
        0..=2 => "info",
        3..=5 => "nodelet=debug,info",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Colours only for a terminal: a log file or the journal gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match cfg.logging.format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

fn run_command(args: RunArgs) -> anyhow::Result<()> {
    let mut cfg = load_config(&args.config)?;
    if let Some(n) = args.node_name {
        cfg.node_name = n;
    }
    if let Some(e) = args.container_runtime_endpoint {
        cfg.container_runtime_endpoint = e.clone();
        cfg.image_service_endpoint = e.clone();
        cfg.containerd_endpoint = e;
    }
    if let Some(d) = args.root_dir {
        cfg.root_dir = d;
    }
    if let Some(p) = args.static_pod_path {
        cfg.static_pod_path = Some(p);
    }
    if let Some(d) = args.pod_logs_dir {
        cfg.pod_logs_dir = d;
    }
    if let Some(p) = args.read_only_port {
        cfg.read_only_port = p;
    }
    if let Some(p) = args.healthz_port {
        cfg.healthz_port = p;
    }
    start(cfg, &args.config.display().to_string())
}

/// Starts nodelet with a loaded configuration (`source` names where it came from in errors).
fn start(cfg: Config, source: &str) -> anyhow::Result<()> {
    // The kubelet validates the cgroup version with its configuration: before anything starts.
    let unified =
        nodelet::cgroup::is_cgroup2_unified(std::path::Path::new(nodelet::cgroup::CGROUP_MOUNT));
    let cgroup_v1_warning = nodelet::cgroup::check_cgroup_version(cfg.fail_cgroup_v1, unified)
        .map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
    // As the kubelet's container manager: no start on a node with swap on unless allowed.
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    nodelet::config::swap::check_swap(cfg.fail_swap_on, &swaps)
        .map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
    let process_errors = set_up_process(&cfg).map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
    init_tracing(&cfg);
    for error in process_errors {
        tracing::error!("{error}");
    }
    if let Some(warning) = cgroup_v1_warning {
        tracing::warn!("{warning}");
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(2).enable_all();
    let rt = nodelet::watchdog::install(&mut builder).build()?;
    rt.block_on(run(cfg))
}

/// What the kubelet does to its own process and the kernel before it runs pods: the kernel
/// tunables (`protectKernelDefaults`: check, else write; either failing stops the start),
/// `maxOpenFiles` as `RLIMIT_NOFILE`, `oomScoreAdj` as its own `oom_score_adj`. The last two
/// are logged as errors when the kernel refuses them (a container may not raise its hard
/// limit or lower its score), as the kubelet logs them; they are returned for the log.
fn set_up_process(cfg: &nodelet::config::Config) -> anyhow::Result<Vec<String>> {
    use nodelet::config::kernel_tunables::{plan, KERNEL_TUNABLES};
    let sys = std::path::Path::new("/proc/sys");
    let current: Vec<(&'static str, Option<i64>)> = KERNEL_TUNABLES
        .iter()
        .map(|(path, _)| {
            let value = std::fs::read_to_string(sys.join(path))
                .ok()
                .and_then(|text| text.trim().parse().ok());
            (*path, value)
        })
        .collect();
    for (path, value) in plan(cfg.protect_kernel_defaults, &current).map_err(anyhow::Error::msg)? {
        std::fs::write(sys.join(path), value.to_string())
            .with_context(|| format!("setting kernel tunable {path} to {value}"))?;
    }
    let mut errors = Vec::new();
    if let Err(e) = nix::sys::resource::setrlimit(
        nix::sys::resource::Resource::RLIMIT_NOFILE,
        cfg.max_open_files,
        cfg.max_open_files,
    ) {
        errors.push(format!(
            "maxOpenFiles: setting RLIMIT_NOFILE to {}: {e}",
            cfg.max_open_files
        ));
    }
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", cfg.oom_score_adj.to_string()) {
        errors.push(format!(
            "oomScoreAdj: setting /proc/self/oom_score_adj to {}: {e}",
            cfg.oom_score_adj
        ));
    }
    Ok(errors)
}

/// How often freed memory goes back to the kernel (`nodelet::allocator`): a trim costs well
/// under a millisecond, and a burst's peak stays resident at most this long.
const MALLOC_TRIM_PERIOD: Duration = Duration::from_secs(30);

/// Runs nodelet until SIGTERM or SIGINT, then stops it (pods keep running).
async fn run(cfg: Config) -> anyhow::Result<()> {
    let cancel = CancellationToken::new();
    tokio::spawn(nodelet::allocator::trim_every(
        MALLOC_TRIM_PERIOD,
        cancel.clone(),
    ));
    if cfg.make_iptables_util_chains {
        tokio::spawn(nodelet::node::iptables::keep_util_chains(
            std::sync::Arc::new(nodelet::node::iptables::HostIptables),
            nodelet::node::iptables::CANARY_PERIOD,
            cancel.clone(),
        ));
    }
    tokio::spawn({
        let cancel = cancel.clone();
        async move {
            shutdown_signal().await;
            cancel.cancel();
        }
    });
    let nodelet = match NodeletBuilder::new(cfg)
        .cancel_token(cancel.clone())
        .start()
        .await
    {
        Ok(nodelet) => nodelet,
        Err(StartError::Cancelled) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    tokio::select! {
        _ = nodelet.ready() => {
            tracing::info!("existing pods adopted; nodelet ready");
            if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
                tracing::debug!(error = %e, "sd_notify");
            }
        }
        _ = cancel.cancelled() => {}
    }
    cancel.cancelled().await;
    tracing::info!("shutting down; pods keep running");
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    if !nodelet.shutdown(Duration::from_secs(5)).await {
        tracing::warn!("some tasks did not stop within 5s");
    }
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM");
            std::future::pending::<()>().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
