//! The metrics reference (`docs/src/reference/metrics.md`) is generated from `/metrics`
//! itself: a connector with one part of every kind (every sink kind, a Modbus and an OPC-UA
//! device, every source kind, a schedule, commands, an alert channel, the OPC-UA server)
//! pointed at a closed port, so
//! every metric family is written, with its type, its labels and its help. The committed page
//! must be what the code writes now: a metric added, renamed or re-described without the page
//! fails here. `UPDATE_REFERENCE=1 cargo test --test metrics_reference` writes it again.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// One part of every kind, each pointed at `port` (nothing listens there).
fn every_part(port: u16) -> Value {
    let at = format!("127.0.0.1:{port}");
    json!({
        "connector": {
            "name": "every-part",
            "http": {"admin_token": "admin-token-0123456789"},
            "push_queue": {"enabled": true, "max_quota_mb": 16},
            "push": {"url": format!("http://{at}/ingest")},
        },
        "ingest": {"sources": [{"name": "line", "token": "token-0123456789"}]},
        "commands": {"token": "commands-token-0123456789"},
        "nats": {
            "connections": [{"name": "plant", "servers": [format!("nats://{at}")]}],
            "sources": [{"name": "orders", "stream": "ORDERS", "filter_subjects": ["orders.>"]}],
        },
        "mqtt": {
            "connections": [{"name": "site", "url": format!("mqtt://{at}"), "client_id": "opex-every"}],
            "sources": [{"name": "sensors", "subscriptions": [{"topic": "plant/+/temp", "qos": 1}]}],
        },
        "webhooks": [{"name": "pay", "secret": "webhook-secret-0123456789"}],
        "schedules": [{"name": "hourly", "every": "1h"}],
        "devices": [
            {"name": "press-1", "protocol": "modbus_tcp", "host": "127.0.0.1", "port": port,
             "points": [{"name": "temp", "register": 0, "type": "u16", "writable": true, "min": 0, "max": 100}]},
            {"name": "boiler-1", "protocol": "opcua", "endpoint": format!("opc.tcp://{at}/"),
             "nodes": [{"name": "temp", "node_id": "ns=2;s=Temp"}]},
        ],
        "sinks": [
            {"name": "storage", "type": "storage"},
            {"name": "ch", "type": "clickhouse", "url": format!("http://{at}"), "sink_table": "t"},
            {"name": "pg", "type": "postgres", "url": format!("postgres://u:p@{at}/db"), "sink_table": "t"},
            {"name": "pgq", "type": "postgres", "url": format!("postgres://u:p@{at}/db"), "sink_table": "t", "queue": "disk"},
            {"name": "bus", "type": "nats", "connection": "plant", "subject": "s.{{key}}"},
            {"name": "uns-mqtt", "type": "mqtt", "connection": "site", "topic": "t/{{key}}"},
            {"name": "uns", "type": "sparkplug", "connection": "site", "group_id": "g", "edge_node_id": "e"},
        ],
        "telemetry": {"alerts": {"webhook": {"url": format!("http://{at}/alerts")}}},
        "opcua_server": {"listen": "127.0.0.1:0", "anonymous": true},
    })
}

/// A metric family as `/metrics` writes it.
#[derive(Debug, Default)]
struct Family {
    name: String,
    kind: String,
    help: String,
    labels: BTreeSet<String>,
}

/// The families of a Prometheus text page, in the order written.
fn families(page: &str) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for line in page.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push(Family {
                name: name.to_string(),
                help: help.to_string(),
                ..Family::default()
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let kind = rest.split_once(' ').map_or("", |(_, k)| k);
            if let Some(f) = out.last_mut() {
                f.kind = kind.to_string();
            }
        } else if let (Some(f), Some(open)) = (out.last_mut(), line.find('{')) {
            let inside = &line[open + 1..line.rfind('}').unwrap_or(line.len())];
            for pair in inside.split("\",") {
                if let Some((key, _)) = pair.split_once('=') {
                    f.labels.insert(key.trim_start_matches(',').to_string());
                }
            }
        }
    }
    out
}

/// The page: an introduction, then one row per family.
fn page(families: &[Family]) -> String {
    let mut out = String::from(
        "# Metrics\n\n\
         Every metric family of `GET /metrics` (the Prometheus text format), in the order the\n\
         page writes them: its name, its type, its labels and what it counts. A family whose\n\
         part is not configured is not written (no device, no `opex_connector_device_*`).\n\n\
         This page is generated: `tests/metrics_reference.rs` starts a connector with one part\n\
         of every kind and writes what its `/metrics` says; the test fails when this page\n\
         differs from what the code writes, and `UPDATE_REFERENCE=1 cargo test --test\n\
         metrics_reference` writes it again.\n\n\
         | family | type | labels | meaning |\n\
         | --- | --- | --- | --- |\n",
    );
    for f in families {
        let labels: Vec<String> = f.labels.iter().map(|l| format!("`{l}`")).collect();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            f.name,
            f.kind,
            labels.join(", "),
            f.help.replace('|', "\\|")
        ));
    }
    out
}

#[test]
fn the_metrics_reference_is_what_metrics_writes_for_one_part_of_every_kind() {
    let daemon = Daemon::start(every_part(free_port()));
    // Every part writes its families from the start; wait for the last ones to exist.
    let mut metrics = String::new();
    wait_until(Duration::from_secs(30), "every part's metrics", || {
        metrics = daemon.metrics();
        [
            "opex_connector_device_polls_total",
            "opex_connector_opcua_device_connected",
            "opex_connector_sparkplug_connected",
            "opex_connector_nats_acked_total",
            "opex_connector_mqtt_received_total",
            "opex_connector_disk_queue_rows",
            "opex_connector_opcua_server_listening",
        ]
        .iter()
        .all(|name| metrics.contains(&format!("# TYPE {name} ")))
    });
    let found = families(&metrics);
    let names: BTreeSet<&str> = found.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names.len(), found.len(), "a family written twice");
    for f in &found {
        assert!(f.name.starts_with("opex_connector_"), "{f:?}");
        assert!(matches!(f.kind.as_str(), "counter" | "gauge"), "{f:?}");
        assert!(!f.help.is_empty(), "{} has no help", f.name);
        assert_eq!(
            f.kind == "counter",
            f.name.ends_with("_total"),
            "a counter's name ends in _total, a gauge's does not: {f:?}"
        );
    }
    committed_page(
        "docs/src/reference/metrics.md",
        &page(&found),
        "metrics_reference",
    );
}
