//! OPC-UA devices against a server nobody here wrote: an asyncua server
//! (`common::OpcuaServer`: `tests/common/peers/opcua_server.py`, asyncua installed by
//! `scripts/test.sh`) on a free loopback port.
//! Reads and subscriptions, security None and Basic256Sha256 (Sign, SignAndEncrypt) with a
//! user, a server restart, and a node id the server does not know. The server certificate's
//! host names are checked on every subject alternative name whatever their order (server
//! certificates made here with `openssl`), and two secure devices share one fresh PKI folder.
//! Drives the real binary.

#![cfg(feature = "opcua")]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const USER: &str = "operator";
const PASSWORD: &str = "pump-r00m";

/// A connector with one OPC-UA device `plc` (as given) whose records go to storage.
fn config(device: Value) -> Value {
    config_of(vec![("plc", device)])
}

/// A connector with these OPC-UA devices (name, entry) whose records all go to storage.
fn config_of(devices: Vec<(&str, Value)>) -> Value {
    let mut config = queue_config(8, "evict_oldest");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    let mut entries = Vec::new();
    let mut nodes = vec![json!({ "id": "keep", "kind": "sink", "sink": "storage" })];
    let mut wires = Vec::new();
    for (name, mut device) in devices {
        device["name"] = json!(name);
        device["protocol"] = json!("opcua");
        entries.push(device);
        nodes.push(json!({ "id": name, "kind": "source", "source": format!("opcua/{name}") }));
        wires.push(json!({ "from": name, "to": "keep" }));
    }
    config["devices"] = json!(entries);
    config["flows"] = json!([{ "id": "history", "nodes": nodes, "wires": wires }]);
    config
}

/// A secure device entry reading `Setpoint` every 200 ms, trusting the server.
fn secure_device(endpoint: &str, mode: &str) -> Value {
    json!({
        "endpoint": endpoint,
        "security_policy": "Basic256Sha256",
        "security_mode": mode,
        "username": USER,
        "password": PASSWORD,
        "trust_server_certs": true,
        "reconnect_initial_ms": 200,
        "reconnect_max_ms": 1000,
        "groups": [ { "name": "fast", "interval_ms": 200 } ],
        "nodes": [ node("ns=2;s=Setpoint", "setpoint", "fast") ],
    })
}

/// Writes a self-signed server certificate made by `openssl` into `dir`, as the asyncua
/// server loads it (`server-cert.der`, `server-key.pem`), with the subject alternative names
/// `san` in that order (`openssl` keeps it), e.g. `DNS:localhost,IP:127.0.0.1,URI:..`.
fn openssl_server_certificate(dir: &Path, san: &str) {
    std::fs::create_dir_all(dir).expect("certificate dir");
    let conf = dir.join("openssl.cnf");
    std::fs::write(
        &conf,
        format!(
            "[req]\nprompt = no\ndistinguished_name = dn\nx509_extensions = ext\n\
             [dn]\nCN = opex test server\nO = opex test\n\
             [ext]\nsubjectAltName = {san}\nbasicConstraints = critical,CA:FALSE\n\
             keyUsage = critical,digitalSignature,nonRepudiation,keyEncipherment,dataEncipherment\n\
             extendedKeyUsage = serverAuth,clientAuth\nsubjectKeyIdentifier = hash\n"
        ),
    )
    .expect("write openssl.cnf");
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256",
        ])
        .args(["-days", "2", "-outform", "DER", "-config"])
        .arg(&conf)
        .arg("-keyout")
        .arg(dir.join("server-key.pem"))
        .arg("-out")
        .arg(dir.join("server-cert.der"))
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run openssl ({e}): run scripts/test.sh, which installs it")
        });
    assert!(
        out.status.success(),
        "openssl req failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn node(id: &str, name: &str, group: &str) -> Value {
    json!({ "node_id": id, "name": name, "group": group })
}

/// Stored records of `opcua/plc` with key `group`, oldest first.
fn records(daemon: &Daemon, group: &str) -> Vec<Value> {
    records_of(daemon, "plc", group)
}

/// Stored records of `opcua/<device>` with key `group`, oldest first.
fn records_of(daemon: &Daemon, device: &str, group: &str) -> Vec<Value> {
    events(daemon, &format!("source=opcua/{device}&limit=10000"))
        .into_iter()
        .filter(|r| r["key"] == json!(group))
        .collect()
}

fn device_status(daemon: &Daemon) -> Value {
    named(&daemon.status(), "/devices", "plc").clone()
}

#[test]
fn polled_and_subscribed_groups_deliver_values_and_an_unknown_node_does_not_stop_the_others() {
    let server = OpcuaServer::start();
    let daemon = Daemon::start(config(json!({
        "endpoint": server.endpoint(),
        "reconnect_initial_ms": 200,
        "reconnect_max_ms": 1000,
        "groups": [
            { "name": "fast", "interval_ms": 200 },
            { "name": "live", "interval_ms": 100, "subscribe": true, "deadband": 0.01 },
        ],
        "nodes": [
            node("ns=2;s=Temperature", "temperature", "fast"),
            node("ns=2;s=NoSuchNode", "missing", "fast"),
            node("ns=2;s=Setpoint", "setpoint", "fast"),
            node("ns=2;s=Counter", "counter", "live"),
            node("ns=2;s=PumpOn", "pump", "live"),
        ],
    })));
    wait_until(POLL_DEADLINE, "5 polled records of group fast", || {
        records(&daemon, "fast").len() >= 5
    });
    let fast = records(&daemon, "fast");
    let last = &fast[fast.len() - 1]["payload"];
    assert_eq!(
        last["setpoint"],
        json!({"value": 42.5, "quality": "good", "status": "Good"}),
        "{last}"
    );
    assert_eq!(last["temperature"]["quality"], json!("good"), "{last}");
    assert!(last["temperature"]["value"].is_f64(), "{last}");
    assert_eq!(
        last["missing"],
        json!({"value": null, "quality": "bad", "status": "BadNodeIdUnknown"}),
        "{last}"
    );

    wait_until(
        POLL_DEADLINE,
        "subscribed counter values that go up",
        || {
            let counters: Vec<i64> = records(&daemon, "live")
                .iter()
                .filter_map(|r| r["payload"]["counter"]["value"].as_i64())
                .collect();
            counters.len() >= 5 && counters.windows(2).all(|w| w[0] < w[1])
        },
    );
    wait_until(POLL_DEADLINE, "a subscribed pump state", || {
        records(&daemon, "live")
            .iter()
            .any(|r| r["payload"]["pump"]["value"].is_boolean())
    });

    let d = device_status(&daemon);
    assert_eq!(d["protocol"], json!("opcua"), "{d:#}");
    assert_eq!(d["state"], json!("connected"), "{d:#}");
    assert!(u64_at(&d, "/polls_total") >= 5, "{d:#}");
    assert!(u64_at(&d, "/bad_points_total") >= 1, "{d:#}");
    assert!(d["last_poll_ms"].is_u64(), "{d:#}");
    assert!(d["jitter_p99_ms"].is_number(), "{d:#}");
    assert!(d["poll_duration_ms"].is_number(), "{d:#}");
    assert_eq!(
        d["values"]["fast"]["setpoint"]["value"],
        json!(42.5),
        "{d:#}"
    );
    let metrics = daemon.metrics();
    assert!(
        metrics
            .contains("opex_connector_opcua_device_connected{device=\"plc\",protocol=\"opcua\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("opex_connector_opcua_device_poll_start_jitter_seconds{device=\"plc\",protocol=\"opcua\",quantile=\"0.99\"}"),
        "{metrics}"
    );
}

#[test]
fn basic256sha256_sign_and_encrypt_with_a_username_reads_and_subscribes() {
    let server = OpcuaServer::start_secure(USER, PASSWORD);
    let daemon = Daemon::start(config(json!({
        "endpoint": server.endpoint(),
        "security_policy": "Basic256Sha256",
        "security_mode": "SignAndEncrypt",
        "username": USER,
        "password": PASSWORD,
        "trust_server_certs": true,
        "reconnect_initial_ms": 200,
        "reconnect_max_ms": 1000,
        "groups": [
            { "name": "fast", "interval_ms": 200 },
            { "name": "live", "interval_ms": 100, "subscribe": true },
        ],
        "nodes": [
            node("ns=2;s=Setpoint", "setpoint", "fast"),
            node("ns=2;s=Counter", "counter", "live"),
        ],
    })));
    wait_until(
        POLL_DEADLINE,
        "polled and subscribed values over SignAndEncrypt",
        || !records(&daemon, "fast").is_empty() && !records(&daemon, "live").is_empty(),
    );
    assert_eq!(
        records(&daemon, "fast")[0]["payload"]["setpoint"]["value"],
        json!(42.5)
    );
    let pki = daemon.data_dir().join("opcua-pki");
    assert!(
        pki.join("own/cert.der").is_file(),
        "client certificate made on first start under {}",
        pki.display()
    );
}

/// Subject alternative names with the DNS name first, as node-opcua writes them, and last
/// the application URI `tests/peers/opcua_server.py` serves.
const DNS_FIRST: &str = "DNS:localhost,IP:127.0.0.1,URI:urn:opex-test:server";

/// Names that are neither the address nor the name the tests connect by.
const ELSEWHERE: &str = "DNS:plc-17.plant.example,IP:10.9.8.7,URI:urn:opex-test:server";

/// A secure asyncua server whose certificate, made by `openssl`, has the subject alternative
/// names `san`; the temp dir holds the certificate while the server runs.
fn server_with_certificate(san: &str) -> (tempfile::TempDir, OpcuaServer) {
    let certs = tempfile::tempdir().expect("temp dir");
    openssl_server_certificate(certs.path(), san);
    let server = OpcuaServer::start_secure_in(USER, PASSWORD, certs.path());
    (certs, server)
}

/// Waits for the first record of `plc`'s group `fast` and checks its setpoint.
fn assert_setpoint_read(daemon: &Daemon, what: &str) {
    wait_until(POLL_DEADLINE, what, || !records(daemon, "fast").is_empty());
    assert_eq!(
        records(daemon, "fast")[0]["payload"]["setpoint"]["value"],
        json!(42.5),
        "{what}"
    );
}

#[test]
fn a_server_certificate_that_lists_its_dns_name_first_is_accepted_by_address() {
    let (_certs, server) = server_with_certificate(DNS_FIRST);
    let daemon = Daemon::start(config(secure_device(&server.endpoint(), "SignAndEncrypt")));
    assert_setpoint_read(&daemon, "values over SignAndEncrypt by address");
}

#[test]
fn a_server_certificate_that_lists_its_dns_name_first_is_accepted_by_name() {
    let (_certs, server) = server_with_certificate(DNS_FIRST);
    let daemon = Daemon::start(config(secure_device(&server.endpoint_by_name(), "Sign")));
    assert_setpoint_read(&daemon, "values over Sign by name");
}

#[test]
fn a_server_certificate_naming_neither_the_address_nor_the_name_is_refused_with_a_clear_error() {
    let (_certs, server) = server_with_certificate(ELSEWHERE);
    let daemon = Daemon::start(config(secure_device(&server.endpoint(), "SignAndEncrypt")));
    wait_until(POLL_DEADLINE, "the refusal in the device status", || {
        device_status(&daemon)["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("check_server_hostname"))
    });
    let d = device_status(&daemon);
    let error = d["last_error"].as_str().unwrap_or_default();
    for part in ["127.0.0.1", "DNS:plc-17.plant.example", "IP:10.9.8.7"] {
        assert!(error.contains(part), "{part:?} missing in {error:?}");
    }
    let hint = d["last_error_hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains("does not name the host") && hint.contains("check_server_hostname: false"),
        "{d:#}"
    );
    assert_ne!(d["state"], json!("connected"), "{d:#}");
    assert!(records(&daemon, "fast").is_empty(), "{d:#}");
    let log = daemon.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("opcua device failed: device=plc") && l.contains("127.0.0.1")),
        "{log}"
    );
}

#[test]
fn with_check_server_hostname_false_a_certificate_naming_another_host_connects_with_a_warning() {
    let (_certs, server) = server_with_certificate(ELSEWHERE);
    let mut device = secure_device(&server.endpoint(), "SignAndEncrypt");
    device["check_server_hostname"] = json!(false);
    let daemon = Daemon::start(config(device));
    assert_setpoint_read(&daemon, "values despite the host name");
    let log = daemon.stderr();
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains("device=plc")
            && l.contains("check_server_hostname")),
        "{log}"
    );
}

#[test]
fn two_secure_devices_on_one_fresh_pki_dir_both_connect_without_racing_to_make_the_key_pair() {
    let certs = tempfile::tempdir().expect("temp dir");
    let server = OpcuaServer::start_secure_in(USER, PASSWORD, certs.path());
    // Both use the default `<data_dir>/opcua-pki`, which does not exist yet.
    let daemon = Daemon::start(config_of(vec![
        (
            "line-a",
            secure_device(&server.endpoint(), "SignAndEncrypt"),
        ),
        (
            "line-b",
            secure_device(&server.endpoint(), "SignAndEncrypt"),
        ),
    ]));
    wait_until(POLL_DEADLINE, "values of both devices", || {
        !records_of(&daemon, "line-a", "fast").is_empty()
            && !records_of(&daemon, "line-b", "fast").is_empty()
    });
    let log = daemon.stderr();
    for broken in [
        "Certificate creation failed",
        "Client is missing its application instance certificate",
    ] {
        assert!(!log.contains(broken), "{broken:?} in the log:\n{log}");
    }
}

#[test]
fn after_a_server_restart_values_flow_again_within_the_backoff() {
    let mut server = OpcuaServer::start();
    let daemon = Daemon::start(config(json!({
        "endpoint": server.endpoint(),
        "reconnect_initial_ms": 200,
        "reconnect_max_ms": 1000,
        "groups": [
            { "name": "fast", "interval_ms": 200 },
            { "name": "live", "interval_ms": 100, "subscribe": true },
        ],
        "nodes": [
            node("ns=2;s=Setpoint", "setpoint", "fast"),
            node("ns=2;s=Counter", "counter", "live"),
        ],
    })));
    wait_until(POLL_DEADLINE, "values before the restart", || {
        !records(&daemon, "fast").is_empty() && !records(&daemon, "live").is_empty()
    });
    server.kill9();
    wait_until(
        POLL_DEADLINE,
        "the device to notice the server is gone",
        || device_status(&daemon)["state"] != json!("connected"),
    );
    let fast_before = records(&daemon, "fast").len();
    let live_before = records(&daemon, "live").len();
    server.restart();
    measure_recovery("asyncua server", Instant::now(), RECOVERY_BOUND, || {
        records(&daemon, "fast").len() > fast_before && records(&daemon, "live").len() > live_before
    });
    // The backoff is at most 1 s: values are back well within 20 s (session, subscription
    // recreated, publishing triggered), without the 30 s watchdog.
    wait_until(
        Duration::from_secs(20),
        "polled and subscribed values after the restart",
        || {
            records(&daemon, "fast").len() > fast_before + 2
                && records(&daemon, "live").len() > live_before + 2
        },
    );
    let d = device_status(&daemon);
    assert_eq!(d["state"], json!("connected"), "{d:#}");
    assert_eq!(u64_at(&d, "/watchdog_resets_total"), 0, "{d:#}");
    // The ledger balances after the restart, with nothing lost.
    let l = assert_balanced(&ledger(&daemon, true), "after the asyncua server restart");
    let source = d["source"].as_str().unwrap_or("opcua/?").to_string();
    assert!(source_figure(&l, &source, "/acked") > 0, "{source}: {l:#}");
    assert_eq!(source_figure(&l, &source, "/lost"), 0, "{source}: {l:#}");
}

#[cfg(feature = "simulator")]
#[test]
fn the_simulators_plant_is_read_and_its_counter_moves() {
    let plant = SimulatorPlant::start();
    let sim = &plant.sim;
    let daemon = Daemon::start(config(json!({
        "endpoint": sim.endpoint(),
        "reconnect_initial_ms": 200,
        "reconnect_max_ms": 1000,
        "groups": [
            { "name": "plant", "interval_ms": 500 },
            { "name": "live", "interval_ms": 200, "subscribe": true, "deadband": 0.5 },
        ],
        "nodes": [
            node(&sim.node_id("Plant.Line.Counter"), "counter", "plant"),
            node(&sim.node_id("Plant.Pump.Running"), "pump_running", "plant"),
            node(&sim.node_id("Plant.Boiler.Temperature"), "temperature", "live"),
        ],
    })));
    wait_until(
        POLL_DEADLINE,
        "a counter that moves, and the pump state",
        || {
            let rows = records(&daemon, "plant");
            let counters: Vec<u64> = rows
                .iter()
                .filter_map(|r| r["payload"]["counter"]["value"].as_u64())
                .collect();
            counters.len() >= 2
                && counters.last() > counters.first()
                && rows[0]["payload"]["pump_running"]["value"].is_boolean()
        },
    );
    wait_until(POLL_DEADLINE, "a subscribed temperature", || {
        records(&daemon, "live")
            .iter()
            .any(|r| r["payload"]["temperature"]["value"].is_f64())
    });
    let stopped = plant.stop();
    assert!(stopped.is_ok(), "{stopped:?}");
}
