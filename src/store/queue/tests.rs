//! The push queue against a model: a `VecDeque` with the same quota rules. Random sequences of
//! push, ack (delivered), a batch sent and confirmed later (with replays, evictions and dead
//! letters in between, as the deliverer sees them), dead-letter, replay (one and all), delete
//! of a dead letter and restart, under both policies; after every step the rows, their order,
//! the dead letters, the byte accounting and the ledger counts (delivered among them: the
//! model counts only the rows a batch carried) must match the model exactly.

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
    /// The deliverer reads up to this many rows from the head and sends them; the batch is in
    /// flight until [`Op::Confirm`].
    Send(usize),
    /// The destination confirms the batch in flight.
    Confirm,
    DeadLetter(usize),
    Replay(usize),
    ReplayAll,
    DeleteDead(usize),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..3000).prop_map(Op::Push),
        // An occasional record larger than the whole quota.
        1 => (16_000usize..20_000).prop_map(Op::Push),
        2 => (1usize..8).prop_map(Op::Ack),
        2 => (1usize..12).prop_map(Op::Send),
        2 => Just(Op::Confirm),
        1 => (0usize..8).prop_map(Op::DeadLetter),
        1 => (0usize..8).prop_map(Op::Replay),
        1 => Just(Op::ReplayAll),
        1 => (0usize..8).prop_map(Op::DeleteDead),
        1 => Just(Op::Restart),
    ]
}

/// Ops weighted toward a batch in flight while rows are dead-lettered and replayed, with small
/// records so that the queue has room for the replays: a replayed row often lands between the
/// first and the last seq of the batch on its way.
fn batch_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..300).prop_map(Op::Push),
        1 => (1usize..8).prop_map(Op::Ack),
        3 => (1usize..12).prop_map(Op::Send),
        1 => Just(Op::Confirm),
        5 => (0usize..8).prop_map(Op::DeadLetter),
        4 => (0usize..8).prop_map(Op::Replay),
        1 => Just(Op::ReplayAll),
        1 => Just(Op::Restart),
    ]
}

#[derive(Default)]
struct Model {
    /// In seq order.
    rows: VecDeque<Row>,
    next_seq: u64,
    used: u64,
    evicted: u64,
    blocked: u64,
    /// Rows ever moved to the dead letters.
    dead: u64,
    /// The dead-letter table: id and the row.
    table: Vec<(u64, Row)>,
    next_dead: u64,
    replayed: u64,
    deleted: u64,
    /// Tracked rows ever appended, by source.
    acked: BTreeMap<String, u64>,
    /// Tracked rows counted dead-lettered (deleted ones stay), by source.
    dead_counted: BTreeMap<String, u64>,
    /// The batch the deliverer sent and the destination has not confirmed yet.
    in_flight: Option<Vec<Row>>,
    /// Tracked rows a confirmed batch carried, by source.
    delivered: BTreeMap<String, u64>,
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

    /// The rows of `batch` still queued leave as delivered; every other row stays.
    fn confirm(&mut self, batch: &[Row]) {
        for sent in batch {
            let Some(at) = self.rows.iter().position(|r| r.seq == sent.seq) else {
                continue;
            };
            let r = self.rows.remove(at).unwrap();
            self.used -= row_bytes(r.line.len());
            let tag = tag_of(op_of(&r.line));
            if tag.tracked {
                *self.delivered.entry(tag.source).or_insert(0) += 1;
            }
        }
    }

    /// A replay's room: a record larger than the quota only into an empty queue.
    fn fits(&self, line: &[u8]) -> bool {
        let size = row_bytes(line.len());
        if size > QUOTA {
            self.rows.is_empty()
        } else {
            self.used + size <= QUOTA
        }
    }

    /// Puts entry `at` of the table back; false (nothing changed) when it does not fit.
    fn replay(&mut self, at: usize) -> bool {
        if !self.fits(&self.table[at].1.line) {
            return false;
        }
        let (_, row) = self.table.remove(at);
        let tag = tag_of(op_of(&row.line));
        if tag.tracked {
            *self.dead_counted.get_mut(&tag.source).unwrap() -= 1;
        }
        self.used += row_bytes(row.line.len());
        let pos = self.rows.partition_point(|r| r.seq < row.seq);
        self.rows.insert(pos, row);
        self.replayed += 1;
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
    let seqs = |rows: &mut dyn Iterator<Item = &Row>| rows.map(|r| r.seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(&mut rows.iter()),
        seqs(&mut m.rows.iter()),
        "the seqs of the rows, in order"
    );
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
    let c = q.counters();
    assert_eq!(c.dead_lettered_total.load(Ordering::Relaxed), m.dead);
    assert_eq!(c.dead_rows.load(Ordering::Relaxed), m.table.len() as u64);
    assert_eq!(c.dead_replayed_total.load(Ordering::Relaxed), m.replayed);
    assert_eq!(c.dead_deleted_total.load(Ordering::Relaxed), m.deleted);
    let table: Vec<(u64, u64)> = q
        .dead_letters(None, usize::MAX)
        .unwrap()
        .iter()
        .map(|d| (d.id, revive(&d.json).unwrap().seq))
        .collect();
    let model: Vec<(u64, u64)> = m.table.iter().map(|(id, r)| (*id, r.seq)).collect();
    assert_eq!(table, model, "dead letters (id, seq)");
    // The sink's figures: every row taken is delivered, queued, dead-lettered or evicted.
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    assert_eq!(
        q.appended_total(),
        l(&c.sent_total) + count + l(&c.dead_lettered_total) - l(&c.dead_replayed_total)
            + l(&c.evicted_total),
        "accepted = delivered + pending + dead_lettered + lost"
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
        assert_eq!(
            c.delivered,
            m.delivered.get(&source).copied().unwrap_or(0),
            "{source} delivered: only rows a batch carried"
        );
        assert_eq!(
            c.dead_lettered,
            m.dead_counted.get(&source).copied().unwrap_or(0),
            "{source} dead-lettered"
        );
    }
    if q.gate().on_full() == OnFull::Block && count > 1 {
        assert!(used <= QUOTA, "block never goes over the quota");
    }
}

/// What the deliverer does once the destination confirmed `batch`.
fn confirm(q: &DurableQueue, batch: &[Row]) {
    let seqs: Vec<u64> = batch.iter().map(|r| r.seq).collect();
    q.remove_delivered(&seqs).unwrap();
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
                        rt.block_on(q.append(encode_row(&tag, &line), reservation))
                            .unwrap();
                    }
                    Err(_) => assert!(!admitted, "the queue refused what the model admitted"),
                }
            }
            Op::Ack(n) => {
                // The deliverer sends from the head only when no batch is out.
                if m.in_flight.is_some() {
                    continue;
                }
                let batch: Vec<Row> = m.rows.iter().take(n).cloned().collect();
                m.confirm(&batch);
                confirm(&q, &batch);
            }
            Op::Send(n) => {
                if m.in_flight.is_some() {
                    continue;
                }
                let batch = q.peek(n).unwrap();
                let model: Vec<Row> = m.rows.iter().take(n).cloned().collect();
                assert_eq!(batch, model, "the batch read from the head");
                m.in_flight = Some(batch).filter(|b| !b.is_empty());
            }
            Op::Confirm => {
                let Some(batch) = m.in_flight.take() else {
                    continue;
                };
                m.confirm(&batch);
                confirm(&q, &batch);
            }
            Op::DeadLetter(i) => {
                // The deliverer dead-letters a row it sent alone, never one of a batch out.
                let sent = |seq: u64| m.in_flight.iter().flatten().any(|r| r.seq == seq);
                let Some(at) = (0..m.rows.len()).filter(|&at| !sent(m.rows[at].seq)).nth(i) else {
                    continue;
                };
                let seq = m.rows[at].seq;
                let r = m.rows.remove(at).unwrap();
                m.used -= row_bytes(r.line.len());
                m.dead += 1;
                let tag = tag_of(op_of(&r.line));
                if tag.tracked {
                    *m.dead_counted.entry(tag.source).or_insert(0) += 1;
                }
                m.table.push((m.next_dead, r));
                m.next_dead += 1;
                assert!(q.dead_letter(seq, "HTTP 400: bad record").unwrap());
            }
            Op::Replay(i) => {
                if m.table.is_empty() {
                    continue;
                }
                let at = i % m.table.len();
                let (id, seq) = (m.table[at].0, m.table[at].1.seq);
                match q.replay_dead_letter(id) {
                    Ok(got) => {
                        assert!(m.replay(at), "the queue replayed what the model refused");
                        assert_eq!(got, seq, "replayed under its original seq");
                    }
                    Err(ReplayError::Full { .. }) => {
                        assert!(!m.fits(&m.table[at].1.line), "refused what fits");
                    }
                    Err(e) => panic!("replay of {id}: {e}"),
                }
            }
            Op::ReplayAll => {
                let mut order: Vec<usize> = (0..m.table.len()).collect();
                order.sort_by_key(|&i| m.table[i].1.seq);
                let order: Vec<u64> = order.iter().map(|&i| m.table[i].0).collect();
                let mut expected = Vec::new();
                let mut stopped = false;
                for id in order {
                    let at = m.table.iter().position(|(i, _)| *i == id).unwrap();
                    let seq = m.table[at].1.seq;
                    if !m.replay(at) {
                        stopped = true;
                        break;
                    }
                    expected.push((id, seq));
                }
                let summary = q.replay_dead_letters(usize::MAX).unwrap();
                assert_eq!(summary.replayed, expected, "replayed in seq order");
                assert!(summary.failed.is_empty(), "{:?}", summary.failed);
                assert_eq!(summary.stopped.is_some(), stopped, "{:?}", summary.stopped);
                assert_eq!(summary.left, m.table.len() as u64);
            }
            Op::DeleteDead(i) => {
                if m.table.is_empty() {
                    continue;
                }
                let (id, _) = m.table.remove(i % m.table.len());
                m.deleted += 1;
                assert!(q.delete_dead_letter(id).unwrap());
                assert!(!q.delete_dead_letter(id).unwrap(), "deleted twice");
            }
            Op::Restart => {
                // A batch in flight is given up: the deliverer reads the head again.
                m.in_flight = None;
                q.close_and_wait();
                q = open(dir.path(), on_full);
            }
        }
        check(&q, &m);
    }
    let dead = q.dead_letters(None, usize::MAX).unwrap();
    assert_eq!(dead.len(), m.table.len());
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

proptest! {
    // About one case in eight replays a row between the seqs of the batch out before the
    // batch is confirmed: 48 cases see it all but surely.
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_confirmed_batch_deletes_only_the_rows_it_carried_whatever_was_replayed_meanwhile(ops in proptest::collection::vec(batch_op(), 1..120)) {
        run(OnFull::Block, ops);
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
                        q.append(encode_row(&tag_of(t), line.as_bytes()), r)
                            .await
                            .unwrap();
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
        rt.block_on(q.append(
            encode_row(&tag_of(i), format!("{{\"i\":{i}}}").as_bytes()),
            r,
        ))
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
    let first = rt.block_on(q.append(encode_row(&tag_of(1), &big), r));
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
        match rt.block_on(q.append(encode_row(&tag_of(1), &big), r)) {
            Ok(_) => break,
            Err(StoreError::MapFull) if tries < 8 => tries += 1,
            Err(e) => panic!("after {tries} tries: {e}"),
        }
    }
    assert_eq!(q.gate().usage().1, 1);
    assert_eq!(counters.write_errors_total.load(Ordering::Relaxed), tries);
}

/// Appends `n` tracked rows of source `s/1` (`{"i":N}`, padded to `pad` bytes).
fn fill(q: &DurableQueue, rt: &tokio::runtime::Runtime, n: usize, pad: usize) {
    for i in 0..n {
        let line = format!("{{\"i\":{i},\"pad\":\"{}\"}}", "p".repeat(pad));
        let r = q.gate().admit(row_bytes(line.len())).unwrap();
        let tag = Tag {
            source: "s/1".into(),
            tracked: true,
        };
        rt.block_on(q.append(encode_row(&tag, line.as_bytes()), r))
            .unwrap();
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn counts(q: &DurableQueue) -> Counts {
    q.ledger()["s/1"]
}

/// Rewrites dead letter `id` in the table as `json`, as a file from an older version (or a
/// damaged one) would have it.
fn rewrite_dead_letter(q: &DurableQueue, id: u64, json: &str) {
    let s = &q.shared;
    let mut txn = s.env.write_txn().unwrap();
    s.dead.put(&mut txn, &id, json.as_bytes()).unwrap();
    txn.commit().unwrap();
}

#[test]
fn a_replayed_dead_letter_goes_back_to_the_head_under_its_seq_and_its_ledger_count_moves_to_pending(
) {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path(), OnFull::Block);
    let rt = runtime();
    fill(&q, &rt, 3, 10);
    let (used, rows, _) = q.gate().usage();
    assert!(q.dead_letter(0, "HTTP 422: bad").unwrap());
    let c = counts(&q);
    assert_eq!((c.pending, c.dead_lettered), (2, 1));
    let entry = q.get_dead_letter(0).unwrap().expect("dead letter 0");
    let v: serde_json::Value = serde_json::from_slice(&entry.json).unwrap();
    assert_eq!(v["source"], "s/1");
    assert_eq!(v["tracked"], true);
    assert_eq!(v["record"]["i"], 0);

    assert_eq!(q.replay_dead_letter(0), Ok(0));
    let head = q.peek(3).unwrap();
    assert_eq!(
        head.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![0, 1, 2],
        "the replayed row is first again"
    );
    assert_eq!(
        head[0].line, br#"{"i":0,"pad":"pppppppppp"}"#,
        "the line as it was"
    );
    assert_eq!(
        q.gate().usage(),
        (used, rows, 0),
        "taken as an append takes it"
    );
    let c = counts(&q);
    assert_eq!((c.acked, c.pending, c.dead_lettered), (3, 3, 0));
    assert_eq!(c.imbalance(), 0);
    let check = q.count_pending().unwrap();
    assert_eq!(check.kept, check.rows);
    assert_eq!(q.counters().dead_rows.load(Ordering::Relaxed), 0);
    assert_eq!(q.counters().dead_replayed_total.load(Ordering::Relaxed), 1);
    assert_eq!(q.get_dead_letter(0).unwrap().map(|d| d.id), None);
    assert_eq!(q.replay_dead_letter(0), Err(ReplayError::NotFound));
    // Delivered, it counts as delivered once.
    assert_eq!(q.remove_delivered(&[0, 1, 2]).unwrap(), 3);
    let c = counts(&q);
    assert_eq!((c.delivered, c.pending, c.dead_lettered), (3, 0, 0));
}

#[test]
fn a_replay_into_a_full_block_queue_is_refused_uncounted_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path(), OnFull::Block);
    let rt = runtime();
    // Rows of about 1 KB until the quota refuses one.
    let mut n = 0;
    loop {
        let line = format!("{{\"i\":{n},\"pad\":\"{}\"}}", "p".repeat(1000));
        let Ok(r) = q.gate().admit(row_bytes(line.len())) else {
            break;
        };
        rt.block_on(q.append(encode_row(&tag_of(1), line.as_bytes()), r))
            .unwrap();
        n += 1;
    }
    assert!(q.dead_letter(0, "HTTP 400").unwrap());
    // Its room is taken again.
    fill(&q, &rt, 1, 1000);
    let blocked = q.gate().blocked_total();
    let before = (q.gate().usage(), q.ledger(), q.peek(usize::MAX).unwrap());
    match q.replay_dead_letter(0) {
        Err(ReplayError::Full { bytes, used, quota }) => {
            assert!(used + bytes > quota, "{used} + {bytes} fits {quota}");
            assert_eq!(quota, QUOTA);
        }
        other => panic!("expected a full queue, got {other:?}"),
    }
    let summary = q.replay_dead_letters(10).unwrap();
    assert!(summary.replayed.is_empty());
    assert!(matches!(summary.stopped, Some(ReplayError::Full { .. })));
    assert_eq!(summary.left, 1);
    let after = (q.gate().usage(), q.ledger(), q.peek(usize::MAX).unwrap());
    assert_eq!(before, after, "nothing changed");
    assert_eq!(
        q.gate().blocked_total(),
        blocked,
        "a replay is no source refused"
    );
    assert!(!q.gate().blocking());
    assert!(
        q.get_dead_letter(0).unwrap().is_some(),
        "still a dead letter"
    );
    // Once the queue drained, it fits.
    q.remove_delivered(&[1, 2]).unwrap();
    assert_eq!(q.replay_dead_letter(0), Ok(0));
}

#[test]
fn a_replay_under_evict_oldest_never_evicts_queued_rows_to_make_room() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path(), OnFull::EvictOldest);
    let rt = runtime();
    fill(&q, &rt, 15, 1000);
    let evicted_before = q.counters().evicted_total.load(Ordering::Relaxed);
    let first = q.peek(1).unwrap()[0].seq;
    assert!(q.dead_letter(first, "HTTP 400").unwrap());
    fill(&q, &rt, 1, 1000);
    let rows = q.peek(usize::MAX).unwrap();
    assert!(matches!(
        q.replay_dead_letter(0),
        Err(ReplayError::Full { .. })
    ));
    assert_eq!(q.peek(usize::MAX).unwrap(), rows);
    assert_eq!(
        q.counters().evicted_total.load(Ordering::Relaxed),
        evicted_before,
        "nothing evicted"
    );
}

#[test]
fn a_replay_whose_seq_is_taken_is_refused_rather_than_overwriting_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path(), OnFull::Block);
    let rt = runtime();
    fill(&q, &rt, 3, 10);
    assert!(q.dead_letter(0, "HTTP 400").unwrap());
    let rows = q.peek(usize::MAX).unwrap();
    // An entry naming a queued row's seq, and one naming a seq no append has reached.
    for (seq, what) in [(1u64, "queued"), (3, "next_seq")] {
        rewrite_dead_letter(
            &q,
            0,
            &format!(
                r#"{{"seq":{seq},"reason":"x","at":1,"source":"s/1","tracked":true,"record":{{"i":9}}}}"#
            ),
        );
        assert_eq!(
            q.replay_dead_letter(0),
            Err(ReplayError::SeqTaken(seq)),
            "{what}"
        );
        assert_eq!(q.peek(usize::MAX).unwrap(), rows, "{what}: rows unchanged");
        assert!(q.get_dead_letter(0).unwrap().is_some(), "{what}: kept");
    }
    rewrite_dead_letter(&q, 0, "not json");
    assert!(matches!(
        q.replay_dead_letter(0),
        Err(ReplayError::Damaged(_))
    ));
    let summary = q.replay_dead_letters(10).unwrap();
    assert_eq!(summary.failed.len(), 1, "{summary:?}");
    assert_eq!(summary.left, 1);
    let c = counts(&q);
    assert_eq!((c.pending, c.dead_lettered, c.imbalance()), (2, 1, 0));
}

#[test]
fn a_dead_letter_stored_without_source_and_tracked_is_replayed_untracked_and_the_ledger_still_balances(
) {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path(), OnFull::Block);
    let rt = runtime();
    fill(&q, &rt, 2, 10);
    assert!(q.dead_letter(0, "HTTP 400").unwrap());
    let old = q.get_dead_letter(0).unwrap().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&old.json).unwrap();
    // The entry as versions before `source` and `tracked` wrote it.
    rewrite_dead_letter(
        &q,
        0,
        &format!(
            r#"{{"seq":0,"reason":"HTTP 400","at":1,"record":{}}}"#,
            v["record"]
        ),
    );
    assert_eq!(q.replay_dead_letter(0), Ok(0));
    let c = counts(&q);
    assert_eq!(
        (c.pending, c.dead_lettered, c.imbalance()),
        (1, 1, 0),
        "nothing moved"
    );
    let check = q.count_pending().unwrap();
    assert_eq!(
        check.kept, check.rows,
        "the replayed row is not counted pending"
    );
    q.remove_delivered(&[0, 1]).unwrap();
    let c = counts(&q);
    assert_eq!(
        (c.delivered, c.pending, c.dead_lettered, c.imbalance()),
        (1, 0, 1, 0)
    );
}

#[test]
fn a_deleted_dead_letter_stays_counted_dead_lettered_and_leaves_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path(), OnFull::Block);
    let rt = runtime();
    fill(&q, &rt, 2, 10);
    assert!(q.dead_letter(0, "HTTP 400").unwrap());
    let usage = q.gate().usage();
    assert!(q.delete_dead_letter(0).unwrap());
    assert!(!q.delete_dead_letter(0).unwrap());
    assert_eq!(q.get_dead_letter(0).unwrap().map(|d| d.id), None);
    let c = q.counters();
    assert_eq!(c.dead_rows.load(Ordering::Relaxed), 0);
    assert_eq!(c.dead_deleted_total.load(Ordering::Relaxed), 1);
    assert_eq!(c.dead_lettered_total.load(Ordering::Relaxed), 1);
    assert_eq!(q.gate().usage(), usage, "the queue's rows are not touched");
    let c = counts(&q);
    assert_eq!((c.pending, c.dead_lettered, c.imbalance()), (1, 1, 0));
    // It survives a restart.
    q.close_and_wait();
    let q = open(dir.path(), OnFull::Block);
    assert_eq!(q.counters().dead_deleted_total.load(Ordering::Relaxed), 1);
    assert_eq!(q.counters().dead_rows.load(Ordering::Relaxed), 0);
    assert_eq!(counts(&q).dead_lettered, 1);
}

#[test]
fn replay_all_puts_the_dead_letters_back_in_seq_order_and_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path(), OnFull::Block);
    let rt = runtime();
    fill(&q, &rt, 6, 10);
    // Dead-lettered out of seq order: ids 0, 1, 2 are seqs 4, 1, 2.
    for seq in [4, 1, 2] {
        assert!(q.dead_letter(seq, "HTTP 400").unwrap());
    }
    let summary = q.replay_dead_letters(2).unwrap();
    assert_eq!(
        summary.replayed,
        vec![(1, 1), (0, 4)],
        "the two oldest, by seq"
    );
    assert_eq!(summary.left, 1);
    let summary = q.replay_dead_letters(10).unwrap();
    assert_eq!(summary.replayed, vec![(2, 2)]);
    let seqs: Vec<u64> = q.peek(10).unwrap().iter().map(|r| r.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4, 5]);
    let c = counts(&q);
    assert_eq!((c.pending, c.dead_lettered, c.imbalance()), (6, 0, 0));
}

#[test]
fn a_replay_wakes_the_deliverer_waiting_for_rows() {
    let dir = tempfile::tempdir().unwrap();
    let q = Arc::new(open(dir.path(), OnFull::Block));
    let rt = runtime();
    fill(&q, &rt, 1, 10);
    assert!(q.dead_letter(0, "HTTP 400").unwrap());
    let mark = q.wait_appended(u64::MAX, Duration::ZERO);
    let waiter = {
        let q = Arc::clone(&q);
        std::thread::spawn(move || q.wait_appended(mark, Duration::from_secs(120)))
    };
    assert_eq!(q.replay_dead_letter(0), Ok(0));
    assert_ne!(
        waiter.join().unwrap(),
        mark,
        "woken by the replay, not the timeout"
    );
}

#[test]
fn a_batch_confirmed_after_a_replay_does_not_delete_the_replayed_row_it_never_carried() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path(), OnFull::Block);
    let rt = runtime();
    fill(&q, &rt, 4, 10);
    assert!(q.dead_letter(0, "HTTP 400").unwrap());
    // The deliverer takes rows 1..=3; meanwhile row 0 is replayed; then the batch is confirmed.
    let batch = q.peek(10).unwrap();
    assert_eq!(q.replay_dead_letter(0), Ok(0));
    let seqs: Vec<u64> = batch.iter().map(|r| r.seq).collect();
    assert_eq!(q.remove_delivered(&seqs).unwrap(), 3);
    assert_eq!(
        q.peek(10)
            .unwrap()
            .iter()
            .map(|r| r.seq)
            .collect::<Vec<_>>(),
        vec![0]
    );
    let c = counts(&q);
    assert_eq!((c.delivered, c.pending, c.dead_lettered), (3, 1, 0));
}

#[test]
fn a_dead_letter_replayed_inside_the_seqs_of_a_batch_in_flight_is_kept_when_the_batch_is_confirmed()
{
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path(), OnFull::Block);
    let rt = runtime();
    fill(&q, &rt, 6, 10);
    // Seqs 0 and 2 are dead letters 0 and 1; seq 0 is replayed to the head.
    assert!(q.dead_letter(0, "HTTP 400").unwrap());
    assert!(q.dead_letter(2, "HTTP 400").unwrap());
    assert_eq!(q.replay_dead_letter(0), Ok(0));
    // The deliverer sends 0, 1, 3, 4, 5; seq 2 is replayed while they are on their way.
    let batch = q.peek(10).unwrap();
    assert_eq!(
        batch.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![0, 1, 3, 4, 5]
    );
    assert_eq!(q.replay_dead_letter(1), Ok(2));
    confirm(&q, &batch);
    assert_eq!(
        q.peek(10)
            .unwrap()
            .iter()
            .map(|r| r.seq)
            .collect::<Vec<_>>(),
        vec![2],
        "the row the batch never carried is still queued"
    );
    let c = counts(&q);
    assert_eq!((c.delivered, c.pending, c.imbalance()), (5, 1, 0));
    assert_eq!(q.counters().sent_total.load(Ordering::Relaxed), 5);
    assert_eq!(q.gate().usage().1, 1);
}

#[test]
fn a_replay_is_one_transaction_with_its_counts_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path(), OnFull::Block);
    let rt = runtime();
    fill(&q, &rt, 3, 10);
    assert!(q.dead_letter(0, "HTTP 400").unwrap());
    assert_eq!(q.replay_dead_letter(0), Ok(0));
    let usage = q.gate().usage();
    q.close_and_wait();
    let q = open(dir.path(), OnFull::Block);
    assert_eq!(q.peek(10).unwrap().len(), 3, "the row is there once");
    assert_eq!(q.gate().usage(), usage);
    assert!(q.dead_letters(None, 10).unwrap().is_empty());
    let c = q.counters();
    assert_eq!(c.dead_replayed_total.load(Ordering::Relaxed), 1);
    assert_eq!(c.dead_rows.load(Ordering::Relaxed), 0);
    assert_eq!(counts(&q).pending, 3);
}

#[test]
fn callers_arriving_while_a_group_commits_share_the_next_commit_and_none_is_answered_before_its_own(
) {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path(), OnFull::EvictOldest);
    let send = |i: usize| {
        let line = format!("{{\"i\":{i}}}");
        let reservation = q.gate().admit(row_bytes(line.len())).unwrap();
        let (reply, rx) = oneshot::channel();
        q.shared
            .counters
            .writer_queued
            .fetch_add(1, Ordering::Relaxed);
        q.sender()
            .unwrap()
            .send(Sent::One(Command::Append {
                value: encode_row(&tag_of(i), line.as_bytes()),
                _reservation: reservation,
                reply,
            }))
            .unwrap();
        rx
    };
    let queued = || q.shared.counters.writer_queued.load(Ordering::Relaxed);
    let wait_until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // Held by the test, the map lock keeps the writer before its transaction with its group.
    let held = q.shared.resize_lock.write().unwrap();
    let mut replies = vec![send(0)];
    wait_until("the writer takes the first record", &|| queued() == 0);
    replies.extend((1..64).map(send));
    assert_eq!(queued(), 63);
    for reply in &mut replies {
        assert!(
            matches!(reply.try_recv(), Err(oneshot::error::TryRecvError::Empty)),
            "a caller was answered before any commit"
        );
    }
    drop(held);
    let seqs: Vec<u64> = replies
        .into_iter()
        .map(|reply| reply.blocking_recv().unwrap().unwrap())
        .collect();
    assert_eq!(seqs, (0..64).collect::<Vec<u64>>());
    let c = &q.shared.counters;
    assert_eq!(c.commits_total.load(Ordering::Relaxed), 2);
    assert_eq!(c.committed_commands_total.load(Ordering::Relaxed), 64);
    assert!(c.sync_nanos_total.load(Ordering::Relaxed) > 0);
    // The second group of 63 was held open one sync for the caller of the first, who never
    // came back.
    assert!(c.held_nanos_total.load(Ordering::Relaxed) > 0);
    assert_eq!(q.peek(usize::MAX).unwrap().len(), 64);
}

#[test]
fn a_discard_deletes_every_row_keeps_the_dead_letters_and_counts_them_discarded_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(dir.path(), OnFull::Block);
    let rt = runtime();
    fill(&q, &rt, 4, 10);
    assert!(q.dead_letter(0, "HTTP 422: bad").unwrap());
    assert_eq!(q.discard().unwrap(), 3);
    assert_eq!(q.gate().usage(), (0, 0, 0), "the room is free again");
    assert!(q.peek(10).unwrap().is_empty());
    let c = counts(&q);
    assert_eq!(
        (c.acked, c.pending, c.dead_lettered, c.discarded),
        (4, 0, 1, 3)
    );
    assert_eq!(c.imbalance(), 0);
    q.close_and_wait();
    let q = open(dir.path(), OnFull::Block);
    let c = counts(&q);
    assert_eq!((c.pending, c.discarded), (0, 3), "kept in the file");
    assert_eq!(q.counters().dead_rows.load(Ordering::Relaxed), 1);
    assert_eq!(q.appended_total(), 4);
    assert_eq!(q.discard().unwrap(), 0, "nothing left to give up");
}
