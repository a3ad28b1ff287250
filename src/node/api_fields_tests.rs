//! Every status field nodelet's generators produce — the pod status of `status` and the node
//! status of this module — is either in `cluster::api_fields::SENT_FIELDS` or in the baseline
//! every supported release stores, so a new field cannot be sent unclassified. These tests
//! live here, above both generators and the table.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Container, ContainerImage, Pod, PodSpec, PodStatus, Probe, ResourceRequirements, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{json, Value};

use crate::cluster::api_fields::{StatusKind, SENT_FIELDS};
use crate::cri::{ContainerState, PodRuntime, RuntimeContainer, RuntimeSandbox};
use crate::lifecycle::pressure::Pressure;
use crate::node::status::{build_node_status, AllocatableReservation, NodeStatusInputs};
use crate::stats::machine::MachineInfo;
use crate::status::{generate_pod_status, StatusInputs};

// ---- every field nodelet generates is classified ----

/// Pod status fields every release since [`crate::cluster::Release::OLDEST_SUPPORTED`] stores
/// (`*` = any map key). A field nodelet starts to send that is neither here nor in
/// [`SENT_FIELDS`] fails [`every_generated_pod_status_field_is_classified`]: look up its first
/// release and add it to one of the two.
const POD_BASELINE: &[&str] = &[
    "phase",
    "reason",
    "message",
    "hostIP",
    "podIP",
    "podIPs[].ip",
    "qosClass",
    "startTime",
    "nominatedNodeName",
    "conditions[].type",
    "conditions[].status",
    "conditions[].reason",
    "conditions[].message",
    "conditions[].lastProbeTime",
    "conditions[].lastTransitionTime",
];

/// Container status fields (under `containerStatuses[]` and `initContainerStatuses[]`) every
/// supported release stores.
const CONTAINER_BASELINE: &[&str] = &[
    "name",
    "image",
    "imageID",
    "containerID",
    "ready",
    "started",
    "restartCount",
    "state.waiting.reason",
    "state.waiting.message",
    "state.running.startedAt",
    "state.terminated.exitCode",
    "state.terminated.signal",
    "state.terminated.reason",
    "state.terminated.message",
    "state.terminated.startedAt",
    "state.terminated.finishedAt",
    "state.terminated.containerID",
    "lastState.waiting.reason",
    "lastState.waiting.message",
    "lastState.running.startedAt",
    "lastState.terminated.exitCode",
    "lastState.terminated.signal",
    "lastState.terminated.reason",
    "lastState.terminated.message",
    "lastState.terminated.startedAt",
    "lastState.terminated.finishedAt",
    "lastState.terminated.containerID",
];

const NODE_BASELINE: &[&str] = &[
    "addresses[].type",
    "addresses[].address",
    "capacity.*",
    "allocatable.*",
    "conditions[].type",
    "conditions[].status",
    "conditions[].reason",
    "conditions[].message",
    "conditions[].lastHeartbeatTime",
    "conditions[].lastTransitionTime",
    "daemonEndpoints.kubeletEndpoint.Port",
    "nodeInfo.machineID",
    "nodeInfo.systemUUID",
    "nodeInfo.bootID",
    "nodeInfo.kernelVersion",
    "nodeInfo.osImage",
    "nodeInfo.containerRuntimeVersion",
    "nodeInfo.kubeletVersion",
    "nodeInfo.kubeProxyVersion",
    "nodeInfo.operatingSystem",
    "nodeInfo.architecture",
    "images[].names[]",
    "images[].sizeBytes",
    "volumesInUse[]",
];

/// Every leaf of `value` as a path (`a.b`, `list[].c`); empty objects and lists carry no field.
fn leaf_paths(value: &Value, prefix: &str, out: &mut Vec<String>) {
    let join = |key: &str| {
        if prefix.is_empty() {
            key.to_string()
        } else {
            format!("{prefix}.{key}")
        }
    };
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                leaf_paths(child, &join(key), out);
            }
        }
        Value::Array(items) => {
            for item in items {
                leaf_paths(item, &format!("{prefix}[]"), out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

fn matches(pattern: &str, path: &str) -> bool {
    let p: Vec<&str> = pattern.split('.').collect();
    let s: Vec<&str> = path.split('.').collect();
    p.len() == s.len() && p.iter().zip(&s).all(|(p, s)| *p == "*" || p == s)
}

/// `path` starts with the field `prefix` (whole segments).
fn under(prefix: &str, path: &str) -> bool {
    path == prefix
        || path.starts_with(&format!("{prefix}."))
        || path.starts_with(&format!("{prefix}["))
}

fn baseline_of(kind: StatusKind) -> Vec<String> {
    match kind {
        StatusKind::Node => NODE_BASELINE.iter().map(|s| s.to_string()).collect(),
        StatusKind::Pod => {
            let mut all: Vec<String> = POD_BASELINE.iter().map(|s| s.to_string()).collect();
            for list in ["containerStatuses[]", "initContainerStatuses[]"] {
                all.extend(CONTAINER_BASELINE.iter().map(|f| format!("{list}.{f}")));
            }
            all
        }
    }
}

/// The fields of `status` that neither the baseline nor the table account for.
fn unclassified(kind: StatusKind, status: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    leaf_paths(status, "", &mut paths);
    paths.sort();
    paths.dedup();
    let baseline = baseline_of(kind);
    paths
        .into_iter()
        .filter(|path| {
            let listed = SENT_FIELDS
                .iter()
                .any(|f| f.kind == kind && under(f.path, path));
            !listed && !baseline.iter().any(|b| matches(b, path))
        })
        .collect()
}

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap()
}

fn instance(name: &str, id: &str, state: ContainerState, restarts: i32) -> RuntimeContainer {
    RuntimeContainer {
        id: id.into(),
        name: name.into(),
        sandbox_id: "sb".into(),
        state,
        created_at: ts(1_000),
        started_at: Some(ts(1_001)),
        finished_at: (state == ContainerState::Exited).then(|| ts(1_005)),
        exit_code: i32::from(state == ContainerState::Exited),
        message: "m".into(),
        image: format!("localhost/{name}:1"),
        image_ref: format!("sha256:{name}"),
        restart_count: restarts,
        ..Default::default()
    }
}

/// A pod that exercises every part of the generator: an init container, a restarted regular
/// container with probes, requests and limits, read-only and writable mounts.
fn rich_pod_status() -> PodStatus {
    let mounts = Some(vec![
        VolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            ..Default::default()
        },
        VolumeMount {
            name: "config".into(),
            mount_path: "/config".into(),
            read_only: Some(true),
            ..Default::default()
        },
    ]);
    let quantities = |cpu: &str| {
        Some(BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.into())),
            ("memory".to_string(), Quantity("64Mi".into())),
        ]))
    };
    let container = |name: &str| Container {
        name: name.into(),
        image: Some(format!("localhost/{name}:1")),
        volume_mounts: mounts.clone(),
        resources: Some(ResourceRequirements {
            requests: quantities("100m"),
            limits: quantities("1"),
            ..Default::default()
        }),
        readiness_probe: Some(Probe::default()),
        startup_probe: Some(Probe::default()),
        ..Default::default()
    };
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("rich".into()),
            namespace: Some("default".into()),
            uid: Some("uid-rich".into()),
            generation: Some(2),
            ..Default::default()
        },
        spec: Some(PodSpec {
            init_containers: Some(vec![container("init")]),
            containers: vec![container("app"), container("side")],
            ..Default::default()
        }),
        status: None,
    };
    let runtime = PodRuntime {
        uid: "uid-rich".into(),
        name: "rich".into(),
        namespace: "default".into(),
        sandboxes: vec![RuntimeSandbox {
            id: "sb".into(),
            attempt: 0,
            ready: true,
            created_at: ts(999),
            ips: vec!["10.88.0.7".into(), "fd00::7".into()],
            host_network: false,
        }],
        containers: vec![
            instance("app", "app-2", ContainerState::Running, 1),
            instance("app", "app-1", ContainerState::Exited, 0),
            instance("side", "side-1", ContainerState::Exited, 0),
            instance("init", "init-1", ContainerState::Exited, 0),
        ],
    };
    let readiness = BTreeMap::from([("app-2".to_string(), true)]);
    let startup = BTreeMap::from([("app-2".to_string(), true)]);
    // An allocation and what was applied to the running instance (in-place resize).
    let requirements = k8s_openapi::api::core::v1::ResourceRequirements {
        requests: Some(
            [(
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("100m".into()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    let resize = crate::status::ResizeView {
        allocated: [("app".to_string(), requirements.clone())].into(),
        actuated: [("app".to_string(), ("app-2".to_string(), requirements))].into(),
        ..Default::default()
    };
    generate_pod_status(&StatusInputs {
        pod: &pod,
        runtime: &runtime,
        previous: None,
        start_failures: &BTreeMap::new(),
        readiness: &readiness,
        startup: &startup,
        host_ips: &["10.0.0.5".to_string(), "fd00::5".to_string()],
        pod_is_terminal: false,
        now: ts(2_000),
        runtime_name: "containerd",
        restart_in_place: crate::status::RestartInPlace::Done,
        ready_to_start_condition: true,
        resize: Some(&resize),
        recursive_read_only: true,
    })
}

#[test]
fn every_generated_pod_status_field_is_classified() {
    let status = serde_json::to_value(rich_pod_status()).unwrap();
    // The generator did produce what the table is about (else this test proves little).
    for path in [
        "/observedGeneration",
        "/hostIPs",
        "/conditions/0/observedGeneration",
        "/containerStatuses/0/volumeMounts",
        "/containerStatuses/0/resources",
        "/containerStatuses/0/allocatedResources",
        "/containerStatuses/0/lastState/terminated/exitCode",
    ] {
        assert!(status.pointer(path).is_some(), "{path} in {status:#}");
    }
    assert_eq!(unclassified(StatusKind::Pod, &status), Vec::<String>::new());
    // And the check can fail: a field from neither list is reported.
    let mut unknown = status.clone();
    unknown["containerStatuses"][0]["stopSignal"] = json!("SIGTERM");
    assert_eq!(
        unclassified(StatusKind::Pod, &unknown),
        vec!["containerStatuses[].stopSignal".to_string()]
    );
}

#[test]
fn every_generated_node_status_field_is_classified() {
    let machine = MachineInfo {
        num_cores: 4,
        memory_capacity: 16 << 30,
        swap_capacity: 1 << 30,
        hugepages: vec![(2 << 20, 8)],
        ephemeral_storage_capacity: Some(100 << 30),
        kernel_version: "6.1.0".into(),
        os_image: "Debian GNU/Linux 12 (bookworm)".into(),
        machine_id: "m".into(),
        boot_id: "b".into(),
        system_uuid: "s".into(),
    };
    let images = [ContainerImage {
        names: Some(vec!["localhost/testbox:1".into()]),
        size_bytes: Some(1 << 20),
    }];
    let handlers = crate::node::status::node_runtime_handlers(&[crate::cri::api::RuntimeHandler {
        name: "runc".into(),
        features: None,
    }]);
    let volumes = ["kubernetes.io/csi/csi.example.com^vol-1".to_string()];
    let inputs = NodeStatusInputs {
        hostname: "node-1",
        internal_ip: Some("10.0.0.5".parse().unwrap()),
        cloud: crate::node::CloudProvider::None,
        machine: &machine,
        max_pods: 110,
        reserved: AllocatableReservation::KUBELET_DEFAULT,
        container_runtime_version: "containerd://1.6.20",
        kubelet_version: "v1.37.0+nodelet.0.1.0",
        kubelet_port: 10250,
        pressure: Pressure::default(),
        health: vec!["runtime down".into()],
        shutting_down: false,
        images: Some(&images),
        runtime_handlers: &handlers,
        runtime_features: Some(&crate::cri::api::RuntimeFeatures {
            supplemental_groups_policy: true,
        }),
        volumes_in_use: Some(&volumes),
    };
    let status = serde_json::to_value(build_node_status(None, &inputs, ts(2_000))).unwrap();
    assert!(
        status.pointer("/nodeInfo/swap/capacity").is_some(),
        "{status:#}"
    );
    assert_eq!(
        unclassified(StatusKind::Node, &status),
        Vec::<String>::new()
    );
}
