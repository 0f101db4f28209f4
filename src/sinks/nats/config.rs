//! `nats.sink:`: raw, validated without I/O.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::brokers::nats::NatsConnectionConfig;
use crate::config::checks::in_range;
use crate::config::Problems;
use crate::flow::Template;
use crate::sinks::queue::config::validate_queue;
use crate::sinks::queue::QueueMode;

/// Records waiting for the publisher: the spec's fixed memory channel of 4096.
pub const CHANNEL: usize = 4096;

/// `nats.sink:`
#[derive(Debug, Default, Deserialize)]
pub struct RawNatsSink {
    /// The connection (by name); optional when there is exactly one.
    pub connection: Option<String>,
    /// Subject template, e.g. `plant.{{source}}.{{key}}` (`{{path}}` reads the record as in
    /// flows; `/` in a source name is kept). When the subject belongs to a JetStream stream the
    /// record is published with an ack from the stream, otherwise as a core publish confirmed by
    /// a flush. Default `opex.{{key}}`.
    pub subject: Option<String>,
    /// Publish attempts after the first, with a doubling wait between them; a record that still
    /// fails is counted `failed`, alerted, and its source told to retry. Default 5.
    pub retries: Option<u64>,
    /// First wait between attempts, in milliseconds. Default 200.
    pub retry_initial_ms: Option<u64>,
    /// Longest wait between attempts, in milliseconds. Default 5000.
    pub retry_max_ms: Option<u64>,
    /// Seconds one publish may wait for its ack. Default 5.
    pub timeout_secs: Option<u64>,
    /// `memory` (default) or `disk`: a durable LMDB queue (`queue-<name>.db` under the data
    /// dir) in front of the server, acknowledged to the source after its commit, so records
    /// survive a crash and an outage longer than the memory bound.
    pub queue: Option<String>,
    /// With `queue: disk`: the queue's quota in MiB of logical bytes. Default 1024.
    pub max_quota_mb: Option<u64>,
    /// With `queue: disk`: `evict_oldest` (default) or `block` at the quota, as the push
    /// queue's.
    pub on_full: Option<String>,
}

/// The `nats` sink, validated.
#[derive(Debug, Clone)]
pub struct NatsSinkConfig {
    /// Its connection.
    pub connection: NatsConnectionConfig,
    /// The subject template.
    pub subject: Template,
    /// Attempts after the first.
    pub retries: u32,
    /// First wait between attempts.
    pub retry_initial: Duration,
    /// Longest wait between attempts.
    pub retry_max: Duration,
    /// Ack wait of one publish.
    pub timeout: Duration,
    /// What waits in front of the server: the publisher's memory channel (4096), or a disk queue.
    pub queue: QueueMode,
}

impl NatsSinkConfig {
    /// Validates `nats.sink` (`connection` was resolved by the caller).
    pub fn validate(
        raw: &RawNatsSink,
        connection: Option<NatsConnectionConfig>,
        at: &str,
        p: &mut Problems,
    ) -> Option<Self> {
        let text = raw.subject.as_deref().unwrap_or("opex.{{key}}");
        let subject = match Template::parse(&Value::String(text.to_string())) {
            Ok(t) => Some(t),
            Err(e) => {
                p.push(format!("{at}.subject"), e);
                None
            }
        };
        if text.trim().is_empty() || text.chars().any(char::is_whitespace) {
            p.push(
                format!("{at}.subject"),
                "must not be empty nor hold white space",
            );
        }
        let retries = in_range(raw.retries, 5, 0..=100, format!("{at}.retries"), p);
        let initial = in_range(
            raw.retry_initial_ms,
            200,
            1..=600_000,
            format!("{at}.retry_initial_ms"),
            p,
        );
        let max = in_range(
            raw.retry_max_ms,
            5000,
            1..=600_000,
            format!("{at}.retry_max_ms"),
            p,
        );
        let timeout = in_range(
            raw.timeout_secs,
            5,
            1..=600,
            format!("{at}.timeout_secs"),
            p,
        );
        Some(Self {
            queue: validate_queue(
                raw.queue.as_deref(),
                raw.max_quota_mb,
                raw.on_full.as_deref(),
                at,
                p,
            ),
            connection: connection?,
            subject: subject?,
            retries: retries as u32,
            retry_initial: Duration::from_millis(initial),
            retry_max: Duration::from_millis(max.max(initial)),
            timeout: Duration::from_secs(timeout),
        })
    }
}
