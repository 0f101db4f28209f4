//! Schedules, backfills and the push preprocess stage, against the real binary: ticks and
//! their refusals in `/api/schedules`, a backfill killed midway that resumes from its
//! checkpoint, refused backfill records retried until accepted, and deadband suppression that
//! reaches the push queue only.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// `GET /api/schedules` (must answer 200): its `schedules` array.
fn schedules(daemon: &Daemon) -> Vec<Value> {
    let reply = daemon.get("/api/schedules", None);
    assert_eq!(reply.status, 200, "GET /api/schedules: {reply:?}");
    reply.json()["schedules"]
        .as_array()
        .unwrap_or_else(|| panic!("no schedules array: {}", reply.body))
        .clone()
}

fn schedule(daemon: &Daemon, name: &str) -> Value {
    schedules(daemon)
        .into_iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no schedule {name:?} in /api/schedules"))
}

fn backfill(daemon: &Daemon, name: &str) -> Value {
    named(&daemon.status(), "/backfills", name).clone()
}

fn is_rfc3339_utc(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        s.len() >= 20 && s.ends_with('Z') && s.as_bytes()[10] == b'T' && s.as_bytes()[4] == b'-'
    })
}

#[test]
fn a_schedule_every_second_ticks_and_shows_its_next_and_last_tick() {
    let mut config = queue_config(8, "evict_oldest");
    config["schedules"] = json!([
        { "name": "ping", "every": "1s", "payload": { "job": "ping" } },
        { "name": "nightly", "cron": "0 2 * * *" },
    ]);
    let daemon = Daemon::start(config);
    wait_until(Duration::from_secs(30), "three ticks of ping", || {
        u64_at(&schedule(&daemon, "ping"), "/ticks_total") >= 3
    });
    let ping = schedule(&daemon, "ping");
    assert_eq!(ping["every"], json!("1s"), "{ping:#}");
    assert_eq!(ping["last_result"], json!("ok"), "{ping:#}");
    assert!(is_rfc3339_utc(&ping["last_tick"]), "{ping:#}");
    assert!(is_rfc3339_utc(&ping["next_tick"]), "{ping:#}");
    assert!(
        ping["next_tick"].as_str() > ping["last_tick"].as_str(),
        "next after last: {ping:#}"
    );
    assert_eq!(u64_at(&ping, "/backpressured_total"), 0, "{ping:#}");

    let nightly = schedule(&daemon, "nightly");
    assert_eq!(nightly["cron"], json!("0 2 * * *"), "{nightly:#}");
    assert!(
        nightly["next_tick"]
            .as_str()
            .is_some_and(|t| t.ends_with("T02:00:00Z")),
        "{nightly:#}"
    );
    assert_eq!(nightly["last_tick"], Value::Null, "{nightly:#}");
    assert_eq!(nightly["last_result"], Value::Null, "{nightly:#}");

    // The same entries under `schedules` in /api/status, and the ticks in the push queue.
    let status = daemon.status();
    let listed = named(&status, "/schedules", "ping");
    assert_eq!(listed["every"], json!("1s"), "{status:#}");
    assert!(u64_at(&status, "/push_queue/rows") >= 3, "{status:#}");
}

#[test]
fn a_tick_a_full_block_queue_refuses_shows_backpressured_and_is_counted() {
    let mut config = queue_config(1, "block");
    config["schedules"] = json!([{ "name": "ping", "every": "1s" }]);
    let daemon = Daemon::start(config);
    let (stored, refusal) = fill_until_refused(&daemon, "fill-");
    assert_retry(&refusal, "push", "the filling ingest");
    assert!(stored > 0);
    wait_until(
        Duration::from_secs(30),
        "a tick refused: last_result backpressured",
        || schedule(&daemon, "ping")["last_result"] == "backpressured",
    );
    let ping = schedule(&daemon, "ping");
    let refused = u64_at(&ping, "/backpressured_total");
    assert!(refused >= 1, "{ping:#}");
    let status = daemon.status();
    // The engine counts every refusal: the ingest's 503 and the ticks'.
    assert!(
        u64_at(&status, "/engine/stats/backpressured") > refused,
        "{status:#}"
    );
    assert!(
        metric(
            &daemon.metrics(),
            "opex_connector_schedule_backpressured_total"
        )
        .is_some_and(|v| v >= 1.0),
        "metric"
    );
}

/// Writes `lines` to a new file in `dir`.
fn write_file(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).expect("create backfill file");
    for l in lines {
        writeln!(f, "{l}").expect("write backfill file");
    }
    f.sync_all().expect("sync backfill file");
    path
}

/// The record numbers of ids `bf-<name>-<fingerprint>-<n>` at the receiver, with how often
/// each arrived.
fn arrivals(receiver: &Receiver, name: &str) -> HashMap<u64, u64> {
    let prefix = format!("bf-{name}-");
    let mut seen = HashMap::new();
    for id in receiver.ids() {
        if let Some(rest) = id.strip_prefix(&prefix) {
            let n: u64 = rest
                .rsplit('-')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("bad backfill id {id}"));
            *seen.entry(n).or_default() += 1;
        }
    }
    seen
}

fn uplink_to(config: &mut Value, receiver: &Receiver, batch_rows: u64) {
    config["connector"]["push"] = json!({
        "url": receiver.url(),
        "batch_rows": batch_rows,
        "timeout_secs": 5,
        "retry_initial_ms": 50,
        "retry_max_ms": 300,
    });
}

#[test]
fn a_backfill_killed_midway_resumes_from_its_checkpoint_and_delivers_every_record() {
    const TOTAL: u64 = 20_000;
    const EVERY: u64 = 100;
    const IN_FLIGHT: u64 = 4;
    const BATCH: u64 = 100;
    let files = tempfile::tempdir().expect("temp dir");
    let lines: Vec<String> = (1..=TOTAL)
        .map(|n| format!(r#"{{"order":"o-{n}","qty":{n},"at":"2024-05-01T12:00:00Z"}}"#))
        .collect();
    let file = write_file(files.path(), "orders.jsonl", &lines);
    let receiver = Receiver::start();
    let mut config = queue_config(64, "block");
    uplink_to(&mut config, &receiver, BATCH);
    config["backfills"] = json!([{
        "name": "hist",
        "file": file.to_string_lossy(),
        "format": "jsonl",
        "key_field": "order",
        "timestamp_field": "at",
        "max_in_flight": IN_FLIGHT,
        "checkpoint_every": EVERY,
    }]);
    let mut daemon = Daemon::start(config);
    wait_until(Duration::from_secs(60), "2000 records done", || {
        u64_at(&backfill(&daemon, "hist"), "/done") >= 2_000
    });
    let before = backfill(&daemon, "hist");
    daemon.kill9();
    assert!(
        u64_at(&before, "/done") < TOTAL,
        "killed midway, not after the end: {before:#}"
    );
    assert_eq!(u64_at(&before, "/total"), TOTAL, "{before:#}");

    daemon.restart();
    wait_until(Duration::from_secs(120), "the backfill done", || {
        backfill(&daemon, "hist")["state"] == "done"
    });
    let after = backfill(&daemon, "hist");
    assert_eq!(u64_at(&after, "/done"), TOTAL, "{after:#}");
    assert_eq!(u64_at(&after, "/malformed"), 0, "{after:#}");
    assert_eq!(after["eta_secs"], json!(0), "{after:#}");
    let log = daemon.stderr();
    let resumed = log
        .split("===== harness: start #2 =====")
        .nth(1)
        .and_then(|run| run.split("resuming_after=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no resuming_after in the second run's log"));
    assert!(
        resumed > 0,
        "resumed from the checkpoint, not from the start"
    );

    wait_until(POLL_DEADLINE, "every record at the receiver", || {
        arrivals(&receiver, "hist").len() as u64 == TOTAL
    });
    let seen = arrivals(&receiver, "hist");
    assert!(
        (1..=TOTAL).all(|n| seen.contains_key(&n)),
        "a record is missing"
    );
    let duplicates: u64 = seen.values().map(|c| c - 1).sum();
    eprintln!(
        "backfill: killed at done={} rate_per_sec={}, resumed after record {resumed}, {duplicates} duplicates at the receiver",
        before["done"], before["rate_per_sec"]
    );
    // Records settled after the last checkpoint, the ones in flight, and one uplink batch
    // sent but not yet deleted when the process died.
    assert!(
        duplicates <= EVERY + IN_FLIGHT + BATCH,
        "{duplicates} duplicates after one kill -9"
    );
    // Keys and times came from the named fields.
    let one = receiver
        .records()
        .into_iter()
        .find(|r| r["payload"]["qty"] == 7)
        .expect("record 7");
    assert_eq!(one["key"], json!("o-7"), "{one}");
    assert_eq!(one["ts"], json!(1_714_564_800_000u64), "{one}");
}

#[test]
fn refused_backfill_records_wait_and_are_retried_until_the_queue_drains() {
    const GOOD: u64 = 3_000;
    let files = tempfile::tempdir().expect("temp dir");
    let mut lines: Vec<String> = vec!["id,amount,note".to_string()];
    for n in 1..=GOOD {
        lines.push(format!("{n},{n}.5,\"{}\"", "x".repeat(1000)));
        if n == 10 || n == 2_000 {
            lines.push("broken,line".to_string());
        }
    }
    let file = write_file(files.path(), "payments.csv", &lines);
    let receiver = Receiver::start_down();
    let mut config = queue_config(1, "block");
    uplink_to(&mut config, &receiver, 500);
    config["backfills"] = json!([{
        "name": "pay",
        "file": file.to_string_lossy(),
        "format": "csv",
        "key_field": "id",
        // One at a time: the file order is kept and a stop leaves nothing acknowledged past
        // the checkpoint.
        "max_in_flight": 1,
    }]);
    let mut daemon = Daemon::start(config);
    wait_until(
        Duration::from_secs(60),
        "the backfill refused and waiting",
        || {
            let b = backfill(&daemon, "pay");
            b["state"] == "waiting" && u64_at(&b, "/retries_total") > 0
        },
    );
    let status = daemon.status();
    assert!(
        u64_at(&status, "/engine/stats/backpressured") > 0,
        "{status:#}"
    );
    assert!(
        u64_at(&status, "/push_queue/blocked_total") > 0,
        "{status:#}"
    );
    let waiting = backfill(&daemon, "pay");
    let done_at_stop = u64_at(&waiting, "/done");
    assert!(done_at_stop < GOOD, "{waiting:#}");

    // A graceful stop while a record waits: the wait ends at once and the position is
    // checkpointed (a retry may still have got in since the status was read).
    assert!(daemon.stop().success(), "graceful stop");
    let checkpoint: Value = serde_json::from_slice(
        &std::fs::read(daemon.data_dir().join("backfills/pay.checkpoint.json"))
            .expect("checkpoint written at stop"),
    )
    .expect("checkpoint JSON");
    let records = u64_at(&checkpoint, "/records");
    assert!(records >= done_at_stop, "{checkpoint}");
    daemon.restart();
    wait_until(
        Duration::from_secs(30),
        "resumed from the stop's checkpoint",
        || {
            daemon
                .stderr()
                .contains(&format!("resuming_after={records}\n"))
        },
    );
    receiver.up();
    wait_until(Duration::from_secs(120), "the backfill done", || {
        backfill(&daemon, "pay")["state"] == "done"
    });
    let done = backfill(&daemon, "pay");
    assert_eq!(u64_at(&done, "/total"), GOOD + 2, "{done:#}");
    assert_eq!(u64_at(&done, "/done"), GOOD + 2, "{done:#}");
    assert_eq!(u64_at(&done, "/malformed"), 2, "{done:#}");
    wait_until(POLL_DEADLINE, "every good record at the receiver", || {
        arrivals(&receiver, "pay").len() as u64 == GOOD
    });
    let seen = arrivals(&receiver, "pay");
    assert!(
        seen.values().all(|c| *c == 1),
        "no record twice after a graceful stop"
    );
    let record = receiver
        .records()
        .into_iter()
        .find(|r| r["key"] == "42")
        .expect("record with id 42");
    // Unquoted numbers are numbers, the quoted note stays text.
    assert_eq!(record["payload"]["id"], json!(42), "{record}");
    assert_eq!(record["payload"]["amount"], json!(42.5), "{record}");
    assert!(record["payload"]["note"].is_string(), "{record}");
    assert!(daemon
        .stderr()
        .contains("backfill record malformed, skipped"));
}

#[test]
fn a_deadband_suppresses_push_values_only_and_counts_them() {
    let mut config = queue_config(8, "evict_oldest");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["connector"]["preprocess"] =
        json!([{ "source": format!("ingest/{SOURCE}"), "deadband": { "absolute": 1.0 } }]);
    config["flows"] = ingest_flow(&["push", "storage"]);
    let daemon = Daemon::start(config);
    // 20 sent; 20.5 and 21.0 within 1.0 of it; 21.5 sent; 22.0 within; 23.0 sent.
    for (i, t) in [20.0, 20.5, 21.0, 21.5, 22.0, 23.0].iter().enumerate() {
        let reply = daemon.ingest("m1", &format!(r#"{{"temp":{t},"site":"a"}}"#));
        assert_stored(&reply, &format!("value {i}"));
    }
    let status = daemon.status();
    assert_eq!(u64_at(&status, "/push_queue/rows"), 3, "{status:#}");
    assert_eq!(
        u64_at(&status, "/push_queue/suppressed_total"),
        3,
        "{status:#}"
    );
    assert_eq!(
        u64_at(&status, "/push_status/suppressed_total"),
        3,
        "{status:#}"
    );
    assert_eq!(
        metric(&daemon.metrics(), "opex_connector_push_suppressed_total"),
        Some(3.0)
    );
    // Storage got every record.
    assert_eq!(event_ids(&daemon, &format!("ingest/{SOURCE}")).len(), 6);
    assert_balanced(&ledger(&daemon, true), "push and storage with a deadband");
}

#[test]
fn values_the_deadband_keeps_out_of_a_push_only_flow_are_booked_as_suppressed_in_the_ledger() {
    let mut config = queue_config(8, "evict_oldest");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["connector"]["preprocess"] =
        json!([{ "source": format!("ingest/{SOURCE}"), "deadband": { "absolute": 1.0 } }]);
    let daemon = Daemon::start(config);
    for (i, t) in [20.0, 20.5, 21.0, 21.5, 22.0, 23.0].iter().enumerate() {
        let reply = daemon.ingest("m1", &format!(r#"{{"temp":{t}}}"#));
        assert_stored(&reply, &format!("value {i}"));
    }
    let l = assert_balanced(&ledger(&daemon, true), "push only with a deadband");
    let source = format!("ingest/{SOURCE}");
    assert_eq!(source_figure(&l, &source, "/acked"), 6, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/pending"), 3, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/losses/suppressed"), 3, "{l:#}");
}

#[test]
fn validate_lists_every_schedule_backfill_and_preprocess_problem_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "connector:\n  data_dir: /tmp/x\n  preprocess:\n    - { source: schedule/ping, deadband: { absolute: 1, percent: 2 } }\n    - { source: schedule/ping, point: temp, aggregate: { fn: avg, window: 0s } }\nschedules:\n  - { name: ping, cron: '*/5 * * * 8' }\n  - { name: pong, every: soon }\nbackfills:\n  - { name: old, file: /data/old.txt, format: txt }\n",
    )
    .expect("write config");
    let out = run_cli(&["validate", path.to_str().expect("utf-8 path")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in [
        "schedules[0].cron: field 5 (day-of-week): 8 is outside 0..=7",
        "schedules[1].every: \"soon\": expected a whole number and a unit (ms, s, m, h, d), e.g. 30s",
        "backfills[0].format: expected jsonl or csv, got \"txt\"",
        "connector.preprocess[0].source: unknown source \"schedule/ping\" (known: )",
        "connector.preprocess[0].deadband: give absolute or percent, not both",
        "connector.preprocess[1].aggregate.window: must be at least 1s",
    ] {
        assert!(stderr.contains(line), "missing {line:?} in:\n{stderr}");
    }
}
