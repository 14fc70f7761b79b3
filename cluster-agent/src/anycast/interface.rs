//! `anycast.interface`: the anycast addresses of applied shares as host addresses
//! (`/32`, `/128`) on an interface (`lo`), through `ip addr` (iproute2; needs
//! `CAP_NET_ADMIN`), so that the kernel takes the traffic the routes attract.
//!
//! An address stays on the interface while a share that has it is applied (its
//! listeners exist), announced or not: a withdrawn route stops attracting new traffic,
//! while connections already on their way keep reaching the listeners until they close.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use tokio::process::Command;

/// The addresses the agent put on one interface.
#[derive(Debug)]
pub(crate) struct Interface {
    name: String,
    added: BTreeSet<IpAddr>,
    /// Addresses that could not be added, with the error (retried on every sync).
    pub errors: BTreeMap<IpAddr, String>,
}

/// `a/32` or `a/128`.
fn host(address: IpAddr) -> String {
    let bits = if address.is_ipv4() { 32 } else { 128 };
    format!("{address}/{bits}")
}

/// Runs `ip` with `args`; the error is its stderr (or why it did not run).
async fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .await
        .map_err(|e| format!("running ip: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(stderr.trim().to_owned())
}

impl Interface {
    pub fn new(name: String) -> Self {
        Interface {
            name,
            added: BTreeSet::new(),
            errors: BTreeMap::new(),
        }
    }

    /// Adds the addresses of `wanted` not there yet (and those that failed before),
    /// removes the ones the agent added that are no longer wanted. Returns whether
    /// `errors` changed.
    pub async fn sync(&mut self, wanted: &BTreeSet<IpAddr>) -> bool {
        let before = self.errors.clone();
        let gone: Vec<IpAddr> = self.added.difference(wanted).copied().collect();
        for address in gone {
            self.remove(address).await;
        }
        self.errors.retain(|a, _| wanted.contains(a));
        for &address in wanted {
            if self.added.contains(&address) {
                continue;
            }
            let host = host(address);
            let mut args = vec!["addr", "replace", host.as_str(), "dev", self.name.as_str()];
            if address.is_ipv6() {
                // No duplicate address detection: the address is meant to be on many
                // hosts, and a tentative address takes no traffic.
                args.push("nodad");
            }
            match ip(&args).await {
                Ok(()) => {
                    tracing::info!(address = %address, interface = %self.name, "anycast address added to the interface");
                    self.added.insert(address);
                    self.errors.remove(&address);
                }
                Err(error) => {
                    let message = format!("adding {host} to {}: {error}", self.name);
                    tracing::error!(address = %address, interface = %self.name, error = %error, "adding the anycast address to the interface failed; its route stays withdrawn");
                    self.errors.insert(address, message);
                }
            }
        }
        before != self.errors
    }

    /// Removes every address the agent added (after the listeners closed).
    pub async fn clear(&mut self) {
        let added: Vec<IpAddr> = self.added.iter().copied().collect();
        for address in added {
            self.remove(address).await;
        }
        self.errors.clear();
    }

    async fn remove(&mut self, address: IpAddr) {
        let host = host(address);
        match ip(&["addr", "del", host.as_str(), "dev", self.name.as_str()]).await {
            Ok(()) => {
                tracing::info!(address = %address, interface = %self.name, "anycast address removed from the interface");
            }
            // Someone removed it already.
            Err(error) if error.contains("Cannot assign requested address") => {}
            Err(error) => {
                tracing::warn!(address = %address, interface = %self.name, error = %error, "removing the anycast address from the interface failed");
            }
        }
        self.added.remove(&address);
    }
}
