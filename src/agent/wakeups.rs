//! Starts the eviction manager's wake-ups (`eviction::notify`) for this node: the memory
//! check while a `memory.available` threshold is configured, a PSI trigger on `kubepods`'
//! `memory.pressure` (the node's `/proc/pressure/memory` where there is no such file), and
//! `kubepods`' `memory.events` on cgroup v2. A source that cannot start is logged and left
//! out: the manager's own period still runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cgroup::kubepods_cgroup_name;
use crate::config::eviction::{Signal, Threshold};
use crate::config::Config;
use crate::eviction::notify::{
    open_memory_events, open_psi_trigger, watch_memory, PriorityWatch, PsiTrigger, Wake, WakeKind,
    WakeSource, Waker,
};
use crate::metrics::{metrics, WakeLabels};
use crate::stats::cgroup::{CgroupReader, CgroupVersion};

use super::HostPaths;

/// How often the memory check reads the root cgroup: a hog at 1 GiB/s gains 100 MiB between
/// two reads, the kubelet's whole default threshold.
pub const MEMORY_CHECK_PERIOD: Duration = Duration::from_millis(100);

/// Wakes the manager and counts the wake-up by source.
#[derive(Clone)]
struct CountedWake(Arc<Waker>);

impl Wake for CountedWake {
    fn wake(&self, source: WakeSource, kind: WakeKind) {
        metrics()
            .eviction_wakeups_total
            .get_or_create(&WakeLabels {
                source: source.name().to_string(),
            })
            .inc();
        Waker::wake(&self.0, kind);
    }
}

/// The memory check's floor: the highest `memory.available` threshold, in bytes of `capacity`.
pub fn memory_floor(thresholds: &[Threshold], capacity: u64) -> Option<u64> {
    let capacity = i64::try_from(capacity).unwrap_or(i64::MAX);
    thresholds
        .iter()
        .filter(|t| t.signal == Signal::MemoryAvailable)
        .map(|t| t.value.amount(capacity))
        .max()
        .map(|amount| u64::try_from(amount).unwrap_or(0))
}

pub(super) fn spawn(
    cfg: &Config,
    paths: &HostPaths,
    thresholds: &[Threshold],
    memory_capacity: u64,
    wake: Arc<Waker>,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) {
    let wake = CountedWake(wake);
    let reader = CgroupReader::detect(&paths.cgroup);
    let v2 = reader.version() == CgroupVersion::V2;
    if let Some(floor) = memory_floor(thresholds, memory_capacity) {
        tasks.spawn(watch_memory(
            reader,
            memory_capacity,
            floor,
            MEMORY_CHECK_PERIOD,
            wake.clone(),
            cancel.child_token(),
        ));
    }
    let kubepods: Option<PathBuf> = (v2 && cfg.cgroups_per_qos).then(|| {
        paths.cgroup.join(
            kubepods_cgroup_name(&cfg.cgroup_root)
                .to_driver(cfg.cgroup_driver)
                .trim_start_matches('/'),
        )
    });
    let pressure = kubepods
        .as_ref()
        .map(|k| k.join("memory.pressure"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| paths.proc.join("pressure/memory"));
    let psi = open_psi_trigger(&pressure, PsiTrigger::DEFAULT)
        .and_then(|file| PriorityWatch::new(file, pressure.clone(), WakeSource::Psi, false));
    start(psi, &wake, tasks, cancel);
    if let Some(kubepods) = kubepods {
        let path = kubepods.join("memory.events");
        let events = open_memory_events(&path)
            .and_then(|file| PriorityWatch::new(file, path, WakeSource::MemoryEvents, true));
        start(events, &wake, tasks, cancel);
    }
}

fn start(
    watch: Result<PriorityWatch, crate::eviction::notify::NotifyError>,
    wake: &CountedWake,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) {
    match watch {
        Ok(watch) => {
            let (wake, cancel) = (wake.clone(), cancel.child_token());
            tasks.spawn(async move {
                if let Err(e) = watch.run(wake, cancel).await {
                    tracing::warn!(error = %e, "eviction wake-up stopped");
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "eviction wake-up not started"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::eviction::ThresholdValue;

    #[test]
    fn the_floor_is_the_highest_memory_threshold() {
        let t = |signal, value| Threshold {
            signal,
            value,
            grace_period: Duration::ZERO,
            min_reclaim: None,
        };
        let gib = 1 << 30;
        let table: Vec<(Vec<Threshold>, Option<u64>)> = vec![
            (vec![], None),
            (
                vec![t(
                    Signal::NodeFsAvailable,
                    ThresholdValue::PartsPerMillion(100_000),
                )],
                None,
            ),
            (
                vec![
                    t(Signal::MemoryAvailable, ThresholdValue::Quantity(100 << 20)),
                    t(
                        Signal::MemoryAvailable,
                        ThresholdValue::PartsPerMillion(250_000),
                    ),
                ],
                Some(gib),
            ),
            (
                vec![t(
                    Signal::MemoryAvailable,
                    ThresholdValue::Quantity(300 << 20),
                )],
                Some(300 << 20),
            ),
        ];
        for (thresholds, want) in table {
            assert_eq!(memory_floor(&thresholds, 4 * gib), want, "{thresholds:?}");
        }
    }
}
