//! The deliverer: drains a queue's head to its destination, in order, on a thread of its own.
//!
//! Rows are deleted only after the destination confirmed them. Each attempt ends in a
//! [`Verdict`]:
//! - `Delivered`: the rows go.
//! - `Retry` (a timeout, a lost connection, a busy server; HTTP 408, 429, 5xx): the batch is
//!   kept, order with it, and sent again after a back-off that doubles from `retry_initial` to
//!   `retry_max` (a `Retry-After` in seconds is honoured).
//! - `Held` (the destination refuses the *request*, not the records: HTTP 401, 403, 404, a
//!   rotated token, a wrong URL): the rows are kept and retried with the same back-off, the
//!   queue's `held` alert is raised and the reason shown. A misconfiguration never costs data.
//! - `Refused` (the destination names the *content*: HTTP 400, 413, 415, 422, a database type
//!   error): the batch is sent again one row at a time, and a row refused alone moves to the
//!   queue's dead-letter table, so one bad record cannot hold the queue back. A catch-up batch
//!   (more than `batch_rows`, see [`DeliveryConfig::max_rows`]) is first sent again in batches of
//!   `batch_rows`, so a bad row costs no more single sends than it would without catch-up. After
//!   a failed attempt the next takes at most half as many rows (never fewer than `batch_rows`)
//!   and each delivery doubles that limit again up to `max_rows`, so an attempt too large for
//!   the link or the timeout shrinks until it passes. After
//!   [`HOLD_AFTER_REFUSALS`] single-row refusals in a row the deliverer stops dead-lettering and
//!   holds the queue instead: a destination that refuses everything is broken, not the data.
//!
//!
//! A destination that confirms later, on a task of its own (the Sparkplug session), takes a
//! batch and answers [`Handed::Pending`]: the deliverer reads and hands it the next batches
//! meanwhile, up to [`IN_FLIGHT`] unconfirmed, so reading and decoding a batch overlaps the
//! broker's answer to the one before and the commit that deletes it. The verdicts are settled
//! oldest first and rows are deleted in queue order, each batch only once it was confirmed and
//! every batch before it too. When a verdict is anything but `Delivered`, every batch after it
//! is given up ([`Destination::start_over`]) and handed again, in order, from the oldest row
//! left. A destination that judges at once (the default) has one batch in flight, as before.
//!
//! It runs on its own thread (blocking clients, or `block_on` for the async ones), so a slow
//! destination never occupies the async runtime.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::Drain;
use crate::record::Record;
use crate::shutdown::Shutdown;
use crate::sinks::{Delivered, DeliveryError};
use crate::store::{Row, StoreError};
use crate::telemetry::events;

/// Single-row refusals in a row after which the queue is held instead of dead-lettered.
pub const HOLD_AFTER_REFUSALS: u64 = 20;
/// Longest detail kept of a failure (a receiver's body, a server's message).
pub const MAX_DETAIL: usize = 512;
/// Most batches handed to a destination that confirms later ([`Handed::Pending`]) and not
/// settled yet. Each is a list of seqs here; its records are the destination's, which bounds
/// what it holds of them.
pub const IN_FLIGHT: usize = 4;

/// What went wrong with one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// A short class that carries no caller data (`HTTP 401`, `timeout`, `connect`): what
    /// the public documents show.
    pub class: String,
    /// The full text (a receiver's body, a server's message), which may echo a record: only
    /// the admin endpoint shows it.
    pub detail: String,
}

impl Failure {
    /// A failure whose class is the start of `detail` up to its first `": "` (a status, an
    /// SQLSTATE, `request failed`), at most 48 bytes: the messages of the destinations put
    /// their code first and the rows or bodies after it.
    pub fn from_detail(detail: impl Into<String>) -> Self {
        let detail = detail.into();
        let head = detail.split(": ").next().unwrap_or("");
        let mut end = head.len().min(48);
        while !head.is_char_boundary(end) {
            end -= 1;
        }
        let class = head[..end].trim().to_string();
        Self::new(class, detail)
    }

    /// A failure of class `class` with `detail` (cut at [`MAX_DETAIL`] bytes).
    pub fn new(class: impl Into<String>, detail: impl Into<String>) -> Self {
        let mut detail = detail.into();
        if detail.len() > MAX_DETAIL {
            let mut end = MAX_DETAIL;
            while !detail.is_char_boundary(end) {
                end -= 1;
            }
            detail.truncate(end);
            detail.push_str("...");
        }
        Self {
            class: class.into(),
            detail,
        }
    }
}

/// The judgement of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Confirmed: the rows may be deleted.
    Delivered,
    /// Transient: keep the rows, send them again after the back-off or `after`.
    Retry {
        /// Why.
        error: Failure,
        /// The destination's own wait (`Retry-After`).
        after: Option<Duration>,
    },
    /// The request or the configuration is refused (authentication, address): keep the rows,
    /// retry with back-off, alert.
    Held {
        /// Why.
        error: Failure,
    },
    /// The content is refused: row by row, then dead letters.
    Refused {
        /// Why.
        error: Failure,
    },
}

/// A batch a destination took whose verdict comes later.
#[derive(Debug)]
pub struct Pending(oneshot::Receiver<Verdict>);

impl Pending {
    /// A batch whose verdict comes through `verdict`.
    pub fn new(verdict: oneshot::Receiver<Verdict>) -> Self {
        Self(verdict)
    }

    /// The verdict; a destination that dropped the batch unjudged means retry.
    pub async fn verdict(self) -> Verdict {
        self.0.await.unwrap_or_else(|_| Self::dropped())
    }

    /// The verdict, blocking (never on the async runtime).
    pub fn wait(self) -> Verdict {
        self.0.blocking_recv().unwrap_or_else(|_| Self::dropped())
    }

    fn dropped() -> Verdict {
        Verdict::Retry {
            error: Failure::new("dropped", "the destination dropped the batch unjudged"),
            after: None,
        }
    }
}

/// What handing a batch to a destination gave.
#[derive(Debug)]
pub enum Handed {
    /// Judged at once.
    Judged(Verdict),
    /// Taken; the verdict comes later ([`Destination::settle`]).
    Pending(Pending),
}

/// A destination a deliverer sends batches to.
pub trait Destination: Send {
    /// Sends `rows` (oldest first; each `line` is a record's uplink line) and judges the
    /// answer. Blocking.
    fn send(&mut self, rows: &[Row]) -> Verdict;

    /// Hands `rows` over. A destination that confirms later answers [`Handed::Pending`] as
    /// soon as it took them, and the deliverer hands it the next batches meanwhile (up to
    /// [`IN_FLIGHT`]). Such a destination delivers batches in the order they were handed, and
    /// once it judged one anything but `Delivered` it delivers none handed after that one
    /// until [`Destination::start_over`]: the deliverer hands them again. By default: sent
    /// and judged at once ([`Destination::send`]).
    fn hand(&mut self, rows: &[Row]) -> Handed {
        Handed::Judged(self.send(rows))
    }

    /// Waits for the verdict on a batch handed over. Blocking.
    fn settle(&mut self, pending: Pending) -> Verdict {
        pending.wait()
    }

    /// The deliverer gave up on every batch handed and not settled (one of them was not
    /// delivered) and starts over from the oldest row left: the batches handed from now on are
    /// to be delivered.
    fn start_over(&mut self) {}
}

/// The records a batch of queue rows holds. A row that is not a record can never be delivered:
/// it refuses the batch, so the deliverer sends the rows one by one and dead-letters that one.
pub fn records_of(rows: &[Row]) -> Result<Vec<Record>, Verdict> {
    rows.iter()
        .map(|r| {
            Record::from_line(&r.line).map_err(|e| Verdict::Refused {
                error: Failure::new("not a record", e.to_string()),
            })
        })
        .collect()
}

/// The verdict on a batch a destination took one record at a time (a broker): a record it can
/// never take (its topic or subject) refuses the batch's content; any other failure retries
/// the batch (the records already confirmed arrive twice, which at least once allows).
pub fn judge_each(results: Vec<Result<Delivered, DeliveryError>>) -> Verdict {
    let mut verdict = Verdict::Delivered;
    for result in results {
        match result {
            Ok(_) => {}
            Err(DeliveryError::Rejected(why)) => {
                return Verdict::Refused {
                    error: Failure::new("not deliverable", why),
                }
            }
            Err(DeliveryError::Refused(_)) => {
                verdict = Verdict::Retry {
                    error: Failure::new("queue full", "the client's queue is full"),
                    after: None,
                }
            }
            Err(e) => {
                verdict = Verdict::Retry {
                    error: Failure::from_detail(e.to_string()),
                    after: None,
                }
            }
        }
    }
    verdict
}

/// Back-off and batch size of a deliverer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryConfig {
    /// Rows a batch lingers for: with this many waiting it goes at once.
    pub batch_rows: usize,
    /// Most rows per attempt: when more rows wait than `batch_rows` (a queue that built up
    /// while the destination was down or slow), one attempt takes them up to this many, so the
    /// queue empties in few large requests. `batch_rows` for a destination without catch-up.
    pub max_rows: usize,
    /// First retry delay, doubled after each failure.
    pub retry_initial: Duration,
    /// Longest retry delay.
    pub retry_max: Duration,
    /// Longest a batch short of `batch_rows` waits for more rows before it is sent, so that
    /// records arriving one by one go out many to a request; zero sends what is there at once.
    pub linger: Duration,
}

/// Longest single wait while a short batch lingers, so a stop is seen soon.
const LINGER_STEP: Duration = Duration::from_millis(100);

/// What `/api/status` and the alert hub see of a deliverer.
#[derive(Debug, Default)]
pub struct DeliveryStatus {
    /// True while the last attempt succeeded.
    healthy: AtomicBool,
    /// Failed attempts (each retried).
    failures_total: AtomicU64,
    /// Holding the queue: the destination refuses the requests, or refused
    /// [`HOLD_AFTER_REFUSALS`] rows in a row.
    held: AtomicBool,
    /// Times the queue was put on hold.
    holds_total: AtomicU64,
    /// Milliseconds spent on hold before the current hold.
    held_ms: AtomicU64,
    /// Single-row refusals since the last delivery.
    refusals_in_a_row: AtomicU64,
    /// The last failure and when it happened (Unix ms), cleared by the next delivery.
    last_error: Mutex<Option<(Failure, u64)>>,
    /// When the current hold began.
    held_since: Mutex<Option<Instant>>,
}

impl DeliveryStatus {
    /// True while the last attempt succeeded.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// True while the queue is on hold.
    pub fn held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }

    /// Times the queue was put on hold.
    pub fn holds_total(&self) -> u64 {
        self.holds_total.load(Ordering::Relaxed)
    }

    /// Failed attempts.
    pub fn failures_total(&self) -> u64 {
        self.failures_total.load(Ordering::Relaxed)
    }

    /// Milliseconds spent on hold in all, the current hold included: grows while on hold, so
    /// the alert hub sees it as a counter that is critical while it grows.
    pub fn held_ms_total(&self) -> u64 {
        let now = self
            .held_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map_or(0, |t| t.elapsed().as_millis() as u64);
        self.held_ms.load(Ordering::Relaxed) + now
    }

    /// The class of the last failure (public), when there is one.
    pub fn last_error_class(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(f, _)| f.class.clone())
    }

    /// The public part: no caller data.
    pub fn to_json(&self) -> Value {
        json!({
            "healthy": self.healthy(),
            "held": self.held(),
            "holds_total": self.holds_total.load(Ordering::Relaxed),
            "failures_total": self.failures_total(),
            "refusals_in_a_row": self.refusals_in_a_row.load(Ordering::Relaxed),
            "last_error": self.last_error_class(),
        })
    }

    /// The full text of the last failure, for the admin endpoint.
    pub fn detail_json(&self) -> Value {
        match &*self.last_error.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((f, at)) => json!({"class": f.class, "detail": f.detail, "at": at}),
            None => Value::Null,
        }
    }

    fn failed(&self, error: &Failure) {
        self.failures_total.fetch_add(1, Ordering::Relaxed);
        self.healthy.store(false, Ordering::Relaxed);
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((error.clone(), crate::record::now_ms()));
    }

    fn delivered(&self) {
        self.healthy.store(true, Ordering::Relaxed);
        self.refusals_in_a_row.store(0, Ordering::Relaxed);
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.release();
    }

    /// Puts the queue on hold; true when it was not on hold before.
    pub fn hold(&self) -> bool {
        let mut since = self.held_since.lock().unwrap_or_else(|e| e.into_inner());
        if since.is_some() {
            return false;
        }
        *since = Some(Instant::now());
        self.held.store(true, Ordering::Relaxed);
        self.holds_total.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Ends a hold (a delivery does it too).
    pub fn release(&self) {
        let mut since = self.held_since.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = since.take() {
            self.held_ms
                .fetch_add(t.elapsed().as_millis() as u64, Ordering::Relaxed);
            self.held.store(false, Ordering::Relaxed);
        }
    }
}

/// A batch handed over and not settled.
struct InFlight {
    first: u64,
    last: u64,
    /// The seqs it carries: what its confirmation deletes, and nothing else.
    seqs: Vec<u64>,
    handed: Handed,
}

/// True when the deliverer may hand another batch before it settles the oldest: fewer than
/// [`IN_FLIGHT`] in flight, the last one waiting for a later verdict (one judged at once is
/// settled first), and not while refused rows go one at a time.
fn room(window: &VecDeque<InFlight>, singles_through: Option<u64>) -> bool {
    match window.back() {
        None => true,
        Some(b) => {
            matches!(b.handed, Handed::Pending(_))
                && singles_through.is_none()
                && window.len() < IN_FLIGHT
        }
    }
}

/// A deliverer: one queue, one destination, one thread.
pub struct Deliverer {
    /// The sink's name, for logs and the thread.
    sink: String,
    cfg: DeliveryConfig,
    drain: Arc<dyn Drain>,
    destination: Box<dyn Destination>,
    status: Arc<DeliveryStatus>,
    shutdown: Shutdown,
}

impl Deliverer {
    /// A deliverer of sink `sink` draining `drain` into `destination`.
    pub fn new(
        sink: &str,
        cfg: DeliveryConfig,
        drain: Arc<dyn Drain>,
        destination: Box<dyn Destination>,
        status: Arc<DeliveryStatus>,
        shutdown: Shutdown,
    ) -> Self {
        Self {
            sink: sink.to_string(),
            cfg,
            drain,
            destination,
            status,
            shutdown,
        }
    }

    /// Starts the thread; it stops when `shutdown` triggers.
    pub fn spawn(self) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name(format!("deliver-{}", self.sink))
            .spawn(move || {
                crate::priority::background_thread();
                self.run()
            })
    }

    fn run(mut self) {
        let mut mark = 0;
        // The queue's replays as of the last read from its head.
        let mut replays = 0;
        let mut delay = self.cfg.retry_initial;
        // After a content refusal of a batch, rows up to this seq go one at a time.
        let mut singles_through: Option<u64> = None;
        // After a content refusal of a catch-up batch, rows up to this seq go in batches of
        // `batch_rows`.
        let mut pieces_through: Option<u64> = None;
        // Most rows of the next attempt: halved by a failure, doubled by a delivery.
        let max_rows = self.cfg.max_rows.max(self.cfg.batch_rows);
        let mut limit = max_rows;
        // Handed and not settled, oldest first.
        let mut window: VecDeque<InFlight> = VecDeque::with_capacity(IN_FLIGHT);
        while !self.shutdown.is_triggered() {
            if room(&window, singles_through) {
                let most = if singles_through.is_some() {
                    1
                } else if pieces_through.is_some() {
                    self.cfg.batch_rows
                } else {
                    limit
                };
                let lingers = singles_through.is_none() && pieces_through.is_none();
                match self.next_rows(&window, most, lingers, &mut mark, &mut replays) {
                    Ok(Some(rows)) => {
                        let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
                            continue;
                        };
                        let (first, last) = (first.seq, last.seq);
                        if window.is_empty() && singles_through.is_some_and(|s| first > s) {
                            singles_through = None;
                            continue;
                        }
                        if window.is_empty()
                            && singles_through.is_none()
                            && pieces_through.is_some_and(|p| first > p)
                        {
                            pieces_through = None;
                            continue;
                        }
                        let handed = self.destination.hand(&rows);
                        let judged = matches!(handed, Handed::Judged(_));
                        window.push_back(InFlight {
                            first,
                            last,
                            seqs: rows.iter().map(|r| r.seq).collect(),
                            handed,
                        });
                        // A verdict given at once is acted on at once (the rows deleted
                        // before a stop is looked at); a later one lets the next batch go.
                        if !judged {
                            continue;
                        }
                    }
                    // Nothing (more) to hand now: settle the oldest batch in flight.
                    Ok(None) => {}
                    Err(e) if window.is_empty() => {
                        let error = Failure::new("queue", format!("cannot read the queue: {e}"));
                        self.wait_after(&error, delay);
                        continue;
                    }
                    // Read again once the batches in flight are settled.
                    Err(_) => {}
                }
            }
            let Some(batch) = window.pop_front() else {
                singles_through = None;
                pieces_through = None;
                mark = self.drain.wait_appended(mark, Duration::from_millis(500));
                continue;
            };
            let verdict = match batch.handed {
                Handed::Judged(verdict) => verdict,
                Handed::Pending(pending) => self.destination.settle(pending),
            };
            let InFlight {
                first, last, seqs, ..
            } = batch;
            let rows = seqs.len();
            if verdict != Verdict::Delivered {
                // The batches after it wait for it: handed again, in order, after it.
                window.clear();
                self.destination.start_over();
            }
            limit = match verdict {
                Verdict::Delivered => limit.saturating_mul(2).min(max_rows),
                Verdict::Retry { .. } | Verdict::Held { .. } => {
                    (rows / 2).max(self.cfg.batch_rows).min(max_rows)
                }
                Verdict::Refused { .. } => limit,
            };
            match verdict {
                Verdict::Delivered => {
                    delay = self.cfg.retry_initial;
                    self.status.delivered();
                    match self.drain.remove_delivered(&seqs) {
                        Ok(n) => events::delivered(&self.sink, n),
                        Err(e) => {
                            // Delivered but not deleted: it will be sent again (a duplicate
                            // with the same id, which the destination can drop), and so is
                            // every batch after it, to keep the order.
                            window.clear();
                            self.destination.start_over();
                            let error =
                                Failure::new("queue", format!("cannot delete delivered rows: {e}"));
                            self.wait_after(&error, delay);
                        }
                    }
                }
                Verdict::Retry { error, after } => {
                    let wait = after.unwrap_or(delay).min(self.cfg.retry_max.max(delay));
                    self.wait_after(&error, wait);
                    delay = (delay * 2).min(self.cfg.retry_max);
                }
                Verdict::Held { error } => {
                    if self.status.hold() {
                        events::delivery_held(
                            &self.sink,
                            &error.class,
                            "the destination refuses the requests",
                        );
                    }
                    self.wait_after(&error, delay);
                    delay = (delay * 2).min(self.cfg.retry_max);
                }
                Verdict::Refused { error } if rows > self.cfg.batch_rows => {
                    pieces_through = Some(last);
                    log::warn!(
                        "destination refused a catch-up batch, sending it again in smaller batches: sink={} rows={rows} batch_rows={} error={}",
                        self.sink,
                        self.cfg.batch_rows,
                        error.class
                    );
                }
                Verdict::Refused { error } if rows > 1 => {
                    singles_through = Some(last);
                    log::warn!(
                        "destination refused a batch, sending it one row at a time: sink={} rows={rows} error={}",
                        self.sink,
                        error.class
                    );
                }
                Verdict::Refused { error } => {
                    let in_a_row = self
                        .status
                        .refusals_in_a_row
                        .fetch_add(1, Ordering::Relaxed)
                        + 1;
                    if in_a_row >= HOLD_AFTER_REFUSALS {
                        if self.status.hold() {
                            events::delivery_held(
                                &self.sink,
                                &error.class,
                                "the destination refused every one of the last rows: rows kept, not dead-lettered",
                            );
                        }
                        self.wait_after(&error, delay);
                        delay = (delay * 2).min(self.cfg.retry_max);
                        continue;
                    }
                    self.status.failed(&error);
                    events::delivery_dead_lettered(&self.sink, first, &error.class);
                    let reason = format!("{}: {}", error.class, error.detail);
                    if let Err(e) = self.drain.dead_letter(first, &reason) {
                        let error =
                            Failure::new("queue", format!("cannot move a dead letter: {e}"));
                        self.wait_after(&error, delay);
                    }
                }
            }
        }
    }

    /// The rows of the next batch to hand over, up to `max`: from the head when nothing is in
    /// flight (a short batch lingering for more when `lingers`, see [`Deliverer::linger`]), else
    /// from the row after the last batch handed. `None` when there is nothing to hand now: no
    /// row, a queue that reads only from its head, or a dead letter replayed since the last
    /// read from the head (`replays`, [`Drain::replayed_total`]): its row may lie below or
    /// between the batches in flight, and goes next once they are settled, as a replay goes
    /// after the batch on its way.
    fn next_rows(
        &self,
        window: &VecDeque<InFlight>,
        max: usize,
        lingers: bool,
        mark: &mut u64,
        replays: &mut u64,
    ) -> Result<Option<Vec<Row>>, StoreError> {
        let rows = match window.back() {
            Some(newest) => {
                if self.drain.replayed_total() != *replays {
                    return Ok(None);
                }
                match self.drain.peek_from(newest.last + 1, max) {
                    Some(rows) => rows?,
                    None => return Ok(None),
                }
            }
            None => {
                // Read before the rows: a replay counted after this read is settled for, at
                // worst once too often.
                *replays = self.drain.replayed_total();
                if lingers {
                    self.linger(self.drain.peek(max)?, max, mark)
                } else {
                    // Refused rows going again in pieces or one by one: they are there.
                    self.drain.peek(max)?
                }
            }
        };
        Ok(Some(rows).filter(|r| !r.is_empty()))
    }

    /// A batch short of `batch_rows` waits up to the linger for the rows still arriving (in
    /// steps, so a stop is seen), then is peeked again (up to `max` rows): what waited
    /// meanwhile goes with it.
    fn linger(&self, mut rows: Vec<Row>, max: usize, mark: &mut u64) -> Vec<Row> {
        if rows.is_empty() || self.cfg.linger.is_zero() {
            return rows;
        }
        let until = Instant::now() + self.cfg.linger;
        let enough = self.cfg.batch_rows.min(max);
        while rows.len() < enough && !self.shutdown.is_triggered() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let seen = self.drain.wait_appended(*mark, left.min(LINGER_STEP));
            if seen == *mark {
                continue;
            }
            *mark = seen;
            match self.drain.peek(max) {
                Ok(more) if more.len() > rows.len() => rows = more,
                // The head changed under us (a replayed dead letter) or the read failed: send
                // what was read.
                _ => {}
            }
        }
        rows
    }

    /// Counts a failed attempt and waits `wait` (or until shutdown).
    fn wait_after(&self, error: &Failure, wait: Duration) {
        self.status.failed(error);
        events::delivery_retry(&self.sink, &error.class, wait.as_millis() as u64);
        self.shutdown.wait_timeout(wait);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use std::sync::mpsc;

    use super::*;

    /// A queue in memory that records what the deliverer did.
    #[derive(Default)]
    struct FakeQueue {
        rows: Mutex<VecDeque<Row>>,
        dead: Mutex<Vec<u64>>,
        /// The seqs of each delivered batch deleted, in the order they were.
        removed: Mutex<Vec<Vec<u64>>>,
        /// Rows put back by [`FakeQueue::replay`].
        replayed: AtomicU64,
    }

    impl FakeQueue {
        fn with_rows(n: u64) -> Arc<Self> {
            let queue = Arc::new(Self::default());
            for seq in 0..n {
                queue.rows.lock().unwrap().push_back(Row {
                    seq,
                    line: b"{}".to_vec(),
                });
            }
            queue
        }

        /// Puts row `seq` back in its place, as a dead letter's replay does.
        fn replay(&self, seq: u64) {
            let mut rows = self.rows.lock().unwrap();
            let at = rows.partition_point(|r| r.seq < seq);
            rows.insert(
                at,
                Row {
                    seq,
                    line: b"{}".to_vec(),
                },
            );
            self.replayed.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Drain for FakeQueue {
        fn peek(&self, max: usize) -> Result<Vec<Row>, StoreError> {
            Ok(self
                .rows
                .lock()
                .unwrap()
                .iter()
                .take(max)
                .cloned()
                .collect())
        }
        fn peek_from(&self, from: u64, max: usize) -> Option<Result<Vec<Row>, StoreError>> {
            let rows = self.rows.lock().unwrap();
            Some(Ok(rows
                .iter()
                .filter(|r| r.seq >= from)
                .take(max)
                .cloned()
                .collect()))
        }
        fn remove_delivered(&self, seqs: &[u64]) -> Result<u64, StoreError> {
            self.removed.lock().unwrap().push(seqs.to_vec());
            let mut rows = self.rows.lock().unwrap();
            let before = rows.len();
            rows.retain(|r| !seqs.contains(&r.seq));
            Ok((before - rows.len()) as u64)
        }
        fn replayed_total(&self) -> u64 {
            self.replayed.load(Ordering::SeqCst)
        }
        fn dead_letter(&self, seq: u64, _reason: &str) -> Result<bool, StoreError> {
            self.rows.lock().unwrap().retain(|r| r.seq != seq);
            self.dead.lock().unwrap().push(seq);
            Ok(true)
        }
        fn wait_appended(&self, seen: u64, timeout: Duration) -> u64 {
            std::thread::sleep(timeout.min(Duration::from_millis(5)));
            seen
        }
    }

    /// Answers with a scripted verdict per attempt, then `Delivered`; stops the deliverer once
    /// `stop_after` attempts were made.
    struct Script {
        verdicts: VecDeque<Verdict>,
        attempts: Arc<Mutex<Vec<Vec<u64>>>>,
        stop_after: usize,
        shutdown: Shutdown,
    }

    impl Destination for Script {
        fn send(&mut self, rows: &[Row]) -> Verdict {
            let mut attempts = self.attempts.lock().unwrap();
            attempts.push(rows.iter().map(|r| r.seq).collect());
            if attempts.len() >= self.stop_after {
                self.shutdown.trigger();
            }
            self.verdicts.pop_front().unwrap_or(Verdict::Delivered)
        }
    }

    /// Batches of 10, retries after 1 ms to 2 ms, no linger.
    fn config() -> DeliveryConfig {
        DeliveryConfig {
            batch_rows: 10,
            max_rows: 10,
            retry_initial: Duration::from_millis(1),
            retry_max: Duration::from_millis(2),
            linger: Duration::ZERO,
        }
    }

    fn run(
        rows: u64,
        verdicts: Vec<Verdict>,
        stop_after: usize,
    ) -> (Arc<FakeQueue>, Vec<Vec<u64>>, Arc<DeliveryStatus>) {
        run_with(config(), rows, verdicts, stop_after)
    }

    fn run_with(
        cfg: DeliveryConfig,
        rows: u64,
        verdicts: Vec<Verdict>,
        stop_after: usize,
    ) -> (Arc<FakeQueue>, Vec<Vec<u64>>, Arc<DeliveryStatus>) {
        let queue = FakeQueue::with_rows(rows);
        let shutdown = Shutdown::new();
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let status = Arc::new(DeliveryStatus::default());
        let d = Deliverer::new(
            "test",
            cfg,
            Arc::clone(&queue) as Arc<dyn Drain>,
            Box::new(Script {
                verdicts: verdicts.into(),
                attempts: Arc::clone(&attempts),
                stop_after,
                shutdown: shutdown.clone(),
            }),
            Arc::clone(&status),
            shutdown,
        );
        d.run();
        let attempts = attempts.lock().unwrap().clone();
        (queue, attempts, status)
    }

    fn refused() -> Verdict {
        Verdict::Refused {
            error: Failure::new("HTTP 422", "bad field"),
        }
    }

    #[test]
    fn rows_waiting_beyond_a_batch_go_in_one_attempt_of_up_to_max_rows_in_order() {
        let cfg = DeliveryConfig {
            max_rows: 20,
            ..config()
        };
        let (queue, attempts, _) = run_with(cfg, 45, vec![], 3);
        assert_eq!(attempts, vec![seqs(0, 19), seqs(20, 39), seqs(40, 44)]);
        assert!(queue.rows.lock().unwrap().is_empty());
    }

    #[test]
    fn a_failed_catch_up_batch_is_retried_at_half_its_size_and_grows_back_with_each_delivery() {
        let cfg = DeliveryConfig {
            batch_rows: 5,
            max_rows: 20,
            ..config()
        };
        let timeout = Verdict::Retry {
            error: Failure::new("timeout", "no answer within 10s"),
            after: None,
        };
        let (queue, attempts, _) = run_with(cfg, 40, vec![timeout], 4);
        assert_eq!(
            attempts,
            vec![seqs(0, 19), seqs(0, 9), seqs(10, 29), seqs(30, 39)]
        );
        assert!(queue.rows.lock().unwrap().is_empty());
    }

    #[test]
    fn a_refused_catch_up_batch_goes_again_in_batches_and_only_the_row_refused_alone_is_dead_lettered(
    ) {
        let cfg = DeliveryConfig {
            batch_rows: 5,
            max_rows: 20,
            ..config()
        };
        // The catch-up batch is refused, then the piece 5..9, then row 6 alone.
        let verdicts = vec![
            refused(),
            Verdict::Delivered,
            refused(),
            Verdict::Delivered,
            refused(),
        ];
        let (queue, attempts, _) = run_with(cfg, 20, verdicts, 10);
        assert_eq!(
            attempts,
            vec![
                seqs(0, 19),
                seqs(0, 4),
                seqs(5, 9),
                vec![5],
                vec![6],
                vec![7],
                vec![8],
                vec![9],
                seqs(10, 14),
                seqs(15, 19),
            ]
        );
        assert_eq!(*queue.dead.lock().unwrap(), vec![6]);
        assert!(queue.rows.lock().unwrap().is_empty());
    }

    #[test]
    fn an_auth_failure_keeps_every_row_and_holds_the_queue_until_the_receiver_takes_them() {
        let held = Verdict::Held {
            error: Failure::new("HTTP 401", "token expired"),
        };
        let (queue, attempts, status) = run(3, vec![held.clone(), held.clone(), held], 4);
        assert!(queue.dead.lock().unwrap().is_empty());
        assert_eq!(attempts.len(), 4);
        assert!(attempts.iter().all(|a| a == &vec![0, 1, 2]), "{attempts:?}");
        assert!(queue.rows.lock().unwrap().is_empty());
        assert!(!status.held());
        assert_eq!(status.holds_total.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_refused_batch_goes_row_by_row_and_only_the_row_refused_alone_is_dead_lettered() {
        // The batch is refused, then row 0 passes, row 1 is refused alone, row 2 passes.
        let (queue, attempts, _) = run(3, vec![refused(), Verdict::Delivered, refused()], 4);
        assert_eq!(attempts, vec![vec![0, 1, 2], vec![0], vec![1], vec![2]]);
        assert_eq!(*queue.dead.lock().unwrap(), vec![1]);
    }

    #[test]
    fn twenty_refusals_in_a_row_hold_the_queue_instead_of_dead_lettering_it() {
        let n = HOLD_AFTER_REFUSALS as usize;
        let verdicts = vec![refused(); n + 5];
        let (queue, _, status) = run(40, verdicts, n + 4);
        // The first 19 rows refused alone are dead letters; the 20th holds the queue (batch
        // refusals do not count: only a row refused alone says something about that row).
        assert_eq!(queue.dead.lock().unwrap().len(), n - 1);
        assert!(status.held());
        assert_eq!(queue.rows.lock().unwrap().len(), 40 - (n - 1));
        assert_eq!(status.last_error_class().as_deref(), Some("HTTP 422"));
    }

    /// Takes every batch at once (the seqs go to the test with the batch's reply) and is
    /// judged later, by the test.
    struct Later {
        handed: mpsc::Sender<(Vec<u64>, oneshot::Sender<Verdict>)>,
        /// Waits for a verdict begun.
        settles: Arc<AtomicU64>,
        start_overs: Arc<AtomicU64>,
    }

    impl Destination for Later {
        fn send(&mut self, rows: &[Row]) -> Verdict {
            match self.hand(rows) {
                Handed::Judged(verdict) => verdict,
                Handed::Pending(pending) => pending.wait(),
            }
        }
        fn hand(&mut self, rows: &[Row]) -> Handed {
            let (reply, verdict) = oneshot::channel();
            let _ = self
                .handed
                .send((rows.iter().map(|r| r.seq).collect(), reply));
            Handed::Pending(Pending::new(verdict))
        }
        fn settle(&mut self, pending: Pending) -> Verdict {
            self.settles.fetch_add(1, Ordering::SeqCst);
            pending.wait()
        }
        fn start_over(&mut self) {
            self.start_overs.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A deliverer running on its own thread into a [`Later`] destination.
    struct Pipeline {
        queue: Arc<FakeQueue>,
        handed: mpsc::Receiver<(Vec<u64>, oneshot::Sender<Verdict>)>,
        settles: Arc<AtomicU64>,
        start_overs: Arc<AtomicU64>,
        shutdown: Shutdown,
        thread: Option<JoinHandle<()>>,
    }

    impl Pipeline {
        fn start(rows: u64) -> Self {
            Self::start_on(FakeQueue::with_rows(rows))
        }

        fn start_on(queue: Arc<FakeQueue>) -> Self {
            let (tx, handed) = mpsc::channel();
            let settles = Arc::new(AtomicU64::new(0));
            let start_overs = Arc::new(AtomicU64::new(0));
            let shutdown = Shutdown::new();
            let d = Deliverer::new(
                "test",
                config(),
                Arc::clone(&queue) as Arc<dyn Drain>,
                Box::new(Later {
                    handed: tx,
                    settles: Arc::clone(&settles),
                    start_overs: Arc::clone(&start_overs),
                }),
                Arc::new(DeliveryStatus::default()),
                shutdown.clone(),
            );
            Self {
                queue,
                handed,
                settles,
                start_overs,
                shutdown,
                thread: Some(d.spawn().unwrap()),
            }
        }

        /// The next batch handed over: its seqs and its reply.
        fn next(&self) -> (Vec<u64>, oneshot::Sender<Verdict>) {
            self.handed
                .recv_timeout(Duration::from_secs(10))
                .expect("a batch handed over within 10 s")
        }

        fn removed(&self) -> Vec<Vec<u64>> {
            self.queue.removed.lock().unwrap().clone()
        }

        /// Waits (deadline 10 s) until `done` holds of the queue.
        fn wait_until(&self, what: &str, done: impl Fn(&FakeQueue) -> bool) {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !done(&self.queue) {
                assert!(Instant::now() < deadline, "{what}: {:?}", self.removed());
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    impl Drop for Pipeline {
        fn drop(&mut self) {
            self.shutdown.trigger();
            // Unjudged batches are answered (dropped) so the deliverer's wait ends.
            while let Ok((_, reply)) = self.handed.try_recv() {
                drop(reply);
            }
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    fn seqs(from: u64, to: u64) -> Vec<u64> {
        (from..=to).collect()
    }

    #[test]
    fn a_destination_that_confirms_later_is_handed_the_next_batches_before_the_first_is_confirmed()
    {
        let p = Pipeline::start(100);
        let mut replies = Vec::new();
        for i in 0..IN_FLIGHT as u64 {
            let (batch, reply) = p.next();
            assert_eq!(batch, seqs(i * 10, i * 10 + 9));
            replies.push(reply);
        }
        // Nothing is deleted before its destination confirmed it.
        assert!(p.removed().is_empty());
        assert_eq!(p.queue.rows.lock().unwrap().len(), 100);
        for reply in replies {
            reply.send(Verdict::Delivered).unwrap();
        }
        p.wait_until("the confirmed batches deleted", |q| {
            q.removed.lock().unwrap().len() == IN_FLIGHT
        });
    }

    #[test]
    fn rows_confirmed_out_of_order_are_deleted_in_queue_order_once_every_batch_before_them_is_confirmed(
    ) {
        let p = Pipeline::start(30);
        let (first, reply_first) = p.next();
        let (second, reply_second) = p.next();
        let (third, reply_third) = p.next();
        assert_eq!(
            (first, second, third),
            (seqs(0, 9), seqs(10, 19), seqs(20, 29))
        );
        // The third and second batches are confirmed before the first.
        reply_third.send(Verdict::Delivered).unwrap();
        reply_second.send(Verdict::Delivered).unwrap();
        assert!(p.removed().is_empty(), "{:?}", p.removed());
        reply_first.send(Verdict::Delivered).unwrap();
        p.wait_until("every row deleted", |q| q.rows.lock().unwrap().is_empty());
        assert_eq!(p.removed(), vec![seqs(0, 9), seqs(10, 19), seqs(20, 29)]);
    }

    #[test]
    fn a_failure_mid_pipeline_hands_every_unconfirmed_batch_again_in_order_and_deletes_none_of_them(
    ) {
        let p = Pipeline::start(40);
        let handed: Vec<_> = (0..4).map(|_| p.next()).collect();
        let mut replies = handed.into_iter().map(|(_, reply)| reply);
        let (one, two, three, four) = (
            replies.next().unwrap(),
            replies.next().unwrap(),
            replies.next().unwrap(),
            replies.next().unwrap(),
        );
        // The first is confirmed, the second fails (a lost connection); the destination said
        // nothing yet of the third, and confirmed the fourth (which a destination that keeps
        // the order would not do; the deliverer must not trust it).
        one.send(Verdict::Delivered).unwrap();
        two.send(Verdict::Retry {
            error: Failure::new("session ended", "the connection was lost"),
            after: None,
        })
        .unwrap();
        // (Given up by the time it comes, maybe.)
        let _ = four.send(Verdict::Delivered);
        // Handed again from the oldest row not confirmed, in order, after a start-over.
        let again: Vec<_> = (0..3).map(|_| p.next()).collect();
        assert_eq!(p.start_overs.load(Ordering::Relaxed), 1);
        assert_eq!(
            again.iter().map(|(b, _)| b.clone()).collect::<Vec<_>>(),
            vec![seqs(10, 19), seqs(20, 29), seqs(30, 39)]
        );
        // Only the first batch is deleted: the rest waits for the second round's verdicts.
        assert_eq!(p.removed(), vec![seqs(0, 9)]);
        assert_eq!(p.queue.rows.lock().unwrap().len(), 30);
        drop(three);
        for (_, reply) in again {
            reply.send(Verdict::Delivered).unwrap();
        }
        p.wait_until("every row deleted", |q| q.rows.lock().unwrap().is_empty());
        assert_eq!(
            p.removed(),
            vec![seqs(0, 9), seqs(10, 19), seqs(20, 29), seqs(30, 39)]
        );
    }

    #[test]
    fn a_dead_letter_replayed_below_the_batches_in_flight_goes_before_the_rows_after_them() {
        let p = Pipeline::start(30);
        let handed: Vec<_> = (0..3).map(|_| p.next()).collect();
        let mut replies = handed.into_iter().map(|(_, reply)| reply);
        replies.next().unwrap().send(Verdict::Delivered).unwrap();
        // The first batch is settled and deleted; the deliverer waits for the second's verdict.
        let deadline = Instant::now() + Duration::from_secs(10);
        while p.settles.load(Ordering::SeqCst) < 2 {
            assert!(Instant::now() < deadline, "{:?}", p.removed());
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(p.removed(), vec![seqs(0, 9)]);
        // Row 5 (a dead letter) is put back under its seq while rows 10..29 are on their way,
        // and new rows come after them.
        p.queue.replay(5);
        p.queue.rows.lock().unwrap().extend((30..40).map(|seq| Row {
            seq,
            line: b"{}".to_vec(),
        }));
        for reply in replies {
            reply.send(Verdict::Delivered).unwrap();
        }
        let (batch, reply) = p.next();
        assert_eq!(batch, [vec![5], seqs(30, 38)].concat());
        reply.send(Verdict::Delivered).unwrap();
        let (batch, reply) = p.next();
        assert_eq!(batch, vec![39]);
        reply.send(Verdict::Delivered).unwrap();
        p.wait_until("every row deleted", |q| q.rows.lock().unwrap().is_empty());
    }

    #[test]
    fn a_dead_letter_replayed_between_the_seqs_of_the_batches_in_flight_goes_before_the_rows_after_them(
    ) {
        // Row 12 is a dead letter: the batches in flight are 0..9, 10..20 without 12, 21..29.
        let queue = FakeQueue::with_rows(30);
        queue.rows.lock().unwrap().retain(|r| r.seq != 12);
        let p = Pipeline::start_on(queue);
        let handed: Vec<_> = (0..3).map(|_| p.next()).collect();
        assert_eq!(
            handed[1].0,
            [vec![10, 11], seqs(13, 20)].concat(),
            "the second batch"
        );
        // Row 12 is replayed while they are on their way, and new rows come after them.
        p.queue.replay(12);
        p.queue.rows.lock().unwrap().extend((30..40).map(|seq| Row {
            seq,
            line: b"{}".to_vec(),
        }));
        for (_, reply) in handed {
            reply.send(Verdict::Delivered).unwrap();
        }
        let (batch, reply) = p.next();
        assert_eq!(
            batch,
            [vec![12], seqs(30, 38)].concat(),
            "the replayed row first"
        );
        reply.send(Verdict::Delivered).unwrap();
        let (batch, reply) = p.next();
        assert_eq!(batch, vec![39]);
        reply.send(Verdict::Delivered).unwrap();
        p.wait_until("every row deleted", |q| q.rows.lock().unwrap().is_empty());
        assert!(
            p.removed().iter().all(|b| !b.contains(&12) || b[0] == 12),
            "row 12 deleted only with the batch that carried it: {:?}",
            p.removed()
        );
    }

    #[test]
    fn the_public_class_is_the_code_in_front_of_the_message() {
        assert_eq!(
            Failure::from_detail("HTTP 500: Code: 16. DB::Exception: row {\"card\":1}").class,
            "HTTP 500"
        );
        assert_eq!(
            Failure::from_detail("ERROR 23505: duplicate key (detail: Key (id)=(7))").class,
            "ERROR 23505"
        );
        assert_eq!(
            Failure::from_detail("no answer within 10s").class,
            "no answer within 10s"
        );
    }

    #[test]
    fn failure_details_are_cut_on_a_character_boundary() {
        let f = Failure::new("HTTP 400", "é".repeat(MAX_DETAIL));
        assert!(f.detail.len() <= MAX_DETAIL + 3);
        assert!(f.detail.ends_with("..."));
    }
}
