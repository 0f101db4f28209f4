//! `postgres:`: raw, validated without I/O.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use crate::config::Problems;
use crate::sinks::backlog::config::{validate_columns, validate_table, DEFAULT_TIMEOUT_SECS};
use crate::sinks::backlog::{Column, RawColumn, RawSinkBatch, SinkBatchConfig};
use crate::sinks::queue::config::validate_queue;
use crate::sinks::queue::QueueMode;

/// `postgres:`
#[derive(Debug, Default, Deserialize)]
pub struct RawPostgres {
    /// A libpq-style URL, e.g. `postgres://user:password@127.0.0.1:5432/plant`. Add
    /// `?sslmode=require` for TLS (rustls; the server certificate is checked against `ca_file`
    /// or the Mozilla roots). Required.
    pub url: Option<String>,
    /// The table rows are copied into: `table` or `schema.table`. Required.
    pub sink_table: Option<String>,
    /// Batching and the backlog's bound.
    pub sink_batch: Option<RawSinkBatch>,
    /// Which record field goes to which column. Default `ts`, `source`, `key`, `payload`. The
    /// column's type decides the conversion: `timestamptz`/`timestamp` take Unix milliseconds,
    /// `json`/`jsonb` any JSON, text types take strings as they are and other values as JSON
    /// text; also `bool`, `int2/4/8`, `float4/8`.
    pub columns: Option<Vec<RawColumn>>,
    /// PEM file of the CA certificates that sign the server's certificate (with
    /// `sslmode=require`). Default: the Mozilla roots.
    pub ca_file: Option<String>,
    /// Seconds one connection attempt or one batch may take before it counts as failed (and is
    /// retried). Default 10.
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

/// `postgres:`, validated.
#[derive(Debug, Clone)]
pub struct PostgresConfig {
    /// The URL as written.
    pub url: String,
    /// `[table]` or `[schema, table]`.
    pub table: Vec<String>,
    /// Batching and bound.
    pub batch: SinkBatchConfig,
    /// The columns written.
    pub columns: Vec<Column>,
    /// CA certificates for TLS.
    pub ca_file: Option<PathBuf>,
    /// Longest a connection attempt or a batch may take.
    pub timeout: Duration,
    /// What waits in front of the table: the bounded memory backlog (`sink_batch`), or a disk queue.
    pub queue: QueueMode,
}

impl PostgresConfig {
    /// Validates `postgres:`.
    pub fn validate(raw: &RawPostgres, path: &str, p: &mut Problems) -> Self {
        let url = match raw.url.as_deref() {
            None => {
                p.push(format!("{path}.url"), "is required");
                String::new()
            }
            Some(u) => {
                if let Err(e) = tokio_postgres::Config::from_str(u) {
                    p.push(format!("{path}.url"), format!("not a Postgres URL: {e}"));
                }
                u.to_string()
            }
        };
        let table = validate_table(raw.sink_table.as_deref(), &format!("{path}.sink_table"), p);
        let batch =
            SinkBatchConfig::validate(raw.sink_batch.as_ref(), &format!("{path}.sink_batch"), p);
        let columns = validate_columns(raw.columns.as_deref(), &format!("{path}.columns"), p);
        let ca_file = match raw.ca_file.as_deref() {
            Some("") => {
                p.push(format!("{path}.ca_file"), "must not be empty");
                None
            }
            other => other.map(PathBuf::from),
        };
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
            table,
            batch,
            columns,
            ca_file,
            timeout: Duration::from_secs(secs.clamp(1, 3600)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_url_and_a_missing_table_are_both_reported() {
        let mut p = Problems::default();
        let raw = RawPostgres {
            url: Some("postgres://u@h/db?sslmode=sometimes".into()),
            ..Default::default()
        };
        PostgresConfig::validate(&raw, "postgres", &mut p);
        let m: Vec<String> = p.0.iter().map(|x| x.to_string()).collect();
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(
            m[0].starts_with("postgres.url: not a Postgres URL"),
            "{m:?}"
        );
        assert_eq!(m[1], "postgres.sink_table: is required");
    }

    #[test]
    fn a_minimal_section_is_valid() {
        let mut p = Problems::default();
        let raw = RawPostgres {
            url: Some("postgres://opex@127.0.0.1:5432/plant".into()),
            sink_table: Some("events".into()),
            ..Default::default()
        };
        let c = PostgresConfig::validate(&raw, "postgres", &mut p);
        assert!(p.is_empty(), "{p}");
        assert_eq!(c.table, ["events"]);
        assert_eq!(c.timeout, Duration::from_secs(10));
    }
}
