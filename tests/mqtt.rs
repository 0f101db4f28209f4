//! MQTT source and `mqtt` sink against a real `mosquitto` per test.

mod common;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use opex_connector::shutdown::Shutdown;
use opex_connector::sources::mqtt::config::{MqttConfig, RawMqtt};
use opex_connector::sources::mqtt::MqttSource;
use serde_json::{json, Value};

fn mqtt_config(broker: &Mosquitto, client_id: &str) -> Value {
    json!({
        "connections": [{"name": "plant", "url": broker.url(), "client_id": client_id,
                         "reconnect_max_ms": 200}],
        "sources": [{"name": "sensors", "subscriptions": [{"topic": "plant/#", "qos": 1}]}],
    })
}

#[test]
fn qos1_mqtt_messages_arrive_in_the_push_queue() {
    let broker = Mosquitto::start();
    let mut config = queue_config(64, "evict_oldest");
    config["mqtt"] = mqtt_config(&broker, "it-in");
    let daemon = Daemon::start(config);
    wait_until(POLL_DEADLINE, "the source is connected", || {
        named(&daemon.status(), "/sources", "mqtt/sensors")["connected"] == true
    });
    // Give the subscription a moment to be registered: poll by publishing a probe.
    let publisher = MqttClient::connect(broker.port(), "it-pub", None);
    wait_until(POLL_DEADLINE, "the subscription takes messages", || {
        publisher.publish("plant/probe", br#"{"probe":true}"#);
        u64_at(
            named(&daemon.status(), "/sources", "mqtt/sensors"),
            "/received",
        ) > 0
    });
    let before = u64_at(&daemon.status(), "/push_queue/rows");
    for i in 0..20 {
        publisher.publish("plant/press-1/temp", format!(r#"{{"n":{i}}}"#).as_bytes());
    }
    publisher.publish("plant/press-1/raw", b"21.5 C");
    wait_until(POLL_DEADLINE, "21 more records are stored", || {
        u64_at(&daemon.status(), "/push_queue/rows") >= before + 21
    });
    let s = named(&daemon.status(), "/sources", "mqtt/sensors").clone();
    assert_eq!(u64_at(&s, "/refused") + u64_at(&s, "/dropped"), 0, "{s}");
    assert!(u64_at(&s, "/not_json") >= 1, "{s}");
    assert_eq!(s["acked_on_receipt"], true);
    assert!(s["note"].as_str().unwrap().contains("NATS JetStream"));
}

#[test]
fn a_full_subscription_buffer_drops_its_oldest_message_and_counts_it() {
    let broker = Mosquitto::start();
    let raw: RawMqtt = serde_json::from_value(mqtt_config(&broker, "it-overflow")).unwrap();
    let mut problems = opex_connector::config::Problems::default();
    let cfg = MqttConfig::validate(Some(&raw), "mqtt", &mut problems);
    assert!(problems.is_empty(), "{problems}");
    let source = Arc::new(MqttSource::new(cfg.sources[0].clone()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let shutdown = Shutdown::new();
    // Nothing offers: the pipeline is stalled, so every message stays in the buffer.
    let task = rt.spawn({
        let source = source.clone();
        let shutdown = shutdown.clone();
        async move { source.receive_only(shutdown).await }
    });
    wait_until(POLL_DEADLINE, "the source is connected", || {
        source.stats.connected.load(Ordering::Relaxed)
    });
    let publisher = MqttClient::connect(broker.port(), "it-pub-overflow", None);
    wait_until(POLL_DEADLINE, "the subscription takes messages", || {
        publisher.publish("plant/probe", b"{}");
        source.stats.received.load(Ordering::Relaxed) > 0
    });
    let first = source.stats.received.load(Ordering::Relaxed);
    for i in 0..1100u64 {
        publisher.publish("plant/line/count", format!("{i}").as_bytes());
    }
    // (A probe may have been sent twice before the first one arrived.)
    wait_until(POLL_DEADLINE, "every message is received", || {
        source.stats.received.load(Ordering::Relaxed) >= first + 1100
    });
    let s = &source.stats;
    wait_until(POLL_DEADLINE, "all beyond 1024 dropped and counted", || {
        s.buffered.load(Ordering::Relaxed) == 1024
            && s.dropped.load(Ordering::Relaxed) + 1024 == s.received.load(Ordering::Relaxed)
    });
    assert_eq!(s.ack_errors.load(Ordering::Relaxed), 0);
    shutdown.trigger();
    rt.block_on(task).unwrap();
}

#[test]
fn an_mqtt_qos1_record_is_acked_to_its_source_only_after_the_broker_acknowledged_it() {
    let mut broker = Mosquitto::start();
    let subscriber = MqttClient::connect(broker.port(), "it-sub", Some("opex/#"));
    let mut config = queue_config(64, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["mqtt"] = json!({
        "connections": [{"name": "plant", "url": broker.url(), "client_id": "it-sink",
                         "reconnect_max_ms": 200}],
        "sink": {"topic": "opex/{{key}}", "qos": 1, "ack_timeout_secs": 5},
    });
    config["flows"] = ingest_flow(&["mqtt"]);
    let daemon = Daemon::start(config);
    let sink = |d: &Daemon| named(&d.status(), "/sinks", "mqtt").clone();
    wait_until(POLL_DEADLINE, "the sink is connected", || {
        sink(&daemon)["connected"] == true
    });
    let mut accepted: HashSet<String> = HashSet::new();
    for i in 0..10 {
        accepted.insert(assert_stored(
            &daemon.ingest(&format!("k{i}"), r#"{"v":1}"#),
            "confirmed",
        ));
    }
    // Each 200 came after its PUBACK.
    assert!(u64_at(&sink(&daemon), "/acked") >= 10, "{}", sink(&daemon));
    let delivered = |sub: &MqttClient| -> HashSet<String> {
        sub.received()
            .iter()
            .filter_map(|(_, p)| serde_json::from_slice::<Value>(p).ok())
            .filter_map(|v| v["id"].as_str().map(str::to_string))
            .collect()
    };
    wait_until(POLL_DEADLINE, "the subscriber gets the first 10", || {
        delivered(&subscriber).is_superset(&accepted)
    });

    broker.stop();
    wait_until(POLL_DEADLINE, "the sink sees the broker down", || {
        sink(&daemon)["connected"] == false
    });
    // Nothing can confirm a record now: every source is told to retry, before any node runs.
    for i in 0..5 {
        assert_retry(
            &daemon.ingest(&format!("d{i}"), r#"{"v":2}"#),
            "mqtt",
            "broker down",
        );
    }
    assert!(u64_at(&sink(&daemon), "/blocked") >= 5, "{}", sink(&daemon));

    // A source that keeps retrying gets its 200 only once the broker is back and acked it.
    let blocked_before = u64_at(&sink(&daemon), "/blocked");
    let back = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let retrier = {
        let back = Arc::clone(&back);
        let base = daemon.base();
        std::thread::spawn(move || {
            let client: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build()
                .into();
            loop {
                let mut r = client
                    .post(format!("{base}/api/ingest/{SOURCE}/late"))
                    .header("Authorization", format!("Bearer {TOKEN}"))
                    .send(r#"{"v":3}"#)
                    .expect("ingest");
                if r.status() == 200 {
                    assert!(
                        back.load(Ordering::SeqCst),
                        "acknowledged while the broker was down"
                    );
                    let text = r.body_mut().read_to_string().expect("body");
                    let v: Value = serde_json::from_str(&text).expect("json");
                    return v["id"].as_str().unwrap().to_string();
                }
                assert_eq!(r.status(), 503);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    wait_until(
        POLL_DEADLINE,
        "the retrying source was refused a few times",
        || u64_at(&sink(&daemon), "/blocked") >= blocked_before + 3,
    );
    back.store(true, Ordering::SeqCst);
    let restarted = Instant::now();
    broker.restart();
    let late = retrier.join().expect("the retrying source");
    accepted.insert(late);
    measure_recovery("mosquitto (sink)", restarted, RECOVERY_BOUND, || {
        delivered(&subscriber).is_superset(&accepted)
    });
    assert_stored(&daemon.ingest("after", r#"{"v":3}"#), "accepted again");
    // The ledger balances: what the sink refused is refused, not lost, and every acked record
    // counts as delivered.
    let l = assert_balanced(&ledger(&daemon, true), "after the mosquitto outage");
    let source = format!("ingest/{SOURCE}");
    assert_eq!(
        source_figure(&l, &source, "/acked"),
        accepted.len() as u64 + 1,
        "{l:#}"
    );
    assert_eq!(source_figure(&l, &source, "/lost"), 0, "{l:#}");
    assert!(source_figure(&l, &source, "/refused") >= 5, "{l:#}");
}

#[test]
fn a_key_that_would_add_topic_levels_or_wildcards_is_dead_lettered_with_the_reason_not_published() {
    let broker = Mosquitto::start();
    let subscriber = MqttClient::connect(broker.port(), "it-sub-confine", Some("#"));
    let mut config = queue_config(64, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["mqtt"] = json!({
        "connections": [{"name": "plant", "url": broker.url(), "client_id": "it-confine",
                         "reconnect_max_ms": 200}],
        "sink": {"topic": "opex/{{source}}/{{key}}", "qos": 1},
    });
    config["flows"] = ingest_flow(&["mqtt"]);
    let daemon = Daemon::start(config);
    wait_until(POLL_DEADLINE, "the sink is connected", || {
        named(&daemon.status(), "/sinks", "mqtt")["connected"] == true
    });
    // `{{source}}` keeps its own `/`; the caller's key is the one confined.
    assert_stored(&daemon.ingest("plain", r#"{"v":1}"#), "a plain key");
    for key in ["a%2Fb", "x%2B", "all%23"] {
        let reply = daemon.ingest(key, r#"{"v":2}"#);
        assert_eq!(reply.status, 200, "{key}: {reply:?}");
        let body = reply.json();
        assert_eq!(body["result"], "dead_lettered", "{key}: {body}");
        let entry = dead_letter(&daemon, body["dead_letter_id"].as_u64().unwrap());
        let reason = entry["reason"].as_str().unwrap();
        assert!(
            reason.contains("template field key") && reason.contains("MQTT"),
            "{key}: {reason}"
        );
    }
    wait_until(POLL_DEADLINE, "the plain record arrives", || {
        !subscriber.received().is_empty()
    });
    let topics: Vec<String> = subscriber.received().into_iter().map(|(t, _)| t).collect();
    assert_eq!(topics, vec![format!("opex/ingest/{SOURCE}/plain")]);
    let l = assert_balanced(&ledger(&daemon, false), "after the refused keys");
    assert_eq!(
        source_figure(&l, &format!("ingest/{SOURCE}"), "/dead_lettered"),
        3,
        "{l:#}"
    );
}

/// The payload of a record whose PUBLISH is just over the client's 1 MiB packet cap: the
/// record's line adds its id, source, key and time to the payload, the packet its topic.
fn just_over_the_packet_cap(key: &str) -> String {
    padded_payload(key, MIB as usize - 32)
}

/// The keys of the records `client` received (the sink publishes each record's line).
fn received_keys(client: &MqttClient) -> HashSet<String> {
    client
        .received()
        .iter()
        .filter_map(|(_, p)| serde_json::from_slice::<Value>(p).ok())
        .filter_map(|v| v["key"].as_str().map(str::to_string))
        .collect()
}

/// A QoS 1 publish over the client's packet cap used to be stored by rumqttc, fail to encode,
/// drop the connection and be sent first again after every reconnect (the session is kept):
/// the sink never came back and its `queue: disk` only grew.
#[test]
fn a_record_over_the_mqtt_packet_cap_is_dead_lettered_and_the_twenty_behind_it_arrive() {
    let broker = Mosquitto::start();
    let subscriber = MqttClient::connect(broker.port(), "it-big-sub", Some("big/#"));
    let mut config = queue_config(64, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["mqtt"] = json!({"connections": [
        {"name": "b", "url": broker.url(), "client_id": "it-big", "reconnect_max_ms": 200},
    ]});
    config["sinks"] = json!([
        {"name": "mq", "type": "mqtt", "topic": "big/{{key}}", "qos": 1,
         "queue": "disk", "max_quota_mb": 64, "on_full": "block"},
    ]);
    config["flows"] = ingest_flow(&["mq"]);
    let daemon = Daemon::start(config);
    let sink = |d: &Daemon| named(&d.status(), "/sinks", "mq").clone();
    wait_until(POLL_DEADLINE, "the sink is connected", || {
        sink(&daemon)["connected"] == true
    });
    let big = assert_stored(
        &daemon.ingest("big", &just_over_the_packet_cap("big")),
        "the big record is queued",
    );
    let small: HashSet<String> = (0..20).map(|i| format!("s{i}")).collect();
    for key in &small {
        assert_stored(&daemon.ingest(key, r#"{"v":1}"#), key);
    }
    wait_until(
        Duration::from_secs(20),
        "the 20 small records behind the big one arrive",
        || received_keys(&subscriber).is_superset(&small),
    );
    // The queue deletes a confirmed batch's rows in a commit after the broker's acks, so
    // the empty queue is waited for, not read once.
    wait_until(
        POLL_DEADLINE,
        "the big record is a dead letter and the queue empty",
        || {
            let s = sink(&daemon);
            u64_at(&s, "/dead_letter_rows") == 1 && u64_at(&s, "/queue_rows") == 0
        },
    );
    let reply = daemon.get("/api/sinks/mq/dead-letters?limit=10", Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "{reply:?}");
    let letters = reply.json();
    let letter = &letters["rows"][0];
    assert_eq!(letter["record"]["id"], json!(big), "{letters:#}");
    let reason = letter["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("too large") && reason.contains("1048576"),
        "{reason}"
    );
    assert!(!received_keys(&subscriber).contains("big"));
    let s = sink(&daemon);
    assert_eq!(s["connected"], true, "{s}");
    assert_eq!(u64_at(&s, "/too_large"), 1, "{s}");
    assert_eq!(u64_at(&s, "/queue_rows"), 0, "{s}");
    let l = assert_balanced(&ledger(&daemon, true), "after the big record");
    let source = format!("ingest/{SOURCE}");
    assert_eq!(source_figure(&l, &source, "/dead_lettered"), 1, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/lost"), 0, "{l:#}");
}

/// Without `queue: disk` the same publish took the sink's connection down for good: every
/// record after it was refused at admission (the broker "not connected").
#[test]
fn a_record_over_the_mqtt_packet_cap_goes_to_the_dead_letters_and_the_memory_queued_sink_stays_connected(
) {
    let broker = Mosquitto::start();
    let subscriber = MqttClient::connect(broker.port(), "it-big-mem-sub", Some("bigm/#"));
    let mut config = queue_config(64, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["mqtt"] = json!({
        "connections": [{"name": "plant", "url": broker.url(), "client_id": "it-big-mem",
                         "reconnect_max_ms": 200}],
        "sink": {"topic": "bigm/{{key}}", "qos": 1, "ack_timeout_secs": 5},
    });
    config["flows"] = ingest_flow(&["mqtt"]);
    let daemon = Daemon::start(config);
    let sink = |d: &Daemon| named(&d.status(), "/sinks", "mqtt").clone();
    wait_until(POLL_DEADLINE, "the sink is connected", || {
        sink(&daemon)["connected"] == true
    });
    let reply = daemon.ingest("big", &just_over_the_packet_cap("big"));
    assert_eq!(reply.status, 200, "{reply:?}");
    let body = reply.json();
    assert_eq!(body["result"], "dead_lettered", "{body}");
    let entry = dead_letter(&daemon, u64_at(&body, "/dead_letter_id"));
    let reason = entry["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("too large") && reason.contains("1048576"),
        "{reason}"
    );
    let small: HashSet<String> = (0..20).map(|i| format!("m{i}")).collect();
    for key in &small {
        assert_stored(&daemon.ingest(key, r#"{"v":1}"#), key);
    }
    wait_until(POLL_DEADLINE, "the 20 small records arrive", || {
        received_keys(&subscriber).is_superset(&small)
    });
    let s = sink(&daemon);
    assert_eq!(s["connected"], true, "{s}");
    assert_eq!(u64_at(&s, "/too_large"), 1, "{s}");
}
