//! Named sinks: several instances of one kind in one connector, each fed by its own flow,
//! against real peers (one PostgreSQL with two tables, two mosquitto brokers, two uplink
//! receivers); and the old top-level sections against the `sinks:` list for the same sinks.

mod common;

use std::collections::BTreeSet;

use common::*;
use serde_json::{json, Value};

const N: usize = 12;

fn flow(id: &str, source: &str, sinks: &[&str]) -> Value {
    let mut nodes = vec![json!({"id": "in", "kind": "source", "source": source})];
    let mut wires = Vec::new();
    for s in sinks {
        nodes.push(json!({"id": format!("to-{s}"), "kind": "sink", "sink": s}));
        wires.push(json!({"from": "in", "to": format!("to-{s}")}));
    }
    json!({"id": id, "nodes": nodes, "wires": wires})
}

fn mqtt_ids(client: &MqttClient) -> BTreeSet<String> {
    client
        .received()
        .iter()
        .filter_map(|(_, p)| serde_json::from_slice::<Value>(p).ok())
        .filter_map(|v| v["id"].as_str().map(str::to_string))
        .collect()
}

fn pg_keys(pg: &Postgres, table: &str) -> BTreeSet<String> {
    pg.sql(&format!("SELECT key FROM {table}"))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn two_instances_of_each_kind_get_exactly_their_records_and_show_by_name_everywhere() {
    let pg = Postgres::start();
    for t in ["orders", "telemetry"] {
        pg.sql(&format!(
            "CREATE TABLE {t} (ts timestamptz, source text, key text, payload jsonb)"
        ));
    }
    let site = Mosquitto::start();
    let cloud = Mosquitto::start();
    let site_sub = MqttClient::connect(site.port(), "it-site-sub", Some("#"));
    let cloud_sub = MqttClient::connect(cloud.port(), "it-cloud-sub", Some("#"));
    let plant_receiver = Receiver::start();
    let cloud_receiver = Receiver::start();

    let mut config = queue_config(64, "block");
    config["connector"]["push"] = json!({"url": plant_receiver.url(), "retry_initial_ms": 50});
    config["ingest"]["sources"] = json!([
        {"name": "orders", "token": TOKEN},
        {"name": "telemetry", "token": TOKEN},
    ]);
    config["mqtt"] = json!({"connections": [
        {"name": "site", "url": site.url(), "client_id": "it-site", "reconnect_max_ms": 200},
        {"name": "cloud", "url": cloud.url(), "client_id": "it-cloud", "reconnect_max_ms": 200},
    ]});
    let batch = json!({"sink_batch_rows": 5, "flush_interval_ms": 50});
    config["sinks"] = json!([
        {"name": "pg-orders", "type": "postgres", "url": pg.url(), "sink_table": "orders",
         "sink_batch": batch},
        {"name": "pg-telemetry", "type": "postgres", "url": pg.url(), "sink_table": "telemetry",
         "sink_batch": batch},
        {"name": "mq-site", "type": "mqtt", "connection": "site", "topic": "site/{{key}}"},
        {"name": "mq-cloud", "type": "mqtt", "connection": "cloud", "topic": "cloud/{{key}}"},
        {"name": "uplink-2", "type": "push", "max_quota_mb": 16,
         "uplink": {"url": cloud_receiver.url(), "retry_initial_ms": 50}},
    ]);
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["flows"] = json!([
        flow("orders", "ingest/orders", &["pg-orders", "mq-site", "push"]),
        flow(
            "telemetry",
            "ingest/telemetry",
            &["pg-telemetry", "mq-cloud", "uplink-2"]
        ),
    ]);
    let daemon = Daemon::start(config);
    wait_until(POLL_DEADLINE, "both MQTT sinks are connected", || {
        let s = daemon.status();
        named(&s, "/sinks", "mq-site")["connected"] == true
            && named(&s, "/sinks", "mq-cloud")["connected"] == true
    });

    let ingest = |source: &str, key: &str| {
        let r = daemon.post(
            &format!("/api/ingest/{source}/{key}"),
            Some(TOKEN),
            br#"{"v":1}"#,
        );
        assert_stored(&r, &format!("{source}/{key}"))
    };
    let orders: BTreeSet<String> = (0..N).map(|i| ingest("orders", &format!("o{i}"))).collect();
    let telemetry: BTreeSet<String> = (0..N)
        .map(|i| ingest("telemetry", &format!("t{i}")))
        .collect();

    wait_until(POLL_DEADLINE, "every destination has its records", || {
        pg_keys(&pg, "orders").len() == N
            && pg_keys(&pg, "telemetry").len() == N
            && mqtt_ids(&site_sub).len() >= N
            && mqtt_ids(&cloud_sub).len() >= N
            && plant_receiver.unique_ids().len() >= N
            && cloud_receiver.unique_ids().len() >= N
    });
    // Exactly their own records, nothing of the other flow.
    let keys =
        |prefix: &str| -> BTreeSet<String> { (0..N).map(|i| format!("{prefix}{i}")).collect() };
    assert_eq!(pg_keys(&pg, "orders"), keys("o"));
    assert_eq!(pg_keys(&pg, "telemetry"), keys("t"));
    assert_eq!(mqtt_ids(&site_sub), orders);
    assert_eq!(mqtt_ids(&cloud_sub), telemetry);
    assert_eq!(
        plant_receiver
            .unique_ids()
            .into_iter()
            .collect::<BTreeSet<_>>(),
        orders
    );
    assert_eq!(
        cloud_receiver
            .unique_ids()
            .into_iter()
            .collect::<BTreeSet<_>>(),
        telemetry
    );
    assert!(site_sub
        .received()
        .iter()
        .all(|(t, _)| t.starts_with("site/")));
    assert!(cloud_sub
        .received()
        .iter()
        .all(|(t, _)| t.starts_with("cloud/")));

    // Status: every instance in sinks[] by name and type, and in sink_status.
    let status = daemon.status();
    let names: Vec<(String, String)> = status["sinks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (name, kind) in [
        ("push", "push"),
        ("pg-orders", "postgres"),
        ("pg-telemetry", "postgres"),
        ("mq-site", "mqtt"),
        ("mq-cloud", "mqtt"),
        ("uplink-2", "push"),
    ] {
        assert!(
            names.contains(&(name.to_string(), kind.to_string())),
            "{name} ({kind}) missing from {names:?}"
        );
        assert!(
            status["sink_status"][name].is_object(),
            "sink_status.{name}: {status:#}"
        );
    }
    assert_eq!(
        status["sink_status"]["pg-orders"]["table"], "orders",
        "{status:#}"
    );
    assert_eq!(
        status["sink_status"]["uplink-2"]["uplink"]["sent_total"],
        N as u64
    );
    assert_eq!(
        status["uplink"]["sent_total"], N as u64,
        "the sink named push"
    );
    // No instance is named after a database kind, so those top-level documents are empty.
    assert!(status["postgres"].is_null() && status["clickhouse"].is_null());
    // The alert hub watches each queue under its own name.
    for q in [
        "push_queue",
        "uplink-2",
        "uplink-2_writer",
        "pg-orders",
        "mq-cloud",
    ] {
        named(&status, "/queues", q);
    }

    // Metrics: one sample per instance, labelled with its name.
    let metrics = daemon.metrics();
    for line in [
        r#"opex_connector_sink_inserted_rows_total{sink="pg-orders"} 12"#,
        r#"opex_connector_sink_inserted_rows_total{sink="pg-telemetry"} 12"#,
        r#"opex_connector_uplink_sent_total{sink="push"} 12"#,
        r#"opex_connector_uplink_sent_total{sink="uplink-2"} 12"#,
        r#"opex_connector_sink_queue_depth{sink="mq-site"} 0"#,
        r#"opex_connector_sink_queue_depth{sink="mq-cloud"} 0"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} not in:\n{metrics}"
        );
    }

    // The ledger: every instance by name, every source balanced, nothing lost.
    let l = assert_balanced(&ledger(&daemon, true), "after both flows");
    for name in [
        "push",
        "pg-orders",
        "pg-telemetry",
        "mq-site",
        "mq-cloud",
        "uplink-2",
    ] {
        let s = &l["sinks"][name];
        assert_eq!(s["imbalance"], 0, "{name}: {s}");
        assert!(s["delivered"].as_u64().unwrap() >= N as u64, "{name}: {s}");
    }
    for source in ["ingest/orders", "ingest/telemetry"] {
        assert_eq!(source_figure(&l, source, "/acked"), N as u64, "{l:#}");
        assert_eq!(source_figure(&l, source, "/lost"), 0, "{l:#}");
    }
    assert_eq!(l["queue_checks"]["uplink-2"]["agrees"], true, "{l:#}");
}

/// Drops `batches_total` everywhere: how a database sink cut the same rows into batches
/// depends on timing, not on how the sink was configured.
fn without_batches(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("batches_total");
            m.values_mut().for_each(without_batches);
        }
        Value::Array(a) => a.iter_mut().for_each(without_batches),
        _ => {}
    }
}

/// The parts of a status document that describe the sinks.
fn sink_parts(status: &Value) -> Value {
    let mut out = json!({});
    for key in [
        "sinks",
        "sink_status",
        "push_queue",
        "push_status",
        "uplink",
        "storage",
        "clickhouse",
        "postgres",
    ] {
        out[key] = status[key].clone();
    }
    out["queues"] = status["queues"].clone();
    without_batches(&mut out);
    out
}

/// The metric lines of the sinks (`sink="..."`), sorted.
fn sink_lines(metrics: &str) -> Vec<String> {
    let mut lines: Vec<String> = metrics
        .lines()
        .filter(|l| l.contains("sink=\""))
        // How writes and inserts were grouped depends on timing, not on the config.
        .filter(|l| {
            ![
                "_batches_total",
                "_commits_total",
                "_committed_commands_total",
                "_sync_seconds_total",
                "_held_seconds_total",
            ]
            .iter()
            .any(|t| l.contains(t))
        })
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

#[test]
fn the_old_sections_and_the_sinks_list_give_the_same_status_and_metrics() {
    let pg = Postgres::start();
    pg.sql("CREATE TABLE events (ts timestamptz, source text, key text, payload jsonb)");
    let receiver = Receiver::start();
    let uplink = json!({"url": receiver.url(), "retry_initial_ms": 50});
    let batch = json!({"sink_batch_rows": 5, "flush_interval_ms": 50});
    let flows = json!([flow(
        "all",
        &format!("ingest/{SOURCE}"),
        &["push", "storage", "postgres"]
    )]);

    let mut old = queue_config(64, "block");
    old["connector"]["push"] = uplink.clone();
    old["storage"] = json!({"max_quota_mb": 8, "retention_days": 7});
    old["postgres"] = json!({"url": pg.url(), "sink_table": "events", "sink_batch": batch});
    old["flows"] = flows.clone();

    let mut new = queue_config(64, "block");
    new["connector"]
        .as_object_mut()
        .unwrap()
        .remove("push_queue");
    new["sinks"] = json!([
        {"name": "push", "type": "push", "max_quota_mb": 64, "on_full": "block",
         "uplink": uplink},
        {"name": "storage", "type": "storage", "max_quota_mb": 8, "retention_days": 7},
        {"name": "postgres", "type": "postgres", "url": pg.url(), "sink_table": "events",
         "sink_batch": batch},
    ]);
    new["flows"] = flows;

    let mut seen: Vec<(Value, Vec<String>)> = Vec::new();
    for (round, config) in [old, new].into_iter().enumerate() {
        let daemon = Daemon::start(config);
        for i in 0..N {
            assert_stored(&daemon.ingest(&format!("k{i}"), r#"{"v":1}"#), "stored");
        }
        let want = (round + 1) * N;
        wait_until(
            POLL_DEADLINE,
            "the uplink and the table have every record",
            || {
                receiver.unique_ids().len() >= want
                    && pg.sql("SELECT count(*) FROM events").trim() == want.to_string()
            },
        );
        wait_until(POLL_DEADLINE, "the sinks settle", || {
            let s = daemon.status();
            s["uplink"]["sent_total"] == N as u64
                && s["postgres"]["inserted_total"] == N as u64
                && s["push_queue"]["rows"] == 0
        });
        seen.push((sink_parts(&daemon.status()), sink_lines(&daemon.metrics())));
    }
    let (old_status, old_metrics) = &seen[0];
    let (new_status, new_metrics) = &seen[1];
    assert_eq!(old_status, new_status);
    assert_eq!(old_metrics, new_metrics);
    assert!(
        old_metrics
            .iter()
            .any(|l| l == r#"opex_connector_push_queue_gaps_total{sink="push"} 0"#),
        "{old_metrics:#?}"
    );
}

#[test]
fn validate_names_every_problem_of_the_list_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.yaml");
    let config = r#"
connector:
  data_dir: /tmp/x
  push_queue: { max_quota_mb: 8 }
ingest:
  sources:
    - { name: orders, token: tokentokentoken1 }
postgres:
  url: postgres://u@127.0.0.1/db
  sink_table: a
sinks:
  - { name: db-1, type: postgres, url: postgres://u@127.0.0.1/db, sink_table: a, colour: red }
  - { name: db-1, type: postgres, url: postgres://u@127.0.0.1/db }
  - { name: "bad name", type: storage }
  - { name: postgres, type: postgres, url: postgres://u@127.0.0.1/db, sink_table: b }
  - { name: push, type: push }
  - { name: q, type: kafka }
  - { name: m, type: mqtt, qos: 3 }
  - { name: ch, type: clickhouse, url: "http://127.0.0.1:8123", sink_table: t, queue: tape }
flows:
  - id: f
    nodes:
      - { id: in, kind: source, source: ingest/orders }
      - { id: out, kind: sink, sink: nowhere }
    wires:
      - { from: in, to: out }
"#;
    std::fs::write(&file, config).unwrap();
    let out = run_cli(&["validate", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for line in [
        "sinks[0].colour: unknown key",
        r#"sinks[1].name: "db-1" is used twice"#,
        "sinks[1].sink_table: is required",
        r#"sinks[2].name: "bad name" must be 1 to 64 letters, digits, '-' or '_'"#,
        r#"sinks[3].name: "postgres" is also the sink that postgres: makes: use one form"#,
        r#"sinks[4].name: "push" is also the sink that connector.push_queue / connector.push / connector.preprocess makes: use one form"#,
        r#"sinks[5].type: expected one of push, storage, clickhouse, postgres, nats, mqtt, sparkplug, got "kafka""#,
        "sinks[6].connection: mqtt.connections is empty: configure a connection",
        "sinks[6].qos: 3: expected 0 or 1",
        r#"sinks[7].queue: expected memory or disk, got "tape""#,
        r#"flows[0].nodes[1].sink: unknown sink "nowhere""#,
    ] {
        assert!(err.contains(line), "missing {line:?} in:\n{err}");
    }
}

#[test]
fn qos0_and_block_with_a_memory_backlog_are_warned_but_valid() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.yaml");
    let config = r#"
connector:
  data_dir: /tmp/x
  push_queue: { max_quota_mb: 8, on_full: block }
ingest:
  sources:
    - { name: orders, token: tokentokentoken1 }
mqtt:
  connections:
    - { name: b, url: "mqtt://127.0.0.1:1883" }
sinks:
  - { name: m, type: mqtt, qos: 0 }
  - { name: db, type: postgres, url: postgres://u@127.0.0.1/db, sink_table: a }
  - { name: safe, type: postgres, url: postgres://u@127.0.0.1/db, sink_table: b, queue: disk }
flows:
  - id: f
    nodes:
      - { id: in, kind: source, source: ingest/orders }
      - { id: up, kind: sink, sink: push }
      - { id: db, kind: sink, sink: db }
      - { id: m, kind: sink, sink: m }
    wires:
      - { from: in, to: up }
      - { from: in, to: db }
      - { from: in, to: m }
"#;
    std::fs::write(&file, config).unwrap();
    let out = run_cli(&["validate", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: sinks[0].qos: 0: nothing confirms a publish"),
        "{err}"
    );
    assert!(
        err.contains("warning: flows[0]: delivers under block (push) and to sinks that keep records in memory (db)"),
        "{err}"
    );
}
