//! Node registration (the kubelet's `registerWithAPIServer`, `initialNode`,
//! `tryRegisterWithAPIServer`).
//!
//! The Node is created with the kubelet's default labels, the configured `nodeLabels` and
//! `registerWithTaints`, the controller-managed attach/detach annotation and a first status.
//! If it already exists (a restart, or an operator created it), only what the kubelet owns is
//! reconciled: its default labels and that annotation. Labels and taints others added stay,
//! and — as with the kubelet — `nodeLabels` and taints only apply at creation.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::{api_call, Error};
use crate::stats::machine::go_arch;

pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub const LABEL_OS: &str = "kubernetes.io/os";
pub const LABEL_ARCH: &str = "kubernetes.io/arch";
/// Deprecated, still set by the kubelet.
pub const LABEL_BETA_OS: &str = "beta.kubernetes.io/os";
/// Deprecated, still set by the kubelet.
pub const LABEL_BETA_ARCH: &str = "beta.kubernetes.io/arch";
pub const ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";
/// The taint an external cloud controller manager removes once it has initialized the node.
pub const TAINT_EXTERNAL_CLOUD_PROVIDER: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The node IP the kubelet was given, for an external cloud controller manager.
pub const ANNOTATION_PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";

/// The labels the kubelet reconciles on an existing Node (`updateDefaultLabels`). Zone, region
/// and instance type come from a cloud provider and Windows build from Windows, so nodelet
/// never sets them and they are skipped; they are listed so the rule reads like the kubelet's.
pub const DEFAULT_LABELS: [&str; 12] = [
    LABEL_HOSTNAME,
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    LABEL_OS,
    LABEL_ARCH,
    "node.kubernetes.io/windows-build",
    LABEL_BETA_OS,
    LABEL_BETA_ARCH,
];

/// What registration needs from the configuration.
#[derive(Debug, Clone)]
pub struct Registration<'a> {
    pub node_name: &'a str,
    /// The `kubernetes.io/hostname` label value (the kubelet's hostname; `nodeName` overrides it).
    pub hostname: &'a str,
    pub node_labels: &'a BTreeMap<String, String>,
    pub taints: &'a [Taint],
    /// `providerID`: `spec.providerID` when not empty.
    pub provider_id: &'a str,
    /// `cloudProvider: external`: the uninitialized taint, and the provided-IP annotation when
    /// `nodeIP` is set (the kubelet's `initialNode` and `NodeAddress` setter).
    pub cloud: super::CloudProvider,
}

/// The Node nodelet creates (`initialNode`): default labels, then `nodeLabels` on top (they
/// win, as the kubelet's `--node-labels` do), taints, the attach/detach annotation, `status`.
pub fn initial_node(registration: &Registration<'_>, status: NodeStatus) -> Node {
    let os = std::env::consts::OS;
    let arch = go_arch(std::env::consts::ARCH);
    let mut labels: BTreeMap<String, String> = [
        (LABEL_HOSTNAME, registration.hostname),
        (LABEL_OS, os),
        (LABEL_ARCH, arch),
        (LABEL_BETA_OS, os),
        (LABEL_BETA_ARCH, arch),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (key, value) in registration.node_labels {
        if let Some(default) = labels.get(key) {
            if default != value {
                tracing::warn!(label = %key, value = %value, default = %default,
                    "nodeLabels overrides a default node label");
            }
        }
        labels.insert(key.clone(), value.clone());
    }
    let mut annotations = BTreeMap::from([(
        ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH.to_string(),
        "true".to_string(),
    )]);
    let mut taints = registration.taints.to_vec();
    if let super::CloudProvider::External { node_ip } = registration.cloud {
        taints.push(Taint {
            key: TAINT_EXTERNAL_CLOUD_PROVIDER.to_string(),
            value: Some("true".to_string()),
            effect: "NoSchedule".to_string(),
            time_added: None,
        });
        if let Some(ip) = node_ip.filter(|ip| !ip.is_unspecified()) {
            annotations.insert(ANNOTATION_PROVIDED_NODE_IP.to_string(), ip.to_string());
        }
    }
    Node {
        metadata: ObjectMeta {
            name: Some(registration.node_name.to_string()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            provider_id: (!registration.provider_id.is_empty())
                .then(|| registration.provider_id.to_string()),
            ..Default::default()
        }),
        status: Some(status),
    }
}

/// The metadata patch that brings an existing Node in line with the one nodelet would create
/// (`reconcileCMADAnnotationWithExistingNode` + `updateDefaultLabels`), or `None` when it
/// already is. Labels outside [`DEFAULT_LABELS`] are never touched; a default label whose
/// wanted value is empty is removed.
pub fn reconcile_existing(initial: &Node, existing: &Node) -> Option<Value> {
    let empty = BTreeMap::new();
    let wanted_labels = initial.metadata.labels.as_ref().unwrap_or(&empty);
    let labels = existing.metadata.labels.as_ref().unwrap_or(&empty);
    let mut label_patch = Map::new();
    for key in DEFAULT_LABELS {
        let Some(wanted) = wanted_labels.get(key) else {
            continue;
        };
        let current = labels.get(key);
        if wanted.is_empty() {
            if current.is_some() {
                label_patch.insert(key.to_string(), Value::Null);
            }
        } else if current != Some(wanted) {
            label_patch.insert(key.to_string(), Value::String(wanted.clone()));
        }
    }

    let annotations = existing.metadata.annotations.as_ref().unwrap_or(&empty);
    let wanted_annotation = initial
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH));
    let mut annotation_patch = Map::new();
    if annotations.get(ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH) != wanted_annotation {
        annotation_patch.insert(
            ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH.to_string(),
            wanted_annotation.map_or(Value::Null, |v| Value::String(v.clone())),
        );
    }

    if label_patch.is_empty() && annotation_patch.is_empty() {
        return None;
    }
    let mut metadata = Map::new();
    if !label_patch.is_empty() {
        metadata.insert("labels".into(), Value::Object(label_patch));
    }
    if !annotation_patch.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotation_patch));
    }
    Some(json!({ "metadata": metadata }))
}

/// The kubelet's registration back-off: 100 ms, doubling, at most 7 s.
pub fn registration_backoff(attempt: u32) -> Duration {
    crate::backoff::exponential(Duration::from_millis(100), attempt, Duration::from_secs(7))
}

/// One registration attempt: create, or reconcile the existing Node. Returns the Node as the
/// API server has it.
pub async fn try_register(
    nodes: &Api<Node>,
    node: &Node,
    timeout: Duration,
) -> Result<Node, Error> {
    let name = node.metadata.name.clone().unwrap_or_default();
    match api_call(timeout, nodes.create(&PostParams::default(), node)).await {
        Ok(created) => return Ok(created),
        Err(Error::Api { code: 409, .. }) => {}
        Err(e) => return Err(e.context(format!("creating node {name:?}"))),
    }
    let existing = api_call(timeout, nodes.get(&name))
        .await
        .map_err(|e| e.context(format!("getting existing node {name:?}")))?;
    tracing::info!(node = %name, "node was previously registered");
    match reconcile_existing(node, &existing) {
        None => Ok(existing),
        Some(patch) => api_call(
            timeout,
            nodes.patch(&name, &PatchParams::default(), &Patch::Strategic(patch)),
        )
        .await
        .map_err(|e| e.context(format!("reconciling existing node {name:?}"))),
    }
}

/// Registers until it works (`registerWithAPIServer`), building the Node afresh for each
/// attempt so its status is current. `None` when cancelled first.
pub async fn register(
    nodes: &Api<Node>,
    build: impl Fn() -> Node,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Option<Node> {
    let mut attempt = 0;
    loop {
        let node = build();
        let name = node.metadata.name.clone().unwrap_or_default();
        tracing::info!(node = %name, "attempting to register node");
        let result = tokio::select! {
            result = try_register(nodes, &node, timeout) => result,
            _ = cancel.cancelled() => return None,
        };
        match result {
            Ok(registered) => {
                tracing::info!(node = %name, "successfully registered node");
                return Some(registered);
            }
            Err(error) => {
                tracing::warn!(node = %name, %error, "unable to register node with API server")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(registration_backoff(attempt)) => {}
            _ = cancel.cancelled() => return None,
        }
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Default::default()
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn initial_node_table() {
        let arch = go_arch(std::env::consts::ARCH);
        // (nodeLabels, taints, want labels on top of the defaults, want taints)
        type Case = (
            Vec<(&'static str, &'static str)>,
            Vec<Taint>,
            Vec<(&'static str, &'static str)>,
            Option<Vec<Taint>>,
        );
        let cases: Vec<Case> = vec![
            (vec![], vec![], vec![], None),
            (
                vec![("node-role.kubernetes.io/worker", ""), ("zone", "a")],
                vec![taint("dedicated", "NoSchedule")],
                vec![("node-role.kubernetes.io/worker", ""), ("zone", "a")],
                Some(vec![taint("dedicated", "NoSchedule")]),
            ),
            // nodeLabels win over the defaults.
            (
                vec![(LABEL_HOSTNAME, "alias")],
                vec![],
                vec![(LABEL_HOSTNAME, "alias")],
                None,
            ),
        ];
        for (node_labels, taints, extra, want_taints) in cases {
            let node_labels = labels(&node_labels);
            let registration = Registration {
                node_name: "node-1",
                hostname: "node-1",
                node_labels: &node_labels,
                taints: &taints,
                provider_id: "",
                cloud: crate::node::CloudProvider::None,
            };
            let node = initial_node(&registration, NodeStatus::default());
            let mut want = labels(&[
                (LABEL_HOSTNAME, "node-1"),
                (LABEL_OS, "linux"),
                (LABEL_ARCH, arch),
                (LABEL_BETA_OS, "linux"),
                (LABEL_BETA_ARCH, arch),
            ]);
            want.extend(labels(&extra));
            assert_eq!(node.metadata.name.as_deref(), Some("node-1"));
            assert_eq!(
                node.metadata.labels.as_ref(),
                Some(&want),
                "{node_labels:?}"
            );
            assert_eq!(
                node.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH))
                    .map(String::as_str),
                Some("true")
            );
            assert_eq!(node.spec.as_ref().unwrap().taints, want_taints);
            assert_eq!(node.spec.unwrap().provider_id, None);
        }
    }

    #[test]
    fn provider_id_is_the_nodes_spec_provider_id() {
        let empty = BTreeMap::new();
        let registration = Registration {
            node_name: "node-1",
            hostname: "node-1",
            node_labels: &empty,
            taints: &[],
            provider_id: "aws:///eu-west-1a/i-0123",
            cloud: crate::node::CloudProvider::None,
        };
        let node = initial_node(&registration, NodeStatus::default());
        assert_eq!(
            node.spec.unwrap().provider_id.as_deref(),
            Some("aws:///eu-west-1a/i-0123")
        );
    }

    /// `cloudProvider: external`: the uninitialized taint after the configured ones, and the
    /// provided-IP annotation only with a (specified) `nodeIP`.
    #[test]
    fn an_external_cloud_provider_registers_tainted_and_announces_the_node_ip() {
        let empty = BTreeMap::new();
        let configured = [Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }];
        let uninitialized = Taint {
            key: TAINT_EXTERNAL_CLOUD_PROVIDER.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let ip = |s: &str| Some(s.parse().unwrap());
        let cases = [
            (
                crate::node::CloudProvider::None,
                vec![configured[0].clone()],
                None,
            ),
            (
                crate::node::CloudProvider::External { node_ip: None },
                vec![configured[0].clone(), uninitialized.clone()],
                None,
            ),
            (
                crate::node::CloudProvider::External {
                    node_ip: ip("10.0.0.7"),
                },
                vec![configured[0].clone(), uninitialized.clone()],
                Some("10.0.0.7"),
            ),
            (
                crate::node::CloudProvider::External {
                    node_ip: ip("0.0.0.0"),
                },
                vec![configured[0].clone(), uninitialized],
                None,
            ),
        ];
        for (cloud, want_taints, want_annotation) in cases {
            let registration = Registration {
                node_name: "node-1",
                hostname: "node-1",
                node_labels: &empty,
                taints: &configured,
                provider_id: "",
                cloud,
            };
            let node = initial_node(&registration, NodeStatus::default());
            assert_eq!(node.spec.unwrap().taints, Some(want_taints), "{cloud:?}");
            assert_eq!(
                node.metadata
                    .annotations
                    .unwrap()
                    .get(ANNOTATION_PROVIDED_NODE_IP)
                    .map(String::as_str),
                want_annotation,
                "{cloud:?}"
            );
        }
    }

    #[test]
    fn reconcile_table() {
        let empty = BTreeMap::new();
        let registration = Registration {
            node_name: "node-1",
            hostname: "node-1",
            node_labels: &empty,
            taints: &[],
            provider_id: "",
            cloud: crate::node::CloudProvider::None,
        };
        let initial = initial_node(&registration, NodeStatus::default());
        let arch = go_arch(std::env::consts::ARCH);
        let existing = |pairs: &[(&str, &str)], annotated: bool| Node {
            metadata: ObjectMeta {
                name: Some("node-1".into()),
                labels: Some(labels(pairs)),
                annotations: annotated
                    .then(|| labels(&[(ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH, "true")])),
                ..Default::default()
            },
            ..Default::default()
        };
        let all_defaults = [
            (LABEL_HOSTNAME, "node-1"),
            (LABEL_OS, "linux"),
            (LABEL_ARCH, arch),
            (LABEL_BETA_OS, "linux"),
            (LABEL_BETA_ARCH, arch),
        ];
        let mut with_foreign = all_defaults.to_vec();
        with_foreign.push(("team", "blue"));
        let mut stale_hostname = all_defaults.to_vec();
        stale_hostname[0] = (LABEL_HOSTNAME, "old-name");
        let cases: Vec<(&str, Node, Option<Value>)> = vec![
            ("in line", existing(&all_defaults, true), None),
            (
                "foreign labels are kept (not in the patch)",
                existing(&with_foreign, true),
                None,
            ),
            (
                "a stale default label is fixed",
                existing(&stale_hostname, true),
                Some(json!({"metadata": {"labels": {LABEL_HOSTNAME: "node-1"}}})),
            ),
            (
                "missing labels and annotation are added",
                existing(&[("team", "blue")], false),
                Some(json!({"metadata": {
                    "labels": {
                        LABEL_HOSTNAME: "node-1", LABEL_OS: "linux", LABEL_ARCH: arch,
                        LABEL_BETA_OS: "linux", LABEL_BETA_ARCH: arch
                    },
                    "annotations": {ANNOTATION_CONTROLLER_MANAGED_ATTACH_DETACH: "true"}
                }})),
            ),
        ];
        for (name, existing, want) in cases {
            assert_eq!(reconcile_existing(&initial, &existing), want, "{name}");
        }
    }

    #[test]
    fn backoff_table() {
        let cases = [
            (0, 100),
            (1, 200),
            (2, 400),
            (5, 3200),
            (6, 6400),
            (7, 7000),
            (40, 7000),
        ];
        for (attempt, millis) in cases {
            assert_eq!(
                registration_backoff(attempt),
                Duration::from_millis(millis),
                "attempt {attempt}"
            );
        }
    }
}
