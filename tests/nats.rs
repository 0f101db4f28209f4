//! NATS JetStream source and `nats` sink against a real `nats-server -js` per test; and a
//! self-test of the harness's three-node JetStream cluster.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn nats_source_status(daemon: &Daemon, name: &str) -> Value {
    named(&daemon.status(), "/sources", &format!("nats/{name}")).clone()
}

fn sink_status(daemon: &Daemon, name: &str) -> Value {
    named(&daemon.status(), "/sinks", name).clone()
}

fn ids(stream: &str, last: u64) -> Vec<String> {
    (1..=last).map(|s| format!("nats-{stream}-{s}")).collect()
}

#[test]
fn jetstream_messages_are_nakd_while_the_queue_blocks_redelivered_later_each_time_and_all_arrive_once_it_drains(
) {
    let server = NatsServer::start();
    let js = Js::connect(&server.url());
    js.create_stream("ORDERS", &["orders.>"]);
    const N: u64 = 30;
    for i in 0..N {
        // ~60 KB each: about 17 fit in the 1 MiB quota.
        let body = json!({"n": i, "pad": "x".repeat(60_000)});
        js.publish("orders.new", serde_json::to_vec(&body).unwrap());
    }
    let receiver = Receiver::start();
    receiver.unavailable();
    let mut config = queue_config(1, "block");
    config["connector"]["push"] =
        json!({"url": receiver.url(), "retry_initial_ms": 50, "retry_max_ms": 200});
    config["nats"] = json!({
        "connections": [{"name": "js", "servers": [server.url()]}],
        "sources": [{"name": "orders", "stream": "ORDERS",
                     "nak_backoff_initial_ms": 200, "nak_backoff_max_ms": 1600}],
    });
    let daemon = Daemon::start(config);
    wait_until(POLL_DEADLINE, "the source consumes", || {
        nats_source_status(&daemon, "orders")["consuming"] == true
    });

    // Blocked: refusals are nak'd, and JetStream's own ack count never passes what is stored.
    let mut checks = 0;
    wait_until(
        Duration::from_secs(30),
        "redeliveries reach the longest backoff",
        || {
            // JetStream's count first, then what is stored: rows only grow, so an ack seen
            // before the status was read must be among the rows the status counts.
            let (pending, ack_pending, _) = js.consumer("ORDERS", "opex-orders");
            let acked_by_jetstream = N - pending - ack_pending;
            let st = daemon.status();
            let stored = u64_at(&st, "/push_queue/rows") + u64_at(&st, "/uplink/sent_total");
            assert!(
                acked_by_jetstream <= stored,
                "JetStream holds {acked_by_jetstream} acks but only {stored} records are stored"
            );
            checks += 1;
            let src = named(&st, "/sources", "nats/orders");
            u64_at(src, "/max_delivered") >= 4 && u64_at(src, "/last_nak_delay_ms") == 1600
        },
    );
    assert!(checks > 1);
    let src = nats_source_status(&daemon, "orders");
    assert!(u64_at(&src, "/refused") > 0, "{src}");
    assert_eq!(
        u64_at(&src, "/acked"),
        u64_at(&daemon.status(), "/push_queue/rows")
    );
    assert!(u64_at(&daemon.status(), "/push_queue/blocked_total") > 0);

    // The queue drains: every message arrives, and JetStream has nothing left to deliver.
    receiver.up();
    let want = ids("ORDERS", N);
    wait_until(
        POLL_DEADLINE,
        "every JetStream message reaches the uplink",
        || receiver.has_all(&want),
    );
    wait_until(POLL_DEADLINE, "the consumer has nothing pending", || {
        let (pending, ack_pending, floor) = js.consumer("ORDERS", "opex-orders");
        pending == 0 && ack_pending == 0 && floor == N
    });
}

#[test]
fn a_killed_nats_server_loses_no_acked_message_and_the_consumer_resumes() {
    let mut server = NatsServer::start();
    let js = Js::connect(&server.url());
    js.create_stream("EVENTS", &["events.>"]);
    let receiver = Receiver::start();
    let mut config = queue_config(64, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["connector"]["push"] = json!({"url": receiver.url(), "retry_initial_ms": 50});
    config["nats"] = json!({
        "connections": [{"name": "js", "servers": [server.url()], "reconnect_max_ms": 200}],
        "sources": [{"name": "events", "stream": "EVENTS", "durable": "edge", "ack_wait_secs": 2,
                     "nak_backoff_initial_ms": 100, "nak_backoff_max_ms": 400}],
    });
    let daemon = Daemon::start(config);

    // A publisher keeps going through the outage (each publish retried until acked).
    let stop = Arc::new(AtomicBool::new(false));
    let url = server.url();
    let publisher = {
        let stop = stop.clone();
        thread::spawn(move || {
            let js = Js::connect(&url);
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) && n < 2000 {
                js.publish("events.tick", serde_json::to_vec(&json!({"n": n})).unwrap());
                n += 1;
                thread::sleep(Duration::from_millis(2));
            }
            n
        })
    };
    wait_until(POLL_DEADLINE, "some messages are acked", || {
        u64_at(&nats_source_status(&daemon, "events"), "/acked") >= 50
    });
    server.kill9();
    wait_until(POLL_DEADLINE, "the uplink has what was acked", || {
        receiver.unique_ids().len() as u64
            >= u64_at(&nats_source_status(&daemon, "events"), "/acked").min(50)
    });
    thread::sleep(Duration::from_millis(300)); // an outage, not a blip
    let acked_before = u64_at(&nats_source_status(&daemon, "events"), "/acked");
    server.restart();
    measure_recovery(
        "nats-server (source)",
        Instant::now(),
        RECOVERY_BOUND,
        || u64_at(&nats_source_status(&daemon, "events"), "/acked") > acked_before,
    );
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    let published = publisher.join().expect("publisher");
    assert!(published > 50, "published {published}");

    // And after the restart: the consumer resumes with new messages too.
    let js = Js::connect(&server.url());
    for n in 0..50 {
        js.publish(
            "events.after",
            serde_json::to_vec(&json!({"after": n})).unwrap(),
        );
    }
    let (messages, last) = js.stream_state("EVENTS");
    assert!(
        messages >= published + 50,
        "stream has {messages} of {published} + 50"
    );
    let want = ids("EVENTS", last);
    wait_until(
        POLL_DEADLINE,
        "every stream message reaches the uplink",
        || receiver.has_all(&want),
    );
    wait_until(POLL_DEADLINE, "the consumer resumed to the end", || {
        let (pending, ack_pending, floor) = js.consumer("EVENTS", "edge");
        pending == 0 && ack_pending == 0 && floor == last
    });
    let src = nats_source_status(&daemon, "events");
    assert_eq!(src["consuming"], true, "{src}");
    // The ledger balances once the queue has drained: every acked message delivered, none lost.
    wait_until(POLL_DEADLINE, "the push queue drained", || {
        u64_at(&daemon.status(), "/push_queue/rows") == 0
    });
    let l = assert_balanced(&ledger(&daemon, true), "after the nats-server outage");
    let acked = source_figure(&l, "nats/events", "/acked");
    assert!(acked >= published + 50, "acked {acked}: {l:#}");
    assert_eq!(source_figure(&l, "nats/events", "/pending"), 0, "{l:#}");
    assert_eq!(source_figure(&l, "nats/events", "/lost"), 0, "{l:#}");
    assert_eq!(
        source_figure(&l, "nats/events", "/delivered"),
        acked,
        "{l:#}"
    );
}

#[test]
fn latest_mode_keeps_the_newest_value_per_subject_and_counts_the_replaced_ones() {
    let server = NatsServer::start();
    let js = Js::connect(&server.url());
    js.create_stream("SENSORS", &["sensors.>"]);
    const PER_SUBJECT: u64 = 100;
    let subjects = ["sensors.a", "sensors.b", "sensors.c"];
    for i in 0..PER_SUBJECT {
        for s in subjects {
            js.publish(
                s,
                serde_json::to_vec(&json!({"subject": s, "n": i})).unwrap(),
            );
        }
    }
    let receiver = Receiver::start();
    let mut config = queue_config(64, "evict_oldest");
    config["connector"]["push"] = json!({"url": receiver.url(), "retry_initial_ms": 50});
    config["nats"] = json!({
        "connections": [{"name": "js", "servers": [server.url()]}],
        "sources": [{"name": "sensors", "stream": "SENSORS", "mode": "latest"}],
    });
    let daemon = Daemon::start(config);
    let total = PER_SUBJECT * subjects.len() as u64;
    wait_until(POLL_DEADLINE, "every message is acked or replaced", || {
        let s = nats_source_status(&daemon, "sensors");
        u64_at(&s, "/acked") + u64_at(&s, "/replaced") == total
    });
    let s = nats_source_status(&daemon, "sensors");
    assert!(u64_at(&s, "/replaced") > 0, "{s}");
    let stored = u64_at(&s, "/acked");
    wait_until(POLL_DEADLINE, "the stored records reach the uplink", || {
        receiver.unique_ids().len() as u64 >= stored
    });
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for r in receiver.records() {
        let subject = r["payload"]["subject"].as_str().unwrap().to_string();
        last.insert(subject, r["payload"]["n"].as_u64().unwrap());
    }
    for s in subjects {
        assert_eq!(
            last.get(s),
            Some(&(PER_SUBJECT - 1)),
            "newest of {s}: {last:?}"
        );
    }
    let (pending, ack_pending, _) = js.consumer("SENSORS", "opex-sensors");
    assert_eq!((pending, ack_pending), (0, 0));
}

#[test]
fn the_nats_sink_publishes_refuses_while_the_server_is_down_and_resumes_when_it_is_back() {
    let mut server = NatsServer::start();
    let js = Js::connect(&server.url());
    js.create_stream("OUT", &["opex.>"]);
    let mut config = queue_config(64, "block");
    config["nats"] = json!({
        "connections": [{"name": "js", "servers": [server.url()], "reconnect_max_ms": 200}],
        "sink": {"subject": "opex.{{key}}", "retries": 2, "retry_initial_ms": 50,
                 "retry_max_ms": 100, "timeout_secs": 1},
    });
    config["flows"] = ingest_flow(&["nats"]);
    let daemon = Daemon::start(config);
    wait_until(POLL_DEADLINE, "the sink is connected", || {
        sink_status(&daemon, "nats")["connected"] == true
    });
    for i in 0..5 {
        assert_stored(&daemon.ingest(&format!("k{i}"), r#"{"v":1}"#), "published");
    }
    assert_eq!(js.stream_state("OUT").0, 5);

    server.kill9();
    wait_until(POLL_DEADLINE, "the sink sees the server down", || {
        sink_status(&daemon, "nats")["connected"] == false
    });
    let reply = daemon.ingest("down", r#"{"v":2}"#);
    assert_retry(&reply, "nats", "server down");
    let s = sink_status(&daemon, "nats");
    assert!(u64_at(&s, "/blocked") >= 1, "{s}");

    server.restart();
    wait_until(POLL_DEADLINE, "the sink reconnects", || {
        sink_status(&daemon, "nats")["connected"] == true
    });
    let mut ok = HashSet::new();
    wait_until(POLL_DEADLINE, "records are published again", || {
        let r = daemon.ingest("back", r#"{"v":3}"#);
        if r.status == 200 {
            ok.insert(r.json()["id"].as_str().unwrap_or_default().to_string());
        }
        !ok.is_empty()
    });
    let js = Js::connect(&server.url());
    assert!(js.stream_state("OUT").0 >= 6);
    let s = sink_status(&daemon, "nats");
    assert_eq!(u64_at(&s, "/published"), js.stream_state("OUT").0, "{s}");
}

/// The harness's three-node JetStream cluster, which later tests of failover start: the nodes
/// agree on a meta leader, a stream keeps three replicas, and when the leader is killed the
/// other two elect a new one and the stream still takes messages.
#[test]
fn the_three_node_test_cluster_elects_a_new_meta_leader_when_the_leader_is_killed_and_keeps_its_stream(
) {
    let mut cluster = NatsCluster::start();
    let leader = cluster.wait_for_meta_leader();
    let js = Js::connect_cluster(&cluster.urls());
    js.create_replicated_stream("R3", &["r3.>"], 3);
    js.publish("r3.before", b"1".to_vec());
    let on_n2 = Js::connect(&cluster.node(2).url());
    wait_until(POLL_DEADLINE, "the message seen through n2", || {
        on_n2.try_stream_state("R3").is_ok_and(|s| s.0 == 1)
    });

    let i = (0..3)
        .find(|&i| cluster.node(i).name() == leader)
        .expect("the leader is one of the nodes");
    cluster.node_mut(i).kill9();
    wait_until(POLL_DEADLINE, "a new meta leader", || {
        cluster.meta_leader().is_some_and(|l| l != leader)
    });
    js.publish("r3.after", b"2".to_vec());

    cluster.node_mut(i).restart();
    cluster.wait_for_meta_leader();
    let on_restarted = Js::connect(&cluster.node(i).url());
    wait_until(
        POLL_DEADLINE,
        "both messages through the restarted node",
        || on_restarted.try_stream_state("R3").is_ok_and(|s| s.0 == 2),
    );
    cluster.stop();
}

#[test]
fn a_key_that_would_add_subject_tokens_or_wildcards_is_dead_lettered_with_the_reason_not_published()
{
    let server = NatsServer::start();
    let js = Js::connect(&server.url());
    js.create_stream("OUT", &["opex.>"]);
    let mut config = queue_config(64, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["nats"] = json!({
        "connections": [{"name": "js", "servers": [server.url()], "reconnect_max_ms": 200}],
        "sink": {"subject": "opex.{{key}}"},
    });
    config["flows"] = ingest_flow(&["nats"]);
    let daemon = Daemon::start(config);
    wait_until(POLL_DEADLINE, "the sink is connected", || {
        sink_status(&daemon, "nats")["connected"] == true
    });
    assert_stored(&daemon.ingest("plain", r#"{"v":1}"#), "a plain key");
    for key in ["a.b", "all%3E", "x%20y"] {
        let reply = daemon.ingest(key, r#"{"v":2}"#);
        assert_eq!(reply.status, 200, "{key}: {reply:?}");
        let body = reply.json();
        assert_eq!(body["result"], "dead_lettered", "{key}: {body}");
        let entry = dead_letter(&daemon, body["dead_letter_id"].as_u64().unwrap());
        let reason = entry["reason"].as_str().unwrap();
        assert!(
            reason.contains("template field key") && reason.contains("NATS"),
            "{key}: {reason}"
        );
    }
    assert_eq!(
        js.stream_state("OUT").0,
        1,
        "only the plain key was published"
    );
}

/// A message over the server's `max_payload` used to fail as a transient error: retried
/// without end at the head of a `queue: disk`, it held every record behind it.
#[test]
fn a_record_over_the_nats_max_payload_is_dead_lettered_and_the_twenty_behind_it_arrive() {
    let server = NatsServer::start_with("max_payload: 4096\n");
    let js = Js::connect(&server.url());
    js.create_stream("OUT", &["opex.>"]);
    let mut config = queue_config(64, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["nats"] = json!({
        "connections": [{"name": "js", "servers": [server.url()], "reconnect_max_ms": 200}],
    });
    config["sinks"] = json!([
        {"name": "out", "type": "nats", "subject": "opex.{{key}}", "retries": 2,
         "retry_initial_ms": 50, "retry_max_ms": 100, "timeout_secs": 1,
         "queue": "disk", "max_quota_mb": 64, "on_full": "block"},
    ]);
    config["flows"] = ingest_flow(&["out"]);
    let daemon = Daemon::start(config);
    wait_until(POLL_DEADLINE, "the sink is connected", || {
        sink_status(&daemon, "out")["connected"] == true
    });
    let big = assert_stored(
        &daemon.ingest("big", &padded_payload("big", 4096)),
        "the big record is queued",
    );
    for i in 0..20 {
        assert_stored(&daemon.ingest(&format!("s{i}"), r#"{"v":1}"#), "small");
    }
    wait_until(
        Duration::from_secs(20),
        "the 20 small records behind the big one arrive",
        || js.stream_state("OUT").0 == 20,
    );
    wait_until(
        Duration::from_secs(20),
        "the big record is a dead letter and the queue empty",
        || {
            let s = sink_status(&daemon, "out");
            u64_at(&s, "/dead_letter_rows") == 1 && u64_at(&s, "/queue_rows") == 0
        },
    );
    let reply = daemon.get("/api/sinks/out/dead-letters?limit=10", Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "{reply:?}");
    let letters = reply.json();
    let letter = &letters["rows"][0];
    assert_eq!(letter["record"]["id"], json!(big), "{letters:#}");
    let reason = letter["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("too large") && reason.contains("max_payload 4096"),
        "{reason}"
    );
    let keys: HashSet<String> = js
        .stream_messages("OUT")
        .iter()
        .filter_map(|m| serde_json::from_slice::<Value>(&m.payload).ok())
        .filter_map(|v| v["key"].as_str().map(str::to_string))
        .collect();
    assert_eq!(keys, (0..20).map(|i| format!("s{i}")).collect());
    let s = sink_status(&daemon, "out");
    assert_eq!(s["connected"], true, "{s}");
    assert_eq!(u64_at(&s, "/too_large"), 1, "{s}");
    assert_eq!(u64_at(&s, "/queue_rows"), 0, "{s}");
    let l = assert_balanced(&ledger(&daemon, true), "after the big record");
    let source = format!("ingest/{SOURCE}");
    assert_eq!(source_figure(&l, &source, "/dead_lettered"), 1, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/lost"), 0, "{l:#}");
}
