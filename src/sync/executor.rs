//! The executor: carries out `compute_pod_actions`' decisions through the CRI, and the kill and
//! cleanup steps of pod termination. It owns no state of its own; what must survive between
//! syncs of one pod (the last start failure of each container) lives in [`PodMemory`], which the
//! pod worker keeps.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Pod, PodStatus};

use super::actions::KillReason;
use super::actions::{compute_pod_actions, ActionInputs, PodActions, PodEnd};
use super::container_config::container_hash;
use super::kill::StopReason;
use super::sandbox_config::{pod_log_dir, sandbox_config, SandboxContext};
use super::start::StartEnv;
use super::stop::{Kill, KillGrace};
use crate::backoff::Backoff;
use crate::cgroup;
use crate::clock::Clock;
use crate::cri::containerd::TaskSignaller;
use crate::cri::{self, api, ContainerState, ImageService, PodRuntime, Runtime};
use crate::events::{container_ref, pod_ref, EventRecorder, EventType};
use crate::metrics::metrics;
use crate::node::NodeInfo;
use crate::objects::ObjectSource;
use crate::podspec::{
    init_containers as spec_init_containers, pod_uid, regular_containers as spec_containers,
    ContainerKind,
};
use crate::probe::{ProbeKind, ProbeManager, RunningContainer};
use crate::status::{
    generate_pod_status, RestartInPlace, StartFailure, StatusInputs, StatusManager, StatusMutation,
};
use crate::volume;

/// Node-wide settings the executor needs (from the configuration).
#[derive(Debug, Clone)]
pub struct SyncSettings {
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
    pub cgroup_driver: cgroup::Driver,
    pub cgroup_root: String,
    pub cgroups_per_qos: bool,
    pub cluster_dns: Vec<std::net::IpAddr>,
    pub cluster_domain: String,
    pub resolv_conf: Option<PathBuf>,
    /// The runtime's name for `containerID` (`containerd://<id>`).
    pub runtime_name: String,
    /// Restart backoff (initial, max): 10 s / 300 s by default, see `crashLoopBackOff`.
    pub crash_loop_backoff: (Duration, Duration),
    /// Whether the node is on the unified cgroup v2 hierarchy.
    pub cgroup_v2: bool,
    /// `singleProcessOOMKill`: leave `memory.oom.group` alone (cgroup v2).
    pub single_process_oom_kill: bool,
    /// The node's cgroup tree (`cgroupsPerQOS`): pod cgroups with their limits, QoS tiers;
    /// `None` leaves the pod cgroup to the runtime, without pod-level limits.
    pub cgroups: Option<Arc<cgroup::node::NodeCgroups>>,
    /// What shapes pod and container cgroup values, Memory QoS among them (containers get it
    /// through the CRI even without `cgroupsPerQOS`).
    pub pod_cgroup: cgroup::PodCgroupSettings,
}

/// Image pull backoff, as the kubelet's (10 s doubling to 300 s).
pub const IMAGE_BACKOFF: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(300));

/// Per-pod memory the worker keeps between syncs.
#[derive(Debug)]
pub struct PodMemory {
    /// The kubelet's "reason cache": why the last start of each container failed.
    pub start_failures: BTreeMap<String, StartFailure>,
    /// Restart backoff, keyed per container (CrashLoopBackOff).
    pub restart_backoff: Backoff,
    /// Image pull backoff, keyed per image (ImagePullBackOff).
    pub image_backoff: Backoff,
    /// Where the pod is in a `RestartAllContainers` restart in place.
    pub restart_in_place: RestartInPlace,
    /// Restart counts of containers whose instances an in-place restart removed.
    pub restart_count_base: BTreeMap<String, i32>,
    /// When nodelet first saw the pod, for the pod start duration metric.
    pub first_seen: Option<tokio::time::Instant>,
    pub start_recorded: bool,
    /// The pod's cgroup was configured by this nodelet (before its sandbox, or on the first
    /// sync of a pod adopted after a restart, which applies the current settings to it).
    pub cgroup_configured: bool,
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

/// How long to wait before retrying a sync whose starts failed with no backoff of their own
/// (the kubelet's pod worker error backoff).
pub const SYNC_ERROR_RETRY: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("pod {uid}: reading runtime state: {source}")]
    Inspect {
        uid: String,
        #[source]
        source: cri::Error,
    },
    #[error("pod {uid}: {op}: {source}")]
    Runtime {
        uid: String,
        op: &'static str,
        #[source]
        source: cri::Error,
    },
    #[error("pod {uid}: creating sandbox: {message}")]
    Sandbox { uid: String, message: String },
}

/// The outcome of a CRI removal: gone already (NotFound) counts as removed; any other error
/// names the pod and the call.
pub(super) fn removed(result: cri::Result<()>, uid: &str, op: &'static str) -> Result<()> {
    match result {
        Err(e) if !e.is_not_found() => Err(Error::Runtime {
            uid: uid.to_string(),
            op,
            source: e,
        }),
        _ => Ok(()),
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Clone)]
pub struct PodSyncer {
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
}

impl PodSyncer {
    /// The running containers the prober should watch, with the address network probes dial.
    fn running_for_probes(&self, pod: &Pod, runtime: &PodRuntime) -> Vec<RunningContainer> {
        let pod_ip = if crate::podspec::host_network(pod) {
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
        let ctx = volume::ApiVolumeContext::new(volume::NodeAllocatable {
            cpu_milli: self.node.cpu_capacity_milli(),
            memory: i64::try_from(self.node.memory_capacity()).unwrap_or(i64::MAX),
            ephemeral_storage: None,
        });
        let api =
            volume::update_api_volumes(pod, &self.settings.root_dir, self.objects.as_ref(), &ctx)
                .await;
        for e in &api.failures {
            self.events.record(
                &pod_ref(pod),
                EventType::Warning,
                "FailedMount",
                e.to_string(),
            );
        }
        api
    }

    /// Records an event about one container of the pod.
    pub fn container_event(
        &self,
        pod: &Pod,
        container: &str,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let kind = if spec_init_containers(pod)
            .iter()
            .any(|c| c.name == container)
        {
            ContainerKind::Init
        } else {
            ContainerKind::Regular
        };
        self.events
            .record(&container_ref(pod, container, kind), type_, reason, message);
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
        }
    }

    pub async fn inspect(&self, uid: &str) -> Result<PodRuntime> {
        cri::model::inspect_pod(self.runtime.as_ref(), &self.node.name, uid)
            .await
            .map_err(|source| Error::Inspect {
                uid: uid.to_string(),
                source,
            })
    }

    fn spec_hashes(pod: &Pod) -> BTreeMap<String, String> {
        spec_init_containers(pod)
            .iter()
            .chain(spec_containers(pod))
            .map(|c| (c.name.clone(), container_hash(c)))
            .collect()
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
        let uid = pod_uid(pod);
        let mut previous = self.status.status(uid);
        if memory.restart_in_place == RestartInPlace::Removed {
            // After an in-place restart the old instances are gone on purpose: they must not
            // read as containers that vanished (which the kubelet reports as terminated).
            if let Some(p) = previous.as_mut() {
                p.container_statuses = None;
                p.init_container_statuses = None;
            }
        }
        let readiness = self.probes.readiness(uid);
        let startup = self.probes.startup(uid);
        let status = generate_pod_status(&StatusInputs {
            pod,
            runtime,
            previous: previous.as_ref(),
            start_failures: &memory.start_failures,
            readiness: &readiness,
            startup: &startup,
            host_ips: &self.node.host_ips,
            pod_is_terminal,
            now: self.clock.now(),
            runtime_name: &self.settings.runtime_name,
            restart_in_place: memory.restart_in_place,
        });
        let mut status = status;
        if let Some(m) = mutation {
            m.apply(&mut status);
        }
        self.status.set_pod_status(pod, status.clone());
        status
    }

    /// One sync of a pod that should be running: publish its status, then act.
    pub async fn sync(&self, pod: &Pod, memory: &mut PodMemory) -> Result<SyncOutcome> {
        let uid = pod_uid(pod).to_string();
        let runtime = self.inspect(&uid).await?;
        if !memory.cgroup_configured && runtime.sandbox().is_some() {
            // Adopted after a restart: the pod's cgroup and its tier get today's settings.
            self.ensure_pod_cgroup(pod).await;
            memory.cgroup_configured = true;
        }
        self.probes
            .sync_pod(pod, &self.running_for_probes(pod, &runtime));
        let status = self.publish_status(pod, &runtime, memory, false);
        self.record_pod_started(&status, memory);
        let start_time = status.start_time.as_ref().map(|t| t.0);
        let deadline = active_deadline_remaining(pod, start_time, self.clock.now());
        let hashes = Self::spec_hashes(pod);
        let actions = compute_pod_actions(&ActionInputs {
            pod,
            runtime: &runtime,
            spec_hashes: &hashes,
            probe_failures: &self.probe_failures(&uid),
            startup: &self.probes.startup(&uid),
            deadline_remaining: deadline,
            phase_terminal: is_terminal(&status),
        });
        match actions.end {
            Some(PodEnd::Fail(failure)) => {
                let (reason, message) = (failure.reason, failure.message);
                tracing::info!(reason, message, "pod failed");
                self.events
                    .record(&pod_ref(pod), EventType::Normal, reason, message);
                return Ok(SyncOutcome::Kill(failure.status_mutation()));
            }
            Some(PodEnd::Terminal) => return Ok(SyncOutcome::Terminal),
            None => {}
        }
        if actions.is_empty() {
            // Running containers see ConfigMap/Secret/downwardAPI changes through the volumes.
            if runtime.sandbox().is_some_and(|s| s.ready) && volume::has_api_volumes(pod) {
                self.api_volumes(pod).await;
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
        if let Some(retry) = self.execute(pod, &runtime, actions, memory).await? {
            // Publish the failure reasons now rather than at the next (delayed) sync.
            let runtime = self.inspect(&uid).await?;
            self.publish_status(pod, &runtime, memory, false);
            return Ok(SyncOutcome::Retry(retry));
        }
        Ok(SyncOutcome::Acted)
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
        runtime: &PodRuntime,
        actions: PodActions,
        memory: &mut PodMemory,
    ) -> Result<Option<Duration>> {
        let uid = pod_uid(pod).to_string();
        let pod_ip = runtime.sandbox().and_then(|s| s.ips.first().cloned());
        let kills = actions.containers_to_kill.iter().filter_map(|k| {
            let c = runtime.containers.iter().find(|c| c.id == k.container_id)?;
            Some(self.kill_container(
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
            let grace = super::kill::Grace::fixed(super::kill::pod_grace_period(pod, None));
            self.stop_pod(pod, runtime, &grace).await;
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
        let wants_start =
            !actions.init_containers_to_start.is_empty() || !actions.containers_to_start.is_empty();
        if !actions.create_sandbox && !wants_start {
            return Ok(None);
        }

        let volumes =
            volume::prepare_pod_volumes(pod, &self.settings.root_dir).map_err(|e| Error::Sandbox {
                uid: uid.clone(),
                message: e.to_string(),
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
        let sandbox_cfg = self.sandbox_config(pod, attempt)?;
        if actions.create_sandbox && actions.attempt > 0 {
            self.events.record(
                &pod_ref(pod),
                EventType::Normal,
                "SandboxChanged",
                "Pod sandbox changed, it will be killed and re-created.",
            );
        }
        let (sandbox_id, pod_ips) = if actions.create_sandbox {
            let id = self.create_sandbox(pod, sandbox_cfg.clone()).await?;
            memory.cgroup_configured = true;
            let ips = match self.runtime.pod_sandbox_status(&id).await {
                Ok(s) => cri::model::sandbox_from_status(&s).ips,
                Err(e) => {
                    return Err(Error::Runtime {
                        uid,
                        op: "reading new sandbox status",
                        source: e,
                    })
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
        for idx in &actions.init_containers_to_start {
            let Some(c) = spec_init_containers(pod).get(*idx) else {
                continue;
            };
            let failed = self
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
                    self.start_container(pod, c, ContainerKind::Regular, runtime, &env, memory)
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
        self.events.record(
            &pod_ref(pod),
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
                self.kill_container(
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
        for c in &runtime.containers {
            let base = memory
                .restart_count_base
                .entry(c.name.clone())
                .or_insert(c.restart_count);
            *base = (*base).max(c.restart_count);
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

    fn sandbox_config(&self, pod: &Pod, attempt: u32) -> Result<api::PodSandboxConfig> {
        let resolv = self
            .settings
            .resolv_conf
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok());
        let cgroup_parent = cgroup::pod_cgroup_parent(
            pod,
            self.settings.cgroup_driver,
            &self.settings.cgroup_root,
            self.settings.cgroups_per_qos,
        );
        let ctx = SandboxContext {
            node_name: &self.node.name,
            pod_logs_dir: &self.settings.pod_logs_dir,
            cgroup_parent,
            cluster_dns: &self.settings.cluster_dns,
            cluster_domain: &self.settings.cluster_domain,
            host_resolv_conf: resolv.as_deref(),
        };
        sandbox_config(pod, attempt, &ctx).map_err(|e| Error::Sandbox {
            uid: pod_uid(pod).to_string(),
            message: e.to_string(),
        })
    }

    async fn create_sandbox(&self, pod: &Pod, config: api::PodSandboxConfig) -> Result<String> {
        let uid = pod_uid(pod).to_string();
        let log_dir = pod_log_dir(
            &self.settings.pod_logs_dir,
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default(),
            &uid,
        );
        if let Err(e) = std::fs::create_dir_all(&log_dir) {
            return Err(Error::Sandbox {
                uid,
                message: format!("creating log directory {}: {e}", log_dir.display()),
            });
        }
        self.ensure_pod_cgroup(pod).await;
        tracing::info!("creating pod sandbox");
        let id = self
            .runtime
            .run_pod_sandbox(config)
            .await
            .map_err(|source| Error::Runtime {
                uid: uid.clone(),
                op: "RunPodSandbox",
                source,
            })?;
        metrics().started_pods_total.inc();
        tracing::info!(sandbox.id = %id, "pod sandbox ready");
        Ok(id)
    }

    /// The pod's cgroup with its effective limits, before the runtime places anything in it
    /// (and its QoS tier counting it). A failure is logged and the pod still starts, bounded by
    /// its containers' own limits only.
    async fn ensure_pod_cgroup(&self, pod: &Pod) {
        let Some(cgroups) = &self.settings.cgroups else {
            return;
        };
        match cgroups.ensure_pod(pod).await {
            Ok(name) => tracing::debug!(
                cgroup = %cgroups.manager().literal(&name),
                config = ?cgroups.pod_config(pod),
                "pod cgroup configured"
            ),
            Err(e) => tracing::warn!(error = %e, "configuring the pod cgroup"),
        }
    }

    /// The pod's containers are stopped: its QoS tier stops counting it.
    pub(super) async fn pod_cgroup_terminated(&self, pod: &Pod) {
        let Some(cgroups) = &self.settings.cgroups else {
            return;
        };
        if let Err(e) = cgroups.pod_terminated(pod_uid(pod)).await {
            tracing::warn!(error = %e, "updating the QoS tiers");
        }
    }

    /// Removes the pod's cgroup once its sandbox is gone.
    pub(super) async fn remove_pod_cgroup(&self, pod: &Pod) {
        let Some(cgroups) = &self.settings.cgroups else {
            return;
        };
        if let Err(e) = cgroups.remove_pod(pod).await {
            tracing::warn!(error = %e, "removing the pod cgroup");
        }
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
    let deadline = Duration::from_secs(u64::try_from(deadline).unwrap_or(0));
    let Some(start) = start_time else {
        return Some(deadline);
    };
    let elapsed = Duration::try_from(now.duration_since(start)).unwrap_or(Duration::ZERO);
    Some(deadline.saturating_sub(elapsed))
}
