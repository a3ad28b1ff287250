//! Sysctl admission (the kubelet's `sysctl.patternAllowlist` as a `PodAdmitHandler`): a pod
//! that sets a sysctl outside the node's safe set and `allowedUnsafeSysctls`, or a network or
//! IPC one while sharing that namespace with the host, is rejected with `SysctlForbidden`
//! before anything of it runs. The decision is `podspec::sysctl::Allowlist::admit`.

use k8s_openapi::api::core::v1::Pod;

use crate::lifecycle::admission::{AdmitResult, PodAdmitAttributes, PodAdmitHandler, Rejection};
use crate::podspec::sysctl::{self, Allowlist};

/// The node's allowlist, built once at start from the kernel release and the configuration.
#[derive(Debug, Clone)]
pub struct SysctlAdmitHandler {
    allowlist: Allowlist,
}

impl SysctlAdmitHandler {
    /// The safe set for `kernel_release` plus `allowed_unsafe` (already validated when the
    /// configuration was loaded; an invalid entry here is an error all the same).
    pub fn new(kernel_release: &str, allowed_unsafe: &[String]) -> Result<Self, String> {
        let safe = sysctl::safe_sysctls(kernel_release);
        let allowlist = Allowlist::new(
            safe.into_iter()
                .chain(allowed_unsafe.iter().map(String::as_str)),
        )?;
        Ok(SysctlAdmitHandler { allowlist })
    }
}

/// The verdict for one pod against `allowlist`.
pub fn admit_sysctls(allowlist: &Allowlist, pod: &Pod) -> AdmitResult {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(());
    };
    let names = spec
        .security_context
        .as_ref()
        .and_then(|s| s.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| s.name.as_str());
    allowlist
        .admit(
            names,
            spec.host_network.unwrap_or(false),
            spec.host_ipc.unwrap_or(false),
        )
        .map_err(|message| Rejection::new(sysctl::FORBIDDEN_REASON, message))
}

impl PodAdmitHandler for SysctlAdmitHandler {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> AdmitResult {
        admit_sysctls(&self.allowlist, attrs.pod)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml_spec: &str) -> Pod {
        serde_yaml::from_str(&format!(
            "metadata: {{name: p, namespace: default}}\nspec:\n  containers: [{{name: c, image: i}}]\n{yaml_spec}"
        ))
        .expect("pod")
    }

    #[test]
    fn pods_are_judged_by_their_sysctls_and_host_namespaces() {
        let handler =
            SysctlAdmitHandler::new("6.1.0-18-amd64", &["kernel.shm*".into()]).expect("handler");
        let cases: &[(&str, Result<(), &str>)] = &[
            ("", Ok(())),
            ("  securityContext: {}\n", Ok(())),
            (
                "  securityContext: {sysctls: [{name: net.ipv4.tcp_syncookies, value: '1'}]}\n",
                Ok(()),
            ),
            (
                "  securityContext: {sysctls: [{name: kernel.shmmax, value: '65536'}]}\n",
                Ok(()),
            ),
            (
                "  securityContext: {sysctls: [{name: kernel.msgmax, value: '65536'}]}\n",
                Err("forbidden sysctl: \"kernel.msgmax\" not allowlisted"),
            ),
            (
                "  hostNetwork: true\n  securityContext: {sysctls: [{name: net.ipv4.tcp_syncookies, value: '1'}]}\n",
                Err("forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host net enabled"),
            ),
            (
                "  hostIPC: true\n  securityContext: {sysctls: [{name: kernel.shmmax, value: '1'}]}\n",
                Err("forbidden sysctl: \"kernel.shmmax\" not allowed with host ipc enabled"),
            ),
        ];
        for (spec, want) in cases {
            let p = pod(spec);
            let got = handler.admit(&PodAdmitAttributes {
                pod: &p,
                other_pods: &[],
            });
            let want = want.map_err(|m| Rejection::new("SysctlForbidden", m.to_string()));
            assert_eq!(got, want, "{spec}");
        }
    }

    #[test]
    fn an_invalid_unsafe_entry_is_an_error() {
        assert!(SysctlAdmitHandler::new("6.1.0", &["vm.swappiness".into()]).is_err());
    }
}
