//! Test support for the apiserver's in-process tests: a hub started with
//! [`App::bind`] on loopback port 0 with its embedded DNS server ([`TestHub`]), a
//! scripted fake cluster agent ([`agent::FakeAgent`]) and a one-query DNS client
//! ([`dns::query_a`]); waits use `fedingress_testsupport::eventually_async` with
//! [`DEADLINE`]. Every test under `tests/` that needs a running hub uses [`TestHub`].
//!
//! Each hub runs on its own thread with its own tokio runtime: [`TestHub::stop`] drops
//! that runtime, which ends every task of the hub (controller, gateway, DNS) and closes
//! its store, as a killed process would, so the data dir can be served again by
//! [`TestHub::start_in`].

#![allow(clippy::unwrap_used, dead_code)]

pub mod agent;
pub mod dns;

use std::time::Duration;

use clap::Parser;
use federation_apiserver::app::{Addresses, App};
use federation_apiserver::config::{self, Cli};
use fedingress_testsupport::eventually_async;
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// How long any wait in these tests may take before it fails the test.
pub const DEADLINE: Duration = Duration::from_secs(15);

/// The group's REST path.
pub const GROUP: &str = "/apis/fedingress.io/v1alpha1";
/// FederatedIngresses of the `default` namespace.
pub const INGRESSES: &str = "/apis/fedingress.io/v1alpha1/namespaces/default/federatedingresses";

/// The config every test hub starts from: dev mode, one zone, three regions.
pub const CONFIG: &str = r#"
dev: true
agents: {heartbeatIntervalMs: 200, leaseMs: 1500}
dns:
  zones:
  - name: fedingress.test
    nameservers: [ns1.fedingress.test]
    soa: {rname: hostmaster.fedingress.test, minimum: 30}
  locations:
    default: {region: europe-west1, latitude: 50.45, longitude: 3.82}
    table:
    - {cidr: 10.1.0.0/16, region: europe-west1, latitude: 50.45, longitude: 3.82}
    - {cidr: 10.2.0.0/16, region: us-east1, latitude: 33.2, longitude: -80.0}
    - {cidr: 10.3.0.0/16, region: asia-south1, latitude: 19.07, longitude: 72.87}
"#;

/// A hub served on its own thread and runtime until stopped or dropped.
pub struct TestHub {
    pub addresses: Addresses,
    pub client: reqwest::Client,
    pub data_dir: tempfile::TempDir,
    running: Running,
}

/// The hub's thread; dropping it tells the hub to stop (without waiting).
struct Running {
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl TestHub {
    /// Starts a hub with [`CONFIG`] on a fresh data dir.
    pub async fn start() -> Self {
        Self::start_in(tempfile::tempdir().unwrap()).await
    }

    /// Starts a hub on `data_dir` (a restart when it holds a previous hub's store).
    pub async fn start_in(data_dir: tempfile::TempDir) -> Self {
        let config_path = data_dir.path().join("apiserver.yaml");
        std::fs::write(&config_path, CONFIG).unwrap();
        let cli = Cli::try_parse_from([
            "federation-apiserver",
            "--config",
            config_path.to_str().unwrap(),
            "--data-dir",
            data_dir.path().join("data").to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--agent-listen",
            "127.0.0.1:0",
            "--dns-listen",
            "127.0.0.1:0",
        ])
        .unwrap();
        // A previous hub on this data dir closes its store in the background once its
        // runtime is gone: binding is retried while the store is still held.
        let deadline = tokio::time::Instant::now() + DEADLINE;
        let (addresses, running) = loop {
            let settings = config::load(&cli).unwrap();
            match spawn_hub(settings).await {
                Ok(started) => break started,
                Err(e) if e.contains("opening store") && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                Err(e) => panic!("starting the hub: {e}"),
            }
        };
        TestHub {
            addresses,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
            data_dir,
            running,
        }
    }

    /// Stops the hub: the API, the agent gateway (agents' streams end), DNS and the
    /// controller, and closes its store. Returns the data dir for [`TestHub::start_in`].
    pub async fn stop(self) -> tempfile::TempDir {
        let TestHub {
            data_dir,
            mut running,
            ..
        } = self;
        if let Some(tx) = running.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = running.thread.take() {
            tokio::time::timeout(DEADLINE, tokio::task::spawn_blocking(move || thread.join()))
                .await
                .expect("the hub did not stop")
                .unwrap()
                .unwrap();
        }
        data_dir
    }

    /// `http://<api>` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addresses.api)
    }

    pub async fn get_text(&self, path: &str) -> String {
        let response = self.client.get(self.url(path)).send().await.unwrap();
        assert!(
            response.status().is_success(),
            "GET {path}: {}",
            response.status()
        );
        response.text().await.unwrap()
    }

    /// GET `path` as JSON; panics unless it succeeds.
    pub async fn get(&self, path: &str) -> Value {
        let response = self.client.get(self.url(path)).send().await.unwrap();
        let status = response.status();
        let body = response.text().await.unwrap();
        assert!(status.is_success(), "GET {path}: {status} {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// POST `body` (if any) to `path`; panics unless it succeeds.
    pub async fn post(&self, path: &str, body: Option<&Value>) -> Value {
        let mut request = self.client.post(self.url(path));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "POST {path}: {status} {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// A JSON merge patch of `path`; panics unless it succeeds.
    pub async fn merge_patch(&self, path: &str, patch: &Value) -> Value {
        let response = self
            .client
            .patch(self.url(path))
            .header("content-type", "application/merge-patch+json")
            .body(patch.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "PATCH {path}: {status} {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// DELETE `path`; panics unless it succeeds.
    pub async fn delete(&self, path: &str) {
        let response = self.client.delete(self.url(path)).send().await.unwrap();
        let status = response.status();
        assert!(
            status.is_success(),
            "DELETE {path}: {status} {}",
            response.text().await.unwrap()
        );
    }

    /// Creates a Cluster in the europe-west1 region.
    pub async fn create_cluster(&self, name: &str) {
        let body = json!({
            "apiVersion": "fedingress.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {"region": "europe-west1", "location": {"latitude": 50.45, "longitude": 3.82}}
        });
        self.post(&format!("{GROUP}/clusters"), Some(&body)).await;
    }

    /// Issues an agent token for `cluster` (dev mode: anonymous admin).
    pub async fn issue_token(&self, cluster: &str) -> String {
        let answer = self
            .post(&format!("{GROUP}/clusters/{cluster}/token"), None)
            .await;
        answer["token"].as_str().unwrap().to_string()
    }

    /// Creates a FederatedIngress in `default`: one TCP rule on `port` to `echo:9000`,
    /// answered as `<name>.fedingress.test`, with `spec` merged into its spec (and
    /// `spec.traffic` into its traffic), e.g. `{"traffic": {"whenAllUnhealthy": "NoData"}}`.
    pub async fn create_ingress(&self, name: &str, port: u16, spec: Value) -> Value {
        let mut body = json!({
            "apiVersion": "fedingress.io/v1alpha1",
            "kind": "FederatedIngress",
            "metadata": {"name": name},
            "spec": {
                "rules": [{"protocol": "TCP", "port": port, "backend": {"service": "echo", "port": 9000}}],
                "traffic": {"dnsName": dns_name(name)},
            }
        });
        for (field, value) in spec.as_object().into_iter().flatten() {
            match (field.as_str(), value.as_object()) {
                ("traffic", Some(traffic)) => {
                    for (k, v) in traffic {
                        body["spec"]["traffic"][k] = v.clone();
                    }
                }
                _ => body["spec"][field] = value.clone(),
            }
        }
        self.post(INGRESSES, Some(&body)).await
    }

    /// The FederatedIngress `default/<name>`.
    pub async fn ingress(&self, name: &str) -> Value {
        self.get(&format!("{INGRESSES}/{name}")).await
    }

    /// The Cluster `name`.
    pub async fn cluster(&self, name: &str) -> Value {
        self.get(&format!("{GROUP}/clusters/{name}")).await
    }

    /// Waits until `default/<name>`'s status has an entry for `cluster` that `check`
    /// accepts; returns the whole object.
    pub async fn wait_entry(
        &self,
        name: &str,
        cluster: &str,
        what: &str,
        check: impl Fn(&Value, &Value) -> bool,
    ) -> Value {
        eventually_async(
            DEADLINE,
            &format!("{what} ({name} on {cluster})"),
            || async {
                let ingress = self.ingress(name).await;
                match entry(&ingress, cluster) {
                    Some(found) if check(&ingress, &found) => Ok(ingress),
                    _ => Err(ingress["status"].to_string()),
                }
            },
        )
        .await
    }
}

/// The DNS name test ingress `name` is answered as.
pub fn dns_name(name: &str) -> String {
    format!("{name}.fedingress.test")
}

/// `status.clusters[name == cluster]` of a FederatedIngress.
pub fn entry(ingress: &Value, cluster: &str) -> Option<Value> {
    ingress["status"]["clusters"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == cluster)
        .cloned()
}

/// Every value of `status.dns.records` of a FederatedIngress.
pub fn record_values(ingress: &Value) -> Vec<String> {
    ingress["status"]["dns"]["records"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["values"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// The status of condition `type_` of an object (`"True"`, `"False"`, or `""`).
pub fn condition(object: &Value, type_: &str) -> String {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Binds a hub on a new thread with its own runtime and serves it there until told to
/// stop; the runtime is dropped when serving ends.
async fn spawn_hub(settings: config::Settings) -> Result<(Addresses, Running), String> {
    let (ready_tx, ready_rx) = oneshot::channel::<Result<Addresses, String>>();
    let (shutdown, stop_rx) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("test-hub".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let app = match App::bind(settings).await {
                    Ok(app) => app,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("{e:#}")));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(app.addresses()));
                app.serve(async {
                    let _ = stop_rx.await;
                })
                .await
                .unwrap();
            });
            // Ends the controller, gateway and DNS tasks; the store closes with them.
            drop(runtime);
        })
        .unwrap();
    let mut running = Running {
        shutdown: Some(shutdown),
        thread: Some(thread),
    };
    match ready_rx.await {
        Ok(Ok(addresses)) => Ok((addresses, running)),
        Ok(Err(e)) => {
            if let Some(thread) = running.thread.take() {
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            }
            Err(e)
        }
        Err(_) => Err("the hub thread panicked while binding".into()),
    }
}
