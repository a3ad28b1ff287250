//! What a pod spec means, independent of who acts on it: the accessors every module needs
//! (with the API defaults applied, so no module re-derives them differently), the container
//! environment and Downward API values (`env`), the QoS class and which pods are static or
//! critical (`qos`), effective requests and limits (`resources`), the ConfigMaps and Secrets it
//! refers to (`references`), restart rules (`restart`), the service variables (`service_env`), the hostname (`hostname`), hugepage sizes, limits and the hugetlbfs page size (`hugepages`), image volumes and their pull policy (`image_volume`), field paths
//! and errors in apimachinery's shape with the string-format checks pod validation uses
//! (`field`), and the error a spec that cannot be turned into a runtime config gives, with its
//! field path (`error`).
//!
//! This is a leaf: it imports only the base modules (`quantity`), does no I/O and has no async,
//! so every module above can share it without importing one another (a test in
//! `tests/layering.rs` keeps it that way).

pub mod env;
pub mod env_file;
pub mod error;
pub mod field;
pub mod field_support;
#[cfg(test)]
pub mod field_walk;
pub mod hostname;
pub mod hugepages;
pub mod image_volume;
pub mod phase;
pub mod qos;
pub mod recursive_read_only;
pub mod references;
pub mod resize;
pub mod resources;
pub mod restart;
pub mod service_env;
pub mod sysctl;

pub use error::{container_field_path, ConfigError};
pub use phase::Phase;

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};

/// Which list of the pod spec a container belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    /// `spec.initContainers` (sidecars included) → `status.initContainerStatuses`.
    Init,
    /// `spec.containers` → `status.containerStatuses`.
    Regular,
    /// `spec.ephemeralContainers` (`kubectl debug`) → `status.ephemeralContainerStatuses`.
    Ephemeral,
}

impl ContainerKind {
    /// The value of the `io.nodelet.container.type` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerKind::Init => "init",
            ContainerKind::Regular => "regular",
            ContainerKind::Ephemeral => "ephemeral",
        }
    }
}

/// The annotation that marks a static pod's mirror in the API server, with the static pod's
/// config hash as its value.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The annotation naming the source a pod came from (`file`, `http`, `api`); anything but
/// `api` marks a static pod.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";

/// The value of one annotation of the pod.
pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// A static pod's mirror in the API server (`kubernetes.io/config.mirror` present).
pub fn is_mirror_pod(pod: &Pod) -> bool {
    annotation(pod, MIRROR_ANNOTATION).is_some()
}

/// `metadata.uid` (empty when unset: a pod from a source always has one).
pub fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// A restartable init container (`restartPolicy: Always`), i.e. a sidecar.
pub fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// `spec.containers`.
pub fn regular_containers(pod: &Pod) -> &[Container] {
    pod.spec.as_ref().map_or(&[], |s| s.containers.as_slice())
}

/// `spec.initContainers` (sidecars included).
pub fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[])
}

/// `spec.ephemeralContainers` (added to a running pod through the `ephemeralcontainers`
/// subresource).
pub fn ephemeral_containers(pod: &Pod) -> &[EphemeralContainer] {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_deref())
        .unwrap_or(&[])
}

/// An ephemeral container as the container it is started as (the kubelet's
/// `v1.Container(ec.EphemeralContainerCommon)`), without what an ephemeral container never
/// has (the API server forbids it, and the kubelet does not act on it for one): probes,
/// ports, resources, resize policy, lifecycle hooks, restart policy and rules.
pub fn ephemeral_as_container(e: &EphemeralContainer) -> Container {
    Container {
        name: e.name.clone(),
        image: e.image.clone(),
        image_pull_policy: e.image_pull_policy.clone(),
        command: e.command.clone(),
        args: e.args.clone(),
        working_dir: e.working_dir.clone(),
        env: e.env.clone(),
        env_from: e.env_from.clone(),
        volume_mounts: e.volume_mounts.clone(),
        volume_devices: e.volume_devices.clone(),
        security_context: e.security_context.clone(),
        stdin: e.stdin,
        stdin_once: e.stdin_once,
        tty: e.tty,
        termination_message_path: e.termination_message_path.clone(),
        termination_message_policy: e.termination_message_policy.clone(),
        ..Default::default()
    }
}

/// The pod's ephemeral containers as containers ([`ephemeral_as_container`]), in spec order.
pub fn ephemeral_as_containers(pod: &Pod) -> Vec<Container> {
    ephemeral_containers(pod)
        .iter()
        .map(ephemeral_as_container)
        .collect()
}

/// Which list `name` is in (init, regular or ephemeral); `Regular` for a name in none.
pub fn container_kind(pod: &Pod, name: &str) -> ContainerKind {
    if init_containers(pod).iter().any(|c| c.name == name) {
        ContainerKind::Init
    } else if ephemeral_containers(pod).iter().any(|c| c.name == name) {
        ContainerKind::Ephemeral
    } else {
        ContainerKind::Regular
    }
}

pub fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// The pod's restartPolicy, defaulting to `Always` as the API does.
pub fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}
