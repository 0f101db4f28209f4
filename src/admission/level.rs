//! The two state machines the checker advances: [`LevelTracker`] for a bounded queue and
//! [`GrowthTracker`] for a loss counter of a component.
//!
//! Queue levels (spec, "Alerts"): `high` at 80 % or more of the quota; `full` at the quota, or
//! when a record was refused or evicted since the last check; `ok` back below 80 %. A `full`
//! alert repeats every [`REPEAT_FULL`] while it lasts. A `full` queue between 80 % and its
//! quota stays `full` until [`QUIET`] passed without a refusal or eviction: sources retrying
//! every few seconds against a queue at 99 % would otherwise flip it `full` / `high` at every
//! check, one alert each time.
//!
//! A component (a counter of losses the spec says are alerted) is `critical` when its counter
//! grew since the last check, repeated at most every [`REPEAT_FULL`] while it keeps growing,
//! and `ok` again once it has not grown for [`QUIET`]: a counter that grows every
//! few checks stays one open alert instead of a flood of critical/ok pairs.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

/// How often the checker looks at every queue, unless `telemetry.alerts.check_interval_secs`
/// says otherwise.
pub const CHECK_EVERY: Duration = Duration::from_secs(5);
/// How often a lasting `full` alert is raised again.
pub const REPEAT_FULL: Duration = Duration::from_secs(600);
/// Fill percentage from which a queue is `high`.
pub const HIGH_PCT: f64 = 80.0;
/// How long a component's counter must stay still before its alert closes with `ok`, and a
/// `full` queue between 80 % and its quota must go without a refusal or eviction before it
/// is only `high` again.
pub const QUIET: Duration = Duration::from_secs(60);

/// The level of one bounded queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Below 80 %.
    Ok,
    /// 80 % or more: the destination is slow or down.
    High,
    /// At the quota, or records refused or evicted since the last check.
    Full,
}

impl Level {
    /// The level for a fill percentage and the losses or refusals since the last check.
    pub fn classify(fill_pct: f64, refused_or_evicted: u64) -> Self {
        if fill_pct >= 100.0 || refused_or_evicted > 0 {
            Self::Full
        } else if fill_pct >= HIGH_PCT {
            Self::High
        } else {
            Self::Ok
        }
    }

    /// The spelling in JSON and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::High => "high",
            Self::Full => "full",
        }
    }

    /// 0, 1, 2 for the metric.
    pub fn as_number(self) -> u8 {
        self as u8
    }
}

#[derive(Debug)]
struct State {
    /// Refusals and evictions counted at the last check.
    seen_total: u64,
    level: Level,
    last_raised: Option<Instant>,
    /// When refusals or evictions last grew.
    last_loss: Option<Instant>,
}

/// Tracks one queue between checks.
#[derive(Debug)]
pub struct LevelTracker {
    state: Mutex<State>,
}

impl Default for LevelTracker {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                seen_total: 0,
                level: Level::Ok,
                last_raised: None,
                last_loss: None,
            }),
        }
    }
}

/// A change to announce: a change of level, or a `full` that lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// The new level.
    pub level: Level,
    /// True when this repeats a lasting `full`.
    pub repeat: bool,
}

impl LevelTracker {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Plain numbers inside; consistent after every statement.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The level now, without advancing the checker: `losses_total` is the running count of
    /// refusals and evictions.
    pub fn peek(&self, fill_pct: f64, losses_total: u64) -> Level {
        let s = self.lock();
        match Level::classify(fill_pct, losses_total.saturating_sub(s.seen_total)) {
            // Held `full` until the checker demotes it.
            Level::High if s.level == Level::Full => Level::Full,
            level => level,
        }
    }

    /// One check: advances the baseline and returns the alert to raise, if any.
    pub fn check(&self, fill_pct: f64, losses_total: u64, now: Instant) -> Option<Change> {
        let mut s = self.lock();
        let mut level = Level::classify(fill_pct, losses_total.saturating_sub(s.seen_total));
        if losses_total > s.seen_total {
            s.last_loss = Some(now);
        }
        let held = s
            .last_loss
            .is_some_and(|t| now.saturating_duration_since(t) < QUIET);
        if level == Level::High && s.level == Level::Full && held {
            level = Level::Full;
        }
        s.seen_total = losses_total;
        let changed = level != s.level;
        s.level = level;
        let repeat = !changed
            && level == Level::Full
            && s.last_raised
                .is_some_and(|t| now.duration_since(t) >= REPEAT_FULL);
        if changed || repeat {
            s.last_raised = Some(now);
            Some(Change { level, repeat })
        } else {
            None
        }
    }
}

/// A change of a component: `critical` (the counter grew) or back to `ok`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Growth {
    /// True while the counter grows, false for the recovery notice.
    pub critical: bool,
    /// True when this repeats a lasting `critical`.
    pub repeat: bool,
}

#[derive(Debug)]
struct GrowthState {
    seen_total: u64,
    open: bool,
    last_growth: Option<Instant>,
    last_raised: Option<Instant>,
}

/// Tracks one loss counter between checks.
#[derive(Debug)]
pub struct GrowthTracker {
    state: Mutex<GrowthState>,
}

impl GrowthTracker {
    /// A tracker whose baseline is the counter now (counters restored from disk at start are
    /// not news).
    pub fn new(total_now: u64) -> Self {
        Self {
            state: Mutex::new(GrowthState {
                seen_total: total_now,
                open: false,
                last_growth: None,
                last_raised: None,
            }),
        }
    }

    /// True while its alert is open.
    pub fn is_open(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).open
    }

    /// One check: advances the baseline and returns the change to raise, if any.
    pub fn check(&self, total: u64, now: Instant) -> Option<Growth> {
        // Plain numbers inside; consistent after every statement.
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let grew = total > s.seen_total;
        s.seen_total = total;
        if grew {
            s.last_growth = Some(now);
            let due = s
                .last_raised
                .is_none_or(|t| now.duration_since(t) >= REPEAT_FULL);
            if !s.open || due {
                let repeat = s.open;
                s.open = true;
                s.last_raised = Some(now);
                return Some(Growth {
                    critical: true,
                    repeat,
                });
            }
            return None;
        }
        let quiet = s.last_growth.is_none_or(|t| now.duration_since(t) >= QUIET);
        if s.open && quiet {
            s.open = false;
            s.last_raised = None;
            return Some(Growth {
                critical: false,
                repeat: false,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_every_few_checks_keep_one_full_alert_until_a_quiet_minute_passes() {
        let t = LevelTracker::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(t.check(95.0, 1, at(0)).unwrap().level, Level::Full);
        // Sources retry every few seconds: refusals in some checks, none in others.
        for (i, secs) in (5..55).step_by(5).enumerate() {
            assert_eq!(
                t.check(95.0, 1 + i as u64 / 2, at(secs)),
                None,
                "at {secs} s"
            );
            assert_eq!(t.peek(95.0, 1 + i as u64 / 2), Level::Full);
        }
        // The last refusal was at 45 s; a minute later the queue is only high.
        assert_eq!(t.check(95.0, 5, at(100)), None);
        assert_eq!(t.check(95.0, 5, at(105)).unwrap().level, Level::High);
        // Below 80 % it is ok at once, without waiting for the quiet minute.
        assert_eq!(t.check(99.0, 6, at(110)).unwrap().level, Level::Full);
        assert_eq!(t.check(50.0, 6, at(115)).unwrap().level, Level::Ok);
    }

    #[test]
    fn a_growing_counter_is_critical_repeats_every_ten_minutes_and_closes_after_a_quiet_minute() {
        let g = GrowthTracker::new(7);
        let t0 = Instant::now();
        assert_eq!(g.check(7, t0), None, "the start value is the baseline");
        let first = g.check(8, t0 + Duration::from_secs(5)).unwrap();
        assert!(first.critical && !first.repeat);
        // Still growing, but not ten minutes yet.
        assert_eq!(g.check(9, t0 + Duration::from_secs(10)), None);
        // Still within the quiet minute: stays open.
        assert_eq!(g.check(9, t0 + Duration::from_secs(40)), None);
        let again = g
            .check(10, t0 + Duration::from_secs(5) + REPEAT_FULL)
            .unwrap();
        assert!(again.critical && again.repeat);
        let t1 = t0 + Duration::from_secs(5) + REPEAT_FULL;
        assert_eq!(g.check(10, t1 + Duration::from_secs(30)), None);
        let ok = g.check(10, t1 + QUIET).unwrap();
        assert!(!ok.critical);
        assert!(!g.is_open());
        assert_eq!(g.check(10, t1 + REPEAT_FULL), None);
    }

    #[test]
    fn ok_high_full_repeat_then_ok() {
        let t = LevelTracker::default();
        let t0 = Instant::now();
        assert_eq!(t.check(10.0, 0, t0), None);
        assert_eq!(t.check(85.0, 0, t0).unwrap().level, Level::High);
        assert_eq!(t.check(90.0, 3, t0).unwrap().level, Level::Full);
        // Still refusing, but not yet ten minutes: nothing new.
        assert_eq!(t.check(90.0, 5, t0 + Duration::from_secs(60)), None);
        let again = t.check(90.0, 9, t0 + REPEAT_FULL).unwrap();
        assert!(again.repeat);
        // No refusal since the last check and below 80 %: recovery.
        assert_eq!(t.check(10.0, 9, t0 + REPEAT_FULL).unwrap().level, Level::Ok);
    }
}
