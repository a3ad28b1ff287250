//! Whether a container that is not running should be (re)started, per the pod's restartPolicy.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cri::{ContainerState, PodRuntime};

/// The pod's restartPolicy, defaulting to `Always` as the API does.
pub fn pod_restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// True when the kubelet would (re)start this container now or after its backoff:
/// never while the pod is being deleted; always when it never ran or is in an unknown/created
/// state; otherwise as the restart policy says for the exit code of its newest instance.
pub fn should_container_be_restarted(
    container: &Container,
    pod: &Pod,
    runtime: &PodRuntime,
) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(latest) = runtime.latest(&container.name) else {
        return true;
    };
    match latest.state {
        ContainerState::Running => false,
        ContainerState::Unknown | ContainerState::Created => true,
        ContainerState::Exited => match pod_restart_policy(pod) {
            "Never" => false,
            "OnFailure" => latest.exit_code != 0,
            _ => true,
        },
    }
}
