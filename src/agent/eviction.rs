//! The eviction manager's effects over nodelet's parts: the admitted pods that are not
//! finished (pod manager + status manager + workers), and node-level reclaim through the
//! housekeeping GC (every dead container, then unused images).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

use crate::eviction::manager::NodeReclaim;
use crate::gc::containers::ContainerGc;
use crate::gc::images::ImageGc;
use crate::lifecycle::pods::ActivePods;
use crate::pod::workers::PodWorkers;
use crate::podspec::{pod_uid, Phase};
use crate::status::StatusManager;

/// The kubelet's `GetActivePods`: admitted, running here (a worker), not terminal.
pub(super) struct AdmittedPods {
    pub pods: watch::Receiver<Vec<Arc<Pod>>>,
    pub status: StatusManager,
    pub workers: PodWorkers,
}

impl ActivePods for AdmittedPods {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.pods
            .borrow()
            .iter()
            .filter(|p| self.workers.has_worker(pod_uid(p)))
            .filter(|p| !Phase::is_terminal_status(self.status.status(pod_uid(p)).as_ref()))
            .cloned()
            .collect()
    }
}

/// `DeleteAllUnusedContainers` and `DeleteUnusedImages` over the housekeeping GC.
pub(super) struct GcReclaim {
    /// Container GC keeping no dead instance (the kubelet's reclaim removes them all).
    pub containers: ContainerGc,
    pub images: Arc<ImageGc>,
}

#[async_trait::async_trait]
impl NodeReclaim for GcReclaim {
    async fn delete_unused_containers(&self) {
        match self.containers.garbage_collect().await {
            Ok(r) => tracing::info!(
                containers = r.containers,
                sandboxes = r.sandboxes,
                "eviction: node-level reclaim removed dead containers"
            ),
            Err(e) => tracing::warn!(error = %e, "eviction: removing dead containers"),
        }
    }

    async fn delete_unused_images(&self) {
        match self.images.free_space(u64::MAX).await {
            Ok(r) => tracing::info!(
                images = r.removed.len(),
                bytes = r.bytes_freed,
                "eviction: node-level reclaim removed unused images"
            ),
            Err(e) => tracing::warn!(error = %e, "eviction: removing unused images"),
        }
    }
}
