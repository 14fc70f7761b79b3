//! Scheduling shares onto pools (being written).
