//! The pod's sandbox and what comes and goes with it: its log directory and cgroup before it is
//! created, and everything the runtime and the node hold for the pod when it is removed.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::error::{removed, Error, Result};
use super::plan::PodPlan;
use super::settings::SyncSettings;
use crate::cri::{api, PodRuntime, Runtime};
use crate::logs::paths::pod_log_dir;
use crate::metrics::metrics;
use crate::podspec::pod_uid;
use crate::volume;

/// Creates and removes pod sandboxes, pod cgroups and pod directories; owns nothing else.
#[derive(Clone)]
pub struct PodSandboxes {
    pub runtime: Arc<dyn Runtime>,
    pub settings: Arc<SyncSettings>,
}

impl PodSandboxes {
    /// The pod's log directory and cgroup, then RunPodSandbox with `runtime_handler` (its
    /// RuntimeClass's; `""`: the runtime's default); returns the sandbox's ID.
    pub async fn create(
        &self,
        pod: &Pod,
        plan: &PodPlan,
        config: api::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
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
        self.ensure_pod_cgroup(pod, plan).await?;
        tracing::info!(runtime_handler, "creating pod sandbox");
        let id = self
            .runtime
            .run_pod_sandbox(config, runtime_handler)
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
    /// (and its QoS tier counting it). A failure keeps the pod from starting, as the kubelet's
    /// (`FailedCreatePodContainer`): it would run without its pod-level limits.
    pub async fn ensure_pod_cgroup(&self, pod: &Pod, plan: &PodPlan) -> Result<()> {
        let (Some(cgroups), Some(planned)) = (&self.settings.cgroups, &plan.pod_cgroup) else {
            return Ok(());
        };
        match cgroups
            .ensure_pod_with(pod_uid(pod), planned.share, &planned.name, &planned.config)
            .await
        {
            Ok(()) => {
                tracing::debug!(
                    cgroup = %cgroups.manager().literal(&planned.name),
                    config = ?planned.config,
                    "pod cgroup configured"
                );
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "configuring the pod cgroup");
                Err(Error::PodCgroup {
                    uid: pod_uid(pod).to_string(),
                    message: e.to_string(),
                })
            }
        }
    }

    /// The pod's containers are stopped: its QoS tier stops counting it.
    pub async fn pod_cgroup_terminated(&self, pod: &Pod) {
        let Some(cgroups) = &self.settings.cgroups else {
            return;
        };
        if let Err(e) = cgroups.pod_terminated(pod_uid(pod)).await {
            tracing::warn!(error = %e, "updating the QoS tiers");
        }
    }

    /// Removes the pod's cgroup once its sandbox is gone.
    async fn remove_pod_cgroup(&self, pod: &Pod) {
        let Some(cgroups) = &self.settings.cgroups else {
            return;
        };
        if let Err(e) = cgroups.remove_pod(pod).await {
            tracing::warn!(error = %e, "removing the pod cgroup");
        }
    }

    /// Removes everything `runtime` holds for the pod (containers, then sandboxes), its cgroup,
    /// its volumes and its logs.
    pub async fn remove_pod(&self, pod: &Pod, runtime: &PodRuntime) -> Result<()> {
        let uid = pod_uid(pod).to_string();
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
        // CSI volumes first, through their drivers; while one cannot be unpublished (its
        // driver is away) the directory stays, and container GC retries both.
        if let Some(csi) = &self.settings.csi_volumes {
            if let Err(e) = csi.unmount_pod(&uid).await {
                tracing::warn!(error = %e, "unmounting the pod's CSI volumes");
                return Ok(());
            }
        }
        // Off the async runtime: the unmounts and the rename into the trash are a few
        // syscalls, but on a blocking thread whatever the kernel makes of them.
        let (root, trash, pod_uid) = (
            self.settings.root_dir.clone(),
            self.settings.trash.clone(),
            uid.clone(),
        );
        let cleaned =
            tokio::task::spawn_blocking(move || volume::cleanup_pod_dir(&root, &pod_uid, &trash))
                .await;
        match cleaned {
            // The range is free once the directory with its mapping file is gone; a directory
            // that stays keeps it until the orphan-directory cleanup removes it.
            Ok(Ok(())) => {
                if let Some(userns) = &self.settings.userns {
                    userns.release(&uid);
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cleaning up pod directory"),
            Err(e) => tracing::warn!(error = %e, "cleaning up pod directory: the task failed"),
        }
        if let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) {
            let logs = pod_log_dir(&self.settings.pod_logs_dir, ns, name, &uid);
            // A handful of files (the runtime writes them, rotation bounds them), still I/O.
            let removed = tokio::task::spawn_blocking(move || {
                let removed = std::fs::remove_dir_all(&logs);
                (logs, removed)
            })
            .await;
            if let Ok((logs, Err(e))) = removed {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(path = %logs.display(), error = %e, "removing pod logs");
                }
            }
        }
        Ok(())
    }
}
