//! Which container instance's log to read, and where its file is.
//!
//! The kubelet decides from the pod's API status (`validateContainerLogStatus`): the current
//! instance if it runs or has terminated, the last terminated one with `previous`, and a precise
//! error otherwise. [`log_container_id`] is that decision over a `PodStatus`; when no status is at
//! hand, [`find_container_log`] derives the same status fields from the runtime's instances (the
//! newest instance is the state, the one before it the last termination, as the kubelet's
//! status generation does).

use k8s_openapi::api::core::v1::{
    ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, PodStatus,
};

use super::LogError;
use crate::cri::model::container_from_status;
use crate::cri::{api, labels, ContainerState, Runtime, RuntimeContainer};

/// The log of one container instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerLog {
    /// Runtime ID (without a `containerd://` scheme); `follow` asks the runtime whether it runs.
    pub container_id: String,
    /// The CRI log file (`<podLogsDir>/<ns>_<name>_<uid>/<container>/<restartCount>.log`).
    pub path: std::path::PathBuf,
}

/// The kubelet's `validateContainerLogStatus`: the ID of the container instance whose log a
/// request for `container` (with or without `previous`) reads, from the pod's status (regular,
/// init, then ephemeral container statuses). Errors carry the kubelet's messages word for word;
/// `kubectl logs` shows them to the user.
pub fn log_container_id(
    pod_name: &str,
    status: &PodStatus,
    container: &str,
    previous: bool,
) -> Result<String, LogError> {
    let found = [
        &status.container_statuses,
        &status.init_container_statuses,
        &status.ephemeral_container_statuses,
    ]
    .into_iter()
    .flatten()
    .flatten()
    .find(|s| s.name == container);
    let unavailable = |what: String| LogError::ContainerUnavailable {
        message: format!("container {container:?} in pod {pod_name:?} {what}"),
    };
    let Some(cs) = found else {
        return Err(unavailable("is not available".into()));
    };
    let last = cs
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.container_id.clone().unwrap_or_default());
    let state = cs.state.as_ref();
    let running = state.and_then(|s| s.running.as_ref());
    let terminated = state.and_then(|s| s.terminated.as_ref());
    let waiting = state.and_then(|s| s.waiting.as_ref());
    let id = if previous {
        match last.filter(|id| !id.is_empty()) {
            Some(id) => id,
            None => {
                return Err(LogError::ContainerUnavailable {
                    message: format!(
                        "previous terminated container {container:?} in pod {pod_name:?} not found"
                    ),
                })
            }
        }
    } else if running.is_some() {
        cs.container_id.clone().unwrap_or_default()
    } else if let Some(t) = terminated {
        // The next instance may not have started: its ID is empty, the last one's log is it.
        match t.container_id.clone().filter(|id| !id.is_empty()) {
            Some(id) => id,
            None => match last.filter(|id| !id.is_empty()) {
                Some(id) => id,
                None => return Err(unavailable("is terminated".into())),
            },
        }
    } else if let Some(id) = last {
        if id.is_empty() {
            return Err(unavailable("is terminated".into()));
        }
        id
    } else if let Some(w) = waiting {
        let reason = w.reason.as_deref().unwrap_or_default();
        return Err(unavailable(match reason {
            "ErrImagePull" => "is waiting to start: image can't be pulled".into(),
            "ImagePullBackOff" => "is waiting to start: trying and failing to pull image".into(),
            other => format!("is waiting to start: {other}"),
        }));
    } else {
        return Err(unavailable("is waiting to start - no logs yet".into()));
    };
    Ok(strip_scheme(&id).to_string())
}

/// `containerd://abc` → `abc` (the kubelet's `ParseContainerID`).
fn strip_scheme(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, bare)| bare)
}

/// The status fields [`log_container_id`] reads, derived from the runtime's instances of one
/// container (newest first): the newest is the state — running, or terminated (a created but
/// never started instance counts as terminated, as in the kubelet) — and the one before it, if
/// it has exited, the last termination. No instance at all is "waiting: ContainerCreating", the
/// kubelet's reason for a container that has not been created yet.
pub fn status_from_instances(name: &str, instances: &[RuntimeContainer]) -> ContainerStatus {
    let terminated = |c: &RuntimeContainer| ContainerStateTerminated {
        container_id: Some(c.id.clone()),
        exit_code: c.exit_code,
        reason: Some(c.reason.clone()).filter(|r| !r.is_empty()),
        ..Default::default()
    };
    let state = match instances.first() {
        None => ApiState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ContainerCreating".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        Some(c) if c.state == ContainerState::Running => ApiState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        },
        Some(c) => ApiState {
            terminated: Some(terminated(c)),
            ..Default::default()
        },
    };
    let last_state = instances
        .get(1)
        .filter(|c| c.state != ContainerState::Running)
        .map(|c| ApiState {
            terminated: Some(terminated(c)),
            ..Default::default()
        });
    ContainerStatus {
        name: name.to_string(),
        container_id: instances.first().map(|c| c.id.clone()),
        state: Some(state),
        last_state,
        ..Default::default()
    }
}

/// The log file of the current (or, with `previous`, the last terminated) instance of a
/// container of the pod with this UID, checked as the kubelet checks it (see
/// [`log_container_id`]), from the runtime's view of the pod. `pod_name` is for messages.
pub async fn find_container_log(
    runtime: &dyn Runtime,
    pod_uid: &str,
    pod_name: &str,
    container: &str,
    previous: bool,
) -> Result<ContainerLog, LogError> {
    let instances = container_instances(runtime, pod_uid, container).await?;
    let status = PodStatus {
        container_statuses: Some(vec![status_from_instances(container, &instances)]),
        ..Default::default()
    };
    let id = log_container_id(pod_name, &status, container, previous)?;
    container_log(runtime, &id).await
}

/// Every instance of one container of one pod, newest first.
async fn container_instances(
    runtime: &dyn Runtime,
    pod_uid: &str,
    container: &str,
) -> Result<Vec<RuntimeContainer>, LogError> {
    let runtime_error = |source| LogError::Runtime {
        what: format!("list containers {container:?} of pod UID {pod_uid}"),
        source,
    };
    let listed = runtime
        .list_containers(Some(api::ContainerFilter {
            label_selector: [
                (labels::POD_UID.to_string(), pod_uid.to_string()),
                (labels::CONTAINER_NAME.to_string(), container.to_string()),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        }))
        .await
        .map_err(runtime_error)?;
    let mut instances = Vec::with_capacity(listed.len());
    for c in &listed {
        match runtime.container_status(&c.id).await {
            Ok(status) => instances.push(container_from_status(&status, &c.pod_sandbox_id)),
            // Removed between the list and the status call: it has no log any more.
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(runtime_error(e)),
        }
    }
    instances.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then(b.attempt.cmp(&a.attempt))
            .then(b.id.cmp(&a.id))
    });
    Ok(instances)
}

/// The log file of one container instance, from the runtime (`ContainerStatus.log_path`).
pub async fn container_log(
    runtime: &dyn Runtime,
    container_id: &str,
) -> Result<ContainerLog, LogError> {
    let container_id = strip_scheme(container_id);
    let status = runtime
        .container_status(container_id)
        .await
        .map_err(|source| LogError::Runtime {
            what: format!("unable to retrieve container logs for {container_id}"),
            source,
        })?;
    if status.log_path.is_empty() {
        return Err(LogError::NoLogPath {
            container_id: container_id.to_string(),
        });
    }
    Ok(ContainerLog {
        container_id: container_id.to_string(),
        path: status.log_path.into(),
    })
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::cri::model::timestamp_from_nanos;

    fn terminated(id: Option<&str>) -> ApiState {
        ApiState {
            terminated: Some(ContainerStateTerminated {
                container_id: id.map(String::from),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn running() -> ApiState {
        ApiState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        }
    }

    fn waiting(reason: &str) -> ApiState {
        ApiState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn status(id: &str, state: Option<ApiState>, last: Option<ApiState>) -> ContainerStatus {
        ContainerStatus {
            name: "app".into(),
            container_id: Some(id.into()).filter(|s: &String| !s.is_empty()),
            state,
            last_state: last,
            ..Default::default()
        }
    }

    /// What a case expects: the bare container ID, or the error message.
    type Want = Result<&'static str, &'static str>;

    #[test]
    fn log_container_id_cases() {
        let c = "containerd://";
        let cases: Vec<(&str, Option<ContainerStatus>, bool, Want)> = vec![
            (
                "running",
                Some(status(&format!("{c}cur"), Some(running()), None)),
                false,
                Ok("cur"),
            ),
            (
                "running, previous",
                Some(status(
                    "cur",
                    Some(running()),
                    Some(terminated(Some(&format!("{c}old")))),
                )),
                true,
                Ok("old"),
            ),
            (
                "running, no previous",
                Some(status("cur", Some(running()), None)),
                true,
                Err(r#"previous terminated container "app" in pod "web" not found"#),
            ),
            (
                "previous with empty ID",
                Some(status("cur", Some(running()), Some(terminated(Some(""))))),
                true,
                Err(r#"previous terminated container "app" in pod "web" not found"#),
            ),
            (
                "terminated",
                Some(status("cur", Some(terminated(Some("cur"))), None)),
                false,
                Ok("cur"),
            ),
            (
                "terminated without ID falls back to the last one",
                Some(status(
                    "",
                    Some(terminated(None)),
                    Some(terminated(Some("old"))),
                )),
                false,
                Ok("old"),
            ),
            (
                "terminated without any ID",
                Some(status("", Some(terminated(None)), None)),
                false,
                Err(r#"container "app" in pod "web" is terminated"#),
            ),
            (
                "waiting in back-off reads the last termination",
                Some(status(
                    "",
                    Some(waiting("CrashLoopBackOff")),
                    Some(terminated(Some("old"))),
                )),
                false,
                Ok("old"),
            ),
            (
                "waiting, last termination without ID",
                Some(status(
                    "",
                    Some(waiting("CrashLoopBackOff")),
                    Some(terminated(None)),
                )),
                false,
                Err(r#"container "app" in pod "web" is terminated"#),
            ),
            (
                "image pull",
                Some(status("", Some(waiting("ErrImagePull")), None)),
                false,
                Err(r#"container "app" in pod "web" is waiting to start: image can't be pulled"#),
            ),
            (
                "image pull back-off",
                Some(status("", Some(waiting("ImagePullBackOff")), None)),
                false,
                Err(
                    r#"container "app" in pod "web" is waiting to start: trying and failing to pull image"#,
                ),
            ),
            (
                "creating",
                Some(status("", Some(waiting("ContainerCreating")), None)),
                false,
                Err(r#"container "app" in pod "web" is waiting to start: ContainerCreating"#),
            ),
            (
                "no state",
                Some(status("", None, None)),
                false,
                Err(r#"container "app" in pod "web" is waiting to start - no logs yet"#),
            ),
            (
                "no status",
                None,
                false,
                Err(r#"container "app" in pod "web" is not available"#),
            ),
        ];
        for (name, cs, previous, want) in cases {
            let pod = PodStatus {
                container_statuses: cs.map(|s| vec![s]),
                ..Default::default()
            };
            let got = log_container_id("web", &pod, "app", previous).map_err(|e| e.to_string());
            let got = got.as_ref().map(String::as_str).map_err(String::as_str);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn init_and_ephemeral_statuses_are_searched() {
        for (init, ephemeral) in [(true, false), (false, true)] {
            let s = vec![status("x", Some(running()), None)];
            let pod = PodStatus {
                init_container_statuses: init.then(|| s.clone()),
                ephemeral_container_statuses: ephemeral.then(|| s.clone()),
                ..Default::default()
            };
            assert_eq!(log_container_id("web", &pod, "app", false).unwrap(), "x");
        }
    }

    fn instance(id: &str, state: ContainerState) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            name: "app".into(),
            sandbox_id: "s".into(),
            state,
            created_at: timestamp_from_nanos(1).unwrap(),
            exit_code: 1,
            reason: "Error".into(),
            ..Default::default()
        }
    }

    #[test]
    fn runtime_instances_choose_like_the_status() {
        use ContainerState::*;
        let cases: Vec<(&str, Vec<RuntimeContainer>, bool, Want)> = vec![
            (
                "none",
                vec![],
                false,
                Err(r#"container "app" in pod "web" is waiting to start: ContainerCreating"#),
            ),
            (
                "none, previous",
                vec![],
                true,
                Err(r#"previous terminated container "app" in pod "web" not found"#),
            ),
            ("running", vec![instance("b", Running)], false, Ok("b")),
            ("exited", vec![instance("b", Exited)], false, Ok("b")),
            (
                "created counts as terminated",
                vec![instance("b", Created)],
                false,
                Ok("b"),
            ),
            (
                "restarted",
                vec![instance("b", Running), instance("a", Exited)],
                false,
                Ok("b"),
            ),
            (
                "restarted, previous",
                vec![instance("b", Running), instance("a", Exited)],
                true,
                Ok("a"),
            ),
            (
                "exited twice, previous",
                vec![instance("b", Exited), instance("a", Exited)],
                true,
                Ok("a"),
            ),
            (
                "single instance, previous",
                vec![instance("b", Exited)],
                true,
                Err(r#"previous terminated container "app" in pod "web" not found"#),
            ),
        ];
        for (name, instances, previous, want) in cases {
            let pod = PodStatus {
                container_statuses: Some(vec![status_from_instances("app", &instances)]),
                ..Default::default()
            };
            let got = log_container_id("web", &pod, "app", previous).map_err(|e| e.to_string());
            let got = got.as_ref().map(String::as_str).map_err(String::as_str);
            assert_eq!(got, want, "{name}");
        }
    }
}
