//! One ingest source: turns a posted JSON body into a record, offers it, and says what the
//! caller should be told.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use serde::Serialize;

use super::batch::{parse, BodyError, Format, Rejected};
use super::config::{BatchLimits, IngestSourceConfig};
use crate::engine::Engine;
use crate::record::{Record, Settlement};
use crate::sources::SourceOutcome;

/// Counters of one ingest source, shown in `/api/status` `sources[]`.
#[derive(Debug, Default, Serialize)]
pub struct IngestStats {
    /// Requests that passed the token check.
    pub received: AtomicU64,
    /// Records stored (answered 200); a batch counts each of its records.
    pub stored: AtomicU64,
    /// Records refused and told to retry (503); a batch counts each of its records.
    pub refused: AtomicU64,
    /// Requests rejected as bad input (400, 413, ...); a batch counts each bad line (and one
    /// for a body refused whole).
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

    /// The bounds of its batches.
    pub fn batch_limits(&self) -> BatchLimits {
        self.cfg.batch
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

    /// Parses a batch `body` of `format`, offers its records as one batch, and returns what the
    /// caller is told. Every line is checked first: without `partial` one bad line refuses the
    /// whole batch and nothing is offered; with it the good lines go on. `max_payload` bounds
    /// each record's payload (`max_body_kb`).
    pub async fn ingest_batch(
        &self,
        engine: &Engine,
        body: Bytes,
        format: Format,
        partial: bool,
        max_payload: usize,
    ) -> BatchOutcome {
        let max_records = self.cfg.batch.max_records;
        let parsed = parse(&self.source, &body, format, max_records, max_payload);
        drop(body);
        let parsed = match parsed {
            Ok(p) => p,
            Err(e) => {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                return BatchOutcome::Body(e);
            }
        };
        let rejected = parsed.rejected;
        self.stats
            .rejected
            .fetch_add(rejected.len() as u64, Ordering::Relaxed);
        if !rejected.is_empty() && (!partial || parsed.records.is_empty()) {
            return BatchOutcome::Rejected(rejected);
        }
        let (indexes, records): (Vec<usize>, Vec<Record>) = parsed.records.into_iter().unzip();
        let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
        let n = records.len() as u64;
        let settlements = match engine.offer_batch(&self.source, records).await {
            Ok(s) => s,
            Err(refusal) => {
                self.stats.refused.fetch_add(n, Ordering::Relaxed);
                return BatchOutcome::Retry {
                    outcome: SourceOutcome::from_settlement(String::new(), refusal),
                    stored: Vec::new(),
                };
            }
        };
        let mut results = Vec::with_capacity(settlements.len());
        let mut failure = None;
        let mut stored = Vec::new();
        for (settlement, index) in settlements.into_iter().zip(&indexes) {
            let result = match settlement {
                Settlement::Stored => "stored",
                Settlement::Unrouted => "unrouted",
                Settlement::DeadLettered { .. } => "dead_lettered",
                refusal @ (Settlement::Retry { .. } | Settlement::Failed { .. }) => {
                    failure.get_or_insert(refusal);
                    continue;
                }
            };
            results.push(result);
            stored.push(*index);
        }
        let kept = stored.len() as u64;
        self.stats.stored.fetch_add(kept, Ordering::Relaxed);
        self.stats.refused.fetch_add(n - kept, Ordering::Relaxed);
        if let Some(refusal) = failure {
            return BatchOutcome::Retry {
                outcome: SourceOutcome::from_settlement(String::new(), refusal),
                stored,
            };
        }
        BatchOutcome::Stored {
            ids,
            results,
            rejected: partial.then_some(rejected),
        }
    }
}

/// What a batch's caller is told; the HTTP layer turns it into a status code and a JSON body.
#[derive(Debug)]
pub enum BatchOutcome {
    /// 200: every record offered is settled (stored, dead-lettered or taken by no flow).
    Stored {
        /// The records' ids, in body order.
        ids: Vec<String>,
        /// Each record's result (`stored`, `dead_lettered`, `unrouted`), in the same order.
        results: Vec<&'static str>,
        /// The lines left out, when the caller asked for `partial`.
        rejected: Option<Vec<Rejected>>,
    },
    /// 400: bad lines, every one listed; nothing was offered.
    Rejected(Vec<Rejected>),
    /// 400 or 413: the body as a whole; nothing was offered.
    Body(BodyError),
    /// 503 + `Retry-After`: a sink refused the batch (nothing ran), or a record of it
    /// (its first refusal); `stored`: the indexes of the records stored anyway, which a
    /// caller sending the batch again sends twice (at least once, never lost).
    Retry {
        /// The refusal, as the one-record API tells it.
        outcome: SourceOutcome,
        /// Indexes of the records stored anyway.
        stored: Vec<usize>,
    },
}
