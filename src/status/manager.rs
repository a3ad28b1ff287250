//! The status manager: the latest status of every pod, versioned, shared between pod workers
//! (writers) and the local API / API server sync (readers).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use tokio::sync::watch;

use super::generate::{
    CONTAINERS_READY, DISRUPTION_TARGET, INITIALIZED, POD_READY_TO_START_CONTAINERS, POD_SCHEDULED,
    READY,
};
use super::phase::is_terminal_phase;

/// A pod with its latest status and the version of that status (1 for the first status of a
/// UID, +1 on every change of the status), so a syncer can tell what it has already sent.
/// A new copy of the pod whose status is unchanged (the API server's watch echoing a write,
/// a label edit) replaces `pod` under the same version: only nodelet's own statuses make
/// versions, never what the server sends back (the kubelet's `apiStatusVersions` rule).
#[derive(Debug, Clone, PartialEq)]
pub struct VersionedStatus {
    pub version: u64,
    /// The desired pod with `.status` set.
    pub pod: Arc<Pod>,
}

/// What the API server sync needs to know about a pod besides its status: facts about its end
/// of life that the pod worker and the sync itself record (see [`StatusManager::set_reclaimed`],
/// [`StatusManager::mark_terminal_published`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PodLifecycle {
    /// The pod worker has stopped every container, removed the sandbox and cleaned the volumes:
    /// the kubelet's `podIsFinished`. Until then a pod being deleted keeps its API object.
    pub reclaimed: bool,
    /// When nodelet first saw the API server hold the terminal phase it generated for this pod
    /// (delivered by its PATCH, or already there). Failed-pod cleanup counts its retention from
    /// here.
    pub terminal_since: Option<Timestamp>,
}

/// Cheap to clone; all clones share one cache.
#[derive(Debug, Clone)]
pub struct StatusManager {
    statuses: Arc<Mutex<HashMap<String, VersionedStatus>>>,
    lifecycle: Arc<Mutex<HashMap<String, PodLifecycle>>>,
    changes: Arc<watch::Sender<u64>>,
}

impl Default for StatusManager {
    fn default() -> Self {
        Self::new()
    }
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// Conditions whose `lastTransitionTime` the kubelet's status manager maintains.
fn tracks_transition_time(type_: &str) -> bool {
    matches!(
        type_,
        CONTAINERS_READY
            | READY
            | INITIALIZED
            | POD_READY_TO_START_CONTAINERS
            | POD_SCHEDULED
            | DISRUPTION_TARGET
    )
}

/// The kubelet status manager's rules, applied against the status it is replacing (`old`):
/// a terminal phase is never left, `startTime` never changes once set, a condition whose status
/// did not change keeps its `lastTransitionTime`, `observedGeneration` is the pod's generation.
fn reconcile(pod: &Pod, old: Option<&PodStatus>, mut status: PodStatus) -> PodStatus {
    if let Some(old) = old {
        if is_terminal_phase(old.phase.as_deref()) && status.phase != old.phase {
            status.phase.clone_from(&old.phase);
        }
        if old.start_time.is_some() {
            status.start_time.clone_from(&old.start_time);
        }
        let old_conditions = old.conditions.as_deref().unwrap_or(&[]);
        for c in status
            .conditions
            .iter_mut()
            .flatten()
            .filter(|c| tracks_transition_time(&c.type_))
        {
            let unchanged = old_conditions
                .iter()
                .find(|o| o.type_ == c.type_ && o.status == c.status);
            if let Some(time) = unchanged.and_then(|o| o.last_transition_time.clone()) {
                c.last_transition_time = Some(time);
            }
        }
    }
    status.observed_generation = pod.metadata.generation.filter(|g| *g != 0);
    status
}

impl StatusManager {
    pub fn new() -> Self {
        let (changes, _) = watch::channel(0);
        StatusManager {
            statuses: Arc::new(Mutex::new(HashMap::new())),
            lifecycle: Arc::new(Mutex::new(HashMap::new())),
            changes: Arc::new(changes),
        }
    }

    /// A poisoned lock only means another thread panicked mid-update of a plain map; the map is
    /// still usable, so keep serving rather than cascade the panic.
    fn lock(&self) -> MutexGuard<'_, HashMap<String, VersionedStatus>> {
        self.statuses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Same poisoning argument as [`Self::lock`].
    fn lock_lifecycle(&self) -> MutexGuard<'_, HashMap<String, PodLifecycle>> {
        self.lifecycle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn notify(&self) {
        self.changes.send_modify(|v| *v += 1);
    }

    /// Stores the status (after the kubelet's rules, see `reconcile`) if the pod with it differs
    /// from the cached one; returns true when the status changed and the version was bumped.
    /// A pod whose metadata or spec changed but whose status did not is stored under the same
    /// version (and wakes the subscribers, who may have deletions to send).
    pub fn set_pod_status(&self, pod: &Pod, status: PodStatus) -> bool {
        let uid = uid_of(pod);
        let bumped = {
            let mut statuses = self.lock();
            let cached = statuses.get(&uid);
            let old = match cached {
                Some(c) => c.pod.status.as_ref(),
                None => pod.status.as_ref(),
            };
            let status = reconcile(pod, old, status);
            let mut updated = pod.clone();
            updated.status = Some(status);
            if cached.is_some_and(|c| *c.pod == updated) {
                return false;
            }
            let (version, bumped) = match cached {
                Some(c) if c.pod.status == updated.status => (c.version, false),
                Some(c) => (c.version + 1, true),
                None => (1, true),
            };
            statuses.insert(
                uid,
                VersionedStatus {
                    version,
                    pod: Arc::new(updated),
                },
            );
            bumped
        };
        self.notify();
        bumped
    }

    pub fn get(&self, uid: &str) -> Option<VersionedStatus> {
        self.lock().get(uid).cloned()
    }

    pub fn status(&self, uid: &str) -> Option<PodStatus> {
        self.lock().get(uid).and_then(|v| v.pod.status.clone())
    }

    /// Every pod with its status, sorted by namespace then name (the API server's order).
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        let mut pods: Vec<Arc<Pod>> = self.lock().values().map(|v| v.pod.clone()).collect();
        pods.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        pods
    }

    /// Every cached pod with its version, sorted by namespace then name: what the API server
    /// sync walks on every pass (one lock, no await while holding it).
    pub fn versioned(&self) -> Vec<VersionedStatus> {
        let mut all: Vec<VersionedStatus> = self.lock().values().cloned().collect();
        all.sort_by(|a, b| {
            (&a.pod.metadata.namespace, &a.pod.metadata.name)
                .cmp(&(&b.pod.metadata.namespace, &b.pod.metadata.name))
        });
        all
    }

    pub fn remove(&self, uid: &str) {
        let removed = self.lock().remove(uid).is_some();
        let had_lifecycle = self.lock_lifecycle().remove(uid).is_some();
        if removed || had_lifecycle {
            self.notify();
        }
    }

    /// The pod worker's "this pod's resources are reclaimed" (the kubelet's `podIsFinished`):
    /// call it after the containers are stopped, the sandbox removed and the volumes cleaned.
    /// Only then does the API server sync send the final DELETE (grace 0) of a pod whose
    /// deletion was requested, so the pod object outlives everything it held on the node.
    /// Idempotent; wakes the sync.
    pub fn set_reclaimed(&self, uid: &str) {
        let changed = {
            let mut lifecycle = self.lock_lifecycle();
            let entry = lifecycle.entry(uid.to_string()).or_default();
            !std::mem::replace(&mut entry.reclaimed, true)
        };
        if changed {
            self.notify();
        }
    }

    /// Records that the API server now holds the terminal phase nodelet generated for `uid`,
    /// at `at`, unless an earlier time is already recorded; returns the recorded time. Called
    /// by the API server sync; retention of failed pods counts from it.
    pub fn mark_terminal_published(&self, uid: &str, at: Timestamp) -> Timestamp {
        let mut lifecycle = self.lock_lifecycle();
        *lifecycle
            .entry(uid.to_string())
            .or_default()
            .terminal_since
            .get_or_insert(at)
    }

    /// What is known about the end of life of `uid` (default: nothing yet).
    pub fn lifecycle(&self, uid: &str) -> PodLifecycle {
        self.lock_lifecycle().get(uid).copied().unwrap_or_default()
    }

    /// A counter that moves on every change (set or remove) of any pod.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use k8s_openapi::api::core::v1::PodCondition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    fn pod(uid: &str, namespace: &str, name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn time(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn ready(status: &str, at: i64) -> PodCondition {
        PodCondition {
            type_: READY.into(),
            status: status.into(),
            last_transition_time: Some(time(at)),
            ..Default::default()
        }
    }

    fn status(phase: &str, start: Option<i64>, conditions: Vec<PodCondition>) -> PodStatus {
        PodStatus {
            phase: Some(phase.into()),
            start_time: start.map(time),
            conditions: Some(conditions),
            ..Default::default()
        }
    }

    #[test]
    fn version_bumps_only_on_change() {
        let m = StatusManager::new();
        let p = pod("u1", "default", "a");
        let rx = m.subscribe();
        assert!(m.get("u1").is_none());

        // (status to set, expected "changed", expected version afterwards)
        let cases = [
            (status("Pending", Some(10), vec![]), true, 1),
            (status("Pending", Some(10), vec![]), false, 1),
            (status("Running", Some(10), vec![]), true, 2),
            (status("Running", Some(10), vec![]), false, 2),
            (
                status("Running", Some(10), vec![ready("True", 20)]),
                true,
                3,
            ),
        ];
        for (i, (s, changed, version)) in cases.into_iter().enumerate() {
            assert_eq!(m.set_pod_status(&p, s), changed, "case {i}");
            assert_eq!(m.get("u1").unwrap().version, version, "case {i}");
        }
        assert_eq!(*rx.borrow(), 3, "one notification per change");
        assert_eq!(m.status("u1").unwrap().phase.as_deref(), Some("Running"));
    }

    #[test]
    fn a_new_copy_of_the_pod_with_the_same_status_keeps_the_version() {
        let m = StatusManager::new();
        let mut p = pod("u1", "default", "a");
        p.metadata.resource_version = Some("10".into());
        assert!(m.set_pod_status(&p, status("Running", Some(10), vec![])));
        let rx = m.subscribe();
        // The watch echoes nodelet's own write: a new resourceVersion, the same status.
        p.metadata.resource_version = Some("11".into());
        assert!(!m.set_pod_status(&p, status("Running", Some(10), vec![])));
        let cached = m.get("u1").unwrap();
        assert_eq!(cached.version, 1, "no new version for an echo");
        assert_eq!(
            cached.pod.metadata.resource_version.as_deref(),
            Some("11"),
            "the newest copy is kept"
        );
        assert!(rx.has_changed().unwrap(), "subscribers are woken");
        // The same copy again changes nothing and wakes nobody.
        let rx = m.subscribe();
        assert!(!m.set_pod_status(&p, status("Running", Some(10), vec![])));
        assert!(!rx.has_changed().unwrap());
        // A new generation is a new status (observedGeneration follows it).
        p.metadata.generation = Some(2);
        assert!(m.set_pod_status(&p, status("Running", Some(10), vec![])));
        assert_eq!(m.get("u1").unwrap().version, 2);
    }

    #[test]
    fn kubelet_rules_on_set() {
        // (name, cached status, new status, expected phase, expected startTime, expected Ready time)
        let cases = [
            (
                "terminal phase is sticky",
                status("Succeeded", Some(10), vec![]),
                status("Running", Some(10), vec![]),
                "Succeeded",
                Some(10),
                None,
            ),
            (
                "failed is sticky too",
                status("Failed", Some(10), vec![]),
                status("Pending", Some(10), vec![]),
                "Failed",
                Some(10),
                None,
            ),
            (
                "terminal to other terminal is refused",
                status("Failed", Some(10), vec![]),
                status("Succeeded", Some(10), vec![]),
                "Failed",
                Some(10),
                None,
            ),
            (
                "non-terminal phases move",
                status("Pending", Some(10), vec![]),
                status("Running", Some(10), vec![]),
                "Running",
                Some(10),
                None,
            ),
            (
                "startTime never changes",
                status("Running", Some(10), vec![]),
                status("Running", Some(99), vec![]),
                "Running",
                Some(10),
                None,
            ),
            (
                "startTime set later is kept",
                status("Pending", None, vec![]),
                status("Running", Some(50), vec![]),
                "Running",
                Some(50),
                None,
            ),
            (
                "unchanged condition keeps its transition time",
                status("Running", Some(10), vec![ready("True", 20)]),
                status("Running", Some(10), vec![ready("True", 30)]),
                "Running",
                Some(10),
                Some(20),
            ),
            (
                "changed condition takes the new time",
                status("Running", Some(10), vec![ready("False", 20)]),
                status("Running", Some(10), vec![ready("True", 30)]),
                "Running",
                Some(10),
                Some(30),
            ),
        ];
        for (name, cached, new, phase, start, ready_at) in cases {
            let m = StatusManager::new();
            let p = pod("u", "default", "a");
            m.set_pod_status(&p, cached);
            m.set_pod_status(&p, new);
            let got = m.status("u").unwrap();
            assert_eq!(got.phase.as_deref(), Some(phase), "{name}");
            assert_eq!(got.start_time, start.map(time), "{name}");
            let ready_time = got
                .conditions
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == READY)
                .and_then(|c| c.last_transition_time);
            assert_eq!(ready_time, ready_at.map(time), "{name}");
        }
    }

    #[test]
    fn source_status_counts_as_old_for_first_set() {
        let m = StatusManager::new();
        let mut p = pod("u", "default", "a");
        p.status = Some(status("Failed", Some(5), vec![]));
        assert!(m.set_pod_status(&p, status("Running", Some(7), vec![])));
        let got = m.status("u").unwrap();
        assert_eq!(got.phase.as_deref(), Some("Failed"));
        assert_eq!(got.start_time, Some(time(5)));
    }

    #[test]
    fn observed_generation_follows_the_pod() {
        let m = StatusManager::new();
        let mut p = pod("u", "default", "a");
        p.metadata.generation = Some(3);
        m.set_pod_status(&p, status("Pending", None, vec![]));
        assert_eq!(m.status("u").unwrap().observed_generation, Some(3));
    }

    #[test]
    fn remove_and_list() {
        let m = StatusManager::new();
        for (uid, ns, name) in [
            ("3", "kube-system", "b"),
            ("1", "default", "z"),
            ("2", "default", "a"),
        ] {
            assert!(m.set_pod_status(&pod(uid, ns, name), status("Running", Some(1), vec![])));
        }
        let names: Vec<_> = m
            .pods()
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap(),
                    p.metadata.name.as_deref().unwrap()
                )
            })
            .collect();
        assert_eq!(names, ["default/a", "default/z", "kube-system/b"]);
        assert!(m.pods().iter().all(|p| p.status.is_some()));

        let rx = m.subscribe();
        let before = *rx.borrow();
        m.remove("1");
        assert!(m.get("1").is_none());
        assert_eq!(*rx.borrow(), before + 1);
        m.remove("1");
        assert_eq!(
            *rx.borrow(),
            before + 1,
            "removing an unknown UID is not a change"
        );
        assert_eq!(m.pods().len(), 2);

        // A removed UID starts over at version 1.
        m.set_pod_status(&pod("1", "default", "z"), status("Pending", None, vec![]));
        assert_eq!(m.get("1").unwrap().version, 1);
    }

    #[test]
    fn lifecycle_records() {
        let m = StatusManager::new();
        let rx = m.subscribe();
        assert_eq!(m.lifecycle("u"), PodLifecycle::default());

        m.set_reclaimed("u");
        assert!(m.lifecycle("u").reclaimed);
        assert_eq!(*rx.borrow(), 1, "reclaiming wakes the sync");
        m.set_reclaimed("u");
        assert_eq!(*rx.borrow(), 1, "a second call is no change");

        let t = |s| Timestamp::from_second(s).unwrap();
        assert_eq!(m.mark_terminal_published("u", t(10)), t(10));
        assert_eq!(
            m.mark_terminal_published("u", t(20)),
            t(10),
            "the first time stays"
        );
        assert_eq!(m.lifecycle("u").terminal_since, Some(t(10)));

        m.remove("u");
        assert_eq!(
            m.lifecycle("u"),
            PodLifecycle::default(),
            "removed with the pod"
        );
        assert_eq!(*rx.borrow(), 2);
    }

    #[test]
    fn versioned_lists_every_pod_with_its_version() {
        let m = StatusManager::new();
        m.set_pod_status(&pod("2", "default", "b"), status("Pending", None, vec![]));
        m.set_pod_status(&pod("1", "default", "a"), status("Pending", None, vec![]));
        m.set_pod_status(&pod("1", "default", "a"), status("Running", None, vec![]));
        let got: Vec<(String, u64)> = m
            .versioned()
            .iter()
            .map(|v| (v.pod.metadata.name.clone().unwrap(), v.version))
            .collect();
        assert_eq!(got, [("a".to_string(), 2), ("b".to_string(), 1)]);
    }

    #[tokio::test]
    async fn subscribers_are_woken() {
        let m = StatusManager::new();
        let mut rx = m.subscribe();
        let writer = m.clone();
        let task = tokio::spawn(async move {
            writer.set_pod_status(&pod("u", "default", "a"), status("Pending", None, vec![]));
        });
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow_and_update(), 1);
        task.await.unwrap();
    }
}
