//! Test support shared by this crate's integration tests (each test binary includes it
//! with `mod support;`).

pub mod hub;
