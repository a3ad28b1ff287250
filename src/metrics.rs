//! Prometheus metrics, served as text on `GET /metrics`.
//!
//! One process-wide registry: metrics are write-only side channels and threading a handle through
//! every component would add noise without making anything more testable. Names mirror the
//! kubelet's (`kubelet_runtime_operations_duration_seconds` → `nodelet_runtime_operations_duration_seconds`)
//! so existing dashboards translate by prefix.

use std::sync::atomic::AtomicU64;
use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    /// `Liveness`, `Readiness` or `Startup`.
    pub probe_type: String,
    /// `successful`, `failed` or `unknown` (the kubelet's values).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodLabels {
    pub namespace: String,
    pub pod: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WakeLabels {
    /// `memory_check`, `psi`, `memory_events` (`eviction::notify::WakeSource`).
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignalLabels {
    /// `memory.available`, `nodefs.available`, ... (the kubelet's label).
    pub eviction_signal: String,
}

/// The labels of the kubelet's `csi_operations_seconds` (`pkg/volume/util/metrics.go`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CsiOperationLabels {
    pub driver_name: String,
    /// The gRPC full method, `/csi.v1.Node/NodeGetInfo`.
    pub method_name: String,
    /// gRPC-Go's name of the status code: `OK`, `Unavailable`, `DeadlineExceeded`, ...
    pub grpc_status_code: String,
    /// `"false"`: nodelet migrates no in-tree plugin to CSI.
    pub migrated: String,
}

/// The kubelet's buckets of `csi_operations_seconds`.
pub const CSI_OPERATION_BUCKETS: [f64; 13] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0,
];

pub struct Metrics {
    /// CSI calls to the drivers, by driver, method and gRPC status (the kubelet's
    /// `csi_operations_seconds`).
    pub csi_operations_seconds: Family<CsiOperationLabels, Histogram>,
    pub runtime_operations_duration_seconds: Family<OperationLabels, Histogram>,
    pub runtime_operations_errors_total: Family<OperationLabels, Counter>,
    pub pleg_events_total: Family<EventLabels, Counter>,
    pub pleg_relist_duration_seconds: Histogram,
    pub pod_worker_duration_seconds: Histogram,
    /// Probe attempts by kind and result (the kubelet's `prober_probe_total`, without its
    /// per-container labels).
    pub prober_probe_total: Family<ProbeLabels, Counter>,
    pub started_containers_total: Counter,
    pub started_pods_total: Counter,
    pub pod_start_duration_seconds: Histogram,
    pub running_pods: Gauge,
    pub running_containers: Gauge,
    pub static_pod_manifest_errors: Gauge,
    /// Panics of pod workers' effects (a sync, a termination, a reclaim): each is logged and
    /// the worker carries on with fresh memory.
    pub pod_worker_panics_total: Counter,
    /// Polls that kept an async runtime worker for `watchdog::SLOW_POLL` or longer.
    pub runtime_stalls_total: Counter,
    /// The longest poll of a task on an async runtime worker since the start.
    pub runtime_longest_poll_seconds: Gauge<f64, AtomicU64>,
    /// The most CPU time one poll used on its worker thread since the start (the work the task
    /// itself did; time the thread was preempted or waited in the kernel is not in it).
    pub runtime_longest_poll_cpu_seconds: Gauge<f64, AtomicU64>,
    /// Cluster mode: status PATCHes per pod (the series goes when the pod leaves the node).
    pub pod_status_writes_total: Family<PodLabels, Counter>,
    /// Cluster mode: periodic comparisons of every cached pod status with the API server.
    pub pod_status_reconciles_total: Counter,
    /// Cluster mode: pods whose last status write left a difference on the server.
    pub pod_status_nonconverging: Gauge,
    /// Cluster mode: PATCHes of the Node's status.
    pub node_status_writes_total: Counter,
    /// Cluster mode: node status computations compared with the API server (writes or not).
    pub node_status_updates_total: Counter,
    /// Cluster mode: node status checks that read the watched Node instead of a GET.
    pub node_reads_from_watch_total: Counter,
    /// Cluster mode: Lease creations and renewals.
    pub node_lease_writes_total: Counter,
    /// Image garbage collection runs.
    pub image_gc_runs: Counter,
    /// Images removed by image garbage collection.
    pub image_gc_removed: Counter,
    /// Container garbage collection runs.
    pub container_gc_runs: Counter,
    /// Dead containers, sandboxes and pod directories removed by container garbage collection.
    pub container_gc_removed: Counter,
    /// Container log files rotated.
    pub log_rotations: Counter,
    /// Pods evicted, by the signal whose threshold was met (the kubelet's `evictions`).
    pub evictions_total: Family<SignalLabels, Counter>,
    /// Passes of the eviction manager (a sign that it runs).
    pub eviction_passes_total: Counter,
    /// The last reading of each eviction signal: what is available (bytes, inodes, PIDs); for
    /// the PSI signals the stall share in millionths (`memory.pressure.some.avg10` 12.5 % →
    /// 125000).
    pub eviction_signal_available: Family<SignalLabels, Gauge>,
    /// From the pass that first saw a threshold met to the kill of the pod evicted for it.
    pub eviction_crossing_to_kill_seconds: Histogram,
    /// Wake-ups of the eviction manager between its passes, by source.
    pub eviction_wakeups_total: Family<WakeLabels, Counter>,
    /// When the last graceful node shutdown started / ended, in seconds since the epoch (the
    /// kubelet's `graceful_shutdown_start_time_seconds` / `..._end_time_seconds`); set when
    /// it happens and again at the next start from the state file, unset (0) before any.
    pub graceful_shutdown_start_time_seconds: Gauge<f64, AtomicU64>,
    pub graceful_shutdown_end_time_seconds: Gauge<f64, AtomicU64>,
    registry: Registry,
}

fn seconds_buckets() -> impl Iterator<Item = f64> {
    // 1 ms … ~65 s
    exponential_buckets(0.001, 2.0, 17)
}

impl Metrics {
    fn new() -> Self {
        let runtime_operations_duration_seconds =
            Family::<OperationLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(seconds_buckets())
            });
        let runtime_operations_errors_total = Family::<OperationLabels, Counter>::default();
        let pleg_events_total = Family::<EventLabels, Counter>::default();
        let pleg_relist_duration_seconds = Histogram::new(seconds_buckets());
        let pod_worker_duration_seconds = Histogram::new(seconds_buckets());
        let prober_probe_total = Family::<ProbeLabels, Counter>::default();
        let started_containers_total = Counter::default();
        let started_pods_total = Counter::default();
        let pod_start_duration_seconds = Histogram::new(seconds_buckets());
        let running_pods = Gauge::default();
        let running_containers = Gauge::default();
        let static_pod_manifest_errors = Gauge::default();
        let pod_worker_panics_total = Counter::default();
        let runtime_stalls_total = Counter::default();
        let runtime_longest_poll_seconds = Gauge::<f64, AtomicU64>::default();
        let runtime_longest_poll_cpu_seconds = Gauge::<f64, AtomicU64>::default();
        let pod_status_writes_total = Family::<PodLabels, Counter>::default();
        let pod_status_reconciles_total = Counter::default();
        let pod_status_nonconverging = Gauge::default();
        let node_status_writes_total = Counter::default();
        let node_status_updates_total = Counter::default();
        let node_reads_from_watch_total = Counter::default();
        let node_lease_writes_total = Counter::default();
        let image_gc_runs = Counter::default();
        let image_gc_removed = Counter::default();
        let container_gc_runs = Counter::default();
        let container_gc_removed = Counter::default();
        let log_rotations = Counter::default();
        let evictions_total = Family::<SignalLabels, Counter>::default();
        let eviction_passes_total = Counter::default();
        let eviction_signal_available = Family::<SignalLabels, Gauge>::default();
        let eviction_crossing_to_kill_seconds = Histogram::new(seconds_buckets());
        let eviction_wakeups_total = Family::<WakeLabels, Counter>::default();
        let graceful_shutdown_start_time_seconds = Gauge::<f64, AtomicU64>::default();
        let graceful_shutdown_end_time_seconds = Gauge::<f64, AtomicU64>::default();

        let csi_operations_seconds =
            Family::<CsiOperationLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(CSI_OPERATION_BUCKETS)
            });

        let mut registry = Registry::with_prefix("nodelet");
        registry.register(
            "csi_operations_seconds",
            "Container Storage Interface operation duration with gRPC error code status total",
            csi_operations_seconds.clone(),
        );
        registry.register(
            "runtime_operations_duration_seconds",
            "Duration of CRI operations by operation type",
            runtime_operations_duration_seconds.clone(),
        );
        registry.register(
            "runtime_operations_errors",
            "CRI operations that returned an error, by operation type",
            runtime_operations_errors_total.clone(),
        );
        registry.register(
            "pleg_events",
            "Pod lifecycle events by the source that noticed them (event or relist)",
            pleg_events_total.clone(),
        );
        registry.register(
            "pleg_relist_duration_seconds",
            "Duration of one PLEG relist",
            pleg_relist_duration_seconds.clone(),
        );
        registry.register(
            "prober_probe",
            "Probe attempts by probe type and result",
            prober_probe_total.clone(),
        );
        registry.register(
            "pod_worker_duration_seconds",
            "Duration of one pod sync",
            pod_worker_duration_seconds.clone(),
        );
        registry.register(
            "started_containers",
            "Containers started",
            started_containers_total.clone(),
        );
        registry.register(
            "started_pods",
            "Pod sandboxes started",
            started_pods_total.clone(),
        );
        registry.register(
            "pod_start_duration_seconds",
            "Time from a pod first seen by nodelet to all of its containers running",
            pod_start_duration_seconds.clone(),
        );
        registry.register(
            "running_pods",
            "Pods with a ready sandbox",
            running_pods.clone(),
        );
        registry.register(
            "running_containers",
            "Containers in the running state",
            running_containers.clone(),
        );
        registry.register(
            "static_pod_manifest_errors",
            "Static pod manifests that failed to parse or validate at the last scan",
            static_pod_manifest_errors.clone(),
        );
        registry.register(
            "pod_worker_panics",
            "Panics in pod workers' syncs and terminations; the worker carried on",
            pod_worker_panics_total.clone(),
        );
        registry.register(
            "runtime_stalls",
            "Polls of a task that kept an async runtime worker for 100 ms or longer (the watchdog; each is logged with the task's spawn site)",
            runtime_stalls_total.clone(),
        );
        registry.register(
            "runtime_longest_poll_seconds",
            "The longest poll of a task on an async runtime worker since the start",
            runtime_longest_poll_seconds.clone(),
        );
        registry.register(
            "runtime_longest_poll_cpu_seconds",
            "The most CPU time one poll of a task used on an async runtime worker since the start (its own work: preemption and waits in the kernel are not counted)",
            runtime_longest_poll_cpu_seconds.clone(),
        );
        registry.register(
            "pod_status_writes",
            "Pod status PATCHes sent to the API server, by pod",
            pod_status_writes_total.clone(),
        );
        registry.register(
            "pod_status_reconciles",
            "Periodic comparisons of every cached pod status with the API server",
            pod_status_reconciles_total.clone(),
        );
        registry.register(
            "pod_status_nonconverging",
            "Pods whose last status write did not make the API server's copy equal to it",
            pod_status_nonconverging.clone(),
        );
        registry.register(
            "node_status_writes",
            "Node status PATCHes sent to the API server",
            node_status_writes_total.clone(),
        );
        registry.register(
            "node_status_updates",
            "Node status computations compared with the API server, written or not",
            node_status_updates_total.clone(),
        );
        registry.register(
            "node_reads_from_watch",
            "Node status checks that read the watched Node instead of a GET",
            node_reads_from_watch_total.clone(),
        );
        registry.register(
            "node_lease_writes",
            "Node Lease creations and renewals",
            node_lease_writes_total.clone(),
        );
        registry.register(
            "image_gc_runs",
            "Image garbage collection runs",
            image_gc_runs.clone(),
        );
        registry.register(
            "image_gc_removed_images",
            "Images removed by image garbage collection",
            image_gc_removed.clone(),
        );
        registry.register(
            "container_gc_runs",
            "Container garbage collection runs",
            container_gc_runs.clone(),
        );
        registry.register(
            "container_gc_removed",
            "Dead containers, sandboxes and pod directories removed by container garbage collection",
            container_gc_removed.clone(),
        );
        registry.register(
            "container_log_rotations",
            "Container log files rotated",
            log_rotations.clone(),
        );
        registry.register(
            "evictions",
            "Pods evicted by the eviction manager, by eviction signal",
            evictions_total.clone(),
        );
        registry.register(
            "eviction_passes",
            "Passes of the eviction manager",
            eviction_passes_total.clone(),
        );
        registry.register(
            "eviction_signal_available",
            "Last reading of each eviction signal: the amount available",
            eviction_signal_available.clone(),
        );
        registry.register(
            "eviction_crossing_to_kill_seconds",
            "Time from the eviction pass that first saw a threshold met to the kill of the pod evicted for it",
            eviction_crossing_to_kill_seconds.clone(),
        );
        registry.register(
            "eviction_wakeups",
            "Wake-ups of the eviction manager between its passes (memory check, PSI trigger, memory.events), by source",
            eviction_wakeups_total.clone(),
        );
        registry.register(
            "graceful_shutdown_start_time_seconds",
            "Last graceful shutdown start time since unix epoch in seconds",
            graceful_shutdown_start_time_seconds.clone(),
        );
        registry.register(
            "graceful_shutdown_end_time_seconds",
            "Last graceful shutdown end time since unix epoch in seconds",
            graceful_shutdown_end_time_seconds.clone(),
        );
        Metrics {
            csi_operations_seconds,
            graceful_shutdown_start_time_seconds,
            graceful_shutdown_end_time_seconds,
            evictions_total,
            eviction_passes_total,
            eviction_signal_available,
            eviction_crossing_to_kill_seconds,
            eviction_wakeups_total,
            image_gc_runs,
            image_gc_removed,
            container_gc_runs,
            container_gc_removed,
            log_rotations,
            runtime_operations_duration_seconds,
            runtime_operations_errors_total,
            pleg_events_total,
            pleg_relist_duration_seconds,
            pod_worker_duration_seconds,
            prober_probe_total,
            started_containers_total,
            started_pods_total,
            pod_start_duration_seconds,
            running_pods,
            running_containers,
            static_pod_manifest_errors,
            pod_worker_panics_total,
            runtime_stalls_total,
            runtime_longest_poll_seconds,
            runtime_longest_poll_cpu_seconds,
            pod_status_writes_total,
            pod_status_reconciles_total,
            pod_status_nonconverging,
            node_status_writes_total,
            node_status_updates_total,
            node_reads_from_watch_total,
            node_lease_writes_total,
            registry,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    pub fn operation(op: &str) -> OperationLabels {
        OperationLabels {
            operation_type: op.to_string(),
        }
    }
}

/// The labels of the kubelet's `prober_probe_total` (`pkg/kubelet/prober/prober_manager.go`),
/// in name order as the kubelet's registry writes them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeResultLabels {
    pub container: String,
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    /// `Liveness`, `Readiness` or `Startup`.
    pub probe_type: String,
    /// `successful`, `failed` or `unknown`.
    pub result: String,
}

/// The labels of the kubelet's `prober_probe_duration_seconds` (no result, no pod UID).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeDurationLabels {
    pub container: String,
    pub namespace: String,
    pub pod: String,
    pub probe_type: String,
}

/// `/metrics/probes`: the kubelet's prober metrics, per container, in a registry of their own
/// (the kubelet serves them apart from `/metrics`, without a prefix). A probe worker removes
/// its series when it stops, as the kubelet's worker does, so they do not outlive the container.
pub struct ProbeMetrics {
    pub probe_total: Family<ProbeResultLabels, Counter>,
    pub probe_duration_seconds: Family<ProbeDurationLabels, Histogram>,
    registry: Registry,
}

/// prometheus' `DefBuckets`, which the kubelet's `ProberDuration` keeps.
pub const PROBE_DURATION_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The content type of prometheus-client's text (OpenMetrics 1.0: `# EOF` at the end and a
/// counter's family named without its `_total`).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl ProbeMetrics {
    fn new() -> Self {
        let probe_total = Family::<ProbeResultLabels, Counter>::default();
        let probe_duration_seconds =
            Family::<ProbeDurationLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(PROBE_DURATION_BUCKETS)
            });
        let mut registry = Registry::default();
        // The encoder appends `_total` to a counter's samples, and a period to each help
        // text: the kubelet's texts end with one.
        registry.register(
            "prober_probe",
            "Cumulative number of a liveness, readiness or startup probe for a container by result",
            probe_total.clone(),
        );
        registry.register(
            "prober_probe_duration_seconds",
            "Duration in seconds for a probe response",
            probe_duration_seconds.clone(),
        );
        ProbeMetrics {
            probe_total,
            probe_duration_seconds,
            registry,
        }
    }

    /// The text of `/metrics/probes` (OpenMetrics, [`OPENMETRICS_CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

pub fn probe_metrics() -> &'static ProbeMetrics {
    static PROBES: LazyLock<ProbeMetrics> = LazyLock::new(ProbeMetrics::new);
    &PROBES
}

pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}
