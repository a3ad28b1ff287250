//! What the API server does to pods besides storing them: defaulting (`pkg/apis/core/v1/defaults.go`),
//! the admission plugins every cluster runs that change pods (Priority, DefaultTolerationSeconds),
//! create-time status (phase Pending, QoS class), and the validation that matters to a node agent.
//!
//! The ServiceAccount admission plugin is in [`crate::serviceaccount`] (it needs the store).

use serde_json::{json, Map, Value};

use crate::error::FieldError;

const PRIORITY_CLASSES: &[(&str, i64)] = &[
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];

fn set_default(map: &mut Map<String, Value>, key: &str, value: Value) {
    match map.get(key) {
        None | Some(Value::Null) => {
            map.insert(key.to_string(), value);
        }
        Some(_) => {}
    }
}

fn object_mut<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> Option<&'a mut Map<String, Value>> {
    map.get_mut(key).and_then(Value::as_object_mut)
}

/// `imagePullPolicy` default: Always for `:latest` or untagged images, IfNotPresent otherwise.
pub fn default_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn default_probe(probe: &mut Map<String, Value>) {
    set_default(probe, "timeoutSeconds", json!(1));
    set_default(probe, "periodSeconds", json!(10));
    set_default(probe, "successThreshold", json!(1));
    set_default(probe, "failureThreshold", json!(3));
    if let Some(http) = object_mut(probe, "httpGet") {
        set_default(http, "path", json!("/"));
        set_default(http, "scheme", json!("HTTP"));
    }
    if let Some(grpc) = object_mut(probe, "grpc") {
        set_default(grpc, "service", json!(""));
    }
}

fn default_handler(handler: &mut Map<String, Value>) {
    if let Some(http) = object_mut(handler, "httpGet") {
        set_default(http, "path", json!("/"));
        set_default(http, "scheme", json!("HTTP"));
    }
}

fn default_container(c: &mut Map<String, Value>, host_network: bool) {
    let image = c
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !image.is_empty() {
        set_default(c, "imagePullPolicy", json!(default_pull_policy(&image)));
    }
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    if let Some(Value::Array(ports)) = c.get_mut("ports") {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(port, "protocol", json!("TCP"));
            if host_network {
                if let Some(cp) = port.get("containerPort").cloned() {
                    set_default(port, "hostPort", cp);
                }
            }
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = object_mut(c, probe) {
            default_probe(p);
        }
    }
    if let Some(lifecycle) = object_mut(c, "lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = object_mut(lifecycle, hook) {
                default_handler(h);
            }
        }
    }
    if let Some(Value::Array(env)) = c.get_mut("env") {
        for var in env.iter_mut().filter_map(Value::as_object_mut) {
            if let Some(field_ref) = var
                .get_mut("valueFrom")
                .and_then(Value::as_object_mut)
                .and_then(|vf| vf.get_mut("fieldRef"))
                .and_then(Value::as_object_mut)
            {
                set_default(field_ref, "apiVersion", json!("v1"));
            }
        }
    }
    // Requests default to limits for each resource that has a limit and no request.
    if let Some(resources) = object_mut(c, "resources") {
        if let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() {
            let requests = resources.entry("requests").or_insert_with(|| json!({}));
            if let Some(requests) = requests.as_object_mut() {
                for (name, quantity) in limits {
                    requests.entry(name).or_insert(quantity);
                }
            }
        }
    }
}

fn default_volume(v: &mut Map<String, Value>) {
    const SOURCES: &[&str] = &[
        "hostPath",
        "emptyDir",
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "gitRepo",
        "secret",
        "nfs",
        "iscsi",
        "glusterfs",
        "persistentVolumeClaim",
        "rbd",
        "flexVolume",
        "cinder",
        "cephfs",
        "flocker",
        "downwardAPI",
        "fc",
        "azureFile",
        "configMap",
        "vsphereVolume",
        "quobyte",
        "azureDisk",
        "photonPersistentDisk",
        "projected",
        "portworxVolume",
        "scaleIO",
        "storageos",
        "csi",
        "ephemeral",
        "image",
    ];
    if !SOURCES
        .iter()
        .any(|s| v.get(*s).is_some_and(|x| !x.is_null()))
    {
        v.insert("emptyDir".into(), json!({}));
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = object_mut(v, source) {
            set_default(s, "defaultMode", json!(420));
        }
    }
    // SetDefaults_ServiceAccountTokenProjection: one hour.
    if let Some(Value::Array(sources)) =
        object_mut(v, "projected").and_then(|p| p.get_mut("sources"))
    {
        for source in sources.iter_mut().filter_map(Value::as_object_mut) {
            if let Some(token) = object_mut(source, "serviceAccountToken") {
                set_default(token, "expirationSeconds", json!(3600));
            }
        }
    }
    if let Some(host_path) = object_mut(v, "hostPath") {
        set_default(host_path, "type", json!(""));
    }
}

/// Applies the API server's defaulting and admission mutations to a pod (create and update).
pub fn apply_defaults(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "enableServiceLinks", json!(true));
    let host_network = spec
        .get("hostNetwork")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        if let Some(Value::Array(containers)) = spec.get_mut(list) {
            for c in containers.iter_mut().filter_map(Value::as_object_mut) {
                default_container(c, host_network);
            }
        }
    }
    if let Some(Value::Array(volumes)) = spec.get_mut("volumes") {
        for v in volumes.iter_mut().filter_map(Value::as_object_mut) {
            default_volume(v);
        }
    }
    // Priority admission plugin.
    if spec.get("priority").is_none_or(Value::is_null) {
        let class = spec
            .get("priorityClassName")
            .and_then(Value::as_str)
            .unwrap_or("");
        let priority = PRIORITY_CLASSES
            .iter()
            .find(|(n, _)| *n == class)
            .map(|(_, p)| *p)
            .unwrap_or(0);
        spec.insert("priority".into(), json!(priority));
    }
    set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    // DefaultTolerationSeconds admission plugin.
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Value::Array(list) = tolerations {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let present = list.iter().any(|t| {
                let k = t.get("key").and_then(Value::as_str);
                let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
                let exists_all =
                    k.is_none() && t.get("operator").and_then(Value::as_str) == Some("Exists");
                exists_all || (k == Some(key) && (effect.is_empty() || effect == "NoExecute"))
            });
            if !present {
                list.push(json!({
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300
                }));
            }
        }
    }
}

/// Whether an unknown PriorityClass is named (the Priority admission plugin rejects the pod).
pub fn unknown_priority_class(pod: &Value) -> Option<String> {
    let class = pod
        .pointer("/spec/priorityClassName")
        .and_then(Value::as_str)?;
    if class.is_empty() || PRIORITY_CLASSES.iter().any(|(n, _)| *n == class) {
        None
    } else {
        Some(class.to_string())
    }
}

/// Parses a quantity to milli-units for comparisons (`100m`, `1`, `1Gi`, `500M`, `1e3`).
pub fn quantity_milli(q: &str) -> Option<i128> {
    let q = q.trim();
    const SUFFIXES: &[(&str, i128, i128)] = &[
        ("Ki", 1 << 10, 1),
        ("Mi", 1 << 20, 1),
        ("Gi", 1 << 30, 1),
        ("Ti", 1 << 40, 1),
        ("Pi", 1 << 50, 1),
        ("Ei", 1 << 60, 1),
        ("n", 1, 1_000_000_000),
        ("u", 1, 1_000_000),
        ("m", 1, 1_000),
        ("k", 1_000, 1),
        ("M", 1_000_000, 1),
        ("G", 1_000_000_000, 1),
        ("T", 1_000_000_000_000, 1),
        ("P", 1_000_000_000_000_000, 1),
        ("E", 1_000_000_000_000_000_000, 1),
    ];
    let (number, mul, div) = SUFFIXES
        .iter()
        .find_map(|(s, mul, div)| q.strip_suffix(s).map(|n| (n, *mul, *div)))
        .unwrap_or((q, 1, 1));
    let (mantissa, exp) = match number.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<u32>().ok()?),
        None => (number, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int_part}{frac_part}");
    let value: i128 = digits.parse().ok()?;
    let scale = 10i128.checked_pow(frac_part.len() as u32)?;
    let exp_mul = 10i128.checked_pow(exp)?;
    Some(value * exp_mul * mul * 1000 / (scale * div))
}

fn resource_map(c: &Value, which: &str) -> Map<String, Value> {
    c.pointer(&format!("/resources/{which}"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// The QoS class of a (defaulted) pod, as `qos.GetPodQOS` computes it from cpu and memory.
pub fn qos_class(pod: &Value) -> &'static str {
    let mut containers: Vec<&Value> = Vec::new();
    for list in ["initContainers", "containers"] {
        if let Some(Value::Array(cs)) = pod.pointer(&format!("/spec/{list}")) {
            containers.extend(cs.iter());
        }
    }
    let mut any_set = false;
    let mut guaranteed = true;
    let qty = |m: &Map<String, Value>, name: &str| {
        m.get(name).and_then(Value::as_str).and_then(quantity_milli)
    };
    for c in containers {
        let requests = resource_map(c, "requests");
        let limits = resource_map(c, "limits");
        for name in ["cpu", "memory"] {
            let request = qty(&requests, name);
            let limit = qty(&limits, name);
            if request.is_some_and(|r| r != 0) || limit.is_some_and(|l| l != 0) {
                any_set = true;
            }
            match (request, limit) {
                (Some(r), Some(l)) if r == l && l != 0 => {}
                (None, Some(l)) if l != 0 => {}
                _ => guaranteed = false,
            }
        }
    }
    if !any_set {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// The status the API server gives a new pod (`PrepareForCreate`), with the PodScheduled condition
/// for scheduling gates.
pub fn initial_status(pod: &Value, now: &str) -> Value {
    let mut status = json!({"phase": "Pending", "qosClass": qos_class(pod)});
    let gated = pod
        .pointer("/spec/schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty());
    if gated {
        status["conditions"] = json!([{
            "type": "PodScheduled",
            "status": "False",
            "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
            "lastProbeTime": null,
            "lastTransitionTime": now
        }]);
    }
    status
}

fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Create validation of the parts of a pod spec a node agent relies on.
pub fn validate_create(pod: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let containers = pod.pointer("/spec/containers").and_then(Value::as_array);
    match containers {
        None => errors.push(FieldError::required("spec.containers", "")),
        Some(list) if list.is_empty() => errors.push(FieldError::required("spec.containers", "")),
        Some(_) => {}
    }
    let mut names: Vec<String> = Vec::new();
    for list in ["initContainers", "containers"] {
        let Some(items) = pod
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
        else {
            continue;
        };
        for (i, c) in items.iter().enumerate() {
            let path = format!("spec.{list}[{i}]");
            match c.get("name").and_then(Value::as_str) {
                None | Some("") => errors.push(FieldError::required(format!("{path}.name"), "")),
                Some(name) => {
                    if !is_dns1123_label(name) {
                        errors.push(FieldError::invalid(
                            format!("{path}.name"),
                            &json!(name),
                            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                        ));
                    }
                    if names.iter().any(|n| n == name) {
                        errors.push(FieldError {
                            reason: "FieldValueDuplicate",
                            field: format!("{path}.name"),
                            message: format!("Duplicate value: {name:?}"),
                        });
                    }
                    names.push(name.to_string());
                }
            }
            if c.get("image")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                errors.push(FieldError::required(format!("{path}.image"), ""));
            }
        }
    }
    for (i, volume) in pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let sources = volume
            .pointer("/projected/sources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate();
        for (j, source) in sources {
            let Some(seconds) = source
                .pointer("/serviceAccountToken/expirationSeconds")
                .and_then(Value::as_i64)
            else {
                continue;
            };
            let field = format!(
                "spec.volumes[{i}].projected.sources[{j}].serviceAccountToken.expirationSeconds"
            );
            if seconds < 600 {
                errors.push(FieldError::invalid(
                    field,
                    &json!(seconds),
                    "may not specify a duration less than 10 minutes",
                ));
            } else if seconds > 1 << 32 {
                errors.push(FieldError::invalid(
                    field,
                    &json!(seconds),
                    "may not specify a duration larger than 2^32 seconds",
                ));
            }
        }
    }
    if let Some(policy) = pod.pointer("/spec/restartPolicy").and_then(Value::as_str) {
        if !["Always", "OnFailure", "Never"].contains(&policy) {
            errors.push(FieldError {
                reason: "FieldValueNotSupported",
                field: "spec.restartPolicy".into(),
                message: format!("Unsupported value: {policy:?}: supported values: \"Always\", \"OnFailure\", \"Never\""),
            });
        }
    }
    errors
}

/// Fields of a pod spec that an update may change, cleared for comparison.
fn mutable_spec_parts_removed(spec: &Value) -> Value {
    let mut spec = spec.clone();
    if let Some(map) = spec.as_object_mut() {
        map.remove("activeDeadlineSeconds");
        map.remove("tolerations");
        map.remove("schedulingGates");
        for list in ["containers", "initContainers"] {
            if let Some(Value::Array(items)) = map.get_mut(list) {
                for c in items.iter_mut().filter_map(Value::as_object_mut) {
                    c.remove("image");
                }
            }
        }
    }
    spec
}

/// `ValidatePodUpdate`: only images, activeDeadlineSeconds, tolerations (additions) and scheduling
/// gates (removals) may change. `spec.nodeName` is set through binding, never by update.
pub fn validate_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let new_spec = new.get("spec").cloned().unwrap_or(Value::Null);
    let old_spec = old.get("spec").cloned().unwrap_or(Value::Null);
    for list in ["containers", "initContainers"] {
        let len = |s: &Value| s.get(list).and_then(Value::as_array).map_or(0, Vec::len);
        if len(&new_spec) != len(&old_spec) {
            errors.push(FieldError::forbidden(
                format!("spec.{list}"),
                "pod updates may not add or remove containers",
            ));
            return errors;
        }
    }
    if mutable_spec_parts_removed(&new_spec) != mutable_spec_parts_removed(&old_spec) {
        errors.push(FieldError::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
    errors
}

/// Fields an ephemeral container may not set (`validateEphemeralContainers`): the API server
/// answers `Forbidden: cannot be set for an Ephemeral Container`.
const EPHEMERAL_FORBIDDEN: &[&str] = &[
    "lifecycle",
    "livenessProbe",
    "ports",
    "readinessProbe",
    "resizePolicy",
    "resources",
    "restartPolicy",
    "startupProbe",
];

/// The `ephemeralcontainers` subresource's update (`ephemeralContainersStrategy` and
/// `ValidatePodEphemeralContainersUpdate`): of the requested pod only
/// `spec.ephemeralContainers` is taken (defaulted as at creation), everything else stays the
/// stored pod's. Existing ephemeral containers may be neither changed nor removed; new ones
/// need a name unique across all containers of the pod and an image, may not set what an
/// ephemeral container cannot have, and a `targetContainerName` must name a container of the
/// pod.
pub fn update_ephemeral_containers(
    old: &Value,
    requested: &Value,
) -> Result<Value, Vec<FieldError>> {
    let host_network = old
        .pointer("/spec/hostNetwork")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut list: Vec<Value> = requested
        .pointer("/spec/ephemeralContainers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for c in list.iter_mut().filter_map(Value::as_object_mut) {
        default_container(c, host_network);
    }
    let old_list: Vec<Value> = old
        .pointer("/spec/ephemeralContainers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let name_of = |c: &Value| {
        c.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let mut errors = Vec::new();
    for o in &old_list {
        let name = name_of(o);
        match list.iter().position(|n| name_of(n) == name) {
            None => errors.push(FieldError::forbidden(
                "spec.ephemeralContainers",
                &format!("existing ephemeral containers {name:?} may not be removed"),
            )),
            Some(i) if list[i] != *o => errors.push(FieldError::forbidden(
                format!("spec.ephemeralContainers[{i}]"),
                &format!("existing ephemeral containers {name:?} may not be changed"),
            )),
            Some(_) => {}
        }
    }
    let mut names: Vec<String> = ["initContainers", "containers"]
        .iter()
        .flat_map(|l| {
            old.pointer(&format!("/spec/{l}"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .map(|c| name_of(&c))
        .collect();
    let regular = names.clone();
    for (i, c) in list.iter().enumerate() {
        let path = format!("spec.ephemeralContainers[{i}]");
        let name = name_of(c);
        if name.is_empty() {
            errors.push(FieldError::required(format!("{path}.name"), ""));
        } else if names.contains(&name) {
            errors.push(FieldError {
                reason: "FieldValueDuplicate",
                field: format!("{path}.name"),
                message: format!("Duplicate value: {name:?}"),
            });
        } else {
            if !is_dns1123_label(&name) {
                errors.push(FieldError::invalid(
                    format!("{path}.name"),
                    &json!(name),
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                ));
            }
            names.push(name.clone());
        }
        if old_list.iter().any(|o| name_of(o) == name) {
            continue;
        }
        if c.get("image")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            errors.push(FieldError::required(format!("{path}.image"), ""));
        }
        for field in EPHEMERAL_FORBIDDEN {
            // Go's zero value passes (`resources: {}`, as kubectl sends it).
            let set = c.get(*field).is_some_and(|v| match v {
                Value::Null => false,
                Value::Object(m) => !m.is_empty(),
                Value::Array(a) => !a.is_empty(),
                _ => true,
            });
            if set {
                errors.push(FieldError::forbidden(
                    format!("{path}.{field}"),
                    "cannot be set for an Ephemeral Container",
                ));
            }
        }
        if let Some(target) = c.get("targetContainerName").and_then(Value::as_str) {
            if !target.is_empty() && !regular.iter().any(|n| n == target) {
                errors.push(FieldError {
                    reason: "FieldValueNotFound",
                    field: format!("{path}.targetContainerName"),
                    message: format!("Not found: {target:?}"),
                });
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut new = old.clone();
    if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
        if list.is_empty() {
            spec.remove("ephemeralContainers");
        } else {
            spec.insert("ephemeralContainers".into(), Value::Array(list));
        }
    }
    Ok(new)
}

/// A write of the `resize` subresource (`kubectl patch --subresource resize`): only the
/// containers' `resources` and `resizePolicy` are taken from `proposed`; anything else of the
/// spec that differs is refused, as the API server's `ValidatePodResize` does. Returns the pod
/// to store (its generation bumped when the resources changed).
pub fn apply_resize(old: &Value, proposed: &Value) -> Result<Value, Vec<FieldError>> {
    let strip = |pod: &Value| {
        let mut spec = pod.get("spec").cloned().unwrap_or(Value::Null);
        for list in ["containers", "initContainers"] {
            if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
                for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                    c.remove("resources");
                    c.remove("resizePolicy");
                }
            }
        }
        spec
    };
    if strip(old) != strip(proposed) {
        return Err(vec![FieldError::forbidden(
            "spec",
            "only cpu and memory resources are mutable",
        )]);
    }
    let mut new = old.clone();
    for list in ["containers", "initContainers"] {
        let Some(cs) = new
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for (i, c) in cs.iter_mut().enumerate() {
            let Some(c) = c.as_object_mut() else { continue };
            for field in ["resources", "resizePolicy"] {
                match proposed.pointer(&format!("/spec/{list}/{i}/{field}")) {
                    Some(v) => c.insert(field.into(), v.clone()),
                    None => c.remove(field),
                };
            }
        }
    }
    if new.get("spec") != old.get("spec") {
        let g = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("generation".into(), json!(g + 1));
        }
    }
    Ok(new)
}

/// `ValidatePodStatusUpdate`'s container-state rule: unless the restart policy allows it, a
/// terminated container may not be reported as running or waiting again.
pub fn validate_status_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let policy = old
        .pointer("/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Always");
    if policy == "Always" {
        return errors;
    }
    for list in ["containerStatuses", "initContainerStatuses"] {
        let old_statuses = old
            .pointer(&format!("/status/{list}"))
            .and_then(Value::as_array);
        let new_statuses = new
            .pointer(&format!("/status/{list}"))
            .and_then(Value::as_array);
        let (Some(old_statuses), Some(new_statuses)) = (old_statuses, new_statuses) else {
            continue;
        };
        for (i, old_status) in old_statuses.iter().enumerate() {
            let Some(terminated) = old_status.pointer("/state/terminated") else {
                continue;
            };
            let exit_code = terminated
                .get("exitCode")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if exit_code != 0 && policy == "OnFailure" {
                continue;
            }
            let name = old_status.get("name");
            let regressed = new_statuses
                .iter()
                .any(|n| n.get("name") == name && n.pointer("/state/terminated").is_none());
            if regressed {
                errors.push(FieldError::forbidden(
                    format!("status.{list}[{i}].state"),
                    "may not be transitioned to non-terminated state",
                ));
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_defaults() {
        let cases = [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            ("localhost:5000/app", "Always"),
            ("localhost:5000/app:v1", "IfNotPresent"),
            ("nginx@sha256:abcd", "IfNotPresent"),
        ];
        for (image, want) in cases {
            assert_eq!(default_pull_policy(image), want, "{image}");
        }
    }

    #[test]
    fn defaults_like_the_api_server() {
        let mut pod = json!({
            "metadata": {"name": "web"},
            "spec": {
                "containers": [{
                    "name": "app",
                    "image": "nginx:1.27",
                    "ports": [{"containerPort": 80}],
                    "resources": {"limits": {"cpu": "500m"}},
                    "livenessProbe": {"httpGet": {"port": 80}},
                    "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
                }],
                "volumes": [
                    {"name": "scratch"},
                    {"name": "cfg", "configMap": {"name": "c"}},
                    {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}
                ]
            }
        });
        apply_defaults(&mut pod);
        let cases: &[(&str, Value)] = &[
            ("/spec/restartPolicy", json!("Always")),
            ("/spec/dnsPolicy", json!("ClusterFirst")),
            ("/spec/terminationGracePeriodSeconds", json!(30)),
            ("/spec/schedulerName", json!("default-scheduler")),
            ("/spec/securityContext", json!({})),
            ("/spec/enableServiceLinks", json!(true)),
            ("/spec/priority", json!(0)),
            ("/spec/preemptionPolicy", json!("PreemptLowerPriority")),
            ("/spec/containers/0/imagePullPolicy", json!("IfNotPresent")),
            (
                "/spec/containers/0/terminationMessagePath",
                json!("/dev/termination-log"),
            ),
            ("/spec/containers/0/terminationMessagePolicy", json!("File")),
            ("/spec/containers/0/ports/0/protocol", json!("TCP")),
            ("/spec/containers/0/resources/requests/cpu", json!("500m")),
            ("/spec/containers/0/livenessProbe/timeoutSeconds", json!(1)),
            ("/spec/containers/0/livenessProbe/periodSeconds", json!(10)),
            (
                "/spec/containers/0/livenessProbe/successThreshold",
                json!(1),
            ),
            (
                "/spec/containers/0/livenessProbe/failureThreshold",
                json!(3),
            ),
            ("/spec/containers/0/livenessProbe/httpGet/path", json!("/")),
            (
                "/spec/containers/0/livenessProbe/httpGet/scheme",
                json!("HTTP"),
            ),
            (
                "/spec/containers/0/env/0/valueFrom/fieldRef/apiVersion",
                json!("v1"),
            ),
            ("/spec/volumes/0/emptyDir", json!({})),
            ("/spec/volumes/1/configMap/defaultMode", json!(420)),
            ("/spec/volumes/2/projected/defaultMode", json!(420)),
            (
                "/spec/volumes/2/projected/sources/0/serviceAccountToken/expirationSeconds",
                json!(3600),
            ),
            (
                "/spec/tolerations/0/key",
                json!("node.kubernetes.io/not-ready"),
            ),
            (
                "/spec/tolerations/1/key",
                json!("node.kubernetes.io/unreachable"),
            ),
            ("/spec/tolerations/1/tolerationSeconds", json!(300)),
        ];
        for (pointer, want) in cases {
            assert_eq!(pod.pointer(pointer), Some(want), "{pointer}");
        }
        // Defaulting twice changes nothing (updates re-default).
        let again = {
            let mut p = pod.clone();
            apply_defaults(&mut p);
            p
        };
        assert_eq!(again, pod);
    }

    #[test]
    fn explicit_values_are_kept() {
        let mut pod = json!({"spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "a", "image": "busybox", "imagePullPolicy": "Never"}]
        }});
        apply_defaults(&mut pod);
        assert_eq!(pod["spec"]["restartPolicy"], "Never");
        assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 5);
        assert_eq!(pod["spec"]["priority"], 2_000_001_000);
        assert_eq!(pod["spec"]["tolerations"], json!([{"operator": "Exists"}]));
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Never");
        assert_eq!(unknown_priority_class(&pod), None);
        assert_eq!(
            unknown_priority_class(&json!({"spec": {"priorityClassName": "gold"}})),
            Some("gold".into())
        );
    }

    #[test]
    fn quantities() {
        let cases = [
            ("100m", Some(100)),
            ("1", Some(1000)),
            ("0.5", Some(500)),
            ("1Ki", Some(1_024_000)),
            ("1Gi", Some(1_073_741_824_000)),
            ("1G", Some(1_000_000_000_000)),
            ("1e3", Some(1_000_000)),
            ("x", None),
        ];
        for (q, want) in cases {
            assert_eq!(quantity_milli(q), want, "{q}");
        }
    }

    #[test]
    fn qos_classes() {
        let with = |resources: Value| json!({"spec": {"containers": [{"name": "a", "resources": resources}]}});
        let cases = [
            (with(json!({})), "BestEffort"),
            (with(json!({"requests": {"cpu": "100m"}})), "Burstable"),
            (
                with(json!({"limits": {"cpu": "1", "memory": "1Gi"}})),
                "Guaranteed",
            ),
            (
                with(
                    json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1000m", "memory": "1Gi"}}),
                ),
                "Guaranteed",
            ),
            (
                with(
                    json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "1Gi"}}),
                ),
                "Burstable",
            ),
            (with(json!({"limits": {"cpu": "1"}})), "Burstable"),
        ];
        for (pod, want) in cases {
            assert_eq!(qos_class(&pod), want, "{pod}");
        }
    }

    #[test]
    fn create_validation() {
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (json!({"spec": {"containers": [{"name": "a", "image": "x"}]}}), vec![]),
            (json!({"spec": {}}), vec!["spec.containers: Required value"]),
            (
                json!({"spec": {"containers": [{"name": "a"}, {"image": "x"}]}}),
                vec!["spec.containers[0].image: Required value", "spec.containers[1].name: Required value"],
            ),
            (
                json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]}}),
                vec!["spec.containers[1].name: Duplicate value: \"a\""],
            ),
            (
                json!({"spec": {"restartPolicy": "Sometimes", "containers": [{"name": "a", "image": "x"}]}}),
                vec!["spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""],
            ),
            (
                json!({"spec": {"containers": [{"name": "a", "image": "x"}], "volumes": [
                    {"name": "ok", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "expirationSeconds": 600}}]}},
                    {"name": "short", "projected": {"sources": [{"configMap": {"name": "c"}}, {"serviceAccountToken": {"path": "t", "expirationSeconds": 599}}]}},
                    {"name": "long", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "expirationSeconds": 4294967297_i64}}]}},
                ]}}),
                vec![
                    "spec.volumes[1].projected.sources[1].serviceAccountToken.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes",
                    "spec.volumes[2].projected.sources[0].serviceAccountToken.expirationSeconds: Invalid value: 4294967297: may not specify a duration larger than 2^32 seconds",
                ],
            ),
        ];
        for (pod, want) in cases {
            let got: Vec<String> = validate_create(&pod)
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect();
            assert_eq!(got, want, "{pod}");
        }
    }

    #[test]
    fn update_validation() {
        let old =
            json!({"spec": {"nodeName": "n1", "containers": [{"name": "a", "image": "x:1"}]}});
        let cases = [
            (
                json!({"spec": {"nodeName": "n1", "containers": [{"name": "a", "image": "x:2"}]}}),
                0,
            ),
            (
                json!({"spec": {"nodeName": "n1", "activeDeadlineSeconds": 5, "containers": [{"name": "a", "image": "x:1"}]}}),
                0,
            ),
            (
                json!({"spec": {"nodeName": "n2", "containers": [{"name": "a", "image": "x:1"}]}}),
                1,
            ),
            (json!({"spec": {"nodeName": "n1", "containers": []}}), 1),
            (
                json!({"spec": {"nodeName": "n1", "containers": [{"name": "a", "image": "x:1", "args": ["y"]}]}}),
                1,
            ),
        ];
        for (new, want) in cases {
            assert_eq!(validate_update(&new, &old).len(), want, "{new}");
        }
    }

    #[test]
    fn ephemeral_container_updates() {
        let old = json!({"spec": {"containers": [{"name": "main", "image": "x"}],
            "ephemeralContainers": [{"name": "d1", "image": "b"}]}});
        // As stored: defaulted when it was added.
        let mut defaulted = old.clone();
        for c in defaulted["spec"]["ephemeralContainers"]
            .as_array_mut()
            .unwrap()
        {
            default_container(c.as_object_mut().unwrap(), false);
        }
        assert_eq!(
            update_ephemeral_containers(&defaulted, &defaulted),
            Ok(defaulted.clone())
        );
        let with = |extra: Value| {
            let mut p = defaulted.clone();
            p["spec"]["ephemeralContainers"]
                .as_array_mut()
                .unwrap()
                .push(extra);
            p
        };
        let errors_of = |requested: &Value| -> Vec<String> {
            match update_ephemeral_containers(&defaulted, requested) {
                Ok(_) => vec![],
                Err(e) => e
                    .iter()
                    .map(|e| format!("{}: {}", e.field, e.message))
                    .collect(),
            }
        };
        // an addition, with its defaults, and nothing else taken from the request
        let mut added =
            with(json!({"name": "d2", "image": "b", "targetContainerName": "main", "stdin": true}));
        added["spec"]["containers"][0]["image"] = json!("changed");
        let new = update_ephemeral_containers(&defaulted, &added).unwrap();
        assert_eq!(new["spec"]["containers"][0]["image"], "x");
        assert_eq!(
            new["spec"]["ephemeralContainers"][1]["terminationMessagePath"],
            "/dev/termination-log"
        );
        assert_eq!(
            new["spec"]["ephemeralContainers"][1]["targetContainerName"],
            "main"
        );
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (json!({"spec": {}}), vec!["spec.ephemeralContainers: Forbidden: existing ephemeral containers \"d1\" may not be removed"]),
            (
                {
                    let mut p = defaulted.clone();
                    p["spec"]["ephemeralContainers"][0]["image"] = json!("other");
                    p
                },
                vec!["spec.ephemeralContainers[0]: Forbidden: existing ephemeral containers \"d1\" may not be changed"],
            ),
            (with(json!({"name": "main", "image": "b"})), vec!["spec.ephemeralContainers[1].name: Duplicate value: \"main\""]),
            (with(json!({"name": "d2"})), vec!["spec.ephemeralContainers[1].image: Required value"]),
            (with(json!({"name": "d2", "image": "b", "resources": {}})), vec![]),
            (
                with(json!({"name": "d2", "image": "b", "ports": [{"containerPort": 80}], "readinessProbe": {}})),
                vec![
                    "spec.ephemeralContainers[1].ports: Forbidden: cannot be set for an Ephemeral Container",
                    "spec.ephemeralContainers[1].readinessProbe: Forbidden: cannot be set for an Ephemeral Container",
                ],
            ),
            (with(json!({"name": "d2", "image": "b", "targetContainerName": "nope"})), vec!["spec.ephemeralContainers[1].targetContainerName: Not found: \"nope\""]),
        ];
        for (requested, want) in cases {
            let got = errors_of(&requested);
            let got: Vec<&str> = got.iter().map(String::as_str).collect();
            assert_eq!(got, want, "{requested}");
        }
    }

    #[test]
    fn status_update_validation() {
        let pod = |policy: &str, state: Value| json!({"spec": {"restartPolicy": policy}, "status": {"containerStatuses": [{"name": "a", "state": state}]}});
        let done = json!({"terminated": {"exitCode": 0}});
        let failed = json!({"terminated": {"exitCode": 1}});
        let running = json!({"running": {}});
        let cases = [
            ("Never", &done, &running, 1),
            ("Never", &failed, &running, 1),
            ("OnFailure", &failed, &running, 0),
            ("OnFailure", &done, &running, 1),
            ("Always", &done, &running, 0),
            ("Never", &running, &done, 0),
        ];
        for (policy, old_state, new_state, want) in cases {
            let errors = validate_status_update(
                &pod(policy, new_state.clone()),
                &pod(policy, old_state.clone()),
            );
            assert_eq!(errors.len(), want, "{policy} {old_state} -> {new_state}");
        }
    }
}

#[cfg(test)]
mod resize_tests {
    use super::*;

    #[test]
    fn resize_takes_only_resources_and_bumps_the_generation() {
        let old = json!({"metadata": {"name": "p", "generation": 1}, "spec": {"containers": [
            {"name": "c", "image": "busybox", "resources": {"limits": {"cpu": "200m"}}}
        ]}});
        let mut ok = old.clone();
        ok["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "500m"}});
        let new = apply_resize(&old, &ok).unwrap();
        assert_eq!(
            new["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "500m"
        );
        assert_eq!(new["metadata"]["generation"], 2);
        // The same resources: nothing changes, the generation stays.
        assert_eq!(apply_resize(&old, &old).unwrap(), old);
        let mut image = ok.clone();
        image["spec"]["containers"][0]["image"] = json!("nginx");
        let errors = apply_resize(&old, &image).unwrap_err();
        assert_eq!(errors[0].field, "spec");
    }
}
