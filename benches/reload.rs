//! Reload benchmark: what changing the config costs while the line runs, against a restart.
//!
//! The release daemon polls one device of the simulator (its `process` group every 100 ms)
//! while 16 keep-alive clients post 1 KB records to its ingest API, and:
//!
//! 1. **50 reloads** (`POST /api/config`), each changing the flows, a schedule (added,
//!    changed and removed in turn), a second device's points (a point added and removed in
//!    turn: that device restarts alone) and a sink (a second history added and removed in
//!    turn), and rotating a second ingest source's token: the time from
//!    the request to the applied answer (p50, p99, max), the requests of the clients that did
//!    not get a `200` meanwhile, and the **poll gap** of the device, which no reload touches:
//!    the longest time between two of its polls (its `last_poll_ms`, read every 5 ms) against
//!    its interval, and the polls it missed (those its interval asked for over the run, less
//!    those it made). Target: p99 ≤ 50 ms, no poll missed.
//! 2. **A restart** of the same daemon with the same config under the same load (SIGTERM,
//!    then `run` again): the time from the signal to the first `200` of the new daemon, the
//!    clients' requests that failed meanwhile, and the device's gap (its last poll before the
//!    signal to its first after) with the polls it missed.
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it makes a short smoke run (3
//! reloads) with the test-profile binary.
//!
//! Environment: `BENCH_RELOADS` (default 50), `OPEX_CONNECTOR_BIN` (the daemon binary),
//! `BENCH_DIR` (temp folders).

#[path = "../tests/common/ports.rs"]
mod ports;
mod support;

use std::error::Error;
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ports::free_port;
use support::daemon::{bench_base_dir, connect, exchange, get_status, wait_until_polled, Daemon};
use support::daemon_binary;

type BoxResult<T> = Result<T, Box<dyn Error>>;

const ADMIN: &str = "bench-admin-0123456";
const CLIENTS: usize = 16;
const POLL_MS: u64 = 100;

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    if let Err(e) = run(bench) {
        eprintln!("reload bench failed: {e}");
        std::process::exit(1);
    }
}

/// The config of round `round`: the same first device, `push` and `storage` sinks and first
/// ingest source in every round; the flows, a schedule, the second device's points, a
/// second history sink and the second source's token change.
fn config(round: usize, data: &Path, plant: u16) -> String {
    let data = serde_json::to_string(&data.to_string_lossy()).unwrap_or_default();
    let odd = round % 2 == 1;
    let to_storage = if odd {
        "\n      - {id: to-storage, kind: sink, sink: storage}\n      - {id: to-history-2, kind: sink, sink: history-2}"
    } else {
        ""
    };
    let wire_storage = if odd {
        "\n      - {from: in, to: to-storage}\n      - {from: in, to: to-history-2}"
    } else {
        ""
    };
    let history_2 = if odd {
        "sinks:\n  - {name: history-2, type: storage, max_quota_mb: 64}\n"
    } else {
        ""
    };
    let extra_point = if odd {
        ", {name: coolant_temp, register: 2, type: f32}"
    } else {
        ""
    };
    let (schedule, tick, wire_tick) = if round % 3 == 2 {
        (String::new(), "", "")
    } else {
        (
            format!("schedules:\n  - {{name: tick, every: 1s, payload: {{round: {round}}}}}\n"),
            "\n      - {id: tick, kind: source, source: schedule/tick}",
            "\n      - {from: tick, to: to-push}",
        )
    };
    format!(
        "connector:
  name: bench
  data_dir: {data}
  http:
    listen: 127.0.0.1:0
    max_connections: 256
    admin_token: {ADMIN}
  push_queue:
    enabled: true
    max_quota_mb: 1024
    on_full: evict_oldest
storage:
  max_quota_mb: 256
{history_2}ingest:
  sources:
    - name: bench
      token: bench-token-0123
    - name: other
      token: other-token-{round:04}-0123
simulator:
  modbus: 127.0.0.1:{plant}
devices:
  - name: plant-1
    protocol: modbus_tcp
    host: 127.0.0.1
    port: {plant}
    unit: 1
    groups: [{{name: process, interval_ms: {POLL_MS}}}]
    points: [{{name: oven_temp, register: 0, type: f32}}]
  - name: plant-2
    protocol: modbus_tcp
    host: 127.0.0.1
    port: {plant}
    unit: 1
    groups: [{{name: process, interval_ms: {POLL_MS}}}]
    points: [{{name: oven_temp, register: 0, type: f32}}{extra_point}]
{schedule}flows:
  - id: out
    nodes:
      - {{id: in, kind: source, source: ingest/bench}}
      - {{id: other, kind: source, source: ingest/other}}
      - {{id: plant, kind: source, source: modbus/plant-1}}
      - {{id: to-push, kind: sink, sink: push}}{to_storage}{tick}
    wires:
      - {{from: in, to: to-push}}
      - {{from: other, to: to-push}}
      - {{from: plant, to: to-push}}{wire_storage}{wire_tick}
"
    )
}

/// The clients' counts: answered `200`, and every other outcome (another status, a refused
/// or broken connection), with when the last `200` came.
#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    failed: AtomicU64,
    last_ok: Mutex<Option<Instant>>,
}

/// `CLIENTS` keep-alive clients posting 1 KB records to `addr` (read again from `target` on
/// every new connection: a restarted daemon listens elsewhere) until `stop`.
fn load(
    target: Arc<Mutex<String>>,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
) -> Vec<thread::JoinHandle<()>> {
    (0..CLIENTS)
        .map(|i| {
            let (target, counts, stop) = (target.clone(), counts.clone(), stop.clone());
            thread::spawn(move || {
                let pad = "x".repeat(1000);
                let mut conn = None;
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let addr = target.lock().map(|a| a.clone()).unwrap_or_default();
                    if conn.is_none() {
                        conn = connect(&addr).ok();
                        if conn.is_none() {
                            counts.failed.fetch_add(1, Ordering::Relaxed);
                            thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                    }
                    let Some((s, r)) = conn.as_mut() else { continue };
                    n += 1;
                    let body = format!(r#"{{"client":{i},"n":{n},"pad":"{pad}"}}"#);
                    let req = format!(
                        "POST /api/ingest/bench/c{i}-{n} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer bench-token-0123\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    match exchange(s, r, req.as_bytes()) {
                        Ok((200, _)) => {
                            counts.ok.fetch_add(1, Ordering::Relaxed);
                            if let Ok(mut last) = counts.last_ok.lock() {
                                *last = Some(Instant::now());
                            }
                        }
                        Ok(_) => {
                            counts.failed.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            counts.failed.fetch_add(1, Ordering::Relaxed);
                            conn = None;
                        }
                    }
                }
            })
        })
        .collect()
}

/// `POST /api/config` of `yaml`; the status and how long the answer took.
fn post_config(addr: &str, yaml: &str) -> BoxResult<(u16, Duration)> {
    let (mut s, mut r) = connect(addr)?;
    let req = format!(
        "POST /api/config HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {ADMIN}\r\nContent-Type: application/yaml\r\nContent-Length: {}\r\n\r\n{yaml}",
        yaml.len()
    );
    let began = Instant::now();
    let (status, body) = exchange(&mut s, &mut r, req.as_bytes())?;
    let took = began.elapsed();
    if status != 200 {
        return Err(format!(
            "reload answered {status}: {}",
            String::from_utf8_lossy(&body)
        )
        .into());
    }
    Ok((status, took))
}

/// The device's polls so far and the time of its last poll (ms since the epoch).
fn device(addr: &str) -> Option<(u64, u64)> {
    let status = get_status(addr).ok()?;
    let d = status["devices"].as_array()?.first()?.clone();
    Some((d["polls_total"].as_u64()?, d["last_poll_ms"].as_u64()?))
}

/// Reads the device's `last_poll_ms` every 5 ms until `stop`: the longest gap between two
/// polls seen.
fn watch_gaps(addr: String, stop: Arc<AtomicBool>) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let (mut last, mut longest) = (None::<u64>, 0u64);
        while !stop.load(Ordering::SeqCst) {
            if let Some((_, at)) = device(&addr) {
                if let Some(before) = last.filter(|b| at > *b) {
                    longest = longest.max(at - before);
                }
                last = Some(at);
            }
            thread::sleep(Duration::from_millis(5));
        }
        longest
    })
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

fn run(bench: bool) -> BoxResult<()> {
    let reloads: usize = if bench {
        std::env::var("BENCH_RELOADS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(50)
    } else {
        3
    };
    let bin = daemon_binary()?;
    let work = tempfile::Builder::new()
        .prefix("opex-bench-reload-")
        .tempdir_in(bench_base_dir())?;
    let dir = work.path();
    let plant = free_port();
    let file = dir.join("bench.yaml");
    fs::write(&file, config(0, &dir.join("data"), plant))?;
    let mut daemon = Daemon::run(&bin, dir, &file)?;
    wait_until_polled(&daemon.addr, 3)?;
    let target = Arc::new(Mutex::new(daemon.addr.clone()));
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(target.clone(), counts.clone(), stop.clone());
    thread::sleep(Duration::from_millis(if bench { 2000 } else { 300 }));

    // 1. Reloads under the load.
    let watching = Arc::new(AtomicBool::new(false));
    let gaps = watch_gaps(daemon.addr.clone(), watching.clone());
    let (polls_before, _) = device(&daemon.addr).ok_or("no device status")?;
    let failed_before = counts.failed.load(Ordering::Relaxed);
    let ok_before = counts.ok.load(Ordering::Relaxed);
    let began = Instant::now();
    let mut took = Vec::new();
    for round in 1..=reloads {
        let (_, t) = post_config(&daemon.addr, &config(round, &dir.join("data"), plant))?;
        took.push(t);
        thread::sleep(Duration::from_millis(100));
    }
    let elapsed = began.elapsed();
    let (polls_after, _) = device(&daemon.addr).ok_or("no device status")?;
    watching.store(true, Ordering::SeqCst);
    let longest_gap = gaps.join().map_err(|_| "the gap watcher panicked")?;
    let failed = counts.failed.load(Ordering::Relaxed) - failed_before;
    let ok = counts.ok.load(Ordering::Relaxed) - ok_before;
    took.sort();
    let asked = elapsed.as_millis() as u64 / POLL_MS;
    let made = polls_after - polls_before;
    println!("reload bench: {reloads} reloads under {CLIENTS} ingest clients, one device polled every {POLL_MS} ms");
    println!();
    println!("| | figure |");
    println!("| --- | --- |");
    println!(
        "| request to applied answer, p50 / p99 / max | {:.1} / {:.1} / {:.1} ms |",
        percentile(&took, 0.5),
        percentile(&took, 0.99),
        took.last().map(|d| d.as_secs_f64() * 1000.0).unwrap_or(0.0)
    );
    println!("| ingest answered 200 meanwhile / not | {ok} / {failed} |");
    println!(
        "| the device's longest gap between two polls | {longest_gap} ms (its interval {POLL_MS} ms) |"
    );
    println!(
        "| its polls over {:.1} s: asked / made / missed | {asked} / {made} / {} |",
        elapsed.as_secs_f64(),
        asked.saturating_sub(made)
    );

    // 2. A restart of the same daemon, same config (the last applied), same load.
    let (_, last_poll) = device(&daemon.addr).ok_or("no device status")?;
    let failed_before = counts.failed.load(Ordering::Relaxed);
    let signalled = Instant::now();
    daemon.stop();
    let exited = Instant::now();
    let stopped = exited.duration_since(signalled);
    daemon = Daemon::run(&bin, dir, &file)?;
    if let Ok(mut t) = target.lock() {
        *t = daemon.addr.clone();
    }
    let first_ok = loop {
        let last = counts.last_ok.lock().ok().and_then(|l| *l);
        // The old daemon answers what it holds while it stops: the first 200 of the new one.
        if let Some(at) = last.filter(|at| *at > exited) {
            break at.duration_since(signalled);
        }
        if signalled.elapsed() > Duration::from_secs(60) {
            return Err("no 200 within a minute of the restart".into());
        }
        thread::sleep(Duration::from_millis(5));
    };
    let failed = counts.failed.load(Ordering::Relaxed) - failed_before;
    wait_until_polled(&daemon.addr, 1)?;
    let (_, first_poll) = device(&daemon.addr).ok_or("no device status")?;
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        let _ = c.join();
    }
    // The first poll after the start may have been overtaken by a later one when read: the
    // gap is at least this.
    let gap = first_poll.saturating_sub(last_poll);
    println!();
    println!("| restart (SIGTERM, then run) | figure |");
    println!("| --- | --- |");
    println!(
        "| signal to the first 200 again | {:.0} ms (the stop itself {:.0} ms) |",
        first_ok.as_secs_f64() * 1000.0,
        stopped.as_secs_f64() * 1000.0
    );
    println!("| ingest requests refused or failed meanwhile | {failed} |");
    println!(
        "| the device's gap, last poll before to first after | {gap} ms: about {} polls missed |",
        (gap / POLL_MS).saturating_sub(1)
    );
    daemon.stop();
    Ok(())
}
