//! What nodelet knows about the kubelet's configuration surface beyond the fields it implements:
//! the other `KubeletConfiguration` (v1beta1) fields, accepted with a warning so an operator can
//! bring an existing kubelet config, and the feature gates nodelet's behaviour depends on.

/// A `KubeletConfiguration` (v1beta1) field nodelet has no setting for: the values it accepts
/// because they are what nodelet does (or because the field has no effect in the kubelet
/// either, `why` says when), and the reason any other value is refused. Every field of the
/// kubelet's `types.go` is either implemented (`decode::IMPLEMENTED_FIELDS`) or here; a test
/// walks the list of the kubelet's fields (`tests/data/kubelet-config-v1beta1-fields.txt`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FixedField {
    pub name: &'static str,
    pub accepts: Accepts,
    /// Why these values and no others: what nodelet does instead.
    pub why: &'static str,
}

/// The values of a [`FixedField`] nodelet accepts. `null`, and `""` for strings, always stand
/// for "not set" (the kubelet defaults them), so they are accepted with every variant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Accepts {
    /// Any duration in Go syntax: the field changes nothing nodelet runs.
    AnyDuration,
    /// This duration, or `0s` (the kubelet's "unset").
    Duration(std::time::Duration),
    /// One of these strings.
    Strings(&'static [&'static str]),
    /// Any string: the field changes nothing nodelet runs.
    AnyString,
    /// This boolean.
    Bool(bool),
    /// An integer within these bounds, inclusive.
    IntIn(i64, i64),
    /// Nothing: an empty mapping or list.
    Empty,
}

impl Accepts {
    /// The accepted values as a user reads them in a refusal.
    pub fn describe(&self) -> String {
        match self {
            Accepts::AnyDuration => "any duration".into(),
            Accepts::Duration(d) => format!("{d:?} (or 0s, the default)"),
            Accepts::Strings([]) => "\"\" (unset)".into(),
            Accepts::Strings(values) => {
                let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
                quoted.join(" or ")
            }
            Accepts::AnyString => "any string".into(),
            Accepts::Bool(b) => b.to_string(),
            Accepts::IntIn(lo, hi) if lo == hi => lo.to_string(),
            Accepts::IntIn(lo, hi) => format!("{lo} to {hi}"),
            Accepts::Empty => "nothing (an empty value)".into(),
        }
    }
}

const fn fixed(name: &'static str, accepts: Accepts, why: &'static str) -> FixedField {
    FixedField { name, accepts, why }
}

const NO_KUBE_RESERVED: &str = "the kubelet uses it only to enforce kube-reserved/system-reserved, which nodelet refuses in enforceNodeAllocatable";
const NO_CPU_MANAGER: &str =
    "nodelet has no CPU manager: containers share the node's CPUs (the kubelet's \"none\" policy)";
const NO_MEMORY_MANAGER: &str = "nodelet has no memory manager (the kubelet's \"None\" policy)";
const NO_TOPOLOGY_MANAGER: &str = "nodelet has no topology manager (the kubelet's \"none\" policy)";
const NO_IMAGE_VERIFICATION: &str = "nodelet does not re-verify pull credentials for images already on the node (it implements feature gate KubeletEnsureSecretPulledImages only off)";
const NO_STATIC_POD_URL: &str = "nodelet reads static pods from staticPodPath only";

/// The kubelet's fields nodelet accepts only at the values it behaves as, sorted by name.
pub const FIXED_FIELDS: &[FixedField] = &[
    fixed(
        "configMapAndSecretChangeDetectionStrategy",
        Accepts::Strings(&["Watch"]),
        "nodelet keeps the ConfigMaps and Secrets pods use through one watch per object",
    ),
    fixed(
        "contentType",
        Accepts::Strings(&["application/json"]),
        "nodelet talks JSON to the API server",
    ),
    fixed(
        "cpuCFSQuota",
        Accepts::Bool(true),
        "nodelet always enforces CPU limits with a CFS quota",
    ),
    fixed(
        "cpuCFSQuotaPeriod",
        Accepts::Duration(std::time::Duration::from_millis(100)),
        "other periods need feature gate CustomCPUCFSQuotaPeriod, which nodelet does not implement",
    ),
    fixed("cpuManagerPolicy", Accepts::Strings(&["none"]), NO_CPU_MANAGER),
    fixed("cpuManagerPolicyOptions", Accepts::Empty, NO_CPU_MANAGER),
    fixed(
        "cpuManagerReconcilePeriod",
        Accepts::AnyDuration,
        "the kubelet reconciles only under the static CPU manager policy, which nodelet refuses",
    ),
    fixed(
        "defaultPodSysctls",
        Accepts::Empty,
        "nodelet does not implement feature gate DefaultPodSysctls (alpha): pods get only their own sysctls",
    ),
    fixed(
        "enableControllerAttachDetach",
        Accepts::Bool(true),
        "nodelet never attaches or detaches volumes itself",
    ),
    fixed(
        "hairpinMode",
        Accepts::Strings(&["promiscuous-bridge", "hairpin-veth", "none"]),
        "with a CRI runtime the kubelet only validates it: the CNI plugin's configuration decides hairpin traffic",
    ),
    fixed(
        "httpCheckFrequency",
        Accepts::AnyDuration,
        "it paces staticPodURL, which nodelet refuses",
    ),
    fixed(
        "imagePullCredentialsVerificationPolicy",
        Accepts::Strings(&["NeverVerify"]),
        NO_IMAGE_VERIFICATION,
    ),
    fixed(
        "iptablesDropBit",
        Accepts::IntIn(0, 31),
        "deprecated: no longer has any effect in the kubelet either",
    ),
    fixed(
        "iptablesMasqueradeBit",
        Accepts::IntIn(0, 31),
        "deprecated: no longer has any effect in the kubelet either",
    ),
    fixed(
        "kernelMemcgNotification",
        Accepts::Bool(false),
        "nodelet's memory signal has its own wake-ups (memory.events and PSI triggers on cgroup v2), not the cgroup v1 memcg thresholds this field turns on",
    ),
    fixed("kubeReservedCgroup", Accepts::AnyString, NO_KUBE_RESERVED),
    fixed(
        "kubeletCgroups",
        Accepts::Strings(&[]),
        "nodelet does not move itself into a cgroup: its systemd unit decides where it runs",
    ),
    fixed(
        "localStorageCapacityIsolation",
        Accepts::Bool(true),
        "nodelet always accounts and limits local ephemeral storage",
    ),
    fixed(
        "memoryManagerPolicy",
        Accepts::Strings(&["None"]),
        NO_MEMORY_MANAGER,
    ),
    fixed(
        "podCIDR",
        Accepts::Strings(&[]),
        "nodelet does not pass a pod CIDR to the runtime: the CNI configuration holds the pod range",
    ),
    fixed(
        "preloadedImagesVerificationAllowlist",
        Accepts::Empty,
        NO_IMAGE_VERIFICATION,
    ),
    fixed(
        "qosReserved",
        Accepts::Empty,
        "it needs feature gate QOSReserved (alpha), which nodelet does not implement",
    ),
    fixed("reservedMemory", Accepts::Empty, NO_MEMORY_MANAGER),
    fixed(
        "reservedSystemCPUs",
        Accepts::Strings(&[]),
        "nodelet reserves CPU through kubeReserved/systemReserved only; it pins no CPUs",
    ),
    fixed(
        "runOnce",
        Accepts::Bool(false),
        "nodelet runs as a service; it has no run-once mode",
    ),
    fixed(
        "showHiddenMetricsForVersion",
        Accepts::Strings(&[]),
        "nodelet has no hidden metrics to show",
    ),
    fixed("staticPodURL", Accepts::Strings(&[]), NO_STATIC_POD_URL),
    fixed("staticPodURLHeader", Accepts::Empty, NO_STATIC_POD_URL),
    fixed(
        "systemCgroups",
        Accepts::Strings(&[]),
        "nodelet does not move the node's processes into a cgroup",
    ),
    fixed("systemReservedCgroup", Accepts::AnyString, NO_KUBE_RESERVED),
    fixed(
        "topologyManagerPolicy",
        Accepts::Strings(&["none"]),
        NO_TOPOLOGY_MANAGER,
    ),
    fixed(
        "topologyManagerPolicyOptions",
        Accepts::Empty,
        NO_TOPOLOGY_MANAGER,
    ),
    fixed(
        "topologyManagerScope",
        Accepts::Strings(&["container", "pod"]),
        "under the \"none\" policy the kubelet's scope changes nothing",
    ),
    fixed(
        "tracing",
        Accepts::Empty,
        "nodelet exports no OpenTelemetry traces",
    ),
    fixed(
        "volumePluginDir",
        Accepts::Strings(&["/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"]),
        "nodelet loads no FlexVolume drivers (pods with flexVolume volumes are refused)",
    ),
];

/// `logging` (component-base `LoggingConfiguration`) fields nodelet has no setting for.
pub const FIXED_LOGGING_FIELDS: &[FixedField] = &[
    fixed(
        "flushFrequency",
        Accepts::AnyDuration,
        "nodelet writes every log line as it comes, so there is nothing to flush",
    ),
    fixed(
        "vmodule",
        Accepts::Empty,
        "nodelet's log filter is per target (RUST_LOG), not per Go file",
    ),
];

/// Looks up a fixed field by name in `fields`.
pub fn fixed_field(fields: &'static [FixedField], name: &str) -> Option<&'static FixedField> {
    fields.iter().find(|f| f.name == name)
}

/// Maturity of a feature gate, which decides the kubelet's warnings when one is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateStage {
    Alpha,
    Beta,
    /// GA gates are locked to their default: setting the other value is an error.
    Ga,
    Deprecated,
}

/// A kubelet feature gate that changes behaviour nodelet implements, with its default in
/// Kubernetes 1.35 (`MemoryQoS`: 1.37, where it is Beta and on) (`pkg/features/kube_features.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGate {
    pub name: &'static str,
    pub default: bool,
    pub stage: GateStage,
    /// What nodelet does with the gate.
    pub nodelet: GateSupport,
}

/// Whether both values of a gate change nodelet's behaviour, or nodelet has only one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateSupport {
    /// Both values behave as in the kubelet.
    Both,
    /// nodelet behaves as the kubelet with the gate at this value, whatever the configuration
    /// says is refused when it says the other value; the reason names what nodelet does.
    Only(bool, &'static str),
}

const fn gate(name: &'static str, default: bool, stage: GateStage) -> FeatureGate {
    FeatureGate {
        name,
        default,
        stage,
        nodelet: GateSupport::Both,
    }
}

const fn only(
    name: &'static str,
    default: bool,
    stage: GateStage,
    value: bool,
    why: &'static str,
) -> FeatureGate {
    FeatureGate {
        name,
        default,
        stage,
        nodelet: GateSupport::Only(value, why),
    }
}

impl FeatureGate {
    /// The value nodelet behaves as having when the configuration does not set the gate.
    pub fn effective_default(&self) -> bool {
        match self.nodelet {
            GateSupport::Both => self.default,
            GateSupport::Only(value, _) => value,
        }
    }
}

/// Gates nodelet recognises. Any other name is refused: nodelet cannot tell whether the gate
/// would change what it does.
pub const FEATURE_GATES: &[FeatureGate] = &[
    gate("CSIVolumeHealth", false, GateStage::Alpha),
    only(
        "ChangeContainerStatusOnKubeletRestart",
        false,
        GateStage::Deprecated,
        false,
        "a restart of nodelet keeps running containers' Started and Ready as last reported",
    ),
    only(
        "ContainerRestartRules",
        true,
        GateStage::Beta,
        true,
        "containers' restartPolicy and restartPolicyRules are always honoured",
    ),
    only(
        "ContainerStopSignals",
        false,
        GateStage::Alpha,
        true,
        "lifecycle.stopSignal is always honoured",
    ),
    only(
        "EnvFiles",
        true,
        GateStage::Beta,
        true,
        "env[].valueFrom.fileKeyRef is always honoured",
    ),
    gate("GracefulNodeShutdown", true, GateStage::Beta),
    gate(
        "GracefulNodeShutdownBasedOnPodPriority",
        true,
        GateStage::Beta,
    ),
    gate("ImageVolume", true, GateStage::Beta),
    gate("InPlacePodVerticalScaling", true, GateStage::Ga),
    gate("KubeletCrashLoopBackOffMax", true, GateStage::Beta),
    only(
        "KubeletEnsureSecretPulledImages",
        true,
        GateStage::Beta,
        false,
        "nodelet does not re-verify pull credentials for images already on the node: a pod may use an image another pod's pull secret brought",
    ),
    gate("MemoryQoS", true, GateStage::Beta),
    gate("PodObservedGenerationTracking", true, GateStage::Ga),
    gate("PodReadyToStartContainersCondition", true, GateStage::Beta),
    gate(
        "ReduceDefaultCrashLoopBackOffDecay",
        false,
        GateStage::Alpha,
    ),
    gate("ReloadKubeletClientCAFile", true, GateStage::Beta),
    gate("ReloadKubeletServerCertificateFile", true, GateStage::Beta),
    only(
        "RestartAllContainersOnContainerExits",
        false,
        GateStage::Alpha,
        true,
        "the RestartAllContainers restart rule is always honoured",
    ),
    gate("RotateKubeletServerCertificate", true, GateStage::Beta),
    gate("SidecarContainers", true, GateStage::Ga),
    gate("UserNamespacesSupport", true, GateStage::Beta),
];

pub const MEMORY_QOS: &str = "MemoryQoS";
pub const GRACEFUL_NODE_SHUTDOWN: &str = "GracefulNodeShutdown";
pub const POD_READY_TO_START_CONTAINERS_CONDITION: &str = "PodReadyToStartContainersCondition";
pub const GRACEFUL_NODE_SHUTDOWN_BY_PRIORITY: &str = "GracefulNodeShutdownBasedOnPodPriority";
pub const KUBELET_CRASH_LOOP_BACK_OFF_MAX: &str = "KubeletCrashLoopBackOffMax";
pub const REDUCE_DEFAULT_CRASH_LOOP_BACK_OFF_DECAY: &str = "ReduceDefaultCrashLoopBackOffDecay";
pub const USER_NAMESPACES_SUPPORT: &str = "UserNamespacesSupport";
pub const IMAGE_VOLUME: &str = "ImageVolume";
pub const CSI_VOLUME_HEALTH: &str = "CSIVolumeHealth";
pub const ROTATE_KUBELET_SERVER_CERTIFICATE: &str = "RotateKubeletServerCertificate";
pub const RELOAD_CLIENT_CA_FILE: &str = "ReloadKubeletClientCAFile";
pub const RELOAD_SERVER_CERTIFICATE_FILE: &str = "ReloadKubeletServerCertificateFile";

pub fn feature_gate(name: &str) -> Option<&'static FeatureGate> {
    FEATURE_GATES.iter().find(|g| g.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_sorted_and_unique() {
        let lists: &[(&str, Vec<&str>)] = &[
            (
                "FIXED_FIELDS",
                FIXED_FIELDS.iter().map(|f| f.name).collect(),
            ),
            (
                "FIXED_LOGGING_FIELDS",
                FIXED_LOGGING_FIELDS.iter().map(|f| f.name).collect(),
            ),
            (
                "FEATURE_GATES",
                FEATURE_GATES.iter().map(|g| g.name).collect(),
            ),
        ];
        for (name, list) in lists {
            let mut sorted = list.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(
                &sorted, list,
                "{name} must be sorted and free of duplicates"
            );
        }
    }

    #[test]
    fn feature_gate_lookup() {
        let cases: &[(&str, Option<bool>)] = &[
            ("SidecarContainers", Some(true)),
            ("ReduceDefaultCrashLoopBackOffDecay", Some(false)),
            ("sidecarcontainers", None),
            ("NoSuchGate", None),
        ];
        for (name, want_default) in cases {
            assert_eq!(
                feature_gate(name).map(|g| g.default),
                *want_default,
                "gate {name}"
            );
        }
    }
}
