//! Graceful node shutdown (the kubelet's `pkg/kubelet/nodeshutdown`): a systemd-logind delay
//! inhibitor lock holds the shutdown while nodelet ends the pods, lowest priority first.
//!
//! * [`groups`]: the periods from the configuration, pods by priority group, each pod's
//!   grace period (pure).
//! * [`logind`]: the [`logind::Logind`] trait, the drop-in raising `InhibitDelayMaxSec`;
//!   [`dbus`]: its zbus implementation.
//! * [`state`]: the `graceful_node_shutdown_state` file.
//! * [`manager`]: the loop: lock, signal, sequence; it marks the node shutting down, which
//!   admission and the node status read through `crate::lifecycle::shutdown::ShutdownView`.
//! * [`admission`]: the shutdown manager's `Admit`: while the node shuts down, no pod is
//!   admitted.

pub mod admission;
pub mod dbus;
pub mod groups;
pub mod logind;
pub mod manager;
pub mod state;

/// The final status of a pod ended by a node shutdown (the kubelet's `nodeShutdownReason`).
pub const NODE_SHUTDOWN_REASON: &str = "Terminated";
pub const NODE_SHUTDOWN_MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
