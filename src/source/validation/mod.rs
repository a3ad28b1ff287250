//! Pod validation as the API server's `ValidatePodCreate` does it (which the kubelet also runs on
//! every static pod), plus the static-pod-only rules: no references to API objects (the API server
//! would reject the mirror pod) and only the volume types nodelet can mount.
//!
//! Every rule collects errors instead of stopping at the first, and every error names the field
//! path and the bad value. Where the Go code reports a path without the list index (a few
//! historical slips: `volumeMounts.subPath`, `downwardAPI` items, init container host ports) we
//! report the indexed path, which points at the same field more precisely.
//!
//! The areas live in submodules (`meta`, `spec`, `volumes`, `containers`, `env`, `resources`,
//! `lifecycle`); this file has the entry points, the pod spec's own fields and the static-pod
//! rules.

mod containers;
mod env;
mod lifecycle;
mod meta;
mod resources;
mod spec;
mod volumes;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, PodSpec, Volume};

use super::defaults::volume_sources;
use crate::podspec::field::{
    dns1123_label, dns1123_subdomain, inclusive_range_error, ip_address, qualified_name,
    FieldError, FieldPath,
};
use containers::{validate_containers, validate_init_containers, validate_seccomp_profile};
pub use lifecycle::{LINUX_STOP_SIGNALS, WINDOWS_STOP_SIGNALS};
use meta::{validate_labels, validate_object_meta, validate_static_pod_uid};
use resources::validate_resource_list;
use spec::{validate_dns_config, validate_tolerations};
use volumes::validate_volumes;

type Errors = Vec<FieldError>;

const IS_NEGATIVE: &str = "must be greater than or equal to 0";
const QUANTITY_REGEX_ERR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// Volume sources nodelet can provide to a static pod. Everything else is either an API object
/// reference (rejected like the kubelet does) or a storage plugin nodelet does not implement.
pub const SUPPORTED_STATIC_VOLUME_TYPES: &[&str] =
    &["emptyDir", "hostPath", "downwardAPI", "projected", "image"];

fn s(o: &Option<String>) -> &str {
    o.as_deref().unwrap_or("")
}

/// Validate a (defaulted) pod like the API server's `ValidatePodCreate`. Returns every problem.
pub fn validate_pod(pod: &Pod) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let meta_path = FieldPath::new("metadata");
    validate_object_meta(&pod.metadata, &meta_path, &mut errs);

    let spec_path = FieldPath::new("spec");
    let empty = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&empty);
    validate_pod_spec(spec, &spec_path, &mut errs);

    // Checks that apply to pods but not pod templates, and to creation.
    if spec
        .service_account_name
        .as_deref()
        .unwrap_or("")
        .is_empty()
    {
        for (vi, v) in spec.volumes.iter().flatten().enumerate() {
            for (si, src) in v
                .projected
                .iter()
                .flat_map(|p| p.sources.iter().flatten())
                .enumerate()
            {
                if src.service_account_token.is_some() {
                    errs.push(FieldError::forbidden(
                        &spec_path
                            .child("volumes")
                            .index(vi)
                            .child("projected")
                            .child("sources")
                            .index(si)
                            .child("serviceAccountToken"),
                        "must not be specified when serviceAccountName is not set",
                    ));
                }
            }
        }
    }
    for (list, containers) in [
        ("containers", Some(&spec.containers)),
        ("initContainers", spec.init_containers.as_ref()),
    ] {
        for (i, c) in containers.into_iter().flatten().enumerate() {
            let image = s(&c.image);
            if image.len() != image.trim().len() {
                errs.push(FieldError::invalid(
                    &spec_path.child(list).index(i).child("image"),
                    image,
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        errs.push(FieldError::forbidden(
            &spec_path.child("ephemeralContainers"),
            "cannot be set on create",
        ));
    }
    if !s(&spec.node_name).is_empty()
        && spec
            .scheduling_gates
            .as_ref()
            .is_some_and(|g| !g.is_empty())
    {
        errs.push(FieldError::forbidden(
            &spec_path.child("nodeName"),
            "cannot be set until all schedulingGates have been cleared",
        ));
    }
    errs
}

// ---------------------------------------------------------------- pod spec

/// Everything container validation needs to know about the rest of the pod.
struct PodContext<'a> {
    /// Volumes that validated cleanly, by name (mounts of broken volumes are "not found", like Go).
    volumes: BTreeMap<&'a str, &'a Volume>,
    /// Names of all regular and init containers (for `resourceFieldRef.containerName`).
    container_names: BTreeSet<&'a str>,
    grace_period: Option<i64>,
    pod_restart_policy: &'a str,
    /// `spec.os.name`, which decides the stop signals a container may ask for.
    os: Option<&'a str>,
}

/// `spec.securityContext.sysctls` as the API server's `validateSysctls` on a new pod: a name
/// given, of the sysctl grammar, given once, and no network or IPC sysctl in a pod that shares
/// that namespace with the host. The node's own allowlist (`podspec::sysctl::Allowlist`) is
/// admission's, after this.
fn validate_sysctls(spec: &PodSpec, path: &FieldPath, errs: &mut Errors) {
    use crate::podspec::sysctl::{
        invalid_name_detail, is_valid_name, namespaced_by, to_dots, Namespace,
    };
    let sysctls = spec
        .security_context
        .as_ref()
        .and_then(|sc| sc.sysctls.as_deref())
        .unwrap_or(&[]);
    let mut names = BTreeSet::new();
    for (i, sysctl) in sysctls.iter().enumerate() {
        let name_path = path.index(i).child("name");
        let name = sysctl.name.as_str();
        if name.is_empty() {
            errs.push(FieldError::required(&name_path, ""));
        } else if !is_valid_name(name) {
            errs.push(FieldError::invalid(&name_path, name, invalid_name_detail()));
        } else if names.contains(name) {
            errs.push(FieldError::duplicate(&name_path, name));
        }
        match namespaced_by(&to_dots(name)) {
            Some(Namespace::Net) if spec.host_network == Some(true) => {
                errs.push(FieldError::invalid(
                    &name_path,
                    name,
                    "may not be specified when 'hostNetwork' is true",
                ))
            }
            Some(Namespace::Ipc) if spec.host_ipc == Some(true) => errs.push(FieldError::invalid(
                &name_path,
                name,
                "may not be specified when 'hostIPC' is true",
            )),
            _ => {}
        }
        names.insert(name);
    }
}

fn validate_pod_spec(spec: &PodSpec, path: &FieldPath, errs: &mut Errors) {
    match spec.termination_grace_period_seconds {
        None => errs.push(FieldError::required(
            &path.child("terminationGracePeriodSeconds"),
            "",
        )),
        Some(g) if g < 0 => errs.push(FieldError::invalid(
            &path.child("terminationGracePeriodSeconds"),
            g,
            IS_NEGATIVE,
        )),
        Some(_) => {}
    }

    let container_names: BTreeSet<&str> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| c.name.as_str())
        .collect();
    let volumes = validate_volumes(
        spec.volumes.as_deref().unwrap_or(&[]),
        &container_names,
        &path.child("volumes"),
        errs,
    );
    let ctx = PodContext {
        volumes,
        container_names,
        grace_period: spec.termination_grace_period_seconds,
        pod_restart_policy: s(&spec.restart_policy),
        os: spec.os.as_ref().map(|os| os.name.as_str()),
    };
    if let Some(sp) = spec
        .security_context
        .as_ref()
        .and_then(|sc| sc.seccomp_profile.as_ref())
    {
        validate_seccomp_profile(
            sp,
            &path.child("securityContext").child("seccompProfile"),
            errs,
        );
    }
    validate_sysctls(spec, &path.child("securityContext").child("sysctls"), errs);
    validate_containers(&spec.containers, &ctx, &path.child("containers"), errs);
    validate_init_containers(
        spec.init_containers.as_deref().unwrap_or(&[]),
        &spec.containers,
        &ctx,
        &path.child("initContainers"),
        errs,
    );

    if spec.host_network == Some(true) {
        for (i, c) in spec.containers.iter().enumerate() {
            for (pi, p) in c.ports.iter().flatten().enumerate() {
                let hp = p.host_port.unwrap_or(0);
                if hp != 0 && hp != p.container_port {
                    errs.push(FieldError::invalid(
                        &path
                            .child("containers")
                            .index(i)
                            .child("ports")
                            .index(pi)
                            .child("hostPort"),
                        hp,
                        "must match `containerPort` when `hostNetwork` is true",
                    ));
                }
            }
        }
    }

    match s(&spec.restart_policy) {
        "Always" | "OnFailure" | "Never" => {}
        "" => errs.push(FieldError::required(&path.child("restartPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            &path.child("restartPolicy"),
            other,
            &["Always", "OnFailure", "Never"],
        )),
    }
    let dns_policy = s(&spec.dns_policy);
    match dns_policy {
        "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None" => {}
        "" => errs.push(FieldError::required(&path.child("dnsPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            &path.child("dnsPolicy"),
            other,
            &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        )),
    }
    validate_labels(
        spec.node_selector.as_ref(),
        &path.child("nodeSelector"),
        errs,
    );
    validate_dns_config(
        spec.dns_config.as_ref(),
        dns_policy,
        &path.child("dnsConfig"),
        errs,
    );
    for (i, gate) in spec.readiness_gates.iter().flatten().enumerate() {
        for msg in qualified_name(&gate.condition_type) {
            errs.push(FieldError::invalid(
                &path.child("readinessGates").index(i).child("conditionType"),
                &gate.condition_type,
                msg,
            ));
        }
    }
    let mut seen_gates = BTreeSet::new();
    for (i, gate) in spec.scheduling_gates.iter().flatten().enumerate() {
        let gpath = path.child("schedulingGates").index(i);
        for msg in qualified_name(&gate.name) {
            errs.push(FieldError::invalid(&gpath, &gate.name, msg));
        }
        if !seen_gates.insert(gate.name.as_str()) {
            errs.push(FieldError::duplicate(&gpath, &gate.name));
        }
    }
    if spec.host_users == Some(false) {
        for (field, set) in [
            ("hostNetwork", spec.host_network),
            ("hostPID", spec.host_pid),
            ("hostIPC", spec.host_ipc),
        ] {
            if set == Some(true) {
                errs.push(FieldError::forbidden(
                    &path.child(field),
                    "when `pod.Spec.HostUsers` is false",
                ));
            }
        }
    }
    for (field, value) in [
        ("serviceAccountName", &spec.service_account_name),
        ("nodeName", &spec.node_name),
        ("priorityClassName", &spec.priority_class_name),
    ] {
        let v = s(value);
        if !v.is_empty() {
            for msg in dns1123_subdomain(v) {
                errs.push(FieldError::invalid(&path.child(field), v, msg));
            }
        }
    }
    if let Some(rc) = &spec.runtime_class_name {
        for msg in dns1123_subdomain(rc) {
            errs.push(FieldError::invalid(
                &path.child("runtimeClassName"),
                rc,
                msg,
            ));
        }
    }
    if let Some(ads) = spec.active_deadline_seconds {
        if !(1..=i64::from(i32::MAX)).contains(&ads) {
            errs.push(FieldError::invalid(
                &path.child("activeDeadlineSeconds"),
                ads,
                inclusive_range_error(1, i64::from(i32::MAX)),
            ));
        }
    }
    for (field, value) in [("hostname", &spec.hostname), ("subdomain", &spec.subdomain)] {
        let v = s(value);
        if !v.is_empty() {
            for msg in dns1123_label(v) {
                errs.push(FieldError::invalid(&path.child(field), v, msg));
            }
        }
    }
    validate_tolerations(
        spec.tolerations.as_deref().unwrap_or(&[]),
        &path.child("tolerations"),
        errs,
    );
    for (i, alias) in spec.host_aliases.iter().flatten().enumerate() {
        let apath = path.child("hostAliases").index(i);
        for msg in ip_address(&alias.ip) {
            errs.push(FieldError::invalid(&apath.child("ip"), &alias.ip, msg));
        }
        for (j, host) in alias.hostnames.iter().flatten().enumerate() {
            for msg in dns1123_subdomain(host) {
                errs.push(FieldError::invalid(
                    &apath.child("hostnames").index(j),
                    host,
                    msg,
                ));
            }
        }
    }
    if let Some(pp) = &spec.preemption_policy {
        match pp.as_str() {
            "PreemptLowerPriority" | "Never" => {}
            "" => errs.push(FieldError::required(&path.child("preemptionPolicy"), "")),
            other => errs.push(FieldError::not_supported(
                &path.child("preemptionPolicy"),
                other,
                &["PreemptLowerPriority", "Never"],
            )),
        }
    }
    if let Some(overhead) = &spec.overhead {
        validate_resource_list(overhead, &path.child("overhead").child("limits"), errs);
    }
    if let Some(os) = &spec.os {
        if os.name != "linux" && os.name != "windows" {
            errs.push(FieldError::not_supported(
                &path.child("os").child("name"),
                &os.name,
                &["linux", "windows"],
            ));
        }
    }
}

// ---------------------------------------------------------------- static pods

/// Rules that only static pods have: they may not reference API objects (the kubelet's
/// `PreventStaticPodAPIReferences`; the API server would reject the mirror pod) and may only use
/// volume types nodelet can provide without an API server.
pub fn validate_static_pod(pod: &Pod) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(uid) = pod.metadata.uid.as_deref() {
        validate_static_pod_uid(uid, &FieldPath::new("metadata").child("uid"), &mut errs);
    }
    let Some(spec) = &pod.spec else { return errs };
    let path = FieldPath::new("spec");
    let api = |what: &str| format!("static pods may not reference {what}");

    if !s(&spec.service_account_name).is_empty() {
        errs.push(FieldError::forbidden(
            &path.child("serviceAccountName"),
            api("serviceaccounts"),
        ));
    } else if !s(&spec.service_account).is_empty() {
        errs.push(FieldError::forbidden(
            &path.child("serviceAccount"),
            api("serviceaccounts"),
        ));
    }
    if spec
        .image_pull_secrets
        .as_ref()
        .is_some_and(|s| !s.is_empty())
    {
        errs.push(FieldError::forbidden(
            &path.child("imagePullSecrets"),
            api("secrets"),
        ));
    }
    for (list, containers) in [
        ("containers", Some(&spec.containers)),
        ("initContainers", spec.init_containers.as_ref()),
    ] {
        for (i, c) in containers.into_iter().flatten().enumerate() {
            let cpath = path.child(list).index(i);
            for (j, e) in c.env.iter().flatten().enumerate() {
                let vpath = cpath.child("env").index(j).child("valueFrom");
                if let Some(from) = &e.value_from {
                    if from.secret_key_ref.is_some() {
                        errs.push(FieldError::forbidden(
                            &vpath.child("secretKeyRef"),
                            api("secrets"),
                        ));
                    }
                    if from.config_map_key_ref.is_some() {
                        errs.push(FieldError::forbidden(
                            &vpath.child("configMapKeyRef"),
                            api("configmaps"),
                        ));
                    }
                }
            }
            for (j, e) in c.env_from.iter().flatten().enumerate() {
                let epath = cpath.child("envFrom").index(j);
                if e.secret_ref.is_some() {
                    errs.push(FieldError::forbidden(
                        &epath.child("secretRef"),
                        api("secrets"),
                    ));
                }
                if e.config_map_ref.is_some() {
                    errs.push(FieldError::forbidden(
                        &epath.child("configMapRef"),
                        api("configmaps"),
                    ));
                }
            }
        }
    }
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        errs.push(FieldError::forbidden(
            &path.child("resourceClaims"),
            api("resourceclaims"),
        ));
    }
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let vpath = path.child("volumes").index(i);
        let mut referenced = false;
        let mut reject = |field: &str, what: &str, errs: &mut Errors| {
            referenced = true;
            errs.push(FieldError::forbidden(&vpath.child(field), api(what)));
        };
        if v.config_map.is_some() {
            reject("configMap", "configmaps (via configmap volumes)", &mut errs);
        }
        if v.secret.is_some() {
            reject("secret", "secrets (via secret volumes)", &mut errs);
        }
        if v.csi.is_some() {
            reject("csi", "csidrivers (via CSI volumes)", &mut errs);
        }
        if v.glusterfs.is_some() {
            reject("glusterfs", "endpoints (via glusterFS volumes)", &mut errs);
        }
        if v.persistent_volume_claim.is_some() {
            reject("persistentVolumeClaim", "persistentvolumeclaims", &mut errs);
        }
        if v.ephemeral.is_some() {
            reject(
                "ephemeral",
                "persistentvolumeclaims (via ephemeral volumes)",
                &mut errs,
            );
        }
        if v.azure_file.is_some() {
            reject("azureFile", "secrets (via azureFile volumes)", &mut errs);
        }
        for (field, has_secret) in [
            (
                "cephfs",
                v.cephfs.as_ref().is_some_and(|x| x.secret_ref.is_some()),
            ),
            (
                "cinder",
                v.cinder.as_ref().is_some_and(|x| x.secret_ref.is_some()),
            ),
            (
                "flexVolume",
                v.flex_volume
                    .as_ref()
                    .is_some_and(|x| x.secret_ref.is_some()),
            ),
            (
                "iscsi",
                v.iscsi.as_ref().is_some_and(|x| x.secret_ref.is_some()),
            ),
            (
                "rbd",
                v.rbd.as_ref().is_some_and(|x| x.secret_ref.is_some()),
            ),
            ("scaleIO", v.scale_io.is_some()),
            (
                "storageos",
                v.storageos.as_ref().is_some_and(|x| x.secret_ref.is_some()),
            ),
        ] {
            if has_secret {
                reject(&format!("{field}.secretRef"), "secrets", &mut errs);
            }
        }
        if let Some(p) = &v.projected {
            for (j, src) in p.sources.iter().flatten().enumerate() {
                let spath = format!("projected.sources[{j}]");
                for (field, set, what) in [
                    (
                        "configMap",
                        src.config_map.is_some(),
                        "configmaps (via projected volumes)",
                    ),
                    (
                        "secret",
                        src.secret.is_some(),
                        "secrets (via projected volumes)",
                    ),
                    (
                        "serviceAccountToken",
                        src.service_account_token.is_some(),
                        "serviceaccounts (via projected volumes)",
                    ),
                    (
                        "clusterTrustBundle",
                        src.cluster_trust_bundle.is_some(),
                        "clustertrustbundles",
                    ),
                    (
                        "podCertificate",
                        src.pod_certificate.is_some(),
                        "podcertificates",
                    ),
                ] {
                    if set {
                        reject(&format!("{spath}.{field}"), what, &mut errs);
                    }
                }
            }
        }
        if !referenced {
            for source in volume_sources(v) {
                if !SUPPORTED_STATIC_VOLUME_TYPES.contains(&source) {
                    errs.push(FieldError::forbidden(
                        &vpath.child(source),
                        format!(
                            "volume type not supported by nodelet for static pods (supported: {})",
                            SUPPORTED_STATIC_VOLUME_TYPES.join(", ")
                        ),
                    ));
                }
            }
        }
    }
    errs
}

/// The pod builders every area's tests share: a manifest, defaulted, run through both
/// validations.
#[cfg(test)]
mod test_support {
    use k8s_openapi::api::core::v1::Pod;

    use super::{validate_pod, validate_static_pod};
    use crate::podspec::field::dns1123_label;
    use crate::source::defaults::apply_defaults;

    /// Errors for a defaulted pod whose `spec` (besides `nodeName`) is `spec_yaml`, indented by
    /// two spaces as under `spec:`.
    pub(super) fn errors_for(spec_yaml: &str) -> Vec<String> {
        errors_for_pod("  name: web-node1\n  namespace: default\n", spec_yaml)
    }

    pub(super) fn errors_for_pod(meta_yaml: &str, spec_yaml: &str) -> Vec<String> {
        let src = format!("apiVersion: v1\nkind: Pod\nmetadata:\n{meta_yaml}spec:\n  nodeName: node1\n{spec_yaml}");
        let mut pod: Pod =
            serde_yaml::from_str(&src).unwrap_or_else(|e| panic!("bad test yaml {e}:\n{src}"));
        apply_defaults(&mut pod);
        validate_pod(&pod)
            .into_iter()
            .chain(validate_static_pod(&pod))
            .map(|e| e.to_string())
            .collect()
    }

    pub(super) const C: &str = "  containers:\n  - name: c\n    image: busybox:1.36\n";

    /// A spec with one container `c` whose extra fields are `container_yaml` (indented by four).
    pub(super) fn with_container(container_yaml: &str) -> String {
        format!("{C}{container_yaml}")
    }

    pub(super) fn label_msg(s: &str) -> String {
        dns1123_label(s).join("")
    }
}

#[cfg(test)]
mod tests;
