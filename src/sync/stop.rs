//! Stopping containers and pods: the kubelet's `killContainer` (grace period by precedence,
//! preStop hook counted against it, the stop signal, SIGKILL after the rest of the period) and
//! `killPodWithSyncResult` (every container in parallel, then the sandboxes), plus the final
//! removal of a pod nodelet forgets.

use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Container, Pod};

use super::executor::{pod_uid, removed, PodMemory, PodSyncer, Result};
use super::hooks::run_hook;
use super::kill::{
    stop_timeout_after_hook, termination_grace_period, StopReason, TerminationOrdering,
};
use crate::cri::containerd::parse_signal;
use crate::cri::{api, ContainerState, PodRuntime, RuntimeContainer};
use crate::events::EventType;
use crate::podspec::{init_containers, regular_containers};
use crate::volume;

/// How often to look whether a container signalled with its own stop signal has exited.
const STOP_POLL: Duration = Duration::from_millis(100);

fn spec_of<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    regular_containers(pod)
        .iter()
        .chain(init_containers(pod))
        .find(|c| c.name == name)
}

/// How to stop one container.
pub struct Kill<'a> {
    pub reason: StopReason,
    /// The Killing event's message; empty gives "Stopping container <name>".
    pub message: &'a str,
    /// Replaces every grace period (force delete, in-place restart).
    pub grace_override: Option<Duration>,
    /// The pod's IP, for httpGet preStop hooks.
    pub pod_ip: Option<&'a str>,
    /// Termination order of the whole pod (sidecars after regular containers).
    pub ordering: Option<&'a TerminationOrdering>,
}

impl PodSyncer {
    /// Stops one container: Killing is logged, the preStop hook (if any, and if there is time)
    /// runs first and its time counts against the grace period, then the stop signal is sent and
    /// SIGKILL follows after what is left (at least 2 s, unless the grace period is 0).
    pub async fn kill_container(&self, pod: &Pod, container: &RuntimeContainer, kill: Kill<'_>) {
        let Kill {
            reason,
            message,
            grace_override,
            pod_ip,
            ordering,
        } = kill;
        let spec = spec_of(pod, &container.name);
        let grace = termination_grace_period(pod, spec, reason, grace_override);
        let message = if message.is_empty() {
            format!("Stopping container {}", container.name)
        } else {
            message.to_string()
        };
        tracing::info!(container = %container.name, grace_seconds = grace.as_secs(), %message, "Killing");
        self.container_event(
            pod,
            &container.name,
            EventType::Normal,
            "Killing",
            message.clone(),
        );
        let mut hook_ran = Duration::ZERO;
        let pre_stop = spec.and_then(|c| c.lifecycle.as_ref()?.pre_stop.as_ref());
        if let (Some(c), Some(hook)) = (spec, pre_stop) {
            if !grace.is_zero() && container.state == ContainerState::Running {
                let started = tokio::time::Instant::now();
                let run = run_hook(
                    self.runtime.as_ref(),
                    pod,
                    c,
                    &container.id,
                    hook,
                    pod_ip,
                    Some(grace),
                );
                // The hook gets at most the grace period; a hook that outlives it is abandoned.
                match tokio::time::timeout(grace, run).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(container = %container.name, error = %e, "FailedPreStopHook");
                        self.container_event(
                            pod,
                            &container.name,
                            EventType::Warning,
                            "FailedPreStopHook",
                            "PreStopHook failed",
                        );
                    }
                    Err(_) => {
                        tracing::warn!(container = %container.name, grace_seconds = grace.as_secs(), "preStop hook did not finish within the grace period");
                    }
                }
                hook_ran = started.elapsed();
            }
        }
        // Sidecars wait for their turn (every regular container, then the sidecars after
        // them), within what is left of the grace period.
        let mut waited = Duration::ZERO;
        if let Some(o) = ordering {
            let left = grace.saturating_sub(Duration::from_secs(hook_ran.as_secs()));
            waited = o.wait_for_turn(&container.name, left).await;
        }
        let timeout = stop_timeout_after_hook(grace, hook_ran + waited);
        let stop_signal = spec
            .and_then(|c| c.lifecycle.as_ref()?.stop_signal.as_deref())
            .and_then(parse_signal);
        if let (Some(signal), Some(tasks), false) = (stop_signal, &self.tasks, timeout.is_zero()) {
            self.stop_with_signal(container, signal, timeout, tasks.as_ref())
                .await;
        } else {
            self.stop_container(&container.id, &container.name, timeout)
                .await;
        }
        if let Some(o) = ordering {
            o.container_terminated(&container.name);
        }
    }

    /// `lifecycle.stopSignal`: the CRI of containerd 1.6 always sends the image's STOPSIGNAL, so
    /// nodelet sends the pod's signal itself, waits up to `timeout` for the exit, then has the
    /// runtime SIGKILL what is left.
    async fn stop_with_signal(
        &self,
        container: &RuntimeContainer,
        signal: i32,
        timeout: Duration,
        tasks: &dyn crate::cri::containerd::TaskSignaller,
    ) {
        tracing::info!(container = %container.name, signal, "sending the container's stopSignal");
        if let Err(e) = tasks.signal(&container.id, signal).await {
            if !e.is_not_found() {
                tracing::warn!(container = %container.name, error = %e, "sending stopSignal; stopping with the runtime's signal");
            }
            self.stop_container(&container.id, &container.name, timeout)
                .await;
            return;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            match self.runtime.container_status(&container.id).await {
                Ok(s) if s.state == api::ContainerState::ContainerRunning as i32 => {}
                _ => break,
            }
            tokio::time::sleep(STOP_POLL.min(deadline - tokio::time::Instant::now())).await;
        }
        self.stop_container(&container.id, &container.name, Duration::ZERO)
            .await;
    }

    async fn stop_container(&self, id: &str, name: &str, timeout: Duration) {
        match self.runtime.stop_container(id, timeout).await {
            Ok(()) => {
                tracing::info!(container = %name, timeout_seconds = timeout.as_secs(), "Stopped container")
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => tracing::warn!(container = %name, error = %e, "stopping container"),
        }
    }

    /// Stops every live container of the pod in parallel (each with its own grace period and
    /// preStop hook), then every ready sandbox.
    pub async fn kill_pod(
        &self,
        pod: &Pod,
        runtime: &PodRuntime,
        grace_override: Option<Duration>,
    ) {
        let pod_ip = runtime.sandbox().and_then(|s| s.ips.first().cloned());
        let live: Vec<&RuntimeContainer> = runtime
            .containers
            .iter()
            .filter(|c| {
                matches!(
                    c.state,
                    ContainerState::Running | ContainerState::Unknown | ContainerState::Created
                )
            })
            .collect();
        let names: Vec<&str> = live.iter().map(|c| c.name.as_str()).collect();
        let ordering = TerminationOrdering::new(pod, &names);
        let stops = live.iter().map(|c| {
            self.kill_container(
                pod,
                c,
                Kill {
                    reason: StopReason::PodTermination,
                    message: "",
                    grace_override,
                    pod_ip: pod_ip.as_deref(),
                    ordering: Some(&ordering),
                },
            )
        });
        join_all(stops).await;
        for sandbox in runtime.sandboxes.iter().filter(|s| s.ready) {
            match self.runtime.stop_pod_sandbox(&sandbox.id).await {
                Ok(()) => tracing::info!(sandbox.id = %sandbox.id, "Stopped pod sandbox"),
                Err(e) if e.is_not_found() => {}
                Err(e) => tracing::warn!(sandbox.id = %sandbox.id, error = %e, "stopping sandbox"),
            }
        }
    }

    /// Terminates the pod: kills what runs (`grace_override` replaces the pod's own grace
    /// periods) and publishes the final status.
    pub async fn terminate(
        &self,
        pod: &Pod,
        grace_override: Option<Duration>,
        memory: &PodMemory,
    ) -> Result<()> {
        let uid = pod_uid(pod).to_string();
        // Liveness and startup probes stop now; readiness keeps reporting until the end.
        self.probes.pod_terminating(&uid);
        let runtime = self.inspect(&uid).await?;
        self.kill_pod(pod, &runtime, grace_override).await;
        let runtime = self.inspect(&uid).await?;
        self.publish_status(pod, &runtime, memory, true);
        self.probes.remove_pod(&uid);
        self.pod_cgroup_terminated(pod).await;
        Ok(())
    }

    /// After a deletion through the API: removes what the runtime holds for the pod and its
    /// volumes, keeping its status, and tells the status manager the resources are reclaimed
    /// (which lets the final DELETE go out).
    pub async fn reclaim(&self, pod: &Pod) -> Result<()> {
        self.remove_runtime_objects(pod).await?;
        self.status.set_reclaimed(pod_uid(pod));
        Ok(())
    }

    /// Removes everything the runtime still holds for the pod, its volumes, its logs and its
    /// status.
    pub async fn remove(&self, pod: &Pod) -> Result<()> {
        self.remove_runtime_objects(pod).await?;
        let uid = pod_uid(pod);
        self.probes.remove_pod(uid);
        self.status.remove(uid);
        tracing::info!("pod removed");
        Ok(())
    }

    async fn remove_runtime_objects(&self, pod: &Pod) -> Result<()> {
        let uid = pod_uid(pod).to_string();
        let runtime = self.inspect(&uid).await?;
        for c in &runtime.containers {
            removed(
                self.runtime.remove_container(&c.id).await,
                &uid,
                "RemoveContainer",
            )?;
        }
        for s in &runtime.sandboxes {
            // StopPodSandbox before RemovePodSandbox, as the CRI asks; both are idempotent.
            let _ = self.runtime.stop_pod_sandbox(&s.id).await;
            removed(
                self.runtime.remove_pod_sandbox(&s.id).await,
                &uid,
                "RemovePodSandbox",
            )?;
        }
        self.remove_pod_cgroup(pod).await;
        if let Err(e) = volume::cleanup_pod_dir(&self.settings.root_dir, &uid) {
            tracing::warn!(error = %e, "cleaning up pod directory");
        }
        if let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) {
            let logs =
                super::sandbox_config::pod_log_dir(&self.settings.pod_logs_dir, ns, name, &uid);
            if let Err(e) = std::fs::remove_dir_all(&logs) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(path = %logs.display(), error = %e, "removing pod logs");
                }
            }
        }
        Ok(())
    }
}
