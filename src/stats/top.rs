//! `nodelet top`: what `kubectl top pod` and `kubectl top node` print, from the Summary.
//!
//! kubectl reads metrics-server, which reports each container's CPU rate and working set; a
//! pod's row is the sum of its containers (kubectl's `getPodMetrics`), a node's the root
//! cgroup's. The numbers here are the Summary's own: `usageNanoCores` and `workingSetBytes`.
//! Formatting is kubectl's `printSingleResourceUsage`: CPU as `Quantity.MilliValue()` (rounded
//! up) with `m`, memory as whole MiB (rounded down) with `Mi`, percentages of allocatable
//! truncated; laid out by its tab writer, whose every cell (the last one too) ends in a tab.

use super::summary::{PodStats, Summary};

/// A pod's usage: the sum over its containers; `None` when no container has both readings
/// (metrics-server leaves such a pod out).
pub fn pod_usage(pod: &PodStats) -> Option<(u64, u64)> {
    let mut any = false;
    let (mut nanos, mut bytes) = (0u64, 0u64);
    for c in &pod.containers {
        let cpu = c.cpu.as_ref().and_then(|c| c.usage_nano_cores);
        let memory = c.memory.as_ref().and_then(|m| m.working_set_bytes);
        if let (Some(cpu), Some(memory)) = (cpu, memory) {
            any = true;
            nanos = nanos.saturating_add(cpu);
            bytes = bytes.saturating_add(memory);
        }
    }
    any.then_some((nanos, bytes))
}

/// `123m`: nanocores as kubectl prints a CPU quantity (`MilliValue`, rounded up).
pub fn cpu_cell(nano_cores: u64) -> String {
    format!("{}m", nano_cores.div_ceil(1_000_000))
}

/// `45Mi`: bytes in whole MiB, rounded down.
pub fn memory_cell(bytes: u64) -> String {
    format!("{}Mi", bytes / (1024 * 1024))
}

/// kubectl's `%d%%` of `int64(float64(usage.MilliValue()) / float64(available.MilliValue()) * 100)`.
fn percent_cell(usage_milli: u64, available_milli: u64) -> String {
    let fraction = if available_milli == 0 {
        0.0
    } else {
        usage_milli as f64 / available_milli as f64 * 100.0
    };
    format!("{}%", fraction as i64)
}

/// Go's tab writer as kubectl's `GetNewTabWriter` sets it (minimum width 6, padding 3), for
/// lines whose every cell ends in a tab: each cell is padded, the last one too.
fn tab_written(lines: &[Vec<String>]) -> String {
    let columns = lines.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            lines
                .iter()
                .filter_map(|l| l.get(i))
                .map(|c| c.chars().count() + 3)
                .fold(6, usize::max)
        })
        .collect();
    let mut out = String::new();
    for line in lines {
        for (i, cell) in line.iter().enumerate() {
            out.push_str(cell);
            out.extend(std::iter::repeat_n(
                ' ',
                widths[i].saturating_sub(cell.chars().count()),
            ));
        }
        out.push('\n');
    }
    out
}

/// `kubectl top pod` (`-A`: `with_namespace`): pods sorted by name (by namespace, then name,
/// with the namespace column); `namespace` keeps only that namespace's pods. `None` when no
/// pod has metrics (kubectl then says `No resources found`).
pub fn pod_table(
    summary: &Summary,
    namespace: Option<&str>,
    with_namespace: bool,
) -> Option<String> {
    let mut rows: Vec<(&str, &str, u64, u64)> = summary
        .pods
        .iter()
        .filter(|p| namespace.is_none_or(|ns| p.pod_ref.namespace == ns))
        .filter_map(|p| {
            let (cpu, memory) = pod_usage(p)?;
            Some((
                p.pod_ref.namespace.as_str(),
                p.pod_ref.name.as_str(),
                cpu,
                memory,
            ))
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    if with_namespace {
        rows.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    } else {
        rows.sort_by(|a, b| a.1.cmp(b.1));
    }
    let mut header = vec!["NAME", "CPU(cores)", "MEMORY(bytes)"];
    if with_namespace {
        header.insert(0, "NAMESPACE");
    }
    let mut lines = vec![header.into_iter().map(str::to_string).collect::<Vec<_>>()];
    for (ns, name, cpu, memory) in rows {
        let mut cells = Vec::with_capacity(4);
        if with_namespace {
            cells.push(ns.to_string());
        }
        cells.extend([name.to_string(), cpu_cell(cpu), memory_cell(memory)]);
        lines.push(cells);
    }
    Some(tab_written(&lines))
}

/// The node's allocatable CPU (millicores) and memory (bytes), what the percentages are of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocatable {
    pub cpu_milli: u64,
    pub memory_bytes: u64,
}

/// `kubectl top node` for this node: the root cgroup's CPU rate and working set; the
/// percentages of `allocatable`, `<unknown>` for a reading the Summary lacks.
pub fn node_table(summary: &Summary, allocatable: Allocatable) -> String {
    let node = &summary.node;
    let cpu = node.cpu.as_ref().and_then(|c| c.usage_nano_cores);
    let memory = node.memory.as_ref().and_then(|m| m.working_set_bytes);
    let unknown = || "<unknown>".to_string();
    let mut row = vec![node.node_name.clone()];
    match cpu {
        Some(nanos) => row.extend([
            cpu_cell(nanos),
            percent_cell(nanos.div_ceil(1_000_000), allocatable.cpu_milli),
        ]),
        None => row.extend([unknown(), unknown()]),
    }
    match memory {
        Some(bytes) => row.extend([
            memory_cell(bytes),
            percent_cell(
                bytes.saturating_mul(1000),
                allocatable.memory_bytes.saturating_mul(1000),
            ),
        ]),
        None => row.extend([unknown(), unknown()]),
    }
    let header = ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"]
        .map(str::to_string)
        .to_vec();
    tab_written(&[header, row])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summary::{
        ContainerStats, CpuStats, MemoryStats, NodeStats, PodReference, PodStats,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn t() -> Time {
        Time(jiff::Timestamp::UNIX_EPOCH)
    }

    fn cpu(nanos: Option<u64>) -> Option<CpuStats> {
        Some(CpuStats {
            time: t(),
            usage_nano_cores: nanos,
            usage_core_nano_seconds: Some(1),
            psi: None,
        })
    }

    fn memory(bytes: Option<u64>) -> Option<MemoryStats> {
        Some(MemoryStats {
            time: t(),
            available_bytes: None,
            usage_bytes: None,
            working_set_bytes: bytes,
            rss_bytes: None,
            page_faults: None,
            major_page_faults: None,
            psi: None,
        })
    }

    fn container(name: &str, nanos: Option<u64>, bytes: Option<u64>) -> ContainerStats {
        ContainerStats {
            name: name.into(),
            start_time: t(),
            cpu: cpu(nanos),
            memory: memory(bytes),
            io: None,
            rootfs: None,
            logs: None,
            swap: None,
        }
    }

    fn pod(ns: &str, name: &str, containers: Vec<ContainerStats>) -> PodStats {
        PodStats {
            pod_ref: PodReference {
                name: name.into(),
                namespace: ns.into(),
                uid: name.into(),
            },
            start_time: t(),
            containers,
            cpu: None,
            memory: None,
            io: None,
            network: None,
            volume_stats: vec![],
            ephemeral_storage: None,
            process_stats: None,
            swap: None,
        }
    }

    fn summary(pods: Vec<PodStats>) -> Summary {
        Summary {
            node: NodeStats {
                node_name: "node-1".into(),
                system_containers: vec![],
                start_time: t(),
                cpu: cpu(Some(250_000_001)),
                memory: memory(Some(3 << 30)),
                io: None,
                network: None,
                fs: None,
                runtime: None,
                rlimit: None,
                swap: None,
            },
            pods,
        }
    }

    #[test]
    fn cells_round_as_kubectl() {
        let cases: &[(u64, &str)] = &[
            (0, "0m"),
            (1, "1m"),
            (1_000_000, "1m"),
            (1_000_001, "2m"),
            (2_500_000_000, "2500m"),
        ];
        for (nanos, want) in cases {
            assert_eq!(cpu_cell(*nanos), *want);
        }
        assert_eq!(memory_cell((5 << 20) - 1), "4Mi");
        assert_eq!(memory_cell(5 << 20), "5Mi");
        assert_eq!(percent_cell(251, 2000), "12%");
        assert_eq!(percent_cell(1, 0), "0%");
    }

    #[test]
    fn pods_sum_their_containers_sorted_by_name() {
        let s = summary(vec![
            pod(
                "kube-system",
                "web",
                vec![
                    container("app", Some(1_500_000), Some(10 << 20)),
                    container("side", Some(600_000), Some(3 << 20)),
                ],
            ),
            pod(
                "default",
                "db",
                vec![container("db", Some(0), Some(200 << 20))],
            ),
            // No readings yet: left out, as metrics-server leaves it out.
            pod("default", "new", vec![container("c", None, Some(1))]),
        ]);
        assert_eq!(
            pod_table(&s, None, false).unwrap(),
            "\
NAME   CPU(cores)   MEMORY(bytes)   
db     0m           200Mi           
web    3m           13Mi            
"
        );
        assert_eq!(
            pod_table(&s, None, true).unwrap(),
            "\
NAMESPACE     NAME   CPU(cores)   MEMORY(bytes)   
default       db     0m           200Mi           
kube-system   web    3m           13Mi            
"
        );
        assert_eq!(
            pod_table(&s, Some("kube-system"), false).unwrap(),
            "\
NAME   CPU(cores)   MEMORY(bytes)   
web    3m           13Mi            
"
        );
        assert_eq!(pod_table(&s, Some("nope"), false), None);
    }

    #[test]
    fn the_node_row_with_percentages_of_allocatable() {
        let s = summary(vec![]);
        assert_eq!(
            node_table(
                &s,
                Allocatable {
                    cpu_milli: 2000,
                    memory_bytes: 12 << 30,
                }
            ),
            "\
NAME     CPU(cores)   CPU(%)   MEMORY(bytes)   MEMORY(%)   
node-1   251m         12%      3072Mi          25%         
"
        );
        let mut s = summary(vec![]);
        s.node.cpu = None;
        let table = node_table(
            &s,
            Allocatable {
                cpu_milli: 2000,
                memory_bytes: 12 << 30,
            },
        );
        assert!(
            table.contains("node-1   <unknown>    <unknown>   3072Mi"),
            "{table}"
        );
    }
}
