//! One manifest file → one static pod: decode (YAML or JSON, exactly one document), check
//! `apiVersion`/`kind`, default, derive the UID, apply the kubelet's static-pod fields (name,
//! namespace, node, annotations, toleration) and validate. All of it is pure: bytes in, pod or
//! errors out.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::defaults::apply_defaults;
use super::validation::{validate_pod, validate_static_pod};
use super::{ManifestError, CONFIG_HASH_ANNOTATION, CONFIG_SEEN_ANNOTATION, FILE_SOURCE};
use crate::podspec::CONFIG_SOURCE_ANNOTATION;

/// The kubelet refuses manifests larger than this (`maxConfigLength`, 10 MiB).
pub const MAX_MANIFEST_BYTES: usize = 10 << 20;

/// A pod decoded from a manifest, with notes about fields that were ignored.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedManifest {
    pub pod: Pod,
    /// Fields the Pod type does not have (typos, or fields of a newer API); the kubelet ignores
    /// them silently, nodelet ignores them too but says so.
    pub unknown_fields: Vec<String>,
}

/// Parse, default, name and validate one manifest. Pure: `file` is only used for the UID and in
/// errors. The pod has every field except the first-seen time (see [`mark_first_seen`]).
pub fn parse_manifest(
    bytes: &[u8],
    file: &Path,
    node_name: &str,
) -> Result<Pod, Vec<ManifestError>> {
    decode_manifest(bytes, file, node_name).map(|parsed| parsed.pod)
}

/// [`parse_manifest`], also returning the unknown fields. When the pod is rejected, the unknown
/// fields are appended to the errors: a misspelt field is often the reason a required one is
/// "missing".
pub fn decode_manifest(
    bytes: &[u8],
    file: &Path,
    node_name: &str,
) -> Result<ParsedManifest, Vec<ManifestError>> {
    let fail = |field: Option<&str>, reason: String| {
        vec![ManifestError::new(file, field.map(str::to_string), reason)]
    };

    let mut value = decode_single_document(bytes).map_err(|reason| fail(None, reason))?;
    lift_on_exit_exit_codes(&mut value);
    let type_errors = check_type_meta(&value);
    if !type_errors.is_empty() {
        return Err(type_errors
            .into_iter()
            .map(|(field, reason)| ManifestError::new(file, Some(field.to_string()), reason))
            .collect());
    }
    let mut pod: Pod = serde_path_to_error::deserialize(&value).map_err(|e| {
        let path = e.path().to_string();
        let field = (path != ".").then_some(path);
        vec![ManifestError::new(file, field, e.into_inner().to_string())]
    })?;

    let mut unknown = Vec::new();
    if let Ok(known) = serde_json::to_value(&pod) {
        collect_unknown_fields(&value, &known, "", &mut unknown);
    }

    apply_defaults(&mut pod);
    let uid = static_pod_uid(&pod, node_name, file);
    apply_static_pod_fields(&mut pod, &uid, node_name);

    let mut errors: Vec<ManifestError> = validate_pod(&pod)
        .into_iter()
        .chain(validate_static_pod(&pod))
        .map(|e| ManifestError::from_field(file, e))
        .collect();
    if errors.is_empty() {
        Ok(ParsedManifest {
            pod,
            unknown_fields: unknown,
        })
    } else {
        errors.extend(
            unknown
                .into_iter()
                .map(|f| ManifestError::new(file, Some(f), "unknown field (ignored)")),
        );
        Err(errors)
    }
}

/// Decode exactly one YAML or JSON document into a JSON value. Empty YAML documents (a trailing
/// `---`) do not count.
/// The seed's `ml-worker` example nests a rule's condition as `onExit: {exitCodes: ...}`; the
/// API type has `exitCodes` on the rule itself. Accept both spellings by lifting `onExit.exitCodes`
/// when the rule has no `exitCodes` of its own.
fn lift_on_exit_exit_codes(value: &mut Value) {
    for list in ["containers", "initContainers"] {
        let Some(containers) = value
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for container in containers {
            let Some(rules) = container
                .get_mut("restartPolicyRules")
                .and_then(Value::as_array_mut)
            else {
                continue;
            };
            for rule in rules.iter_mut().filter_map(Value::as_object_mut) {
                if rule.contains_key("exitCodes") {
                    continue;
                }
                let lifted = rule
                    .get_mut("onExit")
                    .and_then(Value::as_object_mut)
                    .and_then(|on_exit| on_exit.remove("exitCodes"));
                if let Some(codes) = lifted {
                    rule.insert("exitCodes".to_string(), codes);
                    if rule
                        .get("onExit")
                        .and_then(Value::as_object)
                        .is_some_and(|o| o.is_empty())
                    {
                        rule.remove("onExit");
                    }
                }
            }
        }
    }
}

fn decode_single_document(bytes: &[u8]) -> Result<Value, String> {
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(format!(
            "manifest is larger than {MAX_MANIFEST_BYTES} bytes"
        ));
    }
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    let value = if first == Some(&b'{') {
        serde_json::from_slice::<Value>(bytes).map_err(|e| format!("invalid JSON: {e}"))?
    } else {
        let mut docs = Vec::new();
        for doc in serde_yaml::Deserializer::from_slice(bytes) {
            let v = Value::deserialize(doc).map_err(|e| format!("invalid YAML: {e}"))?;
            if !v.is_null() {
                docs.push(v);
            }
        }
        match docs.len() {
            0 => return Err("empty manifest: expected one Pod".to_string()),
            1 => docs.remove(0),
            n => {
                return Err(format!(
                    "expected exactly one YAML document, found {n}: put each pod in its own file"
                ))
            }
        }
    };
    if !value.is_object() {
        return Err(format!(
            "manifest must be a YAML or JSON object, found {}",
            json_type(&value)
        ));
    }
    Ok(value)
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// `apiVersion: v1` and `kind: Pod` must both be present (the kubelet's decoder needs them).
fn check_type_meta(v: &Value) -> Vec<(&'static str, String)> {
    let mut errs = Vec::new();
    for (field, want) in [("apiVersion", "v1"), ("kind", "Pod")] {
        match v.get(field) {
            None | Some(Value::Null) => errs.push((field, "Required value".to_string())),
            Some(Value::String(s)) if s == want => {}
            Some(Value::String(s)) => errs.push((
                field,
                format!("Unsupported value: {s:?}: supported values: {want:?}"),
            )),
            Some(other) => errs.push((
                field,
                format!("Invalid value: {other}: must be the string {want:?}"),
            )),
        }
    }
    errs
}

/// Paths present in `input` that did not survive a round trip through the Pod type.
fn collect_unknown_fields(input: &Value, known: &Value, path: &str, out: &mut Vec<String>) {
    match (input, known) {
        (Value::Object(input), Value::Object(known)) => {
            for (key, value) in input {
                if value.is_null() {
                    continue;
                }
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match known.get(key) {
                    Some(k) => collect_unknown_fields(value, k, &child, out),
                    None => out.push(child),
                }
            }
        }
        (Value::Array(input), Value::Array(known)) => {
            for (i, (value, k)) in input.iter().zip(known).enumerate() {
                collect_unknown_fields(value, k, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// `<name>-<lowercased node name>`, so static pods of different nodes never collide.
pub fn static_pod_name(name: &str, node_name: &str) -> String {
    format!("{name}-{}", node_name.to_lowercase())
}

/// The static pod's UID: the manifest's own `metadata.uid` when it sets one, else a hash of the
/// defaulted pod (before the kubelet adds name suffix, namespace, node and annotations), the node
/// name and the file path, like the kubelet's `applyDefaults` (which uses FNV-128 over Go's
/// object dump; nodelet uses SHA-256 over the JSON form, truncated to 128 bits = 32 hex chars).
/// Same content ⇒ same UID across restarts; edited content, another file or another node ⇒ new UID.
pub fn static_pod_uid(defaulted_pod: &Pod, node_name: &str, file: &Path) -> String {
    if let Some(uid) = defaulted_pod
        .metadata
        .uid
        .as_deref()
        .filter(|u| !u.is_empty())
    {
        return uid.to_string();
    }
    let mut hasher = Sha256::new();
    match serde_json::to_vec(defaulted_pod) {
        Ok(json) => hasher.update(&json),
        // Serializing a Pod cannot fail (string map keys only); hash its debug form if it ever does.
        Err(_) => hasher.update(format!("{defaulted_pod:?}").as_bytes()),
    }
    hasher.update(b"\0host:");
    hasher.update(node_name.as_bytes());
    hasher.update(b"\0file:");
    hasher.update(file.as_os_str().as_bytes());
    hex::encode(&hasher.finalize()[..16])
}

/// What the kubelet's `applyDefaults` and config merger add to every static pod.
fn apply_static_pod_fields(pod: &mut Pod, uid: &str, node_name: &str) {
    let meta = &mut pod.metadata;
    meta.uid = Some(uid.to_string());
    // A missing name stays missing so validation reports `metadata.name: Required value`.
    if let Some(name) = meta.name.as_mut().filter(|n| !n.is_empty()) {
        *name = static_pod_name(name, node_name);
    }
    if meta.namespace.as_deref().is_none_or(str::is_empty) {
        meta.namespace = Some("default".to_string());
    }
    let annotations = meta.annotations.get_or_insert_with(Default::default);
    annotations.insert(CONFIG_HASH_ANNOTATION.to_string(), uid.to_string());
    annotations.insert(
        CONFIG_SOURCE_ANNOTATION.to_string(),
        FILE_SOURCE.to_string(),
    );

    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node_name.to_string());
    // Static pods tolerate every NoExecute taint so node problems never evict them.
    add_or_update_toleration(
        spec.tolerations.get_or_insert_with(Vec::new),
        Toleration {
            operator: Some("Exists".to_string()),
            effect: Some("NoExecute".to_string()),
            ..Default::default()
        },
    );
    pod.status.get_or_insert_with(Default::default).phase =
        Some(crate::podspec::Phase::Pending.into());
}

/// `helper.AddOrUpdateTolerationInPod`: replace a toleration that matches on key, operator,
/// value and effect; append otherwise.
fn add_or_update_toleration(tolerations: &mut Vec<Toleration>, t: Toleration) {
    let same = |a: &Toleration| {
        a.key.as_deref().unwrap_or("") == t.key.as_deref().unwrap_or("")
            && a.operator.as_deref().unwrap_or("Equal") == t.operator.as_deref().unwrap_or("Equal")
            && a.value.as_deref().unwrap_or("") == t.value.as_deref().unwrap_or("")
            && a.effect.as_deref().unwrap_or("") == t.effect.as_deref().unwrap_or("")
    };
    match tolerations.iter_mut().find(|a| same(a)) {
        Some(existing) => *existing = t,
        None => tolerations.push(t),
    }
}

/// Record when the source first saw this pod: `metadata.creationTimestamp` (for AGE) and the
/// `kubernetes.io/config.seen` annotation. Neither is part of the UID.
pub fn mark_first_seen(pod: &mut Pod, seen: Timestamp) {
    pod.metadata.creation_timestamp = Some(Time(seen));
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(CONFIG_SEEN_ANNOTATION.to_string(), seen.to_string());
}

/// The first-seen time recorded by [`mark_first_seen`].
pub fn first_seen(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const NODE: &str = "node-1";

    fn file() -> PathBuf {
        PathBuf::from("/etc/kubernetes/manifests/web.yaml")
    }

    const WEB: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: nginx
    image: nginx:1.27
    ports:
    - containerPort: 80
"#;

    fn parse(src: &str) -> Result<Pod, Vec<ManifestError>> {
        parse_manifest(src.as_bytes(), &file(), NODE)
    }

    fn errors(src: &str) -> Vec<String> {
        match parse(src) {
            Ok(pod) => panic!("expected errors, got pod {:?}", pod.metadata.name),
            Err(errs) => errs.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn good_manifest_becomes_a_static_pod() {
        let pod = parse(WEB).unwrap();
        let meta = &pod.metadata;
        assert_eq!(meta.name.as_deref(), Some("web-node-1"));
        assert_eq!(meta.namespace.as_deref(), Some("default"));
        let uid = meta.uid.clone().unwrap();
        assert_eq!(uid.len(), 32);
        assert!(uid
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        let ann = meta.annotations.as_ref().unwrap();
        assert_eq!(
            ann.get(CONFIG_SOURCE_ANNOTATION).map(String::as_str),
            Some("file")
        );
        assert_eq!(ann.get(CONFIG_HASH_ANNOTATION), Some(&uid));
        assert_eq!(
            ann.get(CONFIG_SEEN_ANNOTATION),
            None,
            "added by the scan, not the parser"
        );
        assert_eq!(
            meta.labels.as_ref().unwrap().get("app").map(String::as_str),
            Some("web")
        );
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some(NODE));
        assert_eq!(
            spec.tolerations.as_deref(),
            Some(
                &[Toleration {
                    operator: Some("Exists".into()),
                    effect: Some("NoExecute".into()),
                    ..Default::default()
                }][..]
            )
        );
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(
            pod.status.as_ref().unwrap().phase.as_deref(),
            Some("Pending")
        );
    }

    #[test]
    fn naming() {
        // (metadata.name, metadata.namespace, node) -> (name, namespace)
        let cases: &[(&str, Option<&str>, &str, &str, &str)] = &[
            ("web", None, "node1", "web-node1", "default"),
            (
                "web",
                Some("kube-system"),
                "node1",
                "web-node1",
                "kube-system",
            ),
            (
                "etcd",
                None,
                "control-plane.example",
                "etcd-control-plane.example",
                "default",
            ),
        ];
        for (name, ns, node, want_name, want_ns) in cases {
            let ns_line = ns
                .map(|n| format!("  namespace: {n}\n"))
                .unwrap_or_default();
            let src = format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n{ns_line}spec:\n  containers:\n  - name: c\n    image: busybox:1.36\n"
            );
            let pod = parse_manifest(src.as_bytes(), &file(), node).unwrap();
            assert_eq!(pod.metadata.name.as_deref(), Some(*want_name));
            assert_eq!(pod.metadata.namespace.as_deref(), Some(*want_ns));
            assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some(*node));
        }
        // The kubelet lowercases the node name in the pod name but keeps spec.nodeName as given,
        // which must then be a valid (lowercase) node name.
        let errs = parse_manifest(WEB.as_bytes(), &file(), "Node-1").unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field.as_deref(), Some("spec.nodeName"));
        assert!(errs[0]
            .reason
            .starts_with("Invalid value: \"Node-1\": a lowercase RFC 1123 subdomain"));
    }

    #[test]
    fn json_manifests_are_accepted() {
        let src = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},
            "spec":{"containers":[{"name":"c","image":"busybox:1.36"}]}}"#;
        let pod = parse(src).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("j-node-1"));
    }

    #[test]
    fn uid_stability() {
        let base = parse(WEB).unwrap().metadata.uid.unwrap();
        let same_again = parse(WEB).unwrap().metadata.uid.unwrap();
        let reformatted = parse(
            "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"web\",\"labels\":{\"app\":\"web\"}},\
             \"spec\":{\"containers\":[{\"name\":\"nginx\",\"image\":\"nginx:1.27\",\"ports\":[{\"containerPort\":80}]}]}}",
        )
        .unwrap()
        .metadata
        .uid
        .unwrap();
        let explicit_defaults = parse(&WEB.replace(
            "    image: nginx:1.27\n",
            "    image: nginx:1.27\n    imagePullPolicy: IfNotPresent\n",
        ))
        .unwrap()
        .metadata
        .uid
        .unwrap();
        let edited = parse(&WEB.replace("nginx:1.27", "nginx:1.28"))
            .unwrap()
            .metadata
            .uid
            .unwrap();
        let other_file = parse_manifest(
            WEB.as_bytes(),
            Path::new("/etc/kubernetes/manifests/web2.yaml"),
            NODE,
        )
        .unwrap()
        .metadata
        .uid
        .unwrap();
        let other_node = parse_manifest(WEB.as_bytes(), &file(), "node-2")
            .unwrap()
            .metadata
            .uid
            .unwrap();
        let explicit_uid = parse(&WEB.replace("  name: web\n", "  name: web\n  uid: 1234-abcd\n"))
            .unwrap()
            .metadata
            .uid
            .unwrap();

        // (case, uid, equal to base?)
        let cases = [
            ("same content parsed twice", &same_again, true),
            ("same pod as JSON", &reformatted, true),
            ("defaults written out", &explicit_defaults, true),
            ("edited image", &edited, false),
            ("different file path", &other_file, false),
            ("different node", &other_node, false),
        ];
        for (case, uid, equal) in cases {
            assert_eq!(uid == &base, equal, "{case}");
        }
        assert_eq!(explicit_uid, "1234-abcd", "a manifest's own uid is kept");
    }

    #[test]
    fn decode_errors() {
        // (manifest, expected message)
        let cases: &[(&str, &str)] = &[
            ("", "/etc/kubernetes/manifests/web.yaml: empty manifest: expected one Pod"),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\n",
                "/etc/kubernetes/manifests/web.yaml: expected exactly one YAML document, found 2: put each pod in its own file",
            ),
            (
                "- a\n- b\n",
                "/etc/kubernetes/manifests/web.yaml: manifest must be a YAML or JSON object, found a list",
            ),
            (
                "kind: Pod\nmetadata: {name: a}\n",
                "/etc/kubernetes/manifests/web.yaml: apiVersion: Required value",
            ),
            (
                "apiVersion: v1\nmetadata: {name: a}\n",
                "/etc/kubernetes/manifests/web.yaml: kind: Required value",
            ),
            (
                "apiVersion: apps/v1\nkind: Deployment\n",
                "/etc/kubernetes/manifests/web.yaml: apiVersion: Unsupported value: \"apps/v1\": supported values: \"v1\"",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    image: x\n    ports:\n    - containerPort: eighty\n",
                "/etc/kubernetes/manifests/web.yaml: spec.containers[0].ports[0].containerPort: invalid type: string \"eighty\", expected i32",
            ),
        ];
        for (src, want) in cases {
            let errs = errors(src);
            assert!(errs.iter().any(|e| e == want), "{src:?}: got {errs:?}");
        }
        let errs = errors("apiVersion: v1\nkind: Pod\nmetadata: {name: [unclosed\n");
        assert!(
            errs[0].starts_with("/etc/kubernetes/manifests/web.yaml: invalid YAML: "),
            "{errs:?}"
        );
        let errs = errors("{\"apiVersion\": \"v1\",");
        assert!(
            errs[0].starts_with("/etc/kubernetes/manifests/web.yaml: invalid JSON: "),
            "{errs:?}"
        );
    }

    #[test]
    fn trailing_document_separator_is_fine() {
        let pod = parse(&format!("---\n{WEB}---\n")).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("web-node-1"));
    }

    #[test]
    fn too_large_manifest_is_rejected() {
        let big = vec![b' '; MAX_MANIFEST_BYTES + 1];
        let errs = parse_manifest(&big, &file(), NODE).unwrap_err();
        assert_eq!(
            errs[0].reason,
            format!("manifest is larger than {MAX_MANIFEST_BYTES} bytes")
        );
    }

    #[test]
    fn validation_errors_name_the_file_and_field() {
        let errs = errors(&WEB.replace("    image: nginx:1.27\n", ""));
        assert_eq!(
            errs,
            vec!["/etc/kubernetes/manifests/web.yaml: spec.containers[0].image: Required value"]
        );
        let errs = errors(&WEB.replace("  name: web\n", ""));
        assert_eq!(
            errs,
            vec!["/etc/kubernetes/manifests/web.yaml: metadata.name: Required value: name or generateName is required"]
        );
    }

    #[test]
    fn unknown_fields_are_reported_with_rejections_and_returned_otherwise() {
        let typo = WEB.replace("    image: nginx:1.27\n", "    imagee: nginx:1.27\n");
        let errs = errors(&typo);
        assert_eq!(
            errs,
            vec![
                "/etc/kubernetes/manifests/web.yaml: spec.containers[0].image: Required value",
                "/etc/kubernetes/manifests/web.yaml: spec.containers[0].imagee: unknown field (ignored)",
            ]
        );
        let extra = WEB.replace("  labels:\n", "  colour: blue\n  labels:\n");
        let parsed = decode_manifest(extra.as_bytes(), &file(), NODE).unwrap();
        assert_eq!(parsed.unknown_fields, vec!["metadata.colour".to_string()]);
        let clean = decode_manifest(WEB.as_bytes(), &file(), NODE).unwrap();
        assert!(
            clean.unknown_fields.is_empty(),
            "{:?}",
            clean.unknown_fields
        );
    }

    #[test]
    fn static_pods_may_not_reference_api_objects() {
        let src = r#"
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  serviceAccountName: builder
  containers:
  - name: c
    image: busybox:1.36
    env:
    - name: TOKEN
      valueFrom:
        secretKeyRef: {name: creds, key: token}
    volumeMounts:
    - {name: conf, mountPath: /etc/conf}
  volumes:
  - name: conf
    configMap: {name: web-conf}
  - name: data
    persistentVolumeClaim: {claimName: data}
"#;
        let errs = errors(src);
        let want = [
            "spec.serviceAccountName: Forbidden: static pods may not reference serviceaccounts",
            "spec.containers[0].env[0].valueFrom.secretKeyRef: Forbidden: static pods may not reference secrets",
            "spec.volumes[0].configMap: Forbidden: static pods may not reference configmaps (via configmap volumes)",
            "spec.volumes[1].persistentVolumeClaim: Forbidden: static pods may not reference persistentvolumeclaims",
        ];
        for w in want {
            assert!(
                errs.iter()
                    .any(|e| e == &format!("/etc/kubernetes/manifests/web.yaml: {w}")),
                "missing {w:?} in {errs:?}"
            );
        }
    }

    #[test]
    fn existing_no_execute_toleration_is_not_duplicated() {
        let src = WEB.replace(
            "spec:\n",
            "spec:\n  tolerations:\n  - {operator: Exists, effect: NoExecute, tolerationSeconds: 10}\n  - {key: gpu, operator: Exists}\n",
        );
        let pod = parse(&src).unwrap();
        let tolerations = pod.spec.unwrap().tolerations.unwrap();
        assert_eq!(tolerations.len(), 2);
        assert_eq!(
            tolerations[0].toleration_seconds, None,
            "the kubelet's toleration replaces the match"
        );
        assert_eq!(tolerations[1].key.as_deref(), Some("gpu"));
    }

    #[test]
    fn first_seen_marks_creation_time_and_annotation() {
        let mut pod = parse(WEB).unwrap();
        let uid_before = pod.metadata.uid.clone();
        let seen: Timestamp = "2026-03-01T10:20:30.5Z".parse().unwrap();
        mark_first_seen(&mut pod, seen);
        assert_eq!(first_seen(&pod), Some(seen));
        assert_eq!(
            pod.metadata
                .annotations
                .as_ref()
                .unwrap()
                .get(CONFIG_SEEN_ANNOTATION)
                .map(String::as_str),
            Some("2026-03-01T10:20:30.5Z")
        );
        assert_eq!(pod.metadata.uid, uid_before);
    }
}

#[cfg(test)]
mod seed_tests {
    use super::*;

    /// The seed's `ml-worker` pod, as written there (`onExit.exitCodes`), is accepted.
    #[test]
    fn the_seeds_ml_worker_parses() {
        let yaml = r#"
apiVersion: v1
kind: Pod
metadata:
  name: ml-worker
spec:
  restartPolicy: Never
  initContainers:
  - name: setup-environment
    image: registry.k8s.io/busybox:1.27.2
    command: ['sh', '-c', 'echo "Setting up environment"']
  - name: watcher-sidecar
    image: registry.k8s.io/busybox:1.27.2
    command: ['sh', '-c', 'sleep 60; exit 88']
    restartPolicy: Always
    restartPolicyRules:
    - action: RestartAllContainers
      onExit:
        exitCodes:
          operator: In
          values: [88]
  containers:
  - name: main-application
    image: registry.k8s.io/busybox:1.27.2
    command: ['sh', '-c', 'echo "Application is running"; sleep 3600']
"#;
        let parsed = decode_manifest(yaml.as_bytes(), Path::new("ml-worker.yaml"), "n1")
            .unwrap_or_else(|e| panic!("{e:?}"));
        let rule = &parsed.pod.spec.unwrap().init_containers.unwrap()[1]
            .restart_policy_rules
            .clone()
            .unwrap()[0];
        assert_eq!(rule.action, "RestartAllContainers");
        assert_eq!(rule.exit_codes.as_ref().unwrap().values, Some(vec![88]));
        assert!(
            parsed.unknown_fields.is_empty(),
            "{:?}",
            parsed.unknown_fields
        );
    }
}
