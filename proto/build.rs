//! Compiles `metnos/**/*.proto` with protox (pure Rust, so `cargo build` needs no system
//! `protoc`), writes the encoded file descriptor set for server reflection, and generates
//! prost messages plus tonic clients and servers.

use std::path::PathBuf;

use prost::Message;

const PROTOS: &[&str] = &[
    "metnos/common/v1/common.proto",
    "metnos/policy/v1/policy.proto",
    "metnos/vaglio/v1/vaglio.proto",
    "metnos/approval/v1/approval.proto",
    "metnos/planner/v1/planner.proto",
    "metnos/gateway/v1/gateway.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // compile_fds prints no rerun-if-changed of its own.
    println!("cargo:rerun-if-changed=build.rs");
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }

    let fds = protox::compile(PROTOS, ["."])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    // Reflection answers with the contracts, not their comments (the `.proto` files hold
    // those): without the source info the set is a quarter as large (29 KB), and each
    // service's two reflection servers decode it at every start (issue 45). The generated
    // code below still gets its doc comments from the full set.
    let mut served = fds.clone();
    for file in &mut served.file {
        file.source_code_info = None;
    }
    std::fs::write(
        out_dir.join("metnos_descriptor.bin"),
        served.encode_to_vec(),
    )?;

    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
