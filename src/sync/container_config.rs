//! The CRI `ContainerConfig` for one container of a pod (`generateContainerConfig` in
//! `pkg/kubelet/kuberuntime/kuberuntime_container.go` and `_linux.go`, `makeMounts` in
//! `pkg/kubelet/kubelet_pods.go`, labels and annotations from `kuberuntime/labels.go`).
//!
//! Building the config is pure: the subPaths a container mounts are named in the result
//! ([`BuiltContainerConfig::sub_paths`]), and the executor opens them beneath their volumes and
//! pins them as bind mounts under the pod directory (`volume::subpath::prepare_sub_paths`)
//! before it creates the container; the runtime gets the pinned paths.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod, SecurityContext, VolumeMount};

use super::sandbox_config::{linux_resources, namespace_options, supplemental_groups_policy};
use crate::cgroup::oom::oom_score_adj;
use crate::cri::{api, labels};
use crate::logs::paths::container_log_path;
use crate::podspec::env::{expand, make_environment, EnvContext};
use crate::podspec::qos::QosClass;
use crate::podspec::references::FetchedObjects;
use crate::podspec::resources::{
    container_limits, container_requests, pod_level_limits, pod_level_resources_set,
    NodeAllocatable,
};
use crate::podspec::{container_field_path, ConfigError};
use crate::volume::subpath::SubPathMount;

use crate::podspec::ContainerKind;

/// Everything about the node and the pod's runtime state the config needs.
#[derive(Debug, Clone, Copy)]
pub struct ContainerContext<'a> {
    pub pod_ips: &'a [String],
    pub host_ips: &'a [String],
    pub node_name: &'a str,
    /// The Node's `status.allocatable` (the Downward API's fallback for `limits.*`).
    pub node_allocatable: NodeAllocatable,
    pub memory_capacity: u64,
    /// The pod's QoS class, derived once with its plan.
    pub qos_class: QosClass,
    /// Pod volume name → host path (from `volume::prepare_pod_volumes`).
    pub volumes: &'a BTreeMap<String, PathBuf>,
    /// Image volume name → the pulled image to mount (`sync::start`'s image volume pulls): the
    /// image volumes the container mounts.
    pub image_volumes: &'a BTreeMap<String, api::ImageSpec>,
    /// Host file to mount at /etc/hosts (`volume::write_etc_hosts`).
    pub etc_hosts: Option<&'a Path>,
    /// Host file to mount at the container's terminationMessagePath
    /// (`volume::termination_message_file`).
    pub termination_message: Option<&'a Path>,
    pub restart_count: i32,
    /// CRI metadata attempt; the kubelet passes the restart count here.
    pub attempt: u32,
    /// The pod's cgroup parent. Containers inherit it from their sandbox in the CRI, so the
    /// config does not repeat it; kept for callers that log or check it.
    pub cgroup_parent: &'a str,
    /// Value of the `io.nodelet.node-name` label.
    pub node_name_label: &'a str,
    /// Directory `Localhost` seccomp profiles are relative to (`<root-dir>/seccomp`).
    pub seccomp_profile_root: &'a Path,
    /// KubeletConfiguration `seccompDefault`: RuntimeDefault instead of Unconfined when the
    /// pod sets no profile.
    pub seccomp_default: bool,
    /// The pod's runtime handler declares recursive read-only mounts.
    pub recursive_read_only: bool,
    /// The node runs the unified cgroup v2 hierarchy (`cgroup::is_cgroup2_unified`).
    pub cgroup_v2: bool,
    /// `singleProcessOOMKill`: an OOM kill takes only the chosen process, not the container.
    pub single_process_oom_kill: bool,
    /// Memory QoS in effect, the node's allocatable memory and the page size, for the
    /// container's `memory.high` / `memory.min` / `memory.low` (cgroup v2 only).
    pub memory_qos: crate::config::memory_qos::MemoryQos,
    pub memory_qos_allocatable: i64,
    pub page_size: i64,
    /// The node's hugepage sizes in bytes (`MachineInfo::hugepages`): every one gets a CRI
    /// `hugepage_limits` entry, 0 where the container asks none.
    pub hugepage_sizes: &'a [u64],
    /// The node's swap facts and `memorySwap.swapBehavior` (`cgroup::swap`).
    pub swap: crate::cgroup::swap::SwapNode,
    /// The runtime ID of the running container an ephemeral container targets
    /// (`targetContainerName`): its PID namespace is the target's (CRI `NamespaceMode.TARGET`)
    /// where it would otherwise have one of its own. `None` for every other container.
    pub pid_target: Option<&'a str>,
}

const ETC_HOSTS: &str = "/etc/hosts";
const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
const DEFAULT_TERMINATION_MESSAGE_POLICY: &str = "File";
const DEFAULT_TERMINATION_GRACE_PERIOD: i64 = 30;

/// `name_namespace(uid)`, the kubelet's `format.Pod`.
pub fn format_pod(pod: &Pod) -> String {
    let m = &pod.metadata;
    format!(
        "{}_{}({})",
        m.name.as_deref().unwrap_or_default(),
        m.namespace.as_deref().unwrap_or_default(),
        m.uid.as_deref().unwrap_or_default()
    )
}

/// A Go `encoding/json` string literal (with its default HTML escaping), so hashes computed
/// over JSON match the kubelet's byte for byte.
fn go_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn fnv1a_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// The spec hash recorded in `io.kubernetes.container.hash` (`kubecontainer.HashContainer`).
///
/// Since Kubernetes 1.31 the kubelet hashes only the container's name and image: those are the
/// only container fields a pod update may change, so only an image change restarts a container
/// (resources are resized in place; any other edit of a static pod's manifest gives it a new
/// UID and so a new pod). The value is byte-identical to the kubelet's — FNV-32a over the
/// `spew` rendering of `{"image":…,"name":…}` — so a node switched between the kubelet and
/// nodelet adopts the other's containers.
pub fn container_hash(container: &Container) -> String {
    let json = format!(
        "{{\"image\":{},\"name\":{}}}",
        go_json_string(container.image.as_deref().unwrap_or_default()),
        go_json_string(&container.name)
    );
    let rendered = format!(
        "([]uint8)[{}]",
        json.bytes()
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    format!("{:x}", fnv1a_32(rendered.as_bytes()))
}

/// The container's security context with the pod's defaults filled in
/// (`securitycontext.DetermineEffectiveSecurityContext`).
pub fn effective_security_context(pod: &Pod, container: &Container) -> SecurityContext {
    let mut sc = container.security_context.clone().unwrap_or_default();
    if let Some(psc) = pod.spec.as_ref().and_then(|s| s.security_context.as_ref()) {
        if sc.se_linux_options.is_none() {
            sc.se_linux_options.clone_from(&psc.se_linux_options);
        }
        if sc.windows_options.is_none() {
            sc.windows_options.clone_from(&psc.windows_options);
        }
        if sc.run_as_user.is_none() {
            sc.run_as_user = psc.run_as_user;
        }
        if sc.run_as_group.is_none() {
            sc.run_as_group = psc.run_as_group;
        }
        if sc.run_as_non_root.is_none() {
            sc.run_as_non_root = psc.run_as_non_root;
        }
    }
    sc
}

/// `verifyRunAsNonRoot`: with `runAsNonRoot: true` the container must not run as uid 0. The
/// image's user (from ImageStatus) decides when the spec sets no `runAsUser`; call this once the
/// image is known.
///
/// The image's user is read as the kubelet's `getImageUser` reads it: a uid if the runtime
/// reports one, else a user name if it reports one, else root. An image without `USER` gets
/// neither from containerd and runs as uid 0, so it is refused; a user name (even `root`) cannot
/// be checked without the image's `/etc/passwd` and is refused too.
pub fn verify_run_as_non_root(
    pod: &Pod,
    container: &Container,
    image_uid: Option<i64>,
    image_user: &str,
) -> Result<(), ConfigError> {
    let sc = effective_security_context(pod, container);
    if sc.run_as_non_root != Some(true) {
        return Ok(());
    }
    let ids = || (format_pod(pod), container.name.clone());
    if let Some(uid) = sc.run_as_user {
        if uid == 0 {
            let (pod, container) = ids();
            return Err(ConfigError::RunAsRoot { pod, container });
        }
        return Ok(());
    }
    let uid = match (image_uid, image_user) {
        (Some(uid), _) => uid,
        (None, "") => 0,
        (None, user) => {
            let (pod, container) = ids();
            return Err(ConfigError::NonNumericImageUser {
                user: user.to_string(),
                pod,
                container,
            });
        }
    };
    if uid == 0 {
        let (pod, container) = ids();
        return Err(ConfigError::ImageRunsAsRoot { pod, container });
    }
    if !(0..=i64::from(i32::MAX)).contains(&uid) {
        let (pod, container) = ids();
        return Err(ConfigError::InvalidImageUid {
            uid,
            pod,
            container,
        });
    }
    Ok(())
}

fn security_profile(
    profile_type: api::security_profile::ProfileType,
    localhost_ref: String,
) -> api::SecurityProfile {
    api::SecurityProfile {
        profile_type: profile_type as i32,
        localhost_ref,
    }
}

/// The container's seccomp profile (`getSeccompProfile`): the container's field, else the
/// pod's, else RuntimeDefault with `seccompDefault` and Unconfined without.
fn seccomp_profile(
    pod: &Pod,
    container: &Container,
    field: &str,
    ctx: &ContainerContext,
) -> Result<api::SecurityProfile, ConfigError> {
    use api::security_profile::ProfileType;
    let from_container = container
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref())
        .map(|p| (p, format!("{field}.securityContext.seccompProfile")));
    let from_pod = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.seccomp_profile.as_ref())
        .map(|p| (p, "spec.securityContext.seccompProfile".to_string()));
    let Some((profile, path)) = from_container.or(from_pod) else {
        let default = if ctx.seccomp_default {
            ProfileType::RuntimeDefault
        } else {
            ProfileType::Unconfined
        };
        return Ok(security_profile(default, String::new()));
    };
    match profile.type_.as_str() {
        "RuntimeDefault" => Ok(security_profile(ProfileType::RuntimeDefault, String::new())),
        "Localhost" => match profile
            .localhost_profile
            .as_deref()
            .filter(|p| !p.is_empty())
        {
            // The API server refuses these (a relative path without `..`); checked again here
            // because the profile is joined to a host directory.
            Some(p) if p.starts_with('/') || p.split('/').any(|part| part == "..") => {
                Err(ConfigError::invalid(
                    format!("{path}.localhostProfile"),
                    p,
                    "must be a relative path without '..'",
                ))
            }
            Some(p) => Ok(security_profile(
                ProfileType::Localhost,
                ctx.seccomp_profile_root
                    .join(p)
                    .to_string_lossy()
                    .into_owned(),
            )),
            None => Err(ConfigError::required(format!("{path}.localhostProfile"))),
        },
        _ => Ok(security_profile(ProfileType::Unconfined, String::new())),
    }
}

/// The container's AppArmor profile: the container's field, else the pod's; `None` leaves the
/// runtime's default in place.
fn apparmor_profile(pod: &Pod, container: &Container) -> Option<api::SecurityProfile> {
    use api::security_profile::ProfileType;
    let profile = container
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.as_ref())
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.security_context.as_ref())
                .and_then(|s| s.app_armor_profile.as_ref())
        })?;
    Some(match profile.type_.as_str() {
        "Unconfined" => security_profile(ProfileType::Unconfined, String::new()),
        "Localhost" => security_profile(
            ProfileType::Localhost,
            profile.localhost_profile.clone().unwrap_or_default(),
        ),
        _ => security_profile(ProfileType::RuntimeDefault, String::new()),
    })
}

/// Paths the runtime masks in /proc and /sys unless `procMount: Unmasked`
/// (`securitycontext.ConvertToRuntimeMaskedPaths`, kept in sync with moby).
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// Paths the runtime mounts read-only unless `procMount: Unmasked`.
pub const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The container's namespaces: the pod's (`namespacesForPod`), with an ephemeral container's
/// PID namespace set to its target's when the pod would give it one of its own (neither
/// `hostPID` nor `shareProcessNamespace`), as the kubelet's `generateLinuxContainerConfig`.
fn container_namespace_options(
    pod: &Pod,
    pid_target: Option<&str>,
) -> Result<api::NamespaceOption, ConfigError> {
    let mut ns = namespace_options(pod)?;
    if let Some(target) = pid_target {
        if ns.pid == api::NamespaceMode::Container as i32 {
            ns.pid = api::NamespaceMode::Target as i32;
            ns.target_id = target.to_string();
        }
    }
    Ok(ns)
}

/// The container's Linux security context (`determineEffectiveSecurityContext`).
fn linux_security_context(
    pod: &Pod,
    container: &Container,
    field: &str,
    ctx: &ContainerContext,
) -> Result<api::LinuxContainerSecurityContext, ConfigError> {
    let sc = effective_security_context(pod, container);
    let unmasked = sc.proc_mount.as_deref() == Some("Unmasked");
    let owned = |paths: &[&str]| paths.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    let mut out = api::LinuxContainerSecurityContext {
        capabilities: sc.capabilities.as_ref().map(|c| api::Capability {
            add_capabilities: c.add.clone().unwrap_or_default(),
            drop_capabilities: c.drop.clone().unwrap_or_default(),
            add_ambient_capabilities: Vec::new(),
        }),
        privileged: sc.privileged.unwrap_or(false),
        namespace_options: Some(container_namespace_options(pod, ctx.pid_target)?),
        selinux_options: sc.se_linux_options.as_ref().map(|o| api::SeLinuxOption {
            user: o.user.clone().unwrap_or_default(),
            role: o.role.clone().unwrap_or_default(),
            r#type: o.type_.clone().unwrap_or_default(),
            level: o.level.clone().unwrap_or_default(),
        }),
        run_as_user: sc.run_as_user.map(|value| api::Int64Value { value }),
        run_as_group: sc.run_as_group.map(|value| api::Int64Value { value }),
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        // allowPrivilegeEscalation: false is the only way to ask for no_new_privs.
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        masked_paths: if unmasked {
            Vec::new()
        } else {
            owned(DEFAULT_MASKED_PATHS)
        },
        readonly_paths: if unmasked {
            Vec::new()
        } else {
            owned(DEFAULT_READONLY_PATHS)
        },
        seccomp: Some(seccomp_profile(pod, container, field, ctx)?),
        apparmor: apparmor_profile(pod, container),
        ..Default::default()
    };
    if let Some(psc) = pod.spec.as_ref().and_then(|s| s.security_context.as_ref()) {
        out.supplemental_groups.extend(psc.fs_group);
        out.supplemental_groups
            .extend(psc.supplemental_groups.iter().flatten().copied());
        out.supplemental_groups_policy =
            supplemental_groups_policy(psc.supplemental_groups_policy.as_deref())?;
    }
    Ok(out)
}

/// The container's resources (`generateLinuxContainerResources`). Without a container limit,
/// a pod-level limit bounds the container.
pub(crate) fn container_resources(
    pod: &Pod,
    container: &Container,
    ctx: &ContainerContext,
) -> api::LinuxContainerResources {
    let requests = container_requests(container);
    let limits = container_limits(container);
    let mut cpu_limit = limits.cpu_milli.unwrap_or(0);
    let mut memory_limit = limits.memory.unwrap_or(0);
    if pod_level_resources_set(pod) {
        let pod_limits = pod_level_limits(pod);
        if cpu_limit == 0 {
            cpu_limit = pod_limits.cpu_milli.unwrap_or(0);
        }
        if memory_limit == 0 {
            memory_limit = pod_limits.memory.unwrap_or(0);
        }
    }
    let mut resources = linux_resources(requests.cpu_milli, cpu_limit, memory_limit);
    resources.oom_score_adj = oom_score_adj(ctx.qos_class, pod, container, ctx.memory_capacity);
    resources.hugepage_limits =
        crate::podspec::hugepages::container_hugepage_limits(container, ctx.hugepage_sizes)
            .into_iter()
            .map(|(page_size, limit)| api::HugepageLimit { page_size, limit })
            .collect();
    if ctx.cgroup_v2 {
        // Memory QoS through the runtime (`memory.high`, reset to `max` when it is off;
        // `memory.min`/`memory.low` by reservation policy), as the kubelet sets them.
        let mut unified = crate::cgroup::memory_qos::container_unified(
            pod,
            container,
            memory_limit,
            ctx.memory_qos,
            ctx.memory_qos_allocatable,
            ctx.page_size,
        );
        // An OOM kills the whole container, as the kubelet does on cgroup v2 unless
        // `singleProcessOOMKill` is set. runc rejects `unified` on cgroup v1.
        if !ctx.single_process_oom_kill {
            unified.insert("memory.oom.group".to_string(), "1".to_string());
        }
        resources.unified = unified;
    }
    // Swap, as the kubelet: `memory.swap.max` on cgroup v2, memory + swap = the memory limit
    // on cgroup v1, nothing without the swap controller.
    use crate::cgroup::swap::{container_swap, SwapSetting, SWAP_MAX};
    match container_swap(pod, container, ctx.qos_class, memory_limit, &ctx.swap) {
        SwapSetting::Unset => {}
        SwapSetting::MemorySwapLimit(bytes) => resources.memory_swap_limit_in_bytes = bytes,
        SwapSetting::SwapMax(bytes) => {
            resources
                .unified
                .insert(SWAP_MAX.to_string(), bytes.to_string());
        }
    }
    resources
}

fn cri_labels(
    pod: &Pod,
    container: &Container,
    kind: ContainerKind,
    ctx: &ContainerContext,
) -> HashMap<String, String> {
    let m = &pod.metadata;
    HashMap::from([
        (
            labels::POD_NAME.to_string(),
            m.name.clone().unwrap_or_default(),
        ),
        (
            labels::POD_NAMESPACE.to_string(),
            m.namespace.clone().unwrap_or_default(),
        ),
        (
            labels::POD_UID.to_string(),
            m.uid.clone().unwrap_or_default(),
        ),
        (labels::CONTAINER_NAME.to_string(), container.name.clone()),
        (
            labels::NODE_NAME.to_string(),
            ctx.node_name_label.to_string(),
        ),
        (
            labels::CONTAINER_TYPE.to_string(),
            kind.as_str().to_string(),
        ),
    ])
}

/// `containerPort` JSON in the field order and omissions of Go's `v1.ContainerPort`.
fn ports_json(container: &Container) -> Option<String> {
    let ports = container.ports.as_ref().filter(|p| !p.is_empty())?;
    let items: Vec<String> = ports
        .iter()
        .map(|p| {
            let mut fields = Vec::new();
            if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
                fields.push(format!("\"name\":{}", go_json_string(name)));
            }
            if let Some(host_port) = p.host_port.filter(|h| *h != 0) {
                fields.push(format!("\"hostPort\":{host_port}"));
            }
            fields.push(format!("\"containerPort\":{}", p.container_port));
            let protocol = p.protocol.as_deref().unwrap_or("TCP");
            fields.push(format!("\"protocol\":{}", go_json_string(protocol)));
            if let Some(ip) = p.host_ip.as_deref().filter(|i| !i.is_empty()) {
                fields.push(format!("\"hostIP\":{}", go_json_string(ip)));
            }
            format!("{{{}}}", fields.join(","))
        })
        .collect();
    Some(format!("[{}]", items.join(",")))
}

fn cri_annotations(
    pod: &Pod,
    container: &Container,
    restart_count: i32,
) -> HashMap<String, String> {
    let mut a = HashMap::from([
        (
            labels::CONTAINER_HASH.to_string(),
            container_hash(container),
        ),
        (
            labels::CONTAINER_RESTART_COUNT.to_string(),
            restart_count.to_string(),
        ),
        (
            labels::CONTAINER_TERMINATION_MESSAGE_PATH.to_string(),
            termination_message_path(container).to_string(),
        ),
        (
            labels::CONTAINER_TERMINATION_MESSAGE_POLICY.to_string(),
            container
                .termination_message_policy
                .clone()
                .unwrap_or_else(|| DEFAULT_TERMINATION_MESSAGE_POLICY.to_string()),
        ),
        (
            labels::POD_TERMINATION_GRACE_PERIOD.to_string(),
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(DEFAULT_TERMINATION_GRACE_PERIOD)
                .to_string(),
        ),
    ]);
    if let Some(grace) = pod.metadata.deletion_grace_period_seconds {
        a.insert(
            labels::POD_DELETION_GRACE_PERIOD.to_string(),
            grace.to_string(),
        );
    }
    if let Some(pre_stop) = container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
    {
        if let Ok(json) = serde_json::to_string(pre_stop) {
            a.insert(labels::CONTAINER_PRESTOP_HANDLER.to_string(), json);
        }
    }
    if let Some(ports) = ports_json(container) {
        a.insert(labels::CONTAINER_PORTS.to_string(), ports);
    }
    a
}

/// The container's terminationMessagePath, defaulted as the API does.
pub fn termination_message_path(container: &Container) -> &str {
    container
        .termination_message_path
        .as_deref()
        .unwrap_or(DEFAULT_TERMINATION_MESSAGE_PATH)
}

/// CRI propagation for a volumeMount's `mountPropagation` (`translateMountPropagation`).
fn mount_propagation(mode: Option<&str>, field: &str) -> Result<i32, ConfigError> {
    use api::MountPropagation as P;
    match mode {
        None | Some("None") => Ok(P::PropagationPrivate as i32),
        Some("HostToContainer") => Ok(P::PropagationHostToContainer as i32),
        Some("Bidirectional") => Ok(P::PropagationBidirectional as i32),
        Some(other) => Err(ConfigError::invalid(
            format!("{field}.mountPropagation"),
            other.to_string(),
            "invalid MountPropagation mode".to_string(),
        )),
    }
}

/// `resolveRecursiveReadOnly`: `IfPossible` is recursive where the pod's runtime handler
/// declares recursive read-only mounts; `Enabled` there, and refused with the kubelet's message
/// where it does not (a runtime that does not know the field, containerd before 2.0, would
/// otherwise drop it and mount the volume writable below its submounts).
fn recursive_read_only(
    mount: &VolumeMount,
    field: &str,
    supported: bool,
) -> Result<bool, ConfigError> {
    use crate::podspec::recursive_read_only::{resolve, RecursiveReadOnlyError as E};
    let invalid = |reason: &str| {
        ConfigError::invalid(
            format!("{field}.recursiveReadOnly"),
            mount.recursive_read_only.clone().unwrap_or_default(),
            reason.to_string(),
        )
    };
    resolve(mount, supported).map_err(|e| match e {
        E::NotReadOnly => {
            invalid("requested recursive read-only mode, but the mount is not read-only")
        }
        E::WithPropagation => {
            invalid("recursive read-only mode is not compatible with mount propagation")
        }
        E::NotSupported => ConfigError::RuntimeLacks {
            field: format!("{field}.recursiveReadOnly"),
            message: format!(
                "failed to resolve recursive read-only mode: volume {:?} requested recursive read-only mode, but it is not supported by the runtime",
                mount.name
            ),
        },
        E::UnknownMode => invalid("unknown recursive read-only mode"),
    })
}

/// Rejects absolute subPaths and `..` components (`ValidatePathNoBacksteps`).
fn validate_sub_path(sub_path: &str, field: &str) -> Result<(), ConfigError> {
    let invalid = |reason: &str| {
        ConfigError::invalid(field.to_string(), sub_path.to_string(), reason.to_string())
    };
    if Path::new(sub_path).is_absolute() {
        return Err(invalid("must not be an absolute path"));
    }
    if sub_path.split('/').any(|part| part == "..") {
        return Err(invalid("must not contain '..'"));
    }
    Ok(())
}

/// `subPathExpr` expanded with the container's environment; every referenced variable must be
/// set and non-empty (`ExpandContainerVolumeMounts`).
fn expand_sub_path_expr(
    expr: &str,
    envs: &[(String, String)],
    field: &str,
) -> Result<String, ConfigError> {
    let lookup: HashMap<&str, &str> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let missing = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let expanded = expand(expr, &|name: &str| match lookup.get(name) {
        Some(v) if !v.is_empty() => Some((*v).to_string()),
        _ => {
            missing.borrow_mut().insert(name.to_string());
            Some(String::new())
        }
    });
    let missing = missing.into_inner();
    if !missing.is_empty() {
        return Err(ConfigError::invalid(
            format!("{field}.subPathExpr"),
            expr.to_string(),
            format!(
                "missing value for {}",
                missing.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    Ok(expanded)
}

/// Whether the volume `name` of `pod` is always mounted read-only, whatever its volumeMounts
/// say: configMap, secret, downwardAPI and projected volumes (service account tokens included),
/// whose plugins report `ReadOnly` in the kubelet (`GetAttributes`), the fix for
/// CVE-2017-1002102. Their directory is rewritten by nodelet's atomic writer, which a container
/// able to write there could aim at the host.
pub fn volume_always_read_only(pod: &Pod, name: &str) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .find(|v| v.name == name)
        .and_then(crate::volume::projection::ApiVolumeKind::of)
        .is_some()
}

/// Whether the runtime relabels the volume `name` for the container's SELinux label: the
/// kubelet's volume plugins that are `Managed` with `SELinuxRelabel` (emptyDir, configMap,
/// secret, downwardAPI, projected) do; hostPath does not. On a node without SELinux the
/// runtime's relabel does nothing (go-selinux's `Relabel` returns at once), as under the kubelet.
fn volume_relabels(pod: &Pod, name: &str) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .find(|v| v.name == name)
        .is_some_and(|v| {
            v.empty_dir.is_some()
                || v.config_map.is_some()
                || v.secret.is_some()
                || v.downward_api.is_some()
                || v.projected.is_some()
        })
}

/// A mount's `readonly` (`mount.ReadOnly || mustMountRO`): the manifest's `readOnly`, or the
/// volume's kind ([`volume_always_read_only`]); for subPath mounts of the volume too.
fn mount_read_only(pod: &Pod, mount: &VolumeMount) -> bool {
    mount.read_only.unwrap_or(false) || volume_always_read_only(pod, &mount.name)
}

/// The CRI mount of an image volume (the kubelet's `makeMounts`): the image the runtime
/// mounts, always read-only whatever the volumeMount says, with the volumeMount's subPath
/// (`subPathExpr` expanded) as `image_sub_path`. Admission has refused a subPath where the
/// runtime does not know that field (`pod::runtime_features`).
fn image_volume_mount(
    m: &VolumeMount,
    image: &api::ImageSpec,
    field: &str,
    envs: &[(String, String)],
) -> Result<api::Mount, ConfigError> {
    let sub_path = match m.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
        Some(expr) => expand_sub_path_expr(expr, envs, field)?,
        None => m.sub_path.clone().unwrap_or_default(),
    };
    if !sub_path.is_empty() {
        validate_sub_path(&sub_path, &format!("{field}.subPath"))?;
    }
    let container_path = if m.mount_path.starts_with('/') {
        m.mount_path.clone()
    } else {
        format!("/{}", m.mount_path)
    };
    Ok(api::Mount {
        container_path,
        image: Some(image.clone()),
        readonly: true,
        image_sub_path: sub_path,
        ..Default::default()
    })
}

/// The container's mounts (`makeMounts` + kuberuntime's `makeMounts`): its volumeMounts, then
/// the managed /etc/hosts unless the container mounts something there itself, then the
/// termination-message file.
/// The container's raw block devices (the kubelet's `makeBlockVolumes`): each
/// `volumeDevices[]` entry is the volume's published device file on the host at `devicePath`,
/// `mrw`, or `r` when the pod's `persistentVolumeClaim.readOnly` is set (the kubelet's
/// `vol.ReadOnly`). A name the volume manager did not map is the kubelet's error.
fn make_block_devices(
    pod: &Pod,
    container: &Container,
    base: &str,
    ctx: &ContainerContext,
) -> Result<Vec<api::Device>, ConfigError> {
    let mut out = Vec::new();
    for (i, d) in container.volume_devices.iter().flatten().enumerate() {
        let Some(host_path) = ctx.volumes.get(&d.name) else {
            return Err(ConfigError::MissingVolume {
                field: format!("{base}.volumeDevices[{i}].name"),
                volume: d.name.clone(),
                container: container.name.clone(),
            });
        };
        let read_only = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .find(|v| v.name == d.name)
            .and_then(|v| v.persistent_volume_claim.as_ref())
            .and_then(|p| p.read_only)
            == Some(true);
        out.push(api::Device {
            container_path: d.device_path.clone(),
            host_path: host_path.to_string_lossy().into_owned(),
            permissions: if read_only { "r" } else { "mrw" }.to_string(),
        });
    }
    Ok(out)
}

/// A subPath mount's host path is `<volume>/<subPath>` unresolved, with the subPath named in the
/// second list.
fn make_mounts(
    pod: &Pod,
    container: &Container,
    base: &str,
    ctx: &ContainerContext,
    envs: &[(String, String)],
) -> Result<(Vec<api::Mount>, Vec<SubPathMount>), ConfigError> {
    let mut mounts = Vec::new();
    let mut sub_paths = Vec::new();
    let mut mount_etc_hosts = ctx.etc_hosts.is_some();
    for (i, m) in container.volume_mounts.iter().flatten().enumerate() {
        let field = format!("{base}.volumeMounts[{i}]");
        mount_etc_hosts &= m.mount_path != ETC_HOSTS;
        if let Some(image) = ctx.image_volumes.get(&m.name) {
            mounts.push(image_volume_mount(m, image, &field, envs)?);
            continue;
        }
        let Some(volume_path) = ctx.volumes.get(&m.name) else {
            return Err(ConfigError::MissingVolume {
                field: format!("{field}.name"),
                volume: m.name.clone(),
                container: container.name.clone(),
            });
        };
        let sub_path = match m.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
            Some(expr) => expand_sub_path_expr(expr, envs, &field)?,
            None => m.sub_path.clone().unwrap_or_default(),
        };
        let host_path = if sub_path.is_empty() {
            volume_path.clone()
        } else {
            validate_sub_path(&sub_path, &format!("{field}.subPath"))?;
            sub_paths.push(SubPathMount {
                mount: mounts.len(),
                index: i,
                field: field.clone(),
                volume: m.name.clone(),
                container: container.name.clone(),
                volume_path: volume_path.clone(),
                sub_path: sub_path.clone(),
            });
            volume_path.join(&sub_path)
        };
        let container_path = if m.mount_path.starts_with('/') {
            m.mount_path.clone()
        } else {
            format!("/{}", m.mount_path)
        };
        mounts.push(api::Mount {
            container_path,
            host_path: host_path.to_string_lossy().into_owned(),
            readonly: mount_read_only(pod, m),
            propagation: mount_propagation(m.mount_propagation.as_deref(), &field)?,
            recursive_read_only: recursive_read_only(m, &field, ctx.recursive_read_only)?,
            selinux_relabel: volume_relabels(pod, &m.name),
            ..Default::default()
        });
    }
    // The managed /etc/hosts and the termination-message file are relabelled too (the
    // kubelet's `makeHostsMount`; the message file where SELinux is enabled, which is where the
    // runtime's relabel does anything).
    if let (true, Some(hosts)) = (mount_etc_hosts, ctx.etc_hosts) {
        mounts.push(api::Mount {
            container_path: ETC_HOSTS.to_string(),
            host_path: hosts.to_string_lossy().into_owned(),
            selinux_relabel: true,
            ..Default::default()
        });
    }
    let message_path = termination_message_path(container);
    if let (false, Some(file)) = (message_path.is_empty(), ctx.termination_message) {
        mounts.push(api::Mount {
            container_path: message_path.to_string(),
            host_path: file.to_string_lossy().into_owned(),
            selinux_relabel: true,
            ..Default::default()
        });
    }
    Ok((mounts, sub_paths))
}

/// The CRI config to create `container` of `pod` with, without an API server: any ConfigMap
/// or Secret the environment refers to fails as it does in a kubelet without a client. See
/// [`container_config_with_env`].
pub fn container_config(
    pod: &Pod,
    container: &Container,
    kind: ContainerKind,
    ctx: &ContainerContext,
) -> Result<BuiltContainerConfig, ConfigError> {
    let standalone = FetchedObjects {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        ..FetchedObjects::default()
    };
    container_config_with_env(pod, container, kind, ctx, &standalone)
}

/// The CRI config to create `container` of `pod` with; `env_objects` are the ConfigMaps and
/// Secrets its `env`/`envFrom` refer to (`super::env_objects::gather_env_objects`).
///
/// `image.image` is the image as written in the spec; the kubelet puts the resolved image
/// reference from the pull there (keeping the spec's in `user_specified_image`), so the caller
/// should overwrite it with the reference `PullImage`/`ImageStatus` returned.
pub fn container_config_with_env(
    pod: &Pod,
    container: &Container,
    kind: ContainerKind,
    ctx: &ContainerContext,
    env_objects: &FetchedObjects,
) -> Result<BuiltContainerConfig, ConfigError> {
    let base = container_field_path(pod, &container.name);
    let image = container
        .image
        .clone()
        .filter(|i| !i.is_empty())
        .ok_or_else(|| ConfigError::required(format!("{base}.image")))?;
    let env_ctx = EnvContext {
        pod_ips: ctx.pod_ips,
        host_ips: ctx.host_ips,
        node_name: ctx.node_name,
        node_allocatable: ctx.node_allocatable,
    };
    let envs = make_environment(pod, container, &env_ctx, env_objects)?;
    let lookup: HashMap<&str, &str> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let expand_all = |list: &Option<Vec<String>>| -> Vec<String> {
        list.iter()
            .flatten()
            .map(|s| expand(s, &|name: &str| lookup.get(name).map(|v| (*v).to_string())))
            .collect()
    };
    let command = expand_all(&container.command);
    let args = expand_all(&container.args);
    let (mounts, sub_paths) = make_mounts(pod, container, &base, ctx, &envs)?;

    let config = api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: container.name.clone(),
            attempt: ctx.attempt,
        }),
        image: Some(api::ImageSpec {
            image: image.clone(),
            user_specified_image: image,
            ..Default::default()
        }),
        command,
        args,
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs: envs
            .into_iter()
            .map(|(key, value)| api::KeyValue { key, value })
            .collect(),
        mounts,
        devices: make_block_devices(pod, container, &base, ctx)?,
        labels: cri_labels(pod, container, kind, ctx),
        annotations: cri_annotations(pod, container, ctx.restart_count),
        log_path: container_log_path(&container.name, ctx.restart_count),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: Some(api::LinuxContainerConfig {
            resources: Some(container_resources(pod, container, ctx)),
            security_context: Some(linux_security_context(pod, container, &base, ctx)?),
        }),
        ..Default::default()
    };
    Ok(BuiltContainerConfig { config, sub_paths })
}

/// A container's CRI config and the subPath directories it needs before it can be created.
#[derive(Debug, Clone)]
pub struct BuiltContainerConfig {
    pub config: api::ContainerConfig,
    /// Mounts of `config` whose subPath must be opened and pinned first (their host path is
    /// replaced by the pinned bind mount).
    pub sub_paths: Vec<SubPathMount>,
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::{symlink, PermissionsExt};

    use k8s_openapi::api::core::v1::{
        Capabilities, ContainerPort, EnvVar, PodSecurityContext, PodSpec, SeccompProfile,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::volume::subpath::prepare_sub_paths;

    /// The config as the executor sends it: built, then its subPaths opened and pinned under a
    /// pod directory of its own (released again before this returns, as after a start).
    fn built(
        pod: &Pod,
        container: &Container,
        kind: ContainerKind,
        ctx: &ContainerContext,
    ) -> Result<api::ContainerConfig, ConfigError> {
        let mut b = container_config(pod, container, kind, ctx)?;
        let pod_dir = tempfile::tempdir().unwrap();
        let pinned = prepare_sub_paths(pod_dir.path(), &mut b.config.mounts, &b.sub_paths)?;
        for (target, s) in pinned.targets().iter().zip(&b.sub_paths) {
            // the runtime gets the pinned mount, which shows the subPath itself
            let want = fs::metadata(s.volume_path.join(&s.sub_path)).unwrap();
            let got = fs::metadata(target).unwrap();
            use std::os::unix::fs::MetadataExt;
            assert_eq!((got.dev(), got.ino()), (want.dev(), want.ino()));
        }
        pinned.release().unwrap();
        Ok(b.config)
    }
    use crate::podspec::resources::test_support::container as resourced;

    fn pod_with(containers: Vec<Container>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("prod".into()),
                uid: Some("uid-9".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers,
                ..Default::default()
            }),
            status: None,
        }
    }

    static NO_IMAGE_VOLUMES: BTreeMap<String, api::ImageSpec> = BTreeMap::new();

    fn ctx<'a>(volumes: &'a BTreeMap<String, PathBuf>) -> ContainerContext<'a> {
        ContainerContext {
            pod_ips: &[],
            host_ips: &[],
            node_name: "node-1",
            node_allocatable: NodeAllocatable {
                cpu_milli: 4000,
                memory: 8 << 30,
                ephemeral_storage: None,
            },
            memory_capacity: 10 << 30,
            qos_class: QosClass::BestEffort,
            volumes,
            image_volumes: &NO_IMAGE_VOLUMES,
            etc_hosts: None,
            termination_message: None,
            restart_count: 2,
            attempt: 2,
            cgroup_parent: "/kubepods/burstable/poduid-9",
            node_name_label: "node-1",
            seccomp_profile_root: Path::new("/var/lib/nodelet/seccomp"),
            seccomp_default: false,
            recursive_read_only: false,
            cgroup_v2: true,
            single_process_oom_kill: false,
            memory_qos: crate::config::memory_qos::MemoryQos::OFF,
            memory_qos_allocatable: 8 << 30,
            page_size: 4096,
            pid_target: None,
            hugepage_sizes: &[],
            swap: crate::cgroup::swap::SwapNode::default(),
        }
    }

    /// A localhost seccomp profile is joined to the seccomp directory only as a relative path
    /// without `..`, whatever source the pod came from.
    #[test]
    fn localhost_seccomp_profile_stays_in_the_seccomp_directory() {
        let volumes = BTreeMap::new();
        let cases: &[(&str, Option<&str>)] = &[
            ("audit.json", Some("/var/lib/nodelet/seccomp/audit.json")),
            (
                "team/audit.json",
                Some("/var/lib/nodelet/seccomp/team/audit.json"),
            ),
            ("../../../etc/passwd", None),
            ("team/../../x.json", None),
            ("/etc/passwd", None),
        ];
        for (profile, want) in cases {
            let mut c = resourced("app", "", "");
            c.security_context = Some(SecurityContext {
                seccomp_profile: Some(SeccompProfile {
                    type_: "Localhost".into(),
                    localhost_profile: Some(profile.to_string()),
                }),
                ..Default::default()
            });
            let p = pod_with(vec![c.clone()]);
            let got = built(&p, &c, ContainerKind::Regular, &ctx(&volumes));
            match (got, want) {
                (Ok(config), Some(want)) => {
                    let seccomp = config
                        .linux
                        .unwrap()
                        .security_context
                        .unwrap()
                        .seccomp
                        .unwrap();
                    assert_eq!(seccomp.localhost_ref, *want, "{profile}");
                }
                (Err(e), None) => assert!(
                    e.to_string().contains("localhostProfile: Invalid value"),
                    "{profile}: {e}"
                ),
                (got, want) => panic!("{profile}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn hash_is_the_kubelets() {
        // The kubelet's own test vector (container_hash_test / helpers_test, 1.31+).
        let mut c = resourced("test_container", "", "");
        c.image = Some("foo/image:v1".into());
        c.args = Some(vec!["/bin/sh".into(), "-c".into(), "echo abc".into()]);
        c.ports = Some(vec![ContainerPort {
            container_port: 8001,
            ..Default::default()
        }]);
        assert_eq!(container_hash(&c), "8e45cbd0");
    }

    #[test]
    fn hash_changes_only_with_name_or_image() {
        let base = resourced("app", "cpu=100m", "");
        let hash = container_hash(&base);
        type Change = Box<dyn Fn(&mut Container)>;
        let cases: Vec<(&str, Change, bool)> = vec![
            (
                "image",
                Box::new(|c| c.image = Some("busybox:1.37".into())),
                true,
            ),
            ("name", Box::new(|c| c.name = "other".into()), true),
            (
                "command",
                Box::new(|c| c.command = Some(vec!["sleep".into()])),
                false,
            ),
            (
                "resources",
                Box::new(|c| *c = resourced("app", "cpu=2", "")),
                false,
            ),
            (
                "env",
                Box::new(|c| c.env = Some(vec![EnvVar::default()])),
                false,
            ),
        ];
        for (what, change, changes) in cases {
            let mut c = base.clone();
            change(&mut c);
            assert_eq!(container_hash(&c) != hash, changes, "{what}");
        }
    }

    #[test]
    fn go_json_escaping() {
        let cases = [
            ("plain", "\"plain\""),
            ("a\"b\\c", "\"a\\\"b\\\\c\""),
            ("<&>", "\"\\u003c\\u0026\\u003e\""),
            ("tab\there\n", "\"tab\\there\\n\""),
            ("\u{1}", "\"\\u0001\""),
            ("ünï", "\"ünï\""),
        ];
        for (input, want) in cases {
            assert_eq!(go_json_string(input), want);
        }
    }

    #[test]
    fn metadata_labels_annotations_and_command() {
        let mut c = resourced("app", "", "");
        c.command = Some(vec!["/bin/$(CMD)".into(), "$$(CMD)".into()]);
        c.args = Some(vec!["--name=$(POD)".into(), "$(UNSET)".into()]);
        c.env = Some(vec![
            EnvVar {
                name: "CMD".into(),
                value: Some("serve".into()),
                value_from: None,
            },
            EnvVar {
                name: "POD".into(),
                value: Some("web-$(CMD)".into()),
                value_from: None,
            },
        ]);
        c.working_dir = Some("/srv".into());
        c.tty = Some(true);
        c.ports = Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: 80,
            host_port: Some(8080),
            ..Default::default()
        }]);
        let mut p = pod_with(vec![c.clone()]);
        p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(5);
        let volumes = BTreeMap::new();
        let cfg = built(&p, &c, ContainerKind::Regular, &ctx(&volumes)).unwrap();

        let meta = cfg.metadata.unwrap();
        assert_eq!((meta.name.as_str(), meta.attempt), ("app", 2));
        assert_eq!(cfg.image.unwrap().user_specified_image, "busybox");
        assert_eq!(cfg.command, ["/bin/serve", "$(CMD)"]);
        assert_eq!(cfg.args, ["--name=web-serve", "$(UNSET)"]);
        assert_eq!(cfg.working_dir, "/srv");
        assert!(cfg.tty && !cfg.stdin);
        assert_eq!(cfg.log_path, "app/2.log");
        assert_eq!(
            cfg.envs
                .iter()
                .map(|kv| (kv.key.as_str(), kv.value.as_str()))
                .collect::<Vec<_>>(),
            [("CMD", "serve"), ("POD", "web-serve")]
        );

        let want_labels = [
            (labels::POD_NAME, "web"),
            (labels::POD_NAMESPACE, "prod"),
            (labels::POD_UID, "uid-9"),
            (labels::CONTAINER_NAME, "app"),
            (labels::NODE_NAME, "node-1"),
            (labels::CONTAINER_TYPE, "regular"),
        ];
        assert_eq!(cfg.labels.len(), want_labels.len());
        for (k, v) in want_labels {
            assert_eq!(cfg.labels[k], v, "{k}");
        }
        let want_annotations = [
            (labels::CONTAINER_HASH, container_hash(&c)),
            (labels::CONTAINER_RESTART_COUNT, "2".to_string()),
            (
                labels::CONTAINER_TERMINATION_MESSAGE_PATH,
                "/dev/termination-log".to_string(),
            ),
            (
                labels::CONTAINER_TERMINATION_MESSAGE_POLICY,
                "File".to_string(),
            ),
            (labels::POD_TERMINATION_GRACE_PERIOD, "5".to_string()),
            (
                labels::CONTAINER_PORTS,
                r#"[{"name":"http","hostPort":8080,"containerPort":80,"protocol":"TCP"}]"#
                    .to_string(),
            ),
        ];
        assert_eq!(cfg.annotations.len(), want_annotations.len());
        for (k, v) in want_annotations {
            assert_eq!(cfg.annotations[k], v, "{k}");
        }
    }

    #[test]
    fn hugepage_limits_reach_the_runtime_for_every_node_size() {
        let volumes = BTreeMap::new();
        let sizes = [2u64 << 20, 1 << 30];
        let context = ContainerContext {
            hugepage_sizes: &sizes,
            ..ctx(&volumes)
        };
        let limits = |c: &Container| {
            let p = pod_with(vec![c.clone()]);
            built(&p, c, ContainerKind::Regular, &context)
                .unwrap()
                .linux
                .unwrap()
                .resources
                .unwrap()
                .hugepage_limits
                .into_iter()
                .map(|h| (h.page_size, h.limit))
                .collect::<Vec<_>>()
        };
        let asks = resourced("app", "", "memory=64Mi,hugepages-2Mi=4Mi");
        assert_eq!(
            limits(&asks),
            vec![("2MB".to_string(), 4 << 20), ("1GB".to_string(), 0)]
        );
        // A container that asks none may use none.
        let none = resourced("app", "", "memory=64Mi");
        assert_eq!(
            limits(&none),
            vec![("2MB".to_string(), 0), ("1GB".to_string(), 0)]
        );
        // A node without hugepages sends no entry.
        let p = pod_with(vec![asks.clone()]);
        let cfg = built(&p, &asks, ContainerKind::Regular, &ctx(&volumes)).unwrap();
        assert!(cfg
            .linux
            .unwrap()
            .resources
            .unwrap()
            .hugepage_limits
            .is_empty());
    }

    /// The swap decision (`cgroup::swap`) lands where the runtime reads it: `unified` on
    /// cgroup v2, `memory_swap_limit_in_bytes` on v1, nothing without the controller.
    #[test]
    fn swap_reaches_the_runtime() {
        use crate::cgroup::swap::{SwapBehavior, SwapNode};
        let volumes = BTreeMap::new();
        let c = resourced("app", "memory=1Gi", "memory=2Gi");
        let p = pod_with(vec![c.clone()]);
        let swap = SwapNode {
            behavior: SwapBehavior::LimitedSwap,
            cgroup_v2: true,
            controller: true,
            memory_capacity: 8 << 30,
            swap_capacity: 2 << 30,
        };
        let resources = |cgroup_v2: bool, swap: SwapNode| {
            let context = ContainerContext {
                qos_class: crate::podspec::qos::qos_class(&p),
                cgroup_v2,
                swap,
                ..ctx(&volumes)
            };
            built(&p, &c, ContainerKind::Regular, &context)
                .unwrap()
                .linux
                .unwrap()
                .resources
                .unwrap()
        };
        let v2 = resources(true, swap);
        assert_eq!(v2.unified["memory.swap.max"], (256u64 << 20).to_string());
        assert_eq!(v2.memory_swap_limit_in_bytes, 0);
        let v2_no_swap = resources(
            true,
            SwapNode {
                behavior: SwapBehavior::NoSwap,
                ..swap
            },
        );
        assert_eq!(v2_no_swap.unified["memory.swap.max"], "0");
        let v1 = resources(
            false,
            SwapNode {
                cgroup_v2: false,
                ..swap
            },
        );
        assert!(v1.unified.is_empty(), "{:?}", v1.unified);
        assert_eq!(v1.memory_swap_limit_in_bytes, 2 << 30);
        let none = resources(
            true,
            SwapNode {
                controller: false,
                ..swap
            },
        );
        assert!(!none.unified.contains_key("memory.swap.max"));
        assert_eq!(none.memory_swap_limit_in_bytes, 0);
    }

    #[test]
    fn resources_table() {
        // (requests, limits, shares, quota, memory limit, oom_score_adj)
        let cases = [
            ("", "", 2, 0, 0, 1000),
            ("cpu=250m,memory=1Gi", "", 256, 0, 0, 900),
            (
                "cpu=250m",
                "cpu=500m,memory=512Mi",
                256,
                50_000,
                512 << 20,
                950,
            ),
            ("", "cpu=2,memory=1Gi", 2048, 200_000, 1 << 30, -997),
            ("cpu=1m", "cpu=1m,memory=1Gi", 2, 1000, 1 << 30, -997),
        ];
        for (requests, limits, shares, quota, memory, oom) in cases {
            let c = resourced("app", requests, limits);
            let p = pod_with(vec![c.clone()]);
            let volumes = BTreeMap::new();
            let context = ContainerContext {
                qos_class: crate::podspec::qos::qos_class(&p),
                ..ctx(&volumes)
            };
            let cfg = built(&p, &c, ContainerKind::Regular, &context).unwrap();
            let r = cfg.linux.unwrap().resources.unwrap();
            assert_eq!(
                (
                    r.cpu_shares,
                    r.cpu_quota,
                    r.cpu_period,
                    r.memory_limit_in_bytes,
                    r.oom_score_adj
                ),
                (shares, quota, 100_000, memory, oom),
                "{requests} / {limits}"
            );
            assert_eq!(r.unified["memory.oom.group"], "1");
        }
        // runc rejects `unified` on cgroup v1, so it is only set on v2.
        let c = resourced("app", "", "memory=1Gi");
        let p = pod_with(vec![c.clone()]);
        let volumes = BTreeMap::new();
        let v1 = ContainerContext {
            cgroup_v2: false,
            ..ctx(&volumes)
        };
        let cfg = built(&p, &c, ContainerKind::Regular, &v1).unwrap();
        assert!(cfg.linux.unwrap().resources.unwrap().unified.is_empty());
        // `singleProcessOOMKill: true` leaves the container's `memory.oom.group` to the
        // runtime's default (0: the kernel kills only the process it picks).
        let single = ContainerContext {
            single_process_oom_kill: true,
            ..ctx(&volumes)
        };
        let cfg = built(&p, &c, ContainerKind::Regular, &single).unwrap();
        let unified = cfg.linux.unwrap().resources.unwrap().unified;
        assert!(!unified.contains_key("memory.oom.group"), "{unified:?}");
        assert_eq!(unified["memory.high"], "max", "the rest is still sent");
    }

    #[test]
    fn memory_qos_reaches_the_runtime_through_unified() {
        use crate::config::memory_qos::{MemoryQos, ReservationPolicy};
        let volumes = BTreeMap::new();
        let on = ContainerContext {
            memory_qos: MemoryQos {
                throttling_factor: Some(0.9),
                reservation: ReservationPolicy::TieredReservation,
            },
            ..ctx(&volumes)
        };
        let unified = |c: &Container, ctx: &ContainerContext| {
            let p = pod_with(vec![c.clone()]);
            let cfg = built(&p, c, ContainerKind::Regular, ctx).unwrap();
            let mut u: Vec<(String, String)> = cfg
                .linux
                .unwrap()
                .resources
                .unwrap()
                .unified
                .into_iter()
                .collect();
            u.sort();
            u
        };
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        // The seed's example: request 256Mi, limit 1Gi, factor 0.9.
        let burstable = resourced("app", "memory=256Mi", "memory=1Gi");
        assert_eq!(
            unified(&burstable, &on),
            pairs(&[
                ("memory.high", "993210368"),
                ("memory.low", "268435456"),
                ("memory.oom.group", "1"),
            ])
        );
        let guaranteed = resourced("app", "", "cpu=1,memory=1Gi");
        assert_eq!(
            unified(&guaranteed, &on),
            pairs(&[
                ("memory.high", "max"),
                ("memory.min", "1073741824"),
                ("memory.oom.group", "1"),
            ])
        );
        // Off: memory.high goes back to max, nothing else.
        assert_eq!(
            unified(&burstable, &ctx(&volumes)),
            pairs(&[("memory.high", "max"), ("memory.oom.group", "1")])
        );
        // cgroup v1: no unified map at all.
        let v1 = ContainerContext {
            cgroup_v2: false,
            ..on
        };
        assert!(unified(&burstable, &v1).is_empty());
    }

    #[test]
    fn security_context_table() {
        let mut c = resourced("app", "", "");
        c.security_context = Some(SecurityContext {
            privileged: Some(true),
            capabilities: Some(Capabilities {
                add: Some(vec!["NET_ADMIN".into()]),
                drop: Some(vec!["ALL".into()]),
            }),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            run_as_group: Some(2000),
            proc_mount: Some("Unmasked".into()),
            ..Default::default()
        });
        let mut p = pod_with(vec![c.clone()]);
        let spec = p.spec.as_mut().unwrap();
        spec.host_network = Some(true);
        spec.share_process_namespace = Some(true);
        spec.security_context = Some(PodSecurityContext {
            run_as_user: Some(1000),
            run_as_group: Some(1),
            run_as_non_root: Some(true),
            fs_group: Some(3000),
            supplemental_groups: Some(vec![4000]),
            seccomp_profile: Some(SeccompProfile {
                type_: "Localhost".into(),
                localhost_profile: Some("audit.json".into()),
            }),
            ..Default::default()
        });
        let volumes = BTreeMap::new();
        let sc = built(&p, &c, ContainerKind::Regular, &ctx(&volumes))
            .unwrap()
            .linux
            .unwrap()
            .security_context
            .unwrap();
        assert!(sc.privileged && sc.readonly_rootfs && sc.no_new_privs);
        let caps = sc.capabilities.unwrap();
        assert_eq!(
            (caps.add_capabilities, caps.drop_capabilities),
            (vec!["NET_ADMIN".to_string()], vec!["ALL".to_string()])
        );
        assert_eq!(sc.run_as_user.map(|v| v.value), Some(1000));
        assert_eq!(sc.run_as_group.map(|v| v.value), Some(2000));
        assert_eq!(sc.supplemental_groups, [3000, 4000]);
        assert!(sc.masked_paths.is_empty() && sc.readonly_paths.is_empty());
        let ns = sc.namespace_options.unwrap();
        assert_eq!(
            (ns.network, ns.pid, ns.ipc),
            (
                api::NamespaceMode::Node as i32,
                api::NamespaceMode::Pod as i32,
                api::NamespaceMode::Pod as i32
            )
        );
        let seccomp = sc.seccomp.unwrap();
        assert_eq!(
            seccomp.profile_type,
            api::security_profile::ProfileType::Localhost as i32
        );
        assert_eq!(seccomp.localhost_ref, "/var/lib/nodelet/seccomp/audit.json");
    }

    /// An ephemeral container with a target shares the target's PID namespace (CRI TARGET with
    /// the target's ID) where the pod gives containers their own; with `hostPID` or
    /// `shareProcessNamespace` it keeps the pod's, as the kubelet. It is labelled ephemeral,
    /// and its stdin/tty reach the runtime (for `kubectl debug -it` / attach).
    #[test]
    fn ephemeral_container_targets_the_pid_namespace_of_its_target() {
        use k8s_openapi::api::core::v1::EphemeralContainer;
        let volumes = BTreeMap::new();
        let debug = EphemeralContainer {
            name: "debugger".into(),
            image: Some("busybox".into()),
            target_container_name: Some("app".into()),
            stdin: Some(true),
            tty: Some(true),
            ..Default::default()
        };
        let c = crate::podspec::ephemeral_as_container(&debug);
        // (case, hostPID, shareProcessNamespace, target, want pid mode, want target id)
        let cases = [
            (
                "target",
                None,
                None,
                Some("c-app"),
                api::NamespaceMode::Target,
                "c-app",
            ),
            (
                "no target",
                None,
                None,
                None,
                api::NamespaceMode::Container,
                "",
            ),
            (
                "hostPID",
                Some(true),
                None,
                Some("c-app"),
                api::NamespaceMode::Node,
                "",
            ),
            (
                "shared",
                None,
                Some(true),
                Some("c-app"),
                api::NamespaceMode::Pod,
                "",
            ),
        ];
        for (case, host_pid, share, target, mode, id) in cases {
            let mut p = pod_with(vec![resourced("app", "", "")]);
            let spec = p.spec.as_mut().unwrap();
            spec.host_pid = host_pid;
            spec.share_process_namespace = share;
            spec.ephemeral_containers = Some(vec![debug.clone()]);
            let context = ContainerContext {
                pid_target: target,
                ..ctx(&volumes)
            };
            let cfg = built(&p, &c, ContainerKind::Ephemeral, &context).unwrap();
            let ns = cfg
                .linux
                .as_ref()
                .unwrap()
                .security_context
                .as_ref()
                .unwrap()
                .namespace_options
                .clone()
                .unwrap();
            assert_eq!((ns.pid, ns.target_id.as_str()), (mode as i32, id), "{case}");
            assert_eq!(cfg.labels[labels::CONTAINER_TYPE], "ephemeral", "{case}");
            assert!(cfg.stdin && cfg.tty && !cfg.stdin_once, "{case}");
            assert_eq!(cfg.metadata.as_ref().unwrap().name, "debugger");
        }
    }

    #[test]
    fn default_security_context() {
        let c = resourced("app", "", "");
        let p = pod_with(vec![c.clone()]);
        let volumes = BTreeMap::new();
        let mut context = ctx(&volumes);
        let sc = built(&p, &c, ContainerKind::Init, &context)
            .unwrap()
            .linux
            .unwrap()
            .security_context
            .unwrap();
        assert!(!sc.privileged && !sc.no_new_privs && sc.run_as_user.is_none());
        assert_eq!(sc.masked_paths.len(), DEFAULT_MASKED_PATHS.len());
        assert_eq!(sc.readonly_paths.len(), DEFAULT_READONLY_PATHS.len());
        assert_eq!(
            sc.namespace_options.unwrap().pid,
            api::NamespaceMode::Container as i32
        );
        assert_eq!(
            sc.seccomp.unwrap().profile_type,
            api::security_profile::ProfileType::Unconfined as i32
        );
        context.seccomp_default = true;
        let cfg = built(&p, &c, ContainerKind::Init, &context).unwrap();
        assert_eq!(cfg.labels[labels::CONTAINER_TYPE], "init");
        assert_eq!(
            cfg.linux
                .unwrap()
                .security_context
                .unwrap()
                .seccomp
                .unwrap()
                .profile_type,
            api::security_profile::ProfileType::RuntimeDefault as i32
        );
    }

    fn mount(name: &str, path: &str) -> VolumeMount {
        VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            ..Default::default()
        }
    }

    /// The runtime relabels what the kubelet asks it to: the managed volume kinds, /etc/hosts
    /// and the termination-message file, not a hostPath.
    #[test]
    fn mounts_ask_the_runtime_to_relabel_as_the_kubelet() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("etc-hosts");
        let term = dir.path().join("term");
        let names = ["scratch", "settings", "host"];
        let volumes: BTreeMap<String, PathBuf> = names
            .iter()
            .map(|n| (n.to_string(), dir.path().join(n)))
            .collect();
        let mut c = resourced("app", "", "");
        c.volume_mounts = Some(names.iter().map(|n| mount(n, &format!("/{n}"))).collect());
        let mut p = pod_with(vec![c.clone()]);
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "containers": [],
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "settings", "configMap": {"name": "cfg"}},
                {"name": "host", "hostPath": {"path": "/srv"}},
            ],
        }))
        .unwrap();
        p.spec.as_mut().unwrap().volumes = spec.volumes;
        let context = ContainerContext {
            etc_hosts: Some(&hosts),
            termination_message: Some(&term),
            ..ctx(&volumes)
        };
        let got: Vec<(String, bool)> = built(&p, &c, ContainerKind::Regular, &context)
            .unwrap()
            .mounts
            .into_iter()
            .map(|m| (m.container_path, m.selinux_relabel))
            .collect();
        assert_eq!(
            got,
            vec![
                ("/scratch".to_string(), true),
                ("/settings".to_string(), true),
                ("/host".to_string(), false),
                ("/etc/hosts".to_string(), true),
                ("/dev/termination-log".to_string(), true),
            ]
        );
    }

    /// An image volume is mounted by the runtime from the pulled image (`Mount.image`, no host
    /// path), always read-only whatever the volumeMount says, in the order of the
    /// volumeMounts, with its subPath (expanded) as `image_sub_path`; a subPath that climbs
    /// out is refused; an image volume that was not pulled is a missing volume.
    #[test]
    fn image_volumes_are_mounted_read_only_from_the_pulled_image() {
        let dir = tempfile::tempdir().unwrap();
        let volumes = BTreeMap::from([("scratch".to_string(), dir.path().join("scratch"))]);
        let spec = |image: &str| api::ImageSpec {
            image: image.into(),
            user_specified_image: "reg.io/data:1".into(),
            ..Default::default()
        };
        let images = BTreeMap::from([
            ("data".to_string(), spec("sha256:d")),
            ("tools".to_string(), spec("sha256:t")),
        ]);
        let mut c = resourced("app", "", "");
        c.env = Some(vec![EnvVar {
            name: "SUB".into(),
            value: Some("bin".into()),
            value_from: None,
        }]);
        let vm =
            |name: &str, path: &str, ro: Option<bool>, sub: Option<&str>, expr: Option<&str>| {
                VolumeMount {
                    name: name.into(),
                    mount_path: path.into(),
                    read_only: ro,
                    sub_path: sub.map(str::to_string),
                    sub_path_expr: expr.map(str::to_string),
                    ..Default::default()
                }
            };
        c.volume_mounts = Some(vec![
            vm("data", "/data", Some(false), None, None),
            vm("scratch", "/scratch", None, None, None),
            vm("tools", "tools", None, Some("usr/share"), None),
            vm("data", "/bin-only", None, None, Some("$(SUB)")),
        ]);
        let mut p = pod_with(vec![c.clone()]);
        let vols: PodSpec = serde_json::from_value(serde_json::json!({
            "containers": [],
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "data", "image": {"reference": "reg.io/data:1"}},
                {"name": "tools", "image": {"reference": "reg.io/tools:1"}},
            ],
        }))
        .unwrap();
        p.spec.as_mut().unwrap().volumes = vols.volumes;
        let context = ContainerContext {
            image_volumes: &images,
            ..ctx(&volumes)
        };
        let mounts = built(&p, &c, ContainerKind::Regular, &context)
            .unwrap()
            .mounts;
        let got: Vec<(String, String, Option<String>, bool, String)> = mounts
            .iter()
            .map(|m| {
                (
                    m.container_path.clone(),
                    m.host_path.clone(),
                    m.image.as_ref().map(|i| i.image.clone()),
                    m.readonly,
                    m.image_sub_path.clone(),
                )
            })
            .collect();
        let scratch = dir.path().join("scratch").to_string_lossy().into_owned();
        assert_eq!(
            got,
            vec![
                (
                    "/data".into(),
                    "".into(),
                    Some("sha256:d".into()),
                    true,
                    "".into()
                ),
                ("/scratch".into(), scratch, None, false, "".into()),
                (
                    "/tools".into(),
                    "".into(),
                    Some("sha256:t".into()),
                    true,
                    "usr/share".into()
                ),
                (
                    "/bin-only".into(),
                    "".into(),
                    Some("sha256:d".into()),
                    true,
                    "bin".into()
                ),
            ]
        );
        assert_eq!(
            mounts[0]
                .image
                .as_ref()
                .map(|i| i.user_specified_image.as_str()),
            Some("reg.io/data:1")
        );
        assert!(
            !mounts[0].selinux_relabel,
            "the kubelet's image plugin: SELinuxRelabel false"
        );

        // A subPath that climbs out of the image.
        let mut bad = c.clone();
        bad.volume_mounts = Some(vec![vm("data", "/d", None, Some("../etc"), None)]);
        let err = built(&p, &bad, ContainerKind::Regular, &context).unwrap_err();
        assert!(err.to_string().contains("must not contain '..'"), "{err}");
        // Not pulled (no ImageSpec for it): nothing is mounted in its place.
        let err = built(&p, &c, ContainerKind::Regular, &ctx(&volumes)).unwrap_err();
        assert!(matches!(err, ConfigError::MissingVolume { .. }), "{err:?}");
    }

    #[test]
    fn block_devices_table() {
        use k8s_openapi::api::core::v1::{PersistentVolumeClaimVolumeSource, Volume, VolumeDevice};
        let volumes = BTreeMap::from([
            (
                "rw".to_string(),
                PathBuf::from(
                    "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-a/uid",
                ),
            ),
            (
                "ro".to_string(),
                PathBuf::from(
                    "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-b/uid",
                ),
            ),
        ]);
        let claim = |name: &str, read_only: Option<bool>| Volume {
            name: name.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: name.into(),
                read_only,
            }),
            ..Default::default()
        };
        let device = |name: &str, path: &str| VolumeDevice {
            name: name.into(),
            device_path: path.into(),
        };
        // (devices, want (container path, host path, permissions) or Err)
        // (container path, host path, permissions)
        type Devices<'a> = Vec<(&'a str, &'a str, &'a str)>;
        let cases: Vec<(Vec<VolumeDevice>, Result<Devices, ()>)> = vec![
            (vec![], Ok(vec![])),
            (
                vec![device("rw", "/dev/xvda")],
                Ok(vec![(
                    "/dev/xvda",
                    "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-a/uid",
                    "mrw",
                )]),
            ),
            (
                vec![device("ro", "/dev/xvdb"), device("rw", "/dev/xvda")],
                Ok(vec![
                    (
                        "/dev/xvdb",
                        "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-b/uid",
                        "r",
                    ),
                    (
                        "/dev/xvda",
                        "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-a/uid",
                        "mrw",
                    ),
                ]),
            ),
            (vec![device("missing", "/dev/xvdc")], Err(())),
        ];
        for (devices, want) in cases {
            let mut c = resourced("app", "", "");
            c.volume_devices = Some(devices.clone());
            let mut p = pod_with(vec![c.clone()]);
            p.spec.as_mut().unwrap().volumes =
                Some(vec![claim("rw", None), claim("ro", Some(true))]);
            let got = built(&p, &c, ContainerKind::Regular, &ctx(&volumes));
            match want {
                Ok(want) => {
                    let got: Vec<(String, String, String)> = got
                        .unwrap_or_else(|e| panic!("{devices:?}: {e:?}"))
                        .devices
                        .into_iter()
                        .map(|d| (d.container_path, d.host_path, d.permissions))
                        .collect();
                    let want: Vec<(String, String, String)> = want
                        .into_iter()
                        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
                        .collect();
                    assert_eq!(got, want, "{devices:?}");
                }
                Err(()) => {
                    let err = got.unwrap_err();
                    assert!(
                        matches!(&err, ConfigError::MissingVolume { field, .. } if field == "spec.containers[0].volumeDevices[0].name"),
                        "{err:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn mounts_table() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        fs::create_dir(&data).unwrap();
        fs::set_permissions(&data, fs::Permissions::from_mode(0o777)).unwrap();
        let hosts = dir.path().join("etc-hosts");
        let term = dir.path().join("term");
        let volumes = BTreeMap::from([("data".to_string(), data.clone())]);

        let mut c = resourced("app", "", "");
        c.env = Some(vec![EnvVar {
            name: "SUB".into(),
            value: Some("by-env".into()),
            value_from: None,
        }]);
        c.volume_mounts = Some(vec![
            VolumeMount {
                read_only: Some(true),
                ..mount("data", "/data")
            },
            VolumeMount {
                sub_path: Some("logs/app".into()),
                mount_propagation: Some("HostToContainer".into()),
                ..mount("data", "/logs")
            },
            VolumeMount {
                sub_path_expr: Some("$(SUB)".into()),
                mount_propagation: Some("Bidirectional".into()),
                ..mount("data", "var/env")
            },
        ]);
        c.termination_message_path = Some("/tmp/msg".into());
        let p = pod_with(vec![c.clone()]);
        let context = ContainerContext {
            etc_hosts: Some(&hosts),
            termination_message: Some(&term),
            ..ctx(&volumes)
        };
        let mounts = built(&p, &c, ContainerKind::Regular, &context)
            .unwrap()
            .mounts;
        let got: Vec<(String, String, bool, i32)> = mounts
            .into_iter()
            .map(|m| (m.container_path, m.host_path, m.readonly, m.propagation))
            .collect();
        let s = |p: &Path| p.to_string_lossy().into_owned();
        // subPaths are handed over as their bind mounts under the pod directory (whose
        // temporary name differs per build), never as `<volume>/<subPath>`
        let pinned = |suffix: &str| {
            got.iter()
                .map(|g| g.1.clone())
                .find(|h| h.ends_with(suffix))
                .unwrap_or_else(|| format!("no host path ending in {suffix}"))
        };
        use api::MountPropagation as P;
        assert_eq!(
            got,
            vec![
                ("/data".into(), s(&data), true, P::PropagationPrivate as i32),
                (
                    "/logs".into(),
                    pinned("volume-subpaths/data/app/1"),
                    false,
                    P::PropagationHostToContainer as i32
                ),
                (
                    "/var/env".into(),
                    pinned("volume-subpaths/data/app/2"),
                    false,
                    P::PropagationBidirectional as i32
                ),
                (
                    "/etc/hosts".into(),
                    s(&hosts),
                    false,
                    P::PropagationPrivate as i32
                ),
                (
                    "/tmp/msg".into(),
                    s(&term),
                    false,
                    P::PropagationPrivate as i32
                ),
            ]
        );
        // subPath directories were created with the volume's mode
        let mode = fs::metadata(data.join("logs/app"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o777);
        assert!(data.join("by-env").is_dir());
    }

    /// configMap, secret, downwardAPI and projected volumes (a service account token's too) are
    /// read-only whatever the mount says, subPath mounts included; other volumes follow
    /// `readOnly` (CVE-2017-1002102: a writable API volume lets a container re-point `..data`).
    #[test]
    fn api_volumes_are_always_read_only() {
        use k8s_openapi::api::core::v1::{
            ConfigMapVolumeSource, DownwardAPIVolumeSource, EmptyDirVolumeSource,
            HostPathVolumeSource, ProjectedVolumeSource, SecretVolumeSource, Volume,
        };
        let volume = |name: &str| Volume {
            name: name.into(),
            ..Default::default()
        };
        let volumes = vec![
            Volume {
                config_map: Some(ConfigMapVolumeSource::default()),
                ..volume("cm")
            },
            Volume {
                secret: Some(SecretVolumeSource::default()),
                ..volume("sec")
            },
            Volume {
                downward_api: Some(DownwardAPIVolumeSource::default()),
                ..volume("dapi")
            },
            Volume {
                projected: Some(ProjectedVolumeSource::default()),
                ..volume("kube-api-access-x")
            },
            Volume {
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..volume("scratch")
            },
            Volume {
                host_path: Some(HostPathVolumeSource {
                    path: "/srv".into(),
                    type_: None,
                }),
                ..volume("host")
            },
        ];
        let paths: BTreeMap<String, PathBuf> = volumes
            .iter()
            .map(|v| (v.name.clone(), PathBuf::from(format!("/vol/{}", v.name))))
            .collect();
        // (volume, readOnly, subPath) → readonly
        let cases: &[(&str, Option<bool>, Option<&str>, bool)] = &[
            ("cm", None, None, true),
            ("cm", Some(false), None, true),
            ("cm", Some(true), None, true),
            ("cm", Some(false), Some("key"), true),
            ("sec", None, None, true),
            ("sec", Some(false), Some("dir/key"), true),
            ("dapi", Some(false), None, true),
            ("dapi", None, Some("labels"), true),
            ("kube-api-access-x", Some(false), None, true),
            ("scratch", None, None, false),
            ("scratch", Some(false), Some("sub"), false),
            ("scratch", Some(true), None, true),
            ("host", None, None, false),
            ("host", Some(true), None, true),
        ];
        for (name, read_only, sub_path, want) in cases {
            let mut c = resourced("app", "", "");
            c.volume_mounts = Some(vec![VolumeMount {
                read_only: *read_only,
                sub_path: sub_path.map(str::to_string),
                ..mount(name, "/m")
            }]);
            let mut p = pod_with(vec![c.clone()]);
            p.spec.as_mut().unwrap().volumes = Some(volumes.clone());
            let b = container_config(&p, &c, ContainerKind::Regular, &ctx(&paths)).unwrap();
            assert_eq!(
                b.config.mounts[0].readonly, *want,
                "{name} readOnly={read_only:?} subPath={sub_path:?}"
            );
            let api_volume = matches!(*name, "cm" | "sec" | "dapi" | "kube-api-access-x");
            assert_eq!(volume_always_read_only(&p, name), api_volume, "{name}");
        }
    }

    #[test]
    fn building_the_config_creates_no_sub_path() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        fs::create_dir(&data).unwrap();
        let volumes = BTreeMap::from([("data".to_string(), data.clone())]);
        let mut c = resourced("app", "", "");
        c.volume_mounts = Some(vec![
            mount("data", "/whole"),
            VolumeMount {
                sub_path: Some("logs/app".into()),
                ..mount("data", "/logs")
            },
        ]);
        let p = pod_with(vec![c.clone()]);
        let b = container_config(&p, &c, ContainerKind::Regular, &ctx(&volumes)).unwrap();
        assert!(!data.join("logs").exists(), "the builder is pure");
        assert_eq!(
            b.sub_paths,
            vec![crate::volume::subpath::SubPathMount {
                mount: 1,
                index: 1,
                field: "spec.containers[0].volumeMounts[1]".into(),
                volume: "data".into(),
                container: "app".into(),
                volume_path: data.clone(),
                sub_path: "logs/app".into(),
            }]
        );
        assert_eq!(
            b.config.mounts[1].host_path,
            data.join("logs/app").to_string_lossy()
        );
    }

    #[test]
    fn container_mounting_etc_hosts_keeps_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let volumes = BTreeMap::from([("h".to_string(), dir.path().to_path_buf())]);
        let mut c = resourced("app", "", "");
        c.volume_mounts = Some(vec![mount("h", "/etc/hosts")]);
        let p = pod_with(vec![c.clone()]);
        let hosts = dir.path().join("etc-hosts");
        let context = ContainerContext {
            etc_hosts: Some(&hosts),
            ..ctx(&volumes)
        };
        let mounts = built(&p, &c, ContainerKind::Regular, &context)
            .unwrap()
            .mounts;
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].host_path, dir.path().to_string_lossy());
    }

    #[test]
    fn mount_errors_table() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), dir.path().join("escape")).unwrap();
        let volumes = BTreeMap::from([("v".to_string(), dir.path().to_path_buf())]);
        let cases = [
            (
                mount("nope", "/x"),
                "cannot find volume \"nope\" to mount into container \"app\"",
            ),
            (
                VolumeMount {
                    sub_path: Some("../etc".into()),
                    ..mount("v", "/x")
                },
                "spec.containers[0].volumeMounts[0].subPath: Invalid value: \"../etc\": must not contain '..'",
            ),
            (
                VolumeMount {
                    sub_path: Some("/etc".into()),
                    ..mount("v", "/x")
                },
                "spec.containers[0].volumeMounts[0].subPath: Invalid value: \"/etc\": must not be an absolute path",
            ),
            (
                VolumeMount {
                    sub_path: Some("escape/inner".into()),
                    ..mount("v", "/x")
                },
                "failed to prepare subPath for volumeMount \"v\" of container \"app\"",
            ),
            (
                VolumeMount {
                    sub_path_expr: Some("$(NOPE)/x".into()),
                    ..mount("v", "/x")
                },
                "spec.containers[0].volumeMounts[0].subPathExpr: Invalid value: \"$(NOPE)/x\": missing value for NOPE",
            ),
            (
                VolumeMount {
                    mount_propagation: Some("Sideways".into()),
                    ..mount("v", "/x")
                },
                "spec.containers[0].volumeMounts[0].mountPropagation: Invalid value: \"Sideways\": invalid MountPropagation mode",
            ),
            (
                VolumeMount {
                    recursive_read_only: Some("Enabled".into()),
                    ..mount("v", "/x")
                },
                "spec.containers[0].volumeMounts[0].recursiveReadOnly: Invalid value: \"Enabled\": requested recursive read-only mode, but the mount is not read-only",
            ),
        ];
        for (m, want) in cases {
            let mut c = resourced("app", "", "");
            c.volume_mounts = Some(vec![m]);
            let p = pod_with(vec![c.clone()]);
            let err = built(&p, &c, ContainerKind::Regular, &ctx(&volumes)).unwrap_err();
            assert_eq!(err.to_string(), want);
        }
        // nothing was created outside the volume
        assert!(!outside.path().join("inner").exists());
    }

    #[test]
    fn missing_image_is_a_required_field() {
        let mut c = resourced("app", "", "");
        c.image = None;
        let p = pod_with(vec![c.clone()]);
        let volumes = BTreeMap::new();
        let err = built(&p, &c, ContainerKind::Regular, &ctx(&volumes)).unwrap_err();
        assert_eq!(err.to_string(), "spec.containers[0].image: Required value");
    }

    #[test]
    fn run_as_non_root_table() {
        let c = resourced("app", "", "");
        let mut p = pod_with(vec![c.clone()]);
        let set = |p: &mut Pod, user: Option<i64>, non_root: Option<bool>| {
            p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
                run_as_user: user,
                run_as_non_root: non_root,
                ..Default::default()
            });
        };
        let cases = [
            (None, None, Some(0), "", None),
            (None, Some(false), Some(0), "", None),
            (Some(1000), Some(true), Some(0), "", None),
            (
                Some(0),
                Some(true),
                None,
                "",
                Some("container's runAsUser breaks non-root policy (pod: \"web_prod(uid-9)\", container: app)"),
            ),
            (
                None,
                Some(true),
                Some(0),
                "",
                Some("container has runAsNonRoot and image will run as root (pod: \"web_prod(uid-9)\", container: app)"),
            ),
            (
                None,
                Some(true),
                None,
                "nginx",
                Some("container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root (pod: \"web_prod(uid-9)\", container: app)"),
            ),
            (None, Some(true), Some(101), "", None),
            // No USER in the image: containerd reports neither a uid nor a name, which is root.
            (
                None,
                Some(true),
                None,
                "",
                Some("container has runAsNonRoot and image will run as root (pod: \"web_prod(uid-9)\", container: app)"),
            ),
            (None, None, None, "", None),
            (Some(1000), Some(true), None, "", None),
            (
                None,
                Some(true),
                None,
                "root",
                Some("container has runAsNonRoot and image has non-numeric user (root), cannot verify user is non-root (pod: \"web_prod(uid-9)\", container: app)"),
            ),
            (
                None,
                Some(true),
                Some(4_294_967_296),
                "",
                Some("container has runAsNonRoot and image has an invalid user id (4294967296). (Must be 1-(2147483647)): must be between 0 and 2147483647, inclusive (pod: \"web_prod(uid-9)\", container: app)"),
            ),
            (
                None,
                Some(true),
                Some(-1),
                "",
                Some("container has runAsNonRoot and image has an invalid user id (-1). (Must be 1-(2147483647)): must be between 0 and 2147483647, inclusive (pod: \"web_prod(uid-9)\", container: app)"),
            ),
            (None, Some(true), Some(2_147_483_647), "", None),
        ];
        for (user, non_root, image_uid, image_user, want) in cases {
            set(&mut p, user, non_root);
            let got = verify_run_as_non_root(&p, &c, image_uid, image_user)
                .err()
                .map(|e| e.to_string());
            assert_eq!(got.as_deref(), want, "{user:?} {non_root:?} {image_uid:?}");
        }
    }
}
