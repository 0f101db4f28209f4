//! OPC-UA server benchmark: 100 simulated Modbus devices of 100 points each, polled every
//! second, served over OPC-UA, 10 000 monitored items subscribed by one asyncua client
//! (`benches/opcua_server_client.py`), against node-opcua's own server
//! (`benches/opcua_server_node.js`, the server Node-RED users run) serving 10 000 Double
//! variables changing every second to the same client, in the same run:
//!
//! 1. **CPU and RSS**: the connector with the server on (its polls included: node-opcua has
//!    none to make), the same connector without the server (what the polls alone cost),
//!    async-opcua's own server alone serving the same variables (this bench started again as
//!    a child: the ceiling of the stack the connector serves with, nothing of ours in it), and
//!    node-opcua; the ratios of the first and of the ceiling to the last (targets <= 0.25
//!    each).
//! 2. **Poll to notification**: p50 and p99 from a value's source timestamp to the publish
//!    time of the notification message that carries it (the server's clock both), and to the
//!    message's arrival at the client (which adds the client's own decoding); target p99 <=
//!    the publishing interval + 100 ms.
//! 3. **Ingest beside it**: records/s acknowledged to 64 keep-alive ingest clients by the
//!    connector serving the subscribed client, against the same connector without the
//!    server (target: not slowed by more than 10 %).
//!
//! The simulator runs in a process of its own, so that the connector's CPU is its own.
//! Under `cargo test --all-targets` (no `--bench` argument) it makes a short run of 2 devices
//! of 10 points (node-opcua's part only when `scripts/test.sh` installed it).
//!
//! Environment: `BENCH_SECS` (default 20) per measurement, `BENCH_DEVICES` (100),
//! `BENCH_POINTS` (100), `BENCH_PUBLISHING_MS` (1000), `OPEX_CONNECTOR_BIN`, `BENCH_DIR`.

#[path = "../tests/common/ports.rs"]
mod ports;
mod support;

use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use ports::free_port;
use serde_json::Value;
use support::daemon::{bench_base_dir, ingest_client, wait_until_polled, Daemon, Proc};
use support::{cpu_secs, daemon_binary, proc_status_kib, rss_kib, wait_for_port, HostCpu, Kill};

type BoxResult<T> = Result<T, Box<dyn Error>>;

/// Where `scripts/test.sh` installs node-opcua (beside the tests' node-opcua client).
const NPM_DIR: &str = "/var/tmp/opex-connector-npm";

/// The devices' namespace of the connector's server in this bench.
const NAMESPACE: &str = "urn:opex-connector:bench:devices";

/// Set (to `<port> <devices> <points>`) in the child this bench starts as async-opcua's bare
/// server.
const BARE_ENV: &str = "OPEX_BENCH_BARE_OPCUA";

fn main() {
    if let Ok(args) = std::env::var(BARE_ENV) {
        if let Err(e) = bare_server(&args) {
            eprintln!("bare async-opcua server failed: {e}");
            std::process::exit(1);
        }
        return;
    }
    let bench = std::env::args().any(|a| a == "--bench");
    if let Err(e) = run(bench) {
        eprintln!("opcua-server bench failed: {e}");
        std::process::exit(1);
    }
}

fn env_or(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// What the bench sizes.
struct Size {
    devices: u32,
    points: u32,
    publishing_ms: u64,
    secs: f64,
    ingest_clients: usize,
}

/// What one measured server did.
struct Measured {
    cpu_secs: f64,
    rss_kib: u64,
    /// The anonymous part of `rss_kib` (without the mapped files: LMDB's pages).
    anon_kib: u64,
    steal: Option<f64>,
    timing: Value,
}

fn run(bench: bool) -> BoxResult<()> {
    let size = if bench {
        Size {
            devices: env_or("BENCH_DEVICES", 100.0) as u32,
            points: env_or("BENCH_POINTS", 100.0) as u32,
            publishing_ms: env_or("BENCH_PUBLISHING_MS", 1000.0) as u64,
            secs: env_or("BENCH_SECS", 20.0),
            ingest_clients: 64,
        }
    } else {
        Size {
            devices: 2,
            points: 10,
            publishing_ms: 500,
            // Three polls of the 1 s interval: a window of one could see none on a busy box.
            secs: 3.0,
            ingest_clients: 4,
        }
    };
    let bin = daemon_binary()?;
    let base = bench_base_dir();
    std::fs::create_dir_all(&base)?;
    let work = tempfile::Builder::new()
        .prefix("opex-bench-opcua-server-")
        .tempdir_in(&base)?;
    let items = size.devices * size.points;
    println!(
        "{} devices x {} points polled every second, {items} monitored items, publishing interval {} ms, {} s per measurement",
        size.devices, size.points, size.publishing_ms, size.secs
    );

    let sim_port = free_port();
    let _sim = Proc::spawn(
        Command::new(&bin)
            .args(["simulate", "--modbus", &format!("127.0.0.1:{sim_port}")])
            .args(["--opcua", "off", "--s7", "off"])
            .stdout(Stdio::null()),
        &work.path().join("simulate.log"),
    )?;
    wait_for_port(sim_port)?;
    let devices = devices_yaml(&size, sim_port);

    // 1 and 2: the connector with its server, the subscriber on it.
    let ua_port = free_port();
    let served = format!(
        "{devices}opcua_server:\n  listen: 127.0.0.1:{ua_port}\n  namespace_uri: {NAMESPACE}\n  security: [{{policy: None, mode: None}}]\n  anonymous: true\n  pki_dir: {}\n  limits: {{monitored_items: {items}, min_publishing_interval_ms: 100}}\n",
        work.path().join("pki").display()
    );
    let mut daemon = Daemon::start(&bin, &work.path().join("served"), &served)?;
    wait_until_polled(&daemon.addr, 2)?;
    wait_for_port(ua_port)?;
    let ours = measure(
        daemon.pid(),
        &format!("opc.tcp://127.0.0.1:{ua_port}/"),
        NAMESPACE,
        &size,
        &work.path().join("client-ours.log"),
    )?;
    daemon.stop();

    // The polls alone.
    let mut daemon = Daemon::start(&bin, &work.path().join("polls"), &devices)?;
    wait_until_polled(&daemon.addr, 2)?;
    let polls = measure_idle(daemon.pid(), size.secs)?;
    daemon.stop();

    // node-opcua's server, the same client.
    let theirs = match node_opcua(&size, work.path())? {
        Some((node, port, namespace)) => Some(measure(
            node.0.id(),
            &format!("opc.tcp://127.0.0.1:{port}/"),
            &namespace,
            &size,
            &work.path().join("client-node.log"),
        )?),
        None => None,
    };

    // async-opcua's own server with nothing of ours: the ceiling of this stack.
    let bare = {
        let (child, port) = start_bare(&size, work.path())?;
        let m = measure(
            child.0.id(),
            &format!("opc.tcp://127.0.0.1:{port}/"),
            NAMESPACE,
            &size,
            &work.path().join("client-bare.log"),
        )?;
        drop(child);
        m
    };

    let mib = |kib: u64| kib as f64 / 1024.0;
    let pct = |cpu: f64| cpu * 100.0 / size.secs;
    let per_item = |m: &Measured| {
        let n = m.timing["notifications"].as_f64().unwrap_or(0.0);
        if n > 0.0 {
            m.cpu_secs * 1e6 / n
        } else {
            f64::NAN
        }
    };
    let show = |name: &str, m: &Measured| {
        println!(
            "{name}: CPU {:.1} % of a core ({:.2} us per notification), RSS {:.1} MiB ({:.1} MiB anonymous), {:.0} notifications/s, steal {}",
            pct(m.cpu_secs),
            per_item(m),
            mib(m.rss_kib),
            mib(m.anon_kib),
            m.timing["per_second"].as_f64().unwrap_or(0.0),
            steal(m.steal),
        );
        println!(
            "  poll -> notification: publish p50 {} ms, p99 {} ms; arrival at the client p50 {} ms, p99 {} ms (target p99 <= {} ms)",
            ms(&m.timing["publish_p50_ms"]),
            ms(&m.timing["publish_p99_ms"]),
            ms(&m.timing["arrival_p50_ms"]),
            ms(&m.timing["arrival_p99_ms"]),
            size.publishing_ms + 100,
        );
    };
    show("connector with the OPC-UA server (polls included)", &ours);
    println!(
        "connector polling the same devices without the server: CPU {:.1} % of a core, RSS {:.1} MiB ({:.1} MiB anonymous)",
        pct(polls.cpu_secs),
        mib(polls.rss_kib),
        mib(polls.anon_kib)
    );
    show(
        "async-opcua's own server alone, the same variables (the ceiling of the stack the connector serves with)",
        &bare,
    );
    match &theirs {
        Some(t) => {
            show("node-opcua server (no polls)", t);
            println!(
                "ratio async-opcua alone / node-opcua: CPU {:.2}, RSS {:.2}, anonymous RSS {:.2}",
                bare.cpu_secs / t.cpu_secs,
                bare.rss_kib as f64 / t.rss_kib as f64,
                bare.anon_kib as f64 / t.anon_kib as f64
            );
            println!(
                "ratio connector / node-opcua: CPU {:.2} (target <= 0.25), RSS {:.2} (target <= 0.25), anonymous RSS {:.2} (the connector's without the LMDB pages it maps)",
                ours.cpu_secs / t.cpu_secs,
                ours.rss_kib as f64 / t.rss_kib as f64,
                ours.anon_kib as f64 / t.anon_kib as f64
            );
        }
        None => println!(
            "node-opcua: SKIPPED, not installed in {NPM_DIR} (scripts/test.sh installs node-opcua-server)"
        ),
    }
    if !bench {
        let n = ours.timing["notifications"].as_u64().unwrap_or(0);
        if n == 0 {
            return Err(format!("no notification came from the connector: {}", ours.timing).into());
        }
    }

    // 3. Ingest beside the server.
    let with = ingest_rate(
        &bin,
        &work.path().join("ingest-served"),
        &served,
        Some(ua_port),
        &size,
    )?;
    let without = ingest_rate(
        &bin,
        &work.path().join("ingest-plain"),
        &devices,
        None,
        &size,
    )?;
    println!(
        "ingest ({} clients, 1 KB records): {:.0} records/s with the server and its subscriber, {:.0} without; ratio {:.2} (target >= 0.90)",
        size.ingest_clients,
        with,
        without,
        with / without
    );
    Ok(())
}

fn ms(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{x:.0}"))
}

fn steal(s: Option<f64>) -> String {
    s.map_or("-".into(), |s| format!("{s:.1} %"))
}

/// The devices: unit `d` of the simulator each, `points` points over its changing registers
/// (the oven and coolant f32, the parts counter u32, the pressure i16), one group.
fn devices_yaml(size: &Size, sim_port: u16) -> String {
    const KINDS: [(u32, &str); 4] = [(0, "f32"), (2, "f32"), (4, "u32"), (7, "i16")];
    let mut out = String::from("devices:\n");
    for d in 1..=size.devices {
        out.push_str(&format!(
            "  - name: dev-{d}\n    protocol: modbus_tcp\n    host: 127.0.0.1\n    port: {sim_port}\n    unit: {d}\n    groups: [{{name: main, interval_ms: 1000}}]\n    points:\n"
        ));
        for i in 0..size.points {
            let (register, ty) = KINDS[i as usize % KINDS.len()];
            out.push_str(&format!(
                "      - {{name: p{i}, register: {register}, type: {ty}}}\n"
            ));
        }
    }
    out
}

/// The subscriber: started on `url`, every item subscribed, its lines read by a thread.
struct Subscriber {
    _child: Kill,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Subscriber {
    fn start(url: &str, namespace: &str, size: &Size, log: &Path) -> BoxResult<Subscriber> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/opcua_server_client.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args([url, namespace])
            .args([
                size.devices.to_string(),
                size.points.to_string(),
                size.publishing_ms.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(log)?))
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let s = Subscriber {
            _child: Kill(child),
            stdin,
            lines,
        };
        let line = s.line(Duration::from_secs(300), log)?;
        let made: u32 = line
            .strip_prefix("subscribed ")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("the subscriber said {line:?}"))?;
        let want = size.devices * size.points;
        if made != want {
            return Err(format!("{made} of {want} monitored items were made").into());
        }
        Ok(s)
    }

    fn line(&self, within: Duration, log: &Path) -> BoxResult<String> {
        self.lines.recv_timeout(within).map_err(|_| {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            format!("the subscriber did not answer; its log:\n{log}").into()
        })
    }

    fn say(&mut self, what: &str) -> BoxResult<()> {
        writeln!(self.stdin, "{what}")?;
        Ok(self.stdin.flush()?)
    }
}

/// Subscribes to every item of the server in process `pid` at `url`, lets it settle, then
/// measures the process's CPU and RSS and the notifications' timing over `size.secs`.
fn measure(pid: u32, url: &str, namespace: &str, size: &Size, log: &Path) -> BoxResult<Measured> {
    let mut sub = Subscriber::start(url, namespace, size, log)?;
    thread::sleep(Duration::from_secs(3));
    sub.say("reset")?;
    let host0 = HostCpu::read();
    let cpu0 = cpu_secs(pid).ok_or("no CPU time")?;
    thread::sleep(Duration::from_secs_f64(size.secs));
    let cpu1 = cpu_secs(pid).ok_or("no CPU time")?;
    let rss_kib = rss_kib(pid).unwrap_or(0);
    let anon_kib = proc_status_kib(pid, "RssAnon:").unwrap_or(0);
    let steal = HostCpu::steal_percent(host0, HostCpu::read());
    sub.say("stop")?;
    let timing: Value = serde_json::from_str(&sub.line(Duration::from_secs(60), log)?)?;
    Ok(Measured {
        cpu_secs: cpu1 - cpu0,
        rss_kib,
        anon_kib,
        steal,
        timing,
    })
}

/// The CPU and RSS of process `pid` over `secs`, nothing subscribed.
fn measure_idle(pid: u32, secs: f64) -> BoxResult<Measured> {
    thread::sleep(Duration::from_secs(2));
    let host0 = HostCpu::read();
    let cpu0 = cpu_secs(pid).ok_or("no CPU time")?;
    thread::sleep(Duration::from_secs_f64(secs));
    let cpu1 = cpu_secs(pid).ok_or("no CPU time")?;
    Ok(Measured {
        cpu_secs: cpu1 - cpu0,
        rss_kib: rss_kib(pid).unwrap_or(0),
        anon_kib: proc_status_kib(pid, "RssAnon:").unwrap_or(0),
        steal: HostCpu::steal_percent(host0, HostCpu::read()),
        timing: Value::Null,
    })
}

/// node-opcua's server with the same variables, when `scripts/test.sh` installed it: the
/// process, its port and its namespace URI.
fn node_opcua(size: &Size, work: &Path) -> BoxResult<Option<(Kill, u16, String)>> {
    let modules = PathBuf::from(NPM_DIR).join("node_modules");
    if !modules.join("node-opcua-server").is_dir() {
        return Ok(None);
    }
    let port = free_port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/opcua_server_node.js");
    let log = work.join("node-opcua.log");
    let mut child = Command::new("node")
        .arg(script)
        .args([
            port.to_string(),
            size.devices.to_string(),
            size.points.to_string(),
            "1000".to_string(),
        ])
        .arg(work.join("node-pki"))
        .env("NODE_PATH", &modules)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&log)?))
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let child = Kill(child);
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(ns) = line.strip_prefix("ready ") {
                let _ = tx.send(ns.to_string());
            }
        }
    });
    let namespace = rx.recv_timeout(Duration::from_secs(120)).map_err(|_| {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        format!("node-opcua's server did not start; its log:\n{log}")
    })?;
    wait_for_port(port)?;
    Ok(Some((child, port, namespace)))
}

/// Starts this bench again as async-opcua's bare server ([`bare_server`]) on a free port.
fn start_bare(size: &Size, work: &Path) -> BoxResult<(Kill, u16)> {
    let port = free_port();
    let log = work.join("bare-opcua.log");
    let child = Command::new(std::env::current_exe()?)
        .env(BARE_ENV, format!("{port} {} {}", size.devices, size.points))
        .env("OPEX_BENCH_BARE_PKI", work.join("bare-pki"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log)?))
        .spawn()?;
    let child = Kill(child);
    wait_for_port(port)?;
    Ok((child, port))
}

/// async-opcua's own server and nothing of ours (`args`: `<port> <devices> <points>`): the
/// variables `s=dev-<d>.p<i>` of the connector's server, Doubles in [`NAMESPACE`], every one
/// set to a new value each second, as node-opcua's script does; the stack's own standard
/// namespace, as its defaults have it. Runs until killed.
fn bare_server(args: &str) -> BoxResult<()> {
    use opcua::server::address_space::Variable;
    use opcua::server::diagnostics::NamespaceMetadata;
    use opcua::server::node_manager::memory::{simple_node_manager, SimpleNodeManager};
    use opcua::server::{ServerBuilder, ServerEndpoint, ANONYMOUS_USER_TOKEN_ID};
    use opcua::types::{DataValue, NodeId, ObjectId};

    let n: Vec<u32> = args
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let [port, devices, points] = n[..] else {
        return Err(format!("{BARE_ENV}: expected <port> <devices> <points>, got {args:?}").into());
    };
    let port = u16::try_from(port)?;
    let pki = std::env::var("OPEX_BENCH_BARE_PKI").unwrap_or_else(|_| "bare-pki".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let mut builder = ServerBuilder::new()
            .application_name("async-opcua bench")
            .application_uri("urn:opex-connector:bench:bare")
            .product_uri("urn:opex-connector:bench")
            .host("127.0.0.1")
            .port(port)
            .pki_dir(PathBuf::from(pki))
            .create_sample_keypair(true)
            .add_endpoint(
                "none",
                ServerEndpoint::new_none("/", &[ANONYMOUS_USER_TOKEN_ID.to_string()]),
            )
            .discovery_urls(vec!["/".to_owned()])
            .with_node_manager(simple_node_manager(
                NamespaceMetadata {
                    namespace_uri: NAMESPACE.to_owned(),
                    ..Default::default()
                },
                "bench",
            ));
        {
            let limits = builder.limits_mut();
            limits.subscriptions.max_monitored_items_per_sub = (devices * points) as usize;
            limits.subscriptions.min_publishing_interval_ms = 100.0;
            limits.subscriptions.min_sampling_interval_ms = 100.0;
            // As the connector's server bounds them: all the values change at once here.
            limits.subscriptions.max_notifications_per_publish =
                opex_connector::opcua_server::server::MAX_NOTIFICATIONS_PER_PUBLISH;
        }
        let (server, handle) = builder.build()?;
        let ns = handle
            .get_namespace_index(NAMESPACE)
            .ok_or("the namespace was not registered")?;
        let manager = handle
            .node_managers()
            .get_of_type::<SimpleNodeManager>()
            .ok_or("the node manager is missing")?;
        let mut ids = Vec::new();
        {
            let mut space = manager.address_space().write();
            for d in 1..=devices {
                let folder = NodeId::new(ns, format!("dev-{d}"));
                let name = format!("dev-{d}");
                space.add_folder(&folder, &name, &name, &ObjectId::ObjectsFolder.into());
                let variables: Vec<Variable> = (0..points)
                    .map(|i| {
                        let id = NodeId::new(ns, format!("dev-{d}.p{i}"));
                        ids.push(id.clone());
                        let name = format!("p{i}");
                        Variable::new(&id, &name, &name, 0.0f64)
                    })
                    .collect();
                space.add_variables(variables, &folder);
            }
        }
        let subscriptions = handle.subscriptions().clone();
        let ticker = async {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut step = 0.0f64;
            loop {
                tick.tick().await;
                step += 1.0;
                let updates = ids
                    .iter()
                    .enumerate()
                    .map(|(i, id)| (id, None, DataValue::new_now(step + i as f64 * 0.001)));
                if let Err(e) = manager.set_values(&subscriptions, updates) {
                    eprintln!("cannot set the values: {e}");
                }
            }
        };
        tokio::select! {
            r = server.run_with(listener) => r.map_err(|e| e.to_string())?,
            _ = ticker => {}
        }
        Ok::<(), Box<dyn Error>>(())
    })
}

/// Records/s acknowledged to `size.ingest_clients` ingest clients by a daemon of `extra`,
/// with the subscriber on its server at `ua_port` when there is one.
fn ingest_rate(
    bin: &Path,
    dir: &Path,
    extra: &str,
    ua_port: Option<u16>,
    size: &Size,
) -> BoxResult<f64> {
    let mut daemon = Daemon::start(bin, dir, extra)?;
    wait_until_polled(&daemon.addr, 2)?;
    let _sub = match ua_port {
        Some(port) => {
            wait_for_port(port)?;
            Some(Subscriber::start(
                &format!("opc.tcp://127.0.0.1:{port}/"),
                NAMESPACE,
                size,
                &dir.join("client.log"),
            )?)
        }
        None => None,
    };
    let began = Instant::now();
    let deadline = began + Duration::from_secs_f64(size.secs);
    let clients: Vec<_> = (0..size.ingest_clients)
        .map(|i| {
            let addr = daemon.addr.clone();
            thread::spawn(move || ingest_client(i, &addr, deadline))
        })
        .collect();
    let acked: u64 = clients.into_iter().map(|c| c.join().unwrap_or(0)).sum();
    let rate = acked as f64 / began.elapsed().as_secs_f64();
    daemon.stop();
    Ok(rate)
}
