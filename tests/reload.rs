//! A reload changes one part at a time while the others go on untouched: ingest sources,
//! schedules, JetStream consumers, devices (their commands with them) and alert channels
//! added, changed and removed by `POST /api/config`, with the unchanged parts' counters and connections kept (the NATS server's
//! own connection ids, mosquitto's log of sessions, the devices' connect counters); and 20
//! such reloads under load with nothing lost. Drives the real binary against real
//! nats-server, mosquitto and pymodbus.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const ADMIN: &str = ADMIN_TOKEN;
const OTHER: &str = "other";
const OTHER_TOKEN: &str = "other-t0ken-0123456";

fn running(daemon: &Daemon) -> Value {
    let text = std::fs::read_to_string(daemon.config_path()).expect("the config file");
    serde_saphyr::from_str(&text).expect("YAML")
}

/// `config` with what the daemon filled in at its start (its data dir, its HTTP settings, its
/// telemetry), so that applying it changes only what the test changes.
fn as_running(daemon: &Daemon, config: &mut Value) {
    let first = running(daemon);
    for key in ["data_dir", "http"] {
        config["connector"][key] = first["connector"][key].clone();
    }
    config["telemetry"] = first["telemetry"].clone();
}

fn apply(daemon: &Daemon, config: &Value) -> Value {
    let reply = daemon.post("/api/config", Some(ADMIN), to_yaml(config).as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()
}

fn source(daemon: &Daemon, name: &str) -> Value {
    named(&daemon.status(), "/sources", name).clone()
}

fn schedules(daemon: &Daemon) -> Vec<Value> {
    daemon.status()["schedules"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn ingest_sources_and_schedules_are_added_changed_and_removed_while_the_others_go_on() {
    let daemon = Daemon::start(json!({
        "connector": {
            "http": {"admin_token": ADMIN},
            "push_queue": {"enabled": true, "max_quota_mb": 16},
        },
        "ingest": {"sources": [
            {"name": SOURCE, "token": TOKEN},
            {"name": OTHER, "token": OTHER_TOKEN},
        ]},
    }));
    let other = |key: &str| {
        daemon.request(
            "POST",
            &format!("/api/ingest/{OTHER}/{key}"),
            Some(OTHER_TOKEN),
            &[],
            Some(b"{\"v\": 1}"),
        )
    };
    assert_eq!(other("o-1").status, 200);
    assert_eq!(daemon.ingest("k-1", "{\"v\": 1}").status, 200);

    // A token changed and a schedule added: those two parts, nothing else.
    let mut new = running(&daemon);
    new["ingest"]["sources"][0]["token"] = json!("a-new-t0ken-0123456");
    new["schedules"] = json!([{"name": "ping", "every": "1s"}]);
    let body = apply(&daemon, &new);
    assert_eq!(
        body["changes"]["restart"],
        json!([format!("ingest/{SOURCE}")]),
        "{body}"
    );
    assert_eq!(body["changes"]["start"], json!(["schedule/ping"]), "{body}");
    assert_eq!(body["changes"]["stop"], json!([]), "{body}");

    // The old token is refused, the new one stores; the other source kept its counters.
    assert_eq!(daemon.ingest("k-2", "{\"v\": 2}").status, 401);
    let reply = daemon.request(
        "POST",
        &format!("/api/ingest/{SOURCE}/k-3"),
        Some("a-new-t0ken-0123456"),
        &[],
        Some(b"{\"v\": 3}"),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        u64_at(&source(&daemon, &format!("ingest/{OTHER}")), "/stored"),
        1
    );
    assert_eq!(other("o-2").status, 200);
    assert_eq!(
        u64_at(&source(&daemon, &format!("ingest/{OTHER}")), "/stored"),
        2
    );
    // The restarted one counts from its restart.
    assert_eq!(
        u64_at(&source(&daemon, &format!("ingest/{SOURCE}")), "/stored"),
        1
    );

    // The new schedule ticks into the push queue, by the default plan compiled again.
    wait_until(Duration::from_secs(10), "two ticks", || {
        schedules(&daemon)
            .first()
            .is_some_and(|s| u64_at(s, "/ticks_total") >= 2)
    });

    // Removed: it stops, and nothing else changes.
    let mut gone = running(&daemon);
    gone.as_object_mut().expect("a mapping").remove("schedules");
    let body = apply(&daemon, &gone);
    assert_eq!(body["changes"]["stop"], json!(["schedule/ping"]), "{body}");
    assert_eq!(body["changes"]["restart"], json!([]), "{body}");
    assert!(schedules(&daemon).is_empty());
    assert_eq!(other("o-3").status, 200);
    assert_eq!(daemon.status()["config"]["revision"], json!(3));
}

/// The NATS server's connection id of the client named `name`, if it is connected.
fn cid(server: &NatsServer, name: &str) -> Option<u64> {
    let connz = server.monitor("/connz")?;
    connz["connections"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == json!(name))
        .and_then(|c| c["cid"].as_u64())
}

#[test]
fn a_changed_jetstream_consumer_restarts_alone_and_the_other_keeps_its_connection() {
    let server = NatsServer::start();
    let js = Js::connect(&server.url());
    js.create_stream("A", &["a.>"]);
    js.create_stream("B", &["b.>"]);
    let mut config = json!({
        "connector": {
            "http": {"admin_token": ADMIN},
            "push_queue": {"enabled": true, "max_quota_mb": 16},
        },
        "ingest": {"sources": [{"name": SOURCE, "token": TOKEN}]},
    });
    config["nats"] = json!({
        "connections": [{"name": "js", "servers": [server.url()]}],
        "sources": [
            {"name": "a", "stream": "A", "durable": "edge-a"},
            {"name": "b", "stream": "B", "durable": "edge-b"},
        ],
    });
    let daemon = Daemon::start(config);
    let consuming = |name: &str| source(&daemon, &format!("nats/{name}"))["consuming"] == true;
    wait_until(Duration::from_secs(20), "both consume", || {
        consuming("a") && consuming("b")
    });
    let (a_before, b_before) = (
        cid(&server, "opex-connector nats/a").expect("a connected"),
        cid(&server, "opex-connector nats/b").expect("b connected"),
    );
    js.publish("a.one", b"{\"n\": 1}".to_vec());
    js.publish("b.one", b"{\"n\": 1}".to_vec());
    let acked = |name: &str| u64_at(&source(&daemon, &format!("nats/{name}")), "/acked");
    wait_until(Duration::from_secs(20), "both acked", || {
        acked("a") == 1 && acked("b") == 1
    });

    let mut new = running(&daemon);
    new["nats"]["sources"][1]["nak_backoff_initial_ms"] = json!(300);
    let body = apply(&daemon, &new);
    assert_eq!(body["changes"]["restart"], json!(["nats/b"]), "{body}");

    wait_until(Duration::from_secs(20), "b consumes again", || {
        consuming("b")
    });
    assert_eq!(
        cid(&server, "opex-connector nats/a"),
        Some(a_before),
        "a kept its connection"
    );
    let b_after = cid(&server, "opex-connector nats/b").expect("b connected");
    assert_ne!(b_after, b_before, "b connected anew");
    js.publish("a.two", b"{\"n\": 2}".to_vec());
    js.publish("b.two", b"{\"n\": 2}".to_vec());
    wait_until(Duration::from_secs(20), "both acked again", || {
        acked("a") == 2 && acked("b") == 1
    });
    // Every message stored once: JetStream has nothing pending for either consumer.
    wait_until(Duration::from_secs(20), "nothing pending", || {
        let (pending_a, unacked_a, _) = js.consumer("A", "edge-a");
        let (pending_b, unacked_b, _) = js.consumer("B", "edge-b");
        pending_a + unacked_a + pending_b + unacked_b == 0
    });
    assert_eq!(u64_at(&daemon.status(), "/push_queue/rows"), 4);
}

/// How many clients post records while the config changes.
const CLIENTS: usize = 64;
/// How many configs are applied under the load.
const RELOADS: usize = 20;

/// The config of reload `round` (0 is the one the daemon starts with): the ingest records go
/// to the push queue and, every other round, to the MQTT sink as well; a schedule is added,
/// changed and removed in turn; a second ingest source's token is rotated; `plant-2` gains
/// a point and loses it again in turn; a second MQTT sink is added and removed in turn (and
/// the test adds and removes an alert channel in turn). Everything else (`plant-1`, the
/// `push` and `mqtt` sinks, the JetStream consumer, its connection) stays as it is.
fn loaded_config(
    round: usize,
    nats: &NatsServer,
    broker: &Mosquitto,
    plant: u16,
    uplink: &str,
) -> Value {
    let device = |name: &str, more: bool| {
        let mut points = vec![json!({"name": "oven_temp", "register": 0, "type": "f32"})];
        if more {
            points.push(json!({"name": "coolant_temp", "register": 2, "type": "f32"}));
        }
        json!({
            "name": name, "protocol": "modbus_tcp", "host": "127.0.0.1", "port": plant, "unit": 1,
            "timeout_ms": 500,
            "groups": [{"name": "process", "interval_ms": 100}],
            "points": points,
        })
    };
    let ingest_to: &[&str] = if round % 2 == 1 {
        &["push", "mqtt"]
    } else {
        &["push"]
    };
    let mut nodes = vec![
        json!({"id": "in", "kind": "source", "source": format!("ingest/{SOURCE}")}),
        json!({"id": "extra", "kind": "source", "source": format!("ingest/{OTHER}")}),
        json!({"id": "js", "kind": "source", "source": "nats/events"}),
        json!({"id": "p1", "kind": "source", "source": "modbus/plant-1"}),
        json!({"id": "p2", "kind": "source", "source": "modbus/plant-2"}),
    ];
    nodes.extend(
        ["push", "mqtt"]
            .iter()
            .filter(|s| **s == "push" || ingest_to.contains(s))
            .map(|s| json!({"id": format!("to-{s}"), "kind": "sink", "sink": s})),
    );
    let mut wires: Vec<Value> = ingest_to
        .iter()
        .map(|s| json!({"from": "in", "to": format!("to-{s}")}))
        .collect();
    for from in ["extra", "js", "p1", "p2"] {
        wires.push(json!({"from": from, "to": "to-push"}));
    }
    // A second MQTT sink, `cell`, added and removed in turn, takes the second source's records.
    let cell = round % 2 == 1;
    if cell {
        nodes.push(json!({"id": "to-cell", "kind": "sink", "sink": "cell"}));
        wires.push(json!({"from": "extra", "to": "to-cell"}));
    }
    let mut config = json!({
        "connector": {
            "http": {"admin_token": ADMIN},
            "push_queue": {"enabled": true, "max_quota_mb": 256, "on_full": "block"},
            "push": {"url": uplink, "retry_initial_ms": 50, "retry_max_ms": 200},
        },
        "ingest": {"sources": [
            {"name": SOURCE, "token": TOKEN},
            {"name": OTHER, "token": format!("other-t0ken-{round:04}-0123")},
        ]},
        "simulator": {"modbus": format!("127.0.0.1:{plant}")},
        "devices": [device("plant-1", false), device("plant-2", round % 2 == 1)],
        "nats": {
            "connections": [{"name": "js", "servers": [nats.url()]}],
            "sources": [{"name": "events", "stream": "EVENTS", "durable": "edge"}],
        },
        "mqtt": {
            "connections": [{"name": "plant", "url": broker.url(), "client_id": "it-sink"}],
            "sink": {"topic": "opex/{{key}}", "qos": 1, "ack_timeout_secs": 5},
        },
    });
    if cell {
        config["sinks"] = json!([{"name": "cell", "type": "mqtt", "connection": "plant",
                                  "topic": "cell/{{key}}", "qos": 1}]);
    }
    if round % 3 != 2 {
        config["schedules"] = json!([{"name": "tick", "every": "1s", "payload": {"round": round}}]);
        nodes.push(json!({"id": "tick", "kind": "source", "source": "schedule/tick"}));
        wires.push(json!({"from": "tick", "to": "to-push"}));
    }
    config["flows"] = json!([{"id": "out", "nodes": nodes, "wires": wires}]);
    config
}

#[test]
fn reloads_under_load_lose_nothing_and_leave_the_unchanged_parts_alone() {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let nats = NatsServer::start();
    let js = Js::connect(&nats.url());
    js.create_stream("EVENTS", &["events.>"]);
    let broker = Mosquitto::start();
    let uplink = Receiver::start();
    let alert_receiver = Receiver::start();
    let plant = free_port();
    let daemon = Daemon::start(loaded_config(0, &nats, &broker, plant, &uplink.url()));
    let device = |name: &str| named(&daemon.status(), "/devices", name).clone();
    wait_until(
        Duration::from_secs(20),
        "the devices poll, the consumer consumes",
        || {
            u64_at(&device("plant-1"), "/polls_total") > 0
                && u64_at(&device("plant-2"), "/polls_total") > 0
                && source(&daemon, "nats/events")["consuming"] == true
                && named(&daemon.status(), "/sinks", "mqtt")["connected"] == true
        },
    );
    let connects = |name: &str| u64_at(&device(name), "/connects_total");
    let connects_1 = connects("plant-1");
    let consumer = cid(&nats, "opex-connector nats/events").expect("the consumer's connection");
    let broker_log = broker.dir().join("mosquitto.log");
    let sink_sessions = || {
        std::fs::read_to_string(&broker_log)
            .unwrap_or_default()
            .matches(" as it-sink-sink-mqtt (")
            .count()
    };
    assert_eq!(
        sink_sessions(),
        1,
        "the MQTT sink connected once: {}",
        std::fs::read_to_string(&broker_log).unwrap_or_default()
    );

    // The load: 64 clients posting records, a publisher into JetStream.
    let stop = Arc::new(AtomicBool::new(false));
    let stored: Arc<Mutex<HashSet<String>>> = Arc::default();
    let odd: Arc<Mutex<Vec<String>>> = Arc::default();
    let base = daemon.url(&format!("/api/ingest/{SOURCE}"));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (stop, stored, odd, base) =
                (stop.clone(), stored.clone(), odd.clone(), base.clone());
            std::thread::spawn(move || {
                let client = Client::new();
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let key = format!("c{c}-{n}");
                    n += 1;
                    match client.post(&format!("{base}/{key}"), Some(TOKEN), b"{\"v\": 1}") {
                        Ok(r) if r.status == 200 => {
                            // The record's id, as the uplink gets it.
                            let id = r.json()["id"].as_str().map(str::to_string);
                            stored.lock().unwrap().insert(id.unwrap_or(key));
                        }
                        Ok(r) if r.status == 503 && r.header("retry-after").is_some() => {}
                        Ok(r) => odd
                            .lock()
                            .unwrap()
                            .push(format!("{key}: {} {}", r.status, r.body)),
                        Err(e) => odd.lock().unwrap().push(format!("{key}: {e}")),
                    }
                }
            })
        })
        .collect();
    let publisher = {
        let (stop, url) = (stop.clone(), nats.url());
        std::thread::spawn(move || {
            let js = Js::connect(&url);
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                js.publish("events.tick", serde_json::to_vec(&json!({"n": n})).unwrap());
                n += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            n
        })
    };

    let polls_before = u64_at(&device("plant-1"), "/polls_total");
    for round in 1..=RELOADS {
        let mut config = loaded_config(round, &nats, &broker, plant, &uplink.url());
        // What the harness added to the first config stays as it is.
        let first = running(&daemon);
        config["connector"]["data_dir"] = first["connector"]["data_dir"].clone();
        config["connector"]["http"]["listen"] = first["connector"]["http"]["listen"].clone();
        config["telemetry"] = first["telemetry"].clone();
        // An alert channel added and removed in turn.
        config["telemetry"]["alerts"]["webhook"] = match round % 2 {
            1 => json!({"url": alert_receiver.url()}),
            _ => Value::Null,
        };
        let body = apply(&daemon, &config);
        let restarted = parts_under(&body, "restart");
        for part in ["alerts", "device/plant-2"] {
            assert!(
                restarted.contains(&part),
                "round {round}: {part} not restarted: {body}"
            );
        }
        let (cell, change) = ("sink/cell", if round % 2 == 1 { "start" } else { "stop" });
        assert!(
            parts_under(&body, change).contains(&cell),
            "round {round}: {cell} not under {change}: {body}"
        );
        assert_eq!(body["revision"], json!(round + 1), "{body}");
        let kept = parts_under(&body, "keep");
        for part in ["device/plant-1", "sink/mqtt", "sink/push", "nats/events"] {
            assert!(
                kept.contains(&part),
                "round {round}: {part} not kept: {body}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().expect("a client");
    }
    let published = publisher.join().expect("the publisher");

    let odd = odd.lock().unwrap().clone();
    assert!(
        odd.is_empty(),
        "answers other than 200 and 503 + Retry-After: {odd:?}"
    );
    let stored = stored.lock().unwrap().clone();
    assert!(
        stored.len() > CLIENTS,
        "the load ran: {} stored",
        stored.len()
    );

    // Every acked record delivered: each stored key at the uplink, every JetStream message
    // consumed, the ledger balanced with nothing lost.
    let began = std::time::Instant::now();
    loop {
        let got = uplink.unique_ids();
        let missing: Vec<&String> = stored.iter().filter(|k| !got.contains(*k)).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "{} of {} stored records never reached the uplink, e.g. {:?}; it has {} ids, e.g. {:?}; push queue: {}",
            missing.len(),
            stored.len(),
            missing.iter().take(5).collect::<Vec<_>>(),
            got.len(),
            got.iter().take(5).collect::<Vec<_>>(),
            daemon.status()["push_queue"]
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_until(
        Duration::from_secs(30),
        "JetStream has nothing pending",
        || {
            let (pending, unacked, _) = js.consumer("EVENTS", "edge");
            pending + unacked == 0
        },
    );
    assert!(published > 0);
    wait_until(
        Duration::from_secs(30),
        "nothing pending in the ledger",
        || {
            let ledger = ledger(&daemon, false);
            ledger["sources"]
                .as_object()
                .is_some_and(|s| s.values().all(|c| u64_at(c, "/pending") == 0))
        },
    );
    let ledger = assert_balanced(&ledger(&daemon, true), "after the reloads");
    for (name, c) in ledger["sources"].as_object().expect("sources") {
        assert_eq!(u64_at(c, "/lost"), 0, "{name} lost records: {c:#}");
    }

    // The unchanged parts were not touched: plant-1 kept its connection and went on polling,
    // the consumer its NATS connection, the MQTT sink its one session; plant-2, restarted at
    // every reload, polls with its last config.
    assert_eq!(connects("plant-1"), connects_1, "{}", device("plant-1"));
    assert!(u64_at(&device("plant-1"), "/polls_total") > polls_before);
    wait_until(Duration::from_secs(10), "plant-2 polls again", || {
        u64_at(&device("plant-2"), "/polls_total") > 0
    });
    assert_eq!(cid(&nats, "opex-connector nats/events"), Some(consumer));
    assert_eq!(sink_sessions(), 1, "the MQTT sink connected once");
    assert_eq!(daemon.status()["config"]["reloads"], json!(RELOADS));
}

#[test]
fn an_alert_channel_is_added_and_removed_while_the_device_it_reports_keeps_its_connection() {
    let mut device = ModbusTcp::start();
    let alerts = Receiver::start();
    let daemon = Daemon::start(json!({
        "connector": {"http": {"admin_token": ADMIN}},
        "telemetry": {"alerts": {"after_secs": 1, "check_interval_secs": 1}},
        "devices": [{
            "name": "press-1", "protocol": "modbus_tcp", "host": "127.0.0.1",
            "port": device.port(), "unit": 1, "timeout_ms": 300,
            "groups": [{"name": "main", "interval_ms": 100}],
            "points": [{"name": "u16", "register": 0, "type": "u16"}],
        }],
    }));
    let press = || named(&daemon.status(), "/devices", "press-1").clone();
    wait_until(Duration::from_secs(20), "the device polled", || {
        u64_at(&press(), "/polls_total") > 0
    });
    let connects = u64_at(&press(), "/connects_total");
    let channels = |daemon: &Daemon| -> Vec<Value> {
        daemon.status()["alert_channels"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| c["name"].clone())
            .collect()
    };
    assert_eq!(channels(&daemon), [json!("log")]);

    let mut new = running(&daemon);
    new["telemetry"]["alerts"]["webhook"] =
        json!({"url": alerts.url(), "retry_initial_ms": 100, "retry_max_ms": 500});
    let body = apply(&daemon, &new);
    assert_eq!(body["changes"]["restart"], json!(["alerts"]), "{body}");
    assert_eq!(channels(&daemon), [json!("log"), json!("webhook")]);
    assert_eq!(
        u64_at(&press(), "/connects_total"),
        connects,
        "the device untouched"
    );

    // The new channel carries the next outage.
    device.stop();
    wait_until(
        Duration::from_secs(20),
        "the outage on the new channel",
        || {
            alerts
                .records()
                .iter()
                .any(|a| a["component"] == "device press-1" && a["kind"] == "device_offline")
        },
    );

    new["telemetry"]["alerts"]
        .as_object_mut()
        .expect("alerts")
        .remove("webhook");
    let body = apply(&daemon, &new);
    assert_eq!(body["changes"]["restart"], json!(["alerts"]), "{body}");
    assert_eq!(channels(&daemon), [json!("log")]);
}

#[test]
fn a_webhook_secret_is_rotated_live_and_one_that_cannot_be_read_changes_nothing() {
    let daemon = Daemon::start(json!({
        "connector": {
            "http": {"admin_token": ADMIN},
            "push_queue": {"enabled": true, "max_quota_mb": 16},
        },
        "ingest": {"sources": [{"name": SOURCE, "token": TOKEN}]},
        "webhooks": [
            {"name": "pay", "secret": "old-webhook-secret-0123"},
            {"name": "ship", "secret": "ship-webhook-secret-0123"},
        ],
    }));
    assert_eq!(
        daemon
            .hook("pay", "old-webhook-secret-0123", r#"{"n":1}"#)
            .status,
        200
    );
    assert_eq!(
        daemon
            .hook("ship", "ship-webhook-secret-0123", r#"{"n":1}"#)
            .status,
        200
    );

    let mut new = running(&daemon);
    new["webhooks"][0]["secret"] = json!("new-webhook-secret-0123");
    let body = apply(&daemon, &new);
    assert_eq!(body["changes"]["restart"], json!(["webhook/pay"]), "{body}");
    assert_eq!(
        daemon
            .hook("pay", "old-webhook-secret-0123", r#"{"n":2}"#)
            .status,
        401
    );
    assert_eq!(
        daemon
            .hook("pay", "new-webhook-secret-0123", r#"{"n":3}"#)
            .status,
        200
    );
    // The other webhook kept its counters.
    let ship = webhook_stats(&daemon.status(), "ship");
    assert_eq!(u64_at(&ship, "/accepted"), 1, "{ship}");

    // A secret file that is not there: the part cannot start, nothing changes.
    let mut broken = running(&daemon);
    let webhook = broken["webhooks"][0].as_object_mut().expect("a webhook");
    webhook.remove("secret");
    webhook.insert("secret_file".into(), json!("/nonexistent/opex-secret"));
    let reply = daemon.post("/api/config", Some(ADMIN), to_yaml(&broken).as_bytes());
    assert_eq!(reply.status, 409, "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["failed"]["part"], json!("webhook/pay"), "{body}");
    assert_eq!(body["changes"]["restart"], json!(["webhook/pay"]), "{body}");
    assert_eq!(body["dry_run"], json!(false), "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("nothing was changed")),
        "{body}"
    );
    assert_eq!(daemon.status()["config"]["revision"], json!(2));
    assert_eq!(
        daemon
            .hook("pay", "new-webhook-secret-0123", r#"{"n":4}"#)
            .status,
        200
    );
    assert!(
        !std::fs::read_to_string(daemon.config_path())
            .expect("the file")
            .contains("/nonexistent"),
        "the file holds what runs"
    );
}

const COMMANDS: &str = "commands-t0ken-0123456";

/// A device of the built-in simulator on `plant`, with its writable oven setpoint and `extra`
/// points besides.
fn simulated(name: &str, plant: u16, extra: &[Value]) -> Value {
    let mut points = vec![
        json!({"name": "oven_temp", "register": 0, "type": "f32"}),
        json!({"name": "oven_setpoint", "register": 12, "type": "f32",
               "writable": true, "min": 0, "max": 250}),
    ];
    points.extend(extra.iter().cloned());
    json!({
        "name": name, "protocol": "modbus_tcp", "host": "127.0.0.1", "port": plant, "unit": 1,
        "timeout_ms": 500,
        "groups": [{"name": "process", "interval_ms": 100}],
        "points": points,
    })
}

fn write(daemon: &Daemon, device: &str, command: Value) -> (u16, Value) {
    let r = daemon.post(
        &format!("/api/devices/{device}/write"),
        Some(COMMANDS),
        command.to_string().as_bytes(),
    );
    (
        r.status,
        serde_json::from_str(&r.body).unwrap_or(Value::Null),
    )
}

#[test]
fn a_device_is_changed_added_and_removed_while_the_other_keeps_its_connection_and_schedule() {
    let plant = free_port();
    let coolant = json!({"name": "coolant_temp", "register": 2, "type": "f32"});
    let mut config = json!({
        "connector": {"http": {"admin_token": ADMIN}},
        "commands": {"token": COMMANDS},
        "simulator": {"modbus": format!("127.0.0.1:{plant}")},
        "devices": [simulated("plant-1", plant, &[]), simulated("plant-2", plant, &[])],
    });
    let daemon = Daemon::start(config.clone());
    let device = |name: &str| named(&daemon.status(), "/devices", name).clone();
    let polls = |name: &str| u64_at(&device(name), "/polls_total");
    wait_until(Duration::from_secs(20), "both devices poll", || {
        polls("plant-1") > 0 && polls("plant-2") > 0
    });
    let connects = u64_at(&device("plant-1"), "/connects_total");
    as_running(&daemon, &mut config);
    // A command with an id before plant-2 restarts.
    let sent = json!({"id": "sp-1", "points": {"oven_setpoint": 150}});
    let (status, answer) = write(&daemon, "plant-2", sent.clone());
    assert_eq!(
        (status, answer["ok"].clone()),
        (200, json!(true)),
        "{answer}"
    );

    // A point added to plant-2: it restarts alone and reads the point.
    config["devices"][1] = simulated("plant-2", plant, std::slice::from_ref(&coolant));
    let body = apply(&daemon, &config);
    assert_eq!(
        body["changes"]["restart"],
        json!(["device/plant-2"]),
        "{body}"
    );
    let polls_1 = polls("plant-1");
    wait_until(
        Duration::from_secs(20),
        "plant-2 reads its new point",
        || {
            device("plant-2")["values"]
                .to_string()
                .contains("coolant_temp")
        },
    );
    assert!(!device("plant-1")["values"]
        .to_string()
        .contains("coolant_temp"));
    // The same command again is answered as the first one, not written twice; a new one
    // reaches the restarted device's task.
    let (_, again) = write(&daemon, "plant-2", sent);
    assert_eq!(again["ok"], json!(true), "{again}");
    let (_, next) = write(
        &daemon,
        "plant-2",
        json!({"points": {"oven_setpoint": 160}}),
    );
    assert_eq!(next["ok"], json!(true), "{next}");
    let commands = &device("plant-2")["commands"];
    assert_eq!(commands["duplicates"], json!(1), "{commands}");
    assert_eq!(commands["written"], json!(2), "{commands}");

    // plant-3 added, plant-2 removed.
    config["devices"] = json!([
        simulated("plant-1", plant, &[]),
        simulated("plant-3", plant, &[coolant])
    ]);
    let body = apply(&daemon, &config);
    assert_eq!(
        body["changes"]["start"],
        json!(["device/plant-3"]),
        "{body}"
    );
    assert_eq!(body["changes"]["stop"], json!(["device/plant-2"]), "{body}");
    wait_until(Duration::from_secs(20), "plant-3 polls", || {
        polls("plant-3") > 0
    });
    let names: Vec<Value> = daemon.status()["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| d["name"].clone())
        .collect();
    assert_eq!(names, [json!("plant-1"), json!("plant-3")]);
    let (status, gone) = write(
        &daemon,
        "plant-2",
        json!({"points": {"oven_setpoint": 170}}),
    );
    assert_eq!(status, 404, "{gone}");
    let (_, third) = write(
        &daemon,
        "plant-3",
        json!({"points": {"oven_setpoint": 170}}),
    );
    assert_eq!(third["ok"], json!(true), "{third}");

    // plant-1 was never touched: the same connection, its polls going on through it all.
    assert_eq!(u64_at(&device("plant-1"), "/connects_total"), connects);
    wait_until(Duration::from_secs(10), "plant-1 polls on", || {
        polls("plant-1") > polls_1 + 2
    });
    assert_eq!(u64_at(&device("plant-1"), "/connects_total"), connects);
    let metrics = daemon.get("/metrics", None).body;
    assert!(
        !metrics.contains("device=\"plant-2\""),
        "a removed device leaves /metrics"
    );
}

#[test]
fn commands_added_then_a_new_token_while_the_devices_poll() {
    let plant = free_port();
    let mut config = json!({
        "connector": {"http": {"admin_token": ADMIN}},
        "simulator": {"modbus": format!("127.0.0.1:{plant}")},
        "devices": [simulated("plant-1", plant, &[])],
    });
    let daemon = Daemon::start(config.clone());
    let polls = || {
        u64_at(
            named(&daemon.status(), "/devices", "plant-1"),
            "/polls_total",
        )
    };
    wait_until(Duration::from_secs(20), "the device polls", || polls() > 0);
    as_running(&daemon, &mut config);
    let setpoint = json!({"points": {"oven_setpoint": 120}});
    let (status, _) = write(&daemon, "plant-1", setpoint.clone());
    assert_eq!(status, 404, "no commands: the route is not there");

    // `commands:` added: the device restarts registered, and takes a write.
    config["commands"] = json!({"token": COMMANDS});
    let body = apply(&daemon, &config);
    assert_eq!(
        body["changes"]["restart"],
        json!(["commands", "device/plant-1"]),
        "{body}"
    );
    wait_until(
        Duration::from_secs(20),
        "the restarted device polls",
        || polls() > 0,
    );
    let (status, answer) = write(&daemon, "plant-1", setpoint.clone());
    assert_eq!(
        (status, answer["ok"].clone()),
        (200, json!(true)),
        "{answer}"
    );

    // A new token: the old one is refused from the next command, the device untouched.
    let connects = u64_at(
        named(&daemon.status(), "/devices", "plant-1"),
        "/connects_total",
    );
    config["commands"]["token"] = json!("other-commands-t0ken-0123");
    let body = apply(&daemon, &config);
    assert_eq!(body["changes"]["restart"], json!(["commands"]), "{body}");
    let (status, _) = write(&daemon, "plant-1", setpoint.clone());
    assert_eq!(status, 401);
    let r = daemon.post(
        "/api/devices/plant-1/write",
        Some("other-commands-t0ken-0123"),
        setpoint.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        u64_at(
            named(&daemon.status(), "/devices", "plant-1"),
            "/connects_total"
        ),
        connects
    );
}

#[test]
fn a_new_nats_command_subject_is_subscribed_in_the_place_of_the_old_one() {
    let nats = NatsServer::start();
    let js = Js::connect(&nats.url());
    let plant = free_port();
    let mut config = json!({
        "connector": {"http": {"admin_token": ADMIN}},
        "simulator": {"modbus": format!("127.0.0.1:{plant}")},
        "devices": [simulated("plant-1", plant, &[])],
        "nats": {"connections": [{"name": "bus", "servers": [nats.url()]}]},
        "commands": {"token": COMMANDS, "nats": {"connection": "bus"}},
    });
    let daemon = Daemon::start(config.clone());
    let path_up = || daemon.status()["commands"]["nats"]["connected"] == true;
    wait_until(Duration::from_secs(20), "the NATS path subscribed", path_up);
    let request = |subject: &str| {
        let body = json!({"points": {"oven_setpoint": 130}}).to_string();
        js.rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(10),
                js.client.request(subject.to_string(), body.into()),
            )
            .await
        })
    };
    as_running(&daemon, &mut config);
    config["commands"]["nats"]["subject"] = json!("plant.cmd.{device}");
    let body = apply(&daemon, &config);
    assert_eq!(body["changes"]["restart"], json!(["commands"]), "{body}");
    wait_until(
        Duration::from_secs(20),
        "the new subject subscribed",
        path_up,
    );
    let reply = request("plant.cmd.plant-1")
        .expect("a reply in time")
        .expect("a reply");
    let reply: Value = serde_json::from_slice(&reply.payload).expect("JSON");
    assert_eq!(reply["ok"], json!(true), "{reply}");
    assert!(
        !matches!(request("opex.cmd.plant-1"), Ok(Ok(_))),
        "the old subject is not answered any more"
    );
}

/// The topics `client` received records on.
fn topics(client: &MqttClient) -> Vec<String> {
    client.received().into_iter().map(|(t, _)| t).collect()
}

#[test]
fn a_sink_is_added_replaced_and_removed_while_the_others_keep_their_connections() {
    let mut broker = Mosquitto::start();
    let sub = MqttClient::connect(broker.port(), "it-watch", Some("#"));
    let mut config = json!({
        "connector": {
            "http": {"admin_token": ADMIN},
            "push_queue": {"enabled": true, "max_quota_mb": 16},
        },
        "ingest": {"sources": [{"name": SOURCE, "token": TOKEN}]},
        "mqtt": {"connections": [{"name": "plant", "url": broker.url(), "client_id": "it-gw"}]},
        "sinks": [{"name": "line", "type": "mqtt", "topic": "line/{{key}}", "qos": 1}],
        "flows": ingest_flow(&["push", "line"]),
    });
    let daemon = Daemon::start(config.clone());
    as_running(&daemon, &mut config);
    let connected = |name: &str| named(&daemon.status(), "/sinks", name)["connected"] == true;
    wait_until(Duration::from_secs(20), "the line sink connected", || {
        connected("line")
    });
    let sessions = |id: &str| {
        std::fs::read_to_string(broker.dir().join("mosquitto.log"))
            .unwrap_or_default()
            .matches(&format!(" as {id} ("))
            .count()
    };
    assert_eq!(daemon.ingest("a", "{\"v\": 1}").status, 200);

    // A second MQTT sink added: it connects and takes the next record; `line` is untouched.
    config["sinks"]
        .as_array_mut()
        .expect("sinks")
        .push(json!({"name": "cell", "type": "mqtt", "topic": "cell/{{key}}", "qos": 1}));
    config["flows"] = ingest_flow(&["push", "line", "cell"]);
    let body = apply(&daemon, &config);
    assert_eq!(body["changes"]["start"], json!(["sink/cell"]), "{body}");
    wait_until(Duration::from_secs(20), "the cell sink connected", || {
        connected("cell")
    });
    assert_eq!(daemon.ingest("b", "{\"v\": 2}").status, 200);
    wait_until(Duration::from_secs(20), "b on both topics", || {
        let t = topics(&sub);
        t.contains(&"line/b".to_string()) && t.contains(&"cell/b".to_string())
    });

    // `cell` changed (another topic): replaced alone, a new session; `line` keeps its one.
    config["sinks"][1]["topic"] = json!("cell2/{{key}}");
    let body = apply(&daemon, &config);
    assert_eq!(body["changes"]["restart"], json!(["sink/cell"]), "{body}");
    wait_until(
        Duration::from_secs(20),
        "the new cell sink connected",
        || connected("cell"),
    );
    assert_eq!(daemon.ingest("c", "{\"v\": 3}").status, 200);
    wait_until(Duration::from_secs(20), "c on the new topic", || {
        topics(&sub).contains(&"cell2/c".to_string())
    });
    assert!(!topics(&sub).contains(&"cell/c".to_string()));
    assert_eq!(sessions("it-gw-sink-line"), 1, "line connected once");
    // The old `cell` ended its session (a DISCONNECT) before the new one connected with its
    // client id: the broker saw no session taken over.
    let log = std::fs::read_to_string(broker.dir().join("mosquitto.log")).unwrap_or_default();
    assert!(
        log.contains("Client it-gw-sink-cell disconnected."),
        "{log}"
    );
    assert!(!log.contains("already connected"), "{log}");

    // `cell` removed: stopped; the next record goes to push and line only.
    config["sinks"].as_array_mut().expect("sinks").pop();
    config["flows"] = ingest_flow(&["push", "line"]);
    let body = apply(&daemon, &config);
    assert_eq!(body["changes"]["stop"], json!(["sink/cell"]), "{body}");
    let names: Vec<Value> = daemon.status()["sinks"]
        .as_array()
        .expect("sinks")
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert_eq!(names, [json!("push"), json!("line")]);
    assert_eq!(daemon.ingest("d", "{\"v\": 4}").status, 200);
    wait_until(Duration::from_secs(20), "d on line", || {
        topics(&sub).contains(&"line/d".to_string())
    });

    // `line` behind a disk queue (a new instance); with its broker away, the queue holds the
    // next record, and removing the sink is refused with the count until it is delivered.
    config["sinks"][0]["queue"] = json!("disk");
    let body = apply(&daemon, &config);
    assert_eq!(body["changes"]["restart"], json!(["sink/line"]), "{body}");
    broker.stop();
    assert_eq!(daemon.ingest("e", "{\"v\": 5}").status, 200);
    let mut removed = config.clone();
    removed["sinks"] = json!([]);
    removed["flows"] = ingest_flow(&["push"]);
    let reply = daemon.post("/api/config", Some(ADMIN), to_yaml(&removed).as_bytes());
    assert_eq!(reply.status, 409, "{}", reply.body);
    let refused = reply.json();
    assert_eq!(refused["not_live"], json!(["sink/line"]), "{refused}");
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(error.contains("sink/line (it holds 1 rows"), "{error}");
    assert_eq!(daemon.status()["config"]["revision"], json!(5));

    // With drain=1 it is removed from the routes and kept until its row is delivered.
    let reply = daemon.post(
        "/api/config?drain=1",
        Some(ADMIN),
        to_yaml(&removed).as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["changes"]["stop"], json!(["sink/line"]));
    let draining = || daemon.status()["config"]["draining"].clone();
    assert_eq!(draining(), json!([{"sink": "line", "rows": 1}]));
    assert!(
        named_opt(&daemon.status(), "line").is_none(),
        "out of the routes"
    );
    broker.restart();
    wait_until(
        Duration::from_secs(30),
        "e delivered from the queue",
        || topics(&sub).contains(&"line/e".to_string()),
    );
    wait_until(Duration::from_secs(30), "the drained sink stopped", || {
        draining() == json!([])
    });
    // The records the removed sinks took still count: the ledger balances.
    wait_until(
        Duration::from_secs(10),
        "the removed sinks' part kept",
        || ledger(&daemon, false)["parts"]["retired"]["ingest/orders"].is_object(),
    );
    assert_balanced(&ledger(&daemon, false), "after the sinks were removed");
}

/// The sink named `name` in `status`, if listed.
fn named_opt(status: &Value, name: &str) -> Option<Value> {
    status["sinks"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name)
        .cloned()
}

#[test]
fn the_push_uplink_moves_and_storage_changes_live_with_their_files_reopened() {
    let old_uplink = Receiver::start_down();
    let new_uplink = Receiver::start();
    let mut config = json!({
        "connector": {
            "http": {"admin_token": ADMIN},
            "push_queue": {"enabled": true, "max_quota_mb": 16, "on_full": "block"},
            "push": {"url": old_uplink.url(), "retry_initial_ms": 50, "retry_max_ms": 200},
        },
        "ingest": {"sources": [{"name": SOURCE, "token": TOKEN}]},
        "storage": {"max_quota_mb": 16},
        "flows": [{"id": "out", "nodes": [
            {"id": "in", "kind": "source", "source": format!("ingest/{SOURCE}")},
            {"id": "up", "kind": "sink", "sink": "push"},
            {"id": "keep", "kind": "sink", "sink": "storage"}],
            "wires": [{"from": "in", "to": "up"}, {"from": "in", "to": "keep"}]}],
    });
    let daemon = Daemon::start(config.clone());
    as_running(&daemon, &mut config);
    let mut ids = Vec::new();
    for k in ["a", "b", "c"] {
        let r = daemon.ingest(k, "{\"v\": 1}");
        assert_eq!(r.status, 200, "{}", r.body);
        ids.push(r.json()["id"].as_str().expect("id").to_string());
    }
    assert_eq!(
        u64_at(&daemon.status(), "/push_queue/rows"),
        3,
        "the old uplink is down"
    );

    // The uplink moves and the history's quota grows: both sinks stop, then open their files
    // again; the rows the queue held go to the new uplink.
    config["connector"]["push"]["url"] = json!(new_uplink.url());
    config["storage"]["max_quota_mb"] = json!(32);
    let body = apply(&daemon, &config);
    assert_eq!(
        body["changes"]["restart"],
        json!(["sink/push", "sink/storage"]),
        "{body}"
    );
    let r = daemon.ingest("d", "{\"v\": 2}");
    assert_eq!(r.status, 200, "{}", r.body);
    ids.push(r.json()["id"].as_str().expect("id").to_string());
    wait_until(
        Duration::from_secs(30),
        "every row at the new uplink",
        || new_uplink.has_all(&ids),
    );
    assert_eq!(
        events(&daemon, &format!("source=ingest/{SOURCE}")).len(),
        4,
        "the history kept what it had"
    );
    wait_until(Duration::from_secs(10), "the queue empty", || {
        u64_at(&daemon.status(), "/push_queue/rows") == 0
    });
    assert_balanced(&ledger(&daemon, true), "after the sinks were reopened");
}

#[test]
fn a_sink_whose_new_instance_cannot_start_is_put_back_as_it_was() {
    let broker = Mosquitto::start();
    let sub = MqttClient::connect(broker.port(), "it-watch", Some("#"));
    let mut config = json!({
        "connector": {"http": {"admin_token": ADMIN}},
        "ingest": {"sources": [{"name": SOURCE, "token": TOKEN}]},
        "mqtt": {"connections": [{"name": "plant", "url": broker.url(), "client_id": "it-gw"}]},
        "sinks": [{"name": "line", "type": "mqtt", "topic": "line/{{key}}", "qos": 1,
                   "queue": "disk"}],
        "flows": [{"id": "out", "nodes": [
            {"id": "in", "kind": "source", "source": format!("ingest/{SOURCE}")},
            {"id": "to-line", "kind": "sink", "sink": "line"}],
            "wires": [{"from": "in", "to": "to-line"}]}],
    });
    let daemon = Daemon::start(config.clone());
    as_running(&daemon, &mut config);
    // Its connection's CA file does not exist: the new instance cannot be built.
    config["mqtt"]["connections"][0]["tls"] = json!({"ca_file": "/nonexistent/ca.pem"});
    let reply = daemon.post("/api/config", Some(ADMIN), to_yaml(&config).as_bytes());
    assert_eq!(reply.status, 409, "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["failed"]["part"], json!("sink/line"), "{body}");
    assert_eq!(daemon.status()["config"]["revision"], json!(1));
    // The old instance is back, with its queue: the next record reaches the broker.
    assert_eq!(daemon.ingest("after", "{\"v\": 1}").status, 200);
    wait_until(
        Duration::from_secs(20),
        "the record on the old topic",
        || topics(&sub).contains(&"line/after".to_string()),
    );
}

#[test]
fn a_database_sink_moved_to_its_server_takes_the_rows_held_in_memory_and_a_removed_one_discards_on_request(
) {
    let mut pg = Postgres::start();
    pg.sql("CREATE TABLE events (ts timestamptz, source text, key text, payload jsonb)");
    // At first the sink names a port nothing listens on: the rows wait in its memory backlog.
    let nowhere = format!("postgres://postgres@127.0.0.1:{}/postgres", free_port());
    let mut config = json!({
        "connector": {"http": {"admin_token": ADMIN}},
        "telemetry": {"alerts": {"check_interval_secs": 1}},
        "ingest": {"sources": [{"name": SOURCE, "token": TOKEN}]},
        "postgres": {"url": nowhere, "sink_table": "events",
                     "sink_batch": {"sink_batch_rows": 1, "flush_interval_ms": 50}},
        "flows": ingest_flow(&["postgres"]),
    });
    let daemon = Daemon::start(config.clone());
    as_running(&daemon, &mut config);
    for k in ["a", "b", "c"] {
        assert_eq!(daemon.ingest(k, "{\"v\": 1}").status, 200);
    }
    let backlog = || u64_at(&daemon.status(), "/postgres/backlog_rows");
    assert_eq!(backlog(), 3, "the server is not there yet");

    // The address fixed: the new instance takes the three rows and inserts them.
    config["postgres"]["url"] = json!(pg.url());
    let body = apply(&daemon, &config);
    assert_eq!(
        body["changes"]["restart"],
        json!(["sink/postgres"]),
        "{body}"
    );
    wait_until(Duration::from_secs(30), "the held rows inserted", || {
        pg.sql("SELECT count(*) FROM events").trim() == "3"
    });
    let l = assert_balanced(&ledger(&daemon, false), "after the handover");
    let part = &l["parts"]["postgres"][format!("ingest/{SOURCE}")];
    assert_eq!(part["delivered"], json!(3), "{l}");
    assert_eq!(part["pending"], json!(0), "{l}");
    assert!(l["parts"]["retired"].is_null(), "the part went on: {l}");

    // The server gone for good: two rows held, and the sink removed.
    pg.stop();
    for k in ["d", "e"] {
        assert_eq!(daemon.ingest(k, "{\"v\": 1}").status, 200);
    }
    wait_until(Duration::from_secs(10), "two rows held", || backlog() == 2);
    // A disk queue in front would not go on from the rows held in memory: refused.
    let mut queued = config.clone();
    queued["postgres"]["queue"] = json!("disk");
    let refused = |text: &str, why: &str| {
        let reply = daemon.post("/api/config", Some(ADMIN), text.as_bytes());
        assert_eq!(reply.status, 409, "{}", reply.body);
        let error = reply.json()["error"].clone();
        let error = error.as_str().unwrap_or_default();
        assert!(
            error.contains("sink/postgres (it holds 2 rows") && error.contains(why),
            "{error}"
        );
    };
    refused(&to_yaml(&queued), "elsewhere");

    // With drain=1 the new instance (its disk queue) takes the next records and the old one
    // keeps the two rows, out of the routes, until its server takes them.
    let reply = daemon.post(
        "/api/config?drain=1",
        Some(ADMIN),
        to_yaml(&queued).as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["changes"]["restart"], json!(["sink/postgres"]));
    let draining = || daemon.status()["config"]["draining"].clone();
    assert_eq!(draining(), json!([{"sink": "postgres", "rows": 2}]));
    assert_eq!(daemon.ingest("f", "{\"v\": 1}").status, 200);
    assert_eq!(
        u64_at(&daemon.status(), "/postgres/queue/rows"),
        1,
        "f on disk"
    );

    // The sink removed: refused for the row its queue holds; drain and discard together a 400.
    let mut removed = queued.clone();
    removed.as_object_mut().expect("config").remove("postgres");
    removed["flows"] = json!([]);
    let text = to_yaml(&removed);
    let reply = daemon.post("/api/config", Some(ADMIN), text.as_bytes());
    assert_eq!(reply.status, 409, "{}", reply.body);
    assert!(reply.body.contains("it holds 1 rows"), "{}", reply.body);
    let both = daemon.post(
        "/api/config?drain=1&discard=1",
        Some(ADMIN),
        text.as_bytes(),
    );
    assert_eq!(both.status, 400, "{}", both.body);
    assert!(both.body.contains("exclude each other"), "{}", both.body);

    // With discard=1 it goes at once, and its row is counted lost as the operator said.
    let reply = daemon.post("/api/config?discard=1", Some(ADMIN), text.as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["changes"]["stop"], json!(["sink/postgres"]));
    let status = daemon.status();
    assert!(status["postgres"].is_null(), "removed: {status}");
    assert_eq!(status["engine"]["stats"]["discarded"], json!(1), "{status}");
    assert!(daemon.stderr().contains("sink=postgres rows=1"), "logged");
    wait_until(Duration::from_secs(20), "the discard alerted", || {
        daemon.status()["alerts"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["component"] == "engine.discarded"))
    });

    // The server back: the old instance delivers what it kept, then stops.
    pg.restart();
    wait_until(Duration::from_secs(60), "the drained rows inserted", || {
        pg.sql("SELECT count(*) FROM events").trim() == "5"
    });
    // Stopped: listed in `config.draining` until its part of the ledger is retired, so the
    // ledger read next has it retired.
    wait_until(Duration::from_secs(30), "the drained sink stopped", || {
        draining() == json!([])
    });
    let l = assert_balanced(&ledger(&daemon, false), "after the drain and the discard");
    let retired = &l["parts"]["retired"][format!("ingest/{SOURCE}")];
    assert_eq!(retired["losses"]["discarded"], json!(1), "{l}");
    assert_eq!(retired["delivered"], json!(5), "{l}");
    assert_eq!(retired["pending"], json!(0), "{l}");
}

#[test]
fn a_volatile_push_buffer_goes_with_its_rows_and_counters_to_the_moved_uplink() {
    let old_uplink = Receiver::start();
    let new_uplink = Receiver::start();
    let mut config = json!({
        "connector": {
            "http": {"admin_token": ADMIN},
            "push": {"url": old_uplink.url(), "retry_initial_ms": 50, "retry_max_ms": 200},
        },
        "ingest": {"sources": [{"name": SOURCE, "token": TOKEN}]},
        "flows": ingest_flow(&["push"]),
    });
    let daemon = Daemon::start(config.clone());
    as_running(&daemon, &mut config);
    // One row delivered by the old instance, two held while its uplink is down.
    let first = daemon.ingest("first", "{\"v\": 0}");
    assert_eq!(first.status, 200, "{}", first.body);
    let first = first.json()["id"].as_str().expect("id").to_string();
    wait_until(Duration::from_secs(30), "the first row delivered", || {
        old_uplink.has_all(std::slice::from_ref(&first))
    });
    wait_until(
        Duration::from_secs(10),
        "the first row counted sent",
        || u64_at(&daemon.status(), "/uplink/sent_total") == 1,
    );
    old_uplink.down();
    let mut ids = Vec::new();
    for k in ["a", "b"] {
        let r = daemon.ingest(k, "{\"v\": 1}");
        assert_eq!(r.status, 200, "{}", r.body);
        ids.push(r.json()["id"].as_str().expect("id").to_string());
    }
    config["connector"]["push"]["url"] = json!(new_uplink.url());
    let body = apply(&daemon, &config);
    assert_eq!(body["changes"]["restart"], json!(["sink/push"]), "{body}");
    wait_until(
        Duration::from_secs(30),
        "the rows held in memory at the new uplink",
        || new_uplink.has_all(&ids),
    );
    let l = assert_balanced(&ledger(&daemon, false), "after the handover");
    assert_eq!(
        l["parts"]["push_volatile"][format!("ingest/{SOURCE}")]["delivered"],
        json!(3),
        "{l}"
    );
    // The sink's own counters go on from the old instance's, as the ledger does.
    wait_until(Duration::from_secs(10), "the rows counted sent", || {
        u64_at(&daemon.status(), "/uplink/sent_total") == 3
    });
}
