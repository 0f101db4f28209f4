//! The storage sink (local event history): durable before the 200, bounded by its quota
//! (evicted or refused, counted) and its retention, read back through `GET /api/events`, and
//! shown in `/api/status`. Drives the real binary.

mod common;

use std::collections::HashSet;
use std::thread;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const RETURNS: &str = "returns";
const RETURNS_TOKEN: &str = "returns-t0ken-0123";

/// `ingest/orders` (and `ingest/returns`) -> storage, with `storage` as given (or none), a
/// small push queue nothing reaches, and the admin token.
fn storage_config(storage: Option<Value>) -> Value {
    let mut config = queue_config(1, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["ingest"]["sources"] = json!([
        { "name": SOURCE, "token": TOKEN },
        { "name": RETURNS, "token": RETURNS_TOKEN },
    ]);
    config["flows"] = json!([{
        "id": "history",
        "nodes": [
            { "id": "orders", "kind": "source", "source": format!("ingest/{SOURCE}") },
            { "id": "returns", "kind": "source", "source": format!("ingest/{RETURNS}") },
            { "id": "keep", "kind": "sink", "sink": "storage" },
        ],
        "wires": [ { "from": "orders", "to": "keep" }, { "from": "returns", "to": "keep" } ],
    }]);
    if let Some(storage) = storage {
        config["storage"] = storage;
    }
    config
}

fn storage_sink(status: &Value) -> Value {
    named(status, "/sinks", "storage").clone()
}

#[test]
fn status_shows_storage_and_a_storage_sink() {
    // Defaults: 256 MiB, evict_oldest.
    let daemon = Daemon::start(storage_config(None));
    let status = daemon.status();
    let storage = &status["storage"];
    assert_eq!(u64_at(storage, "/quota_bytes"), 256 * MIB, "{storage:#}");
    assert_eq!(storage["on_full"], json!("evict_oldest"), "{storage:#}");
    for field in [
        "used_bytes",
        "rows",
        "blocked_total",
        "evicted_total",
        "expired_total",
        "write_errors_total",
    ] {
        assert_eq!(
            u64_at(storage, &format!("/{field}")),
            0,
            "{field}: {storage:#}"
        );
    }
    assert!(storage["fill_pct"].is_number(), "{storage:#}");
    assert_eq!(storage["blocking"], json!(false), "{storage:#}");
    assert_eq!(storage["level"], json!("ok"), "{storage:#}");
    let sink = storage_sink(&status);
    assert_eq!(u64_at(&sink, "/dropped"), 0, "{sink:#}");
    assert_eq!(u64_at(&sink, "/blocked"), 0, "{sink:#}");
    named(&status, "/sinks", "push");

    let id = assert_stored(&daemon.ingest("k1", r#"{"n":1}"#), "one record");
    let status = daemon.status();
    assert_eq!(u64_at(&status, "/storage/rows"), 1, "{status:#}");
    assert!(u64_at(&status, "/storage/used_bytes") > 0, "{status:#}");
    assert_eq!(u64_at(&status, "/push_queue/rows"), 0, "{status:#}");
    assert_eq!(event_ids(&daemon, &format!("ingest/{SOURCE}")), vec![id]);
    drop(daemon);

    // Configured.
    let daemon = Daemon::start(storage_config(Some(json!({
        "max_quota_mb": 3, "retention_days": 5, "on_full": "block",
    }))));
    let storage = daemon.status()["storage"].clone();
    assert_eq!(u64_at(&storage, "/quota_bytes"), 3 * MIB, "{storage:#}");
    assert_eq!(storage["on_full"], json!("block"), "{storage:#}");
}

#[test]
fn records_stored_by_a_flow_survive_kill_9_after_their_200() {
    let mut daemon = Daemon::start(storage_config(None));
    let mut ids = Vec::new();
    for i in 0..100 {
        let key = format!("k{i:03}");
        let reply = daemon.ingest(&key, &padded_payload(&key, 100 + i * 37));
        ids.push(assert_stored(&reply, &key));
    }
    let before = daemon.status()["storage"].clone();
    assert_eq!(u64_at(&before, "/rows"), 100, "{before:#}");

    daemon.kill9();
    daemon.restart();

    let rows = events(&daemon, &format!("source=ingest/{SOURCE}&limit=1000"));
    let got: HashSet<String> = rows
        .iter()
        .map(|r| r["id"].as_str().unwrap_or("").to_string())
        .collect();
    let want: HashSet<String> = ids.iter().cloned().collect();
    let lost: Vec<&String> = ids.iter().filter(|id| !got.contains(*id)).collect();
    assert!(
        lost.is_empty(),
        "acknowledged records lost by kill -9: {lost:?}"
    );
    assert_eq!(got, want, "rows after the restart");
    assert_eq!(rows.len(), 100, "duplicates after the restart");
    let ts: Vec<u64> = rows.iter().map(|r| u64_at(r, "/ts")).collect();
    assert!(
        ts.windows(2).all(|w| w[0] <= w[1]),
        "events are not in ts order: {ts:?}"
    );
    for row in &rows {
        let key = row["key"].as_str().unwrap_or("");
        assert_eq!(
            row["payload"],
            serde_json::from_str::<Value>(&padded_payload(
                key,
                100 + key[1..].parse::<usize>().expect("key number") * 37
            ))
            .expect("json"),
            "{row}"
        );
    }

    let after = daemon.status()["storage"].clone();
    assert_eq!(u64_at(&after, "/rows"), 100, "{after:#}");
    assert_eq!(
        u64_at(&after, "/used_bytes"),
        u64_at(&before, "/used_bytes"),
        "accounting after kill -9: before {before:#}, after {after:#}"
    );
    // Still takes records.
    assert_stored(&daemon.ingest("after", r#"{"n":1}"#), "after the restart");
}

#[test]
fn quota_eviction_is_counted_in_storage_evicted_total() {
    let daemon = Daemon::start(storage_config(Some(json!({
        "max_quota_mb": 1, "on_full": "evict_oldest",
    }))));
    let first = assert_stored(
        &daemon.ingest("first", &padded_payload("first", 1024)),
        "first",
    );

    // 2 MiB of 1 KB records from 8 clients.
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
                    match client.post(&url, Some(TOKEN), padded_payload(&key, 1024).as_bytes()) {
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
    assert!(bad.is_empty(), "evict_oldest takes every record: {bad:#?}");
    let last = assert_stored(
        &daemon.ingest("last", &padded_payload("last", 1024)),
        "last",
    );
    let posted = (CLIENTS * EACH + 2) as u64;

    let status = daemon.status();
    let storage = &status["storage"];
    let evicted = u64_at(storage, "/evicted_total");
    let rows = u64_at(storage, "/rows");
    assert!(evicted > 0, "2 MiB into 1 MiB evicted nothing: {storage:#}");
    assert_eq!(rows + evicted, posted, "kept or counted: {storage:#}");
    assert!(
        u64_at(storage, "/used_bytes") <= u64_at(storage, "/quota_bytes"),
        "{storage:#}"
    );
    assert_eq!(u64_at(storage, "/blocked_total"), 0, "{storage:#}");
    let sink = storage_sink(&status);
    assert_eq!(
        u64_at(&sink, "/dropped"),
        evicted,
        "evicted rows are lost rows: {sink:#} {storage:#}"
    );

    let ids = event_ids(&daemon, &format!("ingest/{SOURCE}"));
    assert_eq!(ids.len() as u64, rows, "events vs rows");
    assert!(!ids.contains(&first), "the oldest record was not evicted");
    assert!(ids.contains(&last), "the newest record was evicted");
}

#[test]
fn block_storage_at_its_quota_refuses_with_the_exact_503_naming_storage() {
    let daemon = Daemon::start(storage_config(Some(json!({
        "max_quota_mb": 1, "on_full": "block",
    }))));
    let (filled, refusal) = fill_until_refused(&daemon, "s");
    assert!(filled >= 256, "refused after only {filled} records of 1 KB");
    assert_retry(&refusal, "storage", "the first refusal");
    // 2 KB: more than the room a 1 KB refusal can leave.
    let reply = daemon.post(
        &format!("/api/ingest/{RETURNS}/r1"),
        Some(RETURNS_TOKEN),
        padded_payload("r1", 2048).as_bytes(),
    );
    assert_retry(
        &reply,
        "storage",
        "another source into the same full storage",
    );

    let status = daemon.status();
    let storage = &status["storage"];
    assert_eq!(u64_at(storage, "/rows"), filled, "{storage:#}");
    assert_eq!(u64_at(storage, "/blocked_total"), 2, "{storage:#}");
    assert_eq!(u64_at(storage, "/evicted_total"), 0, "{storage:#}");
    assert_eq!(storage["blocking"], json!(true), "{storage:#}");
    assert_eq!(storage["level"], json!("full"), "{storage:#}");
    assert!(
        u64_at(storage, "/used_bytes") <= MIB,
        "over the quota: {storage:#}"
    );
    let sink = storage_sink(&status);
    assert_eq!(u64_at(&sink, "/blocked"), 2, "{sink:#}");
    assert_eq!(u64_at(&sink, "/dropped"), 0, "{sink:#}");
    assert_eq!(
        u64_at(&status, "/engine/stats/backpressured"),
        2,
        "{status:#}"
    );
    assert_eq!(
        u64_at(named(&status, "/sinks", "push"), "/blocked"),
        0,
        "{status:#}"
    );
}

/// Retention cannot expire anything in a black-box test: `retention_days` is validated to
/// 1..=3650 and a record is stamped with the current time, so nothing gets a day old in a
/// test run. What can be checked: the sweep at start keeps what is within the retention (a
/// unit mix-up, e.g. days taken as seconds, would expire everything here).
#[test]
fn sweep_at_start_keeps_records_within_the_retention() {
    let mut daemon = Daemon::start(storage_config(Some(json!({
        "max_quota_mb": 8, "retention_days": 1,
    }))));
    let ids: HashSet<String> = (0..10)
        .map(|i| assert_stored(&daemon.ingest(&format!("k{i}"), r#"{"n":1}"#), "record"))
        .collect();
    let exit = daemon.stop();
    assert!(exit.success(), "SIGTERM must exit 0, got {exit}");
    daemon.restart();
    // The sweep runs in the background after the start: watch for two seconds that it
    // expires nothing.
    let expired = poll_until(Duration::from_secs(2), || {
        u64_at(&daemon.status(), "/storage/expired_total") > 0
    });
    let storage = daemon.status()["storage"].clone();
    assert!(
        !expired,
        "the start sweep expired fresh records: {storage:#}"
    );
    assert_eq!(u64_at(&storage, "/expired_total"), 0, "{storage:#}");
    assert_eq!(u64_at(&storage, "/rows"), 10, "{storage:#}");
    let got: HashSet<String> = event_ids(&daemon, &format!("ingest/{SOURCE}"))
        .into_iter()
        .collect();
    assert_eq!(got, ids);
}

#[test]
fn events_api_filters_by_source_since_and_limit() {
    let daemon = Daemon::start(storage_config(None));
    let post = |source: &str, token: &str, key: &str| {
        let reply = daemon.post(
            &format!("/api/ingest/{source}/{key}"),
            Some(token),
            format!(r#"{{"key":"{key}"}}"#).as_bytes(),
        );
        assert_stored(&reply, key)
    };
    let early: Vec<String> = (0..5)
        .map(|i| post(SOURCE, TOKEN, &format!("e{i}")))
        .collect();
    let rows = events(&daemon, &format!("source=ingest/{SOURCE}"));
    let last_early = u64_at(&rows[rows.len() - 1], "/ts");
    // The later records get a later millisecond (a clock, not a readiness, condition).
    wait_until(POLL_DEADLINE, "the clock moved on", || {
        unix_ms() > last_early + 5
    });
    let late: Vec<String> = (0..5)
        .map(|i| post(SOURCE, TOKEN, &format!("l{i}")))
        .collect();
    let returns: Vec<String> = (0..2)
        .map(|i| post(RETURNS, RETURNS_TOKEN, &format!("r{i}")))
        .collect();

    let ids = |query: &str| -> HashSet<String> {
        events(&daemon, query)
            .iter()
            .map(|r| r["id"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let set = |v: &[String]| -> HashSet<String> { v.iter().cloned().collect() };

    let all_orders = events(&daemon, &format!("source=ingest/{SOURCE}"));
    assert_eq!(all_orders.len(), 10, "{all_orders:#?}");
    for row in &all_orders {
        let fields: HashSet<&str> = row
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            fields,
            HashSet::from(["id", "source", "key", "ts", "payload"]),
            "{row}"
        );
        assert_eq!(row["source"], json!(format!("ingest/{SOURCE}")), "{row}");
    }
    // ts ascending: the early ones first.
    let first_five: HashSet<String> = all_orders[..5]
        .iter()
        .map(|r| r["id"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(first_five, set(&early), "ts ascending");

    assert_eq!(
        ids(&format!("source=ingest/{SOURCE}&since={}", last_early + 1)),
        set(&late),
        "since"
    );
    assert_eq!(
        ids(&format!("source=ingest/{RETURNS}")),
        set(&returns),
        "by source"
    );
    let limited = events(&daemon, &format!("source=ingest/{SOURCE}&limit=3"));
    assert_eq!(limited.len(), 3, "limit: {limited:#?}");
    assert!(
        limited
            .iter()
            .all(|r| early.contains(&r["id"].as_str().unwrap_or("").to_string())),
        "limit keeps the oldest: {limited:#?}"
    );
    let everything = ids("limit=100");
    assert_eq!(everything.len(), 12, "no source: every source");
}
