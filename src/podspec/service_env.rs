//! Service environment variables ("service links"): the kubelet's `getServiceEnvVarMap`
//! (`pkg/kubelet/kubelet_pods.go`) and `envvars.FromServices` (`pkg/kubelet/envvars`).
//!
//! Every container of a pod in cluster mode gets `KUBERNETES_SERVICE_HOST`/`_PORT` (the master
//! service `kubernetes` in `default`, which `rest.InClusterConfig()` reads) and, unless the pod
//! sets `enableServiceLinks: false`, the Docker-link style variables of every service of its own
//! namespace that has a cluster IP. Standalone there is no service at all, as in a kubelet
//! without an API client.
//!
//! What the node has read of the services is a value ([`ServicesRead`]); which services a pod
//! sees and the variables they give are pure functions of it, so they are tested by tables.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};

use super::error::ConfigError;
use super::qos::is_static_pod;

/// The namespace of the master services (`metav1.NamespaceDefault`).
pub const MASTER_SERVICE_NAMESPACE: &str = "default";

/// The kubelet's `masterServices`: their variables reach every pod, whatever its
/// `enableServiceLinks`.
pub const MASTER_SERVICES: &[&str] = &["kubernetes"];

/// What the node knows of the cluster's services when it builds an environment.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum ServicesRead {
    /// Standalone: no API server, no services, no variables (and nothing to wait for).
    #[default]
    NoApiServer,
    /// Cluster mode before the services watch completed its first list (the kubelet's
    /// service informer has not `HasSynced`).
    NotSynced,
    /// Every service of the cluster, as the watch last saw them.
    Synced(Vec<Arc<Service>>),
}

/// `v1helper.IsServiceIPSet`: a cluster IP that is neither empty nor `None` (headless).
pub fn is_service_ip_set(service: &Service) -> bool {
    service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .is_some_and(|ip| !ip.is_empty() && ip != "None")
}

/// `makeEnvVariableName`: upper case, `-` → `_` (service and port names are DNS labels, so
/// nothing else needs mapping).
pub fn env_name(name: &str) -> String {
    name.replace('-', "_").to_uppercase()
}

/// The services whose variables a pod of `namespace` gets (`getServiceEnvVarMap`'s selection),
/// by name. The master services come from `default` even with links disabled; with links
/// enabled a service of the pod's own namespace wins over a master service of the same name,
/// as in the kubelet, whose map keeps the first master service it sees but lets a same-namespace
/// service replace it.
pub fn pod_services<'a>(
    services: &'a [Arc<Service>],
    namespace: &str,
    enable_service_links: bool,
) -> Vec<&'a Service> {
    let mut masters: BTreeMap<&str, &Service> = BTreeMap::new();
    let mut own: BTreeMap<&str, &Service> = BTreeMap::new();
    for service in services.iter().map(Arc::as_ref) {
        if !is_service_ip_set(service) {
            continue;
        }
        let name = service.metadata.name.as_deref().unwrap_or_default();
        let ns = service.metadata.namespace.as_deref().unwrap_or_default();
        if ns == MASTER_SERVICE_NAMESPACE && MASTER_SERVICES.contains(&name) {
            masters.entry(name).or_insert(service);
        } else if ns == namespace && enable_service_links {
            own.insert(name, service);
        }
    }
    masters.append(&mut own);
    masters.into_values().collect()
}

/// `envvars.FromServices`: for each service with a cluster IP, `NAME_SERVICE_HOST`,
/// `NAME_SERVICE_PORT` (the first port), `NAME_SERVICE_PORT_<PORTNAME>` per named port, then the
/// Docker link variables: `NAME_PORT` (the first port's URL) and per port
/// `NAME_PORT_<P>_<PROTO>` with its `_PROTO`, `_PORT` and `_ADDR`. An IPv6 cluster IP is
/// bracketed in the URLs (`net.JoinHostPort`).
///
/// A service with a cluster IP but no ports cannot pass the API server's validation; the
/// kubelet would panic on it, nodelet gives only its `_SERVICE_HOST`.
pub fn from_services(services: &[&Service]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for service in services {
        if !is_service_ip_set(service) {
            continue;
        }
        let Some(spec) = service.spec.as_ref() else {
            continue;
        };
        let ip = spec.cluster_ip.clone().unwrap_or_default();
        let prefix = env_name(service.metadata.name.as_deref().unwrap_or_default());
        out.push((format!("{prefix}_SERVICE_HOST"), ip.clone()));
        let ports = spec.ports.as_deref().unwrap_or_default();
        let Some(first) = ports.first() else {
            continue;
        };
        let service_port = format!("{prefix}_SERVICE_PORT");
        out.push((service_port.clone(), first.port.to_string()));
        for port in ports {
            if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((
                    format!("{service_port}_{}", env_name(name)),
                    port.port.to_string(),
                ));
            }
        }
        // Docker-compatible link variables.
        let host = if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip.clone()
        };
        for (i, port) in ports.iter().enumerate() {
            let protocol = port
                .protocol
                .as_deref()
                .filter(|p| !p.is_empty())
                .unwrap_or("TCP");
            let url = format!("{}://{host}:{}", protocol.to_lowercase(), port.port);
            if i == 0 {
                out.push((format!("{prefix}_PORT"), url.clone()));
            }
            let port_prefix = format!("{prefix}_PORT_{}_{}", port.port, protocol.to_uppercase());
            out.push((port_prefix.clone(), url));
            out.push((format!("{port_prefix}_PROTO"), protocol.to_lowercase()));
            out.push((format!("{port_prefix}_PORT"), port.port.to_string()));
            out.push((format!("{port_prefix}_ADDR"), ip.clone()));
        }
    }
    out
}

/// The service variables of `pod`'s containers: the checks `makeEnvironmentVariables` makes
/// before it reads anything else, then `getServiceEnvVarMap`.
///
/// A pod from the API server waits for the services watch's first list (the kubelet's
/// "services have not yet been read at least once"): started earlier, a container would miss
/// `KUBERNETES_SERVICE_HOST` for good, since variables never change in a running container.
/// The container's start fails instead and is retried on the next sync. A static pod does
/// not wait, as in the kubelet: it may be the API server itself, which the list needs; it gets
/// what has been read so far (nothing before the first list).
///
/// `enableServiceLinks` unset fails as in the kubelet, in cluster mode only: every source
/// defaults it (`source::defaults`), so only a pod built by hand can lack it, and standalone,
/// where it would select nothing, nodelet has no reason to refuse such a pod.
pub fn service_env(pod: &Pod, read: &ServicesRead) -> Result<Vec<(String, String)>, ConfigError> {
    if *read == ServicesRead::NoApiServer {
        return Ok(Vec::new());
    }
    let Some(enable_service_links) = pod.spec.as_ref().and_then(|s| s.enable_service_links) else {
        return Err(ConfigError::EnableServiceLinksUnset);
    };
    let services = match read {
        ServicesRead::NoApiServer => return Ok(Vec::new()),
        ServicesRead::NotSynced if is_static_pod(pod) => return Ok(Vec::new()),
        ServicesRead::NotSynced => return Err(ConfigError::ServicesNotSynced),
        ServicesRead::Synced(services) => services,
    };
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    Ok(from_services(&pod_services(
        services,
        namespace,
        enable_service_links,
    )))
}

#[cfg(test)]
pub(crate) mod tests {
    use k8s_openapi::api::core::v1::{PodSpec, ServicePort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::podspec::CONFIG_SOURCE_ANNOTATION;

    /// A service; `ports` as (name, port, protocol), empty strings for unset.
    pub(crate) fn service(
        namespace: &str,
        name: &str,
        ip: &str,
        ports: &[(&str, i32, &str)],
    ) -> Arc<Service> {
        Arc::new(Service {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: (!ip.is_empty()).then(|| ip.to_string()),
                ports: Some(
                    ports
                        .iter()
                        .map(|(n, port, proto)| ServicePort {
                            name: (!n.is_empty()).then(|| n.to_string()),
                            port: *port,
                            protocol: (!proto.is_empty()).then(|| proto.to_string()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn from_services_table() {
        type Case = (&'static str, Arc<Service>, Vec<(String, String)>);
        let cases: Vec<Case> = vec![
            (
                "the master service: one named port, protocol defaulted to TCP",
                service("default", "kubernetes", "10.96.0.1", &[("https", 443, "")]),
                vars(&[
                    ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
                    ("KUBERNETES_SERVICE_PORT", "443"),
                    ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
                    ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
                    ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
                    ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
                    ("KUBERNETES_PORT_443_TCP_PORT", "443"),
                    ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
                ]),
            ),
            (
                "dashes become underscores; unnamed first port; a UDP second port",
                service(
                    "ns",
                    "my-dns",
                    "10.0.0.10",
                    &[("", 53, "TCP"), ("dns-udp", 5353, "UDP")],
                ),
                vars(&[
                    ("MY_DNS_SERVICE_HOST", "10.0.0.10"),
                    ("MY_DNS_SERVICE_PORT", "53"),
                    ("MY_DNS_SERVICE_PORT_DNS_UDP", "5353"),
                    ("MY_DNS_PORT", "tcp://10.0.0.10:53"),
                    ("MY_DNS_PORT_53_TCP", "tcp://10.0.0.10:53"),
                    ("MY_DNS_PORT_53_TCP_PROTO", "tcp"),
                    ("MY_DNS_PORT_53_TCP_PORT", "53"),
                    ("MY_DNS_PORT_53_TCP_ADDR", "10.0.0.10"),
                    ("MY_DNS_PORT_5353_UDP", "udp://10.0.0.10:5353"),
                    ("MY_DNS_PORT_5353_UDP_PROTO", "udp"),
                    ("MY_DNS_PORT_5353_UDP_PORT", "5353"),
                    ("MY_DNS_PORT_5353_UDP_ADDR", "10.0.0.10"),
                ]),
            ),
            (
                "IPv6: bracketed in the URLs, bare in HOST and ADDR; SCTP",
                service("ns", "v6", "fd00::a", &[("", 8080, "SCTP")]),
                vars(&[
                    ("V6_SERVICE_HOST", "fd00::a"),
                    ("V6_SERVICE_PORT", "8080"),
                    ("V6_PORT", "sctp://[fd00::a]:8080"),
                    ("V6_PORT_8080_SCTP", "sctp://[fd00::a]:8080"),
                    ("V6_PORT_8080_SCTP_PROTO", "sctp"),
                    ("V6_PORT_8080_SCTP_PORT", "8080"),
                    ("V6_PORT_8080_SCTP_ADDR", "fd00::a"),
                ]),
            ),
            (
                "headless: nothing",
                service("ns", "headless", "None", &[("", 80, "")]),
                vec![],
            ),
            (
                "no cluster IP (ExternalName): nothing",
                service("ns", "external", "", &[("", 80, "")]),
                vec![],
            ),
            (
                "no ports: the host only",
                service("ns", "bare", "10.0.0.3", &[]),
                vars(&[("BARE_SERVICE_HOST", "10.0.0.3")]),
            ),
        ];
        for (name, svc, want) in cases {
            assert_eq!(from_services(&[svc.as_ref()]), want, "{name}");
        }
    }

    fn names(list: Vec<&Service>) -> Vec<String> {
        list.iter()
            .map(|s| {
                format!(
                    "{}/{}={}",
                    s.metadata.namespace.as_deref().unwrap_or_default(),
                    s.metadata.name.as_deref().unwrap_or_default(),
                    s.spec.as_ref().unwrap().cluster_ip.as_deref().unwrap()
                )
            })
            .collect()
    }

    #[test]
    fn pod_services_table() {
        let all = vec![
            service("default", "kubernetes", "10.96.0.1", &[("https", 443, "")]),
            service("default", "web", "10.96.0.2", &[("", 80, "")]),
            service("apps", "db", "10.96.0.3", &[("", 5432, "")]),
            service("apps", "headless", "None", &[("", 80, "")]),
            service("apps", "external", "", &[("", 80, "")]),
            service("other", "cache", "10.96.0.4", &[("", 6379, "")]),
        ];
        let shadow = vec![
            service("apps", "kubernetes", "10.96.9.9", &[("", 1, "")]),
            service("default", "kubernetes", "10.96.0.1", &[("https", 443, "")]),
        ];
        type Case<'a> = (&'a str, &'a [Arc<Service>], &'a str, bool, Vec<&'a str>);
        let cases: Vec<Case> = vec![
            (
                "links on: the master service and the pod's own namespace",
                &all,
                "apps",
                true,
                vec!["apps/db=10.96.0.3", "default/kubernetes=10.96.0.1"],
            ),
            (
                "links off: the master service only",
                &all,
                "apps",
                false,
                vec!["default/kubernetes=10.96.0.1"],
            ),
            (
                "a pod in default sees default's services",
                &all,
                "default",
                true,
                vec!["default/kubernetes=10.96.0.1", "default/web=10.96.0.2"],
            ),
            (
                "a pod in default with links off: still the master service only",
                &all,
                "default",
                false,
                vec!["default/kubernetes=10.96.0.1"],
            ),
            (
                "a namespace without services",
                &all,
                "empty",
                true,
                vec!["default/kubernetes=10.96.0.1"],
            ),
            (
                "a same-named service of the pod's namespace wins over the master service",
                &shadow,
                "apps",
                true,
                vec!["apps/kubernetes=10.96.9.9"],
            ),
            (
                "... but not with links off",
                &shadow,
                "apps",
                false,
                vec!["default/kubernetes=10.96.0.1"],
            ),
            ("no services at all", &[], "apps", true, vec![]),
        ];
        for (name, services, namespace, links, want) in cases {
            assert_eq!(
                names(pod_services(services, namespace, links)),
                want,
                "{name}"
            );
        }
    }

    fn pod(namespace: &str, links: Option<bool>, source: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some("p".into()),
                annotations: source.map(|s| {
                    [(CONFIG_SOURCE_ANNOTATION.to_string(), s.to_string())]
                        .into_iter()
                        .collect()
                }),
                ..Default::default()
            },
            spec: Some(PodSpec {
                enable_service_links: links,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn service_env_table() {
        let synced = ServicesRead::Synced(vec![
            service("default", "kubernetes", "10.96.0.1", &[("", 443, "")]),
            service("apps", "db", "10.96.0.3", &[("", 5432, "")]),
        ]);
        let hosts = |r: Result<Vec<(String, String)>, ConfigError>| {
            r.map(|v| {
                v.into_iter()
                    .filter(|(k, _)| k.ends_with("_SERVICE_HOST"))
                    .map(|(k, _)| k)
                    .collect::<Vec<_>>()
            })
            .map_err(|e| e.to_string())
        };
        let not_synced = "services have not yet been read at least once, cannot construct envvars";
        type Case<'a> = (
            &'a str,
            Pod,
            &'a ServicesRead,
            Result<Vec<&'a str>, &'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                "standalone: nothing, even for an API-looking pod",
                pod("apps", Some(true), Some("api")),
                &ServicesRead::NoApiServer,
                Ok(vec![]),
            ),
            (
                "synced, links on",
                pod("apps", Some(true), Some("api")),
                &synced,
                Ok(vec!["DB_SERVICE_HOST", "KUBERNETES_SERVICE_HOST"]),
            ),
            (
                "synced, links off",
                pod("apps", Some(false), Some("api")),
                &synced,
                Ok(vec!["KUBERNETES_SERVICE_HOST"]),
            ),
            (
                "an API pod waits for the first list",
                pod("apps", Some(true), Some("api")),
                &ServicesRead::NotSynced,
                Err(not_synced),
            ),
            (
                "a pod without a source annotation is not static: it waits",
                pod("apps", Some(true), None),
                &ServicesRead::NotSynced,
                Err(not_synced),
            ),
            (
                "a static pod does not wait",
                pod("kube-system", Some(true), Some("file")),
                &ServicesRead::NotSynced,
                Ok(vec![]),
            ),
            (
                "a synced static pod gets the variables",
                pod("apps", Some(true), Some("file")),
                &synced,
                Ok(vec!["DB_SERVICE_HOST", "KUBERNETES_SERVICE_HOST"]),
            ),
            (
                "enableServiceLinks unset, standalone: nothing to select, no error",
                pod("apps", None, Some("api")),
                &ServicesRead::NoApiServer,
                Ok(vec![]),
            ),
            (
                "enableServiceLinks unset: the kubelet's error, before anything else",
                pod("apps", None, Some("api")),
                &ServicesRead::NotSynced,
                Err("nil pod.spec.enableServiceLinks encountered, cannot construct envvars"),
            ),
        ];
        for (name, pod, read, want) in cases {
            let want = want
                .map(|v| v.into_iter().map(String::from).collect::<Vec<_>>())
                .map_err(String::from);
            assert_eq!(hosts(service_env(&pod, read)), want, "{name}");
        }
    }
}
