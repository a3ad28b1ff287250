//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch, and an
//! approximation of server-side apply.
//!
//! Strategic merge patch covers what kubectl and the kubelet send: lists merged by their
//! `patchMergeKey` for the Pod/Node/Namespace/Service fields listed in [`list_strategy`], merged
//! primitive lists (`metadata.finalizers`, `spec.podCIDRs`), and the directives `$patch`
//! (`replace`/`delete`/`merge`), `$retainKeys`, `$setElementOrder/<field>` and
//! `$deleteFromPrimitiveList/<field>`. Every other list is replaced, as for fields without a patch
//! strategy.

use serde_json::{Map, Value};

/// The patch types of the API server's `Content-Type` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    StrategicMerge,
    Apply,
}

impl PatchType {
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch document itself is malformed (400).
    #[error("{0}")]
    Malformed(String),
    /// The patch is well-formed but cannot be applied to this object (422).
    #[error("{0}")]
    Unapplicable(String),
}

/// How a list field is patched by a strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListStrategy {
    /// No patch strategy: the patch's list replaces the object's.
    Replace,
    /// Elements are objects merged by the value of this key.
    MergeByKey(&'static str),
    /// Elements are scalars; the patch adds missing ones.
    MergePrimitive,
}

/// The `patchStrategy`/`patchMergeKey` tags of the k8s.io/api types, for the served kinds.
/// `path` is the field path without list indices, e.g. `spec.containers.env`.
pub fn list_strategy(kind: &str, path: &str) -> ListStrategy {
    use ListStrategy::*;
    match path {
        "metadata.finalizers" => return MergePrimitive,
        "metadata.ownerReferences" => return MergeByKey("uid"),
        _ => {}
    }
    match (kind, path) {
        ("Pod", p) => {
            let container_field = [
                "spec.containers.",
                "spec.initContainers.",
                "spec.ephemeralContainers.",
            ]
            .iter()
            .find_map(|prefix| p.strip_prefix(prefix));
            match (p, container_field) {
                (_, Some("ports")) => MergeByKey("containerPort"),
                (_, Some("env")) => MergeByKey("name"),
                (_, Some("volumeMounts")) => MergeByKey("mountPath"),
                (_, Some("volumeDevices")) => MergeByKey("devicePath"),
                ("spec.containers" | "spec.initContainers" | "spec.ephemeralContainers", _) => {
                    MergeByKey("name")
                }
                (
                    "spec.volumes"
                    | "spec.imagePullSecrets"
                    | "spec.schedulingGates"
                    | "spec.resourceClaims",
                    _,
                ) => MergeByKey("name"),
                ("spec.hostAliases", _) => MergeByKey("ip"),
                ("status.conditions", _) => MergeByKey("type"),
                ("status.podIPs" | "status.hostIPs", _) => MergeByKey("ip"),
                ("status.resourceClaimStatuses", _) => MergeByKey("name"),
                _ => Replace,
            }
        }
        ("Node", "spec.podCIDRs") => MergePrimitive,
        ("Node", "status.conditions" | "status.addresses") => MergeByKey("type"),
        ("Namespace", "status.conditions") => MergeByKey("type"),
        ("Service", "spec.ports") => MergeByKey("port"),
        ("Service", "status.conditions") => MergeByKey("type"),
        _ => Replace,
    }
}

/// Applies a patch of `patch_type` to `original` (an object of `kind`) and returns the result.
pub fn apply(
    patch_type: PatchType,
    kind: &str,
    original: &Value,
    patch: &Value,
) -> Result<Value, PatchError> {
    match patch_type {
        PatchType::Merge => {
            if !patch.is_object() {
                return Err(PatchError::Malformed(
                    "a merge patch must be a JSON object".into(),
                ));
            }
            let mut doc = original.clone();
            json_patch::merge(&mut doc, patch);
            Ok(doc)
        }
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone()).map_err(|e| {
                PatchError::Malformed(format!("json: cannot unmarshal the patch: {e}"))
            })?;
            let mut doc = original.clone();
            json_patch::patch(&mut doc, &ops)
                .map_err(|e| PatchError::Unapplicable(e.to_string()))?;
            Ok(doc)
        }
        PatchType::StrategicMerge | PatchType::Apply => {
            let Value::Object(patch_map) = patch else {
                return Err(PatchError::Malformed(
                    "a strategic merge patch must be a JSON object".into(),
                ));
            };
            let mut doc = match original {
                Value::Object(m) => m.clone(),
                _ => Map::new(),
            };
            match merge_map(&mut doc, patch_map, kind, "")? {
                MapOutcome::Keep => Ok(Value::Object(doc)),
                MapOutcome::Delete => Ok(Value::Object(Map::new())),
            }
        }
    }
}

enum MapOutcome {
    Keep,
    Delete,
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

/// Removes `$`-directives from a value that is inserted as a whole.
fn strip_directives(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(|v| {
                    !(v.is_object()
                        && v.get("$patch").is_some()
                        && v.as_object().is_some_and(|m| m.len() == 1))
                })
                .map(strip_directives)
                .collect(),
        ),
        other => other.clone(),
    }
}

fn merge_map(
    doc: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    kind: &str,
    path: &str,
) -> Result<MapOutcome, PatchError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            if let Value::Object(m) = strip_directives(&Value::Object(patch.clone())) {
                *doc = m;
            }
            return Ok(MapOutcome::Keep);
        }
        Some("delete") => return Ok(MapOutcome::Delete),
        Some("merge") | None => {}
        Some(other) => {
            return Err(PatchError::Malformed(format!(
                "unknown patch type: {other:?}"
            )))
        }
    }
    for (key, value) in patch {
        if key.starts_with('$') {
            continue;
        }
        let field_path = join(path, key);
        match value {
            Value::Null => {
                doc.remove(key);
            }
            Value::Object(patch_child) => {
                if let Some(Value::Object(doc_child)) = doc.get_mut(key) {
                    if let MapOutcome::Delete =
                        merge_map(doc_child, patch_child, kind, &field_path)?
                    {
                        doc.remove(key);
                    }
                } else if patch_child.get("$patch").and_then(Value::as_str) == Some("delete") {
                    doc.remove(key);
                } else {
                    let mut fresh = Map::new();
                    merge_map(&mut fresh, patch_child, kind, &field_path)?;
                    doc.insert(key.clone(), Value::Object(fresh));
                }
            }
            Value::Array(patch_items) => {
                let current = match doc.get(key) {
                    Some(Value::Array(items)) => items.clone(),
                    _ => Vec::new(),
                };
                let merged = match list_strategy(kind, &field_path) {
                    ListStrategy::Replace => strip_directives(value)
                        .as_array()
                        .cloned()
                        .unwrap_or_default(),
                    ListStrategy::MergePrimitive => merge_primitive_list(current, patch_items),
                    ListStrategy::MergeByKey(merge_key) => {
                        merge_keyed_list(current, patch_items, merge_key, kind, &field_path)?
                    }
                };
                doc.insert(key.clone(), Value::Array(merged));
            }
            scalar => {
                doc.insert(key.clone(), scalar.clone());
            }
        }
    }
    // Directives that act on sibling fields, after the fields are merged.
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = value.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(items)) = doc.get_mut(field) {
                items.retain(|v| !remove.contains(v));
            }
        }
    }
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$setElementOrder/") {
            let order = value.as_array().cloned().unwrap_or_default();
            let merge_key = match list_strategy(kind, &join(path, field)) {
                ListStrategy::MergeByKey(k) => Some(k),
                _ => None,
            };
            if let Some(Value::Array(items)) = doc.get_mut(field) {
                reorder(items, &order, merge_key);
            }
        }
    }
    if let Some(retain) = patch.get("$retainKeys") {
        let keep: Vec<&str> = retain
            .as_array()
            .ok_or_else(|| PatchError::Malformed("$retainKeys must be a list of strings".into()))?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        doc.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(MapOutcome::Keep)
}

fn merge_primitive_list(mut current: Vec<Value>, patch: &[Value]) -> Vec<Value> {
    for item in patch {
        if !current.contains(item) {
            current.push(item.clone());
        }
    }
    current
}

fn merge_keyed_list(
    mut current: Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    kind: &str,
    path: &str,
) -> Result<Vec<Value>, PatchError> {
    let is_replace = |v: &Value| v.get("$patch").and_then(Value::as_str) == Some("replace");
    if patch.iter().any(is_replace) {
        return Ok(patch
            .iter()
            .filter(|v| !is_replace(v))
            .map(strip_directives)
            .collect());
    }
    for item in patch {
        let Value::Object(patch_item) = item else {
            return Err(PatchError::Unapplicable(format!(
                "{path}: list elements must be objects merged by {merge_key:?}, got {item}"
            )));
        };
        let key_value = patch_item.get(merge_key).ok_or_else(|| {
            PatchError::Unapplicable(format!(
                "map: {item} does not contain declared merge key: {merge_key}"
            ))
        })?;
        let position = current
            .iter()
            .position(|c| c.get(merge_key) == Some(key_value));
        if patch_item.get("$patch").and_then(Value::as_str) == Some("delete") {
            current.retain(|c| c.get(merge_key) != Some(key_value));
            continue;
        }
        match position {
            Some(i) => {
                if let Value::Object(existing) = &mut current[i] {
                    if let MapOutcome::Delete = merge_map(existing, patch_item, kind, path)? {
                        current.remove(i);
                    }
                }
            }
            None => {
                let mut fresh = Map::new();
                merge_map(&mut fresh, patch_item, kind, path)?;
                current.push(Value::Object(fresh));
            }
        }
    }
    Ok(current)
}

/// `$setElementOrder`: elements named in `order` come first in that order; the others keep their
/// relative order after them (the API server interleaves them; this is the documented
/// approximation).
fn reorder(items: &mut Vec<Value>, order: &[Value], merge_key: Option<&str>) {
    let identity = |v: &Value| match merge_key {
        Some(k) => v.get(k).cloned(),
        None => Some(v.clone()),
    };
    let wanted: Vec<Value> = order.iter().filter_map(identity).collect();
    let mut ordered = Vec::with_capacity(items.len());
    for w in &wanted {
        if let Some(pos) = items.iter().position(|v| identity(v).as_ref() == Some(w)) {
            ordered.push(items.remove(pos));
        }
    }
    ordered.append(items);
    *items = ordered;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types() {
        let cases = [
            ("application/merge-patch+json", Some(PatchType::Merge)),
            (
                "application/strategic-merge-patch+json; charset=utf-8",
                Some(PatchType::StrategicMerge),
            ),
            ("application/json-patch+json", Some(PatchType::Json)),
            ("application/apply-patch+yaml", Some(PatchType::Apply)),
            ("application/json", None),
        ];
        for (ct, want) in cases {
            assert_eq!(PatchType::from_content_type(ct), want, "{ct}");
        }
    }

    #[test]
    fn list_strategies() {
        let cases = [
            ("Pod", "spec.containers", ListStrategy::MergeByKey("name")),
            (
                "Pod",
                "spec.initContainers.env",
                ListStrategy::MergeByKey("name"),
            ),
            (
                "Pod",
                "spec.containers.ports",
                ListStrategy::MergeByKey("containerPort"),
            ),
            (
                "Pod",
                "spec.containers.volumeMounts",
                ListStrategy::MergeByKey("mountPath"),
            ),
            ("Pod", "spec.containers.args", ListStrategy::Replace),
            ("Pod", "spec.tolerations", ListStrategy::Replace),
            ("Pod", "status.conditions", ListStrategy::MergeByKey("type")),
            ("Pod", "status.containerStatuses", ListStrategy::Replace),
            ("Pod", "metadata.finalizers", ListStrategy::MergePrimitive),
            (
                "ConfigMap",
                "metadata.finalizers",
                ListStrategy::MergePrimitive,
            ),
            ("Node", "status.addresses", ListStrategy::MergeByKey("type")),
            ("Node", "status.images", ListStrategy::Replace),
            ("Lease", "spec.holderIdentity", ListStrategy::Replace),
        ];
        for (kind, path, want) in cases {
            assert_eq!(list_strategy(kind, path), want, "{kind} {path}");
        }
    }

    #[test]
    fn patches_apply_like_the_api_server() {
        let pod = json!({
            "metadata": {"name": "web", "labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
            "spec": {"containers": [
                {"name": "app", "image": "nginx:1", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "busybox"}
            ]},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "False"}
                ],
                "containerStatuses": [{"name": "app", "ready": false}, {"name": "side", "ready": false}]
            }
        });
        struct Case {
            name: &'static str,
            patch_type: PatchType,
            patch: Value,
            pointer: &'static str,
            want: Value,
        }
        let cases = vec![
            Case {
                name: "merge patch replaces lists",
                patch_type: PatchType::Merge,
                patch: json!({"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}),
                pointer: "/spec/containers",
                want: json!([{"name": "app", "image": "nginx:2"}]),
            },
            Case {
                name: "merge patch null deletes",
                patch_type: PatchType::Merge,
                patch: json!({"metadata": {"labels": {"a": null}}}),
                pointer: "/metadata/labels",
                want: json!({"b": "2"}),
            },
            Case {
                name: "strategic merge by name keeps other containers",
                patch_type: PatchType::StrategicMerge,
                patch: json!({"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}),
                pointer: "/spec/containers",
                want: json!([
                    {"name": "app", "image": "nginx:2", "env": [{"name": "A", "value": "1"}]},
                    {"name": "side", "image": "busybox"}
                ]),
            },
            Case {
                name: "strategic merge of conditions by type",
                patch_type: PatchType::StrategicMerge,
                patch: json!({"status": {
                    "$setElementOrder/conditions": [{"type": "Initialized"}, {"type": "Ready"}, {"type": "PodScheduled"}],
                    "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}]
                }}),
                pointer: "/status/conditions",
                want: json!([
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "True"},
                    {"type": "PodScheduled", "status": "True"}
                ]),
            },
            Case {
                name: "containerStatuses has no merge key: replaced",
                patch_type: PatchType::StrategicMerge,
                patch: json!({"status": {"containerStatuses": [{"name": "app", "ready": true}]}}),
                pointer: "/status/containerStatuses",
                want: json!([{"name": "app", "ready": true}]),
            },
            Case {
                name: "$patch delete removes a list element",
                patch_type: PatchType::StrategicMerge,
                patch: json!({"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}),
                pointer: "/spec/containers/0/name",
                want: json!("app"),
            },
            Case {
                name: "$patch replace replaces a list",
                patch_type: PatchType::StrategicMerge,
                patch: json!({"status": {"conditions": [{"$patch": "replace"}, {"type": "Ready", "status": "True"}]}}),
                pointer: "/status/conditions",
                want: json!([{"type": "Ready", "status": "True"}]),
            },
            Case {
                name: "$patch replace on a map",
                patch_type: PatchType::StrategicMerge,
                patch: json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}}),
                pointer: "/metadata/labels",
                want: json!({"c": "3"}),
            },
            Case {
                name: "finalizers merge as a set",
                patch_type: PatchType::StrategicMerge,
                patch: json!({"metadata": {"finalizers": ["x", "y"]}}),
                pointer: "/metadata/finalizers",
                want: json!(["x", "y"]),
            },
            Case {
                name: "$deleteFromPrimitiveList removes finalizers",
                patch_type: PatchType::StrategicMerge,
                patch: json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}),
                pointer: "/metadata/finalizers",
                want: json!([]),
            },
            Case {
                name: "$retainKeys drops other keys",
                patch_type: PatchType::StrategicMerge,
                patch: json!({"metadata": {"labels": {"$retainKeys": ["b"], "b": "20"}}}),
                pointer: "/metadata/labels",
                want: json!({"b": "20"}),
            },
            Case {
                name: "json patch remove",
                patch_type: PatchType::Json,
                patch: json!([{"op": "remove", "path": "/metadata/finalizers/0"}]),
                pointer: "/metadata/finalizers",
                want: json!([]),
            },
            Case {
                name: "json patch replace",
                patch_type: PatchType::Json,
                patch: json!([{"op": "replace", "path": "/status/phase", "value": "Running"}]),
                pointer: "/status/phase",
                want: json!("Running"),
            },
        ];
        for case in cases {
            let got = apply(case.patch_type, "Pod", &pod, &case.patch).unwrap();
            assert_eq!(got.pointer(case.pointer), Some(&case.want), "{}", case.name);
        }
    }

    #[test]
    fn bad_patches() {
        let pod = json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "a"}]}});
        let cases = [
            (PatchType::Merge, json!([1])),
            (PatchType::Json, json!({"op": "add"})),
            (
                PatchType::Json,
                json!([{"op": "remove", "path": "/spec/nothing"}]),
            ),
            (
                PatchType::StrategicMerge,
                json!({"spec": {"containers": [{"image": "x"}]}}),
            ),
            (
                PatchType::StrategicMerge,
                json!({"spec": {"$patch": "explode"}}),
            ),
        ];
        for (patch_type, patch) in cases {
            assert!(
                apply(patch_type, "Pod", &pod, &patch).is_err(),
                "{patch_type:?} {patch}"
            );
        }
    }
}
