//! Discovery documents (`/api`, `/api/v1`, `/apis`, ...) and the minimal OpenAPI v3
//! documents that tell kubectl the server does field validation itself (`fieldValidation` query
//! parameter on PATCH), so `kubectl apply`/`create` work without `--validate=false`.

use serde_json::{json, Value};

use crate::resource::{self, ResourceType};

pub const GIT_VERSION: &str = "v1.37.0-apiserver-fixture";

pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn group_json(group: &str) -> Value {
    let gv = format!("{group}/v1");
    json!({
        "name": group,
        "versions": [{"groupVersion": gv, "version": "v1"}],
        "preferredVersion": {"groupVersion": gv, "version": "v1"}
    })
}

/// Groups served only for their create-only review resources (not stored, no OpenAPI document).
pub const REVIEW_GROUPS: &[(&str, &str, &str)] = &[
    ("authentication.k8s.io", "tokenreviews", "TokenReview"),
    (
        "authorization.k8s.io",
        "subjectaccessreviews",
        "SubjectAccessReview",
    ),
];

/// The metrics-server stand-in's group (`crate::metrics`), served at `v1beta1` only.
pub const METRICS_GROUP: &str = "metrics.k8s.io";

fn metrics_group_json() -> Value {
    let gv = format!("{METRICS_GROUP}/v1beta1");
    json!({
        "name": METRICS_GROUP,
        "versions": [{"groupVersion": gv, "version": "v1beta1"}],
        "preferredVersion": {"groupVersion": gv, "version": "v1beta1"}
    })
}

pub fn api_group_list() -> Value {
    let groups: Vec<Value> = resource::GROUPS
        .iter()
        .copied()
        .chain(REVIEW_GROUPS.iter().map(|(g, _, _)| *g))
        .map(group_json)
        .chain(std::iter::once(metrics_group_json()))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn api_group(group: &str) -> Option<Value> {
    if group == METRICS_GROUP {
        let mut g = metrics_group_json();
        g["kind"] = json!("APIGroup");
        g["apiVersion"] = json!("v1");
        return Some(g);
    }
    if !resource::GROUPS.contains(&group) && !REVIEW_GROUPS.iter().any(|(g, _, _)| *g == group) {
        return None;
    }
    let mut g = group_json(group);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

fn resource_entry(rt: &ResourceType) -> Value {
    let mut entry = json!({
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": resource::verbs(),
    });
    if !rt.short_names.is_empty() {
        entry["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        entry["categories"] = json!(rt.categories);
    }
    entry
}

/// `APIResourceList` of a group/version; `None` if it is not served.
pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    if group == METRICS_GROUP {
        return (version == "v1beta1").then(crate::metrics::resource_list);
    }
    if let Some((_, plural, kind)) = REVIEW_GROUPS.iter().find(|(g, _, _)| *g == group) {
        if version != "v1" {
            return None;
        }
        return Some(json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": format!("{group}/v1"),
            "resources": [{"name": plural, "singularName": "", "namespaced": false, "kind": kind, "verbs": ["create"]}],
        }));
    }
    let types: Vec<&ResourceType> = resource::in_group_version(group, version).collect();
    if types.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for rt in types {
        resources.push(resource_entry(rt));
        if rt.is_pod() {
            resources.push(json!({
                "name": "pods/log",
                "singularName": "",
                "namespaced": true,
                "kind": "Pod",
                "verbs": ["get"],
            }));
            resources.push(json!({
                "name": "pods/ephemeralcontainers",
                "singularName": "",
                "namespaced": true,
                "kind": "Pod",
                "verbs": ["get", "patch", "update"],
            }));
            resources.push(json!({
                "name": "pods/binding",
                "singularName": "",
                "namespaced": true,
                "kind": "Binding",
                "verbs": ["create"],
            }));
        }
        if rt.storage == "serviceaccounts" {
            resources.push(json!({
                "name": "serviceaccounts/token",
                "singularName": "",
                "namespaced": true,
                "group": "authentication.k8s.io",
                "version": "v1",
                "kind": "TokenRequest",
                "verbs": ["create"],
            }));
        }
        if rt.storage == "certificatesigningrequests" {
            resources.push(json!({
                "name": "certificatesigningrequests/approval",
                "singularName": "",
                "namespaced": false,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if rt.is_pod() {
            // In-place resize (GA in 1.35): `kubectl patch --subresource resize`.
            resources.push(json!({
                "name": "pods/resize",
                "singularName": "",
                "namespaced": true,
                "kind": "Pod",
                "verbs": ["get", "patch", "update"],
            }));
        }
        if rt.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

/// Path keys of the OpenAPI v3 root document (`api/v1`, `apis/coordination.k8s.io/v1`, ...).
fn openapi_v3_paths() -> Vec<(String, &'static str, &'static str)> {
    let mut out = vec![("api/v1".to_string(), "", "v1")];
    for g in resource::GROUPS {
        out.push((format!("apis/{g}/v1"), g, "v1"));
    }
    out
}

pub fn openapi_v3_root() -> Value {
    let mut paths = serde_json::Map::new();
    for (key, _, _) in openapi_v3_paths() {
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash=FIXTURE")}),
        );
    }
    json!({"paths": paths})
}

/// A minimal OpenAPI v3 document for one group/version: for each resource, its item path with a
/// PATCH operation that names the GVK and accepts `fieldValidation`. No schemas: kubectl then
/// leaves validation to the server and computes apply patches from its built-in types.
pub fn openapi_v3_document(path: &str) -> Option<Value> {
    let (_, group, version) = openapi_v3_paths()
        .into_iter()
        .find(|(k, _, _)| k == path.trim_matches('/'))?;
    let mut paths = serde_json::Map::new();
    for rt in resource::in_group_version(group, version) {
        let item_path = if rt.namespaced {
            format!("{}/{{name}}", rt.collection_path(Some("{namespace}")))
        } else {
            format!("{}/{{name}}", rt.collection_path(None))
        };
        let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
        let params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}}
        ]);
        let op = |verb: &str| {
            json!({
                "operationId": format!("{verb}{}", rt.kind),
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": {"200": {"description": "OK"}}
            })
        };
        paths.insert(item_path, json!({"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": {}}
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_resource_list_has_status_subresources() {
        let list = resource_list("", "v1").unwrap();
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        for want in [
            "pods",
            "pods/status",
            "nodes",
            "nodes/status",
            "events",
            "configmaps",
            "secrets",
            "namespaces",
            "serviceaccounts",
            "serviceaccounts/token",
            "pods/log",
            "pods/ephemeralcontainers",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        assert!(!names.contains(&"leases"));
        let pods = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods")
            .unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["namespaced"], true);
        assert!(resource_list("apps", "v1").is_none());
    }

    #[test]
    fn groups_and_openapi() {
        let groups = api_group_list();
        let names: Vec<&str> = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|g| g["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "certificates.k8s.io",
                "coordination.k8s.io",
                "events.k8s.io",
                "node.k8s.io",
                "storage.k8s.io",
                "authentication.k8s.io",
                "authorization.k8s.io",
                "metrics.k8s.io"
            ]
        );
        assert_eq!(
            api_group("metrics.k8s.io").unwrap()["preferredVersion"]["groupVersion"],
            "metrics.k8s.io/v1beta1"
        );
        assert_eq!(
            resource_list("metrics.k8s.io", "v1beta1").unwrap()["resources"][1]["kind"],
            "PodMetrics"
        );
        assert!(resource_list("metrics.k8s.io", "v1").is_none());
        let reviews = resource_list("authentication.k8s.io", "v1").unwrap();
        assert_eq!(reviews["resources"][0]["name"], "tokenreviews");
        assert_eq!(reviews["resources"][0]["verbs"], json!(["create"]));
        assert!(api_group("authorization.k8s.io").is_some());
        assert_eq!(
            api_group("events.k8s.io").unwrap()["preferredVersion"]["version"],
            "v1"
        );
        assert!(api_group("apps").is_none());
        let root = openapi_v3_root();
        assert_eq!(
            root["paths"]["api/v1"]["serverRelativeURL"],
            "/openapi/v3/api/v1?hash=FIXTURE"
        );
        let doc = openapi_v3_document("api/v1").unwrap();
        let pod_patch = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        assert_eq!(pod_patch["x-kubernetes-group-version-kind"]["kind"], "Pod");
        assert!(pod_patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation"));
        assert!(doc["paths"]["/api/v1/nodes/{name}"].is_object());
        assert!(openapi_v3_document("apis/apps/v1").is_none());
    }
}
