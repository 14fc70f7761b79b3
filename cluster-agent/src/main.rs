//! `cluster-agent`: see [`fedingress_agent::run`].

fn main() -> std::process::ExitCode {
    fedingress_agent::run::main()
}
