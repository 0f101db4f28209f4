//! Per-sink admission gates: the quota, what `on_full` does at it, and byte reservations.
//!
//! Admission happens **before any node runs** (DESIGN.md, "A record's life"). Under
//! `on_full: block` a record's bytes are reserved against the quota here, before the record
//! reaches the writer, so a burst of concurrent callers can never push the committed bytes over
//! the quota: `used + reserved + bytes <= quota` is checked and the reservation taken under one
//! lock. The writer publishes the committed bytes first and drops the reservations after, so
//! for a moment a record counts twice: that errs towards refusing, never towards overshooting.
//!
//! A record larger than the whole quota is admitted only into an empty queue with nothing
//! reserved, so it can never wedge the queue.
//!
//! [`level`] holds the state machines that turn a queue's fill and refusals into its alert
//! level (`ok` / `high` / `full`), read by the queue's own status and advanced by the alert hub.

pub mod level;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How long a refused source is told to wait before it tries again (`Retry-After`).
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// What a bounded queue does at its quota (`on_full`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFull {
    /// Delete the oldest rows to make room; the gap is counted, logged and alerted.
    EvictOldest,
    /// Refuse the new record; nothing is deleted, the source is told to retry.
    Block,
}

impl OnFull {
    /// Parses the config spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "evict_oldest" => Some(Self::EvictOldest),
            "block" => Some(Self::Block),
            _ => None,
        }
    }

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EvictOldest => "evict_oldest",
            Self::Block => "block",
        }
    }
}

/// A refusal at the quota under `block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// When the source should try again.
    pub after: Duration,
}

#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    /// Logical bytes committed to the queue.
    used: u64,
    /// Rows committed to the queue.
    rows: u64,
    /// Bytes admitted but not yet committed (or failed).
    reserved: u64,
}

/// The admission gate of one bounded queue.
#[derive(Debug)]
pub struct Gate {
    on_full: OnFull,
    quota: u64,
    usage: Mutex<Usage>,
    blocked_total: AtomicU64,
    /// Set on a refusal, cleared by the next admission or by rows leaving the queue.
    blocking: AtomicBool,
}

impl Gate {
    /// A gate for a queue of `quota` logical bytes that currently holds `used` bytes in `rows`
    /// rows, with `blocked_total` refusals counted before (restored from disk).
    pub fn new(on_full: OnFull, quota: u64, used: u64, rows: u64, blocked_total: u64) -> Self {
        Self {
            on_full,
            quota,
            usage: Mutex::new(Usage {
                used,
                rows,
                reserved: 0,
            }),
            blocked_total: AtomicU64::new(blocked_total),
            blocking: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Usage> {
        // A poisoned lock only means another thread panicked while holding it; the counters
        // inside are plain numbers that are always consistent, so keep going.
        self.usage.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks to admit a record of `bytes` logical bytes.
    pub fn admit(self: &Arc<Self>, bytes: u64) -> Result<Reservation, Refused> {
        match self.reserve(bytes) {
            Some(r) => {
                self.blocking.store(false, Ordering::Relaxed);
                Ok(r)
            }
            None => {
                self.blocked_total.fetch_add(1, Ordering::Relaxed);
                self.blocking.store(true, Ordering::Relaxed);
                Err(Refused { after: RETRY_AFTER })
            }
        }
    }

    /// Reserves `bytes` under the same rule as [`admit`](Self::admit), but a refusal (`None`)
    /// is not counted and does not mark the queue as refusing: for an operator putting a dead
    /// letter back into its queue, which is no source being refused. Under `evict_oldest` the
    /// reservation is empty, as with `admit`.
    pub fn reserve(self: &Arc<Self>, bytes: u64) -> Option<Reservation> {
        if self.on_full == OnFull::EvictOldest {
            return Some(Reservation {
                gate: Arc::clone(self),
                bytes: 0,
            });
        }
        let mut u = self.lock();
        let fits = if bytes > self.quota {
            u.used == 0 && u.rows == 0 && u.reserved == 0
        } else {
            u.used + u.reserved + bytes <= self.quota
        };
        if !fits {
            return None;
        }
        u.reserved += bytes;
        drop(u);
        Some(Reservation {
            gate: Arc::clone(self),
            bytes,
        })
    }

    /// Publishes the committed state after a transaction; called by the queue's writer before
    /// it drops the reservations of the records that transaction committed.
    pub fn publish(&self, used: u64, rows: u64) {
        let mut u = self.lock();
        let shrank = used < u.used;
        u.used = used;
        u.rows = rows;
        drop(u);
        if shrank {
            self.blocking.store(false, Ordering::Relaxed);
        }
    }

    /// The policy at the quota.
    pub fn on_full(&self) -> OnFull {
        self.on_full
    }

    /// The quota in logical bytes.
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// Committed bytes and rows, and bytes reserved by records on their way to the writer.
    pub fn usage(&self) -> (u64, u64, u64) {
        let u = self.lock();
        (u.used, u.rows, u.reserved)
    }

    /// Records refused at the quota since the queue was created.
    pub fn blocked_total(&self) -> u64 {
        self.blocked_total.load(Ordering::Relaxed)
    }

    /// True while the queue is refusing under `block`.
    pub fn blocking(&self) -> bool {
        self.on_full == OnFull::Block && self.blocking.load(Ordering::Relaxed)
    }
}

/// Bytes reserved against a gate's quota; released when dropped (after the commit, or when the
/// write failed).
#[derive(Debug)]
pub struct Reservation {
    gate: Arc<Gate>,
    bytes: u64,
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// False for the empty reservations of `evict_oldest` gates, which count nothing.
    pub fn is_counted(&self) -> bool {
        self.gate.on_full == OnFull::Block
    }

    /// Takes over the bytes of `other`, a reservation of the same gate.
    pub fn absorb(&mut self, mut other: Reservation) {
        debug_assert!(Arc::ptr_eq(&self.gate, &other.gate));
        self.bytes += other.bytes;
        other.bytes = 0;
    }

    /// Takes `bytes` of this reservation (all it holds, when it holds less) into a reservation
    /// of their own, of the same gate: a batch admitted as a whole hands each record its part.
    pub fn split(&mut self, bytes: u64) -> Reservation {
        let taken = bytes.min(self.bytes);
        self.bytes -= taken;
        Reservation {
            gate: Arc::clone(&self.gate),
            bytes: taken,
        }
    }

    /// Grows the reservation to `needed` bytes when the record grew on its way through the
    /// nodes: the difference is admitted now from `gate` (this reservation's gate), and may be
    /// refused.
    pub fn top_up(&mut self, gate: &Arc<Gate>, needed: u64) -> Result<(), Refused> {
        if needed > self.bytes && self.is_counted() {
            let extra = gate.admit(needed - self.bytes)?;
            self.absorb(extra);
        }
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            let mut u = self.gate.lock();
            u.reserved = u.reserved.saturating_sub(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_refuses_once_reservations_reach_the_quota() {
        let gate = Arc::new(Gate::new(OnFull::Block, 100, 0, 0, 0));
        let a = gate.admit(60).unwrap();
        assert!(gate.admit(50).is_err());
        assert!(gate.blocking());
        drop(a);
        assert!(gate.admit(50).is_ok());
        assert_eq!(gate.blocked_total(), 1);
    }

    #[test]
    fn a_record_larger_than_the_quota_enters_only_an_empty_queue() {
        let gate = Arc::new(Gate::new(OnFull::Block, 100, 0, 0, 0));
        let big = gate.admit(500).unwrap();
        assert!(gate.admit(500).is_err(), "something is reserved already");
        gate.publish(508, 1);
        drop(big);
        assert!(gate.admit(1).is_err(), "the queue is over its quota");
        gate.publish(0, 0);
        assert!(gate.admit(1).is_ok());
    }

    #[test]
    fn a_batch_reservation_split_into_parts_releases_every_byte_once() {
        let gate = Arc::new(Gate::new(OnFull::Block, 100, 0, 0, 0));
        let mut whole = gate.admit(90).unwrap();
        let parts: Vec<Reservation> = (0..3).map(|_| whole.split(40)).collect();
        assert_eq!(
            parts.iter().map(Reservation::bytes).collect::<Vec<_>>(),
            [40, 40, 10]
        );
        assert_eq!(whole.bytes(), 0);
        assert!(
            gate.admit(20).is_err(),
            "the parts still hold the batch's bytes"
        );
        drop(parts);
        drop(whole);
        assert!(gate.admit(100).is_ok());
    }

    #[test]
    fn evict_oldest_never_refuses() {
        let gate = Arc::new(Gate::new(OnFull::EvictOldest, 10, 10, 1, 0));
        assert!(gate.admit(1000).is_ok());
        assert_eq!(gate.blocked_total(), 0);
    }
}
