//! Ports for tests that must name one before something listens on it (a child process's
//! flag, a config file, a peer's address): [`free_port`], and a port nothing listens on
//! (the same call: the listener is closed when it returns).

use std::net::{IpAddr, TcpListener};

/// A TCP port that was free on `ip` a moment ago (the kernel's pick for port 0; its
/// listener is closed again, so nothing listens there until the test binds it).
///
/// # Panics
///
/// When `ip` cannot be bound (not a local address).
pub fn free_port(ip: impl Into<IpAddr>) -> u16 {
    let ip = ip.into();
    let listener = match TcpListener::bind((ip, 0)) {
        Ok(listener) => listener,
        Err(error) => panic!("bind {ip}:0 for a free port: {error}"),
    };
    match listener.local_addr() {
        Ok(address) => address.port(),
        Err(error) => panic!("the address of a listener on {ip}:0: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::free_port;

    #[test]
    fn a_free_port_can_be_bound_again() {
        let port = free_port([127, 0, 0, 1]);
        assert_ne!(port, 0);
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    }
}
