//! The generated code is checked in so building needs no protoc. This test regenerates
//! it (with protox, pure Rust) and fails when the checked-in file drifted from the
//! .proto. To update it: `FEDINGRESS_BOOTSTRAP=1 cargo test -p fedingress-proto --test bootstrap`.

#![allow(clippy::unwrap_used)]

use std::path::Path;

#[test]
fn generated_code_matches_the_proto() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let descriptors = protox::compile(["fedingress/v1/agent.proto"], [root]).unwrap();
    let out = tempfile::tempdir().unwrap();
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // No `connect(endpoint)` constructor: it would clash with the `Connect` rpc.
        .build_transport(false)
        .out_dir(out.path())
        .compile_fds(descriptors)
        .unwrap();
    let generated = std::fs::read_to_string(out.path().join("fedingress.v1.rs")).unwrap();
    let checked_in = root.join("src/generated/fedingress.v1.rs");
    if std::env::var_os("FEDINGRESS_BOOTSTRAP").is_some() {
        std::fs::write(&checked_in, &generated).unwrap();
        return;
    }
    let current = std::fs::read_to_string(&checked_in).unwrap_or_default();
    assert!(
        current == generated,
        "{} is out of date: run FEDINGRESS_BOOTSTRAP=1 cargo test -p fedingress-proto --test bootstrap",
        checked_in.display()
    );
}
