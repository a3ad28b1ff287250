//! The node status loop (the kubelet's `syncNodeStatus` / `tryUpdateNodeStatus`).
//!
//! Every `nodeStatusUpdateFrequency` the status is computed on top of the Node the API server
//! has; it is PATCHed (status subresource, strategic merge) when it differs from what nodelet
//! last wrote, when the server's copy differs from it (someone else changed it), or when the
//! last report is `nodeStatusReportFrequency` old. The Lease is what says "alive" in between.
//!
//! As the kubelet's informer, the first try of each period reads the Node from a watch of it
//! ([`super::watch`]), not from the API server, once that watch has delivered the last
//! resourceVersion nodelet knew (its last PATCH's answer or GET's, [`node_read`]); a retry, or
//! a watch that is behind, GETs it. So a steady node costs one PATCH per report period and no
//! read at all.
//!
//! Unlike the kubelet, a difference the server's copy still shows after a successful PATCH (a
//! server that drops or normalizes a field) is not written again at every update: it backs off
//! from the update period, doubling, up to [`CONVERGENCE_BACKOFF_MAX`], and is logged once by
//! field path ([`crate::cluster::convergence`]). Fields the server's release does not have are
//! not sent ([`crate::cluster::api_fields`]).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerImage, Node, NodeStatus};
use kube::api::{Api, GetParams, Patch, PatchParams};
use tokio::time::Instant;

use super::status::{
    node_images, node_status_changed, node_status_differences, node_status_events, status_patch,
};
use super::{api_call, Error, NodeCounters};
use crate::cluster::api_fields::strip_node_status;
use crate::cluster::convergence::{after_write, decide_write, NonConvergence, WriteDecision};
use crate::cluster::{ApiServerVersion, Release};
use crate::cri::ImageService;
use crate::events::{node_ref, EventRecorder};
use crate::metrics::metrics;

/// The longest wait between writes of a node status difference that writing does not remove
/// (the default `nodeStatusReportFrequency`, which writes anyway).
pub const CONVERGENCE_BACKOFF_MAX: Duration = Duration::from_secs(300);

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

/// The watch of the node's own Node as one attempt finds it ([`super::watch::Watched::read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchedNode {
    /// The watch holds a copy of the Node (with a resourceVersion).
    pub has_copy: bool,
    /// The watch is current: listed, not failed since its last answer.
    pub live: bool,
    /// The watch has delivered the last resourceVersion nodelet knew (or nodelet knows none):
    /// its copy is at least as new as anything nodelet read or wrote.
    pub caught_up: bool,
}

/// Where one attempt reads the Node from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRead {
    /// The watched copy: no request.
    Watched,
    /// GET from the API server's cache (`resourceVersion=0`), the kubelet's first try without
    /// an informer.
    ApiCache,
    /// GET the latest (a quorum read).
    Latest,
}

/// Where attempt `attempt` of a period reads the Node: a retry always reads the latest (the
/// last copy was stale: the write conflicted or failed); the first try reads the watched copy
/// when the watch is current and has caught up with what nodelet last knew; when it has not
/// (nodelet's own PATCH not delivered yet) the latest, since the server's cache may lag as
/// well; without a current watch (none, not listed yet, failing, or no Node in it) from the
/// API server's cache, as before the watch.
pub fn node_read(attempt: usize, watched: Option<WatchedNode>) -> NodeRead {
    if attempt > 0 {
        return NodeRead::Latest;
    }
    match watched {
        Some(w) if w.live && w.has_copy => {
            if w.caught_up {
                NodeRead::Watched
            } else {
                NodeRead::Latest
            }
        }
        _ => NodeRead::ApiCache,
    }
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

/// The node's taints as last read from the API server, for whoever admits pods.
pub type NodeTaints = Arc<tokio::sync::watch::Sender<Vec<k8s_openapi::api::core::v1::Taint>>>;

pub struct NodeStatusUpdater {
    client: kube::Client,
    nodes: Api<Node>,
    node_name: String,
    update_frequency: Duration,
    report_frequency: Duration,
    timeout: Duration,
    compute: StatusFn,
    counters: Arc<NodeCounters>,
    last_report: Option<Instant>,
    images: Option<ImageSource>,
    events: Option<EventRecorder>,
    /// Where the node's taints, as each GET reads them, go (admission's `NoExecute` check); the
    /// watch publishes them too.
    taints: Option<NodeTaints>,
    /// The watched Node, read instead of a GET on the first try of each period.
    watched: Option<super::watch::NodeCache>,
    /// The resourceVersion of the Node as nodelet last read or wrote it.
    last_known_rv: Option<String>,
    server: ApiServerVersion,
    /// The status last PATCHed successfully, as sent: what "changed" is judged against.
    last_written: Option<NodeStatus>,
    /// Differences the last PATCH did not remove.
    stuck: Option<NonConvergence>,
    /// Told the server's `status.volumesInUse` at each read and write.
    reported_in_use: Option<super::ReportedInUseFn>,
    /// Field paths already logged as not converging.
    reported_paths: HashSet<String>,
}

impl NodeStatusUpdater {
    /// `update_frequency` is how often [`Self::update`] is called; the first wait before a
    /// non-converging difference is written again.
    pub fn new(
        client: kube::Client,
        node_name: &str,
        update_frequency: Duration,
        report_frequency: Duration,
        timeout: Duration,
        compute: StatusFn,
        counters: Arc<NodeCounters>,
    ) -> NodeStatusUpdater {
        NodeStatusUpdater {
            nodes: Api::all(client.clone()),
            client,
            node_name: node_name.to_string(),
            update_frequency,
            report_frequency,
            timeout,
            compute,
            counters,
            last_report: None,
            images: None,
            events: None,
            taints: None,
            watched: None,
            last_known_rv: None,
            server: ApiServerVersion::new(),
            last_written: None,
            stuck: None,
            reported_paths: HashSet::new(),
            reported_in_use: None,
        }
    }

    /// Tells `reported` the server's `status.volumesInUse` at each read and write.
    pub fn with_reported_in_use(mut self, reported: Option<super::ReportedInUseFn>) -> Self {
        self.reported_in_use = reported;
        self
    }

    fn note_reported_in_use(&self, status: Option<&NodeStatus>) {
        if let Some(reported) = &self.reported_in_use {
            reported(
                status
                    .and_then(|s| s.volumes_in_use.as_deref())
                    .unwrap_or_default(),
            );
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

    /// Publishes the node's taints each GET reads (the watch of the Node, [`super::watch`],
    /// publishes them with each of its events, as the kubelet's admission reads its own Node
    /// from an informer).
    pub fn with_taints(mut self, taints: Option<NodeTaints>) -> Self {
        self.taints = taints;
        self
    }

    /// Reads the first try of each period from the watched Node when it is current
    /// ([`node_read`]).
    pub fn with_node_watch(mut self, watched: Option<super::watch::NodeCache>) -> Self {
        self.watched = watched;
        self
    }

    /// Shares the API server's version with the other writers.
    pub fn with_server_version(mut self, server: ApiServerVersion) -> Self {
        self.server = server;
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

    /// A request that got no answer: the server may come back as another release.
    fn note_unreachable(&self, error: &Error) {
        if matches!(error, Error::Request { .. } | Error::Timeout { .. }) {
            self.server.mark_unreachable();
        }
    }

    /// The Node this attempt starts from ([`node_read`]): the watched copy or a GET.
    async fn read_node(&mut self, attempt: usize) -> Result<Node, Error> {
        let (copy, view) = match &self.watched {
            Some(cache) => {
                let (copy, view) = cache.read(self.last_known_rv.as_deref());
                (copy, Some(view))
            }
            None => (None, None),
        };
        let params = match (node_read(attempt, view), copy) {
            (NodeRead::Watched, Some(copy)) => {
                metrics().node_reads_from_watch_total.inc();
                let node = (*copy).clone();
                self.last_known_rv = node.metadata.resource_version.clone();
                return Ok(node);
            }
            (NodeRead::ApiCache, _) => GetParams::any(),
            _ => GetParams::default(),
        };
        let node = api_call(self.timeout, self.nodes.get_with(&self.node_name, &params))
            .await
            .inspect_err(|e| self.note_unreachable(e))
            .map_err(|e| e.context(format!("error getting node {:?}", self.node_name)))?;
        if let Some(taints) = &self.taints {
            super::watch::publish_taints(taints, super::watch::node_taints(&node));
        }
        self.last_known_rv = node.metadata.resource_version.clone();
        Ok(node)
    }

    /// One attempt (`tryUpdateNodeStatus`). The first attempt of a period reads the watched
    /// Node when it is current, else the API server's cache (`resourceVersion=0`); retries read
    /// the latest, as the kubelet does ([`node_read`]).
    pub async fn try_update(&mut self, attempt: usize) -> Result<UpdateOutcome, Error> {
        let release = self
            .server
            .refresh_if_stale(&self.client, self.timeout)
            .await;
        let node = self.read_node(attempt).await?;
        let original = node.status.unwrap_or_default();
        self.note_reported_in_use(Some(&original));
        let images = self.list_images().await;
        let new = strip_node_status((self.compute)(Some(&original), images.as_deref()), release);
        metrics().node_status_updates_total.inc();
        let now = Instant::now();
        let decision = if should_patch(false, self.last_report, now, self.report_frequency) {
            WriteDecision::Change
        } else {
            let changed_since_written = self
                .last_written
                .as_ref()
                .is_none_or(|w| node_status_changed(w, &new));
            let differences = node_status_differences(&original, &new);
            decide_write(
                changed_since_written,
                true,
                &differences,
                self.stuck.as_ref(),
                now,
            )
        };
        if matches!(decision, WriteDecision::Nothing | WriteDecision::BackingOff) {
            if decision == WriteDecision::Nothing && !node_status_changed(&original, &new) {
                self.stuck = None;
            }
            return Ok(UpdateOutcome::Unchanged);
        }
        let patch = status_patch(&original, &new);
        let answer = api_call(
            self.timeout,
            self.nodes.patch_status(
                &self.node_name,
                &PatchParams::default(),
                &Patch::Strategic(patch),
            ),
        )
        .await
        .inspect_err(|e| self.note_unreachable(e))
        .map_err(|e| e.context(format!("patching status of node {:?}", self.node_name)))?;
        self.counters.status_patches.fetch_add(1, Ordering::Relaxed);
        metrics().node_status_writes_total.inc();
        // What the watch must deliver before its copy is used again.
        self.last_known_rv = answer.metadata.resource_version.clone();
        self.note_reported_in_use(answer.status.as_ref());
        self.note_convergence(&answer, &new, release);
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
        self.last_written = Some(new);
        Ok(UpdateOutcome::Patched)
    }

    /// After a PATCH: what the answer still lacks of `sent` is stuck (backed off, logged once).
    fn note_convergence(&mut self, answer: &Node, sent: &NodeStatus, release: Release) {
        let stored = answer.status.clone().unwrap_or_default();
        let residual = node_status_differences(&stored, sent);
        let previous = self.stuck.take();
        self.stuck = after_write(
            previous.as_ref(),
            residual,
            Instant::now(),
            self.update_frequency,
            CONVERGENCE_BACKOFF_MAX.max(self.update_frequency),
        );
        let Some(stuck) = &self.stuck else {
            return;
        };
        for path in &stuck.paths {
            if self.reported_paths.insert(path.clone()) {
                tracing::warn!(
                    node = %self.node_name,
                    field = %path,
                    api_server = %release,
                    retry_in = ?stuck.retry_at.saturating_duration_since(Instant::now()),
                    "the API server does not store this node status field as sent; not writing it again at every update (backing off)"
                );
            }
        }
    }

    /// Up to [`NODE_STATUS_UPDATE_RETRY`] attempts (`updateNodeStatus`): one iteration of the
    /// node status loop.
    #[tracing::instrument(name = "node_status", skip_all, fields(node = %self.node_name))]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_try_reads_the_watch_only_when_it_is_current_and_caught_up() {
        let w = |has_copy, live, caught_up| {
            Some(WatchedNode {
                has_copy,
                live,
                caught_up,
            })
        };
        use NodeRead::*;
        // (attempt, the watch, where from, why)
        let cases = [
            (0, w(true, true, true), Watched, "idle: nobody wrote since"),
            (
                0,
                w(true, true, false),
                Latest,
                "our PATCH not delivered yet",
            ),
            (
                0,
                w(true, false, true),
                ApiCache,
                "the watch failed or lists again",
            ),
            (0, w(true, false, false), ApiCache, "failed and behind"),
            (
                0,
                w(false, true, true),
                ApiCache,
                "listed, no Node (not registered yet)",
            ),
            (0, None, ApiCache, "no watch: as before it"),
            (1, w(true, true, true), Latest, "a retry reads the latest"),
            (4, w(true, true, false), Latest, "a retry reads the latest"),
            (1, None, Latest, "a retry reads the latest"),
        ];
        for (attempt, watched, want, why) in cases {
            assert_eq!(node_read(attempt, watched), want, "{why}: {watched:?}");
        }
    }
}
