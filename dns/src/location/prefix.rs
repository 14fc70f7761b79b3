//! Longest-prefix match over a fixed set of networks in O(log n), with the ECS scope of
//! the match.
//!
//! [`PrefixTable`] turns the networks of one table (the config's location table or the
//! RTT table) into, per address family, a sorted list of *elementary intervals*: maximal
//! runs of consecutive addresses that have the same innermost (longest) matching
//! network, or none. Networks are prefixes, so any two either nest or are disjoint; one
//! sweep over them sorted by (start, prefix length) with a stack of the networks that
//! are open gives every interval its innermost network. A lookup is a binary search for
//! the interval holding the address.
//!
//! # Scope
//!
//! The scope of an address `ip` is the shortest prefix length `L` (at least the
//! match's) such that every address of `ip/L` has the same match as `ip` (see
//! [`crate::location`]). With `[a, b]` the interval holding `ip`, `ip/L` has one match
//! exactly when it lies inside `[a, b]`, i.e. when it holds neither `a - 1` nor `b + 1`;
//! `ip/L` holds `x` exactly when `L <= common_prefix(ip, x)`. So
//!
//! ```text
//! scope = max(common_prefix(ip, a-1) + 1 if a > 0, common_prefix(ip, b+1) + 1 if b < max, 0)
//! ```
//!
//! It is at least the match's prefix length on its own: the interval lies inside the
//! matched network, and any shorter prefix around `ip` holds the whole network and
//! more. Intervals are maximal (neighbours with the same match are merged), so the
//! formula gives the shortest such `L`, the same as the linear definition (kept as
//! `longest_match_linear` in the tests, which compare the two on random tables).
//!
//! What does not belong here: normalising networks and addresses (callers pass
//! canonical ones: host bits cleared, IPv4-mapped IPv6 turned into IPv4).

use std::cmp::Reverse;
use std::net::IpAddr;

use ipnet::IpNet;

/// Marks an interval without a matching network.
const NONE: u32 = u32::MAX;

/// The networks of one table, ready for longest-prefix lookups (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PrefixTable {
    v4: Family,
    v6: Family,
}

/// The elementary intervals of one address family; addresses as integers (IPv4 in the
/// low 32 bits).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Family {
    /// 32 or 128.
    bits: u32,
    /// Start of every interval, ascending; the first is 0 and each interval ends where
    /// the next starts (the last at the family's largest address).
    starts: Vec<u128>,
    /// The index of the interval's innermost network, or [`NONE`].
    values: Vec<u32>,
}

impl Default for Family {
    fn default() -> Self {
        Family::build(128, Vec::new())
    }
}

impl PrefixTable {
    /// The table of `nets` (canonical; `Some(index)` of a lookup indexes this slice).
    /// When one network is listed twice, the first listing wins, as in a linear scan.
    ///
    /// Tables beyond `u32::MAX - 1` networks are not supported (later networks are
    /// ignored).
    pub(crate) fn new(nets: &[IpNet]) -> Self {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for (index, net) in nets.iter().enumerate() {
            let Ok(index) = u32::try_from(index) else {
                break;
            };
            if index == NONE {
                break;
            }
            match net {
                IpNet::V4(net) => v4.push(Span {
                    start: u128::from(u32::from(net.network())),
                    end: u128::from(u32::from(net.broadcast())),
                    len: net.prefix_len(),
                    index,
                }),
                IpNet::V6(net) => v6.push(Span {
                    start: u128::from(net.network()),
                    end: u128::from(net.broadcast()),
                    len: net.prefix_len(),
                    index,
                }),
            }
        }
        PrefixTable {
            v4: Family::build(32, v4),
            v6: Family::build(128, v6),
        }
    }

    /// The index of the longest network holding `ip` (canonical), and the ECS scope:
    /// the shortest prefix length around `ip`, at least the match's, within which every
    /// address has the same match.
    pub(crate) fn lookup(&self, ip: IpAddr) -> (Option<usize>, u8) {
        match ip {
            IpAddr::V4(v4) => self.v4.lookup(u128::from(u32::from(v4))),
            IpAddr::V6(v6) => self.v6.lookup(u128::from(v6)),
        }
    }

    /// Number of elementary intervals (both families), for tests.
    #[cfg(test)]
    pub(crate) fn intervals(&self) -> usize {
        self.v4.starts.len() + self.v6.starts.len()
    }
}

/// One network as an address range.
struct Span {
    start: u128,
    end: u128,
    len: u8,
    index: u32,
}

impl Family {
    fn max(bits: u32) -> u128 {
        if bits >= 128 {
            u128::MAX
        } else {
            (1u128 << bits) - 1
        }
    }

    fn build(bits: u32, mut spans: Vec<Span>) -> Family {
        // Outer networks before the inner ones they hold; of two equal networks the
        // first listed ends up innermost (pushed last), so it wins.
        spans.sort_unstable_by_key(|s| (s.start, s.len, Reverse(s.index)));
        let mut family = Family {
            bits,
            starts: Vec::with_capacity(spans.len() * 2 + 1),
            values: Vec::with_capacity(spans.len() * 2 + 1),
        };
        // The first address not yet in an interval (`None`: past the family's end).
        let mut cursor: Option<u128> = Some(0);
        // Open networks: (end, index), innermost last.
        let mut stack: Vec<(u128, u32)> = Vec::new();
        for span in &spans {
            while let Some(&(end, index)) = stack.last()
                && end < span.start
            {
                if let Some(from) = cursor
                    && from <= end
                {
                    family.push(from, index);
                }
                cursor = end.checked_add(1);
                stack.pop();
            }
            if let Some(from) = cursor
                && from < span.start
            {
                family.push(from, stack.last().map_or(NONE, |&(_, index)| index));
            }
            stack.push((span.end, span.index));
            cursor = Some(span.start);
        }
        while let Some((end, index)) = stack.pop() {
            if let Some(from) = cursor
                && from <= end
            {
                family.push(from, index);
            }
            cursor = end.checked_add(1);
        }
        if let Some(from) = cursor
            && from <= Self::max(bits)
        {
            family.push(from, NONE);
        }
        family.starts.shrink_to_fit();
        family.values.shrink_to_fit();
        family
    }

    /// Appends the interval starting at `start`, merged into the previous one when both
    /// have the same match.
    fn push(&mut self, start: u128, value: u32) {
        if self.values.last() != Some(&value) {
            self.starts.push(start);
            self.values.push(value);
        }
    }

    /// Common prefix length of two addresses of this family.
    fn common_prefix(&self, a: u128, b: u128) -> u32 {
        (a ^ b).leading_zeros().saturating_sub(128 - self.bits)
    }

    fn lookup(&self, x: u128) -> (Option<usize>, u8) {
        // `starts[0]` is 0, so at least one start is <= x.
        let i = self.starts.partition_point(|&s| s <= x).saturating_sub(1);
        let (Some(&a), Some(&value)) = (self.starts.get(i), self.values.get(i)) else {
            return (None, 0);
        };
        let mut scope = 0;
        if a > 0 {
            scope = scope.max(self.common_prefix(x, a - 1) + 1);
        }
        if let Some(&next) = self.starts.get(i + 1) {
            // The interval ends at next - 1, so next = b + 1 exists.
            scope = scope.max(self.common_prefix(x, next) + 1);
        }
        let matched = (value != NONE).then_some(value as usize);
        (matched, u8::try_from(scope.min(self.bits)).unwrap_or(128))
    }
}
