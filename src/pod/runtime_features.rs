//! Admission against what the runtime declared it can do (the kubelet's
//! `rejectPodAdmissionBasedOnSupplementalGroupsPolicy`): a pod that asks for
//! `supplementalGroupsPolicy: Strict` on a runtime that does not state support for it is
//! rejected, instead of running with the image's groups merged in (containerd before 2.0 drops
//! the field). A pod that sets `hostUsers` while the `UserNamespacesSupport` gate is off, or asks
//! for its own user namespace (`hostUsers: false`) on the default runtime handler when that does
//! not declare user namespaces (containerd 1.6 declares nothing), is rejected with
//! `UserNamespacesNotSupported` and the kubelet's sandbox-creation message; a pod with a
//! RuntimeClass has its handler checked when its sandbox is created (`sync::executor`).

use k8s_openapi::api::core::v1::Pod;

use crate::lifecycle::admission::{AdmitResult, PodAdmitAttributes, PodAdmitHandler, Rejection};

/// The kubelet's admission reason.
pub const SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED: &str = "SupplementalGroupsPolicyNotSupported";

/// Pure: the verdict for `pod` on a runtime that does (`supported`) or does not apply the
/// policy. `Merge` is what every runtime does anyway.
pub fn admit_supplemental_groups_policy(pod: &Pod, supported: bool) -> AdmitResult {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.supplemental_groups_policy.as_deref());
    match policy {
        None | Some("Merge") => Ok(()),
        Some(_) if supported => Ok(()),
        Some(policy) => Err(Rejection::new(
            SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED,
            format!("SupplementalGroupsPolicy={policy} is not supported in this node"),
        )),
    }
}

/// Pure: the verdict for `pod`'s `hostUsers` with the `UserNamespacesSupport` gate at `gate`
/// and a default runtime handler that does (`default_handler_supports`) or does not declare
/// user namespaces. A pod naming a RuntimeClass is judged on its handler at sandbox creation.
pub fn admit_user_namespaces(pod: &Pod, gate: bool, default_handler_supports: bool) -> AdmitResult {
    let spec = pod.spec.as_ref();
    let host_users = spec.and_then(|s| s.host_users);
    let runtime_class = spec
        .and_then(|s| s.runtime_class_name.as_deref())
        .filter(|c| !c.is_empty());
    let supports = default_handler_supports || runtime_class.is_some();
    crate::userns::decide(host_users, gate, "", supports)
        .map(|_| ())
        .map_err(|message| Rejection::new(crate::userns::NOT_SUPPORTED_REASON, message))
}

/// The handler, with what the runtime's `Status` stated when nodelet connected.
#[derive(Debug, Clone)]
pub struct RuntimeFeaturesAdmitHandler {
    /// What the runtime's `Status` states, as last read.
    pub features: crate::cri::features::RuntimeFeaturesView,
    /// The `UserNamespacesSupport` gate.
    pub user_namespaces_gate: bool,
}

impl PodAdmitHandler for RuntimeFeaturesAdmitHandler {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> AdmitResult {
        admit_supplemental_groups_policy(attrs.pod, self.features.supplemental_groups_policy())?;
        admit_user_namespaces(
            attrs.pod,
            self.user_namespaces_gate,
            self.features.user_namespaces(""),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(policy: Option<&str>) -> Pod {
        let mut p: Pod = serde_yaml::from_str(
            "metadata: {name: p}\nspec:\n  containers: [{name: c, image: i}]\n  securityContext: {}\n",
        )
        .expect("pod");
        if let Some(policy) = policy {
            p.spec
                .as_mut()
                .and_then(|s| s.security_context.as_mut())
                .expect("securityContext")
                .supplemental_groups_policy = Some(policy.into());
        }
        p
    }

    #[test]
    fn host_users_false_needs_the_gate_and_a_handler_that_declares_user_namespaces() {
        let pod = |host_users: Option<bool>, class: Option<&str>| {
            let mut p = pod(None);
            let spec = p.spec.as_mut().expect("spec");
            spec.host_users = host_users;
            spec.runtime_class_name = class.map(str::to_string);
            p
        };
        let rejected = |message: &str| {
            Err(Rejection::new(
                "UserNamespacesNotSupported",
                message.to_string(),
            ))
        };
        let unsupported =
            "can't set `spec.hostUsers: false`, runtime does not support user namespaces";
        let gate_off =
            "the feature gate \"UserNamespacesSupport\" is disabled: can't set spec.HostUsers";
        let cases = [
            (None, None, true, false, Ok(())),
            (None, None, false, false, Ok(())),
            (Some(true), None, true, false, Ok(())),
            (Some(true), None, false, true, rejected(gate_off)),
            (Some(false), None, true, true, Ok(())),
            (Some(false), None, true, false, rejected(unsupported)),
            (Some(false), None, false, true, rejected(gate_off)),
            // The RuntimeClass's handler is checked when the sandbox is created.
            (Some(false), Some("kata"), true, false, Ok(())),
            (Some(false), Some("kata"), false, false, rejected(gate_off)),
        ];
        for (host_users, class, gate, supports, want) in cases {
            assert_eq!(
                admit_user_namespaces(&pod(host_users, class), gate, supports),
                want,
                "hostUsers {host_users:?} class {class:?} gate={gate} supports={supports}"
            );
        }
    }

    #[test]
    fn strict_needs_a_runtime_that_says_it_applies_it() {
        let rejected = Err(Rejection::new(
            "SupplementalGroupsPolicyNotSupported",
            "SupplementalGroupsPolicy=Strict is not supported in this node".into(),
        ));
        let cases = [
            (None, false, Ok(())),
            (Some("Merge"), false, Ok(())),
            (Some("Strict"), true, Ok(())),
            (Some("Strict"), false, rejected),
        ];
        for (policy, supported, want) in cases {
            assert_eq!(
                admit_supplemental_groups_policy(&pod(policy), supported),
                want,
                "{policy:?} supported={supported}"
            );
        }
    }
}
