//! The insert loop of a [`Backlog`]: takes each batch as it becomes due, inserts it, and acts
//! on the answer (retry, hold, row by row, park), as the parent module's invariants say.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Backlog, InsertError, Inserter, Row, Slot, MAX_REASON, RETRY_INITIAL, RETRY_MAX};
use crate::engine::Engine;
use crate::flow::{NodeKind, NodeRef};
use crate::ledger::{Cause, Left};
use crate::sinks::queue::{Failure, HOLD_AFTER_REFUSALS};
use crate::store::dead_letters::NewDeadLetter;
use crate::telemetry::events;

impl<T: Send> Backlog<T> {
    /// Waits for the next batch: `batch_rows` rows waiting, or the oldest waiting for
    /// `flush_interval`, or the sink closing (then whatever waits). The batch is every row
    /// waiting then, oldest first, up to `most`. `None`: closing and empty, or the stop
    /// deadline passed.
    fn next_batch(&self, most: usize) -> Option<Vec<Row<T>>> {
        let mut s = self.lock();
        loop {
            if s.closing {
                if s.releasing
                    || s.waiting.is_empty()
                    || s.stop_by.is_some_and(|t| Instant::now() >= t)
                {
                    return None;
                }
                break;
            }
            let due = match s.waiting.front() {
                None => None,
                Some(_) if s.waiting.len() >= self.cfg.batch_rows => break,
                Some(front) => {
                    if Instant::now() >= front.due {
                        break;
                    }
                    Some(front.due)
                }
            };
            s = match due {
                None => self.wake.wait(s).unwrap_or_else(|e| e.into_inner()),
                Some(due) => {
                    let left = due.saturating_duration_since(Instant::now());
                    self.wake
                        .wait_timeout(s, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
        let n = s.waiting.len().min(most.max(1));
        s.in_flight = n;
        Some(s.waiting.drain(..n).map(|slot| slot.row).collect())
    }

    /// Puts a failed batch back at the head, in order: it is due again as soon as the backoff
    /// ends.
    fn put_back(&self, batch: Vec<Row<T>>) {
        let mut s = self.lock();
        let due = Instant::now();
        for row in batch.into_iter().rev() {
            s.waiting.push_front(Slot { row, due });
        }
        s.in_flight = 0;
    }

    /// The batch in flight is gone (inserted or parked).
    fn finish(&self) {
        let mut s = self.lock();
        s.in_flight = 0;
        let total = s.waiting.len() as u64;
        self.gate.publish(total, total);
    }

    /// Waits `delay` unless the sink closes first; returns true when closing.
    fn backoff(&self, delay: Duration) -> bool {
        let s = self.lock();
        if s.closing {
            return true;
        }
        let (s, _) = self
            .wake
            .wait_timeout_while(s, delay, |s| !s.closing)
            .unwrap_or_else(|e| e.into_inner());
        s.closing
    }

    fn set_error(&self, e: Option<String>) {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = e;
    }

    /// Runs the insert loop until the sink is closed and emptied (or the stop deadline
    /// passed). Call it on the sink's own thread; `engine` takes the dead letters.
    pub fn run(&self, inserter: &mut dyn Inserter<T>, engine: &Engine) {
        let (batch_rows, max_insert_rows) = (self.cfg.batch_rows, self.cfg.max_insert_rows);
        let mut delay = RETRY_INITIAL;
        // Most rows of the next insert: halved by a failure, doubled by a success.
        let mut limit = max_insert_rows;
        // Rows at the head still to go in batches of `batch_rows`: a refused catch-up insert,
        // sent again in pieces so that only the piece holding the bad row goes row by row.
        let mut split = 0usize;
        // Rows at the head still to go one at a time: a refused batch, sent again row by row
        // so that only the rows refused alone are parked.
        let mut singles = 0usize;
        loop {
            let (single, piece) = (singles > 0, split > 0);
            let most = if single {
                1
            } else if piece {
                batch_rows
            } else {
                limit
            };
            let Some(batch) = self.next_batch(most) else {
                break;
            };
            singles = singles.saturating_sub(batch.len());
            split = split.saturating_sub(batch.len());
            let n = batch.len() as u64;
            let error = match inserter.insert(&batch) {
                Ok(()) => {
                    limit = limit.saturating_mul(2).min(max_insert_rows);
                    self.finish();
                    for row in batch.iter().filter(|r| r.tracked) {
                        self.book.left_queue(&row.record.source, Left::Delivered);
                    }
                    self.counters.inserted_total.fetch_add(n, Ordering::Relaxed);
                    self.counters.batches_total.fetch_add(1, Ordering::Relaxed);
                    self.set_error(None);
                    self.refusals_in_a_row.store(0, Ordering::Relaxed);
                    self.hold.release();
                    delay = RETRY_INITIAL;
                    events::db_sink_inserted(&self.sink, n);
                    continue;
                }
                Err(InsertError::Permanent(msg)) if batch.len() > batch_rows => {
                    // A catch-up insert: which rows are bad is not known, so it goes again in
                    // batches of `batch_rows`, and only those refused again go row by row.
                    log::warn!(
                        "database refused a catch-up insert, sending it again in smaller batches: sink={} rows={n} batch_rows={} error=\"{}\"",
                        self.sink,
                        batch_rows,
                        Failure::from_detail(truncate(&msg)).class
                    );
                    split = batch.len();
                    self.put_back(batch);
                    continue;
                }
                Err(InsertError::Permanent(msg)) if batch.len() > 1 => {
                    log::warn!(
                        "database refused a batch, sending it again one row at a time: sink={} rows={n} error=\"{}\"",
                        self.sink,
                        Failure::from_detail(truncate(&msg)).class
                    );
                    singles = batch.len();
                    self.put_back(batch);
                    continue;
                }
                Err(InsertError::Permanent(msg)) => {
                    let in_a_row = self.refusals_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
                    if in_a_row < HOLD_AFTER_REFUSALS {
                        let msg = truncate(&msg);
                        self.set_error(Some(msg.clone()));
                        events::db_sink_rejected(&self.sink, n, &msg);
                        self.park(engine, batch, &msg);
                        self.finish();
                        continue;
                    }
                    // Every one of the last rows refused: the table, not the data.
                    (
                        msg,
                        "the database refused every one of the last rows: rows kept, not dead-lettered",
                    )
                }
                Err(InsertError::Destination(msg)) => (
                    msg,
                    "the database refuses the destination (table, column, database, privilege or credentials): rows kept, not dead-lettered",
                ),
                Err(InsertError::Transient(msg)) => (msg, ""),
            };
            // Retried after the back-off, rows kept at the head in order.
            let (msg, held) = error;
            let msg = truncate(&msg);
            self.counters.failures_total.fetch_add(1, Ordering::Relaxed);
            self.set_error(Some(msg.clone()));
            events::db_sink_retry(&self.sink, n, &msg, delay);
            if !held.is_empty() && self.hold.hold() {
                events::delivery_held(&self.sink, &Failure::from_detail(msg.clone()).class, held);
            }
            limit = (batch.len() / 2).max(batch_rows);
            if single {
                singles += batch.len();
            } else if piece {
                split += batch.len();
            }
            self.put_back(batch);
            if self.lock().closing {
                // A clean stop with the database unreachable: give up now.
                break;
            }
            if self.backoff(delay) {
                // Closing: one more try of what is left, then give up.
                continue;
            }
            delay = (delay * 2).min(RETRY_MAX);
        }
        let mut s = self.lock();
        if s.releasing {
            // Released: the rows wait for the sink's next instance, or a discard.
            s.in_flight = 0;
            return;
        }
        let lost = s.waiting.len() as u64;
        for slot in s.waiting.iter().filter(|slot| slot.row.tracked) {
            self.book
                .left_queue(&slot.row.record.source, Left::Lost(Cause::Dropped));
        }
        s.waiting.clear();
        s.in_flight = 0;
        drop(s);
        self.gate.publish(0, 0);
        if lost > 0 {
            events::db_sink_lost_at_stop(&self.sink, &self.counters.lost_at_stop_total, lost);
        }
    }

    /// Parks every row of a refused batch in the pipeline dead-letter queue. Blocking.
    fn park(&self, engine: &Engine, batch: Vec<Row<T>>, msg: &str) {
        let reason = format!("{} refused the batch: {msg}", self.sink);
        for row in batch {
            let (flow, node) = origin(engine, &row.record.source, &self.sink);
            let (source, tracked) = (row.record.source.clone(), row.tracked);
            let entry = NewDeadLetter {
                record: row.record,
                flow: flow.clone(),
                node: node.clone(),
                reason: reason.clone(),
                accepted: false,
            };
            match engine.dead_letters().park(entry) {
                Ok(id) => {
                    if tracked {
                        self.book.left_queue(&source, Left::DeadLettered);
                    }
                    crate::ledger::book_trimmed_dead_letters(engine);
                    self.counters
                        .dead_lettered_total
                        .fetch_add(1, Ordering::Relaxed);
                    engine.stats.dead_lettered.fetch_add(1, Ordering::Relaxed);
                    log::error!(
                        "record parked in the dead-letter queue: flow={flow} node={node} dead_letter_id={id} reason=\"{reason}\""
                    );
                }
                Err(e) => {
                    if tracked {
                        self.book.left_queue(&source, Left::Lost(Cause::Dropped));
                    }
                    // Nowhere left to keep it: count it as lost at the bound, loudly.
                    log::error!(
                        "dead-letter queue write failed, record lost: sink={} flow={flow} error=\"{e}\"",
                        self.sink
                    );
                    self.counters.dropped_total.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// The flow and node a record reached this sink by: the first flow taking `source` that has
/// a sink node for `sink` (a replay runs that flow again from its source node).
fn origin(engine: &Engine, source: &str, sink: &str) -> (String, String) {
    let plan = engine.plan();
    let entries = plan.entries(source);
    for entry in entries {
        // Node indexes are dense: the first index without an id ends the flow.
        for node in 0.. {
            let r = NodeRef {
                flow: entry.flow,
                node,
            };
            if plan.node_id(r).is_empty() {
                break;
            }
            if matches!(plan.kind(r), NodeKind::Sink { sink: s } if s == sink) {
                return (plan.flow_id(r).to_string(), plan.node_id(r).to_string());
            }
        }
    }
    let flow = entries.first().map_or("", |r| plan.flow_id(*r));
    (flow.to_string(), sink.to_string())
}

fn truncate(s: &str) -> String {
    let s = s.trim();
    if s.len() <= MAX_REASON {
        return s.to_string();
    }
    let mut end = MAX_REASON;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}
