//! Generates the gRPC code nodelet speaks, with protox (which parses the protos in pure Rust, so
//! this step needs no system `protoc`; containerd-client's own build script still does, see
//! README):
//! - the CRI v1 client from `proto/runtime/v1/api.proto`;
//! - CSI v1 (Identity and Node) and the kubelet's plugin registration API v1, clients and
//!   servers: nodelet is the client of both; the servers serve the in-process drivers of the
//!   component tests.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cri = "proto/runtime/v1/api.proto";
    let csi = "proto/csi/v1/csi.proto";
    let registration = "proto/pluginregistration/v1/api.proto";
    for proto in [cri, csi, registration] {
        println!("cargo:rerun-if-changed={proto}");
    }
    let fds = protox::compile([cri], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(fds)?;
    let fds = protox::compile([csi, registration], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
