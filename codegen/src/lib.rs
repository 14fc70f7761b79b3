//! fedingress-codegen: the one check behind every crate's checked-in generated gRPC code
//! (`proto/`, `gobgp/`, `store/`'s etcd client).
//!
//! Generated code is checked in so that building needs nothing but cargo (no `protoc`).
//! Each crate keeps a `tests/bootstrap.rs` that describes its `.proto` files and how tonic
//! generates them, and calls [`check`]: it regenerates the code into a temporary directory
//! (with protox, a protobuf compiler in pure Rust) and fails when a checked-in file
//! differs. With `FEDINGRESS_BOOTSTRAP=1` it writes the files instead.
//!
//! What does not belong here: anything a product binary links. This crate is a
//! dev-dependency only.

use std::path::{Path, PathBuf};

/// The generator each crate configures (`tonic_prost_build::configure()`).
pub use tonic_prost_build;

/// One crate's generated code.
pub struct Generated<'a> {
    /// The crate's manifest directory (`env!("CARGO_MANIFEST_DIR")`).
    pub crate_root: &'a Path,
    /// The `.proto` files to generate, relative to `include`.
    pub protos: &'a [&'a str],
    /// The include root the files import each other from, relative to `crate_root`.
    pub include: &'a str,
    /// Also give prost the files that `protos` import (generating their packages too).
    /// Off: only `protos`' own packages are generated; imported types are still named by
    /// their package path (`super::mvccpb::KeyValue`), and options from imported files
    /// (grpc-gateway annotations, say) are left out.
    pub include_imports: bool,
    /// Generated file name (`etcdserverpb.rs`) → checked-in path relative to `crate_root`.
    pub outputs: &'a [(&'a str, &'a str)],
    /// The crate's package name, for the message that says how to update the files.
    pub package: &'a str,
}

/// Regenerates `generated` with `builder` and compares it with the checked-in files (or,
/// with `FEDINGRESS_BOOTSTRAP` set, writes them).
///
/// # Panics
/// When the `.proto` files do not compile, generation fails, or a checked-in file
/// differs from what the `.proto` generates: this is a test.
#[allow(clippy::unwrap_used)]
pub fn check(generated: &Generated<'_>, builder: tonic_prost_build::Builder) {
    let include: PathBuf = generated.crate_root.join(generated.include);
    let descriptors = protox::Compiler::new([&include])
        .unwrap()
        .include_source_info(true)
        .include_imports(generated.include_imports)
        .open_files(generated.protos)
        .unwrap_or_else(|e| panic!("compiling {:?}: {e}", generated.protos))
        .file_descriptor_set();
    let out = tempfile::tempdir().unwrap();
    builder
        .out_dir(out.path())
        .compile_fds(descriptors)
        .unwrap();
    let bootstrap = std::env::var_os("FEDINGRESS_BOOTSTRAP").is_some();
    let mut stale = Vec::new();
    for (file, checked_in) in generated.outputs {
        let fresh = std::fs::read_to_string(out.path().join(file))
            .unwrap_or_else(|e| panic!("tonic generated no {file}: {e}"));
        let checked_in = generated.crate_root.join(checked_in);
        if bootstrap {
            std::fs::write(&checked_in, &fresh).unwrap();
        } else if std::fs::read_to_string(&checked_in).unwrap_or_default() != fresh {
            stale.push(checked_in.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "{} out of date: run FEDINGRESS_BOOTSTRAP=1 cargo test -p {} --test bootstrap",
        stale.join(", "),
        generated.package
    );
}
