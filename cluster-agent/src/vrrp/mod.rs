//! VIP failover inside a cluster: agents on several hosts share virtual addresses
//! through keepalived (VRRPv3), and keepalived's track script is the agent's readiness,
//! so a dead host or an unready agent moves the addresses to the next host.
//!
//! - [`render`]: the `vrrp:` section (`crate::config::vrrp`) → keepalived.conf text.
//!   Pure. `cluster-agent keepalived render -c FILE` prints it for operators who run
//!   keepalived themselves.
//! - [`ready`]: `cluster-agent ready --admin ADDR`, the track script: exit 0 iff the
//!   agent's `/readyz` answers 200 in time.
//! - [`keepalived`]: with `vrrp.keepalived.manage`, the keepalived the agent runs:
//!   checked at start ([`keepalived::prepare`]), supervised and restarted
//!   ([`keepalived::Keepalived`]), reported in `/readyz` and `/metrics`, stopped on exit.
//!
//! What does not belong here: the data plane (the agent's listeners serve the virtual
//! addresses like any other local address; bind the wildcard address to serve them on
//! whichever host holds them) and the config's checks (`crate::config::vrrp`).

pub mod keepalived;
pub mod ready;
pub mod render;

pub use keepalived::Keepalived;
