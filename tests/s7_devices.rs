//! S7 devices in the connector (`protocol: s7`), through the real binary, against a PLC
//! nobody here wrote: python-snap7's server (`tests/common/peers/s7.rs`), its memory filled
//! by the test byte by byte and read back from the server's own memory after a write.
#![cfg(feature = "s7")]

mod common;

use std::time::Duration;

use common::{typed_db, u64_at, wait_until, Daemon, S7Plc, ADMIN_TOKEN};
use serde_json::{json, Value};

/// The commands token of these tests.
const COMMANDS_TOKEN: &str = "cmd-t0ken-0123456789";

fn config(plc: &S7Plc, points: Value) -> Value {
    json!({
        "connector": {
            "http": {"admin_token": ADMIN_TOKEN},
            "push_queue": {"enabled": true, "max_quota_mb": 16, "on_full": "evict_oldest"},
        },
        "commands": {"token": COMMANDS_TOKEN},
        "devices": [{
            "name": "plc",
            "protocol": "s7",
            "host": "127.0.0.1",
            "port": plc.port(),
            "rack": 0,
            "slot": 1,
            "timeout_ms": 2000,
            "backoff_max_secs": 2,
            "groups": [{"name": "main", "interval_ms": 200}],
            "points": points,
        }]
    })
}

fn device(daemon: &Daemon) -> Value {
    let status = daemon.status();
    status["devices"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["name"] == "plc").cloned())
        .unwrap_or_else(|| panic!("no device plc: {status:#}"))
}

fn polled(daemon: &Daemon) -> Value {
    wait_until(Duration::from_secs(30), "the PLC polled", || {
        let d = device(daemon);
        d["state"] == "connected" && u64_at(&d, "/polls_total") >= 1
    });
    device(daemon)
}

/// Sends a command and returns the answer (always 200 once the command was taken).
fn write(daemon: &Daemon, command: Value) -> Value {
    let r = daemon.post(
        "/api/devices/plc/write",
        Some(COMMANDS_TOKEN),
        command.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{command}: {}", r.body);
    r.json()
}

#[test]
fn every_type_polls_to_its_typed_value_and_a_point_in_a_missing_db_is_bad_with_its_reason() {
    let plc = S7Plc::start(&[
        ("DB", 10, typed_db()),
        ("M", 0, vec![0x02, 0x00, 0x12, 0x34]),
    ]);
    let p =
        |name: &str, address: &str, t: &str| json!({"name": name, "address": address, "type": t});
    let daemon = Daemon::start(config(
        &plc,
        json!([
            p("b3", "DB10.DBX0.3", "bool"),
            p("b4", "DB10.DBX0.4", "bool"),
            p("byte", "DB10.DBB1", "byte"),
            p("char", "DB10.DBB2", "char"),
            p("word", "DB10.DBW4", "word"),
            p("int", "DB10.DBW6", "int"),
            p("dword", "DB10.DBD8", "dword"),
            p("dint", "DB10.DBD12", "dint"),
            p("real", "DB10.DBD16", "real"),
            p("lreal", "DB10.DBB20", "lreal"),
            {"name": "text", "address": "DB10.DBB28", "type": "string", "length": 10},
            p("dt", "DB10.DBB40", "date_and_time"),
            p("dtl", "DB10.DBB48", "dtl"),
            p("s5", "DB10.DBW60", "s5time"),
            p("time", "DB10.DBD62", "time"),
            p("flag", "M0.1", "bool"),
            {"name": "scaled", "address": "MW2", "type": "int", "scale": 0.1, "unit": "bar"},
            p("missing", "DB99.DBW0", "int"),
        ]),
    ));
    let d = polled(&daemon);
    let values = &d["values"]["main"];
    let value = |name: &str| values[name]["value"].clone();
    for (name, want) in [
        ("b3", json!(true)),
        ("b4", json!(false)),
        ("byte", json!(200)),
        ("char", json!("Z")),
        ("word", json!(65534)),
        ("int", json!(-2)),
        ("dword", json!(3_735_928_559u64)),
        ("dint", json!(-100_000)),
        ("real", json!(-3.5)),
        ("lreal", json!(12345.678)),
        ("text", json!("Ofen 3")),
        ("dt", json!("2026-12-04T18:03:49.123Z")),
        ("dtl", json!("2026-12-04T18:03:49.250Z")),
        ("s5", json!(12300)),
        ("time", json!(-5000)),
        ("flag", json!(true)),
        ("scaled", json!(466.0)),
    ] {
        assert_eq!(value(name), want, "{name}: {values:#}");
        assert_eq!(values[name]["quality"], "good", "{name}: {values:#}");
    }
    assert_eq!(values["scaled"]["unit"], "bar", "{values:#}");
    assert_eq!(
        values["missing"],
        json!({"value": null, "quality": "bad", "error": "DB99 does not exist in the PLC (S7 item error 0x0A)"}),
        "{values:#}"
    );
    assert_eq!(d["pdu_size"], 480, "{d:#}");
    assert_eq!(d["protocol"], "s7", "{d:#}");
    // The error names the point and says what to check.
    let refusal = d["last_exception"].as_str().unwrap_or_default();
    assert!(
        refusal.contains("DB99") && refusal.contains("point missing"),
        "{d:#}"
    );
    let hint = d["last_exception_hint"].as_str().unwrap_or_default();
    assert!(hint.contains("optimized"), "{d:#}");
    // Eighteen items fit one request of the negotiated 480 bytes: one request a poll.
    assert!(
        plc.read_requests().iter().all(|&n| n == 18),
        "{:?}",
        plc.read_requests()
    );
    assert_eq!(u64_at(&d, "/requests_per_cycle"), 1, "{d:#}");
    // Its numbers are in the trends, as every device's.
    let real = "point/plc/main.real";
    let trend = daemon
        .get(&format!("/api/trends?series={real}"), None)
        .json();
    let series = &trend["series"][0];
    assert_eq!(series["name"], real, "{trend:#}");
    let lasts = series["last"].as_array().cloned().unwrap_or_default();
    assert!(lasts.contains(&json!(-3.5)), "{trend:#}");
}

#[test]
fn commands_write_through_the_commands_path_a_bit_alone_and_bounds_hold_after_rounding() {
    let mut db = vec![0u8; 16];
    db[0] = 0b0010_1000; // DBX0.3 and DBX0.5 set
    let mut plc = S7Plc::start(&[("DB", 10, db)]);
    let daemon = Daemon::start(config(
        &plc,
        json!([
            {"name": "lamp", "address": "DB10.DBX0.4", "writable": true},
            {"name": "setpoint", "address": "DB10.DBD2", "type": "real", "writable": true, "min": 0, "max": 250},
            {"name": "speed", "address": "DB10.DBW6", "type": "int", "scale": 10, "writable": true, "max": 255},
            {"name": "label", "address": "DB10.DBB8", "type": "string", "length": 6, "writable": true},
            {"name": "count", "address": "DB10.DBW14", "type": "word"},
        ]),
    ));
    polled(&daemon);

    // Everything checked before anything is sent: one bad point, nothing written.
    let before = plc.memory("DB", 10);
    let answer = write(
        &daemon,
        json!({"points": {"setpoint": 120.5, "speed": 255}}),
    );
    assert_eq!(
        answer["points"]["speed"]["result"], "out_of_range",
        "{answer:#}"
    );
    let why = answer["points"]["speed"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("260"),
        "255 is held as 26 × 10 = 260: {answer:#}"
    );
    assert_eq!(
        answer["points"]["setpoint"]["result"], "refused",
        "{answer:#}"
    );
    let answer = write(&daemon, json!({"points": {"count": 3}}));
    assert_eq!(answer["points"]["count"]["result"], "refused", "{answer:#}");
    assert_eq!(plc.memory("DB", 10), before, "nothing was written");

    let answer = write(
        &daemon,
        json!({"points": {"lamp": true, "setpoint": 120.5, "speed": 250, "label": "Ofen 9"}, "verify": true}),
    );
    for point in ["lamp", "setpoint", "speed", "label"] {
        assert_eq!(
            answer["points"][point]["result"], "written",
            "{point}: {answer:#}"
        );
    }
    let mem = plc.memory("DB", 10);
    assert_eq!(
        mem[0], 0b0011_1000,
        "DBX0.4 set, DBX0.3 and DBX0.5 left alone"
    );
    assert_eq!(&mem[2..6], &120.5f32.to_be_bytes());
    assert_eq!(&mem[6..8], &25i16.to_be_bytes());
    assert_eq!(&mem[8..16], &[6, 6, b'O', b'f', b'e', b'n', b' ', b'9']);
    // The bit went out as a BIT item at its own address, never as its byte.
    let log = plc.log();
    assert!(
        log.lines()
            .any(|l| l.starts_with("write area=DB index=10 start=0 bit=4 data=01")),
        "{log}"
    );

    // The PLC gone: a command is answered unavailable, nothing queued or retried.
    plc.stop();
    wait_until(Duration::from_secs(20), "the PLC seen down", || {
        device(&daemon)["state"] != "connected"
    });
    let answer = write(&daemon, json!({"points": {"lamp": false}}));
    assert_eq!(
        answer["points"]["lamp"]["result"], "unavailable",
        "{answer:#}"
    );
}

#[test]
fn a_plc_stopped_and_started_again_is_in_backoff_then_polled_again_within_its_backoff() {
    let mut plc = S7Plc::start(&[("DB", 10, typed_db())]);
    let daemon = Daemon::start(config(
        &plc,
        json!([{"name": "word", "address": "DB10.DBW4", "type": "word"}]),
    ));
    polled(&daemon);
    plc.stop();
    wait_until(Duration::from_secs(20), "the breaker open", || {
        let d = device(&daemon);
        d["state"] == "backoff" && u64_at(&d, "/errors_total") >= 2
    });
    let d = device(&daemon);
    let hint = d["last_error_hint"].as_str().unwrap_or_default();
    assert!(hint.contains("port"), "{d:#}");
    let polls = u64_at(&d, "/polls_total");
    plc.start_again();
    // backoff_max_secs is 2: back within a few seconds of the PLC's return.
    wait_until(Duration::from_secs(15), "polled again", || {
        let d = device(&daemon);
        d["state"] == "connected" && u64_at(&d, "/polls_total") > polls
    });
    assert_eq!(device(&daemon)["values"]["main"]["word"]["value"], 65534);
}
