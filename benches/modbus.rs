//! Modbus benchmark, three measurements against the built-in simulator:
//!
//! 1. **Read requests/s on one connection**, 125 holding registers each, back to back: the
//!    connector's client path (tokio-modbus 0.17, every call wrapped in a timeout, as the
//!    poller does) against a small libmodbus C client (`benches/modbus_client.c`, built by
//!    `scripts/bench.sh`) reading the same registers from the same simulator process in the
//!    same run. Printed side by side with their ratio (target >= 0.9).
//! 2. **Poll-start jitter p99 under load**: the release daemon polls a simulator process
//!    (one device, every 20 ms) while 64 keep-alive clients post 1 KB records to its ingest
//!    API (the `bench.sh ingest` load). The figure is the device's `jitter_p99_ms` from
//!    `/api/status` at the end of the load (its ring holds the last 256 polls, about 5 s).
//!    Target <= 5 ms.
//! 3. **RSS with 50 simulated devices** (units 1 to 50 of the simulator, 8 points each, polled
//!    every second) against the same daemon with no device.
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it makes a short smoke run with
//! the test-profile binary and no C client.
//!
//! Environment: `BENCH_SECS` (default 10) per measurement, `OPEX_CONNECTOR_BIN` (the daemon
//! binary), `MODBUS_C_CLIENT` (the built libmodbus client; without it part 1 reports only the
//! connector's rate, and says why), `BENCH_DIR` (temp folders).

// The tests' free loopback port (only that file of the harness: nothing else is needed here).
#[path = "../tests/common/ports.rs"]
mod ports;
mod support;

use std::error::Error;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use ports::free_port;
use support::daemon::{bench_base_dir, get_status, ingest_client, wait_until_polled, Daemon, Proc};
use support::{daemon_binary, rss_kib, wait_for_port};
use tokio_modbus::client::Reader;
use tokio_modbus::Slave;

type BoxResult<T> = Result<T, Box<dyn Error>>;

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    if let Err(e) = run(bench) {
        eprintln!("modbus bench failed: {e}");
        std::process::exit(1);
    }
}

fn run(bench: bool) -> BoxResult<()> {
    let secs = if bench {
        std::env::var("BENCH_SECS")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(10.0)
    } else {
        0.5
    };
    let bin = daemon_binary()?;
    let work = tempfile::Builder::new()
        .prefix("opex-bench-modbus-")
        .tempdir_in(bench_base_dir())?;
    println!("modbus bench: {} ({secs} s per measurement)", bin.display());

    // 1. Requests/s on one connection.
    let port = free_port();
    let mut sim = Proc::spawn(
        Command::new(&bin)
            .args(["simulate", "--modbus", &format!("127.0.0.1:{port}")])
            .args(["--opcua", "off", "--s7", "off"])
            .stdout(Stdio::null()),
        &work.path().join("simulate.log"),
    )?;
    wait_for_port(port)?;
    let ours = rust_client(port, secs)?;
    println!("connector client (tokio-modbus): {ours:.0} requests/s of 125 registers");
    match std::env::var_os("MODBUS_C_CLIENT") {
        Some(c) if bench => {
            let theirs = c_client(Path::new(&c), port, secs)?;
            println!("libmodbus client:                {theirs:.0} requests/s of 125 registers");
            println!(
                "ratio connector/libmodbus:       {:.2} (target >= 0.9)",
                ours / theirs
            );
        }
        _ => println!("libmodbus client: not measured (MODBUS_C_CLIENT unset; scripts/bench.sh modbus builds it)"),
    }
    sim.stop();
    if !bench {
        assert!(ours > 0.0, "no request answered");
    }

    // 2. Jitter under ingest load.
    // The plant runs in a process of its own here: inside the daemon it would share the
    // runtime the ingest load saturates, and its answers, not the poll starts, would be timed.
    let sim_port = free_port();
    let mut sim = Proc::spawn(
        Command::new(&bin)
            .args(["simulate", "--modbus", &format!("127.0.0.1:{sim_port}")])
            .args(["--opcua", "off", "--s7", "off"])
            .stdout(Stdio::null()),
        &work.path().join("simulate-jitter.log"),
    )?;
    wait_for_port(sim_port)?;
    let conns = if bench { 64 } else { 4 };
    let mut daemon = Daemon::start(
        &bin,
        &work.path().join("jitter"),
        &format!("devices:\n{}", device_yaml("jitter", sim_port, 1, 20)),
    )?;
    wait_until_polled(&daemon.addr, 5)?;
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let clients: Vec<_> = (0..conns)
        .map(|i| {
            let addr = daemon.addr.clone();
            thread::spawn(move || ingest_client(i, &addr, deadline))
        })
        .collect();
    // Read the status while the load still runs.
    thread::sleep(Duration::from_secs_f64(secs * 0.95));
    let status = get_status(&daemon.addr)?;
    let acked: u64 = clients.into_iter().map(|c| c.join().unwrap_or(0)).sum();
    let dev = &status["devices"][0];
    println!(
        "poll-start jitter under ingest load ({conns} clients, {:.0} records/s acked, device every 20 ms): p50 {:.2} ms, p99 {:.2} ms (target <= 5 ms); polls {}",
        acked as f64 / secs,
        dev["jitter_p50_ms"].as_f64().unwrap_or(f64::NAN),
        dev["jitter_p99_ms"].as_f64().unwrap_or(f64::NAN),
        dev["polls_total"],
    );
    daemon.stop();
    sim.stop();

    // 3. RSS with 50 devices against none.
    let n = if bench { 50 } else { 5 };
    let sim_port = free_port();
    let mut idle = Daemon::start(
        &bin,
        &work.path().join("rss0"),
        &format!("simulator: {{modbus: 127.0.0.1:{sim_port}}}\n"),
    )?;
    thread::sleep(Duration::from_secs_f64(secs.min(5.0)));
    let rss0 = rss_kib(idle.pid()).unwrap_or(0);
    idle.stop();
    let sim_port = free_port();
    let devices: String = (1..=n)
        .map(|u| device_yaml(&format!("dev-{u}"), sim_port, u, 1000))
        .collect();
    let mut loaded = Daemon::start(
        &bin,
        &work.path().join("rss50"),
        &format!("simulator: {{modbus: 127.0.0.1:{sim_port}}}\ndevices:\n{devices}"),
    )?;
    wait_until_polled(&loaded.addr, 2)?;
    thread::sleep(Duration::from_secs_f64(secs.min(5.0)));
    let rss = rss_kib(loaded.pid()).unwrap_or(0);
    let status = get_status(&loaded.addr)?;
    let connected = status["devices"]
        .as_array()
        .map(|d| d.iter().filter(|d| d["state"] == "connected").count())
        .unwrap_or(0);
    println!(
        "RSS: {:.1} MiB with {n} devices polled every second ({connected} connected) vs {:.1} MiB with none (simulator in the same process)",
        rss as f64 / 1024.0,
        rss0 as f64 / 1024.0
    );
    loaded.stop();
    if !bench {
        assert_eq!(connected, n as usize, "{status}");
    }
    Ok(())
}

/// One simulated device: unit `unit` of the simulator, 8 points in 2 requests.
fn device_yaml(name: &str, port: u16, unit: u32, interval_ms: u32) -> String {
    format!(
        "  - name: {name}\n    protocol: modbus_tcp\n    host: 127.0.0.1\n    port: {port}\n    unit: {unit}\n    groups: [{{name: main, interval_ms: {interval_ms}}}]\n    points:\n      - {{name: oven, register: 0, type: f32}}\n      - {{name: coolant, register: 2, type: f32}}\n      - {{name: parts, register: 4, type: u32}}\n      - {{name: pump, register: 6}}\n      - {{name: pressure, register: 7, type: i16, scale: 0.1}}\n      - {{name: model, register: 8, type: string, length: 8}}\n      - {{name: pump_coil, register: 0, kind: coil}}\n      - {{name: alarm, register: 1, kind: coil}}\n"
    )
}

fn rust_client(port: u16, secs: f64) -> BoxResult<f64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream.set_nodelay(true)?;
        let mut ctx = tokio_modbus::client::tcp::attach_slave(stream, Slave(1));
        let started = Instant::now();
        let end = started + Duration::from_secs_f64(secs);
        let mut n = 0u64;
        while Instant::now() < end {
            let r =
                tokio::time::timeout(Duration::from_secs(1), ctx.read_holding_registers(0, 125))
                    .await;
            match r {
                Ok(Ok(Ok(words))) if words.len() == 125 => n += 1,
                other => return Err(format!("read failed: {other:?}").into()),
            }
        }
        Ok(n as f64 / started.elapsed().as_secs_f64())
    })
}

fn c_client(bin: &Path, port: u16, secs: f64) -> BoxResult<f64> {
    let out = Command::new(bin)
        .args(["127.0.0.1", &port.to_string(), &secs.to_string()])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.as_slice() {
        ["requests", n, "seconds", s, "errors", "0"] => Ok(n.parse::<f64>()? / s.parse::<f64>()?),
        _ => Err(format!(
            "libmodbus client said {text:?} {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into()),
    }
}
