//! Which pods run here, as the loops that act on them need to know it.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

/// The pods running on the node that eviction may rank and node shutdown ends (the kubelet's
/// `GetActivePods`: admitted, not terminal).
pub trait ActivePods: Send + Sync {
    fn active_pods(&self) -> Vec<Arc<Pod>>;
}

/// The UIDs of the pods nodelet has a worker for: their runtime objects and directories are the
/// worker's, beyond the dead-container policy of garbage collection.
pub trait LivePods: Send + Sync + 'static {
    fn live_pods(&self) -> HashSet<String>;
}
