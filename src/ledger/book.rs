//! Per-source counts and the book that holds them.
//!
//! The ledger is double-entry: every time a record is counted as acked, it is counted in
//! exactly one outcome in the same step (delivered, pending, dead-lettered or one loss cause),
//! and later steps only move it between outcomes (pending → delivered, evicted, ...). So
//! `acked = delivered + pending + dead_lettered + losses` holds for every part of the ledger,
//! and for their sum, at every moment a part is read consistently.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

/// Most sources one book tracks; beyond it, records are counted under [`OTHER_SOURCES`]. Source
/// names come from the config, so the cap is only a guard.
pub const MAX_SOURCES: usize = 10_000;
/// Where a book counts sources beyond [`MAX_SOURCES`].
pub const OTHER_SOURCES: &str = "(other)";

/// Why an acked record will never reach a sink: the causes of the spec's audit table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Deleted at a queue's quota under `evict_oldest`.
    Evicted,
    /// A polled sample dropped after the poller's hold.
    BackpressureLost,
    /// Dropped at a bounded buffer (an MQTT subscription buffer, MQTT after a refusal, a
    /// database backlog left at a stop, a dead letter that could not be written).
    Dropped,
    /// Let through no further by design (filter, NATS `latest` mode).
    Suppressed,
    /// No flow takes its source, by design.
    Unrouted,
    /// A sink failed after the source was told it was accepted, with no retrier left.
    Failed,
    /// Handed to a destination that confirms nothing (MQTT QoS 0): it may have arrived.
    Unconfirmed,
    /// An open entry of the pipeline dead-letter queue deleted at its cap
    /// (`dead_letters.max_rows`) before anyone replayed or resolved it.
    Trimmed,
    /// Held by a sink a reload removed with `discard`: the operator gave them up.
    Discarded,
}

/// The counts of one source in one part of the ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Offers made to the engine (retries and replays included).
    pub received: u64,
    /// Records the source was released from: told they are stored, or given up after a refusal
    /// by a source that cannot keep them (then also a loss).
    pub acked: u64,
    /// Offers answered "retry" (the source keeps the record).
    pub refused: u64,
    /// Reached their sink.
    pub delivered: u64,
    /// Still in a queue on their way to a sink.
    pub pending: u64,
    /// In a dead-letter queue (pipeline or push).
    pub dead_lettered: u64,
    /// Lost: evicted at a quota.
    pub evicted: u64,
    /// Lost: dropped after the pollers' hold.
    pub backpressure_lost: u64,
    /// Lost: dropped at a bounded buffer.
    pub dropped: u64,
    /// Not forwarded by design (filters, deadbands).
    pub suppressed: u64,
    /// Not routed by design.
    pub unrouted: u64,
    /// Lost after a sink failure with no retrier left.
    pub failed: u64,
    /// Published with nothing to confirm it (MQTT QoS 0): may have been lost.
    pub unconfirmed: u64,
    /// Lost: an open dead letter trimmed at the dead-letter queue's cap.
    pub trimmed: u64,
    /// Lost: held by a sink a reload removed with `discard`.
    pub discarded: u64,
}

impl Counts {
    /// The sum of the loss causes.
    pub fn losses(&self) -> u64 {
        self.evicted
            + self.backpressure_lost
            + self.dropped
            + self.suppressed
            + self.unrouted
            + self.failed
            + self.unconfirmed
            + self.trimmed
            + self.discarded
    }

    /// `acked - (delivered + pending + dead_lettered + losses)`: zero when the part balances.
    pub fn imbalance(&self) -> i64 {
        self.acked as i64
            - (self.delivered + self.pending + self.dead_lettered + self.losses()) as i64
    }

    /// The counter of a loss cause.
    pub fn loss_mut(&mut self, cause: Cause) -> &mut u64 {
        match cause {
            Cause::Evicted => &mut self.evicted,
            Cause::BackpressureLost => &mut self.backpressure_lost,
            Cause::Dropped => &mut self.dropped,
            Cause::Suppressed => &mut self.suppressed,
            Cause::Unrouted => &mut self.unrouted,
            Cause::Failed => &mut self.failed,
            Cause::Unconfirmed => &mut self.unconfirmed,
            Cause::Trimmed => &mut self.trimmed,
            Cause::Discarded => &mut self.discarded,
        }
    }

    /// Adds `other` to these counts.
    pub fn add(&mut self, o: &Counts) {
        self.received += o.received;
        self.acked += o.acked;
        self.refused += o.refused;
        self.delivered += o.delivered;
        self.pending += o.pending;
        self.dead_lettered += o.dead_lettered;
        self.evicted += o.evicted;
        self.backpressure_lost += o.backpressure_lost;
        self.dropped += o.dropped;
        self.suppressed += o.suppressed;
        self.unrouted += o.unrouted;
        self.failed += o.failed;
        self.unconfirmed += o.unconfirmed;
        self.trimmed += o.trimmed;
        self.discarded += o.discarded;
    }
}

/// Counts by source, in memory, behind one lock (each update is a few additions).
#[derive(Debug, Default)]
pub struct Book {
    map: Mutex<BTreeMap<String, Counts>>,
}

impl Book {
    /// Applies `change` to the counts of `source`.
    pub fn update(&self, source: &str, change: impl FnOnce(&mut Counts)) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let key = if map.len() >= MAX_SOURCES && !map.contains_key(source) {
            OTHER_SOURCES
        } else {
            source
        };
        match map.get_mut(key) {
            Some(c) => change(c),
            None => {
                let mut c = Counts::default();
                change(&mut c);
                map.insert(key.to_string(), c);
            }
        }
    }

    /// One offer made.
    pub fn received(&self, source: &str) {
        self.update(source, |c| c.received += 1);
    }

    /// One offer answered "retry".
    pub fn refused(&self, source: &str) {
        self.update(source, |c| c.refused += 1);
    }

    /// Acked and delivered at once (a sink that confirms before the answer).
    pub fn delivered(&self, source: &str) {
        self.update(source, |c| {
            c.acked += 1;
            c.delivered += 1;
        });
    }

    /// Acked into a queue: pending until it leaves it.
    pub fn queued(&self, source: &str) {
        self.update(source, |c| {
            c.acked += 1;
            c.pending += 1;
        });
    }

    /// Acked and parked in a dead-letter queue.
    pub fn dead_lettered(&self, source: &str) {
        self.update(source, |c| {
            c.acked += 1;
            c.dead_lettered += 1;
        });
    }

    /// Acked (released by its source) and lost for `cause`.
    pub fn lost(&self, source: &str, cause: Cause) {
        self.update(source, |c| {
            c.acked += 1;
            *c.loss_mut(cause) += 1;
        });
    }

    /// A pending record left its queue, to `to`.
    pub fn left_queue(&self, source: &str, to: Left) {
        self.update(source, |c| {
            c.pending = c.pending.saturating_sub(1);
            match to {
                Left::Delivered => c.delivered += 1,
                Left::DeadLettered => c.dead_lettered += 1,
                Left::Lost(cause) => *c.loss_mut(cause) += 1,
            }
        });
    }

    /// A dead letter of `source` counted here was trimmed at its queue's cap while open: it
    /// moves from `dead_lettered` to the loss [`Cause::Trimmed`]. False (nothing changed) when
    /// this part holds no dead letter of `source`: another part, or a former run, parked it.
    pub fn dead_letter_trimmed(&self, source: &str) -> bool {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        match map.get_mut(source) {
            Some(c) if c.dead_lettered > 0 => {
                c.dead_lettered -= 1;
                c.trimmed += 1;
                true
            }
            _ => false,
        }
    }

    /// A copy of every source's counts.
    pub fn snapshot(&self) -> BTreeMap<String, Counts> {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the counts of the sources in `map` (a durable part after its commit).
    pub fn store(&self, changed: impl IntoIterator<Item = (String, Counts)>) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        for (k, v) in changed {
            map.insert(k, v);
        }
    }
}

/// Where a pending record went when it left its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    /// To its sink.
    Delivered,
    /// To a dead-letter queue.
    DeadLettered,
    /// Lost.
    Lost(Cause),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_keeps_the_book_balanced() {
        let b = Book::default();
        b.received("ingest/a");
        b.queued("ingest/a");
        b.queued("ingest/a");
        b.queued("ingest/a");
        b.left_queue("ingest/a", Left::Delivered);
        b.left_queue("ingest/a", Left::Lost(Cause::Evicted));
        b.dead_lettered("webhook/b");
        b.lost("modbus/c", Cause::BackpressureLost);
        b.refused("webhook/b");
        for (source, c) in b.snapshot() {
            assert_eq!(c.imbalance(), 0, "{source}: {c:?}");
        }
        let a = b.snapshot()["ingest/a"];
        assert_eq!((a.acked, a.delivered, a.pending, a.evicted), (3, 1, 1, 1));
    }

    #[test]
    fn a_trimmed_dead_letter_moves_to_its_loss_only_in_the_part_that_holds_it() {
        let b = Book::default();
        b.dead_lettered("webhook/b");
        assert!(
            !b.dead_letter_trimmed("ingest/a"),
            "no dead letter of ingest/a here"
        );
        assert!(b.dead_letter_trimmed("webhook/b"));
        assert!(!b.dead_letter_trimmed("webhook/b"), "only one was parked");
        let snap = b.snapshot();
        assert!(
            !snap.contains_key("ingest/a"),
            "no row made for a source not held"
        );
        let c = snap["webhook/b"];
        assert_eq!((c.acked, c.dead_lettered, c.trimmed), (1, 0, 1));
        assert_eq!(c.imbalance(), 0, "{c:?}");
    }

    #[test]
    fn sources_beyond_the_cap_are_counted_together() {
        let b = Book::default();
        for i in 0..MAX_SOURCES + 5 {
            b.delivered(&format!("s/{i}"));
        }
        let snap = b.snapshot();
        assert_eq!(snap.len(), MAX_SOURCES + 1);
        assert_eq!(snap[OTHER_SOURCES].acked, 5);
    }
}
