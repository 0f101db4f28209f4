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
//!    stream's own message count once the load stopped, against every record acked (the
//!    load during the config rounds below included; equal: every acked record stored once;
//!    more: stored for callers told to retry).
//! 4. A config round per N, the load still running: every gateway follows key
//!    `config.<id>` of the key-value bucket `gateways` (three replicas; `fleet:` in its
//!    config). The bench puts one signed config per gateway (a new ingest source) and times
//!    from the first put to each gateway's `state.<id>` showing the new revision (read as
//!    `nats kv get` reads it, every 5 ms): the
//!    slowest and the median gateway, and the time the puts themselves took (the
//!    cluster's share). Then one node of the cluster stops (SIGTERM) and the
//!    same round runs on the two left, puts retried while the bucket elects a new leader;
//!    the node starts again before the next N.
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it is a smoke run: the synced
//! cluster, N = 1 and 2, 2 connections each for 1 s, failing unless the stream holds every
//! acked record and every gateway reports each round's revision.
//! Needs `nats-server` on PATH (`scripts/test.sh` installs it). Run it with
//! `scripts/bench.sh fleet`, which builds the release daemon first.

// The tests' harness: its JetStream cluster, its daemon runner and its small clients.
#[path = "../tests/common/mod.rs"]
#[allow(unused)]
mod common;
mod support;

use std::collections::BTreeSet;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{
    ingest_flow, ingest_url, named, padded_payload, poll_until, Client, Daemon, FleetController,
    Js, JsSync, NatsCluster, SOURCE, START_DEADLINE, TOKEN,
};
use serde_json::{json, Value};
use support::{cpu_secs, daemon_binary, rss_kib};

type BoxResult<T> = Result<T, Box<dyn Error>>;

/// Bytes of one record's body.
const RECORD_BYTES: usize = 1024;

/// The fleet's key-value bucket.
const BUCKET: &str = "gateways";

/// Longest wait for a config round (puts and every gateway's state).
const ROUND_DEADLINE: Duration = Duration::from_secs(90);

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
    // The bucket as an operator makes it, by a client of NATS's own (nats-py).
    FleetController::new(&urls).create(BUCKET, 3);
    let keys = tempfile::tempdir()?;
    opex_connector::release::keygen(keys.path())?;
    let fleet_keys = Keys {
        private: keys.path().join("release.key"),
        public: keys.path().join("release.pub"),
    };
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
    let mut rounds = Vec::new();
    println!(
        "{:>8} {:>10} {:>12} {:>12} {:>8} {:>10} {:>10} {:>12} {:>10} {:>10}",
        "gateways",
        "acked",
        "records/s",
        "per gateway",
        "retried",
        "RSS mean",
        "RSS max",
        "CPU µs/rec",
        "acked all",
        "stored"
    );
    for &n in &plan.fleets {
        let figures = fleet(plan, &js, &mut cluster, &fleet_keys, n)?;
        println!(
            "{:>8} {:>10} {:>12.0} {:>12.0} {:>8} {:>6} MiB {:>6} MiB {:>12.0} {:>10} {:>10}",
            n,
            figures.acked,
            figures.acked as f64 / figures.secs,
            figures.acked as f64 / figures.secs / n as f64,
            figures.retried,
            figures.rss_mean_kib / 1024,
            figures.rss_max_kib / 1024,
            figures.cpu_secs * 1e6 / figures.acked.max(1) as f64,
            figures.all_acked,
            figures.stored,
        );
        if figures.stored != figures.all_acked {
            println!(
                "         the stream holds {} messages for {} acked records (the config rounds' load \
                 included): {} stored for callers told to retry",
                figures.stored,
                figures.all_acked,
                figures.stored as i64 - figures.all_acked as i64
            );
        }
        if figures.acked == 0 || figures.stored < figures.all_acked {
            return Err(format!(
                "fleet of {n}: {} acked, {} stored",
                figures.all_acked, figures.stored
            )
            .into());
        }
        rounds.push((n, figures.rounds));
    }
    println!(
        "config round: one signed `kv put` per gateway → every gateway's state.<id> at the new \
         revision (load on)"
    );
    println!(
        "{:>8} {:>22} {:>10} {:>12} {:>12}",
        "gateways", "cluster", "puts ms", "slowest ms", "median ms"
    );
    for (n, figures) in rounds {
        for (what, round) in [
            ("3 nodes", figures[0]),
            ("2 nodes (one stopped)", figures[1]),
        ] {
            println!(
                "{:>8} {:>22} {:>10.0} {:>12.0} {:>12.0}",
                n,
                what,
                round.puts.as_secs_f64() * 1e3,
                round.slowest.as_secs_f64() * 1e3,
                round.median.as_secs_f64() * 1e3
            );
        }
    }
    cluster.stop();
    Ok(())
}

/// The fleet's signing key pair, as `opex-connector keygen` writes it.
struct Keys {
    private: PathBuf,
    public: PathBuf,
}

/// One config round's times, from the first put.
#[derive(Clone, Copy)]
struct Round {
    /// Until the last put was acked.
    puts: Duration,
    /// Until the last gateway's state showed the new revision.
    slowest: Duration,
    /// The median gateway's.
    median: Duration,
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
    /// Acked in all, the load during the config rounds included.
    all_acked: u64,
    /// The config round on three nodes, then on two.
    rounds: [Round; 2],
}

/// Runs a fleet of `n` gateways against a new stream and measures it.
fn fleet(
    plan: &Plan,
    js: &Js,
    cluster: &mut NatsCluster,
    keys: &Keys,
    n: usize,
) -> BoxResult<Figures> {
    let stream = format!("FLEET{n}");
    let subjects = format!("fleet{n}.>");
    js.create_replicated_stream(&stream, &[&subjects], 3);
    let bin = daemon_binary()?;
    let urls = cluster.urls();
    let gateways: Vec<Daemon> = (0..n)
        .map(|i| Daemon::start_binary(&bin, gateway_config(&urls, n, i, &keys.public)))
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
    let in_window = acked.load(Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    let cpu_after: f64 = gateways
        .iter()
        .map(|gw| cpu_secs(gw.pid()).unwrap_or(0.0))
        .sum();
    // The config rounds, the load still on: three nodes, then two.
    let full = config_round(js, keys, &gateways, n, 2);
    cluster.node_mut(2).stop();
    let one_lost = config_round(js, keys, &gateways, n, 3);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    cluster.node_mut(2).restart();
    cluster.wait_for_meta_leader();
    drop(gateways);
    let rounds = [full?, one_lost?];
    let (stored, _) = js
        .try_stream_state(&stream)
        .map_err(|e| format!("stream {stream}: {e}"))?;
    js.rt.block_on(js.js.delete_stream(&stream))?;
    Ok(Figures {
        acked: in_window,
        all_acked: acked.load(Ordering::Relaxed),
        rounds,
        retried: retried.load(Ordering::Relaxed),
        secs,
        rss_mean_kib: rss.iter().sum::<u64>() / rss.len().max(1) as u64,
        rss_max_kib: rss.iter().copied().max().unwrap_or(0),
        cpu_secs: cpu_after - cpu_before,
        stored,
    })
}

/// The fleet id of gateway `i` of the fleet of `n`.
fn gateway_id(n: usize, i: usize) -> String {
    format!("f{n}-gw{i}")
}

/// Puts one config per gateway (each running revision `revision - 1`: a new ingest source
/// `round<revision>`), signed, and times until every gateway's `state.<id>` shows `revision`.
fn config_round(
    js: &Js,
    keys: &Keys,
    gateways: &[Daemon],
    n: usize,
    revision: u64,
) -> BoxResult<Round> {
    let mut values = Vec::new();
    for (i, gw) in gateways.iter().enumerate() {
        let text = std::fs::read_to_string(gw.config_path())?;
        let mut tree: Value = serde_saphyr::from_str(&text)?;
        let config = tree.as_object_mut().ok_or("the config is not a mapping")?;
        config.remove("fleet");
        config["ingest"]["sources"]
            .as_array_mut()
            .ok_or("no ingest sources")?
            .push(json!({"name": format!("round{revision}"), "token": TOKEN}));
        let yaml = common::to_yaml(&tree);
        let value = opex_connector::fleet::sign(&yaml, &keys.private)?;
        values.push((gateway_id(n, i), value));
    }
    js.rt.block_on(async {
        let started = Instant::now();
        let deadline = started + ROUND_DEADLINE;
        for (id, value) in &values {
            put(js, &format!("$KV.{BUCKET}.config.{id}"), value, deadline).await?;
        }
        let puts = started.elapsed();
        // Each gateway's state read as `nats kv get` reads it (the last value of its key),
        // every 5 ms, until it shows the revision.
        let mut pending: BTreeSet<&str> = values.iter().map(|(id, _)| id.as_str()).collect();
        let mut times = Vec::new();
        let mut stream = None;
        while !pending.is_empty() {
            if Instant::now() >= deadline {
                return Err(format!(
                    "revision {revision}: no state from {pending:?} within {ROUND_DEADLINE:?}"
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            // Looked up once (retried while the bucket elects a leader); its reads go by name.
            if stream.is_none() {
                stream = js.js.get_stream(format!("KV_{BUCKET}")).await.ok();
            }
            let Some(stream) = &stream else {
                continue;
            };
            for id in pending.clone() {
                let subject = format!("$KV.{BUCKET}.state.{id}");
                let Ok(message) = stream.get_last_raw_message_by_subject(&subject).await else {
                    continue;
                };
                let state: Value = serde_json::from_slice(&message.payload).unwrap_or_default();
                if state["revision"] == json!(revision) {
                    if state["ok"] != json!(true) {
                        return Err(format!("{id}: revision {revision} refused: {state}").into());
                    }
                    pending.remove(id);
                    times.push(started.elapsed());
                }
            }
        }
        times.sort();
        Ok(Round {
            puts,
            slowest: times[times.len() - 1],
            median: times[times.len() / 2],
        })
    })
}

/// Publishes `value` on `subject` through JetStream (a key-value put) until the stream acks
/// it: a cluster that lost a node may be electing the bucket's leader.
async fn put(js: &Js, subject: &str, value: &str, deadline: Instant) -> BoxResult<()> {
    loop {
        let put = match js
            .js
            .publish(subject.to_string(), value.to_string().into())
            .await
        {
            Ok(ack) => ack.await.map(drop).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match put {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("put {subject}: {e}").into())
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A gateway's config: ingest → `nats` sink on `fleet<fleet>.gw<i>`, every node listed, in
/// the fleet of bucket `gateways` as `f<fleet>-gw<i>`, trusting `public`.
fn gateway_config(urls: &[String], fleet: usize, i: usize, public: &Path) -> Value {
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
        "fleet": {
            "connection": "cluster",
            "bucket": BUCKET,
            "id": gateway_id(fleet, i),
            "trusted_keys": [public],
        },
    })
}
