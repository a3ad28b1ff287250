//! Which Kubernetes release the fixture pretends to be, and what such a server does not store.
//!
//! A real API server stores only the fields its Go types have and, for fields behind a feature
//! gate, only while the gate is on (`dropDisabledPodStatusFields` and friends in
//! `pkg/api/pod/util.go`, `dropDisabledFields` in `pkg/registry/core/node/strategy.go`). A
//! client that writes a newer field to an older server gets a 200 and a stored object without
//! it. The fixture does the same: [`ServerProfile`] names the release `/version` reports and the
//! release whose default feature gates decide what is kept; [`STATUS_FIELDS`] lists the fields
//! of the v1.37 types by the first release that stores them with default gates; and
//! [`ServerProfile::dropped`] adds fields a particular server drops although its version has
//! them (a gate turned off by the administrator, a webhook that normalizes).

use std::fmt;

use serde_json::Value;

/// A `major.minor` Kubernetes release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    pub major: u32,
    pub minor: u32,
}

impl Release {
    pub const fn new(major: u32, minor: u32) -> Release {
        Release { major, minor }
    }

    /// The release whose types the fixture speaks (k8s-openapi `v1_37`).
    pub const NEWEST: Release = Release::new(1, 37);
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}", self.major, self.minor)
    }
}

impl std::str::FromStr for Release {
    type Err = String;

    /// `1.32`, `v1.32`, `v1.32.4`.
    fn from_str(s: &str) -> Result<Release, String> {
        let bad = || format!("{s:?} is not a Kubernetes release (expected e.g. 1.32 or v1.32.0)");
        let mut parts = s.trim_start_matches('v').split('.');
        let major = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let minor = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        if let Some(patch) = parts.next() {
            patch.parse::<u32>().map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Release { major, minor })
    }
}

/// A field the server drops on every write of objects of `kind`: `path` is dotted from the
/// object's root, `[]` stepping into every element of a list
/// (`status.conditions[].observedGeneration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedField {
    pub kind: String,
    pub path: String,
}

impl std::str::FromStr for DroppedField {
    type Err = String;

    /// `Pod:status.conditions[].observedGeneration`.
    fn from_str(s: &str) -> Result<DroppedField, String> {
        match s.split_once(':') {
            Some((kind, path)) if !kind.is_empty() && !path.is_empty() => Ok(DroppedField {
                kind: kind.to_string(),
                path: path.to_string(),
            }),
            _ => Err(format!(
                "{s:?} is not KIND:PATH (e.g. Pod:status.conditions[].observedGeneration)"
            )),
        }
    }
}

/// What kind of server the fixture is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerProfile {
    /// What `/version` reports, and whose fields (with default feature gates) are stored.
    pub release: Release,
    /// Fields dropped besides those `release` does not have.
    pub dropped: Vec<DroppedField>,
    /// Every write of a pod or node gets the annotation [`WRITE_STAMP_ANNOTATION`] set to the
    /// new resourceVersion, as a mutating admission webhook that records writes does: a write
    /// that changes nothing else is still a new resourceVersion and a watch event.
    pub stamp_writes: bool,
}

/// The annotation [`ServerProfile::stamp_writes`] sets.
pub const WRITE_STAMP_ANNOTATION: &str = "apiserver-fixture.nodelet.dev/write";

impl Default for ServerProfile {
    fn default() -> Self {
        ServerProfile {
            release: Release::NEWEST,
            dropped: Vec::new(),
            stamp_writes: false,
        }
    }
}

/// A field of the v1.37 types and the first release that stores it with default feature
/// gates (the release where the field's gate went beta, or where the field was added when it
/// has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSince {
    pub kind: &'static str,
    pub path: &'static str,
    pub since: Release,
    /// The gate or change that decides it.
    pub why: &'static str,
}

const fn field(
    kind: &'static str,
    path: &'static str,
    minor: u32,
    why: &'static str,
) -> FieldSince {
    FieldSince {
        kind,
        path,
        since: Release::new(1, minor),
        why,
    }
}

/// Status fields of the v1.37 types that older servers do not store. Fields not listed are
/// stored by every release the fixture can be (they are older than v1.28).
pub const STATUS_FIELDS: &[FieldSince] = &[
    field("Pod", "status.hostIPs", 29, "PodHostIPs beta"),
    field(
        "Pod",
        "status.initContainerStatuses[].volumeMounts",
        31,
        "RecursiveReadOnlyMounts beta",
    ),
    field(
        "Pod",
        "status.containerStatuses[].volumeMounts",
        31,
        "RecursiveReadOnlyMounts beta",
    ),
    field(
        "Pod",
        "status.ephemeralContainerStatuses[].volumeMounts",
        31,
        "RecursiveReadOnlyMounts beta",
    ),
    field(
        "Pod",
        "status.initContainerStatuses[].resources",
        33,
        "InPlacePodVerticalScaling beta",
    ),
    field(
        "Pod",
        "status.containerStatuses[].resources",
        33,
        "InPlacePodVerticalScaling beta",
    ),
    field(
        "Pod",
        "status.ephemeralContainerStatuses[].resources",
        33,
        "InPlacePodVerticalScaling beta",
    ),
    field(
        "Pod",
        "status.initContainerStatuses[].allocatedResources",
        33,
        "InPlacePodVerticalScaling beta",
    ),
    field(
        "Pod",
        "status.containerStatuses[].allocatedResources",
        33,
        "InPlacePodVerticalScaling beta",
    ),
    field(
        "Pod",
        "status.ephemeralContainerStatuses[].allocatedResources",
        33,
        "InPlacePodVerticalScaling beta",
    ),
    field(
        "Pod",
        "status.initContainerStatuses[].user",
        33,
        "SupplementalGroupsPolicy beta",
    ),
    field(
        "Pod",
        "status.containerStatuses[].user",
        33,
        "SupplementalGroupsPolicy beta",
    ),
    field(
        "Pod",
        "status.ephemeralContainerStatuses[].user",
        33,
        "SupplementalGroupsPolicy beta",
    ),
    field(
        "Pod",
        "status.observedGeneration",
        34,
        "PodObservedGenerationTracking beta",
    ),
    field(
        "Pod",
        "status.conditions[].observedGeneration",
        34,
        "PodObservedGenerationTracking beta",
    ),
    field(
        "Pod",
        "status.extendedResourceClaimStatus",
        36,
        "DRAExtendedResource beta",
    ),
    field(
        "Pod",
        "status.resources",
        36,
        "InPlacePodLevelResourcesVerticalScaling beta",
    ),
    field(
        "Pod",
        "status.allocatedResources",
        36,
        "InPlacePodLevelResourcesVerticalScaling beta",
    ),
    field(
        "Node",
        "status.runtimeHandlers",
        31,
        "RecursiveReadOnlyMounts beta (the node strategy drops the list while it is off)",
    ),
    field(
        "Node",
        "status.nodeInfo.swap",
        33,
        "NodeSystemInfo.swap added (kubernetes#129954)",
    ),
];

impl ServerProfile {
    /// A server of `release` that drops nothing else.
    pub fn release(release: Release) -> ServerProfile {
        ServerProfile {
            release,
            ..ServerProfile::default()
        }
    }

    /// The paths this server drops from objects of `kind`.
    pub fn dropped_paths<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        let by_release = STATUS_FIELDS
            .iter()
            .filter(move |f| f.kind == kind && f.since > self.release)
            .map(|f| f.path);
        let extra = self
            .dropped
            .iter()
            .filter(move |d| d.kind == kind)
            .map(|d| d.path.as_str());
        by_release.chain(extra)
    }

    /// Removes from `object` (a stored object of `kind`) what this server does not store.
    pub fn prune(&self, kind: &str, object: &mut Value) {
        for path in self.dropped_paths(kind) {
            remove_path(object, path);
        }
    }

    /// The `/version` document (`version.Info`).
    pub fn version_info(&self) -> Value {
        let Release { major, minor } = self.release;
        let mut info = serde_json::json!({
            "major": major.to_string(),
            "minor": minor.to_string(),
            "gitVersion": format!("v{major}.{minor}.0-apiserver-fixture"),
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2025-01-01T00:00:00Z",
            "goVersion": "go1.24.0",
            "compiler": "gc",
            "platform": "linux/amd64"
        });
        // Compatibility versions (KEP-4330) only for v1.33 and newer: a client that prefers
        // them must also read `major`/`minor`, which every release reports.
        if self.release >= Release::new(1, 33) {
            info["emulationMajor"] = major.to_string().into();
            info["emulationMinor"] = minor.to_string().into();
            info["minCompatibilityMajor"] = major.to_string().into();
            info["minCompatibilityMinor"] = minor.saturating_sub(1).to_string().into();
        }
        info
    }
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
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn release_parsing() {
        let cases = [
            ("1.32", Ok(Release::new(1, 32))),
            ("v1.33", Ok(Release::new(1, 33))),
            ("v1.37.2", Ok(Release::new(1, 37))),
            ("1", Err(())),
            ("v1.x", Err(())),
            ("1.32.0.1", Err(())),
        ];
        for (text, want) in cases {
            assert_eq!(text.parse::<Release>().map_err(|_| ()), want, "{text}");
        }
        assert!("Pod:status.hostIPs".parse::<DroppedField>().is_ok());
        assert!("status.hostIPs".parse::<DroppedField>().is_err());
    }

    fn pod() -> Value {
        json!({
            "kind": "Pod",
            "status": {
                "phase": "Running",
                "observedGeneration": 2,
                "hostIP": "10.0.0.1",
                "hostIPs": [{"ip": "10.0.0.1"}],
                "conditions": [
                    {"type": "Ready", "status": "True", "observedGeneration": 2},
                    {"type": "PodScheduled", "status": "True", "observedGeneration": 2}
                ],
                "containerStatuses": [{
                    "name": "app", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                    "resources": {"requests": {"cpu": "1"}},
                    "allocatedResources": {"cpu": "1"},
                    "volumeMounts": [{"name": "v", "mountPath": "/v"}]
                }]
            }
        })
    }

    #[test]
    fn older_releases_drop_what_they_lack() {
        // (release, pod status expected after pruning)
        let cases = [
            (Release::NEWEST, pod()["status"].clone()),
            (
                Release::new(1, 33),
                json!({
                    "phase": "Running", "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}],
                    "conditions": [{"type": "Ready", "status": "True"},
                                   {"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [{
                        "name": "app", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                        "resources": {"requests": {"cpu": "1"}},
                        "allocatedResources": {"cpu": "1"},
                        "volumeMounts": [{"name": "v", "mountPath": "/v"}]
                    }]
                }),
            ),
            (
                Release::new(1, 32),
                json!({
                    "phase": "Running", "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}],
                    "conditions": [{"type": "Ready", "status": "True"},
                                   {"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [{
                        "name": "app", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                        "volumeMounts": [{"name": "v", "mountPath": "/v"}]
                    }]
                }),
            ),
            (
                Release::new(1, 28),
                json!({
                    "phase": "Running", "hostIP": "10.0.0.1",
                    "conditions": [{"type": "Ready", "status": "True"},
                                   {"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [{
                        "name": "app", "ready": true, "restartCount": 0, "image": "i", "imageID": ""
                    }]
                }),
            ),
        ];
        for (release, want) in cases {
            let mut object = pod();
            ServerProfile::release(release).prune("Pod", &mut object);
            assert_eq!(object["status"], want, "{release}");
        }
    }

    #[test]
    fn extra_dropped_fields_apply_to_their_kind_only() {
        let profile = ServerProfile {
            dropped: vec!["Node:status.nodeInfo.swap".parse().unwrap()],
            ..ServerProfile::default()
        };
        let mut node = json!({"status": {"nodeInfo": {"bootID": "b", "swap": {"capacity": 0}}}});
        profile.prune("Node", &mut node);
        assert_eq!(node, json!({"status": {"nodeInfo": {"bootID": "b"}}}));
        let mut pod = pod();
        profile.prune("Pod", &mut pod);
        assert_eq!(pod, self::pod(), "pods keep everything");
    }

    #[test]
    fn version_info_reports_the_release() {
        let old = ServerProfile::release(Release::new(1, 32)).version_info();
        assert_eq!(
            (old["major"].as_str(), old["minor"].as_str()),
            (Some("1"), Some("32"))
        );
        assert_eq!(old["gitVersion"], "v1.32.0-apiserver-fixture");
        assert!(old.get("emulationMinor").is_none());
        let new = ServerProfile::default().version_info();
        assert_eq!(new["emulationMinor"], "37");
        assert_eq!(new["minCompatibilityMinor"], "36");
    }
}
