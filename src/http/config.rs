//! `connector.http:`: raw, validated without I/O.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use crate::config::checks::in_range;
use crate::config::Problems;

/// Where the server listens when the config says nothing.
const DEFAULT_LISTEN: ([u8; 4], u16) = ([127, 0, 0, 1], 8080);

/// `connector.http:`
#[derive(Debug, Default, Deserialize)]
pub struct RawHttp {
    /// Address and port to listen on. Default `127.0.0.1:8080` (loopback: open it to the plant
    /// network on purpose, e.g. `0.0.0.0:8080`). Port 0 picks a free port.
    pub listen: Option<String>,
    /// Largest request body accepted, in KiB; larger ones get `413`. Default 1024.
    pub max_body_kb: Option<u64>,
    /// Most connections served at once; further ones wait in the kernel's backlog. Default 256.
    pub max_connections: Option<u64>,
    /// Seconds a client has to send a request's headers, and the most an idle keep-alive
    /// connection is kept. Default 10.
    pub header_read_timeout_secs: Option<u64>,
    /// Seconds a client has to send a request's body; then `408`. Default 30.
    pub body_read_timeout_secs: Option<u64>,
    /// Bearer token of the admin endpoints. Without it those endpoints answer `404`.
    pub admin_token: Option<String>,
}

/// `connector.http:`, validated.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Largest request body in bytes.
    pub max_body_bytes: usize,
    /// Most connections served at once.
    pub max_connections: usize,
    /// Time to send headers; also the idle keep-alive limit.
    pub header_read_timeout: Duration,
    /// Time to send a body.
    pub body_read_timeout: Duration,
    /// Bearer token of the admin endpoints.
    pub admin_token: Option<String>,
}

impl HttpConfig {
    /// Validates `connector.http` (`path`); every problem goes to `p`.
    pub fn validate(raw: Option<&RawHttp>, path: &str, p: &mut Problems) -> Self {
        let default = RawHttp::default();
        let raw = raw.unwrap_or(&default);
        let listen = match raw.listen.as_deref() {
            None => SocketAddr::from(DEFAULT_LISTEN),
            Some(s) => match s.parse::<SocketAddr>() {
                Ok(a) => a,
                Err(_) => {
                    p.push(
                        format!("{path}.listen"),
                        format!("expected an address and port like 127.0.0.1:8080, got {s:?}"),
                    );
                    SocketAddr::from(DEFAULT_LISTEN)
                }
            },
        };
        let max_body_kb = in_range(
            raw.max_body_kb,
            1024,
            1..=1024 * 1024,
            format!("{path}.max_body_kb"),
            p,
        );
        let max_connections = in_range(
            raw.max_connections,
            256,
            1..=65_536,
            format!("{path}.max_connections"),
            p,
        );
        let header_secs = in_range(
            raw.header_read_timeout_secs,
            10,
            1..=3600,
            format!("{path}.header_read_timeout_secs"),
            p,
        );
        let body_secs = in_range(
            raw.body_read_timeout_secs,
            30,
            1..=3600,
            format!("{path}.body_read_timeout_secs"),
            p,
        );
        if let Some(t) = &raw.admin_token {
            if t.is_empty() {
                p.push(
                    format!("{path}.admin_token"),
                    "must not be empty (leave it out to disable the admin endpoints)",
                );
            }
        }
        HttpConfig {
            listen,
            max_body_bytes: (max_body_kb as usize).saturating_mul(1024),
            max_connections: max_connections as usize,
            header_read_timeout: Duration::from_secs(header_secs),
            body_read_timeout: Duration::from_secs(body_secs),
            admin_token: raw.admin_token.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_section_the_server_listens_on_loopback_without_admin_endpoints() {
        let mut p = Problems::default();
        let c = HttpConfig::validate(None, "connector.http", &mut p);
        assert!(p.is_empty());
        assert_eq!(c.listen, SocketAddr::from(DEFAULT_LISTEN));
        assert!(c.admin_token.is_none());
    }
}
