//! Typed internal events: each one logs a short sentence with fields and bumps its counter.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::record::Record;
use crate::store::{EventCounters, QueueCounters, StoreError};

/// Rows deleted at the quota under `evict_oldest`: a data gap upstream.
pub fn queue_evicted(sink: &str, counters: &QueueCounters, rows: u64, bytes: u64) {
    let total = counters.evicted_total.fetch_add(rows, Ordering::Relaxed) + rows;
    log::warn!(
        "queue evicted the oldest records, data gap: sink={sink} rows={rows} bytes={bytes} evicted_total={total}"
    );
}

/// The push writer's channel was full: a record was refused and its source told to retry.
pub fn queue_writer_channel_full(sink: &str, counters: &QueueCounters) {
    let total = counters.dropped_total.fetch_add(1, Ordering::Relaxed) + 1;
    if total.is_power_of_two() {
        log::warn!("queue writer channel full, record refused: sink={sink} dropped_total={total}");
    }
}

/// A write transaction of the push queue failed; every caller in it got the error.
pub fn queue_write_failed(sink: &str, counters: &QueueCounters, error: &StoreError) {
    let total = counters.write_errors_total.fetch_add(1, Ordering::Relaxed) + 1;
    log::error!("queue write failed: sink={sink} error=\"{error}\" write_errors_total={total}");
}

/// Sink `sink`, removed by a reload with `discard`, gave up the `rows` it still held (counted
/// `discarded` in the ledger).
pub fn queue_discarded(sink: &str, rows: u64) {
    log::warn!("sink removed with discard, rows it held given up: sink={sink} rows={rows}");
}

/// The push dead-letter table was over its cap and its oldest rows were deleted.
pub fn queue_dead_letters_trimmed(sink: &str, rows: u64) {
    log::warn!("queue dead letters trimmed at the cap: sink={sink} rows={rows}");
}

/// An operator put dead letters back into sink `sink`'s queue (`(id, seq)` of each, in seq
/// order): one line per call, however many. (The durable count is the queue's,
/// `dead_replayed_total`, kept with the rows.)
pub fn queue_dead_letters_replayed(sink: &str, replayed: &[(u64, u64)]) {
    match replayed {
        [] => {}
        [(id, seq)] => {
            log::info!("dead letter replayed into the queue: sink={sink} id={id} seq={seq}")
        }
        [(_, first), .., (_, last)] => log::info!(
            "dead letters replayed into the queue: sink={sink} rows={} seqs={first}..={last}",
            replayed.len()
        ),
    }
}

/// An operator deleted dead letter `id` of sink `sink`'s queue; the ledger keeps it counted as
/// dead-lettered. (The durable count is the queue's, `dead_deleted_total`.)
pub fn queue_dead_letter_deleted(sink: &str, id: u64) {
    log::warn!(
        "dead letter deleted by the operator, still counted dead-lettered: sink={sink} id={id}"
    );
}

/// The stored accounting did not match the rows and was recounted at open.
pub fn queue_accounting_repaired(sink: &str, meta_rows: u64, rows: u64, meta_used: u64, used: u64) {
    log::warn!(
        "queue accounting repaired at open: sink={sink} meta_rows={meta_rows} rows={rows} meta_used={meta_used} used={used}"
    );
}

/// The volatile push buffer (no `push_queue`) deleted its oldest rows at its 16 MiB quota.
pub fn volatile_buffer_evicted(counters: &QueueCounters, rows: u64, bytes: u64) {
    let total = counters.evicted_total.fetch_add(rows, Ordering::Relaxed) + rows;
    log::warn!(
        "volatile push buffer evicted the oldest records, data gap: rows={rows} bytes={bytes} evicted_total={total}"
    );
}

/// A clean stop left `rows` rows in the volatile push buffer of sink `sink`: they are lost.
pub fn volatile_buffer_lost_at_stop(sink: &str, counters: &QueueCounters, rows: u64, bytes: u64) {
    let total = counters
        .lost_at_stop_total
        .fetch_add(rows, Ordering::Relaxed)
        + rows;
    log::error!(
        "alert: volatile push buffer stopped with records not delivered, they are lost: sink={sink} rows={rows} bytes={bytes} lost_at_stop_total={total}"
    );
}

/// A deliverer's destination confirmed `rows` rows of sink `sink`.
pub fn delivered(sink: &str, rows: u64) {
    log::debug!("delivered: sink={sink} rows={rows}");
}

/// A delivery attempt of sink `sink` failed (`class` of the error); the next is in `delay_ms`.
pub fn delivery_retry(sink: &str, class: &str, delay_ms: u64) {
    log::warn!("delivery failed, will retry: sink={sink} error=\"{class}\" retry_in_ms={delay_ms}");
}

/// The destination of sink `sink` refused a row for good; it moved to the queue's dead-letter
/// table.
pub fn delivery_dead_lettered(sink: &str, seq: u64, class: &str) {
    log::error!(
        "destination refused a record, moved to the queue's dead letters: sink={sink} seq={seq} error=\"{class}\""
    );
}

/// Sink `sink`'s queue is on hold: its rows are kept and retried, none dead-lettered, until
/// the destination takes them again.
pub fn delivery_held(sink: &str, class: &str, why: &str) {
    log::error!("alert: queue held, rows kept: sink={sink} error=\"{class}\" reason=\"{why}\"");
}

/// A broker sink refused record `record_id` for good: its message would be `bytes`, over what the
/// connection takes (`limit`: the MQTT packet cap, the NATS server's `max_payload`). The record
/// goes to the dead letters with the reason, so the ones behind it go on. Logged at the first
/// refusal and at every power of two after it.
pub fn sink_record_too_large(
    sink: &str,
    too_large_total: &AtomicU64,
    record_id: &str,
    bytes: usize,
    limit: usize,
) {
    let total = too_large_total.fetch_add(1, Ordering::Relaxed) + 1;
    if total.is_power_of_two() {
        log::warn!(
            "record too large for its broker, refused for good: sink={sink} record_id={record_id} bytes={bytes} limit={limit} too_large_total={total}"
        );
    }
}

/// The pipeline dead-letter queue was at its cap: resolved entry `id` was deleted (resolved
/// entries go first; an open one is [`dead_letter_trimmed_open`]). `trimmed_total` counts this
/// one.
pub fn dead_letter_trimmed(id: u64, state: &str, flow: &str, node: &str, trimmed_total: u64) {
    log::warn!(
        "dead letter trimmed at the cap: id={id} state={state} flow={flow} node={node} trimmed_total={trimmed_total}"
    );
}

/// The pipeline dead-letter queue was at its cap and entry `id` was deleted while still open:
/// its record (of `source`) is lost. `trimmed_open_total` counts this one.
pub fn dead_letter_trimmed_open(
    id: u64,
    source: &str,
    flow: &str,
    node: &str,
    trimmed_open_total: u64,
) {
    log::error!(
        "open dead letter trimmed at the cap, record lost: id={id} source={source} flow={flow} node={node} trimmed_open_total={trimmed_open_total}"
    );
}

/// The index of the pipeline dead-letter queue did not match its entries and was rebuilt at
/// open.
pub fn dead_letter_index_repaired(entries: u64, heads: u64) {
    log::warn!("dead letter index rebuilt at open: entries={entries} heads={heads}");
}

/// A webhook request answered `200` (`on_receipt`) ran, but its record could be neither
/// stored nor parked (the dead-letter write failed): its inbox entry is kept and runs again at
/// the next start.
pub fn webhook_inbox_kept(
    kept_total: &AtomicU64,
    source: &str,
    inbox_id: u64,
    settlement: &crate::record::Settlement,
) {
    let total = kept_total.fetch_add(1, Ordering::Relaxed) + 1;
    log::error!(
        "webhook request kept in the inbox for the next start: source={source} inbox_id={inbox_id} settlement=\"{settlement:?}\" kept_in_inbox={total}"
    );
}

/// An identical copy of a webhook request answered `200` before was answered the same again;
/// nothing was stored for it.
pub fn webhook_request_repeated(repeated_total: &AtomicU64, webhook: &str) {
    let total = repeated_total.fetch_add(1, Ordering::Relaxed) + 1;
    log::info!(
        "webhook request answered again, nothing stored twice: webhook={webhook} repeated={total}"
    );
}

/// An identical copy of a webhook request was still running after the wait: answered `409` +
/// `Retry-After`.
pub fn webhook_request_in_progress(in_progress_total: &AtomicU64, webhook: &str) {
    let total = in_progress_total.fetch_add(1, Ordering::Relaxed) + 1;
    log::warn!(
        "webhook request still running, copy told to retry: webhook={webhook} in_progress={total}"
    );
}

/// A webhook request's replay window row could not be written: its answer stands, but after
/// a restart an identical copy would be taken for a new request.
pub fn webhook_window_write_failed(webhook: &str, error: &str) {
    log::error!("webhook replay window not written: webhook={webhook} error=\"{error}\"");
}

/// A webhook's replay window could not be read at start: it starts empty.
pub fn webhook_window_unreadable(webhook: &str, error: &StoreError) {
    log::error!("webhook replay window unreadable at start, starts empty: webhook={webhook} error=\"{error}\"");
}

/// A request body to be read before its check did not fit the body budget: answered `503` +
/// `Retry-After` before more of it was read. Logged at the powers of two of the count, so a
/// flood of them cannot flood the log.
pub fn http_body_budget_refused(refused: &AtomicU64, body_bytes: usize, available: usize) {
    let refused_total = refused.fetch_add(1, Ordering::Relaxed) + 1;
    if refused_total.is_power_of_two() {
        log::warn!(
            "request body refused, body budget spent: body_bytes={body_bytes} budget_available={available} body_budget_refused_total={refused_total}"
        );
    }
}

/// The event history deleted its oldest rows at its quota (`evict_oldest`).
pub fn event_store_evicted(counters: &EventCounters, rows: u64, bytes: u64) {
    let total = counters.evicted_total.fetch_add(rows, Ordering::Relaxed) + rows;
    log::warn!(
        "event history evicted the oldest records at its quota: rows={rows} bytes={bytes} evicted_total={total}"
    );
}

/// The event history deleted rows older than its retention.
pub fn event_store_expired(counters: &EventCounters, rows: u64, cutoff_ms: u64) {
    let total = counters.expired_total.fetch_add(rows, Ordering::Relaxed) + rows;
    log::info!(
        "event history expired records past the retention: rows={rows} older_than_ms={cutoff_ms} expired_total={total}"
    );
}

/// The event history writer's channel was full: a record was refused and its source told to
/// retry.
pub fn event_writer_channel_full(counters: &EventCounters) {
    let total = counters.dropped_total.fetch_add(1, Ordering::Relaxed) + 1;
    if total.is_power_of_two() {
        log::warn!("event history writer channel full, record refused: dropped_total={total}");
    }
}

/// A write transaction of the event history failed; every caller in it got the error.
pub fn event_store_write_failed(counters: &EventCounters, error: &StoreError) {
    let total = counters.write_errors_total.fetch_add(1, Ordering::Relaxed) + 1;
    log::error!("event history write failed: error=\"{error}\" write_errors_total={total}");
}

/// The stored accounting of the event history did not match its rows and was recounted.
pub fn event_store_accounting_repaired(meta_rows: u64, rows: u64, meta_used: u64, used: u64) {
    log::warn!(
        "event history accounting repaired at open: meta_rows={meta_rows} rows={rows} meta_used={meta_used} used={used}"
    );
}

/// The per-source index of the event history did not match its rows and was rebuilt.
pub fn event_store_index_rebuilt(index_rows: u64, rows: u64) {
    log::warn!("event history index rebuilt at open: index_rows={index_rows} rows={rows}");
}

/// A command reused a recent command's id (on the same path) with other content: refused,
/// nothing sent.
pub fn command_id_reused(device: &str, id: &str, path: &str, id_reused_total: &AtomicU64) {
    let total = id_reused_total.fetch_add(1, Ordering::Relaxed) + 1;
    log::warn!(
        "command refused, its id was a recent command's with other content, nothing written: device={device} id={id} path={path} id_reused_total={total}"
    );
}

/// A Sparkplug sink's node got an NCMD or DCMD flagged retained: the broker kept it and hands
/// it to every new subscription, so it is never a command; nothing is run.
pub fn sparkplug_command_retained(sink: &str, topic: &str, retained_total: &AtomicU64) {
    let total = retained_total.fetch_add(1, Ordering::Relaxed) + 1;
    log::warn!(
        "sparkplug retained command ignored, nothing written: sink={sink} topic={topic} retained_total={total}"
    );
}

/// A retention sweep of the storage sink failed; the next one tries again.
pub fn storage_sweep_failed(error: &StoreError) {
    log::error!("storage retention sweep failed: error=\"{error}\"");
}

/// A database sink's backlog was at its bound under `evict_oldest`: `record` (the oldest
/// waiting row, or the arriving one when every row was in flight) was dropped. Logged at the
/// first drop and at every power of two after it; the alert checker raises the rest.
pub fn db_sink_evicted(sink: &str, dropped_total: &AtomicU64, record: &Record) {
    let total = dropped_total.fetch_add(1, Ordering::Relaxed) + 1;
    if total.is_power_of_two() {
        log::warn!(
            "{sink} backlog full, dropped the oldest row, data gap: record_id={} source={} dropped_total={total}",
            record.id,
            record.source
        );
    }
}

/// A database sink inserted a batch.
pub fn db_sink_inserted(sink: &str, rows: u64) {
    log::debug!("{sink} inserted a batch: rows={rows}");
}

/// A database sink's insert failed; the rows are kept and retried after `delay`.
pub fn db_sink_retry(sink: &str, rows: u64, error: &str, delay: std::time::Duration) {
    log::warn!(
        "{sink} insert failed, rows kept, will retry: rows={rows} retry_in_ms={} error=\"{error}\"",
        delay.as_millis()
    );
}

/// A database sink's server refused a batch for good (a value, a constraint); it goes to the
/// pipeline dead-letter queue.
pub fn db_sink_rejected(sink: &str, rows: u64, error: &str) {
    log::error!(
        "{sink} refused a batch, moving it to the dead-letter queue: rows={rows} error=\"{error}\""
    );
}

/// A clean stop could not insert what was left in a database sink's memory backlog.
pub fn db_sink_lost_at_stop(sink: &str, lost_total: &AtomicU64, rows: u64) {
    let total = lost_total.fetch_add(rows, Ordering::Relaxed) + rows;
    log::error!(
        "{sink} stopped with rows it could not insert, they are lost: rows={rows} lost_at_stop_total={total}"
    );
}

/// At the trends' bound, series `dropped` (silent for ten minutes, or a device point giving
/// way to one of the connector's own series) gave its place to the new series `by`.
pub fn trend_series_dropped(dropped_total: &AtomicU64, dropped: &str, by: &str) {
    let total = dropped_total.fetch_add(1, Ordering::Relaxed) + 1;
    log::warn!(
        "trends at their bound, dropped the stalest series: dropped={dropped} for={by} dropped_series_total={total}"
    );
}

/// At the trends' bound, a sample of the new series `series` was not kept (every kept series
/// is live). Logged at the first and at every power of two after it.
pub fn trend_sample_refused(refused_total: &AtomicU64, series: &str) {
    let total = refused_total.fetch_add(1, Ordering::Relaxed) + 1;
    if total.is_power_of_two() {
        log::warn!(
            "trends at their bound, a new series is not kept: series={series} refused_samples_total={total}"
        );
    }
}
