//! `sink_batch:` and `columns:`, shared by the database sinks: raw, validated without I/O.

use std::time::Duration;

use serde::Deserialize;

use crate::admission::OnFull;
use crate::config::Problems;

/// Default rows per insert.
pub const DEFAULT_BATCH_ROWS: u64 = 1000;
/// Default longest wait of a row before its batch is sent, in milliseconds.
pub const DEFAULT_FLUSH_INTERVAL_MS: u64 = 1000;
/// Floor of the default backlog bound (`max(sink_batch_rows x 20, 10000)`).
pub const MIN_DEFAULT_BACKLOG_ROWS: u64 = 10_000;
/// Most rows in one insert (`sink_batch_rows` and `max_insert_rows`).
const MAX_BATCH_ROWS: u64 = 100_000;
/// Batches a catch-up insert takes by default (`max_insert_rows` defaults to
/// `sink_batch_rows x 20`, at most [`MAX_BATCH_ROWS`]): the default backlog bound, so a
/// backlog built up at the default settings goes in one insert.
const CATCH_UP_BATCHES: u64 = 20;
/// Largest backlog bound: rows are held in memory, and a box has little of it.
const MAX_BACKLOG_ROWS: u64 = 10_000_000;
/// Default seconds one insert may take.
pub const DEFAULT_TIMEOUT_SECS: u64 = 10;

/// `<sink>.sink_batch:`
#[derive(Debug, Default, Deserialize)]
pub struct RawSinkBatch {
    /// Rows sent in one insert; a batch leaves as soon as this many rows wait. Default 1000.
    pub sink_batch_rows: Option<u64>,
    /// Longest a row waits for its batch to fill, in milliseconds. Default 1000.
    pub flush_interval_ms: Option<u64>,
    /// Most rows in one insert when more rows wait than `sink_batch_rows` (a backlog built up
    /// while the database was down or slower than the records arriving): one insert then takes
    /// every waiting row up to this many, so the backlog empties in few large inserts. A batch
    /// still leaves at `sink_batch_rows` or `flush_interval_ms`; only its size grows with what
    /// waits. The insert's body is built in memory (about the rows' size again): lower it on a
    /// box with little memory. Default `min(sink_batch_rows x 20, 100000)`, at least
    /// `sink_batch_rows`; `sink_batch_rows..=100000`.
    pub max_insert_rows: Option<u64>,
    /// The backlog's bound in rows: rows waiting plus rows kept for retry while the database
    /// is slow or down. Memory only: lost if the process crashes. Default
    /// `max(sink_batch_rows x 20, 10000)`.
    pub max_backlog_rows: Option<u64>,
    /// What happens at the bound: `evict_oldest` (default: the oldest waiting rows are dropped,
    /// counted in `dropped`, logged, alerted) or `block` (new records are refused at admission
    /// and their sources told to retry: 503, nak, hold). Changing it takes effect at restart.
    pub on_full: Option<String>,
}

/// One entry of `<sink>.columns:`.
#[derive(Debug, Default, Deserialize)]
pub struct RawColumn {
    /// The table column written.
    pub column: Option<String>,
    /// JSON pointer into the record `{"id","source","key","ts","payload"}`, e.g.
    /// `/payload/temp_c`. Objects and arrays are written as JSON text (or as `json`/`jsonb` in
    /// Postgres); a pointer that finds nothing writes NULL (ClickHouse: the column default).
    pub field: Option<String>,
}

/// `sink_batch:`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkBatchConfig {
    /// Rows waiting that make a batch leave (and its size when no more wait).
    pub batch_rows: usize,
    /// Most rows in one insert when more wait (catch-up); at least `batch_rows`.
    pub max_insert_rows: usize,
    /// Longest wait of a row for its batch.
    pub flush_interval: Duration,
    /// Bound of the backlog in rows.
    pub max_backlog_rows: usize,
    /// Policy at the bound.
    pub on_full: OnFull,
}

impl SinkBatchConfig {
    /// Validates `sink_batch:` (absent: the defaults).
    pub fn validate(raw: Option<&RawSinkBatch>, path: &str, p: &mut Problems) -> Self {
        let default = RawSinkBatch::default();
        let raw = raw.unwrap_or(&default);
        let batch = raw.sink_batch_rows.unwrap_or(DEFAULT_BATCH_ROWS);
        if !(1..=MAX_BATCH_ROWS).contains(&batch) {
            p.push(
                format!("{path}.sink_batch_rows"),
                format!("{batch} is outside 1..={MAX_BATCH_ROWS}"),
            );
        }
        let batch = batch.clamp(1, MAX_BATCH_ROWS);
        let interval = raw.flush_interval_ms.unwrap_or(DEFAULT_FLUSH_INTERVAL_MS);
        if !(1..=3_600_000).contains(&interval) {
            p.push(
                format!("{path}.flush_interval_ms"),
                format!("{interval} is outside 1..=3600000"),
            );
        }
        let insert = raw
            .max_insert_rows
            .unwrap_or((batch * CATCH_UP_BATCHES).min(MAX_BATCH_ROWS));
        if insert < batch || insert > MAX_BATCH_ROWS {
            p.push(
                format!("{path}.max_insert_rows"),
                format!("{insert} is outside sink_batch_rows ({batch})..={MAX_BATCH_ROWS}"),
            );
        }
        let max = raw
            .max_backlog_rows
            .unwrap_or((batch * 20).max(MIN_DEFAULT_BACKLOG_ROWS));
        if max < batch || max > MAX_BACKLOG_ROWS {
            p.push(
                format!("{path}.max_backlog_rows"),
                format!("{max} is outside sink_batch_rows ({batch})..={MAX_BACKLOG_ROWS}"),
            );
        }
        let on_full = match raw.on_full.as_deref() {
            None => OnFull::EvictOldest,
            Some(s) => OnFull::parse(s).unwrap_or_else(|| {
                p.push(
                    format!("{path}.on_full"),
                    format!("expected evict_oldest or block, got {s:?}"),
                );
                OnFull::EvictOldest
            }),
        };
        Self {
            batch_rows: batch as usize,
            max_insert_rows: insert.clamp(batch, MAX_BATCH_ROWS) as usize,
            flush_interval: Duration::from_millis(interval.clamp(1, 3_600_000)),
            max_backlog_rows: max.clamp(batch, MAX_BACKLOG_ROWS) as usize,
            on_full,
        }
    }
}

/// One column and where its value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The table column.
    pub name: String,
    /// JSON pointer into the record's line.
    pub field: String,
}

/// The columns written when `columns:` is not given: `ts` (Unix milliseconds), `source`,
/// `key`, `payload` (the record's JSON).
pub fn default_columns() -> Vec<Column> {
    ["ts", "source", "key", "payload"]
        .iter()
        .map(|c| Column::new(c, &format!("/{c}")))
        .collect()
}

impl Column {
    /// Column `name` taking the record's value at the JSON pointer `field`.
    pub fn new(name: &str, field: &str) -> Self {
        Self {
            name: name.to_string(),
            field: field.to_string(),
        }
    }
}

/// True for a plain SQL identifier: a letter or `_`, then letters, digits or `_`, at most 63
/// bytes (Postgres' limit). Names are quoted in the statements the sinks send, so this only
/// keeps quoting trivial and error messages clear.
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s.len() <= 63
}

/// Validates a table name: `table` or `schema.table` (ClickHouse: `database.table`).
pub fn validate_table(raw: Option<&str>, path: &str, p: &mut Problems) -> Vec<String> {
    match raw {
        None => {
            p.push(path, "is required");
            Vec::new()
        }
        Some(t) => {
            let parts: Vec<String> = t.split('.').map(str::to_string).collect();
            if parts.len() > 2 || !parts.iter().all(|s| is_identifier(s)) {
                p.push(
                    path,
                    format!("expected table or schema.table of letters, digits and _, got {t:?}"),
                );
            }
            parts
        }
    }
}

/// Validates `columns:` (absent: [`default_columns`]).
pub fn validate_columns(raw: Option<&[RawColumn]>, path: &str, p: &mut Problems) -> Vec<Column> {
    let Some(raw) = raw else {
        return default_columns();
    };
    if raw.is_empty() {
        p.push(path, "must name at least one column");
    }
    let mut out: Vec<Column> = Vec::with_capacity(raw.len());
    for (i, c) in raw.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = match c.column.as_deref() {
            None => {
                p.push(format!("{at}.column"), "is required");
                continue;
            }
            Some(n) if !is_identifier(n) => {
                p.push(
                    format!("{at}.column"),
                    format!("expected letters, digits and _ (at most 63), got {n:?}"),
                );
                continue;
            }
            Some(n) => n.to_string(),
        };
        if out.iter().any(|o| o.name == name) {
            p.push(format!("{at}.column"), format!("{name:?} is mapped twice"));
        }
        let field = match c.field.as_deref() {
            None => {
                p.push(
                    format!("{at}.field"),
                    "is required (a JSON pointer like /payload/temp_c)",
                );
                continue;
            }
            Some(f) if !(f.is_empty() || f.starts_with('/')) => {
                p.push(
                    format!("{at}.field"),
                    format!("expected a JSON pointer starting with /, got {f:?}"),
                );
                continue;
            }
            Some(f) => f.to_string(),
        };
        out.push(Column { name, field });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(p: &Problems) -> Vec<String> {
        p.0.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_backlog_bound_defaults_to_twenty_batches_but_at_least_ten_thousand() {
        let mut p = Problems::default();
        let small = SinkBatchConfig::validate(None, "clickhouse.sink_batch", &mut p);
        assert_eq!(small.max_backlog_rows, 20_000);
        let raw = RawSinkBatch {
            sink_batch_rows: Some(100),
            ..Default::default()
        };
        let cfg = SinkBatchConfig::validate(Some(&raw), "x", &mut p);
        assert_eq!(cfg.max_backlog_rows, 10_000);
        assert_eq!(cfg.max_insert_rows, 2_000);
        assert_eq!(cfg.on_full, OnFull::EvictOldest);
        assert_eq!(cfg.flush_interval, Duration::from_millis(1000));
        assert!(p.is_empty());
    }

    #[test]
    fn every_bad_batch_value_is_reported_with_its_path() {
        let mut p = Problems::default();
        let raw = RawSinkBatch {
            sink_batch_rows: Some(0),
            flush_interval_ms: Some(0),
            max_insert_rows: Some(0),
            max_backlog_rows: Some(0),
            on_full: Some("drop".into()),
        };
        SinkBatchConfig::validate(Some(&raw), "postgres.sink_batch", &mut p);
        assert_eq!(
            messages(&p),
            vec![
                "postgres.sink_batch.sink_batch_rows: 0 is outside 1..=100000",
                "postgres.sink_batch.flush_interval_ms: 0 is outside 1..=3600000",
                "postgres.sink_batch.max_insert_rows: 0 is outside sink_batch_rows (1)..=100000",
                "postgres.sink_batch.max_backlog_rows: 0 is outside sink_batch_rows (1)..=10000000",
                r#"postgres.sink_batch.on_full: expected evict_oldest or block, got "drop""#,
            ]
        );
    }

    #[test]
    fn a_catch_up_insert_defaults_to_twenty_batches_but_at_most_one_hundred_thousand_rows() {
        let mut p = Problems::default();
        let d = SinkBatchConfig::validate(None, "clickhouse.sink_batch", &mut p);
        assert_eq!((d.batch_rows, d.max_insert_rows), (1000, 20_000));
        let raw = RawSinkBatch {
            sink_batch_rows: Some(40_000),
            ..Default::default()
        };
        let big = SinkBatchConfig::validate(Some(&raw), "x", &mut p);
        assert_eq!(big.max_insert_rows, 100_000);
        let raw = RawSinkBatch {
            sink_batch_rows: Some(500),
            max_insert_rows: Some(500),
            ..Default::default()
        };
        let none = SinkBatchConfig::validate(Some(&raw), "x", &mut p);
        assert_eq!(
            none.max_insert_rows, 500,
            "equal to sink_batch_rows: no catch-up"
        );
        assert!(p.is_empty());
    }

    #[test]
    fn a_catch_up_insert_below_the_batch_or_over_one_hundred_thousand_rows_is_reported_with_its_path(
    ) {
        let mut p = Problems::default();
        let small = RawSinkBatch {
            sink_batch_rows: Some(5000),
            max_insert_rows: Some(4999),
            ..Default::default()
        };
        let cfg = SinkBatchConfig::validate(Some(&small), "clickhouse.sink_batch", &mut p);
        assert_eq!(
            cfg.max_insert_rows, 5000,
            "clamped so the rest can be checked"
        );
        let big = RawSinkBatch {
            max_insert_rows: Some(100_001),
            ..Default::default()
        };
        SinkBatchConfig::validate(Some(&big), "sinks[2].sink_batch", &mut p);
        assert_eq!(
            messages(&p),
            vec![
                "clickhouse.sink_batch.max_insert_rows: 4999 is outside sink_batch_rows (5000)..=100000",
                "sinks[2].sink_batch.max_insert_rows: 100001 is outside sink_batch_rows (1000)..=100000",
            ]
        );
    }

    #[test]
    fn columns_need_names_and_pointers_and_default_to_ts_source_key_payload() {
        let mut p = Problems::default();
        let d = validate_columns(None, "c", &mut p);
        let names: Vec<&str> = d.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["ts", "source", "key", "payload"]);
        assert_eq!(d[3].field, "/payload");
        let raw = vec![
            RawColumn {
                column: Some("bad name".into()),
                field: Some("/a".into()),
            },
            RawColumn {
                column: Some("v".into()),
                field: Some("payload.v".into()),
            },
        ];
        validate_columns(Some(&raw), "clickhouse.columns", &mut p);
        assert_eq!(
            messages(&p),
            vec![
                r#"clickhouse.columns[0].column: expected letters, digits and _ (at most 63), got "bad name""#,
                r#"clickhouse.columns[1].field: expected a JSON pointer starting with /, got "payload.v""#,
            ]
        );
    }

    #[test]
    fn tables_may_name_a_schema() {
        let mut p = Problems::default();
        assert_eq!(
            validate_table(Some("plant.events"), "t", &mut p),
            ["plant", "events"]
        );
        validate_table(Some("a;drop"), "t", &mut p);
        validate_table(None, "u", &mut p);
        assert_eq!(p.0.len(), 2);
    }
}
