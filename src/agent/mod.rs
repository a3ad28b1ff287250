//! The composition root: the one place that builds nodelet's parts and wires them together.
//! `main.rs` starts nodelet through it, and so does the component-test harness
//! (`tests/harness`), so the two cannot drift apart.
//!
//! [`NodeletBuilder`] takes the configuration and, where a test swaps an effect, the effect: the
//! container runtime ([`RuntimeServices`]: the CRI client and containerd's own APIs, or an
//! in-memory fake), the clock, the node's facts ([`NodeInfo`]), the host paths ([`HostPaths`]),
//! the cgroup setup ([`CgroupSetup`]) and the source of ConfigMaps and Secrets.
//! [`NodeletBuilder::start`] connects to what the configuration names, sets up the node and
//! spawns every long-running part:
//!
//! - the PLEG (relist, and containerd's task events when the runtime offers them);
//! - the pod sources (static pod directory; the API server's pods in cluster mode), the pod
//!   manager and the pod workers, with the prober waking workers through the PLEG channel;
//! - in cluster mode: the object cache, admission, mirror pods, the pod status sync, the event
//!   sink and the node loops (registration, node status, Lease);
//! - the HTTP servers (kubelet API, read-only API, healthz).
//!
//! Every task runs in one `TaskTracker` under one `CancellationToken` (the pod workers in the
//! `PodWorkers`' own tracker, under a child of that token); [`Nodelet::shutdown`] cancels the
//! tree and waits for all of them.

mod cgroups;
mod credentials;
mod eviction;
mod servers;
mod wakeups;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cgroup::manager::CgroupError;
use crate::cgroup::node::NodeCgroups;
use crate::cgroup::PodCgroupSettings;
use crate::clock::Clock;
use crate::cluster::{self, ApiServerVersion};
use crate::config::Config;
use crate::cri::containerd::{ContainerdTasks, TaskSignaller};
use crate::cri::health::RuntimeHealth;
use crate::cri::remote::RemoteRuntime;
use crate::cri::{api, HousekeepingRuntime, ImageService, Runtime, StatsRuntime, StreamingRuntime};
use crate::events::api_sink::ApiEventSink;
use crate::events::{container_field_path, node_ref, EventRecorder, EventType, ObjectRef};
use crate::eviction::manager::{EvictionManager, PressureView};
use crate::gc::{ContainerGc, CriGc, ImageGc, ImageGcPolicy};
use crate::logs::rotation::{CriLogs, LogRotator, RotationPolicy};
use crate::node::{NodeAgent, NodeFacts, NodeInfo, NodeSettings};
use crate::objects::{NoApiServer, ObjectCache, ObjectSource};
use crate::pleg::{EventKind, Pleg, PodLifecycleEvent};
use crate::pod::admission::NodeCapacity;
use crate::pod::manager::Admission;
use crate::pod::mirror::MirrorPods;
use crate::pod::{PodManager, PodWorkers};
use crate::probe::{ProbeEvent, ProbeManager};
use crate::server::tls::TlsError;
use crate::server::BindError;
use crate::source::{self, FileSource};
use crate::status::api_sync::{ApiStatusSync, ApiStatusSyncOptions};
use crate::status::StatusManager;
use crate::sync::executor::{PodSyncer, SyncSettings, SyncerParts};

/// Why nodelet could not start. Each names what it was doing and the path, address or field.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The cancellation token fired while waiting for the container runtime.
    #[error("stopped before the container runtime answered")]
    Cancelled,
    #[error(transparent)]
    Runtime(#[from] crate::cri::Error),
    #[error("creating {field} {}: {error}", path.display())]
    CreateDir {
        field: &'static str,
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
        })
    }
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
}

impl Default for HostPaths {
    fn default() -> Self {
        HostPaths {
            root: PathBuf::from("/"),
            proc: PathBuf::from("/proc"),
            cgroup: PathBuf::from(crate::cgroup::CGROUP_MOUNT),
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

    async fn wire(self, tasks: &TaskTracker) -> Result<Nodelet, StartError> {
        let NodeletBuilder {
            config: cfg,
            runtime,
            clock,
            node,
            paths,
            cgroups: cgroup_setup,
            objects,
            cancel,
        } = self;
        tracing::info!(node = %cfg.node_name, version = env!("CARGO_PKG_VERSION"), "starting nodelet");
        let rt = match runtime {
            Some(rt) => rt,
            None => RuntimeServices::connect(&cfg, &cancel).await?,
        };
        create_dir("rootDir", &cfg.root_dir)?;
        create_dir("podLogsDir", &cfg.pod_logs_dir)?;
        let node = Arc::new(node.unwrap_or_else(|| {
            NodeInfo::detect(&cfg.node_name, cfg.node_ip, &paths.root, &cfg.root_dir)
        }));
        // The local event log (the API server's, in cluster mode).
        let recorder = EventRecorder::new(clock, "kubelet", &cfg.node_name);
        let (pod_cgroup, node_cgroups) = match cgroup_setup {
            CgroupSetup::Host => cgroups::setup(&cfg, &node, &paths).await?,
            CgroupSetup::Given { settings, node } => (settings, node),
        };
        if let Some(node_cgroups) = &node_cgroups {
            cgroups::sweep_orphans(node_cgroups, rt.runtime.as_ref()).await;
        }
        // Cluster mode: the credentials first (TLS bootstrap, certificate managers), then the
        // clients every part below uses.
        let clients = match &cfg.kubeconfig {
            Some(_) => Some(credentials::connect(&cfg, &node, clock, tasks, &cancel).await?),
            None => None,
        };
        let cluster = clients.as_ref().map(|c| c.client.clone());
        // ConfigMaps and Secrets for volumes and env: watched in cluster mode, none standalone.
        let object_cache = match (&objects, &cluster) {
            (None, Some(client)) => Some(Arc::new(ObjectCache::new(client.clone()))),
            _ => None,
        };
        let objects: Arc<dyn ObjectSource> = match (objects, &object_cache) {
            (Some(objects), _) => objects,
            (None, Some(cache)) => cache.clone(),
            (None, None) => Arc::new(NoApiServer),
        };
        let status = StatusManager::new();
        // The API server's release, read once for the pod status sync and the node status loop.
        let api_server = ApiServerVersion::new();
        // Probe result changes wake the pod's worker through the same channel as runtime events.
        let (pleg_tx, pleg_rx) = mpsc::channel(1024);
        let probes = ProbeManager::in_tasks(
            rt.runtime.clone(),
            clock,
            wake_on_probe_result(pleg_tx.clone()),
            record_probe_event(recorder.clone()),
            tasks.clone(),
            &cancel,
        );
        let providers = match (
            &cfg.image_credential_provider_config,
            &cfg.image_credential_provider_bin_dir,
        ) {
            (Some(file), Some(bin_dir)) => crate::images::provider::load_config(file, bin_dir)?,
            _ => Vec::new(),
        };
        let pulls = Arc::new(crate::images::ImagePuller::new(
            rt.images.clone(),
            objects.clone(),
            Arc::new(crate::images::CredentialProviders::new(
                providers,
                Arc::new(crate::images::provider::ProcessExec),
            )),
            crate::images::PullLimit::from_config(
                cfg.serialize_image_pulls,
                cfg.max_parallel_image_pulls,
            ),
        ));
        let syncer = PodSyncer::new(SyncerParts {
            runtime: rt.runtime.clone(),
            images: rt.images.clone(),
            pulls,
            status: status.clone(),
            node: node.clone(),
            settings: Arc::new(sync_settings(
                &cfg,
                &rt.version,
                pod_cgroup,
                node_cgroups.clone(),
            )),
            clock,
            events: recorder.clone(),
            probes: probes.clone(),
            objects,
            tasks: rt.tasks.clone(),
        });
        let workers = PodWorkers::new(syncer, cfg.sync_frequency, cancel.child_token());

        let pleg = Pleg::new(
            rt.runtime.clone(),
            cfg.node_name.clone(),
            cfg.pleg_relist_period,
            pleg_tx,
        );
        tasks.spawn(pleg.clone().run_relist(cancel.clone()));
        let runtime_health = RuntimeHealth::new(rt.runtime.clone());
        tasks.spawn(runtime_health.clone().run(cancel.clone()));
        if let Some(events) = &rt.containerd_events {
            tasks.spawn(pleg.clone().run_events(
                events.endpoint.clone(),
                events.namespace.clone(),
                tasks.clone(),
                cancel.clone(),
            ));
        }

        let (snap_tx, snap_rx) = mpsc::channel(16);
        let mut expected = Vec::new();
        if let Some(dir) = &cfg.static_pod_path {
            expected.push(source::FILE_SOURCE);
            let file =
                FileSource::new(dir.clone(), cfg.node_name.clone(), cfg.file_check_frequency);
            tasks.spawn(file.run(snap_tx.clone(), cancel.clone()));
        }
        let pod_store = if let Some(client) = &cluster {
            expected.push(source::api::API_SOURCE);
            let (store, writer) = kube::runtime::reflector::store::<Pod>();
            let mut api =
                source::api::ApiSource::new(client.clone(), cfg.node_name.clone(), writer);
            if let Some(cache) = object_cache.clone() {
                // Watch the ConfigMaps and Secrets the node's pods refer to, and only those.
                api = api.on_change(Arc::new(move |pods: &[Pod]| {
                    cache.sync_pods(pods.iter());
                }));
            }
            tasks.spawn(api.run(snap_tx.clone(), cancel.clone()));
            Some(store)
        } else {
            None
        };
        drop(snap_tx);
        let (mut manager, ready) = PodManager::new(
            workers.clone(),
            rt.runtime.clone(),
            cfg.node_name.clone(),
            expected,
        );
        let cri = Arc::new(CriGc {
            runtime: rt.runtime.clone(),
            images: rt.images.clone(),
            stats: rt.stats.clone(),
            housekeeping: rt.housekeeping.clone(),
            node_name: cfg.node_name.clone(),
        });
        let image_gc = Arc::new(ImageGc::new(
            cri.clone(),
            ImageGcPolicy::from_config(&cfg),
            recorder.clone(),
            cfg.node_name.clone(),
        ));
        let summary = servers::summary_provider(&cfg, &paths, &rt, &status, clock);
        // The status page's last hour, kept from the readings the eviction manager makes.
        let history = summary.as_ref().map(|_| {
            Arc::new(crate::history::History::new(
                node.memory_capacity(),
                crate::history::memory_thresholds(&cfg.eviction.thresholds, node.memory_capacity()),
            ))
        });
        let eviction_summary = summary
            .clone()
            .zip(history.clone())
            .map(|(inner, history)| {
                let status = status.clone();
                Arc::new(crate::history::Recording {
                    inner,
                    history,
                    pods: Arc::new(move || status.pods()),
                    clock,
                }) as Arc<dyn crate::stats::SummarySource>
            });
        let eviction = eviction_summary.map(|summary| {
            let mut reclaim_gc = container_gc(&cfg, &cri, &workers, clock);
            reclaim_gc.policy.max_per_pod_container = 0;
            EvictionManager::new(
                crate::eviction::manager::Settings::from_config(&cfg),
                summary,
                Arc::new(eviction::AdmittedPods {
                    pods: manager.admitted_pods(),
                    status: status.clone(),
                    workers: workers.clone(),
                }),
                Arc::new(workers.clone()),
                Arc::new(eviction::GcReclaim {
                    containers: reclaim_gc,
                    images: image_gc.clone(),
                }),
                recorder.clone(),
            )
        });
        let pressure = eviction
            .as_ref()
            .map_or_else(PressureView::none, EvictionManager::pressure);
        match &eviction {
            Some(eviction) => wakeups::spawn(
                &cfg,
                &paths,
                &crate::eviction::manager::Settings::from_config(&cfg).thresholds,
                node.memory_capacity(),
                eviction.waker(),
                tasks,
                &cancel,
            ),
            None => {
                tracing::warn!("the runtime offers no stats calls: node-pressure eviction is off")
            }
        }
        let shutdown = match crate::nodeshutdown::manager::Settings::from_config(&cfg) {
            Some(settings) => {
                let shutdown = crate::nodeshutdown::ShutdownManager::new(
                    settings,
                    crate::nodeshutdown::manager::system_bus(),
                    Arc::new(eviction::AdmittedPods {
                        pods: manager.admitted_pods(),
                        status: status.clone(),
                        workers: workers.clone(),
                    }),
                    Arc::new(workers.clone()),
                    recorder.clone(),
                    clock,
                );
                let view = shutdown.view();
                tasks.spawn(shutdown.run(cancel.clone()));
                view
            }
            None => crate::nodeshutdown::ShutdownView::none(),
        };
        manager = manager.with_static_admission(crate::pod::manager::StaticAdmission {
            pressure: pressure.clone(),
            events: recorder.clone(),
            shutdown: shutdown.clone(),
        });
        if let (Some(client), Some(store)) = (&cluster, &pod_store) {
            manager = manager.with_admission(admission(
                &cfg, &node, &status, &recorder, &pressure, &shutdown,
            ));
            let mirrors = MirrorPods::new(client.clone(), cfg.node_name.clone(), store.clone());
            tasks.spawn(mirrors.run(manager.static_pods(), cancel.clone()));
            let sync = ApiStatusSync::new(
                status.clone(),
                client.clone(),
                store.clone(),
                cfg.node_name.clone(),
                clock,
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
            &node_ref(&cfg.node_name),
            EventType::Normal,
            "Starting",
            "Starting nodelet.",
        );
        if node_cgroups.is_some() {
            recorder.record(
                &node_ref(&cfg.node_name),
                EventType::Normal,
                "NodeAllocatableEnforced",
                "Updated Node Allocatable limit across pods",
            );
        }

        // The node's heartbeats get their own client without the QPS limit, as the kubelet's.
        if let Some(heartbeat) = clients.as_ref().map(|c| c.heartbeat.clone()) {
            let facts = NodeFacts::detect(&cfg, &node, &rt.version);
            let health = node_health(&pleg, &runtime_health);
            let agent = NodeAgent::new(
                NodeSettings::from_config(&cfg),
                facts,
                health,
                {
                    let pressure = pressure.clone();
                    Arc::new(move || pressure.pressure())
                },
                clock,
            )
            .with_images(rt.images.clone())
            .with_events(recorder.clone())
            .with_server_version(api_server.clone())
            .with_shutdown(shutdown.clone());
            tasks.spawn(agent.run(heartbeat, cancel.clone()));
        }

        housekeeping(
            &cfg,
            &rt,
            Housekeeping {
                cri,
                image_gc: image_gc.clone(),
                eviction,
            },
            &workers,
            clock,
            &ready,
            tasks,
            &cancel,
        );

        // The node's status as the status page shows it (in standalone mode too).
        let node_status = {
            let pressure = pressure.clone();
            let agent = NodeAgent::new(
                NodeSettings::from_config(&cfg),
                NodeFacts::detect(&cfg, &node, &rt.version),
                node_health(&pleg, &runtime_health),
                Arc::new(move || pressure.pressure()),
                clock,
            )
            .with_shutdown(shutdown.clone());
            let status_fn = agent.status_fn();
            // Built on the previous one, so a condition keeps its transition time; brought up
            // to date every nodeStatusUpdateFrequency (below), so a transition is dated when
            // it happened rather than when the page was next loaded.
            let previous = std::sync::Mutex::new(Some(status_fn(None, None)));
            Arc::new(move || {
                let mut previous = previous.lock().unwrap_or_else(|e| e.into_inner());
                let status = status_fn(previous.as_ref(), None);
                *previous = Some(status.clone());
                status
            }) as Arc<dyn Fn() -> k8s_openapi::api::core::v1::NodeStatus + Send + Sync>
        };
        if cfg.read_only_port != 0 {
            let (node_status, cancel, period) = (
                node_status.clone(),
                cancel.clone(),
                cfg.node_status_update_frequency,
            );
            tasks.spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(period) => {}
                        _ = cancel.cancelled() => return,
                    }
                    node_status();
                }
            });
        }
        servers::start(
            servers::Served {
                cfg: &cfg,
                node: &node,
                runtime: &rt,
                status: &status,
                events: &recorder,
                pleg: &pleg,
                runtime_health: &runtime_health,
                cluster: cluster.as_ref(),
                serving: clients.as_ref().and_then(|c| c.serving.clone()),
                clock,
                summary,
                history,
                node_status,
            },
            tasks,
            &cancel,
        )
        .await?;

        Ok(Nodelet {
            image_gc,
            status,
            events: recorder,
            workers,
            probes,
            ready,
            cancel,
            tasks: tasks.clone(),
        })
    }
}

/// The kubelet's `runtimeState.runtimeErrors` for the node's `Ready` condition: the runtime
/// first, then the PLEG.
fn node_health(pleg: &Arc<Pleg>, runtime: &RuntimeHealth) -> crate::node::HealthFn {
    let (pleg, runtime) = (pleg.clone(), runtime.clone());
    Arc::new(move || {
        let mut errors = Vec::new();
        if let Err(e) = runtime.status() {
            errors.push(e);
        }
        if !pleg.healthy() {
            errors.push("PLEG is not healthy: pleg was last seen active more than 3m0s ago".into());
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join(", "))
        }
    })
}

/// The housekeeping parts `wire` builds before the pod manager (eviction needs them).
struct Housekeeping {
    cri: Arc<CriGc>,
    image_gc: Arc<ImageGc>,
    eviction: Option<EvictionManager>,
}

/// Container GC over the CRI with the kubelet's default policy.
fn container_gc(cfg: &Config, cri: &Arc<CriGc>, workers: &PodWorkers, clock: Clock) -> ContainerGc {
    ContainerGc {
        runtime: cri.clone(),
        live: Arc::new(workers.clone()),
        policy: Default::default(),
        clock,
        pod_logs_dir: cfg.pod_logs_dir.clone(),
        pods_dir: cfg.root_dir.join("pods"),
        root_dir: cfg.root_dir.clone(),
    }
}

/// Starts image GC, container GC and the eviction manager once the pods already on the node
/// were adopted (so that their containers are not taken for a gone pod's, and eviction ranks
/// every pod), and log rotation at once.
#[allow(clippy::too_many_arguments)]
fn housekeeping(
    cfg: &Config,
    rt: &RuntimeServices,
    parts: Housekeeping,
    workers: &PodWorkers,
    clock: Clock,
    ready: &watch::Receiver<bool>,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) {
    let Housekeeping {
        cri,
        image_gc,
        eviction,
    } = parts;
    let container_gc = container_gc(cfg, &cri, workers, clock);
    let mut ready = ready.clone();
    let (gc, gc_cancel, gc_tasks) = (image_gc, cancel.clone(), tasks.clone());
    tasks.spawn(async move {
        tokio::select! {
            r = ready.wait_for(|r| *r) => if r.is_err() { return },
            _ = gc_cancel.cancelled() => return,
        }
        gc_tasks.spawn(gc.run(gc_cancel.clone()));
        if let Some(eviction) = eviction {
            gc_tasks.spawn(eviction.run(gc_cancel.clone()));
        }
        gc_tasks.spawn(container_gc.run(gc_cancel));
    });
    if let Some(h) = &rt.housekeeping {
        let rotator = LogRotator {
            runtime: Arc::new(CriLogs::new(
                rt.runtime.clone(),
                h.clone(),
                cfg.node_name.clone(),
            )),
            policy: RotationPolicy {
                max_size: cfg.container_log_max_size,
                max_files: cfg.container_log_max_files as usize,
            },
            workers: cfg.container_log_max_workers as usize,
            interval: cfg.container_log_monitor_interval,
            clock,
        };
        tasks.spawn(rotator.run(cancel.clone()));
    }
}

fn create_dir(field: &'static str, path: &std::path::Path) -> Result<(), StartError> {
    std::fs::create_dir_all(path).map_err(|error| StartError::CreateDir {
        field,
        path: path.to_path_buf(),
        error,
    })
}

/// What the executor needs of the configuration and the runtime.
fn sync_settings(
    cfg: &Config,
    version: &api::VersionResponse,
    pod_cgroup: PodCgroupSettings,
    cgroups: Option<Arc<NodeCgroups>>,
) -> SyncSettings {
    SyncSettings {
        root_dir: cfg.root_dir.clone(),
        pod_logs_dir: cfg.pod_logs_dir.clone(),
        cgroup_driver: cfg.cgroup_driver,
        cgroup_root: cfg.cgroup_root.clone(),
        cgroups_per_qos: cfg.cgroups_per_qos,
        cluster_dns: cfg.cluster_dns.clone(),
        cluster_domain: cfg.cluster_domain.clone(),
        resolv_conf: Some(cfg.resolv_conf.clone()).filter(|p| !p.as_os_str().is_empty()),
        runtime_name: version.runtime_name.clone(),
        crash_loop_backoff: cfg.crash_loop_back_off_delays(),
        cgroup_v2: pod_cgroup.cgroup_v2,
        single_process_oom_kill: cfg.single_process_oom_kill,
        cgroups,
        pod_cgroup,
    }
}

/// Admission of API pods against what the Node reports as allocatable (what the scheduler
/// placed them by) and its labels.
fn admission(
    cfg: &Config,
    node: &NodeInfo,
    status: &StatusManager,
    recorder: &EventRecorder,
    pressure: &PressureView,
    shutdown: &crate::nodeshutdown::ShutdownView,
) -> Admission {
    let reserve = crate::node::AllocatableReservation::for_config(cfg);
    let labels = crate::node::register::initial_node(
        &crate::node::register::Registration {
            node_name: &cfg.node_name,
            hostname: &cfg.node_name,
            node_labels: &cfg.node_labels,
            taints: &cfg.register_with_taints,
        },
        Default::default(),
    )
    .metadata
    .labels
    .unwrap_or_default();
    Admission {
        node: NodeCapacity {
            cpu_milli: (node.cpu_capacity_milli() - reserve.cpu_milli).max(0),
            memory: {
                let capacity = i64::try_from(node.memory_capacity()).unwrap_or(i64::MAX);
                (capacity - reserve.memory_reserved(capacity)).max(0)
            },
            pods: cfg.max_pods,
            labels,
        },
        node_name: cfg.node_name.clone(),
        status: status.clone(),
        events: recorder.clone(),
        pressure: pressure.clone(),
        shutdown: shutdown.clone(),
    }
}

/// The prober's "a result changed" becomes a PLEG event, so it reaches the pod's worker the way
/// runtime events do.
fn wake_on_probe_result(tx: mpsc::Sender<PodLifecycleEvent>) -> Arc<dyn Fn(&str) + Send + Sync> {
    Arc::new(move |uid: &str| {
        let _ = tx.try_send(PodLifecycleEvent {
            pod_uid: uid.to_string(),
            id: String::new(),
            kind: EventKind::ProbeResult,
        });
    })
}

/// The prober's `Unhealthy` and `ProbeWarning` events, on the pod with the container's
/// `fieldPath` (`spec.initContainers{name}` for a sidecar).
fn record_probe_event(recorder: EventRecorder) -> Arc<dyn Fn(ProbeEvent) + Send + Sync> {
    Arc::new(move |e: ProbeEvent| {
        let object = ObjectRef {
            kind: "Pod".into(),
            namespace: e.pod_namespace.clone(),
            name: e.pod_name.clone(),
            uid: e.pod_uid.clone(),
            field_path: Some(container_field_path(&e.container_name, e.container_kind)),
        };
        recorder.record(&object, EventType::Warning, e.reason, e.message);
    })
}

/// A started nodelet: its parts that callers look at, and the handle that stops it.
pub struct Nodelet {
    image_gc: Arc<ImageGc>,
    status: StatusManager,
    events: EventRecorder,
    workers: PodWorkers,
    probes: ProbeManager,
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

    /// The pod workers, for tests that drive pods without a pod source.
    pub fn workers(&self) -> &PodWorkers {
        &self.workers
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
