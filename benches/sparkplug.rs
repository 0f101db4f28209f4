//! Sparkplug benchmark: metrics/s through the `sparkplug` sink against a bare MQTT client
//! publishing the same protobuf messages, and bytes on the wire per metric against the JSON
//! `mqtt` sink, all in one run on one broker.
//!
//! 1. `mosquitto` (temp dir, free loopback port) and the simulator (`opex-connector simulate`,
//!    its own process) serving `BENCH_DEVICES` (default 20) units; a subscriber (rumqttc)
//!    decodes every message it gets and counts its metrics.
//! 2. **Connector**: the release daemon polls every unit every `BENCH_INTERVAL_MS` (default
//!    20) ms, 8 points each, into a sparkplug sink that waits for its primary host; once
//!    `BENCH_RECORDS` (default 20000) records wait in its disk queue, the subscriber says
//!    the host is online (STATE). Measured: metrics/s from that STATE until the last
//!    historical message arrived (births, every waiting record as a historical DDATA with all
//!    its metrics, and the live data the polls keep making meanwhile). Nothing asks the
//!    daemon's `/api/status` meanwhile (building it costs the daemon CPU); it is checked
//!    once after. Also printed: the daemon's CPU time (`/proc/<pid>/stat`) in the drain per
//!    metric, as is and less what its polls take meanwhile (their CPU per second measured
//!    for a second before the STATE): steadier than a rate on a shared box.
//! 3. **Bare client**: the daemon stopped, a rumqttc client publishes exactly the messages
//!    the subscriber got in 2 (same topics, same payloads, QoS 0 as the node does), as fast
//!    as it can: metrics/s until the last one arrived. Printed: both rates and their ratio
//!    (target at least 0.5). Steps 2 and 3 run `BENCH_ROUNDS` (default 3) times, each round
//!    with a new daemon and queue; the ratio given is the median of the rounds' ratios (a
//!    drain takes about a second, so a load on the box that comes and goes moves one round's).
//! 4. **Bytes per metric, live**: a daemon polls the same units into a sparkplug sink (no
//!    primary host) and a JSON `mqtt` sink (QoS 1, `opex/{{source}}/{{key}}`) for
//!    `BENCH_SECS` (default 10) s. The bytes of a message are its MQTT PUBLISH packet (fixed
//!    header, topic, packet id at QoS 1, payload) plus the 4-byte PUBACK at QoS 1. Printed:
//!    bytes per metric sent by each, and bytes per value polled (the JSON sink sends every
//!    value; Sparkplug only the ones that changed, by alias).
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it is a smoke run (2 units, 200
//! records, 2 s) that fails unless every stage completes. Needs `mosquitto` on PATH
//! (`scripts/test.sh` installs it). Run it with `scripts/bench.sh sparkplug`, which builds
//! the daemon first.

// The tests' free loopback port (only that file of the harness: nothing else is needed here).
#[path = "../tests/common/ports.rs"]
mod ports;
mod support;

use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opex_connector::sinks::sparkplug::proto::Payload;
use ports::free_port;
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Packet, QoS};
use serde_json::{json, Value};
use support::{cpu_secs, daemon_binary, Kill};

type BoxResult<T> = Result<T, Box<dyn Error>>;

const GROUP: &str = "bench";
const NODE: &str = "gw";
const HOST: &str = "bench-host";
/// Points per unit, in one read of registers 0..16.
const POINTS: usize = 8;

fn main() {
    if let Err(e) = run() {
        eprintln!("bench sparkplug: {e}");
        std::process::exit(1);
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Settings {
    devices: u64,
    interval_ms: u64,
    records: u64,
    live_secs: u64,
    rounds: u64,
    deadline: Duration,
}

fn run() -> BoxResult<()> {
    let bench = std::env::args().any(|a| a == "--bench");
    let s = if bench {
        Settings {
            devices: env_or("BENCH_DEVICES", 20).clamp(1, 200),
            interval_ms: env_or("BENCH_INTERVAL_MS", 20).max(10),
            records: env_or("BENCH_RECORDS", 20_000),
            live_secs: env_or("BENCH_SECS", 10),
            rounds: env_or("BENCH_ROUNDS", 3).max(1),
            deadline: Duration::from_secs(900),
        }
    } else {
        println!(
            "sparkplug bench: smoke run (no --bench); `scripts/bench.sh sparkplug` gives figures"
        );
        Settings {
            devices: 2,
            interval_ms: 50,
            records: 200,
            live_secs: 2,
            rounds: 1,
            deadline: Duration::from_secs(120),
        }
    };
    let dir = tempfile::Builder::new()
        .prefix("opex-bench-sparkplug-")
        .tempdir()?;
    let broker_port = free_port();
    let _broker = mosquitto(dir.path(), broker_port)?;
    let sim_port = free_port();
    let _simulator = Kill(
        Command::new(daemon_binary()?)
            .args([
                "simulate",
                "--modbus",
                &format!("127.0.0.1:{sim_port}"),
                "--opcua",
                "off",
                "--s7",
                "off",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    wait_port(sim_port)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let sub = rt.block_on(Subscriber::start(broker_port))?;

    // 2 and 3, `BENCH_ROUNDS` times: a load on the box that comes and goes weighs on a drain
    // of a second or less, so the ratio given is the median of rounds that each measure both.
    let mut ratios = Vec::new();
    for round in 0..s.rounds {
        // 2. Through the connector: the queue fills while the host is away, then drains.
        let cfg = config(
            dir.path(),
            &format!("a{round}"),
            broker_port,
            sim_port,
            &s,
            true,
        );
        let (daemon, addr) = start_daemon(&cfg)?;
        let t = Instant::now();
        wait(s.deadline, "the records to wait in the queue", || {
            Ok(u64_at(&sink(&addr, "uns")?, "/queue_rows") >= s.records)
        })?;
        let waiting = u64_at(&sink(&addr, "uns")?, "/sparkplug/historical/waiting");
        println!(
            "filled: {waiting} records waiting for the primary host after {:.1} s ({} units, {} points every {} ms)",
            t.elapsed().as_secs_f64(),
            s.devices,
            POINTS,
            s.interval_ms
        );
        // The daemon's CPU while it only polls, for a second (the polls go on in the drain).
        let pid = daemon.0.id();
        let cpu = || cpu_secs(pid).ok_or("the daemon's CPU time is not in /proc");
        let before = cpu()?;
        std::thread::sleep(Duration::from_secs(1));
        let polling = cpu()? - before;
        sub.reset();
        let start = Instant::now();
        let cpu_start = cpu()?;
        let mut cpu_end = cpu_start;
        rt.block_on(sub.host_state(true))?;
        // Only the subscriber is watched meanwhile (the status document costs the daemon CPU):
        // done once what waited arrived and nothing historical came for a second.
        let end = Instant::now() + s.deadline;
        let mut seen = (0, Instant::now());
        loop {
            let n = sub.historical();
            if n != seen.0 {
                seen = (n, Instant::now());
                cpu_end = cpu()?;
            } else if n >= waiting && seen.1.elapsed() > Duration::from_secs(1) {
                break;
            }
            if Instant::now() > end {
                return Err(format!("{n} of {waiting} historical records arrived in time").into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let spb = sink(&addr, "uns")?["sparkplug"].clone();
        if u64_at(&spb, "/historical/waiting") != 0
            || u64_at(&spb, "/historical/messages") != sub.historical()
        {
            return Err(format!(
                "the subscriber got {} historical messages; the node: {spb}",
                sub.historical()
            )
            .into());
        }
        drop(daemon);
        // The host away again (its retained STATE), for the next round's daemon to fill up.
        rt.block_on(sub.host_state(false))?;
        // The broker sends the killed node's Will; what the bare client sends comes after it.
        let ndeath = format!("spBv1.0/{GROUP}/NDEATH/{NODE}");
        wait(s.deadline, "the NDEATH of the stopped node", || {
            Ok(sub.kept().messages.iter().any(|m| m.topic == ndeath))
        })?;
        let got = sub.take();
        let last = got
            .iter()
            .rposition(|m| m.historical)
            .ok_or("no historical message arrived")?;
        let flushed = &got[..=last];
        let secs = flushed[last].at.duration_since(start).as_secs_f64();
        let metrics: u64 = flushed.iter().map(|m| m.metrics).sum();
        let historical_records = flushed.iter().filter(|m| m.historical).count();
        let bytes: u64 = flushed.iter().map(|m| wire_bytes(m, 0)).sum();
        let connector_rate = metrics as f64 / secs;
        println!(
            "connector (disk queue → sparkplug sink → mosquitto → subscriber): {} messages, {metrics} metrics ({historical_records} historical records) in {secs:.2} s: {connector_rate:.0} metrics/s, {:.0} messages/s; {:.1} bytes/metric; bdSeq {}",
            flushed.len(),
            flushed.len() as f64 / secs,
            bytes as f64 / metrics as f64,
            spb["bdSeq"]
        );

        let drain_cpu = cpu_end - cpu_start;
        println!(
            "daemon CPU in the drain: {drain_cpu:.2} s, {:.2} µs per metric; less its polling meanwhile ({polling:.2} CPU-s/s before the host came): {:.2} µs per metric",
            drain_cpu * 1e6 / metrics as f64,
            (drain_cpu - polling * secs).max(0.0) * 1e6 / metrics as f64
        );

        // 3. The same messages from a bare client.
        let replay: Vec<(String, Vec<u8>)> = flushed
            .iter()
            .map(|m| (m.topic.clone(), m.payload.clone()))
            .collect();
        sub.reset();
        let (raw_secs, raw_metrics, raw_received) =
            rt.block_on(bare_client(broker_port, &replay, &sub, s.deadline))?;
        let raw_rate = raw_metrics as f64 / raw_secs;
        println!(
            "bare rumqttc client, same {} messages (QoS 0): {raw_received} arrived, {raw_metrics} metrics in {raw_secs:.2} s: {raw_rate:.0} metrics/s",
            replay.len()
        );
        let ratio = connector_rate / raw_rate;
        println!(
            "ratio connector/bare client, round {}: {ratio:.2}",
            round + 1
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "ratio connector/bare client: {:.2}, the median of {} rounds ({}; target >= 0.5)",
        ratios[ratios.len() / 2],
        ratios.len(),
        ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );

    // 4. Live: bytes per metric, Sparkplug against the JSON mqtt sink, fed the same polls.
    let cfg = config(dir.path(), "c", broker_port, sim_port, &s, false);
    let (daemon, addr) = start_daemon(&cfg)?;
    wait(
        s.deadline,
        "the node to publish and the JSON sink to connect",
        || {
            Ok(sink(&addr, "uns")?["sparkplug"]["publishing"] == true
                && sink(&addr, "json")?["connected"] == true)
        },
    )?;
    sub.reset();
    std::thread::sleep(Duration::from_secs(s.live_secs));
    let got = sub.take();
    drop(daemon);
    let (mut spb_bytes, mut spb_metrics, mut spb_msgs) = (0u64, 0u64, 0u64);
    let (mut json_bytes, mut json_values, mut json_msgs) = (0u64, 0u64, 0u64);
    for m in &got {
        if m.topic.starts_with("spBv1.0/") {
            spb_bytes += wire_bytes(m, 0);
            spb_metrics += m.metrics;
            spb_msgs += 1;
        } else {
            json_bytes += wire_bytes(m, 1);
            json_values += m.metrics;
            json_msgs += 1;
        }
    }
    if spb_metrics == 0 || json_values == 0 {
        return Err(format!(
            "live phase: {spb_metrics} Sparkplug metrics, {json_values} JSON values arrived"
        )
        .into());
    }
    println!(
        "live {} s, same polls: sparkplug {spb_msgs} messages, {spb_metrics} metrics (changed values only), {spb_bytes} bytes: {:.1} bytes/metric, {:.1} bytes/value polled",
        s.live_secs,
        spb_bytes as f64 / spb_metrics as f64,
        spb_bytes as f64 / json_values as f64
    );
    println!(
        "live {} s, same polls: JSON mqtt sink {json_msgs} messages, {json_values} values, {json_bytes} bytes: {:.1} bytes/value",
        s.live_secs,
        json_bytes as f64 / json_values as f64
    );
    println!(
        "bytes per metric sparkplug/JSON: {:.2}; bytes for the same polls sparkplug/JSON: {:.2}",
        (spb_bytes as f64 / spb_metrics as f64) / (json_bytes as f64 / json_values as f64),
        spb_bytes as f64 / json_bytes as f64
    );
    Ok(())
}

/// One message the subscriber got.
struct Got {
    at: Instant,
    topic: String,
    payload: Vec<u8>,
    /// Sparkplug: its metrics; JSON: the values in the record's payload.
    metrics: u64,
    /// A DDATA whose metrics are historical.
    historical: bool,
}

/// The size of the PUBLISH packet of `m` at `qos`, plus its PUBACK at QoS 1.
fn wire_bytes(m: &Got, qos: u8) -> u64 {
    let id = if qos > 0 { 2 } else { 0 };
    let remaining = 2 + m.topic.len() + id + m.payload.len();
    let mut length_bytes = 1;
    let mut r = remaining >> 7;
    while r > 0 {
        length_bytes += 1;
        r >>= 7;
    }
    let puback = if qos > 0 { 4 } else { 0 };
    (1 + length_bytes + remaining + puback) as u64
}

/// A client that keeps every message of the node and of the JSON sink.
struct Subscriber {
    client: AsyncClient,
    got: Arc<Mutex<Kept>>,
}

/// What the subscriber keeps: the messages, and how many of them are historical.
#[derive(Default)]
struct Kept {
    messages: Vec<Got>,
    historical: u64,
}

impl Subscriber {
    async fn start(port: u16) -> BoxResult<Subscriber> {
        let (client, eventloop) = client(port, "bench-subscriber");
        let got: Arc<Mutex<Kept>> = Arc::default();
        let (ready, subscribed) = tokio::sync::oneshot::channel();
        tokio::spawn(Self::read(
            client.clone(),
            eventloop,
            Arc::clone(&got),
            ready,
        ));
        tokio::time::timeout(Duration::from_secs(20), subscribed)
            .await
            .map_err(|_| "the subscriber did not connect")??;
        Ok(Subscriber { client, got })
    }

    async fn read(
        client: AsyncClient,
        mut eventloop: EventLoop,
        got: Arc<Mutex<Kept>>,
        ready: tokio::sync::oneshot::Sender<()>,
    ) {
        let mut ready = Some(ready);
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    for f in [format!("spBv1.0/{GROUP}/#"), "opex/#".to_string()] {
                        let _ = client.subscribe(f, QoS::AtMostOnce).await;
                    }
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    if let Some(r) = ready.take() {
                        let _ = r.send(());
                    }
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let at = Instant::now();
                    let (metrics, historical) = if p.topic.starts_with("spBv1.0/") {
                        match Payload::decode_bytes(&p.payload) {
                            Ok(pl) => (
                                pl.metrics.len() as u64,
                                pl.metrics.iter().any(|m| m.is_historical == Some(true)),
                            ),
                            Err(_) => (0, false),
                        }
                    } else {
                        let v: Value = serde_json::from_slice(&p.payload).unwrap_or_default();
                        (
                            v["payload"].as_object().map_or(0, |o| o.len() as u64),
                            false,
                        )
                    };
                    let mut kept = got.lock().unwrap_or_else(|e| e.into_inner());
                    kept.historical += u64::from(historical);
                    kept.messages.push(Got {
                        at,
                        topic: p.topic.clone(),
                        payload: p.payload.to_vec(),
                        metrics,
                        historical,
                    });
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.got.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn reset(&self) {
        *self.kept() = Kept::default();
    }

    fn take(&self) -> Vec<Got> {
        std::mem::take(&mut *self.kept()).messages
    }

    fn count(&self) -> usize {
        self.kept().messages.len()
    }

    /// Publishes the primary host's retained STATE, online or not, stamped now.
    async fn host_state(&self, online: bool) -> BoxResult<()> {
        let state = json!({"online": online, "timestamp": unix_ms()}).to_string();
        self.client
            .publish(
                format!("spBv1.0/STATE/{HOST}"),
                QoS::AtLeastOnce,
                true,
                state,
            )
            .await?;
        Ok(())
    }

    fn historical(&self) -> u64 {
        self.kept().historical
    }
}

fn client(port: u16, id: &str) -> (AsyncClient, EventLoop) {
    let mut opts = MqttOptions::new(id, "127.0.0.1", port);
    opts.set_keep_alive(Duration::from_secs(30))
        .set_max_packet_size(1 << 20, 1 << 20)
        .set_clean_session(true);
    AsyncClient::new(opts, 4096)
}

/// Publishes `messages` with a bare client; returns the seconds until the last arrived,
/// the metrics that arrived and how many messages did.
async fn bare_client(
    port: u16,
    messages: &[(String, Vec<u8>)],
    sub: &Subscriber,
    deadline: Duration,
) -> BoxResult<(f64, u64, usize)> {
    let (client, mut eventloop) = client(port, "bench-bare");
    let (connected_tx, connected) = tokio::sync::oneshot::channel();
    let driver = tokio::spawn(async move {
        let mut connected_tx = Some(connected_tx);
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    if let Some(c) = connected_tx.take() {
                        let _ = c.send(());
                    }
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(20), connected)
        .await
        .map_err(|_| "the bare client did not connect")??;
    let start = Instant::now();
    for (topic, payload) in messages {
        client
            .publish(topic.as_str(), QoS::AtMostOnce, false, payload.clone())
            .await?;
    }
    // Until every message arrived, or nothing more came for 3 s (QoS 0 may be dropped).
    let end = Instant::now() + deadline;
    let mut last = (0, Instant::now());
    while sub.count() < messages.len() && Instant::now() < end {
        let n = sub.count();
        if n != last.0 {
            last = (n, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    driver.abort();
    let got = sub.take();
    let at = got.last().ok_or("nothing arrived from the bare client")?.at;
    let metrics = got.iter().map(|m| m.metrics).sum();
    Ok((at.duration_since(start).as_secs_f64(), metrics, got.len()))
}

/// The daemon's config: `devices` units of the simulator, a flow of each into the sparkplug
/// sink `uns` (waiting for its primary host when `host`) and, without a host, into the JSON
/// mqtt sink `json` too.
fn config(dir: &Path, tag: &str, broker: u16, sim: u16, s: &Settings, host: bool) -> Value {
    let points = json!([
        {"name": "oven_temp", "register": 0, "type": "f32", "unit": "°C"},
        {"name": "coolant_temp", "register": 2, "type": "f32", "unit": "°C"},
        {"name": "parts", "register": 4, "type": "u32"},
        {"name": "pump", "register": 6, "type": "u16"},
        {"name": "pressure", "register": 7, "type": "i16", "scale": 0.1, "unit": "bar"},
        {"name": "setpoint", "register": 12, "type": "f32", "unit": "°C"},
        {"name": "filler_14", "register": 14, "type": "u16"},
        {"name": "filler_15", "register": 15, "type": "u16"},
    ]);
    let devices: Vec<Value> = (1..=s.devices)
        .map(|u| {
            json!({
                "name": format!("unit-{u}"), "protocol": "modbus_tcp", "host": "127.0.0.1",
                "port": sim, "unit": u, "timeout_ms": 1000,
                "groups": [{"name": "g", "interval_ms": s.interval_ms}],
                "points": points,
            })
        })
        .collect();
    let mut nodes: Vec<Value> = (1..=s.devices)
        .map(|u| json!({"id": format!("d{u}"), "kind": "source", "source": format!("modbus/unit-{u}")}))
        .collect();
    nodes.push(json!({"id": "uns", "kind": "sink", "sink": "uns"}));
    let mut wires: Vec<Value> = (1..=s.devices)
        .map(|u| json!({"from": format!("d{u}"), "to": "uns"}))
        .collect();
    let mut spb = json!({"name": "uns", "type": "sparkplug", "connection": "broker",
                         "group_id": GROUP, "edge_node_id": NODE, "max_quota_mb": 1024});
    let mut sinks = Vec::new();
    if host {
        spb["primary_host_id"] = json!(HOST);
    } else {
        nodes.push(json!({"id": "json", "kind": "sink", "sink": "json"}));
        wires.extend((1..=s.devices).map(|u| json!({"from": format!("d{u}"), "to": "json"})));
        sinks.push(
            json!({"name": "json", "type": "mqtt", "connection": "broker",
                          "topic": "opex/{{source}}/{{key}}", "qos": 1}),
        );
    }
    sinks.push(spb);
    json!({
        "connector": {"name": "bench", "data_dir": dir.join(format!("data-{tag}")),
                      "http": {"listen": "127.0.0.1:0"}},
        "mqtt": {"connections": [{"name": "broker", "url": format!("mqtt://127.0.0.1:{broker}"),
                                  "client_id": format!("bench-{tag}")}]},
        "devices": devices,
        "sinks": sinks,
        "flows": [{"id": "bench", "nodes": nodes, "wires": wires}],
    })
}

/// Starts the release daemon on `cfg` (JSON is YAML); returns it and its HTTP address.
fn start_daemon(cfg: &Value) -> BoxResult<(Kill, String)> {
    let dir = cfg["connector"]["data_dir"]
        .as_str()
        .ok_or("no data dir")?
        .to_string();
    std::fs::create_dir_all(&dir)?;
    let path = Path::new(&dir).with_extension("yaml");
    std::fs::write(&path, cfg.to_string())?;
    let mut child = Command::new(daemon_binary()?)
        .args(["run", "--config"])
        .arg(&path)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
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
    Ok((daemon, addr))
}

fn mosquitto(dir: &Path, port: u16) -> BoxResult<Kill> {
    let conf = dir.join("mosquitto.conf");
    // Nothing dropped on the way: the queues of online clients are unbounded here.
    let user = Command::new("id")
        .arg("-un")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "root".into());
    std::fs::write(
        &conf,
        format!("user {user}\nlistener {port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\nmax_queued_bytes 0\nlog_dest none\n"),
    )?;
    let bin = ["/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("mosquitto"));
    let child = Command::new(bin)
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("mosquitto (run scripts/test.sh to install it): {e}"))?;
    let broker = Kill(child);
    wait_port(port)?;
    Ok(broker)
}

fn wait_port(port: u16) -> BoxResult<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(format!("nothing listens on port {port}").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn wait(
    deadline: Duration,
    what: &str,
    mut done: impl FnMut() -> BoxResult<bool>,
) -> BoxResult<()> {
    let end = Instant::now() + deadline;
    loop {
        if done()? {
            return Ok(());
        }
        if Instant::now() > end {
            return Err(format!("timed out waiting for {what}").into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Sink `name`'s entry in `/api/status`.
fn sink(addr: &str, name: &str) -> BoxResult<Value> {
    let mut s = TcpStream::connect(addr)?;
    write!(
        s,
        "GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut body = String::new();
    std::io::Read::read_to_string(&mut s, &mut body)?;
    let json = body.split("\r\n\r\n").nth(1).unwrap_or("{}");
    let v: Value = serde_json::from_str(json)?;
    v["sinks"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == name))
        .cloned()
        .ok_or_else(|| format!("no sink {name} in /api/status").into())
}

fn u64_at(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
