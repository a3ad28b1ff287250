//! Events about a pod and its containers, as the sync parts record them.

use k8s_openapi::api::core::v1::Pod;

use crate::events::{container_ref, pod_ref, EventRecorder, EventType};
use crate::podspec::container_kind;

/// The node's event recorder, with the pod and container references filled in.
#[derive(Clone)]
pub struct PodEvents(pub EventRecorder);

impl PodEvents {
    /// Records an event about the pod.
    pub fn pod(&self, pod: &Pod, type_: EventType, reason: &str, message: impl Into<String>) {
        self.0.record(&pod_ref(pod), type_, reason, message);
    }

    /// Records an event about one container of the pod.
    pub fn container(
        &self,
        pod: &Pod,
        container: &str,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let kind = container_kind(pod, container);
        self.0
            .record(&container_ref(pod, container, kind), type_, reason, message);
    }
}
