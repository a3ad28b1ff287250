//! Facts about this node that pods see: its IPs (status.hostIP, Downward API), CPU and memory
//! capacity (resourceFieldRef defaults, oom_score_adj). Cluster-mode registration, node status and
//! leases will live here too.

use std::net::IpAddr;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    pub host_ips: Vec<String>,
    pub cpu_capacity_milli: i64,
    pub memory_capacity: u64,
}

impl NodeInfo {
    /// Reads the node's facts; `node_ip` from the configuration wins over detection.
    pub fn detect(name: &str, node_ip: Option<IpAddr>, proc_root: &Path) -> NodeInfo {
        let host_ips = match node_ip {
            Some(ip) => vec![ip.to_string()],
            None => detect_host_ip()
                .map(|ip| vec![ip.to_string()])
                .unwrap_or_default(),
        };
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let memory_capacity = std::fs::read_to_string(proc_root.join("meminfo"))
            .ok()
            .and_then(|s| mem_total_bytes(&s))
            .unwrap_or(0);
        NodeInfo {
            name: name.to_string(),
            host_ips,
            cpu_capacity_milli: i64::try_from(cpus).unwrap_or(1) * 1000,
            memory_capacity,
        }
    }
}

/// `MemTotal:  24597084 kB` → bytes.
pub fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let rest = line.strip_prefix("MemTotal:")?;
        let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        kb.checked_mul(1024)
    })
}

/// The address of the interface that holds the default route, else the first non-loopback
/// IPv4 address of any interface that is up.
pub fn detect_host_ip() -> Option<IpAddr> {
    // connect() on a UDP socket sends nothing; it only asks the kernel which source address
    // it would route from.
    if let Ok(sock) = std::net::UdpSocket::bind("0.0.0.0:0") {
        if sock.connect("192.0.2.1:9").is_ok() {
            if let Ok(addr) = sock.local_addr() {
                if !addr.ip().is_unspecified() {
                    return Some(addr.ip());
                }
            }
        }
    }
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for ifa in addrs {
        if !ifa.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP) {
            continue;
        }
        if let Some(sin) = ifa.address.as_ref().and_then(|a| a.as_sockaddr_in()) {
            let ip = IpAddr::V4(sin.ip());
            if !ip.is_loopback() {
                return Some(ip);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_table() {
        let cases = [
            (
                "MemTotal:       24597084 kB\nMemFree: 1 kB\n",
                Some(24_597_084 * 1024),
            ),
            ("MemFree: 1 kB\n", None),
            ("MemTotal: lots\n", None),
        ];
        for (input, want) in cases {
            assert_eq!(mem_total_bytes(input), want, "{input:?}");
        }
    }

    #[test]
    fn detects_from_a_fake_proc() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("meminfo"), "MemTotal: 1024 kB\n").unwrap();
        let info = NodeInfo::detect("n1", Some("10.1.2.3".parse().unwrap()), dir.path());
        assert_eq!(info.memory_capacity, 1024 * 1024);
        assert_eq!(info.host_ips, vec!["10.1.2.3".to_string()]);
        assert!(info.cpu_capacity_milli >= 1000);
    }
}
