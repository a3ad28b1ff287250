//! The oom_score_adj the kubelet gives each container (`pkg/kubelet/qos/policy.go`): the
//! value nodelet writes for the kernel's OOM killer, from the pod's QoS class and requests.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::podspec::qos::{is_node_critical_pod, QosClass};
use crate::podspec::resources::{self, container_requests, pod_level_requests_set};
use crate::podspec::{init_containers, is_sidecar, regular_containers};

const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;

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
    let count = regular_containers(pod).len() + init_containers(pod).len();
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
/// `qos` is the pod's class ([`crate::podspec::qos::qos_class`]), which the caller derived once
/// for the pod.
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
        && init_containers(pod)
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

    use super::*;
    use crate::podspec::qos::{qos_class, SYSTEM_CRITICAL_PRIORITY, SYSTEM_NODE_CRITICAL};
    use crate::podspec::resources::test_support::{container, list, pod, sidecar};
    use crate::podspec::CONFIG_SOURCE_ANNOTATION;

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
