//! The backlog against a scripted database: bounds, drops, retries, dead letters, stop.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use super::*;
use crate::admission::OnFull;
use crate::engine::Engine;
use crate::flow::Plan;
use crate::record::Record;
use crate::sinks::Sinks;
use crate::store::dead_letters::{DeadLetterQueue, DlqFilter};

/// A database whose answers are scripted: each insert takes the next answer (`Ok` once the
/// script is empty) and records the keys it was given.
#[derive(Clone, Default)]
struct Script {
    answers: Arc<Mutex<VecDeque<Result<(), InsertError>>>>,
    inserted: Arc<Mutex<Vec<Vec<String>>>>,
}

impl Inserter<String> for Script {
    fn insert(&mut self, rows: &[Row<String>]) -> Result<(), InsertError> {
        let answer = self.answers.lock().unwrap().pop_front().unwrap_or(Ok(()));
        if answer.is_ok() {
            self.inserted
                .lock()
                .unwrap()
                .push(rows.iter().map(|r| r.data.clone()).collect());
        }
        answer
    }
}

fn cfg(batch: usize, max: usize, on_full: OnFull) -> SinkBatchConfig {
    SinkBatchConfig {
        batch_rows: batch,
        flush_interval: Duration::from_millis(20),
        max_backlog_rows: max,
        on_full,
    }
}

fn push(b: &Backlog<String>, key: &str) -> Result<(), PushError> {
    let record = Record::from_value("ingest/x", key, &json!({"k": key}));
    let reservation = b.gate().admit(1).map_err(PushError::Refused)?;
    b.push(
        Row {
            tracked: true,
            record,
            data: key.to_string(),
        },
        reservation,
    )
}

fn engine(dir: &std::path::Path) -> Arc<Engine> {
    let dlq = Arc::new(DeadLetterQueue::open(dir, 1000).unwrap());
    Arc::new(Engine::new(
        Plan::direct(&["ingest/x".to_string()], "clickhouse"),
        Sinks::default(),
        dlq,
    ))
}

/// The ledger counts of `ingest/x` in the backlog: balanced, and returned for more checks.
fn book(b: &Backlog<String>) -> crate::ledger::Counts {
    let c = b.ledger().snapshot()["ingest/x"];
    assert_eq!(c.imbalance(), 0, "the backlog's ledger balances: {c:?}");
    c
}

fn wait(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn evict_oldest_drops_the_oldest_waiting_rows_and_counts_each() {
    let b = Backlog::<String>::new("clickhouse", "t".into(), cfg(10, 5, OnFull::EvictOldest));
    for i in 0..8 {
        push(&b, &format!("k{i}")).unwrap();
    }
    let st = b.status();
    assert_eq!(st.dropped_total, 3);
    assert_eq!(st.backlog_rows, 5);
    assert_eq!(st.fill_pct, 100.0);
    assert_eq!(st.accepted_total, 8);
    assert_eq!(b.waiting(), ["k3", "k4", "k5", "k6", "k7"]);
    let c = book(&b);
    assert_eq!((c.acked, c.evicted, c.pending), (8, 3, 5));
}

#[test]
fn block_refuses_at_the_bound_through_the_gate_until_rows_leave() {
    let dir = tempfile::tempdir().unwrap();
    let eng = engine(dir.path());
    let b = Arc::new(Backlog::<String>::new(
        "postgres",
        "t".into(),
        cfg(2, 4, OnFull::Block),
    ));
    let script = Script::default();
    // The database is down for the first insert.
    script
        .answers
        .lock()
        .unwrap()
        .push_back(Err(InsertError::Transient("connection refused".into())));
    for i in 0..4 {
        push(&b, &format!("k{i}")).unwrap();
    }
    assert!(matches!(push(&b, "k4"), Err(PushError::Refused(_))));
    assert_eq!(b.status().blocked_total, 1);
    assert!(b.status().blocking);
    let (b2, mut s2, e2) = (Arc::clone(&b), script.clone(), Arc::clone(&eng));
    let t = std::thread::spawn(move || b2.run(&mut s2, &e2));
    wait("the four rows", || b.status().inserted_total == 4);
    push(&b, "k4").unwrap();
    wait("the fifth row", || b.status().inserted_total == 5);
    let st = b.status();
    assert_eq!(st.dropped_total, 0);
    assert_eq!(st.insert_failures_total, 1);
    assert!(st.healthy);
    let all: Vec<String> = script.inserted.lock().unwrap().concat();
    assert_eq!(all, ["k0", "k1", "k2", "k3", "k4"], "in order, each once");
    let c = book(&b);
    assert_eq!((c.acked, c.delivered, c.pending), (5, 5, 0));
    b.close();
    t.join().unwrap();
}

#[test]
fn a_permanent_error_parks_the_batch_in_the_dead_letter_queue_and_the_next_batch_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let eng = engine(dir.path());
    let b = Arc::new(Backlog::<String>::new(
        "clickhouse",
        "t".into(),
        cfg(2, 10, OnFull::EvictOldest),
    ));
    let script = Script::default();
    script
        .answers
        .lock()
        .unwrap()
        .push_back(Err(InsertError::Permanent(
            "Code: 16. DB::Exception: No such column nope".into(),
        )));
    push(&b, "a").unwrap();
    push(&b, "b").unwrap();
    let (b2, mut s2, e2) = (Arc::clone(&b), script.clone(), Arc::clone(&eng));
    let t = std::thread::spawn(move || b2.run(&mut s2, &e2));
    wait("two dead letters", || b.status().dead_lettered_total == 2);
    push(&b, "c").unwrap();
    wait("the next row", || b.status().inserted_total == 1);
    let parked = eng
        .dead_letters()
        .list(&DlqFilter {
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(parked.len(), 2);
    assert_eq!(parked[0].flow, crate::flow::DIRECT_FLOW);
    assert_eq!(parked[0].node, "clickhouse");
    assert_eq!(
        parked[0].reason,
        "clickhouse refused the batch: Code: 16. DB::Exception: No such column nope"
    );
    assert_eq!(parked[0].record["key"], "a");
    assert_eq!(b.status().insert_failures_total, 0, "not retried");
    let c = book(&b);
    assert_eq!((c.dead_lettered, c.delivered, c.pending), (2, 1, 0));
    b.close();
    t.join().unwrap();
}

#[test]
fn a_clean_stop_with_the_database_down_counts_what_is_left_as_lost() {
    let dir = tempfile::tempdir().unwrap();
    let eng = engine(dir.path());
    let b = Arc::new(Backlog::<String>::new(
        "postgres",
        "t".into(),
        cfg(100, 1000, OnFull::Block),
    ));
    let script = Script::default();
    for _ in 0..100 {
        script
            .answers
            .lock()
            .unwrap()
            .push_back(Err(InsertError::Transient("down".into())));
    }
    for i in 0..7 {
        push(&b, &format!("k{i}")).unwrap();
    }
    let (b2, mut s2, e2) = (Arc::clone(&b), script.clone(), Arc::clone(&eng));
    let t = std::thread::spawn(move || b2.run(&mut s2, &e2));
    wait("a failed insert", || b.status().insert_failures_total >= 1);
    let stopping = Instant::now();
    b.close();
    t.join().unwrap();
    assert!(
        stopping.elapsed() < STOP_DEADLINE,
        "the backoff does not delay the stop"
    );
    let st = b.status();
    assert_eq!(st.lost_at_stop_total, 7);
    assert_eq!(st.backlog_rows, 0);
    let c = book(&b);
    assert_eq!((c.acked, c.dropped, c.pending), (7, 7, 0));
    assert!(matches!(push(&b, "late"), Err(PushError::Closed)));
}

#[test]
fn a_batch_leaves_when_full_or_when_its_oldest_row_waited_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let eng = engine(dir.path());
    let mut c = cfg(3, 100, OnFull::EvictOldest);
    c.flush_interval = Duration::from_secs(3600);
    let b = Arc::new(Backlog::<String>::new("clickhouse", "t".into(), c));
    let script = Script::default();
    let (b2, mut s2, e2) = (Arc::clone(&b), script.clone(), Arc::clone(&eng));
    let t = std::thread::spawn(move || b2.run(&mut s2, &e2));
    for k in ["a", "b", "c", "d"] {
        push(&b, k).unwrap();
    }
    wait("a full batch", || b.status().batches_total == 1);
    assert_eq!(script.inserted.lock().unwrap()[0], ["a", "b", "c"]);
    // "d" waits for its hour; a clean stop inserts it.
    assert_eq!(b.status().backlog_rows, 1);
    b.close();
    t.join().unwrap();
    assert_eq!(b.status().inserted_total, 4);
    assert_eq!(script.inserted.lock().unwrap()[1], ["d"]);
}
