//! AppArmor admission (the kubelet's `NewAppArmorAdmitHandler`): on a node whose kernel does
//! not enforce AppArmor, a new pod that asks for a profile other than `Unconfined` (through
//! `appArmorProfile` or the deprecated annotation) is rejected with reason `AppArmor` and
//! `Cannot enforce AppArmor: …` before anything of it runs, instead of failing container after
//! container in the runtime. Where AppArmor is enforced, a `Localhost` profile must name one.

use std::path::Path;

use k8s_openapi::api::core::v1::{AppArmorProfile, Container, Pod};

use crate::lifecycle::admission::{AdmitResult, PodAdmitAttributes, PodAdmitHandler, Rejection};
use crate::podspec::{ephemeral_containers, init_containers, regular_containers};

/// The rejection's reason (`lifecycle.AppArmorNotAdmittedReason`).
pub const REASON: &str = "AppArmor";
/// The deprecated per-container annotation's prefix.
const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
const UNCONFINED: &str = "Unconfined";
const ANNOTATION_UNCONFINED: &str = "unconfined";

/// Why the host cannot enforce AppArmor (runc's `apparmor.IsEnabled`: the securityfs directory
/// exists and the module's `enabled` parameter starts with `Y`), or `None` when it can.
/// `sys` is the sysfs mount (`/sys`).
pub fn host_support(sys: &Path) -> Option<String> {
    let enabled = sys.join("kernel/security/apparmor").is_dir()
        && std::fs::read(sys.join("module/apparmor/parameters/enabled"))
            .is_ok_and(|v| v.starts_with(b"Y"));
    (!enabled).then(|| "AppArmor is not enabled on the host".to_string())
}

/// Decided once at start, as the kubelet does (enabling AppArmor takes a restart).
#[derive(Debug, Clone)]
pub struct AppArmorAdmitHandler {
    /// Why the host cannot enforce AppArmor, if it cannot.
    pub host_error: Option<String>,
}

fn confining(profile: Option<&AppArmorProfile>) -> bool {
    profile.is_some_and(|p| p.type_ != UNCONFINED)
}

/// The init and regular containers (ephemeral ones are another type, visited beside them).
fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    init_containers(pod).iter().chain(regular_containers(pod))
}

/// Whether the pod asks for AppArmor at all (`apparmor.isRequired`).
fn required(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    if confining(
        spec.and_then(|s| s.security_context.as_ref())
            .and_then(|s| s.app_armor_profile.as_ref()),
    ) {
        return true;
    }
    let containers = all_containers(pod).any(|c| {
        confining(
            c.security_context
                .as_ref()
                .and_then(|s| s.app_armor_profile.as_ref()),
        )
    }) || ephemeral_containers(pod).iter().any(|e| {
        confining(
            e.security_context
                .as_ref()
                .and_then(|s| s.app_armor_profile.as_ref()),
        )
    });
    if containers {
        return true;
    }
    pod.metadata
        .annotations
        .iter()
        .flatten()
        .find(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
        .is_some_and(|(_, v)| v != ANNOTATION_UNCONFINED)
}

/// The verdict for one new pod (`apparmor.validator.Validate`).
pub fn admit_apparmor(host_error: Option<&str>, pod: &Pod) -> AdmitResult {
    if !required(pod) {
        return Ok(());
    }
    let reject = |why: &str| {
        Err(Rejection::new(
            REASON,
            format!("Cannot enforce AppArmor: {why}"),
        ))
    };
    if let Some(why) = host_error {
        return reject(why);
    }
    let spec = pod.spec.as_ref();
    let pod_profile = spec
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.app_armor_profile.as_ref());
    let mut profiles: Vec<Option<&AppArmorProfile>> = all_containers(pod)
        .map(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.app_armor_profile.as_ref())
        })
        .collect();
    profiles.extend(ephemeral_containers(pod).iter().map(|e| {
        e.security_context
            .as_ref()
            .and_then(|s| s.app_armor_profile.as_ref())
    }));
    for profile in profiles.into_iter().filter_map(|p| p.or(pod_profile)) {
        if profile.type_ == "Localhost"
            && profile
                .localhost_profile
                .as_deref()
                .is_none_or(|n| n.trim().is_empty())
        {
            return reject(&format!(
                "invalid empty AppArmor profile name: {:?}",
                profile.localhost_profile.as_deref().unwrap_or_default()
            ));
        }
    }
    Ok(())
}

impl PodAdmitHandler for AppArmorAdmitHandler {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> AdmitResult {
        admit_apparmor(self.host_error.as_deref(), attrs.pod)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_yaml::from_str(&format!(
            "metadata:\n  name: p\n  namespace: default\n{yaml}"
        ))
        .expect("pod")
    }

    #[test]
    fn host_support_reads_securityfs_and_the_module_parameter() {
        let sys = tempfile::tempdir().unwrap();
        assert!(host_support(sys.path()).is_some(), "nothing there");
        std::fs::create_dir_all(sys.path().join("kernel/security/apparmor")).unwrap();
        std::fs::create_dir_all(sys.path().join("module/apparmor/parameters")).unwrap();
        std::fs::write(sys.path().join("module/apparmor/parameters/enabled"), "N\n").unwrap();
        assert!(host_support(sys.path()).is_some(), "disabled");
        std::fs::write(sys.path().join("module/apparmor/parameters/enabled"), "Y\n").unwrap();
        assert_eq!(host_support(sys.path()), None);
    }

    #[test]
    fn pods_asking_for_a_profile_are_rejected_where_apparmor_is_off() {
        let off = Some("AppArmor is not enabled on the host");
        let rejected = Err(Rejection::new(
            REASON,
            "Cannot enforce AppArmor: AppArmor is not enabled on the host".into(),
        ));
        let container = |sc: &str| format!("spec:\n  containers:\n  - name: c\n    image: i\n{sc}");
        // (case, pod, verdict where AppArmor is off, verdict where it is on)
        let cases: Vec<(&str, String, AdmitResult, AdmitResult)> = vec![
            ("no profile", container(""), Ok(()), Ok(())),
            (
                "container RuntimeDefault",
                container("    securityContext: {appArmorProfile: {type: RuntimeDefault}}\n"),
                rejected.clone(),
                Ok(()),
            ),
            (
                "container Unconfined",
                container("    securityContext: {appArmorProfile: {type: Unconfined}}\n"),
                Ok(()),
                Ok(()),
            ),
            (
                "pod-level Localhost",
                "spec:\n  securityContext: {appArmorProfile: {type: Localhost, localhostProfile: k8s-x}}\n  containers: [{name: c, image: i}]\n".into(),
                rejected.clone(),
                Ok(()),
            ),
            (
                "pod-level Localhost without a name",
                "spec:\n  securityContext: {appArmorProfile: {type: Localhost, localhostProfile: ' '}}\n  containers: [{name: c, image: i}]\n".into(),
                rejected.clone(),
                Err(Rejection::new(
                    REASON,
                    "Cannot enforce AppArmor: invalid empty AppArmor profile name: \" \"".into(),
                )),
            ),
            (
                "init container profile",
                "spec:\n  initContainers:\n  - {name: i, image: i, securityContext: {appArmorProfile: {type: RuntimeDefault}}}\n  containers: [{name: c, image: i}]\n".into(),
                rejected.clone(),
                Ok(()),
            ),
            (
                "deprecated annotation",
                "  annotations: {container.apparmor.security.beta.kubernetes.io/c: runtime/default}\nspec:\n  containers: [{name: c, image: i}]\n".into(),
                rejected.clone(),
                Ok(()),
            ),
            (
                "deprecated annotation unconfined",
                "  annotations: {container.apparmor.security.beta.kubernetes.io/c: unconfined}\nspec:\n  containers: [{name: c, image: i}]\n".into(),
                Ok(()),
                Ok(()),
            ),
        ];
        for (case, yaml, when_off, when_on) in cases {
            let p = pod(&yaml);
            assert_eq!(admit_apparmor(off, &p), when_off, "{case} (off)");
            assert_eq!(admit_apparmor(None, &p), when_on, "{case} (on)");
        }
    }
}
