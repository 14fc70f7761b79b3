//! Leader election among agent replicas with a `coordination.k8s.io/v1` Lease.
