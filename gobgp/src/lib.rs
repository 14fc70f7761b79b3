//! fedingress-gobgp: the agent's BGP speaker, GoBGP (Debian's `gobgpd` 3.10.0), driven
//! through its gRPC API.
//!
//! Entry points: [`Speaker`], a connected client with a typed API (start BGP, peers,
//! announce and withdraw [`Route`]s, read the RIB), over the domain types [`Global`],
//! [`Peer`], [`Route`], [`Community`], [`PeerState`] and [`RibEntry`]; [`Gobgpd`], a
//! gobgpd child process for a managed speaker and for tests. Every failure is a
//! [`SpeakerError`] naming the call and the endpoint.
//!
//! The generated client ([`pb`], from GoBGP v3.10.0's `.proto` in `proto/api/`) is
//! checked in (no protoc needed; `tests/bootstrap.rs` regenerates it and fails on
//! drift); [`convert`] is the one module that meets it.
//!
//! What does not belong here: when to announce (the agent's anycast logic), BGP policy,
//! configuration parsing.

pub mod convert;
mod error;
mod gobgpd;
mod speaker;
mod types;

/// Generated code (prost + tonic client) for GoBGP's `apipb` package. Domain code uses
/// [`Speaker`].
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod pb {
    include!("generated/apipb.rs");
}

pub use error::SpeakerError;
pub use gobgpd::{Gobgpd, GobgpdCommand};
pub use speaker::Speaker;
pub use types::{
    BGP_PORT, Community, Global, InvalidCommunity, Peer, PeerState, RibEntry, Route, SessionState,
};
