//! API objects a pod refers to: the ConfigMaps and Secrets behind its volumes and environment,
//! the service account tokens of its projected volumes, and the cluster's services its
//! environment's service links come from ([`services`]).
//!
//! The kubelet reads them through its ConfigMap and Secret managers
//! (`pkg/kubelet/configmap`, `pkg/kubelet/secret`); with the default `Watch` change-detection
//! strategy each referenced object gets its own watch while some pod on the node refers to it
//! (`pkg/kubelet/util/manager/watch_based_manager.go`). Tokens come from its token manager
//! (`pkg/kubelet/token`, here [`token::TokenManager`]). [`ObjectSource`] is that interface:
//! [`ObjectCache`] is the implementation against the API server, `FakeObjects` an in-memory
//! one for tests (feature `test-util`), and [`NoApiServer`] what standalone nodelet has (every
//! read fails with the kubelet's "no kubeClient defined", every token with "standalone mode").
//! The reference and read-result types ([`crate::podspec::references`]) are pod knowledge and
//! live below, in `podspec`; [`fetch_objects`] fills them.

pub mod cache;
/// In-memory objects for tests (feature `test-util`).
#[cfg(any(test, feature = "test-util"))]
pub mod fake;
pub mod runtime_classes;
pub mod services;
pub mod token;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};

pub use cache::ObjectCache;
#[cfg(any(test, feature = "test-util"))]
pub use fake::FakeObjects;
pub use runtime_classes::{
    lookup_runtime_handler, watch_runtime_classes, RuntimeClassError, RuntimeClassRead,
    RuntimeClassStore,
};
pub use services::{watch_services, ServiceStore};
pub use token::{FetchedTokens, TokenManager, TokenRequest};

use crate::podspec::references::{
    no_client_message, referenced_objects, FetchedObjects, ObjectKind, References,
};
use crate::podspec::service_env::ServicesRead;

/// Reads every object in `refs` from `source`, each once, and takes the services as they are
/// now.
pub async fn fetch_objects(
    source: &dyn ObjectSource,
    namespace: &str,
    refs: &References,
) -> FetchedObjects {
    let mut out = FetchedObjects {
        namespace: namespace.to_string(),
        services: source.services(),
        ..FetchedObjects::default()
    };
    for name in &refs.config_maps {
        let read = source
            .config_map(namespace, name)
            .await
            .map_err(|e| e.to_string());
        out.config_maps.insert(name.clone(), read);
    }
    for name in &refs.secrets {
        let read = source
            .secret(namespace, name)
            .await
            .map_err(|e| e.to_string());
        out.secrets.insert(name.clone(), read);
    }
    out
}

/// Why an object could not be read. A missing object is not an error (`Ok(None)`): callers
/// decide whether `optional` makes that acceptable, as the kubelet does.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// Standalone mode: the kubelet's message when it has no API client.
    #[error("{}", no_client_message(*kind, namespace, name))]
    NoApiClient {
        kind: ObjectKind,
        namespace: String,
        name: String,
    },
    /// The object's watch has not delivered its first list within the wait (the API server is
    /// unreachable, or slow). The kubelet waits one second and says this.
    #[error("failed to sync {kind} cache: timed out waiting for the condition")]
    SyncTimeout {
        kind: ObjectKind,
        namespace: String,
        name: String,
    },
    /// The API server answered with an error (e.g. Forbidden); `message` is its Status message.
    #[error("{message}")]
    Api {
        kind: ObjectKind,
        namespace: String,
        name: String,
        message: String,
        #[source]
        source: kube::Error,
    },
    /// Standalone mode: a storage object (claim, volume, CSIDriver, VolumeAttachment) cannot
    /// be read without an API client.
    #[error(
        "couldn't get {resource} {}, no kubeClient defined",
        qualified(namespace, name)
    )]
    NoApiClientStorage {
        resource: StorageKind,
        namespace: Option<String>,
        name: String,
    },
    /// The API server answered a storage object's GET with an error; `message` is its Status
    /// message (`persistentvolumeclaims "x" is forbidden: …`).
    #[error("{message}")]
    StorageApi {
        resource: StorageKind,
        name: String,
        message: String,
        #[source]
        source: kube::Error,
    },
    /// A storage read failure injected by `FakeObjects`.
    #[error("{message}")]
    InjectedStorage {
        resource: StorageKind,
        name: String,
        message: String,
    },
    /// A failure injected by `FakeObjects`.
    #[error("{message}")]
    Injected {
        kind: ObjectKind,
        namespace: String,
        name: String,
        message: String,
    },
    /// Standalone mode: the kubelet's token manager without an API client.
    #[error("failed to fetch token: cannot use TokenManager when kubelet is in standalone mode")]
    NoApiClientForToken {
        namespace: String,
        service_account: String,
    },
    /// A TokenRequest failed and no earlier token was cached; `message` is the API server's
    /// (e.g. `serviceaccounts "x" not found`).
    #[error("failed to fetch token: {message}")]
    TokenFetch {
        namespace: String,
        service_account: String,
        message: String,
        #[source]
        source: Option<kube::Error>,
    },
    /// A refresh failed and the cached token has expired; `key` names the request.
    #[error("token {key} expired and refresh failed: {message}")]
    TokenExpired { key: String, message: String },
}

impl ObjectError {
    /// An API error with the API server's own message when there is one.
    pub fn api(kind: ObjectKind, namespace: &str, name: &str, source: kube::Error) -> ObjectError {
        let message = match &source {
            kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
            other => other.to_string(),
        };
        ObjectError::Api {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
            message,
            source,
        }
    }
}

pub type Result<T, E = ObjectError> = std::result::Result<T, E>;

/// The storage objects the CSI volume manager reads (one GET per read, as the kubelet's
/// volume manager does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StorageKind {
    PersistentVolumeClaim,
    PersistentVolume,
    CsiDriver,
    VolumeAttachment,
    Node,
}

impl StorageKind {
    /// The API resource, as the API server's messages name it (`persistentvolumeclaims`).
    pub fn resource(self) -> &'static str {
        match self {
            StorageKind::PersistentVolumeClaim => "persistentvolumeclaims",
            StorageKind::PersistentVolume => "persistentvolumes",
            StorageKind::CsiDriver => "csidrivers.storage.k8s.io",
            StorageKind::VolumeAttachment => "volumeattachments.storage.k8s.io",
            StorageKind::Node => "nodes",
        }
    }
}

impl std::fmt::Display for StorageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.resource())
    }
}

fn qualified(namespace: &Option<String>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

fn no_client_storage(resource: StorageKind, namespace: Option<&str>, name: &str) -> ObjectError {
    ObjectError::NoApiClientStorage {
        resource,
        namespace: namespace.map(str::to_string),
        name: name.to_string(),
    }
}

impl ObjectError {
    /// A storage object's GET failed.
    pub fn storage_api(resource: StorageKind, name: &str, source: kube::Error) -> ObjectError {
        let message = match &source {
            kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
            other => other.to_string(),
        };
        ObjectError::StorageApi {
            resource,
            name: name.to_string(),
            message,
            source,
        }
    }
}

/// Where ConfigMaps, Secrets and service account tokens come from. `Ok(None)` means the object
/// does not exist.
#[async_trait]
pub trait ObjectSource: Send + Sync {
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>>;
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>>;
    /// A token of `request.service_account` bound to the pod the request names (a projected
    /// volume's `serviceAccountToken` source); implementations may hand out a cached one.
    async fn service_account_token(&self, request: &TokenRequest) -> Result<String>;
    /// The cluster's services for service links: none without an API server, else what the
    /// services watch holds (or that it has not listed yet).
    fn services(&self) -> ServicesRead;
    /// The runtime handler for a pod's `runtimeClassName` (`""`: the runtime's default), or why
    /// the pod cannot have its sandbox ([`lookup_runtime_handler`]).
    fn runtime_handler(
        &self,
        runtime_class_name: Option<&str>,
    ) -> Result<String, RuntimeClassError>;
    /// A PersistentVolumeClaim (the kubelet's populator GETs it for every sync of a pod that
    /// uses it). Without an API server: the no-client error.
    async fn persistent_volume_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PersistentVolumeClaim>> {
        Err(no_client_storage(
            StorageKind::PersistentVolumeClaim,
            Some(namespace),
            name,
        ))
    }
    /// Merge-patches a claim's `status` (the kubelet's node expansion marks and finishes a
    /// resize there). Without an API server: the no-client error.
    async fn patch_persistent_volume_claim_status(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<()> {
        let _ = patch;
        Err(no_client_storage(
            StorageKind::PersistentVolumeClaim,
            Some(namespace),
            name,
        ))
    }
    /// A PersistentVolume.
    async fn persistent_volume(&self, name: &str) -> Result<Option<PersistentVolume>> {
        Err(no_client_storage(StorageKind::PersistentVolume, None, name))
    }
    /// A CSIDriver object (how the kubelet treats the driver's volumes).
    async fn csi_driver(&self, name: &str) -> Result<Option<CSIDriver>> {
        Err(no_client_storage(StorageKind::CsiDriver, None, name))
    }
    /// This node's Node object: the volume manager reads `status.volumesAttached` (the
    /// attach/detach controller's record) before it mounts an attachable volume.
    async fn node(&self, name: &str) -> Result<Option<k8s_openapi::api::core::v1::Node>> {
        Err(no_client_storage(StorageKind::Node, None, name))
    }
    /// A VolumeAttachment (`csi-<sha256>`), for volumes whose driver needs attaching.
    async fn volume_attachment(&self, name: &str) -> Result<Option<VolumeAttachment>> {
        Err(no_client_storage(StorageKind::VolumeAttachment, None, name))
    }
}

/// Standalone nodelet: there is no API server to ask.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoApiServer;

#[async_trait]
impl ObjectSource for NoApiServer {
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>> {
        Err(ObjectError::NoApiClient {
            kind: ObjectKind::ConfigMap,
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>> {
        Err(ObjectError::NoApiClient {
            kind: ObjectKind::Secret,
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }

    async fn service_account_token(&self, request: &TokenRequest) -> Result<String> {
        Err(ObjectError::NoApiClientForToken {
            namespace: request.namespace.clone(),
            service_account: request.service_account.clone(),
        })
    }

    fn services(&self) -> ServicesRead {
        ServicesRead::NoApiServer
    }

    fn runtime_handler(
        &self,
        runtime_class_name: Option<&str>,
    ) -> Result<String, RuntimeClassError> {
        lookup_runtime_handler(runtime_class_name, |_| RuntimeClassRead::NoApiServer)
    }
}

/// The runtime handler of `pod`'s RuntimeClass (`""`: the runtime's default), or `None` while
/// it does not resolve ([`ObjectSource::runtime_handler`]).
pub fn pod_runtime_handler(objects: &dyn ObjectSource, pod: &Pod) -> Option<String> {
    objects
        .runtime_handler(
            pod.spec
                .as_ref()
                .and_then(|s| s.runtime_class_name.as_deref()),
        )
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_api_server_errors_are_the_kubelets() {
        let e = NoApiServer.config_map("ns", "x").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "couldn't get configMap ns/x, no kubeClient defined"
        );
        let e = NoApiServer.secret("ns", "y").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "couldn't get secret ns/y, no kubeClient defined"
        );
        let timeout = ObjectError::SyncTimeout {
            kind: ObjectKind::Secret,
            namespace: "ns".into(),
            name: "y".into(),
        };
        assert_eq!(
            timeout.to_string(),
            "failed to sync secret cache: timed out waiting for the condition"
        );
        let request = TokenRequest {
            namespace: "ns".into(),
            service_account: "default".into(),
            audiences: vec![],
            expiration_seconds: 3607,
            pod_name: "web".into(),
            pod_uid: "u".into(),
        };
        let e = NoApiServer
            .service_account_token(&request)
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to fetch token: cannot use TokenManager when kubelet is in standalone mode"
        );
        let e = NoApiServer
            .persistent_volume_claim("ns", "data")
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "couldn't get persistentvolumeclaims ns/data, no kubeClient defined"
        );
        let e = NoApiServer.persistent_volume("pv-1").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "couldn't get persistentvolumes pv-1, no kubeClient defined"
        );
        assert!(NoApiServer.csi_driver("d").await.is_err());
        assert!(NoApiServer.volume_attachment("csi-1").await.is_err());
    }
}
