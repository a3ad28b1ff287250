//! What the kubelet learns from cAdvisor's `MachineInfo` and `VersionInfo`, read from files.
//!
//! Every reader takes the host's root (`/` in production, a temp dir in tests) and reads the
//! same files cAdvisor does: `/proc/meminfo` (through `stats::node`, i.e. the `procfs` crate), `/sys/devices/system/cpu/online`,
//! `/sys/kernel/mm/hugepages`, `/etc/os-release`, `/etc/machine-id`,
//! `/proc/sys/kernel/random/boot_id`, `/sys/class/dmi/id/product_uuid`,
//! `/proc/sys/kernel/osrelease` (what `uname -r` prints). Missing or unreadable files give
//! empty values, as cAdvisor reports them; only the CPU count falls back to what the process
//! can see.
//!
//! [`NodeInfo`] gathers them with the node's name and addresses: the one view of the node that
//! admission, the Downward API's defaults, `oom_score_adj` and the Node's status share.

use std::net::IpAddr;
use std::path::Path;

/// The node's hardware and OS facts, read once at start (cAdvisor caches them the same way).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MachineInfo {
    /// Online logical CPUs.
    pub num_cores: u32,
    /// `MemTotal`, bytes.
    pub memory_capacity: u64,
    /// `SwapTotal`, bytes.
    pub swap_capacity: u64,
    /// `(page size in bytes, number of pages)` for every huge page size the kernel supports.
    pub hugepages: Vec<(u64, u64)>,
    /// Total bytes of the filesystem holding the root directory (`statfs` blocks × fragment
    /// size); `None` when it could not be read.
    pub ephemeral_storage_capacity: Option<u64>,
    pub kernel_version: String,
    /// `PRETTY_NAME` of os-release, `Linux` when there is none (cAdvisor's fallback).
    pub os_image: String,
    pub machine_id: String,
    pub boot_id: String,
    pub system_uuid: String,
}

impl MachineInfo {
    /// Reads the facts under `host_root`, and the capacity of the filesystem of `root_dir`
    /// (nodelet's state directory, as the kubelet's nodefs is the filesystem of its root dir).
    pub fn read(host_root: &Path, root_dir: &Path) -> MachineInfo {
        let read = |rel: &str| std::fs::read_to_string(host_root.join(rel)).ok();
        // cAdvisor reports 0 when meminfo cannot be read; so does nodelet, with a warning.
        let meminfo = super::node::read_meminfo(&host_root.join("proc"))
            .map_err(|e| tracing::warn!(error = %e, "memory capacity unknown"))
            .ok();
        let num_cores = read("sys/devices/system/cpu/online")
            .and_then(|s| count_cpu_list(&s))
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
            });
        let machine_id = read("etc/machine-id")
            .or_else(|| read("var/lib/dbus/machine-id"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        MachineInfo {
            num_cores,
            memory_capacity: meminfo.as_ref().map_or(0, |m| m.mem_total),
            swap_capacity: meminfo.as_ref().map_or(0, |m| m.swap_total),
            hugepages: read_hugepages(&host_root.join("sys/kernel/mm/hugepages")),
            ephemeral_storage_capacity: filesystem_capacity(root_dir),
            kernel_version: read("proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            os_image: read("etc/os-release")
                .and_then(|s| os_release_pretty_name(&s))
                .unwrap_or_else(|| "Linux".to_string()),
            machine_id,
            boot_id: read("proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            system_uuid: read("sys/class/dmi/id/product_uuid")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        }
    }
}

/// The number of CPUs in a kernel CPU list (`0-3,8,10-11` → 7).
pub fn count_cpu_list(list: &str) -> Option<u32> {
    let list = list.trim();
    if list.is_empty() {
        return None;
    }
    let mut count: u32 = 0;
    for part in list.split(',') {
        let part = part.trim();
        let n = match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                b.checked_sub(a)?.checked_add(1)?
            }
            None => {
                part.parse::<u32>().ok()?;
                1
            }
        };
        count = count.checked_add(n)?;
    }
    Some(count)
}

/// `PRETTY_NAME` from an os-release file, unquoted.
pub fn os_release_pretty_name(os_release: &str) -> Option<String> {
    os_release.lines().find_map(|line| {
        let value = line.trim().strip_prefix("PRETTY_NAME=")?;
        let value = value.trim();
        let unquoted = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        Some(unquoted.to_string()).filter(|v| !v.is_empty())
    })
}

/// `hugepages-2048kB/nr_hugepages` → `(2 MiB, count)`, sorted by page size.
pub fn read_hugepages(dir: &Path) -> Vec<(u64, u64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut pages: Vec<(u64, u64)> = entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name();
            let kb: u64 = name
                .to_str()?
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            let count = std::fs::read_to_string(entry.path().join("nr_hugepages"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            Some((kb.checked_mul(1024)?, count))
        })
        .collect();
    pages.sort_unstable();
    pages
}

/// Total bytes of the filesystem holding `path` (cAdvisor's `Capacity`: blocks × fragment size).
pub fn filesystem_capacity(path: &Path) -> Option<u64> {
    let stat = nix::sys::statvfs::statvfs(path).ok()?;
    // The field types are u32 on some 32-bit targets.
    #[allow(clippy::useless_conversion)]
    u64::from(stat.blocks()).checked_mul(u64::from(stat.fragment_size()))
}

/// The `kubernetes.io/arch` value (Go's `GOARCH`) for a Rust target architecture.
pub fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => {
            if cfg!(target_endian = "little") {
                "ppc64le"
            } else {
                "ppc64"
            }
        }
        "loongarch64" => "loong64",
        "mips64" => "mips64le",
        other => other,
    }
}

/// The node as the pod-facing parts see it: its name, addresses and machine facts. Admission,
/// allocatable, the Downward API's defaults, `oom_score_adj` and the Node's status all take
/// the capacity from this one `MachineInfo`, so they cannot disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    pub host_ips: Vec<String>,
    pub machine: MachineInfo,
}

impl NodeInfo {
    /// Reads the node's facts (machine facts under `host_root`, the filesystem of `root_dir`);
    /// `node_ip` from the configuration wins over detection.
    pub fn detect(
        name: &str,
        node_ip: Option<IpAddr>,
        host_root: &Path,
        root_dir: &Path,
    ) -> NodeInfo {
        let host_ips = match node_ip {
            Some(ip) => vec![ip.to_string()],
            None => detect_host_ip()
                .map(|ip| vec![ip.to_string()])
                .unwrap_or_default(),
        };
        NodeInfo {
            name: name.to_string(),
            host_ips,
            machine: MachineInfo::read(host_root, root_dir),
        }
    }

    /// CPU capacity in millicores: the machine's online CPUs.
    pub fn cpu_capacity_milli(&self) -> i64 {
        i64::from(self.machine.num_cores) * 1000
    }

    /// Memory capacity in bytes (`MemTotal`).
    pub fn memory_capacity(&self) -> u64 {
        self.machine.memory_capacity
    }
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
    fn cpu_list_table() {
        let cases = [
            ("0-3\n", Some(4)),
            ("0", Some(1)),
            ("0-3,8,10-11", Some(7)),
            ("", None),
            ("3-1", None),
            ("a-b", None),
        ];
        for (input, want) in cases {
            assert_eq!(count_cpu_list(input), want, "{input:?}");
        }
    }

    #[test]
    fn os_release_table() {
        let cases = [
            (
                "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n",
                Some("Debian GNU/Linux 12 (bookworm)"),
            ),
            (
                "PRETTY_NAME='Alpine Linux v3.19'\n",
                Some("Alpine Linux v3.19"),
            ),
            ("PRETTY_NAME=Plain\n", Some("Plain")),
            ("NAME=x\n", None),
            ("PRETTY_NAME=\"\"\n", None),
        ];
        for (input, want) in cases {
            assert_eq!(os_release_pretty_name(input).as_deref(), want, "{input:?}");
        }
    }

    #[test]
    fn go_arch_table() {
        let cases = [
            ("x86_64", "amd64"),
            ("aarch64", "arm64"),
            ("x86", "386"),
            ("s390x", "s390x"),
            ("riscv64", "riscv64"),
            ("arm", "arm"),
        ];
        for (rust, go) in cases {
            assert_eq!(go_arch(rust), go, "{rust}");
        }
    }

    fn write(root: &Path, rel: &str, content: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    #[test]
    fn reads_a_fake_host() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(
            root,
            "proc/meminfo",
            super::super::node::test_support::MEMINFO,
        );
        write(root, "sys/devices/system/cpu/online", "0-3\n");
        write(
            root,
            "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
            "4\n",
        );
        write(
            root,
            "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages",
            "0\n",
        );
        write(
            root,
            "etc/os-release",
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n",
        );
        write(root, "var/lib/dbus/machine-id", "abc123\n");
        write(root, "proc/sys/kernel/random/boot_id", "b00t\n");
        write(root, "proc/sys/kernel/osrelease", "6.1.0-18-amd64\n");
        let info = MachineInfo::read(root, root);
        assert_eq!(
            info,
            MachineInfo {
                num_cores: 4,
                memory_capacity: 4_028_580 * 1024,
                swap_capacity: 2_097_148 * 1024,
                hugepages: vec![(2 << 20, 4), (1 << 30, 0)],
                ephemeral_storage_capacity: info.ephemeral_storage_capacity,
                kernel_version: "6.1.0-18-amd64".into(),
                os_image: "Debian GNU/Linux 12 (bookworm)".into(),
                machine_id: "abc123".into(),
                boot_id: "b00t".into(),
                system_uuid: String::new(),
            }
        );
        assert!(info.ephemeral_storage_capacity.unwrap() > 0);
    }

    #[test]
    fn an_empty_host_gives_cadvisor_fallbacks() {
        let dir = tempfile::tempdir().unwrap();
        let info = MachineInfo::read(dir.path(), &dir.path().join("no-such-dir"));
        assert_eq!(info.os_image, "Linux");
        assert_eq!(info.memory_capacity, 0);
        assert_eq!(info.ephemeral_storage_capacity, None);
        assert!(info.hugepages.is_empty());
        assert!(info.num_cores >= 1);
    }

    #[test]
    fn detects_from_a_fake_proc() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("proc")).unwrap();
        std::fs::write(
            dir.path().join("proc/meminfo"),
            super::super::node::test_support::MEMINFO,
        )
        .unwrap();
        let info = NodeInfo::detect(
            "n1",
            Some("10.1.2.3".parse().unwrap()),
            dir.path(),
            dir.path(),
        );
        assert_eq!(info.memory_capacity(), 4_028_580 * 1024);
        assert_eq!(info.host_ips, vec!["10.1.2.3".to_string()]);
        assert!(info.cpu_capacity_milli() >= 1000);
        assert_eq!(info.machine, MachineInfo::read(dir.path(), dir.path()));
    }
}
