//! Pod sources: where the pods this node should run come from.
//!
//! The file source watches the static pod directory (`staticPodPath`) like the kubelet's
//! `pkg/kubelet/config/file.go`: one Pod manifest (YAML or JSON) per file, defaulted the way the
//! API server would default it, validated like `ValidatePodCreate`, named `<name>-<node>`, and
//! given a UID derived from its content, node and file path, so an unchanged manifest keeps its
//! UID across nodelet restarts (running containers are adopted) and an edited one gets a new UID
//! (the old pod is replaced).
//!
//! Every change produces a full [`SourceSnapshot`] (not a delta). Unlike the kubelet, a manifest
//! that breaks while a pod from it is running (an operator mid-edit) keeps its last good pod in
//! the snapshot; the error is reported next to it.
//!
//! Layout: [`field`] (paths and Go-shaped field errors), [`defaults`] (API defaulting),
//! [`validation`] (API validation and static-pod rules), [`manifest`] (decoding, naming, UID),
//! [`scan`] (one pass over the directory), [`watch`] (the long-running source).

pub mod api;
pub mod defaults;
pub mod manifest;
pub mod scan;
pub mod validation;
pub mod watch;

use std::fmt;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;

use crate::podspec::field::FieldError;
pub use defaults::apply_defaults;
pub use manifest::{parse_manifest, static_pod_name, static_pod_uid};
pub use scan::{scan_dir, scan_dir_at, ScanState};
pub use validation::{validate_pod, validate_static_pod};
pub use watch::FileSource;

/// The source name of static pods from a directory (`kubetypes.FileSource`).
pub const FILE_SOURCE: &str = "file";

/// Annotation carrying the static pod's UID, i.e. the hash of its manifest.
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// Annotation with the RFC 3339 time the source first saw this pod.
pub const CONFIG_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";

/// Everything one source currently wants on the node (full snapshot, not a delta).
#[derive(Debug, Clone, PartialEq)]
pub struct SourceSnapshot {
    pub source: &'static str,
    /// Pods in the order of the files that define them (sorted by path).
    pub pods: Vec<Pod>,
    /// Problems with individual manifests; pods from other files are unaffected.
    pub errors: Vec<ManifestError>,
    /// Pods the source saw deleted since its previous snapshot, as it last saw them: the API
    /// server's DELETED object carries what a force delete set (`deletionGracePeriodSeconds:
    /// 0`), which the snapshot before may never have shown.
    pub deleted: Vec<Pod>,
}

/// One problem with one manifest file, e.g.
/// `/etc/kubernetes/manifests/web.yaml: spec.containers[0].image: Required value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ManifestError {
    pub file: PathBuf,
    /// The field path inside the manifest, when the problem is with one field.
    pub field: Option<String>,
    pub reason: String,
}

impl ManifestError {
    pub fn new(file: impl Into<PathBuf>, field: Option<String>, reason: impl Into<String>) -> Self {
        ManifestError {
            file: file.into(),
            field,
            reason: reason.into(),
        }
    }

    pub fn from_field(file: impl Into<PathBuf>, err: FieldError) -> Self {
        let reason = err.body();
        ManifestError {
            file: file.into(),
            field: Some(err.path),
            reason,
        }
    }
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{}: {field}: {}", self.file.display(), self.reason),
            None => write!(f, "{}: {}", self.file.display(), self.reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podspec::field::FieldPath;

    #[test]
    fn manifest_error_display() {
        let cases = [
            (
                ManifestError::new(
                    "/etc/kubernetes/manifests/web.yaml",
                    Some("spec.containers[0].image".into()),
                    "Required value",
                ),
                "/etc/kubernetes/manifests/web.yaml: spec.containers[0].image: Required value",
            ),
            (
                ManifestError::new("/m/a.yaml", None, "invalid YAML: bad indentation"),
                "/m/a.yaml: invalid YAML: bad indentation",
            ),
            (
                ManifestError::from_field(
                    "/m/b.yaml",
                    FieldError::required(&FieldPath::new("spec").child("containers"), ""),
                ),
                "/m/b.yaml: spec.containers: Required value",
            ),
        ];
        for (err, want) in cases {
            assert_eq!(err.to_string(), want);
        }
    }
}
