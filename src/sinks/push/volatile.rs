//! The volatile push buffer, used when `connector.push_queue` is not enabled: 16 MiB of memory,
//! oldest evicted at the quota (counted, logged), everything lost on restart. The daemon warns at
//! startup; enable `push_queue` for anything that matters.
//!
//! Rows are kept encoded as in the durable queue (header with the source, then the line), so
//! its part of the loss ledger is counted the same way, in memory.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::admission::{Gate, OnFull};
use crate::ledger::{Book, Cause, Left};
use crate::store::queue::{decode_row, encode_row, row_bytes, Tag};
use crate::store::{DeadLetter, QueueCounters, Row, StoreError};
use crate::telemetry::events;

/// Quota of the volatile buffer in logical bytes.
pub const VOLATILE_QUOTA: u64 = 16 << 20;
/// Dead letters kept in memory; older ones are trimmed.
pub const DEAD_CAP: usize = 1000;

#[derive(Default)]
struct Inner {
    rows: VecDeque<Row>,
    dead: VecDeque<DeadLetter>,
    next_seq: u64,
    next_dead: u64,
    used: u64,
    appended: u64,
}

/// The memory-only push buffer.
pub struct VolatileBuffer {
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
    /// An empty buffer.
    pub fn new(counters: Arc<QueueCounters>) -> Self {
        Self {
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

    /// Appends a line, evicting the oldest rows to stay within the quota.
    pub fn append(&self, line: Vec<u8>, tag: &Tag) -> u64 {
        let size = row_bytes(line.len());
        let line = encode_row(tag, &line);
        let mut inner = self.lock();
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
        inner.rows.push_back(Row { seq, line });
        inner.appended += 1;
        self.appended_total.fetch_add(1, Ordering::Relaxed);
        if tag.tracked {
            self.book.queued(&tag.source);
        }
        self.gate.publish(inner.used, inner.rows.len() as u64);
        drop(inner);
        self.appended.notify_all();
        if rows > 0 {
            events::volatile_buffer_evicted(&self.counters, rows, bytes);
        }
        seq
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

    fn remove_through(&self, seq: u64) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        let mut n = 0;
        while inner.rows.front().is_some_and(|r| r.seq <= seq) {
            if let Some(r) = inner.rows.pop_front() {
                let (b, source) = size_and_source(&r.line);
                if let Some(source) = source {
                    self.book.left_queue(source, Left::Delivered);
                }
                inner.used -= b;
                n += 1;
            }
        }
        self.gate.publish(inner.used, inner.rows.len() as u64);
        self.counters.sent_total.fetch_add(n, Ordering::Relaxed);
        Ok(n)
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
        let json = serde_json::json!({
            "seq": seq,
            "reason": reason,
            "at": crate::record::now_ms(),
            "record": serde_json::from_slice::<serde_json::Value>(decode_row(&row.line).1).unwrap_or_default(),
        });
        inner.dead.push_back(DeadLetter {
            id,
            json: json.to_string().into_bytes(),
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

    #[test]
    fn volatile_buffer_evicts_oldest_at_sixteen_mib_and_counts_it() {
        let counters = Arc::new(QueueCounters::default());
        let buf = VolatileBuffer::new(Arc::clone(&counters));
        let line = vec![b'x'; 1 << 20];
        let tag = Tag {
            source: "ingest/a".into(),
            tracked: true,
        };
        for _ in 0..20 {
            buf.append(line.clone(), &tag);
        }
        let (used, rows, _) = buf.gate().usage();
        assert!(used <= VOLATILE_QUOTA);
        assert_eq!(rows, 15);
        assert_eq!(counters.evicted_total.load(Ordering::Relaxed), 5);
        assert_eq!(buf.peek(1).unwrap()[0].seq, 5);
        assert_eq!(buf.remove_through(6).unwrap(), 2);
        let c = buf.ledger().snapshot()["ingest/a"];
        assert_eq!((c.acked, c.evicted, c.delivered, c.pending), (20, 5, 2, 13));
        assert_eq!(c.imbalance(), 0);
    }
}
