//! The cluster wing (cluster mode, with a kubeconfig): the credentials and API clients, the
//! ConfigMap/Secret cache with the services watch, and the loops that talk to the API server — admission of API pods,
//! mirror pods, the pod status sync, the event sink and the node's heartbeat (registration,
//! node status, Lease). Standalone, each part is absent and the functions do nothing.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::credentials::{self, ClusterClients};
use super::StartError;
use crate::clock::Clock;
use crate::cluster::ApiServerVersion;
use crate::config::Config;
use crate::events::api_sink::ApiEventSink;
use crate::events::EventRecorder;
use crate::lifecycle::admission::PodAdmitHandler;
use crate::node::NodeAgent;
use crate::objects::{
    watch_runtime_classes, watch_services, NoApiServer, ObjectCache, ObjectSource,
    RuntimeClassStore, ServiceStore,
};
use crate::pod::admission::{NodeCapacity, PredicateAdmitHandler};
use crate::pod::manager::Admission;
use crate::pod::manager::PodManager;
use crate::pod::mirror::MirrorPods;
use crate::pod::workers::PodWorkers;
use crate::stats::machine::NodeInfo;
use crate::status::api_sync::{ApiStatusSync, ApiStatusSyncOptions};
use crate::status::StatusManager;

/// What the cluster wing connects to.
pub(super) struct ClusterWing {
    /// `None` standalone.
    pub clients: Option<ClusterClients>,
    /// The watched ConfigMaps and Secrets (cluster mode, unless a test handed in its own).
    pub object_cache: Option<Arc<ObjectCache>>,
    /// Where volumes and env read ConfigMaps and Secrets: the given source, the cache, or none.
    pub objects: Arc<dyn ObjectSource>,
    /// The API server's release, read once for the pod status sync and the node status loop.
    pub api_server: ApiServerVersion,
}

impl ClusterWing {
    /// The rate-limited client for pods, events and objects (cluster mode).
    pub fn client(&self) -> Option<&kube::Client> {
        self.clients.as_ref().map(|c| &c.client)
    }
}

/// Cluster mode: the credentials first (TLS bootstrap, certificate managers), then the clients
/// every part uses; ConfigMaps and Secrets for volumes and env: `objects` when given, else
/// watched in cluster mode, none standalone.
pub(super) async fn connect(
    cfg: &Config,
    node: &NodeInfo,
    objects: Option<Arc<dyn ObjectSource>>,
    clock: Clock,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) -> Result<ClusterWing, StartError> {
    let clients = match &cfg.kubeconfig {
        Some(_) => Some(credentials::connect(cfg, node, clock, tasks, cancel).await?),
        None => None,
    };
    let object_cache = match (&objects, &clients) {
        (None, Some(clients)) => {
            // The kubelet's service informer: every service of the cluster, for the
            // environment's service links; started now so that it has listed by the time the
            // first API pod's containers start.
            let (services, writer) = ServiceStore::new();
            tasks.spawn(watch_services(
                clients.client.clone(),
                writer,
                cancel.clone(),
            ));
            // The kubelet's RuntimeClass manager: every RuntimeClass, for the handler each
            // sandbox is created with.
            let (runtime_classes, writer) = RuntimeClassStore::new();
            tasks.spawn(watch_runtime_classes(
                clients.client.clone(),
                writer,
                cancel.clone(),
            ));
            Some(Arc::new(
                ObjectCache::new(clients.client.clone())
                    .with_services(services)
                    .with_runtime_classes(runtime_classes),
            ))
        }
        _ => None,
    };
    let objects: Arc<dyn ObjectSource> = match (objects, &object_cache) {
        (Some(objects), _) => objects,
        (None, Some(cache)) => cache.clone(),
        (None, None) => Arc::new(NoApiServer),
    };
    Ok(ClusterWing {
        clients,
        object_cache,
        objects,
        api_server: ApiServerVersion::new(),
    })
}

/// What the pod loops of the cluster wing need from the pods wing.
pub(super) struct ClusterPods<'a> {
    pub status: &'a StatusManager,
    pub events: &'a EventRecorder,
    /// The API pods' reflector (`None` standalone).
    pub pod_store: Option<&'a Store<Pod>>,
    /// Every admit handler in the kubelet's order: the pressure wing's, then the node's
    /// predicates ([`node_predicates`]).
    pub admit_handlers: Vec<Arc<dyn PodAdmitHandler>>,
}

/// Cluster mode: admits API pods in `manager`, and starts mirror pods, the pod status sync and
/// the event sink. Returns the manager (unchanged standalone).
pub(super) fn spawn_pod_loops(
    cfg: &Config,
    wing: &ClusterWing,
    pods: ClusterPods<'_>,
    mut manager: PodManager,
    clock: Clock,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) -> PodManager {
    let (Some(client), Some(store)) = (wing.client(), pods.pod_store) else {
        return manager;
    };
    manager = manager.with_admission(Admission {
        status: pods.status.clone(),
        events: pods.events.clone(),
        handlers: pods.admit_handlers,
    });
    let workers = manager.workers();
    let still_running: crate::pod::mirror::StillRunning =
        std::sync::Arc::new(move |uid: &str| workers.has_worker(uid));
    let mirrors = MirrorPods::new(
        client.clone(),
        cfg.node_name.clone(),
        store.clone(),
        clock,
        still_running,
    );
    tasks.spawn(mirrors.run(manager.static_pods(), cancel.clone()));
    let sync = ApiStatusSync::new(
        pods.status.clone(),
        client.clone(),
        store.clone(),
        cfg.node_name.clone(),
        clock,
        ApiStatusSyncOptions {
            pod_cleanup: cfg.pod_cleanup.clone(),
            ..Default::default()
        },
    )
    .with_server_version(wing.api_server.clone());
    tasks.spawn(sync.run(cancel.clone()));
    let events_client = wing
        .clients
        .as_ref()
        .map_or_else(|| client.clone(), |c| c.events.clone());
    let sink = ApiEventSink::new(events_client, Default::default());
    tasks.spawn(sink.run(pods.events.subscribe(), cancel.clone()));
    manager
}

/// Cluster mode: registration, the node status loop and the Lease of the agent `agent` builds
/// (standalone it is not built), on the heartbeat client (its own, without the QPS limit, as
/// the kubelet's).
pub(super) fn spawn_node_agent(
    wing: &ClusterWing,
    agent: impl FnOnce() -> NodeAgent,
    images: Arc<dyn crate::cri::ImageService>,
    events: &EventRecorder,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) {
    let Some(heartbeat) = wing.clients.as_ref().map(|c| c.heartbeat.clone()) else {
        return;
    };
    let agent = agent()
        .with_images(images)
        .with_events(events.clone())
        .with_server_version(wing.api_server.clone());
    tasks.spawn(agent.run(heartbeat, cancel.clone()));
}

/// The node's predicates with critical-pod preemption (`pod::admission`): allocatable CPU and
/// memory (capacity minus the reservation), `maxPods`, the registration labels, and the
/// node's taints as `taints` follows them; preempted pods end through `workers`.
pub(super) fn node_predicates(
    cfg: &Config,
    node: &NodeInfo,
    workers: &PodWorkers,
    recorder: &EventRecorder,
    taints: tokio::sync::watch::Receiver<Vec<k8s_openapi::api::core::v1::Taint>>,
) -> Arc<dyn PodAdmitHandler> {
    let reserve = super::settings::allocatable_reservation(cfg);
    let labels = crate::node::register::initial_node(
        &crate::node::register::Registration {
            node_name: &cfg.node_name,
            hostname: &cfg.node_name,
            node_labels: &cfg.node_labels,
            taints: &cfg.register_with_taints,
            provider_id: &cfg.provider_id,
            cloud: super::settings::cloud_provider(cfg),
        },
        Default::default(),
    )
    .metadata
    .labels
    .unwrap_or_default();
    Arc::new(PredicateAdmitHandler {
        node: NodeCapacity {
            cpu_milli: (node.cpu_capacity_milli() - reserve.cpu_milli).max(0),
            memory: {
                let capacity = i64::try_from(node.memory_capacity()).unwrap_or(i64::MAX);
                (capacity - reserve.memory_reserved(capacity)).max(0)
            },
            pods: cfg
                .max_pods_on(u32::try_from(node.cpu_capacity_milli() / 1000).unwrap_or(u32::MAX)),
            // As the Node's allocatable lists them (`node::status`): every reserved page.
            hugepages: node
                .machine
                .hugepages
                .iter()
                .map(|(size, count)| {
                    (
                        *size,
                        i64::try_from(size.saturating_mul(*count)).unwrap_or(i64::MAX),
                    )
                })
                .collect(),
            labels,
        },
        node_name: cfg.node_name.clone(),
        taints,
        killer: Arc::new(workers.clone()),
        events: recorder.clone(),
    })
}
