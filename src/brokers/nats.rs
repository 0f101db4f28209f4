//! NATS connections: their config (servers, credentials, TLS, reconnect back-off), validated
//! without I/O, and [`connect`], which opens one. Shared by the JetStream sources, the `nats`
//! sink and the NATS alert channel.
//!
//! The client reconnects forever on its own once connected (`max_reconnects` unlimited, the
//! wait growing to `reconnect_max_ms`); [`connect`] also waits, backed off, for the first
//! connection, so a server that is down at start is no reason to stop.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::tls::{validate_tls, RawTls, TlsConfig};
use crate::config::checks::{checked_name, in_range};
use crate::config::Problems;
use crate::shutdown::Shutdown;

/// `nats.connections[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawNatsConnection {
    /// The name sources and the sink use to refer to it.
    pub name: Option<String>,
    /// Server URLs (`nats://host:4222`, `tls://host:4222`); the client fails over between them.
    pub servers: Option<Vec<String>>,
    /// User name, with `password`.
    pub user: Option<String>,
    /// Password of `user`.
    pub password: Option<String>,
    /// A token, instead of user and password.
    pub token: Option<String>,
    /// A `.creds` file (JWT and NKey seed), instead of user/password or token; read at start.
    pub creds_file: Option<String>,
    /// TLS: trusted CA and client certificate. `tls://` URLs need TLS too.
    pub tls: Option<RawTls>,
    /// Longest wait between two reconnect attempts, in milliseconds; the client reconnects
    /// forever, the wait growing from 100 ms to this. Default 5000.
    pub reconnect_max_ms: Option<u64>,
}

/// Credentials of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NatsAuth {
    /// None.
    None,
    /// User and password.
    UserPassword(String, String),
    /// A token.
    Token(String),
    /// A creds file, read at start.
    CredsFile(String),
}

/// One connection, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsConnectionConfig {
    /// Its name.
    pub name: String,
    /// Server URLs.
    pub servers: Vec<String>,
    /// Credentials.
    pub auth: NatsAuth,
    /// TLS, when configured.
    pub tls: Option<TlsConfig>,
    /// Longest wait between reconnect attempts.
    pub reconnect_max: Duration,
}

/// Validates `<path>.connections`.
pub fn validate_connections(
    raw: Option<&[RawNatsConnection]>,
    path: &str,
    p: &mut Problems,
) -> Vec<NatsConnectionConfig> {
    let mut out: Vec<NatsConnectionConfig> = Vec::new();
    for (i, c) in raw.unwrap_or_default().iter().enumerate() {
        let at = format!("{path}.connections[{i}]");
        let Some(name) = checked_name(
            c.name.as_deref(),
            &at,
            |n| out.iter().any(|o| o.name == n),
            p,
        ) else {
            continue;
        };
        let servers = c.servers.clone().unwrap_or_default();
        if servers.is_empty() {
            p.push(format!("{at}.servers"), "needs at least one server URL");
        }
        for (j, s) in servers.iter().enumerate() {
            if s.parse::<async_nats::ServerAddr>().is_err() {
                p.push(
                    format!("{at}.servers[{j}]"),
                    format!("{s:?} is not a server URL like nats://host:4222"),
                );
            }
        }
        let auth = match (&c.user, &c.password, &c.token, &c.creds_file) {
            (None, None, None, None) => NatsAuth::None,
            (Some(u), Some(pw), None, None) => NatsAuth::UserPassword(u.clone(), pw.clone()),
            (None, None, Some(t), None) if !t.is_empty() => NatsAuth::Token(t.clone()),
            (None, None, None, Some(f)) if !f.is_empty() => NatsAuth::CredsFile(f.clone()),
            (Some(_), None, None, None) | (None, Some(_), None, None) => {
                p.push(format!("{at}.user"), "user and password go together");
                NatsAuth::None
            }
            _ => {
                p.push(
                    at.to_string(),
                    "give one of user/password, token or creds_file (non-empty)",
                );
                NatsAuth::None
            }
        };
        let tls = c
            .tls
            .as_ref()
            .map(|t| validate_tls(t, &format!("{at}.tls"), p));
        let reconnect_max_ms = in_range(
            c.reconnect_max_ms,
            5000,
            100..=600_000,
            format!("{at}.reconnect_max_ms"),
            p,
        );
        out.push(NatsConnectionConfig {
            name,
            servers,
            auth,
            tls,
            reconnect_max: Duration::from_millis(reconnect_max_ms),
        });
    }
    out
}

/// First wait between connection attempts.
const RECONNECT_INITIAL: Duration = Duration::from_millis(100);

/// The wait after `n` failed connection attempts in a row (1-based): 100 ms doubling to `max`.
pub fn reconnect_delay(n: usize, max: Duration) -> Duration {
    let shift = n.saturating_sub(1).min(20) as u32;
    RECONNECT_INITIAL.saturating_mul(1 << shift).min(max)
}

/// The wait async-nats makes before connection attempt `attempts`. It asks before every
/// attempt, the first included, and counts again from 1 after each lost connection: the first
/// attempt goes at once (a daemon's connections start without a pause, a dropped one is tried
/// again at once), each later one waits [`reconnect_delay`] of the failures before it.
fn delay_before_attempt(attempts: usize, max: Duration) -> Duration {
    match attempts {
        0 | 1 => Duration::ZERO,
        n => reconnect_delay(n - 1, max),
    }
}

async fn options(
    cfg: &NatsConnectionConfig,
    name: &str,
) -> Result<async_nats::ConnectOptions, String> {
    let mut o = match &cfg.auth {
        NatsAuth::None => async_nats::ConnectOptions::new(),
        NatsAuth::UserPassword(u, p) => {
            async_nats::ConnectOptions::with_user_and_password(u.clone(), p.clone())
        }
        NatsAuth::Token(t) => async_nats::ConnectOptions::with_token(t.clone()),
        NatsAuth::CredsFile(f) => {
            crate::config::check_private_file(Path::new(f))?;
            async_nats::ConnectOptions::with_credentials_file(f)
                .await
                .map_err(|e| format!("creds file {f}: {e}"))?
        }
    };
    if let Some(tls) = &cfg.tls {
        o = o.require_tls(true);
        if let Some(ca) = &tls.ca_file {
            o = o.add_root_certificates(PathBuf::from(ca));
        }
        if let Some((cert, key)) = &tls.client {
            crate::config::check_private_file(Path::new(key))?;
            o = o.add_client_certificate(PathBuf::from(cert), PathBuf::from(key));
        }
    }
    let max = cfg.reconnect_max;
    Ok(o.name(name)
        .max_reconnects(None)
        .connection_timeout(Duration::from_secs(5))
        .reconnect_delay_callback(move |attempts| delay_before_attempt(attempts, max)))
}

/// Connects, retrying with back-off until connected; `None` when shutdown came first or the
/// config cannot work (a creds file that cannot be read: logged, retried less often).
pub async fn connect(
    cfg: &NatsConnectionConfig,
    name: &str,
    shutdown: &Shutdown,
) -> Option<async_nats::Client> {
    let mut attempt = 0usize;
    loop {
        attempt += 1;
        let result = match options(cfg, name).await {
            Ok(o) => o
                .connect(cfg.servers.as_slice())
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        match result {
            Ok(client) => {
                log::info!("nats connected: client={name} connection={}", cfg.name);
                return Some(client);
            }
            Err(e) => {
                let wait = reconnect_delay(attempt, cfg.reconnect_max);
                if attempt == 1 || attempt.is_power_of_two() {
                    log::warn!(
                        "nats connection failed, retrying: client={name} connection={} attempt={attempt} retry_in_ms={} error=\"{e}\"",
                        cfg.name,
                        wait.as_millis()
                    );
                }
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {},
                    _ = shutdown.wait() => return None,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_waits_double_up_to_the_cap() {
        let max = Duration::from_secs(5);
        assert_eq!(reconnect_delay(1, max), Duration::from_millis(100));
        assert_eq!(reconnect_delay(2, max), Duration::from_millis(200));
        assert_eq!(reconnect_delay(7, max), Duration::from_secs(5));
        assert_eq!(reconnect_delay(10_000, max), Duration::from_secs(5));
    }

    #[test]
    fn the_first_connection_attempt_goes_at_once_and_later_ones_back_off() {
        let max = Duration::from_secs(5);
        assert_eq!(delay_before_attempt(1, max), Duration::ZERO);
        assert_eq!(delay_before_attempt(2, max), Duration::from_millis(100));
        assert_eq!(delay_before_attempt(3, max), Duration::from_millis(200));
        assert_eq!(delay_before_attempt(10_000, max), Duration::from_secs(5));
    }
}
