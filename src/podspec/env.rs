//! A container's environment (`makeEnvironmentVariables` in `pkg/kubelet/kubelet_pods.go`):
//! `envFrom` ConfigMaps and Secrets, literal values with `$(VAR)` expansion, the Downward API
//! (`fieldRef`, `resourceFieldRef`), ConfigMap and Secret keys, keys of environment files in
//! emptyDir volumes (`fileKeyRef`, parsed by [`super::env_file`]), and the `$(VAR)` expansion
//! itself (`third_party/forked/golang/expansion`).
//!
//! The environment is a pure function of the pod, the container and the objects read for it
//! ([`FetchedObjects`], gathered by `sync::env_objects::gather_env_objects`). Without an API
//! server (standalone nodelet) every ConfigMap or Secret reference fails the way the kubelet
//! fails without a client. In cluster mode the service variables of
//! [`super::service_env`] (service links) are added, and literal values can refer to them.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, FileKeySelector, ObjectFieldSelector, Pod, ResourceFieldSelector,
};

use super::env_file::{parse_env, EnvFileError};
use super::error::{container_field_path, ConfigError};
use super::field::env_var_name;
use super::references::{FetchedObjects, ObjectKind, References};
use super::regular_containers;
use super::resources::{
    container_limits, container_requests, downward_api_limits, NodeAllocatable,
};
use super::service_env::service_env;
use crate::quantity::Quantity;

/// What the environment needs besides the pod: addresses and the node's allocatable resources
/// (with the pod-level limits, the fallback for `limits.*` of a container without limits:
/// [`downward_api_limits`]).
#[derive(Debug, Clone, Copy)]
pub struct EnvContext<'a> {
    /// The pod's IPs, primary first (the host's IPs for host-network pods).
    pub pod_ips: &'a [String],
    /// The node's IPs, primary first.
    pub host_ips: &'a [String],
    /// The node's name, used for `spec.nodeName` when the pod does not carry it.
    pub node_name: &'a str,
    /// The Node's `status.allocatable`, as nodelet publishes it.
    pub node_allocatable: NodeAllocatable,
}

/// Expands `$(VAR)` references in `input` with `env`.
///
/// `$$` is an escaped `$`; a reference to an unknown variable, an unterminated `$(`, and a `$`
/// before anything else are left as written. Unlike the Go original, which copies the byte
/// after a lone `$` as if it were a whole character, a multi-byte character there stays intact.
pub fn expand(input: &str, env: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        match after.chars().next() {
            None => {
                out.push('$');
                rest = after;
            }
            Some('$') => {
                out.push('$');
                rest = &after[1..];
            }
            Some('(') => match after[1..].find(')') {
                Some(close) => {
                    let name = &after[1..1 + close];
                    match env(name) {
                        Some(value) => out.push_str(&value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &after[close + 2..];
                }
                None => {
                    out.push_str("$(");
                    rest = &after[1..];
                }
            },
            Some(c) => {
                out.push('$');
                out.push(c);
                rest = &after[c.len_utf8()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Expands `input` against an ordered environment (later entries win, as a map would).
pub fn expand_with(input: &str, envs: &[(String, String)]) -> String {
    expand(input, &|name: &str| {
        envs.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    })
}

/// Sets `name` in an ordered environment: a redefinition keeps the first position and takes
/// the new value, as the kubelet's map does.
fn set(envs: &mut Vec<(String, String)>, name: &str, value: String) {
    match envs.iter_mut().find(|(k, _)| k == name) {
        Some(entry) => entry.1 = value,
        None => envs.push((name.to_string(), value)),
    }
}

/// The ConfigMaps and Secrets the container's `env` and `envFrom` refer to.
pub fn env_references(container: &Container) -> References {
    let mut refs = References::default();
    for from in container.env_from.iter().flatten() {
        if let Some(r) = &from.config_map_ref {
            refs.config_maps.insert(r.name.clone());
        }
        if let Some(r) = &from.secret_ref {
            refs.secrets.insert(r.name.clone());
        }
    }
    for var in container.env.iter().flatten() {
        if let Some(from) = &var.value_from {
            if let Some(r) = &from.config_map_key_ref {
                refs.config_maps.insert(r.name.clone());
            }
            if let Some(r) = &from.secret_key_ref {
                refs.secrets.insert(r.name.clone());
            }
        }
    }
    refs
}

/// One `envFrom` source read: the object's entries, `None` when an optional object is absent.
fn env_from_entries(
    objects: &FetchedObjects,
    kind: ObjectKind,
    name: &str,
    optional: bool,
    field: &str,
) -> Result<Option<Vec<(String, String)>>, ConfigError> {
    let entries = match kind {
        ObjectKind::ConfigMap => objects.config_map(name).map(|cm| {
            cm.map(|cm| {
                cm.data
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<Vec<_>>()
            })
        }),
        ObjectKind::Secret => objects.secret(name).map(|s| {
            s.map(|s| {
                s.data
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
                    .collect::<Vec<_>>()
            })
        }),
    };
    match entries {
        Ok(Some(entries)) => Ok(Some(entries)),
        Ok(None) if optional => Ok(None),
        Ok(None) => Err(ConfigError::ObjectNotFound {
            field: field.to_string(),
            kind,
            name: name.to_string(),
        }),
        Err(message) => Err(ConfigError::ObjectUnavailable {
            field: field.to_string(),
            message,
        }),
    }
}

/// The `envFrom` sources of the container as `(field, kind, name, prefix, optional)`.
fn env_from_sources<'a>(
    container: &'a Container,
    base: &str,
) -> Vec<(String, ObjectKind, &'a str, &'a str, bool)> {
    let mut out = Vec::new();
    for (i, from) in container.env_from.iter().flatten().enumerate() {
        let prefix = from.prefix.as_deref().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            out.push((
                format!("{base}.envFrom[{i}].configMapRef"),
                ObjectKind::ConfigMap,
                r.name.as_str(),
                prefix,
                r.optional == Some(true),
            ));
        } else if let Some(r) = &from.secret_ref {
            out.push((
                format!("{base}.envFrom[{i}].secretRef"),
                ObjectKind::Secret,
                r.name.as_str(),
                prefix,
                r.optional == Some(true),
            ));
        }
    }
    out
}

/// `envFrom` keys that cannot be environment variable names, for the kubelet's
/// `InvalidEnvironmentVariableNames` warning event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidEnvFromKeys {
    pub kind: ObjectKind,
    pub namespace: String,
    pub name: String,
    /// With the prefix, sorted.
    pub keys: Vec<String>,
}

impl InvalidEnvFromKeys {
    /// The event reason.
    pub const REASON: &'static str = "InvalidEnvironmentVariableNames";

    /// The event message, word for word the kubelet's.
    pub fn message(&self) -> String {
        let kind = match self.kind {
            ObjectKind::ConfigMap => "configMap",
            ObjectKind::Secret => "secret",
        };
        format!(
            "Keys [{}] from the EnvFrom {kind} {}/{} were skipped since they are considered invalid environment variable names.",
            self.keys.join(", "),
            self.namespace,
            self.name
        )
    }
}

/// Whether an `envFrom` key (with its prefix) can be a variable name. Since
/// `RelaxedEnvironmentVariableValidation` every printable ASCII name without `=` can, which
/// every valid ConfigMap or Secret key with a valid prefix is; only objects the API server
/// would not have stored fail this.
fn usable_env_name(name: &str) -> bool {
    env_var_name(name).is_empty()
}

/// The `envFrom` keys [`make_environment`] skips, per source, for the warning events the
/// executor records when it starts the container. Sources that cannot be read are left out
/// (their error fails the container instead).
pub fn invalid_env_from_keys(
    pod: &Pod,
    container: &Container,
    objects: &FetchedObjects,
) -> Vec<InvalidEnvFromKeys> {
    let base = container_field_path(pod, &container.name);
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut out = Vec::new();
    for (field, kind, name, prefix, optional) in env_from_sources(container, &base) {
        let Ok(Some(entries)) = env_from_entries(objects, kind, name, optional, &field) else {
            continue;
        };
        let mut keys: Vec<String> = entries
            .into_iter()
            .map(|(k, _)| format!("{prefix}{k}"))
            .filter(|k| !usable_env_name(k))
            .collect();
        if !keys.is_empty() {
            keys.sort();
            out.push(InvalidEnvFromKeys {
                kind,
                namespace: namespace.to_string(),
                name: name.to_string(),
                keys,
            });
        }
    }
    out
}

/// The container's environment, in declaration order: `envFrom` sources first (their keys in
/// order, `prefix` prepended), then `env`, whose variables override `envFrom` ones, then the
/// service variables (cluster mode) the container does not define itself.
///
/// Literal values are expanded against the variables defined before them (including every
/// `envFrom` variable), then against the service variables; a `valueFrom` resolves its source.
/// Before anything is read, the service variables must be known
/// ([`super::service_env::service_env`]: the services watch has listed once). A missing
/// ConfigMap or Secret fails with the API's NotFound message (`configmap "x" not found`) unless
/// the reference is `optional`, a missing key with `couldn't find key k in ConfigMap ns/x`; a
/// ConfigMap or Secret that could not be read fails even when optional, as in the kubelet. The
/// kubelet returns the variables in map order (random); nodelet keeps declaration order, which
/// the kubelet's own comment intends.
pub fn make_environment(
    pod: &Pod,
    container: &Container,
    ctx: &EnvContext,
    objects: &FetchedObjects,
) -> Result<Vec<(String, String)>, ConfigError> {
    // The service variables come first, as in the kubelet: a pod whose services are not known
    // yet fails here before any ConfigMap or Secret is looked at.
    let mut services: Vec<(String, String)> = Vec::new();
    for (name, value) in service_env(pod, &objects.services)? {
        set(&mut services, &name, value);
    }
    let base = container_field_path(pod, &container.name);
    let mut envs: Vec<(String, String)> = Vec::new();
    for (field, kind, name, prefix, optional) in env_from_sources(container, &base) {
        let Some(entries) = env_from_entries(objects, kind, name, optional, &field)? else {
            continue;
        };
        for (key, value) in entries {
            let key = format!("{prefix}{key}");
            if usable_env_name(&key) {
                set(&mut envs, &key, value);
            }
        }
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    for (i, var) in container.env.iter().flatten().enumerate() {
        let field = format!("{base}.env[{i}]");
        let refs = EnvRefs { namespace, objects };
        let defined = Defined {
            envs: &envs,
            services: &services,
        };
        if let Some(value) = resolve(pod, container, var, &field, &refs, &defined, ctx)? {
            set(&mut envs, &var.name, value);
        }
    }
    // The service variables the container does not define itself follow its own: `env` and
    // `envFrom` win on a clash.
    for (name, value) in services {
        if !envs.iter().any(|(k, _)| *k == name) {
            envs.push((name, value));
        }
    }
    Ok(envs)
}

/// What a literal value's `$(VAR)` references resolve against: the container's variables
/// defined so far, then the service variables (the kubelet's
/// `MappingFuncFor(tmpEnv, serviceEnv)`).
struct Defined<'a> {
    envs: &'a [(String, String)],
    services: &'a [(String, String)],
}

impl Defined<'_> {
    fn expand(&self, input: &str) -> String {
        expand(input, &|name: &str| {
            self.envs
                .iter()
                .rev()
                .chain(self.services.iter())
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }
}

/// What `valueFrom` references to ConfigMaps and Secrets resolve against.
struct EnvRefs<'a> {
    namespace: &'a str,
    objects: &'a FetchedObjects,
}

impl EnvRefs<'_> {
    /// A key of a ConfigMap or Secret; `None` when an optional object or key is absent.
    fn key(
        &self,
        kind: ObjectKind,
        name: &str,
        key: &str,
        optional: bool,
        field: &str,
    ) -> Result<Option<String>, ConfigError> {
        let unavailable = |message: String| ConfigError::ObjectUnavailable {
            field: field.to_string(),
            message,
        };
        // `None`: no such object; `Some(None)`: the object lacks the key.
        let value = match kind {
            ObjectKind::ConfigMap => self
                .objects
                .config_map(name)
                .map_err(unavailable)?
                .map(|cm| cm.data.as_ref().and_then(|d| d.get(key)).cloned()),
            ObjectKind::Secret => self.objects.secret(name).map_err(unavailable)?.map(|s| {
                s.data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            }),
        };
        match value {
            Some(Some(v)) => Ok(Some(v)),
            None if optional => Ok(None),
            None => Err(ConfigError::ObjectNotFound {
                field: field.to_string(),
                kind,
                name: name.to_string(),
            }),
            Some(None) if optional => Ok(None),
            Some(None) => Err(ConfigError::MissingKey {
                field: field.to_string(),
                kind,
                key: key.to_string(),
                namespace: self.namespace.to_string(),
                name: name.to_string(),
            }),
        }
    }
}

/// One variable's value; `None` when an optional source is absent and the variable is skipped.
fn resolve(
    pod: &Pod,
    container: &Container,
    var: &EnvVar,
    field: &str,
    refs: &EnvRefs,
    defined: &Defined,
    ctx: &EnvContext,
) -> Result<Option<String>, ConfigError> {
    let literal = var.value.as_deref().unwrap_or_default();
    if !literal.is_empty() {
        return Ok(Some(defined.expand(literal)));
    }
    let Some(source) = &var.value_from else {
        return Ok(Some(String::new()));
    };
    let field = format!("{field}.valueFrom");
    if let Some(fs) = &source.field_ref {
        return field_ref_value(pod, fs, &format!("{field}.fieldRef"), ctx).map(Some);
    }
    if let Some(rs) = &source.resource_field_ref {
        return resource_field_ref_value(
            pod,
            container,
            rs,
            &format!("{field}.resourceFieldRef"),
            ctx,
        )
        .map(Some);
    }
    if let Some(cm) = &source.config_map_key_ref {
        return refs.key(
            ObjectKind::ConfigMap,
            &cm.name,
            &cm.key,
            cm.optional == Some(true),
            &format!("{field}.configMapKeyRef"),
        );
    }
    if let Some(secret) = &source.secret_key_ref {
        return refs.key(
            ObjectKind::Secret,
            &secret.name,
            &secret.key,
            secret.optional == Some(true),
            &format!("{field}.secretKeyRef"),
        );
    }
    if let Some(f) = &source.file_key_ref {
        return file_key_value(f, refs.objects, &format!("{field}.fileKeyRef"));
    }
    Ok(Some(String::new()))
}

/// A `fileKeyRef`'s value from the file read for it, as the kubelet's `makeEnvironmentVariables`
/// decides: an unreadable or malformed file fails the container even when `optional`; only a
/// key that is not assigned (or assigned the empty string) is skipped when `optional`.
fn file_key_value(
    selector: &FileKeySelector,
    objects: &FetchedObjects,
    field: &str,
) -> Result<Option<String>, ConfigError> {
    let read = objects
        .env_files
        .get(&(selector.volume_name.clone(), selector.path.clone()))
        .ok_or_else(|| ConfigError::EnvFileVolumeNotFound {
            field: field.to_string(),
            volume: selector.volume_name.clone(),
        })?;
    let unparsable = |reason: String| ConfigError::EnvFileUnparsable {
        field: field.to_string(),
        volume: selector.volume_name.clone(),
        path: selector.path.clone(),
        reason,
    };
    let content = read.content.as_ref().map_err(|e| unparsable(e.clone()))?;
    // Of a file longer than what was read, its complete lines: the key may be among them (the
    // kubelet stops reading at the key too); past them nothing is known.
    let complete = match content.iter().rposition(|b| *b == b'\n') {
        Some(end) if read.truncated => &content[..=end],
        _ if read.truncated => &[][..],
        _ => &content[..],
    };
    let too_long = || {
        unparsable(format!(
            "the file is longer than {} bytes, and {:?} is not assigned before that",
            content.len(),
            selector.key
        ))
    };
    let value = match parse_env(complete, &selector.key) {
        Ok(value) if value.is_empty() && read.truncated => return Err(too_long()),
        Err(EnvFileError::Unclosed(_)) if read.truncated => return Err(too_long()),
        Ok(value) => value,
        Err(e) => return Err(unparsable(e.to_string())),
    };
    if !value.is_empty() {
        return Ok(Some(value));
    }
    if selector.optional == Some(true) {
        return Ok(None);
    }
    Err(ConfigError::EnvFileKeyNotFound {
        field: field.to_string(),
        key: selector.key.clone(),
        path: read.host_path.clone(),
    })
}

/// `metadata.labels['key']` → `("metadata.labels", "key")` (`SplitMaybeSubscriptedPath`).
pub(crate) fn split_subscript(path: &str) -> Option<(&str, &str)> {
    let inner = path.strip_suffix("']")?;
    let (head, key) = inner.split_once("['")?;
    (!head.is_empty()).then_some((head, key))
}

/// `key="value"` lines sorted by key (`fieldpath.FormatMap`), values quoted as Go's `%q`.
pub(crate) fn format_map(map: Option<&std::collections::BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A Go `strconv.Quote` string literal: printable characters as they are, `\"` and `\\`,
/// the C escapes, other control characters as `\xHH` (ASCII) or `\uHHHH`. Go's notion of
/// "printable" is approximated by "not a control character and not a space other than ' '".
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c if c.is_control() || (c.is_whitespace() && c != ' ') => {
                let code = u32::from(c);
                if code <= 0xffff {
                    out.push_str(&format!("\\u{code:04x}"));
                } else {
                    out.push_str(&format!("\\U{code:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The pod IPs with the node's address family first (the kubelet's `sortPodIPs`), so
/// `status.podIP` is the address a client on the node would use.
fn sort_pod_ips(pod_ips: &[String], host_ips: &[String]) -> Vec<String> {
    let family = |ip: &str| ip.parse::<IpAddr>().ok().map(|a| a.is_ipv4());
    let Some(preferred) = host_ips.first().and_then(|h| family(h)) else {
        return pod_ips.to_vec();
    };
    let (mut first, rest): (Vec<String>, Vec<String>) = pod_ips
        .iter()
        .cloned()
        .partition(|ip| family(ip) == Some(preferred));
    first.extend(rest);
    first
}

/// The value of a Downward API `fieldRef` (`podFieldSelectorRuntimeValue`).
pub fn field_ref_value(
    pod: &Pod,
    selector: &ObjectFieldSelector,
    field: &str,
    ctx: &EnvContext,
) -> Result<String, ConfigError> {
    let version = selector.api_version.as_deref().unwrap_or("v1");
    if version != "v1" {
        return Err(ConfigError::invalid(
            format!("{field}.apiVersion"),
            version.to_string(),
            "unsupported pod version".to_string(),
        ));
    }
    let path = selector.field_path.as_str();
    let unsupported = |reason: &str| {
        ConfigError::invalid(
            format!("{field}.fieldPath"),
            path.to_string(),
            reason.to_string(),
        )
    };
    let meta = &pod.metadata;
    if let Some((head, key)) = split_subscript(path) {
        let map = match head {
            "metadata.annotations" => meta.annotations.as_ref(),
            "metadata.labels" => meta.labels.as_ref(),
            _ => return Err(unsupported("field label does not support subscript")),
        };
        return Ok(map.and_then(|m| m.get(key)).cloned().unwrap_or_default());
    }
    let spec = pod.spec.as_ref();
    let pod_ips = sort_pod_ips(ctx.pod_ips, ctx.host_ips);
    let value = match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        // The kubelet sets spec.nodeName on every static pod it reads; fall back to the node
        // for sources that do not.
        "spec.nodeName" | "spec.host" => spec
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| ctx.node_name.to_string()),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" => match ctx.host_ips.first() {
            Some(ip) => ip.clone(),
            None => return Err(unsupported("the node's IP is not known")),
        },
        "status.hostIPs" => {
            if ctx.host_ips.is_empty() {
                return Err(unsupported("the node's IP is not known"));
            }
            ctx.host_ips.join(",")
        }
        "status.podIP" => pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => pod_ips.join(","),
        "spec.restartPolicy" | "spec.schedulerName" | "status.phase" => {
            return Err(unsupported("unsupported fieldPath"))
        }
        _ => return Err(unsupported("field label not supported")),
    };
    Ok(value)
}

/// `ceil(quantity / divisor)` as the kubelet prints it; cpu is compared in millicores (the
/// API only allows `1m` and `1` as cpu divisors), everything else in whole units.
fn divide_ceil(value: i64, divisor: i64) -> String {
    if value <= 0 || divisor <= 0 {
        return "0".to_string();
    }
    let quotient = (i128::from(value) + i128::from(divisor) - 1) / i128::from(divisor);
    i64::try_from(quotient).unwrap_or(i64::MAX).to_string()
}

fn raw_quantity(
    list: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
    name: &str,
) -> Option<Quantity> {
    list.and_then(|l| l.get(name))
        .and_then(|q| Quantity::try_from(q).ok())
}

/// The value of a Downward API `resourceFieldRef` (`containerResourceRuntimeValue` with the
/// kubelet's `defaultPodLimitsForDownwardAPI` since 1.34): limits of cpu, memory and ephemeral
/// storage fall back to the pod-level limit, else the node's allocatable amount, when the
/// container sets none.
pub fn resource_field_ref_value(
    pod: &Pod,
    container: &Container,
    selector: &ResourceFieldSelector,
    field: &str,
    ctx: &EnvContext,
) -> Result<String, ConfigError> {
    let target_name = selector.container_name.as_deref().unwrap_or_default();
    let (target, default_limits) = if target_name.is_empty() {
        (container, true)
    } else if let Some(c) = regular_containers(pod)
        .iter()
        .find(|c| c.name == target_name)
    {
        (c, true)
    } else if let Some(c) = super::init_containers(pod)
        .iter()
        .find(|c| c.name == target_name)
    {
        // The kubelet only defaults the limits of the pod's regular containers (and of the
        // container being started), so an init container named here keeps its own.
        (c, c.name == container.name)
    } else {
        return Err(ConfigError::invalid(
            format!("{field}.containerName"),
            target_name.to_string(),
            "container not found".to_string(),
        ));
    };

    let divisor = match &selector.divisor {
        None => Quantity::from_value(1),
        Some(d) => match Quantity::try_from(d) {
            Ok(q) if q.is_zero() => Quantity::from_value(1),
            Ok(q) => q,
            Err(e) => {
                return Err(ConfigError::invalid(
                    format!("{field}.divisor"),
                    d.0.clone(),
                    e.reason.to_string(),
                ))
            }
        },
    };

    let requests = container_requests(target);
    let limits = if default_limits {
        downward_api_limits(pod, target, &ctx.node_allocatable)
    } else {
        container_limits(target)
    };
    let cpu = |milli: Option<i64>| divide_ceil(milli.unwrap_or(0), divisor.milli_value());
    let whole = |value: Option<i64>| divide_ceil(value.unwrap_or(0), divisor.value());
    let resources = target.resources.as_ref();
    let value = match selector.resource.as_str() {
        "limits.cpu" => cpu(limits.cpu_milli),
        "requests.cpu" => cpu(requests.cpu_milli),
        "limits.memory" => whole(limits.memory),
        "requests.memory" => whole(requests.memory),
        "limits.ephemeral-storage" => whole(limits.ephemeral_storage),
        "requests.ephemeral-storage" => whole(requests.ephemeral_storage),
        other => {
            let hugepages = |list, name: &str| whole(raw_quantity(list, name).map(|q| q.value()));
            let limits_list = resources.and_then(|r| r.limits.as_ref());
            match other.split_once('.') {
                Some(("limits", name)) if name.starts_with("hugepages-") => {
                    hugepages(limits_list, name)
                }
                Some(("requests", name)) if name.starts_with("hugepages-") => {
                    let requests_list = resources.and_then(|r| r.requests.as_ref());
                    match raw_quantity(requests_list, name) {
                        Some(q) => whole(Some(q.value())),
                        None => hugepages(limits_list, name),
                    }
                }
                _ => {
                    return Err(ConfigError::invalid(
                        format!("{field}.resource"),
                        other.to_string(),
                        "unsupported container resource".to_string(),
                    ))
                }
            }
        }
    };
    Ok(value)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::{BTreeMap, HashMap};

    use k8s_openapi::api::core::v1::{
        ConfigMap, ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVarSource, PodSpec,
        Secret, SecretEnvSource, SecretKeySelector,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
    use k8s_openapi::ByteString;

    use super::*;
    use crate::podspec::resources::test_support::container;

    #[test]
    fn expand_table() {
        let vars: HashMap<&str, &str> = [("VAR_A", "A"), ("VAR_B", "B"), ("EMPTY", "")].into();
        let env = |name: &str| vars.get(name).map(|v| v.to_string());
        let cases = [
            ("plain", "plain"),
            ("$(VAR_A)", "A"),
            ("___$(VAR_A)___", "___A___"),
            ("$(VAR_A)$(VAR_B)", "AB"),
            ("$(EMPTY)x", "x"),
            ("$(UNKNOWN)", "$(UNKNOWN)"),
            ("$$(VAR_A)", "$(VAR_A)"),
            ("$$$(VAR_A)", "$A"),
            ("$$$$(VAR_A)", "$$(VAR_A)"),
            ("$VAR_A", "$VAR_A"),
            ("$(VAR_A", "$(VAR_A"),
            ("x$", "x$"),
            ("$", "$"),
            ("$()", "$()"),
            ("$($(VAR_A)", "$($(VAR_A)"),
            ("$é$(VAR_B)", "$éB"),
            ("ünï$(VAR_A)cødé", "ünïAcødé"),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, &env), want, "{input}");
        }
    }

    fn env_var(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        }
    }

    pub(crate) fn field_env(name: &str, path: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: path.into(),
                }),
                ..Default::default()
            }),
        }
    }

    fn resource_env(name: &str, resource: &str, divisor: Option<&str>) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(EnvVarSource {
                resource_field_ref: Some(ResourceFieldSelector {
                    container_name: None,
                    divisor: divisor.map(|d| ApiQuantity(d.into())),
                    resource: resource.into(),
                }),
                ..Default::default()
            }),
        }
    }

    pub(crate) fn test_pod(c: Container) -> Pod {
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("uid-1".into()),
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                annotations: Some(BTreeMap::from([("note".into(), "hi \"there\"".into())])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![c],
                service_account_name: Some("builder".into()),
                ..Default::default()
            }),
            status: None,
        }
    }

    pub(crate) const CTX: EnvContext<'static> = EnvContext {
        pod_ips: &[],
        host_ips: &[],
        node_name: "node-1",
        node_allocatable: NodeAllocatable {
            cpu_milli: 4000,
            memory: 8 << 30,
            ephemeral_storage: Some(100 << 30),
        },
    };

    /// Standalone: no object was read.
    fn standalone() -> FetchedObjects {
        FetchedObjects {
            namespace: "default".into(),
            ..FetchedObjects::default()
        }
    }

    fn run(c: Container, ctx: &EnvContext) -> Result<Vec<(String, String)>, ConfigError> {
        let p = test_pod(c.clone());
        make_environment(&p, &c, ctx, &standalone())
    }

    fn with_env(mut c: Container, env: Vec<EnvVar>) -> Container {
        c.env = Some(env);
        c
    }

    #[test]
    fn environment_table() {
        let pod_ips = ["10.0.0.5".to_string(), "fd00::5".to_string()];
        let host_ips = ["192.168.1.2".to_string(), "fd00::1".to_string()];
        let ctx = EnvContext {
            pod_ips: &pod_ips,
            host_ips: &host_ips,
            ..CTX
        };
        let base = container("c", "cpu=250m,memory=64Mi", "memory=128Mi");
        type Case<'a> = (&'a str, Vec<EnvVar>, Vec<(&'a str, &'a str)>);
        let cases: Vec<Case> = vec![
            (
                "literal and expansion of earlier vars only",
                vec![
                    env_var("A", "a"),
                    env_var("B", "$(A)-b-$(C)"),
                    env_var("C", "c"),
                    env_var("D", "$$(A)"),
                ],
                vec![("A", "a"), ("B", "a-b-$(C)"), ("C", "c"), ("D", "$(A)")],
            ),
            (
                "redefinition keeps the first position",
                vec![env_var("A", "1"), env_var("B", "2"), env_var("A", "3$(A)")],
                vec![("A", "31"), ("B", "2")],
            ),
            (
                "empty value without a source",
                vec![EnvVar {
                    name: "E".into(),
                    ..Default::default()
                }],
                vec![("E", "")],
            ),
            (
                "field refs",
                vec![
                    field_env("NAME", "metadata.name"),
                    field_env("NS", "metadata.namespace"),
                    field_env("UID", "metadata.uid"),
                    field_env("APP", "metadata.labels['app']"),
                    field_env("MISSING", "metadata.labels['nope']"),
                    field_env("NOTE", "metadata.annotations['note']"),
                    field_env("NODE", "spec.nodeName"),
                    field_env("SA", "spec.serviceAccountName"),
                    field_env("HOST_IP", "status.hostIP"),
                    field_env("HOST_IPS", "status.hostIPs"),
                    field_env("POD_IP", "status.podIP"),
                    field_env("POD_IPS", "status.podIPs"),
                    env_var("URL", "http://$(POD_IP):80/$(NAME)"),
                ],
                vec![
                    ("NAME", "web"),
                    ("NS", "default"),
                    ("UID", "uid-1"),
                    ("APP", "web"),
                    ("MISSING", ""),
                    ("NOTE", "hi \"there\""),
                    ("NODE", "node-1"),
                    ("SA", "builder"),
                    ("HOST_IP", "192.168.1.2"),
                    ("HOST_IPS", "192.168.1.2,fd00::1"),
                    ("POD_IP", "10.0.0.5"),
                    ("POD_IPS", "10.0.0.5,fd00::5"),
                    ("URL", "http://10.0.0.5:80/web"),
                ],
            ),
            (
                "resource refs with divisors, rounding up, allocatable fallback",
                vec![
                    resource_env("CPU_REQ", "requests.cpu", None),
                    resource_env("CPU_REQ_M", "requests.cpu", Some("1m")),
                    resource_env("CPU_LIM", "limits.cpu", None),
                    resource_env("MEM_REQ", "requests.memory", None),
                    resource_env("MEM_REQ_MI", "requests.memory", Some("1Mi")),
                    resource_env("MEM_LIM_GI", "limits.memory", Some("1Gi")),
                    resource_env("EPH_LIM_GI", "limits.ephemeral-storage", Some("1Gi")),
                    resource_env("EPH_REQ", "requests.ephemeral-storage", None),
                ],
                vec![
                    ("CPU_REQ", "1"),
                    ("CPU_REQ_M", "250"),
                    ("CPU_LIM", "4"),
                    ("MEM_REQ", "67108864"),
                    ("MEM_REQ_MI", "64"),
                    ("MEM_LIM_GI", "1"),
                    ("EPH_LIM_GI", "100"),
                    ("EPH_REQ", "0"),
                ],
            ),
        ];
        for (name, env, want) in cases {
            let got = run(with_env(base.clone(), env), &ctx).unwrap();
            let want: Vec<(String, String)> = want
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn pod_ip_follows_the_node_address_family() {
        let pod_ips = ["10.0.0.5".to_string(), "fd00::5".to_string()];
        let host_ips = ["fd00::1".to_string()];
        let ctx = EnvContext {
            pod_ips: &pod_ips,
            host_ips: &host_ips,
            ..CTX
        };
        let c = with_env(
            container("c", "", ""),
            vec![
                field_env("IP", "status.podIP"),
                field_env("IPS", "status.podIPs"),
            ],
        );
        let got = run(c, &ctx).unwrap();
        assert_eq!(got[0].1, "fd00::5");
        assert_eq!(got[1].1, "fd00::5,10.0.0.5");
    }

    #[test]
    fn errors_name_the_field_and_value() {
        let cm_required = EnvVar {
            name: "CM".into(),
            value: None,
            value_from: Some(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    key: "k".into(),
                    name: "settings".into(),
                    optional: None,
                }),
                ..Default::default()
            }),
        };
        let cases: Vec<(Vec<EnvVar>, &str)> = vec![
            (
                vec![env_var("A", "a"), cm_required],
                "couldn't get configMap default/settings, no kubeClient defined",
            ),
            (
                vec![field_env("X", "spec.bogus")],
                "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: Invalid value: \"spec.bogus\": field label not supported",
            ),
            (
                vec![field_env("X", "spec.nodeName['x']")],
                "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: Invalid value: \"spec.nodeName['x']\": field label does not support subscript",
            ),
            (
                vec![field_env("X", "status.hostIP")],
                "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: Invalid value: \"status.hostIP\": the node's IP is not known",
            ),
            (
                vec![resource_env("X", "limits.gpu", None)],
                "spec.containers[0].env[0].valueFrom.resourceFieldRef.resource: Invalid value: \"limits.gpu\": unsupported container resource",
            ),
        ];
        for (env, want) in cases {
            let err = run(with_env(container("c", "", ""), env), &CTX).unwrap_err();
            assert_eq!(err.to_string(), want);
        }

        // standalone: even an optional reference needs the API server, as in the kubelet
        let mut c = container("c", "", "");
        c.env_from = Some(vec![
            EnvFromSource::default(),
            EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name: "creds".into(),
                    optional: Some(true),
                }),
                ..Default::default()
            },
        ]);
        assert_eq!(
            run(c, &CTX).unwrap_err().to_string(),
            "couldn't get secret default/creds, no kubeClient defined"
        );
    }

    #[test]
    fn resource_ref_can_name_another_container() {
        let app = container("app", "cpu=1500m", "cpu=2");
        let mut helper = container("helper", "", "");
        helper.env = Some(vec![EnvVar {
            name: "APP_CPU".into(),
            value: None,
            value_from: Some(EnvVarSource {
                resource_field_ref: Some(ResourceFieldSelector {
                    container_name: Some("app".into()),
                    divisor: Some(ApiQuantity("1".into())),
                    resource: "requests.cpu".into(),
                }),
                ..Default::default()
            }),
        }]);
        let mut p = test_pod(app);
        p.spec.as_mut().unwrap().containers.push(helper.clone());
        let got = make_environment(&p, &helper, &CTX, &standalone()).unwrap();
        assert_eq!(got, vec![("APP_CPU".to_string(), "2".to_string())]);
    }

    pub(crate) fn cm_key(name: &str, cm: &str, key: &str, optional: bool) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    key: key.into(),
                    name: cm.into(),
                    optional: optional.then_some(true),
                }),
                ..Default::default()
            }),
        }
    }

    pub(crate) fn secret_key(name: &str, secret: &str, key: &str, optional: bool) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    key: key.into(),
                    name: secret.into(),
                    optional: optional.then_some(true),
                }),
                ..Default::default()
            }),
        }
    }

    pub(crate) fn from_cm(name: &str, prefix: &str, optional: bool) -> EnvFromSource {
        EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: name.into(),
                optional: optional.then_some(true),
            }),
            prefix: (!prefix.is_empty()).then(|| prefix.to_string()),
            ..Default::default()
        }
    }

    fn from_secret(name: &str, prefix: &str, optional: bool) -> EnvFromSource {
        EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: name.into(),
                optional: optional.then_some(true),
            }),
            prefix: (!prefix.is_empty()).then(|| prefix.to_string()),
            ..Default::default()
        }
    }

    /// `settings` {LOG_LEVEL: debug, PORT: "8080", bad=key: x}, `creds` {PASSWORD: s3cret},
    /// `missing-cm`/`missing-secret` absent, `broken` unreadable.
    fn objects() -> FetchedObjects {
        let cm = ConfigMap {
            data: Some(BTreeMap::from([
                ("LOG_LEVEL".to_string(), "debug".to_string()),
                ("PORT".to_string(), "8080".to_string()),
                ("bad=key".to_string(), "x".to_string()),
            ])),
            ..Default::default()
        };
        let secret = Secret {
            data: Some(BTreeMap::from([(
                "PASSWORD".to_string(),
                ByteString(b"s3cret".to_vec()),
            )])),
            ..Default::default()
        };
        FetchedObjects {
            namespace: "default".into(),
            config_maps: BTreeMap::from([
                ("settings".to_string(), Ok(Some(cm))),
                ("missing-cm".to_string(), Ok(None)),
                (
                    "broken".to_string(),
                    Err(
                        "failed to sync configmap cache: timed out waiting for the condition"
                            .to_string(),
                    ),
                ),
            ]),
            secrets: BTreeMap::from([
                ("creds".to_string(), Ok(Some(secret))),
                ("missing-secret".to_string(), Ok(None)),
            ]),
            services: Default::default(),
            env_files: Default::default(),
        }
    }

    fn file_key(name: &str, volume: &str, path: &str, key: &str, optional: bool) -> EnvVar {
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                file_key_ref: Some(FileKeySelector {
                    volume_name: volume.into(),
                    path: path.into(),
                    key: key.into(),
                    optional: optional.then_some(true),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn environment_files_table() {
        let file = |content: Result<&str, &str>, truncated: bool| {
            crate::podspec::references::EnvFileRead {
                host_path: "/var/lib/nodelet/pods/u/volumes/kubernetes.io~empty-dir/config/a.env"
                    .into(),
                content: content
                    .map(|c| c.as_bytes().to_vec())
                    .map_err(str::to_string),
                truncated,
            }
        };
        let objects = FetchedObjects {
            env_files: BTreeMap::from([
                (
                    ("config".into(), "a.env".into()),
                    file(Ok("A='1'\nEMPTY=''\nB='two words'\n"), false),
                ),
                (
                    ("config".into(), "bad.env".into()),
                    file(Ok("A=1\n"), false),
                ),
                (
                    ("config".into(), "gone.env".into()),
                    file(
                        Err("open /x/gone.env: No such file or directory (os error 2)"),
                        false,
                    ),
                ),
                (
                    ("config".into(), "long.env".into()),
                    file(Ok("A='1'\nB='half"), true),
                ),
            ]),
            ..objects()
        };
        type Case<'a> = (
            &'a str,
            Vec<EnvVar>,
            Result<Vec<(&'a str, &'a str)>, &'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                "keys of one file, literal values",
                vec![file_key("X", "config", "a.env", "A", false), file_key("Y", "config", "a.env", "B", false)],
                Ok(vec![("X", "1"), ("Y", "two words")]),
            ),
            (
                "later literals expand them",
                vec![file_key("X", "config", "a.env", "A", false), env_var("Z", "x=$(X)")],
                Ok(vec![("X", "1"), ("Z", "x=1")]),
            ),
            (
                "a missing key is skipped when optional",
                vec![file_key("X", "config", "a.env", "NOPE", true), file_key("Y", "config", "a.env", "EMPTY", true)],
                Ok(vec![]),
            ),
            (
                "a missing key fails otherwise, and so does the empty value",
                vec![file_key("Y", "config", "a.env", "EMPTY", false)],
                Err("environment variable key \"EMPTY\" not found in file \"/var/lib/nodelet/pods/u/volumes/kubernetes.io~empty-dir/config/a.env\""),
            ),
            (
                "a malformed file fails even when optional",
                vec![file_key("X", "config", "bad.env", "A", true)],
                Err("couldn't parse env file \"bad.env\" in volume \"config\": invalid environment variable format at line 1: value must be enclosed in single quotes"),
            ),
            (
                "so does a missing file",
                vec![file_key("X", "config", "gone.env", "A", true)],
                Err("couldn't parse env file \"gone.env\" in volume \"config\": open /x/gone.env: No such file or directory (os error 2)"),
            ),
            (
                "a volume that is no emptyDir of the pod",
                vec![file_key("X", "other", "a.env", "A", false)],
                Err("cannot find the volume \"other\" referenced by FileKeyRef"),
            ),
            (
                "a file longer than the bound: its complete lines count",
                vec![file_key("X", "config", "long.env", "A", false)],
                Ok(vec![("X", "1")]),
            ),
            (
                "past them nothing is known",
                vec![file_key("X", "config", "long.env", "B", true)],
                Err("couldn't parse env file \"long.env\" in volume \"config\": the file is longer than 13 bytes, and \"B\" is not assigned before that"),
            ),
        ];
        for (name, env, want) in cases {
            let c = with_env(container("c", "", ""), env);
            let p = test_pod(c.clone());
            let got = make_environment(&p, &c, &CTX, &objects).map_err(|e| e.to_string());
            let want = want
                .map(|vars| {
                    vars.into_iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect::<Vec<_>>()
                })
                .map_err(str::to_string);
            assert_eq!(got, want, "{name}");
        }
        let c = with_env(
            container("c", "", ""),
            vec![file_key("X", "other", "a.env", "A", false)],
        );
        let err = make_environment(&test_pod(c.clone()), &c, &CTX, &objects).unwrap_err();
        assert!(
            matches!(&err, ConfigError::EnvFileVolumeNotFound { field, .. } if field == "spec.containers[0].env[0].valueFrom.fileKeyRef"),
            "{err:?}"
        );
    }

    #[test]
    fn api_object_environment_table() {
        type Case<'a> = (
            &'a str,
            Vec<EnvFromSource>,
            Vec<EnvVar>,
            Result<Vec<(&'a str, &'a str)>, &'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                "envFrom with prefix, env overrides it, literals expand envFrom variables",
                vec![
                    from_cm("settings", "APP_", false),
                    from_secret("creds", "", false),
                ],
                vec![
                    env_var("APP_PORT", "9090"),
                    env_var("URL", "http://localhost:$(APP_PORT)/?pw=$(PASSWORD)"),
                    env_var("LEVEL", "$(APP_LOG_LEVEL)"),
                ],
                Ok(vec![
                    ("APP_LOG_LEVEL", "debug"),
                    ("APP_PORT", "9090"),
                    ("PASSWORD", "s3cret"),
                    ("URL", "http://localhost:9090/?pw=s3cret"),
                    ("LEVEL", "debug"),
                ]),
            ),
            (
                "keys from configMapKeyRef and secretKeyRef",
                vec![],
                vec![
                    cm_key("LEVEL", "settings", "LOG_LEVEL", false),
                    secret_key("PW", "creds", "PASSWORD", false),
                    env_var("BOTH", "$(LEVEL):$(PW)"),
                ],
                Ok(vec![
                    ("LEVEL", "debug"),
                    ("PW", "s3cret"),
                    ("BOTH", "debug:s3cret"),
                ]),
            ),
            (
                "optional absent objects and keys are skipped",
                vec![
                    from_cm("missing-cm", "", true),
                    from_secret("missing-secret", "X_", true),
                ],
                vec![
                    cm_key("A", "missing-cm", "k", true),
                    cm_key("B", "settings", "nope", true),
                    secret_key("C", "missing-secret", "k", true),
                    secret_key("D", "creds", "nope", true),
                    env_var("E", "$(A)"),
                ],
                Ok(vec![("E", "$(A)")]),
            ),
            (
                "missing configMap",
                vec![],
                vec![cm_key("A", "missing-cm", "k", false)],
                Err("configmap \"missing-cm\" not found"),
            ),
            (
                "missing configMap key",
                vec![],
                vec![cm_key("A", "settings", "nope", false)],
                Err("couldn't find key nope in ConfigMap default/settings"),
            ),
            (
                "missing secret",
                vec![],
                vec![secret_key("A", "missing-secret", "k", false)],
                Err("secret \"missing-secret\" not found"),
            ),
            (
                "missing secret key",
                vec![],
                vec![secret_key("A", "creds", "nope", false)],
                Err("couldn't find key nope in Secret default/creds"),
            ),
            (
                "missing envFrom configMap",
                vec![from_cm("missing-cm", "", false)],
                vec![],
                Err("configmap \"missing-cm\" not found"),
            ),
            (
                "missing envFrom secret",
                vec![from_secret("missing-secret", "", false)],
                vec![],
                Err("secret \"missing-secret\" not found"),
            ),
            (
                "an unreadable object fails even when optional",
                vec![],
                vec![cm_key("A", "broken", "k", true)],
                Err("failed to sync configmap cache: timed out waiting for the condition"),
            ),
            (
                "the first failure wins: envFrom before env",
                vec![from_secret("missing-secret", "", false)],
                vec![cm_key("A", "missing-cm", "k", false)],
                Err("secret \"missing-secret\" not found"),
            ),
        ];
        for (name, env_from, env, want) in cases {
            let mut c = container("c", "", "");
            c.env_from = Some(env_from);
            c.env = Some(env);
            let p = test_pod(c.clone());
            let got = make_environment(&p, &c, &CTX, &objects()).map_err(|e| e.to_string());
            let want = want
                .map(|vars| {
                    vars.into_iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect::<Vec<_>>()
                })
                .map_err(str::to_string);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn service_links_table() {
        use crate::podspec::service_env::tests::service;
        use crate::podspec::service_env::ServicesRead;
        type Case<'a> = (
            &'a str,
            bool,
            Vec<EnvFromSource>,
            Vec<EnvVar>,
            Result<Vec<(&'a str, &'a str)>, &'a str>,
        );
        let kubernetes = [
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
        ];
        let cache = [
            ("CACHE_SERVICE_HOST", "10.96.0.7"),
            ("CACHE_SERVICE_PORT", "6379"),
            ("CACHE_PORT", "tcp://10.96.0.7:6379"),
            ("CACHE_PORT_6379_TCP", "tcp://10.96.0.7:6379"),
            ("CACHE_PORT_6379_TCP_PROTO", "tcp"),
            ("CACHE_PORT_6379_TCP_PORT", "6379"),
            ("CACHE_PORT_6379_TCP_ADDR", "10.96.0.7"),
        ];
        let with = |head: &[(&'static str, &'static str)],
                    tail: &[&[(&'static str, &'static str)]]| {
            let mut v = head.to_vec();
            for t in tail {
                v.extend_from_slice(t);
            }
            v
        };
        let cases: Vec<Case> = vec![
            (
                "no env of its own: the service variables, master service first",
                true,
                vec![],
                vec![],
                Ok(with(&[], &[&cache, &kubernetes])),
            ),
            (
                "links off: the master service only",
                false,
                vec![],
                vec![],
                Ok(kubernetes.to_vec()),
            ),
            (
                "env wins on a clash and keeps its place; the rest follow",
                true,
                vec![],
                vec![env_var("KUBERNETES_SERVICE_HOST", "override")],
                Ok(with(
                    &[("KUBERNETES_SERVICE_HOST", "override")],
                    &[&cache, &kubernetes[1..]],
                )),
            ),
            (
                "envFrom wins on a clash too",
                false,
                vec![from_cm("settings", "KUBERNETES_SERVICE_", false)],
                vec![],
                Ok(with(
                    &[
                        ("KUBERNETES_SERVICE_LOG_LEVEL", "debug"),
                        ("KUBERNETES_SERVICE_PORT", "8080"),
                    ],
                    &[&[kubernetes[0]], &kubernetes[2..]],
                )),
            ),
            (
                "literals expand service variables; the container's own come first",
                false,
                vec![],
                vec![
                    env_var(
                        "URL",
                        "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)",
                    ),
                    env_var("KUBERNETES_SERVICE_PORT", "6443"),
                    env_var("AGAIN", "$(KUBERNETES_SERVICE_PORT)"),
                    env_var("NOT_LINKED", "$(CACHE_SERVICE_HOST)"),
                ],
                Ok(with(
                    &[
                        ("URL", "https://10.96.0.1:443"),
                        ("KUBERNETES_SERVICE_PORT", "6443"),
                        ("AGAIN", "6443"),
                        ("NOT_LINKED", "$(CACHE_SERVICE_HOST)"),
                    ],
                    &[&[kubernetes[0]], &kubernetes[2..]],
                )),
            ),
        ];
        let read = ServicesRead::Synced(vec![
            service("default", "kubernetes", "10.96.0.1", &[("https", 443, "")]),
            service("default", "cache", "10.96.0.7", &[("", 6379, "")]),
            service("default", "headless", "None", &[("", 80, "")]),
            service("other", "elsewhere", "10.96.0.9", &[("", 80, "")]),
        ]);
        for (name, links, env_from, env, want) in cases {
            let mut c = container("c", "", "");
            c.env_from = Some(env_from);
            c.env = Some(env);
            let mut p = test_pod(c.clone());
            p.spec.as_mut().unwrap().enable_service_links = Some(links);
            let objects = FetchedObjects {
                services: read.clone(),
                ..objects()
            };
            let got = make_environment(&p, &c, &CTX, &objects).map_err(|e| e.to_string());
            let want = want
                .map(|vars| {
                    vars.into_iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect::<Vec<_>>()
                })
                .map_err(str::to_string);
            assert_eq!(got, want, "{name}");
        }

        // Not listed yet: an API pod fails before any object is looked at.
        let mut c = container("c", "", "");
        c.env = Some(vec![cm_key("A", "missing-cm", "k", false)]);
        let mut p = test_pod(c.clone());
        p.spec.as_mut().unwrap().enable_service_links = Some(true);
        let objects = FetchedObjects {
            services: ServicesRead::NotSynced,
            ..objects()
        };
        assert_eq!(
            make_environment(&p, &c, &CTX, &objects)
                .unwrap_err()
                .to_string(),
            "services have not yet been read at least once, cannot construct envvars"
        );
    }

    #[test]
    fn errors_keep_the_field_path() {
        let c = with_env(
            container("c", "", ""),
            vec![env_var("A", "a"), cm_key("B", "settings", "nope", false)],
        );
        let p = test_pod(c.clone());
        let err = make_environment(&p, &c, &CTX, &objects()).unwrap_err();
        assert!(
            matches!(&err, ConfigError::MissingKey { field, .. } if field == "spec.containers[0].env[1].valueFrom.configMapKeyRef"),
            "{err:?}"
        );
    }

    #[test]
    fn invalid_env_from_keys_are_skipped_and_reported() {
        let mut c = container("c", "", "");
        c.env_from = Some(vec![
            from_cm("settings", "", false),
            from_cm("settings", "P=", false),
            from_secret("creds", "", false),
            from_cm("missing-cm", "", true),
        ]);
        let p = test_pod(c.clone());
        let env = make_environment(&p, &c, &CTX, &objects()).unwrap();
        assert!(env.iter().all(|(k, _)| !k.contains('=')), "{env:?}");
        assert_eq!(env.len(), 3);
        let got: Vec<String> = invalid_env_from_keys(&p, &c, &objects())
            .iter()
            .map(InvalidEnvFromKeys::message)
            .collect();
        assert_eq!(
            got,
            [
                "Keys [bad=key] from the EnvFrom configMap default/settings were skipped since they are considered invalid environment variable names.",
                "Keys [P=LOG_LEVEL, P=PORT, P=bad=key] from the EnvFrom configMap default/settings were skipped since they are considered invalid environment variable names.",
            ]
        );
    }

    #[test]
    fn go_quote_table() {
        let cases = [
            ("plain", "\"plain\""),
            ("say \"hi\"", "\"say \\\"hi\\\"\""),
            ("back\\slash", "\"back\\\\slash\""),
            ("tab\tnl\n", "\"tab\\tnl\\n\""),
            ("\u{1}\u{7f}", "\"\\x01\\x7f\""),
            ("ünï 日本", "\"ünï 日本\""),
            ("nb\u{a0}sp", "\"nb\\u00a0sp\""),
            ("'single'", "\"'single'\""),
        ];
        for (input, want) in cases {
            assert_eq!(go_quote(input), want, "{input:?}");
        }
        let labels = BTreeMap::from([
            ("b".to_string(), "2".to_string()),
            ("a".to_string(), "x\"y".to_string()),
        ]);
        assert_eq!(format_map(Some(&labels)), "a=\"x\\\"y\"\nb=\"2\"");
    }
}
