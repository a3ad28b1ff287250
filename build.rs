//! Generates the CRI v1 client from `proto/runtime/v1/api.proto`.
//! protox parses the proto in pure Rust, so this step needs no system `protoc`
//! (containerd-client's own build script still does; see README).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/runtime/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
