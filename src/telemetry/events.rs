//! Typed internal events: each one logs a short sentence with fields and bumps its counter.

use std::sync::atomic::Ordering;

use crate::store::{QueueCounters, StoreError};

/// Rows deleted at the quota under `evict_oldest`: a data gap upstream.
pub fn push_queue_evicted(counters: &QueueCounters, rows: u64, bytes: u64) {
    let total = counters.evicted_total.fetch_add(rows, Ordering::Relaxed) + rows;
    log::warn!(
        "push queue evicted the oldest records, data gap: rows={rows} bytes={bytes} evicted_total={total}"
    );
}

/// The push writer's channel was full: a record was refused and its source told to retry.
pub fn push_writer_channel_full(counters: &QueueCounters) {
    let total = counters.dropped_total.fetch_add(1, Ordering::Relaxed) + 1;
    if total.is_power_of_two() {
        log::warn!("push writer channel full, record refused: dropped_total={total}");
    }
}

/// A write transaction of the push queue failed; every caller in it got the error.
pub fn push_queue_write_failed(counters: &QueueCounters, error: &StoreError) {
    let total = counters.write_errors_total.fetch_add(1, Ordering::Relaxed) + 1;
    log::error!("push queue write failed: error=\"{error}\" write_errors_total={total}");
}

/// The push dead-letter table was over its cap and its oldest rows were deleted.
pub fn push_dead_letters_trimmed(rows: u64) {
    log::warn!("push dead letters trimmed at the cap: rows={rows}");
}

/// The stored accounting did not match the rows and was recounted at open.
pub fn push_queue_accounting_repaired(meta_rows: u64, rows: u64, meta_used: u64, used: u64) {
    log::warn!(
        "push queue accounting repaired at open: meta_rows={meta_rows} rows={rows} meta_used={meta_used} used={used}"
    );
}

/// The volatile push buffer (no `push_queue`) deleted its oldest rows at its 16 MiB quota.
pub fn volatile_buffer_evicted(counters: &QueueCounters, rows: u64, bytes: u64) {
    let total = counters.evicted_total.fetch_add(rows, Ordering::Relaxed) + rows;
    log::warn!(
        "volatile push buffer evicted the oldest records, data gap: rows={rows} bytes={bytes} evicted_total={total}"
    );
}

/// The uplink delivered a batch.
pub fn uplink_delivered(rows: u64) {
    log::debug!("uplink delivered: rows={rows}");
}

/// The uplink failed to deliver and will retry after `delay_ms`.
pub fn uplink_retry(reason: &str, delay_ms: u64) {
    log::warn!("uplink failed, will retry: error=\"{reason}\" retry_in_ms={delay_ms}");
}

/// The receiver refused a record for good; it moved to the push dead-letter table.
pub fn uplink_dead_lettered(seq: u64, reason: &str) {
    log::error!("uplink receiver refused a record, moved to push dead letters: seq={seq} reason=\"{reason}\"");
}
