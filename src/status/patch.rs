//! The body of the kubelet's status PATCH (`pkg/util/pod` `PatchPodStatus`): a two-way strategic
//! merge patch from the status the API server holds to the status nodelet wants, with the pod's
//! UID in `metadata.uid` so the API server refuses it (409) for a pod deleted and recreated under
//! the same name.
//!
//! Only what changed is sent, and lists with a merge key are patched element by element, so a
//! condition another controller adds between nodelet's read and its PATCH (a readiness gate) is
//! kept rather than overwritten. Timestamps are compared as the API serializes them (whole
//! seconds), so a status that differs only below a second is no change — the kubelet's
//! `normalizeStatus`.

use k8s_openapi::api::core::v1::PodStatus;
use serde_json::{json, Map, Value};

/// `PodStatus` lists with a `patchMergeKey` (from the API types' struct tags): these are merged
/// by key on the server, every other list is replaced whole (`containerStatuses` has no key).
const STATUS_MERGE_KEYS: &[(&str, &str)] = &[
    ("conditions", "type"),
    ("podIPs", "ip"),
    ("hostIPs", "ip"),
    ("resourceClaimStatuses", "name"),
];

/// The strategic merge patch that turns `api` into `desired` for the pod with `uid`, or `None`
/// when they are the same as the API serializes them (nothing to send).
pub fn status_patch(
    uid: &str,
    api: &PodStatus,
    desired: &PodStatus,
) -> Result<Option<Value>, serde_json::Error> {
    let old = serde_json::to_value(api)?;
    let new = serde_json::to_value(desired)?;
    Ok(diff_value(&old, &new, STATUS_MERGE_KEYS)
        .map(|status| json!({"metadata": {"uid": uid}, "status": status})))
}

/// What turns `old` into `new`: `None` if equal; objects recursively (removed keys as `null`);
/// anything else replaced. `merge_keys` applies to the lists directly under these two values.
fn diff_value(old: &Value, new: &Value, merge_keys: &[(&str, &str)]) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => diff_object(o, n, merge_keys).map(Value::Object),
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

fn diff_object(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    merge_keys: &[(&str, &str)],
) -> Option<Map<String, Value>> {
    let mut out = Map::new();
    for (field, new_value) in new {
        let Some(old_value) = old.get(field) else {
            if !new_value.is_null() {
                out.insert(field.clone(), new_value.clone());
            }
            continue;
        };
        let key = merge_keys
            .iter()
            .find(|(f, _)| f == field)
            .map(|(_, key)| *key);
        let list_patch = match (key, old_value, new_value) {
            (Some(key), Value::Array(o), Value::Array(n)) => merge_list_patch(o, n, key),
            _ => None,
        };
        match list_patch {
            Some(ListPatch::Unchanged) => {}
            Some(ListPatch::Changed { items, order }) => {
                if !items.is_empty() {
                    out.insert(field.clone(), Value::Array(items));
                }
                out.insert(format!("$setElementOrder/{field}"), Value::Array(order));
            }
            None => {
                if let Some(d) = diff_value(old_value, new_value, &[]) {
                    out.insert(field.clone(), d);
                }
            }
        }
    }
    for field in old.keys().filter(|f| !new.contains_key(*f)) {
        out.insert(field.clone(), Value::Null);
    }
    (!out.is_empty()).then_some(out)
}

enum ListPatch {
    Unchanged,
    /// `items`: the changed or new elements (each with its key), `{key, "$patch": "delete"}` for
    /// removed ones; `order`: `$setElementOrder`, the keys in the new order.
    Changed {
        items: Vec<Value>,
        order: Vec<Value>,
    },
}

fn key_of<'a>(element: &'a Value, key: &str) -> Option<&'a Value> {
    element.as_object().and_then(|m| m.get(key))
}

/// The strategic patch of a list merged by `key`; `None` when an element has no key (then
/// the list can only be replaced).
fn merge_list_patch(old: &[Value], new: &[Value], key: &str) -> Option<ListPatch> {
    let old_keys: Vec<&Value> = old.iter().map(|e| key_of(e, key)).collect::<Option<_>>()?;
    let new_keys: Vec<&Value> = new.iter().map(|e| key_of(e, key)).collect::<Option<_>>()?;
    let mut items = Vec::new();
    for (element, k) in new.iter().zip(&new_keys) {
        match old.iter().zip(&old_keys).find(|(_, ok)| *ok == k) {
            None => items.push(element.clone()),
            Some((previous, _)) => {
                if let Some(Value::Object(mut d)) = diff_value(previous, element, &[]) {
                    d.insert(key.to_string(), (*k).clone());
                    items.push(Value::Object(d));
                }
            }
        }
    }
    for k in old_keys.iter().filter(|k| !new_keys.contains(k)) {
        items.push(json!({key: k, "$patch": "delete"}));
    }
    let kept_old: Vec<&&Value> = old_keys.iter().filter(|k| new_keys.contains(k)).collect();
    let kept_new: Vec<&&Value> = new_keys.iter().filter(|k| old_keys.contains(k)).collect();
    if items.is_empty() && kept_old == kept_new {
        return Some(ListPatch::Unchanged);
    }
    let order = new_keys.iter().map(|k| json!({key: k})).collect();
    Some(ListPatch::Changed { items, order })
}

/// The fields where `api` differs from `desired`, named for people and for comparing one pass
/// with the next: `status.conditions[type=Ready].observedGeneration`,
/// `status.containerStatuses[name=app].resources`, `status.podIP`. List elements are matched by
/// their `type`, `name` or `ip` (the keys status lists carry), else by position. Sorted.
pub fn changed_paths(api: &PodStatus, desired: &PodStatus) -> Vec<String> {
    let (Ok(old), Ok(new)) = (serde_json::to_value(api), serde_json::to_value(desired)) else {
        return vec!["status".to_string()];
    };
    let mut out = Vec::new();
    diff_paths(&old, &new, "status", &mut out);
    out.sort();
    out.dedup();
    out
}

/// [`changed_paths`] for any two JSON values under `path` (the node status uses it too).
pub fn diff_paths(old: &Value, new: &Value, path: &str, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            for key in o.keys().chain(n.keys().filter(|k| !o.contains_key(*k))) {
                let (a, b) = (
                    o.get(key).unwrap_or(&Value::Null),
                    n.get(key).unwrap_or(&Value::Null),
                );
                diff_paths(a, b, &format!("{path}.{key}"), out);
            }
        }
        (Value::Array(o), Value::Array(n)) => match element_key(o, n) {
            Some(key) => {
                let name = |e: &Value| {
                    let k = key_of(e, key).map_or(String::new(), |v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    });
                    format!("{path}[{key}={k}]")
                };
                for e in n {
                    let before = o.iter().find(|x| key_of(x, key) == key_of(e, key));
                    diff_paths(before.unwrap_or(&Value::Null), e, &name(e), out);
                }
                for e in o
                    .iter()
                    .filter(|x| !n.iter().any(|e| key_of(e, key) == key_of(x, key)))
                {
                    out.push(name(e));
                }
            }
            None if o.len() == n.len() => {
                for (i, (a, b)) in o.iter().zip(n).enumerate() {
                    diff_paths(a, b, &format!("{path}[{i}]"), out);
                }
            }
            None => out.push(path.to_string()),
        },
        _ if old == new => {}
        _ => out.push(path.to_string()),
    }
}

/// The key every element of both lists has, among those status lists are merged by.
fn element_key(old: &[Value], new: &[Value]) -> Option<&'static str> {
    ["type", "name", "ip"]
        .into_iter()
        .find(|k| old.iter().chain(new).all(|e| key_of(e, k).is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_paths_table() {
        // (name, API status, desired status, expected paths)
        let cases = [
            (
                "equal",
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
                vec![],
            ),
            (
                "a field the server did not store, in every condition",
                json!({"conditions": [{"type": "Ready", "status": "True"},
                                      {"type": "Initialized", "status": "True"}]}),
                json!({"conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1},
                                      {"type": "Initialized", "status": "True", "observedGeneration": 1}]}),
                vec![
                    "status.conditions[type=Initialized].observedGeneration",
                    "status.conditions[type=Ready].observedGeneration",
                ],
            ),
            (
                "container statuses by name, scalars by path",
                json!({"podIP": "10.0.0.1", "containerStatuses": [
                    {"name": "a", "image": "i", "imageID": "", "ready": true, "restartCount": 0},
                    {"name": "b", "image": "i", "imageID": "", "ready": true, "restartCount": 0}]}),
                json!({"podIP": "10.0.0.2", "containerStatuses": [
                    {"name": "a", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                     "resources": {"requests": {"cpu": "1"}}},
                    {"name": "b", "image": "i", "imageID": "", "ready": true, "restartCount": 0}]}),
                vec!["status.containerStatuses[name=a].resources", "status.podIP"],
            ),
            (
                "an element only on one side",
                json!({"podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]}),
                json!({"podIPs": [{"ip": "10.0.0.1"}]}),
                vec!["status.podIPs[ip=fd00::1]"],
            ),
            (
                "sub-second differences are no difference",
                json!({"startTime": "2026-01-01T00:00:10Z"}),
                json!({"startTime": "2026-01-01T00:00:10.700Z"}),
                vec![],
            ),
        ];
        for (name, api, desired, want) in cases {
            let got = changed_paths(&status(api), &status(desired));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn keyless_lists_compare_by_position() {
        let mut out = Vec::new();
        diff_paths(&json!([1, 2]), &json!([1, 3]), "x", &mut out);
        diff_paths(&json!([1]), &json!([1, 3]), "y", &mut out);
        assert_eq!(out, vec!["x[1]".to_string(), "y".to_string()]);
    }

    fn status(v: Value) -> PodStatus {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn status_patch_table() {
        // (name, API status, desired status, expected patch of `status`, None = no PATCH)
        let cases = [
            (
                "equal statuses send nothing",
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
                None,
            ),
            (
                "sub-second differences are no change (the API keeps whole seconds)",
                json!({"phase": "Running", "startTime": "2026-01-01T00:00:10Z"}),
                json!({"phase": "Running", "startTime": "2026-01-01T00:00:10.700Z"}),
                None,
            ),
            (
                "a scalar change",
                json!({"phase": "Running", "qosClass": "BestEffort"}),
                json!({"phase": "Failed", "qosClass": "BestEffort"}),
                Some(json!({"phase": "Failed"})),
            ),
            (
                "a removed field is null",
                json!({"phase": "Failed", "reason": "Evicted", "message": "m"}),
                json!({"phase": "Failed", "message": "m"}),
                Some(json!({"reason": null})),
            ),
            (
                "a condition change is patched by type, with the order",
                json!({"conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "PodScheduled", "status": "True"}]}),
                json!({"conditions": [
                    {"type": "Ready", "status": "False", "reason": "PodFailed",
                     "lastTransitionTime": "2026-01-01T00:01:00Z"},
                    {"type": "PodScheduled", "status": "True"}]}),
                Some(json!({
                    "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed",
                                    "lastTransitionTime": "2026-01-01T00:01:00Z"}],
                    "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "PodScheduled"}],
                })),
            ),
            (
                "a new condition is sent whole, a dropped one deleted",
                json!({"conditions": [{"type": "Old", "status": "True"}]}),
                json!({"conditions": [{"type": "Ready", "status": "True", "message": "x"}]}),
                Some(json!({
                    "conditions": [
                        {"type": "Ready", "status": "True", "message": "x"},
                        {"type": "Old", "$patch": "delete"}],
                    "$setElementOrder/conditions": [{"type": "Ready"}],
                })),
            ),
            (
                "reordering alone sends the order only",
                json!({"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}),
                json!({"conditions": [{"type": "B", "status": "True"}, {"type": "A", "status": "True"}]}),
                Some(json!({"$setElementOrder/conditions": [{"type": "B"}, {"type": "A"}]})),
            ),
            (
                "container statuses have no merge key: replaced whole",
                json!({"containerStatuses": [
                    {"name": "a", "image": "i", "imageID": "", "ready": true, "restartCount": 0},
                    {"name": "b", "image": "i", "imageID": "", "ready": true, "restartCount": 0}]}),
                json!({"containerStatuses": [
                    {"name": "a", "image": "i", "imageID": "", "ready": false, "restartCount": 0},
                    {"name": "b", "image": "i", "imageID": "", "ready": true, "restartCount": 0}]}),
                Some(json!({"containerStatuses": [
                    {"name": "a", "image": "i", "imageID": "", "ready": false, "restartCount": 0},
                    {"name": "b", "image": "i", "imageID": "", "ready": true, "restartCount": 0}]})),
            ),
            (
                "pod IPs merge by ip",
                json!({"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}]}),
                json!({"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]}),
                Some(json!({
                    "podIPs": [{"ip": "fd00::1"}],
                    "$setElementOrder/podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}],
                })),
            ),
            (
                "a list that was absent is sent whole",
                json!({"phase": "Pending"}),
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}),
                Some(json!({"conditions": [{"type": "PodScheduled", "status": "True"}]})),
            ),
        ];
        for (name, api, desired, expected) in cases {
            let got = status_patch("uid-1", &status(api), &status(desired)).unwrap();
            let expected = expected.map(|s| json!({"metadata": {"uid": "uid-1"}, "status": s}));
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn conditions_without_their_key_are_replaced() {
        let old = [json!({"status": "True"})];
        let new = [json!({"status": "False"})];
        assert!(merge_list_patch(&old, &new, "type").is_none());
        let d = diff_object(
            json!({"conditions": old}).as_object().unwrap(),
            json!({"conditions": new}).as_object().unwrap(),
            STATUS_MERGE_KEYS,
        );
        assert_eq!(
            d.map(Value::Object),
            Some(json!({"conditions": [{"status": "False"}]}))
        );
    }
}
