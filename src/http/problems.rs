//! What is not working now, read from the parts' own reports: the devices' statuses, the
//! sinks' [`crate::sinks::Report`]s (by their fields, never by their kind), the alert hub's
//! queues and channels, the data dir's disk, the schedules and the config file.
//! [`crate::health`] remembers since when each lasts and derives the state; this file only
//! finds.

use std::sync::Arc;

use serde_json::Value;

use super::status::{disk_space, schedules};
use super::AppState;
use crate::alerts::alert::queue_message;
use crate::health::{now_secs, Finding, Health};
use crate::sources::status::DeviceStatus;
use crate::telemetry::prometheus::{Kind, Page};

/// The health now: every finding, assessed by the connector's board.
pub fn assess(state: &AppState) -> Health {
    state.health.assess(findings(state), now_secs())
}

/// The health on `/metrics`: the state as a number and the count of problems.
pub fn write_metrics(state: &AppState, p: &mut Page) {
    let health = assess(state);
    p.single(
        "opex_connector_health_state",
        Kind::Gauge,
        "The connector's state: 0 ok, 1 degraded (some parts down, records still kept), 2 failing (records lost or refused now).",
        f64::from(health.state as u8),
    );
    p.single(
        "opex_connector_problems",
        Kind::Gauge,
        "Parts not working now (problems of /api/status).",
        health.problems.len() as f64,
    );
}

/// Every part that is not working now.
pub fn findings(state: &AppState) -> Vec<Finding> {
    let mut out = Vec::new();
    let devices = state.devices.devices();
    let summaries: Vec<Value> = devices.iter().map(|d| d.summary_json()).collect();
    for d in &summaries {
        device(d, &mut out);
    }
    bad_points(state, devices.iter().zip(&summaries), &mut out);
    for sink in state.engine.sinks().iter() {
        let r = sink.report();
        sink_findings(sink.name(), &r.entry, &r.status, r.accepting, &mut out);
    }
    for q in state.alerts.queues_json() {
        queue(&q, &mut out);
    }
    for c in state.alerts.channels_json() {
        if c["failing"] == true {
            out.push(Finding {
                component: format!("alert channel {}", text(&c["name"])),
                kind: "alert_channel_failing",
                message: format!("alerts are not delivered: {}", text(&c["last_error"])),
                hint: Some("check the channel's URL, broker or subject in telemetry.alerts, and that its receiver runs; alerts stay in the log".into()),
                losing: false,
            });
        }
    }
    if let Some((free, total)) = disk_space(&state.data_dir) {
        out.extend(disk(
            free,
            total,
            state
                .disk_free_pct
                .load(std::sync::atomic::Ordering::Relaxed),
            &state.data_dir,
        ));
    }
    for s in schedules(state) {
        let result = s["last_result"].as_str().unwrap_or("ok");
        if result != "ok" {
            out.push(Finding {
                component: format!("schedule {}", text(&s["name"])),
                kind: "schedule_failing",
                message: format!("its last tick was not stored: {result}"),
                hint: Some(
                    "a tick is not replayed: see the sink it names, and the dead-letter queue"
                        .into(),
                ),
                losing: false,
            });
        }
    }
    if let Some((error, revision)) = state.config.file_error() {
        out.push(Finding {
            component: "config".into(),
            kind: "config_not_saved",
            message: format!("revision {revision} runs, but the file given to run was not rewritten with it, so a restart would run what the file holds: {error}"),
            hint: Some("let the connector replace the file (write access to its folder; a file mounted alone into a container cannot be replaced: mount its folder), then apply the config again".into()),
            losing: false,
        });
    }
    out
}

/// The data dir's disk when less than `pct` percent of it is free (`pct` 0: never).
fn disk(free: u64, total: u64, pct: u64, dir: &std::path::Path) -> Option<Finding> {
    (total > 0 && free.saturating_mul(100) < total.saturating_mul(pct)).then(|| Finding {
        component: "disk".into(),
        kind: "disk_nearly_full",
        message: format!(
            "{} MiB free of {} MiB on the data dir's disk",
            free >> 20,
            total >> 20
        ),
        hint: Some(format!("free space on {} or lower the queues' quotas: at the end of the disk, records can no longer be kept", dir.display())),
        losing: false,
    })
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "unknown".into(),
        other => other.to_string(),
    }
}

/// A device that is not connected (connecting, in backoff); a stopped one is
/// not a problem (the connector stops).
fn device(d: &Value, out: &mut Vec<Finding>) {
    let st = d["state"].as_str().unwrap_or("");
    if st == "connected" || st == "stopped" {
        return;
    }
    let message = match d["last_error"].as_str() {
        Some(e) => format!("not connected ({st}): {e}"),
        None => format!("not connected ({st})"),
    };
    out.push(Finding {
        component: format!("device {}", text(&d["name"])),
        kind: "device_offline",
        message,
        hint: d["last_error_hint"].as_str().map(str::to_string),
        losing: false,
    });
}

/// Polls a point must stay bad before it is a problem: one bad read is news, not an outage.
pub const BAD_POINT_POLLS: u64 = 3;

/// The points of connected devices that have stayed bad for more than [`BAD_POINT_POLLS`]
/// polls of their device (a device that is not connected is one problem, not one per point).
/// `devices` are each device's status with its `/api/status` entry without values.
fn bad_points<'a>(
    state: &AppState,
    devices: impl Iterator<Item = (&'a Arc<DeviceStatus>, &'a Value)>,
    out: &mut Vec<Finding>,
) {
    let mut bad = Vec::new();
    for (status, d) in devices.filter(|(_, d)| d["state"] == "connected") {
        let polls = d["polls_total"].as_u64().unwrap_or(0);
        for (point, v) in status.bad_points() {
            bad.push((d, point, v, polls));
        }
    }
    let keys: Vec<(String, u64)> = bad
        .iter()
        .map(|(d, point, _, polls)| (format!("{}/{point}", text(&d["name"])), *polls))
        .collect();
    let streaks = state.health.bad_points(&keys);
    for ((d, point, v, _), polls) in bad.into_iter().zip(streaks) {
        if polls <= BAD_POINT_POLLS {
            continue;
        }
        let why = match (&v["exception"], &v["error"], &v["status"]) {
            (Value::Number(n), _, _) => format!(
                ": exception {n} ({})",
                crate::sources::hints::exception_name(n.as_u64().unwrap_or(0) as u8)
            ),
            (_, Value::String(e), _) | (_, _, Value::String(e)) => format!(": {e}"),
            _ => String::new(),
        };
        out.push(Finding {
            component: format!("device {} point {point}", text(&d["name"])),
            kind: "point_bad",
            message: format!("bad for {polls} polls{why}"),
            hint: match v["status"].as_str() {
                Some(status) => crate::sources::hints::opcua_hint(status),
                None => d["last_exception_hint"].as_str().map(str::to_string),
            },
            losing: false,
        });
    }
}

/// A sink whose writers stopped, that is not connected, on hold, or failing to deliver.
pub(super) fn sink_findings(
    name: &str,
    entry: &serde_json::Map<String, Value>,
    status: &Value,
    accepting: bool,
    out: &mut Vec<Finding>,
) {
    let component = format!("sink {name}");
    let reason = last_error(entry, status);
    let push = |out: &mut Vec<Finding>, kind, message: String, losing| {
        out.push(Finding {
            component: component.clone(),
            kind,
            message,
            hint: Some(sink_hint(kind, reason.as_deref())),
            losing,
        })
    };
    let because = reason
        .as_deref()
        .map_or(String::new(), |r| format!(": {r}"));
    if !accepting {
        push(
            out,
            "sink_stopped",
            "its writer stopped: records for it are refused".into(),
            true,
        );
    }
    if entry.get("connected") == Some(&Value::Bool(false)) {
        push(
            out,
            "sink_disconnected",
            format!("not connected{because}"),
            false,
        );
        return;
    }
    let held = entry.get("held") == Some(&Value::Bool(true))
        || ["delivery", "uplink"]
            .iter()
            .any(|k| status[k]["held"] == true);
    if held {
        push(
            out,
            "sink_held",
            format!("on hold: its destination refuses the records{because}"),
            false,
        );
        return;
    }
    // `healthy` is false too before the first delivery: failing needs an error of its own.
    if reason.is_none() {
        return;
    }
    if status["uplink"]["healthy"] == false {
        push(
            out,
            "uplink_failing",
            format!("the uplink is failing{because}"),
            false,
        );
    } else if status["delivery"]["healthy"] == false {
        push(out, "sink_failing", format!("failing{because}"), false);
    }
}

/// A sink's last error class: its entry's, else the first a part of its status names.
fn last_error(entry: &serde_json::Map<String, Value>, status: &Value) -> Option<String> {
    if let Some(e) = entry.get("last_error").and_then(Value::as_str) {
        return Some(e.to_string());
    }
    status
        .as_object()?
        .values()
        .find_map(|v| v["last_error"].as_str().map(str::to_string))
}

/// What to do about a sink's problem, by the words of its last error.
fn sink_hint(kind: &str, reason: Option<&str>) -> String {
    if kind == "sink_stopped" {
        return "the sink's writer thread stopped: see the log for its last error and restart the connector".into();
    }
    let r = reason.unwrap_or("").to_ascii_lowercase();
    let words = if r.contains("refused") {
        "nothing accepts connections at the sink's address: check that the destination runs, the host and port in the sink's config, and any firewall"
    } else if r.contains("timed out") || r.contains("timeout") {
        "the destination did not answer in time: check the network and that it is not overloaded"
    } else if r.contains("401") || r.contains("403") {
        "the destination refuses the credentials: check the sink's token or user"
    } else if r.contains("http 5") {
        "the destination answers with a server error: check its logs; records are kept and sent once it answers"
    } else if r.contains("dns") || r.contains("resolve") {
        "the destination's host name does not resolve: check the host in the sink's config and the box's DNS"
    } else {
        "check that the destination runs and is reachable from this box; records are kept or their sources retry"
    };
    words.to_string()
}

/// A queue at `high` or `full`.
fn queue(q: &Value, out: &mut Vec<Finding>) {
    let on_full = q["on_full"].as_str().unwrap_or("");
    let (kind, level, losing) = match q["level"].as_str() {
        Some("high") => ("queue_high", crate::admission::level::Level::High, false),
        Some("full") => ("queue_full", crate::admission::level::Level::Full, true),
        _ => return,
    };
    out.push(Finding {
        component: format!("queue {}", text(&q["name"])),
        kind,
        message: format!(
            "{} % full: {}",
            q["fill_pct"].as_f64().unwrap_or(0.0),
            queue_message(level, on_full)
        ),
        hint: Some("the destination behind it is slow or down: see its sink's problem; the queue drains once it takes records again".into()),
        losing,
    });
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map};

    use super::*;

    fn of(entry: Value, status: Value, accepting: bool) -> Vec<Finding> {
        let entry: Map<String, Value> = entry.as_object().cloned().unwrap_or_default();
        let mut out = Vec::new();
        sink_findings("uns", &entry, &status, accepting, &mut out);
        out
    }

    #[test]
    fn the_disk_is_nearly_full_under_its_percent_and_never_at_zero() {
        let dir = std::path::Path::new("/var/lib/opex-connector");
        let gib = 1 << 30;
        let f = disk(4 * gib, 100 * gib, 5, dir).expect("4 % free is under 5 %");
        assert_eq!(f.kind, "disk_nearly_full");
        assert_eq!(
            f.message,
            "4096 MiB free of 102400 MiB on the data dir's disk"
        );
        assert!(f
            .hint
            .unwrap_or_default()
            .contains("/var/lib/opex-connector"));
        assert!(disk(5 * gib, 100 * gib, 5, dir).is_none());
        assert!(
            disk(gib, 100 * gib, 0, dir).is_none(),
            "0 turns the check off"
        );
        assert!(
            disk(0, 0, 5, dir).is_none(),
            "a disk of no size is not judged"
        );
    }

    #[test]
    fn a_disconnected_sink_says_why_and_what_to_do() {
        let f = of(
            json!({"connected": false, "last_error": "I/O: Connection refused"}),
            json!({}),
            true,
        );
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].component, "sink uns");
        assert_eq!(f[0].kind, "sink_disconnected");
        assert_eq!(f[0].message, "not connected: I/O: Connection refused");
        assert!(f[0]
            .hint
            .as_deref()
            .unwrap_or("")
            .contains("nothing accepts"));
    }

    #[test]
    fn a_failing_uplink_and_a_stopped_writer_are_found_by_their_fields() {
        let f = of(
            json!({"last_error": null}),
            json!({"uplink": {"healthy": false, "held": false, "last_error": "HTTP 500"}}),
            false,
        );
        let kinds: Vec<&str> = f.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, ["sink_stopped", "uplink_failing"]);
        assert!(f[0].losing);
        assert_eq!(f[1].message, "the uplink is failing: HTTP 500");
        assert!(of(json!({"connected": true}), json!({}), true).is_empty());
    }

    #[test]
    fn a_device_in_backoff_carries_its_hint() {
        let mut out = Vec::new();
        device(
            &json!({"name": "press-1", "state": "backoff", "last_error": "connection refused",
                    "last_error_hint": "nothing accepts connections on 127.0.0.1:15020"}),
            &mut out,
        );
        assert_eq!(out[0].component, "device press-1");
        assert_eq!(
            out[0].message,
            "not connected (backoff): connection refused"
        );
        device(&json!({"name": "a", "state": "connected"}), &mut out);
        assert_eq!(out.len(), 1);
    }
}
