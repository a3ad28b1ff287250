//! The Memory QoS settings (KEP-2570): `memoryThrottlingFactor` and `memoryReservationPolicy`,
//! and which of them apply on a node. The cgroup values they make are `cgroup::memory_qos`.

/// `memoryReservationPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReservationPolicy {
    /// No `memory.min` / `memory.low` anywhere (the default).
    #[default]
    None,
    /// Guaranteed pods get `memory.min` = request, Burstable pods `memory.low` = request.
    TieredReservation,
}

impl ReservationPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationPolicy::None => "None",
            ReservationPolicy::TieredReservation => "TieredReservation",
        }
    }
}

/// The Memory QoS settings in effect on this node: the configuration after the `MemoryQoS`
/// gate and the cgroup version are taken into account ([`MemoryQos::effective`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MemoryQos {
    /// `memoryThrottlingFactor`; `None` sets no `memory.high` (it is reset to `max`).
    pub throttling_factor: Option<f64>,
    pub reservation: ReservationPolicy,
}

impl MemoryQos {
    /// Nothing enabled: what a cgroup v1 node, or the `MemoryQoS` gate turned off, gives.
    pub const OFF: MemoryQos = MemoryQos {
        throttling_factor: None,
        reservation: ReservationPolicy::None,
    };

    /// What applies on a node: Memory QoS needs the gate and the unified hierarchy.
    pub fn effective(configured: MemoryQos, gate_enabled: bool, cgroup_v2: bool) -> MemoryQos {
        if gate_enabled && cgroup_v2 {
            configured
        } else {
            MemoryQos::OFF
        }
    }

    pub fn tiered(self) -> bool {
        self.reservation == ReservationPolicy::TieredReservation
    }
}
