//! `kubeReserved` and `systemReserved`: what the node sets aside for its daemons, as
//! configured. What node allocatable makes of them is `cgroup::allocatable`.

/// `kubeReserved` or `systemReserved`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reserved {
    pub cpu_milli: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub pids: i64,
}

impl Reserved {
    pub fn plus(self, other: Reserved) -> Reserved {
        Reserved {
            cpu_milli: self.cpu_milli.saturating_add(other.cpu_milli),
            memory: self.memory.saturating_add(other.memory),
            ephemeral_storage: self
                .ephemeral_storage
                .saturating_add(other.ephemeral_storage),
            pids: self.pids.saturating_add(other.pids),
        }
    }
}
