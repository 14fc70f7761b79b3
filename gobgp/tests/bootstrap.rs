//! The generated GoBGP client is checked in so building needs no protoc. This test
//! regenerates it from `proto/api/*.proto` (with protox, pure Rust) and fails when the
//! checked-in file drifted. To update it:
//! `FEDINGRESS_BOOTSTRAP=1 cargo test -p fedingress-gobgp --test bootstrap`.

use std::path::Path;

use fedingress_codegen::{Generated, check, tonic_prost_build};

#[test]
fn generated_code_matches_the_proto() {
    check(
        &Generated {
            crate_root: Path::new(env!("CARGO_MANIFEST_DIR")),
            // attribute.proto and capability.proto import "gobgp.proto": api/ is the
            // include root.
            protos: &["gobgp.proto", "attribute.proto", "capability.proto"],
            include: "proto/api",
            include_imports: true,
            outputs: &[("apipb.rs", "src/generated/apipb.rs")],
            package: "fedingress-gobgp",
        },
        tonic_prost_build::configure()
            .build_client(true)
            .build_server(false)
            // `GobgpApiClient::connect(endpoint)`: no rpc is named Connect.
            .build_transport(true),
    );
}
