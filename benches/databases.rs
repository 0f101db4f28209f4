//! Database sink benchmark: rows/s into PostgreSQL and ClickHouse through the connector,
//! against a raw bulk load of the same rows into the same server in the same run.
//!
//! For each database, one server (started here on a free loopback port in a temp dir, like the
//! tests do) and three tables of the same shape (`ts, source, key, payload`):
//!
//! 1. **Raw bulk load**: Postgres `psql -c "\copy ... FROM file (FORMAT csv)"`; ClickHouse one
//!    HTTP `INSERT ... FORMAT JSONEachRow` of the same rows as a file. The ceiling.
//! 2. **Sink**: the library's sink (`PostgresSink` / `ClickHouseSink`) with its defaults
//!    (`sink_batch_rows` 1000, `max_insert_rows` 20000) and a backlog as large as the run,
//!    then the same with `queue: disk`; every record admitted and delivered from one thread,
//!    timed until the database confirmed the last row
//!    (`inserted_total`). What the sink itself costs: encoding, batching, COPY / HTTP.
//! 3. **End to end**: the release daemon with an ingest source flowing into the sink (its
//!    memory backlog, then `queue: disk`); client threads on keep-alive connections post one
//!    record per request, timed from the first request until the sink reports the last row
//!    inserted. Bounded by the ingest API, so it is set against **ingest → push**: the same
//!    clients posting the same records to a daemon whose ingest source goes to the push queue
//!    (acknowledged after its commit), timed until the last answer, once per run.
//!
//! Printed per database: rows/s of each with the absolute times, the sink's ratio to the raw
//! load, end to end's ratio to ingest → push, and the rows per insert the database got. Under
//! `cargo test --all-targets` (no `--bench`) it makes a smoke run of 300 rows that fails unless
//! every row arrives.
//!
//! Environment: `BENCH_ROWS` (default 100000), `BENCH_CONNS` (default 16) client threads for
//! the end-to-end run, `BENCH_ONLY` (a comma list of `postgres`, `clickhouse` and `sink`: only
//! those databases, and with `sink` only the raw load and the sink alone, no daemon; default
//! everything), `OPEX_CONNECTOR_BIN` (the daemon; `scripts/bench.sh databases` passes the
//! release build).

// The tests' harness: the same PostgreSQL and ClickHouse peers the sink tests start.
#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::error::Error;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{ClickHouse, Postgres, CH_PASSWORD};
use opex_connector::commands::Commands;
use opex_connector::engine::Engine;
use opex_connector::flow::Plan;
use opex_connector::record::Record;
use opex_connector::shutdown::Shutdown;
use opex_connector::sinks::backlog::SinkBatchConfig;
use opex_connector::sinks::clickhouse::{encode_row, ClickHouseConfig};
use opex_connector::sinks::postgres::PostgresConfig;
use opex_connector::sinks::queue::{DiskQueueConfig, QueueMode};
use opex_connector::sinks::{Sink, SinkConfig, SinkSpec, Sinks, StartContext};
use opex_connector::store::dead_letters::DeadLetterQueue;
use serde_json::{json, Value};
use support::daemon_binary;

type BoxResult<T> = Result<T, Box<dyn Error>>;

const SOURCE: &str = "ingest/bench";
const TOKEN: &str = "bench-token-0123";
const DEADLINE: Duration = Duration::from_secs(600);

fn main() {
    if let Err(e) = run() {
        eprintln!("bench databases: {e}");
        std::process::exit(1);
    }
}

struct Setup {
    bench: bool,
    rows: usize,
    conns: usize,
    /// The parts `BENCH_ONLY` selects.
    only: Only,
}

/// What `BENCH_ONLY` selects: the databases, and whether the daemon runs end to end.
struct Only {
    postgres: bool,
    clickhouse: bool,
    end_to_end: bool,
}

impl Only {
    fn from_env() -> BoxResult<Self> {
        let Ok(v) = std::env::var("BENCH_ONLY") else {
            return Ok(Self {
                postgres: true,
                clickhouse: true,
                end_to_end: true,
            });
        };
        let words: Vec<&str> = v
            .split(',')
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .collect();
        if let Some(w) = words
            .iter()
            .find(|w| !matches!(**w, "postgres" | "clickhouse" | "sink"))
        {
            return Err(
                format!("BENCH_ONLY={v:?}: {w:?} is not postgres, clickhouse or sink").into(),
            );
        }
        let has = |w: &str| words.contains(&w);
        let any_db = has("postgres") || has("clickhouse");
        Ok(Self {
            postgres: !any_db || has("postgres"),
            clickhouse: !any_db || has("clickhouse"),
            end_to_end: !has("sink"),
        })
    }
}

fn env_usize(name: &str, default: usize) -> BoxResult<usize> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .map_err(|e| format!("{name}={v:?}: {e}").into()),
        Err(_) => Ok(default),
    }
}

fn run() -> BoxResult<()> {
    let bench = std::env::args().any(|a| a == "--bench");
    let setup = if bench {
        Setup {
            bench,
            rows: env_usize("BENCH_ROWS", 100_000)?.max(1000),
            conns: env_usize("BENCH_CONNS", 16)?.clamp(1, 256),
            only: Only::from_env()?,
        }
    } else {
        Setup {
            bench,
            rows: 300,
            conns: 2,
            only: Only::from_env()?,
        }
    };
    let records = make_records(setup.rows);
    let bytes: usize = records.iter().map(|r| r.payload.get().len()).sum();
    let push = if setup.only.end_to_end {
        Some(to_push(&records, &setup)?)
    } else {
        None
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "databases{}: {} rows, payload {} B on average, columns ts, source, key, payload; {} client connections end to end",
        if setup.bench { "" } else { " (smoke run)" },
        setup.rows,
        bytes / setup.rows.max(1),
        setup.conns
    );
    if let Some(push) = push {
        let _ = writeln!(
            out,
            "ingest -> push (the same clients into the push queue): {:>10.0} rows/s ({:.3} s)",
            setup.rows as f64 / push.as_secs_f64().max(1e-9),
            push.as_secs_f64()
        );
    }
    if setup.only.postgres {
        let pg = Postgres::start();
        let pg_version = pg.sql("SHOW server_version");
        let pg_rates = postgres(&pg, &records, &setup)?;
        drop(pg);
        report(
            &mut out,
            &format!("postgres {pg_version}"),
            "psql \\copy",
            &pg_rates,
            push,
        );
    }
    if setup.only.clickhouse {
        let ch = ClickHouse::start();
        let ch_version = ch.sql("SELECT version()").trim().to_string();
        let ch_rates = clickhouse(&ch, &records, &setup)?;
        drop(ch);
        report(
            &mut out,
            &format!("clickhouse {ch_version}"),
            "HTTP JSONEachRow insert",
            &ch_rates,
            push,
        );
    }
    print!("{out}");
    Ok(())
}

/// One measurement: how long it took and how many inserts the database got.
#[derive(Clone, Copy)]
struct Run {
    took: Duration,
    inserts: u64,
}

/// Seconds taken by the raw load, the sink (with its memory backlog, and with `queue: disk`),
/// and the daemon end to end (the same two ways; `None` when `BENCH_ONLY` left it out).
struct Rates {
    rows: usize,
    raw: Duration,
    sink: Run,
    disk: Run,
    e2e: Option<Run>,
    e2e_disk: Option<Run>,
}

fn report(out: &mut String, db: &str, raw_name: &str, r: &Rates, push: Option<Duration>) {
    let rate = |d: Duration| r.rows as f64 / d.as_secs_f64().max(1e-9);
    let per_insert = |run: &Run| r.rows as f64 / run.inserts.max(1) as f64;
    let raw = rate(r.raw);
    let push = push.map_or(0.0, rate);
    let _ = writeln!(out, "{db}:");
    let _ = writeln!(
        out,
        "  raw bulk load ({raw_name}): {:>10.0} rows/s ({:.3} s)",
        raw,
        r.raw.as_secs_f64()
    );
    for (name, run, base, base_name) in [
        ("connector sink (library):  ", Some(&r.sink), raw, "raw"),
        ("sink with queue: disk:     ", Some(&r.disk), raw, "raw"),
        (
            "end to end (ingest API):   ",
            r.e2e.as_ref(),
            push,
            "ingest -> push",
        ),
        (
            "end to end, queue: disk:   ",
            r.e2e_disk.as_ref(),
            push,
            "ingest -> push",
        ),
    ] {
        let Some(run) = run else { continue };
        let _ = writeln!(
            out,
            "  {name} {:>10.0} rows/s ({:.3} s)  ratio {:.2} of {base_name}  ({:.0} rows per insert)",
            rate(run.took),
            run.took.as_secs_f64(),
            rate(run.took) / base,
            per_insert(run)
        );
    }
}

fn make_records(n: usize) -> Vec<Record> {
    (0..n)
        .map(|i| {
            let body = format!(
                r#"{{"temp_c":{}.{},"count":{i},"line":"L{}","state":"running","pad":"{}"}}"#,
                20 + i % 10,
                i % 100,
                i % 7,
                "x".repeat(48)
            );
            // A payload built here is always valid JSON.
            Record::from_json(SOURCE, format!("k{i:09}"), body.as_bytes())
                .unwrap_or_else(|_| Record::from_value(SOURCE, "bad", &Value::Null))
        })
        .collect()
}

/// The kind's own `sink_batch_rows` and `max_insert_rows` (its defaults), a backlog as large
/// as the run, `block`.
fn batch(default: &SinkBatchConfig, rows: usize) -> SinkBatchConfig {
    SinkBatchConfig {
        flush_interval: Duration::from_millis(200),
        max_backlog_rows: rows.max(1000),
        on_full: opex_connector::admission::OnFull::Block,
        ..default.clone()
    }
}

fn wait(what: &str, mut done: impl FnMut() -> bool) -> BoxResult<()> {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Delivers `records` through sink `cfg` alone, from the library (no flows, no HTTP), and
/// returns the time until its destination confirmed every one.
fn through_sink(cfg: SinkConfig, records: &[Record]) -> BoxResult<Duration> {
    let dir = tempfile::tempdir()?;
    let name = cfg.name.clone();
    let sink = Sink::build(&cfg, dir.path())?;
    let dlq = Arc::new(DeadLetterQueue::open(dir.path(), 1000)?);
    let engine = Arc::new(Engine::new(
        Plan::direct(&[SOURCE.to_string()], &name),
        Sinks::new(vec![sink]),
        dlq,
    ));
    let rt = tokio::runtime::Runtime::new()?;
    let shutdown = Shutdown::new();
    let running = engine
        .sinks()
        .get(&name)
        .ok_or("no sink")?
        .start(&StartContext {
            engine: Arc::clone(&engine),
            runtime: rt.handle().clone(),
            shutdown: shutdown.clone(),
            devices: Default::default(),
            commands: Arc::new(Commands::new(Default::default())),
            health: Default::default(),
        })?;
    let shared = engine.sinks().get_shared(&name).ok_or("no sink")?;
    let sink = &*shared;
    let started = Instant::now();
    // 64 deliveries at a time, as 64 callers would: a disk queue commits them in groups.
    rt.block_on(async {
        for chunk in records.chunks(64) {
            let calls = chunk.iter().map(|r| async move {
                let reservation = sink
                    .admit(sink.bytes(r))
                    .map_err(|_| "refused".to_string())?;
                sink.deliver(r, reservation, false)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            });
            for result in futures_util::future::join_all(calls).await {
                result?;
            }
        }
        Ok::<_, Box<dyn Error>>(())
    })?;
    wait("the sink's rows", || {
        sink.report().ledger.delivered as usize >= records.len()
    })?;
    let took = started.elapsed();
    shutdown.trigger();
    sink.close();
    for t in running.on_close.into_iter().chain(running.on_signal) {
        let _ = t.join();
    }
    Ok(took)
}

// ------------------------------------------------------------------ postgres

const PG_TABLES: [&str; 5] = [
    "bench_raw",
    "bench_sink",
    "bench_disk",
    "bench_e2e",
    "bench_e2e_disk",
];

fn postgres(pg: &Postgres, records: &[Record], setup: &Setup) -> BoxResult<Rates> {
    // Each table counts the statements that wrote it (a COPY is one): the inserts it got.
    pg.sql("CREATE TABLE bench_inserts (t text PRIMARY KEY, n bigint NOT NULL DEFAULT 0)");
    pg.sql(
        "CREATE FUNCTION bench_count() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         UPDATE bench_inserts SET n = n + 1 WHERE t = TG_TABLE_NAME; RETURN NULL; END $$",
    );
    for t in PG_TABLES {
        pg.sql(&format!(
            "CREATE UNLOGGED TABLE {t} (ts timestamptz, source text, key text, payload jsonb)"
        ));
        pg.sql(&format!("INSERT INTO bench_inserts (t) VALUES ('{t}')"));
        pg.sql(&format!(
            "CREATE TRIGGER {t}_count AFTER INSERT ON {t} FOR EACH STATEMENT EXECUTE FUNCTION bench_count()"
        ));
    }
    let inserts = |t: &str| -> u64 {
        pg.sql(&format!("SELECT n FROM bench_inserts WHERE t = '{t}'"))
            .trim()
            .parse()
            .unwrap_or(0)
    };
    // 1. psql \copy of the same rows as CSV.
    let csv = pg.dir().join("rows.csv");
    let mut text = String::with_capacity(records.len() * 200);
    for r in records {
        let _ = writeln!(
            text,
            "{},{},{},\"{}\"",
            iso_ms(r.ts_ms),
            r.source,
            r.key,
            r.payload.get().replace('"', "\"\"")
        );
    }
    std::fs::write(&csv, text)?;
    let started = Instant::now();
    let status = Command::new(pg.psql())
        .args(["-X", "-q", "-h", "127.0.0.1", "-p", &pg.port().to_string()])
        .args([
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
        ])
        .arg(format!(
            "\\copy bench_raw FROM '{}' (FORMAT csv)",
            csv.display()
        ))
        .status()?;
    let raw = started.elapsed();
    if !status.success() {
        return Err("psql \\copy failed".into());
    }
    check_count(
        &pg.sql("SELECT count(*) FROM bench_raw"),
        records.len(),
        "bench_raw",
    )?;

    // 2. The sink, from the library.
    let mut p = opex_connector::config::Problems::default();
    let raw_cfg = opex_connector::sinks::postgres::RawPostgres {
        url: Some(pg.url()),
        sink_table: Some("bench_sink".into()),
        ..Default::default()
    };
    let mut cfg = PostgresConfig::validate(&raw_cfg, "postgres", &mut p);
    if !p.is_empty() {
        return Err(p.to_string().into());
    }
    cfg.batch = batch(&cfg.batch, records.len());
    let mut disk_cfg = cfg.clone();
    disk_cfg.table = vec!["bench_disk".into()];
    disk_cfg.queue = QueueMode::Disk(DiskQueueConfig {
        quota_bytes: 4 << 30,
        on_full: opex_connector::admission::OnFull::Block,
    });
    let sink = Run {
        took: through_sink(
            SinkConfig {
                name: "postgres".into(),
                spec: SinkSpec::Postgres(cfg),
            },
            records,
        )?,
        inserts: inserts("bench_sink"),
    };
    let disk = Run {
        took: through_sink(
            SinkConfig {
                name: "postgres".into(),
                spec: SinkSpec::Postgres(disk_cfg),
            },
            records,
        )?,
        inserts: inserts("bench_disk"),
    };
    check_count(
        &pg.sql("SELECT count(*) FROM bench_sink"),
        records.len(),
        "bench_sink",
    )?;
    check_count(
        &pg.sql("SELECT count(*) FROM bench_disk"),
        records.len(),
        "bench_disk",
    )?;

    // 3. End to end through the daemon, with the memory backlog and with `queue: disk`.
    let mut runs = Vec::new();
    let parts: &[(&str, bool)] = if setup.only.end_to_end {
        &[("bench_e2e", false), ("bench_e2e_disk", true)]
    } else {
        &[]
    };
    for &(table, queue) in parts {
        let section = e2e_section(json!({ "url": pg.url() }), table, queue, records.len());
        let took = end_to_end(Some(("postgres", section)), records, setup)?;
        check_count(
            &pg.sql(&format!("SELECT count(*) FROM {table}")),
            records.len(),
            table,
        )?;
        runs.push(Run {
            took,
            inserts: inserts(table),
        });
    }
    Ok(Rates {
        rows: records.len(),
        raw,
        sink,
        disk,
        e2e: runs.first().copied(),
        e2e_disk: runs.get(1).copied(),
    })
}

// ------------------------------------------------------------------ clickhouse

fn clickhouse(ch: &ClickHouse, records: &[Record], setup: &Setup) -> BoxResult<Rates> {
    for t in [
        "bench_raw",
        "bench_sink",
        "bench_disk",
        "bench_e2e",
        "bench_e2e_disk",
    ] {
        ch.sql(&format!(
            "CREATE TABLE {t} (ts UInt64, source String, key String, payload String) ENGINE = MergeTree ORDER BY ts"
        ));
    }
    // The server's count of insert queries: the inserts of each step are its growth.
    let inserts = || -> u64 {
        ch.sql("SELECT value FROM system.events WHERE event = 'InsertQuery'")
            .trim()
            .parse()
            .unwrap_or(0)
    };
    let columns = opex_connector::sinks::backlog::config::default_columns();
    // 1. One HTTP insert of the same rows as a JSONEachRow file.
    let mut body = Vec::with_capacity(records.len() * 200);
    for r in records {
        body.extend_from_slice(encode_row(r, &columns).as_bytes());
        body.push(b'\n');
    }
    std::fs::write(std::env::temp_dir().join("opex-bench-rows.jsonl"), &body)?;
    let started = Instant::now();
    let (status, text) = ch.insert_raw("INSERT%20INTO%20bench_raw%20FORMAT%20JSONEachRow", &body);
    let raw = started.elapsed();
    let _ = std::fs::remove_file(std::env::temp_dir().join("opex-bench-rows.jsonl"));
    if status != 200 {
        return Err(format!("raw insert: {status} {text}").into());
    }
    check_count(
        &ch.sql("SELECT count() FROM bench_raw"),
        records.len(),
        "bench_raw",
    )?;

    // 2. The sink, from the library.
    let mut p = opex_connector::config::Problems::default();
    let raw_cfg = opex_connector::sinks::clickhouse::RawClickHouse {
        url: Some(ch.url()),
        password: Some(CH_PASSWORD.into()),
        sink_table: Some("bench_sink".into()),
        ..Default::default()
    };
    let mut cfg = ClickHouseConfig::validate(&raw_cfg, "clickhouse", &mut p);
    if !p.is_empty() {
        return Err(p.to_string().into());
    }
    cfg.batch = batch(&cfg.batch, records.len());
    let mut disk_cfg = cfg.clone();
    disk_cfg.table = vec!["bench_disk".into()];
    disk_cfg.queue = QueueMode::Disk(DiskQueueConfig {
        quota_bytes: 4 << 30,
        on_full: opex_connector::admission::OnFull::Block,
    });
    let before = inserts();
    let took = through_sink(
        SinkConfig {
            name: "clickhouse".into(),
            spec: SinkSpec::ClickHouse(cfg),
        },
        records,
    )?;
    let sink = Run {
        took,
        inserts: inserts() - before,
    };
    let before = inserts();
    let took = through_sink(
        SinkConfig {
            name: "clickhouse".into(),
            spec: SinkSpec::ClickHouse(disk_cfg),
        },
        records,
    )?;
    let disk = Run {
        took,
        inserts: inserts() - before,
    };
    check_count(
        &ch.sql("SELECT count() FROM bench_sink"),
        records.len(),
        "bench_sink",
    )?;
    check_count(
        &ch.sql("SELECT count() FROM bench_disk"),
        records.len(),
        "bench_disk",
    )?;

    // 3. End to end through the daemon, with the memory backlog and with `queue: disk`.
    let mut runs = Vec::new();
    let parts: &[(&str, bool)] = if setup.only.end_to_end {
        &[("bench_e2e", false), ("bench_e2e_disk", true)]
    } else {
        &[]
    };
    for &(table, queue) in parts {
        let server = json!({ "url": ch.url(), "password": CH_PASSWORD });
        let section = e2e_section(server, table, queue, records.len());
        let before = inserts();
        let took = end_to_end(Some(("clickhouse", section)), records, setup)?;
        check_count(
            &ch.sql(&format!("SELECT count() FROM {table}")),
            records.len(),
            table,
        )?;
        runs.push(Run {
            took,
            inserts: inserts() - before,
        });
    }
    Ok(Rates {
        rows: records.len(),
        raw,
        sink,
        disk,
        e2e: runs.first().copied(),
        e2e_disk: runs.get(1).copied(),
    })
}

/// The end-to-end runs' sink section: `server`'s keys, the table, a backlog of `rows` that
/// blocks instead of dropping, and `queue: disk` when `queue`.
fn e2e_section(mut server: Value, table: &str, queue: bool, rows: usize) -> Value {
    server["sink_table"] = json!(table);
    server["sink_batch"] = json!({ "flush_interval_ms": 200,
                                   "max_backlog_rows": rows.max(1000), "on_full": "block" });
    if queue {
        server["queue"] = json!("disk");
    }
    server
}

fn check_count(got: &str, want: usize, table: &str) -> BoxResult<()> {
    if got.trim() == want.to_string() {
        Ok(())
    } else {
        Err(format!("{table} has {} rows, expected {want}", got.trim()).into())
    }
}

// ------------------------------------------------------------------ end to end

/// The records ingest -> push: into the push queue, each answered after its commit.
fn to_push(records: &[Record], setup: &Setup) -> BoxResult<Duration> {
    end_to_end(None, records, setup)
}

/// Posts `records` to a daemon whose ingest source flows into `sink` (its name and section),
/// or into the push queue when `None`; returns the time until the sink inserted the last row
/// (the push queue: until the last answer).
fn end_to_end(
    sink: Option<(&str, Value)>,
    records: &[Record],
    setup: &Setup,
) -> BoxResult<Duration> {
    let dir = tempfile::tempdir()?;
    let mut config = json!({
        "connector": { "name": "bench", "data_dir": dir.path().join("data"),
                       "http": { "listen": "127.0.0.1:0", "max_connections": 512 },
                       "push_queue": { "enabled": true, "max_quota_mb": 4096, "on_full": "block" } },
        "ingest": { "sources": [ { "name": "bench", "token": TOKEN } ] },
    });
    let sink = sink.map(|(name, section)| {
        config[name] = section;
        config["flows"] = json!([{ "id": "db", "nodes": [
            { "id": "in", "kind": "source", "source": SOURCE },
            { "id": "out", "kind": "sink", "sink": name } ],
            "wires": [ { "from": "in", "to": "out" } ] }]);
        name.to_string()
    });
    // JSON is YAML.
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, serde_json::to_string_pretty(&config)?)?;
    let mut daemon = Daemon::start(&path, dir.path())?;
    let base = daemon.base.clone();
    let next = Arc::new(AtomicUsize::new(0));
    let bodies: Arc<Vec<(String, String)>> = Arc::new(
        records
            .iter()
            .map(|r| (r.key.clone(), r.payload.get().to_string()))
            .collect(),
    );
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..setup.conns {
        let next = Arc::clone(&next);
        let bodies = Arc::clone(&bodies);
        let base = base.clone();
        clients.push(thread::spawn(move || -> Result<(), String> {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(30)))
                .build()
                .into();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((key, body)) = bodies.get(i) else {
                    return Ok(());
                };
                loop {
                    let reply = agent
                        .post(format!("{base}/api/ingest/bench/{key}"))
                        .header("Authorization", format!("Bearer {TOKEN}"))
                        .header("Content-Type", "application/json")
                        .send(body.as_str())
                        .map_err(|e| e.to_string())?;
                    match reply.status().as_u16() {
                        200 => break,
                        // Refused at the bound (block): try again shortly.
                        503 => thread::sleep(Duration::from_millis(5)),
                        s => return Err(format!("ingest {key}: HTTP {s}")),
                    }
                }
            }
        }));
    }
    for c in clients {
        c.join().map_err(|_| "client panicked")??;
    }
    let Some(sink) = sink else {
        let took = started.elapsed();
        daemon.stop();
        return Ok(took);
    };
    let status_agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let want = records.len() as u64;
    wait("the daemon's rows", || {
        status_agent
            .get(format!("{base}/api/ledger"))
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            // Rows the database confirmed, from the backlog or from `queue: disk`.
            .and_then(|v| v["sinks"][&sink]["delivered"].as_u64())
            .is_some_and(|n| n >= want)
    })?;
    let took = started.elapsed();
    daemon.stop();
    Ok(took)
}

struct Daemon {
    child: Child,
    base: String,
}

impl Daemon {
    fn start(config: &Path, dir: &Path) -> BoxResult<Daemon> {
        let mut child = Command::new(daemon_binary()?)
            .args(["run", "--config"])
            .arg(config)
            .current_dir(dir)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let base = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(rest) = line.strip_prefix("opex-connector listening on ") {
                        break rest.trim_end_matches('/').to_string();
                    }
                }
                _ => {
                    let _ = child.kill();
                    return Err("the daemon ended before listening".into());
                }
            }
        };
        // Keep draining stdout so the daemon never blocks on it.
        thread::spawn(move || for _ in lines {});
        Ok(Daemon { child, base })
    }

    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS.mmm+00` (what Postgres reads for timestamptz).
fn iso_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}+00",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}
