//! An `mqtt` sink (`mqtt.sink:`, or a `sinks[]` entry of `type: mqtt`): raw, validated without
//! I/O.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::brokers::mqtt::MqttConnectionConfig;
use crate::config::checks::in_range;
use crate::config::Problems;
use crate::flow::Template;
use crate::sinks::queue::config::validate_queue;
use crate::sinks::queue::QueueMode;

/// `mqtt.sink:`
#[derive(Debug, Default, Deserialize)]
pub struct RawMqttSink {
    /// The connection (by name); optional when there is exactly one.
    pub connection: Option<String>,
    /// Topic template, e.g. `opex/{{source}}/{{key}}` (`{{path}}` reads the record as in
    /// flows). Default `opex/{{key}}`.
    pub topic: Option<String>,
    /// 0 or 1 (default 1). With 1 a record is settled only once the broker acknowledged it
    /// (PUBACK); messages in flight are sent again after a reconnect (`clean_session: false`).
    /// With 0 nothing confirms a publish: `validate` warns, and the ledger counts such records
    /// as `unconfirmed`.
    pub qos: Option<u8>,
    /// Publish with the retain flag. Default false.
    pub retain: Option<bool>,
    /// Seconds a QoS 1 publish may wait for its PUBACK before the source is told to retry (the
    /// record may then arrive twice). Default 30.
    pub ack_timeout_secs: Option<u64>,
    /// `memory` (default) or `disk`: a durable LMDB queue (`queue-<name>.db` under the data
    /// dir) in front of the broker, acknowledged to the source after its commit, so records
    /// survive a crash and an outage longer than the client's queue.
    pub queue: Option<String>,
    /// With `queue: disk`: the queue's quota in MiB of logical bytes. Default 1024.
    pub max_quota_mb: Option<u64>,
    /// With `queue: disk`: `evict_oldest` (default) or `block` at the quota, as the push
    /// queue's.
    pub on_full: Option<String>,
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
    /// Longest wait for a PUBACK.
    pub ack_timeout: Duration,
    /// What waits in front of the broker: the client's memory queue (1024), or a disk queue.
    pub queue: QueueMode,
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
        let ack_timeout = in_range(
            raw.ack_timeout_secs,
            30,
            1..=3600,
            format!("{at}.ack_timeout_secs"),
            p,
        );
        let queue = validate_queue(
            raw.queue.as_deref(),
            raw.max_quota_mb,
            raw.on_full.as_deref(),
            at,
            p,
        );
        Some(Self {
            ack_timeout: Duration::from_secs(ack_timeout),
            queue,
            connection: connection?,
            topic: topic?,
            qos: qos.min(1),
            retain: raw.retain.unwrap_or(false),
        })
    }
}
