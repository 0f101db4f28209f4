//! The alert hub: every bounded queue and every alerted loss counter, checked together every
//! `check_interval`, each change sent to the log and every configured channel.
//!
//! The hub knows the product's parts only as readings ([`QueueReading`], counters), built by
//! the daemon ([`super::queues`]); it owns the open alerts that `/api/status` lists
//! ([`super::report`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::alert::{now_rfc3339, queue_message, severity, Alert};
use super::channels::ChannelHandle;
use crate::admission::level::{GrowthTracker, LevelTracker};
use crate::shutdown::Shutdown;

/// Where a queue lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// On disk (LMDB).
    Disk,
    /// In memory, lost on a crash.
    Memory,
    /// A channel between two tasks or threads.
    Channel,
}

impl QueueKind {
    /// `disk`, `memory` or `channel`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disk => "disk",
            Self::Memory => "memory",
            Self::Channel => "channel",
        }
    }
}

/// One look at a bounded queue.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueReading {
    /// Where it lives.
    pub kind: QueueKind,
    /// `block` (refuses at the quota) or `evict_oldest`.
    pub on_full: &'static str,
    /// The bound.
    pub quota: u64,
    /// `bytes`, `rows` or `messages`.
    pub quota_unit: &'static str,
    /// Used now, in `quota_unit`.
    pub used: u64,
    /// Records refused at the bound (their sources retry).
    pub blocked_total: u64,
    /// Records deleted at the bound (data gaps).
    pub evicted_total: u64,
    /// Records dropped or refused on the way in (channel full).
    pub dropped_total: u64,
}

impl QueueReading {
    /// `used / quota` in percent, two decimals.
    pub fn fill_pct(&self) -> f64 {
        if self.quota == 0 {
            return 0.0;
        }
        (self.used as f64 * 10_000.0 / self.quota as f64).round() / 100.0
    }

    /// Refusals, evictions and drops: any growth since the last check makes the queue `full`.
    pub fn losses_total(&self) -> u64 {
        self.blocked_total + self.evicted_total + self.dropped_total
    }
}

type ReadQueue = Box<dyn Fn() -> QueueReading + Send + Sync>;
type ReadCounters = Box<dyn Fn() -> Vec<(&'static str, u64)> + Send + Sync>;

/// A bounded queue the hub watches.
pub struct Queue {
    pub(super) name: String,
    pub(super) tracker: Arc<LevelTracker>,
    pub(super) read: ReadQueue,
}

impl Queue {
    /// A queue named `name` whose level lives in `tracker` (shared with its owner's status).
    pub fn new(
        name: &str,
        tracker: Arc<LevelTracker>,
        read: impl Fn() -> QueueReading + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.to_string(),
            tracker,
            read: Box::new(read),
        }
    }
}

/// A loss counter (or a few) the hub watches: critical while it grows.
pub struct Component {
    name: String,
    message: &'static str,
    tracker: GrowthTracker,
    read: ReadCounters,
}

impl Component {
    /// A component named `name`; `message` says what its growth means; `read` gives its
    /// counters, whose sum is watched. The counters now are the baseline.
    pub fn new(
        name: &str,
        message: &'static str,
        read: impl Fn() -> Vec<(&'static str, u64)> + Send + Sync + 'static,
    ) -> Self {
        let total = read().iter().map(|(_, v)| v).sum();
        Self {
            name: name.to_string(),
            message,
            tracker: GrowthTracker::new(total),
            read: Box::new(read),
        }
    }
}

/// The hub.
pub struct Hub {
    connector: String,
    check_interval: Duration,
    pub(super) queues: Vec<Queue>,
    components: Vec<Component>,
    pub(super) channels: Vec<ChannelHandle>,
    /// Alerts written to the log (the channel that is always there).
    pub(super) log_total: AtomicU64,
    /// The last non-`ok` alert of each queue or component, by [`Alert::key`].
    pub(super) open: Mutex<BTreeMap<String, Alert>>,
}

impl Hub {
    /// A hub for connector `connector` sending to `channels` (besides the log).
    pub fn new(connector: &str, check_interval: Duration, channels: Vec<ChannelHandle>) -> Self {
        Self {
            connector: connector.to_string(),
            check_interval,
            queues: Vec::new(),
            components: Vec::new(),
            channels,
            log_total: AtomicU64::new(0),
            open: Mutex::new(BTreeMap::new()),
        }
    }

    /// Watches a queue.
    pub fn add_queue(&mut self, queue: Queue) {
        self.queues.push(queue);
    }

    /// Watches a loss counter.
    pub fn add_component(&mut self, component: Component) {
        self.components.push(component);
    }

    /// One check of everything at `now`; returns the alerts raised (already sent).
    pub fn check(&self, now: Instant) -> Vec<Alert> {
        let mut raised = Vec::new();
        for q in &self.queues {
            let r = (q.read)();
            let fill = r.fill_pct();
            let Some(change) = q.tracker.check(fill, r.losses_total(), now) else {
                continue;
            };
            raised.push(Alert {
                connector: self.connector.clone(),
                queue: Some(q.name.clone()),
                component: None,
                level: change.level.as_str(),
                severity: severity(change.level),
                message: queue_message(change.level, r.on_full).to_string(),
                fill_pct: Some(fill),
                counters: BTreeMap::from([
                    ("blocked_total", r.blocked_total),
                    ("evicted_total", r.evicted_total),
                    ("dropped_total", r.dropped_total),
                ]),
                time: now_rfc3339(),
                repeat: change.repeat,
            });
        }
        for c in &self.components {
            let counters = (c.read)();
            let total = counters.iter().map(|(_, v)| v).sum();
            let Some(change) = c.tracker.check(total, now) else {
                continue;
            };
            let (level, message) = if change.critical {
                ("critical", c.message.to_string())
            } else {
                ("ok", "no new losses for a minute".to_string())
            };
            raised.push(Alert {
                connector: self.connector.clone(),
                queue: None,
                component: Some(c.name.clone()),
                level,
                severity: if change.critical { "critical" } else { "info" },
                message,
                fill_pct: None,
                counters: counters.into_iter().collect(),
                time: now_rfc3339(),
                repeat: change.repeat,
            });
        }
        for alert in &raised {
            self.raise(alert);
        }
        raised
    }

    fn raise(&self, alert: &Alert) {
        alert.log();
        self.log_total.fetch_add(1, Ordering::Relaxed);
        {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            if alert.is_ok() {
                open.remove(&alert.key());
            } else {
                open.insert(alert.key(), alert.clone());
            }
        }
        for c in &self.channels {
            c.offer(alert);
        }
    }

    /// Checks every `check_interval` until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: Shutdown) {
        let mut tick = tokio::time::interval(self.check_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {},
                _ = shutdown.wait() => return,
            }
            self.check(tokio::time::Instant::now().into_std());
        }
    }
}
