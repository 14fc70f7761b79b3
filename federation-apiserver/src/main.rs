//! `federation-apiserver`: see [`fedingress_apiserver::run`].

fn main() -> std::process::ExitCode {
    fedingress_apiserver::run::main()
}
