//! `mqtt:`: connections, sources (subscriptions) and the `mqtt` sink. Raw, then validated
//! without I/O (TLS files are read when the daemon starts).

use std::time::Duration;

use serde::Deserialize;

use crate::config::checks::{checked_name, in_range};
use crate::config::{pick_connection, Problems};
use crate::sinks::mqtt::config::{MqttSinkConfig, RawMqttSink};
use crate::sources::nats::config::{validate_tls, RawTls, TlsConfig};

/// Messages buffered per subscription; beyond it the oldest is dropped and counted.
pub const SUBSCRIPTION_BUFFER: usize = 1024;

/// `mqtt:`
#[derive(Debug, Default, Deserialize)]
pub struct RawMqtt {
    /// The brokers to talk to; sources and the sink name one of them.
    pub connections: Option<Vec<RawMqttConnection>>,
    /// MQTT sources: subscriptions whose messages become records `source: mqtt/<name>`.
    /// MQTT acks on receipt: use NATS JetStream when data must not be lost.
    pub sources: Option<Vec<RawMqttSource>>,
    /// The `mqtt` sink: where flows' `sink: mqtt` nodes publish.
    pub sink: Option<RawMqttSink>,
}

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

/// `mqtt.sources[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawMqttSource {
    /// Records carry `source: mqtt/<name>` (letters, digits, `-`, `_`).
    pub name: Option<String>,
    /// The connection (by name); optional when there is exactly one.
    pub connection: Option<String>,
    /// Topic filters to subscribe to, each with its QoS.
    pub subscriptions: Option<Vec<RawSubscription>>,
}

/// `mqtt.sources[].subscriptions[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawSubscription {
    /// Topic filter (`+` and `#` wildcards allowed).
    pub topic: Option<String>,
    /// 0 or 1 (default 1). QoS 1 messages are acked once they are in the connector's buffer.
    pub qos: Option<u8>,
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

/// One subscription, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Topic filter.
    pub topic: String,
    /// 0 or 1.
    pub qos: u8,
}

/// One MQTT source, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MqttSourceConfig {
    /// Its name; records carry `mqtt/<name>`.
    pub name: String,
    /// Its broker.
    pub connection: MqttConnectionConfig,
    /// Its subscriptions.
    pub subscriptions: Vec<Subscription>,
}

/// `mqtt:`, validated.
#[derive(Debug, Clone, Default)]
pub struct MqttConfig {
    /// Brokers.
    pub connections: Vec<MqttConnectionConfig>,
    /// Sources.
    pub sources: Vec<MqttSourceConfig>,
    /// The `mqtt` sink, when configured.
    pub sink: Option<MqttSinkConfig>,
}

impl MqttConfig {
    /// Validates `mqtt:` (absent: nothing configured).
    pub fn validate(raw: Option<&RawMqtt>, path: &str, p: &mut Problems) -> Self {
        let Some(raw) = raw else {
            return Self::default();
        };
        let connections = validate_connections(raw.connections.as_deref(), path, p);
        let mut sources: Vec<MqttSourceConfig> = Vec::new();
        for (i, s) in raw.sources.iter().flatten().enumerate() {
            let at = format!("{path}.sources[{i}]");
            let Some(name) = checked_name(
                s.name.as_deref(),
                &at,
                |n| sources.iter().any(|o| o.name == n),
                p,
            ) else {
                continue;
            };
            let connection = pick_connection(
                &connections,
                |c| &c.name,
                s.connection.as_deref(),
                "mqtt.connections",
                &at,
                p,
            );
            let mut subscriptions = Vec::new();
            let raw_subs = s.subscriptions.as_deref().unwrap_or_default();
            if raw_subs.is_empty() {
                p.push(format!("{at}.subscriptions"), "needs at least one topic");
            }
            for (j, sub) in raw_subs.iter().enumerate() {
                let sat = format!("{at}.subscriptions[{j}]");
                let topic = match sub.topic.as_deref() {
                    Some(t) => match check_filter(t) {
                        Ok(()) => t.to_string(),
                        Err(e) => {
                            p.push(format!("{sat}.topic"), e);
                            continue;
                        }
                    },
                    None => {
                        p.push(format!("{sat}.topic"), "is required");
                        continue;
                    }
                };
                let qos = sub.qos.unwrap_or(1);
                if qos > 1 {
                    p.push(format!("{sat}.qos"), format!("{qos}: expected 0 or 1"));
                }
                subscriptions.push(Subscription { topic, qos });
            }
            if let Some(connection) = connection {
                sources.push(MqttSourceConfig {
                    name,
                    connection,
                    subscriptions,
                });
            }
        }
        let sink = raw.sink.as_ref().and_then(|s| {
            let at = format!("{path}.sink");
            let connection = pick_connection(
                &connections,
                |c| &c.name,
                s.connection.as_deref(),
                "mqtt.connections",
                &at,
                p,
            );
            MqttSinkConfig::validate(s, connection, &at, p)
        });
        Self {
            connections,
            sources,
            sink,
        }
    }
}

fn validate_connections(
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

/// A topic filter: `#` only last and alone in its level, `+` alone in its level.
pub fn check_filter(t: &str) -> Result<(), String> {
    if t.is_empty() || t.len() > 65_535 {
        return Err("must not be empty".into());
    }
    let levels: Vec<&str> = t.split('/').collect();
    for (i, l) in levels.iter().enumerate() {
        if l.contains('#') && (*l != "#" || i + 1 != levels.len()) {
            return Err(format!("{t:?}: '#' must be a whole last level"));
        }
        if l.contains('+') && *l != "+" {
            return Err(format!("{t:?}: '+' must be a whole level"));
        }
    }
    Ok(())
}

/// Whether `topic` matches `filter` (MQTT wildcard rules).
pub fn matches(filter: &str, topic: &str) -> bool {
    let mut f = filter.split('/');
    let mut t = topic.split('/');
    loop {
        match (f.next(), t.next()) {
            (Some("#"), _) => return true,
            (Some("+"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_match_like_a_broker() {
        assert!(matches("plant/+/temp", "plant/p1/temp"));
        assert!(matches("plant/#", "plant/p1/temp"));
        assert!(matches("#", "a"));
        assert!(!matches("plant/+", "plant/p1/temp"));
        assert!(!matches("plant/p2/temp", "plant/p1/temp"));
    }

    #[test]
    fn urls_and_every_bad_value_are_checked_with_their_paths() {
        assert_eq!(
            parse_url("mqtt://127.0.0.1:1884"),
            Ok(("127.0.0.1".into(), 1884, false))
        );
        assert_eq!(
            parse_url("mqtts://broker"),
            Ok(("broker".into(), 8883, true))
        );
        let raw: RawMqtt = serde_saphyr::from_str(
            "connections:\n  - name: b\n    url: http://x\n    user: u\nsources:\n  - name: s\n    subscriptions:\n      - { topic: 'a/#/b', qos: 2 }\n      - { topic: 'a/+', qos: 2 }\n",
        )
        .unwrap();
        let mut p = Problems::default();
        let cfg = MqttConfig::validate(Some(&raw), "mqtt", &mut p);
        let got: Vec<String> = p.0.iter().map(|x| x.to_string()).collect();
        assert_eq!(
            got,
            vec![
                "mqtt.connections[0].url: \"http://x\": expected mqtt://host:port or mqtts://host:port",
                "mqtt.connections[0].user: user and password go together",
                "mqtt.sources[0].subscriptions[0].topic: \"a/#/b\": '#' must be a whole last level",
                "mqtt.sources[0].subscriptions[1].qos: 2: expected 0 or 1",
            ]
        );
        assert_eq!(cfg.sources[0].connection.client_id, "opex-b");
    }
}
