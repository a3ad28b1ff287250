//! Whether a container that exited should be restarted, per its restart rules and policy and the
//! pod's restartPolicy. Whether it is restarted now, given what the runtime reports, is
//! `status::restart::should_container_be_restarted`.

use k8s_openapi::api::core::v1::{Container, Pod};

/// Whether a container that exited with `exit_code` is restarted, per the API's
/// `ContainerShouldRestart`: the container's own `restartPolicyRules` first (an `In`/`NotIn`
/// exit-code rule with action `Restart`), then its own `restartPolicy`, then the pod's
/// `restartPolicy` (default `Always`).
pub fn container_should_restart(container: &Container, pod: &Pod, exit_code: i32) -> bool {
    if let Some(policy) = container.restart_policy.as_deref() {
        if matching_rule_action(container, exit_code) == Some("Restart") {
            return true;
        }
        match policy {
            "Always" => return true,
            "OnFailure" => return exit_code != 0,
            "Never" => return false,
            _ => {}
        }
    }
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("OnFailure") => exit_code != 0,
        Some("Never") => false,
        _ => true,
    }
}

/// The action of the first of the container's `restartPolicyRules` whose exit codes match.
fn matching_rule_action(container: &Container, exit_code: i32) -> Option<&str> {
    container
        .restart_policy_rules
        .iter()
        .flatten()
        .find(|rule| {
            rule.exit_codes.as_ref().is_some_and(|codes| {
                let listed = codes.values.iter().flatten().any(|v| *v == exit_code);
                match codes.operator.as_str() {
                    "In" => listed,
                    "NotIn" => !listed,
                    _ => false,
                }
            })
        })
        .map(|rule| rule.action.as_str())
}

/// Whether this exit triggers an in-place restart of the whole pod (`RestartAllContainers`).
pub fn restart_all_containers_on_exit(container: &Container, exit_code: i32) -> bool {
    matching_rule_action(container, exit_code) == Some("RestartAllContainers")
}
