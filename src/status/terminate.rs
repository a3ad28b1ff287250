//! The last word on a pod's status when its termination is over: the kubelet's status manager
//! `TerminatePod`. A container the runtime cannot show as terminated — it never ran (a missing
//! ConfigMap, an image it may not pull, a volume that never came), or the runtime lost it — must
//! not leave the pod Pending for ever: the final status reports it terminated with
//! `ContainerStatusUnknown`, and the phase becomes `Failed`. Without this a deleted pod that never
//! started stays in the API, Terminating: the final DELETE waits for a terminal phase.
//!
//! The kubelet's rules, in order:
//! * once the pod has initialized (no init containers, a regular container left waiting once, the
//!   last init container completed, or the last sidecar started), every regular container not
//!   terminated is reported terminated with `ContainerStatusUnknown` (exit code 137);
//! * init containers are, except the suffix of those still waiting that never ran (but always at
//!   least the first);
//! * a Pending or Running phase becomes Failed, except for static pods (the kubelet's
//!   TODO(#116484): their phase is left as it was).

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodStatus,
};

use super::CONTAINER_STATUS_UNKNOWN;
use crate::podspec::qos::is_static_pod;
use crate::podspec::{is_sidecar, Phase};

/// The message of a container reported terminated because nothing showed how it ended.
pub const TERMINATED_UNKNOWN_MESSAGE: &str =
    "The container could not be located when the pod was terminated";

/// Applies the kubelet's `TerminatePod` to `status`, the pod's final status.
pub fn terminate_pod_status(pod: &Pod, status: &mut PodStatus) {
    if has_pod_initialized(pod, status) {
        for c in status.container_statuses.iter_mut().flatten() {
            mark_unknown_unless_terminated(c);
        }
    }
    if let Some(init) = status.init_container_statuses.as_mut() {
        let attempted = attempted_prefix(init);
        for c in init.iter_mut().take(attempted) {
            mark_unknown_unless_terminated(c);
        }
    }
    if !is_static_pod(pod) && !Phase::is_terminal_status(Some(status)) {
        status.phase = Some(Phase::Failed.as_str().to_string());
    }
}

fn mark_unknown_unless_terminated(c: &mut ContainerStatus) {
    if c.state.as_ref().is_some_and(|s| s.terminated.is_some()) {
        return;
    }
    c.state = Some(ContainerState {
        terminated: Some(ContainerStateTerminated {
            reason: Some(CONTAINER_STATUS_UNKNOWN.to_string()),
            message: Some(TERMINATED_UNKNOWN_MESSAGE.to_string()),
            exit_code: 137,
            ..Default::default()
        }),
        ..Default::default()
    });
}

fn waiting(c: &ContainerStatus) -> bool {
    // A status without a state reads as waiting, as the API's default.
    c.state
        .as_ref()
        .is_none_or(|s| s.waiting.is_some() || (s.running.is_none() && s.terminated.is_none()))
}

fn ever_terminated(c: &ContainerStatus) -> bool {
    c.last_state
        .as_ref()
        .is_some_and(|s| s.terminated.is_some())
}

fn completed(state: Option<&ContainerState>) -> bool {
    state
        .and_then(|s| s.terminated.as_ref())
        .is_some_and(|t| t.exit_code == 0)
}

/// The kubelet's `hasPodInitialized`: whether the pod ever got past its init containers, so
/// that its regular containers' missing states are failures rather than "never started".
fn has_pod_initialized(pod: &Pod, status: &PodStatus) -> bool {
    let init_specs: &[Container] = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    if init_specs.is_empty() {
        return true;
    }
    if status
        .container_statuses
        .iter()
        .flatten()
        .any(|c| ever_terminated(c) || !waiting(c))
    {
        return true;
    }
    let Some(last) = status
        .init_container_statuses
        .as_ref()
        .and_then(|s| s.last())
    else {
        return false;
    };
    let Some(spec) = init_specs.iter().find(|c| c.name == last.name) else {
        return false;
    };
    if is_sidecar(spec) {
        last.state.as_ref().is_some_and(|s| s.running.is_some()) && last.started == Some(true)
    } else {
        completed(last.last_state.as_ref()) || completed(last.state.as_ref())
    }
}

/// The kubelet's `initializedContainers`: how many init container statuses, from the first, are
/// not part of the trailing run of those waiting that never ran — at least one.
fn attempted_prefix(init: &[ContainerStatus]) -> usize {
    init.iter()
        .rposition(|c| !waiting(c) || ever_terminated(c))
        .map_or(init.len().min(1), |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerStateRunning, ContainerStateWaiting, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn container(name: &str, sidecar: bool) -> Container {
        Container {
            name: name.into(),
            restart_policy: sidecar.then(|| "Always".to_string()),
            ..Default::default()
        }
    }

    fn pod(init: &[(&str, bool)], regular: &[&str], static_pod: bool) -> Pod {
        let annotations = static_pod.then(|| {
            BTreeMap::from([(
                "kubernetes.io/config.source".to_string(),
                "file".to_string(),
            )])
        });
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                annotations,
                ..Default::default()
            },
            spec: Some(PodSpec {
                init_containers: (!init.is_empty())
                    .then(|| init.iter().map(|(n, s)| container(n, *s)).collect()),
                containers: regular.iter().map(|n| container(n, false)).collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A container status from a short spelling: `w:Reason` waiting, `r` running, `r+` running
    /// and started, `t:N` terminated with exit code N; `/t:N` adds a last state terminated.
    fn cs(name: &str, spelling: &str) -> ContainerStatus {
        let (now, last) = spelling
            .split_once('/')
            .map_or((spelling, None), |(a, b)| (a, Some(b)));
        let state = |s: &str| -> ContainerState {
            if let Some(reason) = s.strip_prefix("w:") {
                ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(reason.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            } else if s.starts_with('r') {
                ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                }
            } else if let Some(code) = s.strip_prefix("t:") {
                ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: code.parse().unwrap(),
                        reason: Some(if code == "0" { "Completed" } else { "Error" }.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            } else {
                ContainerState::default()
            }
        };
        ContainerStatus {
            name: name.into(),
            state: Some(state(now)),
            last_state: Some(last.map(state).unwrap_or_default()),
            started: Some(now == "r+"),
            ..Default::default()
        }
    }

    /// One status back in the same short form: `unknown` for ContainerStatusUnknown.
    fn spell(c: &ContainerStatus) -> String {
        let s = c.state.as_ref().unwrap();
        if let Some(t) = &s.terminated {
            if t.reason.as_deref() == Some(CONTAINER_STATUS_UNKNOWN) {
                assert_eq!(t.exit_code, 137);
                assert_eq!(t.message.as_deref(), Some(TERMINATED_UNKNOWN_MESSAGE));
                return "unknown".into();
            }
            return format!("t:{}", t.exit_code);
        }
        if s.running.is_some() {
            return "r".into();
        }
        format!(
            "w:{}",
            s.waiting
                .as_ref()
                .and_then(|w| w.reason.clone())
                .unwrap_or_default()
        )
    }

    #[test]
    fn terminate_pod_table() {
        type Case<'a> = (
            &'a str,
            Pod,
            &'a str,
            Vec<ContainerStatus>,
            Vec<ContainerStatus>,
            &'a str,
            Vec<&'a str>,
            Vec<&'a str>,
        );
        // (name, pod, phase, init statuses, regular statuses, want phase, want init, want regular)
        let cases: Vec<Case> =
            vec![
            (
                "never started: a ConfigMap missing",
                pod(&[], &["main"], false),
                "Pending",
                vec![],
                vec![cs("main", "w:CreateContainerConfigError")],
                "Failed",
                vec![],
                vec!["unknown"],
            ),
            (
                "never started: an image it may not pull, two containers",
                pod(&[], &["a", "b"], false),
                "Pending",
                vec![],
                vec![cs("a", "w:ErrImageNeverPull"), cs("b", "w:ContainerCreating")],
                "Failed",
                vec![],
                vec!["unknown", "unknown"],
            ),
            (
                "ran and was stopped: states kept, phase already terminal",
                pod(&[], &["main"], false),
                "Failed",
                vec![],
                vec![cs("main", "t:137")],
                "Failed",
                vec![],
                vec!["t:137"],
            ),
            (
                "succeeded stays succeeded",
                pod(&[], &["main"], false),
                "Succeeded",
                vec![],
                vec![cs("main", "t:0")],
                "Succeeded",
                vec![],
                vec!["t:0"],
            ),
            (
                "running with one lost container: Failed",
                pod(&[], &["a", "b"], false),
                "Running",
                vec![],
                vec![cs("a", "t:0"), cs("b", "r")],
                "Failed",
                vec![],
                vec!["t:0", "unknown"],
            ),
            (
                "in back-off: waiting after a run",
                pod(&[], &["main"], false),
                "Running",
                vec![],
                vec![cs("main", "w:CrashLoopBackOff/t:1")],
                "Failed",
                vec![],
                vec!["unknown"],
            ),
            (
                "init never started: only the first init container is failed, regular ones wait",
                pod(&[("i1", false), ("i2", false)], &["main"], false),
                "Pending",
                vec![cs("i1", "w:ErrImageNeverPull"), cs("i2", "w:PodInitializing")],
                vec![cs("main", "w:PodInitializing")],
                "Failed",
                vec!["unknown", "w:PodInitializing"],
                vec!["w:PodInitializing"],
            ),
            (
                "second init container waiting after the first completed",
                pod(&[("i1", false), ("i2", false)], &["main"], false),
                "Pending",
                vec![cs("i1", "t:0"), cs("i2", "w:CreateContainerConfigError")],
                vec![cs("main", "w:PodInitializing")],
                "Failed",
                vec!["t:0", "w:CreateContainerConfigError"],
                vec!["w:PodInitializing"],
            ),
            (
                "init container running when deleted",
                pod(&[("i1", false), ("i2", false)], &["main"], false),
                "Pending",
                vec![cs("i1", "t:0"), cs("i2", "r")],
                vec![cs("main", "w:PodInitializing")],
                "Failed",
                vec!["t:0", "unknown"],
                vec!["w:PodInitializing"],
            ),
            (
                "last init container completed: the pod initialized",
                pod(&[("i1", false)], &["main"], false),
                "Pending",
                vec![cs("i1", "t:0")],
                vec![cs("main", "w:CreateContainerConfigError")],
                "Failed",
                vec!["t:0"],
                vec!["unknown"],
            ),
            (
                "last init is a started sidecar: the pod initialized",
                pod(&[("log", true)], &["main"], false),
                "Pending",
                vec![cs("log", "r+")],
                vec![cs("main", "w:CreateContainerConfigError")],
                "Failed",
                vec!["unknown"],
                vec!["unknown"],
            ),
            (
                "last init is a sidecar not yet started: not initialized",
                pod(&[("log", true)], &["main"], false),
                "Pending",
                vec![cs("log", "r")],
                vec![cs("main", "w:PodInitializing")],
                "Failed",
                vec!["unknown"],
                vec!["w:PodInitializing"],
            ),
            (
                "a static pod keeps its phase (the kubelet's TODO #116484), containers still end",
                pod(&[], &["main"], true),
                "Pending",
                vec![],
                vec![cs("main", "w:ErrImageNeverPull")],
                "Pending",
                vec![],
                vec!["unknown"],
            ),
            (
                "no status at all (rejected before it ran)",
                pod(&[], &["main"], false),
                "",
                vec![],
                vec![],
                "Failed",
                vec![],
                vec![],
            ),
        ];
        for (name, pod, phase, init, regular, want_phase, want_init, want_regular) in cases {
            let mut status = PodStatus {
                phase: (!phase.is_empty()).then(|| phase.to_string()),
                init_container_statuses: (!init.is_empty()).then_some(init),
                container_statuses: (!regular.is_empty()).then_some(regular),
                ..Default::default()
            };
            terminate_pod_status(&pod, &mut status);
            assert_eq!(status.phase.as_deref(), Some(want_phase), "{name}: phase");
            let got_init: Vec<String> = status
                .init_container_statuses
                .iter()
                .flatten()
                .map(spell)
                .collect();
            let got_regular: Vec<String> = status
                .container_statuses
                .iter()
                .flatten()
                .map(spell)
                .collect();
            assert_eq!(got_init, want_init, "{name}: init containers");
            assert_eq!(got_regular, want_regular, "{name}: containers");
        }
    }

    #[test]
    fn attempted_prefix_table() {
        let cases: [(&[&str], usize); 6] = [
            (&[], 0),
            (&["w:A"], 1),
            (&["w:A", "w:B"], 1),
            (&["t:0", "w:B"], 1),
            (&["t:0", "r"], 2),
            (&["t:0", "w:CrashLoopBackOff/t:1", "w:C"], 2),
        ];
        for (spellings, want) in cases {
            let statuses: Vec<ContainerStatus> = spellings
                .iter()
                .enumerate()
                .map(|(i, s)| cs(&format!("c{i}"), s))
                .collect();
            assert_eq!(attempted_prefix(&statuses), want, "{spellings:?}");
        }
    }
}
