//! Black-box harness for the `opex-connector` binary.
//!
//! - [`Daemon`] (`daemon.rs`) runs the real binary in a temp dir (`run --config`), with
//!   `http.listen` on port 0, and reads the bound address back from the one stdout line the
//!   daemon prints once it listens. It can be stopped (SIGTERM), killed (SIGKILL) and
//!   restarted on the same data dir and config.
//! - [`Client`] (`client.rs`) is a small blocking HTTP client (ureq 3; 4xx/5xx come back as
//!   replies), with helpers for payloads and Prometheus text.
//! - [`Receiver`] (`receiver.rs`) is an uplink receiver: a tiny HTTP/1.1 server on a
//!   loopback port that records every NDJSON line it accepts, and can answer 503, reject a
//!   marked record with 400, or really go down (listener closed, open connections cut) and
//!   come back on the same port.
//! - `signing.rs` signs webhook requests (`X-Opex-Signature`, HMAC-SHA256 written out here);
//!   `api.rs` reads the flow-era API: events, dead letters, refusals, `engine.webhooks[]`.
//! - `ledger.rs` reads `GET /api/ledger` and checks its identity.
//! - `recovery.rs` measures and prints the recovery time after a peer outage.
//! - `peers/` starts every real peer (nats-server, a JetStream cluster, mosquitto, PostgreSQL,
//!   ClickHouse, pymodbus over TCP and RTU, asyncua), one file each, all of one shape: see
//!   its module doc; and the OPC-UA clients of the connector's OPC-UA server (asyncua's, driven
//!   by JSON lines, and node-opcua's).
//! - [`free_port`] (`ports.rs`, shared with the benches) picks a free loopback port.
//! - [`wait_until`] polls a condition with a deadline: readiness is never a fixed sleep.
//!
//! Each test binary uses a subset of this module.
#![allow(dead_code)]

mod api;
mod client;
mod daemon;
mod ledger;
mod peers;
mod ports;
mod receiver;
mod recovery;
mod signing;

// Each test binary uses a subset of these.
#[allow(unused_imports)]
pub use self::{
    api::*, client::*, daemon::*, ledger::*, peers::*, ports::*, receiver::*, recovery::*,
    signing::*,
};

use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_opex-connector");
/// The ingest source every test config declares.
pub const SOURCE: &str = "orders";
/// Its bearer token, of the 16 characters a token needs at least. (The interface example's
/// `s3cret` is refused for its length; `validate.rs` checks that example separately.)
pub const TOKEN: &str = "s3cret-t0ken-0123";
/// One MiB, the unit of `max_quota_mb`.
pub const MIB: u64 = 1_048_576;
/// How long a daemon may take to print its listening line (a loaded CI box builds in parallel).
pub const START_DEADLINE: Duration = Duration::from_secs(30);
/// Default deadline of a poll for an asynchronous outcome (uplink delivery, drain).
pub const POLL_DEADLINE: Duration = Duration::from_secs(60);

// Polling

/// Polls `cond` every 20 ms until it holds; panics with `what` after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    if !poll_until(timeout, &mut cond) {
        panic!("timed out after {timeout:?} waiting for: {what}");
    }
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes; returns whether it held.
pub fn poll_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

// Config

/// A config with one ingest source (`orders`/`s3cret`) and a durable push queue of
/// `quota_mb` MiB with the given `on_full`; no uplink. Tests add keys before starting.
pub fn queue_config(quota_mb: i64, on_full: &str) -> Value {
    json!({
        "connector": {
            "name": "it",
            "http": { "max_body_kb": 1024 },
            "push_queue": { "enabled": true, "max_quota_mb": quota_mb, "on_full": on_full },
        },
        "ingest": { "sources": [ { "name": SOURCE, "token": TOKEN } ] },
    })
}

/// The parts a config answer (`POST /api/config`) lists under `change`: `start`, `stop`,
/// `restart` or `keep`.
pub fn parts_under<'a>(answer: &'a Value, change: &str) -> Vec<&'a str> {
    answer["changes"][change]
        .as_array()
        .unwrap_or_else(|| panic!("no {change} in {answer}"))
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// `flows:` of one flow, `out`: the `orders` ingest source wired to each of `sinks`
/// (nodes `in` and `to-<sink>`).
pub fn ingest_flow(sinks: &[&str]) -> Value {
    let mut nodes =
        vec![json!({"id": "in", "kind": "source", "source": format!("ingest/{SOURCE}")})];
    let mut wires = Vec::new();
    for s in sinks {
        nodes.push(json!({"id": format!("to-{s}"), "kind": "sink", "sink": s}));
        wires.push(json!({"from": "in", "to": format!("to-{s}")}));
    }
    json!([{"id": "out", "nodes": nodes, "wires": wires}])
}

/// The demo's plant (config/demo.yaml) served by the built-in simulator on `port`, its
/// `process` group polled four times a second; the admin token set.
pub fn plant_config(port: u16) -> Value {
    json!({
        "connector": {
            "name": "line-3",
            "http": {"admin_token": ADMIN_TOKEN},
            "push_queue": {"enabled": true, "max_quota_mb": 64, "on_full": "evict_oldest"},
        },
        "ingest": {"sources": [{"name": SOURCE, "token": TOKEN}]},
        "simulator": {"modbus": format!("127.0.0.1:{port}")},
        "devices": [{
            "name": "plant-1",
            "protocol": "modbus_tcp",
            "host": "127.0.0.1",
            "port": port,
            "unit": 1,
            "timeout_ms": 500,
            "groups": [{"name": "process", "interval_ms": 250}, {"name": "counters", "interval_ms": 1000}],
            "points": [
                {"name": "oven_temp", "group": "process", "register": 0, "type": "f32", "unit": "°C"},
                {"name": "coolant_temp", "group": "process", "register": 2, "type": "f32", "unit": "°C"},
                {"name": "pressure", "group": "process", "register": 7, "type": "i16", "scale": 0.1, "unit": "bar"},
                {"name": "pump_running", "group": "process", "register": 0, "kind": "coil"},
                {"name": "parts", "group": "counters", "register": 4, "type": "u32"},
                {"name": "model", "group": "counters", "register": 8, "type": "string", "length": 8},
            ],
        }],
    })
}

/// Renders a JSON value as block-style YAML (what an operator would write).
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(_) | Value::Array(_) => yaml_block(value, 0, &mut out),
        scalar => {
            out.push_str(&yaml_scalar(scalar));
            out.push('\n');
        }
    }
    out
}

fn yaml_scalar(value: &Value) -> String {
    match value {
        Value::Object(m) if m.is_empty() => "{}".into(),
        Value::Array(a) if a.is_empty() => "[]".into(),
        // A JSON string is a valid YAML double-quoted scalar.
        other => other.to_string(),
    }
}

fn is_block(value: &Value) -> bool {
    match value {
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => false,
    }
}

fn yaml_block(value: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) => {
            for (key, val) in map {
                if is_block(val) {
                    out.push_str(&format!("{pad}{key}:\n"));
                    yaml_block(val, indent + 2, out);
                } else {
                    out.push_str(&format!("{pad}{key}: {}\n", yaml_scalar(val)));
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                if is_block(item) {
                    // Render the item two columns in, then put the dash on its first line.
                    let mut inner = String::new();
                    yaml_block(item, indent + 2, &mut inner);
                    out.push_str(&pad);
                    out.push_str("- ");
                    out.push_str(&inner[indent + 2..]);
                } else {
                    out.push_str(&format!("{pad}- {}\n", yaml_scalar(item)));
                }
            }
        }
        scalar => out.push_str(&format!("{pad}{}\n", yaml_scalar(scalar))),
    }
}

/// A generated page of the repository (`path` from its root) against what the code writes
/// now: the test fails when they differ, naming the test binary (`test`) whose run with
/// `UPDATE_REFERENCE=1` writes the page again instead.
pub fn committed_page(path: &str, generated: &str, test: &str) {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    if std::env::var_os("UPDATE_REFERENCE").is_some_and(|v| v == "1") {
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).expect("make the folder");
        }
        std::fs::write(&file, generated).expect("write the file");
        return;
    }
    let on_disk = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{path} differs from what the code writes: run `UPDATE_REFERENCE=1 cargo test --test {test}` and commit it"
    );
}
