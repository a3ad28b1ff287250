//! The threshold state machine of one probe worker (`doProbe` in the kubelet's worker):
//! consecutive results are counted, the published result flips only when a run reaches its
//! threshold, and a worker whose verdict kills the container stops probing.

use super::{ProbeKind, ProbeResult};

/// What one probe attempt said, after the prober mapped warnings to success. Errored attempts
/// never reach the state machine: the kubelet throws their result away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
}

/// The state of one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThresholdState {
    /// The published result (what `readiness()`/`startup()`/`failed()` report).
    pub result: ProbeResult,
    /// The previous attempt's outcome and how many attempts in a row had it.
    pub last: Option<Outcome>,
    pub run: u32,
    /// The worker reached a verdict after which it must not probe this container instance
    /// again: liveness failed (the container is killed), or startup finished either way.
    pub held: bool,
}

impl ThresholdState {
    /// A fresh worker: the kind's initial result, no attempts counted.
    pub fn new(kind: ProbeKind) -> Self {
        ThresholdState {
            result: kind.initial_result(),
            last: None,
            run: 0,
            held: false,
        }
    }
}

/// The thresholds of one probe (`successThreshold`, `failureThreshold`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub success: u32,
    pub failure: u32,
}

/// Feeds one attempt's outcome in; returns the new state and whether the published result
/// changed (the only time the pod worker is notified).
///
/// A run below its threshold leaves the result alone. Readiness starts at Failure, so failures
/// before the first success change nothing, and the first success after them starts a new run.
/// Once held, further outcomes are ignored.
pub fn step(
    kind: ProbeKind,
    state: ThresholdState,
    outcome: Outcome,
    thresholds: Thresholds,
) -> (ThresholdState, bool) {
    if state.held {
        return (state, false);
    }
    let mut next = state;
    if next.last == Some(outcome) {
        next.run = next.run.saturating_add(1);
    } else {
        next.last = Some(outcome);
        next.run = 1;
    }
    let threshold = match outcome {
        Outcome::Success => thresholds.success,
        Outcome::Failure => thresholds.failure,
    };
    if next.run < threshold {
        return (next, false);
    }
    let result = match outcome {
        Outcome::Success => ProbeResult::Success,
        Outcome::Failure => ProbeResult::Failure,
    };
    let changed = next.result != result;
    next.result = result;
    next.held = match kind {
        ProbeKind::Liveness => result == ProbeResult::Failure,
        ProbeKind::Startup => true,
        ProbeKind::Readiness => false,
    };
    if next.held {
        next.run = 0;
    }
    (next, changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::{Failure as F, Success as S};
    use ProbeKind::{Liveness, Readiness, Startup};

    struct Case {
        name: &'static str,
        kind: ProbeKind,
        thresholds: Thresholds,
        outcomes: Vec<Outcome>,
        /// The published result and `changed` after each outcome.
        want: Vec<(ProbeResult, bool)>,
        held_at_end: bool,
    }

    const DEFAULT: Thresholds = Thresholds {
        success: 1,
        failure: 3,
    };

    #[test]
    fn step_table() {
        use ProbeResult::{Failure as RF, Success as RS, Unknown as RU};
        let cases = vec![
            Case {
                name: "liveness fails at the third failure, then holds",
                kind: Liveness,
                thresholds: DEFAULT,
                outcomes: vec![F, F, F, S, F],
                want: vec![
                    (RS, false),
                    (RS, false),
                    (RF, true),
                    (RF, false),
                    (RF, false),
                ],
                held_at_end: true,
            },
            Case {
                name: "liveness success between failures resets the run",
                kind: Liveness,
                thresholds: DEFAULT,
                outcomes: vec![F, F, S, F, F],
                want: vec![
                    (RS, false),
                    (RS, false),
                    (RS, false),
                    (RS, false),
                    (RS, false),
                ],
                held_at_end: false,
            },
            Case {
                name: "readiness failures before the first success change nothing",
                kind: Readiness,
                thresholds: DEFAULT,
                outcomes: vec![F, F, F, F, S],
                want: vec![
                    (RF, false),
                    (RF, false),
                    (RF, false),
                    (RF, false),
                    (RS, true),
                ],
                held_at_end: false,
            },
            Case {
                name: "readiness success after early failures, then needs three failures",
                kind: Readiness,
                thresholds: DEFAULT,
                outcomes: vec![F, F, S, F, F, F, S],
                want: vec![
                    (RF, false),
                    (RF, false),
                    (RS, true),
                    (RS, false),
                    (RS, false),
                    (RF, true),
                    (RS, true),
                ],
                held_at_end: false,
            },
            Case {
                name: "readiness success threshold two",
                kind: Readiness,
                thresholds: Thresholds {
                    success: 2,
                    failure: 1,
                },
                outcomes: vec![S, F, S, S, S, F],
                want: vec![
                    (RF, false),
                    (RF, false),
                    (RF, false),
                    (RS, true),
                    (RS, false),
                    (RF, true),
                ],
                held_at_end: false,
            },
            Case {
                name: "startup success holds",
                kind: Startup,
                thresholds: DEFAULT,
                outcomes: vec![F, F, S, F],
                want: vec![(RU, false), (RU, false), (RS, true), (RS, false)],
                held_at_end: true,
            },
            Case {
                name: "startup failure at the threshold holds",
                kind: Startup,
                thresholds: Thresholds {
                    success: 1,
                    failure: 2,
                },
                outcomes: vec![F, F, S],
                want: vec![(RU, false), (RF, true), (RF, false)],
                held_at_end: true,
            },
            Case {
                name: "failure threshold one",
                kind: Liveness,
                thresholds: Thresholds {
                    success: 1,
                    failure: 1,
                },
                outcomes: vec![S, F],
                want: vec![(RS, false), (RF, true)],
                held_at_end: true,
            },
        ];
        for case in cases {
            let mut state = ThresholdState::new(case.kind);
            let mut got = Vec::new();
            for outcome in &case.outcomes {
                let (next, changed) = step(case.kind, state, *outcome, case.thresholds);
                got.push((next.result, changed));
                state = next;
            }
            assert_eq!(got, case.want, "{}", case.name);
            assert_eq!(state.held, case.held_at_end, "{} (held)", case.name);
        }
    }

    #[test]
    fn initial_results() {
        let cases = [
            (Readiness, ProbeResult::Failure),
            (Liveness, ProbeResult::Success),
            (Startup, ProbeResult::Unknown),
        ];
        for (kind, want) in cases {
            assert_eq!(ThresholdState::new(kind).result, want, "{kind:?}");
        }
    }
}
