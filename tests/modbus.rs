//! Modbus polling against a device nobody here wrote: pymodbus (pinned in scripts/test.sh),
//! over TCP and over RTU on a `socat` pty pair. And hold-then-drop through a real poller.
//!
//! Each test starts its own device (`common::ModbusTcp` on a free loopback port, or
//! `common::ModbusRtu` on its own pty pair in a temp dir); the harness waits for it by polling
//! and stops it on drop. A missing peer fails the test with a message saying what to install.

mod common;

use std::time::{Duration, Instant};

use common::{
    assert_balanced, free_port, ledger, measure_recovery, poll_until, source_figure, u64_at,
    wait_until, Daemon, ModbusRtu, ModbusTcp, ADMIN_TOKEN, RECOVERY_BOUND,
};
use serde_json::{json, Value};

fn device(daemon: &Daemon, i: usize) -> Value {
    let status = daemon
        .client()
        .get(&daemon.url("/api/status"), None)
        .expect("status");
    status.json()["devices"][i].clone()
}

/// The points of the map in tests/common/peers/modbus_device.py.
fn known_points() -> Value {
    json!([
        json!({"name": "u16", "register": 0, "type": "u16", "unit": "rpm"}),
        json!({"name": "i16", "register": 1, "type": "i16"}),
        json!({"name": "u32", "register": 2, "type": "u32"}),
        json!({"name": "i32", "register": 4, "type": "i32"}),
        json!({"name": "f32_big", "register": 6, "type": "f32", "unit": "°C"}),
        json!({"name": "f32_little", "register": 8, "type": "f32", "word_order": "little"}),
        json!({"name": "u64", "register": 10, "type": "u64"}),
        json!({"name": "i64_little", "register": 14, "type": "i64", "word_order": "little"}),
        json!({"name": "f64_big", "register": 18, "type": "f64"}),
        json!({"name": "f64_little", "register": 22, "type": "f64", "word_order": "little"}),
        json!({"name": "name", "register": 26, "type": "string", "length": 8}),
        json!({"name": "scaled", "register": 30, "type": "u16", "scale": 0.1, "offset": -10.0}),
        json!({"name": "flag", "register": 31, "type": "bool"}),
        json!({"name": "u32_little", "register": 32, "type": "u32", "word_order": "little"}),
        json!({"name": "last", "register": 99}),
        // Coalesced with `last`, past the device's map: the read is split, `last` stays good.
        json!({"name": "past_end", "register": 100}),
        json!({"name": "missing", "register": 200}),
        json!({"name": "input0", "register": 0, "kind": "input"}),
        json!({"name": "coil0", "register": 0, "kind": "coil"}),
        json!({"name": "coil1", "register": 1, "kind": "coil"}),
        json!({"name": "coil5", "register": 5, "kind": "coil"}),
        json!({"name": "discrete3", "register": 3, "kind": "discrete"}),
    ])
}

fn tcp_config(port: u16, interval_ms: u64) -> Value {
    json!({
        "connector": {
            "http": {"admin_token": ADMIN_TOKEN},
            "push_queue": {"enabled": true, "max_quota_mb": 16, "on_full": "evict_oldest"},
        },
        "devices": [{
            "name": "press-1",
            "protocol": "modbus_tcp",
            "host": "127.0.0.1",
            "port": port,
            "unit": 1,
            "timeout_ms": 500,
            "groups": [{"name": "main", "interval_ms": interval_ms}],
            "points": known_points(),
        }]
    })
}

fn value(d: &Value, name: &str) -> Value {
    d["values"]["main"][name].clone()
}

#[test]
fn a_pymodbus_device_is_decoded_right_and_its_exception_addresses_are_bad() {
    let peer = ModbusTcp::start();
    let daemon = Daemon::start(tcp_config(peer.port(), 200));
    wait_until(Duration::from_secs(15), "a first good poll", || {
        device(&daemon, 0)["polls_total"].as_u64().unwrap_or(0) >= 2
    });
    let d = device(&daemon, 0);
    let good = |name: &str, expected: Value| {
        let v = value(&d, name);
        assert_eq!(v["quality"], "good", "{name}: {v}");
        assert_eq!(v["value"], expected, "{name}: {v}");
    };
    good("u16", json!(1234));
    assert_eq!(value(&d, "u16")["unit"], "rpm");
    good("i16", json!(-1234));
    good("u32", json!(305_419_896u64));
    good("i32", json!(-123_456));
    good("f32_big", json!(21.5));
    good("f32_little", json!(21.5));
    good("u64", json!(0x0102_0304_0506_0708u64));
    good("i64_little", json!(-5));
    good("f64_big", json!(-1234.5));
    good("f64_little", json!(3.25));
    good("name", json!("PUMP-7"));
    let scaled = value(&d, "scaled")["value"]
        .as_f64()
        .expect("scaled is a number");
    assert!((scaled - 40.0).abs() < 1e-9, "{scaled}");
    good("flag", json!(true));
    good("u32_little", json!(70000));
    good("last", json!(99));
    good("input0", json!(4321));
    good("coil0", json!(true));
    good("coil1", json!(false));
    good("coil5", json!(true));
    good("discrete3", json!(true));
    for bad in ["past_end", "missing"] {
        let v = value(&d, bad);
        assert_eq!(v["quality"], "bad", "{bad}: {v}");
        assert_eq!(v["exception"], 2, "{bad}: {v}");
        assert_eq!(v["value"], Value::Null, "{bad}: {v}");
    }
    // Holding 0..33 (one request), 99 and 100 split in two after the exception, 200, input,
    // coils, discrete inputs.
    assert_eq!(d["requests_per_cycle"], 7, "{d}");
    assert_eq!(d["state"], "connected");
    assert_eq!(d["errors_total"], 0, "{d}");
    // The samples reach the push queue: one record per poll of the group.
    let status = daemon
        .client()
        .get(&daemon.url("/api/status"), None)
        .unwrap()
        .json();
    assert!(u64_at(&status, "/push_queue/rows") >= 2, "{status}");
    let metrics = daemon.client().get(&daemon.url("/metrics"), None).unwrap();
    let text = metrics.body;
    assert!(
        text.contains("opex_connector_device_polls_total{device=\"press-1\"}"),
        "{text}"
    );
    assert!(text.contains("opex_connector_device_jitter_p99_seconds{device=\"press-1\"}"));
}

#[test]
fn polling_resumes_after_the_device_is_killed_and_restarted() {
    let mut peer = ModbusTcp::start();
    let daemon = Daemon::start(tcp_config(peer.port(), 100));
    wait_until(Duration::from_secs(15), "polling", || {
        device(&daemon, 0)["polls_total"].as_u64().unwrap_or(0) >= 3
    });
    peer.kill9();
    wait_until(Duration::from_secs(10), "the poller notices", || {
        let d = device(&daemon, 0);
        d["state"] != "connected"
            && u64_at(&d, "/errors_total") + u64_at(&d, "/timeouts_total") >= 1
    });
    let before = u64_at(&device(&daemon, 0), "/polls_total");
    peer.restart();
    measure_recovery("pymodbus device", Instant::now(), RECOVERY_BOUND, || {
        let d = device(&daemon, 0);
        d["state"] == "connected" && u64_at(&d, "/polls_total") > before
    });
    // The breaker waits at most 1, 2, 4 s... while the device was down a few seconds.
    wait_until(Duration::from_secs(20), "polling resumes", || {
        let d = device(&daemon, 0);
        d["state"] == "connected" && u64_at(&d, "/polls_total") >= before + 3
    });
    let d = device(&daemon, 0);
    assert_eq!(value(&d, "u16")["value"], 1234);
    assert!(u64_at(&d, "/connects_total") >= 2, "{d}");
    // The ledger balances: the polls that failed while the device was down offered nothing,
    // and what was polled is counted with no loss.
    let l = assert_balanced(&ledger(&daemon, true), "after the device restart");
    let source = d["source"].as_str().unwrap_or("modbus/?").to_string();
    assert!(source_figure(&l, &source, "/acked") > 0, "{source}: {l:#}");
    assert_eq!(source_figure(&l, &source, "/lost"), 0, "{source}: {l:#}");
}

#[test]
fn on_an_rtu_line_a_missing_unit_does_not_delay_the_healthy_one() {
    let rtu = ModbusRtu::start();
    let line = |name: &str, unit: u64| {
        json!({
            "name": name,
            "protocol": "modbus_rtu",
            "port": rtu.serial_port().to_string_lossy(),
            "baud": 19200,
            "unit": unit,
            "timeout_ms": 150,
            "backoff_max_secs": 4,
            "groups": [{"name": "main", "interval_ms": 250}],
            "points": [{"name": "u16", "register": 0}, {"name": "f32_big", "register": 6, "type": "f32"}],
        })
    };
    let daemon = Daemon::start(json!({
        "devices": [line("healthy", 1), line("missing", 2)]
    }));
    wait_until(Duration::from_secs(20), "the healthy unit answers", || {
        device(&daemon, 0)["polls_total"].as_u64().unwrap_or(0) >= 2
    });
    let start = Instant::now();
    let before = u64_at(&device(&daemon, 0), "/polls_total");
    let window = Duration::from_secs(5);
    // Sleep-free: poll the status until the window has passed.
    poll_until(window, || false);
    let polls = u64_at(&device(&daemon, 0), "/polls_total") - before;
    let elapsed = start.elapsed().as_secs_f64();
    let expected = elapsed / 0.25;
    let healthy = device(&daemon, 0);
    let missing = device(&daemon, 1);
    assert!(
        polls as f64 >= expected * 0.85,
        "healthy unit polled {polls} times in {elapsed:.1} s, expected about {expected:.0}: {healthy}"
    );
    assert_eq!(value(&healthy, "u16")["value"], 1234, "{healthy}");
    assert_eq!(value(&healthy, "f32_big")["value"], 21.5, "{healthy}");
    assert_eq!(missing["polls_total"], 0, "{missing}");
    assert!(u64_at(&missing, "/timeouts_total") >= 2, "{missing}");
    assert_ne!(missing["state"], "connected", "{missing}");
}

#[test]
fn a_full_block_queue_holds_the_poller_for_its_hold_then_counts_the_drop() {
    let port = free_port();
    let daemon = Daemon::start(json!({
        "connector": {"push_queue": {"enabled": true, "max_quota_mb": 1, "on_full": "block"}},
        "ingest": {"sources": [{"name": "fill", "token": "fill-t0ken-01234"}]},
        "simulator": {"modbus": format!("127.0.0.1:{port}")},
        "devices": [{
            "name": "sim",
            "protocol": "modbus_tcp",
            "host": "127.0.0.1",
            "port": port,
            "hold_ms": 600,
            "groups": [{"name": "main", "interval_ms": 100}],
            "points": [{"name": "oven", "register": 0, "type": "f32"}],
        }]
    }));
    wait_until(Duration::from_secs(10), "polling the simulator", || {
        device(&daemon, 0)["polls_total"].as_u64().unwrap_or(0) >= 1
    });
    // Fill the 1 MiB queue with ingest records, large then smaller, until even a small
    // record is refused: the poller's samples then are too.
    let url = daemon.url("/api/ingest/fill/k");
    for size in [200_000, 20_000, 2_000, 100] {
        let body = format!("{{\"pad\":\"{}\"}}", "x".repeat(size));
        wait_until(Duration::from_secs(30), "the queue refuses (block)", || {
            let r = daemon
                .client()
                .post(&url, Some("fill-t0ken-01234"), body.as_bytes())
                .expect("ingest");
            r.status == 503
        });
    }
    wait_until(
        Duration::from_secs(10),
        "a sample dropped after the hold",
        || u64_at(&device(&daemon, 0), "/lost_total") >= 1,
    );
    poll_until(Duration::from_secs(3), || false);
    // One status document, so the device's count and the engine's are of the same moment.
    let status = daemon
        .client()
        .get(&daemon.url("/api/status"), None)
        .unwrap()
        .json();
    let d = status["devices"][0].clone();
    let lost = u64_at(&d, "/lost_total");
    assert_eq!(
        u64_at(&status, "/engine/stats/backpressure_lost"),
        lost,
        "{status}"
    );
    // About one drop per 600 ms hold (plus a poll), never one per 100 ms interval.
    assert!((2..=12).contains(&lost), "lost {lost}: {d}");
    assert!(u64_at(&d, "/skipped_total") >= 10, "{d}");
}
