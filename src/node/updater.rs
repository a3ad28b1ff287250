//! The node status loop (the kubelet's `syncNodeStatus` / `tryUpdateNodeStatus`).
//!
//! Every `nodeStatusUpdateFrequency` the status is computed against the Node the API server
//! has; it is PATCHed (status subresource, strategic merge) only when something besides the
//! heartbeat times changed, or when the last report is `nodeStatusReportFrequency` old. The
//! Lease is what says "alive" in between, so a steady node costs one GET per update period and
//! one PATCH per report period.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerImage, Node, NodeStatus};
use kube::api::{Api, GetParams, Patch, PatchParams};
use tokio::time::Instant;

use super::status::{node_images, node_status_changed, node_status_events, status_patch};
use super::{api_call, Error, NodeCounters};
use crate::cri::ImageService;
use crate::events::{node_ref, EventRecorder};

/// Immediate attempts per update period (`nodeStatusUpdateRetry`).
pub const NODE_STATUS_UPDATE_RETRY: usize = 5;

/// Whether to PATCH: on a change, on the first report, or when the last report is
/// `report_frequency` old.
pub fn should_patch(
    changed: bool,
    last_report: Option<Instant>,
    now: Instant,
    report_frequency: Duration,
) -> bool {
    changed
        || last_report.is_none_or(|last| now.saturating_duration_since(last) >= report_frequency)
}

/// What one attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateOutcome {
    Patched,
    Unchanged,
}

/// Computes the status to report from the API server's current one and the node's images
/// (`None`: unknown this time, keep the reported list; see
/// [`super::status::build_node_status`]).
pub type StatusFn =
    Arc<dyn Fn(Option<&NodeStatus>, Option<&[ContainerImage]>) -> NodeStatus + Send + Sync>;

/// Where the node's image list comes from, and how many images to report.
#[derive(Clone)]
pub struct ImageSource {
    pub service: Arc<dyn ImageService>,
    /// `nodeStatusMaxImages`; `None` reports all.
    pub max_images: Option<u32>,
}

pub struct NodeStatusUpdater {
    nodes: Api<Node>,
    node_name: String,
    report_frequency: Duration,
    timeout: Duration,
    compute: StatusFn,
    counters: Arc<NodeCounters>,
    last_report: Option<Instant>,
    images: Option<ImageSource>,
    events: Option<EventRecorder>,
}

impl NodeStatusUpdater {
    pub fn new(
        client: kube::Client,
        node_name: &str,
        report_frequency: Duration,
        timeout: Duration,
        compute: StatusFn,
        counters: Arc<NodeCounters>,
    ) -> NodeStatusUpdater {
        NodeStatusUpdater {
            nodes: Api::all(client),
            node_name: node_name.to_string(),
            report_frequency,
            timeout,
            compute,
            counters,
            last_report: None,
            images: None,
            events: None,
        }
    }

    /// Reports the runtime's images in `status.images`.
    pub fn with_images(mut self, images: Option<ImageSource>) -> Self {
        self.images = images;
        self
    }

    /// Records the node's events (`NodeReady`, `NodeHasSufficientMemory`, `Rebooted`, ...)
    /// when a reported status changes them.
    pub fn with_events(mut self, events: Option<EventRecorder>) -> Self {
        self.events = events;
        self
    }

    /// The images to report, or `None` (keep the reported ones) when the runtime does not
    /// answer: a slow image service must not hold up the node's heartbeat.
    async fn list_images(&self) -> Option<Vec<ContainerImage>> {
        let source = self.images.as_ref()?;
        match tokio::time::timeout(self.timeout, source.service.list_images()).await {
            Ok(Ok(images)) => Some(node_images(&images, source.max_images)),
            Ok(Err(error)) => {
                tracing::warn!(%error, "error getting image list");
                None
            }
            Err(_) => {
                tracing::warn!(timeout = ?self.timeout, "error getting image list: no answer");
                None
            }
        }
    }

    /// One attempt (`tryUpdateNodeStatus`). The first attempt of a period may read the API
    /// server's cache (`resourceVersion=0`), retries read the latest, as the kubelet does.
    pub async fn try_update(&mut self, attempt: usize) -> Result<UpdateOutcome, Error> {
        let params = if attempt == 0 {
            GetParams::any()
        } else {
            GetParams::default()
        };
        let node = api_call(self.timeout, self.nodes.get_with(&self.node_name, &params))
            .await
            .map_err(|e| e.context(format!("error getting node {:?}", self.node_name)))?;
        let original = node.status.unwrap_or_default();
        let images = self.list_images().await;
        let new = (self.compute)(Some(&original), images.as_deref());
        let changed = node_status_changed(&original, &new);
        let now = Instant::now();
        if !should_patch(changed, self.last_report, now, self.report_frequency) {
            return Ok(UpdateOutcome::Unchanged);
        }
        let patch = status_patch(&original, &new);
        api_call(
            self.timeout,
            self.nodes.patch_status(
                &self.node_name,
                &PatchParams::default(),
                &Patch::Strategic(patch),
            ),
        )
        .await
        .map_err(|e| e.context(format!("patching status of node {:?}", self.node_name)))?;
        self.counters.status_patches.fetch_add(1, Ordering::Relaxed);
        if let Some(recorder) = &self.events {
            // Events follow what was reported, so a failed PATCH announces nothing.
            let first_report = self.last_report.is_none();
            for event in node_status_events(&original, &new, &self.node_name, first_report) {
                recorder.record(
                    &node_ref(&self.node_name),
                    event.type_,
                    event.reason,
                    event.message,
                );
            }
        }
        self.last_report = Some(now);
        Ok(UpdateOutcome::Patched)
    }

    /// Up to [`NODE_STATUS_UPDATE_RETRY`] attempts (`updateNodeStatus`).
    pub async fn update(&mut self) -> Result<UpdateOutcome, Error> {
        let mut last_error = None;
        for attempt in 0..NODE_STATUS_UPDATE_RETRY {
            match self.try_update(attempt).await {
                Ok(outcome) => return Ok(outcome),
                Err(error) => {
                    tracing::warn!(%error, "error updating node status, will retry");
                    last_error = Some(error);
                }
            }
        }
        Err(last_error
            .unwrap_or(Error::Other {
                context: String::new(),
            })
            .context("update node status exceeds retry count".to_string()))
    }
}
