//! One ingest source: turns a posted JSON body into a record, offers it, and says what the
//! caller should be told.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use serde::Serialize;

use super::config::IngestSourceConfig;
use crate::engine::Engine;
use crate::record::Record;
use crate::sources::SourceOutcome;

/// Counters of one ingest source, shown in `/api/status` `sources[]`.
#[derive(Debug, Default, Serialize)]
pub struct IngestStats {
    /// Requests that passed the token check.
    pub received: AtomicU64,
    /// Records stored (answered 200).
    pub stored: AtomicU64,
    /// Records refused and told to retry (503).
    pub refused: AtomicU64,
    /// Requests rejected as bad input (400, 413, ...).
    pub rejected: AtomicU64,
    /// Requests with a missing or wrong token.
    pub unauthorized: AtomicU64,
}

/// One configured ingest source.
#[derive(Debug)]
pub struct IngestSource {
    cfg: IngestSourceConfig,
    source: String,
    /// Its counters.
    pub stats: IngestStats,
}

impl IngestSource {
    /// A source from its config.
    pub fn new(cfg: IngestSourceConfig) -> Self {
        Self {
            source: format!("ingest/{}", cfg.name),
            cfg,
            stats: IngestStats::default(),
        }
    }

    /// Its name in the path.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// Its name in flows and records: `ingest/<name>`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The token callers must present.
    pub fn token(&self) -> &str {
        &self.cfg.token
    }

    /// Parses `body`, offers the record keyed `key`, and returns what the caller is told.
    ///
    /// The body is dropped once the record holds its copy, before the offer waits for the
    /// commit: it is a slice of the connection's read buffer (8 KB at the least), which it
    /// would otherwise keep in memory for every request waiting on a commit.
    pub async fn ingest(&self, engine: &Engine, key: String, body: Bytes) -> SourceOutcome {
        let parsed = Record::from_json(self.source.as_str(), key, &body);
        drop(body);
        let record = match parsed {
            Ok(r) => r,
            Err(e) => {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                return SourceOutcome::Malformed {
                    reason: e.to_string(),
                };
            }
        };
        let id = record.id.clone();
        let outcome = SourceOutcome::from_settlement(id, engine.offer(record).await);
        let counter = match &outcome {
            SourceOutcome::Stored { .. } | SourceOutcome::Accepted { .. } => &self.stats.stored,
            SourceOutcome::Malformed { .. } => &self.stats.rejected,
            SourceOutcome::Retry { .. } | SourceOutcome::Failed { .. } => &self.stats.refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        outcome
    }
}
