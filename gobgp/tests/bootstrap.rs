//! The generated GoBGP client is checked in so building needs no protoc. This test
//! regenerates it from `proto/api/*.proto` (with protox, pure Rust) and fails when the
//! checked-in file drifted. To update it:
//! `FEDINGRESS_BOOTSTRAP=1 cargo test -p fedingress-gobgp --test bootstrap`.

#![allow(clippy::unwrap_used)]

use std::path::Path;

#[test]
fn generated_code_matches_the_proto() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // attribute.proto and capability.proto import "gobgp.proto": api/ is the include root.
    let descriptors = protox::compile(
        ["gobgp.proto", "attribute.proto", "capability.proto"],
        [root.join("proto/api")],
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        // `GobgpApiClient::connect(endpoint)`: no rpc is named Connect.
        .build_transport(true)
        .out_dir(out.path())
        .compile_fds(descriptors)
        .unwrap();
    let generated = std::fs::read_to_string(out.path().join("apipb.rs")).unwrap();
    let checked_in = root.join("src/generated/apipb.rs");
    if std::env::var_os("FEDINGRESS_BOOTSTRAP").is_some() {
        std::fs::write(&checked_in, &generated).unwrap();
        return;
    }
    let current = std::fs::read_to_string(&checked_in).unwrap_or_default();
    assert!(
        current == generated,
        "{} is out of date: run FEDINGRESS_BOOTSTRAP=1 cargo test -p fedingress-gobgp --test bootstrap",
        checked_in.display()
    );
}
