//! Hugepages as the kubelet reads them from a pod spec: the page size a `hugepages-<size>`
//! resource names (`v1helper.HugePageSizeFromResourceName`), the runtime's page-size string
//! ("2MB", "1GB": `HugePageUnitSizeFromByteSize`, the suffix of `hugetlb.<size>.max`), the
//! container's limits for the CRI (`GetHugepageLimitsFromResources`), the pod's sums for the pod
//! cgroup (`cm.HugePageLimits` over the pod's requests) and the `pagesize=` option of a
//! hugepages emptyDir (`getPageSizeMountOption`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::quantity::Quantity;

pub const RESOURCE_PREFIX: &str = "hugepages-";
/// `emptyDir.medium` for hugepages of the one size the pod requests.
pub const MEDIUM: &str = "HugePages";
/// `emptyDir.medium` prefix for hugepages of a named size: `HugePages-2Mi`.
pub const MEDIUM_PREFIX: &str = "HugePages-";

/// Why a hugepages emptyDir cannot be mounted: the kubelet's messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HugepagesError {
    #[error("invalid hugepages medium size {0}")]
    InvalidMediumSize(String),
    #[error("medium: {0} can't be used if container requests multiple huge page sizes")]
    MultipleSizes(String),
    #[error(
        "medium {0}: hugePages storage requested, but there is no resource request for huge pages"
    )]
    NoRequest(String),
}

/// The page size in bytes that `hugepages-<size>` names; `None` for another resource or a size
/// that is not a positive quantity.
pub fn page_size_of_resource(name: &str) -> Option<u64> {
    let size = name.strip_prefix(RESOURCE_PREFIX)?;
    let value = Quantity::parse(size).ok()?.value();
    u64::try_from(value).ok().filter(|v| *v > 0)
}

/// The runtime's name of a page size (`HugePageUnitSizeFromByteSize`): divided by 1024 while it
/// divides, suffixed B/KB/MB/GB/TB/PB. `None` where the kubelet errors (a size that does not
/// reduce to at most 1024 of its unit); the kubelet logs and skips such a size.
pub fn page_size_string(bytes: u64) -> Option<String> {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    let mut size = bytes;
    let mut idx = 0;
    // The kubelet's loop runs while idx < len, so it can step one past the last unit; stopping
    // at the last unit and then refusing a value above 1024 gives the same verdicts.
    while size != 0 && size % 1024 == 0 && idx < UNITS.len() - 1 {
        size /= 1024;
        idx += 1;
    }
    if size > 1024 || size == 0 {
        return None;
    }
    Some(format!("{size}{}", UNITS[idx]))
}

fn hugepage_amounts(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> BTreeMap<u64, i64> {
    list.into_iter()
        .flatten()
        .filter_map(|(name, q)| {
            let size = page_size_of_resource(name)?;
            Some((size, Quantity::try_from(q).ok()?.value()))
        })
        .collect()
}

/// The container's hugepage amounts by page size in bytes: its limits, and for a size with a
/// request but no limit, the request (the API makes them equal; this is the kubelet's fallback).
pub fn container_hugepages(container: &Container) -> BTreeMap<u64, i64> {
    let resources = container.resources.as_ref();
    let mut amounts = hugepage_amounts(resources.and_then(|r| r.limits.as_ref()));
    for (size, value) in hugepage_amounts(resources.and_then(|r| r.requests.as_ref())) {
        amounts.entry(size).or_insert(value);
    }
    amounts
}

/// The CRI `hugepage_limits` of a container (`GetHugepageLimitsFromResources`): one entry per
/// page size the node has, in its order, limited to what the container asks and to 0 when it
/// asks none — a container must not use hugepages it did not request. A size the node lacks is
/// dropped, as the kubelet drops it.
pub fn container_hugepage_limits(container: &Container, node_sizes: &[u64]) -> Vec<(String, u64)> {
    let wanted = container_hugepages(container);
    node_sizes
        .iter()
        .filter_map(|size| {
            let name = page_size_string(*size)?;
            let limit = wanted
                .get(size)
                .map_or(0, |v| u64::try_from(*v).unwrap_or(0));
            Some((name, limit))
        })
        .collect()
}

/// The pod's hugepage requests by page size (`cm.HugePageLimits(PodRequests(pod))`): regular
/// containers summed, each init container counting on its own (it runs before the others), the
/// larger of the two per size. Restartable init containers (sidecars) run alongside the regular
/// ones and add to them.
pub fn pod_hugepages(pod: &Pod) -> BTreeMap<u64, i64> {
    let Some(spec) = pod.spec.as_ref() else {
        return BTreeMap::new();
    };
    let mut sum: BTreeMap<u64, i64> = BTreeMap::new();
    let add = |into: &mut BTreeMap<u64, i64>, from: &BTreeMap<u64, i64>| {
        for (size, v) in from {
            let e = into.entry(*size).or_insert(0);
            *e = e.saturating_add(*v);
        }
    };
    for c in &spec.containers {
        add(&mut sum, &container_hugepages(c));
    }
    // `PodRequests`: init containers in order; sidecars started so far stay running, so each
    // init container's need is its own plus the sidecars before it.
    let mut sidecars: BTreeMap<u64, i64> = BTreeMap::new();
    let mut init_max: BTreeMap<u64, i64> = BTreeMap::new();
    for c in spec.init_containers.iter().flatten() {
        let own = container_hugepages(c);
        if c.restart_policy.as_deref() == Some("Always") {
            add(&mut sidecars, &own);
            add(&mut sum, &own);
            for (size, v) in &sidecars {
                let e = init_max.entry(*size).or_insert(0);
                *e = (*e).max(*v);
            }
        } else {
            let mut need = sidecars.clone();
            add(&mut need, &own);
            for (size, v) in need {
                let e = init_max.entry(size).or_insert(0);
                *e = (*e).max(v);
            }
        }
    }
    for (size, v) in init_max {
        let e = sum.entry(size).or_insert(0);
        *e = (*e).max(v);
    }
    sum
}

/// The pod cgroup's hugetlb limits (`ResourceConfigForPod` + the cgroup manager's
/// `toResources`): the pod's requests per page size, and 0 for every other size the node has,
/// as page-size strings with limits in bytes.
pub fn pod_hugetlb_limits(pod: &Pod, node_sizes: &[u64]) -> Vec<(String, u64)> {
    let wanted = pod_hugepages(pod);
    let mut sizes: Vec<u64> = node_sizes.to_vec();
    sizes.extend(wanted.keys().copied());
    sizes.sort_unstable();
    sizes.dedup();
    sizes
        .into_iter()
        .filter_map(|size| {
            let name = page_size_string(size)?;
            let limit = wanted
                .get(&size)
                .map_or(0, |v| u64::try_from(*v).unwrap_or(0));
            Some((name, limit))
        })
        .collect()
}

/// Whether an `emptyDir.medium` is a hugepages medium.
pub fn is_hugepages_medium(medium: &str) -> bool {
    medium == MEDIUM || medium.starts_with(MEDIUM_PREFIX)
}

/// The `pagesize=<size>` option of a hugepages emptyDir (`getPageSizeMountOption`): `HugePages`
/// takes the one page size the pod's containers request; `HugePages-<size>` needs a request of
/// that size. The size is written as the request's quantity ("2Mi"), as the kubelet does;
/// hugetlbfs parses it with `memparse`.
pub fn page_size_mount_option(medium: &str, pod: &Pod) -> Result<String, HugepagesError> {
    let wanted_size = match medium.strip_prefix(MEDIUM_PREFIX) {
        Some(size) => Some(
            Quantity::parse(size)
                .ok()
                .and_then(|q| u64::try_from(q.value()).ok())
                .ok_or_else(|| HugepagesError::InvalidMediumSize(size.to_string()))?,
        ),
        None => None,
    };
    let spec = pod.spec.as_ref();
    let containers = spec
        .map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .into_iter()
        .flatten();
    let mut found: Option<u64> = None;
    for c in containers {
        // Requests after defaulting: the limit where no request is written.
        for size in container_hugepages(c).keys() {
            match wanted_size {
                None => {
                    if found.is_some_and(|f| f != *size) {
                        return Err(HugepagesError::MultipleSizes(medium.to_string()));
                    }
                    found = Some(*size);
                }
                Some(w) if w == *size => found = Some(*size),
                Some(_) => {}
            }
        }
    }
    let size = found.ok_or_else(|| HugepagesError::NoRequest(medium.to_string()))?;
    Ok(format!("pagesize={}", binary_quantity(size)))
}

/// A byte count as apimachinery's canonical binary quantity ("2Mi", "1Gi").
fn binary_quantity(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let mut v = bytes;
    let mut idx = 0;
    while v != 0 && v % 1024 == 0 && idx < UNITS.len() - 1 {
        v /= 1024;
        idx += 1;
    }
    format!("{v}{}", UNITS[idx])
}

#[cfg(test)]
#[path = "hugepages_tests.rs"]
mod tests;
