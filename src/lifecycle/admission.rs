//! Pod admission as the kubelet's `lifecycle.PodAdmitHandler`: before a new pod runs, the pod
//! manager asks each handler in turn (eviction's pressure check, node shutdown's, then the
//! node's predicates) and the first rejection ends the pod before it ever starts.

use k8s_openapi::api::core::v1::Pod;

/// Why a pod is not admitted: the final status' reason (`Evicted`, `NodeShutdown`,
/// `OutOfcpu`, ...) and message, as the kubelet's `PodAdmitResult`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

impl Rejection {
    pub fn new(reason: &str, message: String) -> Rejection {
        Rejection {
            reason: reason.to_string(),
            message,
        }
    }
}

/// A handler's verdict: `Ok(())` admits.
pub type AdmitResult = Result<(), Rejection>;

/// What a handler judges (the kubelet's `PodAdmitAttributes`): the new pod and the pods already
/// admitted on the node and not finished.
#[derive(Debug, Clone, Copy)]
pub struct PodAdmitAttributes<'a> {
    pub pod: &'a Pod,
    pub other_pods: &'a [&'a Pod],
}

/// One admission check. Pure against the state the handler follows: it decides, the pod
/// manager acts (Failed status, Warning event).
pub trait PodAdmitHandler: Send + Sync {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> AdmitResult;
}
