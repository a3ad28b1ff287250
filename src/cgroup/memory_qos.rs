//! Memory QoS on cgroup v2 (KEP-2570, as Kubernetes 1.37 documents it in "Memory QoS with
//! cgroup v2"): `memory.high` throttling from `memoryThrottlingFactor`, `memory.min` /
//! `memory.low` protection from `memoryReservationPolicy`, and the ancestor sums the protection
//! needs on `kubepods` and the Burstable tier.
//!
//! Everything here is a pure function of the pod, the policy and the node's allocatable memory;
//! the cgroup managers write the results, and the CRI carries the container values in the
//! `unified` map.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::config::memory_qos::MemoryQos;
use crate::podspec::qos::{qos_class, QosClass};
use crate::podspec::resources::{container_limits, container_requests, pod_level_limits};

/// `memory.high` for a request and a limit (the node's allocatable memory when there is none):
/// `floor((request + factor × (limit − request)) / page) × page`. `None` when that is not above
/// the request (nothing to throttle) or the inputs make no sense.
pub fn memory_high(request: i64, limit: i64, factor: f64, page_size: i64) -> Option<i64> {
    if limit <= 0 || page_size <= 0 || !(factor > 0.0 && factor <= 1.0) {
        return None;
    }
    // f64 as the kubelet computes it (`math.Floor` over float64), so results agree to the byte.
    let raw = (request as f64 + (limit as f64 - request as f64) * factor) / page_size as f64;
    let high = (raw.floor() as i64).saturating_mul(page_size);
    (high > request).then_some(high)
}

/// The Memory QoS files of one container, for the CRI `unified` map: `memory.high` when the
/// container's request differs from its limit (a missing limit counts as the node's allocatable
/// memory, so BestEffort containers are throttled below it too) and throttling is on — else
/// `max`, which resets a value an earlier configuration left; `memory.min` (Guaranteed) or
/// `memory.low` (Burstable) = the request under `TieredReservation`.
pub fn container_unified(
    pod: &Pod,
    container: &Container,
    memory_limit: i64,
    qos: MemoryQos,
    node_allocatable_memory: i64,
    page_size: i64,
) -> HashMap<String, String> {
    let class = qos_class(pod);
    let request = container_requests(container).memory.unwrap_or(0).max(0);
    let mut unified = HashMap::new();
    let high = match qos.throttling_factor {
        Some(factor) if class != QosClass::Guaranteed => {
            let limit = if memory_limit > 0 {
                memory_limit
            } else {
                node_allocatable_memory
            };
            if request != limit {
                memory_high(request, limit, factor, page_size)
            } else {
                None
            }
        }
        _ => None,
    };
    unified.insert(
        "memory.high".to_string(),
        high.map_or_else(|| "max".to_string(), |h| h.to_string()),
    );
    if qos.tiered() && request > 0 {
        match class {
            QosClass::Guaranteed => {
                unified.insert("memory.min".to_string(), request.to_string());
            }
            QosClass::Burstable => {
                unified.insert("memory.low".to_string(), request.to_string());
            }
            QosClass::BestEffort => {}
        }
    }
    unified
}

/// The container's own memory limit as the runtime gets it (a pod-level limit bounds a container
/// without one); 0 = none.
pub fn container_memory_limit(pod: &Pod, container: &Container) -> i64 {
    let own = container_limits(container).memory.unwrap_or(0);
    if own > 0 {
        return own;
    }
    pod_level_limits(pod).memory.unwrap_or(0).max(0)
}

/// The pod cgroup's Memory QoS values: `(memory.min, memory.low, memory.high)`. Every one is
/// always given (0, 0 and `None` = `max` when the policy leaves it unset), so that applying them
/// resets what an earlier configuration wrote.
pub fn pod_values(
    class: QosClass,
    request: i64,
    limit: Option<i64>,
    qos: MemoryQos,
    node_allocatable_memory: i64,
    page_size: i64,
) -> (i64, i64, Option<i64>) {
    let request = request.max(0);
    let (min, low) = match (qos.tiered(), class) {
        (true, QosClass::Guaranteed) => (request, 0),
        (true, QosClass::Burstable) => (0, request),
        _ => (0, 0),
    };
    let high = match qos.throttling_factor {
        Some(factor) if class != QosClass::Guaranteed => {
            let limit = limit.filter(|l| *l > 0).unwrap_or(node_allocatable_memory);
            if request != limit {
                memory_high(request, limit, factor, page_size)
            } else {
                None
            }
        }
        _ => None,
    };
    (min, low, high)
}

/// Memory requests summed per QoS tier over the active pods (`getQoSMemoryRequests`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierRequests {
    pub guaranteed: i64,
    pub burstable: i64,
}

/// The ancestors' protection, `(kubepods memory.min, kubepods memory.low, burstable memory.low)`:
/// under `TieredReservation` the seed's sums (Guaranteed + Burstable requests as `memory.min` on
/// `kubepods`, Burstable requests as `memory.low` on `kubepods` and the Burstable tier), else
/// zeros — which is how turning the policy off resets them at start.
pub fn ancestor_protection(requests: TierRequests, qos: MemoryQos) -> (i64, i64, i64) {
    if !qos.tiered() {
        return (0, 0, 0);
    }
    let burstable = requests.burstable.max(0);
    let min = requests.guaranteed.max(0).saturating_add(burstable);
    (min, burstable, burstable)
}

/// The kernel release as `uname -r` prints it is older than `major.minor`.
pub fn kernel_older_than(release: &str, major: u32, minor: u32) -> Option<bool> {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty());
    let have_major: u32 = parts.next()?.parse().ok()?;
    let have_minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some((have_major, have_minor) < (major, minor))
}

/// The start-up warning for `memory.high` throttling on kernels before 5.9, which have a known
/// livelock under it: given when the `MemoryQoS` gate is on, as the kubelet does.
pub fn kernel_warning(release: &str, gate_enabled: bool) -> Option<String> {
    if !gate_enabled || kernel_older_than(release, 5, 9) != Some(true) {
        return None;
    }
    Some(format!(
        "MemoryQoS is enabled on kernel {release}: memory.high throttling can livelock on kernels \
         older than 5.9 (fixed in 5.9); upgrade the kernel or leave memoryThrottlingFactor unset"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::memory_qos::ReservationPolicy;
    use crate::podspec::resources::test_support::{container, pod};

    const MI: i64 = 1 << 20;
    const GI: i64 = 1 << 30;
    const PAGE: i64 = 4096;

    fn throttle(factor: f64) -> MemoryQos {
        MemoryQos {
            throttling_factor: Some(factor),
            reservation: ReservationPolicy::None,
        }
    }

    #[test]
    fn the_seeds_example_is_about_947_mi() {
        // request 256Mi, limit 1Gi, factor 0.9: 256 + 0.9 × 768 = 947.2 Mi, page-rounded down.
        let high = memory_high(256 * MI, GI, 0.9, PAGE).unwrap();
        assert_eq!(high, 993_210_368);
        assert_eq!(high % PAGE, 0);
        assert!(high <= 993_211_187 && high > 993_211_187 - PAGE, "{high}");
        assert_eq!(high / MI, 947);
    }

    #[test]
    fn memory_high_table() {
        let cases: [(i64, i64, f64, i64, Option<i64>); 9] = [
            // factor 1: the limit itself (page-aligned)
            (0, GI, 1.0, PAGE, Some(GI)),
            // request 0 (BestEffort) against 8Gi allocatable with 0.5
            (0, 8 * GI, 0.5, PAGE, Some(4 * GI)),
            // a limit that is not page-aligned rounds down
            (0, 10_000, 1.0, PAGE, Some(8192)),
            // request = limit: nothing above the request
            (GI, GI, 0.9, PAGE, None),
            // rounds down to the request: nothing to throttle
            (4096, 4097, 0.5, PAGE, None),
            (100 * MI, 200 * MI, 0.5, 64 * 1024, Some(150 * MI)),
            // factor outside (0, 1], no limit, bad page: nothing
            (0, GI, 0.0, PAGE, None),
            (0, 0, 0.9, PAGE, None),
            (0, GI, 0.9, 0, None),
        ];
        for (request, limit, factor, page, want) in cases {
            assert_eq!(
                memory_high(request, limit, factor, page),
                want,
                "{request}/{limit}/{factor}/{page}"
            );
        }
    }

    #[test]
    fn container_unified_by_qos_and_policy() {
        let allocatable = 8 * GI;
        let tiered_throttle = MemoryQos {
            throttling_factor: Some(0.9),
            reservation: ReservationPolicy::TieredReservation,
        };
        let tiered_only = MemoryQos {
            throttling_factor: None,
            reservation: ReservationPolicy::TieredReservation,
        };
        let burstable = container("b", "memory=256Mi", "memory=1Gi");
        let guaranteed = container("g", "", "cpu=1,memory=1Gi");
        let best_effort = container("e", "", "");
        let no_limit = container("n", "memory=1Gi", "");
        type Case<'a> = (&'a str, &'a Container, MemoryQos, Vec<(&'a str, String)>);
        let cases: Vec<Case> = vec![
            (
                "burstable, throttling and tiers",
                &burstable,
                tiered_throttle,
                vec![
                    ("memory.high", "993210368".into()),
                    ("memory.low", (256 * MI).to_string()),
                ],
            ),
            (
                "burstable, tiers only: memory.high is reset to max",
                &burstable,
                tiered_only,
                vec![
                    ("memory.high", "max".into()),
                    ("memory.low", (256 * MI).to_string()),
                ],
            ),
            (
                "guaranteed: no throttling, memory.min",
                &guaranteed,
                tiered_throttle,
                vec![
                    ("memory.high", "max".into()),
                    ("memory.min", GI.to_string()),
                ],
            ),
            (
                "best effort: throttled below the node's allocatable, no protection",
                &best_effort,
                tiered_throttle,
                vec![(
                    "memory.high",
                    (memory_high(0, allocatable, 0.9, PAGE).unwrap()).to_string(),
                )],
            ),
            (
                "no limit: allocatable stands in",
                &no_limit,
                throttle(0.5),
                vec![("memory.high", (GI + (7 * GI) / 2).to_string())],
            ),
            (
                "off: only the reset",
                &burstable,
                MemoryQos::OFF,
                vec![("memory.high", "max".into())],
            ),
        ];
        for (name, c, qos, want) in cases {
            let p = pod(vec![c.clone()], vec![]);
            let limit = container_memory_limit(&p, c);
            let got = container_unified(&p, c, limit, qos, allocatable, PAGE);
            let want: HashMap<String, String> =
                want.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_container_whose_request_equals_its_limit_is_not_throttled_in_a_burstable_pod() {
        let exact = container("exact", "memory=64Mi", "memory=64Mi");
        let other = container("other", "cpu=100m", "");
        let p = pod(vec![exact.clone(), other], vec![]);
        assert_eq!(qos_class(&p), QosClass::Burstable);
        let got = container_unified(&p, &exact, 64 * MI, throttle(0.9), 8 * GI, PAGE);
        assert_eq!(got["memory.high"], "max");
    }

    #[test]
    fn pod_values_table() {
        let tiered = MemoryQos {
            throttling_factor: Some(0.9),
            reservation: ReservationPolicy::TieredReservation,
        };
        let cases = [
            (
                QosClass::Guaranteed,
                GI,
                Some(GI),
                tiered,
                (GI, 0, None::<i64>),
            ),
            (
                QosClass::Burstable,
                256 * MI,
                Some(GI),
                tiered,
                (0, 256 * MI, Some(993_210_368)),
            ),
            // no pod limit: the node's allocatable (8Gi) stands in
            (
                QosClass::Burstable,
                0,
                None,
                throttle(1.0),
                (0, 0, Some(8 * GI)),
            ),
            (
                QosClass::BestEffort,
                0,
                None,
                tiered,
                (0, 0, memory_high(0, 8 * GI, 0.9, PAGE)),
            ),
            // off: zeros and max, which reset the pod cgroup
            (
                QosClass::Burstable,
                256 * MI,
                Some(GI),
                MemoryQos::OFF,
                (0, 0, None),
            ),
        ];
        for (class, request, limit, qos, want) in cases {
            assert_eq!(
                pod_values(class, request, limit, qos, 8 * GI, PAGE),
                want,
                "{class} {qos:?}"
            );
        }
    }

    #[test]
    fn ancestors_carry_the_seeds_sums_and_zeros_when_off() {
        let requests = TierRequests {
            guaranteed: GI,
            burstable: 512 * MI,
        };
        let tiered = MemoryQos {
            throttling_factor: None,
            reservation: ReservationPolicy::TieredReservation,
        };
        assert_eq!(
            ancestor_protection(requests, tiered),
            (GI + 512 * MI, 512 * MI, 512 * MI)
        );
        assert_eq!(ancestor_protection(requests, throttle(0.9)), (0, 0, 0));
        assert_eq!(ancestor_protection(requests, MemoryQos::OFF), (0, 0, 0));
    }

    #[test]
    fn effective_needs_the_gate_and_cgroup_v2() {
        let configured = MemoryQos {
            throttling_factor: Some(0.8),
            reservation: ReservationPolicy::TieredReservation,
        };
        assert_eq!(MemoryQos::effective(configured, true, true), configured);
        assert_eq!(
            MemoryQos::effective(configured, false, true),
            MemoryQos::OFF
        );
        assert_eq!(
            MemoryQos::effective(configured, true, false),
            MemoryQos::OFF
        );
    }

    #[test]
    fn kernel_versions() {
        let cases = [
            ("6.1.0-27-amd64", Some(false)),
            ("5.9.0", Some(false)),
            ("5.8.18-100.fc31.x86_64", Some(true)),
            ("4.19.0-21-amd64", Some(true)),
            ("5", Some(true)),
            ("garbage", None),
        ];
        for (release, want) in cases {
            assert_eq!(kernel_older_than(release, 5, 9), want, "{release}");
        }
        assert!(kernel_warning("5.4.0", true).unwrap().contains("5.4.0"));
        assert_eq!(kernel_warning("5.4.0", false), None);
        assert_eq!(kernel_warning("6.1.0", true), None);
    }
}
