//! The last hour of the node, for the status page: memory available, pressure stall (PSI), CPU
//! and pod count every [`SAMPLE_PERIOD`], and markers where a pod was evicted or a container
//! restarted.
//!
//! Nothing is read for it: [`Recording`] wraps the Summary source the eviction manager reads
//! (every second: the node's CPU, memory and pressure; the pods too every 10 s) and keeps one
//! of those readings every [`SAMPLE_PERIOD`] (a node-only reading counts the pods of the last
//! reading that listed them, at most 10 s old); the markers come from the pod statuses at the same moment (a container's
//! `restartCount` went up; a pod turned `Failed` with reason `Evicted`). Both live in rings of
//! fixed capacity ([`SAMPLE_CAPACITY`], [`MARKER_CAPACITY`]) allocated once, so the memory is
//! bounded whatever the node does: a [`Sample`] is 104 bytes, 360 of them 37 KiB; a [`Marker`]
//! is 64 bytes plus its two strings (a pod name and a short reason, ~60 bytes), 256 of them
//! about 31 KiB; the restart counts seen are one entry per container of the pods present (~100
//! bytes each, about 11 KiB with 110 single-container pods). About 80 KiB in all.
//!
//! The core ([`sample_from`], [`markers`]) is pure and table-tested; [`History`] holds the
//! rings behind a mutex taken for microseconds per sample.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;

use crate::config::eviction::{Signal, Threshold};
use crate::stats::summary::Summary;
use crate::stats::{Scope, SummarySource};

/// How often a reading is kept.
pub const SAMPLE_PERIOD: Duration = Duration::from_secs(10);
/// How far back the history goes.
pub const WINDOW: Duration = Duration::from_secs(3600);
/// One hour of samples.
pub const SAMPLE_CAPACITY: usize = (WINDOW.as_secs() / SAMPLE_PERIOD.as_secs()) as usize;
/// The most markers kept (the oldest go first).
pub const MARKER_CAPACITY: usize = 256;

/// The node at one moment. Times are Unix seconds (what the charts' axes need).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Sample {
    pub at: i64,
    /// The eviction signal `memory.available`: capacity − the root cgroup's working set.
    pub memory_available: Option<u64>,
    pub memory_working_set: Option<u64>,
    /// The node's cumulative CPU time (what the rate is computed from).
    pub cpu_usage_nanos: Option<u64>,
    /// CPU used since the previous sample, in cores.
    pub cpu_cores: Option<f32>,
    /// `avg10` of `/proc/pressure/*`, percent of wall time.
    pub memory_some_avg10: Option<f32>,
    pub memory_full_avg10: Option<f32>,
    pub cpu_some_avg10: Option<f32>,
    pub io_some_avg10: Option<f32>,
    /// Pods with a ready sandbox.
    pub pods: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MarkerKind {
    Restarted,
    Evicted,
}

/// Something that happened to a pod, drawn on every chart at its time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub at: i64,
    pub kind: MarkerKind,
    /// `namespace/name`.
    pub pod: String,
    /// The container and why it ended (`app: Error, exit code 1`), or the eviction message.
    pub detail: String,
}

/// A ring of fixed capacity: the buffer is allocated once, the oldest entry makes room.
#[derive(Debug, Clone)]
pub struct Ring<T> {
    items: VecDeque<T>,
    capacity: usize,
}

impl<T: Clone> Ring<T> {
    pub fn new(capacity: usize) -> Ring<T> {
        Ring {
            items: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    pub fn push(&mut self, item: T) {
        if self.capacity == 0 {
            return;
        }
        if self.items.len() == self.capacity {
            self.items.pop_front();
        }
        self.items.push_back(item);
    }

    pub fn last(&self) -> Option<&T> {
        self.items.back()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn to_vec(&self) -> Vec<T> {
        self.items.iter().cloned().collect()
    }
}

/// One Summary reading as a sample; the CPU rate is over the time since `previous`.
pub fn sample_from(summary: &Summary, previous: Option<&Sample>, at: i64) -> Sample {
    let node = &summary.node;
    let memory = node.memory.as_ref();
    let cpu_usage_nanos = node.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds);
    let cpu_cores = previous.and_then(|p| {
        let used = cpu_usage_nanos?.checked_sub(p.cpu_usage_nanos?)?;
        let seconds = at.checked_sub(p.at).filter(|s| *s > 0)?;
        Some((used as f64 / 1e9 / seconds as f64) as f32)
    });
    let psi_some = |psi: Option<&crate::stats::summary::PsiStats>| psi.map(|p| p.some.avg10 as f32);
    Sample {
        at,
        memory_available: memory.and_then(|m| m.available_bytes),
        memory_working_set: memory.and_then(|m| m.working_set_bytes),
        cpu_usage_nanos,
        cpu_cores,
        memory_some_avg10: psi_some(memory.and_then(|m| m.psi.as_ref())),
        memory_full_avg10: memory
            .and_then(|m| m.psi.as_ref())
            .map(|p| p.full.avg10 as f32),
        cpu_some_avg10: psi_some(node.cpu.as_ref().and_then(|c| c.psi.as_ref())),
        io_some_avg10: psi_some(node.io.as_ref().and_then(|i| i.psi.as_ref())),
        pods: u32::try_from(summary.pods.len()).unwrap_or(u32::MAX),
    }
}

/// What the marker detection remembers between two samples: each container's restart count
/// (by pod UID and container name) and the pods already seen evicted. Pods that are gone are
/// forgotten, so it holds the pods present and no more.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    restarts: BTreeMap<(String, String), i32>,
    evicted: BTreeSet<String>,
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// `app: Error, exit code 1` from a container's last termination (or `app` without one).
fn restart_detail(status: &k8s_openapi::api::core::v1::ContainerStatus) -> String {
    let last = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref());
    match last {
        Some(t) => format!(
            "{}: {}, exit code {}",
            status.name,
            t.reason.as_deref().unwrap_or("terminated"),
            t.exit_code
        ),
        None => status.name.clone(),
    }
}

/// The markers between the previous look (`seen`) and now: a restart count that went up, a
/// pod newly `Failed` with reason `Evicted`. A container or pod seen for the first time makes
/// no marker (nodelet may just have started).
pub fn markers(seen: &Seen, pods: &[Arc<Pod>], at: i64) -> (Seen, Vec<Marker>) {
    let mut next = Seen::default();
    let mut found = Vec::new();
    for pod in pods {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let Some(status) = &pod.status else {
            continue;
        };
        let evicted = status.phase.as_deref() == Some("Failed")
            && status.reason.as_deref() == Some(crate::eviction::manager::REASON_EVICTED);
        if evicted {
            if !seen.evicted.contains(&uid) && seen.restarts.keys().any(|(u, _)| *u == uid) {
                found.push(Marker {
                    at,
                    kind: MarkerKind::Evicted,
                    pod: pod_key(pod),
                    detail: status.message.clone().unwrap_or_default(),
                });
            }
            next.evicted.insert(uid.clone());
        }
        for c in status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten())
        {
            let key = (uid.clone(), c.name.clone());
            if let Some(before) = seen.restarts.get(&key) {
                if c.restart_count > *before {
                    found.push(Marker {
                        at,
                        kind: MarkerKind::Restarted,
                        pod: pod_key(pod),
                        detail: restart_detail(c),
                    });
                }
            }
            next.restarts.insert(key, c.restart_count);
        }
        if status.container_statuses.iter().flatten().next().is_none() {
            // Keep the pod known even before its first container status.
            next.restarts.entry((uid, String::new())).or_insert(0);
        }
    }
    (next, found)
}

/// A threshold line to draw on the memory chart.
#[derive(Debug, Clone, PartialEq)]
pub struct ThresholdLine {
    /// `evictionHard memory.available` or `evictionSoft memory.available`.
    pub label: String,
    pub bytes: u64,
}

/// The `memory.available` thresholds in bytes, hard first.
pub fn memory_thresholds(thresholds: &[Threshold], capacity: u64) -> Vec<ThresholdLine> {
    let capacity = i64::try_from(capacity).unwrap_or(i64::MAX);
    let mut lines: Vec<ThresholdLine> = thresholds
        .iter()
        .filter(|t| t.signal == Signal::MemoryAvailable)
        .map(|t| ThresholdLine {
            label: format!(
                "{} memory.available",
                if t.is_hard() {
                    "evictionHard"
                } else {
                    "evictionSoft"
                }
            ),
            bytes: u64::try_from(t.value.amount(capacity)).unwrap_or(0),
        })
        .collect();
    lines.sort_by_key(|l| !l.label.starts_with("evictionHard"));
    lines
}

struct State {
    samples: Ring<Sample>,
    markers: Ring<Marker>,
    seen: Seen,
    last_kept: Option<Instant>,
    /// The pods of the last reading that listed them (a [`Scope::Node`] reading does not).
    pods: u32,
}

/// The rings and what they are drawn against.
pub struct History {
    state: Mutex<State>,
    period: Duration,
    /// The node's memory capacity (the memory chart's top).
    pub memory_capacity: u64,
    pub thresholds: Vec<ThresholdLine>,
}

/// What the status page draws.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub samples: Vec<Sample>,
    pub markers: Vec<Marker>,
    pub memory_capacity: u64,
    pub thresholds: Vec<ThresholdLine>,
}

impl History {
    pub fn new(memory_capacity: u64, thresholds: Vec<ThresholdLine>) -> History {
        History::with_period(memory_capacity, thresholds, SAMPLE_PERIOD)
    }

    /// A history keeping a sample every `period` (tests).
    pub fn with_period(
        memory_capacity: u64,
        thresholds: Vec<ThresholdLine>,
        period: Duration,
    ) -> History {
        History {
            state: Mutex::new(State {
                samples: Ring::new(SAMPLE_CAPACITY),
                markers: Ring::new(MARKER_CAPACITY),
                seen: Seen::default(),
                last_kept: None,
                pods: 0,
            }),
            period,
            memory_capacity,
            thresholds,
        }
    }

    /// Keeps this reading (of `scope`) when a period passed since the last one kept; `pods`
    /// gives the pod statuses at the same moment (asked only then). Returns whether it was
    /// kept.
    pub fn observe(
        &self,
        now: Instant,
        at: i64,
        (summary, scope): (&Summary, Scope),
        pods: impl FnOnce() -> Vec<Arc<Pod>>,
    ) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if scope != Scope::Node {
            state.pods = u32::try_from(summary.pods.len()).unwrap_or(u32::MAX);
        }
        if state
            .last_kept
            .is_some_and(|last| now.saturating_duration_since(last) < self.period)
        {
            return false;
        }
        state.last_kept = Some(now);
        let sample = Sample {
            pods: state.pods,
            ..sample_from(summary, state.samples.last(), at)
        };
        state.samples.push(sample);
        let (seen, found) = markers(&state.seen, &pods(), at);
        state.seen = seen;
        for m in found {
            state.markers.push(m);
        }
        true
    }

    pub fn snapshot(&self) -> Snapshot {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Snapshot {
            samples: state.samples.to_vec(),
            markers: state.markers.to_vec(),
            memory_capacity: self.memory_capacity,
            thresholds: self.thresholds.clone(),
        }
    }
}

/// The pods whose statuses the markers are read from.
pub type PodsFn = Arc<dyn Fn() -> Vec<Arc<Pod>> + Send + Sync>;

/// A Summary source that shows its readings to the [`History`] on their way to the caller.
pub struct Recording {
    pub inner: Arc<dyn SummarySource>,
    pub history: Arc<History>,
    pub pods: PodsFn,
    pub clock: crate::clock::Clock,
}

#[async_trait::async_trait]
impl SummarySource for Recording {
    async fn summary(&self, scope: Scope) -> crate::stats::Result<Summary> {
        let summary = self.inner.summary(scope).await?;
        self.history.observe(
            Instant::now(),
            self.clock.now().as_second(),
            (&summary, scope),
            || (self.pods)(),
        );
        Ok(summary)
    }

    /// cAdvisor's readings pass by: the history keeps Summaries only.
    async fn cadvisor(&self) -> crate::stats::Result<crate::stats::cadvisor::CadvisorInput> {
        self.inner.cadvisor().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summary::{CpuStats, MemoryStats, NodeStats, PsiData, PsiStats};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn summary(available: u64, cpu_nanos: u64, pods: usize) -> Summary {
        let t = Time(jiff::Timestamp::UNIX_EPOCH);
        Summary {
            node: NodeStats {
                node_name: "n".into(),
                system_containers: vec![],
                start_time: t.clone(),
                cpu: Some(CpuStats {
                    time: t.clone(),
                    usage_nano_cores: None,
                    usage_core_nano_seconds: Some(cpu_nanos),
                    psi: Some(PsiStats {
                        some: PsiData {
                            avg10: 1.5,
                            ..Default::default()
                        },
                        full: PsiData::default(),
                    }),
                }),
                memory: Some(MemoryStats {
                    time: t,
                    available_bytes: Some(available),
                    usage_bytes: None,
                    working_set_bytes: Some(1000 - available),
                    rss_bytes: None,
                    page_faults: None,
                    major_page_faults: None,
                    psi: Some(PsiStats {
                        some: PsiData {
                            avg10: 12.25,
                            ..Default::default()
                        },
                        full: PsiData {
                            avg10: 3.0,
                            ..Default::default()
                        },
                    }),
                }),
                io: None,
                network: None,
                fs: None,
                runtime: None,
                rlimit: None,
                swap: None,
            },
            pods: (0..pods)
                .map(|i| crate::stats::summary::PodStats {
                    pod_ref: crate::stats::summary::PodReference {
                        name: format!("p{i}"),
                        namespace: "default".into(),
                        uid: format!("u{i}"),
                    },
                    start_time: Time(jiff::Timestamp::UNIX_EPOCH),
                    containers: vec![],
                    cpu: None,
                    memory: None,
                    io: None,
                    network: None,
                    volume_stats: vec![],
                    ephemeral_storage: None,
                    process_stats: None,
                    swap: None,
                })
                .collect(),
        }
    }

    #[test]
    fn a_sample_carries_memory_psi_pods_and_the_cpu_rate_since_the_previous() {
        let first = sample_from(&summary(400, 5_000_000_000, 3), None, 100);
        assert_eq!(first.memory_available, Some(400));
        assert_eq!(first.memory_working_set, Some(600));
        assert_eq!(first.memory_some_avg10, Some(12.25));
        assert_eq!(first.memory_full_avg10, Some(3.0));
        assert_eq!(first.cpu_some_avg10, Some(1.5));
        assert_eq!(first.io_some_avg10, None);
        assert_eq!(first.pods, 3);
        assert_eq!(first.cpu_cores, None, "no rate without a previous sample");
        // 10 s later, 15 s of CPU used: 1.5 cores.
        let second = sample_from(&summary(300, 20_000_000_000, 4), Some(&first), 110);
        assert_eq!(second.cpu_cores, Some(1.5));
        // A counter that went back (a different root?) or no time passed: no rate.
        assert_eq!(
            sample_from(&summary(300, 1, 4), Some(&second), 120).cpu_cores,
            None
        );
        assert_eq!(
            sample_from(&summary(300, 30_000_000_000, 4), Some(&second), 110).cpu_cores,
            None
        );
    }

    fn pod(uid: &str, restarts: &[(&str, i32)], evicted: bool) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(format!("pod-{uid}")),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                phase: Some(if evicted { "Failed" } else { "Running" }.into()),
                reason: evicted.then(|| "Evicted".to_string()),
                message: evicted.then(|| "The node was low on resource: memory. ".to_string()),
                container_statuses: Some(
                    restarts
                        .iter()
                        .map(|(name, count)| ContainerStatus {
                            name: (*name).into(),
                            restart_count: *count,
                            last_state: (*count > 0).then(|| ContainerState {
                                terminated: Some(ContainerStateTerminated {
                                    exit_code: 1,
                                    reason: Some("Error".into()),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            }),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn markers_for_restarts_and_evictions_seen_between_two_looks() {
        struct Case {
            name: &'static str,
            before: Vec<Arc<Pod>>,
            now: Vec<Arc<Pod>>,
            want: Vec<(MarkerKind, &'static str, &'static str)>,
        }
        let cases = vec![
            Case {
                name: "first look: nothing, whatever the counts",
                before: vec![],
                now: vec![pod("a", &[("app", 3)], false), pod("b", &[], true)],
                want: vec![],
            },
            Case {
                name: "a restart count that went up",
                before: vec![pod("a", &[("app", 1), ("side", 0)], false)],
                now: vec![pod("a", &[("app", 3), ("side", 0)], false)],
                want: vec![(
                    MarkerKind::Restarted,
                    "default/pod-a",
                    "app: Error, exit code 1",
                )],
            },
            Case {
                name: "unchanged counts: nothing",
                before: vec![pod("a", &[("app", 2)], false)],
                now: vec![pod("a", &[("app", 2)], false)],
                want: vec![],
            },
            Case {
                name: "a known pod evicted, once",
                before: vec![pod("a", &[("app", 0)], false)],
                now: vec![pod("a", &[("app", 0)], true)],
                want: vec![(
                    MarkerKind::Evicted,
                    "default/pod-a",
                    "The node was low on resource: memory. ",
                )],
            },
            Case {
                name: "already evicted before: nothing",
                before: vec![pod("a", &[("app", 0)], true)],
                now: vec![pod("a", &[("app", 0)], true)],
                want: vec![],
            },
            Case {
                name: "a new container of a known pod counts from its first look",
                before: vec![pod("a", &[], false)],
                now: vec![pod("a", &[("app", 4)], false)],
                want: vec![],
            },
        ];
        for case in cases {
            let (seen, _) = markers(&Seen::default(), &case.before, 1);
            let (_, found) = markers(&seen, &case.now, 2);
            let got: Vec<(MarkerKind, &str, &str)> = found
                .iter()
                .map(|m| (m.kind, m.pod.as_str(), m.detail.as_str()))
                .collect();
            assert_eq!(got, case.want, "{}", case.name);
            assert!(found.iter().all(|m| m.at == 2), "{}", case.name);
        }
        // Gone pods are forgotten.
        let (seen, _) = markers(&Seen::default(), &[pod("a", &[("app", 1)], true)], 1);
        let (seen, _) = markers(&seen, &[], 2);
        assert_eq!(seen, Seen::default());
    }

    #[test]
    fn the_rings_keep_one_hour_and_the_newest_markers() {
        assert_eq!(SAMPLE_CAPACITY, 360);
        // The figures the module documentation gives for the memory cost.
        assert_eq!(std::mem::size_of::<Sample>(), 104);
        assert_eq!(std::mem::size_of::<Marker>(), 64);
        let history = History::with_period(1000, vec![], Duration::from_secs(10));
        let start = Instant::now();
        let mut kept = 0;
        for i in 0..800u64 {
            // Every 5 s: only every other reading is kept.
            if history.observe(
                start + Duration::from_secs(5 * i),
                i64::try_from(5 * i).unwrap(),
                (&summary(500, 0, 1), Scope::CpuAndMemory),
                || vec![pod("a", &[("app", i32::try_from(i).unwrap())], false)],
            ) {
                kept += 1;
            }
        }
        assert_eq!(kept, 400);
        let snapshot = history.snapshot();
        assert_eq!(snapshot.samples.len(), SAMPLE_CAPACITY);
        assert_eq!(snapshot.samples.first().unwrap().at, 40 * 10);
        assert_eq!(snapshot.samples.last().unwrap().at, 3990);
        assert_eq!(snapshot.markers.len(), MARKER_CAPACITY);
        assert_eq!(snapshot.markers.last().unwrap().at, 3990);
    }

    struct Fixed;

    #[async_trait::async_trait]
    impl SummarySource for Fixed {
        async fn summary(&self, scope: Scope) -> crate::stats::Result<Summary> {
            // As the real provider: the node's scope lists no pod.
            let pods = if scope == Scope::Node { 0 } else { 2 };
            Ok(summary(700, 1_000_000_000, pods))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn recording_passes_every_reading_on_and_keeps_one_per_period() {
        let history = Arc::new(History::new(1000, vec![]));
        let asked = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counter = asked.clone();
        let recording = Recording {
            inner: Arc::new(Fixed),
            history: history.clone(),
            pods: Arc::new(move || {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                vec![]
            }),
            clock: crate::clock::Clock::starting_at(jiff::Timestamp::from_second(1000).unwrap()),
        };
        // The eviction manager's pace: a reading a second, for 25 s.
        for _ in 0..25 {
            let s = recording.summary(Scope::CpuAndMemory).await.unwrap();
            assert_eq!(s.pods.len(), 2);
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        let kept: Vec<i64> = history.snapshot().samples.iter().map(|s| s.at).collect();
        assert_eq!(kept, [1000, 1010, 1020]);
        // The pod statuses are read only for the readings kept.
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_only_reading_counts_the_pods_of_the_last_one_that_listed_them() {
        let history = Arc::new(History::with_period(1000, vec![], Duration::from_secs(1)));
        let recording = Recording {
            inner: Arc::new(Fixed),
            history: history.clone(),
            pods: Arc::new(Vec::new),
            clock: crate::clock::Clock::starting_at(jiff::Timestamp::from_second(1000).unwrap()),
        };
        // The eviction manager's pattern: the node every second, the pods now and then.
        for scope in [Scope::Node, Scope::Full, Scope::Node, Scope::Node] {
            recording.summary(scope).await.unwrap();
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        let pods: Vec<u32> = history.snapshot().samples.iter().map(|s| s.pods).collect();
        assert_eq!(pods, [0, 2, 2, 2], "none known before the first listing");
    }

    #[test]
    fn memory_thresholds_in_bytes_hard_first() {
        use crate::config::eviction::ThresholdValue;
        let t = |signal, value, grace| Threshold {
            signal,
            value,
            grace_period: Duration::from_secs(grace),
            min_reclaim: None,
        };
        let lines = memory_thresholds(
            &[
                t(
                    Signal::MemoryAvailable,
                    ThresholdValue::Quantity(300 << 20),
                    60,
                ),
                t(
                    Signal::NodeFsAvailable,
                    ThresholdValue::PartsPerMillion(100_000),
                    0,
                ),
                t(
                    Signal::MemoryAvailable,
                    ThresholdValue::PartsPerMillion(100_000),
                    0,
                ),
            ],
            1 << 30,
        );
        assert_eq!(
            lines,
            vec![
                ThresholdLine {
                    label: "evictionHard memory.available".into(),
                    bytes: 107_374_182,
                },
                ThresholdLine {
                    label: "evictionSoft memory.available".into(),
                    bytes: 300 << 20,
                },
            ]
        );
    }
}
