//! The status fields nodelet sends that older API servers do not store, by the first release
//! that stores them with its default feature gates, and the stripping that leaves them out.
//!
//! An API server drops a field its types lack, and a field behind a feature gate that is off
//! (`dropDisabledPodStatusFields` in `pkg/api/pod/util.go`); either way the PATCH answers 200
//! and the stored status differs from what was sent. Sending only what the server's release
//! stores keeps nodelet's statuses convergent with it, so a steady node writes nothing. A field
//! the table does not cover (a gate an administrator turned off) still converges in bounded
//! writes: see the non-convergence backoff of the writers.
//!
//! The table is the fields of the v1.37 types nodelet *sends* and their first release; fields
//! nodelet sends that every release since [`Release::OLDEST_SUPPORTED`] stores are not listed.
//! `node/api_fields_tests.rs` checks that every field nodelet's status generators produce is either
//! in this table or in that baseline, so a new field cannot be sent unclassified.

use k8s_openapi::api::core::v1::{NodeStatus, PodStatus};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::api_version::Release;

/// The object whose status a field belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusKind {
    Pod,
    Node,
}

/// A status field and the first release that stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentField {
    pub kind: StatusKind,
    /// Dotted from the status object, `name[]` = every element of the list `name`.
    pub path: &'static str,
    pub since: Release,
    /// What decides it: the feature gate that went beta (on by default) in `since`, or the
    /// change that added the field.
    pub why: &'static str,
}

impl SentField {
    /// `status.conditions[].observedGeneration`, as logs and docs name it.
    pub fn display_path(&self) -> String {
        format!("status.{}", self.path)
    }
}

const fn pod(path: &'static str, minor: u32, why: &'static str) -> SentField {
    SentField {
        kind: StatusKind::Pod,
        path,
        since: Release::new(1, minor),
        why,
    }
}

const fn node(path: &'static str, minor: u32, why: &'static str) -> SentField {
    SentField {
        kind: StatusKind::Node,
        path,
        since: Release::new(1, minor),
        why,
    }
}

/// Every status field nodelet sends that an API server of [`Release::OLDEST_SUPPORTED`] or
/// newer may not store, oldest first.
pub const SENT_FIELDS: &[SentField] = &[
    pod("hostIPs", 29, "PodHostIPs beta"),
    node(
        "runtimeHandlers",
        31,
        "RecursiveReadOnlyMounts beta (the node strategy drops the list while it is off)",
    ),
    pod(
        "initContainerStatuses[].volumeMounts",
        31,
        "RecursiveReadOnlyMounts beta",
    ),
    pod(
        "containerStatuses[].volumeMounts",
        31,
        "RecursiveReadOnlyMounts beta",
    ),
    pod(
        "initContainerStatuses[].resources",
        33,
        "InPlacePodVerticalScaling beta",
    ),
    pod(
        "containerStatuses[].resources",
        33,
        "InPlacePodVerticalScaling beta",
    ),
    pod(
        "initContainerStatuses[].allocatedResources",
        33,
        "InPlacePodVerticalScaling beta",
    ),
    pod(
        "containerStatuses[].allocatedResources",
        33,
        "InPlacePodVerticalScaling beta",
    ),
    node(
        "features",
        33,
        "SupplementalGroupsPolicy beta (NodeFeatures dropped while the gate is off)",
    ),
    node(
        "nodeInfo.swap",
        33,
        "NodeSystemInfo.swap added (kubernetes#129954)",
    ),
    pod(
        "observedGeneration",
        34,
        "PodObservedGenerationTracking beta",
    ),
    pod(
        "conditions[].observedGeneration",
        34,
        "PodObservedGenerationTracking beta",
    ),
];

/// The fields a server of `release` does not store.
pub fn unsupported(release: Release) -> impl Iterator<Item = &'static SentField> {
    SENT_FIELDS.iter().filter(move |f| f.since > release)
}

fn unsupported_paths(kind: StatusKind, release: Release) -> impl Iterator<Item = &'static str> {
    unsupported(release)
        .filter(move |f| f.kind == kind)
        .map(|f| f.path)
}

/// `status` without the pod status fields a server of `release` does not store.
pub fn strip_pod_status(status: PodStatus, release: Release) -> PodStatus {
    strip(status, unsupported_paths(StatusKind::Pod, release))
}

/// `status` without the node status fields a server of `release` does not store.
pub fn strip_node_status(status: NodeStatus, release: Release) -> NodeStatus {
    strip(status, unsupported_paths(StatusKind::Node, release))
}

fn strip<T: Serialize + DeserializeOwned>(
    status: T,
    paths: impl Iterator<Item = &'static str>,
) -> T {
    let mut paths = paths.peekable();
    if paths.peek().is_none() {
        return status;
    }
    // The API types round-trip through JSON losslessly; if that ever failed, sending the
    // status unstripped is the safe side (the writers' backoff bounds the cost).
    let Ok(mut value) = serde_json::to_value(&status) else {
        return status;
    };
    for path in paths {
        remove_path(&mut value, path);
    }
    serde_json::from_value(value).unwrap_or(status)
}

/// Removes the field at `path` (dotted, `name[]` = every element of the list `name`).
pub fn remove_path(value: &mut Value, path: &str) {
    let segments: Vec<&str> = path.split('.').collect();
    remove_segments(value, &segments);
}

fn remove_segments(value: &mut Value, segments: &[&str]) {
    let Some((first, rest)) = segments.split_first() else {
        return;
    };
    let Some(object) = value.as_object_mut() else {
        return;
    };
    match first.strip_suffix("[]") {
        Some(list) => {
            if let Some(items) = object.get_mut(list).and_then(Value::as_array_mut) {
                for item in items {
                    remove_segments(item, rest);
                }
            }
        }
        None if rest.is_empty() => {
            object.remove(*first);
        }
        None => {
            if let Some(child) = object.get_mut(*first) {
                remove_segments(child, rest);
            }
        }
    }
}

#[cfg(test)]
#[path = "api_fields_tests.rs"]
mod tests;
