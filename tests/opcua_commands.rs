//! Commands to OPC-UA devices, through `POST /api/devices/{device}/write` of the real binary,
//! against a server nobody here wrote: the asyncua server of `tests/common/peers/
//! opcua_server.py`, which logs every Write request it gets (the values it received, their
//! types, the status it answered, and the node's value after the write) and every read of
//! DataType attributes. And against the built-in simulator's async-opcua server.
//!
//! Every type a command writes, read back on the server side; a node the server keeps read
//! only; lossy values refused before anything is sent; no session; a command while the
//! subscriptions are being made; a write answered too late; read back with `verify`. Every
//! test ends checking that each command left exactly one `command/plc` record.

#![cfg(feature = "opcua")]

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// The commands token of these tests.
const COMMANDS_TOKEN: &str = "cmd-t0ken-0123456789";

/// A connector with `commands:` and one OPC-UA device `plc` on `endpoint` reading the
/// server's counter, with these extra `nodes`; its records and its commands' records go to
/// storage.
fn config(endpoint: &str, nodes: Vec<Value>, extra: Value) -> Value {
    let mut config = queue_config(8, "evict_oldest");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    // Tests send commands faster than the default 10 per second.
    config["commands"] = json!({"token": COMMANDS_TOKEN, "max_per_second": 1000});
    let mut all = vec![json!({"node_id": "ns=2;s=Counter", "name": "counter"})];
    all.extend(nodes);
    let mut device = json!({
        "name": "plc",
        "protocol": "opcua",
        "endpoint": endpoint,
        "reconnect_initial_ms": 200,
        "reconnect_max_ms": 1000,
        "groups": [{"name": "fast", "interval_ms": 200}],
        "nodes": all,
    });
    if let (Some(d), Value::Object(more)) = (device.as_object_mut(), extra) {
        d.extend(more);
    }
    config["devices"] = json!([device]);
    config["flows"] = json!([{
        "id": "history",
        "nodes": [
            {"id": "plc", "kind": "source", "source": "opcua/plc"},
            {"id": "cmd", "kind": "source", "source": "command/plc"},
            {"id": "keep", "kind": "sink", "sink": "storage"},
        ],
        "wires": [{"from": "plc", "to": "keep"}, {"from": "cmd", "to": "keep"}],
    }]);
    config
}

/// A writable node `ns=2;s=W.<ty>` named `name`.
fn writable(ty: &str, name: &str) -> Value {
    json!({"node_id": format!("ns=2;s=W.{ty}"), "name": name, "writable": true})
}

/// A connector with one writable node per type of the asyncua server (named after the type
/// in lower case), `setpoint` (writable in the config, read only on the server),
/// `temperature` (read only in the config), `clamped`, and `limited` (W.Clamped again, with
/// a data type and limits in the config).
fn full_config(server: &OpcuaServer) -> Value {
    let mut nodes: Vec<Value> = [
        "Boolean", "SByte", "Byte", "Int16", "UInt16", "Int32", "UInt32", "Int64", "UInt64",
        "Float", "Double", "String",
    ]
    .iter()
    .map(|t| writable(t, &t.to_lowercase()))
    .collect();
    nodes.push(json!({"node_id": "ns=2;s=Setpoint", "name": "setpoint", "writable": true}));
    nodes.push(json!({"node_id": "ns=2;s=Temperature", "name": "temperature"}));
    nodes.push(writable("Clamped", "clamped"));
    nodes.push(json!({
        "node_id": "ns=2;s=W.Clamped", "name": "limited", "writable": true,
        "data_type": "Double", "min": 10, "max": 90,
    }));
    config(&server.endpoint(), nodes, json!({}))
}

/// `cfg` with two groups: `fast`, polled, which every node of `cfg` is put in, and `live`, a
/// subscription of `live` (nodes without a group).
fn with_subscription(cfg: &mut Value, live: Vec<Value>) {
    let device = &mut cfg["devices"][0];
    device["groups"] = json!([
        {"name": "fast", "interval_ms": 200},
        {"name": "live", "interval_ms": 200, "subscribe": true},
    ]);
    let nodes = device["nodes"].as_array_mut().expect("nodes");
    for n in nodes.iter_mut() {
        n["group"] = json!("fast");
    }
    for mut n in live {
        n["group"] = json!("live");
        nodes.push(n);
    }
}

/// Sends a command to `plc`; the answer's body.
fn write(d: &Daemon, body: Value) -> Value {
    let r = d.post(
        "/api/devices/plc/write",
        Some(COMMANDS_TOKEN),
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

/// Waits until `plc` has polled (its session is up).
fn wait_connected(d: &Daemon) {
    wait_until(POLL_DEADLINE, "the device connected and polling", || {
        let s = d.status();
        let dev = named(&s, "/devices", "plc");
        dev["state"] == json!("connected") && u64_at(dev, "/polls_total") > 0
    });
}

/// The `result` of `point` in a command's answer.
fn result(answer: &Value, point: &str) -> String {
    answer["points"][point]["result"]
        .as_str()
        .unwrap_or("none")
        .to_string()
}

/// The counter `key` of `plc`'s `commands` in `/api/status`.
fn commands(d: &Daemon, key: &str) -> u64 {
    u64_at(
        named(&d.status(), "/devices", "plc"),
        &format!("/commands/{key}"),
    )
}

/// The stored `command/plc` records.
fn command_records(d: &Daemon) -> Vec<Value> {
    events(d, "source=command/plc&limit=1000")
}

/// Every command `plc` took left exactly one `command/plc` record: as many records as
/// commands received, each with its own id.
fn assert_one_record_per_command(d: &Daemon) {
    let received = commands(d, "received");
    assert!(received > 0);
    wait_until(POLL_DEADLINE, "a record of every command", || {
        command_records(d).len() as u64 >= received
    });
    let records = command_records(d);
    let mut ids: Vec<&str> = records.iter().filter_map(|r| r["key"].as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(records.len() as u64, received, "{records:#?}");
    assert_eq!(ids.len(), records.len(), "{records:#?}");
}

#[test]
fn every_type_is_written_as_exactly_that_type_and_the_server_holds_the_values() {
    let server = OpcuaServer::start();
    let d = Daemon::start(full_config(&server));
    wait_connected(&d);

    let first = write(
        &d,
        json!({"id": "cmd-1", "points": {
            "double": 72.5, "int32": -7, "boolean": true, "string": "auto",
        }}),
    );
    assert_eq!(first["ok"], json!(true), "{first:#}");
    for p in ["double", "int32", "boolean", "string"] {
        assert_eq!(result(&first, p), "written", "{first:#}");
    }
    // One Write request, the nodes in the command's order, each of exactly its type.
    let writes = server.writes();
    assert_eq!(writes.len(), 1, "{writes:#?}");
    let got: Vec<(Value, Value, Value, Value)> = writes[0]
        .iter()
        .map(|n| {
            (
                n["node"].clone(),
                n["sent_type"].clone(),
                n["stored"].clone(),
                n["status"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                json!("W.Double"),
                json!("Double"),
                json!(72.5),
                json!("Good")
            ),
            (json!("W.Int32"), json!("Int32"), json!(-7), json!("Good")),
            (
                json!("W.Boolean"),
                json!("Boolean"),
                json!(true),
                json!("Good")
            ),
            (
                json!("W.String"),
                json!("String"),
                json!("auto"),
                json!("Good")
            ),
        ]
    );

    let second = write(
        &d,
        json!({"id": "cmd-2", "points": {
            "sbyte": -128, "byte": 255, "int16": -32768, "uint16": 65535,
            "uint32": 4_294_967_295_u64, "int64": i64::MIN, "uint64": u64::MAX,
            "float": 0.1, "double": 1e300,
        }}),
    );
    assert_eq!(second["ok"], json!(true), "{second:#}");
    let writes = server.writes();
    assert_eq!(writes.len(), 2, "{writes:#?}");
    let stored: Vec<(String, Value)> = writes[1]
        .iter()
        .map(|n| {
            (
                n["stored_type"].as_str().unwrap_or("?").to_string(),
                n["stored"].clone(),
            )
        })
        .collect();
    assert_eq!(stored[0], ("SByte".into(), json!(-128)));
    assert_eq!(stored[1], ("Byte".into(), json!(255)));
    assert_eq!(stored[2], ("Int16".into(), json!(-32768)));
    assert_eq!(stored[3], ("UInt16".into(), json!(65535)));
    assert_eq!(stored[4], ("UInt32".into(), json!(4_294_967_295_u64)));
    assert_eq!(stored[5], ("Int64".into(), json!(i64::MIN)));
    assert_eq!(stored[6], ("UInt64".into(), json!(u64::MAX)));
    // The Float the server holds is the nearest to 0.1 (Python shows it as a double).
    assert_eq!(stored[7].0, "Float");
    assert!(
        (stored[7].1.as_f64().unwrap_or(0.0) - 0.1).abs() < 1e-8,
        "{stored:?}"
    );
    assert_eq!(stored[8], ("Double".into(), json!(1e300)));

    // The data types were read once per node in this session: a third command to nodes
    // already written reads none.
    let third = write(
        &d,
        json!({"id": "cmd-3", "points": {"double": 1.5, "int32": 8}}),
    );
    assert_eq!(third["ok"], json!(true), "{third:#}");
    let reads = server.data_type_reads();
    assert_eq!(reads.len(), 2, "{reads:#?}");
    assert_eq!(
        reads[0],
        vec![
            json!("W.Double"),
            json!("W.Int32"),
            json!("W.Boolean"),
            json!("W.String")
        ]
    );
    assert!(!reads[1].contains(&json!("W.Double")), "{reads:#?}");

    // Every command left one record; the status shows the writable points and counters.
    assert_one_record_per_command(&d);
    let records = command_records(&d);
    let first_record = records
        .iter()
        .find(|r| r["key"] == json!("cmd-1"))
        .expect("the record of cmd-1");
    assert_eq!(
        first_record["payload"]["points"]["double"],
        json!({"result": "written", "value": 72.5}),
        "{first_record:#}"
    );
    let s = d.status();
    let dev = named(&s, "/devices", "plc");
    assert_eq!(u64_at(dev, "/commands/received"), 3, "{dev:#}");
    assert_eq!(u64_at(dev, "/commands/written"), 15, "{dev:#}");
    let limited = dev["writable"]
        .as_array()
        .and_then(|w| w.iter().find(|p| p["name"] == json!("limited")))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        limited,
        json!({"name": "limited", "area": "node", "type": "Double", "min": 10.0, "max": 90.0})
    );
    assert!(
        !dev["writable"]
            .as_array()
            .is_some_and(|w| w.iter().any(|p| p["name"] == json!("temperature"))),
        "{dev:#}"
    );
}

#[test]
fn a_node_the_server_keeps_read_only_answers_the_servers_status() {
    let server = OpcuaServer::start();
    let d = Daemon::start(full_config(&server));
    wait_connected(&d);
    let answer = write(
        &d,
        json!({"id": "ro-1", "points": {"setpoint": 50.0, "double": 3.0}}),
    );
    assert_eq!(answer["ok"], json!(false), "{answer:#}");
    let writes = server.writes();
    assert_eq!(writes.len(), 1, "{writes:#?}");
    // asyncua answers a node without CurrentWrite with BadUserAccessDenied: that status is
    // the point's result, and the other node of the request was written.
    let status = writes[0][0]["status"].clone();
    assert_eq!(status, json!("BadUserAccessDenied"), "{writes:#?}");
    assert_eq!(
        answer["points"]["setpoint"],
        json!({"result": "exception", "exception": status}),
        "{answer:#}"
    );
    assert_eq!(writes[0][0]["stored"], json!(42.5));
    assert_eq!(result(&answer, "double"), "written", "{answer:#}");
    assert_eq!(commands(&d, "failed"), 1, "{:#}", d.status());
    assert_one_record_per_command(&d);
}

#[test]
fn unwritable_lossy_wrong_kind_and_out_of_limit_values_are_refused_before_anything_is_sent() {
    let server = OpcuaServer::start();
    let d = Daemon::start(full_config(&server));
    wait_connected(&d);
    let cases = [
        (
            json!({"int32": 72.5, "double": 1.0}),
            "int32",
            "out_of_range",
        ),
        (
            json!({"double": 1.0, "int32": 3e9}),
            "int32",
            "out_of_range",
        ),
        (json!({"uint16": -1}), "uint16", "out_of_range"),
        (json!({"float": 0.123_456_789}), "float", "out_of_range"),
        (json!({"double": "72.5"}), "double", "refused"),
        (json!({"boolean": 1}), "boolean", "refused"),
        (json!({"string": 5}), "string", "refused"),
        (json!({"limited": 95.0}), "limited", "out_of_range"),
        (json!({"limited": 5}), "limited", "out_of_range"),
        (
            json!({"temperature": 20.0, "double": 1.0}),
            "temperature",
            "refused",
        ),
        (json!({"nowhere": 1, "double": 1.0}), "nowhere", "refused"),
    ];
    for (i, (points, bad, want)) in cases.iter().enumerate() {
        let answer = write(&d, json!({"id": format!("bad-{i}"), "points": points}));
        assert_eq!(result(&answer, bad), *want, "{points}: {answer:#}");
        assert!(
            answer["points"][bad]["reason"].is_string(),
            "{points}: {answer:#}"
        );
        // All or nothing: the good points of the command were not sent either.
        for (name, _) in points.as_object().into_iter().flatten() {
            if name != bad {
                assert_eq!(
                    answer["points"][name],
                    json!({"result": "refused", "reason": "another point of the command was refused"}),
                    "{points}: {answer:#}"
                );
            }
        }
    }
    assert_eq!(server.writes(), Vec::<Vec<Value>>::new());
    // The server logs what reaches it: the first good command is its first write.
    let good = write(&d, json!({"id": "good", "points": {"int32": 5}}));
    assert_eq!(good["ok"], json!(true), "{good:#}");
    let writes = server.writes();
    assert_eq!(writes.len(), 1, "{writes:#?}");
    assert_eq!(writes[0][0]["stored"], json!(5), "{writes:#?}");
    let answer = write(&d, json!({"id": "bad-done", "points": {"temperature": 1}}));
    assert_eq!(
        answer["points"]["temperature"]["reason"],
        json!("\"temperature\" is not writable (its node has no writable: true)")
    );
    let answer = write(&d, json!({"id": "bad-kind", "points": {"double": "hot"}}));
    assert_eq!(
        answer["points"]["double"]["reason"],
        json!("a Double node takes a number, got a string")
    );
    let s = d.status();
    let dev = named(&s, "/devices", "plc");
    assert_eq!(u64_at(dev, "/commands/written"), 1, "{dev:#}");
    assert_eq!(u64_at(dev, "/commands/failed"), 0, "{dev:#}");
    assert_one_record_per_command(&d);
}

#[test]
fn without_a_session_a_command_is_unavailable_and_a_new_session_reads_the_data_types_again() {
    let mut server = OpcuaServer::start();
    let d = Daemon::start(full_config(&server));
    wait_connected(&d);
    let answer = write(&d, json!({"id": "s-1", "points": {"int32": 1}}));
    assert_eq!(answer["ok"], json!(true), "{answer:#}");
    assert_eq!(server.data_type_reads().len(), 1);

    server.kill9();
    wait_until(
        POLL_DEADLINE,
        "the device to notice the server is gone",
        || named(&d.status(), "/devices", "plc")["state"] != json!("connected"),
    );
    let asked = Instant::now();
    let answer = write(
        &d,
        json!({"id": "s-2", "points": {"int32": 2}, "expires_ms": 60000}),
    );
    let waited = asked.elapsed();
    assert_eq!(result(&answer, "int32"), "unavailable", "{answer:#}");
    assert!(
        answer["points"]["int32"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("session")),
        "{answer:#}"
    );
    // Answered at once, not kept for the session to come back: far inside its 60 s.
    assert!(waited < Duration::from_secs(30), "{waited:?}");

    server.restart();
    wait_until(POLL_DEADLINE, "the device connected again", || {
        named(&d.status(), "/devices", "plc")["state"] == json!("connected")
    });
    let mut answer = Value::Null;
    wait_until(POLL_DEADLINE, "a command written after the restart", || {
        let id = format!("s-3-{}", commands(&d, "received"));
        answer = write(&d, json!({"id": id, "points": {"int32": 3}}));
        answer["ok"] == json!(true)
    });
    let writes = server.writes();
    let last = writes.last().cloned().unwrap_or_default();
    assert_eq!(last[0]["stored"], json!(3), "{writes:#?}");
    // The restarted server is a new session: the data type was read again.
    assert!(
        server.data_type_reads().len() >= 2,
        "{:#?}",
        server.data_type_reads()
    );
    // Nothing of s-2 reached the server, then or later.
    assert!(
        !writes.iter().flatten().any(|n| n["sent"] == json!(2)),
        "{writes:#?}"
    );
    assert_one_record_per_command(&d);
}

#[test]
fn a_device_that_never_had_a_session_answers_unavailable_with_its_last_error() {
    // Nothing listens there: every round fails, the device waits out its backoff.
    let endpoint = format!("opc.tcp://127.0.0.1:{}/", free_port());
    let d = Daemon::start(config(
        &endpoint,
        vec![writable("Double", "double")],
        json!({}),
    ));
    wait_until(POLL_DEADLINE, "a failed connection attempt", || {
        named(&d.status(), "/devices", "plc")["last_error"].is_string()
    });
    for i in 0..3 {
        let answer = write(
            &d,
            json!({"id": format!("down-{i}"), "points": {"double": 1.0}, "expires_ms": 60000}),
        );
        assert_eq!(result(&answer, "double"), "unavailable", "{answer:#}");
        let reason = answer["points"]["double"]["reason"].as_str().unwrap_or("");
        assert!(reason.contains("no session"), "{answer:#}");
    }
    let s = d.status();
    let dev = named(&s, "/devices", "plc");
    assert_eq!(u64_at(dev, "/commands/unavailable"), 3, "{dev:#}");
    assert_one_record_per_command(&d);
}

#[test]
fn a_write_answered_after_the_request_timeout_is_unknown_and_never_sent_again() {
    let server = OpcuaServer::start();
    let mut cfg = full_config(&server);
    cfg["devices"][0]["request_timeout_ms"] = json!(500);
    // W.Slow: the server holds a write of it 3 s.
    cfg["devices"][0]["nodes"]
        .as_array_mut()
        .expect("nodes")
        .push(json!({"node_id": "ns=2;s=W.Slow", "name": "slow", "writable": true}));
    let d = Daemon::start(cfg);
    wait_connected(&d);
    // The data type is read first (answered at once), then the write is held 3 s.
    let answer = write(&d, json!({"id": "slow-1", "points": {"slow": 33.0}}));
    assert_eq!(result(&answer, "slow"), "unknown", "{answer:#}");
    assert!(
        answer["points"]["slow"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not retried")),
        "{answer:#}"
    );
    // The server took it, once.
    wait_until(POLL_DEADLINE, "the held write to reach the server", || {
        !server.writes().is_empty()
    });
    let mut later = Value::Null;
    wait_until(POLL_DEADLINE, "a later command written", || {
        let id = format!("after-{}", commands(&d, "received"));
        later = write(&d, json!({"id": id, "points": {"double": 4.0}}));
        later["ok"] == json!(true)
    });
    let slow: Vec<Value> = server
        .writes()
        .into_iter()
        .flatten()
        .filter(|n| n["node"] == json!("W.Slow"))
        .collect();
    assert_eq!(slow.len(), 1, "{slow:#?}");
    assert_eq!(slow[0]["stored"], json!(33.0));
    assert_eq!(commands(&d, "unknown"), 1, "{:#}", d.status());
    assert_one_record_per_command(&d);
}

/// Regression: a command that came once the session was up but while its subscriptions were
/// still being made was answered `unavailable` ("no session yet").
#[test]
fn a_command_while_the_subscriptions_are_being_made_is_written_not_unavailable() {
    // The server holds its answer to CreateMonitoredItems 1.5 s.
    let server = OpcuaServer::start_with(&["--hold-subscribe-ms", "1500"]);
    let mut cfg = full_config(&server);
    with_subscription(
        &mut cfg,
        vec![json!({"node_id": "ns=2;s=Temperature", "name": "temperature_live"})],
    );
    let d = Daemon::start(cfg);
    wait_until(POLL_DEADLINE, "the device making its subscription", || {
        !server.monitored_item_requests().is_empty()
    });
    let answer = write(&d, json!({"id": "sub-1", "points": {"int32": 9}}));
    assert_eq!(result(&answer, "int32"), "written", "{answer:#}");
    let writes = server.writes();
    assert_eq!(writes.len(), 1, "{writes:#?}");
    assert_eq!(writes[0][0]["stored"], json!(9), "{writes:#?}");
    assert_one_record_per_command(&d);
}

#[test]
fn verify_reports_written_only_when_the_node_reads_back_the_value_sent() {
    let server = OpcuaServer::start();
    let d = Daemon::start(full_config(&server));
    wait_connected(&d);
    let answer = write(
        &d,
        json!({"id": "v-1", "points": {"double": 12.25, "float": 72.5, "string": "ok"}, "verify": true}),
    );
    assert_eq!(answer["ok"], json!(true), "{answer:#}");
    // W.Clamped keeps at most 100: the server says Good, the read back says 100.
    let answer = write(
        &d,
        json!({"id": "v-2", "points": {"clamped": 150.0}, "verify": true}),
    );
    assert_eq!(result(&answer, "clamped"), "unknown", "{answer:#}");
    assert_eq!(
        answer["points"]["clamped"]["reason"],
        json!("written, but the node reads back 100.0, not 150.0"),
        "{answer:#}"
    );
    let answer = write(&d, json!({"id": "v-3", "points": {"clamped": 150.0}}));
    assert_eq!(result(&answer, "clamped"), "written", "{answer:#}");
    let writes = server.writes();
    assert_eq!(writes.len(), 3, "{writes:#?}");
    assert!(writes[1..].iter().all(|w| w[0]["stored"] == json!(100.0)));
    assert_one_record_per_command(&d);
}

#[cfg(feature = "simulator")]
#[test]
fn the_simulators_boiler_follows_a_written_setpoint_and_a_written_pump_stays_as_written() {
    let plant = SimulatorPlant::start();
    let sim = &plant.sim;
    let node = |v: &str, name: &str, writable: bool| json!({"node_id": sim.node_id(v), "name": name, "writable": writable});
    let mut cfg = config(
        &sim.endpoint(),
        vec![
            // Writable in the config, read only on the server.
            node("Plant.Boiler.Temperature", "temperature", true),
            node("Plant.Boiler.Setpoint", "setpoint", true),
            node("Plant.Pump.Running", "pump", true),
            node("Plant.Pump.Speed", "speed", false),
        ],
        json!({}),
    );
    // The writable nodes again, subscribed: a subscriber sees what was written.
    with_subscription(
        &mut cfg,
        vec![
            json!({"node_id": sim.node_id("Plant.Boiler.Setpoint"), "name": "setpoint_seen"}),
            json!({"node_id": sim.node_id("Plant.Pump.Running"), "name": "pump_seen"}),
        ],
    );
    // The simulator has no Counter node: the plant's counter instead.
    cfg["devices"][0]["nodes"][0]["node_id"] = json!(sim.node_id("Plant.Line.Counter"));
    let d = Daemon::start(cfg);
    wait_connected(&d);
    let value_in = |group: &str, name: &str| {
        let s = d.status();
        named(&s, "/devices", "plc")["values"][group][name]["value"].clone()
    };
    let value = |name: &str| value_in("fast", name);

    // The simulator's own server answers a read-only node with its status.
    let answer = write(&d, json!({"id": "sim-0", "points": {"temperature": 20.0}}));
    // async-opcua, like asyncua, answers a Value without CurrentWrite this way.
    assert_eq!(
        answer["points"]["temperature"],
        json!({"result": "exception", "exception": "BadUserAccessDenied"}),
        "{answer:#}"
    );
    // A setpoint beyond what the boiler takes (0 to 400 °C): the server's own refusal.
    let answer = write(&d, json!({"id": "sim-1", "points": {"setpoint": 500.0}}));
    assert_eq!(
        answer["points"]["setpoint"],
        json!({"result": "exception", "exception": "BadOutOfRange"}),
        "{answer:#}"
    );

    let answer = write(
        &d,
        json!({"id": "sim-2", "points": {"setpoint": 150.0, "pump": false}, "verify": true}),
    );
    assert_eq!(answer["ok"], json!(true), "{answer:#}");
    wait_until(POLL_DEADLINE, "the boiler heating towards 150 °C", || {
        value("temperature").as_f64().is_some_and(|t| t > 120.0)
    });
    assert_eq!(value("setpoint"), json!(150.0));
    // Held off (out of its cycle, which the simulator's own tests cover): off, no speed.
    wait_until(POLL_DEADLINE, "the pump held off", || {
        value("pump") == json!(false) && value("speed") == json!(0.0)
    });
    wait_until(POLL_DEADLINE, "the subscription seeing the writes", || {
        value_in("live", "pump_seen") == json!(false)
            && value_in("live", "setpoint_seen") == json!(150.0)
    });
    let answer = write(
        &d,
        json!({"id": "sim-3", "points": {"pump": true}, "verify": true}),
    );
    assert_eq!(answer["ok"], json!(true), "{answer:#}");
    wait_until(POLL_DEADLINE, "the pump running again", || {
        value("pump") == json!(true) && value("speed").as_f64().is_some_and(|s| s > 1400.0)
    });
    assert_one_record_per_command(&d);
    let stopped = plant.stop();
    assert!(stopped.is_ok(), "{stopped:?}");
}
