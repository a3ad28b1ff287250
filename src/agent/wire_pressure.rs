//! The pressure wing: what keeps the node healthy — image and container garbage collection,
//! the Summary provider and the status page's history of its readings, the eviction manager
//! with its wake-ups, log rotation, and the node shutdown manager. It returns what the node
//! status and admission read of it (the pressure and shutdown views, as admit handlers too).

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::wire_pods::PodsWing;
use super::{eviction, settings, wakeups, HostPaths, RuntimeServices};
use crate::clock::Clock;
use crate::config::Config;
use crate::events::EventRecorder;
use crate::eviction::manager::{EvictionManager, PressureView};
use crate::gc::containers::ContainerGc;
use crate::gc::images::ImageGc;
use crate::gc::CriGc;
use crate::lifecycle::admission::PodAdmitHandler;
use crate::lifecycle::shutdown::ShutdownView;
use crate::logs::rotation::{CriLogs, LogRotator, RotationPolicy};
use crate::pod::workers::PodWorkers;
use crate::stats::machine::NodeInfo;
use crate::stats::SummarySource;

/// What the pressure wing builds.
pub(super) struct PressureWing {
    /// The eviction manager's node conditions (never any pressure without one).
    pub pressure: PressureView,
    /// The node shutdown manager's mark (never shutting down without one).
    pub shutdown: ShutdownView,
    pub image_gc: Arc<ImageGc>,
    /// `/stats/summary` and eviction's readings (with a stats-capable runtime).
    pub summary: Option<Arc<dyn SummarySource>>,
    /// The status page's last hour, kept from the readings the eviction manager makes.
    pub history: Option<Arc<crate::server::history::History>>,
    /// Started by [`spawn_housekeeping`] once the pods on the node were adopted.
    pub housekeeping: Housekeeping,
}

impl PressureWing {
    /// Admission under node pressure, then under node shutdown (the kubelet's order).
    pub fn admit_handlers(&self) -> Vec<Arc<dyn PodAdmitHandler>> {
        vec![
            Arc::new(self.pressure.clone()),
            Arc::new(self.shutdown.clone()),
        ]
    }
}

/// The housekeeping parts built before the pod manager runs (eviction needs them).
pub(super) struct Housekeeping {
    cri: Arc<CriGc>,
    image_gc: Arc<ImageGc>,
    eviction: Option<EvictionManager>,
    /// Where a failed container GC run is told (`ContainerGCFailed` on the node).
    events: EventRecorder,
    userns: Option<Arc<crate::userns::UsernsManager>>,
    csi_volumes: Option<Arc<crate::volume::csi::CsiVolumes>>,
    trash: Arc<crate::volume::trash::Trash>,
}

/// Builds the pressure wing; starts the eviction manager's wake-ups and the node shutdown
/// manager in `tasks` (the eviction and GC loops wait for [`spawn_housekeeping`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn wire(
    cfg: &Config,
    paths: &HostPaths,
    rt: &RuntimeServices,
    node: &NodeInfo,
    pods: &PodsWing,
    recorder: &EventRecorder,
    clock: Clock,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) -> PressureWing {
    let cri = Arc::new(CriGc {
        runtime: rt.runtime.clone(),
        images: rt.images.clone(),
        stats: rt.stats.clone(),
        housekeeping: rt.housekeeping.clone(),
        node_name: cfg.node_name.clone(),
    });
    let image_gc = Arc::new(ImageGc::new(
        cri.clone(),
        settings::image_gc(cfg),
        recorder.clone(),
        cfg.node_name.clone(),
    ));
    let summary = summary_provider(cfg, paths, rt, pods, node, clock, tasks, cancel);
    let history = summary.as_ref().map(|_| {
        Arc::new(crate::server::history::History::new(
            node.memory_capacity(),
            crate::server::history::memory_thresholds(
                &cfg.eviction.thresholds,
                node.memory_capacity(),
            ),
        ))
    });
    let eviction_summary = summary
        .clone()
        .zip(history.clone())
        .map(|(inner, history)| {
            let status = pods.status.clone();
            Arc::new(crate::server::history::Recording {
                inner,
                history,
                pods: Arc::new(move || status.pods()),
                clock,
            }) as Arc<dyn SummarySource>
        });
    let eviction = eviction_summary.map(|summary| {
        let mut reclaim_gc = container_gc(
            cfg,
            &cri,
            &pods.workers,
            clock,
            pods.userns.clone(),
            Some(pods.csi_volumes.clone()),
            pods.trash.clone(),
        );
        reclaim_gc.policy.max_per_pod_container = 0;
        EvictionManager::new(
            settings::eviction(cfg),
            summary,
            Arc::new(admitted_pods(pods)),
            Arc::new(pods.workers.clone()),
            Arc::new(eviction::GcReclaim {
                containers: reclaim_gc,
                images: image_gc.clone(),
            }),
            recorder.clone(),
        )
    });
    let pressure = eviction
        .as_ref()
        .map_or_else(PressureView::none, EvictionManager::pressure);
    match &eviction {
        Some(eviction) => wakeups::spawn(
            cfg,
            paths,
            &settings::eviction(cfg).thresholds,
            node.memory_capacity(),
            eviction.waker(),
            tasks,
            cancel,
        ),
        None => {
            tracing::warn!("the runtime offers no stats calls: node-pressure eviction is off")
        }
    }
    let shutdown = match settings::node_shutdown(cfg) {
        Some(settings) => {
            let shutdown = crate::nodeshutdown::manager::ShutdownManager::new(
                settings,
                crate::nodeshutdown::manager::system_bus(),
                Arc::new(admitted_pods(pods)),
                Arc::new(pods.workers.clone()),
                recorder.clone(),
                clock,
            );
            let view = shutdown.view();
            tasks.spawn(shutdown.run(cancel.clone()));
            view
        }
        None => ShutdownView::none(),
    };
    PressureWing {
        pressure,
        shutdown,
        image_gc: image_gc.clone(),
        summary,
        history,
        housekeeping: Housekeeping {
            cri,
            image_gc,
            eviction,
            events: recorder.clone(),
            userns: pods.userns.clone(),
            csi_volumes: Some(pods.csi_volumes.clone()),
            trash: pods.trash.clone(),
        },
    }
}

/// The kubelet's `GetActivePods` over the pod manager, the status manager and the workers.
fn admitted_pods(pods: &PodsWing) -> eviction::AdmittedPods {
    eviction::AdmittedPods {
        pods: pods.manager.admitted_pods(),
        status: pods.status.clone(),
        workers: pods.workers.clone(),
    }
}

/// The Summary provider over the runtime's stats calls and the host's cgroups and `/proc`
/// (`None` without a stats-capable runtime); `/stats/summary` and eviction read it.
#[allow(clippy::too_many_arguments)]
fn summary_provider(
    cfg: &Config,
    paths: &HostPaths,
    runtime: &RuntimeServices,
    pods_wing: &PodsWing,
    node: &NodeInfo,
    clock: Clock,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) -> Option<Arc<dyn SummarySource>> {
    let stats = runtime.stats.clone()?;
    let status = pods_wing.status.clone();
    let pods: crate::stats::provider::PodsFn = Arc::new(move || status.pods());
    let settings = settings::stats(cfg, &paths.cgroup, &paths.proc);
    // CSI volumes' usage from their drivers, asked in a task of its own (gRPC, not files).
    let csi = Arc::new(crate::stats::csi_volumes::CsiVolumeStats::new(
        settings.volume_stats_period,
        cfg.feature_enabled(crate::config::kubelet_fields::CSI_VOLUME_HEALTH),
    ));
    let volumes = &pods_wing.csi_volumes;
    let sources = crate::stats::csi_volumes::CsiStatsSources {
        root_dir: volumes.root_dir().to_path_buf(),
        mountinfo: volumes.mountinfo().to_path_buf(),
        pods: pods.clone(),
        drivers: volumes.drivers().clone(),
        objects: volumes.objects(),
        clock,
    };
    tasks.spawn(csi.clone().run(sources, cancel.clone()));
    Some(Arc::new(
        crate::stats::SummaryProvider::new(settings, runtime.runtime.clone(), stats, pods, clock)
            .with_machine(node.machine.clone())
            .with_csi_volumes(csi),
    ))
}

/// Container GC over the CRI with the kubelet's default policy.
fn container_gc(
    cfg: &Config,
    cri: &Arc<CriGc>,
    workers: &PodWorkers,
    clock: Clock,
    userns: Option<Arc<crate::userns::UsernsManager>>,
    csi_volumes: Option<Arc<crate::volume::csi::CsiVolumes>>,
    trash: Arc<crate::volume::trash::Trash>,
) -> ContainerGc {
    ContainerGc {
        userns,
        csi_volumes,
        trash,
        runtime: cri.clone(),
        live: Arc::new(workers.clone()),
        policy: Default::default(),
        clock,
        pod_logs_dir: cfg.pod_logs_dir.clone(),
        container_log_links_dir: cfg.container_log_links_dir.clone(),
        pods_dir: cfg.root_dir.join("pods"),
        root_dir: cfg.root_dir.clone(),
    }
}

/// Starts image GC, container GC and the eviction manager once the pods already on the node
/// were adopted (so that their containers are not taken for a gone pod's, and eviction ranks
/// every pod), and log rotation at once.
#[allow(clippy::too_many_arguments)]
pub(super) fn spawn_housekeeping(
    cfg: &Config,
    rt: &RuntimeServices,
    parts: Housekeeping,
    workers: &PodWorkers,
    clock: Clock,
    ready: &watch::Receiver<bool>,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) {
    let Housekeeping {
        cri,
        image_gc,
        eviction,
        events,
        userns,
        csi_volumes,
        trash,
    } = parts;
    let container_gc = container_gc(cfg, &cri, workers, clock, userns, csi_volumes, trash);
    let node_name = cfg.node_name.clone();
    let mut ready = ready.clone();
    let (gc, gc_cancel, gc_tasks) = (image_gc, cancel.clone(), tasks.clone());
    tasks.spawn(async move {
        tokio::select! {
            r = ready.wait_for(|r| *r) => if r.is_err() { return },
            _ = gc_cancel.cancelled() => return,
        }
        gc_tasks.spawn(gc.run(gc_cancel.clone()));
        if let Some(eviction) = eviction {
            gc_tasks.spawn(eviction.run(gc_cancel.clone()));
        }
        gc_tasks.spawn(container_gc.run(gc_cancel, events, node_name));
    });
    if let Some(h) = &rt.housekeeping {
        let rotator = LogRotator {
            runtime: Arc::new(CriLogs::new(
                rt.runtime.clone(),
                h.clone(),
                cfg.node_name.clone(),
            )),
            policy: RotationPolicy {
                max_size: cfg.container_log_max_size,
                max_files: cfg.container_log_max_files as usize,
            },
            workers: cfg.container_log_max_workers as usize,
            interval: cfg.container_log_monitor_interval,
            clock,
        };
        tasks.spawn(rotator.run(cancel.clone()));
    }
}
