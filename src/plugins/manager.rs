//! [`PluginManager`]: the loop that registers and deregisters the CSI drivers whose
//! registration sockets appear in and leave `plugins_registry` (the kubelet's plugin watcher,
//! reconciler and operation executor in one task).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use notify::event::{MetadataKind, ModifyKind};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::nodeinfo::{DriverNodeInfo, NodeInfoWriter};
use super::sockets::{self, Failed, SocketId};
use super::validate::{self, Accepted};
use super::PluginsError;
use crate::csi::registration_api::{
    registration_client::RegistrationClient, InfoRequest, PluginInfo, RegistrationStatus,
};
use crate::csi::remote::RemoteCsiNode;
use crate::csi::{CsiDrivers, CsiError, CsiNode, NodeCapabilities, RegisteredDriver};

/// The directory under the root directory where plugins put their registration sockets.
pub const PLUGINS_REGISTRY: &str = "plugins_registry";
/// How often the directory is read again, events or not.
pub const RESCAN_PERIOD: Duration = Duration::from_secs(5);
/// The kubelet's timeouts: dialing a registration socket, `GetInfo`, `NotifyRegistrationStatus`.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
pub const GET_INFO_TIMEOUT: Duration = Duration::from_secs(1);
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// The kubelet's retry of a failed registration (`goroutinemap`'s exponential backoff): 500 ms,
/// doubling, at most 2 min 2 s.
pub fn retry_delay(attempts: u32) -> Duration {
    crate::backoff::exponential(
        Duration::from_millis(500),
        attempts.saturating_sub(1),
        Duration::from_secs(122),
    )
}

/// One registration socket, connected.
#[async_trait]
pub trait PluginRegistration: Send + Sync {
    async fn get_info(&self) -> Result<PluginInfo, PluginsError>;
    async fn notify(&self, registered: bool, error: String) -> Result<(), PluginsError>;
}

/// Connects to registration sockets.
#[async_trait]
pub trait RegistrationConnector: Send + Sync {
    async fn connect(&self, socket: &Path) -> Result<Box<dyn PluginRegistration>, PluginsError>;
}

/// Makes the client of a driver's Node service from its name and endpoint.
pub trait DriverConnector: Send + Sync {
    fn connect(&self, name: &str, endpoint: &str) -> Result<Arc<dyn CsiNode>, CsiError>;
}

/// The registration API over the socket (gRPC).
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcRegistration;

struct GrpcPlugin {
    socket: PathBuf,
    client: RegistrationClient<tonic::transport::Channel>,
}

fn registration_error(socket: &Path, what: &str, status: tonic::Status) -> PluginsError {
    PluginsError::Registration {
        context: format!("{what} at socket {}", socket.display()),
        message: format!(
            "rpc error: code = {:?} desc = {}",
            status.code(),
            status.message()
        ),
    }
}

#[async_trait]
impl RegistrationConnector for GrpcRegistration {
    async fn connect(&self, socket: &Path) -> Result<Box<dyn PluginRegistration>, PluginsError> {
        let channel = crate::unix_grpc::connect_unix(socket, DIAL_TIMEOUT)
            .await
            .map_err(|e| PluginsError::Registration {
                context: format!("dial failed at socket {}", socket.display()),
                message: e.to_string(),
            })?;
        Ok(Box::new(GrpcPlugin {
            socket: socket.to_path_buf(),
            client: RegistrationClient::new(channel).max_decoding_message_size(64 * 1024),
        }))
    }
}

#[async_trait]
impl PluginRegistration for GrpcPlugin {
    async fn get_info(&self) -> Result<PluginInfo, PluginsError> {
        let mut request = tonic::Request::new(InfoRequest {});
        request.set_timeout(GET_INFO_TIMEOUT);
        let mut client = self.client.clone();
        match tokio::time::timeout(GET_INFO_TIMEOUT, client.get_info(request)).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(status)) => Err(registration_error(
                &self.socket,
                "failed to get plugin info using RPC GetInfo",
                status,
            )),
            Err(_) => Err(registration_error(
                &self.socket,
                "failed to get plugin info using RPC GetInfo",
                tonic::Status::deadline_exceeded("context deadline exceeded"),
            )),
        }
    }

    async fn notify(&self, registered: bool, error: String) -> Result<(), PluginsError> {
        let mut request = tonic::Request::new(RegistrationStatus {
            plugin_registered: registered,
            error,
        });
        request.set_timeout(NOTIFY_TIMEOUT);
        let mut client = self.client.clone();
        match tokio::time::timeout(NOTIFY_TIMEOUT, client.notify_registration_status(request)).await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(status)) => Err(registration_error(
                &self.socket,
                "failed to send registration status",
                status,
            )),
            Err(_) => Err(registration_error(
                &self.socket,
                "failed to send registration status",
                tonic::Status::deadline_exceeded("context deadline exceeded"),
            )),
        }
    }
}

/// Drivers' Node services over their sockets.
#[derive(Debug, Clone, Copy, Default)]
pub struct RemoteDrivers;

impl DriverConnector for RemoteDrivers {
    fn connect(&self, name: &str, endpoint: &str) -> Result<Arc<dyn CsiNode>, CsiError> {
        let path = crate::unix_grpc::socket_path(endpoint).map_err(|e| CsiError::Endpoint {
            endpoint: endpoint.to_string(),
            reason: e.to_string(),
        })?;
        // Two stats of a local path: bounded, once per registration.
        endpoint_facts(&path)
            .and_then(|(socket, dir)| {
                // SAFETY: geteuid has no preconditions and cannot fail.
                let own_uid = unsafe { libc::geteuid() };
                validate::endpoint_trusted(socket, dir, own_uid)
            })
            .map_err(|reason| CsiError::Endpoint {
                endpoint: endpoint.to_string(),
                reason,
            })?;
        Ok(Arc::new(RemoteCsiNode::connect(name, endpoint)?))
    }
}

/// The facts of a driver's endpoint socket (not following a symlink) and of its directory.
fn endpoint_facts(socket: &Path) -> Result<(validate::FileFacts, validate::FileFacts), String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    use validate::{FileFacts, FileKind};
    let facts = |meta: &std::fs::Metadata| {
        let ft = meta.file_type();
        let kind = if ft.is_socket() {
            FileKind::Socket
        } else if ft.is_symlink() {
            FileKind::Symlink
        } else if ft.is_dir() {
            FileKind::Directory
        } else {
            FileKind::Other
        };
        FileFacts {
            kind,
            uid: meta.uid(),
            mode: meta.mode() & 0o7777,
        }
    };
    let socket_meta = std::fs::symlink_metadata(socket)
        .map_err(|e| format!("reading {}: {e}", socket.display()))?;
    let dir = socket.parent().unwrap_or(Path::new("/"));
    let dir_meta = std::fs::metadata(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    Ok((facts(&socket_meta), facts(&dir_meta)))
}

/// Creates `dir` (and its parents) and makes it `0750`, as nodelet's other directories under
/// the root directory.
pub fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750))
}

/// A socket's registration.
#[derive(Debug, Clone)]
struct Registration {
    id: SocketId,
    accepted: Accepted,
    info: DriverNodeInfo,
    /// A driver of the same name registered later from another socket with a higher version
    /// replaced this one: its socket's going changes nothing.
    superseded: bool,
}

/// The plugin watcher and registration loop of one node.
pub struct PluginManager {
    dir: PathBuf,
    registration: Arc<dyn RegistrationConnector>,
    drivers: Arc<dyn DriverConnector>,
    node_info: Arc<dyn NodeInfoWriter>,
    store: CsiDrivers,
    rescan: Duration,
    registered: BTreeMap<PathBuf, Registration>,
    failed: BTreeMap<PathBuf, Failed>,
    /// Drivers deregistered whose record on the node could not be removed yet.
    pending_uninstall: Vec<DriverNodeInfo>,
}

impl PluginManager {
    /// Watches `dir` (`<rootDir>/plugins_registry`), filling `store` and recording through
    /// `node_info`.
    pub fn new(dir: PathBuf, store: CsiDrivers, node_info: Arc<dyn NodeInfoWriter>) -> Self {
        PluginManager {
            dir,
            registration: Arc::new(GrpcRegistration),
            drivers: Arc::new(RemoteDrivers),
            node_info,
            store,
            rescan: RESCAN_PERIOD,
            registered: BTreeMap::new(),
            failed: BTreeMap::new(),
            pending_uninstall: Vec::new(),
        }
    }

    /// Reaches registration sockets through `connector` instead of gRPC.
    pub fn with_registration(mut self, connector: Arc<dyn RegistrationConnector>) -> Self {
        self.registration = connector;
        self
    }

    /// Reaches drivers through `connector` instead of their sockets.
    pub fn with_drivers(mut self, connector: Arc<dyn DriverConnector>) -> Self {
        self.drivers = connector;
        self
    }

    /// Reads the directory every `period` (default [`RESCAN_PERIOD`]).
    pub fn with_rescan(mut self, period: Duration) -> Self {
        self.rescan = period;
        self
    }

    /// Runs until cancelled. Drivers stay registered when nodelet stops, as with the kubelet:
    /// the next start registers the sockets it finds.
    pub async fn run(mut self, cancel: CancellationToken) {
        let (tx, mut rx) = mpsc::channel::<()>(1);
        let _watcher = match watch(&self.dir, tx) {
            Ok(w) => Some(w),
            Err(error) => {
                tracing::warn!(dir = %self.dir.display(), %error, "cannot watch the plugin registry; reading it every {:?}", self.rescan);
                None
            }
        };
        tracing::info!(dir = %self.dir.display(), "plugin watcher started");
        loop {
            self.pass().await;
            let mut wake = Instant::now() + self.rescan;
            if let Some(at) = sockets::next_retry(&self.failed) {
                wake = wake.min(Instant::from_std(at));
            }
            tokio::select! {
                event = rx.recv() => {
                    if event.is_none() {
                        // The watcher is gone; the rescan carries on.
                        tokio::select! {
                            _ = tokio::time::sleep_until(wake) => {}
                            _ = cancel.cancelled() => return,
                        }
                    }
                }
                _ = tokio::time::sleep_until(wake) => {}
                _ = cancel.cancelled() => return,
            }
        }
    }

    /// One reconciliation: read the directory, deregister what went, register what came.
    pub async fn pass(&mut self) {
        // A directory walk (bounded in depth, not in entries): off the async threads.
        let dir = self.dir.clone();
        let seen = match tokio::task::spawn_blocking(move || sockets::scan(&dir)).await {
            Ok(seen) => seen,
            Err(error) => {
                tracing::warn!(dir = %self.dir.display(), %error, "reading the plugin registry");
                return;
            }
        };
        let registered: BTreeMap<PathBuf, SocketId> = self
            .registered
            .iter()
            .map(|(p, r)| (p.clone(), r.id))
            .collect();
        let now = Instant::now().into_std();
        let plan = sockets::plan(&registered, &self.failed, &seen, now);
        for path in &plan.forget {
            self.failed.remove(path);
        }
        for path in &plan.deregister {
            self.deregister(path).await;
        }
        self.retry_uninstalls().await;
        for path in &plan.register {
            let Some(id) = seen.get(path).copied() else {
                continue;
            };
            match self.register(path, id).await {
                Ok(()) => {
                    self.failed.remove(path);
                }
                Err(message) => {
                    let attempts = self
                        .failed
                        .get(path)
                        .filter(|f| f.id == id)
                        .map_or(1, |f| f.attempts + 1);
                    let delay = retry_delay(attempts);
                    tracing::warn!(socket = %path.display(), error = %message, retry_in = ?delay, "plugin registration failed");
                    self.failed.insert(
                        path.clone(),
                        Failed {
                            id,
                            attempts,
                            retry_at: now + delay,
                        },
                    );
                }
            }
        }
    }

    /// Registers the plugin at `socket`; `Err` is what went wrong (also told to the plugin
    /// when it can be).
    async fn register(&mut self, socket: &Path, id: SocketId) -> Result<(), String> {
        let plugin = self
            .registration
            .connect(socket)
            .await
            .map_err(|e| format!("RegisterPlugin error -- {e}"))?;
        let info = plugin
            .get_info()
            .await
            .map_err(|e| format!("RegisterPlugin error -- {e}"))?;
        let other = self
            .registered
            .iter()
            .find(|(p, r)| p.as_path() != socket && !r.superseded && r.accepted.name == info.name)
            .map(|(p, r)| (p.clone(), r.accepted.highest_version.clone()));
        let accepted = match validate::validate(
            &info.r#type,
            &info.name,
            &info.endpoint,
            &info.supported_versions,
            socket,
            other.as_ref().map(|(_, v)| v),
        ) {
            Ok(a) => a,
            Err(message) => {
                tell(plugin.as_ref(), false, message.clone()).await;
                return Err(message);
            }
        };
        tracing::info!(name = %accepted.name, endpoint = %accepted.endpoint, versions = %info.supported_versions.join(","), socket = %socket.display(), "registering CSI driver");
        let (driver, node_info) = match self.install(&accepted, &info.supported_versions).await {
            Ok(done) => done,
            Err(e) => {
                let message =
                    format!("RegisterPlugin error -- plugin registration failed with err: {e}");
                tell(plugin.as_ref(), false, message.clone()).await;
                return Err(message);
            }
        };
        if let Some((old, _)) = &other {
            if let Some(r) = self.registered.get_mut(old) {
                tracing::info!(name = %accepted.name, old = %old.display(), new = %socket.display(), "a driver of a higher version replaces the one registered from another socket");
                r.superseded = true;
            }
        }
        self.pending_uninstall.retain(|d| d.name != accepted.name);
        self.store.insert(driver);
        self.registered.insert(
            socket.to_path_buf(),
            Registration {
                id,
                accepted,
                info: node_info,
                superseded: false,
            },
        );
        // Told after the registration, as the kubelet: a plugin that does not hear it is
        // registered all the same.
        if let Err(error) = plugin.notify(true, String::new()).await {
            tracing::warn!(socket = %socket.display(), %error, "RegisterPlugin error -- failed to send registration status");
        }
        Ok(())
    }

    /// The driver's node information and capabilities, recorded on the node.
    async fn install(
        &self,
        accepted: &Accepted,
        versions: &[String],
    ) -> Result<(RegisteredDriver, DriverNodeInfo), PluginsError> {
        let client = self.drivers.connect(&accepted.name, &accepted.endpoint)?;
        let info = client.node_get_info().await?;
        let capabilities = client.node_get_capabilities().await?;
        let topology: BTreeMap<String, String> = info
            .accessible_topology
            .map(|t| t.segments.into_iter().collect())
            .unwrap_or_default();
        let node_info = DriverNodeInfo {
            name: accepted.name.clone(),
            node_id: info.node_id.clone(),
            max_volumes_per_node: info.max_volumes_per_node,
            topology: topology.clone(),
        };
        if node_info.node_id.is_empty() {
            return Err(PluginsError::Refused(
                "error adding CSI driver node info: driverNodeID must not be empty".into(),
            ));
        }
        self.node_info.install(&node_info).await?;
        Ok((
            RegisteredDriver {
                name: accepted.name.clone(),
                endpoint: accepted.endpoint.clone(),
                versions: versions.to_vec(),
                node_id: info.node_id,
                max_volumes_per_node: info.max_volumes_per_node,
                topology,
                capabilities: NodeCapabilities::from_response(&capabilities),
                client,
            },
            node_info,
        ))
    }

    /// The topology keys the drivers still registered report.
    fn kept_topology_keys(&self) -> BTreeSet<String> {
        self.registered
            .values()
            .filter(|r| !r.superseded)
            .flat_map(|r| r.info.topology.keys().cloned())
            .collect()
    }

    async fn deregister(&mut self, socket: &Path) {
        let Some(r) = self.registered.remove(socket) else {
            return;
        };
        if r.superseded {
            tracing::info!(name = %r.accepted.name, socket = %socket.display(), "a replaced driver's socket went");
            return;
        }
        tracing::info!(name = %r.accepted.name, socket = %socket.display(), "deregistering CSI driver");
        self.store.remove(&r.accepted.name);
        let kept = self.kept_topology_keys();
        if let Err(error) = self.node_info.uninstall(&r.info, &kept).await {
            tracing::warn!(name = %r.accepted.name, %error, "removing the driver from the node failed; retrying");
            self.pending_uninstall.push(r.info);
        }
    }

    async fn retry_uninstalls(&mut self) {
        if self.pending_uninstall.is_empty() {
            return;
        }
        let kept = self.kept_topology_keys();
        let mut still = Vec::new();
        for info in std::mem::take(&mut self.pending_uninstall) {
            if let Err(error) = self.node_info.uninstall(&info, &kept).await {
                tracing::warn!(name = %info.name, %error, "removing the driver from the node failed; retrying");
                still.push(info);
            }
        }
        self.pending_uninstall = still;
    }
}

/// `NotifyRegistrationStatus`, logged when the plugin does not hear it.
async fn tell(plugin: &dyn PluginRegistration, registered: bool, message: String) {
    if let Err(error) = plugin.notify(registered, message).await {
        tracing::warn!(%error, "RegisterPlugin error -- failed to send error");
    }
}

/// Whether a watcher event can change the set of registration sockets: an entry created,
/// removed or renamed, an entry's attributes changed (a socket's mode), or events lost (an
/// error, a queue overflow). Opening, reading and closing the directory cannot — and every
/// rescan does exactly that, so waking on those would make each rescan start the next one (the
/// kubelet's plugin watcher reacts to create and remove only). Writes into a regular file do
/// not make or unmake a socket either.
pub fn wakes_rescan(event: &notify::Result<Event>) -> bool {
    let event = match event {
        Ok(event) => event,
        Err(_) => return true,
    };
    if event.need_rescan() {
        return true;
    }
    match event.kind {
        EventKind::Create(_) | EventKind::Remove(_) => true,
        EventKind::Modify(ModifyKind::Name(_)) => true,
        EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)) => false,
        EventKind::Modify(ModifyKind::Metadata(_)) => true,
        EventKind::Modify(_) | EventKind::Access(_) | EventKind::Any | EventKind::Other => false,
    }
}

fn watch(dir: &Path, wake: mpsc::Sender<()>) -> notify::Result<RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
        if wakes_rescan(&event) {
            // Full means a pass is already due: that is the coalescing.
            let _ = wake.try_send(());
        }
    })?;
    watcher.watch(dir, RecursiveMode::Recursive)?;
    Ok(watcher)
}

#[cfg(test)]
mod tests;
