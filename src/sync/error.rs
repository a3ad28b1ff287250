//! Why a step of a pod's sync or termination failed (the pod worker retries it).

use crate::cri;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("pod {uid}: reading runtime state: {source}")]
    Inspect {
        uid: String,
        #[source]
        source: cri::Error,
    },
    #[error("pod {uid}: {op}: {source}")]
    Runtime {
        uid: String,
        op: &'static str,
        #[source]
        source: cri::Error,
    },
    #[error("pod {uid}: creating sandbox: {message}")]
    Sandbox { uid: String, message: String },
    #[error("pod {uid}: unable to ensure pod container exists: {message}")]
    PodCgroup { uid: String, message: String },
}

impl Error {
    /// What went wrong, without the pod (an event is already about it): a runtime call's
    /// failure in gRPC-Go's words, as the kubelet's events quote it.
    pub fn cause(&self) -> String {
        match self {
            Error::Inspect { source, .. } | Error::Runtime { source, .. } => source.grpc_message(),
            Error::Sandbox { message, .. } | Error::PodCgroup { message, .. } => message.clone(),
        }
    }
}

/// The outcome of a CRI removal: gone already (NotFound) counts as removed; any other error
/// names the pod and the call.
pub fn removed(result: cri::Result<()>, uid: &str, op: &'static str) -> Result<()> {
    match result {
        Err(e) if !e.is_not_found() => Err(Error::Runtime {
            uid: uid.to_string(),
            op,
            source: e,
        }),
        _ => Ok(()),
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
