//! Opens a NATS connection from its config: credentials, TLS, reconnect back-off.
//!
//! The client reconnects forever on its own once connected (`max_reconnects` unlimited, the
//! wait growing to `reconnect_max_ms`); [`connect`] also waits, backed off, for the first
//! connection, so a server that is down at start is no reason to stop.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::config::{NatsAuth, NatsConnectionConfig};
use crate::shutdown::Shutdown;

/// First wait between connection attempts.
const RECONNECT_INITIAL: Duration = Duration::from_millis(100);

/// The wait before attempt `n` (1-based): 100 ms doubling to `max`.
pub fn reconnect_delay(n: usize, max: Duration) -> Duration {
    let shift = n.saturating_sub(1).min(20) as u32;
    RECONNECT_INITIAL.saturating_mul(1 << shift).min(max)
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
        .reconnect_delay_callback(move |attempts| reconnect_delay(attempts, max)))
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
}
