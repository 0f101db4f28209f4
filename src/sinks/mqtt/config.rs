//! `mqtt.sink:`: raw, validated without I/O.

use serde::Deserialize;
use serde_json::Value;

use crate::brokers::mqtt::MqttConnectionConfig;
use crate::config::Problems;
use crate::flow::Template;

/// `mqtt.sink:`
#[derive(Debug, Default, Deserialize)]
pub struct RawMqttSink {
    /// The connection (by name); optional when there is exactly one.
    pub connection: Option<String>,
    /// Topic template, e.g. `opex/{{source}}/{{key}}` (`{{path}}` reads the record as in
    /// flows). Default `opex/{{key}}`.
    pub topic: Option<String>,
    /// 0 or 1 (default 1). QoS 1 messages in flight are sent again after a reconnect or a
    /// broker restart (`clean_session: false`).
    pub qos: Option<u8>,
    /// Publish with the retain flag. Default false.
    pub retain: Option<bool>,
}

/// The `mqtt` sink, validated.
#[derive(Debug, Clone)]
pub struct MqttSinkConfig {
    /// Its broker.
    pub connection: MqttConnectionConfig,
    /// The topic template.
    pub topic: Template,
    /// 0 or 1.
    pub qos: u8,
    /// Retain flag.
    pub retain: bool,
}

impl MqttSinkConfig {
    /// Validates `mqtt.sink` (`connection` was resolved by the caller).
    pub fn validate(
        raw: &RawMqttSink,
        connection: Option<MqttConnectionConfig>,
        at: &str,
        p: &mut Problems,
    ) -> Option<Self> {
        let text = raw.topic.as_deref().unwrap_or("opex/{{key}}");
        if text.is_empty() || text.contains(['+', '#']) {
            p.push(
                format!("{at}.topic"),
                "must not be empty nor hold the wildcards '+' or '#'",
            );
        }
        let topic = match Template::parse(&Value::String(text.to_string())) {
            Ok(t) => Some(t),
            Err(e) => {
                p.push(format!("{at}.topic"), e);
                None
            }
        };
        let qos = raw.qos.unwrap_or(1);
        if qos > 1 {
            p.push(format!("{at}.qos"), format!("{qos}: expected 0 or 1"));
        }
        Some(Self {
            connection: connection?,
            topic: topic?,
            qos: qos.min(1),
            retain: raw.retain.unwrap_or(false),
        })
    }
}
