//! In-place pod resize (InPlacePodVerticalScaling, GA in 1.35): what a pod's allocation is, the
//! pod as its allocation says (`with_allocation`, the kubelet's `UpdatePodFromAllocation`), and
//! whether a desired change of resources can be allocated now (`decide`), with the kubelet's
//! condition reasons and messages.
//!
//! Pure: the allocation manager (`sync::allocation`) keeps the allocations and acts on the
//! decision.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

use super::qos::qos_class;
use super::resources::{pod_overhead, pod_requests, NodeAllocatable};
use super::{init_containers, is_sidecar, regular_containers};

/// `PodResizePending`'s reason when the resize fits once other pods leave.
pub const REASON_DEFERRED: &str = "Deferred";
/// `PodResizePending`'s reason when the resize can never be allocated on this node.
pub const REASON_INFEASIBLE: &str = "Infeasible";
/// `PodResizeInProgress`'s reason when actuating the resize failed.
pub const REASON_ERROR: &str = "Error";
/// The kubelet's message for a static pod (`IsInPlacePodVerticalScalingAllowed`).
pub const STATIC_POD_MESSAGE: &str = "In-place resize of static-pods is not supported";
/// The kubelet's message for a pod-level resize while `InPlacePodLevelResourcesVerticalScaling`
/// (alpha in 1.35, off by default) is off.
pub const POD_LEVEL_MESSAGE: &str = "InPlacePodLevelResourcesVerticalScaling is disabled";

/// The resources admitted for a pod: per container (regular and init, by name) and pod-level.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodAllocation {
    pub containers: BTreeMap<String, ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_level: Option<ResourceRequirements>,
}

fn resources_of(c: &Container) -> ResourceRequirements {
    let mut r = c.resources.clone().unwrap_or_default();
    // Empty lists and absent ones mean the same.
    if r.requests.as_ref().is_some_and(|l| l.is_empty()) {
        r.requests = None;
    }
    if r.limits.as_ref().is_some_and(|l| l.is_empty()) {
        r.limits = None;
    }
    r.claims = None;
    r
}

/// The allocation a pod's spec asks for (`allocationFromPod`).
pub fn allocation_of(pod: &Pod) -> PodAllocation {
    PodAllocation {
        containers: init_containers(pod)
            .iter()
            .chain(regular_containers(pod))
            .map(|c| (c.name.clone(), resources_of(c)))
            .collect(),
        pod_level: pod.spec.as_ref().and_then(|s| s.resources.clone()),
    }
}

/// The pod with its allocated resources in place of the spec's (`UpdatePodFromAllocation`):
/// what nodelet runs, admits and counts. Containers without an allocation keep theirs.
pub fn with_allocation(pod: &Pod, allocation: &PodAllocation) -> Pod {
    let mut out = pod.clone();
    if let Some(spec) = out.spec.as_mut() {
        let set = |c: &mut Container| {
            if let Some(a) = allocation.containers.get(&c.name) {
                if resources_of(c) != *a {
                    let claims = c.resources.as_ref().and_then(|r| r.claims.clone());
                    c.resources = Some(ResourceRequirements {
                        claims,
                        ..a.clone()
                    });
                }
            }
        };
        spec.containers.iter_mut().for_each(set);
        spec.init_containers.iter_mut().flatten().for_each(set);
        spec.resources.clone_from(&allocation.pod_level);
    }
    out
}

/// What a desired resize comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The spec asks for what is allocated.
    NoChange,
    /// The new resources are allocated now.
    Allocate,
    /// `PodResizePending` with `reason` (`Deferred` or `Infeasible`) and the kubelet's message;
    /// the allocation stays.
    Pending {
        reason: &'static str,
        message: String,
    },
}

/// What `decide` weighs.
pub struct ResizeInputs<'a> {
    /// The pod as the API has it now (the desired resources).
    pub desired: &'a Pod,
    /// What is allocated to it.
    pub allocated: &'a PodAllocation,
    /// The allocated requests of every other admitted pod, summed (cpu in millicores, memory
    /// in bytes).
    pub others_cpu_milli: i64,
    pub others_memory: i64,
    /// The node's allocatable amounts.
    pub allocatable: NodeAllocatable,
    /// The pod comes from a static manifest.
    pub is_static: bool,
}

fn infeasible(message: impl Into<String>) -> Decision {
    Decision::Pending {
        reason: REASON_INFEASIBLE,
        message: message.into(),
    }
}

fn limit_of(r: &ResourceRequirements, name: &str) -> Option<String> {
    r.limits
        .as_ref()
        .and_then(|l| l.get(name))
        .map(|q| q.0.clone())
}

/// Whether the resize of `desired` can be allocated: the kubelet's `handlePodResourcesResize`
/// with its resize admit handler and the capacity check, in that order.
pub fn decide(inputs: &ResizeInputs<'_>) -> Decision {
    let want = allocation_of(inputs.desired);
    if want == *inputs.allocated {
        return Decision::NoChange;
    }
    if inputs.is_static {
        return infeasible(STATIC_POD_MESSAGE);
    }
    if want.pod_level != inputs.allocated.pod_level {
        return infeasible(POD_LEVEL_MESSAGE);
    }
    let allocated_pod = with_allocation(inputs.desired, inputs.allocated);
    for c in init_containers(inputs.desired) {
        let before = inputs.allocated.containers.get(&c.name);
        if !is_sidecar(c) && before.is_some_and(|b| *b != resources_of(c)) {
            // The API server refuses this (only sidecars resize); nodelet keeps the allocation.
            return infeasible(format!(
                "resize of the non-restartable init container {:?} is not supported",
                c.name
            ));
        }
    }
    for c in init_containers(inputs.desired)
        .iter()
        .chain(regular_containers(inputs.desired))
    {
        let Some(before) = inputs.allocated.containers.get(&c.name) else {
            continue;
        };
        let now = resources_of(c);
        if limit_of(before, "memory").is_some() && limit_of(&now, "memory").is_none() {
            return infeasible(format!(
                "container {:?}: a memory limit cannot be removed by a resize",
                c.name
            ));
        }
    }
    let (old_qos, new_qos) = (qos_class(&allocated_pod), qos_class(inputs.desired));
    if old_qos != new_qos {
        return infeasible(format!(
            "Pod QOS Class may not change as a result of resizing (from {} to {})",
            old_qos.as_str(),
            new_qos.as_str()
        ));
    }
    let overhead = pod_overhead(inputs.desired).unwrap_or_default();
    let requests = pod_requests(inputs.desired).plus(overhead);
    let cpu = requests.cpu_milli.unwrap_or(0);
    let memory = requests.memory.unwrap_or(0);
    let cap = inputs.allocatable;
    if cpu > cap.cpu_milli || memory > cap.memory {
        let what = if memory > cap.memory {
            format!("memory, requested: {memory}, capacity: {}", cap.memory)
        } else {
            format!("cpu, requested: {cpu}, capacity: {}", cap.cpu_milli)
        };
        return infeasible(format!("Node didn't have enough capacity: {what}"));
    }
    let deferred = |name: &str, requested: i64, used: i64, capacity: i64| {
        Decision::Pending {
        reason: REASON_DEFERRED,
        message: format!(
            "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
        ),
    }
    };
    if cpu > 0 && inputs.others_cpu_milli.saturating_add(cpu) > cap.cpu_milli {
        return deferred("cpu", cpu, inputs.others_cpu_milli, cap.cpu_milli);
    }
    if memory > 0 && inputs.others_memory.saturating_add(memory) > cap.memory {
        return deferred("memory", memory, inputs.others_memory, cap.memory);
    }
    Decision::Allocate
}

/// The message of the kubelet's resize events (`ResizeStarted`, `ResizeCompleted`,
/// `ResizeError`, `ResizeDeferred`, `ResizeInfeasible`; its `podResizeMessage`): `prefix: `
/// and a JSON summary of the pod's init and regular containers' resources, the generation and,
/// when there is one, the error — the same keys, in the same order, as the kubelet writes.
pub fn event_message(pod: &Pod, generation: i64, error: &str, prefix: &str) -> String {
    #[derive(Serialize)]
    struct ContainerAllocation<'a> {
        name: &'a str,
        resources: ResourceSummary<'a>,
    }
    /// `ResourceRequirements` as Go marshals it: limits, requests, claims, each left out when
    /// empty.
    #[derive(Serialize)]
    struct ResourceSummary<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        limits: Option<&'a BTreeMap<String, Quantity>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        requests: Option<&'a BTreeMap<String, Quantity>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        claims: Option<&'a Vec<k8s_openapi::api::core::v1::ResourceClaim>>,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Summary<'a> {
        #[serde(skip_serializing_if = "Vec::is_empty")]
        init_containers: Vec<ContainerAllocation<'a>>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        containers: Vec<ContainerAllocation<'a>>,
        generation: i64,
        #[serde(skip_serializing_if = "str::is_empty")]
        error: &'a str,
    }
    fn summarize(list: &[Container]) -> Vec<ContainerAllocation<'_>> {
        list.iter()
            .map(|c| {
                let r = c.resources.as_ref();
                ContainerAllocation {
                    name: &c.name,
                    resources: ResourceSummary {
                        limits: r.and_then(|r| r.limits.as_ref()).filter(|m| !m.is_empty()),
                        requests: r
                            .and_then(|r| r.requests.as_ref())
                            .filter(|m| !m.is_empty()),
                        claims: r.and_then(|r| r.claims.as_ref()).filter(|c| !c.is_empty()),
                    },
                }
            })
            .collect()
    }
    let summary = Summary {
        init_containers: summarize(init_containers(pod)),
        containers: summarize(regular_containers(pod)),
        generation,
        error,
    };
    match serde_json::to_string(&summary) {
        Ok(json) => format!("{prefix}: {json}"),
        Err(_) => prefix.to_string(),
    }
}

/// A container's `resizePolicy` for `resource` (`cpu` or `memory`): `RestartContainer` or the
/// default `NotRequired`.
pub fn restart_required(container: &Container, resource: &str) -> bool {
    container
        .resize_policy
        .iter()
        .flatten()
        .any(|p| p.resource_name == resource && p.restart_policy == "RestartContainer")
}

#[cfg(test)]
mod tests {
    use super::super::resources::test_support::{container, pod, sidecar};
    use super::*;

    fn node() -> NodeAllocatable {
        NodeAllocatable {
            cpu_milli: 2000,
            memory: 4 << 30,
            ephemeral_storage: None,
        }
    }

    fn uid(mut p: Pod) -> Pod {
        p.metadata.uid = Some("u".into());
        p
    }

    #[test]
    fn decide_table() {
        let burst = |req: &str, lim: &str| uid(pod(vec![container("c", req, lim)], vec![]));
        let base = burst("cpu=100m,memory=64Mi", "cpu=200m,memory=128Mi");
        let alloc = allocation_of(&base);
        let gib = 1i64 << 30;
        let cases: Vec<(&str, Pod, i64, i64, bool, Decision)> = vec![
            ("same spec", base.clone(), 0, 0, false, Decision::NoChange),
            (
                "cpu limit raised, fits",
                burst("cpu=100m,memory=64Mi", "cpu=500m,memory=128Mi"),
                1000,
                gib,
                false,
                Decision::Allocate,
            ),
            (
                "static pod",
                burst("cpu=100m,memory=64Mi", "cpu=500m,memory=128Mi"),
                0,
                0,
                true,
                infeasible(STATIC_POD_MESSAGE),
            ),
            (
                "cpu request above allocatable",
                burst("cpu=3,memory=64Mi", "cpu=4,memory=128Mi"),
                0,
                0,
                false,
                infeasible("Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000"),
            ),
            (
                "memory above allocatable is named first",
                burst("cpu=3,memory=5Gi", "cpu=4,memory=6Gi"),
                0,
                0,
                false,
                infeasible(
                    "Node didn't have enough capacity: memory, requested: 5368709120, capacity: 4294967296",
                ),
            ),
            (
                "cpu request fits once others leave",
                burst("cpu=1500m,memory=64Mi", "cpu=2,memory=128Mi"),
                1000,
                0,
                false,
                Decision::Pending {
                    reason: REASON_DEFERRED,
                    message: "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000".into(),
                },
            ),
            (
                "memory request fits once others leave",
                burst("cpu=100m,memory=3Gi", "cpu=200m,memory=3Gi"),
                0,
                2 * gib,
                false,
                Decision::Pending {
                    reason: REASON_DEFERRED,
                    message: format!(
                        "Node didn't have enough resource: memory, requested: {}, used: {}, capacity: {}",
                        3 * gib,
                        2 * gib,
                        4 * gib
                    ),
                },
            ),
            (
                "memory limit removed",
                burst("cpu=100m,memory=64Mi", "cpu=200m"),
                0,
                0,
                false,
                infeasible("container \"c\": a memory limit cannot be removed by a resize"),
            ),
            (
                "burstable to guaranteed",
                burst("cpu=200m,memory=128Mi", "cpu=200m,memory=128Mi"),
                0,
                0,
                false,
                infeasible(
                    "Pod QOS Class may not change as a result of resizing (from Burstable to Guaranteed)",
                ),
            ),
        ];
        for (name, desired, others_cpu, others_mem, is_static, want) in cases {
            let got = decide(&ResizeInputs {
                desired: &desired,
                allocated: &alloc,
                others_cpu_milli: others_cpu,
                others_memory: others_mem,
                allocatable: node(),
                is_static,
            });
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn init_containers_only_sidecars_resize() {
        let before = uid(pod(
            vec![container("c", "cpu=100m", "cpu=200m")],
            vec![
                container("init", "cpu=100m", "cpu=200m"),
                sidecar("side", "cpu=100m", "cpu=200m"),
            ],
        ));
        let alloc = allocation_of(&before);
        let inputs = |p: &Pod| {
            decide(&ResizeInputs {
                desired: p,
                allocated: &alloc,
                others_cpu_milli: 0,
                others_memory: 0,
                allocatable: node(),
                is_static: false,
            })
        };
        let mut side = before.clone();
        side.spec
            .as_mut()
            .unwrap()
            .init_containers
            .as_mut()
            .unwrap()[1] = sidecar("side", "cpu=100m", "cpu=300m");
        assert_eq!(inputs(&side), Decision::Allocate);
        let mut init = before.clone();
        init.spec
            .as_mut()
            .unwrap()
            .init_containers
            .as_mut()
            .unwrap()[0] = container("init", "cpu=100m", "cpu=300m");
        assert_eq!(
            inputs(&init),
            infeasible("resize of the non-restartable init container \"init\" is not supported")
        );
    }

    #[test]
    fn pod_level_resize_is_refused() {
        let before = uid(pod(vec![container("c", "cpu=100m", "cpu=200m")], vec![]));
        let alloc = allocation_of(&before);
        let mut after = before.clone();
        after.spec.as_mut().unwrap().resources = Some(ResourceRequirements {
            limits: super::super::resources::test_support::list("cpu=1"),
            ..Default::default()
        });
        let got = decide(&ResizeInputs {
            desired: &after,
            allocated: &alloc,
            others_cpu_milli: 0,
            others_memory: 0,
            allocatable: node(),
            is_static: false,
        });
        assert_eq!(got, infeasible(POD_LEVEL_MESSAGE));
    }

    #[test]
    fn with_allocation_puts_the_allocated_resources_back() {
        let before = uid(pod(vec![container("c", "cpu=100m", "cpu=200m")], vec![]));
        let alloc = allocation_of(&before);
        let after = uid(pod(vec![container("c", "cpu=100m", "cpu=900m")], vec![]));
        assert_eq!(with_allocation(&after, &alloc), before);
        assert_eq!(allocation_of(&with_allocation(&after, &alloc)), alloc);
    }

    #[test]
    fn restart_policy_per_resource() {
        let mut c = container("c", "", "");
        assert!(!restart_required(&c, "memory"));
        c.resize_policy = Some(vec![k8s_openapi::api::core::v1::ContainerResizePolicy {
            resource_name: "memory".into(),
            restart_policy: "RestartContainer".into(),
        }]);
        assert!(restart_required(&c, "memory"));
        assert!(!restart_required(&c, "cpu"));
    }

    /// The resize events' message, as the kubelet's `podResizeMessage` writes it: init
    /// containers, containers (limits before requests, empty ones left out), the generation,
    /// the error only when there is one.
    #[test]
    fn event_message_is_the_kubelets_json_summary() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "generation": 3},
            "spec": {
                "initContainers": [{"name": "side", "image": "i", "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "50m"}}}],
                "containers": [
                    {"name": "a", "image": "i", "resources": {
                        "requests": {"memory": "32Mi", "cpu": "100m"},
                        "limits": {"cpu": "500m"}}},
                    {"name": "b", "image": "i"}
                ]
            }
        }))
        .unwrap();
        let cases = [
            (
                "",
                "Pod resize started",
                r#"Pod resize started: {"initContainers":[{"name":"side","resources":{"requests":{"cpu":"50m"}}}],"containers":[{"name":"a","resources":{"limits":{"cpu":"500m"},"requests":{"cpu":"100m","memory":"32Mi"}}},{"name":"b","resources":{}}],"generation":3}"#,
            ),
            (
                "Node didn't have enough capacity: cpu, requested: 9000, capacity: 2000",
                "Pod resize Infeasible",
                r#"Pod resize Infeasible: {"initContainers":[{"name":"side","resources":{"requests":{"cpu":"50m"}}}],"containers":[{"name":"a","resources":{"limits":{"cpu":"500m"},"requests":{"cpu":"100m","memory":"32Mi"}}},{"name":"b","resources":{}}],"generation":3,"error":"Node didn't have enough capacity: cpu, requested: 9000, capacity: 2000"}"#,
            ),
        ];
        for (error, prefix, want) in cases {
            assert_eq!(event_message(&p, 3, error, prefix), want, "{prefix}");
        }
    }
}
