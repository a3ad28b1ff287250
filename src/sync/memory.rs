//! What the pod worker keeps about one pod between its syncs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::plan::PodPlan;
use crate::backoff::Backoff;
use crate::cri::RuntimeContainer;
use crate::status::{RestartInPlace, StartFailure};

/// Raises each container's carried restart count (`PodMemory::restart_count_base`) to the
/// highest of its instances in `containers`; a container not carried yet starts from its
/// instance's count. What a container's next instance counts on from once these instances are
/// removed: by an in-place restart, or with a pod that comes back after its removal.
pub fn carry_restart_counts(base: &mut BTreeMap<String, i32>, containers: &[RuntimeContainer]) {
    for c in containers {
        let count = base.entry(c.name.clone()).or_insert(c.restart_count);
        *count = (*count).max(c.restart_count);
    }
}

/// Image pull backoff, as the kubelet's (10 s doubling to 300 s).
pub const IMAGE_BACKOFF: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(300));

/// Per-pod memory the worker keeps between syncs.
#[derive(Debug)]
pub struct PodMemory {
    /// The kubelet's "reason cache": why the last start of each container failed.
    pub start_failures: BTreeMap<String, StartFailure>,
    /// Restart backoff, keyed per container (CrashLoopBackOff).
    pub restart_backoff: Backoff,
    /// Image pull backoff, keyed per image (ImagePullBackOff).
    pub image_backoff: Backoff,
    /// Where the pod is in a `RestartAllContainers` restart in place.
    pub restart_in_place: RestartInPlace,
    /// Restart counts of containers whose instances an in-place restart removed.
    pub restart_count_base: BTreeMap<String, i32>,
    /// When nodelet first saw the pod, for the pod start duration metric.
    pub first_seen: Option<tokio::time::Instant>,
    pub start_recorded: bool,
    /// The pod's cgroup was configured by this nodelet (before its sandbox, or on the first
    /// sync of a pod adopted after a restart, which applies the current settings to it).
    pub cgroup_configured: bool,
    /// What the pod's current spec implies, derived once per spec version.
    pub plan: Option<Arc<PodPlan>>,
    /// How many plans were derived for the pod: one per spec version it was synced with.
    pub plans_derived: u32,
    /// Held by a sync around the runtime calls it must not abandon half-way; the pod worker
    /// waits for them before it cuts a sync short for a termination.
    pub runtime_writes: RuntimeWrites,
    /// The first sync asked for the reported status of an adopted static pod (or had no
    /// need to): later syncs start from the status published since.
    pub reported_status_asked: bool,
}

/// The runtime calls of a sync that must finish once begun: RunPodSandbox, and a container's
/// CreateContainer with its StartContainer. A sync cut short inside one of them could leave an
/// object the termination that follows does not see: it lists the runtime first, and a sandbox
/// or container that appears afterwards (or a created container that a StartContainer still
/// in flight starts after containerd's StopContainer, which does nothing to a container that
/// is not running yet) would outlive the pod. Everything else a sync waits for (image pulls,
/// postStart hooks, StopContainer with a grace period, volumes) may be abandoned: the
/// termination stops what runs, from the runtime's listing.
///
/// A sync holds a shared guard ([`Self::enter`]) around such a call; the pod worker takes the
/// exclusive one ([`Self::quiesce`]) before dropping the sync. tokio's lock is fair, so once
/// the worker waits, a sync reaching the next such call waits too — at a safe point — and is
/// dropped there.
#[derive(Debug, Clone, Default)]
pub struct RuntimeWrites(Arc<tokio::sync::RwLock<()>>);

impl RuntimeWrites {
    /// Marks a runtime call that must not be abandoned, for as long as the guard lives.
    pub async fn enter(&self) -> tokio::sync::OwnedRwLockReadGuard<()> {
        self.0.clone().read_owned().await
    }

    /// Waits until no such call is under way (and keeps new ones from starting while held).
    pub async fn quiesce(&self) -> tokio::sync::OwnedRwLockWriteGuard<()> {
        self.0.clone().write_owned().await
    }
}

/// How long to wait before retrying a sync whose starts failed with no backoff of their own
/// (the kubelet's pod worker error backoff).
pub const SYNC_ERROR_RETRY: Duration = Duration::from_secs(10);
