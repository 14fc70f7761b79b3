//! `GET .../federatedingresses/{name}/explain?client=IP`: which cluster(s) that client
//! gets from the embedded DNS server and why (strategy, location, distances, health,
//! load, weights), computed from the snapshot being served, with the SRV answers of its
//! named L4 rules (`answer.srv`: where each rule is served for that client), and what
//! each configured DNS provider would answer.

use std::sync::Arc;

use fedingress_api::{FederatedIngress, Resource};
use fedingress_dns::server::DnsServer;
use fedingress_providers::publish::{DnsProvider, PublishedRecord};
use hickory_proto::rr::RecordType;
use http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use fedingress_apiserver::endpoints::extensions::{Served, Subresource, SubresourceRequest};
use fedingress_apiserver::endpoints::json_response;
use fedingress_apiserver::status::ApiError;

/// The `explain` subresource, answered from `dns` and `providers`.
pub fn subresource(
    dns: Option<Arc<DnsServer>>,
    providers: Vec<Arc<dyn DnsProvider>>,
) -> Subresource {
    let explain = Arc::new(Explain { dns, providers });
    Subresource::new(
        fedingress_api::GROUP,
        FederatedIngress::PLURAL,
        "explain",
        move |request| {
            let explain = explain.clone();
            async move {
                Served {
                    verb: "get",
                    result: explain.serve(request).await,
                }
            }
        },
    )
}

struct Explain {
    dns: Option<Arc<DnsServer>>,
    providers: Vec<Arc<dyn DnsProvider>>,
}

#[derive(Deserialize)]
struct ExplainParams {
    client: Option<String>,
}

impl Explain {
    async fn serve(
        &self,
        request: SubresourceRequest,
    ) -> Result<http::Response<axum::body::Body>, ApiError> {
        let SubresourceRequest {
            state,
            user,
            target,
            uri,
            ..
        } = request;
        let namespace = target
            .namespace
            .as_deref()
            .ok_or_else(|| ApiError::no_route(uri.path()))?;
        let name = target.name.clone().unwrap_or_default();
        fedingress_apiserver::auth::authorize(
            &state.authorizer,
            &user.resource_attributes(
                "get",
                fedingress_api::GROUP,
                FederatedIngress::PLURAL,
                "explain",
                namespace,
                &name,
            ),
        )?;
        let ingress = state
            .registry
            .get::<FederatedIngress>(Some(namespace), &name)
            .await?;
        let client = client_of(&uri)?;
        let Some(dns) = &self.dns else {
            return Err(ApiError::unavailable(
                "the embedded DNS server is not enabled (dns.listen / --dns-listen)",
            ));
        };
        let dns_name = ingress
            .spec
            .effective_dns_name()
            .unwrap_or_default()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let snapshot = dns.snapshot();
        let Some((located, decision)) = snapshot.explain(&dns_name, client) else {
            let zones = snapshot.zones();
            let outside = !dns_name.is_empty()
                && !zones
                    .iter()
                    .any(|z| dns_name == *z || dns_name.ends_with(&format!(".{z}")));
            // A name only DNS providers publish (issue 23 item 4): there is no embedded
            // answer to explain, and it may well be Ready.
            return Err(ApiError::unavailable(if outside {
                format!(
                    "{dns_name} lies outside the embedded DNS server's zones, so it has no answer to explain; DNS providers may publish it (see status.dns.providers and the DNSReady condition of {namespace}/{name})"
                )
            } else {
                format!(
                    "{dns_name} is not served yet (see the DNSReady condition of {namespace}/{name})"
                )
            }));
        };
        let lookup_addresses = |qtype| {
            snapshot
                .lookup(&dns_name, qtype, client)
                .answers
                .iter()
                .map(|r| r.data.to_string())
                .collect::<Vec<_>>()
        };
        let srv = srv_answers(&snapshot, &ingress, &dns_name, client);
        let providers = self.provider_explanations(&ingress, &dns_name, &located.location);
        let body = json!({
            "kind": "RoutingExplanation",
            "apiVersion": fedingress_api::API_VERSION,
            "ingress": format!("{namespace}/{name}"),
            "dnsName": dns_name,
            "client": client.map(|c| c.to_string()),
            "location": located,
            "strategy": decision.strategy.as_str(),
            "answer": {
                "clusters": decision.answer.clusters(),
                "detail": decision.answer,
                "records": lookup_addresses(RecordType::A).into_iter().chain(lookup_addresses(RecordType::AAAA)).collect::<Vec<_>>(),
                "srv": srv,
            },
            "reasons": decision.reasons,
            "summary": decision.summary,
            "providers": providers,
            "pools": pool_bindings(&ingress),
        });
        Ok(json_response(StatusCode::OK, &body))
    }
}

/// Per placed cluster with pools: the IngressPool the share is bound to (and the one it
/// is leaving), and why, from the ingress's status.
fn pool_bindings(ingress: &FederatedIngress) -> Vec<Value> {
    ingress
        .status
        .iter()
        .flat_map(|s| &s.clusters)
        .filter(|c| c.pool.is_some() || !c.pool_reason.is_empty())
        .map(|c| {
            json!({
                "cluster": c.name,
                "pool": c.pool,
                "previousPool": c.previous_pool,
                "reason": c.pool_reason,
            })
        })
        .collect()
}

impl Explain {
    /// Per configured DNS provider that publishes `dns_name`: which of the record sets it
    /// holds (as the ingress's `status.dns.providers` lists them) a client at `client`
    /// would get, in the provider's own words. Every replica can answer: the records come
    /// from the stored status, the choice from the provider's policy, no sync needed.
    fn provider_explanations(
        &self,
        ingress: &FederatedIngress,
        dns_name: &str,
        client: &fedingress_dns::Location,
    ) -> Vec<Value> {
        let statuses = ingress
            .status
            .as_ref()
            .and_then(|s| s.dns.as_ref())
            .map(|d| d.providers.as_slice())
            .unwrap_or_default();
        self.providers
            .iter()
            // The status lists exactly the providers that publish this name (not those
            // that only delegate its zone to the embedded server).
            .filter(|p| p.manages(dns_name) && statuses.iter().any(|s| s.name == p.name()))
            .map(|provider| {
                let status = statuses.iter().find(|s| s.name == provider.name());
                let records: Vec<PublishedRecord> = status
                    .map(|s| s.records.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .filter(|r| r.name.trim_end_matches('.').eq_ignore_ascii_case(dns_name))
                    .map(|r| PublishedRecord {
                        name: r.name.clone(),
                        type_: r.type_.clone(),
                        set_identifier: r.set_identifier.clone(),
                        policy: r.policy.clone(),
                        values: r.values.clone(),
                        health_check: r.health_check.clone(),
                    })
                    .collect();
                let answer = if records.is_empty() {
                    "holds no record for this name yet".to_string()
                } else {
                    provider.explain(&records, client)
                };
                json!({
                    "name": provider.name(),
                    "type": provider.kind(),
                    "synced": status.is_some_and(|s| s.synced),
                    "message": status.map(|s| s.message.as_str()).unwrap_or_default(),
                    "records": records,
                    "answer": answer,
                })
            })
            .collect()
    }
}

/// The `client` query parameter: an IP address, or none.
fn client_of(uri: &http::Uri) -> Result<Option<std::net::IpAddr>, ApiError> {
    let params = axum::extract::Query::<ExplainParams>::try_from_uri(uri)
        .map(|q| q.0)
        .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))?;
    match params.client.as_deref().filter(|c| !c.is_empty()) {
        Some(text) => text
            .parse()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("client: {text:?} is not an IP address"))),
        None => Ok(None),
    }
}

/// The SRV answers of the L4 rules that carry a name, for `client`: they point where
/// each rule is served (a rule may have a load balancer of its own).
fn srv_answers(
    snapshot: &fedingress_dns::zone::Snapshot,
    ingress: &FederatedIngress,
    dns_name: &str,
    client: Option<std::net::IpAddr>,
) -> Vec<Value> {
    let mut srv_names: Vec<String> = ingress
        .spec
        .rules
        .iter()
        .filter(|r| r.protocol.is_l4())
        .filter_map(|r| {
            let name = r.name.as_deref()?;
            Some(format!("_{name}._{}.{dns_name}", r.protocol.transport()))
        })
        .collect();
    srv_names.dedup();
    srv_names
        .iter()
        .map(|name| {
            let records: Vec<String> = snapshot
                .lookup(name, RecordType::SRV, client)
                .answers
                .iter()
                .map(|r| r.data.to_string())
                .collect();
            json!({"name": name, "records": records})
        })
        .collect()
}
