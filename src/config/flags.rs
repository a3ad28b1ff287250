//! The kubelet's command line, so that units written for the kubelet (kubeadm's drop-in
//! `10-kubeadm.conf`, node images' `KUBELET_EXTRA_ARGS`) start nodelet unchanged.
//!
//! Parsing follows pflag as the kubelet uses it: `--name=value`, `--name value`, booleans as
//! `--name` or `--name=false`, `-v=4`/`-v 4`/`-v4`, `_` and `-` alike in names, the last of a
//! repeated scalar flag wins, repeated map flags (`--node-labels`, `--feature-gates`, ...) add
//! up, repeated list flags append, and anything that is not a flag is an error
//! (`unknown command`). A name the kubelet does not know is `unknown flag: --name`, as the
//! kubelet says.
//!
//! Each flag that stands for a configuration field becomes a value at that field's path
//! ([`KubeletCommandLine::settings`]); `super::load_kubelet` lays those over the file, so a flag
//! goes through exactly the validation and defaulting of the same setting in the file, and wins
//! over it (the kubelet's `kubeletConfigFlagPrecedence`). Flags the kubelet has and nodelet does
//! not act on are accepted with a warning naming them: either through the configuration field
//! they stand for (the file's "accepted but not implemented" warning) or here, with the reason.

use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

/// How a flag's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A string, as written.
    Str,
    /// A path: relative paths are taken from the working directory, as the kubelet opens them.
    Path,
    /// `true`/`false` (and Go's other spellings); the bare flag means true.
    Bool,
    /// A 32-bit integer.
    Int,
    /// Comma-separated strings, appended across repeats (`StringSlice`).
    List,
    /// `key=value,...`, entries without `=` mean an empty value (`--node-labels`).
    Labels,
    /// `key=value,...`, every entry needs `=` (`MapStringString`).
    Map,
    /// `key=true,...` (`--feature-gates`): one setting per key, so the file's other gates stay.
    BoolMap,
    /// `signal<quantity,...` (`--eviction-hard`, `--eviction-soft`).
    LangleMap,
    /// `key=value:Effect,...` (`--register-with-taints`).
    Taints,
}

/// What a flag does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// Sets the configuration field at this dotted path.
    Field(&'static str),
    /// A kubelet flag nodelet has no setting for: accepted at the kubelet's default value (or
    /// empty), refused with this reason at any other.
    Fixed(&'static str, &'static str),
    /// `--config`.
    ConfigFile,
    /// `--config-dir`.
    ConfigDir,
    Help,
    Version,
}

struct Flag {
    name: &'static str,
    kind: Kind,
    target: Target,
}

const fn field(name: &'static str, kind: Kind, path: &'static str) -> Flag {
    Flag {
        name,
        kind,
        target: Target::Field(path),
    }
}

const fn fixed(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    reason: &'static str,
) -> Flag {
    Flag {
        name,
        kind,
        target: Target::Fixed(default, reason),
    }
}

/// The default of a [`Target::Fixed`] flag the kubelet itself no longer acts on: any value.
const ANY_VALUE: &str = "*";
const DEPRECATED: &str = "a deprecated kubelet flag nodelet does not implement";
const RUNTIME_DECIDES: &str = "without effect in the kubelet too: the runtime's configuration names the pause image, and the image GC keeps the images the runtime reports pinned";
const NO_CLOUD_CONFIG: &str = "nodelet has no built-in cloud provider to read a cloud configuration (an external cloud controller manager has its own)";
const NO_LOCK: &str = "nodelet takes no lock file";
const NO_CGROUP_PLACEMENT: &str = "nodelet does not move processes into cgroups";
const LOG_OPTION: &str = "nodelet's log output has no such option";

/// Every flag of the kubelet (`cmd/kubelet/app/options`: `KubeletFlags.AddFlags`,
/// `AddKubeletConfigFlags`, the container runtime options, the logging flags and the global
/// `--help`/`--version`), in the order of the kubelet's source.
static FLAGS: &[Flag] = &[
    // KubeletFlags
    Flag {
        name: "config",
        kind: Kind::Path,
        target: Target::ConfigFile,
    },
    Flag {
        name: "config-dir",
        kind: Kind::Path,
        target: Target::ConfigDir,
    },
    field("kubeconfig", Kind::Path, "kubeconfig"),
    field("bootstrap-kubeconfig", Kind::Path, "bootstrapKubeconfig"),
    field("hostname-override", Kind::Str, "nodeName"),
    field("node-ip", Kind::Str, "nodeIP"),
    field("cert-dir", Kind::Path, "certDir"),
    field("cloud-provider", Kind::Str, "cloudProvider"),
    field("root-dir", Kind::Path, "rootDir"),
    field("seccomp-default", Kind::Bool, "seccompDefault"),
    field("node-labels", Kind::Labels, "nodeLabels"),
    fixed("lock-file", Kind::Str, "", NO_LOCK),
    fixed("exit-on-lock-contention", Kind::Bool, "false", NO_LOCK),
    fixed(
        "minimum-container-ttl-duration",
        Kind::Str,
        "0s",
        DEPRECATED,
    ),
    fixed(
        "maximum-dead-containers-per-container",
        Kind::Int,
        "1",
        DEPRECATED,
    ),
    fixed("maximum-dead-containers", Kind::Int, "-1", DEPRECATED),
    fixed("register-schedulable", Kind::Bool, "true", DEPRECATED),
    fixed(
        "keep-terminated-pod-volumes",
        Kind::Bool,
        "false",
        DEPRECATED,
    ),
    fixed("experimental-mounter-path", Kind::Str, "", DEPRECATED),
    fixed("cloud-config", Kind::Str, "", NO_CLOUD_CONFIG),
    fixed(
        "experimental-allocatable-ignore-eviction",
        Kind::Bool,
        "false",
        DEPRECATED,
    ),
    // ContainerRuntimeOptions
    fixed("runtime-cgroups", Kind::Str, "", NO_CGROUP_PLACEMENT),
    fixed(
        "pod-infra-container-image",
        Kind::Str,
        ANY_VALUE,
        RUNTIME_DECIDES,
    ),
    field(
        "image-credential-provider-config",
        Kind::Path,
        "imageCredentialProviderConfig",
    ),
    field(
        "image-credential-provider-bin-dir",
        Kind::Path,
        "imageCredentialProviderBinDir",
    ),
    // AddKubeletConfigFlags: each stands for a KubeletConfiguration field.
    field("enable-server", Kind::Bool, "enableServer"),
    field("fail-swap-on", Kind::Bool, "failSwapOn"),
    field("pod-manifest-path", Kind::Path, "staticPodPath"),
    field("sync-frequency", Kind::Str, "syncFrequency"),
    field("file-check-frequency", Kind::Str, "fileCheckFrequency"),
    field("http-check-frequency", Kind::Str, "httpCheckFrequency"),
    field("manifest-url", Kind::Str, "staticPodURL"),
    field("manifest-url-header", Kind::Str, "staticPodURLHeader"),
    field("address", Kind::Str, "address"),
    field("port", Kind::Int, "port"),
    field("read-only-port", Kind::Int, "readOnlyPort"),
    field(
        "container-runtime-endpoint",
        Kind::Str,
        "containerRuntimeEndpoint",
    ),
    field("image-service-endpoint", Kind::Str, "imageServiceEndpoint"),
    field(
        "anonymous-auth",
        Kind::Bool,
        "authentication.anonymous.enabled",
    ),
    field(
        "authentication-token-webhook",
        Kind::Bool,
        "authentication.webhook.enabled",
    ),
    field(
        "authentication-token-webhook-cache-ttl",
        Kind::Str,
        "authentication.webhook.cacheTTL",
    ),
    field(
        "client-ca-file",
        Kind::Path,
        "authentication.x509.clientCAFile",
    ),
    field("authorization-mode", Kind::Str, "authorization.mode"),
    field(
        "authorization-webhook-cache-authorized-ttl",
        Kind::Str,
        "authorization.webhook.cacheAuthorizedTTL",
    ),
    field(
        "authorization-webhook-cache-unauthorized-ttl",
        Kind::Str,
        "authorization.webhook.cacheUnauthorizedTTL",
    ),
    field("tls-cert-file", Kind::Path, "tlsCertFile"),
    field("tls-private-key-file", Kind::Path, "tlsPrivateKeyFile"),
    field(
        "rotate-server-certificates",
        Kind::Bool,
        "serverTLSBootstrap",
    ),
    field("tls-cipher-suites", Kind::List, "tlsCipherSuites"),
    field("tls-min-version", Kind::Str, "tlsMinVersion"),
    field("rotate-certificates", Kind::Bool, "rotateCertificates"),
    field("registry-qps", Kind::Int, "registryPullQPS"),
    field("registry-burst", Kind::Int, "registryBurst"),
    field("event-qps", Kind::Int, "eventRecordQPS"),
    field("event-burst", Kind::Int, "eventBurst"),
    field(
        "enable-debugging-handlers",
        Kind::Bool,
        "enableDebuggingHandlers",
    ),
    field(
        "contention-profiling",
        Kind::Bool,
        "enableContentionProfiling",
    ),
    field("healthz-port", Kind::Int, "healthzPort"),
    field("healthz-bind-address", Kind::Str, "healthzBindAddress"),
    field("oom-score-adj", Kind::Int, "oomScoreAdj"),
    field("cluster-domain", Kind::Str, "clusterDomain"),
    field("volume-plugin-dir", Kind::Path, "volumePluginDir"),
    field("cluster-dns", Kind::List, "clusterDNS"),
    field(
        "streaming-connection-idle-timeout",
        Kind::Str,
        "streamingConnectionIdleTimeout",
    ),
    field(
        "node-status-update-frequency",
        Kind::Str,
        "nodeStatusUpdateFrequency",
    ),
    field("minimum-image-ttl-duration", Kind::Str, "imageMinimumGCAge"),
    field(
        "image-gc-high-threshold",
        Kind::Int,
        "imageGCHighThresholdPercent",
    ),
    field(
        "image-gc-low-threshold",
        Kind::Int,
        "imageGCLowThresholdPercent",
    ),
    field("volume-stats-agg-period", Kind::Str, "volumeStatsAggPeriod"),
    field("feature-gates", Kind::BoolMap, "featureGates"),
    field("kubelet-cgroups", Kind::Str, "kubeletCgroups"),
    field("system-cgroups", Kind::Str, "systemCgroups"),
    field("provider-id", Kind::Str, "providerID"),
    field("cgroups-per-qos", Kind::Bool, "cgroupsPerQOS"),
    field("cgroup-driver", Kind::Str, "cgroupDriver"),
    field("cgroup-root", Kind::Str, "cgroupRoot"),
    field("cpu-manager-policy", Kind::Str, "cpuManagerPolicy"),
    field(
        "cpu-manager-policy-options",
        Kind::Map,
        "cpuManagerPolicyOptions",
    ),
    field(
        "cpu-manager-reconcile-period",
        Kind::Str,
        "cpuManagerReconcilePeriod",
    ),
    field("qos-reserved", Kind::Map, "qosReserved"),
    field(
        "topology-manager-policy",
        Kind::Str,
        "topologyManagerPolicy",
    ),
    field(
        "runtime-request-timeout",
        Kind::Str,
        "runtimeRequestTimeout",
    ),
    field("hairpin-mode", Kind::Str, "hairpinMode"),
    field("max-pods", Kind::Int, "maxPods"),
    field("pod-cidr", Kind::Str, "podCIDR"),
    field("pod-max-pids", Kind::Int, "podPidsLimit"),
    field("resolv-conf", Kind::Path, "resolvConf"),
    field("runonce", Kind::Bool, "runOnce"),
    field("cpu-cfs-quota", Kind::Bool, "cpuCFSQuota"),
    field("cpu-cfs-quota-period", Kind::Str, "cpuCFSQuotaPeriod"),
    field(
        "enable-controller-attach-detach",
        Kind::Bool,
        "enableControllerAttachDetach",
    ),
    field(
        "make-iptables-util-chains",
        Kind::Bool,
        "makeIPTablesUtilChains",
    ),
    field(
        "iptables-masquerade-bit",
        Kind::Int,
        "iptablesMasqueradeBit",
    ),
    field("iptables-drop-bit", Kind::Int, "iptablesDropBit"),
    field("container-log-max-size", Kind::Str, "containerLogMaxSize"),
    field("container-log-max-files", Kind::Int, "containerLogMaxFiles"),
    field(
        "container-log-max-workers",
        Kind::Int,
        "containerLogMaxWorkers",
    ),
    field(
        "container-log-monitor-interval",
        Kind::Str,
        "containerLogMonitorInterval",
    ),
    field("allowed-unsafe-sysctls", Kind::List, "allowedUnsafeSysctls"),
    field("node-status-max-images", Kind::Int, "nodeStatusMaxImages"),
    field(
        "kernel-memcg-notification",
        Kind::Bool,
        "kernelMemcgNotification",
    ),
    field(
        "local-storage-capacity-isolation",
        Kind::Bool,
        "localStorageCapacityIsolation",
    ),
    field("max-open-files", Kind::Int, "maxOpenFiles"),
    field("kube-api-content-type", Kind::Str, "contentType"),
    field("kube-api-qps", Kind::Int, "kubeAPIQPS"),
    field("kube-api-burst", Kind::Int, "kubeAPIBurst"),
    field("serialize-image-pulls", Kind::Bool, "serializeImagePulls"),
    field("eviction-hard", Kind::LangleMap, "evictionHard"),
    field("eviction-soft", Kind::LangleMap, "evictionSoft"),
    field(
        "eviction-soft-grace-period",
        Kind::Map,
        "evictionSoftGracePeriod",
    ),
    field(
        "eviction-pressure-transition-period",
        Kind::Str,
        "evictionPressureTransitionPeriod",
    ),
    field(
        "eviction-max-pod-grace-period",
        Kind::Int,
        "evictionMaxPodGracePeriod",
    ),
    field(
        "eviction-minimum-reclaim",
        Kind::Map,
        "evictionMinimumReclaim",
    ),
    field("pods-per-core", Kind::Int, "podsPerCore"),
    field(
        "protect-kernel-defaults",
        Kind::Bool,
        "protectKernelDefaults",
    ),
    field("reserved-cpus", Kind::Str, "reservedSystemCPUs"),
    field("topology-manager-scope", Kind::Str, "topologyManagerScope"),
    field(
        "topology-manager-policy-options",
        Kind::Map,
        "topologyManagerPolicyOptions",
    ),
    field("system-reserved", Kind::Map, "systemReserved"),
    field("kube-reserved", Kind::Map, "kubeReserved"),
    field(
        "enforce-node-allocatable",
        Kind::List,
        "enforceNodeAllocatable",
    ),
    field("system-reserved-cgroup", Kind::Str, "systemReservedCgroup"),
    field("kube-reserved-cgroup", Kind::Str, "kubeReservedCgroup"),
    field("memory-manager-policy", Kind::Str, "memoryManagerPolicy"),
    field("reserved-memory", Kind::Str, "reservedMemory"),
    field("register-node", Kind::Bool, "registerNode"),
    field("register-with-taints", Kind::Taints, "registerWithTaints"),
    // Logging (component-base `logsapi.AddFlags`).
    field("v", Kind::Int, "logging.verbosity"),
    field("vmodule", Kind::Str, "logging.vmodule"),
    field("log-flush-frequency", Kind::Str, "logging.flushFrequency"),
    field("logging-format", Kind::Str, "logging.format"),
    fixed("log-json-split-stream", Kind::Bool, "false", LOG_OPTION),
    fixed("log-json-info-buffer-size", Kind::Str, "0", LOG_OPTION),
    fixed("log-text-split-stream", Kind::Bool, "false", LOG_OPTION),
    fixed("log-text-info-buffer-size", Kind::Str, "0", LOG_OPTION),
    // Global flags.
    Flag {
        name: "help",
        kind: Kind::Bool,
        target: Target::Help,
    },
    Flag {
        name: "version",
        kind: Kind::Str,
        target: Target::Version,
    },
];

/// The one-letter forms pflag knows for the kubelet.
fn shorthand(c: char) -> Option<&'static str> {
    match c {
        'v' => Some("v"),
        'h' => Some("help"),
        _ => None,
    }
}

fn lookup(name: &str) -> Option<&'static Flag> {
    FLAGS.iter().find(|f| f.name == name)
}

/// A command line the kubelet would refuse, with the kubelet's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    #[error("unknown flag: --{0}")]
    Unknown(String),
    #[error("unknown shorthand flag: '{0}' in -{1}")]
    UnknownShorthand(char, String),
    #[error("bad flag syntax: {0}")]
    BadSyntax(String),
    #[error("flag needs an argument: --{0}")]
    NeedsArgument(String),
    #[error("invalid argument {value:?} for \"--{flag}\" flag: {reason}")]
    InvalidArgument {
        flag: String,
        value: String,
        reason: String,
    },
    #[error("unknown command {0:?}: the kubelet command line takes flags only")]
    Positional(String),
}

/// One configuration value a flag sets.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    /// The flag as written for messages: `--node-ip`.
    pub flag: String,
    /// The field's path: `["authentication", "anonymous", "enabled"]`.
    pub path: Vec<String>,
    pub value: Value,
}

impl Setting {
    /// `authentication.anonymous.enabled`
    pub fn dotted_path(&self) -> String {
        self.path.join(".")
    }
}

/// A parsed kubelet command line.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KubeletCommandLine {
    /// `--config`
    pub config_file: Option<PathBuf>,
    /// `--config-dir`
    pub config_dir: Option<PathBuf>,
    pub help: bool,
    /// `--version` (`raw` or a boolean).
    pub version: bool,
    /// Configuration values, in command-line order, one per field (repeats merged).
    pub settings: Vec<Setting>,
    /// Flags accepted without effect, each naming the flag and why.
    pub warnings: Vec<super::Warning>,
}

/// Parses the kubelet's arguments (without the program name); relative paths are taken from
/// `cwd`.
pub fn parse(args: &[String], cwd: &Path) -> Result<KubeletCommandLine, FlagError> {
    let mut out = KubeletCommandLine::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            if let Some(positional) = rest.next() {
                return Err(FlagError::Positional(positional.clone()));
            }
            break;
        }
        let (flag, inline) = if let Some(long) = arg.strip_prefix("--") {
            if long.is_empty() || long.starts_with('-') || long.starts_with('=') {
                return Err(FlagError::BadSyntax(arg.clone()));
            }
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let name = name.replace('_', "-");
            (lookup(&name).ok_or(FlagError::Unknown(name))?, value)
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let mut chars = short.chars();
            let c = chars.next().unwrap_or_default();
            let name = shorthand(c).ok_or_else(|| FlagError::UnknownShorthand(c, short.into()))?;
            let after = chars.as_str();
            let value = match after.strip_prefix('=') {
                Some(v) => Some(v.to_string()),
                None if after.is_empty() => None,
                None => Some(after.to_string()),
            };
            (lookup(name).ok_or(FlagError::Unknown(name.into()))?, value)
        } else {
            return Err(FlagError::Positional(arg.clone()));
        };
        let takes_no_value = flag.kind == Kind::Bool || flag.target == Target::Version;
        let value = match inline {
            Some(v) => v,
            None if takes_no_value => "true".to_string(),
            None => rest
                .next()
                .cloned()
                .ok_or_else(|| FlagError::NeedsArgument(flag.name.into()))?,
        };
        apply(&mut out, flag, &value, cwd)?;
    }
    Ok(out)
}

fn apply(
    out: &mut KubeletCommandLine,
    flag: &Flag,
    raw: &str,
    cwd: &Path,
) -> Result<(), FlagError> {
    let invalid = |reason: String| FlagError::InvalidArgument {
        flag: flag.name.into(),
        value: raw.into(),
        reason,
    };
    match flag.target {
        Target::ConfigFile => {
            out.config_file = (!raw.is_empty()).then(|| absolute(raw, cwd));
            return Ok(());
        }
        Target::ConfigDir => {
            out.config_dir = (!raw.is_empty()).then(|| absolute(raw, cwd));
            return Ok(());
        }
        Target::Help => {
            out.help = go_bool(raw).map_err(invalid)?;
            return Ok(());
        }
        Target::Version => {
            out.version = raw == "raw" || go_bool(raw).map_err(invalid)?;
            return Ok(());
        }
        Target::Fixed(default, reason) => {
            // Check the value as the kubelet would; only its default is what nodelet does.
            if flag.kind == Kind::Bool {
                go_bool(raw).map_err(invalid)?;
            }
            if flag.kind == Kind::Int {
                go_int(raw).map_err(invalid)?;
            }
            if raw.is_empty() || raw == default || default == ANY_VALUE {
                return Ok(());
            }
            let accepted = if default.is_empty() {
                "only an empty value".to_string()
            } else {
                format!("only {default:?}")
            };
            return Err(invalid(format!("nodelet accepts {accepted}: {reason}")));
        }
        Target::Field(_) => {}
    }
    let Target::Field(path) = flag.target else {
        return Ok(());
    };
    let path: Vec<String> = path.split('.').map(String::from).collect();
    let value = match flag.kind {
        Kind::Str => Value::String(raw.into()),
        Kind::Path if raw.is_empty() => Value::String(String::new()),
        Kind::Path => Value::String(absolute(raw, cwd).display().to_string()),
        Kind::Bool => Value::Bool(go_bool(raw).map_err(invalid)?),
        Kind::Int => Value::Number(go_int(raw).map_err(invalid)?.into()),
        Kind::List => Value::Sequence(
            raw.split(',')
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.trim().into()))
                .collect(),
        ),
        Kind::Labels => Value::Mapping(pairs(raw, '=', true).map_err(invalid)?),
        Kind::Map => Value::Mapping(pairs(raw, '=', false).map_err(invalid)?),
        Kind::LangleMap => Value::Mapping(pairs(raw, '<', false).map_err(invalid)?),
        Kind::Taints => taints(raw).map_err(invalid)?,
        Kind::BoolMap => {
            // One setting per gate, so that the file's other gates stay (the kubelet merges
            // feature gates from the file and the flags, the flags winning per gate).
            for (gate, enabled) in pairs(raw, '=', false).map_err(invalid)? {
                let gate = gate.as_str().unwrap_or_default().to_string();
                let text = enabled.as_str().unwrap_or_default().to_string();
                let enabled = go_bool(&text)
                    .map_err(|e| invalid(format!("invalid value of {gate}: {text}, err: {e}")))?;
                let mut gate_path = path.clone();
                gate_path.push(gate);
                set(out, flag, gate_path, Value::Bool(enabled));
            }
            return Ok(());
        }
    };
    set(out, flag, path, value);
    Ok(())
}

/// Records a setting: a repeated map flag adds its entries, a repeated list flag appends,
/// anything else replaces the earlier value.
fn set(out: &mut KubeletCommandLine, flag: &Flag, path: Vec<String>, value: Value) {
    let name = format!("--{}", flag.name);
    if let Some(existing) = out.settings.iter_mut().find(|s| s.path == path) {
        match (&mut existing.value, value) {
            (Value::Mapping(old), Value::Mapping(new)) if flag.kind != Kind::Taints => {
                old.extend(new)
            }
            (Value::Sequence(old), Value::Sequence(new)) if flag.kind == Kind::List => {
                old.extend(new)
            }
            (slot, value) => *slot = value,
        }
        existing.flag = name;
        return;
    }
    out.settings.push(Setting {
        flag: name,
        path,
        value,
    });
}

fn absolute(raw: &str, cwd: &Path) -> PathBuf {
    let path = Path::new(raw);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    }
}

/// Go's `strconv.ParseBool`.
fn go_bool(raw: &str) -> Result<bool, String> {
    match raw {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "strconv.ParseBool: parsing {raw:?}: invalid syntax"
        )),
    }
}

/// Go's `strconv.ParseInt(raw, 0, 32)`, as pflag's `Int32Var`.
fn go_int(raw: &str) -> Result<i64, String> {
    raw.parse::<i32>().map(i64::from).map_err(|e| {
        let kind = if matches!(
            e.kind(),
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow
        ) {
            "value out of range"
        } else {
            "invalid syntax"
        };
        format!("strconv.ParseInt: parsing {raw:?}: {kind}")
    })
}

/// `k<sep>v,k<sep>v` into a mapping; `lenient` allows a key without value (`--node-labels`).
fn pairs(raw: &str, separator: char, lenient: bool) -> Result<Mapping, String> {
    let mut map = Mapping::new();
    for entry in raw.split(',').filter(|e| !e.trim().is_empty()) {
        let (key, value) = match entry.split_once(separator) {
            Some((k, v)) => (k.trim(), v.trim()),
            None if lenient => (entry.trim(), ""),
            None => return Err(format!("malformed pair, expect string{separator}string")),
        };
        map.insert(Value::String(key.into()), Value::String(value.into()));
    }
    Ok(map)
}

/// `key=value:Effect` or `key:Effect`, comma-separated, into the file's Taint objects.
fn taints(raw: &str) -> Result<Value, String> {
    let mut list = Vec::new();
    for spec in raw.split(',').filter(|s| !s.trim().is_empty()) {
        let spec = spec.trim();
        let (key_value, effect) = spec
            .rsplit_once(':')
            .ok_or_else(|| format!("invalid taint spec: {spec:?}: the effect is missing"))?;
        let (key, value) = key_value.split_once('=').unwrap_or((key_value, ""));
        let mut taint = Mapping::new();
        taint.insert("key".into(), Value::String(key.into()));
        if !value.is_empty() {
            taint.insert("value".into(), Value::String(value.into()));
        }
        taint.insert("effect".into(), Value::String(effect.into()));
        list.push(Value::Mapping(taint));
    }
    Ok(Value::Sequence(list))
}

/// The flag that set `field_path` (or a field under it), for messages:
/// `authentication.webhook.cacheTTL` → `--authentication-token-webhook-cache-ttl`.
pub fn flag_for(settings: &[Setting], field_path: &str) -> Option<String> {
    settings
        .iter()
        .rev()
        .find(|s| {
            let path = s.dotted_path();
            field_path == path
                || field_path
                    .strip_prefix(&path)
                    .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
        })
        .map(|s| s.flag.clone())
}

/// The `--help` text: every flag and what it sets.
pub fn usage() -> String {
    let mut out = String::from(
        "Usage: kubelet [flags]\n\n\
         nodelet started as the kubelet (argv[0] \"kubelet\", or kubelet flags after \"nodelet\").\n\
         Flags override the --config file; configuration fields not listed here are set in the file.\n\n",
    );
    for flag in FLAGS {
        let what = match flag.target {
            Target::Field(path) => format!("sets {path}"),
            Target::Fixed(ANY_VALUE, reason) => format!("any value: {reason}"),
            Target::Fixed("", reason) => format!("refused unless empty: {reason}"),
            Target::Fixed(default, reason) => format!("refused unless {default:?}: {reason}"),
            Target::ConfigFile => "the KubeletConfiguration file".into(),
            Target::ConfigDir => "a directory of *.conf drop-ins laid over --config".into(),
            Target::Help => "this help".into(),
            Target::Version => "print the Kubernetes version nodelet follows".into(),
        };
        let name = if flag.name.len() == 1 {
            format!("-{}, --{}", flag.name, flag.name)
        } else {
            format!("--{}", flag.name)
        };
        out.push_str(&format!("  {name:<48} {what}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    fn settings(line: &str) -> Vec<(String, String, Value)> {
        parse(&args(line), Path::new("/work"))
            .unwrap_or_else(|e| panic!("{line}: {e}"))
            .settings
            .into_iter()
            .map(|s| (s.flag.clone(), s.dotted_path(), s.value))
            .collect()
    }

    fn yaml(text: &str) -> Value {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn flags_become_field_values() {
        // (command line, [(flag, field, value)])
        type Case<'a> = (&'a str, Vec<(&'a str, &'a str, Value)>);
        let cases: Vec<Case> = vec![
            ("--node-ip=10.0.0.7", vec![("--node-ip", "nodeIP", yaml("'10.0.0.7'"))]),
            ("--node-ip 10.0.0.7", vec![("--node-ip", "nodeIP", yaml("'10.0.0.7'"))]),
            ("--node_ip=10.0.0.7", vec![("--node-ip", "nodeIP", yaml("'10.0.0.7'"))]),
            ("--cloud-provider=external", vec![("--cloud-provider", "cloudProvider", yaml("external"))]),
            ("--rotate-certificates", vec![("--rotate-certificates", "rotateCertificates", yaml("true"))]),
            ("--rotate-certificates=false", vec![("--rotate-certificates", "rotateCertificates", yaml("false"))]),
            ("--rotate-certificates=F", vec![("--rotate-certificates", "rotateCertificates", yaml("false"))]),
            ("--max-pods 42", vec![("--max-pods", "maxPods", yaml("42"))]),
            ("-v=4", vec![("--v", "logging.verbosity", yaml("4"))]),
            ("-v 3", vec![("--v", "logging.verbosity", yaml("3"))]),
            ("-v2", vec![("--v", "logging.verbosity", yaml("2"))]),
            ("--v=5", vec![("--v", "logging.verbosity", yaml("5"))]),
            ("--kubeconfig=kubelet.conf", vec![("--kubeconfig", "kubeconfig", yaml("/work/kubelet.conf"))]),
            ("--kubeconfig=/etc/kubernetes/kubelet.conf", vec![("--kubeconfig", "kubeconfig", yaml("/etc/kubernetes/kubelet.conf"))]),
            ("--kubeconfig=", vec![("--kubeconfig", "kubeconfig", yaml("''"))]),
            ("--anonymous-auth=false", vec![("--anonymous-auth", "authentication.anonymous.enabled", yaml("false"))]),
            (
                "--node-labels=a=b,c= --node-labels role",
                vec![("--node-labels", "nodeLabels", yaml("{a: b, c: '', role: ''}"))],
            ),
            (
                "--cluster-dns=10.96.0.10 --cluster-dns=10.96.0.11,10.96.0.12",
                vec![("--cluster-dns", "clusterDNS", yaml("['10.96.0.10', '10.96.0.11', '10.96.0.12']"))],
            ),
            (
                "--feature-gates=A=true,B=false --feature-gates=A=false",
                vec![
                    ("--feature-gates", "featureGates.A", yaml("false")),
                    ("--feature-gates", "featureGates.B", yaml("false")),
                ],
            ),
            (
                "--eviction-hard=memory.available<100Mi,nodefs.available<10%",
                vec![("--eviction-hard", "evictionHard", yaml("{memory.available: 100Mi, nodefs.available: 10%}"))],
            ),
            (
                "--register-with-taints=a=b:NoSchedule,c:NoExecute --register-with-taints=d=e:NoSchedule",
                vec![("--register-with-taints", "registerWithTaints", yaml("[{key: d, value: e, effect: NoSchedule}]"))],
            ),
            // The last of a repeated scalar wins.
            ("--hostname-override=a --hostname-override=B", vec![("--hostname-override", "nodeName", yaml("B"))]),
        ];
        for (line, want) in cases {
            let want: Vec<(String, String, Value)> = want
                .into_iter()
                .map(|(f, p, v)| (f.to_string(), p.to_string(), v))
                .collect();
            assert_eq!(settings(line), want, "{line}");
        }
    }

    #[test]
    fn special_and_fixed_flags() {
        let line = parse(
            &args("--config=config.yaml --config-dir /etc/kubelet.conf.d --register-schedulable=true --version"),
            Path::new("/var/lib/kubelet"),
        )
        .unwrap();
        assert_eq!(
            line.config_file,
            Some(PathBuf::from("/var/lib/kubelet/config.yaml"))
        );
        assert_eq!(line.config_dir, Some(PathBuf::from("/etc/kubelet.conf.d")));
        assert!(line.version && !line.help);
        assert!(line.settings.is_empty(), "{:?}", line.settings);
        // The kubelet's defaults are what nodelet does: nothing to say about them.
        assert!(line.warnings.is_empty(), "{:?}", line.warnings);

        assert!(parse(
            &args("--pod-infra-container-image=registry.k8s.io/pause:3.10"),
            Path::new("/")
        )
        .is_ok());
        let refused = parse(&args("--register-schedulable=false"), Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("nodelet accepts only \"true\""),
            "{refused}"
        );
        assert!(parse(&args("-h"), Path::new("/")).unwrap().help);
        assert!(
            parse(&args("--version=raw"), Path::new("/"))
                .unwrap()
                .version
        );
        assert!(usage().contains("--rotate-certificates"));
    }

    #[test]
    fn errors_name_the_flag_as_the_kubelet_does() {
        let cases: &[(&str, &str)] = &[
            ("--no-such-flag=1", "unknown flag: --no-such-flag"),
            ("--network-plugin=cni", "unknown flag: --network-plugin"),
            ("-x", "unknown shorthand flag: 'x' in -x"),
            ("---v=2", "bad flag syntax: ---v=2"),
            ("--node-ip", "flag needs an argument: --node-ip"),
            (
                "--rotate-certificates=yes",
                "invalid argument \"yes\" for \"--rotate-certificates\" flag: strconv.ParseBool: parsing \"yes\": invalid syntax",
            ),
            (
                "--max-pods=many",
                "invalid argument \"many\" for \"--max-pods\" flag: strconv.ParseInt: parsing \"many\": invalid syntax",
            ),
            (
                "--max-pods=99999999999",
                "invalid argument \"99999999999\" for \"--max-pods\" flag: strconv.ParseInt: parsing \"99999999999\": value out of range",
            ),
            (
                "--kube-reserved=cpu",
                "invalid argument \"cpu\" for \"--kube-reserved\" flag: malformed pair, expect string=string",
            ),
            (
                "--feature-gates=A=maybe",
                "invalid argument \"A=maybe\" for \"--feature-gates\" flag: invalid value of A: maybe, err: strconv.ParseBool: parsing \"maybe\": invalid syntax",
            ),
            (
                "--register-with-taints=a=b",
                "invalid argument \"a=b\" for \"--register-with-taints\" flag: invalid taint spec: \"a=b\": the effect is missing",
            ),
            ("run", "unknown command \"run\": the kubelet command line takes flags only"),
            ("--v=2 -- extra", "unknown command \"extra\": the kubelet command line takes flags only"),
        ];
        for (line, want) in cases {
            let err = parse(&args(line), Path::new("/")).unwrap_err();
            assert_eq!(&err.to_string(), want, "{line}");
        }
    }

    #[test]
    fn flag_for_finds_the_flag_behind_a_field() {
        let line = parse(
            &args("--anonymous-auth=false --node-labels=a=b --v=2"),
            Path::new("/"),
        )
        .unwrap();
        let cases: &[(&str, Option<&str>)] = &[
            ("authentication.anonymous.enabled", Some("--anonymous-auth")),
            ("nodeLabels[a]", Some("--node-labels")),
            ("nodeLabels", Some("--node-labels")),
            ("logging.verbosity", Some("--v")),
            ("logging", None),
            ("nodeLabelsX", None),
            ("authentication.webhook.enabled", None),
        ];
        for (field, want) in cases {
            assert_eq!(flag_for(&line.settings, field).as_deref(), *want, "{field}");
        }
    }

    #[test]
    fn table_has_unique_names() {
        let mut names: Vec<&str> = FLAGS.iter().map(|f| f.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "a flag is listed twice");
    }
}
