//! Alerts reaching real channels: a webhook receiver and a `mosquitto` subscriber, first
//! through the library's hub (the 10-minute repeat by passing a later instant), then through
//! the real daemon with a `block` push queue that fills and drains.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use opex_connector::admission::level::REPEAT_FULL;
use opex_connector::alerts::{channels, Hub, Queue, QueueKind, QueueReading};
use opex_connector::shutdown::Shutdown;
use serde_json::{json, Value};

const TOPIC: &str = "opex/alerts/hall-2";

/// `mqtt.connections` with the one broker, and `telemetry.alerts` to `receiver` and the broker.
fn alert_sections(broker: &Mosquitto, receiver: &Receiver, client_id: &str) -> (Value, Value) {
    let mqtt = json!({
        "connections": [{"name": "plant", "url": broker.url(), "client_id": client_id,
                         "reconnect_max_ms": 200}],
    });
    let telemetry = json!({
        "alerts": {
            "check_interval_secs": 1,
            "webhook": {"url": receiver.url(), "token": "al3rt-t0ken",
                        "headers": {"X-Site": "hall-2"},
                        "retry_initial_ms": 50, "retry_max_ms": 200},
            "mqtt": {"topic": TOPIC},
        },
    });
    (mqtt, telemetry)
}

/// The alerts the subscriber received, as JSON.
fn published(subscriber: &MqttClient) -> Vec<Value> {
    subscriber
        .received()
        .iter()
        .filter(|(topic, _)| topic == TOPIC)
        .map(|(_, body)| serde_json::from_slice(body).expect("an alert is JSON"))
        .collect()
}

fn levels(alerts: &[Value]) -> Vec<(String, bool)> {
    alerts
        .iter()
        .map(|a| {
            (
                a["level"].as_str().unwrap_or("?").to_string(),
                a["repeat"] == true,
            )
        })
        .collect()
}

#[test]
fn hub_transitions_reach_a_webhook_receiver_and_a_mosquitto_subscriber_in_order() {
    let broker = Mosquitto::start();
    let subscriber = MqttClient::connect(broker.port(), "it-alert-sub", Some("opex/alerts/#"));
    let receiver = Receiver::start();
    let (mqtt, telemetry) = alert_sections(&broker, &receiver, "it-hub");
    let config = json!({"connector": {"name": "hall-2", "data_dir": "/unused"},
                        "mqtt": mqtt, "telemetry": telemetry});
    let config = opex_connector::config::from_yaml(&to_yaml(&config)).expect("valid config");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let shutdown = Shutdown::new();
    let (handles, workers) = channels::build(&config.alerts);
    let tasks = {
        let _in_runtime = rt.enter();
        workers.spawn(&shutdown)
    };
    let used = Arc::new(AtomicU64::new(10));
    let mut hub = Hub::new("hall-2", config.alerts.check_interval, handles);
    let u = Arc::clone(&used);
    hub.add_queue(Queue::new("push_queue", Arc::default(), move || {
        QueueReading {
            kind: QueueKind::Disk,
            on_full: "evict_oldest",
            quota: 1000,
            quota_unit: "bytes",
            used: u.load(Ordering::Relaxed),
            blocked_total: 0,
            evicted_total: 0,
            dropped_total: 0,
        }
    }));

    let t0 = Instant::now();
    assert!(hub.check(t0).is_empty());
    used.store(850, Ordering::Relaxed);
    hub.check(t0 + Duration::from_secs(5));
    used.store(1000, Ordering::Relaxed);
    hub.check(t0 + Duration::from_secs(10));
    assert!(hub.check(t0 + Duration::from_secs(15)).is_empty());
    hub.check(t0 + Duration::from_secs(10) + REPEAT_FULL);
    used.store(100, Ordering::Relaxed);
    hub.check(t0 + Duration::from_secs(15) + REPEAT_FULL);

    let want = vec![
        ("high".to_string(), false),
        ("full".to_string(), false),
        ("full".to_string(), true),
        ("ok".to_string(), false),
    ];
    wait_until(POLL_DEADLINE, "four alerts at the webhook receiver", || {
        receiver.records().len() >= 4
    });
    wait_until(POLL_DEADLINE, "four alerts at the subscriber", || {
        published(&subscriber).len() >= 4
    });
    let posted = receiver.records();
    assert_eq!(levels(&posted), want, "{posted:#?}");
    assert_eq!(levels(&published(&subscriber)), want);
    let full = &posted[1];
    assert_eq!(full["connector"], "hall-2");
    assert_eq!(full["queue"], "push_queue");
    assert_eq!(full["message"], "evicting the oldest records, data gap");
    assert_eq!(full["fill_pct"], 100.0);
    assert!(full["counters"].is_object());
    assert!(full["time"].as_str().unwrap().ends_with('Z'), "{full}");
    let request = &receiver.requests()[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.header("authorization"), Some("Bearer al3rt-t0ken"));
    assert_eq!(request.header("x-site"), Some("hall-2"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    // The receiver holds a record before its answer reaches the channel, which counts then.
    wait_until(
        POLL_DEADLINE,
        "the broker and the receiver acked the four alerts",
        || {
            let channels = hub.channels_json();
            channels[2]["sent_total"] == 4 && channels[1]["sent_total"] == 4
        },
    );
    let channels = hub.channels_json();
    assert_eq!(channels[1]["name"], "webhook");
    assert_eq!(channels[1]["sent_total"], 4);
    assert_eq!(channels[1]["failed_total"], 0);

    shutdown.trigger();
    rt.block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
    });
}

#[test]
fn webhook_alerts_are_retried_then_given_up_and_counted() {
    let receiver = Receiver::start();
    receiver.unavailable();
    let config = json!({"connector": {"data_dir": "/unused"},
                        "telemetry": {"alerts": {"webhook": {
                            "url": receiver.url(), "retries": 2,
                            "retry_initial_ms": 10, "retry_max_ms": 20}}}});
    let config = opex_connector::config::from_yaml(&to_yaml(&config)).expect("valid config");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let shutdown = Shutdown::new();
    let (handles, workers) = channels::build(&config.alerts);
    let _tasks = {
        let _in_runtime = rt.enter();
        workers.spawn(&shutdown)
    };
    let mut hub = Hub::new("c", Duration::from_secs(5), handles);
    hub.add_queue(Queue::new("q", Arc::default(), || QueueReading {
        kind: QueueKind::Memory,
        on_full: "block",
        quota: 10,
        quota_unit: "rows",
        used: 9,
        blocked_total: 0,
        evicted_total: 0,
        dropped_total: 0,
    }));
    assert_eq!(hub.check(Instant::now()).len(), 1);
    wait_until(POLL_DEADLINE, "the alert is given up", || {
        hub.channels_json()[1]["failed_total"] == 1
    });
    // The first attempt and two retries, then nothing more.
    assert_eq!(receiver.requests().len(), 3);
    let channel = &hub.channels_json()[1];
    assert_eq!(channel["sent_total"], 0);
    assert!(
        channel["last_error"].as_str().unwrap().contains("503"),
        "{channel}"
    );
    shutdown.trigger();
}

#[test]
fn a_block_queue_that_fills_raises_full_on_the_webhook_and_mqtt_and_ok_once_it_drained() {
    let broker = Mosquitto::start();
    let subscriber = MqttClient::connect(broker.port(), "it-alert-sub-2", Some("opex/alerts/#"));
    let alerts_receiver = Receiver::start();
    let uplink = Receiver::start_down();
    let (mqtt, telemetry) = alert_sections(&broker, &alerts_receiver, "it-daemon");
    let mut config = queue_config(1, "block");
    config["connector"]["name"] = json!("hall-2");
    config["connector"]["push"] = json!({
        "url": uplink.url(), "batch_rows": 500, "timeout_secs": 5,
        "retry_initial_ms": 50, "retry_max_ms": 300,
    });
    config["mqtt"] = mqtt;
    config["telemetry"] = telemetry;
    let daemon = Daemon::start(config);

    let (stored, _refused) = fill_until_refused(&daemon, "a");
    assert!(stored > 0);
    let is_full = |a: &Value| a["queue"] == "push_queue" && a["level"] == "full";
    wait_until(
        POLL_DEADLINE,
        "a full alert at the webhook receiver",
        || alerts_receiver.records().iter().any(is_full),
    );
    wait_until(POLL_DEADLINE, "a full alert at the subscriber", || {
        published(&subscriber).iter().any(is_full)
    });
    let full = alerts_receiver.records().into_iter().find(is_full).unwrap();
    assert_eq!(full["message"], "refusing new records");
    assert_eq!(full["connector"], "hall-2");
    assert!(u64_at(&full, "/counters/blocked_total") >= 1, "{full}");

    let status = daemon.status();
    let queue = named(&status, "/queues", "push_queue");
    assert_eq!(queue["kind"], "disk");
    assert_eq!(queue["on_full"], "block");
    assert_eq!(queue["quota_unit"], "bytes");
    assert_eq!(u64_at(queue, "/quota"), MIB);
    assert!(u64_at(queue, "/blocked_total") >= 1);
    for name in ["push_writer", "dead_letters", "push_dead_letters"] {
        let q = named(&status, "/queues", name);
        assert_eq!(q["level"], "ok", "{q}");
    }
    let open: Vec<&Value> = status["alerts"].as_array().unwrap().iter().collect();
    assert!(
        open.iter().any(|a| a["queue"] == "push_queue"),
        "open alerts: {open:?}"
    );
    let channels = status["alert_channels"].as_array().unwrap();
    let names: Vec<&str> = channels
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["log", "webhook", "mqtt"]);
    for c in channels {
        // No channel has had trouble: nothing to date.
        assert_eq!(c["last_error_at"], Value::Null, "{c}");
        assert_eq!(c["recovered_at"], Value::Null, "{c}");
    }
    let metrics = daemon.metrics();
    assert!(
        metrics.contains(
            "# HELP opex_connector_queue_level Alert level of each bounded queue: 0 ok, 1 high"
        ),
        "{metrics}"
    );
    assert!(metrics.contains("opex_connector_alert_channel_sent_total{channel=\"webhook\"}"));

    uplink.up();
    let is_ok = |a: &Value| a["queue"] == "push_queue" && a["level"] == "ok";
    wait_until(POLL_DEADLINE, "an ok alert at the webhook receiver", || {
        alerts_receiver.records().iter().any(is_ok)
    });
    wait_until(POLL_DEADLINE, "an ok alert at the subscriber", || {
        published(&subscriber).iter().any(is_ok)
    });
    wait_until(POLL_DEADLINE, "no open alert left", || {
        daemon.status()["alerts"]
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x["queue"] != "push_queue"))
    });
    let status = daemon.status();
    assert_eq!(named(&status, "/queues", "push_queue")["level"], "ok");
    let writer = named(&status, "/queues", "push_writer");
    assert_eq!(
        u64_at(writer, "/used"),
        0,
        "nothing waits for the writer: {writer}"
    );
    assert_eq!(u64_at(writer, "/quota"), 8192);
    assert!(
        daemon
            .stderr()
            .contains("alert: queue=push_queue level=full message=\"refusing new records\""),
        "the log line keeps its format"
    );
}

#[test]
fn hub_alerts_reach_a_nats_subscriber() {
    use futures_util::StreamExt;

    let server = NatsServer::start();
    let js = Js::connect(&server.url());
    let mut sub = js
        .rt
        .block_on(js.client.subscribe("opex.alerts.hall-2"))
        .expect("subscribe");
    js.rt.block_on(js.client.flush()).expect("flush");
    let config = json!({"connector": {"name": "hall-2", "data_dir": "/unused"},
                        "nats": {"connections": [{"name": "plant", "servers": [server.url()],
                                                  "reconnect_max_ms": 200}]},
                        "telemetry": {"alerts": {"nats": {"subject": "opex.alerts.hall-2"}}}});
    let config = opex_connector::config::from_yaml(&to_yaml(&config)).expect("valid config");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let shutdown = Shutdown::new();
    let (handles, workers) = channels::build(&config.alerts);
    let tasks = {
        let _in_runtime = rt.enter();
        workers.spawn(&shutdown)
    };
    let mut hub = Hub::new("hall-2", config.alerts.check_interval, handles);
    hub.add_queue(Queue::new("nats", Arc::default(), || QueueReading {
        kind: QueueKind::Channel,
        on_full: "block",
        quota: 4096,
        quota_unit: "messages",
        used: 4096,
        blocked_total: 7,
        evicted_total: 0,
        dropped_total: 0,
    }));
    assert_eq!(hub.check(Instant::now()).len(), 1);
    let message = js
        .rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(30), sub.next()).await })
        .expect("an alert within 30 s")
        .expect("the subscription is open");
    let alert: Value = serde_json::from_slice(&message.payload).expect("JSON");
    assert_eq!(alert["queue"], "nats");
    assert_eq!(alert["level"], "full");
    assert_eq!(alert["message"], "refusing new records");
    assert_eq!(alert["counters"]["blocked_total"], 7);
    wait_until(POLL_DEADLINE, "the channel counts it sent", || {
        hub.channels_json()[1]["sent_total"] == 1
    });
    shutdown.trigger();
    rt.block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
    });
}
