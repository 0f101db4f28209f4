//! The engine: every source offers its records here and gets a [`Settlement`] back.
//!
//! Admission comes first: every sink the record can reach is asked to admit it before anything
//! else happens, so a refusal under `block` has no side effect and the source simply retries.
//! Until flows exist every source is wired straight to the push sink.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;

use crate::record::{Record, Settlement};
use crate::sinks::push::PushSink;
use crate::store::push_queue::row_bytes;

/// `engine.stats` in `/api/status`.
#[derive(Debug, Default, Serialize)]
pub struct EngineStats {
    /// Records no flow takes: acknowledged by design.
    pub unrouted: AtomicU64,
    /// Records refused by a full sink under `block`; their sources retry.
    pub backpressured: AtomicU64,
    /// Samples dropped after the pollers' hold (sources that cannot be re-read).
    pub backpressure_lost: AtomicU64,
    /// Records parked in the pipeline dead-letter queue.
    pub dead_lettered: AtomicU64,
    /// Records a sink failed to store; their sources were told to retry.
    pub failed: AtomicU64,
}

/// Runs records from sources to sinks.
pub struct Engine {
    push: Arc<PushSink>,
    /// Its counters.
    pub stats: EngineStats,
}

impl Engine {
    /// An engine delivering to `push`.
    pub fn new(push: Arc<PushSink>) -> Self {
        Self {
            push,
            stats: EngineStats::default(),
        }
    }

    /// Offers one record; resolves once every sink it reaches stored it, or refused it.
    pub async fn offer(&self, record: Record) -> Settlement {
        let line = record.to_line();
        let reservation = match self.push.admit(row_bytes(line.len())) {
            Ok(r) => r,
            Err(refused) => {
                self.stats.backpressured.fetch_add(1, Ordering::Relaxed);
                return Settlement::Retry {
                    sink: "push".into(),
                    after: refused.after,
                };
            }
        };
        match self.push.store(line, reservation).await {
            Ok(_) => Settlement::Stored,
            Err(e) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                Settlement::Failed {
                    sink: "push".into(),
                    reason: e.to_string(),
                }
            }
        }
    }
}
