//! Test-only: every field path of the Pod a user sets (`metadata.*`, `spec.*`), walked from the
//! JSON schema `k8s-openapi` generates (its `schemars` feature, a dev-dependency), so a field a
//! new API version adds shows up without anyone listing it.
//!
//! Paths are the API's JSON names joined by `.`, with `[]` after a list:
//! `spec.containers[].securityContext.seLinuxOptions.level`. A map (`additionalProperties`), a
//! type the schema does not open (`Quantity`, `IntOrString`, `Time`, raw JSON) and a type met
//! again below itself (a cycle) end a path.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

/// The walked paths of the Pod's `metadata` and `spec`.
pub fn pod_field_paths() -> BTreeSet<String> {
    let schema = k8s_openapi::schemars::SchemaGenerator::default().into_root_schema_for::<Pod>();
    let root = schema.as_value().clone();
    let mut paths = BTreeSet::new();
    for top in ["metadata", "spec"] {
        let node = &root["properties"][top];
        walk(&root, node, top.to_string(), &mut Vec::new(), &mut paths);
    }
    paths
}

/// The definition `$ref` points at (`#/$defs/<name>`), and its name.
fn resolve<'a>(root: &'a Value, node: &'a Value) -> (&'a Value, Option<String>) {
    match node.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r
                .rsplit('/')
                .next()
                .unwrap_or(r)
                .replace("~1", "/")
                .replace("~0", "~");
            let def = root
                .get("$defs")
                .or_else(|| root.get("definitions"))
                .and_then(|d| d.get(&name))
                .unwrap_or_else(|| panic!("unresolved $ref {r}"));
            (def, Some(name))
        }
        None => (node, None),
    }
}

fn walk(
    root: &Value,
    node: &Value,
    path: String,
    stack: &mut Vec<String>,
    out: &mut BTreeSet<String>,
) {
    let (node, name) = resolve(root, node);
    if let Some(name) = &name {
        if stack.contains(name) {
            out.insert(path);
            return;
        }
    }
    if let Some(items) = node.get("items") {
        if let Some(name) = name {
            stack.push(name);
            walk(root, items, format!("{path}[]"), stack, out);
            stack.pop();
        } else {
            walk(root, items, format!("{path}[]"), stack, out);
        }
        return;
    }
    match node.get("properties").and_then(Value::as_object) {
        Some(props) if !props.is_empty() => {
            if let Some(name) = &name {
                stack.push(name.clone());
            }
            for (field, sub) in props {
                walk(root, sub, format!("{path}.{field}"), stack, out);
            }
            if name.is_some() {
                stack.pop();
            }
        }
        _ => {
            out.insert(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_reaches_nested_fields_lists_and_maps_but_not_status() {
        let paths = pod_field_paths();
        for want in [
            "metadata.name",
            "metadata.labels",
            "spec.containers[].securityContext.seLinuxOptions.level",
            "spec.containers[].args[]",
            "spec.containers[].resources.limits",
            "spec.volumes[].projected.sources[].serviceAccountToken.path",
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[].matchExpressions[].values[]",
        ] {
            assert!(paths.contains(want), "{want} not walked");
        }
        assert!(paths
            .iter()
            .all(|p| p.starts_with("metadata.") || p.starts_with("spec.")));
        assert!(
            !paths.contains("spec.containers"),
            "a list of objects is opened"
        );
    }
}
