//! Pod validation as the API server's `ValidatePodCreate` does it (which the kubelet also runs on
//! every static pod), plus the static-pod-only rules: no references to API objects (the API server
//! would reject the mirror pod) and only the volume types nodelet can mount.
//!
//! Every rule collects errors instead of stopping at the first, and every error names the field
//! path and the bad value. Where the Go code reports a path without the list index (a few
//! historical slips: `volumeMounts.subPath`, `downwardAPI` items, init container host ports) we
//! report the indexed path, which points at the same field more precisely.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, ContainerRestartRule, DownwardAPIVolumeFile, EnvFromSource, EnvVar, HTTPGetAction,
    KeyToPath, Lifecycle, LifecycleHandler, ObjectFieldSelector, Pod, PodDNSConfig, PodSpec, Probe,
    ResourceFieldSelector, SeccompProfile, SecurityContext, Toleration, Volume, VolumeDevice,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::defaults::volume_sources;
use crate::podspec::field::{
    dns1123_label, dns1123_subdomain, env_var_name, http_header_name, inclusive_range_error,
    ip_address, label_value, port_name, port_num, qualified_name, FieldError, FieldPath,
};
use crate::quantity::Quantity;

type Errors = Vec<FieldError>;

const IS_NEGATIVE: &str = "must be greater than or equal to 0";
const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;
const QUANTITY_REGEX_ERR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
const MAX_RESTART_RULES: usize = 20;
const MAX_EXIT_CODE_VALUES: usize = 255;

/// Volume sources nodelet can provide to a static pod. Everything else is either an API object
/// reference (rejected like the kubelet does) or a storage plugin nodelet does not implement.
pub const SUPPORTED_STATIC_VOLUME_TYPES: &[&str] =
    &["emptyDir", "hostPath", "downwardAPI", "projected"];

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

// ---------------------------------------------------------------- metadata

fn validate_object_meta(meta: &ObjectMeta, path: &FieldPath, errs: &mut Errors) {
    let name = s(&meta.name);
    if name.is_empty() {
        errs.push(FieldError::required(
            &path.child("name"),
            "name or generateName is required",
        ));
    } else {
        for msg in dns1123_subdomain(name) {
            errs.push(FieldError::invalid(&path.child("name"), name, msg));
        }
    }
    let ns = s(&meta.namespace);
    if ns.is_empty() {
        errs.push(FieldError::required(&path.child("namespace"), ""));
    } else {
        for msg in dns1123_label(ns) {
            errs.push(FieldError::invalid(&path.child("namespace"), ns, msg));
        }
    }
    if let Some(generation) = meta.generation.filter(|g| *g < 0) {
        errs.push(FieldError::invalid(
            &path.child("generation"),
            generation,
            IS_NEGATIVE,
        ));
    }
    validate_labels(meta.labels.as_ref(), &path.child("labels"), errs);
    if let Some(annotations) = &meta.annotations {
        let apath = path.child("annotations");
        let mut total = 0usize;
        for (k, v) in annotations {
            for msg in qualified_name(&k.to_lowercase()) {
                errs.push(FieldError::invalid(&apath, k, msg));
            }
            total += k.len() + v.len();
        }
        if total > TOTAL_ANNOTATION_SIZE_LIMIT {
            errs.push(FieldError::too_long_bytes(
                &apath,
                TOTAL_ANNOTATION_SIZE_LIMIT,
            ));
        }
    }
}

fn validate_labels(labels: Option<&BTreeMap<String, String>>, path: &FieldPath, errs: &mut Errors) {
    for (k, v) in labels.into_iter().flatten() {
        for msg in qualified_name(k) {
            errs.push(FieldError::invalid(path, k, msg));
        }
        for msg in label_value(v) {
            errs.push(FieldError::invalid(path, v, msg));
        }
    }
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

fn validate_dns_config(
    config: Option<&PodDNSConfig>,
    policy: &str,
    path: &FieldPath,
    errs: &mut Errors,
) {
    if policy == "None" {
        match config {
            None => {
                errs.push(FieldError::required(
                    path,
                    "must provide `dnsConfig` when `dnsPolicy` is None",
                ));
                return;
            }
            Some(c) if c.nameservers.as_ref().is_none_or(Vec::is_empty) => {
                errs.push(FieldError::required(
                    &path.child("nameservers"),
                    "must provide at least one DNS nameserver when `dnsPolicy` is None",
                ));
                return;
            }
            Some(_) => {}
        }
    }
    let Some(config) = config else { return };
    let nameservers = config.nameservers.as_deref().unwrap_or(&[]);
    if nameservers.len() > 3 {
        errs.push(FieldError::invalid(
            &path.child("nameservers"),
            nameservers.join(","),
            "must not have more than 3 nameservers",
        ));
    }
    for (i, ns) in nameservers.iter().enumerate() {
        for msg in ip_address(ns) {
            errs.push(FieldError::invalid(
                &path.child("nameservers").index(i),
                ns,
                msg,
            ));
        }
    }
    let searches = config.searches.as_deref().unwrap_or(&[]);
    if searches.len() > 32 {
        errs.push(FieldError::invalid(
            &path.child("searches"),
            searches.join(" "),
            "must not have more than 32 search paths",
        ));
    }
    if searches.join(" ").len() > 2048 {
        errs.push(FieldError::invalid(
            &path.child("searches"),
            searches.join(" "),
            "must not have more than 2048 characters (including spaces) in the search list",
        ));
    }
    for (i, search) in searches.iter().enumerate() {
        // RelaxedDNSSearchValidation (GA): "." alone and underscores are allowed.
        if search == "." {
            continue;
        }
        let trimmed = search.trim_end_matches('.').replace('_', "a");
        for msg in dns1123_subdomain(&trimmed) {
            errs.push(FieldError::invalid(
                &path.child("searches").index(i),
                search,
                msg,
            ));
        }
    }
    for (i, opt) in config.options.iter().flatten().enumerate() {
        if s(&opt.name).is_empty() {
            errs.push(FieldError::required(
                &path.child("options").index(i),
                "must not be empty",
            ));
        }
    }
}

fn validate_tolerations(tolerations: &[Toleration], path: &FieldPath, errs: &mut Errors) {
    for (i, t) in tolerations.iter().enumerate() {
        let tpath = path.index(i);
        let key = s(&t.key);
        let operator = s(&t.operator);
        let effect = s(&t.effect);
        let value = s(&t.value);
        if !key.is_empty() {
            for msg in qualified_name(key) {
                errs.push(FieldError::invalid(&tpath.child("key"), key, msg));
            }
        }
        if key.is_empty() && operator != "Exists" {
            errs.push(FieldError::invalid(
                &tpath.child("operator"),
                operator,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if t.toleration_seconds.is_some() && effect != "NoExecute" {
            errs.push(FieldError::invalid(
                &tpath.child("effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match operator {
            "Equal" | "" => {
                let msgs = label_value(value);
                if !msgs.is_empty() {
                    errs.push(FieldError::invalid(
                        &tpath.child("operator"),
                        value,
                        msgs.join(";"),
                    ));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    errs.push(FieldError::invalid(
                        &tpath.child("operator"),
                        value,
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                &tpath.child("operator"),
                other,
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() && !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute")
        {
            errs.push(FieldError::not_supported(
                &tpath.child("effect"),
                effect,
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            ));
        }
    }
}

// ---------------------------------------------------------------- volumes

fn validate_volumes<'a>(
    volumes: &'a [Volume],
    container_names: &BTreeSet<&str>,
    path: &FieldPath,
    errs: &mut Errors,
) -> BTreeMap<&'a str, &'a Volume> {
    let mut valid = BTreeMap::new();
    let mut names = BTreeSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let vpath = path.index(i);
        let mut el = Vec::new();
        validate_volume_source(v, container_names, &vpath, &mut el);
        let name_path = vpath.child("name");
        if v.name.is_empty() {
            el.push(FieldError::required(&name_path, ""));
        } else {
            for msg in dns1123_label(&v.name) {
                el.push(FieldError::invalid(&name_path, &v.name, msg));
            }
        }
        if names.contains(v.name.as_str()) {
            el.push(FieldError::duplicate(&name_path, &v.name));
        }
        if el.is_empty() {
            names.insert(v.name.as_str());
            valid.insert(v.name.as_str(), v);
        } else {
            errs.extend(el);
        }
    }
    valid
}

fn validate_volume_source(v: &Volume, names: &BTreeSet<&str>, path: &FieldPath, errs: &mut Errors) {
    let sources = volume_sources(v);
    if sources.is_empty() {
        errs.push(FieldError::required(path, "must specify a volume type"));
        return;
    }
    for extra in &sources[1..] {
        errs.push(FieldError::forbidden(
            &path.child(extra),
            "may not specify more than 1 volume type",
        ));
    }
    match sources[0] {
        "emptyDir" => {
            if let Some(limit) = v.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref()) {
                match Quantity::try_from(limit) {
                    Err(_) => errs.push(FieldError::invalid(
                        &path.child("emptyDir").child("sizeLimit"),
                        &limit.0,
                        QUANTITY_REGEX_ERR,
                    )),
                    Ok(q) if q < Quantity::default() => errs.push(FieldError::forbidden(
                        &path.child("emptyDir").child("sizeLimit"),
                        "SizeLimit field must be a valid resource quantity",
                    )),
                    Ok(_) => {}
                }
            }
        }
        "hostPath" => {
            if let Some(hp) = &v.host_path {
                let hpath = path.child("hostPath");
                if hp.path.is_empty() {
                    errs.push(FieldError::required(&hpath.child("path"), ""));
                } else {
                    validate_path_no_backsteps(&hp.path, &hpath.child("path"), errs);
                    if let Some(t) = &hp.type_ {
                        const TYPES: &[&str] = &[
                            "",
                            "BlockDevice",
                            "CharDevice",
                            "Directory",
                            "DirectoryOrCreate",
                            "File",
                            "FileOrCreate",
                            "Socket",
                        ];
                        if !TYPES.contains(&t.as_str()) {
                            errs.push(FieldError::not_supported(&hpath.child("type"), t, TYPES));
                        }
                    }
                }
            }
        }
        "downwardAPI" => {
            if let Some(d) = &v.downward_api {
                let dpath = path.child("downwardAPI");
                validate_file_mode(d.default_mode, &dpath.child("defaultMode"), errs);
                for (i, item) in d.items.iter().flatten().enumerate() {
                    validate_downward_api_file(item, names, &dpath.child("items").index(i), errs);
                }
            }
        }
        "projected" => {
            if let Some(p) = &v.projected {
                let ppath = path.child("projected");
                validate_file_mode(p.default_mode, &ppath.child("defaultMode"), errs);
                let mut paths = BTreeSet::new();
                for (i, src) in p.sources.iter().flatten().enumerate() {
                    let spath = ppath.child("sources").index(i);
                    let count = [
                        src.secret.is_some(),
                        src.config_map.is_some(),
                        src.downward_api.is_some(),
                        src.service_account_token.is_some(),
                        src.cluster_trust_bundle.is_some(),
                        src.pod_certificate.is_some(),
                    ]
                    .into_iter()
                    .filter(|b| *b)
                    .count();
                    if count > 1 {
                        errs.push(FieldError::forbidden(
                            &spath,
                            "may not specify more than 1 volume type per source",
                        ));
                    }
                    if let Some(d) = &src.downward_api {
                        for (j, item) in d.items.iter().flatten().enumerate() {
                            validate_downward_api_file(
                                item,
                                names,
                                &spath.child("downwardAPI").child("items").index(j),
                                errs,
                            );
                            if !item.path.is_empty() && !paths.insert(item.path.as_str()) {
                                errs.push(FieldError::invalid(
                                    &ppath,
                                    &item.path,
                                    "conflicting duplicate paths",
                                ));
                            }
                        }
                    }
                    for (kind, name, items) in [
                        ("secret", src.secret.as_ref().map(|x| (&x.name, &x.items))),
                        (
                            "configMap",
                            src.config_map.as_ref().map(|x| (&x.name, &x.items)),
                        ),
                    ]
                    .into_iter()
                    .filter_map(|(k, x)| x.map(|(n, i)| (k, n, i)))
                    {
                        if name.is_empty() {
                            errs.push(FieldError::required(&spath.child(kind).child("name"), ""));
                        }
                        for (j, kp) in items.iter().flatten().enumerate() {
                            validate_key_to_path(
                                kp,
                                &spath.child(kind).child("items").index(j),
                                errs,
                            );
                        }
                    }
                }
            }
        }
        "secret" => {
            if let Some(sv) = &v.secret {
                let spath = path.child("secret");
                if s(&sv.secret_name).is_empty() {
                    errs.push(FieldError::required(&spath.child("secretName"), ""));
                }
                validate_file_mode(sv.default_mode, &spath.child("defaultMode"), errs);
                for (i, kp) in sv.items.iter().flatten().enumerate() {
                    validate_key_to_path(kp, &spath.child("items").index(i), errs);
                }
            }
        }
        "configMap" => {
            if let Some(cm) = &v.config_map {
                let cpath = path.child("configMap");
                if cm.name.is_empty() {
                    errs.push(FieldError::required(&cpath.child("name"), ""));
                }
                validate_file_mode(cm.default_mode, &cpath.child("defaultMode"), errs);
                for (i, kp) in cm.items.iter().flatten().enumerate() {
                    validate_key_to_path(kp, &cpath.child("items").index(i), errs);
                }
            }
        }
        "persistentVolumeClaim"
            if v.persistent_volume_claim
                .as_ref()
                .is_some_and(|c| c.claim_name.is_empty()) =>
        {
            errs.push(FieldError::required(
                &path.child("persistentVolumeClaim").child("claimName"),
                "",
            ));
        }
        // Other plugins are not mounted by nodelet; `validate_static_pod` rejects them, so their
        // plugin-specific fields are not checked here.
        _ => {}
    }
}

fn validate_file_mode(mode: Option<i32>, path: &FieldPath, errs: &mut Errors) {
    if let Some(m) = mode.filter(|m| !(0..=0o777).contains(m)) {
        errs.push(FieldError::invalid(
            path,
            m,
            "must be a number between 0 and 0777 (octal), both inclusive",
        ));
    }
}

fn validate_key_to_path(kp: &KeyToPath, path: &FieldPath, errs: &mut Errors) {
    if kp.key.is_empty() {
        errs.push(FieldError::required(&path.child("key"), ""));
    }
    if kp.path.is_empty() {
        errs.push(FieldError::required(&path.child("path"), ""));
    }
    validate_local_non_reserved_path(&kp.path, &path.child("path"), errs);
    validate_file_mode(kp.mode, &path.child("mode"), errs);
}

fn validate_downward_api_file(
    file: &DownwardAPIVolumeFile,
    names: &BTreeSet<&str>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    if file.path.is_empty() {
        errs.push(FieldError::required(&path.child("path"), ""));
    }
    validate_local_non_reserved_path(&file.path, &path.child("path"), errs);
    match (&file.field_ref, &file.resource_field_ref) {
        (Some(f), r) => {
            validate_object_field_selector(f, VOLUME_FIELD_PATHS, &path.child("fieldRef"), errs);
            if r.is_some() {
                errs.push(FieldError::invalid(
                    path,
                    "resource",
                    "fieldRef and resourceFieldRef can not be specified simultaneously",
                ));
            }
        }
        (None, Some(r)) => validate_resource_field_selector(
            r,
            Some(names),
            true,
            &path.child("resourceFieldRef"),
            errs,
        ),
        (None, None) => errs.push(FieldError::required(
            path,
            "one of fieldRef and resourceFieldRef is required",
        )),
    }
    validate_file_mode(file.mode, &path.child("mode"), errs);
}

fn validate_path_no_backsteps(target: &str, path: &FieldPath, errs: &mut Errors) {
    if target.split('/').any(|part| part == "..") {
        errs.push(FieldError::invalid(path, target, "must not contain '..'"));
    }
}

fn validate_local_descending_path(target: &str, path: &FieldPath, errs: &mut Errors) {
    if target.starts_with('/') {
        errs.push(FieldError::invalid(path, target, "must be a relative path"));
    }
    validate_path_no_backsteps(target, path, errs);
}

fn validate_local_non_reserved_path(target: &str, path: &FieldPath, errs: &mut Errors) {
    validate_local_descending_path(target, path, errs);
    if target.starts_with("..") && !target.starts_with("../") {
        errs.push(FieldError::invalid(
            path,
            target,
            "must not start with '..'",
        ));
    }
}

// ---------------------------------------------------------------- containers

fn validate_containers(
    containers: &[Container],
    ctx: &PodContext<'_>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    if containers.is_empty() {
        errs.push(FieldError::required(path, ""));
        return;
    }
    let mut names = BTreeSet::new();
    for (i, c) in containers.iter().enumerate() {
        let cpath = path.index(i);
        validate_container_common(c, ctx, &cpath, errs);
        if !names.insert(c.name.as_str()) {
            errs.push(FieldError::duplicate(&cpath.child("name"), &c.name));
        }
        if let Some(l) = &c.lifecycle {
            validate_lifecycle(l, ctx.grace_period, &cpath.child("lifecycle"), errs);
            validate_stop_signal(l, ctx.os, &cpath.child("lifecycle"), errs);
        }
        validate_probes(c, &cpath, errs);
        validate_container_restart(c, false, &cpath, errs);
    }
    check_host_port_conflicts(containers.iter().enumerate(), path, errs);
}

fn validate_init_containers(
    inits: &[Container],
    regular: &[Container],
    ctx: &PodContext<'_>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    let mut names: BTreeSet<&str> = regular.iter().map(|c| c.name.as_str()).collect();
    for (i, c) in inits.iter().enumerate() {
        let cpath = path.index(i);
        validate_container_common(c, ctx, &cpath, errs);
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        validate_container_restart(c, true, &cpath, errs);
        if names.contains(c.name.as_str()) {
            errs.push(FieldError::duplicate(&cpath.child("name"), &c.name));
        } else if !c.name.is_empty() {
            names.insert(c.name.as_str());
        }
        // Init containers run one at a time, so only ports within one container can clash.
        check_host_port_conflicts(std::iter::once((i, c)), path, errs);
        if sidecar {
            if let Some(l) = &c.lifecycle {
                validate_lifecycle(l, ctx.grace_period, &cpath.child("lifecycle"), errs);
                validate_stop_signal(l, ctx.os, &cpath.child("lifecycle"), errs);
            }
            validate_probes(c, &cpath, errs);
        } else {
            for (field, set) in [
                ("lifecycle", c.lifecycle.is_some()),
                ("livenessProbe", c.liveness_probe.is_some()),
                ("readinessProbe", c.readiness_probe.is_some()),
                ("startupProbe", c.startup_probe.is_some()),
            ] {
                if set {
                    errs.push(FieldError::forbidden(
                        &cpath.child(field),
                        "may not be set for init containers without restartPolicy=Always",
                    ));
                }
            }
            if c.resize_policy.as_ref().is_some_and(|r| !r.is_empty()) {
                errs.push(FieldError::invalid(
                    &cpath.child("resizePolicy"),
                    "",
                    "must not be set for init containers",
                ));
            }
        }
    }
}

fn check_host_port_conflicts<'a>(
    containers: impl Iterator<Item = (usize, &'a Container)>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    let mut seen = BTreeSet::new();
    for (ci, c) in containers {
        for (pi, p) in c.ports.iter().flatten().enumerate() {
            let hp = p.host_port.unwrap_or(0);
            if hp == 0 {
                continue;
            }
            let key = format!("{}/{}/{}", s(&p.protocol), s(&p.host_ip), hp);
            if !seen.insert(key.clone()) {
                errs.push(FieldError::duplicate(
                    &path.index(ci).child("ports").index(pi).child("hostPort"),
                    key,
                ));
            }
        }
    }
}

/// Container-level `restartPolicy` / `restartPolicyRules` (the ContainerRestartRules and
/// RestartAllContainersOnContainerExits features, as the seed documents them): any container may
/// override the pod's policy; rules need an explicit policy; a sidecar (init container with
/// `Always`) may only carry `RestartAllContainers` rules.
fn validate_container_restart(c: &Container, is_init: bool, path: &FieldPath, errs: &mut Errors) {
    let rules: &[ContainerRestartRule] = c.restart_policy_rules.as_deref().unwrap_or(&[]);
    let policy_path = path.child("restartPolicy");
    let sidecar = is_init && c.restart_policy.as_deref() == Some("Always");
    match c.restart_policy.as_deref() {
        None => {
            if !rules.is_empty() {
                errs.push(FieldError::required(
                    &policy_path,
                    "must specify restartPolicy when restart rules are used",
                ));
            }
        }
        Some("Always" | "OnFailure" | "Never") => {}
        Some(other) => errs.push(FieldError::not_supported(
            &policy_path,
            other,
            &["Always", "Never", "OnFailure"],
        )),
    }
    let rules_path = path.child("restartPolicyRules");
    if rules.len() > MAX_RESTART_RULES {
        errs.push(FieldError::too_many(
            &rules_path,
            rules.len(),
            MAX_RESTART_RULES,
        ));
    }
    let actions: &[&str] = if sidecar {
        &["RestartAllContainers"]
    } else {
        &["Restart", "RestartAllContainers"]
    };
    for (i, rule) in rules.iter().enumerate() {
        let rpath = rules_path.index(i);
        if !actions.contains(&rule.action.as_str()) {
            errs.push(FieldError::not_supported(
                &rpath.child("action"),
                &rule.action,
                actions,
            ));
        }
        let Some(codes) = &rule.exit_codes else {
            errs.push(FieldError::required(
                &rpath.child("exitCodes"),
                "must be specified",
            ));
            continue;
        };
        let cpath = rpath.child("exitCodes");
        if !matches!(codes.operator.as_str(), "In" | "NotIn") {
            errs.push(FieldError::not_supported(
                &cpath.child("operator"),
                &codes.operator,
                &["In", "NotIn"],
            ));
        }
        let values = codes.values.as_deref().unwrap_or(&[]);
        if values.len() > MAX_EXIT_CODE_VALUES {
            errs.push(FieldError::too_many(
                &cpath.child("values"),
                values.len(),
                MAX_EXIT_CODE_VALUES,
            ));
        }
        for (j, v) in values.iter().enumerate() {
            if !(0..=255).contains(v) {
                errs.push(FieldError::invalid(
                    &cpath.child("values").index(j),
                    *v,
                    inclusive_range_error(0, 255),
                ));
            }
        }
    }
}

fn validate_container_common(
    c: &Container,
    ctx: &PodContext<'_>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    let name_path = path.child("name");
    if c.name.is_empty() {
        errs.push(FieldError::required(&name_path, ""));
    } else {
        for msg in dns1123_label(&c.name) {
            errs.push(FieldError::invalid(&name_path, &c.name, msg));
        }
    }
    if s(&c.image).is_empty() {
        errs.push(FieldError::required(&path.child("image"), ""));
    }
    match s(&c.termination_message_policy) {
        "File" | "FallbackToLogsOnError" => {}
        "" => errs.push(FieldError::required(
            &path.child("terminationMessagePolicy"),
            "",
        )),
        other => errs.push(FieldError::not_supported(
            &path.child("terminationMessagePolicy"),
            other,
            &["File", "FallbackToLogsOnError"],
        )),
    }
    validate_ports(c, &path.child("ports"), errs);
    for (i, e) in c.env.iter().flatten().enumerate() {
        validate_env(e, ctx, &path.child("env").index(i), errs);
    }
    validate_env_from(
        c.env_from.as_deref().unwrap_or(&[]),
        &path.child("envFrom"),
        errs,
    );
    let devices = c.volume_devices.as_deref().unwrap_or(&[]);
    let mounts = c.volume_mounts.as_deref().unwrap_or(&[]);
    validate_volume_mounts(mounts, devices, c, ctx, &path.child("volumeMounts"), errs);
    validate_volume_devices(devices, mounts, ctx, &path.child("volumeDevices"), errs);
    match s(&c.image_pull_policy) {
        "Always" | "IfNotPresent" | "Never" => {}
        "" => errs.push(FieldError::required(&path.child("imagePullPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            &path.child("imagePullPolicy"),
            other,
            &["Always", "IfNotPresent", "Never"],
        )),
    }
    if let Some(r) = &c.resources {
        validate_resources(
            r.limits.as_ref(),
            r.requests.as_ref(),
            &path.child("resources"),
            errs,
        );
    }
    for (i, rp) in c.resize_policy.iter().flatten().enumerate() {
        let rpath = path.child("resizePolicy");
        match rp.resource_name.as_str() {
            "cpu" | "memory" => {}
            "" => errs.push(FieldError::required(&rpath, "")),
            other => errs.push(FieldError::not_supported(&rpath, other, &["cpu", "memory"])),
        }
        match rp.restart_policy.as_str() {
            "NotRequired" | "RestartContainer" => {}
            "" => errs.push(FieldError::required(&rpath, "")),
            other => errs.push(FieldError::not_supported(
                &rpath,
                other,
                &["NotRequired", "RestartContainer"],
            )),
        }
        if ctx.pod_restart_policy == "Never" && rp.restart_policy != "NotRequired" {
            errs.push(FieldError::invalid(
                &rpath.index(i),
                &rp.restart_policy,
                "must be 'NotRequired' when `restartPolicy` is 'Never'",
            ));
        }
    }
    if let Some(sc) = &c.security_context {
        validate_security_context(sc, &path.child("securityContext"), errs);
    }
}

fn validate_security_context(sc: &SecurityContext, path: &FieldPath, errs: &mut Errors) {
    if let Some(sp) = &sc.seccomp_profile {
        validate_seccomp_profile(sp, &path.child("seccompProfile"), errs);
    }
    for (field, id) in [
        ("runAsUser", sc.run_as_user),
        ("runAsGroup", sc.run_as_group),
    ] {
        if let Some(id) = id.filter(|id| !(0..=i64::from(i32::MAX)).contains(id)) {
            errs.push(FieldError::invalid(
                &path.child(field),
                id,
                inclusive_range_error(0, i64::from(i32::MAX)),
            ));
        }
    }
    if sc.allow_privilege_escalation == Some(false) {
        if sc.privileged == Some(true) {
            errs.push(FieldError::invalid(
                path,
                "",
                "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            ));
        }
        let adds_sys_admin = sc
            .capabilities
            .as_ref()
            .and_then(|c| c.add.as_ref())
            .is_some_and(|add| {
                add.iter()
                    .any(|cap| cap == "CAP_SYS_ADMIN" || cap == "SYS_ADMIN")
            });
        if adds_sys_admin {
            errs.push(FieldError::invalid(
                path,
                "",
                "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
            ));
        }
    }
}

fn validate_ports(c: &Container, path: &FieldPath, errs: &mut Errors) {
    let mut names = BTreeSet::new();
    for (i, p) in c.ports.iter().flatten().enumerate() {
        let ppath = path.index(i);
        if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
            let msgs = port_name(name);
            if !msgs.is_empty() {
                for msg in msgs {
                    errs.push(FieldError::invalid(&ppath.child("name"), name, msg));
                }
            } else if !names.insert(name) {
                errs.push(FieldError::duplicate(&ppath.child("name"), name));
            }
        }
        if p.container_port == 0 {
            errs.push(FieldError::required(&ppath.child("containerPort"), ""));
        } else {
            for msg in port_num(i64::from(p.container_port)) {
                errs.push(FieldError::invalid(
                    &ppath.child("containerPort"),
                    p.container_port,
                    msg,
                ));
            }
        }
        if let Some(hp) = p.host_port.filter(|hp| *hp != 0) {
            for msg in port_num(i64::from(hp)) {
                errs.push(FieldError::invalid(&ppath.child("hostPort"), hp, msg));
            }
        }
        match s(&p.protocol) {
            "TCP" | "UDP" | "SCTP" => {}
            "" => errs.push(FieldError::required(&ppath.child("protocol"), "")),
            other => errs.push(FieldError::not_supported(
                &ppath.child("protocol"),
                other,
                &["SCTP", "TCP", "UDP"],
            )),
        }
    }
}

/// Field paths a container's env may take from the pod (`validEnvDownwardAPIFieldPathExpressions`),
/// sorted as Go's `sets.List` prints them.
const ENV_FIELD_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];
/// Field paths a downwardAPI volume may project.
const VOLUME_FIELD_PATHS: &[&str] = &[
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
];
/// Field labels the pod's v1 downward API conversion knows (`ConvertDownwardAPIFieldLabel`).
const CONVERTIBLE_FIELD_PATHS: &[&str] = &[
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.serviceAccountName",
    "spec.schedulerName",
    "status.phase",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];
const RESOURCE_FIELD_PATHS: &[&str] = &[
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
];

fn validate_env(e: &EnvVar, ctx: &PodContext<'_>, path: &FieldPath, errs: &mut Errors) {
    if e.name.is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    } else {
        for msg in env_var_name(&e.name) {
            errs.push(FieldError::invalid(&path.child("name"), &e.name, msg));
        }
    }
    let Some(from) = &e.value_from else { return };
    let vpath = path.child("valueFrom");
    let mut sources = 0;
    if let Some(f) = &from.field_ref {
        sources += 1;
        validate_object_field_selector(f, ENV_FIELD_PATHS, &vpath.child("fieldRef"), errs);
    }
    if let Some(r) = &from.resource_field_ref {
        sources += 1;
        validate_resource_field_selector(
            r,
            Some(&ctx.container_names),
            false,
            &vpath.child("resourceFieldRef"),
            errs,
        );
    }
    if let Some(k) = &from.config_map_key_ref {
        sources += 1;
        validate_key_selector(&k.name, &k.key, &vpath.child("configMapKeyRef"), errs);
    }
    if let Some(k) = &from.secret_key_ref {
        sources += 1;
        validate_key_selector(&k.name, &k.key, &vpath.child("secretKeyRef"), errs);
    }
    if let Some(f) = &from.file_key_ref {
        sources += 1;
        let fpath = vpath.child("fileKeyRef");
        if f.volume_name.is_empty() {
            errs.push(FieldError::required(&fpath.child("volumeName"), ""));
        }
        if f.path.is_empty() {
            errs.push(FieldError::required(&fpath.child("path"), ""));
        } else {
            validate_local_non_reserved_path(&f.path, &fpath.child("path"), errs);
        }
        if f.key.is_empty() {
            errs.push(FieldError::required(&fpath.child("key"), ""));
        }
    }
    if sources == 0 {
        errs.push(FieldError::invalid(
            &vpath,
            "",
            "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
        ));
    } else if !s(&e.value).is_empty() {
        errs.push(FieldError::invalid(
            &vpath,
            "",
            "may not be specified when `value` is not empty",
        ));
    } else if sources > 1 {
        errs.push(FieldError::invalid(
            &vpath,
            "",
            "may not have more than one field specified at a time",
        ));
    }
}

fn validate_key_selector(name: &str, key: &str, path: &FieldPath, errs: &mut Errors) {
    for msg in dns1123_subdomain(name) {
        errs.push(FieldError::invalid(&path.child("name"), name, msg));
    }
    if key.is_empty() {
        errs.push(FieldError::required(&path.child("key"), ""));
    } else {
        let ok_chars = key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
        if key.len() > 253 {
            errs.push(FieldError::invalid(
                &path.child("key"),
                key,
                "must be no more than 253 characters",
            ));
        }
        if !ok_chars {
            errs.push(FieldError::invalid(
                &path.child("key"),
                key,
                "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            ));
        }
        if key == "." || key == ".." || key.starts_with("..") {
            errs.push(FieldError::invalid(
                &path.child("key"),
                key,
                "must not be '.' or '..' or start with '..'",
            ));
        }
    }
}

fn validate_env_from(sources: &[EnvFromSource], path: &FieldPath, errs: &mut Errors) {
    for (i, e) in sources.iter().enumerate() {
        let epath = path.index(i);
        if let Some(prefix) = e.prefix.as_deref().filter(|p| !p.is_empty()) {
            for msg in env_var_name(prefix) {
                errs.push(FieldError::invalid(&epath.child("prefix"), prefix, msg));
            }
        }
        let mut count = 0;
        for (kind, name) in [
            ("configMapRef", e.config_map_ref.as_ref().map(|r| &r.name)),
            ("secretRef", e.secret_ref.as_ref().map(|r| &r.name)),
        ] {
            let Some(name) = name else { continue };
            count += 1;
            if name.is_empty() {
                errs.push(FieldError::required(&epath.child(kind).child("name"), ""));
            }
        }
        if count == 0 {
            errs.push(FieldError::invalid(
                path,
                "",
                "must specify one of: `configMapRef` or `secretRef`",
            ));
        } else if count > 1 {
            errs.push(FieldError::invalid(
                path,
                "",
                "may not have more than one field specified at a time",
            ));
        }
    }
}

/// `metadata.labels['app']` -> `("metadata.labels", "app")` (Go's `SplitMaybeSubscriptedPath`).
fn split_subscripted(field_path: &str) -> Option<(&str, &str)> {
    let inner = field_path.strip_suffix("']")?;
    let (path, subscript) = inner.split_once("['")?;
    (!path.is_empty()).then_some((path, subscript))
}

fn validate_object_field_selector(
    fs: &ObjectFieldSelector,
    allowed: &[&str],
    path: &FieldPath,
    errs: &mut Errors,
) {
    let api_version = s(&fs.api_version);
    if api_version.is_empty() {
        errs.push(FieldError::required(&path.child("apiVersion"), ""));
        return;
    }
    if fs.field_path.is_empty() {
        errs.push(FieldError::required(&path.child("fieldPath"), ""));
        return;
    }
    let fp_path = path.child("fieldPath");
    let conversion_error = if api_version != "v1" {
        Some(format!("unsupported pod version: {api_version}"))
    } else {
        match split_subscripted(&fs.field_path) {
            Some((p, _)) if p != "metadata.annotations" && p != "metadata.labels" => Some(format!(
                "field label does not support subscript: {}",
                fs.field_path
            )),
            Some(_) => None,
            None if !CONVERTIBLE_FIELD_PATHS.contains(&fs.field_path.as_str()) => {
                Some(format!("field label not supported: {}", fs.field_path))
            }
            None => None,
        }
    };
    if let Some(err) = conversion_error {
        errs.push(FieldError::invalid(
            &fp_path,
            &fs.field_path,
            format!("error converting fieldPath: {err}"),
        ));
        return;
    }
    match split_subscripted(&fs.field_path) {
        Some(("metadata.annotations", key)) => {
            for msg in qualified_name(&key.to_lowercase()) {
                errs.push(FieldError::invalid(path, key, msg));
            }
        }
        Some((_, key)) => {
            for msg in qualified_name(key) {
                errs.push(FieldError::invalid(path, key, msg));
            }
        }
        None => {
            if !allowed.contains(&fs.field_path.as_str()) {
                errs.push(FieldError::not_supported(&fp_path, &fs.field_path, allowed));
            }
        }
    }
}

fn validate_resource_field_selector(
    fs: &ResourceFieldSelector,
    container_names: Option<&BTreeSet<&str>>,
    volume: bool,
    path: &FieldPath,
    errs: &mut Errors,
) {
    let container = s(&fs.container_name);
    let hugepages = fs.resource.starts_with("requests.hugepages-")
        || fs.resource.starts_with("limits.hugepages-");
    if volume && container.is_empty() {
        errs.push(FieldError::required(&path.child("containerName"), ""));
    } else if fs.resource.is_empty() {
        errs.push(FieldError::required(&path.child("resource"), ""));
    } else if !RESOURCE_FIELD_PATHS.contains(&fs.resource.as_str()) && !hugepages {
        errs.push(FieldError::not_supported(
            &path.child("resource"),
            &fs.resource,
            RESOURCE_FIELD_PATHS,
        ));
    }
    if let Some(names) = container_names {
        if !container.is_empty() && !names.contains(container) {
            errs.push(FieldError::not_found(
                &path.child("containerName"),
                container,
            ));
        }
    }
    let Some(divisor) = &fs.divisor else { return };
    let dpath = path.child("divisor");
    let d = match Quantity::try_from(divisor) {
        Ok(d) => d,
        Err(_) => {
            errs.push(FieldError::invalid(&dpath, &divisor.0, QUANTITY_REGEX_ERR));
            return;
        }
    };
    if d.is_zero() {
        return;
    }
    let is = |units: &[&str]| {
        units
            .iter()
            .any(|u| Quantity::parse(u).is_ok_and(|q| q == d))
    };
    const BYTES: &[&str] = &[
        "1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei",
    ];
    let (ok, what) = match fs.resource.as_str() {
        "limits.cpu" | "requests.cpu" => (
            is(&["1m", "1"]),
            "only divisor's values 1m and 1 are supported with the cpu resource",
        ),
        "limits.memory" | "requests.memory" => (
            is(BYTES),
            "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the memory resource",
        ),
        "limits.ephemeral-storage" | "requests.ephemeral-storage" => (
            is(BYTES),
            "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the local ephemeral storage resource",
        ),
        _ if hugepages => (
            is(BYTES),
            "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the hugepages resource",
        ),
        _ => (true, ""),
    };
    if !ok {
        errs.push(FieldError::invalid(&dpath, &fs.resource, what));
    }
}

fn validate_volume_mounts(
    mounts: &[VolumeMount],
    devices: &[VolumeDevice],
    c: &Container,
    ctx: &PodContext<'_>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    let mut mount_points = BTreeSet::new();
    for (i, m) in mounts.iter().enumerate() {
        let mpath = path.index(i);
        if m.name.is_empty() {
            errs.push(FieldError::required(&mpath.child("name"), ""));
        }
        if !ctx.volumes.contains_key(m.name.as_str()) {
            errs.push(FieldError::not_found(&mpath.child("name"), &m.name));
        }
        if m.mount_path.is_empty() {
            errs.push(FieldError::required(&mpath.child("mountPath"), ""));
        } else if !m.mount_path.starts_with('/') {
            // The API server leaves this to the runtime; the container would fail to start.
            errs.push(FieldError::invalid(
                &mpath.child("mountPath"),
                &m.mount_path,
                "must be an absolute path",
            ));
        }
        if !mount_points.insert(m.mount_path.as_str()) {
            errs.push(FieldError::invalid(
                &mpath.child("mountPath"),
                &m.mount_path,
                "must be unique",
            ));
        }
        if devices.iter().any(|d| d.name == m.name) {
            errs.push(FieldError::invalid(
                &mpath.child("name"),
                &m.name,
                "must not already exist in volumeDevices",
            ));
        }
        if devices.iter().any(|d| d.device_path == m.mount_path) {
            errs.push(FieldError::invalid(
                &mpath.child("mountPath"),
                &m.mount_path,
                "must not already exist as a path in volumeDevices",
            ));
        }
        let sub_path = s(&m.sub_path);
        let sub_path_expr = s(&m.sub_path_expr);
        if ctx
            .volumes
            .get(m.name.as_str())
            .is_some_and(|v| v.image.is_some())
        {
            if !sub_path.is_empty() {
                errs.push(FieldError::invalid(
                    &mpath.child("subPath"),
                    sub_path,
                    "not allowed in image volume sources",
                ));
            }
            if !sub_path_expr.is_empty() {
                errs.push(FieldError::invalid(
                    &mpath.child("subPathExpr"),
                    sub_path_expr,
                    "not allowed in image volume sources",
                ));
            }
        }
        if !sub_path.is_empty() {
            validate_local_descending_path(sub_path, &mpath.child("subPath"), errs);
        }
        if !sub_path_expr.is_empty() {
            if !sub_path.is_empty() {
                errs.push(FieldError::invalid(
                    &mpath.child("subPathExpr"),
                    sub_path_expr,
                    "subPathExpr and subPath are mutually exclusive",
                ));
            }
            validate_local_descending_path(sub_path_expr, &mpath.child("subPathExpr"), errs);
        }
        let propagation = m.mount_propagation.as_deref();
        if let Some(p) = propagation {
            let ppath = mpath.child("mountPropagation");
            if !matches!(p, "Bidirectional" | "HostToContainer" | "None") {
                errs.push(FieldError::not_supported(
                    &ppath,
                    p,
                    &["Bidirectional", "HostToContainer", "None"],
                ));
            }
            let privileged = c.security_context.as_ref().and_then(|sc| sc.privileged) == Some(true);
            if p == "Bidirectional" && !privileged {
                errs.push(FieldError::forbidden(
                    &ppath,
                    "Bidirectional mount propagation is available only to privileged containers",
                ));
            }
        }
        if let Some(rro) = m.recursive_read_only.as_deref() {
            let rpath = mpath.child("recursiveReadOnly");
            match rro {
                "Disabled" => {}
                "Enabled" | "IfPossible" => {
                    if m.read_only != Some(true) {
                        errs.push(FieldError::forbidden(
                            &rpath,
                            "may only be specified when readOnly is true",
                        ));
                    }
                    if propagation.is_some_and(|p| p != "None") {
                        errs.push(FieldError::forbidden(
                            &rpath,
                            "may only be specified when mountPropagation is None or not specified",
                        ));
                    }
                }
                other => errs.push(FieldError::not_supported(
                    &rpath,
                    other,
                    &["Disabled", "Enabled", "IfPossible"],
                )),
            }
        }
    }
}

fn validate_volume_devices(
    devices: &[VolumeDevice],
    mounts: &[VolumeMount],
    ctx: &PodContext<'_>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    let mut names = BTreeSet::new();
    let mut paths = BTreeSet::new();
    for (i, d) in devices.iter().enumerate() {
        let dpath = path.index(i);
        if d.name.is_empty() {
            errs.push(FieldError::required(&dpath.child("name"), ""));
        }
        if !d.name.is_empty() && !names.insert(d.name.as_str()) {
            errs.push(FieldError::invalid(
                &dpath.child("name"),
                &d.name,
                "must be unique",
            ));
        }
        match ctx.volumes.get(d.name.as_str()) {
            None => errs.push(FieldError::not_found(&dpath.child("name"), &d.name)),
            Some(v) if v.persistent_volume_claim.is_none() && v.ephemeral.is_none() => {
                errs.push(FieldError::invalid(
                    &dpath.child("name"),
                    &d.name,
                    "can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode",
                ))
            }
            Some(_) => {}
        }
        if d.device_path.is_empty() {
            errs.push(FieldError::required(&dpath.child("devicePath"), ""));
        }
        if !paths.insert(d.device_path.as_str()) {
            errs.push(FieldError::invalid(
                &dpath.child("devicePath"),
                &d.device_path,
                "must be unique",
            ));
        }
        if d.device_path.split('/').any(|p| p == "..") {
            errs.push(FieldError::invalid(
                &dpath.child("devicePath"),
                &d.device_path,
                "can not contain backsteps ('..')",
            ));
        }
        if mounts.iter().any(|m| m.name == d.name) {
            errs.push(FieldError::invalid(
                &dpath.child("name"),
                &d.name,
                "must not already exist in volumeMounts",
            ));
        }
        if mounts.iter().any(|m| m.mount_path == d.device_path) {
            errs.push(FieldError::invalid(
                &dpath.child("devicePath"),
                &d.device_path,
                "must not already exist as a path in volumeMounts",
            ));
        }
    }
}

// ---------------------------------------------------------------- resources

fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// No `/`, or in the `kubernetes.io/` domain (`IsNativeResource`).
fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

fn is_extended_resource(name: &str) -> bool {
    !is_native_resource(name)
        && !name.starts_with("requests.")
        && qualified_name(&format!("requests.{name}")).is_empty()
}

/// Requests may be below limits only for overcommittable resources (native, not hugepages).
fn is_overcommit_allowed(name: &str) -> bool {
    is_native_resource(name) && !is_hugepages(name)
}

fn validate_resource_name(name: &str, path: &FieldPath, errs: &mut Errors) {
    for msg in qualified_name(name) {
        errs.push(FieldError::invalid(path, name, msg));
    }
    if !name.contains('/') {
        let standard = matches!(name, "cpu" | "memory" | "ephemeral-storage") || is_hugepages(name);
        if !standard {
            errs.push(FieldError::invalid(
                path,
                name,
                "must be a standard resource for containers",
            ));
        }
    } else if !is_native_resource(name) && !is_extended_resource(name) {
        errs.push(FieldError::invalid(
            path,
            name,
            "doesn't follow extended resource name standard",
        ));
    }
}

/// Parse and range-check one quantity; `None` when it is unusable (error already recorded).
fn validate_quantity(
    name: &str,
    q: &K8sQuantity,
    path: &FieldPath,
    errs: &mut Errors,
) -> Option<Quantity> {
    let parsed = match Quantity::try_from(q) {
        Ok(p) => p,
        Err(_) => {
            errs.push(FieldError::invalid(path, &q.0, QUANTITY_REGEX_ERR));
            return None;
        }
    };
    if parsed < Quantity::default() {
        errs.push(FieldError::invalid(path, &q.0, IS_NEGATIVE));
    }
    if is_extended_resource(name) && parsed.milli_value() % 1000 != 0 {
        errs.push(FieldError::invalid(path, &q.0, "must be an integer"));
    }
    Some(parsed)
}

fn validate_resource_list(
    list: &BTreeMap<String, K8sQuantity>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    for (name, q) in list {
        let qpath = path.key(name);
        validate_resource_name(name, &qpath, errs);
        validate_quantity(name, q, &qpath, errs);
    }
}

fn validate_resources(
    limits: Option<&BTreeMap<String, K8sQuantity>>,
    requests: Option<&BTreeMap<String, K8sQuantity>>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    let lim_path = path.child("limits");
    let req_path = path.child("requests");
    let mut parsed_limits = BTreeMap::new();
    let mut cpu_or_memory = false;
    let mut hugepages = false;
    for (name, q) in limits.into_iter().flatten() {
        let qpath = lim_path.key(name);
        validate_resource_name(name, &qpath, errs);
        if let Some(p) = validate_quantity(name, q, &qpath, errs) {
            parsed_limits.insert(name.as_str(), (p, q));
        }
        cpu_or_memory |= name == "cpu" || name == "memory";
        hugepages |= is_hugepages(name);
    }
    for (name, q) in requests.into_iter().flatten() {
        let qpath = req_path.key(name);
        validate_resource_name(name, &qpath, errs);
        let parsed = validate_quantity(name, q, &qpath, errs);
        cpu_or_memory |= name == "cpu" || name == "memory";
        hugepages |= is_hugepages(name);
        match (parsed, parsed_limits.get(name.as_str())) {
            (Some(req), Some((lim, lim_raw))) => {
                if req != *lim && !is_overcommit_allowed(name) {
                    errs.push(FieldError::invalid(
                        &req_path,
                        &q.0,
                        format!("must be equal to {name} limit of {}", lim_raw.0),
                    ));
                } else if req > *lim {
                    errs.push(FieldError::invalid(
                        &req_path,
                        &q.0,
                        format!(
                            "must be less than or equal to {name} limit of {}",
                            lim_raw.0
                        ),
                    ));
                }
            }
            (_, None)
                if !is_overcommit_allowed(name)
                    && !limits.is_some_and(|l| l.contains_key(name)) =>
            {
                errs.push(FieldError::required(
                    &lim_path,
                    "Limit must be set for non overcommitable resources",
                ));
            }
            _ => {}
        }
    }
    if hugepages && !cpu_or_memory {
        errs.push(FieldError::forbidden(
            path,
            "HugePages require cpu or memory",
        ));
    }
}

// ---------------------------------------------------------------- probes and handlers

fn validate_probes(c: &Container, path: &FieldPath, errs: &mut Errors) {
    if let Some(p) = &c.liveness_probe {
        let ppath = path.child("livenessProbe");
        validate_probe(p, &ppath, errs);
        if p.success_threshold.unwrap_or(0) != 1 {
            errs.push(FieldError::invalid(
                &ppath.child("successThreshold"),
                p.success_threshold.unwrap_or(0),
                "must be 1",
            ));
        }
    }
    if let Some(p) = &c.readiness_probe {
        let ppath = path.child("readinessProbe");
        validate_probe(p, &ppath, errs);
        if let Some(t) = p.termination_grace_period_seconds {
            errs.push(FieldError::invalid(
                &ppath.child("terminationGracePeriodSeconds"),
                t,
                "must not be set for readinessProbes",
            ));
        }
    }
    if let Some(p) = &c.startup_probe {
        let ppath = path.child("startupProbe");
        validate_probe(p, &ppath, errs);
        if p.success_threshold.unwrap_or(0) != 1 {
            errs.push(FieldError::invalid(
                &ppath.child("successThreshold"),
                p.success_threshold.unwrap_or(0),
                "must be 1",
            ));
        }
    }
}

fn validate_probe(p: &Probe, path: &FieldPath, errs: &mut Errors) {
    let mut handlers = Vec::new();
    if let Some(exec) = &p.exec {
        handlers.push((
            "exec",
            Handler::Exec(exec.command.as_deref().unwrap_or(&[])),
        ));
    }
    if let Some(http) = &p.http_get {
        handlers.push(("httpGet", Handler::Http(http)));
    }
    if let Some(tcp) = &p.tcp_socket {
        handlers.push(("tcpSocket", Handler::Port(&tcp.port)));
    }
    if let Some(grpc) = &p.grpc {
        handlers.push(("grpc", Handler::GrpcPort(grpc.port)));
    }
    validate_handlers(handlers, None, path, errs);
    for (field, v) in [
        ("initialDelaySeconds", p.initial_delay_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("periodSeconds", p.period_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ] {
        if let Some(v) = v.filter(|v| *v < 0) {
            errs.push(FieldError::invalid(&path.child(field), v, IS_NEGATIVE));
        }
    }
    if let Some(t) = p.termination_grace_period_seconds.filter(|t| *t <= 0) {
        errs.push(FieldError::invalid(
            &path.child("terminationGracePeriodSeconds"),
            t,
            "must be greater than 0",
        ));
    }
}

/// The API's `validateSeccompProfileField`: a known type; `localhostProfile` set exactly when
/// the type is `Localhost`, and then a relative path without `..` (it is joined to the
/// node's seccomp directory).
fn validate_seccomp_profile(sp: &SeccompProfile, path: &FieldPath, errs: &mut Errors) {
    let types = ["Localhost", "RuntimeDefault", "Unconfined"];
    match sp.type_.as_str() {
        "" => errs.push(FieldError::required(&path.child("type"), "")),
        t if !types.contains(&t) => {
            errs.push(FieldError::not_supported(&path.child("type"), t, &types))
        }
        _ => {}
    }
    let profile_path = path.child("localhostProfile");
    match (sp.type_.as_str(), sp.localhost_profile.as_deref()) {
        ("Localhost", None | Some("")) => errs.push(FieldError::required(
            &profile_path,
            "must be set when seccomp type is Localhost",
        )),
        ("Localhost", Some(profile)) => {
            validate_local_descending_path(profile, &profile_path, errs)
        }
        (_, Some(profile)) => errs.push(FieldError::invalid(
            &profile_path,
            profile,
            "can only be set when seccomp type is Localhost",
        )),
        (_, None) => {}
    }
}

/// The stop signals the API accepts for Linux pods (`supportedStopSignalsLinux`).
pub const LINUX_STOP_SIGNALS: &[&str] = &[
    "SIGABRT",
    "SIGALRM",
    "SIGBUS",
    "SIGCHLD",
    "SIGCLD",
    "SIGCONT",
    "SIGFPE",
    "SIGHUP",
    "SIGILL",
    "SIGINT",
    "SIGIO",
    "SIGIOT",
    "SIGKILL",
    "SIGPIPE",
    "SIGPOLL",
    "SIGPROF",
    "SIGPWR",
    "SIGQUIT",
    "SIGSEGV",
    "SIGSTKFLT",
    "SIGSTOP",
    "SIGSYS",
    "SIGTERM",
    "SIGTRAP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGUSR1",
    "SIGUSR2",
    "SIGVTALRM",
    "SIGWINCH",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGRTMIN",
    "SIGRTMIN+1",
    "SIGRTMIN+2",
    "SIGRTMIN+3",
    "SIGRTMIN+4",
    "SIGRTMIN+5",
    "SIGRTMIN+6",
    "SIGRTMIN+7",
    "SIGRTMIN+8",
    "SIGRTMIN+9",
    "SIGRTMIN+10",
    "SIGRTMIN+11",
    "SIGRTMIN+12",
    "SIGRTMIN+13",
    "SIGRTMIN+14",
    "SIGRTMIN+15",
    "SIGRTMAX-14",
    "SIGRTMAX-13",
    "SIGRTMAX-12",
    "SIGRTMAX-11",
    "SIGRTMAX-10",
    "SIGRTMAX-9",
    "SIGRTMAX-8",
    "SIGRTMAX-7",
    "SIGRTMAX-6",
    "SIGRTMAX-5",
    "SIGRTMAX-4",
    "SIGRTMAX-3",
    "SIGRTMAX-2",
    "SIGRTMAX-1",
    "SIGRTMAX",
];

/// The stop signals the API accepts for Windows pods (`supportedStopSignalsWindows`).
pub const WINDOWS_STOP_SIGNALS: &[&str] = &["SIGKILL", "SIGTERM"];

/// The API's `validateStopSignal`: only with `spec.os.name`, and only a signal that OS has.
fn validate_stop_signal(l: &Lifecycle, os: Option<&str>, path: &FieldPath, errs: &mut Errors) {
    let Some(signal) = l.stop_signal.as_deref() else {
        return;
    };
    let path = path.child("stopSignal");
    let supported = match os {
        Some("linux") => LINUX_STOP_SIGNALS,
        Some("windows") => WINDOWS_STOP_SIGNALS,
        // An unknown OS name is reported at `spec.os.name`.
        Some(_) => return,
        None => {
            errs.push(FieldError::forbidden(
                &path,
                "may not be set for containers with empty `spec.os.name`",
            ));
            return;
        }
    };
    if !supported.contains(&signal) {
        // The API lists the supported values sorted, as `sets.List` does.
        let mut sorted = supported.to_vec();
        sorted.sort_unstable();
        errs.push(FieldError::not_supported(&path, signal, &sorted));
    }
}

fn validate_lifecycle(l: &Lifecycle, grace: Option<i64>, path: &FieldPath, errs: &mut Errors) {
    for (field, h) in [("postStart", &l.post_start), ("preStop", &l.pre_stop)] {
        if let Some(h) = h {
            validate_lifecycle_handler(h, grace, &path.child(field), errs);
        }
    }
}

fn validate_lifecycle_handler(
    h: &LifecycleHandler,
    grace: Option<i64>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    let mut handlers = Vec::new();
    if let Some(exec) = &h.exec {
        handlers.push((
            "exec",
            Handler::Exec(exec.command.as_deref().unwrap_or(&[])),
        ));
    }
    if let Some(http) = &h.http_get {
        handlers.push(("httpGet", Handler::Http(http)));
    }
    if let Some(tcp) = &h.tcp_socket {
        handlers.push(("tcpSocket", Handler::Port(&tcp.port)));
    }
    if let Some(sleep) = &h.sleep {
        handlers.push(("sleep", Handler::Sleep(sleep.seconds)));
    }
    validate_handlers(handlers, grace, path, errs);
}

enum Handler<'a> {
    Exec(&'a [String]),
    Http(&'a HTTPGetAction),
    Port(&'a IntOrString),
    GrpcPort(i32),
    Sleep(i64),
}

fn validate_handlers(
    handlers: Vec<(&str, Handler<'_>)>,
    grace: Option<i64>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    if handlers.is_empty() {
        errs.push(FieldError::required(path, "must specify a handler type"));
        return;
    }
    for (i, (name, handler)) in handlers.into_iter().enumerate() {
        let hpath = path.child(name);
        if i > 0 {
            errs.push(FieldError::forbidden(
                &hpath,
                "may not specify more than 1 handler type",
            ));
            continue;
        }
        match handler {
            Handler::Exec(command) => {
                if command.is_empty() {
                    errs.push(FieldError::required(&hpath.child("command"), ""));
                }
            }
            Handler::Http(http) => {
                if s(&http.path).is_empty() {
                    errs.push(FieldError::required(&hpath.child("path"), ""));
                }
                validate_port_num_or_name(&http.port, &hpath.child("port"), errs);
                let scheme = s(&http.scheme);
                if scheme != "HTTP" && scheme != "HTTPS" {
                    errs.push(FieldError::not_supported(
                        &hpath.child("scheme"),
                        scheme,
                        &["HTTP", "HTTPS"],
                    ));
                }
                for header in http.http_headers.iter().flatten() {
                    for msg in http_header_name(&header.name) {
                        errs.push(FieldError::invalid(
                            &hpath.child("httpHeaders"),
                            &header.name,
                            msg,
                        ));
                    }
                }
            }
            Handler::Port(port) => validate_port_num_or_name(port, &hpath.child("port"), errs),
            Handler::GrpcPort(port) => {
                for msg in port_num(i64::from(port)) {
                    errs.push(FieldError::invalid(&hpath.child("port"), port, msg));
                }
            }
            Handler::Sleep(seconds) => {
                // PodLifecycleSleepActionAllowZero is on: zero is allowed.
                if let Some(g) = grace.filter(|g| seconds < 0 || seconds > *g) {
                    errs.push(FieldError::invalid(
                        &hpath,
                        seconds,
                        format!("must be non-negative and less than terminationGracePeriodSeconds ({g})"),
                    ));
                }
            }
        }
    }
}

fn validate_port_num_or_name(port: &IntOrString, path: &FieldPath, errs: &mut Errors) {
    match port {
        IntOrString::Int(n) => {
            for msg in port_num(i64::from(*n)) {
                errs.push(FieldError::invalid(path, *n, msg));
            }
        }
        IntOrString::String(name) => {
            for msg in port_name(name) {
                errs.push(FieldError::invalid(path, name, msg));
            }
        }
    }
}

// ---------------------------------------------------------------- static pods

/// The longest `metadata.uid` a static pod may set: a file name's limit (`NAME_MAX`).
const MAX_UID_BYTES: usize = 255;

/// A static pod's `metadata.uid` names its directories (`<rootDir>/pods/<uid>`, its volumes,
/// its logs), so it must be one path segment: not `.` or `..`, no `/`, no NUL, no longer than
/// a file name. The API server sets every other pod's UID itself (a UUID); a manifest can
/// set anything.
fn validate_static_pod_uid(uid: &str, path: &FieldPath, errs: &mut Errors) {
    let problem = if uid == "." || uid == ".." {
        Some("must not be '.' or '..'")
    } else if uid.contains('/') {
        Some("must not contain '/'")
    } else if uid.contains('\0') {
        Some("must not contain NUL")
    } else if uid.len() > MAX_UID_BYTES {
        Some("must be no more than 255 bytes")
    } else {
        None
    };
    if let Some(problem) = problem {
        errs.push(FieldError::invalid(path, uid, problem));
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::defaults::apply_defaults;

    /// Errors for a defaulted pod whose `spec` (besides `nodeName`) is `spec_yaml`, indented by
    /// two spaces as under `spec:`.
    fn errors_for(spec_yaml: &str) -> Vec<String> {
        errors_for_pod("  name: web-node1\n  namespace: default\n", spec_yaml)
    }

    fn errors_for_pod(meta_yaml: &str, spec_yaml: &str) -> Vec<String> {
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

    const C: &str = "  containers:\n  - name: c\n    image: busybox:1.36\n";

    /// A spec with one container `c` whose extra fields are `container_yaml` (indented by four).
    fn with_container(container_yaml: &str) -> String {
        format!("{C}{container_yaml}")
    }

    fn label_msg(s: &str) -> String {
        dns1123_label(s).join("")
    }

    #[test]
    fn valid_pods_have_no_errors() {
        let cases: &[&str] = &[
            C,
            // seed: a regular container may override the pod's restart policy
            "  restartPolicy: OnFailure\n  containers:\n  - name: try-once\n    image: busybox:1.27.2\n    restartPolicy: Never\n",
            // seed: restart on specific exit codes
            "  restartPolicy: Never\n  containers:\n  - name: c\n    image: busybox:1.27.2\n    restartPolicy: Never\n    restartPolicyRules:\n    - action: Restart\n      exitCodes: {operator: In, values: [42]}\n",
            // seed: a sidecar that restarts the whole pod on exit code 88
            "  restartPolicy: Never\n  initContainers:\n  - name: setup\n    image: busybox:1.27.2\n  - name: watcher\n    image: busybox:1.27.2\n    restartPolicy: Always\n    restartPolicyRules:\n    - action: RestartAllContainers\n      exitCodes: {operator: In, values: [88]}\n  containers:\n  - name: main\n    image: busybox:1.27.2\n",
            // sidecar with probes and lifecycle
            "  initContainers:\n  - name: log\n    image: fluent-bit:1.8\n    restartPolicy: Always\n    readinessProbe:\n      tcpSocket: {port: 2020}\n    lifecycle:\n      preStop:\n        sleep: {seconds: 5}\n  containers:\n  - name: app\n    image: nginx:1.27\n",
            // volumes nodelet supports, mounted
            "  volumes:\n  - name: scratch\n    emptyDir: {sizeLimit: 1Gi}\n  - name: logs\n    hostPath: {path: /var/log, type: Directory}\n  - name: info\n    downwardAPI:\n      items:\n      - path: labels\n        fieldRef: {fieldPath: metadata.labels}\n      - path: cpu\n        resourceFieldRef: {containerName: c, resource: limits.cpu, divisor: 1m}\n  - name: proj\n    projected:\n      sources:\n      - downwardAPI:\n          items:\n          - {path: name, fieldRef: {fieldPath: metadata.name}}\n  containers:\n  - name: c\n    image: busybox:1.36\n    volumeMounts:\n    - {name: scratch, mountPath: /scratch}\n    - {name: logs, mountPath: /logs, readOnly: true, subPath: app}\n    - {name: info, mountPath: /etc/info}\n    - {name: proj, mountPath: /etc/proj}\n",
            // env from the downward API, resources, probes with every handler
            "  containers:\n  - name: c\n    image: busybox:1.36\n    env:\n    - {name: A, value: x}\n    - {name: my.var-1, value: y}\n    - name: POD\n      valueFrom: {fieldRef: {fieldPath: metadata.name}}\n    - name: APP\n      valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}\n    - name: IP\n      valueFrom: {fieldRef: {fieldPath: status.podIPs}}\n    - name: MEM\n      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}\n    resources:\n      limits: {cpu: 500m, memory: 128Mi, example.com/gpu: 1}\n      requests: {cpu: 250m}\n    livenessProbe:\n      httpGet: {path: /healthz, port: http, httpHeaders: [{name: X-Probe, value: '1'}]}\n    readinessProbe:\n      exec: {command: [cat, /tmp/ready]}\n    startupProbe:\n      grpc: {port: 9000}\n    ports:\n    - {name: http, containerPort: 8080}\n    - {containerPort: 53, protocol: UDP, hostPort: 53}\n",
            // host network: host ports default to container ports
            "  hostNetwork: true\n  containers:\n  - name: c\n    image: busybox:1.36\n    ports:\n    - containerPort: 10250\n",
            "  dnsPolicy: None\n  dnsConfig: {nameservers: [10.0.0.10], searches: [svc.cluster.local, my_domain.local, .]}\n" ,
        ];
        for spec in cases {
            let spec = if spec.contains("containers:") {
                spec.to_string()
            } else {
                format!("{C}{spec}")
            };
            assert_eq!(errors_for(&spec), Vec::<String>::new(), "spec:\n{spec}");
        }
    }

    #[test]
    fn pod_level_rules() {
        let cases: Vec<(String, Vec<String>)> = vec![
            ("  containers: []\n".into(), vec!["spec.containers: Required value".into()]),
            (
                format!("{C}  restartPolicy: Sometimes\n"),
                vec!["spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"".into()],
            ),
            (
                format!("{C}  terminationGracePeriodSeconds: -1\n"),
                vec!["spec.terminationGracePeriodSeconds: Invalid value: -1: must be greater than or equal to 0".into()],
            ),
            (
                format!("{C}  activeDeadlineSeconds: 0\n"),
                vec!["spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive".into()],
            ),
            (
                format!("{C}  dnsPolicy: Sometimes\n"),
                vec!["spec.dnsPolicy: Unsupported value: \"Sometimes\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"".into()],
            ),
            (
                format!("{C}  dnsPolicy: None\n"),
                vec!["spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None".into()],
            ),
            (
                format!("{C}  hostname: Web_1\n"),
                vec![format!("spec.hostname: Invalid value: \"Web_1\": {}", label_msg("Web_1"))],
            ),
            (
                format!("{C}  tolerations:\n  - {{operator: Equal, value: x}}\n"),
                vec!["spec.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\"".into()],
            ),
            (
                format!("{C}  tolerations:\n  - {{key: k, operator: Exists, effect: NoSchedule, tolerationSeconds: 5}}\n"),
                vec!["spec.tolerations[0].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set".into()],
            ),
            (
                format!("{C}  hostAliases:\n  - {{ip: 10.0.0, hostnames: [db]}}\n"),
                vec!["spec.hostAliases[0].ip: Invalid value: \"10.0.0\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".into()],
            ),
            (
                format!("{C}  os: {{name: plan9}}\n"),
                vec!["spec.os.name: Unsupported value: \"plan9\": supported values: \"linux\", \"windows\"".into()],
            ),
            (
                format!("{C}  schedulingGates:\n  - name: wait\n"),
                vec!["spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared".into()],
            ),
            (
                format!("{C}  hostUsers: false\n  hostPID: true\n"),
                vec!["spec.hostPID: Forbidden: when `pod.Spec.HostUsers` is false".into()],
            ),
            (
                format!("{C}  ephemeralContainers:\n  - name: debug\n    image: busybox:1.36\n"),
                vec!["spec.ephemeralContainers: Forbidden: cannot be set on create".into()],
            ),
            (
                "  hostNetwork: true\n  containers:\n  - name: c\n    image: busybox:1.36\n    ports:\n    - {containerPort: 80, hostPort: 8080}\n".into(),
                vec!["spec.containers[0].ports[0].hostPort: Invalid value: 8080: must match `containerPort` when `hostNetwork` is true".into()],
            ),
            (
                "  containers:\n  - name: a\n    image: busybox:1.36\n    ports: [{containerPort: 80, hostPort: 8080}]\n  - name: b\n    image: busybox:1.36\n    ports: [{containerPort: 81, hostPort: 8080}]\n".into(),
                vec!["spec.containers[1].ports[0].hostPort: Duplicate value: \"TCP//8080\"".into()],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
        }
    }

    #[test]
    fn metadata_rules() {
        let cases: Vec<(&str, Vec<String>)> = vec![
            (
                "  namespace: default\n",
                vec!["metadata.name: Required value: name or generateName is required".into()],
            ),
            (
                "  name: Web-node1\n  namespace: default\n",
                vec![format!(
                    "metadata.name: Invalid value: \"Web-node1\": {}",
                    dns1123_subdomain("Web-node1").join("")
                )],
            ),
            (
                "  name: web-node1\n  namespace: Kube_System\n",
                vec![format!(
                    "metadata.namespace: Invalid value: \"Kube_System\": {}",
                    label_msg("Kube_System")
                )],
            ),
            (
                "  name: web-node1\n  namespace: default\n  labels: {\"bad key!\": x}\n",
                vec![format!(
                    "metadata.labels: Invalid value: \"bad key!\": {}",
                    qualified_name("bad key!").join("")
                )],
            ),
            (
                "  name: web-node1\n  namespace: default\n  labels: {app: \"-x\"}\n",
                vec![format!(
                    "metadata.labels: Invalid value: \"-x\": {}",
                    label_value("-x").join("")
                )],
            ),
            (
                "  name: web-node1\n  namespace: default\n  annotations: {\"a/b/c\": x}\n",
                vec![format!(
                    "metadata.annotations: Invalid value: \"a/b/c\": {}",
                    qualified_name("a/b/c").join("")
                )],
            ),
        ];
        for (meta, want) in cases {
            assert_eq!(errors_for_pod(meta, C), want, "metadata:\n{meta}");
        }
        let long = format!("  name: {}\n  namespace: default\n", "a".repeat(254));
        assert_eq!(
            errors_for_pod(&long, C),
            vec![format!(
                "metadata.name: Invalid value: \"{}\": must be no more than 253 characters",
                "a".repeat(254)
            )]
        );
    }

    #[test]
    fn container_rules() {
        let c0 = "spec.containers[0]";
        let cases: Vec<(String, Vec<String>)> = vec![
            (
                "  containers:\n  - name: Web_1\n    image: busybox:1.36\n".into(),
                vec![format!("{c0}.name: Invalid value: \"Web_1\": {}", label_msg("Web_1"))],
            ),
            ("  containers:\n  - name: c\n".into(), vec![format!("{c0}.image: Required value")]),
            (
                "  containers:\n  - name: c\n    image: \"busybox:1.36 \"\n".into(),
                vec![format!("{c0}.image: Invalid value: \"busybox:1.36 \": must not have leading or trailing whitespace")],
            ),
            (
                "  containers:\n  - name: c\n    image: a\n  - name: c\n    image: b\n".into(),
                vec!["spec.containers[1].name: Duplicate value: \"c\"".into()],
            ),
            (
                format!("  initContainers:\n  - name: c\n    image: a\n{C}"),
                vec!["spec.initContainers[0].name: Duplicate value: \"c\"".into()],
            ),
            (
                with_container("    imagePullPolicy: Sometimes\n"),
                vec![format!("{c0}.imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"")],
            ),
            (
                with_container("    terminationMessagePolicy: Sometimes\n"),
                vec![format!("{c0}.terminationMessagePolicy: Unsupported value: \"Sometimes\": supported values: \"File\", \"FallbackToLogsOnError\"")],
            ),
            (
                with_container("    ports:\n    - containerPort: 0\n    - containerPort: 70000\n    - {containerPort: 80, hostPort: 70000}\n    - {containerPort: 81, protocol: ICMP}\n"),
                vec![
                    format!("{c0}.ports[0].containerPort: Required value"),
                    format!("{c0}.ports[1].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"),
                    format!("{c0}.ports[2].hostPort: Invalid value: 70000: must be between 1 and 65535, inclusive"),
                    format!("{c0}.ports[3].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\""),
                ],
            ),
            (
                with_container("    ports:\n    - {name: metrics-port-1234, containerPort: 80}\n    - {name: http, containerPort: 81}\n    - {name: http, containerPort: 82}\n"),
                vec![
                    format!("{c0}.ports[0].name: Invalid value: \"metrics-port-1234\": must be no more than 15 characters"),
                    format!("{c0}.ports[2].name: Duplicate value: \"http\""),
                ],
            ),
            (
                with_container("    securityContext: {runAsUser: -1}\n"),
                vec![format!("{c0}.securityContext.runAsUser: Invalid value: -1: must be between 0 and 2147483647, inclusive")],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
        }
    }

    #[test]
    fn container_restart_policy_and_rules() {
        let c0 = "spec.containers[0]";
        let i0 = "spec.initContainers[0]";
        let init = |extra: &str| {
            format!("  initContainers:\n  - name: i\n    image: busybox:1.36\n{extra}{C}")
        };
        let cases: Vec<(String, Vec<String>)> = vec![
            (
                with_container("    restartPolicy: Sometimes\n"),
                vec![format!("{c0}.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"Never\", \"OnFailure\"")],
            ),
            (
                with_container("    restartPolicyRules:\n    - action: Restart\n      exitCodes: {operator: In, values: [1]}\n"),
                vec![format!("{c0}.restartPolicy: Required value: must specify restartPolicy when restart rules are used")],
            ),
            (
                with_container("    restartPolicy: Never\n    restartPolicyRules:\n    - action: Reboot\n      exitCodes: {operator: Gt, values: [1, 256, -1]}\n    - action: Restart\n"),
                vec![
                    format!("{c0}.restartPolicyRules[0].action: Unsupported value: \"Reboot\": supported values: \"Restart\", \"RestartAllContainers\""),
                    format!("{c0}.restartPolicyRules[0].exitCodes.operator: Unsupported value: \"Gt\": supported values: \"In\", \"NotIn\""),
                    format!("{c0}.restartPolicyRules[0].exitCodes.values[1]: Invalid value: 256: must be between 0 and 255, inclusive"),
                    format!("{c0}.restartPolicyRules[0].exitCodes.values[2]: Invalid value: -1: must be between 0 and 255, inclusive"),
                    format!("{c0}.restartPolicyRules[1].exitCodes: Required value: must be specified"),
                ],
            ),
            (
                init("    restartPolicy: Sometimes\n"),
                vec![format!("{i0}.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"Never\", \"OnFailure\"")],
            ),
            (
                init("    restartPolicy: Always\n    restartPolicyRules:\n    - action: Restart\n      exitCodes: {operator: In, values: [1]}\n"),
                vec![format!("{i0}.restartPolicyRules[0].action: Unsupported value: \"Restart\": supported values: \"RestartAllContainers\"")],
            ),
            (
                init("    livenessProbe:\n      exec: {command: [true]}\n    lifecycle:\n      postStart:\n        exec: {command: [true]}\n"),
                vec![
                    format!("{i0}.lifecycle: Forbidden: may not be set for init containers without restartPolicy=Always"),
                    format!("{i0}.livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always"),
                ],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
        }
        let many = (0..21)
            .map(|_| "    - action: Restart\n      exitCodes: {operator: In, values: [1]}\n")
            .collect::<String>();
        assert_eq!(
            errors_for(&with_container(&format!(
                "    restartPolicy: Never\n    restartPolicyRules:\n{many}"
            ))),
            vec![format!(
                "{c0}.restartPolicyRules: Too many: 21: must have at most 20 items"
            )]
        );
    }

    #[test]
    fn volume_rules() {
        let v = "spec.volumes";
        let cases: Vec<(String, Vec<String>)> = vec![
            (
                format!("{C}  volumes:\n  - name: a\n    emptyDir: {{}}\n  - name: a\n    emptyDir: {{}}\n"),
                vec![format!("{v}[1].name: Duplicate value: \"a\"")],
            ),
            (
                format!("{C}  volumes:\n  - name: Data_1\n    emptyDir: {{}}\n"),
                vec![format!("{v}[0].name: Invalid value: \"Data_1\": {}", label_msg("Data_1"))],
            ),
            (
                format!("{C}  volumes:\n  - name: a\n    emptyDir: {{}}\n    hostPath: {{path: /tmp}}\n"),
                vec![format!("{v}[0].hostPath: Forbidden: may not specify more than 1 volume type")],
            ),
            (
                format!("{C}  volumes:\n  - name: a\n    hostPath: {{path: /var/../etc, type: Dir}}\n"),
                vec![
                    format!("{v}[0].hostPath.path: Invalid value: \"/var/../etc\": must not contain '..'"),
                    format!("{v}[0].hostPath.type: Unsupported value: \"Dir\": supported values: \"\", \"BlockDevice\", \"CharDevice\", \"Directory\", \"DirectoryOrCreate\", \"File\", \"FileOrCreate\", \"Socket\""),
                ],
            ),
            (
                format!("{C}  volumes:\n  - name: a\n    hostPath: {{path: \"\"}}\n"),
                vec![format!("{v}[0].hostPath.path: Required value")],
            ),
            (
                format!("{C}  volumes:\n  - name: a\n    emptyDir: {{sizeLimit: -1Gi}}\n"),
                vec![format!("{v}[0].emptyDir.sizeLimit: Forbidden: SizeLimit field must be a valid resource quantity")],
            ),
            (
                format!("{C}  volumes:\n  - name: a\n    downwardAPI:\n      items:\n      - {{path: ../x, fieldRef: {{fieldPath: spec.nodeName}}}}\n      - {{path: cpu, resourceFieldRef: {{resource: limits.cpu}}}}\n"),
                vec![
                    format!("{v}[0].downwardAPI.items[0].path: Invalid value: \"../x\": must not contain '..'"),
                    format!("{v}[0].downwardAPI.items[0].fieldRef.fieldPath: Unsupported value: \"spec.nodeName\": supported values: \"metadata.annotations\", \"metadata.labels\", \"metadata.name\", \"metadata.namespace\", \"metadata.uid\""),
                    format!("{v}[0].downwardAPI.items[1].resourceFieldRef.containerName: Required value"),
                ],
            ),
            (
                format!("{C}  volumes:\n  - name: a\n    configMap: {{name: conf}}\n"),
                vec![format!("{v}[0].configMap: Forbidden: static pods may not reference configmaps (via configmap volumes)")],
            ),
            (
                format!("{C}  volumes:\n  - name: a\n    secret: {{secretName: creds}}\n"),
                vec![format!("{v}[0].secret: Forbidden: static pods may not reference secrets (via secret volumes)")],
            ),
            (
                format!("{C}  volumes:\n  - name: a\n    projected:\n      sources:\n      - serviceAccountToken: {{path: token}}\n"),
                vec![
                    format!("{v}[0].projected.sources[0].serviceAccountToken: Forbidden: must not be specified when serviceAccountName is not set"),
                    format!("{v}[0].projected.sources[0].serviceAccountToken: Forbidden: static pods may not reference serviceaccounts (via projected volumes)"),
                ],
            ),
            (
                format!("{C}  volumes:\n  - name: a\n    nfs: {{server: nas, path: /export}}\n"),
                vec![format!("{v}[0].nfs: Forbidden: volume type not supported by nodelet for static pods (supported: emptyDir, hostPath, downwardAPI, projected)")],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
        }
    }

    #[test]
    fn volume_mount_rules() {
        let m = "spec.containers[0].volumeMounts";
        let vols = "  volumes:\n  - name: data\n    emptyDir: {}\n";
        let cases: Vec<(String, Vec<String>)> = vec![
            (
                format!("{}{vols}", with_container("    volumeMounts:\n    - {name: ghost, mountPath: /ghost}\n")),
                vec![format!("{m}[0].name: Not found: \"ghost\"")],
            ),
            (
                format!("{}{vols}", with_container("    volumeMounts:\n    - {name: data, mountPath: data}\n")),
                vec![format!("{m}[0].mountPath: Invalid value: \"data\": must be an absolute path")],
            ),
            (
                format!("{}{vols}", with_container("    volumeMounts:\n    - {name: data, mountPath: /d}\n    - {name: data, mountPath: /d}\n")),
                vec![format!("{m}[1].mountPath: Invalid value: \"/d\": must be unique")],
            ),
            (
                format!("{}{vols}", with_container("    volumeMounts:\n    - {name: data, mountPath: /a, subPath: ../up}\n    - {name: data, mountPath: /b, subPath: /abs}\n")),
                vec![
                    format!("{m}[0].subPath: Invalid value: \"../up\": must not contain '..'"),
                    format!("{m}[1].subPath: Invalid value: \"/abs\": must be a relative path"),
                ],
            ),
            (
                format!("{}{vols}", with_container("    volumeMounts:\n    - {name: data, mountPath: /a, mountPropagation: Bidirectional}\n")),
                vec![format!("{m}[0].mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers")],
            ),
            (
                format!("{}{vols}", with_container("    volumeDevices:\n    - {name: data, devicePath: /dev/xvda}\n")),
                vec!["spec.containers[0].volumeDevices[0].name: Invalid value: \"data\": can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode".into()],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
        }
    }

    #[test]
    fn env_rules() {
        let e = "spec.containers[0].env";
        let env = |yaml: &str| with_container(&format!("    env:\n{yaml}"));
        let cases: Vec<(String, Vec<String>)> = vec![
            (env("    - {name: \"\", value: x}\n"), vec![format!("{e}[0].name: Required value")]),
            (
                env("    - {name: A=B, value: x}\n"),
                vec![format!("{e}[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='")],
            ),
            (
                env("    - {name: A, valueFrom: {}}\n"),
                vec![format!("{e}[0].valueFrom: Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`")],
            ),
            (
                env("    - {name: A, value: x, valueFrom: {fieldRef: {fieldPath: metadata.name}}}\n"),
                vec![format!("{e}[0].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty")],
            ),
            (
                env("    - {name: A, valueFrom: {fieldRef: {fieldPath: metadata.name}, resourceFieldRef: {resource: limits.cpu}}}\n"),
                vec![format!("{e}[0].valueFrom: Invalid value: \"\": may not have more than one field specified at a time")],
            ),
            (
                env("    - {name: A, valueFrom: {fieldRef: {fieldPath: metadata.labels}}}\n"),
                vec![format!("{e}[0].valueFrom.fieldRef.fieldPath: Unsupported value: \"metadata.labels\": supported values: \"metadata.name\", \"metadata.namespace\", \"metadata.uid\", \"spec.nodeName\", \"spec.serviceAccountName\", \"status.hostIP\", \"status.hostIPs\", \"status.podIP\", \"status.podIPs\"")],
            ),
            (
                env("    - {name: A, valueFrom: {fieldRef: {fieldPath: spec.foo}}}\n"),
                vec![format!("{e}[0].valueFrom.fieldRef.fieldPath: Invalid value: \"spec.foo\": error converting fieldPath: field label not supported: spec.foo")],
            ),
            (
                env("    - {name: A, valueFrom: {fieldRef: {fieldPath: \"spec.nodeName['x']\"}}}\n"),
                vec![format!("{e}[0].valueFrom.fieldRef.fieldPath: Invalid value: \"spec.nodeName['x']\": error converting fieldPath: field label does not support subscript: spec.nodeName['x']")],
            ),
            (
                env("    - {name: A, valueFrom: {fieldRef: {apiVersion: v2, fieldPath: metadata.name}}}\n"),
                vec![format!("{e}[0].valueFrom.fieldRef.fieldPath: Invalid value: \"metadata.name\": error converting fieldPath: unsupported pod version: v2")],
            ),
            (
                env("    - {name: A, valueFrom: {fieldRef: {fieldPath: \"metadata.labels['-bad']\"}}}\n"),
                vec![format!("{e}[0].valueFrom.fieldRef: Invalid value: \"-bad\": {}", qualified_name("-bad").join(""))],
            ),
            (
                env("    - {name: A, valueFrom: {resourceFieldRef: {resource: limits.gpu}}}\n"),
                vec![format!("{e}[0].valueFrom.resourceFieldRef.resource: Unsupported value: \"limits.gpu\": supported values: \"limits.cpu\", \"limits.ephemeral-storage\", \"limits.memory\", \"requests.cpu\", \"requests.ephemeral-storage\", \"requests.memory\"")],
            ),
            (
                env("    - {name: A, valueFrom: {resourceFieldRef: {containerName: ghost, resource: limits.cpu}}}\n"),
                vec![format!("{e}[0].valueFrom.resourceFieldRef.containerName: Not found: \"ghost\"")],
            ),
            (
                env("    - {name: A, valueFrom: {resourceFieldRef: {resource: requests.cpu, divisor: '3'}}}\n"),
                vec![format!("{e}[0].valueFrom.resourceFieldRef.divisor: Invalid value: \"requests.cpu\": only divisor's values 1m and 1 are supported with the cpu resource")],
            ),
            (
                env("    - {name: A, valueFrom: {secretKeyRef: {name: creds, key: token}}}\n"),
                vec![format!("{e}[0].valueFrom.secretKeyRef: Forbidden: static pods may not reference secrets")],
            ),
            (
                with_container("    envFrom:\n    - prefix: APP_\n"),
                vec!["spec.containers[0].envFrom: Invalid value: \"\": must specify one of: `configMapRef` or `secretRef`".into()],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
        }
    }

    #[test]
    fn resource_rules() {
        let r = "spec.containers[0].resources";
        let res = |yaml: &str| with_container(&format!("    resources:\n{yaml}"));
        let cases: Vec<(String, Vec<String>)> = vec![
            (
                res("      limits: {cpu: '1'}\n      requests: {cpu: '2'}\n"),
                vec![format!("{r}.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1")],
            ),
            (
                res("      limits: {memory: lots}\n"),
                vec![
                    format!("{r}.limits[memory]: Invalid value: \"lots\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
                    format!("{r}.requests[memory]: Invalid value: \"lots\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
                ],
            ),
            (
                res("      requests: {cpu: '-1'}\n"),
                vec![format!("{r}.requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0")],
            ),
            (
                res("      requests: {gpu: '1'}\n"),
                vec![format!("{r}.requests[gpu]: Invalid value: \"gpu\": must be a standard resource for containers")],
            ),
            (
                res("      requests: {example.com/gpu: '1'}\n"),
                vec![format!("{r}.limits: Required value: Limit must be set for non overcommitable resources")],
            ),
            (
                res("      limits: {example.com/gpu: '2'}\n      requests: {example.com/gpu: '1'}\n"),
                vec![format!("{r}.requests: Invalid value: \"1\": must be equal to example.com/gpu limit of 2")],
            ),
            (
                res("      limits: {example.com/gpu: 500m}\n"),
                vec![
                    format!("{r}.limits[example.com/gpu]: Invalid value: \"500m\": must be an integer"),
                    format!("{r}.requests[example.com/gpu]: Invalid value: \"500m\": must be an integer"),
                ],
            ),
            (
                res("      limits: {hugepages-2Mi: 4Mi}\n"),
                vec![format!("{r}: Forbidden: HugePages require cpu or memory")],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
        }
    }

    #[test]
    fn probe_and_lifecycle_rules() {
        let c0 = "spec.containers[0]";
        let cases: Vec<(String, Vec<String>)> = vec![
            (
                with_container("    livenessProbe: {periodSeconds: 5}\n"),
                vec![format!("{c0}.livenessProbe: Required value: must specify a handler type")],
            ),
            (
                with_container("    livenessProbe:\n      exec: {command: [true]}\n      tcpSocket: {port: 80}\n"),
                vec![format!("{c0}.livenessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type")],
            ),
            (
                with_container("    livenessProbe:\n      exec: {command: []}\n      successThreshold: 2\n      periodSeconds: -1\n"),
                vec![
                    format!("{c0}.livenessProbe.exec.command: Required value"),
                    format!("{c0}.livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0"),
                    format!("{c0}.livenessProbe.successThreshold: Invalid value: 2: must be 1"),
                ],
            ),
            (
                with_container("    startupProbe:\n      httpGet: {port: 0, scheme: FTP}\n      successThreshold: 3\n"),
                vec![
                    format!("{c0}.startupProbe.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive"),
                    format!("{c0}.startupProbe.httpGet.scheme: Unsupported value: \"FTP\": supported values: \"HTTP\", \"HTTPS\""),
                    format!("{c0}.startupProbe.successThreshold: Invalid value: 3: must be 1"),
                ],
            ),
            (
                with_container("    readinessProbe:\n      tcpSocket: {port: HTTP}\n      terminationGracePeriodSeconds: 5\n"),
                vec![
                    format!("{c0}.readinessProbe.tcpSocket.port: Invalid value: \"HTTP\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"),
                    format!("{c0}.readinessProbe.tcpSocket.port: Invalid value: \"HTTP\": must contain at least one letter (a-z)"),
                    format!("{c0}.readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes"),
                ],
            ),
            (
                with_container("    lifecycle:\n      preStop:\n        sleep: {seconds: 60}\n      postStart: {}\n"),
                vec![
                    format!("{c0}.lifecycle.postStart: Required value: must specify a handler type"),
                    format!("{c0}.lifecycle.preStop.sleep: Invalid value: 60: must be non-negative and less than terminationGracePeriodSeconds (30)"),
                ],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
        }
    }

    #[test]
    fn static_pod_api_references() {
        let cases: Vec<(String, Vec<String>)> = vec![
            (
                format!("{C}  serviceAccountName: builder\n"),
                vec!["spec.serviceAccountName: Forbidden: static pods may not reference serviceaccounts".into()],
            ),
            (
                format!("{C}  imagePullSecrets: [{{name: regcred}}]\n"),
                vec!["spec.imagePullSecrets: Forbidden: static pods may not reference secrets".into()],
            ),
            (
                with_container("    envFrom:\n    - configMapRef: {name: conf}\n"),
                vec!["spec.containers[0].envFrom[0].configMapRef: Forbidden: static pods may not reference configmaps".into()],
            ),
            (
                format!("{C}  volumes:\n  - name: a\n    projected:\n      sources:\n      - configMap: {{name: conf}}\n      - downwardAPI:\n          items: [{{path: n, fieldRef: {{fieldPath: metadata.name}}}}]\n"),
                vec!["spec.volumes[0].projected.sources[0].configMap: Forbidden: static pods may not reference configmaps (via projected volumes)".into()],
            ),
            (
                format!("{C}  volumes:\n  - name: a\n    persistentVolumeClaim: {{claimName: data}}\n"),
                vec!["spec.volumes[0].persistentVolumeClaim: Forbidden: static pods may not reference persistentvolumeclaims".into()],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
        }
    }

    /// A static pod's UID, seccomp profile and stop signal end up in paths and signals: each
    /// is held to the API's rules (the UID, which the API server sets itself for other pods, to
    /// one path segment).
    #[test]
    fn uid_seccomp_and_stop_signal_rules() {
        let meta = |uid: &str| format!("  name: web-node1\n  namespace: default\n  uid: {uid:?}\n");
        let uid_cases: Vec<(String, Vec<String>)> = vec![
            ("0f9c1d3e-2b4a-4c5d-8e6f-7a8b9c0d1e2f".into(), vec![]),
            ("my-static-uid".into(), vec![]),
            (
                "../../etc".into(),
                vec!["metadata.uid: Invalid value: \"../../etc\": must not contain '/'".into()],
            ),
            (
                "a/b".into(),
                vec!["metadata.uid: Invalid value: \"a/b\": must not contain '/'".into()],
            ),
            (
                "..".into(),
                vec!["metadata.uid: Invalid value: \"..\": must not be '.' or '..'".into()],
            ),
            (
                ".".into(),
                vec!["metadata.uid: Invalid value: \".\": must not be '.' or '..'".into()],
            ),
            (
                "a\0b".into(),
                vec!["metadata.uid: Invalid value: \"a\\0b\": must not contain NUL".into()],
            ),
            (
                "u".repeat(256),
                vec![format!(
                    "metadata.uid: Invalid value: \"{}\": must be no more than 255 bytes",
                    "u".repeat(256)
                )],
            ),
        ];
        for (uid, want) in uid_cases {
            assert_eq!(errors_for_pod(&meta(&uid), C), want, "uid {uid:?}");
        }

        let c0 = "spec.containers[0]";
        let linux = "  os: {name: linux}\n";
        let mut linux_sorted = LINUX_STOP_SIGNALS.to_vec();
        linux_sorted.sort_unstable();
        let linux_list = linux_sorted
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let cases: Vec<(String, Vec<String>)> = vec![
            // seccomp
            (with_container("    securityContext:\n      seccompProfile: {type: Localhost, localhostProfile: profiles/audit.json}\n"), vec![]),
            (format!("{C}  securityContext:\n    seccompProfile: {{type: RuntimeDefault}}\n"), vec![]),
            (
                with_container("    securityContext:\n      seccompProfile: {type: Localhost, localhostProfile: ../../etc/shadow}\n"),
                vec![format!("{c0}.securityContext.seccompProfile.localhostProfile: Invalid value: \"../../etc/shadow\": must not contain '..'")],
            ),
            (
                format!("{C}  securityContext:\n    seccompProfile: {{type: Localhost, localhostProfile: /etc/shadow}}\n"),
                vec!["spec.securityContext.seccompProfile.localhostProfile: Invalid value: \"/etc/shadow\": must be a relative path".into()],
            ),
            (
                with_container("    securityContext:\n      seccompProfile: {type: Localhost}\n"),
                vec![format!("{c0}.securityContext.seccompProfile.localhostProfile: Required value: must be set when seccomp type is Localhost")],
            ),
            (
                with_container("    securityContext:\n      seccompProfile: {type: RuntimeDefault, localhostProfile: a.json}\n"),
                vec![format!("{c0}.securityContext.seccompProfile.localhostProfile: Invalid value: \"a.json\": can only be set when seccomp type is Localhost")],
            ),
            (
                with_container("    securityContext:\n      seccompProfile: {type: Whatever}\n"),
                vec![format!("{c0}.securityContext.seccompProfile.type: Unsupported value: \"Whatever\": supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\"")],
            ),
            // stopSignal
            (format!("{}{linux}", with_container("    lifecycle: {stopSignal: SIGUSR1}\n")), vec![]),
            (format!("{}{linux}", with_container("    lifecycle: {stopSignal: SIGRTMIN+1}\n")), vec![]),
            (format!("{}{linux}", with_container("    lifecycle: {stopSignal: SIGRTMAX-14}\n")), vec![]),
            (
                format!("{}{linux}", with_container("    lifecycle: {stopSignal: SIGRTMIN+16}\n")),
                vec![format!("{c0}.lifecycle.stopSignal: Unsupported value: \"SIGRTMIN+16\": supported values: {linux_list}")],
            ),
            (
                format!("{}{linux}", with_container("    lifecycle: {stopSignal: USR1}\n")),
                vec![format!("{c0}.lifecycle.stopSignal: Unsupported value: \"USR1\": supported values: {linux_list}")],
            ),
            (
                format!("{}  os: {{name: windows}}\n", with_container("    lifecycle: {stopSignal: SIGUSR1}\n")),
                vec![format!("{c0}.lifecycle.stopSignal: Unsupported value: \"SIGUSR1\": supported values: \"SIGKILL\", \"SIGTERM\"")],
            ),
            (
                with_container("    lifecycle: {stopSignal: SIGTERM}\n"),
                vec![format!("{c0}.lifecycle.stopSignal: Forbidden: may not be set for containers with empty `spec.os.name`")],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors_for(&spec), want, "spec:\n{spec}");
        }
    }

    /// API pods come from the API server, which validated them: only static pods are held
    /// to the no-API-references rule (`validate_static_pod` runs for manifests only).
    #[test]
    fn api_pods_may_reference_api_objects() {
        let src = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n    envFrom:\n    - configMapRef: {name: conf}\n      prefix: APP_\n    - secretRef: {name: creds, optional: true}\n    env:\n    - name: PW\n      valueFrom: {secretKeyRef: {name: creds, key: password}}\n    - name: LEVEL\n      valueFrom: {configMapKeyRef: {name: conf, key: level, optional: true}}\n    volumeMounts:\n    - {name: a, mountPath: /a}\n    - {name: b, mountPath: /b}\n    - {name: p, mountPath: /p}\n  volumes:\n  - name: a\n    configMap: {name: conf, items: [{key: level, path: lvl, mode: 256}]}\n  - name: b\n    secret: {secretName: creds, defaultMode: 256}\n  - name: p\n    projected:\n      sources:\n      - configMap: {name: conf}\n      - secret: {name: creds}\n      - downwardAPI:\n          items: [{path: n, fieldRef: {fieldPath: metadata.name}}]\n";
        let mut pod: Pod = serde_yaml::from_str(src).unwrap();
        apply_defaults(&mut pod);
        let api: Vec<String> = validate_pod(&pod).iter().map(|e| e.to_string()).collect();
        assert!(api.is_empty(), "{api:?}");
        let static_errors: Vec<String> = validate_static_pod(&pod)
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(static_errors.len(), 8, "{static_errors:?}");
        assert!(static_errors
            .iter()
            .all(|e| e.contains("Forbidden: static pods may not reference")));
    }

    #[test]
    fn every_error_is_collected() {
        let spec = "  restartPolicy: Sometimes\n  containers:\n  - name: Bad_Name\n  - name: ok\n    image: x\n    ports: [{containerPort: 0}]\n";
        let errs = errors_for(spec);
        let paths: Vec<&str> = errs.iter().map(|e| e.split(": ").next().unwrap()).collect();
        assert_eq!(
            paths,
            vec![
                "spec.containers[0].name",
                "spec.containers[0].image",
                "spec.containers[1].ports[0].containerPort",
                "spec.restartPolicy",
            ]
        );
    }
}
