//! A `push` sink's config: the queue (`connector.push_queue`, or the queue keys of a
//! `sinks[]` entry), the uplink (`connector.push`, or `uplink:`) and the preprocess rules:
//! raw, validated without I/O.

use std::time::Duration;

use serde::Deserialize;

use super::preprocess::{PreprocessRule, RawPreprocessRule};
use crate::admission::OnFull;
use crate::config::Problems;
use crate::sinks::queue::config::{validate_on_full, validate_quota_mb, DEFAULT_QUOTA_MB};
use crate::sinks::queue::DeliveryConfig;

/// `connector.push_queue:`
#[derive(Debug, Default, Deserialize)]
pub struct RawPushQueue {
    /// Keep the push queue on disk (`push_queue.db`). Default true when the section is there.
    /// Without it, records wait in a 16 MiB memory buffer that is lost on restart.
    pub enabled: Option<bool>,
    /// The queue's quota in MiB of logical bytes (key + value + 64 bytes per row). Default 1024.
    pub max_quota_mb: Option<u64>,
    /// What happens at the quota: `evict_oldest` (default; machine telemetry: the oldest rows
    /// are deleted, counted as gaps) or `block` (business flows: new records are refused and
    /// their sources told to retry). Changing it takes effect at restart.
    pub on_full: Option<String>,
}

/// `connector.push:`
#[derive(Debug, Default, Deserialize)]
pub struct RawPush {
    /// Where the uplink `POST`s batches of records (NDJSON). `http://` or `https://`. Required.
    pub url: Option<String>,
    /// Bearer token sent as `Authorization: Bearer <token>`. Optional.
    pub token: Option<String>,
    /// Most records in one batch. Default 500.
    pub batch_rows: Option<u64>,
    /// Seconds one request may take before it counts as failed. Default 10.
    pub timeout_secs: Option<u64>,
    /// First retry delay in milliseconds, doubled after each failure. Default 500.
    pub retry_initial_ms: Option<u64>,
    /// Longest retry delay in milliseconds. Default 60000.
    pub retry_max_ms: Option<u64>,
}

/// A `sinks[]` entry of `type: push`.
#[derive(Debug, Default, Deserialize)]
pub struct RawPushSink {
    /// `disk` (default): a durable LMDB queue, `push_queue.db` for the sink named `push`,
    /// `push-<name>.db` for the others. `memory`: a 16 MiB buffer lost on restart.
    pub queue: Option<String>,
    /// The queue's quota in MiB of logical bytes. Default 1024.
    pub max_quota_mb: Option<u64>,
    /// `evict_oldest` (default) or `block`, as `connector.push_queue.on_full`.
    pub on_full: Option<String>,
    /// The uplink that drains the queue, with the keys of `connector.push`; without it the
    /// queue only fills.
    pub uplink: Option<RawPush>,
    /// Deadband, aggregation and heartbeat rules in front of this queue, as
    /// `connector.preprocess`.
    pub preprocess: Option<Vec<RawPreprocessRule>>,
}

/// A push sink, validated.
#[derive(Debug, Clone)]
pub struct PushConfig {
    /// The queue.
    pub queue: PushQueueConfig,
    /// The uplink, when configured.
    pub uplink: Option<UplinkConfig>,
    /// The preprocess rules; empty for none.
    pub preprocess: Vec<PreprocessRule>,
}

/// The push queue, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushQueueConfig {
    /// Durable (LMDB) when true; the volatile memory buffer when false.
    pub enabled: bool,
    /// Quota in logical bytes.
    pub quota_bytes: u64,
    /// Policy at the quota.
    pub on_full: OnFull,
}

impl PushQueueConfig {
    /// Validates `connector.push_queue` (absent: the volatile buffer).
    pub fn validate(raw: Option<&RawPushQueue>, path: &str, p: &mut Problems) -> Self {
        let Some(raw) = raw else {
            return Self {
                enabled: false,
                quota_bytes: super::VOLATILE_QUOTA,
                on_full: OnFull::EvictOldest,
            };
        };
        let enabled = raw.enabled.unwrap_or(true);
        Self::checked(
            enabled,
            raw.max_quota_mb,
            raw.on_full.as_deref(),
            path,
            "push_queue.enabled: true",
            p,
        )
    }

    /// Validates the queue keys of a `sinks[]` entry of `type: push` at `at`.
    pub fn validate_entry(raw: &RawPushSink, at: &str, p: &mut Problems) -> Self {
        let enabled = match raw.queue.as_deref() {
            None | Some("disk") => true,
            Some("memory") => false,
            Some(other) => {
                p.push(
                    format!("{at}.queue"),
                    format!("expected disk or memory, got {other:?}"),
                );
                true
            }
        };
        Self::checked(
            enabled,
            raw.max_quota_mb,
            raw.on_full.as_deref(),
            at,
            "queue: disk",
            p,
        )
    }

    fn checked(
        enabled: bool,
        max_quota_mb: Option<u64>,
        on_full: Option<&str>,
        path: &str,
        durable_key: &str,
        p: &mut Problems,
    ) -> Self {
        let quota_mb = max_quota_mb.unwrap_or(DEFAULT_QUOTA_MB);
        let on_full = validate_on_full(on_full, &format!("{path}.on_full"), p);
        if on_full == OnFull::Block {
            if !enabled {
                p.push(
                    format!("{path}.on_full"),
                    format!("block needs {durable_key} (the volatile buffer cannot block)"),
                );
            }
            if quota_mb == 0 {
                p.push(format!("{path}.on_full"), "block needs max_quota_mb > 0");
            }
        }
        let quota_bytes = if enabled && (quota_mb > 0 || on_full != OnFull::Block) {
            validate_quota_mb(quota_mb, &format!("{path}.max_quota_mb"), p)
        } else {
            super::VOLATILE_QUOTA
        };
        Self {
            enabled,
            quota_bytes,
            on_full: if enabled {
                on_full
            } else {
                OnFull::EvictOldest
            },
        }
    }
}

/// The uplink, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UplinkConfig {
    /// Receiver URL.
    pub url: String,
    /// Bearer token.
    pub token: Option<String>,
    /// Most records per batch.
    pub batch_rows: usize,
    /// Time one request may take.
    pub timeout: Duration,
    /// First retry delay.
    pub retry_initial: Duration,
    /// Longest retry delay.
    pub retry_max: Duration,
}

impl UplinkConfig {
    /// The deliverer's batch size and back-off.
    pub fn delivery(&self) -> DeliveryConfig {
        DeliveryConfig {
            batch_rows: self.batch_rows,
            max_rows: self.batch_rows,
            retry_initial: self.retry_initial,
            retry_max: self.retry_max,
            linger: Duration::ZERO,
        }
    }

    /// Validates `connector.push`; `None` when it has problems (all recorded in `p`).
    pub fn validate(raw: &RawPush, path: &str, p: &mut Problems) -> Option<Self> {
        let before = p.0.len();
        let url = match raw.url.as_deref() {
            None => {
                p.push(format!("{path}.url"), "is required");
                String::new()
            }
            Some(u) => {
                let rest = u
                    .strip_prefix("http://")
                    .or_else(|| u.strip_prefix("https://"));
                match rest {
                    Some(r) if !r.is_empty() && !r.starts_with('/') => {}
                    _ => p.push(
                        format!("{path}.url"),
                        format!("expected an http:// or https:// URL, got {u:?}"),
                    ),
                }
                u.to_string()
            }
        };
        if matches!(raw.token.as_deref(), Some(t) if t.is_empty()) {
            p.push(
                format!("{path}.token"),
                "must not be empty (leave it out for none)",
            );
        }
        let mut ranged = |key: &str, value: Option<u64>, default: u64, lo: u64, hi: u64| {
            let v = value.unwrap_or(default);
            if !(lo..=hi).contains(&v) {
                p.push(
                    format!("{path}.{key}"),
                    format!("{v} is outside {lo}..={hi}"),
                );
            }
            v
        };
        let batch_rows = ranged("batch_rows", raw.batch_rows, 500, 1, 10_000);
        let timeout = ranged("timeout_secs", raw.timeout_secs, 10, 1, 600);
        let initial = ranged("retry_initial_ms", raw.retry_initial_ms, 500, 1, 600_000);
        let max = ranged("retry_max_ms", raw.retry_max_ms, 60_000, 1, 3_600_000);
        if initial > max {
            p.push(
                format!("{path}.retry_initial_ms"),
                format!("{initial} is more than retry_max_ms ({max})"),
            );
        }
        (p.0.len() == before).then(|| Self {
            url,
            token: raw.token.clone(),
            batch_rows: batch_rows as usize,
            timeout: Duration::from_secs(timeout),
            retry_initial: Duration::from_millis(initial),
            retry_max: Duration::from_millis(max),
        })
    }
}
