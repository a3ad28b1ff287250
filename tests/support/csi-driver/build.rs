//! Generates the CSI v1 (Identity, Node) and plugin registration v1 services from the workspace's
//! protos with protox (pure Rust, no system `protoc`). Servers for the driver; clients for the
//! crate's tests (the binary does not use them).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let csi = "../../../proto/csi/v1/csi.proto";
    let registration = "../../../proto/pluginregistration/v1/api.proto";
    for proto in [csi, registration] {
        println!("cargo:rerun-if-changed={proto}");
    }
    let fds = protox::compile([csi, registration], ["../../../proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
