//! Lifecycle hooks (postStart, preStop): exec in the container, HTTP GET, or sleep — the
//! kubelet's `handlerRunner`.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};

use crate::cri::Runtime;
use crate::probe::spec::http_target;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HookError {
    /// The kubelet's message for a failed exec hook.
    #[error("Exec lifecycle hook ({command:?}) for Container {container:?} in Pod {pod:?} failed - error: {error}, message: {output:?}")]
    Exec {
        command: Vec<String>,
        container: String,
        pod: String,
        error: String,
        output: String,
    },
    #[error("HTTP lifecycle hook ({url}) for Container {container:?} in Pod {pod:?} failed - error: {error}")]
    Http {
        url: String,
        container: String,
        pod: String,
        error: String,
    },
    #[error("invalid lifecycle hook for Container {container:?}: {reason}")]
    Invalid { container: String, reason: String },
}

/// `namespace/name` as the kubelet's `format.Pod` prints in hook messages.
fn pod_name(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// A failed exec hook: the kubelet's message, with the command's output (stdout then stderr)
/// capped as a probe's is ([`crate::probe::exec::MAX_OUTPUT`], 10 KiB). The event that carries
/// it is cut again at the API's 1 KiB ([`crate::events::truncate_message`]).
fn exec_failure(
    command: Vec<String>,
    container: &str,
    pod: String,
    exit_code: i32,
    stdout: &[u8],
    stderr: &[u8],
) -> HookError {
    HookError::Exec {
        error: format!("command '{}' exited with {exit_code}", command.join(" ")),
        command,
        container: container.to_string(),
        pod,
        output: crate::probe::exec::combined_output(stdout, stderr),
    }
}

/// How long a `sleep` hook of `seconds` sleeps: any int64 is valid in the API (negative is
/// zero, the longest [`crate::clock::FAR_FUTURE`]), and `timeout` cuts it short.
pub fn sleep_duration(seconds: i64, timeout: Option<Duration>) -> Duration {
    let wanted = crate::clock::seconds_from_api(seconds);
    timeout.map_or(wanted, |t| wanted.min(t))
}

/// Runs one hook handler. `timeout` bounds exec and HTTP hooks (the grace period for preStop;
/// none for postStart, as in the kubelet) and cuts a sleep short.
pub async fn run_hook(
    runtime: &dyn Runtime,
    pod: &Pod,
    container: &Container,
    container_id: &str,
    handler: &LifecycleHandler,
    pod_ip: Option<&str>,
    timeout: Option<Duration>,
) -> Result<(), HookError> {
    if let Some(exec) = &handler.exec {
        let command = exec.command.clone().unwrap_or_default();
        // ExecSync timeout 0 means "no timeout" in the CRI.
        let result = runtime
            .exec_sync(
                container_id,
                command.clone(),
                timeout.unwrap_or(Duration::ZERO),
            )
            .await;
        return match result {
            Ok(r) if r.exit_code == 0 => Ok(()),
            Ok(r) => Err(exec_failure(
                command,
                &container.name,
                pod_name(pod),
                r.exit_code,
                &r.stdout,
                &r.stderr,
            )),
            Err(e) => Err(HookError::Exec {
                command,
                container: container.name.clone(),
                pod: pod_name(pod),
                error: e.runtime_message(),
                output: String::new(),
            }),
        };
    }
    if let Some(http) = &handler.http_get {
        // The same URL and port-name rules as an httpGet probe; the host defaults to the pod IP.
        let target = http_target(http, container, pod_ip.unwrap_or("127.0.0.1")).map_err(|e| {
            HookError::Invalid {
                container: container.name.clone(),
                reason: e.to_string(),
            }
        })?;
        let client = reqwest::Client::builder()
            .no_proxy()
            .danger_accept_invalid_certs(true)
            .build()
            .map_err(|e| HookError::Invalid {
                container: container.name.clone(),
                reason: e.to_string(),
            })?;
        let mut request = client.get(target.url.as_str());
        for (name, value) in http
            .http_headers
            .iter()
            .flatten()
            .map(|h| (&h.name, &h.value))
        {
            request = request.header(name.as_str(), value.as_str());
        }
        if let Some(t) = timeout {
            request = request.timeout(t);
        }
        // Like the kubelet, only a failed request is an error; the status code is not checked.
        return match request.send().await {
            Ok(_) => Ok(()),
            Err(e) => Err(HookError::Http {
                url: target.url,
                container: container.name.clone(),
                pod: pod_name(pod),
                error: e.to_string(),
            }),
        };
    }
    if let Some(sleep) = &handler.sleep {
        tokio::time::sleep(sleep_duration(sleep.seconds, timeout)).await;
        return Ok(());
    }
    Err(HookError::Invalid {
        container: container.name.clone(),
        reason: "no exec, httpGet or sleep handler".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::exec::MAX_OUTPUT;

    #[test]
    fn exec_hook_output_is_capped_like_probe_output() {
        // (stdout, stderr, expected output)
        let cases: Vec<(Vec<u8>, Vec<u8>, String)> = vec![
            (b"out\n".to_vec(), b"err\n".to_vec(), "out\nerr\n".into()),
            (
                vec![b'o'; MAX_OUTPUT + 1],
                b"err".to_vec(),
                "o".repeat(MAX_OUTPUT),
            ),
            (
                vec![b'o'; MAX_OUTPUT - 2],
                vec![b'e'; 50 * 1024 * 1024],
                format!("{}ee", "o".repeat(MAX_OUTPUT - 2)),
            ),
            (
                Vec::new(),
                vec![b'e'; MAX_OUTPUT * 3],
                "e".repeat(MAX_OUTPUT),
            ),
        ];
        for (stdout, stderr, want) in cases {
            let error = exec_failure(
                vec!["sh".into(), "-c".into(), "exit 3".into()],
                "app",
                "web_default(u1)".into(),
                3,
                &stdout,
                &stderr,
            );
            let HookError::Exec { output, error, .. } = &error else {
                panic!("{error:?}")
            };
            assert_eq!(output.len(), want.len());
            assert_eq!(output, &want);
            assert_eq!(error, "command 'sh -c exit 3' exited with 3");
        }
    }
}
