//! The push sink: admission against the queue's gate, then a durable (or volatile) append.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::config::PushQueueConfig;
use super::preprocess::{Preprocess, PreprocessRule};
use super::volatile::VolatileBuffer;
use crate::admission::level::{Level, LevelTracker};
use crate::admission::{Gate, Refused, Reservation};
use crate::ledger::Counts;
use crate::store::push_queue::{PendingCheck, Tag};
use crate::store::{DeadLetter, PushQueue, QueueCounters, Row, StoreError};

/// What the uplink needs of a push buffer, durable or volatile.
pub trait Drain: Send + Sync {
    /// Up to `max` rows from the head, oldest first.
    fn peek(&self, max: usize) -> Result<Vec<Row>, StoreError>;
    /// Deletes every row up to and including `seq` (delivered); returns how many.
    fn remove_through(&self, seq: u64) -> Result<u64, StoreError>;
    /// Moves row `seq` to the dead-letter table; false when it was no longer there.
    fn dead_letter(&self, seq: u64, reason: &str) -> Result<bool, StoreError>;
    /// Waits up to `timeout` for rows appended after `seen`; returns the new mark.
    fn wait_appended(&self, seen: u64, timeout: Duration) -> u64;
}

impl Drain for PushQueue {
    fn peek(&self, max: usize) -> Result<Vec<Row>, StoreError> {
        PushQueue::peek(self, max)
    }
    fn remove_through(&self, seq: u64) -> Result<u64, StoreError> {
        PushQueue::remove_through(self, seq)
    }
    fn dead_letter(&self, seq: u64, reason: &str) -> Result<bool, StoreError> {
        PushQueue::dead_letter(self, seq, reason)
    }
    fn wait_appended(&self, seen: u64, timeout: Duration) -> u64 {
        PushQueue::wait_appended(self, seen, timeout)
    }
}

enum Buffer {
    Durable(Arc<PushQueue>),
    Volatile(Arc<VolatileBuffer>),
}

/// The push sink.
pub struct PushSink {
    buffer: Buffer,
    counters: Arc<QueueCounters>,
    level: Arc<LevelTracker>,
    preprocess: Option<Preprocess>,
}

/// `push_queue` (and `push_status`) in `/api/status`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct QueueStatus {
    /// The push queue is configured and enabled.
    pub enabled: bool,
    /// On disk (`push_queue.db`) rather than the volatile memory buffer.
    pub durable: bool,
    /// `evict_oldest` or `block`.
    pub on_full: &'static str,
    /// Quota in logical bytes.
    pub quota_bytes: u64,
    /// Logical bytes stored.
    pub used_bytes: u64,
    /// Rows stored.
    pub rows: u64,
    /// `used_bytes / quota_bytes` in percent.
    pub fill_pct: f64,
    /// Refusing new records now (`block`).
    pub blocking: bool,
    /// Records refused at the quota (`block`), not lost: their sources retry.
    pub blocked_total: u64,
    /// Rows deleted at the quota (`evict_oldest`): data gaps.
    pub evicted_total: u64,
    /// Records refused because the writer channel was full.
    pub dropped_total: u64,
    /// Failed write transactions.
    pub write_errors_total: u64,
    /// `ok`, `high` (80 % or more) or `full`.
    pub level: Level,
    /// Values the preprocess stage kept out of the queue (deadband, aggregation), by design.
    pub suppressed_total: u64,
}

impl PushSink {
    /// Opens the push queue under `data_dir`, or the volatile buffer when it is not enabled.
    pub fn open(cfg: &PushQueueConfig, data_dir: &Path) -> Result<Self, StoreError> {
        let counters = Arc::new(QueueCounters::default());
        let buffer = if cfg.enabled {
            Buffer::Durable(Arc::new(PushQueue::open(
                data_dir,
                cfg.on_full,
                cfg.quota_bytes,
                Arc::clone(&counters),
            )?))
        } else {
            Buffer::Volatile(Arc::new(VolatileBuffer::new(Arc::clone(&counters))))
        };
        Ok(Self {
            buffer,
            counters,
            level: Arc::default(),
            preprocess: None,
        })
    }

    /// Puts the preprocess stage (`connector.preprocess`) in front of the queue; no rules,
    /// no stage.
    pub fn with_preprocess(mut self, rules: Vec<PreprocessRule>) -> Self {
        self.preprocess = (!rules.is_empty()).then(|| Preprocess::new(rules));
        self
    }

    /// The preprocess stage, when configured.
    pub fn preprocess(&self) -> Option<&Preprocess> {
        self.preprocess.as_ref()
    }

    /// The admission gate.
    pub fn gate(&self) -> &Arc<Gate> {
        match &self.buffer {
            Buffer::Durable(q) => q.gate(),
            Buffer::Volatile(v) => v.gate(),
        }
    }

    /// Asks the gate to admit a record of `bytes` logical bytes.
    pub fn admit(&self, bytes: u64) -> Result<Reservation, Refused> {
        self.gate().admit(bytes)
    }

    /// Stores one line; returns once it is committed (durable) or buffered (volatile). `tag`
    /// names its source for the ledger.
    pub async fn store(
        &self,
        line: Vec<u8>,
        tag: &Tag,
        reservation: Reservation,
    ) -> Result<u64, StoreError> {
        match &self.buffer {
            Buffer::Durable(q) => q.append(line, tag, reservation).await,
            Buffer::Volatile(v) => Ok(v.append(line, tag)),
        }
    }

    /// The push buffer's part of the loss ledger: durable (committed with the rows) or, for the
    /// volatile buffer, in memory.
    pub fn ledger(&self) -> BTreeMap<String, Counts> {
        match &self.buffer {
            Buffer::Durable(q) => q.ledger(),
            Buffer::Volatile(v) => v.ledger().snapshot(),
        }
    }

    /// Rows the buffer ever took.
    pub fn appended_total(&self) -> u64 {
        match &self.buffer {
            Buffer::Durable(q) => q.appended_total(),
            Buffer::Volatile(v) => v.appended_total(),
        }
    }

    /// For the durable queue: the tracked rows of each source now in it, counted row by row
    /// (the check of the durable `pending` counts). `None` for the volatile buffer.
    pub fn count_pending(&self) -> Option<Result<PendingCheck, StoreError>> {
        match &self.buffer {
            Buffer::Durable(q) => Some(q.count_pending()),
            Buffer::Volatile(_) => None,
        }
    }

    /// True when the buffer is the durable push queue.
    pub fn is_durable(&self) -> bool {
        matches!(self.buffer, Buffer::Durable(_))
    }

    /// What the uplink drains.
    pub fn drain(&self) -> Arc<dyn Drain> {
        match &self.buffer {
            Buffer::Durable(q) => Arc::clone(q) as Arc<dyn Drain>,
            Buffer::Volatile(v) => Arc::clone(v) as Arc<dyn Drain>,
        }
    }

    /// The counters.
    pub fn counters(&self) -> &QueueCounters {
        &self.counters
    }

    /// Up to `max` push dead letters after `after`.
    pub fn dead_letters(
        &self,
        after: Option<u64>,
        max: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        match &self.buffer {
            Buffer::Durable(q) => q.dead_letters(after, max),
            Buffer::Volatile(v) => Ok(v.dead_letters(after, max)),
        }
    }

    /// Rows the push dead-letter table keeps before it trims the oldest.
    pub fn dead_letter_cap(&self) -> u64 {
        match &self.buffer {
            Buffer::Durable(q) => q.dead_letter_cap(),
            Buffer::Volatile(_) => super::volatile::DEAD_CAP as u64,
        }
    }

    /// True for the durable queue on disk, false for the volatile memory buffer.
    pub fn durable(&self) -> bool {
        matches!(self.buffer, Buffer::Durable(_))
    }

    /// The level tracker that the alert checker advances.
    pub fn level(&self) -> &Arc<LevelTracker> {
        &self.level
    }

    /// The status of the queue now.
    pub fn status(&self) -> QueueStatus {
        let gate = self.gate();
        let (used, rows, _) = gate.usage();
        let quota = gate.quota();
        let fill_pct = if quota == 0 {
            0.0
        } else {
            (used as f64 * 10_000.0 / quota as f64).round() / 100.0
        };
        let blocked_total = gate.blocked_total();
        let evicted_total = self.counters.evicted_total.load(Ordering::Relaxed);
        let dropped_total = self.counters.dropped_total.load(Ordering::Relaxed);
        let durable = matches!(self.buffer, Buffer::Durable(_));
        let write_errors_total = self.counters.write_errors_total.load(Ordering::Relaxed);
        QueueStatus {
            enabled: durable,
            durable,
            on_full: gate.on_full().as_str(),
            quota_bytes: quota,
            used_bytes: used,
            rows,
            fill_pct,
            blocking: gate.blocking(),
            blocked_total,
            evicted_total,
            dropped_total,
            write_errors_total,
            // Writer channel drops are the `push_writer` queue's level, not the quota's; a
            // failed write (a full disk) refused its records, as a full `block` queue does.
            level: self
                .level
                .peek(fill_pct, blocked_total + evicted_total + write_errors_total),
            suppressed_total: self
                .preprocess
                .as_ref()
                .map_or(0, |p| p.suppressed_total.load(Ordering::Relaxed)),
        }
    }

    /// True while records can be stored (the durable writer runs; the volatile buffer always).
    pub fn accepting(&self) -> bool {
        match &self.buffer {
            Buffer::Durable(q) => q.accepting(),
            Buffer::Volatile(_) => true,
        }
    }

    /// Stops the writer after it committed what it holds. Idempotent.
    pub fn close(&self) {
        if let Buffer::Durable(q) = &self.buffer {
            q.close();
        }
    }
}
