//! The plugin wing: the plugin watcher that registers CSI drivers from
//! `<rootDir>/plugins_registry` into the node's [`CsiDrivers`] store and, in cluster mode,
//! records them on the `CSINode` and the Node (created and initialized at start, as the
//! kubelet's `initializeCSINode`). Standalone, the store is kept in memory and nothing is
//! written.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::wire_cluster::ClusterWing;
use super::StartError;
use crate::config::Config;
use crate::csi::CsiDrivers;
use crate::plugins::manager::{ensure_dir, PluginManager, PLUGINS_REGISTRY};
use crate::plugins::nodeinfo::{ApiNodeInfo, NoNodeInfo, NodeInfoWriter};

/// Deadline of each API request about the node's CSI record.
const NODE_INFO_TIMEOUT: Duration = Duration::from_secs(10);

/// Creates `<rootDir>/plugins_registry` (0750) and starts the plugin watcher filling `store`.
pub(super) fn spawn(
    cfg: &Config,
    cluster: &ClusterWing,
    store: &CsiDrivers,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) -> Result<(), StartError> {
    let dir = cfg.root_dir.join(PLUGINS_REGISTRY);
    ensure_dir(&dir).map_err(|error| StartError::CreateDir {
        field: "rootDir",
        path: dir.clone(),
        error,
    })?;
    let node_info: Arc<dyn NodeInfoWriter> = match cluster.client() {
        Some(client) => {
            let api = ApiNodeInfo::new(client.clone(), &cfg.node_name, NODE_INFO_TIMEOUT);
            let init = api.clone();
            let cancel = cancel.clone();
            tasks.spawn(async move { init.initialize(&cancel).await });
            Arc::new(api)
        }
        None => Arc::new(NoNodeInfo),
    };
    let manager = PluginManager::new(dir, store.clone(), node_info);
    tasks.spawn(manager.run(cancel.clone()));
    Ok(())
}
