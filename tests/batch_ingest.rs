//! Batch ingest (`POST /api/ingest/{source}`) against the durable push queue: one commit per
//! batch, atomic refusal of bad lines and `?partial=1`, the quota under `block`, the limits and
//! bad bodies, and kill -9 while batches are in flight. Drives the real binary.
//!
//! That a batch is answered only after its commit (a slow commit delays the answer) is shown by
//! the library's `store::queue::together` tests, which inject the slow commit.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const NDJSON: &str = "application/x-ndjson";
const JSON: &str = "application/json";

/// One line of a batch: key `key`, a payload of about `size` bytes.
fn line(key: &str, size: usize) -> Value {
    json!({"id": key, "payload": {"key": key, "pad": "x".repeat(size)}})
}

fn ndjson(lines: &[Value]) -> Vec<u8> {
    let mut body = Vec::new();
    for l in lines {
        body.extend_from_slice(l.to_string().as_bytes());
        body.push(b'\n');
    }
    body
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:04}")).collect()
}

/// Checks a batch's `200` and returns its ids.
fn stored_ids(reply: &Reply, n: usize, what: &str) -> Vec<String> {
    assert_eq!(reply.status, 200, "{what}: {reply:?}");
    let body = reply.json();
    assert_eq!(body["ok"], json!(true), "{what}: {}", reply.body);
    assert_eq!(body["result"], json!("stored"), "{what}: {}", reply.body);
    assert_eq!(body["count"], json!(n), "{what}: {}", reply.body);
    let ids: Vec<String> = body["ids"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no ids in {}", reply.body))
        .iter()
        .map(|v| v.as_str().expect("a string id").to_string())
        .collect();
    assert_eq!(ids.len(), n, "{what}: {}", reply.body);
    ids
}

fn commits(daemon: &Daemon) -> f64 {
    metric(&daemon.metrics(), "opex_connector_push_queue_commits_total")
        .expect("opex_connector_push_queue_commits_total")
}

fn rows(daemon: &Daemon) -> u64 {
    u64_at(&daemon.status(), "/push_queue/rows")
}

/// A `block` queue of `quota_mb` whose uplink is `receiver` (down until a test brings it up,
/// so rows stay queued), with the admin token for the ledger's queue check.
fn config_with_uplink(quota_mb: i64, receiver: &Receiver) -> Value {
    let mut config = queue_config(quota_mb, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["connector"]["push"] = json!({
        "url": receiver.url(),
        "batch_rows": 500,
        "retry_initial_ms": 50,
        "retry_max_ms": 200,
    });
    config
}

#[test]
fn ndjson_and_array_batches_are_stored_in_order_in_one_commit_each() {
    let receiver = Receiver::start_down();
    let daemon = Daemon::start(config_with_uplink(16, &receiver));
    let first = keys("nd", 60);
    let second = keys("ar", 40);
    let before = commits(&daemon);
    let lines: Vec<Value> = first.iter().map(|k| line(k, 200)).collect();
    let nd_ids = stored_ids(
        &daemon.ingest_batch("", NDJSON, &ndjson(&lines)),
        60,
        "NDJSON batch",
    );
    assert_eq!(
        commits(&daemon) - before,
        1.0,
        "one commit for the NDJSON batch"
    );
    assert_eq!(rows(&daemon), 60);
    let array: Vec<Value> = second.iter().map(|k| line(k, 200)).collect();
    let body = serde_json::to_vec_pretty(&array).unwrap();
    let ar_ids = stored_ids(&daemon.ingest_batch("", JSON, &body), 40, "array batch");
    assert_eq!(
        commits(&daemon) - before,
        2.0,
        "one commit for the array batch"
    );
    assert_eq!(rows(&daemon), 100);

    // Delivered in body order, with the ids the answers gave.
    receiver.up();
    wait_until(POLL_DEADLINE, "the uplink delivers both batches", || {
        receiver.records().len() >= 100
    });
    let got = receiver.records();
    let got_keys: Vec<&str> = got.iter().map(|r| r["key"].as_str().unwrap()).collect();
    let want: Vec<&str> = first.iter().chain(&second).map(String::as_str).collect();
    assert_eq!(got_keys, want);
    let got_ids: Vec<String> = got
        .iter()
        .map(|r| r["id"].as_str().unwrap().into())
        .collect();
    assert_eq!(got_ids, [nd_ids, ar_ids].concat());
    assert_eq!(got[0]["payload"]["key"], json!("nd-0000"));
    assert_eq!(got[0]["source"], json!(format!("ingest/{SOURCE}")));
    let ledger = assert_balanced(&ledger(&daemon, true), "after two batches");
    let source = format!("ingest/{SOURCE}");
    assert_eq!(source_figure(&ledger, &source, "/received"), 100);
    assert_eq!(source_figure(&ledger, &source, "/acked"), 100);
}

#[test]
fn a_bad_line_refuses_the_whole_batch_with_its_index_and_partial_stores_the_rest() {
    let daemon = Daemon::start(queue_config(16, "block"));
    let mut lines: Vec<String> = keys("a", 5)
        .iter()
        .map(|k| line(k, 10).to_string())
        .collect();
    lines[3] = r#"{"id":"","payload":1}"#.into();
    let body = lines.join("\n");

    let reply = daemon.ingest_batch("", NDJSON, body.as_bytes());
    assert_eq!(reply.status, 400, "{reply:?}");
    let answer = reply.json();
    assert_eq!(answer["ok"], json!(false));
    assert_eq!(
        answer["rejected"],
        json!([{"index": 3, "error": "id is empty"}]),
        "{}",
        reply.body
    );
    assert_eq!(rows(&daemon), 0, "nothing of a refused batch is stored");

    let reply = daemon.ingest_batch("?partial=1", NDJSON, body.as_bytes());
    stored_ids(&reply, 4, "partial batch");
    assert_eq!(
        reply.json()["rejected"],
        json!([{"index": 3, "error": "id is empty"}]),
        "{}",
        reply.body
    );
    assert_eq!(rows(&daemon), 4);

    // A repeated id is stored again, as the one-record API stores a repeated key: a new record.
    let again = daemon.ingest_batch("", NDJSON, &ndjson(&[line("a-0000", 10)]));
    let id = stored_ids(&again, 1, "a repeated key");
    let first = reply.json()["ids"][0].as_str().unwrap().to_string();
    assert_ne!(id[0], first, "a repeat is a new record with its own id");
    assert_eq!(rows(&daemon), 5);

    let source = &daemon.status()["sources"][0];
    assert_eq!(source["stored"], json!(5), "{source:#}");
    assert_eq!(source["rejected"], json!(2), "{source:#}");
}

#[test]
fn a_batch_at_a_full_block_queue_gets_503_and_stores_nothing_and_an_oversize_one_enters_an_empty_queue(
) {
    let daemon = Daemon::start(queue_config(1, "block"));
    let (stored, _) = fill_until_refused(&daemon, "fill");
    assert_eq!(rows(&daemon), stored);
    let lines: Vec<Value> = keys("late", 3).iter().map(|k| line(k, 10)).collect();
    let reply = daemon.ingest_batch("", NDJSON, &ndjson(&lines));
    let after = assert_retry(&reply, "push", "a batch at the full queue");
    assert_eq!(
        reply.header("retry-after"),
        Some(after.to_string().as_str())
    );
    assert_eq!(
        rows(&daemon),
        stored,
        "nothing of a refused batch is stored"
    );
    assert_eq!(
        daemon.status()["sources"][0]["refused"],
        json!(4),
        "3 + 1 record"
    );

    // 1.5 MiB in one batch into an empty 1 MiB queue: admitted, as one record would be.
    let empty = Daemon::start(queue_config(1, "block"));
    let big: Vec<Value> = keys("big", 6).iter().map(|k| line(k, 256 * 1024)).collect();
    stored_ids(
        &empty.ingest_batch("", NDJSON, &ndjson(&big)),
        6,
        "oversize batch",
    );
    assert_eq!(rows(&empty), 6);
    let used = u64_at(&empty.status(), "/push_queue/used_bytes");
    assert!(used > MIB, "{used} bytes used");
    // And the next one is refused: the queue is over its quota.
    let reply = empty.ingest_batch("", NDJSON, &ndjson(&[line("one-more", 10)]));
    assert_retry(&reply, "push", "a batch after the oversize one");
}

#[test]
fn the_limits_and_every_bad_body_are_refused_with_their_reason_and_store_nothing() {
    let mut config = queue_config(16, "block");
    config["ingest"]["max_batch_records"] = json!(5);
    config["ingest"]["max_batch_kb"] = json!(8);
    config["connector"]["http"]["max_body_kb"] = json!(2);
    let mut daemon = Daemon::start(config);

    let six: Vec<Value> = keys("n", 6).iter().map(|k| line(k, 10)).collect();
    let reply = daemon.ingest_batch("", NDJSON, &ndjson(&six));
    let e = assert_error_reply(&reply, 413, "six records");
    assert!(e.contains("ingest.max_batch_records"), "{e}");
    let reply = daemon.ingest_batch("", JSON, &serde_json::to_vec(&six).unwrap());
    assert_error_reply(&reply, 413, "an array of six");

    let heavy: Vec<Value> = keys("h", 5).iter().map(|k| line(k, 1900)).collect();
    let reply = daemon.ingest_batch("", NDJSON, &ndjson(&heavy));
    let e = assert_error_reply(&reply, 413, "9.5 KiB body");
    assert!(e.contains("ingest.max_batch_kb"), "{e}");

    let long = "k".repeat(257);
    let bad = [
        ("not an object", "[1]".to_string(), "not a JSON object"),
        ("not JSON", "{\"id\":".to_string(), "EOF"),
        ("no id", r#"{"payload":1}"#.to_string(), "id is missing"),
        (
            "empty id",
            r#"{"id":"","payload":1}"#.to_string(),
            "id is empty",
        ),
        (
            "long id",
            format!(r#"{{"id":"{long}","payload":1}}"#),
            "more than 256",
        ),
        (
            "big payload",
            line("big", 2100).to_string(),
            "more than max_body_kb",
        ),
        (
            "no payload",
            r#"{"id":"p"}"#.to_string(),
            "payload is missing",
        ),
    ];
    for (what, bad_line, reason) in &bad {
        let body = format!("{}\n{bad_line}\n", line("good", 10));
        let reply = daemon.ingest_batch("", NDJSON, body.as_bytes());
        assert_error_reply(&reply, 400, what);
        let rejected = &reply.json()["rejected"];
        assert_eq!(rejected[0]["index"], json!(1), "{what}: {}", reply.body);
        let error = rejected[0]["error"].as_str().unwrap_or_default();
        assert!(error.contains(reason), "{what}: {error}");
    }
    for (what, content_type, body) in [
        (
            "an object as a JSON array",
            JSON,
            r#"{"id":"a","payload":1}"#,
        ),
        ("a broken array", JSON, r#"[{"id":"a","payload":1}"#),
        ("an empty array", JSON, "[]"),
        ("an empty body", NDJSON, ""),
    ] {
        let reply = daemon.ingest_batch("", content_type, body.as_bytes());
        assert_error_reply(&reply, 400, what);
    }
    let reply = daemon.request(
        "POST",
        &format!("/api/ingest/{SOURCE}"),
        Some("wrong-token-0123456"),
        &[],
        Some(b"{}"),
    );
    assert_error_reply(&reply, 401, "a wrong token");
    let reply = daemon.request("POST", "/api/ingest/nope", Some(TOKEN), &[], Some(b"{}"));
    assert_error_reply(&reply, 404, "an unknown source");
    let reply = daemon.get(&format!("/api/ingest/{SOURCE}"), Some(TOKEN));
    assert_error_reply(&reply, 405, "GET");
    assert_eq!(rows(&daemon), 0, "no bad request stored anything");
    assert!(daemon.is_running(), "{}", daemon.stderr_tail(20));
}

/// Client threads posting batches of [`BATCH`] records to whichever address the daemon has now.
const BATCH: usize = 10;
const CLIENTS: usize = 3;
const CYCLES: usize = 20;

#[test]
fn kill_nine_while_batches_are_in_flight_never_stores_a_batch_in_part_nor_loses_an_acked_one() {
    let receiver = Receiver::start_down();
    let mut daemon = Daemon::start(config_with_uplink(64, &receiver));
    let base = Arc::new(Mutex::new(daemon.base()));
    let stop = Arc::new(AtomicBool::new(false));
    // Batch prefix -> answered 200.
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let (base, stop, acked) = (base.clone(), stop.clone(), acked.clone());
            thread::spawn(move || {
                let client = Client::new();
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let prefix = format!("t{t}-b{n:05}");
                    n += 1;
                    let lines: Vec<Value> =
                        keys(&prefix, BATCH).iter().map(|k| line(k, 100)).collect();
                    let url = format!("{}/api/ingest/{SOURCE}", base.lock().unwrap());
                    let headers = [("Content-Type", NDJSON)];
                    match client.request("POST", &url, Some(TOKEN), &headers, Some(&ndjson(&lines)))
                    {
                        Ok(r) if r.status == 200 => acked.lock().unwrap().push(prefix),
                        Ok(r) => assert_eq!(r.status, 503, "{r:?}"),
                        // The daemon is down: this batch may or may not be stored, whole.
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        })
        .collect();
    for cycle in 0..CYCLES {
        let seen = acked.lock().unwrap().len();
        wait_until(POLL_DEADLINE, "batches are acknowledged", || {
            acked.lock().unwrap().len() >= seen + 3
        });
        daemon.kill9();
        daemon.restart();
        *base.lock().unwrap() = daemon.base();
        let l = ledger(&daemon, true);
        assert_balanced(&l, &format!("after kill -9 #{}", cycle + 1));
    }
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().expect("a client panicked");
    }
    let acked: HashSet<String> = acked.lock().unwrap().iter().cloned().collect();
    let queued = rows(&daemon) as usize;
    receiver.up();
    wait_until(POLL_DEADLINE, "the uplink delivers every row", || {
        receiver.unique_ids().len() >= queued
    });
    let mut batches: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in receiver.records() {
        let key = r["key"].as_str().expect("a key").to_string();
        let (prefix, _) = key.rsplit_once('-').expect("prefix-index");
        batches.entry(prefix.to_string()).or_default().push(key);
    }
    for (prefix, got) in &batches {
        let unique: HashSet<&String> = got.iter().collect();
        assert_eq!(
            unique.len(),
            BATCH,
            "batch {prefix} stored in part: {got:?}"
        );
    }
    for prefix in &acked {
        assert!(
            batches.contains_key(prefix),
            "acknowledged batch {prefix} lost"
        );
    }
    assert!(acked.len() >= CYCLES * 3);
    assert_balanced(&ledger(&daemon, true), "at the end");
}
