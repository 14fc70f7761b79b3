//! The generated etcd v3 client is checked in so building needs no protoc (etcd-client's
//! build script needed one). This test regenerates it from `proto/etcd/api/**.proto`
//! (with protox, pure Rust) and fails when the checked-in files drifted. To update them:
//! `FEDINGRESS_BOOTSTRAP=1 cargo test -p fedingress-store --test bootstrap`.

use std::path::Path;

use fedingress_codegen::{Generated, check, tonic_prost_build};

#[test]
fn generated_etcd_client_matches_the_proto() {
    check(
        &Generated {
            crate_root: Path::new(env!("CARGO_MANIFEST_DIR")),
            protos: &[
                "etcd/api/etcdserverpb/rpc.proto",
                "etcd/api/mvccpb/kv.proto",
                "etcd/api/authpb/auth.proto",
                "etcd/api/versionpb/version.proto",
            ],
            include: "proto",
            // The grpc-gateway and OpenAPI annotations rpc.proto imports only decorate
            // it: their own packages are not generated. versionpb holds only options
            // (etcd's per-field version annotations), so it generates no Rust.
            include_imports: false,
            outputs: &[
                (
                    "etcdserverpb.rs",
                    "src/etcd_store/generated/etcdserverpb.rs",
                ),
                ("mvccpb.rs", "src/etcd_store/generated/mvccpb.rs"),
                ("authpb.rs", "src/etcd_store/generated/authpb.rs"),
            ],
            package: "fedingress-store",
        },
        tonic_prost_build::configure()
            .build_client(true)
            .build_server(false)
            .build_transport(false),
    );
}
