//! Container exits as the runtime's own event reported them, before the CRI says so.
//!
//! containerd publishes `/tasks/exit` the moment a container's main process is reaped (exit
//! code and time from the shim), and `/tasks/oom` when the kernel OOM-kills in its cgroup.
//! Its CRI plugin records the exit only after deleting the task, tens to hundreds of
//! milliseconds later; until then `ContainerStatus` still says running. [`ObservedExits`] keeps
//! what the events said, and [`apply`] lays it over a pod's runtime view for the *status*:
//! the pod's API status shows the container terminated from the event on. Decisions that need
//! the runtime's agreement (a restart, a removal) keep reading the CRI's own view.
//!
//! Once the CRI agrees (it reports the container exited or no longer lists it), the record is
//! dropped; an OOM seen in the event stays with the container until it is removed, so the
//! status does not turn from `OOMKilled` back to `Error` when a runtime loses the OOM.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;

use super::labels;
use super::model::{ContainerState, PodRuntime, RuntimeContainer};

/// The CRI's reasons for an exited container (containerd's `exitReason` values).
pub const REASON_COMPLETED: &str = "Completed";
pub const REASON_ERROR: &str = "Error";
pub const REASON_OOM_KILLED: &str = "OOMKilled";

/// How many containers' records are kept at most: far above the containers of a node's pods
/// waiting for the CRI at one moment; a stream of exits never grows memory past it.
pub const MAX_RECORDS: usize = 4096;

/// What the runtime's events said about one container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExitRecord {
    /// Exit status and time of the main process, from `/tasks/exit`.
    pub exit: Option<(i32, Timestamp)>,
    /// The kernel OOM-killed in the container's cgroup (`/tasks/oom`).
    pub oom: bool,
    /// The pod's sync is stopping the container itself (to restart it, or because a probe
    /// failed): the sync publishes what follows, the exit is not shown ahead of it.
    pub stopped_by_sync: bool,
    /// Insertion order, for the bound.
    seq: u64,
}

/// The exit reason the CRI gives for an exit code, with what the OOM event said.
pub fn exit_reason(exit_code: i32, oom: bool) -> &'static str {
    if oom {
        REASON_OOM_KILLED
    } else if exit_code == 0 {
        REASON_COMPLETED
    } else {
        REASON_ERROR
    }
}

/// Whether an exit of `code` is known from the runtime's events alone, given whether an OOM
/// kill was recorded for the container. A SIGKILL (137) may be the kernel's OOM kill, and
/// `/tasks/oom` can come after `/tasks/exit` (containerd 1.6 publishes them in either order):
/// without a recorded OOM, such an exit waits for the CRI, whose reason weighs the runtime's
/// own OOM record, so the status does not show `Error` for what was an OOM kill.
pub fn known_from_events(code: i32, oom_recorded: bool) -> bool {
    code != 137 || oom_recorded
}

/// Whether an exit of `code` leaves `container`'s termination message to its log
/// (`terminationMessagePolicy: FallbackToLogsOnError` and a non-zero code): the runtime drains
/// the container's output before it records the exit, so such an exit waits for the CRI, or
/// the message could miss the last lines.
fn message_from_log(container: &RuntimeContainer, code: i32) -> bool {
    code != 0
        && container
            .annotations
            .get(labels::CONTAINER_TERMINATION_MESSAGE_POLICY)
            .is_some_and(|p| p == "FallbackToLogsOnError")
}

/// `runtime` as the status must show it, given the runtime's events: a container the CRI still
/// reports running whose exit the event announced is exited, with the event's code, time and
/// reason (unless its termination message is to come from its log, or it may be an OOM kill
/// not recorded yet (see [`known_from_events`]): those exits wait for the CRI); an exited
/// container the event saw OOM-killed has the reason `OOMKilled`.
/// Nothing else changes (the instances, their order, their IDs, the messages).
pub fn apply(runtime: &PodRuntime, records: &HashMap<String, ExitRecord>) -> PodRuntime {
    let mut out = runtime.clone();
    for c in &mut out.containers {
        let Some(record) = records.get(&c.id) else {
            continue;
        };
        match (c.state, record.exit) {
            (ContainerState::Running | ContainerState::Created, Some((code, _)))
                if message_from_log(c, code) || !known_from_events(code, record.oom) => {}
            (ContainerState::Running | ContainerState::Created, Some((code, at))) => {
                c.state = ContainerState::Exited;
                c.exit_code = code;
                c.finished_at = Some(at);
                c.reason = exit_reason(code, record.oom).to_string();
            }
            (ContainerState::Exited, _) if record.oom && c.reason != REASON_OOM_KILLED => {
                c.reason = REASON_OOM_KILLED.to_string();
            }
            _ => {}
        }
    }
    out
}

/// Whether the CRI's view of a container has caught up with its record (the record's exit is
/// no longer needed; an OOM flag is kept regardless).
fn caught_up(state: ContainerState) -> bool {
    !matches!(state, ContainerState::Running | ContainerState::Created)
}

/// The records, shared by the PLEG (writer, from containerd's events) and the pod workers
/// (readers, when they publish a status). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ObservedExits {
    inner: Arc<Mutex<Records>>,
}

#[derive(Debug, Default)]
struct Records {
    by_id: HashMap<String, ExitRecord>,
    next_seq: u64,
}

impl Records {
    fn entry(&mut self, id: &str) -> &mut ExitRecord {
        if !self.by_id.contains_key(id) && self.by_id.len() >= MAX_RECORDS {
            if let Some(oldest) = self
                .by_id
                .iter()
                .min_by_key(|(_, r)| r.seq)
                .map(|(k, _)| k.clone())
            {
                self.by_id.remove(&oldest);
            }
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_id.entry(id.to_string()).or_insert(ExitRecord {
            seq,
            ..Default::default()
        })
    }
}

impl ObservedExits {
    pub fn new() -> Self {
        Self::default()
    }

    /// A poisoned lock only means a panic mid-update of a plain map; it stays usable.
    fn lock(&self) -> MutexGuard<'_, Records> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The main process of container `id` exited with `code` at `at` (`/tasks/exit`). A second
    /// exit for the same container (a replayed event) keeps the first.
    pub fn exited(&self, id: &str, code: i32, at: Timestamp) {
        let mut records = self.lock();
        let record = records.entry(id);
        if record.exit.is_none() {
            record.exit = Some((code, at));
        }
    }

    /// The kernel OOM-killed in container `id`'s cgroup (`/tasks/oom`).
    pub fn oom_killed(&self, id: &str) {
        self.lock().entry(id).oom = true;
    }

    /// The pod's sync is about to stop container `id` itself: its exit waits for the sync.
    pub fn stopping_by_sync(&self, id: &str) {
        self.lock().entry(id).stopped_by_sync = true;
    }

    /// The record of container `id`, if any.
    pub fn get(&self, id: &str) -> Option<ExitRecord> {
        self.lock().by_id.get(id).copied()
    }

    /// [`apply`] with the current records, dropping the exits the CRI has caught up with and
    /// the records of containers the runtime no longer lists for this pod.
    pub fn overlay(&self, runtime: &PodRuntime) -> PodRuntime {
        let mut records = self.lock();
        if records.by_id.is_empty() {
            return runtime.clone();
        }
        let relevant: HashMap<String, ExitRecord> = runtime
            .containers
            .iter()
            .filter_map(|c| records.by_id.get(&c.id).map(|r| (c.id.clone(), *r)))
            .collect();
        let out = apply(runtime, &relevant);
        for c in &runtime.containers {
            if !caught_up(c.state) {
                continue;
            }
            if let Some(r) = records.by_id.get_mut(&c.id) {
                r.exit = None;
                if !r.oom {
                    records.by_id.remove(&c.id);
                }
            }
        }
        out
    }

    /// Container `id` is gone from the runtime: its record goes too.
    pub fn removed(&self, id: &str) {
        self.lock().by_id.remove(id);
    }

    /// How many containers have records (for tests and metrics).
    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::RuntimeContainer;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn container(id: &str, state: ContainerState, code: i32, reason: &str) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            name: format!("n-{id}"),
            state,
            exit_code: code,
            reason: reason.into(),
            started_at: Some(t(100)),
            finished_at: (state == ContainerState::Exited).then(|| t(150)),
            ..Default::default()
        }
    }

    fn runtime(containers: Vec<RuntimeContainer>) -> PodRuntime {
        PodRuntime {
            uid: "u".into(),
            containers,
            ..Default::default()
        }
    }

    fn record(exit: Option<(i32, i64)>, oom: bool) -> ExitRecord {
        ExitRecord {
            exit: exit.map(|(c, s)| (c, t(s))),
            oom,
            stopped_by_sync: false,
            seq: 0,
        }
    }

    /// (case, the CRI's view, the record, expected state, exit code, reason, finished_at second)
    type Case = (
        &'static str,
        RuntimeContainer,
        Option<ExitRecord>,
        ContainerState,
        i32,
        &'static str,
        Option<i64>,
    );

    #[test]
    fn apply_table() {
        use ContainerState::*;
        let cases: Vec<Case> = vec![
            (
                "no record: as the CRI says",
                container("a", Running, 0, ""),
                None,
                Running,
                0,
                "",
                None,
            ),
            (
                "running, exit 1 seen",
                container("a", Running, 0, ""),
                Some(record(Some((1, 200)), false)),
                Exited,
                1,
                REASON_ERROR,
                Some(200),
            ),
            (
                "running, exit 0 seen",
                container("a", Running, 0, ""),
                Some(record(Some((0, 201)), false)),
                Exited,
                0,
                REASON_COMPLETED,
                Some(201),
            ),
            (
                "running, OOM then exit 137",
                container("a", Running, 0, ""),
                Some(record(Some((137, 202)), true)),
                Exited,
                137,
                REASON_OOM_KILLED,
                Some(202),
            ),
            (
                "running, exit 137 without an OOM yet: waits for the CRI",
                container("a", Running, 0, ""),
                Some(record(Some((137, 202)), false)),
                Running,
                0,
                "",
                None,
            ),
            (
                "running, exit 143 (SIGTERM) seen",
                container("a", Running, 0, ""),
                Some(record(Some((143, 205)), false)),
                Exited,
                143,
                REASON_ERROR,
                Some(205),
            ),
            (
                "CRI caught up on a 137 without an OOM record: its Error stands",
                container("a", Exited, 137, REASON_ERROR),
                Some(record(Some((137, 202)), false)),
                Exited,
                137,
                REASON_ERROR,
                Some(150),
            ),
            (
                "running, OOM only: still running",
                container("a", Running, 0, ""),
                Some(record(None, true)),
                Running,
                0,
                "",
                None,
            ),
            (
                "created, exit seen (started and died at once)",
                container("a", Created, 0, ""),
                Some(record(Some((2, 203)), false)),
                Exited,
                2,
                REASON_ERROR,
                Some(203),
            ),
            (
                "CRI caught up: its values stand",
                container("a", Exited, 1, REASON_ERROR),
                Some(record(Some((1, 200)), false)),
                Exited,
                1,
                REASON_ERROR,
                Some(150),
            ),
            (
                "CRI lost the OOM: the event's reason stands",
                container("a", Exited, 137, REASON_ERROR),
                Some(record(None, true)),
                Exited,
                137,
                REASON_OOM_KILLED,
                Some(150),
            ),
            (
                "message from the log: waits for the CRI",
                RuntimeContainer {
                    annotations: [(
                        labels::CONTAINER_TERMINATION_MESSAGE_POLICY.to_string(),
                        "FallbackToLogsOnError".to_string(),
                    )]
                    .into(),
                    ..container("a", Running, 0, "")
                },
                Some(record(Some((1, 200)), false)),
                Running,
                0,
                "",
                None,
            ),
            (
                "message from the log policy, exit 0: the file's message only",
                RuntimeContainer {
                    annotations: [(
                        labels::CONTAINER_TERMINATION_MESSAGE_POLICY.to_string(),
                        "FallbackToLogsOnError".to_string(),
                    )]
                    .into(),
                    ..container("a", Running, 0, "")
                },
                Some(record(Some((0, 204)), false)),
                Exited,
                0,
                REASON_COMPLETED,
                Some(204),
            ),
            (
                "unknown state is left alone",
                container("a", Unknown, 0, ""),
                Some(record(Some((1, 200)), false)),
                Unknown,
                0,
                "",
                None,
            ),
        ];
        for (name, c, rec, state, code, reason, finished) in cases {
            let records: HashMap<String, ExitRecord> =
                rec.into_iter().map(|r| ("a".to_string(), r)).collect();
            let out = apply(&runtime(vec![c.clone()]), &records);
            let got = &out.containers[0];
            assert_eq!(got.state, state, "{name}: state");
            assert_eq!(got.exit_code, code, "{name}: exit code");
            assert_eq!(got.reason, reason, "{name}: reason");
            assert_eq!(got.finished_at, finished.map(t), "{name}: finished_at");
            assert_eq!(
                (&got.id, &got.name, got.started_at),
                (&c.id, &c.name, c.started_at),
                "{name}: identity kept"
            );
        }
    }

    #[test]
    fn only_the_recorded_container_changes() {
        let rt = runtime(vec![
            container("a", ContainerState::Running, 0, ""),
            container("b", ContainerState::Running, 0, ""),
        ]);
        let records = HashMap::from([("b".to_string(), record(Some((3, 300)), false))]);
        let out = apply(&rt, &records);
        assert_eq!(out.containers[0], rt.containers[0]);
        assert_eq!(out.containers[1].state, ContainerState::Exited);
    }

    #[test]
    fn records_live_until_the_cri_catches_up_and_oom_until_removal() {
        let exits = ObservedExits::new();
        exits.oom_killed("a");
        exits.exited("a", 137, t(10));
        exits.exited("a", 1, t(11)); // a replay keeps the first
        exits.exited("b", 0, t(12));
        assert_eq!(exits.get("a").unwrap().exit, Some((137, t(10))));

        // The CRI still says running: the overlay shows the exits, nothing is dropped.
        let running = runtime(vec![
            container("a", ContainerState::Running, 0, ""),
            container("b", ContainerState::Running, 0, ""),
        ]);
        let out = exits.overlay(&running);
        assert_eq!(out.containers[0].reason, REASON_OOM_KILLED);
        assert_eq!(out.containers[1].reason, REASON_COMPLETED);
        assert_eq!(exits.len(), 2);

        // The CRI caught up (and lost the OOM): b's record goes, a keeps its OOM.
        let caught = runtime(vec![
            container("a", ContainerState::Exited, 137, REASON_ERROR),
            container("b", ContainerState::Exited, 0, REASON_COMPLETED),
        ]);
        let out = exits.overlay(&caught);
        assert_eq!(out.containers[0].reason, REASON_OOM_KILLED);
        assert_eq!(exits.get("b"), None);
        assert_eq!(exits.get("a").map(|r| (r.exit, r.oom)), Some((None, true)));

        exits.removed("a");
        assert!(exits.is_empty());
    }

    #[test]
    fn the_records_are_bounded_oldest_out() {
        let exits = ObservedExits::new();
        for i in 0..MAX_RECORDS + 10 {
            exits.exited(&format!("c{i}"), 1, t(1));
        }
        assert_eq!(exits.len(), MAX_RECORDS);
        assert_eq!(exits.get("c0"), None, "the oldest went first");
        assert!(exits.get(&format!("c{}", MAX_RECORDS + 9)).is_some());
    }
}
