//! The ConfigMaps and Secrets a pod refers to, and what was read of them: the values the
//! environment and the volume payloads are pure functions of. Reading them is `objects`' job
//! (`crate::objects::fetch_objects`); this module holds no I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};

use super::service_env::ServicesRead;

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
    pub fn no_client_name(self) -> &'static str {
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

/// The kubelet's message for a read without an API client:
/// `couldn't get configMap ns/x, no kubeClient defined`.
pub fn no_client_message(kind: ObjectKind, namespace: &str, name: &str) -> String {
    format!(
        "couldn't get {} {namespace}/{name}, no kubeClient defined",
        kind.no_client_name()
    )
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

/// ConfigMaps and Secrets read for one pod, by name, and the services its environment sees,
/// so that the decisions that use them (payloads, environments) are pure functions of what was
/// read.
#[derive(Clone, Default)]
pub struct FetchedObjects {
    pub namespace: String,
    pub config_maps: BTreeMap<String, Fetched<ConfigMap>>,
    pub secrets: BTreeMap<String, Fetched<Secret>>,
    /// The cluster's services (service links); none standalone.
    pub services: ServicesRead,
    /// The environment files `fileKeyRef`s name, by (volume, path), as read from the pod's
    /// emptyDir volumes.
    pub env_files: BTreeMap<(String, String), EnvFileRead>,
}

/// One environment file read for `fileKeyRef`.
#[derive(Clone, PartialEq, Eq)]
pub struct EnvFileRead {
    /// Where the file is on the host (the kubelet names it in its message for a missing key).
    pub host_path: std::path::PathBuf,
    /// Its content (at most a bound), or why it could not be read.
    pub content: std::result::Result<Vec<u8>, String>,
    /// The file is longer than the bound: `content` is its beginning.
    pub truncated: bool,
}

/// ConfigMaps in full; of a Secret only its keys, never its data.
impl std::fmt::Debug for FetchedObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secrets: BTreeMap<&String, Result<Option<Vec<&String>>, &String>> = self
            .secrets
            .iter()
            .map(|(name, fetched)| {
                let keys = fetched.as_ref().map(|secret| {
                    secret.as_ref().map(|s| {
                        s.data
                            .iter()
                            .flat_map(|d| d.keys())
                            .chain(s.string_data.iter().flat_map(|d| d.keys()))
                            .collect()
                    })
                });
                (name, keys)
            })
            .collect();
        f.debug_struct("FetchedObjects")
            .field("namespace", &self.namespace)
            .field("config_maps", &self.config_maps)
            .field("secret_keys", &secrets)
            .field("services", &services_summary(&self.services))
            // Files may hold secrets: their sizes, never their content.
            .field(
                "env_files",
                &self
                    .env_files
                    .iter()
                    .map(|(k, read)| (k, read.content.as_ref().map(Vec::len)))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// The services in a debug line: how many, not each one (a cluster has thousands).
fn services_summary(read: &ServicesRead) -> String {
    match read {
        ServicesRead::NoApiServer => "none (no API server)".into(),
        ServicesRead::NotSynced => "not yet listed".into(),
        ServicesRead::Synced(all) => format!("{} listed", all.len()),
    }
}

impl FetchedObjects {
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
        no_client_message(kind, &self.namespace, name)
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

    /// `{:?}` of [`FetchedObjects`] shows a Secret's keys, never its data.
    #[test]
    fn fetched_objects_debug_without_secrets() {
        use k8s_openapi::ByteString;

        let secret = Secret {
            data: Some(BTreeMap::from([(
                "password".to_string(),
                ByteString(b"s3cr3t-data".to_vec()),
            )])),
            string_data: Some(BTreeMap::from([(
                "api-key".to_string(),
                "s3cr3t-string".to_string(),
            )])),
            ..Default::default()
        };
        let objects = FetchedObjects {
            namespace: "prod".into(),
            config_maps: BTreeMap::new(),
            secrets: BTreeMap::from([("creds".to_string(), Ok(Some(secret)))]),
            services: ServicesRead::NotSynced,
            env_files: BTreeMap::from([(
                ("config".to_string(), "app.env".to_string()),
                EnvFileRead {
                    host_path: "/pods/u/volumes/kubernetes.io~empty-dir/config/app.env".into(),
                    content: Ok(b"TOKEN='s3cr3t-in-a-file'\n".to_vec()),
                    truncated: false,
                },
            )]),
        };
        crate::redact::assert_debug_redacted(vec![(
            "FetchedObjects",
            format!("{objects:?}"),
            vec!["s3cr3t".into(), "115, 51".into()],
            vec!["creds", "password", "api-key"],
        )]);
    }
}
