//! Siemens S7 benchmark: 200 points over three DBs (800 bytes) read from python-snap7's
//! server (the tests' PLC, `tests/common/peers/s7_plc.py`), in one run:
//!
//! 1. **Request frames per poll**: the ReadVar requests our client sends for one poll of the
//!    200 points, counted by the PLC itself (a log line per request), against the minimum the
//!    negotiated PDU allows (`minimum_requests`). Target: equal.
//! 2. **Polls per second**: our client (the driver's library, every request under its
//!    timeout, as a poll makes them) against python-snap7's own client reading the same 200
//!    items with `read_multi_vars` (at most `MAX_VARS`, 20, items a call; its optimizer merges
//!    adjacent items into fewer, larger reads, which ours does not do so that each point
//!    keeps its own return code), back to back on one connection each, one after the other
//!    against the same server process. Printed with their ratio (target >= 1: our client
//!    should not be the slow side of the conversation); the python client's requests per
//!    poll are counted by the PLC too.
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it makes a short smoke run, and
//! says so and passes when python-snap7 is missing.
//!
//! Environment: `BENCH_SECS` (default 10) per client.

// The tests' free loopback port (only that file of the harness: nothing else is needed here).
#[path = "../tests/common/ports.rs"]
mod ports;
mod support;

use std::error::Error;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use opex_connector::sources::s7::{minimum_requests, Connection, Endpoint, Item};
use ports::free_port;
use support::{wait_for_port, Kill};

type BoxResult<T> = Result<T, Box<dyn Error>>;

/// The PLC script of the tests.
const PLC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/peers/s7_plc.py");

/// The three DBs and their sizes: 800 bytes in all.
const DBS: [(u16, usize); 3] = [(10, 300), (11, 300), (12, 200)];

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    if let Err(e) = run(bench) {
        eprintln!("s7 bench failed: {e}");
        std::process::exit(1);
    }
}

/// The 200 points: a REAL, DWORD or DINT every 4 bytes of each DB.
fn points() -> Vec<(u16, usize, &'static str)> {
    let mut out = Vec::new();
    for (db, len) in DBS {
        let kind = match db {
            10 => "real",
            11 => "dword",
            _ => "dint",
        };
        out.extend((0..len / 4).map(|i| (db, i * 4, kind)));
    }
    out
}

fn run(bench: bool) -> BoxResult<()> {
    let snap7 = Command::new("python3")
        .args(["-c", "import snap7"])
        .status()?;
    if !snap7.success() {
        println!("s7 bench: SKIPPED: python-snap7 is not installed (scripts/test.sh installs it)");
        return Ok(());
    }
    let secs: f64 = if bench {
        std::env::var("BENCH_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10.0)
    } else {
        0.3
    };
    let dir = tempfile::tempdir()?;
    let areas: Vec<serde_json::Value> = DBS
        .iter()
        .map(|(db, len)| {
            let hex: String = (0..*len).map(|i| format!("{:02x}", i % 251)).collect();
            serde_json::json!({"area": "DB", "index": db, "hex": hex})
        })
        .collect();
    let spec = dir.path().join("areas.json");
    std::fs::write(&spec, serde_json::to_vec(&areas)?)?;
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("plc.log"))?;
    let _plc = Kill(
        Command::new("python3")
            .args([PLC, &port.to_string(), &spec.to_string_lossy()])
            .current_dir(dir.path())
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()?,
    );
    wait_for_port(port)?;
    let requests = || -> usize {
        std::fs::read_to_string(dir.path().join("plc.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("read items="))
            .count()
    };

    let items: Vec<Item> = points()
        .iter()
        .map(|(db, at, kind)| Item::parse(&format!("DB{db}.DBD{at}"), kind, None))
        .collect::<Result<_, _>>()?;
    let url = format!("s7://127.0.0.1:{port}?rack=0&slot=1&pdu_size=480");
    let ep = Endpoint::parse_url(&url, Duration::from_secs(5))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (pdu, ours, frames) = runtime.block_on(async {
        let mut conn = Connection::open(&ep).await?;
        let plan = conn.plan(&items);
        let before = requests();
        let values = conn.read(&items, &plan).await?;
        if values.iter().any(Result::is_err) {
            return Err::<_, Box<dyn Error>>("a point of the bench read bad".into());
        }
        // The PLC writes its log line before it answers: it is there now.
        let frames = requests() - before;
        let began = Instant::now();
        let mut polls = 0u64;
        while began.elapsed().as_secs_f64() < secs {
            conn.read(&items, &plan).await?;
            polls += 1;
        }
        let rate = polls as f64 / began.elapsed().as_secs_f64();
        let pdu = conn.pdu_size();
        conn.close().await;
        Ok((pdu, rate, frames))
    })?;
    let minimum = minimum_requests(&items, pdu);

    let before = requests();
    let (their_polls, theirs) = python_polls(port, secs)?;
    let their_frames = (requests() - before) as f64 / their_polls.max(1) as f64;
    println!();
    println!(
        "S7: 200 points over DB10, DB11, DB12 (800 bytes) from python-snap7's server, PDU {pdu}"
    );
    println!("| measure | ours | python-snap7 client | ratio |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| ReadVar requests per poll (minimum the PDU allows for 200 items: {minimum}) | {frames} | {their_frames:.1} (20 items a call, adjacent ones merged) | |"
    );
    println!(
        "| polls/s, one connection, back to back ({secs} s each) | {ours:.1} | {theirs:.1} | {:.2} |",
        ours / theirs.max(f64::MIN_POSITIVE)
    );
    if frames != minimum {
        return Err(format!("{frames} requests a poll, the minimum is {minimum}").into());
    }
    Ok(())
}

/// python-snap7's client reading the bench's points with `read_multi_vars`, 20 a call, back
/// to back for `secs`: its polls, and polls per second.
fn python_polls(port: u16, secs: f64) -> BoxResult<(u64, f64)> {
    const CLIENT: &str = r#"
import sys, time
import snap7
from snap7.type import Area
port, secs, spec = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
points = [tuple(int(x) for x in p.split(":")) for p in spec.split(",")]
c = snap7.client.Client()
c.connect("127.0.0.1", 0, 1, port)
items = [{"area": Area.DB, "db_number": db, "start": start, "size": 4} for db, start in points]
chunks = [items[i:i + c.MAX_VARS] for i in range(0, len(items), c.MAX_VARS)]
began, polls = time.monotonic(), 0
while time.monotonic() - began < secs:
    for ch in chunks:
        code, _ = c.read_multi_vars(ch)
        if code != 0:
            raise SystemExit(f"read_multi_vars: {code}")
    polls += 1
print(polls, polls / (time.monotonic() - began))
c.disconnect()
"#;
    let spec: Vec<String> = points()
        .iter()
        .map(|(db, at, _)| format!("{db}:{at}"))
        .collect();
    let out = Command::new("python3")
        .args(["-c", CLIENT, &port.to_string(), &secs.to_string()])
        .arg(spec.join(","))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "python-snap7's client: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    let polls = words.next().unwrap_or("").parse()?;
    let rate = words.next().unwrap_or("").parse()?;
    Ok((polls, rate))
}
