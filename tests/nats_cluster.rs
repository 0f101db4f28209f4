//! Scale-out into a three-node JetStream cluster: gateways publish their ingest records
//! through the `nats` sink into a stream with three replicas, another gateway consumes the
//! stream through a JetStream source, and one server is killed (SIGKILL) and restarted while
//! records keep coming.
//!
//! What must hold: every record a gateway acknowledged (`200` to its caller) is in the stream
//! exactly once, counted by its `Nats-Msg-Id` (the record id: a publish retried across the
//! failover lands in the stream's duplicate window, 2 minutes by default); none is missing;
//! the consuming gateway delivers every stream message at least once; the restarted server's
//! replica catches up.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use common::*;
use serde_json::{json, Value};

/// The stream every gateway publishes into.
const STREAM: &str = "PLANT";
/// Publishing gateways, and load threads per gateway.
const GATEWAYS: usize = 2;
const CLIENTS_PER_GATEWAY: usize = 2;
/// Records acknowledged in each phase: before the kill, while a node is down, after it is back.
const PER_PHASE: u64 = 150;

/// A publishing gateway: ingest → `nats` sink on subject `plant.<gateway>`, every cluster
/// node in its server list.
fn gateway_config(urls: &[String], gateway: &str) -> Value {
    let mut config = queue_config(64, "block");
    config["connector"]["name"] = json!(gateway);
    config["nats"] = json!({
        "connections": [{"name": "cluster", "servers": urls, "reconnect_max_ms": 200}],
        "sink": {"subject": format!("plant.{gateway}"), "retries": 20, "retry_initial_ms": 100,
                 "retry_max_ms": 500, "timeout_secs": 2},
    });
    config["flows"] = ingest_flow(&["nats"]);
    config
}

/// What the load threads saw: record id → times a gateway answered `200` for it (each id
/// once: a new request makes a new record), and the other answers.
#[derive(Default)]
struct Load {
    acked: Mutex<HashMap<String, u32>>,
    count: AtomicU64,
    refused: AtomicU64,
}

/// One load thread: posts records to a gateway until `stop`; a refusal or a transport error
/// is retried as a new record (what a caller does).
fn load(base: String, thread_no: usize, load: Arc<Load>, stop: Arc<AtomicBool>) {
    let client = Client::new();
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let key = format!("t{thread_no}-{n}");
        n += 1;
        let body = padded_payload(&key, 256);
        match client.post(
            &ingest_url(&base, SOURCE, &key),
            Some(TOKEN),
            body.as_bytes(),
        ) {
            Ok(reply) if reply.status == 200 => {
                let id = reply.json()["id"].as_str().unwrap_or_default().to_string();
                assert!(!id.is_empty(), "a 200 without a record id: {}", reply.body);
                *load.acked.lock().unwrap().entry(id).or_default() += 1;
                load.count.fetch_add(1, Ordering::SeqCst);
            }
            Ok(_) | Err(_) => {
                load.refused.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

#[test]
fn every_record_acked_into_a_three_replica_stream_is_stored_exactly_once_and_consumed_while_a_node_is_killed_and_restarted(
) {
    let mut cluster = NatsCluster::start();
    let urls = cluster.urls();
    let js = Js::connect_cluster(&urls);
    js.create_replicated_stream(STREAM, &["plant.>"], 3);

    let gateways: Vec<Daemon> = (0..GATEWAYS)
        .map(|g| Daemon::start(gateway_config(&urls, &format!("gw{g}"))))
        .collect();
    for gw in &gateways {
        wait_until(POLL_DEADLINE, "the gateway's sink is connected", || {
            named(&gw.status(), "/sinks", "nats")["connected"] == true
        });
    }
    // The consuming gateway: a JetStream source on the stream, into its push queue and uplink.
    let receiver = Receiver::start();
    let mut config = queue_config(64, "block");
    config["connector"]["name"] = json!("site");
    config["connector"]["push"] = json!({"url": receiver.url(), "retry_initial_ms": 50});
    config["nats"] = json!({
        "connections": [{"name": "cluster", "servers": &urls, "reconnect_max_ms": 200}],
        "sources": [{"name": "plant", "stream": STREAM, "durable": "site", "ack_wait_secs": 5,
                     "nak_backoff_initial_ms": 100, "nak_backoff_max_ms": 400}],
    });
    let site = Daemon::start(config);

    let stats = Arc::new(Load::default());
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = gateways
        .iter()
        .flat_map(|gw| std::iter::repeat_n(gw.base(), CLIENTS_PER_GATEWAY))
        .enumerate()
        .map(|(i, base)| {
            let (stats, stop) = (stats.clone(), stop.clone());
            thread::spawn(move || load(base, i, stats, stop))
        })
        .collect();
    let acked = || stats.count.load(Ordering::SeqCst);

    wait_until(POLL_DEADLINE, "records acked before the kill", || {
        acked() >= PER_PHASE
    });
    // Kill the stream's leader: the two others must elect a new one while records arrive.
    let leader = js.stream_leader(STREAM).expect("the stream has a leader");
    let victim = (0..3)
        .find(|&i| cluster.node(i).name() == leader)
        .expect("the leader is a node");
    let at_kill = acked();
    cluster.node_mut(victim).kill9();
    let killed = Instant::now();
    wait_until(POLL_DEADLINE, "records acked while a node is down", || {
        acked() >= at_kill + PER_PHASE
    });
    let during = acked() - at_kill;
    let outage_ms = killed.elapsed().as_millis();
    let new_leader = js.stream_leader(STREAM);
    cluster.node_mut(victim).restart();
    cluster.wait_for_meta_leader();
    let at_restart = acked();
    wait_until(POLL_DEADLINE, "records acked after the restart", || {
        acked() >= at_restart + PER_PHASE
    });
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().expect("load thread");
    }
    let acked_ids = stats.acked.lock().unwrap().clone();
    assert!(
        acked_ids.values().all(|&n| n == 1),
        "an id was answered 200 twice"
    );
    let sink_figure = |pointer: &str| -> u64 {
        gateways
            .iter()
            .map(|gw| u64_at(named(&gw.status(), "/sinks", "nats"), pointer))
            .sum()
    };
    eprintln!(
        "cluster: acked={} told_to_retry={} acked_while_{}_was_down={during} in {outage_ms} ms, stream leader {leader} -> {new_leader:?}, publish retries={}",
        acked_ids.len(),
        stats.refused.load(Ordering::SeqCst),
        cluster.node(victim).name(),
        sink_figure("/retries"),
    );

    // The stream: every acked id exactly once, by its Nats-Msg-Id; its payload is that record.
    let stored = js.stream_messages(STREAM);
    let mut by_msg_id: HashMap<String, u32> = HashMap::new();
    for m in &stored {
        let id = m.msg_id.clone().expect("every message has a Nats-Msg-Id");
        let line: Value = serde_json::from_slice(&m.payload).expect("the record line is JSON");
        assert_eq!(
            line["id"],
            json!(id),
            "seq {}: header and line disagree",
            m.seq
        );
        *by_msg_id.entry(id).or_default() += 1;
    }
    let twice: Vec<_> = by_msg_id.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "ids stored more than once: {twice:?}");
    let missing: Vec<_> = acked_ids
        .keys()
        .filter(|id| !by_msg_id.contains_key(*id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} acked records are not in the stream, e.g. {:?}",
        missing.len(),
        missing.iter().take(5).collect::<Vec<_>>()
    );
    // Records stored whose caller was told to retry (the answer was lost): at least once.
    let unacked = stored.len() - acked_ids.len();
    eprintln!(
        "stream: {} messages, {unacked} of them stored for a caller told to retry; sinks published {}",
        stored.len(),
        sink_figure("/published"),
    );

    // The restarted node's replica catches up to the same last sequence.
    let last = stored.last().map_or(0, |m| m.seq);
    wait_until(POLL_DEADLINE, "the restarted replica is current", || {
        cluster
            .node(victim)
            .monitor("/jsz?accounts=true&streams=true")
            .is_some_and(|jsz| {
                jsz["account_details"][0]["stream_detail"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|s| s["name"] == STREAM && s["state"]["last_seq"] == json!(last))
            })
    });

    // The consuming gateway delivered every stream message (ids `nats-PLANT-<seq>`) and so
    // every acked record (the original id is inside the payload).
    let want: Vec<String> = stored
        .iter()
        .map(|m| format!("nats-{STREAM}-{}", m.seq))
        .collect();
    wait_until(
        POLL_DEADLINE,
        "the site delivers every stream message",
        || receiver.has_all(&want),
    );
    let originals: HashSet<String> = receiver
        .records()
        .iter()
        .filter_map(|r| r["payload"]["id"].as_str().map(str::to_string))
        .collect();
    assert!(acked_ids.keys().all(|id| originals.contains(id)));
    let src = named(&site.status(), "/sources", "nats/plant").clone();
    assert!(u64_at(&src, "/acked") >= stored.len() as u64, "{src}");
    cluster.stop();
}
