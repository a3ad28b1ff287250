//! Decoding request bodies into the k8s-openapi types: a body that does not decode is rejected
//! (400) like the API server rejects it, so everything stored is readable by typed clients; the
//! round trip also finds unknown fields for `fieldValidation=Strict|Warn`.

use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;

use crate::resource::ResourceType;

/// How the body decodes: unknown field paths (`spec.containers[0].foo`) or the decode error.
fn roundtrip<T: DeserializeOwned + Serialize>(obj: &Value) -> Result<Vec<String>, String> {
    let typed: T = serde_json::from_value(obj.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    let mut unknown = Vec::new();
    diff_fields(obj, &back, "", &mut unknown);
    Ok(unknown)
}

fn diff_fields(given: &Value, known: &Value, path: &str, unknown: &mut Vec<String>) {
    match (given, known) {
        (Value::Object(g), Value::Object(k)) => {
            for (key, value) in g {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match k.get(key) {
                    Some(known_value) => diff_fields(value, known_value, &child, unknown),
                    // Nulls and empty values are dropped by the typed round trip, not unknown.
                    None if value.is_null() => {}
                    None if is_map_field(path) => {}
                    None => unknown.push(child),
                }
            }
        }
        (Value::Array(g), Value::Array(k)) => {
            for (i, (gv, kv)) in g.iter().zip(k.iter()).enumerate() {
                diff_fields(gv, kv, &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

/// Free-form maps whose keys are data, not fields.
fn is_map_field(path: &str) -> bool {
    [
        "labels",
        "annotations",
        "data",
        "binaryData",
        "stringData",
        "nodeSelector",
        "capacity",
        "allocatable",
    ]
    .iter()
    .any(|m| path == *m || path.ends_with(&format!(".{m}")))
}

/// Decodes `obj` as the type of `rt`; returns unknown field paths, or the API server's 400 message.
pub fn check(rt: &ResourceType, obj: &Value) -> Result<Vec<String>, String> {
    use k8s_openapi::api::{
        coordination::v1 as coordination, core::v1 as core, events::v1 as events,
        storage::v1 as storage,
    };
    let result = match (rt.group, rt.kind) {
        ("", "Pod") => roundtrip::<core::Pod>(obj),
        ("", "Node") => roundtrip::<core::Node>(obj),
        ("", "Namespace") => roundtrip::<core::Namespace>(obj),
        ("", "Event") => roundtrip::<core::Event>(obj),
        ("", "ConfigMap") => roundtrip::<core::ConfigMap>(obj),
        ("", "Secret") => roundtrip::<core::Secret>(obj),
        ("", "Service") => roundtrip::<core::Service>(obj),
        ("", "ServiceAccount") => roundtrip::<core::ServiceAccount>(obj),
        ("coordination.k8s.io", "Lease") => roundtrip::<coordination::Lease>(obj),
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            roundtrip::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>(obj)
        }
        ("events.k8s.io", "Event") => roundtrip::<events::Event>(obj),
        ("node.k8s.io", "RuntimeClass") => {
            roundtrip::<k8s_openapi::api::node::v1::RuntimeClass>(obj)
        }
        ("", "PersistentVolume") => roundtrip::<core::PersistentVolume>(obj),
        ("", "PersistentVolumeClaim") => roundtrip::<core::PersistentVolumeClaim>(obj),
        ("storage.k8s.io", "StorageClass") => roundtrip::<storage::StorageClass>(obj),
        ("storage.k8s.io", "CSIDriver") => roundtrip::<storage::CSIDriver>(obj),
        ("storage.k8s.io", "CSINode") => roundtrip::<storage::CSINode>(obj),
        ("storage.k8s.io", "VolumeAttachment") => roundtrip::<storage::VolumeAttachment>(obj),
        _ => Ok(Vec::new()),
    };
    result.map_err(|e| {
        format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {e}",
            kind = rt.kind,
            version = rt.version
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::find_by_plural;
    use serde_json::json;

    #[test]
    fn decoding_and_unknown_fields() {
        let pods = find_by_plural("", "v1", "pods").unwrap();
        let cms = find_by_plural("", "v1", "configmaps").unwrap();
        type Case<'a> = (&'a ResourceType, Value, Result<Vec<&'a str>, ()>);
        let cases: Vec<Case> = vec![
            (
                pods,
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "labels": {"x": "y"}},
                       "spec": {"containers": [{"name": "a", "image": "b"}]}}),
                Ok(vec![]),
            ),
            (
                pods,
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"},
                       "spec": {"containers": [{"name": "a", "image": "b", "imagePullPolicyy": "Never"}], "foo": 1}}),
                Ok(vec!["spec.containers[0].imagePullPolicyy", "spec.foo"]),
            ),
            (
                pods,
                json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": "nope"}}),
                Err(()),
            ),
            (
                cms,
                json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"any-key": "v"}}),
                Ok(vec![]),
            ),
        ];
        for (rt, obj, want) in cases {
            let got = check(rt, &obj);
            match want {
                Ok(fields) => assert_eq!(got.unwrap(), fields, "{obj}"),
                Err(()) => {
                    let err = got.unwrap_err();
                    assert!(
                        err.starts_with("Pod in version \"v1\" cannot be handled as a Pod: "),
                        "{err}"
                    );
                }
            }
        }
    }
}
