//! The Identity service and the plugin registration service.

use std::sync::Arc;

use serde_json::json;
use tonic::{Request, Response, Status};

use crate::api::csi::identity_server::Identity;
use crate::api::csi::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginInfoRequest,
    GetPluginInfoResponse, ProbeRequest, ProbeResponse,
};
use crate::api::registration::registration_server::Registration;
use crate::api::registration::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use crate::config::Config;
use crate::journal::Journal;

/// The plugin type a CSI driver registers as.
pub const CSI_PLUGIN_TYPE: &str = "CSIPlugin";

fn record_ok(journal: &Journal, method: &str) {
    let mut entry = serde_json::Map::new();
    entry.insert("method".into(), json!(method));
    entry.insert("ok".into(), json!(true));
    entry.insert("error".into(), serde_json::Value::Null);
    journal.record(entry);
}

pub struct IdentityService {
    pub config: Arc<Config>,
    pub journal: Arc<Journal>,
}

#[tonic::async_trait]
impl Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _request: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        record_ok(&self.journal, "GetPluginInfo");
        Ok(Response::new(GetPluginInfoResponse {
            name: self.config.driver_name.clone(),
            vendor_version: env!("CARGO_PKG_VERSION").to_string(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _request: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        record_ok(&self.journal, "GetPluginCapabilities");
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities: Vec::new(),
        }))
    }

    async fn probe(
        &self,
        _request: Request<ProbeRequest>,
    ) -> Result<Response<ProbeResponse>, Status> {
        record_ok(&self.journal, "Probe");
        Ok(Response::new(ProbeResponse { ready: Some(true) }))
    }
}

pub struct RegistrationService {
    pub config: Arc<Config>,
    pub journal: Arc<Journal>,
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn get_info(
        &self,
        _request: Request<InfoRequest>,
    ) -> Result<Response<PluginInfo>, Status> {
        record_ok(&self.journal, "GetInfo");
        Ok(Response::new(PluginInfo {
            r#type: CSI_PLUGIN_TYPE.to_string(),
            name: self.config.driver_name.clone(),
            endpoint: self.config.csi_socket.display().to_string(),
            supported_versions: self.config.supported_versions.clone(),
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        if status.plugin_registered {
            eprintln!("nodelet-test-csi: registered with the node agent");
        } else {
            eprintln!(
                "nodelet-test-csi: registration refused by the node agent: {}",
                status.error
            );
        }
        let mut entry = serde_json::Map::new();
        entry.insert("method".into(), json!("NotifyRegistrationStatus"));
        entry.insert("plugin_registered".into(), json!(status.plugin_registered));
        entry.insert("registration_error".into(), json!(status.error));
        entry.insert("ok".into(), json!(true));
        entry.insert("error".into(), serde_json::Value::Null);
        self.journal.record(entry);
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}
