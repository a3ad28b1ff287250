//! An in-memory [`ObjectSource`] for tests: objects and service account tokens are set and
//! removed directly, and reads can be made to fail.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Secret};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};

use super::{ObjectError, ObjectKind, ObjectSource, Result, StorageKind, TokenRequest};
use crate::podspec::service_env::ServicesRead;

type Key = (String, String);

#[derive(Debug, Default)]
struct Objects {
    config_maps: BTreeMap<Key, ConfigMap>,
    secrets: BTreeMap<Key, Secret>,
    failures: BTreeMap<(ObjectKind, String, String), String>,
    reads: usize,
    /// (namespace, service account) → the token every request for it gets.
    tokens: BTreeMap<Key, String>,
    token_requests: Vec<TokenRequest>,
    services: ServicesRead,
    /// RuntimeClass name → handler.
    runtime_classes: BTreeMap<String, String>,
    claims: BTreeMap<Key, PersistentVolumeClaim>,
    volumes: BTreeMap<String, PersistentVolume>,
    csi_drivers: BTreeMap<String, CSIDriver>,
    attachments: BTreeMap<String, VolumeAttachment>,
    nodes: BTreeMap<String, k8s_openapi::api::core::v1::Node>,
    /// Storage reads that fail: (kind, name) → message.
    storage_failures: BTreeMap<(StorageKind, String), String>,
    storage_reads: Vec<(StorageKind, String)>,
    claim_status_patches: Vec<serde_json::Value>,
}

/// A JSON merge patch (RFC 7386) applied to `target`.
fn merge_patch(target: &mut serde_json::Value, patch: &serde_json::Value) {
    use serde_json::Value;
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let Value::Object(map) = target else {
        return;
    };
    for (k, v) in patch {
        if v.is_null() {
            map.remove(k);
        } else {
            merge_patch(map.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// ConfigMaps and Secrets held in memory, keyed by their own namespace and name.
#[derive(Debug, Default)]
pub struct FakeObjects {
    inner: Mutex<Objects>,
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Key {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}

impl FakeObjects {
    pub fn new() -> FakeObjects {
        FakeObjects::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Objects> {
        // A test that panicked while holding the lock has failed already; keep serving.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds or replaces a ConfigMap (namespace `default` when unset).
    pub fn set_config_map(&self, cm: ConfigMap) {
        let key = key_of(&cm.metadata);
        self.lock().config_maps.insert(key, cm);
    }

    /// Adds or replaces a Secret (namespace `default` when unset).
    pub fn set_secret(&self, secret: Secret) {
        let key = key_of(&secret.metadata);
        self.lock().secrets.insert(key, secret);
    }

    /// Adds or replaces the RuntimeClass `name` with `handler`.
    pub fn set_runtime_class(&self, name: &str, handler: &str) {
        self.lock()
            .runtime_classes
            .insert(name.to_string(), handler.to_string());
    }

    pub fn remove_config_map(&self, namespace: &str, name: &str) {
        self.lock()
            .config_maps
            .remove(&(namespace.to_string(), name.to_string()));
    }

    pub fn remove_secret(&self, namespace: &str, name: &str) {
        self.lock()
            .secrets
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Makes reads of one object fail with `message` until [`FakeObjects::clear_failure`].
    pub fn fail(&self, kind: ObjectKind, namespace: &str, name: &str, message: &str) {
        self.lock().failures.insert(
            (kind, namespace.to_string(), name.to_string()),
            message.to_string(),
        );
    }

    pub fn clear_failure(&self, kind: ObjectKind, namespace: &str, name: &str) {
        self.lock()
            .failures
            .remove(&(kind, namespace.to_string(), name.to_string()));
    }

    /// Adds or replaces a PersistentVolumeClaim (namespace `default` when unset).
    pub fn set_claim(&self, claim: PersistentVolumeClaim) {
        let key = key_of(&claim.metadata);
        self.lock().claims.insert(key, claim);
    }

    /// The claim status patches written so far, in order.
    pub fn claim_status_patches(&self) -> Vec<serde_json::Value> {
        self.lock().claim_status_patches.clone()
    }

    /// The claim as it is now (after status patches).
    pub fn claim(&self, namespace: &str, name: &str) -> Option<PersistentVolumeClaim> {
        self.lock()
            .claims
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    pub fn remove_claim(&self, namespace: &str, name: &str) {
        self.lock()
            .claims
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Adds or replaces a PersistentVolume.
    pub fn set_persistent_volume(&self, pv: PersistentVolume) {
        let name = pv.metadata.name.clone().unwrap_or_default();
        self.lock().volumes.insert(name, pv);
    }

    /// Adds or replaces a CSIDriver object.
    pub fn set_csi_driver(&self, driver: CSIDriver) {
        let name = driver.metadata.name.clone().unwrap_or_default();
        self.lock().csi_drivers.insert(name, driver);
    }

    /// Adds or replaces a Node.
    pub fn set_node(&self, node: k8s_openapi::api::core::v1::Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        self.lock().nodes.insert(name, node);
    }

    /// Adds or replaces a VolumeAttachment.
    pub fn set_volume_attachment(&self, va: VolumeAttachment) {
        let name = va.metadata.name.clone().unwrap_or_default();
        self.lock().attachments.insert(name, va);
    }

    /// Makes reads of one storage object fail with `message`.
    pub fn fail_storage(&self, kind: StorageKind, name: &str, message: &str) {
        self.lock()
            .storage_failures
            .insert((kind, name.to_string()), message.to_string());
    }

    /// The storage objects read so far, in order.
    pub fn storage_reads(&self) -> Vec<(StorageKind, String)> {
        self.lock().storage_reads.clone()
    }

    // The trait's own error type.
    #[allow(clippy::result_large_err)]
    fn storage_read<T: Clone>(
        &self,
        kind: StorageKind,
        name: &str,
        pick: impl FnOnce(&Objects) -> Option<T>,
    ) -> Result<Option<T>> {
        let mut objects = self.lock();
        objects.storage_reads.push((kind, name.to_string()));
        if let Some(message) = objects.storage_failures.get(&(kind, name.to_string())) {
            return Err(ObjectError::InjectedStorage {
                resource: kind,
                name: name.to_string(),
                message: message.clone(),
            });
        }
        Ok(pick(&objects))
    }

    /// How many reads were served (for tests that check objects are fetched once).
    pub fn reads(&self) -> usize {
        self.lock().reads
    }

    /// Every token request for the service account gets `token` from now on; without one,
    /// requests fail as the API server answers for a missing account.
    pub fn set_service_account_token(&self, namespace: &str, service_account: &str, token: &str) {
        self.lock().tokens.insert(
            (namespace.to_string(), service_account.to_string()),
            token.to_string(),
        );
    }

    /// What [`ObjectSource::services`] answers from now on (at first: no API server).
    pub fn set_services(&self, services: ServicesRead) {
        self.lock().services = services;
    }

    /// The token requests served so far, in order.
    pub fn token_requests(&self) -> Vec<TokenRequest> {
        self.lock().token_requests.clone()
    }

    fn injected(
        objects: &Objects,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Option<ObjectError> {
        objects
            .failures
            .get(&(kind, namespace.to_string(), name.to_string()))
            .map(|message| ObjectError::Injected {
                kind,
                namespace: namespace.to_string(),
                name: name.to_string(),
                message: message.clone(),
            })
    }
}

#[async_trait]
impl ObjectSource for FakeObjects {
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>> {
        let mut objects = self.lock();
        objects.reads += 1;
        if let Some(e) = Self::injected(&objects, ObjectKind::ConfigMap, namespace, name) {
            return Err(e);
        }
        Ok(objects
            .config_maps
            .get(&(namespace.to_string(), name.to_string()))
            .cloned())
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>> {
        let mut objects = self.lock();
        objects.reads += 1;
        if let Some(e) = Self::injected(&objects, ObjectKind::Secret, namespace, name) {
            return Err(e);
        }
        Ok(objects
            .secrets
            .get(&(namespace.to_string(), name.to_string()))
            .cloned())
    }

    async fn service_account_token(&self, request: &TokenRequest) -> Result<String> {
        let mut objects = self.lock();
        objects.token_requests.push(request.clone());
        let key = (request.namespace.clone(), request.service_account.clone());
        objects
            .tokens
            .get(&key)
            .cloned()
            .ok_or_else(|| ObjectError::TokenFetch {
                namespace: request.namespace.clone(),
                service_account: request.service_account.clone(),
                message: format!("serviceaccounts {:?} not found", request.service_account),
                source: None,
            })
    }

    fn services(&self) -> ServicesRead {
        self.lock().services.clone()
    }

    fn runtime_handler(
        &self,
        runtime_class_name: Option<&str>,
    ) -> Result<String, super::RuntimeClassError> {
        let st = self.lock();
        super::lookup_runtime_handler(runtime_class_name, |name| {
            super::RuntimeClassRead::Synced(st.runtime_classes.get(name).cloned())
        })
    }

    async fn persistent_volume_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PersistentVolumeClaim>> {
        let key = (namespace.to_string(), name.to_string());
        self.storage_read(StorageKind::PersistentVolumeClaim, name, |o| {
            o.claims.get(&key).cloned()
        })
    }

    async fn patch_persistent_volume_claim_status(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<()> {
        let mut o = self.lock();
        let key = (namespace.to_string(), name.to_string());
        let Some(claim) = o.claims.get(&key) else {
            return Err(ObjectError::Injected {
                kind: ObjectKind::Secret,
                namespace: namespace.to_string(),
                name: name.to_string(),
                message: format!("persistentvolumeclaims \"{name}\" not found"),
            });
        };
        let mut value = serde_json::to_value(claim).unwrap_or_default();
        merge_patch(&mut value, patch);
        if let Ok(patched) = serde_json::from_value(value) {
            o.claims.insert(key, patched);
        }
        o.claim_status_patches.push(patch.clone());
        Ok(())
    }

    async fn persistent_volume(&self, name: &str) -> Result<Option<PersistentVolume>> {
        self.storage_read(StorageKind::PersistentVolume, name, |o| {
            o.volumes.get(name).cloned()
        })
    }

    async fn csi_driver(&self, name: &str) -> Result<Option<CSIDriver>> {
        self.storage_read(StorageKind::CsiDriver, name, |o| {
            o.csi_drivers.get(name).cloned()
        })
    }

    async fn node(&self, name: &str) -> Result<Option<k8s_openapi::api::core::v1::Node>> {
        self.storage_read(StorageKind::Node, name, |o| o.nodes.get(name).cloned())
    }

    async fn volume_attachment(&self, name: &str) -> Result<Option<VolumeAttachment>> {
        self.storage_read(StorageKind::VolumeAttachment, name, |o| {
            o.attachments.get(name).cloned()
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    #[tokio::test]
    async fn set_read_fail_remove() {
        let fake = FakeObjects::new();
        fake.set_config_map(ConfigMap {
            metadata: ObjectMeta {
                name: Some("cm".into()),
                ..Default::default()
            },
            ..Default::default()
        });
        assert!(fake.config_map("default", "cm").await.unwrap().is_some());
        assert!(fake.config_map("other", "cm").await.unwrap().is_none());
        fake.fail(ObjectKind::ConfigMap, "default", "cm", "boom");
        assert_eq!(
            fake.config_map("default", "cm")
                .await
                .unwrap_err()
                .to_string(),
            "boom"
        );
        fake.clear_failure(ObjectKind::ConfigMap, "default", "cm");
        fake.remove_config_map("default", "cm");
        assert!(fake.config_map("default", "cm").await.unwrap().is_none());
        assert!(fake.secret("default", "cm").await.unwrap().is_none());
        assert_eq!(fake.reads(), 5);
    }

    #[tokio::test]
    async fn tokens_by_account() {
        let fake = FakeObjects::new();
        let request = TokenRequest {
            namespace: "prod".into(),
            service_account: "builder".into(),
            audiences: vec![],
            expiration_seconds: 3607,
            pod_name: "web".into(),
            pod_uid: "u".into(),
        };
        assert_eq!(
            fake.service_account_token(&request)
                .await
                .unwrap_err()
                .to_string(),
            "failed to fetch token: serviceaccounts \"builder\" not found"
        );
        fake.set_service_account_token("prod", "builder", "t0k");
        assert_eq!(fake.service_account_token(&request).await.unwrap(), "t0k");
        assert_eq!(fake.token_requests(), [request.clone(), request]);
    }
}
