//! What a pod's spec implies for running it — QoS class, effective requests and limits, cgroup
//! parent and pod cgroup values, host network, the sandbox config, the containers' spec hashes —
//! derived once per version of the spec into one [`PodPlan`] that the executor reads, instead of
//! being recomputed from the spec at each step of each sync.
//!
//! The plan is a pure function of the pod (spec and the metadata the sandbox config carries),
//! the node's settings and the host's `resolv.conf` contents; [`PodPlan::is_for`] says whether it
//! still matches, and the pod worker derives a new one when it does not.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodSpec};

use super::container_config::container_hash;
use super::sandbox_config::{sandbox_config, SandboxContext};
use super::settings::SyncSettings;
use crate::cgroup::node::PodShare;
use crate::cgroup::{self, CgroupName, ResourceConfig};
use crate::cri::api;
use crate::podspec::qos::{qos_class, QosClass};
use crate::podspec::resources::{effective_pod_resources, PodResources};
use crate::podspec::{host_network, init_containers, regular_containers};

/// What a plan was derived from; a pod that differs in any of it gets a new plan.
#[derive(Debug, Clone, PartialEq)]
struct PlanSource {
    uid: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    spec: Option<PodSpec>,
    resolv_conf: Option<String>,
}

impl PlanSource {
    fn of(pod: &Pod, resolv_conf: Option<&str>) -> Self {
        let meta = &pod.metadata;
        PlanSource {
            uid: meta.uid.clone(),
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            labels: meta.labels.clone(),
            annotations: meta.annotations.clone(),
            spec: pod.spec.clone(),
            resolv_conf: resolv_conf.map(str::to_string),
        }
    }

    fn matches(&self, pod: &Pod, resolv_conf: Option<&str>) -> bool {
        let meta = &pod.metadata;
        self.uid == meta.uid
            && self.name == meta.name
            && self.namespace == meta.namespace
            && self.labels == meta.labels
            && self.annotations == meta.annotations
            && self.spec == pod.spec
            && self.resolv_conf.as_deref() == resolv_conf
    }
}

/// The pod's own cgroup under its QoS tier (`cgroupsPerQOS`).
#[derive(Debug, Clone, PartialEq)]
pub struct PodCgroupPlan {
    pub name: CgroupName,
    /// What nodelet writes to it (`cgroup::pod_cgroup_config`).
    pub config: ResourceConfig,
    /// What the pod adds to its QoS tier.
    pub share: PodShare,
}

/// What one version of a pod's spec implies.
#[derive(Debug, Clone)]
pub struct PodPlan {
    source: PlanSource,
    pub qos_class: QosClass,
    /// Effective requests and limits (init containers, sidecars, pod-level resources).
    pub resources: PodResources,
    pub host_network: bool,
    /// The cgroup parent of the sandbox and its containers; empty without `cgroupsPerQOS`.
    pub cgroup_parent: String,
    /// `None` when nodelet does not manage pod cgroups (`cgroupsPerQOS: false`).
    pub pod_cgroup: Option<PodCgroupPlan>,
    /// The sandbox config for attempt 0, or why it cannot be built (the message names the field).
    sandbox: Result<api::PodSandboxConfig, String>,
    /// Each container's spec hash by name (init and regular), for `compute_pod_actions`.
    pub spec_hashes: BTreeMap<String, String>,
}

impl PodPlan {
    /// Derives the plan; `node_name` is the node's, `resolv_conf` the contents of the
    /// `resolvConf` file (`None` when it is unset or unreadable).
    pub fn derive(
        pod: &Pod,
        settings: &SyncSettings,
        node_name: &str,
        resolv_conf: Option<&str>,
    ) -> PodPlan {
        let cgroup_parent = cgroup::pod_cgroup_parent(
            pod,
            settings.cgroup_driver,
            &settings.cgroup_root,
            settings.cgroups_per_qos,
        );
        let pod_cgroup = settings.cgroups.as_ref().map(|cgroups| PodCgroupPlan {
            name: cgroups.pod_cgroup(pod),
            config: cgroups.pod_config(pod),
            share: PodShare::of(pod),
        });
        let ctx = SandboxContext {
            node_name,
            pod_logs_dir: &settings.pod_logs_dir,
            cgroup_parent: cgroup_parent.clone(),
            cluster_dns: &settings.cluster_dns,
            cluster_domain: &settings.cluster_domain,
            host_resolv_conf: resolv_conf,
        };
        let sandbox = sandbox_config(pod, 0, &ctx).map_err(|e| e.to_string());
        let spec_hashes = init_containers(pod)
            .iter()
            .chain(regular_containers(pod))
            .map(|c| (c.name.clone(), container_hash(c)))
            .collect();
        PodPlan {
            source: PlanSource::of(pod, resolv_conf),
            qos_class: qos_class(pod),
            resources: effective_pod_resources(pod),
            host_network: host_network(pod),
            cgroup_parent,
            pod_cgroup,
            sandbox,
            spec_hashes,
        }
    }

    /// Whether this plan was derived from this version of the pod and `resolv.conf`.
    pub fn is_for(&self, pod: &Pod, resolv_conf: Option<&str>) -> bool {
        self.source.matches(pod, resolv_conf)
    }

    /// The sandbox config for this attempt, or why there is none.
    pub fn sandbox_config(&self, attempt: u32) -> Result<api::PodSandboxConfig, String> {
        let mut config = self.sandbox.clone()?;
        if let Some(m) = config.metadata.as_mut() {
            m.attempt = attempt;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn settings(cgroups_per_qos: bool) -> SyncSettings {
        SyncSettings {
            root_dir: PathBuf::from("/var/lib/nodelet"),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            container_log_links_dir: PathBuf::from("/var/log/containers"),
            cgroup_driver: cgroup::Driver::Cgroupfs,
            cgroup_root: "/".into(),
            cgroups_per_qos,
            cluster_dns: vec![],
            cluster_domain: "cluster.local".into(),
            resolv_conf: None,
            runtime_name: "containerd".into(),
            crash_loop_backoff: (Duration::from_secs(10), Duration::from_secs(300)),
            cgroup_v2: true,
            single_process_oom_kill: false,
            swap_behavior: crate::config::swap::SwapBehavior::NoSwap,
            swap_controller: false,
            seccomp_default: false,
            runtime_features: Default::default(),
            ready_to_start_condition: true,
            cgroups: None,
            pod_cgroup: cgroup::PodCgroupSettings::default(),
            node_allocatable: crate::podspec::resources::NodeAllocatable {
                cpu_milli: 4000,
                memory: 8 << 30,
                ephemeral_storage: None,
            },
            user_namespaces_gate: true,
            image_volumes: Default::default(),
            userns: None,
            csi_volumes: None,
            trash: std::sync::Arc::new(
                crate::volume::trash::Trash::new(std::path::Path::new("/var/lib/nodelet")).0,
            ),
        }
    }

    fn guaranteed(cpu: &str, memory: &str) -> Pod {
        let amounts: BTreeMap<String, Quantity> = [
            ("cpu".to_string(), Quantity(cpu.into())),
            ("memory".to_string(), Quantity(memory.into())),
        ]
        .into();
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    image: Some("img".into()),
                    resources: Some(ResourceRequirements {
                        requests: Some(amounts.clone()),
                        limits: Some(amounts),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_plan_holds_what_the_spec_implies() {
        let pod = guaranteed("500m", "128Mi");
        let plan = PodPlan::derive(&pod, &settings(true), "node-1", None);
        assert_eq!(plan.qos_class, QosClass::Guaranteed);
        assert_eq!(
            plan.resources,
            PodResources {
                cpu_request_milli: 500,
                cpu_limit_milli: Some(500),
                memory_request: 128 << 20,
                memory_limit: Some(128 << 20),
            }
        );
        assert!(!plan.host_network);
        assert_eq!(plan.cgroup_parent, "/kubepods/podu1");
        assert_eq!(plan.pod_cgroup, None, "no NodeCgroups given");
        assert_eq!(
            plan.spec_hashes.keys().collect::<Vec<_>>(),
            vec!["app"],
            "one hash per container"
        );
        let sandbox = plan.sandbox_config(3).expect("a sandbox config");
        assert_eq!(sandbox.metadata.as_ref().map(|m| m.attempt), Some(3));
        assert_eq!(
            sandbox.linux.as_ref().map(|l| l.cgroup_parent.as_str()),
            Some("/kubepods/podu1")
        );
        let without = PodPlan::derive(&pod, &settings(false), "node-1", None);
        assert_eq!(without.cgroup_parent, "", "cgroupsPerQOS off");
    }

    #[test]
    fn a_new_spec_or_resolv_conf_needs_a_new_plan() {
        let pod = guaranteed("500m", "128Mi");
        let plan = PodPlan::derive(&pod, &settings(true), "node-1", Some("nameserver 1.1.1.1"));
        assert!(plan.is_for(&pod, Some("nameserver 1.1.1.1")));
        // The status is not part of the spec: a new status keeps the plan.
        let mut with_status = pod.clone();
        with_status.status = Some(Default::default());
        assert!(plan.is_for(&with_status, Some("nameserver 1.1.1.1")));
        assert!(!plan.is_for(&pod, Some("nameserver 8.8.8.8")));
        assert!(!plan.is_for(&pod, None));
        assert!(!plan.is_for(&guaranteed("1", "128Mi"), Some("nameserver 1.1.1.1")));
        let mut labelled = pod.clone();
        labelled.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        assert!(!plan.is_for(&labelled, Some("nameserver 1.1.1.1")));
    }

    #[test]
    fn a_spec_without_a_sandbox_config_says_why() {
        let mut pod = guaranteed("500m", "128Mi");
        pod.spec.as_mut().unwrap().security_context =
            Some(k8s_openapi::api::core::v1::PodSecurityContext {
                supplemental_groups_policy: Some("Loose".into()),
                ..Default::default()
            });
        let plan = PodPlan::derive(&pod, &settings(true), "node-1", None);
        let err = plan
            .sandbox_config(0)
            .expect_err("supplementalGroupsPolicy: Loose");
        assert!(
            err.contains("spec.securityContext.supplementalGroupsPolicy"),
            "{err}"
        );
    }
}
