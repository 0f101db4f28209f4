//! Security properties of the real binary: secrets (tokens, webhook secrets, broker and
//! database passwords) never reach the log, `/api/status`, `/metrics` or the status page, even
//! at `RUST_LOG=debug` and while every peer is failing; files holding secrets are refused when
//! every user can read them; tokens shorter than 16 characters are refused (the demo's only
//! with a warning, and only on loopback); the default listen address is loopback; a request
//! naming another host (a DNS-rebinding page) gets `421` on every route, and the live view
//! serves the connector's own pages only.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const HOOK_FILE_SECRET: &str = "whsec_from_file_5ec2e7";
const PUSH_TOKEN: &str = "upl1nk-t0ken-5ec2e7";
const NATS_PASSWORD: &str = "nats-pa55-5ec2e7";
const MQTT_PASSWORD: &str = "mqtt-pa55-5ec2e7";
const CH_PASSWORD: &str = "ch-pa55-5ec2e7";
const PG_PASSWORD: &str = "pg-pa55-5ec2e7";

fn secrets() -> Vec<&'static str> {
    vec![
        TOKEN,
        ADMIN_TOKEN,
        HOOK_SECRET,
        HOOK_FILE_SECRET,
        PUSH_TOKEN,
        NATS_PASSWORD,
        MQTT_PASSWORD,
        CH_PASSWORD,
        PG_PASSWORD,
    ]
}

/// Every kind of secret the config can hold, each towards a peer that is down or refusing.
fn config_with_every_secret(dir: &std::path::Path, receiver: &Receiver) -> Value {
    let secret_file = dir.join("hook.secret");
    std::fs::write(&secret_file, format!("{HOOK_FILE_SECRET}\n")).expect("write secret");
    std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let mut cfg = queue_config(8, "evict_oldest");
    cfg["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    cfg["connector"]["push"] = json!({
        "url": receiver.url(), "token": PUSH_TOKEN,
        "retry_initial_ms": 50, "retry_max_ms": 200,
    });
    cfg["webhooks"] = json!([
        webhook(HOOK, HOOK_SECRET, "on_done"),
        { "name": "filed", "secret_file": secret_file.to_string_lossy(), "respond": "on_done" },
    ]);
    // The brokers and databases are free ports nothing listens on: every connection is refused.
    cfg["nats"] = json!({
        "connections": [{
            "name": "plant",
            "servers": [format!("nats://127.0.0.1:{}", free_port())],
            "user": "edge", "password": NATS_PASSWORD, "reconnect_max_ms": 200,
        }],
        "sources": [{ "name": "orders", "stream": "ORDERS" }],
    });
    cfg["mqtt"] = json!({
        "connections": [{
            "name": "plant",
            "url": format!("mqtt://127.0.0.1:{}", free_port()),
            "client_id": "opex-security", "user": "edge", "password": MQTT_PASSWORD,
            "reconnect_max_ms": 200,
        }],
        "sources": [{ "name": "sensors", "subscriptions": [{ "topic": "plant/#" }] }],
    });
    cfg["clickhouse"] = json!({
        "url": format!("http://127.0.0.1:{}", free_port()),
        "user": "default", "password": CH_PASSWORD, "sink_table": "events",
    });
    cfg["postgres"] = json!({
        "url": format!("postgres://edge:{PG_PASSWORD}@127.0.0.1:{}/plant", free_port()),
        "sink_table": "events",
    });
    let every_sink = |id: &str, source: String| {
        json!({
            "id": id,
            "nodes": [
                { "id": "in", "kind": "source", "source": source },
                { "id": "push", "kind": "sink", "sink": "push" },
                { "id": "ch", "kind": "sink", "sink": "clickhouse" },
                { "id": "pg", "kind": "sink", "sink": "postgres" },
            ],
            "wires": [
                { "from": "in", "to": "push" }, { "from": "in", "to": "ch" },
                { "from": "in", "to": "pg" },
            ],
        })
    };
    cfg["flows"] = json!([
        every_sink("orders", format!("ingest/{SOURCE}")),
        every_sink("hooks", format!("webhook/{HOOK}")),
        every_sink("filed", "webhook/filed".into()),
        every_sink("nats", "nats/orders".into()),
        every_sink("mqtt", "mqtt/sensors".into()),
    ]);
    cfg
}

#[test]
fn no_secret_reaches_the_log_the_status_the_metrics_or_the_page() {
    // Debug logging, as an operator chasing a problem would turn on (also the libraries').
    std::env::set_var("RUST_LOG", "debug");
    let dir = tempfile::tempdir().expect("temp dir");
    let receiver = Receiver::start();
    receiver.unavailable();
    let daemon = Daemon::start(config_with_every_secret(dir.path(), &receiver));

    // Errors of every kind: wrong tokens, bad signatures, bad bodies, good requests whose
    // sinks all fail, an uplink answering 503, brokers and databases that refuse connections.
    let body = br#"{"order":"o-1"}"#;
    for token in [None, Some("wrong-token"), Some(ADMIN_TOKEN)] {
        daemon.post(&format!("/api/ingest/{SOURCE}/k"), token, body);
    }
    daemon.post(
        &format!("/api/ingest/{SOURCE}/k"),
        Some(TOKEN),
        b"{not json",
    );
    daemon.post(&format!("/api/ingest/{SOURCE}/k"), Some(TOKEN), body);
    for token in [None, Some(TOKEN), Some("wrong")] {
        daemon.get("/api/dead-letters", token);
    }
    daemon.hook_raw(HOOK, &[("X-Opex-Signature", "t=1,v1=00")], body);
    daemon.hook("filed", "not-the-secret", "{}");
    daemon.hook("filed", HOOK_FILE_SECRET, r#"{"a":1}"#);
    daemon.hook(HOOK, HOOK_SECRET, r#"{"a":2}"#);
    wait_until(
        Duration::from_secs(30),
        "the failing peers to be logged",
        || {
            let log = daemon.stderr();
            !daemon.status()["uplink"]["last_error"].is_null()
                && log.contains("nats")
                && log.contains("mqtt")
        },
    );
    assert!(
        receiver
            .requests()
            .iter()
            .all(|r| r.header("authorization") == Some(&format!("Bearer {PUSH_TOKEN}"))),
        "the uplink sends its token (to the receiver only)"
    );

    let exposed = [
        ("stderr", daemon.stderr()),
        ("/api/status", daemon.get("/api/status", None).body),
        ("/metrics", daemon.get("/metrics", None).body),
        ("the status page", daemon.get("/", None).body),
        (
            "the admin dead letters",
            daemon.get("/api/dead-letters", Some(ADMIN_TOKEN)).body,
        ),
    ];
    for (place, text) in &exposed {
        for secret in secrets() {
            assert!(
                !text.contains(secret),
                "{place} shows the secret {secret:?}:\n{}",
                truncate(text, 4000)
            );
        }
    }
}

#[test]
fn a_webhook_secret_file_that_every_user_can_read_stops_the_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("hook.secret");
    std::fs::write(&path, format!("{HOOK_FILE_SECRET}\n")).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut cfg = queue_config(8, "evict_oldest");
    cfg["connector"]["data_dir"] = json!(dir.path().join("data").to_string_lossy());
    cfg["connector"]["http"]["listen"] = json!("127.0.0.1:0");
    cfg["webhooks"] = json!([
        { "name": "filed", "secret_file": path.to_string_lossy(), "respond": "on_done" },
    ]);
    let config_path = dir.path().join("config.yaml");
    std::fs::write(&config_path, to_yaml(&cfg)).expect("write config");
    let out = run_cli(&["run", "--config", config_path.to_str().expect("utf-8 path")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "started with a world-readable secret"
    );
    assert!(stderr.contains("readable by every user"), "{stderr}");
    assert!(!stderr.contains(HOOK_FILE_SECRET), "{stderr}");
}

#[test]
fn without_a_listen_address_the_connector_listens_on_loopback_only() {
    let cfg = opex_connector::config::from_yaml("connector:\n  data_dir: /var/lib/x\n")
        .expect("a minimal config is valid");
    assert!(cfg.connector.http.listen.ip().is_loopback());
    let demo = opex_connector::config::from_yaml(opex_connector::config::DEMO_YAML)
        .expect("the demo is valid");
    assert!(demo.connector.http.listen.ip().is_loopback());
}

/// Runs `validate` on `text`; (exit code, stderr).
fn validate_text(text: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, text).expect("write config");
    let out = run_cli(&["validate", path.to_str().expect("utf-8 path")]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_short_token_is_a_validate_error_with_its_path() {
    let config = |admin: &str, ingest: &str| {
        format!(
            "connector:\n  data_dir: /var/lib/x\n  http:\n    admin_token: {admin}\ningest:\n  sources:\n    - name: orders\n      token: 0123456789abcdef\n    - name: returns\n      token: {ingest}\n"
        )
    };
    let (code, stderr) = validate_text(&config("adm1n-pa55", "r3turns-15chars"));
    assert_eq!(code, Some(1), "{stderr}");
    for line in [
        "connector.http.admin_token: is 10 characters, fewer than 16",
        "ingest.sources[1].token: is 15 characters, fewer than 16",
    ] {
        assert!(stderr.contains(line), "no {line:?} in:\n{stderr}");
    }
    assert!(!stderr.contains("ingest.sources[0]"), "{stderr}");
    // The message says how short, never the token itself.
    assert!(
        !stderr.contains("adm1n-pa55") && !stderr.contains("r3turns-15chars"),
        "{stderr}"
    );
    // At 16 characters both pass.
    let (code, stderr) = validate_text(&config("adm1n-pa55-0123x", "r3turns-16chars!"));
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn the_demo_keeps_its_short_token_with_a_warning_and_only_on_loopback() {
    let demo = opex_connector::config::DEMO_YAML;
    assert!(
        demo.contains("token: demo-token"),
        "the demo's token changed"
    );
    let (code, stderr) = validate_text(demo);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: ingest.sources[0].token: is 10 characters, fewer than 16"),
        "{stderr}"
    );
    // Opened to the network, the same file is refused.
    let open = demo.replace("listen: 127.0.0.1:8080", "listen: 0.0.0.0:8080");
    assert_ne!(open, demo);
    let (code, stderr) = validate_text(&open);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("ingest.sources[0].token: is 10 characters, fewer than 16"),
        "{stderr}"
    );
    // Without `demo: true` the same token is an error.
    let (code, stderr) = validate_text(&demo.replace("  demo: true\n", ""));
    assert_eq!(code, Some(1), "{stderr}");
}

// ---------------------------------------------------------------- Host and Origin

/// Sends `raw` on a new connection and returns the status and the whole answer.
fn raw_exchange(daemon: &Daemon, raw: &str) -> (u16, String) {
    let addr = daemon.base().trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    s.write_all(raw.as_bytes()).expect("send");
    let mut out = Vec::new();
    // An upgraded connection stays open: the head is enough.
    let mut byte = [0u8; 1];
    while !out.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
        out.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    if status != Some(101) {
        let _ = s.read_to_end(&mut out);
    }
    (
        status.unwrap_or(0),
        String::from_utf8_lossy(&out).into_owned(),
    )
}

/// `METHOD path` with `Host: host` (none when `None`) and `extra` header lines.
fn with_host(
    daemon: &Daemon,
    method: &str,
    path: &str,
    host: Option<&str>,
    extra: &str,
) -> (u16, String) {
    let host = host.map(|h| format!("Host: {h}\r\n")).unwrap_or_default();
    raw_exchange(
        daemon,
        &format!("{method} {path} HTTP/1.1\r\n{host}{extra}Connection: close\r\n\r\n"),
    )
}

/// The body of an answer, as JSON.
fn body_json(answer: &str) -> Value {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {answer}"))
}

fn port(daemon: &Daemon) -> u16 {
    daemon
        .base()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port")
}

fn host_config() -> Value {
    let mut cfg = queue_config(8, "evict_oldest");
    cfg["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    cfg["webhooks"] = json!([webhook(HOOK, HOOK_SECRET, "on_done")]);
    cfg
}

const UPGRADE: &str = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: AQIDBAUGBwgJCgsMDQ4PEA==\r\nSec-WebSocket-Version: 13\r\n";

/// Regression: no route checked `Host`, so a page of `evil.example` whose name was made to
/// resolve to the connector could read every answer (and post with a token it learnt).
#[test]
fn dns_rebinding_a_request_with_host_evil_example_gets_421_on_every_route_and_stores_nothing() {
    let daemon = Daemon::start(host_config());
    let evil = format!("evil.example:{}", port(&daemon));
    let body = r#"{"order":"o-1"}"#;
    let t = unix_secs();
    let signed = format!(
        "X-Opex-Signature: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        signature(HOOK_SECRET, t, body.as_bytes()),
        body.len()
    );
    let token = format!(
        "Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    let admin = format!("Authorization: Bearer {ADMIN_TOKEN}\r\n");
    let requests: Vec<(&str, String, String)> = vec![
        ("GET", "/api/status".into(), String::new()),
        ("GET", "/metrics".into(), String::new()),
        ("GET", "/".into(), String::new()),
        ("GET", "/page.js".into(), String::new()),
        ("GET", "/api/ledger".into(), String::new()),
        ("GET", "/api/schedules".into(), String::new()),
        (
            "GET",
            "/api/trends?series=queue/push_queue".into(),
            String::new(),
        ),
        ("GET", "/api/dead-letters".into(), admin.clone()),
        ("GET", "/api/ledger?verify=1".into(), admin),
        (
            "GET",
            "/api/live".into(),
            format!("Origin: http://{evil}\r\n{UPGRADE}"),
        ),
        ("GET", "/no/such/path".into(), String::new()),
        ("POST", format!("/api/ingest/{SOURCE}/k1"), token),
        ("POST", format!("/api/hooks/{HOOK}"), signed),
    ];
    for host in [evil.as_str(), "evil.example", "EVIL.example."] {
        for (method, path, extra) in &requests {
            let payload = if method == &"POST" { body } else { "" };
            let (status, answer) = raw_exchange(
                &daemon,
                &format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n{payload}"),
            );
            assert_eq!(status, 421, "{method} {path} with Host {host}: {answer}");
            let b = body_json(&answer);
            assert_eq!(b["ok"], json!(false), "{answer}");
            assert!(
                b["error"].as_str().unwrap().contains("allowed_hosts"),
                "{answer}"
            );
        }
    }
    // An absolute request target names the host, whatever the Host header says.
    let (status, _) = raw_exchange(
        &daemon,
        "GET http://evil.example/api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 421);
    // Nothing was stored, and the refusals are counted.
    let status = daemon.status();
    assert_eq!(u64_at(&status, "/push_queue/rows"), 0, "{status:#}");
    let refused = metric(&daemon.metrics(), "opex_connector_http_host_refused_total");
    assert_eq!(refused, Some(3.0 * requests.len() as f64 + 1.0));
    // The same requests under the connector's own address are served.
    let own = format!("127.0.0.1:{}", port(&daemon));
    let (status, answer) = with_host(&daemon, "GET", "/api/status", Some(&own), "");
    assert_eq!(status, 200, "{answer}");
}

#[test]
fn the_defaults_answer_localhost_and_127_0_0_1_with_the_port_every_address_and_the_host_name() {
    let daemon = Daemon::start(host_config());
    let p = port(&daemon);
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("the host name")
        .trim()
        .to_string();
    for host in [
        format!("localhost:{p}"),
        format!("127.0.0.1:{p}"),
        format!("LocalHost:{p}"),
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        format!("[::1]:{p}"),
        format!("10.20.30.40:{p}"),
        format!("{hostname}:{p}"),
        format!("{}.local:{p}", hostname.split('.').next().unwrap()),
    ] {
        for path in ["/api/status", "/metrics", "/"] {
            let (status, answer) = with_host(&daemon, "GET", path, Some(&host), "");
            assert_eq!(status, 200, "GET {path} with Host {host}: {answer}");
        }
    }
    // The page's own live view works under both loopback names.
    for host in [format!("localhost:{p}"), format!("127.0.0.1:{p}")] {
        let extra = format!("Origin: http://{host}\r\n{UPGRADE}");
        let (status, answer) = with_host(&daemon, "GET", "/api/live", Some(&host), &extra);
        assert_eq!(status, 101, "the live view under {host}: {answer}");
    }
}

#[test]
fn a_missing_host_is_400_on_http_1_1_two_hosts_or_a_malformed_one_too_and_http_1_0_without_one_is_served(
) {
    let mut daemon = Daemon::start(host_config());
    let (status, answer) = with_host(&daemon, "GET", "/api/status", None, "");
    assert_eq!(status, 400, "{answer}");
    assert!(body_json(&answer)["error"]
        .as_str()
        .unwrap()
        .contains("Host"));
    let (status, answer) = with_host(
        &daemon,
        "GET",
        "/api/status",
        Some("127.0.0.1"),
        "Host: evil.example\r\n",
    );
    assert_eq!(status, 400, "{answer}");
    for bad in ["127.0.0.1:http", "::1", "user@127.0.0.1", "[::1"] {
        let (status, answer) = with_host(&daemon, "GET", "/api/status", Some(bad), "");
        assert_eq!(status, 400, "Host {bad}: {answer}");
    }
    let (status, answer) = raw_exchange(&daemon, "GET /api/status HTTP/1.0\r\n\r\n");
    assert_eq!(status, 200, "{answer}");
    assert!(daemon.is_running());
}

/// Regression: the live view compared `Origin` with `Host`, and a rebinding page sets both to
/// its own name.
#[test]
fn dns_rebinding_the_live_view_refuses_origin_and_host_evil_example_and_serves_a_configured_host() {
    let mut cfg = host_config();
    cfg["connector"]["http"]["allowed_hosts"] =
        json!(["opex-17.plant.example", "gw.plant.example:443"]);
    let daemon = Daemon::start(cfg);
    let p = port(&daemon);
    let live = |host: &str, origin: &str| {
        let extra = format!("Origin: {origin}\r\n{UPGRADE}");
        with_host(&daemon, "GET", "/api/live", Some(host), &extra)
    };
    // The rebinding page: its Origin and Host are both its own name.
    let evil = format!("evil.example:{p}");
    let (status, answer) = live(&evil, &format!("http://{evil}"));
    assert_eq!(status, 421, "{answer}");
    // A configured name: the connector's own page under it gets the live view, and so does
    // a page served through the listed proxy.
    let named = format!("opex-17.plant.example:{p}");
    let (status, answer) = live(&named, &format!("http://{named}"));
    assert_eq!(status, 101, "{answer}");
    let (status, answer) = live(&format!("127.0.0.1:{p}"), "https://gw.plant.example");
    assert_eq!(status, 101, "{answer}");
    // Another site, or another service of the same name on another port, gets 403.
    for origin in [
        "http://evil.example".to_string(),
        format!("http://opex-17.plant.example:{}", p.wrapping_add(1).max(1)),
        "http://localhost:3000".to_string(),
        "http://gw.plant.example".to_string(),
        "null".to_string(),
    ] {
        let (status, answer) = live(&named, &origin);
        assert_eq!(status, 403, "Origin {origin}: {answer}");
    }
    // Plain requests under the configured names are answered; the port of a listed
    // host:port is checked.
    for (host, want) in [
        (named.clone(), 200),
        ("OPEX-17.plant.example".to_string(), 200),
        ("gw.plant.example:443".to_string(), 200),
        ("gw.plant.example".to_string(), 200),
        (format!("gw.plant.example:{p}"), 421),
        (format!("plant.example:{p}"), 421),
        (format!("localhost:{p}"), 200),
    ] {
        let (status, answer) = with_host(&daemon, "GET", "/api/status", Some(&host), "");
        assert_eq!(status, want, "Host {host}: {answer}");
    }
}

#[test]
fn every_bad_allowed_hosts_entry_is_reported_with_its_path_by_validate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.yaml");
    std::fs::write(
        &path,
        "connector:\n  data_dir: /var/lib/x\n  http:\n    allowed_hosts: [box.plant, \"::1\", \"box:0\", \"*.plant\"]\n",
    )
    .expect("write");
    let out = run_cli(&["validate", path.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for at in [
        "connector.http.allowed_hosts[1]",
        "connector.http.allowed_hosts[2]",
        "connector.http.allowed_hosts[3]",
    ] {
        assert!(stderr.contains(at), "{at} missing from:\n{stderr}");
    }
    assert!(!stderr.contains("allowed_hosts[0]"), "{stderr}");
}
