//! Admission against what the runtime declared it can do (the kubelet's
//! `rejectPodAdmissionBasedOnSupplementalGroupsPolicy`): a pod that asks for
//! `supplementalGroupsPolicy: Strict` on a runtime that does not state support for it is
//! rejected, instead of running with the image's groups merged in (containerd before 2.0 drops
//! the field).

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

/// The handler, with what the runtime's `Status` stated when nodelet connected.
#[derive(Debug, Clone)]
pub struct RuntimeFeaturesAdmitHandler {
    /// What the runtime's `Status` states, as last read.
    pub features: crate::cri::features::RuntimeFeaturesView,
}

impl PodAdmitHandler for RuntimeFeaturesAdmitHandler {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> AdmitResult {
        admit_supplemental_groups_policy(attrs.pod, self.features.supplemental_groups_policy())
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
