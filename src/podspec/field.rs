//! Field paths and field errors shaped like apimachinery's `field.Path` / `field.Error`, plus the
//! string-format checks of `k8s.io/apimachinery/pkg/util/validation` that pod validation uses.
//!
//! Users diff nodelet's messages against the kubelet's, so the wording, the quoting of bad values
//! and the order of "supported values" follow Go's `field.Error.Error()` exactly.

use std::fmt;

/// A field path such as `spec.containers[1].ports[0].containerPort` or
/// `spec.containers[0].resources.limits[cpu]` (map keys in brackets, like Go's `Path.Key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath(String);

impl FieldPath {
    pub fn new(root: &str) -> Self {
        FieldPath(root.to_string())
    }

    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            FieldPath(name.to_string())
        } else {
            FieldPath(format!("{}.{name}", self.0))
        }
    }

    pub fn index(&self, i: usize) -> Self {
        FieldPath(format!("{}[{i}]", self.0))
    }

    pub fn key(&self, key: &str) -> Self {
        FieldPath(format!("{}[{key}]", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The kind of a field error; its `Display` is the Go `ErrorType` string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorKind {
    Required,
    Invalid,
    NotSupported,
    Duplicate,
    Forbidden,
    NotFound,
    TooLong,
    TooMany,
    /// A field name that is not part of the schema (strict decoding of the configuration file:
    /// `fooBar: Unknown field`).
    Unknown,
}

impl fmt::Display for FieldErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Invalid => "Invalid value",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::Duplicate => "Duplicate value",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::NotFound => "Not found",
            FieldErrorKind::TooLong => "Too long",
            FieldErrorKind::TooMany => "Too many",
            FieldErrorKind::Unknown => "Unknown field",
        })
    }
}

/// One field error, apimachinery's `field.Error`: which field, what kind of problem, the
/// offending value (already rendered the way Go prints it: strings quoted, numbers bare) and
/// why. The one field-error type of nodelet: the configuration file (`config`), pod manifests,
/// pod validation (`source`) and the container and sandbox config builders (a bad field there is
/// `podspec::ConfigError::Field`) report with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {}", self.body())]
pub struct FieldError {
    pub path: String,
    pub kind: FieldErrorKind,
    pub value: Option<String>,
    pub detail: String,
}

impl FieldError {
    fn new(path: &FieldPath, kind: FieldErrorKind, value: Option<String>, detail: String) -> Self {
        FieldError {
            path: path.to_string(),
            kind,
            value,
            detail,
        }
    }

    pub fn required(path: &FieldPath, detail: &str) -> Self {
        Self::new(path, FieldErrorKind::Required, None, detail.to_string())
    }

    pub fn invalid(path: &FieldPath, value: impl BadValue, detail: impl Into<String>) -> Self {
        Self::new(
            path,
            FieldErrorKind::Invalid,
            Some(value.render()),
            detail.into(),
        )
    }

    /// `supported` is printed in the order given (Go callers pass either a literal list or a
    /// sorted set; callers here do the same).
    pub fn not_supported(path: &FieldPath, value: impl BadValue, supported: &[&str]) -> Self {
        let list = supported
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        Self::new(
            path,
            FieldErrorKind::NotSupported,
            Some(value.render()),
            format!("supported values: {list}"),
        )
    }

    pub fn duplicate(path: &FieldPath, value: impl BadValue) -> Self {
        Self::new(
            path,
            FieldErrorKind::Duplicate,
            Some(value.render()),
            String::new(),
        )
    }

    pub fn forbidden(path: &FieldPath, detail: impl Into<String>) -> Self {
        Self::new(path, FieldErrorKind::Forbidden, None, detail.into())
    }

    pub fn not_found(path: &FieldPath, value: impl BadValue) -> Self {
        Self::new(
            path,
            FieldErrorKind::NotFound,
            Some(value.render()),
            String::new(),
        )
    }

    pub fn too_long_bytes(path: &FieldPath, max: usize) -> Self {
        Self::new(
            path,
            FieldErrorKind::TooLong,
            None,
            format!("must have at most {max} bytes"),
        )
    }

    pub fn too_many(path: &FieldPath, actual: usize, max: usize) -> Self {
        Self::new(
            path,
            FieldErrorKind::TooMany,
            Some(actual.to_string()),
            format!("must have at most {max} items"),
        )
    }

    /// Everything after `path: `, e.g. `Invalid value: "Web": a lowercase RFC 1123 ...`.
    pub fn body(&self) -> String {
        let mut s = self.kind.to_string();
        if let Some(v) = &self.value {
            s.push_str(": ");
            s.push_str(v);
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

/// A value that can appear in a field error, rendered like Go's `field.Error` does.
pub trait BadValue {
    fn render(&self) -> String;
}

impl BadValue for &str {
    fn render(&self) -> String {
        format!("{self:?}")
    }
}

impl BadValue for &String {
    fn render(&self) -> String {
        format!("{self:?}")
    }
}

impl BadValue for String {
    fn render(&self) -> String {
        format!("{self:?}")
    }
}

macro_rules! bad_value_int {
    ($($t:ty),*) => {$(
        impl BadValue for $t {
            fn render(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
bad_value_int!(i32, i64, u32, usize);

// ---- string formats (k8s.io/apimachinery/pkg/util/validation) ----

pub const DNS1123_LABEL_MAX_LEN: usize = 63;
pub const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;
const QUALIFIED_NAME_MAX_LEN: usize = 63;
const LABEL_VALUE_MAX_LEN: usize = 63;
const PORT_NAME_MAX_LEN: usize = 15;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const HTTP_HEADER_FMT: &str = "[-A-Za-z0-9]+";
const HTTP_HEADER_ERR: &str = "a valid HTTP header must consist of alphanumeric characters or '-'";

/// Go's `RegexError`, including its double space between examples.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut s = format!("{msg} (e.g. ");
    for (i, ex) in examples.iter().enumerate() {
        if i > 0 {
            s.push_str(" or ");
        }
        s.push_str(&format!("'{ex}', "));
    }
    s.push_str(&format!("regex used for validation is '{fmt}')"));
    s
}

pub fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

pub fn inclusive_range_error(lo: i64, hi: i64) -> String {
    format!("must be between {lo} and {hi}, inclusive")
}

pub const EMPTY_ERROR: &str = "must be non-empty";

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

fn matches_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_lower_alnum(b[0])
        && is_lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
}

/// `IsDNS1123Label`: messages, empty when valid.
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX_LEN {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LEN));
    }
    if !matches_dns1123_label(s) {
        errs.push(regex_error(
            DNS1123_LABEL_ERR,
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    errs
}

/// `IsDNS1123Subdomain`: messages, empty when valid.
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX_LEN {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LEN));
    }
    if !s.split('.').all(matches_dns1123_label) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

fn matches_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
}

/// `IsQualifiedName`: `[prefix/]name` where prefix is a DNS subdomain.
pub fn qualified_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push(format!("prefix part {EMPTY_ERROR}"));
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {EMPTY_ERROR}"));
    } else if name.len() > QUALIFIED_NAME_MAX_LEN {
        errs.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LEN)
        ));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`.
pub fn label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > LABEL_VALUE_MAX_LEN {
        errs.push(max_len_error(LABEL_VALUE_MAX_LEN));
    }
    if !s.is_empty() && !matches_qualified_name_part(s) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `IsValidPortNum`.
pub fn port_num(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) {
        Vec::new()
    } else {
        vec![inclusive_range_error(1, 65535)]
    }
}

/// `IsValidPortName` (an IANA_SVC_NAME).
pub fn port_name(port: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if port.len() > PORT_NAME_MAX_LEN {
        errs.push(max_len_error(PORT_NAME_MAX_LEN));
    }
    let b = port.as_bytes();
    if b.is_empty() || !b.iter().all(|&c| is_lower_alnum(c) || c == b'-') {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if !b.iter().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".into());
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens".into());
    }
    if !b.is_empty() && (b[0] == b'-' || b[b.len() - 1] == b'-') {
        errs.push("must not begin or end with a hyphen".into());
    }
    errs
}

/// `IsRelaxedEnvVarName` (RelaxedEnvironmentVariableValidation is GA): any printable ASCII
/// character except `=`.
pub fn env_var_name(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.is_empty() {
        errs.push(format!("environment variable name {EMPTY_ERROR}"));
    }
    if name.chars().any(|c| !(' '..='~').contains(&c) || c == '=') {
        errs.push(
            "a valid environment variable name must consist only of printable ASCII characters other than '='"
                .into(),
        );
    }
    errs
}

/// `IsHTTPHeaderName`.
pub fn http_header_name(name: &str) -> Vec<String> {
    let b = name.as_bytes();
    if !b.is_empty() && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'-') {
        Vec::new()
    } else {
        vec![regex_error(
            HTTP_HEADER_ERR,
            HTTP_HEADER_FMT,
            &["X-Header-Name"],
        )]
    }
}

/// `IsValidIP` (as a message list).
pub fn ip_address(s: &str) -> Vec<String> {
    if s.parse::<std::net::IpAddr>().is_ok() {
        Vec::new()
    } else {
        vec!["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".into()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_like_go() {
        let p = FieldPath::new("spec")
            .child("containers")
            .index(1)
            .child("resources")
            .child("limits")
            .key("cpu");
        assert_eq!(p.as_str(), "spec.containers[1].resources.limits[cpu]");
    }

    #[test]
    fn error_bodies_match_go_format() {
        let p = FieldPath::new("spec").child("x");
        let cases: Vec<(FieldError, &str)> = vec![
            (FieldError::required(&p, ""), "spec.x: Required value"),
            (
                FieldError::required(&p, "must specify a handler type"),
                "spec.x: Required value: must specify a handler type",
            ),
            (
                FieldError::invalid(&p, 70000i32, inclusive_range_error(1, 65535)),
                "spec.x: Invalid value: 70000: must be between 1 and 65535, inclusive",
            ),
            (
                FieldError::invalid(&p, "a b", "bad"),
                "spec.x: Invalid value: \"a b\": bad",
            ),
            (
                FieldError::not_supported(&p, "Sometimes", &["Always", "OnFailure", "Never"]),
                "spec.x: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            ),
            (
                FieldError::duplicate(&p, "web"),
                "spec.x: Duplicate value: \"web\"",
            ),
            (
                FieldError::forbidden(&p, "may not be set"),
                "spec.x: Forbidden: may not be set",
            ),
            (
                FieldError::not_found(&p, "data"),
                "spec.x: Not found: \"data\"",
            ),
            (
                FieldError::too_long_bytes(&p, 10),
                "spec.x: Too long: must have at most 10 bytes",
            ),
            (
                FieldError::too_many(&p, 21, 20),
                "spec.x: Too many: 21: must have at most 20 items",
            ),
        ];
        for (err, want) in cases {
            assert_eq!(err.to_string(), want);
        }
    }

    #[test]
    fn dns_labels_and_subdomains() {
        // (input, label ok, subdomain ok)
        let long_label = "a".repeat(64);
        let long_sub = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(63)
        );
        let cases: &[(&str, bool, bool)] = &[
            ("web", true, true),
            ("web-1", true, true),
            ("1web", true, true),
            ("Web", false, false),
            ("-web", false, false),
            ("web-", false, false),
            ("web.example", false, true),
            ("web..example", false, false),
            ("web_1", false, false),
            ("", false, false),
            (&long_label, false, true), // Go's subdomain regex has no per-label limit
            (&long_sub, false, false),
        ];
        for (input, label_ok, sub_ok) in cases {
            assert_eq!(
                dns1123_label(input).is_empty(),
                *label_ok,
                "label {input:?}"
            );
            assert_eq!(
                dns1123_subdomain(input).is_empty(),
                *sub_ok,
                "subdomain {input:?}"
            );
        }
        assert_eq!(
            dns1123_label("Web"),
            vec!["a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".to_string()]
        );
        assert_eq!(
            dns1123_label(&long_label),
            vec!["must be no more than 63 characters".to_string()]
        );
    }

    #[test]
    fn qualified_names_and_label_values() {
        // (input, qualified name ok, label value ok)
        let cases: &[(&str, bool, bool)] = &[
            ("app", true, true),
            ("App.Name_1", true, true),
            ("example.com/app", true, false),
            ("Example.com/app", false, false),
            ("/app", false, false),
            ("a/b/c", false, false),
            ("", false, true),
            ("-app", false, false),
        ];
        for (input, qn_ok, lv_ok) in cases {
            assert_eq!(
                qualified_name(input).is_empty(),
                *qn_ok,
                "qualified {input:?}"
            );
            assert_eq!(
                label_value(input).is_empty(),
                *lv_ok,
                "label value {input:?}"
            );
        }
    }

    #[test]
    fn port_names_ports_env_names_headers_ips() {
        let port_names: &[(&str, usize)] = &[
            ("http", 0),
            ("http-alt", 0),
            ("metrics-port-123", 1), // 16 chars
            ("HTTP", 2),             // charset + no lowercase letter
            ("80", 1),               // no letter
            ("a--b", 1),
            ("-http", 1),
        ];
        for (name, n) in port_names {
            assert_eq!(
                port_name(name).len(),
                *n,
                "port name {name:?}: {:?}",
                port_name(name)
            );
        }
        let ports: &[(i64, bool)] = &[
            (0, false),
            (1, true),
            (65535, true),
            (65536, false),
            (-1, false),
        ];
        for (p, ok) in ports {
            assert_eq!(port_num(*p).is_empty(), *ok, "port {p}");
        }
        let envs: &[(&str, bool)] = &[
            ("PATH", true),
            ("my.var-1", true),
            ("1ST", true),
            ("A=B", false),
            ("", false),
            ("TAB\t", false),
        ];
        for (e, ok) in envs {
            assert_eq!(env_var_name(e).is_empty(), *ok, "env {e:?}");
        }
        let headers: &[(&str, bool)] = &[("X-Token", true), ("X Token", false), ("", false)];
        for (h, ok) in headers {
            assert_eq!(http_header_name(h).is_empty(), *ok, "header {h:?}");
        }
        let ips: &[(&str, bool)] = &[("10.0.0.1", true), ("::1", true), ("10.0.0", false)];
        for (ip, ok) in ips {
            assert_eq!(ip_address(ip).is_empty(), *ok, "ip {ip:?}");
        }
    }
}
