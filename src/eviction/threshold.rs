//! Eviction signals and thresholds as the kubelet reads and weighs them: the `evictionHard`,
//! `evictionSoft`, `evictionSoftGracePeriod` and `evictionMinimumReclaim` maps parsed with the
//! kubelet's rules and messages, the Linux defaults, and the pure steps of one pass of the
//! eviction manager (`thresholds met`, first observed, grace elapsed, node conditions held for
//! the transition period). `now` is always a parameter, so every step is table-tested.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use crate::quantity::Quantity;

/// An eviction signal (`evictionapi.Signal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    /// Node memory: capacity − working set of the root cgroup.
    MemoryAvailable,
    /// `kubepods`' memory: allocatable − working set of the pods (only with
    /// `enforceNodeAllocatable: [pods]`, copied from the hard `memory.available` threshold).
    AllocatableMemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    ContainerFsAvailable,
    ContainerFsInodesFree,
    /// min(`pid_max`, `threads-max`) − running tasks.
    PidAvailable,
    /// nodelet's extension: the node's memory pressure stall (`/proc/pressure/memory`, the
    /// root cgroup's `memory.pressure`), the `some` line's `avg10`, in percent of wall time.
    /// Met at or above the threshold ([`Operator::AtLeast`]).
    MemoryPressureSomeAvg10,
    /// The same of the `full` line (every non-idle task stalled at once).
    MemoryPressureFullAvg10,
}

/// How a signal's reading compares with its threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// Met while the reading is below the threshold: an amount left (the kubelet's
    /// `OpLessThan`, every kubelet signal).
    LessThan,
    /// Met while the reading is at or above the threshold: a measured pressure (nodelet's PSI
    /// signals; the opposite direction of the `*.available` ones).
    AtLeast,
}

impl Signal {
    pub const ALL: [Signal; 11] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsAvailable,
        Signal::ContainerFsInodesFree,
        Signal::PidAvailable,
        Signal::MemoryPressureSomeAvg10,
        Signal::MemoryPressureFullAvg10,
    ];

    /// The name in configuration, metrics and messages.
    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::ContainerFsAvailable => "containerfs.available",
            Signal::ContainerFsInodesFree => "containerfs.inodesFree",
            Signal::PidAvailable => "pid.available",
            Signal::MemoryPressureSomeAvg10 => "memory.pressure.some.avg10",
            Signal::MemoryPressureFullAvg10 => "memory.pressure.full.avg10",
        }
    }

    /// The comparison that makes a threshold on this signal met.
    pub fn operator(self) -> Operator {
        if self.is_pressure_stall() {
            Operator::AtLeast
        } else {
            Operator::LessThan
        }
    }

    /// nodelet's PSI signals: the reading is a stall share in millionths of wall time (out of
    /// a capacity of [`STALL_CAPACITY`]), and thresholds are percentages only.
    pub fn is_pressure_stall(self) -> bool {
        matches!(
            self,
            Signal::MemoryPressureSomeAvg10 | Signal::MemoryPressureFullAvg10
        )
    }

    pub fn from_name(name: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The node condition a met threshold of this signal raises.
    pub fn node_condition(self) -> NodeCondition {
        match self {
            Signal::MemoryAvailable
            | Signal::AllocatableMemoryAvailable
            | Signal::MemoryPressureSomeAvg10
            | Signal::MemoryPressureFullAvg10 => NodeCondition::MemoryPressure,
            Signal::PidAvailable => NodeCondition::PidPressure,
            _ => NodeCondition::DiskPressure,
        }
    }

    /// The resource reclaimed for this signal, as named in eviction messages.
    pub fn resource(self) -> Resource {
        match self {
            Signal::MemoryAvailable
            | Signal::AllocatableMemoryAvailable
            | Signal::MemoryPressureSomeAvg10
            | Signal::MemoryPressureFullAvg10 => Resource::Memory,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable | Signal::ContainerFsAvailable => {
                Resource::EphemeralStorage
            }
            Signal::NodeFsInodesFree
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsInodesFree => Resource::Inodes,
            Signal::PidAvailable => Resource::Pids,
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The node conditions eviction reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeCondition {
    MemoryPressure,
    DiskPressure,
    PidPressure,
}

impl NodeCondition {
    pub fn name(self) -> &'static str {
        match self {
            NodeCondition::MemoryPressure => "MemoryPressure",
            NodeCondition::DiskPressure => "DiskPressure",
            NodeCondition::PidPressure => "PIDPressure",
        }
    }
}

/// What a threshold's signal measures, named as the kubelet names it in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    Memory,
    EphemeralStorage,
    Inodes,
    Pids,
}

impl Resource {
    pub fn name(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Inodes => "inodes",
            Resource::Pids => "pids",
        }
    }
}

/// A threshold value: an absolute amount (bytes, inodes, PIDs) or a share of the capacity.
/// Percentages are kept in millionths so that thresholds compare exactly (the kubelet keeps a
/// float32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ThresholdValue {
    Quantity(i64),
    PartsPerMillion(u32),
}

impl ThresholdValue {
    /// The amount this value stands for against `capacity` (`GetThresholdQuantity`).
    pub fn amount(self, capacity: i64) -> i64 {
        match self {
            ThresholdValue::Quantity(q) => q,
            ThresholdValue::PartsPerMillion(ppm) => {
                (i128::from(capacity) * i128::from(ppm) / 1_000_000) as i64
            }
        }
    }
}

/// One threshold: met when the signal's reading compares with the value as its
/// [`Signal::operator`] says — below it for every kubelet signal, at or above it for nodelet's
/// PSI signals. A zero grace period makes it a hard threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Threshold {
    pub signal: Signal,
    pub value: ThresholdValue,
    pub grace_period: Duration,
    pub min_reclaim: Option<ThresholdValue>,
}

impl Threshold {
    pub fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }
}

/// The capacity of a PSI reading: 100 % of wall time in millionths, so that a percentage
/// threshold's [`ThresholdValue::amount`] is its own parts per million.
pub const STALL_CAPACITY: i64 = 1_000_000;

/// The kubelet's Linux `evictionHard` defaults.
pub const DEFAULT_EVICTION_HARD: [(&str, &str); 5] = [
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
    ("imagefs.inodesFree", "5%"),
];

/// The eviction fields of a `KubeletConfiguration`, as written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvictionFields {
    /// `evictionHard`; `None` when the field is absent (the defaults apply).
    pub hard: Option<BTreeMap<String, String>>,
    pub soft: BTreeMap<String, String>,
    pub soft_grace_period: BTreeMap<String, String>,
    pub minimum_reclaim: BTreeMap<String, String>,
    /// `mergeDefaultEvictionSettings`: fill the signals `evictionHard` leaves out with the
    /// defaults (otherwise a given `evictionHard` replaces them all, as the kubelet does).
    pub merge_defaults: bool,
    /// `enforceNodeAllocatable` contains `pods`: the hard `memory.available` threshold is
    /// copied to `allocatableMemory.available`.
    pub enforce_pods_allocatable: bool,
}

/// A threshold entry the kubelet would refuse, with the field path and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: Invalid value: {value:?}: {message}")]
pub struct ThresholdError {
    /// e.g. `evictionHard[memory.available]`.
    pub field: String,
    pub value: String,
    /// The kubelet's words.
    pub message: String,
}

/// Parses the eviction fields into thresholds (`ParseThresholdConfig`), hard ones first.
/// Thresholds of `0%` and `100%` are dropped, as the kubelet drops them.
pub fn parse_thresholds(fields: &EvictionFields) -> Result<Vec<Threshold>, ThresholdError> {
    let hard = match &fields.hard {
        None => defaults(),
        Some(given) if fields.merge_defaults => {
            let mut merged = defaults();
            merged.extend(given.clone());
            merged
        }
        Some(given) => given.clone(),
    };
    let mut thresholds = statements("evictionHard", &hard)?;
    let mut soft = statements("evictionSoft", &fields.soft)?;
    let grace = grace_periods(&fields.soft_grace_period)?;
    for threshold in &mut soft {
        threshold.grace_period = *grace.get(&threshold.signal).ok_or_else(|| ThresholdError {
            field: format!("evictionSoftGracePeriod[{}]", threshold.signal),
            value: String::new(),
            message: format!(
                "grace period must be specified for the soft eviction threshold {}",
                threshold.signal
            ),
        })?;
    }
    thresholds.extend(soft);
    let reclaims = minimum_reclaims(&fields.minimum_reclaim)?;
    for threshold in &mut thresholds {
        threshold.min_reclaim = reclaims.get(&threshold.signal).copied();
    }
    if fields.enforce_pods_allocatable {
        let copies: Vec<Threshold> = thresholds
            .iter()
            .filter(|t| t.signal == Signal::MemoryAvailable && t.is_hard())
            .map(|t| Threshold {
                signal: Signal::AllocatableMemoryAvailable,
                ..*t
            })
            .collect();
        thresholds.extend(copies);
    }
    Ok(thresholds)
}

fn defaults() -> BTreeMap<String, String> {
    DEFAULT_EVICTION_HARD
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn signal_of(field: &str, name: &str, value: &str) -> Result<Signal, ThresholdError> {
    Signal::from_name(name).ok_or_else(|| ThresholdError {
        field: format!("{field}[{name}]"),
        value: value.to_string(),
        message: format!("unsupported eviction signal {name}"),
    })
}

/// Parses `12.5%` into millionths; `None` for anything that is not a plain number.
fn percentage(value: &str) -> Option<i64> {
    let number: f64 = value.strip_suffix('%')?.trim().parse().ok()?;
    number
        .is_finite()
        .then(|| (number * 10_000.0).round() as i64)
}

fn statements(
    field: &str,
    statements: &BTreeMap<String, String>,
) -> Result<Vec<Threshold>, ThresholdError> {
    let mut out = Vec::new();
    for (name, value) in statements {
        let signal = signal_of(field, name, value)?;
        let error = |message: String| ThresholdError {
            field: format!("{field}[{name}]"),
            value: value.clone(),
            message,
        };
        let threshold_value = if signal.is_pressure_stall() {
            stall_percentage(signal, value).map_err(error)?
        } else if value.ends_with('%') {
            if value == "0%" || value == "100%" {
                continue;
            }
            let ppm =
                percentage(value).ok_or_else(|| error(format!("invalid percentage {value:?}")))?;
            if ppm < 0 {
                return Err(error(format!(
                    "eviction percentage threshold {signal} must be >= 0%: {value}"
                )));
            }
            if ppm > 1_000_000 {
                return Err(error(format!(
                    "eviction percentage threshold {signal} must be <= 100%: {value}"
                )));
            }
            ThresholdValue::PartsPerMillion(ppm as u32)
        } else {
            let quantity = Quantity::parse(value).map_err(|e| error(e.to_string()))?;
            if quantity <= Quantity::default() {
                return Err(error(format!(
                    "eviction threshold {signal} must be positive: {}",
                    value.trim()
                )));
            }
            ThresholdValue::Quantity(quantity.value())
        };
        out.push(Threshold {
            signal,
            value: threshold_value,
            grace_period: Duration::ZERO,
            min_reclaim: None,
        });
    }
    Ok(out)
}

/// A PSI threshold or minimum reclaim: a percentage of wall time above 0 % and at most 100 %
/// (a quantity means nothing for a stall share, and 0 % would always be met).
fn stall_percentage(signal: Signal, value: &str) -> Result<ThresholdValue, String> {
    if !value.ends_with('%') {
        return Err(format!(
            "{signal} takes a percentage of wall time stalled (like 10%), not a quantity"
        ));
    }
    let ppm = percentage(value).ok_or_else(|| format!("invalid percentage {value:?}"))?;
    if ppm <= 0 || ppm > 1_000_000 {
        return Err(format!(
            "pressure threshold {signal} must be above 0% and at most 100%: {value}"
        ));
    }
    Ok(ThresholdValue::PartsPerMillion(ppm as u32))
}

fn grace_periods(
    statements: &BTreeMap<String, String>,
) -> Result<BTreeMap<Signal, Duration>, ThresholdError> {
    let mut out = BTreeMap::new();
    for (name, value) in statements {
        let field = "evictionSoftGracePeriod";
        let signal = signal_of(field, name, value)?;
        let period = crate::config::duration::parse_duration_detailed(value).map_err(|e| {
            let message = match e {
                crate::config::duration::DurationError::Negative => format!(
                    "invalid eviction grace period specified: {value}, must be a positive value"
                ),
                other => other.to_string(),
            };
            ThresholdError {
                field: format!("{field}[{name}]"),
                value: value.clone(),
                message,
            }
        })?;
        out.insert(signal, period);
    }
    Ok(out)
}

fn minimum_reclaims(
    statements: &BTreeMap<String, String>,
) -> Result<BTreeMap<Signal, ThresholdValue>, ThresholdError> {
    let mut out = BTreeMap::new();
    for (name, value) in statements {
        let field = "evictionMinimumReclaim";
        let signal = signal_of(field, name, value)?;
        let error = |message: String| ThresholdError {
            field: format!("{field}[{name}]"),
            value: value.clone(),
            message,
        };
        let reclaim = if signal.is_pressure_stall() {
            stall_percentage(signal, value).map_err(error)?
        } else if value.ends_with('%') {
            let ppm =
                percentage(value).ok_or_else(|| error(format!("invalid percentage {value:?}")))?;
            if ppm <= 0 {
                return Err(error(format!(
                    "eviction percentage minimum reclaim {signal} must be positive: {value}"
                )));
            }
            ThresholdValue::PartsPerMillion(ppm.min(i64::from(u32::MAX)) as u32)
        } else {
            let quantity = Quantity::parse(value).map_err(|e| error(e.to_string()))?;
            if quantity < Quantity::default() {
                return Err(error(format!(
                    "negative eviction minimum reclaim specified for {signal}"
                )));
            }
            ThresholdValue::Quantity(quantity.value())
        };
        out.insert(signal, reclaim);
    }
    Ok(out)
}

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

    const MI: i64 = 1 << 20;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn hard(signal: Signal, value: ThresholdValue) -> Threshold {
        Threshold {
            signal,
            value,
            grace_period: Duration::ZERO,
            min_reclaim: None,
        }
    }

    #[test]
    fn parsing_like_the_kubelet() {
        use Signal::*;
        use ThresholdValue::*;
        let defaults = vec![
            hard(ImageFsAvailable, PartsPerMillion(150_000)),
            hard(ImageFsInodesFree, PartsPerMillion(50_000)),
            hard(MemoryAvailable, Quantity(100 * MI)),
            hard(NodeFsAvailable, PartsPerMillion(100_000)),
            hard(NodeFsInodesFree, PartsPerMillion(50_000)),
        ];
        let soft_memory = Threshold {
            grace_period: Duration::from_secs(90),
            ..hard(MemoryAvailable, Quantity(500 * MI))
        };
        // (what, fields, thresholds)
        let cases: Vec<(&str, EvictionFields, Vec<Threshold>)> = vec![
            (
                "absent: the defaults",
                EvictionFields::default(),
                defaults.clone(),
            ),
            (
                "given: replaces the defaults",
                EvictionFields {
                    hard: Some(map(&[
                        ("memory.available", "1Gi"),
                        ("pid.available", "10%"),
                    ])),
                    ..Default::default()
                },
                vec![
                    hard(MemoryAvailable, Quantity(1 << 30)),
                    hard(PidAvailable, PartsPerMillion(100_000)),
                ],
            ),
            (
                "given, merged with the defaults",
                EvictionFields {
                    hard: Some(map(&[("memory.available", "1Gi")])),
                    merge_defaults: true,
                    ..Default::default()
                },
                vec![
                    hard(ImageFsAvailable, PartsPerMillion(150_000)),
                    hard(ImageFsInodesFree, PartsPerMillion(50_000)),
                    hard(MemoryAvailable, Quantity(1 << 30)),
                    hard(NodeFsAvailable, PartsPerMillion(100_000)),
                    hard(NodeFsInodesFree, PartsPerMillion(50_000)),
                ],
            ),
            (
                "0% and 100% are dropped, fractions kept",
                EvictionFields {
                    hard: Some(map(&[
                        ("nodefs.available", "0%"),
                        ("imagefs.available", "100%"),
                        ("nodefs.inodesFree", "2.5%"),
                    ])),
                    ..Default::default()
                },
                vec![hard(NodeFsInodesFree, PartsPerMillion(25_000))],
            ),
            (
                "soft with grace, minimum reclaim on both, allocatable copy of the hard one",
                EvictionFields {
                    hard: Some(map(&[("memory.available", "100Mi")])),
                    soft: map(&[("memory.available", "500Mi")]),
                    soft_grace_period: map(&[("memory.available", "1m30s")]),
                    minimum_reclaim: map(&[("memory.available", "50Mi")]),
                    enforce_pods_allocatable: true,
                    ..Default::default()
                },
                vec![
                    Threshold {
                        min_reclaim: Some(Quantity(50 * MI)),
                        ..hard(MemoryAvailable, Quantity(100 * MI))
                    },
                    Threshold {
                        min_reclaim: Some(Quantity(50 * MI)),
                        ..soft_memory
                    },
                    Threshold {
                        min_reclaim: Some(Quantity(50 * MI)),
                        ..hard(AllocatableMemoryAvailable, Quantity(100 * MI))
                    },
                ],
            ),
        ];
        for (what, fields, want) in cases {
            assert_eq!(parse_thresholds(&fields), Ok(want), "{what}");
        }
    }

    #[test]
    fn bad_entries_name_field_value_and_the_kubelets_reason() {
        let hard = |k: &str, v: &str| EvictionFields {
            hard: Some(map(&[(k, v)])),
            ..Default::default()
        };
        let cases: Vec<(EvictionFields, &str)> = vec![
            (
                hard("memory.free", "1Gi"),
                "evictionHard[memory.free]: Invalid value: \"1Gi\": unsupported eviction signal memory.free",
            ),
            (
                hard("nodefs.available", "120%"),
                "evictionHard[nodefs.available]: Invalid value: \"120%\": eviction percentage threshold nodefs.available must be <= 100%: 120%",
            ),
            (
                hard("nodefs.available", "-5%"),
                "evictionHard[nodefs.available]: Invalid value: \"-5%\": eviction percentage threshold nodefs.available must be >= 0%: -5%",
            ),
            (
                hard("memory.available", "0"),
                "evictionHard[memory.available]: Invalid value: \"0\": eviction threshold memory.available must be positive: 0",
            ),
            (
                hard("memory.available", "lots"),
                "evictionHard[memory.available]: Invalid value: \"lots\": invalid quantity \"lots\": expected a number",
            ),
            (
                EvictionFields {
                    soft: map(&[("memory.available", "1Gi")]),
                    ..Default::default()
                },
                "evictionSoftGracePeriod[memory.available]: Invalid value: \"\": grace period must be specified for the soft eviction threshold memory.available",
            ),
            (
                EvictionFields {
                    soft: map(&[("memory.available", "1Gi")]),
                    soft_grace_period: map(&[("memory.available", "-1s")]),
                    ..Default::default()
                },
                "evictionSoftGracePeriod[memory.available]: Invalid value: \"-1s\": invalid eviction grace period specified: -1s, must be a positive value",
            ),
            (
                EvictionFields {
                    minimum_reclaim: map(&[("nodefs.available", "0%")]),
                    ..Default::default()
                },
                "evictionMinimumReclaim[nodefs.available]: Invalid value: \"0%\": eviction percentage minimum reclaim nodefs.available must be positive: 0%",
            ),
            (
                EvictionFields {
                    minimum_reclaim: map(&[("memory.available", "-1Mi")]),
                    ..Default::default()
                },
                "evictionMinimumReclaim[memory.available]: Invalid value: \"-1Mi\": negative eviction minimum reclaim specified for memory.available",
            ),
        ];
        for (fields, want) in cases {
            let err = parse_thresholds(&fields).expect_err(want);
            assert_eq!(err.to_string(), want);
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
    fn pressure_signals_take_percentages_of_wall_time() {
        use Signal::*;
        use ThresholdValue::*;
        let fields = |hard: &[(&str, &str)], reclaim: &[(&str, &str)]| EvictionFields {
            hard: Some(map(hard)),
            minimum_reclaim: map(reclaim),
            ..Default::default()
        };
        let ok = parse_thresholds(&fields(
            &[
                ("memory.pressure.some.avg10", "12.5%"),
                ("memory.pressure.full.avg10", "100%"),
            ],
            &[("memory.pressure.some.avg10", "2.5%")],
        ));
        assert_eq!(
            ok,
            Ok(vec![
                hard(MemoryPressureFullAvg10, PartsPerMillion(1_000_000)),
                Threshold {
                    min_reclaim: Some(PartsPerMillion(25_000)),
                    ..hard(MemoryPressureSomeAvg10, PartsPerMillion(125_000))
                },
            ])
        );
        for signal in [MemoryPressureSomeAvg10, MemoryPressureFullAvg10] {
            assert_eq!(signal.operator(), Operator::AtLeast, "{signal}");
            assert_eq!(signal.resource(), Resource::Memory, "{signal}");
            assert_eq!(
                signal.node_condition(),
                NodeCondition::MemoryPressure,
                "{signal}"
            );
        }
        assert_eq!(MemoryAvailable.operator(), Operator::LessThan);
        // (fields, error)
        let cases: Vec<(EvictionFields, &str)> = vec![
            (
                fields(&[("memory.pressure.some.avg10", "10")], &[]),
                "evictionHard[memory.pressure.some.avg10]: Invalid value: \"10\": memory.pressure.some.avg10 takes a percentage of wall time stalled (like 10%), not a quantity",
            ),
            (
                fields(&[("memory.pressure.full.avg10", "0%")], &[]),
                "evictionHard[memory.pressure.full.avg10]: Invalid value: \"0%\": pressure threshold memory.pressure.full.avg10 must be above 0% and at most 100%: 0%",
            ),
            (
                fields(&[("memory.pressure.full.avg10", "150%")], &[]),
                "evictionHard[memory.pressure.full.avg10]: Invalid value: \"150%\": pressure threshold memory.pressure.full.avg10 must be above 0% and at most 100%: 150%",
            ),
            (
                fields(&[("memory.pressure.some.avg10", "ten%")], &[]),
                "evictionHard[memory.pressure.some.avg10]: Invalid value: \"ten%\": invalid percentage \"ten%\"",
            ),
            (
                fields(&[], &[("memory.pressure.some.avg10", "1Mi")]),
                "evictionMinimumReclaim[memory.pressure.some.avg10]: Invalid value: \"1Mi\": memory.pressure.some.avg10 takes a percentage of wall time stalled (like 10%), not a quantity",
            ),
            (
                EvictionFields {
                    soft: map(&[("memory.pressure.some.avg10", "20%")]),
                    ..Default::default()
                },
                "evictionSoftGracePeriod[memory.pressure.some.avg10]: Invalid value: \"\": grace period must be specified for the soft eviction threshold memory.pressure.some.avg10",
            ),
        ];
        for (fields, want) in cases {
            let err = parse_thresholds(&fields).expect_err(want);
            assert_eq!(err.to_string(), want);
        }
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
