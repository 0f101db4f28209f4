//! `clickhouse:`: raw, validated without I/O.

use std::time::Duration;

use serde::Deserialize;

use crate::config::Problems;
use crate::sinks::backlog::config::{validate_columns, validate_table, DEFAULT_TIMEOUT_SECS};
use crate::sinks::backlog::{Column, RawColumn, RawSinkBatch, SinkBatchConfig};
use crate::sinks::queue::config::validate_queue;
use crate::sinks::queue::QueueMode;

/// Default rows per insert: each insert is a part the server writes and later merges, so
/// ClickHouse takes few large inserts far better than many small ones.
pub const DEFAULT_BATCH_ROWS: u64 = 10_000;

/// `clickhouse:`
#[derive(Debug, Default, Deserialize)]
pub struct RawClickHouse {
    /// The HTTP interface, e.g. `http://127.0.0.1:8123` (`https://` for TLS). Required.
    pub url: Option<String>,
    /// User, sent with Basic auth. Default `default`.
    pub user: Option<String>,
    /// Password, sent with Basic auth. Default empty.
    pub password: Option<String>,
    /// The table rows are inserted into: `table` or `database.table`. Required.
    pub sink_table: Option<String>,
    /// Batching and the backlog's bound. `sink_batch_rows` defaults to 10000 here: every
    /// insert makes a part on the server, so ClickHouse wants few large inserts.
    pub sink_batch: Option<RawSinkBatch>,
    /// Which record field goes to which column. Default `ts` (Unix ms), `source`, `key`,
    /// `payload` (JSON text).
    pub columns: Option<Vec<RawColumn>>,
    /// Seconds one insert may take before it counts as failed (and is retried). Default 10.
    pub timeout_secs: Option<u64>,
    /// `memory` (default) or `disk`: a durable LMDB queue (`queue-<name>.db` under the data
    /// dir) in front of the table, acknowledged to the source after its commit, so records
    /// survive a crash and an outage longer than the memory bound.
    pub queue: Option<String>,
    /// With `queue: disk`: the queue's quota in MiB of logical bytes. Default 1024.
    pub max_quota_mb: Option<u64>,
    /// With `queue: disk`: `evict_oldest` (default) or `block` at the quota, as the push
    /// queue's.
    pub on_full: Option<String>,
}

/// `clickhouse:`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClickHouseConfig {
    /// Base URL of the HTTP interface, without a trailing `/`.
    pub url: String,
    /// Basic auth user.
    pub user: String,
    /// Basic auth password.
    pub password: String,
    /// `[table]` or `[database, table]`.
    pub table: Vec<String>,
    /// Batching and bound.
    pub batch: SinkBatchConfig,
    /// The columns written.
    pub columns: Vec<Column>,
    /// Longest one insert may take.
    pub timeout: Duration,
    /// What waits in front of the table: the bounded memory backlog (`sink_batch`), or a disk queue.
    pub queue: QueueMode,
}

impl ClickHouseConfig {
    /// Validates `clickhouse:`.
    pub fn validate(raw: &RawClickHouse, path: &str, p: &mut Problems) -> Self {
        let url = match raw.url.as_deref() {
            None => {
                p.push(format!("{path}.url"), "is required");
                String::new()
            }
            Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
                if u.contains('?') || u.contains('#') {
                    p.push(
                        format!("{path}.url"),
                        format!("must be the server's address without a query, got {u:?}"),
                    );
                }
                u.trim_end_matches('/').to_string()
            }
            Some(u) => {
                p.push(
                    format!("{path}.url"),
                    format!("expected http:// or https://, got {u:?}"),
                );
                String::new()
            }
        };
        let user = raw.user.clone().unwrap_or_else(|| "default".into());
        if user.is_empty() || user.contains(':') {
            p.push(format!("{path}.user"), "must be non-empty and without ':'");
        }
        let table = validate_table(raw.sink_table.as_deref(), &format!("{path}.sink_table"), p);
        let batch = SinkBatchConfig::validate_with(
            raw.sink_batch.as_ref(),
            &format!("{path}.sink_batch"),
            DEFAULT_BATCH_ROWS,
            p,
        );
        let columns = validate_columns(raw.columns.as_deref(), &format!("{path}.columns"), p);
        let secs = raw.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
        if !(1..=3600).contains(&secs) {
            p.push(
                format!("{path}.timeout_secs"),
                format!("{secs} is outside 1..=3600"),
            );
        }
        Self {
            queue: validate_queue(
                raw.queue.as_deref(),
                raw.max_quota_mb,
                raw.on_full.as_deref(),
                path,
                p,
            ),
            url,
            user,
            password: raw.password.clone().unwrap_or_default(),
            table,
            batch,
            columns,
            timeout: Duration::from_secs(secs.clamp(1, 3600)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_and_table_are_required_and_every_problem_is_reported() {
        let mut p = Problems::default();
        ClickHouseConfig::validate(&RawClickHouse::default(), "clickhouse", &mut p);
        let m: Vec<String> = p.0.iter().map(|x| x.to_string()).collect();
        assert_eq!(
            m,
            vec![
                "clickhouse.url: is required",
                "clickhouse.sink_table: is required"
            ]
        );
    }

    #[test]
    fn a_minimal_section_gets_the_defaults() {
        let mut p = Problems::default();
        let raw = RawClickHouse {
            url: Some("http://127.0.0.1:8123/".into()),
            sink_table: Some("plant.events".into()),
            ..Default::default()
        };
        let c = ClickHouseConfig::validate(&raw, "clickhouse", &mut p);
        assert!(p.is_empty(), "{p}");
        assert_eq!(c.url, "http://127.0.0.1:8123");
        assert_eq!(c.user, "default");
        assert_eq!(c.table, ["plant", "events"]);
        assert_eq!(c.batch.batch_rows, 10_000, "ClickHouse takes large inserts");
        assert_eq!(c.batch.max_backlog_rows, 200_000, "sink_batch_rows x 20");
        assert_eq!(c.columns.len(), 4);
    }
}
