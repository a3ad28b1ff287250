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

/// The restart count a container's next instance takes when the runtime holds none of its
/// earlier instances (purged with a sandbox, or lost with the runtime's state): one past the
/// highest `<n>.log` (or rotated `<n>.log.<suffix>`) among `names`, the files of its log
/// directory, so its log never appends to an earlier instance's file (the kubelet's
/// `calcRestartCountByLogDir`). 0 when there are none.
pub fn restart_count_from_log_names<'a>(names: impl IntoIterator<Item = &'a str>) -> i32 {
    names
        .into_iter()
        .filter_map(|name| {
            let digits = name.split_once(".log").and_then(|(number, rest)| {
                (rest.is_empty() || rest.starts_with('.')).then_some(number)
            })?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // A number the kubelet's Atoi refuses (too large) is not one of its files.
            digits.parse::<i32>().ok()
        })
        .map(|n| n.saturating_add(1))
        .max()
        .unwrap_or(0)
}

/// How many entries of a container's log directory are looked at: far more than its
/// instances' files; a directory beyond it is not read to its end.
pub const MAX_LOG_DIR_ENTRIES: usize = 4096;

/// [`restart_count_from_log_names`] over the files of `dir` (at most [`MAX_LOG_DIR_ENTRIES`]);
/// a directory that does not exist or cannot be read gives 0, as the kubelet's.
pub fn restart_count_from_log_dir(dir: &Path) -> i32 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let names: Vec<String> = entries
        .take(MAX_LOG_DIR_ENTRIES)
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    restart_count_from_log_names(names.iter().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_count_from_the_log_files_as_the_kubelets() {
        for (names, want) in [
            (vec![], 0),
            (vec!["0.log"], 1),
            (
                vec!["0.log", "1.log", "3.log.20261207-101010.gz", "2.log"],
                4,
            ),
            (vec!["1.log.20261207-101010"], 2),
            (vec!["x.log", "notes", "5.logs", ".log", "-1.log", "7"], 0),
            (vec!["99999999999.log", "4.log"], 5),
            (vec!["2147483647.log"], i32::MAX),
        ] {
            assert_eq!(
                restart_count_from_log_names(names.clone()),
                want,
                "{names:?}"
            );
        }
    }

    #[test]
    fn restart_count_from_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(restart_count_from_log_dir(&dir.path().join("missing")), 0);
        std::fs::write(dir.path().join("0.log"), "a").unwrap();
        std::fs::write(dir.path().join("1.log"), "b").unwrap();
        std::fs::create_dir(dir.path().join("7.log")).unwrap();
        assert_eq!(restart_count_from_log_dir(dir.path()), 2);
    }

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
