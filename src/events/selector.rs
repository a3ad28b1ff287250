//! Field selectors over events (`?fieldSelector=involvedObject.uid=…`), with the API server's
//! syntax (`a=b,c!=d`, `==` as `=`, `\,` `\=` `\\` escapes; other escapes, which the API server
//! rejects, just lose the backslash) and its set of selectable event fields, so the same query works
//! against nodelet and against `kubectl get events --field-selector`.

use k8s_openapi::api::core::v1::Event;

/// The fields the API server lets one select events by (`EventToSelectableFields`).
pub const SELECTABLE_FIELDS: &[&str] = &[
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

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The API server's message for a field it cannot select on.
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
    /// The API server's message for a term without an operator.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    Malformed { selector: String, term: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    field: String,
    value: String,
    equal: bool,
}

/// A parsed field selector: every term must hold. Empty selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<Requirement>,
}

/// Splits `s` at unescaped `sep` characters, keeping escapes in place.
fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(String::new());
            continue;
        }
        if let Some(last) = parts.last_mut() {
            last.push(c);
        }
    }
    parts
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut escaped = false;
    for c in s.chars() {
        if !escaped && c == '\\' {
            escaped = true;
            continue;
        }
        escaped = false;
        out.push(c);
    }
    out
}

/// The first unescaped operator of a term: (byte offset, operator length, equality).
fn find_operator(term: &str) -> Option<(usize, usize, bool)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'!' if bytes.get(i + 1) == Some(&b'=') => return Some((i, 2, false)),
            b'=' if bytes.get(i + 1) == Some(&b'=') => return Some((i, 2, true)),
            b'=' => return Some((i, 1, true)),
            _ => i += 1,
        }
    }
    None
}

impl FieldSelector {
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for term in split_unescaped(selector, ',') {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let Some((at, len, equal)) = find_operator(term) else {
                return Err(SelectorError::Malformed {
                    selector: selector.to_string(),
                    term: term.to_string(),
                });
            };
            let field = unescape(term[..at].trim());
            if !SELECTABLE_FIELDS.contains(&field.as_str()) {
                return Err(SelectorError::UnsupportedField(field));
            }
            requirements.push(Requirement {
                field,
                value: unescape(term[at + len..].trim()),
                equal,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Only events whose involved object has this UID (what `?pod=<uid>` means).
    pub fn involved_uid(uid: &str) -> Self {
        FieldSelector {
            requirements: vec![Requirement {
                field: "involvedObject.uid".into(),
                value: uid.into(),
                equal: true,
            }],
        }
    }

    /// Both selectors must hold.
    pub fn and(mut self, other: FieldSelector) -> Self {
        self.requirements.extend(other.requirements);
        self
    }

    pub fn matches(&self, event: &Event) -> bool {
        self.requirements
            .iter()
            .all(|r| (field_value(event, &r.field) == r.value) == r.equal)
    }
}

/// The value of a selectable field; missing fields select as "".
fn field_value<'a>(event: &'a Event, field: &str) -> &'a str {
    let o = &event.involved_object;
    let value = match field {
        "metadata.name" => &event.metadata.name,
        "metadata.namespace" => &event.metadata.namespace,
        "involvedObject.kind" => &o.kind,
        "involvedObject.namespace" => &o.namespace,
        "involvedObject.name" => &o.name,
        "involvedObject.uid" => &o.uid,
        "involvedObject.apiVersion" => &o.api_version,
        "involvedObject.resourceVersion" => &o.resource_version,
        "involvedObject.fieldPath" => &o.field_path,
        "reason" => &event.reason,
        "reportingComponent" => &event.reporting_component,
        "type" => &event.type_,
        "source" => {
            // The API server: source.component, else reportingComponent.
            let component = event.source.as_ref().and_then(|s| s.component.as_deref());
            return component
                .filter(|c| !c.is_empty())
                .or(event.reporting_component.as_deref())
                .unwrap_or_default();
        }
        _ => return "",
    };
    value.as_deref().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EventSource, ObjectReference};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn event() -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some("web.1".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: Some("Pod".into()),
                name: Some("web".into()),
                uid: Some("u1".into()),
                field_path: Some("spec.containers{app}".into()),
                ..Default::default()
            },
            reason: Some("BackOff".into()),
            type_: Some("Warning".into()),
            source: Some(EventSource {
                component: Some("kubelet".into()),
                host: Some("n1".into()),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn parse_and_match_table() {
        let cases: &[(&str, Result<bool, &str>)] = &[
            ("", Ok(true)),
            ("involvedObject.uid=u1", Ok(true)),
            ("involvedObject.uid==u1", Ok(true)),
            ("involvedObject.uid=u2", Ok(false)),
            ("involvedObject.uid!=u2", Ok(true)),
            ("involvedObject.uid=u1,type=Warning", Ok(true)),
            ("involvedObject.uid=u1, type=Normal", Ok(false)),
            ("involvedObject.fieldPath=spec.containers{app}", Ok(true)),
            ("source=kubelet,reason=BackOff", Ok(true)),
            // A missing field selects as the empty string.
            ("involvedObject.namespace=", Ok(true)),
            ("metadata.name=web.1", Ok(true)),
            ("reason=Back\\,Off", Ok(false)),
            (
                "spec.nodeName=n1",
                Err("field label not supported: spec.nodeName"),
            ),
            (
                "involvedObject.uid",
                Err(
                    "invalid selector: 'involvedObject.uid'; can't understand 'involvedObject.uid'",
                ),
            ),
        ];
        let e = event();
        for (selector, expected) in cases {
            let got = FieldSelector::parse(selector)
                .map(|s| s.matches(&e))
                .map_err(|err| err.to_string());
            assert_eq!(got, expected.map_err(str::to_string), "{selector:?}");
        }
    }

    #[test]
    fn involved_uid_and_combination() {
        let e = event();
        assert!(FieldSelector::involved_uid("u1").matches(&e));
        assert!(!FieldSelector::involved_uid("u2").matches(&e));
        let both =
            FieldSelector::involved_uid("u1").and(FieldSelector::parse("type=Normal").unwrap());
        assert!(!both.matches(&e));
    }
}
