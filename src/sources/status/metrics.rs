//! Every device's figures on `/metrics`: one family per figure, one sample per device,
//! labelled `device`.
//!
//! The `opex_connector_opcua_device_*` families are the names OPC-UA devices had before every
//! protocol shared one status; dashboards read them, so OPC-UA devices keep them (labelled
//! `device` and `protocol`) besides the common families.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{ConnState, DeviceStatus};
use crate::telemetry::prometheus::{Kind, Page};

type Pick = fn(&DeviceStatus) -> f64;

fn l(a: &std::sync::atomic::AtomicU64) -> f64 {
    a.load(Ordering::Relaxed) as f64
}

fn connected(d: &DeviceStatus) -> f64 {
    f64::from(u8::from(d.state() == ConnState::Connected))
}

/// The families every device has.
const COMMON: [(&str, Kind, &str, Pick); 14] = [
    (
        "opex_connector_device_polls_total",
        Kind::Counter,
        "Completed poll cycles.",
        |d| l(&d.polls_total),
    ),
    (
        "opex_connector_device_writes_total",
        Kind::Counter,
        "Write requests sent for commands, whatever their outcome.",
        |d| l(&d.writes_total),
    ),
    (
        "opex_connector_device_requests_total",
        Kind::Counter,
        "Read requests sent.",
        |d| l(&d.requests_total),
    ),
    (
        "opex_connector_device_timeouts_total",
        Kind::Counter,
        "Requests that timed out; each dropped and reopened the connection.",
        |d| l(&d.timeouts_total),
    ),
    (
        "opex_connector_device_errors_total",
        Kind::Counter,
        "Transport, framing and connect errors.",
        |d| l(&d.errors_total),
    ),
    (
        "opex_connector_device_exceptions_total",
        Kind::Counter,
        "Exception responses (the points got quality bad).",
        |d| l(&d.exceptions_total),
    ),
    (
        "opex_connector_device_lost_total",
        Kind::Counter,
        "Samples dropped after the poller's hold (also in backpressure_lost).",
        |d| l(&d.lost_total),
    ),
    (
        "opex_connector_device_skipped_polls_total",
        Kind::Counter,
        "Polls skipped because the previous one ran past their start.",
        |d| l(&d.skipped_total),
    ),
    (
        "opex_connector_device_last_poll_timestamp_seconds",
        Kind::Gauge,
        "Unix time of the last poll start.",
        |d| l(&d.last_poll_ms) / 1000.0,
    ),
    (
        "opex_connector_device_poll_duration_seconds",
        Kind::Gauge,
        "Duration of the last poll cycle.",
        |d| l(&d.last_duration_us) / 1e6,
    ),
    (
        "opex_connector_device_jitter_p50_seconds",
        Kind::Gauge,
        "Median delay of a poll's start past its schedule (last 1024 polls).",
        |d| d.jitter().0.as_secs_f64(),
    ),
    (
        "opex_connector_device_jitter_p99_seconds",
        Kind::Gauge,
        "99th percentile delay of a poll's start past its schedule (last 1024 polls).",
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
        connected,
    ),
];

/// The names OPC-UA devices had first (see the module's doc).
const OPCUA: [(&str, Kind, &str, Pick); 9] = [
    (
        "opex_connector_opcua_device_connected",
        Kind::Gauge,
        "1 while the device's connection or session is up.",
        connected,
    ),
    (
        "opex_connector_opcua_device_polls_total",
        Kind::Counter,
        "Group polls and subscription notifications turned into records.",
        |d| l(&d.polls_total),
    ),
    (
        "opex_connector_opcua_device_errors_total",
        Kind::Counter,
        "Failed reads, connects and subscription calls.",
        |d| l(&d.errors_total),
    ),
    (
        "opex_connector_opcua_device_bad_points_total",
        Kind::Counter,
        "Points read with a bad quality (unknown node, bad status).",
        |d| l(&d.bad_points_total),
    ),
    (
        "opex_connector_opcua_device_reconnects_total",
        Kind::Counter,
        "Sessions re-established after a lost connection.",
        |d| l(&d.reconnects_total),
    ),
    (
        "opex_connector_opcua_device_watchdog_resets_total",
        Kind::Counter,
        "Sessions dropped by the no-data watchdog.",
        |d| l(&d.watchdog_resets_total),
    ),
    (
        "opex_connector_opcua_device_samples_lost_total",
        Kind::Counter,
        "Samples dropped after the poller's hold (also in backpressure_lost).",
        |d| l(&d.lost_total) + l(&d.notifications_dropped_total),
    ),
    (
        "opex_connector_opcua_device_last_poll_timestamp_seconds",
        Kind::Gauge,
        "Unix time of the device's last poll.",
        |d| l(&d.last_poll_ms) / 1000.0,
    ),
    (
        "opex_connector_opcua_device_poll_duration_seconds",
        Kind::Gauge,
        "Duration of the device's last poll.",
        |d| l(&d.last_duration_us) / 1e6,
    ),
];

/// Writes one family per figure, one sample per device of `devices` labelled `labels`.
fn families(
    page: &mut Page,
    devices: &[&DeviceStatus],
    families: &[(&str, Kind, &str, Pick)],
    labels: fn(&DeviceStatus) -> Vec<(&str, &str)>,
) {
    for (name, kind, help, pick) in families {
        let samples: Vec<(Vec<(&str, &str)>, f64)> =
            devices.iter().map(|d| (labels(d), pick(d))).collect();
        let refs: Vec<(&[(&str, &str)], f64)> =
            samples.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
        page.family(name, *kind, help, &refs);
    }
}

/// Writes every device's figures to `/metrics`.
pub fn write_metrics(devices: &[Arc<DeviceStatus>], page: &mut Page) {
    let all: Vec<&DeviceStatus> = devices.iter().map(|d| d.as_ref()).collect();
    families(page, &all, &COMMON, |d| vec![("device", d.name())]);
    let opcua: Vec<&DeviceStatus> = all
        .iter()
        .copied()
        .filter(|d| d.def.protocol == "opcua")
        .collect();
    let labels: fn(&DeviceStatus) -> Vec<(&str, &str)> =
        |d| vec![("device", d.name()), ("protocol", "opcua")];
    families(page, &opcua, &OPCUA, labels);
    let samples: Vec<(Vec<(&str, &str)>, f64)> = opcua
        .iter()
        .flat_map(|d| {
            let (p50, p99) = d.jitter();
            [("0.5", p50), ("0.99", p99)].map(|(q, v)| {
                let mut labels = labels(d);
                labels.push(("quantile", q));
                (labels, v.as_secs_f64())
            })
        })
        .collect();
    let refs: Vec<(&[(&str, &str)], f64)> =
        samples.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
    page.family(
        "opex_connector_opcua_device_poll_start_jitter_seconds",
        Kind::Gauge,
        "How late polls started against their schedule, over the last 1024 polls.",
        &refs,
    );
}
