//! The runtime's view of one pod: its sandboxes and every container instance, newest first.
//! This is what `compute_pod_actions` and status generation read; it is built from CRI calls by
//! [`inspect_pod`] and from fake data in tests.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;

use super::{api, labels, Result, Runtime};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    #[default]
    Unknown,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeSandbox {
    pub id: String,
    pub attempt: u32,
    pub ready: bool,
    pub created_at: Timestamp,
    /// Primary IP first; empty for host-network pods or when the runtime reported none.
    pub ips: Vec<String>,
    pub host_network: bool,
}

/// One container instance as the runtime reports it. `Default` (state `Unknown`, created at the
/// epoch, everything else empty) is for building instances field by field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeContainer {
    pub id: String,
    pub name: String,
    pub sandbox_id: String,
    pub state: ContainerState,
    pub attempt: u32,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub image: String,
    pub image_ref: String,
    /// Spec hash recorded at creation (annotation); a different hash means the spec changed.
    pub hash: String,
    pub restart_count: i32,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The CRI log file (`ContainerStatus.log_path`); empty when the runtime reports none.
    pub log_path: String,
    /// The host side of the mount at the container's terminationMessagePath (from the
    /// annotation), as the kubelet's `getTerminationMessage` finds it in the status's mounts.
    pub termination_message_file: Option<std::path::PathBuf>,
    /// The container's resources as the runtime reports them (`ContainerStatus.resources`;
    /// containerd 1.6 reports none).
    pub resources: Option<api::LinuxContainerResources>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodRuntime {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    /// Newest first.
    pub sandboxes: Vec<RuntimeSandbox>,
    /// Every container instance of the pod, newest first.
    pub containers: Vec<RuntimeContainer>,
}

impl PodRuntime {
    pub fn empty(uid: &str) -> Self {
        PodRuntime {
            uid: uid.to_string(),
            ..Default::default()
        }
    }

    /// The newest instance of the named container.
    pub fn latest(&self, name: &str) -> Option<&RuntimeContainer> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// All instances of the named container, newest first.
    pub fn instances<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a RuntimeContainer> {
        self.containers.iter().filter(move |c| c.name == name)
    }

    pub fn running_containers(&self) -> impl Iterator<Item = &RuntimeContainer> {
        self.containers
            .iter()
            .filter(|c| c.state == ContainerState::Running)
    }

    /// The newest sandbox, if any.
    pub fn sandbox(&self) -> Option<&RuntimeSandbox> {
        self.sandboxes.first()
    }

    pub fn is_empty(&self) -> bool {
        self.sandboxes.is_empty() && self.containers.is_empty()
    }

    /// Sorts sandboxes and containers newest first (ties broken by attempt, then ID).
    pub fn sort(&mut self) {
        self.sandboxes.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(b.attempt.cmp(&a.attempt))
                .then(b.id.cmp(&a.id))
        });
        self.containers.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(b.attempt.cmp(&a.attempt))
                .then(b.id.cmp(&a.id))
        });
    }
}

/// CRI nanosecond timestamps; 0 means "not set".
pub fn timestamp_from_nanos(nanos: i64) -> Option<Timestamp> {
    if nanos <= 0 {
        return None;
    }
    Timestamp::from_nanosecond(i128::from(nanos)).ok()
}

/// A label selector for everything of one pod owned by `node_name`.
pub fn pod_selector(node_name: &str, uid: &str) -> std::collections::HashMap<String, String> {
    [
        (labels::POD_UID.to_string(), uid.to_string()),
        (labels::NODE_NAME.to_string(), node_name.to_string()),
    ]
    .into_iter()
    .collect()
}

/// A label selector for everything owned by `node_name`.
pub fn node_selector(node_name: &str) -> std::collections::HashMap<String, String> {
    [(labels::NODE_NAME.to_string(), node_name.to_string())]
        .into_iter()
        .collect()
}

pub fn sandbox_from_status(status: &api::PodSandboxStatus) -> RuntimeSandbox {
    let network = status.network.as_ref();
    let mut ips = Vec::new();
    if let Some(n) = network {
        if !n.ip.is_empty() {
            ips.push(n.ip.clone());
        }
        ips.extend(n.additional_ips.iter().map(|ip| ip.ip.clone()));
    }
    let host_network = status
        .linux
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .and_then(|n| n.options.as_ref())
        .is_some_and(|o| o.network == api::NamespaceMode::Node as i32);
    RuntimeSandbox {
        id: status.id.clone(),
        attempt: status.metadata.as_ref().map_or(0, |m| m.attempt),
        ready: status.state == api::PodSandboxState::SandboxReady as i32,
        created_at: timestamp_from_nanos(status.created_at).unwrap_or(Timestamp::UNIX_EPOCH),
        ips,
        host_network,
    }
}

pub fn container_from_status(status: &api::ContainerStatus, sandbox_id: &str) -> RuntimeContainer {
    let state = match api::ContainerState::try_from(status.state) {
        Ok(api::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(api::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(api::ContainerState::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    };
    let labels: BTreeMap<String, String> = status
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let annotations: BTreeMap<String, String> = status
        .annotations
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let name = labels
        .get(labels::CONTAINER_NAME)
        .cloned()
        .or_else(|| status.metadata.as_ref().map(|m| m.name.clone()))
        .unwrap_or_default();
    RuntimeContainer {
        id: status.id.clone(),
        name,
        sandbox_id: sandbox_id.to_string(),
        state,
        attempt: status.metadata.as_ref().map_or(0, |m| m.attempt),
        created_at: timestamp_from_nanos(status.created_at).unwrap_or(Timestamp::UNIX_EPOCH),
        started_at: timestamp_from_nanos(status.started_at),
        finished_at: timestamp_from_nanos(status.finished_at),
        exit_code: status.exit_code,
        reason: status.reason.clone(),
        message: status.message.clone(),
        image: status
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default(),
        image_ref: status.image_ref.clone(),
        hash: annotations
            .get(labels::CONTAINER_HASH)
            .cloned()
            .unwrap_or_default(),
        restart_count: annotations
            .get(labels::CONTAINER_RESTART_COUNT)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        log_path: status.log_path.clone(),
        termination_message_file: termination_message_mount(status, &annotations),
        resources: status.resources.as_ref().and_then(|r| r.linux.clone()),
        labels,
        annotations,
    }
}

/// The host path of the mount at the container's terminationMessagePath (annotation), if the
/// container has one: the file the kubelet's `getTerminationMessage` reads.
fn termination_message_mount(
    status: &api::ContainerStatus,
    annotations: &BTreeMap<String, String>,
) -> Option<std::path::PathBuf> {
    let path = annotations
        .get(labels::CONTAINER_TERMINATION_MESSAGE_PATH)
        .filter(|p| !p.is_empty())?;
    status
        .mounts
        .iter()
        .find(|m| &m.container_path == path && !m.host_path.is_empty())
        .map(|m| std::path::PathBuf::from(&m.host_path))
}

/// Whether a verbose `PodSandboxStatus` info map says the sandbox's process runs in a network
/// namespace that is still open (containerd: key `info`, fields `processStatus` and
/// `netNamespaceClosed`). Anything else, a missing or unreadable document included, is no.
pub fn sandbox_process_runs(info: &HashMap<String, String>) -> bool {
    let Some(doc) = info
        .get("info")
        .and_then(|raw| serde_json::from_str::<serde_json::Value>(raw).ok())
    else {
        return false;
    };
    doc.get("processStatus").and_then(|s| s.as_str()) == Some("running")
        && doc.get("netNamespaceClosed").and_then(|c| c.as_bool()) != Some(true)
}

/// Reads the runtime state of one pod: its sandboxes and every container instance.
///
/// Containers that vanish between the list and the status call are skipped (they were removed
/// concurrently); any other failure is returned so the caller does not act on a partial view.
///
/// A newest sandbox reported NOTREADY whose process still runs counts as ready: containerd
/// reports NOTREADY for a sandbox whose state it could not load when it restarted (a shim that
/// answered its status call too slowly leaves the sandbox in containerd's `StateUnknown` until
/// it exits or is stopped), and the kubelet then kills and recreates a pod that is running
/// fine. Whether the process runs is asked of the runtime (the verbose status) only for a newest
/// sandbox that is not ready, so a sync costs one more call only in that case.
pub async fn inspect_pod(runtime: &dyn Runtime, node_name: &str, uid: &str) -> Result<PodRuntime> {
    let sandboxes = runtime
        .list_pod_sandbox(Some(api::PodSandboxFilter {
            label_selector: pod_selector(node_name, uid),
            ..Default::default()
        }))
        .await?;
    let mut pod = PodRuntime::empty(uid);
    for sandbox in &sandboxes {
        if let Some(meta) = &sandbox.metadata {
            pod.name.clone_from(&meta.name);
            pod.namespace.clone_from(&meta.namespace);
        }
        match runtime.pod_sandbox_status(&sandbox.id).await {
            Ok(status) => pod.sandboxes.push(sandbox_from_status(&status)),
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        }
    }
    let containers = runtime
        .list_containers(Some(api::ContainerFilter {
            label_selector: pod_selector(node_name, uid),
            ..Default::default()
        }))
        .await?;
    for container in &containers {
        match runtime.container_status(&container.id).await {
            Ok(status) => pod
                .containers
                .push(container_from_status(&status, &container.pod_sandbox_id)),
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        }
    }
    pod.sort();
    if let Some(newest) = pod.sandboxes.first_mut().filter(|s| !s.ready) {
        match runtime.pod_sandbox_info(&newest.id).await {
            Ok(info) if sandbox_process_runs(&info) => {
                // Debug, not warn: it holds on every sync until the sandbox ends.
                tracing::debug!(
                    sandbox.id = %newest.id,
                    "the runtime reports the sandbox not ready but its process runs (a state it \
                     could not load, as after a restart of containerd): kept as ready"
                );
                newest.ready = true;
            }
            Ok(info) => {
                let doc = info
                    .get("info")
                    .and_then(|raw| serde_json::from_str::<serde_json::Value>(raw).ok())
                    .unwrap_or_default();
                tracing::debug!(
                    sandbox.id = %newest.id,
                    process = %doc["processStatus"],
                    pid = %doc["pid"],
                    netns_closed = %doc["netNamespaceClosed"],
                    "the runtime reports the sandbox not ready, and its process does not run"
                );
            }
            // Removed since it was listed: the pod has no sandbox left to keep.
            Err(e) if e.is_not_found() => {
                pod.sandboxes.remove(0);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(name: &str, id: &str, created: i64, attempt: u32) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            name: name.into(),
            sandbox_id: "s".into(),
            state: ContainerState::Exited,
            attempt,
            created_at: timestamp_from_nanos(created).unwrap(),
            ..Default::default()
        }
    }

    #[test]
    fn sort_puts_newest_first_and_latest_finds_it() {
        let mut pod = PodRuntime::empty("u");
        pod.containers = vec![
            container("a", "1", 100, 0),
            container("a", "3", 300, 2),
            container("b", "2", 200, 0),
        ];
        pod.sort();
        let ids: Vec<_> = pod.containers.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["3", "2", "1"]);
        assert_eq!(pod.latest("a").unwrap().id, "3");
        assert_eq!(pod.instances("a").count(), 2);
        assert!(pod.latest("c").is_none());
    }

    #[test]
    fn a_sandbox_process_runs_only_when_the_verbose_info_says_running_with_the_netns_open() {
        let info = |doc: &str| HashMap::from([("info".to_string(), doc.to_string())]);
        let cases = [
            (
                info(r#"{"pid":0,"processStatus":"running","netNamespaceClosed":false}"#),
                true,
            ),
            (info(r#"{"processStatus":"running"}"#), true),
            (
                info(r#"{"processStatus":"running","netNamespaceClosed":true}"#),
                false,
            ),
            (
                info(r#"{"processStatus":"stopped","netNamespaceClosed":false}"#),
                false,
            ),
            (info(r#"{"processStatus":"deleted"}"#), false),
            (info(r#"{"processStatus":"unknown"}"#), false),
            (info(r#"{"processStatus":1}"#), false),
            (info("not json"), false),
            (info("{}"), false),
            (HashMap::new(), false),
            (
                HashMap::from([(
                    "other".to_string(),
                    r#"{"processStatus":"running"}"#.to_string(),
                )]),
                false,
            ),
        ];
        for (i, (info, runs)) in cases.iter().enumerate() {
            assert_eq!(sandbox_process_runs(info), *runs, "case {i}: {info:?}");
        }
    }

    #[test]
    fn zero_nanos_is_unset() {
        assert_eq!(timestamp_from_nanos(0), None);
        assert_eq!(
            timestamp_from_nanos(1_000_000_000).unwrap().to_string(),
            "1970-01-01T00:00:01Z"
        );
    }
}
