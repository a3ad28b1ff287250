//! Container environment (`env`, `envFrom`) and the downward API field selectors that env vars
//! and downwardAPI volume files share: which pod fields and container resources they may name.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    EnvFromSource, EnvVar, ObjectFieldSelector, ResourceFieldSelector,
};

use super::volumes::validate_path_no_backsteps;
use super::{s, Errors, PodContext, QUANTITY_REGEX_ERR};
use crate::podspec::field::{
    dns1123_label, dns1123_subdomain, env_var_name, qualified_name, FieldError, FieldPath,
};
use crate::quantity::Quantity;

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
pub(super) const VOLUME_FIELD_PATHS: &[&str] = &[
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

pub(super) fn validate_env(e: &EnvVar, ctx: &PodContext<'_>, path: &FieldPath, errs: &mut Errors) {
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
        if f.key.is_empty() {
            errs.push(FieldError::required(&fpath.child("key"), ""));
        } else {
            for msg in env_var_name(&f.key) {
                errs.push(FieldError::invalid(&fpath.child("key"), &f.key, msg));
            }
        }
        let vname = fpath.child("volumeName");
        if f.volume_name.is_empty() {
            errs.push(FieldError::required(&vname, ""));
        } else {
            for msg in dns1123_label(&f.volume_name) {
                errs.push(FieldError::invalid(&vname, &f.volume_name, msg));
            }
            // `validateFileKeyRefVolumes`: an emptyDir of the pod.
            match ctx.volumes.get(f.volume_name.as_str()) {
                None => errs.push(FieldError::not_found(&vname, &f.volume_name)),
                Some(v) if v.empty_dir.is_none() => errs.push(FieldError::invalid(
                    &vname,
                    &f.volume_name,
                    "referenced volume must be of type emptyDir",
                )),
                Some(_) => {}
            }
        }
        if f.path.is_empty() {
            errs.push(FieldError::required(&fpath.child("path"), ""));
        } else {
            validate_path_no_backsteps(&f.path, &fpath.child("path"), errs);
        }
    }
    if sources == 0 {
        errs.push(FieldError::invalid(
            &vpath,
            "",
            "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef`, `secretKeyRef` or `fileKeyRef`",
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

pub(super) fn validate_env_from(sources: &[EnvFromSource], path: &FieldPath, errs: &mut Errors) {
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

pub(super) fn validate_object_field_selector(
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

pub(super) fn validate_resource_field_selector(
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

#[cfg(test)]
mod tests {
    use crate::podspec::field::qualified_name;
    use crate::source::validation::test_support::{errors_for, with_container};

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
                vec![format!("{e}[0].valueFrom: Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef`, `secretKeyRef` or `fileKeyRef`")],
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
}
