//! The backlog against a scripted database: bounds, drops, retries, dead letters row by row,
//! holds, stop, catch-up inserts.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use super::*;
use crate::admission::OnFull;
use crate::engine::Engine;
use crate::flow::Plan;
use crate::record::Record;
use crate::sinks::queue::HOLD_AFTER_REFUSALS;
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

/// Batches of `batch` rows (no catch-up: `max_insert_rows` is `batch` too), a bound of `max`.
fn cfg(batch: usize, max: usize, on_full: OnFull) -> SinkBatchConfig {
    SinkBatchConfig {
        batch_rows: batch,
        max_insert_rows: batch,
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
fn a_refused_batch_goes_again_row_by_row_and_only_the_row_refused_alone_is_parked() {
    let dir = tempfile::tempdir().unwrap();
    let eng = engine(dir.path());
    let b = Arc::new(Backlog::<String>::new(
        "clickhouse",
        "t".into(),
        cfg(2, 10, OnFull::EvictOldest),
    ));
    let script = Script::default();
    let bad = || {
        Err(InsertError::Permanent(
            "Code: 27. DB::Exception: Cannot parse input".into(),
        ))
    };
    // The batch [a, b] is refused, then `a` alone; `b` alone goes in.
    script.answers.lock().unwrap().extend([bad(), bad()]);
    push(&b, "a").unwrap();
    push(&b, "b").unwrap();
    let (b2, mut s2, e2) = (Arc::clone(&b), script.clone(), Arc::clone(&eng));
    let t = std::thread::spawn(move || b2.run(&mut s2, &e2));
    wait("one dead letter and one row", || {
        let st = b.status();
        st.dead_lettered_total == 1 && st.inserted_total == 1
    });
    push(&b, "c").unwrap();
    wait("the next row", || b.status().inserted_total == 2);
    let parked = eng
        .dead_letters()
        .list(&DlqFilter {
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].flow, crate::flow::DIRECT_FLOW);
    assert_eq!(parked[0].node, "clickhouse");
    assert_eq!(
        parked[0].reason,
        "clickhouse refused the batch: Code: 27. DB::Exception: Cannot parse input"
    );
    assert_eq!(parked[0].record["key"], "a");
    assert_eq!(script.inserted.lock().unwrap().concat(), ["b", "c"]);
    let st = b.status();
    assert_eq!(st.insert_failures_total, 0, "not retried");
    assert!(!st.held);
    let c = book(&b);
    assert_eq!((c.dead_lettered, c.delivered, c.pending), (1, 2, 0));
    b.close();
    t.join().unwrap();
}

#[test]
fn a_missing_table_holds_the_backlog_keeps_every_row_and_parks_none() {
    let dir = tempfile::tempdir().unwrap();
    let eng = engine(dir.path());
    let b = Arc::new(Backlog::<String>::new(
        "postgres",
        "t".into(),
        cfg(2, 10, OnFull::EvictOldest),
    ));
    let script = Script::default();
    let missing = || {
        Err(InsertError::Destination(
            "ERROR 42P01: relation \"t\" does not exist".into(),
        ))
    };
    script
        .answers
        .lock()
        .unwrap()
        .extend([missing(), missing()]);
    push(&b, "a").unwrap();
    push(&b, "b").unwrap();
    let (b2, mut s2, e2) = (Arc::clone(&b), script.clone(), Arc::clone(&eng));
    let t = std::thread::spawn(move || b2.run(&mut s2, &e2));
    wait("the hold", || b.status().held);
    let st = b.status();
    assert_eq!((st.backlog_rows, st.dead_lettered_total), (2, 0), "{st:?}");
    assert_eq!(st.last_error.as_deref(), Some("ERROR 42P01"));
    let held = b.report().components;
    assert_eq!(held[0].name, "postgres.held");
    wait("both rows", || b.status().inserted_total == 2);
    let st = b.status();
    assert!(!st.held, "released by the insert that went in");
    assert_eq!((st.holds_total, st.insert_failures_total), (1, 2));
    assert_eq!(st.dead_lettered_total, 0);
    assert_eq!(script.inserted.lock().unwrap().concat(), ["a", "b"]);
    let c = book(&b);
    assert_eq!((c.delivered, c.dead_lettered, c.pending), (2, 0, 0));
    b.close();
    t.join().unwrap();
}

#[test]
fn twenty_rows_refused_alone_in_a_row_hold_the_backlog_instead_of_parking_more() {
    let dir = tempfile::tempdir().unwrap();
    let eng = engine(dir.path());
    // Batches of one row: each refusal is a row refused alone.
    let b = Arc::new(Backlog::<String>::new(
        "clickhouse",
        "t".into(),
        cfg(1, 100, OnFull::EvictOldest),
    ));
    let script = Script::default();
    let n = HOLD_AFTER_REFUSALS as usize;
    // Every row is refused, the 20th once more while held, then the table takes rows again.
    for _ in 0..n + 1 {
        script
            .answers
            .lock()
            .unwrap()
            .push_back(Err(InsertError::Permanent(
                "Code: 53. DB::Exception: Type mismatch".into(),
            )));
    }
    for i in 0..n + 5 {
        push(&b, &format!("k{i:02}")).unwrap();
    }
    let (b2, mut s2, e2) = (Arc::clone(&b), script.clone(), Arc::clone(&eng));
    let t = std::thread::spawn(move || b2.run(&mut s2, &e2));
    wait("the hold", || b.status().held);
    let st = b.status();
    assert_eq!(st.dead_lettered_total, (n - 1) as u64, "{st:?}");
    assert_eq!(
        st.backlog_rows, 6,
        "the 20th row and those after it kept: {st:?}"
    );
    wait("the rows after the hold", || b.status().inserted_total == 6);
    let st = b.status();
    assert!(!st.held);
    assert_eq!(
        st.dead_lettered_total,
        (n - 1) as u64,
        "nothing parked while held"
    );
    assert_eq!(st.refusals_in_a_row, 0);
    let first_kept = format!("k{:02}", n - 1);
    assert_eq!(script.inserted.lock().unwrap()[0], [first_kept]);
    let c = book(&b);
    assert_eq!(
        (c.dead_lettered, c.delivered, c.pending),
        ((n - 1) as u64, 6, 0)
    );
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

/// A database that holds each insert until the test lets it go: the test then knows which
/// rows wait while one insert is on its way.
#[derive(Clone, Default)]
struct Gated {
    script: Script,
    /// Inserts begun.
    begun: Arc<Mutex<usize>>,
    /// Inserts the test let go.
    released: Arc<(Mutex<usize>, std::sync::Condvar)>,
}

impl Inserter<String> for Gated {
    fn insert(&mut self, rows: &[Row<String>]) -> Result<(), InsertError> {
        let mine = {
            let mut begun = self.begun.lock().unwrap();
            *begun += 1;
            *begun
        };
        let (n, cv) = &*self.released;
        let released = cv
            .wait_timeout_while(n.lock().unwrap(), Duration::from_secs(20), |n| *n < mine)
            .unwrap()
            .0;
        drop(released);
        self.script.insert(rows)
    }
}

/// A backlog with catch-up inserts running into a [`Gated`] database on its own thread, with
/// a flush interval no test waits for: batches leave only when full, or at the stop.
struct Catching {
    _dir: tempfile::TempDir,
    engine: Arc<Engine>,
    backlog: Arc<Backlog<String>>,
    db: Gated,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Catching {
    /// Batches of `batch` rows, inserts of up to `most`, a bound of `max`; the database gives
    /// `answers` first, then succeeds.
    fn start(
        batch: usize,
        most: usize,
        max: usize,
        on_full: OnFull,
        answers: Vec<Result<(), InsertError>>,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(dir.path());
        let mut c = cfg(batch, max, on_full);
        c.max_insert_rows = most;
        c.flush_interval = Duration::from_secs(3600);
        let backlog = Arc::new(Backlog::<String>::new("clickhouse", "t".into(), c));
        let db = Gated::default();
        db.script.answers.lock().unwrap().extend(answers);
        let (b, mut d, e) = (Arc::clone(&backlog), db.clone(), Arc::clone(&engine));
        let thread = Some(std::thread::spawn(move || b.run(&mut d, &e)));
        Self {
            _dir: dir,
            engine,
            backlog,
            db,
            thread,
        }
    }

    /// Pushes the keys `first` (a full batch), waits until their insert is on its way, then
    /// pushes the keys `more` behind it.
    fn behind_a_held_insert(&self, first: (usize, usize), more: (usize, usize)) {
        for k in keys(first.0, first.1) {
            push(&self.backlog, &k).unwrap();
        }
        self.wait_begun(1);
        for k in keys(more.0, more.1) {
            push(&self.backlog, &k).unwrap();
        }
    }

    fn wait_begun(&self, n: usize) {
        wait("an insert begun", || *self.db.begun.lock().unwrap() == n);
    }

    /// Lets `n` more inserts go.
    fn release(&self, n: usize) {
        let (released, cv) = &*self.db.released;
        *released.lock().unwrap() += n;
        cv.notify_all();
    }

    /// The keys of each successful insert, in order.
    fn inserted(&self) -> Vec<Vec<String>> {
        self.db.script.inserted.lock().unwrap().clone()
    }

    /// Closes the backlog and waits for its thread (which inserts what is left).
    fn stop(&mut self) {
        self.backlog.close();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for Catching {
    fn drop(&mut self) {
        // Unblock a held insert so the thread can end.
        self.release(1000);
        self.backlog.close();
    }
}

fn keys(from: usize, to: usize) -> Vec<String> {
    (from..to).map(|i| format!("k{i}")).collect()
}

#[test]
fn more_rows_waiting_than_a_batch_go_in_one_insert_of_up_to_max_insert_rows_in_order() {
    let mut c = Catching::start(3, 10, 100, OnFull::EvictOldest, vec![]);
    // The first batch leaves at three rows and is held on its way while 22 more arrive.
    c.behind_a_held_insert((0, 3), (3, 25));
    let st = c.backlog.status();
    assert_eq!((st.in_flight_rows, st.backlog_rows), (3, 25));
    c.release(4);
    wait("the full inserts", || {
        c.backlog.status().inserted_total == 23
    });
    // The two rows left are short of a batch: they wait for their interval (an hour here),
    // and a clean stop inserts them.
    c.stop();
    assert_eq!(
        c.inserted(),
        vec![keys(0, 3), keys(3, 13), keys(13, 23), keys(23, 25)],
        "the backlog goes in inserts of up to ten rows, oldest first"
    );
    let st = c.backlog.status();
    assert_eq!((st.inserted_total, st.batches_total), (25, 4));
    let counts = book(&c.backlog);
    assert_eq!(
        (counts.acked, counts.delivered, counts.pending),
        (25, 25, 0)
    );
}

#[test]
fn with_catch_up_a_batch_still_leaves_at_sink_batch_rows_or_at_the_flush_interval() {
    let dir = tempfile::tempdir().unwrap();
    let eng = engine(dir.path());
    // Three rows are a batch: with an hour's interval they leave at once, as one batch.
    let mut c = cfg(3, 100, OnFull::EvictOldest);
    c.max_insert_rows = 50;
    c.flush_interval = Duration::from_secs(3600);
    let full = Arc::new(Backlog::<String>::new("postgres", "t".into(), c.clone()));
    let script = Script::default();
    let (b2, mut s2, e2) = (Arc::clone(&full), script.clone(), Arc::clone(&eng));
    let t = std::thread::spawn(move || b2.run(&mut s2, &e2));
    for k in ["a", "b", "c"] {
        push(&full, k).unwrap();
    }
    wait("the full batch", || full.status().batches_total == 1);
    assert_eq!(script.inserted.lock().unwrap()[0], ["a", "b", "c"]);
    full.close();
    t.join().unwrap();
    // Two rows are short of a batch: they leave together once the first waited its interval.
    c.flush_interval = Duration::from_millis(200);
    let short = Arc::new(Backlog::<String>::new("postgres", "t".into(), c));
    let script = Script::default();
    let (b2, mut s2, e2) = (Arc::clone(&short), script.clone(), Arc::clone(&eng));
    let t = std::thread::spawn(move || b2.run(&mut s2, &e2));
    let before = Instant::now();
    push(&short, "d").unwrap();
    push(&short, "e").unwrap();
    wait("the short batch", || short.status().batches_total == 1);
    assert!(
        before.elapsed() >= Duration::from_millis(200),
        "not before its interval"
    );
    assert_eq!(script.inserted.lock().unwrap()[0], ["d", "e"]);
    short.close();
    t.join().unwrap();
}

#[test]
fn a_failed_catch_up_insert_goes_back_whole_at_the_head_in_order_and_is_retried_at_half_its_size() {
    // The second insert, the first catch-up, fails.
    let lost = Err(InsertError::Transient("connection lost".into()));
    let mut c = Catching::start(2, 8, 100, OnFull::Block, vec![Ok(()), lost]);
    c.behind_a_held_insert((0, 2), (2, 12));
    c.release(1);
    c.wait_begun(2);
    assert_eq!(c.backlog.status().in_flight_rows, 8);
    c.release(1);
    wait("the batch back", || {
        let st = c.backlog.status();
        st.insert_failures_total == 1 && st.in_flight_rows == 0
    });
    // Back at the head, whole and in order, before the two rows that waited behind it.
    assert_eq!(c.backlog.waiting(), keys(2, 12));
    assert_eq!(c.backlog.status().backlog_rows, 10);
    c.release(2);
    wait("every row", || c.backlog.status().inserted_total == 12);
    // The retry takes half the failed insert's rows; its success doubles the limit again.
    let inserted = c.inserted();
    assert_eq!(inserted, vec![keys(0, 2), keys(2, 6), keys(6, 12)]);
    assert_eq!(inserted.concat(), keys(0, 12), "each row once, in order");
    let counts = book(&c.backlog);
    assert_eq!(
        (counts.acked, counts.delivered, counts.pending),
        (12, 12, 0)
    );
    c.stop();
}

#[test]
fn evict_oldest_never_drops_a_row_of_a_catch_up_insert_in_flight() {
    let mut c = Catching::start(2, 6, 6, OnFull::EvictOldest, vec![]);
    c.behind_a_held_insert((0, 2), (2, 8));
    // Two in flight and four waiting: k2 and k3 were the oldest waiting rows.
    assert_eq!(c.backlog.waiting(), keys(4, 8));
    c.release(1);
    c.wait_begun(2);
    assert_eq!(c.backlog.status().in_flight_rows, 4);
    // Four in flight, so two may wait; the third arriving drops the oldest waiting row.
    for k in keys(8, 11) {
        push(&c.backlog, &k).unwrap();
    }
    assert_eq!(c.backlog.waiting(), keys(9, 11));
    c.release(2);
    wait("the rest", || c.backlog.status().inserted_total == 8);
    assert_eq!(c.inserted(), vec![keys(0, 2), keys(4, 8), keys(9, 11)]);
    let st = c.backlog.status();
    assert_eq!((st.dropped_total, st.accepted_total), (3, 11));
    let counts = book(&c.backlog);
    assert_eq!((counts.acked, counts.delivered, counts.evicted), (11, 8, 3));
    c.stop();
}

#[test]
fn a_refused_catch_up_insert_goes_again_in_batches_and_only_the_bad_row_is_parked() {
    let bad = || {
        Err(InsertError::Permanent(
            "Code: 27. DB::Exception: Cannot parse".into(),
        ))
    };
    // The catch-up insert is refused, then the piece holding the bad row, then that row
    // alone; the row beside it goes in alone.
    let answers = vec![Ok(()), bad(), Ok(()), bad(), bad(), Ok(()), Ok(())];
    let mut c = Catching::start(2, 6, 100, OnFull::EvictOldest, answers);
    c.behind_a_held_insert((0, 2), (2, 8));
    c.release(7);
    wait("every row settled", || {
        let st = c.backlog.status();
        st.inserted_total + st.dead_lettered_total == 8
    });
    assert_eq!(
        c.inserted(),
        vec![keys(0, 2), keys(2, 4), keys(5, 6), keys(6, 8)]
    );
    let parked = c
        .engine
        .dead_letters()
        .list(&DlqFilter {
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    let mut parked: Vec<String> = parked
        .iter()
        .map(|d| d.record["key"].as_str().unwrap_or_default().to_string())
        .collect();
    parked.sort();
    assert_eq!(parked, keys(4, 5), "only the bad row");
    let st = c.backlog.status();
    assert_eq!((st.dead_lettered_total, st.insert_failures_total), (1, 0));
    let counts = book(&c.backlog);
    assert_eq!(
        (counts.delivered, counts.dead_lettered, counts.pending),
        (7, 1, 0)
    );
    c.stop();
}
