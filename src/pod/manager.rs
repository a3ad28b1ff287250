//! The pod manager: merges the snapshots of every pod source into the desired set of pods and
//! tells pod workers what changed. It also finds orphans — pods the runtime holds for this node
//! that no source wants (a manifest removed while nodelet was down) — and has them terminated.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::worker_state::PodWork;
use super::workers::PodWorkers;
use crate::cri::{api, labels, model, Runtime};
use crate::events::{pod_ref, EventRecorder, EventType};
use crate::lifecycle::admission::{PodAdmitAttributes, PodAdmitHandler, Rejection};
use crate::pleg::PodLifecycleEvent;
use crate::podspec::{pod_uid, Phase};
use crate::source::SourceSnapshot;
use crate::status::StatusManager;
use crate::status::StatusMutation;
use crate::status::REJECTED_MESSAGE_PREFIX;
use crate::sync::allocation::AllocationManager;

/// The change from one desired set to the next, by UID.
#[derive(Debug, Default, PartialEq)]
pub struct DesiredDiff {
    pub added: Vec<String>,
    pub updated: Vec<String>,
    pub removed: Vec<String>,
}

/// Pure: what changed between two desired sets.
pub fn diff_desired(
    old: &BTreeMap<String, Arc<Pod>>,
    new: &BTreeMap<String, Arc<Pod>>,
) -> DesiredDiff {
    let mut d = DesiredDiff::default();
    for (uid, pod) in new {
        match old.get(uid) {
            None => d.added.push(uid.clone()),
            Some(old_pod) if old_pod != pod => d.updated.push(uid.clone()),
            Some(_) => {}
        }
    }
    for uid in old.keys() {
        if !new.contains_key(uid) {
            d.removed.push(uid.clone());
        }
    }
    d
}

/// A stand-in pod for runtime objects no source knows: enough to terminate and remove them.
pub fn orphan_pod(uid: &str, name: &str, namespace: &str, grace_seconds: Option<i64>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            uid: Some(uid.to_string()),
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            termination_grace_period_seconds: grace_seconds,
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub struct PodManager {
    workers: PodWorkers,
    runtime: Arc<dyn Runtime>,
    node_name: String,
    /// Desired pods of each source.
    sources: HashMap<&'static str, BTreeMap<String, Arc<Pod>>>,
    /// The sources that must report once before orphans can be judged.
    expected_sources: Vec<&'static str>,
    orphan_check_period: Duration,
    /// Becomes true once every expected source has reported and orphans were handled.
    ready: watch::Sender<bool>,
    /// Cluster mode: admission of API pods, and where rejections are reported.
    admission: Option<Admission>,
    /// Admission of new static pods under node pressure and node shutdown, and where
    /// rejections are reported. Resource predicates are not applied to static pods.
    static_admission: Option<StaticAdmission>,
    /// UIDs of pods rejected at admission: ended through `kill_pod` before they ever ran,
    /// never admitted again.
    rejected: BTreeSet<String>,
    /// The current static pods, for the mirror pod manager.
    static_pods: watch::Sender<Vec<Pod>>,
    /// Every desired pod not rejected at admission, for the eviction manager.
    admitted: watch::Sender<Vec<Arc<Pod>>>,
    /// The resources admitted per pod (in-place resize): admission counts the other pods'
    /// allocations, a pod admitted before a restart is not admitted again.
    allocation: Option<AllocationManager>,
}

/// What the pod manager needs to admit new static pods: the handlers to ask (the eviction
/// manager's pressure check, which lets them through unless `evictStaticPods` made them
/// evictable, then node shutdown's: while the node shuts down no new pod of any source is
/// admitted) and where rejections are reported.
pub struct StaticAdmission {
    pub handlers: Vec<Arc<dyn PodAdmitHandler>>,
    pub events: EventRecorder,
}

/// What the pod manager needs to admit API pods (cluster mode).
pub struct Admission {
    pub status: StatusManager,
    pub events: EventRecorder,
    /// Asked in order, the first rejection wins, as the kubelet's admit handlers: eviction's
    /// pressure check, node shutdown's, then the node's predicates.
    pub handlers: Vec<Arc<dyn PodAdmitHandler>>,
}

/// Pure: the first handler's rejection of `pod` among `other_pods`, or `Ok` when all admit it.
fn admit_by(
    handlers: &[Arc<dyn PodAdmitHandler>],
    pod: &Pod,
    other_pods: &[&Pod],
) -> Result<(), Rejection> {
    let attrs = PodAdmitAttributes { pod, other_pods };
    handlers.iter().try_for_each(|h| h.admit(&attrs))
}

impl PodManager {
    pub fn new(
        workers: PodWorkers,
        runtime: Arc<dyn Runtime>,
        node_name: String,
        expected_sources: Vec<&'static str>,
    ) -> (Self, watch::Receiver<bool>) {
        let (ready, ready_rx) = watch::channel(false);
        (
            PodManager {
                workers,
                runtime,
                node_name,
                sources: HashMap::new(),
                expected_sources,
                orphan_check_period: Duration::from_secs(10),
                ready,
                admission: None,
                static_admission: None,
                rejected: BTreeSet::new(),
                static_pods: watch::channel(Vec::new()).0,
                admitted: watch::channel(Vec::new()).0,
                allocation: None,
            },
            ready_rx,
        )
    }

    /// Admits pods from the API server before they run (cluster mode).
    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = Some(admission);
        self
    }

    /// Keeps pod allocations in `allocation` (admission, removal, deferred resizes).
    pub fn with_allocation(mut self, allocation: AllocationManager) -> Self {
        self.allocation = Some(allocation);
        self
    }

    /// Admits new static pods through `admission`'s handlers (node pressure, node shutdown).
    pub fn with_static_admission(mut self, admission: StaticAdmission) -> Self {
        self.static_admission = Some(admission);
        self
    }

    /// The pod workers (for mirror pods: whether a static pod still terminates).
    pub fn workers(&self) -> PodWorkers {
        self.workers.clone()
    }

    /// The static pods, as they change (for mirror pods).
    pub fn static_pods(&self) -> watch::Receiver<Vec<Pod>> {
        self.static_pods.subscribe()
    }

    /// The desired pods not rejected at admission, as they change (for eviction).
    pub fn admitted_pods(&self) -> watch::Receiver<Vec<Arc<Pod>>> {
        self.admitted.subscribe()
    }

    /// Pods admitted and not finished: what admission counts against the node.
    fn active_pods(&self, desired: &BTreeMap<String, Arc<Pod>>) -> Vec<Arc<Pod>> {
        let status = self.admission.as_ref().map(|a| &a.status);
        desired
            .iter()
            .filter(|(uid, _)| !self.rejected.contains(*uid) && self.workers.has_worker(uid))
            .filter(|(uid, _)| {
                let pod_status = status.and_then(|s| s.status(uid));
                !Phase::is_terminal_status(pod_status.as_ref())
            })
            .map(|(_, p)| match &self.allocation {
                // Admission counts what the pods were allocated, not what their specs ask.
                Some(a) => Arc::new(a.allocated_pod(p)),
                None => p.clone(),
            })
            .collect()
    }

    /// Admission of a new API pod; a rejected pod is ended through `kill_pod` before it ever
    /// runs: its final status is Failed with the reason (and its QoS class), as the kubelet's
    /// `rejectPod` reports it.
    fn admit(&mut self, pod: &Arc<Pod>, desired: &BTreeMap<String, Arc<Pod>>) -> bool {
        let Some(admission) = &self.admission else {
            return true;
        };
        // A pod the API already shows as finished is not admitted again (after a restart).
        if matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        ) {
            return true;
        }
        if let Some(a) = self
            .allocation
            .as_ref()
            .filter(|a| a.is_allocated(pod_uid(pod)))
        {
            // Admitted before nodelet restarted: it keeps its allocation and is not admitted
            // again (the kubelet's allocation checkpoint).
            a.admit(pod);
            return true;
        }
        let active = self.active_pods(desired);
        let refs: Vec<&Pod> = active.iter().map(|p| p.as_ref()).collect();
        let verdict = admit_by(&admission.handlers, pod, &refs);
        match verdict {
            Ok(()) => {
                if let Some(a) = &self.allocation {
                    a.admit(pod);
                }
                true
            }
            Err(rejection) => {
                let events = admission.events.clone();
                self.reject(pod, rejection, &events);
                false
            }
        }
    }

    /// Admission of a new static pod under node pressure and node shutdown (static pods skip
    /// the resource predicates here); rejected as an API pod is.
    fn admit_static(&mut self, pod: &Arc<Pod>, desired: &BTreeMap<String, Arc<Pod>>) -> bool {
        let Some(admission) = &self.static_admission else {
            return true;
        };
        let active = self.active_pods(desired);
        let refs: Vec<&Pod> = active.iter().map(|p| p.as_ref()).collect();
        let verdict = admit_by(&admission.handlers, pod, &refs);
        match verdict {
            Ok(()) => true,
            Err(rejection) => {
                let events = admission.events.clone();
                self.reject(pod, rejection, &events);
                false
            }
        }
    }

    /// Ends a pod that failed admission through `kill_pod` before it ever runs: Failed with
    /// the reason and `Pod was rejected: <message>`, as the kubelet's `rejectPod`, and a
    /// Warning event with the reason.
    fn reject(&mut self, pod: &Arc<Pod>, rejection: Rejection, events: &EventRecorder) {
        tracing::warn!(
            pod.uid = pod_uid(pod),
            pod.name = pod.metadata.name.as_deref().unwrap_or_default(),
            reason = %rejection.reason,
            message = %rejection.message,
            "pod rejected at admission"
        );
        events.record(
            &pod_ref(pod),
            EventType::Warning,
            &rejection.reason,
            rejection.message.clone(),
        );
        let status = StatusMutation::failed(
            rejection.reason,
            format!("{REJECTED_MESSAGE_PREFIX}{}", rejection.message),
        );
        self.rejected.insert(pod_uid(pod).to_string());
        self.workers.reject(pod.clone(), status);
    }

    fn desired(&self) -> BTreeMap<String, Arc<Pod>> {
        self.sources
            .values()
            .flat_map(|pods| pods.iter().map(|(k, v)| (k.clone(), v.clone())))
            .collect()
    }

    fn all_sources_seen(&self) -> bool {
        self.expected_sources
            .iter()
            .all(|s| self.sources.contains_key(s))
    }

    /// Applies a source snapshot: new and changed pods are synced, vanished ones removed.
    pub fn apply(&mut self, snapshot: SourceSnapshot) {
        for error in &snapshot.errors {
            tracing::warn!(source = snapshot.source, %error, "pod manifest rejected");
        }
        crate::metrics::metrics()
            .static_pod_manifest_errors
            .set(i64::try_from(snapshot.errors.len()).unwrap_or(i64::MAX));
        let old = self.desired();
        let pods: BTreeMap<String, Arc<Pod>> = snapshot
            .pods
            .into_iter()
            .filter(|p| !pod_uid(p).is_empty())
            .map(|p| (pod_uid(&p).to_string(), Arc::new(p)))
            .collect();
        if snapshot.source == crate::source::FILE_SOURCE {
            self.static_pods
                .send_replace(pods.values().map(|p| (**p).clone()).collect());
        }
        let from_api = snapshot.source == crate::source::api::API_SOURCE;
        // A deleted pod is ended as it was last seen, with what its deletion set.
        let deleted: BTreeMap<String, Arc<Pod>> = snapshot
            .deleted
            .into_iter()
            .map(|p| (pod_uid(&p).to_string(), Arc::new(p)))
            .collect();
        self.sources.insert(snapshot.source, pods);
        let new = self.desired();
        let diff = diff_desired(&old, &new);
        // New pods are admitted oldest first, as the kubelet does.
        let mut added: Vec<Arc<Pod>> = diff
            .added
            .iter()
            .filter_map(|u| new.get(u).cloned())
            .collect();
        added.sort_by(|a, b| {
            a.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0)
                .cmp(&b.metadata.creation_timestamp.as_ref().map(|t| t.0))
        });
        let from_files = snapshot.source == crate::source::FILE_SOURCE;
        for pod in added {
            if from_api
                && !self.rejected.contains(pod_uid(&pod))
                && !self.admit(&pod, &new)
                && pod.metadata.deletion_timestamp.is_none()
            {
                continue;
            }
            if from_files
                && !self.rejected.contains(pod_uid(&pod))
                && !self.admit_static(&pod, &new)
            {
                continue;
            }
            self.dispatch(pod);
        }
        // A rejected pod's worker keeps it terminated; a deletion still reaches it, so its
        // final DELETE can go out.
        for uid in &diff.updated {
            if let Some(pod) = new.get(uid) {
                self.dispatch(pod.clone());
            }
        }
        let admitted = self
            .desired()
            .into_iter()
            .filter(|(uid, _)| !self.rejected.contains(uid))
            .map(|(_, p)| p)
            .collect();
        self.admitted.send_replace(admitted);
        if let Some(a) = &self.allocation {
            // The kubelet's `RemovePod`, then its retry of pending resizes (`pods_removed`).
            for uid in &diff.removed {
                a.remove(uid);
            }
            if *self.ready.borrow() {
                // `RemoveOrphanedPods`: state of pods no source has any more.
                let keep: BTreeSet<String> = self.desired().into_keys().collect();
                a.retain(&keep);
            }
        }
        for uid in &diff.removed {
            self.rejected.remove(uid);
            if let Some(pod) = deleted.get(uid).or_else(|| old.get(uid)) {
                tracing::info!(pod.uid = %uid, pod.name = pod.metadata.name.as_deref().unwrap_or_default(), "pod removed from its source; terminating");
                self.workers.update(PodWork::Kill {
                    pod: pod.clone(),
                    grace: None,
                    remove: true,
                });
            }
        }
    }

    /// Hands a desired pod to its worker: to run it, or — once the API server set its
    /// deletionTimestamp — to terminate it with its deletion grace period and reclaim what it used.
    fn dispatch(&self, pod: Arc<Pod>) {
        if pod.metadata.deletion_timestamp.is_some() {
            self.workers.update(PodWork::Delete { pod });
        } else {
            self.workers.update(PodWork::Sync(pod));
        }
    }

    /// Terminates runtime pods of this node that no source wants and no worker handles.
    pub async fn cleanup_orphans(&self) {
        if !self.all_sources_seen() {
            return;
        }
        let desired = self.desired();
        let selector = model::node_selector(&self.node_name);
        let sandboxes = match self
            .runtime
            .list_pod_sandbox(Some(api::PodSandboxFilter {
                label_selector: selector.clone(),
                ..Default::default()
            }))
            .await
        {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "listing sandboxes for orphan cleanup");
                return;
            }
        };
        let containers = match self
            .runtime
            .list_containers(Some(api::ContainerFilter {
                label_selector: selector,
                ..Default::default()
            }))
            .await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "listing containers for orphan cleanup");
                return;
            }
        };
        let mut orphans: BTreeMap<String, Pod> = BTreeMap::new();
        let objects = sandboxes
            .iter()
            .map(|s| (&s.labels, &s.annotations))
            .chain(containers.iter().map(|c| (&c.labels, &c.annotations)));
        for (l, a) in objects {
            let Some(uid) = l.get(labels::POD_UID) else {
                continue;
            };
            if desired.contains_key(uid) || self.workers.has_worker(uid) {
                continue;
            }
            let grace = a
                .get(labels::POD_TERMINATION_GRACE_PERIOD)
                .and_then(|g| g.parse().ok());
            let entry = orphans.entry(uid.clone()).or_insert_with(|| {
                orphan_pod(
                    uid,
                    l.get(labels::POD_NAME).map_or("", String::as_str),
                    l.get(labels::POD_NAMESPACE).map_or("", String::as_str),
                    grace,
                )
            });
            if let (Some(g), Some(spec)) = (grace, entry.spec.as_mut()) {
                spec.termination_grace_period_seconds = Some(g);
            }
        }
        for (uid, pod) in orphans {
            tracing::info!(pod.uid = %uid, pod.name = pod.metadata.name.as_deref().unwrap_or_default(), "terminating pod no source wants");
            self.workers.update(PodWork::Kill {
                pod: Arc::new(pod),
                grace: None,
                remove: true,
            });
        }
    }

    /// Runs until cancelled: applies snapshots, routes PLEG events to workers, and checks for
    /// orphans once all sources have reported and periodically after.
    pub async fn run(
        mut self,
        mut snapshots: mpsc::Receiver<SourceSnapshot>,
        mut events: mpsc::Receiver<PodLifecycleEvent>,
        cancel: CancellationToken,
    ) {
        let mut orphan_tick = tokio::time::interval(self.orphan_check_period);
        orphan_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        if self.expected_sources.is_empty() {
            self.cleanup_orphans().await;
            self.ready.send_replace(true);
        }
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                Some(snapshot) = snapshots.recv() => {
                    self.apply(snapshot);
                    if !*self.ready.borrow() && self.all_sources_seen() {
                        self.cleanup_orphans().await;
                        self.ready.send_replace(true);
                    }
                }
                Some(event) = events.recv() => {
                    if !self.workers.wake(&event.pod_uid) && *self.ready.borrow() {
                        tracing::debug!(pod.uid = %event.pod_uid, "runtime event for a pod without a worker");
                        self.cleanup_orphans().await;
                    }
                }
                _ = orphan_tick.tick() => self.cleanup_orphans().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, image: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![k8s_openapi::api::core::v1::Container {
                    name: "c".into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn diff_table() {
        let set = |pods: &[(&str, &str)]| -> BTreeMap<String, Arc<Pod>> {
            pods.iter()
                .map(|(u, i)| (u.to_string(), pod(u, i)))
                .collect()
        };
        let cases = [
            (
                "empty to one",
                set(&[]),
                set(&[("a", "x")]),
                (vec!["a"], vec![], vec![]),
            ),
            (
                "unchanged",
                set(&[("a", "x")]),
                set(&[("a", "x")]),
                (vec![], vec![], vec![]),
            ),
            (
                "updated",
                set(&[("a", "x")]),
                set(&[("a", "y")]),
                (vec![], vec!["a"], vec![]),
            ),
            (
                "removed and added",
                set(&[("a", "x")]),
                set(&[("b", "x")]),
                (vec!["b"], vec![], vec!["a"]),
            ),
        ];
        for (name, old, new, (added, updated, removed)) in cases {
            let d = diff_desired(&old, &new);
            let s = |v: Vec<&str>| v.into_iter().map(String::from).collect::<Vec<_>>();
            assert_eq!(
                d,
                DesiredDiff {
                    added: s(added),
                    updated: s(updated),
                    removed: s(removed)
                },
                "{name}"
            );
        }
    }
}
