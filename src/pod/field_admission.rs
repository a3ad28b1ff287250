//! Admission of the pod fields nodelet refuses (`podspec::field_support`: honoured or refused,
//! never ignored). A pod that sets one is rejected before it runs — Failed, reason
//! `PodFieldNotSupported`, `Pod was rejected: <field>: Unsupported value: <value>: <why>` and a
//! Warning event with the same text — instead of starting with the field dropped or waiting in
//! `ContainerCreating` for a volume or sandbox that cannot come.

use crate::lifecycle::admission::{AdmitResult, PodAdmitAttributes, PodAdmitHandler, Rejection};
use crate::podspec::field_support::refusals;
use k8s_openapi::api::core::v1::Pod;

/// The admission reason (the kubelet's style: `SupplementalGroupsPolicyNotSupported`,
/// `PodOSNotSupported`).
pub use crate::podspec::field_support::POD_FIELD_NOT_SUPPORTED;

/// Pure: the verdict for `pod`; every refused value is named, separated by `; `.
pub fn admit_pod_fields(pod: &Pod) -> AdmitResult {
    let refused = refusals(pod);
    if refused.is_empty() {
        return Ok(());
    }
    let message = refused
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    Err(Rejection::new(POD_FIELD_NOT_SUPPORTED, message))
}

/// The handler the pod manager asks for API and static pods alike.
#[derive(Debug, Clone, Copy, Default)]
pub struct PodFieldsAdmitHandler;

impl PodAdmitHandler for PodFieldsAdmitHandler {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> AdmitResult {
        admit_pod_fields(attrs.pod)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podspec::field_support::{expand, fields, generic_path, Support};
    use crate::source::defaults::apply_defaults;

    /// A pod from the lines of its `spec:`, defaulted as the API server (or the static pod
    /// source) defaults it.
    fn defaulted(spec_yaml: &str) -> Pod {
        let spec = if spec_yaml.contains("  containers:") {
            spec_yaml.to_string()
        } else {
            format!("  containers:\n  - name: c\n    image: busybox\n{spec_yaml}")
        };
        let src = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: default, uid: u1}}\nspec:\n{spec}"
        );
        let mut pod: Pod = serde_yaml::from_str(&src).unwrap_or_else(|e| panic!("{e}:\n{src}"));
        apply_defaults(&mut pod);
        pod
    }

    /// Every refused entry's sample, defaulted, is rejected by the handler with the reason and
    /// a message naming a field under the entry: a refusal in the table cannot be a lie.
    #[test]
    fn every_refused_sample_is_rejected_at_admission_naming_its_field() {
        let mut checked = 0;
        for e in fields() {
            let sample = match e.support {
                Support::Refused { sample, .. } | Support::Partly { sample, .. } => sample,
                _ => continue,
            };
            let pod = defaulted(sample);
            let attrs = PodAdmitAttributes {
                pod: &pod,
                other_pods: &[],
            };
            let rejection = PodFieldsAdmitHandler
                .admit(&attrs)
                .expect_err(&format!("{}: sample admitted:\n{sample}", e.path));
            assert_eq!(rejection.reason, POD_FIELD_NOT_SUPPORTED, "{}", e.path);
            let named = rejection.message.split("; ").any(|one| {
                let field = one.split(": ").next().unwrap_or_default();
                expand(e.path).iter().any(|p| {
                    let g = generic_path(field);
                    g == *p || g.starts_with(&format!("{p}.")) || g.starts_with(&format!("{p}["))
                })
            });
            assert!(named, "{}: {:?}", e.path, rejection.message);
            checked += 1;
        }
        assert!(checked > 30, "only {checked} refused entries");
    }

    /// What the API server fills in by default never refuses a pod.
    #[test]
    fn defaulted_everyday_pods_are_admitted() {
        let pods = [
            "",
            "  hostUsers: true\n  containers:\n  - name: c\n    image: busybox\n    resizePolicy:\n    - {resourceName: cpu, restartPolicy: NotRequired}\n    - {resourceName: memory, restartPolicy: NotRequired}\n    resources:\n      requests: {cpu: 100m, memory: 64Mi, ephemeral-storage: 1Gi}\n      limits: {cpu: \"1\", memory: 128Mi}\n    volumeMounts:\n    - {name: cache, mountPath: /cache}\n",
            "  volumes:\n  - name: cache\n    emptyDir: {medium: Memory, sizeLimit: 64Mi}\n  - name: cfg\n    configMap: {name: cfg}\n  - name: s\n    secret: {secretName: s}\n  - name: d\n    downwardAPI: {items: [{path: n, fieldRef: {fieldPath: metadata.name}}]}\n  - name: h\n    hostPath: {path: /tmp}\n  - name: kube-api-access\n    projected:\n      sources:\n      - serviceAccountToken: {path: token, expirationSeconds: 3607}\n      - configMap: {name: kube-root-ca.crt, items: [{key: ca.crt, path: ca.crt}]}\n  serviceAccountName: default\n  resources:\n    requests: {cpu: 100m, memory: 64Mi}\n  securityContext: {seLinuxChangePolicy: Recursive, fsGroup: 2000}\n",
        ];
        for spec in pods {
            let pod = defaulted(spec);
            assert_eq!(admit_pod_fields(&pod), Ok(()), "{spec}");
        }
    }

    #[test]
    fn the_message_names_every_refused_value() {
        let pod = defaulted(
            "  volumes:\n  - name: v\n    nfs: {server: s, path: /x}\n  - name: w\n    flocker: {datasetName: d}\n",
        );
        let rejection = admit_pod_fields(&pod).expect_err("refused");
        assert_eq!(
            rejection.message,
            "spec.volumes[0].nfs: Unsupported value: v: nodelet has no volume plugin for this volume type yet (it mounts emptyDir, hostPath, configMap, secret, downwardAPI, projected, image, and through CSI drivers persistentVolumeClaim, ephemeral and csi volumes); spec.volumes[1].flocker: Unsupported value: w: nodelet has no volume plugin for this volume type yet (it mounts emptyDir, hostPath, configMap, secret, downwardAPI, projected, image, and through CSI drivers persistentVolumeClaim, ephemeral and csi volumes)"
        );
    }
}
