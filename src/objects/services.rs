//! The cluster's services, for service links: the kubelet's service informer (a list and watch
//! of `/api/v1/services` in every namespace, `NewMainKubelet`), here a kube-runtime watcher
//! feeding a reflector store.
//!
//! The store reports [`ServicesRead::NotSynced`] until the watch's first list is complete
//! (the informer's `HasSynced`); from then on it reports what the watch last saw, through
//! re-lists and while the API server is away, as the informer's cache does.

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{self, store::Writer, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use crate::backoff::watch::backoff_watch;
use crate::podspec::service_env::ServicesRead;

/// The read half of the services watch: what container environments are built from.
#[derive(Clone)]
pub struct ServiceStore {
    store: Store<Service>,
}

impl ServiceStore {
    /// A store and the writer a [`watch_services`] fills.
    pub fn new() -> (ServiceStore, Writer<Service>) {
        let (store, writer) = reflector::store();
        (ServiceStore { store }, writer)
    }

    /// Whether the first list has completed.
    pub fn has_synced(&self) -> bool {
        // The store's readiness is set once, by the first complete list; asking without
        // waiting is the informer's `HasSynced`.
        matches!(self.store.wait_until_ready().now_or_never(), Some(Ok(())))
    }

    /// Every service the watch has seen, or that it has not listed yet.
    pub fn read(&self) -> ServicesRead {
        if self.has_synced() {
            ServicesRead::Synced(self.store.state())
        } else {
            ServicesRead::NotSynced
        }
    }
}

impl std::fmt::Debug for ServiceStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceStore")
            .field("synced", &self.has_synced())
            .field("services", &self.store.len())
            .finish()
    }
}

/// Lists and watches every service of the cluster into `writer` until cancelled; a failed
/// watch is retried with kube's default backoff (the store keeps its last content meanwhile).
pub async fn watch_services(client: Client, writer: Writer<Service>, cancel: CancellationToken) {
    let api: Api<Service> = Api::all(client);
    let mut events = backoff_watch(watcher(api, watcher::Config::default()))
        .reflect(writer)
        .boxed();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            next = events.next() => match next {
                Some(Ok(watcher::Event::InitDone)) => tracing::debug!("services listed"),
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::warn!(error = %e, "services watch failed; retrying"),
                None => return,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn service(name: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn not_synced_until_the_first_list_completes() {
        let (store, mut writer) = ServiceStore::new();
        assert_eq!(store.read(), ServicesRead::NotSynced);
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(service("kubernetes")));
        // Half a list is not a list: the informer has not synced.
        assert_eq!(store.read(), ServicesRead::NotSynced);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let ServicesRead::Synced(all) = store.read() else {
            panic!("synced after InitDone");
        };
        assert_eq!(all.len(), 1);
        // A re-list keeps the store synced and its old content until the new list is done.
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(service("web")));
        assert!(matches!(store.read(), ServicesRead::Synced(all) if all.len() == 1));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let ServicesRead::Synced(all) = store.read() else {
            panic!("still synced");
        };
        assert_eq!(all[0].metadata.name.as_deref(), Some("web"));
    }
}
