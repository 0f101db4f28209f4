//! `commands:`: raw, validated without I/O.

use std::time::Duration;

use serde::Deserialize;

use crate::brokers::mqtt::MqttConnectionConfig;
use crate::brokers::nats::NatsConnectionConfig;
use crate::config::checks::{checked_token, in_range, TokenRule};
use crate::config::{pick_connection, Problem, Problems};
use crate::sources::mqtt::config::MqttConfig;
use crate::sources::nats::config::NatsConfig;

/// Where a subject or topic template names the device.
pub const DEVICE: &str = "{device}";

/// `commands:`
#[derive(Debug, Default, Deserialize)]
pub struct RawCommands {
    /// Bearer token of `POST /api/devices/{device}/write`, at least 16 characters (e.g.
    /// `openssl rand -hex 16`). Without it the HTTP path answers `404`.
    pub token: Option<String>,
    /// How long a command may wait for its device's turn before it is refused `expired`, in
    /// milliseconds, unless it says otherwise. Default 5000.
    pub expires_ms: Option<u64>,
    /// Most commands one device takes per second; more are refused `rate_limited`. Default 10.
    pub max_per_second: Option<u64>,
    /// NATS request-reply: a request on `subject` (with `{device}` as one whole token) is a
    /// command; the result is the reply.
    pub nats: Option<RawNatsCommands>,
    /// MQTT: a message on `topic` (with `{device}` as one whole level) is a command; the result
    /// goes to the request's MQTT 5 response topic, else to `<topic>/result`.
    pub mqtt: Option<RawMqttCommands>,
}

/// `commands.nats:`
#[derive(Debug, Default, Deserialize)]
pub struct RawNatsCommands {
    /// The connection (by name); optional when there is exactly one.
    pub connection: Option<String>,
    /// Default `opex.cmd.{device}`.
    pub subject: Option<String>,
}

/// `commands.mqtt:`
#[derive(Debug, Default, Deserialize)]
pub struct RawMqttCommands {
    /// The connection (by name); optional when there is exactly one.
    pub connection: Option<String>,
    /// Default `opex/cmd/{device}`.
    pub topic: Option<String>,
}

/// `commands:`, validated.
#[derive(Debug, Clone)]
pub struct CommandsConfig {
    /// The HTTP path's bearer token.
    pub token: Option<String>,
    /// Default expiry of a command.
    pub expires: Duration,
    /// Most commands per device per second.
    pub max_per_second: u32,
    /// The NATS path: its connection and subject template.
    pub nats: Option<(NatsConnectionConfig, String)>,
    /// The MQTT path: its connection and topic template.
    pub mqtt: Option<(MqttConnectionConfig, String)>,
}

impl Default for CommandsConfig {
    fn default() -> Self {
        Self {
            token: None,
            expires: Duration::from_millis(5000),
            max_per_second: 10,
            nats: None,
            mqtt: None,
        }
    }
}

/// Checks that `template` names the device as one whole `sep`-separated piece.
fn check_template(template: &str, sep: char, what: &str) -> Result<(), String> {
    let pieces: Vec<&str> = template.split(sep).collect();
    let named = pieces.iter().filter(|p| **p == DEVICE).count();
    if named != 1 || template.matches(DEVICE).count() != 1 {
        return Err(format!(
            "{template:?} must hold {DEVICE} once, as a whole {what}"
        ));
    }
    if pieces.iter().any(|p| p.is_empty()) {
        return Err(format!("{template:?} has an empty {what}"));
    }
    let wild: &[char] = if sep == '.' { &['*', '>'] } else { &['+', '#'] };
    if template.contains(wild) || template.chars().any(char::is_whitespace) {
        return Err(format!(
            "{template:?} must not hold wildcards or white space"
        ));
    }
    Ok(())
}

impl CommandsConfig {
    /// Validates `commands:` at `path`; `tokens` is the rule for tokens (their length).
    pub fn validate(
        raw: Option<&RawCommands>,
        path: &str,
        nats: &NatsConfig,
        mqtt: &MqttConfig,
        tokens: TokenRule,
        p: &mut Problems,
        warnings: &mut Vec<Problem>,
    ) -> Option<Self> {
        let raw = raw?;
        if let Some(t) = &raw.token {
            checked_token(t, &format!("{path}.token"), tokens, p, warnings);
        }
        let expires = in_range(
            raw.expires_ms,
            5000,
            1..=60_000,
            format!("{path}.expires_ms"),
            p,
        );
        let max_per_second = in_range(
            raw.max_per_second,
            10,
            1..=1000,
            format!("{path}.max_per_second"),
            p,
        );
        let nats = raw.nats.as_ref().and_then(|n| {
            let at = format!("{path}.nats");
            let subject = n
                .subject
                .clone()
                .unwrap_or_else(|| format!("opex.cmd.{DEVICE}"));
            if let Err(e) = check_template(&subject, '.', "token") {
                p.push(format!("{at}.subject"), e);
            }
            let c = pick_connection(
                &nats.connections,
                |c| &c.name,
                n.connection.as_deref(),
                "nats.connections",
                &at,
                p,
            )?;
            Some((c, subject))
        });
        let mqtt = raw.mqtt.as_ref().and_then(|m| {
            let at = format!("{path}.mqtt");
            let topic = m
                .topic
                .clone()
                .unwrap_or_else(|| format!("opex/cmd/{DEVICE}"));
            if let Err(e) = check_template(&topic, '/', "level") {
                p.push(format!("{at}.topic"), e);
            }
            let c = pick_connection(
                &mqtt.connections,
                |c| &c.name,
                m.connection.as_deref(),
                "mqtt.connections",
                &at,
                p,
            )?;
            Some((c, topic))
        });
        Some(Self {
            token: raw.token.clone(),
            expires: Duration::from_millis(expires),
            max_per_second: max_per_second as u32,
            nats,
            mqtt,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_name_the_device_once_as_a_whole_piece() {
        assert!(check_template("opex.cmd.{device}", '.', "token").is_ok());
        assert!(check_template("opex/cmd/{device}", '/', "level").is_ok());
        assert!(check_template("opex.cmd", '.', "token").is_err());
        assert!(check_template("opex.cmd.x{device}", '.', "token").is_err());
        assert!(check_template("opex.{device}.{device}", '.', "token").is_err());
        assert!(check_template("opex/+/{device}", '/', "level").is_err());
        assert!(check_template("opex..{device}", '.', "token").is_err());
    }
}
