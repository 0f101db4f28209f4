//! Commands down to devices through their paths in, against the real binary: HTTP
//! (`POST /api/devices/{device}/write`), NATS request-reply and MQTT.

mod common;

use common::*;
use serde_json::{json, Value};

/// The commands token of these tests (16 characters at least).
const COMMANDS_TOKEN: &str = "cmd-t0ken-0123456789";

/// A connector with `commands:` and one device, `plant-1`, on the built-in simulator.
fn commands_config(port: u16) -> Value {
    let mut c = queue_config(16, "evict_oldest");
    c["commands"] = json!({"token": COMMANDS_TOKEN});
    c["simulator"] = json!({"modbus": format!("127.0.0.1:{port}")});
    c["devices"] = json!([{
        "name": "plant-1",
        "protocol": "modbus_tcp",
        "host": "127.0.0.1",
        "port": port,
        "timeout_ms": 500,
        "points": [{"name": "oven_temp", "register": 0, "type": "f32"}],
    }]);
    c
}

fn write(d: &Daemon, device: &str, token: Option<&str>, body: &Value) -> Reply {
    d.post(
        &format!("/api/devices/{device}/write"),
        token,
        body.to_string().as_bytes(),
    )
}

#[test]
fn http_commands_refuse_a_wrong_token_a_malformed_body_an_unknown_device_and_a_large_body() {
    let d = Daemon::start(commands_config(free_port()));
    let body = json!({"id": "cmd-1", "points": {"setpoint": 72.5}});

    let r = write(&d, "plant-1", None, &body);
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.json()["error"], "missing or wrong commands token");
    let r = write(&d, "plant-1", Some("wrong-t0ken-0123456789"), &body);
    assert_eq!(r.status, 401, "{}", r.body);
    // The admin or an ingest token is not the commands token.
    let r = write(&d, "plant-1", Some(TOKEN), &body);
    assert_eq!(r.status, 401, "{}", r.body);

    let r = write(&d, "plant-1", Some(COMMANDS_TOKEN), &json!({"points": {}}));
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"], "points: empty");
    let r = d.post(
        "/api/devices/plant-1/write",
        Some(COMMANDS_TOKEN),
        b"{\"points\":",
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json()["error"]
        .as_str()
        .unwrap()
        .starts_with("malformed JSON"));

    let r = write(&d, "press-9", Some(COMMANDS_TOKEN), &body);
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.json()["error"], "no device \"press-9\" takes commands");

    // max_body_kb is 1024 in these configs.
    let big = format!(
        "{{\"points\":{{\"a\":1}},\"id\":\"{}\"}}",
        "x".repeat(1100 * 1024)
    );
    let r = d.post(
        "/api/devices/plant-1/write",
        Some(COMMANDS_TOKEN),
        big.as_bytes(),
    );
    assert_eq!(r.status, 413, "{}", r.body);

    let r = d.get("/api/devices/plant-1/write", Some(COMMANDS_TOKEN));
    assert_eq!(r.status, 405, "{}", r.body);
    assert_eq!(r.header("allow"), Some("POST"));

    let status = d.status();
    assert_eq!(status["auth"]["commands_unauthorized"], 3, "{status}");
    assert_eq!(
        metric(&d.metrics(), "opex_connector_commands_unauthorized_total"),
        Some(3.0)
    );
}

#[test]
fn without_a_commands_token_the_write_path_does_not_exist() {
    let mut c = commands_config(free_port());
    c.as_object_mut().unwrap().remove("commands");
    let d = Daemon::start(c);
    let r = write(
        &d,
        "plant-1",
        Some(COMMANDS_TOKEN),
        &json!({"points": {"setpoint": 1}}),
    );
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(
        r.json()["error"],
        "commands over HTTP are off: commands.token is not configured"
    );
}
