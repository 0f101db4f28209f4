//! [`Trends`]: the table behind one lock, with its clock and counters. The pollers feed it
//! every point of every poll ([`Trends::record_points`]: one lock per poll, no allocation once
//! the series exist), the sampler the connector's own series; `GET /api/trends` and the status
//! read it.
//!
//! The lock is held for a few hash look-ups per poll, or for copying at most a request's
//! series (`http/trends.rs` bounds how many), never across an `.await`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use serde_json::{json, Map, Value};

use super::series::{BUCKETS, BUCKET_MS, SERIES_BYTES};
use super::table::{Copied, Table, Taken};
use crate::telemetry::events;
use crate::telemetry::prometheus::{Kind, Page};

/// The most series kept: with [`SERIES_BYTES`] each (5.8 KiB) and their names, at most about
/// 12 MiB.
pub const MAX_SERIES: usize = 2_000;

/// Where the trends read the time: unix milliseconds.
pub type Clock = Box<dyn Fn() -> u64 + Send + Sync>;

/// The trends' counters.
#[derive(Debug, Default)]
pub struct TrendStats {
    /// Series given up at the bound for a new one.
    pub dropped_series_total: AtomicU64,
    /// Samples of new series not kept: the table was at its bound with every series live.
    pub refused_samples_total: AtomicU64,
}

struct Inner {
    table: Table,
    /// The name being looked up, kept to reuse its memory.
    name: String,
}

/// A copy of some series' last buckets, all on the same grid.
#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    /// Unix ms of the first bucket's start.
    pub start_ms: u64,
    /// Buckets per series.
    pub buckets: usize,
    /// Each asked name, with its buckets when it is kept.
    pub series: Vec<(String, Option<Copied>)>,
}

/// The connector's trends.
pub struct Trends {
    inner: Mutex<Inner>,
    clock: Clock,
    /// Its counters.
    pub stats: TrendStats,
}

impl std::fmt::Debug for Trends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trends")
            .field("series", &self.lock().table.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Default for Trends {
    fn default() -> Self {
        Self::new(MAX_SERIES, Box::new(crate::record::now_ms))
    }
}

/// A point's sample: a good number, or a good boolean as 0 or 1. A bare number or boolean
/// counts too.
fn sample_value(point: &Value) -> Option<f64> {
    let value = match point {
        Value::Object(p) => {
            if p.get("quality").is_some_and(|q| q != "good") {
                return None;
            }
            p.get("value")?
        }
        other => other,
    };
    match value {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
}

impl Trends {
    /// Trends of at most `max_series` series, reading the time from `clock`.
    pub fn new(max_series: usize, clock: Clock) -> Self {
        Trends {
            inner: Mutex::new(Inner {
                table: Table::new(max_series),
                name: String::new(),
            }),
            clock,
            stats: TrendStats::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding it leaves whole buckets: keep using them.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The time now, by the trends' clock.
    pub fn now_ms(&self) -> u64 {
        (self.clock)()
    }

    fn count(&self, taken: Taken, name: &str) {
        match taken {
            Taken::Kept | Taken::New => {}
            Taken::Replaced(old) => {
                events::trend_series_dropped(&self.stats.dropped_series_total, &old, name)
            }
            Taken::Refused => events::trend_sample_refused(&self.stats.refused_samples_total, name),
        }
    }

    /// One poll of `device`'s group `group`: each point (`{"value":..,"quality":..,"unit":..}`
    /// by name) that is a good number or boolean goes to series
    /// `point/<device>/<group>.<point>`.
    pub fn record_points(&self, device: &str, group: &str, points: &Map<String, Value>) {
        let now = self.now_ms();
        let mut guard = self.lock();
        let inner = &mut *guard;
        for (point, v) in points {
            let Some(x) = sample_value(v) else { continue };
            inner.name.clear();
            let _ = write!(inner.name, "point/{device}/{group}.{point}");
            let unit = v.get("unit").and_then(Value::as_str);
            let taken = inner.table.record(&inner.name, unit, x, now, false);
            self.count(taken, &inner.name);
        }
    }

    /// One sample of the connector's own series `name` (a queue's fill, a rate), in `unit`.
    /// These are pinned: always kept.
    pub fn record(&self, name: &str, unit: &str, value: f64) {
        let now = self.now_ms();
        let taken = self.lock().table.record(name, Some(unit), value, now, true);
        self.count(taken, name);
    }

    /// Every kept series' name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.lock().table.names()
    }

    /// The buckets of `names` from the one holding `since_ms` (default: an hour ago) to now.
    pub fn read(&self, names: &[String], since_ms: Option<u64>) -> Read {
        let now_ms = self.now_ms();
        let now = now_ms / BUCKET_MS;
        let oldest = now.saturating_sub(BUCKETS as u64 - 1);
        let from = since_ms.map_or(oldest, |s| (s / BUCKET_MS).max(oldest));
        let inner = self.lock();
        Read {
            start_ms: from * BUCKET_MS,
            buckets: (now + 1).saturating_sub(from) as usize,
            series: names
                .iter()
                .map(|n| (n.clone(), inner.table.copy(n, from, now_ms)))
                .collect(),
        }
    }

    /// `trends` of `/api/status`.
    pub fn status_json(&self) -> Value {
        let (series, max, bytes) = {
            let inner = self.lock();
            (inner.table.len(), inner.table.max(), inner.table.bytes())
        };
        json!({
            "series": series,
            "max_series": max,
            "bytes": bytes,
            "series_bytes": SERIES_BYTES,
            "bucket_secs": BUCKET_MS / 1000,
            "buckets": BUCKETS,
            "dropped_series_total": self.stats.dropped_series_total.load(Ordering::Relaxed),
            "refused_samples_total": self.stats.refused_samples_total.load(Ordering::Relaxed),
        })
    }

    /// The trends' figures on `/metrics`.
    pub fn write_metrics(&self, p: &mut Page) {
        let (series, bytes) = {
            let inner = self.lock();
            (inner.table.len(), inner.table.bytes())
        };
        p.single(
            "opex_connector_trends_series",
            Kind::Gauge,
            "Trend series kept (the status page's last hour).",
            series as f64,
        );
        p.single(
            "opex_connector_trends_bytes",
            Kind::Gauge,
            "Memory the trend series take.",
            bytes as f64,
        );
        p.single(
            "opex_connector_trends_series_dropped_total",
            Kind::Counter,
            "Trend series given up at the bound for a new one.",
            self.stats.dropped_series_total.load(Ordering::Relaxed) as f64,
        );
        p.single(
            "opex_connector_trends_samples_refused_total",
            Kind::Counter,
            "Samples of new trend series not kept: the bound was reached and every series was live.",
            self.stats.refused_samples_total.load(Ordering::Relaxed) as f64,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    use super::*;

    const T0: u64 = 1_700_000_000_000;

    fn clocked(max: usize) -> (Trends, Arc<AtomicU64>) {
        let now = Arc::new(AtomicU64::new(T0));
        let read = Arc::clone(&now);
        let t = Trends::new(max, Box::new(move || read.load(Ordering::Relaxed)));
        (t, now)
    }

    fn points(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_poll_feeds_its_good_numbers_and_booleans_and_skips_bad_points_and_strings() {
        let (t, _) = clocked(10);
        t.record_points(
            "press-1",
            "fast",
            &points(json!({
                "temp": {"value": 21.5, "quality": "good", "unit": "°C"},
                "run": {"value": true, "quality": "good"},
                "bad": {"value": null, "quality": "bad", "exception": 2},
                "model": {"value": "OPEX", "quality": "good"},
            })),
        );
        assert_eq!(
            t.names(),
            ["point/press-1/fast.run", "point/press-1/fast.temp"]
        );
        let r = t.read(&["point/press-1/fast.temp".to_string()], None);
        let c = r.series[0].1.as_ref().expect("kept");
        assert_eq!(c.unit.as_deref(), Some("°C"));
        assert_eq!(c.buckets.len(), BUCKETS);
        assert_eq!(c.buckets[BUCKETS - 1].last, 21.5);
        let r = t.read(&["point/press-1/fast.run".to_string()], None);
        assert_eq!(r.series[0].1.as_ref().expect("kept").buckets[359].max, 1.0);
    }

    #[test]
    fn a_read_covers_the_last_hour_on_the_ten_second_grid_or_from_since() {
        let (t, now) = clocked(10);
        t.record("queue/push_queue", "%", 5.0);
        now.store(T0 + 25_000, Ordering::Relaxed);
        t.record("queue/push_queue", "%", 7.0);
        let names = ["queue/push_queue".to_string(), "queue/nope".to_string()];
        let r = t.read(&names, None);
        assert_eq!(r.buckets, BUCKETS);
        assert_eq!(r.start_ms, T0 + 20_000 - 359 * BUCKET_MS);
        let c = r.series[0].1.as_ref().expect("kept");
        assert_eq!(c.buckets[357].last, 5.0);
        assert!(c.buckets[358].is_empty());
        assert_eq!(c.buckets[359].last, 7.0);
        assert_eq!(r.series[1], ("queue/nope".to_string(), None));
        let r = t.read(&names[..1], Some(T0 + 15_000));
        assert_eq!((r.start_ms, r.buckets), (T0 + 10_000, 2));
        let r = t.read(&names[..1], Some(T0 + 99_000));
        assert_eq!(r.buckets, 0);
    }

    #[test]
    fn the_bound_counts_refused_samples_and_dropped_series_and_status_shows_them() {
        let (t, now) = clocked(1);
        t.record_points("d", "g", &points(json!({"a": 1, "b": 2})));
        assert_eq!(t.stats.refused_samples_total.load(Ordering::Relaxed), 1);
        now.store(T0 + super::super::table::EVICT_AFTER_MS, Ordering::Relaxed);
        t.record_points("d", "g", &points(json!({"b": 2})));
        assert_eq!(t.names(), ["point/d/g.b"]);
        assert_eq!(t.stats.dropped_series_total.load(Ordering::Relaxed), 1);
        let s = t.status_json();
        assert_eq!(s["series"], 1);
        assert_eq!(s["max_series"], 1);
        assert_eq!(s["dropped_series_total"], 1);
        assert_eq!(s["refused_samples_total"], 1);
        let mut p = Page::default();
        t.write_metrics(&mut p);
        assert!(p
            .finish()
            .contains("opex_connector_trends_series_dropped_total 1"));
    }
}
