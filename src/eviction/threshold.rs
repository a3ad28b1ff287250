//! Eviction thresholds as the kubelet weighs them: the pure steps of one pass of the
//! eviction manager (`thresholds met`, first observed, grace elapsed, node conditions held for
//! the transition period). `now` is always a parameter, so every step is table-tested.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::eviction::{NodeCondition, Operator, Resource, Signal, Threshold};

/// One signal's reading: what is available of what capacity. For a PSI signal
/// ([`Signal::is_pressure_stall`]) `available` is the observed stall share in millionths and
/// `capacity` is [`STALL_CAPACITY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    pub available: i64,
    pub capacity: i64,
}

/// The thresholds met by the readings (`thresholdsMet`): for `LessThan` signals the reading is
/// below the threshold, for `AtLeast` (PSI) signals at or above it. With
/// `enforce_min_reclaim`, a fired threshold stays met until the reading is past it by the
/// minimum reclaim: above threshold + reclaim for an amount left, below threshold − reclaim
/// for a pressure. A signal without a reading meets nothing.
pub fn thresholds_met(
    thresholds: &[Threshold],
    observations: &BTreeMap<Signal, Observation>,
    enforce_min_reclaim: bool,
) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| {
            let Some(observed) = observations.get(&t.signal) else {
                return false;
            };
            let amount = t.value.amount(observed.capacity);
            let reclaim = match t.min_reclaim {
                Some(reclaim) if enforce_min_reclaim => reclaim.amount(observed.capacity),
                _ => 0,
            };
            match t.signal.operator() {
                Operator::LessThan => observed.available < amount.saturating_add(reclaim),
                Operator::AtLeast => observed.available >= amount.saturating_sub(reclaim),
            }
        })
        .copied()
        .collect()
}

/// What the eviction manager carries from one pass to the next.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PassState {
    /// The thresholds the last pass acted on (their grace elapsed).
    pub thresholds_met: Vec<Threshold>,
    /// When each currently met threshold was first seen met.
    pub first_observed: BTreeMap<Threshold, Instant>,
    /// When each condition was last seen.
    pub conditions_last_observed: BTreeMap<NodeCondition, Instant>,
}

/// What one pass concluded.
#[derive(Debug, Clone, PartialEq)]
pub struct PassOutcome {
    /// Conditions to report: seen within the pressure transition period.
    pub conditions: BTreeSet<NodeCondition>,
    /// Thresholds to act on now (met, grace elapsed), memory first (`byEvictionPriority`).
    pub act_on: Vec<Threshold>,
}

/// One pass of the kubelet's `synchronize`, decisions only: which thresholds are met (those
/// acted on last time until they clear their minimum reclaim), since when, which conditions
/// hold for `transition_period`, and what to act on once its grace period has elapsed.
pub fn pass(
    state: &PassState,
    thresholds: &[Threshold],
    observations: &BTreeMap<Signal, Observation>,
    transition_period: Duration,
    now: Instant,
) -> (PassState, PassOutcome) {
    let mut met = thresholds_met(thresholds, observations, false);
    for unresolved in thresholds_met(&state.thresholds_met, observations, true) {
        if !met.contains(&unresolved) {
            met.push(unresolved);
        }
    }
    let first_observed: BTreeMap<Threshold, Instant> = met
        .iter()
        .map(|t| (*t, state.first_observed.get(t).copied().unwrap_or(now)))
        .collect();
    let mut conditions_last_observed = state.conditions_last_observed.clone();
    for t in &met {
        conditions_last_observed.insert(t.signal.node_condition(), now);
    }
    let conditions = conditions_last_observed
        .iter()
        .filter(|(_, at)| now.saturating_duration_since(**at) < transition_period)
        .map(|(c, _)| *c)
        .collect();
    let mut act_on: Vec<Threshold> = first_observed
        .iter()
        .filter(|(t, at)| now.saturating_duration_since(**at) >= t.grace_period)
        .map(|(t, _)| *t)
        .collect();
    act_on.sort_by_key(|t| t.signal.resource() != Resource::Memory);
    (
        PassState {
            thresholds_met: act_on.clone(),
            first_observed,
            conditions_last_observed,
        },
        PassOutcome { conditions, act_on },
    )
}

/// The shortest window [`stall_persists`] measures over: the kernel updates its averages every
/// 2 s.
pub const STALL_WINDOW_MIN: Duration = Duration::from_secs(2);

/// Where a PSI line's stall counter (`total`, microseconds) stood at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StallMark {
    pub at: Instant,
    pub total_us: u64,
}

/// Whether a met PSI threshold may evict again after the eviction whose cleanup ended at
/// `mark`. `avg10` is an exponentially weighted average over about 10 s, so it lags behind the
/// relief an eviction brought by ten seconds or more, and acting on it alone would evict pod
/// after pod for pressure that is gone. So, after an eviction, the stall share measured since
/// the mark from the counter (Δtotal / Δt, over at least [`STALL_WINDOW_MIN`]) must itself be
/// at or above the threshold (`threshold_ppm`, millionths of wall time).
pub fn stall_persists(mark: StallMark, total_us: u64, now: Instant, threshold_ppm: i64) -> bool {
    let elapsed = now.saturating_duration_since(mark.at);
    if elapsed < STALL_WINDOW_MIN {
        return false;
    }
    let stalled = u128::from(total_us.saturating_sub(mark.total_us));
    let share_ppm = stalled * 1_000_000 / elapsed.as_micros().max(1);
    share_ppm >= u128::try_from(threshold_ppm.max(0)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::eviction::{ThresholdValue, STALL_CAPACITY};

    fn hard(signal: Signal, value: ThresholdValue) -> Threshold {
        Threshold {
            signal,
            value,
            grace_period: Duration::ZERO,
            min_reclaim: None,
        }
    }

    #[test]
    fn met_below_the_value_and_until_min_reclaim_with_enforcement() {
        use ThresholdValue::*;
        let t = Threshold {
            min_reclaim: Some(PartsPerMillion(50_000)),
            ..hard(Signal::NodeFsAvailable, PartsPerMillion(100_000))
        };
        // capacity 1000: threshold 100, with the 5% reclaim 150.
        // (available, met, met with min reclaim enforced)
        let cases = [
            (50, true, true),
            (99, true, true),
            (100, false, true),
            (149, false, true),
            (150, false, false),
            (900, false, false),
        ];
        for (available, met, enforced) in cases {
            let obs = BTreeMap::from([(
                Signal::NodeFsAvailable,
                Observation {
                    available,
                    capacity: 1000,
                },
            )]);
            assert_eq!(
                !thresholds_met(&[t], &obs, false).is_empty(),
                met,
                "{available}"
            );
            assert_eq!(
                !thresholds_met(&[t], &obs, true).is_empty(),
                enforced,
                "{available} enforced"
            );
        }
        assert!(
            thresholds_met(&[t], &BTreeMap::new(), false).is_empty(),
            "no reading"
        );
    }

    #[test]
    fn pressure_is_met_at_or_above_the_value_and_clears_below_it_minus_reclaim() {
        use ThresholdValue::*;
        // 10 %, with a 2 % minimum reclaim: clears below 8 % once fired.
        let t = Threshold {
            min_reclaim: Some(PartsPerMillion(20_000)),
            ..hard(Signal::MemoryPressureSomeAvg10, PartsPerMillion(100_000))
        };
        // (observed stall in millionths, met, met with min reclaim enforced)
        let cases = [
            (0, false, false),
            (79_999, false, false),
            (80_000, false, true),
            (99_999, false, true),
            (100_000, true, true),
            (650_000, true, true),
            (STALL_CAPACITY, true, true),
        ];
        for (stalled, met, enforced) in cases {
            let obs = BTreeMap::from([(
                Signal::MemoryPressureSomeAvg10,
                Observation {
                    available: stalled,
                    capacity: STALL_CAPACITY,
                },
            )]);
            assert_eq!(
                !thresholds_met(&[t], &obs, false).is_empty(),
                met,
                "{stalled}"
            );
            assert_eq!(
                !thresholds_met(&[t], &obs, true).is_empty(),
                enforced,
                "{stalled} enforced"
            );
        }
        // The other signal's reading does not meet it.
        let other = BTreeMap::from([(
            Signal::MemoryPressureFullAvg10,
            Observation {
                available: STALL_CAPACITY,
                capacity: STALL_CAPACITY,
            },
        )]);
        assert!(thresholds_met(&[t], &other, false).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn stall_persists_only_on_the_counter_since_the_mark() {
        let at = Instant::now();
        let mark = StallMark {
            at,
            total_us: 1_000_000,
        };
        // (ms since the mark, counter now, threshold ppm, persists)
        let cases = [
            (1_999, 3_000_000, 100_000, false), // too short a window, whatever the stall
            (2_000, 1_199_999, 100_000, false), // 9.99999 % over 2 s
            (2_000, 1_200_000, 100_000, true),  // 10 % over 2 s
            (10_000, 1_000_000, 1, false),      // no stall at all
            (10_000, 7_000_000, 600_000, true), // 60 % over 10 s
            (10_000, 900_000, 1, false),        // a counter that went back (a new cgroup)
        ];
        for (ms, total, threshold, want) in cases {
            let now = at + Duration::from_millis(ms);
            assert_eq!(
                stall_persists(mark, total, now, threshold),
                want,
                "{ms} ms, {total}, {threshold}"
            );
        }
    }

    /// A run of passes on a paused clock: a soft threshold waits out its grace period, the
    /// hard one acts at once, a fired threshold holds until its minimum reclaim is free, and
    /// the condition outlives the pressure by the transition period.
    #[tokio::test(start_paused = true)]
    async fn passes_follow_grace_min_reclaim_and_transition() {
        use ThresholdValue::*;
        let hard_t = Threshold {
            min_reclaim: Some(Quantity(50)),
            ..hard(Signal::MemoryAvailable, Quantity(100))
        };
        let soft_t = Threshold {
            grace_period: Duration::from_secs(30),
            ..hard(Signal::MemoryAvailable, Quantity(300))
        };
        let pid_t = hard(Signal::PidAvailable, Quantity(10));
        let thresholds = [hard_t, soft_t, pid_t];
        let transition = Duration::from_secs(60);
        let start = Instant::now();
        let obs = |memory: i64, pids: i64| {
            BTreeMap::from([
                (
                    Signal::MemoryAvailable,
                    Observation {
                        available: memory,
                        capacity: 1000,
                    },
                ),
                (
                    Signal::PidAvailable,
                    Observation {
                        available: pids,
                        capacity: 1000,
                    },
                ),
            ])
        };
        use NodeCondition::*;
        // (seconds since start, memory available, pids available, conditions, act on)
        type Step = (u64, i64, i64, Vec<NodeCondition>, Vec<Threshold>);
        let steps: Vec<Step> = vec![
            (0, 900, 900, vec![], vec![]),
            (1, 250, 900, vec![MemoryPressure], vec![]),
            (20, 250, 900, vec![MemoryPressure], vec![]),
            (31, 250, 900, vec![MemoryPressure], vec![soft_t]),
            (
                32,
                90,
                5,
                vec![MemoryPressure, PidPressure],
                vec![hard_t, soft_t, pid_t],
            ),
            // Above the hard threshold, below it + min reclaim: still acted on.
            (
                33,
                120,
                900,
                vec![MemoryPressure, PidPressure],
                vec![hard_t, soft_t],
            ),
            (
                34,
                160,
                900,
                vec![MemoryPressure, PidPressure],
                vec![soft_t],
            ),
            // All clear; the conditions stay for the transition period after their last sight.
            (35, 900, 900, vec![MemoryPressure, PidPressure], vec![]),
            (92, 900, 900, vec![MemoryPressure], vec![]),
            (94, 900, 900, vec![], vec![]),
            // The soft threshold's grace starts again from its new first sight.
            (95, 250, 900, vec![MemoryPressure], vec![]),
            (124, 250, 900, vec![MemoryPressure], vec![]),
            (125, 250, 900, vec![MemoryPressure], vec![soft_t]),
        ];
        let mut state = PassState::default();
        for (at, memory, pids, conditions, act_on) in steps {
            let now = start + Duration::from_secs(at);
            let (next, outcome) = pass(&state, &thresholds, &obs(memory, pids), transition, now);
            assert_eq!(
                outcome.conditions,
                conditions.into_iter().collect(),
                "conditions at {at}s"
            );
            let mut got = outcome.act_on.clone();
            got.sort();
            let mut want = act_on;
            want.sort();
            assert_eq!(got, want, "act on at {at}s");
            assert!(
                outcome
                    .act_on
                    .windows(2)
                    .all(|w| w[0].signal.resource() == Resource::Memory
                        || w[1].signal.resource() != Resource::Memory),
                "memory first: {:?}",
                outcome.act_on
            );
            state = next;
        }
    }
}
