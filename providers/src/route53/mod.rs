//! Amazon Route53 through `aws-sdk-route53`: the federation's record sets with Route53's
//! native routing policies and health checks (see [`records`] for the mapping and
//! [`health`] for the health checks' life cycle).

pub mod alias;
pub mod api;
pub mod health;
pub mod records;
pub mod regions;
