//! What the pod worker keeps about one pod between its syncs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::plan::PodPlan;
use crate::backoff::Backoff;
use crate::status::{RestartInPlace, StartFailure};

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
}

/// How long to wait before retrying a sync whose starts failed with no backoff of their own
/// (the kubelet's pod worker error backoff).
pub const SYNC_ERROR_RETRY: Duration = Duration::from_secs(10);
