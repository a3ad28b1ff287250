//! The Node's status, built the way the kubelet's `nodestatus` setters build it, and the
//! decision whether (and what) to patch.
//!
//! [`build_node_status`] is pure: it takes the status the API server holds (or `None` when
//! registering), the node's facts and health, and `now`, and returns the new status. Like the
//! kubelet's setters it *updates* the previous status rather than replacing it, so fields other
//! agents own (extended resources in capacity, conditions set by node-problem-detector or a
//! CNI, images, volumes) survive, and a condition keeps its `lastTransitionTime` while its
//! status does not change.

use std::collections::BTreeMap;
use std::net::IpAddr;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeFeatures,
    NodeRuntimeHandler, NodeRuntimeHandlerFeatures, NodeStatus, NodeSwapStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Map, Value};

use crate::cri::api::{Image, RuntimeFeatures, RuntimeHandler};
use crate::events::EventType;
use crate::lifecycle::pressure::Pressure;
use crate::podspec::resources::NodeAllocatable;
use crate::quantity::Quantity;
use crate::stats::machine::{go_arch, MachineInfo};

/// The Kubernetes release whose API and kubelet behaviour nodelet follows (k8s-openapi `v1_37`).
pub const KUBERNETES_VERSION: &str = "v1.37.0";

/// What nodelet reports as `nodeInfo.kubeletVersion`: the Kubernetes version it follows, with
/// nodelet's own version as semver build metadata (`v1.37.0+nodelet.0.1.0`). Build metadata,
/// as k3s does (`v1.28.3+k3s1`), keeps version comparisons (`>= v1.37.0`) true; a pre-release
/// suffix (`-nodelet...`) would sort *before* v1.37.0.
pub fn kubelet_version() -> String {
    format!("{KUBERNETES_VERSION}+nodelet.{}", env!("CARGO_PKG_VERSION"))
}

pub const CONDITION_MEMORY_PRESSURE: &str = "MemoryPressure";
pub const CONDITION_DISK_PRESSURE: &str = "DiskPressure";
pub const CONDITION_PID_PRESSURE: &str = "PIDPressure";
pub const CONDITION_READY: &str = "Ready";

/// What is held back from capacity to get allocatable: kube/system reserved plus the hard
/// eviction thresholds (the kubelet's `GetNodeAllocatableReservation`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllocatableReservation {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    /// A hard `memory.available` threshold given as a share of capacity (`5%` → 0.05), an
    /// `f32` for the same reason as `ephemeral_storage_fraction`.
    pub memory_fraction: f32,
    pub ephemeral_storage_bytes: i64,
    /// A `nodefs.available` threshold given as a share of capacity (`10%` → 0.1). It is an
    /// `f32` because the kubelet's `ThresholdValue.Percentage` is one, and the reserved bytes
    /// (`int64(float64(capacity) * float64(percentage))`) must come out the same.
    pub ephemeral_storage_fraction: f32,
}

/// `GetThresholdQuantity` of a share: `int64(float64(capacity) * float64(percentage))`.
fn share(capacity: i64, fraction: f32) -> i64 {
    (capacity as f64 * f64::from(fraction)) as i64
}

impl AllocatableReservation {
    /// The kubelet's default hard eviction thresholds that reserve capacity:
    /// `memory.available<100Mi` and `nodefs.available<10%`.
    pub const KUBELET_DEFAULT: AllocatableReservation = AllocatableReservation {
        cpu_milli: 0,
        memory_bytes: 100 * 1024 * 1024,
        memory_fraction: 0.0,
        ephemeral_storage_bytes: 0,
        ephemeral_storage_fraction: 0.1,
    };

    /// `reserved` (`kubeReserved` + `systemReserved`) + the hard `memory.available` and
    /// `nodefs.available` thresholds among `thresholds` (`hardEvictionReservation` over the
    /// parsed `evictionHard`, defaults and `mergeDefaultEvictionSettings` included: a given
    /// `evictionHard` without `memory.available` reserves no memory for it, as the kubelet's).
    pub fn new(
        reserved: crate::config::reserved::Reserved,
        thresholds: &[crate::config::eviction::Threshold],
    ) -> AllocatableReservation {
        let eviction = AllocatableReservation::for_hard_thresholds(thresholds);
        AllocatableReservation {
            cpu_milli: reserved.cpu_milli,
            memory_bytes: eviction.memory_bytes.saturating_add(reserved.memory),
            ephemeral_storage_bytes: eviction
                .ephemeral_storage_bytes
                .saturating_add(reserved.ephemeral_storage),
            ..eviction
        }
    }

    /// What the hard `memory.available` and `nodefs.available` thresholds among `thresholds`
    /// hold back (soft ones, and every other signal, hold back nothing).
    pub fn for_hard_thresholds(
        thresholds: &[crate::config::eviction::Threshold],
    ) -> AllocatableReservation {
        use crate::config::eviction::{Signal, ThresholdValue};
        let mut out = AllocatableReservation::NONE;
        for t in thresholds.iter().filter(|t| t.is_hard()) {
            let (bytes, fraction) = match t.signal {
                Signal::MemoryAvailable => (&mut out.memory_bytes, &mut out.memory_fraction),
                Signal::NodeFsAvailable => (
                    &mut out.ephemeral_storage_bytes,
                    &mut out.ephemeral_storage_fraction,
                ),
                _ => continue,
            };
            match t.value {
                ThresholdValue::Quantity(q) => (*bytes, *fraction) = (q, 0.0),
                ThresholdValue::PartsPerMillion(ppm) => {
                    (*bytes, *fraction) = (0, (f64::from(ppm) / 1_000_000.0) as f32)
                }
            }
        }
        out
    }

    /// The memory held back of `capacity` bytes.
    pub fn memory_reserved(&self, capacity: i64) -> i64 {
        self.memory_bytes
            .saturating_add(share(capacity, self.memory_fraction))
    }

    /// The ephemeral storage held back of `capacity` bytes.
    pub fn ephemeral_storage_reserved(&self, capacity: i64) -> i64 {
        self.ephemeral_storage_bytes
            .saturating_add(share(capacity, self.ephemeral_storage_fraction))
    }

    pub const NONE: AllocatableReservation = AllocatableReservation {
        cpu_milli: 0,
        memory_bytes: 0,
        memory_fraction: 0.0,
        ephemeral_storage_bytes: 0,
        ephemeral_storage_fraction: 0.0,
    };
}

/// Everything the node status is computed from, besides the previous status and `now`.
#[derive(Debug, Clone)]
pub struct NodeStatusInputs<'a> {
    /// The Hostname address (the kubelet's `hostname`, which `nodeName` overrides).
    pub hostname: &'a str,
    /// The InternalIP address: `nodeIP` from the configuration, else the detected one.
    pub internal_ip: Option<IpAddr>,
    /// `cloudProvider`: with `external`, the addresses a cloud controller manager set are kept.
    pub cloud: super::CloudProvider,
    pub machine: &'a MachineInfo,
    pub max_pods: u32,
    pub reserved: AllocatableReservation,
    /// `<runtime name>://<runtime version>` from the CRI Version call (`containerd://1.6.20`).
    pub container_runtime_version: &'a str,
    pub kubelet_version: &'a str,
    /// `daemonEndpoints.kubeletEndpoint.Port`.
    pub kubelet_port: i32,
    pub pressure: Pressure,
    /// Why the runtime, the PLEG or the runtime's network is unhealthy (empty: healthy); the
    /// errors become the message of `Ready=False`.
    pub health: Vec<String>,
    /// The node is shutting down (graceful node shutdown): `Ready=False`,
    /// `node is shutting down`.
    pub shutting_down: bool,
    /// The images to list (see [`node_images`]); `None` when the runtime could not list them
    /// this time, which keeps the list the API server has.
    pub images: Option<&'a [ContainerImage]>,
    /// `status.runtimeHandlers`, from the runtime's `Status` ([`node_runtime_handlers`]).
    pub runtime_handlers: &'a [NodeRuntimeHandler],
    /// The runtime's `Status` features, for `status.features` (`None`: none stated).
    pub runtime_features: Option<&'a RuntimeFeatures>,
    /// `status.volumesInUse`: the unique names of the attachable volumes pods on this node use
    /// or should use (the volume manager's `GetVolumesInUse`, sorted); `None` until the volume
    /// manager has synced its state once, which keeps what the API server has (the kubelet's
    /// `VolumesInUse` setter).
    pub volumes_in_use: Option<&'a [String]>,
}

/// The kubelet's `RuntimeHandlers` setter: each handler the runtime's `Status` lists, by name
/// (`""` is the default handler), with both features stated, true or false. A runtime that
/// lists none (containerd 1.6) gives none, and the field is left out.
pub fn node_runtime_handlers(handlers: &[RuntimeHandler]) -> Vec<NodeRuntimeHandler> {
    handlers
        .iter()
        .map(|h| {
            let features = h.features.unwrap_or_default();
            NodeRuntimeHandler {
                name: Some(h.name.clone()),
                features: Some(NodeRuntimeHandlerFeatures {
                    recursive_read_only_mounts: Some(features.recursive_read_only_mounts),
                    user_namespaces: Some(features.user_namespaces),
                }),
            }
        })
        .collect()
}

/// The new status: `previous` (the API server's) updated with the node's current facts.
pub fn build_node_status(
    previous: Option<&NodeStatus>,
    inputs: &NodeStatusInputs<'_>,
    now: Timestamp,
) -> NodeStatus {
    // metav1.Time travels with second precision; computing with it keeps what is compared in
    // memory equal to what comes back from the API server.
    let now = Time(Timestamp::from_second(now.as_second()).unwrap_or(now));
    let mut status = previous.cloned().unwrap_or_default();
    status.addresses = addresses(previous, inputs);
    set_resources(&mut status, inputs);
    set_node_info(&mut status, inputs);
    status.daemon_endpoints = Some(NodeDaemonEndpoints {
        kubelet_endpoint: Some(DaemonEndpoint {
            port: inputs.kubelet_port,
        }),
    });
    if let Some(images) = inputs.images {
        status.images = (!images.is_empty()).then(|| images.to_vec());
    }
    // Always replaced: a runtime that stopped listing a handler no longer has it.
    status.runtime_handlers =
        (!inputs.runtime_handlers.is_empty()).then(|| inputs.runtime_handlers.to_vec());
    // The kubelet's `NodeFeatures` setter: set when the runtime states its features, else
    // left as it is.
    if let Some(features) = inputs.runtime_features {
        status.features = Some(NodeFeatures {
            supplemental_groups_policy: Some(features.supplemental_groups_policy),
        });
    }

    if let Some(volumes) = inputs.volumes_in_use {
        status.volumes_in_use = (!volumes.is_empty()).then(|| volumes.to_vec());
    }

    let conditions = status.conditions.get_or_insert_with(Vec::new);
    for (kind, under_pressure) in [
        (CONDITION_MEMORY_PRESSURE, inputs.pressure.memory),
        (CONDITION_DISK_PRESSURE, inputs.pressure.disk),
        (CONDITION_PID_PRESSURE, inputs.pressure.pid),
    ] {
        set_pressure_condition(conditions, kind, under_pressure, &now);
    }
    let missing = missing_capacities(status.capacity.as_ref());
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    set_ready_condition(
        conditions,
        ready_errors(&inputs.health, inputs.shutting_down, &missing),
        &now,
    );
    status
}

/// The kubelet's `NodeAddress` setter: the InternalIP and the Hostname. With an external cloud
/// provider, addresses the Node already has (the cloud controller manager's) are kept, and
/// without a configured `nodeIP` only the Hostname is set until the cloud controller manager
/// sets the rest.
fn addresses(
    previous: Option<&NodeStatus>,
    inputs: &NodeStatusInputs<'_>,
) -> Option<Vec<NodeAddress>> {
    let hostname = NodeAddress {
        type_: "Hostname".into(),
        address: inputs.hostname.to_string(),
    };
    if let super::CloudProvider::External { node_ip } = inputs.cloud {
        let existing = previous.and_then(|p| p.addresses.as_ref());
        if existing.is_some_and(|a| !a.is_empty()) {
            return existing.cloned();
        }
        if node_ip.is_none() {
            return Some(vec![hostname]);
        }
    }
    let mut addresses = Vec::with_capacity(2);
    if let Some(ip) = inputs.internal_ip {
        addresses.push(NodeAddress {
            type_: "InternalIP".into(),
            address: ip.to_string(),
        });
    }
    addresses.push(hostname);
    Some(addresses)
}

/// The node's allocatable cpu, memory and ephemeral storage: capacity minus the reservation
/// (never negative), huge pages out of memory. [`set_resources`] publishes exactly these in
/// `status.allocatable`, and the Downward API falls back to them (the kubelet reads its Node's
/// `status.allocatable`), so a pod sees what the Node says.
pub fn allocatable(machine: &MachineInfo, reserved: &AllocatableReservation) -> NodeAllocatable {
    let memory = to_i64(machine.memory_capacity);
    let hugepage_bytes: i64 = machine
        .hugepages
        .iter()
        .map(|(size, count)| to_i64(size.saturating_mul(*count)))
        .fold(0, i64::saturating_add);
    NodeAllocatable {
        cpu_milli: (i64::from(machine.num_cores) * 1000 - reserved.cpu_milli).max(0),
        memory: memory
            .saturating_sub(reserved.memory_reserved(memory))
            .saturating_sub(hugepage_bytes)
            .max(0),
        ephemeral_storage: machine.ephemeral_storage_capacity.map(|storage| {
            let storage = to_i64(storage);
            (storage - reserved.ephemeral_storage_reserved(storage)).max(0)
        }),
    }
}

/// Capacity and allocatable, as the kubelet's `MachineInfo` setter: our resources are set,
/// other keys stay, allocatable is capacity minus the reservation (never negative), and huge
/// pages come out of allocatable memory.
fn set_resources(status: &mut NodeStatus, inputs: &NodeStatusInputs<'_>) {
    let machine = inputs.machine;
    let reserved = &inputs.reserved;
    let cpu_milli = i64::from(machine.num_cores) * 1000;
    let memory = to_i64(machine.memory_capacity);
    let hugepages: Vec<(String, i64)> = machine
        .hugepages
        .iter()
        .map(|(size, count)| {
            (
                format!("hugepages-{}", format_binary_si(to_i64(*size))),
                to_i64(size.saturating_mul(*count)),
            )
        })
        .collect();

    let amounts = allocatable(machine, reserved);
    // (name, capacity, allocatable) of the resources nodelet owns.
    let mut ours: Vec<(String, String, String)> = vec![
        (
            "cpu".into(),
            format_decimal_si_milli(cpu_milli),
            format_decimal_si_milli(amounts.cpu_milli),
        ),
        (
            "memory".into(),
            format_binary_si(memory),
            format_binary_si(amounts.memory),
        ),
        (
            "pods".into(),
            format_decimal_si_milli(i64::from(inputs.max_pods) * 1000),
            format_decimal_si_milli(i64::from(inputs.max_pods) * 1000),
        ),
    ];
    if let (Some(storage), Some(allocatable)) = (
        machine.ephemeral_storage_capacity,
        amounts.ephemeral_storage,
    ) {
        ours.push((
            "ephemeral-storage".into(),
            format_binary_si(to_i64(storage)),
            format_binary_si(allocatable),
        ));
    }
    for (name, bytes) in &hugepages {
        ours.push((
            name.clone(),
            format_binary_si(*bytes),
            format_binary_si(*bytes),
        ));
    }

    let mut capacity = status.capacity.take().unwrap_or_default();
    let mut allocatable = status.allocatable.take().unwrap_or_default();
    for (name, cap, _) in &ours {
        capacity.insert(name.clone(), K8sQuantity(cap.clone()));
    }
    // Extended resources that left capacity leave allocatable too.
    allocatable.retain(|name, _| capacity.contains_key(name) || !is_extended_resource(name));
    // Keys others put in capacity (an extended resource advertised by hand) become
    // allocatable as they are: nothing is reserved for them.
    for (name, cap) in &capacity {
        allocatable.insert(name.clone(), cap.clone());
    }
    for (name, _, alloc) in ours {
        allocatable.insert(name, K8sQuantity(alloc));
    }
    status.capacity = Some(capacity);
    status.allocatable = Some(allocatable);
}

fn set_node_info(status: &mut NodeStatus, inputs: &NodeStatusInputs<'_>) {
    let machine = inputs.machine;
    let mut info: NodeSystemInfo = status.node_info.take().unwrap_or_default();
    info.machine_id = machine.machine_id.clone();
    info.system_uuid = machine.system_uuid.clone();
    info.boot_id = machine.boot_id.clone();
    info.kernel_version = machine.kernel_version.clone();
    info.os_image = machine.os_image.clone();
    info.container_runtime_version = inputs.container_runtime_version.to_string();
    info.kubelet_version = inputs.kubelet_version.to_string();
    info.operating_system = std::env::consts::OS.to_string();
    info.architecture = go_arch(std::env::consts::ARCH).to_string();
    // As the kubelet: only a node with swap says so; the API server refuses a capacity of 0
    // (`nodeSwapStatus.capacity` must be greater than zero), so without swap the field is left
    // as it was (absent on a new Node).
    if machine.swap_capacity != 0 {
        info.swap = Some(NodeSwapStatus {
            capacity: Some(to_i64(machine.swap_capacity)),
        });
    }
    status.node_info = Some(info);
}

/// The kubelet's Memory/Disk/PIDPressure setters: the heartbeat moves every time; status,
/// reason, message and transition time change only on a transition (a new condition starts
/// from `Unknown`, so it always transitions).
fn set_pressure_condition(
    conditions: &mut Vec<NodeCondition>,
    kind: &str,
    under_pressure: bool,
    now: &Time,
) {
    let index = match conditions.iter().position(|c| c.type_ == kind) {
        Some(i) => i,
        None => {
            conditions.push(NodeCondition {
                type_: kind.to_string(),
                status: "Unknown".into(),
                ..Default::default()
            });
            conditions.len() - 1
        }
    };
    let condition = &mut conditions[index];
    condition.last_heartbeat_time = Some(now.clone());
    let (status, reason, message) = pressure_condition_text(kind, under_pressure);
    if condition.status != status {
        condition.status = status.to_string();
        condition.reason = Some(reason.to_string());
        condition.message = Some(message.to_string());
        condition.last_transition_time = Some(now.clone());
    }
}

/// `(status, reason, message)` of a pressure condition, word for word the kubelet's.
pub fn pressure_condition_text(
    kind: &str,
    under_pressure: bool,
) -> (&'static str, &'static str, &'static str) {
    match (kind, under_pressure) {
        (CONDITION_MEMORY_PRESSURE, true) => (
            "True",
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
        ),
        (CONDITION_MEMORY_PRESSURE, false) => (
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        (CONDITION_DISK_PRESSURE, true) => (
            "True",
            "KubeletHasDiskPressure",
            "kubelet has disk pressure",
        ),
        (CONDITION_DISK_PRESSURE, false) => (
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        (_, true) => (
            "True",
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
        ),
        (_, false) => (
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
    }
}

/// The capacities without which the kubelet reports NotReady.
const REQUIRED_CAPACITIES: [&str; 4] = ["cpu", "memory", "pods", "ephemeral-storage"];

fn missing_capacities(capacity: Option<&BTreeMap<String, K8sQuantity>>) -> Vec<&'static str> {
    REQUIRED_CAPACITIES
        .into_iter()
        .filter(|r| !capacity.is_some_and(|c| c.contains_key(*r)))
        .collect()
}

/// The errors behind `Ready=False`, in the kubelet's order: runtime and network health, node
/// shutdown, then missing capacity.
fn ready_errors(health: &[String], shutting_down: bool, missing: &[&str]) -> Vec<String> {
    let mut errors = health.to_vec();
    if shutting_down {
        errors.push(crate::lifecycle::shutdown::NODE_SHUTTING_DOWN.to_string());
    }
    if !missing.is_empty() {
        errors.push(format!(
            "missing node capacity for resources: {}",
            missing.join(", ")
        ));
    }
    errors
}

/// The kubelet's `ReadyCondition` setter: the condition is rebuilt every time; its transition
/// time is kept while the status stays the same. Several errors read like Go's
/// `errors.NewAggregate`: `[first, second]`.
fn set_ready_condition(conditions: &mut Vec<NodeCondition>, errors: Vec<String>, now: &Time) {
    let (status, reason, message) = match errors.len() {
        0 => (
            "True",
            "KubeletReady",
            "kubelet is posting ready status".to_string(),
        ),
        1 => ("False", "KubeletNotReady", errors.concat()),
        _ => (
            "False",
            "KubeletNotReady",
            format!("[{}]", errors.join(", ")),
        ),
    };
    let mut condition = NodeCondition {
        type_: CONDITION_READY.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    };
    match conditions.iter_mut().find(|c| c.type_ == CONDITION_READY) {
        Some(existing) => {
            if existing.status == condition.status {
                condition.last_transition_time = existing.last_transition_time.clone();
            }
            *existing = condition;
        }
        None => conditions.push(condition),
    }
}

/// An extended resource: a domain-prefixed name outside `kubernetes.io/` that is not a
/// `requests.` quota name (`v1helper.IsExtendedResourceName`).
pub fn is_extended_resource(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    !native && !name.starts_with("requests.")
}

/// How many names of one image the node status lists (the kubelet's
/// `MaxNamesPerImageInNodeStatus`).
pub const MAX_NAMES_PER_IMAGE: usize = 5;

/// The kubelet's `Images` setter over the runtime's image list: largest first (equal sizes by
/// descending ID, as its `ByImageSize`), at most `max` images (`nodeStatusMaxImages`; `None`
/// lists all), each named by its digests and then its tags, at most
/// [`MAX_NAMES_PER_IMAGE`] names.
pub fn node_images(images: &[Image], max: Option<u32>) -> Vec<ContainerImage> {
    let mut sorted: Vec<&Image> = images.iter().collect();
    sorted.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| b.id.cmp(&a.id)));
    let limit = max.map_or(usize::MAX, |m| usize::try_from(m).unwrap_or(usize::MAX));
    sorted
        .into_iter()
        .take(limit)
        .map(|image| ContainerImage {
            names: Some(
                image
                    .repo_digests
                    .iter()
                    .chain(&image.repo_tags)
                    .take(MAX_NAMES_PER_IMAGE)
                    .cloned()
                    .collect(),
            ),
            size_bytes: Some(i64::try_from(image.size).unwrap_or(i64::MAX)),
        })
        .collect()
}

/// An event about the Node itself, as the kubelet's status setters record them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEvent {
    pub type_: EventType,
    pub reason: &'static str,
    pub message: String,
}

/// The event reason for a condition's new status (the kubelet's `recordNodeStatusEvent`
/// reasons); `None` for `Unknown` and conditions nodelet does not own.
fn condition_event_reason(kind: &str, status: &str) -> Option<&'static str> {
    Some(match (kind, status) {
        (CONDITION_MEMORY_PRESSURE, "True") => "NodeHasInsufficientMemory",
        (CONDITION_MEMORY_PRESSURE, "False") => "NodeHasSufficientMemory",
        (CONDITION_DISK_PRESSURE, "True") => "NodeHasDiskPressure",
        (CONDITION_DISK_PRESSURE, "False") => "NodeHasNoDiskPressure",
        (CONDITION_PID_PRESSURE, "True") => "NodeHasInsufficientPID",
        (CONDITION_PID_PRESSURE, "False") => "NodeHasSufficientPID",
        (CONDITION_READY, "True") => "NodeReady",
        (CONDITION_READY, "False") => "NodeNotReady",
        _ => return None,
    })
}

/// The events a reported status change means: `Rebooted` (a Warning) when the boot ID moved,
/// then one `Normal` event per owned condition whose status differs from `previous`, in the
/// kubelet's setter order. The first report after nodelet starts (`first_report`) announces
/// every condition, as the kubelet's events at startup do (the kubelet announces `Ready` only
/// at its first transition; nodelet says it at once).
pub fn node_status_events(
    previous: &NodeStatus,
    new: &NodeStatus,
    node_name: &str,
    first_report: bool,
) -> Vec<NodeEvent> {
    let mut events = Vec::new();
    let boot_id = |s: &NodeStatus| s.node_info.as_ref().map(|i| i.boot_id.clone());
    if let (Some(old), Some(now)) = (boot_id(previous), boot_id(new)) {
        if !old.is_empty() && old != now {
            events.push(NodeEvent {
                type_: EventType::Warning,
                reason: "Rebooted",
                message: format!("Node {node_name} has been rebooted, boot id: {now}"),
            });
        }
    }
    let status_of = |s: &NodeStatus, kind: &str| {
        s.conditions
            .as_ref()
            .and_then(|c| c.iter().find(|c| c.type_ == kind))
            .map(|c| c.status.clone())
    };
    for kind in [
        CONDITION_MEMORY_PRESSURE,
        CONDITION_DISK_PRESSURE,
        CONDITION_PID_PRESSURE,
        CONDITION_READY,
    ] {
        let Some(now) = status_of(new, kind) else {
            continue;
        };
        if !first_report && status_of(previous, kind).as_deref() == Some(now.as_str()) {
            continue;
        }
        if let Some(reason) = condition_event_reason(kind, &now) {
            events.push(NodeEvent {
                type_: EventType::Normal,
                reason,
                message: format!("Node {node_name} status is now: {reason}"),
            });
        }
    }
    events
}

/// Whether anything but heartbeat times differs (the kubelet's `nodeStatusHasChanged`).
/// Quantities compare by value and an empty list as an absent one, as `apiequality.Semantic`
/// does (`1Gi` equals `1024Mi`; an image without names is sent with `names: []`, which the API
/// server stores and returns as absent).
pub fn node_status_changed(original: &NodeStatus, new: &NodeStatus) -> bool {
    normalized(original) != normalized(new)
}

/// Where `new` differs from `original` besides heartbeat times, by field path
/// (`status.nodeInfo.swap`, `status.conditions[type=Ready].status`); empty when
/// [`node_status_changed`] is false. Sorted.
pub fn node_status_differences(original: &NodeStatus, new: &NodeStatus) -> Vec<String> {
    let mut out = Vec::new();
    crate::status::patch::diff_paths(&normalized(original), &normalized(new), "status", &mut out);
    out.sort();
    out.dedup();
    out
}

fn normalized(status: &NodeStatus) -> Value {
    let mut value = serde_json::to_value(status).unwrap_or(Value::Null);
    drop_empty_lists(&mut value);
    if let Some(conditions) = value.get_mut("conditions").and_then(Value::as_array_mut) {
        for condition in conditions.iter_mut() {
            if let Some(c) = condition.as_object_mut() {
                c.remove("lastHeartbeatTime");
            }
        }
        conditions.sort_by(|a, b| {
            let key = |v: &Value| {
                v.get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            key(a).cmp(&key(b))
        });
    }
    for field in ["capacity", "allocatable"] {
        if let Some(map) = value.get_mut(field).and_then(Value::as_object_mut) {
            for quantity in map.values_mut() {
                if let Some(parsed) = quantity.as_str().and_then(|s| Quantity::parse(s).ok()) {
                    *quantity = Value::String(format!("{parsed}"));
                }
            }
        }
    }
    value
}

/// Removes every empty list and null from the objects in `value`, at any depth: Go's
/// `apiequality.Semantic` takes a nil slice for an empty one, and the API server returns an
/// empty list it was sent as absent.
fn drop_empty_lists(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for v in map.values_mut() {
                drop_empty_lists(v);
            }
            map.retain(|_, v| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty()));
        }
        Value::Array(items) => items.iter_mut().for_each(drop_empty_lists),
        _ => {}
    }
}

/// The strategic merge patch that turns `original` into `new`, as `{"status": {...}}`:
/// changed fields only; conditions merged by type (each changed condition in full);
/// addresses replaced as a whole when they change, as the kubelet's
/// `fixupPatchForNodeStatusAddresses` does, because their merge key (`type`) cannot express a
/// changed list.
pub fn status_patch(original: &NodeStatus, new: &NodeStatus) -> Value {
    let original = serde_json::to_value(original).unwrap_or(Value::Null);
    let new = serde_json::to_value(new).unwrap_or(Value::Null);
    let empty = Map::new();
    let original = original.as_object().unwrap_or(&empty);
    let new = new.as_object().unwrap_or(&empty);
    let mut patch = Map::new();
    for (key, value) in new {
        let before = original.get(key);
        if before == Some(value) {
            continue;
        }
        let entry = match key.as_str() {
            "conditions" => conditions_patch(before, value),
            "addresses" => {
                let had_addresses = before
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty());
                match value.as_array() {
                    Some(list) if had_addresses => {
                        let mut list = list.clone();
                        list.push(json!({"$patch": "replace"}));
                        Some(Value::Array(list))
                    }
                    _ => Some(value.clone()),
                }
            }
            _ => match before {
                Some(before) => merge_diff(before, value),
                None => Some(value.clone()),
            },
        };
        if let Some(entry) = entry {
            patch.insert(key.clone(), entry);
        }
    }
    for key in original.keys() {
        if !new.contains_key(key) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    json!({ "status": patch })
}

/// Changed conditions in full (merged by `type`), and a `$patch: delete` for each type gone.
fn conditions_patch(before: Option<&Value>, after: &Value) -> Option<Value> {
    let none = Vec::new();
    let before = before.and_then(Value::as_array).unwrap_or(&none);
    let after = after.as_array().unwrap_or(&none);
    let type_of = |v: &Value| v.get("type").cloned().unwrap_or(Value::Null);
    let mut items: Vec<Value> = after
        .iter()
        .filter(|c| !before.contains(c))
        .cloned()
        .collect();
    for gone in before {
        if !after.iter().any(|c| type_of(c) == type_of(gone)) {
            items.push(json!({"type": type_of(gone), "$patch": "delete"}));
        }
    }
    (!items.is_empty()).then_some(Value::Array(items))
}

/// JSON merge diff: objects recurse (removed keys become null), anything else is replaced.
fn merge_diff(before: &Value, after: &Value) -> Option<Value> {
    if before == after {
        return None;
    }
    match (before.as_object(), after.as_object()) {
        (Some(b), Some(a)) => {
            let mut diff = Map::new();
            for (key, value) in a {
                match b.get(key) {
                    Some(old) => {
                        if let Some(d) = merge_diff(old, value) {
                            diff.insert(key.clone(), d);
                        }
                    }
                    None => {
                        diff.insert(key.clone(), value.clone());
                    }
                }
            }
            for key in b.keys() {
                if !a.contains_key(key) {
                    diff.insert(key.clone(), Value::Null);
                }
            }
            (!diff.is_empty()).then_some(Value::Object(diff))
        }
        _ => Some(after.clone()),
    }
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A count in the canonical `DecimalSI` form of Go's `resource.Quantity`, from thousandths:
/// `4000` → `4`, `1500` → `1500m`, `1000000` → `1k`, `0` → `0`.
pub fn format_decimal_si_milli(milli: i64) -> String {
    if milli == 0 {
        return "0".into();
    }
    const SUFFIXES: [&str; 8] = ["m", "", "k", "M", "G", "T", "P", "E"];
    let mut mantissa = milli;
    let mut index = 0;
    while mantissa % 1000 == 0 && index + 1 < SUFFIXES.len() {
        mantissa /= 1000;
        index += 1;
    }
    format!("{mantissa}{}", SUFFIXES[index])
}

/// A byte count in the canonical `BinarySI` form of Go's `resource.Quantity`: the largest
/// power-of-1024 suffix that divides it exactly (`16384000Ki`, `2Mi`); no suffix when none
/// does (`94580335255`); values below 1024 in `DecimalSI` as Go does (`0`, `512`).
pub fn format_binary_si(bytes: i64) -> String {
    if bytes.unsigned_abs() < 1024 {
        return format_decimal_si_milli(bytes * 1000);
    }
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let mut mantissa = bytes;
    let mut index = 0;
    while mantissa % 1024 == 0 && index + 1 < SUFFIXES.len() {
        mantissa /= 1024;
        index += 1;
    }
    format!("{mantissa}{}", SUFFIXES[index])
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
