//! Eviction signals and thresholds as configured: the `evictionHard`, `evictionSoft`,
//! `evictionSoftGracePeriod` and `evictionMinimumReclaim` maps parsed with the kubelet's rules
//! and messages, and the Linux defaults. How a pass weighs them against readings is
//! `eviction::threshold`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

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
        let period = super::duration::parse_duration_detailed(value).map_err(|e| {
            let message = match e {
                super::duration::DurationError::Negative => format!(
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
}
