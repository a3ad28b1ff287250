//! Whether the node is shutting down: the node shutdown manager sets the mark, admission and
//! the node status read it.

use tokio::sync::watch;

/// A pod rejected while the node shuts down.
pub const NODE_SHUTDOWN_NOT_ADMITTED_REASON: &str = "NodeShutdown";
pub const NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE: &str =
    "Pod was rejected as the node is shutting down.";
/// The `Ready=False` message while the node shuts down (the kubelet's `ShutdownStatus` error).
pub const NODE_SHUTTING_DOWN: &str = "node is shutting down";

/// Whether the node is shutting down, for admission and the node status.
#[derive(Debug, Clone)]
pub struct ShutdownView {
    shutting_down: watch::Receiver<bool>,
}

impl ShutdownView {
    /// A view that never reports a shutdown (no manager).
    pub fn none() -> ShutdownView {
        ShutdownView {
            shutting_down: watch::channel(false).1,
        }
    }

    /// A view following a mark kept elsewhere: the node shutdown manager's, or a component
    /// test's stand-in for it.
    pub fn following(shutting_down: watch::Receiver<bool>) -> ShutdownView {
        ShutdownView { shutting_down }
    }

    pub fn is_shutting_down(&self) -> bool {
        *self.shutting_down.borrow()
    }

    /// Resolves when the mark changes (never, for [`ShutdownView::none`]).
    pub async fn changed(&mut self) {
        if self.shutting_down.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
