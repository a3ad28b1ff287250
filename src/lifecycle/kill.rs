//! `kill_pod`: the one seam that ends a pod — the kubelet's `KillPodFunc`.
//!
//! Whoever decides that a pod must end (the eviction manager, node shutdown,
//! `activeDeadlineSeconds`, admission) holds a [`PodKiller`] and calls
//! [`PodKiller::kill_pod`] with the pod, an optional grace period override and what the final
//! status must say ([`StatusMutation`]). The pod's worker does the rest:
//!
//! * The pod is terminated in place (its containers stopped, sandbox stopped, what they left
//!   kept until it is deleted or removed) and is never started again.
//! * The grace period is the override when given (against a deletion grace period the API
//!   server set, only when shorter), else the pod's own. A termination already under way is
//!   shortened when the new request ends sooner — containers still stopping get the earlier
//!   deadline, a running preStop hook is cut off at it — and never lengthened.
//! * The mutation is applied once, to the final status (after the containers stopped, so a
//!   terminal phase never shows while a container may still run). Mutations of several kills
//!   chain, the later one winning where both say something, as the kubelet chains its
//!   `PodStatusFunc`s. A pod that already finished keeps its final status.
//!
//! `kill_pod` returns at once; the [`KillHandle`] it gives resolves when the pod is
//! terminated, for a caller that must wait for the resources to be freed (eviction waits for
//! the pod's cleanup before it looks at the node again).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

use crate::status::StatusMutation;

/// Ends pods through their workers. Implemented by `crate::pod::PodWorkers`; a component that
/// ends pods holds an `Arc<dyn PodKiller>`, which its tests can replace with a recorder.
pub trait PodKiller: Send + Sync {
    /// Ends `pod` (by UID; a pod without a worker is not running here, and nothing is done) with
    /// `grace_override` (`None`: the pod's own; zero: SIGKILL at once, no preStop hook) and
    /// `status` applied to its final status. Returns at once.
    fn kill_pod(
        &self,
        pod: Arc<Pod>,
        grace_override: Option<Duration>,
        status: StatusMutation,
    ) -> KillHandle;
}

/// Tells when a killed pod is terminated: its containers stopped and its final status
/// published.
#[derive(Debug, Clone)]
pub struct KillHandle {
    terminated: watch::Receiver<bool>,
}

impl KillHandle {
    /// A handle on this signal (true = terminated); the workers make them, fakes too.
    pub fn new(terminated: watch::Receiver<bool>) -> Self {
        KillHandle { terminated }
    }

    pub fn is_terminated(&self) -> bool {
        *self.terminated.borrow()
    }

    /// Resolves once the pod is terminated (at once if it already was), or its worker is gone.
    pub async fn terminated(mut self) {
        let _ = self.terminated.wait_for(|t| *t).await;
    }
}
