//! What actuating an allocated resize takes (the kubelet's `computePodResizeAction` and
//! `doPodResizeAction`), decided purely from what is allocated and what was last applied: the
//! pod cgroup grown before the containers and shrunk after them (one write of the larger of
//! the old and new values first, the new values last), a container's memory limit lowered only
//! below its current usage, and a changed resource whose `resizePolicy` is `RestartContainer`
//! restarting that container (created again with the allocated values).

use k8s_openapi::api::core::v1::{Container, ResourceRequirements};

use crate::podspec::resources::{container_limits, container_requests, Amounts};

/// One running container's side of a resize.
#[derive(Debug, Clone)]
pub struct ContainerResize<'a> {
    pub name: &'a str,
    pub allocated: &'a ResourceRequirements,
    /// What nodelet last applied to this instance.
    pub actuated: &'a ResourceRequirements,
    pub restart_on_cpu: bool,
    pub restart_on_memory: bool,
    /// The container's memory usage in bytes, when it could be read.
    pub memory_usage: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct ResizeActionInputs<'a> {
    pub containers: Vec<ContainerResize<'a>>,
    /// The pod cgroup was written from another allocation than the current one.
    pub pod_cgroup_due: bool,
    /// The pod cgroup's new memory limit when the resize lowers it, and its current usage.
    pub pod_memory_limit: Option<i64>,
    pub pod_memory_usage: Option<i64>,
}

/// One step, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Write the pod cgroup with the larger of the old and new values of each resource.
    PodCgroupExpand,
    /// UpdateContainerResources with the allocated values.
    UpdateContainer(String),
    /// Write the pod cgroup with the new values.
    PodCgroupFinal,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResizeActions {
    pub steps: Vec<Step>,
    /// Containers restarted for a resize (`resizePolicy: RestartContainer`).
    pub restart: Vec<String>,
    /// Why nothing is done now (`PodResizeInProgress` reason `Error`).
    pub error: Option<String>,
}

impl ResizeActions {
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty() && self.restart.is_empty() && self.error.is_none()
    }
}

fn amounts(r: &ResourceRequirements) -> (Amounts, Amounts) {
    let c = Container {
        resources: Some(r.clone()),
        ..Default::default()
    };
    (container_requests(&c), container_limits(&c))
}

/// Whether the cpu and the memory parts of two resource sets differ (as quantities: `1` and
/// `1000m` are the same cpu).
pub fn changed(a: &ResourceRequirements, b: &ResourceRequirements) -> (bool, bool) {
    let ((ra, la), (rb, lb)) = (amounts(a), amounts(b));
    (
        ra.cpu_milli != rb.cpu_milli || la.cpu_milli != lb.cpu_milli,
        ra.memory != rb.memory || la.memory != lb.memory,
    )
}

/// The steps that bring the runtime and the pod cgroup to the allocation.
pub fn resize_actions(inputs: &ResizeActionInputs<'_>) -> ResizeActions {
    let mut out = ResizeActions::default();
    let mut updates = Vec::new();
    for c in &inputs.containers {
        let (cpu, memory) = changed(c.allocated, c.actuated);
        if !cpu && !memory {
            continue;
        }
        if (cpu && c.restart_on_cpu) || (memory && c.restart_on_memory) {
            out.restart.push(c.name.to_string());
            continue;
        }
        let new_limit = amounts(c.allocated).1.memory;
        let old_limit = amounts(c.actuated).1.memory;
        if let (Some(new), Some(usage)) = (new_limit, c.memory_usage) {
            if old_limit.is_none_or(|old| new < old) && usage >= new {
                return ResizeActions {
                    error: Some(format!(
                        "attempting to set container {:?} memory limit ({new}) below current usage ({usage})",
                        c.name
                    )),
                    ..Default::default()
                };
            }
        }
        updates.push(Step::UpdateContainer(c.name.to_string()));
    }
    if inputs.pod_cgroup_due {
        if let (Some(limit), Some(usage)) = (inputs.pod_memory_limit, inputs.pod_memory_usage) {
            if usage >= limit {
                return ResizeActions {
                    error: Some(format!(
                        "attempting to set pod memory limit ({limit}) below current usage ({usage})"
                    )),
                    ..Default::default()
                };
            }
        }
        out.steps.push(Step::PodCgroupExpand);
    }
    out.steps.extend(updates);
    if inputs.pod_cgroup_due {
        out.steps.push(Step::PodCgroupFinal);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podspec::resources::test_support::list;

    fn rr(requests: &str, limits: &str) -> ResourceRequirements {
        ResourceRequirements {
            requests: list(requests),
            limits: list(limits),
            ..Default::default()
        }
    }

    #[test]
    fn table() {
        let small = rr("cpu=100m,memory=64Mi", "cpu=200m,memory=128Mi");
        let more_cpu = rr("cpu=100m,memory=64Mi", "cpu=500m,memory=128Mi");
        let same_cpu_other_unit = rr("cpu=0.1,memory=64Mi", "cpu=0.2,memory=128Mi");
        let less_mem = rr("cpu=100m,memory=32Mi", "cpu=200m,memory=64Mi");
        let mib = 1i64 << 20;
        struct Case<'a> {
            name: &'a str,
            allocated: &'a ResourceRequirements,
            actuated: &'a ResourceRequirements,
            restart_on_memory: bool,
            usage: Option<i64>,
            pod_due: bool,
            pod_usage: Option<i64>,
            want: ResizeActions,
        }
        let update = |steps: Vec<Step>| ResizeActions {
            steps,
            ..Default::default()
        };
        let cases = [
            Case {
                name: "nothing to do",
                allocated: &small,
                actuated: &same_cpu_other_unit,
                restart_on_memory: false,
                usage: None,
                pod_due: false,
                pod_usage: None,
                want: ResizeActions::default(),
            },
            Case {
                name: "cpu raised: pod cgroup grown first, then the container, then the final values",
                allocated: &more_cpu,
                actuated: &small,
                restart_on_memory: true,
                usage: None,
                pod_due: true,
                pod_usage: None,
                want: update(vec![
                    Step::PodCgroupExpand,
                    Step::UpdateContainer("c".into()),
                    Step::PodCgroupFinal,
                ]),
            },
            Case {
                name: "actuated but the pod cgroup is not (1.6: no runtime report needed)",
                allocated: &more_cpu,
                actuated: &more_cpu,
                restart_on_memory: false,
                usage: None,
                pod_due: true,
                pod_usage: None,
                want: update(vec![Step::PodCgroupExpand, Step::PodCgroupFinal]),
            },
            Case {
                name: "memory lowered below usage: error, nothing applied",
                allocated: &less_mem,
                actuated: &small,
                restart_on_memory: false,
                usage: Some(100 * mib),
                pod_due: true,
                pod_usage: None,
                want: ResizeActions {
                    error: Some(format!(
                        "attempting to set container \"c\" memory limit ({}) below current usage ({})",
                        64 * mib,
                        100 * mib
                    )),
                    ..Default::default()
                },
            },
            Case {
                name: "memory lowered above usage",
                allocated: &less_mem,
                actuated: &small,
                restart_on_memory: false,
                usage: Some(10 * mib),
                pod_due: true,
                pod_usage: Some(10 * mib),
                want: update(vec![
                    Step::PodCgroupExpand,
                    Step::UpdateContainer("c".into()),
                    Step::PodCgroupFinal,
                ]),
            },
            Case {
                name: "pod memory lowered below the pod's usage",
                allocated: &less_mem,
                actuated: &small,
                restart_on_memory: false,
                usage: None,
                pod_due: true,
                pod_usage: Some(100 * mib),
                want: ResizeActions {
                    error: Some(format!(
                        "attempting to set pod memory limit ({}) below current usage ({})",
                        64 * mib,
                        100 * mib
                    )),
                    ..Default::default()
                },
            },
            Case {
                name: "memory under RestartContainer restarts the container",
                allocated: &less_mem,
                actuated: &small,
                restart_on_memory: true,
                usage: Some(100 * mib),
                pod_due: true,
                pod_usage: None,
                want: ResizeActions {
                    steps: vec![Step::PodCgroupExpand, Step::PodCgroupFinal],
                    restart: vec!["c".into()],
                    error: None,
                },
            },
        ];
        for case in cases {
            let got = resize_actions(&ResizeActionInputs {
                containers: vec![ContainerResize {
                    name: "c",
                    allocated: case.allocated,
                    actuated: case.actuated,
                    restart_on_cpu: false,
                    restart_on_memory: case.restart_on_memory,
                    memory_usage: case.usage,
                }],
                pod_cgroup_due: case.pod_due,
                pod_memory_limit: Some(64 * mib),
                pod_memory_usage: case.pod_usage,
            });
            assert_eq!(got, case.want, "{}", case.name);
        }
    }
}
