//! `containerStatuses[].resources`: the kubelet's `convertContainerStatusResources` and
//! `toKubeContainerResources`. The allocated resources, with the values the runtime reports
//! (cgroup shares, quota, memory limit) in place of the resizable ones; where the runtime
//! reports nothing (containerd 1.6), what nodelet applied to the instance. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::cri::api::LinuxContainerResources;
use crate::quantity::Quantity as Q;

/// The cgroup minimum of `cpu.shares`: requests at or below 2m all map to it.
const MIN_SHARES: i64 = 2;
/// The smallest CPU limit a quota expresses (1 ms in a 100 ms period).
const MIN_MILLI_CPU_LIMIT: i64 = 10;

/// What the runtime says a running container has, as the kubelet reads it.
#[derive(Debug, Clone, Default, PartialEq)]
struct Actual {
    cpu_request: Option<Quantity>,
    cpu_limit: Option<Quantity>,
    memory_request: Option<Quantity>,
    memory_limit: Option<Quantity>,
}

/// `toKubeContainerResources`, then the gaps filled from what was applied (the kubelet's
/// `toKubeContainerStatus`): the memory request, which no runtime reports, or everything when
/// the runtime reports nothing.
fn actual(
    reported: Option<&LinuxContainerResources>,
    applied: Option<&ResourceRequirements>,
) -> Option<Actual> {
    let mut out = reported.and_then(|r| {
        let mut a = Actual::default();
        if r.cpu_period > 0 {
            let milli = if r.cpu_quota == -1 {
                0
            } else {
                r.cpu_quota.saturating_mul(1000) / r.cpu_period
            };
            a.cpu_limit = (milli > 0).then(|| milli_quantity(milli));
        }
        if r.cpu_shares > 0 {
            let milli = shares_to_milli(r.cpu_shares);
            a.cpu_request = (milli > 0).then(|| milli_quantity(milli));
        }
        if r.memory_limit_in_bytes > 0 {
            a.memory_limit = Some(Quantity(bytes_string(r.memory_limit_in_bytes)));
        }
        (a != Actual::default()).then_some(a)
    });
    let get = |list: &Option<BTreeMap<String, Quantity>>, name: &str| {
        list.as_ref().and_then(|l| l.get(name)).cloned()
    };
    match (&mut out, applied) {
        (None, Some(applied)) => {
            // `Requests.Cpu()` and friends: zero where the list has no entry.
            let zero = || Quantity("0".into());
            out = Some(Actual {
                cpu_request: Some(get(&applied.requests, "cpu").unwrap_or_else(zero)),
                cpu_limit: Some(get(&applied.limits, "cpu").unwrap_or_else(zero)),
                memory_request: Some(get(&applied.requests, "memory").unwrap_or_else(zero)),
                memory_limit: Some(get(&applied.limits, "memory").unwrap_or_else(zero)),
            });
        }
        (Some(a), Some(applied)) => {
            a.memory_request =
                get(&applied.requests, "memory").filter(|q| milli(Some(q.clone())) != 0);
        }
        _ => {}
    }
    out
}

/// The status `resources` of a running container: the allocated resources, the runtime's values
/// in place of the resizable ones. A CPU value at or below the smallest the cgroup can express
/// stays as allocated when the allocation is at or below it too (`2m` and `1m` both run with
/// 2 shares: the status shows what was asked, not a rounding).
pub(super) fn running(
    allocated: Option<&ResourceRequirements>,
    reported: Option<&LinuxContainerResources>,
    applied: Option<&ResourceRequirements>,
) -> ResourceRequirements {
    let mut out = allocated.cloned().unwrap_or_default();
    let Some(actual) = actual(reported, applied) else {
        return out;
    };
    if let Some(limits) = out.limits.as_mut() {
        if let Some(cpu) = actual.cpu_limit {
            let allocated = milli(limits.get("cpu").cloned());
            if milli(Some(cpu.clone())) > MIN_MILLI_CPU_LIMIT || allocated > MIN_MILLI_CPU_LIMIT {
                limits.insert("cpu".into(), cpu);
            }
        }
        if let Some(memory) = actual.memory_limit {
            limits.insert("memory".into(), memory);
        }
    }
    if let Some(requests) = out.requests.as_mut() {
        if let Some(cpu) = actual.cpu_request {
            let allocated = milli(requests.get("cpu").cloned());
            if milli(Some(cpu.clone())) > MIN_SHARES || allocated > MIN_SHARES {
                requests.insert("cpu".into(), cpu);
            }
        }
        if let Some(memory) = actual.memory_request {
            requests.insert("memory".into(), memory);
        }
    }
    out
}

/// The kubelet's `SharesToMilliCPU`: rounded up, so that a request maps back to itself.
fn shares_to_milli(shares: i64) -> i64 {
    if shares < MIN_SHARES {
        return 0;
    }
    shares.saturating_mul(1000).saturating_add(1023) / 1024
}

fn milli(q: Option<Quantity>) -> i64 {
    q.and_then(|q| Q::try_from(&q).ok())
        .map_or(0, |q| q.milli_value())
}

/// A CPU amount as `resource.NewMilliQuantity(m, DecimalSI)` prints it.
fn milli_quantity(milli: i64) -> Quantity {
    Quantity(if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    })
}

/// Bytes as `resource.NewQuantity(b, BinarySI)` prints them: in the largest binary unit that
/// divides them (`128Mi`), else plain.
pub(super) fn bytes_string(bytes: i64) -> String {
    for (unit, shift) in [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ] {
        if bytes != 0 && bytes % (1i64 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(kv: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        (!kv.is_empty()).then(|| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect()
        })
    }

    fn rr(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> ResourceRequirements {
        ResourceRequirements {
            requests: list(requests),
            limits: list(limits),
            ..Default::default()
        }
    }

    fn linux(shares: i64, quota: i64, memory: i64) -> LinuxContainerResources {
        LinuxContainerResources {
            cpu_shares: shares,
            cpu_period: 100_000,
            cpu_quota: quota,
            memory_limit_in_bytes: memory,
            ..Default::default()
        }
    }

    /// (case, allocated, runtime's report, applied, expected)
    type Case = (
        &'static str,
        Option<ResourceRequirements>,
        Option<LinuxContainerResources>,
        Option<ResourceRequirements>,
        ResourceRequirements,
    );

    #[test]
    fn running_container_resources() {
        let cases: Vec<Case> = vec![
            (
                "the runtime's values, as it reports them",
                Some(rr(
                    &[("cpu", "100m"), ("memory", "64Mi")],
                    &[("cpu", "0.5"), ("memory", "128Mi")],
                )),
                Some(linux(102, 50_000, 128 << 20)),
                None,
                rr(
                    &[("cpu", "100m"), ("memory", "64Mi")],
                    &[("cpu", "500m"), ("memory", "128Mi")],
                ),
            ),
            (
                "shares round up: 25m runs with 25 shares and reads back as 25m",
                Some(rr(&[("cpu", "25m")], &[])),
                Some(linux(25, 0, 0)),
                None,
                rr(&[("cpu", "25m")], &[]),
            ),
            (
                "a resize the runtime has not applied yet shows the old value",
                Some(rr(&[("cpu", "25m"), ("memory", "40Mi")], &[])),
                Some(linux(20, 0, 0)),
                Some(rr(&[("cpu", "25m"), ("memory", "40Mi")], &[])),
                rr(&[("cpu", "20m"), ("memory", "40Mi")], &[]),
            ),
            (
                "2m and 1m both run with 2 shares and 10m of quota: shown as allocated",
                Some(rr(&[("cpu", "1m")], &[("cpu", "5m")])),
                Some(linux(2, 1000, 0)),
                None,
                rr(&[("cpu", "1m")], &[("cpu", "5m")]),
            ),
            (
                "at the minimum but allocated above it: the runtime's value",
                Some(rr(&[("cpu", "3m")], &[("cpu", "20m")])),
                Some(linux(2, 1000, 0)),
                None,
                rr(&[("cpu", "2m")], &[("cpu", "10m")]),
            ),
            (
                "no requests allocated: none shown, whatever the shares",
                Some(rr(&[], &[("memory", "1Gi")])),
                Some(linux(2, -1, 1 << 30)),
                None,
                rr(&[], &[("memory", "1Gi")]),
            ),
            (
                "a best-effort container: empty",
                None,
                Some(linux(2, -1, 0)),
                None,
                ResourceRequirements::default(),
            ),
            (
                "no report (containerd 1.6): what was applied",
                Some(rr(
                    &[("cpu", "100m"), ("memory", "64Mi")],
                    &[("cpu", "500m"), ("memory", "128Mi")],
                )),
                None,
                Some(rr(
                    &[("cpu", "100m"), ("memory", "64Mi")],
                    &[("cpu", "200m"), ("memory", "128Mi")],
                )),
                rr(
                    &[("cpu", "100m"), ("memory", "64Mi")],
                    &[("cpu", "200m"), ("memory", "128Mi")],
                ),
            ),
            (
                "no report and nothing applied: as allocated",
                Some(rr(&[("cpu", "100m")], &[("cpu", "200m")])),
                None,
                None,
                rr(&[("cpu", "100m")], &[("cpu", "200m")]),
            ),
            (
                "a memory limit in plain bytes",
                Some(rr(&[], &[("memory", "1000000")])),
                Some(linux(2, -1, 1_000_000)),
                None,
                rr(&[], &[("memory", "1000000")]),
            ),
        ];
        for (case, allocated, reported, applied, want) in cases {
            assert_eq!(
                running(allocated.as_ref(), reported.as_ref(), applied.as_ref()),
                want,
                "{case}"
            );
        }
    }

    #[test]
    fn shares_map_back_to_the_request() {
        for milli in [2i64, 3, 10, 19, 20, 25, 100, 250, 999, 1000, 1500, 64_000] {
            let shares = (milli * 1024 / 1000).max(MIN_SHARES);
            assert_eq!(shares_to_milli(shares), milli, "{milli}m → {shares} shares");
        }
        assert_eq!(shares_to_milli(1), 0);
        assert_eq!(shares_to_milli(i64::MAX), i64::MAX / 1024);
    }
}
