//! Free loopback ports: the one place the tests and the benches pick one (the benches include
//! this file with `#[path]`, so it depends on nothing but std).

use std::net::TcpListener;

/// A free loopback port: bound on port 0, read back and released, so the peer that is
/// started next can bind it.
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// `n` distinct free loopback ports: all bound at once (so none is handed out twice), then
/// released together.
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr of a bound port").port())
        .collect()
}
