//! Defaulting and the rules that span fields or need the machine (`Environment`), applied to
//! what `decode` accepted. Defaults follow the kubelet's `SetDefaults_KubeletConfiguration`,
//! including its "zero value means unset" rule for durations and counts.

use std::path::PathBuf;
use std::time::Duration;

use super::decode::{is_dns1123_subdomain, Decoded};
use super::kubelet_fields::{
    GRACEFUL_NODE_SHUTDOWN, GRACEFUL_NODE_SHUTDOWN_BY_PRIORITY, KUBELET_CRASH_LOOP_BACK_OFF_MAX,
    MEMORY_QOS, REDUCE_DEFAULT_CRASH_LOOP_BACK_OFF_DECAY, USER_NAMESPACES_SUPPORT,
};
use super::{
    Authentication, Authorization, AuthorizationMode, Config, Environment, FieldError,
    FieldErrorKind, PodCleanup, Warning, DEFAULT_MAX_CONTAINER_RESTART_PERIOD,
};
use crate::config::memory_qos::ReservationPolicy;

/// The maximum back-off under `ReduceDefaultCrashLoopBackOffDecay` (the kubelet's
/// `reducedMaxCrashLoopBackOff`).
const REDUCED_MAX_CONTAINER_RESTART_PERIOD: Duration = Duration::from_secs(60);

pub(super) struct Resolved {
    pub config: Config,
    pub warnings: Vec<Warning>,
    pub errors: Vec<FieldError>,
}

/// A duration the kubelet defaults when it is zero (`metav1.Duration{}` is "unset").
fn or_default_if_zero(value: Option<Duration>, default: Duration) -> Duration {
    value.filter(|d| !d.is_zero()).unwrap_or(default)
}

/// The kubelet server's fields (`config::kubelet_server`): defaults, TLS, and the two
/// switches nodelet can only honour when off.
fn resolve_kubelet_server(
    fields: super::decode::ServerFields,
    errors: &mut Vec<FieldError>,
    warnings: &mut Vec<Warning>,
) -> super::kubelet_server::KubeletServer {
    use super::kubelet_server::{refuse_true, streaming_idle_timeout, tls_settings, KubeletServer};
    let defaults = KubeletServer::default();
    errors.extend(refuse_true(
        "enableSystemLogQuery",
        fields.enable_system_log_query,
        "nodelet serves no node log query (/logs/?query=); the kubelet needs the NodeLogQuery feature gate for it",
    ));
    errors.extend(refuse_true(
        "enableContentionProfiling",
        fields.enable_contention_profiling,
        "a Go runtime setting (block profiling); nodelet has no such profiler",
    ));
    KubeletServer {
        enable_server: fields.enable_server.unwrap_or(defaults.enable_server),
        enable_debugging_handlers: fields
            .enable_debugging_handlers
            .unwrap_or(defaults.enable_debugging_handlers),
        enable_system_log_handler: fields
            .enable_system_log_handler
            .unwrap_or(defaults.enable_system_log_handler),
        enable_profiling_handler: fields
            .enable_profiling_handler
            .unwrap_or(defaults.enable_profiling_handler),
        enable_debug_flags_handler: fields
            .enable_debug_flags_handler
            .unwrap_or(defaults.enable_debug_flags_handler),
        streaming_idle_timeout: streaming_idle_timeout(fields.streaming_connection_idle_timeout),
        tls: tls_settings(
            fields.tls_min_version.as_deref(),
            fields.tls_cipher_suites.as_deref(),
            fields.tls_curve_preferences.as_deref(),
            errors,
            warnings,
        ),
    }
}

/// The graceful node shutdown fields with the kubelet's rules (`ValidateKubeletConfiguration`):
/// each period zero or at least a second, the critical pods' share within the total, the
/// by-priority list not together with the two periods, each behind its feature gate.
fn resolve_shutdown(
    shutdown: super::Shutdown,
    config: &Config,
    errors: &mut Vec<FieldError>,
) -> super::Shutdown {
    let total = shutdown.grace_period;
    let critical = shutdown.grace_period_critical_pods;
    let shown = |d: Duration| Some(format!("{:?}", super::format_duration(d)));
    let periods_set = !total.is_zero() || !critical.is_zero();
    if config.feature_enabled(GRACEFUL_NODE_SHUTDOWN) {
        if critical > total {
            errors.push(FieldError {
                path: "shutdownGracePeriodCriticalPods".into(),
                kind: FieldErrorKind::Invalid,
                value: shown(critical),
                detail: format!(
                    "must be <= shutdownGracePeriod {}",
                    super::format_duration(total)
                ),
            });
        }
        for (path, value) in [
            ("shutdownGracePeriod", total),
            ("shutdownGracePeriodCriticalPods", critical),
        ] {
            if !value.is_zero() && value < Duration::from_secs(1) {
                errors.push(FieldError {
                    path: path.into(),
                    kind: FieldErrorKind::Invalid,
                    value: shown(value),
                    detail: "must be either zero or otherwise >= 1 sec".into(),
                });
            }
        }
    } else if periods_set {
        errors.push(FieldError {
            path: if total.is_zero() {
                "shutdownGracePeriodCriticalPods".into()
            } else {
                "shutdownGracePeriod".into()
            },
            kind: FieldErrorKind::Forbidden,
            value: None,
            detail: format!("specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate {GRACEFUL_NODE_SHUTDOWN}"),
        });
    }
    if !shutdown.grace_period_by_pod_priority.is_empty() {
        if !config.feature_enabled(GRACEFUL_NODE_SHUTDOWN_BY_PRIORITY) {
            errors.push(FieldError {
                path: "shutdownGracePeriodByPodPriority".into(),
                kind: FieldErrorKind::Forbidden,
                value: None,
                detail: format!("specifying shutdownGracePeriodByPodPriority requires feature gate {GRACEFUL_NODE_SHUTDOWN_BY_PRIORITY}"),
            });
        } else if periods_set {
            errors.push(FieldError {
                path: "shutdownGracePeriodByPodPriority".into(),
                kind: FieldErrorKind::Forbidden,
                value: None,
                detail: "cannot be specified together with shutdownGracePeriod or shutdownGracePeriodCriticalPods".into(),
            });
        }
    }
    shutdown
}

/// A string where `""` means "use the default".
fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|s| !s.is_empty())
}

/// The eviction fields: thresholds parsed with the kubelet's rules (`ParseThresholdConfig`),
/// an invalid one reported with its field path (`evictionHard[memory.available]`) and value.
fn resolve_eviction(
    d: &Decoded,
    enforce_pods_allocatable: bool,
    errors: &mut Vec<FieldError>,
) -> Option<super::Eviction> {
    use crate::config::eviction::{parse_thresholds, EvictionFields};
    let fields = EvictionFields {
        hard: d.eviction_hard.clone(),
        soft: d.eviction_soft.clone().unwrap_or_default(),
        soft_grace_period: d.eviction_soft_grace_period.clone().unwrap_or_default(),
        minimum_reclaim: d.eviction_minimum_reclaim.clone().unwrap_or_default(),
        merge_defaults: d.merge_default_eviction_settings.unwrap_or(false),
        enforce_pods_allocatable,
    };
    let thresholds = match parse_thresholds(&fields) {
        Ok(t) => t,
        Err(e) => {
            errors.push(FieldError {
                path: e.field,
                kind: if e.value.is_empty() {
                    FieldErrorKind::Required
                } else {
                    FieldErrorKind::Invalid
                },
                value: (!e.value.is_empty()).then(|| format!("{:?}", e.value)),
                detail: e.message,
            });
            return None;
        }
    };
    let defaults = super::Eviction::kubelet_defaults();
    Some(super::Eviction {
        thresholds,
        pressure_transition_period: or_default_if_zero(
            d.eviction_pressure_transition_period,
            defaults.pressure_transition_period,
        ),
        max_pod_grace_period_seconds: d.eviction_max_pod_grace_period.unwrap_or(0),
        evict_static_pods: d.evict_static_pods.unwrap_or(false),
    })
}

pub(super) fn resolve(decoded: Decoded, env: &Environment) -> Resolved {
    let gc_fields = decoded_gc(&decoded);
    let mut eviction_errors = Vec::new();
    let enforce_pods = decoded
        .enforce_node_allocatable
        .as_ref()
        .is_none_or(|v| v.iter().any(|x| x == "pods"));
    let eviction = resolve_eviction(&decoded, enforce_pods, &mut eviction_errors);
    let mut errors = decoded.errors;
    errors.extend(eviction_errors);
    let mut warnings = decoded.warnings;
    let defaults = Config::defaults(env);

    let mut config = Config {
        feature_gates: decoded.feature_gates,
        ..defaults.clone()
    };

    let runtime_endpoint = non_empty(decoded.container_runtime_endpoint)
        .unwrap_or(defaults.container_runtime_endpoint);
    config.image_service_endpoint =
        non_empty(decoded.image_service_endpoint).unwrap_or_else(|| runtime_endpoint.clone());
    config.containerd_endpoint =
        non_empty(decoded.containerd_endpoint).unwrap_or_else(|| runtime_endpoint.clone());
    config.container_runtime_endpoint = runtime_endpoint;

    config.static_pod_path = non_empty(decoded.static_pod_path).map(PathBuf::from);
    config.file_check_frequency =
        or_default_if_zero(decoded.file_check_frequency, defaults.file_check_frequency);
    config.sync_frequency = or_default_if_zero(decoded.sync_frequency, defaults.sync_frequency);
    if let Some(dir) = non_empty(decoded.pod_logs_dir) {
        config.pod_logs_dir = PathBuf::from(dir);
    }
    config.cgroup_driver = decoded.cgroup_driver.unwrap_or(defaults.cgroup_driver);
    config.cgroups_per_qos = decoded.cgroups_per_qos.unwrap_or(defaults.cgroups_per_qos);
    config.cgroup_root = non_empty(decoded.cgroup_root).unwrap_or(defaults.cgroup_root);
    config.fail_cgroup_v1 = decoded.fail_cgroup_v1.unwrap_or(defaults.fail_cgroup_v1);
    config.single_process_oom_kill = decoded
        .single_process_oom_kill
        .unwrap_or(defaults.single_process_oom_kill);
    config.seccomp_default = decoded.seccomp_default.unwrap_or(defaults.seccomp_default);
    config.fail_swap_on = decoded.fail_swap_on.unwrap_or(defaults.fail_swap_on);
    config.swap_behavior = decoded.swap_behavior.unwrap_or(defaults.swap_behavior);
    config.allowed_unsafe_sysctls = decoded.allowed_unsafe_sysctls.unwrap_or_default();
    config.pod_pids_limit = decoded.pod_pids_limit.unwrap_or(defaults.pod_pids_limit);
    config.kube_reserved = decoded.kube_reserved.unwrap_or_default();
    config.system_reserved = decoded.system_reserved.unwrap_or_default();
    config.enforce_node_allocatable = decoded
        .enforce_node_allocatable
        .unwrap_or(defaults.enforce_node_allocatable);
    config.memory_reservation_policy = decoded.memory_reservation_policy.unwrap_or_default();
    resolve_memory_qos(
        &mut config,
        decoded.memory_throttling_factor,
        &mut errors,
        &mut warnings,
    );
    config.max_pods = decoded.max_pods.unwrap_or(defaults.max_pods);
    config.eviction = eviction.unwrap_or(defaults.eviction.clone());
    resolve_gc_and_logs(&mut config, &gc_fields, &mut errors);
    config.node_status_max_images = match decoded.node_status_max_images {
        None => defaults.node_status_max_images,
        // -1 is the kubelet's "no limit"; the decoder refused anything lower.
        Some(n) => u32::try_from(n).ok(),
    };
    config.address = decoded.address.unwrap_or(defaults.address);
    config.read_only_port = decoded.read_only_port.unwrap_or(defaults.read_only_port);
    config.healthz_port = decoded.healthz_port.unwrap_or(defaults.healthz_port);
    config.healthz_bind_address = decoded
        .healthz_bind_address
        .unwrap_or(defaults.healthz_bind_address);
    config.cluster_dns = decoded.cluster_dns.unwrap_or_default();
    config.cluster_domain = decoded.cluster_domain.unwrap_or_default();
    // resolvConf is a pointer in the kubelet's type: absent means the default, "" means none.
    config.resolv_conf = decoded
        .resolv_conf
        .map_or(defaults.resolv_conf, PathBuf::from);
    config.runtime_request_timeout = or_default_if_zero(
        decoded.runtime_request_timeout,
        defaults.runtime_request_timeout,
    );
    config.serialize_image_pulls = decoded
        .serialize_image_pulls
        .unwrap_or(defaults.serialize_image_pulls);
    config.max_parallel_image_pulls = decoded.max_parallel_image_pulls;
    if let Some(n) = config.max_parallel_image_pulls {
        if config.serialize_image_pulls && n != 1 {
            errors.push(FieldError {
                path: "maxParallelImagePulls".into(),
                value: Some(n.to_string()),
                detail: "must be 1 or unset when serializeImagePulls is true".into(),
                kind: FieldErrorKind::Invalid,
            });
        }
    }
    config.image_credential_provider_config =
        non_empty(decoded.image_credential_provider_config).map(PathBuf::from);
    config.image_credential_provider_bin_dir =
        non_empty(decoded.image_credential_provider_bin_dir).map(PathBuf::from);
    match (
        &config.image_credential_provider_config,
        &config.image_credential_provider_bin_dir,
    ) {
        (Some(_), None) => errors.push(FieldError {
            path: "imageCredentialProviderBinDir".into(),
            value: None,
            detail: "must be set together with imageCredentialProviderConfig".into(),
            kind: FieldErrorKind::Required,
        }),
        (None, Some(_)) => errors.push(FieldError {
            path: "imageCredentialProviderConfig".into(),
            value: None,
            detail: "must be set together with imageCredentialProviderBinDir".into(),
            kind: FieldErrorKind::Required,
        }),
        _ => {}
    }
    config.logging.format = decoded.logging_format.unwrap_or(defaults.logging.format);
    config.logging.verbosity = decoded
        .logging_verbosity
        .unwrap_or(defaults.logging.verbosity);

    // For backward compatibility the kubelet reports as often as it updates when only the
    // update frequency is set.
    let update = decoded
        .node_status_update_frequency
        .filter(|d| !d.is_zero());
    config.node_status_update_frequency = update.unwrap_or(defaults.node_status_update_frequency);
    config.node_status_report_frequency = decoded
        .node_status_report_frequency
        .filter(|d| !d.is_zero())
        .or(update)
        .unwrap_or(defaults.node_status_report_frequency);
    config.node_lease_duration_seconds = decoded
        .node_lease_duration_seconds
        .filter(|n| *n != 0)
        .unwrap_or(defaults.node_lease_duration_seconds);
    config.kube_api_qps = decoded.kube_api_qps.unwrap_or(defaults.kube_api_qps);
    config.kube_api_burst = decoded
        .kube_api_burst
        .filter(|n| *n != 0)
        .unwrap_or(defaults.kube_api_burst);
    config.pods_per_core = decoded.pods_per_core.unwrap_or(defaults.pods_per_core);
    config.max_open_files = decoded
        .max_open_files
        .filter(|n| *n != 0)
        .unwrap_or(defaults.max_open_files);
    config.oom_score_adj = decoded.oom_score_adj.unwrap_or(defaults.oom_score_adj);
    config.registry_pull_qps = decoded
        .registry_pull_qps
        .unwrap_or(defaults.registry_pull_qps);
    config.registry_burst = decoded
        .registry_burst
        .filter(|n| *n != 0)
        .unwrap_or(defaults.registry_burst);
    config.event_record_qps = decoded
        .event_record_qps
        .unwrap_or(defaults.event_record_qps);
    config.event_burst = decoded
        .event_burst
        .filter(|n| *n != 0)
        .unwrap_or(defaults.event_burst);
    config.provider_id = decoded.provider_id.unwrap_or_default();
    config.protect_kernel_defaults = decoded.protect_kernel_defaults.unwrap_or(false);
    config.make_iptables_util_chains = decoded.make_iptables_util_chains.unwrap_or(true);
    config.volume_stats_agg_period = decoded
        .volume_stats_agg_period
        .filter(|d| !d.is_zero())
        .unwrap_or(defaults.volume_stats_agg_period);

    config.crash_loop_back_off.max_container_restart_period = if config
        .feature_enabled(KUBELET_CRASH_LOOP_BACK_OFF_MAX)
    {
        // An explicit maximum wins; without one, the reduced-decay gate's 60 s cap applies
        // (the kubelet would fall back to its 300 s default here and lose the gate's cap).
        decoded.max_container_restart_period.unwrap_or(
            if config.feature_enabled(REDUCE_DEFAULT_CRASH_LOOP_BACK_OFF_DECAY) {
                REDUCED_MAX_CONTAINER_RESTART_PERIOD
            } else {
                DEFAULT_MAX_CONTAINER_RESTART_PERIOD
            },
        )
    } else {
        if decoded.max_container_restart_period.is_some() {
            errors.push(FieldError {
                path: "crashLoopBackOff.maxContainerRestartPeriod".to_string(),
                kind: FieldErrorKind::Forbidden,
                value: None,
                detail: format!("may only be set when feature gate {KUBELET_CRASH_LOOP_BACK_OFF_MAX} is enabled"),
            });
        }
        if config.feature_enabled(REDUCE_DEFAULT_CRASH_LOOP_BACK_OFF_DECAY) {
            REDUCED_MAX_CONTAINER_RESTART_PERIOD
        } else {
            DEFAULT_MAX_CONTAINER_RESTART_PERIOD
        }
    };

    // `idsPerPod` only means something with the gate on (the kubelet makes no user-namespace
    // manager without it): set with the gate off it is refused, not ignored.
    if let Some(ids) = decoded.user_namespaces_ids_per_pod {
        if config.feature_enabled(USER_NAMESPACES_SUPPORT) {
            config.user_namespaces_ids_per_pod = ids;
        } else {
            errors.push(FieldError {
                path: "userNamespaces.idsPerPod".to_string(),
                kind: FieldErrorKind::Forbidden,
                value: None,
                detail: format!(
                    "may only be set when feature gate {USER_NAMESPACES_SUPPORT} is enabled"
                ),
            });
        }
    }

    config.shutdown = resolve_shutdown(
        super::Shutdown {
            grace_period: decoded.shutdown_grace_period.unwrap_or_default(),
            grace_period_critical_pods: decoded
                .shutdown_grace_period_critical_pods
                .unwrap_or_default(),
            grace_period_by_pod_priority: decoded
                .shutdown_grace_period_by_pod_priority
                .unwrap_or_default(),
        },
        &config,
        &mut errors,
    );

    if let Some(dir) = decoded.root_dir {
        config.root_dir = PathBuf::from(dir);
    }
    config.node_name = resolve_node_name(decoded.node_name, env, &mut errors);
    config.node_ip = decoded.node_ip;
    config.external_cloud_provider = decoded.external_cloud_provider.unwrap_or(false);
    config.register_node = decoded.register_node.unwrap_or(defaults.register_node);
    config.register_with_taints = decoded.register_with_taints.unwrap_or_default();
    config.kubeconfig = non_empty(decoded.kubeconfig).map(PathBuf::from);
    config.bootstrap_kubeconfig = non_empty(decoded.bootstrap_kubeconfig).map(PathBuf::from);
    // The kubelet's `--cert-dir` defaults under its root directory, wherever that is.
    config.cert_dir = decoded
        .cert_dir
        .map(PathBuf::from)
        .unwrap_or_else(|| config.root_dir.join("pki"));
    config.rotate_certificates = decoded
        .rotate_certificates
        .unwrap_or(defaults.rotate_certificates);
    config.server_tls_bootstrap = decoded
        .server_tls_bootstrap
        .unwrap_or(defaults.server_tls_bootstrap);
    if config.kubeconfig.is_none() {
        if let Some(path) = &config.bootstrap_kubeconfig {
            errors.push(FieldError {
                path: "bootstrapKubeconfig".into(),
                kind: FieldErrorKind::Invalid,
                value: Some(format!("{:?}", path.display().to_string())),
                detail: "needs kubeconfig: the file the issued client certificate is written to"
                    .into(),
            });
        }
        if config.server_tls_bootstrap {
            errors.push(FieldError {
                path: "serverTLSBootstrap".into(),
                kind: FieldErrorKind::Invalid,
                value: Some("true".into()),
                detail:
                    "needs kubeconfig: the serving certificate is requested from the API server"
                        .into(),
            });
        }
    }
    if config.server_tls_bootstrap
        && !config.feature_enabled(super::kubelet_fields::ROTATE_KUBELET_SERVER_CERTIFICATE)
    {
        // The kubelet's validation: the bootstrapped serving certificate is the rotated one.
        errors.push(FieldError {
            path: "serverTLSBootstrap".into(),
            kind: FieldErrorKind::Invalid,
            value: Some("true".into()),
            detail: "requires feature gate RotateKubeletServerCertificate".into(),
        });
    }
    config.node_labels = decoded.node_labels.unwrap_or_default();
    config.pod_cleanup = PodCleanup {
        enabled: decoded
            .pod_cleanup_enabled
            .unwrap_or(defaults.pod_cleanup.enabled),
        retention: decoded
            .pod_cleanup_retention
            .unwrap_or(defaults.pod_cleanup.retention),
        bare_pods: decoded
            .pod_cleanup_bare_pods
            .unwrap_or(defaults.pod_cleanup.bare_pods),
    };
    config.containerd_namespace =
        non_empty(decoded.containerd_namespace).unwrap_or(defaults.containerd_namespace);
    if let Some(dir) = non_empty(decoded.container_log_links_dir) {
        config.container_log_links_dir = PathBuf::from(dir);
    }
    config.pleg_relist_period = decoded
        .pleg_relist_period
        .unwrap_or(defaults.pleg_relist_period);
    config.port = decoded.port.unwrap_or(defaults.port);
    config.tls_cert_file = non_empty(decoded.tls_cert_file).map(PathBuf::from);
    config.tls_private_key_file = non_empty(decoded.tls_private_key_file).map(PathBuf::from);
    let tls_field_invalid = errors
        .iter()
        .any(|e| e.path == "tlsCertFile" || e.path == "tlsPrivateKeyFile");
    match (&config.tls_cert_file, &config.tls_private_key_file) {
        _ if tls_field_invalid => {}
        (Some(_), None) => errors.push(FieldError {
            path: "tlsPrivateKeyFile".into(),
            kind: FieldErrorKind::Required,
            value: None,
            detail: "must be set together with tlsCertFile".into(),
        }),
        (None, Some(_)) => errors.push(FieldError {
            path: "tlsCertFile".into(),
            kind: FieldErrorKind::Required,
            value: None,
            detail: "must be set together with tlsPrivateKeyFile".into(),
        }),
        _ => {}
    }
    config.kubelet_server = resolve_kubelet_server(decoded.server, &mut errors, &mut warnings);
    let authn = &defaults.authentication;
    config.authentication = Authentication {
        client_ca_file: non_empty(decoded.client_ca_file).map(PathBuf::from),
        webhook_enabled: decoded
            .authentication_webhook_enabled
            .unwrap_or(authn.webhook_enabled),
        // kubeadm writes these as `0s`: zero is the kubelet's "unset".
        webhook_cache_ttl: or_default_if_zero(
            decoded.authentication_webhook_cache_ttl,
            authn.webhook_cache_ttl,
        ),
        anonymous_enabled: decoded.anonymous_enabled.unwrap_or(authn.anonymous_enabled),
    };
    let authz = &defaults.authorization;
    config.authorization = Authorization {
        mode: decoded.authorization_mode.unwrap_or(authz.mode),
        cache_authorized_ttl: or_default_if_zero(
            decoded.cache_authorized_ttl,
            authz.cache_authorized_ttl,
        ),
        cache_unauthorized_ttl: or_default_if_zero(
            decoded.cache_unauthorized_ttl,
            authz.cache_unauthorized_ttl,
        ),
    };
    if config.authentication.anonymous_enabled
        && config.authorization.mode == AuthorizationMode::AlwaysAllow
        && config.port != 0
    {
        warnings.push(Warning {
            path: "authentication.anonymous.enabled".into(),
            message: open_kubelet_api_warning(config.address, config.port),
        });
    }

    Resolved {
        config,
        warnings,
        errors,
    }
}

/// The warning for a kubelet API that anyone may use: anonymous requests, authorized by
/// `AlwaysAllow` (the kubelet's defaults without `--config`). It says what that allows: a
/// shell in every container, not only their logs.
pub fn open_kubelet_api_warning(address: std::net::IpAddr, port: u16) -> String {
    let reach = if address.is_unspecified() {
        format!("port {port} on any address of this node (listening on {address})")
    } else {
        format!("{}", std::net::SocketAddr::new(address, port))
    };
    format!(
        "anonymous requests with authorization mode AlwaysAllow: anyone who can reach {reach} \
         can exec into, attach to and port-forward into every container on this node, as well \
         as read every container's logs, without any credentials; set \
         authentication.anonymous.enabled=false and authorization.mode=Webhook (or start with \
         --config), or bind address to 127.0.0.1"
    )
}

/// Memory QoS fields against the `MemoryQoS` gate (on by default since 1.37): with the gate off
/// the kubelet refuses a throttling factor other than the former default 0.9 (which it then
/// ignores) and `TieredReservation`.
fn resolve_memory_qos(
    config: &mut Config,
    factor: Option<(f64, String)>,
    errors: &mut Vec<FieldError>,
    warnings: &mut Vec<Warning>,
) {
    let gate = config.feature_enabled(MEMORY_QOS);
    config.memory_throttling_factor = factor.as_ref().map(|(f, _)| *f);
    if gate {
        return;
    }
    match &factor {
        Some((f, _)) if (*f - 0.9).abs() < f64::EPSILON => {
            config.memory_throttling_factor = None;
            warnings.push(Warning {
                path: "memoryThrottlingFactor".into(),
                message: format!("0.9 has no effect while feature gate {MEMORY_QOS} is disabled (as in the kubelet)"),
            });
        }
        Some((_, written)) => errors.push(FieldError {
            path: "memoryThrottlingFactor".into(),
            kind: FieldErrorKind::Forbidden,
            value: (!written.is_empty()).then(|| written.clone()),
            detail: format!(
                "may only be set (to anything but 0.9, the former default) when feature gate {MEMORY_QOS} is enabled"
            ),
        }),
        None => {}
    }
    if config.memory_reservation_policy == ReservationPolicy::TieredReservation {
        errors.push(FieldError {
            path: "memoryReservationPolicy".into(),
            kind: FieldErrorKind::Forbidden,
            value: Some("\"TieredReservation\"".into()),
            detail: format!("requires feature gate {MEMORY_QOS}"),
        });
    }
}

/// The kubelet's `GetHostname`: the override or the hostname, trimmed and lowercased, which
/// must then be a valid Node name.
fn resolve_node_name(
    configured: Option<String>,
    env: &Environment,
    errors: &mut Vec<FieldError>,
) -> String {
    let configured = configured
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty());
    let from_hostname = configured.is_none();
    let name = configured.unwrap_or_else(|| env.hostname.trim().to_lowercase());
    if name.is_empty() {
        errors.push(FieldError {
            path: "nodeName".to_string(),
            kind: FieldErrorKind::Required,
            value: None,
            detail: "the hostname is empty; set nodeName".to_string(),
        });
    } else if !is_dns1123_subdomain(&name) {
        let mut reason = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')".to_string();
        if from_hostname {
            reason.push_str("; the hostname is not a valid node name, set nodeName");
        }
        errors.push(FieldError {
            path: "nodeName".to_string(),
            kind: FieldErrorKind::Invalid,
            value: Some(format!("{name:?}")),
            detail: reason,
        });
    }
    name
}

/// The image GC and log rotation fields as written.
struct GcFields {
    high: Option<u32>,
    low: Option<u32>,
    min_age: Option<Duration>,
    max_age: Option<Duration>,
    log_max_size: Option<u64>,
    log_max_files: Option<u32>,
    log_max_workers: Option<u32>,
    log_monitor_interval: Option<Duration>,
}

fn decoded_gc(d: &Decoded) -> GcFields {
    GcFields {
        high: d.image_gc_high_threshold_percent,
        low: d.image_gc_low_threshold_percent,
        min_age: d.image_minimum_gc_age,
        max_age: d.image_maximum_gc_age,
        log_max_size: d.container_log_max_size,
        log_max_files: d.container_log_max_files,
        log_max_workers: d.container_log_max_workers,
        log_monitor_interval: d.container_log_monitor_interval,
    }
}

/// Defaults as the kubelet's (`imageMinimumGCAge: 0s` means unset, so 2m), and the rules that
/// span fields: low below high, a maximum age above the minimum.
fn resolve_gc_and_logs(config: &mut Config, f: &GcFields, errors: &mut Vec<FieldError>) {
    if let Some(high) = f.high {
        config.image_gc_high_threshold_percent = high;
    }
    if let Some(low) = f.low {
        config.image_gc_low_threshold_percent = low;
    }
    config.image_minimum_gc_age = or_default_if_zero(f.min_age, config.image_minimum_gc_age);
    config.image_maximum_gc_age = f.max_age.unwrap_or(config.image_maximum_gc_age);
    let (high, low) = (
        config.image_gc_high_threshold_percent,
        config.image_gc_low_threshold_percent,
    );
    if low >= high {
        errors.push(FieldError {
            path: "imageGCLowThresholdPercent".into(),
            value: Some(low.to_string()),
            detail: format!("must be less than imageGCHighThresholdPercent ({high})"),
            kind: FieldErrorKind::Invalid,
        });
    }
    let (min_age, max_age) = (config.image_minimum_gc_age, config.image_maximum_gc_age);
    if !max_age.is_zero() && max_age <= min_age {
        errors.push(FieldError {
            path: "imageMaximumGCAge".into(),
            value: Some(format!("{max_age:?}")),
            detail: format!("must be greater than imageMinimumGCAge ({min_age:?})"),
            kind: FieldErrorKind::Invalid,
        });
    }
    if let Some(size) = f.log_max_size {
        config.container_log_max_size = size;
    }
    if let Some(files) = f.log_max_files {
        config.container_log_max_files = files;
    }
    if let Some(workers) = f.log_max_workers {
        config.container_log_max_workers = workers;
    }
    if let Some(interval) = f.log_monitor_interval {
        config.container_log_monitor_interval = interval;
    }
}
