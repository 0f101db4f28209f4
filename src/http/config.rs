//! `connector.http:`: raw, validated without I/O (the box's host name is read when the server
//! starts, in `hosts.rs`).

use std::net::SocketAddr;
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use serde::Deserialize;

use super::hosts::{AllowedHosts, Authority};
use crate::config::checks::{checked_token, in_range, TokenRule};
use crate::config::{Problem, Problems};

/// Where the server listens when the config says nothing.
const DEFAULT_LISTEN: ([u8; 4], u16) = ([127, 0, 0, 1], 8080);
/// Most `allowed_hosts` entries.
const MAX_ALLOWED_HOSTS: usize = 256;

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
    /// Bearer token of the admin endpoints, at least 16 characters (e.g. `openssl rand -hex
    /// 16`). Without it those endpoints answer `404`.
    pub admin_token: Option<String>,
    /// Host names the connector answers besides the ones it always answers (every IP address,
    /// `localhost`, the box's host name and `<hostname>.local`): e.g. the box's DNS name, or
    /// the name of a reverse proxy in front of it. Each is `name` or `name:port`; a name
    /// without a port is answered on any port. A request whose `Host` is another name gets
    /// `421` (this stops DNS-rebinding pages). The live view accepts pages of the host they
    /// were requested from, and pages of an entry written with its port (a reverse proxy's
    /// `gw.plant:443`). Default: none; at most 256.
    pub allowed_hosts: Option<Vec<String>>,
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
    /// `allowed_hosts`: names answered besides the built-in ones.
    pub allowed_hosts: Vec<Authority>,
}

impl HttpConfig {
    /// Validates `connector.http` (`path`); every problem goes to `p`. `demo`: the embedded
    /// demo's allowance of a short admin token on loopback (a warning instead of an error).
    pub fn validate(
        raw: Option<&RawHttp>,
        path: &str,
        demo: bool,
        p: &mut Problems,
        warnings: &mut Vec<Problem>,
    ) -> Self {
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
            } else {
                let rule = TokenRule::new(demo, listen);
                checked_token(t, &format!("{path}.admin_token"), rule, p, warnings);
            }
        }
        HttpConfig {
            listen,
            max_body_bytes: (max_body_kb as usize).saturating_mul(1024),
            max_connections: max_connections as usize,
            header_read_timeout: Duration::from_secs(header_secs),
            body_read_timeout: Duration::from_secs(body_secs),
            admin_token: raw.admin_token.clone(),
            allowed_hosts: allowed_hosts(raw.allowed_hosts.as_deref(), path, p),
        }
    }
}

fn allowed_hosts(raw: Option<&[String]>, path: &str, p: &mut Problems) -> Vec<Authority> {
    let raw = raw.unwrap_or_default();
    if raw.len() > MAX_ALLOWED_HOSTS {
        p.push(
            format!("{path}.allowed_hosts"),
            format!("{} entries, at most {MAX_ALLOWED_HOSTS}", raw.len()),
        );
    }
    let mut hosts = Vec::new();
    for (i, s) in raw.iter().enumerate() {
        match Authority::parse(s) {
            Ok(a) => hosts.push(a),
            Err(e) => p.push(
                format!("{path}.allowed_hosts[{i}]"),
                format!("{s:?} is not name or name:port: {e}"),
            ),
        }
    }
    hosts
}

/// The server's settings while it runs: what each connection and request reads now, which
/// a reload replaces whole (all but the address and `max_connections`, which need a restart).
pub struct Settings {
    now: RwLock<(Arc<HttpConfig>, Arc<AllowedHosts>)>,
}

impl Settings {
    /// The settings of `config`, the box's host name read now.
    pub fn new(config: HttpConfig) -> Self {
        let hosts = AllowedHosts::build(&config.allowed_hosts);
        Self {
            now: RwLock::new((config.into(), hosts.into())),
        }
    }

    /// The settings now.
    pub fn get(&self) -> Arc<HttpConfig> {
        Arc::clone(&self.read().0)
    }

    /// The hosts answered now.
    pub fn hosts(&self) -> Arc<AllowedHosts> {
        Arc::clone(&self.read().1)
    }

    /// Puts `config` in place: the next connection and request read it.
    pub fn set(&self, config: HttpConfig) {
        let hosts = AllowedHosts::build(&config.allowed_hosts);
        let mut now = self.now.write().unwrap_or_else(|e| e.into_inner());
        *now = (config.into(), hosts.into());
    }

    fn read(&self) -> RwLockReadGuard<'_, (Arc<HttpConfig>, Arc<AllowedHosts>)> {
        // `set` replaces the pair whole.
        self.now.read().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(raw: &RawHttp) -> Vec<String> {
        let mut p = Problems::default();
        HttpConfig::validate(Some(raw), "connector.http", false, &mut p, &mut Vec::new());
        p.0.into_iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn every_bad_allowed_host_is_reported_with_its_index_and_the_good_ones_kept() {
        let raw = RawHttp {
            allowed_hosts: Some(
                [
                    "box.plant",
                    "gw.plant:443",
                    "::1",
                    "evil.example:0",
                    "[::1]:8080",
                    "*.plant",
                ]
                .map(String::from)
                .to_vec(),
            ),
            max_connections: Some(0),
            ..RawHttp::default()
        };
        assert_eq!(
            problems(&raw),
            vec![
                "connector.http.max_connections: 0 is outside 1..=65536".to_string(),
                r#"connector.http.allowed_hosts[2]: "::1" is not name or name:port: an IPv6 address goes in brackets, e.g. [::1]"#.to_string(),
                r#"connector.http.allowed_hosts[3]: "evil.example:0" is not name or name:port: the port is not a number in 1..=65535"#.to_string(),
                r#"connector.http.allowed_hosts[5]: "*.plant" is not name or name:port: a host name has letters, digits, '-', '_' and '.' only, no empty label, at most 253 characters"#.to_string(),
            ]
        );
        let mut p = Problems::default();
        let ok = HttpConfig::validate(Some(&raw), "connector.http", false, &mut p, &mut Vec::new());
        let kept: Vec<String> = ok.allowed_hosts.iter().map(|a| a.to_string()).collect();
        assert_eq!(kept, ["box.plant", "gw.plant:443", "[::1]:8080"]);
    }

    #[test]
    fn more_than_256_allowed_hosts_are_refused() {
        let raw = RawHttp {
            allowed_hosts: Some((0..257).map(|i| format!("h{i}.plant")).collect()),
            ..RawHttp::default()
        };
        assert_eq!(
            problems(&raw),
            vec!["connector.http.allowed_hosts: 257 entries, at most 256"]
        );
    }

    #[test]
    fn without_a_section_the_server_listens_on_loopback_with_no_listed_hosts() {
        let mut p = Problems::default();
        let c = HttpConfig::validate(None, "connector.http", false, &mut p, &mut Vec::new());
        assert!(p.is_empty());
        assert_eq!(c.listen, SocketAddr::from(DEFAULT_LISTEN));
        assert!(c.allowed_hosts.is_empty());
        assert!(c.admin_token.is_none());
    }
}
