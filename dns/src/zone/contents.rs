//! What a [`Snapshot`] holds: its zones (SOA, NS, glue, nameserver answers), the name
//! table (who owns each name: an ingress, an SRV name, a target name, a nameserver or
//! nothing), and per ingress its encoded answers, with the renderings of
//! location-dependent ones per route key and bucket; and the snapshot's accessors.
//!
//! What does not belong here: filling these (see `build` and `answers`), reading them per
//! question (see `lookup`, `status`, `transfer`).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, RwLock};

use hickory_proto::rr::{Name, Record};

use super::encode::{Prepared, Rendered};
use crate::RoutedIngress;
use crate::location::{Bucket, Located, Locator};
use crate::routing::{ClusterOrder, PointRouter};

#[derive(Debug)]
pub(super) struct Zone {
    pub(super) text: String,
    pub(super) origin: Name,
    pub(super) key: Vec<u8>,
    pub(super) soa: Record,
    pub(super) negative_soa: Record,
    pub(super) ns: Vec<Record>,
    /// A/AAAA of the in-zone nameservers: the additional section of NS answers.
    pub(super) glue: Vec<Record>,
    /// A/AAAA answers per in-zone nameserver ([`Owner::Nameserver`]).
    pub(super) nameservers: Vec<Target>,
    pub(super) ttl: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Owner {
    /// The apex or an empty non-terminal: exists, holds nothing of its own.
    Empty,
    Ingress(usize),
    /// (ingress, SRV service)
    Srv(usize, usize),
    /// (ingress, target)
    Target(usize, usize),
    /// (zone, in-zone nameserver): its A/AAAA.
    Nameserver(usize, usize),
}

#[derive(Debug)]
pub(super) struct Node {
    pub(super) zone: usize,
    pub(super) name: Name,
    pub(super) owner: Owner,
    pub(super) apex: bool,
}

#[derive(Debug)]
pub(super) struct Target {
    pub(super) a: Prepared,
    pub(super) aaaa: Prepared,
}

/// The SRV answers of one service routed among the clusters that can serve it (the
/// ingress's clusters minus [`crate::SrvService::excluded`]).
#[derive(Debug)]
pub(super) struct ServiceView {
    /// The ingress with only those clusters.
    pub(super) routed: RoutedIngress,
    /// Renderings of this service's SRV answer only (`targets` is empty: target names
    /// belong to the ingress's own [`Answers`]).
    pub(super) answers: Arc<Answers>,
}

/// What a lookup renders from: the ingress's own answers, or a service view's.
#[derive(Clone, Copy)]
pub(super) struct View<'a> {
    pub(super) routed: &'a RoutedIngress,
    pub(super) answers: &'a Answers,
    /// A service view renders only this service.
    pub(super) only_service: Option<usize>,
}

#[derive(Debug)]
pub(super) struct IngressEntry {
    pub(super) routed: RoutedIngress,
    pub(super) name: Name,
    pub(super) zone: usize,
    pub(super) ttl: u32,
    pub(super) location_dependent: bool,
    /// Whether answers may be a CNAME (not at a zone apex).
    pub(super) cname_allowed: bool,
    /// Parallel to `routed.srv`; `None` where the name was taken by another ingress.
    pub(super) srv_names: Vec<Option<Name>>,
    /// Target name per cluster name (clusters with IPs, not cordoned).
    pub(super) target_names: BTreeMap<String, Name>,
    /// Parallel to `routed.srv`: target name per cluster that serves that rule on IPs of
    /// its own ([`crate::SrvService::addresses`]).
    pub(super) rule_targets: Vec<BTreeMap<String, Name>>,
    /// The encoded answers: shared with the next snapshot when nothing they depend on
    /// changed ([`Snapshot::rebuild`]).
    pub(super) answers: Arc<Answers>,
    /// Parallel to `routed.srv`: the service's own routing when some clusters cannot
    /// serve it; `None`: it follows `answers`. Shared like `answers`.
    pub(super) services: Vec<Option<Arc<ServiceView>>>,
}

impl IngressEntry {
    pub(super) fn view(&self) -> View<'_> {
        View {
            routed: &self.routed,
            answers: &self.answers,
            only_service: None,
        }
    }

    /// What SRV service `k` is answered from.
    pub(super) fn service_view(&self, k: usize) -> View<'_> {
        match self.services.get(k) {
            Some(Some(service)) => View {
                routed: &service.routed,
                answers: &service.answers,
                only_service: Some(k),
            },
            _ => self.view(),
        }
    }
}

/// Everything encoded for one ingress.
#[derive(Debug)]
pub(super) struct Answers {
    pub(super) targets: Vec<Target>,
    /// Distinct renderings made at build time (one per distinct
    /// [`Answer`](crate::routing::Answer); index 0 is everyone's when the answer does not
    /// depend on the client).
    pub(super) rendered: Vec<Arc<Rendered>>,
    /// Location-dependent only: `rendered` index of enumerable bucket `i`; empty when
    /// the locator has more than [`PRECOMPUTED_BUCKETS`](super::PRECOMPUTED_BUCKETS)
    /// buckets (keys per query then).
    pub(super) per_bucket: Vec<u32>,
    /// Location-dependent only: renderings per [`RouteKey`](crate::routing::RouteKey).
    pub(super) keyed: Option<Keyed>,
}

/// The renderings of a location-dependent ingress per [`RouteKey`]. Memory depends on
/// the clusters only: one rendering per eligible cluster (Geo, Latency), at most
/// [`MAX_ORDER_RENDERINGS`] orders (Overflow), never on the number of clients.
///
/// [`RouteKey`]: crate::routing::RouteKey
/// [`MAX_ORDER_RENDERINGS`]: super::MAX_ORDER_RENDERINGS
#[derive(Debug)]
pub(super) struct Keyed {
    pub(super) router: PointRouter,
    /// `rendered` index for [`RouteKey::Same`](crate::routing::RouteKey::Same) (no
    /// eligible cluster).
    pub(super) same: Option<u32>,
    /// `rendered` index per [`RouteKey::Cluster`](crate::routing::RouteKey::Cluster) (by
    /// sorted cluster index), made at build time for every eligible cluster: no lock on
    /// the query path.
    pub(super) by_cluster: Vec<Option<u32>>,
    /// Overflow: renderings per order, filled at build time from the enumerable
    /// buckets and at query time for new orders (at most
    /// [`MAX_ORDER_RENDERINGS`](super::MAX_ORDER_RENDERINGS)).
    pub(super) orders: RwLock<HashMap<ClusterOrder, Arc<Rendered>>>,
}

/// Everything the DNS server answers, immutable once built (apart from the bounded map
/// of Overflow renderings per distance order). Share it as `Arc<Snapshot>`.
pub struct Snapshot {
    pub(super) serial: u32,
    pub(super) zones: Vec<Zone>,
    pub(super) names: HashMap<Vec<u8>, Node>,
    pub(super) ingresses: Vec<IngressEntry>,
    pub(super) by_dns_name: HashMap<String, usize>,
    pub(super) locator: Arc<Locator>,
    pub(super) buckets: Vec<Located>,
    pub(super) bucket_index: HashMap<Bucket, usize>,
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("serial", &self.serial)
            .field(
                "zones",
                &self.zones.iter().map(|z| &z.text).collect::<Vec<_>>(),
            )
            .field("names", &self.names.len())
            .field("ingresses", &self.ingresses.len())
            .field("buckets", &self.buckets.len())
            .finish()
    }
}

impl Snapshot {
    /// The serial of the zones' SOA records.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    /// The zones served (apex names, lower case, no trailing dot).
    pub fn zones(&self) -> Vec<&str> {
        self.zones.iter().map(|z| z.text.as_str()).collect()
    }

    /// The locator answers are routed with.
    pub fn locator(&self) -> &Arc<Locator> {
        &self.locator
    }
}
