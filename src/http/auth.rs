//! Bearer tokens, compared in constant time, and the slowdown of failed attempts.
//!
//! Every failed ingest, admin or command attempt is counted (per ingest source in its
//! `unauthorized` counter, for the admin endpoints in `admin_unauthorized`, for
//! `POST /api/devices/{device}/write` in `commands_unauthorized`) and remembered per client
//! address. An address that failed [`FREE_FAILURES`] times gets each further 401 only after
//! [`FAILURE_DELAY`]; it is forgotten [`FORGET_AFTER`] after its last failure. The delay is
//! the failing request's own: it holds no lock, so other clients are served meanwhile, and a
//! request with the right token is never delayed at all (behind a reverse proxy every client
//! shares the proxy's address, and one guesser must not slow the others down).
//!
//! Bounded: at most [`TABLE_SIZE`] addresses are remembered (IPv4 by address, IPv6 by its
//! /64, which one host usually holds whole); at the cap the address whose last failure is the
//! oldest is forgotten, counted in `opex_connector_auth_forgotten_total`. The delay slows a client that waits
//! for its answers (a script trying tokens one after another); one that gives up early is not
//! slowed, which is why tokens must have 16 characters: guessing one is out of reach anyway.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use hyper::header::AUTHORIZATION;
use hyper::{HeaderMap, Request};
use tokio::time::Instant;

use crate::telemetry::prometheus::{Kind, Page};

/// Failed attempts an address may make before its 401s are delayed.
pub const FREE_FAILURES: u32 = 10;
/// How long each further failed attempt of that address waits for its 401.
pub const FAILURE_DELAY: Duration = Duration::from_secs(1);
/// An address is forgotten this long after its last failed attempt.
pub const FORGET_AFTER: Duration = Duration::from_secs(60);
/// Most client addresses remembered.
pub const TABLE_SIZE: usize = 1024;

/// The client address of a request, put into its extensions by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

/// The client address of `req`, when the server recorded one.
pub fn peer<B>(req: &Request<B>) -> Option<IpAddr> {
    req.extensions().get::<Peer>().map(|p| p.0.ip())
}

/// True when `headers` carry `Authorization: Bearer <expected>`.
pub fn bearer_ok(headers: &HeaderMap, expected: &str) -> bool {
    let Some(presented) = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    ct_eq(presented.trim().as_bytes(), expected.as_bytes())
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Counters of the token checks, shown in `auth` of `/api/status` and on `/metrics`.
#[derive(Debug, Default)]
pub struct AuthStats {
    /// Admin requests refused for a missing or wrong token.
    pub admin_unauthorized: AtomicU64,
    /// Commands (`POST /api/devices/{device}/write`) refused for a missing or wrong
    /// `commands.token`.
    pub commands_unauthorized: AtomicU64,
    /// Failed attempts answered only after [`FAILURE_DELAY`].
    pub delayed: AtomicU64,
    /// Addresses forgotten at [`TABLE_SIZE`] before [`FORGET_AFTER`] had passed.
    pub forgotten: AtomicU64,
}

/// What is remembered of one client address.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
}

/// The token checks of the server: the failure table and its counters.
#[derive(Debug)]
pub struct AuthGuard {
    /// Per client address (see [`client_key`]); locked only to read and update one entry,
    /// never across the delay.
    table: Mutex<HashMap<IpAddr, Failures>>,
    /// Its counters.
    pub stats: AuthStats,
}

impl Default for AuthGuard {
    fn default() -> Self {
        Self {
            table: Mutex::new(HashMap::with_capacity(TABLE_SIZE)),
            stats: AuthStats::default(),
        }
    }
}

impl AuthGuard {
    /// Checks `Authorization: Bearer <expected>` of a request from `peer` to `place`
    /// (`ingest/<name>`, `admin` or `commands`). A failure is counted in `refused`, remembered for
    /// `peer`, logged, and returned only after [`FAILURE_DELAY`] when `peer` has failed more
    /// than [`FREE_FAILURES`] times. A success returns at once.
    pub async fn check(
        &self,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
        expected: &str,
        place: &str,
        refused: &AtomicU64,
    ) -> bool {
        if bearer_ok(headers, expected) {
            return true;
        }
        let total = refused.fetch_add(1, Ordering::Relaxed) + 1;
        let failures = peer.map_or(0, |ip| self.failed(ip, Instant::now()));
        let delay = failures > FREE_FAILURES;
        // Bounded logging: an address's 1st, 2nd, 4th, 8th ... failure.
        if failures.is_power_of_two() || (peer.is_none() && total.is_power_of_two()) {
            let peer = peer.map_or_else(|| "unknown".to_string(), |ip| ip.to_string());
            log::warn!(
                "missing or wrong bearer token: place={place} peer={peer} failures={failures} delayed={delay} refused_total={total}"
            );
        }
        if delay {
            self.stats.delayed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(FAILURE_DELAY).await;
        }
        false
    }

    /// Remembers a failure of `ip` at `now`; returns how many it has made, this one included.
    fn failed(&self, ip: IpAddr, now: Instant) -> u32 {
        let key = client_key(ip);
        // Plain data, consistent after every statement: a poisoned lock is still usable.
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if !table.contains_key(&key) && table.len() >= TABLE_SIZE {
            table.retain(|_, f| now.duration_since(f.last) <= FORGET_AFTER);
            if table.len() >= TABLE_SIZE {
                let oldest = table.iter().min_by_key(|(_, f)| f.last).map(|(k, _)| *k);
                if let Some(oldest) = oldest {
                    table.remove(&oldest);
                    self.stats.forgotten.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let entry = table.entry(key).or_insert(Failures {
            count: 0,
            last: now,
        });
        if now.duration_since(entry.last) > FORGET_AFTER {
            entry.count = 0;
        }
        entry.count = entry.count.saturating_add(1);
        entry.last = now;
        entry.count
    }

    /// Addresses remembered now.
    pub fn tracked(&self) -> usize {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// `auth` of `/api/status`.
    pub fn status(&self) -> serde_json::Value {
        let s = &self.stats;
        serde_json::json!({
            "admin_unauthorized": s.admin_unauthorized.load(Ordering::Relaxed),
            "commands_unauthorized": s.commands_unauthorized.load(Ordering::Relaxed),
            "delayed_total": s.delayed.load(Ordering::Relaxed),
            "tracked_clients": self.tracked(),
            "forgotten_total": s.forgotten.load(Ordering::Relaxed),
        })
    }

    /// Its samples on `/metrics`.
    pub fn write_metrics(&self, p: &mut Page) {
        let s = &self.stats;
        p.single(
            "opex_connector_admin_unauthorized_total",
            Kind::Counter,
            "Admin requests refused for a missing or wrong token (401).",
            s.admin_unauthorized.load(Ordering::Relaxed) as f64,
        );
        p.single(
            "opex_connector_commands_unauthorized_total",
            Kind::Counter,
            "Commands refused for a missing or wrong commands token (401).",
            s.commands_unauthorized.load(Ordering::Relaxed) as f64,
        );
        p.single(
            "opex_connector_auth_delayed_total",
            Kind::Counter,
            "Failed token checks answered only after the delay (their address failed too often).",
            s.delayed.load(Ordering::Relaxed) as f64,
        );
        p.single(
            "opex_connector_auth_tracked_clients",
            Kind::Gauge,
            "Client addresses with recent failed token checks remembered.",
            self.tracked() as f64,
        );
        p.single(
            "opex_connector_auth_forgotten_total",
            Kind::Counter,
            "Client addresses forgotten early because the table of failed token checks was full.",
            s.forgotten.load(Ordering::Relaxed) as f64,
        );
    }
}

/// The key an address is remembered by: IPv4 as it is (also when mapped into IPv6), IPv6 by
/// its /64 prefix.
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(
                u128::from(v6) & 0xffff_ffff_ffff_ffff_0000_0000_0000_0000,
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
        h
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn only_the_exact_bearer_token_passes() {
        let mut h = HeaderMap::new();
        assert!(!bearer_ok(&h, "secret-token"));
        h.insert(AUTHORIZATION, "Bearer secret-tokex".parse().unwrap());
        assert!(!bearer_ok(&h, "secret-token"));
        h.insert(AUTHORIZATION, "Basic secret-token".parse().unwrap());
        assert!(!bearer_ok(&h, "secret-token"));
        h.insert(AUTHORIZATION, "Bearer secret-token".parse().unwrap());
        assert!(bearer_ok(&h, "secret-token"));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_beyond_the_free_ones_wait_the_delay_and_right_tokens_never_do() {
        let guard = AuthGuard::default();
        let refused = AtomicU64::new(0);
        let wrong = bearer("wrong-token-0123456");
        let right = bearer("right-token-0123456");
        let expected = "right-token-0123456";
        for _ in 0..FREE_FAILURES {
            let start = Instant::now();
            assert!(
                !guard
                    .check(&wrong, ip("10.0.0.9"), expected, "admin", &refused)
                    .await
            );
            assert_eq!(start.elapsed(), Duration::ZERO);
        }
        let start = Instant::now();
        assert!(
            !guard
                .check(&wrong, ip("10.0.0.9"), expected, "admin", &refused)
                .await
        );
        assert_eq!(start.elapsed(), FAILURE_DELAY);
        // The right token from the same address, and any attempt from another, at once.
        let start = Instant::now();
        assert!(
            guard
                .check(&right, ip("10.0.0.9"), expected, "admin", &refused)
                .await
        );
        assert!(
            !guard
                .check(&wrong, ip("10.0.0.10"), expected, "admin", &refused)
                .await
        );
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(
            refused.load(Ordering::Relaxed),
            u64::from(FREE_FAILURES) + 2
        );
        assert_eq!(guard.stats.delayed.load(Ordering::Relaxed), 1);
        // Forgotten a while after the last failure.
        tokio::time::advance(FORGET_AFTER + Duration::from_secs(1)).await;
        let start = Instant::now();
        assert!(
            !guard
                .check(&wrong, ip("10.0.0.9"), expected, "admin", &refused)
                .await
        );
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_failure_does_not_hold_up_other_clients() {
        let guard = std::sync::Arc::new(AuthGuard::default());
        let refused = std::sync::Arc::new(AtomicU64::new(0));
        let wrong = bearer("wrong-token-0123456");
        for _ in 0..FREE_FAILURES {
            guard
                .check(&wrong, ip("10.0.0.9"), "right", "admin", &refused)
                .await;
        }
        let (g, r) = (guard.clone(), refused.clone());
        let slow = tokio::spawn(async move {
            g.check(&bearer("x"), ip("10.0.0.9"), "right", "admin", &r)
                .await
        });
        tokio::task::yield_now().await;
        assert_eq!(guard.stats.delayed.load(Ordering::Relaxed), 1);
        // While that one waits, another client is answered.
        assert!(
            guard
                .check(&bearer("right"), ip("10.0.0.7"), "right", "admin", &refused)
                .await
        );
        assert!(!slow.is_finished());
        assert!(!slow.await.unwrap());
    }

    #[test]
    fn the_table_is_bounded_and_forgets_the_oldest_address() {
        let guard = AuthGuard::default();
        let start = Instant::now();
        for i in 0..TABLE_SIZE as u32 {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            guard.failed(ip, start + Duration::from_millis(u64::from(i)));
        }
        assert_eq!(guard.tracked(), TABLE_SIZE);
        let late = start + Duration::from_secs(2);
        assert_eq!(guard.failed("192.0.2.1".parse().unwrap(), late), 1);
        assert_eq!(guard.tracked(), TABLE_SIZE);
        assert_eq!(guard.stats.forgotten.load(Ordering::Relaxed), 1);
        // 10.0.0.0 failed first, so it went; 10.0.0.2 is still remembered.
        assert_eq!(guard.failed("10.0.0.2".parse().unwrap(), late), 2);
        assert_eq!(guard.failed("10.0.0.0".parse().unwrap(), late), 1);
        // Entries past FORGET_AFTER make room without counting as forgotten early.
        let much_later = start + FORGET_AFTER + Duration::from_secs(10);
        assert_eq!(guard.failed("192.0.2.2".parse().unwrap(), much_later), 1);
        assert_eq!(guard.stats.forgotten.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn ipv6_addresses_are_remembered_by_their_64_bit_prefix() {
        let guard = AuthGuard::default();
        let now = Instant::now();
        assert_eq!(guard.failed("2001:db8:1:2::1".parse().unwrap(), now), 1);
        assert_eq!(
            guard.failed("2001:db8:1:2:ffff::9".parse().unwrap(), now),
            2
        );
        assert_eq!(guard.failed("2001:db8:1:3::1".parse().unwrap(), now), 1);
        assert_eq!(guard.failed("::ffff:192.0.2.7".parse().unwrap(), now), 1);
        assert_eq!(guard.failed("192.0.2.7".parse().unwrap(), now), 2);
    }
}
