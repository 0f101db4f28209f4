//! What a device shows, whatever its protocol: connection state, counters, start jitter, the
//! last error and refusal with what they mean, and its points' live values (the
//! [`crate::sources::catalogue`]; kept small by `kept`). Written by the device's task on the
//! pollers' thread, read by `/api/status`, `/metrics` ([`metrics`]), Sparkplug and the status
//! page.
//!
//! Counters are atomics; the rest sits behind short-held mutexes, never held across an
//! `.await`. A counter a protocol has no use for stays 0.

mod kept;
pub mod metrics;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::Notify;

pub use metrics::write_metrics;

use kept::GroupValues;

use crate::record::now_ms;
use crate::sources::catalogue::{DeviceDef, Live};
use crate::trends::Trends;

/// Start-jitter samples kept per device: the percentiles cover the last this many polls.
pub const JITTER_WINDOW: usize = 1024;

/// A device's connection state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ConnState {
    /// Not connected yet, or connecting.
    Connecting = 0,
    /// The last request was answered (a session is active).
    Connected = 1,
    /// The circuit breaker waits before the next try.
    Backoff = 2,
    /// Stopped.
    Stopped = 3,
}

impl ConnState {
    /// Its name in `/api/status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Connected => "connected",
            Self::Backoff => "backoff",
            Self::Stopped => "stopped",
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Connected,
            2 => Self::Backoff,
            3 => Self::Stopped,
            _ => Self::Connecting,
        }
    }
}

/// A fixed ring of the last [`JITTER_WINDOW`] start delays, in microseconds.
#[derive(Debug, Default)]
struct Ring {
    samples: Vec<u64>,
    next: usize,
}

impl Ring {
    fn push(&mut self, v: u64) {
        if self.samples.len() < JITTER_WINDOW {
            self.samples.push(v);
        } else if let Some(slot) = self.samples.get_mut(self.next) {
            *slot = v;
        }
        self.next = (self.next + 1) % JITTER_WINDOW;
    }

    /// (p50, p99) in microseconds; zeros without samples.
    fn percentiles(&self) -> (u64, u64) {
        if self.samples.is_empty() {
            return (0, 0);
        }
        let mut s = self.samples.clone();
        s.sort_unstable();
        let at = |q: f64| {
            let i = ((s.len() - 1) as f64 * q).round() as usize;
            s.get(i).copied().unwrap_or(0)
        };
        (at(0.50), at(0.99))
    }
}

/// One poll group's figures.
#[derive(Debug)]
pub struct GroupStatus {
    /// The group's name.
    pub name: String,
    /// Requests its last cycle sent.
    pub requests_per_cycle: AtomicU64,
}

/// A remembered text with what it means.
#[derive(Debug, Clone)]
struct Noted {
    text: String,
    hint: Option<String>,
}

/// One device's figures.
#[derive(Debug)]
pub struct DeviceStatus {
    /// What the config says of the device and its points.
    pub def: DeviceDef,
    /// Completed polls (and subscription notifications turned into records).
    pub polls_total: AtomicU64,
    /// Read requests sent (polls, and commands' read backs).
    pub requests_total: AtomicU64,
    /// Write requests sent for commands, whatever their outcome.
    pub writes_total: AtomicU64,
    /// Requests that timed out (each dropped and reopened the connection).
    pub timeouts_total: AtomicU64,
    /// Transport, framing, read and connect errors.
    pub errors_total: AtomicU64,
    /// Refusals the device answered (a Modbus exception): data, its points got quality bad.
    pub exceptions_total: AtomicU64,
    /// Points read with a bad quality.
    pub bad_points_total: AtomicU64,
    /// Connections opened.
    pub connects_total: AtomicU64,
    /// Sessions re-established after a lost connection.
    pub reconnects_total: AtomicU64,
    /// Sessions dropped by a no-data watchdog.
    pub watchdog_resets_total: AtomicU64,
    /// Samples dropped after the hold (also in `engine.stats.backpressure_lost`).
    pub lost_total: AtomicU64,
    /// Pushed changes dropped because the device's channel was full.
    pub notifications_dropped_total: AtomicU64,
    /// Polls skipped because the previous one ran past their start.
    pub skipped_total: AtomicU64,
    /// Unix milliseconds of the last poll; 0 before the first.
    pub last_poll_ms: AtomicU64,
    /// Duration of the last poll in microseconds.
    pub last_duration_us: AtomicU64,
    /// Unix milliseconds of the last sign of life (an answer, a notification, a keep-alive).
    last_alive_ms: AtomicU64,
    state: AtomicU8,
    jitter: Mutex<Ring>,
    last_error: Mutex<Option<Noted>>,
    last_exception: Mutex<Option<Noted>>,
    /// Fields of the protocol shown besides the common ones (set at start or at connect).
    details: Mutex<Map<String, Value>>,
    /// Per group, in config order.
    pub groups: Vec<GroupStatus>,
    values: Mutex<Vec<GroupValues>>,
    /// Where each poll's values also go, for the status page's trends.
    trends: Option<Arc<Trends>>,
    /// Woken at each counted poll and change of state (the catalogue's, for the OPC-UA
    /// server's values).
    watcher: OnceLock<Arc<Notify>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these short locks leaves plain data: keep using it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl DeviceStatus {
    /// A device that has not connected yet.
    pub fn new(def: DeviceDef) -> Self {
        let details = def
            .details
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect();
        Self {
            polls_total: AtomicU64::new(0),
            requests_total: AtomicU64::new(0),
            writes_total: AtomicU64::new(0),
            timeouts_total: AtomicU64::new(0),
            errors_total: AtomicU64::new(0),
            exceptions_total: AtomicU64::new(0),
            bad_points_total: AtomicU64::new(0),
            connects_total: AtomicU64::new(0),
            reconnects_total: AtomicU64::new(0),
            watchdog_resets_total: AtomicU64::new(0),
            lost_total: AtomicU64::new(0),
            notifications_dropped_total: AtomicU64::new(0),
            skipped_total: AtomicU64::new(0),
            last_poll_ms: AtomicU64::new(0),
            last_duration_us: AtomicU64::new(0),
            last_alive_ms: AtomicU64::new(0),
            state: AtomicU8::new(ConnState::Connecting as u8),
            jitter: Mutex::new(Ring::default()),
            last_error: Mutex::new(None),
            last_exception: Mutex::new(None),
            details: Mutex::new(details),
            groups: def
                .groups
                .iter()
                .map(|g| GroupStatus {
                    name: g.name.clone(),
                    requests_per_cycle: AtomicU64::new(0),
                })
                .collect(),
            values: Mutex::new(
                def.groups
                    .iter()
                    .map(|g| GroupValues::new(&g.name, &def.points))
                    .collect(),
            ),
            trends: None,
            watcher: OnceLock::new(),
            def,
        }
    }

    /// The same status, feeding each poll's values to `trends` too.
    pub fn with_trends(mut self, trends: Arc<Trends>) -> Self {
        self.trends = Some(trends);
        self
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.def.name
    }

    /// The connection state.
    pub fn state(&self) -> ConnState {
        ConnState::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Sets the connection state.
    pub fn set_state(&self, s: ConnState) {
        if self.state.swap(s as u8, Ordering::Relaxed) != s as u8 {
            self.wake();
        }
    }

    /// Wakes `watcher` at each counted poll and change of state from now on.
    pub fn watch(&self, watcher: Arc<Notify>) {
        let _ = self.watcher.set(watcher);
    }

    fn wake(&self) {
        if let Some(w) = self.watcher.get() {
            w.notify_one();
        }
    }

    /// Counts a poll whose values are in (see [`Self::values_in`]) and says so.
    pub fn count_poll(&self) {
        self.polls_total.fetch_add(1, Ordering::Relaxed);
        self.wake();
    }

    /// Records how late a poll started against its schedule.
    pub fn record_jitter(&self, late: Duration) {
        lock(&self.jitter).push(micros(late));
    }

    /// Start jitter (p50, p99) over the last polls.
    pub fn jitter(&self) -> (Duration, Duration) {
        let (a, b) = lock(&self.jitter).percentiles();
        (Duration::from_micros(a), Duration::from_micros(b))
    }

    /// Remembers the last error and what it means (shown until the next one), uncounted.
    pub fn note_error(&self, text: String, hint: Option<String>) {
        *lock(&self.last_error) = Some(Noted { text, hint });
    }

    /// Counts an error in `errors_total` and remembers it.
    pub fn error(&self, text: String, hint: Option<String>) {
        self.errors_total.fetch_add(1, Ordering::Relaxed);
        self.note_error(text, hint);
    }

    /// The last error.
    pub fn last_error(&self) -> Option<String> {
        lock(&self.last_error).as_ref().map(|n| n.text.clone())
    }

    /// Remembers the last refusal the device answered (e.g. `exception 2 "illegal data
    /// address" at holding register 100 (point p)`) and what it means.
    pub fn set_exception(&self, text: String, hint: Option<String>) {
        *lock(&self.last_exception) = Some(Noted { text, hint });
    }

    /// Shows `key` in the device's `/api/status` entry (a value the protocol learned at
    /// connect, say).
    pub fn set_detail(&self, key: &str, value: Value) {
        lock(&self.details).insert(key.to_string(), value);
    }

    /// Marks a sign of life now.
    pub fn alive(&self) {
        self.last_alive_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// Unix ms of the last sign of life; 0 before any.
    pub fn last_alive_ms(&self) -> u64 {
        self.last_alive_ms.load(Ordering::Relaxed)
    }

    /// Takes the points group `g` read at `ts_ms` (by name, `{"value","quality",..}`): they
    /// replace the group's last ones (points not in `points` keep theirs), their bad ones are
    /// counted, and their values go to the trends.
    pub fn values_in(&self, g: usize, points: &Map<String, Value>, ts_ms: u64) {
        let Some(group) = self.groups.get(g) else {
            return;
        };
        let bad = points
            .values()
            .filter(|p| p.get("quality").is_some_and(|q| q != "good"))
            .count() as u64;
        self.bad_points_total.fetch_add(bad, Ordering::Relaxed);
        if let Some(trends) = &self.trends {
            trends.record_points(&self.def.name, &group.name, points);
        }
        if let Some(kept) = lock(&self.values).get_mut(g) {
            kept.take(&self.def.points, points, ts_ms);
        }
    }

    /// Counts a finished poll (or notification) that took `took`, now.
    pub fn polled(&self, took: Duration) {
        self.last_poll_ms.store(now_ms(), Ordering::Relaxed);
        self.last_duration_us.store(micros(took), Ordering::Relaxed);
        self.count_poll();
    }

    /// The last values of every group, by group name (`null` for a group not read yet).
    pub fn values(&self) -> Map<String, Value> {
        let values = lock(&self.values);
        self.groups
            .iter()
            .zip(values.iter())
            .map(|(g, v)| (g.name.clone(), v.json(&self.def.points)))
            .collect()
    }

    /// The points read bad, as `<group>/<point>` with their entries (`{"value": null,
    /// "quality": "bad", ..}`), without the JSON of the good ones.
    pub fn bad_points(&self) -> Vec<(String, Value)> {
        let values = lock(&self.values);
        self.groups
            .iter()
            .zip(values.iter())
            .flat_map(|(g, v)| {
                v.bad(&self.def.points)
                    .into_iter()
                    .map(move |(point, entry)| (format!("{}/{point}", g.name), entry))
            })
            .collect()
    }

    /// The live value of point `name` of group `group`, once read.
    pub fn live(&self, group: &str, name: &str) -> Option<Live> {
        let g = self.groups.iter().position(|x| x.name == group)?;
        let values = lock(&self.values);
        let kept = values.get(g)?.get(&self.def.points, name)?;
        Some(Live {
            value: kept.value(),
            good: kept.good(),
            ts_ms: kept.ts_ms,
            detail: kept.detail(),
        })
    }

    /// Requests of one cycle of every group, summed.
    pub fn requests_per_cycle(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| g.requests_per_cycle.load(Ordering::Relaxed))
            .sum()
    }

    /// The `/api/status` `devices[]` entry.
    pub fn to_json(&self) -> Value {
        let mut doc = self.summary_json();
        if let Some(o) = doc.as_object_mut() {
            o.insert("values".into(), Value::Object(self.values()));
        }
        doc
    }

    /// The `/api/status` `devices[]` entry without its `values`: what the health model reads
    /// at each check, without the JSON of every point.
    pub fn summary_json(&self) -> Value {
        let (p50, p99) = self.jitter();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let error = lock(&self.last_error).clone();
        let exception = lock(&self.last_exception).clone();
        let state = self.state();
        let mut doc = json!({
            "name": self.def.name,
            "source": self.def.source,
            "protocol": self.def.protocol,
            "address": self.def.address,
            "template": self.def.template,
            "state": state.as_str(),
            "connected": state == ConnState::Connected,
            "last_poll_ms": Some(l(&self.last_poll_ms)).filter(|&ms| ms > 0),
            "poll_duration_ms": l(&self.last_duration_us) as f64 / 1000.0,
            "jitter_p50_ms": ms(p50),
            "jitter_p99_ms": ms(p99),
            "polls_total": l(&self.polls_total),
            "requests_total": l(&self.requests_total),
            "requests_per_cycle": self.requests_per_cycle(),
            "writes_total": l(&self.writes_total),
            "groups": self.groups.iter().map(|g| json!({
                "name": g.name,
                "requests_per_cycle": l(&g.requests_per_cycle),
            })).collect::<Vec<_>>(),
            "errors_total": l(&self.errors_total),
            "timeouts_total": l(&self.timeouts_total),
            "exceptions_total": l(&self.exceptions_total),
            "bad_points_total": l(&self.bad_points_total),
            "connects_total": l(&self.connects_total),
            "reconnects_total": l(&self.reconnects_total),
            "watchdog_resets_total": l(&self.watchdog_resets_total),
            "skipped_total": l(&self.skipped_total),
            "lost_total": l(&self.lost_total),
            "samples_lost_total": l(&self.lost_total),
            "notifications_dropped_total": l(&self.notifications_dropped_total),
            "last_error": error.as_ref().map(|n| &n.text),
            "last_error_hint": error.as_ref().and_then(|n| n.hint.as_ref()),
            "last_exception": exception.as_ref().map(|n| &n.text),
            "last_exception_hint": exception.as_ref().and_then(|n| n.hint.as_ref()),
        });
        if let Some(o) = doc.as_object_mut() {
            for (k, v) in lock(&self.details).iter() {
                o.insert(k.clone(), v.clone());
            }
        }
        doc
    }
}
