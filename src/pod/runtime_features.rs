//! Admission against what the runtime declared it can do (the kubelet's
//! `rejectPodAdmissionBasedOnSupplementalGroupsPolicy`): a pod that asks for
//! `supplementalGroupsPolicy: Strict` on a runtime that does not state support for it is
//! rejected, instead of running with the image's groups merged in (containerd before 2.0 drops
//! the field). A pod that sets `hostUsers` while the `UserNamespacesSupport` gate is off, or asks
//! for its own user namespace (`hostUsers: false`) on the default runtime handler when that does
//! not declare user namespaces (containerd 1.6 declares nothing), is rejected with
//! `UserNamespacesNotSupported` and the kubelet's sandbox-creation message; a pod with a
//! RuntimeClass has its handler checked when its sandbox is created (`sync::executor`).
//!
//! Image volumes (`spec.volumes[].image`) are mounted by the runtime (the CRI `Mount.image`),
//! which only runtimes that know the field do: a runtime that does not (containerd before 2.1,
//! CRI-O before 1.31) would start the container without the volume. Nothing in the CRI's
//! `Status` declares the support, so it is judged from the runtime's `Version` answer
//! ([`image_volume_support`]); a pod with an image volume where the runtime does not mount them,
//! or with the `ImageVolume` gate off, is rejected (`PodFieldNotSupported`, naming the field
//! and the reference), and so is a subPath of an image volume where the runtime does not know
//! `Mount.image_sub_path` (it would mount the whole image).

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

pub use crate::podspec::image_volume::{image_volume_support, ImageVolumeSupport};

/// Pure: the verdict for `pod`'s image volumes with the `ImageVolume` gate at `gate` on a
/// runtime that does what `support` says.
pub fn admit_image_volumes(pod: &Pod, gate: bool, support: &ImageVolumeSupport) -> AdmitResult {
    use crate::podspec::field_support::POD_FIELD_NOT_SUPPORTED;
    use crate::podspec::image_volume;
    let rejected = |refusal: image_volume::Refusal| {
        Err(Rejection::new(POD_FIELD_NOT_SUPPORTED, refusal.to_string()))
    };
    for (i, _, source) in image_volume::image_volumes(pod) {
        let field = format!("spec.volumes[{i}].image");
        let value = image_volume::reference(source).to_string();
        if !gate {
            return rejected(image_volume::Refusal {
                field,
                value,
                reason: image_volume::GATE_OFF.to_string(),
            });
        }
        if !support.volumes {
            return rejected(image_volume::Refusal {
                field,
                value,
                reason: image_volume::no_volumes_reason(support),
            });
        }
    }
    // Ephemeral containers are checked when they start (`sync::start`): a rejection here would
    // kill their running pod at nodelet's next restart.
    let spec = pod.spec.iter();
    let containers = spec
        .clone()
        .flat_map(|s| s.containers.iter())
        .chain(spec.flat_map(|s| s.init_containers.iter().flatten()));
    for container in containers {
        if let Err(refusal) = image_volume::check_container(pod, container, support) {
            return rejected(refusal);
        }
    }
    Ok(())
}

/// The handler, with what the runtime's `Status` stated when nodelet connected.
#[derive(Debug, Clone)]
pub struct RuntimeFeaturesAdmitHandler {
    /// What the runtime's `Status` states, as last read.
    pub features: crate::cri::features::RuntimeFeaturesView,
    /// The `UserNamespacesSupport` gate.
    pub user_namespaces_gate: bool,
    /// The `ImageVolume` gate.
    pub image_volume_gate: bool,
    /// What the runtime does with image volumes (from its `Version` answer).
    pub image_volumes: ImageVolumeSupport,
}

impl PodAdmitHandler for RuntimeFeaturesAdmitHandler {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> AdmitResult {
        admit_supplemental_groups_policy(attrs.pod, self.features.supplemental_groups_policy())?;
        admit_user_namespaces(
            attrs.pod,
            self.user_namespaces_gate,
            self.features.user_namespaces(""),
        )?;
        admit_image_volumes(attrs.pod, self.image_volume_gate, &self.image_volumes)
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
    fn image_volumes_need_the_gate_and_a_runtime_that_mounts_them() {
        let pod = |mount_extra: &str| -> Pod {
            serde_yaml::from_str(&format!(
                "metadata: {{name: p}}\nspec:\n  volumes:\n  - {{name: e, emptyDir: {{}}}}\n  - {{name: data, image: {{reference: 'reg.io/data:1'}}}}\n  containers:\n  - name: c\n    image: i\n    volumeMounts:\n    - {{name: e, mountPath: /e, subPath: x}}\n    - {{name: data, mountPath: /d{mount_extra}}}\n"
            ))
            .expect("pod")
        };
        let plain: Pod = serde_yaml::from_str(
            "metadata: {name: p}\nspec:\n  containers: [{name: c, image: i}]\n",
        )
        .expect("pod");
        let v21 = image_volume_support("containerd", "v2.1.9");
        let v22 = image_volume_support("containerd", "v2.2.0");
        let v16 = image_volume_support("containerd", "1.6.20");
        let rejected =
            |message: &str| Err(Rejection::new("PodFieldNotSupported", message.to_string()));
        let no_runtime = "spec.volumes[1].image: Unsupported value: reg.io/data:1: the container runtime (containerd 1.6.20) does not mount image volumes (the CRI's Mount.image: containerd 2.1 or CRI-O 1.31 and newer), it would start the containers without the volume";
        let gate_off = "spec.volumes[1].image: Unsupported value: reg.io/data:1: the feature gate \"ImageVolume\" is disabled on this node";
        let sub_path = "spec.containers[0].volumeMounts[1].subPath: Unsupported value: bin: the container runtime (containerd v2.1.9) does not mount a subPath of an image volume (the CRI's Mount.image_sub_path: containerd 2.2 or CRI-O 1.33 and newer), it would mount the whole image";
        let sub_path_expr = "spec.containers[0].volumeMounts[1].subPathExpr: Unsupported value: $(X): the container runtime (containerd v2.1.9) does not mount a subPath of an image volume (the CRI's Mount.image_sub_path: containerd 2.2 or CRI-O 1.33 and newer), it would mount the whole image";
        let cases = [
            (plain.clone(), true, &v16, Ok(())),
            (plain.clone(), false, &v16, Ok(())),
            (pod(""), true, &v21, Ok(())),
            (pod(""), true, &v22, Ok(())),
            (pod(""), true, &v16, rejected(no_runtime)),
            (pod(""), false, &v21, rejected(gate_off)),
            (pod(", subPath: bin"), true, &v21, rejected(sub_path)),
            (
                pod(", subPathExpr: $(X)"),
                true,
                &v21,
                rejected(sub_path_expr),
            ),
            (pod(", subPath: bin"), true, &v22, Ok(())),
            // A subPath of another volume is not this check's.
            (pod(", subPath: ''"), true, &v21, Ok(())),
        ];
        for (i, (pod, gate, support, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                admit_image_volumes(&pod, gate, support),
                want,
                "case {i}: gate={gate} {support:?}"
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
