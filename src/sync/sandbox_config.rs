//! The CRI `PodSandboxConfig` for a pod (`generatePodSandboxConfig` and
//! `generatePodSandboxLinuxConfig` in `pkg/kubelet/kuberuntime/kuberuntime_sandbox.go`), with the
//! pod's hostname (`GeneratePodHostNameAndDomain`, `GetNodenameForKernel`) and DNS settings
//! (`pkg/kubelet/network/dns/dns.go`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cgroup::{milli_cpu_to_quota, milli_cpu_to_shares, QUOTA_PERIOD};
use crate::cri::{api, labels};
use crate::logs::paths::pod_log_dir;
use crate::podspec::hostname::kernel_hostname;
use crate::podspec::resources::{pod_limits, pod_overhead, pod_requests};
use crate::podspec::ConfigError;

/// What the sandbox config needs from the node and the configuration.
#[derive(Debug, Clone)]
pub struct SandboxContext<'a> {
    pub node_name: &'a str,
    /// KubeletConfiguration `podLogsDir` (default `/var/log/pods`).
    pub pod_logs_dir: &'a Path,
    /// From `cgroup::pod_cgroup_parent`.
    pub cgroup_parent: String,
    /// KubeletConfiguration `clusterDNS`.
    pub cluster_dns: &'a [IpAddr],
    /// KubeletConfiguration `clusterDomain`.
    pub cluster_domain: &'a str,
    /// Contents of the `resolvConf` file; `None` when `resolvConf` is empty, which (as in the
    /// kubelet) gives host-DNS pods `nameserver 127.0.0.1` and `search .`.
    pub host_resolv_conf: Option<&'a str>,
}

/// Validation limits the kubelet trims DNS settings to (`pkg/apis/core/validation`).
pub const MAX_DNS_NAMESERVERS: usize = 3;
pub const MAX_DNS_SEARCH_PATHS: usize = 32;
pub const MAX_DNS_SEARCH_LIST_CHARS: usize = 2048;
/// The kubelet's resolver options for cluster DNS.
pub const DEFAULT_DNS_OPTIONS: &[&str] = &["ndots:5"];

use crate::podspec::host_network;

/// The pod's namespaces (`NamespacesForPod`): the node's network/PID/IPC namespaces when asked
/// for; otherwise the pod's, except PID, which is per container unless `shareProcessNamespace`.
/// The user namespace is the node's; a `hostUsers: false` pod's is its own, with the mappings
/// the executor fills in from `userns` ([`set_user_namespace`]) — without them the runtime
/// refuses the config, so a pod never runs in the node's user namespace by mistake.
pub fn namespace_options(pod: &Pod) -> Result<api::NamespaceOption, ConfigError> {
    use api::NamespaceMode as M;
    let spec = pod.spec.as_ref();
    let flag = |f: Option<bool>| f == Some(true);
    let userns_mode = if spec.and_then(|s| s.host_users) == Some(false) {
        M::Pod
    } else {
        M::Node
    };
    let pid = if flag(spec.and_then(|s| s.host_pid)) {
        M::Node
    } else if flag(spec.and_then(|s| s.share_process_namespace)) {
        M::Pod
    } else {
        M::Container
    };
    Ok(api::NamespaceOption {
        network: if host_network(pod) { M::Node } else { M::Pod } as i32,
        pid: pid as i32,
        ipc: if flag(spec.and_then(|s| s.host_ipc)) {
            M::Node
        } else {
            M::Pod
        } as i32,
        target_id: String::new(),
        userns_options: Some(api::UserNamespace {
            mode: userns_mode as i32,
            ..Default::default()
        }),
    })
}

/// The CRI user namespace of a pod with the range `m` (`GetOrCreateUserNamespaceMappings`):
/// mode POD, container IDs from 0 mapped to the range, users and groups alike.
pub fn pod_user_namespace(m: crate::userns::Mapping) -> api::UserNamespace {
    let ids = vec![api::IdMapping {
        host_id: m.host_id,
        container_id: 0,
        length: m.length,
    }];
    api::UserNamespace {
        mode: api::NamespaceMode::Pod as i32,
        uids: ids.clone(),
        gids: ids,
    }
}

/// Puts `ns` into the sandbox config's namespace options.
pub fn set_user_namespace(config: &mut api::PodSandboxConfig, ns: api::UserNamespace) {
    let options = config
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options
        .get_or_insert_with(Default::default);
    options.userns_options = Some(ns);
}

/// The sandbox's user namespace when it is the pod's own: every container of the pod joins it
/// with the same mappings (the kubelet passes the sandbox's to each container).
pub fn sandbox_user_namespace(config: &api::PodSandboxConfig) -> Option<&api::UserNamespace> {
    config
        .linux
        .as_ref()?
        .security_context
        .as_ref()?
        .namespace_options
        .as_ref()?
        .userns_options
        .as_ref()
        .filter(|u| u.mode == api::NamespaceMode::Pod as i32)
}

/// A resolv.conf as the kubelet reads it (`parseResolvConf`): nameservers accumulate, the last
/// `search` and `options` lines win, and search domains lose a trailing dot (`.` alone is
/// dropped) so the same domain is not counted twice against the limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvConf {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

pub fn parse_resolv_conf(contents: &str) -> ResolvConf {
    let mut conf = ResolvConf::default();
    for line in contents.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["nameserver", server, ..] => conf.nameservers.push((*server).to_string()),
            ["search", domains @ ..] => {
                conf.searches = domains
                    .iter()
                    .filter(|d| **d != ".")
                    .map(|d| d.trim_end_matches('.').to_string())
                    .collect();
            }
            ["options", options @ ..] => {
                conf.options = options.iter().map(|o| (*o).to_string()).collect();
            }
            _ => {}
        }
    }
    conf
}

fn omit_duplicates(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// Resolver options merged by name, the pod's winning (`mergeDNSOptions`). The kubelet emits
/// them in map order; nodelet keeps first-seen order so configs are stable.
fn merge_dns_options(existing: &[String], pod_options: &[(String, Option<String>)]) -> Vec<String> {
    let mut merged: Vec<(String, String)> = Vec::new();
    let mut put = |name: &str, value: &str| match merged.iter_mut().find(|(n, _)| n == name) {
        Some(entry) => entry.1 = value.to_string(),
        None => merged.push((name.to_string(), value.to_string())),
    };
    for op in existing {
        match op.split_once(':') {
            Some((name, value)) => put(name, value),
            None => put(op, ""),
        }
    }
    for (name, value) in pod_options {
        put(name, value.as_deref().unwrap_or_default());
    }
    merged
        .into_iter()
        .map(|(n, v)| if v.is_empty() { n } else { format!("{n}:{v}") })
        .collect()
}

/// Trims nameservers to 3 and the search list to 32 domains and 2048 characters, dropping from
/// the end as the kubelet does.
fn fit_dns_limits(config: &mut api::DnsConfig) {
    config.servers.truncate(MAX_DNS_NAMESERVERS);
    config.searches.truncate(MAX_DNS_SEARCH_PATHS);
    while !config.searches.is_empty() && config.searches.join(" ").len() > MAX_DNS_SEARCH_LIST_CHARS
    {
        config.searches.pop();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DnsType {
    Cluster,
    Host,
    None,
}

fn dns_type(pod: &Pod) -> Result<DnsType, ConfigError> {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    match policy {
        "None" => Ok(DnsType::None),
        "ClusterFirstWithHostNet" => Ok(DnsType::Cluster),
        "ClusterFirst" if !host_network(pod) => Ok(DnsType::Cluster),
        // A host-network pod with ClusterFirst resolves like the node.
        "ClusterFirst" | "Default" => Ok(DnsType::Host),
        other => Err(ConfigError::invalid("spec.dnsPolicy".to_string(), other.to_string(), "supported values: \"ClusterFirst\", \"ClusterFirstWithHostNet\", \"Default\", \"None\"".to_string())),
    }
}

/// The kubelet's warning when a ClusterFirst pod meets a node without `clusterDNS`; it records
/// it as a `MissingClusterDNS` event on the node and (prefixed with `pod: "<pod>". `) on the pod.
pub const MISSING_CLUSTER_DNS_MESSAGE: &str = "kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.";

/// True when the pod asks for cluster DNS but none is configured, so [`pod_dns_config`] falls
/// back to the node's resolver; the caller records the `MissingClusterDNS` event.
pub fn missing_cluster_dns(pod: &Pod, cluster_dns: &[IpAddr]) -> bool {
    cluster_dns.is_empty() && matches!(dns_type(pod), Ok(DnsType::Cluster))
}

/// The pod's resolver configuration (`GetPodDNS`).
///
/// ClusterFirst: the cluster DNS servers only, search `<ns>.svc.<domain> svc.<domain> <domain>`
/// followed by the node's search list, and `ndots:5`; with no `clusterDNS` configured the pod
/// falls back to Default, as the kubelet does (it also records a MissingClusterDNS event).
/// Default: the node's resolv.conf. None: nothing but `spec.dnsConfig`, which every policy
/// then merges in (servers and searches appended without duplicates, options by name).
pub fn pod_dns_config(pod: &Pod, ctx: &SandboxContext) -> Result<api::DnsConfig, ConfigError> {
    let host = ctx
        .host_resolv_conf
        .map(parse_resolv_conf)
        .unwrap_or_default();
    let mut config = api::DnsConfig {
        servers: host.nameservers,
        searches: host.searches,
        options: host.options,
    };
    let mut kind = dns_type(pod)?;
    if kind == DnsType::Cluster && ctx.cluster_dns.is_empty() {
        kind = DnsType::Host;
    }
    match kind {
        DnsType::None => config = api::DnsConfig::default(),
        DnsType::Cluster => {
            config.servers = ctx.cluster_dns.iter().map(IpAddr::to_string).collect();
            if !ctx.cluster_domain.is_empty() {
                let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
                let domain = ctx.cluster_domain;
                let cluster = [
                    format!("{namespace}.svc.{domain}"),
                    format!("svc.{domain}"),
                    domain.to_string(),
                ];
                config.searches = omit_duplicates(cluster.into_iter().chain(config.searches));
            }
            config.options = DEFAULT_DNS_OPTIONS.iter().map(|o| o.to_string()).collect();
        }
        DnsType::Host => {
            if ctx.host_resolv_conf.is_none() {
                config.servers = vec!["127.0.0.1".to_string()];
                config.searches = vec![".".to_string()];
            }
        }
    }
    if let Some(extra) = pod.spec.as_ref().and_then(|s| s.dns_config.as_ref()) {
        config.servers = omit_duplicates(
            config
                .servers
                .into_iter()
                .chain(extra.nameservers.iter().flatten().cloned()),
        );
        config.searches = omit_duplicates(
            config
                .searches
                .into_iter()
                .chain(extra.searches.iter().flatten().cloned()),
        );
        let pod_options: Vec<(String, Option<String>)> = extra
            .options
            .iter()
            .flatten()
            .map(|o| (o.name.clone().unwrap_or_default(), o.value.clone()))
            .collect();
        config.options = merge_dns_options(&config.options, &pod_options);
    }
    fit_dns_limits(&mut config);
    Ok(config)
}

fn cri_protocol(protocol: Option<&str>) -> i32 {
    match protocol {
        Some("UDP") => api::Protocol::Udp as i32,
        Some("SCTP") => api::Protocol::Sctp as i32,
        _ => api::Protocol::Tcp as i32,
    }
}

/// One container's port mappings (`MakePortMappings`): every declared port, a repeated entry
/// (same name, or same family/protocol/IP/ports when unnamed) dropped. Like the kubelet, ports
/// without a hostPort are passed too; the runtime only publishes those with one. On the host
/// network a port's hostPort defaults to its containerPort, as API defaulting does.
fn container_port_mappings(container: &Container, host_network: bool) -> Vec<api::PortMapping> {
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for p in container.ports.iter().flatten() {
        let host_ip = p.host_ip.clone().unwrap_or_default();
        let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".to_string());
        let mut host_port = p.host_port.unwrap_or(0);
        if host_network && host_port == 0 {
            host_port = p.container_port;
        }
        let family = match host_ip.parse::<IpAddr>() {
            _ if host_ip.is_empty() => "any",
            Ok(IpAddr::V6(_)) => "v6",
            _ => "v4",
        };
        let name = match p.name.as_deref().filter(|n| !n.is_empty()) {
            Some(n) => n.to_string(),
            None => format!(
                "{family}-{protocol}-{host_ip}:{}:{host_port}",
                p.container_port
            ),
        };
        if seen.contains(&name) {
            continue;
        }
        seen.push(name);
        out.push(api::PortMapping {
            protocol: cri_protocol(Some(&protocol)),
            container_port: p.container_port,
            host_port,
            host_ip,
        });
    }
    out
}

/// The sandbox's port mappings: those of the pod's regular containers.
pub fn port_mappings(pod: &Pod) -> Vec<api::PortMapping> {
    let host_network = host_network(pod);
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| container_port_mappings(c, host_network))
        .collect()
}

/// True when any container of the pod (init, regular or ephemeral) is privileged
/// (`HasPrivilegedContainer`); the sandbox must then be privileged too.
fn has_privileged_container(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let privileged = |sc: Option<&k8s_openapi::api::core::v1::SecurityContext>| {
        sc.and_then(|s| s.privileged) == Some(true)
    };
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .any(|c| privileged(c.security_context.as_ref()))
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| privileged(c.security_context.as_ref()))
}

pub(crate) fn supplemental_groups_policy(policy: Option<&str>) -> Result<i32, ConfigError> {
    match policy {
        None | Some("Merge") => Ok(api::SupplementalGroupsPolicy::Merge as i32),
        Some("Strict") => Ok(api::SupplementalGroupsPolicy::Strict as i32),
        Some(other) => Err(ConfigError::invalid(
            "spec.securityContext.supplementalGroupsPolicy".to_string(),
            other.to_string(),
            "unsupported supplementalGroupsPolicy".to_string(),
        )),
    }
}

/// `calculateLinuxResources`: cpu shares from the request (the limit when only that is set),
/// CFS quota from the limit (0 = unlimited) over the default `cpuCFSQuotaPeriod`, and the memory
/// limit. Containers and the sandbox (its resources and overhead) get it alike.
pub(crate) fn linux_resources(
    cpu_request_milli: Option<i64>,
    cpu_limit_milli: i64,
    memory_limit: i64,
) -> api::LinuxContainerResources {
    api::LinuxContainerResources {
        cpu_shares: i64::try_from(milli_cpu_to_shares(
            cpu_request_milli.unwrap_or(cpu_limit_milli),
        ))
        .unwrap_or(i64::MAX),
        memory_limit_in_bytes: memory_limit.max(0),
        cpu_period: i64::try_from(QUOTA_PERIOD).unwrap_or(i64::MAX),
        cpu_quota: milli_cpu_to_quota(cpu_limit_milli, QUOTA_PERIOD),
        ..Default::default()
    }
}

/// Sandbox resources (the kubelet's `applySandboxResources`, and what it sends with
/// `UpdatePodSandboxResources` after a resize): the overhead, and the pod's summed requests and
/// limits, for runtimes that size the sandbox (VM-based ones) or pass them to NRI plugins.
pub fn sandbox_resources(
    pod: &Pod,
) -> (api::LinuxContainerResources, api::LinuxContainerResources) {
    let requests = pod_requests(pod);
    let (limits, _, _) = pod_limits(pod);
    let resources = linux_resources(
        requests.cpu_milli,
        limits.cpu_milli.unwrap_or(0),
        limits.memory.unwrap_or(0),
    );
    let overhead = match pod_overhead(pod) {
        Some(o) => {
            let cpu = o.cpu_milli.unwrap_or(0);
            linux_resources(Some(cpu), cpu, o.memory.unwrap_or(0))
        }
        None => api::LinuxContainerResources::default(),
    };
    (overhead, resources)
}

fn sandbox_linux_config(
    pod: &Pod,
    ctx: &SandboxContext,
) -> Result<api::LinuxPodSandboxConfig, ConfigError> {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let mut security = api::LinuxSandboxSecurityContext {
        namespace_options: Some(namespace_options(pod)?),
        privileged: has_privileged_container(pod),
        // The kubelet always runs the pause process under the runtime's default profile so that
        // pods can use least-privileged profiles themselves (kubernetes#84623).
        seccomp: Some(api::SecurityProfile {
            profile_type: api::security_profile::ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        }),
        ..Default::default()
    };
    let mut sysctls = HashMap::new();
    if let Some(psc) = psc {
        security.run_as_user = psc.run_as_user.map(|value| api::Int64Value { value });
        security.run_as_group = psc.run_as_group.map(|value| api::Int64Value { value });
        security.supplemental_groups.extend(psc.fs_group);
        security
            .supplemental_groups
            .extend(psc.supplemental_groups.iter().flatten().copied());
        security.supplemental_groups_policy =
            supplemental_groups_policy(psc.supplemental_groups_policy.as_deref())?;
        security.selinux_options = psc.se_linux_options.as_ref().map(|o| api::SeLinuxOption {
            user: o.user.clone().unwrap_or_default(),
            role: o.role.clone().unwrap_or_default(),
            r#type: o.type_.clone().unwrap_or_default(),
            level: o.level.clone().unwrap_or_default(),
        });
        for s in psc.sysctls.iter().flatten() {
            sysctls.insert(s.name.clone(), s.value.clone());
        }
    }

    let (overhead, resources) = sandbox_resources(pod);

    Ok(api::LinuxPodSandboxConfig {
        cgroup_parent: ctx.cgroup_parent.clone(),
        security_context: Some(security),
        sysctls,
        overhead: Some(overhead),
        resources: Some(resources),
    })
}

/// The CRI config to run the pod's sandbox with (attempt 0 for the first sandbox, +1 for each
/// replacement).
pub fn sandbox_config(
    pod: &Pod,
    attempt: u32,
    ctx: &SandboxContext,
) -> Result<api::PodSandboxConfig, ConfigError> {
    let meta = &pod.metadata;
    let name = meta.name.clone().unwrap_or_default();
    let namespace = meta.namespace.clone().unwrap_or_default();
    let uid = meta.uid.clone().unwrap_or_default();

    let mut cri_labels: HashMap<String, String> = meta
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    cri_labels.insert(labels::POD_NAME.to_string(), name.clone());
    cri_labels.insert(labels::POD_NAMESPACE.to_string(), namespace.clone());
    cri_labels.insert(labels::POD_UID.to_string(), uid.clone());
    cri_labels.insert(labels::NODE_NAME.to_string(), ctx.node_name.to_string());
    let annotations: HashMap<String, String> = meta
        .annotations
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();

    // Host-network pods keep the node's hostname.
    let hostname = if host_network(pod) {
        String::new()
    } else {
        kernel_hostname(pod, ctx.cluster_domain)?
    };

    Ok(api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.clone(),
            uid: uid.clone(),
            namespace: namespace.clone(),
            attempt,
        }),
        hostname,
        log_directory: pod_log_dir(ctx.pod_logs_dir, &namespace, &name, &uid)
            .to_string_lossy()
            .into_owned(),
        dns_config: Some(pod_dns_config(pod, ctx)?),
        port_mappings: port_mappings(pod),
        labels: cri_labels,
        annotations,
        linux: Some(sandbox_linux_config(pod, ctx)?),
        windows: None,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{
        ContainerPort, PodDNSConfig, PodDNSConfigOption, PodSecurityContext, PodSpec,
        SecurityContext, Sysctl,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::podspec::resources::test_support::{container, sidecar};

    fn pod(name: &str, spec: PodSpec) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns1".into()),
                uid: Some("uid-1".into()),
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                annotations: Some(BTreeMap::from([("team".into(), "core".into())])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: if spec.containers.is_empty() {
                    vec![container("c", "", "")]
                } else {
                    spec.containers.clone()
                },
                ..spec
            }),
            status: None,
        }
    }

    fn ctx<'a>(cluster_dns: &'a [IpAddr], resolv: Option<&'a str>) -> SandboxContext<'a> {
        SandboxContext {
            node_name: "node-1",
            pod_logs_dir: Path::new("/var/log/pods"),
            cgroup_parent: "/kubepods/besteffort/poduid-1".into(),
            cluster_dns,
            cluster_domain: "cluster.local",
            host_resolv_conf: resolv,
        }
    }

    #[test]
    fn host_network_sandbox_has_no_hostname() {
        let p = pod(
            "p",
            PodSpec {
                host_network: Some(true),
                ..Default::default()
            },
        );
        let cfg = sandbox_config(&p, 0, &ctx(&[], None)).unwrap();
        assert_eq!(cfg.hostname, "");
    }

    #[test]
    fn resolv_conf_parsing() {
        let conf = parse_resolv_conf(
            "# comment\nnameserver 10.0.0.2\nnameserver 10.0.0.3\nsearch old.example\n\
             search corp.example. . lab.example\noptions ndots:2\noptions rotate timeout:1\nnameserver\n",
        );
        assert_eq!(
            conf,
            ResolvConf {
                nameservers: vec!["10.0.0.2".into(), "10.0.0.3".into()],
                searches: vec!["corp.example".into(), "lab.example".into()],
                options: vec!["rotate".into(), "timeout:1".into()],
            }
        );
    }

    const HOST: &str = "nameserver 192.168.0.1\nsearch corp.example\noptions timeout:2\n";

    #[test]
    fn dns_policy_table() {
        let cluster_dns = ["10.96.0.10".parse().unwrap()];
        let dns = |servers: &[&str], searches: &[&str], options: &[&str]| api::DnsConfig {
            servers: servers.iter().map(|s| s.to_string()).collect(),
            searches: searches.iter().map(|s| s.to_string()).collect(),
            options: options.iter().map(|s| s.to_string()).collect(),
        };
        let cluster_search = [
            "ns1.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
            "corp.example",
        ];
        let spec = |policy: Option<&str>, host_net: bool| PodSpec {
            dns_policy: policy.map(str::to_string),
            host_network: Some(host_net),
            ..Default::default()
        };
        type Case<'a> = (
            &'a str,
            PodSpec,
            &'a [IpAddr],
            Option<&'a str>,
            api::DnsConfig,
        );
        let cases: Vec<Case> = vec![
            (
                "ClusterFirst",
                spec(Some("ClusterFirst"), false),
                &cluster_dns,
                Some(HOST),
                dns(&["10.96.0.10"], &cluster_search, &["ndots:5"]),
            ),
            (
                "default policy is ClusterFirst",
                spec(None, false),
                &cluster_dns,
                Some(HOST),
                dns(&["10.96.0.10"], &cluster_search, &["ndots:5"]),
            ),
            (
                "ClusterFirst on the host network resolves like the node",
                spec(Some("ClusterFirst"), true),
                &cluster_dns,
                Some(HOST),
                dns(&["192.168.0.1"], &["corp.example"], &["timeout:2"]),
            ),
            (
                "ClusterFirstWithHostNet",
                spec(Some("ClusterFirstWithHostNet"), true),
                &cluster_dns,
                Some(HOST),
                dns(&["10.96.0.10"], &cluster_search, &["ndots:5"]),
            ),
            (
                "ClusterFirst without clusterDNS falls back to Default",
                spec(Some("ClusterFirst"), false),
                &[],
                Some(HOST),
                dns(&["192.168.0.1"], &["corp.example"], &["timeout:2"]),
            ),
            (
                "Default",
                spec(Some("Default"), false),
                &cluster_dns,
                Some(HOST),
                dns(&["192.168.0.1"], &["corp.example"], &["timeout:2"]),
            ),
            (
                "Default with resolvConf \"\"",
                spec(Some("Default"), false),
                &cluster_dns,
                None,
                dns(&["127.0.0.1"], &["."], &[]),
            ),
            (
                "None",
                spec(Some("None"), false),
                &cluster_dns,
                Some(HOST),
                dns(&[], &[], &[]),
            ),
        ];
        for (name, spec, cluster, resolv, want) in cases {
            let p = pod("p", spec);
            let got = pod_dns_config(&p, &ctx(cluster, resolv)).unwrap();
            assert_eq!(got, want, "{name}");
            let falls_back = name.contains("falls back");
            assert_eq!(missing_cluster_dns(&p, cluster), falls_back, "{name}");
        }
    }

    #[test]
    fn dns_config_merges_into_every_policy() {
        let cluster_dns = ["10.96.0.10".parse().unwrap()];
        let p = pod(
            "p",
            PodSpec {
                dns_policy: Some("ClusterFirst".into()),
                dns_config: Some(PodDNSConfig {
                    nameservers: Some(vec!["1.1.1.1".into(), "10.96.0.10".into()]),
                    searches: Some(vec!["extra.example".into(), "cluster.local".into()]),
                    options: Some(vec![
                        PodDNSConfigOption {
                            name: Some("ndots".into()),
                            value: Some("2".into()),
                        },
                        PodDNSConfigOption {
                            name: Some("edns0".into()),
                            value: None,
                        },
                    ]),
                }),
                ..Default::default()
            },
        );
        let got = pod_dns_config(&p, &ctx(&cluster_dns, Some(HOST))).unwrap();
        assert_eq!(got.servers, ["10.96.0.10", "1.1.1.1"]);
        assert_eq!(
            got.searches,
            [
                "ns1.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example",
                "extra.example"
            ]
        );
        assert_eq!(got.options, ["ndots:2", "edns0"]);

        let p = pod(
            "p",
            PodSpec {
                dns_policy: Some("None".into()),
                dns_config: Some(PodDNSConfig {
                    nameservers: Some(vec![
                        "1.1.1.1".into(),
                        "8.8.8.8".into(),
                        "9.9.9.9".into(),
                        "8.8.4.4".into(),
                    ]),
                    searches: Some((0..40).map(|i| format!("d{i}.example")).collect()),
                    options: None,
                }),
                ..Default::default()
            },
        );
        let got = pod_dns_config(&p, &ctx(&cluster_dns, Some(HOST))).unwrap();
        assert_eq!(got.servers, ["1.1.1.1", "8.8.8.8", "9.9.9.9"]);
        assert_eq!(got.searches.len(), MAX_DNS_SEARCH_PATHS);
        assert!(got.options.is_empty());

        let p = pod(
            "p",
            PodSpec {
                dns_policy: Some("Sometimes".into()),
                ..Default::default()
            },
        );
        assert!(pod_dns_config(&p, &ctx(&cluster_dns, None))
            .unwrap_err()
            .to_string()
            .starts_with("spec.dnsPolicy: Invalid value: \"Sometimes\""));
    }

    #[test]
    fn search_list_is_cut_to_2048_characters() {
        let long: Vec<String> = (0..10).map(|i| format!("{i}{}", "x".repeat(250))).collect();
        let p = pod(
            "p",
            PodSpec {
                dns_policy: Some("None".into()),
                dns_config: Some(PodDNSConfig {
                    searches: Some(long.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        let got = pod_dns_config(&p, &ctx(&[], None)).unwrap();
        // 8 * 251 + 7 spaces = 2015 fits; 9 would be 2267
        assert_eq!(got.searches, long[..8]);
    }

    fn port(
        name: &str,
        container_port: i32,
        host_port: i32,
        protocol: Option<&str>,
        host_ip: &str,
    ) -> ContainerPort {
        ContainerPort {
            name: (!name.is_empty()).then(|| name.to_string()),
            container_port,
            host_port: (host_port != 0).then_some(host_port),
            protocol: protocol.map(str::to_string),
            host_ip: (!host_ip.is_empty()).then(|| host_ip.to_string()),
        }
    }

    #[test]
    fn port_mappings_table() {
        let tcp = api::Protocol::Tcp as i32;
        let udp = api::Protocol::Udp as i32;
        let pm = |protocol, container_port, host_port, host_ip: &str| api::PortMapping {
            protocol,
            container_port,
            host_port,
            host_ip: host_ip.to_string(),
        };
        let mut a = container("a", "", "");
        a.ports = Some(vec![
            port("", 80, 8080, None, "127.0.0.1"),
            port("", 443, 4343, Some("TCP"), "192.168.0.1"),
            port("foo", 555, 5555, Some("UDP"), ""),
            port("foo", 888, 8888, Some("UDP"), ""),
            port("", 80, 8080, None, "127.0.0.1"),
            port("", 80, 8080, None, "::"),
            port("", 9090, 0, None, ""),
        ]);
        let mut b = container("b", "", "");
        b.ports = Some(vec![port("", 53, 53, Some("UDP"), "")]);
        let init = {
            let mut i = sidecar("i", "", "");
            i.ports = Some(vec![port("", 1, 1, None, "")]);
            i
        };
        let p = pod(
            "p",
            PodSpec {
                containers: vec![a.clone(), b],
                init_containers: Some(vec![init]),
                ..Default::default()
            },
        );
        assert_eq!(
            port_mappings(&p),
            vec![
                pm(tcp, 80, 8080, "127.0.0.1"),
                pm(tcp, 443, 4343, "192.168.0.1"),
                pm(udp, 555, 5555, ""),
                pm(tcp, 80, 8080, "::"),
                pm(tcp, 9090, 0, ""),
                pm(udp, 53, 53, ""),
            ]
        );
        // host network: hostPort defaults to containerPort
        let p = pod(
            "p",
            PodSpec {
                containers: vec![a],
                host_network: Some(true),
                ..Default::default()
            },
        );
        assert!(port_mappings(&p).contains(&pm(tcp, 9090, 9090, "")));
    }

    #[test]
    fn sandbox_config_fields() {
        let mut privileged_init = container("init", "", "");
        privileged_init.security_context = Some(SecurityContext {
            privileged: Some(true),
            ..Default::default()
        });
        let p = pod(
            "web",
            PodSpec {
                containers: vec![
                    container("a", "cpu=250m,memory=64Mi", "cpu=500m,memory=128Mi"),
                    container("b", "cpu=250m", "memory=64Mi"),
                ],
                init_containers: Some(vec![privileged_init]),
                host_pid: Some(true),
                host_ipc: Some(true),
                security_context: Some(PodSecurityContext {
                    run_as_user: Some(1000),
                    run_as_group: Some(3000),
                    fs_group: Some(2000),
                    sysctls: Some(vec![Sysctl {
                        name: "net.core.somaxconn".into(),
                        value: "1024".into(),
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        let cfg = sandbox_config(&p, 3, &ctx(&[], None)).unwrap();
        let meta = cfg.metadata.unwrap();
        assert_eq!(
            (
                meta.name.as_str(),
                meta.namespace.as_str(),
                meta.uid.as_str(),
                meta.attempt
            ),
            ("web", "ns1", "uid-1", 3)
        );
        assert_eq!(cfg.hostname, "web");
        assert_eq!(cfg.log_directory, "/var/log/pods/ns1_web_uid-1");
        let want_labels = [
            ("app", "web"),
            (labels::POD_NAME, "web"),
            (labels::POD_NAMESPACE, "ns1"),
            (labels::POD_UID, "uid-1"),
            (labels::NODE_NAME, "node-1"),
        ];
        assert_eq!(cfg.labels.len(), want_labels.len());
        for (k, v) in want_labels {
            assert_eq!(cfg.labels[k], v, "{k}");
        }
        assert_eq!(
            cfg.annotations,
            HashMap::from([("team".into(), "core".into())])
        );

        let linux = cfg.linux.unwrap();
        assert_eq!(linux.cgroup_parent, "/kubepods/besteffort/poduid-1");
        assert_eq!(linux.sysctls["net.core.somaxconn"], "1024");
        let sc = linux.security_context.unwrap();
        assert!(sc.privileged);
        assert_eq!(sc.run_as_user.map(|v| v.value), Some(1000));
        assert_eq!(sc.run_as_group.map(|v| v.value), Some(3000));
        assert_eq!(sc.supplemental_groups, [2000]);
        assert_eq!(
            sc.seccomp.unwrap().profile_type,
            api::security_profile::ProfileType::RuntimeDefault as i32
        );
        let ns = sc.namespace_options.unwrap();
        use api::NamespaceMode as M;
        assert_eq!(
            (ns.network, ns.pid, ns.ipc),
            (M::Pod as i32, M::Node as i32, M::Node as i32)
        );
        assert_eq!(ns.userns_options.unwrap().mode, M::Node as i32);

        // requests 500m → 512 shares; limits summed: cpu 500m, memory 192Mi
        let r = linux.resources.unwrap();
        assert_eq!(
            (
                r.cpu_shares,
                r.cpu_quota,
                r.cpu_period,
                r.memory_limit_in_bytes
            ),
            (512, 50_000, 100_000, 192 << 20)
        );
        assert_eq!(
            linux.overhead.unwrap(),
            api::LinuxContainerResources::default()
        );
    }

    #[test]
    fn host_users_false_gets_the_pods_own_user_namespace() {
        use api::NamespaceMode as M;
        let mode = |host_users: Option<bool>| {
            let p = pod(
                "p",
                PodSpec {
                    host_users,
                    ..Default::default()
                },
            );
            let cfg = sandbox_config(&p, 0, &ctx(&[], None)).unwrap();
            let ns = namespace_options(&p).unwrap();
            assert_eq!(
                cfg.linux
                    .unwrap()
                    .security_context
                    .unwrap()
                    .namespace_options,
                Some(ns.clone())
            );
            ns.userns_options.unwrap()
        };
        assert_eq!(mode(None).mode, M::Node as i32);
        assert_eq!(mode(Some(true)).mode, M::Node as i32);
        // Mode POD without mappings until the executor puts the pod's range in.
        let own = mode(Some(false));
        assert_eq!((own.mode, own.uids.len()), (M::Pod as i32, 0));

        let p = pod(
            "p",
            PodSpec {
                host_users: Some(false),
                ..Default::default()
            },
        );
        let mut cfg = sandbox_config(&p, 0, &ctx(&[], None)).unwrap();
        let ns = pod_user_namespace(crate::userns::Mapping {
            host_id: 131072,
            length: 65536,
        });
        let want = api::IdMapping {
            host_id: 131072,
            container_id: 0,
            length: 65536,
        };
        assert_eq!(
            (ns.uids.as_slice(), ns.gids.as_slice()),
            (&[want][..], &[want][..])
        );
        set_user_namespace(&mut cfg, ns.clone());
        assert_eq!(sandbox_user_namespace(&cfg), Some(&ns));
        // A node-namespace sandbox gives containers nothing to join.
        let node = sandbox_config(&pod("p", PodSpec::default()), 0, &ctx(&[], None)).unwrap();
        assert_eq!(sandbox_user_namespace(&node), None);
    }
}
