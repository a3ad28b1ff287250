//! Pod QoS classes (`pkg/apis/core/v1/helper/qos`) and which pods are static or critical
//! (`kubetypes.IsStaticPod`, `IsCriticalPod`, `IsNodeCriticalPod`).

use std::fmt;

use k8s_openapi::api::core::v1::Pod;

use super::resources::{self, container_limits, container_requests, Amounts};
use super::{
    annotation, init_containers, is_mirror_pod, regular_containers, CONFIG_SOURCE_ANNOTATION,
};

/// Priority at and above which a pod is critical (`scheduling.SystemCriticalPriority`).
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
pub const SYSTEM_NODE_CRITICAL: &str = "system-node-critical";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    /// The API's spelling (`status.qosClass`).
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

impl fmt::Display for QosClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// QoS of one set of requests and limits (`resourceQOS`): BestEffort when cpu and memory are
/// all unset or zero, Guaranteed when both are set and every request equals its limit, else
/// Burstable. Only cpu and memory count; other resources never change the class.
fn resource_qos(requests: Amounts, limits: Amounts) -> QosClass {
    let pairs = [
        (
            requests.cpu_milli.unwrap_or(0),
            limits.cpu_milli.unwrap_or(0),
        ),
        (requests.memory.unwrap_or(0), limits.memory.unwrap_or(0)),
    ];
    let mut class = None;
    for (req, lim) in pairs {
        if req != lim {
            return QosClass::Burstable;
        }
        let this = if req == 0 {
            QosClass::BestEffort
        } else {
            QosClass::Guaranteed
        };
        match class {
            None => class = Some(this),
            Some(c) if c != this => return QosClass::Burstable,
            Some(_) => {}
        }
    }
    class.unwrap_or(QosClass::BestEffort)
}

/// The pod's QoS class (`ComputePodQOS`). Pod-level resources, when set, decide alone;
/// otherwise every init and regular container must agree on Guaranteed or BestEffort, and any
/// disagreement makes the pod Burstable. Requests default to limits as API defaulting does.
pub fn qos_class(pod: &Pod) -> QosClass {
    if pod.spec.as_ref().is_some_and(|s| s.resources.is_some()) {
        return resource_qos(
            resources::pod_level_requests(pod),
            resources::pod_level_limits(pod),
        );
    }
    let mut class = None;
    for c in init_containers(pod).iter().chain(regular_containers(pod)) {
        let this = resource_qos(container_requests(c), container_limits(c));
        match (class, this) {
            (_, QosClass::Burstable) => return QosClass::Burstable,
            (None, this) => class = Some(this),
            (Some(prev), this) if prev != this => return QosClass::Burstable,
            _ => {}
        }
    }
    class.unwrap_or(QosClass::BestEffort)
}

/// A static pod: read from a file or URL rather than the API server (`kubetypes.IsStaticPod`).
pub fn is_static_pod(pod: &Pod) -> bool {
    annotation(pod, CONFIG_SOURCE_ANNOTATION).is_some_and(|s| s != "api")
}

/// `kubetypes.IsCriticalPod`: static and mirror pods, and pods at system-critical priority.
pub fn is_critical_pod(pod: &Pod) -> bool {
    is_static_pod(pod)
        || is_mirror_pod(pod)
        || pod
            .spec
            .as_ref()
            .and_then(|s| s.priority)
            .is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
}

/// `kubetypes.IsNodeCriticalPod`: a critical pod of priority class `system-node-critical`.
pub fn is_node_critical_pod(pod: &Pod) -> bool {
    is_critical_pod(pod)
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref())
            == Some(SYSTEM_NODE_CRITICAL)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ResourceRequirements;

    use super::super::resources::test_support::{container, list, pod, sidecar};
    use super::*;

    #[test]
    fn qos_class_table_from_the_seed() {
        let cases = [
            // every container sets equal cpu and memory requests and limits
            (
                "guaranteed: limits equal requests",
                vec![container(
                    "a",
                    "cpu=700m,memory=200Mi",
                    "cpu=700m,memory=200Mi",
                )],
                vec![],
                QosClass::Guaranteed,
            ),
            (
                "guaranteed: only limits (requests default to them)",
                vec![container("a", "", "cpu=1,memory=1Gi")],
                vec![],
                QosClass::Guaranteed,
            ),
            (
                "burstable: memory request below limit",
                vec![container("a", "memory=100Mi", "memory=200Mi")],
                vec![],
                QosClass::Burstable,
            ),
            (
                "burstable: only a cpu request",
                vec![container("a", "cpu=100m", "")],
                vec![],
                QosClass::Burstable,
            ),
            (
                "burstable: memory guaranteed, cpu missing",
                vec![container("a", "memory=1Gi", "memory=1Gi")],
                vec![],
                QosClass::Burstable,
            ),
            (
                "burstable: one guaranteed, one best-effort container",
                vec![
                    container("a", "", "cpu=1,memory=1Gi"),
                    container("b", "", ""),
                ],
                vec![],
                QosClass::Burstable,
            ),
            (
                "best-effort: nothing set",
                vec![container("a", "", ""), container("b", "", "")],
                vec![],
                QosClass::BestEffort,
            ),
            (
                "best-effort: other resources do not count",
                vec![container(
                    "a",
                    "ephemeral-storage=1Gi",
                    "ephemeral-storage=1Gi",
                )],
                vec![],
                QosClass::BestEffort,
            ),
            (
                "burstable: init container sets a request",
                vec![container("a", "", "")],
                vec![container("i", "cpu=100m", "")],
                QosClass::Burstable,
            ),
            (
                "guaranteed: init and app containers all guaranteed",
                vec![container("a", "", "cpu=1,memory=1Gi")],
                vec![sidecar("s", "", "cpu=100m,memory=10Mi")],
                QosClass::Guaranteed,
            ),
            (
                "burstable: zero limit is unset",
                vec![container("a", "cpu=0,memory=0", "cpu=1,memory=0")],
                vec![],
                QosClass::Burstable,
            ),
        ];
        for (name, regular, init, want) in cases {
            assert_eq!(qos_class(&pod(regular, init)), want, "{name}");
        }
    }

    #[test]
    fn pod_level_resources_decide_qos_alone() {
        let cases = [
            ("cpu=1,memory=1Gi", "cpu=1,memory=1Gi", QosClass::Guaranteed),
            ("cpu=1,memory=1Gi", "cpu=2,memory=1Gi", QosClass::Burstable),
            ("cpu=500m", "", QosClass::Burstable),
        ];
        for (requests, limits, want) in cases {
            let mut p = pod(vec![container("a", "", "")], vec![]);
            p.spec.as_mut().unwrap().resources = Some(ResourceRequirements {
                requests: list(requests),
                limits: list(limits),
                ..Default::default()
            });
            assert_eq!(qos_class(&p), want, "{requests} / {limits}");
        }
    }

    #[test]
    fn display_spells_the_api_values() {
        assert_eq!(QosClass::Guaranteed.to_string(), "Guaranteed");
        assert_eq!(QosClass::Burstable.as_str(), "Burstable");
        assert_eq!(QosClass::BestEffort.to_string(), "BestEffort");
    }
}
