//! The pod worker's life as a pure state machine (the kubelet's `podSyncStatus` and the
//! sync → terminating → terminated → finished steps of its pod workers):
//!
//! ```text
//!            Sync                 Terminate             Reclaim                Remove
//!  Syncing ─────────▶ Terminating ─────────▶ Terminated ───────▶ Reclaimed ───────▶ Removed ─▶ exit
//!     ▲   (end asked, or             (containers      │ (API deletion:       (gone from its
//!     │    the pod finished)          stopped, final  │  runtime objects,     source: status
//!     │                               status out)     │  volumes, logs gone)  forgotten too)
//!     │                                               └────────── Remove ────────────▶│
//!     └──────────────────────── Restart (the pod came back while it was removed) ─────┘
//! ```
//!
//! Two pure parts, both table-tested:
//! * [`Request`] merges every update the worker receives — the latest pod, and once asked, how
//!   the pod ends ([`End`]): sticky, only ever stronger, its grace override only ever shorter,
//!   its status mutations chained as the kubelet chains its `PodStatusFunc`s.
//! * [`transition`] takes the state, what the request asks ([`Work`]) and the outcome of the
//!   last effect, and returns the next state and the next [`Effect`]. The worker (in
//!   `workers.rs`) runs the effects; while `Terminate` runs it keeps reading updates and moves
//!   the termination's deadline earlier when a shorter grace period arrives.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::status::StatusMutation;
use crate::sync::executor::SyncOutcome;
use crate::sync::grace::pod_grace_period;

/// What the pod manager wants of a pod.
#[derive(Debug, Clone)]
pub enum PodWork {
    /// Keep the pod running as this spec says.
    Sync(Arc<Pod>),
    /// Stop the pod (with `grace`, else its own grace period); with `remove`, also delete
    /// everything it left and forget it.
    Kill {
        pod: Arc<Pod>,
        grace: Option<Duration>,
        remove: bool,
    },
    /// The API server set the pod's deletionTimestamp: terminate it (its
    /// `deletionGracePeriodSeconds` applies), remove its containers, sandbox and volumes, and
    /// report it reclaimed so the final DELETE can go out. The status stays until the pod is
    /// gone from the API.
    Delete { pod: Arc<Pod> },
}

impl PodWork {
    pub fn pod(&self) -> &Arc<Pod> {
        match self {
            PodWork::Sync(pod) | PodWork::Kill { pod, .. } | PodWork::Delete { pod } => pod,
        }
    }
}

/// How far a pod's end goes, weakest first; a stronger request replaces a weaker one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EndKind {
    /// Stop the containers and keep what they left (finished, killed in place, evicted).
    Stop,
    /// Also remove the runtime objects, volumes and logs, keeping the status until the API
    /// object is gone (deleted through the API).
    Reclaim,
    /// Also forget the status: the pod is gone from its source.
    Remove,
}

/// An end asked for a pod.
#[derive(Debug, Clone, PartialEq)]
pub struct End {
    pub kind: EndKind,
    /// The shortest grace period override asked (force delete, eviction); `None`: the pod's
    /// own.
    pub grace_override: Option<Duration>,
    /// What the final status must say (eviction, deadline, admission), chained over every ask.
    pub status: Option<StatusMutation>,
}

/// Everything asked of one pod worker, merged from every update: the latest pod and — once
/// asked — how it ends. The kubelet keeps this in `podSyncStatus` rather than a queue, so no
/// update is lost and none undoes a termination.
#[derive(Debug, Clone)]
pub struct Request {
    /// The latest pod object any update carried.
    pub pod: Arc<Pod>,
    /// How the pod ends; `None` while it should run.
    pub end: Option<End>,
    /// The pod came back (desired again with the same UID) while it was being removed: once
    /// removed, the worker starts over with this (the kubelet's `restartRequested`).
    pub returned: Option<PodWork>,
}

impl Request {
    pub fn new(work: PodWork) -> Self {
        let mut request = Request {
            pod: work.pod().clone(),
            end: None,
            returned: None,
        };
        request.merge(work);
        request
    }

    /// Takes in one update from the pod manager.
    pub fn merge(&mut self, work: PodWork) {
        let removing = self.end.as_ref().is_some_and(|e| e.kind == EndKind::Remove);
        match &work {
            PodWork::Sync(pod) => {
                self.pod = pod.clone();
            }
            PodWork::Kill { pod, grace, remove } => {
                self.pod = pod.clone();
                let kind = if *remove {
                    self.returned = None;
                    EndKind::Remove
                } else {
                    EndKind::Stop
                };
                self.ask(kind, *grace, None);
                return;
            }
            PodWork::Delete { pod } => {
                self.pod = pod.clone();
                if !removing {
                    self.ask(EndKind::Reclaim, None, None);
                }
            }
        }
        if removing {
            self.returned = Some(work);
        }
    }

    /// `kill_pod`: end the pod in place with this override and final status.
    pub fn kill(&mut self, pod: Arc<Pod>, grace: Option<Duration>, status: StatusMutation) {
        self.pod = pod;
        let status = (!status.is_empty()).then_some(status);
        self.ask(EndKind::Stop, grace, status);
    }

    fn ask(&mut self, kind: EndKind, grace: Option<Duration>, status: Option<StatusMutation>) {
        let end = self.end.get_or_insert(End {
            kind,
            grace_override: None,
            status: None,
        });
        end.kind = end.kind.max(kind);
        end.grace_override = match (end.grace_override, grace) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(later) = status {
            match &mut end.status {
                Some(earlier) => earlier.then(&later),
                None => end.status = Some(later),
            }
        }
    }

    /// After the removal of a pod that came back: the request starts over with the update that
    /// brought it back. Returns whether it did.
    pub fn restart(&mut self) -> bool {
        match self.returned.take() {
            Some(work) => {
                *self = Request::new(work);
                true
            }
            None => false,
        }
    }

    /// The grace period the request asks for now: the override if any, else the pod's own (see
    /// [`pod_grace_period`]).
    pub fn grace(&self) -> Duration {
        pod_grace_period(&self.pod, self.end.as_ref().and_then(|e| e.grace_override))
    }

    /// What the request asks, as [`transition`] sees it.
    pub fn work(&self) -> Work {
        match self.end.as_ref().map(|e| e.kind) {
            None => Work::Run,
            Some(EndKind::Stop) => Work::Stop,
            Some(EndKind::Reclaim) => Work::Reclaim,
            Some(EndKind::Remove) => Work::Remove {
                comes_back: self.returned.is_some(),
            },
        }
    }
}

/// What the worker is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Keep the pod running.
    Run,
    /// End it in place.
    Stop,
    /// End it and reclaim what it used (deleted through the API).
    Reclaim,
    /// End it and forget it; `comes_back`: it is desired again and starts over once removed.
    Remove { comes_back: bool },
}

impl Work {
    /// True when the pod is to end: a sync under way is cut short for the termination (the
    /// kubelet cancels the running sync's context when `UpdatePod` brings a kill).
    pub fn ends_the_pod(self) -> bool {
        self != Work::Run
    }
}

/// Where the worker is in the pod's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// The pod runs as its spec says.
    Syncing,
    /// Its containers are being stopped.
    Terminating,
    /// Containers stopped and the final status published; what the runtime holds of the pod is
    /// kept (a finished or killed pod, until it is deleted or removed).
    Terminated,
    /// Containers, sandboxes, volumes and logs are gone; the status stays until the API object
    /// is (the kubelet's "finished").
    Reclaimed,
    /// Everything is gone, the status too.
    Removed,
}

impl State {
    /// True once no container of the pod runs (what a `kill_pod` caller waits for).
    pub fn is_terminated(self) -> bool {
        matches!(self, State::Terminated | State::Reclaimed | State::Removed)
    }
}

/// What the last effect achieved.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// No effect ran: the worker started, or woke from a wait (an update, a runtime event, a
    /// deadline).
    Woke,
    /// A sync ran and decided this.
    Synced(SyncOutcome),
    /// The termination finished: containers stopped, final status published.
    Stopped,
    /// The pod's runtime objects, volumes and logs are removed (its status kept).
    Reclaimed,
    /// Everything of the pod is removed, its status too.
    Removed,
    /// The effect failed (runtime unreachable, ...); it is tried again after a while.
    Failed,
}

/// What the worker does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Sync the pod (compute its actions, run them, publish its status).
    Sync,
    /// Stop its containers within the grace period (which shorter requests keep shortening),
    /// then publish the final status with the request's mutation.
    Terminate,
    /// Remove its runtime objects, volumes and logs; mark it reclaimed.
    Reclaim,
    /// Remove everything of it and its status.
    Remove,
    /// Start over with the update that brought the pod back: fresh memory, then Syncing.
    Restart,
    Wait(Wait),
    /// Deregister and end the worker.
    Exit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Until an update, a runtime event, or this long.
    Retry(Duration),
    /// Until an update, a runtime event, or the resync period — or this long, when sooner (a
    /// deadline of the pod's).
    Idle(Option<Duration>),
    /// Until an update.
    ForUpdate,
}

/// Delay before retrying an effect that failed (runtime unreachable, ...).
pub const ERROR_RETRY: Duration = Duration::from_secs(2);

/// The next state and effect. A pod never goes back from Terminating (only a removed pod that
/// came back starts over), and each settled state runs what the request still asks of it.
pub fn transition(state: State, work: Work, outcome: &Outcome) -> (State, Effect) {
    use Effect::{Restart, Sync, Terminate};
    use State::*;
    let retry = Effect::Wait(Wait::Retry(ERROR_RETRY));
    match state {
        Syncing if work != Work::Run => (Terminating, Terminate),
        Syncing => match outcome {
            Outcome::Synced(SyncOutcome::Acted) => (Syncing, Sync),
            Outcome::Synced(SyncOutcome::Retry(after)) => {
                (Syncing, Effect::Wait(Wait::Retry(*after)))
            }
            Outcome::Synced(SyncOutcome::Idle(deadline)) => {
                (Syncing, Effect::Wait(Wait::Idle(*deadline)))
            }
            Outcome::Synced(SyncOutcome::Terminal | SyncOutcome::Kill(_)) => {
                (Terminating, Terminate)
            }
            Outcome::Failed => (Syncing, retry),
            // Woke; the others follow no effect of this state: syncing is always safe.
            Outcome::Woke | Outcome::Stopped | Outcome::Reclaimed | Outcome::Removed => {
                (Syncing, Sync)
            }
        },
        Terminating => match outcome {
            Outcome::Stopped => settled(Terminated, work),
            Outcome::Failed => (Terminating, retry),
            _ => (Terminating, Terminate),
        },
        Terminated | Reclaimed => match outcome {
            Outcome::Removed => removed(work),
            Outcome::Reclaimed => settled(Reclaimed, work),
            Outcome::Failed => (state, retry),
            _ => settled(state, work),
        },
        // Whatever the last outcome: the pod is gone, unless it is wanted again.
        Removed => {
            if matches!(work, Work::Run | Work::Remove { comes_back: true }) {
                (Syncing, Restart)
            } else {
                (Removed, Effect::Exit)
            }
        }
    }
}

/// A terminated or reclaimed pod: run what is still asked of it, else wait.
fn settled(state: State, work: Work) -> (State, Effect) {
    match (state, work) {
        (_, Work::Remove { .. }) => (state, Effect::Remove),
        (State::Terminated, Work::Reclaim) => (state, Effect::Reclaim),
        _ => (state, Effect::Wait(Wait::ForUpdate)),
    }
}

fn removed(work: Work) -> (State, Effect) {
    transition(State::Removed, work, &Outcome::Woke)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    const ALL_STATES: [State; 5] = [
        State::Syncing,
        State::Terminating,
        State::Terminated,
        State::Reclaimed,
        State::Removed,
    ];
    const ALL_WORK: [Work; 5] = [
        Work::Run,
        Work::Stop,
        Work::Reclaim,
        Work::Remove { comes_back: false },
        Work::Remove { comes_back: true },
    ];

    fn all_outcomes() -> Vec<Outcome> {
        let s = Duration::from_secs;
        vec![
            Outcome::Woke,
            Outcome::Synced(SyncOutcome::Acted),
            Outcome::Synced(SyncOutcome::Retry(s(10))),
            Outcome::Synced(SyncOutcome::Idle(Some(s(5)))),
            Outcome::Synced(SyncOutcome::Terminal),
            Outcome::Synced(SyncOutcome::Kill(StatusMutation::failed("R", "m"))),
            Outcome::Stopped,
            Outcome::Reclaimed,
            Outcome::Removed,
            Outcome::Failed,
        ]
    }

    /// Every (state, work) pair after a wake-up: the effect each state runs for each request.
    #[test]
    fn every_state_and_work_after_a_wake_up() {
        use Effect::*;
        use State::*;
        let back = Work::Remove { comes_back: true };
        let gone = Work::Remove { comes_back: false };
        let wait = Effect::Wait(super::Wait::ForUpdate);
        // (state, work, next state, effect)
        let cases = [
            (Syncing, Work::Run, Syncing, Sync),
            (Syncing, Work::Stop, Terminating, Terminate),
            (Syncing, Work::Reclaim, Terminating, Terminate),
            (Syncing, gone, Terminating, Terminate),
            (Syncing, back, Terminating, Terminate),
            // Terminating never goes back, whatever is asked.
            (Terminating, Work::Run, Terminating, Terminate),
            (Terminating, Work::Stop, Terminating, Terminate),
            (Terminating, Work::Reclaim, Terminating, Terminate),
            (Terminating, gone, Terminating, Terminate),
            (Terminating, back, Terminating, Terminate),
            // A finished pod stays terminated when it is updated (as in the kubelet).
            (Terminated, Work::Run, Terminated, wait),
            (Terminated, Work::Stop, Terminated, wait),
            (Terminated, Work::Reclaim, Terminated, Reclaim),
            (Terminated, gone, Terminated, Remove),
            (Terminated, back, Terminated, Remove),
            (Reclaimed, Work::Run, Reclaimed, wait),
            (Reclaimed, Work::Stop, Reclaimed, wait),
            (Reclaimed, Work::Reclaim, Reclaimed, wait),
            (Reclaimed, gone, Reclaimed, Remove),
            (Reclaimed, back, Reclaimed, Remove),
            (Removed, Work::Run, Syncing, Restart),
            (Removed, Work::Stop, Removed, Exit),
            (Removed, Work::Reclaim, Removed, Exit),
            (Removed, gone, Removed, Exit),
            (Removed, back, Syncing, Restart),
        ];
        assert_eq!(cases.len(), ALL_STATES.len() * ALL_WORK.len());
        for (state, work, want_state, want_effect) in cases {
            assert_eq!(
                transition(state, work, &Outcome::Woke),
                (want_state, want_effect),
                "{state:?} + {work:?}"
            );
        }
    }

    /// The outcome of each state's own effect.
    #[test]
    fn outcomes_of_each_effect() {
        use Effect::*;
        use State::*;
        let s = Duration::from_secs;
        let retry = Effect::Wait(super::Wait::Retry(ERROR_RETRY));
        let wait = Effect::Wait(super::Wait::ForUpdate);
        let gone = Work::Remove { comes_back: false };
        let back = Work::Remove { comes_back: true };
        // (case, state, work, outcome, next state, effect)
        let cases = [
            (
                "acted: sync again at once",
                Syncing,
                Work::Run,
                Outcome::Synced(SyncOutcome::Acted),
                Syncing,
                Sync,
            ),
            (
                "a start failed: retry after its backoff",
                Syncing,
                Work::Run,
                Outcome::Synced(SyncOutcome::Retry(s(10))),
                Syncing,
                Effect::Wait(super::Wait::Retry(s(10))),
            ),
            (
                "idle until the resync or the pod's deadline",
                Syncing,
                Work::Run,
                Outcome::Synced(SyncOutcome::Idle(Some(s(5)))),
                Syncing,
                Effect::Wait(super::Wait::Idle(Some(s(5)))),
            ),
            (
                "the pod finished: terminate what remains",
                Syncing,
                Work::Run,
                Outcome::Synced(SyncOutcome::Terminal),
                Terminating,
                Terminate,
            ),
            (
                "activeDeadlineSeconds: terminate",
                Syncing,
                Work::Run,
                Outcome::Synced(SyncOutcome::Kill(StatusMutation::failed("R", "m"))),
                Terminating,
                Terminate,
            ),
            (
                "a kill arrived during the sync",
                Syncing,
                Work::Stop,
                Outcome::Synced(SyncOutcome::Acted),
                Terminating,
                Terminate,
            ),
            (
                "sync failed: retry",
                Syncing,
                Work::Run,
                Outcome::Failed,
                Syncing,
                retry,
            ),
            (
                "terminated in place: wait",
                Terminating,
                Work::Stop,
                Outcome::Stopped,
                Terminated,
                wait,
            ),
            (
                "a self-finished pod: wait",
                Terminating,
                Work::Run,
                Outcome::Stopped,
                Terminated,
                wait,
            ),
            (
                "deleted: reclaim next",
                Terminating,
                Work::Reclaim,
                Outcome::Stopped,
                Terminated,
                Reclaim,
            ),
            (
                "removed: remove next",
                Terminating,
                gone,
                Outcome::Stopped,
                Terminated,
                Remove,
            ),
            (
                "termination failed: retry it",
                Terminating,
                Work::Stop,
                Outcome::Failed,
                Terminating,
                retry,
            ),
            (
                "reclaimed: wait for the API object to go",
                Terminated,
                Work::Reclaim,
                Outcome::Reclaimed,
                Reclaimed,
                wait,
            ),
            (
                "reclaimed, and meanwhile removed",
                Terminated,
                gone,
                Outcome::Reclaimed,
                Reclaimed,
                Remove,
            ),
            (
                "reclaim failed: retry",
                Terminated,
                Work::Reclaim,
                Outcome::Failed,
                Terminated,
                retry,
            ),
            (
                "removed: exit",
                Terminated,
                gone,
                Outcome::Removed,
                Removed,
                Exit,
            ),
            (
                "removed after reclaiming: exit",
                Reclaimed,
                gone,
                Outcome::Removed,
                Removed,
                Exit,
            ),
            (
                "removed, but it came back: start over",
                Terminated,
                back,
                Outcome::Removed,
                Syncing,
                Restart,
            ),
            (
                "remove failed: retry",
                Reclaimed,
                gone,
                Outcome::Failed,
                Reclaimed,
                retry,
            ),
        ];
        for (name, state, work, outcome, want_state, want_effect) in cases {
            assert_eq!(
                transition(state, work, &outcome),
                (want_state, want_effect),
                "{name}"
            );
        }
    }

    /// Over every state × work × outcome: termination never goes back, and only a removed pod
    /// that is desired again starts over.
    #[test]
    fn no_way_back_except_a_return() {
        for state in ALL_STATES {
            for work in ALL_WORK {
                for outcome in all_outcomes() {
                    let (next, effect) = transition(state, work, &outcome);
                    let case = format!("{state:?} + {work:?} + {outcome:?} → {next:?}, {effect:?}");
                    if state != State::Syncing && next == State::Syncing {
                        assert_eq!(effect, Effect::Restart, "{case}");
                        assert!(
                            matches!(work, Work::Run | Work::Remove { comes_back: true }),
                            "{case}"
                        );
                    }
                    if state.is_terminated() {
                        assert!(next.is_terminated() || effect == Effect::Restart, "{case}");
                    }
                    if work != Work::Run && state == State::Syncing {
                        assert_eq!(
                            (next, effect),
                            (State::Terminating, Effect::Terminate),
                            "{case}"
                        );
                    }
                    if effect == Effect::Sync {
                        assert_eq!(next, State::Syncing, "{case}");
                    }
                    if effect == Effect::Terminate {
                        assert_eq!(next, State::Terminating, "{case}");
                    }
                }
            }
        }
    }

    fn pod(uid: &str, grace: i64, deletion_grace: Option<i64>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                deletion_grace_period_seconds: deletion_grace,
                ..Default::default()
            },
            spec: Some(PodSpec {
                termination_grace_period_seconds: Some(grace),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn merging_updates() {
        let s = Duration::from_secs;
        let p = pod("u", 30, None);
        let deleted = pod("u", 30, Some(30));
        let forced = pod("u", 30, Some(0));
        let sync = PodWork::Sync(p.clone());
        let kill = |grace: Option<u64>, remove| PodWork::Kill {
            pod: p.clone(),
            grace: grace.map(s),
            remove,
        };
        let delete = |pod: &Arc<Pod>| PodWork::Delete { pod: pod.clone() };
        // (case, updates in order, work, grace (s))
        let cases: Vec<(&str, Vec<PodWork>, Work, u64)> = vec![
            ("a sync runs", vec![sync.clone()], Work::Run, 30),
            (
                "a kill stops",
                vec![sync.clone(), kill(None, false)],
                Work::Stop,
                30,
            ),
            (
                "a later sync does not undo a kill",
                vec![kill(None, false), sync.clone()],
                Work::Stop,
                30,
            ),
            (
                "deletion reclaims with its grace period",
                vec![sync.clone(), delete(&deleted)],
                Work::Reclaim,
                30,
            ),
            (
                "a force delete through the API shortens it",
                vec![delete(&deleted), delete(&forced)],
                Work::Reclaim,
                0,
            ),
            (
                "a kill in place after a deletion keeps reclaiming",
                vec![delete(&deleted), kill(Some(10), false)],
                Work::Reclaim,
                10,
            ),
            (
                "removal wins over everything",
                vec![delete(&deleted), kill(None, true)],
                Work::Remove { comes_back: false },
                30,
            ),
            (
                "the shortest override stands",
                vec![
                    kill(Some(5), false),
                    kill(Some(20), false),
                    kill(None, false),
                ],
                Work::Stop,
                5,
            ),
            (
                "removed, then back",
                vec![kill(Some(0), true), sync.clone()],
                Work::Remove { comes_back: true },
                0,
            ),
            (
                "back, then removed again",
                vec![kill(None, true), sync.clone(), kill(None, true)],
                Work::Remove { comes_back: false },
                30,
            ),
        ];
        for (name, updates, want_work, want_grace) in cases {
            let mut updates = updates.into_iter();
            let mut r = Request::new(updates.next().unwrap());
            for u in updates {
                r.merge(u);
            }
            assert_eq!(r.work(), want_work, "{name}");
            assert_eq!(r.grace(), s(want_grace), "{name}");
        }
    }

    #[test]
    fn kill_pod_mutations_chain_and_a_return_starts_over() {
        let p = pod("u", 30, None);
        let mut r = Request::new(PodWork::Sync(p.clone()));
        r.kill(
            p.clone(),
            Some(Duration::from_secs(10)),
            StatusMutation::default(),
        );
        assert_eq!(
            r.end.as_ref().unwrap().status,
            None,
            "an empty mutation is none"
        );
        r.kill(
            p.clone(),
            None,
            StatusMutation::failed("Evicted", "low on memory"),
        );
        r.kill(
            p.clone(),
            Some(Duration::from_secs(20)),
            StatusMutation {
                message: Some("shutting down".into()),
                ..Default::default()
            },
        );
        let end = r.end.clone().unwrap();
        assert_eq!(end.kind, EndKind::Stop);
        assert_eq!(end.grace_override, Some(Duration::from_secs(10)));
        let status = end.status.unwrap();
        assert_eq!(status.reason.as_deref(), Some("Evicted"));
        assert_eq!(status.message.as_deref(), Some("shutting down"));
        assert!(!r.restart(), "nothing came back");

        let mut r = Request::new(PodWork::Kill {
            pod: p.clone(),
            grace: None,
            remove: true,
        });
        let deleted = pod("u", 30, Some(5));
        r.merge(PodWork::Delete {
            pod: deleted.clone(),
        });
        assert_eq!(r.work(), Work::Remove { comes_back: true });
        assert!(r.restart());
        assert_eq!(r.work(), Work::Reclaim, "it came back being deleted");
        assert_eq!(r.grace(), Duration::from_secs(5));
        assert!(r.returned.is_none());
    }

    #[test]
    fn every_end_cuts_a_sync_short_and_running_does_not() {
        let cases = [
            (Work::Run, false),
            (Work::Stop, true),
            (Work::Reclaim, true),
            (Work::Remove { comes_back: false }, true),
            (Work::Remove { comes_back: true }, true),
        ];
        for (work, cut) in cases {
            assert_eq!(work.ends_the_pod(), cut, "{work:?}");
        }
    }
}
