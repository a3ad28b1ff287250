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
    Ga,
    Deprecated,
}

impl GateStage {
    fn parse(text: &str) -> Option<GateStage> {
        Some(match text {
            "alpha" => GateStage::Alpha,
            "beta" => GateStage::Beta,
            "ga" => GateStage::Ga,
            "deprecated" => GateStage::Deprecated,
            _ => return None,
        })
    }
}

/// A feature gate the v1.37 kubelet knows, with its value at 1.37 and what nodelet does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGate {
    pub name: &'static str,
    pub default: bool,
    pub stage: GateStage,
    /// Setting the other value is an error (the kubelet's `LockToDefault`).
    pub locked: bool,
    /// What nodelet does with the gate.
    pub nodelet: GateSupport,
}

/// What nodelet does with a gate's two values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateSupport {
    /// Both values behave as in the kubelet.
    Both,
    /// nodelet behaves as the kubelet with the gate at this value, whatever the configuration
    /// says is refused when it says the other value; the reason names what nodelet does.
    Only(bool, &'static str),
    /// No code the kubelet runs for its node reads the gate (an API server's, a controller's,
    /// the scheduler's, kube-proxy's): both values are accepted and change nothing, as on the
    /// kubelet.
    NotOnTheNode,
}

/// What nodelet does with a gate of the kubelet's that it does not act on but the kubelet's
/// node code reads.
const AT_ITS_DEFAULT: &str = "the kubelet reads this gate; nodelet runs as with it at its default, and what a pod or the configuration asks of a feature nodelet lacks is refused there, naming the field";

/// A gate nodelet acts on: how.
struct Acting {
    name: &'static str,
    nodelet: GateSupport,
}

const fn both(name: &'static str) -> Acting {
    Acting {
        name,
        nodelet: GateSupport::Both,
    }
}

const fn only(name: &'static str, value: bool, why: &'static str) -> Acting {
    Acting {
        name,
        nodelet: GateSupport::Only(value, why),
    }
}

impl FeatureGate {
    /// The value nodelet behaves as having when the configuration does not set the gate.
    pub fn effective_default(&self) -> bool {
        match self.nodelet {
            GateSupport::Both | GateSupport::NotOnTheNode => self.default,
            GateSupport::Only(value, _) => value,
        }
    }

    /// Whether nodelet accepts the gate at `value` (leaving aside the kubelet's own lock).
    pub fn accepts(&self, value: bool) -> bool {
        match self.nodelet {
            GateSupport::Both | GateSupport::NotOnTheNode => true,
            GateSupport::Only(only, _) => only == value,
        }
    }
}

/// The gates nodelet's behaviour follows, and how. Their default, stage and lock are the
/// kubelet's ([`KUBELET_GATES`]); every other gate the kubelet knows is accepted at its
/// default when the kubelet's node code reads it, and at both values when it does not.
const ACTING_GATES: &[Acting] = &[
    both("CSIVolumeHealth"),
    only(
        "ChangeContainerStatusOnKubeletRestart",
        false,
        "a restart of nodelet keeps running containers' Started and Ready as last reported",
    ),
    only(
        "ContainerRestartRules",
        true,
        "containers' restartPolicy and restartPolicyRules are always honoured",
    ),
    only(
        "ContainerStopSignals",
        true,
        "lifecycle.stopSignal is always honoured",
    ),
    only(
        "EnvFiles",
        true,
        "env[].valueFrom.fileKeyRef is always honoured",
    ),
    both("GracefulNodeShutdown"),
    both("GracefulNodeShutdownBasedOnPodPriority"),
    both("ImageVolume"),
    both("InPlacePodVerticalScaling"),
    both("KubeletCrashLoopBackOffMax"),
    only(
        "KubeletEnsureSecretPulledImages",
        false,
        "nodelet does not re-verify pull credentials for images already on the node: a pod may use an image another pod's pull secret brought",
    ),
    both("MemoryQoS"),
    both("PodObservedGenerationTracking"),
    both("PodReadyToStartContainersCondition"),
    both("ReduceDefaultCrashLoopBackOffDecay"),
    both("ReloadKubeletClientCAFile"),
    both("ReloadKubeletServerCertificateFile"),
    only(
        "RestartAllContainersOnContainerExits",
        true,
        "the RestartAllContainers restart rule is always honoured",
    ),
    both("RotateKubeletServerCertificate"),
    both("UserNamespacesSupport"),
];

/// The gates the kubelet v1.37.2 knows (`scripts/kubelet-feature-gates.py`): name, default,
/// stage, locked, the gates it depends on, and the kubelet file that reads it (`-`: none).
const KUBELET_GATES: &str = include_str!("kubelet-feature-gates.tsv");

/// The component-base gates that set every unset gate of their stage (`AllAlpha=true` turns
/// every alpha gate on, `AllBeta=false` every beta gate off).
pub const ALL_ALPHA: &str = "AllAlpha";
pub const ALL_BETA: &str = "AllBeta";

/// A row of [`KUBELET_GATES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletGate {
    pub gate: FeatureGate,
    /// Gates that must be on while this one is (the kubelet's `AddDependencies`).
    pub depends_on: Vec<&'static str>,
}

fn parse_kubelet_gates(text: &'static str) -> Vec<KubeletGate> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let cols: Vec<&'static str> = line.split('\t').collect();
            let [name, default, stage, locked, depends_on, reader] = cols[..] else {
                panic!("kubelet-feature-gates.tsv: not six columns: {line}");
            };
            let default = default == "true";
            let nodelet = ACTING_GATES
                .iter()
                .find(|a| a.name == name)
                .map(|a| a.nodelet)
                .unwrap_or(if reader == "-" {
                    GateSupport::NotOnTheNode
                } else {
                    GateSupport::Only(default, AT_ITS_DEFAULT)
                });
            KubeletGate {
                gate: FeatureGate {
                    name,
                    default,
                    stage: GateStage::parse(stage)
                        .unwrap_or_else(|| panic!("kubelet-feature-gates.tsv: stage {stage}")),
                    locked: locked == "true",
                    nodelet,
                },
                depends_on: if depends_on == "-" {
                    Vec::new()
                } else {
                    depends_on.split(',').collect()
                },
            }
        })
        .collect()
}

/// Every gate the kubelet knows, but the two stage-wide ones ([`ALL_ALPHA`], [`ALL_BETA`]).
pub fn kubelet_gates() -> &'static [KubeletGate] {
    static GATES: std::sync::LazyLock<Vec<KubeletGate>> =
        std::sync::LazyLock::new(|| parse_kubelet_gates(KUBELET_GATES));
    &GATES
}

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

/// The gate named `name` (case matters, as in the kubelet), if the kubelet knows it.
pub fn feature_gate(name: &str) -> Option<&'static FeatureGate> {
    kubelet_gates()
        .iter()
        .map(|k| &k.gate)
        .find(|g| g.name == name)
}

/// The value `featureGates` (as written) gives gate `name`: its own, else that of `AllAlpha` or
/// `AllBeta` for a gate of that stage (component-base's `setUnsetAlphaGates`); `None` when the
/// configuration leaves it at its default.
pub fn configured_gate(
    gates: &std::collections::BTreeMap<String, bool>,
    name: &str,
) -> Option<bool> {
    if let Some(value) = gates.get(name) {
        return Some(*value);
    }
    let stage_wide = match feature_gate(name)?.stage {
        GateStage::Alpha => ALL_ALPHA,
        GateStage::Beta => ALL_BETA,
        GateStage::Ga | GateStage::Deprecated => return None,
    };
    gates.get(stage_wide).copied()
}

/// The gates nodelet acts on (a row each in `docs/configuration.md`).
pub fn acting_gates() -> impl Iterator<Item = &'static str> {
    ACTING_GATES.iter().map(|a| a.name)
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
            ("ACTING_GATES", acting_gates().collect()),
            (
                "KUBELET_GATES",
                kubelet_gates().iter().map(|g| g.gate.name).collect(),
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
        let at_default = GateSupport::Only(false, AT_ITS_DEFAULT);
        // (gate, (default, stage, locked, nodelet's support))
        type Case = (&'static str, Option<(bool, GateStage, bool, GateSupport)>);
        let cases: &[Case] = &[
            // Acting gates: the kubelet's default, stage and lock; nodelet's support.
            (
                "ReduceDefaultCrashLoopBackOffDecay",
                Some((false, GateStage::Alpha, false, GateSupport::Both)),
            ),
            (
                "UserNamespacesSupport",
                Some((true, GateStage::Ga, true, GateSupport::Both)),
            ),
            // Read by the kubelet, not acted on: only at its default.
            (
                "PodAndContainerStatsFromCRI",
                Some((false, GateStage::Beta, false, at_default)),
            ),
            // Read by no code of the node: both values.
            (
                "StorageVersionAPI",
                Some((false, GateStage::Alpha, false, GateSupport::NotOnTheNode)),
            ),
            // Removed from the kubelet in 1.37, and names are case-sensitive.
            ("SidecarContainers", None),
            ("podandcontainerstatsfromcri", None),
            ("NoSuchGate", None),
        ];
        for (name, want) in cases {
            assert_eq!(
                feature_gate(name).map(|g| (g.default, g.stage, g.locked, g.nodelet)),
                *want,
                "gate {name}"
            );
        }
    }

    /// Every gate nodelet acts on is one the kubelet v1.37 knows, and the table holds the
    /// kubelet's whole registry (about 250 gates, the dependencies among them known).
    #[test]
    fn the_kubelet_table_is_complete() {
        for name in acting_gates() {
            let gate = feature_gate(name)
                .unwrap_or_else(|| panic!("nodelet acts on {name}, which the kubelet lacks"));
            assert_ne!(gate.nodelet, GateSupport::NotOnTheNode, "{name}");
        }
        let gates = kubelet_gates();
        assert!(gates.len() > 200, "only {} gates", gates.len());
        for g in gates {
            for dep in &g.depends_on {
                assert!(
                    feature_gate(dep).is_some(),
                    "{} depends on unknown {dep}",
                    g.gate.name
                );
            }
        }
    }
}
