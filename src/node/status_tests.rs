use super::*;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn machine() -> MachineInfo {
    MachineInfo {
        num_cores: 4,
        memory_capacity: 16_393_756 * 1024,
        swap_capacity: 0,
        hugepages: vec![(2 << 20, 0), (1 << 30, 0)],
        ephemeral_storage_capacity: Some(102_687_672 * 1024),
        kernel_version: "6.1.0-18-amd64".into(),
        os_image: "Debian GNU/Linux 12 (bookworm)".into(),
        machine_id: "m-id".into(),
        boot_id: "b-id".into(),
        system_uuid: "s-uuid".into(),
    }
}

fn inputs(machine: &MachineInfo) -> NodeStatusInputs<'_> {
    NodeStatusInputs {
        hostname: "node-1",
        internal_ip: Some("10.0.0.5".parse().unwrap()),
        cloud: crate::node::CloudProvider::None,
        machine,
        max_pods: 110,
        reserved: AllocatableReservation::KUBELET_DEFAULT,
        container_runtime_version: "containerd://1.6.20",
        kubelet_version: "v1.37.0+nodelet.0.1.0",
        kubelet_port: 10250,
        pressure: Pressure::default(),
        health: Vec::new(),
        shutting_down: false,
        images: None,
        runtime_handlers: &[],
        runtime_features: None,
        volumes_in_use: None,
    }
}

fn condition(status: &NodeStatus, kind: &str) -> NodeCondition {
    status
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == kind)
        .unwrap_or_else(|| panic!("no {kind} condition"))
        .clone()
}

#[test]
fn first_status_matches_the_kubelet_field_by_field() {
    let machine = machine();
    let status = build_node_status(None, &inputs(&machine), ts("2026-01-01T00:00:00.750Z"));
    let t = "2026-01-01T00:00:00Z";
    let cond = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": t, "lastTransitionTime": t})
    };
    let want = json!({
        "addresses": [
            {"type": "InternalIP", "address": "10.0.0.5"},
            {"type": "Hostname", "address": "node-1"}
        ],
        "capacity": {
            "cpu": "4",
            "ephemeral-storage": "102687672Ki",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": "16393756Ki",
            "pods": "110"
        },
        "allocatable": {
            "cpu": "4",
            // 105152176128 - int64(105152176128 * float64(float32(0.1))): the kubelet's float32
            // percentage holds back 10515217769 bytes, not 10515217612.
            "ephemeral-storage": "94636958359",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": "16291356Ki",
            "pods": "110"
        },
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "architecture": go_arch(std::env::consts::ARCH),
            "bootID": "b-id",
            "containerRuntimeVersion": "containerd://1.6.20",
            "kernelVersion": "6.1.0-18-amd64",
            "kubeProxyVersion": "",
            "kubeletVersion": "v1.37.0+nodelet.0.1.0",
            "machineID": "m-id",
            "operatingSystem": "linux",
            "osImage": "Debian GNU/Linux 12 (bookworm)",
            "systemUUID": "s-uuid"
        }
    });
    assert_eq!(serde_json::to_value(&status).unwrap(), want);
}

#[test]
fn allocatable_table() {
    // (reservation, hugepages, capacity in the previous status, want allocatable subset)
    type Case = (
        AllocatableReservation,
        Vec<(u64, u64)>,
        Vec<(&'static str, &'static str)>,
        Vec<(&'static str, Option<&'static str>)>,
    );
    let cases: Vec<Case> = vec![
        (
            AllocatableReservation::NONE,
            vec![],
            vec![],
            vec![
                ("cpu", Some("4")),
                ("memory", Some("16393756Ki")),
                ("ephemeral-storage", Some("102687672Ki")),
            ],
        ),
        (
            AllocatableReservation {
                cpu_milli: 500,
                memory_bytes: 1 << 30,
                memory_fraction: 0.0,
                ephemeral_storage_bytes: 1 << 30,
                ephemeral_storage_fraction: 0.0,
            },
            vec![],
            vec![],
            vec![
                ("cpu", Some("3500m")),
                ("memory", Some("15345180Ki")),
                ("ephemeral-storage", Some("101639096Ki")),
            ],
        ),
        // Huge pages come out of allocatable memory.
        (
            AllocatableReservation::NONE,
            vec![(2 << 20, 512)],
            vec![],
            vec![
                ("memory", Some("15345180Ki")),
                ("hugepages-2Mi", Some("1Gi")),
            ],
        ),
        // Never negative.
        (
            AllocatableReservation {
                cpu_milli: 10_000,
                ..AllocatableReservation::NONE
            },
            vec![],
            vec![],
            vec![("cpu", Some("0"))],
        ),
        // An extended resource someone advertised in capacity becomes allocatable; one that
        // left capacity leaves allocatable.
        (
            AllocatableReservation::NONE,
            vec![],
            vec![("example.com/dongle", "4")],
            vec![
                ("example.com/dongle", Some("4")),
                ("example.com/gone", None),
            ],
        ),
    ];
    for (reserved, hugepages, extra_capacity, want) in cases {
        let mut machine = machine();
        machine.hugepages = hugepages;
        let mut inputs = inputs(&machine);
        inputs.reserved = reserved;
        let previous = NodeStatus {
            capacity: Some(
                extra_capacity
                    .iter()
                    .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
                    .collect(),
            ),
            allocatable: Some(
                [("example.com/gone".to_string(), K8sQuantity("1".into()))]
                    .into_iter()
                    .collect(),
            ),
            ..Default::default()
        };
        let status = build_node_status(Some(&previous), &inputs, ts("2026-01-01T00:00:00Z"));
        let allocatable = status.allocatable.unwrap();
        for (name, value) in want {
            assert_eq!(
                allocatable.get(name).map(|q| q.0.as_str()),
                value,
                "{name} with {reserved:?}"
            );
        }
    }
}

#[test]
fn conditions_table() {
    let t0 = "2026-01-01T00:00:00Z";
    let t1 = ts("2026-01-01T00:10:00Z");
    let old = |kind: &str, status: &str, reason: &str| NodeCondition {
        type_: kind.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some("old message".into()),
        last_heartbeat_time: Some(Time(ts(t0))),
        last_transition_time: Some(Time(ts(t0))),
    };
    // (previous conditions, pressure, health, condition type,
    //  want (status, reason, message, transition time))
    type Case = (
        Vec<NodeCondition>,
        Pressure,
        Vec<String>,
        &'static str,
        (&'static str, &'static str, &'static str, &'static str),
    );
    let t1s = "2026-01-01T00:10:00Z";
    let cases: Vec<Case> = vec![
        // Unchanged status keeps the transition time (and, like the kubelet, the old text).
        (
            vec![old("MemoryPressure", "False", "KubeletHasSufficientMemory")],
            Pressure::default(),
            Vec::new(),
            "MemoryPressure",
            ("False", "KubeletHasSufficientMemory", "old message", t0),
        ),
        // The eviction manager reports pressure: True now.
        (
            vec![old("MemoryPressure", "False", "KubeletHasSufficientMemory")],
            Pressure {
                memory: true,
                ..Default::default()
            },
            Vec::new(),
            "MemoryPressure",
            (
                "True",
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
                t1s,
            ),
        ),
        (
            vec![],
            Pressure {
                disk: true,
                ..Default::default()
            },
            Vec::new(),
            "DiskPressure",
            (
                "True",
                "KubeletHasDiskPressure",
                "kubelet has disk pressure",
                t1s,
            ),
        ),
        (
            vec![],
            Pressure {
                pid: true,
                ..Default::default()
            },
            Vec::new(),
            "PIDPressure",
            (
                "True",
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available",
                t1s,
            ),
        ),
        // The node lifecycle controller set Unknown while nodelet was away: back to False.
        (
            vec![old("DiskPressure", "Unknown", "NodeStatusUnknown")],
            Pressure::default(),
            Vec::new(),
            "DiskPressure",
            (
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
                t1s,
            ),
        ),
        // Ready is rebuilt each time but keeps its transition time while True.
        (
            vec![old("Ready", "True", "KubeletReady")],
            Pressure::default(),
            Vec::new(),
            "Ready",
            (
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
                t0,
            ),
        ),
        (
            vec![old("Ready", "True", "KubeletReady")],
            Pressure::default(),
            vec![
                "PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s".into(),
            ],
            "Ready",
            (
                "False",
                "KubeletNotReady",
                "PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s",
                t1s,
            ),
        ),
        (
            vec![old("Ready", "False", "KubeletNotReady")],
            Pressure::default(),
            vec!["container runtime is down".into()],
            "Ready",
            ("False", "KubeletNotReady", "container runtime is down", t0),
        ),
        (
            vec![old("Ready", "Unknown", "NodeStatusUnknown")],
            Pressure::default(),
            Vec::new(),
            "Ready",
            (
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
                t1s,
            ),
        ),
    ];
    let machine = machine();
    for (previous, pressure, health, kind, want) in cases {
        let mut inputs = inputs(&machine);
        inputs.pressure = pressure;
        inputs.health = health.clone();
        let previous_status = NodeStatus {
            conditions: Some(previous.clone()),
            ..Default::default()
        };
        let status = build_node_status(Some(&previous_status), &inputs, t1);
        let c = condition(&status, kind);
        let got = (
            c.status.as_str(),
            c.reason.as_deref().unwrap_or(""),
            c.message.as_deref().unwrap_or(""),
            c.last_transition_time.as_ref().unwrap().0.to_string(),
        );
        assert_eq!(
            got,
            (want.0, want.1, want.2, want.3.to_string()),
            "{kind} from {previous:?} with {pressure:?} {health:?}"
        );
        assert_eq!(
            c.last_heartbeat_time.unwrap().0,
            t1,
            "heartbeat always moves"
        );
    }
}

#[test]
fn missing_capacity_makes_the_node_not_ready() {
    let mut machine = machine();
    machine.ephemeral_storage_capacity = None;
    let cases = [
        (
            vec![],
            "missing node capacity for resources: ephemeral-storage",
        ),
        (
            vec!["container runtime is down".to_string()],
            "[container runtime is down, missing node capacity for resources: ephemeral-storage]",
        ),
        (
            // The runtime down and its network not ready, as one aggregate (flat, as Go's).
            vec![
                "container runtime is down".to_string(),
                "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized".to_string(),
            ],
            "[container runtime is down, container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized, missing node capacity for resources: ephemeral-storage]",
        ),
    ];
    for (health, want) in cases {
        let mut inputs = inputs(&machine);
        inputs.health = health;
        let status = build_node_status(None, &inputs, ts("2026-01-01T00:00:00Z"));
        let ready = condition(&status, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.message.as_deref(), Some(want));
    }
}

#[test]
fn a_node_shutting_down_is_not_ready() {
    let full = machine();
    let mut no_storage = machine();
    no_storage.ephemeral_storage_capacity = None;
    let cases = [
        (&full, vec![], "node is shutting down"),
        (
            &full,
            vec!["container runtime is down".to_string()],
            "[container runtime is down, node is shutting down]",
        ),
        (
            &no_storage,
            vec![],
            "[node is shutting down, missing node capacity for resources: ephemeral-storage]",
        ),
    ];
    for (machine, health, want) in cases {
        let mut inputs = inputs(machine);
        inputs.health = health;
        inputs.shutting_down = true;
        let status = build_node_status(None, &inputs, ts("2026-01-01T00:00:00Z"));
        let ready = condition(&status, "Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("KubeletNotReady"))
        );
        assert_eq!(ready.message.as_deref(), Some(want));
    }
}

#[test]
fn foreign_conditions_and_fields_are_kept_in_place() {
    let machine = machine();
    let previous = NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "NetworkUnavailable".into(),
            status: "False".into(),
            reason: Some("RouteCreated".into()),
            ..Default::default()
        }]),
        volumes_in_use: Some(vec!["kubernetes.io/csi/x".into()]),
        ..Default::default()
    };
    let status = build_node_status(
        Some(&previous),
        &inputs(&machine),
        ts("2026-01-01T00:00:00Z"),
    );
    let types: Vec<&str> = status
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(
        types,
        [
            "NetworkUnavailable",
            "MemoryPressure",
            "DiskPressure",
            "PIDPressure",
            "Ready"
        ]
    );
    assert_eq!(status.volumes_in_use, previous.volumes_in_use);
}

#[test]
fn no_internal_ip_reports_only_the_hostname() {
    let machine = machine();
    let mut inputs = inputs(&machine);
    inputs.internal_ip = None;
    let status = build_node_status(None, &inputs, ts("2026-01-01T00:00:00Z"));
    assert_eq!(
        serde_json::to_value(status.addresses).unwrap(),
        json!([{"type": "Hostname", "address": "node-1"}])
    );
}

#[test]
fn changed_table() {
    let machine = machine();
    let mut base = build_node_status(None, &inputs(&machine), ts("2026-01-01T00:00:00Z"));
    // One image known by its ID only (no tag, no digest), one with a name.
    base.images = Some(vec![
        ContainerImage {
            names: Some(Vec::new()),
            size_bytes: Some(10),
        },
        ContainerImage {
            names: Some(vec!["localhost/a:1".into()]),
            size_bytes: Some(20),
        },
    ]);
    type Mutation = fn(&mut NodeStatus);
    let cases: Vec<(&str, Mutation, bool)> = vec![
        ("identical", |_| {}, false),
        (
            "heartbeat only",
            |s| {
                for c in s.conditions.as_mut().unwrap() {
                    c.last_heartbeat_time = Some(Time(ts("2026-01-01T01:00:00Z")));
                }
            },
            false,
        ),
        (
            "same quantity, other spelling",
            |s| {
                s.capacity
                    .as_mut()
                    .unwrap()
                    .insert("memory".into(), K8sQuantity("16787206144".into()));
            },
            false,
        ),
        (
            "conditions in another order",
            |s| s.conditions.as_mut().unwrap().reverse(),
            false,
        ),
        (
            "condition status",
            |s| s.conditions.as_mut().unwrap()[3].status = "False".into(),
            true,
        ),
        (
            "capacity value",
            |s| {
                s.capacity
                    .as_mut()
                    .unwrap()
                    .insert("pods".into(), K8sQuantity("111".into()));
            },
            true,
        ),
        (
            "address",
            |s| s.addresses.as_mut().unwrap()[0].address = "10.0.0.6".into(),
            true,
        ),
        (
            "boot id",
            |s| s.node_info.as_mut().unwrap().boot_id = "other".into(),
            true,
        ),
        (
            "a condition less",
            |s| {
                s.conditions.as_mut().unwrap().pop();
            },
            true,
        ),
        (
            // The API server returns `names: []` as absent (an image known by ID only).
            "an image's empty names absent",
            |s| {
                for image in s.images.get_or_insert_with(Vec::new) {
                    if image.names.as_ref().is_some_and(Vec::is_empty) {
                        image.names = None;
                    }
                }
            },
            false,
        ),
        (
            "an image's names emptied",
            |s| {
                if let Some(image) = s.images.as_mut().and_then(|i| i.last_mut()) {
                    image.names = Some(Vec::new());
                }
            },
            true,
        ),
        (
            "an image less",
            |s| {
                s.images.as_mut().unwrap().pop();
            },
            true,
        ),
    ];
    for (name, mutate, want) in cases {
        let mut other = base.clone();
        mutate(&mut other);
        assert_eq!(node_status_changed(&base, &other), want, "{name}");
        assert_eq!(
            node_status_changed(&other, &base),
            want,
            "{name} (reversed)"
        );
        assert_eq!(
            node_status_differences(&base, &other).is_empty(),
            !want,
            "{name}: differences agree with changed"
        );
    }
}

#[test]
fn node_status_differences_name_the_fields() {
    let machine = machine();
    let base = build_node_status(None, &inputs(&machine), ts("2026-01-01T00:00:00Z"));
    let mut dropped = base.clone();
    dropped.node_info.as_mut().unwrap().swap = Some(NodeSwapStatus {
        capacity: Some(1 << 30),
    });
    assert_eq!(
        node_status_differences(&dropped, &base),
        vec!["status.nodeInfo.swap".to_string()]
    );
    let mut not_ready = base.clone();
    for c in not_ready.conditions.as_mut().unwrap() {
        if c.type_ == CONDITION_READY {
            c.status = "Unknown".into();
        }
    }
    assert_eq!(
        node_status_differences(&not_ready, &base),
        vec!["status.conditions[type=Ready].status".to_string()]
    );
    let mut empty_images = base.clone();
    empty_images.images = Some(Vec::new());
    assert!(
        node_status_differences(&base, &empty_images).is_empty(),
        "an empty list is an absent one"
    );
}

#[test]
fn patch_table() {
    let machine = machine();
    let t0 = ts("2026-01-01T00:00:00Z");
    let base = build_node_status(None, &inputs(&machine), t0);
    let t = "2026-01-01T00:05:00Z";
    type Mutation = fn(&mut NodeStatus);
    let cases: Vec<(&str, Mutation, Value)> = vec![
        ("nothing changed", |_| {}, json!({"status": {}})),
        (
            "a capacity value: only that key",
            |s| {
                s.capacity
                    .as_mut()
                    .unwrap()
                    .insert("pods".into(), K8sQuantity("111".into()));
            },
            json!({"status": {"capacity": {"pods": "111"}}}),
        ),
        (
            "one condition: in full, merged by type",
            |s| {
                let c = &mut s.conditions.as_mut().unwrap()[0];
                c.last_heartbeat_time = Some(Time("2026-01-01T00:05:00Z".parse().unwrap()));
            },
            json!({"status": {"conditions": [{
                "type": "MemoryPressure", "status": "False",
                "reason": "KubeletHasSufficientMemory",
                "message": "kubelet has sufficient memory available",
                "lastHeartbeatTime": t, "lastTransitionTime": "2026-01-01T00:00:00Z"
            }]}}),
        ),
        (
            "addresses: replaced as a whole",
            |s| s.addresses.as_mut().unwrap()[0].address = "10.0.0.6".into(),
            json!({"status": {"addresses": [
                {"type": "InternalIP", "address": "10.0.0.6"},
                {"type": "Hostname", "address": "node-1"},
                {"$patch": "replace"}
            ]}}),
        ),
        (
            "a nodeInfo field",
            |s| s.node_info.as_mut().unwrap().boot_id = "new-boot".into(),
            json!({"status": {"nodeInfo": {"bootID": "new-boot"}}}),
        ),
        (
            "a removed capacity key becomes null",
            |s| {
                s.capacity.as_mut().unwrap().remove("hugepages-1Gi");
            },
            json!({"status": {"capacity": {"hugepages-1Gi": null}}}),
        ),
        (
            "a condition type gone",
            |s| {
                s.conditions.as_mut().unwrap().remove(0);
            },
            json!({"status": {"conditions": [{"type": "MemoryPressure", "$patch": "delete"}]}}),
        ),
    ];
    for (name, mutate, want) in cases {
        let mut new = base.clone();
        mutate(&mut new);
        assert_eq!(status_patch(&base, &new), want, "{name}");
    }
}

#[test]
fn patch_sets_every_field_of_an_empty_status() {
    let machine = machine();
    let new = build_node_status(None, &inputs(&machine), ts("2026-01-01T00:00:00Z"));
    let patch = status_patch(&NodeStatus::default(), &new);
    assert_eq!(patch["status"], serde_json::to_value(&new).unwrap());
}

#[test]
fn quantity_format_table() {
    let binary = [
        (0, "0"),
        (512, "512"),
        (1000, "1k"),
        (1024, "1Ki"),
        (2 << 20, "2Mi"),
        (1 << 30, "1Gi"),
        (16_384_000 * 1024, "16000Mi"),
        (16_393_756 * 1024, "16393756Ki"),
        (94_580_335_255, "94580335255"),
        (1536 * 1024 * 1024, "1536Mi"),
    ];
    for (bytes, want) in binary {
        assert_eq!(format_binary_si(bytes), want, "{bytes} bytes");
    }
    let decimal = [
        (0, "0"),
        (4000, "4"),
        (1500, "1500m"),
        (110_000, "110"),
        (1_000_000, "1k"),
        (250, "250m"),
    ];
    for (milli, want) in decimal {
        assert_eq!(format_decimal_si_milli(milli), want, "{milli}m");
    }
}

#[test]
fn extended_resource_table() {
    let cases = [
        ("cpu", false),
        ("hugepages-2Mi", false),
        ("kubernetes.io/foo", false),
        ("example.com/dongle", true),
        ("nvidia.com/gpu", true),
        ("requests.example.com/x", false),
    ];
    for (name, want) in cases {
        assert_eq!(is_extended_resource(name), want, "{name}");
    }
}

#[test]
fn kubelet_version_sorts_as_the_kubernetes_release() {
    let version = kubelet_version();
    assert_eq!(
        version,
        format!("v1.37.0+nodelet.{}", env!("CARGO_PKG_VERSION"))
    );
}

fn image(id: &str, size: u64, digests: &[&str], tags: &[&str]) -> Image {
    Image {
        id: id.into(),
        size,
        repo_digests: digests.iter().map(|s| s.to_string()).collect(),
        repo_tags: tags.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn names(images: &[ContainerImage]) -> Vec<Vec<String>> {
    images
        .iter()
        .map(|i| i.names.clone().unwrap_or_default())
        .collect()
}

#[test]
fn images_table() {
    let list = vec![
        image("sha256:a", 10, &[], &["small:1"]),
        image("sha256:b", 300, &["big@sha256:1"], &["big:1", "big:latest"]),
        image("sha256:c", 50, &[], &["mid:1"]),
        image("sha256:d", 50, &[], &["mid:2"]),
        image(
            "sha256:e",
            5,
            &["many@sha256:1", "many@sha256:2"],
            &["many:1", "many:2", "many:3", "many:4"],
        ),
    ];
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // Largest first; equal sizes by descending ID; digests before tags; at most 5 names.
    let all = node_images(&list, None);
    assert_eq!(
        names(&all),
        vec![
            s(&["big@sha256:1", "big:1", "big:latest"]),
            s(&["mid:2"]),
            s(&["mid:1"]),
            s(&["small:1"]),
            s(&[
                "many@sha256:1",
                "many@sha256:2",
                "many:1",
                "many:2",
                "many:3"
            ]),
        ]
    );
    assert_eq!(all[0].size_bytes, Some(300));
    let cases: [(Option<u32>, usize); 4] = [(Some(2), 2), (Some(0), 0), (Some(50), 5), (None, 5)];
    for (max, want) in cases {
        assert_eq!(node_images(&list, max).len(), want, "max {max:?}");
    }
}

#[test]
fn images_reach_the_status_and_none_keeps_the_reported_list() {
    let machine = machine();
    let listed = node_images(&[image("sha256:p", 700, &[], &["localhost/pause:1"])], None);
    let mut inputs = inputs(&machine);
    inputs.images = Some(&listed);
    let with = build_node_status(None, &inputs, ts("2026-01-01T00:00:00Z"));
    assert_eq!(
        names(with.images.as_deref().unwrap()),
        vec![vec!["localhost/pause:1".to_string()]]
    );
    // The runtime did not answer this time: the list the API server has stays.
    inputs.images = None;
    let kept = build_node_status(Some(&with), &inputs, ts("2026-01-01T00:00:10Z"));
    assert_eq!(kept.images, with.images);
    assert!(!node_status_changed(&with, &kept));
    // An empty list is omitted, as the kubelet's nil slice.
    inputs.images = Some(&[]);
    let empty = build_node_status(Some(&with), &inputs, ts("2026-01-01T00:00:20Z"));
    assert_eq!(empty.images, None);
    assert!(node_status_changed(&with, &empty));
    assert_eq!(status_patch(&with, &empty)["status"]["images"], Value::Null);
}

#[test]
fn node_events_table() {
    let machine = machine();
    let t0 = ts("2026-01-01T00:00:00Z");
    let healthy = build_node_status(None, &inputs(&machine), t0);
    let mut sick_inputs = inputs(&machine);
    sick_inputs.health = vec!["container runtime is down".into()];
    sick_inputs.pressure = Pressure {
        memory: true,
        disk: false,
        pid: true,
    };
    let sick = build_node_status(Some(&healthy), &sick_inputs, t0);
    let mut rebooted = healthy.clone();
    rebooted.node_info.as_mut().unwrap().boot_id = "b-id-2".into();
    let mut unknown = healthy.clone();
    for c in unknown.conditions.as_mut().unwrap() {
        c.status = "Unknown".into();
    }
    // (case, previous, new, first report, events as (type, reason))
    type Case<'a> = (
        &'a str,
        &'a NodeStatus,
        &'a NodeStatus,
        bool,
        &'a [(&'a str, &'a str)],
    );
    let cases: [Case<'_>; 7] = [
        (
            "first report announces every condition",
            &healthy,
            &healthy,
            true,
            &[
                ("Normal", "NodeHasSufficientMemory"),
                ("Normal", "NodeHasNoDiskPressure"),
                ("Normal", "NodeHasSufficientPID"),
                ("Normal", "NodeReady"),
            ],
        ),
        ("steady: nothing", &healthy, &healthy, false, &[]),
        (
            "pressure and not ready",
            &healthy,
            &sick,
            false,
            &[
                ("Normal", "NodeHasInsufficientMemory"),
                ("Normal", "NodeHasInsufficientPID"),
                ("Normal", "NodeNotReady"),
            ],
        ),
        (
            "recovery",
            &sick,
            &healthy,
            false,
            &[
                ("Normal", "NodeHasSufficientMemory"),
                ("Normal", "NodeHasSufficientPID"),
                ("Normal", "NodeReady"),
            ],
        ),
        (
            "the node controller had set Unknown",
            &unknown,
            &healthy,
            false,
            &[
                ("Normal", "NodeHasSufficientMemory"),
                ("Normal", "NodeHasNoDiskPressure"),
                ("Normal", "NodeHasSufficientPID"),
                ("Normal", "NodeReady"),
            ],
        ),
        ("reported Unknown: no event", &healthy, &unknown, false, &[]),
        (
            "new boot id",
            &healthy,
            &rebooted,
            false,
            &[("Warning", "Rebooted")],
        ),
    ];
    for (name, previous, new, first, want) in cases {
        let got: Vec<(&str, &str)> = node_status_events(previous, new, "node-1", first)
            .iter()
            .map(|e| (e.type_.as_str(), e.reason))
            .collect();
        assert_eq!(got, want.to_vec(), "{name}");
    }
    let ready = node_status_events(&sick, &healthy, "node-1", false);
    assert_eq!(
        ready.last().unwrap().message,
        "Node node-1 status is now: NodeReady"
    );
    let reboot = node_status_events(&healthy, &rebooted, "node-1", false);
    assert_eq!(
        reboot[0].message,
        "Node node-1 has been rebooted, boot id: b-id-2"
    );
}

fn config(extra: &str) -> crate::config::Config {
    let text = format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nnodeName: n\n{extra}");
    crate::config::parse(
        &text,
        std::path::Path::new("c.yaml"),
        &crate::config::Environment {
            hostname: "n".into(),
        },
    )
    .unwrap()
    .config
}

/// The reservation of a parsed configuration, as the agent builds it.
fn reservation(cfg: &crate::config::Config) -> AllocatableReservation {
    AllocatableReservation::new(
        cfg.kube_reserved.plus(cfg.system_reserved),
        &cfg.eviction.thresholds,
    )
}

#[test]
fn reservation_adds_kube_and_system_reserved_to_the_eviction_thresholds() {
    let cfg = config("kubeReserved: {cpu: 100m, memory: 1Gi, ephemeral-storage: 1Gi}\nsystemReserved: {cpu: 150m, memory: 512Mi}\n");
    assert_eq!(
        reservation(&cfg),
        AllocatableReservation {
            cpu_milli: 250,
            memory_bytes: (100 << 20) + (1 << 30) + (512 << 20),
            memory_fraction: 0.0,
            ephemeral_storage_bytes: 1 << 30,
            ephemeral_storage_fraction: 0.1,
        }
    );
}

/// The configured hard thresholds, not the defaults, come out of allocatable (the kubelet's
/// `hardEvictionReservation` over the parsed `evictionHard`).
#[test]
fn reservation_follows_the_configured_hard_thresholds() {
    let mi = 1i64 << 20;
    // (configuration lines, memory reserved of 16 GiB, ephemeral storage reserved of 100 GiB)
    let cases: Vec<(&str, i64, i64)> = vec![
        // 10% as the kubelet keeps it: float32(0.1) of the capacity.
        ("", 100 * mi, ((100i64 << 30) as f64 * f64::from(0.1f32)) as i64),
        (
            "evictionHard: {memory.available: 500Mi, nodefs.available: 5Gi}\n",
            500 * mi,
            5 * 1024 * mi,
        ),
        (
            "evictionHard: {memory.available: 5%, nodefs.available: 12.5%}\n",
            // int64(float64(capacity) * float64(float32(0.05))), as the kubelet computes it.
            ((16i64 << 30) as f64 * f64::from(0.05f32)) as i64,
            ((100i64 << 30) as f64 * f64::from(0.125f32)) as i64,
        ),
        // A given evictionHard replaces the defaults: nothing reserved for memory.
        ("evictionHard: {nodefs.available: 1Gi}\n", 0, 1024 * mi),
        // Merged with the defaults: memory's 100Mi comes back.
        (
            "evictionHard: {nodefs.available: 1Gi}\nmergeDefaultEvictionSettings: true\n",
            100 * mi,
            1024 * mi,
        ),
        // Soft thresholds and other signals reserve nothing; kubeReserved adds up.
        (
            "evictionHard: {memory.available: 200Mi, pid.available: 10%}\nevictionSoft: {memory.available: 1Gi, nodefs.available: 20%}\nevictionSoftGracePeriod: {memory.available: 1m, nodefs.available: 1m}\nkubeReserved: {memory: 1Gi}\n",
            200 * mi + 1024 * mi,
            0,
        ),
    ];
    for (extra, memory, storage) in cases {
        let r = reservation(&config(extra));
        assert_eq!(r.memory_reserved(16 << 30), memory, "memory: {extra}");
        assert_eq!(
            r.ephemeral_storage_reserved(100 << 30),
            storage,
            "ephemeral-storage: {extra}"
        );
    }
}

/// `status.runtimeHandlers` as the kubelet's setter makes it: every handler the runtime lists,
/// both features stated; none listed (containerd 1.6) leaves the field out, and replaces a list
/// the API server had.
#[test]
fn runtime_handlers_from_the_runtimes_status() {
    use crate::cri::api::{RuntimeHandler, RuntimeHandlerFeatures};
    use k8s_openapi::api::core::v1::{NodeRuntimeHandler, NodeRuntimeHandlerFeatures};
    let h = |name: &str, rro: bool, userns: bool| NodeRuntimeHandler {
        name: Some(name.into()),
        features: Some(NodeRuntimeHandlerFeatures {
            recursive_read_only_mounts: Some(rro),
            user_namespaces: Some(userns),
        }),
    };
    let cri = |name: &str, features: Option<(bool, bool)>| RuntimeHandler {
        name: name.into(),
        features: features.map(|(r, u)| RuntimeHandlerFeatures {
            recursive_read_only_mounts: r,
            user_namespaces: u,
        }),
    };
    let cases = [
        (vec![], vec![]),
        (
            // containerd 2.x: the default handler ("") first, then each named one.
            vec![
                cri("", Some((true, true))),
                cri("runc-alt", Some((true, false))),
            ],
            vec![h("", true, true), h("runc-alt", true, false)],
        ),
        // No features stated: both false, as the kubelet's zero values.
        (vec![cri("kata", None)], vec![h("kata", false, false)]),
    ];
    for (listed, want) in cases {
        assert_eq!(node_runtime_handlers(&listed), want, "{listed:?}");
    }
    let machine = machine();
    let listed = node_runtime_handlers(&[cri("runc", Some((true, false)))]);
    let with = NodeStatusInputs {
        runtime_handlers: &listed,
        ..inputs(&machine)
    };
    let status = build_node_status(None, &with, ts("2026-01-01T00:00:00Z"));
    assert_eq!(status.runtime_handlers.as_deref(), Some(&listed[..]));
    let status = build_node_status(Some(&status), &inputs(&machine), ts("2026-01-01T00:00:10Z"));
    assert_eq!(
        status.runtime_handlers, None,
        "a list no longer there is dropped"
    );
}

/// `status.features.supplementalGroupsPolicy` states what the runtime's `Status` says; a
/// runtime that states no features (containerd 1.6) leaves the field out.
#[test]
fn features_from_the_runtimes_status() {
    let machine = machine();
    for (stated, want) in [
        (None, None),
        (Some(false), Some(false)),
        (Some(true), Some(true)),
    ] {
        let features = stated.map(|b| crate::cri::api::RuntimeFeatures {
            supplemental_groups_policy: b,
        });
        let with = NodeStatusInputs {
            runtime_features: features.as_ref(),
            ..inputs(&machine)
        };
        let status = build_node_status(None, &with, ts("2026-01-01T00:00:00Z"));
        assert_eq!(
            status.features.and_then(|f| f.supplemental_groups_policy),
            want,
            "{stated:?}"
        );
    }
}

/// `status.volumesInUse` is the volume manager's list once it has synced; before that the API
/// server's list stands (the kubelet's `VolumesInUse` setter), and an empty list clears it.
#[test]
fn volumes_in_use_once_the_volume_manager_has_synced() {
    let machine = machine();
    let previous = NodeStatus {
        volumes_in_use: Some(vec!["kubernetes.io/csi/old^h".into()]),
        ..Default::default()
    };
    let now = ts("2026-01-01T00:00:00Z");
    let listed = ["kubernetes.io/csi/csi.example.com^vol-1".to_string()];
    let none: [String; 0] = [];
    // (what the volume manager reports, the status wanted)
    type Case<'a> = (Option<&'a [String]>, Option<Vec<String>>);
    let cases: [Case; 3] = [
        (None, previous.volumes_in_use.clone()),
        (Some(&listed), Some(listed.to_vec())),
        (Some(&none), None),
    ];
    for (reported, want) in cases {
        let with = NodeStatusInputs {
            volumes_in_use: reported,
            ..inputs(&machine)
        };
        let status = build_node_status(Some(&previous), &with, now);
        assert_eq!(status.volumes_in_use, want, "{reported:?}");
    }
}

/// `nodeInfo.swap` as the kubelet sets it: the capacity of a node with swap; nothing on a node
/// without (the API server refuses a capacity of 0), where a value already there stays.
#[test]
fn swap_is_reported_only_by_a_node_that_has_it() {
    let swap = |s: &NodeStatus| s.node_info.as_ref().and_then(|i| i.swap.clone());
    let no_swap = machine();
    let mut with_swap = machine();
    with_swap.swap_capacity = 1 << 30;
    let at = ts("2026-01-01T00:00:00Z");
    let without = build_node_status(None, &inputs(&no_swap), at);
    assert_eq!(swap(&without), None);
    let with = build_node_status(None, &inputs(&with_swap), at);
    assert_eq!(
        swap(&with),
        Some(NodeSwapStatus {
            capacity: Some(1 << 30)
        })
    );
    let after = build_node_status(Some(&with), &inputs(&no_swap), at);
    assert_eq!(swap(&after), swap(&with), "left as it was");
}

/// With an external cloud provider the addresses are the cloud controller manager's once it set
/// them; before, the configured node IP, or without one only the hostname.
#[test]
fn an_external_cloud_providers_addresses_are_kept() {
    let machine = machine();
    let address = |type_: &str, address: &str| NodeAddress {
        type_: type_.into(),
        address: address.into(),
    };
    let ccm = NodeStatus {
        addresses: Some(vec![
            address("InternalIP", "172.31.0.9"),
            address("ExternalIP", "3.3.3.3"),
            address("Hostname", "ip-172-31-0-9"),
        ]),
        ..Default::default()
    };
    let none = NodeStatus::default();
    let configured = crate::node::CloudProvider::External {
        node_ip: Some("10.0.0.5".parse().unwrap()),
    };
    let unconfigured = crate::node::CloudProvider::External { node_ip: None };
    let ours = vec![
        address("InternalIP", "10.0.0.5"),
        address("Hostname", "node-1"),
    ];
    let cases = [
        (
            "no cloud: ours, over anything",
            crate::node::CloudProvider::None,
            &ccm,
            ours.clone(),
        ),
        (
            "external, the CCM's kept",
            configured,
            &ccm,
            ccm.addresses.clone().unwrap(),
        ),
        ("external, unset, nodeIP given", configured, &none, ours),
        (
            "external, unset, no nodeIP: the hostname only",
            unconfigured,
            &none,
            vec![address("Hostname", "node-1")],
        ),
    ];
    for (name, cloud, previous, want) in cases {
        let with = NodeStatusInputs {
            cloud,
            ..inputs(&machine)
        };
        let status = build_node_status(Some(previous), &with, ts("2026-01-01T00:00:00Z"));
        assert_eq!(status.addresses, Some(want), "{name}");
    }
}
