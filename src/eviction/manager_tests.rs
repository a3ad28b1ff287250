//! The eviction manager's loop with fakes: a summary that tests change, a pod list, a killer
//! that records and whose cleanup the test controls, node-level reclaim that can free space.
//! Paused clock, so the reaction times are asserted exactly.

use std::collections::BTreeMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::*;
use crate::clock::Clock;
use crate::config::eviction::ThresholdValue;
use crate::stats::summary::{
    ContainerStats, FsStats, MemoryStats, NodeStats, PodReference, PodStats, RlimitStats,
};
use crate::stats::Result as StatsResult;

const MI: u64 = 1 << 20;

fn time() -> Time {
    Time("2026-01-01T00:00:00Z".parse().unwrap())
}

fn memory(available: u64, working_set: u64) -> MemoryStats {
    MemoryStats {
        time: time(),
        available_bytes: Some(available),
        usage_bytes: None,
        working_set_bytes: Some(working_set),
        rss_bytes: None,
        page_faults: None,
        major_page_faults: None,
        psi: None,
    }
}

/// A node with `available` of 1 GiB memory free and `fs_available` of 100 GiB of disk, and
/// these pods' working sets (uid, container, bytes).
fn summary(available: u64, fs_available: u64, pods: &[(&str, &str, u64)]) -> Summary {
    Summary {
        node: NodeStats {
            node_name: "node-1".into(),
            system_containers: Vec::new(),
            start_time: time(),
            cpu: None,
            memory: Some(memory(available, 1024 * MI - available)),
            io: None,
            network: None,
            fs: Some(FsStats {
                available_bytes: Some(fs_available),
                capacity_bytes: Some(100 * 1024 * MI),
                ..FsStats::empty(time())
            }),
            runtime: None,
            rlimit: Some(RlimitStats {
                time: time(),
                maxpid: Some(10_000),
                curproc: Some(100),
            }),
            swap: None,
        },
        pods: pods
            .iter()
            .map(|(uid, container, ws)| PodStats {
                pod_ref: PodReference {
                    name: uid.to_string(),
                    namespace: "default".into(),
                    uid: uid.to_string(),
                },
                start_time: time(),
                containers: vec![ContainerStats {
                    name: container.to_string(),
                    start_time: time(),
                    cpu: None,
                    memory: Some(memory(0, *ws)),
                    io: None,
                    rootfs: None,
                    logs: None,
                    swap: None,
                }],
                cpu: None,
                memory: Some(memory(0, *ws)),
                io: None,
                network: None,
                volume_stats: Vec::new(),
                ephemeral_storage: None,
                process_stats: None,
                swap: None,
            })
            .collect(),
    }
}

fn pod(uid: &str, priority: i32, memory_request: Option<&str>) -> Arc<Pod> {
    let resources = memory_request.map(|m| ResourceRequirements {
        requests: Some(BTreeMap::from([(
            "memory".to_string(),
            K8sQuantity(m.into()),
        )])),
        limits: Some(BTreeMap::from([
            ("memory".to_string(), K8sQuantity(m.into())),
            ("cpu".to_string(), K8sQuantity("1".into())),
        ])),
        ..Default::default()
    });
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(uid.to_string()),
            namespace: Some("default".into()),
            uid: Some(uid.to_string()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            priority: Some(priority),
            termination_grace_period_seconds: Some(30),
            containers: vec![Container {
                name: "hog".into(),
                resources,
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn static_pod(uid: &str, priority: i32) -> Arc<Pod> {
    let mut p = (*pod(uid, priority, None)).clone();
    p.metadata.annotations = Some(BTreeMap::from([(
        "kubernetes.io/config.source".to_string(),
        "file".to_string(),
    )]));
    Arc::new(p)
}

#[derive(Default)]
struct FakeSummary {
    now: Mutex<Option<Summary>>,
    calls: Mutex<Vec<Scope>>,
}

#[async_trait::async_trait]
impl SummarySource for FakeSummary {
    async fn summary(&self, scope: Scope) -> StatsResult<Summary> {
        self.calls.lock().unwrap().push(scope);
        let mut summary = self
            .now
            .lock()
            .unwrap()
            .clone()
            .ok_or_else(|| crate::stats::Error::Task("no summary".into()))?;
        // As the real provider: the node's scope has no pods.
        if scope == Scope::Node {
            summary.pods.clear();
        }
        Ok(summary)
    }
}

#[derive(Default)]
struct FakePods(Mutex<Vec<Arc<Pod>>>);

impl ActivePods for FakePods {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.0.lock().unwrap().clone()
    }
}

struct Kill {
    uid: String,
    grace: Option<Duration>,
    status: StatusMutation,
    done: watch::Sender<bool>,
}

#[derive(Default)]
struct FakeKiller(Mutex<Vec<Kill>>);

impl PodKiller for FakeKiller {
    fn kill_pod(
        &self,
        pod: Arc<Pod>,
        grace_override: Option<Duration>,
        status: StatusMutation,
    ) -> KillHandle {
        let (done, rx) = watch::channel(false);
        self.0.lock().unwrap().push(Kill {
            uid: pod_uid(&pod).to_string(),
            grace: grace_override,
            status,
            done,
        });
        KillHandle::new(rx)
    }
}

impl FakeKiller {
    fn uids(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|k| k.uid.clone())
            .collect()
    }
    fn finish_all(&self) {
        for k in self.0.lock().unwrap().iter() {
            let _ = k.done.send(true);
        }
    }
}

/// Reclaim that records its calls and, on images, sets the summary to `after_images`.
#[derive(Default)]
struct FakeReclaim {
    calls: Mutex<Vec<&'static str>>,
    summary: Option<Arc<FakeSummary>>,
    after_images: Option<Summary>,
}

#[async_trait::async_trait]
impl NodeReclaim for FakeReclaim {
    async fn delete_unused_containers(&self) {
        self.calls.lock().unwrap().push("containers");
    }
    async fn delete_unused_images(&self) {
        self.calls.lock().unwrap().push("images");
        if let (Some(s), Some(after)) = (&self.summary, &self.after_images) {
            *s.now.lock().unwrap() = Some(after.clone());
        }
    }
}

fn hard(signal: Signal, value: ThresholdValue) -> Threshold {
    Threshold {
        signal,
        value,
        grace_period: Duration::ZERO,
        min_reclaim: None,
    }
}

fn settings(thresholds: Vec<Threshold>) -> Settings {
    Settings {
        thresholds,
        pressure_transition_period: Duration::from_secs(300),
        max_pod_grace_period_seconds: 10,
        evict_static_pods: false,
        split_image_fs: false,
        housekeeping_period: HOUSEKEEPING_PERIOD,
        check_period: CHECK_PERIOD,
        node_name: "node-1".into(),
    }
}

struct Rig {
    summary: Arc<FakeSummary>,
    pods: Arc<FakePods>,
    killer: Arc<FakeKiller>,
    reclaim: Arc<FakeReclaim>,
    events: EventRecorder,
}

fn rig(reclaim: FakeReclaim) -> Rig {
    let summary = Arc::new(FakeSummary::default());
    let reclaim = FakeReclaim {
        summary: Some(summary.clone()),
        ..reclaim
    };
    Rig {
        summary,
        pods: Arc::default(),
        killer: Arc::default(),
        reclaim: Arc::new(reclaim),
        events: EventRecorder::new(Clock::system(), "kubelet", "node-1"),
    }
}

impl Rig {
    fn manager(&self, settings: Settings) -> EvictionManager {
        EvictionManager::new(
            settings,
            self.summary.clone(),
            self.pods.clone(),
            self.killer.clone(),
            self.reclaim.clone(),
            self.events.clone(),
        )
    }
    fn set(&self, s: Summary) {
        *self.summary.now.lock().unwrap() = Some(s);
    }
    fn pods(&self, pods: Vec<Arc<Pod>>) {
        *self.pods.0.lock().unwrap() = pods;
    }
    fn events(&self) -> Vec<(String, String, String, String)> {
        self.events
            .events()
            .into_iter()
            .map(|e| {
                (
                    e.involved_object.name.unwrap_or_default(),
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                )
            })
            .collect()
    }
}

fn memory_100mi() -> Vec<Threshold> {
    vec![hard(
        Signal::MemoryAvailable,
        ThresholdValue::Quantity(100 * MI as i64),
    )]
}

#[tokio::test(start_paused = true)]
async fn hard_memory_eviction_takes_the_low_priority_hog_with_the_kubelets_status() {
    let r = rig(FakeReclaim::default());
    r.pods(vec![
        pod("guaranteed", 0, Some("64Mi")),
        pod("hog-high", 1000, None),
        pod("hog-low", 0, None),
        static_pod("static", 0),
    ]);
    r.set(summary(
        50 * MI,
        50 * 1024 * MI,
        &[
            ("guaranteed", "hog", 32 * MI),
            ("hog-high", "hog", 300 * MI),
            ("hog-low", "hog", 180 * MI),
            ("static", "hog", 400 * MI),
        ],
    ));
    let mut m = r.manager(settings(memory_100mi()));
    let pressure = m.pressure();
    assert!(
        matches!(m.synchronize().await, PassResult::Evicted { ref uid, .. } if uid == "hog-low")
    );
    let kills = r.killer.0.lock().unwrap();
    assert_eq!(kills.len(), 1);
    let k = &kills[0];
    assert_eq!(k.grace, Some(Duration::from_secs(1)), "hard threshold: 1s");
    let message = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container hog was using 180Mi, request is 0, has larger consumption of memory. ";
    assert_eq!(k.status.phase.as_deref(), Some("Failed"));
    assert_eq!(k.status.reason.as_deref(), Some("Evicted"));
    assert_eq!(k.status.message.as_deref(), Some(message));
    assert_eq!(k.status.conditions.len(), 1);
    let c = &k.status.conditions[0];
    assert_eq!(
        (c.type_.as_str(), c.status.as_str(), c.reason.as_deref()),
        ("DisruptionTarget", "True", Some("TerminationByKubelet"))
    );
    drop(kills);
    assert_eq!(
        r.events(),
        vec![
            (
                "node-1".into(),
                "Warning".into(),
                "EvictionThresholdMet".into(),
                "Attempting to reclaim memory".into()
            ),
            (
                "hog-low".into(),
                "Warning".into(),
                "Evicted".into(),
                message.into()
            ),
        ]
    );
    assert_eq!(
        pressure.conditions(),
        BTreeSet::from([NodeCondition::MemoryPressure])
    );
    assert!(pressure.pressure().memory && !pressure.pressure().disk);
    assert!(
        r.reclaim.calls.lock().unwrap().is_empty(),
        "no node-level reclaim for memory"
    );
}

#[tokio::test(start_paused = true)]
async fn critical_and_static_pods_are_never_evicted_unless_evict_static_pods() {
    let r = rig(FakeReclaim::default());
    let mut critical = (*pod("critical", 2_000_000_000, None)).clone();
    critical.metadata.name = Some("critical".into());
    r.pods(vec![Arc::new(critical), static_pod("static", 0)]);
    r.set(summary(
        50 * MI,
        50 * 1024 * MI,
        &[("critical", "hog", 500 * MI), ("static", "hog", 100 * MI)],
    ));
    let mut m = r.manager(settings(memory_100mi()));
    assert!(matches!(m.synchronize().await, PassResult::NoCandidate));
    assert!(r.killer.uids().is_empty());

    let mut s = settings(memory_100mi());
    s.evict_static_pods = true;
    let mut m = r.manager(s);
    assert!(
        matches!(m.synchronize().await, PassResult::Evicted { ref uid, .. } if uid == "static")
    );
    assert_eq!(
        r.killer.uids(),
        ["static"],
        "the critical-priority pod stays"
    );
}

#[tokio::test(start_paused = true)]
async fn reacts_within_the_check_period_and_when_woken() {
    let r = rig(FakeReclaim::default());
    r.pods(vec![pod("hog", 0, None)]);
    r.set(summary(
        500 * MI,
        50 * 1024 * MI,
        &[("hog", "hog", 100 * MI)],
    ));
    let m = r.manager(settings(memory_100mi()));
    let waker = m.waker();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(m.run(cancel.clone()));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(r.killer.uids().is_empty(), "no pressure, no eviction");
    let passes_before = r.summary.calls.lock().unwrap().len();
    assert!(passes_before >= 2, "passes ran: {passes_before}");

    // The threshold is crossed now; the next pass (≤ 1 s) kills.
    let crossed = Instant::now();
    r.set(summary(
        50 * MI,
        50 * 1024 * MI,
        &[("hog", "hog", 900 * MI)],
    ));
    while r.killer.uids().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reaction = crossed.elapsed();
    assert!(
        reaction <= Duration::from_secs(1),
        "crossing → kill took {reaction:?}"
    );

    // While the pod's cleanup runs, no second eviction, even for many check periods.
    r.pods(vec![pod("hog", 0, None), pod("other", 0, None)]);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(r.killer.uids(), ["hog"]);
    // Cleanup done: the next pass evicts the next pod (the summary still shows pressure).
    r.pods(vec![pod("other", 0, None)]);
    r.killer.finish_all();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(r.killer.uids(), ["hog", "other"]);
    r.killer.finish_all();

    // Woken: a pass at once, well before the check period.
    r.pods(vec![pod("third", 0, None)]);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    r.killer.finish_all();
    let before = r.killer.uids().len();
    r.pods(vec![pod("fourth", 0, None)]);
    let woken = Instant::now();
    waker.wake(WakeKind::Crossing);
    while r.killer.uids().len() == before {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        woken.elapsed() < Duration::from_millis(50),
        "woken pass took {:?}",
        woken.elapsed()
    );
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn cheap_passes_in_between_full_ones() {
    let r = rig(FakeReclaim::default());
    r.set(summary(500 * MI, 50 * 1024 * MI, &[]));
    let mut m = r.manager(settings(memory_100mi()));
    for _ in 0..12 {
        m.synchronize().await;
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    let calls = r.summary.calls.lock().unwrap().clone();
    let full: Vec<usize> = calls
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, Scope::Full))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(full, [0, 10], "full summary every 10 s, cheap ones between");
    assert!(
        calls
            .iter()
            .enumerate()
            .all(|(i, s)| full.contains(&i) || *s == Scope::Node),
        "the passes between read only the node: {calls:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_threshold_met_between_full_passes_reads_the_pods_to_rank_them() {
    let r = rig(FakeReclaim::default());
    r.pods(vec![pod("small", 0, None), pod("hog", 0, None)]);
    r.set(summary(
        500 * MI,
        50 * 1024 * MI,
        &[("small", "small", 10 * MI), ("hog", "hog", 100 * MI)],
    ));
    let mut m = r.manager(settings(memory_100mi()));
    m.synchronize().await; // the first pass is a full one
    tokio::time::advance(Duration::from_secs(1)).await;
    r.set(summary(
        50 * MI,
        50 * 1024 * MI,
        &[("small", "small", 10 * MI), ("hog", "hog", 900 * MI)],
    ));
    r.summary.calls.lock().unwrap().clear();
    assert!(matches!(m.synchronize().await, PassResult::Evicted { .. }));
    assert_eq!(
        *r.summary.calls.lock().unwrap(),
        [Scope::Node, Scope::CpuAndMemory],
        "the node first, the pods only to rank them"
    );
    assert_eq!(r.killer.uids(), ["hog"]);
}

#[tokio::test(start_paused = true)]
async fn disk_pressure_reclaims_node_level_first() {
    let threshold = vec![Threshold {
        min_reclaim: Some(ThresholdValue::Quantity(5 * 1024 * MI as i64)),
        ..hard(
            Signal::NodeFsAvailable,
            ThresholdValue::PartsPerMillion(100_000),
        )
    }];
    // Images free enough (above threshold + minimum reclaim): no pod goes.
    let r = rig(FakeReclaim {
        after_images: Some(summary(500 * MI, 20 * 1024 * MI, &[])),
        ..Default::default()
    });
    r.pods(vec![pod("p", 0, None)]);
    r.set(summary(500 * MI, 5 * 1024 * MI, &[("p", "hog", MI)]));
    let mut m = r.manager(settings(threshold.clone()));
    let pressure = m.pressure();
    assert!(matches!(m.synchronize().await, PassResult::Reclaimed));
    assert_eq!(*r.reclaim.calls.lock().unwrap(), ["containers", "images"]);
    assert!(r.killer.uids().is_empty());
    assert_eq!(
        pressure.conditions(),
        BTreeSet::from([NodeCondition::DiskPressure])
    );
    assert_eq!(
        r.events()[0],
        (
            "node-1".into(),
            "Warning".into(),
            "EvictionThresholdMet".into(),
            "Attempting to reclaim ephemeral-storage".into()
        )
    );

    // Above the threshold but below threshold + minimum reclaim: a pod goes.
    let r = rig(FakeReclaim {
        after_images: Some(summary(500 * MI, 12 * 1024 * MI, &[])),
        ..Default::default()
    });
    r.pods(vec![pod("p", 0, None)]);
    r.set(summary(500 * MI, 5 * 1024 * MI, &[("p", "hog", MI)]));
    let mut m = r.manager(settings(threshold));
    assert!(matches!(m.synchronize().await, PassResult::Evicted { .. }));
    assert_eq!(r.killer.uids(), ["p"]);
}

#[tokio::test(start_paused = true)]
async fn soft_threshold_waits_its_grace_and_caps_the_pod_grace_period() {
    let r = rig(FakeReclaim::default());
    r.pods(vec![pod("p", 0, None)]);
    r.set(summary(50 * MI, 50 * 1024 * MI, &[("p", "hog", 900 * MI)]));
    let soft = Threshold {
        grace_period: Duration::from_secs(30),
        ..hard(
            Signal::MemoryAvailable,
            ThresholdValue::Quantity(100 * MI as i64),
        )
    };
    let mut m = r.manager(settings(vec![soft]));
    let pressure = m.pressure();
    assert!(matches!(m.synchronize().await, PassResult::Nothing));
    assert_eq!(
        pressure.conditions(),
        BTreeSet::from([NodeCondition::MemoryPressure]),
        "condition at once"
    );
    tokio::time::advance(Duration::from_secs(29)).await;
    assert!(matches!(m.synchronize().await, PassResult::Nothing));
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(matches!(m.synchronize().await, PassResult::Evicted { .. }));
    // min(evictionMaxPodGracePeriod 10, the pod's 30).
    assert_eq!(
        r.killer.0.lock().unwrap()[0].grace,
        Some(Duration::from_secs(10))
    );
}

#[tokio::test(start_paused = true)]
async fn conditions_stay_for_the_transition_period() {
    let r = rig(FakeReclaim::default());
    r.set(summary(50 * MI, 50 * 1024 * MI, &[]));
    let mut s = settings(memory_100mi());
    s.pressure_transition_period = Duration::from_secs(30);
    let mut m = r.manager(s);
    let pressure = m.pressure();
    m.synchronize().await;
    assert!(pressure.pressure().memory);
    r.set(summary(500 * MI, 50 * 1024 * MI, &[]));
    tokio::time::advance(Duration::from_secs(29)).await;
    m.synchronize().await;
    assert!(
        pressure.pressure().memory,
        "still within the transition period"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    m.synchronize().await;
    assert!(!pressure.pressure().memory, "cleared after it");
}

#[test]
fn grace_periods_like_evict_pod() {
    let p = pod("p", 0, None);
    let soft = Threshold {
        grace_period: Duration::from_secs(5),
        ..hard(Signal::MemoryAvailable, ThresholdValue::Quantity(1))
    };
    let h = hard(Signal::MemoryAvailable, ThresholdValue::Quantity(1));
    // (what, threshold, max pod grace, want)
    let cases = [
        ("hard: 1s whatever the maximum", h, 100, 1),
        (
            "soft: the maximum when shorter than the pod's 30",
            soft,
            10,
            10,
        ),
        ("soft: the pod's own when shorter", soft, 60, 30),
        (
            "soft, maximum 0: at once (the kubelet's default)",
            soft,
            0,
            0,
        ),
    ];
    for (what, t, max, want) in cases {
        assert_eq!(
            grace_period(&t, &p, max),
            Duration::from_secs(want),
            "{what}"
        );
    }
}

type Verdict = Result<(), (String, String)>;

#[test]
fn admission_under_pressure_like_the_kubelet() {
    use NodeCondition::*;
    let best_effort = pod("be", 0, None);
    let guaranteed = pod("g", 0, Some("64Mi"));
    let mut tolerating = (*pod("t", 0, None)).clone();
    tolerating.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
        key: Some(TAINT_MEMORY_PRESSURE.into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Default::default()
    }]);
    let tolerating = Arc::new(tolerating);
    let critical = static_pod("s", 0);
    let rejected = |c: &str| {
        Err((
            "Evicted".to_string(),
            format!("The node had condition: [{c}]. "),
        ))
    };
    // (what, pod, conditions, result)
    type Case<'a> = (&'a str, &'a Arc<Pod>, Vec<NodeCondition>, Verdict);
    let cases: Vec<Case> = vec![
        ("no pressure", &best_effort, vec![], Ok(())),
        (
            "memory: BestEffort rejected",
            &best_effort,
            vec![MemoryPressure],
            rejected("MemoryPressure"),
        ),
        (
            "memory: Guaranteed admitted",
            &guaranteed,
            vec![MemoryPressure],
            Ok(()),
        ),
        (
            "memory: tolerating BestEffort admitted",
            &tolerating,
            vec![MemoryPressure],
            Ok(()),
        ),
        (
            "disk: everyone rejected",
            &guaranteed,
            vec![DiskPressure],
            rejected("DiskPressure"),
        ),
        (
            "pid: everyone rejected",
            &tolerating,
            vec![PidPressure],
            rejected("PIDPressure"),
        ),
        (
            "memory and disk: Guaranteed rejected",
            &guaranteed,
            vec![MemoryPressure, DiskPressure],
            rejected("MemoryPressure DiskPressure"),
        ),
        (
            "critical: always admitted",
            &critical,
            vec![DiskPressure, PidPressure],
            Ok(()),
        ),
    ];
    for (what, p, conditions, want) in cases {
        let conditions: BTreeSet<NodeCondition> = conditions.into_iter().collect();
        assert_eq!(admit(p, &conditions, false), want, "{what}");
    }
    // evictStaticPods: a static pod is critical only by its priority.
    let mut node_critical = (*static_pod("snc", 0)).clone();
    node_critical.spec.as_mut().unwrap().priority_class_name = Some("system-node-critical".into());
    let node_critical = Arc::new(node_critical);
    let disk = BTreeSet::from([DiskPressure]);
    // (what, pod, evictStaticPods, result)
    let static_cases: Vec<(&str, &Arc<Pod>, bool, Verdict)> = vec![
        ("static, default: critical", &critical, false, Ok(())),
        (
            "static, evictStaticPods: rejected",
            &critical,
            true,
            rejected("DiskPressure"),
        ),
        (
            "static system-node-critical, evictStaticPods: admitted",
            &node_critical,
            true,
            Ok(()),
        ),
        (
            "API pod, evictStaticPods: rejected as before",
            &guaranteed,
            true,
            rejected("DiskPressure"),
        ),
    ];
    for (what, p, evict_static_pods, want) in static_cases {
        assert_eq!(admit(p, &disk, evict_static_pods), want, "{what}");
    }
}

/// A pod with an emptyDir `cache` limited to 1Mi.
fn pod_with_cache(uid: &str, priority: i32) -> Arc<Pod> {
    let mut p = (*pod(uid, priority, None)).clone();
    p.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(serde_json::json!({
        "name": "cache", "emptyDir": {"sizeLimit": "1Mi"}
    }))
    .unwrap()]);
    Arc::new(p)
}

#[tokio::test(start_paused = true)]
async fn local_storage_over_its_limits_goes_at_once_without_a_node_threshold() {
    let r = rig(FakeReclaim::default());
    r.pods(vec![
        pod_with_cache("over-1", 0),
        pod_with_cache("under", 0),
        pod_with_cache("over-2", 1000),
        {
            let mut p = (*pod_with_cache("critical", 0)).clone();
            p.spec.as_mut().unwrap().priority = Some(2_000_001_000);
            Arc::new(p)
        },
    ]);
    // Plenty of memory and disk: no node threshold is met.
    let mut s = summary(
        900 * MI,
        90 * 1024 * MI,
        &[
            ("over-1", "hog", MI),
            ("under", "hog", MI),
            ("over-2", "hog", MI),
            ("critical", "hog", MI),
        ],
    );
    for p in &mut s.pods {
        let used = if p.pod_ref.uid == "under" { MI } else { 2 * MI };
        p.volume_stats = vec![crate::stats::summary::VolumeStats {
            fs: FsStats {
                used_bytes: Some(used),
                ..FsStats::empty(time())
            },
            name: "cache".into(),
            pvc_ref: None,
            volume_health_stats: None,
        }];
    }
    r.set(s);
    let mut m = r.manager(settings(memory_100mi()));
    // The first pass reads the full summary.
    assert!(
        matches!(m.synchronize().await, PassResult::Evicted { ref uid, .. } if uid == "over-1")
    );
    assert_eq!(
        r.killer.uids(),
        ["over-1", "over-2"],
        "every violator in one pass, no critical one"
    );
    let message = "Usage of EmptyDir volume \"cache\" exceeds the limit \"1Mi\". ";
    for k in r.killer.0.lock().unwrap().iter() {
        assert_eq!(k.grace, Some(Duration::from_secs(1)));
        assert_eq!(k.status.reason.as_deref(), Some("Evicted"));
        assert_eq!(k.status.message.as_deref(), Some(message));
        assert!(
            k.status.conditions.is_empty(),
            "no DisruptionTarget, as the kubelet"
        );
    }
    assert_eq!(
        r.events()
            .into_iter()
            .map(|(object, _, reason, _)| (object, reason))
            .collect::<Vec<_>>(),
        [
            ("over-1".to_string(), "Evicted".to_string()),
            ("over-2".to_string(), "Evicted".to_string())
        ]
    );
    assert!(m.pressure().conditions().is_empty(), "no node condition");
}

/// `summary` with the node's memory PSI: `some` avg10 in percent and its stall counter.
fn with_stall(mut s: Summary, some_avg10: f64, some_total_us: u64) -> Summary {
    use crate::stats::summary::{PsiData, PsiStats};
    let memory = s.node.memory.as_mut().unwrap();
    memory.psi = Some(PsiStats {
        some: PsiData {
            total: some_total_us,
            avg10: some_avg10,
            avg60: 0.0,
            avg300: 0.0,
        },
        full: PsiData::default(),
    });
    s
}

/// nodelet's PSI signal: met at or above its percentage (plenty of memory available), ranks
/// like memory, raises MemoryPressure; after an eviction, avg10's lag does not evict another
/// pod until the stall counter since the cleanup shows the pressure is still there.
#[tokio::test(start_paused = true)]
async fn memory_pressure_stall_evicts_like_memory_and_waits_out_avg10s_lag() {
    let r = rig(FakeReclaim::default());
    r.pods(vec![
        pod("guaranteed", 0, Some("64Mi")),
        pod("hog-high", 1000, None),
        pod("hog-low", 0, None),
    ]);
    let pods = [
        ("guaranteed", "hog", 32 * MI),
        ("hog-high", "hog", 300 * MI),
        ("hog-low", "hog", 180 * MI),
    ];
    let psi = hard(
        Signal::MemoryPressureSomeAvg10,
        ThresholdValue::PartsPerMillion(100_000),
    );
    let mut m = r.manager(settings(vec![psi]));
    let pressure = m.pressure();
    // 9.99 %: not met.
    r.set(with_stall(
        summary(800 * MI, 50 * 1024 * MI, &pods),
        9.99,
        0,
    ));
    assert!(matches!(m.synchronize().await, PassResult::Nothing));
    assert!(pressure.conditions().is_empty());
    // 42.5 %: the low-priority hog goes, with nodelet's PSI message.
    r.set(with_stall(
        summary(800 * MI, 50 * 1024 * MI, &pods),
        42.5,
        5_000_000,
    ));
    assert!(
        matches!(m.synchronize().await, PassResult::Evicted { ref uid, .. } if uid == "hog-low")
    );
    let message = "The node was low on resource: memory. Threshold: memory.pressure.some.avg10 at or above 10%, observed: 42.5%. Container hog was using 180Mi, request is 0, has larger consumption of memory. ";
    {
        let kills = r.killer.0.lock().unwrap();
        assert_eq!(kills[0].status.message.as_deref(), Some(message));
        assert_eq!(kills[0].grace, Some(HARD_EVICTION_GRACE));
    }
    assert_eq!(
        pressure.conditions(),
        BTreeSet::from([NodeCondition::MemoryPressure])
    );
    r.killer.finish_all();
    r.pods(vec![
        pod("guaranteed", 0, Some("64Mi")),
        pod("hog-high", 1000, None),
    ]);
    let pods = &pods[..2];
    // avg10 lags at 30 % while the counter barely moves (1 % of the time since the cleanup):
    // no second eviction, for as long as that lasts.
    r.set(with_stall(
        summary(800 * MI, 50 * 1024 * MI, pods),
        30.0,
        5_100_000,
    ));
    let mut total = 5_100_000;
    for _ in 0..10 {
        assert!(matches!(m.synchronize().await, PassResult::Nothing));
        tokio::time::advance(Duration::from_secs(1)).await;
        total += 10_000;
        r.set(with_stall(
            summary(800 * MI, 50 * 1024 * MI, pods),
            30.0,
            total,
        ));
    }
    assert_eq!(r.killer.uids(), vec!["hog-low"]);
    // The stall comes back (60 % of the next 10 s): the next pod goes.
    tokio::time::advance(Duration::from_secs(10)).await;
    r.set(with_stall(
        summary(800 * MI, 50 * 1024 * MI, pods),
        45.0,
        total + 6_000_000,
    ));
    assert!(
        matches!(m.synchronize().await, PassResult::Evicted { ref uid, .. } if uid == "hog-high")
    );
    // Pressure gone: avg10 below the threshold clears the mark; the condition stays for the
    // transition period.
    r.killer.finish_all();
    r.set(with_stall(
        summary(800 * MI, 50 * 1024 * MI, pods),
        1.0,
        total,
    ));
    assert!(matches!(m.synchronize().await, PassResult::Nothing));
    assert_eq!(
        pressure.conditions(),
        BTreeSet::from([NodeCondition::MemoryPressure])
    );
}

/// Ranking's requests are `GetResourceRequestQuantity`'s: the containers' plus the pod's
/// overhead (its RuntimeClass's), for memory and for ephemeral storage.
#[test]
fn candidate_requests_include_the_pods_overhead() {
    let q = |s: &str| K8sQuantity(s.to_string());
    let pod_with = |overhead: &[(&str, &str)]| Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            uid: Some("u".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "a".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(
                        [
                            ("memory".to_string(), q("64Mi")),
                            ("ephemeral-storage".to_string(), q("1Gi")),
                        ]
                        .into(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            overhead: (!overhead.is_empty()).then(|| {
                overhead
                    .iter()
                    .map(|(k, v)| (k.to_string(), q(v)))
                    .collect::<BTreeMap<_, _>>()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    type Overhead<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Overhead, i64, i64); 3] = [
        (&[], 64 << 20, 1 << 30),
        (
            &[("memory", "16Mi"), ("ephemeral-storage", "100Mi")],
            80 << 20,
            (1 << 30) + (100 << 20),
        ),
        (&[("cpu", "1")], 64 << 20, 1 << 30),
    ];
    for (overhead, memory, disk) in cases {
        let p = pod_with(overhead);
        assert_eq!(
            candidate(&p, None, Resource::Memory).request,
            memory,
            "{overhead:?}"
        );
        assert_eq!(
            candidate(&p, None, Resource::EphemeralStorage).request,
            disk,
            "{overhead:?}"
        );
    }
}

/// The log lines (level, message) written on the test's own thread, through a subscriber set
/// for it alone (the paused-clock runtime runs the manager's task on that thread).
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Lines {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), message.0));
    }
}

impl Lines {
    fn install(&self) -> tracing::subscriber::DefaultGuard {
        use tracing_subscriber::layer::SubscriberExt;
        let guard =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(self.clone()));
        // A callsite first hit on another test's thread, with no subscriber there, may have
        // cached "never": ask every callsite again now that this one is in place.
        tracing::callsite::rebuild_interest_cache();
        guard
    }
    fn count(&self, level: tracing::Level, message: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(l, m)| *l == level && m == message)
            .count()
    }
}

impl FakeSummary {
    /// Passes so far: each reads the node's or the full summary first (the pods' CPU and
    /// memory are read only to rank them).
    fn passes(&self) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|s| **s != Scope::CpuAndMemory)
            .count()
    }
}

/// Issue 37: a crossing that lasts with no pod the manager may evict (a critical pod alone),
/// and wake-ups all the while (`memory.events` changes at up to 100 a second, the memory check
/// every 100 ms, seeing memory come and go around the floor): about one pass a second, not one
/// per wake-up, and the finding logged once, not on every pass.
#[tokio::test(start_paused = true)]
async fn a_lasting_crossing_with_nothing_to_evict_is_no_pass_storm() {
    let lines = Lines::default();
    let _log = lines.install();
    let r = rig(FakeReclaim::default());
    r.pods(vec![pod("critical", 2_000_000_000, None)]);
    let pressed = summary(50 * MI, 50 * 1024 * MI, &[("critical", "hog", 500 * MI)]);
    r.set(pressed.clone());
    let m = r.manager(settings(memory_100mi()));
    let waker = m.waker();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(m.run(cancel.clone()));
    // The crossing wakes the manager: one pass at once, which finds no pod.
    waker.wake(WakeKind::Crossing);
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(r.summary.passes(), 1);
    // Hints every 10 ms, and with `crossings` one every 100 ms.
    let storm = |seconds: u64, crossings: bool| {
        let waker = waker.clone();
        async move {
            for i in 0..seconds * 100 {
                waker.wake(WakeKind::Hint);
                if crossings && i % 10 == 0 {
                    waker.wake(WakeKind::Crossing);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    storm(5, true).await;
    let passes = r.summary.passes();
    assert!(
        passes <= 1 + 5,
        "{passes} passes in 5 s of 550 wake-ups, want about one a second"
    );
    assert!(r.killer.uids().is_empty());
    let warn = tracing::Level::WARN;
    assert_eq!(
        lines.count(warn, "eviction manager: attempting to reclaim"),
        1
    );
    assert_eq!(
        lines.count(warn, "eviction manager: no pod may be evicted"),
        1
    );
    // Memory is back: the next periodic pass sees it, and says so once.
    let mut relieved = pressed;
    relieved.node.memory = Some(memory(500 * MI, 524 * MI));
    r.set(relieved);
    storm(3, false).await;
    assert!(r.summary.passes() <= passes + 3);
    // (The INFO line that says the finding is over is `report`'s, table-tested: counting it
    // here is at the mercy of tracing's global level hint, which tests on other threads that
    // install subscribers of their own move.)
    assert_eq!(
        lines.count(warn, "eviction manager: no pod may be evicted"),
        1
    );
    cancel.cancel();
    task.await.unwrap();
}

/// The fast reaction stays: on a node with plenty of memory, hints (one pod at its own
/// `memory.max` moves `kubepods`' `memory.events`) wait for the periodic pass, but a fresh
/// crossing from the memory check starts a pass at once, right after one that found nothing;
/// after an eviction's cleanup, a hint starts the next pass at once too.
#[tokio::test(start_paused = true)]
async fn hints_wait_for_the_period_but_a_fresh_crossing_does_not() {
    let r = rig(FakeReclaim::default());
    r.pods(vec![pod("hog", 0, None), pod("other", 0, None)]);
    r.set(summary(
        500 * MI,
        50 * 1024 * MI,
        &[("hog", "hog", 100 * MI), ("other", "hog", 50 * MI)],
    ));
    let m = r.manager(settings(memory_100mi()));
    let waker = m.waker();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(m.run(cancel.clone()));
    for _ in 0..300 {
        waker.wake(WakeKind::Hint);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let passes = r.summary.passes();
    assert!(passes <= 4, "{passes} passes in 3 s of 300 hints");
    // A pass just found nothing to do (hints keep it company); the crossing comes now.
    tokio::time::sleep(Duration::from_millis(5)).await;
    r.set(summary(
        50 * MI,
        50 * 1024 * MI,
        &[("hog", "hog", 900 * MI), ("other", "hog", 50 * MI)],
    ));
    let crossed = Instant::now();
    waker.wake(WakeKind::Crossing);
    while r.killer.uids().is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        crossed.elapsed() <= Duration::from_millis(2),
        "crossing → kill took {:?}",
        crossed.elapsed()
    );
    assert_eq!(r.killer.uids(), ["hog"]);
    // The pass acted: once its pod is cleaned up, a hint (memory still below) goes at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    r.pods(vec![pod("other", 0, None)]);
    r.killer.finish_all();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let hinted = Instant::now();
    waker.wake(WakeKind::Hint);
    while r.killer.uids().len() < 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(hinted.elapsed() <= Duration::from_millis(2));
    assert_eq!(r.killer.uids(), ["hog", "other"]);
    cancel.cancel();
    task.await.unwrap();
}

#[test]
fn wake_ups_start_a_pass_at_once_only_when_they_can_be_news() {
    let ended = Instant::now();
    let s = Duration::from_secs;
    let period = s(1);
    // (what, acted, memory met, crossing from, hint from) — `None`: only the periodic pass.
    type Case = (&'static str, bool, bool, Option<Duration>, Option<Duration>);
    let cases: [Case; 4] = [
        (
            "quiet: a crossing at once, hints wait",
            false,
            false,
            Some(s(0)),
            None,
        ),
        (
            "nothing to do under a memory crossing: both wait",
            false,
            true,
            None,
            None,
        ),
        (
            "evicted or reclaimed: both at once",
            true,
            false,
            Some(s(0)),
            Some(s(0)),
        ),
        (
            "evicted, memory still met: both at once",
            true,
            true,
            Some(s(0)),
            Some(s(0)),
        ),
    ];
    for (what, acted, memory_met, crossing, hint) in cases {
        let schedule = next_pass(
            LastPass {
                ended,
                acted,
                memory_met,
            },
            period,
        );
        assert_eq!(schedule.due, ended + period, "{what}");
        assert_eq!(
            schedule.wake_from(WakeKind::Crossing),
            crossing.map(|d| ended + d),
            "{what}: crossing"
        );
        assert_eq!(
            schedule.wake_from(WakeKind::Hint),
            hint.map(|d| ended + d),
            "{what}: hint"
        );
    }
    // A check period of zero must not make a loop that wakes itself.
    let zero = next_pass(
        LastPass {
            ended,
            acted: false,
            memory_met: true,
        },
        Duration::ZERO,
    );
    assert_eq!(zero.due, ended + MIN_PASS_SPACING);
}

#[test]
fn a_finding_is_logged_when_it_appears_changes_or_clears() {
    use Finding::*;
    let mem = Signal::MemoryAvailable;
    let pid = Signal::PidAvailable;
    // (last, now, `attempting to reclaim` logged when acting now, report at the end)
    let cases = [
        (Quiet, Quiet, false, None),
        (Quiet, Acting(mem), true, None),
        (Quiet, NoPod(mem), true, Some(Report::NoPod(mem))),
        (Acting(mem), Acting(mem), false, None),
        (Acting(mem), Acting(pid), true, None),
        (Acting(mem), NoPod(mem), false, Some(Report::NoPod(mem))),
        (NoPod(mem), NoPod(mem), false, None),
        (NoPod(mem), NoPod(pid), true, Some(Report::NoPod(pid))),
        (NoPod(mem), Acting(mem), false, None),
        (NoPod(mem), Quiet, false, Some(Report::Over(mem))),
        (Acting(mem), Quiet, false, Some(Report::Over(mem))),
    ];
    for (last, now, attempt, want) in cases {
        assert_eq!(report(last, now), want, "{last:?} → {now:?}");
        let announced = now
            .signal()
            .is_some_and(|signal| announces_attempt(last, signal));
        assert_eq!(announced, attempt, "{last:?} → {now:?}: attempting");
    }
}
