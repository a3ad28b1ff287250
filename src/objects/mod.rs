//! API objects a pod refers to: the ConfigMaps and Secrets behind its volumes and environment,
//! and the service account tokens of its projected volumes.
//!
//! The kubelet reads them through its ConfigMap and Secret managers
//! (`pkg/kubelet/configmap`, `pkg/kubelet/secret`); with the default `Watch` change-detection
//! strategy each referenced object gets its own watch while some pod on the node refers to it
//! (`pkg/kubelet/util/manager/watch_based_manager.go`). Tokens come from its token manager
//! (`pkg/kubelet/token`, here [`token::TokenManager`]). [`ObjectSource`] is that interface:
//! [`ObjectCache`] is the implementation against the API server, `FakeObjects` an in-memory
//! one for tests (feature `test-util`), and [`NoApiServer`] what standalone nodelet has (every
//! read fails with the kubelet's "no kubeClient defined", every token with "standalone mode").

pub mod cache;
/// In-memory objects for tests (feature `test-util`).
#[cfg(any(test, feature = "test-util"))]
pub mod fake;
pub mod token;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};

pub use cache::ObjectCache;
#[cfg(any(test, feature = "test-util"))]
pub use fake::FakeObjects;
pub use token::{FetchedTokens, TokenManager, TokenRequest};

/// The two kinds of object pods read from the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    ConfigMap,
    Secret,
}

impl ObjectKind {
    /// The group-resource the kubelet's managers name in their errors (`corev1.Resource`):
    /// `configmap "x" not found`, `failed to sync secret cache: ...`.
    pub fn resource(self) -> &'static str {
        match self {
            ObjectKind::ConfigMap => "configmap",
            ObjectKind::Secret => "secret",
        }
    }

    /// The Kind, as in `couldn't find key k in ConfigMap ns/x`.
    pub fn kind(self) -> &'static str {
        match self {
            ObjectKind::ConfigMap => "ConfigMap",
            ObjectKind::Secret => "Secret",
        }
    }

    /// The spelling of the kubelet's messages without an API client (`couldn't get configMap`).
    fn no_client_name(self) -> &'static str {
        match self {
            ObjectKind::ConfigMap => "configMap",
            ObjectKind::Secret => "secret",
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.resource())
    }
}

/// Why an object could not be read. A missing object is not an error (`Ok(None)`): callers
/// decide whether `optional` makes that acceptable, as the kubelet does.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// Standalone mode: the kubelet's message when it has no API client.
    #[error("couldn't get {} {namespace}/{name}, no kubeClient defined", kind.no_client_name())]
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

/// Where ConfigMaps, Secrets and service account tokens come from. `Ok(None)` means the object
/// does not exist.
#[async_trait]
pub trait ObjectSource: Send + Sync {
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>>;
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>>;
    /// A token of `request.service_account` bound to the pod the request names (a projected
    /// volume's `serviceAccountToken` source); implementations may hand out a cached one.
    async fn service_account_token(&self, request: &TokenRequest) -> Result<String>;
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
}

/// The ConfigMap and Secret names a pod refers to (in its own namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct References {
    pub config_maps: BTreeSet<String>,
    pub secrets: BTreeSet<String>,
}

impl References {
    /// `(kind, name)` pairs, ConfigMaps first.
    pub fn iter(&self) -> impl Iterator<Item = (ObjectKind, &str)> {
        self.config_maps
            .iter()
            .map(|n| (ObjectKind::ConfigMap, n.as_str()))
            .chain(
                self.secrets
                    .iter()
                    .map(|n| (ObjectKind::Secret, n.as_str())),
            )
    }
}

/// The outcome of reading one object: `Ok(None)` when it does not exist, `Err(message)` when
/// it could not be read (the message is the one the kubelet would show).
pub type Fetched<T> = std::result::Result<Option<T>, String>;

/// ConfigMaps and Secrets read for one pod, by name, so that the decisions that use them
/// (payloads, environments) are pure functions of what was read.
#[derive(Debug, Clone, Default)]
pub struct FetchedObjects {
    pub namespace: String,
    pub config_maps: BTreeMap<String, Fetched<ConfigMap>>,
    pub secrets: BTreeMap<String, Fetched<Secret>>,
}

impl FetchedObjects {
    /// Reads every object in `refs` from `source`, each once.
    pub async fn fetch(
        source: &dyn ObjectSource,
        namespace: &str,
        refs: &References,
    ) -> FetchedObjects {
        let mut out = FetchedObjects {
            namespace: namespace.to_string(),
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

    /// The read of a ConfigMap; one that was not read is reported as the kubelet reports a
    /// read without an API client.
    pub fn config_map(&self, name: &str) -> Fetched<&ConfigMap> {
        match self.config_maps.get(name) {
            Some(Ok(found)) => Ok(found.as_ref()),
            Some(Err(message)) => Err(message.clone()),
            None => Err(self.unread(ObjectKind::ConfigMap, name)),
        }
    }

    /// The read of a Secret (see [`FetchedObjects::config_map`]).
    pub fn secret(&self, name: &str) -> Fetched<&Secret> {
        match self.secrets.get(name) {
            Some(Ok(found)) => Ok(found.as_ref()),
            Some(Err(message)) => Err(message.clone()),
            None => Err(self.unread(ObjectKind::Secret, name)),
        }
    }

    fn unread(&self, kind: ObjectKind, name: &str) -> String {
        ObjectError::NoApiClient {
            kind,
            namespace: self.namespace.clone(),
            name: name.to_string(),
        }
        .to_string()
    }
}

/// `configmap "x" not found`: the API's NotFound message for the kind, as the kubelet's
/// managers return it.
pub fn not_found_message(kind: ObjectKind, name: &str) -> String {
    format!("{} {name:?} not found", kind.resource())
}

/// Every ConfigMap and Secret `pod` refers to (`getConfigMapNames`/`getSecretNames` in the
/// kubelet's managers): volumes (including projected sources and the Secret references of
/// storage plugins), `env`/`envFrom` of every container, and `imagePullSecrets`. Empty names
/// are left out, as the kubelet leaves them out.
pub fn referenced_objects(pod: &Pod) -> References {
    let mut refs = References::default();
    let Some(spec) = &pod.spec else {
        return refs;
    };
    let mut cm = |name: &str| {
        if !name.is_empty() {
            refs.config_maps.insert(name.to_string());
        }
    };
    let mut secrets: Vec<&str> = Vec::new();
    for s in spec.image_pull_secrets.iter().flatten() {
        secrets.push(s.name.as_str());
    }
    // Regular, init and ephemeral containers carry the same env types.
    let container_env = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| (&c.env_from, &c.env))
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(|c| (&c.env_from, &c.env)),
        );
    for (env_from, env) in container_env {
        for from in env_from.iter().flatten() {
            if let Some(r) = &from.config_map_ref {
                cm(&r.name);
            }
            if let Some(r) = &from.secret_ref {
                secrets.push(r.name.as_str());
            }
        }
        for from in env
            .iter()
            .flatten()
            .filter_map(|var| var.value_from.as_ref())
        {
            if let Some(r) = &from.config_map_key_ref {
                cm(&r.name);
            }
            if let Some(r) = &from.secret_key_ref {
                secrets.push(r.name.as_str());
            }
        }
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(c) = &v.config_map {
            cm(&c.name);
        }
        if let Some(s) = &v.secret {
            secrets.push(s.secret_name.as_deref().unwrap_or_default());
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(c) = &src.config_map {
                cm(&c.name);
            }
            if let Some(s) = &src.secret {
                secrets.push(s.name.as_str());
            }
        }
        let plugin_secrets = [
            v.azure_file.as_ref().map(|x| x.secret_name.as_str()),
            v.cephfs
                .as_ref()
                .and_then(|x| x.secret_ref.as_ref())
                .map(|r| r.name.as_str()),
            v.cinder
                .as_ref()
                .and_then(|x| x.secret_ref.as_ref())
                .map(|r| r.name.as_str()),
            v.flex_volume
                .as_ref()
                .and_then(|x| x.secret_ref.as_ref())
                .map(|r| r.name.as_str()),
            v.rbd
                .as_ref()
                .and_then(|x| x.secret_ref.as_ref())
                .map(|r| r.name.as_str()),
            v.iscsi
                .as_ref()
                .and_then(|x| x.secret_ref.as_ref())
                .map(|r| r.name.as_str()),
            v.scale_io.as_ref().map(|x| x.secret_ref.name.as_str()),
            v.storageos
                .as_ref()
                .and_then(|x| x.secret_ref.as_ref())
                .map(|r| r.name.as_str()),
            v.csi
                .as_ref()
                .and_then(|x| x.node_publish_secret_ref.as_ref())
                .map(|r| r.name.as_str()),
        ];
        secrets.extend(plugin_secrets.into_iter().flatten());
    }
    refs.secrets = secrets
        .into_iter()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    refs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn referenced_objects_table() {
        let cases: Vec<(&str, &str, Vec<&str>, Vec<&str>)> = vec![
            ("no spec", "metadata: {name: p}", vec![], vec![]),
            (
                "volumes, projected sources and plugin secrets",
                "spec:\n  containers: []\n  volumes:\n  - {name: a, configMap: {name: cm-a}}\n  - {name: b, secret: {secretName: s-b}}\n  - name: c\n    projected:\n      sources:\n      - configMap: {name: cm-c}\n      - secret: {name: s-c}\n      - downwardAPI: {items: []}\n  - {name: d, csi: {driver: x, nodePublishSecretRef: {name: s-csi}}}\n  - {name: e, cephfs: {monitors: [m], secretRef: {name: s-ceph}}}\n  - {name: f, emptyDir: {}}\n",
                vec!["cm-a", "cm-c"],
                vec!["s-b", "s-c", "s-ceph", "s-csi"],
            ),
            (
                "env and envFrom of regular, init and ephemeral containers; pull secrets",
                "spec:\n  imagePullSecrets: [{name: pull}, {name: ''}]\n  initContainers:\n  - name: i\n    envFrom: [{configMapRef: {name: cm-init}}, {secretRef: {name: s-init}}]\n  containers:\n  - name: c\n    env:\n    - {name: A, valueFrom: {configMapKeyRef: {name: cm-env, key: k}}}\n    - {name: B, valueFrom: {secretKeyRef: {name: s-env, key: k}}}\n    - {name: C, valueFrom: {fieldRef: {fieldPath: metadata.name}}}\n  ephemeralContainers:\n  - name: e\n    envFrom: [{configMapRef: {name: cm-eph}}]\n",
                vec!["cm-env", "cm-eph", "cm-init"],
                vec!["pull", "s-env", "s-init"],
            ),
        ];
        for (name, yaml, cms, secrets) in cases {
            let refs = referenced_objects(&pod(yaml));
            let want = References {
                config_maps: cms.into_iter().map(str::to_string).collect(),
                secrets: secrets.into_iter().map(str::to_string).collect(),
            };
            assert_eq!(refs, want, "{name}");
        }
    }

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
    }
}
