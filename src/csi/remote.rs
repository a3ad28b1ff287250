//! [`RemoteCsiNode`]: a driver's Node service over its unix socket (tonic), with a tracing span,
//! a deadline, a bounded answer size and the kubelet's `csi_operations_seconds` on every call.

use std::future::Future;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tonic::transport::Channel;
use tracing::Instrument;

use super::api::node_client::NodeClient;
use super::{api, go_code_name, CsiError, CsiNode};
use crate::metrics::{metrics, CsiOperationLabels};

/// The kubelet's `csiTimeout`: stage, publish, their reverse and expansion.
pub const CSI_TIMEOUT: Duration = Duration::from_secs(120);
/// `NodeGetInfo` and `NodeGetCapabilities`: a driver answers them from memory.
pub const INFO_TIMEOUT: Duration = Duration::from_secs(10);
/// `NodeGetVolumeStats`, asked periodically for every volume.
pub const STATS_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting to the driver's socket may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer nodelet decodes from a driver (the gRPC default, stated).
pub const MAX_DECODING_SIZE: usize = 4 * 1024 * 1024;

/// One driver's Node service over its socket.
#[derive(Clone)]
pub struct RemoteCsiNode {
    driver: String,
    client: NodeClient<Channel>,
}

impl std::fmt::Debug for RemoteCsiNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteCsiNode")
            .field("driver", &self.driver)
            .finish_non_exhaustive()
    }
}

impl RemoteCsiNode {
    /// A client of the driver `driver` at `endpoint` (`unix:///…` or an absolute path); it
    /// connects at the first call.
    pub fn connect(driver: &str, endpoint: &str) -> Result<RemoteCsiNode, CsiError> {
        let channel = crate::unix_grpc::unix_channel(endpoint, CONNECT_TIMEOUT).map_err(|e| {
            CsiError::Endpoint {
                endpoint: e.endpoint,
                reason: "only unix sockets are supported (unix:///path/to.sock)".into(),
            }
        })?;
        Ok(RemoteCsiNode {
            driver: driver.to_string(),
            client: NodeClient::new(channel).max_decoding_message_size(MAX_DECODING_SIZE),
        })
    }
}

fn with_deadline<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    request
}

/// Runs one call inside a span, with `timeout` as its deadline (sent to the driver and kept
/// here too), and records `csi_operations_seconds`.
pub(crate) async fn observe<T, F>(
    driver: &str,
    method: &'static str,
    timeout: Duration,
    call: F,
) -> Result<T, CsiError>
where
    F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let span = tracing::debug_span!("csi", driver, method);
    let started = Instant::now();
    let result = match tokio::time::timeout(timeout, call.instrument(span)).await {
        Ok(result) => result,
        Err(_) => Err(tonic::Status::deadline_exceeded(format!(
            "context deadline exceeded ({timeout:?})"
        ))),
    };
    let code = match &result {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    };
    metrics()
        .csi_operations_seconds
        .get_or_create(&CsiOperationLabels {
            driver_name: driver.to_string(),
            method_name: method.to_string(),
            grpc_status_code: go_code_name(code),
            migrated: "false".into(),
        })
        .observe(started.elapsed().as_secs_f64());
    match result {
        Ok(response) => Ok(response.into_inner()),
        Err(status) => {
            tracing::debug!(driver, method, code = ?status.code(), message = status.message(), "CSI call failed");
            Err(CsiError::Call {
                driver: driver.to_string(),
                op: method,
                status,
            })
        }
    }
}

#[async_trait]
impl CsiNode for RemoteCsiNode {
    async fn node_get_info(&self) -> Result<api::NodeGetInfoResponse, CsiError> {
        let mut c = self.client.clone();
        let req = with_deadline(api::NodeGetInfoRequest {}, INFO_TIMEOUT);
        observe(
            &self.driver,
            "/csi.v1.Node/NodeGetInfo",
            INFO_TIMEOUT,
            c.node_get_info(req),
        )
        .await
    }

    async fn node_get_capabilities(&self) -> Result<api::NodeGetCapabilitiesResponse, CsiError> {
        let mut c = self.client.clone();
        let req = with_deadline(api::NodeGetCapabilitiesRequest {}, INFO_TIMEOUT);
        observe(
            &self.driver,
            "/csi.v1.Node/NodeGetCapabilities",
            INFO_TIMEOUT,
            c.node_get_capabilities(req),
        )
        .await
    }

    async fn node_stage_volume(
        &self,
        message: api::NodeStageVolumeRequest,
    ) -> Result<(), CsiError> {
        let mut c = self.client.clone();
        let req = with_deadline(message, CSI_TIMEOUT);
        observe(
            &self.driver,
            "/csi.v1.Node/NodeStageVolume",
            CSI_TIMEOUT,
            c.node_stage_volume(req),
        )
        .await
        .map(|_| ())
    }

    async fn node_unstage_volume(
        &self,
        message: api::NodeUnstageVolumeRequest,
    ) -> Result<(), CsiError> {
        let mut c = self.client.clone();
        let req = with_deadline(message, CSI_TIMEOUT);
        observe(
            &self.driver,
            "/csi.v1.Node/NodeUnstageVolume",
            CSI_TIMEOUT,
            c.node_unstage_volume(req),
        )
        .await
        .map(|_| ())
    }

    async fn node_publish_volume(
        &self,
        message: api::NodePublishVolumeRequest,
    ) -> Result<(), CsiError> {
        let mut c = self.client.clone();
        let req = with_deadline(message, CSI_TIMEOUT);
        observe(
            &self.driver,
            "/csi.v1.Node/NodePublishVolume",
            CSI_TIMEOUT,
            c.node_publish_volume(req),
        )
        .await
        .map(|_| ())
    }

    async fn node_unpublish_volume(
        &self,
        message: api::NodeUnpublishVolumeRequest,
    ) -> Result<(), CsiError> {
        let mut c = self.client.clone();
        let req = with_deadline(message, CSI_TIMEOUT);
        observe(
            &self.driver,
            "/csi.v1.Node/NodeUnpublishVolume",
            CSI_TIMEOUT,
            c.node_unpublish_volume(req),
        )
        .await
        .map(|_| ())
    }

    async fn node_get_volume_stats(
        &self,
        message: api::NodeGetVolumeStatsRequest,
    ) -> Result<api::NodeGetVolumeStatsResponse, CsiError> {
        let mut c = self.client.clone();
        let req = with_deadline(message, STATS_TIMEOUT);
        observe(
            &self.driver,
            "/csi.v1.Node/NodeGetVolumeStats",
            STATS_TIMEOUT,
            c.node_get_volume_stats(req),
        )
        .await
    }

    async fn node_expand_volume(
        &self,
        message: api::NodeExpandVolumeRequest,
    ) -> Result<api::NodeExpandVolumeResponse, CsiError> {
        let mut c = self.client.clone();
        let req = with_deadline(message, CSI_TIMEOUT);
        observe(
            &self.driver,
            "/csi.v1.Node/NodeExpandVolume",
            CSI_TIMEOUT,
            c.node_expand_volume(req),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_endpoint_that_is_no_unix_socket_is_refused() {
        let err = RemoteCsiNode::connect("d", "tcp://127.0.0.1:9").unwrap_err();
        assert!(err.to_string().contains("tcp://127.0.0.1:9"), "{err}");
        assert!(RemoteCsiNode::connect("d", "unix:///run/d/csi.sock").is_ok());
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_is_deadline_exceeded_and_counted() {
        let never = std::future::pending::<Result<tonic::Response<()>, tonic::Status>>();
        let err = observe(
            "deadline.example.com",
            "/csi.v1.Node/NodeGetInfo",
            Duration::from_millis(10),
            never,
        )
        .await
        .unwrap_err();
        assert_eq!(err.code(), Some(tonic::Code::DeadlineExceeded));
        assert!(
            err.to_string()
                .starts_with("rpc error: code = DeadlineExceeded"),
            "{err}"
        );
        let text = metrics().encode();
        assert!(
            text.contains(r#"nodelet_csi_operations_seconds_count{driver_name="deadline.example.com",method_name="/csi.v1.Node/NodeGetInfo",grpc_status_code="DeadlineExceeded",migrated="false"} 1"#),
            "{text}"
        );
    }
}
