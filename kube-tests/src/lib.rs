//! fedingress-kube-tests: the federation-apiserver driven by kube-rs, the Rust
//! Kubernetes client that controllers are written with, as a peer that is not kubectl.
//!
//! Entry points: [`ApiServer`] (the real `federation-apiserver` binary in `--dev` mode
//! on loopback port 0, stopped on drop, with a [`kube::Client`] for it) and the
//! [`ApiResource`]s of the fedingress kinds for `Api<DynamicObject>`
//! ([`federated_ingresses`], [`clusters`], [`ingress_pools`], [`ingress_claims`]). The
//! tests live in `tests/`. What does not
//! belong here: process handling (that is `fedingress_tests::Process`) and product
//! logic; the tests talk to the product only over its HTTP API.

use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use fedingress_tests::{Process, binary};
use kube::core::{ApiResource, GroupVersionKind};

/// How long the apiserver may take to print its READY line.
const START: Duration = Duration::from_secs(30);

/// A running `federation-apiserver --dev` with its own data directory; the process is
/// killed and the directory removed on drop.
pub struct ApiServer {
    process: Process,
    _data: tempfile::TempDir,
}

impl ApiServer {
    /// Starts the apiserver on 127.0.0.1 port 0 (API and agent gateway) and waits for
    /// its READY line.
    ///
    /// # Errors
    /// The data directory cannot be created or the binary does not become ready.
    pub fn start() -> anyhow::Result<Self> {
        let data = tempfile::tempdir().context("creating the apiserver's data directory")?;
        let mut command = Command::new(binary("federation-apiserver"));
        command
            .args([
                "--dev",
                "--listen",
                "127.0.0.1:0",
                "--agent-listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(data.path().join("data"));
        let process = Process::start(command, "federation-apiserver", START)?;
        Ok(Self {
            process,
            _data: data,
        })
    }

    /// The API's base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.process.addr("api"))
    }

    /// A kube-rs client for this server (plain HTTP, no credentials: dev mode), with
    /// `default` as its default namespace.
    ///
    /// # Errors
    /// The URL does not parse or kube-rs cannot build its HTTP stack.
    pub fn client(&self) -> anyhow::Result<kube::Client> {
        // kube's TLS stack wants a process-wide provider when more than one is compiled
        // in (DEPENDENCIES.md #1); installing it twice is harmless.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let url = self.url();
        let mut config = kube::Config::new(
            url.parse()
                .with_context(|| format!("parsing the apiserver URL {url}"))?,
        );
        config.default_namespace = "default".into();
        kube::Client::try_from(config).context("building a kube-rs client")
    }
}

/// `fedingress.io/v1alpha1` `FederatedIngress` (namespaced, plural `federatedingresses`).
pub fn federated_ingresses() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fedingress.io", "v1alpha1", "FederatedIngress"),
        "federatedingresses",
    )
}

/// `fedingress.io/v1alpha1` `Cluster` (cluster-scoped, plural `clusters`).
pub fn clusters() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fedingress.io", "v1alpha1", "Cluster"),
        "clusters",
    )
}

/// `fedingress.io/v1alpha1` `IngressPool` (cluster-scoped, plural `ingresspools`).
pub fn ingress_pools() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fedingress.io", "v1alpha1", "IngressPool"),
        "ingresspools",
    )
}

/// `fedingress.io/v1alpha1` `IngressClaim` (namespaced, plural `ingressclaims`).
pub fn ingress_claims() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fedingress.io", "v1alpha1", "IngressClaim"),
        "ingressclaims",
    )
}

/// A valid FederatedIngress as JSON: one TCP rule on `port` and the given DNS TTL.
pub fn tcp_ingress(name: &str, port: u16, ttl: u32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "FederatedIngress",
        "metadata": {"name": name},
        "spec": {
            "rules": [{"protocol": "TCP", "port": port, "backend": {"service": "svc", "port": port}}],
            "traffic": {"dnsName": format!("{name}.fedingress.test"), "ttl": ttl},
        },
    })
}
