//! Which pod goes first under pressure, as the kubelet ranks them, which pods may never go, and
//! the kubelet's eviction message. Pure: pods come in as [`Candidate`]s (spec facts and the
//! usage the stats readers measured).

use std::cmp::Ordering;

use k8s_openapi::api::core::v1::Pod;

use crate::config::eviction::{Resource, Signal};
use crate::podspec::is_mirror_pod;
use crate::podspec::qos::{is_critical_pod, is_static_pod, SYSTEM_CRITICAL_PRIORITY};

/// What ranking needs to know of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub uid: String,
    pub name: String,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// The pod's effective request of the resource under pressure (memory bytes, or
    /// ephemeral-storage bytes for disk signals).
    pub request: i64,
    /// Measured usage of that resource (working set for memory, disk bytes for disk), `None`
    /// when the stats have no entry for the pod.
    pub usage: Option<i64>,
    /// Processes (tasks) of the pod, for PID pressure.
    pub processes: Option<u64>,
}

/// Orders `pods` so that the first is evicted first, for pressure on `resource`:
/// - memory and disk: pods without stats, then pods using more than they request, then lower
///   priority, then the larger usage above request (`rankMemoryPressure`, `rankDiskPressure`);
/// - PIDs: lower priority, then more processes (`rankPIDPressure`).
///
/// The sort is stable, so equal pods keep their input order.
pub fn rank(resource: Resource, pods: &mut [Candidate]) {
    match resource {
        Resource::Pids => pods.sort_by(|a, b| {
            a.priority
                .cmp(&b.priority)
                .then_with(|| b.processes.unwrap_or(0).cmp(&a.processes.unwrap_or(0)))
        }),
        Resource::Memory | Resource::EphemeralStorage | Resource::Inodes => pods.sort_by(|a, b| {
            no_stats_first(a, b)
                .then_with(|| exceeds(b).cmp(&exceeds(a)))
                .then_with(|| a.priority.cmp(&b.priority))
                .then_with(|| above_request(b).cmp(&above_request(a)))
        }),
    }
}

fn no_stats_first(a: &Candidate, b: &Candidate) -> Ordering {
    b.usage.is_none().cmp(&a.usage.is_none())
}

fn exceeds(c: &Candidate) -> bool {
    c.usage.is_some_and(|u| u > c.request)
}

fn above_request(c: &Candidate) -> i64 {
    c.usage.map_or(i64::MIN, |u| u.saturating_sub(c.request))
}

/// Whether the eviction manager may end `pod`. The kubelet never evicts a critical pod
/// (static, mirror, or priority ≥ 2000000000). With nodelet's `evictStaticPods`, a static pod
/// is ranked like any other unless its priority (or `priorityClassName`
/// `system-node-critical` / `system-cluster-critical`) makes it critical.
pub fn evictable(pod: &Pod, evict_static_pods: bool) -> bool {
    if !is_critical_pod(pod) {
        return true;
    }
    if !evict_static_pods || is_mirror_pod(pod) || !is_static_pod(pod) {
        return false;
    }
    let spec = pod.spec.as_ref();
    let priority = spec.and_then(|s| s.priority).unwrap_or(0);
    let class = spec.and_then(|s| s.priority_class_name.as_deref());
    priority < SYSTEM_CRITICAL_PRIORITY
        && !matches!(
            class,
            Some("system-node-critical") | Some("system-cluster-critical")
        )
}

/// One container's part of the message: its usage above its request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUsage {
    pub name: String,
    pub usage: i64,
    /// The request as written in the spec (`"64Mi"`), `"0"` when there is none.
    pub request: String,
    pub request_value: i64,
}

/// The kubelet's eviction message: `The node was low on resource: memory. Threshold quantity:
/// 100Mi, available: 51200Ki. Container hog was using 180Mi, request is 0, has larger
/// consumption of memory. ` — one sentence per container using more than it requests.
pub fn eviction_message(
    resource: Resource,
    threshold: i64,
    available: i64,
    containers: &[ContainerUsage],
) -> String {
    let head = format!(
        "The node was low on resource: {}. Threshold quantity: {}, available: {}. ",
        resource.name(),
        binary_si(threshold, resource),
        binary_si(available, resource)
    );
    with_containers(head, resource, containers)
}

/// nodelet's message for an eviction on a PSI signal (`threshold` and `observed` in
/// millionths of wall time): the kubelet's first sentence and container sentences, with the
/// stall share in place of the amounts: `The node was low on resource: memory. Threshold:
/// memory.pressure.some.avg10 at or above 10%, observed: 42.5%. Container hog was using …`.
pub fn pressure_eviction_message(
    signal: Signal,
    threshold: i64,
    observed: i64,
    containers: &[ContainerUsage],
) -> String {
    let resource = signal.resource();
    let head = format!(
        "The node was low on resource: {}. Threshold: {signal} at or above {}, observed: {}. ",
        resource.name(),
        percent(threshold),
        percent(observed)
    );
    with_containers(head, resource, containers)
}

/// Millionths as a percentage with at most two decimals, as the kernel prints PSI (`42.5%`).
fn percent(ppm: i64) -> String {
    let hundredths = (ppm + 50) / 100;
    let (whole, frac) = (hundredths / 100, hundredths % 100);
    match frac {
        0 => format!("{whole}%"),
        f if f % 10 == 0 => format!("{whole}.{}%", f / 10),
        f => format!("{whole}.{f:02}%"),
    }
}

fn with_containers(
    mut message: String,
    resource: Resource,
    containers: &[ContainerUsage],
) -> String {
    if matches!(resource, Resource::Memory | Resource::EphemeralStorage) {
        for c in containers.iter().filter(|c| c.usage > c.request_value) {
            message.push_str(&format!(
                "Container {} was using {}, request is {}, has larger consumption of {}. ",
                c.name,
                binary_si(c.usage, resource),
                c.request,
                resource.name()
            ));
        }
    }
    message
}

/// An amount as the API's quantity `String()` prints it: bytes with the largest binary suffix
/// that divides them exactly (`100Mi`, `51200Ki`, `1500`); counts (inodes, PIDs) as plain numbers.
pub fn binary_si(amount: i64, resource: Resource) -> String {
    if !matches!(resource, Resource::Memory | Resource::EphemeralStorage) || amount == 0 {
        return amount.to_string();
    }
    const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let mut value = amount;
    let mut suffix = "";
    for s in SUFFIXES {
        if value % 1024 != 0 {
            break;
        }
        value /= 1024;
        suffix = s;
    }
    format!("{value}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: i64 = 1 << 20;

    fn c(name: &str, priority: i32, request: i64, usage: Option<i64>) -> Candidate {
        Candidate {
            uid: format!("uid-{name}"),
            name: name.into(),
            priority,
            request,
            usage,
            processes: None,
        }
    }

    fn order(resource: Resource, mut pods: Vec<Candidate>) -> Vec<String> {
        rank(resource, &mut pods);
        pods.into_iter().map(|p| p.name).collect()
    }

    #[test]
    fn memory_ranking_requests_then_priority_then_usage_above_request() {
        // (what, pods, first to last)
        let cases: Vec<(&str, Vec<Candidate>, Vec<&str>)> = vec![
            (
                "over its request before a bigger pod within its request",
                vec![
                    c("guaranteed", 0, 512 * MI, Some(500 * MI)),
                    c("besteffort", 0, 0, Some(10 * MI)),
                ],
                vec!["besteffort", "guaranteed"],
            ),
            (
                "among pods over their request: lower priority first, whatever the usage",
                vec![
                    c("big-high", 1000, 0, Some(900 * MI)),
                    c("small-low", 0, 0, Some(20 * MI)),
                ],
                vec!["small-low", "big-high"],
            ),
            (
                "same priority: the larger usage above request first",
                vec![
                    c("a", 0, 100 * MI, Some(150 * MI)),
                    c("b", 0, 0, Some(120 * MI)),
                    c("c", 0, 10 * MI, Some(200 * MI)),
                ],
                vec!["c", "b", "a"],
            ),
            (
                "no stats first",
                vec![
                    c("measured", 0, 0, Some(900 * MI)),
                    c("unknown", 5, 0, None),
                ],
                vec!["unknown", "measured"],
            ),
            (
                "within requests: priority, then usage above request (negative)",
                vec![
                    c("g1", 10, 512 * MI, Some(100 * MI)),
                    c("g2", 0, 512 * MI, Some(100 * MI)),
                    c("g3", 0, 512 * MI, Some(400 * MI)),
                ],
                vec!["g3", "g2", "g1"],
            ),
        ];
        for (what, pods, want) in cases {
            assert_eq!(order(Resource::Memory, pods.clone()), want, "{what}");
            assert_eq!(
                order(Resource::EphemeralStorage, pods),
                want,
                "disk: {what}"
            );
        }
    }

    #[test]
    fn pid_ranking_priority_then_processes() {
        let p = |name: &str, priority: i32, processes: u64| Candidate {
            processes: Some(processes),
            ..c(name, priority, 0, Some(0))
        };
        assert_eq!(
            order(
                Resource::Pids,
                vec![
                    p("high-many", 100, 900),
                    p("low-few", 0, 3),
                    p("low-many", 0, 500)
                ]
            ),
            ["low-many", "low-few", "high-many"]
        );
    }

    fn pod(yaml: &str) -> Pod {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn critical_pods_are_never_evicted_unless_static_ones_are_allowed() {
        let static_ann =
            "metadata:\n  name: s\n  annotations: {kubernetes.io/config.source: file}\n";
        let mirror_ann = "metadata:\n  name: m\n  annotations: {kubernetes.io/config.source: api, kubernetes.io/config.mirror: abc}\n";
        // (what, pod, evictable by default, with evictStaticPods)
        let cases = [
            ("API pod", "metadata: {name: a}\nspec: {containers: []}\n".to_string(), true, true),
            (
                "API pod at system-critical priority",
                "metadata: {name: a}\nspec: {containers: [], priority: 2000000000}\n".into(),
                false,
                false,
            ),
            ("static pod", format!("{static_ann}spec: {{containers: []}}\n"), false, true),
            (
                "static pod at priority 1000",
                format!("{static_ann}spec: {{containers: [], priority: 1000}}\n"),
                false,
                true,
            ),
            (
                "static pod at system-node-critical priority",
                format!("{static_ann}spec: {{containers: [], priority: 2000001000}}\n"),
                false,
                false,
            ),
            (
                "static pod of class system-cluster-critical",
                format!(
                    "{static_ann}spec: {{containers: [], priorityClassName: system-cluster-critical}}\n"
                ),
                false,
                false,
            ),
            ("mirror pod", format!("{mirror_ann}spec: {{containers: []}}\n"), false, false),
        ];
        for (what, yaml, default, with_static) in cases {
            let p = pod(&yaml);
            assert_eq!(evictable(&p, false), default, "{what}");
            assert_eq!(
                evictable(&p, true),
                with_static,
                "{what} with evictStaticPods"
            );
        }
    }

    #[test]
    fn messages_are_the_kubelets() {
        let hog = ContainerUsage {
            name: "hog".into(),
            usage: 180 * MI,
            request: "0".into(),
            request_value: 0,
        };
        let within = ContainerUsage {
            name: "quiet".into(),
            usage: 10 * MI,
            request: "64Mi".into(),
            request_value: 64 * MI,
        };
        let cases = [
            (
                Resource::Memory,
                100 * MI,
                50 * MI,
                vec![hog.clone(), within.clone()],
                "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container hog was using 180Mi, request is 0, has larger consumption of memory. ",
            ),
            (
                Resource::Memory,
                100 * MI,
                51_200 * 1024 + 512,
                vec![within.clone()],
                "The node was low on resource: memory. Threshold quantity: 100Mi, available: 52429312. ",
            ),
            (
                Resource::Pids,
                100,
                42,
                vec![hog.clone()],
                "The node was low on resource: pids. Threshold quantity: 100, available: 42. ",
            ),
        ];
        for (resource, threshold, available, containers, want) in cases {
            assert_eq!(
                eviction_message(resource, threshold, available, &containers),
                want
            );
        }
        // (threshold, observed, message)
        let pressure = [
            (
                100_000,
                425_000,
                vec![hog.clone(), within.clone()],
                "The node was low on resource: memory. Threshold: memory.pressure.some.avg10 at or above 10%, observed: 42.5%. Container hog was using 180Mi, request is 0, has larger consumption of memory. ",
            ),
            (
                125_000,
                123_456,
                vec![within.clone()],
                "The node was low on resource: memory. Threshold: memory.pressure.some.avg10 at or above 12.5%, observed: 12.35%. ",
            ),
        ];
        for (threshold, observed, containers, want) in pressure {
            assert_eq!(
                pressure_eviction_message(
                    Signal::MemoryPressureSomeAvg10,
                    threshold,
                    observed,
                    &containers
                ),
                want
            );
        }
        assert_eq!(binary_si(51_200 * 1024, Resource::Memory), "50Mi");
        assert_eq!(binary_si(1500, Resource::Memory), "1500");
        assert_eq!(binary_si(3 << 30, Resource::EphemeralStorage), "3Gi");
    }
}
