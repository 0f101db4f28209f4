//! A queue's state as `/api/status` shows it ([`QueueStatus`]: `push_queue` for the push sink,
//! `queue` in a queued sink's status), the names its queues go by in alerts, and its metric
//! families.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::DeliveryStatus;
use crate::admission::level::{Level, LevelTracker};
use crate::admission::Gate;
use crate::alerts::{QueueKind, QueueReading};
use crate::sinks::report::{fill_pct, Samples};
use crate::store::QueueCounters;

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
    /// Time the commits spent syncing.
    pub sync: &'static str,
    /// Time groups were held open for callers.
    pub held: &'static str,
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
    sync: "opex_connector_push_queue_sync_seconds_total",
    held: "opex_connector_push_queue_held_seconds_total",
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
    sync: "opex_connector_disk_queue_sync_seconds_total",
    held: "opex_connector_disk_queue_held_seconds_total",
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
    s.seconds(
        f.sync,
        "Time a queue's commits spent syncing to disk (over the commits: the disk's mean sync).",
        l(&c.sync_nanos_total),
    );
    s.seconds(
        f.held,
        "Time a queue's writer held groups open for callers still arriving (group commit).",
        l(&c.held_nanos_total),
    );
    if let Some(d) = delivery {
        s.counter(
            f.failures,
            "Failed delivery attempts of a queue (each retried).",
            d.failures_total(),
        );
    }
}
