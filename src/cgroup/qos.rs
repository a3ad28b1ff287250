//! Pod QoS classes and the oom_score_adj the kubelet gives each container
//! (`pkg/apis/core/v1/helper/qos` and `pkg/kubelet/qos/policy.go`).

use std::fmt;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::resources::{
    self, container_limits, container_requests, is_sidecar, pod_level_requests_set,
    regular_containers, Amounts,
};

use crate::podspec::annotation;
pub use crate::podspec::is_mirror_pod;
pub use crate::source::CONFIG_SOURCE_ANNOTATION;
/// Priority at and above which a pod is critical (`scheduling.SystemCriticalPriority`).
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
pub const SYSTEM_NODE_CRITICAL: &str = "system-node-critical";

const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;

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
    for c in resources::init_containers(pod)
        .iter()
        .chain(regular_containers(pod))
    {
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

/// `1000 - 1000 * request / capacity`, computed wide so no request can overflow it.
fn linear_adj(memory_request: i64, memory_capacity: i64) -> i64 {
    if memory_capacity <= 0 {
        return BEST_EFFORT_OOM_SCORE_ADJ;
    }
    let adj = 1000 - (1000 * i128::from(memory_request)) / i128::from(memory_capacity);
    i64::try_from(adj).unwrap_or(i64::MIN)
}

/// The pod-level memory request not claimed by any container, shared out equally
/// (`remainingPodMemReqPerContainer`, KEP-2837).
fn remaining_pod_memory_request_per_container(pod: &Pod) -> i64 {
    let pod_memory = resources::pod_level_requests(pod).memory.unwrap_or(0);
    if pod_memory == 0 {
        return 0;
    }
    let count = regular_containers(pod).len() + resources::init_containers(pod).len();
    if count == 0 {
        return 0;
    }
    let claimed = resources::aggregate(pod, container_requests, |_, _| {})
        .memory
        .unwrap_or(0);
    (pod_memory - claimed) / i64::try_from(count).unwrap_or(i64::MAX)
}

/// The oom_score_adj of a container (`GetContainerOOMScoreAdjust`).
///
/// Node-critical pods and Guaranteed pods get -997 so the kernel kills them last; BestEffort
/// gets 1000. Burstable containers score `1000 - 1000 * memoryRequest / capacity`, so one that
/// uses more than it asked for ends up near 1000 and goes first; the result stays in
/// `[3, 999]` so Burstable always ranks between the other two classes. A sidecar never scores
/// above the smallest regular container, so it is not killed before the app it serves.
/// `qos` is the pod's class ([`qos_class`]), which the caller derived once for the pod.
pub fn oom_score_adj(qos: QosClass, pod: &Pod, container: &Container, memory_capacity: u64) -> i64 {
    if is_node_critical_pod(pod) {
        return GUARANTEED_OOM_SCORE_ADJ;
    }
    match qos {
        QosClass::Guaranteed => return GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => return BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {}
    }
    let capacity = i64::try_from(memory_capacity).unwrap_or(i64::MAX);
    let remaining = if pod_level_requests_set(pod) {
        remaining_pod_memory_request_per_container(pod)
    } else {
        0
    };
    let request = container_requests(container).memory.unwrap_or(0);
    let mut adj = linear_adj(request.saturating_add(remaining), capacity);

    let is_init_sidecar = is_sidecar(container)
        && resources::init_containers(pod)
            .iter()
            .any(|c| c.name == container.name);
    if is_init_sidecar {
        if let Some(min_regular) = regular_containers(pod)
            .iter()
            .map(|c| container_requests(c).memory.unwrap_or(0))
            .min()
        {
            adj = adj.min(linear_adj(min_regular.saturating_add(remaining), capacity));
        }
    }

    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ {
        return 1000 + GUARANTEED_OOM_SCORE_ADJ;
    }
    if adj == BEST_EFFORT_OOM_SCORE_ADJ {
        return adj - 1;
    }
    adj
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

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

    const GI: u64 = 1 << 30;

    #[test]
    fn oom_score_adj_table() {
        let cases = [
            (
                "guaranteed",
                container("a", "", "cpu=1,memory=1Gi"),
                10 * GI,
                -997,
            ),
            ("best-effort", container("a", "", ""), 10 * GI, 1000),
            // 1000 - 1000 * 1Gi / 10Gi = 900
            (
                "burstable 10%",
                container("a", "memory=1Gi", ""),
                10 * GI,
                900,
            ),
            // no memory request: 1000 → 999 to stay below best-effort
            (
                "burstable cpu only",
                container("a", "cpu=100m", ""),
                10 * GI,
                999,
            ),
            // request above capacity: floor at 3 to stay above guaranteed
            (
                "burstable huge request",
                container("a", "memory=20Gi", ""),
                10 * GI,
                3,
            ),
            // 1000 - 1000 * 9.98Gi / 10Gi = 2.x → 3
            (
                "burstable near capacity",
                container("a", "memory=10220Mi", ""),
                10 * GI,
                3,
            ),
            (
                "burstable tiny",
                container("a", "memory=1Mi", ""),
                10 * GI,
                999,
            ),
        ];
        for (name, c, capacity, want) in cases {
            let p = pod(vec![c.clone()], vec![]);
            assert_eq!(
                oom_score_adj(qos_class(&p), &p, &c, capacity),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn sidecar_never_scores_above_the_smallest_app_container() {
        let app = container("app", "memory=4Gi", "");
        let small = container("small", "memory=2Gi", "");
        let side = sidecar("side", "memory=100Mi", "");
        let p = pod(vec![app.clone(), small.clone()], vec![side.clone()]);
        assert_eq!(oom_score_adj(qos_class(&p), &p, &small, 10 * GI), 800);
        // sidecar alone would be 991; capped at the smallest regular container's 800
        assert_eq!(oom_score_adj(qos_class(&p), &p, &side, 10 * GI), 800);
        // a plain init container is not capped
        let init = container("init", "memory=100Mi", "");
        let p = pod(vec![app, small], vec![init.clone()]);
        assert_eq!(oom_score_adj(qos_class(&p), &p, &init, 10 * GI), 991);
    }

    #[test]
    fn node_critical_static_pods_are_killed_last() {
        let c = container("a", "", "");
        let mut p = pod(vec![c.clone()], vec![]);
        p.spec.as_mut().unwrap().priority_class_name = Some(SYSTEM_NODE_CRITICAL.into());
        // not critical yet: a best-effort pod from the API server
        assert_eq!(oom_score_adj(qos_class(&p), &p, &c, 10 * GI), 1000);
        p.metadata.annotations = Some(BTreeMap::from([(
            CONFIG_SOURCE_ANNOTATION.to_string(),
            "file".to_string(),
        )]));
        assert_eq!(oom_score_adj(qos_class(&p), &p, &c, 10 * GI), -997);
        // critical by priority but of another class: plain QoS rules
        p.metadata.annotations = None;
        let spec = p.spec.as_mut().unwrap();
        spec.priority = Some(SYSTEM_CRITICAL_PRIORITY);
        spec.priority_class_name = Some("system-cluster-critical".into());
        assert_eq!(oom_score_adj(qos_class(&p), &p, &c, 10 * GI), 1000);
    }

    #[test]
    fn pod_level_memory_request_is_shared_among_containers() {
        let a = container("a", "memory=1Gi", "");
        let b = container("b", "", "");
        let mut p = pod(vec![a.clone(), b.clone()], vec![]);
        p.spec.as_mut().unwrap().resources = Some(ResourceRequirements {
            requests: list("memory=3Gi"),
            ..Default::default()
        });
        // (3Gi - 1Gi) / 2 = 1Gi extra each
        assert_eq!(oom_score_adj(qos_class(&p), &p, &a, 10 * GI), 800);
        assert_eq!(oom_score_adj(qos_class(&p), &p, &b, 10 * GI), 900);
    }
}
