//! Node allocatable on the `kubepods` cgroup (the kubelet's `node_container_manager_linux.go`):
//! with `enforceNodeAllocatable: [pods]` the pods as a whole get the node's capacity less
//! `kubeReserved` and `systemReserved` — cpu shares, a memory limit and a pid limit — so the
//! system daemons keep what was set aside for them. Without it `kubepods` still gets the full
//! capacity, because the default cpu shares of a new cgroup are too low for all pods together.
//!
//! The hard-eviction thresholds are not part of the cgroup limit: the kubelet subtracts them only
//! from the Node's reported allocatable (`GetNodeAllocatableReservation`), which the node status
//! does (`node::AllocatableReservation`).

use std::path::Path;

use super::{milli_cpu_to_shares, ResourceConfig};
use crate::config::reserved::Reserved;

/// Amounts of the resources node allocatable is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeResources {
    pub cpu_milli: i64,
    pub memory: i64,
    /// Process IDs; `None` when unknown (no pid limit is set then).
    pub pids: Option<i64>,
}

/// A reservation larger than the capacity (the kubelet's `validateNodeAllocatable`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Resource {resource:?} has a reservation of {reserved} but capacity of {capacity}. Expected capacity >= reservation (kubeReserved + systemReserved)")]
pub struct ReservationTooLarge {
    pub resource: &'static str,
    pub reserved: i64,
    pub capacity: i64,
}

/// Capacity less the reservations, never below zero (`getNodeAllocatableAbsoluteImpl`).
pub fn allocatable(capacity: NodeResources, reserved: Reserved) -> NodeResources {
    NodeResources {
        cpu_milli: (capacity.cpu_milli - reserved.cpu_milli).max(0),
        memory: (capacity.memory - reserved.memory).max(0),
        pids: capacity.pids.map(|p| (p - reserved.pids).max(0)),
    }
}

/// Refuses reservations that exceed the capacity, naming the first such resource.
pub fn validate(capacity: NodeResources, reserved: Reserved) -> Result<(), ReservationTooLarge> {
    let checks = [
        ("cpu", reserved.cpu_milli, capacity.cpu_milli),
        ("memory", reserved.memory, capacity.memory),
        ("pid", reserved.pids, capacity.pids.unwrap_or(i64::MAX)),
    ];
    for (resource, reserved, capacity) in checks {
        if reserved > capacity {
            return Err(ReservationTooLarge {
                resource,
                reserved,
                capacity,
            });
        }
    }
    Ok(())
}

/// What `kubepods` gets: the allocatable amounts when `pods` is enforced, the capacity
/// otherwise (`enforceNodeAllocatableCgroups` / `getCgroupConfig`).
pub fn kubepods_config(
    capacity: NodeResources,
    reserved: Reserved,
    enforce_pods: bool,
) -> ResourceConfig {
    let amounts = if enforce_pods {
        allocatable(capacity, reserved)
    } else {
        capacity
    };
    ResourceConfig {
        cpu_shares: Some(milli_cpu_to_shares(amounts.cpu_milli)),
        memory_limit: Some(amounts.memory).filter(|m| *m > 0),
        pids_limit: amounts.pids.filter(|p| *p > 0),
        ..Default::default()
    }
}

/// The node's process ID capacity, as the kubelet's `pidlimit.Stats`: the smaller of
/// `kernel/pid_max` and `kernel/threads-max` under `proc_root` (normally `/proc`).
pub fn pid_capacity(proc_root: &Path) -> Option<i64> {
    let read = |name: &str| -> Option<i64> {
        std::fs::read_to_string(proc_root.join("sys/kernel").join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    match (read("pid_max"), read("threads-max")) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: i64 = 1 << 30;

    fn capacity() -> NodeResources {
        NodeResources {
            cpu_milli: 4000,
            memory: 16 * GI,
            pids: Some(32768),
        }
    }

    #[test]
    fn kubepods_gets_allocatable_only_when_pods_are_enforced() {
        let kube = Reserved {
            cpu_milli: 500,
            memory: GI,
            pids: 1000,
            ..Default::default()
        };
        let system = Reserved {
            cpu_milli: 250,
            memory: GI / 2,
            ..Default::default()
        };
        let reserved = kube.plus(system);
        assert_eq!(
            kubepods_config(capacity(), reserved, true),
            ResourceConfig {
                // 3250m → 3328 shares
                cpu_shares: Some(3328),
                memory_limit: Some(16 * GI - GI - GI / 2),
                pids_limit: Some(31768),
                ..Default::default()
            }
        );
        assert_eq!(
            kubepods_config(capacity(), reserved, false),
            ResourceConfig {
                cpu_shares: Some(4096),
                memory_limit: Some(16 * GI),
                pids_limit: Some(32768),
                ..Default::default()
            }
        );
        // No pid capacity known: no pid limit.
        let no_pids = NodeResources {
            pids: None,
            ..capacity()
        };
        assert_eq!(
            kubepods_config(no_pids, Reserved::default(), true).pids_limit,
            None
        );
    }

    #[test]
    fn reservations_beyond_capacity_are_refused() {
        let too_much = Reserved {
            memory: 17 * GI,
            ..Default::default()
        };
        let err = validate(capacity(), too_much).unwrap_err();
        assert_eq!(err.resource, "memory");
        assert!(err.to_string().contains("capacity of 17179869184"), "{err}");
        assert!(validate(capacity(), Reserved::default()).is_ok());
        assert_eq!(allocatable(capacity(), too_much).memory, 0);
    }

    #[test]
    fn pid_capacity_is_the_smaller_kernel_limit() {
        let proc_root = tempfile::tempdir().unwrap();
        let kernel = proc_root.path().join("sys/kernel");
        std::fs::create_dir_all(&kernel).unwrap();
        assert_eq!(pid_capacity(proc_root.path()), None);
        std::fs::write(kernel.join("pid_max"), "32768\n").unwrap();
        assert_eq!(pid_capacity(proc_root.path()), Some(32768));
        std::fs::write(kernel.join("threads-max"), "1000\n").unwrap();
        assert_eq!(pid_capacity(proc_root.path()), Some(1000));
    }
}
