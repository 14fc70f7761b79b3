//! fedingress-apiserver's integration tests: the REST surface in-process over a redb
//! store, with no hub (run one area with `cargo nextest run -p fedingress-apiserver
//! --test it <module>::`).

#![allow(clippy::unwrap_used)]

mod lists;
mod pools;
mod routes;
