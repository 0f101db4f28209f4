//! The `sparkplug` sink against real peers: `mosquitto`, a pymodbus device, python-snap7's
//! S7 PLC, the daemon binary, and a Sparkplug B host application on pysparkplug
//! (`sparkplug/host.py`, pinned in scripts/test.sh), which decodes every payload and resolves
//! the data messages' aliases with the births it saw. The tests read what the host printed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// The host application.
const HOST_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sparkplug/host.py");
const GROUP: &str = "plant";
const NODE: &str = "gw-1";
const HOST_ID: &str = "scada";
const DEVICE: &str = "press";
/// A holding register of the pymodbus map that nothing else uses (0 at start).
const LEVEL_REGISTER: u16 = 50;
/// The pymodbus device's count of the write requests it saw (see modbus_device.py).
const DEVICE_WRITES: u16 = 70;

/// A Sparkplug host application: `host.py` on pysparkplug, its printed messages kept.
struct Host {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<Value>>>,
    log: tempfile::NamedTempFile,
}

impl Host {
    /// Starts the host on `broker`; returns once it is subscribed and said online.
    fn start(broker: &Mosquitto) -> Host {
        let ok = Command::new("python3")
            .args(["-c", "import pysparkplug"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "python3 cannot import pysparkplug: run scripts/test.sh (it pins pysparkplug 0.6.1)"
        );
        let log = tempfile::NamedTempFile::new().expect("host log");
        let mut child = Command::new("python3")
            .args([HOST_SCRIPT, &broker.port().to_string(), GROUP, HOST_ID])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log.reopen().expect("host log")))
            .spawn()
            .expect("spawn the host application");
        let stdout = child.stdout.take().expect("piped stdout");
        let lines: Arc<Mutex<Vec<Value>>> = Arc::default();
        let sink = Arc::clone(&lines);
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line).unwrap_or_else(
                    |e| json!({"type": "unparsed", "line": line, "error": e.to_string()}),
                );
                sink.lock().unwrap().push(v);
            }
        });
        let host = Host {
            stdin: child.stdin.take(),
            child: Some(child),
            lines,
            log,
        };
        host.wait("the host is ready", |m| {
            m.iter().any(|v| v["type"] == "ready")
        });
        host
    }

    fn messages(&self) -> Vec<Value> {
        self.lines.lock().unwrap().clone()
    }

    /// The Sparkplug messages our node published, in the order the host got them (not the
    /// commands, which the host hears too).
    fn node_messages(&self) -> Vec<Value> {
        self.messages()
            .into_iter()
            .filter(|v| v["node"] == NODE && v["type"] != "NCMD" && v["type"] != "DCMD")
            .collect()
    }

    fn wait(&self, what: &str, mut cond: impl FnMut(&[Value]) -> bool) {
        if !poll_until(POLL_DEADLINE, || cond(&self.messages())) {
            let log = std::fs::read_to_string(self.log.path()).unwrap_or_default();
            let tail: Vec<Value> = self.messages().into_iter().rev().take(20).collect();
            panic!("timed out waiting for: {what}\nlast messages (newest first): {tail:#?}\nhost stderr:\n{log}");
        }
    }

    fn send(&mut self, command: &str) {
        let stdin = self.stdin.as_mut().expect("the host runs");
        writeln!(stdin, "{command}").expect("write to the host");
        stdin.flush().expect("flush the host's stdin");
    }

    /// SIGKILL: the broker publishes its Will, STATE offline.
    fn kill9(&mut self) {
        self.stdin = None;
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A TCP relay in front of the broker that, once armed, cuts the connection it relays after
/// that many more bytes from the client (the node), mid-packet as a failing link does; the
/// connections after it are relayed whole.
struct CutRelay {
    port: u16,
    /// Bytes the client may still send before the cut; `u64::MAX` while not armed.
    budget: Arc<AtomicU64>,
    cuts: Arc<AtomicU64>,
}

impl CutRelay {
    fn start(broker: &Mosquitto) -> CutRelay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let port = listener.local_addr().expect("relay address").port();
        let upstream = broker.port();
        let budget = Arc::new(AtomicU64::new(u64::MAX));
        let cuts = Arc::new(AtomicU64::new(0));
        let (b, c) = (Arc::clone(&budget), Arc::clone(&cuts));
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let (b, c) = (Arc::clone(&b), Arc::clone(&c));
                thread::spawn(move || relay(client, server, &b, &c));
            }
        });
        CutRelay { port, budget, cuts }
    }

    fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    fn cut_after(&self, bytes: u64) {
        self.budget.store(bytes, Ordering::SeqCst);
    }

    fn cuts(&self) -> u64 {
        self.cuts.load(Ordering::SeqCst)
    }
}

fn relay(mut client: TcpStream, mut server: TcpStream, budget: &AtomicU64, cuts: &AtomicU64) {
    let (Ok(mut from_server), Ok(mut to_client)) = (server.try_clone(), client.try_clone()) else {
        return;
    };
    thread::spawn(move || {
        let _ = std::io::copy(&mut from_server, &mut to_client);
        let _ = to_client.shutdown(Shutdown::Both);
    });
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let allowed = budget.load(Ordering::SeqCst);
        if allowed > n as u64 {
            if allowed != u64::MAX {
                budget.store(allowed - n as u64, Ordering::SeqCst);
            }
            if server.write_all(&buf[..n]).is_err() {
                break;
            }
            continue;
        }
        let _ = server.write_all(&buf[..allowed as usize]);
        budget.store(u64::MAX, Ordering::SeqCst);
        cuts.fetch_add(1, Ordering::SeqCst);
        break;
    }
    let _ = server.shutdown(Shutdown::Both);
    let _ = client.shutdown(Shutdown::Both);
}

fn of_type<'a>(msgs: &'a [Value], t: &str) -> Vec<&'a Value> {
    msgs.iter().filter(|v| v["type"] == t).collect()
}

fn metric<'a>(msg: &'a Value, name: &str) -> &'a Value {
    msg["metrics"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["name"] == name))
        .unwrap_or_else(|| panic!("no metric {name} in {msg:#}"))
}

/// The live (not historical) value of metric `name` in a data message, if it has one.
fn live_value(msg: &Value, name: &str) -> Option<Value> {
    msg["metrics"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name && m["historical"] == false)
        .map(|m| m["value"].clone())
}

fn bd_seq(msg: &Value) -> u64 {
    u64_at(metric(msg, "bdSeq"), "/value")
}

/// The pymodbus device's points this node publishes: one poll group `fast`.
fn points() -> Value {
    json!([
        {"name": "count", "register": 0, "type": "u16"},
        {"name": "neg", "register": 1, "type": "i16"},
        {"name": "temp", "register": 6, "type": "f32", "unit": "°C"},
        {"name": "level", "register": LEVEL_REGISTER, "type": "u16"},
        {"name": "coil0", "register": 0, "kind": "coil"},
    ])
}

/// A connector polling `device` every `interval_ms` into sink `uns` on `broker`, waiting for
/// the primary host.
fn config(broker: &Mosquitto, device: &ModbusTcp, interval_ms: u64) -> Value {
    json!({
        "connector": {"name": "it", "http": {"admin_token": ADMIN_TOKEN}},
        "ingest": {"sources": [{"name": SOURCE, "token": TOKEN}]},
        "mqtt": {"connections": [{"name": "broker", "url": broker.url(), "client_id": "it-spb",
                                  "keep_alive_secs": 5, "reconnect_max_ms": 200}]},
        "devices": [{
            "name": DEVICE, "protocol": "modbus_tcp", "host": "127.0.0.1", "port": device.port(),
            "unit": 1, "timeout_ms": 300, "backoff_max_secs": 1,
            "groups": [{"name": "fast", "interval_ms": interval_ms}],
            "points": points(),
        }],
        "sinks": [{"name": "uns", "type": "sparkplug", "connection": "broker",
                   "group_id": GROUP, "edge_node_id": NODE, "primary_host_id": HOST_ID,
                   "queue": "disk", "max_quota_mb": 16}],
    })
}

/// The `sparkplug` object of sink `uns`.
fn spb(daemon: &Daemon) -> Value {
    named(&daemon.status(), "/sinks", "uns")["sparkplug"].clone()
}

fn write_register(device: &ModbusTcp, register: u16, value: u16) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let addr = format!("127.0.0.1:{}", device.port())
            .parse()
            .expect("address");
        let mut ctx = tokio_modbus::client::tcp::connect_slave(addr, tokio_modbus::Slave(1))
            .await
            .expect("connect to the device");
        use tokio_modbus::client::Writer;
        ctx.write_single_register(register, value)
            .await
            .expect("transport")
            .expect("no exception");
    });
}

/// Every message of the node after its first NBIRTH carries the seq one after the previous
/// one's (wrapping at 256); an NBIRTH starts again at 0; NDEATH has none.
fn assert_seq_without_gap(msgs: &[Value]) {
    let mut last: Option<u64> = None;
    for m in msgs {
        match m["type"].as_str() {
            Some("NDEATH") => {
                last = None;
                continue;
            }
            Some("NBIRTH") => {
                assert_eq!(m["seq"], 0, "{m:#}");
            }
            _ => {
                let seq = u64_at(m, "/seq");
                if let Some(l) = last {
                    assert_eq!(seq, (l + 1) % 256, "a gap in seq before {m:#}");
                }
            }
        }
        last = Some(u64_at(m, "/seq"));
    }
}

#[test]
fn a_host_application_decodes_every_birth_follows_ddata_by_alias_sees_bdseq_grow_after_kill9_and_gets_its_rebirth(
) {
    let broker = Mosquitto::start();
    let device = ModbusTcp::start();
    let mut daemon = Daemon::start(config(&broker, &device, 100));
    // The births wait for the primary host, started once the device was polled: a DBIRTH
    // sent before the first poll declares its metrics null (not polled yet), as it should,
    // and this test reads the values in the DBIRTH.
    wait_until(POLL_DEADLINE, "the device's first poll", || {
        daemon.status()["devices"][0]["polls_total"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    });
    let mut host = Host::start(&broker);

    host.wait("NBIRTH and the device's DBIRTH", |m| {
        m.iter()
            .any(|v| v["type"] == "DBIRTH" && v["device"] == DEVICE)
    });
    let msgs = host.node_messages();
    let nbirth = of_type(&msgs, "NBIRTH")[0].clone();
    let first_bd_seq = bd_seq(&nbirth);
    assert_eq!(nbirth["seq"], 0);
    let rebirth = metric(&nbirth, "Node Control/Rebirth");
    assert_eq!(
        (rebirth["datatype"].as_str(), &rebirth["value"]),
        (Some("BOOLEAN"), &json!(false))
    );
    assert_eq!(rebirth["alias"], Value::Null);
    assert_eq!(metric(&nbirth, "Properties/Version")["datatype"], "STRING");
    let dbirth = of_type(&msgs, "DBIRTH")[0].clone();
    let expected = [
        ("fast/count", "UINT16", json!(1234)),
        ("fast/neg", "INT16", json!(-1234)),
        ("fast/temp", "FLOAT", json!(21.5)),
        ("fast/level", "UINT16", json!(0)),
        ("fast/coil0", "BOOLEAN", json!(true)),
    ];
    let mut aliases = Vec::new();
    for (name, datatype, value) in &expected {
        let m = metric(&dbirth, name);
        assert_eq!(m["datatype"], *datatype, "{m:#}");
        assert_eq!(m["value"], *value, "{m:#}");
        aliases.push(u64_at(m, "/alias"));
    }
    aliases.sort_unstable();
    aliases.dedup();
    assert_eq!(
        aliases.len(),
        expected.len(),
        "aliases are unique: {dbirth:#}"
    );

    // Report by exception: a register the test changes shows up as DDATA of that metric
    // alone, which the host resolves by the alias of the DBIRTH.
    for v in [7, 8] {
        write_register(&device, LEVEL_REGISTER, v);
        host.wait(&format!("DDATA of fast/level = {v}"), |m| {
            m.iter().any(|x| {
                x["type"] == "DDATA"
                    && x["metrics"].as_array().is_some_and(|ms| {
                        ms.iter()
                            .any(|mm| mm["name"] == "fast/level" && mm["value"] == v)
                    })
            })
        });
    }
    // (Polls taken between the start and the births went out before, as historical DDATA.)
    let live: Vec<Value> = of_type(&host.node_messages(), "DDATA")
        .into_iter()
        .filter(|d| d["metrics"][0]["historical"] == false)
        .cloned()
        .collect();
    assert!(live.len() >= 2, "{live:#?}");
    for d in &live {
        for m in d["metrics"].as_array().unwrap() {
            assert_eq!(m["name"], "fast/level", "only the changed metric: {d:#}");
            assert!(m["alias"].is_u64(), "{d:#}");
            assert_eq!(m["historical"], false, "{d:#}");
        }
    }

    // A rebirth request: NBIRTH again (seq 0, same bdSeq) and the DBIRTH.
    let births_before = of_type(&host.node_messages(), "NBIRTH").len();
    host.send(&format!("rebirth {NODE}"));
    host.wait("a second NBIRTH and its DBIRTH", |_| {
        let msgs = host.node_messages();
        of_type(&msgs, "NBIRTH").len() > births_before
            && msgs
                .iter()
                .rev()
                .take_while(|v| v["type"] != "NBIRTH")
                .any(|v| v["type"] == "DBIRTH")
    });
    let msgs = host.node_messages();
    let reborn = of_type(&msgs, "NBIRTH").last().copied().unwrap().clone();
    assert_eq!(bd_seq(&reborn), first_bd_seq);
    assert_seq_without_gap(&msgs);
    let status = spb(&daemon);
    assert_eq!(status["primary_host"]["state"], "online", "{status:#}");
    assert_eq!(status["connected"], true);
    assert_eq!(u64_at(&status, "/bdSeq"), first_bd_seq);
    assert!(u64_at(&status, "/commands/rebirths") >= 1, "{status:#}");
    assert!(u64_at(&status, "/births") >= 4, "{status:#}");

    // kill -9: the broker sends the Will, an NDEATH with this session's bdSeq.
    daemon.kill9();
    host.wait("the NDEATH of the killed node", |m| {
        m.iter().any(|v| v["type"] == "NDEATH")
    });
    let ndeath = of_type(&host.node_messages(), "NDEATH")[0].clone();
    assert_eq!(bd_seq(&ndeath), first_bd_seq);

    // The next start is a new session: bdSeq one more, stored across the kill.
    daemon.restart();
    host.wait("the NBIRTH after the restart", |_| {
        let msgs = host.node_messages();
        msgs.iter()
            .skip_while(|v| v["type"] != "NDEATH")
            .any(|v| v["type"] == "NBIRTH")
    });
    let msgs = host.node_messages();
    let after = msgs
        .iter()
        .skip_while(|v| v["type"] != "NDEATH")
        .find(|v| v["type"] == "NBIRTH")
        .unwrap();
    assert_eq!(bd_seq(after), (first_bd_seq + 1) % 256);
    assert!(
        host.messages().iter().all(|v| v["type"] != "error"),
        "{:#?}",
        host.messages()
    );
}

#[test]
fn a_device_stopped_and_started_gets_a_ddeath_then_a_dbirth() {
    let broker = Mosquitto::start();
    let mut device = ModbusTcp::start();
    let host = Host::start(&broker);
    let daemon = Daemon::start(config(&broker, &device, 100));
    host.wait("the device's DBIRTH", |m| {
        m.iter()
            .any(|v| v["type"] == "DBIRTH" && v["device"] == DEVICE)
    });
    device.stop();
    host.wait("the device's DDEATH", |m| {
        m.iter()
            .any(|v| v["type"] == "DDEATH" && v["device"] == DEVICE)
    });
    assert_eq!(u64_at(&spb(&daemon), "/deaths"), 1);
    device.restart();
    host.wait("a DBIRTH after the DDEATH", |m| {
        m.iter()
            .skip_while(|v| v["type"] != "DDEATH")
            .any(|v| v["type"] == "DBIRTH" && v["device"] == DEVICE)
    });
    let msgs = host.node_messages();
    let reborn = msgs
        .iter()
        .skip_while(|v| v["type"] != "DDEATH")
        .find(|v| v["type"] == "DBIRTH")
        .unwrap();
    assert_eq!(metric(reborn, "fast/count")["value"], 1234);
    assert_seq_without_gap(&msgs);
}

#[test]
fn what_was_taken_while_the_primary_host_was_away_arrives_once_flagged_historical_and_in_order_across_a_kill9(
) {
    let broker = Mosquitto::start();
    let device = ModbusTcp::start();
    let mut host = Host::start(&broker);
    let mut cfg = config(&broker, &device, 100);
    // The device and the ingest source both go to the node.
    cfg["flows"] = json!([{
        "id": "uns",
        "nodes": [
            {"id": "press", "kind": "source", "source": format!("modbus/{DEVICE}")},
            {"id": "orders", "kind": "source", "source": format!("ingest/{SOURCE}")},
            {"id": "out", "kind": "sink", "sink": "uns"},
        ],
        "wires": [{"from": "press", "to": "out"}, {"from": "orders", "to": "out"}],
    }]);
    let mut daemon = Daemon::start(cfg);
    host.wait("the device's DBIRTH", |m| {
        m.iter()
            .any(|v| v["type"] == "DBIRTH" && v["device"] == DEVICE)
    });

    // The host dies: its Will says offline, the node publishes its NDEATH and waits.
    host.kill9();
    wait_until(POLL_DEADLINE, "the node sees the host offline", || {
        let s = spb(&daemon);
        s["primary_host"]["state"] == "offline" && s["publishing"] == false
    });
    let mut acked = 0u64;
    let post = |daemon: &Daemon, n: &mut u64, count: u64| {
        for _ in 0..count {
            let reply = daemon.ingest(&format!("o-{n}"), &format!(r#"{{"n":{n}}}"#));
            assert_eq!(reply.status, 200, "{}", reply.body);
            *n += 1;
        }
    };
    post(&daemon, &mut acked, 25);
    wait_until(POLL_DEADLINE, "polls wait in the queue", || {
        u64_at(named(&daemon.status(), "/sinks", "uns"), "/queue_rows") >= 40
    });
    daemon.kill9();
    daemon.restart();
    post(&daemon, &mut acked, 25);
    wait_until(POLL_DEADLINE, "more polls wait in the queue", || {
        let s = named(&daemon.status(), "/sinks", "uns").clone();
        s["sparkplug"]["connected"] == true && u64_at(&s, "/queue_rows") >= 80
    });
    let s = spb(&daemon);
    assert_eq!(s["publishing"], false, "{s:#}");
    let waiting = u64_at(&s, "/historical/waiting");
    assert!(waiting >= 80, "{s:#}");
    assert!(
        uns_sample(
            &daemon.metrics(),
            "opex_connector_sparkplug_historical_waiting"
        ) >= 80.0
    );

    // The host comes back: births, then everything that waited, then live data.
    let host = Host::start(&broker);
    wait_until(POLL_DEADLINE, "the queue is drained", || {
        let s = named(&daemon.status(), "/sinks", "uns").clone();
        s["sparkplug"]["publishing"] == true
            && u64_at(&s, "/queue_rows") == 0
            && u64_at(&s, "/sparkplug/historical/waiting") == 0
    });
    host.wait("a live DDATA after the flush", |_| {
        // A change to make one, once the queue is drained.
        write_register(&device, LEVEL_REGISTER, 5);
        of_type(&host.node_messages(), "DDATA")
            .iter()
            .any(|v| v["metrics"][0]["historical"] == false)
    });
    let msgs = host.node_messages();
    assert!(
        host.messages().iter().all(|v| v["type"] != "error"),
        "{msgs:#?}"
    );
    assert_eq!(msgs[0]["type"], "NBIRTH", "births first: {:#}", msgs[0]);
    let birth_ts = u64_at(&msgs[0], "/ts");
    let ddata: Vec<&Value> = of_type(&msgs, "DDATA");
    let historical: Vec<&Value> = ddata
        .iter()
        .copied()
        .take_while(|v| v["metrics"][0]["historical"] == true)
        .collect();
    assert!(
        ddata[historical.len()..].iter().all(|v| v["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["historical"] == false)),
        "historical data comes before live data"
    );
    // Every acked ingest record once, in order, historical.
    let orders: Vec<u64> = historical
        .iter()
        .filter(|v| v["device"] == "ingest:orders")
        .map(|v| u64_at(metric(v, "n"), "/value"))
        .collect();
    assert_eq!(orders, (0..acked).collect::<Vec<_>>());
    // Every poll that waited, in order, each with every metric, all from before the births.
    let polls: Vec<u64> = historical
        .iter()
        .filter(|v| v["device"] == DEVICE)
        .map(|v| {
            let ms = v["metrics"].as_array().unwrap();
            assert_eq!(ms.len(), 5, "{v:#}");
            assert!(
                ms.iter()
                    .all(|m| m["historical"] == true && m["ts"] == ms[0]["ts"]),
                "{v:#}"
            );
            u64_at(&ms[0], "/ts")
        })
        .collect();
    assert!(
        polls.len() as u64 + acked >= waiting,
        "{} polls + {acked} orders < {waiting} waiting",
        polls.len()
    );
    assert!(
        polls.windows(2).all(|w| w[0] < w[1]),
        "poll times in order, none twice"
    );
    assert!(polls.iter().all(|&ts| ts < birth_ts));
    assert_eq!(
        u64_at(&spb(&daemon), "/historical/sent"),
        polls.len() as u64 + acked
    );
    assert_seq_without_gap(&msgs);
    println!(
        "host away across a kill -9: {} polls and {acked} ingest records waited; each arrived once, historical, in order",
        polls.len()
    );
}

#[test]
fn a_link_cut_mid_drain_sends_again_from_the_oldest_unconfirmed_record_and_nothing_handed_after_it_goes_ahead(
) {
    const WRITERS: u64 = 8;
    const EACH: u64 = 1250;
    let broker = Mosquitto::start();
    let device = ModbusTcp::start();
    let relay = CutRelay::start(&broker);
    let mut host = Host::start(&broker);
    let mut cfg = config(&broker, &device, 1000);
    cfg["mqtt"]["connections"][0]["url"] = json!(relay.url());
    cfg["flows"] = ingest_flow(&["uns"]);
    let daemon = Daemon::start(cfg);
    host.wait("the NBIRTH", |m| m.iter().any(|v| v["type"] == "NBIRTH"));
    host.kill9();
    wait_until(POLL_DEADLINE, "the node sees the host offline", || {
        spb(&daemon)["publishing"] == false
    });
    // Several batches of the queue's deliverer wait: each writer's records in its own order.
    thread::scope(|s| {
        for t in 0..WRITERS {
            let daemon = &daemon;
            s.spawn(move || {
                for i in 0..EACH {
                    let reply = daemon.ingest(&format!("w{t}"), &format!(r#"{{"t":{t},"i":{i}}}"#));
                    assert_eq!(reply.status, 200, "{}", reply.body);
                }
            });
        }
    });
    // About a third of the drain gets through, then the link breaks mid-packet.
    relay.cut_after(250_000);
    let host = Host::start(&broker);
    wait_until(POLL_DEADLINE, "the drain is cut and done again", || {
        let s = named(&daemon.status(), "/sinks", "uns").clone();
        relay.cuts() == 1
            && s["sparkplug"]["publishing"] == true
            && u64_at(&s, "/queue_rows") == 0
            && u64_at(&s, "/sparkplug/historical/waiting") == 0
    });
    let all: BTreeSet<(u64, u64)> = (0..WRITERS)
        .flat_map(|t| (0..EACH).map(move |i| (t, i)))
        .collect();
    let seen = |msgs: &[Value]| -> BTreeSet<(u64, u64)> {
        of_type(msgs, "DDATA")
            .iter()
            .filter(|v| v["device"] == "ingest:orders")
            .map(|v| {
                (
                    u64_at(metric(v, "t"), "/value"),
                    u64_at(metric(v, "i"), "/value"),
                )
            })
            .collect()
    };
    host.wait("every record", |m| seen(m) == all);

    let msgs = host.node_messages();
    assert!(u64_at(&spb(&daemon), "/sessions") >= 2);
    // Split into the node's sessions: in each, every writer's records in order, none twice,
    // all historical.
    let mut sessions: Vec<BTreeMap<u64, Vec<u64>>> = Vec::new();
    for v in &msgs {
        match v["type"].as_str() {
            Some("NBIRTH") => sessions.push(BTreeMap::new()),
            Some("DDATA") if v["device"] == "ingest:orders" => {
                assert!(
                    v["metrics"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|m| m["historical"] == true),
                    "{v:#}"
                );
                let t = u64_at(metric(v, "t"), "/value");
                let i = u64_at(metric(v, "i"), "/value");
                sessions
                    .last_mut()
                    .expect("data after a birth")
                    .entry(t)
                    .or_default()
                    .push(i);
            }
            _ => {}
        }
    }
    for (n, session) in sessions.iter().enumerate() {
        for (t, is) in session {
            assert!(
                is.windows(2).all(|w| w[0] < w[1]),
                "session {n}, writer {t}: records out of order or twice: {is:?}"
            );
        }
    }
    // The cut came mid-drain: the session it broke sent part of the records, not all.
    let sent_before = |n: usize| sessions[n].values().map(Vec::len).sum::<usize>();
    let cut = (0..sessions.len())
        .find(|&n| sent_before(n) > 0)
        .expect("a session that sent records");
    assert!(
        sent_before(cut) < all.len() && sessions.len() > cut + 1,
        "the link was cut mid-drain: {} of {} records in the broken session",
        sent_before(cut),
        all.len()
    );
    assert_seq_without_gap(&msgs);
    println!(
        "link cut mid-drain: {} of {} records went out before the cut, the rest after it, each writer's in order",
        sent_before(cut),
        all.len()
    );
}

/// The config's entry is validated with every problem's path.
#[test]
fn bad_sparkplug_entries_are_refused_with_every_problem_and_its_path_ids_by_the_specifications_character_rules(
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        concat!(
            "connector:\n  data_dir: /tmp/x\n",
            "mqtt:\n  connections:\n    - { name: b, url: \"mqtt://127.0.0.1:1\" }\n",
            "sinks:\n",
            "  - { name: uns, type: sparkplug, group_id: \"a/b\", queue: memory, colour: red }\n",
            "  - { name: uns2, type: sparkplug, group_id: \"plant\", edge_node_id: \"gw+1\", primary_host_id: \"scada#\" }\n",
            "  - { name: uns3, type: sparkplug, group_id: \"Werk Süd\", edge_node_id: \"\\u0007bell\" }\n",
            "  - { name: uns4, type: sparkplug, group_id: \"Werk Süd\", edge_node_id: \"Linie 3\" }\n",
            "  - { name: uns5, type: sparkplug, group_id: \"Werk Süd\", edge_node_id: \"Linie 3\" }\n",
        ),
    )
    .unwrap();
    let out = run_cli(&["validate", path.to_str().unwrap()]);
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    for want in [
        "sinks[0].group_id: \"a/b\" holds '/'",
        "sinks[0].edge_node_id: is required",
        "sinks[0].queue: \"memory\"",
        "sinks[0].colour",
        "sinks[1].edge_node_id: \"gw+1\" holds '+'",
        "sinks[1].primary_host_id: \"scada#\" holds '#'",
        "sinks[2].edge_node_id: \"\\u{7}bell\" holds '\\u{7}'",
        "sinks[4].edge_node_id: \"Linie 3\" of group \"Werk Süd\" is also the edge node of sinks[3]",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}

#[test]
fn a_dcmd_writes_a_writable_register_one_to_a_read_only_point_changes_nothing_and_each_outcome_is_on_record_and_in_the_next_ddata(
) {
    let broker = Mosquitto::start();
    let device = ModbusTcp::start();
    let receiver = Receiver::start();
    let mut host = Host::start(&broker);
    let mut cfg = config(&broker, &device, 100);
    cfg["commands"] = json!({});
    cfg["devices"][0]["points"][3]["writable"] = json!(true);
    cfg["devices"][0]["points"][3]["max"] = json!(1000);
    // The command records go upstream, where the test reads them.
    cfg["connector"]["push"] = json!({"url": receiver.url(), "retry_initial_ms": 50});
    let daemon = Daemon::start(cfg);
    host.wait("the device's DBIRTH", |m| {
        m.iter()
            .any(|v| v["type"] == "DBIRTH" && v["device"] == DEVICE)
    });
    let writes = |d: &ModbusTcp| d.read_holding(DEVICE_WRITES, 1)[0];
    let before = writes(&device);

    host.send(&format!("dcmd {NODE} {DEVICE} fast/level UINT16 42"));
    wait_until(POLL_DEADLINE, "the register holds the DCMD's value", || {
        device.read_holding(LEVEL_REGISTER, 1) == [42]
    });
    host.wait("the write shows as the next DDATA of the metric", |m| {
        m.iter()
            .any(|x| x["type"] == "DDATA" && live_value(x, "fast/level") == Some(json!(42)))
    });

    // `count` is not writable: nothing is sent to the device, and the command is on record.
    // Its outcome shows too: the next DDATA carries the value the device kept, unchanged.
    let sent = host.messages().len();
    host.send(&format!("dcmd {NODE} {DEVICE} fast/count UINT16 9"));
    host.wait(
        "a DDATA of the unchanged fast/count after the refused DCMD",
        |m| {
            m[sent..]
                .iter()
                .any(|x| x["type"] == "DDATA" && live_value(x, "fast/count") == Some(json!(1234)))
        },
    );
    // And a value out of the point's range: refused before anything is sent, and the next
    // DDATA of the metric says it still holds 42.
    let sent = host.messages().len();
    host.send(&format!("dcmd {NODE} {DEVICE} fast/level UINT16 5000"));
    host.wait(
        "a DDATA of fast/level = 42 after the out-of-range DCMD",
        |m| {
            m[sent..]
                .iter()
                .any(|x| x["type"] == "DDATA" && live_value(x, "fast/level") == Some(json!(42)))
        },
    );
    wait_until(POLL_DEADLINE, "three command records upstream", || {
        receiver
            .records()
            .iter()
            .filter(|r| r["source"] == format!("command/{DEVICE}"))
            .count()
            >= 3
    });
    let records: Vec<Value> = receiver
        .records()
        .into_iter()
        .filter(|r| r["source"] == format!("command/{DEVICE}"))
        .collect();
    let result = |point: &str, value: Value| -> String {
        let r = records
            .iter()
            .find(|r| r["payload"]["points"][point]["value"] == value)
            .unwrap_or_else(|| panic!("no record of {point} = {value}: {records:#?}"));
        assert_eq!(r["payload"]["origin"]["path"], "sparkplug", "{r:#}");
        assert_eq!(
            r["payload"]["origin"]["topic"],
            format!("spBv1.0/{GROUP}/DCMD/{NODE}/{DEVICE}"),
            "{r:#}"
        );
        r["payload"]["points"][point]["result"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(result("level", json!(42)), "written");
    assert_eq!(result("count", json!(9)), "refused");
    assert_eq!(result("level", json!(5000)), "out_of_range");
    assert_eq!(
        device.read_holding(0, 1),
        [1234],
        "the read-only point is unchanged"
    );
    assert_eq!(writes(&device), before + 1, "one write reached the device");
    let s = spb(&daemon);
    assert_eq!(u64_at(&s, "/commands/executed"), 3, "{s:#}");
    assert!(host.messages().iter().all(|v| v["type"] != "error"));
}

/// The DCMDs node `uns` has dealt with so far: executed, ignored, or set aside as retained.
fn dcmds_handled(daemon: &Daemon) -> u64 {
    let c = &spb(daemon)["commands"];
    ["executed", "ignored", "retained"]
        .iter()
        .map(|k| c[k].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn a_retained_dcmd_is_written_once_and_never_again_at_a_restart_of_the_connector_or_of_the_broker()
{
    let mut broker = Mosquitto::start();
    let device = ModbusTcp::start();
    let mut host = Host::start(&broker);
    let mut cfg = config(&broker, &device, 100);
    cfg["commands"] = json!({});
    cfg["devices"][0]["points"][3]["writable"] = json!(true);
    let mut daemon = Daemon::start(cfg);
    host.wait("the device's DBIRTH", |m| {
        m.iter()
            .any(|v| v["type"] == "DBIRTH" && v["device"] == DEVICE)
    });
    // Sent live (the broker forwards it to the node unflagged): one write.
    host.send(&format!(
        "dcmd-retained {NODE} {DEVICE} fast/level UINT16 42"
    ));
    wait_until(POLL_DEADLINE, "the register holds the DCMD's value", || {
        device.read_holding(LEVEL_REGISTER, 1) == [42]
    });
    wait_until(POLL_DEADLINE, "the DCMD executed", || {
        dcmds_handled(&daemon) >= 1
    });
    // The operator moves the level on by hand; a DCMD run again would put 42 back.
    write_register(&device, LEVEL_REGISTER, 7);
    let writes = || device.read_holding(DEVICE_WRITES, 1)[0];
    let after = writes();

    // The broker hands the retained DCMD to every new subscription of the node.
    for restart in ["the connector", "the connector again", "the broker"] {
        let handled = if restart == "the broker" {
            let before = dcmds_handled(&daemon);
            broker.stop();
            broker.restart();
            before
        } else {
            daemon.stop();
            daemon.restart();
            0
        };
        wait_until(
            POLL_DEADLINE,
            &format!("the retained DCMD handed to the node after a restart of {restart}"),
            || dcmds_handled(&daemon) > handled,
        );
        let c = spb(&daemon)["commands"].clone();
        assert_eq!(
            (writes(), device.read_holding(LEVEL_REGISTER, 1)[0]),
            (after, 7),
            "nothing written after a restart of {restart}: {c:#}"
        );
        assert_eq!(u64_at(&c, "/executed"), 0, "{c:#}");
        assert!(u64_at(&c, "/retained") >= 1, "{c:#}");
    }
    assert!(
        uns_sample(
            &daemon.metrics(),
            "opex_connector_sparkplug_commands_retained_total"
        ) >= 1.0
    );
}

#[test]
fn records_of_ingest_and_webhooks_routed_to_the_node_become_devices_named_after_their_source_and_a_new_metric_makes_a_rebirth(
) {
    let broker = Mosquitto::start();
    let device = ModbusTcp::start();
    let host = Host::start(&broker);
    let mut cfg = config(&broker, &device, 1000);
    cfg["webhooks"] = json!([webhook(HOOK, HOOK_SECRET, "on_done")]);
    cfg["flows"] = json!([{
        "id": "uns",
        "nodes": [
            {"id": "orders", "kind": "source", "source": format!("ingest/{SOURCE}")},
            {"id": "hook", "kind": "source", "source": format!("webhook/{HOOK}")},
            {"id": "out", "kind": "sink", "sink": "uns"},
        ],
        "wires": [{"from": "orders", "to": "out"}, {"from": "hook", "to": "out"}],
    }]);
    let daemon = Daemon::start(cfg);
    wait_until(POLL_DEADLINE, "the node publishes", || {
        spb(&daemon)["publishing"] == true
    });
    let orders = format!("ingest:{SOURCE}");
    let births_of = |device: &str| -> Vec<Value> {
        of_type(&host.node_messages(), "DBIRTH")
            .into_iter()
            .filter(|v| v["device"] == device)
            .cloned()
            .collect()
    };

    let reply = daemon.ingest("o-1", r#"{"qty":2,"line":{"speed":1.5}}"#);
    assert_eq!(reply.status, 200, "{}", reply.body);
    host.wait("the DBIRTH of the ingest source's device", |_| {
        !births_of(&orders).is_empty()
    });
    let birth = births_of(&orders)[0].clone();
    assert_eq!(metric(&birth, "qty")["datatype"], "INT64", "{birth:#}");
    assert_eq!(metric(&birth, "qty")["value"], 2);
    assert_eq!(metric(&birth, "line/speed")["datatype"], "DOUBLE");
    let qty_alias = u64_at(metric(&birth, "qty"), "/alias");

    // A known metric that changed: DDATA by alias, no rebirth.
    assert_eq!(daemon.ingest("o-2", r#"{"qty":3}"#).status, 200);
    host.wait("DDATA of qty = 3", |m| {
        m.iter().any(|x| {
            x["type"] == "DDATA" && x["device"] == orders && live_value(x, "qty") == Some(json!(3))
        })
    });
    assert_eq!(births_of(&orders).len(), 1);

    // A new metric name: the device is born again with every metric, aliases kept.
    assert_eq!(
        daemon.ingest("o-3", r#"{"qty":3,"note":"rush"}"#).status,
        200
    );
    host.wait("a second DBIRTH of the device", |_| {
        births_of(&orders).len() == 2
    });
    let reborn = births_of(&orders)[1].clone();
    assert_eq!(u64_at(metric(&reborn, "qty"), "/alias"), qty_alias);
    assert_eq!(metric(&reborn, "qty")["value"], 3);
    assert_eq!(metric(&reborn, "line/speed")["value"], 1.5);
    assert_eq!(
        (
            metric(&reborn, "note")["datatype"].as_str(),
            &metric(&reborn, "note")["value"]
        ),
        (Some("STRING"), &json!("rush"))
    );

    // A webhook's records: a device of their own.
    let hook = format!("webhook:{HOOK}");
    let reply = daemon.hook(HOOK, HOOK_SECRET, r#"{"amount":12.5,"currency":"EUR"}"#);
    assert_eq!(reply.status, 200, "{}", reply.body);
    host.wait("the DBIRTH of the webhook's device", |_| {
        !births_of(&hook).is_empty()
    });
    let birth = births_of(&hook)[0].clone();
    assert_eq!(metric(&birth, "amount")["datatype"], "DOUBLE");
    assert_eq!(metric(&birth, "currency")["value"], "EUR");
    let msgs = host.node_messages();
    assert_seq_without_gap(&msgs);
    assert!(
        host.messages().iter().all(|v| v["type"] != "error"),
        "{msgs:#?}"
    );
    // The polled device is not in the flow: it is not a device of the node.
    assert!(births_of(DEVICE).is_empty(), "{msgs:#?}");
}

#[test]
fn a_primary_host_speaking_sparkplug_2_2_on_state_id_with_online_and_offline_is_followed() {
    let broker = Mosquitto::start();
    let device = ModbusTcp::start();
    let daemon = Daemon::start(config(&broker, &device, 1000));
    let host = MqttClient::connect(
        broker.port(),
        "host-2-2",
        Some(&format!("spBv1.0/{GROUP}/#")),
    );
    let state = |payload: &str| {
        host.rt
            .block_on(host.client.publish(
                format!("STATE/{HOST_ID}"),
                rumqttc::QoS::AtLeastOnce,
                true,
                payload.as_bytes().to_vec(),
            ))
            .expect("queue the STATE");
    };
    let topics = || -> Vec<String> { host.received().into_iter().map(|(t, _)| t).collect() };
    let nbirth = format!("spBv1.0/{GROUP}/NBIRTH/{NODE}");
    let ndeath = format!("spBv1.0/{GROUP}/NDEATH/{NODE}");
    wait_until(
        POLL_DEADLINE,
        "the node connected, waiting for its host",
        || {
            let s = spb(&daemon);
            s["connected"] == true && s["primary_host"]["state"] == "unknown"
        },
    );
    assert!(
        topics().is_empty(),
        "nothing before the host: {:?}",
        topics()
    );

    // Retained, so the node reads it whenever its subscription lands.
    state("ONLINE");
    let dbirth = format!("spBv1.0/{GROUP}/DBIRTH/{NODE}/{DEVICE}");
    wait_until(POLL_DEADLINE, "the NBIRTH and DBIRTH after ONLINE", || {
        let t = topics();
        t.contains(&nbirth) && t.contains(&dbirth)
    });
    assert_eq!(spb(&daemon)["primary_host"]["state"], "online");
    state("OFFLINE");
    wait_until(POLL_DEADLINE, "the node's own NDEATH after OFFLINE", || {
        topics().contains(&ndeath)
    });
    wait_until(POLL_DEADLINE, "the node stops publishing", || {
        let s = spb(&daemon);
        s["primary_host"]["state"] == "offline" && s["publishing"] == false
    });
    state("ONLINE");
    wait_until(POLL_DEADLINE, "a second NBIRTH after ONLINE again", || {
        topics().iter().filter(|t| **t == nbirth).count() == 2
    });
    assert!(u64_at(&spb(&daemon), "/sessions") >= 2);
}

/// The sample of `family` labelled `sink="uns"` in the Prometheus text.
fn uns_sample(text: &str, family: &str) -> f64 {
    let series = format!("{family}{{sink=\"uns\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series:?} in:\n{text}"))
}

#[test]
fn status_and_metrics_show_each_sparkplug_node_with_its_session_host_sequence_messages_commands_and_historical_records(
) {
    let broker = Mosquitto::start();
    let device = ModbusTcp::start();
    let mut host = Host::start(&broker);
    let mut cfg = config(&broker, &device, 100);
    cfg["commands"] = json!({});
    let daemon = Daemon::start(cfg);
    host.wait("the device's DBIRTH", |m| {
        m.iter()
            .any(|v| v["type"] == "DBIRTH" && v["device"] == DEVICE)
    });
    write_register(&device, LEVEL_REGISTER, 3);
    host.wait("DDATA of fast/level = 3", |m| {
        m.iter()
            .any(|x| x["type"] == "DDATA" && live_value(x, "fast/level") == Some(json!(3)))
    });
    host.send(&format!("dcmd {NODE} {DEVICE} fast/count UINT16 9"));
    wait_until(POLL_DEADLINE, "the DCMD answered", || {
        u64_at(&spb(&daemon), "/commands/executed") == 1
    });

    // The host's messages before the status: a counter is counted before its message leaves,
    // so the status read after counts at least what the host has by then.
    let msgs = host.node_messages();
    let status = daemon.status();
    let entry = named(&status, "/sinks", "uns").clone();
    assert_eq!(entry["type"], "sparkplug", "{entry:#}");
    assert_eq!(entry["connected"], true, "{entry:#}");
    let s = entry["sparkplug"].clone();
    assert_eq!(status["sink_status"]["uns"]["sparkplug"]["group_id"], GROUP);
    assert_eq!(
        (&s["group_id"], &s["edge_node_id"]),
        (&json!(GROUP), &json!(NODE))
    );
    assert_eq!(s["connected"], true, "{s:#}");
    assert_eq!(s["publishing"], true, "{s:#}");
    assert_eq!(
        s["primary_host"],
        json!({"id": HOST_ID, "state": "online"}),
        "{s:#}"
    );
    let nbirth = of_type(&msgs, "NBIRTH")[0].clone();
    assert_eq!(u64_at(&s, "/bdSeq"), bd_seq(&nbirth), "{s:#}");
    assert_eq!(u64_at(&s, "/sessions"), 1, "{s:#}");
    // Births: the NBIRTH and the device's DBIRTH; data: at least the change above.
    assert_eq!(u64_at(&s, "/births"), 2, "{s:#}");
    let live = of_type(&msgs, "DDATA")
        .iter()
        .filter(|d| d["metrics"][0]["historical"] == false)
        .count() as u64;
    assert!(u64_at(&s, "/data_messages") >= live && live >= 1, "{s:#}");
    assert_eq!(
        s["commands"],
        json!({"received": 1, "executed": 1, "ignored": 0, "dropped": 0, "retained": 0,
               "rebirths": 0}),
        "{s:#}"
    );
    assert_eq!(u64_at(&s, "/historical/waiting"), 0, "{s:#}");
    // The polls taken before the births went out as historical data.
    let historical = of_type(&msgs, "DDATA")
        .iter()
        .filter(|d| d["metrics"][0]["historical"] == true)
        .count() as u64;
    assert_eq!(u64_at(&s, "/historical/messages"), historical, "{s:#}");
    assert!(u64_at(&s, "/historical/sent") >= historical, "{s:#}");
    // seq: the last message the node published (its NDATA may come after what the host saw).
    assert!(u64_at(&s, "/seq") < 256, "{s:#}");

    let text = daemon.metrics();
    assert_eq!(uns_sample(&text, "opex_connector_sparkplug_connected"), 1.0);
    assert_eq!(
        uns_sample(&text, "opex_connector_sparkplug_publishing"),
        1.0
    );
    assert_eq!(
        uns_sample(&text, "opex_connector_sparkplug_bdseq"),
        bd_seq(&nbirth) as f64
    );
    assert_eq!(
        uns_sample(&text, "opex_connector_sparkplug_births_total"),
        2.0
    );
    assert!(uns_sample(&text, "opex_connector_sparkplug_data_messages_total") >= 1.0);
    assert_eq!(
        uns_sample(&text, "opex_connector_sparkplug_commands_total"),
        1.0
    );
    assert_eq!(
        uns_sample(&text, "opex_connector_sparkplug_sessions_total"),
        1.0
    );
    assert_eq!(
        uns_sample(&text, "opex_connector_sparkplug_historical_waiting"),
        0.0
    );
    assert!(text.contains("# TYPE opex_connector_sparkplug_births_total counter"));
}

/// A record whose Sparkplug message was over the client's 1 MiB packet cap used to drop the
/// node's connection at every attempt: the next session's births carried its values again,
/// and nothing behind it went out.
#[test]
fn a_record_over_the_mqtt_packet_cap_is_dead_lettered_and_the_twenty_behind_it_go_out_in_one_session(
) {
    use opex_connector::sinks::sparkplug::proto::{Payload, Value as Spb};
    let broker = Mosquitto::start();
    let subscriber = MqttClient::connect(broker.port(), "it-spb-big-sub", Some("spBv1.0/#"));
    let mut config = queue_config(64, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["connector"]["http"]["max_body_kb"] = json!(2048);
    config["mqtt"] = json!({"connections": [{"name": "broker", "url": broker.url(),
        "client_id": "it-spb-big", "reconnect_max_ms": 200}]});
    config["sinks"] = json!([{"name": "uns", "type": "sparkplug", "connection": "broker",
        "group_id": GROUP, "edge_node_id": NODE, "queue": "disk", "max_quota_mb": 64}]);
    config["flows"] = ingest_flow(&["uns"]);
    let daemon = Daemon::start(config);
    wait_until(POLL_DEADLINE, "the node publishes", || {
        spb(&daemon)["publishing"] == true
    });
    let big = assert_stored(
        &daemon.ingest("big", &padded_payload("big", MIB as usize + 1024)),
        "the big record is queued",
    );
    for i in 0..20 {
        assert_stored(
            &daemon.ingest(&format!("q{i}"), &format!(r#"{{"qty":{i}}}"#)),
            "small",
        );
    }
    let device = format!("ingest:{SOURCE}");
    let quantities = || -> BTreeSet<u64> {
        subscriber
            .received()
            .iter()
            .filter(|(t, _)| {
                t.ends_with(&format!("/{NODE}/{device}"))
                    && (t.contains("/DDATA/") || t.contains("/DBIRTH/"))
            })
            .filter_map(|(_, p)| Payload::decode_bytes(p).ok())
            .flat_map(|p| p.metrics)
            .filter_map(|m| match m.value {
                Some(Spb::LongValue(v)) => Some(v),
                _ => None,
            })
            .collect()
    };
    wait_until(
        Duration::from_secs(20),
        "the 20 small records behind the big one go out",
        || quantities() == (0..20).collect(),
    );
    wait_until(POLL_DEADLINE, "the big record is a dead letter", || {
        u64_at(
            named(&daemon.status(), "/sinks", "uns"),
            "/dead_letter_rows",
        ) == 1
    });
    let reply = daemon.get("/api/sinks/uns/dead-letters?limit=10", Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "{reply:?}");
    let letters = reply.json();
    let letter = &letters["rows"][0];
    assert_eq!(letter["record"]["id"], json!(big), "{letters:#}");
    let reason = letter["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("too large") && reason.contains("1048576"),
        "{reason}"
    );
    let s = spb(&daemon);
    assert_eq!(s["connected"], true, "{s}");
    assert_eq!(u64_at(&s, "/sessions"), 1, "{s}");
    assert_eq!(u64_at(&s, "/records_too_large"), 1, "{s}");
    let l = assert_balanced(&ledger(&daemon, true), "after the big record");
    let source = format!("ingest/{SOURCE}");
    assert_eq!(source_figure(&l, &source, "/dead_lettered"), 1, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/lost"), 0, "{l:#}");
}

/// The last value the host saw of node metric `name` (births and data messages, in order).
fn last_node_value(msgs: &[Value], name: &str) -> Option<Value> {
    msgs.iter()
        .filter(|v| v["type"] == "NBIRTH" || v["type"] == "NDATA")
        .filter_map(|v| {
            v["metrics"]
                .as_array()?
                .iter()
                .find(|m| m["name"] == name)
                .map(|m| m["value"].clone())
        })
        .next_back()
}

#[test]
fn connector_healthy_follows_the_health_model_a_device_down_is_unhealthy_there_and_degraded_in_the_status_while_ota_stays_healthy(
) {
    let broker = Mosquitto::start();
    let mut device = ModbusTcp::start();
    let host = Host::start(&broker);
    let mut config = config(&broker, &device, 100);
    // The model is assessed on the alert hub's beat: every second here.
    config["telemetry"] = json!({"alerts": {"check_interval_secs": 1}});
    let daemon = Daemon::start(config);
    let healthy = |want: bool| {
        move |m: &[Value]| last_node_value(m, "Connector/Healthy") == Some(json!(want))
    };
    host.wait("Connector/Healthy true", healthy(true));
    assert_eq!(daemon.status()["state"], "ok");

    device.stop();
    host.wait("Connector/Healthy false", healthy(false));
    let status = daemon.status();
    assert_eq!(status["state"], "degraded", "{status:#}");
    assert!(
        status["problems"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["component"] == "device press")),
        "{status:#}"
    );
    assert_eq!(status["connector"]["healthy"], true);

    device.restart();
    host.wait("Connector/Healthy true again", healthy(true));
    wait_until(POLL_DEADLINE, "the state ok again", || {
        daemon.status()["state"] == "ok"
    });
}

#[test]
#[cfg(feature = "s7")]
fn an_s7_plcs_points_are_born_with_their_types_and_a_dcmd_writes_one_bit_of_the_plc_alone() {
    let broker = Mosquitto::start();
    let plc = S7Plc::start(&[("DB", 10, typed_db())]);
    let mut host = Host::start(&broker);
    let p =
        |name: &str, address: &str, t: &str| json!({"name": name, "address": address, "type": t});
    let cfg = json!({
        "connector": {"name": "it", "http": {"admin_token": ADMIN_TOKEN}},
        "commands": {},
        "mqtt": {"connections": [{"name": "broker", "url": broker.url(), "client_id": "it-spb",
                                  "keep_alive_secs": 5, "reconnect_max_ms": 200}]},
        "devices": [{
            "name": "plc", "protocol": "s7", "host": "127.0.0.1", "port": plc.port(),
            "timeout_ms": 2000, "backoff_max_secs": 1,
            "groups": [{"name": "main", "interval_ms": 100}],
            "points": [
                p("running", "DB10.DBX0.3", "bool"),
                {"name": "lamp", "address": "DB10.DBX0.4", "writable": true},
                p("int", "DB10.DBW6", "int"),
                p("dword", "DB10.DBD8", "dword"),
                p("real", "DB10.DBD16", "real"),
                {"name": "text", "address": "DB10.DBB28", "type": "string", "length": 10},
            ],
        }],
        "sinks": [{"name": "uns", "type": "sparkplug", "connection": "broker",
                   "group_id": GROUP, "edge_node_id": NODE, "primary_host_id": HOST_ID,
                   "queue": "disk", "max_quota_mb": 16}],
    });
    let _daemon = Daemon::start(cfg);
    host.wait("the PLC's DBIRTH with its values", |m| {
        m.iter().any(|v| {
            v["type"] == "DBIRTH"
                && v["device"] == "plc"
                && v["metrics"].as_array().is_some_and(|ms| {
                    ms.iter()
                        .any(|x| x["name"] == "main/int" && x["value"] == -2)
                })
        })
    });
    let msgs = host.node_messages();
    let dbirth = of_type(&msgs, "DBIRTH")
        .into_iter()
        .rev()
        .find(|v| v["device"] == "plc" && metric(v, "main/int")["value"] == -2)
        .expect("a DBIRTH with values")
        .clone();
    for (name, datatype, value) in [
        ("main/running", "BOOLEAN", json!(true)),
        ("main/lamp", "BOOLEAN", json!(false)),
        ("main/int", "INT16", json!(-2)),
        ("main/dword", "UINT32", json!(3_735_928_559u64)),
        ("main/real", "FLOAT", json!(-3.5)),
        ("main/text", "STRING", json!("Ofen 3")),
    ] {
        let m = metric(&dbirth, name);
        assert_eq!(
            (&m["datatype"], &m["value"]),
            (&json!(datatype), &value),
            "{m:#}"
        );
    }

    host.send(&format!("dcmd {NODE} plc main/lamp BOOLEAN true"));
    wait_until(POLL_DEADLINE, "the PLC's bit set by the DCMD", || {
        plc.memory("DB", 10).first() == Some(&0b0011_1000)
    });
    host.wait("the write shows as the next DDATA of the metric", |m| {
        m.iter()
            .any(|x| x["type"] == "DDATA" && live_value(x, "main/lamp") == Some(json!(true)))
    });
    assert!(
        plc.log()
            .lines()
            .any(|l| l.starts_with("write area=DB index=10 start=0 bit=4 data=01")),
        "one BIT item, never the byte: {}",
        plc.log()
    );
    assert!(host.messages().iter().all(|v| v["type"] != "error"));
}

#[test]
fn a_point_added_by_a_reload_is_in_the_births_of_the_nodes_next_session() {
    let broker = Mosquitto::start();
    let device = ModbusTcp::start();
    let host = Host::start(&broker);
    let daemon = Daemon::start(config(&broker, &device, 100));
    host.wait("the device's DBIRTH", |m| {
        m.iter()
            .any(|v| v["type"] == "DBIRTH" && v["device"] == DEVICE)
    });
    let text = std::fs::read_to_string(daemon.config_path()).expect("the config file");
    let mut new: Value = serde_saphyr::from_str(&text).expect("YAML");
    new["devices"][0]["points"]
        .as_array_mut()
        .expect("points")
        .push(json!({"name": "added", "register": 2, "type": "u16"}));
    let reply = daemon.post("/api/config", Some(ADMIN_TOKEN), to_yaml(&new).as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    assert_eq!(
        body["changes"]["restart"],
        json!([format!("device/{DEVICE}"), "sink/uns"]),
        "{body}"
    );

    // The node ends its session (NDEATH) and is born again with the new point.
    let has_added = |v: &Value| {
        v["type"] == "DBIRTH"
            && v["device"] == DEVICE
            && v["metrics"]
                .as_array()
                .is_some_and(|ms| ms.iter().any(|m| m["name"] == "fast/added"))
    };
    host.wait("a DBIRTH with the added point", |m| m.iter().any(has_added));
    let msgs = host.node_messages();
    let births = of_type(&msgs, "NBIRTH");
    assert_eq!(births.len(), 2, "{msgs:#?}");
    assert!(bd_seq(births[1]) > bd_seq(births[0]), "a new session");
    let death = msgs
        .iter()
        .position(|v| v["type"] == "NDEATH")
        .expect("the old session's NDEATH");
    let reborn = msgs
        .iter()
        .position(|v| v["type"] == "NBIRTH" && bd_seq(v) == bd_seq(births[1]));
    assert!(reborn.is_some_and(|b| b > death), "{msgs:#?}");
    let added = msgs.iter().find(|v| has_added(v)).expect("the DBIRTH");
    assert_eq!(
        metric(added, "fast/added")["value"],
        json!(device.read_holding(2, 1)[0])
    );
    assert_seq_without_gap(&msgs);
    assert!(
        host.messages().iter().all(|v| v["type"] != "error"),
        "{msgs:#?}"
    );
}
