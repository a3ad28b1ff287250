//! Bounded writes against an API server that does not store what it is sent.
//!
//! A writer that decides to write by comparing its wish with the server's copy loops forever
//! when the server drops or normalizes a field: every comparison finds the difference again.
//! The pod status sync and the node status loop therefore decide from their own record of what
//! they last wrote, and treat a difference the server's copy still shows after a successful
//! write as *non-convergence*: the same difference is written again only after a backoff that
//! doubles from the writer's period up to a cap ([`after_write`]), while a new difference (a
//! real change, or a field someone else changed) is written at once ([`decide_write`]).

use std::time::Duration;

use tokio::time::Instant;

/// Retry delay after `failures` consecutive failures (1 → `initial`), doubled each time, capped.
pub fn backoff_delay(failures: u32, initial: Duration, max: Duration) -> Duration {
    crate::backoff::exponential(initial, failures.saturating_sub(1), max)
}

/// A difference that a successful write left on the server: these fields did not take (the
/// server drops or normalizes them).
#[derive(Debug, Clone, PartialEq)]
pub struct NonConvergence {
    /// The differing fields, named by path (`status.conditions[type=Ready].observedGeneration`).
    pub paths: Vec<String>,
    /// Consecutive writes that left (some of) these differences.
    pub writes: u32,
    /// No reconcile write for these differences before this.
    pub retry_at: Instant,
}

/// Whether to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteDecision {
    /// The API's copy is what nodelet wants, or there is nothing new and this is no reconcile.
    Nothing,
    /// A new status that differs from the one nodelet last wrote.
    Change,
    /// The periodic reconcile found the API's copy different (changed by someone else, or a
    /// write lost).
    Reconcile,
    /// The only differences are ones earlier writes did not remove; not again before their
    /// `retry_at`.
    BackingOff,
}

/// The write decision. `changed_since_written`: what the writer wants now differs from what it
/// last wrote (its own record; the server's echo never sets it). `reconcile`: this pass may
/// compare with the server's copy (the pod sync's periodic pass; every node status update). `server_diff`: where the API's copy differs from the status nodelet
/// wants, by field path. `stuck`: what earlier writes did not remove.
pub fn decide_write(
    changed_since_written: bool,
    reconcile: bool,
    server_diff: &[String],
    stuck: Option<&NonConvergence>,
    now: Instant,
) -> WriteDecision {
    if server_diff.is_empty() {
        return WriteDecision::Nothing;
    }
    if changed_since_written {
        return WriteDecision::Change;
    }
    if !reconcile {
        return WriteDecision::Nothing;
    }
    match stuck {
        Some(s) if now < s.retry_at && server_diff.iter().all(|p| s.paths.contains(p)) => {
            WriteDecision::BackingOff
        }
        _ => WriteDecision::Reconcile,
    }
}

/// What is stuck after a successful write whose answer still differs from what was sent at
/// `residual` (empty: the write converged). The same differences again double the wait,
/// starting at `initial` (the reconcile period), up to `max`.
pub fn after_write(
    previous: Option<&NonConvergence>,
    residual: Vec<String>,
    now: Instant,
    initial: Duration,
    max: Duration,
) -> Option<NonConvergence> {
    if residual.is_empty() {
        return None;
    }
    let writes = match previous {
        Some(p) if residual.iter().all(|r| p.paths.contains(r)) => p.writes.saturating_add(1),
        _ => 1,
    };
    Some(NonConvergence {
        paths: residual,
        writes,
        retry_at: now + backoff_delay(writes, initial, max),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let ms = Duration::from_millis;
        let cases = [
            (1, 500),
            (2, 1000),
            (3, 2000),
            (5, 8000),
            (6, 10_000),
            (60, 10_000),
        ];
        for (failures, expected) in cases {
            assert_eq!(
                backoff_delay(failures, ms(500), ms(10_000)),
                ms(expected),
                "failures {failures}"
            );
        }
    }

    #[test]
    fn decide_write_table() {
        let now = Instant::now();
        let s = Duration::from_secs;
        let stuck = |paths: &[&str], retry_in: u64| NonConvergence {
            paths: paths.iter().map(|p| p.to_string()).collect(),
            writes: 1,
            retry_at: now + s(retry_in),
        };
        let og = "status.conditions[type=Ready].observedGeneration";
        let ip = "status.podIP";
        // (name, changed since written, reconcile, server diff, stuck, expected)
        type Case = (
            &'static str,
            bool,
            bool,
            Vec<&'static str>,
            Option<NonConvergence>,
            WriteDecision,
        );
        let cases: Vec<Case> = vec![
            (
                "the API has it",
                true,
                true,
                vec![],
                None,
                WriteDecision::Nothing,
            ),
            (
                "a new status goes out",
                true,
                false,
                vec![ip],
                None,
                WriteDecision::Change,
            ),
            (
                "a new status goes out even while backing off",
                true,
                true,
                vec![og, ip],
                Some(stuck(&[og], 60)),
                WriteDecision::Change,
            ),
            (
                "a watch echo (no new status) outside the reconcile writes nothing",
                false,
                false,
                vec![og],
                None,
                WriteDecision::Nothing,
            ),
            (
                "the reconcile restores what someone else changed",
                false,
                true,
                vec![ip],
                None,
                WriteDecision::Reconcile,
            ),
            (
                "the reconcile leaves a stuck field alone until its retry",
                false,
                true,
                vec![og],
                Some(stuck(&[og], 5)),
                WriteDecision::BackingOff,
            ),
            (
                "and writes it again when the retry is due",
                false,
                true,
                vec![og],
                Some(stuck(&[og], 0)),
                WriteDecision::Reconcile,
            ),
            (
                "a new difference besides the stuck one is written at once",
                false,
                true,
                vec![og, ip],
                Some(stuck(&[og], 60)),
                WriteDecision::Reconcile,
            ),
        ];
        for (name, changed, reconcile, diff, stuck, want) in cases {
            let diff: Vec<String> = diff.into_iter().map(String::from).collect();
            assert_eq!(
                decide_write(changed, reconcile, &diff, stuck.as_ref(), now),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn after_write_backs_off_exponentially_while_the_same_fields_stay_different() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let og = vec!["status.observedGeneration".to_string()];
        let mut stuck: Option<NonConvergence> = None;
        let mut at = t0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            stuck = after_write(stuck.as_ref(), og.clone(), at, s(10), s(300));
            let next = stuck.as_ref().unwrap().retry_at;
            waits.push(next.duration_since(at).as_secs());
            at = next;
        }
        assert_eq!(waits, vec![10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(stuck.as_ref().unwrap().writes, 8);
        // Another field restarts the count; a converged write clears it.
        let other = vec!["status.podIP".to_string()];
        let restarted = after_write(stuck.as_ref(), other, at, s(10), s(300)).unwrap();
        assert_eq!((restarted.writes, restarted.retry_at), (1, at + s(10)));
        assert_eq!(after_write(stuck.as_ref(), vec![], at, s(10), s(300)), None);
    }
}
