//! The kubernetes driver against strict `tower_test::mock` scenarios, the way kube-rs
//! tests itself: every request the driver makes is expected in order (method, path,
//! query, body), answered by the test, and a missing or unexpected request fails.
//! Covered: apply (server-side apply with field manager and force, ownership check),
//! garbage collection, status from watches, a load balancer the cloud refuses or
//! leaves pending, RBAC denied, API down, a pool provision's workload written and
//! collected. Lease takeover has its own scenarios in
//! `kubernetes::lease`.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fedingress_agent::config::kubernetes::Profile;
use fedingress_agent::config::{KubernetesConfig, ProfileSetting};
use fedingress_agent::driver::Driver;
use fedingress_agent::kubernetes::KubernetesDriver;
use fedingress_agent::kubernetes::pools::PoolSource;
use fedingress_agent::kubernetes::render::{self, Desired, Kind, ObjectRef};
use fedingress_agent::kubernetes::world::{Watched, World, Writers};
use fedingress_api::cluster::Address;
use fedingress_api::ingress::IngressRule;
use fedingress_api::plan::{ClusterPlan, IngressKey, IngressShare, PoolPlan, PoolProvision};
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::client::Body;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tower_test::mock::{self, Handle, SendResponse};

const WAIT: Duration = Duration::from_secs(5);

type MockHandle = Handle<Request<Body>, Response<Body>>;

/// One request as the driver sent it.
struct Seen {
    method: Method,
    path: String,
    query: String,
    content_type: String,
    body: Value,
}

/// The scripted API server side of a mock pair.
struct Api {
    handle: MockHandle,
}

impl Api {
    fn pair() -> (Client, Api) {
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        (Client::new(service, "default"), Api { handle })
    }

    /// The next request, which must be `method` on `path`.
    async fn expect(&mut self, method: Method, path: &str) -> (Seen, SendResponse<Response<Body>>) {
        let next = tokio::time::timeout(WAIT, self.handle.next_request())
            .await
            .unwrap_or_else(|_| panic!("expected {method} {path}, but the driver sent nothing"));
        let (request, send) =
            next.unwrap_or_else(|| panic!("expected {method} {path}, but the client is gone"));
        let seen_method = request.method().clone();
        let uri = request.uri().clone();
        let content_type = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = request.into_body().collect_bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        assert_eq!(
            (&seen_method, uri.path()),
            (&method, path),
            "unexpected request {seen_method} {uri}"
        );
        let seen = Seen {
            method: seen_method,
            path: uri.path().to_owned(),
            query: uri.query().unwrap_or_default().to_owned(),
            content_type,
            body,
        };
        (seen, send)
    }

    /// The ownership read of an object that does not exist yet (answered 404), then
    /// its server-side apply; returns the apply for the test to answer.
    async fn expect_create(&mut self, object: &ObjectRef) -> (Seen, SendResponse<Response<Body>>) {
        let (seen, send) = self.expect(Method::GET, &path(object)).await;
        respond(send, StatusCode::NOT_FOUND, &not_found(&seen));
        self.expect(Method::PATCH, &path(object)).await
    }

    /// [`Api::expect_create`], answered as the API server would.
    async fn expect_created(&mut self, object: &ObjectRef) {
        let (seen, send) = self.expect_create(object).await;
        applied(send, &seen);
    }

    /// No request is left once every client is gone.
    async fn expect_no_more(mut self) {
        if let Some((request, _)) = tokio::time::timeout(WAIT, self.handle.next_request())
            .await
            .expect("the client is still alive")
        {
            panic!("unexpected request {} {}", request.method(), request.uri());
        }
    }
}

fn respond(send: SendResponse<Response<Body>>, status: StatusCode, body: &Value) {
    let response = Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap();
    send.send_response(response);
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn not_found(seen: &Seen) -> Value {
    status(404, "NotFound", &format!("{} not found", seen.path))
}

/// Answers a server-side apply with the applied object (as the API server would,
/// plus a uid).
fn applied(send: SendResponse<Response<Body>>, seen: &Seen) {
    assert_eq!(seen.method, Method::PATCH);
    assert_eq!(
        seen.content_type, "application/apply-patch+yaml",
        "{}",
        seen.path
    );
    assert!(
        seen.query.contains("fieldManager=fedingress-agent"),
        "{}",
        seen.query
    );
    assert!(seen.query.contains("force=true"), "{}", seen.query);
    let labels = &seen.body["metadata"]["labels"];
    assert_eq!(
        labels["app.kubernetes.io/managed-by"], "fedingress",
        "{}",
        seen.body
    );
    let mut object = seen.body.clone();
    object["metadata"]["uid"] = json!("uid-applied");
    object["metadata"]["resourceVersion"] = json!("7");
    respond(send, StatusCode::OK, &object);
}

// ---- fixtures ---------------------------------------------------------------------

fn share() -> IngressShare {
    let rules: Vec<IngressRule> = yaml_serde::from_str(
        "
- {protocol: HTTP, host: shop.example.com, paths: [{path: /, backend: {service: web, port: 8080}}]}
- {protocol: TCP, port: 3306, name: mysql, backend: {service: mysql, port: 3306}}
- {protocol: UDP, port: 3306, name: mysql, backend: {service: mysql, port: 3306}}
",
    )
    .unwrap();
    IngressShare {
        key: IngressKey::new("default", "shop"),
        uid: "uid-shop".into(),
        generation: 3,
        rules,
        tls: Vec::new(),
        cluster_override: None,
        anycast_addresses: Vec::new(),
    }
}

fn plan() -> ClusterPlan {
    ClusterPlan {
        ingresses: [(share().key.clone(), share())].into_iter().collect(),
        pools: Default::default(),
    }
}

fn service(namespace: &str, name: &str, labels: Value, extra: Value) -> Service {
    let mut object = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-{name}"), "labels": labels},
        "spec": {"selector": {"app": name}, "ports": [
            {"name": "tcp", "port": 3306, "protocol": "TCP", "targetPort": 3306},
            {"name": "udp", "port": 3306, "protocol": "UDP", "targetPort": 3306},
            {"name": "http", "port": 8080, "protocol": "TCP", "targetPort": 8080}]}
    });
    merge(&mut object, extra);
    serde_json::from_value(object).unwrap()
}

fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(base), Value::Object(extra)) => {
            for (k, v) in extra {
                merge(base.entry(k).or_insert(Value::Null), v);
            }
        }
        (base, extra) => *base = extra,
    }
}

fn config(profile: Profile) -> KubernetesConfig {
    KubernetesConfig {
        profile: ProfileSetting::Fixed(profile),
        load_balancer_pending_seconds: 60,
        owner_id: Some("k1".to_owned()),
        ..KubernetesConfig::default()
    }
}

/// A world whose stores the test fills; every store has listed (possibly nothing).
struct Fixture {
    world: Arc<World>,
    writers: Writers,
}

impl Fixture {
    fn new() -> Self {
        let (world, mut writers) = World::new();
        init(&mut writers.services, &[]);
        init(&mut writers.ingresses, &[]);
        init(&mut writers.config_maps, &[]);
        init::<EndpointSlice>(&mut writers.slices, &[]);
        init::<Event>(&mut writers.events, &[]);
        init::<Deployment>(&mut writers.deployments, &[]);
        init::<PodDisruptionBudget>(&mut writers.disruption_budgets, &[]);
        for watched in Watched::ALL {
            world.record(watched, None, true);
        }
        Fixture { world, writers }
    }

    fn put_service(&mut self, service: Service) {
        self.writers
            .services
            .apply_watcher_event(&watcher::Event::Apply(service));
    }
}

fn init<K>(writer: &mut kube::runtime::reflector::store::Writer<K>, objects: &[K])
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object.clone()));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

fn backends(fixture: &mut Fixture) {
    fixture.put_service(service("default", "mysql", json!({}), json!({})));
    fixture.put_service(service("default", "web", json!({}), json!({})));
}

/// What the driver will write for `plan`, in the order it writes it.
fn rendered(world: &World, profile: Profile) -> Vec<ObjectRef> {
    let settings = render::RenderSettings::new(profile);
    let render = render::render_plan(&plan(), &settings, world);
    let mut out = Vec::new();
    for share in render.shares.values() {
        assert!(share.errors.is_empty(), "{:?}", share.errors);
        out.extend(share.objects.iter().map(Desired::object_ref));
    }
    out.extend(render.shared.iter().map(Desired::object_ref));
    out
}

fn path(object: &ObjectRef) -> String {
    match object.kind {
        Kind::Ingress => format!(
            "/apis/networking.k8s.io/v1/namespaces/{}/ingresses/{}",
            object.namespace, object.name
        ),
        Kind::Service => format!(
            "/api/v1/namespaces/{}/services/{}",
            object.namespace, object.name
        ),
        Kind::ConfigMap => format!(
            "/api/v1/namespaces/{}/configmaps/{}",
            object.namespace, object.name
        ),
        Kind::Deployment => format!(
            "/apis/apps/v1/namespaces/{}/deployments/{}",
            object.namespace, object.name
        ),
        Kind::PodDisruptionBudget => format!(
            "/apis/policy/v1/namespaces/{}/poddisruptionbudgets/{}",
            object.namespace, object.name
        ),
    }
}

fn driver(
    client: Client,
    fixture: &Fixture,
    profile: Profile,
) -> (KubernetesDriver, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let driver = KubernetesDriver::new(
        client,
        Arc::clone(&fixture.world),
        config(profile),
        dir.path(),
    );
    (driver, dir)
}

// ---- scenarios --------------------------------------------------------------------

#[tokio::test]
async fn apply_writes_every_object_with_server_side_apply_then_collects_garbage() {
    let (client, mut api) = Api::pair();
    let mut fixture = Fixture::new();
    backends(&mut fixture);
    // An object of an ingress the plan no longer holds, and a user's own Service.
    fixture.put_service(service(
        "default",
        "fedingress-gone-mysql",
        json!({"app.kubernetes.io/managed-by": "fedingress", "fedingress.io/ingress": "default.gone"}),
        json!({}),
    ));
    fixture.put_service(service("default", "users-own", json!({}), json!({})));
    // Another agent's (another federation's) object: never this agent's to delete.
    fixture.put_service(service(
        "default",
        "fedingress-theirs-mysql",
        json!({"app.kubernetes.io/managed-by": "fedingress", "fedingress.io/owner": "other-federation"}),
        json!({}),
    ));
    let objects = rendered(&fixture.world, Profile::Mixed);
    assert!(objects.iter().any(|o| o.kind == Kind::Ingress));
    assert!(objects.iter().any(|o| o.kind == Kind::Service));
    let (driver, _dir) = driver(client, &fixture, Profile::Mixed);

    let server = tokio::spawn(async move {
        for object in &objects {
            // Neither is in the stores: the driver reads before it writes.
            let (seen, send) = api.expect_create(object).await;
            assert_eq!(seen.body["metadata"]["labels"]["fedingress.io/owner"], "k1");
            assert_eq!(
                seen.body["metadata"]["labels"]["fedingress.io/ingress"],
                "default.shop"
            );
            assert_eq!(
                seen.body["metadata"]["annotations"]["fedingress.io/ingress-uid"],
                "uid-shop"
            );
            applied(send, &seen);
        }
        let (seen, send) = api
            .expect(
                Method::DELETE,
                "/api/v1/namespaces/default/services/fedingress-gone-mysql",
            )
            .await;
        assert_eq!(
            seen.body["preconditions"]["uid"], "uid-fedingress-gone-mysql",
            "{}",
            seen.body
        );
        respond(
            send,
            StatusCode::OK,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        );
        api
    });
    let errors = driver.apply(&plan()).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert!(driver.readiness().is_ok());
    let api = server.await.unwrap();
    drop(driver);
    api.expect_no_more().await;
}

#[tokio::test]
async fn a_foreign_object_in_the_way_is_a_rule_error_and_never_written() {
    let (client, mut api) = Api::pair();
    let mut fixture = Fixture::new();
    backends(&mut fixture);
    let objects = rendered(&fixture.world, Profile::Mixed);
    let service_ref = objects
        .iter()
        .find(|o| o.kind == Kind::Service)
        .unwrap()
        .clone();
    let ingress_ref = objects
        .iter()
        .find(|o| o.kind == Kind::Ingress)
        .unwrap()
        .clone();
    // The user's Service has the name the driver wants (the store knows it) ...
    fixture.put_service(service(
        "default",
        &service_ref.name,
        json!({"team": "db"}),
        json!({}),
    ));
    let (driver, _dir) = driver(client, &fixture, Profile::Mixed);
    let ingress_name = ingress_ref.name.clone();
    let server = tokio::spawn(async move {
        // ... and so has the user's Ingress (the store of managed Ingresses does not).
        let (_, send) = api.expect(Method::GET, &path(&ingress_ref)).await;
        let foreign: Ingress = serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": ingress_ref.name, "labels": {"team": "web"}},
        }))
        .unwrap();
        respond(
            send,
            StatusCode::OK,
            &serde_json::to_value(foreign).unwrap(),
        );
        api
    });
    let errors = driver.apply(&plan()).await;
    let api = server.await.unwrap();
    drop(driver);
    api.expect_no_more().await;
    let text = format!("{errors:?}");
    assert_eq!(errors.len(), 3, "{text}");
    assert!(
        text.contains(&format!(
            "Ingress default/{ingress_name} exists and is not this agent's"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Service default/{} exists and is not this agent's",
            service_ref.name
        )),
        "{text}"
    );
}

#[tokio::test]
async fn rbac_denied_is_reported_per_rule_and_in_readiness() {
    let (client, mut api) = Api::pair();
    let mut fixture = Fixture::new();
    backends(&mut fixture);
    let objects = rendered(&fixture.world, Profile::Mixed);
    let (driver, _dir) = driver(client, &fixture, Profile::Mixed);
    let server = tokio::spawn(async move {
        for object in &objects {
            let (_, send) = api.expect_create(object).await;
            let message = format!(
                "{} \"{}\" is forbidden: User \"system:serviceaccount:fedingress:agent\" cannot patch resource",
                object.kind.as_str().to_lowercase(),
                object.name
            );
            respond(
                send,
                StatusCode::FORBIDDEN,
                &status(403, "Forbidden", &message),
            );
        }
        api
    });
    let errors = driver.apply(&plan()).await;
    let api = server.await.unwrap();
    assert_eq!(errors.len(), 3, "{errors:?}");
    for error in &errors {
        assert!(error.message.contains("forbidden"), "{}", error.message);
        assert!(
            error.message.contains("clusterrole.yaml"),
            "{}",
            error.message
        );
    }
    let readiness = driver.readiness().unwrap_err();
    assert!(readiness.contains("cannot patch resource"), "{readiness}");
    // Nothing was written: the share's generation is not claimed as applied.
    assert_eq!(driver.report(&plan()).ingresses[0].applied_generation, 0);
    drop(driver);
    api.expect_no_more().await;
}

#[tokio::test]
async fn api_down_is_a_rule_error_and_the_next_apply_recovers() {
    let (client, mut api) = Api::pair();
    let mut fixture = Fixture::new();
    backends(&mut fixture);
    let objects = rendered(&fixture.world, Profile::Mixed);
    let (driver, _dir) = driver(client, &fixture, Profile::Mixed);
    let down = objects.clone();
    let server = tokio::spawn(async move {
        for object in &down {
            let (_, send) = api.expect(Method::GET, &path(object)).await;
            send.send_error(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "connection refused",
            ));
        }
        api
    });
    let errors = driver.apply(&plan()).await;
    let mut api = server.await.unwrap();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors[0].message.contains("reading"),
        "{}",
        errors[0].message
    );
    assert!(driver.readiness().is_err());

    let server = tokio::spawn(async move {
        for object in &objects {
            api.expect_created(object).await;
        }
        api
    });
    assert!(driver.apply(&plan()).await.is_empty());
    assert!(driver.readiness().is_ok());
    assert_eq!(driver.report(&plan()).ingresses[0].applied_generation, 3);
    let api = server.await.unwrap();
    drop(driver);
    api.expect_no_more().await;
}

/// Applies `plan` against a mock that accepts everything; returns the driver.
async fn applied_driver(
    fixture: &Fixture,
    profile: Profile,
) -> (KubernetesDriver, tempfile::TempDir) {
    let (client, mut api) = Api::pair();
    let objects = rendered(&fixture.world, profile);
    let (driver, dir) = driver(client, fixture, profile);
    let server = tokio::spawn(async move {
        for object in &objects {
            api.expect_created(object).await;
        }
    });
    assert!(driver.apply(&plan()).await.is_empty());
    server.await.unwrap();
    (driver, dir)
}

#[tokio::test]
async fn split_load_balancers_are_reported_per_rule() {
    let mut fixture = Fixture::new();
    backends(&mut fixture);
    let (driver, _dir) = applied_driver(&fixture, Profile::Gcp).await;
    let objects = rendered(&fixture.world, Profile::Gcp);
    let report = driver.report(&plan());
    assert_eq!(report.ingresses[0].applied_generation, 3);
    assert!(report.ingresses[0].addresses.is_empty());

    // The Ingress gets a host name, the TCP and UDP Services their own IPs.
    for object in &objects {
        let address = match (object.kind, object.name.ends_with("-udp")) {
            (Kind::Ingress, _) => json!({"hostname": "web.lb.example"}),
            (Kind::Service, false) => json!({"ip": "203.0.113.6"}),
            (Kind::Service, true) => json!({"ip": "203.0.113.17"}),
            (Kind::ConfigMap | Kind::Deployment | Kind::PodDisruptionBudget, _) => continue,
        };
        match object.kind {
            Kind::Ingress => {
                let ingress: Ingress = serde_json::from_value(json!({
                    "metadata": {"namespace": "default", "name": object.name,
                                 "labels": {"app.kubernetes.io/managed-by": "fedingress"}},
                    "status": {"loadBalancer": {"ingress": [address]}}
                }))
                .unwrap();
                fixture
                    .writers
                    .ingresses
                    .apply_watcher_event(&watcher::Event::Apply(ingress));
            }
            _ => fixture.put_service(service(
                "default",
                &object.name,
                json!({"app.kubernetes.io/managed-by": "fedingress"}),
                json!({"status": {"loadBalancer": {"ingress": [address]}}}),
            )),
        }
    }
    let report = driver.report(&plan());
    let share = &report.ingresses[0];
    assert!(share.rule_errors.is_empty(), "{:?}", share.rule_errors);
    // The share answers with its first rule's (the HTTP Ingress's) address ...
    assert_eq!(share.addresses, vec![Address::hostname("web.lb.example")]);
    // ... and TCP and UDP each with their own load balancer.
    let by_rule: BTreeMap<u32, Vec<Address>> = share
        .rules
        .iter()
        .map(|r| (r.rule, r.addresses.clone()))
        .collect();
    assert_eq!(
        by_rule[&1],
        vec![Address::ip("203.0.113.6".parse().unwrap())]
    );
    assert_eq!(
        by_rule[&2],
        vec![Address::ip("203.0.113.17".parse().unwrap())]
    );
}

#[tokio::test]
async fn endpoint_slices_give_backend_health() {
    let mut fixture = Fixture::new();
    backends(&mut fixture);
    let (driver, _dir) = applied_driver(&fixture, Profile::Mixed).await;
    let slice = |service: &str, conditions: Vec<Value>| -> EndpointSlice {
        let endpoints: Vec<Value> = conditions
            .into_iter()
            .enumerate()
            .map(|(i, c)| json!({"addresses": [format!("10.0.0.{i}")], "conditions": c}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": format!("{service}-abc"),
                         "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4", "endpoints": endpoints
        }))
        .unwrap()
    };
    fixture
        .writers
        .slices
        .apply_watcher_event(&watcher::Event::Apply(slice(
            "mysql",
            vec![
                json!({"ready": true}),
                json!({}),
                json!({"ready": false, "serving": true, "terminating": true}),
            ],
        )));
    fixture
        .writers
        .slices
        .apply_watcher_event(&watcher::Event::Apply(slice(
            "web",
            vec![json!({"ready": false})],
        )));
    let report = driver.report(&plan());
    let health: BTreeMap<String, (u32, u32)> = report.ingresses[0]
        .backends
        .iter()
        .map(|b| (b.service.clone(), (b.ready, b.total)))
        .collect();
    assert_eq!(health["mysql"], (2, 3));
    assert_eq!(health["web"], (0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_refused_or_pending_load_balancer_is_a_rule_error_with_the_clouds_message() {
    let mut fixture = Fixture::new();
    backends(&mut fixture);
    let (driver, _dir) = applied_driver(&fixture, Profile::Gcp).await;
    let objects = rendered(&fixture.world, Profile::Gcp);
    let udp = objects.iter().find(|o| o.name.ends_with("-udp")).unwrap();
    fixture.put_service(service(
        "default",
        &udp.name,
        json!({"app.kubernetes.io/managed-by": "fedingress"}),
        json!({"metadata": {"uid": "uid-udp-lb"}}),
    ));
    assert!(driver.report(&plan()).ingresses[0].rule_errors.is_empty());
    let event: Event = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "lb.1"},
        "involvedObject": {"kind": "Service", "namespace": "default", "name": udp.name, "uid": "uid-udp-lb"},
        "reason": "SyncLoadBalancerFailed", "type": "Warning",
        "message": "Error syncing load balancer: failed to ensure load balancer: Protocol UDP not supported by LoadBalancer"
    }))
    .unwrap();
    fixture
        .writers
        .events
        .apply_watcher_event(&watcher::Event::Apply(event));
    let errors = driver.report(&plan()).ingresses[0].rule_errors.clone();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].rule, 2);
    assert!(
        errors[0]
            .message
            .contains("Protocol UDP not supported by LoadBalancer"),
        "{}",
        errors[0].message
    );

    // Past the pending limit every rule still without an address is an error.
    tokio::time::advance(Duration::from_secs(61)).await;
    let errors = driver.report(&plan()).ingresses[0].rule_errors.clone();
    assert_eq!(
        errors.iter().map(|e| e.rule).collect::<Vec<_>>(),
        vec![0, 1, 2],
        "{errors:?}"
    );
    assert!(
        errors[0].message.contains("has no address after 61 s"),
        "{}",
        errors[0].message
    );
}

#[tokio::test]
async fn a_watch_event_updates_the_report_and_signals_it() {
    let (client, mut api) = Api::pair();
    let (world, mut writers) = World::new();
    init::<Ingress>(&mut writers.ingresses, &[]);
    init::<ConfigMap>(&mut writers.config_maps, &[]);
    init::<Deployment>(&mut writers.deployments, &[]);
    init::<PodDisruptionBudget>(&mut writers.disruption_budgets, &[]);
    for watched in [
        Watched::Ingresses,
        Watched::ConfigMaps,
        Watched::Deployments,
        Watched::PodDisruptionBudgets,
    ] {
        world.record(watched, None, true);
    }
    let dir = tempfile::tempdir().unwrap();
    let driver = KubernetesDriver::new(
        client.clone(),
        Arc::clone(&world),
        config(Profile::Mixed),
        dir.path(),
    );
    let mut changes = driver.subscribe();
    // The Services watch: its list, then its watch, which the test holds open.
    let task = world.spawn(
        Watched::Services,
        kube::Api::<Service>::all(client),
        watcher::Config::default(),
        writers.services,
        driver.changes(),
    );
    let (seen, send) = api.expect(Method::GET, "/api/v1/services").await;
    assert!(!seen.query.contains("watch=true"), "{}", seen.query);
    let backends: Vec<Service> = vec![
        service("default", "mysql", json!({}), json!({})),
        service("default", "web", json!({}), json!({})),
    ];
    respond(
        send,
        StatusCode::OK,
        &json!({"kind": "ServiceList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"}, "items": backends}),
    );
    let (seen, watch_send) = api.expect(Method::GET, "/api/v1/services").await;
    assert!(
        seen.query.contains("watch=true") && seen.query.contains("resourceVersion=10"),
        "{}",
        seen.query
    );

    // Apply while the watch is open.
    let objects = rendered(&world, Profile::Mixed);
    let server = tokio::spawn(async move {
        for object in &objects {
            api.expect_created(object).await;
        }
        api
    });
    assert!(driver.apply(&plan()).await.is_empty());
    let mut api = server.await.unwrap();
    let service_ref = rendered(&world, Profile::Mixed)
        .into_iter()
        .find(|o| o.kind == Kind::Service)
        .unwrap();
    assert!(driver.report(&plan()).ingresses[0].addresses.is_empty());

    // The cloud writes the load balancer's address; the watch brings it.
    changes.borrow_and_update();
    let lb = service(
        "default",
        &service_ref.name,
        json!({"app.kubernetes.io/managed-by": "fedingress"}),
        json!({"metadata": {"resourceVersion": "11"}, "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.4"}]}}}),
    );
    let event = json!({"type": "ADDED", "object": lb});
    let mut line = serde_json::to_vec(&event).unwrap();
    line.push(b'\n');
    watch_send.send_response(Response::new(Body::from(line)));
    tokio::time::timeout(WAIT, changes.changed())
        .await
        .unwrap()
        .unwrap();
    let report = driver.report(&plan());
    // TCP and UDP share the Service: the share answers with its address; the HTTP
    // rule's Ingress has none yet and is listed apart.
    let share = &report.ingresses[0];
    assert_eq!(
        share.addresses,
        vec![Address::ip("198.51.100.4".parse().unwrap())]
    );
    assert_eq!(
        share.rules.iter().map(|r| r.rule).collect::<Vec<_>>(),
        vec![0]
    );
    // The watch resumes from the last resourceVersion it saw.
    let (seen, _held) = api.expect(Method::GET, "/api/v1/services").await;
    assert!(
        seen.query.contains("watch=true") && seen.query.contains("resourceVersion=11"),
        "{}",
        seen.query
    );
    task.abort();
}

// ---- pools ------------------------------------------------------------------------

const POOL_NAMESPACE: &str = "fedingress-system";

fn pool_plan(provisions: &[&str]) -> ClusterPlan {
    let provisions = provisions
        .iter()
        .map(|name| PoolProvision {
            name: (*name).to_owned(),
            replicas: 2,
            member_labels: BTreeMap::from([("pool".to_owned(), (*name).to_owned())]),
            requests: BTreeMap::from([("cpu".to_owned(), "100m".to_owned())]),
            limits: BTreeMap::new(),
        })
        .collect();
    ClusterPlan {
        ingresses: Default::default(),
        pools: Arc::new(PoolPlan {
            provisions,
            ..PoolPlan::default()
        }),
    }
}

fn pool_source() -> PoolSource {
    PoolSource {
        namespace: POOL_NAMESPACE.to_owned(),
        own_pod: Some("fedingress-agent-0".to_owned()),
        cluster: "k1".to_owned(),
        hub_addresses: vec!["https://hub.example.com:6444".to_owned()],
        hub_ca_file: None,
        hub_insecure_allow_plaintext: false,
        token_file: Some("/var/run/fedingress/token/token".into()),
        interface: "eth0".to_owned(),
        owner: Some("k1".to_owned()),
    }
}

/// The agent's own Pod as the API server returns it.
fn own_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": POOL_NAMESPACE, "name": "fedingress-agent-0"},
        "spec": {
            "containers": [{"name": "agent", "image": "registry.example.com/fedingress/cluster-agent:0.2.0",
                            "volumeMounts": [{"name": "token", "mountPath": "/var/run/fedingress/token"}]}],
            "volumes": [{"name": "token", "secret": {"secretName": "fedingress-agent-token"}}]
        }
    })
}

/// The pool's objects, in the order the driver writes them.
fn pool_objects(pool: &str) -> Vec<ObjectRef> {
    let name = render::pool::object_name(pool);
    [Kind::ConfigMap, Kind::Deployment, Kind::PodDisruptionBudget]
        .into_iter()
        .map(|kind| ObjectRef::new(kind, POOL_NAMESPACE, &name))
        .collect()
}

/// An applied object (as the watch would bring it) in the fixture's stores.
fn store_applied(fixture: &mut Fixture, body: &Value, uid: &str) {
    let mut object = body.clone();
    object["metadata"]["uid"] = json!(uid);
    match object["kind"].as_str().unwrap() {
        "ConfigMap" => fixture
            .writers
            .config_maps
            .apply_watcher_event(&watcher::Event::Apply(
                serde_json::from_value(object).unwrap(),
            )),
        "Deployment" => fixture
            .writers
            .deployments
            .apply_watcher_event(&watcher::Event::Apply(
                serde_json::from_value(object).unwrap(),
            )),
        "PodDisruptionBudget" => {
            fixture
                .writers
                .disruption_budgets
                .apply_watcher_event(&watcher::Event::Apply(
                    serde_json::from_value(object).unwrap(),
                ))
        }
        other => panic!("unexpected kind {other}"),
    }
}

#[tokio::test]
async fn a_pool_provision_is_applied_as_configmap_deployment_and_budget_then_collected() {
    let (client, mut api) = Api::pair();
    let mut fixture = Fixture::new();
    // A pool the plan no longer holds, written earlier by this agent.
    let gone = PodDisruptionBudget {
        metadata: kube::api::ObjectMeta {
            namespace: Some(POOL_NAMESPACE.to_owned()),
            name: Some("fedingress-pool-old".to_owned()),
            uid: Some("uid-old-pdb".to_owned()),
            labels: Some(BTreeMap::from([
                (
                    "app.kubernetes.io/managed-by".to_owned(),
                    "fedingress".to_owned(),
                ),
                ("fedingress.io/owner".to_owned(), "k1".to_owned()),
            ])),
            ..Default::default()
        },
        ..Default::default()
    };
    fixture
        .writers
        .disruption_budgets
        .apply_watcher_event(&watcher::Event::Apply(gone.clone()));
    let (driver, _dir) = driver(client, &fixture, Profile::Mixed);
    driver.set_pool_source(pool_source());

    let server = tokio::spawn(async move {
        // The image and the token Secret come from the agent's own Pod.
        let (_, send) = api
            .expect(
                Method::GET,
                "/api/v1/namespaces/fedingress-system/pods/fedingress-agent-0",
            )
            .await;
        respond(send, StatusCode::OK, &own_pod());
        let mut bodies = Vec::new();
        for object in pool_objects("web") {
            let (seen, send) = api.expect_create(&object).await;
            assert_eq!(seen.body["metadata"]["labels"]["fedingress.io/owner"], "k1");
            assert_eq!(seen.body["metadata"]["labels"]["fedingress.io/pool"], "web");
            bodies.push(seen.body.clone());
            applied(send, &seen);
        }
        let (seen, send) = api
            .expect(
                Method::DELETE,
                "/apis/policy/v1/namespaces/fedingress-system/poddisruptionbudgets/fedingress-pool-old",
            )
            .await;
        assert_eq!(
            seen.body["preconditions"]["uid"], "uid-old-pdb",
            "{}",
            seen.body
        );
        respond(
            send,
            StatusCode::OK,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        );
        (api, bodies)
    });
    let errors = driver.apply(&pool_plan(&["web"])).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(driver.readiness(), Ok(()));
    let (mut api, bodies) = server.await.unwrap();
    let deployment = &bodies[1];
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"],
        "registry.example.com/fedingress/cluster-agent:0.2.0"
    );
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(
        pod["volumes"][1]["secret"]["secretName"],
        "fedingress-agent-token"
    );
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(bodies[2]["spec"]["minAvailable"], 1);

    fixture
        .writers
        .disruption_budgets
        .apply_watcher_event(&watcher::Event::Delete(gone));
    // The watches bring the written objects; the pool leaves the plan: all three go,
    // each with its uid as the precondition, and the Pod is not read again.
    for (body, uid) in bodies.iter().zip(["uid-cm", "uid-deploy", "uid-pdb"]) {
        store_applied(&mut fixture, body, uid);
    }
    let server = tokio::spawn(async move {
        for (object, uid) in pool_objects("web")
            .iter()
            .zip(["uid-cm", "uid-deploy", "uid-pdb"])
        {
            let (seen, send) = api.expect(Method::DELETE, &path(object)).await;
            assert_eq!(seen.body["preconditions"]["uid"], uid, "{}", seen.body);
            respond(
                send,
                StatusCode::OK,
                &json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
            );
        }
        api
    });
    assert!(driver.apply(&pool_plan(&[])).await.is_empty());
    assert_eq!(driver.readiness(), Ok(()));
    let api = server.await.unwrap();
    drop(driver);
    api.expect_no_more().await;
}

#[tokio::test]
async fn a_pool_whose_deployment_cannot_be_written_makes_the_agent_unready_and_is_kept() {
    let (client, mut api) = Api::pair();
    let fixture = Fixture::new();
    let (driver, _dir) = driver(client, &fixture, Profile::Mixed);
    driver.set_pool_source(pool_source());
    let server = tokio::spawn(async move {
        let (_, send) = api
            .expect(
                Method::GET,
                "/api/v1/namespaces/fedingress-system/pods/fedingress-agent-0",
            )
            .await;
        respond(send, StatusCode::OK, &own_pod());
        let objects = pool_objects("web");
        api.expect_created(&objects[0]).await;
        let (_, send) = api.expect_create(&objects[1]).await;
        respond(
            send,
            StatusCode::FORBIDDEN,
            &status(
                403,
                "Forbidden",
                "deployments.apps \"fedingress-pool-web\" is forbidden: User \"system:serviceaccount:fedingress-system:fedingress-agent\" cannot patch resource \"deployments\"",
            ),
        );
        api.expect_created(&objects[2]).await;
        api
    });
    // No share is affected: no rule error; the agent says what failed.
    assert!(driver.apply(&pool_plan(&["web"])).await.is_empty());
    let api = server.await.unwrap();
    let readiness = driver.readiness().unwrap_err();
    assert!(
        readiness.contains(
            "pool web: applying Deployment fedingress-system/fedingress-pool-web: forbidden"
        ),
        "{readiness}"
    );
    assert!(
        readiness.contains("role.yaml") || readiness.contains("clusterrole.yaml"),
        "{readiness}"
    );
    drop(driver);
    api.expect_no_more().await;
}

#[tokio::test]
async fn a_pool_without_the_agents_pod_is_said_and_nothing_is_written() {
    let (client, api) = Api::pair();
    let fixture = Fixture::new();
    let (driver, _dir) = driver(client, &fixture, Profile::Mixed);
    driver.set_pool_source(PoolSource {
        own_pod: None,
        ..pool_source()
    });
    assert!(driver.apply(&pool_plan(&["web"])).await.is_empty());
    let readiness = driver.readiness().unwrap_err();
    assert!(
        readiness.contains("pools web: POD_NAME is not set"),
        "{readiness}"
    );
    drop(driver);
    api.expect_no_more().await;
}
