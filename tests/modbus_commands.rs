//! Commands to Modbus devices, through the real binary and `POST /api/devices/{device}/write`,
//! against pymodbus (a device nobody here wrote): over TCP, where the test reads the device's
//! own datastore back on a connection of its own, and over RTU on a `socat` pty pair, where
//! the line task's polls read it back.
//!
//! The device (tests/common/peers/modbus_device.py) counts the write requests it sees, per
//! function code, logs the addresses of the last ten, and has registers that answer a write
//! late, answer a read late, or keep less than was written.

mod common;

use std::time::Duration;

use common::{
    free_port, ledger, source_figure, u64_at, unix_ms, wait_until, Daemon, ModbusRtu, ModbusTcp,
    Receiver, ADMIN_TOKEN,
};
use serde_json::{json, Value};

/// The commands token of these tests.
const COMMANDS_TOKEN: &str = "cmd-t0ken-0123456789";

/// The device's write counters (see modbus_device.py).
const WRITES: u16 = 70;
const SLOW_WRITES: u16 = 71;
const SLOW_READS: u16 = 72;
const FC_COUNTS: u16 = 73; // 5, 6, 15, 16
const WRITE_LOG: u16 = 80;

fn tcp_config(port: u16, timeout_ms: u64, points: Value) -> Value {
    json!({
        "connector": {
            "http": {"admin_token": ADMIN_TOKEN},
            "push_queue": {"enabled": true, "max_quota_mb": 16, "on_full": "evict_oldest"},
        },
        "commands": {"token": COMMANDS_TOKEN},
        "devices": [{
            "name": "press-1",
            "protocol": "modbus_tcp",
            "host": "127.0.0.1",
            "port": port,
            "unit": 1,
            "timeout_ms": timeout_ms,
            "backoff_max_secs": 8,
            "groups": [{"name": "main", "interval_ms": 100}],
            "points": points,
        }]
    })
}

/// Sends a command and returns the answer (always 200 once the command was taken).
fn write(daemon: &Daemon, device: &str, command: Value) -> Value {
    let r = daemon.post(
        &format!("/api/devices/{device}/write"),
        Some(COMMANDS_TOKEN),
        command.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{command}: {}", r.body);
    r.json()
}

/// The result of `point` in `answer`, with the answer when it is not `want`.
fn assert_result(answer: &Value, point: &str, want: &str) {
    assert_eq!(
        answer["points"][point]["result"], want,
        "{point}: {answer:#}"
    );
}

fn reason(answer: &Value, point: &str) -> String {
    answer["points"][point]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn device(daemon: &Daemon, name: &str) -> Value {
    let status = daemon.status();
    status["devices"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["name"] == name).cloned())
        .unwrap_or_else(|| panic!("no device {name}: {status:#}"))
}

fn wait_connected(daemon: &Daemon, name: &str) {
    wait_until(Duration::from_secs(20), "the device is connected", || {
        let d = device(daemon, name);
        d["state"] == "connected" && u64_at(&d, "/polls_total") >= 1
    });
}

/// Waits until the ledger holds `n` records of `command/<device>` (the record is offered once
/// the command is answered), and checks there are no more.
fn assert_command_records(daemon: &Daemon, device: &str, n: u64) {
    let source = format!("command/{device}");
    wait_until(Duration::from_secs(10), "the command records", || {
        source_figure(&ledger(daemon, false), &source, "/acked") >= n
    });
    let l = ledger(daemon, false);
    assert_eq!(source_figure(&l, &source, "/acked"), n, "{l:#}");
}

fn f32_words(v: f32) -> [u16; 2] {
    let b = v.to_bits();
    [(b >> 16) as u16, b as u16]
}

fn u64_words(v: u64) -> [u16; 4] {
    [
        (v >> 48) as u16,
        (v >> 32) as u16,
        (v >> 16) as u16,
        v as u16,
    ]
}

#[test]
fn every_function_code_and_type_is_written_in_order_and_read_back_from_the_device_itself() {
    let peer = ModbusTcp::start();
    let receiver = Receiver::start();
    let w = |name: &str, register: u64, extra: Value| {
        let mut p = json!({"name": name, "register": register, "writable": true});
        if let (Value::Object(p), Value::Object(e)) = (&mut p, extra) {
            p.extend(e);
        }
        p
    };
    let mut config = tcp_config(
        peer.port(),
        1000,
        json!([
            w("u16", 34, json!({})),
            w("i16", 35, json!({"type": "i16"})),
            w("u32", 36, json!({"type": "u32"})),
            w(
                "i32_little",
                38,
                json!({"type": "i32", "word_order": "little"})
            ),
            w("f32", 40, json!({"type": "f32", "min": -50, "max": 250})),
            w(
                "f32_swapped",
                42,
                json!({"type": "f32", "word_order": "little", "byte_order": "little"})
            ),
            w("u64", 44, json!({"type": "u64"})),
            w(
                "i64_little",
                48,
                json!({"type": "i64", "word_order": "little"})
            ),
            w("f64", 52, json!({"type": "f64"})),
            w("text", 56, json!({"type": "string", "length": 4})),
            w("scaled", 58, json!({"scale": 0.1, "offset": -10.0})),
            w("flag", 59, json!({"type": "bool"})),
            w("coil8", 8, json!({"kind": "coil"})),
            w("coil9", 9, json!({"kind": "coil"})),
            w("coil10", 10, json!({"kind": "coil"})),
            w("coil11", 11, json!({"kind": "coil"})),
        ]),
    );
    config["connector"]["push"] = json!({"url": receiver.url(), "retry_initial_ms": 50});
    let daemon = Daemon::start(config);
    wait_connected(&daemon, "press-1");

    let a = write(
        &daemon,
        "press-1",
        json!({"id": "cmd-registers", "verify": true, "points": {
            "u16": 1234, "i16": -1234, "u32": 305_419_896u64, "i32_little": -123_456,
            "f32": 21.5, "f32_swapped": -0.75, "u64": 0x0102_0304_0506_0708u64,
            "i64_little": -5, "f64": -1234.5, "text": "OPEX", "scaled": 40.0, "flag": true,
        }}),
    );
    assert_eq!(a["ok"], true, "{a:#}");
    assert_eq!(a["id"], "cmd-registers");
    let b = write(
        &daemon,
        "press-1",
        json!({"id": "cmd-coil", "points": {"coil8": true}}),
    );
    assert_eq!(b["ok"], true, "{b:#}");
    let c = write(
        &daemon,
        "press-1",
        json!({"id": "cmd-coils", "points": {"coil9": true, "coil10": false, "coil11": 1}}),
    );
    assert_eq!(c["ok"], true, "{c:#}");

    // What the device holds, as an independent layout of the same numbers.
    let mut want: Vec<u16> = vec![1234, (-1234i16) as u16, 0x1234, 0x5678];
    let i = (-123_456i32) as u32;
    want.extend([i as u16, (i >> 16) as u16]);
    want.extend(f32_words(21.5));
    let [hi, lo] = f32_words(-0.75);
    want.extend([lo.swap_bytes(), hi.swap_bytes()]);
    want.extend(u64_words(0x0102_0304_0506_0708));
    let mut i64_words = u64_words((-5i64) as u64);
    i64_words.reverse();
    want.extend(i64_words);
    want.extend(u64_words((-1234.5f64).to_bits()));
    want.extend([u16::from_be_bytes(*b"OP"), u16::from_be_bytes(*b"EX")]);
    want.extend([500, 1]);
    assert_eq!(peer.read_holding(34, 26), want);
    assert_eq!(peer.read_coils(8, 4), vec![true, true, false, true]);

    // One request per register point (FC 6 for one register, FC 16 for more), FC 5 for the
    // lone coil, one FC 15 for the three coils side by side: 14 requests, in order.
    assert_eq!(peer.read_holding(WRITES, 1), vec![14]);
    assert_eq!(peer.read_holding(FC_COUNTS, 4), vec![1, 4, 1, 8]);
    assert_eq!(
        peer.read_holding(WRITE_LOG, 10),
        vec![40, 42, 44, 48, 52, 56, 58, 59, 8, 9]
    );
    let d = device(&daemon, "press-1");
    assert_eq!(u64_at(&d, "/writes_total"), 14, "{d:#}");
    assert_eq!(u64_at(&d, "/commands/received"), 3, "{d:#}");
    assert_eq!(u64_at(&d, "/commands/written"), 16, "{d:#}");
    assert_eq!(d["writable"].as_array().map(Vec::len), Some(16), "{d:#}");

    // The polls go on, and read the new values.
    wait_until(Duration::from_secs(10), "a poll reads the writes", || {
        let v = &device(&daemon, "press-1")["values"]["main"];
        v["u16"]["value"] == 1234 && v["text"]["value"] == "OPEX" && v["coil11"]["value"] == true
    });

    // One record per command, key = its id, with every point's value and result.
    assert_command_records(&daemon, "press-1", 3);
    wait_until(
        Duration::from_secs(10),
        "the command records upstream",
        || {
            receiver
                .records()
                .iter()
                .filter(|r| r["source"] == "command/press-1")
                .count()
                >= 3
        },
    );
    let records: Vec<Value> = receiver
        .records()
        .into_iter()
        .filter(|r| r["source"] == "command/press-1")
        .collect();
    let mut keys: Vec<&str> = records.iter().filter_map(|r| r["key"].as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys, vec!["cmd-coil", "cmd-coils", "cmd-registers"]);
    let rec = records
        .iter()
        .find(|r| r["key"] == "cmd-registers")
        .expect("the record");
    assert_eq!(rec["payload"]["points"]["f32"]["value"], 21.5, "{rec:#}");
    assert_eq!(rec["payload"]["points"]["f32"]["result"], "written");
    assert_eq!(rec["payload"]["verify"], true);
    assert_eq!(rec["payload"]["origin"]["path"], "http");
}

#[test]
fn a_device_exception_is_that_points_result_and_the_next_points_are_still_written() {
    let peer = ModbusTcp::start();
    let daemon = Daemon::start(tcp_config(
        peer.port(),
        1000,
        json!([
            {"name": "past_end", "register": 100, "writable": true},
            {"name": "ok", "register": 34, "writable": true},
            {"name": "past_end_pair", "register": 99, "type": "u32", "writable": true},
            {"name": "past_coils", "register": 20, "kind": "coil", "writable": true},
        ]),
    ));
    wait_connected(&daemon, "press-1");
    let a = write(
        &daemon,
        "press-1",
        json!({"points": {"past_end": 1, "ok": 7, "past_end_pair": 1, "past_coils": true}}),
    );
    assert_eq!(a["ok"], false);
    for p in ["past_end", "past_end_pair", "past_coils"] {
        assert_result(&a, p, "exception");
        assert_eq!(a["points"][p]["exception"], 2, "{a:#}");
    }
    assert_result(&a, "ok", "written");
    assert_eq!(peer.read_holding(34, 1), vec![7]);
    let d = device(&daemon, "press-1");
    assert_eq!(u64_at(&d, "/commands/failed"), 3, "{d:#}");
    assert_eq!(
        d["state"], "connected",
        "an exception is data, not a link error: {d:#}"
    );
    assert_command_records(&daemon, "press-1", 1);
}

#[test]
fn a_point_not_writable_or_a_value_that_does_not_fit_refuses_the_whole_command_and_sends_nothing() {
    let peer = ModbusTcp::start();
    let daemon = Daemon::start(tcp_config(
        peer.port(),
        1000,
        json!([
            {"name": "reading", "register": 0},
            {"name": "input", "register": 0, "kind": "input"},
            {"name": "small", "register": 34, "writable": true},
            {"name": "bounded", "register": 40, "type": "f32", "writable": true, "min": 0, "max": 250},
            {"name": "tenths", "register": 35, "type": "i16", "scale": 0.1, "writable": true},
            {"name": "coil", "register": 8, "kind": "coil", "writable": true},
        ]),
    ));
    wait_connected(&daemon, "press-1");
    let a = write(
        &daemon,
        "press-1",
        json!({"points": {"reading": 1, "small": 5}}),
    );
    assert_result(&a, "reading", "refused");
    assert_eq!(reason(&a, "reading"), "point \"reading\" is not writable");
    assert_result(&a, "small", "refused");
    assert_eq!(
        reason(&a, "small"),
        "another point of the command was refused"
    );
    let a = write(&daemon, "press-1", json!({"points": {"input": 1}}));
    assert_result(&a, "input", "refused");
    let a = write(&daemon, "press-1", json!({"points": {"nope": 1}}));
    assert_eq!(
        reason(&a, "nope"),
        "device \"press-1\" has no point \"nope\""
    );
    for (point, value, why) in [
        ("small", json!(70000), "70000 does not fit u16 (0..=65535)"),
        ("small", json!(-1), "-1 does not fit u16 (0..=65535)"),
        ("small", json!("7"), "expected a number, got \"7\""),
        ("bounded", json!(250.5), "250.5 is above max 250"),
        ("bounded", json!(-1), "-1 is below min 0"),
        (
            "tenths",
            json!(3276.8),
            "3276.8 does not fit i16 with its scale and offset",
        ),
        (
            "coil",
            json!(2),
            "expected true or false (or 1 or 0), got 2",
        ),
    ] {
        // With a good point beside it, which is not sent either.
        let other = if point == "coil" { "small" } else { "coil" };
        let a = write(
            &daemon,
            "press-1",
            json!({"points": {point: value, other: 1}}),
        );
        assert_result(&a, point, "out_of_range");
        assert!(reason(&a, point).starts_with(why), "{a:#}");
        assert_result(&a, other, "refused");
    }
    // Nothing reached the device.
    assert_eq!(peer.read_holding(WRITES, 1), vec![0]);
    assert_eq!(peer.read_holding(34, 2), vec![0, 0]);
    assert_eq!(peer.read_coils(8, 1), vec![false]);
    let d = device(&daemon, "press-1");
    assert_eq!(u64_at(&d, "/writes_total"), 0, "{d:#}");
    assert_eq!(u64_at(&d, "/commands/received"), 10, "{d:#}");
    assert_eq!(u64_at(&d, "/commands/written"), 0, "{d:#}");
    assert_command_records(&daemon, "press-1", 10);
}

#[test]
fn a_write_answered_after_the_timeout_is_unknown_sent_exactly_once_and_ends_the_command() {
    let peer = ModbusTcp::start();
    let daemon = Daemon::start(tcp_config(
        peer.port(),
        300,
        json!([
            {"name": "slow", "register": 60, "writable": true},
            {"name": "after", "register": 34, "writable": true},
            {"name": "tail", "register": 8, "kind": "coil", "writable": true},
        ]),
    ));
    wait_connected(&daemon, "press-1");
    let a = write(
        &daemon,
        "press-1",
        json!({"id": "cmd-slow", "points": {"slow": 7, "after": 9, "tail": true}}),
    );
    assert_result(&a, "slow", "unknown");
    assert!(
        reason(&a, "slow").starts_with("no answer within 300 ms"),
        "{a:#}"
    );
    for p in ["after", "tail"] {
        assert_result(&a, p, "unknown");
        assert_eq!(reason(&a, p), "not sent after an unknown write");
    }
    // The connection was dropped; the poller reconnects and polls on.
    let before = u64_at(&device(&daemon, "press-1"), "/polls_total");
    wait_until(Duration::from_secs(20), "polling resumes", || {
        let d = device(&daemon, "press-1");
        d["state"] == "connected" && u64_at(&d, "/polls_total") >= before + 5
    });
    // Written once, never again; the points after it never sent.
    assert_eq!(peer.read_holding(60, 1), vec![7]);
    assert_eq!(peer.read_holding(SLOW_WRITES, 1), vec![1]);
    assert_eq!(peer.read_holding(WRITES, 1), vec![1]);
    assert_eq!(peer.read_holding(34, 1), vec![0]);
    assert_eq!(peer.read_coils(8, 1), vec![false]);
    let d = device(&daemon, "press-1");
    assert_eq!(u64_at(&d, "/writes_total"), 1, "{d:#}");
    assert_eq!(u64_at(&d, "/timeouts_total"), 1, "{d:#}");
    assert_eq!(u64_at(&d, "/commands/unknown"), 3, "{d:#}");
    assert!(u64_at(&d, "/connects_total") >= 2, "{d:#}");
    assert_command_records(&daemon, "press-1", 1);
}

#[test]
fn a_command_waiting_behind_a_slow_poll_expires_and_is_not_sent() {
    let peer = ModbusTcp::start();
    // Each poll reads register 62, which the device answers 1.5 s late.
    let daemon = Daemon::start(tcp_config(
        peer.port(),
        3000,
        json!([
            {"name": "slow_read", "register": 62},
            {"name": "target", "register": 34, "writable": true},
        ]),
    ));
    wait_connected(&daemon, "press-1");
    // Send the command just after a poll's slow read started.
    let started = peer.read_holding(SLOW_READS, 1)[0];
    wait_until(Duration::from_secs(10), "the next slow read starts", || {
        peer.read_holding(SLOW_READS, 1)[0] > started
    });
    let a = write(
        &daemon,
        "press-1",
        json!({"points": {"target": 5}, "expires_ms": 300}),
    );
    assert_result(&a, "target", "expired");
    assert_eq!(peer.read_holding(WRITES, 1), vec![0]);
    assert_eq!(peer.read_holding(34, 1), vec![0]);
    let d = device(&daemon, "press-1");
    assert_eq!(u64_at(&d, "/commands/expired"), 1, "{d:#}");
    assert_eq!(u64_at(&d, "/writes_total"), 0, "{d:#}");
    assert_command_records(&daemon, "press-1", 1);
}

#[test]
fn a_device_down_or_in_its_breakers_backoff_answers_unavailable_at_once_and_nothing_is_queued() {
    let mut peer = ModbusTcp::start();
    let mut config = tcp_config(
        peer.port(),
        300,
        json!([{"name": "target", "register": 34, "writable": true}]),
    );
    let devices = config["devices"].as_array_mut().expect("devices");
    devices.push(json!({
        "name": "ghost", "protocol": "modbus_tcp", "host": "127.0.0.1", "port": free_port(),
        "timeout_ms": 300, "points": [{"name": "target", "register": 34, "writable": true}],
    }));
    let daemon = Daemon::start(config);
    wait_connected(&daemon, "press-1");

    // Never reached.
    let a = write(&daemon, "ghost", json!({"points": {"target": 1}}));
    assert_result(&a, "target", "unavailable");
    assert!(
        reason(&a, "target").contains("not connected") || reason(&a, "target").contains("backoff"),
        "{a:#}"
    );

    peer.kill9();
    wait_until(Duration::from_secs(20), "the breaker backs off", || {
        device(&daemon, "press-1")["state"] == "backoff"
    });
    let a = write(&daemon, "press-1", json!({"points": {"target": 2}}));
    assert_result(&a, "target", "unavailable");
    assert!(reason(&a, "target").contains("backoff"), "{a:#}");
    let d = device(&daemon, "press-1");
    assert_eq!(u64_at(&d, "/writes_total"), 0, "{d:#}");
    assert_eq!(u64_at(&d, "/commands/unavailable"), 1, "{d:#}");

    // Back up: the refused command was not kept for later; a new one is written.
    peer.restart();
    wait_until(Duration::from_secs(30), "the device is back", || {
        device(&daemon, "press-1")["state"] == "connected"
    });
    assert_eq!(peer.read_holding(WRITES, 1), vec![0]);
    let a = write(&daemon, "press-1", json!({"points": {"target": 3}}));
    assert_result(&a, "target", "written");
    assert_eq!(peer.read_holding(34, 1), vec![3]);
    assert_eq!(peer.read_holding(WRITES, 1), vec![1]);
    assert_command_records(&daemon, "press-1", 2);
    assert_command_records(&daemon, "ghost", 1);
}

#[test]
fn verify_reports_a_value_the_device_did_not_keep_as_unknown() {
    let peer = ModbusTcp::start();
    // Registers 64-66 keep at most 100 of what is written.
    let daemon = Daemon::start(tcp_config(
        peer.port(),
        1000,
        json!([
            {"name": "clamped", "register": 64, "type": "u32", "writable": true},
            {"name": "clamped_single", "register": 66, "writable": true},
            {"name": "plain", "register": 34, "writable": true},
        ]),
    ));
    wait_connected(&daemon, "press-1");
    let a = write(
        &daemon,
        "press-1",
        json!({"verify": true, "points": {"clamped": 150, "plain": 150}}),
    );
    assert_result(&a, "clamped", "unknown");
    assert_eq!(reason(&a, "clamped"), "wrote 150, read back 100", "{a:#}");
    assert_result(&a, "plain", "written");
    assert_eq!(peer.read_holding(64, 2), vec![0, 100]);
    assert_eq!(peer.read_holding(34, 1), vec![150]);

    // An FC 6 whose echo is not the value sent: unknown, even without verify.
    let a = write(
        &daemon,
        "press-1",
        json!({"points": {"clamped_single": 150}}),
    );
    assert_result(&a, "clamped_single", "unknown");
    assert!(
        reason(&a, "clamped_single").starts_with("the answer did not match the request"),
        "{a:#}"
    );
    assert_eq!(peer.read_holding(WRITES, 1), vec![3]);
}

#[test]
fn over_rtu_the_line_task_writes_fc_6_16_5_and_15_in_order_between_its_polls_of_two_units() {
    let rtu = ModbusRtu::start();
    let mut points = vec![
        json!({"name": "u16", "register": 34, "writable": true}),
        json!({"name": "f32", "register": 40, "type": "f32", "writable": true}),
        json!({"name": "coil8", "register": 8, "kind": "coil", "writable": true}),
        json!({"name": "coil9", "register": 9, "kind": "coil", "writable": true}),
        json!({"name": "coil10", "register": 10, "kind": "coil", "writable": true}),
        json!({"name": "writes", "register": WRITES}),
    ];
    for (k, fc) in [5, 6, 15, 16].iter().enumerate() {
        points.push(json!({"name": format!("fc{fc}"), "register": FC_COUNTS + k as u16}));
    }
    for k in 0..10u16 {
        points.push(json!({"name": format!("log{k}"), "register": WRITE_LOG + k}));
    }
    let line = |name: &str, unit: u64| {
        json!({
            "name": name,
            "protocol": "modbus_rtu",
            "port": rtu.serial_port().to_string_lossy(),
            "baud": 19200,
            "unit": unit,
            "timeout_ms": 150,
            "backoff_max_secs": 2,
            "groups": [{"name": "main", "interval_ms": 250}],
            "points": points,
        })
    };
    let daemon = Daemon::start(json!({
        "connector": {"http": {"admin_token": ADMIN_TOKEN}},
        "commands": {"token": COMMANDS_TOKEN},
        "devices": [line("unit1", 1), line("unit2", 2)],
    }));
    wait_connected(&daemon, "unit1");

    for (command, points) in [
        (json!({"u16": 4321}), vec!["u16"]),
        (json!({"f32": 21.5}), vec!["f32"]),
        (json!({"coil8": true}), vec!["coil8"]),
        (
            json!({"coil9": true, "coil10": true}),
            vec!["coil9", "coil10"],
        ),
        // The command's order, not the addresses'.
        (json!({"f32": -2.5, "u16": 7}), vec!["f32", "u16"]),
    ] {
        let a = write(&daemon, "unit1", json!({"verify": true, "points": command}));
        for p in points {
            assert_result(&a, p, "written");
        }
    }
    // Unit 2 never answers: unavailable, at once, while unit 1 took its commands.
    let a = write(&daemon, "unit2", json!({"points": {"u16": 1}}));
    assert_result(&a, "u16", "unavailable");

    // The line's polls read the device back.
    wait_until(Duration::from_secs(10), "the polls read the writes", || {
        let v = &device(&daemon, "unit1")["values"]["main"];
        v["u16"]["value"] == 7 && v["f32"]["value"] == -2.5 && v["writes"]["value"] == 6
    });
    let v = device(&daemon, "unit1")["values"]["main"].clone();
    for c in ["coil8", "coil9", "coil10"] {
        assert_eq!(v[c]["value"], true, "{c}: {v:#}");
    }
    for (fc, n) in [("fc5", 1), ("fc6", 2), ("fc15", 1), ("fc16", 2)] {
        assert_eq!(v[fc]["value"], n, "{fc}: {v:#}");
    }
    let log: Vec<Value> = (4..10)
        .map(|k| v[format!("log{k}")]["value"].clone())
        .collect();
    assert_eq!(
        log,
        vec![
            json!(34),
            json!(40),
            json!(8),
            json!(9),
            json!(40),
            json!(34)
        ]
    );
    assert_eq!(u64_at(&device(&daemon, "unit1"), "/writes_total"), 6);
    assert_command_records(&daemon, "unit1", 5);
    assert_command_records(&daemon, "unit2", 1);
}

#[test]
fn the_simulators_oven_follows_a_written_setpoint_and_its_pump_stays_as_written() {
    let port = free_port();
    let daemon = Daemon::start(json!({
        "commands": {"token": COMMANDS_TOKEN},
        "simulator": {"modbus": format!("127.0.0.1:{port}")},
        "devices": [{
            "name": "plant-1",
            "protocol": "modbus_tcp",
            "host": "127.0.0.1",
            "port": port,
            "groups": [{"name": "process", "interval_ms": 100}],
            "points": [
                {"name": "oven_temp", "register": 0, "type": "f32"},
                {"name": "oven_setpoint", "register": 12, "type": "f32", "writable": true,
                 "min": 0, "max": 300},
                {"name": "pump_running", "register": 0, "kind": "coil", "writable": true},
                {"name": "parts", "register": 4, "type": "u32", "writable": true},
            ],
        }]
    }));
    wait_connected(&daemon, "plant-1");
    let a = write(
        &daemon,
        "plant-1",
        json!({"verify": true, "points": {"oven_setpoint": 240.0, "pump_running": false}}),
    );
    assert_eq!(a["ok"], true, "{a:#}");
    let polls = u64_at(&device(&daemon, "plant-1"), "/polls_total");
    // 180 ± 5 before; 240 ± 5 a few time constants (4 s) later.
    wait_until(Duration::from_secs(30), "the oven heats up", || {
        let v = &device(&daemon, "plant-1")["values"]["process"];
        v["oven_temp"]["value"].as_f64().unwrap_or(0.0) > 225.0
    });
    let d = device(&daemon, "plant-1");
    assert!(u64_at(&d, "/polls_total") > polls + 10, "{d:#}");
    let v = &d["values"]["process"];
    assert_eq!(v["oven_setpoint"]["value"], 240.0, "{v:#}");
    assert_eq!(v["pump_running"]["value"], false, "{v:#}");
    // The simulator takes no other write.
    let a = write(&daemon, "plant-1", json!({"points": {"parts": 1}}));
    assert_result(&a, "parts", "exception");
    assert_eq!(a["points"]["parts"]["exception"], 2, "{a:#}");
}

#[test]
fn a_command_runs_while_the_line_sleeps_without_waiting_for_the_next_poll() {
    let peer = ModbusTcp::start();
    let mut config = tcp_config(
        peer.port(),
        1000,
        json!([{"name": "target", "register": 34, "writable": true}]),
    );
    // One poll at start, the next a minute later.
    config["devices"][0]["groups"][0]["interval_ms"] = json!(60_000);
    let daemon = Daemon::start(config);
    wait_connected(&daemon, "press-1");
    let a = write(&daemon, "press-1", json!({"points": {"target": 11}}));
    assert_result(&a, "target", "written");
    assert_eq!(peer.read_holding(34, 1), vec![11]);
    let d = device(&daemon, "press-1");
    assert_eq!(u64_at(&d, "/polls_total"), 1, "{d:#}");
}

/// The device's control register: how long it waits before answering each write (ms).
const ANSWER_DELAY: u16 = 68;

#[test]
fn a_command_whose_deadline_passes_between_its_points_sends_none_after_it_and_the_rest_are_expired()
{
    let peer = ModbusTcp::start();
    let points: Vec<Value> = (0..10u16)
        .map(|k| json!({"name": format!("p{k}"), "register": 44 + k, "writable": true}))
        .collect();
    let daemon = Daemon::start(tcp_config(peer.port(), 2000, Value::Array(points)));
    wait_connected(&daemon, "press-1");
    // Every write is answered 300 ms after the device stored it: ten take 3 s.
    peer.write_holding(ANSWER_DELAY, 300);
    let values: serde_json::Map<String, Value> = (0..10u16)
        .map(|k| (format!("p{k}"), json!(k + 1)))
        .collect();
    let sent_at = unix_ms();
    let a = write(
        &daemon,
        "press-1",
        json!({"id": "cmd-late", "points": values, "expires_ms": 1000}),
    );
    let results: Vec<&str> = (0..10)
        .map(|k| {
            a["points"][format!("p{k}")]["result"]
                .as_str()
                .unwrap_or("")
        })
        .collect();
    let written = results.iter().take_while(|r| **r == "written").count();
    assert!((1..10).contains(&written), "{a:#}");
    assert!(
        results[written..].iter().all(|r| *r == "expired"),
        "the points not sent by the deadline are expired: {a:#}"
    );
    // The device holds the points sent, and nothing of the others.
    let held = peer.read_holding(44, 10);
    let want: Vec<u16> = (0..10u16)
        .map(|k| if usize::from(k) < written { k + 1 } else { 0 })
        .collect();
    assert_eq!(held, want, "{a:#}");
    // No write of the command took effect after its deadline (counted from before the
    // request left the test, plus the loopback's few ms).
    let late: Vec<(u16, u64)> = peer
        .writes_at()
        .into_iter()
        .filter(|&(addr, at)| (44..54).contains(&addr) && at > sent_at + 1000 + 100)
        .collect();
    assert!(late.is_empty(), "writes after the deadline: {late:?}");
    let d = device(&daemon, "press-1");
    assert_eq!(u64_at(&d, "/commands/written"), written as u64, "{d:#}");
    assert_eq!(
        u64_at(&d, "/commands/expired"),
        10 - written as u64,
        "{d:#}"
    );
    assert_eq!(u64_at(&d, "/writes_total"), written as u64, "{d:#}");
    assert_command_records(&daemon, "press-1", 1);
}

#[test]
fn min_and_max_are_checked_on_the_value_the_device_holds_after_rounding_to_the_scale() {
    let peer = ModbusTcp::start();
    let daemon = Daemon::start(tcp_config(
        peer.port(),
        1000,
        json!([
            {"name": "tens", "register": 36, "type": "u16", "scale": 10, "writable": true,
             "min": 12, "max": 255},
        ]),
    ));
    wait_connected(&daemon, "press-1");
    // 255 is raw 25.5, rounded to 26: the device would hold 260, above max.
    let a = write(&daemon, "press-1", json!({"points": {"tens": 255}}));
    assert_result(&a, "tens", "out_of_range");
    assert!(reason(&a, "tens").contains("would hold 260"), "{a:#}");
    // 14 is raw 1.4, rounded to 1: the device would hold 10, below min.
    let a = write(&daemon, "press-1", json!({"points": {"tens": 14}}));
    assert_result(&a, "tens", "out_of_range");
    assert!(reason(&a, "tens").contains("would hold 10"), "{a:#}");
    assert_eq!(peer.read_holding(36, 1), vec![0], "nothing sent");
    // 15 is raw 1.5, rounded to 2 (half away from zero): 20 is within.
    let a = write(&daemon, "press-1", json!({"points": {"tens": 15}}));
    assert_result(&a, "tens", "written");
    assert_eq!(peer.read_holding(36, 1), vec![2]);
    let a = write(&daemon, "press-1", json!({"points": {"tens": 254}}));
    assert_result(&a, "tens", "written");
    assert_eq!(peer.read_holding(36, 1), vec![25]);
    let a = write(&daemon, "press-1", json!({"points": {"tens": 255}}));
    assert_result(&a, "tens", "out_of_range");
    assert_eq!(
        peer.read_holding(36, 1),
        vec![25],
        "the register is unchanged"
    );
    let d = device(&daemon, "press-1");
    assert_eq!(u64_at(&d, "/writes_total"), 2, "{d:#}");
    assert_eq!(u64_at(&d, "/commands/refused"), 3, "{d:#}");
    assert_command_records(&daemon, "press-1", 5);
}
