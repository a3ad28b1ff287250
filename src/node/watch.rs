//! The node's own Node object, watched (the kubelet's node informer: a list and watch of
//! `metadata.name=<node>`, with the node's own credentials). The status loop takes the first
//! try of each period from it instead of a GET, as the kubelet's `tryUpdateNodeStatus` does,
//! so an idle node makes no request but its Lease; admission gets the node's taints as soon as
//! they change, not at the next status period.
//!
//! A watched copy is only as good as the watch is current. Nodelet writes the Node itself (the
//! status PATCH), and the watch delivers that write a moment after the PATCH's answer; a copy
//! read before that moment is older than what nodelet already knows. So the watch remembers
//! the resourceVersions it delivered ([`SEEN_KEPT`] of them): its copy is used only once it has
//! delivered the last resourceVersion nodelet knew — from then on, watch events being ordered,
//! its latest copy is at least as new ([`super::updater::node_read`]). While the watch fails
//! or lists again, the status loop reads the API server as before.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use super::updater::{NodeTaints, WatchedNode};
use crate::backoff::watch::backoff_watch;

/// How many of the resourceVersions the watch delivered are remembered: more writes than this
/// by others between two of nodelet's reads only cost a GET.
pub const SEEN_KEPT: usize = 16;

/// What the watch has delivered: the pure state behind [`NodeCache`].
#[derive(Debug, Default, Clone)]
pub struct Watched {
    /// The Node as last delivered; `None` before the first list or once it is gone.
    node: Option<Arc<Node>>,
    /// Whether the watch is current: listed, and not failed since its last answer.
    live: bool,
    /// The Node listed during a list under way (the watcher's `InitApply`), kept until its end.
    listing: Option<Arc<Node>>,
    /// The last resourceVersions delivered, newest last.
    seen: VecDeque<String>,
}

impl Watched {
    /// Takes in one event of the watch; returns the Node when it is a new copy (for its taints).
    pub fn apply(&mut self, event: watcher::Event<Node>) -> Option<Arc<Node>> {
        match event {
            watcher::Event::Init => {
                // Listing again: until the list ends, the copy may be behind.
                self.live = false;
                self.listing = None;
                None
            }
            watcher::Event::InitApply(node) => {
                self.listing = Some(Arc::new(node));
                None
            }
            watcher::Event::InitDone => {
                self.live = true;
                self.node = self.listing.take();
                let node = self.node.clone()?;
                self.note_seen(&node);
                Some(node)
            }
            watcher::Event::Apply(node) => {
                self.live = true;
                let node = Arc::new(node);
                self.note_seen(&node);
                self.node = Some(node.clone());
                Some(node)
            }
            watcher::Event::Delete(_) => {
                self.live = true;
                self.node = None;
                None
            }
        }
    }

    /// The watch failed: its copy may fall behind until it answers again.
    pub fn failed(&mut self) {
        self.live = false;
    }

    fn note_seen(&mut self, node: &Node) {
        let Some(rv) = node.metadata.resource_version.as_ref() else {
            return;
        };
        if self.seen.back() == Some(rv) {
            return;
        }
        if self.seen.len() == SEEN_KEPT {
            self.seen.pop_front();
        }
        self.seen.push_back(rv.clone());
    }

    /// The watched copy, measured against `last_known` (the resourceVersion nodelet last read
    /// or wrote; `None`: nothing yet).
    pub fn read(&self, last_known: Option<&str>) -> (Option<Arc<Node>>, WatchedNode) {
        let view = WatchedNode {
            has_copy: self
                .node
                .as_ref()
                .and_then(|n| n.metadata.resource_version.as_deref())
                .is_some_and(|rv| !rv.is_empty()),
            live: self.live,
            caught_up: last_known.is_none_or(|rv| self.seen.iter().any(|s| s == rv)),
        };
        (self.node.clone(), view)
    }
}

/// The watched Node, shared between the watch and the status loop.
#[derive(Clone, Default)]
pub struct NodeCache {
    state: Arc<Mutex<Watched>>,
}

impl NodeCache {
    /// See [`Watched::read`].
    pub fn read(&self, last_known: Option<&str>) -> (Option<Arc<Node>>, WatchedNode) {
        self.lock().read(last_known)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watched> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Watches the Node `name` into `cache` until cancelled: a list and watch with
/// `fieldSelector=metadata.name=<name>` (what the node authorizer lets a node read of its own
/// Node); a watch that ends is resumed by kube's watcher, a failed one retried with the
/// reflector's backoff ([`backoff_watch`]). Each change of the Node's taints goes to `taints`.
pub async fn watch_node(
    client: Client,
    name: String,
    cache: NodeCache,
    taints: Option<NodeTaints>,
    cancel: CancellationToken,
) {
    let api: Api<Node> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = backoff_watch(watcher(api, config)).boxed();
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => return,
            next = events.next() => next,
        };
        match next {
            None => return,
            Some(Ok(event)) => {
                let node = cache.lock().apply(event);
                if let (Some(taints), Some(node)) = (&taints, node) {
                    publish_taints(taints, node_taints(&node));
                }
            }
            Some(Err(error)) => {
                cache.lock().failed();
                tracing::debug!(node = %name, %error, "node watch failed; retrying");
            }
        }
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

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use watcher::Event;

    use super::*;

    fn node(rv: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn rv(copy: &Option<Arc<Node>>) -> Option<&str> {
        copy.as_ref()?.metadata.resource_version.as_deref()
    }

    #[test]
    fn a_copy_counts_once_the_watch_delivered_the_last_known_version() {
        let mut w = Watched::default();
        let (copy, view) = w.read(None);
        assert!(
            copy.is_none() && !view.has_copy && !view.live,
            "nothing yet"
        );

        w.apply(Event::Init);
        w.apply(Event::InitApply(node("5")));
        let (_, view) = w.read(None);
        assert!(!view.live && !view.has_copy, "the list is not complete");
        w.apply(Event::InitDone);
        let (copy, view) = w.read(Some("5"));
        assert_eq!(rv(&copy), Some("5"));
        assert!(view.has_copy && view.live && view.caught_up);

        // nodelet PATCHed (answer 7) before the watch delivered it: behind.
        let (_, view) = w.read(Some("7"));
        assert!(!view.caught_up, "our write not delivered yet");
        // Someone else wrote 6, then the watch delivers our 7, then a foreign 9.
        w.apply(Event::Apply(node("6")));
        assert!(!w.read(Some("7")).1.caught_up);
        w.apply(Event::Apply(node("7")));
        w.apply(Event::Apply(node("9")));
        let (copy, view) = w.read(Some("7"));
        assert!(view.caught_up, "7 delivered: the latest copy is newer");
        assert_eq!(rv(&copy), Some("9"));

        // A failure: not live until the watch answers again.
        w.failed();
        assert!(!w.read(Some("9")).1.live);
        w.apply(Event::Apply(node("10")));
        assert!(w.read(Some("9")).1.live);

        // Listing again: not live until the list ends; the copy is then the listed one.
        w.apply(Event::Init);
        assert!(!w.read(Some("10")).1.live);
        w.apply(Event::InitApply(node("12")));
        w.apply(Event::InitDone);
        let (copy, view) = w.read(Some("10"));
        assert_eq!(rv(&copy), Some("12"));
        assert!(view.live && view.caught_up);

        // The Node deleted: no copy.
        w.apply(Event::Delete(node("12")));
        assert!(!w.read(Some("12")).1.has_copy);
    }

    #[test]
    fn only_the_last_versions_are_remembered() {
        let mut w = Watched::default();
        w.apply(Event::InitDone);
        assert!(!w.read(None).1.has_copy, "listed, but no Node");
        for i in 0..=SEEN_KEPT {
            w.apply(Event::Apply(node(&i.to_string())));
        }
        assert!(!w.read(Some("0")).1.caught_up, "forgotten: a GET decides");
        assert!(w.read(Some("1")).1.caught_up);
        assert!(w.read(Some(&SEEN_KEPT.to_string())).1.caught_up);
    }
}
