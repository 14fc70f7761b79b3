//! VIP allocation from a CIDR: which addresses of a pool's `vipCIDR` it holds (issue 24).
//!
//! Entry points: [`allocate`] (the VIPs a pool holds after this call, given what every
//! pool holds now in [`Taken`]), [`usable`] (how many addresses of a CIDR a VIP may take)
//! and [`overlaps`] (for refusing overlapping CIDRs). Pure: the hub persists [`Taken`]
//! and calls [`allocate`] again whenever a pool or its CIDR changes.
//!
//! Addresses are handled as `u128` (IPv4 widened), and free addresses are found by walking
//! up from the lowest usable address and skipping the held ones in order, so a /16 (or a
//! /8, or an IPv6 /64) with thousands of held addresses costs what the held addresses
//! and the wanted ones cost, never the size of the CIDR.
//!
//! What does not belong here: persistence, VRRP, and validation of the API objects'
//! field paths (the caller maps an [`AllocError`] to its field).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// How many addresses of `cidr` a VIP may take.
///
/// - IPv4 prefixes up to /30: all but the network and the broadcast address.
/// - IPv4 /31 and /32 (RFC 3021 point-to-point and host routes): every address.
/// - IPv6 prefixes up to /126: all but the subnet-router anycast address (the all-zero
///   interface identifier, RFC 4291 2.6.1). /127 and /128: every address (RFC 6164).
///
/// An IPv6 /0 has 2^128 − 1 usable addresses, which is still a `u128`.
pub fn usable(cidr: &IpNet) -> u128 {
    let (first, last) = usable_range(cidr);
    last - first + 1
}

/// Whether two CIDRs share an address (always false across address families).
pub fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    match (a, b) {
        (IpNet::V4(a), IpNet::V4(b)) => a.contains(&b.network()) || b.contains(&a.network()),
        (IpNet::V6(a), IpNet::V6(b)) => a.contains(&b.network()) || b.contains(&a.network()),
        _ => false,
    }
}

/// Why `address` may not be a VIP of `cidr` though it lies in it, or `None` if it may.
pub fn unusable_reason(cidr: &IpNet, address: IpAddr) -> Option<&'static str> {
    if !same_family_contains(cidr, address) {
        return Some("outside the CIDR");
    }
    let value = to_u128(address);
    let (first, last) = usable_range(cidr);
    if (first..=last).contains(&value) {
        return None;
    }
    Some(match cidr {
        IpNet::V4(_) if value == to_u128(cidr.network()) => "the network address",
        IpNet::V4(_) => "the broadcast address",
        IpNet::V6(_) => "the subnet-router anycast address",
    })
}

/// The VIPs every pool holds: each address by one pool name. Ordered by address, so an
/// allocation reads the held addresses of a CIDR as one range.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Taken {
    by_address: BTreeMap<IpAddr, String>,
}

impl Taken {
    pub fn new() -> Self {
        Self::default()
    }

    /// The pool holding `address`, if any.
    pub fn holder(&self, address: IpAddr) -> Option<&str> {
        self.by_address.get(&address).map(String::as_str)
    }

    /// The addresses `pool` holds, lowest first.
    pub fn held_by(&self, pool: &str) -> Vec<IpAddr> {
        self.by_address
            .iter()
            .filter(|(_, holder)| holder.as_str() == pool)
            .map(|(address, _)| *address)
            .collect()
    }

    /// Makes `pool` hold exactly `vips` (typically [`allocate`]'s result): its other
    /// addresses are released. An address of `vips` held by another pool moves to `pool`
    /// (callers pass what [`allocate`] returned, which never contains one).
    pub fn set(&mut self, pool: &str, vips: &[IpAddr]) {
        self.release(pool);
        for vip in vips {
            self.by_address.insert(*vip, pool.to_string());
        }
    }

    /// Releases every address `pool` holds (the pool is gone). Returns how many.
    pub fn release(&mut self, pool: &str) -> usize {
        let before = self.by_address.len();
        self.by_address.retain(|_, holder| holder != pool);
        before - self.by_address.len()
    }

    /// Every held address with its pool, lowest address first.
    pub fn iter(&self) -> impl Iterator<Item = (IpAddr, &str)> {
        self.by_address
            .iter()
            .map(|(address, pool)| (*address, pool.as_str()))
    }

    pub fn len(&self) -> usize {
        self.by_address.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_address.is_empty()
    }
}

impl From<BTreeMap<IpAddr, String>> for Taken {
    fn from(by_address: BTreeMap<IpAddr, String>) -> Self {
        Self { by_address }
    }
}

impl<S: Into<String>> FromIterator<(IpAddr, S)> for Taken {
    fn from_iter<I: IntoIterator<Item = (IpAddr, S)>>(iter: I) -> Self {
        Self {
            by_address: iter.into_iter().map(|(a, s)| (a, s.into())).collect(),
        }
    }
}

/// Why a pool's VIPs could not be allocated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// A requested VIP (`spec.vips`) is not in the CIDR, or of the other address family.
    #[error("VIP {address} is outside {cidr}")]
    OutsideCidr { address: IpAddr, cidr: IpNet },
    /// A requested VIP is in the CIDR but may not be a VIP (see [`usable`]).
    #[error("VIP {address} is {why} of {cidr}, which is not usable as a VIP")]
    Unusable {
        address: IpAddr,
        cidr: IpNet,
        why: &'static str,
    },
    /// A requested VIP is held by another pool.
    #[error("VIP {address} is already held by pool {holder}")]
    Taken { address: IpAddr, holder: String },
    /// The CIDR has fewer usable addresses than the pool wants VIPs.
    #[error("{cidr} has {usable} usable addresses, fewer than the {wanted} VIPs wanted")]
    TooSmall {
        cidr: IpNet,
        usable: u128,
        wanted: usize,
    },
    /// The CIDR is big enough, but other pools hold too much of it.
    #[error(
        "{cidr} is exhausted: {wanted} more VIPs wanted, {free} usable addresses free (the rest are held by other pools)"
    )]
    Exhausted {
        cidr: IpNet,
        wanted: usize,
        free: u128,
    },
}

/// The VIPs `pool` holds after this call: `count` of them, or more if it requests more.
///
/// The result is made of, in this order:
/// 1. every `requested` address (the pool's `spec.vips`, duplicates dropped), each of which
///    must lie in `cidr`, be usable (see [`usable`]) and not be held by another pool;
/// 2. the addresses `pool` already holds in `taken` inside `cidr`, lowest first, up to
///    `count` in all (sticky: re-running with the same input returns the same VIPs; when
///    `count` shrinks, the lowest are kept);
/// 3. the lowest usable addresses held by no pool, up to `count` in all (deterministic:
///    two hubs agree).
///
/// It lists the requested addresses in `requested` order, then the others (2 and 3)
/// lowest first, so that after [`Taken::set`] the same call returns the same list.
///
/// An address held by another pool is never returned. Addresses `pool` holds outside
/// `cidr` (its CIDR changed) or unusable in it are not kept: the caller passes the result
/// to [`Taken::set`], which releases them.
///
/// # Errors
/// The first requested address that fails ([`AllocError::OutsideCidr`],
/// [`AllocError::Unusable`], [`AllocError::Taken`], in `requested` order), then
/// [`AllocError::TooSmall`] when `cidr` has fewer usable addresses than `count`, then
/// [`AllocError::Exhausted`] when too few of them are free.
pub fn allocate(
    cidr: &IpNet,
    taken: &Taken,
    pool: &str,
    requested: &[IpAddr],
    count: usize,
) -> Result<Vec<IpAddr>, AllocError> {
    let cidr = cidr.trunc();
    let (first, last) = usable_range(&cidr);
    let mut chosen: Vec<IpAddr> = Vec::with_capacity(count.max(requested.len()));
    let mut blocked: BTreeSet<u128> = BTreeSet::new();
    for &address in requested {
        if !same_family_contains(&cidr, address) {
            return Err(AllocError::OutsideCidr { address, cidr });
        }
        if let Some(why) = unusable_reason(&cidr, address) {
            return Err(AllocError::Unusable { address, cidr, why });
        }
        match taken.holder(address) {
            Some(holder) if holder != pool => {
                return Err(AllocError::Taken {
                    address,
                    holder: holder.to_string(),
                });
            }
            _ => {}
        }
        if blocked.insert(to_u128(address)) {
            chosen.push(address);
        }
    }
    let requested_len = chosen.len();
    let usable_count = last - first + 1;
    if usable_count < count as u128 {
        return Err(AllocError::TooSmall {
            cidr,
            usable: usable_count,
            wanted: count,
        });
    }
    // Held addresses inside the usable range, in address order.
    let range = from_u128(&cidr, first)..=from_u128(&cidr, last);
    for (address, holder) in taken.by_address.range(range) {
        let value = to_u128(*address);
        if holder == pool && chosen.len() < count && !blocked.contains(&value) {
            chosen.push(*address);
        }
        blocked.insert(value);
    }
    let wanted = count.saturating_sub(chosen.len());
    if wanted == 0 {
        chosen[requested_len..].sort();
        return Ok(chosen);
    }
    let free = usable_count - blocked.len() as u128;
    if free < wanted as u128 {
        return Err(AllocError::Exhausted { cidr, wanted, free });
    }
    // Walk up from the lowest usable address, skipping blocked runs.
    let mut next = first;
    let mut blocked = blocked.into_iter().peekable();
    while chosen.len() < count {
        while blocked.peek().is_some_and(|b| *b < next) {
            blocked.next();
        }
        if blocked.peek() == Some(&next) {
            blocked.next();
        } else {
            chosen.push(from_u128(&cidr, next));
        }
        // `free >= wanted` ends the loop by `last`; the step after `last` may not exist.
        next = next.saturating_add(1);
    }
    chosen[requested_len..].sort();
    Ok(chosen)
}

/// The first and last usable address of `cidr`, as `u128`.
fn usable_range(cidr: &IpNet) -> (u128, u128) {
    let network = to_u128(cidr.network());
    let last = to_u128(cidr.broadcast());
    let prefix = cidr.prefix_len();
    match cidr {
        IpNet::V4(_) if prefix <= 30 => (network + 1, last - 1),
        IpNet::V6(_) if prefix <= 126 => (network + 1, last),
        _ => (network, last),
    }
}

fn same_family_contains(cidr: &IpNet, address: IpAddr) -> bool {
    match (cidr, address) {
        (IpNet::V4(net), IpAddr::V4(a)) => net.contains(&a),
        (IpNet::V6(net), IpAddr::V6(a)) => net.contains(&a),
        _ => false,
    }
}

fn to_u128(address: IpAddr) -> u128 {
    match address {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// `value` as an address of `cidr`'s family (IPv4 values fit in 32 bits by construction).
fn from_u128(cidr: &IpNet, value: u128) -> IpAddr {
    match cidr {
        IpNet::V4(_) => IpAddr::V4(Ipv4Addr::from(value as u32)),
        IpNet::V6(_) => IpAddr::V6(Ipv6Addr::from(value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| ip(s)).collect()
    }

    #[test]
    fn usable_excludes_network_broadcast_and_anycast() {
        assert_eq!(usable(&net("10.0.0.0/24")), 254);
        assert_eq!(usable(&net("10.0.0.0/30")), 2);
        assert_eq!(usable(&net("10.0.0.0/31")), 2);
        assert_eq!(usable(&net("10.0.0.7/32")), 1);
        assert_eq!(usable(&net("0.0.0.0/0")), (1u128 << 32) - 2);
        assert_eq!(usable(&net("fd00::/64")), (1u128 << 64) - 1);
        assert_eq!(usable(&net("fd00::/126")), 3);
        assert_eq!(usable(&net("fd00::/127")), 2);
        assert_eq!(usable(&net("fd00::1/128")), 1);
        assert_eq!(usable(&net("::/0")), u128::MAX);
    }

    #[test]
    fn overlaps_is_containment_either_way_within_a_family() {
        assert!(overlaps(&net("10.0.0.0/16"), &net("10.0.5.0/24")));
        assert!(overlaps(&net("10.0.5.0/24"), &net("10.0.0.0/16")));
        assert!(overlaps(&net("10.0.5.0/24"), &net("10.0.5.0/24")));
        assert!(!overlaps(&net("10.0.5.0/24"), &net("10.0.6.0/24")));
        assert!(!overlaps(&net("0.0.0.0/0"), &net("::/0")));
        assert!(overlaps(&net("fd00::/8"), &net("fd12::/64")));
    }

    #[test]
    fn allocates_lowest_usable_first() {
        let got = allocate(&net("10.0.0.0/24"), &Taken::new(), "a", &[], 2).unwrap();
        assert_eq!(got, ips(&["10.0.0.1", "10.0.0.2"]));
        let got = allocate(&net("10.0.0.4/31"), &Taken::new(), "a", &[], 2).unwrap();
        assert_eq!(got, ips(&["10.0.0.4", "10.0.0.5"]));
        let got = allocate(&net("fd00::/64"), &Taken::new(), "a", &[], 1).unwrap();
        assert_eq!(got, ips(&["fd00::1"]));
        // A host-bits-set CIDR means its network.
        let got = allocate(&net("10.0.0.9/29"), &Taken::new(), "a", &[], 1).unwrap();
        assert_eq!(got, ips(&["10.0.0.9"]));
    }

    #[test]
    fn skips_addresses_held_by_other_pools() {
        let taken: Taken = [(ip("10.0.0.1"), "b"), (ip("10.0.0.3"), "c")]
            .into_iter()
            .collect();
        let got = allocate(&net("10.0.0.0/24"), &taken, "a", &[], 3).unwrap();
        assert_eq!(got, ips(&["10.0.0.2", "10.0.0.4", "10.0.0.5"]));
    }

    #[test]
    fn sticky_and_idempotent() {
        let cidr = net("10.0.0.0/24");
        let mut taken: Taken = [(ip("10.0.0.1"), "b"), (ip("10.0.0.9"), "a")]
            .into_iter()
            .collect();
        let first = allocate(&cidr, &taken, "a", &[], 2).unwrap();
        // The held VIP is kept; the new one is the lowest free.
        assert_eq!(first, ips(&["10.0.0.2", "10.0.0.9"]));
        taken.set("a", &first);
        assert_eq!(allocate(&cidr, &taken, "a", &[], 2).unwrap(), first);
        // Shrinking keeps the lowest held.
        assert_eq!(
            allocate(&cidr, &taken, "a", &[], 1).unwrap(),
            ips(&["10.0.0.2"])
        );
    }

    #[test]
    fn requested_vips_come_first_and_count_at_least() {
        let cidr = net("10.0.0.0/24");
        let taken: Taken = [(ip("10.0.0.1"), "a")].into_iter().collect();
        let got = allocate(&cidr, &taken, "a", &ips(&["10.0.0.50", "10.0.0.50"]), 1).unwrap();
        assert_eq!(got, ips(&["10.0.0.50"]));
        let got = allocate(&cidr, &taken, "a", &ips(&["10.0.0.50"]), 3).unwrap();
        assert_eq!(got, ips(&["10.0.0.50", "10.0.0.1", "10.0.0.2"]));
        let got = allocate(&cidr, &taken, "a", &ips(&["10.0.0.50", "10.0.0.51"]), 0).unwrap();
        assert_eq!(got, ips(&["10.0.0.50", "10.0.0.51"]));
    }

    #[test]
    fn requested_vips_are_checked() {
        let cidr = net("10.0.0.0/24");
        let taken: Taken = [(ip("10.0.0.7"), "b")].into_iter().collect();
        let err = allocate(&cidr, &taken, "a", &ips(&["10.0.1.1"]), 1).unwrap_err();
        assert!(matches!(err, AllocError::OutsideCidr { .. }), "{err}");
        let err = allocate(&cidr, &taken, "a", &ips(&["fd00::1"]), 1).unwrap_err();
        assert!(matches!(err, AllocError::OutsideCidr { .. }), "{err}");
        let err = allocate(&cidr, &taken, "a", &ips(&["10.0.0.0"]), 1).unwrap_err();
        assert_eq!(
            err.to_string(),
            "VIP 10.0.0.0 is the network address of 10.0.0.0/24, which is not usable as a VIP"
        );
        let err = allocate(&cidr, &taken, "a", &ips(&["10.0.0.255"]), 1).unwrap_err();
        assert!(err.to_string().contains("broadcast"), "{err}");
        let err = allocate(&net("fd00::/64"), &taken, "a", &ips(&["fd00::"]), 1).unwrap_err();
        assert!(err.to_string().contains("subnet-router anycast"), "{err}");
        let err = allocate(&cidr, &taken, "a", &ips(&["10.0.0.7"]), 1).unwrap_err();
        assert_eq!(err.to_string(), "VIP 10.0.0.7 is already held by pool b");
    }

    #[test]
    fn too_small_and_exhausted() {
        let err = allocate(&net("10.0.0.0/30"), &Taken::new(), "a", &[], 3).unwrap_err();
        assert_eq!(
            err,
            AllocError::TooSmall {
                cidr: net("10.0.0.0/30"),
                usable: 2,
                wanted: 3
            }
        );
        let taken: Taken = [(ip("10.0.0.1"), "b")].into_iter().collect();
        let err = allocate(&net("10.0.0.0/30"), &taken, "a", &[], 2).unwrap_err();
        assert_eq!(
            err,
            AllocError::Exhausted {
                cidr: net("10.0.0.0/30"),
                wanted: 2,
                free: 1
            }
        );
        assert!(err.to_string().contains("exhausted"), "{err}");
    }

    #[test]
    fn held_addresses_outside_the_cidr_are_not_kept() {
        let taken: Taken = [(ip("10.0.0.5"), "a")].into_iter().collect();
        let got = allocate(&net("10.1.0.0/24"), &taken, "a", &[], 1).unwrap();
        assert_eq!(got, ips(&["10.1.0.1"]));
    }

    #[test]
    fn large_cidrs_cost_only_what_is_held() {
        // 5,000 held addresses at the bottom of a /8 and an IPv6 /64: the next is right
        // after them, found without touching the rest of the CIDR.
        for (cidr, base) in [("10.0.0.0/8", "10.0.0.0"), ("fd00::/64", "fd00::")] {
            let cidr = net(cidr);
            let base = to_u128(ip(base));
            let taken: Taken = (1..=5_000u128)
                .map(|i| (from_u128(&cidr, base + i), format!("p{}", i % 7)))
                .collect();
            let got = allocate(&cidr, &taken, "new", &[], 2).unwrap();
            assert_eq!(
                got,
                vec![
                    from_u128(&cidr, base + 5_001),
                    from_u128(&cidr, base + 5_002)
                ]
            );
        }
    }

    /// xorshift64*: a small deterministic PRNG, so the randomized test repeats.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// The reference: one slot per address of the CIDR, holding a pool name or nothing;
    /// the usable slots computed by the textbook rule, independently of `usable_range`.
    struct Model {
        cidr: IpNet,
        slots: Vec<Option<String>>,
        usable: Vec<bool>,
    }

    impl Model {
        fn new(cidr: IpNet) -> Self {
            let size = 1usize << (cidr.max_prefix_len() - cidr.prefix_len());
            let v4 = matches!(cidr, IpNet::V4(_));
            let usable = (0..size)
                .map(|i| {
                    if v4 && cidr.prefix_len() <= 30 {
                        i != 0 && i != size - 1
                    } else if !v4 && cidr.prefix_len() <= 126 {
                        i != 0
                    } else {
                        true
                    }
                })
                .collect();
            Self {
                cidr,
                slots: vec![None; size],
                usable,
            }
        }
        fn address(&self, i: usize) -> IpAddr {
            from_u128(&self.cidr, to_u128(self.cidr.network()) + i as u128)
        }
        fn index(&self, address: IpAddr) -> Option<usize> {
            if !same_family_contains(&self.cidr, address) {
                return None;
            }
            Some((to_u128(address) - to_u128(self.cidr.network())) as usize)
        }
        fn taken(&self) -> Taken {
            (0..self.slots.len())
                .filter_map(|i| self.slots[i].clone().map(|p| (self.address(i), p)))
                .collect()
        }
        /// What `allocate` must answer: `Ok(vips)` or the error's variant name.
        fn expect(
            &self,
            pool: &str,
            requested: &[IpAddr],
            count: usize,
        ) -> Result<Vec<IpAddr>, &'static str> {
            let mut chosen: Vec<usize> = Vec::new();
            for &address in requested {
                let Some(i) = self.index(address) else {
                    return Err("OutsideCidr");
                };
                if !self.usable[i] {
                    return Err("Unusable");
                }
                if self.slots[i].as_deref().is_some_and(|p| p != pool) {
                    return Err("Taken");
                }
                if !chosen.contains(&i) {
                    chosen.push(i);
                }
            }
            if self.usable.iter().filter(|u| **u).count() < count {
                return Err("TooSmall");
            }
            for i in 0..self.slots.len() {
                if chosen.len() >= count {
                    break;
                }
                if self.usable[i] && self.slots[i].as_deref() == Some(pool) && !chosen.contains(&i)
                {
                    chosen.push(i);
                }
            }
            let free: Vec<usize> = (0..self.slots.len())
                .filter(|i| self.usable[*i] && self.slots[*i].is_none() && !chosen.contains(i))
                .collect();
            let wanted = count.saturating_sub(chosen.len());
            if free.len() < wanted {
                return Err("Exhausted");
            }
            let requested_len = requested
                .iter()
                .filter_map(|a| self.index(*a))
                .collect::<BTreeSet<_>>()
                .len();
            chosen.extend(free.into_iter().take(wanted));
            chosen[requested_len..].sort();
            Ok(chosen.into_iter().map(|i| self.address(i)).collect())
        }
        fn set(&mut self, pool: &str, vips: &[IpAddr]) {
            for slot in &mut self.slots {
                if slot.as_deref() == Some(pool) {
                    *slot = None;
                }
            }
            for vip in vips {
                let i = self.index(*vip).unwrap();
                self.slots[i] = Some(pool.to_string());
            }
        }
    }

    fn variant(err: &AllocError) -> &'static str {
        match err {
            AllocError::OutsideCidr { .. } => "OutsideCidr",
            AllocError::Unusable { .. } => "Unusable",
            AllocError::Taken { .. } => "Taken",
            AllocError::TooSmall { .. } => "TooSmall",
            AllocError::Exhausted { .. } => "Exhausted",
        }
    }

    #[test]
    fn randomized_against_a_reference() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let pools = ["a", "b", "c", "d"];
        let mut operations = 0;
        let mut outcomes: BTreeMap<&'static str, usize> = BTreeMap::new();
        while operations < 2_000 {
            // A fresh small CIDR every 50 operations: IPv4 /26../32 or IPv6 /122../128.
            let cidr = if rng.below(2) == 0 {
                let prefix = 26 + rng.below(7) as u8;
                let base = Ipv4Addr::new(10, rng.below(256) as u8, rng.below(256) as u8, 0);
                IpNet::V4(ipnet::Ipv4Net::new(base, prefix).unwrap().trunc())
            } else {
                let prefix = 122 + rng.below(7) as u8;
                let base = Ipv6Addr::new(0xfd00, rng.below(0xffff) as u16, 0, 0, 0, 0, 0, 0);
                IpNet::V6(ipnet::Ipv6Net::new(base, prefix).unwrap().trunc())
            };
            let mut model = Model::new(cidr);
            let mut taken = Taken::new();
            for _ in 0..50 {
                operations += 1;
                let pool = pools[rng.below(pools.len() as u64) as usize];
                if rng.below(5) == 0 {
                    taken.release(pool);
                    model.set(pool, &[]);
                    *outcomes.entry("release").or_default() += 1;
                    continue;
                }
                let size = model.slots.len() as u64;
                let count = rng.below(size.min(8) + 2) as usize;
                // Requested: mostly none; else addresses around the CIDR (some just outside).
                let requested: Vec<IpAddr> = (0..rng.below(4).saturating_sub(1))
                    .map(|_| {
                        let offset = rng.below(size + 2) as u128;
                        let value = (to_u128(cidr.network()) + offset).saturating_sub(1);
                        from_u128(&cidr, value)
                    })
                    .collect();
                let before = taken.held_by(pool);
                let expected = model.expect(pool, &requested, count);
                let got = allocate(&cidr, &taken, pool, &requested, count);
                match (&expected, &got) {
                    (Ok(want), Ok(vips)) => {
                        assert_eq!(vips, want, "{cidr} {pool} {requested:?} {count}");
                        // Sticky: every held VIP is kept while the count allows.
                        let kept = before.iter().filter(|v| vips.contains(v)).count();
                        assert!(kept >= before.len().min(count.saturating_sub(requested.len())));
                        for vip in vips {
                            assert!(unusable_reason(&cidr, *vip).is_none(), "{vip} in {cidr}");
                            assert!(taken.holder(*vip).is_none_or(|h| h == pool));
                        }
                        taken.set(pool, vips);
                        model.set(pool, vips);
                        *outcomes.entry("ok").or_default() += 1;
                    }
                    (Err(want), Err(err)) => {
                        assert_eq!(
                            variant(err),
                            *want,
                            "{cidr} {pool} {requested:?} {count}: {err}"
                        );
                        *outcomes.entry(want).or_default() += 1;
                    }
                    _ => panic!(
                        "{cidr} {pool} {requested:?} {count}: expected {expected:?}, got {got:?}"
                    ),
                }
                // No address is held twice (a map cannot), and every held one is usable.
                assert_eq!(taken, model.taken());
                for (address, _) in taken.iter() {
                    assert!(unusable_reason(&cidr, address).is_none());
                }
            }
        }
        // The run exercised every outcome.
        for outcome in [
            "ok",
            "release",
            "OutsideCidr",
            "Unusable",
            "Taken",
            "TooSmall",
            "Exhausted",
        ] {
            assert!(
                outcomes.get(outcome).is_some_and(|n| *n > 0),
                "{outcome}: {outcomes:?}"
            );
        }
    }
}
