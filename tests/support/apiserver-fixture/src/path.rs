//! Request paths → what they address (`/api/v1/namespaces/default/pods/web/status`).

use crate::resource::{self, ResourceType};

/// The object or collection a resource path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub resource: &'static ResourceType,
    /// Namespace from the path (`None` for cluster-scoped resources and all-namespace collections).
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// Why a path does not address a served resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathError {
    /// Not a resource path at all, or an unknown group/version/resource: 404.
    NotFound,
}

/// Parses `/api/v1/...` and `/apis/GROUP/VERSION/...` resource paths.
///
/// The API server's rule for the ambiguous shapes: `/api/v1/namespaces/X/Y` is the collection `Y`
/// in namespace `X` unless `Y` is a namespace subresource (`status`, `finalize`).
pub fn parse(path: &str) -> Result<Target, PathError> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(PathError::NotFound),
    };
    let lookup =
        |plural: &str| resource::find_by_plural(group, version, plural).ok_or(PathError::NotFound);
    let owned = |s: &str| Some(s.to_string());
    let target = match rest {
        [plural] => Target {
            resource: lookup(plural)?,
            namespace: None,
            name: None,
            subresource: None,
        },
        ["namespaces", ns, sub] if group.is_empty() && (*sub == "status" || *sub == "finalize") => {
            Target {
                resource: lookup("namespaces")?,
                namespace: None,
                name: owned(ns),
                subresource: owned(sub),
            }
        }
        ["namespaces", ns, plural, tail @ ..] => {
            let rt = lookup(plural)?;
            if !rt.namespaced {
                return Err(PathError::NotFound);
            }
            match tail {
                [] => Target {
                    resource: rt,
                    namespace: owned(ns),
                    name: None,
                    subresource: None,
                },
                [name] => Target {
                    resource: rt,
                    namespace: owned(ns),
                    name: owned(name),
                    subresource: None,
                },
                [name, sub] => Target {
                    resource: rt,
                    namespace: owned(ns),
                    name: owned(name),
                    subresource: owned(sub),
                },
                _ => return Err(PathError::NotFound),
            }
        }
        // A cluster-scoped object, with or without a subresource.
        [plural, name, sub @ ..] if sub.len() <= 1 => {
            let rt = lookup(plural)?;
            if rt.namespaced {
                return Err(PathError::NotFound);
            }
            Target {
                resource: rt,
                namespace: None,
                name: owned(name),
                subresource: sub.first().and_then(|s| owned(s)),
            }
        }
        _ => return Err(PathError::NotFound),
    };
    if target.name.as_deref() == Some("") || target.namespace.as_deref() == Some("") {
        return Err(PathError::NotFound);
    }
    if let Some(sub) = &target.subresource {
        let served = match sub.as_str() {
            "status" => target.resource.status_subresource,
            "binding"
            | "log"
            | "exec"
            | "attach"
            | "portforward"
            | "ephemeralcontainers"
            | "resize" => target.resource.is_pod(),
            "token" => target.resource.storage == "serviceaccounts",
            "approval" => target.resource.storage == "certificatesigningrequests",
            _ => false,
        };
        if !served {
            return Err(PathError::NotFound);
        }
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_resource_paths() {
        // (path, plural, namespace, name, subresource) or None for 404
        type Expect = Option<(
            &'static str,
            Option<&'static str>,
            Option<&'static str>,
            Option<&'static str>,
        )>;
        let cases: &[(&str, Expect)] = &[
            ("/api/v1/pods", Some(("pods", None, None, None))),
            (
                "/api/v1/namespaces/default/pods",
                Some(("pods", Some("default"), None, None)),
            ),
            (
                "/api/v1/namespaces/default/pods/web",
                Some(("pods", Some("default"), Some("web"), None)),
            ),
            (
                "/api/v1/namespaces/default/pods/web/status",
                Some(("pods", Some("default"), Some("web"), Some("status"))),
            ),
            ("/api/v1/namespaces", Some(("namespaces", None, None, None))),
            (
                "/api/v1/namespaces/default",
                Some(("namespaces", None, Some("default"), None)),
            ),
            (
                "/api/v1/namespaces/default/status",
                Some(("namespaces", None, Some("default"), Some("status"))),
            ),
            ("/api/v1/nodes/n1", Some(("nodes", None, Some("n1"), None))),
            (
                "/api/v1/nodes/n1/status",
                Some(("nodes", None, Some("n1"), Some("status"))),
            ),
            (
                "/api/v1/namespaces/default/pods/web/binding",
                Some(("pods", Some("default"), Some("web"), Some("binding"))),
            ),
            ("/api/v1/nodes/n1/binding", None),
            (
                "/api/v1/namespaces/default/serviceaccounts/default/token",
                Some((
                    "serviceaccounts",
                    Some("default"),
                    Some("default"),
                    Some("token"),
                )),
            ),
            ("/api/v1/namespaces/default/pods/web/token", None),
            (
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
                Some(("leases", Some("kube-node-lease"), Some("n1"), None)),
            ),
            (
                "/apis/events.k8s.io/v1/events",
                Some(("events", None, None, None)),
            ),
            (
                "/api/v1/namespaces/default/pods/web/log",
                Some(("pods", Some("default"), Some("web"), Some("log"))),
            ),
            // not served
            ("/api/v1/namespaces/default/configmaps/c/log", None),
            ("/api/v1/namespaces/default/configmaps/c/status", None),
            ("/api/v1/namespaces/default/nodes", None),
            ("/api/v1/pods/web", None),
            ("/api/v1/deployments", None),
            ("/apis/apps/v1/deployments", None),
            ("/api/v2/pods", None),
            ("/healthz", None),
            ("/api/v1/namespaces/default/pods/web/status/x", None),
        ];
        for (path, expect) in cases {
            let got = parse(path).ok().map(|t| {
                (
                    t.resource.plural,
                    t.namespace.clone(),
                    t.name.clone(),
                    t.subresource.clone(),
                )
            });
            let want = expect.map(|(p, ns, n, s)| {
                (
                    p,
                    ns.map(String::from),
                    n.map(String::from),
                    s.map(String::from),
                )
            });
            assert_eq!(got, want, "{path}");
        }
    }

    #[test]
    fn group_distinguishes_events() {
        let core = parse("/api/v1/namespaces/default/events").unwrap();
        let grouped = parse("/apis/events.k8s.io/v1/namespaces/default/events").unwrap();
        assert_eq!(core.resource.group, "");
        assert_eq!(grouped.resource.group, "events.k8s.io");
        assert_eq!(core.resource.storage, grouped.resource.storage);
    }
}
