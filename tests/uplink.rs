//! The uplink that drains the push queue, against a real HTTP receiver: outages, 503s,
//! a rejected record, and the NDJSON wire format. Drives the real binary.

mod common;

use std::collections::BTreeSet;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use common::*;
use serde_json::{json, Value};

const UPLINK_TOKEN: &str = "up-t0ken";
const ADMIN_TOKEN: &str = "adm1n-t0ken-0123";

/// A block queue of 8 MiB draining to `receiver`, with quick retries.
fn uplink_config(receiver: &Receiver, batch_rows: u64, token: Option<&str>) -> Value {
    let mut config = queue_config(8, "block");
    config["connector"]["push"] = json!({
        "url": receiver.url(),
        "batch_rows": batch_rows,
        "timeout_secs": 5,
        "retry_initial_ms": 50,
        "retry_max_ms": 300,
    });
    if let Some(token) = token {
        config["connector"]["push"]["token"] = json!(token);
    }
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config
}

/// Posts `payload` under `key` and returns the acknowledged record id.
fn post_ok(daemon: &Daemon, key: &str, payload: &str) -> String {
    let reply = daemon.ingest(key, payload);
    assert_eq!(reply.status, 200, "post {key}: {reply:?}");
    reply.json()["id"]
        .as_str()
        .unwrap_or_else(|| panic!("ack without an id: {reply:?}"))
        .to_string()
}

fn post_numbered(daemon: &Daemon, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| post_ok(daemon, &format!("k{i:04}"), &format!(r#"{{"n":{i}}}"#)))
        .collect()
}

fn wait_drained(daemon: &Daemon) {
    wait_until(
        POLL_DEADLINE,
        "the push queue drained to 0 rows and 0 bytes",
        || {
            let s = daemon.status();
            u64_at(&s, "/push_queue/rows") == 0 && u64_at(&s, "/push_queue/used_bytes") == 0
        },
    );
}

/// First arrivals of `ids` at the receiver, in arrival order.
fn arrival_order(receiver: &Receiver, ids: &[String]) -> Vec<String> {
    receiver
        .first_arrivals()
        .into_iter()
        .filter(|id| ids.contains(id))
        .collect()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

#[test]
fn receiver_down_then_up_delivers_everything_in_order() {
    let receiver = Receiver::start_down();
    let daemon = Daemon::start(uplink_config(&receiver, 7, None));

    let ids = post_numbered(&daemon, 100);
    wait_until(
        POLL_DEADLINE,
        "uplink.last_error set while the receiver is down",
        || daemon.status()["uplink"]["last_error"].is_string(),
    );
    let status = daemon.status();
    assert_eq!(status["uplink"]["enabled"], json!(true), "{status:#}");
    assert_eq!(u64_at(&status, "/push_queue/rows"), 100, "{status:#}");
    assert_eq!(u64_at(&status, "/uplink/sent_total"), 0, "{status:#}");

    receiver.up();
    measure_recovery("uplink receiver", Instant::now(), RECOVERY_BOUND, || {
        !receiver.ids().is_empty()
    });
    wait_until(POLL_DEADLINE, "all 100 records at the receiver", || {
        receiver.has_all(&ids)
    });
    assert_eq!(arrival_order(&receiver, &ids), ids, "arrival order");
    wait_drained(&daemon);

    let status = daemon.status();
    assert!(u64_at(&status, "/uplink/sent_total") >= 100, "{status:#}");
    assert_eq!(u64_at(&status, "/uplink/dead_letter_rows"), 0, "{status:#}");
    assert_eq!(
        u64_at(&status, "/uplink/dead_lettered_total"),
        0,
        "{status:#}"
    );
    assert!(
        receiver.bad_lines().is_empty(),
        "{:?}",
        receiver.bad_lines()
    );
    for req in receiver.requests() {
        assert_eq!(
            req.header("authorization"),
            None,
            "no push.token, no Authorization"
        );
        assert!(
            req.body.lines().count() <= 7,
            "a batch of more than batch_rows 7 lines: {}",
            req.body
        );
    }
    // The ledger balances: the 100 acked records are delivered, none pending or lost, and the
    // push queue's counts agree with its (now empty) rows.
    let l = assert_balanced(&ledger(&daemon, true), "after the receiver came up");
    let source = format!("ingest/{SOURCE}");
    assert_eq!(source_figure(&l, &source, "/acked"), 100, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/delivered"), 100, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/pending"), 0, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/lost"), 0, "{l:#}");
}

#[test]
fn receiver_answering_503_is_retried_until_it_accepts() {
    let receiver = Receiver::start();
    receiver.unavailable();
    let daemon = Daemon::start(uplink_config(&receiver, 5, None));

    let ids = post_numbered(&daemon, 20);
    wait_until(POLL_DEADLINE, "the uplink retried after a 503", || {
        receiver
            .requests()
            .iter()
            .filter(|r| r.status == 503)
            .count()
            >= 2
    });
    assert_eq!(
        u64_at(&daemon.status(), "/push_queue/rows"),
        20,
        "503 deleted rows"
    );
    assert!(receiver.records().is_empty());

    receiver.up();
    wait_until(POLL_DEADLINE, "all 20 records at the receiver", || {
        receiver.has_all(&ids)
    });
    assert_eq!(arrival_order(&receiver, &ids), ids, "arrival order");
    wait_drained(&daemon);
    assert_eq!(u64_at(&daemon.status(), "/uplink/dead_letter_rows"), 0);
}

#[test]
fn receiver_rejecting_one_record_parks_it_in_push_dead_letters() {
    // Down first, so the poisoned record shares a batch with the others.
    let receiver = Receiver::start_down();
    let mut config = uplink_config(&receiver, 50, Some(UPLINK_TOKEN));
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    let daemon = Daemon::start(config);

    let poison_payload = json!({"n": 7, "note": "POISON-PILL"});
    let mut good = Vec::new();
    let mut poison_id = String::new();
    for i in 0..20 {
        let key = format!("k{i:04}");
        if i == 7 {
            poison_id = post_ok(&daemon, &key, &poison_payload.to_string());
        } else {
            good.push(post_ok(&daemon, &key, &format!(r#"{{"n":{i}}}"#)));
        }
    }
    receiver.reject_payloads_containing("POISON-PILL");
    receiver.up();

    wait_until(POLL_DEADLINE, "the 19 good records at the receiver", || {
        receiver.has_all(&good)
    });
    assert_eq!(
        arrival_order(&receiver, &good),
        good,
        "arrival order of the good ones"
    );
    assert!(
        !receiver.unique_ids().contains(&poison_id),
        "the poisoned record was accepted"
    );
    wait_until(POLL_DEADLINE, "uplink.dead_letter_rows == 1", || {
        u64_at(&daemon.status(), "/uplink/dead_letter_rows") == 1
    });
    wait_drained(&daemon);
    let status = daemon.status();
    assert_eq!(
        u64_at(&status, "/uplink/dead_lettered_total"),
        1,
        "{status:#}"
    );

    // The uplink retried the rejected batch one record at a time.
    let alone = receiver
        .requests()
        .into_iter()
        .any(|r| r.status == 400 && r.body.lines().count() == 1 && r.body.contains(&poison_id));
    assert!(alone, "the poisoned record was never sent on its own");

    let reply = daemon.get("/api/push/dead-letters", Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "{reply:?}");
    let letters = reply.json();
    assert_eq!(u64_at(&letters, "/total"), 1, "{letters:#}");
    let rows = letters["rows"].as_array().expect("rows array");
    assert_eq!(rows.len(), 1, "{letters:#}");
    let row = &rows[0];
    assert!(row["seq"].is_u64(), "seq is a number: {row:#}");
    assert!(
        row["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "reason is a non-empty string: {row:#}"
    );
    let record = &row["record"];
    assert_eq!(record["id"], json!(poison_id), "{row:#}");
    assert_eq!(
        record["source"],
        json!(format!("ingest/{SOURCE}")),
        "{row:#}"
    );
    assert_eq!(record["key"], json!("k0007"), "{row:#}");
    assert_eq!(record["payload"], poison_payload, "{row:#}");
    assert!(record["ts"].is_i64() || record["ts"].is_u64(), "{row:#}");

    for (token, what) in [(None, "no token"), (Some("wrong"), "wrong token")] {
        let reply = daemon.get("/api/push/dead-letters", token);
        assert_eq!(reply.status, 401, "dead letters with {what}: {reply:?}");
    }
}

#[test]
fn uplink_sends_ndjson_lines_with_the_posted_payload_and_the_bearer_token() {
    let receiver = Receiver::start();
    let daemon = Daemon::start(uplink_config(&receiver, 3, Some(UPLINK_TOKEN)));

    let payloads = [
        ("plain", json!({"temp": 21.5, "ok": true, "none": null})),
        (
            "nested",
            json!({"order": {"lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-2", "qty": 1}]}}),
        ),
        (
            "text",
            json!({"text": "line one\nline two \"quoted\" Grüße ✓ 日本"}),
        ),
        (
            "big-int",
            json!({"counter": 9_007_199_254_740_993_u64, "neg": -42}),
        ),
        ("array", json!([1, "two", {"three": 3}])),
        ("empty", json!({})),
    ];
    let before = now_ms();
    let mut expected = Vec::new();
    for (key, payload) in &payloads {
        let id = post_ok(&daemon, key, &payload.to_string());
        expected.push((id, *key, payload.clone()));
    }
    let after = now_ms();
    let ids: Vec<String> = expected.iter().map(|(id, _, _)| id.clone()).collect();
    wait_until(POLL_DEADLINE, "every record at the receiver", || {
        receiver.has_all(&ids)
    });
    assert!(
        receiver.bad_lines().is_empty(),
        "{:?}",
        receiver.bad_lines()
    );

    let records = receiver.records();
    for (id, key, payload) in &expected {
        let record = records
            .iter()
            .find(|r| r["id"] == json!(id))
            .unwrap_or_else(|| panic!("record {id} missing"));
        let fields: BTreeSet<&str> = record
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            fields,
            BTreeSet::from(["id", "source", "key", "ts", "payload"]),
            "{record}"
        );
        assert_eq!(
            record["source"],
            json!(format!("ingest/{SOURCE}")),
            "{record}"
        );
        assert_eq!(record["key"], json!(key), "{record}");
        assert_eq!(record["payload"], *payload, "{record}");
        let ts = record["ts"]
            .as_i64()
            .unwrap_or_else(|| panic!("ts is not an integer: {record}"));
        assert!(
            (before - 1000..=after + 1000).contains(&ts),
            "ts {ts} is not the unix ms time of the post ({before}..={after}): {record}"
        );
    }

    for req in receiver.requests() {
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, "/ingest");
        assert_eq!(
            req.header("authorization"),
            Some(format!("Bearer {UPLINK_TOKEN}").as_str()),
            "Authorization header"
        );
        let content_type = req.header("content-type").unwrap_or("");
        assert!(
            content_type.starts_with("application/x-ndjson"),
            "Content-Type {content_type:?}"
        );
        assert!(
            req.body.ends_with('\n'),
            "body does not end with a newline: {:?}",
            req.body
        );
        assert!(
            req.body.lines().count() <= 3,
            "more than batch_rows 3: {:?}",
            req.body
        );
    }
    wait_drained(&daemon);
}

#[test]
fn a_flapping_receiver_gets_every_acked_record_and_each_recovery_is_bounded() {
    let receiver = Receiver::start();
    let daemon = Daemon::start(uplink_config(&receiver, 20, None));
    // One client posts without pause through every outage.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poster = {
        let stop = stop.clone();
        let client = daemon.client();
        let url = ingest_url(&daemon.base(), SOURCE, "flap");
        std::thread::spawn(move || {
            let mut acked = Vec::new();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                n += 1;
                let body = format!(r#"{{"n":{n}}}"#);
                if let Ok(r) = client.post(&url, Some(TOKEN), body.as_bytes()) {
                    if r.status == 200 {
                        acked.push(r.json()["id"].as_str().unwrap_or_default().to_string());
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            acked
        })
    };
    let mut worst = std::time::Duration::ZERO;
    for _ in 0..5 {
        wait_until(POLL_DEADLINE, "records reach the receiver", || {
            !receiver.ids().is_empty()
        });
        receiver.down();
        // An outage long enough for the uplink to fail and back off, not a blip.
        wait_until(POLL_DEADLINE, "the uplink notices the outage", || {
            daemon.status()["uplink"]["last_error"].is_string()
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        let seen = receiver.ids().len();
        receiver.up();
        let took = measure_recovery(
            "uplink receiver (flapping)",
            Instant::now(),
            RECOVERY_BOUND,
            || receiver.ids().len() > seen,
        );
        worst = worst.max(took);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let acked = poster.join().expect("poster");
    assert!(acked.len() > 50, "only {} records acked", acked.len());
    wait_until(POLL_DEADLINE, "every acked record at the receiver", || {
        receiver.has_all(&acked)
    });
    wait_drained(&daemon);
    eprintln!(
        "flapping: acked={} worst_recovery_secs={:.3}",
        acked.len(),
        worst.as_secs_f64()
    );
    // The ledger balances after five outages: every acked record delivered, none lost.
    let l = assert_balanced(&ledger(&daemon, true), "after the flapping receiver");
    let source = format!("ingest/{SOURCE}");
    assert_eq!(
        source_figure(&l, &source, "/acked"),
        acked.len() as u64,
        "{l:#}"
    );
    assert_eq!(
        source_figure(&l, &source, "/delivered"),
        acked.len() as u64,
        "{l:#}"
    );
    assert_eq!(source_figure(&l, &source, "/lost"), 0, "{l:#}");
}

#[test]
fn regression_an_uplink_auth_failure_keeps_every_row_and_delivers_them_once_the_token_works_again()
{
    let receiver = Receiver::start();
    receiver.answer_every_request_with(401);
    let mut config = uplink_config(&receiver, 100, Some(UPLINK_TOKEN));
    config["connector"]["push"]["retry_max_ms"] = json!(100);
    let daemon = Daemon::start(config);
    let ids = post_numbered(&daemon, 300);
    wait_until(POLL_DEADLINE, "the uplink holds the queue", || {
        daemon.status()["uplink"]["held"] == true
    });
    // Requests are refused, not records: nothing is dead-lettered, everything is kept.
    let status = daemon.status();
    assert_eq!(u64_at(&status, "/push_queue/rows"), 300, "{status:#}");
    assert_eq!(
        u64_at(&status, "/uplink/dead_lettered_total"),
        0,
        "{status:#}"
    );
    // The public document says what failed, not the receiver's body (which echoes a record).
    assert_eq!(status["uplink"]["last_error"], "HTTP 401", "{status:#}");
    assert!(!status.to_string().contains("echo"), "{status:#}");
    let errors = daemon
        .get("/api/sinks/push/errors", Some(ADMIN_TOKEN))
        .json();
    assert!(
        errors["last_error"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("HTTP 401") && d.contains("echo")),
        "{errors:#}"
    );
    assert_eq!(daemon.get("/api/sinks/push/errors", None).status, 401);
    // The alert hub reports the hold.
    wait_until(POLL_DEADLINE, "the held alert is open", || {
        daemon.status()["alerts"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["component"] == "push_queue.held"))
    });

    receiver.answer_normally();
    wait_until(POLL_DEADLINE, "every record reaches the receiver", || {
        receiver.has_all(&ids)
    });
    wait_drained(&daemon);
    let status = daemon.status();
    assert_eq!(status["uplink"]["held"], false, "{status:#}");
    assert_eq!(
        u64_at(&status, "/uplink/dead_lettered_total"),
        0,
        "{status:#}"
    );
    let l = assert_balanced(&ledger(&daemon, true), "after the rotated token");
    assert_eq!(
        source_figure(&l, &format!("ingest/{SOURCE}"), "/delivered"),
        300,
        "{l:#}"
    );
}

#[test]
fn a_receiver_that_refuses_every_record_holds_the_queue_after_twenty_dead_letters_in_a_row() {
    let receiver = Receiver::start();
    receiver.answer_every_request_with(422);
    let mut config = uplink_config(&receiver, 10, None);
    config["connector"]["push"]["retry_max_ms"] = json!(100);
    let daemon = Daemon::start(config);
    let ids = post_numbered(&daemon, 40);
    wait_until(POLL_DEADLINE, "the uplink holds the queue", || {
        daemon.status()["uplink"]["held"] == true
    });
    let status = daemon.status();
    // Nineteen records refused alone went to the dead letters; the twentieth held the queue.
    assert_eq!(
        u64_at(&status, "/uplink/dead_lettered_total"),
        19,
        "{status:#}"
    );
    assert_eq!(u64_at(&status, "/push_queue/rows"), 21, "{status:#}");
    assert_eq!(status["uplink"]["last_error"], "HTTP 422", "{status:#}");
    let held_again = u64_at(&status, "/uplink/failures_total");
    wait_until(POLL_DEADLINE, "still retrying, still holding", || {
        let s = daemon.status();
        u64_at(&s, "/uplink/failures_total") > held_again + 2
            && u64_at(&s, "/uplink/dead_lettered_total") == 19
    });
    receiver.answer_normally();
    let kept: Vec<String> = ids[19..].to_vec();
    wait_until(POLL_DEADLINE, "the held records are delivered", || {
        receiver.has_all(&kept)
    });
    assert_balanced(&ledger(&daemon, true), "after the hold");
}

#[test]
fn a_clean_stop_with_records_in_the_volatile_push_buffer_logs_them_as_lost_at_stop() {
    // No `push_queue`: the push sink waits in its memory buffer, and the receiver is away.
    let receiver = Receiver::start_down();
    let mut config = uplink_config(&receiver, 10, None);
    config["connector"]
        .as_object_mut()
        .expect("connector")
        .remove("push_queue");
    let mut daemon = Daemon::start(config);
    post_numbered(&daemon, 5);
    let status = daemon.status();
    assert_eq!(status["push_queue"]["durable"], json!(false), "{status:#}");
    assert_eq!(u64_at(&status, "/push_queue/rows"), 5, "{status:#}");
    let exit = daemon.stop();
    assert!(exit.success(), "{exit}");
    let log = daemon.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("lost_at_stop_total="))
        .unwrap_or_else(|| panic!("no line on the records lost at the stop:\n{log}"));
    assert!(
        line.contains("sink=push") && line.contains("rows=5 ") && line.contains("ERROR"),
        "{line}"
    );
}
