//! The generated CSI v1 and plugin registration v1 messages and servers (build.rs).

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod csi {
    include!(concat!(env!("OUT_DIR"), "/server/csi.v1.rs"));
}

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod registration {
    include!(concat!(env!("OUT_DIR"), "/server/pluginregistration.rs"));
}
