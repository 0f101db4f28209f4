//! What an OPC-UA device shows in `/api/status` (`devices[]`) and `/metrics`: connection
//! state, last poll, poll duration, start jitter, errors and the last values.
//!
//! Written by the device's tasks on the pollers' thread, read by the HTTP server: counters
//! are atomics, the rest sits behind short-held mutexes (never held across an `.await`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::telemetry::prometheus::{Kind, Page};
use crate::trends::Trends;

/// How many start-jitter samples the percentiles are taken over (the most recent ones).
pub const JITTER_WINDOW: usize = 1024;

/// The connection state of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Not connected yet, or between sessions.
    Connecting = 0,
    /// A session is active.
    Connected = 1,
    /// The connection was lost; the session is being re-established.
    Reconnecting = 2,
    /// Stopped (shutdown).
    Stopped = 3,
}

impl State {
    /// The name shown in `/api/status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Connected => "connected",
            Self::Reconnecting => "reconnecting",
            Self::Stopped => "stopped",
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Connected,
            2 => Self::Reconnecting,
            3 => Self::Stopped,
            _ => Self::Connecting,
        }
    }
}

/// The most recent start-jitter samples, in microseconds, in a ring of [`JITTER_WINDOW`].
#[derive(Debug, Default)]
struct Jitter {
    samples: Vec<u64>,
    next: usize,
}

impl Jitter {
    fn add(&mut self, us: u64) {
        if self.samples.len() < JITTER_WINDOW {
            self.samples.push(us);
        } else if let Some(slot) = self.samples.get_mut(self.next) {
            *slot = us;
        }
        self.next = (self.next + 1) % JITTER_WINDOW;
    }

    /// (p50, p99) in microseconds; zeros before the first sample.
    fn percentiles(&self) -> (u64, u64) {
        if self.samples.is_empty() {
            return (0, 0);
        }
        let mut sorted = self.samples.clone();
        sorted.sort_unstable();
        let at = |q: f64| {
            let i = ((sorted.len() - 1) as f64 * q).round() as usize;
            sorted.get(i).copied().unwrap_or(0)
        };
        (at(0.50), at(0.99))
    }
}

/// One device's live numbers.
#[derive(Debug)]
pub struct DeviceStatus {
    /// The device's name.
    pub name: String,
    /// Its endpoint URL.
    pub endpoint: String,
    /// The template it was made from.
    pub template: Option<String>,
    state: AtomicU8,
    /// Group polls and subscription notifications turned into records.
    pub polls_total: AtomicU64,
    /// Failed reads, failed connects, failed subscription calls.
    pub errors_total: AtomicU64,
    /// Points that came back bad (unknown node, bad status).
    pub bad_points_total: AtomicU64,
    /// Sessions re-established after a lost connection.
    pub reconnects_total: AtomicU64,
    /// Sessions dropped by the no-data watchdog.
    pub watchdog_resets_total: AtomicU64,
    /// Samples dropped after the hold (also in `engine.stats.backpressure_lost`).
    pub samples_lost_total: AtomicU64,
    /// Subscription notifications dropped because the device's notification channel was
    /// full (its cap: [`super::client::NOTIFICATION_CAP`]).
    pub notifications_dropped_total: AtomicU64,
    last_poll_ms: AtomicU64,
    last_poll_duration_us: AtomicU64,
    /// Unix ms of the last sign of life (a read answer, a notification, a keep-alive).
    last_alive_ms: AtomicU64,
    jitter: Mutex<Jitter>,
    last_error: Mutex<Option<String>>,
    /// What the last error means ([`crate::sources::hints`]), when the words cover it.
    last_error_hint: Mutex<Option<String>>,
    /// group → node name → point JSON.
    last_values: Mutex<BTreeMap<String, Map<String, Value>>>,
    /// Where each poll's values also go, for the status page's trends.
    trends: Option<Arc<Trends>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these short locks leaves plain data: keep using it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl DeviceStatus {
    /// A device that has not connected yet.
    pub fn new(name: &str, endpoint: &str) -> Self {
        Self {
            name: name.to_string(),
            endpoint: endpoint.to_string(),
            template: None,
            state: AtomicU8::new(State::Connecting as u8),
            polls_total: AtomicU64::new(0),
            errors_total: AtomicU64::new(0),
            bad_points_total: AtomicU64::new(0),
            reconnects_total: AtomicU64::new(0),
            watchdog_resets_total: AtomicU64::new(0),
            samples_lost_total: AtomicU64::new(0),
            notifications_dropped_total: AtomicU64::new(0),
            last_poll_ms: AtomicU64::new(0),
            last_poll_duration_us: AtomicU64::new(0),
            last_alive_ms: AtomicU64::new(0),
            jitter: Mutex::new(Jitter::default()),
            last_error: Mutex::new(None),
            last_error_hint: Mutex::new(None),
            last_values: Mutex::new(BTreeMap::new()),
            trends: None,
        }
    }

    /// The same status, naming the template the device was made from.
    pub fn with_template(mut self, template: Option<String>) -> Self {
        self.template = template;
        self
    }

    /// The same status, feeding each poll's values to `trends` too.
    pub fn with_trends(mut self, trends: Arc<Trends>) -> Self {
        self.trends = Some(trends);
        self
    }

    /// The connection state.
    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Sets the connection state.
    pub fn set_state(&self, state: State) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    /// Counts an error and keeps its text as the last error, with what it means.
    pub fn error(&self, text: String) {
        self.errors_total.fetch_add(1, Ordering::Relaxed);
        *lock(&self.last_error_hint) = crate::sources::hints::opcua_hint(&text);
        *lock(&self.last_error) = Some(text);
    }

    /// Marks a sign of life now.
    pub fn alive(&self) {
        self.last_alive_ms
            .store(crate::record::now_ms(), Ordering::Relaxed);
    }

    /// Unix ms of the last sign of life; 0 before any.
    pub fn last_alive_ms(&self) -> u64 {
        self.last_alive_ms.load(Ordering::Relaxed)
    }

    /// Records one poll's start jitter (how late it started against its schedule).
    pub fn jitter(&self, late: Duration) {
        lock(&self.jitter).add(late.as_micros().min(u128::from(u64::MAX)) as u64);
    }

    /// Records a finished poll (or notification) of `group` with its points.
    pub fn polled(&self, group: &str, took: Duration, points: &Map<String, Value>) {
        self.polls_total.fetch_add(1, Ordering::Relaxed);
        self.last_poll_ms
            .store(crate::record::now_ms(), Ordering::Relaxed);
        self.last_poll_duration_us.store(
            took.as_micros().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
        let bad = points
            .values()
            .filter(|p| p["quality"] != json!("good"))
            .count() as u64;
        self.bad_points_total.fetch_add(bad, Ordering::Relaxed);
        if let Some(trends) = &self.trends {
            trends.record_points(&self.name, group, points);
        }
        let mut values = lock(&self.last_values);
        let slot = values.entry(group.to_string()).or_default();
        for (k, v) in points {
            slot.insert(k.clone(), v.clone());
        }
    }

    /// Start jitter (p50, p99) over the window.
    pub fn jitter_percentiles(&self) -> (Duration, Duration) {
        let (p50, p99) = lock(&self.jitter).percentiles();
        (Duration::from_micros(p50), Duration::from_micros(p99))
    }

    /// Unix ms of the last poll; 0 before any.
    pub fn last_poll_ms(&self) -> u64 {
        self.last_poll_ms.load(Ordering::Relaxed)
    }

    /// Duration of the last poll.
    pub fn last_poll_duration(&self) -> Duration {
        Duration::from_micros(self.last_poll_duration_us.load(Ordering::Relaxed))
    }

    /// The `devices[]` entry of `/api/status`.
    pub fn to_json(&self) -> Value {
        let (p50, p99) = self.jitter_percentiles();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let last_poll = self.last_poll_ms();
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        json!({
            "name": self.name,
            "protocol": "opcua",
            "source": format!("opcua/{}", self.name),
            "endpoint": self.endpoint,
            "template": self.template,
            "state": self.state().as_str(),
            "connected": self.state() == State::Connected,
            "last_poll_ms": if last_poll == 0 { Value::Null } else { json!(last_poll) },
            "poll_duration_ms": ms(self.last_poll_duration()),
            "jitter_p50_ms": ms(p50),
            "jitter_p99_ms": ms(p99),
            "polls_total": l(&self.polls_total),
            "errors_total": l(&self.errors_total),
            "bad_points_total": l(&self.bad_points_total),
            "reconnects_total": l(&self.reconnects_total),
            "watchdog_resets_total": l(&self.watchdog_resets_total),
            "samples_lost_total": l(&self.samples_lost_total),
            "notifications_dropped_total": l(&self.notifications_dropped_total),
            "last_error": *lock(&self.last_error),
            "last_error_hint": *lock(&self.last_error_hint),
            "values": *lock(&self.last_values),
        })
    }
}

/// The per-device families on `/metrics`: one sample per device, labelled `device` and
/// `protocol`.
pub fn write_metrics(devices: &[std::sync::Arc<DeviceStatus>], p: &mut Page) {
    type Pick = fn(&DeviceStatus) -> f64;
    let families: [(&str, Kind, &str, Pick); 9] = [
        (
            "opex_connector_opcua_device_connected",
            Kind::Gauge,
            "1 while the device's connection or session is up.",
            |d| f64::from(u8::from(d.state() == State::Connected)),
        ),
        (
            "opex_connector_opcua_device_polls_total",
            Kind::Counter,
            "Group polls and subscription notifications turned into records.",
            |d| d.polls_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_opcua_device_errors_total",
            Kind::Counter,
            "Failed reads, connects and subscription calls.",
            |d| d.errors_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_opcua_device_bad_points_total",
            Kind::Counter,
            "Points read with a bad quality (unknown node, bad status).",
            |d| d.bad_points_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_opcua_device_reconnects_total",
            Kind::Counter,
            "Sessions re-established after a lost connection.",
            |d| d.reconnects_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_opcua_device_watchdog_resets_total",
            Kind::Counter,
            "Sessions dropped by the no-data watchdog.",
            |d| d.watchdog_resets_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_opcua_device_samples_lost_total",
            Kind::Counter,
            "Samples dropped after the poller's hold (also in backpressure_lost).",
            |d| {
                (d.samples_lost_total.load(Ordering::Relaxed)
                    + d.notifications_dropped_total.load(Ordering::Relaxed)) as f64
            },
        ),
        (
            "opex_connector_opcua_device_last_poll_timestamp_seconds",
            Kind::Gauge,
            "Unix time of the device's last poll.",
            |d| d.last_poll_ms() as f64 / 1000.0,
        ),
        (
            "opex_connector_opcua_device_poll_duration_seconds",
            Kind::Gauge,
            "Duration of the device's last poll.",
            |d| d.last_poll_duration().as_secs_f64(),
        ),
    ];
    for (name, kind, help, pick) in families {
        let samples: Vec<(Vec<(&str, &str)>, f64)> = devices
            .iter()
            .map(|d| {
                (
                    vec![("device", d.name.as_str()), ("protocol", "opcua")],
                    pick(d),
                )
            })
            .collect();
        let refs: Vec<(&[(&str, &str)], f64)> =
            samples.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
        p.family(name, kind, help, &refs);
    }
    let samples: Vec<(Vec<(&str, &str)>, f64)> = devices
        .iter()
        .flat_map(|d| {
            let (p50, p99) = d.jitter_percentiles();
            [("0.5", p50), ("0.99", p99)].map(|(q, v)| {
                (
                    vec![
                        ("device", d.name.as_str()),
                        ("protocol", "opcua"),
                        ("quantile", q),
                    ],
                    v.as_secs_f64(),
                )
            })
        })
        .collect();
    let refs: Vec<(&[(&str, &str)], f64)> =
        samples.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
    p.family(
        "opex_connector_opcua_device_poll_start_jitter_seconds",
        Kind::Gauge,
        "How late polls started against their schedule, over the last 1024 polls.",
        &refs,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_percentiles_cover_the_most_recent_window_only() {
        let s = DeviceStatus::new("d", "opc.tcp://h:1");
        for _ in 0..JITTER_WINDOW {
            s.jitter(Duration::from_millis(50));
        }
        for i in 0..JITTER_WINDOW as u64 {
            s.jitter(Duration::from_micros(i));
        }
        let (p50, p99) = s.jitter_percentiles();
        assert!(p50 < Duration::from_millis(1), "{p50:?}");
        assert!(p99 < Duration::from_millis(2), "{p99:?}");
    }

    #[test]
    fn a_poll_keeps_the_last_values_per_group_and_counts_bad_points() {
        let s = DeviceStatus::new("d", "opc.tcp://h:1");
        let mut points = Map::new();
        points.insert(
            "t".into(),
            json!({"value": 1, "quality": "good", "status": "Good"}),
        );
        points.insert(
            "x".into(),
            json!({"value": null, "quality": "bad", "status": "BadNodeIdUnknown"}),
        );
        s.polled("fast", Duration::from_millis(3), &points);
        let j = s.to_json();
        assert_eq!(j["values"]["fast"]["t"]["value"], json!(1));
        assert_eq!(j["bad_points_total"], json!(1));
        assert_eq!(j["polls_total"], json!(1));
        assert_eq!(j["state"], json!("connecting"));
    }
}
