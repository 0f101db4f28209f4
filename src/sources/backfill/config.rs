//! `backfills:`: raw, validated without I/O (the file is opened when the backfill starts).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::config::checks::checked_name;
use crate::config::Problems;
use crate::time::parse_duration;

/// `backfills[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawBackfill {
    /// The backfill's name; its records carry `source: backfill/<name>` (letters, digits,
    /// `-`, `_`). Its checkpoint is `<data_dir>/backfills/<name>.checkpoint.json`.
    pub name: Option<String>,
    /// The file to read. Required.
    pub file: Option<String>,
    /// `jsonl` (one JSON value per line) or `csv` (comma-separated, a header row of field
    /// names first). Required.
    pub format: Option<String>,
    /// A field whose value becomes each record's key (a string, number or boolean; a record
    /// without it is malformed). Default: every record's key is the backfill's name.
    pub key_field: Option<String>,
    /// A field holding each record's time: Unix milliseconds (a number) or RFC 3339 text
    /// (`2024-05-01T12:00:00Z`); a record without a readable one is malformed. Default: the
    /// time the record is read.
    pub timestamp_field: Option<String>,
    /// Most records offered at once (each waits for its settlement); 1 keeps the file's order
    /// exactly even when a sink refuses. Default 16.
    pub max_in_flight: Option<u64>,
    /// The position is checkpointed after this many settled records... Default 500.
    pub checkpoint_every: Option<u64>,
    /// ...or once this much time passed since the last checkpoint (`500ms`, `1s`), whichever
    /// comes first, and at every stop. Default `1s`.
    pub checkpoint_interval: Option<String>,
}

/// The file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON value per line.
    Jsonl,
    /// Comma-separated values with a header row.
    Csv,
}

impl Format {
    /// The spelling in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Jsonl => "jsonl",
            Self::Csv => "csv",
        }
    }
}

/// One backfill, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackfillConfig {
    /// Its name; records carry `backfill/<name>`.
    pub name: String,
    /// The file.
    pub file: PathBuf,
    /// Its format.
    pub format: Format,
    /// The key field.
    pub key_field: Option<String>,
    /// The timestamp field.
    pub timestamp_field: Option<String>,
    /// Most records in flight.
    pub max_in_flight: usize,
    /// Checkpoint after this many settled records.
    pub checkpoint_every: u64,
    /// Or after this long.
    pub checkpoint_interval: Duration,
}

/// Validates `backfills:`.
pub fn validate_backfills(
    raw: Option<&[RawBackfill]>,
    path: &str,
    p: &mut Problems,
) -> Vec<BackfillConfig> {
    let mut out: Vec<BackfillConfig> = Vec::new();
    for (i, b) in raw.unwrap_or_default().iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = checked_name(
            b.name.as_deref(),
            &at,
            |n| out.iter().any(|o| o.name == n),
            p,
        );
        let file = match b.file.as_deref() {
            Some(f) if !f.trim().is_empty() => Some(PathBuf::from(f)),
            Some(_) => {
                p.push(format!("{at}.file"), "must not be empty");
                None
            }
            None => {
                p.push(format!("{at}.file"), "is required");
                None
            }
        };
        let format = match b.format.as_deref() {
            Some("jsonl") => Some(Format::Jsonl),
            Some("csv") => Some(Format::Csv),
            Some(other) => {
                p.push(
                    format!("{at}.format"),
                    format!("expected jsonl or csv, got {other:?}"),
                );
                None
            }
            None => {
                p.push(format!("{at}.format"), "is required (jsonl or csv)");
                None
            }
        };
        for (key, field) in [
            ("key_field", &b.key_field),
            ("timestamp_field", &b.timestamp_field),
        ] {
            if field.as_deref().is_some_and(|f| f.is_empty()) {
                p.push(format!("{at}.{key}"), "must not be empty");
            }
        }
        let max_in_flight = b.max_in_flight.unwrap_or(16);
        if !(1..=1024).contains(&max_in_flight) {
            p.push(
                format!("{at}.max_in_flight"),
                format!("{max_in_flight} is outside 1..=1024"),
            );
        }
        let checkpoint_every = b.checkpoint_every.unwrap_or(500);
        if !(1..=1_000_000).contains(&checkpoint_every) {
            p.push(
                format!("{at}.checkpoint_every"),
                format!("{checkpoint_every} is outside 1..=1000000"),
            );
        }
        let checkpoint_interval = match b.checkpoint_interval.as_deref().map(parse_duration) {
            None => Duration::from_secs(1),
            Some(Ok(d)) if d >= Duration::from_millis(10) && d <= Duration::from_secs(3600) => d,
            Some(Ok(_)) => {
                p.push(
                    format!("{at}.checkpoint_interval"),
                    "must be between 10ms and 1h",
                );
                Duration::from_secs(1)
            }
            Some(Err(e)) => {
                p.push(format!("{at}.checkpoint_interval"), e);
                Duration::from_secs(1)
            }
        };
        if let (Some(name), Some(file), Some(format)) = (name, file, format) {
            out.push(BackfillConfig {
                name,
                file,
                format,
                key_field: b.key_field.clone(),
                timestamp_field: b.timestamp_field.clone(),
                max_in_flight: max_in_flight.clamp(1, 1024) as usize,
                checkpoint_every,
                checkpoint_interval,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_of_every_backfill_is_reported() {
        let raw: Vec<RawBackfill> = serde_saphyr::from_str(
            "- { name: orders, file: /data/orders.csv, format: csv, key_field: id }\n- { name: b, file: '', format: xml, max_in_flight: 0 }\n- { name: c, format: jsonl, checkpoint_every: 0, checkpoint_interval: soon }\n",
        )
        .unwrap();
        let mut p = Problems::default();
        let out = validate_backfills(Some(&raw), "backfills", &mut p);
        let got: Vec<String> = p.0.iter().map(|x| x.to_string()).collect();
        assert_eq!(
            got,
            vec![
                "backfills[1].file: must not be empty",
                "backfills[1].format: expected jsonl or csv, got \"xml\"",
                "backfills[1].max_in_flight: 0 is outside 1..=1024",
                "backfills[2].file: is required",
                "backfills[2].checkpoint_every: 0 is outside 1..=1000000",
                "backfills[2].checkpoint_interval: \"soon\": expected a whole number and a unit (ms, s, m, h, d), e.g. 30s",
            ]
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].format, Format::Csv);
        assert_eq!(out[0].max_in_flight, 16);
    }
}
