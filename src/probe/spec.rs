//! From a container's probe spec to what a worker runs: the defaulted timings and the resolved
//! handler (exec command, HTTP URL and headers, TCP or gRPC address). Everything here is pure,
//! so the kubelet's rules for defaults, ports, URLs and headers are table-tested.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, HTTPHeader, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{HandlerError, ProbeKind};
use crate::clock::seconds_from_api;
use crate::podspec::env::expand_with;

/// The User-Agent the kubelet sends (`kube-probe/<major>.<minor>`), the Kubernetes version
/// nodelet follows.
pub const PROBE_USER_AGENT: &str = "kube-probe/1.37";

/// The probe timings and thresholds with the API defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSettings {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl ProbeSettings {
    /// `Probe` defaults (`SetDefaults_Probe`): timeoutSeconds 1, periodSeconds 10,
    /// successThreshold 1, failureThreshold 3, initialDelaySeconds 0. Validation rejects values
    /// below the minimum; a manifest that was never validated gets the default for those too,
    /// so a zero period can never make a worker spin.
    pub fn from_probe(probe: &Probe) -> Self {
        fn at_least_one(value: Option<i32>, default: u32) -> u32 {
            value
                .and_then(|v| u32::try_from(v).ok())
                .filter(|v| *v >= 1)
                .unwrap_or(default)
        }
        let secs = |v: u32| seconds_from_api(i64::from(v));
        ProbeSettings {
            initial_delay: seconds_from_api(i64::from(probe.initial_delay_seconds.unwrap_or(0))),
            period: secs(at_least_one(probe.period_seconds, 10)),
            timeout: secs(at_least_one(probe.timeout_seconds, 1)),
            success_threshold: at_least_one(probe.success_threshold, 1),
            failure_threshold: at_least_one(probe.failure_threshold, 3),
        }
    }
}

/// The grace period for killing a container whose liveness or startup probe failed, when the
/// probe sets its own `terminationGracePeriodSeconds` (`setTerminationGracePeriod`): a pod
/// being deleted keeps its deletion grace period, and readiness never kills. `None` means the
/// usual pod grace period applies. The caller still runs preStop within it and applies the
/// kubelet's 2 s minimum, as for any kill.
pub fn probe_kill_grace_period(pod: &Pod, container: &Container, kind: ProbeKind) -> Option<i64> {
    if pod.metadata.deletion_grace_period_seconds.is_some() || kind == ProbeKind::Readiness {
        return None;
    }
    kind.spec(container)?.termination_grace_period_seconds
}

/// A probe handler resolved against its container and pod IP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handler {
    /// Run in the container through CRI `ExecSync`.
    Exec {
        command: Vec<String>,
    },
    Http(HttpTarget),
    Tcp {
        host: String,
        port: u16,
    },
    Grpc {
        host: String,
        port: u16,
        service: String,
        /// `mode: TLS`: TLS without certificate verification; otherwise plaintext.
        tls: bool,
    },
}

/// An HTTP GET to send: the URL and the request headers in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// `protocol: HTTP2`: HTTP/2 over cleartext TCP with prior knowledge (h2c); otherwise
    /// HTTP/1.1.
    pub h2c: bool,
}

/// Resolves the probe's handler (`newProbeRunner` and the runners' `sync`).
///
/// `pod_ip` is the address network probes dial when the probe names no host; an empty one
/// means the local host, as Go's dialer treats an empty host.
pub fn resolve_handler(
    probe: &Probe,
    container: &Container,
    pod_ip: &str,
) -> Result<Handler, HandlerError> {
    let default_host = if pod_ip.is_empty() {
        "127.0.0.1"
    } else {
        pod_ip
    };
    if let Some(exec) = &probe.exec {
        return Ok(Handler::Exec {
            command: exec_command(exec.command.as_deref().unwrap_or_default(), container),
        });
    }
    if let Some(http) = &probe.http_get {
        return http_target(http, container, default_host).map(Handler::Http);
    }
    if let Some(tcp) = &probe.tcp_socket {
        let host = tcp
            .host
            .as_deref()
            .filter(|h| !h.is_empty())
            .unwrap_or(default_host);
        return Ok(Handler::Tcp {
            host: host.to_string(),
            port: resolve_port(&tcp.port, container)?,
        });
    }
    if let Some(grpc) = &probe.grpc {
        return Ok(Handler::Grpc {
            host: default_host.to_string(),
            port: valid_port(i64::from(grpc.port))?,
            service: grpc.service.clone().unwrap_or_default(),
            tls: grpc.mode.as_deref() == Some("TLS"),
        });
    }
    Err(HandlerError::Missing)
}

/// The exec command with `$(VAR)` references expanded against the container's literal `env`
/// values only (`ExpandContainerCommandOnlyStatic`): a `valueFrom` variable expands to "".
pub fn exec_command(command: &[String], container: &Container) -> Vec<String> {
    let envs: Vec<(String, String)> = container
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    command.iter().map(|c| expand_with(c, &envs)).collect()
}

/// A port by number, or by the name of one of the container's `ports`
/// (`probe.ResolveContainerPort`).
pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, HandlerError> {
    match port {
        IntOrString::Int(n) => valid_port(i64::from(*n)),
        IntOrString::String(name) => {
            let found = container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .ok_or_else(|| HandlerError::PortNotFound { name: name.clone() })?;
            valid_port(i64::from(found.container_port))
        }
    }
}

fn valid_port(port: i64) -> Result<u16, HandlerError> {
    u16::try_from(port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or(HandlerError::InvalidPort { port })
}

/// The request an `httpGet` probe sends (`NewRequestForHTTPGetAction`).
pub fn http_target(
    action: &HTTPGetAction,
    container: &Container,
    default_host: &str,
) -> Result<HttpTarget, HandlerError> {
    let host = action
        .host
        .as_deref()
        .filter(|h| !h.is_empty())
        .unwrap_or(default_host);
    let port = resolve_port(&action.port, container)?;
    Ok(HttpTarget {
        url: probe_url(
            action.scheme.as_deref().unwrap_or_default(),
            host,
            port,
            action.path.as_deref().unwrap_or_default(),
        ),
        headers: request_headers(action.http_headers.as_deref().unwrap_or_default()),
        h2c: action.protocol.as_deref() == Some("HTTP2"),
    })
}

/// `scheme://host:port/path` (`formatURL`): the scheme lowercased and defaulting to http, an
/// IPv6 host in brackets, the path rooted (Go's URL printing adds the leading slash).
pub fn probe_url(scheme: &str, host: &str, port: u16, path: &str) -> String {
    let scheme = if scheme.is_empty() {
        "http".to_string()
    } else {
        scheme.to_ascii_lowercase()
    };
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    format!("{scheme}://{}{path}", join_host_port(host, port))
}

/// `net.JoinHostPort`: brackets around a host that contains a colon (an IPv6 literal).
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The request headers (`v1HeaderToHTTPHeader` + `newProbeRequest` + Go's request writer).
///
/// Names compare case-insensitively, as Go canonicalizes them. Without a `User-Agent` the
/// kubelet sends `kube-probe/1.37`, without an `Accept` it sends `*/*`; a spec header with an
/// empty value removes the default. Go writes only the first `User-Agent` and takes `Host`
/// from the first value, so later ones are dropped here too.
pub fn request_headers(spec: &[HTTPHeader]) -> Vec<(String, String)> {
    let first = |name: &str| {
        spec.iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    };
    let mut headers: Vec<(String, String)> = Vec::with_capacity(spec.len() + 2);
    let mut seen_user_agent = false;
    let mut seen_host = false;
    for h in spec {
        if h.name.eq_ignore_ascii_case("User-Agent") {
            if !seen_user_agent && !h.value.is_empty() {
                headers.push((h.name.clone(), h.value.clone()));
            }
            seen_user_agent = true;
        } else if h.name.eq_ignore_ascii_case("Host") {
            if !seen_host && !h.value.is_empty() {
                headers.push((h.name.clone(), h.value.clone()));
            }
            seen_host = true;
        } else if h.name.eq_ignore_ascii_case("Accept") {
            if first("Accept") != Some("") {
                headers.push((h.name.clone(), h.value.clone()));
            }
        } else {
            headers.push((h.name.clone(), h.value.clone()));
        }
    }
    if first("User-Agent").is_none() {
        headers.push(("User-Agent".to_string(), PROBE_USER_AGENT.to_string()));
    }
    if first("Accept").is_none() {
        headers.push(("Accept".to_string(), "*/*".to_string()));
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerPort, EnvVar, EnvVarSource, ExecAction, GRPCAction, ObjectFieldSelector,
        TCPSocketAction,
    };

    fn container() -> Container {
        Container {
            name: "app".into(),
            ports: Some(vec![
                ContainerPort {
                    name: Some("http".into()),
                    container_port: 8080,
                    ..Default::default()
                },
                ContainerPort {
                    name: Some("bad".into()),
                    container_port: 70000,
                    ..Default::default()
                },
            ]),
            env: Some(vec![
                EnvVar {
                    name: "GREETING".into(),
                    value: Some("hello".into()),
                    value_from: None,
                },
                EnvVar {
                    name: "NODE".into(),
                    value: None,
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "spec.nodeName".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                },
            ]),
            ..Default::default()
        }
    }

    #[test]
    fn settings_defaults_table() {
        let cases: Vec<(&str, Probe, ProbeSettings)> = vec![
            (
                "all absent",
                Probe::default(),
                ProbeSettings {
                    initial_delay: Duration::ZERO,
                    period: Duration::from_secs(10),
                    timeout: Duration::from_secs(1),
                    success_threshold: 1,
                    failure_threshold: 3,
                },
            ),
            (
                "all set",
                Probe {
                    initial_delay_seconds: Some(15),
                    period_seconds: Some(5),
                    timeout_seconds: Some(3),
                    success_threshold: Some(2),
                    failure_threshold: Some(30),
                    ..Default::default()
                },
                ProbeSettings {
                    initial_delay: Duration::from_secs(15),
                    period: Duration::from_secs(5),
                    timeout: Duration::from_secs(3),
                    success_threshold: 2,
                    failure_threshold: 30,
                },
            ),
            (
                "below the minimum falls back to the default",
                Probe {
                    initial_delay_seconds: Some(-4),
                    period_seconds: Some(0),
                    timeout_seconds: Some(-1),
                    success_threshold: Some(0),
                    failure_threshold: Some(0),
                    ..Default::default()
                },
                ProbeSettings {
                    initial_delay: Duration::ZERO,
                    period: Duration::from_secs(10),
                    timeout: Duration::from_secs(1),
                    success_threshold: 1,
                    failure_threshold: 3,
                },
            ),
            (
                "the API's largest values",
                Probe {
                    initial_delay_seconds: Some(i32::MAX),
                    period_seconds: Some(i32::MAX),
                    timeout_seconds: Some(i32::MAX),
                    success_threshold: Some(i32::MAX),
                    failure_threshold: Some(i32::MAX),
                    termination_grace_period_seconds: Some(i64::MAX),
                    ..Default::default()
                },
                ProbeSettings {
                    initial_delay: Duration::from_secs(2_147_483_647),
                    period: Duration::from_secs(2_147_483_647),
                    timeout: Duration::from_secs(2_147_483_647),
                    success_threshold: 2_147_483_647,
                    failure_threshold: 2_147_483_647,
                },
            ),
            (
                "the API's smallest values",
                Probe {
                    initial_delay_seconds: Some(i32::MIN),
                    period_seconds: Some(i32::MIN),
                    timeout_seconds: Some(i32::MIN),
                    success_threshold: Some(i32::MIN),
                    failure_threshold: Some(i32::MIN),
                    termination_grace_period_seconds: Some(i64::MIN),
                    ..Default::default()
                },
                ProbeSettings {
                    initial_delay: Duration::ZERO,
                    period: Duration::from_secs(10),
                    timeout: Duration::from_secs(1),
                    success_threshold: 1,
                    failure_threshold: 3,
                },
            ),
        ];
        for (name, probe, want) in cases {
            assert_eq!(ProbeSettings::from_probe(&probe), want, "{name}");
        }
    }

    #[test]
    fn probe_kill_grace_period_table() {
        let with_grace = |grace: Option<i64>| {
            Some(Probe {
                termination_grace_period_seconds: grace,
                ..Default::default()
            })
        };
        let c = Container {
            name: "app".into(),
            liveness_probe: with_grace(Some(60)),
            startup_probe: with_grace(None),
            readiness_probe: with_grace(Some(5)),
            ..Default::default()
        };
        let mut deleting = Pod::default();
        deleting.metadata.deletion_grace_period_seconds = Some(10);
        let cases = [
            (
                "liveness with its own grace",
                Pod::default(),
                ProbeKind::Liveness,
                Some(60),
            ),
            (
                "startup without one",
                Pod::default(),
                ProbeKind::Startup,
                None,
            ),
            (
                "readiness never kills",
                Pod::default(),
                ProbeKind::Readiness,
                None,
            ),
            ("deletion grace wins", deleting, ProbeKind::Liveness, None),
        ];
        for (name, pod, kind, want) in cases {
            assert_eq!(probe_kill_grace_period(&pod, &c, kind), want, "{name}");
        }
    }

    #[test]
    fn resolve_port_table() {
        let cases: Vec<(&str, IntOrString, Result<u16, HandlerError>)> = vec![
            ("number", IntOrString::Int(9000), Ok(9000)),
            ("name", IntOrString::String("http".into()), Ok(8080)),
            (
                "unknown name",
                IntOrString::String("metrics".into()),
                Err(HandlerError::PortNotFound {
                    name: "metrics".into(),
                }),
            ),
            (
                "a number in a string is a name (no Atoi fallback)",
                IntOrString::String("8080".into()),
                Err(HandlerError::PortNotFound {
                    name: "8080".into(),
                }),
            ),
            (
                "zero",
                IntOrString::Int(0),
                Err(HandlerError::InvalidPort { port: 0 }),
            ),
            (
                "too big",
                IntOrString::Int(65536),
                Err(HandlerError::InvalidPort { port: 65536 }),
            ),
            (
                "named port out of range",
                IntOrString::String("bad".into()),
                Err(HandlerError::InvalidPort { port: 70000 }),
            ),
        ];
        for (name, port, want) in cases {
            assert_eq!(resolve_port(&port, &container()), want, "{name}");
        }
    }

    #[test]
    fn port_errors_read_like_the_kubelet() {
        let cases = [
            (
                HandlerError::PortNotFound {
                    name: "metrics".into(),
                },
                "port \"metrics\" not found",
            ),
            (
                HandlerError::InvalidPort { port: 0 },
                "invalid port number: 0",
            ),
        ];
        for (err, want) in cases {
            assert_eq!(err.to_string(), want);
        }
    }

    #[test]
    fn probe_url_table() {
        let cases = [
            (
                "",
                "10.0.0.5",
                8080,
                "/healthz",
                "http://10.0.0.5:8080/healthz",
            ),
            ("HTTPS", "10.0.0.5", 8443, "/", "https://10.0.0.5:8443/"),
            ("HTTP", "10.0.0.5", 80, "", "http://10.0.0.5:80/"),
            (
                "HTTP",
                "10.0.0.5",
                80,
                "healthz",
                "http://10.0.0.5:80/healthz",
            ),
            (
                "HTTP",
                "10.0.0.5",
                80,
                "/ready?full=1",
                "http://10.0.0.5:80/ready?full=1",
            ),
            ("HTTP", "fd00::5", 8080, "/", "http://[fd00::5]:8080/"),
            ("HTTP", "[fd00::5]", 8080, "/", "http://[fd00::5]:8080/"),
            ("HTTP", "example.com", 8080, "/", "http://example.com:8080/"),
        ];
        for (scheme, host, port, path, want) in cases {
            assert_eq!(
                probe_url(scheme, host, port, path),
                want,
                "{scheme} {host} {path}"
            );
        }
    }

    fn header(name: &str, value: &str) -> HTTPHeader {
        HTTPHeader {
            name: name.into(),
            value: value.into(),
        }
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn request_headers_table() {
        type Headers = Vec<(String, String)>;
        let cases: Vec<(&str, Vec<HTTPHeader>, Headers)> = vec![
            (
                "defaults",
                vec![],
                pairs(&[("User-Agent", "kube-probe/1.37"), ("Accept", "*/*")]),
            ),
            (
                "custom header kept, defaults added",
                vec![header("X-Custom", "a")],
                pairs(&[
                    ("X-Custom", "a"),
                    ("User-Agent", "kube-probe/1.37"),
                    ("Accept", "*/*"),
                ]),
            ),
            (
                "repeated header kept in order",
                vec![header("X-Custom", "a"), header("X-Custom", "b")],
                pairs(&[
                    ("X-Custom", "a"),
                    ("X-Custom", "b"),
                    ("User-Agent", "kube-probe/1.37"),
                    ("Accept", "*/*"),
                ]),
            ),
            (
                "user agent overridden",
                vec![header("User-Agent", "MyUserAgent")],
                pairs(&[("User-Agent", "MyUserAgent"), ("Accept", "*/*")]),
            ),
            (
                "user agent removed by an empty value",
                vec![header("User-Agent", "")],
                pairs(&[("Accept", "*/*")]),
            ),
            (
                "only the first user agent is sent",
                vec![header("user-agent", "one"), header("User-Agent", "two")],
                pairs(&[("user-agent", "one"), ("Accept", "*/*")]),
            ),
            (
                "accept overridden",
                vec![header("Accept", "application/json")],
                pairs(&[
                    ("Accept", "application/json"),
                    ("User-Agent", "kube-probe/1.37"),
                ]),
            ),
            (
                "accept removed by an empty value, any case",
                vec![header("accept", "")],
                pairs(&[("User-Agent", "kube-probe/1.37")]),
            ),
            (
                "host taken from the first value",
                vec![header("Host", "www.example.com"), header("Host", "other")],
                pairs(&[
                    ("Host", "www.example.com"),
                    ("User-Agent", "kube-probe/1.37"),
                    ("Accept", "*/*"),
                ]),
            ),
            (
                "empty host means the URL's host",
                vec![header("Host", "")],
                pairs(&[("User-Agent", "kube-probe/1.37"), ("Accept", "*/*")]),
            ),
            (
                "other empty header is sent empty",
                vec![header("X-Empty", "")],
                pairs(&[
                    ("X-Empty", ""),
                    ("User-Agent", "kube-probe/1.37"),
                    ("Accept", "*/*"),
                ]),
            ),
        ];
        for (name, spec, want) in cases {
            assert_eq!(request_headers(&spec), want, "{name}");
        }
    }

    #[test]
    fn resolve_handler_table() {
        let http = |host: Option<&str>, port: IntOrString| Probe {
            http_get: Some(HTTPGetAction {
                host: host.map(String::from),
                port,
                path: Some("/healthz".into()),
                scheme: Some("HTTP".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let defaults = pairs(&[("User-Agent", "kube-probe/1.37"), ("Accept", "*/*")]);
        let cases: Vec<(&str, Probe, &str, Result<Handler, HandlerError>)> = vec![
            (
                "exec expands static env only",
                Probe {
                    exec: Some(ExecAction {
                        command: Some(vec![
                            "echo".into(),
                            "$(GREETING)".into(),
                            "[$(NODE)]".into(),
                            "$(MISSING)".into(),
                        ]),
                    }),
                    ..Default::default()
                },
                "10.0.0.5",
                Ok(Handler::Exec {
                    command: vec![
                        "echo".into(),
                        "hello".into(),
                        "[]".into(),
                        "$(MISSING)".into(),
                    ],
                }),
            ),
            (
                "http to the pod IP by port name",
                http(None, IntOrString::String("http".into())),
                "10.0.0.5",
                Ok(Handler::Http(HttpTarget {
                    url: "http://10.0.0.5:8080/healthz".into(),
                    headers: defaults.clone(),
                    h2c: false,
                })),
            ),
            (
                "http to an explicit host",
                http(Some("127.0.0.1"), IntOrString::Int(9000)),
                "10.0.0.5",
                Ok(Handler::Http(HttpTarget {
                    url: "http://127.0.0.1:9000/healthz".into(),
                    headers: defaults.clone(),
                    h2c: false,
                })),
            ),
            (
                "http without a pod IP dials the local host",
                http(None, IntOrString::Int(9000)),
                "",
                Ok(Handler::Http(HttpTarget {
                    url: "http://127.0.0.1:9000/healthz".into(),
                    headers: defaults.clone(),
                    h2c: false,
                })),
            ),
            (
                "http with an unknown port name",
                http(None, IntOrString::String("nope".into())),
                "10.0.0.5",
                Err(HandlerError::PortNotFound {
                    name: "nope".into(),
                }),
            ),
            (
                "tcp by name",
                Probe {
                    tcp_socket: Some(TCPSocketAction {
                        host: None,
                        port: IntOrString::String("http".into()),
                    }),
                    ..Default::default()
                },
                "10.0.0.5",
                Ok(Handler::Tcp {
                    host: "10.0.0.5".into(),
                    port: 8080,
                }),
            ),
            (
                "tcp with a host",
                Probe {
                    tcp_socket: Some(TCPSocketAction {
                        host: Some("192.168.1.1".into()),
                        port: IntOrString::Int(22),
                    }),
                    ..Default::default()
                },
                "10.0.0.5",
                Ok(Handler::Tcp {
                    host: "192.168.1.1".into(),
                    port: 22,
                }),
            ),
            (
                "grpc with the default service",
                Probe {
                    grpc: Some(GRPCAction {
                        port: 9090,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                "10.0.0.5",
                Ok(Handler::Grpc {
                    host: "10.0.0.5".into(),
                    port: 9090,
                    service: String::new(),
                    tls: false,
                }),
            ),
            (
                "grpc with a service",
                Probe {
                    grpc: Some(GRPCAction {
                        port: 9090,
                        service: Some("liveness".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                "10.0.0.5",
                Ok(Handler::Grpc {
                    host: "10.0.0.5".into(),
                    port: 9090,
                    service: "liveness".into(),
                    tls: false,
                }),
            ),
            (
                "grpc over TLS",
                Probe {
                    grpc: Some(GRPCAction {
                        port: 9090,
                        mode: Some("TLS".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                "10.0.0.5",
                Ok(Handler::Grpc {
                    host: "10.0.0.5".into(),
                    port: 9090,
                    service: String::new(),
                    tls: true,
                }),
            ),
            (
                "no handler",
                Probe::default(),
                "10.0.0.5",
                Err(HandlerError::Missing),
            ),
        ];
        for (name, probe, pod_ip, want) in cases {
            assert_eq!(
                resolve_handler(&probe, &container(), pod_ip),
                want,
                "{name}"
            );
        }
    }
}
