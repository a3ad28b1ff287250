//! Each manager's own settings, built from the whole configuration here: `agent` is the only
//! reader of [`Config`], and a manager sees only what it is set up with.

use std::path::{Path, PathBuf};

use crate::cluster::ClientSettings;

use crate::config::kubelet_fields::{GRACEFUL_NODE_SHUTDOWN, GRACEFUL_NODE_SHUTDOWN_BY_PRIORITY};
use crate::config::Config;
use crate::eviction::manager::{CHECK_PERIOD, HOUSEKEEPING_PERIOD};
use crate::gc::images::ImageGcPolicy;
use crate::node::status::AllocatableReservation;
use crate::nodeshutdown::groups::effective_periods;
use crate::nodeshutdown::logind::DEFAULT_DROP_IN;
use crate::nodeshutdown::state::STATE_FILE;
use crate::stats::StatsSettings;

/// The eviction manager's settings: the thresholds and periods of `cfg`, the kubelet's
/// housekeeping period and nodelet's check period.
pub fn eviction(cfg: &Config) -> crate::eviction::manager::Settings {
    crate::eviction::manager::Settings {
        thresholds: cfg.eviction.thresholds.clone(),
        pressure_transition_period: cfg.eviction.pressure_transition_period,
        max_pod_grace_period_seconds: cfg.eviction.max_pod_grace_period_seconds,
        evict_static_pods: cfg.eviction.evict_static_pods,
        split_image_fs: false,
        housekeeping_period: HOUSEKEEPING_PERIOD,
        check_period: CHECK_PERIOD,
        node_name: cfg.node_name.clone(),
    }
}

/// The node shutdown manager's settings; `None` when graceful node shutdown is off (no period
/// set, or the `GracefulNodeShutdown` gate off), as the kubelet's stub manager.
pub fn node_shutdown(cfg: &Config) -> Option<crate::nodeshutdown::manager::Settings> {
    if !cfg.feature_enabled(GRACEFUL_NODE_SHUTDOWN) {
        return None;
    }
    let by_priority = if cfg.feature_enabled(GRACEFUL_NODE_SHUTDOWN_BY_PRIORITY) {
        cfg.shutdown.grace_period_by_pod_priority.as_slice()
    } else {
        &[]
    };
    let periods = effective_periods(
        by_priority,
        cfg.shutdown.grace_period,
        cfg.shutdown.grace_period_critical_pods,
    );
    (!periods.is_empty()).then(|| crate::nodeshutdown::manager::Settings {
        periods,
        drop_in: PathBuf::from(DEFAULT_DROP_IN),
        state_file: cfg.root_dir.join(STATE_FILE),
        node_name: cfg.node_name.clone(),
    })
}

/// The node loops' settings (registration, node status, Lease).
pub fn node(cfg: &Config) -> crate::node::NodeSettings {
    crate::node::NodeSettings {
        node_name: cfg.node_name.clone(),
        register_node: cfg.register_node,
        node_labels: cfg.node_labels.clone(),
        register_with_taints: cfg.register_with_taints.clone(),
        max_pods: cfg.max_pods,
        pods_per_core: cfg.pods_per_core,
        provider_id: cfg.provider_id.clone(),
        cloud: cloud_provider(cfg),
        update_frequency: cfg.node_status_update_frequency,
        report_frequency: cfg.node_status_report_frequency,
        lease_duration_seconds: cfg.node_lease_duration_seconds,
        reserved: allocatable_reservation(cfg),
        kubelet_port: i32::from(cfg.port),
        max_images: cfg.node_status_max_images,
    }
}

/// `cloudProvider` and `nodeIP` as the Node's registration and addresses follow them.
pub fn cloud_provider(cfg: &Config) -> crate::node::CloudProvider {
    if cfg.external_cloud_provider {
        crate::node::CloudProvider::External {
            node_ip: cfg.node_ip,
        }
    } else {
        crate::node::CloudProvider::None
    }
}

/// What allocatable holds back: `kubeReserved` + `systemReserved` + the hard eviction
/// thresholds.
pub fn allocatable_reservation(cfg: &Config) -> AllocatableReservation {
    AllocatableReservation::new(
        cfg.kube_reserved.plus(cfg.system_reserved),
        &cfg.eviction.thresholds,
    )
}

/// The stats provider's settings, reading cgroups under `cgroup_mount` and processes under
/// `proc_root`.
pub fn stats(cfg: &Config, cgroup_mount: &Path, proc_root: &Path) -> StatsSettings {
    StatsSettings {
        node_name: cfg.node_name.clone(),
        cgroup_mount: cgroup_mount.to_path_buf(),
        proc_root: proc_root.to_path_buf(),
        root_dir: cfg.root_dir.clone(),
        pod_logs_dir: cfg.pod_logs_dir.clone(),
        cgroup_driver: cfg.cgroup_driver,
        cgroup_root: cfg.cgroup_root.clone(),
        cgroups_per_qos: cfg.cgroups_per_qos,
        volume_stats_period: cfg.volume_stats_agg_period,
    }
}

/// How the API clients are built: the kubeconfig and `kubeAPIQPS`/`kubeAPIBurst`.
pub fn clients(cfg: &Config) -> ClientSettings {
    ClientSettings {
        kubeconfig: cfg.kubeconfig.clone(),
        qps: cfg.kube_api_qps,
        burst: cfg.kube_api_burst,
        event_qps: cfg.event_record_qps,
        event_burst: cfg.event_burst,
    }
}

/// Image GC's thresholds and ages.
pub fn image_gc(cfg: &Config) -> ImageGcPolicy {
    ImageGcPolicy {
        high_threshold_percent: cfg.image_gc_high_threshold_percent,
        low_threshold_percent: cfg.image_gc_low_threshold_percent,
        min_age: cfg.image_minimum_gc_age,
        max_age: cfg.image_maximum_gc_age,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::nodeshutdown::groups::SYSTEM_CRITICAL_PRIORITY;

    #[test]
    fn settings_from_the_configuration() {
        let env = crate::config::Environment {
            hostname: "n1".into(),
        };
        let mut cfg = crate::config::Config::defaults(&env);
        assert_eq!(node_shutdown(&cfg), None, "off by default");
        cfg.shutdown.grace_period = Duration::from_secs(20);
        cfg.shutdown.grace_period_critical_pods = Duration::from_secs(5);
        let s = node_shutdown(&cfg).unwrap();
        assert_eq!(
            s.periods
                .iter()
                .map(|p| (p.priority, p.shutdown_grace_period_seconds))
                .collect::<Vec<_>>(),
            vec![(0, 15), (SYSTEM_CRITICAL_PRIORITY, 5)]
        );
        assert_eq!(
            s.state_file,
            cfg.root_dir.join("graceful_node_shutdown_state")
        );
        cfg.feature_gates
            .insert("GracefulNodeShutdown".into(), false);
        assert_eq!(node_shutdown(&cfg), None, "gate off");
    }
}
