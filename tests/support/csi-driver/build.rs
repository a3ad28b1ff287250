//! Generates the CSI v1 (Identity, Node) and plugin registration v1 code from the workspace's
//! protos with protox (pure Rust, no system `protoc`), twice: the servers for the driver
//! (`$OUT_DIR/server`) and the clients for the crate's tests (`$OUT_DIR/client`), so the binary
//! carries no client code.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let csi = "../../../proto/csi/v1/csi.proto";
    let registration = "../../../proto/pluginregistration/v1/api.proto";
    for proto in [csi, registration] {
        println!("cargo:rerun-if-changed={proto}");
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    for (dir, server) in [("server", true), ("client", false)] {
        let dir = out.join(dir);
        std::fs::create_dir_all(&dir)?;
        let fds = protox::compile([csi, registration], ["../../../proto"])?;
        tonic_prost_build::configure()
            .build_server(server)
            .build_client(!server)
            .out_dir(&dir)
            .compile_fds(fds)?;
    }
    Ok(())
}
