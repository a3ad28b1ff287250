//! Every pod field a user can set, and what nodelet does with it: the project's rule is
//! *honoured or refused, never ignored*. [`FIELDS`] marks each field path of the Pod's `metadata`
//! and `spec` (the paths `field_walk` walks from `k8s-openapi`'s schema, so a field a new API
//! version adds fails the coverage test until it is marked here):
//!
//! * [`Support::Honoured`]: nodelet does what the kubelet does; the tests that show it.
//! * [`Support::NotNodeWork`]: the kubelet does not act on it either (the API server's, the
//!   scheduler's or a controller's field, or one for Windows nodes).
//! * [`Support::Refused`]: a pod that sets it is rejected at admission ([`refusals`]).
//! * [`Support::Partly`]: some values honoured (with tests), the others refused.
//!
//! Ephemeral containers only ever reach a running pod (`kubectl debug`), which a rejection
//! would kill at nodelet's next restart: a refused field of one ([`ephemeral_refusals`], the
//! same checks as for containers) keeps that ephemeral container from starting, with a Warning
//! event and its waiting status naming the field and value; the pod runs on.
//!
//! An entry covers its path and everything below it (`spec.affinity` covers
//! `spec.affinity.nodeAffinity...`); the most specific entry wins. `{containers,initContainers}`
//! in an entry's path stands for both lists (one `Container` type).
//!
//! [`refusals`] is the admission decision for refused values: pure, and it names the field
//! path with its index and the value. A refusal only looks at values a user sets: the values
//! the API server fills in by default (`emptyDir.medium: ""`) pass.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements, Volume};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The reason of a rejection (and of the Warning event for a refused ephemeral container)
/// for a field nodelet refuses.
pub const POD_FIELD_NOT_SUPPORTED: &str = "PodFieldNotSupported";

/// What nodelet does with one field (and the fields below it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Does what the kubelet does. `tests`: `file::test_name`, checked to exist.
    Honoured { tests: &'static [&'static str] },
    /// The kubelet does not act on it either; `owner` says whose field it is.
    NotNodeWork { owner: &'static str },
    /// A pod that sets it is rejected at admission. `sample`: the lines of a pod's `spec:`
    /// (indented by two) that set it, which the admission decision must reject naming it.
    Refused {
        reason: &'static str,
        sample: &'static str,
    },
    /// Some values honoured (`honoured`, shown by `tests`), the others refused as
    /// [`Support::Refused`].
    Partly {
        honoured: &'static str,
        tests: &'static [&'static str],
        reason: &'static str,
        sample: &'static str,
    },
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldEntry {
    pub path: &'static str,
    pub support: Support,
}

const fn honoured(path: &'static str, tests: &'static [&'static str]) -> FieldEntry {
    FieldEntry {
        path,
        support: Support::Honoured { tests },
    }
}

const fn not_node_work(path: &'static str, owner: &'static str) -> FieldEntry {
    FieldEntry {
        path,
        support: Support::NotNodeWork { owner },
    }
}

const fn refused(path: &'static str, reason: &'static str, sample: &'static str) -> FieldEntry {
    FieldEntry {
        path,
        support: Support::Refused { reason, sample },
    }
}

const fn partly(
    path: &'static str,
    honoured: &'static str,
    tests: &'static [&'static str],
    reason: &'static str,
    sample: &'static str,
) -> FieldEntry {
    FieldEntry {
        path,
        support: Support::Partly {
            honoured,
            tests,
            reason,
            sample,
        },
    }
}

/// Why a volume type is refused: nodelet has no in-tree volume plugins; storage comes
/// through CSI drivers (PVC, ephemeral and inline CSI volumes).
const NO_VOLUME_PLUGIN: &str = "nodelet has no volume plugin for this volume type yet (it mounts emptyDir, hostPath, configMap, secret, downwardAPI, projected, image, and through CSI drivers persistentVolumeClaim, ephemeral and csi volumes)";
const NO_DRA: &str = "dynamic resource allocation (DRA) is not implemented";
const NO_ATOMIC_USER: &str =
    "file owners of projected files (AtomicWriteVolumeUserFields, alpha) are not implemented";
const NO_RESOURCE: &str = "only cpu, memory, ephemeral-storage and hugepages-<size> are managed on this node (no device plugins, no extended resources)";
const NO_POD_RESOURCE: &str = "only cpu and memory are managed at pod level";
const EPHEMERAL_FORBIDS: &str = "the API server (its validation forbids it in an ephemeral container; nodelet starts one without it, as the kubelet)";

macro_rules! volume_refused {
    ($($name:literal),* $(,)?) => {
        [$(refused(
            concat!("spec.volumes[].", $name),
            NO_VOLUME_PLUGIN,
            concat!("  volumes:\n  - name: v\n    ", $name, ": {}\n"),
        )),*]
    };
}

const VOLUME_TYPES_REFUSED: [FieldEntry; 20] = volume_refused!(
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "gitRepo",
    "glusterfs",
    "iscsi",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
);

/// The table, without the volume types nodelet refuses ([`fields`] joins both).
const FIELDS: &[FieldEntry] = &[
    // ------------------------------------------------------------- metadata
    honoured("metadata.name", &["src/source/manifest.rs::naming", "src/sync/sandbox_config.rs::sandbox_config_fields"]),
    honoured("metadata.namespace", &["src/source/manifest.rs::naming", "src/sync/sandbox_config.rs::sandbox_config_fields"]),
    honoured("metadata.uid", &["src/source/manifest.rs::uid_stability", "src/pod/manager.rs::diff_table"]),
    honoured("metadata.labels", &["src/sync/sandbox_config.rs::sandbox_config_fields", "src/volume/api.rs::downward_api_volume_follows_label_changes"]),
    honoured("metadata.annotations", &["src/sync/sandbox_config.rs::sandbox_config_fields"]),
    honoured("metadata.creationTimestamp", &["src/source/manifest.rs::first_seen_marks_creation_time_and_annotation"]),
    honoured("metadata.deletionTimestamp", &["tests/cluster.rs::applied_pod_runs_and_graceful_delete_ends_with_one_final_delete"]),
    honoured("metadata.deletionGracePeriodSeconds", &["src/sync/grace.rs::pod_grace_period_with_and_without_an_override", "tests/cluster.rs::force_delete_cuts_a_running_graceful_termination_short"]),
    honoured("metadata.finalizers", &["tests/status_api.rs::a_pod_with_a_finalizer_gets_one_delete_and_stays"]),
    honoured("metadata.generation", &["src/status/manager.rs::observed_generation_follows_the_pod"]),
    not_node_work("metadata.generateName", "the API server (names the pod at creation)"),
    not_node_work("metadata.managedFields", "the API server (server-side apply)"),
    not_node_work("metadata.ownerReferences", "the garbage collector and the controllers"),
    not_node_work("metadata.resourceVersion", "the API server (optimistic concurrency)"),
    not_node_work("metadata.selfLink", "the API server (deprecated, never set)"),
    // ------------------------------------------------------------- spec
    honoured("spec.activeDeadlineSeconds", &["src/sync/actions.rs::a_passed_deadline_fails_the_pod_with_the_kubelets_reason", "tests/pod_workers.rs::active_deadline_fails_the_pod"]),
    // Required node affinity is checked at admission; preferred terms and pod (anti-)affinity
    // are the scheduler's, as in the kubelet.
    honoured("spec.affinity", &["src/pod/admission.rs::table"]),
    not_node_work("spec.automountServiceAccountToken", "the API server's ServiceAccount admission (adds the kube-api-access volume)"),
    honoured("spec.dnsConfig", &["src/sync/sandbox_config.rs::dns_config_merges_into_every_policy"]),
    honoured("spec.dnsPolicy", &["src/sync/sandbox_config.rs::dns_policy_table"]),
    honoured("spec.enableServiceLinks", &["src/podspec/env.rs::service_links_table"]),
    // Added to a running pod through the `ephemeralcontainers` subresource (kubectl debug) and
    // started once into its sandbox; the fields below that an ephemeral container shares with a
    // container are honoured as for containers (refused ones: `ephemeral_refusals`).
    honoured("spec.ephemeralContainers", &["src/sync/actions.rs::ephemeral_containers_to_start_table", "src/source/validation/tests.rs::pod_level_rules", "src/status/generate_tests.rs::ephemeral_container_statuses_follow_the_runtime", "tests/cluster.rs::kubectl_debug_runs_an_ephemeral_container_in_the_pods_pid_namespace"]),
    honoured("spec.ephemeralContainers[].targetContainerName", &["src/sync/container_config.rs::ephemeral_container_targets_the_pid_namespace_of_its_target", "tests/cluster.rs::kubectl_debug_runs_an_ephemeral_container_in_the_pods_pid_namespace"]),
    not_node_work("spec.ephemeralContainers[].lifecycle", EPHEMERAL_FORBIDS),
    not_node_work("spec.ephemeralContainers[].livenessProbe", EPHEMERAL_FORBIDS),
    not_node_work("spec.ephemeralContainers[].ports", EPHEMERAL_FORBIDS),
    not_node_work("spec.ephemeralContainers[].readinessProbe", EPHEMERAL_FORBIDS),
    not_node_work("spec.ephemeralContainers[].resizePolicy", EPHEMERAL_FORBIDS),
    not_node_work("spec.ephemeralContainers[].resources", EPHEMERAL_FORBIDS),
    not_node_work("spec.ephemeralContainers[].restartPolicy", EPHEMERAL_FORBIDS),
    not_node_work("spec.ephemeralContainers[].restartPolicyRules", EPHEMERAL_FORBIDS),
    not_node_work("spec.ephemeralContainers[].startupProbe", EPHEMERAL_FORBIDS),
    not_node_work("spec.evictionResponders", "the eviction API and its responders"),
    honoured("spec.hostAliases", &["src/volume/hosts.rs::managed_hosts_table"]),
    honoured("spec.hostIPC", &["src/sync/sandbox_config.rs::sandbox_config_fields"]),
    honoured("spec.hostNetwork", &["src/sync/sandbox_config.rs::host_network_sandbox_has_no_hostname", "src/volume/hosts.rs::host_network_copies_the_node_file"]),
    honoured("spec.hostPID", &["src/sync/sandbox_config.rs::sandbox_config_fields"]),
    honoured("spec.hostUsers", &["src/sync/sandbox_config.rs::host_users_false_gets_the_pods_own_user_namespace", "src/userns/tests.rs::decide_table", "src/userns/tests.rs::manager_persists_ranges_and_takes_them_back_after_a_restart", "src/pod/runtime_features.rs::host_users_false_needs_the_gate_and_a_handler_that_declares_user_namespaces", "tests/user_namespaces.rs::host_users_false_runs_in_a_user_namespace_of_its_own"]),
    honoured("spec.hostname", &["src/podspec/hostname.rs::hostname_table"]),
    honoured("spec.hostnameOverride", &["src/podspec/hostname.rs::hostname_table"]),
    honoured("spec.imagePullSecrets", &["src/images/mod.rs::pull_secrets_are_matched_to_the_image_and_missing_ones_reported", "tests/registry_pulls.rs::pull_secrets_pull_private_images_in_cluster_mode"]),
    honoured("spec.nodeName", &["tests/cluster.rs::applied_pod_runs_and_graceful_delete_ends_with_one_final_delete"]),
    honoured("spec.nodeSelector", &["src/pod/admission.rs::table"]),
    honoured("spec.os", &["src/pod/admission.rs::table"]),
    honoured("spec.overhead", &["src/podspec/resources.rs::overhead_adds_to_requests_and_to_limits_that_are_there", "src/eviction/manager_tests.rs::candidate_requests_include_the_pods_overhead"]),
    not_node_work("spec.preemptionPolicy", "the scheduler"),
    honoured("spec.priority", &["src/eviction/rank.rs::memory_ranking_requests_then_priority_then_usage_above_request", "src/pod/admission.rs::critical_pods_preempt_and_others_are_rejected"]),
    honoured("spec.priorityClassName", &["src/cgroup/oom.rs::node_critical_static_pods_are_killed_last"]),
    honoured("spec.readinessGates", &["src/status/generate_tests.rs::readiness_conditions_table"]),
    refused("spec.resourceClaims", NO_DRA, "  resourceClaims:\n  - name: gpu\n    resourceClaimName: gpu-claim\n"),
    refused("spec.resources.claims", NO_DRA, "  resources:\n    claims:\n    - name: gpu\n"),
    partly("spec.resources.limits", "cpu and memory", &["src/podspec/resources.rs::effective_resources_follow_the_seed", "src/podspec/qos.rs::pod_level_resources_decide_qos_alone"], NO_POD_RESOURCE, "  resources:\n    limits:\n      hugepages-2Mi: 4Mi\n"),
    partly("spec.resources.requests", "cpu and memory", &["src/podspec/resources.rs::effective_resources_follow_the_seed", "src/podspec/qos.rs::pod_level_resources_decide_qos_alone"], NO_POD_RESOURCE, "  resources:\n    requests:\n      hugepages-2Mi: 4Mi\n"),
    honoured("spec.restartPolicy", &["tests/static_pods.rs::on_failure_restarts_only_failed_containers", "tests/static_pods.rs::never_policy_succeeds_on_exit_0_and_fails_on_exit_3"]),
    honoured("spec.runtimeClassName", &["src/objects/runtime_classes.rs::lookup_is_the_kubelets_and_refuses_what_it_cannot_resolve", "tests/pod_workers.rs::a_runtime_class_without_an_api_server_is_refused_with_an_event"]),
    not_node_work("spec.schedulerName", "the scheduler"),
    not_node_work("spec.schedulingGates", "the scheduler"),
    not_node_work("spec.schedulingGroup", "the scheduler (gang scheduling)"),
    honoured("spec.securityContext", &["src/sync/sandbox_config.rs::sandbox_config_fields", "src/sync/container_config.rs::security_context_table"]),
    honoured("spec.securityContext.fsGroup", &["src/volume/api.rs::fs_group_owns_the_volume_with_group_read", "src/volume/csi/tests.rs::fs_group_reaches_the_published_volume_or_the_driver", "src/volume/csi/ownership.rs::ownership_reaches_every_file_and_follows_no_link", "tests/security_context.rs::fs_group_owns_empty_dir_volumes"]),
    // nodelet sets up every volume afresh, so OnRootMismatch and Always give the same owners.
    honoured("spec.securityContext.fsGroupChangePolicy", &["src/volume/api.rs::fs_group_mode_table", "src/volume/emptydir.rs::fs_group_gives_the_group_and_setgid_without_following_a_symlink"]),
    honoured("spec.securityContext.seLinuxOptions", &["src/sync/sandbox_config.rs::sandbox_config_fields", "src/sync/container_config.rs::mounts_ask_the_runtime_to_relabel_as_the_kubelet", "src/podspec/field_support/tests.rs::selinux_labels_are_accepted_with_or_without_selinux_on_the_node"]),
    partly("spec.securityContext.seLinuxChangePolicy", "Recursive (the default): the labels go to the runtime", &["src/sync/container_config.rs::security_context_table"], "nodelet does not mount volumes with an SELinux context option", "  securityContext:\n    seLinuxChangePolicy: MountOption\n"),
    honoured("spec.securityContext.supplementalGroupsPolicy", &["src/pod/runtime_features.rs::strict_needs_a_runtime_that_says_it_applies_it"]),
    honoured("spec.securityContext.sysctls", &["src/podspec/sysctl.rs::admission_table", "tests/security_context.rs::allowed_unsafe_sysctls_let_a_pod_set_them"]),
    not_node_work("spec.securityContext.windowsOptions", "Windows nodes (a Linux kubelet ignores it)"),
    honoured("spec.serviceAccount", &["src/volume/projection.rs::token_request_table"]),
    honoured("spec.serviceAccountName", &["src/volume/projection.rs::token_request_table", "tests/cluster_service_account.rs::service_account_volume_reaches_the_container"]),
    honoured("spec.setHostnameAsFQDN", &["src/podspec/hostname.rs::hostname_table"]),
    honoured("spec.shareProcessNamespace", &["src/sync/container_config.rs::security_context_table"]),
    honoured("spec.subdomain", &["src/podspec/hostname.rs::hostname_table"]),
    honoured("spec.terminationGracePeriodSeconds", &["src/sync/grace.rs::grace_period_precedence", "tests/lifecycle.rs::sigterm_ignored_is_killed_after_grace_and_handled_is_completed"]),
    // NoExecute taints are checked at admission; the rest is the scheduler's and the taint
    // manager's, as in the kubelet.
    honoured("spec.tolerations", &["src/pod/admission.rs::no_execute_taints_table"]),
    not_node_work("spec.topologySpreadConstraints", "the scheduler"),
    // ------------------------------------------------------------- containers
    honoured("spec.{containers,initContainers}[].args", &["src/sync/container_config.rs::metadata_labels_annotations_and_command"]),
    honoured("spec.{containers,initContainers}[].command", &["src/sync/container_config.rs::metadata_labels_annotations_and_command"]),
    honoured("spec.{containers,initContainers}[].env", &["src/podspec/env.rs::environment_table", "src/podspec/env.rs::api_object_environment_table"]),
    honoured("spec.{containers,initContainers,ephemeralContainers}[].env[].valueFrom.fileKeyRef", &["src/podspec/env.rs::environment_files_table", "src/podspec/env_file.rs::values_as_the_kubelet_parses_them", "src/volume/env_file.rs::reads_beneath_the_volume_only", "tests/static_pods.rs::environment_variables_from_a_file_an_init_container_wrote"]),
    honoured("spec.{containers,initContainers}[].envFrom", &["src/podspec/env.rs::api_object_environment_table"]),
    honoured("spec.{containers,initContainers}[].image", &["tests/static_pods.rs::two_containers_run_and_answer_on_the_pod_ip"]),
    honoured("spec.{containers,initContainers}[].imagePullPolicy", &["tests/static_pods.rs::absent_image_with_never_pull_is_err_image_never_pull", "tests/registry_pulls.rs::always_runs_the_newly_pushed_digest_on_the_next_start"]),
    honoured("spec.{containers,initContainers}[].lifecycle", &["tests/lifecycle.rs::post_start_and_pre_stop_hooks_run_inside_the_container", "tests/pod_workers.rs::stop_signal_is_delivered_before_the_kill"]),
    honoured("spec.{containers,initContainers}[].livenessProbe", &["tests/probes.rs::http_liveness_turning_unhealthy_restarts_the_container", "src/probe/spec.rs::probe_kill_grace_period_table"]),
    honoured("spec.{containers,initContainers}[].name", &["src/sync/container_config.rs::metadata_labels_annotations_and_command"]),
    honoured("spec.{containers,initContainers}[].ports", &["src/sync/sandbox_config.rs::port_mappings_table", "src/pod/admission.rs::table"]),
    honoured("spec.{containers,initContainers}[].readinessProbe", &["tests/probes.rs::failing_readiness_keeps_the_pod_not_ready_without_restarts_until_healthy"]),
    honoured("spec.{containers,initContainers}[].resizePolicy", &["src/podspec/resize.rs::restart_policy_per_resource", "src/sync/resize.rs::table", "tests/pod_resize.rs::memory_resize_under_restart_container_restarts_it", "tests/pod_resize.rs::cpu_limit_raised_in_place_reaches_the_cgroup"]),
    refused("spec.{containers,initContainers}[].resources.claims", NO_DRA, "  containers:\n  - name: c\n    image: busybox\n    resources:\n      claims:\n      - name: gpu\n"),
    partly("spec.{containers,initContainers}[].resources.limits", "cpu, memory, ephemeral-storage and hugepages-<size>", &["src/sync/container_config.rs::resources_table", "src/eviction/local_storage.rs::violations_in_the_kubelets_order_with_its_messages"], NO_RESOURCE, "  containers:\n  - name: c\n    image: busybox\n    resources:\n      limits:\n        example.com/gpu: \"1\"\n"),
    partly("spec.{containers,initContainers}[].resources.requests", "cpu, memory, ephemeral-storage and hugepages-<size>", &["src/podspec/resources.rs::requests_default_to_limits_per_resource", "src/pod/admission.rs::table", "src/pod/admission.rs::hugepages_are_admitted_against_the_nodes_allocatable", "tests/hugepages.rs::a_containers_hugepage_limit_reaches_the_runtime_for_every_page_size"], NO_RESOURCE, "  containers:\n  - name: c\n    image: busybox\n    resources:\n      requests:\n        example.com/gpu: \"1\"\n"),
    honoured("spec.{containers,initContainers}[].restartPolicy", &["tests/sidecars.rs::init_and_sidecars_start_in_order_and_the_pod_succeeds_with_its_main_container"]),
    honoured("spec.{containers,initContainers}[].restartPolicyRules", &["tests/lifecycle.rs::restart_policy_rules_restart_only_on_exit_code_42", "src/sync/actions.rs::restart_all_containers_rule_triggers_once_on_its_exit_code"]),
    honoured("spec.{containers,initContainers,ephemeralContainers}[].securityContext.seLinuxOptions", &["src/sync/container_config.rs::security_context_table", "src/podspec/field_support/tests.rs::selinux_labels_are_accepted_with_or_without_selinux_on_the_node"]),
    honoured("spec.{containers,initContainers}[].securityContext", &["src/sync/container_config.rs::security_context_table", "tests/security_context.rs::security_context_fields_hold_inside_the_container"]),
    not_node_work("spec.{containers,initContainers,ephemeralContainers}[].securityContext.windowsOptions", "Windows nodes (a Linux kubelet ignores it)"),
    honoured("spec.{containers,initContainers}[].startupProbe", &["tests/probes.rs::startup_probe_holds_back_liveness"]),
    honoured("spec.{containers,initContainers}[].stdin", &["src/sync/container_config.rs::metadata_labels_annotations_and_command"]),
    honoured("spec.{containers,initContainers}[].stdinOnce", &["src/sync/container_config.rs::metadata_labels_annotations_and_command"]),
    honoured("spec.{containers,initContainers}[].terminationMessagePath", &["src/sync/termination.rs::the_message_comes_from_the_file_else_the_log_tail_as_the_kubelet_decides", "src/volume/mod.rs::termination_message_files_are_unique_and_writable"]),
    honoured("spec.{containers,initContainers}[].terminationMessagePolicy", &["src/sync/termination.rs::the_message_comes_from_the_file_else_the_log_tail_as_the_kubelet_decides"]),
    honoured("spec.{containers,initContainers}[].tty", &["src/sync/container_config.rs::metadata_labels_annotations_and_command"]),
    // Raw block devices of Block claims (`volume::csi`, published at the kubelet's
    // `volumeDevices` paths, the CRI Device `mrw` or `r`); a Filesystem claim named here, or a
    // Block claim in volumeMounts, refuses the containers with the kubelet's message.
    honoured("spec.{containers,initContainers,ephemeralContainers}[].volumeDevices", &["tests/csi_block.rs::a_block_claim_is_a_device_in_the_container_and_its_data_outlives_the_pod", "src/sync/container_config.rs::block_devices_table", "src/volume/csi/tests.rs::volume_mode_against_mounts_and_devices_table", "src/volume/csi/tests.rs::a_block_claim_is_staged_and_published_at_the_kubelets_block_paths"]),
    honoured("spec.{containers,initContainers}[].volumeMounts", &["src/sync/container_config.rs::mounts_table", "src/volume/subpath/tests.rs::sub_path_components_table"]),
    refused("spec.{containers,initContainers,ephemeralContainers}[].volumeMounts[].bindMountOptions", "bind mount options (VolumeBindMountOptions, alpha) are not implemented", "  containers:\n  - name: c\n    image: busybox\n    volumeMounts:\n    - name: v\n      mountPath: /v\n      bindMountOptions: [noexec]\n"),
    honoured("spec.{containers,initContainers}[].workingDir", &["src/sync/container_config.rs::metadata_labels_annotations_and_command"]),
    // ------------------------------------------------------------- volumes
    honoured("spec.volumes[].name", &["src/volume/mod.rs::pod_dir_layout"]),
    // Through the CSI drivers registered on the node (`volume::csi`); a PersistentVolume of
    // another source, a Block claim, and a CSIDriver asking for tokens or republishing refuse
    // the pod's containers at mount time (CreateContainerConfigError naming field and value).
    honoured("spec.volumes[].persistentVolumeClaim", &["tests/csi_driver.rs::a_registered_driver_serves_a_claim_that_outlives_its_pods", "tests/csi_driver.rs::an_unbound_claim_keeps_the_pod_creating_until_it_is_bound", "tests/csi_volumes.rs::a_claim_waits_until_bound_then_is_staged_published_and_torn_down_with_the_pod", "src/volume/csi/tests.rs::two_pods_on_one_claim_stage_once_and_unstage_after_the_last", "src/volume/csi/tests.rs::resolution_table", "src/volume/csi/tests.rs::an_unbound_claim_waits_with_the_kubelets_message", "src/volume/csi/tests.rs::attach_required_waits_for_the_volume_attachment", "src/volume/csi/tests.rs::after_a_restart_a_gone_pods_volume_is_unpublished_once_its_driver_is_back"]),
    honoured("spec.volumes[].csi", &["tests/csi_driver.rs::an_inline_csi_volume_is_published_for_the_pod_alone", "src/volume/csi/tests.rs::inline_and_ephemeral_volumes_resolve_as_the_kubelets", "src/volume/csi/tests.rs::secrets_reach_the_driver", "src/volume/csi/tests.rs::refusals_reach_the_caller_before_any_driver_call"]),
    honoured("spec.volumes[].ephemeral", &["tests/csi_driver.rs::a_generic_ephemeral_volume_uses_the_claim_made_for_the_pod", "src/volume/csi/tests.rs::inline_and_ephemeral_volumes_resolve_as_the_kubelets", "src/volume/csi/tests.rs::refusals_reach_the_caller_before_any_driver_call"]),
    honoured("spec.volumes[].configMap", &["src/volume/api.rs::config_map_volume_is_written_and_updated_in_place", "src/volume/projection.rs::config_map_payload_table"]),
    refused("spec.volumes[].configMap.defaultUser", NO_ATOMIC_USER, "  volumes:\n  - name: v\n    configMap: {name: cm, defaultUser: 1000}\n"),
    refused("spec.volumes[].configMap.items[].user", NO_ATOMIC_USER, "  volumes:\n  - name: v\n    configMap:\n      name: cm\n      items: [{key: a, path: a, user: 1000}]\n"),
    honoured("spec.volumes[].downwardAPI", &["src/volume/projection.rs::downward_api_payload_table", "src/volume/api.rs::downward_api_volume_follows_label_changes"]),
    refused("spec.volumes[].downwardAPI.defaultUser", NO_ATOMIC_USER, "  volumes:\n  - name: v\n    downwardAPI: {defaultUser: 1000}\n"),
    refused("spec.volumes[].downwardAPI.items[].user", NO_ATOMIC_USER, "  volumes:\n  - name: v\n    downwardAPI:\n      items: [{path: n, user: 1000, fieldRef: {fieldPath: metadata.name}}]\n"),
    honoured("spec.volumes[].emptyDir", &["src/volume/mod.rs::empty_dirs_are_created_and_cleanup_removes_them", "src/volume/mod.rs::memory_empty_dir_mounts_tmpfs_or_names_the_volume", "tests/eviction.rs::an_empty_dir_over_its_size_limit_is_evicted_and_one_below_is_not", "tests/hugepages.rs::a_hugepages_empty_dir_is_a_hugetlbfs_of_the_requested_page_size"]),
    honoured("spec.volumes[].hostPath", &["src/volume/mod.rs::host_path_type_table"]),
    // Pulled with the pod's credentials and mounted read-only by the runtime; a runtime that
    // does not mount them (containerd 1.6) or the ImageVolume gate off rejects the pod
    // (`pod::runtime_features`), as does a subPath where the runtime lacks `image_sub_path`.
    honoured("spec.volumes[].image", &["src/podspec/image_volume.rs::pull_policy_table", "src/podspec/image_volume.rs::check_container_table", "src/sync/container_config.rs::image_volumes_are_mounted_read_only_from_the_pulled_image", "src/pod/runtime_features.rs::image_volumes_need_the_gate_and_a_runtime_that_mounts_them", "src/gc/mod.rs::image_volume_images_are_in_use", "tests/image_volumes.rs::an_image_volume_is_pulled_with_the_pods_secret_and_mounted_read_only", "tests/image_volumes.rs::a_sub_path_the_runtime_cannot_mount_is_refused"]),
    honoured("spec.volumes[].projected", &["src/volume/projection.rs::volume_payload_table", "tests/api_volumes.rs::kube_api_access_volume_from_the_api_server"]),
    refused("spec.volumes[].projected.defaultUser", NO_ATOMIC_USER, "  volumes:\n  - name: v\n    projected: {defaultUser: 1000, sources: []}\n"),
    refused("spec.volumes[].projected.sources[].clusterTrustBundle", "clusterTrustBundle projections are not implemented", "  volumes:\n  - name: v\n    projected:\n      sources:\n      - clusterTrustBundle: {name: b, path: ca.pem}\n"),
    refused("spec.volumes[].projected.sources[].configMap.items[].user", NO_ATOMIC_USER, "  volumes:\n  - name: v\n    projected:\n      sources:\n      - configMap: {name: cm, items: [{key: a, path: a, user: 1000}]}\n"),
    refused("spec.volumes[].projected.sources[].downwardAPI.items[].user", NO_ATOMIC_USER, "  volumes:\n  - name: v\n    projected:\n      sources:\n      - downwardAPI: {items: [{path: n, user: 1000, fieldRef: {fieldPath: metadata.name}}]}\n"),
    refused("spec.volumes[].projected.sources[].podCertificate", "podCertificate projections are not implemented", "  volumes:\n  - name: v\n    projected:\n      sources:\n      - podCertificate: {signerName: example.com/s, keyType: ED25519, credentialBundlePath: c.pem}\n"),
    refused("spec.volumes[].projected.sources[].secret.items[].user", NO_ATOMIC_USER, "  volumes:\n  - name: v\n    projected:\n      sources:\n      - secret: {name: s, items: [{key: a, path: a, user: 1000}]}\n"),
    refused("spec.volumes[].projected.sources[].serviceAccountToken.user", NO_ATOMIC_USER, "  serviceAccountName: default\n  volumes:\n  - name: v\n    projected:\n      sources:\n      - serviceAccountToken: {path: token, user: 1000}\n"),
    honoured("spec.volumes[].secret", &["src/volume/projection.rs::secret_payload_table", "tests/cluster.rs::config_maps_and_secrets_reach_the_container_and_update_in_place"]),
    refused("spec.volumes[].secret.defaultUser", NO_ATOMIC_USER, "  volumes:\n  - name: v\n    secret: {secretName: s, defaultUser: 1000}\n"),
    refused("spec.volumes[].secret.items[].user", NO_ATOMIC_USER, "  volumes:\n  - name: v\n    secret:\n      secretName: s\n      items: [{key: a, path: a, user: 1000}]\n"),
];

/// Every row: [`FIELDS`] and the volume types nodelet refuses.
pub fn fields() -> Vec<FieldEntry> {
    FIELDS
        .iter()
        .chain(VOLUME_TYPES_REFUSED.iter())
        .copied()
        .collect()
}

/// The concrete paths an entry's path stands for (`{a,b}` expanded).
pub fn expand(path: &str) -> Vec<String> {
    match (path.find('{'), path.find('}')) {
        (Some(open), Some(close)) if open < close => path[open + 1..close]
            .split(',')
            .map(|alt| format!("{}{alt}{}", &path[..open], &path[close + 1..]))
            .collect(),
        _ => vec![path.to_string()],
    }
}

/// Whether the entry path `entry` (expanded) covers the walked path `path`: equal, or `path`
/// lies below it.
fn covers(entry: &str, path: &str) -> bool {
    path == entry
        || path
            .strip_prefix(entry)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

/// The most specific entry covering `path` (the longest expanded entry path).
pub fn entry_for<'a>(entries: &'a [FieldEntry], path: &str) -> Option<&'a FieldEntry> {
    entries
        .iter()
        .flat_map(|e| expand(e.path).into_iter().map(move |p| (p, e)))
        .filter(|(p, _)| covers(p, path))
        .max_by_key(|(p, _)| p.len())
        .map(|(_, e)| e)
}

/// What [`coverage`] found wrong with a table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Walked paths no entry covers: new fields to mark.
    pub unmarked: Vec<String>,
    /// Entries that cover no walked path (a removed field, a typo).
    pub stale: Vec<&'static str>,
    /// Entry paths given twice.
    pub duplicates: Vec<&'static str>,
}

impl Coverage {
    pub fn is_clean(&self) -> bool {
        self.unmarked.is_empty() && self.stale.is_empty() && self.duplicates.is_empty()
    }
}

/// Pure: checks `entries` against the walked `paths`.
pub fn coverage<'p>(paths: impl IntoIterator<Item = &'p str>, entries: &[FieldEntry]) -> Coverage {
    let mut out = Coverage::default();
    let mut seen = BTreeMap::new();
    for e in entries {
        for p in expand(e.path) {
            if seen.insert(p, e.path).is_some() {
                out.duplicates.push(e.path);
            }
        }
    }
    let mut used = std::collections::BTreeSet::new();
    for path in paths {
        match entry_for(entries, path) {
            Some(e) => {
                used.insert(e.path);
            }
            None => out.unmarked.push(path.to_string()),
        }
    }
    out.stale = entries
        .iter()
        .map(|e| e.path)
        .filter(|p| !used.contains(p))
        .collect();
    out
}

/// A field value nodelet refuses: `spec.hostUsers: Unsupported value: false: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: Unsupported value: {value}: {reason}")]
pub struct Refusal {
    /// The field path with its indices: `spec.containers[0].volumeDevices`.
    pub field: String,
    pub value: String,
    pub reason: &'static str,
}

/// The reason the table gives for the entry `path`.
fn reason_of(path: &str) -> &'static str {
    let generic = generic_path(path);
    match entry_for(FIELDS, &generic)
        .or_else(|| entry_for(&VOLUME_TYPES_REFUSED, &generic))
        .map(|e| e.support)
    {
        Some(Support::Refused { reason, .. } | Support::Partly { reason, .. }) => reason,
        _ => "not supported by nodelet",
    }
}

/// `spec.containers[0].env[3]` → `spec.containers[].env[]`.
pub fn generic_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for ch in path.chars() {
        match ch {
            '[' => {
                in_index = true;
                out.push_str("[]");
            }
            ']' => in_index = false,
            _ if in_index => {}
            _ => out.push(ch),
        }
    }
    out
}

fn refuse(out: &mut Vec<Refusal>, field: String, value: impl std::fmt::Display) {
    let reason = reason_of(&field);
    out.push(Refusal {
        field,
        value: value.to_string(),
        reason,
    });
}

/// Pure: every value `pod` sets that nodelet refuses, in field order. Empty admits the pod.
/// Nothing depends on the node: `seLinuxOptions` are accepted with or without SELinux there,
/// as by the kubelet (the runtime applies them only where SELinux is enabled).
pub fn refusals(pod: &Pod) -> Vec<Refusal> {
    let mut out = Vec::new();
    let Some(spec) = &pod.spec else { return out };
    for (i, claim) in spec.resource_claims.iter().flatten().enumerate() {
        refuse(&mut out, format!("spec.resourceClaims[{i}]"), &claim.name);
    }
    if let Some(r) = &spec.resources {
        resources(&mut out, "spec.resources", r, &["cpu", "memory"], false);
    }
    if let Some(sc) = &spec.security_context {
        if let Some(policy) = sc
            .se_linux_change_policy
            .as_deref()
            .filter(|p| *p != "Recursive")
        {
            refuse(
                &mut out,
                "spec.securityContext.seLinuxChangePolicy".into(),
                policy,
            );
        }
    }
    for (list, containers) in [
        ("containers", Some(&spec.containers)),
        ("initContainers", spec.init_containers.as_ref()),
    ] {
        for (i, c) in containers.into_iter().flatten().enumerate() {
            container(&mut out, &format!("spec.{list}[{i}]"), c);
        }
    }
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        volume(&mut out, &format!("spec.volumes[{i}]"), v);
    }
    out
}

/// `managed`: the resource names nodelet manages there; `hugepages`: whether `hugepages-<size>`
/// names are managed too (container level).
fn resources(
    out: &mut Vec<Refusal>,
    path: &str,
    r: &ResourceRequirements,
    managed: &[&str],
    hugepages: bool,
) {
    for (i, claim) in r.claims.iter().flatten().enumerate() {
        refuse(out, format!("{path}.claims[{i}]"), &claim.name);
    }
    for (field, list) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (name, Quantity(q)) in list.iter().flatten() {
            let huge = hugepages && super::hugepages::page_size_of_resource(name).is_some();
            if !managed.contains(&name.as_str()) && !huge {
                refuse(
                    out,
                    format!("{path}.{field}[{name}]"),
                    format!("{name}: {q}"),
                );
            }
        }
    }
}

fn container(out: &mut Vec<Refusal>, path: &str, c: &Container) {
    if let Some(r) = &c.resources {
        resources(
            out,
            &format!("{path}.resources"),
            r,
            &["cpu", "memory", "ephemeral-storage"],
            true,
        );
    }
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        if let Some(opts) = m.bind_mount_options.as_ref().filter(|o| !o.is_empty()) {
            refuse(
                out,
                format!("{path}.volumeMounts[{i}].bindMountOptions"),
                opts.join(","),
            );
        }
    }
}

/// The volume sources nodelet mounts.
const MOUNTED_VOLUME_TYPES: &[&str] = &[
    "emptyDir",
    "hostPath",
    "configMap",
    "secret",
    "downwardAPI",
    "projected",
    "image",
    // Through the CSI volume manager (`volume::csi`).
    "persistentVolumeClaim",
    "ephemeral",
    "csi",
];

fn volume(out: &mut Vec<Refusal>, path: &str, v: &Volume) {
    // The sources from the serialized volume, so that a volume type a new API version adds
    // is refused without anyone listing it here.
    if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(v) {
        for source in fields.keys().filter(|k| *k != "name") {
            if !MOUNTED_VOLUME_TYPES.contains(&source.as_str()) {
                refuse(out, format!("{path}.{source}"), &v.name);
            }
        }
    }
    if let Some(medium) = v
        .empty_dir
        .as_ref()
        .and_then(|e| e.medium.as_deref())
        .filter(|m| !matches!(*m, "" | "Memory") && !super::hugepages::is_hugepages_medium(m))
    {
        refuse(out, format!("{path}.emptyDir.medium"), medium);
    }
    let user = |out: &mut Vec<Refusal>, field: String, u: Option<i64>| {
        if let Some(u) = u {
            refuse(out, field, u);
        }
    };
    if let Some(s) = &v.config_map {
        user(out, format!("{path}.configMap.defaultUser"), s.default_user);
        for (i, item) in s.items.iter().flatten().enumerate() {
            user(out, format!("{path}.configMap.items[{i}].user"), item.user);
        }
    }
    if let Some(s) = &v.secret {
        user(out, format!("{path}.secret.defaultUser"), s.default_user);
        for (i, item) in s.items.iter().flatten().enumerate() {
            user(out, format!("{path}.secret.items[{i}].user"), item.user);
        }
    }
    if let Some(s) = &v.downward_api {
        user(
            out,
            format!("{path}.downwardAPI.defaultUser"),
            s.default_user,
        );
        for (i, item) in s.items.iter().flatten().enumerate() {
            user(
                out,
                format!("{path}.downwardAPI.items[{i}].user"),
                item.user,
            );
        }
    }
    if let Some(p) = &v.projected {
        user(out, format!("{path}.projected.defaultUser"), p.default_user);
        for (j, src) in p.sources.iter().flatten().enumerate() {
            let spath = format!("{path}.projected.sources[{j}]");
            if src.cluster_trust_bundle.is_some() {
                refuse(out, format!("{spath}.clusterTrustBundle"), "set");
            }
            if src.pod_certificate.is_some() {
                refuse(out, format!("{spath}.podCertificate"), "set");
            }
            if let Some(s) = &src.config_map {
                for (i, item) in s.items.iter().flatten().enumerate() {
                    user(out, format!("{spath}.configMap.items[{i}].user"), item.user);
                }
            }
            if let Some(s) = &src.secret {
                for (i, item) in s.items.iter().flatten().enumerate() {
                    user(out, format!("{spath}.secret.items[{i}].user"), item.user);
                }
            }
            if let Some(s) = &src.downward_api {
                for (i, item) in s.items.iter().flatten().enumerate() {
                    user(
                        out,
                        format!("{spath}.downwardAPI.items[{i}].user"),
                        item.user,
                    );
                }
            }
            if let Some(t) = &src.service_account_token {
                user(out, format!("{spath}.serviceAccountToken.user"), t.user);
            }
        }
    }
}

/// Pure: what the ephemeral container at `index` of `spec.ephemeralContainers` sets that
/// nodelet refuses, by the checks containers get at admission (field paths
/// `spec.ephemeralContainers[i]...`). Not part of [`refusals`]: an ephemeral container only
/// reaches a running pod, which must not be rejected for it (at nodelet's next restart that
/// would kill the pod); a refused one is not started, and says why instead.
pub fn ephemeral_refusals(pod: &Pod, index: usize) -> Vec<Refusal> {
    let mut out = Vec::new();
    let Some(e) = super::ephemeral_containers(pod).get(index) else {
        return out;
    };
    let path = format!("spec.ephemeralContainers[{index}]");
    container(&mut out, &path, &super::ephemeral_as_container(e));
    out
}

/// The refused fields as the Markdown list in `docs/features.md` (between its
/// `<!-- refused:begin -->` and `<!-- refused:end -->` markers): one line per refused entry,
/// partly refused ones say what is honoured.
pub fn refused_list_markdown() -> String {
    let mut lines = Vec::new();
    for e in fields() {
        match e.support {
            Support::Refused { reason, .. } => lines.push(format!("- `{}`: {reason}", e.path)),
            Support::Partly {
                honoured, reason, ..
            } => lines.push(format!(
                "- `{}` (honoured: {honoured}; the rest refused): {reason}",
                e.path
            )),
            _ => {}
        }
    }
    lines.join("\n") + "\n"
}

#[cfg(test)]
mod tests;
