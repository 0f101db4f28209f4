//! Security properties of the real binary: secrets (tokens, webhook secrets, broker and
//! database passwords) never reach the log, `/api/status`, `/metrics` or the status page, even
//! at `RUST_LOG=debug` and while every peer is failing; files holding secrets are refused when
//! every user can read them; tokens shorter than 16 characters are refused (the demo's only
//! with a warning, and only on loopback); the default listen address is loopback.

mod common;

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
