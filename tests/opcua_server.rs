//! The northbound OPC-UA server (`opcua_server:`), read and written by clients written by
//! others: asyncua's client (browse, read, subscribe, write; `common::OpcuaClient`) and
//! node-opcua's (a secure session after its certificate is trusted; `node_opcua_read`),
//! serving a pymodbus device's registers polled by the connector.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use serde_json::{json, Value};

const COMMANDS_TOKEN: &str = "cmd-t0ken-0123456789";
const ENG: (&str, &str) = ("eng", "wr1te-the-setp0int");
const VIEWER: (&str, &str) = ("viewer", "just-l00king-here");

/// The Argon2id hash of `password`, as `opex-connector hash-password` prints it.
fn hash(password: &str) -> String {
    let mut child = Command::new(BIN)
        .arg("hash-password")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("hash-password starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{password}\n").as_bytes())
        .expect("password written");
    let out = child.wait_with_output().expect("hash-password ends");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

/// A connector polling `device` (pymodbus) every 100 ms, with commands and the server on
/// `port` offering `security`.
fn config(device: u16, port: u16, security: Value) -> Value {
    json!({
        "connector": {
            "http": {"admin_token": ADMIN_TOKEN},
            "push_queue": {"enabled": true, "max_quota_mb": 16, "on_full": "evict_oldest"},
        },
        "commands": {"token": COMMANDS_TOKEN},
        "devices": [{
            "name": "press-1",
            "protocol": "modbus_tcp",
            "host": "127.0.0.1",
            "port": device,
            "unit": 1,
            "timeout_ms": 500,
            "backoff_max_secs": 2,
            "groups": [{"name": "main", "interval_ms": 100}],
            "points": [
                {"name": "speed", "register": 0, "type": "u16", "unit": "rpm"},
                {"name": "f32_big", "register": 6, "type": "f32", "unit": "°C"},
                {"name": "free", "register": 34, "writable": true, "min": 0, "max": 1000},
                {"name": "tenths", "register": 35, "type": "i16", "scale": 0.1},
            ],
        }],
        "opcua_server": {
            "listen": format!("127.0.0.1:{port}"),
            "hostnames": ["127.0.0.1", "localhost"],
            "security": security,
            "users": [
                {"name": ENG.0, "password_hash": hash(ENG.1), "role": "write"},
                {"name": VIEWER.0, "password_hash": hash(VIEWER.1)},
            ],
        },
    })
}

/// Security None (listed), and Basic256Sha256 SignAndEncrypt.
fn both() -> Value {
    json!([
        {"policy": "None", "mode": "None"},
        {"policy": "Basic256Sha256", "mode": "SignAndEncrypt"},
    ])
}

fn endpoint(port: u16) -> String {
    format!("opc.tcp://127.0.0.1:{port}/")
}

/// A client logged in as `user` on the None endpoint.
fn client(port: u16, user: (&str, &str)) -> OpcuaClient {
    let c = OpcuaClient::start(
        &endpoint(port),
        &ClientOptions::anonymous().user(user.0, user.1),
    );
    let mut last = String::new();
    wait_until(
        POLL_DEADLINE,
        "a session with the connector's server",
        || match c.connect() {
            Ok(()) => true,
            Err(e) => {
                last = e;
                false
            }
        },
    );
    c
}

/// The node id of point `name` of press-1, found by browsing.
fn point(c: &OpcuaClient, name: &str) -> String {
    let tree = c.browse();
    // Under Objects itself (Objects/Connector/Devices has a press-1 too).
    let device = tree
        .iter()
        .find(|n| n["browse_name"] == json!("press-1"))
        .unwrap_or_else(|| panic!("no press-1 in {tree:#?}"));
    let group = find_node(device["children"].as_array().map_or(&[][..], |v| v), "main")
        .unwrap_or_else(|| panic!("no group main in {device:#}"));
    let p = find_node(group["children"].as_array().map_or(&[][..], |v| v), name)
        .unwrap_or_else(|| panic!("no point {name} in {group:#}"));
    p["node_id"].as_str().unwrap_or_default().to_string()
}

/// Reads `node` until it is Good (the first poll came).
fn read_good(c: &OpcuaClient, node: &str) -> Value {
    let mut got = Value::Null;
    wait_until(POLL_DEADLINE, "a good value", || {
        got = c.read(&[node]).remove(0);
        got["status"] == json!("Good")
    });
    got
}

#[test]
fn a_scada_client_browses_reads_subscribes_and_writes_through_the_commands_path() {
    let device = ModbusTcp::start();
    let port = free_port();
    let d = Daemon::start(config(device.port(), port, both()));
    let eng = client(port, ENG);

    // Objects/press-1/main/<point>, node ids made of the names.
    let speed = point(&eng, "speed");
    assert!(speed.ends_with(";s=press-1.speed"), "{speed}");
    let (f32_big, free, tenths) = (
        point(&eng, "f32_big"),
        point(&eng, "free"),
        point(&eng, "tenths"),
    );

    // Each type as the device holds it, with its poll's time.
    let s = read_good(&eng, &speed);
    assert_eq!(s["data_type"], json!("UInt16"), "{s:#}");
    assert_eq!(s["value"], json!(device.read_holding(0, 1)[0]), "{s:#}");
    assert!(s["source_ts"].is_string(), "{s:#}");
    let f = read_good(&eng, &f32_big);
    assert_eq!(f["data_type"], json!("Float"), "{f:#}");
    let t = read_good(&eng, &tenths);
    assert_eq!(t["data_type"], json!("Double"), "a scaled point: {t:#}");

    // The gateway itself: version, health, each sink, queue and device.
    let ns = speed.split(';').next().unwrap_or_default();
    let connector = |n: &str| format!("{ns};s=@connector.{n}");
    let version = eng.read(&[&connector("version")]).remove(0);
    assert_eq!(
        version["value"],
        json!(env!("CARGO_PKG_VERSION")),
        "{version:#}"
    );
    let state = eng.read(&[&connector("devices.press-1.state")]).remove(0);
    assert_eq!(state["value"], json!("connected"), "{state:#}");
    let push = eng.read(&[&connector("sinks.push.accepting")]).remove(0);
    assert_eq!(push["value"], json!(true), "{push:#}");
    let fill = eng
        .read(&[&connector("queues.push_queue.fill_pct")])
        .remove(0);
    assert_eq!(fill["data_type"], json!("Double"), "{fill:#}");
    let health = eng.read(&[&connector("health")]).remove(0);
    assert!(health["value"].is_string(), "{health:#}");

    // The standard nodes a client reads on connecting (served by the connector itself, not
    // the stack's generated namespace): the state Running, the clock, and the namespaces, the
    // server's own at 1 and the devices' at 2.
    let standard = Value::from(eng.read(&["i=2259", "i=2258", "i=2255"]));
    assert_eq!(standard[0]["value"], json!(0), "{standard:#}");
    assert_eq!(standard[1]["data_type"], json!("DateTime"), "{standard:#}");
    let namespaces = &standard[2]["value"];
    assert_eq!(
        namespaces[0],
        json!("http://opcfoundation.org/UA/"),
        "{standard:#}"
    );
    assert!(
        namespaces[1]
            .as_str()
            .is_some_and(|u| u.starts_with("urn:")),
        "{standard:#}"
    );
    assert_eq!(ns, "ns=2", "{standard:#}");
    assert!(namespaces[2].is_string(), "{standard:#}");

    // Units, range and access level.
    let attrs = eng.read_attrs(&free);
    assert_eq!(
        attrs["EURange"],
        json!({"low": 0.0, "high": 1000.0}),
        "{attrs:#}"
    );
    assert_eq!(
        attrs["access_level"].as_u64().map(|a| a & 3),
        Some(3),
        "{attrs:#}"
    );
    let speed_attrs = eng.read_attrs(&speed);
    // Its browse name is in the devices' namespace, as a browse path names it (`2:speed`).
    assert_eq!(speed_attrs["browse_name_ns"], json!(2), "{speed_attrs:#}");
    assert_eq!(
        speed_attrs["EngineeringUnits"]["display_name"],
        json!("rpm"),
        "{speed_attrs:#}"
    );
    assert_eq!(
        speed_attrs["access_level"].as_u64().map(|a| a & 3),
        Some(1),
        "{speed_attrs:#}"
    );

    // A change on the device reaches a subscription.
    read_good(&eng, &free);
    eng.subscribe(&[&free], 100);
    device.write_holding(34, 77);
    wait_until(POLL_DEADLINE, "the change of register 34 notified", || {
        eng.changes(0).iter().any(|c| c["value"] == json!(77))
    });

    // A write goes to the device through the commands path.
    assert_eq!(eng.write(&free, json!(123), "UInt16"), "Good");
    assert_eq!(device.read_holding(34, 1), [123]);
    // Out of bounds, or of another type: refused, nothing sent.
    assert_eq!(eng.write(&free, json!(5000), "UInt16"), "BadOutOfRange");
    assert_eq!(eng.write(&free, json!(7), "Int32"), "BadTypeMismatch");
    // Not writable.
    assert_eq!(eng.write(&speed, json!(1), "UInt16"), "BadUserAccessDenied");
    assert_eq!(device.read_holding(34, 1), [123]);

    // A read user may read, not write.
    let viewer = client(port, VIEWER);
    read_good(&viewer, &free);
    assert_eq!(
        viewer.write(&free, json!(9), "UInt16"),
        "BadUserAccessDenied"
    );
    assert_eq!(device.read_holding(34, 1), [123]);

    // No anonymous session, no wrong password.
    let anonymous = OpcuaClient::start(&endpoint(port), &ClientOptions::anonymous());
    assert!(anonymous.connect().is_err());
    let wrong = OpcuaClient::start(
        &endpoint(port),
        &ClientOptions::anonymous().user(ENG.0, "guess"),
    );
    assert!(wrong.connect().is_err());

    // eng and viewer listed with their client application and security, as the page
    // shows them.
    wait_until(POLL_DEADLINE, "eng and viewer in the open sessions", || {
        let status = d.status();
        let open = status["opcua_server"]["open_sessions"].as_array().cloned();
        let users: Vec<String> = open
            .unwrap_or_default()
            .iter()
            .filter(|s| s["application"] == "opex test client")
            .filter(|s| s["security"].as_str().is_some_and(|x| !x.is_empty()))
            .filter_map(|s| s["user"].as_str().map(str::to_string))
            .collect();
        users.contains(&"eng".to_string()) && users.contains(&"viewer".to_string())
    });
    let status = d.status();
    let server = &status["opcua_server"];
    assert_eq!(server["listening"], json!(true), "{server:#}");
    assert_eq!(
        server["endpoints"].as_array().map(Vec::len),
        Some(2),
        "{server:#}"
    );
    assert_eq!(server["writes_good"], json!(1), "{server:#}");
    // eng's one monitored item; eng and viewer still logged in.
    assert_eq!(server["monitored_items"], json!(1), "{server:#}");
    assert!(u64_at(server, "/sessions") >= 2, "{server:#}");
    assert!(u64_at(server, "/subscriptions") >= 1, "{server:#}");
    assert!(u64_at(server, "/reads") >= 5, "{server:#}");
    let metrics = d.metrics();
    assert!(
        metrics.contains("opex_connector_opcua_server_writes_good_total 1"),
        "{metrics}"
    );
    assert_eq!(
        server["refused_logins"],
        json!(1),
        "the wrong password: {server:#}"
    );
    // The write is a command like any other, on record with its origin.
    let written = u64_at(named(&status, "/devices", "press-1"), "/commands/written");
    assert_eq!(written, 1, "{status:#}");
}

/// `node`'s references as `(type, forward, node id, type definition)`, sorted.
fn references(
    c: &OpcuaClient,
    node: &str,
    per_answer: u32,
) -> (Vec<(String, bool, String, Value)>, u64) {
    let (refs, answers) = c.references(node, per_answer);
    let mut out: Vec<_> = refs
        .iter()
        .map(|r| {
            (
                r["type"].as_str().unwrap_or_default().to_owned(),
                r["forward"] == json!(true),
                r["node_id"].as_str().unwrap_or_default().to_owned(),
                r["type_definition"].clone(),
            )
        })
        .collect();
    out.sort_by(|a, b| (&a.0, a.1, &a.2).cmp(&(&b.0, b.1, &b.2)));
    (out, answers)
}

#[test]
fn a_group_a_point_and_its_property_are_browsed_both_ways_in_as_many_answers_as_the_client_asks() {
    let device = ModbusTcp::start();
    let port = free_port();
    let _d = Daemon::start(config(device.port(), port, both()));
    let c = client(port, VIEWER);
    let r = |kind: &str, forward: bool, node: &str, def: Value| {
        (kind.to_owned(), forward, node.to_owned(), def)
    };
    let (analog, plain, property, folder) =
        (json!("i=2368"), json!("i=63"), json!("i=68"), json!("i=61"));

    // The group: its four points (each with its type), its type, its device. Asked two at a
    // time, they come in four answers.
    let (group, answers) = references(&c, "ns=2;s=press-1/main", 2);
    assert_eq!(
        group,
        [
            r(
                "HasComponent",
                true,
                "ns=2;s=press-1.f32_big",
                analog.clone()
            ),
            r("HasComponent", true, "ns=2;s=press-1.free", analog.clone()),
            r("HasComponent", true, "ns=2;s=press-1.speed", analog.clone()),
            r("HasComponent", true, "ns=2;s=press-1.tenths", plain.clone()),
            r("HasTypeDefinition", true, "i=61", Value::Null),
            r("Organizes", false, "ns=2;s=press-1", folder.clone()),
        ],
        "{group:#?}"
    );
    assert_eq!(answers, 3, "six references, two an answer");

    // A point: its type, its unit, its group; all in one answer.
    let (speed, answers) = references(&c, "ns=2;s=press-1.speed", 0);
    assert_eq!(
        speed,
        [
            r("HasComponent", false, "ns=2;s=press-1/main", folder.clone()),
            r(
                "HasProperty",
                true,
                "ns=2;s=press-1.speed#EngineeringUnits",
                property.clone()
            ),
            r("HasTypeDefinition", true, "i=2368", Value::Null),
        ],
        "{speed:#?}"
    );
    assert_eq!(answers, 1);
    let (tenths, _) = references(&c, "ns=2;s=press-1.tenths", 0);
    assert_eq!(
        tenths,
        [
            r("HasComponent", false, "ns=2;s=press-1/main", folder.clone()),
            r("HasTypeDefinition", true, "i=63", Value::Null),
        ],
        "a point without unit or range: {tenths:#?}"
    );

    // A property: its type and its point.
    let (range, _) = references(&c, "ns=2;s=press-1.free#EURange", 1);
    assert_eq!(
        range,
        [
            r("HasProperty", false, "ns=2;s=press-1.free", analog),
            r("HasTypeDefinition", true, "i=68", Value::Null),
        ],
        "{range:#?}"
    );
    // A point has only the properties it was given.
    let (none, _) = references(&c, "ns=2;s=press-1.tenths#EURange", 0);
    assert!(none.is_empty(), "{none:#?}");
}

#[test]
fn a_point_added_by_a_reload_is_served_once_the_server_started_again() {
    let device = ModbusTcp::start();
    let port = free_port();
    let d = Daemon::start(config(device.port(), port, both()));
    let before = client(port, VIEWER);
    read_good(&before, &point(&before, "speed"));

    let text = std::fs::read_to_string(d.config_path()).expect("the config file");
    let mut new: Value = serde_saphyr::from_str(&text).expect("YAML");
    new["devices"][0]["points"]
        .as_array_mut()
        .expect("points")
        .push(json!({"name": "added", "register": 1, "type": "u16"}));
    let reply = d.post("/api/config", Some(ADMIN_TOKEN), to_yaml(&new).as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    assert_eq!(
        body["changes"]["restart"],
        json!(["device/press-1", "opcua_server"]),
        "{body}"
    );

    // A new session browses the new point, read with its poll's value.
    let after = client(port, VIEWER);
    let added = point(&after, "added");
    let v = read_good(&after, &added);
    assert_eq!(v["value"], json!(device.read_holding(1, 1)[0]), "{v:#}");
    assert_eq!(d.status()["opcua_server"]["listening"], json!(true));
}

#[test]
fn a_device_that_stops_answering_turns_its_variables_bad_until_it_is_back() {
    let mut device = ModbusTcp::start();
    let port = free_port();
    let _d = Daemon::start(config(device.port(), port, both()));
    let c = client(port, VIEWER);
    let speed = point(&c, "speed");
    read_good(&c, &speed);
    device.stop();
    wait_until(POLL_DEADLINE, "BadCommunicationError", || {
        c.read(&[&speed])[0]["status"] == json!("BadCommunicationError")
    });
    device.restart();
    read_good(&c, &speed);
}

#[test]
fn a_client_certificate_is_refused_until_it_is_moved_to_trusted() {
    let device = ModbusTcp::start();
    let port = free_port();
    let secure = json!([{"policy": "Basic256Sha256", "mode": "SignAndEncrypt"}]);
    let d = Daemon::start(config(device.port(), port, secure));
    let pki = tempfile::tempdir().expect("node-opcua's pki");
    let options = ClientOptions::secure("Basic256Sha256", "SignAndEncrypt").user(ENG.0, ENG.1);
    let rejected = d.data_dir().join("opcua-server-pki/rejected");
    let trusted = d.data_dir().join("opcua-server-pki/trusted");
    // The first try leaves the client's certificate in rejected/.
    let mut answer = Value::Null;
    wait_until(
        POLL_DEADLINE,
        "the client's certificate in rejected/",
        || {
            answer = node_opcua_read(&endpoint(port), &options, pki.path(), "i=2258");
            files(&rejected) > 0
        },
    );
    assert_eq!(answer["ok"], json!(false), "{answer:#}");
    for f in std::fs::read_dir(&rejected).expect("rejected/").flatten() {
        std::fs::create_dir_all(&trusted).expect("trusted/");
        std::fs::rename(f.path(), trusted.join(f.file_name())).expect("moved to trusted/");
    }
    // Trusted without a restart.
    let node = "ns=2;s=press-1.speed";
    wait_until(POLL_DEADLINE, "a secure read after the move", || {
        answer = node_opcua_read(&endpoint(port), &options, pki.path(), node);
        answer["ok"] == json!(true) && answer["status"] == json!("Good")
    });
    assert_eq!(answer["data_type"], json!("UInt16"), "{answer:#}");
}

fn files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().count())
        .unwrap_or(0)
}

#[test]
fn a_bad_server_section_is_refused_with_every_problem_and_its_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        "connector:\n  data_dir: /tmp/x\nopcua_server:\n  listen: nowhere\n  security: [{policy: Basic128, mode: Sign}]\n  users: [{name: eng, password_hash: plain}]\n",
    )
    .expect("written");
    let out = run_cli(&["validate", file.to_str().unwrap_or_default()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for line in [
        "opcua_server.listen: expected ADDRESS:PORT",
        "opcua_server.security[0].policy: expected one of None, Basic256Sha256",
        "opcua_server.users[0].password_hash: is not an Argon2id hash",
    ] {
        assert!(err.contains(line), "{line:?} missing in {err}");
    }
}

#[test]
fn an_absolute_deadband_holds_back_the_changes_inside_it() {
    deadband(json!({"type": "absolute", "value": 10.0}));
}

/// Percent of the point's EURange (0 to 1000): 1 % is 10.
#[test]
fn a_percent_deadband_holds_back_the_changes_inside_that_share_of_the_range() {
    deadband(json!({"type": "percent", "value": 1.0}));
}

/// A subscription to `free` with `band` (10 wide): 100 to 105 is not notified, to 120 is.
fn deadband(band: Value) {
    let device = ModbusTcp::start();
    let port = free_port();
    let _d = Daemon::start(config(device.port(), port, both()));
    let c = client(port, VIEWER);
    let free = point(&c, "free");
    device.write_holding(34, 100);
    wait_until(POLL_DEADLINE, "100 polled", || {
        c.read(&[&free])[0]["value"] == json!(100)
    });
    c.subscribe_with(json!({
        "nodes": [free],
        "interval_ms": 100,
        "deadband": band,
    }));
    // Inside the band: not notified; outside: notified.
    device.write_holding(34, 105);
    wait_until(POLL_DEADLINE, "105 polled", || {
        c.read(&[&free])[0]["value"] == json!(105)
    });
    device.write_holding(34, 120);
    wait_until(POLL_DEADLINE, "120 notified", || {
        c.changes(0).iter().any(|ch| ch["value"] == json!(120))
    });
    let seen: Vec<Value> = c.changes(0).iter().map(|ch| ch["value"].clone()).collect();
    assert!(!seen.contains(&json!(105)), "{seen:?}");
}

#[test]
fn a_new_server_address_is_taken_live_and_one_that_is_taken_keeps_the_server_as_it_was() {
    let device = ModbusTcp::start();
    let port = free_port();
    let d = Daemon::start(config(device.port(), port, both()));
    let first = client(port, VIEWER);
    read_good(&first, &point(&first, "speed"));

    // Another port: the server starts there alone, the device keeps polling.
    let text = std::fs::read_to_string(d.config_path()).expect("the config file");
    let mut new: Value = serde_saphyr::from_str(&text).expect("YAML");
    let moved = free_port();
    new["opcua_server"]["listen"] = json!(format!("127.0.0.1:{moved}"));
    let reply = d.post("/api/config", Some(ADMIN_TOKEN), to_yaml(&new).as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    assert_eq!(
        body["changes"]["restart"],
        json!(["opcua_server"]),
        "{body}"
    );
    let after = client(moved, VIEWER);
    read_good(&after, &point(&after, "speed"));
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the old port is closed"
    );

    // A port another program holds: refused, and the server goes on where it was.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("a port held");
    let taken = holder.local_addr().expect("its address").port();
    new["opcua_server"]["listen"] = json!(format!("127.0.0.1:{taken}"));
    let reply = d.post("/api/config", Some(ADMIN_TOKEN), to_yaml(&new).as_bytes());
    assert_eq!(reply.status, 409, "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["failed"]["part"], json!("opcua_server"), "{body}");
    assert_eq!(d.status()["config"]["revision"], json!(2));
    let again = client(moved, VIEWER);
    read_good(&again, &point(&again, "speed"));
}
