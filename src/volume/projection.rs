//! What goes into a configMap, secret, downwardAPI or projected volume: pure functions from the
//! volume source, the pod and the objects read for it to a [`Payload`] for the atomic writer
//! (`MakePayload` in `pkg/volume/configmap` and `pkg/volume/secret`, `CollectData` in
//! `pkg/volume/downwardapi`, `collectData` in `pkg/volume/projected`). Error texts are the
//! kubelet's; the caller prefixes them with `MountVolume.SetUp failed for volume "x" : `.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, Pod, Secret,
    ServiceAccountTokenProjection, Volume,
};

use super::atomic_writer::{FileProjection, Payload};
use crate::objects::{FetchedTokens, TokenRequest};
use crate::podspec::env::{format_map, resource_field_ref_value, split_subscript, EnvContext};
use crate::podspec::references::{not_found_message, Fetched, FetchedObjects, ObjectKind};

/// The API default of `defaultMode` for configMap, secret, downwardAPI and projected volumes
/// (`0644`, 420 in JSON), used when a pod was not defaulted (static pods read from disk are).
pub const DEFAULT_MODE: i32 = 0o644;

/// The node's allocatable resources: with the pod-level limits, the Downward API's `limits.*`
/// of a container that sets no limit.
pub use crate::podspec::resources::NodeAllocatable;

/// The volume types whose content nodelet projects, with the kubelet's plugin directory and
/// backing: secrets, the Downward API and projected volumes live on a tmpfs, ConfigMaps on the
/// node's disk (the kubelet's `wrappedVolumeSpec` of each plugin).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ApiVolumeKind {
    ConfigMap,
    Secret,
    DownwardApi,
    Projected,
}

impl ApiVolumeKind {
    /// The kind of `volume`, if it is one of the projected-content types.
    pub fn of(volume: &Volume) -> Option<ApiVolumeKind> {
        if volume.config_map.is_some() {
            Some(ApiVolumeKind::ConfigMap)
        } else if volume.secret.is_some() {
            Some(ApiVolumeKind::Secret)
        } else if volume.downward_api.is_some() {
            Some(ApiVolumeKind::DownwardApi)
        } else if volume.projected.is_some() {
            Some(ApiVolumeKind::Projected)
        } else {
            None
        }
    }

    /// The directory under `<pod>/volumes/`.
    pub fn plugin_dir(self) -> &'static str {
        match self {
            ApiVolumeKind::ConfigMap => "kubernetes.io~configmap",
            ApiVolumeKind::Secret => "kubernetes.io~secret",
            ApiVolumeKind::DownwardApi => "kubernetes.io~downward-api",
            ApiVolumeKind::Projected => "kubernetes.io~projected",
        }
    }

    /// Whether the kubelet backs the volume with a tmpfs (so secrets never touch the disk).
    pub fn memory_backed(self) -> bool {
        !matches!(self, ApiVolumeKind::ConfigMap)
    }
}

/// A mode from the API (validated to 0..=0777) as file mode bits.
fn file_mode(mode: Option<i32>, default_mode: i32) -> u32 {
    let mode = mode.unwrap_or(default_mode);
    u32::try_from(mode).unwrap_or(0o644) & 0o7777
}

/// `utilerrors.NewAggregate(errs).Error()`: one message as is, several (duplicates dropped) as
/// `[a, b]`.
pub fn aggregate(errs: &[String]) -> Option<String> {
    let mut seen: Vec<&str> = Vec::new();
    for e in errs {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.len() {
        0 => None,
        1 => Some(seen[0].to_string()),
        _ => Some(format!("[{}]", seen.join(", "))),
    }
}

/// `configmap.MakePayload`: every key (`data` then `binaryData`) at its own name, or only the
/// listed `items` at their paths. A listed key that is missing fails the volume unless it is
/// `optional`.
pub fn config_map_payload(
    items: &[KeyToPath],
    config_map: Option<&ConfigMap>,
    default_mode: i32,
    optional: bool,
) -> Result<Payload, String> {
    let data = config_map.and_then(|c| c.data.as_ref());
    let binary = config_map.and_then(|c| c.binary_data.as_ref());
    let entries: Vec<(&str, &[u8])> = data
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_bytes()))
        .chain(
            binary
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.as_str(), v.0.as_slice())),
        )
        .collect();
    keyed_payload(items, &entries, default_mode, optional, |key| {
        format!("configmap references non-existent config key: {key}")
    })
}

/// `secret.MakePayload`: like [`config_map_payload`] over the Secret's `data`.
pub fn secret_payload(
    items: &[KeyToPath],
    secret: Option<&Secret>,
    default_mode: i32,
    optional: bool,
) -> Result<Payload, String> {
    let entries: Vec<(&str, &[u8])> = secret
        .and_then(|s| s.data.as_ref())
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.0.as_slice()))
        .collect();
    keyed_payload(items, &entries, default_mode, optional, |key| {
        format!("references non-existent secret key: {key}")
    })
}

/// The payload of a keyed object (`entries` in lookup order): with no `items` every key at its
/// own name with the default mode (a later entry of the same key wins), else each listed key
/// (its first entry) at the item's path and mode; a missing key is `missing_key(key)` unless
/// `optional`.
fn keyed_payload(
    items: &[KeyToPath],
    entries: &[(&str, &[u8])],
    default_mode: i32,
    optional: bool,
    missing_key: impl Fn(&str) -> String,
) -> Result<Payload, String> {
    let mut payload = Payload::new();
    let file = |data: &[u8], mode| FileProjection {
        data: data.to_vec(),
        mode,
        fs_user: None,
    };
    if items.is_empty() {
        for (name, data) in entries {
            payload.insert(name.to_string(), file(data, file_mode(None, default_mode)));
        }
        return Ok(payload);
    }
    for item in items {
        let Some((_, data)) = entries.iter().find(|(key, _)| *key == item.key) else {
            if optional {
                continue;
            }
            return Err(missing_key(&item.key));
        };
        payload.insert(
            item.path.clone(),
            file(data, file_mode(item.mode, default_mode)),
        );
    }
    Ok(payload)
}

/// The object a volume refers to, or the kubelet's error: a missing object is an empty one
/// when `optional`, else `configmap "x" not found`; a failed read is its error.
fn resolve<'a, T>(
    read: Fetched<&'a T>,
    kind: ObjectKind,
    name: &str,
    optional: bool,
) -> Result<Option<&'a T>, String> {
    match read {
        Ok(Some(object)) => Ok(Some(object)),
        Ok(None) if optional => Ok(None),
        Ok(None) => Err(not_found_message(kind, name)),
        Err(message) => Err(message),
    }
}

/// `fieldpath.ExtractFieldPathAsString` on the pod: the metadata fields a downwardAPI volume
/// may project.
pub fn volume_field_value(pod: &Pod, path: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    if let Some((head, key)) = split_subscript(path) {
        return match head {
            "metadata.annotations" => Ok(meta
                .annotations
                .as_ref()
                .and_then(|m| m.get(key))
                .cloned()
                .unwrap_or_default()),
            "metadata.labels" => Ok(meta
                .labels
                .as_ref()
                .and_then(|m| m.get(key))
                .cloned()
                .unwrap_or_default()),
            _ => Err(format!("fieldPath {path:?} does not support subscript")),
        };
    }
    match path {
        "metadata.annotations" => Ok(format_map(meta.annotations.as_ref())),
        "metadata.labels" => Ok(format_map(meta.labels.as_ref())),
        "metadata.name" => Ok(meta.name.clone().unwrap_or_default()),
        "metadata.namespace" => Ok(meta.namespace.clone().unwrap_or_default()),
        "metadata.uid" => Ok(meta.uid.clone().unwrap_or_default()),
        _ => Err(format!("unsupported fieldPath: {path}")),
    }
}

/// The container named `name` (regular first, then init), as `findContainerInPod`.
fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers.iter().find(|c| c.name == name).or_else(|| {
        spec.init_containers
            .iter()
            .flatten()
            .find(|c| c.name == name)
    })
}

/// `downwardapi.CollectData`: one file per item (an item with neither reference is an empty
/// file); errors of all items are collected, not just the first.
pub fn downward_api_payload(
    items: &[DownwardAPIVolumeFile],
    pod: &Pod,
    default_mode: i32,
    node: &NodeAllocatable,
    field: &str,
) -> Result<Payload, String> {
    let ctx = EnvContext {
        pod_ips: &[],
        host_ips: &[],
        node_name: "",
        node_allocatable: *node,
    };
    let mut errs = Vec::new();
    let mut payload = Payload::new();
    for (i, item) in items.iter().enumerate() {
        let mut data = Vec::new();
        if let Some(f) = &item.field_ref {
            match volume_field_value(pod, &f.field_path) {
                Ok(v) => data = v.into_bytes(),
                Err(e) => errs.push(e),
            }
        } else if let Some(r) = &item.resource_field_ref {
            let name = r.container_name.as_deref().unwrap_or_default();
            match find_container(pod, name) {
                None => errs.push(format!("container {name} not found")),
                Some(container) => {
                    let item_field = format!("{field}.items[{i}].resourceFieldRef");
                    match resource_field_ref_value(pod, container, r, &item_field, &ctx) {
                        Ok(v) => data = v.into_bytes(),
                        Err(e) => errs.push(e.to_string()),
                    }
                }
            }
        }
        payload.insert(
            item.path.clone(),
            FileProjection {
                data,
                mode: file_mode(item.mode, default_mode),
                fs_user: None,
            },
        );
    }
    match aggregate(&errs) {
        Some(e) => Err(e),
        None => Ok(payload),
    }
}

/// The API default of a `serviceAccountToken` source's `expirationSeconds` (one hour), for
/// pods that were not defaulted.
pub const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;
const MIN_TOKEN_EXPIRATION_SECONDS: i64 = 600;
const MAX_TOKEN_EXPIRATION_SECONDS: i64 = 1 << 32;

/// The service account the pod runs as: `serviceAccountName`, else the deprecated
/// `serviceAccount`, else `default` (what the API server's admission would have set).
pub fn pod_service_account(pod: &Pod) -> &str {
    let spec = pod.spec.as_ref();
    [
        spec.and_then(|s| s.service_account_name.as_deref()),
        spec.and_then(|s| s.service_account.as_deref()),
    ]
    .into_iter()
    .flatten()
    .find(|n| !n.is_empty())
    .unwrap_or("default")
}

/// The TokenRequest of one `serviceAccountToken` source of `pod` (`field` is the source's path,
/// for errors): the pod's service account in its namespace, the source's audience (none: the API
/// server's) and `expirationSeconds` (default one hour, at least 10 minutes, at most 2^32
/// seconds, as the API server validates), bound to the pod.
pub fn token_request(
    pod: &Pod,
    source: &ServiceAccountTokenProjection,
    field: &str,
) -> Result<TokenRequest, String> {
    let seconds = source
        .expiration_seconds
        .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS);
    let invalid =
        |reason: &str| format!("{field}.expirationSeconds: Invalid value: {seconds}: {reason}");
    if seconds < MIN_TOKEN_EXPIRATION_SECONDS {
        return Err(invalid("may not specify a duration less than 10 minutes"));
    }
    if seconds > MAX_TOKEN_EXPIRATION_SECONDS {
        return Err(invalid(
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    let meta = &pod.metadata;
    Ok(TokenRequest {
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        service_account: pod_service_account(pod).to_string(),
        audiences: source
            .audience
            .iter()
            .filter(|a| !a.is_empty())
            .cloned()
            .collect(),
        expiration_seconds: seconds,
        pod_name: meta.name.clone().unwrap_or_default(),
        pod_uid: meta.uid.clone().unwrap_or_default(),
    })
}

/// The TokenRequests of every `serviceAccountToken` source of the pod's projected volumes, for
/// [`FetchedTokens::fetch`]; sources that ask for an invalid lifetime are left out (their
/// volume reports it).
pub fn token_requests(pod: &Pod) -> Vec<TokenRequest> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .flat_map(|v| v.projected.iter().flat_map(|p| p.sources.iter().flatten()))
        .filter_map(|src| src.service_account_token.as_ref())
        .filter_map(|t| token_request(pod, t, "").ok())
        .collect()
}

/// `volumeutil.FsUserFrom`: the user every container (init, regular, ephemeral) runs as, when
/// each sets one (its own `runAsUser` or the pod's) and they all agree.
pub fn fs_user(pod: &Pod) -> Option<i64> {
    let spec = pod.spec.as_ref()?;
    let pod_user = spec.security_context.as_ref().and_then(|s| s.run_as_user);
    let users = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| c.security_context.as_ref().and_then(|s| s.run_as_user))
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(|c| c.security_context.as_ref().and_then(|s| s.run_as_user)),
        );
    let mut found = None;
    for user in users {
        let user = user.or(pod_user)?;
        if found.is_some_and(|f| f != user) {
            return None;
        }
        found = Some(user);
    }
    found
}

/// The token file of a `serviceAccountToken` source: the volume's `defaultMode`, but `0600` when
/// the pod has an fsUser or an fsGroup (ownership then grants the access, and fsGroup adds group
/// read), owned by the fsUser.
fn token_payload(path: &str, token: &str, pod: &Pod, default_mode: i32) -> Payload {
    let user = fs_user(pod);
    let group = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group);
    let mode = if user.is_some() || group.is_some() {
        0o600
    } else {
        file_mode(None, default_mode)
    };
    Payload::from([(
        path.to_string(),
        FileProjection {
            data: token.as_bytes().to_vec(),
            mode,
            fs_user: user.and_then(|u| u32::try_from(u).ok()),
        },
    )])
}

/// The payload of one configMap, secret, downwardAPI or projected volume of `pod` (`index` is
/// its position in `spec.volumes`, for error paths); `None` for other volume types.
pub fn volume_payload(
    volume: &Volume,
    index: usize,
    pod: &Pod,
    objects: &FetchedObjects,
    tokens: &FetchedTokens,
    node: &NodeAllocatable,
) -> Option<Result<Payload, String>> {
    let field = format!("spec.volumes[{index}]");
    if let Some(source) = &volume.config_map {
        let optional = source.optional == Some(true);
        let items = source.items.as_deref().unwrap_or_default();
        let mode = source.default_mode.unwrap_or(DEFAULT_MODE);
        return Some(
            resolve(
                objects.config_map(&source.name),
                ObjectKind::ConfigMap,
                &source.name,
                optional,
            )
            .and_then(|cm| config_map_payload(items, cm, mode, optional)),
        );
    }
    if let Some(source) = &volume.secret {
        let name = source.secret_name.as_deref().unwrap_or_default();
        let optional = source.optional == Some(true);
        let items = source.items.as_deref().unwrap_or_default();
        let mode = source.default_mode.unwrap_or(DEFAULT_MODE);
        return Some(
            resolve(objects.secret(name), ObjectKind::Secret, name, optional)
                .and_then(|s| secret_payload(items, s, mode, optional)),
        );
    }
    if let Some(source) = &volume.downward_api {
        let items = source.items.as_deref().unwrap_or_default();
        let mode = source.default_mode.unwrap_or(DEFAULT_MODE);
        return Some(downward_api_payload(
            items,
            pod,
            mode,
            node,
            &format!("{field}.downwardAPI"),
        ));
    }
    let projected = volume.projected.as_ref()?;
    let mode = projected.default_mode.unwrap_or(DEFAULT_MODE);
    let mut errs = Vec::new();
    let mut payload = Payload::new();
    for (i, src) in projected.sources.iter().flatten().enumerate() {
        let part = if let Some(cm) = &src.config_map {
            let optional = cm.optional == Some(true);
            let items = cm.items.as_deref().unwrap_or_default();
            resolve(
                objects.config_map(&cm.name),
                ObjectKind::ConfigMap,
                &cm.name,
                optional,
            )
            .and_then(|c| config_map_payload(items, c, mode, optional))
        } else if let Some(s) = &src.secret {
            let optional = s.optional == Some(true);
            let items = s.items.as_deref().unwrap_or_default();
            resolve(
                objects.secret(&s.name),
                ObjectKind::Secret,
                &s.name,
                optional,
            )
            .and_then(|x| secret_payload(items, x, mode, optional))
        } else if let Some(d) = &src.downward_api {
            downward_api_payload(
                d.items.as_deref().unwrap_or_default(),
                pod,
                mode,
                node,
                &format!("{field}.projected.sources[{i}].downwardAPI"),
            )
        } else if let Some(t) = &src.service_account_token {
            let source_field = format!("{field}.projected.sources[{i}].serviceAccountToken");
            token_request(pod, t, &source_field).and_then(|r| {
                tokens
                    .get(&r)
                    .map(|token| token_payload(&t.path, token, pod, mode))
            })
        } else if src.cluster_trust_bundle.is_some() {
            Err(unsupported_source("clusterTrustBundle"))
        } else if src.pod_certificate.is_some() {
            Err(unsupported_source("podCertificate"))
        } else {
            Ok(Payload::new())
        };
        match part {
            Ok(files) => payload.extend(files),
            Err(e) => errs.push(e),
        }
    }
    Some(match aggregate(&errs) {
        Some(e) => Err(e),
        None => Ok(payload),
    })
}

fn unsupported_source(kind: &str) -> String {
    format!("projected volume sources of type {kind} are not supported by nodelet yet")
}

/// The objects the projected-content volumes of `pod` refer to, for
/// [`FetchedObjects::fetch`].
pub fn volume_references(pod: &Pod) -> crate::podspec::references::References {
    let mut refs = crate::podspec::references::References::default();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(c) = &v.config_map {
            refs.config_maps.insert(c.name.clone());
        }
        if let Some(s) = &v.secret {
            refs.secrets
                .insert(s.secret_name.clone().unwrap_or_default());
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(c) = &src.config_map {
                refs.config_maps.insert(c.name.clone());
            }
            if let Some(s) = &src.secret {
                refs.secrets.insert(s.name.clone());
            }
        }
    }
    refs
}

/// Keeps only names, for error-free display in tests and logs.
pub fn payload_summary(payload: &Payload) -> BTreeMap<String, (String, u32)> {
    payload
        .iter()
        .map(|(k, f)| {
            (
                k.clone(),
                (String::from_utf8_lossy(&f.data).into_owned(), f.mode),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ConfigMapProjection, ConfigMapVolumeSource, DownwardAPIProjection, DownwardAPIVolumeSource,
        ObjectFieldSelector, PodSpec, ProjectedVolumeSource, ResourceFieldSelector,
        SecretProjection, SecretVolumeSource, ServiceAccountTokenProjection, VolumeProjection,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::ByteString;

    use super::*;
    use crate::podspec::resources::test_support::container;

    const NODE: NodeAllocatable = NodeAllocatable {
        cpu_milli: 4000,
        memory: 8 << 30,
        ephemeral_storage: None,
    };

    fn item(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
        KeyToPath {
            key: key.into(),
            path: path.into(),
            mode,
            ..Default::default()
        }
    }

    fn summary(p: &Payload) -> Vec<(String, String, u32)> {
        payload_summary(p)
            .into_iter()
            .map(|(k, (d, m))| (k, d, m))
            .collect()
    }

    fn owned(v: &[(&str, &str, u32)]) -> Vec<(String, String, u32)> {
        v.iter()
            .map(|(k, d, m)| (k.to_string(), d.to_string(), *m))
            .collect()
    }

    fn settings() -> ConfigMap {
        ConfigMap {
            data: Some(BTreeMap::from([
                ("app.conf".to_string(), "port=80".to_string()),
                ("level".to_string(), "debug".to_string()),
            ])),
            binary_data: Some(BTreeMap::from([(
                "logo.png".to_string(),
                ByteString(vec![0x89, b'P']),
            )])),
            ..Default::default()
        }
    }

    #[test]
    fn config_map_payload_table() {
        type Case<'a> = (
            &'a str,
            Vec<KeyToPath>,
            Option<ConfigMap>,
            bool,
            Result<Vec<(&'a str, &'a str, u32)>, &'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                "every key with the default mode",
                vec![],
                Some(settings()),
                false,
                Ok(vec![
                    ("app.conf", "port=80", 0o644),
                    ("level", "debug", 0o644),
                    ("logo.png", "\u{fffd}P", 0o644),
                ]),
            ),
            (
                "items map keys to paths with their own modes",
                vec![
                    item("app.conf", "etc/app.conf", Some(0o400)),
                    item("level", "lvl", None),
                ],
                Some(settings()),
                false,
                Ok(vec![
                    ("etc/app.conf", "port=80", 0o400),
                    ("lvl", "debug", 0o644),
                ]),
            ),
            (
                "a missing item key fails",
                vec![item("nope", "x", None)],
                Some(settings()),
                false,
                Err("configmap references non-existent config key: nope"),
            ),
            (
                "a missing item key of an optional volume is left out",
                vec![item("nope", "x", None), item("level", "l", None)],
                Some(settings()),
                true,
                Ok(vec![("l", "debug", 0o644)]),
            ),
            (
                "an absent optional object is empty",
                vec![],
                None,
                true,
                Ok(vec![]),
            ),
        ];
        for (name, items, cm, optional, want) in cases {
            let got = config_map_payload(&items, cm.as_ref(), DEFAULT_MODE, optional)
                .map(|p| summary(&p));
            assert_eq!(
                got,
                want.map(|w| owned(&w)).map_err(str::to_string),
                "{name}"
            );
        }
    }

    #[test]
    fn secret_payload_table() {
        let secret = Secret {
            data: Some(BTreeMap::from([
                ("tls.key".to_string(), ByteString(b"KEY".to_vec())),
                ("token".to_string(), ByteString(b"t0k".to_vec())),
            ])),
            ..Default::default()
        };
        type Case<'a> = (
            Vec<KeyToPath>,
            bool,
            Result<Vec<(&'a str, &'a str, u32)>, &'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                vec![],
                false,
                Ok(vec![("tls.key", "KEY", 0o400), ("token", "t0k", 0o400)]),
            ),
            (
                vec![item("token", "auth/token", Some(0o440))],
                false,
                Ok(vec![("auth/token", "t0k", 0o440)]),
            ),
            (
                vec![item("nope", "x", None)],
                false,
                Err("references non-existent secret key: nope"),
            ),
            (vec![item("nope", "x", None)], true, Ok(vec![])),
        ];
        for (items, optional, want) in cases {
            let got = secret_payload(&items, Some(&secret), 0o400, optional).map(|p| summary(&p));
            assert_eq!(
                got,
                want.map(|w| owned(&w)).map_err(str::to_string),
                "{items:?}"
            );
        }
    }

    fn downward_pod() -> Pod {
        let app = container("app", "cpu=250m,memory=64Mi", "memory=128Mi");
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("prod".into()),
                uid: Some("uid-1".into()),
                labels: Some(BTreeMap::from([
                    ("app".to_string(), "web".to_string()),
                    ("tier".to_string(), "front".to_string()),
                ])),
                annotations: Some(BTreeMap::from([(
                    "note".to_string(),
                    "say \"hi\"".to_string(),
                )])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![app],
                init_containers: Some(vec![container("setup", "", "")]),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn field_item(path: &str, field: &str) -> DownwardAPIVolumeFile {
        DownwardAPIVolumeFile {
            path: path.into(),
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".into()),
                field_path: field.into(),
            }),
            ..Default::default()
        }
    }

    fn resource_item(path: &str, c: &str, resource: &str, divisor: &str) -> DownwardAPIVolumeFile {
        DownwardAPIVolumeFile {
            path: path.into(),
            resource_field_ref: Some(ResourceFieldSelector {
                container_name: Some(c.into()),
                divisor: Some(ApiQuantity(divisor.into())),
                resource: resource.into(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn downward_api_payload_table() {
        type Case<'a> = (
            &'a str,
            Vec<DownwardAPIVolumeFile>,
            Result<Vec<(&'a str, &'a str, u32)>, &'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                "metadata fields and subscripts",
                vec![
                    field_item("labels", "metadata.labels"),
                    field_item("annotations", "metadata.annotations"),
                    field_item("name", "metadata.name"),
                    field_item("ns", "metadata.namespace"),
                    field_item("uid", "metadata.uid"),
                    field_item("app", "metadata.labels['app']"),
                    field_item("none", "metadata.annotations['none']"),
                    DownwardAPIVolumeFile {
                        mode: Some(0o600),
                        ..field_item("sub/dir/name", "metadata.name")
                    },
                ],
                Ok(vec![
                    ("annotations", "note=\"say \\\"hi\\\"\"", 0o644),
                    ("app", "web", 0o644),
                    ("labels", "app=\"web\"\ntier=\"front\"", 0o644),
                    ("name", "web", 0o644),
                    ("none", "", 0o644),
                    ("ns", "prod", 0o644),
                    ("sub/dir/name", "web", 0o600),
                    ("uid", "uid-1", 0o644),
                ]),
            ),
            (
                "resources with divisors; missing limits fall back to the node",
                vec![
                    resource_item("cpu_req", "app", "requests.cpu", "1m"),
                    resource_item("cpu_lim", "app", "limits.cpu", "1"),
                    resource_item("mem_lim", "app", "limits.memory", "1Mi"),
                    resource_item("init_mem", "setup", "limits.memory", "1Gi"),
                ],
                Ok(vec![
                    ("cpu_lim", "4", 0o644),
                    ("cpu_req", "250", 0o644),
                    ("init_mem", "8", 0o644),
                    ("mem_lim", "128", 0o644),
                ]),
            ),
            (
                "every error is reported",
                vec![
                    field_item("a", "spec.nodeName"),
                    field_item("b", "metadata.name['x']"),
                    resource_item("c", "ghost", "limits.cpu", "1"),
                    field_item("ok", "metadata.name"),
                ],
                Err("[unsupported fieldPath: spec.nodeName, fieldPath \"metadata.name['x']\" does not support subscript, container ghost not found]"),
            ),
        ];
        let pod = downward_pod();
        for (name, items, want) in cases {
            let got = downward_api_payload(&items, &pod, DEFAULT_MODE, &NODE, "spec.volumes[0]")
                .map(|p| summary(&p));
            assert_eq!(
                got,
                want.map(|w| owned(&w)).map_err(str::to_string),
                "{name}"
            );
        }
    }

    fn fetched() -> FetchedObjects {
        FetchedObjects {
            namespace: "prod".into(),
            env_files: Default::default(),
            config_maps: BTreeMap::from([
                ("settings".to_string(), Ok(Some(settings()))),
                (
                    "kube-root-ca.crt".to_string(),
                    Ok(Some(ConfigMap {
                        data: Some(BTreeMap::from([("ca.crt".to_string(), "PEM".to_string())])),
                        ..Default::default()
                    })),
                ),
                ("absent".to_string(), Ok(None)),
                (
                    "broken".to_string(),
                    Err(
                        "failed to sync configmap cache: timed out waiting for the condition"
                            .to_string(),
                    ),
                ),
            ]),
            secrets: BTreeMap::from([
                (
                    "creds".to_string(),
                    Ok(Some(Secret {
                        data: Some(BTreeMap::from([(
                            "password".to_string(),
                            ByteString(b"pw".to_vec()),
                        )])),
                        ..Default::default()
                    })),
                ),
                ("absent".to_string(), Ok(None)),
            ]),
            services: Default::default(),
        }
    }

    fn cm_volume(name: &str, optional: bool) -> Volume {
        Volume {
            name: "v".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: name.into(),
                optional: optional.then_some(true),
                items: Some(vec![item("level", "level", None)]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn secret_volume(name: &str, optional: bool, mode: Option<i32>) -> Volume {
        Volume {
            name: "v".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(name.into()),
                optional: optional.then_some(true),
                default_mode: mode,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn projected(sources: Vec<VolumeProjection>, mode: Option<i32>) -> Volume {
        Volume {
            name: "v".into(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(sources),
                default_mode: mode,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn token_source(audience: Option<&str>, seconds: Option<i64>) -> VolumeProjection {
        VolumeProjection {
            service_account_token: Some(ServiceAccountTokenProjection {
                path: "token".into(),
                audience: audience.map(str::to_string),
                expiration_seconds: seconds,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// What the ServiceAccount admission plugin adds to every pod.
    fn kube_api_access(seconds: i64) -> Volume {
        projected(
            vec![
                token_source(None, Some(seconds)),
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".into(),
                        items: Some(vec![item("ca.crt", "ca.crt", None)]),
                        optional: None,
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![field_item("namespace", "metadata.namespace")]),
                    }),
                    ..Default::default()
                },
            ],
            Some(0o644),
        )
    }

    fn request(audiences: &[&str], seconds: i64) -> TokenRequest {
        TokenRequest {
            namespace: "prod".into(),
            service_account: "default".into(),
            audiences: audiences.iter().map(|a| a.to_string()).collect(),
            expiration_seconds: seconds,
            pod_name: "web".into(),
            pod_uid: "uid-1".into(),
        }
    }

    /// Tokens read for [`downward_pod`]: its default account, with the API server's audience
    /// (one per lifetime); an error for audience `vault`.
    fn tokens() -> FetchedTokens {
        let mut t = FetchedTokens::default();
        for seconds in [3600, 3607] {
            t.insert(request(&[], seconds), Ok(format!("t0k-{seconds}")));
        }
        t.insert(
            request(&["vault"], 3600),
            Err("failed to fetch token: serviceaccounts \"default\" not found".into()),
        );
        t
    }

    #[test]
    fn token_request_table() {
        let with = |name: Option<&str>, deprecated: Option<&str>, ns: Option<&str>| {
            let mut pod = downward_pod();
            pod.metadata.namespace = ns.map(str::to_string);
            let spec = pod.spec.as_mut().unwrap();
            spec.service_account_name = name.map(str::to_string);
            spec.service_account = deprecated.map(str::to_string);
            pod
        };
        let source = |audience: Option<&str>, seconds: Option<i64>| ServiceAccountTokenProjection {
            path: "token".into(),
            audience: audience.map(str::to_string),
            expiration_seconds: seconds,
            ..Default::default()
        };
        let field = "spec.volumes[2].projected.sources[0].serviceAccountToken";
        type Case<'a> = (
            &'a str,
            Pod,
            ServiceAccountTokenProjection,
            Result<(&'a str, &'a str, Vec<&'a str>, i64), &'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                "defaults: the default account, the API server's audience, one hour",
                with(None, None, Some("prod")),
                source(None, None),
                Ok(("prod", "default", vec![], 3600)),
            ),
            (
                "the pod's account and the source's audience",
                with(Some("builder"), Some("old"), Some("prod")),
                source(Some("vault"), Some(3607)),
                Ok(("prod", "builder", vec!["vault"], 3607)),
            ),
            (
                "the deprecated field; an empty audience is none; no namespace is default",
                with(Some(""), Some("old"), None),
                source(Some(""), Some(600)),
                Ok(("default", "old", vec![], 600)),
            ),
            (
                "too short",
                with(None, None, Some("prod")),
                source(None, Some(599)),
                Err("spec.volumes[2].projected.sources[0].serviceAccountToken.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"),
            ),
            (
                "too long",
                with(None, None, Some("prod")),
                source(None, Some((1 << 32) + 1)),
                Err("spec.volumes[2].projected.sources[0].serviceAccountToken.expirationSeconds: Invalid value: 4294967297: may not specify a duration larger than 2^32 seconds"),
            ),
        ];
        for (name, pod, source, want) in cases {
            let got = token_request(&pod, &source, field);
            match want {
                Ok((ns, account, audiences, seconds)) => {
                    let got = got.unwrap();
                    assert_eq!(
                        (
                            got.namespace.as_str(),
                            got.service_account.as_str(),
                            got.audiences.iter().map(String::as_str).collect::<Vec<_>>(),
                            got.expiration_seconds,
                        ),
                        (ns, account, audiences, seconds),
                        "{name}"
                    );
                    assert_eq!(
                        (got.pod_name.as_str(), got.pod_uid.as_str()),
                        ("web", "uid-1"),
                        "{name}"
                    );
                }
                Err(message) => assert_eq!(got.unwrap_err(), message, "{name}"),
            }
        }
    }

    #[test]
    fn token_requests_of_a_pod() {
        let mut pod = downward_pod();
        pod.spec.as_mut().unwrap().volumes = Some(vec![
            kube_api_access(3607),
            projected(
                vec![
                    token_source(Some("vault"), None),
                    token_source(None, Some(60)),
                ],
                None,
            ),
            cm_volume("settings", false),
        ]);
        assert_eq!(
            token_requests(&pod),
            [request(&[], 3607), request(&["vault"], 3600)]
        );
    }

    fn security(
        pod_user: Option<i64>,
        users: &[Option<i64>],
        ephemeral: Option<Option<i64>>,
        group: Option<i64>,
    ) -> Pod {
        use k8s_openapi::api::core::v1::{EphemeralContainer, PodSecurityContext, SecurityContext};
        let mut pod = downward_pod();
        let spec = pod.spec.as_mut().unwrap();
        spec.security_context = Some(PodSecurityContext {
            run_as_user: pod_user,
            fs_group: group,
            ..Default::default()
        });
        spec.init_containers = None;
        spec.containers = users
            .iter()
            .enumerate()
            .map(|(i, u)| Container {
                name: format!("c{i}"),
                security_context: Some(SecurityContext {
                    run_as_user: *u,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        spec.ephemeral_containers = ephemeral.map(|u| {
            vec![EphemeralContainer {
                name: "debug".into(),
                security_context: Some(SecurityContext {
                    run_as_user: u,
                    ..Default::default()
                }),
                ..Default::default()
            }]
        });
        pod
    }

    #[test]
    fn fs_user_table() {
        let cases = [
            (
                "nobody sets a user",
                security(None, &[None], None, None),
                None,
            ),
            (
                "the pod's user",
                security(Some(1000), &[None, None], None, None),
                Some(1000),
            ),
            (
                "containers agree",
                security(None, &[Some(7), Some(7)], None, None),
                Some(7),
            ),
            (
                "a container overrides the pod",
                security(Some(1000), &[Some(7), None], None, None),
                None,
            ),
            (
                "one container has none",
                security(None, &[Some(7), None], None, None),
                None,
            ),
            (
                "an ephemeral container counts",
                security(Some(7), &[None], Some(Some(8)), None),
                None,
            ),
            (
                "root is a user too",
                security(Some(0), &[None], None, None),
                Some(0),
            ),
        ];
        for (name, pod, want) in cases {
            assert_eq!(fs_user(&pod), want, "{name}");
        }
    }

    #[test]
    fn token_file_mode_and_owner_table() {
        let cases = [
            (
                "the volume's mode",
                security(None, &[None], None, None),
                0o644,
                None,
            ),
            (
                "fsUser: 0600, owned",
                security(Some(1000), &[None], None, None),
                0o600,
                Some(1000),
            ),
            (
                "fsGroup: 0600 (group read comes from ownership)",
                security(None, &[None], None, Some(2000)),
                0o600,
                None,
            ),
        ];
        for (name, pod, mode, owner) in cases {
            let payload = token_payload("token", "t0k", &pod, 0o644);
            let file = &payload["token"];
            assert_eq!((file.mode, file.fs_user), (mode, owner), "{name}");
            assert_eq!(file.data, b"t0k", "{name}");
        }
    }

    #[test]
    fn volume_payload_table() {
        type Case<'a> = (
            &'a str,
            Volume,
            Option<Result<Vec<(&'a str, &'a str, u32)>, &'a str>>,
        );
        let cases: Vec<Case> = vec![
            ("not an API volume", Volume { name: "v".into(), ..Default::default() }, None),
            ("configMap", cm_volume("settings", false), Some(Ok(vec![("level", "debug", 0o644)]))),
            (
                "missing configMap",
                cm_volume("absent", false),
                Some(Err("configmap \"absent\" not found")),
            ),
            ("missing optional configMap", cm_volume("absent", true), Some(Ok(vec![]))),
            (
                "unreadable configMap, even optional",
                cm_volume("broken", true),
                Some(Err("failed to sync configmap cache: timed out waiting for the condition")),
            ),
            (
                "secret with defaultMode",
                secret_volume("creds", false, Some(0o400)),
                Some(Ok(vec![("password", "pw", 0o400)])),
            ),
            (
                "missing secret",
                secret_volume("absent", false, None),
                Some(Err("secret \"absent\" not found")),
            ),
            (
                "downwardAPI",
                Volume {
                    name: "v".into(),
                    downward_api: Some(DownwardAPIVolumeSource {
                        items: Some(vec![field_item("name", "metadata.name")]),
                        default_mode: Some(0o444),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                Some(Ok(vec![("name", "web", 0o444)])),
            ),
            (
                "projected: all sources merged with the volume's default mode",
                projected(
                    vec![
                        VolumeProjection {
                            config_map: Some(ConfigMapProjection {
                                name: "settings".into(),
                                items: Some(vec![item("level", "cfg/level", None)]),
                                optional: None,
                            }),
                            ..Default::default()
                        },
                        VolumeProjection {
                            secret: Some(SecretProjection {
                                name: "creds".into(),
                                items: None,
                                optional: None,
                            }),
                            ..Default::default()
                        },
                        VolumeProjection {
                            downward_api: Some(DownwardAPIProjection {
                                items: Some(vec![field_item("ns", "metadata.namespace")]),
                            }),
                            ..Default::default()
                        },
                        VolumeProjection {
                            secret: Some(SecretProjection {
                                name: "absent".into(),
                                items: None,
                                optional: Some(true),
                            }),
                            ..Default::default()
                        },
                    ],
                    Some(0o440),
                ),
                Some(Ok(vec![
                    ("cfg/level", "debug", 0o440),
                    ("ns", "prod", 0o440),
                    ("password", "pw", 0o440),
                ])),
            ),
            (
                "projected: the kube-api-access volume of the ServiceAccount admission plugin",
                kube_api_access(3607),
                Some(Ok(vec![
                    ("ca.crt", "PEM", 0o644),
                    ("namespace", "prod", 0o644),
                    ("token", "t0k-3607", 0o644),
                ])),
            ),
            (
                "projected: errors of every source, tokens included",
                projected(
                    vec![
                        VolumeProjection {
                            config_map: Some(ConfigMapProjection {
                                name: "absent".into(),
                                items: None,
                                optional: None,
                            }),
                            ..Default::default()
                        },
                        token_source(Some("vault"), None),
                        VolumeProjection {
                            cluster_trust_bundle: Some(Default::default()),
                            ..Default::default()
                        },
                    ],
                    None,
                ),
                Some(Err("[configmap \"absent\" not found, failed to fetch token: serviceaccounts \"default\" not found, projected volume sources of type clusterTrustBundle are not supported by nodelet yet]")),
            ),
            (
                "projected: a token that lives too short",
                projected(vec![token_source(None, Some(300))], None),
                Some(Err("spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes")),
            ),
            (
                "projected: a token that was not read",
                projected(vec![token_source(None, Some(7200))], None),
                Some(Err("failed to fetch token: cannot use TokenManager when kubelet is in standalone mode")),
            ),
        ];
        let pod = downward_pod();
        for (name, volume, want) in cases {
            let got = volume_payload(&volume, 0, &pod, &fetched(), &tokens(), &NODE)
                .map(|r| r.map(|p| summary(&p)));
            let want = want.map(|w| w.map(|v| owned(&v)).map_err(str::to_string));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn aggregate_table() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases: Vec<(Vec<String>, Option<&str>)> = vec![
            (s(&[]), None),
            (s(&["a"]), Some("a")),
            (s(&["a", "b"]), Some("[a, b]")),
            (s(&["a", "a"]), Some("a")),
            (s(&["a", "b", "a"]), Some("[a, b]")),
        ];
        for (errs, want) in cases {
            assert_eq!(aggregate(&errs).as_deref(), want, "{errs:?}");
        }
    }

    #[test]
    fn volume_references_cover_volumes_only() {
        let mut pod = downward_pod();
        pod.spec.as_mut().unwrap().volumes = Some(vec![
            cm_volume("settings", false),
            secret_volume("creds", false, None),
            projected(
                vec![VolumeProjection {
                    secret: Some(SecretProjection {
                        name: "more".into(),
                        items: None,
                        optional: None,
                    }),
                    ..Default::default()
                }],
                None,
            ),
        ]);
        let refs = volume_references(&pod);
        assert_eq!(
            refs.config_maps.into_iter().collect::<Vec<_>>(),
            ["settings"]
        );
        assert_eq!(
            refs.secrets.into_iter().collect::<Vec<_>>(),
            ["creds", "more"]
        );
    }
}
