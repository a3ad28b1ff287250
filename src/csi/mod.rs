//! The Container Storage Interface as a node agent speaks it: the generated CSI v1 types
//! (Identity and Node services, `proto/csi/v1/csi.proto`) and the kubelet's plugin registration
//! API v1 (`proto/pluginregistration/v1/api.proto`), the [`CsiNode`] trait the volume manager
//! calls a driver through, and [`CsiDrivers`], the drivers registered on this node (the kubelet's
//! `csiDrivers` store in `pkg/volume/csi/csi_plugin.go`).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;

/// Generated CSI v1 messages, the Identity and Node clients, and their servers (for the
/// in-process drivers of component tests).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod api {
    tonic::include_proto!("csi.v1");
}

pub mod remote;

/// Generated plugin registration API v1 (package `pluginregistration`).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod registration_api {
    tonic::include_proto!("pluginregistration");
}

/// The CSI specification version nodelet speaks.
pub const CSI_SPEC_VERSION: &str = "1.12.0";
/// The plugin registration API version nodelet speaks.
pub const REGISTRATION_API_VERSION: &str = "v1";

#[derive(Debug, thiserror::Error)]
pub enum CsiError {
    #[error("invalid CSI endpoint {endpoint:?}: {reason}")]
    Endpoint { endpoint: String, reason: String },
    /// A call to a driver failed; `status` is the driver's gRPC status.
    #[error("rpc error: code = {code} desc = {message}", code = go_code_name(status.code()), message = status.message())]
    Call {
        driver: String,
        op: &'static str,
        #[source]
        status: tonic::Status,
    },
    /// The kubelet's message when a volume names a driver that has not registered.
    #[error("driver name {driver} not found in the list of registered CSI drivers")]
    NotRegistered { driver: String },
}

impl CsiError {
    /// The driver's gRPC status code, for a failed call.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CsiError::Call { status, .. } => Some(status.code()),
            _ => None,
        }
    }
}

/// gRPC-Go's name of a status code, as the kubelet's messages carry it.
pub(crate) fn go_code_name(code: tonic::Code) -> String {
    match code {
        tonic::Code::Ok => "OK".to_string(),
        tonic::Code::Cancelled => "Canceled".to_string(),
        other => format!("{other:?}"),
    }
}

/// The Node service of one CSI driver (and the Identity calls nodelet makes). Implemented over
/// the driver's unix socket in production, by in-memory fakes in component tests.
#[async_trait]
pub trait CsiNode: Send + Sync {
    async fn node_get_info(&self) -> Result<api::NodeGetInfoResponse, CsiError>;
    async fn node_get_capabilities(&self) -> Result<api::NodeGetCapabilitiesResponse, CsiError>;
    async fn node_stage_volume(&self, request: api::NodeStageVolumeRequest)
        -> Result<(), CsiError>;
    async fn node_unstage_volume(
        &self,
        request: api::NodeUnstageVolumeRequest,
    ) -> Result<(), CsiError>;
    async fn node_publish_volume(
        &self,
        request: api::NodePublishVolumeRequest,
    ) -> Result<(), CsiError>;
    async fn node_unpublish_volume(
        &self,
        request: api::NodeUnpublishVolumeRequest,
    ) -> Result<(), CsiError>;
    async fn node_get_volume_stats(
        &self,
        request: api::NodeGetVolumeStatsRequest,
    ) -> Result<api::NodeGetVolumeStatsResponse, CsiError>;
    async fn node_expand_volume(
        &self,
        request: api::NodeExpandVolumeRequest,
    ) -> Result<api::NodeExpandVolumeResponse, CsiError>;
}

/// The Node service capabilities the kubelet acts on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCapabilities {
    pub stage_unstage: bool,
    pub get_volume_stats: bool,
    pub expand_volume: bool,
    pub volume_condition: bool,
    pub volume_mount_group: bool,
}

impl NodeCapabilities {
    /// Reads a `NodeGetCapabilities` answer.
    pub fn from_response(response: &api::NodeGetCapabilitiesResponse) -> NodeCapabilities {
        use api::node_service_capability::{rpc::Type, Type as Cap};
        let mut caps = NodeCapabilities::default();
        for c in &response.capabilities {
            let Some(Cap::Rpc(rpc)) = &c.r#type else {
                continue;
            };
            match Type::try_from(rpc.r#type) {
                Ok(Type::StageUnstageVolume) => caps.stage_unstage = true,
                Ok(Type::GetVolumeStats) => caps.get_volume_stats = true,
                Ok(Type::ExpandVolume) => caps.expand_volume = true,
                Ok(Type::VolumeCondition) => caps.volume_condition = true,
                Ok(Type::VolumeMountGroup) => caps.volume_mount_group = true,
                _ => {}
            }
        }
        caps
    }
}

/// One driver registered on this node.
#[derive(Clone)]
pub struct RegisteredDriver {
    pub name: String,
    /// The driver's CSI socket (`unix:///…` or a path).
    pub endpoint: String,
    /// The versions the driver advertised at registration.
    pub versions: Vec<String>,
    /// `NodeGetInfo`'s answer.
    pub node_id: String,
    pub max_volumes_per_node: i64,
    pub topology: BTreeMap<String, String>,
    pub capabilities: NodeCapabilities,
    pub client: Arc<dyn CsiNode>,
}

impl std::fmt::Debug for RegisteredDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredDriver")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .field("versions", &self.versions)
            .field("node_id", &self.node_id)
            .field("capabilities", &self.capabilities)
            .finish_non_exhaustive()
    }
}

/// The drivers registered on this node, shared by the plugin watcher (writer) and the volume
/// manager (reader).
#[derive(Clone, Default, Debug)]
pub struct CsiDrivers {
    inner: Arc<RwLock<BTreeMap<String, RegisteredDriver>>>,
}

impl CsiDrivers {
    pub fn new() -> CsiDrivers {
        CsiDrivers::default()
    }

    /// The driver named `name`, or the kubelet's error for one that has not registered.
    pub fn get(&self, name: &str) -> Result<RegisteredDriver, CsiError> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| CsiError::NotRegistered {
                driver: name.to_string(),
            })
    }

    /// Adds or replaces a driver.
    pub fn insert(&self, driver: RegisteredDriver) {
        self.inner
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(driver.name.clone(), driver);
    }

    /// Removes a driver; returns it if it was registered.
    pub fn remove(&self, name: &str) -> Option<RegisteredDriver> {
        self.inner
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name)
    }

    /// The names of the registered drivers, sorted.
    pub fn names(&self) -> Vec<String> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_read_from_the_answer() {
        use api::node_service_capability::{rpc::Type, Rpc, Type as Cap};
        let cap = |t: Type| api::NodeServiceCapability {
            r#type: Some(Cap::Rpc(Rpc { r#type: t as i32 })),
        };
        let response = api::NodeGetCapabilitiesResponse {
            capabilities: vec![
                cap(Type::StageUnstageVolume),
                cap(Type::GetVolumeStats),
                api::NodeServiceCapability { r#type: None },
            ],
        };
        assert_eq!(
            NodeCapabilities::from_response(&response),
            NodeCapabilities {
                stage_unstage: true,
                get_volume_stats: true,
                ..NodeCapabilities::default()
            }
        );
        assert_eq!(
            NodeCapabilities::from_response(&api::NodeGetCapabilitiesResponse::default()),
            NodeCapabilities::default()
        );
    }

    #[test]
    fn an_unregistered_driver_gets_the_kubelets_message() {
        let drivers = CsiDrivers::new();
        assert_eq!(
            drivers.get("x.example.com").unwrap_err().to_string(),
            "driver name x.example.com not found in the list of registered CSI drivers"
        );
        assert!(drivers.names().is_empty());
    }
}
