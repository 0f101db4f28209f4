//! The reliability campaign's short version, against the real binary and real peers:
//!
//! - kill -9 in the middle of mixed load (ingest API, signed webhooks `on_done` and
//!   `on_receipt`, a NATS JetStream source on a real `nats-server`, Modbus polling of a pymodbus
//!   device), the push queue draining to an uplink receiver. After every restart the stores
//!   open cleanly and the ledger balances (with the push queue's pending counts checked row by
//!   row); at the end every acknowledged record is at the receiver and nothing was lost.
//!   `OPEX_CHAOS_CYCLES` sets the number of cycles (3 here; `scripts/chaos.sh` runs 20) and
//!   `OPEX_CHAOS_ACKS` the acknowledgements between two kills (200 here).
//! - A full disk: the data dir on an 8 MiB tmpfs filled up by another file. The connector
//!   answers 503, counts and logs the write errors, keeps running, and takes records again
//!   once the space is back; the ledger balances and the queue reopens cleanly after kill -9.
//!
//! Each test prints one `chaos:` line with its figures.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// Cycles when `OPEX_CHAOS_CYCLES` is not set.
const DEFAULT_CYCLES: usize = 3;
/// Acknowledgements to wait for (since the last restart) before each kill, when
/// `OPEX_CHAOS_ACKS` is not set.
const DEFAULT_ACKS_PER_CYCLE: u64 = 200;
const ERP: &str = "erp";
const ERP_SECRET: &str = "whsec_erp_0123456789abcdef";
const DEVICE: &str = "press-1";

/// A positive number from the environment, or `default`.
fn env_number<T: std::str::FromStr + PartialOrd + Default>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > T::default())
        .unwrap_or(default)
}

/// What a poster thread sends.
#[derive(Clone, Copy)]
enum Kind {
    Ingest,
    Hook(&'static str, &'static str),
}

/// Poster threads sending records to whichever address the daemon has now; each keeps the
/// ids of the records answered 200.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    base: Arc<RwLock<String>>,
    handles: Vec<JoinHandle<(Vec<String>, Vec<String>)>>,
}

impl Load {
    fn start(daemon: &Daemon, kinds: &[Kind]) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let base = Arc::new(RwLock::new(daemon.base()));
        let handles = kinds
            .iter()
            .enumerate()
            .map(|(t, kind)| {
                let (stop, acked, base, kind) = (stop.clone(), acked.clone(), base.clone(), *kind);
                thread::spawn(move || {
                    let client = Client::new();
                    let (mut ids, mut unexpected) = (Vec::new(), Vec::new());
                    let mut n = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        n += 1;
                        let key = format!("t{t}-{n:07}");
                        let body = padded_payload(&key, 200);
                        let base = base.read().unwrap().clone();
                        let reply = match kind {
                            Kind::Ingest => client.post(
                                &ingest_url(&base, SOURCE, &key),
                                Some(TOKEN),
                                body.as_bytes(),
                            ),
                            Kind::Hook(name, secret) => {
                                let sig = signature(secret, unix_secs(), body.as_bytes());
                                client.request(
                                    "POST",
                                    &format!("{base}/api/hooks/{name}"),
                                    None,
                                    &[("X-Opex-Signature", &sig)],
                                    Some(body.as_bytes()),
                                )
                            }
                        };
                        match reply {
                            Ok(r) if r.status == 200 => match r.json()["id"].as_str() {
                                Some(id) => {
                                    ids.push(id.to_string());
                                    acked.fetch_add(1, Ordering::SeqCst);
                                }
                                None => unexpected.push(format!("{key}: {}", r.body)),
                            },
                            Ok(r) if r.status == 503 => thread::sleep(Duration::from_millis(20)),
                            Ok(r) => unexpected.push(format!("{key}: {} {}", r.status, r.body)),
                            // The daemon is being killed or restarted.
                            Err(_) => thread::sleep(Duration::from_millis(5)),
                        }
                    }
                    (ids, unexpected)
                })
            })
            .collect();
        Load {
            stop,
            acked,
            base,
            handles,
        }
    }

    fn acked(&self) -> u64 {
        self.acked.load(Ordering::SeqCst)
    }

    fn retarget(&self, daemon: &Daemon) {
        *self.base.write().unwrap() = daemon.base();
    }

    /// Stops the posters; returns the acknowledged ids and any unexpected replies.
    fn finish(self) -> (Vec<String>, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        let (mut ids, mut unexpected) = (Vec::new(), Vec::new());
        for h in self.handles {
            let (i, u) = h.join().expect("poster thread panicked");
            ids.extend(i);
            unexpected.extend(u);
        }
        (ids, unexpected)
    }
}

/// A JetStream publisher on its own thread; returns how many messages the stream acked.
fn publisher(url: String, stop: Arc<AtomicBool>) -> JoinHandle<u64> {
    thread::spawn(move || {
        let js = Js::connect(&url);
        let mut n = 0;
        while !stop.load(Ordering::SeqCst) {
            js.publish(
                "orders.new",
                serde_json::to_vec(&json!({ "n": n })).unwrap(),
            );
            n += 1;
            thread::sleep(Duration::from_millis(5));
        }
        n
    })
}

/// Distinct record ids and lines at the receiver, by source.
fn arrivals(receiver: &Receiver) -> BTreeMap<String, (HashSet<String>, u64)> {
    let mut out: BTreeMap<String, (HashSet<String>, u64)> = BTreeMap::new();
    for r in receiver.records() {
        let source = r["source"].as_str().unwrap_or("").to_string();
        let e = out.entry(source).or_default();
        e.0.insert(r["id"].as_str().unwrap_or("").to_string());
        e.1 += 1;
    }
    out
}

#[test]
fn kill_nine_under_mixed_load_loses_no_acknowledged_record_and_the_ledger_balances_after_each_restart(
) {
    let cycles: usize = env_number("OPEX_CHAOS_CYCLES", DEFAULT_CYCLES);
    let acks_per_cycle: u64 = env_number("OPEX_CHAOS_ACKS", DEFAULT_ACKS_PER_CYCLE);
    let started = Instant::now();
    let nats = NatsServer::start();
    Js::connect(&nats.url()).create_stream("ORDERS", &["orders.>"]);
    let device = ModbusTcp::start();
    let receiver = Receiver::start();

    let mut config = queue_config(64, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["connector"]["push"] = json!({
        "url": receiver.url(),
        "batch_rows": 100,
        "timeout_secs": 5,
        "retry_initial_ms": 50,
        "retry_max_ms": 300,
    });
    config["webhooks"] = json!([
        webhook(HOOK, HOOK_SECRET, "on_done"),
        webhook(ERP, ERP_SECRET, "on_receipt"),
    ]);
    config["nats"] = json!({
        "connections": [{"name": "js", "servers": [nats.url()], "reconnect_max_ms": 200}],
        "sources": [{"name": "orders", "stream": "ORDERS", "ack_wait_secs": 2,
                     "nak_backoff_initial_ms": 100, "nak_backoff_max_ms": 400}],
    });
    config["devices"] = json!([{
        "name": DEVICE,
        "protocol": "modbus_tcp",
        "host": "127.0.0.1",
        "port": device.port(),
        "unit": 1,
        "timeout_ms": 500,
        "groups": [{"name": "main", "interval_ms": 50}],
        "points": [{"name": "u16", "register": 0, "type": "u16"}],
    }]);
    let mut daemon = Daemon::start(config);
    let load = Load::start(
        &daemon,
        &[
            Kind::Ingest,
            Kind::Ingest,
            Kind::Ingest,
            Kind::Hook(HOOK, HOOK_SECRET),
            Kind::Hook(HOOK, HOOK_SECRET),
            Kind::Hook(ERP, ERP_SECRET),
        ],
    );
    let stop_publisher = Arc::new(AtomicBool::new(false));
    let publisher = publisher(nats.url(), stop_publisher.clone());

    let mut recoveries = Vec::new();
    for cycle in 1..=cycles {
        let target = load.acked() + acks_per_cycle;
        wait_until(Duration::from_secs(60), "more 200s before the kill", || {
            load.acked() >= target
        });
        daemon.kill9();
        let killed = Instant::now();
        daemon.restart();
        load.retarget(&daemon);
        let listening = killed.elapsed();
        let acked = load.acked();
        wait_until(Duration::from_secs(60), "a 200 after the restart", || {
            load.acked() > acked
        });
        let recovered = killed.elapsed();
        assert_balanced(&ledger(&daemon, true), &format!("after kill -9 #{cycle}"));
        recoveries.push((listening, recovered));
        eprintln!(
            "chaos: cycle {cycle}/{cycles}: listening after {} ms, first 200 after {} ms",
            listening.as_millis(),
            recovered.as_millis()
        );
    }
    let stderr = daemon.stderr();
    assert!(
        !stderr.contains("accounting repaired"),
        "a store did not open cleanly:\n{}",
        daemon.stderr_tail(100)
    );

    stop_publisher.store(true, Ordering::SeqCst);
    let published = publisher.join().expect("publisher panicked");
    let (ids, unexpected) = load.finish();
    assert!(unexpected.is_empty(), "unexpected replies: {unexpected:#?}");
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(
        unique.len(),
        ids.len(),
        "two acknowledged records share an id"
    );

    let nats_ids: Vec<String> = (1..=published)
        .map(|s| format!("nats-ORDERS-{s}"))
        .collect();
    wait_until(
        POLL_DEADLINE,
        "every acknowledged record and every JetStream message at the receiver",
        || receiver.has_all(&ids) && receiver.has_all(&nats_ids),
    );
    wait_until(POLL_DEADLINE, "the push queue drained", || {
        u64_at(&daemon.status(), "/push_queue/rows") == 0
    });
    assert!(
        receiver.bad_lines().is_empty(),
        "{:?}",
        receiver.bad_lines()
    );

    // The ledger: balanced, nothing pending, nothing lost, and its durable counts agree with
    // the receiver. Sources that cannot repeat an id (ingest, on_done webhooks, polls) match
    // exactly; JetStream redeliveries and inbox replays after a crash may store an id twice.
    let exact = [
        format!("ingest/{SOURCE}"),
        format!("webhook/{HOOK}"),
        format!("modbus/{DEVICE}"),
    ];
    // The device is still polled, so a sample may be on its way at any moment: wait for a
    // moment when none is pending and the receiver holds each exact source's acked records,
    // and check that moment. A record lost for good never lets that moment come.
    let mut l = Value::Null;
    let mut got = arrivals(&receiver);
    wait_until(
        POLL_DEADLINE,
        "a settled ledger that the receiver matches",
        || {
            l = ledger(&daemon, true);
            got = arrivals(&receiver);
            let settled = l["sources"]
                .as_object()
                .is_some_and(|m| m.values().all(|c| u64_at(c, "/pending") == 0));
            settled
                && exact.iter().all(|source| {
                    let acked = u64_at(&l["parts"]["push_queue"][source.as_str()], "/acked");
                    got.get(source).map_or(0, |(ids, _)| ids.len() as u64) == acked
                })
        },
    );
    let l = assert_balanced(&l, "at the end");
    let mut acked_total = 0;
    let mut lost_total = 0;
    for (source, c) in l["sources"].as_object().expect("sources") {
        assert_eq!(u64_at(c, "/pending"), 0, "{source}: {c:#}");
        lost_total += u64_at(c, "/lost");
        let push = &l["parts"]["push_queue"][source];
        if push.is_null() {
            continue;
        }
        let acked = u64_at(push, "/acked");
        acked_total += acked;
        let (distinct, lines) = got
            .get(source)
            .map(|(ids, lines)| (ids.len() as u64, *lines))
            .unwrap_or((0, 0));
        if exact.contains(source) {
            assert_eq!(
                distinct, acked,
                "{source}: distinct ids at the receiver: {l:#}"
            );
        } else {
            assert!(
                distinct <= acked && acked <= lines,
                "{source}: {distinct} ids, {acked} acked, {lines} lines: {l:#}"
            );
        }
    }
    for source in [
        "nats/orders",
        &format!("modbus/{DEVICE}"),
        &format!("webhook/{ERP}"),
    ] {
        assert!(
            source_figure(&l, source, "/acked") > 0,
            "{source} took part in the load: {l:#}"
        );
    }
    assert_eq!(lost_total, 0, "no loss under kill -9: {l:#}");
    let delivered: u64 = got.values().map(|(ids, _)| ids.len() as u64).sum();
    let worst = recoveries.iter().map(|r| r.1).max().unwrap_or_default();
    let mean = recoveries.iter().map(|r| r.1.as_millis()).sum::<u128>() / recoveries.len() as u128;
    eprintln!(
        "chaos: kill -9 under mixed load: cycles={cycles} acked_by_clients={} jetstream_published={published} ledger_acked={acked_total} delivered_distinct={delivered} losses={lost_total} recovery_ms_mean={mean} recovery_ms_max={} duration_s={}",
        ids.len(),
        worst.as_millis(),
        started.elapsed().as_secs()
    );
}

/// A tmpfs of `size` mounted on a new directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` (and a message) when this process may not mount.
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::Builder::new()
            .prefix("opex-full-")
            .tempdir()
            .ok()?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "chaos: disk-full test skipped: mounting a tmpfs needs root (mount said: {})",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// Writes `path` until the filesystem is full; returns the bytes written.
fn fill(path: &Path) -> u64 {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("create the filler");
    let chunk = vec![0u8; 16 * 1024];
    let mut written = 0;
    while let Ok(n) = f.write(&chunk) {
        if n == 0 {
            break;
        }
        written += n as u64;
    }
    let _ = f.sync_all();
    written
}

#[test]
fn a_full_disk_is_answered_503_counted_and_survived_and_records_are_taken_again_once_space_returns()
{
    let Some(fs) = Tmpfs::mount("8m") else {
        return;
    };
    let data_dir: PathBuf = fs.path().join("data");
    let mut config = queue_config(64, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["connector"]["data_dir"] = json!(data_dir.to_string_lossy());
    config["webhooks"] = json!([webhook(HOOK, HOOK_SECRET, "on_done")]);
    let mut daemon = Daemon::start(config);
    let filler = fs.path().join("filler");

    let acked = std::cell::Cell::new(0u64);
    let post = |daemon: &Daemon, key: &str| {
        let reply = daemon.ingest(key, &padded_payload(key, 4096));
        if reply.status == 200 {
            acked.set(acked.get() + 1);
        }
        reply
    };
    for i in 0..50 {
        assert_eq!(post(&daemon, &format!("a{i}")).status, 200);
    }
    let filled = fill(&filler);

    // Full: writes fail and are answered 503 + Retry-After; nothing crashes.
    let started = Instant::now();
    let mut refusal = None;
    for i in 0..5000 {
        let reply = post(&daemon, &format!("b{i}"));
        match reply.status {
            200 => continue,
            503 => {
                refusal = Some(reply);
                break;
            }
            other => panic!("disk full answered {other}: {reply:?}"),
        }
    }
    let refusal = refusal.expect("a full disk was answered 503");
    let refused_after = started.elapsed();
    assert!(refusal.header("retry-after").is_some(), "{refusal:?}");
    // A small record may still fit in a free page of the file; a webhook is refused the same
    // way once none is left.
    let mut hook_refused = false;
    for i in 0..200 {
        let reply = daemon.hook(HOOK, HOOK_SECRET, &padded_payload(&format!("h{i}"), 4096));
        match reply.status {
            200 => acked.set(acked.get() + 1),
            503 => {
                hook_refused = true;
                break;
            }
            other => panic!("webhook on a full disk answered {other}: {reply:?}"),
        }
    }
    assert!(hook_refused, "a webhook on a full disk was answered 503");
    assert!(daemon.is_running(), "the daemon survives a full disk");
    let status = daemon.status();
    assert!(
        u64_at(&status, "/push_queue/write_errors_total") > 0,
        "{status:#}"
    );
    assert!(
        daemon.stderr().contains("queue write failed: sink=push"),
        "the write errors are logged"
    );
    wait_until(Duration::from_secs(20), "the push queue alert", || {
        daemon
            .stderr()
            .contains("alert: queue=push_queue level=full")
    });
    let l = assert_balanced(&ledger(&daemon, true), "disk full");
    assert!(
        source_figure(&l, &format!("ingest/{SOURCE}"), "/refused") > 0,
        "{l:#}"
    );

    // Space returns: records are taken again.
    std::fs::remove_file(&filler).expect("remove the filler");
    let freed = Instant::now();
    let mut n = 0;
    wait_until(Duration::from_secs(30), "a 200 once space is back", || {
        n += 1;
        post(&daemon, &format!("c{n}")).status == 200
    });
    let recovery = freed.elapsed();
    assert_stored(
        &daemon.hook(HOOK, HOOK_SECRET, r#"{"order":2}"#),
        "webhook after",
    );
    acked.set(acked.get() + 1);
    let acked = acked.get();
    assert_balanced(&ledger(&daemon, true), "space back");

    // The store reopens cleanly after kill -9 and holds every acknowledged record.
    daemon.kill9();
    daemon.restart();
    let l = assert_balanced(&ledger(&daemon, true), "after kill -9");
    assert!(
        !daemon.stderr().contains("accounting repaired"),
        "the queue opened cleanly"
    );
    let rows = u64_at(&daemon.status(), "/push_queue/rows");
    let ledger_acked = source_figure(&l, &format!("ingest/{SOURCE}"), "/acked")
        + source_figure(&l, &format!("webhook/{HOOK}"), "/acked");
    assert!(
        rows >= acked,
        "{rows} rows for {acked} acknowledged records"
    );
    assert_eq!(rows, ledger_acked, "the ledger counts every row: {l:#}");
    eprintln!(
        "chaos: disk full: tmpfs=8MiB filler_bytes={filled} acked={acked} refused_after_s={:.1} write_errors={} recovery_ms={} rows_after_kill9={rows}",
        refused_after.as_secs_f64(),
        u64_at(&status, "/push_queue/write_errors_total"),
        recovery.as_millis()
    );
}
