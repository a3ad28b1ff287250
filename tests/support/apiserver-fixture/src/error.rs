//! Errors: `ApiError` is what a client sees (a `Status` object with the API server's reason, code and
//! message); `FixtureError` is what the library's own API (start/resume/typed helpers) returns.

use serde_json::{json, Value};

use crate::resource::ResourceType;

/// One field error of an `Invalid` (422) response, as in `field.Error` of the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueForbidden`, ...
    pub reason: &'static str,
    /// Field path, e.g. `spec.containers[0].image`.
    pub field: String,
    /// The detail message as the API server renders it, e.g. `Required value`.
    pub message: String,
}

impl FieldError {
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        FieldError {
            reason: "FieldValueRequired",
            field: field.into(),
            message,
        }
    }

    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        let shown = match value {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        FieldError {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {shown}: {detail}"),
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        FieldError {
            reason: "FieldValueForbidden",
            field: field.into(),
            message: format!("Forbidden: {detail}"),
        }
    }

    fn rendered(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// The message part and `details.causes` of an `Invalid` error.
fn joined_causes(errors: &[FieldError]) -> (String, Vec<Value>) {
    let rendered: Vec<String> = errors.iter().map(FieldError::rendered).collect();
    let joined = if rendered.len() == 1 {
        rendered[0].clone()
    } else {
        format!("[{}]", rendered.join(", "))
    };
    let causes = errors
        .iter()
        .map(|e| json!({"reason": e.reason, "message": e.message, "field": e.field}))
        .collect();
    (joined, causes)
}

/// An error answered to a client as a `metav1.Status` (kind Status, status Failure).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: String, details: Option<Value>) -> Self {
        ApiError {
            code,
            reason,
            message,
            details,
        }
    }

    /// `pods "web" not found` (details.kind is the resource, as the API server does).
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        let mut details = json!({"name": name, "kind": rt.plural});
        if !rt.group.is_empty() {
            details["group"] = json!(rt.group);
        }
        Self::new(
            404,
            "NotFound",
            format!("{} {name:?} not found", rt.qualified_resource()),
            Some(details),
        )
    }

    /// 401: the credentials do not authenticate, or none were given where they are needed.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized".into(), Some(json!({})))
    }

    /// 403 from the authorizer for a resource request (`pods is forbidden: User "x" cannot
    /// list resource "pods" in API group "" in the namespace "default"`).
    pub fn forbidden_user(
        user: &str,
        verb: &str,
        rt: &ResourceType,
        name: Option<&str>,
        namespace: Option<&str>,
        subresource: Option<&str>,
    ) -> Self {
        let subject = match name {
            Some(name) => format!("{} {name:?}", rt.qualified_resource()),
            None => rt.qualified_resource(),
        };
        let resource = match subresource {
            Some(sub) => format!("{}/{sub}", rt.plural),
            None => rt.plural.to_string(),
        };
        let scope = match namespace {
            Some(ns) => format!("in the namespace {ns:?}"),
            None => "at the cluster scope".to_string(),
        };
        let mut details = json!({"kind": rt.plural});
        if let Some(name) = name {
            details["name"] = json!(name);
        }
        if !rt.group.is_empty() {
            details["group"] = json!(rt.group);
        }
        Self::new(
            403,
            "Forbidden",
            format!(
                "{subject} is forbidden: User {user:?} cannot {verb} resource {resource:?} in API group {:?} {scope}",
                rt.group
            ),
            Some(details),
        )
    }

    /// 403 from the authorizer for a path that is not a resource.
    pub fn forbidden_path(user: &str, verb: &str, path: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!("forbidden: User {user:?} cannot {verb} path {path:?}"),
            Some(json!({})),
        )
    }

    /// 404 for a path the server does not serve.
    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
            Some(json!({})),
        )
    }

    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        let mut details = json!({"name": name, "kind": rt.plural});
        if !rt.group.is_empty() {
            details["group"] = json!(rt.group);
        }
        Self::new(
            409,
            "AlreadyExists",
            format!("{} {name:?} already exists", rt.qualified_resource()),
            Some(details),
        )
    }

    /// An update whose resourceVersion is stale.
    pub fn update_conflict(rt: &ResourceType, name: &str) -> Self {
        Self::conflict_on(
            &rt.qualified_resource(),
            rt.group,
            rt.plural,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// A failed delete precondition: the API server names the Kind here (`on Pod "web"`), not the resource.
    pub fn precondition_conflict(rt: &ResourceType, name: &str, detail: &str) -> Self {
        let qualified = if rt.group.is_empty() {
            rt.kind.to_string()
        } else {
            format!("{}.{}", rt.kind, rt.group)
        };
        Self::conflict_on(&qualified, rt.group, rt.kind, name, detail)
    }

    fn conflict_on(qualified: &str, group: &str, kind: &str, name: &str, detail: &str) -> Self {
        let mut details = json!({"name": name, "kind": kind});
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {qualified} {name:?}: {detail}"),
            Some(details),
        )
    }

    /// 422 with causes: `Pod "web" is invalid: spec.containers[0].image: Required value`.
    pub fn invalid(rt: &ResourceType, name: &str, errors: &[FieldError]) -> Self {
        let (joined, causes) = joined_causes(errors);
        let mut details = json!({"name": name, "kind": rt.kind, "causes": causes});
        if !rt.group.is_empty() {
            details["group"] = json!(rt.group);
        }
        Self::new(
            422,
            "Invalid",
            format!("{} {name:?} is invalid: {joined}", rt.kind),
            Some(details),
        )
    }

    /// 422 for a kind that is not a stored resource (`TokenRequest.authentication.k8s.io ""
    /// is invalid: ...`): the API server qualifies the Kind with its group.
    pub fn invalid_group_kind(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Self {
        let (joined, causes) = joined_causes(errors);
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut details = json!({"name": name, "kind": kind, "causes": causes});
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        Self::new(
            422,
            "Invalid",
            format!("{qualified} {name:?} is invalid: {joined}"),
            Some(details),
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into(), None)
    }

    pub fn forbidden(rt: &ResourceType, name: &str, detail: &str) -> Self {
        let mut details = json!({"name": name, "kind": rt.plural});
        if !rt.group.is_empty() {
            details["group"] = json!(rt.group);
        }
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} {name:?} is forbidden: {detail}",
                rt.qualified_resource()
            ),
            Some(details),
        )
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource".into(),
            Some(json!({})),
        )
    }

    /// 415; `accepted` lists the media types of the API server's message for this kind of request.
    pub fn unsupported_media_type(content_type: &str, accepted: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: {accepted} (got {content_type:?})"),
            None,
        )
    }

    pub const PATCH_MEDIA_TYPES: &'static str = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json";
    pub const BODY_MEDIA_TYPES: &'static str =
        "application/json, application/yaml, application/vnd.kubernetes.protobuf";

    /// The watch cache no longer holds the requested resourceVersion.
    pub fn expired(requested: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
            None,
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message.into(), None)
    }

    /// An error that was not an API status inside the real server (`ErrorToAPIStatus`): no
    /// reason, the Go error's text as the message.
    pub fn unknown(code: u16, message: impl Into<String>) -> Self {
        Self::new(code, "", message.into(), None)
    }

    /// The `Status` object sent as the response body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty() {
            // metav1.Status has `reason,omitempty`.
            if let Some(m) = status.as_object_mut() {
                m.remove("reason");
            }
        }
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

/// Errors of the library API (not of requests).
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("binding 127.0.0.1:{port}: {source}")]
    Bind { port: u16, source: std::io::Error },
    #[error("{0}")]
    Api(#[from] ApiError),
    #[error("type {kind} is not served by the fixture")]
    UnknownKind { kind: String },
    #[error("encoding {kind} {name:?}: {source}")]
    Encode {
        kind: String,
        name: String,
        source: serde_json::Error,
    },
    #[error("decoding {kind} {name:?} from the store: {source}")]
    Decode {
        kind: String,
        name: String,
        source: serde_json::Error,
    },
    #[error("state file {path}: {source}")]
    StateIo {
        path: String,
        source: std::io::Error,
    },
    #[error("state file {path}: {source}")]
    StateJson {
        path: String,
        source: serde_json::Error,
    },
    #[error("TLS: {0}")]
    Tls(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    #[test]
    fn statuses_carry_the_api_server_messages() {
        let pods = resource::find_by_plural("", "v1", "pods").unwrap();
        let leases = resource::find_by_plural("coordination.k8s.io", "v1", "leases").unwrap();
        let cases: Vec<(ApiError, u16, &str, &str)> = vec![
            (ApiError::not_found(pods, "web"), 404, "NotFound", r#"pods "web" not found"#),
            (
                ApiError::not_found(leases, "n1"),
                404,
                "NotFound",
                r#"leases.coordination.k8s.io "n1" not found"#,
            ),
            (ApiError::already_exists(pods, "web"), 409, "AlreadyExists", r#"pods "web" already exists"#),
            (
                ApiError::update_conflict(pods, "web"),
                409,
                "Conflict",
                r#"Operation cannot be fulfilled on pods "web": the object has been modified; please apply your changes to the latest version and try again"#,
            ),
            (
                ApiError::precondition_conflict(pods, "web", "the UID in the precondition (a) does not match the UID in record (b). The object might have been deleted and then recreated"),
                409,
                "Conflict",
                r#"Operation cannot be fulfilled on Pod "web": the UID in the precondition (a) does not match the UID in record (b). The object might have been deleted and then recreated"#,
            ),
            (
                ApiError::invalid(pods, "web", &[FieldError::required("spec.containers[0].image", "")]),
                422,
                "Invalid",
                r#"Pod "web" is invalid: spec.containers[0].image: Required value"#,
            ),
            (
                ApiError::invalid(
                    pods,
                    "web",
                    &[
                        FieldError::required("spec.containers[0].image", ""),
                        FieldError::required("spec.containers[1].name", ""),
                    ],
                ),
                422,
                "Invalid",
                r#"Pod "web" is invalid: [spec.containers[0].image: Required value, spec.containers[1].name: Required value]"#,
            ),
            (ApiError::expired(3, 10), 410, "Expired", "too old resource version: 3 (10)"),
        ];
        for (err, code, reason, message) in cases {
            let status = err.to_status();
            assert_eq!(status["kind"], "Status");
            assert_eq!(status["status"], "Failure");
            assert_eq!(status["code"], code, "{message}");
            assert_eq!(status["reason"], reason, "{message}");
            assert_eq!(status["message"], message);
        }
    }

    #[test]
    fn invalid_lists_causes_with_field_paths() {
        let pods = resource::find_by_plural("", "v1", "pods").unwrap();
        let err = ApiError::invalid(pods, "web", &[FieldError::required("spec.containers", "")]);
        let status = err.to_status();
        assert_eq!(status["details"]["kind"], "Pod");
        assert_eq!(status["details"]["causes"][0]["field"], "spec.containers");
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "FieldValueRequired"
        );
    }
}
