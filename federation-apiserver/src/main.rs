//! `federation-apiserver`: see [`federation_apiserver::run`].

fn main() -> std::process::ExitCode {
    federation_apiserver::run::main()
}
