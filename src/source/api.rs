//! The API server pod source (cluster mode): every pod bound to this node
//! (`spec.nodeName=<node>`), kept current by a watch, as full snapshots for the pod manager.
//!
//! The watch feeds a reflector store that the rest of cluster mode shares (status sync, mirror
//! pods): it is the API's view of this node's pods. Mirror pods (the API's copies of static pods)
//! are in the store but not in the snapshots — their static pods come from the file source. While
//! the API server is unreachable the watcher retries with backoff and the last snapshot stands:
//! running pods are left alone.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::SourceSnapshot;

pub const API_SOURCE: &str = "api";

use crate::backoff::watch::backoff_watch;
use crate::podspec::is_mirror_pod;

/// Quiet time after a watch event before a snapshot is sent, so a burst (the initial list, a
/// rollout) becomes one snapshot.
const DEBOUNCE: Duration = Duration::from_millis(10);

/// The pods the node should run, from the store's content: everything except mirror pods.
pub fn desired_pods(store: &[std::sync::Arc<Pod>]) -> Vec<Pod> {
    let mut pods: Vec<Pod> = store
        .iter()
        .filter(|p| !is_mirror_pod(p))
        .map(|p| (**p).clone())
        .collect();
    pods.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    pods
}

/// Called with every pod of the store (mirror pods included) after each change.
pub type OnChange = std::sync::Arc<dyn Fn(&[Pod]) + Send + Sync>;

pub struct ApiSource {
    client: Client,
    node_name: String,
    writer: Writer<Pod>,
    on_change: Option<OnChange>,
}

impl ApiSource {
    /// `writer` is the write half of the store the rest of cluster mode reads.
    pub fn new(client: Client, node_name: String, writer: Writer<Pod>) -> Self {
        ApiSource {
            client,
            node_name,
            writer,
            on_change: None,
        }
    }

    /// Also tells `f` about every change (the ConfigMap/Secret cache follows the pods).
    pub fn on_change(mut self, f: OnChange) -> Self {
        self.on_change = Some(f);
        self
    }

    /// Watches until cancelled; sends a snapshot once the initial list is complete and after
    /// every change.
    pub async fn run(self, tx: mpsc::Sender<SourceSnapshot>, cancel: CancellationToken) {
        let ApiSource {
            client,
            node_name,
            writer,
            on_change,
        } = self;
        let reader = writer.as_reader();
        let api: Api<Pod> = Api::all(client);
        let config = watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
        let mut events = backoff_watch(watcher(api, config)).reflect(writer).boxed();
        let mut ready = false;
        let mut dirty = false;
        let mut last_sent: Option<Vec<Pod>> = None;
        // The last versions of pods deleted since the previous snapshot.
        let mut deleted: Vec<Pod> = Vec::new();
        loop {
            let next = if dirty {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    next = events.next() => Some(next),
                    _ = tokio::time::sleep(DEBOUNCE) => None,
                }
            } else {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    next = events.next() => Some(next),
                }
            };
            match next {
                Some(Some(Ok(event))) => {
                    match event {
                        watcher::Event::InitDone => ready = true,
                        watcher::Event::Delete(pod) if !is_mirror_pod(&pod) => deleted.push(pod),
                        _ => {}
                    }
                    dirty = true;
                }
                Some(Some(Err(e))) => {
                    tracing::warn!(error = %e, "pod watch failed; retrying");
                }
                Some(None) => return,
                None => {
                    dirty = false;
                    if !ready {
                        continue;
                    }
                    let state = reader.state();
                    if let Some(f) = &on_change {
                        let all: Vec<Pod> = state.iter().map(|p| (**p).clone()).collect();
                        f(&all);
                    }
                    let pods = desired_pods(&state);
                    if last_sent.as_ref() == Some(&pods) {
                        deleted.clear();
                        continue;
                    }
                    last_sent = Some(pods.clone());
                    let snapshot = SourceSnapshot {
                        source: API_SOURCE,
                        pods,
                        errors: Vec::new(),
                        deleted: std::mem::take(&mut deleted),
                    };
                    if tx.send(snapshot).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podspec::MIRROR_ANNOTATION;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::sync::Arc;

    fn pod(name: &str, mirror: bool) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                annotations: mirror
                    .then(|| [(MIRROR_ANNOTATION.to_string(), "hash".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[test]
    fn mirror_pods_are_not_desired_and_order_is_stable() {
        let store = vec![pod("b", false), pod("m", true), pod("a", false)];
        let names: Vec<_> = desired_pods(&store)
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert!(is_mirror_pod(&pod("m", true)));
        assert!(!is_mirror_pod(&pod("a", false)));
    }
}
