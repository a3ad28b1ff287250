//! Container probes: startup, liveness and readiness (`pkg/kubelet/prober` and `pkg/probe`).
//!
//! One tokio task per (container instance, probe kind) probes on its period. Workers are bound
//! to one container ID for their whole life: a restarted container gets new workers and fresh
//! results, so a result can never be attributed to the wrong instance. The pod worker drives
//! them through [`ProbeManager::sync_pod`] and reads the results back when it builds status
//! (`readiness`, `startup`) and decides what to kill (`failed`); it is told that something
//! changed through the `notify` callback, which fires only when a published result changes.
//!
//! The pure parts are table-tested: timings and handler resolution ([`spec`]), the threshold
//! state machine ([`threshold`]), the redirect rule and status verdict ([`http`]).

pub mod exec;
pub mod grpc;
pub mod http;
mod manager;
mod prober;
pub mod spec;
pub mod tcp;
pub mod threshold;
mod worker;

#[cfg(test)]
mod handler_tests;
#[cfg(test)]
mod manager_tests;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Probe};

pub use manager::ProbeManager;
pub use spec::PROBE_USER_AGENT;
/// A worker's timing: the first probe's instant and an adopted container's spread (for the
/// fuzz target that drives a pod spec's extreme integers through them).
pub use worker::{adoption_spread, first_probe_at};

/// Event reason for a failed or errored probe attempt (`events.ContainerUnhealthy`).
pub const REASON_UNHEALTHY: &str = "Unhealthy";
/// Event reason for a probe that succeeded with a warning (`events.ContainerProbeWarning`).
pub const REASON_PROBE_WARNING: &str = "ProbeWarning";
/// Both probe events are warnings.
pub const EVENT_TYPE_WARNING: &str = "Warning";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

impl ProbeKind {
    pub const ALL: [ProbeKind; 3] = [
        ProbeKind::Startup,
        ProbeKind::Liveness,
        ProbeKind::Readiness,
    ];

    /// The name the kubelet uses in event messages ("Liveness probe failed: ...").
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Startup => "Startup",
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
        }
    }

    /// The container's probe of this kind, if it has one.
    pub fn spec(self, container: &Container) -> Option<&Probe> {
        match self {
            ProbeKind::Startup => container.startup_probe.as_ref(),
            ProbeKind::Liveness => container.liveness_probe.as_ref(),
            ProbeKind::Readiness => container.readiness_probe.as_ref(),
        }
    }

    /// The result before the probe has run: a readiness-probed container is not ready until it
    /// passes, a liveness-probed one is not killed over a probe that has not run, and a
    /// startup-probed one is neither started nor failed.
    pub fn initial_result(self) -> ProbeResult {
        match self {
            ProbeKind::Readiness => ProbeResult::Failure,
            ProbeKind::Liveness => ProbeResult::Success,
            ProbeKind::Startup => ProbeResult::Unknown,
        }
    }
}

impl std::fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    Success,
    Failure,
    Unknown,
}

/// A published result that changed: what the pod worker must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeUpdate {
    pub pod_uid: String,
    pub container_name: String,
    pub container_id: String,
    pub kind: ProbeKind,
    pub result: ProbeResult,
}

/// An event to record on the pod (involved object: the container's field path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeEvent {
    pub pod_uid: String,
    pub pod_namespace: String,
    pub pod_name: String,
    pub container_name: String,
    /// Which list of the spec holds the container (`initContainers` for a sidecar), for the
    /// event's `involvedObject.fieldPath`.
    pub container_kind: crate::podspec::ContainerKind,
    pub container_id: String,
    pub kind: ProbeKind,
    /// Always [`EVENT_TYPE_WARNING`].
    pub event_type: &'static str,
    /// [`REASON_UNHEALTHY`] or [`REASON_PROBE_WARNING`].
    pub reason: &'static str,
    /// The kubelet's wording, e.g. "Liveness probe failed: HTTP probe failed with statuscode: 500".
    pub message: String,
}

/// A running container instance the pod worker sees this sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningContainer {
    pub name: String,
    /// The runtime's container ID (bare, without `containerd://`).
    pub id: String,
    /// When the container started; `initialDelaySeconds` counts from here.
    pub started_at: Timestamp,
    /// The pod's primary IP (the host's for host-network pods); network probes without a host
    /// dial it. `None` dials the local host.
    pub pod_ip: Option<String>,
}

/// What one probe attempt returned (`probe.Result` with its output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    Success(String),
    /// A success the user should hear about (an HTTP redirect that was not followed).
    Warning(String),
    Failure(String),
    /// The prober could not run the probe (bad port name, runtime error): the kubelet records
    /// an event and throws the attempt away instead of counting it.
    Error(String),
}

/// Why a probe's handler could not be resolved; the text is the kubelet's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    #[error("port {name:?} not found")]
    PortNotFound { name: String },
    #[error("invalid port number: {port}")]
    InvalidPort { port: i64 },
    #[error("missing probe handler")]
    Missing,
}

/// A loopback port that refuses connections for as long as the returned socket lives: bound but
/// not listening, so no other test can bind the number in the meantime.
#[cfg(test)]
pub(crate) fn closed_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(([127, 0, 0, 1], 0).into())
        .expect("bind a loopback port");
    let port = socket.local_addr().expect("bound address").port();
    (socket, port)
}
