//! The ingest API against the durable push queue: quota under `block` and `evict_oldest`,
//! the exact refusal, bad input, and a restart. Drives the real binary.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::thread;

use common::*;
use serde_json::{json, Value};

/// Size of the "1 KB" test record body.
const RECORD: usize = 1024;

/// Checks a 200 reply is `{"ok":true,"result":"stored","id":"<id>"}` and returns the id.
fn stored_id(reply: &Reply) -> String {
    assert_eq!(reply.status, 200, "expected 200, got {reply:?}");
    let body = reply.json();
    assert_eq!(body["ok"], json!(true), "ack body {}", reply.body);
    assert_eq!(body["result"], json!("stored"), "ack body {}", reply.body);
    let id = body["id"]
        .as_str()
        .unwrap_or_else(|| panic!("ack has no string id: {}", reply.body));
    assert!(!id.is_empty(), "ack has an empty id: {}", reply.body);
    assert_eq!(
        body.as_object().map(|o| o.len()),
        Some(3),
        "ack has extra fields: {}",
        reply.body
    );
    id.to_string()
}

/// Checks an error reply: the status and a JSON body `{"ok":false,"error":"..."}`.
fn assert_error(reply: &Reply, status: u16, what: &str) -> String {
    assert_eq!(reply.status, status, "{what}: got {reply:?}");
    let body = reply.json();
    assert_eq!(body["ok"], json!(false), "{what}: body {}", reply.body);
    let error = body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no string `error` in {}", reply.body));
    assert!(!error.is_empty(), "{what}: empty error in {}", reply.body);
    error.to_string()
}

/// The exact body of a refusal under `block`.
fn retry_body(n: u64) -> String {
    format!(r#"{{"ok":false,"result":"retry","sink":"push","retry_after_secs":{n}}}"#)
}

fn push_sink(status: &Value) -> &Value {
    status["sinks"]
        .as_array()
        .and_then(|sinks| sinks.iter().find(|s| s["name"] == "push"))
        .unwrap_or_else(|| panic!("no sink named push in {status:#}"))
}

fn ingest_source(status: &Value) -> &Value {
    let name = format!("ingest/{SOURCE}");
    status["sources"]
        .as_array()
        .and_then(|sources| sources.iter().find(|s| s["name"] == name.as_str()))
        .unwrap_or_else(|| panic!("no source named {name} in {status:#}"))
}

#[test]
fn block_queue_refuses_at_quota_with_exact_503_and_stores_nothing_more() {
    let daemon = Daemon::start(queue_config(1, "block"));
    let mut ids = HashSet::new();
    let refusal = loop {
        assert!(
            ids.len() < 2048,
            "no 503 after {} records of 1 KB into a 1 MiB block queue",
            ids.len()
        );
        let key = format!("r{:06}", ids.len());
        let reply = daemon.ingest(&key, &padded_payload(&key, RECORD));
        match reply.status {
            200 => assert!(ids.insert(stored_id(&reply)), "duplicate id in {reply:?}"),
            503 => break reply,
            _ => panic!("record {key}: expected 200 or 503, got {reply:?}"),
        }
    };
    let stored = ids.len() as u64;
    assert!(
        stored >= 256,
        "refused after only {stored} records of 1 KB in 1 MiB"
    );

    let retry_after = refusal
        .header("retry-after")
        .unwrap_or_else(|| panic!("503 without Retry-After: {refusal:?}"));
    let n: u64 = retry_after
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("Retry-After is not an integer: {retry_after:?}"));
    assert_eq!(refusal.body, retry_body(n));

    // Nothing more gets in.
    for i in 0..5 {
        let key = format!("more{i}");
        let reply = daemon.ingest(&key, &padded_payload(&key, RECORD));
        assert_eq!(
            reply.status, 503,
            "post {i} after the first refusal: {reply:?}"
        );
        let n: u64 = reply
            .header("retry-after")
            .unwrap_or("")
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("503 without an integer Retry-After: {reply:?}"));
        assert_eq!(reply.body, retry_body(n));
    }
    let refused = 6;

    let status = daemon.status();
    let pq = &status["push_queue"];
    assert_eq!(pq["on_full"], json!("block"), "{pq:#}");
    assert_eq!(pq["enabled"], json!(true), "{pq:#}");
    assert_eq!(pq["durable"], json!(true), "{pq:#}");
    assert_eq!(u64_at(pq, "/quota_bytes"), MIB, "{pq:#}");
    assert_eq!(
        u64_at(pq, "/rows"),
        stored,
        "rows must equal the 200s: {pq:#}"
    );
    let used = u64_at(pq, "/used_bytes");
    assert!(used <= MIB, "used_bytes {used} over the quota: {pq:#}");
    // It refused because it was full, not early: less than two records' room was left.
    let per_row = used / stored;
    assert!(
        used + 2 * per_row > MIB,
        "refused with {} bytes free ({per_row} per row): {pq:#}",
        MIB - used
    );
    assert!(
        per_row >= (RECORD + 72) as u64,
        "a row of a {RECORD} byte record counts only {per_row} bytes (key 8 + value + 64): {pq:#}"
    );
    eprintln!(
        "{stored} records of {RECORD} bytes stored, {used} of {MIB} bytes used, {per_row} per row"
    );
    assert_eq!(u64_at(pq, "/blocked_total"), refused, "{pq:#}");
    assert_eq!(pq["blocking"], json!(true), "{pq:#}");
    assert_eq!(pq["level"], json!("full"), "{pq:#}");
    assert_eq!(u64_at(pq, "/evicted_total"), 0, "{pq:#}");
    assert_eq!(u64_at(pq, "/dropped_total"), 0, "{pq:#}");
    assert_eq!(
        status["push_status"], *pq,
        "push_status must equal push_queue"
    );

    let sink = push_sink(&status);
    assert_eq!(u64_at(sink, "/blocked"), refused, "{sink:#}");
    assert_eq!(u64_at(sink, "/dropped"), 0, "{sink:#}");

    let source = ingest_source(&status);
    assert_eq!(u64_at(source, "/stored"), stored, "{source:#}");
    assert_eq!(u64_at(source, "/refused"), refused, "{source:#}");

    let metrics = daemon.metrics();
    assert_eq!(
        metric(&metrics, "opex_connector_push_queue_blocked_total"),
        Some(refused as f64),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "opex_connector_push_queue_rows"),
        Some(stored as f64),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "opex_connector_push_queue_used_bytes"),
        Some(used as f64),
        "{metrics}"
    );
    // The stored records were synced: the commits took some time, and say how much.
    let synced = metric(&metrics, "opex_connector_push_queue_sync_seconds_total");
    assert!(synced.is_some_and(|s| s > 0.0), "{metrics}");
    let held = metric(&metrics, "opex_connector_push_queue_held_seconds_total");
    assert!(held.is_some_and(|s| s >= 0.0), "{metrics}");
}

#[test]
fn sixty_four_concurrent_clients_never_push_used_bytes_over_quota() {
    let daemon = Daemon::start(queue_config(1, "block"));

    // Fill to about three quarters, one record at a time.
    let mut ok = 0u64;
    let mut refused = 0u64;
    for i in 0.. {
        let key = format!("fill{i:05}");
        match daemon.ingest(&key, &padded_payload(&key, RECORD)).status {
            200 => ok += 1,
            503 => refused += 1,
            s => panic!("prefill record {key}: status {s}"),
        }
        if refused > 0
            || (i % 20 == 19 && u64_at(&daemon.status(), "/push_queue/used_bytes") >= MIB * 3 / 4)
        {
            break;
        }
    }

    // 64 clients start together and post records of mixed size (0.5 to 4 KB).
    const CLIENTS: usize = 64;
    const EACH: usize = 8;
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let workers: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let client = daemon.client();
            let base = daemon.base();
            let barrier = barrier.clone();
            thread::spawn(move || {
                barrier.wait();
                let (mut ok, mut refused, mut other) = (0u64, 0u64, Vec::new());
                for j in 0..EACH {
                    let key = format!("c{t:02}-{j}");
                    let size = 512 + (t * EACH + j) * 397 % 3584;
                    let url = ingest_url(&base, SOURCE, &key);
                    match client.post(&url, Some(TOKEN), padded_payload(&key, size).as_bytes()) {
                        Ok(r) if r.status == 200 => ok += 1,
                        Ok(r) if r.status == 503 => refused += 1,
                        Ok(r) => other.push(format!("{key}: {} {}", r.status, r.body)),
                        Err(e) => other.push(format!("{key}: {e}")),
                    }
                }
                (ok, refused, other)
            })
        })
        .collect();
    let mut burst_ok = 0;
    let mut burst_refused = 0;
    let mut other = Vec::new();
    for w in workers {
        let (o, r, x) = w.join().expect("client thread panicked");
        burst_ok += o;
        burst_refused += r;
        other.extend(x);
    }
    assert!(other.is_empty(), "replies other than 200/503: {other:#?}");
    assert!(burst_refused > 0, "the burst never reached the quota");
    assert!(burst_ok > 0, "the burst was refused entirely");
    ok += burst_ok;
    refused += burst_refused;

    let status = daemon.status();
    let pq = &status["push_queue"];
    let used = u64_at(pq, "/used_bytes");
    assert!(
        used <= u64_at(pq, "/quota_bytes"),
        "used_bytes over quota: {pq:#}"
    );
    assert_eq!(u64_at(pq, "/rows"), ok, "rows must equal the 200s: {pq:#}");
    assert_eq!(
        u64_at(pq, "/blocked_total"),
        refused,
        "blocked_total vs 503s: {pq:#}"
    );
    assert_eq!(u64_at(ingest_source(&status), "/stored"), ok, "{status:#}");
    assert_eq!(u64_at(push_sink(&status), "/dropped"), 0, "{status:#}");
}

#[test]
fn evict_oldest_counts_gaps() {
    let daemon = Daemon::start(queue_config(1, "evict_oldest"));
    // 2 MiB of 1 KB records into a 1 MiB queue, from 8 clients.
    const CLIENTS: usize = 8;
    const EACH: usize = 256;
    let workers: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let client = daemon.client();
            let base = daemon.base();
            thread::spawn(move || {
                let mut bad = Vec::new();
                for j in 0..EACH {
                    let key = format!("e{t}-{j:04}");
                    let url = ingest_url(&base, SOURCE, &key);
                    match client.post(&url, Some(TOKEN), padded_payload(&key, RECORD).as_bytes()) {
                        Ok(r) if r.status == 200 => {}
                        Ok(r) => bad.push(format!("{key}: {} {}", r.status, r.body)),
                        Err(e) => bad.push(format!("{key}: {e}")),
                    }
                }
                bad
            })
        })
        .collect();
    let bad: Vec<String> = workers
        .into_iter()
        .flat_map(|w| w.join().expect("client thread panicked"))
        .collect();
    assert!(
        bad.is_empty(),
        "evict_oldest must take every record: {bad:#?}"
    );
    let posted = (CLIENTS * EACH) as u64;

    let status = daemon.status();
    let pq = &status["push_queue"];
    let evicted = u64_at(pq, "/evicted_total");
    let rows = u64_at(pq, "/rows");
    let used = u64_at(pq, "/used_bytes");
    assert!(evicted > 0, "2 MiB into 1 MiB evicted nothing: {pq:#}");
    assert_eq!(
        rows + evicted,
        posted,
        "every row is kept or counted as evicted: {pq:#}"
    );
    assert!(
        used <= u64_at(pq, "/quota_bytes"),
        "used_bytes over quota: {pq:#}"
    );
    assert_eq!(u64_at(pq, "/blocked_total"), 0, "{pq:#}");
    assert_eq!(pq["on_full"], json!("evict_oldest"), "{pq:#}");
    assert_eq!(
        status["push_status"], *pq,
        "push_status must equal push_queue"
    );

    let metrics = daemon.metrics();
    assert_eq!(
        metric(&metrics, "opex_connector_push_queue_gaps_total"),
        Some(evicted as f64),
        "gaps_total must equal evicted_total {evicted}:\n{metrics}"
    );
    assert_eq!(
        metric(&metrics, "opex_connector_push_queue_rows"),
        Some(rows as f64),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "opex_connector_push_queue_used_bytes"),
        Some(used as f64),
        "{metrics}"
    );
}

#[test]
fn record_larger_than_quota_is_admitted_into_an_empty_queue() {
    let mut config = queue_config(1, "block");
    config["connector"]["http"]["max_body_kb"] = json!(4096);
    let daemon = Daemon::start(config);

    let big = padded_payload("big", 1_572_864);
    stored_id(&daemon.ingest("big", &big));

    let status = daemon.status();
    let pq = &status["push_queue"];
    assert_eq!(u64_at(pq, "/rows"), 1, "{pq:#}");
    assert!(
        u64_at(pq, "/used_bytes") > 1_572_864,
        "the big row's bytes are counted: {pq:#}"
    );

    let small = daemon.ingest("small", r#"{"n":1}"#);
    assert_eq!(small.status, 503, "the queue is over its quota: {small:?}");
    let n: u64 = small
        .header("retry-after")
        .unwrap_or("")
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("503 without an integer Retry-After: {small:?}"));
    assert_eq!(small.body, retry_body(n));
    assert_eq!(u64_at(&daemon.status(), "/push_queue/rows"), 1);
}

#[test]
fn bad_requests_get_their_status_and_leave_the_queue_empty() {
    let mut config = queue_config(1, "block");
    config["connector"]["http"]["max_body_kb"] = json!(16);
    let mut daemon = Daemon::start(config);
    let path = format!("/api/ingest/{SOURCE}/k1");

    let reply = daemon.post(&path, Some(TOKEN), br#"{"a": [1, 2"#);
    let error = assert_error(&reply, 400, "malformed JSON");
    let reason = error
        .strip_prefix("malformed JSON: ")
        .unwrap_or_else(|| panic!("400 error does not start with `malformed JSON: `: {error:?}"));
    assert!(!reason.trim().is_empty(), "no parser reason in {error:?}");

    let reply = daemon.post(&path, None, br#"{"a":1}"#);
    assert_error(&reply, 401, "missing token");

    let reply = daemon.post(&path, Some("wrong"), br#"{"a":1}"#);
    assert_error(&reply, 401, "wrong token");

    let reply = daemon.post("/api/ingest/nosuch/k1", Some(TOKEN), br#"{"a":1}"#);
    assert_error(&reply, 404, "unknown source");

    let reply = daemon.get("/api/nothing-here", None);
    assert_error(&reply, 404, "unknown path");

    let over = padded_payload("big", 20 * 1024);
    let reply = daemon.post(&path, Some(TOKEN), over.as_bytes());
    assert_error(&reply, 413, "20 KB body over max_body_kb 16");

    let reply = daemon.get(&path, Some(TOKEN));
    assert_error(&reply, 405, "GET on the ingest path");
    let allow = reply
        .header("allow")
        .unwrap_or_else(|| panic!("405 without Allow: {reply:?}"));
    assert!(allow.contains("POST"), "Allow {allow:?} does not name POST");

    let reply = daemon.get("/api/push/dead-letters", None);
    assert_error(
        &reply,
        404,
        "dead letters without an admin_token configured",
    );

    assert!(daemon.is_running(), "the daemon died on bad input");
    let status = daemon.status();
    let pq = &status["push_queue"];
    assert_eq!(u64_at(pq, "/rows"), 0, "{pq:#}");
    assert_eq!(u64_at(pq, "/used_bytes"), 0, "{pq:#}");
    assert_eq!(u64_at(ingest_source(&status), "/stored"), 0, "{status:#}");

    // And it still takes a good record.
    stored_id(&daemon.ingest("k2", r#"{"a":1}"#));
}

#[test]
fn restart_keeps_rows_order_and_accounting() {
    // The uplink's receiver is down, so the rows stay queued across the restart.
    let receiver = Receiver::start_down();
    let mut config = queue_config(8, "block");
    config["connector"]["push"] = json!({
        "url": receiver.url(),
        "batch_rows": 10,
        "retry_initial_ms": 50,
        "retry_max_ms": 200,
    });
    let mut daemon = Daemon::start(config);

    let ids: Vec<String> = (0..50)
        .map(|i| {
            let key = format!("k{i:03}");
            stored_id(&daemon.ingest(&key, &padded_payload(&key, 200 + i * 17)))
        })
        .collect();
    let before = daemon.status();
    assert_eq!(u64_at(&before, "/push_queue/rows"), 50, "{before:#}");

    let exit = daemon.stop();
    assert!(exit.success(), "SIGTERM must exit 0, got {exit}");
    daemon.restart();

    let after = daemon.status();
    assert_eq!(
        after["push_queue"], before["push_queue"],
        "push_queue before the restart (left) and after (right)"
    );
    assert_eq!(after["push_status"], after["push_queue"]);

    // The rows come out in the order they went in.
    receiver.up();
    wait_until(POLL_DEADLINE, "all 50 records at the receiver", || {
        receiver.has_all(&ids)
    });
    let arrived: Vec<String> = receiver
        .first_arrivals()
        .into_iter()
        .filter(|id| ids.contains(id))
        .collect();
    assert_eq!(arrived, ids, "arrival order differs from posting order");
    wait_until(POLL_DEADLINE, "the queue drained", || {
        let s = daemon.status();
        u64_at(&s, "/push_queue/rows") == 0 && u64_at(&s, "/push_queue/used_bytes") == 0
    });
}
