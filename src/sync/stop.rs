//! Stopping containers and pods: the kubelet's `killContainer` (grace period by precedence,
//! preStop hook counted against it, the stop signal, SIGKILL after the rest of the period) and
//! `killPodWithSyncResult` (every container in parallel, then the sandboxes).
//!
//! Every stop follows a [`Grace`] deadline. For a pod's termination the pod worker moves it
//! earlier when a shorter grace period arrives (force delete, eviction): a preStop hook still
//! running is cut off at the new end, and a container already sent its stop signal gets a new
//! StopContainer call with the shorter timeout.

use std::future::Future;
use std::time::Duration;

use futures::future::join_all;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::grace::{termination_grace_period, Grace, StopReason, TerminationOrdering};
use super::hooks::run_hook;
use super::recorder::PodEvents;
use crate::cri::containerd::parse_signal;
use crate::cri::containerd::TaskSignaller;
use crate::cri::{api, ContainerState, PodRuntime, Runtime, RuntimeContainer};
use crate::events::EventType;
use crate::podspec::{init_containers, regular_containers};

/// How often to look whether a container signalled with its own stop signal has exited.
const STOP_POLL: Duration = Duration::from_millis(100);

fn spec_of<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    regular_containers(pod)
        .iter()
        .chain(init_containers(pod))
        .find(|c| c.name == name)
}

/// The grace period one container gets.
#[derive(Debug, Clone)]
pub enum KillGrace {
    /// Its own, by precedence ([`termination_grace_period`]), or the override (in-place
    /// restart) — fixed once the kill starts.
    Own(Option<Duration>),
    /// The pod's termination deadline, shared by its containers and moved earlier by the pod
    /// worker when a shorter grace period arrives.
    Pod(Grace),
}

/// How to stop one container.
pub struct Kill<'a> {
    pub reason: StopReason,
    /// The Killing event's message; empty gives "Stopping container <name>".
    pub message: &'a str,
    pub grace: KillGrace,
    /// The pod's IP, for httpGet preStop hooks.
    pub pod_ip: Option<&'a str>,
    /// Termination order of the whole pod (sidecars after regular containers).
    pub ordering: Option<&'a TerminationOrdering>,
}

/// A StopContainer timeout, in the whole seconds the CRI takes, that does not SIGKILL before
/// `kill_at`.
fn timeout_until(kill_at: tokio::time::Instant) -> Duration {
    let left = kill_at.saturating_duration_since(tokio::time::Instant::now());
    let whole = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    Duration::from_secs(whole)
}

/// Stops containers and pods through the CRI (and containerd's task API for
/// `lifecycle.stopSignal`); owns nothing else.
#[derive(Clone)]
pub struct ContainerStopper {
    pub runtime: Arc<dyn Runtime>,
    /// Sends `lifecycle.stopSignal` (containerd's task API); `None` when the runtime offers
    /// none, and the runtime's own stop signal is used.
    pub tasks: Option<Arc<dyn TaskSignaller>>,
    /// Where Killing and FailedPreStopHook go.
    pub events: PodEvents,
}

impl ContainerStopper {
    /// Stops one container: Killing is logged, the preStop hook (if any, and if there is time)
    /// runs first and its time counts against the grace period, then the stop signal is sent and
    /// SIGKILL follows after what is left (at least 2 s, unless the grace period is 0). A
    /// deadline that moves earlier meanwhile shortens each of these steps. Returns the
    /// runtime's refusal to stop it, if any (a container already gone is stopped).
    #[tracing::instrument(
        name = "container_stop",
        skip_all,
        fields(container = %container.name, container.id = %container.id)
    )]
    pub async fn kill_container(
        &self,
        pod: &Pod,
        container: &RuntimeContainer,
        kill: Kill<'_>,
    ) -> Option<crate::cri::Error> {
        let Kill {
            reason,
            message,
            grace,
            pod_ip,
            ordering,
        } = kill;
        let spec = spec_of(pod, &container.name);
        let mut grace = match grace {
            KillGrace::Own(override_) => {
                Grace::fixed(termination_grace_period(pod, spec, reason, override_))
            }
            KillGrace::Pod(grace) => grace,
        };
        let message = if message.is_empty() {
            format!("Stopping container {}", container.name)
        } else {
            message.to_string()
        };
        let deadline = grace.current();
        tracing::info!(container = %container.name, grace_seconds = deadline.period().as_secs(), %message, "Killing");
        self.events.container(
            pod,
            &container.name,
            EventType::Normal,
            "Killing",
            message.clone(),
        );
        let pre_stop = spec.and_then(|c| c.lifecycle.as_ref()?.pre_stop.as_ref());
        // A hook still running when the grace period ends is not cancelled (the kubelet runs
        // hooks without a timeout and stops waiting, nothing more): it goes on while the
        // container gets its stop signal and the minimum window, and ends with the container.
        let mut outlived = None;
        if let (Some(c), Some(hook)) = (spec, pre_stop) {
            if !deadline.immediate && container.state == ContainerState::Running {
                let mut run = Box::pin(run_hook(
                    self.runtime.as_ref(),
                    pod,
                    c,
                    &container.id,
                    hook,
                    pod_ip,
                    None,
                ));
                // The hook gets at most the grace period.
                tokio::select! {
                    result = &mut run => if let Err(e) = result {
                        tracing::warn!(container = %container.name, error = %e, "FailedPreStopHook");
                        self.events.container(
                            pod,
                            &container.name,
                            EventType::Warning,
                            "FailedPreStopHook",
                            "PreStopHook failed",
                        );
                    },
                    _ = grace.expired() => {
                        tracing::warn!(container = %container.name, grace_seconds = grace.current().period().as_secs(), "preStop hook did not finish within the grace period");
                        outlived = Some(run);
                    }
                }
            }
        }
        let stop = async {
            // Sidecars wait for their turn (every regular container, then the sidecars after
            // them), within what is left of the grace period.
            if let Some(o) = ordering {
                o.wait_for_turn(&container.name, &mut grace).await;
            }
            let stop_signal = spec
                .and_then(|c| c.lifecycle.as_ref()?.stop_signal.as_deref())
                .and_then(parse_signal);
            let immediate = grace.current().immediate;
            let refused =
                if let (Some(signal), Some(tasks), false) = (stop_signal, &self.tasks, immediate) {
                    self.stop_with_signal(container, signal, &mut grace, tasks.as_ref())
                        .await
                } else {
                    self.stop_container(&container.id, &container.name, &mut grace)
                        .await
                };
            if let Some(o) = ordering {
                o.container_terminated(&container.name);
            }
            refused
        };
        match outlived {
            None => stop.await,
            Some(hook) => finish_while_polling(stop, hook).await,
        }
    }

    /// `lifecycle.stopSignal`: the CRI of containerd 1.6 always sends the image's STOPSIGNAL, so
    /// nodelet sends the pod's signal itself, waits until the SIGKILL time for the exit, then
    /// has the runtime SIGKILL what is left.
    async fn stop_with_signal(
        &self,
        container: &RuntimeContainer,
        signal: i32,
        grace: &mut Grace,
        tasks: &dyn crate::cri::containerd::TaskSignaller,
    ) -> Option<crate::cri::Error> {
        tracing::info!(container = %container.name, signal, "sending the container's stopSignal");
        let signalled = tokio::time::Instant::now();
        if let Err(e) = tasks.signal(&container.id, signal).await {
            if !e.is_not_found() {
                tracing::warn!(container = %container.name, error = %e, "sending stopSignal; stopping with the runtime's signal");
            }
            return self
                .stop_container(&container.id, &container.name, grace)
                .await;
        }
        loop {
            let kill_at = grace.current().kill_at(signalled);
            let now = tokio::time::Instant::now();
            if now >= kill_at {
                break;
            }
            match self.runtime.container_status(&container.id).await {
                Ok(s) if s.state == api::ContainerState::ContainerRunning as i32 => {}
                _ => break,
            }
            tokio::select! {
                _ = tokio::time::sleep(STOP_POLL.min(kill_at - now)) => {}
                _ = grace.moved() => {}
            }
        }
        self.stop_container(
            &container.id,
            &container.name,
            &mut Grace::fixed(Duration::ZERO),
        )
        .await
    }

    /// StopContainer with what is left of the grace period; when the deadline moves earlier
    /// while the call waits, a new call with the shorter timeout replaces it (the runtime then
    /// SIGKILLs at the earlier time; the first call is cancelled).
    async fn stop_container(
        &self,
        id: &str,
        name: &str,
        grace: &mut Grace,
    ) -> Option<crate::cri::Error> {
        let signalled = tokio::time::Instant::now();
        let mut kill_at = grace.current().kill_at(signalled);
        let mut timeout = timeout_until(kill_at);
        let mut call = self.runtime.stop_container(id, timeout);
        let result = loop {
            tokio::select! {
                result = &mut call => break result,
                _ = grace.moved() => {
                    let at = grace.current().kill_at(signalled);
                    if at < kill_at {
                        kill_at = at;
                        timeout = timeout_until(kill_at);
                        tracing::info!(container = %name, timeout_seconds = timeout.as_secs(), "grace period shortened; stopping again");
                        call = self.runtime.stop_container(id, timeout);
                    }
                }
            }
        };
        match result {
            Ok(()) => {
                tracing::info!(container = %name, timeout_seconds = timeout.as_secs(), "Stopped container");
                None
            }
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                tracing::warn!(container = %name, error = %e, "stopping container");
                Some(e)
            }
        }
    }

    /// Stops every live container of the pod in parallel (each with its preStop hook, all within
    /// `grace`), then every ready sandbox. Returns what the runtime refused, in the kubelet's
    /// words (see [`kill_pod_error`]).
    pub async fn stop_pod(&self, pod: &Pod, runtime: &PodRuntime, grace: &Grace) -> Vec<String> {
        let pod_ip = runtime.sandbox().and_then(|s| s.ips.first().cloned());
        let live: Vec<&RuntimeContainer> = runtime
            .containers
            .iter()
            .filter(|c| {
                matches!(
                    c.state,
                    ContainerState::Running | ContainerState::Unknown | ContainerState::Created
                )
            })
            .collect();
        let names: Vec<&str> = live.iter().map(|c| c.name.as_str()).collect();
        let ordering = TerminationOrdering::new(pod, &names);
        let stops = live.iter().map(|c| {
            self.kill_container(
                pod,
                c,
                Kill {
                    reason: StopReason::PodTermination,
                    message: "",
                    grace: KillGrace::Pod(grace.clone()),
                    pod_ip: pod_ip.as_deref(),
                    ordering: Some(&ordering),
                },
            )
        });
        let mut refused: Vec<String> = join_all(stops)
            .await
            .into_iter()
            .zip(&names)
            .filter_map(|(e, name)| Some(sync_failure("KillContainer", name, &e?)))
            .collect();
        let uid = crate::podspec::pod_uid(pod);
        for sandbox in runtime.sandboxes.iter().filter(|s| s.ready) {
            match self.runtime.stop_pod_sandbox(&sandbox.id).await {
                Ok(()) => tracing::info!(sandbox.id = %sandbox.id, "Stopped pod sandbox"),
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    tracing::warn!(sandbox.id = %sandbox.id, error = %e, "stopping sandbox");
                    refused.push(sync_failure("KillPodSandbox", uid, &e));
                }
            }
        }
        refused
    }
}

/// Runs `work` to its end while still polling `beside` (whose result no longer matters), then
/// drops `beside` if it has not ended: a preStop hook's exec outlives the grace period until
/// its container is stopped, and is cancelled then.
async fn finish_while_polling<T>(work: impl Future<Output = T>, beside: impl Future) -> T {
    tokio::pin!(work);
    tokio::pin!(beside);
    let mut beside_done = false;
    loop {
        tokio::select! {
            biased;
            out = &mut work => return out,
            _ = &mut beside, if !beside_done => beside_done = true,
        }
    }
}

/// One failed step of a pod's kill as the kubelet's `PodSyncResult` words it:
/// `failed to "KillContainer" for "main" with KillContainerError: "rpc error: …"`.
fn sync_failure(action: &str, target: &str, error: &crate::cri::Error) -> String {
    format!(
        "failed to {action:?} for {target:?} with {action}Error: {:?}",
        error.grpc_message()
    )
}

/// The message of the kubelet's `FailedKillPod` event for what the runtime refused: one
/// failure as it is, several as Go's error aggregate lists them; `None` when nothing was.
pub fn kill_pod_error(refused: &[String]) -> Option<String> {
    match refused {
        [] => None,
        [one] => Some(format!("error killing pod: {one}")),
        many => Some(format!("error killing pod: [{}]", many.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(op: &'static str, message: &str) -> crate::cri::Error {
        crate::cri::Error::Call {
            op,
            target: "c1".into(),
            status: tonic::Status::unknown(message),
        }
    }

    #[test]
    fn a_refused_kill_reads_as_the_kubelets_failed_kill_pod() {
        let container = sync_failure(
            "KillContainer",
            "main",
            &refused("StopContainer", "task \"c1\" stuck"),
        );
        assert_eq!(
            container,
            r#"failed to "KillContainer" for "main" with KillContainerError: "rpc error: code = Unknown desc = task \"c1\" stuck""#
        );
        let sandbox = sync_failure("KillPodSandbox", "u1", &refused("StopPodSandbox", "busy"));
        assert_eq!(
            sandbox,
            r#"failed to "KillPodSandbox" for "u1" with KillPodSandboxError: "rpc error: code = Unknown desc = busy""#
        );
        let cases: [(&[String], Option<String>); 3] = [
            (&[], None),
            (
                std::slice::from_ref(&container),
                Some(format!("error killing pod: {container}")),
            ),
            (
                &[container.clone(), sandbox.clone()],
                Some(format!("error killing pod: [{container}, {sandbox}]")),
            ),
        ];
        for (refused, want) in cases {
            assert_eq!(kill_pod_error(refused), want, "{refused:?}");
        }
    }
}
