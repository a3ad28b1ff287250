//! The generated CSI v1 and plugin registration v1 code (servers for the driver; the clients
//! are generated too, for the crate's tests, and unused here).

#[allow(clippy::all, clippy::pedantic, dead_code, missing_docs)]
pub mod csi {
    tonic::include_proto!("csi.v1");
}

#[allow(clippy::all, clippy::pedantic, dead_code, missing_docs)]
pub mod registration {
    tonic::include_proto!("pluginregistration");
}
