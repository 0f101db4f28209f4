//! The push queue against a model: a `VecDeque` with the same quota rules. Random sequences of
//! push, ack (delivered), dead-letter and restart, under both policies; after every step the
//! rows, their order and the byte accounting must match the model exactly.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;

const QUOTA: u64 = 16 * 1024;

#[derive(Debug, Clone)]
enum Op {
    Push(usize),
    Ack(usize),
    DeadLetter(usize),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..3000).prop_map(Op::Push),
        // An occasional record larger than the whole quota.
        1 => (16_000usize..20_000).prop_map(Op::Push),
        2 => (1usize..8).prop_map(Op::Ack),
        1 => (0usize..8).prop_map(Op::DeadLetter),
        1 => Just(Op::Restart),
    ]
}

#[derive(Default)]
struct Model {
    rows: VecDeque<Row>,
    next_seq: u64,
    used: u64,
    evicted: u64,
    blocked: u64,
    dead: u64,
    /// Tracked rows ever appended, by source.
    acked: BTreeMap<String, u64>,
}

/// The tag of the record of op `i`: three sources, one row in four untracked.
fn tag_of(i: usize) -> Tag {
    Tag {
        source: format!("s/{}", i % 3),
        tracked: i % 4 != 0,
    }
}

/// The op number written in a model line.
fn op_of(line: &[u8]) -> usize {
    let v: serde_json::Value = serde_json::from_slice(line).unwrap();
    v["op"].as_u64().unwrap() as usize
}

impl Model {
    fn push(&mut self, on_full: OnFull, line: Vec<u8>) -> bool {
        let size = row_bytes(line.len());
        match on_full {
            OnFull::Block => {
                let fits = if size > QUOTA {
                    self.rows.is_empty()
                } else {
                    self.used + size <= QUOTA
                };
                if !fits {
                    self.blocked += 1;
                    return false;
                }
            }
            OnFull::EvictOldest => {
                while self.used + size > QUOTA {
                    let Some(old) = self.rows.pop_front() else {
                        break;
                    };
                    self.used -= row_bytes(old.line.len());
                    self.evicted += 1;
                }
            }
        }
        self.rows.push_back(Row {
            seq: self.next_seq,
            line,
        });
        self.next_seq += 1;
        self.used += size;
        true
    }
}

fn open(dir: &Path, on_full: OnFull) -> DurableQueue {
    DurableQueue::open(
        &dir.join("push_queue.db"),
        "push",
        on_full,
        QUOTA,
        Arc::new(QueueCounters::default()),
    )
    .unwrap()
}

fn check(q: &DurableQueue, m: &Model) {
    let rows = q.peek(usize::MAX).unwrap();
    assert_eq!(rows, Vec::from(m.rows.clone()), "rows and order");
    let (used, count, reserved) = q.gate().usage();
    assert_eq!(used, m.used, "used bytes");
    assert_eq!(count, m.rows.len() as u64, "row count");
    assert_eq!(reserved, 0, "no reservation outlives its commit");
    assert_eq!(
        q.counters().evicted_total.load(Ordering::Relaxed),
        m.evicted
    );
    assert_eq!(q.gate().blocked_total(), m.blocked);
    assert_eq!(
        q.counters().dead_lettered_total.load(Ordering::Relaxed),
        m.dead
    );
    // The ledger: pending agrees with the tracked rows, and every source balances.
    let mut pending: BTreeMap<String, u64> = BTreeMap::new();
    for r in &m.rows {
        let tag = tag_of(op_of(&r.line));
        if tag.tracked {
            *pending.entry(tag.source).or_insert(0) += 1;
        }
    }
    let counted = q.count_pending().unwrap();
    assert_eq!(counted.rows, pending, "tracked rows by source");
    assert_eq!(counted.kept, pending, "stored pending counts");
    for (source, c) in q.ledger() {
        assert_eq!(c.imbalance(), 0, "{source} balances: {c:?}");
        assert_eq!(c.pending, pending.get(&source).copied().unwrap_or(0));
        assert_eq!(c.acked, m.acked.get(&source).copied().unwrap_or(0));
    }
    if q.gate().on_full() == OnFull::Block && count > 1 {
        assert!(used <= QUOTA, "block never goes over the quota");
    }
}

fn run(on_full: OnFull, ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut q = open(dir.path(), on_full);
    let mut m = Model::default();
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            Op::Push(len) => {
                let mut line = format!("{{\"op\":{i},\"pad\":\"").into_bytes();
                line.resize(line.len() + len, b'x');
                line.extend_from_slice(b"\"}");
                let admitted = m.push(on_full, line.clone());
                let tag = tag_of(i);
                if admitted && tag.tracked {
                    *m.acked.entry(tag.source.clone()).or_insert(0) += 1;
                }
                match q.gate().admit(row_bytes(line.len())) {
                    Ok(reservation) => {
                        assert!(admitted, "the queue admitted what the model refused");
                        rt.block_on(q.append(line, &tag, reservation)).unwrap();
                    }
                    Err(_) => assert!(!admitted, "the queue refused what the model admitted"),
                }
            }
            Op::Ack(n) => {
                let Some(last) = m.rows.iter().take(n).next_back().map(|r| r.seq) else {
                    continue;
                };
                while m.rows.front().is_some_and(|r| r.seq <= last) {
                    let r = m.rows.pop_front().unwrap();
                    m.used -= row_bytes(r.line.len());
                }
                q.remove_through(last).unwrap();
            }
            Op::DeadLetter(i) => {
                let Some(seq) = m.rows.get(i).map(|r| r.seq) else {
                    continue;
                };
                let r = m.rows.remove(i).unwrap();
                m.used -= row_bytes(r.line.len());
                m.dead += 1;
                assert!(q.dead_letter(seq, "HTTP 400: bad record").unwrap());
            }
            Op::Restart => {
                q.close_and_wait();
                q = open(dir.path(), on_full);
            }
        }
        check(&q, &m);
    }
    let dead = q.dead_letters(None, usize::MAX).unwrap();
    assert_eq!(dead.len() as u64, m.dead);
    for d in dead {
        let v: serde_json::Value = serde_json::from_slice(&d.json).unwrap();
        assert_eq!(v["reason"], "HTTP 400: bad record");
        assert!(v["record"]["op"].is_u64());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn block_queue_matches_the_model_across_restarts(ops in proptest::collection::vec(op(), 1..120)) {
        run(OnFull::Block, ops);
    }

    #[test]
    fn evict_oldest_queue_matches_the_model_across_restarts(ops in proptest::collection::vec(op(), 1..120)) {
        run(OnFull::EvictOldest, ops);
    }
}

#[test]
fn sixty_four_concurrent_reservations_never_overshoot_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    let q = Arc::new(open(dir.path(), OnFull::Block));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let stored = rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..64 {
            let q = Arc::clone(&q);
            tasks.push(tokio::spawn(async move {
                let mut stored = 0u64;
                for i in 0..20 {
                    let line = format!("{{\"t\":{t},\"i\":{i},\"pad\":\"{}\"}}", "y".repeat(900));
                    if let Ok(r) = q.gate().admit(row_bytes(line.len())) {
                        q.append(line.into_bytes(), &tag_of(t), r).await.unwrap();
                        stored += 1;
                    }
                }
                stored
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        total
    });
    let (used, rows, reserved) = q.gate().usage();
    assert!(used <= QUOTA, "used {used} over quota {QUOTA}");
    assert_eq!(rows, stored);
    assert_eq!(reserved, 0);
    assert!(q.gate().blocked_total() > 0);
}

#[test]
fn dead_letter_table_is_trimmed_oldest_first_at_its_cap() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path(), OnFull::EvictOldest);
    q.set_dead_letter_cap(5);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for i in 0..8 {
        let r = q.gate().admit(0).unwrap();
        rt.block_on(q.append(format!("{{\"i\":{i}}}").into_bytes(), &tag_of(i), r))
            .unwrap();
    }
    for seq in 0..8 {
        assert!(q.dead_letter(seq, "refused").unwrap());
    }
    let c = q.counters();
    assert_eq!(c.dead_rows.load(Ordering::Relaxed), 5);
    assert_eq!(c.dead_trimmed_total.load(Ordering::Relaxed), 3);
    assert_eq!(c.dead_lettered_total.load(Ordering::Relaxed), 8);
    let first = &q.dead_letters(None, 1).unwrap()[0];
    let v: serde_json::Value = serde_json::from_slice(&first.json).unwrap();
    assert_eq!(v["seq"], 3, "the three oldest were trimmed");
    assert_eq!(v["record"]["i"], 3);
}

#[test]
fn a_full_map_fails_every_caller_of_that_transaction_is_counted_and_the_map_grows() {
    let dir = tempfile::tempdir().unwrap();
    let counters = Arc::new(QueueCounters::default());
    // A 256 KiB map cannot hold a 400 KB record; the quota itself would admit it.
    let q = DurableQueue::open_with_map(
        &dir.path().join("push_queue.db"),
        "push",
        OnFull::EvictOldest,
        64 << 20,
        Arc::clone(&counters),
        256 << 10,
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let big = vec![b'x'; 400 << 10];
    let r = q.gate().admit(0).unwrap();
    let first = rt.block_on(q.append(big.clone(), &tag_of(1), r));
    assert_eq!(first, Err(StoreError::MapFull));
    assert_eq!(counters.write_errors_total.load(Ordering::Relaxed), 1);
    assert_eq!(
        q.gate().usage().1,
        0,
        "nothing of the failed transaction is stored"
    );
    // The map grew by half after each failure; within a few tries the record fits.
    let mut tries = 1;
    loop {
        let r = q.gate().admit(0).unwrap();
        match rt.block_on(q.append(big.clone(), &tag_of(1), r)) {
            Ok(_) => break,
            Err(StoreError::MapFull) if tries < 8 => tries += 1,
            Err(e) => panic!("after {tries} tries: {e}"),
        }
    }
    assert_eq!(q.gate().usage().1, 1);
    assert_eq!(counters.write_errors_total.load(Ordering::Relaxed), tries);
}
