//! Volumes and their sources (emptyDir, hostPath, downwardAPI, projected, secret, configMap,
//! PVC), the relative paths they project files to, and the containers' volume mounts and devices.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, DownwardAPIVolumeFile, KeyToPath, Volume, VolumeDevice, VolumeMount,
};

use super::env::{
    validate_object_field_selector, validate_resource_field_selector, VOLUME_FIELD_PATHS,
};
use super::{s, Errors, PodContext, QUANTITY_REGEX_ERR};
use crate::podspec::field::{dns1123_label, FieldError, FieldPath};
use crate::quantity::Quantity;
use crate::source::defaults::volume_sources;

pub(super) fn validate_volumes<'a>(
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

pub(super) fn validate_path_no_backsteps(target: &str, path: &FieldPath, errs: &mut Errors) {
    if target.split('/').any(|part| part == "..") {
        errs.push(FieldError::invalid(path, target, "must not contain '..'"));
    }
}

pub(super) fn validate_local_descending_path(target: &str, path: &FieldPath, errs: &mut Errors) {
    if target.starts_with('/') {
        errs.push(FieldError::invalid(path, target, "must be a relative path"));
    }
    validate_path_no_backsteps(target, path, errs);
}

pub(super) fn validate_local_non_reserved_path(target: &str, path: &FieldPath, errs: &mut Errors) {
    validate_local_descending_path(target, path, errs);
    if target.starts_with("..") && !target.starts_with("../") {
        errs.push(FieldError::invalid(
            path,
            target,
            "must not start with '..'",
        ));
    }
}

pub(super) fn validate_volume_mounts(
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
        // subPath and subPathExpr of image volumes are allowed since v1.33 (the beta of
        // ImageVolume); the runtime mounts them (`Mount.image_sub_path`).
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

pub(super) fn validate_volume_devices(
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

#[cfg(test)]
mod tests {
    use crate::source::validation::test_support::{errors_for, label_msg, with_container, C};

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
                vec![format!("{v}[0].nfs: Forbidden: volume type not supported by nodelet for static pods (supported: emptyDir, hostPath, downwardAPI, projected, image)")],
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
}
