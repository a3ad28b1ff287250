//! The signal readings of one eviction pass, taken from the `/stats/summary` the stats readers
//! build, as the kubelet's `makeSignalObservations` takes them: every signal is an amount
//! available out of a capacity.
//!
//! - `memory.available`: the node's `availableBytes` (capacity − working set of the root
//!   cgroup) out of `availableBytes + workingSetBytes`;
//! - `allocatableMemory.available`: the same of the `pods` system container (`kubepods`,
//!   whose `memory.max` is allocatable when `enforceNodeAllocatable` has `pods`; without a
//!   limit it has no `availableBytes` and so no reading);
//! - `nodefs.*` from the node's root filesystem, `imagefs.*` / `containerfs.*` from the
//!   runtime's `ImageFsInfo`;
//! - `pid.available`: `maxpid − curproc` out of `maxpid` (min(`pid_max`, `threads-max`));
//! - nodelet's `memory.pressure.{some,full}.avg10`: the node's memory PSI (the stats readers
//!   read `<proc>/pressure/memory`), the line's `avg10` percentage as millionths of
//!   [`STALL_CAPACITY`]; no reading on a kernel without PSI.
//!
//! A signal whose numbers are missing has no reading, and a threshold on it is never met.
//! Pure: the summary comes in, the readings go out.

use std::collections::BTreeMap;

use super::threshold::Observation;
use crate::config::eviction::{Signal, STALL_CAPACITY};
use crate::stats::summary::{FsStats, MemoryStats, Summary, SYSTEM_CONTAINER_PODS};

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn memory(m: &MemoryStats) -> Option<Observation> {
    let available = int(m.available_bytes?);
    let working_set = int(m.working_set_bytes?);
    Some(Observation {
        available,
        capacity: available.saturating_add(working_set),
    })
}

/// An `avg10` percentage as a stall reading (millionths of wall time).
fn stall(avg10_percent: f64) -> Observation {
    let ppm = (avg10_percent * 10_000.0).round();
    Observation {
        available: (ppm.clamp(0.0, STALL_CAPACITY as f64)) as i64,
        capacity: STALL_CAPACITY,
    }
}

fn bytes(fs: &FsStats) -> Option<Observation> {
    Some(Observation {
        available: int(fs.available_bytes?),
        capacity: int(fs.capacity_bytes?),
    })
}

fn inodes(fs: &FsStats) -> Option<Observation> {
    Some(Observation {
        available: int(fs.inodes_free?),
        capacity: int(fs.inodes?),
    })
}

/// Every signal the summary has the numbers for.
pub fn observations(summary: &Summary) -> BTreeMap<Signal, Observation> {
    let node = &summary.node;
    let mut out = BTreeMap::new();
    let mut put = |signal: Signal, observation: Option<Observation>| {
        if let Some(o) = observation {
            out.insert(signal, o);
        }
    };
    put(
        Signal::MemoryAvailable,
        node.memory.as_ref().and_then(memory),
    );
    if let Some(psi) = node.memory.as_ref().and_then(|m| m.psi.as_ref()) {
        put(Signal::MemoryPressureSomeAvg10, Some(stall(psi.some.avg10)));
        put(Signal::MemoryPressureFullAvg10, Some(stall(psi.full.avg10)));
    }
    put(
        Signal::AllocatableMemoryAvailable,
        node.system_containers
            .iter()
            .find(|c| c.name == SYSTEM_CONTAINER_PODS)
            .and_then(|c| c.memory.as_ref())
            .and_then(memory),
    );
    if let Some(fs) = &node.fs {
        put(Signal::NodeFsAvailable, bytes(fs));
        put(Signal::NodeFsInodesFree, inodes(fs));
    }
    if let Some(runtime) = &node.runtime {
        if let Some(fs) = &runtime.image_fs {
            put(Signal::ImageFsAvailable, bytes(fs));
            put(Signal::ImageFsInodesFree, inodes(fs));
        }
        if let Some(fs) = &runtime.container_fs {
            put(Signal::ContainerFsAvailable, bytes(fs));
            put(Signal::ContainerFsInodesFree, inodes(fs));
        }
    }
    if let Some(rlimit) = &node.rlimit {
        if let (Some(max), Some(running)) = (rlimit.maxpid, rlimit.curproc) {
            put(
                Signal::PidAvailable,
                Some(Observation {
                    available: max.saturating_sub(running),
                    capacity: max,
                }),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summary::{ContainerStats, NodeStats, RlimitStats, RuntimeStats, Summary};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn time() -> Time {
        Time("2026-01-01T00:00:00Z".parse().unwrap())
    }

    fn mem(available: Option<u64>, working_set: Option<u64>) -> MemoryStats {
        MemoryStats {
            time: time(),
            available_bytes: available,
            usage_bytes: None,
            working_set_bytes: working_set,
            rss_bytes: None,
            page_faults: None,
            major_page_faults: None,
            psi: None,
        }
    }

    fn fs(available: u64, capacity: u64, free: Option<u64>, inodes: Option<u64>) -> FsStats {
        FsStats {
            available_bytes: Some(available),
            capacity_bytes: Some(capacity),
            inodes_free: free,
            inodes,
            ..FsStats::empty(time())
        }
    }

    fn summary(node: impl FnOnce(&mut NodeStats)) -> Summary {
        let mut n = NodeStats {
            node_name: "n".into(),
            system_containers: Vec::new(),
            start_time: time(),
            cpu: None,
            memory: None,
            io: None,
            network: None,
            fs: None,
            runtime: None,
            rlimit: None,
            swap: None,
        };
        node(&mut n);
        Summary {
            node: n,
            pods: Vec::new(),
        }
    }

    fn obs(available: i64, capacity: i64) -> Observation {
        Observation {
            available,
            capacity,
        }
    }

    /// The PSI signals from the text of `<proc>/pressure/memory`, read through a proc root
    /// given as a path, as the stats readers read it.
    #[test]
    fn pressure_readings_from_the_proc_file() {
        use crate::stats::cgroup::Resource;
        use Signal::*;
        // (file contents, None = no file, readings of some and full)
        type Case = (Option<&'static str>, Vec<(Signal, Observation)>);
        let cases: Vec<Case> = vec![
            (
                Some(
                    "some avg10=12.34 avg60=3.00 avg300=0.50 total=123456\n\
                     full avg10=0.56 avg60=0.10 avg300=0.00 total=4567\n",
                ),
                vec![
                    (MemoryPressureSomeAvg10, obs(123_400, STALL_CAPACITY)),
                    (MemoryPressureFullAvg10, obs(5_600, STALL_CAPACITY)),
                ],
            ),
            (
                Some(
                    "some avg10=100.00 avg60=0.00 avg300=0.00 total=1\n\
                     full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                ),
                vec![
                    (MemoryPressureSomeAvg10, obs(STALL_CAPACITY, STALL_CAPACITY)),
                    (MemoryPressureFullAvg10, obs(0, STALL_CAPACITY)),
                ],
            ),
            // A kernel without PSI: no reading, so a PSI threshold is never met.
            (None, vec![]),
        ];
        for (contents, want) in cases {
            let proc = tempfile::tempdir().unwrap();
            if let Some(text) = contents {
                std::fs::create_dir(proc.path().join("pressure")).unwrap();
                std::fs::write(proc.path().join("pressure/memory"), text).unwrap();
            }
            let psi = crate::stats::node::read_pressure(proc.path(), Resource::Memory).unwrap();
            let memory = crate::stats::convert::memory_stats(&time(), None, None, psi.as_ref());
            let got = observations(&summary(|n| n.memory = memory));
            let want: BTreeMap<Signal, Observation> = want.into_iter().collect();
            assert_eq!(got, want, "{contents:?}");
        }
        // A malformed file is an error naming the path and the field, not a zero reading.
        let proc = tempfile::tempdir().unwrap();
        std::fs::create_dir(proc.path().join("pressure")).unwrap();
        std::fs::write(
            proc.path().join("pressure/memory"),
            "some avg10=x avg60=0 avg300=0 total=0\n",
        )
        .unwrap();
        let err = crate::stats::node::read_pressure(proc.path(), Resource::Memory)
            .expect_err("malformed")
            .to_string();
        assert!(
            err.contains("pressure/memory") && err.contains("avg10=\"x\""),
            "{err}"
        );
    }

    #[test]
    fn readings_like_make_signal_observations() {
        use Signal::*;
        let pods_container = |m: MemoryStats| ContainerStats {
            name: SYSTEM_CONTAINER_PODS.into(),
            start_time: time(),
            cpu: None,
            memory: Some(m),
            io: None,
            rootfs: None,
            logs: None,
            swap: None,
        };
        // (what, summary, readings)
        type Case = (&'static str, Summary, Vec<(Signal, Observation)>);
        let cases: Vec<Case> = vec![
            ("nothing measured: no readings", summary(|_| {}), vec![]),
            (
                "node memory: capacity is available + working set",
                summary(|n| n.memory = Some(mem(Some(300), Some(700)))),
                vec![(MemoryAvailable, obs(300, 1000))],
            ),
            (
                "memory without availableBytes: no reading",
                summary(|n| n.memory = Some(mem(None, Some(700)))),
                vec![],
            ),
            (
                "kubepods: allocatableMemory.available; other system containers ignored",
                summary(|n| {
                    n.system_containers = vec![
                        ContainerStats {
                            name: "kubelet".into(),
                            ..pods_container(mem(Some(1), Some(1)))
                        },
                        pods_container(mem(Some(100), Some(400))),
                    ]
                }),
                vec![(AllocatableMemoryAvailable, obs(100, 500))],
            ),
            (
                "filesystems: bytes and inodes; inodes missing, no inode reading",
                summary(|n| {
                    n.fs = Some(fs(10, 100, Some(5), Some(50)));
                    n.runtime = Some(RuntimeStats {
                        image_fs: Some(fs(20, 200, None, None)),
                        container_fs: Some(fs(30, 300, Some(3), Some(30))),
                    });
                }),
                vec![
                    (NodeFsAvailable, obs(10, 100)),
                    (NodeFsInodesFree, obs(5, 50)),
                    (ImageFsAvailable, obs(20, 200)),
                    (ContainerFsAvailable, obs(30, 300)),
                    (ContainerFsInodesFree, obs(3, 30)),
                ],
            ),
            (
                "pids: maxpid − curproc out of maxpid",
                summary(|n| {
                    n.rlimit = Some(RlimitStats {
                        time: time(),
                        maxpid: Some(4_194_304),
                        curproc: Some(304),
                    })
                }),
                vec![(PidAvailable, obs(4_194_000, 4_194_304))],
            ),
            (
                "pids without curproc: no reading",
                summary(|n| {
                    n.rlimit = Some(RlimitStats {
                        time: time(),
                        maxpid: Some(100),
                        curproc: None,
                    })
                }),
                vec![],
            ),
        ];
        for (what, summary, want) in cases {
            let want: BTreeMap<Signal, Observation> = want.into_iter().collect();
            assert_eq!(observations(&summary), want, "{what}");
        }
    }
}
