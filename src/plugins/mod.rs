//! The kubelet's plugin manager for CSI drivers (`pkg/kubelet/pluginmanager`, with the CSI
//! registration handler of `pkg/volume/csi/csi_plugin.go` and its `nodeinfomanager`).
//!
//! A CSI node plugin announces itself with a registration socket in
//! `<rootDir>/plugins_registry/`. [`manager::PluginManager`] watches that directory (inotify,
//! and a rescan every few seconds so that a missed event is not fatal), asks each new socket
//! `GetInfo`, validates the answer ([`validate`]: type `CSIPlugin`, the versions, the name, the
//! endpoint), calls the driver's `NodeGetInfo` and `NodeGetCapabilities`, records the driver in
//! the node's [`crate::csi::CsiDrivers`] store and, in cluster mode, on the `CSINode` and the
//! Node ([`nodeinfo`]), and answers `NotifyRegistrationStatus`. A socket that goes (or is
//! created anew) is deregistered: out of the store, off the node.
//!
//! Decisions are pure and table-tested ([`validate`], [`sockets::plan`], the
//! [`nodeinfo`] edits); the effects sit behind [`manager::RegistrationConnector`],
//! [`manager::DriverConnector`] and [`nodeinfo::NodeInfoWriter`].

pub mod manager;
pub mod nodeinfo;
pub mod sockets;
pub mod validate;

use crate::csi::CsiError;

/// Why registering, recording or deregistering a plugin failed.
#[derive(Debug, thiserror::Error)]
pub enum PluginsError {
    /// The API server refused a write or did not answer.
    #[error("{context}: {message}")]
    Api {
        context: String,
        code: Option<u16>,
        message: String,
    },
    /// A call to the driver's CSI socket failed.
    #[error(transparent)]
    Csi(#[from] CsiError),
    /// A call to the registration socket failed.
    #[error("{context}: {message}")]
    Registration { context: String, message: String },
    /// What the plugin or the Node says cannot be recorded (the kubelet's messages).
    #[error("{0}")]
    Refused(String),
}

impl PluginsError {
    /// The HTTP status of an API error.
    pub fn code(&self) -> Option<u16> {
        match self {
            PluginsError::Api { code, .. } => *code,
            _ => None,
        }
    }

    /// The same error, saying what was being done first (as the kubelet wraps them).
    pub fn context(self, what: &str) -> PluginsError {
        PluginsError::Refused(format!("{what}: {self}"))
    }
}
