//! The generated code is checked in so building needs no protoc. This test regenerates
//! it (with protox, pure Rust) and fails when the checked-in file drifted from the
//! .proto. To update it: `FEDINGRESS_BOOTSTRAP=1 cargo test -p fedingress-proto --test bootstrap`.

use std::path::Path;

use fedingress_codegen::{Generated, check, tonic_prost_build};

#[test]
fn generated_code_matches_the_proto() {
    check(
        &Generated {
            crate_root: Path::new(env!("CARGO_MANIFEST_DIR")),
            protos: &["fedingress/v1/agent.proto"],
            include: ".",
            include_imports: true,
            outputs: &[("fedingress.v1.rs", "src/generated/fedingress.v1.rs")],
            package: "fedingress-proto",
        },
        tonic_prost_build::configure()
            .build_client(true)
            .build_server(true)
            // No `connect(endpoint)` constructor: it would clash with the `Connect` rpc.
            .build_transport(false),
    );
}
