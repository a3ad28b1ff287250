//! Graceful node shutdown (the kubelet's `pkg/kubelet/nodeshutdown`): a systemd-logind delay
//! inhibitor lock holds the shutdown while nodelet ends the pods, lowest priority first.
//!
//! * [`groups`]: the periods from the configuration, pods by priority group, each pod's
//!   grace period (pure).
//! * [`logind`]: the [`logind::Logind`] trait, the drop-in raising `InhibitDelayMaxSec`;
//!   [`dbus`]: its zbus implementation.
//! * [`state`]: the `graceful_node_shutdown_state` file.
//! * [`manager`]: the loop: lock, signal, sequence; [`manager::ShutdownView`] tells admission
//!   and the node status that the node is shutting down.

pub mod dbus;
pub mod groups;
pub mod logind;
pub mod manager;
pub mod state;

pub use manager::{ShutdownManager, ShutdownView};

/// The final status of a pod ended by a node shutdown (the kubelet's `nodeShutdownReason`).
pub const NODE_SHUTDOWN_REASON: &str = "Terminated";
pub const NODE_SHUTDOWN_MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// A pod rejected while the node shuts down.
pub const NODE_SHUTDOWN_NOT_ADMITTED_REASON: &str = "NodeShutdown";
pub const NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE: &str =
    "Pod was rejected as the node is shutting down.";
/// The `Ready=False` message while the node shuts down (the kubelet's `ShutdownStatus` error).
pub const NODE_SHUTTING_DOWN: &str = "node is shutting down";
