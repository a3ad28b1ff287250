//! Containers' swap, as the kubelet sets it since NodeSwap went GA
//! (`pkg/kubelet/kuberuntime/kuberuntime_container_linux.go`: `configureContainerSwapResources`,
//! `GetContainerSwapBehavior`, `swapConfigurationHelper`, `calcSwapForBurstablePods`).
//!
//! [`container_swap`] decides, purely, what a container's CRI resources carry;
//! [`controller_available`] is the kubelet's `swapControllerAvailable` (a file that exists or
//! not, under the mount and `/proc` given).

use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod};

pub use crate::config::swap::SwapBehavior;
use crate::podspec::qos::{is_critical_pod, QosClass};
use crate::podspec::resources::{container_limits, container_requests};

/// The cgroup v2 file the kubelet sets through the CRI `unified` map (`Cgroup2MaxSwapFilename`).
pub const SWAP_MAX: &str = "memory.swap.max";

/// What the node tells the swap decision: fixed at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SwapNode {
    /// `memorySwap.swapBehavior`.
    pub behavior: SwapBehavior,
    /// The unified cgroup v2 hierarchy.
    pub cgroup_v2: bool,
    /// The kernel's swap controller ([`controller_available`]); without it the kubelet sets
    /// nothing about swap.
    pub controller: bool,
    /// The machine's memory capacity (`MemTotal`), bytes.
    pub memory_capacity: u64,
    /// The machine's swap capacity (`SwapTotal`), bytes.
    pub swap_capacity: u64,
}

/// What a container's `LinuxContainerResources` carry about swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwapSetting {
    /// Nothing (no swap controller): the runtime's default.
    Unset,
    /// cgroup v1 `NoSwap`: `memory_swap_limit_in_bytes` = the memory limit (memory + swap no
    /// more than memory; with no limit, 0, which the runtime ignores).
    MemorySwapLimit(i64),
    /// cgroup v2: `unified["memory.swap.max"]`, bytes (0: no swap).
    SwapMax(i64),
}

/// The behaviour a container gets (`GetContainerSwapBehavior`): `LimitedSwap` only with the
/// swap controller on cgroup v2, for a Burstable pod that is not critical, and a container that
/// names memory with a request different from its limit; `NoSwap` for everything else.
pub fn container_behavior(
    pod: &Pod,
    container: &Container,
    qos: QosClass,
    node: &SwapNode,
) -> SwapBehavior {
    if node.behavior != SwapBehavior::LimitedSwap
        || !node.controller
        || !node.cgroup_v2
        || is_critical_pod(pod)
        || qos != QosClass::Burstable
    {
        return SwapBehavior::NoSwap;
    }
    let request = container_requests(container).memory.unwrap_or(0);
    let limit = container_limits(container).memory.unwrap_or(0);
    if (request == 0 && limit == 0) || request == limit {
        return SwapBehavior::NoSwap;
    }
    SwapBehavior::LimitedSwap
}

/// `calcSwapForBurstablePods`: request / node memory × node swap, in the kubelet's float64
/// arithmetic, truncated; `None` (the kubelet then disallows swap) when the node's memory is 0
/// or the request exceeds it.
pub fn burstable_swap_limit(request: i64, memory_capacity: u64, swap_capacity: u64) -> Option<i64> {
    let total = i64::try_from(memory_capacity).ok().filter(|t| *t > 0)?;
    if request > total {
        return None;
    }
    let proportion = request as f64 / total as f64;
    Some((proportion * swap_capacity as f64) as i64)
}

/// What the container's resources carry about swap (`configureContainerSwapResources`), given
/// the memory limit already in its resources (`memory_limit_in_bytes`).
pub fn container_swap(
    pod: &Pod,
    container: &Container,
    qos: QosClass,
    memory_limit: i64,
    node: &SwapNode,
) -> SwapSetting {
    if !node.controller {
        return SwapSetting::Unset;
    }
    let no_swap = if node.cgroup_v2 {
        SwapSetting::SwapMax(0)
    } else {
        SwapSetting::MemorySwapLimit(memory_limit)
    };
    match container_behavior(pod, container, qos, node) {
        SwapBehavior::NoSwap => no_swap,
        SwapBehavior::LimitedSwap => {
            let request = container_requests(container).memory.unwrap_or(0);
            burstable_swap_limit(request, node.memory_capacity, node.swap_capacity)
                .map_or(no_swap, SwapSetting::SwapMax)
        }
    }
}

/// The file whose existence says the kernel's swap controller is there (the kubelet's
/// `swapControllerAvailable`): cgroup v1 `<mount>/memory/memory.memsw.limit_in_bytes`; cgroup
/// v2 `memory.swap.max` of the cgroup this process runs in (`0::<path>` of `/proc/self/cgroup`),
/// since the root cgroup has none. `None` when `/proc/self/cgroup` names no v2 cgroup.
pub fn controller_file(
    mount: &Path,
    cgroup_v2: bool,
    proc_self_cgroup: &str,
) -> Option<std::path::PathBuf> {
    if !cgroup_v2 {
        return Some(mount.join("memory/memory.memsw.limit_in_bytes"));
    }
    let own = proc_self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))?
        .trim()
        .trim_start_matches('/');
    Some(mount.join(own).join(SWAP_MAX))
}

/// Whether the swap controller is there, read once at start: [`controller_file`] exists.
pub fn controller_available(mount: &Path, proc: &Path, cgroup_v2: bool) -> bool {
    let own = std::fs::read_to_string(proc.join("self/cgroup")).unwrap_or_default();
    controller_file(mount, cgroup_v2, &own).is_some_and(|f| f.exists())
}

#[cfg(test)]
#[path = "swap_tests.rs"]
mod tests;
