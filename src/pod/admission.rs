//! Pod admission (cluster mode): before a pod from the API server runs, it must fit the node —
//! the kubelet's `PredicateAdmitHandler`: OS, node selector and required node affinity, host
//! ports, CPU, memory and pod count against what the admitted pods already request. A rejected
//! pod is Failed with the kubelet's reason (`NodeAffinity`, `OutOfcpu`, `OutOfmemory`,
//! `OutOfpods`, `NodePorts`, `PodOSNotSupported`, ...) and never starts.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Pod};

use crate::lifecycle::admission::{AdmitResult, PodAdmitAttributes, PodAdmitHandler, Rejection};
use crate::podspec::resources::pod_resources_with_overhead;
use crate::podspec::{init_containers, regular_containers};

/// What the node offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCapacity {
    pub cpu_milli: i64,
    pub memory: i64,
    pub pods: u32,
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

/// The node's predicates as an admit handler (the kubelet's `PredicateAdmitHandler`), last in
/// the pod manager's list of API pod handlers.
pub struct PredicateAdmitHandler {
    pub node: NodeCapacity,
    pub node_name: String,
}

impl PodAdmitHandler for PredicateAdmitHandler {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> AdmitResult {
        admit(attrs.pod, attrs.other_pods, &self.node, &self.node_name)
    }
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

/// Admits `pod` on a node already running `active` pods (admitted and not terminal).
pub fn admit(pod: &Pod, active: &[&Pod], node: &NodeCapacity, node_name: &str) -> AdmitResult {
    let spec = pod.spec.as_ref();
    if let Some(os) = spec.and_then(|s| s.os.as_ref()) {
        if os.name != "linux" {
            return Err(Rejection::new(
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
        return Err(Rejection::new(
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .to_string(),
        ));
    }
    if !matches_node(pod, &node.labels, node_name) {
        return Err(Rejection::new(
            "NodeAffinity",
            "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
                .to_string(),
        ));
    }
    let wanted_ports = host_ports(pod);
    if !wanted_ports.is_empty() {
        let used: BTreeSet<(String, i32)> = active.iter().flat_map(|p| host_ports(p)).collect();
        if wanted_ports.iter().any(|p| used.contains(p)) {
            return Err(Rejection::new(
                "NodePorts",
                "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
                    .to_string(),
            ));
        }
    }
    let used_pods = u32::try_from(active.len()).unwrap_or(u32::MAX);
    if used_pods + 1 > node.pods {
        return Err(Rejection::new(
            "OutOfpods",
            format!(
                "Node didn't have enough resource: pods, requested: 1, used: {used_pods}, capacity: {}",
                node.pods
            ),
        ));
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
        return Err(Rejection::new(
            "OutOfcpu",
            format!(
                "Node didn't have enough resource: cpu, requested: {}, used: {used_cpu}, capacity: {}",
                wanted.cpu_request_milli, node.cpu_milli
            ),
        ));
    }
    if wanted.memory_request > 0 && used_memory.saturating_add(wanted.memory_request) > node.memory
    {
        return Err(Rejection::new(
            "OutOfmemory",
            format!(
                "Node didn't have enough resource: memory, requested: {}, used: {used_memory}, capacity: {}",
                wanted.memory_request, node.memory
            ),
        ));
    }
    Ok(())
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
    fn messages_are_the_kubelets() {
        let busy = pod(Some("1500m"), None);
        let r = admit(&pod(Some("1"), None), &[&busy], &node(), "n1").unwrap_err();
        assert_eq!(
            r.message,
            "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"
        );
    }
}
