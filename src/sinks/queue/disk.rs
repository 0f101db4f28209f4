//! [`DiskQueue`]: one sink's durable queue, with its alert level and its deliverer's status,
//! and the parts of the sink's report it owns (its queues, components, ledger part, figures).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{DeliveryStatus, DiskQueueConfig, Drain, QueueNames, QueueStatus};
use crate::admission::level::LevelTracker;
use crate::admission::{Gate, Refused, Reservation};
use crate::alerts::{ComponentReport, QueueKind, QueueReading, QueueReport};
use crate::ledger::Counts;
use crate::record::Record;
use crate::sinks::report::SinkFigures;
use crate::sinks::DeliveryError;
use crate::store::queue::{record_row, row_bytes, ReplayError, ReplaySummary, WRITER_CHANNEL};
use crate::store::{DeadLetter, DurableQueue, QueueCounters, StoreError};

/// Copies in a queue's dead letters as the ledger counts them: moved there, less those put
/// back (a deleted or trimmed one stays counted: nobody delivered it).
pub fn dead_lettered_now(c: &QueueCounters) -> u64 {
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    l(&c.dead_lettered_total).saturating_sub(l(&c.dead_replayed_total))
}

/// The note `/api/status` shows next to a sink with `queue: disk`.
pub const DISK_NOTE: &str = "disk queue: records wait on flash for their destination and survive a crash; its quota and on_full decide what happens in a long outage";

/// A durable queue of one sink, with its level and its deliverer's status.
pub struct DiskQueue {
    sink: String,
    names: QueueNames,
    queue: Arc<DurableQueue>,
    counters: Arc<QueueCounters>,
    level: Arc<LevelTracker>,
    /// Levels of the writer channel and the dead-letter table, which only the hub shows.
    writer_level: Arc<LevelTracker>,
    dead_level: Arc<LevelTracker>,
    delivery: Arc<DeliveryStatus>,
}

impl DiskQueue {
    /// Opens the queue file `path` of sink `sink`.
    pub fn open(path: &Path, sink: &str, cfg: &DiskQueueConfig) -> Result<Self, StoreError> {
        let counters = Arc::new(QueueCounters::default());
        let queue = DurableQueue::open(
            path,
            sink,
            cfg.on_full,
            cfg.quota_bytes,
            Arc::clone(&counters),
        )?;
        Ok(Self {
            sink: sink.to_string(),
            names: QueueNames::of(sink),
            queue: Arc::new(queue),
            counters,
            level: Arc::default(),
            writer_level: Arc::default(),
            dead_level: Arc::default(),
            delivery: Arc::default(),
        })
    }

    /// The admission gate (logical bytes).
    pub fn gate(&self) -> &Arc<Gate> {
        self.queue.gate()
    }

    /// Asks the gate to admit `bytes` logical bytes.
    pub fn admit(&self, bytes: u64) -> Result<Reservation, Refused> {
        self.gate().admit(bytes)
    }

    /// The logical bytes of a row holding a line of `line_len` bytes.
    pub fn row_bytes(line_len: usize) -> u64 {
        row_bytes(line_len)
    }

    /// Stores `record`'s line for the destination; returns once it is committed. The
    /// reservation is topped up first when the line outgrew what admission reserved (and may
    /// then be refused). `tracked`: this copy carries the record of `source` in the ledger.
    pub async fn store(
        &self,
        record: &Record,
        source: &str,
        tracked: bool,
        mut reservation: Reservation,
    ) -> Result<(), DeliveryError> {
        let line_len = record.line_len();
        reservation
            .top_up(self.gate(), row_bytes(line_len))
            .map_err(DeliveryError::Refused)?;
        self.queue
            .append(record_row(source, tracked, record, line_len), reservation)
            .await
            .map_err(DeliveryError::Store)?;
        Ok(())
    }

    /// What the deliverer drains.
    pub fn drain(&self) -> Arc<dyn Drain> {
        Arc::clone(&self.queue) as Arc<dyn Drain>
    }

    /// The deliverer's status.
    pub fn delivery(&self) -> &Arc<DeliveryStatus> {
        &self.delivery
    }

    /// The counters.
    pub fn counters(&self) -> &QueueCounters {
        &self.counters
    }

    /// The names of its queues in alerts.
    pub fn names(&self) -> &QueueNames {
        &self.names
    }

    /// The queue now.
    pub fn status(&self, suppressed_total: u64) -> QueueStatus {
        QueueStatus::read(
            self.gate(),
            &self.counters,
            &self.level,
            true,
            suppressed_total,
        )
    }

    /// Its three queues for the alert hub: the queue, its writer channel, its dead letters.
    pub fn queue_reports(&self, status: &QueueStatus) -> Vec<QueueReport> {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            QueueReport {
                name: self.names.main.clone(),
                tracker: Arc::clone(&self.level),
                reading: status.reading(),
            },
            QueueReport {
                name: self.names.writer.clone(),
                tracker: Arc::clone(&self.writer_level),
                reading: QueueReading {
                    kind: QueueKind::Channel,
                    on_full: "block",
                    quota: WRITER_CHANNEL as u64,
                    quota_unit: "messages",
                    used: l(&c.writer_queued),
                    blocked_total: 0,
                    evicted_total: 0,
                    dropped_total: l(&c.dropped_total),
                },
            },
            QueueReport {
                name: self.names.dead.clone(),
                tracker: Arc::clone(&self.dead_level),
                reading: QueueReading {
                    kind: QueueKind::Disk,
                    on_full: "evict_oldest",
                    quota: self.queue.dead_letter_cap(),
                    quota_unit: "rows",
                    used: l(&c.dead_rows),
                    blocked_total: 0,
                    evicted_total: l(&c.dead_trimmed_total),
                    dropped_total: 0,
                },
            },
        ]
    }

    /// Its alerted counters: failed writes, and time on hold.
    pub fn components(&self) -> Vec<ComponentReport> {
        vec![
            ComponentReport {
                name: format!("{}.write_errors", self.names.main),
                message: "queue writes failed: their callers got the error",
                counters: vec![(
                    "write_errors_total",
                    self.counters.write_errors_total.load(Ordering::Relaxed),
                )],
            },
            ComponentReport {
                name: format!("{}.held", self.names.main),
                message: "the destination refuses the requests or every record: rows kept and retried, none dead-lettered; check its address and credentials",
                counters: vec![("held_ms_total", self.delivery.held_ms_total())],
            },
        ]
    }

    /// Its part of the loss ledger, as of the last commit.
    pub fn ledger_part(&self) -> BTreeMap<String, Counts> {
        self.queue.ledger()
    }

    /// Its figures in the ledger.
    pub fn figures(&self) -> SinkFigures {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (_, rows, _) = self.gate().usage();
        SinkFigures {
            accepted: self.queue.appended_total(),
            delivered: l(&self.counters.sent_total),
            pending: rows,
            dead_lettered: dead_lettered_now(&self.counters),
            lost: l(&self.counters.evicted_total),
            unconfirmed: 0,
            kept: "disk",
        }
    }

    /// Compares the durable `pending` counts with the rows, read one by one (one pass over
    /// the queue in one read transaction).
    pub fn verify(&self) -> Value {
        let (kept, rows) = match self.queue.count_pending() {
            Ok(c) => (c.kept, c.rows),
            Err(e) => return json!({"checked": false, "reason": e.to_string()}),
        };
        let mut mismatches = Map::new();
        for source in kept.keys().chain(rows.keys()) {
            let found = rows.get(source).copied().unwrap_or(0);
            let kept = kept.get(source).copied().unwrap_or(0);
            if kept != found {
                mismatches.insert(source.clone(), json!({"pending": kept, "rows": found}));
            }
        }
        json!({
            "checked": true,
            "agrees": mismatches.is_empty(),
            "mismatches": mismatches,
            "rows": rows,
        })
    }

    /// Up to `max` dead letters after `after`.
    pub fn dead_letters(
        &self,
        after: Option<u64>,
        max: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        self.queue.dead_letters(after, max)
    }

    /// Dead letter `id`, when its table has it.
    pub fn get_dead_letter(&self, id: u64) -> Result<Option<DeadLetter>, StoreError> {
        self.queue.get_dead_letter(id)
    }

    /// Puts dead letter `id` back at the head of the queue; its seq. Blocking.
    pub fn replay_dead_letter(&self, id: u64) -> Result<u64, ReplayError> {
        self.queue.replay_dead_letter(id)
    }

    /// Puts back up to `max` dead letters in seq order. Blocking.
    pub fn replay_dead_letters(&self, max: usize) -> Result<ReplaySummary, StoreError> {
        self.queue.replay_dead_letters(max)
    }

    /// Deletes dead letter `id`; false when there was none. Blocking.
    pub fn delete_dead_letter(&self, id: u64) -> Result<bool, StoreError> {
        self.queue.delete_dead_letter(id)
    }

    /// Rows its dead-letter table keeps before it trims the oldest.
    pub fn dead_letter_cap(&self) -> u64 {
        self.queue.dead_letter_cap()
    }

    /// True while its writer takes records.
    pub fn accepting(&self) -> bool {
        self.queue.accepting()
    }

    /// Deletes every queued row, counted `discarded` (the sink was removed with `discard`);
    /// the rows deleted. Call it after its deliverer stopped, before [`Self::close`].
    pub fn discard(&self) -> Result<u64, StoreError> {
        self.queue.discard()
    }

    /// Stops the writer after it committed what it holds. Idempotent.
    pub fn close(&self) {
        self.queue.close();
    }

    /// The sink's name.
    pub fn sink(&self) -> &str {
        &self.sink
    }
}
