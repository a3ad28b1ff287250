//! The executor: carries out `compute_pod_actions`' decisions through the CRI, and the kill and
//! cleanup steps of pod termination. [`PodSyncer`] decides nothing and owns little: it reads
//! the pod's [`PodPlan`] (what its spec implies, derived once per spec version), publishes the
//! status, and hands the work to narrow parts — [`PodSandboxes`] (sandbox, pod cgroup, removal),
//! [`ContainerStarter`] and [`ContainerStopper`]. What must survive between syncs of one pod
//! lives in [`PodMemory`], which the pod worker keeps.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use tokio::sync::watch;

use super::actions::KillReason;
use super::actions::{compute_pod_actions, ActionInputs, PodActions, PodEnd};
use super::allocation::{ActuatedContainer, AllocationManager, Handled};
pub use super::error::{removed, Error, Result};
use super::grace::{Grace, StopReason};
pub use super::memory::{PodMemory, RuntimeWrites, IMAGE_BACKOFF, SYNC_ERROR_RETRY};
use super::plan::PodPlan;
use super::recorder::PodEvents;
use super::sandbox::PodSandboxes;
pub use super::settings::SyncSettings;
use super::start::{ContainerStarter, StartEnv};
use super::stop::{ContainerStopper, Kill, KillGrace};
use crate::backoff::Backoff;
use crate::clock::Clock;
use crate::cri::containerd::TaskSignaller;
use crate::cri::exits::ObservedExits;
use crate::cri::{self, ContainerState, ImageService, PodRuntime, Runtime};
use crate::events::{EventRecorder, EventType};
use crate::metrics::metrics;
use crate::objects::ObjectSource;
use crate::podspec::field_support::ephemeral_refusals;
use crate::podspec::{
    ephemeral_as_container, ephemeral_containers, init_containers as spec_init_containers, pod_uid,
    regular_containers as spec_containers, ContainerKind,
};
use crate::probe::{ProbeKind, ProbeManager, RunningContainer};
use crate::stats::machine::NodeInfo;
use crate::status::{
    generate_pod_status, hold_terminal_phase, terminate_pod_status, RestartInPlace, StartFailure,
    StatusInputs, StatusManager, StatusMutation,
};
use crate::volume;

/// The kubelet's event when the pod's sandbox could not be made (its config, its log
/// directory, RunPodSandbox: a CNI that is not ready shows here).
pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
/// The kubelet's event when the runtime refused to stop a container or the sandbox of a pod
/// being terminated.
pub const FAILED_KILL_POD: &str = "FailedKillPod";
/// The kubelet's event when a pod's sync cannot read what the runtime holds of it.
pub const FAILED_SYNC: &str = "FailedSync";
/// The kubelet's event when the pod's cgroup could not be made or configured.
pub const FAILED_CREATE_POD_CONTAINER: &str = "FailedCreatePodContainer";
/// The kubelet's event when a new sandbox's status could not be read.
pub const FAILED_STATUS_POD_SANDBOX: &str = "FailedPodSandBoxStatus";
/// The kubelet's event for a pod off the host's network while the runtime's network is not
/// ready (no CNI configuration yet), and the start of its message.
pub const NETWORK_NOT_READY: &str = "NetworkNotReady";
pub const NETWORK_NOT_READY_MESSAGE: &str = "network is not ready";
/// How soon a pod held for the network is synced again at the latest (the kubelet's pod
/// worker back-off after a failed sync); it is woken as soon as the network is ready.
pub const NETWORK_NOT_READY_RETRY: Duration = Duration::from_secs(10);

/// The kubelet's `syncPod` gate: a pod that is not on the host's network does not start
/// anything while the runtime's network is not ready; the message of its event and sync
/// error, `None` when the pod may go on.
pub fn network_gate(host_network: bool, network_error: Option<&str>) -> Option<String> {
    match network_error {
        Some(error) if !host_network => Some(format!("{NETWORK_NOT_READY_MESSAGE}: {error}")),
        _ => None,
    }
}

/// The waiting reason of an ephemeral container nodelet refuses to start (a field it cannot
/// honour; the message names it and its value): the kubelet's reason for a container whose
/// config cannot be made.
pub const EPHEMERAL_REFUSED: &str = "CreateContainerConfigError";
/// The kubelet's resize events.
pub const RESIZE_STARTED: &str = "ResizeStarted";
pub const RESIZE_DEFERRED: &str = "ResizeDeferred";
pub const RESIZE_INFEASIBLE: &str = "ResizeInfeasible";
pub const RESIZE_COMPLETED: &str = "ResizeCompleted";
pub const RESIZE_ERROR: &str = "ResizeError";

/// The pod cgroup's values while a resize moves between two: the larger of each, so neither
/// the containers' old nor their new limits exceed it.
fn expanded(
    old: &crate::cgroup::ResourceConfig,
    new: &crate::cgroup::ResourceConfig,
) -> crate::cgroup::ResourceConfig {
    let mut out = new.clone();
    out.cpu_shares = old.cpu_shares.max(new.cpu_shares);
    out.cpu_quota = match (old.cpu_quota, new.cpu_quota) {
        (Some(-1), _) | (_, Some(-1)) => Some(-1),
        (a, b) => a.max(b),
    };
    out.memory_limit = match (old.memory_limit, new.memory_limit) {
        (Some(a), Some(b)) => Some(a.max(b)),
        _ => None,
    };
    out
}

/// Why the pod's CSI volumes are not there for this sync.
enum CsiWait {
    /// Not yet: sync again later.
    Retry,
    /// Never: the containers' `CreateContainerConfigError`.
    Refused(Error),
}

/// What one sync decided about the pod's life.
#[derive(Debug, Clone, PartialEq)]
pub enum SyncOutcome {
    /// Actions were taken; sync again right away to publish the new state.
    Acted,
    /// Some container could not start (failure or backoff); sync again after this delay, or
    /// earlier when something changes.
    Retry(Duration),
    /// Nothing to do until something changes, or at the latest after this long (a deadline).
    Idle(Option<Duration>),
    /// The pod reached Succeeded/Failed: no container will run again.
    Terminal,
    /// The pod must end, with this in its final status (`activeDeadlineSeconds` passed): the
    /// pod worker ends it through `kill_pod`, the seam eviction and node shutdown use.
    Kill(StatusMutation),
}

/// What [`PodSyncer::new`] is built from (the composition root fills it in).
pub struct SyncerParts {
    pub runtime: Arc<dyn Runtime>,
    pub images: Arc<dyn ImageService>,
    /// Pulls with credentials (pull secrets, credential provider plugins), node-wide limits.
    pub pulls: Arc<crate::images::ImagePuller>,
    pub status: StatusManager,
    pub node: Arc<NodeInfo>,
    pub settings: Arc<SyncSettings>,
    pub clock: Clock,
    /// Sends `lifecycle.stopSignal` (containerd's task API); `None` when the runtime offers
    /// none, and the runtime's own stop signal is used.
    pub tasks: Option<Arc<dyn TaskSignaller>>,
    /// Where Pulling, Created, Started, Killing, BackOff, ... go.
    pub events: EventRecorder,
    /// Startup, liveness and readiness probes of running containers.
    pub probes: ProbeManager,
    /// ConfigMaps and Secrets for volumes and env (the API server's, cached; none standalone).
    pub objects: Arc<dyn ObjectSource>,
    /// Exits the runtime's events reported before the CRI did: laid over the runtime's view
    /// for every status published (never for the actions).
    pub exits: ObservedExits,
    /// What is allocated to each pod and what was applied (in-place resize).
    pub allocation: AllocationManager,
    /// Why the runtime's network is not ready (`None`: ready; `crate::cri::health`).
    pub network: watch::Receiver<Option<String>>,
}

/// One pod's sync and termination, over the parts that do the work.
#[derive(Clone)]
pub struct PodSyncer {
    runtime: Arc<dyn Runtime>,
    status: StatusManager,
    node: Arc<NodeInfo>,
    settings: Arc<SyncSettings>,
    clock: Clock,
    events: PodEvents,
    probes: ProbeManager,
    objects: Arc<dyn ObjectSource>,
    sandboxes: PodSandboxes,
    starter: ContainerStarter,
    stopper: ContainerStopper,
    exits: ObservedExits,
    allocation: AllocationManager,
    network: watch::Receiver<Option<String>>,
    /// What each pod's last status was generated from. The lock is held while a status is
    /// generated and stored, so statuses of one pod are published one at a time, in order.
    published: Arc<Mutex<HashMap<String, StatusBasis>>>,
    /// The status a static pod last had in the API server (its mirror pod's), for a pod
    /// adopted after a restart; none standalone.
    reported: Option<Arc<dyn ReportedStatuses>>,
}

/// The status the API server last showed for a static pod: its mirror pod's. A pod from the
/// API server carries its own; a static pod from a file carries none, so without this an
/// adopted static pod's first status after a restart would start over (its containers not
/// started, not ready, until their probes ran again).
#[async_trait::async_trait]
pub trait ReportedStatuses: Send + Sync {
    /// The mirror pod's status of `static_pod`; `None` when there is none (yet). May wait a
    /// bounded while for the API server's pods to be listed first.
    async fn reported_status(&self, static_pod: &Pod) -> Option<PodStatus>;
}

/// Whether a sync asks for the pod's reported status: a static pod without container
/// statuses of its own, on its first sync since nodelet started (`first_sync`), with containers running (an
/// adoption: a pod that starts afresh has no state to keep).
pub fn asks_reported_status(
    static_pod: bool,
    has_status: bool,
    first_sync: bool,
    any_running: bool,
) -> bool {
    static_pod && !has_status && first_sync && any_running
}

/// Where a published status's phase comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PhaseFrom {
    /// The status generated now: a sync's publish, which decides what the pod's containers
    /// mean for it.
    Generated,
    /// The status published before: an exit shown ahead of the sync changes the container's
    /// state and readiness, never the pod's phase (see [`shown_ahead_of_the_sync`]).
    Previous,
}

/// Whether a status generated ahead of the pod's sync (an exit containerd's event announced)
/// may be published: only when it leaves the pod's phase as published before. An exit that
/// ends the pod (its last container under `Never`, say) waits for the worker, which publishes
/// the phase with its reason and the conditions that go with it.
fn shown_ahead_of_the_sync(previous: Option<&PodStatus>, generated: &PodStatus) -> bool {
    previous.is_some_and(|p| p.phase == generated.phase)
}

/// What a pod's status is generated from, besides what is read live (probe results, the
/// exits containerd's events announced, resize state): kept from the last publish so an exit
/// can be shown without waiting for the pod's next sync ([`PodSyncer::show_exits`]).
#[derive(Debug, Clone)]
struct StatusBasis {
    pod: Pod,
    runtime: PodRuntime,
    start_failures: BTreeMap<String, StartFailure>,
    restart_in_place: RestartInPlace,
    pod_is_terminal: bool,
    mutation: Option<StatusMutation>,
}

impl PodSyncer {
    pub fn new(parts: SyncerParts) -> Self {
        let events = PodEvents(parts.events);
        let stopper = ContainerStopper {
            runtime: parts.runtime.clone(),
            tasks: parts.tasks,
            events: events.clone(),
        };
        PodSyncer {
            sandboxes: PodSandboxes {
                runtime: parts.runtime.clone(),
                settings: parts.settings.clone(),
            },
            starter: ContainerStarter {
                runtime: parts.runtime.clone(),
                images: parts.images,
                pulls: parts.pulls,
                node: parts.node.clone(),
                settings: parts.settings.clone(),
                clock: parts.clock,
                events: events.clone(),
                objects: parts.objects.clone(),
                stopper: stopper.clone(),
            },
            stopper,
            exits: parts.exits,
            allocation: parts.allocation,
            network: parts.network,
            published: Arc::default(),
            runtime: parts.runtime,
            status: parts.status,
            node: parts.node,
            settings: parts.settings,
            clock: parts.clock,
            events,
            probes: parts.probes,
            objects: parts.objects,
            reported: None,
        }
    }

    /// Static pods adopted after a restart start from their mirror pod's status.
    pub fn with_reported_statuses(mut self, reported: Arc<dyn ReportedStatuses>) -> Self {
        self.reported = Some(reported);
        self
    }

    /// The pod's plan for its current spec: the one derived before, or a new one when the spec
    /// (or the host's `resolv.conf`) changed since.
    fn plan(&self, pod: &Pod, memory: &mut PodMemory) -> Arc<PodPlan> {
        let resolv = self
            .settings
            .resolv_conf
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok());
        if let Some(plan) = memory.plan.as_ref() {
            if plan.is_for(pod, resolv.as_deref()) {
                return plan.clone();
            }
        }
        let plan = Arc::new(PodPlan::derive(
            pod,
            &self.settings,
            &self.node.name,
            resolv.as_deref(),
        ));
        memory.plans_derived += 1;
        tracing::debug!(
            qos = ?plan.qos_class,
            cgroup_parent = %plan.cgroup_parent,
            plans_derived = memory.plans_derived,
            "pod plan derived for a new spec version"
        );
        memory.plan = Some(plan.clone());
        plan
    }

    /// The running containers the prober should watch, with the address network probes dial.
    fn running_for_probes(&self, plan: &PodPlan, runtime: &PodRuntime) -> Vec<RunningContainer> {
        let pod_ip = if plan.host_network {
            self.node.host_ips.first().cloned()
        } else {
            runtime.sandbox().and_then(|s| s.ips.first().cloned())
        };
        runtime
            .running_containers()
            .map(|c| RunningContainer {
                name: c.name.clone(),
                id: c.id.clone(),
                started_at: c.started_at.unwrap_or(c.created_at),
                pod_ip: pod_ip.clone(),
            })
            .collect()
    }

    /// Containers whose liveness or startup probe has failed, as kill reasons.
    fn probe_failures(&self, uid: &str) -> BTreeMap<String, KillReason> {
        self.probes
            .failed(uid)
            .into_iter()
            .map(|(id, (kind, _))| {
                let reason = if kind == ProbeKind::Startup {
                    KillReason::StartupProbe
                } else {
                    KillReason::LivenessProbe
                };
                (id, reason)
            })
            .collect()
    }

    /// Sets up or refreshes the pod's configMap/secret/downwardAPI/projected volumes; every
    /// failure is a FailedMount event.
    async fn api_volumes(&self, pod: &Pod) -> volume::ApiVolumes {
        let ctx = volume::ApiVolumeContext::new(self.settings.node_allocatable);
        let api =
            volume::update_api_volumes(pod, &self.settings.root_dir, self.objects.as_ref(), &ctx)
                .await;
        for e in &api.failures {
            self.events
                .pod(pod, EventType::Warning, "FailedMount", e.to_string());
        }
        api
    }

    /// Mounts the pod's PVC, ephemeral and inline CSI volumes. Waiting (a claim not bound, a
    /// volume not attached, a driver not registered, a failed driver call) is the kubelet's
    /// `FailedMount` events and a retry, the containers in `ContainerCreating`; a volume that
    /// can never be mounted is every container's `CreateContainerConfigError`.
    async fn csi_volumes(
        &self,
        pod: &Pod,
        memory: &mut PodMemory,
    ) -> std::result::Result<BTreeMap<String, std::path::PathBuf>, CsiWait> {
        use volume::csi::CsiVolumeError;
        let Some(csi) = &self.settings.csi_volumes else {
            self.events.pod(
                pod,
                EventType::Warning,
                "FailedMount",
                "Unable to attach or mount volumes: no CSI volume manager on this node",
            );
            return Err(CsiWait::Retry);
        };
        match csi.mount_pod(pod).await {
            Ok(paths) => Ok(paths),
            Err(CsiVolumeError::Refused(r)) => {
                let message = r.to_string();
                self.events
                    .pod(pod, EventType::Warning, "FailedMount", message.clone());
                for c in spec_containers(pod) {
                    memory.start_failures.insert(
                        c.name.clone(),
                        StartFailure {
                            reason: "CreateContainerConfigError".into(),
                            message: message.clone(),
                        },
                    );
                }
                Err(CsiWait::Refused(Error::Sandbox {
                    uid: pod_uid(pod).to_string(),
                    message,
                }))
            }
            Err(e) => {
                if let CsiVolumeError::NotReady { failures, .. } = &e {
                    for f in failures {
                        self.events
                            .pod(pod, EventType::Warning, "FailedMount", f.clone());
                    }
                }
                self.events.pod(
                    pod,
                    EventType::Warning,
                    "FailedMount",
                    format!("Unable to attach or mount volumes: {e}"),
                );
                tracing::info!(error = %e, "waiting for CSI volumes");
                Err(CsiWait::Retry)
            }
        }
    }

    /// Fresh per-pod memory with this node's backoff settings.
    pub fn new_memory(&self) -> PodMemory {
        let (initial, max) = self.settings.crash_loop_backoff;
        PodMemory {
            start_failures: BTreeMap::new(),
            restart_backoff: Backoff::new(initial, max),
            image_backoff: Backoff::new(IMAGE_BACKOFF.0, IMAGE_BACKOFF.1),
            restart_in_place: RestartInPlace::Never,
            restart_count_base: BTreeMap::new(),
            first_seen: Some(tokio::time::Instant::now()),
            start_recorded: false,
            cgroup_configured: false,
            plan: None,
            plans_derived: 0,
            runtime_writes: RuntimeWrites::default(),
            reported_status_asked: false,
        }
    }

    /// Where this node reads termination messages: the files under the root dir, the logs
    /// through the runtime.
    fn message_sources(&self) -> super::termination::HostSources {
        super::termination::HostSources {
            root_dir: self.settings.root_dir.clone(),
            runtime: self.runtime.clone(),
        }
    }

    /// What the runtime holds of the pod, with the termination messages of its exited
    /// containers read as the kubelet's runtime manager adds them to the statuses.
    pub async fn inspect(&self, uid: &str) -> Result<PodRuntime> {
        let mut pod = cri::model::inspect_pod(self.runtime.as_ref(), &self.node.name, uid)
            .await
            .map_err(|source| Error::Inspect {
                uid: uid.to_string(),
                source,
            })?;
        let sources = self.message_sources();
        super::termination::fill_messages(&mut pod, &sources).await;
        Ok(pod)
    }

    /// The kubelet's Warning for a sandbox that could not be made, so `kubectl describe` says
    /// why the pod stays `ContainerCreating`: `FailedCreatePodContainer` when its cgroup could
    /// not be set up, `FailedCreatePodSandBox` otherwise.
    /// The pod's own user namespace (`hostUsers: false`), with its range from `userns`, or
    /// `None` for the node's (`GetOrCreateUserNamespaceMappings`). A new sandbox also needs the
    /// gate and a runtime handler that declares user namespaces; a running one already has both.
    async fn pod_user_namespace(
        &self,
        pod: &Pod,
        new_sandbox: bool,
    ) -> std::result::Result<Option<crate::cri::api::UserNamespace>, String> {
        let host_users = pod.spec.as_ref().and_then(|s| s.host_users);
        if host_users.is_none() {
            return Ok(None);
        }
        let handler =
            crate::objects::pod_runtime_handler(self.objects.as_ref(), pod).unwrap_or_default();
        let supports = !new_sandbox || self.settings.runtime_features.user_namespaces(&handler);
        match crate::userns::decide(
            host_users,
            self.settings.user_namespaces_gate,
            &handler,
            supports,
        )? {
            crate::userns::Decision::Node => Ok(None),
            crate::userns::Decision::Pod => {
                let manager = self.settings.userns.as_ref().ok_or_else(|| {
                    "create user namespace: nodelet has no user-namespace ranges".to_string()
                })?;
                // A new range is written to its file (fsync'd) before it is used: blocking
                // work, off the async runtime.
                let (manager, uid) = (Arc::clone(manager), pod_uid(pod).to_string());
                let mapping = tokio::task::spawn_blocking(move || manager.get_or_create(&uid))
                    .await
                    .map_err(|e| format!("create user namespace: {e}"))?
                    .map_err(|e| format!("create user namespace: {e}"))?;
                Ok(Some(super::sandbox_config::pod_user_namespace(mapping)))
            }
        }
    }

    fn sandbox_failed(&self, pod: &Pod, error: &Error) {
        let (reason, message) = match error {
            Error::PodCgroup { message, .. } => (
                FAILED_CREATE_POD_CONTAINER,
                format!("unable to ensure pod container exists: {message}"),
            ),
            other => (
                FAILED_CREATE_POD_SANDBOX,
                format!("Failed to create pod sandbox: {}", other.cause()),
            ),
        };
        self.events.pod(pod, EventType::Warning, reason, message);
    }

    /// Builds the API status from what the runtime reports and publishes it.
    pub fn publish_status(
        &self,
        pod: &Pod,
        runtime: &PodRuntime,
        memory: &PodMemory,
        pod_is_terminal: bool,
    ) -> PodStatus {
        self.publish_status_with(pod, runtime, memory, pod_is_terminal, None)
    }

    /// [`Self::publish_status`], with `mutation` (from whoever ended the pod) applied on top.
    pub fn publish_status_with(
        &self,
        pod: &Pod,
        runtime: &PodRuntime,
        memory: &PodMemory,
        pod_is_terminal: bool,
        mutation: Option<&StatusMutation>,
    ) -> PodStatus {
        let basis = StatusBasis {
            pod: pod.clone(),
            runtime: runtime.clone(),
            start_failures: memory.start_failures.clone(),
            restart_in_place: memory.restart_in_place,
            pod_is_terminal,
            mutation: mutation.cloned(),
        };
        let mut published = self.lock_published();
        let status = self.publish_basis(&basis, PhaseFrom::Generated);
        let uid = pod_uid(pod).to_string();
        if pod_is_terminal {
            // Nothing of the pod runs any more: no exit is left to show.
            published.remove(&uid);
        } else {
            published.insert(uid, basis);
        }
        status
    }

    fn lock_published(&self) -> MutexGuard<'_, HashMap<String, StatusBasis>> {
        // A panic mid-publish leaves at worst a stale basis: the next sync replaces it.
        self.published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Shows the exits containerd's events announced for the pod's containers at once: the
    /// pod's last status, generated again from the same basis with the exits laid over it.
    /// The pod's sync may be busy for a while (starting another of its containers, pulling an
    /// image); the exit's status does not wait for it. Nothing happens for a pod whose status
    /// was never published, or whose terminal status already was; what the exit means for the
    /// pod (a restart, its end) is still the sync's to decide.
    pub fn show_exits(&self, uid: &str) {
        let published = self.lock_published();
        if let Some(basis) = published.get(uid) {
            let _span = tracing::debug_span!("show_exits", pod.uid = %uid).entered();
            self.publish_basis(basis, PhaseFrom::Previous);
        }
    }

    /// Generates the status from `basis` and what is read live, and stores it. Called with the
    /// `published` lock held.
    fn publish_basis(&self, basis: &StatusBasis, phase_from: PhaseFrom) -> PodStatus {
        let StatusBasis {
            pod,
            runtime,
            start_failures,
            restart_in_place,
            pod_is_terminal,
            mutation,
        } = basis;
        let (restart_in_place, pod_is_terminal) = (*restart_in_place, *pod_is_terminal);
        let uid = pod_uid(pod);
        // After an in-place restart the old instances are gone on purpose: the status shows
        // them waiting for their next instances (`RestartingAllContainers`), not as
        // containers that vanished.
        let previous = self.status.status(uid);
        let readiness = self.probes.readiness(uid);
        let startup = self.probes.startup(uid);
        // Exits containerd's event has announced and the CRI not yet are shown, with their
        // messages read here, from the same records: an event that lands between the
        // inspection and this point cannot show an exit without its message.
        let mut shown = self.exits.overlay(runtime);
        let sources = self.message_sources();
        super::termination::fill_event_exit_messages(runtime, &mut shown, &sources);
        let runtime = &shown;
        let resize = self.resize_view(uid);
        let status = generate_pod_status(&StatusInputs {
            pod,
            runtime,
            previous: previous.as_ref(),
            start_failures,
            readiness: &readiness,
            startup: &startup,
            host_ips: &self.node.host_ips,
            pod_is_terminal,
            now: self.clock.now(),
            runtime_name: &self.settings.runtime_name,
            restart_in_place,
            ready_to_start_condition: self.settings.ready_to_start_condition,
            resize: Some(&resize),
            recursive_read_only: crate::objects::pod_runtime_handler(self.objects.as_ref(), pod)
                .is_some_and(|handler| {
                    self.settings.runtime_features.recursive_read_only(&handler)
                }),
        });
        let mut status = status;
        if let Some(m) = mutation {
            m.apply(&mut status);
        }
        if phase_from == PhaseFrom::Previous && !shown_ahead_of_the_sync(previous.as_ref(), &status)
        {
            // The exit changes the pod's phase: the worker's sync decides and publishes that.
            return previous.unwrap_or(status);
        }
        if pod_is_terminal {
            // The termination is over and nothing of the pod will run again: containers that
            // never ran (or that the runtime lost) end too, and the phase is terminal, so a
            // deleted pod reaches its final DELETE (the kubelet's `TerminatePod`).
            terminate_pod_status(pod, &mut status);
            self.status.set_pod_status(pod, status.clone());
        } else {
            // Until the termination is over, the phase shown stays short of terminal while a
            // container still runs; the sync decides on the phase as generated.
            let may_run = runtime
                .containers
                .iter()
                .any(|c| matches!(c.state, ContainerState::Running | ContainerState::Unknown));
            self.status.set_pod_status(
                pod,
                hold_terminal_phase(previous.as_ref(), status.clone(), may_run),
            );
        }
        status
    }

    /// On the first sync of an adopted static pod, the pod with its mirror pod's status (see
    /// [`ReportedStatuses`]); `None` when the pod is used as it is.
    async fn with_reported_status(
        &self,
        desired: &Pod,
        runtime: &PodRuntime,
        memory: &mut PodMemory,
    ) -> Option<Pod> {
        let first_sync = !std::mem::replace(&mut memory.reported_status_asked, true);
        let reported = self.reported.as_ref()?;
        let asks = asks_reported_status(
            crate::podspec::qos::is_static_pod(desired),
            // A manifest's pod carries only the defaulted phase.
            desired
                .status
                .as_ref()
                .is_some_and(|s| s.container_statuses.as_ref().is_some_and(|c| !c.is_empty())),
            first_sync,
            runtime.running_containers().next().is_some(),
        );
        if !asks {
            return None;
        }
        let status = reported.reported_status(desired).await?;
        tracing::debug!("adopted static pod: starting from its mirror pod's status");
        let mut pod = desired.clone();
        pod.status = Some(status);
        Some(pod)
    }

    /// One sync of a pod that should be running: publish its status, then act.
    pub async fn sync(&self, desired: &Pod, memory: &mut PodMemory) -> Result<SyncOutcome> {
        let uid = pod_uid(desired).to_string();
        // The kubelet's pod worker says so when it cannot read what the runtime holds.
        let runtime = self.inspect(&uid).await.inspect_err(|e| {
            self.events.pod(
                desired,
                EventType::Warning,
                FAILED_SYNC,
                format!("error determining status: {}", e.cause()),
            )
        })?;
        let with_reported = self.with_reported_status(desired, &runtime, memory).await;
        let desired = with_reported.as_ref().unwrap_or(desired);
        // Instances created since the last sync got the allocation of that time: recorded
        // before the allocation can change below.
        self.note_new_instances(&uid, &runtime);
        self.handle_resize(desired);
        // From here on the pod is the one allocated: what runs, what the plan and the pod
        // cgroup are derived from (the kubelet's `UpdatePodFromAllocation`).
        let allocated = self.allocation.allocated_pod(desired);
        let pod = &allocated;
        let plan = self.plan(pod, memory);
        if !memory.cgroup_configured && runtime.sandbox().is_some() {
            // Adopted after a restart: the pod's cgroup and its tier get today's settings.
            self.sandboxes
                .ensure_pod_cgroup(pod, &plan)
                .await
                .inspect_err(|e| self.sandbox_failed(pod, e))?;
            memory.cgroup_configured = true;
            if let Some(a) = self.allocation.allocation(&uid) {
                self.allocation.set_actuated_pod_cgroup(&uid, a);
            }
        }
        let (resize_restarts, resized) = self.actuate_resize(pod, &plan, &runtime).await;
        self.probes
            .sync_pod(pod, &self.running_for_probes(&plan, &runtime));
        self.refuse_ephemeral(pod, &runtime, memory);
        let status = self.publish_status(pod, &runtime, memory, false);
        self.record_pod_started(&status, memory);
        let start_time = status.start_time.as_ref().map(|t| t.0);
        let deadline = active_deadline_remaining(pod, start_time, self.clock.now());
        let actions = compute_pod_actions(&ActionInputs {
            pod,
            runtime: &runtime,
            spec_hashes: &plan.spec_hashes,
            probe_failures: &self.probe_failures(&uid),
            startup: &self.probes.startup(&uid),
            deadline_remaining: deadline,
            phase_terminal: is_terminal(&status),
            resize_restarts: &resize_restarts,
        });
        match actions.end {
            Some(PodEnd::Fail(failure)) => {
                let (reason, message) = (failure.reason, failure.message);
                tracing::info!(reason, message, "pod failed");
                self.events.pod(pod, EventType::Normal, reason, message);
                return Ok(SyncOutcome::Kill(failure.status_mutation()));
            }
            Some(PodEnd::Terminal) => return Ok(SyncOutcome::Terminal),
            None => {}
        }
        let network_error = self.network.borrow().clone();
        if let Some(message) =
            network_gate(crate::podspec::host_network(pod), network_error.as_deref())
        {
            tracing::info!(%message, "pod waits for the runtime's network");
            self.events
                .pod(pod, EventType::Warning, NETWORK_NOT_READY, message);
            return Ok(SyncOutcome::Retry(NETWORK_NOT_READY_RETRY));
        }
        if actions.is_empty() {
            if resized {
                // Read the runtime again: the next sync sees what was applied.
                return Ok(SyncOutcome::Acted);
            }
            // Running containers see ConfigMap/Secret/downwardAPI changes through the volumes.
            if runtime.sandbox().is_some_and(|s| s.ready) && volume::has_api_volumes(pod) {
                self.api_volumes(pod).await;
            }
            // A claim grown while the pod runs: its filesystem grows on the node (online
            // expansion, the kubelet's reconciler).
            if let Some(csi) = &self.settings.csi_volumes {
                if runtime.sandbox().is_some_and(|s| s.ready)
                    && volume::csi::CsiVolumes::has_csi_volumes(pod)
                {
                    for e in csi.expand_pod(pod).await {
                        let kind = if e.warning {
                            EventType::Warning
                        } else {
                            EventType::Normal
                        };
                        self.events.pod(pod, kind, e.reason, e.message);
                    }
                }
            }
            return Ok(SyncOutcome::Idle(deadline));
        }
        tracing::debug!(?actions, "pod actions");
        if actions.create_sandbox {
            if let (Some(change), Some(sandbox)) = (
                crate::sync::actions::sandbox_change(pod, &runtime),
                runtime.sandbox(),
            ) {
                // The kubelet logs this too (`podSandboxChanged`): a pod restarted in a new
                // sandbox must say what the runtime reported about the old one.
                tracing::info!(
                    reason = %change,
                    sandbox.id = %sandbox.id,
                    sandbox.attempt = sandbox.attempt,
                    sandbox.ready = sandbox.ready,
                    sandbox.ips = ?sandbox.ips,
                    "the pod needs a new sandbox"
                );
            }
        }
        if let Some(trigger) = &actions.restart_all {
            self.restart_in_place(pod, &runtime, trigger, memory)
                .await?;
            return Ok(SyncOutcome::Acted);
        }
        if let Some(retry) = self.execute(pod, &plan, &runtime, actions, memory).await? {
            // Publish the failure reasons now rather than at the next (delayed) sync.
            let runtime = self.inspect(&uid).await?;
            self.publish_status(pod, &runtime, memory, false);
            return Ok(SyncOutcome::Retry(retry));
        }
        Ok(SyncOutcome::Acted)
    }

    /// Ephemeral containers that set a field nodelet refuses are never started
    /// (`actions::ephemeral_containers_to_start` leaves them out): each waits with the refusal
    /// as its status (`CreateContainerConfigError`, the message naming the field and value),
    /// said once by a Warning event (`PodFieldNotSupported`, as an admission rejection words
    /// it). The pod runs on.
    fn refuse_ephemeral(&self, pod: &Pod, runtime: &PodRuntime, memory: &mut PodMemory) {
        for (i, e) in ephemeral_containers(pod).iter().enumerate() {
            if runtime.latest(&e.name).is_some() {
                continue;
            }
            let refused = ephemeral_refusals(pod, i);
            if refused.is_empty() {
                continue;
            }
            let message = refused
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            if memory
                .start_failures
                .get(&e.name)
                .is_some_and(|f| f.message == message)
            {
                continue;
            }
            tracing::warn!(container = %e.name, %message, "ephemeral container refused");
            self.events.container(
                pod,
                &e.name,
                EventType::Warning,
                crate::podspec::field_support::POD_FIELD_NOT_SUPPORTED,
                message.clone(),
            );
            memory.start_failures.insert(
                e.name.clone(),
                StartFailure {
                    reason: EPHEMERAL_REFUSED.into(),
                    message,
                },
            );
        }
    }

    /// The allocation manager's view for the status.
    fn resize_view(&self, uid: &str) -> crate::status::ResizeView {
        let conditions = self.allocation.conditions(uid);
        crate::status::ResizeView {
            allocated: self
                .allocation
                .allocation(uid)
                .map(|a| a.containers)
                .unwrap_or_default(),
            actuated: self
                .allocation
                .actuated(uid)
                .containers
                .into_iter()
                .map(|(name, a)| (name, (a.container_id, a.resources)))
                .collect(),
            pending: conditions.pending,
            in_progress: conditions.in_progress,
        }
    }

    /// Running instances nodelet has no record of applying anything to were created since
    /// the last sync, from the allocation of that time: that is what they run with. An
    /// instance the kubelet's checkpoint speaks of runs with what that names.
    fn note_new_instances(&self, uid: &str, runtime: &PodRuntime) {
        let Some(allocation) = self.allocation.allocation(uid) else {
            return;
        };
        let actuated = self.allocation.actuated(uid);
        for (name, resources) in &allocation.containers {
            let Some(latest) = runtime
                .latest(name)
                .filter(|c| c.state == ContainerState::Running)
            else {
                continue;
            };
            let recorded = actuated.containers.get(name);
            if recorded.map(|a| a.container_id.as_str()) == Some(&latest.id) {
                continue;
            }
            // A record without an instance came from the kubelet's checkpoint (a node taken
            // over from it): what the kubelet applied to the instance running now.
            let resources = match recorded {
                Some(r) if r.container_id.is_empty() => r.resources.clone(),
                _ => resources.clone(),
            };
            self.allocation.set_actuated_container(
                uid,
                name,
                ActuatedContainer {
                    container_id: latest.id.clone(),
                    resources,
                },
            );
        }
    }

    /// The kubelet's `updatePodSandboxResources` after the pod cgroup was resized: the runtime
    /// hears the sandbox's new resources (for its NRI plugins). Best effort, as the kubelet's:
    /// a runtime without the call (CRI before v1.33, containerd 1.6) answers Unimplemented, and
    /// no failure holds the resize back.
    async fn sandbox_resources_changed(&self, sandbox_id: &str, pod: &Pod) {
        let (overhead, resources) = super::sandbox_config::sandbox_resources(pod);
        match self
            .runtime
            .update_pod_sandbox_resources(sandbox_id, overhead, resources)
            .await
        {
            Ok(()) => {}
            Err(e) if e.is_unimplemented() => {
                tracing::debug!(error = %e, "the runtime has no UpdatePodSandboxResources");
            }
            Err(e) => {
                tracing::warn!(error = %e, "UpdatePodSandboxResources failed; the resize goes on")
            }
        }
    }

    /// A resize that could not be applied: `PodResizeInProgress` with reason `Error`, and a
    /// `ResizeError` event when the error is new (each sync tries again; one event per error).
    fn resize_failed(&self, pod: &Pod, uid: &str, generation: i64, error: String) {
        let known = self.allocation.conditions(uid).in_progress;
        if known.as_ref().and_then(|(_, e)| e.as_deref()) != Some(error.as_str()) {
            self.events.pod(
                pod,
                EventType::Warning,
                RESIZE_ERROR,
                crate::podspec::resize::event_message(pod, generation, &error, "Pod resize error"),
            );
        }
        self.allocation
            .set_in_progress_error(uid, generation, Some(error));
    }

    /// Everything allocated is applied: `PodResizeInProgress` goes, and a resize that was in
    /// progress says so with `ResizeCompleted` (the kubelet's event when it clears the
    /// condition).
    fn resize_completed(&self, pod: &Pod, uid: &str, generation: i64) {
        if self.allocation.clear_in_progress(uid) {
            tracing::info!(generation, "pod resize completed");
            self.events.pod(
                pod,
                EventType::Normal,
                RESIZE_COMPLETED,
                crate::podspec::resize::event_message(pod, generation, "", "Pod resize completed"),
            );
        }
    }

    /// The kubelet's `handlePodResourcesResize` for this pod, with its events.
    fn handle_resize(&self, pod: &Pod) {
        let is_static = crate::podspec::qos::is_static_pod(pod);
        let generation = pod.metadata.generation.unwrap_or(0);
        match self
            .allocation
            .handle_resize(pod, self.settings.node_allocatable, is_static)
        {
            Handled::Allocated => {
                tracing::info!(generation, "pod resize allocated");
                self.events.pod(
                    pod,
                    EventType::Normal,
                    RESIZE_STARTED,
                    crate::podspec::resize::event_message(
                        pod,
                        generation,
                        "",
                        "Pod resize started",
                    ),
                );
            }
            Handled::NewlyPending { reason, message } => {
                tracing::info!(reason, message, generation, "pod resize pending");
                let event = if reason == crate::podspec::resize::REASON_DEFERRED {
                    RESIZE_DEFERRED
                } else {
                    RESIZE_INFEASIBLE
                };
                self.events.pod(
                    pod,
                    EventType::Warning,
                    event,
                    crate::podspec::resize::event_message(
                        pod,
                        generation,
                        &message,
                        &format!("Pod resize {reason}"),
                    ),
                );
            }
            Handled::Unchanged | Handled::StillPending => {}
        }
    }

    /// A cgroup's memory usage in bytes (v1 `memory.usage_in_bytes`, v2 `memory.current`).
    fn memory_usage(dir: &std::path::Path) -> Option<i64> {
        ["memory.usage_in_bytes", "memory.current"]
            .iter()
            .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())
            .and_then(|v| v.trim().parse().ok())
    }

    /// Brings the running containers and the pod cgroup to the allocation (the kubelet's
    /// `doPodResizeAction`); returns the containers a resize restarts, and whether anything was
    /// applied now.
    async fn actuate_resize(
        &self,
        pod: &Pod,
        plan: &PodPlan,
        runtime: &PodRuntime,
    ) -> (std::collections::BTreeSet<String>, bool) {
        use super::resize::{resize_actions, ContainerResize, ResizeActionInputs, Step};
        use crate::podspec::resize::{restart_required, with_allocation};
        let uid = pod_uid(pod);
        let mut restarts = std::collections::BTreeSet::new();
        if !runtime.sandbox().is_some_and(|s| s.ready) {
            return (restarts, false);
        }
        let Some(allocation) = self.allocation.allocation(uid) else {
            return (restarts, false);
        };
        let actuated = self.allocation.actuated(uid);
        // The pod cgroup: its old and new values, when nodelet manages it.
        let cgroups = self.settings.cgroups.as_ref().zip(plan.pod_cgroup.as_ref());
        let mut pod_cgroup_due = match (&actuated.pod_cgroup, cgroups) {
            (Some(old), Some(_)) => *old != allocation,
            _ => false,
        };
        if actuated.pod_cgroup.is_none() || cgroups.is_none() {
            // Written with this allocation when the sandbox was made or adopted (or not
            // managed at all).
            self.allocation
                .set_actuated_pod_cgroup(uid, allocation.clone());
        }
        let old_config = match (&actuated.pod_cgroup, cgroups) {
            (Some(old), Some((cg, _))) if pod_cgroup_due => {
                Some(cg.pod_config(&with_allocation(pod, old)))
            }
            _ => None,
        };
        if old_config.is_none() {
            pod_cgroup_due = false;
        }
        let memory_dir = cgroups.map(|(cg, planned)| cg.manager().dir(&planned.name, "memory"));
        let (mut pod_memory_limit, mut pod_memory_usage) = (None, None);
        if let (Some(old), Some((_, planned))) = (&old_config, cgroups) {
            let new = planned.config.memory_limit;
            if new.is_some_and(|n| old.memory_limit.is_none_or(|o| n < o)) {
                pod_memory_limit = new;
                pod_memory_usage = memory_dir.as_deref().and_then(Self::memory_usage);
            }
        }
        let resizable: Vec<&k8s_openapi::api::core::v1::Container> = spec_init_containers(pod)
            .iter()
            .filter(|c| crate::podspec::is_sidecar(c))
            .chain(spec_containers(pod))
            .collect();
        let mut ids = BTreeMap::new();
        let mut inputs = Vec::new();
        for c in &resizable {
            let Some(latest) = runtime
                .latest(&c.name)
                .filter(|l| l.state == ContainerState::Running)
            else {
                continue;
            };
            let (Some(applied), Some(allocated)) = (
                actuated
                    .containers
                    .get(&c.name)
                    .filter(|a| a.container_id == latest.id),
                allocation.containers.get(&c.name),
            ) else {
                continue;
            };
            ids.insert(c.name.clone(), (latest.id.clone(), *c));
            inputs.push(ContainerResize {
                name: &c.name,
                allocated,
                actuated: &applied.resources,
                restart_on_cpu: restart_required(c, "cpu"),
                restart_on_memory: restart_required(c, "memory"),
                // The container's cgroup under the pod's (cgroupfs and systemd names).
                memory_usage: memory_dir.as_ref().and_then(|d| {
                    Self::memory_usage(&d.join(&latest.id)).or_else(|| {
                        Self::memory_usage(&d.join(format!("cri-containerd-{}.scope", latest.id)))
                    })
                }),
            });
        }
        let actions = resize_actions(&ResizeActionInputs {
            containers: inputs,
            pod_cgroup_due,
            pod_memory_limit,
            pod_memory_usage,
        });
        let generation = pod.metadata.generation.unwrap_or(0);
        if let Some(error) = actions.error {
            tracing::warn!(%error, "pod resize cannot be applied now");
            self.resize_failed(pod, uid, generation, error);
            return (restarts, false);
        }
        if actions.is_empty() {
            self.resize_completed(pod, uid, generation);
            return (restarts, false);
        }
        for step in &actions.steps {
            let done = match step {
                Step::PodCgroupExpand | Step::PodCgroupFinal => {
                    let (Some((cg, planned)), Some(old)) = (cgroups, &old_config) else {
                        continue;
                    };
                    // Grown first (when anything grows), the final values last (when
                    // anything shrinks): a child's limit never exceeds its pod's (cgroup v1
                    // refuses a container quota above the pod's).
                    let grown = expanded(old, &planned.config);
                    let (config, due) = if *step == Step::PodCgroupExpand {
                        (grown.clone(), grown != *old)
                    } else {
                        (planned.config.clone(), grown != planned.config)
                    };
                    if due {
                        cg.ensure_pod_with(uid, planned.share, &planned.name, &config)
                            .await
                            .map_err(|e| format!("resizing the pod cgroup: {e}"))
                    } else {
                        Ok(())
                    }
                }
                Step::UpdateContainer(name) => {
                    let Some((id, container)) = ids.get(name) else {
                        continue;
                    };
                    let linux = self.starter.linux_resources(pod, container, plan.qos_class);
                    tracing::info!(container = %name, container.id = %id, ?linux, "UpdateContainerResources");
                    match self.runtime.update_container_resources(id, linux).await {
                        Ok(()) => {
                            self.allocation.set_actuated_container(
                                uid,
                                name,
                                ActuatedContainer {
                                    container_id: id.clone(),
                                    resources: allocation.containers[name].clone(),
                                },
                            );
                            Ok(())
                        }
                        Err(e) => Err(format!("updating container {name:?}: {e}")),
                    }
                }
            };
            if let Err(error) = done {
                tracing::warn!(%error, "pod resize failed");
                self.resize_failed(pod, uid, generation, error);
                return (restarts, false);
            }
        }
        if pod_cgroup_due {
            self.allocation
                .set_actuated_pod_cgroup(uid, allocation.clone());
            if let Some(sandbox) = runtime.sandbox() {
                self.sandbox_resources_changed(&sandbox.id, pod).await;
            }
        }
        restarts.extend(actions.restart);
        // `PodResizeInProgress` stays until a sync whose runtime report already shows what was
        // applied finds nothing left to do, so that the status never says the resize is done
        // while `resources` still shows the runtime's old values (the kubelet clears it at the
        // sync its PLEG starts when the runtime reports the new resources).
        self.allocation.set_in_progress_error(uid, generation, None);
        // Another pod's deferred resize may fit now (the kubelet retries on this trigger).
        self.allocation.retry_deferred();
        (restarts, true)
    }

    fn record_pod_started(&self, status: &PodStatus, memory: &mut PodMemory) {
        if memory.start_recorded {
            return;
        }
        let statuses = status.container_statuses.as_deref().unwrap_or_default();
        let all_running = !statuses.is_empty()
            && statuses
                .iter()
                .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
        if all_running {
            memory.start_recorded = true;
            if let Some(first) = memory.first_seen {
                let took = first.elapsed();
                metrics()
                    .pod_start_duration_seconds
                    .observe(took.as_secs_f64());
                tracing::info!(seconds = took.as_secs_f64(), "all containers running");
            }
        }
    }

    /// Carries out the actions; when a container could not start, returns when to retry.
    async fn execute(
        &self,
        pod: &Pod,
        plan: &PodPlan,
        runtime: &PodRuntime,
        actions: PodActions,
        memory: &mut PodMemory,
    ) -> Result<Option<Duration>> {
        let uid = pod_uid(pod).to_string();
        let pod_ip = runtime.sandbox().and_then(|s| s.ips.first().cloned());
        let kills = actions.containers_to_kill.iter().filter_map(|k| {
            let c = runtime.containers.iter().find(|c| c.id == k.container_id)?;
            // This sync publishes what follows the stop (`pleg::shown_at_once`).
            self.exits.stopping_by_sync(&c.id);
            Some(self.stopper.kill_container(
                pod,
                c,
                Kill {
                    reason: k.reason.stop_reason(),
                    message: &k.message,
                    grace: KillGrace::Own(None),
                    pod_ip: pod_ip.as_deref(),
                    ordering: None,
                },
            ))
        });
        join_all(kills).await;
        if actions.kill_pod {
            let grace = super::grace::Grace::fixed(super::grace::pod_grace_period(pod, None));
            self.stopper.stop_pod(pod, runtime, &grace).await;
        }
        for id in &actions.containers_to_remove {
            if let Err(e) = self.runtime.remove_container(id).await {
                if !e.is_not_found() {
                    tracing::warn!(container.id = %id, error = %e, "removing old container");
                }
            }
        }
        for id in &actions.sandboxes_to_remove {
            if let Err(e) = self.runtime.remove_pod_sandbox(id).await {
                if !e.is_not_found() {
                    tracing::warn!(sandbox.id = %id, error = %e, "removing old sandbox");
                }
            }
        }
        let wants_start = !actions.init_containers_to_start.is_empty()
            || !actions.containers_to_start.is_empty()
            || !actions.ephemeral_containers_to_start.is_empty();
        if !actions.create_sandbox && !wants_start {
            return Ok(None);
        }

        let volumes = volume::prepare_pod_volumes(pod, &self.settings.root_dir).map_err(|e| {
            // Already in the kubelet's words (`MountVolume.SetUp failed for volume …`).
            self.events
                .pod(pod, EventType::Warning, "FailedMount", e.to_string());
            Error::Sandbox {
                uid: uid.clone(),
                message: e.to_string(),
            }
        });
        let volumes = match volumes {
            Ok(v) => v,
            Err(e) => {
                // Volume problems keep every container from starting; say so on each.
                for c in spec_containers(pod) {
                    memory.start_failures.insert(
                        c.name.clone(),
                        StartFailure {
                            reason: "CreateContainerConfigError".into(),
                            message: e.to_string(),
                        },
                    );
                }
                return Err(e);
            }
        };

        let mut volumes = volumes;
        if volume::csi::CsiVolumes::has_csi_volumes(pod) {
            match self.csi_volumes(pod, memory).await {
                Ok(paths) => volumes.extend(paths),
                Err(CsiWait::Retry) => return Ok(Some(SYNC_ERROR_RETRY)),
                Err(CsiWait::Refused(e)) => return Err(e),
            }
        }
        if volume::has_api_volumes(pod) {
            let api = self.api_volumes(pod).await;
            if let Some(e) = api.unmounted() {
                // The kubelet waits for every volume: the containers stay ContainerCreating.
                tracing::info!(error = %e, "waiting for volumes");
                return Ok(Some(SYNC_ERROR_RETRY));
            }
            volumes.extend(api.paths);
        }
        let attempt = if actions.create_sandbox {
            actions.attempt
        } else {
            runtime.sandbox().map_or(0, |s| s.attempt)
        };
        let mut sandbox_cfg = match plan.sandbox_config(attempt) {
            Ok(config) => config,
            Err(message) => {
                let e = Error::Sandbox {
                    uid: uid.clone(),
                    message,
                };
                if actions.create_sandbox {
                    self.sandbox_failed(pod, &e);
                }
                return Err(e);
            }
        };
        match self.pod_user_namespace(pod, actions.create_sandbox).await {
            Ok(Some(ns)) => super::sandbox_config::set_user_namespace(&mut sandbox_cfg, ns),
            Ok(None) => {}
            Err(message) => {
                let e = Error::Sandbox {
                    uid: uid.clone(),
                    message,
                };
                if actions.create_sandbox {
                    self.sandbox_failed(pod, &e);
                }
                return Err(e);
            }
        }
        if actions.create_sandbox && actions.attempt > 0 {
            self.events.pod(
                pod,
                EventType::Normal,
                "SandboxChanged",
                "Pod sandbox changed, it will be killed and re-created.",
            );
        }
        let (sandbox_id, pod_ips) = if actions.create_sandbox {
            // The kubelet's createPodSandbox: the RuntimeClass's handler, or no sandbox (a
            // missing class, or none resolvable: never the default handler in its place).
            let runtime_class = pod
                .spec
                .as_ref()
                .and_then(|s| s.runtime_class_name.as_deref());
            let handler = match self.objects.runtime_handler(runtime_class) {
                Ok(handler) => handler,
                Err(e) => {
                    let e = Error::Sandbox {
                        uid: uid.clone(),
                        message: e.to_string(),
                    };
                    self.sandbox_failed(pod, &e);
                    return Err(e);
                }
            };
            let writes = memory.runtime_writes.enter().await;
            let created = self
                .sandboxes
                .create(pod, plan, sandbox_cfg.clone(), &handler)
                .await;
            drop(writes);
            let id = created.inspect_err(|e| self.sandbox_failed(pod, e))?;
            memory.cgroup_configured = true;
            let ips = match self.runtime.pod_sandbox_status(&id).await {
                Ok(s) => cri::model::sandbox_from_status(&s).ips,
                Err(e) => {
                    self.events.pod(
                        pod,
                        EventType::Warning,
                        FAILED_STATUS_POD_SANDBOX,
                        format!("Unable to get pod sandbox status: {}", e.grpc_message()),
                    );
                    return Err(Error::Runtime {
                        uid,
                        op: "reading new sandbox status",
                        source: e,
                    });
                }
            };
            (id, ips)
        } else {
            let Some(id) = actions.sandbox_id.clone() else {
                return Ok(None);
            };
            let ips = runtime.sandbox().map(|s| s.ips.clone()).unwrap_or_default();
            (id, ips)
        };
        // A host-network pod's sandbox has no address of its own: its IPs are the node's, in
        // the Downward API (`status.podIP`) as in its status (the kubelet's SyncPod takes the
        // status' pod IPs, the host's for such a pod).
        let pod_ips = if pod_ips.is_empty() && crate::podspec::host_network(pod) {
            self.node.host_ips.clone()
        } else {
            pod_ips
        };

        let etc_hosts = match volume::write_etc_hosts(
            &self.settings.root_dir,
            pod,
            &pod_ips,
            &self.settings.cluster_domain,
        ) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!(error = %e, "writing /etc/hosts for the pod; containers use the image's");
                None
            }
        };
        let env = StartEnv {
            sandbox_id: &sandbox_id,
            sandbox_config: &sandbox_cfg,
            pod_ips: &pod_ips,
            volumes: &volumes,
            etc_hosts: etc_hosts.as_deref(),
            qos_class: plan.qos_class,
            attempt,
        };
        // After a new sandbox, nothing of the old runtime state applies to restart counting
        // except the instance history, which `runtime` still holds.
        let mut retry: Option<Duration> = None;
        let mut note = |after: Option<Duration>| {
            if let Some(after) = after {
                retry = Some(retry.map_or(after, |r: Duration| r.min(after)));
            }
        };
        // Ephemeral containers first, as the kubelet: an init container that cannot start
        // does not keep a debugging container out.
        for idx in &actions.ephemeral_containers_to_start {
            let Some(e) = ephemeral_containers(pod).get(*idx) else {
                continue;
            };
            let c = ephemeral_as_container(e);
            note(
                self.starter
                    .start_container(pod, &c, ContainerKind::Ephemeral, runtime, &env, memory)
                    .await,
            );
        }
        for idx in &actions.init_containers_to_start {
            let Some(c) = spec_init_containers(pod).get(*idx) else {
                continue;
            };
            let failed = self
                .starter
                .start_container(pod, c, ContainerKind::Init, runtime, &env, memory)
                .await;
            let stop_here = failed.is_some() && !actions.init_failure_continues.contains(idx);
            note(failed);
            if stop_here {
                return Ok(retry);
            }
        }
        for idx in &actions.containers_to_start {
            if let Some(c) = spec_containers(pod).get(*idx) {
                note(
                    self.starter
                        .start_container(pod, c, ContainerKind::Regular, runtime, &env, memory)
                        .await,
                );
            }
        }
        Ok(retry)
    }

    /// `RestartAllContainers`: kill every container at once (no preStop, no grace), keep the
    /// sandbox, its IP and the volumes, forget the old instances so initialization runs again
    /// from the first init container; `PodRestartInPlace` is True during the kill.
    async fn restart_in_place(
        &self,
        pod: &Pod,
        runtime: &PodRuntime,
        trigger: &str,
        memory: &mut PodMemory,
    ) -> Result<()> {
        let uid = pod_uid(pod).to_string();
        tracing::info!(
            container = trigger,
            "RestartAllContainers: restarting the pod in place"
        );
        self.events.pod(
            pod,
            EventType::Normal,
            "RestartAllContainers",
            format!("Container {trigger} exited under a RestartAllContainers rule; restarting all containers in place"),
        );
        memory.restart_in_place = RestartInPlace::Killing;
        self.publish_status(pod, runtime, memory, false);
        let pod_ip = runtime.sandbox().and_then(|s| s.ips.first().cloned());
        let kills = runtime
            .containers
            .iter()
            .filter(|c| c.state != ContainerState::Exited)
            .map(|c| {
                self.stopper.kill_container(
                    pod,
                    c,
                    Kill {
                        reason: StopReason::Other,
                        message: "Restarting all containers in place",
                        grace: KillGrace::Own(Some(Duration::ZERO)),
                        pod_ip: pod_ip.as_deref(),
                        ordering: None,
                    },
                )
            });
        join_all(kills).await;
        super::memory::carry_restart_counts(&mut memory.restart_count_base, &runtime.containers);
        for c in &runtime.containers {
            removed(
                self.runtime.remove_container(&c.id).await,
                &uid,
                "RemoveContainer",
            )?;
        }
        memory.start_failures.clear();
        memory.restart_in_place = RestartInPlace::Removed;
        let runtime = self.inspect(&uid).await?;
        self.publish_status(pod, &runtime, memory, false);
        memory.restart_in_place = RestartInPlace::Done;
        Ok(())
    }

    /// The first half of a pod's termination (the kubelet's `SyncTerminatingPod`): liveness
    /// and startup probes stop, the status is published with the pod as the termination sees
    /// it (its deletionTimestamp shows in `/pods` at once, not when the containers are gone), every
    /// container and sandbox is stopped within `grace`; returns what the runtime holds
    /// afterwards, for [`Self::publish_final_status`].
    pub async fn stop_for_termination(
        &self,
        pod: &Pod,
        memory: &PodMemory,
        grace: &Grace,
    ) -> Result<PodRuntime> {
        let uid = pod_uid(pod).to_string();
        // Liveness and startup probes stop now; readiness keeps reporting until the end.
        self.probes.pod_terminating(&uid);
        let runtime = self.inspect(&uid).await?;
        // A pod the runtime holds nothing of (rejected before it ran) has nothing to stop: its
        // final status follows at once, with only what ended it.
        if !runtime.sandboxes.is_empty() || !runtime.containers.is_empty() {
            self.publish_status(pod, &runtime, memory, false);
        }
        let refused = self.stopper.stop_pod(pod, &runtime, grace).await;
        if let Some(message) = super::stop::kill_pod_error(&refused) {
            self.events
                .pod(pod, EventType::Warning, FAILED_KILL_POD, message);
        }
        let after = self.inspect(&uid).await?;
        // The kubelet unmounts a terminated pod's volumes (`SyncTerminatedPod`): once no
        // container runs, its CSI volumes are unpublished (and unstaged after the last pod).
        // A failure is retried by the pod's removal and by container GC.
        if let Some(csi) = &self.settings.csi_volumes {
            if after
                .containers
                .iter()
                .all(|c| c.state != ContainerState::Running)
            {
                if let Err(e) = csi.unmount_pod(&uid).await {
                    tracing::warn!(error = %e, "unmounting the CSI volumes of a terminated pod");
                }
            }
        }
        Ok(after)
    }

    /// The second half: the final status (with `mutation` applied, once), then the probes and
    /// the QoS tier forget the pod.
    ///
    /// A pod that never ran here (`ran` false: ended before its first sync, and the runtime
    /// holds nothing of it) and that is ended with a mutation (admission rejection) reports
    /// only its QoS class and the mutation, as the kubelet's `rejectPod`: it has no container
    /// or condition to speak of.
    pub async fn publish_final_status(
        &self,
        pod: &Pod,
        runtime: &PodRuntime,
        memory: &PodMemory,
        mutation: Option<&StatusMutation>,
        ran: bool,
    ) {
        let uid = pod_uid(pod).to_string();
        // Its containers will not run again: its allocation stops counting against other
        // pods' resizes, and those deferred are retried (the kubelet's `pod_terminated`).
        self.allocation.release(&uid);
        let never_ran = !ran && runtime.sandboxes.is_empty() && runtime.containers.is_empty();
        match mutation {
            Some(m) if never_ran => {
                let qos = memory
                    .plan
                    .as_ref()
                    .map_or_else(|| crate::podspec::qos::qos_class(pod), |p| p.qos_class);
                let mut status = PodStatus {
                    qos_class: Some(qos.as_str().to_string()),
                    ..Default::default()
                };
                m.apply(&mut status);
                terminate_pod_status(pod, &mut status);
                let mut published = self.lock_published();
                published.remove(&uid);
                self.status.set_pod_status(pod, status);
            }
            _ => {
                self.publish_status_with(pod, runtime, memory, true, mutation);
            }
        }
        self.probes.remove_pod(&uid);
        self.sandboxes.pod_cgroup_terminated(pod).await;
    }

    /// After a deletion through the API: removes what the runtime holds for the pod and its
    /// volumes, keeping its status, and tells the status manager the resources are reclaimed
    /// (which lets the final DELETE go out).
    pub async fn reclaim(&self, pod: &Pod) -> Result<()> {
        let runtime = self.inspect(pod_uid(pod)).await?;
        self.sandboxes.remove_pod(pod, &runtime).await?;
        self.status.set_reclaimed(pod_uid(pod));
        Ok(())
    }

    /// Removes everything the runtime still holds for the pod, its volumes, its logs and its
    /// status.
    pub async fn remove(&self, pod: &Pod) -> Result<()> {
        let runtime = self.inspect(pod_uid(pod)).await?;
        self.sandboxes.remove_pod(pod, &runtime).await?;
        let uid = pod_uid(pod);
        self.probes.remove_pod(uid);
        self.lock_published().remove(uid);
        self.status.remove(uid);
        tracing::info!("pod removed");
        Ok(())
    }
}

fn is_terminal(status: &PodStatus) -> bool {
    crate::podspec::Phase::is_terminal_status(Some(status))
}

/// What is left of the pod's `activeDeadlineSeconds` (counted from `startTime`): `None` without
/// a deadline, zero once it has passed.
pub fn active_deadline_remaining(
    pod: &Pod,
    start_time: Option<jiff::Timestamp>,
    now: jiff::Timestamp,
) -> Option<Duration> {
    let deadline = pod.spec.as_ref()?.active_deadline_seconds?;
    let deadline = crate::clock::seconds_from_api(deadline);
    let Some(start) = start_time else {
        return Some(deadline);
    };
    let elapsed = Duration::try_from(now.duration_since(start)).unwrap_or(Duration::ZERO);
    Some(deadline.saturating_sub(elapsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_gate_table() {
        let error = "container runtime network not ready: NetworkReady=false reason:R message:M";
        let cases = [
            ("ready network, pod network", false, None, None),
            ("ready network, host network", true, None, None),
            (
                "network not ready holds a pod on the pod network",
                false,
                Some(error),
                Some(format!("network is not ready: {error}")),
            ),
            (
                "network not ready lets a host-network pod go on",
                true,
                Some(error),
                None,
            ),
        ];
        for (name, host_network, network_error, want) in cases {
            assert_eq!(network_gate(host_network, network_error), want, "{name}");
        }
    }

    fn status(phase: Option<&str>, reason: Option<&str>, message: Option<&str>) -> PodStatus {
        PodStatus {
            phase: phase.map(String::from),
            reason: reason.map(String::from),
            message: message.map(String::from),
            pod_ip: Some("10.0.0.9".into()),
            ..Default::default()
        }
    }

    #[test]
    fn an_exit_is_shown_ahead_of_the_sync_only_when_the_phase_stays() {
        let cases = [
            (
                "a restartable container's exit: still Running",
                Some(status(Some("Running"), None, None)),
                status(Some("Running"), None, None),
                true,
            ),
            (
                "a Never pod's last exit: the sync ends the pod",
                Some(status(Some("Running"), None, None)),
                status(Some("Failed"), None, None),
                false,
            ),
            (
                "the phase published with a reason stays the worker's",
                Some(status(Some("Failed"), Some("DeadlineExceeded"), None)),
                status(Some("Failed"), Some("DeadlineExceeded"), None),
                true,
            ),
            (
                "nothing published before",
                None,
                status(Some("Running"), None, None),
                false,
            ),
        ];
        for (name, previous, generated, want) in cases {
            assert_eq!(
                shown_ahead_of_the_sync(previous.as_ref(), &generated),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn only_an_adopted_static_pod_without_statuses_asks_for_its_mirrors() {
        // (static, has statuses, first sync, something runs) → asks
        for (case, want) in [
            ((true, false, true, true), true),
            ((false, false, true, true), false),
            ((true, true, true, true), false),
            ((true, false, false, true), false),
            ((true, false, true, false), false),
        ] {
            let (static_pod, has_status, first_sync, any_running) = case;
            assert_eq!(
                asks_reported_status(static_pod, has_status, first_sync, any_running),
                want,
                "{case:?}"
            );
        }
    }
}
