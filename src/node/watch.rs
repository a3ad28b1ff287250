//! The node's own Node object, watched (the kubelet's node informer: a list and watch of
//! `metadata.name=<node>`). The status loop takes the first try of each period from it instead
//! of a GET, as the kubelet's `tryUpdateNodeStatus` does, so an idle node makes no request but
//! its Lease; admission gets the node's taints as soon as they change, not at the next status
//! period.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use super::updater::NodeTaints;
use crate::backoff::watch::backoff_watch;

/// The watched Node, as last seen.
#[derive(Clone)]
pub struct NodeCache {
    store: Store<Node>,
    name: String,
}

impl NodeCache {
    /// The Node as the watch last saw it; `None` before the first list or once it is gone.
    pub fn get(&self) -> Option<Arc<Node>> {
        self.store.get(&ObjectRef::new(&self.name))
    }
}

/// Starts watching the Node `name`; the watch retries with backoff while the API server is
/// away and ends with `cancel`. Each change of the Node's taints goes to `taints`.
pub fn watch_node(
    client: Client,
    name: &str,
    taints: Option<NodeTaints>,
    cancel: CancellationToken,
) -> NodeCache {
    let (store, writer) = reflector::store();
    let api: Api<Node> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = backoff_watch(watcher(api, config))
        .reflect(writer)
        .applied_objects()
        .boxed();
    let node_name = name.to_string();
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                _ = cancel.cancelled() => return,
                next = events.next() => next,
            };
            match next {
                None => return,
                Some(Ok(node)) => {
                    if let Some(taints) = &taints {
                        publish_taints(taints, node_taints(&node));
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(node = %node_name, error = %e, "node watch failed; retrying")
                }
            }
        }
    });
    NodeCache {
        store,
        name: name.to_string(),
    }
}

/// The taints of `node` (none when it has no spec).
pub fn node_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

/// Sends `read` when it differs from what admission has.
pub fn publish_taints(taints: &NodeTaints, read: Vec<Taint>) {
    taints.send_if_modified(|t| {
        let changed = *t != read;
        if changed {
            *t = read;
        }
        changed
    });
}
