//! kill -9 in the middle of ingestion: no acknowledged record is lost, and the queue's
//! byte accounting still matches its rows after each restart. Drives the real binary.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use common::*;
use serde_json::json;

/// Client threads posting at once.
const CLIENTS: usize = 8;
/// kill -9 / restart cycles.
const CYCLES: usize = 6;
/// Acknowledgements to wait for (since the last restart) before each kill.
const ACKS_PER_CYCLE: u64 = 300;
/// Record body size; keys are fixed width too, so every row has the same logical size
/// up to the width of the daemon's record id.
const RECORD: usize = 256;

/// What one client thread saw.
#[derive(Default)]
struct ClientLog {
    /// (record id, key) of every 200, in posting order.
    acked: Vec<(String, String)>,
    /// Replies other than 200 or 503 (transport errors are expected while the daemon is down).
    unexpected: Vec<String>,
}

/// Client threads posting continuously to whichever address the daemon has now.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    attempts: Arc<AtomicU64>,
    base: Arc<RwLock<String>>,
    handles: Vec<JoinHandle<ClientLog>>,
}

impl Load {
    fn start(daemon: &Daemon) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let attempts = Arc::new(AtomicU64::new(0));
        let base = Arc::new(RwLock::new(daemon.base()));
        let handles = (0..CLIENTS)
            .map(|t| {
                let (stop, acked, attempts, base) =
                    (stop.clone(), acked.clone(), attempts.clone(), base.clone());
                let client = Client::new();
                thread::spawn(move || {
                    let mut log = ClientLog::default();
                    let mut n = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        let key = format!("t{t:02}-{n:07}");
                        n += 1;
                        let url = ingest_url(&base.read().unwrap(), SOURCE, &key);
                        let body = padded_payload(&key, RECORD);
                        attempts.fetch_add(1, Ordering::SeqCst);
                        match client.post(&url, Some(TOKEN), body.as_bytes()) {
                            Ok(r) if r.status == 200 => {
                                let id = r.json()["id"].as_str().map(str::to_string);
                                match id {
                                    Some(id) => log.acked.push((id, key)),
                                    None => log.unexpected.push(format!("{key}: {}", r.body)),
                                }
                                acked.fetch_add(1, Ordering::SeqCst);
                            }
                            Ok(r) if r.status == 503 => thread::sleep(Duration::from_millis(20)),
                            Ok(r) => log
                                .unexpected
                                .push(format!("{key}: {} {}", r.status, r.body)),
                            // The daemon is being killed or restarted.
                            Err(_) => thread::sleep(Duration::from_millis(5)),
                        }
                    }
                    log
                })
            })
            .collect();
        Load {
            stop,
            acked,
            attempts,
            base,
            handles,
        }
    }

    fn acked(&self) -> u64 {
        self.acked.load(Ordering::SeqCst)
    }

    fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::SeqCst)
    }

    /// Waits (polling) for `n` more acknowledgements.
    fn wait_for_acks(&self, n: u64) {
        let target = self.acked() + n;
        wait_until(Duration::from_secs(45), "clients to get more 200s", || {
            self.acked() >= target
        });
    }

    /// Points the clients at the daemon's current address.
    fn retarget(&self, daemon: &Daemon) {
        *self.base.write().unwrap() = daemon.base();
    }

    /// Stops the clients; returns their logs and the number of posts they made.
    fn finish(self) -> (Vec<ClientLog>, u64) {
        self.stop.store(true, Ordering::SeqCst);
        let logs = self
            .handles
            .into_iter()
            .map(|h| h.join().expect("client thread panicked"))
            .collect();
        (logs, self.attempts.load(Ordering::SeqCst))
    }
}

fn assert_no_unexpected(logs: &[ClientLog]) {
    let unexpected: Vec<&String> = logs.iter().flat_map(|l| &l.unexpected).collect();
    assert!(unexpected.is_empty(), "unexpected replies: {unexpected:#?}");
}

fn assert_ids_unique(logs: &[ClientLog]) -> Vec<String> {
    let ids: Vec<String> = logs
        .iter()
        .flat_map(|l| l.acked.iter().map(|(id, _)| id.clone()))
        .collect();
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(
        unique.len(),
        ids.len(),
        "two acknowledged records share an id (ids must be unique across restarts)"
    );
    ids
}

#[test]
fn kill_nine_mid_ingest_loses_no_acknowledged_record() {
    let receiver = Receiver::start();
    let mut config = queue_config(64, "block");
    config["connector"]["push"] = json!({
        "url": receiver.url(),
        "batch_rows": 50,
        "timeout_secs": 5,
        "retry_initial_ms": 50,
        "retry_max_ms": 300,
    });
    let mut daemon = Daemon::start(config);
    let load = Load::start(&daemon);

    for _ in 0..CYCLES {
        load.wait_for_acks(ACKS_PER_CYCLE);
        daemon.kill9();
        daemon.restart();
        load.retarget(&daemon);
    }
    load.wait_for_acks(ACKS_PER_CYCLE);
    let (logs, _) = load.finish();
    assert_no_unexpected(&logs);
    let ids = assert_ids_unique(&logs);

    wait_until(
        POLL_DEADLINE,
        "every acknowledged record at the receiver",
        || receiver.has_all(&ids),
    );
    let lost: Vec<&String> = {
        let got = receiver.unique_ids();
        ids.iter().filter(|id| !got.contains(*id)).collect()
    };
    assert!(
        lost.is_empty(),
        "acknowledged but never delivered: {lost:?}"
    );
    assert!(
        receiver.bad_lines().is_empty(),
        "{:?}",
        receiver.bad_lines()
    );

    // Each record carries the key it was posted under, and each client's records
    // first arrive in the order that client posted them (the queue is FIFO).
    let records = receiver.records();
    let key_of: std::collections::HashMap<&str, &str> = records
        .iter()
        .filter_map(|r| Some((r["id"].as_str()?, r["key"].as_str()?)))
        .collect();
    let firsts = receiver.first_arrivals();
    for (t, log) in logs.iter().enumerate() {
        for (id, key) in &log.acked {
            assert_eq!(key_of.get(id.as_str()), Some(&key.as_str()), "record {id}");
        }
        let mine: HashSet<&String> = log.acked.iter().map(|(id, _)| id).collect();
        let order: Vec<&String> = firsts.iter().filter(|id| mine.contains(id)).collect();
        let posted: Vec<&String> = log.acked.iter().map(|(id, _)| id).collect();
        assert_eq!(
            order, posted,
            "client {t}: arrival order differs from posting order"
        );
    }

    wait_until(
        POLL_DEADLINE,
        "the queue drained to 0 rows and 0 bytes",
        || {
            let s = daemon.status();
            u64_at(&s, "/push_queue/rows") == 0 && u64_at(&s, "/push_queue/used_bytes") == 0
        },
    );
    eprintln!(
        "{} records acknowledged over {CYCLES} kill -9 cycles, {} lines received",
        ids.len(),
        records.len()
    );
}

#[test]
fn kill_nine_without_uplink_keeps_every_acknowledged_row_and_its_accounting() {
    let mut daemon = Daemon::start(queue_config(64, "block"));

    // Same-size rows: learn the logical size of one.
    for n in 0..20 {
        let key = format!("w00-{n:07}");
        let reply = daemon.ingest(&key, &padded_payload(&key, RECORD));
        assert_eq!(reply.status, 200, "{reply:?}");
    }
    let status = daemon.status();
    let per_row = u64_at(&status, "/push_queue/used_bytes") as f64 / 20.0;
    assert!(
        per_row >= (RECORD + 72) as f64,
        "a row of a {RECORD} byte record counts {per_row} bytes (key 8 + value + 64)"
    );

    let load = Load::start(&daemon);
    let check = |daemon: &Daemon, acked: u64, attempts: u64, when: &str| {
        let status = daemon.status();
        let pq = &status["push_queue"];
        let rows = u64_at(pq, "/rows");
        let used = u64_at(pq, "/used_bytes");
        assert!(
            rows >= acked,
            "{when}: {rows} rows but {acked} records acknowledged: {pq:#}"
        );
        assert!(
            rows <= attempts,
            "{when}: {rows} rows but only {attempts} posts: {pq:#}"
        );
        assert_eq!(used == 0, rows == 0, "{when}: {pq:#}");
        let expected = rows as f64 * per_row;
        assert!(
            (used as f64 - expected).abs() <= rows as f64 * 24.0,
            "{when}: used_bytes {used} for {rows} rows of ~{per_row} bytes (expected ~{expected}): {pq:#}"
        );
        let metrics = daemon.metrics();
        assert_eq!(
            metric(&metrics, "opex_connector_push_queue_rows"),
            Some(rows as f64)
        );
        assert_eq!(
            metric(&metrics, "opex_connector_push_queue_used_bytes"),
            Some(used as f64)
        );
    };

    for cycle in 0..CYCLES {
        load.wait_for_acks(ACKS_PER_CYCLE);
        daemon.kill9();
        // Nothing more can be acknowledged now: these bound what the store must hold.
        let (acked, attempts) = (load.acked() + 20, load.attempts() + 20);
        daemon.restart();
        check(
            &daemon,
            acked,
            attempts,
            &format!("after kill -9 #{}", cycle + 1),
        );
        load.retarget(&daemon);
    }
    load.wait_for_acks(ACKS_PER_CYCLE);
    let (logs, attempts) = load.finish();
    assert_no_unexpected(&logs);
    assert_ids_unique(&logs);

    // A graceful restart keeps exactly the same rows and bytes.
    let before = daemon.status();
    let exit = daemon.stop();
    assert!(exit.success(), "SIGTERM must exit 0, got {exit}");
    daemon.restart();
    let after = daemon.status();
    assert_eq!(after["push_queue"]["rows"], before["push_queue"]["rows"]);
    assert_eq!(
        after["push_queue"]["used_bytes"],
        before["push_queue"]["used_bytes"]
    );
    let acked = logs.iter().map(|l| l.acked.len() as u64).sum::<u64>() + 20;
    check(&daemon, acked, attempts + 20, "after the graceful restart");
}
