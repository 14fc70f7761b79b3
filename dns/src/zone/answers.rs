//! What the builder encodes for one routed ingress: the previous snapshot's answers when
//! nothing they depend on changed, the answers of its SRV target names, and its
//! renderings: one for everyone, or (location-dependent strategies) one per eligible
//! cluster, per Overflow order and per enumerable bucket; and the service views of SRV
//! services some clusters cannot serve.
//!
//! What does not belong here: the records of one rendering (see `render`), claiming names
//! (see `build`), finding a client's rendering at query time (see `lookup`).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, RwLock};

use hickory_proto::rr::{Name, RecordType};

use super::PRECOMPUTED_BUCKETS;
use super::build::Builder;
use super::contents::{Answers, Keyed, ServiceView, Target};
use super::encode::Rendered;
use super::render::{RenderCtx, address_records, fixed_or_nodata};
use crate::RoutedIngress;
use crate::location::{Bucket, Located};
use crate::routing::{self, Answer, ClientInfo, ClusterOrder, Decision, PointRouter, RouteKey};

impl Builder<'_> {
    /// The previous snapshot's encoded answers for this name, when everything they
    /// were encoded from is the same (the routed ingress, the zone, the names taken).
    /// Negative answers carry the zone's SOA, whose serial the server patches per query,
    /// so they stay right in the new snapshot.
    #[allow(clippy::type_complexity)]
    pub(super) fn reusable(
        &self,
        routed: &RoutedIngress,
        zone: usize,
        cname_allowed: bool,
        srv_names: &[Option<Name>],
        target_names: &BTreeMap<String, Name>,
        rule_targets: &[BTreeMap<String, Name>],
    ) -> Option<(Arc<Answers>, Vec<Option<Arc<ServiceView>>>)> {
        let previous = self.previous?;
        if !Arc::ptr_eq(&previous.locator, self.locator) {
            return None;
        }
        let entry = previous
            .by_dns_name
            .get(&routed.dns_name)
            .and_then(|&i| previous.ingresses.get(i))?;
        let same_zone = match (previous.zones.get(entry.zone), self.zones.get(zone)) {
            (Some(before), Some(now)) => {
                before.key == now.key
                    && before.ttl == now.ttl
                    && before.ns == now.ns
                    && before.negative_soa.ttl == now.negative_soa.ttl
            }
            _ => false,
        };
        (same_zone
            && entry.routed == *routed
            && entry.cname_allowed == cname_allowed
            && entry.srv_names == srv_names
            && entry.target_names == *target_names
            && entry.rule_targets == rule_targets)
            .then(|| (entry.answers.clone(), entry.services.clone()))
    }

    /// Encodes every answer of one ingress (`ctx.routed`) and of its SRV target names
    /// (`targets`: the IPs each holds).
    pub(super) fn encode_answers(
        &self,
        ctx: &RenderCtx<'_>,
        targets: &[(Vec<IpAddr>, Name)],
        location_dependent: bool,
    ) -> Answers {
        let ttl = ctx.ttl;
        let targets = targets
            .iter()
            .map(|(ips, target)| Target {
                a: ctx.encode(
                    target,
                    RecordType::A,
                    fixed_or_nodata(address_records(target, ttl, ips, RecordType::A)),
                ),
                aaaa: ctx.encode(
                    target,
                    RecordType::AAAA,
                    fixed_or_nodata(address_records(target, ttl, ips, RecordType::AAAA)),
                ),
            })
            .collect();
        let (rendered, per_bucket, keyed) = if location_dependent {
            self.render_keyed(ctx.routed, ctx)
        } else {
            // One decision for everyone (the default location's).
            let decision = decide(ctx.routed, None, &self.default_located());
            (
                vec![Arc::new(ctx.render(decision.answer))],
                Vec::new(),
                None,
            )
        };
        Answers {
            targets,
            rendered,
            per_bucket,
            keyed,
        }
    }

    /// The service views of the SRV services some clusters cannot serve (see
    /// [`ServiceView`]); `None` for the others.
    pub(super) fn encode_services(
        &self,
        ctx: &RenderCtx<'_>,
        location_dependent: bool,
    ) -> Vec<Option<Arc<ServiceView>>> {
        ctx.routed
            .srv
            .iter()
            .enumerate()
            .map(|(k, service)| {
                let claimed = ctx.srv_names.get(k).is_some_and(Option::is_some);
                if !claimed || service.excluded.is_empty() {
                    return None;
                }
                let mut routed = ctx.routed.clone();
                routed
                    .clusters
                    .retain(|c| !service.excluded.contains(&c.name));
                let view_ctx = RenderCtx {
                    routed: &routed,
                    only_service: Some(k),
                    ..*ctx
                };
                let answers = Arc::new(self.encode_answers(&view_ctx, &[], location_dependent));
                Some(Arc::new(ServiceView { routed, answers }))
            })
            .collect()
    }

    /// The default bucket's client (always among the locator's buckets).
    fn default_located(&self) -> Located {
        self.buckets
            .iter()
            .find(|l| l.bucket == Bucket::DEFAULT)
            .cloned()
            .unwrap_or_else(|| self.locator.locate(IpAddr::from([0u8, 0, 0, 0])))
    }

    /// The renderings of a location-dependent ingress: one per eligible cluster (Geo,
    /// Latency), one per answer of the enumerable buckets, and the bucket → rendering
    /// array (see [`IngressEntry`](super::contents::IngressEntry)).
    fn render_keyed(
        &self,
        routed: &RoutedIngress,
        ctx: &RenderCtx<'_>,
    ) -> (Vec<Arc<Rendered>>, Vec<u32>, Option<Keyed>) {
        let router = PointRouter::new(&routed.traffic, &routed.clusters);
        let mut rendered: Vec<Arc<Rendered>> = Vec::new();
        // Renderings with an equal answer share one Arc.
        let mut intern = |answer: Answer| -> u32 {
            let slot = match rendered.iter().position(|r| r.answer == answer) {
                Some(slot) => slot,
                None => {
                    rendered.push(Arc::new(ctx.render(answer)));
                    rendered.len() - 1
                }
            };
            u32::try_from(slot).unwrap_or(u32::MAX)
        };
        let mut by_cluster = vec![None; routed.clusters.len()];
        for key in router.cluster_keys() {
            if let (RouteKey::Cluster(index), Some(answer)) = (&key, router.answer(&key))
                && let Some(slot) = by_cluster.get_mut(*index as usize)
            {
                *slot = Some(intern(answer));
            }
        }
        let mut same = None;
        let mut orders: HashMap<ClusterOrder, u32> = HashMap::new();
        let mut slot_of = |located: &Located, intern: &mut dyn FnMut(Answer) -> u32| {
            let key = router.key(
                located.location.latitude,
                located.location.longitude,
                located.rtt.as_ref(),
            );
            let known = match &key {
                RouteKey::Cluster(index) => by_cluster.get(*index as usize).copied().flatten(),
                RouteKey::Same => same,
                RouteKey::Order(order) => orders.get(order).copied(),
            };
            if let Some(slot) = known {
                return slot;
            }
            let slot = intern(decide(routed, None, located).answer);
            match key {
                RouteKey::Same => same = Some(slot),
                RouteKey::Order(order) => {
                    orders.insert(order, slot);
                }
                RouteKey::Cluster(_) => {}
            }
            slot
        };
        let default = self.default_located();
        slot_of(&default, &mut intern);
        let per_bucket = if self.buckets.len() <= PRECOMPUTED_BUCKETS {
            self.buckets
                .iter()
                .map(|located| slot_of(located, &mut intern))
                .collect()
        } else {
            Vec::new()
        };
        let orders = orders
            .into_iter()
            .filter_map(|(order, slot)| Some((order, rendered.get(slot as usize)?.clone())))
            .collect();
        let keyed = Keyed {
            router,
            same,
            by_cluster,
            orders: RwLock::new(orders),
        };
        (rendered, per_bucket, Some(keyed))
    }
}

pub(super) fn decide(
    routed: &RoutedIngress,
    address: Option<IpAddr>,
    located: &Located,
) -> Decision {
    let client = ClientInfo::from_located(address, located);
    routing::decide(&routed.traffic, &routed.clusters, &client, &routed.failover)
}
