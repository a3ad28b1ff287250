//! CPU, memory and ephemeral-storage amounts of containers and pods, read from the pod spec the
//! way the kubelet sees them after API defaulting: a container that sets a limit but no request
//! for a resource requests its limit (`SetDefaults_Pod`), so a static pod written without
//! requests is classified and sized exactly as the API server would store it.
//!
//! Aggregation follows KEP-753 (sidecar containers), as `component-helpers/resource` does:
//! regular containers and restartable init containers (sidecars) add up, each init container
//! runs on top of the sidecars declared before it, and the pod needs the larger of the two.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use crate::quantity::Quantity;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// Amounts of the resources nodelet acts on. `None` means the resource is not named at all
/// (which differs from an explicit zero for the kubelet's "is a limit declared" checks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Amounts {
    pub cpu_milli: Option<i64>,
    pub memory: Option<i64>,
    pub ephemeral_storage: Option<i64>,
}

impl Amounts {
    fn from_list(list: Option<&BTreeMap<String, ApiQuantity>>) -> Self {
        let get = |name: &str| -> Option<Quantity> {
            list.and_then(|l| l.get(name))
                // An unparseable quantity never passes API validation; treating it as absent
                // keeps these pure helpers total (the config builders report it separately).
                .and_then(|q| Quantity::try_from(q).ok())
        };
        Amounts {
            cpu_milli: get(CPU).map(|q| q.milli_value()),
            memory: get(MEMORY).map(|q| q.value()),
            ephemeral_storage: get(EPHEMERAL_STORAGE).map(|q| q.value()),
        }
    }

    /// `addResourceList`: every resource named on either side, summed.
    pub fn plus(self, other: Amounts) -> Amounts {
        let add = |a: Option<i64>, b: Option<i64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        };
        Amounts {
            cpu_milli: add(self.cpu_milli, other.cpu_milli),
            memory: add(self.memory, other.memory),
            ephemeral_storage: add(self.ephemeral_storage, other.ephemeral_storage),
        }
    }

    /// `maxResourceList`: every resource named on either side, the larger value.
    pub fn max_with(self, other: Amounts) -> Amounts {
        let max = |a: Option<i64>, b: Option<i64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, None) => a,
            (None, b) => b,
        };
        Amounts {
            cpu_milli: max(self.cpu_milli, other.cpu_milli),
            memory: max(self.memory, other.memory),
            ephemeral_storage: max(self.ephemeral_storage, other.ephemeral_storage),
        }
    }
}

/// The node's allocatable amounts, as the Node's `status.allocatable` reports them: what the
/// Downward API's `limits.*` of a container without a limit fall back to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeAllocatable {
    pub cpu_milli: i64,
    pub memory: i64,
    /// `None` when the node's ephemeral storage is unknown (the Node then has no
    /// `ephemeral-storage` in its allocatable): `limits.ephemeral-storage` stays `0`.
    pub ephemeral_storage: Option<i64>,
}

/// The limits the Downward API reports for `container` of `pod`: the kubelet's
/// `defaultPodLimitsForDownwardAPI` (since 1.34) followed by `MergeContainerResourceLimits`. A
/// cpu, memory or ephemeral-storage limit the container does not set (or sets to zero) is the
/// pod-level limit when the pod sets a non-zero one (cpu and memory: the only pod-level
/// resources of the three), else the node's allocatable amount.
pub fn downward_api_limits(pod: &Pod, container: &Container, node: &NodeAllocatable) -> Amounts {
    let pod_level = pod_level_limits(pod);
    let non_zero = |v: Option<i64>| v.filter(|v| *v != 0);
    let fallback = Amounts {
        cpu_milli: non_zero(pod_level.cpu_milli).or(Some(node.cpu_milli)),
        memory: non_zero(pod_level.memory).or(Some(node.memory)),
        ephemeral_storage: node.ephemeral_storage,
    };
    let own = container_limits(container);
    let pick = |own: Option<i64>, fallback: Option<i64>| non_zero(own).or(fallback).or(own);
    Amounts {
        cpu_milli: pick(own.cpu_milli, fallback.cpu_milli),
        memory: pick(own.memory, fallback.memory),
        ephemeral_storage: pick(own.ephemeral_storage, fallback.ephemeral_storage),
    }
}

fn requirements(container: &Container) -> Option<&ResourceRequirements> {
    container.resources.as_ref()
}

/// The container's limits as written.
pub fn container_limits(container: &Container) -> Amounts {
    Amounts::from_list(requirements(container).and_then(|r| r.limits.as_ref()))
}

/// The container's requests after API defaulting: a resource with a limit but no request
/// requests its limit.
pub fn container_requests(container: &Container) -> Amounts {
    let requests = Amounts::from_list(requirements(container).and_then(|r| r.requests.as_ref()));
    let limits = container_limits(container);
    Amounts {
        cpu_milli: requests.cpu_milli.or(limits.cpu_milli),
        memory: requests.memory.or(limits.memory),
        ephemeral_storage: requests.ephemeral_storage.or(limits.ephemeral_storage),
    }
}

/// Pod-level requests (`spec.resources.requests`, cpu and memory only, as the kubelet supports).
pub fn pod_level_requests(pod: &Pod) -> Amounts {
    let list = pod
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref());
    Amounts {
        ephemeral_storage: None,
        ..Amounts::from_list(list)
    }
}

/// Pod-level limits (`spec.resources.limits`, cpu and memory only).
pub fn pod_level_limits(pod: &Pod) -> Amounts {
    let list = pod
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.limits.as_ref());
    Amounts {
        ephemeral_storage: None,
        ..Amounts::from_list(list)
    }
}

/// True when the pod sets any supported pod-level request or limit (`IsPodLevelResourcesSet`).
pub fn pod_level_resources_set(pod: &Pod) -> bool {
    let r = pod_level_requests(pod);
    let l = pod_level_limits(pod);
    r.cpu_milli.is_some() || r.memory.is_some() || l.cpu_milli.is_some() || l.memory.is_some()
}

/// True when the pod sets a supported pod-level request (`IsPodLevelRequestsSet`).
pub fn pod_level_requests_set(pod: &Pod) -> bool {
    let r = pod_level_requests(pod);
    r.cpu_milli.is_some() || r.memory.is_some()
}

use super::{init_containers, is_sidecar, regular_containers};

/// Which list of the pod spec a container comes from, for aggregation callbacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerList {
    Regular,
    Init,
}

/// KEP-753 aggregation over the containers of a pod (`AggregateContainerRequests` /
/// `AggregateContainerLimits`). `each` sees every regular container's amounts and, for every
/// init container, the amounts in use while it runs (itself plus the sidecars before it; for a
/// sidecar, the cumulative sidecar total).
pub fn aggregate(
    pod: &Pod,
    amounts_of: impl Fn(&Container) -> Amounts,
    mut each: impl FnMut(Amounts, ContainerList),
) -> Amounts {
    let mut total = Amounts::default();
    for c in regular_containers(pod) {
        let a = amounts_of(c);
        each(a, ContainerList::Regular);
        total = total.plus(a);
    }
    let mut sidecars = Amounts::default();
    let mut init_peak = Amounts::default();
    for c in init_containers(pod) {
        let a = amounts_of(c);
        let in_use = if is_sidecar(c) {
            total = total.plus(a);
            sidecars = sidecars.plus(a);
            sidecars
        } else {
            a.plus(sidecars)
        };
        each(in_use, ContainerList::Init);
        init_peak = init_peak.max_with(in_use);
    }
    total.max_with(init_peak)
}

/// The pod's effective requests (`PodRequests` without overhead, pod-level requests winning).
pub fn pod_requests(pod: &Pod) -> Amounts {
    let mut reqs = aggregate(pod, container_requests, |_, _| {});
    let pod_level = pod_level_requests(pod);
    if pod_level.cpu_milli.is_some() {
        reqs.cpu_milli = pod_level.cpu_milli;
    }
    if pod_level.memory.is_some() {
        reqs.memory = pod_level.memory;
    }
    reqs
}

/// The pod's summed limits (`PodLimits` without overhead, pod-level limits winning) and whether
/// every container (and every init step) declares a cpu / memory limit. An undeclared limit
/// makes the pod unbounded for that resource, as the seed says: "if any resource has no limit,
/// it is treated as the highest limit".
pub fn pod_limits(pod: &Pod) -> (Amounts, bool, bool) {
    let mut cpu_declared = true;
    let mut memory_declared = true;
    let mut limits = aggregate(pod, container_limits, |a, _| {
        if a.cpu_milli.unwrap_or(0) == 0 {
            cpu_declared = false;
        }
        if a.memory.unwrap_or(0) == 0 {
            memory_declared = false;
        }
    });
    let pod_level = pod_level_limits(pod);
    if pod_level.cpu_milli.is_some() {
        limits.cpu_milli = pod_level.cpu_milli;
    }
    if pod_level.memory.is_some() {
        limits.memory = pod_level.memory;
    }
    if pod_level.cpu_milli.unwrap_or(0) != 0 {
        cpu_declared = true;
    }
    if pod_level.memory.unwrap_or(0) != 0 {
        memory_declared = true;
    }
    (limits, cpu_declared, memory_declared)
}

/// Overhead (`spec.overhead`) cpu and memory, for the sandbox's `overhead` resources.
pub fn pod_overhead(pod: &Pod) -> Option<Amounts> {
    pod.spec
        .as_ref()
        .and_then(|s| s.overhead.as_ref())
        .map(|o| Amounts::from_list(Some(o)))
}

/// The pod's effective resources: requests and limits as the scheduler and the pod cgroup see
/// them. `None` limits are unbounded: some container (or init step) sets no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodResources {
    pub cpu_request_milli: i64,
    pub cpu_limit_milli: Option<i64>,
    pub memory_request: i64,
    pub memory_limit: Option<i64>,
}

/// Effective pod resources per the seed (Init containers / sidecar containers, "resource sharing
/// within containers"): the effective init request is the largest any init step needs (an init
/// container on top of the sidecars started before it); the pod needs the larger of that and
/// the sum over app containers and sidecars. Pod-level `spec.resources` replace the aggregate.
pub fn effective_pod_resources(pod: &Pod) -> PodResources {
    let requests = pod_requests(pod);
    let (limits, cpu_declared, memory_declared) = pod_limits(pod);
    PodResources {
        cpu_request_milli: requests.cpu_milli.unwrap_or(0),
        cpu_limit_milli: cpu_declared.then(|| limits.cpu_milli.unwrap_or(0)),
        memory_request: requests.memory.unwrap_or(0),
        memory_limit: memory_declared.then(|| limits.memory.unwrap_or(0)),
    }
}

/// `r` with the pod's `overhead` (`spec.overhead`, set by the API server from the pod's
/// RuntimeClass) added as the kubelet's `PodRequests`/`PodLimits` add it: to every request, and
/// to a limit only where there is one (an unbounded pod stays unbounded). Saturating: the
/// amounts come from outside.
pub fn add_overhead(r: PodResources, overhead: Option<Amounts>) -> PodResources {
    let Some(o) = overhead else {
        return r;
    };
    let cpu = o.cpu_milli.unwrap_or(0);
    let memory = o.memory.unwrap_or(0);
    PodResources {
        cpu_request_milli: r.cpu_request_milli.saturating_add(cpu),
        cpu_limit_milli: r.cpu_limit_milli.map(|l| l.saturating_add(cpu)),
        memory_request: r.memory_request.saturating_add(memory),
        memory_limit: r.memory_limit.map(|l| l.saturating_add(memory)),
    }
}

/// The pod's resources with its overhead: what the node gives the pod as a whole — admission's
/// fit, the pod cgroup, the QoS tiers, eviction ranking (the kubelet's `PodRequests`,
/// `PodLimits` and `GetResourceRequestQuantity` with their default options). Containers' own
/// values (their cgroups, the Downward API's `resourceFieldRef`) never include it.
pub fn pod_resources_with_overhead(pod: &Pod) -> PodResources {
    add_overhead(effective_pod_resources(pod), pod_overhead(pod))
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

    /// `"cpu=100m,memory=64Mi"` → a resource list.
    pub fn list(spec: &str) -> Option<BTreeMap<String, ApiQuantity>> {
        if spec.is_empty() {
            return None;
        }
        Some(
            spec.split(',')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    (k.to_string(), ApiQuantity(v.to_string()))
                })
                .collect(),
        )
    }

    /// A container with `requests` / `limits` written as `"cpu=100m,memory=64Mi"`.
    pub fn container(name: &str, requests: &str, limits: &str) -> Container {
        Container {
            name: name.to_string(),
            image: Some("busybox".to_string()),
            resources: Some(ResourceRequirements {
                requests: list(requests),
                limits: list(limits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub fn sidecar(name: &str, requests: &str, limits: &str) -> Container {
        Container {
            restart_policy: Some("Always".to_string()),
            ..container(name, requests, limits)
        }
    }

    pub fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
        Pod {
            metadata: Default::default(),
            spec: Some(PodSpec {
                containers,
                init_containers: if init.is_empty() { None } else { Some(init) },
                ..Default::default()
            }),
            status: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{container, pod, sidecar};
    use super::*;

    #[test]
    fn requests_default_to_limits_per_resource() {
        let cases = [
            ("", "", (None, None)),
            ("cpu=100m", "", (Some(100), None)),
            ("", "cpu=1,memory=1Gi", (Some(1000), Some(1 << 30))),
            ("cpu=200m", "cpu=1,memory=64Mi", (Some(200), Some(64 << 20))),
            ("cpu=0", "cpu=1", (Some(0), None)),
        ];
        for (requests, limits, (cpu, memory)) in cases {
            let r = container_requests(&container("c", requests, limits));
            assert_eq!(
                (r.cpu_milli, r.memory),
                (cpu, memory),
                "{requests} / {limits}"
            );
        }
    }

    #[test]
    fn pod_requests_follow_the_sidecar_kep() {
        // (regular containers' cpu requests, init containers (is_sidecar, cpu), expected)
        type Case<'a> = (&'a [i64], &'a [(bool, i64)], i64);
        let cases: [Case; 6] = [
            (&[100, 200], &[], 300),
            (&[100], &[(false, 500)], 500),
            (&[100], &[(false, 50)], 100),
            // sidecar runs alongside the app: 100 + 300
            (&[100], &[(true, 300)], 400),
            // init after a sidecar needs sidecar + itself: 300 + 500 = 800 > 100 + 300
            (&[100], &[(true, 300), (false, 500)], 800),
            // init before the sidecar does not stack on it: max(500, 100 + 300)
            (&[100], &[(false, 500), (true, 300)], 500),
        ];
        for (regular, init, want) in cases {
            let regular = regular
                .iter()
                .enumerate()
                .map(|(i, m)| container(&format!("c{i}"), &format!("cpu={m}m"), ""))
                .collect();
            let init = init
                .iter()
                .enumerate()
                .map(|(i, (side, m))| {
                    let name = format!("i{i}");
                    if *side {
                        sidecar(&name, &format!("cpu={m}m"), "")
                    } else {
                        container(&name, &format!("cpu={m}m"), "")
                    }
                })
                .collect();
            let p = pod(regular, init);
            assert_eq!(pod_requests(&p).cpu_milli, Some(want));
        }
    }

    #[test]
    fn pod_limits_are_undeclared_when_any_step_lacks_one() {
        let cases = [
            (
                vec![container("a", "", "cpu=1,memory=1Gi")],
                vec![],
                true,
                true,
            ),
            (
                vec![
                    container("a", "", "cpu=1,memory=1Gi"),
                    container("b", "", "memory=1Gi"),
                ],
                vec![],
                false,
                true,
            ),
            (
                vec![container("a", "", "cpu=1,memory=1Gi")],
                vec![container("i", "", "cpu=1")],
                true,
                false,
            ),
        ];
        for (regular, init, cpu, memory) in cases {
            let (_, c, m) = pod_limits(&pod(regular, init));
            assert_eq!((c, m), (cpu, memory));
        }
    }

    #[test]
    fn effective_resources_follow_the_seed() {
        // app 100m + sidecar 200m = 300m; init 500m after the sidecar needs 700m → 700m
        let p = pod(
            vec![container(
                "app",
                "cpu=100m,memory=100Mi",
                "cpu=1,memory=200Mi",
            )],
            vec![
                sidecar("side", "cpu=200m,memory=50Mi", "cpu=1,memory=50Mi"),
                container("init", "cpu=500m,memory=10Mi", "cpu=2,memory=10Mi"),
            ],
        );
        assert_eq!(
            effective_pod_resources(&p),
            PodResources {
                cpu_request_milli: 700,
                // app + side = 2 cpu; side + init = 3 cpu → 3 cpu
                cpu_limit_milli: Some(3000),
                memory_request: 150 << 20,
                memory_limit: Some(250 << 20),
            }
        );
        // one container without a memory limit makes the pod unbounded for memory
        let p = pod(
            vec![
                container("a", "cpu=100m", "cpu=1,memory=1Gi"),
                container("b", "cpu=100m", "cpu=1"),
            ],
            vec![],
        );
        let r = effective_pod_resources(&p);
        assert_eq!((r.cpu_limit_milli, r.memory_limit), (Some(2000), None));
    }

    #[test]
    fn overhead_adds_to_requests_and_to_limits_that_are_there() {
        let with = |o: &str| {
            let mut p = pod(
                vec![container("a", "cpu=100m,memory=64Mi", "cpu=1,memory=128Mi")],
                vec![],
            );
            p.spec.as_mut().unwrap().overhead = test_support::list(o);
            p
        };
        let unbounded = |o: &str| {
            let mut p = pod(vec![container("a", "cpu=100m,memory=64Mi", "")], vec![]);
            p.spec.as_mut().unwrap().overhead = test_support::list(o);
            p
        };
        let r = |cpu, cpu_l, mem, mem_l| PodResources {
            cpu_request_milli: cpu,
            cpu_limit_milli: cpu_l,
            memory_request: mem,
            memory_limit: mem_l,
        };
        let cases = [
            // No overhead: the containers' values.
            (with(""), r(100, Some(1000), 64 << 20, Some(128 << 20))),
            (
                with("cpu=250m,memory=120Mi"),
                r(350, Some(1250), 184 << 20, Some(248 << 20)),
            ),
            // Only memory overhead: cpu untouched.
            (
                with("memory=10Mi"),
                r(100, Some(1000), 74 << 20, Some(138 << 20)),
            ),
            // No limits: overhead does not make one.
            (
                unbounded("cpu=250m,memory=120Mi"),
                r(350, None, 184 << 20, None),
            ),
            // An absurd overhead saturates instead of wrapping.
            (
                with("memory=9223372036854775807"),
                r(100, Some(1000), i64::MAX, Some(i64::MAX)),
            ),
        ];
        for (p, want) in cases {
            assert_eq!(
                pod_resources_with_overhead(&p),
                want,
                "{:?}",
                p.spec.as_ref().unwrap().overhead
            );
        }
        // Without overhead the containers' own view is unchanged.
        assert_eq!(
            effective_pod_resources(&with("cpu=1")).cpu_request_milli,
            100
        );
    }

    #[test]
    fn downward_api_limits_fall_back_to_the_pod_level_limit_then_the_node_allocatable() {
        let node = NodeAllocatable {
            cpu_milli: 3500,
            memory: 7 << 30,
            ephemeral_storage: Some(90 << 30),
        };
        let unknown_storage = NodeAllocatable {
            ephemeral_storage: None,
            ..node
        };
        // (container limits, pod-level limits, node, expected (cpu, memory, storage))
        type Case<'a> = (&'a str, &'a str, NodeAllocatable, (i64, i64, Option<i64>));
        let cases: [Case; 7] = [
            // No limit anywhere: the node's allocatable (not its capacity).
            ("", "", node, (3500, 7 << 30, Some(90 << 30))),
            // The container's own limits win.
            (
                "cpu=500m,memory=64Mi,ephemeral-storage=1Gi",
                "cpu=2,memory=1Gi",
                node,
                (500, 64 << 20, Some(1 << 30)),
            ),
            // Pod-level limits for what the container leaves open; storage is no pod-level
            // resource, so it comes from the node.
            (
                "",
                "cpu=2,memory=1Gi",
                node,
                (2000, 1 << 30, Some(90 << 30)),
            ),
            (
                "memory=64Mi",
                "cpu=2",
                node,
                (2000, 64 << 20, Some(90 << 30)),
            ),
            // A zero limit counts as none, at both levels.
            (
                "cpu=0,memory=0",
                "cpu=0,memory=1Gi",
                node,
                (3500, 1 << 30, Some(90 << 30)),
            ),
            // Unknown node storage: the container's value, else unset (0 for the Downward API).
            ("", "", unknown_storage, (3500, 7 << 30, None)),
            (
                "ephemeral-storage=2Gi",
                "",
                unknown_storage,
                (3500, 7 << 30, Some(2 << 30)),
            ),
        ];
        for (i, (own, pod_level, node, (cpu, memory, storage))) in cases.into_iter().enumerate() {
            let c = container("c", "", own);
            let mut p = pod(vec![c.clone()], vec![]);
            if let Some(spec) = p.spec.as_mut() {
                spec.resources = Some(ResourceRequirements {
                    limits: test_support::list(pod_level),
                    ..Default::default()
                });
            }
            let got = downward_api_limits(&p, &c, &node);
            assert_eq!(
                (got.cpu_milli, got.memory, got.ephemeral_storage),
                (Some(cpu), Some(memory), storage),
                "case {i}: container {own:?}, pod {pod_level:?}"
            );
        }
    }
}
