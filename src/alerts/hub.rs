//! The alert hub: every bounded queue and every alerted loss counter, checked together every
//! `check_interval`, each change sent to the log and every configured channel.
//!
//! The hub knows the product's parts only as readings ([`QueueReading`], counters), built by
//! the daemon ([`super::queues`]); it owns the open alerts that `/api/status` lists
//! ([`super::report`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::alert::{now_rfc3339, queue_message, severity, Alert};
use super::channels::{ChannelHandle, Workers};
use super::config::AlertsConfig;
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
type ReadGroup = Box<dyn Fn() -> Watched + Send + Sync>;

/// One bounded queue as a part reports it at a check.
pub struct QueueReport {
    /// The queue's name (`push_queue`, `push_writer`, `orders-db`, ...).
    pub name: String,
    /// Its level, shared with its owner's status.
    pub tracker: Arc<LevelTracker>,
    /// The reading now.
    pub reading: QueueReading,
}

/// A loss counter (or a few) as a part reports it at a check: critical while it grows.
pub struct ComponentReport {
    /// Its name (`push_queue.write_errors`, `nats.failed`, ...).
    pub name: String,
    /// What its growth means, for the alert.
    pub message: &'static str,
    /// The counters now; their sum is watched.
    pub counters: Vec<(&'static str, u64)>,
}

/// What a group of parts (the sinks) reports at a check.
#[derive(Default)]
pub struct Watched {
    /// Their queues.
    pub queues: Vec<QueueReport>,
    /// Their alerted counters.
    pub components: Vec<ComponentReport>,
}

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

/// `d` in whole milliseconds, at least 1 (an interval of 0 would not tick).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Ticks at the hub's check interval, and follows it when a reload changes it.
pub struct Beat {
    every: Duration,
    interval: tokio::time::Interval,
}

impl Beat {
    /// Ticks every `every`, the first at once; a late tick delays the next ones.
    pub fn new(every: Duration) -> Self {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self { every, interval }
    }

    /// Waits for the next tick of `every`: when it is not the interval ticked so far (a
    /// reload changed it), the next tick is one new interval from now. Cancel safe.
    pub async fn tick(&mut self, every: Duration) {
        if every != self.every {
            *self = Self::new(every);
            self.interval.reset();
        }
        self.interval.tick().await;
    }
}

/// The hub.
pub struct Hub {
    pub(super) connector: String,
    /// Milliseconds between two checks (a reload changes it).
    check_interval_ms: AtomicU64,
    pub(super) queues: Vec<Queue>,
    components: Vec<Component>,
    /// Parts read as a whole at each check (the sinks), with their components' trackers.
    groups: Vec<ReadGroup>,
    group_trackers: Mutex<BTreeMap<String, GrowthTracker>>,
    /// The channels besides the log; a reload puts new ones in their place.
    pub(super) channels: RwLock<Vec<ChannelHandle>>,
    /// The channels' workers started, waited for at the stop.
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// Alerts written to the log (the channel that is always there).
    pub(super) log_total: AtomicU64,
    /// The last non-`ok` alert of each queue or component, by [`Alert::key`].
    pub(super) open: Mutex<BTreeMap<String, Alert>>,
    /// The outages alerted and not recovered yet.
    pub(super) outages: super::outages::Outages,
}

impl Hub {
    /// A hub for connector `connector` sending to `channels` (besides the log).
    pub fn new(connector: &str, check_interval: Duration, channels: Vec<ChannelHandle>) -> Self {
        Self {
            connector: connector.to_string(),
            check_interval_ms: AtomicU64::new(millis(check_interval)),
            queues: Vec::new(),
            components: Vec::new(),
            groups: Vec::new(),
            group_trackers: Mutex::new(BTreeMap::new()),
            channels: RwLock::new(channels),
            workers: Mutex::default(),
            log_total: AtomicU64::new(0),
            open: Mutex::new(BTreeMap::new()),
            outages: super::outages::Outages::new(Duration::from_secs(super::config::AFTER_SECS)),
        }
    }

    /// The same hub, alerting a problem once it has lasted `after`.
    pub fn with_outages_after(mut self, after: Duration) -> Self {
        self.outages = super::outages::Outages::new(after);
        self
    }

    /// Time between two checks.
    pub fn check_interval(&self) -> Duration {
        Duration::from_millis(self.check_interval_ms.load(Ordering::Relaxed))
    }

    /// Starts the channels' `workers` on the current runtime; each ends on `shutdown`, or
    /// when its channel is replaced (after the alert it is sending).
    pub fn start_workers(&self, workers: Workers, shutdown: &Shutdown) {
        let started = workers.spawn(shutdown);
        self.workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(started);
    }

    /// A reload's new `telemetry.alerts:`: its channels in the place of the old ones (each
    /// old worker sends what it holds, then ends), its check interval and its `after`. Needs
    /// the runtime.
    pub fn reconfigure(&self, cfg: &AlertsConfig, shutdown: &Shutdown) {
        let (channels, workers) = super::channels::build(cfg);
        self.start_workers(workers, shutdown);
        // The old handles dropped here close their workers' queues.
        *self.channels.write().unwrap_or_else(|e| e.into_inner()) = channels;
        self.check_interval_ms
            .store(millis(cfg.check_interval), Ordering::Relaxed);
        self.outages.set_after(cfg.after);
    }

    /// Waits, after the stop, until every channel's worker ended.
    pub async fn join_workers(&self) {
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|e| e.into_inner()));
        for w in workers {
            let _ = w.await;
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

    /// Watches a group of parts read together at each check; the components' counters now
    /// are their baselines.
    pub fn watch(&mut self, read: impl Fn() -> Watched + Send + Sync + 'static) {
        let now = read();
        let mut trackers = self
            .group_trackers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for c in now.components {
            let total = c.counters.iter().map(|(_, v)| v).sum();
            trackers.insert(c.name, GrowthTracker::new(total));
        }
        drop(trackers);
        self.groups.push(Box::new(read));
    }

    /// Every queue now: the groups' (the sinks first), then the single ones.
    pub(super) fn queue_reports(&self) -> Vec<QueueReport> {
        let mut out: Vec<QueueReport> = self.groups.iter().flat_map(|g| g().queues).collect();
        out.extend(self.queues.iter().map(|q| QueueReport {
            name: q.name.clone(),
            tracker: Arc::clone(&q.tracker),
            reading: (q.read)(),
        }));
        out
    }

    /// One check of everything at `now`; returns the alerts raised (already sent).
    pub fn check(&self, now: Instant) -> Vec<Alert> {
        let mut raised = Vec::new();
        let watched: Vec<Watched> = self.groups.iter().map(|g| g()).collect();
        let singles = self.queues.iter().map(|q| QueueReport {
            name: q.name.clone(),
            tracker: Arc::clone(&q.tracker),
            reading: (q.read)(),
        });
        let singles: Vec<QueueReport> = singles.collect();
        for q in watched.iter().flat_map(|w| &w.queues).chain(&singles) {
            let r = &q.reading;
            let fill = r.fill_pct();
            let Some(change) = q.tracker.check(fill, r.losses_total(), now) else {
                continue;
            };
            raised.push(Alert {
                connector: self.connector.clone(),
                queue: Some(q.name.clone()),
                component: None,
                kind: None,
                hint: None,
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
        let mut trackers = self
            .group_trackers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let singles = self
            .components
            .iter()
            .map(|c| (c.name.clone(), c.message, (c.read)(), Some(&c.tracker)));
        let grouped = watched
            .iter()
            .flat_map(|w| &w.components)
            .map(|c| (c.name.clone(), c.message, c.counters.clone(), None));
        for (name, message, counters, tracker) in grouped.chain(singles) {
            let total = counters.iter().map(|(_, v)| v).sum();
            let tracker = match tracker {
                Some(t) => t,
                None => trackers
                    .entry(name.clone())
                    .or_insert_with(|| GrowthTracker::new(total)),
            };
            let Some(change) = tracker.check(total, now) else {
                continue;
            };
            let (level, message) = if change.critical {
                ("critical", message.to_string())
            } else {
                ("ok", "no new losses for a minute".to_string())
            };
            raised.push(Alert {
                connector: self.connector.clone(),
                queue: None,
                component: Some(name),
                kind: None,
                hint: None,
                level,
                severity: if change.critical { "critical" } else { "info" },
                message,
                fill_pct: None,
                counters: counters.into_iter().collect(),
                time: now_rfc3339(),
                repeat: change.repeat,
            });
        }
        drop(trackers);
        for alert in &raised {
            self.raise(alert);
        }
        raised
    }

    pub(super) fn raise(&self, alert: &Alert) {
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
        for c in self
            .channels
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            c.offer(alert);
        }
    }

    /// Checks every `check_interval` until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: Shutdown) {
        let mut beat = Beat::new(self.check_interval());
        loop {
            tokio::select! {
                _ = beat.tick(self.check_interval()) => {},
                _ = shutdown.wait() => return,
            }
            self.check(tokio::time::Instant::now().into_std());
        }
    }
}
