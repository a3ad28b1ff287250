//! The pod's hostname and domain (`GeneratePodHostNameAndDomain`, `GetNodenameForKernel` in
//! the kubelet), which the sandbox's UTS namespace and the managed `/etc/hosts` both use.

use k8s_openapi::api::core::v1::Pod;

use super::error::ConfigError;
use super::field;

const HOSTNAME_MAX_LEN: usize = 63;
const FQDN_MAX_LEN: usize = 64;

/// `IsDNS1123Label`: the first reason `s` is not a DNS label, if it is not.
fn dns1123_label_error(s: &str) -> Option<String> {
    field::dns1123_label(s).into_iter().next()
}

/// `IsDNS1123Subdomain`: the first reason `s` is not a DNS subdomain, if it is not.
fn dns1123_subdomain_error(s: &str) -> Option<String> {
    field::dns1123_subdomain(s).into_iter().next()
}

/// Caps a hostname at 63 characters without a trailing `-` or `.`
/// (`truncatePodHostnameIfNeeded`).
fn truncate_hostname(hostname: &str) -> Result<String, ConfigError> {
    if hostname.len() <= HOSTNAME_MAX_LEN {
        return Ok(hostname.to_string());
    }
    // Hostnames are validated ASCII; cut on a char boundary all the same.
    let mut cut = HOSTNAME_MAX_LEN;
    while !hostname.is_char_boundary(cut) {
        cut -= 1;
    }
    let truncated = hostname[..cut].trim_end_matches(['-', '.']);
    if truncated.is_empty() {
        return Err(ConfigError::invalid(
            "metadata.name".to_string(),
            hostname.to_string(),
            "hostname for pod was invalid".to_string(),
        ));
    }
    Ok(truncated.to_string())
}

/// The pod's short hostname and its domain (`GeneratePodHostNameAndDomain`).
///
/// The hostname is `spec.hostname` or the pod name, cut to 63 characters; the domain is
/// `<subdomain>.<namespace>.svc.<clusterDomain>` when `spec.subdomain` is set.
/// `spec.hostnameOverride` (the seed's "Pod hostname" section) replaces both: the hostname is the
/// override and there is no domain.
pub fn pod_hostname_and_domain(
    pod: &Pod,
    cluster_domain: &str,
) -> Result<(String, String), ConfigError> {
    let spec = pod.spec.as_ref();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    if let Some(over) = spec.and_then(|s| s.hostname_override.as_deref()) {
        let err = if over.len() > FQDN_MAX_LEN {
            Some(format!("must be no more than {FQDN_MAX_LEN} characters"))
        } else {
            dns1123_subdomain_error(over)
        };
        if let Some(reason) = err {
            return Err(ConfigError::invalid(
                "spec.hostnameOverride".to_string(),
                over.to_string(),
                reason,
            ));
        }
        return Ok((truncate_hostname(over)?, String::new()));
    }
    let mut hostname = name;
    if let Some(h) = spec
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
    {
        if let Some(reason) = dns1123_label_error(h) {
            return Err(ConfigError::invalid(
                "spec.hostname".to_string(),
                h.to_string(),
                reason,
            ));
        }
        hostname = h;
    }
    let hostname = truncate_hostname(hostname)?;
    let mut domain = String::new();
    if let Some(sub) = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
    {
        if let Some(reason) = dns1123_label_error(sub) {
            return Err(ConfigError::invalid(
                "spec.subdomain".to_string(),
                sub.to_string(),
                reason,
            ));
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        domain = format!("{sub}.{namespace}.svc.{cluster_domain}");
    }
    Ok((hostname, domain))
}

/// The hostname the sandbox's UTS namespace gets (`GetNodenameForKernel`): the short hostname,
/// or `hostname.domain` with `setHostnameAsFQDN` and a subdomain; an FQDN longer than 64
/// characters cannot be a kernel hostname and is an error.
pub fn kernel_hostname(pod: &Pod, cluster_domain: &str) -> Result<String, ConfigError> {
    let (hostname, domain) = pod_hostname_and_domain(pod, cluster_domain)?;
    let as_fqdn = pod.spec.as_ref().and_then(|s| s.set_hostname_as_fqdn) == Some(true);
    if domain.is_empty() || !as_fqdn {
        return Ok(hostname);
    }
    let fqdn = format!("{hostname}.{domain}");
    if fqdn.len() > FQDN_MAX_LEN {
        return Err(ConfigError::FqdnTooLong { fqdn });
    }
    Ok(fqdn)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn pod(name: &str, spec: PodSpec) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns1".into()),
                uid: Some("uid-1".into()),
                ..Default::default()
            },
            spec: Some(spec),
            status: None,
        }
    }

    #[test]
    fn hostname_table() {
        let long = "a".repeat(70);
        let long_dash = format!("{}-b", "a".repeat(62));
        let cases: Vec<(&str, PodSpec, Result<&str, &str>)> = vec![
            ("busybox-1", PodSpec::default(), Ok("busybox-1")),
            (
                "busybox-1",
                PodSpec {
                    hostname: Some("my-host".into()),
                    ..Default::default()
                },
                Ok("my-host"),
            ),
            (
                "busybox-1",
                PodSpec {
                    hostname: Some("foo".into()),
                    subdomain: Some("bar".into()),
                    ..Default::default()
                },
                Ok("foo"),
            ),
            (
                "busybox-1",
                PodSpec {
                    hostname: Some("foo".into()),
                    subdomain: Some("bar".into()),
                    set_hostname_as_fqdn: Some(true),
                    ..Default::default()
                },
                Ok("foo.bar.ns1.svc.cluster.local"),
            ),
            (
                "busybox-1",
                PodSpec {
                    set_hostname_as_fqdn: Some(true),
                    ..Default::default()
                },
                Ok("busybox-1"),
            ),
            (&long, PodSpec::default(), Ok(&long[..63])),
            (&long_dash, PodSpec::default(), Ok(&long_dash[..62])),
            (
                "busybox-2",
                PodSpec {
                    hostname: Some("ignored".into()),
                    subdomain: Some("bar".into()),
                    hostname_override: Some("busybox-2.busybox.example.domain".into()),
                    ..Default::default()
                },
                Ok("busybox-2.busybox.example.domain"),
            ),
            (
                "p",
                PodSpec {
                    hostname: Some("Bad_Host".into()),
                    ..Default::default()
                },
                Err("spec.hostname: Invalid value: \"Bad_Host\": a lowercase RFC 1123 label"),
            ),
            (
                "p",
                PodSpec {
                    hostname_override: Some("UPPER.example".into()),
                    ..Default::default()
                },
                Err("spec.hostnameOverride: Invalid value: \"UPPER.example\": a lowercase RFC 1123 subdomain"),
            ),
            (
                "p",
                PodSpec {
                    hostname: Some("a".repeat(30)),
                    subdomain: Some("b".repeat(20)),
                    set_hostname_as_fqdn: Some(true),
                    ..Default::default()
                },
                // The kubelet's message word for word (Kubernetes' FQDN [NodeConformance] test
                // waits for an event that contains it).
                Err("failed to construct FQDN from pod hostname and cluster domain, FQDN aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.bbbbbbbbbbbbbbbbbbbb.ns1.svc.cluster.local is too long (64 characters is the max, 73 characters requested)"),
            ),
        ];
        for (name, spec, want) in cases {
            let got = kernel_hostname(&pod(name, spec), "cluster.local").map_err(|e| e.to_string());
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{name}"),
                (Err(got), Err(want)) => assert!(got.starts_with(want), "{got}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }
}
