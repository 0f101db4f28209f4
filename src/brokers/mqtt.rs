//! MQTT connections: their config (broker URL, client id, credentials, TLS, keep-alive,
//! reconnect back-off), validated without I/O, and the client options built from it: stable
//! client id, `clean_session: false`, manual acks, TLS with rustls and ring. The reconnect
//! back-off is ours ([`reconnect_delay`]): rumqttc reconnects on the next `poll` after an
//! error, at once. Shared by the MQTT sources, the `mqtt` sink and the MQTT alert channel
//! (MQTT 3.1.1), and the commands path ([`options_v5`], MQTT 5).

use std::sync::Arc;
use std::time::Duration;

use rumqttc::{MqttOptions, QoS, TlsConfiguration, Transport};
use serde::Deserialize;

use super::tls::{client_config, validate_tls, RawTls, TlsConfig};
use crate::config::checks::{checked_name, in_range};
use crate::config::Problems;

/// `mqtt.connections[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawMqttConnection {
    /// The name sources and the sink use to refer to it.
    pub name: Option<String>,
    /// Broker URL: `mqtt://host:1883` or `mqtts://host:8883` (TLS).
    pub url: Option<String>,
    /// Stable client id prefix: each source uses `<client_id>-<source name>`, the sink
    /// `<client_id>-sink`, with `clean_session: false` so the broker keeps their sessions
    /// (subscriptions, QoS 1 messages in flight) across reconnects. Default
    /// `opex-<connection name>`.
    pub client_id: Option<String>,
    /// User name (with `password`).
    pub user: Option<String>,
    /// Password of `user`.
    pub password: Option<String>,
    /// TLS: trusted CA and client certificate (implied by `mqtts://`).
    pub tls: Option<RawTls>,
    /// Keep-alive in seconds. Default 30.
    pub keep_alive_secs: Option<u64>,
    /// Longest wait between reconnect attempts, in milliseconds; the wait grows from 100 ms
    /// to this, forever. Default 30000.
    pub reconnect_max_ms: Option<u64>,
}

/// One broker, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MqttConnectionConfig {
    /// Its name.
    pub name: String,
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// TLS, when `mqtts://` or a `tls:` section.
    pub tls: Option<TlsConfig>,
    /// Client id prefix.
    pub client_id: String,
    /// User and password.
    pub credentials: Option<(String, String)>,
    /// Keep-alive.
    pub keep_alive: Duration,
    /// Longest wait between reconnect attempts.
    pub reconnect_max: Duration,
}

/// Validates `<path>.connections`.
pub fn validate_connections(
    raw: Option<&[RawMqttConnection]>,
    path: &str,
    p: &mut Problems,
) -> Vec<MqttConnectionConfig> {
    let mut out: Vec<MqttConnectionConfig> = Vec::new();
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
        let (host, port, tls_scheme) = match c.url.as_deref().map(parse_url) {
            Some(Ok(v)) => v,
            Some(Err(e)) => {
                p.push(format!("{at}.url"), e);
                (String::new(), 0, false)
            }
            None => {
                p.push(format!("{at}.url"), "is required");
                (String::new(), 0, false)
            }
        };
        let mut tls = c
            .tls
            .as_ref()
            .map(|t| validate_tls(t, &format!("{at}.tls"), p));
        if tls_scheme && tls.is_none() {
            tls = Some(TlsConfig::default());
        }
        let client_id = c
            .client_id
            .clone()
            .unwrap_or_else(|| format!("opex-{name}"));
        if client_id.is_empty() || client_id.len() > 128 {
            p.push(format!("{at}.client_id"), "must be 1 to 128 characters");
        }
        let credentials = match (&c.user, &c.password) {
            (Some(u), Some(pw)) => Some((u.clone(), pw.clone())),
            (None, None) => None,
            _ => {
                p.push(format!("{at}.user"), "user and password go together");
                None
            }
        };
        let keep_alive = in_range(
            c.keep_alive_secs,
            30,
            5..=3600,
            format!("{at}.keep_alive_secs"),
            p,
        );
        let reconnect_max = in_range(
            c.reconnect_max_ms,
            30_000,
            100..=600_000,
            format!("{at}.reconnect_max_ms"),
            p,
        );
        out.push(MqttConnectionConfig {
            name,
            host,
            port,
            tls,
            client_id,
            credentials,
            keep_alive: Duration::from_secs(keep_alive),
            reconnect_max: Duration::from_millis(reconnect_max),
        });
    }
    out
}

/// `mqtt://host[:port]` or `mqtts://host[:port]` → host, port, TLS.
fn parse_url(url: &str) -> Result<(String, u16, bool), String> {
    let (rest, tls, default_port) = if let Some(r) = url.strip_prefix("mqtt://") {
        (r, false, 1883)
    } else if let Some(r) = url.strip_prefix("mqtts://") {
        (r, true, 8883)
    } else {
        return Err(format!(
            "{url:?}: expected mqtt://host:port or mqtts://host:port"
        ));
    };
    let rest = rest.trim_end_matches('/');
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => match p.parse::<u16>() {
            Ok(port) if port > 0 => (h, port),
            _ => return Err(format!("{url:?}: bad port {p:?}")),
        },
        _ => (rest, default_port),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.contains('/') {
        return Err(format!("{url:?}: no host"));
    }
    Ok((host.to_string(), port, tls))
}

/// The client queue of every MQTT client: the `cap` of `AsyncClient::new` (its
/// `set_request_channel_capacity` does nothing). The `mqtt` sink refuses when it is full.
pub const CLIENT_QUEUE: usize = 1024;

/// The largest packet the MQTT 3.1.1 clients send and take: 1 MiB. rumqttc cannot encode a
/// larger one, and it fails only once it wrote the PUBLISH down as in flight: the connection
/// drops, and with the session kept the same PUBLISH goes first again at every reconnect. So the
/// `mqtt` and `sparkplug` sinks measure a record's packet ([`publish_size`]) before they hand
/// it over, and refuse one over this for good.
pub const MAX_PACKET_BYTES: usize = 1 << 20;

/// The bytes of the PUBLISH of `payload` bytes to `topic` at `qos`, as it goes on the wire:
/// the fixed header (its type byte and the remaining length, 1 to 4 bytes), the topic with its
/// length, the packet id at QoS 1 and 2, the payload.
pub fn publish_size(topic: &str, qos: QoS, payload: usize) -> usize {
    let id = if qos == QoS::AtMostOnce { 0 } else { 2 };
    let remaining = 2 + topic.len() + id + payload;
    let length_bytes = match remaining {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    };
    1 + length_bytes + remaining
}

/// The wait after `n` failed connection attempts in a row: 100 ms doubling to `max`.
pub fn reconnect_delay(n: u32, max: Duration) -> Duration {
    Duration::from_millis(100)
        .saturating_mul(1 << n.saturating_sub(1).min(20))
        .min(max)
}

/// The TLS transport of `cfg`, when it has `tls` (both protocol versions take it).
fn transport(cfg: &MqttConnectionConfig) -> Result<Option<Transport>, String> {
    let Some(tls) = &cfg.tls else {
        return Ok(None);
    };
    let config = client_config(tls)?;
    Ok(Some(Transport::tls_with_config(TlsConfiguration::Rustls(
        Arc::new(config),
    ))))
}

/// Options for the client `<client_id>-<suffix>`.
pub fn options(cfg: &MqttConnectionConfig, suffix: &str) -> Result<MqttOptions, String> {
    let id = format!("{}-{suffix}", cfg.client_id);
    let mut o = MqttOptions::new(id, cfg.host.clone(), cfg.port);
    o.set_clean_session(false)
        .set_manual_acks(true)
        .set_keep_alive(cfg.keep_alive)
        .set_max_packet_size(MAX_PACKET_BYTES, MAX_PACKET_BYTES);
    if let Some((u, p)) = &cfg.credentials {
        o.set_credentials(u.clone(), p.clone());
    }
    if let Some(t) = transport(cfg)? {
        o.set_transport(t);
    }
    Ok(o)
}

/// MQTT 5 options for the client `<client_id>-<suffix>`, for a user that needs what only
/// MQTT 5 has (the commands path: response topics, correlation data, no-local
/// subscriptions). Same broker, credentials, TLS and keep-alive as [`options`], with manual
/// acks; but a **clean start** with no session kept: nothing the broker would hold for this
/// client while it is away is delivered later.
pub fn options_v5(
    cfg: &MqttConnectionConfig,
    suffix: &str,
) -> Result<rumqttc::v5::MqttOptions, String> {
    let id = format!("{}-{suffix}", cfg.client_id);
    let mut o = rumqttc::v5::MqttOptions::new(id, cfg.host.clone(), cfg.port);
    o.set_clean_start(true)
        .set_session_expiry_interval(None)
        .set_manual_acks(true)
        .set_keep_alive(cfg.keep_alive)
        .set_max_packet_size(Some(MAX_PACKET_BYTES as u32));
    if let Some((u, p)) = &cfg.credentials {
        o.set_credentials(u.clone(), p.clone());
    }
    if let Some(t) = transport(cfg)? {
        o.set_transport(t);
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_size_is_the_size_rumqttc_encodes_around_each_length_boundary() {
        let topic = "plant/line-3/press";
        for payload in [
            0, 100, 104, 105, 16_000, 16_360, 16_361, 2_097_000, 2_097_126,
        ] {
            for qos in [QoS::AtMostOnce, QoS::AtLeastOnce] {
                let mut p = rumqttc::Publish::new(topic, qos, vec![b'x'; payload]);
                if qos != QoS::AtMostOnce {
                    p.pkid = 1;
                }
                let mut wire = bytes::BytesMut::new();
                rumqttc::Packet::Publish(p)
                    .write(&mut wire, usize::MAX)
                    .expect("encodes");
                assert_eq!(
                    publish_size(topic, qos, payload),
                    wire.len(),
                    "{payload} {qos:?}"
                );
            }
        }
    }

    #[test]
    fn urls_give_host_port_and_tls() {
        assert_eq!(
            parse_url("mqtt://127.0.0.1:1884"),
            Ok(("127.0.0.1".into(), 1884, false))
        );
        assert_eq!(
            parse_url("mqtts://broker"),
            Ok(("broker".into(), 8883, true))
        );
    }
}
