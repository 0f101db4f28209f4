//! The pipeline dead-letter queue: a failing node parks the record; it is listed, corrected,
//! replayed into its sink or resolved without replay; the cap trims resolved rows first, and
//! an open row trimmed is a loss booked in the ledger, counted and alerted; the admin endpoints
//! need the admin token. Drives the real binary.

mod common;

use common::*;
use serde_json::{json, Value};

const RETURNS: &str = "returns";
const RETURNS_TOKEN: &str = "returns-t0ken-0123";

/// A flow `id`: `source` -> map `tag` (sets `payload.ref` from `payload.order`, so a record
/// without `order` fails there) -> sink `out`.
fn tagging_flow(id: &str, source: &str, sink: &str) -> Value {
    json!({
        "id": id,
        "nodes": [
            { "id": "in", "kind": "source", "source": source },
            { "id": "tag", "kind": "map", "set": { "payload.ref": "{{payload.order}}" } },
            { "id": "out", "kind": "sink", "sink": sink },
        ],
        "wires": [ { "from": "in", "to": "tag" }, { "from": "tag", "to": "out" } ],
    })
}

/// Flow `orders` (ingest/orders -> tag -> push, drained to `receiver`) and flow `returns`
/// (ingest/returns -> tag -> storage); the admin token; `max_rows` if given.
fn dlq_config(receiver: &Receiver, max_rows: Option<u64>) -> Value {
    let mut config = queue_config(8, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["connector"]["push"] = json!({
        "url": receiver.url(),
        "batch_rows": 10,
        "retry_initial_ms": 50,
        "retry_max_ms": 300,
    });
    config["ingest"]["sources"] = json!([
        { "name": SOURCE, "token": TOKEN },
        { "name": RETURNS, "token": RETURNS_TOKEN },
    ]);
    config["flows"] = json!([
        tagging_flow("orders", &format!("ingest/{SOURCE}"), "push"),
        tagging_flow("returns", &format!("ingest/{RETURNS}"), "storage"),
    ]);
    if let Some(max_rows) = max_rows {
        config["dead_letters"] = json!({ "max_rows": max_rows });
    }
    config
}

/// Posts a record without `order` to `ingest/orders` (answered 200: the failure is the
/// pipeline's) and returns (record id, dead-letter id).
fn park(daemon: &Daemon, key: &str) -> (String, u64) {
    park_at(daemon, SOURCE, TOKEN, key)
}

fn park_at(daemon: &Daemon, source: &str, token: &str, key: &str) -> (String, u64) {
    let reply = daemon.post(
        &format!("/api/ingest/{source}/{key}"),
        Some(token),
        format!(r#"{{"amount":5,"key":"{key}"}}"#).as_bytes(),
    );
    assert_eq!(reply.status, 200, "{key}: {reply:?}");
    let body = reply.json();
    assert_eq!(body["ok"], json!(true), "{key}: {body}");
    let id = body["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{key}: no string id in {body}"))
        .to_string();
    let row = dead_letter_rows(daemon, "limit=1000")
        .into_iter()
        .find(|r| r["record"]["id"] == json!(id))
        .unwrap_or_else(|| panic!("{key}: record {id} is not in the dead-letter queue"));
    (id, u64_at(&row, "/id"))
}

fn assert_counts(daemon: &Daemon, open: u64, resolved: u64, parked: u64, trimmed: u64) {
    let counts = dead_letters(daemon, "")["counts"].clone();
    let mut four = counts.clone();
    if let Some(m) = four.as_object_mut() {
        m.remove("trimmed_open_total");
    }
    assert_eq!(
        four,
        json!({ "open": open, "resolved": resolved, "parked_total": parked, "trimmed_total": trimmed }),
        "counts of GET /api/dead-letters"
    );
    let status = daemon.status();
    assert_eq!(
        status["dead_letters"], counts,
        "dead_letters in /api/status"
    );
}

fn replay(daemon: &Daemon, id: u64) -> Reply {
    daemon.post(
        &format!("/api/dead-letters/{id}/replay"),
        Some(ADMIN_TOKEN),
        b"",
    )
}

#[test]
fn failing_map_node_parks_the_record_and_list_and_get_show_it() {
    let receiver = Receiver::start();
    let daemon = Daemon::start(dlq_config(&receiver, None));
    let before = unix_ms();
    let (record_id, id) = park(&daemon, "k1");

    let list = dead_letters(&daemon, "");
    let rows = list["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{list:#}");
    let row = &rows[0];
    assert_eq!(u64_at(row, "/id"), id, "{row:#}");
    assert_eq!(row["flow"], json!("orders"), "{row:#}");
    assert_eq!(row["node"], json!("tag"), "{row:#}");
    assert_eq!(row["state"], json!("open"), "{row:#}");
    assert_eq!(row["accepted"], json!(false), "{row:#}");
    assert!(row["resolution"].is_null(), "{row:#}");
    assert!(row["resolved_at_ms"].is_null(), "{row:#}");
    let reason = row["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("order"),
        "the reason names the missing field: {row:#}"
    );
    let at = u64_at(row, "/at_ms");
    assert!(
        (before..=unix_ms()).contains(&at),
        "at_ms {at} is not the unix ms time of the failure: {row:#}"
    );
    let record = &row["record"];
    assert_eq!(record["id"], json!(record_id), "{row:#}");
    assert_eq!(
        record["source"],
        json!(format!("ingest/{SOURCE}")),
        "{row:#}"
    );
    assert_eq!(record["key"], json!("k1"), "{row:#}");
    assert_eq!(
        record["payload"],
        json!({"amount": 5, "key": "k1"}),
        "{row:#}"
    );
    assert!(record["ts"].is_u64(), "{row:#}");

    assert_eq!(dead_letter(&daemon, id), *row, "GET by id = the listed row");
    let missing = daemon.get(
        &format!("/api/dead-letters/{}", id + 1000),
        Some(ADMIN_TOKEN),
    );
    assert_error_reply(&missing, 404, "GET of an id that does not exist");

    // Filters.
    assert_eq!(dead_letter_ids(&daemon, "state=open"), vec![id]);
    assert!(dead_letter_ids(&daemon, "state=resolved").is_empty());
    assert_eq!(dead_letter_ids(&daemon, "flow=orders"), vec![id]);
    assert!(dead_letter_ids(&daemon, "flow=returns").is_empty());
    assert!(dead_letter_ids(&daemon, &format!("after={id}")).is_empty());

    assert_counts(&daemon, 1, 0, 1, 0);
    let status = daemon.status();
    assert_eq!(
        u64_at(&status, "/engine/stats/dead_lettered"),
        1,
        "{status:#}"
    );
    assert_eq!(
        u64_at(&status, "/engine/stats/node_errors/orders~1tag"),
        1,
        "{status:#}"
    );
    assert_eq!(
        u64_at(&status, "/push_queue/rows"),
        0,
        "nothing reached push"
    );
    assert!(receiver.records().is_empty());
}

#[test]
fn listing_pages_with_after_and_limit_oldest_first() {
    let receiver = Receiver::start();
    let daemon = Daemon::start(dlq_config(&receiver, None));
    let ids: Vec<u64> = (0..5).map(|i| park(&daemon, &format!("p{i}")).1).collect();
    assert_eq!(dead_letter_ids(&daemon, ""), ids, "oldest first");
    assert_eq!(dead_letter_ids(&daemon, "limit=2"), ids[..2].to_vec());
    assert_eq!(
        dead_letter_ids(&daemon, &format!("after={}&limit=2", ids[1])),
        ids[2..4].to_vec()
    );
    assert_eq!(
        dead_letter_ids(&daemon, &format!("after={}", ids[3])),
        ids[4..].to_vec()
    );
}

#[test]
fn corrected_payload_replayed_arrives_at_the_push_receiver_and_resolves_the_entry() {
    let receiver = Receiver::start();
    let daemon = Daemon::start(dlq_config(&receiver, None));
    let (record_id, id) = park(&daemon, "k1");

    // Malformed corrections are refused and change nothing.
    let reply = daemon.put(
        &format!("/api/dead-letters/{id}"),
        Some(ADMIN_TOKEN),
        br#"{"order": "#,
    );
    assert_error_reply(&reply, 400, "PUT of malformed JSON");
    let reply = daemon.put(
        &format!("/api/dead-letters/{}", id + 1000),
        Some(ADMIN_TOKEN),
        br#"{"order":7}"#,
    );
    assert_error_reply(&reply, 404, "PUT to an id that does not exist");

    let corrected = json!({"order": 7, "amount": 5, "key": "k1"});
    let reply = daemon.put(
        &format!("/api/dead-letters/{id}"),
        Some(ADMIN_TOKEN),
        corrected.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.json(), json!({"ok": true}), "{reply:?}");
    let entry = dead_letter(&daemon, id);
    assert_eq!(entry["record"]["payload"], corrected, "{entry:#}");
    assert_eq!(entry["record"]["id"], json!(record_id), "{entry:#}");
    assert_eq!(
        entry["state"],
        json!("open"),
        "a correction is not a replay"
    );

    let reply = replay(&daemon, id);
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(
        reply.json(),
        json!({"ok": true, "result": "stored"}),
        "{reply:?}"
    );

    wait_until(POLL_DEADLINE, "the replayed record at the receiver", || {
        receiver.has_all(std::slice::from_ref(&record_id))
    });
    let arrived = receiver
        .records()
        .into_iter()
        .find(|r| r["id"] == json!(record_id))
        .expect("arrived");
    assert_eq!(
        arrived["payload"],
        json!({"order": 7, "amount": 5, "key": "k1", "ref": 7}),
        "the corrected record went through the map again: {arrived}"
    );
    assert_eq!(arrived["key"], json!("k1"), "{arrived}");
    assert_eq!(
        arrived["source"],
        json!(format!("ingest/{SOURCE}")),
        "{arrived}"
    );

    let entry = dead_letter(&daemon, id);
    assert_eq!(entry["state"], json!("resolved"), "{entry:#}");
    assert_eq!(entry["resolution"], json!("replayed"), "{entry:#}");
    assert!(entry["resolved_at_ms"].is_u64(), "{entry:#}");
    assert_counts(&daemon, 0, 1, 1, 0);
    assert_eq!(dead_letter_ids(&daemon, "state=resolved"), vec![id]);
}

#[test]
fn replay_that_fails_again_keeps_the_entry_open_without_a_new_one() {
    let receiver = Receiver::start();
    let daemon = Daemon::start(dlq_config(&receiver, None));
    let (_, id) = park(&daemon, "k1");

    let reply = replay(&daemon, id);
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(
        reply.json(),
        json!({"ok": true, "result": "dead_lettered"}),
        "{reply:?}"
    );
    let entry = dead_letter(&daemon, id);
    assert_eq!(entry["state"], json!("open"), "{entry:#}");
    assert_eq!(dead_letter_ids(&daemon, ""), vec![id], "no new entry");
    assert_counts(&daemon, 1, 0, 1, 0);
    assert_eq!(u64_at(&daemon.status(), "/push_queue/rows"), 0);
}

#[test]
fn delete_resolves_the_entry_without_replaying_it() {
    let receiver = Receiver::start();
    let daemon = Daemon::start(dlq_config(&receiver, None));
    let (_, id) = park(&daemon, "k1");
    let (_, kept) = park(&daemon, "k2");

    let reply = daemon.delete(&format!("/api/dead-letters/{id}"), Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.json()["ok"], json!(true), "{reply:?}");
    let reply = daemon.delete(
        &format!("/api/dead-letters/{}", id + 1000),
        Some(ADMIN_TOKEN),
    );
    assert_error_reply(&reply, 404, "DELETE of an id that does not exist");

    let entry = dead_letter(&daemon, id);
    assert_eq!(entry["state"], json!("resolved"), "{entry:#}");
    assert_eq!(entry["resolution"], json!("deleted"), "{entry:#}");
    assert!(entry["resolved_at_ms"].is_u64(), "{entry:#}");
    assert_eq!(dead_letter(&daemon, kept)["state"], json!("open"));
    assert_counts(&daemon, 1, 1, 2, 0);

    let status = daemon.status();
    assert_eq!(u64_at(&status, "/push_queue/rows"), 0, "{status:#}");
    assert_eq!(u64_at(&status, "/uplink/sent_total"), 0, "{status:#}");
    assert!(receiver.records().is_empty(), "a deleted entry was sent");
}

#[test]
fn replay_all_of_a_flow_replays_its_open_entries_into_storage_and_leaves_the_rest() {
    let receiver = Receiver::start();
    let daemon = Daemon::start(dlq_config(&receiver, None));
    let (r1, d1) = park_at(&daemon, RETURNS, RETURNS_TOKEN, "r1");
    let (r2, d2) = park_at(&daemon, RETURNS, RETURNS_TOKEN, "r2");
    let (_, d3) = park_at(&daemon, RETURNS, RETURNS_TOKEN, "r3");
    let (_, o1) = park(&daemon, "o1");
    for (id, order) in [(d1, 1), (d2, 2)] {
        let reply = daemon.put(
            &format!("/api/dead-letters/{id}"),
            Some(ADMIN_TOKEN),
            format!(r#"{{"order":{order}}}"#).as_bytes(),
        );
        assert_eq!(reply.status, 200, "{reply:?}");
    }

    let reply = daemon.post(
        "/api/dead-letters/replay?flow=returns",
        Some(ADMIN_TOKEN),
        b"",
    );
    assert_eq!(reply.status, 200, "{reply:?}");
    let counts = reply.json();
    assert_eq!(u64_at(&counts, "/replayed"), 2, "{reply:?}");
    assert_eq!(u64_at(&counts, "/failed"), 1, "{reply:?}");

    let mut stored = event_ids(&daemon, &format!("ingest/{RETURNS}"));
    stored.sort();
    let mut want = vec![r1, r2];
    want.sort();
    assert_eq!(stored, want, "the two corrected records are in storage");
    let payloads: Vec<Value> = events(&daemon, &format!("source=ingest/{RETURNS}"))
        .iter()
        .map(|r| r["payload"].clone())
        .collect();
    assert!(
        payloads.contains(&json!({"order": 1, "ref": 1})),
        "{payloads:?}"
    );

    assert_eq!(dead_letter(&daemon, d1)["resolution"], json!("replayed"));
    assert_eq!(dead_letter(&daemon, d2)["resolution"], json!("replayed"));
    assert_eq!(dead_letter(&daemon, d3)["state"], json!("open"));
    assert_eq!(
        dead_letter(&daemon, o1)["state"],
        json!("open"),
        "another flow's entry is not replayed"
    );
    assert_eq!(dead_letter_ids(&daemon, "state=open"), vec![d3, o1]);
    assert_counts(&daemon, 2, 2, 4, 0);
    assert_eq!(u64_at(&daemon.status(), "/push_queue/rows"), 0);
}

#[test]
fn trimming_at_max_rows_drops_the_oldest_resolved_rows_first_then_the_oldest_open() {
    let receiver = Receiver::start();
    let daemon = Daemon::start(dlq_config(&receiver, Some(3)));
    let a = park(&daemon, "a").1;
    let b = park(&daemon, "b").1;
    let c = park(&daemon, "c").1;
    assert_counts(&daemon, 3, 0, 3, 0);

    // b is resolved: it goes first, though a is older.
    let reply = daemon.delete(&format!("/api/dead-letters/{b}"), Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "{reply:?}");
    let d = park(&daemon, "d").1;
    assert_eq!(dead_letter_ids(&daemon, ""), vec![a, c, d]);
    assert_counts(&daemon, 3, 0, 4, 1);
    let gone = daemon.get(&format!("/api/dead-letters/{b}"), Some(ADMIN_TOKEN));
    assert_error_reply(&gone, 404, "the trimmed entry");

    // Nothing resolved: the oldest open row goes.
    let e = park(&daemon, "e").1;
    assert_eq!(dead_letter_ids(&daemon, ""), vec![c, d, e]);
    assert_counts(&daemon, 3, 0, 5, 2);

    // Two resolved rows: the older of them goes, the open e stays.
    for id in [d, c] {
        let reply = daemon.delete(&format!("/api/dead-letters/{id}"), Some(ADMIN_TOKEN));
        assert_eq!(reply.status, 200, "{reply:?}");
    }
    let f = park(&daemon, "f").1;
    assert_eq!(dead_letter_ids(&daemon, ""), vec![d, e, f]);
    assert_eq!(dead_letter(&daemon, d)["state"], json!("resolved"));
    assert_counts(&daemon, 2, 1, 6, 3);
}

#[test]
fn an_open_dead_letter_trimmed_at_the_cap_is_a_loss_booked_in_the_ledger_counted_and_alerted() {
    let receiver = Receiver::start();
    let mut config = dlq_config(&receiver, Some(2));
    config["telemetry"] = json!({ "alerts": { "check_interval_secs": 1 } });
    let daemon = Daemon::start(config);
    park(&daemon, "a");
    park(&daemon, "b");
    // At the cap, nothing resolved: the open `a` goes, and its record with it.
    let c = park(&daemon, "c").1;
    let source = format!("ingest/{SOURCE}");
    let counts = dead_letters(&daemon, "")["counts"].clone();
    assert_eq!(counts["trimmed_open_total"], 1, "{counts}");
    assert_eq!(daemon.status()["dead_letters"], counts);
    let l = assert_balanced(&ledger(&daemon, false), "an open dead letter trimmed");
    assert_eq!(source_figure(&l, &source, "/acked"), 3, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/dead_lettered"), 2, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/losses/trimmed"), 1, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/lost"), 1, "{l:#}");
    let metrics = daemon.metrics();
    assert_eq!(
        metric(&metrics, "opex_connector_dead_letters_trimmed_open_total"),
        Some(1.0),
        "{metrics}"
    );
    assert!(
        daemon
            .stderr()
            .contains("open dead letter trimmed at the cap, record lost"),
        "the loss is logged"
    );
    wait_until(POLL_DEADLINE, "the trim alerted", || {
        daemon.status()["alerts"].as_array().is_some_and(|a| {
            a.iter()
                .any(|x| x["component"] == "dead_letters.trimmed_open")
        })
    });

    // A resolved entry trimmed is no loss: nothing more is booked.
    let reply = daemon.delete(&format!("/api/dead-letters/{c}"), Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "{reply:?}");
    park(&daemon, "d");
    let counts = dead_letters(&daemon, "")["counts"].clone();
    assert_eq!(counts["trimmed_total"], 2, "{counts}");
    assert_eq!(counts["trimmed_open_total"], 1, "{counts}");
    let l = assert_balanced(&ledger(&daemon, false), "a resolved dead letter trimmed");
    assert_eq!(source_figure(&l, &source, "/dead_lettered"), 3, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/losses/trimmed"), 1, "{l:#}");
}

#[test]
fn admin_endpoints_answer_404_without_an_admin_token_and_401_with_a_wrong_one() {
    let requests: [(&str, &str, Option<&[u8]>); 8] = [
        ("GET", "/api/dead-letters", None),
        ("GET", "/api/dead-letters?state=open", None),
        ("GET", "/api/dead-letters/1", None),
        ("PUT", "/api/dead-letters/1", Some(br#"{"order":1}"#)),
        ("POST", "/api/dead-letters/1/replay", Some(b"")),
        ("POST", "/api/dead-letters/replay?flow=orders", Some(b"")),
        ("DELETE", "/api/dead-letters/1", None),
        ("GET", "/api/events?source=ingest/orders", None),
    ];

    // No admin_token configured: disabled, whatever the caller sends.
    let receiver = Receiver::start();
    let mut config = dlq_config(&receiver, None);
    config["connector"]["http"]
        .as_object_mut()
        .expect("http")
        .remove("admin_token");
    let daemon = Daemon::start(config);
    park_without_admin(&daemon);
    for (method, path, body) in requests {
        for token in [None, Some(ADMIN_TOKEN)] {
            let reply = daemon.request(method, path, token, &[], body);
            assert_error_reply(
                &reply,
                404,
                &format!("{method} {path} without admin_token configured, token {token:?}"),
            );
        }
    }
    drop(daemon);

    // Configured: a missing or wrong token is 401 and changes nothing.
    let daemon = Daemon::start(dlq_config(&receiver, None));
    let (_, id) = park(&daemon, "k1");
    for (method, path, body) in requests {
        let path = path.replace("/1", &format!("/{id}"));
        for token in [None, Some("wrong-t0ken"), Some(TOKEN)] {
            let reply = daemon.request(method, &path, token, &[], body);
            assert_error_reply(
                &reply,
                401,
                &format!("{method} {path} with token {token:?}"),
            );
        }
    }
    let entry = dead_letter(&daemon, id);
    assert_eq!(entry["state"], json!("open"), "{entry:#}");
    assert_eq!(
        entry["record"]["payload"],
        json!({"amount": 5, "key": "k1"}),
        "{entry:#}"
    );
    assert_counts(&daemon, 1, 0, 1, 0);
}

/// Parks a record where the admin API is off, seen through `/api/status` only.
fn park_without_admin(daemon: &Daemon) {
    let reply = daemon.ingest("k1", r#"{"amount":5}"#);
    assert_eq!(reply.status, 200, "{reply:?}");
    let status = daemon.status();
    assert_eq!(u64_at(&status, "/dead_letters/open"), 1, "{status:#}");
}
