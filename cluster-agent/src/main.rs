//! `cluster-agent`: see [`fedingress_agent::run`].

/// mimalloc instead of the system allocator: the HTTP proxy allocates per request, and
/// glibc's malloc cost it about a tenth of its CPU in `l7-bench` (docs/benchmarks.md).
/// The binary picks it, not the library: tests and tools that link the library keep
/// their own allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    fedingress_agent::run::main()
}
