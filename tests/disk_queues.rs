//! `queue: disk` in front of a database and a broker: records are acknowledged once the queue
//! committed them, survive kill -9 while their destination is down, and arrive once it is
//! back; a full `block` queue refuses in the source's own protocol. Real ClickHouse and
//! mosquitto, each started by the test.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

fn mqtt_keys(client: &MqttClient) -> BTreeSet<String> {
    client
        .received()
        .iter()
        .filter_map(|(_, p)| serde_json::from_slice::<Value>(p).ok())
        .filter_map(|v| v["key"].as_str().map(str::to_string))
        .collect()
}

fn ch_keys(ch: &ClickHouse) -> BTreeSet<String> {
    ch.sql("SELECT key FROM events FORMAT TabSeparated")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn disk_queues_keep_every_acked_record_through_kill_nine_while_the_database_and_broker_are_down() {
    let mut ch = ClickHouse::start();
    ch.sql("CREATE TABLE events (ts UInt64, source String, key String, payload String) ENGINE = MergeTree ORDER BY ts");
    let mut broker = Mosquitto::start();
    let subscriber = MqttClient::connect(broker.port(), "it-dq-sub", Some("dq/#"));

    let mut config = queue_config(64, "evict_oldest");
    config["mqtt"] = json!({"connections": [
        {"name": "b", "url": broker.url(), "client_id": "it-dq", "reconnect_max_ms": 200},
    ]});
    config["sinks"] = json!([
        {"name": "ch", "type": "clickhouse", "url": ch.url(), "password": CH_PASSWORD,
         "sink_table": "events", "queue": "disk", "max_quota_mb": 64, "on_full": "block",
         "sink_batch": {"sink_batch_rows": 50}},
        {"name": "mq", "type": "mqtt", "topic": "dq/{{key}}", "qos": 1,
         "queue": "disk", "max_quota_mb": 64, "on_full": "block"},
    ]);
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["flows"] = ingest_flow(&["ch", "mq"]);
    let mut daemon = Daemon::start(config);
    assert_stored(&daemon.ingest("first", r#"{"v":0}"#), "first");
    wait_until(POLL_DEADLINE, "the first record reaches both", || {
        ch_keys(&ch).contains("first") && mqtt_keys(&subscriber).contains("first")
    });

    // Both destinations go away; records keep being acknowledged: the queues hold them.
    ch.kill9();
    broker.stop();
    wait_until(POLL_DEADLINE, "the sink sees the broker down", || {
        named(&daemon.status(), "/sinks", "mq")["connected"] == false
    });
    let acked: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let base = daemon.base();
    let stream = {
        let acked = Arc::clone(&acked);
        thread::spawn(move || {
            let client: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(5)))
                .build()
                .into();
            for i in 0.. {
                let key = format!("k{i}");
                let reply = client
                    .post(format!("{base}/api/ingest/{SOURCE}/{key}"))
                    .header("Authorization", format!("Bearer {TOKEN}"))
                    .send(r#"{"v":1}"#);
                match reply {
                    Ok(r) if r.status() == 200 => {
                        acked.lock().unwrap().insert(key);
                    }
                    Ok(r) => panic!(
                        "ingest {key}: HTTP {} while the queues have room",
                        r.status()
                    ),
                    // The connector was killed: the stream ends.
                    Err(_) => return,
                }
            }
        })
    };
    wait_until(
        POLL_DEADLINE,
        "a few hundred records are acknowledged",
        || acked.lock().unwrap().len() >= 300,
    );
    daemon.kill9();
    stream.join().expect("the stream thread");
    let acked = acked.lock().unwrap().clone();

    // Restarted while both are still down, then both come back: every acked record arrives.
    daemon.restart();
    let status = daemon.status();
    let rows = |name: &str| {
        named(&status, "/sinks", name)["queue_rows"]
            .as_u64()
            .unwrap()
    };
    assert!(rows("ch") >= acked.len() as u64, "{status:#}");
    assert!(rows("mq") >= acked.len() as u64, "{status:#}");
    ch.restart();
    broker.restart();
    let back = std::time::Instant::now();
    wait_until(
        Duration::from_secs(120),
        "every acked record reached both",
        || ch_keys(&ch).is_superset(&acked) && mqtt_keys(&subscriber).is_superset(&acked),
    );
    eprintln!(
        "disk queues: {} records acknowledged while ClickHouse and mosquitto were down, kill -9, restart: every one in both {:.2} s after they were back",
        acked.len(),
        back.elapsed().as_secs_f64()
    );
    wait_until(POLL_DEADLINE, "both queues drain", || {
        let s = daemon.status();
        named(&s, "/sinks", "ch")["queue_rows"] == 0 && named(&s, "/sinks", "mq")["queue_rows"] == 0
    });
    let l = assert_balanced(&ledger(&daemon, true), "after the outage and the kill");
    for name in ["ch", "mq"] {
        assert_eq!(l["queue_checks"][name]["agrees"], true, "{l:#}");
        assert_eq!(l["sinks"][name]["imbalance"], 0, "{l:#}");
    }
    assert_eq!(
        source_figure(&l, &format!("ingest/{SOURCE}"), "/lost"),
        0,
        "{l:#}"
    );
}

#[test]
fn a_full_block_disk_queue_in_front_of_a_stopped_broker_refuses_sources_with_retry() {
    let mut broker = Mosquitto::start();
    let mut config = queue_config(64, "evict_oldest");
    config["mqtt"] = json!({"connections": [
        {"name": "b", "url": broker.url(), "client_id": "it-dq-full", "reconnect_max_ms": 200},
    ]});
    config["sinks"] = json!([
        {"name": "mq", "type": "mqtt", "topic": "dq/{{key}}", "qos": 1,
         "queue": "disk", "max_quota_mb": 1, "on_full": "block"},
    ]);
    config["flows"] = ingest_flow(&["mq"]);
    let daemon = Daemon::start(config);
    broker.stop();
    wait_until(POLL_DEADLINE, "the sink sees the broker down", || {
        named(&daemon.status(), "/sinks", "mq")["connected"] == false
    });
    let (stored, reply) = fill_until_refused(&daemon, "f");
    assert!(stored > 100, "only {stored} records of 1 KB fit in 1 MiB");
    assert_retry(&reply, "mq", "the full disk queue");
    let status = daemon.status();
    let q = &status["sink_status"]["mq"]["queue"];
    assert_eq!(q["on_full"], "block", "{status:#}");
    assert!(q["blocked_total"].as_u64().unwrap() >= 1, "{status:#}");
    assert_eq!(
        named(&status, "/queues", "mq")["level"],
        "full",
        "{status:#}"
    );
    let l = assert_balanced(&ledger(&daemon, false), "at the full queue");
    assert_eq!(
        source_figure(&l, &format!("ingest/{SOURCE}"), "/lost"),
        0,
        "{l:#}"
    );
}
