//! The `exec` handler (`pkg/probe/exec` over the CRI's `ExecSync`): exit code 0 is a success;
//! a non-zero exit is a failure whose message is the command's output; a timeout is a
//! failure; any other runtime error is a prober error (the attempt is thrown away).

use std::time::Duration;

use super::Attempt;
use crate::cri::{self, Runtime};

/// The kubelet keeps at most this much of the combined output (`maxReadLength`).
pub const MAX_OUTPUT: usize = 10 * 1024;

/// Runs the command in the container.
///
/// The runtime enforces `timeout` and answers DeadlineExceeded; nodelet also stops waiting at
/// `timeout` itself, so a runtime that hangs cannot stall the worker.
pub async fn probe(
    runtime: &dyn Runtime,
    container_id: &str,
    command: &[String],
    timeout: Duration,
) -> Attempt {
    let call = runtime.exec_sync(container_id, command.to_vec(), timeout);
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(resp)) => {
            let output = combined_output(&resp.stdout, &resp.stderr);
            if resp.exit_code == 0 {
                Attempt::Success(output)
            } else {
                Attempt::Failure(output)
            }
        }
        Ok(Err(e)) if is_deadline_exceeded(&e) => Attempt::Failure(timed_out(command)),
        Ok(Err(e)) => Attempt::Error(rpc_error_text(&e)),
        Err(_) => Attempt::Failure(timed_out(command)),
    }
}

/// stdout then stderr (the kubelet appends them), cut at 10 KiB.
pub fn combined_output(stdout: &[u8], stderr: &[u8]) -> String {
    let mut data = Vec::with_capacity((stdout.len() + stderr.len()).min(MAX_OUTPUT));
    for part in [stdout, stderr] {
        let room = MAX_OUTPUT - data.len();
        data.extend_from_slice(&part[..part.len().min(room)]);
    }
    String::from_utf8_lossy(&data).into_owned()
}

/// The CRI client's timeout error text: `command "<cmd>" timed out`.
pub fn timed_out(command: &[String]) -> String {
    format!("command {:?} timed out", command.join(" "))
}

fn is_deadline_exceeded(err: &cri::Error) -> bool {
    matches!(err, cri::Error::Call { status, .. } if status.code() == tonic::Code::DeadlineExceeded)
}

/// A gRPC error as Go prints it: `rpc error: code = NotFound desc = ...`.
pub fn rpc_error_text(err: &cri::Error) -> String {
    match err {
        cri::Error::Call { status, .. } => grpc_status_text(status),
        other => other.to_string(),
    }
}

pub fn grpc_status_text(status: &tonic::Status) -> String {
    format!(
        "rpc error: code = {} desc = {}",
        go_code_name(status.code()),
        status.message()
    )
}

/// `codes.Code.String()` of grpc-go.
pub fn go_code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_output_table() {
        let long = vec![b'a'; MAX_OUTPUT + 5];
        let cases: Vec<(&str, Vec<u8>, Vec<u8>, String)> = vec![
            (
                "both",
                b"out\n".to_vec(),
                b"err\n".to_vec(),
                "out\nerr\n".into(),
            ),
            ("stdout only", b"ok".to_vec(), vec![], "ok".into()),
            ("empty", vec![], vec![], String::new()),
            (
                "stdout fills the limit",
                long.clone(),
                b"err".to_vec(),
                "a".repeat(MAX_OUTPUT),
            ),
            (
                "stderr cut at the limit",
                vec![b'o'; MAX_OUTPUT - 2],
                b"err".to_vec(),
                format!("{}er", "o".repeat(MAX_OUTPUT - 2)),
            ),
        ];
        for (name, stdout, stderr, want) in cases {
            assert_eq!(combined_output(&stdout, &stderr), want, "{name}");
        }
    }

    #[test]
    fn messages_table() {
        assert_eq!(
            timed_out(&["sh".into(), "-c".into(), "sleep 10".into()]),
            "command \"sh -c sleep 10\" timed out"
        );
        let err = cri::Error::Call {
            op: "exec_sync",
            target: "c1".into(),
            status: tonic::Status::not_found("container \"c1\" not found"),
        };
        assert_eq!(
            rpc_error_text(&err),
            "rpc error: code = NotFound desc = container \"c1\" not found"
        );
        assert_eq!(go_code_name(tonic::Code::Cancelled), "Canceled");
    }
}
