//! One schedule: a task that sleeps until the next tick and offers it as a record.
//!
//! Ticks are not replayed, by design (the delivery promise): a tick is offered once, and
//! whatever its settlement, the next tick is the next one in the future. A tick more than a
//! short grace late (the process stalled, the box slept, the clock jumped) is not fired at all
//! but counted in `missed_total`. A sink that refuses a tick (full under `block`) loses it:
//! the engine counts the refusal in `engine.stats.backpressured`, and the schedule's last
//! result says `backpressured`.
//!
//! Times are wall-clock Unix milliseconds (cron needs the calendar); the task sleeps in slices
//! of at most a minute, so a clock change is noticed within one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::config::{ScheduleConfig, When};
use crate::engine::Engine;
use crate::record::{now_ms, Record, Settlement};
use crate::shutdown::Shutdown;
use crate::time::{format_duration, rfc3339};

/// Longest single sleep: a wall-clock change is noticed within this.
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// Most a tick may be late and still fire (less for short intervals: half the interval).
const GRACE_MS: u64 = 5_000;
/// Most ticks [`next_after`] counts as missed in one go.
const MAX_COUNTED: u64 = 100_000;

/// Counters of one schedule, shown in `/api/schedules`.
#[derive(Debug, Default)]
pub struct ScheduleStats {
    /// Ticks offered to the engine and settled.
    pub ticks_total: AtomicU64,
    /// Ticks a full sink refused: lost by design (also in `engine.stats.backpressured`).
    pub backpressured_total: AtomicU64,
    /// Ticks a sink failed or a node parked in the dead-letter queue.
    pub errors_total: AtomicU64,
    /// Ticks not fired because the schedule was too late for them (not replayed).
    pub missed_total: AtomicU64,
}

#[derive(Debug, Default)]
struct Ticks {
    next_ms: Option<u64>,
    last_ms: Option<u64>,
    last_result: Option<String>,
}

/// One configured schedule.
#[derive(Debug)]
pub struct ScheduleSource {
    cfg: ScheduleConfig,
    source: String,
    ticks: Mutex<Ticks>,
    /// Its counters.
    pub stats: ScheduleStats,
}

/// The first tick strictly after `now_ms`. `every` ticks count from `anchor_ms` (the start).
pub fn next_tick(when: &When, anchor_ms: u64, now_ms: u64) -> Option<u64> {
    match when {
        When::Every(d) => {
            let period = (d.as_millis() as u64).max(1);
            let k = now_ms.saturating_sub(anchor_ms) / period + 1;
            Some(anchor_ms.saturating_add(k.saturating_mul(period)))
        }
        When::Cron(_, cron) => cron.next_after(now_ms),
    }
}

/// After tick `due` (fired or skipped) at `now_ms`: the next tick in the future, and how many
/// ticks lie strictly between the two (missed, not replayed).
pub fn next_after(when: &When, anchor_ms: u64, due: u64, now_ms: u64) -> (Option<u64>, u64) {
    let Some(next) = next_tick(when, anchor_ms, now_ms.max(due)) else {
        return (None, 0);
    };
    let missed = match when {
        When::Every(d) => ((next - due) / (d.as_millis() as u64).max(1)).saturating_sub(1),
        When::Cron(..) => {
            let mut n = 0;
            let mut t = due;
            while let Some(x) = next_tick(when, anchor_ms, t).filter(|x| *x < next) {
                n += 1;
                t = x;
                if n >= MAX_COUNTED {
                    break;
                }
            }
            n
        }
    };
    (Some(next), missed)
}

/// Whether tick `due` may still fire at `now_ms`, or is too late and counts as missed.
pub fn on_time(when: &When, due: u64, now_ms: u64) -> bool {
    let grace = match when {
        When::Every(d) => GRACE_MS.min(d.as_millis() as u64 / 2),
        When::Cron(..) => GRACE_MS,
    };
    now_ms.saturating_sub(due) <= grace
}

impl ScheduleSource {
    /// A schedule from its config.
    pub fn new(cfg: ScheduleConfig) -> Self {
        Self {
            source: format!("schedule/{}", cfg.name),
            cfg,
            ticks: Mutex::new(Ticks::default()),
            stats: ScheduleStats::default(),
        }
    }

    /// Its name in flows and records: `schedule/<name>`.
    pub fn source(&self) -> &str {
        &self.source
    }

    fn ticks(&self) -> std::sync::MutexGuard<'_, Ticks> {
        // Plain values; a panic elsewhere cannot leave them inconsistent.
        self.ticks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its entry of `/api/schedules` (and of `schedules` in `/api/status`).
    pub fn status(&self) -> Value {
        let t = self.ticks();
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut v = json!({
            "name": self.cfg.name,
            "source": self.source,
            "next_tick": t.next_ms.map(rfc3339),
            "last_tick": t.last_ms.map(rfc3339),
            "last_result": t.last_result,
            "ticks_total": l(&self.stats.ticks_total),
            "backpressured_total": l(&self.stats.backpressured_total),
            "errors_total": l(&self.stats.errors_total),
            "missed_total": l(&self.stats.missed_total),
        });
        match &self.cfg.when {
            When::Every(d) => v["every"] = json!(format_duration(*d)),
            When::Cron(text, _) => v["cron"] = json!(text),
        }
        v
    }

    /// Ticks until shutdown.
    pub async fn run(self: Arc<Self>, engine: Arc<Engine>, shutdown: Shutdown) {
        let anchor = now_ms();
        let when = &self.cfg.when;
        let mut next = next_tick(when, anchor, anchor);
        while let Some(due) = next {
            self.ticks().next_ms = Some(due);
            loop {
                let now = now_ms();
                if now >= due {
                    break;
                }
                let wait = Duration::from_millis(due - now).min(MAX_SLEEP);
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {},
                    _ = shutdown.wait() => return,
                }
            }
            if on_time(when, due, now_ms()) {
                self.tick(&engine, due).await;
            } else {
                self.missed(1);
            }
            let (after, missed) = next_after(when, anchor, due, now_ms());
            if missed > 0 {
                self.missed(missed);
            }
            next = after;
        }
        self.ticks().next_ms = None;
        log::warn!("schedule has no further tick: schedule={}", self.cfg.name);
    }

    fn missed(&self, n: u64) {
        let total = self.stats.missed_total.fetch_add(n, Ordering::Relaxed) + n;
        log::warn!(
            "schedule ticks missed, not replayed: schedule={} missed={n} missed_total={total}",
            self.cfg.name
        );
    }

    /// Offers one tick and records its result.
    async fn tick(&self, engine: &Engine, due: u64) {
        let mut record = Record::from_value(self.source.clone(), &self.cfg.name, &self.cfg.payload);
        record.ts_ms = due;
        let settlement = engine.offer(record).await;
        let result = self.settled(&settlement);
        let mut t = self.ticks();
        t.last_ms = Some(due);
        t.last_result = Some(result);
        // Counted once settled, with its result in place.
        self.stats.ticks_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts and logs a tick's settlement; returns its `last_result`.
    fn settled(&self, settlement: &Settlement) -> String {
        let name = &self.cfg.name;
        match settlement {
            Settlement::Stored | Settlement::Unrouted => "ok".into(),
            Settlement::Retry { sink, .. } => {
                let total = self
                    .stats
                    .backpressured_total
                    .fetch_add(1, Ordering::Relaxed)
                    + 1;
                if total.is_power_of_two() {
                    log::error!(
                        "alert: schedule tick refused by a full sink, not replayed: schedule={name} sink={sink} backpressured_total={total}"
                    );
                }
                "backpressured".into()
            }
            Settlement::DeadLettered { id } => {
                self.stats.errors_total.fetch_add(1, Ordering::Relaxed);
                let entry = id.map_or("-".to_string(), |i| i.to_string());
                format!(
                    "error: a node failed, tick parked in the dead-letter queue (entry {entry})"
                )
            }
            Settlement::Failed { sink, reason } => {
                let total = self.stats.errors_total.fetch_add(1, Ordering::Relaxed) + 1;
                log::error!(
                    "schedule tick lost, a sink failed: schedule={name} sink={sink} reason=\"{reason}\" errors_total={total}"
                );
                format!("error: sink {sink} failed: {reason}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::schedule::cron::Cron;
    use crate::time::parse_rfc3339;

    fn every(secs: u64) -> When {
        When::Every(Duration::from_secs(secs))
    }

    #[test]
    fn every_ticks_count_from_the_start() {
        let w = every(30);
        assert_eq!(next_tick(&w, 1_000, 1_000), Some(31_000));
        assert_eq!(next_tick(&w, 1_000, 30_999), Some(31_000));
        assert_eq!(next_tick(&w, 1_000, 31_000), Some(61_000));
    }

    #[test]
    fn missed_ticks_are_not_replayed_after_a_stall() {
        let w = every(1);
        // Tick 1000 was offered, and the offer took until 4500: 2000, 3000 and 4000 are
        // missed; the next tick is the next future one.
        assert_eq!(next_after(&w, 0, 1_000, 4_500), (Some(5_000), 3));
        // No stall: nothing missed.
        assert_eq!(next_after(&w, 0, 1_000, 1_010), (Some(2_000), 0));
        // A tick found more than the grace late is not fired at all.
        assert!(on_time(&w, 1_000, 1_400));
        assert!(!on_time(&w, 1_000, 1_600));
        assert!(!on_time(&every(60), 60_000, 66_000));

        let c = When::Cron("*/15 * * * *".into(), Cron::parse("*/15 * * * *").unwrap());
        let due = parse_rfc3339("2024-05-01T12:00:00Z").unwrap();
        let now = parse_rfc3339("2024-05-01T12:50:00Z").unwrap();
        let (next, missed) = next_after(&c, 0, due, now);
        assert_eq!(next, parse_rfc3339("2024-05-01T13:00:00Z"));
        assert_eq!(missed, 3);
    }
}
