//! The composition root: the one place that builds nodelet's parts and wires them together.
//! `main.rs` starts nodelet through it, and so does the component-test harness
//! (`tests/harness`), so the two cannot drift apart.
//!
//! [`NodeletBuilder`] takes the configuration and, where a test swaps an effect, the effect: the
//! container runtime ([`RuntimeServices`]: the CRI client and containerd's own APIs, or an
//! in-memory fake), the clock, the node's facts ([`NodeInfo`]), the host paths ([`HostPaths`]),
//! the cgroup setup ([`CgroupSetup`]) and the source of ConfigMaps and Secrets.
//! [`NodeletBuilder::start`] connects to what the configuration names, sets up the node and
//! spawns every long-running part, one wing at a time (each its own file, taking what it needs
//! and returning what it builds):
//!
//! - `wire_runtime`: the runtime, nodelet's directories, the node's facts and cgroups;
//! - `wire_cluster`: in cluster mode, the credentials and clients, the object cache, then
//!   admission of API pods, mirror pods, the pod status sync, the event sink and the node loops
//!   (registration, node status, Lease);
//! - `wire_plugins`: the plugin watcher registering CSI drivers from
//!   `<rootDir>/plugins_registry` into the node's `CsiDrivers` store (and, in cluster mode,
//!   onto the `CSINode` and the Node);
//! - `wire_pods`: the PLEG (relist, and containerd's task events when the runtime offers
//!   them), the pod sources (static pod directory; the API server's pods in cluster mode), the
//!   pod manager and the pod workers, with the prober waking workers through the PLEG channel;
//! - `wire_pressure`: garbage collection, eviction, log rotation and node shutdown, and the
//!   admit handlers the pod manager asks for every new pod;
//! - `wire_servers`: the HTTP servers (kubelet API, read-only API, healthz).
//!
//! Every task runs in one `TaskTracker` under one `CancellationToken` (the pod workers in the
//! `PodWorkers`' own tracker, under a child of that token); [`Nodelet::shutdown`] cancels the
//! tree and waits for all of them.

mod cgroups;
mod credentials;
mod eviction;
pub mod settings;
mod wakeups;
mod wire_cluster;
mod wire_plugins;
mod wire_pods;
mod wire_pressure;
mod wire_runtime;
mod wire_servers;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cgroup::manager::CgroupError;
use crate::cgroup::node::NodeCgroups;
use crate::cgroup::PodCgroupSettings;
use crate::clock::Clock;
use crate::cluster;
use crate::config::Config;
use crate::cri::containerd::{ContainerdTasks, TaskSignaller};
use crate::cri::features::RuntimeFeaturesView;
use crate::cri::health::RuntimeHealth;
use crate::cri::remote::RemoteRuntime;
use crate::cri::runtime_config::{self, CgroupDriverAnswer};
use crate::cri::{api, HousekeepingRuntime, ImageService, Runtime, StatsRuntime, StreamingRuntime};
use crate::csi::CsiDrivers;
use crate::events::{node_ref, EventRecorder, EventType};
use crate::eviction::manager::PressureView;
use crate::gc::images::ImageGc;
use crate::lifecycle::shutdown::ShutdownView;
use crate::node::{NodeAgent, NodeFacts};
use crate::objects::ObjectSource;
use crate::pleg::Pleg;
use crate::pod::manager::StaticAdmission;
use crate::pod::sysctls::SysctlAdmitHandler;
use crate::pod::workers::PodWorkers;
use crate::probe::ProbeManager;
use crate::server::tls::TlsError;
use crate::server::BindError;
use crate::stats::machine::NodeInfo;
use crate::status::StatusManager;

/// Why nodelet could not start. Each names what it was doing and the path, address or field.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The cancellation token fired while waiting for the container runtime.
    #[error("stopped before the container runtime answered")]
    Cancelled,
    #[error(transparent)]
    Runtime(#[from] crate::cri::Error),
    #[error("starting the thread that deletes gone pods' directories: {0}")]
    TrashEmptier(std::io::Error),
    #[error("creating {field} {}: {error}", path.display())]
    CreateDir {
        field: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    /// `rootDir` could not be put on a shared mount (the kubelet does not start either).
    #[error("making rootDir {} a shared mount: {error}", path.display())]
    RootDirShared {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{what}: {error}")]
    Cgroups {
        what: &'static str,
        error: CgroupError,
    },
    #[error("connecting to the API server: {error}")]
    ApiServer { error: cluster::Error },
    #[error("node certificates: {error}")]
    Certificates {
        error: crate::certificate::bootstrap::BootstrapError,
    },
    #[error("{what}: {error}")]
    Tls { what: &'static str, error: TlsError },
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error(transparent)]
    CredentialProviders(#[from] crate::images::provider::ProviderError),
    #[error("in-place resize: {0}")]
    Allocation(#[from] crate::sync::allocation::Error),
    #[error("allowedUnsafeSysctls: {0}")]
    Sysctls(String),
    /// The runtime's `RuntimeConfig` failed (after the kubelet's retries) or named a driver
    /// nodelet does not know.
    #[error("getting the cgroup driver from the runtime's RuntimeConfig: {0}")]
    RuntimeCgroupDriver(String),
    /// The kubelet's IDs (`/etc/subuid`, `/etc/subgid`) do not fit `idsPerPod` and `maxPods`,
    /// or a pod's mapping file cannot be taken back (the kubelet does not start either).
    #[error("user namespaces: {0}")]
    UserNamespaces(crate::userns::UsernsError),
}

/// containerd's native event service, which tells the PLEG of task starts and exits at once.
#[derive(Debug, Clone)]
pub struct ContainerdEvents {
    pub endpoint: String,
    pub namespace: String,
}

/// The container runtime and what nodelet uses of it. [`RuntimeServices::connect`] gives the
/// CRI client for the configured endpoints; a test hands in its fake.
#[derive(Clone)]
pub struct RuntimeServices {
    pub runtime: Arc<dyn Runtime>,
    pub images: Arc<dyn ImageService>,
    /// exec, attach and port-forward on the kubelet API; `None` leaves those routes out.
    pub streaming: Option<Arc<dyn StreamingRuntime>>,
    /// The Summary API's runtime calls; `None` answers `/stats/summary` with 404.
    pub stats: Option<Arc<dyn StatsRuntime>>,
    /// Delivers `lifecycle.stopSignal`; `None` falls back to the runtime's stop signal.
    pub tasks: Option<Arc<dyn TaskSignaller>>,
    /// The runtime's status and `ReopenContainerLog`; `None` turns log rotation off and leaves
    /// image GC without the runtime's sandbox image.
    pub housekeeping: Option<Arc<dyn HousekeepingRuntime>>,
    /// `None`: the PLEG relies on its relist alone.
    pub containerd_events: Option<ContainerdEvents>,
    /// The runtime's Version answer (its name goes into every `containerID`).
    pub version: api::VersionResponse,
    /// The handlers and runtime-wide features the runtime's `Status` states, read at start
    /// and every 5 s after (node `status.runtimeHandlers` and `status.features`, admission,
    /// recursive read-only mounts).
    pub runtime_features: RuntimeFeaturesView,
    /// What the runtime's `RuntimeConfig` said of the cgroup driver at start; it wins over the
    /// configured `cgroupDriver` when it says anything.
    pub cgroup_driver: CgroupDriverAnswer,
}

impl RuntimeServices {
    /// Connects to the configured CRI endpoints and waits until the runtime answers (logging
    /// every ten seconds), or until `cancel` fires.
    pub async fn connect(
        cfg: &Config,
        cancel: &CancellationToken,
    ) -> Result<RuntimeServices, StartError> {
        let remote = RemoteRuntime::connect(
            &cfg.container_runtime_endpoint,
            &cfg.image_service_endpoint,
            cfg.runtime_request_timeout,
        )?;
        let version = tokio::select! {
            version = wait_for_runtime(&remote, &cfg.container_runtime_endpoint) => version,
            _ = cancel.cancelled() => return Err(StartError::Cancelled),
        };
        let tasks: Option<Arc<dyn TaskSignaller>> = match ContainerdTasks::connect(
            &cfg.containerd_endpoint,
            &cfg.containerd_namespace,
        ) {
            Ok(t) => Some(Arc::new(t)),
            Err(e) => {
                tracing::warn!(error = %e, "containerd task API unavailable; lifecycle.stopSignal falls back to the runtime's stop signal");
                None
            }
        };
        // A runtime that cannot say leaves the node without runtimeHandlers and features; the
        // pods still run.
        let runtime_features = match remote.runtime_feature_set().await {
            Ok(set) => set,
            Err(e) => {
                tracing::warn!(error = %e, "the runtime's Status states no handlers or features");
                Default::default()
            }
        };
        let runtime_features = RuntimeFeaturesView::new(runtime_features);
        let cgroup_driver = tokio::select! {
            answer = ask_cgroup_driver(&remote) => answer?,
            _ = cancel.cancelled() => return Err(StartError::Cancelled),
        };
        let remote = Arc::new(remote);
        Ok(RuntimeServices {
            runtime: remote.clone(),
            images: remote.clone(),
            streaming: Some(remote.clone()),
            stats: Some(remote.clone()),
            housekeeping: Some(remote),
            tasks,
            containerd_events: Some(ContainerdEvents {
                endpoint: cfg.containerd_endpoint.clone(),
                namespace: cfg.containerd_namespace.clone(),
            }),
            version,
            runtime_features,
            cgroup_driver,
        })
    }
}

/// The runtime's `RuntimeConfig`, asked as the kubelet asks it: an error other than
/// `Unimplemented` (a runtime still starting) is retried [`runtime_config::ATTEMPTS`] times,
/// [`runtime_config::RETRY_DELAY`] apart, and then stops the start.
async fn ask_cgroup_driver(remote: &RemoteRuntime) -> Result<CgroupDriverAnswer, StartError> {
    let mut last = String::new();
    for attempt in 1..=runtime_config::ATTEMPTS {
        let result = remote.runtime_config().await.map_err(|e| match e {
            crate::cri::Error::Call { status, .. } => status,
            other => tonic::Status::unknown(other.to_string()),
        });
        match runtime_config::answer_of(result) {
            Ok(answer) => return Ok(answer),
            Err(status) => {
                tracing::error!(attempt, code = ?status.code(), message = status.message(), "RuntimeConfig from runtime service failed");
                last = format!(
                    "rpc error: code = {:?} desc = {}",
                    status.code(),
                    status.message()
                );
            }
        }
        if attempt < runtime_config::ATTEMPTS {
            tokio::time::sleep(runtime_config::RETRY_DELAY).await;
        }
    }
    Err(StartError::RuntimeCgroupDriver(last))
}

/// `cfg` with the cgroup driver the runtime decides (the configured one only as the fallback),
/// logged as the kubelet logs it.
fn with_runtime_cgroup_driver(
    mut cfg: Config,
    answer: CgroupDriverAnswer,
) -> Result<Config, StartError> {
    let (driver, source) = runtime_config::effective_cgroup_driver(cfg.cgroup_driver, answer)
        .map_err(StartError::RuntimeCgroupDriver)?;
    match (source, answer) {
        (runtime_config::DriverSource::Runtime, _) => {
            tracing::info!(cgroup_driver = %driver, configured = %cfg.cgroup_driver, "{}", runtime_config::FROM_RUNTIME_MESSAGE);
        }
        (_, CgroupDriverAnswer::Unimplemented) => {
            tracing::info!(cgroup_driver = %driver, "{}", runtime_config::FALLBACK_MESSAGE);
        }
        _ => {}
    }
    cfg.cgroup_driver = driver;
    Ok(cfg)
}

async fn wait_for_runtime(runtime: &RemoteRuntime, endpoint: &str) -> api::VersionResponse {
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
                return v;
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

/// Where the host's files are: the root (machine facts), `/proc` (capacity, PIDs, the kernel
/// release) and the cgroup mount.
#[derive(Debug, Clone)]
pub struct HostPaths {
    pub root: PathBuf,
    pub proc: PathBuf,
    pub cgroup: PathBuf,
    /// sysfs (AppArmor's module parameters and securityfs).
    pub sys: PathBuf,
}

impl Default for HostPaths {
    fn default() -> Self {
        HostPaths {
            root: PathBuf::from("/"),
            proc: PathBuf::from("/proc"),
            cgroup: PathBuf::from(crate::cgroup::CGROUP_MOUNT),
            sys: PathBuf::from("/sys"),
        }
    }
}

/// How the node's cgroups come about.
#[derive(Clone, Default)]
pub enum CgroupSetup {
    /// Detect the hierarchy at [`HostPaths::cgroup`] and, with `cgroupsPerQOS`, create and
    /// update `kubepods` and the QoS tiers through the configured driver.
    #[default]
    Host,
    /// Use these settings and this tree (`None`: the runtime places the pods' cgroups);
    /// nothing is detected or created.
    Given {
        settings: PodCgroupSettings,
        node: Option<Arc<NodeCgroups>>,
    },
}

/// Builds a nodelet from its configuration; see the module documentation.
pub struct NodeletBuilder {
    config: Config,
    runtime: Option<RuntimeServices>,
    clock: Clock,
    node: Option<NodeInfo>,
    paths: HostPaths,
    cgroups: CgroupSetup,
    objects: Option<Arc<dyn ObjectSource>>,
    csi_drivers: CsiDrivers,
    cancel: CancellationToken,
}

impl NodeletBuilder {
    /// A nodelet as `config` describes it, on this host, with the system clock.
    pub fn new(config: Config) -> Self {
        NodeletBuilder {
            config,
            runtime: None,
            clock: Clock::system(),
            node: None,
            paths: HostPaths::default(),
            cgroups: CgroupSetup::Host,
            objects: None,
            csi_drivers: CsiDrivers::new(),
            cancel: CancellationToken::new(),
        }
    }

    /// Use this runtime instead of connecting to `containerRuntimeEndpoint`.
    pub fn runtime(mut self, runtime: RuntimeServices) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// The wall-clock source for API timestamps (a paused-clock test's `Clock::starting_at`).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The node's facts, instead of detecting them from the host.
    pub fn node_info(mut self, node: NodeInfo) -> Self {
        self.node = Some(node);
        self
    }

    pub fn host_paths(mut self, paths: HostPaths) -> Self {
        self.paths = paths;
        self
    }

    pub fn cgroups(mut self, setup: CgroupSetup) -> Self {
        self.cgroups = setup;
        self
    }

    /// ConfigMaps and Secrets from here instead of the API server's cache (or none, standalone).
    pub fn objects(mut self, objects: Arc<dyn ObjectSource>) -> Self {
        self.objects = Some(objects);
        self
    }

    /// The store the plugin watcher registers CSI drivers into, instead of a new one (a test
    /// that looks at the drivers, or a part built before the nodelet that reads them).
    pub fn csi_drivers(mut self, store: CsiDrivers) -> Self {
        self.csi_drivers = store;
        self
    }

    /// The root of the cancellation tree: cancelling it stops the nodelet (see
    /// [`Nodelet::shutdown`]), and stops [`NodeletBuilder::start`] while it waits for the runtime.
    pub fn cancel_token(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// Connects, sets up the node and starts every part. On an error, whatever was started is
    /// cancelled.
    pub async fn start(self) -> Result<Nodelet, StartError> {
        let cancel = self.cancel.clone();
        let tasks = TaskTracker::new();
        match self.wire(&tasks).await {
            Ok(nodelet) => Ok(nodelet),
            Err(e) => {
                cancel.cancel();
                tasks.close();
                Err(e)
            }
        }
    }

    /// Builds the wings in the order they need each other — runtime, cluster clients, pods,
    /// pressure — then adds admission to the pod manager and starts it, the cluster loops, the
    /// housekeeping and the servers. A feature changes its wing (`wire_*.rs`).
    async fn wire(self, tasks: &TaskTracker) -> Result<Nodelet, StartError> {
        let NodeletBuilder {
            config: cfg,
            runtime,
            clock,
            node,
            paths,
            cgroups: cgroup_setup,
            objects,
            csi_drivers,
            cancel,
        } = self;
        tracing::info!(node = %cfg.node_name, version = env!("CARGO_PKG_VERSION"), "starting nodelet");
        let runtime = match runtime {
            Some(rt) => rt,
            None => RuntimeServices::connect(&cfg, &cancel).await?,
        };
        let cfg = with_runtime_cgroup_driver(cfg, runtime.cgroup_driver)?;
        let runtime = wire_runtime::wire(&cfg, runtime, node, &paths, cgroup_setup).await?;
        // The local event log (the API server's, in cluster mode).
        let recorder = EventRecorder::new(clock, "kubelet", &cfg.node_name);
        let cluster =
            wire_cluster::connect(&cfg, &runtime.node, objects, clock, tasks, &cancel).await?;
        // The CSI drivers registered on this node: the plugin watcher fills the store, the
        // volume manager reads it.
        wire_plugins::spawn(&cfg, &cluster, &csi_drivers, tasks, &cancel)?;
        // The runtime's conditions read once before any pod is synced (the kubelet's sync loop
        // waits for its first runtime status): a pod is never held for a network state that
        // is merely not known yet.
        let runtime_health = RuntimeHealth::new(runtime.rt.runtime.clone());
        runtime_health.check().await;
        let pods = wire_pods::wire(
            &cfg,
            &runtime,
            runtime_health,
            &cluster,
            &csi_drivers,
            &paths,
            &recorder,
            clock,
            tasks,
            &cancel,
        )?;
        let pressure = wire_pressure::wire(
            &cfg,
            &paths,
            &runtime.rt,
            &runtime.node,
            &pods,
            &recorder,
            clock,
            tasks,
            &cancel,
        );
        let wire_pods::PodsWing {
            status,
            probes,
            workers,
            pleg,
            runtime_health,
            manager,
            ready,
            snapshots,
            pleg_events,
            pod_store,
            userns: _,
            csi_volumes,
            trash: _,
        } = pods;
        // The node's taints: its registration taints until the status loop reads the Node.
        let node_taints = Arc::new(tokio::sync::watch::channel(cfg.register_with_taints.clone()).0);
        // One set of node predicates (with critical-pod preemption) for static and API pods,
        // asked after the pressure wing's handlers, as the kubelet's.
        let predicates = wire_cluster::node_predicates(
            &cfg,
            &runtime.node,
            &workers,
            &recorder,
            node_taints.subscribe(),
        );
        // Sysctls are judged against the running kernel's safe set, after the pressure wing's
        // handlers and before the node's predicates, as in the kubelet.
        let kernel_release =
            std::fs::read_to_string(paths.proc.join("sys/kernel/osrelease")).unwrap_or_default();
        let sysctls = SysctlAdmitHandler::new(kernel_release.trim(), &cfg.allowed_unsafe_sysctls)
            .map_err(StartError::Sysctls)?;
        let admit_handlers = {
            let mut handlers = pressure.admit_handlers();
            // The pod fields nodelet refuses (honoured or refused, never ignored).
            handlers.push(Arc::new(crate::pod::field_admission::PodFieldsAdmitHandler));
            handlers.push(Arc::new(sysctls));
            handlers.push(Arc::new(crate::pod::apparmor::AppArmorAdmitHandler {
                host_error: crate::pod::apparmor::host_support(&paths.sys),
            }));
            handlers.push(Arc::new(
                crate::pod::runtime_features::RuntimeFeaturesAdmitHandler {
                    features: runtime.rt.runtime_features.clone(),
                    user_namespaces_gate: cfg
                        .feature_enabled(crate::config::kubelet_fields::USER_NAMESPACES_SUPPORT),
                    image_volume_gate: cfg
                        .feature_enabled(crate::config::kubelet_fields::IMAGE_VOLUME),
                    image_volumes: crate::pod::runtime_features::image_volume_support(
                        &runtime.rt.version.runtime_name,
                        &runtime.rt.version.runtime_version,
                    ),
                },
            ));
            handlers.push(predicates);
            handlers
        };
        let manager = manager.with_static_admission(StaticAdmission {
            handlers: admit_handlers.clone(),
            events: recorder.clone(),
        });
        let manager = wire_cluster::spawn_pod_loops(
            &cfg,
            &cluster,
            wire_cluster::ClusterPods {
                status: &status,
                events: &recorder,
                pod_store: pod_store.as_ref(),
                admit_handlers,
            },
            manager,
            clock,
            tasks,
            &cancel,
        );
        tasks.spawn(manager.run(snapshots, pleg_events, cancel.clone()));
        // After the API sink subscribed, so that a joined node's event list starts with it.
        recorder.record(
            &node_ref(&cfg.node_name),
            EventType::Normal,
            "Starting",
            "Starting nodelet.",
        );
        if runtime.node_cgroups.is_some() {
            recorder.record(
                &node_ref(&cfg.node_name),
                EventType::Normal,
                "NodeAllocatableEnforced",
                "Updated Node Allocatable limit across pods",
            );
        }
        // What the runtime's Status stated at start, read again every 5 s as the kubelet does.
        if let Some(housekeeping) = &runtime.rt.housekeeping {
            tasks.spawn(crate::cri::features::refresh(
                housekeeping.clone(),
                runtime.rt.runtime_features.clone(),
                cancel.clone(),
            ));
        }
        let volumes_in_use = crate::volume::csi::VolumesInUse::default();
        tasks.spawn(
            volumes_in_use
                .clone()
                .run(cfg.root_dir.clone(), cancel.clone()),
        );
        let node_views = NodeViews {
            volumes_in_use,
            csi_volumes: &csi_volumes,
            cfg: &cfg,
            node: &runtime.node,
            runtime: &runtime.rt,
            pleg: &pleg,
            runtime_health: &runtime_health,
            pressure: &pressure.pressure,
            shutdown: &pressure.shutdown,
            taints: &node_taints,
            clock,
        };
        wire_cluster::spawn_node_agent(
            &cluster,
            || node_views.agent(),
            runtime.rt.images.clone(),
            &recorder,
            tasks,
            &cancel,
        );
        let image_gc = pressure.image_gc.clone();
        wire_pressure::spawn_housekeeping(
            &cfg,
            &runtime.rt,
            pressure.housekeeping,
            &workers,
            clock,
            &ready,
            tasks,
            &cancel,
        );
        let node_status = wire_servers::node_status(&cfg, node_views.agent(), tasks, &cancel);
        wire_servers::start(
            wire_servers::Served {
                cfg: &cfg,
                node: &runtime.node,
                runtime: &runtime.rt,
                status: &status,
                events: &recorder,
                pleg: &pleg,
                runtime_health: &runtime_health,
                reviews: cluster.clients.as_ref().map(|c| &c.reviews),
                serving: cluster.clients.as_ref().and_then(|c| c.serving.clone()),
                clock,
                summary: pressure.summary,
                history: pressure.history,
                node_status,
            },
            tasks,
            &cancel,
        )
        .await?;

        Ok(Nodelet {
            csi_drivers,
            image_gc,
            status,
            events: recorder,
            workers,
            probes,
            pleg,
            ready,
            cancel,
            tasks: tasks.clone(),
        })
    }
}

/// What the node status is built from, for the heartbeat (cluster mode) and the status page.
struct NodeViews<'a> {
    cfg: &'a Config,
    node: &'a NodeInfo,
    runtime: &'a RuntimeServices,
    pleg: &'a Arc<Pleg>,
    runtime_health: &'a RuntimeHealth,
    pressure: &'a PressureView,
    shutdown: &'a ShutdownView,
    taints: &'a crate::node::updater::NodeTaints,
    volumes_in_use: crate::volume::csi::VolumesInUse,
    /// The attachable volumes pods want (in `volumesInUse` before they are mounted), and
    /// where the API server's `volumesInUse` is told.
    csi_volumes: &'a Arc<crate::volume::csi::CsiVolumes>,
    clock: Clock,
}

impl NodeViews<'_> {
    /// The node agent over the node's facts, the runtime's and the PLEG's health and the
    /// pressure wing's views, which the node status follows.
    fn agent(&self) -> NodeAgent {
        let pressure = self.pressure.clone();
        let volumes_in_use = self.volumes_in_use.clone();
        let (wanted, reported) = (self.csi_volumes.clone(), self.csi_volumes.clone());
        NodeAgent::new(
            settings::node(self.cfg),
            NodeFacts::detect(self.cfg.node_ip, self.node, &self.runtime.version),
            node_health(self.pleg, self.runtime_health),
            Arc::new(move || pressure.pressure()),
            self.clock,
        )
        .with_shutdown(self.shutdown.clone())
        .with_taints(self.taints.clone())
        .with_runtime_features(self.runtime.runtime_features.clone())
        // What the CSI volume manager's files said at the last scan, and the attachable
        // volumes pods want (the kubelet's desired state: reported before they are mounted).
        .with_volumes_in_use(Arc::new(move || {
            volumes_in_use.get().map(|mounted| {
                let mut names: std::collections::BTreeSet<String> = mounted.into_iter().collect();
                names.extend(wanted.wanted_in_use());
                names.into_iter().collect()
            })
        }))
        .with_reported_in_use(Arc::new(move |names: &[String]| {
            reported.set_reported_in_use(names)
        }))
    }
}

/// The kubelet's `runtimeState.runtimeErrors` and `networkErrors` for the node's `Ready`
/// condition, in its order: the runtime down, the PLEG, the runtime not ready, its network.
fn node_health(pleg: &Arc<Pleg>, runtime: &RuntimeHealth) -> crate::node::HealthFn {
    let (pleg, runtime) = (pleg.clone(), runtime.clone());
    Arc::new(move || {
        let mut errors = Vec::new();
        if let Err(e) = runtime.status() {
            errors.push(e);
        }
        if let Err(e) = pleg.health() {
            errors.push(format!("PLEG is not healthy: {e}"));
        }
        errors.extend(runtime.not_ready());
        errors.extend(runtime.network_error());
        errors
    })
}

/// A started nodelet: its parts that callers look at, and the handle that stops it.
pub struct Nodelet {
    csi_drivers: CsiDrivers,
    image_gc: Arc<ImageGc>,
    status: StatusManager,
    events: EventRecorder,
    workers: PodWorkers,
    probes: ProbeManager,
    pleg: Arc<Pleg>,
    ready: watch::Receiver<bool>,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

impl Nodelet {
    /// The pod statuses (what `/pods` shows and the API status sync writes).
    pub fn status(&self) -> &StatusManager {
        &self.status
    }

    /// The event recorder (what `/events` shows and the API sink sends).
    pub fn events(&self) -> &EventRecorder {
        &self.events
    }

    /// The PLEG, for tests that hand it the runtime's events (a fake runtime has no event
    /// stream).
    pub fn pleg(&self) -> &Arc<Pleg> {
        &self.pleg
    }

    /// The pod workers, for tests that drive pods without a pod source.
    pub fn workers(&self) -> &PodWorkers {
        &self.workers
    }

    /// The CSI drivers registered on this node (the plugin watcher's store).
    pub fn csi_drivers(&self) -> &CsiDrivers {
        &self.csi_drivers
    }

    /// Image garbage collection, for node-level reclaim (`ImageGc::free_space`).
    pub fn image_gc(&self) -> &Arc<ImageGc> {
        &self.image_gc
    }

    /// The root of the cancellation tree.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Resolves once every expected pod source has reported and the orphans found then were
    /// handed to workers (systemd's READY); never, if the nodelet stops first.
    pub async fn ready(&self) {
        let mut ready = self.ready.clone();
        if ready.wait_for(|r| *r).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Cancels the tree and waits up to `deadline` for every task to return; false if some did
    /// not. Pods keep running: stopping nodelet does not stop them.
    pub async fn shutdown(self, deadline: Duration) -> bool {
        self.cancel.cancel();
        self.probes.shutdown();
        self.tasks.close();
        let drain = async {
            self.tasks.wait().await;
            self.workers.wait().await;
        };
        tokio::time::timeout(deadline, drain).await.is_ok()
    }
}
