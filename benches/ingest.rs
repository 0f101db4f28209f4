//! Ingest benchmark: how many records per second the daemon acknowledges,
//! compared with what the disk allows.
//!
//! Two measurements on the same disk:
//!
//! 1. **Raw LMDB group commit.** heed 0.23 directly, default flags (every
//!    commit syncs), one database with big-endian `u64` keys; each write
//!    transaction appends 64 records of 1 KB with `PutFlags::APPEND` and
//!    commits. This is the ceiling for a queue that answers a caller only
//!    after its commit.
//! 2. **The release daemon.** `opex-connector run` with a temporary config
//!    (push queue on, `evict_oldest`, 1024 MB quota, no uplink, one ingest
//!    source), loaded by two clients one after the other, each for the same
//!    time against the same daemon:
//!    - the Rust client: 64 threads, each on ONE keep-alive TCP connection,
//!      writing raw HTTP/1.1 `POST /api/ingest/bench/<n>` requests with 1 KB
//!      JSON bodies and reading every response;
//!    - `wrk -t1 -c64` with a Lua script posting the same 1 KB body: one
//!      epoll thread, so the load costs far less CPU than the daemon it
//!      measures (on a 2-core box the Rust client's 64 threads compete with
//!      the daemon for the same cores). Skipped, and said so, when `wrk` is
//!      not installed (`scripts/bench.sh ingest` installs it).
//!
//!    - the batch client: 8 threads, each on one keep-alive connection,
//!      posting NDJSON batches of 100 records of 1 KB to
//!      `POST /api/ingest/bench` (issue #39); a `200` acknowledges its
//!      100 records, and its latency is the batch's answer.
//!
//!    A `200` is an acknowledged record (every record of a batch).
//!
//! Printed for each client: acked records/s, the ratio acked/raw (target at
//! least 0.5; 0.8 for batches), p50/p99 ack latency, the daemon's CPU time per
//! acked record (user and system, from `/proc/<pid>/stat`, target at most 8 us,
//! 6 us for batches; and the
//! kernel's part of it, the system time) and the
//! mean records per commit of its push queue (from `/metrics`), with its
//! writer's time per commit: the cycle (one commit every so many us), the
//! sync in it and the time a group was held open for callers still arriving;
//! and the daemon's RSS at idle and under load.
//!
//! Beside them, the floor of the daemon's CPU per record on this box, in the
//! same run: the raw LMDB writer's CPU per record (this process's, groups of
//! 64), and, when wrk runs, a bare HTTP server of the same hyper and tokio in
//! this process (two worker threads; it reads each body and answers 200,
//! nothing else) under the same wrk load: its CPU per request.
//!
//! And the ceiling of the ratio on this box, in the same run: the same bare
//! server committing each body to an LMDB database of its own (the raw run's
//! flags) and answering after the commit, with nothing else between the HTTP
//! stack and the disk. Three times under the same wrk load: its groups formed
//! as the daemon's queue writer forms them (`store::writer::Linger`); without
//! holding a group open (each commit takes what waits); and on one thread that
//! reads, commits and answers itself. For each: acked/s, the ratio to raw
//! LMDB, CPU per record, records per commit and the time per commit; then the
//! daemon's rate as a share of the best of the three.
//!
//! Beside each of these measurements, the share of the machine's CPU time that
//! the hypervisor gave to other guests meanwhile (`steal` in `/proc/stat`). On
//! a shared virtual machine the disk's syncs and the wake-ups after them wait
//! for the host too: a run with a high steal share measured its neighbours as
//! much as the code, and two runs compare only at a similar share.
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it makes a short
//! smoke run instead: 0.2 s of raw LMDB, 1 s of 4 connections from each
//! client (wrk only when installed) against the test-profile daemon, and
//! fails unless every request got a `200`.
//!
//! Environment:
//! - `BENCH_SECS` (default 10): duration of each measurement.
//! - `BENCH_CONNS` (default 64): client connections (both clients).
//! - `BENCH_WRK`: the `wrk` binary (default: `wrk` on `PATH`).
//! - `OPEX_CONNECTOR_BIN`: the daemon binary (default: `opex-connector` in
//!   the profile folder this bench was built into, so `CARGO_TARGET_DIR` is
//!   honoured).
//! - `BENCH_DIR`: where the temporary folders go (default: cargo's
//!   `CARGO_TARGET_TMPDIR` under the target dir, else `$TMPDIR`).
//!
//! Run it with `scripts/bench.sh ingest`, which builds the daemon first.

mod support;
use std::error::Error;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use heed::byteorder::BigEndian;
use heed::types::{Bytes, U64};
use heed::{CommitOrAbort, Database, Env, EnvOpenOptions, PutFlags};
use opex_connector::store::writer::{next_group, Linger, MAX_LINGER};
use support::{cpu_secs, daemon_binary, proc_status_kib, system_cpu_secs, HostCpu};

type BoxResult<T> = Result<T, Box<dyn Error>>;

/// Records per raw write transaction: the group the daemon's writer is
/// expected to form when 64 callers wait on it.
const RECORDS_PER_TXN: u64 = 64;
/// Size of one record value and of one ingest request body.
const RECORD_BYTES: usize = 1024;
/// Map size of the raw environment. Sparse on disk; large enough that a fast
/// disk does not hit `MDB_MAP_FULL` within a run (if it does, the run stops
/// early and says so).
const RAW_MAP_BYTES: usize = 8 << 30;
/// The raw runs' database: sequence number → record.
type RawDb = Database<'static, U64<BigEndian>, Bytes>;
/// Ingest source name and token written into the daemon's config.
const SOURCE: &str = "bench";
const TOKEN: &str = "bench-token-0123";
/// How long the daemon may take to print its listening line, and to stop.
const START_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Per-request socket timeout: a stuck request counts as an error, it does
/// not hang the benchmark.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

fn main() {
    if let Err(error) = run() {
        eprintln!("bench ingest: {error}");
        std::process::exit(1);
    }
}

/// What one run does: the full benchmark under `cargo bench`, a short smoke
/// run under `cargo test --all-targets` (which runs `harness = false`
/// benches without `--bench`), so the bench code cannot rot unnoticed.
struct Plan {
    bench: bool,
    raw: Duration,
    load: Duration,
    conns: usize,
    settle: Duration,
}

impl Plan {
    fn from_env() -> BoxResult<Plan> {
        if !std::env::args().any(|arg| arg == "--bench") {
            return Ok(Plan {
                bench: false,
                raw: Duration::from_millis(200),
                load: Duration::from_secs(1),
                conns: 4,
                settle: Duration::from_millis(200),
            });
        }
        let secs = Duration::from_secs(env_u64("BENCH_SECS", 10)?.max(1));
        Ok(Plan {
            bench: true,
            raw: secs,
            load: secs,
            conns: env_u64("BENCH_CONNS", 64)?.clamp(1, 1024) as usize,
            settle: Duration::from_secs(1),
        })
    }
}

fn run() -> BoxResult<()> {
    let plan = Plan::from_env()?;
    if !plan.bench {
        println!("ingest bench: smoke run (no --bench); `scripts/bench.sh ingest` gives figures");
    }

    let base = bench_base_dir();
    fs::create_dir_all(&base)?;
    let work = tempfile::Builder::new()
        .prefix("opex-bench-ingest-")
        .tempdir_in(&base)?;
    println!(
        "bench dir: {} (raw LMDB env and daemon data dir)",
        work.path().display()
    );

    println!(
        "raw LMDB: {RECORDS_PER_TXN} x {RECORD_BYTES} B per commit for {:.1} s ...",
        plan.raw.as_secs_f64()
    );
    let raw = raw_lmdb(&work.path().join("raw"), plan.raw)?;
    println!(
        "raw LMDB: {:.0} records/s ({:.0} commits/s)",
        raw.rate, raw.commits_per_sec
    );

    let bin = daemon_binary()?;
    println!(
        "daemon: {} ({} connections for {:.1} s) ...",
        bin.display(),
        plan.conns,
        plan.load.as_secs_f64()
    );
    let wrk = wrk_binary();
    let load = daemon_load(&bin, work.path(), &plan, wrk.as_deref())?;
    let mut bares = Vec::new();
    for kind in [Bare::Answer, Bare::Linger, Bare::NoHold, Bare::OneThread] {
        let Some(wrk) = &wrk else { break };
        println!(
            "{} server (same hyper and tokio, in this process): wrk, {} connections for {:.1} s ...",
            kind.label(),
            plan.conns,
            plan.load.as_secs_f64()
        );
        bares.push((kind, bare_http(wrk, work.path(), &plan, kind)?));
    }
    let bare = bares
        .iter()
        .find(|(kind, _)| *kind == Bare::Answer)
        .map(|(_, b)| b);

    let mut rows = vec![
        ("raw LMDB records/s".to_string(), format!("{:.0}", raw.rate)),
        (
            "raw LMDB commits/s".to_string(),
            format!("{:.0}", raw.commits_per_sec),
        ),
        (
            "raw LMDB CPU us/record".to_string(),
            tenths(raw.cpu_us_per_record),
        ),
        (
            "raw LMDB: host CPU stolen (%)".to_string(),
            tenths(raw.steal_percent),
        ),
    ];
    for (kind, bare) in &bares {
        let name = kind.label();
        rows.extend([
            (
                format!("{name} (wrk): answered/s"),
                format!("{:.0}", bare.rate),
            ),
            (
                format!("{name}: CPU us/request"),
                tenths(bare.cpu_us_per_request),
            ),
            (
                format!("{name}: of it the kernel's"),
                tenths(bare.system_us_per_request),
            ),
        ]);
        if let Some(commits) = &bare.commits {
            let cycle = commits.cycle();
            rows.extend([
                (
                    format!("{name}: ratio acked/raw"),
                    format!("{:.2}", bare.rate / raw.rate.max(1e-9)),
                ),
                (
                    format!("{name}: records per commit"),
                    tenths(bare.records_per_commit()),
                ),
                (
                    format!("{name}: us per commit: cycle"),
                    tenths(cycle.map(|c| c.cycle_us)),
                ),
                (
                    format!("{name}: us per commit: sync"),
                    tenths(cycle.map(|c| c.sync_us)),
                ),
                (
                    format!("{name}: us per commit: held"),
                    tenths(cycle.map(|c| c.held_us)),
                ),
            ]);
        }
        rows.push((
            format!("{name}: host CPU stolen (%)"),
            tenths(bare.steal_percent),
        ));
    }
    for phase in &load.phases {
        let name = phase.client;
        let ratio = phase.ratio(raw.rate);
        let cycle = phase.commit_cycle();
        rows.extend([
            (
                format!("{name}: acked records (200)"),
                phase.acked.to_string(),
            ),
            (
                format!("{name}: acked records/s"),
                format!("{:.0}", phase.rate()),
            ),
            (
                format!("{name}: ratio acked/raw (>= {:.2})", phase.targets.ratio),
                format!("{ratio:.2}"),
            ),
            (
                format!("{name}: daemon CPU us/record (<= {})", phase.targets.cpu_us),
                tenths(phase.cpu_us_per_record()),
            ),
            (
                format!("{name}: of it the kernel's (us)"),
                tenths(phase.system_us_per_record()),
            ),
            (
                format!("{name}: records per commit"),
                tenths(phase.records_per_commit()),
            ),
            (
                format!("{name}: us per commit: cycle"),
                tenths(cycle.map(|c| c.cycle_us)),
            ),
            (
                format!("{name}: us per commit: sync"),
                tenths(cycle.map(|c| c.sync_us)),
            ),
            (
                format!("{name}: us per commit: held open"),
                tenths(cycle.map(|c| c.held_us)),
            ),
            (
                format!("{name}: ack latency p50 (ms)"),
                format!("{:.2}", phase.p50_ms),
            ),
            (
                format!("{name}: ack latency p99 (ms)"),
                format!("{:.2}", phase.p99_ms),
            ),
            (
                format!("{name}: ack latency max (ms)"),
                format!("{:.2}", phase.max_ms),
            ),
            (
                format!("{name}: non-200 responses"),
                phase.non_200.to_string(),
            ),
            (format!("{name}: I/O errors"), phase.io_errors.to_string()),
            (
                format!("{name}: host CPU stolen (%)"),
                tenths(HostCpu::steal_percent(phase.before.host, phase.after.host)),
            ),
        ]);
    }
    rows.extend([
        (
            "RSS idle: total/anon (MiB)".to_string(),
            mib_pair(load.rss_idle),
        ),
        (
            "RSS load max: total/anon (MiB)".to_string(),
            mib_pair(load.rss_load),
        ),
        ("queue rows after run".to_string(), load.queue_rows.clone()),
        ("daemon exit after SIGTERM".to_string(), load.exit.clone()),
    ]);
    println!();
    println!("| {:<38} | {:>16} |", "measure", "value");
    println!("|{}|{}|", "-".repeat(40), "-".repeat(18));
    for (name, value) in &rows {
        println!("| {name:<38} | {value:>16} |");
    }
    println!();
    println!("(RSS total includes LMDB's mapped file pages; anon is heap and stacks)");
    if raw.map_full {
        println!("note: the raw run hit MDB_MAP_FULL and stopped early; its rate is over the time it ran");
    }
    if wrk.is_none() {
        println!("note: the wrk client did not run: `wrk` not found (set BENCH_WRK, or `apt-get install wrk`)");
    }
    if plan.bench {
        for phase in &load.phases {
            let ratio = phase.ratio(raw.rate);
            let target = phase.targets;
            println!(
                "verdict ({}): ratio {ratio:.2} {} the {:.2} target",
                phase.client,
                if ratio >= target.ratio {
                    "meets"
                } else {
                    "is BELOW"
                },
                target.ratio
            );
            if let Some(us) = phase.cpu_us_per_record() {
                println!(
                    "verdict ({}): daemon CPU {us:.1} us/record {} the {} us target (the raw writer's own: {} us/record)",
                    phase.client,
                    if us <= target.cpu_us { "meets" } else { "is ABOVE" },
                    target.cpu_us,
                    tenths(raw.cpu_us_per_record)
                );
            }
        }
        let floor = bare.and_then(|b| Some(b.cpu_us_per_request? + raw.cpu_us_per_record?));
        let daemon = load.phases.iter().find(|p| p.client == "wrk");
        let best = bares
            .iter()
            .filter(|(_, b)| b.commits.is_some())
            .max_by(|a, b| a.1.rate.total_cmp(&b.1.rate));
        if let (Some((kind, best)), Some(daemon)) = (best, daemon) {
            let ceiling = best.rate / raw.rate.max(1e-9);
            println!(
                "ceiling (wrk): the same hyper and LMDB with nothing between them ({}) reach a ratio of {ceiling:.2}; the daemon's {:.2} is {:.2} of it",
                kind.label(),
                daemon.ratio(raw.rate),
                daemon.rate() / best.rate.max(1e-9)
            );
        }
        if let Some(c) = daemon.and_then(Phase::commit_cycle) {
            println!(
                "commit cycle (wrk): a commit every {:.0} us: sync {:.0}, held open for callers {:.0}, the rest {:.0} (answers out, the first next record in, the writer's own work); the disk syncs {:.0}% of the time",
                c.cycle_us,
                c.sync_us,
                c.held_us,
                c.cycle_us - c.sync_us - c.held_us,
                100.0 * c.sync_us / c.cycle_us
            );
        }
        if let (Some(floor), Some(us)) = (floor, daemon.and_then(Phase::cpu_us_per_record)) {
            println!(
                "floor (wrk): bare HTTP + raw LMDB = {floor:.1} us/record; the daemon {us:.1} us: {:.2}x the floor, {:.1} us its own",
                us / floor,
                us - floor
            );
        }
    }
    if let Some((kind, bare)) = bares.iter().find(|(_, b)| !plan.bench && b.non_200 > 0) {
        return Err(format!(
            "smoke run: the {} server answered {} non-200",
            kind.label(),
            bare.non_200
        )
        .into());
    }
    for phase in &load.phases {
        if phase.acked == 0 {
            return Err(format!(
                "the daemon acknowledged no record from the {} client; daemon log:\n{}",
                phase.client,
                fs::read_to_string(work.path().join("daemon.log")).unwrap_or_default()
            )
            .into());
        }
        if !plan.bench && (phase.non_200 > 0 || phase.io_errors > 0) {
            return Err(format!(
                "smoke run ({}): {} non-200 responses, {} I/O errors; daemon log:\n{}",
                phase.client,
                phase.non_200,
                phase.io_errors,
                fs::read_to_string(work.path().join("daemon.log")).unwrap_or_default()
            )
            .into());
        }
    }
    if !plan.bench {
        println!("ingest bench: smoke run ok");
    }
    Ok(())
}

fn mib_pair(rss: Rss) -> String {
    format!(
        "{:.1} / {:.1}",
        Rss::mib(rss.total_kib),
        Rss::mib(rss.anon_kib)
    )
}

fn env_u64(name: &str, default: u64) -> BoxResult<u64> {
    match std::env::var(name) {
        Ok(value) => value
            .trim()
            .parse()
            .map_err(|e| format!("{name}={value:?}: {e}").into()),
        Err(_) => Ok(default),
    }
}

/// The folder under which the temporary folders are made: the same disk as
/// the target dir (where a developer's daemon data usually lives too).
fn bench_base_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("BENCH_DIR") {
        return PathBuf::from(dir);
    }
    match option_env!("CARGO_TARGET_TMPDIR") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::temp_dir(),
    }
}

struct RawResult {
    rate: f64,
    commits_per_sec: f64,
    /// This process's CPU time (user and system) per record: the writer's share of the
    /// daemon's, for groups of 64.
    cpu_us_per_record: Option<f64>,
    /// The machine's CPU time stolen by the hypervisor meanwhile, in percent.
    steal_percent: Option<f64>,
    map_full: bool,
}

/// A fresh LMDB environment in `dir` (created here) with one database of big-endian `u64`
/// keys, default flags: every commit syncs.
fn raw_env(dir: &Path) -> BoxResult<(Env, RawDb)> {
    fs::create_dir_all(dir)?;
    // SAFETY: `open` is unsafe because LMDB memory-maps the files and
    // modifying them behind its back is undefined behaviour. Here `dir` is a
    // fresh temporary folder created by this process just above; no other
    // process or environment handle in this process opens it; it is on a
    // local filesystem (not NFS); and no unsafe flag (NO_SYNC, NO_LOCK, ...)
    // is set. The environment is dropped before the folder is removed.
    let env = unsafe {
        EnvOpenOptions::new()
            .map_size(RAW_MAP_BYTES)
            .max_dbs(1)
            .open(dir)?
    };
    let wtxn = env.write_txn()?;
    let db: RawDb = env
        .create_databases_and_commit(wtxn, |opener, wtxn| {
            let db = opener.create_database::<U64<BigEndian>, Bytes>(wtxn, Some("queue"))?;
            heed::Result::Ok(CommitOrAbort::<_, ()>::Commit(db))
        })?
        .commit()
        .ok_or("creating the database was aborted")?;
    Ok((env, db))
}

/// Appends groups of 64 records of 1 KB, one synced commit per group, for
/// `duration`.
fn raw_lmdb(dir: &Path, duration: Duration) -> BoxResult<RawResult> {
    let (env, db) = raw_env(dir)?;
    let mut value = vec![b'x'; RECORD_BYTES];
    let mut seq: u64 = 0;
    let mut commits: u64 = 0;
    let mut map_full = false;
    let cpu_before = cpu_secs(std::process::id());
    let host_before = HostCpu::read();
    let start = Instant::now();
    while start.elapsed() < duration {
        let mut wtxn = env.write_txn()?;
        let mut outcome = Ok(());
        for _ in 0..RECORDS_PER_TXN {
            value[..8].copy_from_slice(&seq.to_be_bytes());
            outcome = db.put_with_flags(&mut wtxn, PutFlags::APPEND, &(seq + 1), &value);
            if outcome.is_err() {
                break;
            }
            seq += 1;
        }
        match outcome.and_then(|()| wtxn.commit()) {
            Ok(()) => commits += 1,
            Err(heed::Error::Mdb(heed::MdbError::MapFull)) => {
                map_full = true;
                break;
            }
            Err(error) => return Err(error.into()),
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu_after = cpu_secs(std::process::id());
    let steal_percent = HostCpu::steal_percent(host_before, HostCpu::read());
    drop(env);
    let records = commits * RECORDS_PER_TXN;
    Ok(RawResult {
        rate: records as f64 / elapsed,
        commits_per_sec: commits as f64 / elapsed,
        cpu_us_per_record: us_each(cpu_before, cpu_after, records),
        steal_percent,
        map_full,
    })
}

/// What one client's load got from the daemon.
struct Phase {
    /// `rust`, `wrk` or `batch`.
    client: &'static str,
    /// Its targets: the ratio acked/raw at least, the daemon's CPU per record at most (us).
    targets: Targets,
    acked: u64,
    elapsed: Duration,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    non_200: u64,
    io_errors: u64,
    /// The daemon's counters before and after the load.
    before: Counters,
    after: Counters,
}

impl Phase {
    fn rate(&self) -> f64 {
        self.acked as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn ratio(&self, raw_rate: f64) -> f64 {
        if raw_rate > 0.0 {
            self.rate() / raw_rate
        } else {
            0.0
        }
    }

    /// The daemon's CPU time (user + system) over the load, per acked record.
    fn cpu_us_per_record(&self) -> Option<f64> {
        us_each(self.before.cpu_secs, self.after.cpu_secs, self.acked)
    }

    /// The kernel's part of [`Phase::cpu_us_per_record`].
    fn system_us_per_record(&self) -> Option<f64> {
        us_each(self.before.system_secs, self.after.system_secs, self.acked)
    }

    /// The push queue's counters before and after the load, and its commits between them
    /// (`None` when there were none).
    fn commits(&self) -> Option<(QueueCounts, QueueCounts, u64)> {
        let (before, after) = (self.before.queue?, self.after.queue?);
        let commits = after.commits.checked_sub(before.commits)?;
        (commits > 0).then_some((before, after, commits))
    }

    /// Records per push-queue commit over the load.
    fn records_per_commit(&self) -> Option<f64> {
        let (before, after, commits) = self.commits()?;
        let commands = after.commands.checked_sub(before.commands)?;
        Some(commands as f64 / commits as f64)
    }

    /// The push queue's writer over the load, per commit.
    fn commit_cycle(&self) -> Option<CommitCycle> {
        let (before, after, commits) = self.commits()?;
        let each = |secs: f64| secs * 1e6 / commits as f64;
        Some(CommitCycle {
            cycle_us: each(self.elapsed.as_secs_f64()),
            sync_us: each(after.sync_secs - before.sync_secs),
            held_us: each(after.held_secs - before.held_secs),
        })
    }
}

/// What a phase must reach.
#[derive(Clone, Copy)]
struct Targets {
    ratio: f64,
    cpu_us: f64,
}

/// One record a request.
const ONE_RECORD: Targets = Targets {
    ratio: 0.5,
    cpu_us: 8.0,
};
/// Batches of [`BATCH_RECORDS`] (issue #39).
const BATCHES: Targets = Targets {
    ratio: 0.8,
    cpu_us: 6.0,
};
/// Records in one batch request of the batch phase.
const BATCH_RECORDS: usize = 100;
/// Keep-alive clients of the batch phase.
const BATCH_CONNS: usize = 8;

/// The daemon's CPU time so far (seconds) and its push queue's writer counters so far.
#[derive(Clone, Copy, Default)]
struct Counters {
    cpu_secs: Option<f64>,
    /// The kernel's part of `cpu_secs`.
    system_secs: Option<f64>,
    queue: Option<QueueCounts>,
    host: Option<HostCpu>,
}

/// One commit every `cycle_us`, of which `sync_us` syncing and `held_us` holding the group
/// open for callers.
#[derive(Clone, Copy)]
struct CommitCycle {
    cycle_us: f64,
    sync_us: f64,
    held_us: f64,
}

/// The push queue writer's counters from `GET /metrics`.
#[derive(Clone, Copy, Default)]
struct QueueCounts {
    commits: u64,
    commands: u64,
    /// Time its commits spent syncing.
    sync_secs: f64,
    /// Time it held groups open for callers.
    held_secs: f64,
}

impl Counters {
    fn read(daemon: &Daemon) -> Counters {
        Counters {
            cpu_secs: cpu_secs(daemon.child.id()),
            system_secs: system_cpu_secs(daemon.child.id()),
            queue: queue_counts(&daemon.addr),
            host: HostCpu::read(),
        }
    }
}

struct LoadResult {
    phases: Vec<Phase>,
    rss_idle: Rss,
    rss_load: Rss,
    queue_rows: String,
    exit: String,
}

/// The daemon process; SIGTERMed (then killed if it hangs) when dropped.
struct Daemon {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Daemon {
    fn start(bin: &Path, work: &Path, conns: usize) -> BoxResult<Daemon> {
        let data_dir = work.join("daemon-data");
        let config = work.join("bench.yaml");
        let log = work.join("daemon.log");
        let data_dir_yaml = serde_json::to_string(&data_dir.to_string_lossy())?;
        // Room for every client plus the status request.
        let max_connections = (conns + 16).max(256);
        fs::write(
            &config,
            format!(
                "connector:\n  name: bench\n  data_dir: {data_dir_yaml}\n  http:\n    listen: 127.0.0.1:0\n    max_body_kb: 64\n    max_connections: {max_connections}\n  push_queue:\n    enabled: true\n    max_quota_mb: 1024\n    on_full: evict_oldest\ningest:\n  sources:\n    - name: {SOURCE}\n      token: {TOKEN}\n"
            ),
        )?;
        let mut child = Command::new(bin)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(fs::File::create(&log)?))
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or("daemon stdout was not captured")?;

        // A reader thread forwards the address and keeps draining stdout so
        // the daemon never blocks on a full pipe.
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if !sent {
                    if let Some(rest) = line
                        .trim()
                        .strip_prefix("opex-connector listening on http://")
                    {
                        sent = tx.send(rest.trim_end_matches('/').to_string()).is_ok();
                    }
                }
            }
        });
        let mut daemon = Daemon {
            child,
            addr: String::new(),
            log,
        };
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(addr) => daemon.addr = addr,
            Err(_) => {
                let log = fs::read_to_string(&daemon.log).unwrap_or_default();
                return Err(format!("daemon printed no listening line; its log:\n{log}").into());
            }
        }
        Ok(daemon)
    }

    fn rss(&self) -> Option<Rss> {
        Rss::read(self.child.id())
    }

    /// SIGTERM, then wait; returns how it ended.
    fn stop(&mut self) -> String {
        let pid = self.child.id().to_string();
        let began = Instant::now();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !sent {
            let _ = self.child.kill();
        }
        while began.elapsed() < STOP_TIMEOUT {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    return match status.code() {
                        Some(code) => format!("{code} in {:.1}s", began.elapsed().as_secs_f64()),
                        None => "signal".to_string(),
                    }
                }
                Ok(None) => thread::sleep(Duration::from_millis(20)),
                Err(_) => break,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        "killed".to_string()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// Resident memory of a process in KiB, from `/proc/PID/status`: `VmRSS`
/// (all of it) and `RssAnon` (heap and stacks). The difference is mostly
/// LMDB's memory map: file pages the kernel may drop at any time.
#[derive(Clone, Copy, Default)]
struct Rss {
    total_kib: u64,
    anon_kib: u64,
}

impl Rss {
    fn read(pid: u32) -> Option<Rss> {
        Some(Rss {
            total_kib: proc_status_kib(pid, "VmRSS:")?,
            anon_kib: proc_status_kib(pid, "RssAnon:").unwrap_or(0),
        })
    }

    fn max(self, other: Rss) -> Rss {
        Rss {
            total_kib: self.total_kib.max(other.total_kib),
            anon_kib: self.anon_kib.max(other.anon_kib),
        }
    }

    fn mib(kib: u64) -> f64 {
        kib as f64 / 1024.0
    }
}

fn daemon_load(bin: &Path, work: &Path, plan: &Plan, wrk: Option<&Path>) -> BoxResult<LoadResult> {
    let mut daemon = Daemon::start(bin, work, plan.conns)?;
    println!(
        "daemon listening on {} (log: {})",
        daemon.addr,
        daemon.log.display()
    );

    // Let startup settle (runtime threads, LMDB map) before the idle sample.
    thread::sleep(plan.settle);
    let rss_idle = daemon.rss().unwrap_or_default();

    // RSS sampler: the maximum, every 100 ms while the loads run.
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = Arc::clone(&stop_sampling);
        let pid = daemon.child.id();
        thread::spawn(move || {
            let mut max = rss_idle;
            while !stop.load(Ordering::Relaxed) {
                if let Some(rss) = Rss::read(pid) {
                    max = max.max(rss);
                }
                thread::sleep(Duration::from_millis(100));
            }
            max
        })
    };

    let mut phases = vec![rust_load(&daemon, plan)?];
    if let Some(wrk) = wrk {
        thread::sleep(plan.settle);
        println!(
            "wrk: {} (1 thread, {} connections for {:.1} s) ...",
            wrk.display(),
            plan.conns,
            plan.load.as_secs_f64()
        );
        phases.push(wrk_load(wrk, &daemon, work, plan)?);
    }
    thread::sleep(plan.settle);
    println!(
        "batch: {} connections, {BATCH_RECORDS} records of {RECORD_BYTES} B a request, for {:.1} s ...",
        if plan.bench { BATCH_CONNS } else { 2 },
        plan.load.as_secs_f64()
    );
    phases.push(batch_load(&daemon, plan)?);
    stop_sampling.store(true, Ordering::Relaxed);
    let rss_load = sampler.join().unwrap_or(rss_idle);
    let rss_load = rss_load.max(daemon.rss().unwrap_or_default());

    let queue_rows = queue_rows(&daemon.addr).unwrap_or_else(|| "n/a".to_string());
    let exit = daemon.stop();
    Ok(LoadResult {
        phases,
        rss_idle,
        rss_load,
        queue_rows,
        exit,
    })
}

/// The Rust client: `plan.conns` threads, one keep-alive connection each, one record a
/// request.
fn rust_load(daemon: &Daemon, plan: &Plan) -> BoxResult<Phase> {
    client_load(daemon, plan.load, plan.conns, 1)
}

/// The batch client: [`BATCH_CONNS`] threads (2 in the smoke run), one keep-alive connection
/// each, posting NDJSON batches of [`BATCH_RECORDS`] records of 1 KB to
/// `POST /api/ingest/bench`; a `200` acknowledges every record of its batch.
fn batch_load(daemon: &Daemon, plan: &Plan) -> BoxResult<Phase> {
    let conns = if plan.bench { BATCH_CONNS } else { 2 };
    client_load(daemon, plan.load, conns, BATCH_RECORDS)
}

/// `conns` client threads for `load`, each posting `per_request` records a request (1: the
/// one-record API, else batches); latencies are each request's.
fn client_load(
    daemon: &Daemon,
    load: Duration,
    conns: usize,
    per_request: usize,
) -> BoxResult<Phase> {
    let before = Counters::read(daemon);
    let start = Instant::now();
    let deadline = start + load;
    let clients: Vec<_> = (0..conns)
        .map(|index| {
            let addr = daemon.addr.clone();
            thread::spawn(move || client(index, &addr, deadline, per_request))
        })
        .collect();
    let mut latencies_us: Vec<u32> = Vec::new();
    let (mut acked, mut non_200, mut io_errors) = (0, 0, 0);
    for handle in clients {
        let stats = handle.join().map_err(|_| "a client thread panicked")?;
        acked += stats.acked;
        non_200 += stats.non_200;
        io_errors += stats.io_errors;
        latencies_us.extend(stats.latencies_us);
    }
    let elapsed = start.elapsed();
    let after = Counters::read(daemon);
    latencies_us.sort_unstable();
    let (client, targets) = if per_request == 1 {
        ("rust", ONE_RECORD)
    } else {
        ("batch", BATCHES)
    };
    Ok(Phase {
        client,
        targets,
        acked,
        elapsed,
        p50_ms: percentile_ms(&latencies_us, 0.50),
        p99_ms: percentile_ms(&latencies_us, 0.99),
        max_ms: latencies_us
            .last()
            .map_or(0.0, |&us| f64::from(us) / 1000.0),
        non_200,
        io_errors,
        before,
        after,
    })
}

/// `BENCH_WRK`, else `wrk` when it is on `PATH`.
fn wrk_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("BENCH_WRK") {
        return Some(PathBuf::from(bin));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("wrk"))
        .find(|bin| bin.is_file())
}

/// The wrk script: every request posts the same 1 KB body (its record gets a
/// fresh id in the daemon all the same); `done` prints one line the bench
/// parses. wrk counts a non-2xx answer in `errors.status`.
fn wrk_script() -> String {
    let body = ingest_body(0, 0);
    format!(
        r#"wrk.method = "POST"
wrk.path = "/api/ingest/{SOURCE}/wrk"
wrk.headers["Authorization"] = "Bearer {TOKEN}"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{body}'

function done(summary, latency, requests)
  io.write(string.format(
    "wrk-result requests=%d duration_us=%d status=%d connect=%d read=%d write=%d timeout=%d p50_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
"#
    )
}

/// `wrk -t1 -c<conns>` with [`wrk_script`] for the load's duration, against the daemon.
fn wrk_load(wrk: &Path, daemon: &Daemon, work: &Path, plan: &Plan) -> BoxResult<Phase> {
    let before = Counters::read(daemon);
    let run = run_wrk(wrk, &daemon.addr, work, plan)?;
    let after = Counters::read(daemon);
    Ok(Phase {
        client: "wrk",
        targets: ONE_RECORD,
        acked: run.requests.saturating_sub(run.non_200),
        elapsed: run.elapsed,
        p50_ms: run.p50_ms,
        p99_ms: run.p99_ms,
        max_ms: run.max_ms,
        non_200: run.non_200,
        io_errors: run.io_errors,
        before,
        after,
    })
}

/// What wrk printed of one run.
struct WrkRun {
    requests: u64,
    non_200: u64,
    io_errors: u64,
    elapsed: Duration,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

/// `wrk -t1 -c<conns>` with [`wrk_script`] for the load's duration, against `addr`.
fn run_wrk(wrk: &Path, addr: &str, work: &Path, plan: &Plan) -> BoxResult<WrkRun> {
    let script = work.join("ingest.lua");
    fs::write(&script, wrk_script())?;
    let output = Command::new(wrk)
        .arg("-t1")
        .arg(format!("-c{}", plan.conns))
        .arg(format!("-d{}s", plan.load.as_secs().max(1)))
        .arg(format!("--timeout={}s", IO_TIMEOUT.as_secs()))
        .arg("-s")
        .arg(&script)
        .arg(format!("http://{addr}/"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", wrk.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("wrk-result "))
        .ok_or_else(|| {
            format!(
                "wrk printed no result ({}):\n{stdout}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
    let field = |name: &str| -> BoxResult<u64> {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("wrk result without {name}: {line}").into())
    };
    let ms = |us: u64| us as f64 / 1000.0;
    Ok(WrkRun {
        requests: field("requests")?,
        non_200: field("status")?,
        io_errors: field("connect")? + field("read")? + field("write")? + field("timeout")?,
        elapsed: Duration::from_micros(field("duration_us")?),
        p50_ms: ms(field("p50_us")?),
        p99_ms: ms(field("p99_us")?),
        max_ms: ms(field("max_us")?),
    })
}

/// What the bare server in this process does with a request's body before it answers.
#[derive(Clone, Copy, PartialEq)]
enum Bare {
    /// Answers at once: the HTTP stack alone, what a request costs before the connector does
    /// anything with it.
    Answer,
    /// Appends the body to an LMDB database of its own (the raw run's: default flags, every
    /// commit synced) and answers after the commit, its groups formed as the daemon's queue
    /// writer forms them (`store::writer::Linger`, held open for the callers coming back).
    Linger,
    /// The same, each group being what waits when the writer is free, held open for nobody.
    NoHold,
    /// The server is one thread: the runtime's only thread reads the requests, commits each
    /// group itself (blocked for the sync, when every caller waits anyway) and answers; no
    /// body or answer crosses a thread. Its groups wait for the last group's callers, at most
    /// one sync in all, yielding to the connections meanwhile: a thread that slept, as
    /// `Linger` does, could not read them.
    OneThread,
}

impl Bare {
    fn label(self) -> &'static str {
        match self {
            Bare::Answer => "bare HTTP",
            Bare::Linger => "bare+LMDB linger",
            Bare::NoHold => "bare+LMDB no hold",
            Bare::OneThread => "bare+LMDB 1 thread",
        }
    }
}

/// What the bare server got under the wrk load.
struct BareHttp {
    rate: f64,
    cpu_us_per_request: Option<f64>,
    /// The kernel's part of `cpu_us_per_request`.
    system_us_per_request: Option<f64>,
    steal_percent: Option<f64>,
    non_200: u64,
    /// The writer's totals, when it committed the bodies.
    commits: Option<CommitTotals>,
}

impl BareHttp {
    fn records_per_commit(&self) -> Option<f64> {
        let c = self.commits.as_ref().filter(|c| c.commits > 0)?;
        Some(c.records as f64 / c.commits as f64)
    }
}

/// A running bare server.
enum BareServer {
    /// A runtime of two worker threads, and the writer thread when it commits.
    Threads {
        addr: String,
        rt: tokio::runtime::Runtime,
        writer: Option<thread::JoinHandle<CommitTotals>>,
    },
    /// [`Bare::OneThread`]: the thread running the runtime, told to stop by `stop`.
    OneThread {
        addr: String,
        stop: tokio::sync::oneshot::Sender<()>,
        thread: thread::JoinHandle<()>,
        totals: Arc<Mutex<CommitTotals>>,
    },
}

/// The bare writer's commits over its run.
#[derive(Clone, Copy, Default)]
struct CommitTotals {
    commits: u64,
    records: u64,
    elapsed: Duration,
    sync: Duration,
    held: Duration,
}

impl CommitTotals {
    /// Counts a commit of `records` whose sync took `sync`, after its group was held open for
    /// `held`; the writer's first group began at `first`.
    fn committed(&mut self, records: usize, sync: Duration, held: Duration, first: Instant) {
        self.commits += 1;
        self.records += records as u64;
        self.sync += sync;
        self.held += held;
        self.elapsed = first.elapsed();
    }

    fn cycle(&self) -> Option<CommitCycle> {
        (self.commits > 0).then(|| {
            let us = |d: Duration| d.as_secs_f64() * 1e6 / self.commits as f64;
            CommitCycle {
                cycle_us: us(self.elapsed),
                sync_us: us(self.sync),
                held_us: us(self.held),
            }
        })
    }
}

/// A body to commit, and where to say whether it is on disk.
type Append = (bytes::Bytes, tokio::sync::oneshot::Sender<bool>);

/// Most bodies in one of the bare writer's commits (the daemon's queue writer takes as many).
const BARE_MAX_GROUP: usize = 4096;

/// The bare server's LMDB writer: commits groups of bodies (formed as `kind` says) until every
/// sender is gone, answering each body's caller after its commit.
fn bare_writer(env: &Env, db: RawDb, rx: &mpsc::Receiver<Append>, kind: Bare) -> CommitTotals {
    let mut linger = Linger::new();
    let mut seq: u64 = 0;
    let mut totals = CommitTotals::default();
    let mut first: Option<Instant> = None;
    loop {
        let group = match kind {
            Bare::Linger => linger.next_group(rx, BARE_MAX_GROUP),
            _ => next_group(rx, BARE_MAX_GROUP),
        };
        let Some(group) = group else { break };
        let first = *first.get_or_insert_with(Instant::now);
        let stored = match commit_bodies(env, db, &mut seq, &group) {
            Ok(took) => {
                totals.committed(group.len(), took, linger.held(), first);
                if kind == Bare::Linger {
                    linger.committed(rx, group.len(), took, BARE_MAX_GROUP);
                }
                true
            }
            Err(error) => {
                eprintln!("bare writer: commit failed: {error}");
                linger.failed();
                false
            }
        };
        for (_, reply) in group {
            let _ = reply.send(stored);
        }
    }
    totals
}

/// Appends `group`'s bodies after `seq` in one write transaction and commits it; the time the
/// commit (its writes and syncs) took.
fn commit_bodies(env: &Env, db: RawDb, seq: &mut u64, group: &[Append]) -> heed::Result<Duration> {
    let mut wtxn = env.write_txn()?;
    for (body, _) in group {
        *seq += 1;
        db.put_with_flags(&mut wtxn, PutFlags::APPEND, seq, body)?;
    }
    let syncing = Instant::now();
    wtxn.commit()?;
    Ok(syncing.elapsed())
}

/// [`Bare::OneThread`]'s writer, a task on the server's only thread: each group waits (yielding
/// to the connections' tasks) for as many bodies as the last group had, at most the mean sync
/// in all, then is committed right here, blocking the thread, and answered.
async fn inline_writer(
    env: Env,
    db: RawDb,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Append>,
    totals: Arc<Mutex<CommitTotals>>,
) {
    let (mut seq, mut target, mut sync) = (0u64, 0usize, Duration::ZERO);
    let mut first: Option<Instant> = None;
    while let Some(body) = rx.recv().await {
        let first = *first.get_or_insert_with(Instant::now);
        let mut group = vec![body];
        let began = Instant::now();
        loop {
            while let Ok(body) = rx.try_recv() {
                group.push(body);
            }
            if group.len() >= target || began.elapsed() >= sync.min(MAX_LINGER) {
                break;
            }
            tokio::task::yield_now().await;
        }
        let held = began.elapsed();
        let stored = match commit_bodies(&env, db, &mut seq, &group) {
            Ok(took) => {
                sync = if sync.is_zero() {
                    took
                } else {
                    (sync * 3 + took) / 4
                };
                target = group.len();
                totals.lock().unwrap_or_else(|e| e.into_inner()).committed(
                    group.len(),
                    took,
                    held,
                    first,
                );
                true
            }
            Err(error) => {
                eprintln!("bare writer: commit failed: {error}");
                target = 0;
                false
            }
        };
        for (_, reply) in group {
            let _ = reply.send(stored);
        }
    }
}

/// Where the bare server's handlers hand a body to commit: a writer thread's channel, or the
/// channel of a writer task on the same thread.
#[derive(Clone)]
enum Hand {
    Thread(mpsc::SyncSender<Append>),
    Task(tokio::sync::mpsc::UnboundedSender<Append>),
}

impl Hand {
    fn send(&self, body: Append) -> bool {
        match self {
            Hand::Thread(tx) => tx.try_send(body).is_ok(),
            Hand::Task(tx) => tx.send(body).is_ok(),
        }
    }
}

/// The bare server: answers each connection of `listener`, handing bodies to `hand`.
async fn bare_serve(listener: tokio::net::TcpListener, hand: Option<Hand>) {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Incoming;

    const STORED: &str = r#"{"ok":true,"result":"stored","id":"0123456789abcdef000000000000"}"#;

    async fn answer(
        req: hyper::Request<Incoming>,
        hand: Option<Hand>,
    ) -> Result<hyper::Response<Full<bytes::Bytes>>, std::convert::Infallible> {
        let (status, text) = match (req.into_body().collect().await, hand) {
            (Err(_), _) => (hyper::StatusCode::BAD_REQUEST, r#"{"ok":false}"#),
            (Ok(_), None) => (hyper::StatusCode::OK, STORED),
            (Ok(body), Some(hand)) => {
                let (reply, stored) = tokio::sync::oneshot::channel();
                if hand.send((body.to_bytes(), reply)) && stored.await == Ok(true) {
                    (hyper::StatusCode::OK, STORED)
                } else {
                    (hyper::StatusCode::SERVICE_UNAVAILABLE, r#"{"ok":false}"#)
                }
            }
        };
        let mut resp = hyper::Response::new(Full::new(bytes::Bytes::from_static(text.as_bytes())));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        Ok(resp)
    }

    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        let hand = hand.clone();
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let service = hyper::service::service_fn(|req| answer(req, hand.clone()));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

/// A bare HTTP/1.1 server in this process, of the same hyper and tokio as the daemon (two
/// worker threads, `TCP_NODELAY`, a keep-alive connection per client): it reads each body
/// whole, does what `kind` says with it (nothing, or commit it to LMDB), and answers `200`
/// with a JSON body as long as the daemon's answer. Loaded by the same wrk script for the
/// same time. Its CPU per request (this process's, which does nothing else meanwhile) with
/// [`Bare::Answer`] is the part of the daemon's that is the HTTP stack and the kernel's TCP
/// path on this box; its rate with a commit is what the same stack and the same disk give
/// with nothing between them: the ceiling of the daemon's ratio on this box.
fn bare_http(wrk: &Path, work: &Path, plan: &Plan, kind: Bare) -> BoxResult<BareHttp> {
    let db_dir = work.join(format!("bare-{}", kind.label().replace([' ', '+'], "-")));
    let server = match kind {
        Bare::Answer | Bare::Linger | Bare::NoHold => {
            let (hand, writer) = if kind == Bare::Answer {
                (None, None)
            } else {
                let (env, db) = raw_env(&db_dir)?;
                let (tx, rx) = mpsc::sync_channel::<Append>(BARE_MAX_GROUP);
                let thread = thread::Builder::new()
                    .name("bare-writer".into())
                    .spawn(move || bare_writer(&env, db, &rx, kind))?;
                (Some(Hand::Thread(tx)), Some(thread))
            };
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
            let addr = listener.local_addr()?.to_string();
            rt.spawn(bare_serve(listener, hand));
            BareServer::Threads { addr, rt, writer }
        }
        Bare::OneThread => {
            let (env, db) = raw_env(&db_dir)?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
            let addr = listener.local_addr()?.to_string();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let totals = Arc::new(Mutex::new(CommitTotals::default()));
            let kept = Arc::clone(&totals);
            let thread = thread::Builder::new()
                .name("bare-server".into())
                .spawn(move || {
                    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                    rt.block_on(async move {
                        tokio::spawn(inline_writer(env, db, rx, kept));
                        tokio::select! {
                            () = bare_serve(listener, Some(Hand::Task(tx))) => {}
                            _ = stopped => {}
                        }
                    });
                    // The connections' tasks and the writer go with the runtime.
                    drop(rt);
                })?;
            BareServer::OneThread {
                addr,
                stop,
                thread,
                totals,
            }
        }
    };
    let addr = match &server {
        BareServer::Threads { addr, .. } | BareServer::OneThread { addr, .. } => addr.clone(),
    };
    let pid = std::process::id();
    let before = (cpu_secs(pid), system_cpu_secs(pid));
    let host_before = HostCpu::read();
    let run = run_wrk(wrk, &addr, work, plan)?;
    let after = (cpu_secs(pid), system_cpu_secs(pid));
    let steal_percent = HostCpu::steal_percent(host_before, HostCpu::read());
    let commits = match server {
        BareServer::Threads { rt, writer, .. } => {
            // The runtime's tasks hold the last senders: once they are gone, the writer ends.
            rt.shutdown_timeout(Duration::from_secs(1));
            match writer {
                Some(thread) => Some(thread.join().map_err(|_| "the bare writer panicked")?),
                None => None,
            }
        }
        BareServer::OneThread {
            stop,
            thread,
            totals,
            ..
        } => {
            let _ = stop.send(());
            thread.join().map_err(|_| "the bare server panicked")?;
            let totals = totals.lock().unwrap_or_else(|e| e.into_inner());
            Some(*totals)
        }
    };
    let served = run.requests.saturating_sub(run.non_200);
    Ok(BareHttp {
        rate: served as f64 / run.elapsed.as_secs_f64().max(1e-9),
        cpu_us_per_request: us_each(before.0, after.0, served),
        system_us_per_request: us_each(before.1, after.1, served),
        steal_percent,
        non_200: run.non_200,
        commits,
    })
}

/// CPU microseconds for each of `n`, from two readings of CPU seconds.
fn us_each(before: Option<f64>, after: Option<f64>, n: u64) -> Option<f64> {
    let secs = after? - before?;
    (n > 0).then(|| secs * 1e6 / n as f64)
}

/// A figure with one decimal, `n/a` when it could not be measured.
fn tenths(value: Option<f64>) -> String {
    value.map_or("n/a".into(), |v| format!("{v:.1}"))
}

fn percentile_ms(sorted_us: &[u32], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let rank = ((sorted_us.len() as f64 * q).ceil() as usize).clamp(1, sorted_us.len());
    f64::from(sorted_us[rank - 1]) / 1000.0
}

#[derive(Default)]
struct ClientStats {
    acked: u64,
    non_200: u64,
    io_errors: u64,
    latencies_us: Vec<u32>,
}

/// One client: one keep-alive connection, requests of `per_request` records
/// back to back until the deadline. After an I/O error or a `Connection:
/// close` it reconnects.
fn client(index: usize, addr: &str, deadline: Instant, per_request: usize) -> ClientStats {
    let mut stats = ClientStats::default();
    let mut conn: Option<(TcpStream, BufReader<TcpStream>)> = None;
    let mut n: u64 = 0;
    while Instant::now() < deadline {
        if conn.is_none() {
            match connect(addr) {
                Ok(pair) => conn = Some(pair),
                Err(_) => {
                    stats.io_errors += 1;
                    thread::sleep(Duration::from_millis(50));
                    continue;
                }
            }
        }
        let Some((writer, reader)) = conn.as_mut() else {
            continue;
        };
        let key = format!("c{index}-{n}");
        let request = if per_request == 1 {
            ingest_request(addr, &key, index, n)
        } else {
            batch_request(addr, index, n, per_request)
        };
        n += 1;
        let sent_at = Instant::now();
        let outcome = writer
            .write_all(&request)
            .map_err(|e| e.to_string())
            .and_then(|()| read_response(reader));
        let latency = sent_at.elapsed();
        match outcome {
            Ok(response) => {
                if response.status == 200 {
                    stats.acked += per_request as u64;
                    let us = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
                    stats.latencies_us.push(us);
                } else {
                    stats.non_200 += 1;
                }
                if response.close {
                    conn = None;
                }
            }
            Err(_) => {
                stats.io_errors += 1;
                conn = None;
            }
        }
    }
    stats
}

fn connect(addr: &str) -> std::io::Result<(TcpStream, BufReader<TcpStream>)> {
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let reader = BufReader::new(stream.try_clone()?);
    Ok((stream, reader))
}

/// A JSON body of exactly `RECORD_BYTES` (ASCII, no quote to escape in Lua).
fn ingest_body(client: usize, n: u64) -> String {
    let head = format!(r#"{{"client":{client},"n":{n},"temp_c":21.5,"pad":""#);
    let tail = "\"}";
    let pad = RECORD_BYTES.saturating_sub(head.len() + tail.len());
    format!("{head}{}{tail}", "x".repeat(pad))
}

/// A complete HTTP/1.1 request with a JSON body of exactly `RECORD_BYTES`.
fn ingest_request(addr: &str, key: &str, client: usize, n: u64) -> Vec<u8> {
    let body = ingest_body(client, n);
    let mut request = format!(
        "POST /api/ingest/{SOURCE}/{key} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body.as_bytes());
    request
}

/// A complete HTTP/1.1 batch request: `records` NDJSON lines, each a payload
/// of exactly `RECORD_BYTES`.
fn batch_request(addr: &str, client: usize, n: u64, records: usize) -> Vec<u8> {
    let mut body = String::with_capacity(records * (RECORD_BYTES + 40));
    for i in 0..records {
        let payload = ingest_body(client, n * records as u64 + i as u64);
        body.push_str(&format!(
            "{{\"id\":\"c{client}-{n}-{i}\",\"payload\":{payload}}}\n"
        ));
    }
    let mut request = format!(
        "POST /api/ingest/{SOURCE} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body.as_bytes());
    request
}

struct Response {
    status: u16,
    close: bool,
    body: Vec<u8>,
}

/// Reads one response: status line, headers, then a `Content-Length` or
/// chunked body.
fn read_response(reader: &mut BufReader<TcpStream>) -> Result<Response, String> {
    let mut line = String::new();
    read_line(reader, &mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line {line:?}"))?;
    let (mut length, mut chunked, mut close) = (0usize, false, false);
    loop {
        read_line(reader, &mut line)?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            return Err(format!("bad header {header:?}"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value
                .parse()
                .map_err(|_| format!("bad Content-Length {value:?}"))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        }
    }
    let body = if chunked {
        read_chunked(reader)?
    } else {
        let mut body = vec![0; length];
        reader.read_exact(&mut body).map_err(|e| e.to_string())?;
        body
    };
    Ok(Response {
        status,
        close,
        body,
    })
}

fn read_line(reader: &mut BufReader<TcpStream>, line: &mut String) -> Result<(), String> {
    line.clear();
    match reader.read_line(line) {
        Ok(0) => Err("connection closed".to_string()),
        Ok(_) => Ok(()),
        Err(error) => Err(error.to_string()),
    }
}

fn read_chunked(reader: &mut BufReader<TcpStream>) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    let mut line = String::new();
    loop {
        read_line(reader, &mut line)?;
        let size_hex = line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| format!("bad chunk size {size_hex:?}"))?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                read_line(reader, &mut line)?;
                if line.trim_end().is_empty() {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader
            .read_exact(&mut body[start..])
            .map_err(|e| e.to_string())?;
        read_line(reader, &mut line)?;
    }
}

/// The body of `GET path` on the daemon, if it answered 200.
fn get(addr: &str, path: &str) -> Option<Vec<u8>> {
    let (mut writer, mut reader) = connect(addr).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    writer.write_all(request.as_bytes()).ok()?;
    let response = read_response(&mut reader).ok()?;
    (response.status == 200).then_some(response.body)
}

/// `push_queue.rows` and `evicted_total` from `GET /api/status`.
fn queue_rows(addr: &str) -> Option<String> {
    let status: serde_json::Value = serde_json::from_slice(&get(addr, "/api/status")?).ok()?;
    let queue = status.get("push_queue")?;
    let rows = queue.get("rows")?.as_u64()?;
    let evicted = queue
        .get("evicted_total")
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    Some(if evicted > 0 {
        format!("{rows} (+{evicted} evicted)")
    } else {
        rows.to_string()
    })
}

/// The push queue writer's counters from `GET /metrics`.
fn queue_counts(addr: &str) -> Option<QueueCounts> {
    let text = String::from_utf8(get(addr, "/metrics")?).ok()?;
    let sample = |name: &str| {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with([' ', '{']))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    Some(QueueCounts {
        commits: sample("opex_connector_push_queue_commits_total")? as u64,
        commands: sample("opex_connector_push_queue_committed_commands_total")? as u64,
        sync_secs: sample("opex_connector_push_queue_sync_seconds_total")?,
        held_secs: sample("opex_connector_push_queue_held_seconds_total")?,
    })
}
