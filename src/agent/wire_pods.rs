//! The pods wing: what runs the pods — the status manager, the prober, image pulls, the pod
//! syncer and the pod workers; the PLEG (relist, and containerd's task events when the runtime
//! offers them) and the runtime's health; the pod sources (static pod directory, the API
//! server's pods in cluster mode) and the pod manager. The manager is returned unstarted:
//! the pressure and cluster wings add their admission first.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::wire_cluster::ClusterWing;
use super::wire_runtime::RuntimeWing;
use super::StartError;
use crate::cgroup::node::NodeCgroups;
use crate::cgroup::PodCgroupSettings;
use crate::clock::Clock;
use crate::config::Config;
use crate::cri::health::RuntimeHealth;
use crate::events::{container_field_path, EventRecorder, EventType, ObjectRef};
use crate::pleg::{EventKind, Pleg, PodLifecycleEvent};
use crate::pod::manager::PodManager;
use crate::pod::workers::PodWorkers;
use crate::probe::{ProbeEvent, ProbeManager};
use crate::source::{self, FileSource, SourceSnapshot};
use crate::status::StatusManager;
use crate::sync::executor::{PodSyncer, SyncSettings, SyncerParts};

/// What the pods wing builds.
pub(super) struct PodsWing {
    pub status: StatusManager,
    pub probes: ProbeManager,
    pub workers: PodWorkers,
    pub pleg: Arc<Pleg>,
    pub runtime_health: RuntimeHealth,
    /// Unstarted (see the module documentation).
    pub manager: PodManager,
    /// True once every expected source reported and the orphans were handled.
    pub ready: watch::Receiver<bool>,
    /// What the manager runs on: the sources' snapshots and the PLEG's events.
    pub snapshots: mpsc::Receiver<SourceSnapshot>,
    pub pleg_events: mpsc::Receiver<PodLifecycleEvent>,
    /// The API pods' reflector (cluster mode).
    pub pod_store: Option<Store<Pod>>,
    /// The pods' user-namespace ranges, freed with their directories by container GC.
    pub userns: Option<Arc<crate::userns::UsernsManager>>,
    /// The CSI volume manager: pods' PVC, ephemeral and inline CSI volumes, torn down with
    /// their pods and by container GC for pods that are gone.
    pub csi_volumes: Arc<crate::volume::csi::CsiVolumes>,
    /// Where gone pods' directories are deleted (container GC puts orphans there too).
    pub trash: Arc<crate::volume::trash::Trash>,
}

/// Builds the pods wing and starts its PLEG, runtime health and pod sources in `tasks`.
#[allow(clippy::too_many_arguments)]
pub(super) fn wire(
    cfg: &Config,
    runtime: &RuntimeWing,
    runtime_health: RuntimeHealth,
    cluster: &ClusterWing,
    csi_drivers: &crate::csi::CsiDrivers,
    paths: &super::HostPaths,
    recorder: &EventRecorder,
    clock: Clock,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) -> Result<PodsWing, StartError> {
    let rt = &runtime.rt;
    let status = StatusManager::new();
    let exits = crate::cri::exits::ObservedExits::new();
    // Probe result changes wake the pod's worker through the same channel as runtime events.
    let (pleg_tx, pleg_events) = mpsc::channel(1024);
    let probes = ProbeManager::in_tasks(
        rt.runtime.clone(),
        clock,
        wake_on_probe_result(pleg_tx.clone()),
        record_probe_event(recorder.clone()),
        tasks.clone(),
        cancel,
    );
    let providers = match (
        &cfg.image_credential_provider_config,
        &cfg.image_credential_provider_bin_dir,
    ) {
        (Some(file), Some(bin_dir)) => crate::images::provider::load_config(file, bin_dir)?,
        _ => Vec::new(),
    };
    let pulls = Arc::new(
        crate::images::ImagePuller::new(
            rt.images.clone(),
            cluster.objects.clone(),
            Arc::new(crate::images::CredentialProviders::new(
                providers,
                Arc::new(crate::images::provider::ProcessExec),
            )),
            crate::images::PullLimit::from_config(
                cfg.serialize_image_pulls,
                cfg.max_parallel_image_pulls,
            ),
        )
        .with_pull_rate(cfg.registry_pull_qps, cfg.registry_burst),
    );
    // The resources admitted and applied per pod, as the last run left them.
    let allocation = crate::sync::allocation::AllocationManager::load(&cfg.root_dir)?;
    let csi_volumes = Arc::new(crate::volume::csi::CsiVolumes::new(
        cfg.root_dir.clone(),
        cfg.node_name.clone(),
        csi_drivers.clone(),
        cluster.objects.clone(),
    ));
    // The API server's pods bound to this node (cluster mode): the API source fills it, the
    // mirror pods and the status sync read it, and so do adopted static pods' first syncs.
    let api_pods = cluster
        .client()
        .map(|_| kube::runtime::reflector::store::<Pod>());
    let syncer = PodSyncer::new(SyncerParts {
        runtime: rt.runtime.clone(),
        images: rt.images.clone(),
        pulls,
        status: status.clone(),
        node: runtime.node.clone(),
        settings: Arc::new(sync_settings(
            cfg,
            rt,
            runtime.pod_cgroup.clone(),
            runtime.node_cgroups.clone(),
            crate::node::status::allocatable(
                &runtime.node.machine,
                &super::settings::allocatable_reservation(cfg),
            ),
            runtime.swap_controller,
            runtime.userns.clone(),
            csi_volumes.clone(),
            runtime.trash.clone(),
        )),
        clock,
        events: recorder.clone(),
        probes: probes.clone(),
        objects: cluster.objects.clone(),
        tasks: rt.tasks.clone(),
        exits: exits.clone(),
        allocation: allocation.clone(),
        network: runtime_health.network(),
    });
    let syncer = match &api_pods {
        Some((store, _)) => syncer.with_reported_statuses(Arc::new(
            crate::pod::mirror::MirrorStatuses::new(store.clone()),
        )),
        None => syncer,
    };
    // An exit containerd's event announces is shown in the pod's status at once, not after
    // the sync that may be under way for the pod (starting its other containers).
    let show_exits: crate::pleg::ExitListener = {
        let syncer = syncer.clone();
        Arc::new(move |uid: &str| syncer.show_exits(uid))
    };
    let workers = PodWorkers::new(syncer, cfg.sync_frequency, cancel.child_token());
    {
        // A deferred resize is retried by a sync of its pod.
        let workers = workers.clone();
        allocation.set_waker(Arc::new(move |uid: &str| {
            workers.wake(uid);
        }));
    }

    // A SIGKILL whose OOM event has not come is looked up in the container's cgroup, where
    // the runtime's verbose status says it is.
    let oom_kills = rt.stats.clone().map(|stats| {
        Arc::new(crate::stats::container_cgroup::ContainerOomKills::new(
            stats,
            crate::stats::cgroup::CgroupReader::detect(&paths.cgroup),
        )) as Arc<dyn crate::pleg::OomKills>
    });
    let pleg = Pleg::new(
        rt.runtime.clone(),
        cfg.node_name.clone(),
        cfg.pleg_relist_period,
        pleg_tx,
        exits,
        show_exits,
        oom_kills,
    );
    tasks.spawn(pleg.clone().run_relist(cancel.clone()));
    tasks.spawn(runtime_health.clone().run(cancel.clone()));
    tasks.spawn(wake_on_network_ready(
        runtime_health.network(),
        workers.clone(),
        cancel.clone(),
    ));
    if let Some(events) = &rt.containerd_events {
        tasks.spawn(pleg.clone().run_events(
            events.endpoint.clone(),
            events.namespace.clone(),
            tasks.clone(),
            cancel.clone(),
        ));
    }

    let (snap_tx, snapshots) = mpsc::channel(16);
    let mut expected = Vec::new();
    if let Some(dir) = &cfg.static_pod_path {
        expected.push(source::FILE_SOURCE);
        let file = FileSource::new(dir.clone(), cfg.node_name.clone(), cfg.file_check_frequency);
        tasks.spawn(file.run(snap_tx.clone(), cancel.clone()));
    }
    let pod_store = if let (Some(client), Some((store, writer))) = (cluster.client(), api_pods) {
        expected.push(source::api::API_SOURCE);
        let mut api = source::api::ApiSource::new(client.clone(), cfg.node_name.clone(), writer);
        if let Some(cache) = cluster.object_cache.clone() {
            // Watch the ConfigMaps and Secrets the node's pods refer to, and only those.
            api = api.on_change(Arc::new(move |pods: &[Pod]| {
                cache.sync_pods(pods.iter());
            }));
        }
        tasks.spawn(api.run(snap_tx.clone(), cancel.clone()));
        Some(store)
    } else {
        None
    };
    drop(snap_tx);
    let (manager, ready) = PodManager::new(
        workers.clone(),
        rt.runtime.clone(),
        cfg.node_name.clone(),
        expected,
    );
    let manager = manager.with_allocation(allocation);
    Ok(PodsWing {
        status,
        probes,
        workers,
        pleg,
        runtime_health,
        manager,
        ready,
        snapshots,
        pleg_events,
        pod_store,
        userns: runtime.userns.clone(),
        csi_volumes,
        trash: runtime.trash.clone(),
    })
}

/// What the executor needs of the configuration and the runtime.
#[allow(clippy::too_many_arguments)]
fn sync_settings(
    cfg: &Config,
    rt: &super::RuntimeServices,
    pod_cgroup: PodCgroupSettings,
    cgroups: Option<Arc<NodeCgroups>>,
    node_allocatable: crate::podspec::resources::NodeAllocatable,
    swap_controller: bool,
    userns: Option<Arc<crate::userns::UsernsManager>>,
    csi_volumes: Arc<crate::volume::csi::CsiVolumes>,
    trash: Arc<crate::volume::trash::Trash>,
) -> SyncSettings {
    SyncSettings {
        root_dir: cfg.root_dir.clone(),
        pod_logs_dir: cfg.pod_logs_dir.clone(),
        container_log_links_dir: cfg.container_log_links_dir.clone(),
        cgroup_driver: cfg.cgroup_driver,
        cgroup_root: cfg.cgroup_root.clone(),
        cgroups_per_qos: cfg.cgroups_per_qos,
        cluster_dns: cfg.cluster_dns.clone(),
        cluster_domain: cfg.cluster_domain.clone(),
        resolv_conf: Some(cfg.resolv_conf.clone()).filter(|p| !p.as_os_str().is_empty()),
        runtime_name: rt.version.runtime_name.clone(),
        crash_loop_backoff: cfg.crash_loop_back_off_delays(),
        cgroup_v2: pod_cgroup.cgroup_v2,
        single_process_oom_kill: cfg.single_process_oom_kill,
        swap_behavior: cfg.swap_behavior,
        swap_controller,
        seccomp_default: cfg.seccomp_default,
        runtime_features: rt.runtime_features.clone(),
        ready_to_start_condition: cfg.feature_enabled(
            crate::config::kubelet_fields::POD_READY_TO_START_CONTAINERS_CONDITION,
        ),
        cgroups,
        pod_cgroup,
        node_allocatable,
        user_namespaces_gate: cfg
            .feature_enabled(crate::config::kubelet_fields::USER_NAMESPACES_SUPPORT),
        image_volumes: crate::podspec::image_volume::image_volume_support(
            &rt.version.runtime_name,
            &rt.version.runtime_version,
        ),
        userns,
        csi_volumes: Some(csi_volumes),
        trash,
    }
}

/// The prober's "a result changed" becomes a PLEG event, so it reaches the pod's worker the way
/// runtime events do.
/// Wakes every pod worker when the runtime's network becomes ready: the pods held for it start
/// then, not at their next retry (the kubelet's come at its pod worker's 10 s back-off).
async fn wake_on_network_ready(
    mut network: watch::Receiver<Option<String>>,
    workers: PodWorkers,
    cancel: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = network.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        if network.borrow_and_update().is_none() {
            for uid in workers.uids() {
                workers.wake(&uid);
            }
        }
    }
}

fn wake_on_probe_result(tx: mpsc::Sender<PodLifecycleEvent>) -> Arc<dyn Fn(&str) + Send + Sync> {
    Arc::new(move |uid: &str| {
        let _ = tx.try_send(PodLifecycleEvent {
            pod_uid: uid.to_string(),
            id: String::new(),
            kind: EventKind::ProbeResult,
        });
    })
}

/// The prober's `Unhealthy` and `ProbeWarning` events, on the pod with the container's
/// `fieldPath` (`spec.initContainers{name}` for a sidecar).
fn record_probe_event(recorder: EventRecorder) -> Arc<dyn Fn(ProbeEvent) + Send + Sync> {
    Arc::new(move |e: ProbeEvent| {
        let object = ObjectRef {
            kind: "Pod".into(),
            namespace: e.pod_namespace.clone(),
            name: e.pod_name.clone(),
            uid: e.pod_uid.clone(),
            field_path: Some(container_field_path(&e.container_name, e.container_kind)),
        };
        recorder.record(&object, EventType::Warning, e.reason, e.message);
    })
}
