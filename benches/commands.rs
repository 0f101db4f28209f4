//! Commands benchmark: the latency of a write to a device through the connector, against a
//! raw Modbus write to the same simulator in the same run.
//!
//! One simulator process (`opex-connector simulate`, Modbus TCP on a free loopback port) and
//! the release daemon with `commands:` and two devices on it: `plant` (unit 1: the oven
//! temperature polled every second, the writable oven setpoint, an f32 at holding registers
//! 12-13) and `scratch` (unit 2: 100 writable u16 points on the scratch registers 100-199,
//! polled once a minute).
//!
//! 1. **One point, `BENCH_COMMANDS` times (default 500; at most 980: with the warm-up that
//!    stays under `max_per_second`, 1000 here), one after the other**, interleaved so both
//!    see the same box:
//!    - raw: tokio-modbus writes the setpoint (FC 16, two registers) on a connection of its
//!      own, each call in a timeout as the poller makes them;
//!    - connector: `POST /api/devices/plant/write` on one keep-alive connection, from the
//!      request's first byte to the answer's last (`written` required), through the daemon's
//!      line task and its own connection to the simulator.
//!
//!    Printed: p50 and p99 of each, the ratio of the p99s, and whether the connector's p99 is
//!    at most twice the raw p99 plus 1 ms (the target).
//! 2. **One command of 100 points** (FC 6 each, in the command's order, as a command is
//!    written), `BENCH_BULK` times (default 10): p50 and the slowest, each checked by reading
//!    the 100 registers back from the simulator.
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it is a smoke run (20 commands,
//! one of 100 points) that fails unless every point is written. Run it with
//! `scripts/bench.sh commands`, which builds the release daemon first.
//!
//! Environment: `BENCH_COMMANDS`, `BENCH_BULK`, `OPEX_CONNECTOR_BIN` (the daemon binary;
//! else the one cargo built next to this bench), `RUST_LOG` (the daemon's, default warn).

// The tests' harness: the daemon runner, the keep-alive HTTP client, free loopback ports.
#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::error::Error;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, poll_until, Daemon};
use serde_json::{json, Value};
use support::{daemon_binary, wait_for_port, Kill};
use tokio_modbus::client::{Context, Reader, Writer};
use tokio_modbus::prelude::SlaveContext;
use tokio_modbus::Slave;

type BoxResult<T> = Result<T, Box<dyn Error>>;

/// The commands token of the bench's daemon.
const TOKEN: &str = "bench-commands-token";
/// Points of the many-point command (scratch registers 100 to 199).
const BULK_POINTS: u16 = 100;
/// The first scratch register of the simulator.
const SCRATCH: u16 = 100;
/// The oven setpoint's first register.
const SETPOINT: u16 = 12;
/// Commands sent first on each path and not counted (connections, caches).
const WARM_UP: usize = 20;

fn main() {
    if let Err(e) = run() {
        eprintln!("commands bench failed: {e}");
        std::process::exit(1);
    }
}

fn env_usize(name: &str, default: usize) -> BoxResult<usize> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .map_err(|e| format!("{name}={v:?} is not a count: {e}").into()),
        Err(_) => Ok(default),
    }
}

fn run() -> BoxResult<()> {
    let bench = std::env::args().any(|a| a == "--bench");
    let (count, bulk) = if bench {
        (
            env_usize("BENCH_COMMANDS", 500)?,
            env_usize("BENCH_BULK", 10)?,
        )
    } else {
        (20, 1)
    };
    if !(1..=1000 - WARM_UP).contains(&count) || bulk == 0 {
        return Err(format!(
            "BENCH_COMMANDS must be 1 to {} and BENCH_BULK at least 1",
            1000 - WARM_UP
        )
        .into());
    }
    if std::env::var_os("RUST_LOG").is_none() {
        // The daemon's log level (the harness passes RUST_LOG on): one line per command at
        // info would be part of what is measured.
        std::env::set_var("RUST_LOG", "warn");
    }
    let bin = daemon_binary()?;
    println!("commands bench: {}", bin.display());

    let port = free_port();
    let _simulator = Kill(
        Command::new(&bin)
            .args(["simulate", "--modbus", &format!("127.0.0.1:{port}")])
            .args(["--opcua", "off", "--s7", "off"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()?,
    );
    wait_for_port(port)?;
    let daemon = Daemon::start_binary(&bin, config(port));
    let connected = poll_until(Duration::from_secs(30), || {
        daemon.status()["devices"].as_array().is_some_and(|ds| {
            ds.iter()
                .all(|d| d["state"] == "connected" && d["polls_total"].as_u64() >= Some(1))
        })
    });
    if !connected {
        return Err(format!("the devices did not connect: {:#}", daemon.status()).into());
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut raw = rt.block_on(raw_client(port))?;
    let mut http = daemon.keep_alive();

    // 1. One point, raw and through the connector, interleaved.
    let mut raw_times = Vec::with_capacity(count);
    let mut ours = Vec::with_capacity(count);
    for i in 0..WARM_UP + count {
        // 100.0 to 299.5 °C: inside the simulator's 0..=400.
        let value = 100.0 + (i % 400) as f32 * 0.5;
        let began = Instant::now();
        rt.block_on(raw_setpoint(&mut raw, value))?;
        let raw_took = began.elapsed();
        let body = json!({"id": format!("b-{i}"), "points": {"oven_setpoint": value}});
        let began = Instant::now();
        let outcome = command(&mut http, "plant", &body)?;
        let took = began.elapsed();
        expect_written(&outcome, 1)?;
        if i >= WARM_UP {
            raw_times.push(raw_took);
            ours.push(took);
        }
    }
    let (raw_p50, raw_p99) = (
        percentile(&mut raw_times, 0.5),
        percentile(&mut raw_times, 0.99),
    );
    let (p50, p99) = (percentile(&mut ours, 0.5), percentile(&mut ours, 0.99));
    let target = 2.0 * raw_p99 + 1.0;
    println!("one point, {count} commands one after the other (after {WARM_UP} not counted):");
    println!(
        "  raw tokio-modbus FC 16 to the simulator:    p50 {raw_p50:.3} ms, p99 {raw_p99:.3} ms"
    );
    println!("  HTTP write -> connector -> simulator:       p50 {p50:.3} ms, p99 {p99:.3} ms");
    println!(
        "  p99 connector/raw {:.2}x; target p99 <= 2 x raw p99 + 1 ms = {target:.3} ms: {}",
        p99 / raw_p99,
        if p99 <= target { "met" } else { "MISSED" }
    );

    // 2. One command of 100 points, read back from the simulator each time.
    let mut bulk_times = Vec::with_capacity(bulk);
    for run in 0..bulk {
        // Other values each run, so each read back tells.
        let values: Vec<u16> = (0..u32::from(BULK_POINTS))
            .map(|k| ((1000 + run as u32 * 100 + k) % 65536) as u16)
            .collect();
        let points: serde_json::Map<String, Value> = values
            .iter()
            .enumerate()
            .map(|(k, v)| (format!("s{k:03}"), json!(v)))
            .collect();
        let body = json!({"id": format!("bulk-{run}"), "points": points});
        let began = Instant::now();
        let outcome = command(&mut http, "scratch", &body)?;
        bulk_times.push(began.elapsed());
        expect_written(&outcome, usize::from(BULK_POINTS))?;
        let held = rt.block_on(read_scratch(&mut raw))?;
        if held != values {
            return Err(format!("the simulator holds {held:?}, not {values:?}").into());
        }
    }
    let slowest = ms(*bulk_times.iter().max().ok_or("no bulk command")?);
    let bulk_p50 = percentile(&mut bulk_times, 0.5);
    println!(
        "one command of {BULK_POINTS} points (FC 6 each), {bulk} times, read back equal: p50 {bulk_p50:.3} ms, slowest {slowest:.3} ms"
    );
    Ok(())
}

/// The daemon's config: commands on, the plant and the scratch device on the simulator.
fn config(port: u16) -> Value {
    let scratch: Vec<Value> = (0..BULK_POINTS)
        .map(|k| {
            json!({"name": format!("s{k:03}"), "group": "all", "register": SCRATCH + k,
                   "writable": true})
        })
        .collect();
    json!({
        "connector": {
            "name": "bench",
            "http": {"max_body_kb": 1024},
            "push_queue": {"enabled": true, "max_quota_mb": 64, "on_full": "evict_oldest"},
        },
        "commands": {"token": TOKEN, "max_per_second": 1000},
        "devices": [
            {
                "name": "plant", "protocol": "modbus_tcp", "host": "127.0.0.1", "port": port,
                "unit": 1, "timeout_ms": 1000,
                "groups": [{"name": "process", "interval_ms": 1000}],
                "points": [
                    {"name": "oven_temp", "group": "process", "register": 0, "type": "f32"},
                    {"name": "oven_setpoint", "group": "process", "register": SETPOINT,
                     "type": "f32", "writable": true, "min": 0, "max": 400},
                ],
            },
            {
                "name": "scratch", "protocol": "modbus_tcp", "host": "127.0.0.1", "port": port,
                "unit": 2, "timeout_ms": 1000,
                "groups": [{"name": "all", "interval_ms": 60000}],
                "points": scratch,
            },
        ],
    })
}

/// One command over the keep-alive connection; its outcome.
fn command(http: &mut common::KeepAlive, device: &str, body: &Value) -> BoxResult<Value> {
    let body = body.to_string();
    let request = format!(
        "POST /api/devices/{device}/write HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let reply = http.exchange(request.as_bytes())?;
    if reply.status != 200 {
        return Err(format!("HTTP {}: {}", reply.status, reply.body).into());
    }
    Ok(serde_json::from_str(&reply.body)?)
}

/// Errs unless all `points` of `outcome` were written.
fn expect_written(outcome: &Value, points: usize) -> BoxResult<()> {
    let written = outcome["points"].as_object().map_or(0, |p| {
        p.values().filter(|r| r["result"] == "written").count()
    });
    if outcome["ok"] != true || written != points {
        return Err(format!("not every point was written: {outcome}").into());
    }
    Ok(())
}

async fn raw_client(port: u16) -> BoxResult<Context> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream.set_nodelay(true)?;
    Ok(tokio_modbus::client::tcp::attach_slave(stream, Slave(1)))
}

/// The setpoint written as the connector writes it: FC 16, big-endian words.
async fn raw_setpoint(ctx: &mut Context, value: f32) -> BoxResult<()> {
    let bits = value.to_bits();
    let words = [(bits >> 16) as u16, bits as u16];
    match tokio::time::timeout(
        Duration::from_secs(1),
        ctx.write_multiple_registers(SETPOINT, &words),
    )
    .await
    {
        Ok(Ok(Ok(()))) => Ok(()),
        other => Err(format!("raw write failed: {other:?}").into()),
    }
}

/// The scratch device's 100 registers (unit 2), read by the raw client.
async fn read_scratch(ctx: &mut Context) -> BoxResult<Vec<u16>> {
    ctx.set_slave(Slave(2));
    let read = ctx.read_holding_registers(SCRATCH, BULK_POINTS).await;
    ctx.set_slave(Slave(1));
    match read {
        Ok(Ok(words)) => Ok(words),
        other => Err(format!("reading the scratch registers failed: {other:?}").into()),
    }
}

/// The `q` quantile of `times` (nearest rank), in milliseconds.
fn percentile(times: &mut [Duration], q: f64) -> f64 {
    times.sort();
    let rank = ((q * times.len() as f64).ceil() as usize).clamp(1, times.len());
    ms(times[rank - 1])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
