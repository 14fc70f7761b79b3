//! Response-rate limiting (RRL) for UDP responses, modelled on Knot's `mod-rrl` and
//! BIND's `rate-limit`: a spoofed flood must not turn the server into an amplifier
//! aimed at a victim, while real resolvers (which retry over TCP when told to) are
//! still served.
//!
//! Every UDP response is charged to a token bucket keyed by (source prefix, response
//! class, name): the source address cut to `ipv4PrefixLength`/`ipv6PrefixLength` bits,
//! and a name that depends on the class as in Knot:
//!
//! | class | name |
//! |---|---|
//! | positive answer | the question's name |
//! | NODATA | the question's name (an AAAA query for an IPv4-only name is half of real traffic) |
//! | NXDOMAIN | the zone |
//! | error (REFUSED, FORMERR, NOTIMP, SERVFAIL, BADVERS, ...) | none |
//!
//! A bucket holds `burst` responses and refills at `responsesPerSecond`. Over the
//! limit the response is dropped, except every `slip`-th drop of a bucket, which is
//! sent truncated (TC=1, no records) so that a real resolver retries over TCP; TCP is
//! never limited. Sources in `exempt` are never limited.
//!
//! # Memory and hashing
//!
//! The buckets live in a fixed table of `tableSize` entries (4-way set associative, a
//! lock per set): memory is bounded whatever the number of sources. Keys are hashed
//! with SipHash-1-3 under a random per-process key (`std::hash::RandomState`), so an
//! attacker cannot aim many keys at one set. When a set is full, the entry replaced is
//! the one with the most tokens (the least limited): buckets that are limiting a flood
//! stay, fresh ones are recycled.
//!
//! Pure logic: the caller passes the time (milliseconds on any monotonic clock).

use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::Mutex;

use ipnet::IpNet;
use serde::Deserialize;

/// Entries per set of the table.
const WAYS: usize = 4;
/// Token amounts are kept in thousandths of a response.
const MILLI: u64 = 1000;

/// `dns.rrl` in the apiserver's config file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RrlConfig {
    /// Off: every UDP response is sent.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// Responses per second per (source prefix, class, name) (Knot `rate-limit`, BIND
    /// `responses-per-second`).
    #[serde(default = "default_rate")]
    pub responses_per_second: u32,
    /// Responses a bucket holds: how many may go out at once after a quiet spell.
    /// Default: one second's worth (`responsesPerSecond`).
    pub burst: Option<u32>,
    /// Every `slip`-th dropped response goes out truncated (TC=1) instead; 0: none, 1:
    /// every one (Knot `slip`, BIND `slip`).
    #[serde(default = "default_slip")]
    pub slip: u32,
    /// IPv4 sources are grouped by this prefix length.
    #[serde(default = "default_ipv4_prefix", rename = "ipv4PrefixLength")]
    pub ipv4_prefix_length: u8,
    /// IPv6 sources are grouped by this prefix length.
    #[serde(default = "default_ipv6_prefix", rename = "ipv6PrefixLength")]
    pub ipv6_prefix_length: u8,
    /// Buckets kept (Knot `table-size`); memory is about 32 bytes each.
    #[serde(default = "default_table_size")]
    pub table_size: usize,
    /// Sources never limited (Knot `whitelist`, BIND `exempt-clients`). Default:
    /// loopback (`127.0.0.0/8`, `::1/128`), which cannot be spoofed from the network;
    /// a list given replaces it.
    #[serde(default = "default_exempt")]
    pub exempt: Vec<IpNet>,
}

fn default_enabled() -> bool {
    true
}
fn default_rate() -> u32 {
    100
}
fn default_slip() -> u32 {
    2
}
fn default_ipv4_prefix() -> u8 {
    24
}
fn default_ipv6_prefix() -> u8 {
    56
}
fn default_table_size() -> usize {
    65_536
}

/// Loopback: what the defaults of `dns.rrl.exempt` and `dns.ecs.trustedResolvers` hold.
pub fn loopback_nets() -> Vec<IpNet> {
    ["127.0.0.0/8", "::1/128"]
        .iter()
        .filter_map(|net| net.parse().ok())
        .collect()
}

fn default_exempt() -> Vec<IpNet> {
    loopback_nets()
}

impl Default for RrlConfig {
    fn default() -> Self {
        RrlConfig {
            enabled: default_enabled(),
            responses_per_second: default_rate(),
            burst: None,
            slip: default_slip(),
            ipv4_prefix_length: default_ipv4_prefix(),
            ipv6_prefix_length: default_ipv6_prefix(),
            table_size: default_table_size(),
            exempt: default_exempt(),
        }
    }
}

/// Largest `tableSize` accepted (about 512 MiB of buckets).
pub const MAX_TABLE_SIZE: usize = 1 << 24;

impl RrlConfig {
    /// Checks the values; the error names the field (under `dns.rrl`).
    ///
    /// # Errors
    ///
    /// A message naming the first bad field and what it must be.
    pub fn validate(&self) -> Result<(), String> {
        if self.responses_per_second == 0 || self.responses_per_second > 1_000_000 {
            return Err(format!(
                "dns.rrl.responsesPerSecond: must be in 1..=1000000, not {}",
                self.responses_per_second
            ));
        }
        if let Some(burst) = self.burst
            && (burst == 0 || burst > 1_000_000)
        {
            return Err(format!(
                "dns.rrl.burst: must be in 1..=1000000, not {burst}"
            ));
        }
        if self.slip > 10 {
            return Err(format!(
                "dns.rrl.slip: must be in 0..=10 (0: never slip), not {}",
                self.slip
            ));
        }
        if self.ipv4_prefix_length > 32 {
            return Err(format!(
                "dns.rrl.ipv4PrefixLength: must be in 0..=32, not {}",
                self.ipv4_prefix_length
            ));
        }
        if self.ipv6_prefix_length > 128 {
            return Err(format!(
                "dns.rrl.ipv6PrefixLength: must be in 0..=128, not {}",
                self.ipv6_prefix_length
            ));
        }
        if !(16..=MAX_TABLE_SIZE).contains(&self.table_size) {
            return Err(format!(
                "dns.rrl.tableSize: must be in 16..={MAX_TABLE_SIZE}, not {}",
                self.table_size
            ));
        }
        Ok(())
    }

    fn burst(&self) -> u32 {
        self.burst.unwrap_or(self.responses_per_second)
    }
}

/// What a response is, for RRL (see the module docs for the name of each class).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseClass {
    Positive,
    Nodata,
    Nxdomain,
    Error,
}

/// `class` label values, by [`ResponseClass::index`].
pub(crate) const CLASSES: [&str; 4] = ["positive", "nodata", "nxdomain", "error"];

impl ResponseClass {
    pub(crate) fn index(self) -> usize {
        match self {
            ResponseClass::Positive => 0,
            ResponseClass::Nodata => 1,
            ResponseClass::Nxdomain => 2,
            ResponseClass::Error => 3,
        }
    }
}

/// What to do with one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Send,
    Drop,
    /// Send a truncated response instead.
    Slip,
}

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    /// 0: empty.
    tag: u64,
    /// Thousandths of a response.
    tokens: u64,
    last_ms: u64,
    drops: u32,
}

/// The rate limiter: a fixed table of token buckets (see the module docs).
pub struct Rrl {
    config: RrlConfig,
    sets: Box<[Mutex<[Entry; WAYS]>]>,
    hasher: RandomState,
    capacity: u64,
}

impl std::fmt::Debug for Rrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rrl")
            .field("config", &self.config)
            .field("sets", &self.sets.len())
            .finish()
    }
}

impl Rrl {
    /// A limiter with an empty table (config assumed valid: see [`RrlConfig::validate`];
    /// out-of-range values are clamped).
    pub fn new(config: RrlConfig) -> Self {
        let sets = (config.table_size.clamp(WAYS, MAX_TABLE_SIZE) / WAYS).max(1);
        let capacity = u64::from(config.burst().max(1)) * MILLI;
        Rrl {
            sets: (0..sets)
                .map(|_| Mutex::new([Entry::default(); WAYS]))
                .collect(),
            hasher: RandomState::new(),
            capacity,
            config,
        }
    }

    pub fn config(&self) -> &RrlConfig {
        &self.config
    }

    /// Whether responses to `source` are never limited.
    pub fn exempt(&self, source: IpAddr) -> bool {
        let source = source.to_canonical();
        self.config.exempt.iter().any(|net| net.contains(&source))
    }

    /// Charges one response of `class` for `name` (wire format, lower case; empty for
    /// errors) to `source` at `now_ms`, and says whether to send it.
    pub fn check(&self, source: IpAddr, class: ResponseClass, name: &[u8], now_ms: u64) -> Verdict {
        if self.exempt(source) {
            return Verdict::Send;
        }
        self.charge(source, class, name, now_ms)
    }

    /// [`Rrl::check`] for a `source` already known not to be [exempt](Rrl::exempt).
    pub fn charge(
        &self,
        source: IpAddr,
        class: ResponseClass,
        name: &[u8],
        now_ms: u64,
    ) -> Verdict {
        let hash = self.key_hash(source, class, name);
        let tag = hash | 1;
        let Some(set) = self.sets.get((hash >> 1) as usize % self.sets.len()) else {
            return Verdict::Send;
        };
        let mut set = set
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let rate = u64::from(self.config.responses_per_second);
        let refilled = |entry: &Entry| {
            let elapsed = now_ms.saturating_sub(entry.last_ms);
            entry
                .tokens
                .saturating_add(elapsed.saturating_mul(rate))
                .min(self.capacity)
        };
        let index = match set.iter().position(|e| e.tag == tag) {
            Some(index) => index,
            None => {
                // An empty way, else the least limited one.
                let victim = set
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, e)| if e.tag == 0 { u64::MAX } else { refilled(e) })
                    .map_or(0, |(i, _)| i);
                if let Some(entry) = set.get_mut(victim) {
                    *entry = Entry {
                        tag,
                        tokens: self.capacity,
                        last_ms: now_ms,
                        drops: 0,
                    };
                }
                victim
            }
        };
        let Some(entry) = set.get_mut(index) else {
            return Verdict::Send;
        };
        entry.tokens = refilled(entry);
        entry.last_ms = now_ms.max(entry.last_ms);
        if entry.tokens >= MILLI {
            entry.tokens -= MILLI;
            return Verdict::Send;
        }
        entry.drops = entry.drops.wrapping_add(1);
        if self.config.slip > 0 && entry.drops % self.config.slip == 0 {
            Verdict::Slip
        } else {
            Verdict::Drop
        }
    }

    fn key_hash(&self, source: IpAddr, class: ResponseClass, name: &[u8]) -> u64 {
        let (family, prefix) = match source.to_canonical() {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4);
                let len = u32::from(self.config.ipv4_prefix_length.min(32));
                let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
                (4u8, u128::from(bits & mask))
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                let len = u32::from(self.config.ipv6_prefix_length.min(128));
                let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
                (6u8, bits & mask)
            }
        };
        self.hasher
            .hash_one((family, prefix, class.index() as u8, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rrl(rate: u32, slip: u32) -> Rrl {
        Rrl::new(RrlConfig {
            responses_per_second: rate,
            slip,
            exempt: vec!["192.0.2.0/24".parse().unwrap()],
            ..RrlConfig::default()
        })
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const NAME: &[u8] = b"\x03www\x07example\x00";

    #[test]
    fn a_burst_is_sent_then_drops_and_every_slipth_is_truncated() {
        let rrl = rrl(5, 2);
        let verdicts: Vec<Verdict> = (0..11)
            .map(|_| rrl.check(ip("198.51.100.7"), ResponseClass::Positive, NAME, 1000))
            .collect();
        assert_eq!(&verdicts[..5], &[Verdict::Send; 5]);
        assert_eq!(
            &verdicts[5..],
            &[
                Verdict::Drop,
                Verdict::Slip,
                Verdict::Drop,
                Verdict::Slip,
                Verdict::Drop,
                Verdict::Slip
            ]
        );
        // 200 ms later: one more response's worth of tokens.
        assert_eq!(
            rrl.check(ip("198.51.100.7"), ResponseClass::Positive, NAME, 1200),
            Verdict::Send
        );
        assert_ne!(
            rrl.check(ip("198.51.100.7"), ResponseClass::Positive, NAME, 1200),
            Verdict::Send
        );
    }

    #[test]
    fn slip_zero_never_truncates_and_one_always_does() {
        let never = rrl(1, 0);
        let always = rrl(1, 1);
        for rrl in [&never, &always] {
            assert_eq!(
                rrl.check(ip("198.51.100.7"), ResponseClass::Error, b"", 0),
                Verdict::Send
            );
        }
        for _ in 0..5 {
            assert_eq!(
                never.check(ip("198.51.100.7"), ResponseClass::Error, b"", 0),
                Verdict::Drop
            );
            assert_eq!(
                always.check(ip("198.51.100.7"), ResponseClass::Error, b"", 0),
                Verdict::Slip
            );
        }
    }

    #[test]
    fn the_key_is_prefix_class_and_name() {
        let rrl = rrl(1, 0);
        let send = |src: &str, class, name: &[u8]| rrl.check(ip(src), class, name, 0);
        assert_eq!(
            send("198.51.100.7", ResponseClass::Positive, NAME),
            Verdict::Send
        );
        // Same /24: the same bucket.
        assert_eq!(
            send("198.51.100.200", ResponseClass::Positive, NAME),
            Verdict::Drop
        );
        // IPv4-mapped IPv6 is the IPv4 source.
        assert_eq!(
            send("::ffff:198.51.100.9", ResponseClass::Positive, NAME),
            Verdict::Drop
        );
        // Another /24, class or name: other buckets.
        assert_eq!(
            send("198.51.101.7", ResponseClass::Positive, NAME),
            Verdict::Send
        );
        assert_eq!(
            send("198.51.100.7", ResponseClass::Nodata, NAME),
            Verdict::Send
        );
        assert_eq!(
            send("198.51.100.7", ResponseClass::Positive, b"\x01a\x00"),
            Verdict::Send
        );
        // IPv6 by /56.
        assert_eq!(
            send("2001:db8:0:1::1", ResponseClass::Positive, NAME),
            Verdict::Send
        );
        assert_eq!(
            send("2001:db8:0:ff::2", ResponseClass::Positive, NAME),
            Verdict::Drop
        );
        assert_eq!(
            send("2001:db8:0:100::1", ResponseClass::Positive, NAME),
            Verdict::Send
        );
    }

    #[test]
    fn exempt_sources_are_never_limited() {
        let rrl = rrl(1, 0);
        for _ in 0..100 {
            assert_eq!(
                rrl.check(ip("192.0.2.9"), ResponseClass::Positive, NAME, 0),
                Verdict::Send
            );
        }
        assert!(rrl.exempt(ip("::ffff:192.0.2.1")));
        assert!(!rrl.exempt(ip("192.0.3.1")));
    }

    #[test]
    fn a_flood_of_fresh_keys_does_not_evict_a_limiting_bucket() {
        let rrl = Rrl::new(RrlConfig {
            responses_per_second: 1,
            burst: Some(5),
            slip: 0,
            table_size: 16,
            exempt: Vec::new(),
            ..RrlConfig::default()
        });
        let victim = ip("198.51.100.1");
        for _ in 0..5 {
            assert_eq!(
                rrl.check(victim, ResponseClass::Positive, NAME, 0),
                Verdict::Send
            );
        }
        assert_eq!(
            rrl.check(victim, ResponseClass::Positive, NAME, 0),
            Verdict::Drop
        );
        // 10,000 other sources through a 16-entry table.
        for i in 0..10_000u32 {
            let other = IpAddr::V4((0x0A00_0000 + (i << 8)).into());
            rrl.check(other, ResponseClass::Positive, NAME, 0);
        }
        assert_eq!(
            rrl.check(victim, ResponseClass::Positive, NAME, 0),
            Verdict::Drop
        );
    }

    #[test]
    fn bad_values_name_their_field() {
        let bad = |config: RrlConfig| config.validate().unwrap_err();
        assert!(
            bad(RrlConfig {
                responses_per_second: 0,
                ..RrlConfig::default()
            })
            .starts_with("dns.rrl.responsesPerSecond:")
        );
        assert!(
            bad(RrlConfig {
                slip: 11,
                ..RrlConfig::default()
            })
            .starts_with("dns.rrl.slip:")
        );
        assert!(
            bad(RrlConfig {
                ipv4_prefix_length: 33,
                ..RrlConfig::default()
            })
            .starts_with("dns.rrl.ipv4PrefixLength:")
        );
        assert!(
            bad(RrlConfig {
                table_size: 1,
                ..RrlConfig::default()
            })
            .starts_with("dns.rrl.tableSize:")
        );
        assert!(RrlConfig::default().validate().is_ok());
    }
}
