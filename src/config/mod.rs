//! nodelet's configuration file: a kubelet `KubeletConfiguration`
//! (`apiVersion: kubelet.config.k8s.io/v1beta1`) plus a few nodelet fields, turned into a
//! defaulted, validated [`Config`].
//!
//! Operators bring their kubelet config, so field names, defaults and the "zero means default"
//! rules are the kubelet's (`pkg/kubelet/apis/config/v1beta1/defaults.go`,
//! `.../validation/validation.go`). Kubelet fields nodelet does not implement are accepted with
//! a [`Warning`]; anything else unknown is an error. Every problem in a file is reported at
//! once, each with its field path, so one edit fixes them all.
//!
//! Parsing is pure ([`parse`]); [`load`] only adds the file read, and [`Environment`] carries
//! the impure inputs to defaulting (the hostname).

pub mod configz;
mod decode;
pub(crate) mod duration;
pub mod eviction;
pub mod flags;
pub mod kernel_tunables;
pub mod kubelet_fields;
pub mod kubelet_server;
pub mod memory_qos;
pub mod reserved;
mod resolve;
pub mod shutdown;
pub mod swap;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use duration::{format_duration, parse_duration};

/// The only `apiVersion` accepted (the kubelet's file format).
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The only `kind` accepted.
pub const KIND: &str = "KubeletConfiguration";

pub const DEFAULT_CONTAINER_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
pub const DEFAULT_POD_LOGS_DIR: &str = "/var/log/pods";
/// Where the kubelet links the containers' logs (its fixed `legacyContainerLogsDir`).
pub const DEFAULT_CONTAINER_LOG_LINKS_DIR: &str = "/var/log/containers";
pub const DEFAULT_RESOLV_CONF: &str = "/etc/resolv.conf";
pub const DEFAULT_ROOT_DIR: &str = "/var/lib/nodelet";
pub const DEFAULT_CONTAINERD_NAMESPACE: &str = "k8s.io";
/// The kubelet's `MaxContainerBackOff`.
pub const DEFAULT_MAX_CONTAINER_RESTART_PERIOD: Duration = Duration::from_secs(300);

/// Everything nodelet reads from its configuration file, defaulted and validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `containerRuntimeEndpoint`: the CRI runtime service socket (`unix:///...`).
    pub container_runtime_endpoint: String,
    /// `imageServiceEndpoint`: the CRI image service; defaults to the runtime endpoint.
    pub image_service_endpoint: String,
    /// `staticPodPath`: directory (or single file) of static pod manifests; `None` = no static pods.
    pub static_pod_path: Option<PathBuf>,
    /// `fileCheckFrequency`: how often the static pod path is re-read.
    pub file_check_frequency: Duration,
    /// `syncFrequency`: the longest time between two syncs of a pod.
    pub sync_frequency: Duration,
    /// `podLogsDir`: root of `<namespace>_<name>_<uid>/<container>/<n>.log`.
    pub pod_logs_dir: PathBuf,
    pub cgroup_driver: CgroupDriver,
    /// `cgroupsPerQOS`: create the `kubepods/{burstable,besteffort}` hierarchy.
    pub cgroups_per_qos: bool,
    /// `cgroupRoot`: the parent of the pod cgroup hierarchy, in cgroupfs form.
    pub cgroup_root: String,
    /// `failCgroupV1` (default true): refuse to run on a cgroup v1 host.
    pub fail_cgroup_v1: bool,
    /// `singleProcessOOMKill` (default false): on cgroup v2, an OOM kill in a container kills
    /// only the chosen process instead of the whole container (`memory.oom.group`).
    pub single_process_oom_kill: bool,
    /// `seccompDefault` (default false): containers whose pod sets no seccomp profile run
    /// under the runtime's default profile instead of unconfined.
    pub seccomp_default: bool,
    /// `failSwapOn` (default true): refuse to start on a node with swap on (`config::swap`).
    pub fail_swap_on: bool,
    /// `memorySwap.swapBehavior` (default `NoSwap`): what containers may swap (`cgroup::swap`).
    pub swap_behavior: swap::SwapBehavior,
    /// `allowedUnsafeSysctls`: sysctls (or prefixes ending in `*`) pods may set beyond the safe
    /// set, each checked at load to be namespaced (`podspec::sysctl`).
    pub allowed_unsafe_sysctls: Vec<String>,
    /// `podPidsLimit` (default -1, no limit): `pids.max` of every pod cgroup.
    pub pod_pids_limit: i64,
    /// `kubeReserved`: cpu, memory, ephemeral-storage and pids set aside for node daemons.
    pub kube_reserved: reserved::Reserved,
    /// `systemReserved`: likewise, for the operating system.
    pub system_reserved: reserved::Reserved,
    /// `enforceNodeAllocatable` (default `[pods]`).
    pub enforce_node_allocatable: Vec<String>,
    /// `memoryThrottlingFactor` (default unset: no `memory.high`).
    pub memory_throttling_factor: Option<f64>,
    /// `memoryReservationPolicy` (default `None`).
    pub memory_reservation_policy: memory_qos::ReservationPolicy,
    pub max_pods: u32,
    /// `imageGCHighThresholdPercent` (85): image GC runs when the image filesystem is this full.
    pub image_gc_high_threshold_percent: u32,
    /// `imageGCLowThresholdPercent` (80): image GC frees down to this.
    pub image_gc_low_threshold_percent: u32,
    /// `imageMinimumGCAge` (2m): an image seen for less than this is never collected.
    pub image_minimum_gc_age: Duration,
    /// `imageMaximumGCAge` (0 = off): an image unused for this long is collected anyway.
    pub image_maximum_gc_age: Duration,
    /// `containerLogMaxSize` (10Mi) in bytes: a running container's log is rotated past this.
    pub container_log_max_size: u64,
    /// `containerLogMaxFiles` (5): log files kept per container, the current one included.
    pub container_log_max_files: u32,
    /// `containerLogMaxWorkers` (1): containers whose logs are rotated at the same time.
    pub container_log_max_workers: u32,
    /// `containerLogMonitorInterval` (10s): how often log sizes are checked.
    pub container_log_monitor_interval: Duration,
    /// `nodeStatusMaxImages`: how many images the node status lists (largest first); `None`
    /// (`-1` in the file) lists all.
    pub node_status_max_images: Option<u32>,
    /// `evictionHard`, `evictionSoft` and the other eviction fields, parsed.
    pub eviction: Eviction,
    /// `address`: where the kubelet API (`port`) and the read-only API (`readOnlyPort`, off
    /// by default, unauthenticated) listen. 0.0.0.0 as the kubelet's, so the API server can
    /// reach the kubelet API for `kubectl logs`.
    pub address: IpAddr,
    /// `readOnlyPort`: 0 disables the read-only API.
    pub read_only_port: u16,
    /// `healthzPort`: 0 disables `/healthz`.
    pub healthz_port: u16,
    pub healthz_bind_address: IpAddr,
    /// `clusterDNS`: nameservers for `dnsPolicy: ClusterFirst` pods; empty = host DNS.
    pub cluster_dns: Vec<IpAddr>,
    /// `clusterDomain`: search domain suffix (`cluster.local`); empty = none.
    pub cluster_domain: String,
    /// `resolvConf`: the host resolver file; an empty path means none (no host DNS for pods).
    pub resolv_conf: PathBuf,
    /// `runtimeRequestTimeout`: deadline of CRI calls except pulls, logs, exec and attach.
    pub runtime_request_timeout: Duration,
    pub serialize_image_pulls: bool,
    /// `maxParallelImagePulls`: at most this many pulls at once (with
    /// `serializeImagePulls: false`); `None` = no limit.
    pub max_parallel_image_pulls: Option<u32>,
    /// `imageCredentialProviderConfig`: the `CredentialProviderConfig` file of the credential
    /// provider plugins (the kubelet's `--image-credential-provider-config`).
    pub image_credential_provider_config: Option<PathBuf>,
    /// `imageCredentialProviderBinDir`: where those plugins' executables are.
    pub image_credential_provider_bin_dir: Option<PathBuf>,
    /// `featureGates` exactly as written; use [`Config::feature_enabled`] to read a gate.
    pub feature_gates: BTreeMap<String, bool>,
    pub logging: Logging,
    pub node_status_update_frequency: Duration,
    pub node_status_report_frequency: Duration,
    pub node_lease_duration_seconds: u32,
    pub kube_api_qps: u32,
    pub kube_api_burst: u32,
    /// `podsPerCore` (0: no per-core limit): the node's pods are at most this many per CPU,
    /// and at most `maxPods` ([`Config::max_pods_on`]).
    pub pods_per_core: u32,
    /// `maxOpenFiles`: nodelet's own `RLIMIT_NOFILE`, set at start.
    pub max_open_files: u64,
    /// `oomScoreAdj`: nodelet's own `oom_score_adj`, set at start.
    pub oom_score_adj: i32,
    /// `registryPullQPS` (0: unlimited) and `registryBurst`: the image pulls' token bucket; a
    /// pull that finds it empty fails with the kubelet's `pull QPS exceeded`.
    pub registry_pull_qps: u32,
    pub registry_burst: u32,
    /// `eventRecordQPS` / `eventBurst`: the token bucket of the events' own API client.
    pub event_record_qps: u32,
    pub event_burst: u32,
    /// `providerID`: `spec.providerID` of the Node nodelet registers ("" leaves it unset).
    pub provider_id: String,
    /// `protectKernelDefaults`: refuse to start when the kernel tunables differ from the
    /// kubelet's values, instead of setting them (`config::kernel_tunables`).
    pub protect_kernel_defaults: bool,
    /// `volumeStatsAggPeriod` (default 1m; `0s` is the default): how long a pod's volume usage
    /// (Summary API, ephemeral-storage eviction) is served before its volumes are walked again.
    pub volume_stats_agg_period: Duration,
    /// `makeIPTablesUtilChains` (default true): keep the kubelet's `KUBE-IPTABLES-HINT` and
    /// `KUBE-FIREWALL` chains (`node::iptables`).
    pub make_iptables_util_chains: bool,
    pub crash_loop_back_off: CrashLoopBackOff,
    /// `userNamespaces.idsPerPod` (default 65536): the host IDs each `hostUsers: false` pod
    /// gets (`userns`); only with the `UserNamespacesSupport` gate on.
    pub user_namespaces_ids_per_pod: u32,
    /// `shutdownGracePeriod`, `shutdownGracePeriodCriticalPods`,
    /// `shutdownGracePeriodByPodPriority`: graceful node shutdown (off when all are unset).
    pub shutdown: Shutdown,
    // nodelet extensions (not in the kubelet's KubeletConfiguration):
    /// `rootDir`: nodelet's state directory (the kubelet's `--root-dir`).
    pub root_dir: PathBuf,
    /// `nodeName`: the node's name (the kubelet's `--hostname-override`), lowercased.
    pub node_name: String,
    /// `nodeIP`: the address reported as the node's InternalIP (the kubelet's `--node-ip`).
    pub node_ip: Option<IpAddr>,
    /// `cloudProvider: external` (the kubelet's `--cloud-provider=external`): the Node is
    /// registered with the `node.cloudprovider.kubernetes.io/uninitialized` taint and, with
    /// `nodeIP`, the `alpha.kubernetes.io/provided-node-ip` annotation; its addresses are the
    /// cloud controller manager's once it has set them.
    pub external_cloud_provider: bool,
    /// `containerdEndpoint`: containerd's native API, for its task event stream.
    pub containerd_endpoint: String,
    /// `registerNode` (kubelet): register the Node object in cluster mode (default true).
    pub register_node: bool,
    /// `registerWithTaints` (kubelet): taints the Node is registered with.
    pub register_with_taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// `kubeconfig` (nodelet; the kubelet's `--kubeconfig`): join the cluster this file points
    /// to. Unset = standalone mode.
    pub kubeconfig: Option<PathBuf>,
    /// `bootstrapKubeconfig` (nodelet; the kubelet's `--bootstrap-kubeconfig`): credentials that
    /// may only ask for a client certificate. When `kubeconfig` holds no valid client
    /// certificate, nodelet sends a CSR with these, waits for the certificate and writes
    /// `kubeconfig` pointing at it (TLS bootstrap, `crate::certificate`).
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `certDir` (nodelet; the kubelet's `--cert-dir`, default `<rootDir>/pki`): where the
    /// issued client and serving certificates (and the self-signed one) are kept.
    pub cert_dir: PathBuf,
    /// `rotateCertificates` (kubelet, default false): renew the client certificate through a
    /// CSR before it expires, without a restart.
    pub rotate_certificates: bool,
    /// `serverTLSBootstrap` (kubelet, default false): the kubelet API's serving certificate
    /// comes from a CSR (signer `kubernetes.io/kubelet-serving`) and is renewed the same way.
    pub server_tls_bootstrap: bool,
    /// `nodeLabels` (nodelet; the kubelet's `--node-labels`): labels the Node is registered with.
    pub node_labels: BTreeMap<String, String>,
    /// `podCleanup` (nodelet): deletion of failed pods that nobody deletes.
    pub pod_cleanup: PodCleanup,
    /// `containerdNamespace`: the containerd namespace CRI containers live in.
    pub containerd_namespace: String,
    /// `containerLogLinksDir` (nodelet; the kubelet's fixed `/var/log/containers`): where the
    /// `<pod>_<namespace>_<container>-<id>.log` links to the containers' logs are made.
    pub container_log_links_dir: PathBuf,
    /// `plegRelistPeriod`: the periodic relist; containerd events are the fast path.
    pub pleg_relist_period: Duration,
    /// `port`: the authenticated kubelet API (HTTPS: `/containerLogs`, `/pods`, `/healthz`,
    /// `/metrics`), on `address`. 0 turns it off (nodelet; the kubelet requires a port).
    pub port: u16,
    /// `tlsCertFile` / `tlsPrivateKeyFile`: the serving certificate of `port`; when both are
    /// unset a self-signed one is made and kept under `<rootDir>/pki`, as the kubelet does.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// `authentication`: who may call `port`.
    pub authentication: Authentication,
    /// `authorization`: what they may do.
    pub authorization: Authorization,
    /// Whether `port` is served, its debugging handlers, TLS and stream idle timeout.
    pub kubelet_server: kubelet_server::KubeletServer,
}

/// `authentication` of the kubelet API: client certificates signed by `x509.clientCAFile`,
/// bearer tokens checked with a TokenReview (`webhook`), and `anonymous` requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authentication {
    /// `x509.clientCAFile`: the CA bundle client certificates must chain to; user = CN,
    /// groups = O.
    pub client_ca_file: Option<PathBuf>,
    /// `webhook.enabled` (default true): bearer tokens are sent to the API server as
    /// TokenReviews (cluster mode only).
    pub webhook_enabled: bool,
    /// `webhook.cacheTTL` (default 2m): how long a TokenReview answer is reused.
    pub webhook_cache_ttl: Duration,
    /// `anonymous.enabled` (default false): requests nothing authenticates run as
    /// `system:anonymous` instead of getting 401.
    pub anonymous_enabled: bool,
}

impl Default for Authentication {
    fn default() -> Self {
        Authentication {
            client_ca_file: None,
            webhook_enabled: true,
            webhook_cache_ttl: Duration::from_secs(120),
            anonymous_enabled: false,
        }
    }
}

/// `authorization.mode` of the kubelet API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationMode {
    /// Every authenticated request is allowed.
    AlwaysAllow,
    /// Each request is a SubjectAccessReview on `nodes/<subresource>` (cluster mode only).
    Webhook,
}

/// `authorization` of the kubelet API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// `mode` (default `Webhook`).
    pub mode: AuthorizationMode,
    /// `webhook.cacheAuthorizedTTL` (default 5m).
    pub cache_authorized_ttl: Duration,
    /// `webhook.cacheUnauthorizedTTL` (default 30s).
    pub cache_unauthorized_ttl: Duration,
}

impl Default for Authorization {
    fn default() -> Self {
        Authorization {
            mode: AuthorizationMode::Webhook,
            cache_authorized_ttl: Duration::from_secs(300),
            cache_unauthorized_ttl: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupDriver {
    Cgroupfs,
    Systemd,
}

impl CgroupDriver {
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }
}

impl fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The part of the kubelet's `LoggingConfiguration` nodelet implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logging {
    pub format: LogFormat,
    /// klog-style verbosity: 0 logs only the most important messages, higher logs more.
    pub verbosity: u32,
}

/// Node-pressure eviction as configured: the kubelet's eviction fields, and nodelet's
/// `evictStaticPods`.
#[derive(Debug, Clone, PartialEq)]
pub struct Eviction {
    /// `evictionHard` (default: the kubelet's Linux defaults, see
    /// [`eviction::DEFAULT_EVICTION_HARD`]) merged with
    /// `mergeDefaultEvictionSettings`, `evictionSoft` with `evictionSoftGracePeriod`, each
    /// with its `evictionMinimumReclaim`; hard thresholds first.
    pub thresholds: Vec<eviction::Threshold>,
    /// `evictionPressureTransitionPeriod` (default 5m): how long a pressure condition stays
    /// after its threshold stopped being met.
    pub pressure_transition_period: Duration,
    /// `evictionMaxPodGracePeriod` (default 0): the longest grace period a soft eviction gives
    /// a pod, in seconds.
    pub max_pod_grace_period_seconds: i64,
    /// `evictStaticPods` (nodelet, default false): static pods are evicted like any other
    /// pod unless their priority makes them critical. The kubelet never evicts a static pod,
    /// so a standalone node (only static pods) could never relieve pressure.
    pub evict_static_pods: bool,
}

impl Eviction {
    /// The kubelet's defaults (with `enforceNodeAllocatable: [pods]`).
    pub fn kubelet_defaults() -> Eviction {
        let fields = eviction::EvictionFields {
            enforce_pods_allocatable: true,
            ..Default::default()
        };
        Eviction {
            thresholds: eviction::parse_thresholds(&fields).unwrap_or_default(),
            pressure_transition_period: Duration::from_secs(300),
            max_pod_grace_period_seconds: 0,
            evict_static_pods: false,
        }
    }
}

/// `podCleanup`: pods this node failed (evicted, rejected at admission) carry no
/// deletionTimestamp, so the kubelet never deletes them and they pile up (seed 001). nodelet
/// deletes them after `retention` when a controller owns them (it creates a replacement), and bare
/// pods only with `barePods: true`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodCleanup {
    /// `enabled` (default true).
    pub enabled: bool,
    /// `retention` (default 1h): how long a failed pod stays visible before it is deleted.
    pub retention: Duration,
    /// `barePods` (default false): also delete failed pods without a controller owner.
    pub bare_pods: bool,
}

impl Default for PodCleanup {
    fn default() -> Self {
        PodCleanup {
            enabled: true,
            retention: Duration::from_secs(3600),
            bare_pods: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashLoopBackOff {
    /// The effective cap on the restart back-off, after the kubelet's gate rules: the configured
    /// value when `KubeletCrashLoopBackOffMax` is on (default 300s), else 300s, or 60s with
    /// `ReduceDefaultCrashLoopBackOffDecay`. See [`Config::crash_loop_back_off_delays`].
    pub max_container_restart_period: Duration,
}

/// The graceful node shutdown fields, as written (validated; the groups they make are
/// `nodeshutdown::groups::effective_periods`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Shutdown {
    /// `shutdownGracePeriod` (default 0: off): the whole delay of a node shutdown.
    pub grace_period: Duration,
    /// `shutdownGracePeriodCriticalPods` (default 0): the part of it for critical pods.
    pub grace_period_critical_pods: Duration,
    /// `shutdownGracePeriodByPodPriority` (default empty): the groups by priority instead.
    pub grace_period_by_pod_priority: Vec<shutdown::GracePeriodByPriority>,
}

/// A field that was accepted but has no effect (not implemented, unknown feature gate, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub path: String,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// A problem in the file, displayed like the API server's (`maxPods: Invalid value: "many":
/// expected an integer`, `fooBar: Unknown field`): the same field-error type pod manifests use.
use crate::podspec::field::{FieldError, FieldErrorKind};

/// `maxPods`, or `podsPerCore × num_cores` when `podsPerCore` is set and that is smaller.
pub fn max_pods(max_pods: u32, pods_per_core: u32, num_cores: u32) -> u32 {
    if pods_per_core == 0 {
        return max_pods;
    }
    max_pods.min(pods_per_core.saturating_mul(num_cores))
}

/// A configuration file nodelet accepted, and what it ignored on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<Warning>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {}: {message}", path.display())]
    Yaml { path: PathBuf, message: String },
    #[error("config file {}: invalid configuration:{}", path.display(), ErrorLines(errors))]
    Invalid {
        path: PathBuf,
        errors: Vec<FieldError>,
    },
    /// The kubelet's command line over its file: each error names the flag behind it, if any.
    #[error("invalid configuration (kubelet flags{}):{}", file.as_ref().map(|f| format!(" over {}", f.display())).unwrap_or_default(), ErrorLines(errors))]
    Flags {
        file: Option<PathBuf>,
        errors: Vec<FieldError>,
    },
    #[error("{}", .0)]
    CommandLine(#[from] flags::FlagError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Renders each field error on its own indented line.
struct ErrorLines<'a>(&'a [FieldError]);

impl fmt::Display for ErrorLines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for error in self.0 {
            write!(f, "\n  {error}")?;
        }
        Ok(())
    }
}

/// Inputs to defaulting that come from the machine rather than the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    /// The kernel hostname, as `hostname` prints it; `nodeName` defaults to it, lowercased.
    pub hostname: String,
}

impl Environment {
    /// Reads the hostname from the kernel. On failure the hostname is empty, and a config
    /// without `nodeName` is then rejected with an error that says to set it.
    pub fn detect() -> Self {
        // uname(2)'s nodename is what gethostname(2) returns on Linux.
        let hostname = nix::sys::utsname::uname()
            .map(|u| u.nodename().to_string_lossy().into_owned())
            .unwrap_or_default();
        Environment { hostname }
    }
}

impl Config {
    /// What an empty `KubeletConfiguration` gives on this machine.
    pub fn defaults(env: &Environment) -> Config {
        Config {
            container_runtime_endpoint: DEFAULT_CONTAINER_RUNTIME_ENDPOINT.to_string(),
            image_service_endpoint: DEFAULT_CONTAINER_RUNTIME_ENDPOINT.to_string(),
            static_pod_path: None,
            file_check_frequency: Duration::from_secs(20),
            sync_frequency: Duration::from_secs(60),
            pod_logs_dir: PathBuf::from(DEFAULT_POD_LOGS_DIR),
            cgroup_driver: CgroupDriver::Cgroupfs,
            cgroups_per_qos: true,
            cgroup_root: "/".to_string(),
            fail_cgroup_v1: true,
            single_process_oom_kill: false,
            seccomp_default: false,
            fail_swap_on: true,
            swap_behavior: swap::SwapBehavior::NoSwap,
            allowed_unsafe_sysctls: Vec::new(),
            pod_pids_limit: -1,
            kube_reserved: Default::default(),
            system_reserved: Default::default(),
            enforce_node_allocatable: vec!["pods".to_string()],
            memory_throttling_factor: None,
            memory_reservation_policy: Default::default(),
            max_pods: 110,
            image_gc_high_threshold_percent: 85,
            image_gc_low_threshold_percent: 80,
            image_minimum_gc_age: Duration::from_secs(120),
            image_maximum_gc_age: Duration::ZERO,
            container_log_max_size: 10 << 20,
            container_log_max_files: 5,
            container_log_max_workers: 1,
            container_log_monitor_interval: Duration::from_secs(10),
            node_status_max_images: Some(50),
            eviction: Eviction::kubelet_defaults(),
            address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            read_only_port: 0,
            healthz_port: 10248,
            healthz_bind_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            resolv_conf: PathBuf::from(DEFAULT_RESOLV_CONF),
            runtime_request_timeout: Duration::from_secs(120),
            serialize_image_pulls: true,
            max_parallel_image_pulls: None,
            image_credential_provider_config: None,
            image_credential_provider_bin_dir: None,
            feature_gates: BTreeMap::new(),
            logging: Logging {
                format: LogFormat::Text,
                verbosity: 0,
            },
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_secs(300),
            node_lease_duration_seconds: 40,
            kube_api_qps: 50,
            kube_api_burst: 100,
            pods_per_core: 0,
            max_open_files: 1_000_000,
            oom_score_adj: -999,
            registry_pull_qps: 5,
            registry_burst: 10,
            event_record_qps: 50,
            event_burst: 100,
            provider_id: String::new(),
            protect_kernel_defaults: false,
            volume_stats_agg_period: Duration::from_secs(60),
            make_iptables_util_chains: true,
            crash_loop_back_off: CrashLoopBackOff {
                max_container_restart_period: DEFAULT_MAX_CONTAINER_RESTART_PERIOD,
            },
            user_namespaces_ids_per_pod: crate::userns::DEFAULT_IDS_PER_POD,
            shutdown: Shutdown::default(),
            root_dir: PathBuf::from(DEFAULT_ROOT_DIR),
            node_name: env.hostname.trim().to_lowercase(),
            node_ip: None,
            external_cloud_provider: false,
            containerd_endpoint: DEFAULT_CONTAINER_RUNTIME_ENDPOINT.to_string(),
            containerd_namespace: DEFAULT_CONTAINERD_NAMESPACE.to_string(),
            container_log_links_dir: PathBuf::from(DEFAULT_CONTAINER_LOG_LINKS_DIR),
            register_node: true,
            register_with_taints: Vec::new(),
            kubeconfig: None,
            bootstrap_kubeconfig: None,
            cert_dir: PathBuf::from(DEFAULT_ROOT_DIR).join("pki"),
            rotate_certificates: false,
            server_tls_bootstrap: false,
            node_labels: BTreeMap::new(),
            pod_cleanup: PodCleanup::default(),
            pleg_relist_period: Duration::from_secs(5),
            port: 10250,
            tls_cert_file: None,
            tls_private_key_file: None,
            authentication: Authentication::default(),
            authorization: Authorization::default(),
            kubelet_server: kubelet_server::KubeletServer::default(),
        }
    }

    /// Whether a feature gate is on: the value in `featureGates`, else what nodelet does for
    /// the gates it knows ([`kubelet_fields::FeatureGate::effective_default`]: the Kubernetes
    /// default, or the one value nodelet implements), else off.
    pub fn feature_enabled(&self, gate: &str) -> bool {
        let known = kubelet_fields::feature_gate(gate);
        // A gate nodelet implements one way only is that way, whatever `AllAlpha`/`AllBeta`
        // say (the value itself is refused when set by name).
        if let Some(kubelet_fields::GateSupport::Only(value, _)) = known.map(|g| g.nodelet) {
            return value;
        }
        if let Some(value) = kubelet_fields::configured_gate(&self.feature_gates, gate) {
            return value;
        }
        known.is_some_and(|g| g.effective_default())
    }

    /// The node's pod capacity on a machine of `num_cores` CPUs: `maxPods`, or
    /// `podsPerCore × num_cores` when that is set and smaller (the kubelet's capacity setter).
    pub fn max_pods_on(&self, num_cores: u32) -> u32 {
        max_pods(self.max_pods, self.pods_per_core, num_cores)
    }

    /// `enforceNodeAllocatable` contains `pods`.
    pub fn enforces_pods_allocatable(&self) -> bool {
        self.enforce_node_allocatable.iter().any(|v| v == "pods")
    }

    /// The Memory QoS settings as configured (before the cgroup version is known).
    pub fn memory_qos(&self) -> memory_qos::MemoryQos {
        memory_qos::MemoryQos {
            throttling_factor: self.memory_throttling_factor,
            reservation: self.memory_reservation_policy,
        }
    }

    /// `(initial, max)` container restart back-off, as the kubelet's `newCrashLoopBackOff`
    /// computes them: 10s/300s, 1s/60s with `ReduceDefaultCrashLoopBackOffDecay`, and with
    /// `KubeletCrashLoopBackOffMax` the configured maximum, which also caps the initial delay.
    pub fn crash_loop_back_off_delays(&self) -> (Duration, Duration) {
        let max = self.crash_loop_back_off.max_container_restart_period;
        let initial =
            if self.feature_enabled(kubelet_fields::REDUCE_DEFAULT_CRASH_LOOP_BACK_OFF_DECAY) {
                Duration::from_secs(1)
            } else {
                Duration::from_secs(10)
            };
        (initial.min(max), max)
    }
}

/// Parses, defaults and validates a configuration file's text. `source` names the file in
/// errors only. An empty document (or one with only comments) gives the defaults; a non-empty
/// one must carry `apiVersion` and `kind`.
pub fn parse(text: &str, source: &Path, env: &Environment) -> Result<Loaded> {
    let document = parse_yaml(text, source)?;
    let resolved = resolve_document(&document, source, env)?;
    if resolved.errors.is_empty() {
        Ok(Loaded {
            config: resolved.config,
            warnings: resolved.warnings,
        })
    } else {
        Err(Error::Invalid {
            path: source.to_path_buf(),
            errors: resolved.errors,
        })
    }
}

fn parse_yaml(text: &str, source: &Path) -> Result<serde_yaml::Value> {
    serde_yaml::from_str(text).map_err(|e| Error::Yaml {
        path: source.to_path_buf(),
        message: format!("not valid YAML: {e}"),
    })
}

/// Decodes and resolves a parsed document (`source` names it in errors).
fn resolve_document(
    document: &serde_yaml::Value,
    source: &Path,
    env: &Environment,
) -> Result<resolve::Resolved> {
    let raw = match document {
        serde_yaml::Value::Null => decode::Decoded::default(),
        serde_yaml::Value::Mapping(map) => decode::decode(map),
        other => {
            return Err(Error::Yaml {
                path: source.to_path_buf(),
                message: format!(
                    "expected a KubeletConfiguration mapping at the top level, found {}",
                    decode::type_name(other)
                ),
            })
        }
    };
    Ok(resolve::resolve(raw, env))
}

/// Reads and [`parse`]s the configuration file at `path`.
pub fn load(path: &Path, env: &Environment) -> Result<Loaded> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, path, env)
}

/// The kubelet's root directory, the default of `rootDir` when nodelet runs as the kubelet.
pub const KUBELET_ROOT_DIR: &str = "/var/lib/kubelet";

/// The configuration of nodelet started as the kubelet: the kubelet's defaults, the `--config`
/// file, the `--config-dir` drop-ins (`*.conf`, in name order, merged over it as JSON merge
/// patches), then every flag over that. Without `--config` the kubelet's flag-era defaults
/// apply (`applyLegacyDefaults`: anonymous requests allowed, no webhook authentication,
/// authorization `AlwaysAllow`, the read-only port 10255). `rootDir` defaults to
/// `/var/lib/kubelet`, the kubelet's `--root-dir`. Errors and warnings caused by a flag name it.
pub fn load_kubelet(line: &flags::KubeletCommandLine, env: &Environment) -> Result<Loaded> {
    use serde_yaml::{Mapping, Value};
    let mut document = match &line.config_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
                path: path.clone(),
                source,
            })?;
            match parse_yaml(&text, path)? {
                Value::Null => Mapping::new(),
                Value::Mapping(map) => map,
                other => {
                    return Err(Error::Yaml {
                        path: path.clone(),
                        message: format!(
                            "expected a KubeletConfiguration mapping at the top level, found {}",
                            decode::type_name(&other)
                        ),
                    })
                }
            }
        }
        None => legacy_defaults(),
    };
    if document.is_empty() {
        // An empty file is the defaults, as for `nodelet run`.
        document.insert("apiVersion".into(), API_VERSION.into());
        document.insert("kind".into(), KIND.into());
    }
    if let Some(dir) = &line.config_dir {
        for path in drop_ins(dir)? {
            let text = std::fs::read_to_string(&path).map_err(|source| Error::Read {
                path: path.clone(),
                source,
            })?;
            match parse_yaml(&text, &path)? {
                Value::Mapping(patch) => merge_patch(&mut document, patch),
                Value::Null => {}
                other => {
                    return Err(Error::Yaml {
                        path,
                        message: format!(
                            "expected a KubeletConfiguration mapping at the top level, found {}",
                            decode::type_name(&other)
                        ),
                    })
                }
            }
        }
    }
    if !document.contains_key("rootDir") {
        document.insert("rootDir".into(), KUBELET_ROOT_DIR.into());
    }
    for setting in &line.settings {
        set_path(&mut document, &setting.path, setting.value.clone());
    }
    let source = line
        .config_file
        .clone()
        .unwrap_or_else(|| PathBuf::from("kubelet command line"));
    let resolved = resolve_document(&Value::Mapping(document), &source, env)?;
    let name = |path: &str| match flags::flag_for(&line.settings, path) {
        Some(flag) => format!("{flag} ({path})"),
        None => path.to_string(),
    };
    let mut warnings = line.warnings.clone();
    warnings.extend(resolved.warnings.into_iter().map(|w| Warning {
        path: name(&w.path),
        message: w.message,
    }));
    if resolved.errors.is_empty() {
        Ok(Loaded {
            config: resolved.config,
            warnings,
        })
    } else {
        Err(Error::Flags {
            file: line.config_file.clone(),
            errors: resolved
                .errors
                .into_iter()
                .map(|e| FieldError {
                    path: name(&e.path),
                    ..e
                })
                .collect(),
        })
    }
}

/// The kubelet's defaults for a command line without `--config` (`applyLegacyDefaults`).
fn legacy_defaults() -> serde_yaml::Mapping {
    serde_yaml::from_str(&format!(
        "apiVersion: {API_VERSION}\nkind: {KIND}\nauthentication: {{anonymous: {{enabled: true}}, webhook: {{enabled: false}}}}\nauthorization: {{mode: AlwaysAllow}}\nreadOnlyPort: 10255\n"
    ))
    .unwrap_or_default()
}

/// The `*.conf` files of a drop-in directory, in name order; a missing directory has none.
fn drop_ins(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Read {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "conf") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// RFC 7386 merge patch of YAML mappings: mappings merge, `null` removes, anything else
/// replaces.
fn merge_patch(target: &mut serde_yaml::Mapping, patch: serde_yaml::Mapping) {
    use serde_yaml::Value;
    for (key, value) in patch {
        match value {
            Value::Null => {
                target.remove(&key);
            }
            Value::Mapping(inner) => match target.get_mut(&key) {
                Some(Value::Mapping(existing)) => merge_patch(existing, inner),
                _ => {
                    let mut fresh = serde_yaml::Mapping::new();
                    merge_patch(&mut fresh, inner);
                    target.insert(key, Value::Mapping(fresh));
                }
            },
            other => {
                target.insert(key, other);
            }
        }
    }
}

/// Sets the value at a field path, creating the mappings on the way (a non-mapping in the way
/// is replaced: the flag wins).
fn set_path(document: &mut serde_yaml::Mapping, path: &[String], value: serde_yaml::Value) {
    use serde_yaml::Value;
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = document;
    for key in parents {
        let key = Value::String(key.clone());
        if !matches!(node.get(&key), Some(Value::Mapping(_))) {
            node.insert(key.clone(), Value::Mapping(serde_yaml::Mapping::new()));
        }
        node = match node.get_mut(&key) {
            Some(Value::Mapping(next)) => next,
            _ => return,
        };
    }
    node.insert(Value::String(last.clone()), value);
}
