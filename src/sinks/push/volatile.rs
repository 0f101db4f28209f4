//! The volatile push buffer, used when `connector.push_queue` is not enabled: 16 MiB of memory,
//! oldest evicted at the quota (counted, logged), everything lost on restart: at a clean stop
//! ([`VolatileBuffer::close`]) the rows left are counted in `lost_at_stop_total`, booked
//! `dropped` in the ledger and logged. The daemon warns at startup; enable `push_queue` for
//! anything that matters.
//!
//! Rows are kept encoded as in the durable queue (header with the source, then the line), so
//! its part of the loss ledger is counted the same way, in memory. Its dead letters have the
//! durable queue's verbs with the same rules (see [`crate::store::queue`], "Dead letters"):
//! a replay puts the row back under its original seq (rows stay in seq order) and is refused
//! when the buffer has no room for it; a delete leaves it counted dead-lettered.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::admission::{Gate, OnFull};
use crate::ledger::{Book, Cause, Left};
use crate::store::queue::{
    dead_letter_json, decode_row, encode_row, revive, row_bytes, ReplayError, ReplaySummary,
};
use crate::store::{DeadLetter, QueueCounters, Row, StoreError};
use crate::telemetry::events;

/// Quota of the volatile buffer in logical bytes.
pub const VOLATILE_QUOTA: u64 = 16 << 20;
/// Dead letters kept in memory; older ones are trimmed.
pub const DEAD_CAP: usize = 1000;

/// What a volatile buffer holds: its rows and dead letters, handed from one instance of its
/// sink to the next by a reload ([`VolatileBuffer::take`], [`VolatileBuffer::adopt`]).
#[derive(Default)]
pub struct Inner {
    /// In seq order (a replayed row goes back to its place).
    rows: VecDeque<Row>,
    dead: VecDeque<DeadLetter>,
    next_seq: u64,
    next_dead: u64,
    used: u64,
    /// Bumped for every row put in (appended or replayed): the deliverer waits on it.
    appended: u64,
    /// Closed at the stop: its rows were counted lost, and it takes none any more.
    closed: bool,
    /// Handed over by a reload: the former instance's counters and rows ever appended, which
    /// the next one goes on from.
    former: Option<(Arc<QueueCounters>, u64)>,
}

impl Inner {
    /// The rows held.
    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    /// True when it holds neither rows nor dead letters.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.dead.is_empty()
    }
}

/// The memory-only push buffer.
pub struct VolatileBuffer {
    /// The push sink it belongs to, for logs.
    sink: String,
    gate: Arc<Gate>,
    counters: Arc<QueueCounters>,
    inner: Mutex<Inner>,
    appended: Condvar,
    /// Its part of the loss ledger (lost with the rows on restart).
    book: Book,
    /// Rows ever appended.
    appended_total: std::sync::atomic::AtomicU64,
}

/// The logical bytes and the tracked source of an encoded row.
fn size_and_source(value: &[u8]) -> (u64, Option<&str>) {
    match decode_row(value) {
        (Some((source, true)), line) => (row_bytes(line.len()), Some(source)),
        (_, line) => (row_bytes(line.len()), None),
    }
}

impl VolatileBuffer {
    /// An empty buffer of push sink `sink`.
    pub fn new(sink: &str, counters: Arc<QueueCounters>) -> Self {
        Self {
            sink: sink.to_string(),
            gate: Arc::new(Gate::new(OnFull::EvictOldest, VOLATILE_QUOTA, 0, 0, 0)),
            counters,
            inner: Mutex::new(Inner::default()),
            appended: Condvar::new(),
            book: Book::default(),
            appended_total: Default::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The buffer's state is plain data, consistent after every statement.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The admission gate (never refuses: evict_oldest).
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// Its part of the loss ledger.
    pub fn ledger(&self) -> &Book {
        &self.book
    }

    /// Rows ever appended.
    pub fn appended_total(&self) -> u64 {
        self.appended_total.load(Ordering::Relaxed)
    }

    /// Appends a row (from [`record_row`](crate::store::queue::record_row) or [`encode_row`]),
    /// evicting the oldest rows to stay within the quota; [`StoreError::Closed`] after
    /// [`close`](Self::close).
    pub fn append(&self, line: Vec<u8>) -> Result<u64, StoreError> {
        let (size, _) = size_and_source(&line);
        let mut inner = self.lock();
        if inner.closed {
            return Err(StoreError::Closed);
        }
        let (mut rows, mut bytes) = (0, 0);
        while inner.used + size > VOLATILE_QUOTA {
            let Some(old) = inner.rows.pop_front() else {
                break;
            };
            let (b, source) = size_and_source(&old.line);
            if let Some(source) = source {
                self.book.left_queue(source, Left::Lost(Cause::Evicted));
            }
            inner.used -= b;
            rows += 1;
            bytes += b;
        }
        let seq = inner.next_seq;
        inner.next_seq += 1;
        inner.used += size;
        if let (_, Some(source)) = size_and_source(&line) {
            self.book.queued(source);
        }
        inner.rows.push_back(Row { seq, line });
        inner.appended += 1;
        self.appended_total.fetch_add(1, Ordering::Relaxed);
        self.gate.publish(inner.used, inner.rows.len() as u64);
        drop(inner);
        self.appended.notify_all();
        if rows > 0 {
            events::volatile_buffer_evicted(&self.counters, rows, bytes);
        }
        Ok(seq)
    }

    /// True once [`close`](Self::close) ran.
    pub fn closed(&self) -> bool {
        self.lock().closed
    }

    /// Gives up every row it holds, each counted `discarded` in its source's ledger (the sink
    /// was removed with `discard`); the rows given up. Call it after its uplink stopped.
    pub fn discard(&self) -> u64 {
        let mut inner = self.lock();
        let rows = std::mem::take(&mut inner.rows);
        inner.used = 0;
        for row in &rows {
            if let (_, Some(source)) = size_and_source(&row.line) {
                self.book.left_queue(source, Left::Lost(Cause::Discarded));
            }
        }
        self.gate.publish(0, 0);
        drop(inner);
        let n = rows.len() as u64;
        if n > 0 {
            events::queue_discarded(&self.sink, n);
        }
        n
    }

    /// Takes its rows and dead letters, with its part of the ledger (which counts them): what
    /// the sink's new instance goes on with ([`Self::adopt`]). After its uplink stopped; the
    /// buffer is closed then, empty.
    pub fn take(
        &self,
    ) -> (
        Inner,
        std::collections::BTreeMap<String, crate::ledger::Counts>,
    ) {
        let mut inner = self.lock();
        let mut held = std::mem::take(&mut *inner);
        held.former = Some((Arc::clone(&self.counters), self.appended_total()));
        inner.closed = true;
        self.gate.publish(0, 0);
        drop(inner);
        (held, self.book.snapshot())
    }

    /// Goes on from a former instance's buffer (see [`Self::take`]), before the uplink starts:
    /// its rows, dead letters, part of the ledger and counters.
    pub fn adopt(
        &self,
        mut held: Inner,
        part: std::collections::BTreeMap<String, crate::ledger::Counts>,
    ) {
        self.book.store(part);
        let rows = held.rows.len() as u64;
        match held.former.take() {
            Some((counters, appended)) => {
                self.counters.add_totals(&counters);
                self.appended_total.fetch_add(appended, Ordering::Relaxed);
            }
            None => {
                self.appended_total.fetch_add(rows, Ordering::Relaxed);
            }
        }
        let mut inner = self.lock();
        *inner = held;
        inner.closed = false;
        self.counters
            .dead_rows
            .store(inner.dead.len() as u64, Ordering::Relaxed);
        self.gate.publish(inner.used, rows);
        drop(inner);
        self.appended.notify_all();
    }

    /// At a clean stop, once its uplink has stopped: the rows left can never be delivered
    /// (memory only). Each is lost: counted in `lost_at_stop_total`, booked `dropped` in its
    /// source's ledger, and logged; the buffer takes no more rows or replays. Idempotent.
    pub fn close(&self) {
        let mut inner = self.lock();
        if inner.closed {
            return;
        }
        inner.closed = true;
        let rows = std::mem::take(&mut inner.rows);
        let bytes = std::mem::take(&mut inner.used);
        for row in &rows {
            if let (_, Some(source)) = size_and_source(&row.line) {
                self.book.left_queue(source, Left::Lost(Cause::Dropped));
            }
        }
        self.gate.publish(0, 0);
        drop(inner);
        if !rows.is_empty() {
            events::volatile_buffer_lost_at_stop(
                &self.sink,
                &self.counters,
                rows.len() as u64,
                bytes,
            );
        }
    }

    /// Dead letter `id`, when it is kept.
    pub fn get_dead_letter(&self, id: u64) -> Option<DeadLetter> {
        self.lock().dead.iter().find(|d| d.id == id).cloned()
    }

    /// Puts dead letter `id` back under its original seq; that seq.
    pub fn replay_dead_letter(&self, id: u64) -> Result<u64, ReplayError> {
        let mut inner = self.lock();
        let result = self.replay_locked(&mut inner, id);
        self.after_replays(inner, usize::from(result.is_ok()));
        if let Ok(seq) = result {
            events::queue_dead_letters_replayed(&self.sink, &[(id, seq)]);
        }
        result
    }

    /// Puts back up to `max` dead letters (the oldest kept) in seq order; stops at the first
    /// that does not fit.
    pub fn replay_dead_letters(&self, max: usize) -> ReplaySummary {
        let mut inner = self.lock();
        let mut plan: Vec<(u64, u64)> = inner
            .dead
            .iter()
            .take(max)
            .map(|d| (revive(&d.json).map_or(u64::MAX, |r| r.seq), d.id))
            .collect();
        plan.sort_unstable();
        let mut summary = ReplaySummary::default();
        for (_, id) in plan {
            match self.replay_locked(&mut inner, id) {
                Ok(seq) => summary.replayed.push((id, seq)),
                Err(e @ ReplayError::Full { .. }) => {
                    summary.stopped = Some(e);
                    break;
                }
                Err(e) => summary.failed.push((id, e)),
            }
        }
        summary.left = inner.dead.len() as u64;
        self.after_replays(inner, summary.replayed.len());
        events::queue_dead_letters_replayed(&self.sink, &summary.replayed);
        summary
    }

    /// Deletes dead letter `id`; false when there was none. It stays counted dead-lettered.
    pub fn delete_dead_letter(&self, id: u64) -> bool {
        let mut inner = self.lock();
        let Some(pos) = inner.dead.iter().position(|d| d.id == id) else {
            return false;
        };
        inner.dead.remove(pos);
        self.counters
            .dead_rows
            .store(inner.dead.len() as u64, Ordering::Relaxed);
        self.counters
            .dead_deleted_total
            .fetch_add(1, Ordering::Relaxed);
        drop(inner);
        events::queue_dead_letter_deleted(&self.sink, id);
        true
    }

    /// One replay, under the lock.
    fn replay_locked(&self, inner: &mut Inner, id: u64) -> Result<u64, ReplayError> {
        if inner.closed {
            return Err(ReplayError::Store(StoreError::Closed));
        }
        let pos = inner
            .dead
            .iter()
            .position(|d| d.id == id)
            .ok_or(ReplayError::NotFound)?;
        let revived = revive(&inner.dead[pos].json).map_err(ReplayError::Damaged)?;
        let seq = revived.seq;
        let at = inner.rows.partition_point(|r| r.seq < seq);
        if seq >= inner.next_seq || inner.rows.get(at).is_some_and(|r| r.seq == seq) {
            return Err(ReplayError::SeqTaken(seq));
        }
        let size = row_bytes(revived.line.len());
        let fits = if size > VOLATILE_QUOTA {
            inner.rows.is_empty()
        } else {
            inner.used + size <= VOLATILE_QUOTA
        };
        if !fits {
            return Err(ReplayError::Full {
                bytes: size,
                used: inner.used,
                quota: VOLATILE_QUOTA,
            });
        }
        let mut tag = revived.tag;
        if tag.tracked {
            // Tracked only while its source has a dead letter counted that can move back.
            let mut moved = false;
            self.book.update(&tag.source, |c| {
                if c.dead_lettered > 0 {
                    c.dead_lettered -= 1;
                    c.pending += 1;
                    moved = true;
                }
            });
            tag.tracked = moved;
        }
        inner.dead.remove(pos);
        inner.rows.insert(
            at,
            Row {
                seq,
                line: encode_row(&tag, &revived.line),
            },
        );
        inner.used += size;
        inner.appended += 1;
        self.counters
            .dead_replayed_total
            .fetch_add(1, Ordering::Relaxed);
        Ok(seq)
    }

    /// Publishes the buffer after `replayed` replays and wakes the deliverer.
    fn after_replays(&self, inner: MutexGuard<'_, Inner>, replayed: usize) {
        self.counters
            .dead_rows
            .store(inner.dead.len() as u64, Ordering::Relaxed);
        self.gate.publish(inner.used, inner.rows.len() as u64);
        drop(inner);
        if replayed > 0 {
            self.appended.notify_all();
        }
    }

    /// Dead letters kept in memory.
    pub fn dead_letters(&self, after: Option<u64>, max: usize) -> Vec<DeadLetter> {
        let inner = self.lock();
        inner
            .dead
            .iter()
            .filter(|d| after.is_none_or(|a| d.id > a))
            .take(max)
            .cloned()
            .collect()
    }
}

impl crate::sinks::queue::Drain for VolatileBuffer {
    fn peek(&self, max: usize) -> Result<Vec<Row>, StoreError> {
        Ok(self
            .lock()
            .rows
            .iter()
            .take(max)
            .map(|r| Row {
                seq: r.seq,
                line: decode_row(&r.line).1.to_vec(),
            })
            .collect())
    }

    fn remove_delivered(&self, seqs: &[u64]) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        let mut n = 0;
        // From the newest: a batch's rows sit at the head, so each removal moves few rows.
        for &seq in seqs.iter().rev() {
            let at = inner.rows.partition_point(|r| r.seq < seq);
            if inner.rows.get(at).is_none_or(|r| r.seq != seq) {
                continue;
            }
            let Some(r) = inner.rows.remove(at) else {
                continue;
            };
            let (b, source) = size_and_source(&r.line);
            if let Some(source) = source {
                self.book.left_queue(source, Left::Delivered);
            }
            inner.used -= b;
            n += 1;
        }
        self.gate.publish(inner.used, inner.rows.len() as u64);
        self.counters.sent_total.fetch_add(n, Ordering::Relaxed);
        Ok(n)
    }

    fn replayed_total(&self) -> u64 {
        self.counters.dead_replayed_total.load(Ordering::Relaxed)
    }

    fn dead_letter(&self, seq: u64, reason: &str) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let Some(pos) = inner.rows.iter().position(|r| r.seq == seq) else {
            return Ok(false);
        };
        let Some(row) = inner.rows.remove(pos) else {
            return Ok(false);
        };
        let (b, source) = size_and_source(&row.line);
        if let Some(source) = source {
            self.book.left_queue(source, Left::DeadLettered);
        }
        inner.used -= b;
        let id = inner.next_dead;
        inner.next_dead += 1;
        let (tag, line) = decode_row(&row.line);
        let json = dead_letter_json(seq, reason, crate::record::now_ms(), tag, line);
        inner.dead.push_back(DeadLetter {
            id,
            json: json.into_bytes(),
        });
        if inner.dead.len() > DEAD_CAP {
            inner.dead.pop_front();
            let t = self
                .counters
                .dead_trimmed_total
                .fetch_add(1, Ordering::Relaxed)
                + 1;
            log::warn!("volatile push dead letters trimmed at the cap: dead_trimmed_total={t}");
        }
        self.counters
            .dead_rows
            .store(inner.dead.len() as u64, Ordering::Relaxed);
        self.counters
            .dead_lettered_total
            .fetch_add(1, Ordering::Relaxed);
        self.gate.publish(inner.used, inner.rows.len() as u64);
        Ok(true)
    }

    fn wait_appended(&self, seen: u64, timeout: Duration) -> u64 {
        let inner = self.lock();
        let (inner, _) = self
            .appended
            .wait_timeout_while(inner, timeout, |i| i.appended == seen)
            .unwrap_or_else(|e| e.into_inner());
        inner.appended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::queue::Drain;
    use crate::store::queue::Tag;

    /// An empty buffer of the sink `push`, with its counters.
    fn buffer() -> (Arc<QueueCounters>, VolatileBuffer) {
        let counters = Arc::new(QueueCounters::default());
        let buf = VolatileBuffer::new("push", Arc::clone(&counters));
        (counters, buf)
    }

    /// The tag of a tracked row of source `ingest/a`.
    fn tracked() -> Tag {
        Tag {
            source: "ingest/a".into(),
            tracked: true,
        }
    }

    /// What the deliverer does once the receiver confirmed `batch`.
    fn confirm(buf: &VolatileBuffer, batch: &[Row]) -> u64 {
        let seqs: Vec<u64> = batch.iter().map(|r| r.seq).collect();
        buf.remove_delivered(&seqs).unwrap()
    }

    #[test]
    fn a_dead_letter_replayed_inside_the_seqs_of_a_batch_in_flight_is_kept_when_the_batch_is_confirmed(
    ) {
        let (counters, buf) = buffer();
        let tag = tracked();
        for i in 0..6 {
            buf.append(encode_row(&tag, format!("{{\"i\":{i}}}").as_bytes()))
                .unwrap();
        }
        // Seqs 0 and 2 are dead letters 0 and 1; seq 0 is replayed to the head.
        assert!(buf.dead_letter(0, "HTTP 400: no").unwrap());
        assert!(buf.dead_letter(2, "HTTP 400: no").unwrap());
        assert_eq!(buf.replay_dead_letter(0), Ok(0));
        // The uplink sends 0, 1, 3, 4, 5; seq 2 is replayed while they are on their way.
        let batch = buf.peek(10).unwrap();
        let seqs = |rows: &[Row]| rows.iter().map(|r| r.seq).collect::<Vec<_>>();
        assert_eq!(seqs(&batch), vec![0, 1, 3, 4, 5]);
        assert_eq!(buf.replay_dead_letter(1), Ok(2));
        assert_eq!(confirm(&buf, &batch), 5);
        assert_eq!(
            seqs(&buf.peek(10).unwrap()),
            vec![2],
            "the row the batch never carried is still queued"
        );
        let c = buf.ledger().snapshot()["ingest/a"];
        assert_eq!((c.delivered, c.pending, c.imbalance()), (5, 1, 0));
        assert_eq!(counters.sent_total.load(Ordering::Relaxed), 5);
        assert_eq!(buf.gate().usage().1, 1);
    }

    #[test]
    fn a_buffer_handed_over_goes_on_with_its_rows_dead_letters_and_counters() {
        let (_, old) = buffer();
        let tag = tracked();
        for i in 0..4 {
            old.append(encode_row(&tag, format!("{{\"i\":{i}}}").as_bytes()))
                .unwrap();
        }
        assert_eq!(confirm(&old, &old.peek(1).unwrap()), 1);
        assert!(old.dead_letter(1, "HTTP 400: no").unwrap());
        let (held, part) = old.take();
        let (fresh, new) = buffer();
        new.adopt(held, part);
        let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        assert_eq!(
            (
                l(&fresh.sent_total),
                l(&fresh.dead_lettered_total),
                l(&fresh.dead_rows)
            ),
            (1, 1, 1)
        );
        assert_eq!(
            new.appended_total(),
            4,
            "rows ever appended, not only the ones held"
        );
        new.append(encode_row(&tag, b"{\"i\":4}")).unwrap();
        assert_eq!(confirm(&new, &new.peek(10).unwrap()), 3);
        assert_eq!((new.appended_total(), l(&fresh.sent_total)), (5, 4));
        let c = new.ledger().snapshot()["ingest/a"];
        assert_eq!((c.delivered, c.pending, c.imbalance()), (4, 0, 0));
    }

    #[test]
    fn volatile_buffer_evicts_oldest_at_sixteen_mib_and_counts_it() {
        let (counters, buf) = buffer();
        let line = vec![b'x'; 1 << 20];
        let tag = tracked();
        for _ in 0..20 {
            buf.append(encode_row(&tag, &line)).unwrap();
        }
        let (used, rows, _) = buf.gate().usage();
        assert!(used <= VOLATILE_QUOTA);
        assert_eq!(rows, 15);
        assert_eq!(counters.evicted_total.load(Ordering::Relaxed), 5);
        assert_eq!(buf.peek(1).unwrap()[0].seq, 5);
        assert_eq!(buf.remove_delivered(&[5, 6]).unwrap(), 2);
        let c = buf.ledger().snapshot()["ingest/a"];
        assert_eq!((c.acked, c.evicted, c.delivered, c.pending), (20, 5, 2, 13));
        assert_eq!(c.imbalance(), 0);
    }

    #[test]
    fn volatile_dead_letters_are_replayed_to_the_head_in_seq_order_or_deleted_and_the_ledger_balances(
    ) {
        let (counters, buf) = buffer();
        let tag = tracked();
        for i in 0..5 {
            buf.append(encode_row(&tag, format!("{{\"i\":{i}}}").as_bytes()))
                .unwrap();
        }
        let usage = buf.gate().usage();
        // Ids 0, 1, 2 are seqs 2, 0, 3.
        for seq in [2, 0, 3] {
            assert!(buf.dead_letter(seq, "HTTP 400: no").unwrap());
        }
        let d = buf.get_dead_letter(1).expect("dead letter 1");
        let v: serde_json::Value = serde_json::from_slice(&d.json).unwrap();
        assert_eq!(
            (v["seq"].as_u64(), v["record"]["i"].as_u64()),
            (Some(0), Some(0))
        );
        assert_eq!(v["source"], "ingest/a");

        assert_eq!(buf.replay_dead_letter(1), Ok(0));
        assert_eq!(
            buf.peek(1).unwrap()[0].line,
            br#"{"i":0}"#,
            "back at the head"
        );
        assert_eq!(buf.replay_dead_letter(1), Err(ReplayError::NotFound));
        assert!(buf.delete_dead_letter(2));
        assert!(!buf.delete_dead_letter(2));
        let summary = buf.replay_dead_letters(10);
        assert_eq!(summary.replayed, vec![(0, 2)]);
        assert_eq!(summary.left, 0);
        let seqs: Vec<u64> = buf.peek(10).unwrap().iter().map(|r| r.seq).collect();
        assert_eq!(
            seqs,
            vec![0, 1, 2, 4],
            "in seq order; the deleted one is gone"
        );
        let (used, rows, _) = buf.gate().usage();
        assert_eq!(rows, 4);
        assert!(used < usage.0);
        let c = buf.ledger().snapshot()["ingest/a"];
        assert_eq!((c.pending, c.dead_lettered, c.imbalance()), (4, 1, 0));
        assert_eq!(counters.dead_rows.load(Ordering::Relaxed), 0);
        assert_eq!(counters.dead_replayed_total.load(Ordering::Relaxed), 2);
        assert_eq!(counters.dead_deleted_total.load(Ordering::Relaxed), 1);
        // A batch confirmed after a replay keeps the replayed row it never carried.
        assert!(buf.dead_letter(0, "HTTP 400: no").unwrap());
        assert_eq!(buf.replay_dead_letter(3), Ok(0));
        assert_eq!(buf.remove_delivered(&[1, 2, 4]).unwrap(), 3);
        assert_eq!(buf.peek(10).unwrap()[0].seq, 0);
        let c = buf.ledger().snapshot()["ingest/a"];
        assert_eq!((c.delivered, c.pending, c.imbalance()), (3, 1, 0));
    }
}
