//! `/configz`: the resolved configuration in the kubelet's shape, `{"kubeletconfig": {...}}`
//! with `KubeletConfiguration` (v1beta1) field names, camelCase, durations as Go writes them.
//!
//! Pure: a function of the [`Config`] (defaults, the file, drop-ins and flags already
//! applied). The fields nodelet implements are written, and the kubelet's fields nodelet has
//! no setting for at the one value it behaves as (`cpuCFSQuota: true`, `cpuManagerPolicy:
//! none`, ...: [`FIXED_FIELDS`]); a field whose every value does nothing is left out. Tools
//! read `/configz`, change a field and write the whole back as the file (Kubernetes' node e2e
//! suite does, through Go's types, where a field left out comes back as its zero value: an
//! omitted `cpuCFSQuota` would return as `false`, which nodelet refuses). nodelet's own
//! extensions are under their file names. No secret is in it: the configuration holds paths
//! to credentials (kubeconfig, keys), never their contents.

use serde_json::{json, Map, Value};

use super::duration::format_duration;
use super::eviction::{Signal, Threshold, ThresholdValue};
use super::kubelet_fields::{Accepts, FIXED_FIELDS};
use super::reserved::Reserved;
use super::{AuthorizationMode, Config};

/// `kubeReserved` / `systemReserved` as the kubelet prints them (quantities as strings);
/// a resource not reserved is left out.
fn reserved(r: &Reserved) -> Value {
    let mut m = Map::new();
    if r.cpu_milli != 0 {
        m.insert("cpu".into(), json!(format!("{}m", r.cpu_milli)));
    }
    for (key, value) in [
        ("memory", r.memory),
        ("ephemeral-storage", r.ephemeral_storage),
        ("pid", r.pids),
    ] {
        if value != 0 {
            m.insert(key.into(), json!(value.to_string()));
        }
    }
    Value::Object(m)
}

/// A threshold value as the file writes it: a quantity (bytes, inodes, PIDs) or a percentage.
fn threshold_value(v: ThresholdValue) -> String {
    match v {
        ThresholdValue::Quantity(q) => q.to_string(),
        ThresholdValue::PartsPerMillion(ppm) => {
            let (whole, frac) = (ppm / 10_000, ppm % 10_000);
            if frac == 0 {
                format!("{whole}%")
            } else {
                let frac = format!("{frac:04}");
                format!("{whole}.{}%", frac.trim_end_matches('0'))
            }
        }
    }
}

/// `evictionHard`, `evictionSoft`, `evictionSoftGracePeriod` and `evictionMinimumReclaim`
/// from the parsed thresholds (the defaults included, as the kubelet's `/configz` shows
/// them). `allocatableMemory.available` is the kubelet's internal copy of the hard memory
/// threshold, not a field of the file, and is left out.
fn eviction_fields(thresholds: &[Threshold]) -> [(&'static str, Value); 4] {
    let (mut hard, mut soft, mut grace, mut reclaim) =
        (Map::new(), Map::new(), Map::new(), Map::new());
    for t in thresholds
        .iter()
        .filter(|t| t.signal != Signal::AllocatableMemoryAvailable)
    {
        let name = t.signal.name().to_string();
        let value = json!(threshold_value(t.value));
        if t.is_hard() {
            hard.insert(name.clone(), value);
        } else {
            soft.insert(name.clone(), value);
            grace.insert(name.clone(), json!(format_duration(t.grace_period)));
        }
        if let Some(min) = t.min_reclaim {
            reclaim.insert(name, json!(threshold_value(min)));
        }
    }
    [
        ("evictionHard", Value::Object(hard)),
        ("evictionSoft", Value::Object(soft)),
        ("evictionSoftGracePeriod", Value::Object(grace)),
        ("evictionMinimumReclaim", Value::Object(reclaim)),
    ]
}

fn path(p: &Option<std::path::PathBuf>) -> Value {
    p.as_ref()
        .map_or(Value::Null, |p| json!(p.display().to_string()))
}

/// The value a [`FIXED_FIELDS`] field shows: the one nodelet behaves as, or nothing when every
/// value it accepts does nothing (a duration that paces a refused feature, a deprecated bit).
fn behaves_as(accepts: &Accepts) -> Option<Value> {
    match accepts {
        Accepts::Bool(b) => Some(json!(b)),
        Accepts::Strings([first, ..]) => Some(json!(first)),
        Accepts::Duration(d) => Some(json!(format_duration(*d))),
        Accepts::Strings([])
        | Accepts::AnyDuration
        | Accepts::AnyString
        | Accepts::IntIn(..)
        | Accepts::Empty => None,
    }
}

/// The body of `/configz`.
pub fn configz(cfg: &Config) -> Value {
    let d = |v: std::time::Duration| json!(format_duration(v));
    let mut k = json!({
        "kind": "KubeletConfiguration",
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "containerRuntimeEndpoint": cfg.container_runtime_endpoint,
        "imageServiceEndpoint": cfg.image_service_endpoint,
        "staticPodPath": path(&cfg.static_pod_path),
        "fileCheckFrequency": d(cfg.file_check_frequency),
        "syncFrequency": d(cfg.sync_frequency),
        "podLogsDir": cfg.pod_logs_dir.display().to_string(),
        "cgroupDriver": cfg.cgroup_driver.as_str(),
        "cgroupsPerQOS": cfg.cgroups_per_qos,
        "cgroupRoot": cfg.cgroup_root,
        "failCgroupV1": cfg.fail_cgroup_v1,
        "singleProcessOOMKill": cfg.single_process_oom_kill,
        "seccompDefault": cfg.seccomp_default,
        "failSwapOn": cfg.fail_swap_on,
        "memorySwap": {"swapBehavior": cfg.swap_behavior.as_str()},
        "allowedUnsafeSysctls": cfg.allowed_unsafe_sysctls,
        "podPidsLimit": cfg.pod_pids_limit,
        "kubeReserved": reserved(&cfg.kube_reserved),
        "systemReserved": reserved(&cfg.system_reserved),
        "enforceNodeAllocatable": cfg.enforce_node_allocatable,
        "maxPods": cfg.max_pods,
        "imageGCHighThresholdPercent": cfg.image_gc_high_threshold_percent,
        "imageGCLowThresholdPercent": cfg.image_gc_low_threshold_percent,
        "imageMinimumGCAge": d(cfg.image_minimum_gc_age),
        "imageMaximumGCAge": d(cfg.image_maximum_gc_age),
        "containerLogMaxSize": cfg.container_log_max_size.to_string(),
        "containerLogMaxFiles": cfg.container_log_max_files,
        "containerLogMaxWorkers": cfg.container_log_max_workers,
        "containerLogMonitorInterval": d(cfg.container_log_monitor_interval),
        "nodeStatusMaxImages": cfg.node_status_max_images.map_or(json!(-1), |n| json!(n)),
    });
    // Two literals: one would pass `json!`'s macro recursion limit.
    let rest = json!({
        "evictionPressureTransitionPeriod": d(cfg.eviction.pressure_transition_period),
        "evictionMaxPodGracePeriod": cfg.eviction.max_pod_grace_period_seconds,
        "address": cfg.address.to_string(),
        "port": cfg.port,
        "readOnlyPort": cfg.read_only_port,
        "healthzPort": cfg.healthz_port,
        "healthzBindAddress": cfg.healthz_bind_address.to_string(),
        "clusterDNS": cfg.cluster_dns.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "clusterDomain": cfg.cluster_domain,
        "resolvConf": cfg.resolv_conf.display().to_string(),
        "runtimeRequestTimeout": d(cfg.runtime_request_timeout),
        "serializeImagePulls": cfg.serialize_image_pulls,
        "imageCredentialProviderConfig": path(&cfg.image_credential_provider_config),
        "imageCredentialProviderBinDir": path(&cfg.image_credential_provider_bin_dir),
        "featureGates": cfg.feature_gates,
        "logging": {
            "format": cfg.logging.format.as_str(),
            "verbosity": cfg.logging.verbosity,
        },
        "nodeStatusUpdateFrequency": d(cfg.node_status_update_frequency),
        "nodeStatusReportFrequency": d(cfg.node_status_report_frequency),
        "nodeLeaseDurationSeconds": cfg.node_lease_duration_seconds,
        "kubeAPIQPS": cfg.kube_api_qps,
        "kubeAPIBurst": cfg.kube_api_burst,
        "crashLoopBackOff": {
            "maxContainerRestartPeriod": d(cfg.crash_loop_back_off.max_container_restart_period),
        },
        "userNamespaces": {
            "idsPerPod": cfg.user_namespaces_ids_per_pod,
        },
        "shutdownGracePeriod": d(cfg.shutdown.grace_period),
        "shutdownGracePeriodCriticalPods": d(cfg.shutdown.grace_period_critical_pods),
        "registerNode": cfg.register_node,
        "rotateCertificates": cfg.rotate_certificates,
        "serverTLSBootstrap": cfg.server_tls_bootstrap,
        "tlsCertFile": path(&cfg.tls_cert_file),
        "tlsPrivateKeyFile": path(&cfg.tls_private_key_file),
        "authentication": {
            "x509": {"clientCAFile": path(&cfg.authentication.client_ca_file)},
            "webhook": {
                "enabled": cfg.authentication.webhook_enabled,
                "cacheTTL": d(cfg.authentication.webhook_cache_ttl),
            },
            "anonymous": {"enabled": cfg.authentication.anonymous_enabled},
        },
        "authorization": {
            "mode": match cfg.authorization.mode {
                AuthorizationMode::AlwaysAllow => "AlwaysAllow",
                AuthorizationMode::Webhook => "Webhook",
            },
            "webhook": {
                "cacheAuthorizedTTL": d(cfg.authorization.cache_authorized_ttl),
                "cacheUnauthorizedTTL": d(cfg.authorization.cache_unauthorized_ttl),
            },
        },
        // nodelet's extensions, under the names its file uses.
        "rootDir": cfg.root_dir.display().to_string(),
        "nodeName": cfg.node_name,
        "containerdEndpoint": cfg.containerd_endpoint,
        "containerdNamespace": cfg.containerd_namespace,
        "plegRelistPeriod": d(cfg.pleg_relist_period),
        "kubeconfig": path(&cfg.kubeconfig),
        "bootstrapKubeconfig": path(&cfg.bootstrap_kubeconfig),
        "certDir": cfg.cert_dir.display().to_string(),
        "evictStaticPods": cfg.eviction.evict_static_pods,
    });
    let process = json!({
        "podsPerCore": cfg.pods_per_core,
        "maxOpenFiles": cfg.max_open_files,
        "oomScoreAdj": cfg.oom_score_adj,
        "registryPullQPS": cfg.registry_pull_qps,
        "registryBurst": cfg.registry_burst,
        "eventRecordQPS": cfg.event_record_qps,
        "eventBurst": cfg.event_burst,
        "protectKernelDefaults": cfg.protect_kernel_defaults,
        "volumeStatsAggPeriod": d(cfg.volume_stats_agg_period),
        "makeIPTablesUtilChains": cfg.make_iptables_util_chains,
    });
    let fields = k.as_object_mut().expect("a json! object");
    for more in [rest, process] {
        if let Value::Object(more) = more {
            fields.extend(more);
        }
    }
    if !cfg.provider_id.is_empty() {
        fields.insert("providerID".into(), json!(cfg.provider_id));
    }
    fields.insert(
        "containerLogLinksDir".into(),
        json!(cfg.container_log_links_dir.display().to_string()),
    );
    // Go's `omitempty`: unset optional fields are left out, not null.
    fields.retain(|_, v| !v.is_null());
    for (name, value) in eviction_fields(&cfg.eviction.thresholds) {
        // `omitempty`: a map with no entry is left out.
        if value.as_object().is_some_and(|m| !m.is_empty()) {
            fields.insert(name.into(), value);
        }
    }
    if let Some(ip) = cfg.node_ip {
        fields.insert("nodeIP".into(), json!(ip.to_string()));
    }
    if cfg.external_cloud_provider {
        fields.insert("cloudProvider".into(), json!("external"));
    }
    if let Some(n) = cfg.max_parallel_image_pulls {
        fields.insert("maxParallelImagePulls".into(), json!(n));
    }
    let server = &cfg.kubelet_server;
    let tls = &server.tls;
    fields.extend([
        ("enableServer".into(), json!(server.enable_server)),
        (
            "enableDebuggingHandlers".into(),
            json!(server.enable_debugging_handlers),
        ),
        (
            "enableSystemLogHandler".into(),
            json!(server.enable_system_log_handler),
        ),
        (
            "enableProfilingHandler".into(),
            json!(server.enable_profiling_handler),
        ),
        (
            "enableDebugFlagsHandler".into(),
            json!(server.enable_debug_flags_handler),
        ),
        (
            "streamingConnectionIdleTimeout".into(),
            json!(d(server.streaming_idle_timeout)),
        ),
        ("tlsMinVersion".into(), json!(tls.min_version.as_str())),
    ]);
    if !tls.cipher_suites_tls12.is_empty() {
        let names: Vec<&str> = tls
            .cipher_suites_tls12
            .iter()
            .map(|s| s.go_name())
            .collect();
        fields.insert("tlsCipherSuites".into(), json!(names));
    }
    if !tls.curve_preferences.is_empty() {
        let ids: Vec<u16> = tls.curve_preferences.iter().map(|g| g.curve_id()).collect();
        fields.insert("tlsCurvePreferences".into(), json!(ids));
    }
    if let Some(f) = cfg.memory_throttling_factor {
        fields.insert("memoryThrottlingFactor".into(), json!(f));
    }
    // nodelet refuses `true` (no node log query).
    fields.insert("enableSystemLogQuery".into(), json!(false));
    for field in FIXED_FIELDS {
        if let Some(value) = behaves_as(&field.accepts) {
            fields.entry(field.name).or_insert(value);
        }
    }
    json!({ "kubeletconfig": k })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, Environment};
    use std::path::Path;

    fn load(yaml: &str) -> Config {
        let yaml = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{yaml}"
        );
        parse(
            &yaml,
            Path::new("/etc/nodelet/config.yaml"),
            &Environment {
                hostname: "node1".into(),
            },
        )
        .expect("valid config")
        .config
    }

    /// (what the file says, JSON pointer below `kubeletconfig`, the value `/configz` shows).
    #[test]
    fn fields_table() {
        let cases = [
            ("maxPods: 42\n", "/maxPods", json!(42)),
            ("", "/apiVersion", json!("kubelet.config.k8s.io/v1beta1")),
            ("syncFrequency: 90s\n", "/syncFrequency", json!("1m30s")),
            ("cgroupDriver: systemd\n", "/cgroupDriver", json!("systemd")),
            (
                "kubeReserved:\n  cpu: 250m\n  memory: 1Gi\n",
                "/kubeReserved",
                json!({"cpu": "250m", "memory": "1073741824"}),
            ),
            (
                "featureGates:\n  KubeletCrashLoopBackOffMax: true\n",
                "/featureGates/KubeletCrashLoopBackOffMax",
                json!(true),
            ),
            (
                "authentication:\n  anonymous:\n    enabled: true\n",
                "/authentication/anonymous/enabled",
                json!(true),
            ),
            (
                "nodeStatusMaxImages: -1\n",
                "/nodeStatusMaxImages",
                json!(-1),
            ),
            (
                "evictionHard:\n  memory.available: 100Mi\n  nodefs.available: 7.5%\n",
                "/evictionHard",
                json!({"memory.available": "104857600", "nodefs.available": "7.5%"}),
            ),
            (
                "evictionSoft:\n  memory.available: 10%\nevictionSoftGracePeriod:\n  memory.available: 90s\n",
                "/evictionSoftGracePeriod",
                json!({"memory.available": "1m30s"}),
            ),
        ];
        for (yaml, pointer, want) in cases {
            let value = configz(&load(yaml));
            assert_eq!(
                value["kubeletconfig"].pointer(pointer),
                Some(&want),
                "{yaml:?} {pointer}"
            );
        }
    }

    /// What Go writes for a v1beta1 field `/configz` left out, when it decodes the body into
    /// the kubelet's types and encodes the file again (`decodeConfigz` and
    /// `WriteKubeletConfigFile` of the node e2e suite): a pointer in v1beta1 over a plain value
    /// in the kubelet's internal type comes back as that value's zero, and so does a duration
    /// (a struct: `omitempty` keeps it). Fields of other types left out stay out.
    fn go_zero_when_left_out() -> Vec<(&'static str, Value)> {
        let bools = [
            "enableServer",
            "enableDebuggingHandlers",
            "cgroupsPerQOS",
            "cpuCFSQuota",
            "serializeImagePulls",
            "mergeDefaultEvictionSettings",
            "enableControllerAttachDetach",
            "makeIPTablesUtilChains",
            "failSwapOn",
            "enableSystemLogHandler",
            "enableSystemLogQuery",
            "enableProfilingHandler",
            "enableDebugFlagsHandler",
            "seccompDefault",
            "registerNode",
            "localStorageCapacityIsolation",
            "failCgroupV1",
        ];
        let numbers = [
            "registryPullQPS",
            "eventRecordQPS",
            "healthzPort",
            "oomScoreAdj",
            "imageGCHighThresholdPercent",
            "imageGCLowThresholdPercent",
            "podPidsLimit",
            "nodeStatusMaxImages",
            "kubeAPIQPS",
            "iptablesMasqueradeBit",
            "iptablesDropBit",
            "containerLogMaxFiles",
            "containerLogMaxWorkers",
        ];
        let durations = [
            "syncFrequency",
            "fileCheckFrequency",
            "httpCheckFrequency",
            "streamingConnectionIdleTimeout",
            "nodeStatusUpdateFrequency",
            "nodeStatusReportFrequency",
            "imageMinimumGCAge",
            "imageMaximumGCAge",
            "volumeStatsAggPeriod",
            "cpuManagerReconcilePeriod",
            "runtimeRequestTimeout",
            "evictionPressureTransitionPeriod",
            "shutdownGracePeriod",
            "shutdownGracePeriodCriticalPods",
            "cpuCFSQuotaPeriod",
            "containerLogMonitorInterval",
        ];
        let mut zeroes: Vec<(&'static str, Value)> = Vec::new();
        zeroes.extend(bools.map(|name| (name, json!(false))));
        zeroes.extend(numbers.map(|name| (name, json!(0))));
        zeroes.extend(durations.map(|name| (name, json!("0s"))));
        zeroes.push(("resolvConf", json!("")));
        zeroes
    }

    /// `/configz` read, written back as the file through Go's types, loads as the same
    /// configuration: nodelet restarted on it behaves as before (the node e2e suite's
    /// `tempSetCurrentKubeletConfig` changes one field this way and restarts the agent).
    #[test]
    fn configz_written_back_through_go_types_loads_the_same_configuration() {
        let kubelet_fields: std::collections::HashSet<&str> =
            include_str!("kubelet-config-v1beta1-fields.txt")
                .lines()
                .filter(|l| !l.starts_with('#') && !l.is_empty())
                .collect();
        let files = [
            "",
            // The conformance run's file (scripts/conformance.sh).
            "containerRuntimeEndpoint: unix:///run/c/containerd.sock\nstaticPodPath: /var/lib/c/manifests\n\
             address: 0.0.0.0\nport: 10250\nreadOnlyPort: 10255\nhealthzBindAddress: 127.0.0.1\n\
             healthzPort: 10248\nfailCgroupV1: false\nfailSwapOn: false\ncgroupDriver: cgroupfs\n\
             imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n\
             evictionHard: {memory.available: 1Mi}\nauthentication:\n  anonymous: {enabled: false}\n\
             \x20 webhook: {enabled: true}\n  x509: {clientCAFile: /etc/ca.crt}\nauthorization:\n\
             \x20 mode: Webhook\n",
            "kubeReserved: {cpu: 250m, memory: 1Gi}\nevictionSoft: {memory.available: 10%}\n\
             evictionSoftGracePeriod: {memory.available: 90s}\nnodeStatusMaxImages: -1\n\
             podPidsLimit: 4096\ncontainerLogMaxSize: 20Mi\ntlsMinVersion: VersionTLS13\n",
        ];
        for file in files {
            let original = load(file);
            let mut written = configz(&original)["kubeletconfig"]
                .as_object()
                .expect("an object")
                .clone();
            written.retain(|name, _| {
                kubelet_fields.contains(name.as_str()) || name == "kind" || name == "apiVersion"
            });
            for (name, zero) in go_zero_when_left_out() {
                written.entry(name).or_insert(zero);
            }
            let text = serde_json::to_string(&Value::Object(written)).expect("json");
            let back = parse(
                &text,
                Path::new("/etc/nodelet/config.yaml"),
                &Environment {
                    hostname: "node1".into(),
                },
            )
            .unwrap_or_else(|e| panic!("{file:?} written back does not load: {e}\n{text}"))
            .config;
            assert_eq!(back, original, "{file:?} written back: {text}");
        }
    }

    #[test]
    fn eviction_defaults_without_the_internal_signal() {
        let k = configz(&load(
            "evictionMinimumReclaim:\n  memory.available: 512Mi\n",
        ))["kubeletconfig"]
            .clone();
        // The kubelet's Linux defaults, as its /configz shows them.
        assert_eq!(
            k["evictionHard"]["memory.available"],
            json!("104857600"),
            "{k}"
        );
        assert_eq!(k["evictionHard"]["nodefs.available"], json!("10%"), "{k}");
        assert!(
            k["evictionHard"]
                .get("allocatableMemory.available")
                .is_none(),
            "{k}"
        );
        assert!(
            k.get("evictionSoft").is_none(),
            "empty maps are left out: {k}"
        );
        assert_eq!(
            k["evictionMinimumReclaim"]["memory.available"],
            json!("536870912"),
            "{k}"
        );
    }

    #[test]
    fn unset_paths_are_left_out_and_credentials_are_paths_only() {
        let value = configz(&load(
            "tlsPrivateKeyFile: /etc/k/key.pem\ntlsCertFile: /etc/k/c.pem\n",
        ));
        let k = &value["kubeletconfig"];
        assert_eq!(k["tlsPrivateKeyFile"], json!("/etc/k/key.pem"));
        assert!(k.get("kubeconfig").is_none(), "{k}");
        assert!(k.get("staticPodPath").is_none(), "{k}");
    }
}
