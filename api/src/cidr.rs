//! CIDRs as the API writes them (`vipCIDR` of Clusters, IngressPools and claims): a
//! leaf module, so that every kind may parse one without depending on pools.

/// Parses a CIDR as written in `vipCIDR` (`10.0.0.96/28`, `fd00::/120`); the address
/// must be the network's first (`10.0.0.97/28` is refused: which was meant?). Every such
/// CIDR holds at least one address a VIP may take.
pub fn parse_cidr(value: &str) -> Result<ipnet::IpNet, String> {
    let net: ipnet::IpNet = value
        .parse()
        .map_err(|_| "must be a CIDR such as 10.0.0.96/28 or fd00::/120".to_owned())?;
    if net.network() != net.addr() {
        return Err(format!(
            "must name its network address ({}/{})",
            net.network(),
            net.prefix_len()
        ));
    }
    Ok(net)
}
