//! `nats:`: connections, JetStream sources and the `nats` sink. Raw, then validated without I/O
//! (a creds file or a TLS file is read when the daemon starts).

use std::time::Duration;

use serde::Deserialize;

use crate::brokers::nats::{validate_connections, NatsConnectionConfig, RawNatsConnection};
use crate::config::checks::{checked_name, in_range};
use crate::config::{pick_connection, Problems};
use crate::sinks::nats::config::RawNatsSink;

/// First nak delay of the consumer backoff (the spec's 2 s).
pub const NAK_BACKOFF_INITIAL: Duration = Duration::from_secs(2);
/// Longest nak delay of the consumer backoff (the spec's 60 s).
pub const NAK_BACKOFF_MAX: Duration = Duration::from_secs(60);
/// Messages buffered per device (subject) before the oldest is returned to JetStream.
pub const DEVICE_BUFFER: usize = 1024;
/// Default of `max_in_flight`: records of one source in the pipeline at once (so the push
/// queue's group commit can take many in one transaction), never above `max_ack_pending`.
pub const MAX_IN_FLIGHT: u64 = 1024;
/// Default of `max_ack_pending`.
pub const MAX_ACK_PENDING: u64 = 4096;

/// `nats:`
#[derive(Debug, Default, Deserialize)]
pub struct RawNats {
    /// The NATS servers to talk to, each with its credentials and TLS; sources and the sink
    /// name one of them.
    pub connections: Option<Vec<RawNatsConnection>>,
    /// JetStream sources: one durable pull consumer each; records carry `source: nats/<name>`.
    pub sources: Option<Vec<RawNatsSource>>,
    /// The `nats` sink: where flows' `sink: nats` nodes publish.
    pub sink: Option<RawNatsSink>,
}

/// `nats.sources[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawNatsSource {
    /// Records carry `source: nats/<name>` (letters, digits, `-`, `_`).
    pub name: Option<String>,
    /// The connection (by name); optional when there is exactly one.
    pub connection: Option<String>,
    /// The JetStream stream to consume; it must exist.
    pub stream: Option<String>,
    /// The durable consumer's name: it keeps the position across restarts. Created when
    /// missing (explicit acks, no `max_deliver`). Default `opex-<name>`.
    pub durable: Option<String>,
    /// Subjects to take from the stream (wildcards allowed). Default: all of them.
    pub filter_subjects: Option<Vec<String>>,
    /// `all` (default): every message, nothing lost. `latest`: while the pipeline is busy only
    /// the newest message per subject is kept; the replaced ones are acked and counted
    /// (`replaced`), by design.
    pub mode: Option<String>,
    /// Most messages delivered and not yet acked (the consumer's `max_ack_pending`), which also
    /// bounds what the connector holds in memory for this source. Default 4096.
    pub max_ack_pending: Option<u64>,
    /// Most messages of this source in the pipeline at once: offered to the flows and not yet
    /// settled. More lets one commit of the push queue store more of them (their acks then
    /// leave together, after that commit); fewer holds less memory. At most `max_ack_pending`.
    /// Default 1024 (or `max_ack_pending` when that is lower).
    pub max_in_flight: Option<u64>,
    /// Seconds JetStream waits for an ack before it redelivers (`ack_wait`). Default 60.
    pub ack_wait_secs: Option<u64>,
    /// First nak delay when a sink refuses, in milliseconds; doubled per redelivery. Default
    /// 2000 (the delivery promise's 2 s). Shorter values are for tests.
    pub nak_backoff_initial_ms: Option<u64>,
    /// Longest nak delay, in milliseconds. Default 60000.
    pub nak_backoff_max_ms: Option<u64>,
}

/// What a JetStream source keeps while the pipeline is busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatsMode {
    /// Every message, in order per subject.
    All,
    /// The newest message per subject; the replaced ones are acked and counted.
    Latest,
}

/// One JetStream source, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsSourceConfig {
    /// Its name; records carry `nats/<name>`.
    pub name: String,
    /// Its connection.
    pub connection: NatsConnectionConfig,
    /// The stream.
    pub stream: String,
    /// The durable consumer.
    pub durable: String,
    /// Filter subjects (empty: all).
    pub filter_subjects: Vec<String>,
    /// All or latest.
    pub mode: NatsMode,
    /// The consumer's `max_ack_pending`.
    pub max_ack_pending: u64,
    /// Most messages in the pipeline at once.
    pub max_in_flight: usize,
    /// The consumer's `ack_wait`.
    pub ack_wait: Duration,
    /// First nak delay.
    pub nak_backoff_initial: Duration,
    /// Longest nak delay.
    pub nak_backoff_max: Duration,
}

/// `nats:`, validated.
#[derive(Debug, Clone, Default)]
pub struct NatsConfig {
    /// Connections.
    pub connections: Vec<NatsConnectionConfig>,
    /// JetStream sources.
    pub sources: Vec<NatsSourceConfig>,
}

impl NatsConfig {
    /// Validates `nats:` (absent: nothing configured).
    pub fn validate(raw: Option<&RawNats>, path: &str, p: &mut Problems) -> Self {
        let Some(raw) = raw else {
            return Self::default();
        };
        let connections = validate_connections(raw.connections.as_deref(), path, p);
        let mut sources: Vec<NatsSourceConfig> = Vec::new();
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
                "nats.connections",
                &at,
                p,
            );
            let stream = match s.stream.as_deref() {
                None | Some("") => {
                    p.push(format!("{at}.stream"), "is required");
                    String::new()
                }
                Some(st) if !valid_nats_name(st) => {
                    p.push(
                        format!("{at}.stream"),
                        format!("{st:?} must not contain spaces, '.', '*', '>' or '/'"),
                    );
                    String::new()
                }
                Some(st) => st.to_string(),
            };
            let durable = match s.durable.as_deref() {
                None => format!("opex-{name}"),
                Some(d) if !valid_nats_name(d) => {
                    p.push(
                        format!("{at}.durable"),
                        format!("{d:?} must not be empty nor contain spaces, '.', '*', '>' or '/'"),
                    );
                    String::new()
                }
                Some(d) => d.to_string(),
            };
            let filter_subjects = s.filter_subjects.clone().unwrap_or_default();
            for (j, f) in filter_subjects.iter().enumerate() {
                if let Err(e) = check_subject(f, true) {
                    p.push(format!("{at}.filter_subjects[{j}]"), e);
                }
            }
            let mode = match s.mode.as_deref() {
                None | Some("all") => NatsMode::All,
                Some("latest") => NatsMode::Latest,
                Some(m) => {
                    p.push(
                        format!("{at}.mode"),
                        format!("expected all or latest, got {m:?}"),
                    );
                    NatsMode::All
                }
            };
            let max_ack_pending = in_range(
                s.max_ack_pending,
                MAX_ACK_PENDING,
                1..=1_000_000,
                format!("{at}.max_ack_pending"),
                p,
            );
            let max_in_flight = in_range(
                s.max_in_flight,
                MAX_IN_FLIGHT.min(max_ack_pending),
                1..=65_536,
                format!("{at}.max_in_flight"),
                p,
            );
            if max_in_flight > max_ack_pending {
                p.push(
                    format!("{at}.max_in_flight"),
                    format!(
                        "{max_in_flight} is above max_ack_pending ({max_ack_pending}): JetStream never hands out more"
                    ),
                );
            }
            let ack_wait_secs = in_range(
                s.ack_wait_secs,
                60,
                1..=86_400,
                format!("{at}.ack_wait_secs"),
                p,
            );
            let initial = in_range(
                s.nak_backoff_initial_ms,
                NAK_BACKOFF_INITIAL.as_millis() as u64,
                1..=3_600_000,
                format!("{at}.nak_backoff_initial_ms"),
                p,
            );
            let max = in_range(
                s.nak_backoff_max_ms,
                NAK_BACKOFF_MAX.as_millis() as u64,
                1..=3_600_000,
                format!("{at}.nak_backoff_max_ms"),
                p,
            );
            if max < initial {
                p.push(
                    format!("{at}.nak_backoff_max_ms"),
                    format!("{max} is below nak_backoff_initial_ms ({initial})"),
                );
            }
            let Some(connection) = connection else {
                continue;
            };
            sources.push(NatsSourceConfig {
                name,
                connection,
                stream,
                durable,
                filter_subjects,
                mode,
                max_ack_pending,
                max_in_flight: max_in_flight as usize,
                ack_wait: Duration::from_secs(ack_wait_secs),
                nak_backoff_initial: Duration::from_millis(initial),
                nak_backoff_max: Duration::from_millis(max),
            });
        }
        Self {
            connections,
            sources,
        }
    }
}

/// A stream or consumer name: no white space, `.`, `*`, `>`, `/`.
fn valid_nats_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && !s
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '.' | '*' | '>' | '/' | '\\'))
}

/// Checks a subject (with wildcards when `wildcards`): non-empty tokens, no white space, `>`
/// only last.
pub fn check_subject(s: &str, wildcards: bool) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    let tokens: Vec<&str> = s.split('.').collect();
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() || t.chars().any(char::is_whitespace) {
            return Err(format!(
                "{s:?} is not a subject (empty token or white space)"
            ));
        }
        let wild = *t == "*" || *t == ">";
        if wild && !wildcards {
            return Err(format!("{s:?}: wildcards are not allowed here"));
        }
        if *t == ">" && i + 1 != tokens.len() {
            return Err(format!("{s:?}: '>' must be the last token"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(yaml: &str) -> (NatsConfig, Vec<String>) {
        let raw: RawNats = serde_saphyr::from_str(yaml).unwrap();
        let mut p = Problems::default();
        let cfg = NatsConfig::validate(Some(&raw), "nats", &mut p);
        (cfg, p.0.iter().map(|x| x.to_string()).collect())
    }

    #[test]
    fn a_source_gets_the_spec_backoff_and_its_only_connection_by_default() {
        let (cfg, problems) = validate(
            "connections:\n  - name: plant\n    servers: [nats://127.0.0.1:4222]\nsources:\n  - name: orders\n    stream: ORDERS\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        let s = &cfg.sources[0];
        assert_eq!(s.connection.name, "plant");
        assert_eq!(s.durable, "opex-orders");
        assert_eq!(s.mode, NatsMode::All);
        assert_eq!(s.nak_backoff_initial, Duration::from_secs(2));
        assert_eq!(s.nak_backoff_max, Duration::from_secs(60));
        assert_eq!((s.max_ack_pending, s.max_in_flight), (4096, 1024));
    }

    #[test]
    fn max_in_flight_defaults_to_max_ack_pending_when_that_is_lower_and_may_not_exceed_it() {
        let conn = "connections:\n  - name: plant\n    servers: [nats://127.0.0.1:4222]\n";
        let (cfg, problems) = validate(&format!(
            "{conn}sources:\n  - name: a\n    stream: A\n    max_ack_pending: 100\n"
        ));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(cfg.sources[0].max_in_flight, 100);
        let (_, problems) = validate(&format!(
            "{conn}sources:\n  - name: a\n    stream: A\n    max_ack_pending: 100\n    max_in_flight: 200\n  - name: b\n    stream: B\n    max_in_flight: 0\n"
        ));
        assert_eq!(
            problems,
            vec![
                "nats.sources[0].max_in_flight: 200 is above max_ack_pending (100): JetStream never hands out more",
                "nats.sources[1].max_in_flight: 0 is outside 1..=65536",
            ]
        );
    }

    #[test]
    fn every_bad_value_is_reported_with_its_path() {
        let (_, problems) = validate(
            "connections:\n  - name: plant\n    servers: []\n    token: ''\nsources:\n  - name: o\n    connection: other\n    stream: A.B\n    mode: newest\n    filter_subjects: ['a.>.b']\n",
        );
        assert_eq!(
            problems,
            vec![
                "nats.connections[0].servers: needs at least one server URL",
                "nats.connections[0]: give one of user/password, token or creds_file (non-empty)",
                "nats.sources[0].connection: no connection named \"other\" in nats.connections",
                "nats.sources[0].stream: \"A.B\" must not contain spaces, '.', '*', '>' or '/'",
                "nats.sources[0].filter_subjects[0]: \"a.>.b\": '>' must be the last token",
                "nats.sources[0].mode: expected all or latest, got \"newest\"",
            ]
        );
    }
}
