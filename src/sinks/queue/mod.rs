//! The durable queue in front of a destination, shared by every sink that has one: the push
//! sink (always, with its HTTP uplink) and any `clickhouse`, `postgres`, `nats` or `mqtt` sink
//! with `queue: disk`.
//!
//! A record is acknowledged to its source once the queue's transaction holding it committed
//! ([`crate::store::queue`], group commit); a [`deliver::Deliverer`] thread drains the head to
//! the destination and deletes rows only after the destination confirmed them. The quota,
//! `on_full`, the reservations under `block`, the dead-letter table and the durable part of the
//! ledger are the store's, so every queued sink behaves as the push queue does.
//!
//! - [`config`]: `queue`, `max_quota_mb`, `on_full`, validated.
//! - [`deliver`]: the drain loop and the judgement of a destination's answer.

pub mod config;
pub mod deliver;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Map, Value};

pub use config::{DiskQueueConfig, QueueMode};
pub use deliver::{
    judge_each, records_of, Deliverer, DeliveryConfig, DeliveryStatus, Destination, Failure,
    Verdict, HOLD_AFTER_REFUSALS,
};

use super::report::{fill_pct, Samples, SinkFigures};
use crate::admission::level::{Level, LevelTracker};
use crate::admission::{Gate, Refused, Reservation};
use crate::alerts::{ComponentReport, QueueReport};
use crate::alerts::{QueueKind, QueueReading};
use crate::ledger::Counts;
use crate::sinks::DeliveryError;
use crate::store::queue::{row_bytes, ReplayError, ReplaySummary, Tag, WRITER_CHANNEL};
use crate::store::{DeadLetter, DurableQueue, QueueCounters, Row, StoreError};

/// What a deliverer needs of a queue, durable or (for push without `push_queue`) volatile.
pub trait Drain: Send + Sync {
    /// Up to `max` rows from the head, oldest first.
    fn peek(&self, max: usize) -> Result<Vec<Row>, StoreError>;
    /// Deletes the rows from `first` through `last` (a batch delivered); returns how many. A
    /// row below `first` is kept: it is a dead letter replayed while the batch was on its way.
    fn remove_range(&self, first: u64, last: u64) -> Result<u64, StoreError>;
    /// Moves row `seq` to the dead-letter table; false when it was no longer there.
    fn dead_letter(&self, seq: u64, reason: &str) -> Result<bool, StoreError>;
    /// Waits up to `timeout` for rows appended (or replayed) after `seen`; returns the new
    /// mark.
    fn wait_appended(&self, seen: u64, timeout: Duration) -> u64;
}

impl Drain for DurableQueue {
    fn peek(&self, max: usize) -> Result<Vec<Row>, StoreError> {
        DurableQueue::peek(self, max)
    }
    fn remove_range(&self, first: u64, last: u64) -> Result<u64, StoreError> {
        DurableQueue::remove_range(self, first, last)
    }
    fn dead_letter(&self, seq: u64, reason: &str) -> Result<bool, StoreError> {
        DurableQueue::dead_letter(self, seq, reason)
    }
    fn wait_appended(&self, seen: u64, timeout: Duration) -> u64 {
        DurableQueue::wait_appended(self, seen, timeout)
    }
}

/// Copies in a queue's dead letters as the ledger counts them: moved there, less those put
/// back (a deleted or trimmed one stays counted: nobody delivered it).
pub fn dead_lettered_now(c: &QueueCounters) -> u64 {
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    l(&c.dead_lettered_total).saturating_sub(l(&c.dead_replayed_total))
}

/// The note `/api/status` shows next to a sink with `queue: disk`.
pub const DISK_NOTE: &str = "disk queue: records wait on flash for their destination and survive a crash; its quota and on_full decide what happens in a long outage";

/// A queue's state: `push_queue` (and `push_status`) of `/api/status` for the push sink,
/// `queue` of a queued sink's status object.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct QueueStatus {
    /// The queue is configured and enabled (durable).
    pub enabled: bool,
    /// On disk rather than in the volatile memory buffer.
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
    /// Values the preprocess stage kept out of the queue (deadband, aggregation), by design
    /// (push only).
    pub suppressed_total: u64,
}

impl QueueStatus {
    /// The status of a queue behind `gate` with `counters`; `durable` for a queue on disk.
    pub fn read(
        gate: &Gate,
        counters: &QueueCounters,
        level: &LevelTracker,
        durable: bool,
        suppressed_total: u64,
    ) -> Self {
        let (used, rows, _) = gate.usage();
        let quota = gate.quota();
        let fill = fill_pct(used, quota);
        let blocked_total = gate.blocked_total();
        let evicted_total = counters.evicted_total.load(Ordering::Relaxed);
        let write_errors_total = counters.write_errors_total.load(Ordering::Relaxed);
        Self {
            enabled: durable,
            durable,
            on_full: gate.on_full().as_str(),
            quota_bytes: quota,
            used_bytes: used,
            rows,
            fill_pct: fill,
            blocking: gate.blocking(),
            blocked_total,
            evicted_total,
            dropped_total: counters.dropped_total.load(Ordering::Relaxed),
            write_errors_total,
            // Writer channel drops are the writer queue's level, not the quota's; a failed
            // write (a full disk) refused its records, as a full `block` queue does.
            level: level.peek(fill, blocked_total + evicted_total + write_errors_total),
            suppressed_total,
        }
    }

    /// The alert hub's reading of the queue itself.
    pub fn reading(&self) -> QueueReading {
        QueueReading {
            kind: if self.durable {
                QueueKind::Disk
            } else {
                QueueKind::Memory
            },
            on_full: self.on_full,
            quota: self.quota_bytes,
            quota_unit: "bytes",
            used: self.used_bytes,
            // A failed write (a full disk) refused its records, as a full `block` queue does.
            blocked_total: self.blocked_total + self.write_errors_total,
            evicted_total: self.evicted_total,
            dropped_total: 0,
        }
    }
}

/// The names a queue goes by in alerts and `queues` of `/api/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueNames {
    /// The queue itself (`push_queue` for the push sink, else the sink's name).
    pub main: String,
    /// Its writer's channel (`push_writer`, `<name>_writer`).
    pub writer: String,
    /// Its dead-letter table (`push_dead_letters`, `<name>_dead_letters`).
    pub dead: String,
}

impl QueueNames {
    /// The names of sink `sink`'s queue; the sink called `push` keeps the delivery document's
    /// names.
    pub fn of(sink: &str) -> Self {
        if sink == "push" {
            return Self {
                main: "push_queue".into(),
                writer: "push_writer".into(),
                dead: "push_dead_letters".into(),
            };
        }
        Self {
            main: sink.to_string(),
            writer: format!("{sink}_writer"),
            dead: format!("{sink}_dead_letters"),
        }
    }
}

/// Metric family names of a queue: the push sink's families (`opex_connector_push_queue_*`,
/// named by the delivery document) or those of a sink's `queue: disk`.
pub struct Families {
    /// Evicted rows (data gaps).
    pub gaps: &'static str,
    /// Refused at the quota under `block`.
    pub blocked: &'static str,
    /// Refused because the writer channel was full.
    pub dropped: &'static str,
    /// Failed write transactions.
    pub write_errors: &'static str,
    /// Rows now.
    pub rows: &'static str,
    /// Logical bytes now.
    pub used: &'static str,
    /// The quota.
    pub quota: &'static str,
    /// The alert level.
    pub level: &'static str,
    /// Rows the destination confirmed.
    pub sent: &'static str,
    /// Rows moved to the dead-letter table.
    pub dead_letters: &'static str,
    /// Rows in the dead-letter table now.
    pub dead_rows: &'static str,
    /// Dead letters an operator put back into the queue.
    pub dead_replayed: &'static str,
    /// Dead letters an operator deleted.
    pub dead_deleted: &'static str,
    /// Commits.
    pub commits: &'static str,
    /// Commands applied by the commits.
    pub commands: &'static str,
    /// Failed delivery attempts.
    pub failures: &'static str,
}

/// The push sink's families.
pub const PUSH_FAMILIES: Families = Families {
    gaps: "opex_connector_push_queue_gaps_total",
    blocked: "opex_connector_push_queue_blocked_total",
    dropped: "opex_connector_push_queue_dropped_total",
    write_errors: "opex_connector_push_queue_write_errors_total",
    rows: "opex_connector_push_queue_rows",
    used: "opex_connector_push_queue_used_bytes",
    quota: "opex_connector_push_queue_quota_bytes",
    level: "opex_connector_push_queue_level",
    sent: "opex_connector_uplink_sent_total",
    dead_letters: "opex_connector_push_dead_letters_total",
    dead_rows: "opex_connector_push_dead_letter_rows",
    dead_replayed: "opex_connector_push_dead_letters_replayed_total",
    dead_deleted: "opex_connector_push_dead_letters_deleted_total",
    commits: "opex_connector_push_queue_commits_total",
    commands: "opex_connector_push_queue_committed_commands_total",
    failures: "opex_connector_uplink_failures_total",
};

/// The families of a `queue: disk` in front of any other sink.
pub const DISK_FAMILIES: Families = Families {
    gaps: "opex_connector_disk_queue_gaps_total",
    blocked: "opex_connector_disk_queue_blocked_total",
    dropped: "opex_connector_disk_queue_dropped_total",
    write_errors: "opex_connector_disk_queue_write_errors_total",
    rows: "opex_connector_disk_queue_rows",
    used: "opex_connector_disk_queue_used_bytes",
    quota: "opex_connector_disk_queue_quota_bytes",
    level: "opex_connector_disk_queue_level",
    sent: "opex_connector_disk_queue_delivered_total",
    dead_letters: "opex_connector_disk_queue_dead_letters_total",
    dead_rows: "opex_connector_disk_queue_dead_letter_rows",
    dead_replayed: "opex_connector_disk_queue_dead_letters_replayed_total",
    dead_deleted: "opex_connector_disk_queue_dead_letters_deleted_total",
    commits: "opex_connector_disk_queue_commits_total",
    commands: "opex_connector_disk_queue_committed_commands_total",
    failures: "opex_connector_disk_queue_delivery_failures_total",
};

/// Writes a queue's samples.
pub fn write_samples(
    f: &Families,
    q: &QueueStatus,
    c: &QueueCounters,
    delivery: Option<&DeliveryStatus>,
    s: &mut Samples,
) {
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    s.counter(
        f.gaps,
        "Rows evicted from a queue at its quota (evict_oldest): data gaps.",
        q.evicted_total,
    );
    s.counter(
        f.blocked,
        "Records refused at a queue's quota (block); their sources retry.",
        q.blocked_total,
    );
    s.counter(
        f.dropped,
        "Records refused because a queue's writer channel was full.",
        q.dropped_total,
    );
    s.counter(
        f.write_errors,
        "Failed write transactions of a queue.",
        q.write_errors_total,
    );
    s.gauge(f.rows, "Rows in a queue.", q.rows as f64);
    s.gauge(f.used, "Logical bytes in a queue.", q.used_bytes as f64);
    s.gauge(
        f.quota,
        "Quota of a queue in logical bytes.",
        q.quota_bytes as f64,
    );
    s.gauge(
        f.level,
        "Alert level of a queue: 0 ok, 1 high, 2 full.",
        f64::from(q.level.as_number()),
    );
    s.counter(
        f.sent,
        "Records a queue's destination confirmed.",
        l(&c.sent_total),
    );
    s.counter(
        f.dead_letters,
        "Records a queue's destination refused for good, moved to its dead letters.",
        l(&c.dead_lettered_total),
    );
    s.gauge(
        f.dead_rows,
        "Rows in a queue's dead-letter table.",
        l(&c.dead_rows) as f64,
    );
    s.counter(
        f.dead_replayed,
        "Dead letters an operator put back into their queue.",
        l(&c.dead_replayed_total),
    );
    s.counter(
        f.dead_deleted,
        "Dead letters an operator deleted (still counted dead-lettered in the ledger).",
        l(&c.dead_deleted_total),
    );
    s.counter(
        f.commits,
        "Write transactions of a queue committed (each synced to disk).",
        l(&c.commits_total),
    );
    s.counter(
        f.commands,
        "Commands applied by those transactions (group commit: their ratio is the mean group).",
        l(&c.committed_commands_total),
    );
    if let Some(d) = delivery {
        s.counter(
            f.failures,
            "Failed delivery attempts of a queue (each retried).",
            d.failures_total(),
        );
    }
}

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

    /// The logical bytes of a row holding `line`.
    pub fn row_bytes(line: &[u8]) -> u64 {
        row_bytes(line.len())
    }

    /// Stores one record's `line` for the destination; returns once it is committed. The
    /// reservation is topped up first when the line outgrew what admission reserved (and may
    /// then be refused). `tracked`: this copy carries the record of `source` in the ledger.
    pub async fn store(
        &self,
        line: Vec<u8>,
        source: &str,
        tracked: bool,
        mut reservation: Reservation,
    ) -> Result<(), DeliveryError> {
        reservation
            .top_up(self.gate(), row_bytes(line.len()))
            .map_err(DeliveryError::Refused)?;
        let tag = Tag {
            source: source.to_string(),
            tracked,
        };
        self.queue
            .append(line, &tag, reservation)
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

    /// Stops the writer after it committed what it holds. Idempotent.
    pub fn close(&self) {
        self.queue.close();
    }

    /// The sink's name.
    pub fn sink(&self) -> &str {
        &self.sink
    }
}
