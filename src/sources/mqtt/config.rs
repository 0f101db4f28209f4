//! `mqtt:`: connections, sources (subscriptions) and the `mqtt` sink. Raw, then validated
//! without I/O (TLS files are read when the daemon starts).

use serde::Deserialize;

use crate::brokers::mqtt::{validate_connections, MqttConnectionConfig, RawMqttConnection};
use crate::config::checks::checked_name;
use crate::config::{pick_connection, Problems};
use crate::sinks::mqtt::config::RawMqttSink;

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
        Self {
            connections,
            sources,
        }
    }
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
    fn every_bad_value_is_checked_with_its_path() {
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
