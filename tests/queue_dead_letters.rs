//! A queue's dead letters (rows its destination refused for good) and the admin verbs on
//! them: list, get, replay back to the head of the queue, replay all, delete. Against the real
//! binary and the test receiver, which refuses the records carrying a marker: the refused
//! record is dead-lettered; once the receiver takes it, a replay delivers it before the rows
//! queued behind it; the ledger balances after every verb; a full `block` queue refuses a
//! replay; kill -9 after a replay keeps the row once; rows replayed while a batch of replayed
//! and new rows is on its way all arrive, and `delivered` counts only what arrived. A
//! `queue: disk` in front of MQTT (a real mosquitto) has the same verbs.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use common::*;
use serde_json::{json, Value};

/// What the receiver refuses (400) while a test wants it to.
const POISON: &str = "POISON-PILL";
/// A marker no record carries: the receiver takes everything again.
const NOTHING: &str = "NO-RECORD-CARRIES-THIS";

/// The uplink keys: quick retries, small batches.
fn uplink(receiver: &Receiver) -> Value {
    json!({
        "url": receiver.url(),
        "batch_rows": 10,
        "timeout_secs": 5,
        "retry_initial_ms": 50,
        "retry_max_ms": 300,
    })
}

/// The sink called `push` (a durable `block` queue of `quota_mb`) draining to `receiver`.
fn push_config(receiver: &Receiver, quota_mb: i64) -> Value {
    let mut config = queue_config(quota_mb, "block");
    config["connector"]["push"] = uplink(receiver);
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config
}

/// A push sink `name` from the `sinks:` list (`queue`: `disk` or `memory`) fed by the test
/// source, draining to `receiver`.
fn named_config(receiver: &Receiver, name: &str, queue: &str) -> Value {
    let mut config = queue_config(8, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    let mut sink =
        json!({"name": name, "type": "push", "queue": queue, "uplink": uplink(receiver)});
    if queue == "disk" {
        sink["max_quota_mb"] = json!(8);
        sink["on_full"] = json!("block");
    }
    config["sinks"] = json!([sink]);
    config["flows"] = ingest_flow(&[name]);
    config
}

/// The admin path of sink `sink`'s dead letters, then `rest`: `/api/push/dead-letters` for
/// the sink called `push` (the documented path), `/api/sinks/{sink}/dead-letters` for others.
fn path(sink: &str, rest: &str) -> String {
    if sink == "push" {
        format!("/api/push/dead-letters{rest}")
    } else {
        format!("/api/sinks/{sink}/dead-letters{rest}")
    }
}

/// Posts `payload` under `key`; the record id it was stored under.
fn post(daemon: &Daemon, key: &str, payload: &Value) -> String {
    assert_stored(&daemon.ingest(key, &payload.to_string()), key)
}

/// The listing of sink `sink`'s dead letters (must answer 200).
fn listing(daemon: &Daemon, sink: &str) -> Value {
    let reply = daemon.get(&path(sink, "?limit=1000"), Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "{reply:?}");
    reply.json()
}

/// `(dead letter id, record id)` of every dead letter of `sink`, oldest first.
fn letters(daemon: &Daemon, sink: &str) -> Vec<(u64, String)> {
    listing(daemon, sink)["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                u64_at(r, "/id"),
                r["record"]["id"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The `sinks[]` entry of `sink`.
fn entry(daemon: &Daemon, sink: &str) -> Value {
    named(&daemon.status(), "/sinks", sink).clone()
}

fn wait_dead_rows(daemon: &Daemon, sink: &str, n: u64) {
    wait_until(
        POLL_DEADLINE,
        &format!("{sink} has {n} dead letters"),
        || u64_at(&entry(daemon, sink), "/dead_letter_rows") == n,
    );
}

fn wait_queue_rows(daemon: &Daemon, sink: &str, n: u64) {
    wait_until(POLL_DEADLINE, &format!("{sink} holds {n} rows"), || {
        u64_at(&entry(daemon, sink), "/queue_rows") == n
    });
}

/// Times record `id` arrived at the receiver.
fn arrivals(receiver: &Receiver, id: &str) -> usize {
    receiver.ids().iter().filter(|x| *x == id).count()
}

/// The first arrivals of `ids` at the receiver, in arrival order.
fn arrival_order(receiver: &Receiver, ids: &[String]) -> Vec<String> {
    receiver
        .first_arrivals()
        .into_iter()
        .filter(|id| ids.contains(id))
        .collect()
}

/// Checks the ledger with the row-by-row check of every durable queue; returns it.
fn balanced(daemon: &Daemon, what: &str) -> Value {
    let l = assert_balanced(&ledger(daemon, true), what);
    for (sink, check) in l["queue_checks"].as_object().expect("queue_checks") {
        if check["checked"] == json!(true) {
            assert_eq!(check["agrees"], json!(true), "{what}: {sink}: {check:#}");
        }
    }
    l
}

fn figure(l: &Value, pointer: &str) -> u64 {
    source_figure(l, &format!("ingest/{SOURCE}"), pointer)
}

/// Posts a poisoned record while the receiver refuses it, and waits until it is a dead
/// letter of `sink` (`before` dead letters there already). Returns its record id.
fn poison(daemon: &Daemon, sink: &str, key: &str, before: u64) -> String {
    poison_padded(daemon, sink, key, before, 0)
}

/// [`poison`] with `pad` bytes of padding in the payload.
fn poison_padded(daemon: &Daemon, sink: &str, key: &str, before: u64, pad: usize) -> String {
    let payload = json!({"key": key, "note": POISON, "pad": "x".repeat(pad)});
    let id = post(daemon, key, &payload);
    wait_dead_rows(daemon, sink, before + 1);
    id
}

#[test]
fn a_refused_record_is_dead_lettered_and_once_the_receiver_takes_it_a_replay_delivers_it_before_the_rows_queued_behind_it(
) {
    let receiver = Receiver::start();
    receiver.reject_payloads_containing(POISON);
    let daemon = Daemon::start(push_config(&receiver, 8));
    let first = post(&daemon, "k0", &json!({"n": 0}));
    let bad = poison(&daemon, "push", "bad", 0);
    wait_until(POLL_DEADLINE, "the first record delivered", || {
        receiver.has_all(std::slice::from_ref(&first))
    });
    let dead = letters(&daemon, "push");
    assert_eq!(dead.len(), 1, "{dead:?}");
    let (dl, record) = dead[0].clone();
    assert_eq!(record, bad);

    // One dead letter read alone, under both paths.
    for p in [
        path("push", &format!("/{dl}")),
        format!("/api/sinks/push/dead-letters/{dl}"),
    ] {
        let reply = daemon.get(&p, Some(ADMIN_TOKEN));
        assert_eq!(reply.status, 200, "GET {p}: {reply:?}");
        let one = reply.json();
        assert_eq!(u64_at(&one, "/id"), dl, "{one:#}");
        assert_eq!(one["record"]["id"], json!(bad), "{one:#}");
        assert_eq!(one["source"], json!(format!("ingest/{SOURCE}")), "{one:#}");
        assert!(
            one["reason"].as_str().is_some_and(|r| r.contains("400")),
            "{one:#}"
        );
        assert!(one["seq"].is_u64(), "{one:#}");
    }
    let l = balanced(&daemon, "after the dead letter");
    assert_eq!(figure(&l, "/dead_lettered"), 1, "{l:#}");

    // Rows queue up behind it while the receiver is away.
    receiver.down();
    let behind: Vec<String> = (1..=5)
        .map(|i| post(&daemon, &format!("k{i}"), &json!({"n": i})))
        .collect();
    wait_queue_rows(&daemon, "push", 5);
    receiver.reject_payloads_containing(NOTHING);
    let reply = daemon.post(
        &path("push", &format!("/{dl}/replay")),
        Some(ADMIN_TOKEN),
        b"",
    );
    assert_eq!(reply.status, 200, "{reply:?}");
    let body = reply.json();
    assert_eq!(body["result"], json!("replayed"), "{body:#}");
    assert_eq!(u64_at(&body, "/id"), dl);
    assert_eq!(u64_at(&entry(&daemon, "push"), "/queue_rows"), 6);
    assert_eq!(u64_at(&entry(&daemon, "push"), "/dead_letter_rows"), 0);
    let l = balanced(&daemon, "after the replay");
    assert_eq!(
        (figure(&l, "/pending"), figure(&l, "/dead_lettered")),
        (6, 0),
        "{l:#}"
    );
    assert_eq!(
        daemon
            .get(&path("push", &format!("/{dl}")), Some(ADMIN_TOKEN))
            .status,
        404,
        "a replayed dead letter is gone"
    );

    receiver.up();
    let mut all = vec![bad.clone()];
    all.extend(behind.iter().cloned());
    wait_until(
        POLL_DEADLINE,
        "the replayed record and the rows behind it delivered",
        || receiver.has_all(&all),
    );
    let order = arrival_order(&receiver, &all);
    assert_eq!(
        order, all,
        "the replayed record first, then the rows behind it"
    );
    assert_eq!(arrivals(&receiver, &bad), 1);
    wait_queue_rows(&daemon, "push", 0);
    let l = balanced(&daemon, "after the delivery");
    assert_eq!(figure(&l, "/acked"), 7, "{l:#}");
    assert_eq!(figure(&l, "/delivered"), 7, "{l:#}");
    assert_eq!(
        (figure(&l, "/pending"), figure(&l, "/dead_lettered")),
        (0, 0)
    );
    let push = &l["sinks"]["push"];
    assert_eq!(push["imbalance"], json!(0), "{push:#}");
    assert_eq!(push["dead_lettered"], json!(0), "{push:#}");
    let status = daemon.status();
    assert_eq!(
        u64_at(&status, "/uplink/dead_replayed_total"),
        1,
        "{status:#}"
    );
    assert_eq!(
        u64_at(&status, "/uplink/dead_lettered_total"),
        1,
        "a counter"
    );
    let metrics = daemon.metrics();
    assert_eq!(
        metric(&metrics, "opex_connector_push_dead_letters_replayed_total"),
        Some(1.0)
    );
    assert_eq!(
        metric(&metrics, "opex_connector_push_dead_letter_rows"),
        Some(0.0)
    );
}

#[test]
fn replay_all_puts_every_dead_letter_of_a_named_sink_back_and_they_arrive_in_their_order() {
    let receiver = Receiver::start();
    receiver.reject_payloads_containing(POISON);
    let daemon = Daemon::start(named_config(&receiver, "relay", "disk"));
    let mut bad = Vec::new();
    for i in 0..3 {
        post(&daemon, &format!("good{i}"), &json!({"n": i}));
        bad.push(poison(&daemon, "relay", &format!("bad{i}"), i));
    }
    receiver.down();
    let behind: Vec<String> = (0..4)
        .map(|i| post(&daemon, &format!("later{i}"), &json!({"n": i})))
        .collect();
    wait_queue_rows(&daemon, "relay", 4);
    receiver.reject_payloads_containing(NOTHING);
    let reply = daemon.post(&path("relay", "/replay"), Some(ADMIN_TOKEN), b"");
    assert_eq!(reply.status, 200, "{reply:?}");
    let body = reply.json();
    assert_eq!(u64_at(&body, "/replayed"), 3, "{body:#}");
    assert_eq!(u64_at(&body, "/left"), 0, "{body:#}");
    assert_eq!(body["failed"], json!([]), "{body:#}");
    assert_eq!(body["stopped"], Value::Null, "{body:#}");
    let l = balanced(&daemon, "after the replay");
    assert_eq!(
        (figure(&l, "/pending"), figure(&l, "/dead_lettered")),
        (7, 0)
    );

    receiver.up();
    let mut all = bad.clone();
    all.extend(behind.iter().cloned());
    wait_until(POLL_DEADLINE, "every record delivered", || {
        receiver.has_all(&all)
    });
    let order = arrival_order(&receiver, &all);
    assert_eq!(
        order, all,
        "the dead letters in their order, then the rows behind them"
    );
    wait_queue_rows(&daemon, "relay", 0);
    let l = balanced(&daemon, "after the delivery");
    assert_eq!((figure(&l, "/delivered"), figure(&l, "/pending")), (10, 0));
    // Nothing left: a second replay-all replays nothing and says so.
    let reply = daemon.post(&path("relay", "/replay"), Some(ADMIN_TOKEN), b"");
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(u64_at(&reply.json(), "/replayed"), 0);
}

#[test]
fn a_deleted_dead_letter_is_gone_and_the_ledger_keeps_it_counted_dead_lettered() {
    let receiver = Receiver::start();
    receiver.reject_payloads_containing(POISON);
    let daemon = Daemon::start(push_config(&receiver, 8));
    poison(&daemon, "push", "bad", 0);
    let (dl, _) = letters(&daemon, "push")[0].clone();
    let reply = daemon.delete(
        &format!("/api/sinks/push/dead-letters/{dl}"),
        Some(ADMIN_TOKEN),
    );
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.json()["result"], json!("deleted"), "{reply:?}");
    let reply = daemon.delete(&path("push", &format!("/{dl}")), Some(ADMIN_TOKEN));
    assert_error_reply(&reply, 404, "deleted twice");
    assert_eq!(
        daemon
            .get(&path("push", &format!("/{dl}")), Some(ADMIN_TOKEN))
            .status,
        404
    );
    assert!(letters(&daemon, "push").is_empty());
    assert_eq!(u64_at(&listing(&daemon, "push"), "/total"), 0);
    assert_eq!(u64_at(&entry(&daemon, "push"), "/dead_letter_rows"), 0);
    let l = balanced(&daemon, "after the delete");
    assert_eq!(figure(&l, "/dead_lettered"), 1, "still counted: {l:#}");
    assert_eq!(figure(&l, "/acked"), 1);
    assert_eq!(l["sinks"]["push"]["imbalance"], json!(0));
    let status = daemon.status();
    assert_eq!(
        u64_at(&status, "/uplink/dead_deleted_total"),
        1,
        "{status:#}"
    );
    assert_eq!(
        metric(
            &daemon.metrics(),
            "opex_connector_push_dead_letters_deleted_total"
        ),
        Some(1.0)
    );
    let reply = daemon.post(
        &path("push", &format!("/{dl}/replay")),
        Some(ADMIN_TOKEN),
        b"",
    );
    assert_error_reply(&reply, 404, "replay of a deleted dead letter");
}

#[test]
fn a_replay_into_a_full_block_queue_is_refused_with_503_and_nothing_changes() {
    let receiver = Receiver::start();
    receiver.reject_payloads_containing(POISON);
    let daemon = Daemon::start(push_config(&receiver, 1));
    // Larger than the records that fill the queue: whatever room they leave, it does not fit.
    poison_padded(&daemon, "push", "bad", 0, 2048);
    let (dl, _) = letters(&daemon, "push")[0].clone();
    receiver.down();
    let (stored, _) = fill_until_refused(&daemon, "f");
    assert!(stored > 100, "{stored}");
    receiver.reject_payloads_containing(NOTHING);
    let before = daemon.status();
    let ledger_before = balanced(&daemon, "full");

    for p in [
        path("push", &format!("/{dl}/replay")),
        path("push", "/replay"),
    ] {
        let reply = daemon.post(&p, Some(ADMIN_TOKEN), b"");
        let error = assert_error_reply(&reply, 503, &p);
        assert!(error.contains("full"), "{p}: {error}");
        assert!(reply.header("retry-after").is_some(), "{p}: {reply:?}");
    }
    let after = daemon.status();
    for pointer in [
        "/push_queue/rows",
        "/push_queue/used_bytes",
        "/push_queue/blocked_total",
    ] {
        assert_eq!(
            u64_at(&after, pointer),
            u64_at(&before, pointer),
            "{pointer}: a refused replay changes nothing (and is no refused source)"
        );
    }
    assert_eq!(letters(&daemon, "push").len(), 1, "still a dead letter");
    let ledger_after = balanced(&daemon, "after the refused replays");
    assert_eq!(ledger_after["sources"], ledger_before["sources"]);
    assert!(
        u64_at(&after, "/push_queue/used_bytes") <= u64_at(&after, "/push_queue/quota_bytes"),
        "{after:#}"
    );
}

#[test]
fn kill_nine_after_a_replay_keeps_the_row_once_not_twice() {
    let receiver = Receiver::start();
    receiver.reject_payloads_containing(POISON);
    let mut daemon = Daemon::start(push_config(&receiver, 8));
    let bad = poison(&daemon, "push", "bad", 0);
    let (dl, _) = letters(&daemon, "push")[0].clone();
    receiver.down();
    let reply = daemon.post(
        &path("push", &format!("/{dl}/replay")),
        Some(ADMIN_TOKEN),
        b"",
    );
    assert_eq!(reply.status, 200, "{reply:?}");
    daemon.kill9();
    daemon.restart();
    assert_eq!(
        u64_at(&entry(&daemon, "push"), "/queue_rows"),
        1,
        "the row is there"
    );
    assert!(
        letters(&daemon, "push").is_empty(),
        "and no longer a dead letter"
    );
    let l = balanced(&daemon, "after kill -9");
    assert_eq!(
        (figure(&l, "/pending"), figure(&l, "/dead_lettered")),
        (1, 0)
    );
    receiver.reject_payloads_containing(NOTHING);
    receiver.up();
    wait_queue_rows(&daemon, "push", 0);
    assert_eq!(arrivals(&receiver, &bad), 1, "delivered once");
    let l = balanced(&daemon, "delivered");
    assert_eq!((figure(&l, "/delivered"), figure(&l, "/acked")), (1, 1));
}

#[test]
fn the_volatile_push_buffer_replays_and_deletes_its_dead_letters_the_same_way() {
    let receiver = Receiver::start();
    receiver.reject_payloads_containing(POISON);
    let daemon = Daemon::start(named_config(&receiver, "mem", "memory"));
    assert_eq!(entry(&daemon, "mem")["durable"], json!(false));
    let first = poison(&daemon, "mem", "bad0", 0);
    let second = poison(&daemon, "mem", "bad1", 1);
    let ids: Vec<u64> = letters(&daemon, "mem").iter().map(|(id, _)| *id).collect();
    let reply = daemon.get(&path("mem", &format!("/{}", ids[0])), Some(ADMIN_TOKEN));
    assert_eq!(reply.json()["record"]["id"], json!(first), "{reply:?}");
    let reply = daemon.delete(&path("mem", &format!("/{}", ids[1])), Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "{reply:?}");
    receiver.reject_payloads_containing(NOTHING);
    let reply = daemon.post(
        &path("mem", &format!("/{}/replay", ids[0])),
        Some(ADMIN_TOKEN),
        b"",
    );
    assert_eq!(reply.status, 200, "{reply:?}");
    wait_until(POLL_DEADLINE, "the replayed record delivered", || {
        arrivals(&receiver, &first) == 1
    });
    assert_eq!(
        arrivals(&receiver, &second),
        0,
        "the deleted one never goes"
    );
    wait_queue_rows(&daemon, "mem", 0);
    let l = balanced(&daemon, "volatile");
    assert_eq!(
        (
            figure(&l, "/delivered"),
            figure(&l, "/dead_lettered"),
            figure(&l, "/pending")
        ),
        (1, 1, 0),
        "{l:#}"
    );
    assert_eq!(l["sinks"]["mem"]["imbalance"], json!(0));
}

/// Dead letters the replay race makes in the durable queue: the replay-all takes all but
/// [`RACE_SINGLES`] of them, in several chunks of 256 (one transaction each).
const RACE_DEAD: usize = 1200;
/// The same in the volatile buffer, which keeps 1000 dead letters.
const RACE_DEAD_VOLATILE: usize = 900;
/// Dead letters put back one call each after the replay-all.
const RACE_SINGLES: usize = 150;

/// Makes `dead` dead letters of `sink`, then, while new records arrive steadily and
/// the receiver takes everything at once, replays most of them with one replay-all and the
/// rest one call each. Each commit of a replay may land while the uplink has a batch out that
/// starts with a row replayed just before and ends with new rows: the replayed row lies
/// between them. Every replayed record must reach the receiver, and the ledger's `delivered`
/// must be the records the receiver got.
fn replays_race_batches_in_flight(receiver: &Receiver, daemon: &Daemon, sink: &str, dead: usize) {
    // Four writers, each a good record after three poisoned ones: the receiver never refuses
    // twenty rows in a row, so the queue dead-letters them rather than holding.
    let writers = 4;
    let poisoned: Vec<String> = thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|t| {
                s.spawn(move || {
                    let mut ids = Vec::new();
                    for i in 0..dead / writers {
                        let key = format!("p{t}-{i}");
                        ids.push(post(daemon, &key, &json!({"note": POISON, "i": i})));
                        if i % 3 == 2 {
                            post(daemon, &format!("g{t}-{i}"), &json!({"i": i}));
                        }
                    }
                    ids
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a writer"))
            .collect()
    });
    wait_dead_rows(daemon, sink, dead as u64);
    receiver.reject_payloads_containing(NOTHING);

    let stop = AtomicBool::new(false);
    let fresh: Vec<String> = thread::scope(|s| {
        let feeder = s.spawn(|| {
            let mut ids = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let key = format!("n{}", ids.len());
                ids.push(post(daemon, &key, &json!({"n": ids.len()})));
            }
            ids
        });
        wait_until(POLL_DEADLINE, "new records delivered", || {
            receiver
                .records()
                .iter()
                .any(|r| r["key"].as_str().is_some_and(|k| k.starts_with('n')))
        });
        let all = dead - RACE_SINGLES;
        let reply = daemon.post(
            &path(sink, &format!("/replay?limit={all}")),
            Some(ADMIN_TOKEN),
            b"",
        );
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(u64_at(&reply.json(), "/replayed"), all as u64, "{reply:?}");
        let singles = letters(daemon, sink);
        assert_eq!(singles.len(), RACE_SINGLES);
        for (dl, _) in singles {
            let reply = daemon.post(
                &path(sink, &format!("/{dl}/replay")),
                Some(ADMIN_TOKEN),
                b"",
            );
            assert_eq!(reply.status, 200, "replay of {dl}: {reply:?}");
        }
        stop.store(true, Ordering::SeqCst);
        feeder.join().expect("the feeder")
    });
    wait_queue_rows(daemon, sink, 0);
    wait_dead_rows(daemon, sink, 0);
    let got = receiver.unique_ids();
    let missing: Vec<&String> = poisoned.iter().filter(|id| !got.contains(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} replayed records never reached the receiver (fresh records: {}), first: {:?}",
        missing.len(),
        poisoned.len(),
        fresh.len(),
        missing.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        fresh.iter().all(|id| got.contains(id)),
        "every new record arrived"
    );
    let l = balanced(daemon, "after the replays");
    assert_eq!(
        figure(&l, "/delivered"),
        got.len() as u64,
        "delivered is what the receiver got: {l:#}"
    );
    assert_eq!(figure(&l, "/acked"), got.len() as u64, "{l:#}");
}

#[test]
fn rows_replayed_while_a_batch_of_replayed_and_new_rows_is_out_all_reach_the_receiver_and_delivered_counts_only_them(
) {
    let receiver = Receiver::start();
    receiver.reject_payloads_containing(POISON);
    let mut config = push_config(&receiver, 64);
    config["connector"]["push"]["batch_rows"] = json!(500);
    let daemon = Daemon::start(config);
    replays_race_batches_in_flight(&receiver, &daemon, "push", RACE_DEAD);
}

#[test]
fn rows_replayed_into_the_volatile_buffer_while_a_batch_is_out_all_reach_the_receiver() {
    let receiver = Receiver::start();
    receiver.reject_payloads_containing(POISON);
    let mut config = named_config(&receiver, "mem", "memory");
    config["sinks"][0]["uplink"]["batch_rows"] = json!(500);
    let daemon = Daemon::start(config);
    replays_race_batches_in_flight(&receiver, &daemon, "mem", RACE_DEAD_VOLATILE);
}

/// An empty body with `Content-Length: 0` for a POST: without one the test client sends a
/// chunked empty body, which the server may not drain before it answers, and then closes
/// the connection the client would reuse for its next request.
fn empty_body(method: &str) -> Option<&'static [u8]> {
    (method == "POST").then_some(&b""[..])
}

#[test]
fn the_admin_verbs_answer_405_with_allow_400_for_a_bad_id_404_for_an_unknown_one_and_401_without_the_token(
) {
    let receiver = Receiver::start();
    let mut config = push_config(&receiver, 8);
    // A flow that names `storage`, so that a sink without a queue of its own exists.
    config["flows"] = ingest_flow(&["storage", "push"]);
    let daemon = Daemon::start(config);
    for (method, p, allow) in [
        ("POST", "/api/push/dead-letters", "GET"),
        ("GET", "/api/push/dead-letters/replay", "POST"),
        ("PUT", "/api/push/dead-letters/1", "GET, DELETE"),
        ("POST", "/api/sinks/push/dead-letters/1", "GET, DELETE"),
        ("GET", "/api/sinks/push/dead-letters/1/replay", "POST"),
        ("DELETE", "/api/sinks/push/dead-letters/replay", "POST"),
    ] {
        let reply = daemon.request(method, p, Some(ADMIN_TOKEN), &[], Some(b""));
        assert_error_reply(&reply, 405, &format!("{method} {p}"));
        assert_eq!(reply.header("allow"), Some(allow), "{method} {p}");
    }
    for (method, p) in [
        ("GET", "/api/push/dead-letters/abc"),
        ("DELETE", "/api/sinks/push/dead-letters/-1"),
        ("POST", "/api/push/dead-letters/1x/replay"),
    ] {
        let reply = daemon.request(method, p, Some(ADMIN_TOKEN), &[], empty_body(method));
        let error = assert_error_reply(&reply, 400, &format!("{method} {p}"));
        assert!(error.contains("whole number"), "{error}");
    }
    for (method, p, says) in [
        ("GET", "/api/push/dead-letters/7", "no such dead letter"),
        ("DELETE", "/api/push/dead-letters/7", "no such dead letter"),
        (
            "POST",
            "/api/sinks/push/dead-letters/7/replay",
            "no such dead letter",
        ),
        ("GET", "/api/sinks/nowhere/dead-letters/7", "no such sink"),
        (
            "POST",
            "/api/sinks/nowhere/dead-letters/replay",
            "no such sink",
        ),
        (
            "GET",
            "/api/sinks/storage/dead-letters/7",
            "no queue of its own",
        ),
        (
            "DELETE",
            "/api/sinks/storage/dead-letters/7",
            "no queue of its own",
        ),
        (
            "GET",
            "/api/push/dead-letters/7/replay/more",
            "no such endpoint",
        ),
    ] {
        let reply = daemon.request(method, p, Some(ADMIN_TOKEN), &[], empty_body(method));
        let error = assert_error_reply(&reply, 404, &format!("{method} {p}"));
        assert!(error.contains(says), "{method} {p}: {error}");
    }
    for (method, p) in [
        ("GET", "/api/push/dead-letters/0"),
        ("POST", "/api/push/dead-letters/0/replay"),
        ("POST", "/api/sinks/push/dead-letters/replay"),
        ("DELETE", "/api/sinks/push/dead-letters/0"),
    ] {
        // Four failures each way: below the count after which 401s are slowed down.
        for token in [None, Some("wrong-token-0123456")] {
            let reply = daemon.request(method, p, token, &[], empty_body(method));
            assert_eq!(reply.status, 401, "{method} {p} with {token:?}: {reply:?}");
        }
    }
}

#[test]
fn a_disk_queue_in_front_of_mqtt_has_the_same_dead_letter_verbs_and_its_ledger_balances() {
    let broker = Mosquitto::start();
    let subscriber = MqttClient::connect(broker.port(), "it-qdl-sub", Some("qdl/#"));
    let mut config = queue_config(8, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["mqtt"] = json!({"connections": [
        {"name": "b", "url": broker.url(), "client_id": "it-qdl", "reconnect_max_ms": 200},
    ]});
    config["sinks"] = json!([
        {"name": "mq", "type": "mqtt", "topic": "qdl/{{key}}", "qos": 1,
         "queue": "disk", "max_quota_mb": 8, "on_full": "block"},
    ]);
    config["flows"] = ingest_flow(&["mq"]);
    let daemon = Daemon::start(config);
    post(&daemon, "ok1", &json!({"n": 1}));
    // The key becomes the topic: a wildcard in it is a topic the sink refuses for good.
    post(&daemon, "bad%23", &json!({"n": 2}));
    wait_dead_rows(&daemon, "mq", 1);
    wait_until(POLL_DEADLINE, "the good record published", || {
        subscriber.received().iter().any(|(t, _)| t == "qdl/ok1")
    });
    let (dl, _) = letters(&daemon, "mq")[0].clone();
    let reply = daemon.get(&path("mq", &format!("/{dl}")), Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "{reply:?}");
    let one = reply.json();
    assert_eq!(one["record"]["key"], json!("bad#"), "{one:#}");
    assert!(
        one["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not deliverable") && r.contains("MQTT wildcard")),
        "{one:#}"
    );

    // Replayed, it is refused again: a new dead letter, still counted once.
    let reply = daemon.post(
        &path("mq", &format!("/{dl}/replay")),
        Some(ADMIN_TOKEN),
        b"",
    );
    assert_eq!(reply.status, 200, "{reply:?}");
    wait_until(
        POLL_DEADLINE,
        "the replayed record dead-lettered again",
        || {
            letters(&daemon, "mq")
                .first()
                .is_some_and(|(id, _)| *id > dl)
        },
    );
    assert_eq!(letters(&daemon, "mq").len(), 1);
    wait_queue_rows(&daemon, "mq", 0);
    let l = balanced(&daemon, "after the replay");
    assert_eq!(
        (
            figure(&l, "/delivered"),
            figure(&l, "/dead_lettered"),
            figure(&l, "/pending")
        ),
        (1, 1, 0),
        "{l:#}"
    );
    assert_eq!(l["queue_checks"]["mq"]["agrees"], json!(true), "{l:#}");
    assert_eq!(l["sinks"]["mq"]["imbalance"], json!(0), "{l:#}");

    let (again, _) = letters(&daemon, "mq")[0].clone();
    let reply = daemon.delete(&path("mq", &format!("/{again}")), Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(u64_at(&entry(&daemon, "mq"), "/dead_letter_rows"), 0);
    let l = balanced(&daemon, "after the delete");
    assert_eq!(figure(&l, "/dead_lettered"), 1, "{l:#}");
    let metrics = daemon.metrics();
    for (family, value) in [
        ("opex_connector_disk_queue_dead_letters_total", 2.0),
        ("opex_connector_disk_queue_dead_letters_replayed_total", 1.0),
        ("opex_connector_disk_queue_dead_letters_deleted_total", 1.0),
        ("opex_connector_disk_queue_dead_letter_rows", 0.0),
    ] {
        assert_eq!(metric(&metrics, family), Some(value), "{family}");
    }
}
