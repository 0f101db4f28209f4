//! One backfill: records from a file, offered in order, retried until accepted, with a durable
//! checkpoint.
//!
//! - Up to `max_in_flight` records are offered at once; their settlements are taken in file
//!   order, so the checkpoint only ever moves past records that were all acknowledged (stored,
//!   parked in the dead-letter queue, or taken by no flow) or malformed.
//! - A refusal (`Retry`, a full sink under `block`) makes that record wait `after` and be
//!   offered again, forever: a backfill never drops a record. A sink failure is retried the
//!   same way with a backoff of 1 s doubling to 30 s.
//! - The position is checkpointed after `checkpoint_every` settled records or
//!   `checkpoint_interval`, whichever comes first, and at every stop. After a crash the
//!   records settled since the last checkpoint are offered again: they keep their ids
//!   (`bf-<name>-<fingerprint>-<n>`), so a receiver drops the duplicates.
//! - A malformed record (bad JSON, wrong field count, missing key or timestamp, too long) is
//!   skipped with a log line and counted (`malformed`); it does not stop the backfill.
//! - A file that cannot be read (missing, not the checkpointed one) puts the backfill in
//!   state `error`; it tries again every 10 s.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesOrdered, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::checkpoint::{self, Checkpoint};
use super::config::BackfillConfig;
use super::reader::{self, Item, READ_AHEAD};
use crate::engine::Engine;
use crate::record::{Record, Settlement};
use crate::shutdown::Shutdown;

/// Wait before trying a failed file again.
const ERROR_RETRY: Duration = Duration::from_secs(10);
/// Shortest wait after a refusal.
const MIN_WAIT: Duration = Duration::from_millis(100);
/// Longest wait after repeated sink failures.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Malformed records logged one by one per run; after that, every power of two.
const LOGGED_MALFORMED: u64 = 100;

/// Counters of one backfill.
#[derive(Debug, Default)]
pub struct BackfillStats {
    /// Records acknowledged in this run.
    pub acked_total: AtomicU64,
    /// Offers refused or failed and retried.
    pub retries_total: AtomicU64,
    /// Checkpoints written.
    pub checkpoints_total: AtomicU64,
}

#[derive(Debug)]
struct Rate {
    since: Instant,
    count: u64,
    per_sec: f64,
}

#[derive(Debug)]
struct Progress {
    state: &'static str,
    done: u64,
    total: Option<u64>,
    malformed: u64,
    error: Option<String>,
    rate: Rate,
}

/// How one record ended.
enum Outcome {
    Acked,
    Malformed(String),
    /// The backfill is stopping; the record stays after the checkpoint.
    Aborted,
}

struct Settled {
    n: u64,
    end: u64,
    outcome: Outcome,
}

/// One configured backfill.
#[derive(Debug)]
pub struct BackfillSource {
    cfg: BackfillConfig,
    source: String,
    checkpoint_path: PathBuf,
    progress: Mutex<Progress>,
    /// Records waiting out a refusal or failure now.
    waiting: AtomicU64,
    /// Its counters.
    pub stats: BackfillStats,
}

impl BackfillSource {
    /// A backfill from its config; its checkpoint lives under `data_dir`.
    pub fn new(cfg: BackfillConfig, data_dir: &Path) -> Self {
        Self {
            source: format!("backfill/{}", cfg.name),
            checkpoint_path: checkpoint::path(data_dir, &cfg.name),
            cfg,
            progress: Mutex::new(Progress {
                state: "running",
                done: 0,
                total: None,
                malformed: 0,
                error: None,
                rate: Rate {
                    since: Instant::now(),
                    count: 0,
                    per_sec: 0.0,
                },
            }),
            waiting: AtomicU64::new(0),
            stats: BackfillStats::default(),
        }
    }

    /// Its name in flows and records: `backfill/<name>`.
    pub fn source(&self) -> &str {
        &self.source
    }

    fn progress(&self) -> std::sync::MutexGuard<'_, Progress> {
        // Plain numbers; a panic elsewhere cannot leave them inconsistent.
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its entry of `backfills` in `/api/status`.
    pub fn status(&self) -> Value {
        let p = self.progress();
        let state = if p.state == "running" && self.waiting.load(Ordering::Relaxed) > 0 {
            "waiting"
        } else {
            p.state
        };
        let elapsed = p.rate.since.elapsed().as_secs_f64();
        // A window that has run long without closing (nothing settles) shows its own rate.
        let rate = if elapsed > 2.0 {
            p.rate.count as f64 / elapsed
        } else {
            p.rate.per_sec
        };
        let rate = (rate * 10.0).round() / 10.0;
        let eta_secs = match p.total {
            Some(t) if p.done >= t => Some(0),
            Some(t) if rate > 0.0 => Some(((t - p.done) as f64 / rate).ceil() as u64),
            _ => None,
        };
        json!({
            "name": self.cfg.name,
            "source": self.source,
            "file": self.cfg.file.display().to_string(),
            "format": self.cfg.format.as_str(),
            "state": state,
            "done": p.done,
            "total": p.total,
            "rate_per_sec": rate,
            "eta_secs": eta_secs,
            "malformed": p.malformed,
            "retries_total": self.stats.retries_total.load(Ordering::Relaxed),
            "error": p.error,
        })
    }

    /// Runs the backfill until the file is done or the connector stops.
    pub async fn run(self: Arc<Self>, engine: Arc<Engine>, shutdown: Shutdown) {
        loop {
            match self.run_once(&engine, &shutdown).await {
                Ok(true) => {
                    let done = {
                        let mut p = self.progress();
                        p.state = "done";
                        p.done
                    };
                    log::info!("backfill done: backfill={} records={done}", self.cfg.name);
                    return;
                }
                Ok(false) => return,
                Err(e) => {
                    log::error!(
                        "backfill failed, trying again in {} s: backfill={} error=\"{e}\"",
                        ERROR_RETRY.as_secs(),
                        self.cfg.name
                    );
                    {
                        let mut p = self.progress();
                        p.state = "error";
                        p.error = Some(e);
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(ERROR_RETRY) => {},
                        _ = shutdown.wait() => return,
                    }
                }
            }
        }
    }

    async fn save(&self, cp: &Checkpoint) -> Result<(), String> {
        let (path, cp) = (self.checkpoint_path.clone(), cp.clone());
        tokio::task::spawn_blocking(move || checkpoint::save(&path, &cp))
            .await
            .map_err(|e| format!("checkpoint task: {e}"))??;
        self.stats.checkpoints_total.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// One pass over the file from the checkpoint: `Ok(true)` at its end, `Ok(false)` when
    /// stopped.
    async fn run_once(&self, engine: &Engine, shutdown: &Shutdown) -> Result<bool, String> {
        let path = self.checkpoint_path.clone();
        let from = tokio::task::spawn_blocking(move || checkpoint::load(&path))
            .await
            .map_err(|e| format!("checkpoint task: {e}"))??;
        let (tx, mut rx) = mpsc::channel(READ_AHEAD);
        reader::spawn(self.cfg.clone(), from.clone(), tx)
            .map_err(|e| format!("cannot start the reader thread: {e}"))?;
        let mut pos = from.unwrap_or_default();
        let opened = tokio::select! {
            item = rx.recv() => item,
            _ = shutdown.wait() => return Ok(false),
        };
        match opened {
            Some(Item::Opened {
                total,
                fingerprint,
                fingerprint_len,
            }) => {
                pos.fingerprint = fingerprint;
                pos.fingerprint_len = fingerprint_len;
                let mut p = self.progress();
                p.state = "running";
                p.error = None;
                p.total = Some(total);
                p.done = pos.records;
                p.malformed = pos.malformed;
                log::info!(
                    "backfill started: backfill={} file={} records={total} resuming_after={}",
                    self.cfg.name,
                    self.cfg.file.display(),
                    pos.records
                );
            }
            Some(Item::Failed(e)) => return Err(e),
            _ => return Err("the reader stopped before opening the file".into()),
        }

        let mut in_flight = FuturesOrdered::new();
        let (mut reading, mut stopped, mut aborted) = (true, false, false);
        let mut failure: Option<String> = None;
        let (mut unsaved, mut saved_at) = (0u64, Instant::now());
        loop {
            if !reading && in_flight.is_empty() {
                break;
            }
            tokio::select! {
                biased;
                _ = shutdown.wait(), if !stopped => {
                    stopped = true;
                    reading = false;
                }
                // Settled records wait at most `checkpoint_interval` for their checkpoint,
                // even when nothing settles after them (a sink refuses for long).
                _ = tokio::time::sleep_until((saved_at + self.cfg.checkpoint_interval).into()), if unsaved > 0 => {
                    if let Err(e) = self.save(&pos).await {
                        failure.get_or_insert(e);
                        reading = false;
                    }
                    unsaved = 0;
                    saved_at = Instant::now();
                }
                Some(s) = in_flight.next(), if !in_flight.is_empty() => {
                    let s: Settled = s;
                    if aborted {
                        continue;
                    }
                    match s.outcome {
                        Outcome::Aborted => {
                            aborted = true;
                            continue;
                        }
                        Outcome::Malformed(reason) => {
                            pos.malformed += 1;
                            self.malformed(s.n, &reason, pos.malformed);
                        }
                        Outcome::Acked => {
                            self.stats.acked_total.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    pos.offset = s.end;
                    pos.records = s.n;
                    self.advanced(&pos);
                    unsaved += 1;
                    if unsaved >= self.cfg.checkpoint_every
                        || saved_at.elapsed() >= self.cfg.checkpoint_interval
                    {
                        if let Err(e) = self.save(&pos).await {
                            failure.get_or_insert(e);
                            reading = false;
                        }
                        unsaved = 0;
                        saved_at = Instant::now();
                    }
                }
                item = rx.recv(), if reading && in_flight.len() < self.cfg.max_in_flight => {
                    match item {
                        Some(Item::Record { n, end_offset, result }) => {
                            in_flight.push_back(self.settle(engine, shutdown, n, end_offset, result));
                        }
                        Some(Item::Failed(e)) => {
                            failure.get_or_insert(e);
                            reading = false;
                        }
                        Some(Item::Opened { .. }) => {}
                        None => reading = false,
                    }
                }
            }
        }
        drop(rx);
        if unsaved > 0 {
            if let Err(e) = self.save(&pos).await {
                failure.get_or_insert(e);
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(!stopped && !aborted),
        }
    }

    /// Offers one record until it is accepted (or the backfill stops).
    async fn settle(
        &self,
        engine: &Engine,
        shutdown: &Shutdown,
        n: u64,
        end: u64,
        result: Result<Record, String>,
    ) -> Settled {
        let record = match result {
            Ok(r) => r,
            Err(reason) => {
                return Settled {
                    n,
                    end,
                    outcome: Outcome::Malformed(reason),
                }
            }
        };
        let mut failures = 0u32;
        loop {
            let (why, wait) = match engine.offer(record.clone()).await {
                Settlement::Stored | Settlement::Unrouted | Settlement::DeadLettered { .. } => {
                    return Settled {
                        n,
                        end,
                        outcome: Outcome::Acked,
                    };
                }
                Settlement::Retry { sink, after } => {
                    (format!("sink {sink} is full"), after.max(MIN_WAIT))
                }
                Settlement::Failed { sink, reason } => {
                    failures = failures.saturating_add(1);
                    let backoff = Duration::from_secs(1u64 << failures.min(6).saturating_sub(1));
                    (
                        format!("sink {sink} failed: {reason}"),
                        backoff.min(MAX_BACKOFF),
                    )
                }
            };
            let total = self.stats.retries_total.fetch_add(1, Ordering::Relaxed) + 1;
            if total.is_power_of_two() {
                log::warn!(
                    "backfill record refused, waiting to offer it again: backfill={} record={n} reason=\"{why}\" wait_ms={} retries_total={total}",
                    self.cfg.name,
                    wait.as_millis()
                );
            }
            self.waiting.fetch_add(1, Ordering::Relaxed);
            let stop = tokio::select! {
                _ = tokio::time::sleep(wait) => false,
                _ = shutdown.wait() => true,
            };
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            if stop {
                return Settled {
                    n,
                    end,
                    outcome: Outcome::Aborted,
                };
            }
        }
    }

    /// Logs and counts one malformed record (skipped).
    fn malformed(&self, n: u64, reason: &str, total: u64) {
        self.progress().malformed = total;
        if total <= LOGGED_MALFORMED || total.is_power_of_two() {
            log::warn!(
                "backfill record malformed, skipped: backfill={} record={n} reason=\"{reason}\" malformed_total={total}",
                self.cfg.name
            );
        }
    }

    fn advanced(&self, pos: &Checkpoint) {
        let mut p = self.progress();
        p.done = pos.records;
        p.rate.count += 1;
        let elapsed = p.rate.since.elapsed();
        if elapsed >= Duration::from_secs(1) {
            p.rate.per_sec = p.rate.count as f64 / elapsed.as_secs_f64();
            p.rate.count = 0;
            p.rate.since = Instant::now();
        }
    }
}
