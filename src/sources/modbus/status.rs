//! What a device's poller shows: counters, connection state, start jitter, last values. Written
//! by the poll task, read by `/api/status`, `/metrics` and the status page.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::config::{ModbusDeviceConfig, Transport};
use crate::telemetry::prometheus::{Kind, Page};

/// Start-jitter samples kept per device: the percentiles cover the last this many polls.
pub const JITTER_SAMPLES: usize = 256;

/// A device's connection state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ConnState {
    /// Not connected yet, or connecting.
    Connecting = 0,
    /// The last request was answered.
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

/// A fixed ring of the last [`JITTER_SAMPLES`] start delays, in microseconds.
#[derive(Debug)]
struct Ring {
    samples: Vec<u64>,
    next: usize,
}

impl Ring {
    fn push(&mut self, v: u64) {
        if self.samples.len() < JITTER_SAMPLES {
            self.samples.push(v);
        } else {
            self.samples[self.next] = v;
        }
        self.next = (self.next + 1) % JITTER_SAMPLES;
    }

    /// (p50, p99) in microseconds; zeros without samples.
    fn percentiles(&self) -> (u64, u64) {
        let mut s = self.samples.clone();
        if s.is_empty() {
            return (0, 0);
        }
        s.sort_unstable();
        let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
        (at(0.50), at(0.99))
    }
}

/// One poll group's figures.
#[derive(Debug)]
pub struct GroupStatus {
    /// The group's name.
    pub name: String,
    /// Read requests its last cycle sent.
    pub requests_per_cycle: AtomicU64,
    /// Its last payload.
    last_values: Mutex<Option<Value>>,
}

/// One device's figures.
#[derive(Debug)]
pub struct DeviceStatus {
    /// The device's name.
    pub name: String,
    /// `modbus_tcp` or `modbus_rtu`.
    pub protocol: &'static str,
    /// Where it is: `host:port` or the serial device and unit.
    pub address: String,
    /// Completed poll cycles.
    pub polls_total: AtomicU64,
    /// Read requests sent.
    pub requests_total: AtomicU64,
    /// Write requests sent for commands (FC 5, 6, 15, 16), whatever their outcome.
    pub writes_total: AtomicU64,
    /// Requests that timed out (each dropped and reopened the connection).
    pub timeouts_total: AtomicU64,
    /// Transport and framing errors, failed connects included.
    pub errors_total: AtomicU64,
    /// Exception responses (data: the points got quality `bad`).
    pub exceptions_total: AtomicU64,
    /// Connections (or serial ports) opened.
    pub connects_total: AtomicU64,
    /// Samples dropped after the hold.
    pub lost_total: AtomicU64,
    /// Polls skipped because the previous one ran past their start.
    pub skipped_total: AtomicU64,
    /// Unix milliseconds of the last poll start; 0 before the first.
    pub last_poll_ms: AtomicU64,
    /// Duration of the last poll cycle in microseconds.
    pub last_duration_us: AtomicU64,
    state: AtomicU8,
    jitter: Mutex<Ring>,
    last_error: Mutex<Option<String>>,
    /// Per group, in config order.
    pub groups: Vec<GroupStatus>,
}

impl DeviceStatus {
    /// A fresh status for `dev`.
    pub fn new(dev: &ModbusDeviceConfig) -> Self {
        let (protocol, address) = match &dev.transport {
            Transport::Tcp { host, port } => ("modbus_tcp", format!("{host}:{port}")),
            Transport::Rtu(l) => ("modbus_rtu", format!("{} unit {}", l.path, dev.unit)),
        };
        Self {
            name: dev.name.clone(),
            protocol,
            address,
            polls_total: AtomicU64::new(0),
            requests_total: AtomicU64::new(0),
            writes_total: AtomicU64::new(0),
            timeouts_total: AtomicU64::new(0),
            errors_total: AtomicU64::new(0),
            exceptions_total: AtomicU64::new(0),
            connects_total: AtomicU64::new(0),
            lost_total: AtomicU64::new(0),
            skipped_total: AtomicU64::new(0),
            last_poll_ms: AtomicU64::new(0),
            last_duration_us: AtomicU64::new(0),
            state: AtomicU8::new(ConnState::Connecting as u8),
            jitter: Mutex::new(Ring {
                samples: Vec::with_capacity(JITTER_SAMPLES),
                next: 0,
            }),
            last_error: Mutex::new(None),
            groups: dev
                .groups
                .iter()
                .map(|g| GroupStatus {
                    name: g.name.clone(),
                    requests_per_cycle: AtomicU64::new(0),
                    last_values: Mutex::new(None),
                })
                .collect(),
        }
    }

    /// The connection state.
    pub fn state(&self) -> ConnState {
        ConnState::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Sets the connection state.
    pub fn set_state(&self, s: ConnState) {
        self.state.store(s as u8, Ordering::Relaxed);
    }

    /// Records how late a poll started.
    pub fn record_jitter(&self, late: Duration) {
        let us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        self.jitter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(us);
    }

    /// Start jitter (p50, p99) over the last polls.
    pub fn jitter(&self) -> (Duration, Duration) {
        let (a, b) = self
            .jitter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .percentiles();
        (Duration::from_micros(a), Duration::from_micros(b))
    }

    /// Remembers the last error (shown until the next one).
    pub fn set_error(&self, e: String) {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
    }

    /// The last error.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Remembers the last payload of group `g`.
    pub fn set_values(&self, g: usize, v: Value) {
        if let Some(group) = self.groups.get(g) {
            *group.last_values.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
        }
    }

    /// The last payload of every group, by group name.
    pub fn values(&self) -> Map<String, Value> {
        self.groups
            .iter()
            .map(|g| {
                let v = g
                    .last_values
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                (g.name.clone(), v.unwrap_or(Value::Null))
            })
            .collect()
    }

    /// Read requests of one cycle of every group, summed.
    pub fn requests_per_cycle(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| g.requests_per_cycle.load(Ordering::Relaxed))
            .sum()
    }

    /// The `/api/status` `devices[]` entry.
    pub fn to_json(&self) -> Value {
        let (p50, p99) = self.jitter();
        let last = self.last_poll_ms.load(Ordering::Relaxed);
        json!({
            "name": self.name,
            "source": format!("modbus/{}", self.name),
            "protocol": self.protocol,
            "address": self.address,
            "state": self.state().as_str(),
            "last_poll_ms": (last > 0).then_some(last),
            "poll_duration_ms": self.last_duration_us.load(Ordering::Relaxed) as f64 / 1000.0,
            "jitter_p50_ms": p50.as_secs_f64() * 1000.0,
            "jitter_p99_ms": p99.as_secs_f64() * 1000.0,
            "polls_total": self.polls_total.load(Ordering::Relaxed),
            "requests_total": self.requests_total.load(Ordering::Relaxed),
            "requests_per_cycle": self.requests_per_cycle(),
            "writes_total": self.writes_total.load(Ordering::Relaxed),
            "groups": self.groups.iter().map(|g| json!({
                "name": g.name,
                "requests_per_cycle": g.requests_per_cycle.load(Ordering::Relaxed),
            })).collect::<Vec<_>>(),
            "errors_total": self.errors_total.load(Ordering::Relaxed),
            "timeouts_total": self.timeouts_total.load(Ordering::Relaxed),
            "exceptions_total": self.exceptions_total.load(Ordering::Relaxed),
            "connects_total": self.connects_total.load(Ordering::Relaxed),
            "skipped_total": self.skipped_total.load(Ordering::Relaxed),
            "lost_total": self.lost_total.load(Ordering::Relaxed),
            "last_error": self.last_error(),
            "values": self.values(),
        })
    }
}

/// Writes every device's figures to `/metrics`, labelled `device`.
pub fn write_metrics(devices: &[std::sync::Arc<DeviceStatus>], page: &mut Page) {
    type Pick = fn(&DeviceStatus) -> f64;
    let families: [(&str, Kind, &str, Pick); 14] = [
        (
            "opex_connector_device_polls_total",
            Kind::Counter,
            "Completed poll cycles.",
            |d| d.polls_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_device_writes_total",
            Kind::Counter,
            "Write requests sent for commands, whatever their outcome.",
            |d| d.writes_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_device_requests_total",
            Kind::Counter,
            "Read requests sent.",
            |d| d.requests_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_device_timeouts_total",
            Kind::Counter,
            "Requests that timed out; each dropped and reopened the connection.",
            |d| d.timeouts_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_device_errors_total",
            Kind::Counter,
            "Transport, framing and connect errors.",
            |d| d.errors_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_device_exceptions_total",
            Kind::Counter,
            "Exception responses (the points got quality bad).",
            |d| d.exceptions_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_device_lost_total",
            Kind::Counter,
            "Samples dropped after the poller's hold (also in backpressure_lost).",
            |d| d.lost_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_device_skipped_polls_total",
            Kind::Counter,
            "Polls skipped because the previous one ran past their start.",
            |d| d.skipped_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_device_last_poll_timestamp_seconds",
            Kind::Gauge,
            "Unix time of the last poll start.",
            |d| d.last_poll_ms.load(Ordering::Relaxed) as f64 / 1000.0,
        ),
        (
            "opex_connector_device_poll_duration_seconds",
            Kind::Gauge,
            "Duration of the last poll cycle.",
            |d| d.last_duration_us.load(Ordering::Relaxed) as f64 / 1e6,
        ),
        (
            "opex_connector_device_jitter_p50_seconds",
            Kind::Gauge,
            "Median delay of a poll's start past its schedule (last 256 polls).",
            |d| d.jitter().0.as_secs_f64(),
        ),
        (
            "opex_connector_device_jitter_p99_seconds",
            Kind::Gauge,
            "99th percentile delay of a poll's start past its schedule (last 256 polls).",
            |d| d.jitter().1.as_secs_f64(),
        ),
        (
            "opex_connector_device_requests_per_cycle",
            Kind::Gauge,
            "Read requests one cycle of every group sends, after coalescing.",
            |d| d.requests_per_cycle() as f64,
        ),
        (
            "opex_connector_device_connected",
            Kind::Gauge,
            "1 when the last request was answered, else 0.",
            |d| f64::from(u8::from(d.state() == ConnState::Connected)),
        ),
    ];
    for (name, kind, help, pick) in families {
        let samples: Vec<(Vec<(&str, &str)>, f64)> = devices
            .iter()
            .map(|d| (vec![("device", d.name.as_str())], pick(d)))
            .collect();
        let refs: Vec<(&[(&str, &str)], f64)> =
            samples.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
        page.family(name, kind, help, &refs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jitter_ring_keeps_only_the_last_samples() {
        let mut r = Ring {
            samples: Vec::new(),
            next: 0,
        };
        for _ in 0..JITTER_SAMPLES {
            r.push(1_000_000);
        }
        for v in 0..JITTER_SAMPLES as u64 {
            r.push(v);
        }
        assert_eq!(r.samples.len(), JITTER_SAMPLES);
        let (p50, p99) = r.percentiles();
        assert!(p50 < 200 && p99 < JITTER_SAMPLES as u64, "{p50} {p99}");
    }
}
