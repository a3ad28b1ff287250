//! Whether a container that is not running should be (re)started now, given the runtime's view
//! of it: the spec rules of [`crate::podspec::restart`] applied to its newest instance.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cri::{ContainerState, PodRuntime};
use crate::podspec::restart::container_should_restart;

/// True when the kubelet would (re)start this container now or after its backoff:
/// never while the pod is being deleted; always when it never ran or is in an unknown/created
/// state; otherwise as [`container_should_restart`] says for the exit code of its newest
/// instance (container rules, then the container's policy, then the pod's).
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
        ContainerState::Exited => container_should_restart(container, pod, latest.exit_code),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::RuntimeContainer;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn instance(state: ContainerState, exit_code: i32) -> RuntimeContainer {
        RuntimeContainer {
            id: "c1".into(),
            name: "app".into(),
            sandbox_id: "s".into(),
            state,
            exit_code,
            ..Default::default()
        }
    }

    #[test]
    fn table() {
        use ContainerState::*;
        // (policy, deleted, latest instance, expected)
        type Case = (
            Option<&'static str>,
            bool,
            Option<(ContainerState, i32)>,
            bool,
        );
        let cases: Vec<Case> = vec![
            (Some("Always"), false, None, true),
            (Some("Never"), false, None, true),
            (Some("Always"), false, Some((Running, 0)), false),
            (Some("Always"), false, Some((Exited, 0)), true),
            (Some("Always"), false, Some((Exited, 1)), true),
            (None, false, Some((Exited, 0)), true),
            (Some("OnFailure"), false, Some((Exited, 0)), false),
            (Some("OnFailure"), false, Some((Exited, 2)), true),
            (Some("Never"), false, Some((Exited, 2)), false),
            (Some("Never"), false, Some((Unknown, 0)), true),
            (Some("Never"), false, Some((Created, 0)), true),
            (Some("Always"), true, None, false),
            (Some("Always"), true, Some((Exited, 1)), false),
        ];
        for (policy, deleted, latest, want) in cases {
            let container = Container {
                name: "app".into(),
                ..Default::default()
            };
            let mut pod = Pod {
                spec: Some(PodSpec {
                    restart_policy: policy.map(str::to_string),
                    containers: vec![container.clone()],
                    ..Default::default()
                }),
                ..Default::default()
            };
            if deleted {
                pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
            }
            let mut runtime = PodRuntime::empty("u");
            if let Some((state, code)) = latest {
                runtime.containers.push(instance(state, code));
            }
            assert_eq!(
                should_container_be_restarted(&container, &pod, &runtime),
                want,
                "policy={policy:?} deleted={deleted} latest={latest:?}"
            );
        }
    }
}
