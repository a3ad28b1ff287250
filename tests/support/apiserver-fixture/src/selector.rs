//! Label and field selectors with the API server's syntax and matching rules.

use std::collections::BTreeMap;

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("unable to parse requirement: {0}")]
    Label(String),
    #[error("invalid selector: '{0}'; can't understand '{1}'")]
    Field(String, String),
    /// The API server's message for a field the resource does not index.
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelOp {
    Exists,
    NotExists,
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct LabelRequirement {
    key: String,
    op: LabelOp,
}

/// A parsed `labelSelector`; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(input: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&input[start..]);
    parts
}

fn parse_set(text: &str, whole: &str) -> Result<Vec<String>, SelectorError> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| SelectorError::Label(whole.to_string()))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn valid_label_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

impl LabelSelector {
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        if input.trim().is_empty() {
            return Ok(LabelSelector { requirements });
        }
        for raw in split_top_level(input) {
            let part = raw.trim();
            let err = || SelectorError::Label(part.to_string());
            let requirement = if let Some(key) = part.strip_prefix('!') {
                LabelRequirement {
                    key: key.trim().to_string(),
                    op: LabelOp::NotExists,
                }
            } else if let Some((key, value)) = part.split_once("!=") {
                LabelRequirement {
                    key: key.trim().to_string(),
                    op: LabelOp::NotEquals(value.trim().to_string()),
                }
            } else if let Some((key, value)) = part.split_once("==") {
                LabelRequirement {
                    key: key.trim().to_string(),
                    op: LabelOp::Equals(value.trim().to_string()),
                }
            } else if let Some((key, value)) = part.split_once('=') {
                LabelRequirement {
                    key: key.trim().to_string(),
                    op: LabelOp::Equals(value.trim().to_string()),
                }
            } else if let Some((key, set)) = part.split_once(" notin ") {
                LabelRequirement {
                    key: key.trim().to_string(),
                    op: LabelOp::NotIn(parse_set(set, part)?),
                }
            } else if let Some((key, set)) = part.split_once(" in ") {
                LabelRequirement {
                    key: key.trim().to_string(),
                    op: LabelOp::In(parse_set(set, part)?),
                }
            } else if let Some((key, value)) = part.split_once('>') {
                let n = value.trim().parse().map_err(|_| err())?;
                LabelRequirement {
                    key: key.trim().to_string(),
                    op: LabelOp::Gt(n),
                }
            } else if let Some((key, value)) = part.split_once('<') {
                let n = value.trim().parse().map_err(|_| err())?;
                LabelRequirement {
                    key: key.trim().to_string(),
                    op: LabelOp::Lt(n),
                }
            } else {
                LabelRequirement {
                    key: part.to_string(),
                    op: LabelOp::Exists,
                }
            };
            if !valid_label_key(&requirement.key) {
                return Err(err());
            }
            requirements.push(requirement);
        }
        Ok(LabelSelector { requirements })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| {
            let value = labels.get(&r.key);
            match &r.op {
                LabelOp::Exists => value.is_some(),
                LabelOp::NotExists => value.is_none(),
                LabelOp::Equals(v) => value == Some(v),
                LabelOp::NotEquals(v) => value != Some(v),
                LabelOp::In(set) => value.is_some_and(|v| set.contains(v)),
                LabelOp::NotIn(set) => value.is_none_or(|v| !set.contains(v)),
                LabelOp::Gt(n) => value
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v > *n),
                LabelOp::Lt(n) => value
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v < *n),
            }
        })
    }

    /// Matches the `metadata.labels` of a stored object.
    pub fn matches_object(&self, obj: &Value) -> bool {
        if self.requirements.is_empty() {
            return true;
        }
        let labels: BTreeMap<String, String> = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        self.matches(&labels)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    field: String,
    value: String,
    equal: bool,
}

/// A parsed `fieldSelector` (only `=`, `==` and `!=`, as the API server supports).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

/// Splits on unescaped commas and removes the `\` escapes of `\,`, `\=` and `\\`.
fn split_escaped(input: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = input.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(next), Some(last)) = (chars.next(), parts.last_mut()) {
                    last.push('\\');
                    last.push(next);
                }
            }
            ',' => parts.push(String::new()),
            other => {
                if let Some(last) = parts.last_mut() {
                    last.push(other);
                }
            }
        }
    }
    parts
}

fn unescape(value: &str) -> String {
    let mut out = String::new();
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Index of the first unescaped occurrence of `pat` in `s`.
fn find_unescaped(s: &str, pat: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if s[i..].starts_with(pat) {
            return Some(i);
        }
        i += 1;
    }
    None
}

impl FieldSelector {
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        if input.trim().is_empty() {
            return Ok(FieldSelector { requirements });
        }
        for part in split_escaped(input) {
            let (field, value, equal) = if let Some(i) = find_unescaped(&part, "!=") {
                (&part[..i], &part[i + 2..], false)
            } else if let Some(i) = find_unescaped(&part, "==") {
                (&part[..i], &part[i + 2..], true)
            } else if let Some(i) = find_unescaped(&part, "=") {
                (&part[..i], &part[i + 1..], true)
            } else {
                return Err(SelectorError::Field(input.to_string(), part.clone()));
            };
            requirements.push(FieldRequirement {
                field: field.trim().to_string(),
                value: unescape(value),
                equal,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Rejects fields the resource does not index, as the API server does (before listing).
    pub fn check_supported(&self, storage: &str) -> Result<(), SelectorError> {
        for r in &self.requirements {
            if !supported_fields(storage).contains(&r.field.as_str()) {
                return Err(SelectorError::UnsupportedField(r.field.clone()));
            }
        }
        Ok(())
    }

    pub fn matches_object(&self, storage: &str, obj: &Value) -> bool {
        self.requirements.iter().all(|r| {
            let actual = field_value(storage, obj, &r.field).unwrap_or_default();
            (actual == r.value) == r.equal
        })
    }

    /// The value `spec.nodeName=` asks for, if it does (used by tests and logs).
    pub fn equality_value(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.equal && r.field == field)
            .map(|r| r.value.as_str())
    }
}

const META_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];
const POD_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];
const EVENT_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];
const NODE_FIELDS: &[&str] = &["metadata.name", "spec.unschedulable"];
const NAMESPACE_FIELDS: &[&str] = &["metadata.name", "status.phase"];
const SECRET_FIELDS: &[&str] = &["metadata.name", "metadata.namespace", "type"];
const CSR_FIELDS: &[&str] = &["metadata.name", "spec.signerName"];

/// The selectable fields of each storage (the API server's `*ToSelectableFields`).
pub fn supported_fields(storage: &str) -> &'static [&'static str] {
    match storage {
        "pods" => POD_FIELDS,
        "events" => EVENT_FIELDS,
        "nodes" => NODE_FIELDS,
        "namespaces" => NAMESPACE_FIELDS,
        "secrets" => SECRET_FIELDS,
        "certificatesigningrequests" => CSR_FIELDS,
        _ => META_FIELDS,
    }
}

/// The string value of a selectable field; absent fields are "" (booleans are "true"/"false").
pub fn field_value(storage: &str, obj: &Value, field: &str) -> Option<String> {
    if storage == "events" && field == "source" {
        return Some(
            obj.pointer("/source/component")
                .and_then(Value::as_str)
                .or_else(|| obj.get("reportingComponent").and_then(Value::as_str))
                .unwrap_or("")
                .to_string(),
        );
    }
    let pointer = format!("/{}", field.replace('.', "/"));
    let value = obj.pointer(&pointer);
    let text = match value {
        None | Some(Value::Null) => match field {
            "spec.hostNetwork" | "spec.unschedulable" => "false".to_string(),
            _ => String::new(),
        },
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(other) => other.to_string(),
    };
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selector_matching() {
        let app_web = labels(&[("app", "web"), ("tier", "front"), ("n", "5")]);
        let none = labels(&[]);
        let cases: &[(&str, &BTreeMap<String, String>, bool)] = &[
            ("", &none, true),
            ("app=web", &app_web, true),
            ("app==web", &app_web, true),
            ("app=db", &app_web, false),
            ("app!=db", &app_web, true),
            ("app!=db", &none, true),
            ("app", &app_web, true),
            ("app", &none, false),
            ("!app", &none, true),
            ("!app", &app_web, false),
            ("app in (web,db)", &app_web, true),
            ("app in (db)", &app_web, false),
            ("app notin (db)", &app_web, true),
            ("app notin (db)", &none, true),
            ("app notin (web, db)", &app_web, false),
            ("app=web,tier=front", &app_web, true),
            ("app=web, tier=back", &app_web, false),
            ("app in (web,db),tier", &app_web, true),
            ("n>4", &app_web, true),
            ("n<4", &app_web, false),
        ];
        for (selector, labels, want) in cases {
            let parsed = LabelSelector::parse(selector).unwrap();
            assert_eq!(parsed.matches(labels), *want, "{selector:?} on {labels:?}");
        }
    }

    #[test]
    fn label_selector_errors() {
        for bad in ["app in web", "a b c=d", "n>x", "=x"] {
            assert!(
                LabelSelector::parse(bad).is_err(),
                "{bad:?} should not parse"
            );
        }
    }

    #[test]
    fn field_selector_matching() {
        let pod = json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": "node-1", "hostNetwork": true},
            "status": {"phase": "Running"}
        });
        let unbound = json!({"metadata": {"name": "x", "namespace": "default"}, "spec": {}});
        let cases: &[(&str, &Value, bool)] = &[
            ("", &pod, true),
            ("spec.nodeName=node-1", &pod, true),
            ("spec.nodeName==node-1", &pod, true),
            ("spec.nodeName=node-2", &pod, false),
            ("spec.nodeName!=node-2", &pod, true),
            ("spec.nodeName=", &unbound, true),
            ("spec.nodeName=", &pod, false),
            ("spec.nodeName!=", &pod, true),
            ("metadata.name=web,status.phase=Running", &pod, true),
            ("metadata.name=web,status.phase!=Running", &pod, false),
            ("spec.hostNetwork=true", &pod, true),
            ("spec.hostNetwork=false", &unbound, true),
        ];
        for (selector, obj, want) in cases {
            let parsed = FieldSelector::parse(selector).unwrap();
            parsed.check_supported("pods").unwrap();
            assert_eq!(parsed.matches_object("pods", obj), *want, "{selector:?}");
        }
    }

    #[test]
    fn field_selector_escapes_and_support() {
        let parsed = FieldSelector::parse(r"metadata.name=a\,b").unwrap();
        assert!(parsed.matches_object("configmaps", &json!({"metadata": {"name": "a,b"}})));
        assert_eq!(
            FieldSelector::parse("spec.foo=x")
                .unwrap()
                .check_supported("pods"),
            Err(SelectorError::UnsupportedField("spec.foo".into()))
        );
        assert_eq!(
            FieldSelector::parse("spec.nodeName=x")
                .unwrap()
                .check_supported("configmaps"),
            Err(SelectorError::UnsupportedField("spec.nodeName".into()))
        );
        assert!(FieldSelector::parse("nonsense").is_err());
        let event = json!({"involvedObject": {"kind": "Pod", "name": "web"}, "source": {"component": "kubelet"}});
        let sel =
            FieldSelector::parse("involvedObject.kind=Pod,involvedObject.name=web,source=kubelet")
                .unwrap();
        sel.check_supported("events").unwrap();
        assert!(sel.matches_object("events", &event));
        assert_eq!(
            FieldSelector::parse("spec.nodeName=n1")
                .unwrap()
                .equality_value("spec.nodeName"),
            Some("n1")
        );
    }
}
