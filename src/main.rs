//! The `nodelet` command: `run`, `validate`, `pods`, `events`, `version`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use nodelet::clock::Clock;
use nodelet::cluster;
use nodelet::config::{self, Config, Environment, LogFormat};
use nodelet::cri::containerd::ContainerdTasks;
use nodelet::cri::remote::RemoteRuntime;
use nodelet::cri::{ImageService, Runtime};
use nodelet::events::api_sink::ApiEventSink;
use nodelet::events::{event_table, EventRecorder, EventType, ObjectRef};
use nodelet::node::{NodeFacts, NodeInfo};
use nodelet::objects::{NoApiServer, ObjectCache, ObjectSource};
use nodelet::pleg::{EventKind, Pleg, PodLifecycleEvent};
use nodelet::pod::admission::NodeCapacity;
use nodelet::pod::manager::Admission;
use nodelet::pod::mirror::MirrorPods;
use nodelet::pod::{PodManager, PodWorkers};
use nodelet::probe::{ProbeEvent, ProbeManager};
use nodelet::server::{self, ApiState};
use nodelet::source::{self, FileSource};
use nodelet::status::api_sync::{ApiStatusSync, ApiStatusSyncOptions};
use nodelet::status::{printer, StatusManager};
use nodelet::sync::executor::{PodSyncer, SyncSettings};

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
        Command::Version => {
            println!("nodelet {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nodelet: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
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
                let unified =
                    nodelet::cgroup::is_cgroup2_unified(std::path::Path::new(CGROUP_MOUNT));
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

fn init_tracing(cfg: &Config) {
    use tracing_subscriber::EnvFilter;
    // The kubelet's -v levels: up to 2 is the normal operator level, 4 is debugging.
    let default = match cfg.logging.verbosity {
        0..=2 => "info",
        3..=5 => "nodelet=debug,info",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
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
    // The kubelet validates the cgroup version with its configuration: before anything starts.
    let unified = nodelet::cgroup::is_cgroup2_unified(std::path::Path::new(CGROUP_MOUNT));
    let cgroup_v1_warning = nodelet::cgroup::check_cgroup_version(cfg.fail_cgroup_v1, unified)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.config.display()))?;
    init_tracing(&cfg);
    if let Some(warning) = cgroup_v1_warning {
        tracing::warn!("{warning}");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run(cfg))
}

/// Where the node's cgroup hierarchy is mounted.
const CGROUP_MOUNT: &str = "/sys/fs/cgroup";

/// The node's cgroup settings and, with `cgroupsPerQOS`, its cgroup tree set up as the kubelet's
/// container manager does at start (node allocatable on `kubepods`, the QoS tiers).
async fn setup_cgroups(
    cfg: &Config,
    node: &NodeInfo,
) -> anyhow::Result<(
    nodelet::cgroup::PodCgroupSettings,
    Option<Arc<nodelet::cgroup::node::NodeCgroups>>,
)> {
    use nodelet::cgroup::{allocatable, manager, memory_qos, node as cgnode};
    let mount = std::path::Path::new(CGROUP_MOUNT);
    let version = manager::Version::detect(mount);
    let cgroup_v2 = version == manager::Version::V2;
    let gate = cfg.feature_enabled(nodelet::config::kubelet_fields::MEMORY_QOS);
    let configured = cfg.memory_qos();
    let memory_qos = memory_qos::MemoryQos::effective(configured, gate, cgroup_v2);
    if configured != memory_qos::MemoryQos::OFF && memory_qos == memory_qos::MemoryQos::OFF {
        tracing::warn!(
            "memoryThrottlingFactor/memoryReservationPolicy need cgroup v2; ignored on this cgroup v1 node"
        );
    }
    if cgroup_v2 {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        if let Some(warning) = memory_qos::kernel_warning(release.trim(), gate) {
            tracing::warn!("{warning}");
        }
    }
    let capacity = allocatable::NodeResources {
        cpu_milli: node.cpu_capacity_milli,
        memory: i64::try_from(node.memory_capacity).unwrap_or(i64::MAX),
        pids: allocatable::pid_capacity(std::path::Path::new("/proc")),
    };
    let reserved = cfg.kube_reserved.plus(cfg.system_reserved);
    let page_size = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096);
    let settings = nodelet::cgroup::PodCgroupSettings {
        enforce_cpu_limits: true,
        cpu_period: nodelet::cgroup::QUOTA_PERIOD,
        pod_pids_limit: cfg.pod_pids_limit,
        memory_qos,
        node_allocatable_memory: allocatable::allocatable(capacity, reserved).memory,
        page_size,
        cgroup_v2,
    };
    if !cfg.cgroups_per_qos {
        return Ok((settings, None));
    }
    let manager: Arc<dyn manager::CgroupManager> = match cfg.cgroup_driver {
        nodelet::config::CgroupDriver::Cgroupfs => {
            Arc::new(nodelet::cgroup::fs::CgroupfsManager::new(mount, version))
        }
        nodelet::config::CgroupDriver::Systemd if !cgroup_v2 => {
            tracing::warn!("cgroupDriver systemd on a cgroup v1 host: nodelet leaves the pod cgroups to the runtime (no pod-level limits, no QoS tiers)");
            return Ok((settings, None));
        }
        nodelet::config::CgroupDriver::Systemd => {
            let bus = nodelet::cgroup::dbus::ZbusSystemd::connect()
                .await
                .context("cgroupDriver systemd: talking to systemd over D-Bus")?;
            Arc::new(nodelet::cgroup::systemd::SystemdManager::new(
                mount,
                Arc::new(bus),
            ))
        }
    };
    let cgroups = cgnode::NodeCgroups::new(
        manager,
        cgnode::NodeCgroupConfig {
            cgroup_root: cfg.cgroup_root.clone(),
            pod: settings,
            capacity,
            reserved,
            enforce_pods: cfg.enforces_pods_allocatable(),
        },
    );
    cgroups
        .start()
        .await
        .context("setting up the pods' cgroups (kubepods and the QoS tiers)")?;
    Ok((settings, Some(Arc::new(cgroups))))
}

/// Removes the cgroups of pods that went away while nodelet was down: those whose UID no
/// sandbox in the runtime carries (of any node: other CRI clients' pods are left alone too).
async fn sweep_orphaned_pod_cgroups(
    cgroups: &nodelet::cgroup::node::NodeCgroups,
    runtime: &dyn Runtime,
) {
    let sandboxes = match runtime.list_pod_sandbox(None).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "listing sandboxes; orphaned pod cgroups are not swept");
            return;
        }
    };
    let uids: std::collections::HashSet<String> = sandboxes
        .iter()
        .filter_map(|s| s.labels.get(nodelet::cri::labels::POD_UID).cloned())
        .collect();
    let report = cgroups
        .sweep_orphans(
            &uids,
            std::time::SystemTime::now(),
            nodelet::cgroup::node::ORPHAN_MIN_AGE,
        )
        .await;
    for (uid, error) in &report.failed {
        tracing::warn!(pod.uid = %uid, error = %error, "removing an orphaned pod cgroup");
    }
    tracing::info!(
        removed = report.removed.len(),
        kept = report.kept.len(),
        failed = report.failed.len(),
        "orphaned pod cgroups swept"
    );
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

async fn wait_for_runtime(
    runtime: &RemoteRuntime,
    endpoint: &str,
) -> anyhow::Result<nodelet::cri::api::VersionResponse> {
    let mut attempt = 0u32;
    loop {
        match runtime.version().await {
            Ok(v) => {
                tracing::info!(
                    runtime = %v.runtime_name,
                    version = %v.runtime_version,
                    api = %v.runtime_api_version,
                    "container runtime reachable"
                );
                return Ok(v);
            }
            Err(e) => {
                if attempt % 10 == 0 {
                    tracing::warn!(endpoint, error = %e, "waiting for the container runtime");
                }
                attempt += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

async fn run(cfg: Config) -> anyhow::Result<()> {
    let cancel = CancellationToken::new();
    tracing::info!(node = %cfg.node_name, version = env!("CARGO_PKG_VERSION"), "starting nodelet");
    let remote = RemoteRuntime::connect(
        &cfg.container_runtime_endpoint,
        &cfg.image_service_endpoint,
        cfg.runtime_request_timeout,
    )?;
    let runtime_version = tokio::select! {
        version = wait_for_runtime(&remote, &cfg.container_runtime_endpoint) => version?,
        _ = shutdown_signal() => return Ok(()),
    };
    let runtime_name = runtime_version.runtime_name.clone();
    std::fs::create_dir_all(&cfg.root_dir)
        .with_context(|| format!("creating rootDir {}", cfg.root_dir.display()))?;
    std::fs::create_dir_all(&cfg.pod_logs_dir)
        .with_context(|| format!("creating podLogsDir {}", cfg.pod_logs_dir.display()))?;

    let remote = Arc::new(remote);
    let runtime: Arc<dyn Runtime> = remote.clone();
    let images: Arc<dyn ImageService> = remote.clone();
    let node_images = images.clone();
    let node = Arc::new(NodeInfo::detect(
        &cfg.node_name,
        cfg.node_ip,
        std::path::Path::new("/proc"),
    ));
    // The local event log (the API server's, in cluster mode).
    let recorder = EventRecorder::new(Clock::system(), "kubelet", &cfg.node_name);
    let (pod_cgroup, cgroups) = setup_cgroups(&cfg, &node).await?;
    if let Some(cgroups) = &cgroups {
        sweep_orphaned_pod_cgroups(cgroups, runtime.as_ref()).await;
    }
    let cluster = match &cfg.kubeconfig {
        Some(_) => Some(
            cluster::client(&cfg)
                .await
                .context("connecting to the API server")?,
        ),
        None => None,
    };
    // ConfigMaps and Secrets for volumes and env: watched in cluster mode, none standalone.
    let object_cache = cluster
        .as_ref()
        .map(|c| Arc::new(ObjectCache::new(c.clone())));
    let objects: Arc<dyn ObjectSource> = match &object_cache {
        Some(cache) => cache.clone(),
        None => Arc::new(NoApiServer),
    };
    let status = StatusManager::new();
    // The API server's release, read once for the pod status sync and the node status loop.
    let api_server = nodelet::cluster::ApiServerVersion::new();
    // Probe result changes wake the pod's worker through the same channel as runtime events.
    let (pleg_tx, pleg_rx) = mpsc::channel(1024);
    let probes = ProbeManager::new(
        runtime.clone(),
        Clock::system(),
        Arc::new({
            let tx = pleg_tx.clone();
            move |uid: &str| {
                let _ = tx.try_send(PodLifecycleEvent {
                    pod_uid: uid.to_string(),
                    id: String::new(),
                    kind: EventKind::ProbeResult,
                });
            }
        }),
        Arc::new({
            let recorder = recorder.clone();
            move |e: ProbeEvent| {
                let object = ObjectRef {
                    kind: "Pod".into(),
                    namespace: e.pod_namespace.clone(),
                    name: e.pod_name.clone(),
                    uid: e.pod_uid.clone(),
                    field_path: Some(format!("spec.containers{{{}}}", e.container_name)),
                };
                recorder.record(&object, EventType::Warning, e.reason, e.message);
            }
        }),
    );
    let syncer = PodSyncer {
        runtime: runtime.clone(),
        images,
        status: status.clone(),
        node: node.clone(),
        settings: Arc::new(SyncSettings {
            root_dir: cfg.root_dir.clone(),
            pod_logs_dir: cfg.pod_logs_dir.clone(),
            cgroup_driver: cfg.cgroup_driver,
            cgroup_root: cfg.cgroup_root.clone(),
            cgroups_per_qos: cfg.cgroups_per_qos,
            cluster_dns: cfg.cluster_dns.clone(),
            cluster_domain: cfg.cluster_domain.clone(),
            resolv_conf: Some(cfg.resolv_conf.clone()).filter(|p| !p.as_os_str().is_empty()),
            runtime_name,
            crash_loop_backoff: cfg.crash_loop_back_off_delays(),
            cgroup_v2: pod_cgroup.cgroup_v2,
            cgroups: cgroups.clone(),
            pod_cgroup,
        }),
        clock: Clock::system(),
        events: recorder.clone(),
        probes: probes.clone(),
        objects,
        tasks: match ContainerdTasks::connect(&cfg.containerd_endpoint, &cfg.containerd_namespace) {
            Ok(t) => Some(Arc::new(t)),
            Err(e) => {
                tracing::warn!(error = %e, "containerd task API unavailable; lifecycle.stopSignal falls back to the runtime's stop signal");
                None
            }
        },
    };
    let workers = PodWorkers::new(syncer, cfg.sync_frequency, cancel.child_token());

    let pleg = Pleg::new(
        runtime.clone(),
        cfg.node_name.clone(),
        cfg.pleg_relist_period,
        pleg_tx,
    );
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(pleg.clone().run_relist(cancel.clone()));
    tasks.spawn(pleg.clone().run_events(
        cfg.containerd_endpoint.clone(),
        cfg.containerd_namespace.clone(),
        cancel.clone(),
    ));

    let (snap_tx, snap_rx) = mpsc::channel(16);
    let mut expected = Vec::new();
    if let Some(dir) = &cfg.static_pod_path {
        expected.push(source::FILE_SOURCE);
        let file = FileSource::new(dir.clone(), cfg.node_name.clone(), cfg.file_check_frequency);
        tasks.spawn(file.run(snap_tx.clone(), cancel.clone()));
    }
    let pod_store = if let Some(client) = &cluster {
        expected.push(source::api::API_SOURCE);
        let (store, writer) = kube::runtime::reflector::store::<k8s_openapi::api::core::v1::Pod>();
        let mut api = source::api::ApiSource::new(client.clone(), cfg.node_name.clone(), writer);
        if let Some(cache) = object_cache.clone() {
            // Watch the ConfigMaps and Secrets the node's pods refer to, and only those.
            api = api.on_change(Arc::new(
                move |pods: &[k8s_openapi::api::core::v1::Pod]| {
                    cache.sync_pods(pods.iter());
                },
            ));
        }
        tasks.spawn(api.run(snap_tx.clone(), cancel.clone()));
        Some(store)
    } else {
        None
    };
    drop(snap_tx);
    let (mut manager, mut ready) = PodManager::new(
        workers.clone(),
        runtime.clone(),
        cfg.node_name.clone(),
        expected,
    );
    if let (Some(client), Some(store)) = (&cluster, &pod_store) {
        let admission_reserve = nodelet::node::AllocatableReservation::for_config(&cfg);
        manager = manager.with_admission(Admission {
            node: NodeCapacity {
                // What the Node reports as allocatable, which the scheduler placed pods by.
                cpu_milli: (node.cpu_capacity_milli - admission_reserve.cpu_milli).max(0),
                memory: (i64::try_from(node.memory_capacity).unwrap_or(i64::MAX)
                    - admission_reserve.memory_bytes)
                    .max(0),
                pods: cfg.max_pods,
                labels: nodelet::node::register::initial_node(
                    &nodelet::node::register::Registration {
                        node_name: &cfg.node_name,
                        hostname: &cfg.node_name,
                        node_labels: &cfg.node_labels,
                        taints: &cfg.register_with_taints,
                    },
                    Default::default(),
                )
                .metadata
                .labels
                .unwrap_or_default(),
            },
            node_name: cfg.node_name.clone(),
            status: status.clone(),
            events: recorder.clone(),
        });
        let mirrors = MirrorPods::new(client.clone(), cfg.node_name.clone(), store.clone());
        tasks.spawn(mirrors.run(manager.static_pods(), cancel.clone()));
        let sync = ApiStatusSync::new(
            status.clone(),
            client.clone(),
            store.clone(),
            cfg.node_name.clone(),
            Clock::system(),
            ApiStatusSyncOptions {
                pod_cleanup: cfg.pod_cleanup.clone(),
                ..Default::default()
            },
        )
        .with_server_version(api_server.clone());
        tasks.spawn(sync.run(cancel.clone()));
        let sink = ApiEventSink::new(client.clone(), Default::default());
        tasks.spawn(sink.run(recorder.subscribe(), cancel.clone()));
    }
    tasks.spawn(manager.run(snap_rx, pleg_rx, cancel.clone()));
    // After the API sink subscribed, so that a joined node's event list starts with it.
    recorder.record(
        &nodelet::events::node_ref(&cfg.node_name),
        EventType::Normal,
        "Starting",
        "Starting nodelet.",
    );
    if cgroups.is_some() {
        recorder.record(
            &nodelet::events::node_ref(&cfg.node_name),
            EventType::Normal,
            "NodeAllocatableEnforced",
            "Updated Node Allocatable limit across pods",
        );
    }

    if cluster.is_some() {
        // The node's heartbeats get their own client without the QPS limit, as the kubelet's.
        let heartbeat = cluster::heartbeat_client(&cfg)
            .await
            .context("connecting to the API server")?;
        let facts = NodeFacts::detect(&cfg, &node, &runtime_version);
        let node_pleg = pleg.clone();
        let health: nodelet::node::HealthFn = Arc::new(move || {
            if node_pleg.healthy() {
                Ok(())
            } else {
                Err("PLEG is not healthy: pleg was last seen active more than 3m0s ago".into())
            }
        });
        let sources = nodelet::node::NodeSources {
            facts,
            health,
            pressure: Arc::new(Default::default),
            images: node_images,
            events: recorder.clone(),
            server: api_server.clone(),
        };
        let loops_cfg = cfg.clone();
        let loops_cancel = cancel.clone();
        tasks.spawn(async move {
            nodelet::node::run_node_loops(heartbeat, &loops_cfg, sources, loops_cancel).await;
        });
    }

    let health_pleg = pleg.clone();
    let state = ApiState {
        pods: Arc::new({
            let status = status.clone();
            move || status.pods()
        }),
        health: Arc::new(move || {
            if health_pleg.healthy() {
                Ok(())
            } else {
                Err("pleg was last seen active more than 3m0s ago".into())
            }
        }),
        events: Arc::new(move || recorder.events()),
        summary: Some(Arc::new(nodelet::stats::SummaryProvider::new(
            nodelet::stats::StatsSettings::from_config(&cfg),
            runtime.clone(),
            remote.clone(),
            Arc::new({
                let status = status.clone();
                move || status.pods()
            }),
            Clock::system(),
        ))),
    };
    if cfg.port != 0 {
        serve_kubelet_api(
            &cfg,
            &state,
            &node,
            (runtime.clone(), remote.clone()),
            status.clone(),
            cluster.as_ref(),
            cancel.clone(),
        )
        .await?;
    }
    if cfg.read_only_port != 0 {
        let addr = std::net::SocketAddr::new(cfg.address, cfg.read_only_port);
        server::serve(addr, server::router(state.clone()), cancel.clone()).await?;
    }
    if cfg.healthz_port != 0 {
        let addr = std::net::SocketAddr::new(cfg.healthz_bind_address, cfg.healthz_port);
        server::serve(addr, server::healthz_router(state), cancel.clone()).await?;
    }

    tokio::select! {
        _ = ready.wait_for(|r| *r) => {
            tracing::info!("existing pods adopted; nodelet ready");
            if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
                tracing::debug!(error = %e, "sd_notify");
            }
        }
        _ = shutdown_signal() => {
            cancel.cancel();
            return Ok(());
        }
    }
    shutdown_signal().await;
    tracing::info!("shutting down; pods keep running");
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    cancel.cancel();
    probes.shutdown();
    let drain = async {
        while tasks.join_next().await.is_some() {}
        workers.wait().await;
    };
    if tokio::time::timeout(Duration::from_secs(5), drain)
        .await
        .is_err()
    {
        tracing::warn!("some tasks did not stop within 5s");
    }
    Ok(())
}

/// The authenticated kubelet API on `port`: HTTPS with the configured or a self-signed
/// certificate; TokenReviews and SubjectAccessReviews go to the API server in cluster mode.
async fn serve_kubelet_api(
    cfg: &Config,
    state: &ApiState,
    node: &NodeInfo,
    (runtime, streaming): (Arc<dyn Runtime>, Arc<dyn nodelet::cri::StreamingRuntime>),
    status: StatusManager,
    cluster: Option<&kube::Client>,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    use nodelet::server::auth::{AccessReviewer, ApiReviews, KubeletAuth, TokenReviewer};
    let mut addresses: Vec<std::net::IpAddr> = node
        .host_ips
        .iter()
        .filter_map(|ip| ip.parse().ok())
        .collect();
    addresses.extend(cfg.node_ip);
    addresses.push(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    addresses.dedup();
    let configured = cfg
        .tls_cert_file
        .as_deref()
        .zip(cfg.tls_private_key_file.as_deref());
    let cert = server::tls::serving_certificate(
        configured,
        &cfg.root_dir.join("pki"),
        &cfg.node_name,
        &addresses,
    )
    .context("kubelet API serving certificate")?;
    let tls = server::tls::server_config(cert, cfg.authentication.client_ca_file.as_deref())
        .context("kubelet API TLS")?;
    let reviews = cluster.map(|client| Arc::new(ApiReviews::new(client.clone())));
    let auth = KubeletAuth::new(
        &cfg.node_name,
        &cfg.authentication,
        &cfg.authorization,
        reviews.clone().map(|r| r as Arc<dyn TokenReviewer>),
        reviews.map(|r| r as Arc<dyn AccessReviewer>),
    );
    let pods: server::container_logs::PodsFn = Arc::new(move || status.pods());
    let logs = server::container_logs::PodContainerLogs {
        runtime: runtime.clone(),
        pods: pods.clone(),
        clock: Clock::system(),
    };
    let streams = server::streaming::StreamingState {
        runtime,
        streaming,
        pods,
    };
    let router =
        server::kubelet_api_router(state.clone(), Arc::new(logs), Some(streams), Arc::new(auth));
    let addr = std::net::SocketAddr::new(cfg.address, cfg.port);
    server::tls::serve_tls(addr, tls, router, cancel).await?;
    Ok(())
}
