//! Object metadata (name, namespace, labels, annotations) as `ValidateObjectMeta` checks it, and
//! the static pod's `metadata.uid`, which becomes a directory name on the node.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{s, Errors, IS_NEGATIVE};
use crate::podspec::field::{
    dns1123_label, dns1123_subdomain, label_value, qualified_name, FieldError, FieldPath,
};

const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

pub(super) fn validate_object_meta(meta: &ObjectMeta, path: &FieldPath, errs: &mut Errors) {
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

pub(super) fn validate_labels(
    labels: Option<&BTreeMap<String, String>>,
    path: &FieldPath,
    errs: &mut Errors,
) {
    for (k, v) in labels.into_iter().flatten() {
        for msg in qualified_name(k) {
            errs.push(FieldError::invalid(path, k, msg));
        }
        for msg in label_value(v) {
            errs.push(FieldError::invalid(path, v, msg));
        }
    }
}

/// The longest `metadata.uid` a static pod may set: a file name's limit (`NAME_MAX`).
const MAX_UID_BYTES: usize = 255;

/// A static pod's `metadata.uid` names its directories (`<rootDir>/pods/<uid>`, its volumes,
/// its logs), so it must be one path segment: not `.` or `..`, no `/`, no NUL, no longer than
/// a file name. The API server sets every other pod's UID itself (a UUID); a manifest can
/// set anything.
pub(super) fn validate_static_pod_uid(uid: &str, path: &FieldPath, errs: &mut Errors) {
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

#[cfg(test)]
mod tests {
    use crate::podspec::field::{dns1123_subdomain, label_value, qualified_name};
    use crate::source::validation::test_support::{errors_for_pod, label_msg, C};

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
}
