//! The kubelet's watch-based object manager (`pkg/kubelet/util/manager/watch_based_manager.go`):
//! one watch per referenced ConfigMap or Secret (`fieldSelector=metadata.name=<name>` in the
//! object's namespace), started when the first pod that refers to it is registered and stopped
//! when the last one goes away. Reads come from the watch's local copy, so volumes and
//! environments keep working while the API server is unreachable, and an update reaches the
//! node as soon as the API server sends it.
//!
//! Like the kubelet, a read waits up to one second for a new watch's first list and then fails
//! with `failed to sync configmap cache: timed out waiting for the condition`; an object marked
//! `immutable` has its watch stopped after it is read (the copy is kept).
//!
//! Unlike the kubelet, which fails reads of objects no registered pod refers to
//! (`object "ns"/"name" not registered`), an unregistered read falls back to a plain GET, so a
//! pod worker that runs before the pod was registered still sees the object.
//!
//! Service account tokens go through the cache's [`TokenManager`]; a pod's tokens are dropped
//! when it is unregistered.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use super::runtime_classes::{lookup_runtime_handler, RuntimeClassRead, RuntimeClassStore};
use super::services::ServiceStore;
use super::token::{ApiTokenIssuer, TokenManager, TokenRequest};
use super::{referenced_objects, ObjectError, ObjectKind, ObjectSource, References, Result};
use crate::backoff::watch::backoff_watch;
use crate::clock::Clock;
use crate::podspec::service_env::ServicesRead;

/// How long a read waits for a new watch's first list (the kubelet polls for one second).
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(1);

type Key = (String, String);

/// One watched object: its local copy, the task that keeps it current, and the pods (by UID)
/// that refer to it.
struct Watched<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    task: Option<JoinHandle<()>>,
    pods: BTreeSet<String>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Drop for Watched<K> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[derive(Default)]
struct State {
    /// Pod UID → (namespace, what it refers to), as last registered.
    pods: HashMap<String, (String, References)>,
    config_maps: HashMap<Key, Watched<ConfigMap>>,
    secrets: HashMap<Key, Watched<Secret>>,
}

/// The per-kind parts of the cache.
trait CachedKind:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    const KIND: ObjectKind;
    fn items(state: &mut State) -> &mut HashMap<Key, Watched<Self>>;
    fn is_immutable(&self) -> bool;
}

impl CachedKind for ConfigMap {
    const KIND: ObjectKind = ObjectKind::ConfigMap;
    fn items(state: &mut State) -> &mut HashMap<Key, Watched<Self>> {
        &mut state.config_maps
    }
    fn is_immutable(&self) -> bool {
        self.immutable == Some(true)
    }
}

impl CachedKind for Secret {
    const KIND: ObjectKind = ObjectKind::Secret;
    fn items(state: &mut State) -> &mut HashMap<Key, Watched<Self>> {
        &mut state.secrets
    }
    fn is_immutable(&self) -> bool {
        self.immutable == Some(true)
    }
}

/// Watch-based cache of the ConfigMaps and Secrets the node's pods refer to, with the token
/// manager for their service account tokens.
///
/// Registration (`register_pod`, `unregister_pod`, `sync_pods`) starts tasks, so it must run
/// inside a Tokio runtime.
pub struct ObjectCache {
    client: Client,
    sync_timeout: Duration,
    state: Mutex<State>,
    tokens: TokenManager,
    /// The services watch's store; `None` (no service links) until
    /// [`ObjectCache::with_services`].
    services: Option<ServiceStore>,
    /// The RuntimeClass watch's store; `None` until [`ObjectCache::with_runtime_classes`]
    /// (then no class resolves: a pod asking for one does not run).
    runtime_classes: Option<RuntimeClassStore>,
}

impl ObjectCache {
    pub fn new(client: Client) -> ObjectCache {
        let issuer = Arc::new(ApiTokenIssuer::new(client.clone()));
        ObjectCache {
            client,
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
            state: Mutex::new(State::default()),
            tokens: TokenManager::new(issuer, Clock::system()),
            services: None,
            runtime_classes: None,
        }
    }

    /// The store of the RuntimeClass watch sandboxes' handlers are looked up in (see
    /// [`super::runtime_classes`]).
    pub fn with_runtime_classes(mut self, runtime_classes: RuntimeClassStore) -> ObjectCache {
        self.runtime_classes = Some(runtime_classes);
        self
    }

    /// The store of the services watch environments read (see [`super::services`]).
    pub fn with_services(mut self, services: ServiceStore) -> ObjectCache {
        self.services = Some(services);
        self
    }

    /// A different wait for a new watch's first list.
    pub fn with_sync_timeout(mut self, timeout: Duration) -> ObjectCache {
        self.sync_timeout = timeout;
        self
    }

    /// A different token manager (another clock or jitter, for tests).
    pub fn with_token_manager(mut self, tokens: TokenManager) -> ObjectCache {
        self.tokens = tokens;
        self
    }

    /// The token manager behind [`ObjectSource::service_account_token`].
    pub fn tokens(&self) -> &TokenManager {
        &self.tokens
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; if something did, the maps are still whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers the objects `pod` refers to (`RegisterPod`): watches start for objects no
    /// other registered pod refers to, and objects an earlier version of the pod referred to
    /// but this one does not are released. Terminal pods (Succeeded/Failed) need no objects
    /// and are unregistered instead.
    pub fn register_pod(&self, pod: &Pod) {
        let uid = pod_key(pod);
        if crate::podspec::Phase::is_terminal_status(pod.status.as_ref()) {
            self.unregister_pod(&uid);
            return;
        }
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let refs = referenced_objects(pod);
        let mut state = self.lock();
        for (kind, name) in refs.iter() {
            match kind {
                ObjectKind::ConfigMap => {
                    self.add_reference::<ConfigMap>(&mut state, &namespace, name, &uid)
                }
                ObjectKind::Secret => {
                    self.add_reference::<Secret>(&mut state, &namespace, name, &uid)
                }
            }
        }
        if let Some((old_ns, old)) = state.pods.insert(uid.clone(), (namespace.clone(), refs)) {
            let new = state
                .pods
                .get(&uid)
                .map(|(_, r)| r.clone())
                .unwrap_or_default();
            for (kind, name) in old.iter() {
                let still = old_ns == namespace
                    && match kind {
                        ObjectKind::ConfigMap => new.config_maps.contains(name),
                        ObjectKind::Secret => new.secrets.contains(name),
                    };
                if !still {
                    delete_reference(&mut state, kind, &old_ns, name, &uid);
                }
            }
        }
    }

    /// Releases everything the pod with this UID referred to (`UnregisterPod`); watches no
    /// other pod needs are stopped, and its tokens are dropped.
    pub fn unregister_pod(&self, uid: &str) {
        self.tokens.forget_pod(uid);
        let mut state = self.lock();
        if let Some((namespace, refs)) = state.pods.remove(uid) {
            for (kind, name) in refs.iter() {
                delete_reference(&mut state, kind, &namespace, name, uid);
            }
        }
    }

    /// Makes the registered set exactly `pods`: each is registered (or re-registered with its
    /// current references) and every other registered pod is unregistered. Call it with the
    /// pod source's current view whenever that view changes.
    pub fn sync_pods<'a>(&self, pods: impl IntoIterator<Item = &'a Pod>) {
        let mut seen = BTreeSet::new();
        for pod in pods {
            seen.insert(pod_key(pod));
            self.register_pod(pod);
        }
        let stale: Vec<String> = self
            .lock()
            .pods
            .keys()
            .filter(|uid| !seen.contains(*uid))
            .cloned()
            .collect();
        for uid in stale {
            self.unregister_pod(&uid);
        }
    }

    /// The objects being watched now, `(kind, namespace, name)`, sorted.
    pub fn watched(&self) -> Vec<(ObjectKind, String, String)> {
        let state = self.lock();
        let mut out: Vec<_> = state
            .config_maps
            .iter()
            .filter(|(_, w)| w.task.is_some())
            .map(|((ns, n), _)| (ObjectKind::ConfigMap, ns.clone(), n.clone()))
            .chain(
                state
                    .secrets
                    .iter()
                    .filter(|(_, w)| w.task.is_some())
                    .map(|((ns, n), _)| (ObjectKind::Secret, ns.clone(), n.clone())),
            )
            .collect();
        out.sort();
        out
    }

    fn add_reference<K: CachedKind>(
        &self,
        state: &mut State,
        namespace: &str,
        name: &str,
        uid: &str,
    ) {
        let key = (namespace.to_string(), name.to_string());
        let items = K::items(state);
        let item = items
            .entry(key)
            .or_insert_with(|| self.start_watch::<K>(namespace, name));
        item.pods.insert(uid.to_string());
    }

    fn start_watch<K: CachedKind>(&self, namespace: &str, name: &str) -> Watched<K> {
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let (store, writer) = reflector::store();
        let stream = reflector::reflector(writer, backoff_watch(watcher(api, config)));
        let (ns, n) = (namespace.to_string(), name.to_string());
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Err(error) = event {
                    tracing::warn!(kind = %K::KIND, namespace = %ns, name = %n, %error, "watching object");
                }
            }
        });
        tracing::debug!(kind = %K::KIND, %namespace, %name, "started watching object");
        Watched {
            store,
            task: Some(task),
            pods: BTreeSet::new(),
        }
    }

    async fn get<K: CachedKind>(&self, namespace: &str, name: &str) -> Result<Option<K>> {
        let key = (namespace.to_string(), name.to_string());
        let store = K::items(&mut self.lock())
            .get(&key)
            .map(|w| w.store.clone());
        let Some(store) = store else {
            return self.get_directly::<K>(namespace, name).await;
        };
        let timeout = || ObjectError::SyncTimeout {
            kind: K::KIND,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        match tokio::time::timeout(self.sync_timeout, store.wait_until_ready()).await {
            Ok(Ok(())) => {}
            // The watch was stopped (pod unregistered meanwhile) before its first list.
            Ok(Err(_)) | Err(_) => return Err(timeout()),
        }
        let object = store
            .get(&ObjectRef::new(name).within(namespace))
            .map(|o| (*o).clone());
        if object.as_ref().is_some_and(K::is_immutable) {
            if let Some(item) = K::items(&mut self.lock()).get_mut(&key) {
                if let Some(task) = item.task.take() {
                    task.abort();
                    tracing::debug!(kind = %K::KIND, %namespace, %name, "stopped watching immutable object");
                }
            }
        }
        Ok(object)
    }

    async fn get_directly<K: CachedKind>(&self, namespace: &str, name: &str) -> Result<Option<K>> {
        tracing::debug!(kind = %K::KIND, %namespace, %name, "reading unregistered object from the API server");
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        api.get_opt(name)
            .await
            .map_err(|e| ObjectError::api(K::KIND, namespace, name, e))
    }
}

fn delete_reference(state: &mut State, kind: ObjectKind, namespace: &str, name: &str, uid: &str) {
    let key = (namespace.to_string(), name.to_string());
    fn release<K: CachedKind>(items: &mut HashMap<Key, Watched<K>>, key: &Key, uid: &str) {
        let now_unused = items.get_mut(key).is_some_and(|item| {
            item.pods.remove(uid);
            item.pods.is_empty()
        });
        if now_unused {
            // Dropping the item aborts its watch.
            items.remove(key);
            tracing::debug!(kind = %K::KIND, namespace = %key.0, name = %key.1, "stopped watching object");
        }
    }
    match kind {
        ObjectKind::ConfigMap => release(&mut state.config_maps, &key, uid),
        ObjectKind::Secret => release(&mut state.secrets, &key, uid),
    }
}

/// The pod's UID, or `namespace/name` for a pod without one (never from the API server).
fn pod_key(pod: &Pod) -> String {
    match pod.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => uid.to_string(),
        _ => format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default()
        ),
    }
}

#[async_trait]
impl ObjectSource for ObjectCache {
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>> {
        self.get::<ConfigMap>(namespace, name).await
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>> {
        self.get::<Secret>(namespace, name).await
    }

    async fn service_account_token(&self, request: &TokenRequest) -> Result<String> {
        self.tokens.token(request).await
    }

    fn services(&self) -> ServicesRead {
        // Without a services store there are no service links, as in a kubelet without a
        // service lister (`getServiceEnvVarMap`: "Kubelets without masters ... don't set env
        // vars"). The agent always gives one in cluster mode; `tests/cluster.rs` checks the
        // variables reach containers.
        self.services
            .as_ref()
            .map_or(ServicesRead::NoApiServer, ServiceStore::read)
    }

    fn runtime_handler(
        &self,
        runtime_class_name: Option<&str>,
    ) -> Result<String, super::RuntimeClassError> {
        lookup_runtime_handler(runtime_class_name, |name| match &self.runtime_classes {
            Some(store) => store.read(name),
            // Not wired: as good as a watch that never lists.
            None => RuntimeClassRead::NotSynced,
        })
    }

    async fn persistent_volume_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<k8s_openapi::api::core::v1::PersistentVolumeClaim>> {
        let api = Api::namespaced(self.client.clone(), namespace);
        get_storage(api, super::StorageKind::PersistentVolumeClaim, name).await
    }

    async fn patch_persistent_volume_claim_status(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<()> {
        let api: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), namespace);
        api.patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .map(|_| ())
        .map_err(|e| ObjectError::storage_api(super::StorageKind::PersistentVolumeClaim, name, e))
    }

    async fn persistent_volume(
        &self,
        name: &str,
    ) -> Result<Option<k8s_openapi::api::core::v1::PersistentVolume>> {
        let api = Api::all(self.client.clone());
        get_storage(api, super::StorageKind::PersistentVolume, name).await
    }

    async fn csi_driver(
        &self,
        name: &str,
    ) -> Result<Option<k8s_openapi::api::storage::v1::CSIDriver>> {
        let api = Api::all(self.client.clone());
        get_storage(api, super::StorageKind::CsiDriver, name).await
    }

    async fn node(&self, name: &str) -> Result<Option<k8s_openapi::api::core::v1::Node>> {
        let api = Api::all(self.client.clone());
        get_storage(api, super::StorageKind::Node, name).await
    }

    async fn volume_attachment(
        &self,
        name: &str,
    ) -> Result<Option<k8s_openapi::api::storage::v1::VolumeAttachment>> {
        let api = Api::all(self.client.clone());
        get_storage(api, super::StorageKind::VolumeAttachment, name).await
    }
}

/// One GET of a storage object (the kubelet's volume manager reads claims and volumes this
/// way, not through a watch).
async fn get_storage<K>(api: Api<K>, kind: super::StorageKind, name: &str) -> Result<Option<K>>
where
    K: Clone + DeserializeOwned + Debug,
{
    api.get_opt(name)
        .await
        .map_err(|e| ObjectError::storage_api(kind, name, e))
}

impl Debug for ObjectCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        let pods: BTreeMap<&String, &References> =
            state.pods.iter().map(|(k, (_, r))| (k, r)).collect();
        f.debug_struct("ObjectCache")
            .field("sync_timeout", &self.sync_timeout)
            .field("pods", &pods)
            .field("tokens", &self.tokens)
            .field("services", &self.services)
            .finish_non_exhaustive()
    }
}
