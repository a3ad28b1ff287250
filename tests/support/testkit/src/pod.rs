//! A pod's status as nodelet's `/pods` reports it, read the way tests ask about it.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// `status.phase`, `""` while unset.
pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// The status of the (app) container `name`.
pub fn container_status<'a>(p: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
}

/// `restartCount` of container `name` (0 while it has no status).
pub fn restart_count(p: &Pod, name: &str) -> i32 {
    container_status(p, name).map_or(0, |c| c.restart_count)
}

/// The reason container `name` is waiting, if it is.
pub fn waiting_reason(p: &Pod, name: &str) -> Option<String> {
    container_status(p, name)?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

/// Exit code and reason of container `name`, if it is terminated.
pub fn terminated(p: &Pod, name: &str) -> Option<(i32, String)> {
    let t = container_status(p, name)?
        .state
        .as_ref()?
        .terminated
        .as_ref()?;
    Some((t.exit_code, t.reason.clone().unwrap_or_default()))
}

/// The container IDs of every container status (running or not), sorted.
pub fn running_ids(p: &Pod) -> Vec<String> {
    let mut v: Vec<String> = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().filter_map(|c| c.container_id.clone()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// The pod has container statuses and every one is running.
pub fn all_running(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| {
            !cs.is_empty()
                && cs
                    .iter()
                    .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        })
}

/// The pod's `Ready` condition is True.
pub fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "status": status}))
            .unwrap()
    }

    #[test]
    fn status_helpers() {
        let p = pod(serde_json::json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "a", "image": "i", "imageID": "", "ready": true, "restartCount": 2,
                 "containerID": "containerd://b", "state": {"running": {}}},
                {"name": "w", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
                {"name": "t", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "containerID": "containerd://a",
                 "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}
            ]
        }));
        assert_eq!(phase(&p), "Running");
        assert_eq!(restart_count(&p, "a"), 2);
        assert_eq!(restart_count(&p, "nope"), 0);
        assert_eq!(waiting_reason(&p, "w").as_deref(), Some("CrashLoopBackOff"));
        assert_eq!(waiting_reason(&p, "a"), None);
        assert_eq!(terminated(&p, "t"), Some((3, "Error".to_string())));
        assert_eq!(terminated(&p, "a"), None);
        assert_eq!(running_ids(&p), ["containerd://a", "containerd://b"]);
        assert!(!all_running(&p));
        assert!(is_ready(&p));

        let empty = pod(serde_json::json!({}));
        assert_eq!(phase(&empty), "");
        assert!(!all_running(&empty), "no statuses is not all running");
        assert!(!is_ready(&empty));
        assert!(running_ids(&empty).is_empty());
    }
}
