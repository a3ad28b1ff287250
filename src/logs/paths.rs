//! Where the kubelet puts container logs (`pkg/kubelet/kuberuntime/helpers.go`): the pod's log
//! directory under `podLogsDir`, a container's directory inside it, and the file of one
//! container instance relative to the sandbox's log directory. The runtime writes the files;
//! the sync creates the directories and the stats and log readers find them here.

use std::path::{Path, PathBuf};

/// The pod's log directory: `<podLogsDir>/<namespace>_<name>_<uid>` (`BuildPodLogsDirectory`).
pub fn pod_log_dir(pod_logs_dir: &Path, namespace: &str, name: &str, uid: &str) -> PathBuf {
    pod_logs_dir.join(format!("{namespace}_{name}_{uid}"))
}

/// A container's log directory inside the pod's (`BuildContainerLogsDirectory`); the kubelet
/// creates it (0755) before creating the container.
pub fn container_log_dir(
    pod_logs_dir: &Path,
    namespace: &str,
    name: &str,
    uid: &str,
    container: &str,
) -> PathBuf {
    pod_log_dir(pod_logs_dir, namespace, name, uid).join(container)
}

/// `<name>/<restartCount>.log`, relative to the sandbox's log directory.
pub fn container_log_path(container_name: &str, restart_count: i32) -> String {
    format!("{container_name}/{restart_count}.log")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_log_dir_is_namespace_name_uid() {
        assert_eq!(
            pod_log_dir(Path::new("/var/log/pods"), "kube-system", "etcd-n1", "abc"),
            PathBuf::from("/var/log/pods/kube-system_etcd-n1_abc")
        );
        assert_eq!(
            container_log_dir(Path::new("/l"), "ns", "p", "u", "c"),
            PathBuf::from("/l/ns_p_u/c")
        );
    }

    #[test]
    fn log_path_table() {
        assert_eq!(container_log_path("app", 0), "app/0.log");
        assert_eq!(container_log_path("side-car", 12), "side-car/12.log");
    }
}
