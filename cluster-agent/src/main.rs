//! `cluster-agent`: work in progress.

fn main() {}
