//! VIP failover inside a cluster: agents on several hosts share virtual addresses
//! through keepalived (VRRPv3), and keepalived's track script is the agent's readiness,
//! so a dead host or an unready agent moves the addresses to the next host.
//!
//! - [`render`]: the `vrrp:` section (`crate::config::vrrp`), or the pools of the hub's
//!   plan with the `pools:` section (`crate::config::pools`) → keepalived.conf text.
//!   Pure. `cluster-agent keepalived render -c FILE` prints it for operators who run
//!   keepalived themselves (`vrrp:`).
//! - [`ready`]: `cluster-agent ready --admin ADDR`, the track script: exit 0 iff the
//!   agent's `/readyz` answers 200 in time.
//! - [`keepalived`]: with `vrrp.keepalived.manage` (always with `pools:`), the keepalived
//!   the agent runs: checked at start ([`keepalived::prepare`],
//!   [`keepalived::prepare_pools`]), supervised and restarted ([`keepalived::Keepalived`]),
//!   reloaded with a new config (`pools:`), reported in `/readyz` and `/metrics`,
//!   stopped on exit.
//! - [`pools`]: `pools:`, the [`crate::driver::Driver`] that loads the plan's pools into
//!   keepalived at every apply and reports their VRRP states to the hub.
//!
//! What does not belong here: the data plane (the agent's listeners serve the virtual
//! addresses like any other local address; bind the wildcard address to serve them on
//! whichever host holds them) and the config's checks (`crate::config::vrrp`,
//! `crate::config::pools`).

pub mod keepalived;
pub mod pools;
pub mod ready;
pub mod render;

pub use keepalived::Keepalived;
pub use pools::Pools;
