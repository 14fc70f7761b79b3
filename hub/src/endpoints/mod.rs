//! The hub's endpoints on the REST surface, registered through the REST layer's
//! [`Extensions`]: the `explain` subresource of FederatedIngresses ([`explain`]), the
//! `token` subresource of Clusters ([`token`]), and the hub's and the DNS server's
//! text on `/metrics`. The REST layer authenticates, checks the store, counts and
//! audits these requests as its own; the handlers authorize them.

use std::sync::Arc;

use fedingress_dns::server::DnsServer;
use fedingress_providers::publish::DnsProvider;

use crate::Sessions;
use crate::metrics::HubMetrics;
use crate::tokens::TokenStore;
use fedingress_apiserver::endpoints::extensions::Extensions;

pub mod explain;
pub mod token;

/// What the hub's endpoints serve from.
pub struct Endpoints {
    pub tokens: TokenStore,
    /// The embedded DNS server, when it runs (explain reads its snapshot).
    pub dns: Option<Arc<DnsServer>>,
    /// The configured DNS providers (explain asks which of their records a client gets).
    pub dns_providers: Vec<Arc<dyn DnsProvider>>,
    /// The sessions of connected agents (`/metrics` counts them).
    pub hub: Arc<Sessions>,
    pub metrics: Arc<HubMetrics>,
}

/// Registers the hub's subresources and metrics on `extensions`.
pub fn register(extensions: &mut Extensions, endpoints: Endpoints) {
    let Endpoints {
        tokens,
        dns,
        dns_providers,
        hub,
        metrics,
    } = endpoints;
    extensions
        .subresource(explain::subresource(dns.clone(), dns_providers))
        .subresource(token::subresource(tokens))
        .metrics(move |text| {
            let connected = hub.agents().values().filter(|a| a.connected).count();
            metrics.render(text, connected);
        });
    if let Some(dns) = dns {
        extensions.metrics(move |text| dns.write_prometheus(text));
    }
}
