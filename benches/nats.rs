//! NATS benchmark: JetStream → connector → push queue, messages/s acked, against a raw
//! consume of the same messages on the same server in the same run.
//!
//! 1. `nats-server -js` (store in a temp dir, free loopback port); a stream `BENCH` is
//!    filled with `BENCH_MESSAGES` (default 20000) messages of 1 KB JSON.
//! 2. **Raw**: a durable pull consumer reads them all with async-nats and acks each one
//!    (what any JetStream consumer must do at least): messages/s.
//! 3. **Connector**: the release daemon (`opex-connector run`) with a JetStream source on the
//!    same stream (its own durable), push queue on (`block`, 1024 MB, no uplink): messages/s
//!    from its start until its source has acked them all (each acked only after its LMDB
//!    commit).
//!
//! Printed: both rates, the publish rate, the push queue's records per commit (its group
//! commit; the source's `max_in_flight` bounds it), and the ratio connector/raw.
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it is a smoke run of 300 messages
//! that fails unless every one is acked. Needs `nats-server` on PATH (`scripts/test.sh`
//! installs it). Run it with `scripts/bench.sh nats`, which builds the daemon first.

// The tests' free loopback port (only that file of the harness: nothing else is needed here).
#[path = "../tests/common/ports.rs"]
mod ports;
mod support;

use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use ports::free_port;
use support::{daemon_binary, Kill};

type BoxResult<T> = Result<T, Box<dyn Error>>;

fn main() {
    if let Err(e) = run() {
        eprintln!("bench nats: {e}");
        std::process::exit(1);
    }
}

fn run() -> BoxResult<()> {
    let bench = std::env::args().any(|a| a == "--bench");
    let n: u64 = if bench {
        std::env::var("BENCH_MESSAGES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20_000)
    } else {
        println!("nats bench: smoke run (no --bench); `scripts/bench.sh nats` gives figures");
        300
    };
    let dir = tempfile::Builder::new()
        .prefix("opex-bench-nats-")
        .tempdir()?;
    let port = free_port();
    let server = Kill(
        Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir.path().join("js"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("nats-server (run scripts/test.sh to install it): {e}"))?,
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err("nats-server did not listen".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = format!("nats://127.0.0.1:{port}");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (publish_rate, raw_rate) = rt.block_on(raw(&url, n))?;
    println!("publish (JetStream, acked): {n} messages, {publish_rate:.0} msg/s");
    println!("raw consume + ack:          {n} messages, {raw_rate:.0} msg/s");

    let data = dir.path().join("data");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "connector:\n  data_dir: {:?}\n  http:\n    listen: 127.0.0.1:0\n  push_queue:\n    enabled: true\n    max_quota_mb: 1024\n    on_full: block\nnats:\n  connections:\n    - name: js\n      servers: [\"{url}\"]\n  sources:\n    - name: bench\n      stream: BENCH\n      durable: connector\n",
            data
        ),
    )?;
    let started = Instant::now();
    let mut child = Command::new(daemon_binary()?)
        .args(["run", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let daemon = Kill(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("opex-connector listening on http://")
        .ok_or_else(|| format!("unexpected first line {line:?}"))?
        .trim_end_matches('/')
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(if bench { 600 } else { 60 });
    let acked = loop {
        let acked = acked(&addr)?;
        if acked >= n {
            break acked;
        }
        if Instant::now() > deadline {
            return Err(format!("connector acked {acked} of {n} in time").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let secs = started.elapsed().as_secs_f64();
    let rate = acked as f64 / secs;
    let metrics = get(&addr, "/metrics")?;
    let counter = |name: &str| {
        metrics
            .lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with([' ', '{']))
            })
            .find_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let commits = counter("opex_connector_push_queue_commits_total");
    let commands = counter("opex_connector_push_queue_committed_commands_total");
    drop(daemon);
    drop(server);
    println!("connector (JetStream → push queue, acked after commit): {acked} messages in {secs:.2} s (start included), {rate:.0} msg/s");
    println!(
        "push queue: {commits:.0} commits, {:.1} records per commit",
        commands / commits.max(1.0)
    );
    println!("ratio connector/raw: {:.2}", rate / raw_rate);
    Ok(())
}

async fn raw(url: &str, n: u64) -> BoxResult<(f64, f64)> {
    let client = async_nats::connect(url).await?;
    let js = async_nats::jetstream::new(client);
    let stream = js
        .create_stream(async_nats::jetstream::stream::Config {
            name: "BENCH".into(),
            subjects: vec!["bench.>".into()],
            ..Default::default()
        })
        .await?;
    let body = serde_json::to_vec(&serde_json::json!({"pad": "x".repeat(1000)}))?;
    let t = Instant::now();
    let mut acks = Vec::with_capacity(256);
    for i in 0..n {
        acks.push(
            js.publish(format!("bench.d{}", i % 16), body.clone().into())
                .await?,
        );
        if acks.len() == 256 {
            for a in acks.drain(..) {
                a.await?;
            }
        }
    }
    for a in acks.drain(..) {
        a.await?;
    }
    let publish_rate = n as f64 / t.elapsed().as_secs_f64();
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("raw".into()),
            ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
            max_ack_pending: 4096,
            ..Default::default()
        })
        .await?;
    let t = Instant::now();
    let mut messages = consumer.messages().await?;
    let mut got = 0;
    while got < n {
        let Some(m) = messages.next().await else {
            return Err("raw consumer ended".into());
        };
        m.map_err(|e| e.to_string())?
            .ack()
            .await
            .map_err(|e| e.to_string())?;
        got += 1;
    }
    Ok((publish_rate, n as f64 / t.elapsed().as_secs_f64()))
}

/// The body of `GET path`.
fn get(addr: &str, path: &str) -> BoxResult<String> {
    let mut s = TcpStream::connect(addr)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut reply = String::new();
    std::io::Read::read_to_string(&mut s, &mut reply)?;
    Ok(reply
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string())
}

fn acked(addr: &str) -> BoxResult<u64> {
    let json = get(addr, "/api/status")?;
    let v: serde_json::Value = serde_json::from_str(if json.is_empty() { "{}" } else { &json })?;
    Ok(v["sources"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "nats/bench"))
        .and_then(|s| s["acked"].as_u64())
        .unwrap_or(0))
}
