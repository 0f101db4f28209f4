//! Commissioning a line: device templates polled against the built-in simulator, and the
//! shell tools (`browse`, `read`, `scan`) against devices nobody here wrote: pymodbus over
//! TCP and over RTU on a `socat` pty pair, and an asyncua OPC-UA server
//! (`tests/common/peers/`). Drives the real binary.

#![cfg(feature = "simulator")]

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// 100 Modbus presses from one template, two OPC-UA boilers from another (their node ids
/// made from `{{area}}`), all polling the simulator the daemon runs inside itself.
fn templated_plant(modbus: u16, opcua: u16) -> Value {
    let mut config = queue_config(16, "evict_oldest");
    config["simulator"] = json!({
        "modbus": format!("127.0.0.1:{modbus}"),
        "opcua": format!("127.0.0.1:{opcua}"),
    });
    config["templates"] = json!([
        {
            "name": "press",
            "protocol": "modbus_tcp",
            "host": "127.0.0.1",
            "port": modbus,
            "timeout_ms": 2000,
            "groups": [{"name": "process", "interval_ms": 1000}],
            "points": [
                {"name": "oven", "register": 0, "type": "f32", "unit": "°C"},
                {"name": "parts", "register": 4, "type": "u32"},
                {"name": "pressure", "register": 7, "type": "i16", "scale": 0.1, "unit": "bar"},
            ],
        },
        {
            "name": "boiler",
            "protocol": "opcua",
            "endpoint": format!("opc.tcp://127.0.0.1:{opcua}/"),
            "vars": {"area": "Boiler"},
            "groups": [{"name": "process", "interval_ms": 500}],
            "nodes": [
                {"name": "temperature", "node_id": "ns=2;s=Plant.{{area}}.Temperature"},
                {"name": "pressure", "node_id": "ns=2;s=Plant.{{area}}.Pressure"},
            ],
        },
    ]);
    let mut devices: Vec<Value> = (1..=100)
        .map(|i| json!({"name": format!("press-{i}"), "template": "press", "unit": i}))
        .collect();
    // One press reads one more point and polls at its own pace.
    devices[41]["points"] = json!([{"name": "pump", "register": 6, "type": "bool"}]);
    devices.push(json!({"name": "boiler-1", "template": "boiler"}));
    devices.push(json!({
        "name": "pump-1",
        "template": "boiler",
        "vars": {"area": "Pump"},
        "nodes": [
            {"name": "temperature", "node_id": "ns=2;s=Plant.{{area}}.Speed"},
            {"name": "running", "node_id": "ns=2;s=Plant.{{area}}.Running"},
        ],
    }));
    config["devices"] = json!(devices);
    config
}

#[test]
fn a_hundred_devices_from_one_template_poll_the_simulator_and_name_their_template() {
    let (modbus, opcua) = (free_port(), free_port());
    let mut config = templated_plant(modbus, opcua);
    let dir = tempfile::tempdir().expect("temp dir");
    config["connector"]["data_dir"] = json!(dir.path().join("data"));
    let file = dir.path().join("plant.yaml");
    std::fs::write(&file, to_yaml(&config)).expect("write config");
    let file = file.to_string_lossy().into_owned();

    let checked = run_cli(&["validate", &file]);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    // `overlay FILE` prints the config as the pollers see it.
    let shown = run_cli(&["overlay", &file]);
    assert!(shown.status.success(), "{shown:?}");
    let expanded: Value =
        serde_saphyr::from_str(&String::from_utf8_lossy(&shown.stdout)).expect("YAML");
    let press_42 = &expanded["devices"][41];
    assert_eq!(press_42["protocol"], "modbus_tcp");
    assert_eq!(press_42["unit"], 42);
    assert_eq!(press_42["points"].as_array().map(Vec::len), Some(4));
    assert_eq!(
        expanded["devices"][101]["nodes"][0]["node_id"],
        "ns=2;s=Plant.Pump.Speed"
    );

    let daemon = Daemon::start(config);
    wait_until(Duration::from_secs(60), "every device polled twice", || {
        let status = daemon.status();
        let devices = status["devices"].as_array().cloned().unwrap_or_default();
        devices.len() == 102
            && devices
                .iter()
                .all(|d| d["polls_total"].as_u64().unwrap_or(0) >= 2)
    });
    let status = daemon.status();
    let devices = status["devices"].as_array().expect("devices");
    for d in devices {
        let name = d["name"].as_str().unwrap_or_default();
        let template = if name.starts_with("press-") {
            "press"
        } else {
            "boiler"
        };
        assert_eq!(d["template"], template, "{d}");
        assert_eq!(d["state"], "connected", "{d}");
        assert_eq!(d["errors_total"], 0, "{d}");
    }
    let press_42 = named(&status, "/devices", "press-42");
    let values = &press_42["values"]["process"];
    for point in ["oven", "parts", "pressure", "pump"] {
        assert_eq!(values[point]["quality"], "good", "{point}: {values}");
    }
    let oven = values["oven"]["value"].as_f64().expect("oven is a number");
    assert!((175.0..=185.0).contains(&oven), "{oven}");
    let pump = named(&status, "/devices", "pump-1");
    assert_eq!(
        pump["values"]["process"]["running"]["quality"], "good",
        "{pump}"
    );
    let boiler = named(&status, "/devices", "boiler-1");
    let pressure = boiler["values"]["process"]["pressure"]["value"]
        .as_f64()
        .expect("boiler pressure is a number");
    assert!((3.5..=4.5).contains(&pressure), "{boiler}");
}

// ---- the shell tools ----

/// Runs the binary; returns (exit status, stdout, stderr).
fn tool(args: &[&str]) -> (i32, String, String) {
    let out = run_cli(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The function codes the pymodbus device logged (`request unit=U function=F`).
fn function_codes(log: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| l.split("function=").nth(1))
        .filter_map(|f| f.trim().parse().ok())
        .collect()
}

/// The device saw requests, and every one of them a read (function 1 to 4).
fn assert_only_reads(log: &str) {
    let codes = function_codes(log);
    assert!(!codes.is_empty(), "the device logged no request: {log}");
    assert!(
        codes.iter().all(|f| (1..=4).contains(f)),
        "only reads: {log}"
    );
}

/// The one line a tool prints when it cannot go on, checked to be one line.
fn one_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected on stderr: {stderr}");
    lines[0]
}

#[test]
fn read_modbus_decodes_a_point_as_the_config_says_and_names_a_refused_register() {
    let peer = ModbusTcp::start();
    let target = format!("tcp://127.0.0.1:{}", peer.port());
    let (code, out, err) = tool(&[
        "read",
        "modbus",
        &target,
        "--unit",
        "1",
        "--register",
        "8",
        "--type",
        "f32",
        "--word-order",
        "little",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("holding registers 8-9 (unit 1, f32, little word order)  21.5  good"),
        "{out}"
    );
    let (code, out, _) = tool(&[
        "read",
        "modbus",
        &target,
        "--register",
        "30",
        "--scale",
        "0.1",
        "--offset",
        "-10",
        "--count",
        "3",
        "--interval-ms",
        "20",
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.ends_with("  40.0  good")).count(),
        3,
        "{out}"
    );
    let (code, out, _) = tool(&["read", "modbus", &target, "--register", "100"]);
    assert_eq!(code, 3, "a refused read exits 3: {out}");
    assert!(
        out.contains("bad  exception 2 \"illegal data address\" at holding register 100: the device has no holding register 100"),
        "{out}"
    );
    // The config's own checks, at the flag that set the value.
    let (code, _, err) = tool(&["read", "modbus", &target, "--register", "70000"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--register: 70000 is outside 0..=65535"),
        "{err}"
    );
    assert_only_reads(&peer.log());
}

#[test]
fn read_modbus_reads_over_an_rtu_line_and_a_silent_unit_is_one_line() {
    let peer = ModbusRtu::start();
    let target = format!("rtu://{}?baud=19200", peer.serial_port().display());
    let (code, out, err) = tool(&[
        "read",
        "modbus",
        &target,
        "--register",
        "0",
        "--kind",
        "input",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("input register 0 (unit 1, u16)  4321  good"),
        "{out}"
    );
    let (code, out, err) = tool(&[
        "read",
        "modbus",
        &target,
        "--unit",
        "2",
        "--register",
        "0",
        "--timeout-ms",
        "300",
    ]);
    assert_eq!(code, 1, "{out}");
    let line = one_line(&err);
    assert!(
        line.contains("timeout: no answer from unit 2 on") && line.contains("within 300 ms"),
        "{line}"
    );
    assert_only_reads(&peer.log());
}

#[test]
fn scan_lists_the_ranges_of_a_sparse_map() {
    let peer = ModbusTcp::start();
    let target = format!("tcp://127.0.0.1:{}", peer.port());
    // Without --range: the first 10 000 addresses of the table.
    let (code, out, err) = tool(&[
        "scan", "modbus", &target, "--unit", "2", "--table", "holding",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let exists: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("exists   "))
        .collect();
    assert_eq!(
        exists,
        [
            "0-9  (10 holding registers)",
            "100-103  (4 holding registers)",
            "1000  (1 holding register)",
            "5000-5009  (10 holding registers)",
        ],
        "{out}"
    );
    assert!(
        out.contains("25 of 10000 holding registers exist, in 4 ranges"),
        "{out}"
    );
    // A cut scan says where it stopped.
    let (code, out, _) = tool(&[
        "scan",
        "modbus",
        &target,
        "--unit",
        "2",
        "--range",
        "0-9999",
        "--max-requests",
        "50",
    ]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("stopped after --max-requests 50 requests"),
        "{out}"
    );
    assert!(out.contains("unread   "), "{out}");
    assert_only_reads(&peer.log());
}

/// The technician stops a long scan with Ctrl-C and still gets what it found; on a terminal
/// the scan shows how far it is, in a log or a pipe it does not.
#[test]
fn scan_stops_on_ctrl_c_with_what_it_found_and_shows_progress_only_on_a_terminal() {
    let peer = ModbusTcp::start();
    let target = format!("tcp://127.0.0.1:{}", peer.port());
    let mut scan = std::process::Command::new(BIN)
        .args([
            "scan", "modbus", &target, "--unit", "2", "--range", "0-65535",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start scan");
    // Past address 1000, the one register between 100 and 5000.
    wait_until(
        Duration::from_secs(20),
        "the scan to pass address 1000",
        || function_codes(&peer.log()).len() > 1100,
    );
    let sent = std::process::Command::new("kill")
        .args(["-INT", &scan.id().to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success());
    let exited = poll_until(Duration::from_secs(10), || {
        matches!(scan.try_wait(), Ok(Some(_)))
    });
    if !exited {
        let _ = scan.kill();
    }
    let out = scan.wait_with_output().expect("scan output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(exited, "the scan went on after Ctrl-C: {stdout}{stderr}");
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    for line in [
        "exists   0-9  (10 holding registers)",
        "exists   100-103  (4 holding registers)",
        "exists   1000  (1 holding register)",
        "stopped by Ctrl-C at holding register",
        "unread   ",
    ] {
        assert!(stdout.contains(line), "{line:?} in {stdout}");
    }
    assert!(
        !stderr.contains("scanning:"),
        "no progress in a pipe: {stderr}"
    );

    // On a terminal (`script` gives the scan one), the progress line.
    let command = format!("{BIN} scan modbus {target} --unit 2 --range 0-999");
    let on_tty = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run script (util-linux)");
    let seen = String::from_utf8_lossy(&on_tty.stdout);
    assert_eq!(on_tty.status.code(), Some(0), "{seen}");
    assert!(
        seen.contains("scanning: 0 of 1000 holding registers done, 0 found, 0 s"),
        "{seen}"
    );
    assert!(
        seen.contains("14 of 1000 holding registers exist"),
        "{seen}"
    );
    assert_only_reads(&peer.log());
}

#[test]
fn read_opcua_prints_values_with_their_quality_and_status_names_with_what_to_do() {
    let server = OpcuaServer::start();
    let endpoint = server.endpoint();
    let (code, out, err) = tool(&[
        "read",
        "opcua",
        &endpoint,
        "ns=2;s=Setpoint",
        "ns=2;s=PumpOn",
        "--count",
        "2",
        "--interval-ms",
        "50",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("ns=2;s=Setpoint  42.5  good"))
            .count(),
        2,
        "{out}"
    );
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("ns=2;s=PumpOn  "))
            .count(),
        2,
        "{out}"
    );
    let (code, out, _) = tool(&["read", "opcua", &endpoint, "ns=2;s=Nope"]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("ns=2;s=Nope  -  bad  BadNodeIdUnknown: the server has no node with this id"),
        "{out}"
    );
    let (code, _, err) = tool(&["read", "opcua", &endpoint, "ns=2;x=Y"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("node id \"ns=2;x=Y\": \"ns=2;x=Y\" is not a node id"),
        "{err}"
    );
}

#[test]
fn browse_prints_the_tree_and_a_nodes_list_that_a_config_takes() {
    let server = OpcuaServer::start();
    let endpoint = server.endpoint();
    let (code, out, err) = tool(&["browse", &endpoint]);
    assert_eq!(code, 0, "{out}{err}");
    let setpoint = out
        .lines()
        .find(|l| l.trim_start().starts_with("Setpoint "))
        .unwrap_or_else(|| panic!("Setpoint in the tree: {out}"));
    for part in ["ns=2;s=Setpoint", "Variable", "Double", "read", "42.5"] {
        assert!(setpoint.contains(part), "{part} in {setpoint}");
    }
    assert!(!setpoint.contains("read/write"), "{setpoint}");
    let writable = out
        .lines()
        .find(|l| l.trim_start().starts_with("W.Double "))
        .unwrap_or_else(|| panic!("W.Double in the tree: {out}"));
    assert!(writable.contains("read/write"), "{writable}");
    assert!(out.contains("  Plant  "), "{out}");
    assert!(
        out.contains("(not opened: the server's own diagnostics"),
        "{out}"
    );

    let (code, yaml, err) = tool(&[
        "browse",
        &endpoint,
        "--from",
        "ns=2;s=Plant",
        "--yaml",
        "fast",
    ]);
    assert_eq!(code, 0, "{yaml}{err}");
    assert!(yaml.contains("    # writable: true"), "{yaml}");
    let nodes: Value = serde_saphyr::from_str(&yaml).expect("browse --yaml is YAML");
    let nodes = nodes["nodes"].as_array().cloned().unwrap_or_default();
    let ids: Vec<&str> = nodes.iter().filter_map(|n| n["node_id"].as_str()).collect();
    assert_eq!(
        ids[..4],
        [
            "ns=2;s=Temperature",
            "ns=2;s=Counter",
            "ns=2;s=PumpOn",
            "ns=2;s=Setpoint"
        ],
        "{yaml}"
    );
    assert!(ids.contains(&"ns=2;s=W.Double"), "{yaml}");
    // Uncommented, the writable nodes are writable in the config too.
    let yaml = yaml.replace("# writable: true", "writable: true");
    let nodes: Value = serde_saphyr::from_str(&yaml).expect("browse --yaml is YAML");
    let nodes = nodes["nodes"].as_array().cloned().unwrap_or_default();
    // The list goes into a device entry as it is.
    let mut config = queue_config(8, "evict_oldest");
    config["connector"]["data_dir"] = json!("/tmp/opex-browse");
    config["devices"] = json!([{
        "name": "line-1",
        "protocol": "opcua",
        "endpoint": endpoint,
        "groups": [{"name": "fast", "interval_ms": 1000}],
        "nodes": nodes,
    }]);
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("line.yaml");
    std::fs::write(&file, to_yaml(&config)).expect("write");
    let checked = run_cli(&["validate", &file.to_string_lossy()]);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );

    let (code, out, _) = tool(&["browse", &endpoint, "--match", "*pump*"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("PumpOn") && !out.contains("Counter"), "{out}");
}

/// A technician who types the wrong path is told where the server's endpoints are, not that
/// it "offers no None None endpoint (it offers: None/None)"; and the client library's
/// warning about its own empty endpoint list is not printed at every start.
#[test]
fn browse_at_the_wrong_endpoint_path_says_where_the_servers_endpoints_are() {
    let server = OpcuaServer::start();
    let right = server.endpoint();
    let wrong = right.replace("/opex-test/", "/line/");
    let (code, _, err) = tool(&["browse", &wrong]);
    assert_eq!(code, 1, "{err}");
    let line = one_line(&err);
    assert!(
        line.contains(&format!("the server's endpoints are at {right}")),
        "{line}"
    );
    assert!(!line.contains("offers no"), "{line}");
    let out = std::process::Command::new(BIN)
        .args(["browse", &right])
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run browse");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("contains no endpoints"), "{err}");
}

#[test]
fn browse_says_when_its_depth_or_node_limit_cuts_the_walk() {
    let server = OpcuaServer::start();
    let endpoint = server.endpoint();
    let (code, out, _) = tool(&["browse", &endpoint, "--depth", "1"]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("at depth 1") && out.contains("--depth 2 goes further"),
        "{out}"
    );
    let (code, out, _) = tool(&["browse", &endpoint, "--max-nodes", "2"]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("cut: the walk stopped at --max-nodes 2"),
        "{out}"
    );
    assert_eq!(
        out.lines()
            .filter(|l| l.contains(" i=") || l.contains(";s="))
            .count(),
        2,
        "{out}"
    );
}

#[test]
fn the_modbus_tools_exit_1_with_one_line_when_the_device_cannot_be_reached() {
    let closed = format!("tcp://127.0.0.1:{}", free_port());
    for args in [
        vec!["read", "modbus", closed.as_str(), "--register", "0"],
        vec!["scan", "modbus", closed.as_str(), "--range", "0-10"],
    ] {
        let (code, _, err) = tool(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        let line = one_line(&err);
        assert!(
            line.contains("cannot connect: Connection refused")
                && line.contains("nothing accepts connections on 127.0.0.1 port"),
            "{line}"
        );
    }
    let (code, _, err) = tool(&[
        "read",
        "modbus",
        "rtu:///dev/opex-no-such-tty?baud=9600",
        "--register",
        "0",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        one_line(&err).contains("there is no serial port /dev/opex-no-such-tty"),
        "{err}"
    );
}

#[test]
fn the_opcua_tools_exit_1_with_one_line_on_a_connection_or_security_failure_and_never_write() {
    let closed = format!("opc.tcp://127.0.0.1:{}/", free_port());
    for args in [
        vec!["browse", closed.as_str()],
        vec!["read", "opcua", closed.as_str(), "ns=2;s=Setpoint"],
    ] {
        let (code, _, err) = tool(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            one_line(&err).contains("no OPC-UA server answers at the endpoint"),
            "{err}"
        );
    }

    const USER: &str = "operator";
    let server = OpcuaServer::start_secure(USER, "pump-r00m");
    let endpoint = server.endpoint();
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = dir.path().join("pki");
    let pki = pki.to_string_lossy().into_owned();
    let (good, bad) = (dir.path().join("good"), dir.path().join("bad"));
    std::fs::write(&good, "pump-r00m\n").expect("write");
    std::fs::write(&bad, "guess\n").expect("write");
    let secure = |password: &std::path::Path, what: &[&str]| {
        let password = password.to_string_lossy().into_owned();
        let mut args = vec![
            "--security-policy".to_string(),
            "Basic256Sha256".into(),
            "--username".into(),
            USER.into(),
            "--password-file".into(),
            password,
            "--pki-dir".into(),
            pki.clone(),
        ];
        args.extend(what.iter().map(|s| s.to_string()));
        args
    };
    let run = |head: &[&str], tail: Vec<String>| {
        let mut args: Vec<&str> = head.to_vec();
        args.extend(tail.iter().map(String::as_str));
        tool(&args)
    };

    // The server has no endpoint without security.
    let (code, _, err) = tool(&["browse", &endpoint]);
    assert_eq!(code, 1, "{err}");
    let line = one_line(&err);
    assert!(
        line.contains("the server offers no None None endpoint (it offers: Basic256Sha256/Sign, Basic256Sha256/SignAndEncrypt)"),
        "{line}"
    );
    // A server certificate seen the first time is refused, and kept in rejected/.
    let (code, _, err) = run(&["browse", &endpoint], secure(&good, &[]));
    assert_eq!(code, 1, "{err}");
    let line = one_line(&err);
    assert!(
        line.contains("BadCertificateUntrusted")
            && line.contains("move it from rejected/ to trusted/"),
        "{line}"
    );
    // The technician trusts it, as the hint says.
    let rejected = std::path::Path::new(&pki).join("rejected");
    let trusted = std::path::Path::new(&pki).join("trusted");
    for entry in std::fs::read_dir(&rejected).expect("rejected/").flatten() {
        std::fs::rename(entry.path(), trusted.join(entry.file_name())).expect("move");
    }
    let (code, _, err) = run(
        &["read", "opcua", &endpoint, "ns=2;s=Setpoint"],
        secure(&bad, &[]),
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        one_line(&err).contains("the server refused the user: check username and password"),
        "{err}"
    );
    let (code, out, err) = run(
        &["browse", &endpoint],
        secure(&good, &["--from", "ns=2;s=Plant"]),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("read        42.5"), "{out}");
    let (code, out, err) = run(
        &["read", "opcua", &endpoint, "ns=2;s=Setpoint"],
        secure(&good, &["--security-mode", "Sign"]),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ns=2;s=Setpoint  42.5  good"), "{out}");

    // Nothing above wrote; a client that writes shows in the server's log.
    let log = || std::fs::read_to_string(server.dir().join("server.log")).unwrap_or_default();
    assert!(!log().contains("client write"), "{}", log());
    let plain = OpcuaServer::start();
    let write = format!(
        "import asyncio\nfrom asyncua import Client\nasync def main():\n    async with Client({:?}) as c:\n        await c.get_node('ns=2;s=W.Double').write_value(43.5)\nasyncio.run(main())\n",
        plain.endpoint()
    );
    let (code, _, _) = tool(&["read", "opcua", &plain.endpoint(), "ns=2;s=Setpoint"]);
    assert_eq!(code, 0);
    let plain_log = || std::fs::read_to_string(plain.dir().join("server.log")).unwrap_or_default();
    assert!(!plain_log().contains("client write"), "{}", plain_log());
    let wrote = std::process::Command::new("python3")
        .args(["-c", &write])
        .status()
        .expect("python3");
    assert!(wrote.success());
    wait_until(Duration::from_secs(10), "the server logs the write", || {
        plain_log().contains("client write: ") && plain_log().contains("W.Double")
    });
}

// ---- the status page's words ----

#[test]
fn device_errors_come_with_what_to_check_and_scaled_values_are_rounded_to_their_scale() {
    let modbus = free_port();
    let closed = free_port();
    let mut config = queue_config(16, "evict_oldest");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["simulator"] = json!({"modbus": format!("127.0.0.1:{modbus}")});
    config["storage"] = json!({"max_quota_mb": 16});
    // The simulator's filler registers hold their own address: 14 * 0.1 is
    // 1.4000000000000001 in binary floating point, and so are many of the others.
    let mut points: Vec<Value> = (14..=40)
        .map(|r| json!({"name": format!("r{r}"), "register": r, "type": "u16", "scale": 0.1}))
        .collect();
    points.push(json!({"name": "missing", "register": 5000}));
    config["devices"] = json!([
        {
            "name": "press-1", "protocol": "modbus_tcp", "host": "127.0.0.1", "port": modbus,
            "groups": [{"name": "process", "interval_ms": 200}], "points": points,
        },
        {
            "name": "press-2", "protocol": "modbus_tcp", "host": "127.0.0.1", "port": closed,
            "timeout_ms": 300, "points": [{"name": "p", "register": 0}],
        },
    ]);
    config["flows"] = json!([{
        "id": "history",
        "nodes": [
            {"id": "press", "kind": "source", "source": "modbus/press-1"},
            {"id": "keep", "kind": "sink", "sink": "storage"},
        ],
        "wires": [{"from": "press", "to": "keep"}],
    }]);
    let daemon = Daemon::start(config);
    wait_until(
        Duration::from_secs(30),
        "a refusal and a connect failure",
        || {
            let status = daemon.status();
            named(&status, "/devices", "press-1")["last_exception"].is_string()
                && named(&status, "/devices", "press-2")["last_error_hint"].is_string()
        },
    );
    let status = daemon.status();
    let press_1 = named(&status, "/devices", "press-1");
    assert_eq!(
        press_1["last_exception"],
        "exception 2 \"illegal data address\" at holding register 5000 (point missing)",
        "{press_1}"
    );
    let hint = press_1["last_exception_hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains("the device has no holding register 5000"),
        "{hint}"
    );
    assert_eq!(press_1["last_error"], Value::Null, "{press_1}");
    let press_2 = named(&status, "/devices", "press-2");
    let error = press_2["last_error"].as_str().unwrap_or_default();
    assert!(error.starts_with("cannot connect: "), "{press_2}");
    let hint = press_2["last_error_hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains(&format!(
            "nothing accepts connections on 127.0.0.1 port {closed}"
        )),
        "{hint}"
    );

    // Rounded in the status and in the stored records alike.
    let one_decimal = |v: &Value| {
        let text = v.to_string();
        text.split('.').nth(1).is_none_or(|d| d.len() <= 1)
    };
    let values = &press_1["values"]["process"];
    for r in 14..=40 {
        let v = &values[format!("r{r}")]["value"];
        assert!(v.is_number() && one_decimal(v), "r{r}: {v}");
    }
    wait_until(Duration::from_secs(10), "a stored record", || {
        !events(&daemon, "source=modbus/press-1&limit=5").is_empty()
    });
    for row in events(&daemon, "source=modbus/press-1&limit=5") {
        let payload = if row["payload"].is_string() {
            serde_json::from_str(row["payload"].as_str().unwrap_or("null")).unwrap_or(Value::Null)
        } else {
            row["payload"].clone()
        };
        for r in 14..=40 {
            let v = &payload[format!("r{r}")]["value"];
            assert!(v.is_number() && one_decimal(v), "r{r} in {row}");
        }
        assert_eq!(payload["r23"]["value"], json!(2.3), "{row}");
    }
}
