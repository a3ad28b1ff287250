//! The little of containerd's native API the CRI lacks: sending a chosen signal to a container's
//! task. containerd 1.6's CRI stops containers with the image's STOPSIGNAL only; the pod's
//! `lifecycle.stopSignal` is delivered through this instead.

use async_trait::async_trait;
use containerd_client::services::v1::tasks_client::TasksClient;
use containerd_client::services::v1::KillRequest;
use tonic::transport::Channel;

use super::{Error, Result};

/// Sends a signal to a container's main process.
#[async_trait]
pub trait TaskSignaller: Send + Sync + 'static {
    async fn signal(&self, container_id: &str, signal: i32) -> Result<()>;
}

#[derive(Clone)]
pub struct ContainerdTasks {
    client: TasksClient<Channel>,
    namespace: String,
}

impl ContainerdTasks {
    pub fn connect(endpoint: &str, namespace: &str) -> Result<Self> {
        Ok(ContainerdTasks {
            client: TasksClient::new(super::remote::unix_channel(endpoint)?),
            namespace: namespace.to_string(),
        })
    }
}

#[async_trait]
impl TaskSignaller for ContainerdTasks {
    async fn signal(&self, container_id: &str, signal: i32) -> Result<()> {
        let mut request = tonic::Request::new(KillRequest {
            container_id: container_id.to_string(),
            exec_id: String::new(),
            signal: u32::try_from(signal).unwrap_or(15),
            all: false,
        });
        if let Ok(ns) = self.namespace.parse() {
            request.metadata_mut().insert("containerd-namespace", ns);
        }
        request.set_timeout(std::time::Duration::from_secs(10));
        self.client
            .clone()
            .kill(request)
            .await
            .map(|_| ())
            .map_err(|status| Error::Call {
                op: "containerd_task_kill",
                target: container_id.to_string(),
                status,
            })
    }
}

/// A signal name as the API spells it (`SIGTERM`, `SIGUSR1`, `SIGRTMIN+3`, `SIGRTMAX-1`) → its
/// number on this platform.
pub fn parse_signal(name: &str) -> Option<i32> {
    if let Some(n) = name.strip_prefix("SIGRTMIN+") {
        let n: i32 = n.parse().ok()?;
        let sig = libc::SIGRTMIN() + n;
        return (sig <= libc::SIGRTMAX()).then_some(sig);
    }
    if let Some(n) = name.strip_prefix("SIGRTMAX-") {
        let n: i32 = n.parse().ok()?;
        let sig = libc::SIGRTMAX() - n;
        return (sig >= libc::SIGRTMIN()).then_some(sig);
    }
    match name {
        "SIGRTMIN" => return Some(libc::SIGRTMIN()),
        "SIGRTMAX" => return Some(libc::SIGRTMAX()),
        _ => {}
    }
    name.parse::<nix::sys::signal::Signal>()
        .ok()
        .map(|s| s as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names() {
        let cases = [
            ("SIGTERM", Some(15)),
            ("SIGKILL", Some(9)),
            ("SIGQUIT", Some(3)),
            ("SIGUSR1", Some(10)),
            ("SIGRTMIN", Some(libc::SIGRTMIN())),
            ("SIGRTMIN+2", Some(libc::SIGRTMIN() + 2)),
            ("SIGRTMAX-1", Some(libc::SIGRTMAX() - 1)),
            ("SIGRTMIN+99", None),
            ("TERM", None),
            ("", None),
        ];
        for (name, want) in cases {
            assert_eq!(parse_signal(name), want, "{name}");
        }
    }
}
