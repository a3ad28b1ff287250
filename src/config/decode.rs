//! Walks the YAML mapping field by field, checking each value's type and single-field rules,
//! and collects every problem instead of stopping at the first (which a derived
//! `Deserialize` would do). Defaulting and cross-field rules are in `resolve`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use serde_yaml::{Mapping, Value};

use super::duration::parse_duration_detailed;
use super::kubelet_fields::{
    configured_gate, feature_gate, fixed_field, kubelet_gates, Accepts, FeatureGate, FixedField,
    GateStage, GateSupport, ALL_ALPHA, ALL_BETA, FIXED_FIELDS, FIXED_LOGGING_FIELDS,
};
use super::{
    AuthorizationMode, CgroupDriver, FieldError, FieldErrorKind, LogFormat, Warning, API_VERSION,
    KIND,
};
use crate::config::memory_qos::ReservationPolicy;
use crate::config::reserved::Reserved;
use crate::config::shutdown::GracePeriodByPriority;
use crate::config::swap::SwapBehavior;

/// Top-level fields nodelet implements (kubelet fields, then nodelet's own).
pub(super) const IMPLEMENTED_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "containerRuntimeEndpoint",
    "imageServiceEndpoint",
    "staticPodPath",
    "fileCheckFrequency",
    "syncFrequency",
    "podLogsDir",
    "cgroupDriver",
    "cgroupsPerQOS",
    "cgroupRoot",
    "maxPods",
    "nodeStatusMaxImages",
    "address",
    "readOnlyPort",
    "healthzPort",
    "healthzBindAddress",
    "clusterDNS",
    "clusterDomain",
    "resolvConf",
    "runtimeRequestTimeout",
    "serializeImagePulls",
    "maxParallelImagePulls",
    "imageCredentialProviderConfig",
    "imageCredentialProviderBinDir",
    "featureGates",
    "logging",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
    "nodeLeaseDurationSeconds",
    "kubeAPIQPS",
    "kubeAPIBurst",
    "podsPerCore",
    "maxOpenFiles",
    "oomScoreAdj",
    "registryPullQPS",
    "registryBurst",
    "eventRecordQPS",
    "eventBurst",
    "providerID",
    "protectKernelDefaults",
    "volumeStatsAggPeriod",
    "makeIPTablesUtilChains",
    "crashLoopBackOff",
    "userNamespaces",
    "rootDir",
    "nodeName",
    "nodeIP",
    "cloudProvider",
    "containerdEndpoint",
    "containerdNamespace",
    "containerLogLinksDir",
    "plegRelistPeriod",
    "registerNode",
    "registerWithTaints",
    "kubeconfig",
    "bootstrapKubeconfig",
    "certDir",
    "rotateCertificates",
    "serverTLSBootstrap",
    "nodeLabels",
    "podCleanup",
    "port",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "authentication",
    "authorization",
    "enableServer",
    "enableDebuggingHandlers",
    "enableSystemLogHandler",
    "enableSystemLogQuery",
    "enableProfilingHandler",
    "enableContentionProfiling",
    "enableDebugFlagsHandler",
    "tlsMinVersion",
    "tlsCipherSuites",
    "tlsCurvePreferences",
    "streamingConnectionIdleTimeout",
    "failCgroupV1",
    "singleProcessOOMKill",
    "seccompDefault",
    "allowedUnsafeSysctls",
    "failSwapOn",
    "memorySwap",
    "podPidsLimit",
    "kubeReserved",
    "systemReserved",
    "enforceNodeAllocatable",
    "memoryThrottlingFactor",
    "memoryReservationPolicy",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "imageMinimumGCAge",
    "imageMaximumGCAge",
    "containerLogMaxSize",
    "containerLogMaxFiles",
    "containerLogMaxWorkers",
    "containerLogMonitorInterval",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMinimumReclaim",
    "evictionPressureTransitionPeriod",
    "evictionMaxPodGracePeriod",
    "mergeDefaultEvictionSettings",
    "evictStaticPods",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "shutdownGracePeriodByPodPriority",
];

/// `enforceNodeAllocatable` values the kubelet knows; nodelet enforces `pods` (and `none`).
const ENFORCE_NODE_ALLOCATABLE_VALUES: &[&str] = &[
    "kube-reserved",
    "kube-reserved-compressible",
    "none",
    "pods",
    "system-reserved",
    "system-reserved-compressible",
];

const AUTHENTICATION_FIELDS: &[&str] = &["x509", "webhook", "anonymous"];
const AUTHENTICATION_X509_FIELDS: &[&str] = &["clientCAFile"];
const AUTHENTICATION_WEBHOOK_FIELDS: &[&str] = &["enabled", "cacheTTL"];
const AUTHENTICATION_ANONYMOUS_FIELDS: &[&str] = &["enabled"];
const AUTHORIZATION_FIELDS: &[&str] = &["mode", "webhook"];
const AUTHORIZATION_WEBHOOK_FIELDS: &[&str] = &["cacheAuthorizedTTL", "cacheUnauthorizedTTL"];

const IMPLEMENTED_LOGGING_FIELDS: &[&str] = &["format", "verbosity"];
const CRASH_LOOP_BACK_OFF_FIELDS: &[&str] = &["maxContainerRestartPeriod"];
const USER_NAMESPACES_FIELDS: &[&str] = &["idsPerPod"];
const POD_CLEANUP_FIELDS: &[&str] = &["enabled", "retention", "barePods"];
const SHUTDOWN_BY_PRIORITY_FIELDS: &[&str] = &["priority", "shutdownGracePeriodSeconds"];
const TOP_LEVEL_FIELDS: &[&[&str]] = &[IMPLEMENTED_FIELDS];
const MEMORY_SWAP_FIELDS: &[&str] = &["swapBehavior"];
const LOGGING_FIELDS: &[&[&str]] = &[IMPLEMENTED_LOGGING_FIELDS, &["options"]];

/// The kubelet's bounds for `crashLoopBackOff.maxContainerRestartPeriod`.
const MIN_MAX_RESTART_PERIOD: Duration = Duration::from_secs(1);
const MAX_MAX_RESTART_PERIOD: Duration = Duration::from_secs(300);

const IP_REASON: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

/// Values as written, type-checked and individually validated; `None` = absent or null.
/// Strings keep `""` so `resolve` can apply each field's own meaning of empty.
#[derive(Debug, Default)]
pub(super) struct Decoded {
    pub container_runtime_endpoint: Option<String>,
    pub image_service_endpoint: Option<String>,
    pub static_pod_path: Option<String>,
    pub file_check_frequency: Option<Duration>,
    pub sync_frequency: Option<Duration>,
    pub pod_logs_dir: Option<String>,
    pub container_log_links_dir: Option<String>,
    pub cgroup_driver: Option<CgroupDriver>,
    pub cgroups_per_qos: Option<bool>,
    pub cgroup_root: Option<String>,
    pub max_pods: Option<u32>,
    pub node_status_max_images: Option<i32>,
    pub address: Option<IpAddr>,
    pub read_only_port: Option<u16>,
    pub healthz_port: Option<u16>,
    pub healthz_bind_address: Option<IpAddr>,
    pub cluster_dns: Option<Vec<IpAddr>>,
    pub cluster_domain: Option<String>,
    pub resolv_conf: Option<String>,
    pub runtime_request_timeout: Option<Duration>,
    pub serialize_image_pulls: Option<bool>,
    pub max_parallel_image_pulls: Option<u32>,
    pub image_credential_provider_config: Option<String>,
    pub image_credential_provider_bin_dir: Option<String>,
    pub feature_gates: BTreeMap<String, bool>,
    pub logging_format: Option<LogFormat>,
    pub logging_verbosity: Option<u32>,
    pub node_status_update_frequency: Option<Duration>,
    pub node_status_report_frequency: Option<Duration>,
    pub node_lease_duration_seconds: Option<u32>,
    pub kube_api_qps: Option<u32>,
    pub kube_api_burst: Option<u32>,
    pub pods_per_core: Option<u32>,
    pub max_open_files: Option<u64>,
    pub oom_score_adj: Option<i32>,
    pub registry_pull_qps: Option<u32>,
    pub registry_burst: Option<u32>,
    pub event_record_qps: Option<u32>,
    pub event_burst: Option<u32>,
    pub provider_id: Option<String>,
    pub protect_kernel_defaults: Option<bool>,
    pub volume_stats_agg_period: Option<Duration>,
    pub make_iptables_util_chains: Option<bool>,
    pub max_container_restart_period: Option<Duration>,
    /// `userNamespaces.idsPerPod`, validated as the kubelet's `validateKubeletOSConfiguration`.
    pub user_namespaces_ids_per_pod: Option<u32>,
    pub root_dir: Option<String>,
    pub node_name: Option<String>,
    pub node_ip: Option<IpAddr>,
    /// `cloudProvider` (the kubelet's `--cloud-provider`): `true` for `external`.
    pub external_cloud_provider: Option<bool>,
    pub containerd_endpoint: Option<String>,
    pub containerd_namespace: Option<String>,
    pub pleg_relist_period: Option<Duration>,
    pub register_node: Option<bool>,
    pub register_with_taints: Option<Vec<k8s_openapi::api::core::v1::Taint>>,
    pub kubeconfig: Option<String>,
    pub bootstrap_kubeconfig: Option<String>,
    pub cert_dir: Option<String>,
    pub rotate_certificates: Option<bool>,
    pub server_tls_bootstrap: Option<bool>,
    pub node_labels: Option<BTreeMap<String, String>>,
    pub pod_cleanup_enabled: Option<bool>,
    pub pod_cleanup_retention: Option<Duration>,
    pub pod_cleanup_bare_pods: Option<bool>,
    pub port: Option<u16>,
    pub tls_cert_file: Option<String>,
    pub tls_private_key_file: Option<String>,
    pub client_ca_file: Option<String>,
    pub authentication_webhook_enabled: Option<bool>,
    pub authentication_webhook_cache_ttl: Option<Duration>,
    pub anonymous_enabled: Option<bool>,
    pub authorization_mode: Option<AuthorizationMode>,
    pub cache_authorized_ttl: Option<Duration>,
    pub cache_unauthorized_ttl: Option<Duration>,
    /// The kubelet server's fields (`config::kubelet_server`).
    pub server: ServerFields,
    pub fail_cgroup_v1: Option<bool>,
    pub single_process_oom_kill: Option<bool>,
    pub seccomp_default: Option<bool>,
    pub fail_swap_on: Option<bool>,
    /// `memorySwap.swapBehavior`.
    pub swap_behavior: Option<SwapBehavior>,
    pub allowed_unsafe_sysctls: Option<Vec<String>>,
    pub pod_pids_limit: Option<i64>,
    pub kube_reserved: Option<Reserved>,
    pub system_reserved: Option<Reserved>,
    pub enforce_node_allocatable: Option<Vec<String>>,
    /// The factor as written (a YAML number), kept for the gate rules in `resolve`.
    pub memory_throttling_factor: Option<(f64, String)>,
    pub memory_reservation_policy: Option<ReservationPolicy>,
    pub image_gc_high_threshold_percent: Option<u32>,
    pub image_gc_low_threshold_percent: Option<u32>,
    pub image_minimum_gc_age: Option<Duration>,
    pub image_maximum_gc_age: Option<Duration>,
    pub container_log_max_size: Option<u64>,
    pub container_log_max_files: Option<u32>,
    pub container_log_max_workers: Option<u32>,
    pub container_log_monitor_interval: Option<Duration>,
    /// `evictionHard` as written; `None` when absent (the defaults apply).
    pub eviction_hard: Option<BTreeMap<String, String>>,
    pub eviction_soft: Option<BTreeMap<String, String>>,
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    pub eviction_minimum_reclaim: Option<BTreeMap<String, String>>,
    pub eviction_pressure_transition_period: Option<Duration>,
    pub eviction_max_pod_grace_period: Option<i64>,
    pub merge_default_eviction_settings: Option<bool>,
    pub evict_static_pods: Option<bool>,
    pub shutdown_grace_period: Option<Duration>,
    pub shutdown_grace_period_critical_pods: Option<Duration>,
    pub shutdown_grace_period_by_pod_priority: Option<Vec<GracePeriodByPriority>>,
    pub errors: Vec<FieldError>,
    pub warnings: Vec<Warning>,
}

/// The kubelet server's fields as written; `resolve` applies `config::kubelet_server`'s rules.
#[derive(Debug, Default)]
pub(super) struct ServerFields {
    pub enable_server: Option<bool>,
    pub enable_debugging_handlers: Option<bool>,
    pub enable_system_log_handler: Option<bool>,
    pub enable_system_log_query: Option<bool>,
    pub enable_profiling_handler: Option<bool>,
    pub enable_contention_profiling: Option<bool>,
    pub enable_debug_flags_handler: Option<bool>,
    pub tls_min_version: Option<String>,
    pub tls_cipher_suites: Option<Vec<String>>,
    pub tls_curve_preferences: Option<Vec<i64>>,
    pub streaming_connection_idle_timeout: Option<Duration>,
}

/// Decodes a top-level `KubeletConfiguration` mapping.
pub(super) fn decode(map: &Mapping) -> Decoded {
    let mut d = Decoded::default();
    let mut api_version_seen = false;
    let mut kind_seen = false;
    for (key, value) in map {
        let Some(name) = key.as_str() else {
            d.unknown_field(&render(key), TOP_LEVEL_FIELDS);
            continue;
        };
        match name {
            "apiVersion" => {
                api_version_seen = true;
                d.type_meta(name, value, API_VERSION);
            }
            "kind" => {
                kind_seen = true;
                d.type_meta(name, value, KIND);
            }
            "containerRuntimeEndpoint" => d.container_runtime_endpoint = d.endpoint(name, value),
            "imageServiceEndpoint" => d.image_service_endpoint = d.endpoint(name, value),
            "staticPodPath" => d.static_pod_path = d.optional_absolute_path(name, value),
            "fileCheckFrequency" => d.file_check_frequency = d.duration(name, value),
            "syncFrequency" => d.sync_frequency = d.duration(name, value),
            "podLogsDir" => d.pod_logs_dir = d.pod_logs_dir(name, value),
            "cgroupDriver" => d.cgroup_driver = d.cgroup_driver(name, value),
            "cgroupsPerQOS" => d.cgroups_per_qos = d.boolean(name, value),
            "cgroupRoot" => d.cgroup_root = d.cgroup_root(name, value),
            "maxPods" => d.max_pods = d.int32(name, value, 1, "must be greater than 0"),
            "nodeStatusMaxImages" => {
                d.node_status_max_images = d.int_in(
                    name,
                    value,
                    -1,
                    i64::from(i32::MAX),
                    "must be -1 or greater",
                )
            }
            "address" => d.address = d.ip(name, value),
            "readOnlyPort" => d.read_only_port = d.port(name, value),
            "healthzPort" => d.healthz_port = d.port(name, value),
            "healthzBindAddress" => d.healthz_bind_address = d.ip(name, value),
            "clusterDNS" => d.cluster_dns = d.ip_list(name, value),
            "clusterDomain" => d.cluster_domain = d.string(name, value),
            "resolvConf" => d.resolv_conf = d.optional_absolute_path(name, value),
            "runtimeRequestTimeout" => d.runtime_request_timeout = d.duration(name, value),
            "serializeImagePulls" => d.serialize_image_pulls = d.boolean(name, value),
            "maxParallelImagePulls" => {
                d.max_parallel_image_pulls = d.int32(name, value, 1, "must be greater than 0")
            }
            "imageCredentialProviderConfig" => {
                d.image_credential_provider_config = d.optional_absolute_path(name, value)
            }
            "imageCredentialProviderBinDir" => {
                d.image_credential_provider_bin_dir = d.optional_absolute_path(name, value)
            }
            "featureGates" => d.feature_gates(name, value),
            "logging" => d.logging(name, value),
            "nodeStatusUpdateFrequency" => d.node_status_update_frequency = d.duration(name, value),
            "nodeStatusReportFrequency" => d.node_status_report_frequency = d.duration(name, value),
            "nodeLeaseDurationSeconds" => {
                // 0 is the kubelet's "unset" (defaulted to 40), so only negatives are invalid.
                d.node_lease_duration_seconds = d.int32(name, value, 0, "must be greater than 0")
            }
            "kubeAPIQPS" => {
                d.kube_api_qps = d.int32(name, value, 0, "must not be a negative number")
            }
            "kubeAPIBurst" => {
                d.kube_api_burst = d.int32(name, value, 0, "must not be a negative number")
            }
            "crashLoopBackOff" => d.crash_loop_back_off(name, value),
            "userNamespaces" => d.user_namespaces(name, value),
            "shutdownGracePeriod" => d.shutdown_grace_period = d.duration(name, value),
            "shutdownGracePeriodCriticalPods" => {
                d.shutdown_grace_period_critical_pods = d.duration(name, value)
            }
            "shutdownGracePeriodByPodPriority" => {
                d.shutdown_grace_period_by_pod_priority = d.shutdown_by_priority(name, value)
            }
            "rootDir" => d.root_dir = d.absolute_clean_path(name, value),
            "nodeName" => d.node_name = d.string(name, value),
            "nodeIP" => d.node_ip = d.node_ip(name, value),
            "cloudProvider" => d.external_cloud_provider = d.cloud_provider(name, value),
            "containerdEndpoint" => d.containerd_endpoint = d.endpoint(name, value),
            "containerdNamespace" => d.containerd_namespace = d.containerd_namespace(name, value),
            "containerLogLinksDir" => {
                d.container_log_links_dir = d.absolute_clean_path(name, value)
            }
            "plegRelistPeriod" => d.pleg_relist_period = d.positive_duration(name, value),
            "registerNode" => d.register_node = d.boolean(name, value),
            "registerWithTaints" => d.register_with_taints = d.taints(name, value),
            "kubeconfig" => d.kubeconfig = d.optional_absolute_path(name, value),
            "bootstrapKubeconfig" => d.bootstrap_kubeconfig = d.optional_absolute_path(name, value),
            "certDir" => d.cert_dir = d.absolute_clean_path(name, value),
            "rotateCertificates" => d.rotate_certificates = d.boolean(name, value),
            "serverTLSBootstrap" => d.server_tls_bootstrap = d.boolean(name, value),
            "nodeLabels" => d.node_labels = d.string_map(name, value),
            "podCleanup" => d.pod_cleanup(name, value),
            "port" => d.port = d.port(name, value),
            "tlsCertFile" => d.tls_cert_file = d.optional_absolute_path(name, value),
            "tlsPrivateKeyFile" => d.tls_private_key_file = d.optional_absolute_path(name, value),
            "authentication" => d.authentication(name, value),
            "authorization" => d.authorization(name, value),
            "enableServer" => d.server.enable_server = d.boolean(name, value),
            "enableDebuggingHandlers" => {
                d.server.enable_debugging_handlers = d.boolean(name, value)
            }
            "enableSystemLogHandler" => d.server.enable_system_log_handler = d.boolean(name, value),
            "enableSystemLogQuery" => d.server.enable_system_log_query = d.boolean(name, value),
            "enableProfilingHandler" => d.server.enable_profiling_handler = d.boolean(name, value),
            "enableContentionProfiling" => {
                d.server.enable_contention_profiling = d.boolean(name, value)
            }
            "enableDebugFlagsHandler" => {
                d.server.enable_debug_flags_handler = d.boolean(name, value)
            }
            "tlsMinVersion" => d.server.tls_min_version = d.string(name, value),
            "tlsCipherSuites" => d.server.tls_cipher_suites = d.string_list(name, value),
            "tlsCurvePreferences" => d.server.tls_curve_preferences = d.int_list(name, value),
            "streamingConnectionIdleTimeout" => {
                d.server.streaming_connection_idle_timeout = d.duration(name, value)
            }
            "failCgroupV1" => d.fail_cgroup_v1 = d.boolean(name, value),
            "singleProcessOOMKill" => d.single_process_oom_kill = d.boolean(name, value),
            "seccompDefault" => d.seccomp_default = d.boolean(name, value),
            "podsPerCore" => {
                d.pods_per_core = d.int32(name, value, 0, "must not be a negative number")
            }
            "maxOpenFiles" => {
                d.max_open_files =
                    d.int_in(name, value, 0, i64::MAX, "must not be a negative number")
            }
            "oomScoreAdj" => {
                d.oom_score_adj =
                    d.int_in(name, value, -1000, 1000, "must be between -1000 and 1000")
            }
            "registryPullQPS" => {
                d.registry_pull_qps = d.int32(name, value, 0, "must not be a negative number")
            }
            "registryBurst" => {
                d.registry_burst = d.int32(name, value, 0, "must not be a negative number")
            }
            "eventRecordQPS" => {
                d.event_record_qps = d.int32(name, value, 0, "must not be a negative number")
            }
            "eventBurst" => {
                d.event_burst = d.int32(name, value, 0, "must not be a negative number")
            }
            "providerID" => d.provider_id = d.string(name, value),
            "protectKernelDefaults" => d.protect_kernel_defaults = d.boolean(name, value),
            "volumeStatsAggPeriod" => d.volume_stats_agg_period = d.duration(name, value),
            "makeIPTablesUtilChains" => d.make_iptables_util_chains = d.boolean(name, value),
            "failSwapOn" => d.fail_swap_on = d.boolean(name, value),
            "memorySwap" => d.memory_swap(name, value),
            "allowedUnsafeSysctls" => d.allowed_unsafe_sysctls = d.sysctl_patterns(name, value),
            "podPidsLimit" => {
                d.pod_pids_limit = d.int_in(
                    name,
                    value,
                    -1,
                    i64::MAX,
                    "must be -1 (no limit) or greater",
                )
            }
            "kubeReserved" => d.kube_reserved = d.reserved(name, value),
            "systemReserved" => d.system_reserved = d.reserved(name, value),
            "enforceNodeAllocatable" => {
                d.enforce_node_allocatable = d.enforce_node_allocatable(name, value)
            }
            "memoryThrottlingFactor" => {
                d.memory_throttling_factor = d.throttling_factor(name, value)
            }
            "memoryReservationPolicy" => {
                d.memory_reservation_policy = d.reservation_policy(name, value)
            }
            "imageGCHighThresholdPercent" => {
                d.image_gc_high_threshold_percent =
                    d.int_in(name, value, 0, 100, "must be between 0 and 100, inclusive")
            }
            "imageGCLowThresholdPercent" => {
                d.image_gc_low_threshold_percent =
                    d.int_in(name, value, 0, 100, "must be between 0 and 100, inclusive")
            }
            "imageMinimumGCAge" => d.image_minimum_gc_age = d.duration(name, value),
            "imageMaximumGCAge" => d.image_maximum_gc_age = d.duration(name, value),
            "containerLogMaxSize" => d.container_log_max_size = d.log_size(name, value),
            "containerLogMaxFiles" => {
                d.container_log_max_files = d.int32(name, value, 2, "must be greater than 1")
            }
            "containerLogMaxWorkers" => {
                d.container_log_max_workers =
                    d.int32(name, value, 1, "must be greater than or equal to 1")
            }
            "containerLogMonitorInterval" => {
                d.container_log_monitor_interval = d.duration(name, value).and_then(|interval| {
                    if interval < Duration::from_secs(3) {
                        d.invalid(
                            name,
                            value,
                            "must be a positive time duration greater than or equal to 3s",
                        );
                        None
                    } else {
                        Some(interval)
                    }
                })
            }
            "evictionHard" => d.eviction_hard = d.string_map(name, value),
            "evictionSoft" => d.eviction_soft = d.string_map(name, value),
            "evictionSoftGracePeriod" => d.eviction_soft_grace_period = d.string_map(name, value),
            "evictionMinimumReclaim" => d.eviction_minimum_reclaim = d.string_map(name, value),
            "evictionPressureTransitionPeriod" => {
                d.eviction_pressure_transition_period = d.duration(name, value)
            }
            "evictionMaxPodGracePeriod" => {
                d.eviction_max_pod_grace_period = d.int_in(
                    name,
                    value,
                    0,
                    i64::from(i32::MAX),
                    "must be greater than or equal to 0",
                )
            }
            "mergeDefaultEvictionSettings" => {
                d.merge_default_eviction_settings = d.boolean(name, value)
            }
            "evictStaticPods" => d.evict_static_pods = d.boolean(name, value),
            _ => match fixed_field(FIXED_FIELDS, name) {
                Some(field) => d.fixed(name, field, value),
                None => d.unknown_field(name, TOP_LEVEL_FIELDS),
            },
        }
    }
    if !api_version_seen {
        d.required("apiVersion", API_VERSION);
    }
    if !kind_seen {
        d.required("kind", KIND);
    }
    d
}

/// A value as the API server shows it in errors: strings quoted, scalars bare, others as JSON.
pub(super) fn render(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        other => {
            let text = serde_json::to_string(other)
                .or_else(|_| serde_yaml::to_string(other).map(|s| s.trim().to_string()))
                .unwrap_or_else(|_| format!("<{}>", type_name(other)));
            if text.chars().count() > 80 {
                format!("{}...", text.chars().take(77).collect::<String>())
            } else {
                text
            }
        }
    }
}

pub(super) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// Go's `filepath.Clean` for absolute paths: whether `path` is already in that form.
pub(super) fn is_clean_absolute_path(path: &str) -> bool {
    if !path.starts_with('/') {
        return false;
    }
    if path == "/" {
        return true;
    }
    !path[1..]
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
}

impl Decoded {
    pub(super) fn fail(
        &mut self,
        path: &str,
        value: &str,
        reason: impl Into<String>,
        kind: FieldErrorKind,
    ) {
        self.errors.push(FieldError {
            path: path.to_string(),
            kind,
            value: (!value.is_empty()).then(|| value.to_string()),
            detail: reason.into(),
        });
    }

    fn invalid(&mut self, path: &str, value: &Value, reason: impl Into<String>) {
        self.fail(path, &render(value), reason, FieldErrorKind::Invalid);
    }

    fn unsupported(&mut self, path: &str, value: &Value, supported: &[&str]) {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        let reason = format!("supported values: {}", list.join(", "));
        self.fail(path, &render(value), reason, FieldErrorKind::NotSupported);
    }

    fn warn(&mut self, path: &str, message: impl Into<String>) {
        self.warnings.push(Warning {
            path: path.to_string(),
            message: message.into(),
        });
    }

    /// Rejects an unknown field, suggesting the known field it matches but for letter case
    /// (the kubelet's decoder is case-sensitive, so `MaxPods` is a typo).
    fn unknown_field(&mut self, path: &str, known: &[&[&str]]) {
        let name = path.rsplit('.').next().unwrap_or(path);
        let fixed = FIXED_FIELDS
            .iter()
            .chain(FIXED_LOGGING_FIELDS)
            .map(|f| &f.name);
        let suggestion = known
            .iter()
            .flat_map(|list| list.iter())
            .chain(fixed)
            .find(|k| k.eq_ignore_ascii_case(name));
        let reason = suggestion.map_or_else(String::new, |k| format!("did you mean {k:?}?"));
        self.fail(path, "", reason, FieldErrorKind::Unknown);
    }

    /// A field nodelet accepts only at the values it behaves as ([`FixedField`]): the value is
    /// type-checked as the kubelet does, then refused, naming field and value, unless accepted.
    fn fixed(&mut self, path: &str, field: &FixedField, value: &Value) {
        let accepted = match field.accepts {
            Accepts::AnyDuration => {
                self.duration_or_nanos(path, value);
                return;
            }
            Accepts::Duration(want) => match self.duration_or_nanos(path, value) {
                None => return,
                Some(got) => got == want || got.is_zero(),
            },
            Accepts::Strings(values) => match self.string(path, value) {
                None => return,
                Some(s) => s.is_empty() || values.contains(&s.as_str()),
            },
            Accepts::AnyString => {
                self.string(path, value);
                return;
            }
            Accepts::Bool(want) => match self.boolean(path, value) {
                None => return,
                Some(got) => got == want,
            },
            Accepts::IntIn(lo, hi) => match self.int(path, value) {
                None => return,
                Some(got) => (lo..=hi).contains(&got),
            },
            Accepts::Empty => match value {
                Value::Null => true,
                Value::Mapping(m) => m.is_empty(),
                Value::Sequence(s) => s.is_empty(),
                Value::String(s) => s.is_empty(),
                _ => false,
            },
        };
        if !accepted {
            self.invalid(
                path,
                value,
                format!(
                    "nodelet accepts only {}: {}",
                    field.accepts.describe(),
                    field.why
                ),
            );
        }
    }

    /// A duration as component-base's `metav1.Duration`/`time.Duration` fields take it: a Go
    /// duration string, or an integer number of nanoseconds (`flushFrequency: 0`).
    fn duration_or_nanos(&mut self, path: &str, value: &Value) -> Option<Duration> {
        match value {
            Value::Number(n) => match n.as_u64() {
                Some(nanos) => Some(Duration::from_nanos(nanos)),
                None => {
                    self.invalid(path, value, "must not be negative");
                    None
                }
            },
            _ => self.duration(path, value),
        }
    }

    /// `apiVersion` / `kind`: exactly one accepted value; empty counts as missing.
    fn type_meta(&mut self, path: &str, value: &Value, expected: &str) {
        match value {
            Value::String(s) if s == expected => {}
            Value::Null => self.required(path, expected),
            Value::String(s) if s.is_empty() => self.required(path, expected),
            Value::String(_) => self.unsupported(path, value, &[expected]),
            _ => self.invalid(path, value, "expected a string"),
        }
    }

    fn required(&mut self, path: &str, expected: &str) {
        let reason = format!("must be {expected:?}");
        self.fail(path, "", reason, FieldErrorKind::Required);
    }

    fn string(&mut self, path: &str, value: &Value) -> Option<String> {
        match value {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            _ => {
                self.invalid(path, value, "expected a string");
                None
            }
        }
    }

    fn boolean(&mut self, path: &str, value: &Value) -> Option<bool> {
        match value {
            Value::Null => None,
            Value::Bool(b) => Some(*b),
            _ => {
                self.invalid(path, value, "expected a boolean (true or false)");
                None
            }
        }
    }

    /// A list of strings; `None` (with the errors recorded) when any item is not one.
    fn string_list(&mut self, path: &str, value: &Value) -> Option<Vec<String>> {
        self.list(
            path,
            value,
            |item| item.as_str().map(str::to_string),
            "expected a string",
        )
    }

    /// A list of integers (range rules are the field's own).
    fn int_list(&mut self, path: &str, value: &Value) -> Option<Vec<i64>> {
        self.list(path, value, Value::as_i64, "expected an integer")
    }

    fn list<T>(
        &mut self,
        path: &str,
        value: &Value,
        item: impl Fn(&Value) -> Option<T>,
        expected: &str,
    ) -> Option<Vec<T>> {
        let Value::Sequence(items) = value else {
            if !value.is_null() {
                self.invalid(path, value, "expected a list");
            }
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, v) in items.iter().enumerate() {
            match item(v) {
                Some(x) => out.push(x),
                None => {
                    self.invalid(&format!("{path}[{i}]"), v, expected);
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    fn int(&mut self, path: &str, value: &Value) -> Option<i64> {
        match value {
            Value::Null => None,
            Value::Number(n) => match n.as_i64() {
                Some(i) => Some(i),
                None if n.is_f64() => {
                    self.invalid(path, value, "expected an integer");
                    None
                }
                None => {
                    self.invalid(path, value, "out of range");
                    None
                }
            },
            _ => {
                self.invalid(path, value, "expected an integer");
                None
            }
        }
    }

    /// An integer in `min..=max`, converted to the field's type.
    fn int_in<T: TryFrom<i64>>(
        &mut self,
        path: &str,
        value: &Value,
        min: i64,
        max: i64,
        reason: &str,
    ) -> Option<T> {
        let i = self.int(path, value)?;
        if i < min {
            self.invalid(path, value, reason);
            return None;
        }
        if i > max {
            self.invalid(path, value, format!("must be at most {max}"));
            return None;
        }
        T::try_from(i).ok()
    }

    /// A non-negative int32 (the kubelet's type for counts) of at least `min`.
    fn int32(&mut self, path: &str, value: &Value, min: i64, reason: &str) -> Option<u32> {
        self.int_in(path, value, min, i64::from(i32::MAX), reason)
    }

    fn port(&mut self, path: &str, value: &Value) -> Option<u16> {
        let i = self.int(path, value)?;
        match u16::try_from(i) {
            Ok(port) => Some(port),
            Err(_) => {
                self.invalid(
                    path,
                    value,
                    "must be between 0 and 65535, inclusive (0 disables it)",
                );
                None
            }
        }
    }

    fn duration(&mut self, path: &str, value: &Value) -> Option<Duration> {
        match value {
            Value::Null => None,
            Value::String(s) => match parse_duration_detailed(s) {
                Ok(d) => Some(d),
                Err(e) => {
                    self.invalid(path, value, e.to_string());
                    None
                }
            },
            _ => {
                self.invalid(
                    path,
                    value,
                    "expected a duration string such as \"30s\" or \"1m30s\"",
                );
                None
            }
        }
    }

    /// `containerLogMaxSize`: a quantity string (`10Mi`, `500Ki`) of more than 0 bytes.
    fn log_size(&mut self, path: &str, value: &Value) -> Option<u64> {
        let text = match value {
            Value::Null => return None,
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => {
                self.invalid(path, value, "expected a quantity such as \"10Mi\"");
                return None;
            }
        };
        match crate::quantity::Quantity::parse(&text) {
            Ok(q) if q.value() > 0 => u64::try_from(q.value()).ok(),
            Ok(_) => {
                self.invalid(path, value, "must be greater than 0");
                None
            }
            Err(e) => {
                self.invalid(path, value, e.to_string());
                None
            }
        }
    }

    fn positive_duration(&mut self, path: &str, value: &Value) -> Option<Duration> {
        let d = self.duration(path, value)?;
        if d.is_zero() {
            self.invalid(path, value, "must be greater than 0");
            return None;
        }
        Some(d)
    }

    /// An IP address; `""` means unset, as the kubelet treats its string address fields.
    fn ip(&mut self, path: &str, value: &Value) -> Option<IpAddr> {
        let s = self.string(path, value)?;
        if s.is_empty() {
            return None;
        }
        match IpAddr::from_str(&s) {
            Ok(ip) => Some(ip),
            Err(_) => {
                self.invalid(path, value, IP_REASON);
                None
            }
        }
    }

    fn ip_list(&mut self, path: &str, value: &Value) -> Option<Vec<IpAddr>> {
        let items = match value {
            Value::Null => return None,
            Value::Sequence(items) => items,
            _ => {
                self.invalid(path, value, "expected a list of IP addresses");
                return None;
            }
        };
        let mut ips = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let item_path = format!("{path}[{i}]");
            match item {
                Value::String(s) => match IpAddr::from_str(s) {
                    Ok(ip) => ips.push(ip),
                    Err(_) => self.invalid(&item_path, item, IP_REASON),
                },
                _ => self.invalid(&item_path, item, "expected a string"),
            }
        }
        Some(ips)
    }

    /// `allowedUnsafeSysctls`: sysctl names or prefixes ending in `*`, each known to be
    /// namespaced by the kernel (the kubelet refuses to start otherwise).
    fn sysctl_patterns(&mut self, path: &str, value: &Value) -> Option<Vec<String>> {
        let items = match value {
            Value::Null => return None,
            Value::Sequence(items) => items,
            _ => {
                self.invalid(path, value, "expected a list of sysctl names or patterns");
                return None;
            }
        };
        let mut patterns = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let item_path = format!("{path}[{i}]");
            match item {
                Value::String(s) => match crate::podspec::sysctl::Allowlist::new([s.as_str()]) {
                    Ok(_) => patterns.push(s.clone()),
                    Err(why) => self.invalid(&item_path, item, why),
                },
                _ => self.invalid(&item_path, item, "expected a string"),
            }
        }
        Some(patterns)
    }

    /// `nodeIP`: must be usable as the node's address, like the kubelet's `validateNodeIP`.
    /// `""` (no cloud provider) or `external` (a cloud controller manager initializes the
    /// node); any other name is refused as the kubelet refuses it, built-in providers being
    /// gone since v1.31.
    fn cloud_provider(&mut self, path: &str, value: &Value) -> Option<bool> {
        match self.string(path, value)?.as_str() {
            "" => Some(false),
            "external" => Some(true),
            other => {
                self.invalid(
                    path,
                    value,
                    format!("cloud provider {other:?} was specified, but built-in cloud providers are disabled. Please set --cloud-provider=external and migrate to an external cloud provider"),
                );
                None
            }
        }
    }

    fn node_ip(&mut self, path: &str, value: &Value) -> Option<IpAddr> {
        let ip = self.ip(path, value)?;
        let problem = if ip.is_loopback() {
            Some("must not be a loopback address")
        } else if ip.is_multicast() {
            Some("must not be a multicast address")
        } else if ip.is_unspecified() {
            Some("must not be an all-zeros address")
        } else if is_link_local_unicast(ip) {
            Some("must not be a link-local unicast address")
        } else {
            None
        };
        match problem {
            Some(reason) => {
                self.invalid(path, value, reason);
                None
            }
            None => Some(ip),
        }
    }

    /// A CRI or containerd socket. `""` means unset. A bare absolute path is accepted with the
    /// kubelet's deprecation warning and turned into a `unix://` URL.
    fn endpoint(&mut self, path: &str, value: &Value) -> Option<String> {
        let s = self.string(path, value)?;
        if s.is_empty() {
            return None;
        }
        if let Some(socket) = s.strip_prefix("unix://") {
            if socket.starts_with('/') {
                return Some(s);
            }
            self.invalid(path, value, "a unix:// endpoint needs an absolute socket path, e.g. \"unix:///run/containerd/containerd.sock\"");
            return None;
        }
        if s.starts_with('/') {
            let url = format!("unix://{s}");
            self.warn(
                path,
                format!(
                    "using a bare path as endpoint is deprecated, please use the full URL {url:?}"
                ),
            );
            return Some(url);
        }
        match s.split_once("://") {
            Some((scheme, _)) => self.invalid(
                path,
                value,
                format!("protocol {scheme:?} not supported; only unix:// endpoints are supported on Linux"),
            ),
            None => self.invalid(
                path,
                value,
                "must be a unix socket URL such as \"unix:///run/containerd/containerd.sock\"",
            ),
        }
        None
    }

    /// An absolute path, or `""` for "none".
    fn optional_absolute_path(&mut self, path: &str, value: &Value) -> Option<String> {
        let s = self.string(path, value)?;
        if !s.is_empty() && !s.starts_with('/') {
            self.invalid(path, value, "must be an absolute path");
            return None;
        }
        Some(s)
    }

    /// An absolute path in `filepath.Clean` form; `""` means unset (the default).
    fn absolute_clean_path(&mut self, path: &str, value: &Value) -> Option<String> {
        let s = self.string(path, value)?;
        if s.is_empty() {
            return None;
        }
        if !s.starts_with('/') {
            self.invalid(path, value, "must be an absolute path");
            return None;
        }
        if !is_clean_absolute_path(&s) {
            self.invalid(
                path,
                value,
                "must be normalized (no trailing slash, \"//\", \".\" or \"..\")",
            );
            return None;
        }
        Some(s)
    }

    /// `podLogsDir`: the kubelet also requires ASCII, because the path ends up in metrics.
    fn pod_logs_dir(&mut self, path: &str, value: &Value) -> Option<String> {
        let s = self.absolute_clean_path(path, value)?;
        if !s.is_ascii() {
            self.invalid(path, value, "must contain ASCII characters only");
            return None;
        }
        Some(s)
    }

    fn cgroup_driver(&mut self, path: &str, value: &Value) -> Option<CgroupDriver> {
        match self.string(path, value)?.as_str() {
            "" => None,
            "cgroupfs" => Some(CgroupDriver::Cgroupfs),
            "systemd" => Some(CgroupDriver::Systemd),
            _ => {
                self.unsupported(path, value, &["cgroupfs", "systemd"]);
                None
            }
        }
    }

    fn cgroup_root(&mut self, path: &str, value: &Value) -> Option<String> {
        let s = self.string(path, value)?;
        if s.is_empty() {
            return None;
        }
        if !s.starts_with('/') {
            self.invalid(
                path,
                value,
                "must be an absolute cgroup path such as \"/\" or \"/kubelet\"",
            );
            return None;
        }
        Some(s)
    }

    /// `containerdNamespace`: containerd's own rule for namespace names.
    fn containerd_namespace(&mut self, path: &str, value: &Value) -> Option<String> {
        let s = self.string(path, value)?;
        if s.is_empty() {
            return None;
        }
        if !is_valid_containerd_namespace(&s) {
            self.invalid(
                path,
                value,
                "must be at most 76 characters of letters and digits, separated by single '.', '_' or '-'",
            );
            return None;
        }
        Some(s)
    }

    fn mapping<'v>(&mut self, path: &str, value: &'v Value) -> Option<&'v Mapping> {
        match value {
            Value::Null => None,
            Value::Mapping(map) => Some(map),
            _ => {
                self.invalid(path, value, "expected a mapping");
                None
            }
        }
    }

    /// The kubelet's gate rules (component-base's `SetFromMap`): an unknown name is an error,
    /// a locked gate may only be set to its default, setting a GA or deprecated gate warns,
    /// `AllAlpha`/`AllBeta` set every gate of their stage not set here, and a gate that is on
    /// while a gate it depends on is off is an error. nodelet adds one rule: a value it cannot
    /// behave as is refused, naming what nodelet does.
    fn feature_gates(&mut self, path: &str, value: &Value) {
        let Some(map) = self.mapping(path, value) else {
            return;
        };
        let mut stage_wide = Vec::new();
        for (key, enabled) in map {
            let Some(name) = key.as_str() else {
                self.invalid(
                    &format!("{path}[{}]", render(key)),
                    key,
                    "feature gate names are strings",
                );
                continue;
            };
            let gate_path = format!("{path}.{name}");
            let Value::Bool(enabled) = enabled else {
                self.invalid(&gate_path, enabled, "expected a boolean (true or false)");
                continue;
            };
            if name == ALL_ALPHA || name == ALL_BETA {
                stage_wide.push((name, *enabled));
                continue;
            }
            let Some(gate) = feature_gate(name) else {
                self.invalid(
                    &gate_path,
                    &Value::Bool(*enabled),
                    format!("unrecognized feature gate: {name}"),
                );
                continue;
            };
            if gate.locked && *enabled != gate.default {
                let reason = format!(
                    "cannot set feature gate {name} to {enabled}, feature is locked to {}",
                    gate.default
                );
                self.fail(&gate_path, "", reason, FieldErrorKind::Forbidden);
                continue;
            }
            if let GateSupport::Only(value, why) = gate.nodelet {
                if *enabled != value {
                    self.invalid(
                        &gate_path,
                        &Value::Bool(*enabled),
                        format!("nodelet implements only {name}={value}: {why}"),
                    );
                    continue;
                }
            }
            match gate.stage {
                GateStage::Ga => self.warn(
                    &gate_path,
                    format!("setting GA feature gate {name}={enabled}; it will be removed in a future release"),
                ),
                GateStage::Deprecated => self.warn(
                    &gate_path,
                    format!("setting deprecated feature gate {name}={enabled}; it will be removed in a future release"),
                ),
                GateStage::Alpha | GateStage::Beta => {}
            }
            self.feature_gates.insert(name.to_string(), *enabled);
        }
        for (name, enabled) in stage_wide {
            self.stage_wide_gate(&format!("{path}.{name}"), name, enabled);
        }
        self.gate_dependencies(path);
    }

    /// `AllAlpha` or `AllBeta` at `enabled`: every gate of the stage that is not set by name
    /// takes the value. Refused when that would move a gate nodelet cannot behave as off its
    /// default (a gate already at `enabled` does not move).
    fn stage_wide_gate(&mut self, gate_path: &str, name: &str, enabled: bool) {
        let stage = if name == ALL_ALPHA {
            GateStage::Alpha
        } else {
            GateStage::Beta
        };
        let moved: Vec<&FeatureGate> = kubelet_gates()
            .iter()
            .map(|k| &k.gate)
            .filter(|g| g.stage == stage && g.default != enabled)
            .filter(|g| !self.feature_gates.contains_key(g.name))
            .collect();
        let refused: Vec<&str> = moved
            .iter()
            .filter(|g| !g.accepts(enabled))
            .map(|g| g.name)
            .collect();
        if !refused.is_empty() {
            let shown = refused
                .iter()
                .take(5)
                .copied()
                .collect::<Vec<_>>()
                .join(", ");
            let more = match refused.len() {
                n if n > 5 => format!(" and {} more", n - 5),
                _ => String::new(),
            };
            self.invalid(
                gate_path,
                &Value::Bool(enabled),
                format!(
                    "nodelet implements only {name}={}: it would set gates nodelet cannot behave as to {enabled}: {shown}{more}",
                    !enabled
                ),
            );
            return;
        }
        // Kept as written: `configured_gate` applies it to the gates of its stage.
        self.feature_gates.insert(name.to_string(), enabled);
    }

    /// The kubelet's gate dependencies: a gate on (as set, else by default) whose dependencies
    /// are not all on is an error, in its words.
    fn gate_dependencies(&mut self, path: &str) {
        let on = |gates: &BTreeMap<String, bool>, name: &str| {
            configured_gate(gates, name)
                .unwrap_or_else(|| feature_gate(name).is_some_and(|g| g.default))
        };
        let mut errors = Vec::new();
        for k in kubelet_gates() {
            if k.depends_on.is_empty() || !on(&self.feature_gates, k.gate.name) {
                continue;
            }
            let off: Vec<&str> = k
                .depends_on
                .iter()
                .copied()
                .filter(|d| !on(&self.feature_gates, d))
                .collect();
            if !off.is_empty() {
                errors.push(format!(
                    "{} is enabled, but depends on features that are disabled: [{}]",
                    k.gate.name,
                    off.join(" ")
                ));
            }
        }
        for error in errors {
            self.fail(path, "", error, FieldErrorKind::Invalid);
        }
    }

    fn logging(&mut self, path: &str, value: &Value) {
        let Some(map) = self.mapping(path, value) else {
            return;
        };
        for (key, value) in map {
            let Some(name) = key.as_str() else {
                self.unknown_field(&format!("{path}.{}", render(key)), LOGGING_FIELDS);
                continue;
            };
            let field_path = format!("{path}.{name}");
            match name {
                "format" => {
                    self.logging_format = match self.string(&field_path, value).as_deref() {
                        None | Some("") => None,
                        Some("text") => Some(LogFormat::Text),
                        Some("json") => Some(LogFormat::Json),
                        Some(_) => {
                            self.unsupported(&field_path, value, &["json", "text"]);
                            None
                        }
                    }
                }
                "verbosity" => {
                    self.logging_verbosity = self.int_in(
                        &field_path,
                        value,
                        0,
                        i64::from(u32::MAX),
                        "must not be negative",
                    )
                }
                "options" => self.logging_options(&field_path, value),
                _ => match fixed_field(FIXED_LOGGING_FIELDS, name) {
                    Some(field) => self.fixed(&field_path, field, value),
                    None => self.unknown_field(&field_path, LOGGING_FIELDS),
                },
            }
        }
    }

    /// `logging.options`: per-format options of component-base. nodelet writes each line as it
    /// comes, to one stream, so it accepts the defaults only: `splitStream: false` and
    /// `infoBufferSize: "0"` (no buffering) under `json` and `text`.
    fn logging_options(&mut self, path: &str, value: &Value) {
        const FORMATS: &[&str] = &["json", "text"];
        const OPTIONS: &[&str] = &["splitStream", "infoBufferSize"];
        let Some(map) = self.mapping(path, value) else {
            return;
        };
        for (key, options) in map {
            let Some(format) = key.as_str().filter(|k| FORMATS.contains(k)) else {
                self.unknown_field(&format!("{path}.{}", render(key)), &[FORMATS]);
                continue;
            };
            let format_path = format!("{path}.{format}");
            let Some(options) = self.mapping(&format_path, options) else {
                continue;
            };
            for (key, option) in options {
                let Some(name) = key.as_str().filter(|k| OPTIONS.contains(k)) else {
                    self.unknown_field(&format!("{format_path}.{}", render(key)), &[OPTIONS]);
                    continue;
                };
                let option_path = format!("{format_path}.{name}");
                let default = match (name, option) {
                    (_, Value::Null) => true,
                    ("splitStream", Value::Bool(split)) => !split,
                    ("infoBufferSize", Value::String(size)) => {
                        crate::quantity::Quantity::parse(size).is_ok_and(|q| q.value() == 0)
                    }
                    ("infoBufferSize", Value::Number(n)) => n.as_u64() == Some(0),
                    _ => false,
                };
                if !default {
                    self.invalid(
                        &option_path,
                        option,
                        "nodelet accepts only the default (splitStream: false, infoBufferSize: \"0\"): it writes every line as it comes, to one stream",
                    );
                }
            }
        }
    }

    /// `registerWithTaints`: a list of Taint objects (`key`, `value`, `effect`).
    fn taints(
        &mut self,
        path: &str,
        value: &Value,
    ) -> Option<Vec<k8s_openapi::api::core::v1::Taint>> {
        if value.is_null() {
            return None;
        }
        let json = match serde_json::to_value(value) {
            Ok(j) => j,
            Err(_) => {
                self.invalid(path, value, "expected a list of taints");
                return None;
            }
        };
        match serde_json::from_value::<Vec<k8s_openapi::api::core::v1::Taint>>(json) {
            Ok(taints) => {
                for (i, t) in taints.iter().enumerate() {
                    if !matches!(
                        t.effect.as_str(),
                        "NoSchedule" | "PreferNoSchedule" | "NoExecute"
                    ) {
                        self.errors.push(FieldError {
                            path: format!("{path}[{i}].effect"),
                            kind: FieldErrorKind::NotSupported,
                            value: Some(format!("{:?}", t.effect)),
                            detail: "supported values: \"NoExecute\", \"NoSchedule\", \"PreferNoSchedule\"".into(),
                        });
                    }
                    if t.key.is_empty() {
                        self.errors.push(FieldError {
                            path: format!("{path}[{i}].key"),
                            kind: FieldErrorKind::Required,
                            value: None,
                            detail: String::new(),
                        });
                    }
                }
                Some(taints)
            }
            Err(e) => {
                self.invalid(path, value, format!("expected a list of taints: {e}"));
                None
            }
        }
    }

    /// A mapping of strings to strings (`nodeLabels`).
    fn string_map(&mut self, path: &str, value: &Value) -> Option<BTreeMap<String, String>> {
        let map = self.mapping(path, value)?;
        let mut out = BTreeMap::new();
        for (k, v) in map {
            match (k.as_str(), v.as_str()) {
                (Some(k), Some(v)) => {
                    out.insert(k.to_string(), v.to_string());
                }
                _ => self.invalid(
                    &format!("{path}[{}]", render(k)),
                    v,
                    "expected string keys and values",
                ),
            }
        }
        Some(out)
    }

    /// `podCleanup`: nodelet's deletion of failed pods nobody deletes (evicted, rejected).
    fn pod_cleanup(&mut self, path: &str, value: &Value) {
        let Some(map) = self.mapping(path, value) else {
            return;
        };
        for (key, value) in map {
            let Some(name) = key.as_str() else {
                self.unknown_field(&format!("{path}.{}", render(key)), &[POD_CLEANUP_FIELDS]);
                continue;
            };
            let field_path = format!("{path}.{name}");
            match name {
                "enabled" => self.pod_cleanup_enabled = self.boolean(&field_path, value),
                "retention" => self.pod_cleanup_retention = self.duration(&field_path, value),
                "barePods" => self.pod_cleanup_bare_pods = self.boolean(&field_path, value),
                _ => self.unknown_field(&field_path, &[POD_CLEANUP_FIELDS]),
            }
        }
    }

    /// The fields of a nested mapping, each with its path; unknown ones are reported.
    fn fields<'v>(
        &mut self,
        path: &str,
        value: &'v Value,
        known: &'static [&'static str],
    ) -> Vec<(String, &'v str, &'v Value)> {
        let Some(map) = self.mapping(path, value) else {
            return Vec::new();
        };
        let mut fields = Vec::new();
        for (key, value) in map {
            match key.as_str() {
                Some(name) if known.contains(&name) => {
                    fields.push((format!("{path}.{name}"), name, value))
                }
                Some(name) => self.unknown_field(&format!("{path}.{name}"), &[known]),
                None => self.unknown_field(&format!("{path}.{}", render(key)), &[known]),
            }
        }
        fields
    }

    /// `authentication` of the kubelet API: `x509.clientCAFile`, `webhook.{enabled,cacheTTL}`,
    /// `anonymous.enabled`.
    fn authentication(&mut self, path: &str, value: &Value) {
        for (path, name, value) in self.fields(path, value, AUTHENTICATION_FIELDS) {
            let known = match name {
                "x509" => AUTHENTICATION_X509_FIELDS,
                "webhook" => AUTHENTICATION_WEBHOOK_FIELDS,
                _ => AUTHENTICATION_ANONYMOUS_FIELDS,
            };
            for (field_path, field, value) in self.fields(&path, value, known) {
                match (name, field) {
                    ("x509", _) => {
                        self.client_ca_file = self.optional_absolute_path(&field_path, value)
                    }
                    ("webhook", "enabled") => {
                        self.authentication_webhook_enabled = self.boolean(&field_path, value)
                    }
                    ("webhook", _) => {
                        self.authentication_webhook_cache_ttl = self.duration(&field_path, value)
                    }
                    _ => self.anonymous_enabled = self.boolean(&field_path, value),
                }
            }
        }
    }

    /// `authorization` of the kubelet API: `mode` (`AlwaysAllow` or `Webhook`) and the
    /// webhook's cache times.
    fn authorization(&mut self, path: &str, value: &Value) {
        for (path, name, value) in self.fields(path, value, AUTHORIZATION_FIELDS) {
            if name == "mode" {
                self.authorization_mode = match self.string(&path, value).as_deref() {
                    // Empty is the kubelet's "unset": Webhook.
                    None | Some("") => None,
                    Some("AlwaysAllow") => Some(AuthorizationMode::AlwaysAllow),
                    Some("Webhook") => Some(AuthorizationMode::Webhook),
                    Some(_) => {
                        self.invalid(&path, value, "must be \"AlwaysAllow\" or \"Webhook\"");
                        None
                    }
                };
                continue;
            }
            for (field_path, field, value) in
                self.fields(&path, value, AUTHORIZATION_WEBHOOK_FIELDS)
            {
                let ttl = self.duration(&field_path, value);
                if field == "cacheAuthorizedTTL" {
                    self.cache_authorized_ttl = ttl;
                } else {
                    self.cache_unauthorized_ttl = ttl;
                }
            }
        }
    }

    /// `kubeReserved` / `systemReserved`: `cpu`, `memory`, `ephemeral-storage` and `pid`
    /// quantities (the kubelet's `ParseResourceList`), none negative.
    fn reserved(&mut self, path: &str, value: &Value) -> Option<Reserved> {
        const KNOWN: &[&str] = &["cpu", "ephemeral-storage", "memory", "pid"];
        let map = self.mapping(path, value)?;
        let mut reserved = Reserved::default();
        let mut ok = true;
        for (key, quantity) in map {
            let Some(name) = key.as_str() else {
                self.invalid(
                    &format!("{path}[{}]", render(key)),
                    key,
                    "expected a resource name",
                );
                ok = false;
                continue;
            };
            let field = format!("{path}.{name}");
            if name.starts_with("hugepages-") {
                self.fail(
                    &field,
                    "",
                    "nodelet does not reserve hugepages: the node's allocatable hugepages are what the kernel has reserved",
                    FieldErrorKind::Forbidden,
                );
                ok = false;
                continue;
            }
            if !KNOWN.contains(&name) {
                self.fail(
                    &field,
                    "",
                    format!(
                        "cannot reserve {name:?} resource; supported: {}",
                        KNOWN.join(", ")
                    ),
                    FieldErrorKind::NotSupported,
                );
                ok = false;
                continue;
            }
            let text = match quantity {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => {
                    self.invalid(
                        &field,
                        quantity,
                        "expected a quantity such as \"500m\" or \"1Gi\"",
                    );
                    ok = false;
                    continue;
                }
            };
            let parsed = match crate::quantity::Quantity::parse(&text) {
                Ok(q) => q,
                Err(e) => {
                    self.invalid(&field, quantity, e.to_string());
                    ok = false;
                    continue;
                }
            };
            if parsed.milli_value() < 0 {
                self.invalid(
                    &field,
                    quantity,
                    format!("resource quantity for {name:?} cannot be negative"),
                );
                ok = false;
                continue;
            }
            match name {
                "cpu" => reserved.cpu_milli = parsed.milli_value(),
                "memory" => reserved.memory = parsed.value(),
                "ephemeral-storage" => reserved.ephemeral_storage = parsed.value(),
                _ => reserved.pids = parsed.value(),
            }
        }
        ok.then_some(reserved)
    }

    /// `enforceNodeAllocatable`: a list of the kubelet's values; `none` stands alone. Only
    /// `pods` is enforced: the `*-reserved` values need `kubeReservedCgroup` /
    /// `systemReservedCgroup`, which nodelet does not manage, so they are refused.
    fn enforce_node_allocatable(&mut self, path: &str, value: &Value) -> Option<Vec<String>> {
        let Value::Sequence(items) = value else {
            if !value.is_null() {
                self.invalid(path, value, "expected a list such as [pods]");
            }
            return None;
        };
        let mut out = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let field = format!("{path}[{i}]");
            let Some(v) = item.as_str() else {
                self.invalid(&field, item, "expected a string");
                ok = false;
                continue;
            };
            if !ENFORCE_NODE_ALLOCATABLE_VALUES.contains(&v) {
                self.unsupported(&field, item, ENFORCE_NODE_ALLOCATABLE_VALUES);
                ok = false;
                continue;
            }
            if v != "pods" && v != "none" {
                self.invalid(
                    &field,
                    item,
                    "nodelet enforces only \"pods\": it manages no kubeReservedCgroup/systemReservedCgroup",
                );
                ok = false;
                continue;
            }
            out.push(v.to_string());
        }
        if out.iter().any(|v| v == "none") && out.len() > 1 {
            self.fail(
                path,
                &render(value),
                "enforceNodeAllocatable may not contain additional enforcements when \"none\" is specified",
                FieldErrorKind::Invalid,
            );
            ok = false;
        }
        ok.then_some(out)
    }

    /// `memoryThrottlingFactor`: a number greater than 0 and at most 1.
    fn throttling_factor(&mut self, path: &str, value: &Value) -> Option<(f64, String)> {
        let factor = match value {
            Value::Null => return None,
            Value::Number(n) => n.as_f64(),
            _ => None,
        };
        match factor {
            Some(f) if f > 0.0 && f <= 1.0 => Some((f, render(value))),
            Some(_) => {
                self.invalid(
                    path,
                    value,
                    "must be greater than 0 and less than or equal to 1",
                );
                None
            }
            None => {
                self.invalid(
                    path,
                    value,
                    "expected a number greater than 0 and at most 1, such as 0.9",
                );
                None
            }
        }
    }

    fn reservation_policy(&mut self, path: &str, value: &Value) -> Option<ReservationPolicy> {
        match self.string(path, value).as_deref() {
            None | Some("") => None,
            Some("None") => Some(ReservationPolicy::None),
            Some("TieredReservation") => Some(ReservationPolicy::TieredReservation),
            Some(_) => {
                self.unsupported(path, value, &["None", "TieredReservation"]);
                None
            }
        }
    }

    /// `shutdownGracePeriodByPodPriority`: a list of `{priority, shutdownGracePeriodSeconds}`
    /// (both required: an entry without a period would end its pods at once).
    fn shutdown_by_priority(
        &mut self,
        path: &str,
        value: &Value,
    ) -> Option<Vec<GracePeriodByPriority>> {
        let items = match value {
            Value::Null => return None,
            Value::Sequence(items) => items,
            _ => {
                self.invalid(path, value, "expected a list");
                return None;
            }
        };
        let errors = self.errors.len();
        let mut periods = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let item_path = format!("{path}[{i}]");
            let (mut priority, mut seconds) = (None, None);
            for (field_path, name, value) in
                self.fields(&item_path, item, SHUTDOWN_BY_PRIORITY_FIELDS)
            {
                if name == "priority" {
                    priority = self.int_in::<i32>(
                        &field_path,
                        value,
                        i64::from(i32::MIN),
                        i64::from(i32::MAX),
                        "",
                    );
                } else {
                    seconds = self.int_in::<i64>(
                        &field_path,
                        value,
                        0,
                        i64::MAX,
                        "must be greater than or equal to 0",
                    );
                }
            }
            if !matches!(item, Value::Mapping(_)) {
                continue;
            }
            for (name, found) in [
                ("priority", priority.is_some()),
                ("shutdownGracePeriodSeconds", seconds.is_some()),
            ] {
                let missing = match item.get(name) {
                    None | Some(Value::Null) => true,
                    Some(_) => false,
                };
                if !found && missing {
                    self.fail(
                        &format!("{item_path}.{name}"),
                        "",
                        "",
                        FieldErrorKind::Required,
                    );
                }
            }
            if let (Some(priority), Some(shutdown_grace_period_seconds)) = (priority, seconds) {
                periods.push(GracePeriodByPriority {
                    priority,
                    shutdown_grace_period_seconds,
                });
            }
        }
        (self.errors.len() == errors).then_some(periods)
    }

    /// `memorySwap`: `swapBehavior` `NoSwap` (or empty, its default) or `LimitedSwap`.
    fn memory_swap(&mut self, path: &str, value: &Value) {
        let Some(map) = self.mapping(path, value) else {
            return;
        };
        for (key, value) in map {
            let Some(name) = key.as_str() else {
                self.unknown_field(&format!("{path}.{}", render(key)), &[MEMORY_SWAP_FIELDS]);
                continue;
            };
            let field_path = format!("{path}.{name}");
            if name != "swapBehavior" {
                self.unknown_field(&field_path, &[MEMORY_SWAP_FIELDS]);
                continue;
            }
            match self.string(&field_path, value).as_deref() {
                None => {}
                Some("") | Some("NoSwap") => self.swap_behavior = Some(SwapBehavior::NoSwap),
                Some("LimitedSwap") => self.swap_behavior = Some(SwapBehavior::LimitedSwap),
                Some(_) => self.unsupported(&field_path, value, &["LimitedSwap", "NoSwap"]),
            }
        }
    }

    fn crash_loop_back_off(&mut self, path: &str, value: &Value) {
        let Some(map) = self.mapping(path, value) else {
            return;
        };
        for (key, value) in map {
            let Some(name) = key.as_str() else {
                self.unknown_field(
                    &format!("{path}.{}", render(key)),
                    &[CRASH_LOOP_BACK_OFF_FIELDS],
                );
                continue;
            };
            let field_path = format!("{path}.{name}");
            if name != "maxContainerRestartPeriod" {
                self.unknown_field(&field_path, &[CRASH_LOOP_BACK_OFF_FIELDS]);
                continue;
            }
            let Some(period) = self.duration(&field_path, value) else {
                continue;
            };
            if !(MIN_MAX_RESTART_PERIOD..=MAX_MAX_RESTART_PERIOD).contains(&period) {
                self.invalid(&field_path, value, "must be between 1s and 300s, inclusive");
                continue;
            }
            self.max_container_restart_period = Some(period);
        }
    }
}

impl Decoded {
    /// `userNamespaces`: `idsPerPod` at least 65536, a multiple of it, at most 2^32-1 (the
    /// kubelet's messages).
    fn user_namespaces(&mut self, path: &str, value: &Value) {
        let Some(map) = self.mapping(path, value) else {
            return;
        };
        for (key, value) in map {
            let Some(name) = key.as_str() else {
                self.unknown_field(
                    &format!("{path}.{}", render(key)),
                    &[USER_NAMESPACES_FIELDS],
                );
                continue;
            };
            let field_path = format!("{path}.{name}");
            if name != "idsPerPod" {
                self.unknown_field(&field_path, &[USER_NAMESPACES_FIELDS]);
                continue;
            }
            let Some(ids) = self.int(&field_path, value) else {
                continue;
            };
            let unit = i64::from(crate::userns::UNIT);
            let reason = if ids < unit {
                format!("must not be less than {unit}")
            } else if ids % unit != 0 {
                format!("must be a multiple of {unit}")
            } else if ids > i64::from(u32::MAX) {
                format!("must not be more than {}", u32::MAX)
            } else {
                self.user_namespaces_ids_per_pod = u32::try_from(ids).ok();
                continue;
            };
            self.invalid(&field_path, value, reason);
        }
    }
}

fn is_link_local_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

/// containerd's `^[A-Za-z0-9]+(?:[._-](?:[A-Za-z0-9]+))*$`, at most 76 characters.
fn is_valid_containerd_namespace(s: &str) -> bool {
    s.len() <= 76
        && s.split(['.', '_', '-'])
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// A lowercase RFC 1123 subdomain, the rule for Node names.
pub(super) fn is_dns1123_subdomain(s: &str) -> bool {
    crate::podspec::field::dns1123_subdomain(s).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_absolute_paths() {
        let cases: &[(&str, bool)] = &[
            ("/", true),
            ("/var/log/pods", true),
            ("/var/log/pods/", false),
            ("//var", false),
            ("/var//log", false),
            ("/var/./log", false),
            ("/var/../log", false),
            ("/..", false),
            ("var/log", false),
            ("", false),
            ("/var/log.d/..x", true),
        ];
        for (path, want) in cases {
            assert_eq!(is_clean_absolute_path(path), *want, "path {path:?}");
        }
    }

    #[test]
    fn containerd_namespaces() {
        let cases: &[(&str, bool)] = &[
            ("k8s.io", true),
            ("default", true),
            ("moby", true),
            ("a-b_c.d", true),
            ("A1", true),
            ("", false),
            (".k8s", false),
            ("k8s.", false),
            ("k8s..io", false),
            ("k8s io", false),
            ("k8s/io", false),
        ];
        for (ns, want) in cases {
            assert_eq!(is_valid_containerd_namespace(ns), *want, "namespace {ns:?}");
        }
        assert!(!is_valid_containerd_namespace(&"a".repeat(77)));
        assert!(is_valid_containerd_namespace(&"a".repeat(76)));
    }

    #[test]
    fn dns1123_subdomains() {
        let cases: &[(&str, bool)] = &[
            ("node-1", true),
            ("node-1.example.com", true),
            ("1node", true),
            ("Node", false),
            ("node_1", false),
            ("-node", false),
            ("node-", false),
            ("node..x", false),
            ("", false),
        ];
        for (name, want) in cases {
            assert_eq!(is_dns1123_subdomain(name), *want, "name {name:?}");
        }
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
    }

    #[test]
    fn render_values_like_the_api_server() {
        let cases: &[(&str, &str)] = &[
            ("many", "\"many\""),
            ("0", "0"),
            ("-3", "-3"),
            ("1.5", "1.5"),
            ("true", "true"),
            ("null", "null"),
            ("[1, a]", "[1,\"a\"]"),
            ("{a: 1}", "{\"a\":1}"),
        ];
        for (yaml, want) in cases {
            let value: Value = serde_yaml::from_str(yaml).unwrap();
            assert_eq!(render(&value), *want, "yaml {yaml:?}");
        }
    }

    #[test]
    fn implemented_and_not_implemented_fields_do_not_overlap() {
        for name in IMPLEMENTED_FIELDS {
            assert!(
                fixed_field(FIXED_FIELDS, name).is_none(),
                "{name} is in both lists"
            );
        }
    }
}
