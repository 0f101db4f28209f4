//! `telemetry:` and its `alerts:` channels: raw, validated without I/O.
//!
//! The log is always a channel. The MQTT and NATS channels name a connection of
//! `mqtt.connections` / `nats.connections`, so a broker (with its TLS and credentials) is
//! described once, whether it also carries records or only alerts.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::brokers::mqtt::MqttConnectionConfig;
use crate::brokers::nats::NatsConnectionConfig;
use crate::config::checks::in_range;
use crate::config::{pick_connection, Problems};
use crate::sources::mqtt::config::MqttConfig;
use crate::sources::nats::config::NatsConfig;

/// `telemetry:`
#[derive(Debug, Default, Deserialize)]
pub struct RawTelemetry {
    /// Where alerts go besides the log: `webhook`, `mqtt`, `nats`.
    pub alerts: Option<RawAlerts>,
}

/// `telemetry.alerts:`
#[derive(Debug, Default, Deserialize)]
pub struct RawAlerts {
    /// Seconds between two checks of every queue and loss counter. Default 5. The repeat of a
    /// lasting `full` stays every 10 minutes whatever this is.
    pub check_interval_secs: Option<u64>,
    /// Seconds a problem of `problems` in `/api/status` (a device offline, a sink disconnected,
    /// failing or held, an uplink failing, an alert channel failing, the disk nearly full...)
    /// must last before it is alerted; its recovery notice follows when it clears. Default 30.
    pub after_secs: Option<u64>,
    /// Percent of the data dir's disk that must stay free: under it the disk is a
    /// `disk_nearly_full` problem. Default 5; 0 turns the check off (a disk watched by other
    /// means, or a test box whose free space is not the connector's business).
    pub disk_free_pct: Option<u64>,
    /// POST each alert as JSON to a URL, retried with a capped exponential back-off.
    pub webhook: Option<RawWebhookChannel>,
    /// Publish each alert as JSON to an MQTT topic (QoS 1).
    pub mqtt: Option<RawMqttChannel>,
    /// Publish each alert as JSON to a NATS subject.
    pub nats: Option<RawNatsChannel>,
}

/// `telemetry.alerts.webhook:`
#[derive(Debug, Default, Deserialize)]
pub struct RawWebhookChannel {
    /// Where to `POST` (`http://` or `https://`). Required.
    pub url: Option<String>,
    /// Sent as `Authorization: Bearer <token>`. Optional.
    pub token: Option<String>,
    /// Extra request headers, e.g. `{X-Api-Key: ...}`.
    pub headers: Option<BTreeMap<String, String>>,
    /// Seconds one request may take (at most 60: a stop waits for a request in flight).
    /// Default 10.
    pub timeout_secs: Option<u64>,
    /// Attempts after the first, for connection errors, timeouts, 408, 429 and 5xx; then the
    /// alert is given up and counted in `failed_total`. Default 5.
    pub retries: Option<u64>,
    /// First wait between attempts in milliseconds, doubled after each. Default 1000.
    pub retry_initial_ms: Option<u64>,
    /// Longest wait between attempts in milliseconds. Default 60000.
    pub retry_max_ms: Option<u64>,
}

/// `telemetry.alerts.mqtt:`
#[derive(Debug, Default, Deserialize)]
pub struct RawMqttChannel {
    /// A connection of `mqtt.connections` (by name); optional when there is exactly one. The
    /// client id is `<client_id>-alerts`.
    pub connection: Option<String>,
    /// Topic to publish to (QoS 1, not retained). Default `opex/alerts`.
    pub topic: Option<String>,
}

/// `telemetry.alerts.nats:`
#[derive(Debug, Default, Deserialize)]
pub struct RawNatsChannel {
    /// A connection of `nats.connections` (by name); optional when there is exactly one.
    pub connection: Option<String>,
    /// Subject to publish to (each publish is flushed). Default `opex.alerts`.
    pub subject: Option<String>,
}

/// Default of `telemetry.alerts.after_secs`.
pub const AFTER_SECS: u64 = 30;

/// Default of `telemetry.alerts.disk_free_pct`.
pub const DISK_FREE_PCT: u64 = 5;

/// The webhook channel, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookChannelConfig {
    /// Where to POST.
    pub url: String,
    /// Bearer token.
    pub token: Option<String>,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// Time one request may take.
    pub timeout: Duration,
    /// Attempts after the first.
    pub retries: u32,
    /// First wait between attempts.
    pub retry_initial: Duration,
    /// Longest wait between attempts.
    pub retry_max: Duration,
}

/// `telemetry.alerts`, validated.
#[derive(Debug, Clone)]
pub struct AlertsConfig {
    /// Time between two checks.
    pub check_interval: Duration,
    /// How long a problem lasts before it is alerted.
    pub after: Duration,
    /// Percent of the data dir's disk that must stay free (0: not checked).
    pub disk_free_pct: u64,
    /// The webhook channel.
    pub webhook: Option<WebhookChannelConfig>,
    /// The MQTT channel: its broker and topic.
    pub mqtt: Option<(MqttConnectionConfig, String)>,
    /// The NATS channel: its server and subject.
    pub nats: Option<(NatsConnectionConfig, String)>,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        Self {
            check_interval: crate::admission::level::CHECK_EVERY,
            after: Duration::from_secs(AFTER_SECS),
            disk_free_pct: DISK_FREE_PCT,
            webhook: None,
            mqtt: None,
            nats: None,
        }
    }
}

impl AlertsConfig {
    /// Validates `telemetry` (`path` is its config path) against the validated `mqtt:` and
    /// `nats:` sections, whose connections the channels name.
    pub fn validate(
        raw: Option<&RawTelemetry>,
        mqtt_config: &MqttConfig,
        nats_config: &NatsConfig,
        path: &str,
        p: &mut Problems,
    ) -> Self {
        let Some(raw) = raw.and_then(|t| t.alerts.as_ref()) else {
            return Self::default();
        };
        let at = format!("{path}.alerts");
        let interval = in_range(
            raw.check_interval_secs,
            crate::admission::level::CHECK_EVERY.as_secs(),
            1..=300,
            format!("{at}.check_interval_secs"),
            p,
        );
        let webhook = raw
            .webhook
            .as_ref()
            .and_then(|w| validate_webhook(w, &format!("{at}.webhook"), p));
        let mqtt = raw.mqtt.as_ref().and_then(|m| {
            let here = format!("{at}.mqtt");
            let topic = m.topic.clone().unwrap_or_else(|| "opex/alerts".into());
            if topic.is_empty() || topic.contains(['+', '#']) {
                p.push(
                    format!("{here}.topic"),
                    format!("{topic:?}: must not be empty nor hold + or #"),
                );
            }
            let c = pick_connection(
                &mqtt_config.connections,
                |c| &c.name,
                m.connection.as_deref(),
                "mqtt.connections",
                &here,
                p,
            );
            // The channel's client id is `<client_id>-alerts`, a source's `<client_id>-<name>`.
            if let Some(c) = &c {
                let clash = mqtt_config
                    .sources
                    .iter()
                    .any(|s| s.name == "alerts" && s.connection.client_id == c.client_id);
                if clash {
                    p.push(
                        format!("{here}.connection"),
                        "the mqtt source named alerts on this connection would share the alert channel's client id: rename the source",
                    );
                }
            }
            c.map(|c| (c, topic))
        });
        let nats = raw.nats.as_ref().and_then(|n| {
            let here = format!("{at}.nats");
            let subject = n.subject.clone().unwrap_or_else(|| "opex.alerts".into());
            if subject.is_empty()
                || subject.chars().any(char::is_whitespace)
                || subject.contains(['*', '>'])
            {
                p.push(
                    format!("{here}.subject"),
                    format!("{subject:?}: must not be empty nor hold white space, * or >"),
                );
            }
            let c = pick_connection(
                &nats_config.connections,
                |c| &c.name,
                n.connection.as_deref(),
                "nats.connections",
                &here,
                p,
            );
            c.map(|c| (c, subject))
        });
        let after = in_range(
            raw.after_secs,
            AFTER_SECS,
            1..=86_400,
            format!("{at}.after_secs"),
            p,
        );
        let disk_free_pct = in_range(
            raw.disk_free_pct,
            DISK_FREE_PCT,
            0..=50,
            format!("{at}.disk_free_pct"),
            p,
        );
        Self {
            check_interval: Duration::from_secs(interval),
            after: Duration::from_secs(after),
            disk_free_pct,
            webhook,
            mqtt,
            nats,
        }
    }
}

fn validate_webhook(
    raw: &RawWebhookChannel,
    at: &str,
    p: &mut Problems,
) -> Option<WebhookChannelConfig> {
    let before = p.0.len();
    let url = match raw.url.as_deref() {
        None => {
            p.push(format!("{at}.url"), "is required");
            String::new()
        }
        Some(u) => {
            let rest = u
                .strip_prefix("http://")
                .or_else(|| u.strip_prefix("https://"));
            if !matches!(rest, Some(r) if !r.is_empty() && !r.starts_with('/')) {
                p.push(
                    format!("{at}.url"),
                    format!("expected an http:// or https:// URL, got {u:?}"),
                );
            }
            u.to_string()
        }
    };
    if matches!(raw.token.as_deref(), Some(t) if t.is_empty()) {
        p.push(
            format!("{at}.token"),
            "must not be empty (leave it out for none)",
        );
    }
    let mut headers = Vec::new();
    for (name, value) in raw.headers.iter().flatten() {
        let name_ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !name_ok {
            p.push(format!("{at}.headers.{name}"), "is not a valid header name");
        } else if value.bytes().any(|b| b == b'\r' || b == b'\n') {
            p.push(format!("{at}.headers.{name}"), "must not hold a line break");
        } else {
            headers.push((name.clone(), value.clone()));
        }
    }
    let timeout = in_range(
        raw.timeout_secs,
        10,
        1..=60,
        format!("{at}.timeout_secs"),
        p,
    );
    let retries = in_range(raw.retries, 5, 0..=100, format!("{at}.retries"), p);
    let initial = in_range(
        raw.retry_initial_ms,
        1000,
        1..=600_000,
        format!("{at}.retry_initial_ms"),
        p,
    );
    let max = in_range(
        raw.retry_max_ms,
        60_000,
        1..=3_600_000,
        format!("{at}.retry_max_ms"),
        p,
    );
    if initial > max {
        p.push(
            format!("{at}.retry_initial_ms"),
            format!("{initial} is more than retry_max_ms ({max})"),
        );
    }
    (p.0.len() == before).then(|| WebhookChannelConfig {
        url,
        token: raw.token.clone(),
        headers,
        timeout: Duration::from_secs(timeout),
        retries: retries as u32,
        retry_initial: Duration::from_millis(initial),
        retry_max: Duration::from_millis(max),
    })
}

#[cfg(test)]
mod tests {
    use crate::config::from_yaml;

    const BASE: &str = "connector:\n  data_dir: /d\nmqtt:\n  connections:\n    - { name: site, url: \"mqtt://127.0.0.1:1883\" }\n";

    #[test]
    fn channels_default_their_topic_and_interval_and_pick_the_only_connection() {
        let cfg = from_yaml(&format!("{BASE}telemetry:\n  alerts:\n    mqtt: {{}}\n")).unwrap();
        let (connection, topic) = cfg.alerts.mqtt.unwrap();
        assert_eq!(
            (connection.name.as_str(), topic.as_str()),
            ("site", "opex/alerts")
        );
        assert_eq!(
            cfg.alerts.check_interval,
            crate::admission::level::CHECK_EVERY
        );
        assert!(cfg.alerts.webhook.is_none() && cfg.alerts.nats.is_none());
    }

    #[test]
    fn an_mqtt_source_named_alerts_on_the_channels_connection_is_refused() {
        let text = format!(
            "{BASE}  sources:\n    - {{ name: alerts, subscriptions: [{{ topic: x }}] }}\ntelemetry:\n  alerts:\n    mqtt: {{}}\n"
        );
        let errs = from_yaml(&text).unwrap_err().to_string();
        assert!(
            errs.starts_with("telemetry.alerts.mqtt.connection: the mqtt source named alerts"),
            "{errs}"
        );
    }
}
