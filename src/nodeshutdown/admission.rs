//! The node shutdown manager's `Admit` (the kubelet's shutdown admit handler): while the node
//! shuts down, no pod of any source is admitted.

use crate::lifecycle::admission::{AdmitResult, PodAdmitAttributes, PodAdmitHandler, Rejection};
use crate::lifecycle::shutdown::{
    ShutdownView, NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE, NODE_SHUTDOWN_NOT_ADMITTED_REASON,
};

/// Pure: the verdict for any pod, given whether the node is marked shutting down.
pub fn admit_node_shutdown(shutting_down: bool) -> AdmitResult {
    if shutting_down {
        return Err(Rejection::new(
            NODE_SHUTDOWN_NOT_ADMITTED_REASON,
            NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE.to_string(),
        ));
    }
    Ok(())
}

impl PodAdmitHandler for ShutdownView {
    fn admit(&self, _attrs: &PodAdmitAttributes<'_>) -> AdmitResult {
        admit_node_shutdown(self.is_shutting_down())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_admitted_while_the_node_shuts_down() {
        assert_eq!(admit_node_shutdown(false), Ok(()));
        assert_eq!(
            admit_node_shutdown(true),
            Err(Rejection {
                reason: "NodeShutdown".into(),
                message: "Pod was rejected as the node is shutting down.".into(),
            })
        );
    }
}
