//! Readings → Summary API values: pure functions, one per stats block.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::cgroup::{CpuUsage, MemoryUsage};
use super::node::FsUsage;
use super::psi::{Psi, PsiLine};
use super::summary::{CpuStats, FsStats, IoStats, MemoryStats, PsiData, PsiStats};

fn psi_data(line: PsiLine) -> PsiData {
    PsiData {
        total: line.total,
        avg10: line.avg10,
        avg60: line.avg60,
        avg300: line.avg300,
    }
}

/// A missing `full` line (the node's cpu pressure on kernels before 5.13) is all zeros, as
/// the kubelet's Go zero value would be.
pub fn psi_stats(psi: &Psi) -> PsiStats {
    PsiStats {
        some: psi_data(psi.some),
        full: psi.full.map(psi_data).unwrap_or_default(),
    }
}

/// `None` when there is neither usage nor pressure to report.
pub fn cpu_stats(
    time: &Time,
    usage: Option<CpuUsage>,
    nano_cores: Option<u64>,
    psi: Option<&Psi>,
) -> Option<CpuStats> {
    if usage.is_none() && psi.is_none() {
        return None;
    }
    Some(CpuStats {
        time: time.clone(),
        usage_nano_cores: usage.and(nano_cores),
        usage_core_nano_seconds: usage.map(|u| u.usage_nanos),
        psi: psi.map(psi_stats),
    })
}

/// `limit` replaces the cgroup's own (the node's capacity for the root cgroup); no limit, no
/// `availableBytes`.
pub fn memory_stats(
    time: &Time,
    usage: Option<&MemoryUsage>,
    limit: Option<u64>,
    psi: Option<&Psi>,
) -> Option<MemoryStats> {
    if usage.is_none() && psi.is_none() {
        return None;
    }
    Some(MemoryStats {
        time: time.clone(),
        available_bytes: usage.and_then(|u| {
            let limit = limit.or(u.limit)?;
            Some(limit.saturating_sub(u.working_set()))
        }),
        usage_bytes: usage.map(|u| u.usage),
        working_set_bytes: usage.map(MemoryUsage::working_set),
        rss_bytes: usage.and_then(|u| u.stat.anon),
        page_faults: usage.and_then(|u| u.stat.pgfault),
        major_page_faults: usage.and_then(|u| u.stat.pgmajfault),
        psi: psi.map(psi_stats),
    })
}

pub fn io_stats(time: &Time, psi: Option<&Psi>) -> Option<IoStats> {
    psi.map(|p| IoStats {
        time: time.clone(),
        psi: Some(psi_stats(p)),
    })
}

/// A whole filesystem (the node's `fs`; capacity figures for image, rootfs and log stats).
pub fn fs_stats(time: &Time, fs: &FsUsage) -> FsStats {
    FsStats {
        time: time.clone(),
        available_bytes: Some(fs.available),
        capacity_bytes: Some(fs.capacity),
        used_bytes: Some(fs.used),
        inodes_free: Some(fs.inodes_free),
        inodes: Some(fs.inodes),
        inodes_used: Some(fs.inodes_used()),
    }
}

/// Usage of something on a filesystem (image store, writable layer, logs): its own used bytes
/// and inodes, the filesystem's capacity where known.
pub fn usage_on_fs(
    time: &Time,
    used_bytes: Option<u64>,
    inodes_used: Option<u64>,
    fs: Option<&FsUsage>,
) -> FsStats {
    FsStats {
        time: time.clone(),
        available_bytes: fs.map(|f| f.available),
        capacity_bytes: fs.map(|f| f.capacity),
        used_bytes,
        inodes_free: fs.map(|f| f.inodes_free),
        inodes: fs.map(|f| f.inodes),
        inodes_used,
    }
}

/// `a + b` where either may be unknown (the kubelet's `addUsage`).
pub fn add_usage(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// The pod's CPU as the sum of its containers' (where the pod has no cgroup of its own).
pub fn sum_cpu(time: &Time, containers: &[&CpuStats]) -> Option<CpuStats> {
    if containers.is_empty() {
        return None;
    }
    let mut sum = CpuStats {
        time: time.clone(),
        usage_nano_cores: Some(0),
        usage_core_nano_seconds: Some(0),
        psi: None,
    };
    for c in containers {
        // A rate is only meaningful if every container has one.
        sum.usage_nano_cores = sum
            .usage_nano_cores
            .zip(c.usage_nano_cores)
            .map(|(a, b)| a.saturating_add(b));
        sum.usage_core_nano_seconds =
            add_usage(sum.usage_core_nano_seconds, c.usage_core_nano_seconds);
    }
    Some(sum)
}

/// The pod's memory as the sum of its containers'.
pub fn sum_memory(time: &Time, containers: &[&MemoryStats]) -> Option<MemoryStats> {
    if containers.is_empty() {
        return None;
    }
    let mut sum = MemoryStats {
        time: time.clone(),
        available_bytes: None,
        usage_bytes: None,
        working_set_bytes: None,
        rss_bytes: None,
        page_faults: None,
        major_page_faults: None,
        psi: None,
    };
    for c in containers {
        sum.usage_bytes = add_usage(sum.usage_bytes, c.usage_bytes);
        sum.working_set_bytes = add_usage(sum.working_set_bytes, c.working_set_bytes);
        sum.rss_bytes = add_usage(sum.rss_bytes, c.rss_bytes);
        sum.page_faults = add_usage(sum.page_faults, c.page_faults);
        sum.major_page_faults = add_usage(sum.major_page_faults, c.major_page_faults);
    }
    Some(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::cgroup::MemoryStat;

    fn t() -> Time {
        Time("2026-01-01T00:00:00Z".parse().unwrap())
    }

    #[test]
    fn memory_block_table() {
        let usage = MemoryUsage {
            usage: 100,
            limit: Some(1000),
            stat: MemoryStat {
                anon: Some(60),
                inactive_file: Some(30),
                pgfault: Some(5),
                pgmajfault: Some(1),
                ..Default::default()
            },
        };
        let m = memory_stats(&t(), Some(&usage), None, None).unwrap();
        assert_eq!(
            (
                m.available_bytes,
                m.usage_bytes,
                m.working_set_bytes,
                m.rss_bytes,
                m.page_faults,
                m.major_page_faults
            ),
            (Some(930), Some(100), Some(70), Some(60), Some(5), Some(1))
        );
        // the node: the machine's capacity is the limit
        let node = memory_stats(&t(), Some(&usage), Some(500), None).unwrap();
        assert_eq!(node.available_bytes, Some(430));
        // no limit: no availableBytes
        let unlimited = MemoryUsage {
            limit: None,
            ..usage
        };
        let m = memory_stats(&t(), Some(&unlimited), None, None).unwrap();
        assert_eq!(m.available_bytes, None);
        assert_eq!(memory_stats(&t(), None, None, None), None);
    }

    #[test]
    fn cpu_block_and_psi() {
        let psi = Psi {
            some: PsiLine {
                avg10: 1.5,
                avg60: 1.0,
                avg300: 0.5,
                total: 99,
            },
            full: None,
        };
        let c = cpu_stats(
            &t(),
            Some(CpuUsage {
                usage_nanos: 42,
                ..CpuUsage::default()
            }),
            Some(7),
            Some(&psi),
        )
        .unwrap();
        assert_eq!(
            (c.usage_core_nano_seconds, c.usage_nano_cores),
            (Some(42), Some(7))
        );
        let p = c.psi.unwrap();
        assert_eq!(
            (p.some.total, p.some.avg10, p.full),
            (99, 1.5, PsiData::default())
        );
        // pressure alone still makes a block; nothing makes none
        assert!(cpu_stats(&t(), None, Some(7), Some(&psi))
            .unwrap()
            .usage_nano_cores
            .is_none());
        assert_eq!(cpu_stats(&t(), None, None, None), None);
        assert_eq!(io_stats(&t(), None), None);
    }

    #[test]
    fn sums_table() {
        let cpu = |rate: Option<u64>, total| CpuStats {
            time: t(),
            usage_nano_cores: rate,
            usage_core_nano_seconds: Some(total),
            psi: None,
        };
        let (a, b, c) = (cpu(Some(10), 100), cpu(Some(20), 200), cpu(None, 5));
        let s = sum_cpu(&t(), &[&a, &b]).unwrap();
        assert_eq!(
            (s.usage_nano_cores, s.usage_core_nano_seconds),
            (Some(30), Some(300))
        );
        let s = sum_cpu(&t(), &[&a, &c]).unwrap();
        assert_eq!(
            (s.usage_nano_cores, s.usage_core_nano_seconds),
            (None, Some(105))
        );
        assert_eq!(sum_cpu(&t(), &[]), None);
        assert_eq!(add_usage(None, None), None);
        assert_eq!(add_usage(Some(1), None), Some(1));
        assert_eq!(add_usage(None, Some(2)), Some(2));
        assert_eq!(add_usage(Some(u64::MAX), Some(2)), Some(u64::MAX));
    }
}
