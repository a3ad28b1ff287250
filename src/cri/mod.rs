//! The Container Runtime Interface: the generated CRI v1 types, the small traits the rest of
//! nodelet talks to (`Runtime`, `ImageService`), a gRPC client over a unix socket, an in-memory
//! fake for component tests, and the runtime-side view of one pod (`PodRuntime`).

pub mod containerd;
pub mod exits;
/// The in-memory runtime for component tests (feature `test-util`).
#[cfg(any(test, feature = "test-util"))]
pub mod fake;
pub mod features;
pub mod health;
pub mod labels;
pub mod model;
pub mod remote;
pub mod runtime_config;

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;

pub use model::{ContainerState, PodRuntime, RuntimeContainer, RuntimeSandbox};

/// Generated CRI v1 messages and the gRPC client (`runtime.v1` package).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod api {
    tonic::include_proto!("runtime.v1");
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid runtime endpoint {endpoint:?}: {reason}")]
    Endpoint { endpoint: String, reason: String },
    #[error("CRI {op} {target}: {status}")]
    Call {
        op: &'static str,
        target: String,
        #[source]
        status: tonic::Status,
    },
    #[error("CRI {op} {target}: runtime returned no {what}")]
    Missing {
        op: &'static str,
        target: String,
        what: &'static str,
    },
}

/// gRPC-Go's name of a status code (`codes.Code.String()`): tonic's variant names, but for
/// `OK` and `Canceled`.
fn go_code_name(code: tonic::Code) -> String {
    match code {
        tonic::Code::Ok => "OK".to_string(),
        tonic::Code::Cancelled => "Canceled".to_string(),
        other => format!("{other:?}"),
    }
}

impl Error {
    /// The error as the kubelet's events show a CRI failure: a call's status in gRPC-Go's words
    /// (`rpc error: code = Unknown desc = …`), anything else as it is.
    pub fn grpc_message(&self) -> String {
        match self {
            Error::Call { status, .. } => format!(
                "rpc error: code = {} desc = {}",
                go_code_name(status.code()),
                status.message()
            ),
            other => other.to_string(),
        }
    }

    /// True when the runtime said the object does not exist (already removed).
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::Call { status, .. } => {
                status.code() == tonic::Code::NotFound
                    || status.message().contains("not found")
                    || status.message().contains("does not exist")
            }
            _ => false,
        }
    }

    /// True when the runtime does not have the call (an older CRI version).
    pub fn is_unimplemented(&self) -> bool {
        matches!(self, Error::Call { status, .. } if status.code() == tonic::Code::Unimplemented)
    }

    /// The runtime's own message without our context (used for container status reasons).
    pub fn runtime_message(&self) -> String {
        match self {
            Error::Call { status, .. } => status.message().to_string(),
            other => other.to_string(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The runtime half of the CRI: sandboxes and containers.
#[async_trait]
pub trait Runtime: Send + Sync + 'static {
    async fn version(&self) -> Result<api::VersionResponse>;
    /// The conditions of a (non-verbose) `Status` answer: `RuntimeReady` and `NetworkReady`
    /// (the kubelet's `updateRuntimeUp` reads both).
    async fn runtime_conditions(&self) -> Result<Vec<api::RuntimeCondition>>;
    /// RunPodSandbox with `runtime_handler` (a RuntimeClass's handler; `""`: the runtime's
    /// default).
    async fn run_pod_sandbox(
        &self,
        config: api::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String>;
    async fn stop_pod_sandbox(&self, sandbox_id: &str) -> Result<()>;
    async fn remove_pod_sandbox(&self, sandbox_id: &str) -> Result<()>;
    async fn pod_sandbox_status(&self, sandbox_id: &str) -> Result<api::PodSandboxStatus>;
    /// The `info` map of a verbose `PodSandboxStatus` (containerd: key `info`, a JSON document
    /// with the sandbox task's live `processStatus`).
    async fn pod_sandbox_info(&self, sandbox_id: &str) -> Result<HashMap<String, String>>;
    async fn list_pod_sandbox(
        &self,
        filter: Option<api::PodSandboxFilter>,
    ) -> Result<Vec<api::PodSandbox>>;
    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String>;
    async fn start_container(&self, container_id: &str) -> Result<()>;
    /// Stops a container: the stop signal, then SIGKILL after `timeout` (0 = at once).
    async fn stop_container(&self, container_id: &str, timeout: Duration) -> Result<()>;
    async fn remove_container(&self, container_id: &str) -> Result<()>;
    async fn list_containers(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Result<Vec<api::Container>>;
    async fn container_status(&self, container_id: &str) -> Result<api::ContainerStatus>;
    /// UpdateContainerResources: a running container's new resources (in-place resize).
    async fn update_container_resources(
        &self,
        container_id: &str,
        linux: api::LinuxContainerResources,
    ) -> Result<()>;
    /// UpdatePodSandboxResources: the sandbox's new overhead and summed resources, after an
    /// in-place resize rewrote the pod cgroup (for the runtime's NRI plugins; best effort, and
    /// runtimes before CRI v1.33 answer Unimplemented).
    async fn update_pod_sandbox_resources(
        &self,
        sandbox_id: &str,
        overhead: api::LinuxContainerResources,
        resources: api::LinuxContainerResources,
    ) -> Result<()>;
    async fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<api::ExecSyncResponse>;
}

/// The CRI calls that hand out a session on the runtime's streaming server (`kubectl exec`,
/// `attach`, `port-forward`): each returns the URL the client's upgraded connection is relayed to.
#[async_trait]
pub trait StreamingRuntime: Send + Sync + 'static {
    async fn exec(&self, request: api::ExecRequest) -> Result<String>;
    async fn attach(&self, request: api::AttachRequest) -> Result<String>;
    async fn port_forward(&self, request: api::PortForwardRequest) -> Result<String>;
}

/// The CRI calls the Summary API needs (`stats`): a container's verbose status (where its
/// cgroup is), the image filesystem, and the runtime's per-container stats (writable layer).
#[async_trait]
pub trait StatsRuntime: Send + Sync + 'static {
    /// The `info` map of a verbose `ContainerStatus` (JSON documents by key; containerd's
    /// `info` holds the OCI runtime spec).
    async fn container_info(
        &self,
        container_id: &str,
    ) -> Result<std::collections::HashMap<String, String>>;
    async fn image_fs_info(&self) -> Result<api::ImageFsInfoResponse>;
    async fn list_container_stats(
        &self,
        filter: Option<api::ContainerStatsFilter>,
    ) -> Result<Vec<api::ContainerStats>>;
}

/// The CRI calls node housekeeping needs (`gc`, `logs::rotation`): the runtime's own status
/// (containerd's holds its CRI configuration, with the sandbox image) and reopening a container's
/// log file after it was renamed away.
#[async_trait]
pub trait HousekeepingRuntime: Send + Sync + 'static {
    /// The `info` map of a verbose `Status` (containerd: `config` is its CRI configuration as
    /// JSON, `sandboxImage` among it).
    async fn runtime_info(&self) -> Result<std::collections::HashMap<String, String>>;
    /// The handlers and runtime-wide features a (non-verbose) `Status` answer states; none
    /// from a runtime that does not report them (containerd 1.6).
    async fn runtime_feature_set(&self) -> Result<features::RuntimeFeatureSet>;
    /// `ReopenContainerLog`: the runtime closes the container's log file and opens its path
    /// again (creating a new file there).
    async fn reopen_container_log(&self, container_id: &str) -> Result<()>;
}

/// The image half of the CRI.
#[async_trait]
pub trait ImageService: Send + Sync + 'static {
    /// `None` when the image is not present on the node.
    async fn image_status(&self, image: &str) -> Result<Option<api::Image>>;
    /// Pulls an image (with registry credentials, if any) and returns its reference
    /// (digest or ID).
    async fn pull_image(
        &self,
        image: &str,
        auth: Option<api::AuthConfig>,
        sandbox_config: Option<api::PodSandboxConfig>,
    ) -> Result<String>;
    async fn list_images(&self) -> Result<Vec<api::Image>>;
    async fn remove_image(&self, image: &str) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_message_reads_as_grpc_go_writes_it() {
        let call = |status| Error::Call {
            op: "RunPodSandbox",
            target: "default/web".into(),
            status,
        };
        let cases = [
            (
                call(tonic::Status::unknown("failed to setup network")),
                "rpc error: code = Unknown desc = failed to setup network",
            ),
            (
                call(tonic::Status::cancelled("gone")),
                "rpc error: code = Canceled desc = gone",
            ),
            (
                call(tonic::Status::deadline_exceeded("slow")),
                "rpc error: code = DeadlineExceeded desc = slow",
            ),
            (
                call(tonic::Status::new(tonic::Code::Ok, "")),
                "rpc error: code = OK desc = ",
            ),
            (
                Error::Missing {
                    op: "RunPodSandbox",
                    target: "default/web".into(),
                    what: "sandbox id",
                },
                "CRI RunPodSandbox default/web: runtime returned no sandbox id",
            ),
        ];
        for (error, want) in cases {
            assert_eq!(error.grpc_message(), want);
        }
    }
}
