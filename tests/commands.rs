//! Commands down to devices through their paths in, against the real binary: HTTP
//! (`POST /api/devices/{device}/write`), NATS request-reply (a real nats-server) and MQTT 5
//! (a real mosquitto; the test's client is rumqttc's MQTT 5 one), each down to a pymodbus
//! device whose registers the test reads back itself with tokio-modbus. Every command leaves
//! exactly one `command/<device>` record (read back from a storage sink), and a command sent
//! again with the same id and values is answered with the first outcome and not written
//! again; the same id with other values is refused (`409` over HTTP), and ids are kept per
//! path; one over `max_per_second` is refused `rate_limited`, sends nothing and is on record
//! too.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tokio_modbus::client::{Reader, Writer};

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
    let mut c = commands_config(free_port());
    c["connector"]["http"]["max_body_kb"] = json!(4);
    let d = Daemon::start(c);
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

    // max_body_kb is 4 here: a body of 8 KB is refused, whole, before it is read.
    let big = format!(
        "{{\"points\":{{\"a\":1}},\"id\":\"{}\"}}",
        "x".repeat(8 * 1024)
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

/// Regression: the write path answered `401` before it read the body, so the server closed
/// the connection over unread bytes and a keep-alive client met a broken pipe (or a reset)
/// on its next request. The refusal now comes after the body was read and dropped.
#[test]
fn a_command_refused_for_its_token_leaves_the_keep_alive_connection_serving_the_next_request() {
    let d = Daemon::start(commands_config(free_port()));
    let body = json!({"id": "cmd-1", "points": {"setpoint": 72.5}}).to_string();
    let json = "Content-Type: application/json";
    let mut conn = d.keep_alive();
    for auth in [
        None,
        Some("Authorization: Bearer wrong-t0ken-0123456789".to_string()),
    ] {
        let headers: Vec<&str> = [json].into_iter().chain(auth.as_deref()).collect();
        let r = conn
            .send(
                "POST",
                "/api/devices/plant-1/write",
                &headers,
                body.as_bytes(),
            )
            .expect("the refusal on the keep-alive connection");
        assert_eq!(r.status, 401, "{}", r.body);
        assert_eq!(r.header("connection"), None, "{:?}", r.headers);
    }
    // The same connection: a GET, then a command with the right token, whose body is read.
    let r = conn
        .send("GET", "/api/status", &[], b"")
        .expect("the next request on the same connection");
    assert_eq!(r.status, 200, "{}", r.body);
    let right = format!("Authorization: Bearer {COMMANDS_TOKEN}");
    let r = conn
        .send(
            "POST",
            "/api/devices/plant-1/write",
            &[json, &right],
            br#"{"points":{}}"#,
        )
        .expect("a command on the same connection");
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"], "points: empty");
    assert_eq!(d.status()["auth"]["commands_unauthorized"], 2);
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

// ---------------------------------------------------------------- a device that takes commands

/// The device's writable setpoint: holding register 50, u16, 0.1 units.
const SETPOINT: u16 = 50;
/// The device's writable pump: coil 3.
const PUMP: u16 = 3;

/// `press-1` on the pymodbus device at `port` (setpoint and pump writable, temp read-only),
/// with the commands token, the admin token, a storage sink and a flow that keeps every
/// command's record there.
fn device_config(port: u16) -> Value {
    let mut c = queue_config(16, "evict_oldest");
    c["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    c["commands"] = json!({"token": COMMANDS_TOKEN});
    c["storage"] = json!({"max_quota_mb": 16});
    c["devices"] = json!([{
        "name": "press-1",
        "protocol": "modbus_tcp",
        "host": "127.0.0.1",
        "port": port,
        "timeout_ms": 1000,
        "groups": [{"name": "fast", "interval_ms": 500}],
        "points": [
            {"name": "temp", "group": "fast", "register": 6, "type": "f32"},
            {"name": "setpoint", "group": "fast", "register": SETPOINT, "type": "u16",
             "scale": 0.1, "writable": true, "min": 0, "max": 200},
            {"name": "pump", "group": "fast", "register": PUMP, "kind": "coil", "writable": true},
        ],
    }]);
    c["flows"] = json!([{
        "id": "audit",
        "nodes": [
            {"id": "cmd", "kind": "source", "source": "command/press-1"},
            {"id": "keep", "kind": "sink", "sink": "storage"},
        ],
        "wires": [{"from": "cmd", "to": "keep"}],
    }]);
    c
}

/// A runtime for the test's own clients.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Holding register `addr` and coil `coil` of the device, read by the test itself.
fn read_device(port: u16, addr: u16, coil: u16) -> (u16, bool) {
    runtime().block_on(async {
        let sock = format!("127.0.0.1:{port}").parse().unwrap();
        let mut ctx = tokio_modbus::client::tcp::connect_slave(sock, tokio_modbus::Slave(1))
            .await
            .expect("connect");
        let r = ctx.read_holding_registers(addr, 1).await.unwrap().unwrap();
        let c = ctx.read_coils(coil, 1).await.unwrap().unwrap();
        (r[0], c[0])
    })
}

/// Writes holding register `addr` and coil `coil` of the device, as the test itself.
fn set_device(port: u16, addr: u16, value: u16, coil: u16, on: bool) {
    runtime().block_on(async {
        let sock = format!("127.0.0.1:{port}").parse().unwrap();
        let mut ctx = tokio_modbus::client::tcp::connect_slave(sock, tokio_modbus::Slave(1))
            .await
            .expect("connect");
        ctx.write_single_register(addr, value)
            .await
            .unwrap()
            .unwrap();
        ctx.write_single_coil(coil, on).await.unwrap().unwrap();
    })
}

/// The stored records of `command/press-1` with key `id`.
fn records_of(d: &Daemon, id: &str) -> Vec<Value> {
    events(d, "source=command/press-1&limit=1000")
        .into_iter()
        .filter(|r| r["key"] == id)
        .collect()
}

/// Waits for exactly one record of command `id`; returns its payload.
fn one_record(d: &Daemon, id: &str) -> Value {
    wait_until(POLL_DEADLINE, &format!("the record of {id}"), || {
        !records_of(d, id).is_empty()
    });
    let rows = records_of(d, id);
    assert_eq!(rows.len(), 1, "one record of {id}: {rows:#?}");
    rows[0]["payload"].clone()
}

fn commands_of(d: &Daemon) -> Value {
    let status = d.status();
    status["devices"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["name"] == "press-1"))
        .map(|x| x["commands"].clone())
        .unwrap_or_else(|| panic!("no press-1 in {status:#}"))
}

fn wait_connected(d: &Daemon) {
    wait_until(POLL_DEADLINE, "press-1 connected", || {
        d.status()["devices"][0]["state"] == "connected"
    });
}

/// Every command `press-1` took (`commands.received`: repeats are not taken again) left
/// exactly one record: as many stored records of `command/press-1` as commands, each id once.
fn assert_one_record_per_command(d: &Daemon) {
    let received = commands_of(d)["received"]
        .as_u64()
        .expect("commands.received");
    let keys = || {
        let mut keys: Vec<String> = events(d, "source=command/press-1&limit=1000")
            .iter()
            .filter_map(|r| r["key"].as_str().map(str::to_string))
            .collect();
        keys.sort();
        keys
    };
    wait_until(POLL_DEADLINE, "a record of every command", || {
        keys().len() as u64 >= received
    });
    let mut ids = keys();
    let records = ids.len() as u64;
    ids.dedup();
    assert_eq!(
        (records, ids.len() as u64),
        (received, received),
        "records of {received} commands: {ids:?}"
    );
}

#[test]
fn an_http_command_writes_the_device_once_leaves_one_record_and_its_repeat_writes_nothing() {
    let device = ModbusTcp::start();
    let port = device.port();
    let d = Daemon::start(device_config(port));
    wait_connected(&d);
    set_device(port, SETPOINT, 0, PUMP, false);

    let body =
        json!({"id": "cmd-17", "points": {"setpoint": 72.5, "pump": true}, "expires_ms": 3000});
    let r = write(&d, "press-1", Some(COMMANDS_TOKEN), &body);
    assert_eq!(r.status, 200, "{}", r.body);
    let first = r.json();
    assert_eq!(first["ok"], true, "{first:#}");
    assert_eq!(first["id"], "cmd-17");
    assert_eq!(
        first["points"]["setpoint"]["result"], "written",
        "{first:#}"
    );
    assert_eq!(first["points"]["pump"]["result"], "written", "{first:#}");
    assert_eq!(read_device(port, SETPOINT, PUMP), (725, true));

    let record = one_record(&d, "cmd-17");
    assert_eq!(
        record["origin"],
        json!({"path": "http", "token": "commands"})
    );
    assert_eq!(record["points"]["setpoint"]["value"], 72.5, "{record:#}");
    assert_eq!(record["points"]["setpoint"]["result"], "written");
    assert_eq!(record["ok"], true);

    // The same id again (a retry after a lost answer): the first outcome, nothing written.
    set_device(port, SETPOINT, 1, PUMP, false);
    let r = write(&d, "press-1", Some(COMMANDS_TOKEN), &body);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), first);
    assert_eq!(
        read_device(port, SETPOINT, PUMP),
        (1, false),
        "not written again"
    );

    // A read-only point refuses the whole command; nothing is sent.
    let r = write(
        &d,
        "press-1",
        Some(COMMANDS_TOKEN),
        &json!({"id": "cmd-18", "points": {"setpoint": 10, "temp": 20}}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let refused = r.json();
    assert_eq!(refused["ok"], false, "{refused:#}");
    assert_eq!(
        refused["points"]["temp"]["result"], "refused",
        "{refused:#}"
    );
    assert_eq!(
        refused["points"]["setpoint"]["result"], "refused",
        "{refused:#}"
    );
    assert_eq!(
        read_device(port, SETPOINT, PUMP),
        (1, false),
        "nothing sent"
    );
    // A value past max is out of range, before anything is sent.
    let r = write(
        &d,
        "press-1",
        Some(COMMANDS_TOKEN),
        &json!({"id": "cmd-19", "points": {"setpoint": 250}}),
    );
    assert_eq!(
        r.json()["points"]["setpoint"]["result"],
        "out_of_range",
        "{}",
        r.body
    );
    assert_eq!(
        read_device(port, SETPOINT, PUMP),
        (1, false),
        "nothing sent"
    );

    one_record(&d, "cmd-18");
    one_record(&d, "cmd-19");
    let c = commands_of(&d);
    assert_eq!(c["received"], 3, "{c:#}");
    assert_eq!(c["written"], 2, "{c:#}");
    assert_eq!(c["duplicates"], 1, "{c:#}");
    assert_eq!(
        records_of(&d, "cmd-17").len(),
        1,
        "still one record of cmd-17"
    );
    let m = d.metrics();
    assert_eq!(
        metric(&m, "opex_connector_commands_duplicate_total"),
        Some(1.0)
    );
    assert_one_record_per_command(&d);
}

#[test]
fn commands_over_max_per_second_are_rate_limited_send_nothing_and_each_leaves_its_one_record() {
    let device = ModbusTcp::start();
    let port = device.port();
    let mut c = device_config(port);
    c["commands"]["max_per_second"] = json!(1);
    let d = Daemon::start(c);
    wait_connected(&d);
    set_device(port, SETPOINT, 0, PUMP, false);

    // Back to back: one command a second is taken, the others of that second are refused.
    // (Bounded, not timed: a loaded box may need a few more tries to send two in one second.)
    let mut results: Vec<(u64, String)> = Vec::new();
    for i in 1..=50u64 {
        let body = json!({"id": format!("r-{i}"), "points": {"setpoint": i}});
        let r = write(&d, "press-1", Some(COMMANDS_TOKEN), &body);
        assert_eq!(r.status, 200, "{}", r.body);
        let outcome = r.json();
        let result = outcome["points"]["setpoint"]["result"].as_str();
        results.push((i, result.unwrap_or("none").to_string()));
        if result == Some("rate_limited") {
            assert_eq!(outcome["ok"], false, "{outcome:#}");
            break;
        }
    }
    assert!(
        results.iter().any(|(_, r)| r == "rate_limited"),
        "{results:?}"
    );
    assert!(
        results
            .iter()
            .all(|(_, r)| r == "written" || r == "rate_limited"),
        "{results:?}"
    );
    // What the device holds is the last written value: a refused command sent nothing.
    let last_written = results
        .iter()
        .rev()
        .find(|(_, r)| r == "written")
        .map(|(i, _)| *i)
        .expect("the first command of the second was written");
    assert_eq!(
        read_device(port, SETPOINT, PUMP).0 as u64,
        last_written * 10
    );

    let limited: Vec<u64> = results
        .iter()
        .filter(|(_, r)| r == "rate_limited")
        .map(|(i, _)| *i)
        .collect();
    for i in &limited {
        let record = one_record(&d, &format!("r-{i}"));
        assert_eq!(
            record["points"]["setpoint"]["result"], "rate_limited",
            "{record:#}"
        );
    }
    let c = commands_of(&d);
    assert_eq!(c["received"], results.len(), "{c:#}");
    assert_eq!(c["refused"], limited.len(), "{c:#}");
    assert_eq!(c["written"], results.len() - limited.len(), "{c:#}");
    assert_one_record_per_command(&d);
}

// ---------------------------------------------------------------- NATS

/// A request over `nats`; its reply as JSON.
fn nats_request(nats: &Js, subject: &str, body: &Value) -> Value {
    let reply = nats
        .rt
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(30),
                nats.client
                    .request(subject.to_string(), body.to_string().into()),
            )
            .await
        })
        .expect("a reply in time")
        .expect("a reply");
    serde_json::from_slice(&reply.payload).expect("a JSON reply")
}

/// A publish over `nats` without a reply subject.
fn nats_publish(nats: &Js, subject: &str, body: &Value) {
    nats.rt.block_on(async {
        nats.client
            .publish(subject.to_string(), body.to_string().into())
            .await
            .unwrap();
        nats.client.flush().await.unwrap();
    });
}

#[test]
fn a_nats_request_runs_the_command_and_its_reply_is_the_outcome() {
    let server = NatsServer::start();
    let device = ModbusTcp::start();
    let port = device.port();
    let mut c = device_config(port);
    c["nats"] = json!({"connections": [{"name": "bus", "servers": [server.url()]}]});
    c["commands"]["nats"] = json!({"connection": "bus"});
    let d = Daemon::start(c);
    wait_connected(&d);
    wait_until(POLL_DEADLINE, "the NATS path subscribed", || {
        d.status()["commands"]["nats"]["connected"] == true
    });
    set_device(port, SETPOINT, 0, PUMP, false);
    let nats = Js::connect(&server.url());

    let body = json!({"id": "n-1", "points": {"setpoint": 12.3, "pump": true}});
    let reply = nats_request(&nats, "opex.cmd.press-1", &body);
    assert_eq!(reply["ok"], true, "{reply:#}");
    assert_eq!(reply["id"], "n-1");
    assert_eq!(reply["points"]["setpoint"]["result"], "written");
    assert_eq!(read_device(port, SETPOINT, PUMP), (123, true));
    let record = one_record(&d, "n-1");
    assert_eq!(
        record["origin"],
        json!({"path": "nats", "subject": "opex.cmd.press-1"})
    );

    // A repeat gets the first reply and writes nothing.
    set_device(port, SETPOINT, 0, PUMP, false);
    assert_eq!(nats_request(&nats, "opex.cmd.press-1", &body), reply);
    assert_eq!(read_device(port, SETPOINT, PUMP), (0, false));

    // Not a command, or no such device: the reply says so, nothing runs.
    let r = nats_request(&nats, "opex.cmd.press-1", &json!({"points": []}));
    assert_eq!(r["ok"], false, "{r}");
    assert!(r["error"].as_str().unwrap().starts_with("points:"), "{r}");
    let r = nats_request(
        &nats,
        "opex.cmd.press-9",
        &json!({"points": {"setpoint": 1}}),
    );
    assert_eq!(
        r,
        json!({"ok": false, "error": "no device \"press-9\" takes commands"})
    );

    // Without a reply subject the command still runs; only its record tells.
    nats_publish(
        &nats,
        "opex.cmd.press-1",
        &json!({"id": "n-2", "points": {"setpoint": 4.5}}),
    );
    let record = one_record(&d, "n-2");
    assert_eq!(
        record["points"]["setpoint"]["result"], "written",
        "{record:#}"
    );
    assert_eq!(read_device(port, SETPOINT, PUMP).0, 45);

    let status = d.status();
    let path = &status["commands"]["nats"];
    assert_eq!(path["subscribed"], "opex.cmd.*", "{path:#}");
    assert_eq!(path["received"], 5, "{path:#}");
    assert_eq!(path["taken"], 3, "{path:#}");
    assert_eq!(path["malformed"], 1, "{path:#}");
    assert_eq!(path["unknown_device"], 1, "{path:#}");
    assert_eq!(path["no_reply"], 1, "{path:#}");
    let c = commands_of(&d);
    assert_eq!(
        (c["received"].as_u64(), c["duplicates"].as_u64()),
        (Some(2), Some(1)),
        "{c:#}"
    );
    assert_eq!(records_of(&d, "n-1").len(), 1);
    assert_one_record_per_command(&d);
}

// ---------------------------------------------------------------- MQTT

/// What the test's MQTT 5 client received: topic, payload, correlation data.
type Got = Arc<Mutex<Vec<(String, Value, Option<Vec<u8>>)>>>;

/// An MQTT 5 client (rumqttc v5) subscribed to `filters`, keeping what arrives.
struct Mqtt5 {
    rt: tokio::runtime::Runtime,
    client: rumqttc::v5::AsyncClient,
    got: Got,
}

impl Mqtt5 {
    fn connect(port: u16, filters: &[&str]) -> Mqtt5 {
        use rumqttc::v5::mqttbytes::v5::Packet;
        use rumqttc::v5::mqttbytes::QoS;
        use rumqttc::v5::Event;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let mut opts = rumqttc::v5::MqttOptions::new("it-operator", "127.0.0.1", port);
        opts.set_keep_alive(Duration::from_secs(5));
        let (client, mut eventloop) = rumqttc::v5::AsyncClient::new(opts, 1000);
        let got: Got = Default::default();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let filters: Vec<String> = filters.iter().map(|f| f.to_string()).collect();
        {
            let (got, client) = (got.clone(), client.clone());
            rt.spawn(async move {
                let mut subacks = 0;
                loop {
                    match eventloop.poll().await {
                        Ok(Event::Incoming(Packet::ConnAck(_))) => {
                            for f in &filters {
                                let _ = client.subscribe(f.clone(), QoS::AtLeastOnce).await;
                            }
                        }
                        Ok(Event::Incoming(Packet::SubAck(_))) => {
                            subacks += 1;
                            if subacks == filters.len() {
                                let _ = ready_tx.send(());
                            }
                        }
                        Ok(Event::Incoming(Packet::Publish(p))) => {
                            let topic = String::from_utf8_lossy(&p.topic).into_owned();
                            let body = serde_json::from_slice(&p.payload).unwrap_or(Value::Null);
                            let corr = p
                                .properties
                                .and_then(|pr| pr.correlation_data)
                                .map(|b| b.to_vec());
                            got.lock().unwrap().push((topic, body, corr));
                        }
                        Ok(_) => {}
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            });
        }
        ready_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the MQTT 5 test client subscribed");
        Mqtt5 { rt, client, got }
    }

    /// Publishes a command at QoS 1, with a response topic and correlation data if given.
    fn command(&self, topic: &str, body: &Value, response: Option<(&str, &[u8])>) {
        use rumqttc::v5::mqttbytes::v5::PublishProperties;
        use rumqttc::v5::mqttbytes::QoS;
        let props = PublishProperties {
            response_topic: response.map(|(t, _)| t.to_string()),
            correlation_data: response.map(|(_, c)| c.to_vec().into()),
            ..Default::default()
        };
        self.rt
            .block_on(self.client.publish_with_properties(
                topic,
                QoS::AtLeastOnce,
                false,
                body.to_string(),
                props,
            ))
            .expect("queue the command");
    }

    /// Waits for a message on `topic` whose body has `id`; returns its body and correlation.
    fn result(&self, topic: &str, id: &str) -> (Value, Option<Vec<u8>>) {
        let find = || {
            self.got
                .lock()
                .unwrap()
                .iter()
                .find(|(t, b, _)| t == topic && b["id"] == id)
                .map(|(_, b, c)| (b.clone(), c.clone()))
        };
        wait_until(
            POLL_DEADLINE,
            &format!("the result of {id} on {topic}"),
            || find().is_some(),
        );
        find().unwrap()
    }

    fn on(&self, topic: &str) -> Vec<Value> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _, _)| t == topic)
            .map(|(_, b, _)| b.clone())
            .collect()
    }
}

#[test]
fn mqtt_results_go_to_the_response_topic_with_its_correlation_data_or_else_to_the_result_topic() {
    let broker = Mosquitto::start();
    let device = ModbusTcp::start();
    let port = device.port();
    let mut c = device_config(port);
    c["mqtt"] = json!({"connections": [{"name": "plant", "url": broker.url(),
                                        "client_id": "it-cmd", "reconnect_max_ms": 200}]});
    c["commands"]["mqtt"] = json!({"connection": "plant"});
    let d = Daemon::start(c);
    wait_connected(&d);
    wait_until(POLL_DEADLINE, "the MQTT path subscribed", || {
        d.status()["commands"]["mqtt"]["connected"] == true
    });
    set_device(port, SETPOINT, 0, PUMP, false);
    let me = Mqtt5::connect(broker.port(), &["replies/#", "opex/cmd/+/result"]);

    // With a response topic: the result goes there, with the request's correlation data.
    let body = json!({"id": "m-1", "points": {"setpoint": 50, "pump": true}});
    me.command("opex/cmd/press-1", &body, Some(("replies/it", b"corr-1")));
    let (first, corr) = me.result("replies/it", "m-1");
    assert_eq!(first["ok"], true, "{first:#}");
    assert_eq!(corr.as_deref(), Some(&b"corr-1"[..]));
    assert_eq!(read_device(port, SETPOINT, PUMP), (500, true));
    let record = one_record(&d, "m-1");
    assert_eq!(
        record["origin"],
        json!({"path": "mqtt", "topic": "opex/cmd/press-1", "client_id": "it-cmd-commands"})
    );

    // Without one: to <topic>/result.
    let body2 = json!({"id": "m-2", "points": {"pump": false}});
    me.command("opex/cmd/press-1", &body2, None);
    let (second, corr) = me.result("opex/cmd/press-1/result", "m-2");
    assert_eq!(second["points"]["pump"]["result"], "written", "{second:#}");
    assert_eq!(corr, None);
    assert_eq!(read_device(port, SETPOINT, PUMP), (500, false));

    // The same id again (what a redelivery is): the first outcome, nothing written.
    set_device(port, SETPOINT, 7, PUMP, false);
    me.command(
        "opex/cmd/press-1",
        &body,
        Some(("replies/again", b"corr-2")),
    );
    let (again, corr) = me.result("replies/again", "m-1");
    assert_eq!(again, first);
    assert_eq!(corr.as_deref(), Some(&b"corr-2"[..]));
    assert_eq!(
        read_device(port, SETPOINT, PUMP),
        (7, false),
        "not written again"
    );

    // Not a command: the error goes to the result topic.
    me.command("opex/cmd/press-1", &json!({"nope": 1}), None);
    wait_until(POLL_DEADLINE, "the error result", || {
        me.on("opex/cmd/press-1/result")
            .iter()
            .any(|b| b["ok"] == false)
    });

    one_record(&d, "m-2");
    assert_eq!(records_of(&d, "m-1").len(), 1);
    let c = commands_of(&d);
    assert_eq!(
        (c["received"].as_u64(), c["duplicates"].as_u64()),
        (Some(2), Some(1)),
        "{c:#}"
    );
    let status = d.status();
    let path = &status["commands"]["mqtt"];
    assert_eq!(path["subscribed"], "opex/cmd/+", "{path:#}");
    assert_eq!(path["malformed"], 1, "{path:#}");
    assert_eq!(path["answered"], 4, "{path:#}");
    assert_one_record_per_command(&d);
}

#[test]
fn a_reused_id_with_other_values_is_refused_409_writes_nothing_and_no_path_can_claim_another_paths_ids(
) {
    let broker = Mosquitto::start();
    let device = ModbusTcp::start();
    let port = device.port();
    let mut c = device_config(port);
    c["mqtt"] = json!({"connections": [{"name": "plant", "url": broker.url(),
                                        "client_id": "it-cmd", "reconnect_max_ms": 200}]});
    c["commands"]["mqtt"] = json!({"connection": "plant"});
    let d = Daemon::start(c);
    wait_connected(&d);
    wait_until(POLL_DEADLINE, "the MQTT path subscribed", || {
        d.status()["commands"]["mqtt"]["connected"] == true
    });
    set_device(port, SETPOINT, 0, PUMP, false);
    let me = Mqtt5::connect(broker.port(), &["replies/#"]);
    let http = |body: Value| write(&d, "press-1", Some(COMMANDS_TOKEN), &body);

    let r = http(json!({"id": "r-1", "points": {"setpoint": 50}}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["ok"], true, "{}", r.body);
    assert_eq!(read_device(port, SETPOINT, PUMP).0, 500);

    // The same id with another value: refused, nothing sent, the device keeps 50.
    let r = http(json!({"id": "r-1", "points": {"setpoint": 60}}));
    assert_eq!(r.status, 409, "{}", r.body);
    let refused = r.json();
    assert_eq!(refused["ok"], false, "{refused:#}");
    assert_eq!(refused["result"], "refused", "{refused:#}");
    assert_eq!(
        refused["reason"], "id reused with other content",
        "{refused:#}"
    );
    assert_eq!(
        refused["points"]["setpoint"]["result"], "refused",
        "{refused:#}"
    );
    assert_eq!(read_device(port, SETPOINT, PUMP).0, 500, "not written");
    // The same id with the same content is still a repeat: the first outcome.
    let r = http(json!({"id": "r-1", "points": {"setpoint": 50}}));
    assert_eq!(
        (r.status, r.json()["ok"].clone()),
        (200, json!(true)),
        "{}",
        r.body
    );

    // An MQTT publisher's id is its own: it neither gets HTTP's outcome nor blocks HTTP.
    me.command(
        "opex/cmd/press-1",
        &json!({"id": "r-1", "points": {"setpoint": 70}}),
        Some(("replies/1", b"")),
    );
    let (answer, _) = me.result("replies/1", "r-1");
    assert_eq!(
        answer["points"]["setpoint"]["result"], "written",
        "{answer:#}"
    );
    assert_eq!(
        read_device(port, SETPOINT, PUMP).0,
        700,
        "the MQTT command ran"
    );
    me.command(
        "opex/cmd/press-1",
        &json!({"id": "r-2", "points": {"setpoint": 10}}),
        Some(("replies/2", b"")),
    );
    me.result("replies/2", "r-2");
    let r = http(json!({"id": "r-2", "points": {"setpoint": 20}}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["ok"], true, "{}", r.body);
    assert_eq!(
        read_device(port, SETPOINT, PUMP).0,
        200,
        "the HTTP command ran"
    );
    // Within MQTT, a reused id with other content is refused the same way.
    me.command(
        "opex/cmd/press-1",
        &json!({"id": "r-2", "points": {"setpoint": 30}}),
        Some(("replies/3", b"")),
    );
    let (answer, _) = me.result("replies/3", "r-2");
    assert_eq!(answer["ok"], false, "{answer:#}");
    assert_eq!(
        answer["reason"], "id reused with other content",
        "{answer:#}"
    );
    assert_eq!(read_device(port, SETPOINT, PUMP).0, 200, "not written");

    // Each refusal is on record with the value it asked for.
    wait_until(POLL_DEADLINE, "the records of r-1 and r-2", || {
        records_of(&d, "r-1").len() >= 3 && records_of(&d, "r-2").len() >= 3
    });
    for (id, value, path) in [("r-1", 60, "http"), ("r-2", 30, "mqtt")] {
        let rows = records_of(&d, id);
        let row = rows
            .iter()
            .find(|r| r["payload"]["points"]["setpoint"]["value"] == value)
            .unwrap_or_else(|| panic!("no record of {id} = {value}: {rows:#?}"));
        let p = &row["payload"];
        assert_eq!(p["origin"]["path"], path, "{p:#}");
        assert_eq!(p["points"]["setpoint"]["result"], "refused", "{p:#}");
        assert_eq!(
            p["points"]["setpoint"]["reason"], "id reused with other content",
            "{p:#}"
        );
    }
    let c = commands_of(&d);
    assert_eq!(c["id_reused"], 2, "{c:#}");
    assert_eq!(c["duplicates"], 1, "{c:#}");
    assert_eq!(c["written"], 4, "{c:#}");
    assert_eq!(
        metric(&d.metrics(), "opex_connector_commands_id_reused_total"),
        Some(2.0)
    );
}

// ---------------------------------------------------------------- the demo

/// The demo `curl` that writes the setpoint, as the book's Getting started shows it: its
/// token, path and body.
fn demo_setpoint_curl() -> (String, String, String) {
    let page = include_str!("../docs/src/getting-started/README.md");
    let at = page
        .find("/api/devices/plant-1/write")
        .expect("Getting started writes plant-1");
    let start = page[..at].rfind("curl ").expect("a curl");
    let curl = &page[start..at + "/api/devices/plant-1/write".len()];
    let between = |open: &str, close: char| {
        let i = curl.find(open).expect(open) + open.len();
        curl[i..i + curl[i..].find(close).expect("closed")].to_string()
    };
    let path = curl[curl.find("/api/").expect("a path")..].to_string();
    (between("Bearer ", '\''), path, between("-d '", '\''))
}

#[cfg(feature = "simulator")]
#[test]
fn the_demo_curl_writes_the_ovens_setpoint_and_the_oven_temperature_follows_it() {
    let demo: Value =
        serde_saphyr::from_str(include_str!("../config/demo.yaml")).expect("demo.yaml parses");
    let mut config = demo.clone();
    let modbus = free_port();
    config["connector"]["http"]["listen"] = json!("127.0.0.1:0");
    config["connector"]["data_dir"] = Value::Null;
    config["simulator"] = json!({"modbus": format!("127.0.0.1:{modbus}")});
    config["devices"] = json!([demo["devices"][0].clone()]);
    config["devices"][0]["port"] = json!(modbus);
    if let Some(c) = config.as_object_mut() {
        c.remove("opcua_server");
    }
    let d = Daemon::start(config);
    let plant = |d: &Daemon| d.status()["devices"][0].clone();
    let oven = |d: &Daemon| plant(d)["values"]["process"]["oven_temp"]["value"].as_f64();
    wait_until(POLL_DEADLINE, "the oven polled near 180 °C", || {
        oven(&d).is_some_and(|t| t > 170.0)
    });
    let writable: Vec<Value> = plant(&d)["writable"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = writable.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, ["oven_setpoint", "pump_running"], "{writable:#?}");

    let (token, path, body) = demo_setpoint_curl();
    let r = d.post(&path, Some(&token), body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.body);
    let outcome = r.json();
    assert_eq!(outcome["ok"], true, "{outcome:#}");
    assert_eq!(
        outcome["points"]["oven_setpoint"]["result"], "written",
        "{outcome:#}"
    );
    let asked: Value = serde_json::from_str(&body).unwrap();
    let target = asked["points"]["oven_setpoint"].as_f64().unwrap();
    // The oven follows within seconds (4 s time constant, ± 5 °C around the setpoint).
    wait_until(POLL_DEADLINE, "the oven near its new setpoint", || {
        oven(&d).is_some_and(|t| (t - target).abs() < 8.0)
    });
    assert_eq!(
        plant(&d)["values"]["process"]["oven_setpoint"]["value"].as_f64(),
        Some(target)
    );
}
