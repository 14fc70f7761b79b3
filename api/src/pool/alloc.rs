//! VIP allocation from a CIDR (being written).
