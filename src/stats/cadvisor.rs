//! `/metrics/cadvisor`: the series the kubelet's embedded cAdvisor exposes
//! (`google/cadvisor` `metrics/prometheus.go`, served by the kubelet's
//! `pkg/kubelet/server/server.go`), for what nodelet reads — the cgroups of the node (`/`),
//! of `kubepods`, of each pod and of each running container, from the same gathering as
//! `/stats/summary` ([`super::SummaryProvider::cadvisor`]).
//!
//! Names, types, help texts and labels are cAdvisor's: every container series carries
//! `container`, `id` (the cgroup path), `image`, `name` (the runtime's container ID),
//! `namespace` and `pod`, empty where they do not apply (the node's and `kubepods`' cgroups
//! have only `id`; a pod's cgroup has `id`, `namespace` and `pod`); labels come out in name
//! order and each value read from the cgroup carries the reading's time in milliseconds, as
//! cAdvisor's collector attaches it. The encoder is `/metrics/resource`'s (text format 0.0.4).
//!
//! Only what nodelet reads is written — a series is left out rather than reported as zero
//! when its file was not there: CPU time (total, user, system; CFS periods and throttling
//! where a quota made periods elapse), memory (usage, working set, RSS = `anon`, cache =
//! `file`, page faults), the memory limit (`memory.max`, 0 when unlimited, as cAdvisor
//! writes it), the writable layer's use and its filesystem's size, the container's start time,
//! the pod's network interfaces (on the pod's cgroup, from `/proc/<pid>/net/dev` of one of its
//! processes), and the machine's cores and memory. Not served (nodelet does not read them):
//! per-CPU usage, swap, `failcnt`/OOM events, disk I/O, processes. CPU shares, quota and period
//! (`container_spec_cpu_*`) are read for a scrape only (`cpu.max`/`cpu.weight`, v1 `cpu.*`).

use std::path::{Path, PathBuf};

use super::cgroup::{CgroupSample, CpuSpec};
use super::machine::MachineInfo;
use super::resource_metrics::{Families, Family, Kind, Sample};

pub use super::resource_metrics::CONTENT_TYPE;

/// The labels cAdvisor puts on every container series.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeriesLabels {
    /// The cgroup's path below the mount point, with a leading `/`.
    pub id: String,
    pub container: String,
    pub pod: String,
    pub namespace: String,
    pub image: String,
    /// The runtime's container ID.
    pub name: String,
}

/// One filesystem a container uses (its writable layer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsSeries {
    /// The block device (cAdvisor's `device` label); the provider gives the mount point
    /// and [`resolve_devices`] replaces it with the mount's source.
    pub device: String,
    pub usage: u64,
    /// The filesystem's size; `None` when statfs failed.
    pub limit: Option<u64>,
}

/// One network interface's counters (`/proc/<pid>/net/dev` of a process in the pod).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkSeries {
    pub interface: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_dropped: u64,
    pub rx_errors: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_dropped: u64,
    pub tx_errors: u64,
}

/// One cgroup cAdvisor reports.
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupSeries {
    pub labels: SeriesLabels,
    pub sample: CgroupSample,
    /// When the container was created (containers only).
    pub start_time: Option<jiff::Timestamp>,
    pub fs: Vec<FsSeries>,
    /// The pod's interfaces, on the pod's cgroup (its processes share the pod's network
    /// namespace, as cAdvisor sees it with containerd).
    pub network: Vec<NetworkSeries>,
    /// The cgroup's CPU settings, read for a scrape only.
    pub cpu_spec: Option<CpuSpec>,
}

/// Interfaces cAdvisor leaves out (`isIgnoredDevice`: loopback and host-side links).
pub fn interface_reported(name: &str) -> bool {
    !["lo", "veth", "docker", "nerdctl"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// Everything one scrape renders.
#[derive(Debug, Clone, PartialEq)]
pub struct CadvisorInput {
    /// When the files were read.
    pub at: jiff::Timestamp,
    pub cgroups: Vec<CgroupSeries>,
    pub machine: Option<MachineInfo>,
}

const fn counter(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        help,
        kind: Kind::Counter,
    }
}

const fn gauge(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        help,
        kind: Kind::Gauge,
    }
}

const CPU_USAGE: Family = counter(
    "container_cpu_usage_seconds_total",
    "Cumulative cpu time consumed in seconds.",
);
const CPU_USER: Family = counter(
    "container_cpu_user_seconds_total",
    "Cumulative user cpu time consumed in seconds.",
);
const CPU_SYSTEM: Family = counter(
    "container_cpu_system_seconds_total",
    "Cumulative system cpu time consumed in seconds.",
);
const CFS_PERIODS: Family = counter(
    "container_cpu_cfs_periods_total",
    "Number of elapsed enforcement period intervals.",
);
const CFS_THROTTLED_PERIODS: Family = counter(
    "container_cpu_cfs_throttled_periods_total",
    "Number of throttled period intervals.",
);
const CFS_THROTTLED_SECONDS: Family = counter(
    "container_cpu_cfs_throttled_seconds_total",
    "Total time duration the container has been throttled.",
);
const MEMORY_USAGE: Family = gauge(
    "container_memory_usage_bytes",
    "Current memory usage in bytes, including all memory regardless of when it was accessed",
);
const MEMORY_WORKING_SET: Family = gauge(
    "container_memory_working_set_bytes",
    "Current working set in bytes.",
);
const MEMORY_RSS: Family = gauge("container_memory_rss", "Size of RSS in bytes.");
const MEMORY_CACHE: Family = gauge(
    "container_memory_cache",
    "Number of bytes of page cache memory.",
);
const MEMORY_FAILURES: Family = counter(
    "container_memory_failures_total",
    "Cumulative count of memory allocation failures.",
);
const SPEC_MEMORY_LIMIT: Family = gauge(
    "container_spec_memory_limit_bytes",
    "Memory limit for the container.",
);
const FS_USAGE: Family = gauge(
    "container_fs_usage_bytes",
    "Number of bytes that are consumed by the container on this filesystem.",
);
const FS_LIMIT: Family = gauge(
    "container_fs_limit_bytes",
    "Number of bytes that can be consumed by the container on this filesystem.",
);
const NET_RX_BYTES: Family = counter(
    "container_network_receive_bytes_total",
    "Cumulative count of bytes received",
);
const NET_RX_PACKETS: Family = counter(
    "container_network_receive_packets_total",
    "Cumulative count of packets received",
);
const NET_RX_DROPPED: Family = counter(
    "container_network_receive_packets_dropped_total",
    "Cumulative count of packets dropped while receiving",
);
const NET_RX_ERRORS: Family = counter(
    "container_network_receive_errors_total",
    "Cumulative count of errors encountered while receiving",
);
const NET_TX_BYTES: Family = counter(
    "container_network_transmit_bytes_total",
    "Cumulative count of bytes transmitted",
);
const NET_TX_PACKETS: Family = counter(
    "container_network_transmit_packets_total",
    "Cumulative count of packets transmitted",
);
const NET_TX_DROPPED: Family = counter(
    "container_network_transmit_packets_dropped_total",
    "Cumulative count of packets dropped while transmitting",
);
const NET_TX_ERRORS: Family = counter(
    "container_network_transmit_errors_total",
    "Cumulative count of errors encountered while transmitting",
);
const SPEC_CPU_SHARES: Family = gauge("container_spec_cpu_shares", "CPU share of the container.");
const SPEC_CPU_QUOTA: Family = gauge("container_spec_cpu_quota", "CPU quota of the container.");
const SPEC_CPU_PERIOD: Family = gauge("container_spec_cpu_period", "CPU period of the container.");
const START_TIME: Family = gauge(
    "container_start_time_seconds",
    "Start time of the container since unix epoch in seconds.",
);
const LAST_SEEN: Family = gauge(
    "container_last_seen",
    "Last time a container was seen by the exporter",
);
const SCRAPE_ERROR: Family = gauge(
    "container_scrape_error",
    "1 if there was an error while getting container metrics, 0 otherwise",
);
const MACHINE_CORES: Family = gauge("machine_cpu_cores", "Number of logical CPU cores.");
const MACHINE_MEMORY: Family = gauge(
    "machine_memory_bytes",
    "Amount of memory installed on the machine.",
);

/// The base labels with `extra` ones, in name order (as Go's client writes them).
fn labels(l: &SeriesLabels, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut all: Vec<(&'static str, String)> = vec![
        ("container", l.container.clone()),
        ("id", l.id.clone()),
        ("image", l.image.clone()),
        ("name", l.name.clone()),
        ("namespace", l.namespace.clone()),
        ("pod", l.pod.clone()),
    ];
    all.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    all.sort_by_key(|(k, _)| *k);
    all
}

/// The body of `/metrics/cadvisor` for one gathering, or for a failed one (then only
/// `container_scrape_error` at 1, as cAdvisor's collector answers).
pub fn encode(input: Result<&CadvisorInput, &super::Error>) -> String {
    let mut families = Families::default();
    let error = match input {
        Ok(input) => {
            collect(&mut families, input);
            0.0
        }
        Err(_) => 1.0,
    };
    families.push(
        &SCRAPE_ERROR,
        Sample {
            labels: Vec::new(),
            value: error,
            timestamp_ms: None,
        },
    );
    families.encode()
}

fn collect(families: &mut Families, input: &CadvisorInput) {
    let ms = Some(input.at.as_millisecond());
    let seconds = |nanos: u64| nanos as f64 / 1e9;
    for cg in &input.cgroups {
        let l = &cg.labels;
        let mut push = |family: &'static Family, extra: &[(&'static str, &str)], value: f64| {
            families.push(
                family,
                Sample {
                    labels: labels(l, extra),
                    value,
                    timestamp_ms: ms,
                },
            );
        };
        if let Some(cpu) = &cg.sample.cpu {
            // The kubelet turns cAdvisor's per-CPU usage off: one series, `cpu="total"`.
            push(&CPU_USAGE, &[("cpu", "total")], seconds(cpu.usage_nanos));
            if let Some(v) = cpu.user_nanos {
                push(&CPU_USER, &[], seconds(v));
            }
            if let Some(v) = cpu.system_nanos {
                push(&CPU_SYSTEM, &[], seconds(v));
            }
            // Periods elapse only under a quota; without one the three stay 0 and cAdvisor's
            // series are noise that dashboards filter out.
            if let Some(periods) = cpu.nr_periods.filter(|p| *p > 0) {
                push(&CFS_PERIODS, &[], periods as f64);
                if let Some(v) = cpu.nr_throttled {
                    push(&CFS_THROTTLED_PERIODS, &[], v as f64);
                }
                if let Some(v) = cpu.throttled_nanos {
                    push(&CFS_THROTTLED_SECONDS, &[], seconds(v));
                }
            }
        }
        if let Some(memory) = &cg.sample.memory {
            push(&MEMORY_USAGE, &[], memory.usage as f64);
            push(&MEMORY_WORKING_SET, &[], memory.working_set() as f64);
            if let Some(v) = memory.stat.anon {
                push(&MEMORY_RSS, &[], v as f64);
            }
            if let Some(v) = memory.stat.file {
                push(&MEMORY_CACHE, &[], v as f64);
            }
            // cgroup v2's memory.stat is hierarchical, and cAdvisor reports it for both
            // scopes; so does nodelet.
            for (kind, value) in [
                ("pgfault", memory.stat.pgfault),
                ("pgmajfault", memory.stat.pgmajfault),
            ] {
                let Some(value) = value else { continue };
                for scope in ["container", "hierarchy"] {
                    push(
                        &MEMORY_FAILURES,
                        &[("failure_type", kind), ("scope", scope)],
                        value as f64,
                    );
                }
            }
        }
        for fs in &cg.fs {
            push(&FS_USAGE, &[("device", &fs.device)], fs.usage as f64);
            if let Some(limit) = fs.limit {
                push(&FS_LIMIT, &[("device", &fs.device)], limit as f64);
            }
        }
        for n in &cg.network {
            let interface = [("interface", n.interface.as_str())];
            for (family, value) in [
                (&NET_RX_BYTES, n.rx_bytes),
                (&NET_RX_PACKETS, n.rx_packets),
                (&NET_RX_DROPPED, n.rx_dropped),
                (&NET_RX_ERRORS, n.rx_errors),
                (&NET_TX_BYTES, n.tx_bytes),
                (&NET_TX_PACKETS, n.tx_packets),
                (&NET_TX_DROPPED, n.tx_dropped),
                (&NET_TX_ERRORS, n.tx_errors),
            ] {
                push(family, &interface, value as f64);
            }
        }
        // Spec values, the start time and the last-seen time carry no sample time.
        let mut spec = |family: &'static Family, value: f64| {
            families.push(
                family,
                Sample {
                    labels: labels(l, &[]),
                    value,
                    timestamp_ms: None,
                },
            );
        };
        // The root cgroup has no limit file: no spec for it.
        if l.id != "/" {
            if let Some(memory) = &cg.sample.memory {
                spec(&SPEC_MEMORY_LIMIT, memory.limit.unwrap_or(0) as f64);
            }
        }
        // cAdvisor writes the quota only where there is one.
        if let Some(cpu) = &cg.cpu_spec {
            for (family, value) in [
                (&SPEC_CPU_SHARES, cpu.shares),
                (&SPEC_CPU_QUOTA, cpu.quota_us),
                (&SPEC_CPU_PERIOD, cpu.period_us),
            ] {
                if let Some(v) = value {
                    spec(family, v as f64);
                }
            }
        }
        if let Some(start) = cg.start_time {
            spec(&START_TIME, start.as_nanosecond() as f64 / 1e9);
        }
        spec(&LAST_SEEN, input.at.as_second() as f64);
    }
    if let Some(m) = &input.machine {
        let machine_labels = || {
            vec![
                ("boot_id", m.boot_id.clone()),
                ("machine_id", m.machine_id.clone()),
                ("system_uuid", m.system_uuid.clone()),
            ]
        };
        families.push(
            &MACHINE_CORES,
            Sample {
                labels: machine_labels(),
                value: f64::from(m.num_cores),
                timestamp_ms: None,
            },
        );
        families.push(
            &MACHINE_MEMORY,
            Sample {
                labels: machine_labels(),
                value: m.memory_capacity as f64,
                timestamp_ms: None,
            },
        );
    }
}

/// The source of the mount holding `path` (the longest mount point above it) among
/// `mounts` (mount point, source): cAdvisor's `device` of a filesystem.
pub fn device_of(mounts: &[(PathBuf, String)], path: &Path) -> Option<String> {
    mounts
        .iter()
        .filter(|(point, _)| path.starts_with(point))
        .max_by_key(|(point, _)| point.components().count())
        .map(|(_, source)| source.clone())
}

/// Replaces each filesystem's mount point with its device; a filesystem whose device is
/// unknown is left out (its `device` label would be made up).
pub fn resolve_devices(input: &mut CadvisorInput, mounts: &[(PathBuf, String)]) {
    for cg in &mut input.cgroups {
        cg.fs
            .retain_mut(|fs| match device_of(mounts, Path::new(&fs.device)) {
                Some(device) => {
                    fs.device = device;
                    true
                }
                None => false,
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::cgroup::{CpuUsage, MemoryStat, MemoryUsage};

    fn at() -> jiff::Timestamp {
        "2026-12-03T11:00:00.250Z".parse().unwrap()
    }

    fn container(cpu: Option<CpuUsage>, memory: Option<MemoryUsage>) -> CgroupSeries {
        CgroupSeries {
            labels: SeriesLabels {
                id: "/kubepods.slice/pod1.slice/cri-containerd-abc.scope".into(),
                container: "web".into(),
                pod: "web-node1".into(),
                namespace: "default".into(),
                image: "testbox:1".into(),
                name: "abc".into(),
            },
            sample: CgroupSample {
                cpu,
                memory,
                ..CgroupSample::default()
            },
            start_time: Some("2026-12-03T10:00:00.5Z".parse().unwrap()),
            fs: Vec::new(),
            network: Vec::new(),
            cpu_spec: None,
        }
    }

    const BASE: &str = r#"container="web",id="/kubepods.slice/pod1.slice/cri-containerd-abc.scope",image="testbox:1",name="abc",namespace="default",pod="web-node1""#;

    /// Each case: what the cgroup read, the lines that must be there, and series names that
    /// must not be (a file nodelet did not read is no series, never a zero).
    #[test]
    fn series_table() {
        let memory = MemoryUsage {
            usage: 100,
            limit: Some(1000),
            stat: MemoryStat {
                anon: Some(60),
                file: Some(30),
                inactive_file: Some(20),
                pgfault: Some(7),
                ..MemoryStat::default()
            },
        };
        let cases: Vec<(&str, CgroupSeries, Vec<String>, Vec<&str>)> = vec![
            (
                "cpu with a quota that throttled",
                container(
                    Some(CpuUsage {
                        usage_nanos: 2_500_000_000,
                        nr_throttled: Some(3),
                        user_nanos: Some(2_000_000_000),
                        system_nanos: Some(500_000_000),
                        nr_periods: Some(40),
                        throttled_nanos: Some(12_000_000),
                    }),
                    None,
                ),
                vec![
                    format!(r#"container_cpu_usage_seconds_total{{container="web",cpu="total",id="/kubepods.slice/pod1.slice/cri-containerd-abc.scope",image="testbox:1",name="abc",namespace="default",pod="web-node1"}} 2.5 1796295600250"#),
                    format!("container_cpu_user_seconds_total{{{BASE}}} 2 1796295600250"),
                    format!("container_cpu_system_seconds_total{{{BASE}}} 0.5 1796295600250"),
                    format!("container_cpu_cfs_periods_total{{{BASE}}} 40 1796295600250"),
                    format!("container_cpu_cfs_throttled_periods_total{{{BASE}}} 3 1796295600250"),
                    format!("container_cpu_cfs_throttled_seconds_total{{{BASE}}} 0.012 1796295600250"),
                    format!("container_start_time_seconds{{{BASE}}} 1.7962920005e+09"),
                    format!("container_last_seen{{{BASE}}} 1.7962956e+09"),
                ],
                vec!["container_memory_usage_bytes", "container_spec_memory_limit_bytes"],
            ),
            (
                "cpu without a quota: no cfs series",
                container(
                    Some(CpuUsage {
                        usage_nanos: 1_000_000_000,
                        nr_periods: Some(0),
                        nr_throttled: Some(0),
                        ..CpuUsage::default()
                    }),
                    None,
                ),
                vec!["# TYPE container_cpu_usage_seconds_total counter".to_string()],
                vec!["container_cpu_cfs_periods_total", "container_cpu_user_seconds_total"],
            ),
            (
                "memory with a limit",
                container(None, Some(memory)),
                vec![
                    format!("container_memory_usage_bytes{{{BASE}}} 100 1796295600250"),
                    format!("container_memory_working_set_bytes{{{BASE}}} 80 1796295600250"),
                    format!("container_memory_rss{{{BASE}}} 60 1796295600250"),
                    format!("container_memory_cache{{{BASE}}} 30 1796295600250"),
                    format!(r#"container_memory_failures_total{{container="web",failure_type="pgfault",id="/kubepods.slice/pod1.slice/cri-containerd-abc.scope",image="testbox:1",name="abc",namespace="default",pod="web-node1",scope="hierarchy"}} 7 1796295600250"#),
                    format!("container_spec_memory_limit_bytes{{{BASE}}} 1000"),
                    "# HELP container_memory_usage_bytes Current memory usage in bytes, including all memory regardless of when it was accessed".to_string(),
                    "# TYPE container_memory_working_set_bytes gauge".to_string(),
                ],
                vec!["container_cpu_usage_seconds_total", "pgmajfault"],
            ),
            (
                "memory without a limit: the spec is 0",
                container(None, Some(MemoryUsage { limit: None, ..memory })),
                vec![format!("container_spec_memory_limit_bytes{{{BASE}}} 0")],
                vec![],
            ),
            (
                "the root cgroup: only its id, no spec",
                CgroupSeries {
                    labels: SeriesLabels {
                        id: "/".into(),
                        ..SeriesLabels::default()
                    },
                    start_time: None,
                    ..container(None, Some(memory))
                },
                vec![r#"container_memory_usage_bytes{container="",id="/",image="",name="",namespace="",pod=""} 100 1796295600250"#.to_string()],
                vec!["container_spec_memory_limit_bytes", "container_start_time_seconds"],
            ),
            (
                "writable layer on a known device",
                CgroupSeries {
                    fs: vec![FsSeries {
                        device: "/dev/vda1".into(),
                        usage: 4096,
                        limit: Some(1 << 30),
                    }],
                    ..container(None, None)
                },
                vec![
                    format!(r#"container_fs_usage_bytes{{container="web",device="/dev/vda1",id="/kubepods.slice/pod1.slice/cri-containerd-abc.scope",image="testbox:1",name="abc",namespace="default",pod="web-node1"}} 4096 1796295600250"#),
                    format!(r#"container_fs_limit_bytes{{container="web",device="/dev/vda1",id="/kubepods.slice/pod1.slice/cri-containerd-abc.scope",image="testbox:1",name="abc",namespace="default",pod="web-node1"}} 1.073741824e+09 1796295600250"#),
                ],
                vec!["container_memory_usage_bytes"],
            ),
        ];
        let pod_cgroup = CgroupSeries {
            labels: SeriesLabels {
                id: "/kubepods.slice/pod1.slice".into(),
                pod: "web-node1".into(),
                namespace: "default".into(),
                ..SeriesLabels::default()
            },
            start_time: None,
            network: vec![NetworkSeries {
                interface: "eth0".into(),
                rx_bytes: 1500,
                tx_errors: 2,
                ..NetworkSeries::default()
            }],
            ..container(None, None)
        };
        let mut cases = cases;
        cases.push((
            "cpu spec with a quota",
            CgroupSeries {
                cpu_spec: Some(CpuSpec {
                    shares: Some(512),
                    quota_us: Some(50_000),
                    period_us: Some(100_000),
                }),
                ..container(None, None)
            },
            vec![
                format!("container_spec_cpu_shares{{{BASE}}} 512"),
                format!("container_spec_cpu_quota{{{BASE}}} 50000"),
                format!("container_spec_cpu_period{{{BASE}}} 100000"),
                "# HELP container_spec_cpu_quota CPU quota of the container.".to_string(),
            ],
            vec![],
        ));
        cases.push((
            "cpu spec without a quota",
            CgroupSeries {
                cpu_spec: Some(CpuSpec {
                    shares: Some(2),
                    quota_us: None,
                    period_us: Some(100_000),
                }),
                ..container(None, None)
            },
            vec![format!("container_spec_cpu_shares{{{BASE}}} 2")],
            vec!["container_spec_cpu_quota"],
        ));
        cases.push((
            "the pod's network, on the pod's cgroup",
            pod_cgroup,
            vec![
                r#"container_network_receive_bytes_total{container="",id="/kubepods.slice/pod1.slice",image="",interface="eth0",name="",namespace="default",pod="web-node1"} 1500 1796295600250"#.to_string(),
                r#"container_network_transmit_errors_total{container="",id="/kubepods.slice/pod1.slice",image="",interface="eth0",name="",namespace="default",pod="web-node1"} 2 1796295600250"#.to_string(),
                "# HELP container_network_receive_packets_dropped_total Cumulative count of packets dropped while receiving".to_string(),
            ],
            vec!["container_start_time_seconds"],
        ));
        for (name, cgroup, want, absent) in cases {
            let input = CadvisorInput {
                at: at(),
                cgroups: vec![cgroup],
                machine: None,
            };
            let text = encode(Ok(&input));
            let lines: Vec<&str> = text.lines().collect();
            for w in &want {
                assert!(lines.contains(&w.as_str()), "{name}: missing {w}\n{text}");
            }
            for a in absent {
                assert!(!text.contains(a), "{name}: has {a}\n{text}");
            }
            assert!(
                lines.contains(&"container_scrape_error 0"),
                "{name}: {text}"
            );
        }
    }

    #[test]
    fn interface_table() {
        let cases = [
            ("eth0", true),
            ("ens3", true),
            ("lo", false),
            ("veth1234", false),
            ("docker0", false),
            ("nerdctl0", false),
        ];
        for (name, want) in cases {
            assert_eq!(interface_reported(name), want, "{name}");
        }
    }

    #[test]
    fn a_failed_gathering_is_the_scrape_error_alone() {
        let err = crate::stats::Error::Task("boom".into());
        assert_eq!(
            encode(Err(&err)),
            "# HELP container_scrape_error 1 if there was an error while getting container metrics, 0 otherwise\n\
             # TYPE container_scrape_error gauge\ncontainer_scrape_error 1\n"
        );
    }

    #[test]
    fn machine_series_carry_the_machine_ids() {
        let input = CadvisorInput {
            at: at(),
            cgroups: Vec::new(),
            machine: Some(MachineInfo {
                num_cores: 2,
                memory_capacity: 4 << 30,
                swap_capacity: 0,
                hugepages: Vec::new(),
                ephemeral_storage_capacity: None,
                kernel_version: "6.1".into(),
                os_image: "Linux".into(),
                machine_id: "m".into(),
                boot_id: "b".into(),
                system_uuid: "s".into(),
            }),
        };
        let text = encode(Ok(&input));
        for want in [
            r#"machine_cpu_cores{boot_id="b",machine_id="m",system_uuid="s"} 2"#,
            r#"machine_memory_bytes{boot_id="b",machine_id="m",system_uuid="s"} 4.294967296e+09"#,
        ] {
            assert!(text.lines().any(|l| l == want), "{want}\n{text}");
        }
    }

    #[test]
    fn device_of_takes_the_longest_mount_point() {
        let mounts = vec![
            (PathBuf::from("/"), "/dev/vda1".to_string()),
            (PathBuf::from("/var/lib"), "/dev/vdb".to_string()),
            (PathBuf::from("/var/library"), "/dev/vdc".to_string()),
        ];
        let cases = [
            ("/var/lib/containerd/snap", Some("/dev/vdb")),
            ("/var/library/x", Some("/dev/vdc")),
            ("/var/li", Some("/dev/vda1")),
            ("/", Some("/dev/vda1")),
        ];
        for (path, want) in cases {
            assert_eq!(
                device_of(&mounts, Path::new(path)).as_deref(),
                want,
                "{path}"
            );
        }
        assert_eq!(device_of(&[], Path::new("/x")), None);
        let mut input = CadvisorInput {
            at: at(),
            cgroups: vec![CgroupSeries {
                fs: vec![FsSeries {
                    device: "/var/lib/containerd".into(),
                    usage: 1,
                    limit: None,
                }],
                ..container(None, None)
            }],
            machine: None,
        };
        resolve_devices(&mut input, &mounts);
        assert_eq!(input.cgroups[0].fs[0].device, "/dev/vdb");
        resolve_devices(&mut input, &[]);
        assert!(input.cgroups[0].fs.is_empty(), "unknown device: left out");
    }
}
