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
//! - [`deliver`]: the drain loop (batches pipelined to a destination that confirms later)
//!   and the judgement of a destination's answer.
//! - `disk.rs`: [`DiskQueue`], a sink's durable queue with its level and its deliverer's
//!   status, and what it reports.
//! - `status.rs`: [`QueueStatus`] (the `push_queue` document), the queue's names in alerts
//!   and its metric families.

pub mod config;
pub mod deliver;
mod disk;
mod status;

use std::sync::atomic::Ordering;
use std::time::Duration;

pub use config::{DiskQueueConfig, QueueMode};
pub use deliver::{
    judge_each, records_of, Deliverer, DeliveryConfig, DeliveryStatus, Destination, Failure,
    Handed, Pending, Verdict, HOLD_AFTER_REFUSALS, IN_FLIGHT,
};
pub use disk::{dead_lettered_now, DiskQueue, DISK_NOTE};
pub use status::{write_samples, Families, QueueNames, QueueStatus, DISK_FAMILIES, PUSH_FAMILIES};

use crate::store::{DurableQueue, Row, StoreError};

/// What a deliverer needs of a queue, durable or (for push without `push_queue`) volatile.
pub trait Drain: Send + Sync {
    /// Up to `max` rows from the head, oldest first.
    fn peek(&self, max: usize) -> Result<Vec<Row>, StoreError>;
    /// Up to `max` rows from seq `from` on, oldest first: the deliverer reads the next batch
    /// while the ones before it wait for their confirmation. `None` for a queue that reads
    /// only from its head: its deliverer has one batch in flight at a time.
    fn peek_from(&self, _from: u64, _max: usize) -> Option<Result<Vec<Row>, StoreError>> {
        None
    }
    /// Deletes rows `seqs`, exactly those a delivered batch carried, counted delivered; returns
    /// how many were still there. Every other row is kept, whatever its seq: a dead letter
    /// replayed while the batch was on its way may lie between the batch's first and last.
    fn remove_delivered(&self, seqs: &[u64]) -> Result<u64, StoreError>;
    /// Dead letters ever put back into the queue (`dead_replayed_total`). A replayed row may
    /// land between the seqs of the batches in flight: when this moved, the deliverer settles
    /// them before it reads on, so that the row goes next.
    fn replayed_total(&self) -> u64;
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
    fn peek_from(&self, from: u64, max: usize) -> Option<Result<Vec<Row>, StoreError>> {
        Some(DurableQueue::peek_from(self, from, max))
    }
    fn remove_delivered(&self, seqs: &[u64]) -> Result<u64, StoreError> {
        DurableQueue::remove_delivered(self, seqs)
    }
    fn replayed_total(&self) -> u64 {
        self.counters().dead_replayed_total.load(Ordering::Relaxed)
    }
    fn dead_letter(&self, seq: u64, reason: &str) -> Result<bool, StoreError> {
        DurableQueue::dead_letter(self, seq, reason)
    }
    fn wait_appended(&self, seen: u64, timeout: Duration) -> u64 {
        DurableQueue::wait_appended(self, seen, timeout)
    }
}
