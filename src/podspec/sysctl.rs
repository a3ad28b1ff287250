//! Which pod sysctls a node lets through, as the kubelet's sysctl admission
//! (`pkg/kubelet/sysctl`): the safe set for the running kernel plus the operator's
//! `allowedUnsafeSysctls` (names or prefixes ending in `*`), every entry known to be namespaced
//! by the kernel, and none of the network or IPC ones for a pod that shares that namespace with
//! the host. Pure: the kernel release comes in as a string.

use std::collections::BTreeMap;

/// The admission reason of a pod with a sysctl the node does not allow.
pub const FORBIDDEN_REASON: &str = "SysctlForbidden";

/// The apimachinery limit on a sysctl name (`SysctlMaxLength`).
pub const MAX_LENGTH: usize = 253;

/// The kernel namespace a sysctl belongs to; only namespaced sysctls can be set per pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Namespace {
    Ipc,
    Net,
}

impl Namespace {
    fn as_str(self) -> &'static str {
        match self {
            Namespace::Ipc => "ipc",
            Namespace::Net => "net",
        }
    }
}

/// The namespace that isolates `name` (dot-separated), `None` when the kernel does not
/// namespace it (`NamespacedBy`).
pub fn namespaced_by(name: &str) -> Option<Namespace> {
    if name == "kernel.sem" {
        return Some(Namespace::Ipc);
    }
    const PREFIXES: [(&str, Namespace); 4] = [
        ("kernel.shm", Namespace::Ipc),
        ("kernel.msg", Namespace::Ipc),
        ("fs.mqueue.", Namespace::Ipc),
        ("net.", Namespace::Net),
    ];
    PREFIXES
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map(|(_, ns)| *ns)
}

/// A sysctl written with `/` separators (`net/ipv4/conf/eth0.100/rp_filter`) in the dotted form
/// (`net.ipv4.conf.eth0/100.rp_filter`): when the first separator is `/`, dots and slashes swap
/// (`ConvertSysctlVariableToDotsSeparator`).
pub fn to_dots(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// Safe sysctls every kernel the kubelet supports namespaces (`legacySafeSysctls`).
const ALWAYS_SAFE: [&str; 9] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// Safe sysctls the kernel namespaces from a release on (`newerSysctls`).
const SAFE_FROM_KERNEL: [(&str, (u32, u32)); 3] = [
    ("net.ipv4.ip_local_reserved_ports", (3, 16)),
    ("net.ipv4.tcp_rmem", (4, 15)),
    ("net.ipv4.tcp_wmem", (4, 15)),
];

/// `major.minor` of a kernel release as `uname -r` prints it (`6.1.0-18-amd64`).
fn kernel_major_minor(release: &str) -> Option<(u32, u32)> {
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(str::parse::<u32>);
    let major = parts.next()?.ok()?;
    let minor = parts.next()?.ok()?;
    Some((major, minor))
}

/// The safe set on a node running kernel `release`; an unreadable release gives the set every
/// kernel has, as the kubelet does.
pub fn safe_sysctls(release: &str) -> Vec<&'static str> {
    let version = kernel_major_minor(release);
    let mut safe = ALWAYS_SAFE.to_vec();
    safe.extend(
        SAFE_FROM_KERNEL
            .iter()
            .filter(|(_, since)| version.is_some_and(|v| v >= *since))
            .map(|(name, _)| *name),
    );
    safe
}

/// One name segment of a sysctl: `[a-z0-9]([-_a-z0-9]*[a-z0-9])?`.
fn is_segment(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
        && b.iter().all(|c| edge(c) || *c == b'-' || *c == b'_')
}

/// The last segment of a pattern: `([a-z0-9][-_a-z0-9]*)?[a-z0-9*]`.
fn is_pattern_tail(s: &str) -> bool {
    let b = s.as_bytes();
    let Some((last, rest)) = b.split_last() else {
        return false;
    };
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (edge(last) || *last == b'*')
        && (rest.is_empty()
            || (edge(&rest[0]) && rest.iter().all(|c| edge(c) || *c == b'-' || *c == b'_')))
}

/// `IsValidSysctlPattern`: segments separated by `.` or `/`, the last one may end in `*`, at
/// most 253 characters.
pub fn is_valid_pattern(pattern: &str) -> bool {
    if pattern.len() > MAX_LENGTH {
        return false;
    }
    let mut segments: Vec<&str> = pattern.split(['.', '/']).collect();
    let Some(tail) = segments.pop() else {
        return false;
    };
    segments.into_iter().all(is_segment) && is_pattern_tail(tail)
}

/// The API server's `IsValidSysctlName`: segments of `[a-z0-9]([-_a-z0-9]*[a-z0-9])?`
/// separated by `.` or `/`, at most 253 characters. No empty segment, so no `..`, no leading
/// or trailing separator: a name cannot climb out of `/proc/sys`.
pub fn is_valid_name(name: &str) -> bool {
    name.len() <= MAX_LENGTH && name.split(['.', '/']).all(is_segment)
}

/// The API server's message for a name that is not a sysctl name.
pub fn invalid_name_detail() -> String {
    format!(
        "must have at most {MAX_LENGTH} characters and match regex \
         ^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$"
    )
}

/// The sysctls a node admits: exact names and prefixes, each with its namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    names: BTreeMap<String, Namespace>,
    prefixes: BTreeMap<String, Namespace>,
}

impl Allowlist {
    /// From the safe set and `allowedUnsafeSysctls`; an entry that is not a sysctl pattern or
    /// not namespaced is an error in the kubelet's words (the kubelet does not start).
    pub fn new<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Result<Allowlist, String> {
        let mut list = Allowlist::default();
        for pattern in patterns {
            if !is_valid_pattern(pattern) {
                return Err(format!(
                    "sysctl {pattern:?} must have at most {MAX_LENGTH} characters and match regex \
                     ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]"
                ));
            }
            let dotted = to_dots(pattern);
            if let Some(prefix) = dotted.strip_suffix('*') {
                let ns = namespaced_by(prefix).ok_or_else(|| {
                    format!("the sysctls {dotted:?} are not known to be namespaced")
                })?;
                list.prefixes.insert(prefix.to_string(), ns);
            } else {
                let ns = namespaced_by(&dotted).ok_or_else(|| {
                    format!("the sysctl {dotted:?} are not known to be namespaced")
                })?;
                list.names.insert(dotted, ns);
            }
        }
        Ok(list)
    }

    /// Why the pod may not set `name` (`validateSysctl`), `None` when it may.
    pub fn forbids(&self, name: &str, host_network: bool, host_ipc: bool) -> Option<String> {
        let name = to_dots(name);
        let ns = self.names.get(&name).copied().or_else(|| {
            self.prefixes
                .iter()
                .find(|(prefix, _)| name.starts_with(prefix.as_str()))
                .map(|(_, ns)| *ns)
        });
        match ns {
            None => Some(format!("{name:?} not allowlisted")),
            Some(ns @ Namespace::Ipc) if host_ipc => Some(format!(
                "{name:?} not allowed with host {} enabled",
                ns.as_str()
            )),
            Some(ns @ Namespace::Net) if host_network => Some(format!(
                "{name:?} not allowed with host {} enabled",
                ns.as_str()
            )),
            Some(_) => None,
        }
    }

    /// The admission verdict for a pod's `spec.securityContext.sysctls`: the kubelet's message
    /// for the first one it may not set.
    pub fn admit<'a>(
        &self,
        sysctls: impl IntoIterator<Item = &'a str>,
        host_network: bool,
        host_ipc: bool,
    ) -> Result<(), String> {
        for name in sysctls {
            if let Some(why) = self.forbids(name, host_network, host_ipc) {
                return Err(format!("forbidden sysctl: {why}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_the_api_server_validates_them() {
        for (name, valid) in [
            ("net.core.somaxconn", true),
            ("net/ipv4/conf/eth0.100/rp_filter", true),
            ("kernel.shm_rmid_forced", true),
            ("net.ipv4.ip_local_port_range", true),
            ("a", true),
            ("net.ipv4/../../kernel/core_pattern", false),
            ("net..core", false),
            (".net.core", false),
            ("net.core.", false),
            ("net.core.-x", false),
            ("net.core.x_", false),
            ("Net.core", false),
            ("net.core*", false),
            ("", false),
            ("net.core somaxconn", false),
        ] {
            assert_eq!(is_valid_name(name), valid, "{name:?}");
        }
        let long = format!("net.{}", "a".repeat(MAX_LENGTH - 4));
        assert!(is_valid_name(&long));
        assert!(!is_valid_name(&format!("{long}a")));
    }

    #[test]
    fn namespaces_and_separators() {
        let cases: &[(&str, Option<Namespace>)] = &[
            ("kernel.sem", Some(Namespace::Ipc)),
            ("kernel.shmmax", Some(Namespace::Ipc)),
            ("kernel.shm_rmid_forced", Some(Namespace::Ipc)),
            ("kernel.msgmax", Some(Namespace::Ipc)),
            ("fs.mqueue.msg_max", Some(Namespace::Ipc)),
            ("net.core.somaxconn", Some(Namespace::Net)),
            ("kernel.semx", None),
            ("kernel.hostname", None),
            ("vm.swappiness", None),
            ("fs.mqueue", None),
            ("", None),
        ];
        for (name, want) in cases {
            assert_eq!(namespaced_by(name), *want, "{name}");
        }
        let dots: &[(&str, &str)] = &[
            ("net.ipv4.tcp_syncookies", "net.ipv4.tcp_syncookies"),
            ("net/ipv4/tcp_syncookies", "net.ipv4.tcp_syncookies"),
            (
                "net/ipv4/conf/eno2.100/rp_filter",
                "net.ipv4.conf.eno2/100.rp_filter",
            ),
            (
                "net.ipv4.conf.eno2/100.rp_filter",
                "net.ipv4.conf.eno2/100.rp_filter",
            ),
            ("kernel", "kernel"),
            ("", ""),
        ];
        for (name, want) in dots {
            assert_eq!(to_dots(name), *want, "{name}");
        }
    }

    #[test]
    fn the_safe_set_follows_the_kernel() {
        let old = safe_sysctls("3.10.0-1160.el7.x86_64");
        assert_eq!(old.len(), 9);
        assert!(!old.contains(&"net.ipv4.ip_local_reserved_ports"));
        let mid = safe_sysctls("4.14.1");
        assert!(mid.contains(&"net.ipv4.ip_local_reserved_ports"));
        assert!(!mid.contains(&"net.ipv4.tcp_rmem"));
        let new = safe_sysctls("6.1.0-18-amd64");
        assert_eq!(new.len(), 12);
        assert!(new.contains(&"net.ipv4.tcp_wmem"));
        // An unreadable release: only what every kernel has.
        assert_eq!(safe_sysctls(""), ALWAYS_SAFE.to_vec());
        assert_eq!(safe_sysctls("garbage"), ALWAYS_SAFE.to_vec());
    }

    #[test]
    fn patterns() {
        let cases: &[(&str, bool)] = &[
            ("kernel.shm*", true),
            ("kernel.shmmax", true),
            ("net.*", true),
            ("net/ipv4/*", true),
            ("a", true),
            ("*", true),
            ("kernel..shm", false),
            ("kernel.shm**", false),
            ("Kernel.shm", false),
            ("kernel.-shm", false),
            ("kernel.shm-", false),
            ("kernel.*shm", false),
            ("", false),
            (".kernel", false),
        ];
        for (pattern, want) in cases {
            assert_eq!(is_valid_pattern(pattern), *want, "{pattern}");
        }
        assert!(!is_valid_pattern(&format!("net.{}", "a".repeat(250))));
    }

    #[test]
    fn allowlist_construction_refuses_what_the_kubelet_refuses() {
        let cases: &[(&str, Option<&str>)] = &[
            ("kernel.shm*", None),
            ("kernel.msgmax", None),
            ("net.core.somaxconn", None),
            ("net/core/*", None),
            (
                "vm.swappiness",
                Some("the sysctl \"vm.swappiness\" are not known to be namespaced"),
            ),
            (
                "kernel.*",
                Some("the sysctls \"kernel.*\" are not known to be namespaced"),
            ),
            (
                "*",
                Some("the sysctls \"*\" are not known to be namespaced"),
            ),
            (
                "Kernel.shm*",
                Some("sysctl \"Kernel.shm*\" must have at most 253 characters"),
            ),
        ];
        for (pattern, want) in cases {
            let got = Allowlist::new([*pattern]).err();
            match want {
                None => assert_eq!(got, None, "{pattern}"),
                Some(prefix) => assert!(
                    got.as_deref().is_some_and(|g| g.starts_with(prefix)),
                    "{pattern}: {got:?}"
                ),
            }
        }
    }

    #[test]
    fn admission_table() {
        let mut patterns = safe_sysctls("6.1.0");
        patterns.push("kernel.shm*");
        patterns.push("fs.mqueue.msg_max");
        let list = Allowlist::new(patterns).expect("allowlist");
        let safe_only = Allowlist::new(safe_sysctls("6.1.0")).expect("allowlist");
        // (list, sysctl, hostNetwork, hostIPC, verdict)
        type Case<'a> = (&'a Allowlist, &'a str, bool, bool, Result<(), &'a str>);
        let cases: &[Case] = &[
            (&safe_only, "net.ipv4.tcp_syncookies", false, false, Ok(())),
            (&safe_only, "net/ipv4/tcp_syncookies", false, false, Ok(())),
            (&safe_only, "net.ipv4.tcp_rmem", false, false, Ok(())),
            (
                &safe_only,
                "kernel.shmmax",
                false,
                false,
                Err("forbidden sysctl: \"kernel.shmmax\" not allowlisted"),
            ),
            (
                &safe_only,
                "net.core.somaxconn",
                false,
                false,
                Err("forbidden sysctl: \"net.core.somaxconn\" not allowlisted"),
            ),
            (
                &safe_only,
                "net.ipv4.tcp_syncookies",
                true,
                false,
                Err("forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host net enabled"),
            ),
            (&safe_only, "net.ipv4.tcp_syncookies", false, true, Ok(())),
            (&safe_only, "kernel.shm_rmid_forced", true, false, Ok(())),
            (
                &safe_only,
                "kernel.shm_rmid_forced",
                false,
                true,
                Err("forbidden sysctl: \"kernel.shm_rmid_forced\" not allowed with host ipc enabled"),
            ),
            (&list, "kernel.shmmax", false, false, Ok(())),
            (&list, "kernel.shmall", true, false, Ok(())),
            (
                &list,
                "kernel.shmall",
                false,
                true,
                Err("forbidden sysctl: \"kernel.shmall\" not allowed with host ipc enabled"),
            ),
            (&list, "fs.mqueue.msg_max", false, false, Ok(())),
            (
                &list,
                "fs.mqueue.queues_max",
                false,
                false,
                Err("forbidden sysctl: \"fs.mqueue.queues_max\" not allowlisted"),
            ),
        ];
        for (list, name, host_net, host_ipc, want) in cases {
            assert_eq!(
                list.admit([*name], *host_net, *host_ipc),
                want.map_err(str::to_string),
                "{name} hostNetwork={host_net} hostIPC={host_ipc}"
            );
        }
        // The first forbidden one is named; an empty list admits.
        assert_eq!(
            safe_only.admit(
                ["net.ipv4.tcp_syncookies", "kernel.msgmax", "vm.x"],
                false,
                false
            ),
            Err("forbidden sysctl: \"kernel.msgmax\" not allowlisted".into())
        );
        assert_eq!(safe_only.admit([], true, true), Ok(()));
    }
}
