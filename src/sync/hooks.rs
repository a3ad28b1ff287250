//! Lifecycle hooks (postStart, preStop): exec in the container, HTTP GET, or sleep — the
//! kubelet's `handlerRunner`.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};

use crate::cri::Runtime;

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
            Ok(r) => Err(HookError::Exec {
                command,
                container: container.name.clone(),
                pod: pod_name(pod),
                error: format!(
                    "command '{}' exited with {}",
                    exec.command.clone().unwrap_or_default().join(" "),
                    r.exit_code
                ),
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&r.stdout),
                    String::from_utf8_lossy(&r.stderr)
                ),
            }),
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
        let url = hook_url(http, container, pod_ip).map_err(|reason| HookError::Invalid {
            container: container.name.clone(),
            reason,
        })?;
        let client = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .build()
            .map_err(|e| HookError::Invalid {
                container: container.name.clone(),
                reason: e.to_string(),
            })?;
        let mut request = client.get(url.clone());
        for h in http.http_headers.iter().flatten() {
            request = request.header(h.name.as_str(), h.value.as_str());
        }
        if let Some(t) = timeout {
            request = request.timeout(t);
        }
        // Like the kubelet, only a failed request is an error; the status code is not checked.
        return match request.send().await {
            Ok(_) => Ok(()),
            Err(e) => Err(HookError::Http {
                url,
                container: container.name.clone(),
                pod: pod_name(pod),
                error: e.to_string(),
            }),
        };
    }
    if let Some(sleep) = &handler.sleep {
        let wanted = Duration::from_secs(u64::try_from(sleep.seconds).unwrap_or(0));
        tokio::time::sleep(timeout.map_or(wanted, |t| wanted.min(t))).await;
        return Ok(());
    }
    Err(HookError::Invalid {
        container: container.name.clone(),
        reason: "no exec, httpGet or sleep handler".into(),
    })
}

/// The URL of an httpGet hook: scheme (default HTTP), host (default the pod IP), port by number
/// or by the name of one of the container's ports, path (default `/`).
pub fn hook_url(
    http: &k8s_openapi::api::core::v1::HTTPGetAction,
    container: &Container,
    pod_ip: Option<&str>,
) -> Result<String, String> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let scheme = http
        .scheme
        .as_deref()
        .unwrap_or("HTTP")
        .to_ascii_lowercase();
    let host = match http.host.as_deref().filter(|h| !h.is_empty()).or(pod_ip) {
        Some(h) => h.to_string(),
        None => return Err("no host and no pod IP".into()),
    };
    let port = match &http.port {
        IntOrString::Int(p) => *p,
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port)
            .ok_or_else(|| format!("port {name:?} is not a named port of the container"))?,
    };
    if !(1..=65535).contains(&port) {
        return Err(format!("invalid port {port}"));
    }
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host
    };
    let path = http.path.as_deref().unwrap_or("/");
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    Ok(format!("{scheme}://{host}:{port}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPGetAction};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    #[test]
    fn hook_url_table() {
        let container = Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                name: Some("web".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        };
        let action = |host: Option<&str>,
                      port: IntOrString,
                      path: Option<&str>,
                      scheme: Option<&str>| HTTPGetAction {
            host: host.map(String::from),
            port,
            path: path.map(String::from),
            scheme: scheme.map(String::from),
            ..Default::default()
        };
        let cases = [
            (
                action(None, IntOrString::Int(80), None, None),
                Some("10.0.0.5"),
                Ok("http://10.0.0.5:80/".to_string()),
            ),
            (
                action(None, IntOrString::String("web".into()), Some("hook"), None),
                Some("10.0.0.5"),
                Ok("http://10.0.0.5:8080/hook".to_string()),
            ),
            (
                action(
                    Some("example.test"),
                    IntOrString::Int(443),
                    Some("/x?y=1"),
                    Some("HTTPS"),
                ),
                None,
                Ok("https://example.test:443/x?y=1".to_string()),
            ),
            (
                action(None, IntOrString::Int(80), None, None),
                Some("fd00::1"),
                Ok("http://[fd00::1]:80/".to_string()),
            ),
            (
                action(None, IntOrString::String("nope".into()), None, None),
                Some("10.0.0.5"),
                Err("port \"nope\" is not a named port of the container".to_string()),
            ),
            (
                action(None, IntOrString::Int(80), None, None),
                None,
                Err("no host and no pod IP".to_string()),
            ),
        ];
        for (a, ip, want) in cases {
            assert_eq!(hook_url(&a, &container, ip), want, "{a:?}");
        }
    }
}
