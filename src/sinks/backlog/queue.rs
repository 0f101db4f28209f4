//! The memory backlog of a database sink, and the thread that empties it into the database.
//!
//! A row enters when the engine delivers a record ([`Backlog::push`]): the record is then
//! acknowledged to its source. The **backlog is memory only**: rows still in it are lost if the
//! process crashes (spec, "Per-sink queue quotas"); data that must survive a crash goes through
//! NATS JetStream or the push queue.
//!
//! Invariants:
//! - Rows waiting plus rows in the batch being inserted never exceed `max_backlog_rows`.
//! - Under `block` the engine's admission enforces the bound: each record reserves one row
//!   against the sink's [`Gate`] (the gate counts rows here, not bytes) before any node runs,
//!   and the reservation is released only after the row is counted in the published usage.
//! - Under `evict_oldest` a row arriving at the bound drops the oldest *waiting* row; rows of
//!   the insert in flight are never dropped, because that insert may still succeed. So every
//!   row counted in `dropped_total` was never inserted, and every row pushed is either inserted,
//!   parked in the dead-letter queue, counted dropped, or counted lost at stop: the counts are
//!   exact. When every row is in flight the arriving row itself is the one dropped: only when
//!   `max_insert_rows` is at least `max_backlog_rows` (as at the defaults, 20000 each) and a
//!   full backlog went in one insert, which takes inserts that kept succeeding while the
//!   backlog still filled (after failures the inserts shrink towards `sink_batch_rows`, see
//!   below).
//! - A batch leaves when `sink_batch_rows` rows wait, or when its oldest row has waited
//!   `flush_interval`. It takes every row waiting then, oldest first, up to `max_insert_rows`
//!   (catch-up): normally about `sink_batch_rows`, but a backlog that built up (an outage, a
//!   burst faster than the database takes) goes in few large inserts, because each insert
//!   costs the server a fixed amount (ClickHouse writes a part, Postgres a transaction and a
//!   round trip). The rows in flight are never more than `max_insert_rows`, nor than the bound.
//! - A failed insert puts the batch back at the head, in order, and is retried
//!   with backoff ([`RETRY_INITIAL`] doubling to [`RETRY_MAX`]); while it waits the rows are
//!   ordinary waiting rows (and may be evicted). The retry takes the rows waiting then, the
//!   batch's first, but at most half as many as failed (never fewer than `sink_batch_rows`),
//!   and each success doubles that limit again up to `max_insert_rows`: an insert too large
//!   for the link or the timeout shrinks until it passes instead of failing forever, and after
//!   an outage the catch-up is back at full size within a few inserts.
//! - An error that names the destination's configuration ([`InsertError::Destination`]: no
//!   such table, column, schema or database, a missing privilege, bad credentials) holds the
//!   sink, as the uplink holds its queue on HTTP 401: the batch goes back at the head and is
//!   retried with the back-off, `held` shows in the sink's entry of `/api/status`, and the
//!   component `<sink>.held` is alerted while it lasts. Nothing is dead-lettered: a table
//!   renamed during a migration costs no data, only delay (and the bound, see above).
//! - An error about the rows ([`InsertError::Permanent`]: a value that does not fit its column,
//!   a constraint) sends the batch again one row at a time, and a row refused alone moves to
//!   the pipeline dead-letter queue with the server's message, so one bad record parks only
//!   itself. A catch-up insert (more than `sink_batch_rows`) refused so is first sent again in
//!   batches of `sink_batch_rows`, so a bad row costs no more single inserts than it would
//!   without catch-up. After [`HOLD_AFTER_REFUSALS`] rows refused alone in a row, the sink
//!   holds instead (as the disk queue's deliverer does): a database that refuses every row is
//!   misconfigured, not the data.
//! - At a clean stop the thread inserts what is left for up to [`STOP_DEADLINE`]; rows it could
//!   not insert are counted in `lost_at_stop_total` and logged.
//!
//! The insert loop, which keeps the invariants of failures, holds and dead letters, is
//! `queue/insert.rs`.
//!
//! [`HOLD_AFTER_REFUSALS`]: crate::sinks::queue::HOLD_AFTER_REFUSALS

mod insert;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::config::SinkBatchConfig;
use crate::admission::level::{Level, LevelTracker};
use crate::admission::{Gate, OnFull, Refused, Reservation, RETRY_AFTER};
use crate::alerts::ComponentReport;
use crate::alerts::QueueReport;
use crate::alerts::{QueueKind, QueueReading};
use crate::ledger::{Book, Cause, Left};
use crate::record::Record;
use crate::sinks::queue::{DeliveryStatus, Failure};
use crate::sinks::report::{Report, Samples, SinkFigures};
use crate::telemetry::events;

/// First retry delay after a failed insert.
pub const RETRY_INITIAL: Duration = Duration::from_millis(500);
/// Longest retry delay.
pub const RETRY_MAX: Duration = Duration::from_secs(30);
/// How long a clean stop keeps inserting what is left.
pub const STOP_DEADLINE: Duration = Duration::from_secs(10);
/// Longest error text kept for `last_error` and dead-letter reasons.
const MAX_REASON: usize = 1000;

/// A record and its row, encoded for one database.
#[derive(Debug)]
pub struct Row<T> {
    /// The record, kept for the dead-letter queue.
    pub record: Record,
    /// The copy of its record that the ledger tracks (pending here until it leaves).
    pub tracked: bool,
    /// The row as the database takes it.
    pub data: T,
}

/// Why an insert failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InsertError {
    /// Connection refused or lost, timeout, server busy or starting: retried, rows kept.
    Transient(String),
    /// The destination's configuration is wrong, not the rows: no such table, column, schema
    /// or database, a missing privilege, bad credentials. Every row would fail the same way
    /// until an operator fixes it, so the sink holds: rows kept, retried with back-off,
    /// alerted; never dead-lettered.
    Destination(String),
    /// The server refused the rows themselves (a value that does not fit its column, a
    /// constraint): retrying would fail the same way, so the rows go to the dead-letter queue
    /// with this message, one at a time (see the module doc).
    Permanent(String),
}

impl InsertError {
    /// True when retrying may succeed.
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::Transient(_))
    }

    /// True when the error names the destination's configuration: the sink holds.
    pub fn is_destination(&self) -> bool {
        matches!(self, Self::Destination(_))
    }
}

/// What inserts a batch: one per database.
pub trait Inserter<T>: Send {
    /// Inserts every row of `rows` (in one statement where the database allows), or fails.
    fn insert(&mut self, rows: &[Row<T>]) -> Result<(), InsertError>;
}

/// Why a row could not enter the backlog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushError {
    /// At the bound under `block` (normally refused at admission already).
    Refused(Refused),
    /// The sink is stopping: nothing was taken.
    Closed,
}

/// The counters of one backlog.
#[derive(Debug, Default)]
pub struct BacklogCounters {
    /// Rows taken into the backlog (each acknowledged to its source).
    pub accepted_total: AtomicU64,
    /// Rows the database confirmed.
    pub inserted_total: AtomicU64,
    /// Inserts that succeeded.
    pub batches_total: AtomicU64,
    /// Inserts that failed and were retried.
    pub failures_total: AtomicU64,
    /// Rows dropped at the bound under `evict_oldest`: lost.
    pub dropped_total: AtomicU64,
    /// Rows the server refused for good, parked in the pipeline dead-letter queue.
    pub dead_lettered_total: AtomicU64,
    /// Rows still in the backlog when a clean stop gave up on the database: lost.
    pub lost_at_stop_total: AtomicU64,
    /// Rows given up when a reload removed the sink with `discard`: lost.
    pub discarded_total: AtomicU64,
}

/// The status of one database sink (`/api/status`, under the sink's name).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BacklogStatus {
    /// Always `"memory"`: the backlog is lost if the process crashes.
    pub backlog: &'static str,
    /// The plain warning shown next to it.
    pub note: &'static str,
    /// The table written.
    pub table: String,
    /// `evict_oldest` or `block`.
    pub on_full: &'static str,
    /// The bound in rows.
    pub max_backlog_rows: u64,
    /// Rows waiting plus rows being inserted now.
    pub backlog_rows: u64,
    /// Rows of the insert in flight.
    pub in_flight_rows: u64,
    /// `backlog_rows / max_backlog_rows` in percent.
    pub fill_pct: f64,
    /// Refusing new records now (`block`).
    pub blocking: bool,
    /// Records refused at the bound (`block`), not lost: their sources retry.
    pub blocked_total: u64,
    /// Rows dropped at the bound (`evict_oldest`): lost.
    pub dropped_total: u64,
    /// Rows taken into the backlog.
    pub accepted_total: u64,
    /// Rows the database confirmed.
    pub inserted_total: u64,
    /// Inserts that succeeded.
    pub batches_total: u64,
    /// Inserts that failed and were retried.
    pub insert_failures_total: u64,
    /// Rows refused for good by the server, parked in the dead-letter queue.
    pub dead_lettered_total: u64,
    /// Rows lost because a clean stop could not insert them.
    pub lost_at_stop_total: u64,
    /// Rows given up when a reload removed the sink with `discard`.
    pub discarded_total: u64,
    /// False after a failed insert, until one succeeds.
    pub healthy: bool,
    /// Holding: the database refuses the table (or refused every one of the last
    /// [`crate::sinks::queue::HOLD_AFTER_REFUSALS`] rows); rows are kept and retried, none is dead-lettered.
    pub held: bool,
    /// Times the sink was put on hold.
    pub holds_total: u64,
    /// Rows refused alone since the last insert that succeeded.
    pub refusals_in_a_row: u64,
    /// The class of the last insert error (`HTTP 500`, an SQLSTATE), cleared by a success;
    /// the full message, which may hold rows, is on the admin endpoint.
    pub last_error: Option<String>,
    /// `ok`, `high` (80 % or more) or `full`.
    pub level: Level,
}

/// The warning `/api/status` and the book (`docs/src/sinks/databases.md`) show next to these
/// backlogs.
pub const MEMORY_NOTE: &str = "memory only: rows waiting here are lost if the process crashes; route data that must survive a crash through NATS JetStream or the push queue";

struct Slot<T> {
    row: Row<T>,
    /// When its batch is due at the latest (arrival + `flush_interval`).
    due: Instant,
}

struct State<T> {
    waiting: VecDeque<Slot<T>>,
    in_flight: usize,
    closing: bool,
    /// Closing to hand its rows over (or give them up): the insert thread ends after the
    /// insert in flight and leaves the waiting rows where they are.
    releasing: bool,
    /// When a clean stop gives up.
    stop_by: Option<Instant>,
}

/// The bounded memory backlog of one database sink.
pub struct Backlog<T> {
    sink: String,
    table: String,
    cfg: SinkBatchConfig,
    gate: Arc<Gate>,
    state: Mutex<State<T>>,
    /// Wakes the insert thread: a batch is due, or the sink is closing.
    wake: Condvar,
    counters: BacklogCounters,
    level: Arc<LevelTracker>,
    last_error: Mutex<Option<String>>,
    /// The hold, as the disk queue's deliverer keeps it (only its hold part is used here:
    /// `held`, `holds_total`, time on hold).
    hold: DeliveryStatus,
    /// Rows refused alone since the last insert that succeeded.
    refusals_in_a_row: AtomicU64,
    /// Its part of the loss ledger: the tracked rows of each source, pending until inserted,
    /// parked or lost.
    book: Book,
}

impl<T: Send> Backlog<T> {
    /// An empty backlog of sink `sink` writing `table`.
    pub fn new(sink: &str, table: String, cfg: SinkBatchConfig) -> Self {
        let quota = cfg.max_backlog_rows as u64;
        Self {
            sink: sink.to_string(),
            table,
            gate: Arc::new(Gate::new(cfg.on_full, quota, 0, 0, 0)),
            cfg,
            state: Mutex::new(State {
                waiting: VecDeque::new(),
                in_flight: 0,
                closing: false,
                releasing: false,
                stop_by: None,
            }),
            wake: Condvar::new(),
            counters: BacklogCounters::default(),
            level: Arc::default(),
            last_error: Mutex::new(None),
            hold: DeliveryStatus::default(),
            refusals_in_a_row: AtomicU64::new(0),
            book: Book::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Poisoned only if a thread panicked while holding it; the queue itself stays usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The admission gate; it counts rows (each record admits 1).
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// Its part of the loss ledger (memory only, like the rows).
    pub fn ledger(&self) -> &Book {
        &self.book
    }

    /// Rows waiting or being inserted now.
    pub fn pending(&self) -> u64 {
        let s = self.lock();
        (s.waiting.len() + s.in_flight) as u64
    }

    /// The counters.
    pub fn counters(&self) -> &BacklogCounters {
        &self.counters
    }

    /// The level tracker the alert checker advances.
    pub fn level(&self) -> &Arc<LevelTracker> {
        &self.level
    }

    /// The batch settings.
    pub fn config(&self) -> &SinkBatchConfig {
        &self.cfg
    }

    /// The rows waiting (not in flight), oldest first: for tests.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> Vec<T>
    where
        T: Clone,
    {
        self.lock()
            .waiting
            .iter()
            .map(|s| s.row.data.clone())
            .collect()
    }

    /// Takes one row; returns once it is in the backlog. `reservation` is what admission
    /// reserved for it, released once the row is counted.
    pub fn push(&self, row: Row<T>, reservation: Reservation) -> Result<(), PushError> {
        let mut s = self.lock();
        if s.closing {
            return Err(PushError::Closed);
        }
        let mut dropped = None;
        if s.waiting.len() + s.in_flight >= self.cfg.max_backlog_rows {
            match self.cfg.on_full {
                OnFull::Block => {
                    return Err(PushError::Refused(Refused { after: RETRY_AFTER }));
                }
                OnFull::EvictOldest => {
                    dropped = Some(match s.waiting.pop_front() {
                        Some(old) => (old.row.record, old.row.tracked),
                        None => (row.record.clone(), row.tracked),
                    });
                }
            }
        }
        let keep_new = dropped.as_ref().is_none_or(|d| d.0.id != row.record.id);
        if row.tracked {
            self.book.queued(&row.record.source);
        }
        if keep_new {
            s.waiting.push_back(Slot {
                row,
                due: Instant::now() + self.cfg.flush_interval,
            });
        }
        let total = (s.waiting.len() + s.in_flight) as u64;
        self.gate.publish(total, total);
        let waiting = s.waiting.len();
        drop(s);
        drop(reservation);
        self.counters.accepted_total.fetch_add(1, Ordering::Relaxed);
        if waiting == 1 || waiting >= self.cfg.batch_rows {
            self.wake.notify_all();
        }
        if let Some((d, tracked)) = dropped {
            if tracked {
                self.book.left_queue(&d.source, Left::Lost(Cause::Evicted));
            }
            events::db_sink_evicted(&self.sink, &self.counters.dropped_total, &d);
        }
        Ok(())
    }

    /// Stops taking rows and tells the insert thread to insert what is left (for up to
    /// [`STOP_DEADLINE`]) and end. Idempotent.
    pub fn close(&self) {
        let mut s = self.lock();
        if !s.closing {
            s.closing = true;
            s.stop_by = Some(Instant::now() + STOP_DEADLINE);
        }
        drop(s);
        self.wake.notify_all();
    }

    /// Stops taking rows and tells the insert thread to end after the insert in flight,
    /// leaving the rows waiting for [`Self::take`] (a reload hands them to the sink's new
    /// instance) or [`Self::discard`]. Idempotent; [`Self::close`] after it changes nothing.
    pub fn release(&self) {
        let mut s = self.lock();
        s.closing = true;
        s.releasing = true;
        drop(s);
        self.wake.notify_all();
    }

    /// Takes every row waiting, oldest first, with the backlog's part of the ledger (which
    /// counts them pending): what a sink's new instance goes on with ([`Self::adopt`]). Call
    /// it once the insert thread ended after [`Self::release`].
    pub fn take(
        &self,
    ) -> (
        Vec<Row<T>>,
        std::collections::BTreeMap<String, crate::ledger::Counts>,
    ) {
        let mut s = self.lock();
        let rows: Vec<Row<T>> = s.waiting.drain(..).map(|slot| slot.row).collect();
        drop(s);
        self.gate.publish(0, 0);
        (rows, self.book.snapshot())
    }

    /// Gives up every row waiting, each counted `discarded` in its source's ledger (a reload
    /// removed the sink with `discard`); the rows given up. Call it once the insert thread
    /// ended after [`Self::release`].
    pub fn discard(&self) -> u64 {
        let (rows, _) = self.take();
        for row in rows.iter().filter(|r| r.tracked) {
            self.book
                .left_queue(&row.record.source, Left::Lost(Cause::Discarded));
        }
        let n = rows.len() as u64;
        self.counters
            .discarded_total
            .fetch_add(n, Ordering::Relaxed);
        if n > 0 {
            events::queue_discarded(&self.sink, n);
        }
        n
    }

    /// Goes on from a former instance's backlog (see [`Self::take`]): its rows first in line,
    /// due now, and its part of the ledger, which counts them. Before the insert thread
    /// starts. The rows are taken whatever the bound: under `block` admission refuses until
    /// they are under it again.
    pub fn adopt(
        &self,
        rows: Vec<Row<T>>,
        part: std::collections::BTreeMap<String, crate::ledger::Counts>,
    ) {
        self.book.store(part);
        let n = rows.len();
        let mut s = self.lock();
        let due = Instant::now();
        for row in rows.into_iter().rev() {
            s.waiting.push_front(Slot { row, due });
        }
        let total = (s.waiting.len() + s.in_flight) as u64;
        drop(s);
        self.gate.publish(total, total);
        self.counters
            .accepted_total
            .fetch_add(n as u64, Ordering::Relaxed);
        self.wake.notify_all();
    }

    /// The status now.
    pub fn status(&self) -> BacklogStatus {
        let s = self.lock();
        let rows = (s.waiting.len() + s.in_flight) as u64;
        let in_flight = s.in_flight as u64;
        drop(s);
        let max = self.cfg.max_backlog_rows as u64;
        let fill_pct = (rows as f64 * 10_000.0 / max.max(1) as f64).round() / 100.0;
        let c = &self.counters;
        let blocked_total = self.gate.blocked_total();
        let dropped_total = c.dropped_total.load(Ordering::Relaxed);
        let last_error = self
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        BacklogStatus {
            backlog: "memory",
            note: MEMORY_NOTE,
            table: self.table.clone(),
            on_full: self.cfg.on_full.as_str(),
            max_backlog_rows: max,
            backlog_rows: rows,
            in_flight_rows: in_flight,
            fill_pct,
            blocking: self.gate.blocking(),
            blocked_total,
            dropped_total,
            accepted_total: c.accepted_total.load(Ordering::Relaxed),
            inserted_total: c.inserted_total.load(Ordering::Relaxed),
            batches_total: c.batches_total.load(Ordering::Relaxed),
            insert_failures_total: c.failures_total.load(Ordering::Relaxed),
            dead_lettered_total: c.dead_lettered_total.load(Ordering::Relaxed),
            lost_at_stop_total: c.lost_at_stop_total.load(Ordering::Relaxed),
            discarded_total: c.discarded_total.load(Ordering::Relaxed),
            healthy: last_error.is_none(),
            held: self.hold.held(),
            holds_total: self.hold.holds_total(),
            refusals_in_a_row: self.refusals_in_a_row.load(Ordering::Relaxed),
            last_error: last_error.map(|e| Failure::from_detail(e).class),
            level: self.level.peek(fill_pct, blocked_total + dropped_total),
        }
    }

    /// The last insert error in full, for the admin endpoint.
    pub fn error_detail(&self) -> serde_json::Value {
        match &*self.last_error.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => {
                serde_json::json!({"class": Failure::from_detail(e.clone()).class, "detail": e})
            }
            None => serde_json::Value::Null,
        }
    }

    /// Everything the rest of the program reads of this backlog's sink.
    pub fn report(&self) -> Report {
        let st = self.status();
        let mut r = Report {
            accepting: true,
            ..Report::default()
        };
        r.entry.insert(
            "dropped".into(),
            (st.dropped_total + st.lost_at_stop_total).into(),
        );
        r.entry.insert("blocked".into(), st.blocked_total.into());
        r.entry.insert("queue_rows".into(), st.backlog_rows.into());
        r.entry.insert("held".into(), st.held.into());
        r.entry.insert("durable".into(), false.into());
        r.entry.insert("backlog".into(), st.backlog.into());
        r.entry.insert("note".into(), st.note.into());
        r.queues = vec![QueueReport {
            name: self.sink.clone(),
            tracker: Arc::clone(&self.level),
            reading: QueueReading {
                kind: QueueKind::Memory,
                on_full: st.on_full,
                quota: st.max_backlog_rows,
                quota_unit: "rows",
                used: st.backlog_rows,
                blocked_total: st.blocked_total,
                evicted_total: 0,
                dropped_total: st.dropped_total,
            },
        }];
        r.components = vec![ComponentReport {
            name: format!("{}.held", self.sink),
            message: "the database refuses the table or every row: rows kept and retried, none dead-lettered; check the table, its columns, the database and the sink's credentials",
            counters: vec![("held_ms_total", self.hold.held_ms_total())],
        }];
        r.ledger_part = Some((self.sink.clone(), self.book.snapshot()));
        r.ledger = SinkFigures {
            accepted: st.accepted_total,
            delivered: st.inserted_total,
            pending: st.backlog_rows,
            dead_lettered: st.dead_lettered_total,
            lost: st.dropped_total + st.lost_at_stop_total + st.discarded_total,
            unconfirmed: 0,
            kept: "memory",
        };
        let mut s = Samples::new(&self.sink);
        s.gauge(
            "opex_connector_sink_backlog_rows",
            "Rows in a database sink's memory backlog (lost if the process crashes).",
            st.backlog_rows as f64,
        );
        s.gauge(
            "opex_connector_sink_backlog_max_rows",
            "Bound of a database sink's memory backlog in rows.",
            st.max_backlog_rows as f64,
        );
        s.counter(
            "opex_connector_sink_inserted_rows_total",
            "Rows a database confirmed.",
            st.inserted_total,
        );
        s.counter(
            "opex_connector_sink_insert_failures_total",
            "Failed inserts of a database sink (each retried).",
            st.insert_failures_total,
        );
        s.counter(
            "opex_connector_sink_dead_lettered_rows_total",
            "Rows a database refused for good, parked in the dead-letter queue.",
            st.dead_lettered_total,
        );
        s.counter(
            "opex_connector_sink_lost_at_stop_total",
            "Rows a clean stop could not insert.",
            st.lost_at_stop_total,
        );
        s.memory_queue(st.dropped_total, st.blocked_total, None, st.backlog_rows);
        r.status = serde_json::to_value(&st).unwrap_or_default();
        r.metrics = s.finish();
        r
    }
}
