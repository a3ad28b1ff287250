//! The /etc/hosts file the kubelet manages for each pod (`managedHostsFileContent`,
//! `nodeHostsFileContent` and `hostsEntriesFromHostAliases` in `pkg/kubelet/kubelet_pods.go`).

use k8s_openapi::api::core::v1::HostAlias;

pub const MANAGED_HOSTS_HEADER: &str = "# Kubernetes-managed hosts file.\n";
pub const MANAGED_HOSTS_HEADER_WITH_HOST_NETWORK: &str =
    "# Kubernetes-managed hosts file (host network).\n";

/// `hostAliases` as hosts lines, one line per IP, after a blank line and a comment.
pub fn host_alias_entries(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for alias in aliases {
        let names = alias.hostnames.clone().unwrap_or_default().join("\t");
        out.push_str(&format!("{}\t{names}\n", alias.ip));
    }
    out
}

/// The hosts file of a pod with its own network: localhost entries, the pod's IPs with its
/// hostname (and FQDN when it has a domain), then its host aliases.
pub fn managed_hosts_content(
    pod_ips: &[String],
    hostname: &str,
    domain: &str,
    aliases: &[HostAlias],
) -> String {
    let mut out = String::from(MANAGED_HOSTS_HEADER);
    out.push_str("127.0.0.1\tlocalhost\n");
    out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    out.push_str("fe00::0\tip6-localnet\n");
    out.push_str("fe00::0\tip6-mcastprefix\n");
    out.push_str("fe00::1\tip6-allnodes\n");
    out.push_str("fe00::2\tip6-allrouters\n");
    for ip in pod_ips {
        if domain.is_empty() {
            out.push_str(&format!("{ip}\t{hostname}\n"));
        } else {
            out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
        }
    }
    out.push_str(&host_alias_entries(aliases));
    out
}

/// The hosts file of a host-network pod: the node's own hosts file plus the pod's aliases.
pub fn host_network_hosts_content(node_hosts: &str, aliases: &[HostAlias]) -> String {
    let mut out = String::from(MANAGED_HOSTS_HEADER_WITH_HOST_NETWORK);
    out.push_str(node_hosts);
    out.push_str(&host_alias_entries(aliases));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alias(ip: &str, names: &[&str]) -> HostAlias {
        HostAlias {
            ip: ip.into(),
            hostnames: Some(names.iter().map(|n| n.to_string()).collect()),
        }
    }

    const LOCAL: &str = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n";

    #[test]
    fn managed_hosts_table() {
        type Case<'a> = (Vec<String>, &'a str, &'a str, Vec<HostAlias>, String);
        let cases: Vec<Case> = vec![
            (
                vec!["10.0.0.5".into()],
                "web",
                "",
                vec![],
                format!("{LOCAL}10.0.0.5\tweb\n"),
            ),
            (
                vec!["10.0.0.5".into(), "fd00::5".into()],
                "foo",
                "bar.ns.svc.cluster.local",
                vec![],
                format!("{LOCAL}10.0.0.5\tfoo.bar.ns.svc.cluster.local\tfoo\nfd00::5\tfoo.bar.ns.svc.cluster.local\tfoo\n"),
            ),
            (
                vec!["10.0.0.5".into()],
                "web",
                "",
                vec![alias("1.2.3.4", &["a.example", "b.example"]), alias("5.6.7.8", &["c"])],
                format!("{LOCAL}10.0.0.5\tweb\n\n# Entries added by HostAliases.\n1.2.3.4\ta.example\tb.example\n5.6.7.8\tc\n"),
            ),
        ];
        for (ips, hostname, domain, aliases, want) in cases {
            assert_eq!(
                managed_hosts_content(&ips, hostname, domain, &aliases),
                want
            );
        }
    }

    #[test]
    fn host_network_copies_the_node_file() {
        let got = host_network_hosts_content(
            "127.0.0.1 localhost\n192.168.1.2 node-1\n",
            &[alias("1.2.3.4", &["x"])],
        );
        assert_eq!(
            got,
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n192.168.1.2 node-1\n\n# Entries added by HostAliases.\n1.2.3.4\tx\n"
        );
    }
}
