//! A CRI v1 client over a unix socket (tonic), with a tracing span, a request deadline and
//! Prometheus metrics on every call.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use tonic::transport::Channel;
use tracing::Instrument;

use super::api::{
    image_service_client::ImageServiceClient, runtime_service_client::RuntimeServiceClient,
};
use super::{api, Error, HousekeepingRuntime, ImageService, Result, Runtime};
use crate::metrics::{metrics, Metrics};

/// `unix:///run/containerd/containerd.sock` or a bare absolute path → the socket path.
pub fn socket_path(endpoint: &str) -> Result<PathBuf> {
    crate::unix_grpc::socket_path(endpoint).map_err(endpoint_error)
}

/// A channel to a unix socket; it connects lazily and reconnects after the runtime restarts.
pub fn unix_channel(endpoint: &str) -> Result<Channel> {
    crate::unix_grpc::unix_channel(endpoint, Duration::from_secs(5)).map_err(endpoint_error)
}

fn endpoint_error(e: crate::unix_grpc::EndpointError) -> Error {
    Error::Endpoint {
        endpoint: e.endpoint,
        reason: "only unix sockets are supported (unix:///path/to.sock)".into(),
    }
}

/// The CRI client nodelet uses in production.
#[derive(Clone)]
pub struct RemoteRuntime {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    /// Deadline for every call (`runtimeRequestTimeout`); StopContainer adds its own timeout,
    /// and image pulls are given a longer one, as the kubelet does.
    timeout: Duration,
}

impl RemoteRuntime {
    pub fn connect(
        runtime_endpoint: &str,
        image_endpoint: &str,
        timeout: Duration,
    ) -> Result<Self> {
        let runtime_channel = unix_channel(runtime_endpoint)?;
        let image_channel = if image_endpoint == runtime_endpoint || image_endpoint.is_empty() {
            runtime_channel.clone()
        } else {
            unix_channel(image_endpoint)?
        };
        // containerd's CRI replies can exceed tonic's 4 MiB default with many containers.
        let max = 16 * 1024 * 1024;
        Ok(RemoteRuntime {
            runtime: RuntimeServiceClient::new(runtime_channel).max_decoding_message_size(max),
            images: ImageServiceClient::new(image_channel).max_decoding_message_size(max),
            timeout,
        })
    }

    fn request<T>(&self, message: T, extra: Duration) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.timeout.saturating_add(extra));
        request
    }

    /// `RuntimeConfig` (asked once at start, as the kubelet does).
    pub async fn runtime_config(&self) -> Result<api::RuntimeConfigResponse> {
        let mut c = self.runtime.clone();
        let req = self.request(api::RuntimeConfigRequest {}, Duration::ZERO);
        observe("runtime_config", "", c.runtime_config(req)).await
    }
}

/// Runs one CRI call inside a span, recording its duration and errors.
async fn observe<T, F>(op: &'static str, target: &str, call: F) -> Result<T>
where
    F: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
{
    let span = tracing::debug_span!("cri", op, target);
    let labels = Metrics::operation(op);
    let started = std::time::Instant::now();
    let result = call.instrument(span).await;
    metrics()
        .runtime_operations_duration_seconds
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    match result {
        Ok(response) => Ok(response.into_inner()),
        Err(status) => {
            metrics()
                .runtime_operations_errors_total
                .get_or_create(&labels)
                .inc();
            tracing::debug!(op, target, code = ?status.code(), message = status.message(), "CRI call failed");
            Err(Error::Call {
                op,
                target: target.to_string(),
                status,
            })
        }
    }
}

fn missing(op: &'static str, target: &str, what: &'static str) -> Error {
    Error::Missing {
        op,
        target: target.to_string(),
        what,
    }
}

#[async_trait]
impl Runtime for RemoteRuntime {
    async fn version(&self) -> Result<api::VersionResponse> {
        let mut c = self.runtime.clone();
        let req = self.request(
            api::VersionRequest {
                version: "v1".into(),
            },
            Duration::ZERO,
        );
        observe("version", "", c.version(req)).await
    }

    async fn runtime_conditions(&self) -> Result<Vec<api::RuntimeCondition>> {
        let mut c = self.runtime.clone();
        let req = self.request(api::StatusRequest { verbose: false }, Duration::ZERO);
        let status = observe("status", "", c.status(req)).await?;
        Ok(status.status.map(|s| s.conditions).unwrap_or_default())
    }

    async fn run_pod_sandbox(
        &self,
        config: api::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        let target = config
            .metadata
            .as_ref()
            .map(|m| format!("{}/{}", m.namespace, m.name))
            .unwrap_or_default();
        let mut c = self.runtime.clone();
        let req = self.request(
            api::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: runtime_handler.to_string(),
            },
            Duration::ZERO,
        );
        let resp = observe("run_podsandbox", &target, c.run_pod_sandbox(req)).await?;
        Ok(resp.pod_sandbox_id)
    }

    async fn stop_pod_sandbox(&self, sandbox_id: &str) -> Result<()> {
        let mut c = self.runtime.clone();
        let req = self.request(
            api::StopPodSandboxRequest {
                pod_sandbox_id: sandbox_id.into(),
            },
            Duration::ZERO,
        );
        observe("stop_podsandbox", sandbox_id, c.stop_pod_sandbox(req)).await?;
        Ok(())
    }

    async fn remove_pod_sandbox(&self, sandbox_id: &str) -> Result<()> {
        let mut c = self.runtime.clone();
        let req = self.request(
            api::RemovePodSandboxRequest {
                pod_sandbox_id: sandbox_id.into(),
            },
            Duration::ZERO,
        );
        observe("remove_podsandbox", sandbox_id, c.remove_pod_sandbox(req)).await?;
        Ok(())
    }

    async fn pod_sandbox_status(&self, sandbox_id: &str) -> Result<api::PodSandboxStatus> {
        let mut c = self.runtime.clone();
        let req = self.request(
            api::PodSandboxStatusRequest {
                pod_sandbox_id: sandbox_id.into(),
                verbose: false,
            },
            Duration::ZERO,
        );
        let resp = observe("podsandbox_status", sandbox_id, c.pod_sandbox_status(req)).await?;
        resp.status
            .ok_or_else(|| missing("podsandbox_status", sandbox_id, "status"))
    }

    async fn pod_sandbox_info(
        &self,
        sandbox_id: &str,
    ) -> Result<std::collections::HashMap<String, String>> {
        let mut c = self.runtime.clone();
        let req = self.request(
            api::PodSandboxStatusRequest {
                pod_sandbox_id: sandbox_id.into(),
                verbose: true,
            },
            Duration::ZERO,
        );
        Ok(
            observe("podsandbox_status", sandbox_id, c.pod_sandbox_status(req))
                .await?
                .info,
        )
    }

    async fn list_pod_sandbox(
        &self,
        filter: Option<api::PodSandboxFilter>,
    ) -> Result<Vec<api::PodSandbox>> {
        let mut c = self.runtime.clone();
        let req = self.request(api::ListPodSandboxRequest { filter }, Duration::ZERO);
        Ok(observe("list_podsandbox", "", c.list_pod_sandbox(req))
            .await?
            .items)
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String> {
        let target = config
            .metadata
            .as_ref()
            .map(|m| format!("{sandbox_id}/{}", m.name))
            .unwrap_or_default();
        let mut c = self.runtime.clone();
        let req = self.request(
            api::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.into(),
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            },
            Duration::ZERO,
        );
        Ok(
            observe("create_container", &target, c.create_container(req))
                .await?
                .container_id,
        )
    }

    async fn start_container(&self, container_id: &str) -> Result<()> {
        let mut c = self.runtime.clone();
        let req = self.request(
            api::StartContainerRequest {
                container_id: container_id.into(),
            },
            Duration::ZERO,
        );
        observe("start_container", container_id, c.start_container(req)).await?;
        Ok(())
    }

    async fn stop_container(&self, container_id: &str, timeout: Duration) -> Result<()> {
        let mut c = self.runtime.clone();
        // The call may legitimately take the whole grace period; give it that on top.
        let req = self.request(
            api::StopContainerRequest {
                container_id: container_id.into(),
                timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            },
            timeout,
        );
        observe("stop_container", container_id, c.stop_container(req)).await?;
        Ok(())
    }

    async fn remove_container(&self, container_id: &str) -> Result<()> {
        let mut c = self.runtime.clone();
        let req = self.request(
            api::RemoveContainerRequest {
                container_id: container_id.into(),
            },
            Duration::ZERO,
        );
        observe("remove_container", container_id, c.remove_container(req)).await?;
        Ok(())
    }

    async fn list_containers(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Result<Vec<api::Container>> {
        let mut c = self.runtime.clone();
        let req = self.request(api::ListContainersRequest { filter }, Duration::ZERO);
        Ok(observe("list_containers", "", c.list_containers(req))
            .await?
            .containers)
    }

    async fn container_status(&self, container_id: &str) -> Result<api::ContainerStatus> {
        let mut c = self.runtime.clone();
        let req = self.request(
            api::ContainerStatusRequest {
                container_id: container_id.into(),
                verbose: false,
            },
            Duration::ZERO,
        );
        let resp = observe("container_status", container_id, c.container_status(req)).await?;
        resp.status
            .ok_or_else(|| missing("container_status", container_id, "status"))
    }

    async fn update_container_resources(
        &self,
        container_id: &str,
        linux: api::LinuxContainerResources,
    ) -> Result<()> {
        let mut c = self.runtime.clone();
        let req = self.request(
            api::UpdateContainerResourcesRequest {
                container_id: container_id.into(),
                linux: Some(linux),
                ..Default::default()
            },
            Duration::ZERO,
        );
        observe(
            "update_container_resources",
            container_id,
            c.update_container_resources(req),
        )
        .await?;
        Ok(())
    }

    async fn update_pod_sandbox_resources(
        &self,
        sandbox_id: &str,
        overhead: api::LinuxContainerResources,
        resources: api::LinuxContainerResources,
    ) -> Result<()> {
        let mut c = self.runtime.clone();
        let req = self.request(
            api::UpdatePodSandboxResourcesRequest {
                pod_sandbox_id: sandbox_id.into(),
                overhead: Some(overhead),
                resources: Some(resources),
                ..Default::default()
            },
            Duration::ZERO,
        );
        observe(
            "update_pod_sandbox_resources",
            sandbox_id,
            c.update_pod_sandbox_resources(req),
        )
        .await?;
        Ok(())
    }

    async fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<api::ExecSyncResponse> {
        let mut c = self.runtime.clone();
        let message = api::ExecSyncRequest {
            container_id: container_id.into(),
            cmd,
            timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        };
        // Without a timeout (lifecycle hooks) the call has no deadline either, as the kubelet's:
        // a hook runs until it ends or its caller gives it up (a preStop hook with a grace
        // period longer than the runtime request timeout runs that long).
        let req = if timeout.is_zero() {
            tonic::Request::new(message)
        } else {
            self.request(message, timeout)
        };
        observe("exec_sync", container_id, c.exec_sync(req)).await
    }
}

#[async_trait]
impl super::StreamingRuntime for RemoteRuntime {
    async fn exec(&self, request: api::ExecRequest) -> Result<String> {
        let mut c = self.runtime.clone();
        let target = request.container_id.clone();
        let req = self.request(request, Duration::ZERO);
        Ok(observe("exec", &target, c.exec(req)).await?.url)
    }

    async fn attach(&self, request: api::AttachRequest) -> Result<String> {
        let mut c = self.runtime.clone();
        let target = request.container_id.clone();
        let req = self.request(request, Duration::ZERO);
        Ok(observe("attach", &target, c.attach(req)).await?.url)
    }

    async fn port_forward(&self, request: api::PortForwardRequest) -> Result<String> {
        let mut c = self.runtime.clone();
        let target = request.pod_sandbox_id.clone();
        let req = self.request(request, Duration::ZERO);
        Ok(observe("port_forward", &target, c.port_forward(req))
            .await?
            .url)
    }
}

#[async_trait]
impl super::StatsRuntime for RemoteRuntime {
    async fn container_info(
        &self,
        container_id: &str,
    ) -> Result<std::collections::HashMap<String, String>> {
        let mut c = self.runtime.clone();
        let req = self.request(
            api::ContainerStatusRequest {
                container_id: container_id.into(),
                verbose: true,
            },
            Duration::ZERO,
        );
        Ok(
            observe("container_status", container_id, c.container_status(req))
                .await?
                .info,
        )
    }

    async fn image_fs_info(&self) -> Result<api::ImageFsInfoResponse> {
        let mut c = self.images.clone();
        let req = self.request(api::ImageFsInfoRequest {}, Duration::ZERO);
        observe("image_fs_info", "", c.image_fs_info(req)).await
    }

    async fn list_container_stats(
        &self,
        filter: Option<api::ContainerStatsFilter>,
    ) -> Result<Vec<api::ContainerStats>> {
        let mut c = self.runtime.clone();
        let req = self.request(api::ListContainerStatsRequest { filter }, Duration::ZERO);
        Ok(
            observe("list_container_stats", "", c.list_container_stats(req))
                .await?
                .stats,
        )
    }
}

/// Image pulls may take much longer than other calls (the kubelet gives them no deadline of
/// their own beyond its image pull progress deadline); one hour bounds a stuck pull.
const PULL_TIMEOUT: Duration = Duration::from_secs(3600);

#[async_trait]
impl ImageService for RemoteRuntime {
    async fn image_status(&self, image: &str) -> Result<Option<api::Image>> {
        let mut c = self.images.clone();
        let req = self.request(
            api::ImageStatusRequest {
                image: Some(api::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                verbose: false,
            },
            Duration::ZERO,
        );
        Ok(observe("image_status", image, c.image_status(req))
            .await?
            .image)
    }

    async fn pull_image(
        &self,
        image: &str,
        auth: Option<api::AuthConfig>,
        sandbox_config: Option<api::PodSandboxConfig>,
    ) -> Result<String> {
        let mut c = self.images.clone();
        let req = self.request(
            api::PullImageRequest {
                image: Some(api::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                auth,
                sandbox_config,
            },
            PULL_TIMEOUT,
        );
        Ok(observe("pull_image", image, c.pull_image(req))
            .await?
            .image_ref)
    }

    async fn list_images(&self) -> Result<Vec<api::Image>> {
        let mut c = self.images.clone();
        let req = self.request(api::ListImagesRequest { filter: None }, Duration::ZERO);
        Ok(observe("list_images", "", c.list_images(req)).await?.images)
    }

    async fn remove_image(&self, image: &str) -> Result<()> {
        let mut c = self.images.clone();
        let req = self.request(
            api::RemoveImageRequest {
                image: Some(api::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
            },
            Duration::ZERO,
        );
        observe("remove_image", image, c.remove_image(req)).await?;
        Ok(())
    }
}

#[async_trait]
impl HousekeepingRuntime for RemoteRuntime {
    async fn runtime_info(&self) -> Result<std::collections::HashMap<String, String>> {
        let mut c = self.runtime.clone();
        let req = self.request(api::StatusRequest { verbose: true }, Duration::ZERO);
        Ok(observe("status", "", c.status(req)).await?.info)
    }

    async fn runtime_feature_set(&self) -> Result<super::features::RuntimeFeatureSet> {
        let mut c = self.runtime.clone();
        let req = self.request(api::StatusRequest { verbose: false }, Duration::ZERO);
        let status = observe("status", "", c.status(req)).await?;
        Ok(super::features::RuntimeFeatureSet::new(
            &status.runtime_handlers,
            status.features.as_ref(),
        ))
    }

    async fn reopen_container_log(&self, container_id: &str) -> Result<()> {
        let mut c = self.runtime.clone();
        let req = self.request(
            api::ReopenContainerLogRequest {
                container_id: container_id.into(),
            },
            Duration::ZERO,
        );
        observe(
            "reopen_container_log",
            container_id,
            c.reopen_container_log(req),
        )
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_forms() {
        assert_eq!(
            socket_path("unix:///run/containerd/containerd.sock").unwrap(),
            PathBuf::from("/run/containerd/containerd.sock")
        );
        assert_eq!(
            socket_path("/run/x.sock").unwrap(),
            PathBuf::from("/run/x.sock")
        );
        let err = socket_path("tcp://127.0.0.1:1234").unwrap_err().to_string();
        assert!(err.contains("tcp://127.0.0.1:1234"), "{err}");
    }
}
