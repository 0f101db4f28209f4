//! Signed webhooks (`POST /api/hooks/{name}`): the signature and its timestamp are checked
//! before anything else happens, and a copy of a request seen before is never stored twice;
//! `on_done` answers the real verdict, `on_receipt` answers first and parks what it then
//! cannot handle. Drives the real binary.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// Flow `pay`: the webhook straight into storage.
fn to_storage() -> Value {
    json!([{
        "id": "pay",
        "nodes": [
            { "id": "in", "kind": "source", "source": format!("webhook/{HOOK}") },
            { "id": "keep", "kind": "sink", "sink": "storage" },
        ],
        "wires": [ { "from": "in", "to": "keep" } ],
    }])
}

/// Flows `tele` (ingest -> push) and `pay` (webhook -> push): the ingest source fills the
/// push queue, the webhook then meets it full.
fn both_to_push() -> Value {
    json!([
        {
            "id": "tele",
            "nodes": [
                { "id": "in", "kind": "source", "source": format!("ingest/{SOURCE}") },
                { "id": "up", "kind": "sink", "sink": "push" },
            ],
            "wires": [ { "from": "in", "to": "up" } ],
        },
        {
            "id": "pay",
            "nodes": [
                { "id": "in", "kind": "source", "source": format!("webhook/{HOOK}") },
                { "id": "up", "kind": "sink", "sink": "push" },
            ],
            "wires": [ { "from": "in", "to": "up" } ],
        },
    ])
}

/// A 1 MiB `block` push queue (no uplink), the admin token, the webhook, and `flows`.
fn hook_config(respond: &str, flows: Value) -> Value {
    let mut config = queue_config(1, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["webhooks"] = json!([webhook(HOOK, HOOK_SECRET, respond)]);
    config["flows"] = flows;
    config
}

fn hook_source() -> String {
    format!("webhook/{HOOK}")
}

/// Checks the four counters of `engine.webhooks[]` of the test hook; `received` counts at
/// least what was answered 200 or 503.
fn assert_hook_counters(daemon: &Daemon, accepted: u64, backpressured: u64, rejected: u64) {
    let status = daemon.status();
    let hook = webhook_stats(&status, HOOK);
    assert_eq!(u64_at(&hook, "/accepted"), accepted, "accepted: {hook:#}");
    assert_eq!(
        u64_at(&hook, "/backpressured"),
        backpressured,
        "backpressured: {hook:#}"
    );
    assert_eq!(
        u64_at(&hook, "/rejected_signature"),
        rejected,
        "rejected_signature: {hook:#}"
    );
    assert!(
        u64_at(&hook, "/received") >= accepted + backpressured,
        "received counts fewer than were answered: {hook:#}"
    );
}

#[test]
fn signing_helper_matches_the_sha256_and_rfc_4231_hmac_vectors() {
    assert_eq!(
        hex(&sha256(b"abc")),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(
        hex(&sha256(&[b'a'; 1000])),
        "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3"
    );
    // RFC 4231 test case 2.
    assert_eq!(
        hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    // RFC 4231 test case 6: a key longer than the block is hashed first.
    assert_eq!(
        hex(&hmac_sha256(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First"
        )),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    );
    assert_eq!(
        signature("Jefe", 1_700_000_000, b"{}"),
        format!(
            "t=1700000000,v1={}",
            hex(&hmac_sha256(b"Jefe", b"1700000000.{}"))
        )
    );
    assert_eq!(
        signature_keyed("Jefe", 1_700_000_000, "ord-1", b"{}"),
        format!(
            "t=1700000000,v1={}",
            hex(&hmac_sha256(b"Jefe", b"1700000000.ord-1.{}"))
        )
    );
}

#[test]
fn good_signature_on_done_answers_200_stored_after_the_record_is_in_storage() {
    let daemon = Daemon::start(hook_config("on_done", to_storage()));

    let keyed_body = r#"{"order":1001,"amount":250.5,"note":"Grüße"}"#;
    let keyed = assert_stored(
        &daemon.hook_keyed(HOOK, HOOK_SECRET, "ord-1001", keyed_body),
        "signed, with X-Opex-Key",
    );
    let plain_body = r#"{"order":1002}"#;
    let plain = assert_stored(
        &daemon.hook(HOOK, HOOK_SECRET, plain_body),
        "signed, without X-Opex-Key",
    );

    // on_done answered after the commit: the records are readable right away.
    let rows = events(&daemon, &format!("source={}&limit=100", hook_source()));
    assert_eq!(rows.len(), 2, "{rows:#?}");
    let find = |id: &str| {
        rows.iter()
            .find(|r| r["id"] == json!(id))
            .unwrap_or_else(|| panic!("record {id} not in storage: {rows:#?}"))
            .clone()
    };
    let row = find(&keyed);
    assert_eq!(row["source"], json!(hook_source()), "{row}");
    assert_eq!(row["key"], json!("ord-1001"), "key = X-Opex-Key: {row}");
    assert_eq!(
        row["payload"],
        serde_json::from_str::<Value>(keyed_body).expect("json"),
        "{row}"
    );
    assert!(row["ts"].is_u64(), "ts is unix ms: {row}");
    let row = find(&plain);
    assert_eq!(
        row["key"],
        json!(plain),
        "without X-Opex-Key the key is the id: {row}"
    );
    assert_eq!(row["payload"], json!({"order": 1002}), "{row}");

    assert_hook_counters(&daemon, 2, 0, 0);
    let status = daemon.status();
    assert_eq!(u64_at(&status, "/storage/rows"), 2, "{status:#}");
    assert_eq!(u64_at(&status, "/push_queue/rows"), 0, "{status:#}");
}

#[test]
fn bad_signature_is_401_and_nothing_is_stored() {
    let daemon = Daemon::start(hook_config("on_done", to_storage()));
    let body = br#"{"order":1}"#;
    let now = unix_secs();

    let wrong_secret = signature("whsec_someone_else_entirely", now, body);
    let other_body = signature(HOOK_SECRET, now, br#"{"order":2}"#);
    let good = signature(HOOK_SECRET, now, body);
    let flipped = {
        // Same length, one hex digit changed.
        let (head, digest) = good.split_once(",v1=").expect("v1");
        let mut digest = digest.to_string();
        let last = if digest.ends_with('0') { "1" } else { "0" };
        digest.replace_range(digest.len() - 1.., last);
        format!("{head},v1={digest}")
    };
    let cases = [
        ("signed with another secret", wrong_secret),
        ("signature of another body", other_body),
        ("one hex digit changed", flipped),
        ("not hex", format!("t={now},v1=zzzz")),
        ("no v1", format!("t={now}")),
        ("garbage", "nonsense".to_string()),
    ];
    for (what, sig) in &cases {
        let reply = daemon.hook_raw(HOOK, &[("X-Opex-Signature", sig)], body);
        assert_error_reply(&reply, 401, what);
    }

    assert!(
        events(&daemon, &format!("source={}", hook_source())).is_empty(),
        "a rejected request was stored"
    );
    let status = daemon.status();
    assert_eq!(u64_at(&status, "/storage/rows"), 0, "{status:#}");
    assert_eq!(
        u64_at(&status, "/dead_letters/parked_total"),
        0,
        "{status:#}"
    );
    assert_hook_counters(&daemon, 0, 0, cases.len() as u64);

    // The good signature of the same body still goes through afterwards.
    let reply = daemon.hook_raw(HOOK, &[("X-Opex-Signature", &good)], body);
    assert_stored(&reply, "the correctly signed request");
    assert_hook_counters(&daemon, 1, 0, cases.len() as u64);
}

#[test]
fn missing_signature_header_is_401() {
    let daemon = Daemon::start(hook_config("on_done", to_storage()));
    let body = br#"{"order":1}"#;
    let reply = daemon.hook_raw(HOOK, &[], body);
    assert_error_reply(&reply, 401, "no X-Opex-Signature");
    let reply = daemon.hook_raw(HOOK, &[("X-Opex-Signature", "")], body);
    assert_error_reply(&reply, 401, "empty X-Opex-Signature");
    // A bearer token is no substitute for the signature.
    let reply = daemon.request(
        "POST",
        &format!("/api/hooks/{HOOK}"),
        Some(ADMIN_TOKEN),
        &[],
        Some(body),
    );
    assert_error_reply(&reply, 401, "admin bearer token, no signature");

    assert!(events(&daemon, &format!("source={}", hook_source())).is_empty());
    assert_hook_counters(&daemon, 0, 0, 3);
}

#[test]
fn stale_timestamp_outside_the_tolerance_is_401_on_either_side() {
    // tolerance_secs: 300
    let daemon = Daemon::start(hook_config("on_done", to_storage()));
    let now = unix_secs();
    for (what, t, n) in [
        ("an hour old", now - 3600, 1),
        ("six minutes old", now - 360, 2),
        ("an hour ahead", now + 3600, 3),
        ("six minutes ahead", now + 360, 4),
    ] {
        let body = format!(r#"{{"order":{n}}}"#);
        let sig = signature(HOOK_SECRET, t, body.as_bytes());
        let reply = daemon.hook_raw(HOOK, &[("X-Opex-Signature", &sig)], body.as_bytes());
        assert_error_reply(&reply, 401, what);
    }
    assert!(events(&daemon, &format!("source={}", hook_source())).is_empty());

    // Within the tolerance on both sides: accepted.
    for (what, t, n) in [
        ("a minute old", now - 60, 10),
        ("a minute ahead", now + 60, 11),
    ] {
        let body = format!(r#"{{"order":{n}}}"#);
        let sig = signature(HOOK_SECRET, t, body.as_bytes());
        let reply = daemon.hook_raw(HOOK, &[("X-Opex-Signature", &sig)], body.as_bytes());
        assert_stored(&reply, what);
    }
    assert_hook_counters(&daemon, 2, 0, 4);
}

#[test]
fn a_replayed_identical_request_gets_the_first_answer_and_is_stored_once() {
    let daemon = Daemon::start(hook_config("on_done", to_storage()));
    let body = br#"{"order":77,"amount":12}"#;
    let t = unix_secs();
    let sig = signature(HOOK_SECRET, t, body);

    let first = assert_stored(
        &daemon.hook_raw(HOOK, &[("X-Opex-Signature", &sig)], body),
        "first delivery",
    );
    for i in 0..2 {
        let reply = daemon.hook_raw(HOOK, &[("X-Opex-Signature", &sig)], body);
        let again = assert_stored(&reply, &format!("copy {i} of the same signed request"));
        assert_eq!(
            again, first,
            "copy {i} is not answered as the first: {reply:?}"
        );
    }
    assert_eq!(
        event_ids(&daemon, &hook_source()),
        vec![first.clone()],
        "a copy was stored"
    );

    // A sender's retry signs again with a new timestamp: a new request, stored.
    let resigned = signature(HOOK_SECRET, t - 1, body);
    let second = assert_stored(
        &daemon.hook_raw(HOOK, &[("X-Opex-Signature", &resigned)], body),
        "the same body signed at another time",
    );
    assert_ne!(first, second);
    assert_hook_counters(&daemon, 2, 0, 0);
    let hook = webhook_stats(&daemon.status(), HOOK);
    assert_eq!(u64_at(&hook, "/repeated"), 2, "{hook:#}");
}

#[test]
fn a_replay_with_an_extra_v1_entry_gets_the_first_answer_and_stores_nothing() {
    let daemon = Daemon::start(hook_config("on_done", to_storage()));
    let body = br#"{"payment":"p-1","amount":40}"#;
    let t = unix_secs();
    let good = signature(HOOK_SECRET, t, body);
    let good_v1 = good.split_once(",v1=").expect("v1 entry").1.to_string();
    let first = assert_stored(
        &daemon.hook_raw(HOOK, &[("X-Opex-Signature", &good)], body),
        "the signed request",
    );
    // The same request with random entries added before or after the good one, reordered,
    // or repeated: each would have been a new record, a duplicate payment.
    let random = "5a".repeat(32);
    let replays = [
        format!("t={t},v1={random},v1={good_v1}"),
        format!("t={t},v1={good_v1},v1={random}"),
        format!("v1={good_v1},t={t}"),
        format!("t={t},v1={}", "00".repeat(32)) + &format!(",v1={random},v1={good_v1}"),
        format!("t={t},v1={good_v1},v1={good_v1}"),
    ];
    for replay in &replays {
        let reply = daemon.hook_raw(HOOK, &[("X-Opex-Signature", replay)], body);
        assert_eq!(assert_stored(&reply, replay), first, "{replay}");
    }
    assert_eq!(
        event_ids(&daemon, &hook_source()),
        vec![first],
        "a replay was stored"
    );
    assert_hook_counters(&daemon, 1, 0, 0);
    let hook = webhook_stats(&daemon.status(), HOOK);
    assert_eq!(u64_at(&hook, "/repeated"), replays.len() as u64, "{hook:#}");
}

#[test]
fn a_request_whose_key_was_changed_after_signing_is_401_and_stores_nothing() {
    let daemon = Daemon::start(hook_config("on_done", to_storage()));
    let body = br#"{"payment":"p-2","amount":40}"#;
    let t = unix_secs();
    let signed = signature_keyed(HOOK_SECRET, t, "ord-7", body);
    for (what, key) in [
        ("another key", Some("ord-8")),
        ("a key with topic levels", Some("ord-7/#")),
        ("an empty key", Some("")),
        ("the key removed", None),
    ] {
        let mut headers = vec![("X-Opex-Signature", signed.as_str())];
        headers.extend(key.map(|k| ("X-Opex-Key", k)));
        let reply = daemon.hook_raw(HOOK, &headers, body);
        let error = assert_error_reply(&reply, 401, what);
        assert!(error.contains("does not match"), "{what}: {error}");
    }
    // A key-less signature does not cover a key added afterwards either.
    let keyless = signature(HOOK_SECRET, t, body);
    let reply = daemon.hook_raw(
        HOOK,
        &[("X-Opex-Signature", &keyless), ("X-Opex-Key", "ord-7")],
        body,
    );
    assert_error_reply(&reply, 401, "a key added to a key-less signature");
    assert!(event_ids(&daemon, &hook_source()).is_empty());
    // The key it was signed with passes.
    let id = assert_stored(
        &daemon.hook_raw(
            HOOK,
            &[("X-Opex-Signature", &signed), ("X-Opex-Key", "ord-7")],
            body,
        ),
        "the key it was signed with",
    );
    let rows = events(&daemon, &format!("source={}", hook_source()));
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["id"], json!(id), "{rows:#?}");
    assert_eq!(rows[0]["key"], json!("ord-7"), "{rows:#?}");
    assert_hook_counters(&daemon, 1, 0, 5);
}

#[test]
fn a_keyless_request_signed_the_old_way_still_passes() {
    let daemon = Daemon::start(hook_config("on_done", to_storage()));
    let body = br#"{"payment":"p-3"}"#;
    // `<t>.<body>`, written out here as a sender of before the key was signed did.
    let t = unix_secs();
    let mut signed = format!("{t}.").into_bytes();
    signed.extend_from_slice(body);
    let header = format!(
        "t={t},v1={}",
        hex(&hmac_sha256(HOOK_SECRET.as_bytes(), &signed))
    );
    let id = assert_stored(
        &daemon.hook_raw(HOOK, &[("X-Opex-Signature", &header)], body),
        "a key-less request signed over t.body",
    );
    let rows = events(&daemon, &format!("source={}", hook_source()));
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(
        rows[0]["key"],
        json!(id),
        "without X-Opex-Key the key is the id"
    );
    assert_hook_counters(&daemon, 1, 0, 0);
}

#[test]
fn malformed_json_after_a_good_signature_is_400_and_a_bad_signature_is_checked_first() {
    let daemon = Daemon::start(hook_config("on_done", to_storage()));
    for (what, body) in [
        ("truncated JSON", &br#"{"order": [1, 2"#[..]),
        ("not JSON", &b"order=1&amount=2"[..]),
        ("empty body", &b""[..]),
    ] {
        let sig = signature(HOOK_SECRET, unix_secs(), body);
        let reply = daemon.hook_raw(HOOK, &[("X-Opex-Signature", &sig)], body);
        assert_error_reply(&reply, 400, what);
    }
    // The signature check comes first: malformed JSON with a bad signature is a 401.
    let body = br#"{"order": [1, 2"#;
    let sig = signature("whsec_someone_else_entirely", unix_secs(), body);
    let reply = daemon.hook_raw(HOOK, &[("X-Opex-Signature", &sig)], body);
    assert_error_reply(&reply, 401, "malformed JSON with a bad signature");

    assert!(events(&daemon, &format!("source={}", hook_source())).is_empty());
    let status = daemon.status();
    assert_eq!(
        u64_at(&status, "/dead_letters/parked_total"),
        0,
        "{status:#}"
    );
    assert_hook_counters(&daemon, 0, 0, 1);
}

#[test]
fn on_done_node_failure_answers_200_dead_lettered_with_the_entry_id() {
    let flows = json!([{
        "id": "pay",
        "nodes": [
            { "id": "in", "kind": "source", "source": format!("webhook/{HOOK}") },
            { "id": "tag", "kind": "map", "set": { "payload.ref": "{{payload.order}}" } },
            { "id": "keep", "kind": "sink", "sink": "storage" },
        ],
        "wires": [ { "from": "in", "to": "tag" }, { "from": "tag", "to": "keep" } ],
    }]);
    let daemon = Daemon::start(hook_config("on_done", flows));

    let body = r#"{"amount":5}"#;
    let reply = daemon.hook_keyed(HOOK, HOOK_SECRET, "no-order", body);
    assert_eq!(reply.status, 200, "{reply:?}");
    let verdict = reply.json();
    assert_eq!(verdict["ok"], json!(true), "{verdict}");
    assert_eq!(verdict["result"], json!("dead_lettered"), "{verdict}");
    let id = verdict["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no string id: {verdict}"))
        .to_string();
    let dlq_id = u64_at(&verdict, "/dead_letter_id");
    assert_eq!(
        verdict.as_object().map(|o| o.len()),
        Some(4),
        "fields ok, result, id, dead_letter_id: {verdict}"
    );

    let entry = dead_letter(&daemon, dlq_id);
    assert_eq!(u64_at(&entry, "/id"), dlq_id, "{entry:#}");
    assert_eq!(entry["flow"], json!("pay"), "{entry:#}");
    assert_eq!(entry["node"], json!("tag"), "{entry:#}");
    assert_eq!(entry["state"], json!("open"), "{entry:#}");
    assert_eq!(entry["accepted"], json!(false), "{entry:#}");
    let reason = entry["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("order"),
        "the reason names the missing field: {entry:#}"
    );
    assert_eq!(entry["record"]["id"], json!(id), "{entry:#}");
    assert_eq!(entry["record"]["key"], json!("no-order"), "{entry:#}");
    assert_eq!(entry["record"]["source"], json!(hook_source()), "{entry:#}");
    assert_eq!(
        entry["record"]["payload"],
        json!({"amount": 5}),
        "{entry:#}"
    );

    // A record with the field is stored; only it is in storage.
    let ok = assert_stored(
        &daemon.hook(HOOK, HOOK_SECRET, r#"{"order":"A-1","amount":5}"#),
        "record with the field",
    );
    assert_eq!(event_ids(&daemon, &hook_source()), vec![ok]);

    let status = daemon.status();
    assert_eq!(
        u64_at(&status, "/engine/stats/dead_lettered"),
        1,
        "{status:#}"
    );
    assert_eq!(
        u64_at(&status, "/engine/stats/node_errors/pay~1tag"),
        1,
        "{status:#}"
    );
    assert_eq!(u64_at(&status, "/dead_letters/open"), 1, "{status:#}");
    assert_eq!(
        u64_at(&status, "/dead_letters/parked_total"),
        1,
        "{status:#}"
    );
    // The caller was answered 200 both times.
    assert_hook_counters(&daemon, 2, 0, 0);
}

#[test]
fn on_done_with_a_full_block_push_queue_answers_the_exact_503_naming_push() {
    let daemon = Daemon::start(hook_config("on_done", both_to_push()));
    let (filled, refusal) = fill_until_refused(&daemon, "fill");
    assert!(filled >= 256, "refused after only {filled} records of 1 KB");
    assert_retry(&refusal, "push", "the ingest source at the full queue");

    // 2 KB: more than the room a 1 KB refusal can leave.
    let reply = daemon.hook(HOOK, HOOK_SECRET, &padded_payload("order-1", 2048));
    assert_retry(&reply, "push", "the webhook at the full push queue");
    let reply = daemon.hook(HOOK, HOOK_SECRET, &padded_payload("order-2", 2048));
    assert_retry(&reply, "push", "the webhook again");

    let status = daemon.status();
    assert_eq!(
        u64_at(&status, "/push_queue/rows"),
        filled,
        "a refused record got in: {status:#}"
    );
    assert_eq!(
        u64_at(&status, "/engine/stats/backpressured"),
        3,
        "{status:#}"
    );
    // A refusal under on_done is the sender's to retry: nothing is parked.
    assert_eq!(
        u64_at(&status, "/dead_letters/parked_total"),
        0,
        "{status:#}"
    );
    assert_eq!(
        u64_at(named(&status, "/sinks", "push"), "/blocked"),
        3,
        "{status:#}"
    );
    assert_hook_counters(&daemon, 0, 2, 0);
}

#[test]
fn on_receipt_answers_200_accepted_and_the_record_reaches_storage_after() {
    let daemon = Daemon::start(hook_config("on_receipt", to_storage()));
    let reply = daemon.hook_keyed(HOOK, HOOK_SECRET, "r-1", r#"{"order":5}"#);
    assert_eq!(reply.status, 200, "{reply:?}");
    let body = reply.json();
    assert_eq!(body["ok"], json!(true), "{body}");
    assert_eq!(body["result"], json!("accepted"), "{body}");
    let id = body["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no string id: {body}"))
        .to_string();
    wait_until(POLL_DEADLINE, "the accepted record in storage", || {
        event_ids(&daemon, &hook_source()) == vec![id.clone()]
    });
    let status = daemon.status();
    assert_eq!(
        u64_at(&status, "/dead_letters/parked_total"),
        0,
        "{status:#}"
    );
    assert_hook_counters(&daemon, 1, 0, 0);
}

/// Flows `tele` (ingest -> push) and `pay` (webhook -> a map that copies the pad four times
/// -> push): the webhook's record grows after admission reserved room for it.
fn growing_to_push() -> Value {
    let mut flows = both_to_push();
    flows[1]["nodes"] = json!([
        { "id": "in", "kind": "source", "source": format!("webhook/{HOOK}") },
        { "id": "grow", "kind": "map", "set": {
            "payload.c1": "{{payload.pad}}", "payload.c2": "{{payload.pad}}",
            "payload.c3": "{{payload.pad}}", "payload.c4": "{{payload.pad}}" } },
        { "id": "up", "kind": "sink", "sink": "push" },
    ]);
    flows[1]["wires"] = json!([ { "from": "in", "to": "grow" }, { "from": "grow", "to": "up" } ]);
    flows
}

/// Fills the push queue with ingest records until exactly `room` logical bytes are left.
fn leave_room(daemon: &Daemon, room: u64) -> u64 {
    let used = |d: &Daemon| u64_at(&d.status(), "/push_queue/used_bytes");
    let quota = u64_at(&daemon.status(), "/push_queue/quota_bytes");
    // One probe record tells the fixed cost of a row beyond its payload.
    // Its key has the fillers' length (`f00001`), so the cost carries over.
    let probe = padded_payload("probe1", 1024);
    assert_stored(&daemon.ingest("probe1", &probe), "probe");
    let overhead = used(daemon) - probe.len() as u64;
    let mut stored = 1;
    while quota - used(daemon) > room + 4096 {
        let key = format!("f{stored:05}");
        assert_stored(&daemon.ingest(&key, &padded_payload(&key, 4096)), "filler");
        stored += 1;
    }
    // The last filler takes all but `room`; keys of the same length keep the overhead.
    let last = quota - used(daemon) - room - overhead;
    let key = format!("f{stored:05}");
    assert_stored(
        &daemon.ingest(&key, &padded_payload(&key, last as usize)),
        "last filler",
    );
    assert_eq!(quota - used(daemon), room, "room left");
    stored + 1
}

#[test]
fn on_receipt_at_a_full_block_sink_answers_503_before_accepting_anything() {
    let daemon = Daemon::start(hook_config("on_receipt", both_to_push()));
    let (filled, refusal) = fill_until_refused(&daemon, "fill");
    assert_retry(&refusal, "push", "the ingest source at the full queue");
    // Admission comes before the inbox: the sender is told to retry, nothing is parked.
    let payload = padded_payload("order-1", 2048);
    let reply = daemon.hook_keyed(HOOK, HOOK_SECRET, "early-1", &payload);
    assert_retry(&reply, "push", "the on_receipt webhook at the full queue");
    let status = daemon.status();
    assert_eq!(u64_at(&status, "/push_queue/rows"), filled, "{status:#}");
    assert_eq!(
        u64_at(&status, "/dead_letters/parked_total"),
        0,
        "{status:#}"
    );
    assert_hook_counters(&daemon, 0, 1, 0);
}

#[test]
fn on_receipt_with_a_sink_refusing_after_the_200_parks_it_as_accepted_but_not_handled() {
    let daemon = Daemon::start(hook_config("on_receipt", growing_to_push()));
    let filled = leave_room(&daemon, 700);
    // About 330 bytes as sent: admitted; about 1000 after the map: refused at the sink.
    let payload: Value = json!({ "pad": "x".repeat(150) });
    let reply = daemon.hook_keyed(HOOK, HOOK_SECRET, "late-1", &payload.to_string());
    assert_eq!(
        reply.status, 200,
        "on_receipt answers before the flow: {reply:?}"
    );
    let body = reply.json();
    assert_eq!(body["ok"], json!(true), "{body}");
    assert_eq!(body["result"], json!("accepted"), "{body}");
    let id = body["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no string id: {body}"))
        .to_string();

    let mut parked = Value::Null;
    wait_until(
        POLL_DEADLINE,
        "the refused record in the dead-letter queue",
        || {
            parked = dead_letter_rows(&daemon, "flow=pay")
                .into_iter()
                .find(|r| r["record"]["id"] == json!(id))
                .unwrap_or(Value::Null);
            !parked.is_null()
        },
    );
    assert_eq!(parked["accepted"], json!(true), "{parked:#}");
    assert_eq!(parked["state"], json!("open"), "{parked:#}");
    assert_eq!(parked["flow"], json!("pay"), "{parked:#}");
    let reason = parked["reason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with("accepted (200) but not handled: "),
        "reason {reason:?}: {parked:#}"
    );
    assert_eq!(
        parked["record"]["source"],
        json!(hook_source()),
        "{parked:#}"
    );
    assert_eq!(parked["record"]["key"], json!("late-1"), "{parked:#}");
    assert_eq!(parked["record"]["payload"], payload, "{parked:#}");

    let status = daemon.status();
    assert_eq!(u64_at(&status, "/push_queue/rows"), filled, "{status:#}");
    assert_eq!(u64_at(&status, "/dead_letters/open"), 1, "{status:#}");
    assert!(
        u64_at(&status, "/engine/stats/dead_lettered") >= 1,
        "{status:#}"
    );
    let hook = webhook_stats(&status, HOOK);
    assert_eq!(u64_at(&hook, "/accepted"), 1, "{hook:#}");
    assert_eq!(u64_at(&hook, "/rejected_signature"), 0, "{hook:#}");
}

/// Flow `pay`: the webhook through a map that needs `payload.order`, into storage: a request
/// without the field fails the map and is parked in the dead-letter queue.
fn needs_order() -> Value {
    json!([{
        "id": "pay",
        "nodes": [
            { "id": "in", "kind": "source", "source": format!("webhook/{HOOK}") },
            { "id": "tag", "kind": "map", "set": { "payload.ref": "{{payload.order}}" } },
            { "id": "keep", "kind": "sink", "sink": "storage" },
        ],
        "wires": [ { "from": "in", "to": "tag" }, { "from": "tag", "to": "keep" } ],
    }])
}

#[test]
fn an_on_receipt_request_whose_park_failed_stays_in_the_inbox_and_runs_at_the_next_start() {
    // No file may pass 704 KiB: the inbox write of a 400 KiB body fits in the dead-letter
    // file, the park of the same record after it does not (a write error, as on a full disk).
    let pad = 400 * 1024;
    let config = hook_config("on_receipt", needs_order());
    let mut daemon = Daemon::start_with_file_limit(config, 704 * 1024);
    let payload = json!({ "pad": "x".repeat(pad) });
    let reply = daemon.hook_keyed(HOOK, HOOK_SECRET, "big-1", &payload.to_string());
    assert_eq!(reply.status, 200, "on_receipt answers first: {reply:?}");
    let id = reply.json()["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no string id: {}", reply.body))
        .to_string();
    wait_until(
        Duration::from_secs(20),
        "the park after the 200 to fail",
        || daemon.stderr().contains("dead-letter queue write failed"),
    );
    wait_until(Duration::from_secs(20), "the entry counted as kept", || {
        u64_at(&webhook_stats(&daemon.status(), HOOK), "/kept_in_inbox") == 1
    });
    let status = daemon.status();
    assert_eq!(
        u64_at(&status, "/dead_letters/parked_total"),
        0,
        "{status:#}"
    );

    // The request was answered 200: it stays in the inbox and runs again at the next start.
    daemon.stop();
    daemon.set_file_limit(None);
    daemon.restart();
    let mut parked = Value::Null;
    wait_until(
        Duration::from_secs(20),
        "the kept request run and parked after the restart",
        || {
            parked = dead_letter_rows(&daemon, "flow=pay")
                .into_iter()
                .find(|r| r["record"]["id"] == json!(id))
                .unwrap_or(Value::Null);
            !parked.is_null()
        },
    );
    assert_eq!(parked["accepted"], json!(true), "{parked:#}");
    assert_eq!(parked["node"], json!("tag"), "{parked:#}");
    assert_eq!(parked["record"]["key"], json!("big-1"), "{parked:#}");
    assert_eq!(parked["record"]["payload"], payload, "{parked:#}");
    assert_eq!(dead_letter_rows(&daemon, "flow=pay").len(), 1);
}

/// Flow `pay`: the webhook into the `nats` sink.
fn to_nats() -> Value {
    json!([{
        "id": "pay",
        "nodes": [
            { "id": "in", "kind": "source", "source": format!("webhook/{HOOK}") },
            { "id": "out", "kind": "sink", "sink": "nats" },
        ],
        "wires": [ { "from": "in", "to": "out" } ],
    }])
}

/// Sends a signed request by hand and gives up after `patience` without an answer: the
/// connection is closed, as a sender's client timeout closes it. Panics if it was answered.
fn send_and_give_up(daemon: &Daemon, sig: &str, body: &[u8], patience: Duration) {
    let addr = daemon.base().trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&addr).expect("connect");
    let head = format!(
        "POST /api/hooks/{HOOK} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nX-Opex-Signature: {sig}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("send head");
    s.write_all(body).expect("send body");
    s.set_read_timeout(Some(patience)).expect("read timeout");
    let mut answer = [0u8; 256];
    match s.read(&mut answer) {
        Ok(n) => panic!(
            "answered before the sink was back: {:?}",
            String::from_utf8_lossy(&answer[..n])
        ),
        Err(e) => assert!(
            matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{e}"
        ),
    }
}

#[test]
fn a_sender_that_gave_up_on_a_slow_sink_and_resends_is_stored_once_and_never_told_401() {
    let server = NatsServer::start();
    let js = Js::connect(&server.url());
    js.create_stream("PAY", &["pay.>"]);
    let mut config = hook_config("on_done", to_nats());
    config["nats"] = json!({
        "connections": [{"name": "js", "servers": [server.url()]}],
        "sink": {"subject": "pay.{{key}}", "timeout_secs": 15},
    });
    let daemon = Daemon::start(config);
    wait_until(POLL_DEADLINE, "the nats sink connected", || {
        named(&daemon.status(), "/sinks", "nats")["connected"] == json!(true)
    });

    // The sink waits for an ack that does not come while the server is frozen.
    server.freeze();
    let body = br#"{"payment":"p-9","amount":12}"#;
    let sig = signature(HOOK_SECRET, unix_secs(), body);
    send_and_give_up(&daemon, &sig, body, Duration::from_millis(500));
    let retry = std::thread::scope(|scope| {
        // The sender's retry of the very same request.
        let retry = scope.spawn(|| daemon.hook_raw(HOOK, &[("X-Opex-Signature", &sig)], body));
        wait_until(Duration::from_secs(20), "the retry to arrive", || {
            let hook = webhook_stats(&daemon.status(), HOOK);
            u64_at(&hook, "/received") + u64_at(&hook, "/rejected_signature") >= 2
        });
        server.thaw();
        retry.join().expect("retry thread")
    });
    assert_ne!(
        retry.status, 401,
        "a retry was taken for a replay: {retry:?}"
    );
    let id = assert_stored(&retry, "the retry, once the sink is back");
    wait_until(POLL_DEADLINE, "the record in the stream", || {
        js.stream_state("PAY").0 >= 1
    });
    assert_eq!(js.stream_state("PAY").0, 1, "published more than once");

    // Sent once more, it is answered the same and stored nothing again.
    let again = daemon.hook_raw(HOOK, &[("X-Opex-Signature", &sig)], body);
    assert_eq!(assert_stored(&again, "the same request again"), id);
    assert_eq!(js.stream_state("PAY").0, 1, "published more than once");
}

#[test]
fn an_on_receipt_request_whose_sender_hangs_up_without_reading_the_answer_still_runs_once_and_a_resend_is_answered_the_same(
) {
    let server = NatsServer::start();
    let js = Js::connect(&server.url());
    js.create_stream("PAY", &["pay.>"]);
    let mut config = hook_config("on_receipt", to_nats());
    config["nats"] = json!({
        "connections": [{"name": "js", "servers": [server.url()]}],
        "sink": {"subject": "pay.{{key}}", "timeout_secs": 15},
    });
    let daemon = Daemon::start(config);
    wait_until(POLL_DEADLINE, "the nats sink connected", || {
        named(&daemon.status(), "/sinks", "nats")["connected"] == json!(true)
    });
    server.freeze();
    let body = br#"{"payment":"p-11","amount":7}"#;
    let sig = signature(HOOK_SECRET, unix_secs(), body);
    // The whole request, then the connection closed without reading any answer once the
    // request is in: hyper drops the handler, which must not cut the request's run short.
    // (Closed before the request is in, the handler may be dropped before it counts the
    // request, which is right, but tests nothing: so the close waits for `received`.)
    {
        let addr = daemon.base().trim_start_matches("http://").to_string();
        let mut s = TcpStream::connect(&addr).expect("connect");
        let head = format!(
            "POST /api/hooks/{HOOK} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nX-Opex-Signature: {sig}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).expect("send head");
        s.write_all(body).expect("send body");
        wait_until(Duration::from_secs(20), "the request received", || {
            u64_at(&webhook_stats(&daemon.status(), HOOK), "/received") >= 1
        });
    }
    server.thaw();
    wait_until(POLL_DEADLINE, "the record in the stream", || {
        js.stream_state("PAY").0 >= 1
    });
    // The sender's resend is answered as the first was (accepted) and stores nothing again.
    let again = daemon.hook_raw(HOOK, &[("X-Opex-Signature", &sig)], body);
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.json()["result"], json!("accepted"), "{again:?}");
    wait_until(POLL_DEADLINE, "the inbox empty", || {
        u64_at(&webhook_stats(&daemon.status(), HOOK), "/kept_in_inbox") == 0
    });
    assert_eq!(js.stream_state("PAY").0, 1, "published more than once");
}

#[test]
fn an_identical_request_after_a_restart_gets_the_first_answer_and_stores_nothing_twice() {
    let mut daemon = Daemon::start(hook_config("on_done", to_storage()));
    let body = br#"{"order":88,"amount":3}"#;
    let sig = signature(HOOK_SECRET, unix_secs(), body);
    let first = assert_stored(
        &daemon.hook_raw(HOOK, &[("X-Opex-Signature", &sig)], body),
        "the first copy",
    );
    daemon.stop();
    daemon.restart();
    let again = daemon.hook_raw(HOOK, &[("X-Opex-Signature", &sig)], body);
    assert_eq!(
        assert_stored(&again, "the same request after the restart"),
        first,
        "not the first answer: {again:?}"
    );
    assert_eq!(
        event_ids(&daemon, &hook_source()),
        vec![first],
        "stored twice"
    );
}

#[test]
fn a_copy_of_a_request_still_running_after_the_wait_gets_409_with_retry_after_then_the_first_answer(
) {
    let server = NatsServer::start();
    let js = Js::connect(&server.url());
    js.create_stream("PAY", &["pay.>"]);
    let mut config = hook_config("on_done", to_nats());
    config["nats"] = json!({
        "connections": [{"name": "js", "servers": [server.url()]}],
        "sink": {"subject": "pay.{{key}}", "timeout_secs": 30},
    });
    let daemon = Daemon::start(config);
    wait_until(POLL_DEADLINE, "the nats sink connected", || {
        named(&daemon.status(), "/sinks", "nats")["connected"] == json!(true)
    });

    server.freeze();
    let body = br#"{"payment":"p-10","amount":3}"#;
    let sig = signature(HOOK_SECRET, unix_secs(), body);
    let (first, copy) = std::thread::scope(|scope| {
        let first = scope.spawn(|| daemon.hook_raw(HOOK, &[("X-Opex-Signature", &sig)], body));
        wait_until(Duration::from_secs(20), "the first copy running", || {
            u64_at(&webhook_stats(&daemon.status(), HOOK), "/received") >= 1
        });
        // The sink is still frozen when the copy's wait ends.
        let copy = daemon.hook_raw(HOOK, &[("X-Opex-Signature", &sig)], body);
        server.thaw();
        (first.join().expect("first copy"), copy)
    });
    assert_eq!(copy.status, 409, "{copy:?}");
    assert!(copy.header("retry-after").is_some(), "{copy:?}");
    assert_eq!(copy.json()["result"], json!("in_progress"), "{copy:?}");
    let id = assert_stored(&first, "the first copy, once the sink is back");
    let again = daemon.hook_raw(HOOK, &[("X-Opex-Signature", &sig)], body);
    assert_eq!(assert_stored(&again, "the copy sent again"), id);
    wait_until(POLL_DEADLINE, "the record in the stream", || {
        js.stream_state("PAY").0 >= 1
    });
    assert_eq!(js.stream_state("PAY").0, 1, "published more than once");
    let hook = webhook_stats(&daemon.status(), HOOK);
    assert_eq!(u64_at(&hook, "/in_progress"), 1, "{hook:#}");
    assert_eq!(u64_at(&hook, "/repeated"), 1, "{hook:#}");
}
