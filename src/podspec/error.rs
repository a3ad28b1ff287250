//! Why a pod's runtime config cannot be built, and the field paths those errors name.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;

use super::field::{BadValue, FieldError, FieldErrorKind};
use super::references::ObjectKind;

/// Why the kubelet could not build a container's (or sandbox's) runtime config. The Display
/// text becomes the container's `CreateContainerConfigError` message; where the kubelet has a
/// message of its own, this is it. A bad field of the spec is the one [`FieldError`] (path,
/// kind, value, detail), as in the configuration file and pod validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A field of the spec that is missing or has a value nodelet cannot use:
    /// `spec.dnsPolicy: Invalid value: "Sometimes": supported values: ...`.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// A valid spec that nodelet cannot run yet. Not a
    /// [`FieldError`]: the API server accepts the field, only this node lacks the feature, so
    /// the message says that and names the field: `spec.hostUsers: ... is not supported yet`.
    #[error("{field}: {feature} is not supported yet")]
    Unsupported { field: String, feature: String },
    /// A ConfigMap or Secret reference in standalone mode (the kubelet's message without a
    /// client).
    #[error("couldn't get {kind} {namespace}/{name}, no kubeClient defined")]
    NoApiClient {
        field: String,
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// A ConfigMap or Secret the environment needs does not exist: the API's NotFound message,
    /// which the kubelet passes on (`configmap "x" not found`).
    #[error("{} {name:?} not found", kind.resource())]
    ObjectNotFound {
        field: String,
        kind: ObjectKind,
        name: String,
    },
    /// A ConfigMap or Secret could not be read (API server unreachable before the first read,
    /// forbidden, ...); the message is the reader's.
    #[error("{message}")]
    ObjectUnavailable { field: String, message: String },
    /// A `configMapKeyRef`/`secretKeyRef` names a key the object does not have.
    #[error("couldn't find key {key} in {} {namespace}/{name}", kind.kind())]
    MissingKey {
        field: String,
        kind: ObjectKind,
        key: String,
        namespace: String,
        name: String,
    },
    /// A `fileKeyRef` names a volume that is not an emptyDir of the pod (the kubelet's message).
    #[error("cannot find the volume {volume:?} referenced by FileKeyRef")]
    EnvFileVolumeNotFound { field: String, volume: String },
    /// The environment file could not be read or parsed: the kubelet says "couldn't parse env
    /// file" and logs why; here the why follows, naming the file inside its volume.
    #[error("couldn't parse env file {path:?} in volume {volume:?}: {reason}")]
    EnvFileUnparsable {
        field: String,
        volume: String,
        path: String,
        reason: String,
    },
    /// The key is not assigned in the file and the reference is not optional (the kubelet's
    /// message, with the file's host path).
    #[error("environment variable key {key:?} not found in file {path:?}")]
    EnvFileKeyNotFound {
        field: String,
        key: String,
        path: PathBuf,
    },
    /// `spec.enableServiceLinks` unset: the API server and the sources default it, so only a
    /// pod that skipped defaulting gets here (the kubelet's own message).
    #[error("nil pod.spec.enableServiceLinks encountered, cannot construct envvars")]
    EnableServiceLinksUnset,
    /// Cluster mode: the services watch has not completed its first list, so the service
    /// variables are not known yet (the kubelet's own message); the start is retried.
    #[error("services have not yet been read at least once, cannot construct envvars")]
    ServicesNotSynced,
    #[error("cannot find volume {volume:?} to mount into container {container:?}")]
    MissingVolume {
        field: String,
        volume: String,
        container: String,
    },
    /// The subPath directory could not be created or resolves outside its volume. As the
    /// kubelet does, the message leaves out host paths; `path` and `reason` keep them for logs.
    #[error("failed to prepare subPath for volumeMount {volume:?} of container {container:?}")]
    SubPath {
        field: String,
        volume: String,
        container: String,
        path: PathBuf,
        reason: String,
    },
    /// The pod asks for something the runtime (handler) declared it cannot do, where the
    /// kubelet refuses rather than let the runtime drop it; the message is the kubelet's.
    #[error("{message}")]
    RuntimeLacks { field: String, message: String },
    /// `setHostnameAsFQDN` with an FQDN the kernel cannot take as a hostname (over 64
    /// characters): the sandbox is not made (the kubelet's `GeneratePodSandboxConfig` message).
    #[error("failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long (64 characters is the max, {} characters requested)", fqdn.len())]
    FqdnTooLong { fqdn: String },
    #[error("container's runAsUser breaks non-root policy (pod: {pod:?}, container: {container})")]
    RunAsRoot { pod: String, container: String },
    #[error("container has runAsNonRoot and image will run as root (pod: {pod:?}, container: {container})")]
    ImageRunsAsRoot { pod: String, container: String },
    #[error("container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root (pod: {pod:?}, container: {container})")]
    NonNumericImageUser {
        user: String,
        pod: String,
        container: String,
    },
    /// `validation.IsValidUserID` of the image's uid failed (it must fit the API's 0..=2^31-1).
    #[error("container has runAsNonRoot and image has an invalid user id ({uid}). (Must be 1-(2147483647)): must be between 0 and 2147483647, inclusive (pod: {pod:?}, container: {container})")]
    InvalidImageUid {
        uid: i64,
        pod: String,
        container: String,
    },
}

impl ConfigError {
    /// `<field>: Required value`.
    pub fn required(field: impl Into<String>) -> Self {
        ConfigError::Field(FieldError {
            path: field.into(),
            kind: FieldErrorKind::Required,
            value: None,
            detail: String::new(),
        })
    }

    /// `<field>: Invalid value: "<value>": <reason>`.
    pub fn invalid(
        field: impl Into<String>,
        value: impl BadValue,
        reason: impl Into<String>,
    ) -> Self {
        ConfigError::Field(FieldError {
            path: field.into(),
            kind: FieldErrorKind::Invalid,
            value: Some(value.render()),
            detail: reason.into(),
        })
    }

    /// A feature nodelet does not implement yet: `<field>: <feature> is not supported yet`.
    pub fn unsupported(field: impl Into<String>, feature: impl std::fmt::Display) -> Self {
        ConfigError::Unsupported {
            field: field.into(),
            feature: feature.to_string(),
        }
    }
}

/// `spec.containers[i]`, `spec.initContainers[i]` or `spec.ephemeralContainers[i]` for the
/// named container, for error paths.
pub fn container_field_path(pod: &Pod, name: &str) -> String {
    let spec = pod.spec.as_ref();
    if let Some(i) = spec
        .and_then(|s| s.init_containers.as_ref())
        .and_then(|c| c.iter().position(|c| c.name == name))
    {
        return format!("spec.initContainers[{i}]");
    }
    if let Some(i) = spec
        .and_then(|s| s.ephemeral_containers.as_ref())
        .and_then(|c| c.iter().position(|c| c.name == name))
    {
        return format!("spec.ephemeralContainers[{i}]");
    }
    match spec.and_then(|s| s.containers.iter().position(|c| c.name == name)) {
        Some(i) => format!("spec.containers[{i}]"),
        None => format!("spec.containers[name={name}]"),
    }
}
