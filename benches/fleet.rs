//! Fleet benchmark: N gateways on this box, each fed by its own HTTP ingest load, publishing
//! through their `nats` sinks into one three-node JetStream cluster.
//!
//! 1. The tests' three-node cluster (`tests/common/peers/nats_cluster.rs`: loopback, free
//!    ports, JetStream on each node, routes between them), twice (`BENCH_FLEET_SYNC`, default
//!    `both`): with every write synced, as in the tests (`always`), and with JetStream's
//!    default sync, where the replicas keep an answered write (`default`).
//! 2. For N in 1, 4, 16 (`BENCH_FLEET`): a stream `FLEET<N>` with three replicas; N release
//!    daemons (`opex-connector run` through the tests' harness, each in its temp dir), each
//!    with one ingest source and a flow into its `nats` sink on subject `fleet<N>.gw<i>`,
//!    every node in its server list. Each gets `BENCH_CONNS` (default 16) client threads of
//!    its own, each on one keep-alive connection, posting 1 KB records for `BENCH_SECS`
//!    (default 10); a `200` is an acked record (the stream's ack came back).
//! 3. Printed per N: acked records/s in all and per gateway, the told-to-retry answers, the
//!    gateways' RSS under load (mean and largest), their CPU time per acked record, and the
//!    stream's own message count once the load stopped, against the acked total (equal:
//!    every acked record stored once).
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it is a smoke run: the synced
//! cluster, N = 1 and 2, 2 connections each for 1 s, failing unless the stream holds exactly what was acked.
//! Needs `nats-server` on PATH (`scripts/test.sh` installs it). Run it with
//! `scripts/bench.sh fleet`, which builds the release daemon first.

// The tests' harness: its JetStream cluster, its daemon runner and its small clients.
#[path = "../tests/common/mod.rs"]
#[allow(unused)]
mod common;
mod support;

use std::error::Error;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{
    ingest_flow, ingest_url, named, padded_payload, poll_until, Client, Daemon, Js, JsSync,
    NatsCluster, SOURCE, START_DEADLINE, TOKEN,
};
use serde_json::{json, Value};
use support::{cpu_secs, daemon_binary, rss_kib};

type BoxResult<T> = Result<T, Box<dyn Error>>;

/// Bytes of one record's body.
const RECORD_BYTES: usize = 1024;

fn main() {
    // The gateways log warnings and errors only, as in the other benchmarks (before any
    // thread starts).
    if std::env::var_os("RUST_LOG").is_none() {
        std::env::set_var("RUST_LOG", "warn");
    }
    if let Err(e) = run() {
        eprintln!("bench fleet: {e}");
        std::process::exit(1);
    }
}

/// What one run measures.
struct Plan {
    /// The clusters to run the fleets against, one after the other.
    syncs: Vec<JsSync>,
    fleets: Vec<usize>,
    conns: usize,
    secs: f64,
    smoke: bool,
}

impl Plan {
    fn from_env() -> BoxResult<Plan> {
        let bench = std::env::args().any(|a| a == "--bench");
        let var = |name: &str| std::env::var(name).ok();
        if !bench {
            println!("fleet bench: smoke run (no --bench); `scripts/bench.sh fleet` gives figures");
            return Ok(Plan {
                syncs: vec![JsSync::EveryWrite],
                fleets: vec![1, 2],
                conns: 2,
                secs: 1.0,
                smoke: true,
            });
        }
        let fleets = match var("BENCH_FLEET") {
            None => vec![1, 4, 16],
            Some(list) => list
                .split(',')
                .map(|n| n.trim().parse::<usize>())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("BENCH_FLEET {list:?}: {e}"))?,
        };
        let syncs = match var("BENCH_FLEET_SYNC").as_deref() {
            None | Some("both") => vec![JsSync::EveryWrite, JsSync::Default],
            Some("always") => vec![JsSync::EveryWrite],
            Some("default") => vec![JsSync::Default],
            Some(other) => {
                return Err(
                    format!("BENCH_FLEET_SYNC {other:?}: expected always, default or both").into(),
                )
            }
        };
        Ok(Plan {
            syncs,
            fleets,
            conns: var("BENCH_CONNS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(16),
            secs: var("BENCH_SECS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(10.0),
            smoke: false,
        })
    }
}

fn run() -> BoxResult<()> {
    let plan = Plan::from_env()?;
    for &sync in &plan.syncs {
        cluster(&plan, sync)?;
    }
    Ok(())
}

/// Every fleet of the plan against a new cluster whose stores sync as `sync` says.
fn cluster(plan: &Plan, sync: JsSync) -> BoxResult<()> {
    let mut cluster = NatsCluster::start_with(sync);
    let urls = cluster.urls();
    let js = Js::connect_cluster(&urls);
    println!(
        "cluster: 3 nats-server nodes, {}; streams of 3 replicas; {} connections per gateway, \
         {} B records, {} s per fleet",
        match sync {
            JsSync::EveryWrite => "every write synced (sync_interval: always)",
            JsSync::Default => "JetStream's default sync (every 2 minutes)",
        },
        plan.conns,
        RECORD_BYTES,
        plan.secs
    );
    println!(
        "{:>8} {:>10} {:>12} {:>12} {:>8} {:>10} {:>10} {:>12} {:>10}",
        "gateways",
        "acked",
        "records/s",
        "per gateway",
        "retried",
        "RSS mean",
        "RSS max",
        "CPU µs/rec",
        "stored"
    );
    for &n in &plan.fleets {
        let figures = fleet(plan, &js, &urls, n)?;
        println!(
            "{:>8} {:>10} {:>12.0} {:>12.0} {:>8} {:>6} MiB {:>6} MiB {:>12.0} {:>10}",
            n,
            figures.acked,
            figures.acked as f64 / figures.secs,
            figures.acked as f64 / figures.secs / n as f64,
            figures.retried,
            figures.rss_mean_kib / 1024,
            figures.rss_max_kib / 1024,
            figures.cpu_secs * 1e6 / figures.acked.max(1) as f64,
            figures.stored,
        );
        if figures.stored != figures.acked {
            println!(
                "         the stream holds {} messages for {} acked records: {} stored for callers told to retry",
                figures.stored,
                figures.acked,
                figures.stored as i64 - figures.acked as i64
            );
        }
        if figures.acked == 0 || (plan.smoke && figures.stored != figures.acked) {
            return Err(format!(
                "fleet of {n}: {} acked, {} stored",
                figures.acked, figures.stored
            )
            .into());
        }
    }
    cluster.stop();
    Ok(())
}

/// What one fleet did.
struct Figures {
    acked: u64,
    retried: u64,
    secs: f64,
    rss_mean_kib: u64,
    rss_max_kib: u64,
    /// CPU seconds the gateways spent during the load, all together.
    cpu_secs: f64,
    stored: u64,
}

/// Runs a fleet of `n` gateways against a new stream and measures it.
fn fleet(plan: &Plan, js: &Js, urls: &[String], n: usize) -> BoxResult<Figures> {
    let stream = format!("FLEET{n}");
    let subjects = format!("fleet{n}.>");
    js.create_replicated_stream(&stream, &[&subjects], 3);
    let bin = daemon_binary()?;
    let gateways: Vec<Daemon> = (0..n)
        .map(|i| Daemon::start_binary(&bin, gateway_config(urls, n, i)))
        .collect();
    for gw in &gateways {
        let connected = poll_until(START_DEADLINE, || {
            named(&gw.status(), "/sinks", "nats")["connected"] == true
        });
        if !connected {
            return Err(format!("{}: the nats sink did not connect", gw.base()).into());
        }
    }
    let acked = Arc::new(AtomicU64::new(0));
    let retried = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let body = padded_payload("fleet", RECORD_BYTES);
    let mut threads = Vec::new();
    for gw in &gateways {
        for c in 0..plan.conns {
            let (acked, retried, stop) = (acked.clone(), retried.clone(), stop.clone());
            let (base, body) = (gw.base(), body.clone());
            threads.push(thread::spawn(move || {
                let client = Client::new();
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let url = ingest_url(&base, SOURCE, &format!("c{c}-{k}"));
                    k += 1;
                    match client.post(&url, Some(TOKEN), body.as_bytes()) {
                        Ok(r) if r.status == 200 => acked.fetch_add(1, Ordering::Relaxed),
                        _ => retried.fetch_add(1, Ordering::Relaxed),
                    };
                }
            }));
        }
    }
    let cpu_before: f64 = gateways
        .iter()
        .map(|gw| cpu_secs(gw.pid()).unwrap_or(0.0))
        .sum();
    let started = Instant::now();
    thread::sleep(Duration::from_secs_f64(plan.secs * 0.9));
    let rss: Vec<u64> = gateways
        .iter()
        .map(|gw| rss_kib(gw.pid()).unwrap_or(0))
        .collect();
    thread::sleep(Duration::from_secs_f64(plan.secs * 0.1));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu_after: f64 = gateways
        .iter()
        .map(|gw| cpu_secs(gw.pid()).unwrap_or(0.0))
        .sum();
    drop(gateways);
    let (stored, _) = js
        .try_stream_state(&stream)
        .map_err(|e| format!("stream {stream}: {e}"))?;
    js.rt.block_on(js.js.delete_stream(&stream))?;
    Ok(Figures {
        acked: acked.load(Ordering::Relaxed),
        retried: retried.load(Ordering::Relaxed),
        secs,
        rss_mean_kib: rss.iter().sum::<u64>() / rss.len().max(1) as u64,
        rss_max_kib: rss.iter().copied().max().unwrap_or(0),
        cpu_secs: cpu_after - cpu_before,
        stored,
    })
}

/// A gateway's config: ingest → `nats` sink on `fleet<fleet>.gw<i>`, every node listed.
fn gateway_config(urls: &[String], fleet: usize, i: usize) -> Value {
    json!({
        "connector": {
            "name": format!("gw{i}"),
            "http": {"max_connections": 256},
            // What a gateway runs with; this flow does not use it.
            "push_queue": {"enabled": true, "max_quota_mb": 64},
        },
        "ingest": {"sources": [{"name": SOURCE, "token": TOKEN}]},
        "nats": {
            "connections": [{"name": "cluster", "servers": urls}],
            "sink": {"subject": format!("fleet{fleet}.gw{i}")},
        },
        "flows": ingest_flow(&["nats"]),
    })
}
