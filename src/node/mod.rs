//! This node as the cluster sees it.
//!
//! - [`NodeInfo`] (in `stats::machine`): facts pods see (IPs for `status.hostIP` and the
//!   Downward API, CPU and memory capacity for `resourceFieldRef` defaults and
//!   `oom_score_adj`); standalone and cluster mode.
//! - Cluster mode: Node registration ([`register`]), the node status ([`status`], pure, and
//!   [`updater`], the loop that patches it, reading the Node from a watch of it, [`watch`]) and
//!   the Lease heartbeat ([`lease`]), run together by [`NodeAgent`] (which `crate::agent`
//!   starts). Machine facts come from `stats::machine`.

pub mod iptables;
pub mod lease;
pub mod register;
pub mod status;
pub mod updater;
pub mod watch;

#[cfg(test)]
mod api_fields_tests;

use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerImage, Node, NodeStatus};
use kube::api::Api;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::cluster::ApiServerVersion;
use crate::cri::features::RuntimeFeaturesView;
use crate::cri::ImageService;
use crate::events::EventRecorder;
use crate::lifecycle::pressure::Pressure;
use crate::lifecycle::shutdown::ShutdownView;
use crate::stats::machine::{MachineInfo, NodeInfo};
use status::{build_node_status, AllocatableReservation, NodeStatusInputs};

/// Errors talking to the API server about this node. Each names what was being done.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server answered with a failure `Status`.
    #[error("{context}: {message} ({reason}, {code})")]
    Api {
        context: String,
        code: u16,
        reason: String,
        message: String,
    },
    /// No answer (connection refused, reset, TLS, decoding).
    #[error("{context}: {source}")]
    Request {
        context: String,
        #[source]
        source: kube::Error,
    },
    #[error("{context}: no answer within {timeout:?}")]
    Timeout { context: String, timeout: Duration },
    #[error("{context}")]
    Other { context: String },
}

impl Error {
    /// The HTTP status of an API error (404, 409, ...).
    pub fn code(&self) -> Option<u16> {
        match self {
            Error::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The same error, saying what was being done.
    pub fn context(self, context: String) -> Error {
        let join = |inner: String| {
            if inner.is_empty() {
                context.clone()
            } else {
                format!("{context}: {inner}")
            }
        };
        match self {
            Error::Api {
                context: inner,
                code,
                reason,
                message,
            } => Error::Api {
                context: join(inner),
                code,
                reason,
                message,
            },
            Error::Request {
                context: inner,
                source,
            } => Error::Request {
                context: join(inner),
                source,
            },
            Error::Timeout {
                context: inner,
                timeout,
            } => Error::Timeout {
                context: join(inner),
                timeout,
            },
            Error::Other { context: inner } => Error::Other {
                context: join(inner),
            },
        }
    }
}

/// Runs one API request with a deadline; callers add the context.
pub(crate) async fn api_call<T>(
    timeout: Duration,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, Error> {
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(kube::Error::Api(status))) => Err(Error::Api {
            context: String::new(),
            code: status.code,
            reason: status.reason.clone(),
            message: status.message.clone(),
        }),
        Ok(Err(source)) => Err(Error::Request {
            context: String::new(),
            source,
        }),
        Err(_) => Err(Error::Timeout {
            context: String::new(),
            timeout,
        }),
    }
}

/// Writes nodelet made for this node, for metrics and for tests that assert a steady node
/// stays quiet.
#[derive(Debug, Default)]
pub struct NodeCounters {
    /// PATCHes of `nodes/<name>/status` by the status loop.
    pub status_patches: AtomicU64,
    /// Lease creations and renewals.
    pub lease_writes: AtomicU64,
}

/// Why the node is not healthy (runtime down or not ready, PLEG not healthy, the runtime's
/// network not ready), in the kubelet's order; empty when healthy. The errors become the
/// message of `Ready=False`.
pub type HealthFn = Arc<dyn Fn() -> Vec<String> + Send + Sync>;
/// The eviction manager's view of resource pressure.
pub type PressureFn = Arc<dyn Fn() -> Pressure + Send + Sync>;

/// The node's facts that do not change while nodelet runs.
#[derive(Debug, Clone)]
pub struct NodeFacts {
    pub machine: MachineInfo,
    /// The InternalIP address.
    pub internal_ip: Option<IpAddr>,
    /// `containerd://1.6.20`: the CRI Version call's `runtime_name://runtime_version`.
    pub container_runtime_version: String,
}

impl NodeFacts {
    /// Facts of this host: the machine info of `info` (the same the pods are admitted
    /// against), the IP `node_ip` (`nodeIP`) or else the detected one in `info`, the runtime
    /// from its Version answer.
    pub fn detect(
        node_ip: Option<std::net::IpAddr>,
        info: &NodeInfo,
        runtime: &crate::cri::api::VersionResponse,
    ) -> NodeFacts {
        NodeFacts {
            machine: info.machine.clone(),
            internal_ip: node_ip.or_else(|| info.host_ips.first().and_then(|ip| ip.parse().ok())),
            container_runtime_version: container_runtime_version(runtime),
        }
    }
}

/// `<runtime_name>://<runtime_version>`, as the kubelet reports `containerRuntimeVersion`.
pub fn container_runtime_version(runtime: &crate::cri::api::VersionResponse) -> String {
    format!("{}://{}", runtime.runtime_name, runtime.runtime_version)
}

/// The kubelet's `--cloud-provider` as the Node sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CloudProvider {
    /// No cloud provider: nodelet sets the node's addresses.
    #[default]
    None,
    /// `external`: a cloud controller manager initializes the node (it removes
    /// [`register::TAINT_EXTERNAL_CLOUD_PROVIDER`]) and sets its addresses, which nodelet keeps
    /// from then on; until then the configured `nodeIP` (announced in
    /// [`register::ANNOTATION_PROVIDED_NODE_IP`]), or without one only the hostname.
    External { node_ip: Option<IpAddr> },
}

/// Settings of the node loops, from the configuration.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub node_name: String,
    pub register_node: bool,
    pub node_labels: std::collections::BTreeMap<String, String>,
    pub register_with_taints: Vec<k8s_openapi::api::core::v1::Taint>,
    pub max_pods: u32,
    /// `podsPerCore` (0: none): the pod capacity is at most this many per CPU.
    pub pods_per_core: u32,
    /// `providerID`: the registered Node's `spec.providerID` ("" leaves it unset).
    pub provider_id: String,
    pub cloud: CloudProvider,
    pub update_frequency: Duration,
    pub report_frequency: Duration,
    pub lease_duration_seconds: u32,
    /// Capacity held back from allocatable. Defaults to the kubelet's default hard eviction
    /// thresholds (`memory.available<100Mi`, `nodefs.available<10%`).
    pub reserved: AllocatableReservation,
    /// `daemonEndpoints.kubeletEndpoint.Port`: where the API server reaches the node agent's
    /// authenticated API (`port`; 0 when it is off).
    pub kubelet_port: i32,
    /// `nodeStatusMaxImages`: how many images `status.images` lists; `None` lists all.
    pub max_images: Option<u32>,
}

impl NodeSettings {
    /// The heartbeat client's request timeout in the kubelet: the status update period, at
    /// most the lease duration.
    pub fn request_timeout(&self) -> Duration {
        self.update_frequency
            .min(Duration::from_secs(u64::from(self.lease_duration_seconds)))
            .max(Duration::from_secs(1))
    }
}

/// Registration, the node status loop and the Lease heartbeat of one node.
pub struct NodeAgent {
    settings: NodeSettings,
    facts: Arc<NodeFacts>,
    health: HealthFn,
    pressure: PressureFn,
    clock: Clock,
    counters: Arc<NodeCounters>,
    images: Option<Arc<dyn ImageService>>,
    events: Option<EventRecorder>,
    taints: Option<updater::NodeTaints>,
    server: ApiServerVersion,
    shutdown: ShutdownView,
    runtime_features: RuntimeFeaturesView,
    volumes_in_use: Option<VolumesInUseFn>,
    reported_in_use: Option<ReportedInUseFn>,
}

/// The volume manager's `GetVolumesInUse` for the node status: `None` until it has synced.
pub type VolumesInUseFn = Arc<dyn Fn() -> Option<Vec<String>> + Send + Sync>;

/// Told what the API server's Node says of `status.volumesInUse`, each time nodelet reads or
/// writes it (the kubelet's `MarkVolumesAsReportedInUse`): an attachable volume is mounted
/// only once it is there, so the attach/detach controller cannot detach it mid-mount.
pub type ReportedInUseFn = Arc<dyn Fn(&[String]) + Send + Sync>;

impl NodeAgent {
    pub fn new(
        settings: NodeSettings,
        facts: NodeFacts,
        health: HealthFn,
        pressure: PressureFn,
        clock: Clock,
    ) -> NodeAgent {
        NodeAgent {
            settings,
            facts: Arc::new(facts),
            health,
            pressure,
            clock,
            counters: Arc::new(NodeCounters::default()),
            images: None,
            events: None,
            taints: None,
            server: ApiServerVersion::new(),
            shutdown: ShutdownView::none(),
            runtime_features: RuntimeFeaturesView::default(),
            volumes_in_use: None,
            reported_in_use: None,
        }
    }

    /// Reports `status.volumesInUse` from the volume manager.
    pub fn with_reported_in_use(mut self, reported: ReportedInUseFn) -> Self {
        self.reported_in_use = Some(reported);
        self
    }

    pub fn with_volumes_in_use(mut self, volumes_in_use: VolumesInUseFn) -> Self {
        self.volumes_in_use = Some(volumes_in_use);
        self
    }

    /// Reports `Ready=False` while the node shuts down, and updates the status at once when
    /// that starts or stops (the kubelet's `syncNodeStatus` from the shutdown manager).
    pub fn with_shutdown(mut self, shutdown: ShutdownView) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// Reports the runtime's handlers and features as `view` holds them
    /// (`status.runtimeHandlers`, `status.features`): the same view admission decides with.
    pub fn with_runtime_features(mut self, view: RuntimeFeaturesView) -> Self {
        self.runtime_features = view;
        self
    }

    /// Shares the API server's version with the pod status sync (one `/version` read).
    pub fn with_server_version(mut self, server: ApiServerVersion) -> Self {
        self.server = server;
        self
    }

    /// Lists the runtime's images in the node status (the kubelet's `Images` setter).
    pub fn with_images(mut self, images: Arc<dyn ImageService>) -> Self {
        self.images = Some(images);
        self
    }

    /// Records the node's events (`NodeReady`, `NodeHasSufficientMemory`, ...).
    pub fn with_events(mut self, events: EventRecorder) -> Self {
        self.events = Some(events);
        self
    }

    /// Publishes the node's taints as the watch of the Node (and the status loop's GETs) read
    /// them (for admission).
    pub fn with_taints(mut self, taints: updater::NodeTaints) -> Self {
        self.taints = Some(taints);
        self
    }

    pub fn counters(&self) -> Arc<NodeCounters> {
        self.counters.clone()
    }

    /// The status nodelet would report now, on top of `previous` (the API server's).
    pub fn status_fn(&self) -> updater::StatusFn {
        let settings = self.settings.clone();
        let facts = self.facts.clone();
        let health = self.health.clone();
        let pressure = self.pressure.clone();
        let shutdown = self.shutdown.clone();
        let runtime_features = self.runtime_features.clone();
        let volumes_in_use = self.volumes_in_use.clone();
        let clock = self.clock;
        let kubelet_version = status::kubelet_version();
        Arc::new(
            move |previous: Option<&NodeStatus>, images: Option<&[ContainerImage]>| {
                let runtime = runtime_features.get();
                let volumes = volumes_in_use.as_ref().and_then(|f| f());
                let inputs = NodeStatusInputs {
                    hostname: &settings.node_name,
                    internal_ip: facts.internal_ip,
                    cloud: settings.cloud,
                    machine: &facts.machine,
                    max_pods: crate::config::max_pods(
                        settings.max_pods,
                        settings.pods_per_core,
                        facts.machine.num_cores,
                    ),
                    reserved: settings.reserved,
                    container_runtime_version: &facts.container_runtime_version,
                    kubelet_version: &kubelet_version,
                    kubelet_port: settings.kubelet_port,
                    pressure: pressure(),
                    health: health(),
                    shutting_down: shutdown.is_shutting_down(),
                    images,
                    runtime_handlers: &status::node_runtime_handlers(runtime.handlers()),
                    runtime_features: runtime.features(),
                    volumes_in_use: volumes.as_deref(),
                };
                build_node_status(previous, &inputs, clock.now())
            },
        )
    }

    /// The Node nodelet registers, with a status computed now (without the fields the API
    /// server's release, as last read, does not store).
    pub fn initial_node(&self) -> Node {
        let registration = register::Registration {
            node_name: &self.settings.node_name,
            hostname: &self.settings.node_name,
            node_labels: &self.settings.node_labels,
            taints: &self.settings.register_with_taints,
            provider_id: &self.settings.provider_id,
            cloud: self.settings.cloud,
        };
        // Images follow with the first status update, right after registration.
        let status = crate::cluster::api_fields::strip_node_status(
            (self.status_fn())(None, None),
            self.server.current(),
        );
        register::initial_node(&registration, status)
    }

    /// Runs until cancelled: the Lease heartbeat from the start, and the status loop after
    /// registration (skipped with `registerNode: false`, when someone else creates the Node).
    /// API server outages are logged and retried; nothing here gives up.
    pub async fn run(self, client: kube::Client, cancel: CancellationToken) {
        let timeout = self.settings.request_timeout();
        let lease = lease::LeaseController::new(
            client.clone(),
            &self.settings.node_name,
            self.settings.lease_duration_seconds,
            timeout,
            self.clock,
            self.counters.clone(),
        );
        let status_loop = self.run_status_loop(client, timeout, cancel.clone());
        tokio::join!(lease.run(cancel.clone()), status_loop);
    }

    async fn run_status_loop(
        &self,
        client: kube::Client,
        timeout: Duration,
        cancel: CancellationToken,
    ) {
        let nodes: Api<Node> = Api::all(client.clone());
        // The Node is created with what the server's release stores.
        tokio::select! {
            _ = self.server.refresh_if_stale(&client, timeout) => {}
            _ = cancel.cancelled() => return,
        }
        if self.settings.register_node
            && register::register(&nodes, || self.initial_node(), timeout, &cancel)
                .await
                .is_none()
        {
            return;
        }
        // The node's own Node, watched from registration on (the kubelet's node informer).
        let watched = watch::NodeCache::default();
        let watching = watch::watch_node(
            client.clone(),
            self.settings.node_name.clone(),
            watched.clone(),
            self.taints.clone(),
            cancel.clone(),
        );
        let updater = updater::NodeStatusUpdater::new(
            client,
            &self.settings.node_name,
            self.settings.update_frequency,
            self.settings.report_frequency,
            timeout,
            self.status_fn(),
            self.counters.clone(),
        )
        .with_server_version(self.server.clone())
        .with_images(self.images.clone().map(|service| updater::ImageSource {
            service,
            max_images: self.settings.max_images,
        }))
        .with_events(self.events.clone())
        .with_taints(self.taints.clone())
        .with_node_watch(Some(watched))
        .with_reported_in_use(self.reported_in_use.clone());
        let rounds = self.status_rounds(updater, cancel);
        tokio::pin!(watching, rounds);
        // The watch first: what it has received is in its copy before a round reads it.
        tokio::select! {
            biased;
            _ = &mut watching => rounds.await,
            _ = &mut rounds => {}
        }
    }

    /// The status loop's rounds: one [`updater::NodeStatusUpdater::update`] every
    /// `nodeStatusUpdateFrequency`, and at once when node shutdown starts or stops.
    async fn status_rounds(
        &self,
        mut updater: updater::NodeStatusUpdater,
        cancel: CancellationToken,
    ) {
        let mut shutdown = self.shutdown.clone();
        loop {
            tokio::select! {
                result = updater.update() => {
                    if let Err(error) = result {
                        tracing::error!(%error, "unable to update node status");
                    }
                }
                _ = cancel.cancelled() => return,
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.update_frequency) => {}
                _ = shutdown.changed() => {}
                _ = cancel.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_status_reports_the_capacity_pods_are_admitted_against() {
        let info = NodeInfo {
            name: "n1".into(),
            host_ips: vec!["10.1.2.3".into()],
            machine: MachineInfo {
                num_cores: 3,
                memory_capacity: 5 << 30,
                ..Default::default()
            },
        };
        let facts = NodeFacts::detect(None, &info, &Default::default());
        assert_eq!(facts.machine, info.machine);
        assert_eq!(
            facts.internal_ip,
            Some("10.1.2.3".parse().unwrap()),
            "detected"
        );
        let given = NodeFacts::detect(
            Some("10.9.9.9".parse().unwrap()),
            &info,
            &Default::default(),
        );
        assert_eq!(
            given.internal_ip,
            Some("10.9.9.9".parse().unwrap()),
            "nodeIP wins"
        );
        assert_eq!(info.cpu_capacity_milli(), 3000);
        assert_eq!(info.memory_capacity(), 5 << 30);
    }
}
