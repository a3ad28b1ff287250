//! Pod admission: before a pod runs (from the API server, or a static pod), it must fit the
//! node — the kubelet's `PredicateAdmitHandler`: OS, then pod count, CPU and memory against what
//! the admitted pods already request, node selector and required node affinity, host ports, and
//! for API pods the node's `NoExecute` taints. A rejected pod is Failed with the kubelet's
//! reason (`OutOfcpu`, `OutOfmemory`, `OutOfpods`, `NodeAffinity`, `NodePorts`,
//! `TaintToleration`, `PodOSNotSupported`, ...) and never starts.
//!
//! A critical pod (static, mirror, or priority ≥ 2000000000) that fails on resources alone is
//! admitted after lower-priority pods are preempted to free them, as the kubelet's
//! `CriticalPodAdmissionHandler`: the fewest pods, BestEffort before Burstable before
//! Guaranteed, each ended Failed with reason `Preempting` and a `DisruptionTarget` condition.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm, Pod, PodCondition, Taint, Toleration,
};
use tokio::sync::watch;

use crate::events::{pod_ref, EventRecorder, EventType};
use crate::lifecycle::admission::{AdmitResult, PodAdmitAttributes, PodAdmitHandler, Rejection};
use crate::lifecycle::kill::PodKiller;
use crate::podspec::qos::{is_critical_pod, is_static_pod, qos_class, QosClass};
use crate::podspec::resources::pod_resources_with_overhead;
use crate::podspec::{init_containers, regular_containers};
use crate::status::StatusMutation;

/// What the node offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCapacity {
    pub cpu_milli: i64,
    pub memory: i64,
    pub pods: u32,
    /// Allocatable hugepages in bytes by page size (`hugepages-<size>` on the Node).
    pub hugepages: BTreeMap<u64, i64>,
    pub labels: BTreeMap<String, String>,
}

fn requirement_matches(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&r.key);
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|b| b.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// A term matches when all its label expressions do (field expressions: only
/// `metadata.name`, against the node name label).
fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, node: &str) -> bool {
    let exprs_ok = term
        .match_expressions
        .iter()
        .flatten()
        .all(|r| requirement_matches(r, labels));
    let fields: BTreeMap<String, String> = [("metadata.name".to_string(), node.to_string())].into();
    let fields_ok = term
        .match_fields
        .iter()
        .flatten()
        .all(|r| requirement_matches(r, &fields));
    exprs_ok && fields_ok
}

/// `nodeSelector` and required node affinity (terms are ORed).
pub fn matches_node(pod: &Pod, labels: &BTreeMap<String, String>, node: &str) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let affinity_ok = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_none_or(|required| {
            required
                .node_selector_terms
                .iter()
                .any(|t| term_matches(t, labels, node))
        });
    selector_ok && affinity_ok
}

/// The node's predicates as an admit handler (the kubelet's `PredicateAdmitHandler` with its
/// `CriticalPodAdmissionHandler`), last in the pod manager's lists of handlers.
pub struct PredicateAdmitHandler {
    pub node: NodeCapacity,
    pub node_name: String,
    /// The node's taints as last read from the API server (its registration taints until
    /// then; none standalone).
    pub taints: watch::Receiver<Vec<Taint>>,
    /// Ends the pods a critical pod preempts.
    pub killer: Arc<dyn PodKiller>,
    /// Where the `Preempting` events go.
    pub events: EventRecorder,
}

/// The status a preempted pod ends with, as the kubelet's preemption writes it.
pub fn preempted_status() -> StatusMutation {
    StatusMutation::failed(PREEMPTING, PREEMPTED_MESSAGE).with_condition(PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        reason: Some("TerminationByKubelet".into()),
        message: Some(PREEMPTED_CONDITION_MESSAGE.into()),
        ..Default::default()
    })
}

/// The kubelet's reason (and event) for a pod preempted for a critical pod.
pub const PREEMPTING: &str = "Preempting";
const PREEMPTED_MESSAGE: &str = "Preempted in order to admit critical pod";
const PREEMPTED_CONDITION_MESSAGE: &str =
    "Pod was preempted by Kubelet to accommodate a critical pod.";

impl PodAdmitHandler for PredicateAdmitHandler {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> AdmitResult {
        let taints = self.taints.borrow().clone();
        match decide(
            attrs.pod,
            attrs.other_pods,
            &self.node,
            &self.node_name,
            &taints,
        ) {
            Verdict::Admit => Ok(()),
            Verdict::Reject(rejection) => Err(rejection),
            Verdict::Preempt(victims) => {
                for victim in victims {
                    let pod = attrs.other_pods[victim];
                    tracing::info!(
                        pod.uid = crate::podspec::pod_uid(pod),
                        pod.name = pod.metadata.name.as_deref().unwrap_or_default(),
                        critical = attrs.pod.metadata.name.as_deref().unwrap_or_default(),
                        "preempting a pod to admit a critical pod"
                    );
                    self.events.record(
                        &pod_ref(pod),
                        EventType::Warning,
                        PREEMPTING,
                        PREEMPTED_MESSAGE.to_string(),
                    );
                    self.killer
                        .kill_pod(Arc::new(pod.clone()), None, preempted_status());
                }
                Ok(())
            }
        }
    }
}

/// What admission decides for a pod: admit it, reject it, or admit it after ending the pods at
/// these indices of the active pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Admit,
    Reject(Rejection),
    Preempt(Vec<usize>),
}

/// One way the pod does not fit (the kubelet's `PredicateFailureReason`s).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    /// `InsufficientResourceError`: `requested` more of `resource` than is free.
    Insufficient {
        resource: String,
        requested: i64,
        used: i64,
        capacity: i64,
    },
    /// `PredicateFailureError`.
    Predicate(Rejection),
}

impl Failure {
    fn rejection(&self) -> Rejection {
        match self {
            Failure::Insufficient {
                resource,
                requested,
                used,
                capacity,
            } => Rejection::new(
                &format!("OutOf{resource}"),
                format!(
                    "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
                ),
            ),
            Failure::Predicate(r) => r.clone(),
        }
    }
}

/// A pod's request of `resource` as preemption counts it (`resource.GetResourceRequest`:
/// overhead included; one for pods).
fn request_of(pod: &Pod, resource: &str) -> i64 {
    let r = pod_resources_with_overhead(pod);
    match resource {
        "pods" => 1,
        "cpu" => r.cpu_request_milli,
        "memory" => r.memory_request,
        // Hugepages have no overhead; requests equal limits (API rule).
        name => crate::podspec::hugepages::page_size_of_resource(name)
            .and_then(|size| {
                crate::podspec::hugepages::pod_hugepages(pod)
                    .get(&size)
                    .copied()
            })
            .unwrap_or(0),
    }
}

/// `hugepages-<size>` as the Node lists it ("2Mi", "1Gi").
fn hugepages_resource_name(size: u64) -> String {
    const UNITS: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let (mut v, mut idx) = (size, 0);
    while v != 0 && v % 1024 == 0 && idx < UNITS.len() - 1 {
        v /= 1024;
        idx += 1;
    }
    format!("hugepages-{v}{}", UNITS[idx])
}

/// What is still missing after `pods` would be gone.
fn remaining(needs: &[(String, i64)], pods: &[&Pod]) -> Vec<(String, i64)> {
    needs
        .iter()
        .filter_map(|(resource, quantity)| {
            let quantity = *quantity;
            let left = pods
                .iter()
                .fold(quantity, |q, p| q.saturating_sub(request_of(p, resource)));
            (left > 0).then(|| (resource.clone(), left))
        })
        .collect()
}

/// How far a pod's requests are from covering `needs`: the squared share of each need it
/// leaves, summed (0 covers all).
fn distance(needs: &[(String, i64)], pod: &Pod) -> f64 {
    needs
        .iter()
        .map(|(resource, quantity)| {
            let quantity = *quantity;
            let left = quantity.saturating_sub(request_of(pod, resource)).max(0);
            (left as f64 / quantity as f64).powi(2)
        })
        .sum()
}

/// The kubelet's tie-break: memory request first, then CPU; equal counts as smaller.
fn smaller_request(a: &Pod, b: &Pod) -> bool {
    for resource in ["memory", "cpu"] {
        let (x, y) = (request_of(a, resource), request_of(b, resource));
        if x != y {
            return x < y;
        }
    }
    true
}

/// `getPodsToPreemptByDistance`: from `candidates` (indices into `pods`), repeatedly the pod
/// closest to what is still needed.
fn preempt_by_distance(
    pods: &[&Pod],
    mut candidates: Vec<usize>,
    mut needs: Vec<(String, i64)>,
) -> Option<Vec<usize>> {
    let mut chosen = Vec::new();
    while !needs.is_empty() {
        if candidates.is_empty() {
            return None;
        }
        let mut best = 0;
        let mut best_distance = needs.len() as f64 + 1.0;
        for (i, &c) in candidates.iter().enumerate() {
            let d = distance(&needs, pods[c]);
            if d < best_distance
                || (d == best_distance && smaller_request(pods[c], pods[candidates[best]]))
            {
                best_distance = d;
                best = i;
            }
        }
        let c = candidates.swap_remove(best);
        needs = remaining(&needs, &[pods[c]]);
        chosen.push(c);
    }
    Some(chosen)
}

/// `kubetypes.Preemptable`: a critical pod preempts any non-critical one; otherwise only a
/// higher priority preempts a lower one.
fn preemptable(preemptor: &Pod, preemptee: &Pod) -> bool {
    if is_critical_pod(preemptor) && !is_critical_pod(preemptee) {
        return true;
    }
    let priority = |p: &Pod| p.spec.as_ref().and_then(|s| s.priority);
    matches!((priority(preemptor), priority(preemptee)), (Some(a), Some(b)) if a > b)
}

/// The kubelet's `getPodsToPreempt`: which of `active` to end so that `needs` (resource,
/// amount short) are freed — Guaranteed pods only as far as every BestEffort and Burstable
/// pod would not do, then Burstable as far as BestEffort and those would not, then BestEffort;
/// within a class the fewest pods. The error is the kubelet's.
pub fn pods_to_preempt(
    preemptor: &Pod,
    active: &[&Pod],
    needs: &[(String, i64)],
) -> Result<Vec<usize>, String> {
    let mut by_class: BTreeMap<u8, Vec<usize>> = BTreeMap::new();
    for (i, p) in active.iter().enumerate() {
        if preemptable(preemptor, p) {
            let rank = match qos_class(p) {
                QosClass::BestEffort => 0,
                QosClass::Burstable => 1,
                QosClass::Guaranteed => 2,
            };
            by_class.entry(rank).or_default().push(i);
        }
    }
    let class = |rank: u8| by_class.get(&rank).cloned().unwrap_or_default();
    let (best_effort, burstable, guaranteed) = (class(0), class(1), class(2));
    let pods_of = |indices: &[usize]| indices.iter().map(|&i| active[i]).collect::<Vec<_>>();
    let no_set = |needs: &[(String, i64)]| {
        let list: String = needs
            .iter()
            .map(|(r, q)| format!("(res: {r}, q: {q}), "))
            .collect();
        format!("no set of running pods found to reclaim resources: [{list}]")
    };
    let all: Vec<usize> = best_effort
        .iter()
        .chain(&burstable)
        .chain(&guaranteed)
        .copied()
        .collect();
    let unmet = remaining(needs, &pods_of(&all));
    if !unmet.is_empty() {
        return Err(no_set(&unmet));
    }
    let lower: Vec<usize> = best_effort.iter().chain(&burstable).copied().collect();
    let guaranteed_out =
        preempt_by_distance(active, guaranteed, remaining(needs, &pods_of(&lower)))
            .ok_or_else(|| no_set(needs))?;
    let not_burstable: Vec<usize> = best_effort.iter().chain(&guaranteed_out).copied().collect();
    let burstable_out = preempt_by_distance(
        active,
        burstable,
        remaining(needs, &pods_of(&not_burstable)),
    )
    .ok_or_else(|| no_set(needs))?;
    let chosen: Vec<usize> = burstable_out
        .iter()
        .chain(&guaranteed_out)
        .copied()
        .collect();
    let best_effort_out =
        preempt_by_distance(active, best_effort, remaining(needs, &pods_of(&chosen)))
            .ok_or_else(|| no_set(needs))?;
    Ok(best_effort_out
        .into_iter()
        .chain(burstable_out)
        .chain(guaranteed_out)
        .collect())
}

/// `v1helper.ToleratesTaint`: the toleration matches the taint's key (or is a wildcard with
/// `Exists`), its effect (or all effects) and its value.
fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if toleration
        .effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

/// The first `NoExecute` taint none of the pod's tolerations tolerates.
fn untolerated_no_execute<'t>(pod: &Pod, taints: &'t [Taint]) -> Option<&'t Taint> {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    taints
        .iter()
        .filter(|t| t.effect == "NoExecute")
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

fn host_ports(pod: &Pod) -> BTreeSet<(String, i32)> {
    regular_containers(pod)
        .iter()
        .chain(init_containers(pod))
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            p.host_port
                .filter(|hp| *hp > 0)
                .map(|hp| (p.protocol.clone().unwrap_or_else(|| "TCP".to_string()), hp))
        })
        .collect()
}

/// Admits `pod` on a node already running `active` pods (admitted and not terminal), without
/// preemption: the first reason it does not fit, in the kubelet's order.
pub fn admit(pod: &Pod, active: &[&Pod], node: &NodeCapacity, node_name: &str) -> AdmitResult {
    if let Some(rejection) = os_rejection(pod) {
        return Err(rejection);
    }
    match failures(pod, active, node, node_name, &[]).first() {
        None => Ok(()),
        Some(f) => Err(f.rejection()),
    }
}

/// The whole decision (the kubelet's `PredicateAdmitHandler.Admit` with the critical-pod
/// failure handler): a critical pod short of resources alone preempts pods; anything else
/// that does not fit is rejected with its first reason; a preemption that cannot free enough
/// is the kubelet's `UnexpectedAdmissionError`.
pub fn decide(
    pod: &Pod,
    active: &[&Pod],
    node: &NodeCapacity,
    node_name: &str,
    taints: &[Taint],
) -> Verdict {
    if let Some(rejection) = os_rejection(pod) {
        return Verdict::Reject(rejection);
    }
    let failures = failures(pod, active, node, node_name, taints);
    let Some(first) = failures.first() else {
        return Verdict::Admit;
    };
    let needs: Option<Vec<(String, i64)>> = failures
        .iter()
        .map(|f| match f {
            Failure::Insufficient {
                resource,
                requested,
                used,
                capacity,
            } => Some((
                resource.clone(),
                requested.saturating_sub(capacity.saturating_sub(*used)),
            )),
            Failure::Predicate(_) => None,
        })
        .collect();
    match (is_critical_pod(pod), needs) {
        (true, Some(needs)) => match pods_to_preempt(pod, active, &needs) {
            Ok(victims) => Verdict::Preempt(victims),
            Err(e) => Verdict::Reject(Rejection::new(
                "UnexpectedAdmissionError",
                format!(
                    "Unexpected error while attempting to recover from admission failure: preemption: error finding a set of pods to preempt: {e}"
                ),
            )),
        },
        (true, None) => {
            // A critical pod is rejected only for what preemption cannot help with.
            let other = failures
                .iter()
                .find(|f| matches!(f, Failure::Predicate(_)))
                .unwrap_or(first);
            Verdict::Reject(other.rejection())
        }
        (false, _) => Verdict::Reject(first.rejection()),
    }
}

/// The OS checks the kubelet makes before its predicates.
fn os_rejection(pod: &Pod) -> Option<Rejection> {
    let spec = pod.spec.as_ref();
    if let Some(os) = spec.and_then(|s| s.os.as_ref()) {
        if os.name != "linux" {
            return Some(Rejection::new(
                "PodOSNotSupported",
                "Failed to admit pod as the OS field doesn't match node OS".to_string(),
            ));
        }
    }
    if spec
        .and_then(|s| s.node_selector.as_ref())
        .and_then(|s| s.get("kubernetes.io/os"))
        .is_some_and(|os| os != "linux")
    {
        return Some(Rejection::new(
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .to_string(),
        ));
    }
    None
}

/// Every reason the pod does not fit, in the kubelet's order (`AdmissionCheck`: resources —
/// pods, CPU, memory —, node affinity, host ports; then the `NoExecute` taints, which static
/// pods skip).
fn failures(
    pod: &Pod,
    active: &[&Pod],
    node: &NodeCapacity,
    node_name: &str,
    taints: &[Taint],
) -> Vec<Failure> {
    let mut failures = Vec::new();
    let used_pods = i64::try_from(active.len()).unwrap_or(i64::MAX);
    if used_pods.saturating_add(1) > i64::from(node.pods) {
        failures.push(Failure::Insufficient {
            resource: "pods".into(),
            requested: 1,
            used: used_pods,
            capacity: i64::from(node.pods),
        });
    }
    let wanted = pod_resources_with_overhead(pod);
    // Saturating: requests and overhead come from pod specs, and a sum that wrapped would fit.
    let used_cpu: i64 = active
        .iter()
        .map(|p| pod_resources_with_overhead(p).cpu_request_milli)
        .fold(0, i64::saturating_add);
    let used_memory: i64 = active
        .iter()
        .map(|p| pod_resources_with_overhead(p).memory_request)
        .fold(0, i64::saturating_add);
    if wanted.cpu_request_milli > 0
        && used_cpu.saturating_add(wanted.cpu_request_milli) > node.cpu_milli
    {
        failures.push(Failure::Insufficient {
            resource: "cpu".into(),
            requested: wanted.cpu_request_milli,
            used: used_cpu,
            capacity: node.cpu_milli,
        });
    }
    if wanted.memory_request > 0 && used_memory.saturating_add(wanted.memory_request) > node.memory
    {
        failures.push(Failure::Insufficient {
            resource: "memory".into(),
            requested: wanted.memory_request,
            used: used_memory,
            capacity: node.memory,
        });
    }
    // Hugepages as the scheduler's `fitsRequest` counts scalar resources: every size the pod
    // requests against the node's allocatable less what the active pods request; a size the
    // node lacks has none.
    let wanted_hugepages = crate::podspec::hugepages::pod_hugepages(pod);
    for (size, requested) in wanted_hugepages.iter().filter(|(_, v)| **v > 0) {
        let used = active
            .iter()
            .map(|p| {
                crate::podspec::hugepages::pod_hugepages(p)
                    .get(size)
                    .copied()
                    .unwrap_or(0)
            })
            .fold(0, i64::saturating_add);
        let capacity = node.hugepages.get(size).copied().unwrap_or(0);
        if used.saturating_add(*requested) > capacity {
            failures.push(Failure::Insufficient {
                resource: hugepages_resource_name(*size),
                requested: *requested,
                used,
                capacity,
            });
        }
    }
    if !matches_node(pod, &node.labels, node_name) {
        failures.push(Failure::Predicate(Rejection::new(
            "NodeAffinity",
            "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
                .to_string(),
        )));
    }
    let wanted_ports = host_ports(pod);
    if !wanted_ports.is_empty() {
        let used: BTreeSet<(String, i32)> = active.iter().flat_map(|p| host_ports(p)).collect();
        if wanted_ports.iter().any(|p| used.contains(p)) {
            failures.push(Failure::Predicate(Rejection::new(
                "NodePorts",
                "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
                    .to_string(),
            )));
        }
    }
    if !is_static_pod(pod) && untolerated_no_execute(pod, taints).is_some() {
        failures.push(Failure::Predicate(Rejection::new(
            "TaintToleration",
            "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
                .to_string(),
        )));
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Affinity, Container, ContainerPort, NodeAffinity, NodeSelector, PodOS, PodSpec,
        ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn node() -> NodeCapacity {
        NodeCapacity {
            cpu_milli: 2000,
            memory: 4 << 30,
            pods: 3,
            hugepages: [(2 << 20, 8 << 20)].into(),
            labels: [
                ("kubernetes.io/hostname".to_string(), "n1".to_string()),
                ("kubernetes.io/os".to_string(), "linux".to_string()),
                ("zone".to_string(), "a".to_string()),
                ("rank".to_string(), "5".to_string()),
            ]
            .into(),
        }
    }

    fn pod(cpu: Option<&str>, memory: Option<&str>) -> Pod {
        let mut requests = BTreeMap::new();
        if let Some(c) = cpu {
            requests.insert("cpu".to_string(), Quantity(c.into()));
        }
        if let Some(m) = memory {
            requests.insert("memory".to_string(), Quantity(m.into()));
        }
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(requests),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn with(mut p: Pod, f: impl FnOnce(&mut PodSpec)) -> Pod {
        f(p.spec.as_mut().unwrap());
        p
    }

    fn affinity(key: &str, op: &str, values: &[&str]) -> Option<Affinity> {
        Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: key.into(),
                            operator: op.into(),
                            values: Some(values.iter().map(|v| v.to_string()).collect()),
                        }]),
                        ..Default::default()
                    }],
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn table() {
        let busy = pod(Some("1500m"), Some("3Gi"));
        let port = |p: Pod| {
            with(p, |s| {
                s.containers[0].ports = Some(vec![ContainerPort {
                    container_port: 80,
                    host_port: Some(8080),
                    ..Default::default()
                }])
            })
        };
        type Case = (&'static str, Pod, Vec<Pod>, Option<&'static str>);
        let cases: Vec<Case> = vec![
            (
                "fits",
                pod(Some("500m"), Some("1Gi")),
                vec![busy.clone()],
                None,
            ),
            (
                "best effort always fits on cpu",
                pod(None, None),
                vec![busy.clone()],
                None,
            ),
            (
                "too much cpu",
                pod(Some("600m"), None),
                vec![busy.clone()],
                Some("OutOfcpu"),
            ),
            (
                "too much memory",
                pod(None, Some("2Gi")),
                vec![busy.clone()],
                Some("OutOfmemory"),
            ),
            (
                // 400m fits beside 1500m of 2000m; its RuntimeClass's overhead does not.
                "overhead counts in the fit",
                with(pod(Some("400m"), None), |s| {
                    s.overhead = Some([("cpu".to_string(), Quantity("200m".into()))].into())
                }),
                vec![busy.clone()],
                Some("OutOfcpu"),
            ),
            (
                "overhead of the pods already there counts too",
                pod(Some("400m"), None),
                vec![with(busy.clone(), |s| {
                    s.overhead = Some([("cpu".to_string(), Quantity("200m".into()))].into())
                })],
                Some("OutOfcpu"),
            ),
            (
                // Huge values do not wrap around into a fit.
                "an absurd overhead beside an absurd pod is still too much",
                with(pod(None, None), |s| {
                    s.overhead = Some(
                        [("memory".to_string(), Quantity("9223372036854775807".into()))].into(),
                    )
                }),
                vec![pod(None, Some("9223372036854775807"))],
                Some("OutOfmemory"),
            ),
            (
                "pod count",
                pod(None, None),
                vec![pod(None, None), pod(None, None), pod(None, None)],
                Some("OutOfpods"),
            ),
            (
                "selector matches",
                with(pod(None, None), |s| {
                    s.node_selector = Some([("zone".to_string(), "a".to_string())].into())
                }),
                vec![],
                None,
            ),
            (
                "selector mismatch",
                with(pod(None, None), |s| {
                    s.node_selector = Some([("zone".to_string(), "b".to_string())].into())
                }),
                vec![],
                Some("NodeAffinity"),
            ),
            (
                "affinity In",
                with(pod(None, None), |s| {
                    s.affinity = affinity("zone", "In", &["a", "b"])
                }),
                vec![],
                None,
            ),
            (
                "affinity NotIn",
                with(pod(None, None), |s| {
                    s.affinity = affinity("zone", "NotIn", &["a"])
                }),
                vec![],
                Some("NodeAffinity"),
            ),
            (
                "affinity Gt",
                with(pod(None, None), |s| {
                    s.affinity = affinity("rank", "Gt", &["3"])
                }),
                vec![],
                None,
            ),
            (
                "affinity DoesNotExist",
                with(pod(None, None), |s| {
                    s.affinity = affinity("gpu", "DoesNotExist", &[])
                }),
                vec![],
                None,
            ),
            (
                "os windows",
                with(pod(None, None), |s| {
                    s.os = Some(PodOS {
                        name: "windows".into(),
                    })
                }),
                vec![],
                Some("PodOSNotSupported"),
            ),
            (
                "os selector",
                with(pod(None, None), |s| {
                    s.node_selector =
                        Some([("kubernetes.io/os".to_string(), "windows".to_string())].into())
                }),
                vec![],
                Some("PodOSSelectorNodeLabelDoesNotMatch"),
            ),
            (
                "host port taken",
                port(pod(None, None)),
                vec![port(pod(None, None))],
                Some("NodePorts"),
            ),
            (
                "host port free",
                port(pod(None, None)),
                vec![pod(None, None)],
                None,
            ),
        ];
        for (name, p, active, want) in cases {
            let refs: Vec<&Pod> = active.iter().collect();
            let got = admit(&p, &refs, &node(), "n1").err().map(|r| r.reason);
            assert_eq!(got.as_deref(), want, "case: {name}");
        }
    }

    #[test]
    fn hugepages_are_admitted_against_the_nodes_allocatable() {
        let huge = |size: &str, v: &str| {
            with(pod(None, Some("64Mi")), |s| {
                let r = s.containers[0].resources.as_mut().unwrap();
                for list in [&mut r.requests, &mut r.limits] {
                    list.get_or_insert_with(Default::default)
                        .insert(format!("hugepages-{size}"), Quantity(v.into()));
                }
            })
        };
        // The node has 8Mi of 2Mi pages and no 1Gi pages.
        let cases: Vec<(&str, Pod, Vec<Pod>, Option<&str>)> = vec![
            ("fits", huge("2Mi", "8Mi"), vec![], None),
            (
                "above allocatable",
                huge("2Mi", "10Mi"),
                vec![],
                Some("OutOfhugepages-2Mi"),
            ),
            (
                "the active pods hold some",
                huge("2Mi", "6Mi"),
                vec![huge("2Mi", "4Mi")],
                Some("OutOfhugepages-2Mi"),
            ),
            (
                "a size the node lacks",
                huge("1Gi", "1Gi"),
                vec![],
                Some("OutOfhugepages-1Gi"),
            ),
            (
                "none asked",
                pod(None, Some("64Mi")),
                vec![huge("2Mi", "8Mi")],
                None,
            ),
        ];
        for (name, p, active, want) in cases {
            let refs: Vec<&Pod> = active.iter().collect();
            let got = admit(&p, &refs, &node(), "n1").err().map(|r| r.reason);
            assert_eq!(got.as_deref(), want, "case: {name}");
        }
        let r = admit(&huge("2Mi", "10Mi"), &[], &node(), "n1").unwrap_err();
        assert_eq!(
            r.message,
            "Node didn't have enough resource: hugepages-2Mi, requested: 10485760, used: 0, capacity: 8388608"
        );
        // A critical pod short of hugepages preempts the pod that holds them.
        let holder = huge("2Mi", "8Mi");
        assert_eq!(
            decide(
                &critical(huge("2Mi", "4Mi")),
                &[&holder],
                &node(),
                "n1",
                &[]
            ),
            Verdict::Preempt(vec![0])
        );
    }

    #[test]
    fn messages_are_the_kubelets() {
        let busy = pod(Some("1500m"), None);
        let r = admit(&pod(Some("1"), None), &[&busy], &node(), "n1").unwrap_err();
        assert_eq!(
            r.message,
            "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"
        );
    }
    fn critical(p: Pod) -> Pod {
        with(p, |s| s.priority = Some(2_000_000_000))
    }

    fn named(mut p: Pod, name: &str) -> Pod {
        p.metadata.name = Some(name.into());
        p
    }

    fn guaranteed(cpu: &str, memory: &str) -> Pod {
        let mut p = pod(Some(cpu), Some(memory));
        let requests = p.spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .unwrap()
            .requests
            .clone();
        p.spec.as_mut().unwrap().containers[0]
            .resources
            .as_mut()
            .unwrap()
            .limits = requests;
        p
    }

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: effect.into(),
            ..Default::default()
        }
    }

    fn toleration(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        Toleration {
            key: (!key.is_empty()).then(|| key.into()),
            operator: Some(op.into()),
            value: (!value.is_empty()).then(|| value.into()),
            effect: (!effect.is_empty()).then(|| effect.into()),
            ..Default::default()
        }
    }

    #[test]
    fn no_execute_taints_table() {
        let taints = vec![
            taint("dedicated", "db", "NoExecute"),
            taint("soft", "x", "NoSchedule"),
        ];
        let tolerating = |t: Vec<Toleration>| with(pod(None, None), |s| s.tolerations = Some(t));
        let static_pod = {
            let mut p = pod(None, None);
            p.metadata.annotations = Some(
                [(
                    "kubernetes.io/config.source".to_string(),
                    "file".to_string(),
                )]
                .into(),
            );
            p
        };
        let cases: Vec<(&str, Pod, bool)> = vec![
            ("no toleration", pod(None, None), false),
            (
                "Equal with the value",
                tolerating(vec![toleration("dedicated", "Equal", "db", "NoExecute")]),
                true,
            ),
            (
                "Equal, another value",
                tolerating(vec![toleration("dedicated", "Equal", "web", "NoExecute")]),
                false,
            ),
            (
                "Exists on the key, every effect",
                tolerating(vec![toleration("dedicated", "Exists", "", "")]),
                true,
            ),
            (
                "the wrong effect",
                tolerating(vec![toleration("dedicated", "Exists", "", "NoSchedule")]),
                false,
            ),
            (
                "Exists without a key tolerates everything",
                tolerating(vec![toleration("", "Exists", "", "")]),
                true,
            ),
            (
                "only the NoSchedule taint tolerated",
                tolerating(vec![toleration("soft", "Exists", "", "")]),
                false,
            ),
            ("static pods are not checked", static_pod, true),
        ];
        for (name, p, admitted) in cases {
            let verdict = decide(&p, &[], &node(), "n1", &taints);
            let want = if admitted {
                Verdict::Admit
            } else {
                Verdict::Reject(Rejection::new(
                    "TaintToleration",
                    "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
                        .into(),
                ))
            };
            assert_eq!(verdict, want, "case: {name}");
        }
    }

    #[test]
    fn critical_pods_preempt_and_others_are_rejected() {
        let full = [
            named(pod(Some("1500m"), None), "burstable"),
            named(pod(None, None), "best-effort"),
        ];
        let refs: Vec<&Pod> = full.iter().collect();
        let wants_cpu = pod(Some("1"), None);
        let cases: Vec<(&str, Pod, Verdict)> = vec![
            (
                "an ordinary pod is rejected",
                wants_cpu.clone(),
                Verdict::Reject(Rejection::new(
                    "OutOfcpu",
                    "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"
                        .into(),
                )),
            ),
            (
                "a critical pod preempts the pod whose CPU frees enough",
                critical(wants_cpu.clone()),
                Verdict::Preempt(vec![0]),
            ),
            (
                "a critical pod failing affinity too is rejected for the affinity",
                critical(with(wants_cpu.clone(), |s| {
                    s.node_selector = Some([("zone".to_string(), "b".to_string())].into())
                })),
                Verdict::Reject(Rejection::new(
                    "NodeAffinity",
                    "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
                        .into(),
                )),
            ),
            (
                "more than every preemptable pod frees",
                critical(pod(Some("2500m"), None)),
                Verdict::Reject(Rejection::new(
                    "UnexpectedAdmissionError",
                    "Unexpected error while attempting to recover from admission failure: preemption: error finding a set of pods to preempt: no set of running pods found to reclaim resources: [(res: cpu, q: 500), ]"
                        .into(),
                )),
            ),
        ];
        for (name, p, want) in cases {
            assert_eq!(decide(&p, &refs, &node(), "n1", &[]), want, "case: {name}");
        }
    }

    #[test]
    fn pods_to_preempt_table() {
        let mi = |n: i64| n << 20;
        let be = || pod(None, None);
        type Case = (
            &'static str,
            Vec<Pod>,
            Vec<(&'static str, i64)>,
            Result<Vec<usize>, String>,
        );
        let cases: Vec<Case> = vec![
            (
                "the one burstable pod that covers it, not the smaller one",
                vec![
                    be(),
                    pod(Some("300m"), None),
                    pod(Some("600m"), None),
                    guaranteed("1", "1Gi"),
                ],
                vec![("cpu", 500)],
                Ok(vec![2]),
            ),
            (
                "a pod slot: a BestEffort pod before any other",
                vec![guaranteed("1", "1Gi"), pod(Some("100m"), None), be()],
                vec![("pods", 1)],
                Ok(vec![2]),
            ),
            (
                "guaranteed pods only for what the others cannot free",
                vec![pod(None, Some("100Mi")), guaranteed("100m", "400Mi")],
                vec![("memory", mi(300))],
                Ok(vec![1]),
            ),
            (
                // Equal requests tie; the kubelet's tie-break takes the later pod first.
                "two burstable pods when one is not enough",
                vec![pod(None, Some("200Mi")), pod(None, Some("200Mi"))],
                vec![("memory", mi(300))],
                Ok(vec![1, 0]),
            ),
            (
                "equal distance: the smaller memory request goes",
                vec![pod(Some("1"), Some("500Mi")), pod(Some("1"), Some("100Mi"))],
                vec![("cpu", 500)],
                Ok(vec![1]),
            ),
            (
                "critical pods are never preempted",
                vec![critical(pod(Some("2"), None))],
                vec![("cpu", 500)],
                Err(
                    "no set of running pods found to reclaim resources: [(res: cpu, q: 500), ]"
                        .into(),
                ),
            ),
        ];
        let preemptor = critical(pod(None, None));
        for (name, active, needs, want) in cases {
            let needs: Vec<(String, i64)> =
                needs.into_iter().map(|(r, q)| (r.to_string(), q)).collect();
            let refs: Vec<&Pod> = active.iter().collect();
            assert_eq!(
                pods_to_preempt(&preemptor, &refs, &needs),
                want,
                "case: {name}"
            );
        }
    }

    /// Records what the handler ends.
    #[derive(Default)]
    struct Killed(std::sync::Mutex<Vec<(String, StatusMutation)>>);

    impl PodKiller for Killed {
        fn kill_pod(
            &self,
            pod: Arc<Pod>,
            _grace: Option<std::time::Duration>,
            status: StatusMutation,
        ) -> crate::lifecycle::kill::KillHandle {
            self.0
                .lock()
                .unwrap()
                .push((pod.metadata.name.clone().unwrap_or_default(), status));
            crate::lifecycle::kill::KillHandle::new(watch::channel(true).1)
        }
    }

    #[test]
    fn the_handler_ends_the_preempted_pods_with_the_kubelets_status_and_event() {
        let killed = Arc::new(Killed::default());
        let clock = crate::clock::Clock::starting_at("2026-01-01T00:00:00Z".parse().unwrap());
        let events = EventRecorder::new(clock, "kubelet", "n1");
        let handler = PredicateAdmitHandler {
            node: node(),
            node_name: "n1".into(),
            taints: watch::channel(Vec::new()).1,
            killer: killed.clone(),
            events: events.clone(),
        };
        let low = named(pod(Some("1500m"), None), "low");
        let critical_pod = critical(named(pod(Some("1"), None), "critical"));
        let others = [&low];
        let verdict = handler.admit(&PodAdmitAttributes {
            pod: &critical_pod,
            other_pods: &others,
        });
        assert_eq!(verdict, Ok(()));
        let killed = killed.0.lock().unwrap().clone();
        assert_eq!(killed, vec![("low".to_string(), preempted_status())]);
        let mut status = Default::default();
        preempted_status().apply(&mut status);
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        assert_eq!(status.reason.as_deref(), Some("Preempting"));
        assert_eq!(
            status.message.as_deref(),
            Some("Preempted in order to admit critical pod")
        );
        let condition = &status.conditions.unwrap()[0];
        assert_eq!(
            (condition.type_.as_str(), condition.reason.as_deref()),
            ("DisruptionTarget", Some("TerminationByKubelet"))
        );
        let recorded = events.events();
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].reason.as_deref(), Some("Preempting"));
        assert_eq!(recorded[0].type_.as_deref(), Some("Warning"));
        assert_eq!(recorded[0].involved_object.name.as_deref(), Some("low"));
    }
}
