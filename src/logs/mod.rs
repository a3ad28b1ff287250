//! Container logs as the kubelet's `/containerLogs/{namespace}/{pod}/{container}` serves them
//! (what `kubectl logs` reads through the API server): query options, the choice of container
//! instance (current or `previous`), and the reader of containerd's CRI log files with
//! `tailLines`, `limitBytes`, `sinceSeconds`/`sinceTime`, `timestamps` and `follow`.
//!
//! The HTTP server owns routing, authentication and the pod lookup (404 `pod "x" does not exist`
//! and `container "c" not found in pod "x"` are its answers); it calls, in order,
//! [`LogOptions::from_query`], [`find_container_log`] (or [`log_container_id`] +
//! [`container_log`] when it has the pod's status), then [`stream_logs`], and answers an error
//! with [`LogError::status_code`].

mod follow;
mod lines;
pub mod links;
mod locate;
mod options;
mod parse;
pub mod paths;
mod reader;
#[cfg(test)]
mod reader_tests;
pub mod rotation;
mod tail;

use crate::places::Cap;
pub use follow::{DirWatch, FollowPermit, LogFollowers, MAX_FOLLOWERS};
pub use lines::{Assembled, LineAssembler, LineFormatter, LogLine, Output, JOIN_CAP};
pub use locate::{
    container_log, find_container_log, log_container_id, status_from_instances, ContainerLog,
};
pub use options::{LogOptions, LogStream};
pub use parse::{fixed_timestamp, parse_cri_line, CriEntry, ParseError, Stream};
pub use reader::{stream_logs, stream_logs_with, CHANNEL_DEPTH, CHUNK, MAX_FILE_LINE};
pub use tail::{tail_range, tail_start_offset, TailRange, TAIL_LINE_CAP};

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A query value that does not decode (the kubelet answers 400).
    #[error("query parameter {param}={value:?}: {reason}")]
    BadQuery {
        param: &'static str,
        value: String,
        reason: String,
    },
    /// Options that decode but are out of range (`ValidatePodLogOptions`; the kubelet answers 422).
    #[error("invalid log options: {errors}")]
    InvalidOptions { errors: String },
    /// The container has no log to read in the asked state; the message is the kubelet's
    /// (`previous terminated container "x" in pod "y" not found`, `... is waiting to start: ...`).
    #[error("{message}")]
    ContainerUnavailable { message: String },
    /// The runtime did not answer.
    #[error("{what}: {source}")]
    Runtime {
        what: String,
        #[source]
        source: crate::cri::Error,
    },
    #[error("container {container_id} has no log path")]
    NoLogPath { container_id: String },
    /// A cap on followers is full (the HTTP server answers 429): [`MAX_FOLLOWERS`] on the
    /// node, fewer per namespace and per pod.
    #[error("too many log streams are being followed {}; try again later", follower_cap(.cap))]
    TooManyFollowers { cap: Cap },
}

fn follower_cap(cap: &Cap) -> String {
    match cap {
        Cap::Pod(n) => format!("from this pod (at most {n} per pod)"),
        Cap::Namespace(n) => format!("in this namespace (at most {n} per namespace)"),
        Cap::Node(n) => format!("on this node (at most {n})"),
    }
}

impl LogError {
    /// The HTTP status the kubelet answers with: 400 for an undecodable query and for every
    /// "no log to read" case (`kubectl logs` shows `Error from server (BadRequest): ...`), 422 for
    /// invalid options, 500 when the runtime fails, 429 when too many follow already.
    pub fn status_code(&self) -> u16 {
        match self {
            LogError::BadQuery { .. } | LogError::ContainerUnavailable { .. } => 400,
            LogError::InvalidOptions { .. } => 422,
            LogError::Runtime { .. } | LogError::NoLogPath { .. } => 500,
            LogError::TooManyFollowers { .. } => 429,
        }
    }
}
