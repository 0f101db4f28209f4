//! The one health model seen from outside: `problems` and `state` of `/api/status`, the OTA
//! health check (`connector.healthy`), and the outage alerts on a webhook channel, for a
//! device that stops (a pymodbus device) and an uplink that answers 500 (the receiver).

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// How long a problem must last before it is alerted, in the tests.
const AFTER_SECS: u64 = 1;
/// How long the tests wait for a state, a problem or an alert (checks run every second).
const DEADLINE: Duration = Duration::from_secs(20);

/// A config with a push queue and alerts after [`AFTER_SECS`], checked every second, POSTed
/// to `alerts`.
fn config(alerts: &Receiver) -> Value {
    let mut config = queue_config(16, "evict_oldest");
    config["telemetry"] = json!({"alerts": {
        "after_secs": AFTER_SECS,
        "check_interval_secs": 1,
        "webhook": {"url": alerts.url(), "retry_initial_ms": 100, "retry_max_ms": 500},
    }});
    config
}

/// The problem of `component` of kind `kind` in `status`, if any.
fn problem(status: &Value, component: &str, kind: &str) -> Option<Value> {
    status["problems"]
        .as_array()?
        .iter()
        .find(|p| p["component"] == component && p["kind"] == kind)
        .cloned()
}

/// The entry of device `name` in `devices[]` of `status`.
fn device_entry(status: &Value, name: &str) -> Value {
    status["devices"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["name"] == name))
        .cloned()
        .unwrap_or_default()
}

/// The alerts about `component` of kind `kind` the receiver got, oldest first.
fn alerts_of(receiver: &Receiver, component: &str, kind: &str) -> Vec<Value> {
    receiver
        .records()
        .into_iter()
        .filter(|a| a["component"] == component && a["kind"] == kind)
        .collect()
}

#[test]
fn a_stopped_device_makes_the_state_degraded_with_its_hint_is_alerted_and_recovers_while_ota_stays_healthy(
) {
    let mut device = ModbusTcp::start();
    let alerts = Receiver::start();
    let mut config = config(&alerts);
    config["devices"] = json!([{
        "name": "press-1",
        "protocol": "modbus_tcp",
        "host": "127.0.0.1",
        "port": device.port(),
        "unit": 1,
        "timeout_ms": 300,
        "groups": [{"name": "main", "interval_ms": 100}],
        "points": [{"name": "u16", "register": 0, "type": "u16"}],
    }]);
    let daemon = Daemon::start(config);
    wait_until(DEADLINE, "the state ok with the device connected", || {
        daemon.status()["state"] == "ok"
    });

    device.stop();
    let mut down = Value::Null;
    wait_until(DEADLINE, "the device's problem in /api/status", || {
        down = daemon.status();
        problem(&down, "device press-1", "device_offline").is_some()
    });
    let p = problem(&down, "device press-1", "device_offline").unwrap_or_default();
    assert_eq!(down["state"], "degraded", "{down:#}");
    assert_eq!(
        down["connector"]["healthy"], true,
        "a device down keeps OTA healthy"
    );
    assert!(
        p["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("not connected"),
        "{p}"
    );
    assert!(p["hint"].as_str().is_some_and(|h| !h.is_empty()), "{p}");
    assert!(p["since"].as_str().is_some_and(|s| s.ends_with('Z')), "{p}");
    assert!(p["for_secs"].is_u64(), "{p}");
    // The device's own entry says since when its trouble lasts, not yet recovered.
    let entry = device_entry(&down, "press-1");
    assert_eq!(entry["last_error_at"], p["since"], "{entry:#}");
    assert_eq!(entry["recovered_at"], Value::Null, "{entry:#}");
    let metrics = daemon.metrics();
    assert_eq!(metric(&metrics, "opex_connector_health_state"), Some(1.0));
    assert!(metric(&metrics, "opex_connector_problems").is_some_and(|n| n >= 1.0));

    wait_until(DEADLINE, "the outage alert at the webhook", || {
        !alerts_of(&alerts, "device press-1", "device_offline").is_empty()
    });
    let alert = &alerts_of(&alerts, "device press-1", "device_offline")[0];
    assert_eq!(alert["level"], "warning", "{alert}");
    // The hint of the commissioning tools, for the error of the moment (refused by now).
    assert!(
        alert["hint"]
            .as_str()
            .unwrap_or("")
            .contains("nothing accepts connections"),
        "{alert}"
    );
    assert!(alert["message"]
        .as_str()
        .unwrap_or("")
        .starts_with("not connected"));
    let open = daemon.status()["alerts"].clone();
    assert!(
        open.as_array()
            .is_some_and(|a| a.iter().any(|a| a["kind"] == "device_offline")),
        "open alerts list the outage: {open:#}"
    );

    device.restart();
    wait_until(DEADLINE, "the recovery notice at the webhook", || {
        alerts_of(&alerts, "device press-1", "device_offline")
            .iter()
            .any(|a| a["level"] == "ok")
    });
    let up = daemon.status();
    assert_eq!(up["state"], "ok", "{up:#}");
    assert_eq!(up["problems"], json!([]));
    // Its last error stays, with when it began and when it cleared.
    let entry = device_entry(&up, "press-1");
    assert_eq!(entry["last_error_at"], p["since"], "{entry:#}");
    assert!(
        entry["recovered_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z') && t >= p["since"].as_str().unwrap_or("")),
        "{entry:#}"
    );
    assert!(up["alerts"]
        .as_array()
        .is_some_and(|a| a.iter().all(|a| a["kind"] != "device_offline")));
}

#[test]
fn an_uplink_answering_500_makes_the_state_degraded_is_alerted_with_its_hint_and_recovers() {
    let uplink = Receiver::start();
    uplink.answer_every_request_with(500);
    let alerts = Receiver::start();
    let mut config = config(&alerts);
    config["connector"]["push"] = json!({
        "url": uplink.url(), "batch_rows": 10, "timeout_secs": 2,
        "retry_initial_ms": 50, "retry_max_ms": 200,
    });
    let daemon = Daemon::start(config);
    assert_eq!(daemon.ingest("k-1", r#"{"n":1}"#).status, 200);

    let mut down = Value::Null;
    wait_until(DEADLINE, "the uplink's problem in /api/status", || {
        down = daemon.status();
        problem(&down, "sink push", "uplink_failing").is_some()
    });
    let p = problem(&down, "sink push", "uplink_failing").unwrap_or_default();
    assert_eq!(down["state"], "degraded", "{down:#}");
    assert_eq!(down["connector"]["healthy"], true);
    assert!(p["message"].as_str().unwrap_or("").contains("500"), "{p}");
    assert!(
        p["hint"].as_str().unwrap_or("").contains("server error"),
        "{p}"
    );

    wait_until(DEADLINE, "the outage alert at the webhook", || {
        !alerts_of(&alerts, "sink push", "uplink_failing").is_empty()
    });
    let alert = &alerts_of(&alerts, "sink push", "uplink_failing")[0];
    assert_eq!(alert["hint"], p["hint"], "{alert}");
    assert!(
        alert["message"].as_str().unwrap_or("").contains("500"),
        "{alert}"
    );

    uplink.answer_normally();
    wait_until(DEADLINE, "the recovery notice at the webhook", || {
        alerts_of(&alerts, "sink push", "uplink_failing")
            .iter()
            .any(|a| a["level"] == "ok")
    });
    wait_until(DEADLINE, "the state ok again", || {
        daemon.status()["state"] == "ok"
    });
}

#[test]
fn a_stopped_broker_makes_its_sink_a_disconnected_problem_alerted_with_its_reason_and_recovered() {
    let mut broker = Mosquitto::start();
    let alerts = Receiver::start();
    let mut config = config(&alerts);
    config["mqtt"] = json!({"connections": [
        {"name": "b", "url": broker.url(), "client_id": "it-health", "reconnect_max_ms": 200},
    ]});
    config["sinks"] = json!([{"name": "uns", "type": "mqtt", "topic": "h/{{key}}", "qos": 1}]);
    config["flows"] = ingest_flow(&["uns"]);
    let daemon = Daemon::start(config);
    wait_until(DEADLINE, "the state ok with the sink connected", || {
        daemon.status()["state"] == "ok"
    });

    broker.stop();
    let mut down = Value::Null;
    wait_until(DEADLINE, "the sink's problem in /api/status", || {
        down = daemon.status();
        problem(&down, "sink uns", "sink_disconnected").is_some()
    });
    let p = problem(&down, "sink uns", "sink_disconnected").unwrap_or_default();
    assert_eq!(down["state"], "degraded", "{down:#}");
    assert_eq!(down["connector"]["healthy"], true, "{down:#}");
    assert!(
        p["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("not connected"),
        "{p}"
    );
    assert!(p["hint"].as_str().is_some_and(|h| !h.is_empty()), "{p}");
    wait_until(DEADLINE, "the outage alert at the webhook", || {
        !alerts_of(&alerts, "sink uns", "sink_disconnected").is_empty()
    });
    let alert = &alerts_of(&alerts, "sink uns", "sink_disconnected")[0];
    assert!(
        alert["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("not connected"),
        "{alert}"
    );
    assert!(
        alert["hint"].as_str().is_some_and(|h| !h.is_empty()),
        "{alert}"
    );

    let entry = sink_entry(&down, "uns");
    assert_eq!(entry["last_error_at"], p["since"], "{entry:#}");
    assert_eq!(entry["recovered_at"], Value::Null, "{entry:#}");

    broker.restart();
    wait_until(DEADLINE, "the recovery notice at the webhook", || {
        alerts_of(&alerts, "sink uns", "sink_disconnected")
            .iter()
            .any(|a| a["level"] == "ok")
    });
    let mut up = Value::Null;
    wait_until(DEADLINE, "the state ok again", || {
        up = daemon.status();
        up["state"] == "ok"
    });
    let entry = sink_entry(&up, "uns");
    assert_eq!(entry["last_error_at"], p["since"], "{entry:#}");
    assert!(entry["recovered_at"].is_string(), "{entry:#}");
}

/// The entry of sink `name` in `sinks[]` of `status`.
fn sink_entry(status: &Value, name: &str) -> Value {
    status["sinks"]
        .as_array()
        .and_then(|ss| ss.iter().find(|s| s["name"] == name))
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_point_that_stays_bad_for_more_than_three_polls_is_a_problem_with_its_exception_and_hint() {
    let device = ModbusTcp::start();
    let alerts = Receiver::start();
    let mut config = config(&alerts);
    // Unit 2 of the device has holding registers 0-9 but not 50: `gap` draws exception 2.
    config["devices"] = json!([{
        "name": "sparse",
        "protocol": "modbus_tcp",
        "host": "127.0.0.1",
        "port": device.port(),
        "unit": 2,
        "timeout_ms": 300,
        "groups": [{"name": "main", "interval_ms": 100}],
        "points": [{"name": "ok", "register": 0, "type": "u16"},
                   {"name": "gap", "register": 50, "type": "u16"}],
    }]);
    let daemon = Daemon::start(config);
    let mut status = Value::Null;
    wait_until(DEADLINE, "the bad point's problem in /api/status", || {
        status = daemon.status();
        problem(&status, "device sparse point main/gap", "point_bad").is_some()
    });
    let p = problem(&status, "device sparse point main/gap", "point_bad").unwrap_or_default();
    assert_eq!(status["state"], "degraded", "{status:#}");
    let message = p["message"].as_str().unwrap_or("");
    assert!(message.starts_with("bad for "), "{p}");
    assert!(
        message.contains("exception 2 (illegal data address)"),
        "{p}"
    );
    assert!(p["hint"].as_str().is_some_and(|h| !h.is_empty()), "{p}");
    assert!(
        problem(&status, "device sparse point main/ok", "point_bad").is_none(),
        "{status:#}"
    );
}
