//! Starting one container, as the kubelet's `startContainer`: restart backoff
//! (CrashLoopBackOff), the image by its pull policy (with ImagePullBackOff), the container
//! config, CreateContainer, StartContainer, and the postStart hook.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::Instrument;

use super::container_config::{
    container_config_with_env, format_pod, verify_run_as_non_root, ContainerContext,
};
use super::grace::StopReason;
use super::hooks::run_hook;
use super::memory::{PodMemory, SYNC_ERROR_RETRY};
use super::recorder::PodEvents;
use super::settings::SyncSettings;
use super::stop::{ContainerStopper, Kill, KillGrace};
use crate::clock::Clock;
use crate::config::format_duration;
use crate::cri::{api, ContainerState, ImageService, PodRuntime, Runtime};
use crate::events::EventType;
use crate::logs::paths::container_log_dir;
use crate::metrics::metrics;
use crate::objects::ObjectSource;
use crate::podspec::env;
use crate::podspec::pod_uid;
use crate::podspec::ContainerKind;
use crate::stats::machine::NodeInfo;
use crate::status::StartFailure;
use crate::volume;

/// What every container started in one sync shares: its sandbox and the pod's volumes.
pub struct StartEnv<'a> {
    pub sandbox_id: &'a str,
    pub sandbox_config: &'a api::PodSandboxConfig,
    pub pod_ips: &'a [String],
    pub volumes: &'a BTreeMap<String, PathBuf>,
    pub etc_hosts: Option<&'a std::path::Path>,
    /// The pod's QoS class from its plan (for each container's `oom_score_adj`).
    pub qos_class: crate::podspec::qos::QosClass,
    #[allow(dead_code)]
    pub attempt: u32,
}

/// Durations in pull events are shown to the millisecond, as the kubelet's.
fn truncate_to_millis(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The effective pull policy: the spec's, else Always for `:latest` or no tag, IfNotPresent
/// otherwise (the API's defaulting, for pods that were not defaulted).
fn image_pull_policy(container: &Container) -> &str {
    if let Some(p) = container.image_pull_policy.as_deref() {
        return p;
    }
    crate::podspec::image_volume::default_pull_policy(
        container.image.as_deref().unwrap_or_default(),
    )
}

/// Starts containers: backoff, image, config, CreateContainer, StartContainer, postStart (a
/// failed postStart hook kills the container through `stopper`); owns nothing else.
#[derive(Clone)]
pub struct ContainerStarter {
    pub runtime: Arc<dyn Runtime>,
    pub images: Arc<dyn ImageService>,
    /// Pulls with credentials (pull secrets, credential provider plugins), node-wide limits.
    pub pulls: Arc<crate::images::ImagePuller>,
    pub node: Arc<NodeInfo>,
    pub settings: Arc<SyncSettings>,
    pub clock: Clock,
    /// Where Pulling, Pulled, Created, Started, BackOff, ... go.
    pub events: PodEvents,
    /// ConfigMaps and Secrets for env (the API server's, cached; none standalone).
    pub objects: Arc<dyn ObjectSource>,
    pub stopper: ContainerStopper,
}

impl ContainerStarter {
    /// The Linux resources a running `container` of `pod` (the pod as allocated) gets from an
    /// in-place resize: the same values CreateContainer would carry.
    pub fn linux_resources(
        &self,
        pod: &Pod,
        container: &Container,
        qos_class: crate::podspec::qos::QosClass,
    ) -> crate::cri::api::LinuxContainerResources {
        let hugepage_sizes: Vec<u64> = self
            .node
            .machine
            .hugepages
            .iter()
            .map(|(size, _)| *size)
            .collect();
        let volumes = std::collections::BTreeMap::new();
        let seccomp_root = self.settings.root_dir.join("seccomp");
        let ctx = ContainerContext {
            pod_ips: &[],
            host_ips: &self.node.host_ips,
            node_name: &self.node.name,
            node_allocatable: self.settings.node_allocatable,
            memory_capacity: self.node.memory_capacity(),
            qos_class,
            volumes: &volumes,
            image_volumes: &std::collections::BTreeMap::new(),
            etc_hosts: None,
            termination_message: None,
            restart_count: 0,
            attempt: 0,
            pid_target: None,
            cgroup_parent: "",
            node_name_label: &self.node.name,
            seccomp_profile_root: &seccomp_root,
            seccomp_default: self.settings.seccomp_default,
            recursive_read_only: false,
            cgroup_v2: self.settings.cgroup_v2,
            single_process_oom_kill: self.settings.single_process_oom_kill,
            memory_qos: self.settings.pod_cgroup.memory_qos,
            memory_qos_allocatable: self.settings.pod_cgroup.node_allocatable_memory,
            page_size: self.settings.pod_cgroup.page_size,
            hugepage_sizes: &hugepage_sizes,
            swap: crate::cgroup::swap::SwapNode {
                behavior: self.settings.swap_behavior,
                cgroup_v2: self.settings.cgroup_v2,
                controller: self.settings.swap_controller,
                memory_capacity: self.node.memory_capacity(),
                swap_capacity: self.node.machine.swap_capacity,
            },
        };
        super::container_config::container_resources(pod, container, &ctx)
    }

    /// The kubelet's `doBackOff`: a container whose newest exited instance finished less than
    /// its backoff ago waits (CrashLoopBackOff); otherwise the backoff advances and it starts.
    fn check_restart_backoff(
        &self,
        pod: &Pod,
        container: &Container,
        runtime: &PodRuntime,
        memory: &mut PodMemory,
    ) -> std::result::Result<(), (StartFailure, Option<Duration>)> {
        let Some(exited) = runtime
            .instances(&container.name)
            .find(|c| c.state == ContainerState::Exited)
        else {
            return Ok(());
        };
        let finished = exited.finished_at.unwrap_or(exited.created_at);
        // The kubelet's `GetStableKey`: the pod and the container's spec hash, so a new image
        // starts without the old one's back-off.
        let key = format!(
            "{}_{}_{}",
            format_pod(pod),
            container.name,
            super::container_config::container_hash(container)
        );
        let now = self.clock.now();
        if let Some(remaining) = memory.restart_backoff.remaining_since(&key, finished, now) {
            let delay = memory.restart_backoff.get(&key);
            self.events.container(
                pod,
                &container.name,
                EventType::Warning,
                "BackOff",
                format!(
                    "Back-off restarting failed container {} in pod {}",
                    container.name,
                    format_pod(pod)
                ),
            );
            return Err((
                StartFailure {
                    reason: "CrashLoopBackOff".into(),
                    message: format!(
                        "back-off {} restarting failed container={} pod={}",
                        format_duration(delay),
                        container.name,
                        format_pod(pod)
                    ),
                },
                Some(remaining),
            ));
        }
        memory.restart_backoff.next(&key, finished);
        Ok(())
    }

    /// Pulls the image as the container's imagePullPolicy says; returns the image as the
    /// runtime knows it (its ID), which is what the container is created from. Failed pulls
    /// back off per image (ImagePullBackOff).
    async fn ensure_image(
        &self,
        pod: &Pod,
        container: &Container,
        sandbox_config: &api::PodSandboxConfig,
        memory: &mut PodMemory,
    ) -> std::result::Result<api::Image, (StartFailure, Option<Duration>)> {
        self.ensure_image_as(
            pod,
            container.image.as_deref().unwrap_or_default(),
            image_pull_policy(container),
            Some(&container.name),
            sandbox_config,
            memory,
        )
        .await
    }

    /// The images of the image volumes `container` mounts, pulled as the kubelet's
    /// `getImageVolumes` pulls them (each by its `pullPolicy`, with the pod's pull secrets and
    /// the credential providers, the events on the pod, the same per-image back-off), as
    /// volume name → the CRI `ImageSpec` to mount. A volume whose image cannot be had fails
    /// the container with the pull's reason (`ErrImagePull`, `ImagePullBackOff`,
    /// `ErrImageNeverPull`), as the kubelet's `toKubeContainerImageVolumes`.
    async fn ensure_image_volumes(
        &self,
        pod: &Pod,
        container: &Container,
        sandbox_config: &api::PodSandboxConfig,
        handler: &str,
        memory: &mut PodMemory,
    ) -> std::result::Result<BTreeMap<String, api::ImageSpec>, (StartFailure, Option<Duration>)>
    {
        let mut out = BTreeMap::new();
        for (name, source) in crate::podspec::image_volume::mounted_by(pod, container) {
            let reference = crate::podspec::image_volume::reference(source);
            let image = self
                .ensure_image_as(
                    pod,
                    reference,
                    crate::podspec::image_volume::pull_policy(source),
                    None,
                    sandbox_config,
                    memory,
                )
                .await?;
            out.insert(
                name.to_string(),
                api::ImageSpec {
                    image: image.id,
                    user_specified_image: reference.to_string(),
                    runtime_handler: handler.to_string(),
                    ..Default::default()
                },
            );
        }
        Ok(out)
    }

    /// [`Self::ensure_image`] for `image` with pull policy `policy`; the events go to the
    /// container `container` names, or to the pod (image volumes).
    async fn ensure_image_as(
        &self,
        pod: &Pod,
        image: &str,
        policy: &str,
        container: Option<&str>,
        sandbox_config: &api::PodSandboxConfig,
        memory: &mut PodMemory,
    ) -> std::result::Result<api::Image, (StartFailure, Option<Duration>)> {
        let inspect = || async {
            self.images
                .image_status(image)
                .await
                .map_err(|e| StartFailure {
                    reason: "ImageInspectError".into(),
                    message: format!("Failed to inspect image {image:?}: {}", e.runtime_message()),
                })
        };
        let event = |type_, reason: &str, message: String| match container {
            Some(name) => self.events.container(pod, name, type_, reason, message),
            None => self.events.pod(pod, type_, reason, message),
        };
        let present = inspect()
            .await
            .inspect_err(|f| event(EventType::Warning, "InspectFailed", f.message.clone()))
            .map_err(|f| (f, None))?;
        match (policy, present) {
            ("Never", None) => {
                let message =
                    format!("Container image {image:?} is not present with pull policy of Never");
                event(EventType::Warning, "ErrImageNeverPull", message.clone());
                Err((
                    StartFailure {
                        reason: "ErrImageNeverPull".into(),
                        message,
                    },
                    None,
                ))
            }
            ("Never" | "IfNotPresent", Some(found)) => {
                event(
                    EventType::Normal,
                    "Pulled",
                    format!("Container image {image:?} already present on machine"),
                );
                Ok(found)
            }
            _ => {
                let key = format!("{}_{image}", pod_uid(pod));
                let now = self.clock.now();
                if let Some(remaining) = memory.image_backoff.remaining_since_update(&key, now) {
                    event(
                        EventType::Normal,
                        "BackOff",
                        format!("Back-off pulling image {image:?}"),
                    );
                    return Err((
                        StartFailure {
                            reason: "ImagePullBackOff".into(),
                            message: format!("Back-off pulling image {image:?}"),
                        },
                        Some(remaining),
                    ));
                }
                let credentials = self.pulls.credentials(pod, image).await;
                if !credentials.failed_secrets.is_empty() {
                    self.events.pod(
                        pod,
                        EventType::Warning,
                        "FailedToRetrieveImagePullSecret",
                        format!(
                            "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                            credentials.failed_secrets.join(", ")
                        ),
                    );
                }
                tracing::info!(image, "Pulling image");
                event(
                    EventType::Normal,
                    "Pulling",
                    format!("Pulling image {image:?}"),
                );
                match self
                    .pulls
                    .pull(image, &credentials.matching, sandbox_config)
                    .await
                {
                    Ok(pulled) => {
                        tracing::info!(
                            image,
                            seconds = pulled.pull_duration.as_secs_f64(),
                            "Successfully pulled image"
                        );
                        memory.image_backoff.reset(&key);
                        let found = inspect().await.map_err(|f| (f, None))?;
                        let size = found.as_ref().map_or(0, |i| i.size);
                        event(
                            EventType::Normal,
                            "Pulled",
                            format!(
                                "Successfully pulled image {image:?} in {} ({} including waiting). Image size: {size} bytes.",
                                format_duration(truncate_to_millis(pulled.pull_duration)),
                                format_duration(truncate_to_millis(pulled.total_duration)),
                            ),
                        );
                        Ok(found.unwrap_or(api::Image {
                            id: pulled.image_ref,
                            ..Default::default()
                        }))
                    }
                    Err(message) => {
                        event(
                            EventType::Warning,
                            "Failed",
                            format!("Failed to pull image {image:?}: {message}"),
                        );
                        memory.image_backoff.next(&key, self.clock.now());
                        Err((
                            StartFailure {
                                reason: "ErrImagePull".into(),
                                message,
                            },
                            Some(memory.image_backoff.get(&key)),
                        ))
                    }
                }
            }
        }
    }

    /// The kubelet's `getTargetID`: the runtime ID of the running container an ephemeral
    /// container's `targetContainerName` names (`None` without one, or for any other kind of
    /// container); an error, in the kubelet's words, when the target is not running.
    fn ephemeral_target(
        &self,
        pod: &Pod,
        container: &Container,
        kind: ContainerKind,
        runtime: &PodRuntime,
    ) -> std::result::Result<Option<String>, String> {
        if kind != ContainerKind::Ephemeral {
            return Ok(None);
        }
        let Some(target) = crate::podspec::ephemeral_containers(pod)
            .iter()
            .find(|e| e.name == container.name)
            .and_then(|e| e.target_container_name.as_deref())
            .filter(|t| !t.is_empty())
        else {
            return Ok(None);
        };
        runtime
            .latest(target)
            .filter(|c| c.state == ContainerState::Running)
            .map(|c| Some(c.id.clone()))
            .ok_or_else(|| format!("unable to find target container {target}"))
    }

    pub async fn start_container(
        &self,
        pod: &Pod,
        container: &Container,
        kind: ContainerKind,
        runtime: &PodRuntime,
        env: &StartEnv<'_>,
        memory: &mut PodMemory,
    ) -> Option<Duration> {
        let span = tracing::info_span!("container", container = %container.name);
        let result = self
            .try_start_container(pod, container, kind, runtime, env, memory)
            .instrument(span.clone())
            .await;
        let _guard = span.enter();
        match result {
            Ok(id) => {
                memory.start_failures.remove(&container.name);
                metrics().started_containers_total.inc();
                tracing::info!(container.id = %id, "Started container");
                self.events.container(
                    pod,
                    &container.name,
                    EventType::Normal,
                    "Started",
                    format!("Started container: {}", container.name),
                );
                None
            }
            Err((failure, retry)) => {
                // Start errors (not waits) get the kubelet's "Failed" event.
                if matches!(
                    failure.reason.as_str(),
                    "CreateContainerConfigError"
                        | "CreateContainerError"
                        | "RunContainerError"
                        | "ErrImagePull"
                        | "ImagePullBackOff"
                ) {
                    self.events.container(
                        pod,
                        &container.name,
                        EventType::Warning,
                        "Failed",
                        // Image errors are named by their reason (`Error: ErrImagePull`), the
                        // registry's message went in the event before.
                        if failure.reason.contains("Image") {
                            format!("Error: {}", failure.reason)
                        } else {
                            format!("Error: {}", failure.message)
                        },
                    );
                }
                tracing::warn!(reason = %failure.reason, message = %failure.message, "container failed to start");
                memory
                    .start_failures
                    .insert(container.name.clone(), failure);
                Some(retry.unwrap_or(SYNC_ERROR_RETRY))
            }
        }
    }

    async fn try_start_container(
        &self,
        pod: &Pod,
        container: &Container,
        kind: ContainerKind,
        runtime: &PodRuntime,
        env: &StartEnv<'_>,
        memory: &mut PodMemory,
    ) -> std::result::Result<String, (StartFailure, Option<Duration>)> {
        self.check_restart_backoff(pod, container, runtime, memory)?;
        let pid_target = self
            .ephemeral_target(pod, container, kind, runtime)
            .map_err(|message| {
                // Named by `start_container`'s Failed event, as the kubelet's.
                (
                    StartFailure {
                        reason: "CreateContainerConfigError".into(),
                        message,
                    },
                    None,
                )
            })?;
        let image = self
            .ensure_image(pod, container, env.sandbox_config, memory)
            .await?;
        // The handler the pod's sandbox runs under (its RuntimeClass's; the sandbox could not
        // have been created had it not resolved), for the features it declared.
        let handler =
            crate::objects::pod_runtime_handler(self.objects.as_ref(), pod).unwrap_or_default();
        // What the runtime cannot mount is never handed to it (an ephemeral container is
        // checked only here; the pod's own containers were at admission too).
        crate::podspec::image_volume::check_container(pod, container, &self.settings.image_volumes)
            .map_err(|refusal| {
                (
                    StartFailure {
                        reason: "CreateContainerConfigError".into(),
                        message: refusal.to_string(),
                    },
                    None,
                )
            })?;
        let image_volumes = self
            .ensure_image_volumes(pod, container, env.sandbox_config, &handler, memory)
            .await?;
        let no_retry = |f: StartFailure| (f, None);
        verify_run_as_non_root(
            pod,
            container,
            image.uid.as_ref().map(|u| u.value),
            &image.username,
        )
        .map_err(|e| StartFailure {
            reason: "CreateContainerConfigError".into(),
            message: e.to_string(),
        })
        .map_err(no_retry)?;
        let uid = pod_uid(pod);
        let log_dir = container_log_dir(
            &self.settings.pod_logs_dir,
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default(),
            uid,
            &container.name,
        );
        // After an in-place restart of the pod the old instances are gone; counting goes on.
        // Without either (init containers purged with their sandbox, a runtime that lost its
        // state), the log files left say how far it went, so the new instance's log does not
        // append to an old one's.
        let known = runtime
            .latest(&container.name)
            .map(|c| c.restart_count.saturating_add(1))
            .or_else(|| {
                memory
                    .restart_count_base
                    .get(&container.name)
                    .map(|b| b.saturating_add(1))
            });
        let restart_count = match known {
            Some(count) => count,
            None => {
                let dir = log_dir.clone();
                tokio::task::spawn_blocking(move || {
                    crate::logs::paths::restart_count_from_log_dir(&dir)
                })
                .await
                .unwrap_or(0)
            }
        };
        let termination_message =
            volume::termination_message_file(&self.settings.root_dir, uid, &container.name).ok();
        std::fs::create_dir_all(&log_dir)
            .map_err(|e| StartFailure {
                reason: "CreateContainerConfigError".into(),
                message: format!("creating log directory {}: {e}", log_dir.display()),
            })
            .map_err(no_retry)?;
        let seccomp_root = self.settings.root_dir.join("seccomp");
        let cgroup_parent = env
            .sandbox_config
            .linux
            .as_ref()
            .map(|l| l.cgroup_parent.clone())
            .unwrap_or_default();
        let hugepage_sizes: Vec<u64> = self
            .node
            .machine
            .hugepages
            .iter()
            .map(|(size, _)| *size)
            .collect();
        let ctx = ContainerContext {
            pod_ips: env.pod_ips,
            host_ips: &self.node.host_ips,
            node_name: &self.node.name,
            node_allocatable: self.settings.node_allocatable,
            memory_capacity: self.node.memory_capacity(),
            qos_class: env.qos_class,
            volumes: env.volumes,
            image_volumes: &image_volumes,
            etc_hosts: env.etc_hosts,
            termination_message: termination_message.as_deref(),
            restart_count,
            attempt: u32::try_from(restart_count).unwrap_or(0),
            cgroup_parent: &cgroup_parent,
            node_name_label: &self.node.name,
            seccomp_profile_root: &seccomp_root,
            seccomp_default: self.settings.seccomp_default,
            recursive_read_only: self.settings.runtime_features.recursive_read_only(&handler),
            cgroup_v2: self.settings.cgroup_v2,
            single_process_oom_kill: self.settings.single_process_oom_kill,
            memory_qos: self.settings.pod_cgroup.memory_qos,
            memory_qos_allocatable: self.settings.pod_cgroup.node_allocatable_memory,
            page_size: self.settings.pod_cgroup.page_size,
            hugepage_sizes: &hugepage_sizes,
            swap: crate::cgroup::swap::SwapNode {
                behavior: self.settings.swap_behavior,
                cgroup_v2: self.settings.cgroup_v2,
                controller: self.settings.swap_controller,
                memory_capacity: self.node.memory_capacity(),
                swap_capacity: self.node.machine.swap_capacity,
            },
            pid_target: pid_target.as_deref(),
        };
        let env_objects = super::env_objects::gather_env_objects(
            pod,
            container,
            self.objects.as_ref(),
            &volume::pod_dir(&self.settings.root_dir, uid),
        )
        .await;
        for invalid in env::invalid_env_from_keys(pod, container, &env_objects) {
            self.events.container(
                pod,
                &container.name,
                EventType::Warning,
                env::InvalidEnvFromKeys::REASON,
                invalid.message(),
            );
        }
        let config_error = |e: crate::podspec::ConfigError| StartFailure {
            reason: "CreateContainerConfigError".into(),
            message: e.to_string(),
        };
        let built = container_config_with_env(pod, container, kind, &ctx, &env_objects)
            .map_err(config_error)
            .map_err(no_retry)?;
        let mut config = built.config;
        // The images its image volumes mount, for image GC (`gc::CriGc::images_in_use`): the
        // runtime lists the container with its labels whatever nodelet remembers.
        if let Some(value) = crate::cri::labels::image_volumes_label(
            image_volumes.values().map(|spec| spec.image.as_str()),
        ) {
            config
                .labels
                .insert(crate::cri::labels::IMAGE_VOLUMES.to_string(), value);
        }
        // A pod of its own user namespace: each container joins it with the sandbox's mappings.
        if let Some(ns) = super::sandbox_config::sandbox_user_namespace(env.sandbox_config) {
            if let Some(options) = config
                .linux
                .as_mut()
                .and_then(|l| l.security_context.as_mut())
                .and_then(|s| s.namespace_options.as_mut())
            {
                options.userns_options = Some(ns.clone());
            }
        }
        // subPaths are opened beneath their volumes and bind-mounted under the pod directory;
        // the runtime gets those pinned mounts, detached again once StartContainer returned.
        let pinned = volume::subpath::prepare_sub_paths(
            &volume::pod_dir(&self.settings.root_dir, uid),
            &mut config.mounts,
            &built.sub_paths,
        )
        .map_err(config_error)
        .map_err(no_retry)?;
        // Create from the resolved image, as the kubelet does, keeping what the user wrote.
        if !image.id.is_empty() {
            config.image = Some(api::ImageSpec {
                image: image.id.clone(),
                user_specified_image: container.image.clone().unwrap_or_default(),
                ..config.image.unwrap_or_default()
            });
        }
        // CreateContainer and StartContainer run to their end once begun (see RuntimeWrites).
        let writes = memory.runtime_writes.enter().await;
        let log_file = Path::new(&env.sandbox_config.log_directory).join(&config.log_path);
        let id = self
            .runtime
            .create_container(env.sandbox_id, config, env.sandbox_config.clone())
            .await
            .map_err(|e| StartFailure {
                reason: "CreateContainerError".into(),
                message: e.runtime_message(),
            })
            .map_err(no_retry)?;
        tracing::info!(container.id = %id, "Created container");
        self.events.container(
            pod,
            &container.name,
            EventType::Normal,
            "Created",
            format!("Created container: {}", container.name),
        );
        self.runtime
            .start_container(&id)
            .await
            .map_err(|e| StartFailure {
                reason: "RunContainerError".into(),
                message: e.runtime_message(),
            })
            .map_err(no_retry)?;
        drop(writes);
        // The kubelet's `/var/log/containers` link, for log shippers; a failure is logged, as
        // the kubelet's, and GC removes the link once the log is gone.
        let link = crate::logs::links::link_path(
            &self.settings.container_log_links_dir,
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            &container.name,
            &id,
        );
        if let Err(e) = crate::logs::links::create_link(&log_file, &link) {
            tracing::warn!(path = %link.display(), error = %e, "creating the container's log link");
        }
        // The container holds its own copies of the bind mounts now.
        if let Err(e) = pinned.release() {
            tracing::warn!(error = %e, "releasing subPath bind mounts");
        }
        if let Some(hook) = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref())
        {
            // The next container of the pod starts only once this hook is done.
            let pod_ip = env.pod_ips.first().map(String::as_str);
            if let Err(e) = run_hook(
                self.runtime.as_ref(),
                pod,
                container,
                &id,
                hook,
                pod_ip,
                None,
            )
            .await
            {
                tracing::warn!(error = %e, "FailedPostStartHook");
                // Like the kubelet, the event does not carry the hook's output (it may hold secrets).
                self.events.container(
                    pod,
                    &container.name,
                    EventType::Warning,
                    "FailedPostStartHook",
                    "PostStartHook failed",
                );
                let instance = crate::cri::RuntimeContainer {
                    id: id.clone(),
                    name: container.name.clone(),
                    sandbox_id: env.sandbox_id.to_string(),
                    state: ContainerState::Running,
                    created_at: self.clock.now(),
                    restart_count,
                    ..Default::default()
                };
                self.stopper
                    .kill_container(
                        pod,
                        &instance,
                        Kill {
                            reason: StopReason::Other,
                            message: "FailedPostStartHook",
                            grace: KillGrace::Own(None),
                            pod_ip,
                            ordering: None,
                        },
                    )
                    .await;
                return Err((
                    StartFailure {
                        reason: "PostStartHookError".into(),
                        message: e.to_string(),
                    },
                    None,
                ));
            }
        }
        Ok(id)
    }
}
