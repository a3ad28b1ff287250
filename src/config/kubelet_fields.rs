//! What nodelet knows about the kubelet's configuration surface beyond the fields it implements:
//! the other `KubeletConfiguration` (v1beta1) fields, accepted with a warning so an operator can
//! bring an existing kubelet config, and the feature gates nodelet's behaviour depends on.

/// Top-level `KubeletConfiguration` v1beta1 fields (JSON names, from the kubelet's `types.go`)
/// that nodelet accepts but does not act on yet. Anything that is in neither this list nor the
/// implemented set is a typo or a field from another component, and is rejected.
pub const NOT_IMPLEMENTED_FIELDS: &[&str] = &[
    "configMapAndSecretChangeDetectionStrategy",
    "contentType",
    "cpuCFSQuota",
    "cpuCFSQuotaPeriod",
    "cpuManagerPolicy",
    "cpuManagerPolicyOptions",
    "cpuManagerReconcilePeriod",
    "draManagerReconcilePeriod",
    "enableControllerAttachDetach",
    "eventBurst",
    "eventRecordQPS",
    "hairpinMode",
    "httpCheckFrequency",
    "imagePullCredentialsVerificationPolicy",
    "iptablesDropBit",
    "iptablesMasqueradeBit",
    "kernelMemcgNotification",
    "kubeReservedCgroup",
    "kubeletCgroups",
    "localStorageCapacityIsolation",
    "makeIPTablesUtilChains",
    "maxOpenFiles",
    "memoryManagerPolicy",
    "oomScoreAdj",
    "podCIDR",
    "podHousekeepingPeriod",
    "podsPerCore",
    "preloadedImagesVerificationAllowlist",
    "protectKernelDefaults",
    "providerID",
    "qosReserved",
    "registryBurst",
    "registryPullQPS",
    "reservedMemory",
    "reservedSystemCPUs",
    "runOnce",
    "showHiddenMetricsForVersion",
    "staticPodURL",
    "staticPodURLHeader",
    "systemCgroups",
    "systemReservedCgroup",
    "topologyManagerPolicy",
    "topologyManagerPolicyOptions",
    "topologyManagerScope",
    "tracing",
    "userNamespaces",
    "volumePluginDir",
    "volumeStatsAggPeriod",
];

/// `logging` (component-base `LoggingConfiguration`) fields nodelet accepts but ignores.
pub const NOT_IMPLEMENTED_LOGGING_FIELDS: &[&str] = &["flushFrequency", "options", "vmodule"];

/// The message attached to every accepted-but-ignored field.
pub const NOT_IMPLEMENTED_MESSAGE: &str = "accepted but not implemented by nodelet yet; ignored";

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

/// Gates nodelet recognises. Other names are accepted with a warning (they may be gates of
/// kubelet subsystems nodelet does not have), never an error.
pub const FEATURE_GATES: &[FeatureGate] = &[
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
    gate("GracefulNodeShutdown", true, GateStage::Beta),
    gate(
        "GracefulNodeShutdownBasedOnPodPriority",
        true,
        GateStage::Beta,
    ),
    gate("InPlacePodVerticalScaling", true, GateStage::Ga),
    gate("KubeletCrashLoopBackOffMax", true, GateStage::Beta),
    gate("MemoryQoS", true, GateStage::Beta),
    gate("PodObservedGenerationTracking", true, GateStage::Ga),
    gate("PodReadyToStartContainersCondition", true, GateStage::Beta),
    gate(
        "ReduceDefaultCrashLoopBackOffDecay",
        false,
        GateStage::Alpha,
    ),
    only(
        "RestartAllContainersOnContainerExits",
        false,
        GateStage::Alpha,
        true,
        "the RestartAllContainers restart rule is always honoured",
    ),
    gate("SidecarContainers", true, GateStage::Ga),
];

pub const MEMORY_QOS: &str = "MemoryQoS";
pub const GRACEFUL_NODE_SHUTDOWN: &str = "GracefulNodeShutdown";
pub const POD_READY_TO_START_CONTAINERS_CONDITION: &str = "PodReadyToStartContainersCondition";
pub const GRACEFUL_NODE_SHUTDOWN_BY_PRIORITY: &str = "GracefulNodeShutdownBasedOnPodPriority";
pub const KUBELET_CRASH_LOOP_BACK_OFF_MAX: &str = "KubeletCrashLoopBackOffMax";
pub const REDUCE_DEFAULT_CRASH_LOOP_BACK_OFF_DECAY: &str = "ReduceDefaultCrashLoopBackOffDecay";

pub fn feature_gate(name: &str) -> Option<&'static FeatureGate> {
    FEATURE_GATES.iter().find(|g| g.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_sorted_and_unique() {
        let lists: &[(&str, Vec<&str>)] = &[
            ("NOT_IMPLEMENTED_FIELDS", NOT_IMPLEMENTED_FIELDS.to_vec()),
            (
                "NOT_IMPLEMENTED_LOGGING_FIELDS",
                NOT_IMPLEMENTED_LOGGING_FIELDS.to_vec(),
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
