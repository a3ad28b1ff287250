//! The runtime wing: the container runtime (connected, or the one handed in), nodelet's own
//! directories, the node's facts and the node's cgroups, with the leftovers of pods gone
//! while nodelet was down swept. Everything above runs on what this returns.

use std::path::Path;
use std::sync::Arc;

use super::{cgroups, CgroupSetup, HostPaths, RuntimeServices, StartError};
use crate::cgroup::node::NodeCgroups;
use crate::cgroup::PodCgroupSettings;
use crate::config::Config;
use crate::stats::machine::NodeInfo;

/// What the runtime wing builds.
pub(super) struct RuntimeWing {
    pub rt: RuntimeServices,
    pub node: Arc<NodeInfo>,
    /// The settings every pod cgroup is shaped by.
    pub pod_cgroup: PodCgroupSettings,
    /// The node's cgroup tree (`None`: the runtime places the pods' cgroups).
    pub node_cgroups: Option<Arc<NodeCgroups>>,
    /// The kernel's swap controller is there (`cgroup::swap::controller_available`).
    pub swap_controller: bool,
    /// The pods' user-namespace ranges (`UserNamespacesSupport` on), taken back from the pod
    /// directories; `None` with the gate off.
    pub userns: Option<Arc<crate::userns::UsernsManager>>,
    /// `<rootDir>/trash` and its emptier's thread: gone pods' directories are deleted there.
    pub trash: Arc<crate::volume::trash::Trash>,
}

/// Puts `rootDir` on a shared mount, as the kubelet does at start (see
/// [`crate::volume::mounts::make_rshared`]).
async fn share_root_dir(root: &Path, proc: &Path) -> Result<(), StartError> {
    let (root, proc) = (root.to_path_buf(), proc.to_path_buf());
    let path = root.clone();
    let done =
        tokio::task::spawn_blocking(move || crate::volume::mounts::make_rshared(&root, &proc))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    match done {
        Ok(crate::volume::mounts::Propagation::AlreadyShared) => {
            tracing::debug!(path = %path.display(), "rootDir is on a shared mount");
            Ok(())
        }
        Ok(crate::volume::mounts::Propagation::BindMounted) => {
            tracing::info!(path = %path.display(), "rootDir bind-mounted onto itself with shared mount propagation");
            Ok(())
        }
        Err(error) => Err(StartError::RootDirShared { path, error }),
    }
}

/// Over the connected runtime: creates `rootDir` (on a shared mount) and `podLogsDir`, detects the node's facts
/// unless `node` is given, and sets up the cgroups as `setup` says.
pub(super) async fn wire(
    cfg: &Config,
    rt: RuntimeServices,
    node: Option<NodeInfo>,
    paths: &HostPaths,
    setup: CgroupSetup,
) -> Result<RuntimeWing, StartError> {
    create_dir("rootDir", &cfg.root_dir)?;
    share_root_dir(&cfg.root_dir, &paths.proc).await?;
    create_dir("podLogsDir", &cfg.pod_logs_dir)?;
    let trash =
        crate::volume::trash::Trash::spawn(&cfg.root_dir).map_err(StartError::TrashEmptier)?;
    let node = Arc::new(node.unwrap_or_else(|| {
        NodeInfo::detect(&cfg.node_name, cfg.node_ip, &paths.root, &cfg.root_dir)
    }));
    let (pod_cgroup, node_cgroups) = match setup {
        CgroupSetup::Host => cgroups::setup(cfg, &node, paths).await?,
        CgroupSetup::Given { settings, node } => (settings, node),
    };
    if let Some(node_cgroups) = &node_cgroups {
        cgroups::sweep_orphans(node_cgroups, rt.runtime.as_ref()).await;
    }
    let swap_controller =
        crate::cgroup::swap::controller_available(&paths.cgroup, &paths.proc, pod_cgroup.cgroup_v2);
    if node.machine.swap_capacity > 0 {
        tracing::info!(
            swap_capacity = node.machine.swap_capacity,
            swap_controller,
            behavior = cfg.swap_behavior.as_str(),
            "swap is on (failSwapOn false): containers swap as memorySwap.swapBehavior says"
        );
    }
    let userns = if cfg.feature_enabled(crate::config::kubelet_fields::USER_NAMESPACES_SUPPORT) {
        let userns_paths = crate::userns::UsernsPaths {
            subuid: paths.root.join("etc/subuid"),
            subgid: paths.root.join("etc/subgid"),
            pods_dir: cfg.root_dir.join("pods"),
        };
        let manager = crate::userns::UsernsManager::load(
            &userns_paths,
            cfg.user_namespaces_ids_per_pod,
            cfg.max_pods,
        )
        .map_err(StartError::UserNamespaces)?;
        let layout = manager.layout();
        tracing::info!(
            first_id = layout.first,
            slots = layout.count,
            ids_per_pod = layout.ids_per_pod,
            pods_with_a_range = manager.pods().len(),
            "user namespaces for hostUsers: false pods"
        );
        Some(Arc::new(manager))
    } else {
        None
    };
    Ok(RuntimeWing {
        rt,
        node,
        pod_cgroup,
        node_cgroups,
        swap_controller,
        userns,
        trash,
    })
}

fn create_dir(field: &'static str, path: &Path) -> Result<(), StartError> {
    std::fs::create_dir_all(path).map_err(|error| StartError::CreateDir {
        field,
        path: path.to_path_buf(),
        error,
    })
}
