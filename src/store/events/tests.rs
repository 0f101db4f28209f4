//! The event history against a model: a `BTreeMap` keyed like `rows`, with the same quota and
//! retention rules. Random sequences of append (three sources, clashing timestamps), expire and
//! restart, under both policies; after every step every query, the byte accounting and the
//! counters must match the model exactly.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::json;

use super::*;

const QUOTA: u64 = 6 * 1024;
const RETENTION: u64 = 100;
const SOURCES: [&str; 3] = ["webhook/stripe", "ingest/orders", "ingest/orders2"];

fn record(source: &str, ts: u64, pad: usize) -> Record {
    let mut r = Record::from_value(source, "k", &json!({"pad": "x".repeat(pad)}));
    r.ts_ms = ts;
    r
}

fn open(dir: &Path, on_full: OnFull) -> EventStore {
    EventStore::open(
        &dir.join("events.db"),
        on_full,
        QUOTA,
        RETENTION,
        Arc::new(EventCounters::default()),
    )
    .unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// Admits and appends like the engine does; false when the gate refused.
fn put(rt: &tokio::runtime::Runtime, store: &EventStore, r: &Record) -> bool {
    match store.gate().admit(EventStore::row_bytes(r)) {
        Ok(reservation) => {
            rt.block_on(store.append(r, reservation)).unwrap();
            true
        }
        Err(_) => false,
    }
}

#[derive(Debug, Clone)]
enum Op {
    Append { source: usize, ts: u64, pad: usize },
    Expire(u64),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0usize..3, 0u64..300, 0usize..700)
            .prop_map(|(source, ts, pad)| Op::Append { source, ts, pad }),
        // An occasional record larger than the whole quota.
        1 => (0usize..3, 0u64..300, 6_500usize..7_000)
            .prop_map(|(source, ts, pad)| Op::Append { source, ts, pad }),
        1 => (0u64..400).prop_map(Op::Expire),
        1 => Just(Op::Restart),
    ]
}

#[derive(Default)]
struct Model {
    rows: BTreeMap<(u64, u64), Record>,
    next_seq: u64,
    used: u64,
    evicted: u64,
    expired: u64,
    blocked: u64,
}

impl Model {
    fn append(&mut self, on_full: OnFull, r: Record) -> bool {
        let size = EventStore::row_bytes(&r);
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
                    let Some((_, old)) = self.rows.pop_first() else {
                        break;
                    };
                    self.used -= EventStore::row_bytes(&old);
                    self.evicted += 1;
                }
            }
        }
        self.rows.insert((r.ts_ms, self.next_seq), r);
        self.next_seq += 1;
        self.used += size;
        true
    }

    fn expire(&mut self, now: u64) -> u64 {
        let cutoff = now.saturating_sub(RETENTION);
        let keep = self.rows.split_off(&(cutoff, 0));
        let gone = std::mem::replace(&mut self.rows, keep);
        for r in gone.values() {
            self.used -= EventStore::row_bytes(r);
        }
        self.expired += gone.len() as u64;
        gone.len() as u64
    }

    fn query(&self, source: Option<&str>, since: u64, limit: usize) -> Vec<Record> {
        self.rows
            .values()
            .filter(|r| r.ts_ms >= since && source.is_none_or(|s| r.source == s))
            .take(limit)
            .cloned()
            .collect()
    }
}

fn check(store: &EventStore, m: &Model, since: u64) {
    assert_eq!(
        store.query(None, None, usize::MAX).unwrap(),
        m.query(None, 0, usize::MAX),
        "every row, ts ascending"
    );
    for source in SOURCES {
        assert_eq!(
            store.query(Some(source), None, usize::MAX).unwrap(),
            m.query(Some(source), 0, usize::MAX),
            "rows of {source}"
        );
        assert_eq!(
            store.query(Some(source), Some(since), 3).unwrap(),
            m.query(Some(source), since, 3),
            "rows of {source} since {since}, 3 at most"
        );
    }
    assert!(store.query(Some("ingest"), None, 100).unwrap().is_empty());
    let (used, rows, reserved) = store.gate().usage();
    assert_eq!(used, m.used, "used bytes");
    assert_eq!(rows, m.rows.len() as u64, "row count");
    assert_eq!(reserved, 0, "no reservation outlives its commit");
    let c = store.counters();
    assert_eq!(c.evicted_total.load(Ordering::Relaxed), m.evicted);
    assert_eq!(c.expired_total.load(Ordering::Relaxed), m.expired);
    assert_eq!(c.stored_total.load(Ordering::Relaxed), m.next_seq);
    assert_eq!(store.gate().blocked_total(), m.blocked);
    if store.gate().on_full() == OnFull::Block && rows > 1 {
        assert!(used <= QUOTA, "block never goes over the quota");
    }
}

fn run(on_full: OnFull, ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let mut store = open(dir.path(), on_full);
    let mut m = Model::default();
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            Op::Append { source, ts, pad } => {
                let r = record(SOURCES[source], ts, pad);
                let admitted = m.append(on_full, r.clone());
                assert_eq!(
                    put(&rt, &store, &r),
                    admitted,
                    "admission agrees with the model"
                );
            }
            Op::Expire(now) => {
                assert_eq!(store.expire(now).unwrap(), m.expire(now));
            }
            Op::Restart => {
                store.close_and_wait();
                store = open(dir.path(), on_full);
            }
        }
        check(&store, &m, (i as u64 * 37) % 300);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn evict_oldest_matches_the_model(ops in prop::collection::vec(op(), 1..60)) {
        run(OnFull::EvictOldest, ops);
    }

    #[test]
    fn block_matches_the_model(ops in prop::collection::vec(op(), 1..60)) {
        run(OnFull::Block, ops);
    }
}

#[test]
fn queries_are_ts_ascending_per_source_from_since_with_a_limit() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let store = EventStore::open(
        &dir.path().join("events.db"),
        OnFull::EvictOldest,
        1 << 20,
        0,
        Arc::new(EventCounters::default()),
    )
    .unwrap();
    // Out of order, and two sources whose names are prefixes of each other.
    for (source, ts) in [("a", 30), ("ab", 10), ("a", 10), ("a\0b", 20), ("a", 20)] {
        assert!(put(&rt, &store, &record(source, ts, 1)));
    }
    let ts = |rows: Vec<Record>| rows.iter().map(|r| r.ts_ms).collect::<Vec<_>>();
    assert_eq!(ts(store.query(Some("a"), None, 10).unwrap()), [10, 20, 30]);
    assert_eq!(ts(store.query(Some("a"), Some(20), 10).unwrap()), [20, 30]);
    assert_eq!(ts(store.query(Some("a"), Some(11), 1).unwrap()), [20]);
    assert_eq!(ts(store.query(Some("ab"), None, 10).unwrap()), [10]);
    assert_eq!(ts(store.query(Some("a\0b"), None, 10).unwrap()), [20]);
    assert_eq!(
        ts(store.query(None, None, 10).unwrap()),
        [10, 10, 20, 20, 30]
    );
    assert!(store.query(Some("a"), Some(31), 10).unwrap().is_empty());
    assert!(store.query(Some("a"), None, 0).unwrap().is_empty());
    // No retention: nothing expires.
    assert_eq!(store.expire(u64::MAX).unwrap(), 0);
}

#[test]
fn evict_oldest_deletes_the_oldest_by_time_and_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let store = open(dir.path(), OnFull::EvictOldest);
    let size = EventStore::row_bytes(&record("s", 0, 500));
    let fit = QUOTA / size;
    for ts in (0..fit).rev() {
        assert!(put(&rt, &store, &record("s", ts + 100, 500)));
    }
    assert_eq!(store.counters().evicted_total.load(Ordering::Relaxed), 0);
    assert!(put(&rt, &store, &record("s", 50, 500)));
    assert!(put(&rt, &store, &record("s", 51, 500)));
    assert_eq!(store.counters().evicted_total.load(Ordering::Relaxed), 2);
    let rows = store.query(None, None, 100).unwrap();
    assert_eq!(rows.len() as u64, fit);
    // 100 (the oldest) went first, then 50 itself was the oldest when 51 came.
    assert_eq!(rows[0].ts_ms, 51);
    assert_eq!(rows[1].ts_ms, 101);
}

#[test]
fn concurrent_block_refusals_never_overshoot_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path(), OnFull::Block));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let (stored, refused) = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..200u64 {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                let r = record(SOURCES[(i % 3) as usize], i, (i as usize * 7) % 300);
                match store.gate().admit(EventStore::row_bytes(&r)) {
                    Ok(reservation) => {
                        store.append(&r, reservation).await.unwrap();
                        true
                    }
                    Err(_) => false,
                }
            }));
        }
        let mut stored = 0u64;
        let mut refused = 0u64;
        for t in tasks {
            if t.await.unwrap() {
                stored += 1;
            } else {
                refused += 1;
            }
        }
        (stored, refused)
    });
    let (used, rows, reserved) = store.gate().usage();
    assert!(used <= QUOTA, "used {used} over the quota");
    assert!(refused > 0, "the quota was reached");
    assert_eq!(rows, stored);
    assert_eq!(reserved, 0);
    assert_eq!(store.gate().blocked_total(), refused);
    assert_eq!(store.query(None, None, 1000).unwrap().len() as u64, stored);
}

#[test]
fn expire_deletes_rows_past_the_retention_in_several_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let store = EventStore::open(
        &dir.path().join("events.db"),
        OnFull::EvictOldest,
        1 << 20,
        RETENTION,
        Arc::new(EventCounters::default()),
    )
    .unwrap();
    for ts in 0..40 {
        assert!(put(&rt, &store, &record(SOURCES[ts as usize % 3], ts, 10)));
    }
    // Cutoff 125 - 100 = 25: ts 0..=24 go, more than one batch of EXPIRE_BATCH.
    assert_eq!(store.expire(125).unwrap(), 25);
    assert_eq!(store.expire(125).unwrap(), 0);
    assert_eq!(store.counters().expired_total.load(Ordering::Relaxed), 25);
    let rows = store.query(None, None, 100).unwrap();
    assert_eq!(rows.len(), 15);
    assert_eq!(rows[0].ts_ms, 25);
    let (used, count, _) = store.gate().usage();
    assert_eq!(count, 15);
    assert_eq!(used, rows.iter().map(EventStore::row_bytes).sum::<u64>());
    for source in SOURCES {
        assert!(store
            .query(Some(source), None, 100)
            .unwrap()
            .iter()
            .all(|r| r.ts_ms >= 25));
    }
}

#[test]
fn rows_accounting_and_counters_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let store = open(dir.path(), OnFull::Block);
    let mut refused = 0;
    for ts in 0..30 {
        if !put(&rt, &store, &record(SOURCES[ts % 3], ts as u64 + 200, 300)) {
            refused += 1;
        }
    }
    assert!(refused > 0);
    assert!(store.expire(305).unwrap() > 0);
    let rows = store.query(None, None, 100).unwrap();
    let usage = store.gate().usage();
    let expired = store.counters().expired_total.load(Ordering::Relaxed);
    let stored = store.counters().stored_total.load(Ordering::Relaxed);
    store.close_and_wait();

    let store = open(dir.path(), OnFull::Block);
    assert_eq!(store.query(None, None, 100).unwrap(), rows);
    assert_eq!(
        store.query(Some(SOURCES[1]), None, 100).unwrap(),
        rows.iter()
            .filter(|r| r.source == SOURCES[1])
            .cloned()
            .collect::<Vec<_>>()
    );
    assert_eq!(store.gate().usage(), usage);
    assert_eq!(store.gate().blocked_total(), refused);
    let c = store.counters();
    assert_eq!(c.expired_total.load(Ordering::Relaxed), expired);
    assert_eq!(c.stored_total.load(Ordering::Relaxed), stored);
    // New rows get new keys: nothing already stored is overwritten.
    store.close_and_wait();
    let store = open(dir.path(), OnFull::EvictOldest);
    assert!(put(&rt, &store, &rows[0].clone()));
    assert_eq!(store.query(None, None, 100).unwrap().len(), rows.len() + 1);
}

#[test]
fn a_closed_store_refuses_appends_and_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let store = open(dir.path(), OnFull::EvictOldest);
    store.close();
    let r = record("s", 1, 1);
    let reservation = store.gate().admit(EventStore::row_bytes(&r)).unwrap();
    assert_eq!(
        rt.block_on(store.append(&r, reservation)),
        Err(StoreError::Closed)
    );
    assert_eq!(store.expire(1_000), Err(StoreError::Closed));
    assert!(store.query(None, None, 10).unwrap().is_empty());
}
