//! The probe manager (the kubelet's instance-bound `prober_manager`): which workers run, and
//! the published results the pod worker reads.
//!
//! Two rules keep results honest. Workers are created only by `sync_pod` (the pod worker,
//! serialized per pod) and by a startup worker handing over to readiness and liveness; and
//! every worker is bound to one container ID, its writes accepted only while it is still the
//! registered worker of its slot. A late result from a stopped worker is dropped instead of
//! landing on a successor.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::prober::Prober;
use super::worker::{self, Target};
use super::EVENT_TYPE_WARNING;
use super::{ProbeEvent, ProbeKind, ProbeResult, ProbeUpdate, RunningContainer};
use crate::clock::Clock;
use crate::cri::Runtime;
use crate::podspec::{self, ContainerKind};

/// Runs probe workers and keeps their results. Cheap to clone (shared state).
#[derive(Clone)]
pub struct ProbeManager {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) prober: Prober,
    pub(super) clock: Clock,
    notify: Arc<dyn Fn(&str) + Send + Sync>,
    events: Arc<dyn Fn(ProbeEvent) + Send + Sync>,
    updates: broadcast::Sender<ProbeUpdate>,
    /// Parent of every worker's token: `shutdown` stops them all.
    root: CancellationToken,
    /// Where the workers run, so that whoever owns the tracker can wait for them.
    tasks: TaskTracker,
    /// Containers that started before the manager existed are adopted (their first probe is
    /// spread over one period).
    pub(super) created_at: Timestamp,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    pods: HashMap<String, PodProbes>,
    next_serial: u64,
}

#[derive(Default)]
struct PodProbes {
    /// Liveness and startup have stopped for good; readiness keeps running.
    terminating: bool,
    /// One slot per (container name, kind), holding the worker bound to one instance.
    workers: HashMap<(String, ProbeKind), WorkerEntry>,
    /// Published results by container ID.
    results: BTreeMap<String, InstanceResults>,
}

struct WorkerEntry {
    container_id: String,
    serial: u64,
    token: CancellationToken,
}

#[derive(Debug, Clone)]
struct InstanceResults {
    container_name: String,
    startup: Option<ProbeResult>,
    liveness: Option<ProbeResult>,
    readiness: Option<ProbeResult>,
}

impl InstanceResults {
    fn new(container_name: &str) -> Self {
        InstanceResults {
            container_name: container_name.to_string(),
            startup: None,
            liveness: None,
            readiness: None,
        }
    }

    fn get(&self, kind: ProbeKind) -> Option<ProbeResult> {
        match kind {
            ProbeKind::Startup => self.startup,
            ProbeKind::Liveness => self.liveness,
            ProbeKind::Readiness => self.readiness,
        }
    }

    fn slot(&mut self, kind: ProbeKind) -> &mut Option<ProbeResult> {
        match kind {
            ProbeKind::Startup => &mut self.startup,
            ProbeKind::Liveness => &mut self.liveness,
            ProbeKind::Readiness => &mut self.readiness,
        }
    }
}

/// A verdict this container instance cannot come back from: the pod worker kills it, and the
/// replacement gets new workers. Probing again could only overwrite it.
fn is_terminal(kind: ProbeKind, result: ProbeResult) -> bool {
    matches!(kind, ProbeKind::Liveness | ProbeKind::Startup) && result == ProbeResult::Failure
}

/// The pod's containers that have at least one probe: regular containers and sidecars
/// (restartable init containers). Plain init containers cannot have probes.
fn probed_containers(pod: &Pod) -> impl Iterator<Item = (ContainerKind, &Container)> {
    let has_probe = |(_, c): &(ContainerKind, &Container)| {
        c.startup_probe.is_some() || c.liveness_probe.is_some() || c.readiness_probe.is_some()
    };
    podspec::regular_containers(pod)
        .iter()
        .map(|c| (ContainerKind::Regular, c))
        .chain(
            podspec::init_containers(pod)
                .iter()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"))
                .map(|c| (ContainerKind::Init, c)),
        )
        .filter(has_probe)
}

/// The status last reported for this container, if it is about this instance (or names no
/// instance yet).
fn reported_status<'a>(pod: &'a Pod, name: &str, id: &str) -> Option<&'a ContainerStatus> {
    let status = pod.status.as_ref()?;
    let found = status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .find(|s| s.name == name)?;
    let reported_id = found.container_id.as_deref().unwrap_or_default();
    let bare = reported_id
        .split_once("://")
        .map_or(reported_id, |(_, id)| id);
    (bare.is_empty() || bare == id).then_some(found)
}

/// Seeds for a running container this manager has never seen (nodelet restarted under it):
/// believe the last reported status, so a restart flips neither Started nor Ready, and let the
/// first real probe correct it. Liveness always starts at its initial Success.
fn adoption_seeds(container: &Container, reported: Option<&ContainerStatus>) -> InstanceResults {
    let mut seeds = InstanceResults::new(&container.name);
    if let Some(status) = reported {
        if container.startup_probe.is_some() && status.started == Some(true) {
            seeds.startup = Some(ProbeResult::Success);
        }
        if container.readiness_probe.is_some() && status.ready {
            seeds.readiness = Some(ProbeResult::Success);
        }
    }
    seeds
}

impl ProbeManager {
    /// `notify` is called with the pod UID whenever a published result changes — never on
    /// repeats. `events` receives the `Unhealthy` and `ProbeWarning` events. Both are called
    /// from worker tasks, never under the manager's lock, so they may call back into it.
    pub fn new(
        runtime: Arc<dyn Runtime>,
        clock: Clock,
        notify: Arc<dyn Fn(&str) + Send + Sync>,
        events: Arc<dyn Fn(ProbeEvent) + Send + Sync>,
    ) -> Self {
        Self::in_tasks(
            runtime,
            clock,
            notify,
            events,
            TaskTracker::new(),
            &CancellationToken::new(),
        )
    }

    /// As [`ProbeManager::new`], with every probe worker a task of `tasks`, stopped when
    /// `cancel` is (as well as by [`ProbeManager::shutdown`]).
    pub fn in_tasks(
        runtime: Arc<dyn Runtime>,
        clock: Clock,
        notify: Arc<dyn Fn(&str) + Send + Sync>,
        events: Arc<dyn Fn(ProbeEvent) + Send + Sync>,
        tasks: TaskTracker,
        cancel: &CancellationToken,
    ) -> Self {
        let (updates, _) = broadcast::channel(256);
        ProbeManager {
            inner: Arc::new(Inner {
                prober: Prober::new(runtime),
                clock,
                notify,
                events,
                updates,
                root: cancel.child_token(),
                tasks,
                created_at: clock.now(),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Every result change, for whoever wants the detail (`notify` carries only the UID).
    pub fn subscribe(&self) -> broadcast::Receiver<ProbeUpdate> {
        self.inner.updates.subscribe()
    }

    /// Reconciles the pod's workers with its running containers (called on every sync).
    ///
    /// A running instance gets the workers it is eligible for (startup first; readiness and
    /// liveness once startup succeeded); a new instance of a container replaces the old one's
    /// workers and results; a container that is not running loses its workers and results.
    /// Must be called inside a tokio runtime (workers are spawned on it).
    pub fn sync_pod(&self, pod: &Pod, containers: &[RunningContainer]) {
        let uid = podspec::pod_uid(pod);
        if uid.is_empty() {
            tracing::warn!(pod = %pod_name(pod), "pod without a UID: not probing it");
            return;
        }
        let probed: Vec<(ContainerKind, &Container)> = probed_containers(pod).collect();
        let probed_names: HashSet<&str> = probed.iter().map(|(_, c)| c.name.as_str()).collect();
        let mut running: HashMap<&str, &RunningContainer> = HashMap::new();
        for rc in containers {
            running.entry(rc.name.as_str()).or_insert(rc);
        }
        let is_current = |name: &str, id: &str| {
            probed_names.contains(name) && running.get(name).is_some_and(|rc| rc.id == id)
        };

        let mut guard = self.inner.lock();
        let state = &mut *guard;
        let pod_state = state.pods.entry(uid.to_string()).or_default();

        // Stop what probes an instance that is gone, replaced, or no longer probed.
        pod_state.workers.retain(|(name, _), w| {
            let keep = is_current(name, &w.container_id);
            if !keep {
                w.token.cancel();
            }
            keep
        });
        pod_state
            .results
            .retain(|id, r| is_current(&r.container_name, id));

        for (container_kind, container) in probed {
            let Some(rc) = running.get(container.name.as_str()) else {
                continue;
            };
            if !pod_state.results.contains_key(&rc.id) {
                let reported = reported_status(pod, &container.name, &rc.id);
                pod_state
                    .results
                    .insert(rc.id.clone(), adoption_seeds(container, reported));
            }
            let target = Target {
                pod_uid: uid.to_string(),
                pod_namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                pod_name: pod.metadata.name.clone().unwrap_or_default(),
                container: Arc::new(container.clone()),
                container_kind,
                container_id: rc.id.clone(),
                started_at: rc.started_at,
                pod_ip: rc.pod_ip.clone().unwrap_or_default(),
            };
            self.inner
                .start_probes(pod_state, &mut state.next_serial, &target);
        }
    }

    /// The pod is terminating: liveness and startup stop for good (a container being shut
    /// down must not be restarted for failing them); readiness keeps running so a failing
    /// readiness probe still takes the pod out of service until `remove_pod`.
    pub fn pod_terminating(&self, pod_uid: &str) {
        let mut state = self.inner.lock();
        let Some(pod) = state.pods.get_mut(pod_uid) else {
            return;
        };
        pod.terminating = true;
        pod.workers.retain(|(_, kind), w| {
            let keep = *kind == ProbeKind::Readiness;
            if !keep {
                w.token.cancel();
            }
            keep
        });
    }

    /// Stops all of the pod's workers and forgets its results.
    pub fn remove_pod(&self, pod_uid: &str) {
        let removed = self.inner.lock().pods.remove(pod_uid);
        for w in removed.into_iter().flat_map(|p| p.workers.into_values()) {
            w.token.cancel();
        }
    }

    /// Readiness by container ID, for containers that have a readiness result (the status
    /// module treats a running container without a readiness probe as ready).
    pub fn readiness(&self, pod_uid: &str) -> BTreeMap<String, bool> {
        self.results_of(pod_uid, ProbeKind::Readiness)
    }

    /// Started by container ID, for containers that have a startup result.
    pub fn startup(&self, pod_uid: &str) -> BTreeMap<String, bool> {
        self.results_of(pod_uid, ProbeKind::Startup)
    }

    fn results_of(&self, pod_uid: &str, kind: ProbeKind) -> BTreeMap<String, bool> {
        let state = self.inner.lock();
        state
            .pods
            .get(pod_uid)
            .map(|p| {
                p.results
                    .iter()
                    .filter_map(|(id, r)| {
                        r.get(kind).map(|v| (id.clone(), v == ProbeResult::Success))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Containers whose liveness or startup probe failed, by container ID, with the kubelet's
    /// kill message ("Container app failed liveness probe"; the Killing event appends
    /// ", will be restarted"). Liveness is checked first, as the kubelet does.
    pub fn failed(&self, pod_uid: &str) -> BTreeMap<String, (ProbeKind, String)> {
        let state = self.inner.lock();
        let Some(pod) = state.pods.get(pod_uid) else {
            return BTreeMap::new();
        };
        pod.results
            .iter()
            .filter_map(|(id, r)| {
                let kind = if r.liveness == Some(ProbeResult::Failure) {
                    ProbeKind::Liveness
                } else if r.startup == Some(ProbeResult::Failure) {
                    ProbeKind::Startup
                } else {
                    return None;
                };
                let message = format!(
                    "Container {} failed {} probe",
                    r.container_name,
                    kind.as_str().to_ascii_lowercase()
                );
                Some((id.clone(), (kind, message)))
            })
            .collect()
    }

    /// Stops every worker (nodelet shutdown).
    pub fn shutdown(&self) {
        self.inner.root.cancel();
        self.inner.lock().pods.clear();
    }

    /// How many workers run for the pod (for tests and metrics).
    pub fn worker_count(&self, pod_uid: &str) -> usize {
        self.inner
            .lock()
            .pods
            .get(pod_uid)
            .map_or(0, |p| p.workers.len())
    }
}

fn pod_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not take probing down with it: the state stays consistent
        // because every mutation completes under the lock.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs the workers an instance should have right now.
    fn start_probes(self: &Arc<Self>, pod: &mut PodProbes, serial: &mut u64, target: &Target) {
        let started = pod
            .results
            .get(&target.container_id)
            .and_then(|r| r.startup)
            == Some(ProbeResult::Success);
        if target.container.startup_probe.is_some() && !started {
            // Readiness and liveness are gated on startup: they are created when it succeeds.
            self.ensure_worker(pod, serial, ProbeKind::Startup, target);
            return;
        }
        self.ensure_worker(pod, serial, ProbeKind::Readiness, target);
        self.ensure_worker(pod, serial, ProbeKind::Liveness, target);
    }

    fn ensure_worker(
        self: &Arc<Self>,
        pod: &mut PodProbes,
        serial: &mut u64,
        kind: ProbeKind,
        target: &Target,
    ) {
        if kind.spec(&target.container).is_none() {
            return;
        }
        if pod.terminating && kind != ProbeKind::Readiness {
            return;
        }
        let key = (target.container.name.clone(), kind);
        if let Some(w) = pod.workers.get(&key) {
            if w.container_id == target.container_id {
                return;
            }
            // A slot bound to another instance is never silently overwritten.
            w.token.cancel();
            pod.workers.remove(&key);
        }
        let results = pod
            .results
            .entry(target.container_id.clone())
            .or_insert_with(|| InstanceResults::new(&target.container.name));
        let slot = results.slot(kind);
        match *slot {
            Some(r) if is_terminal(kind, r) => return,
            Some(_) => {}
            None => *slot = Some(kind.initial_result()),
        }
        let initial = slot.unwrap_or(kind.initial_result());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(kind = %kind, "probe worker not started: not inside a tokio runtime");
            return;
        };
        *serial += 1;
        let token = self.root.child_token();
        pod.workers.insert(
            key,
            WorkerEntry {
                container_id: target.container_id.clone(),
                serial: *serial,
                token: token.clone(),
            },
        );
        let span = tracing::info_span!(
            "probe",
            pod.uid = %target.pod_uid,
            pod.namespace = %target.pod_namespace,
            pod.name = %target.pod_name,
            container = %target.container.name,
            kind = %kind,
        );
        tracing::debug!(parent: &span, container_id = %target.container_id, "starting probe worker");
        self.tasks.spawn_on(
            worker::run(self.clone(), target.clone(), kind, *serial, initial, token)
                .instrument(span),
            &runtime,
        );
    }

    /// Publishes a worker's new result. Returns false when the worker is no longer the one
    /// registered for its slot (it must stop).
    pub(super) fn publish(
        self: &Arc<Self>,
        target: &Target,
        kind: ProbeKind,
        serial: u64,
        result: ProbeResult,
    ) -> bool {
        let changed = {
            let mut guard = self.lock();
            let state = &mut *guard;
            let Some(pod) = state.pods.get_mut(&target.pod_uid) else {
                return false;
            };
            let key = (target.container.name.clone(), kind);
            if pod.workers.get(&key).map(|w| w.serial) != Some(serial) {
                return false;
            }
            let results = pod
                .results
                .entry(target.container_id.clone())
                .or_insert_with(|| InstanceResults::new(&target.container.name));
            let slot = results.slot(kind);
            let changed = *slot != Some(result);
            *slot = Some(result);
            if kind == ProbeKind::Startup && result == ProbeResult::Success {
                self.ensure_worker(pod, &mut state.next_serial, ProbeKind::Readiness, target);
                self.ensure_worker(pod, &mut state.next_serial, ProbeKind::Liveness, target);
            }
            changed
        };
        if changed {
            tracing::debug!(result = ?result, "probe result changed");
            let _ = self.updates.send(ProbeUpdate {
                pod_uid: target.pod_uid.clone(),
                container_name: target.container.name.clone(),
                container_id: target.container_id.clone(),
                kind,
                result,
            });
            (self.notify)(&target.pod_uid);
        }
        true
    }

    /// Records an event for one attempt.
    pub(super) fn record_event(
        &self,
        target: &Target,
        kind: ProbeKind,
        reason: &'static str,
        message: String,
    ) {
        (self.events)(ProbeEvent {
            pod_uid: target.pod_uid.clone(),
            pod_namespace: target.pod_namespace.clone(),
            pod_name: target.pod_name.clone(),
            container_name: target.container.name.clone(),
            container_kind: target.container_kind,
            container_id: target.container_id.clone(),
            kind,
            event_type: EVENT_TYPE_WARNING,
            reason,
            message,
        });
    }

    /// A worker exits: vacate its slot unless a newer worker already holds it.
    pub(super) fn worker_exited(&self, target: &Target, kind: ProbeKind, serial: u64) {
        let mut state = self.lock();
        if let Some(pod) = state.pods.get_mut(&target.pod_uid) {
            let key = (target.container.name.clone(), kind);
            if pod.workers.get(&key).map(|w| w.serial) == Some(serial) {
                pod.workers.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus, Probe};

    fn probe() -> Option<Probe> {
        Some(Probe::default())
    }

    #[test]
    fn probed_containers_table() {
        let c = |name: &str, readiness: bool| Container {
            name: name.into(),
            readiness_probe: if readiness { probe() } else { None },
            ..Default::default()
        };
        let sidecar = |name: &str| Container {
            restart_policy: Some("Always".into()),
            ..c(name, true)
        };
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![c("a", true), c("b", false)],
                init_containers: Some(vec![c("init", true), sidecar("side")]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let names: Vec<&str> = probed_containers(&pod)
            .map(|(_, c)| c.name.as_str())
            .collect();
        assert_eq!(names, ["a", "side"]);
    }

    #[test]
    fn adoption_seeds_table() {
        let container = Container {
            name: "app".into(),
            startup_probe: probe(),
            readiness_probe: probe(),
            liveness_probe: probe(),
            ..Default::default()
        };
        let status = |id: Option<&str>, started: bool, ready: bool| ContainerStatus {
            name: "app".into(),
            container_id: id.map(String::from),
            started: Some(started),
            ready,
            ..Default::default()
        };
        let pod_with = |s: ContainerStatus| Pod {
            status: Some(PodStatus {
                container_statuses: Some(vec![s]),
                ..Default::default()
            }),
            ..Default::default()
        };
        use ProbeResult::Success as S;
        type Seeds = (Option<ProbeResult>, Option<ProbeResult>);
        let cases: Vec<(&str, Pod, Seeds)> = vec![
            ("no status", Pod::default(), (None, None)),
            (
                "same instance, started and ready",
                pod_with(status(Some("containerd://c1"), true, true)),
                (Some(S), Some(S)),
            ),
            (
                "same instance, started only",
                pod_with(status(Some("containerd://c1"), true, false)),
                (Some(S), None),
            ),
            (
                "status names no instance yet",
                pod_with(status(None, true, true)),
                (Some(S), Some(S)),
            ),
            (
                "status about another instance",
                pod_with(status(Some("containerd://c0"), true, true)),
                (None, None),
            ),
        ];
        for (name, pod, (startup, readiness)) in cases {
            let seeds = adoption_seeds(&container, reported_status(&pod, "app", "c1"));
            assert_eq!(
                (seeds.startup, seeds.readiness),
                (startup, readiness),
                "{name}"
            );
            assert_eq!(
                seeds.liveness, None,
                "{name}: liveness takes its initial value"
            );
        }
    }

    #[test]
    fn terminal_results_table() {
        use ProbeKind::*;
        use ProbeResult::*;
        let cases = [
            (Liveness, Failure, true),
            (Startup, Failure, true),
            (Readiness, Failure, false),
            (Liveness, Success, false),
            (Startup, Success, false),
            (Startup, Unknown, false),
        ];
        for (kind, result, want) in cases {
            assert_eq!(is_terminal(kind, result), want, "{kind:?} {result:?}");
        }
    }
}
