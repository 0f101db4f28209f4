//! The alert state machine of bounded queues.
//!
//! Levels (spec, "Alerts"): `high` at 80 % or more of the quota; `full` at the quota, or when a
//! record was refused or evicted since the last check; `ok` back below 80 %. The checker runs
//! every few seconds ([`CHECK_EVERY`]); a `full` alert repeats every [`REPEAT_FULL`] while it
//! lasts. Channels: the log, for now.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

/// How often the checker looks at every queue.
pub const CHECK_EVERY: Duration = Duration::from_secs(5);
/// How often a lasting `full` alert is raised again.
pub const REPEAT_FULL: Duration = Duration::from_secs(600);
/// Fill percentage from which a queue is `high`.
pub const HIGH_PCT: f64 = 80.0;

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
            }),
        }
    }
}

/// An alert to send: a change of level, or a `full` that lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alert {
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
        Level::classify(fill_pct, losses_total.saturating_sub(s.seen_total))
    }

    /// One check: advances the baseline and returns the alert to raise, if any.
    pub fn check(&self, fill_pct: f64, losses_total: u64, now: Instant) -> Option<Alert> {
        let mut s = self.lock();
        let level = Level::classify(fill_pct, losses_total.saturating_sub(s.seen_total));
        s.seen_total = losses_total;
        let changed = level != s.level;
        s.level = level;
        let repeat = !changed
            && level == Level::Full
            && s.last_raised
                .is_some_and(|t| now.duration_since(t) >= REPEAT_FULL);
        if changed || repeat {
            s.last_raised = Some(now);
            Some(Alert { level, repeat })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
