//! Deployed flows: per-source backpressure, map / filter / switch routing to push and storage,
//! unrouted sources, subflows, and `validate` on flow graphs. Drives the real binary.

mod common;

use std::collections::HashSet;
use std::process::Output;

use common::*;
use serde_json::{json, Value};
use tempfile::TempDir;

/// A second ingest source that no flow takes.
const OTHER: &str = "returns";
const OTHER_TOKEN: &str = "returns-t0ken-0123";

fn source_node(id: &str, source: &str) -> Value {
    json!({ "id": id, "kind": "source", "source": source })
}

fn sink_node(id: &str, sink: &str) -> Value {
    json!({ "id": id, "kind": "sink", "sink": sink })
}

fn wire(from: &str, to: &str) -> Value {
    json!({ "from": from, "to": to })
}

/// A flow of one source straight into one sink.
fn straight(id: &str, source: &str, sink: &str) -> Value {
    json!({
        "id": id,
        "nodes": [ source_node("in", source), sink_node("out", sink) ],
        "wires": [ wire("in", "out") ],
    })
}

fn post_ingest(daemon: &Daemon, source: &str, token: &str, key: &str, body: &str) -> Reply {
    daemon.post(
        &format!("/api/ingest/{source}/{key}"),
        Some(token),
        body.as_bytes(),
    )
}

/// Checks a 200 `{"ok":true,...}` with a string id and returns the id (the `result` of a
/// filtered or dead-lettered ingest record is not fixed by the contract).
fn ok_id(reply: &Reply, what: &str) -> String {
    assert_eq!(reply.status, 200, "{what}: {reply:?}");
    let body = reply.json();
    assert_eq!(body["ok"], json!(true), "{what}: {}", reply.body);
    body["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no string id in {}", reply.body))
        .to_string()
}

#[test]
fn webhook_flow_to_storage_keeps_answering_while_a_block_push_queue_refuses_another_source() {
    let mut config = queue_config(1, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["webhooks"] = json!([webhook(HOOK, HOOK_SECRET, "on_done")]);
    config["flows"] = json!([
        straight("pay", &format!("webhook/{HOOK}"), "storage"),
        straight("tele", &format!("ingest/{SOURCE}"), "push"),
    ]);
    let daemon = Daemon::start(config);

    let (filled, refusal) = fill_until_refused(&daemon, "t");
    assert!(filled >= 256, "refused after only {filled} records of 1 KB");
    assert_retry(&refusal, "push", "ingest at the full push queue");

    let mut hook_ids = Vec::new();
    for i in 0..20 {
        let body = format!(r#"{{"order":{i},"amount":{}}}"#, 100 + i);
        let reply = daemon.hook(HOOK, HOOK_SECRET, &body);
        hook_ids.push(assert_stored(
            &reply,
            &format!("webhook {i} to storage while push is full"),
        ));
        if i % 5 == 4 {
            // The ingest source is still refused in between.
            let key = format!("again{i}");
            let reply = daemon.ingest(&key, &padded_payload(&key, 1024));
            assert_retry(&reply, "push", "ingest, still full");
        }
    }
    let ingest_refusals = 1 + 4;

    assert_eq!(
        event_ids(&daemon, &format!("webhook/{HOOK}"))
            .into_iter()
            .collect::<HashSet<_>>(),
        hook_ids.iter().cloned().collect::<HashSet<_>>(),
        "every webhook record in storage"
    );
    assert!(
        event_ids(&daemon, &format!("ingest/{SOURCE}")).is_empty(),
        "the ingest flow does not reach storage"
    );
    let status = daemon.status();
    assert_eq!(u64_at(&status, "/push_queue/rows"), filled, "{status:#}");
    assert_eq!(u64_at(&status, "/storage/rows"), 20, "{status:#}");
    assert_eq!(
        u64_at(&status, "/engine/stats/backpressured"),
        ingest_refusals,
        "{status:#}"
    );
    let hook = webhook_stats(&status, HOOK);
    assert_eq!(u64_at(&hook, "/accepted"), 20, "{hook:#}");
    assert_eq!(u64_at(&hook, "/backpressured"), 0, "{hook:#}");
    assert_eq!(
        u64_at(named(&status, "/sinks", "push"), "/blocked"),
        ingest_refusals,
        "{status:#}"
    );
    assert_eq!(
        u64_at(named(&status, "/sinks", "storage"), "/blocked"),
        0,
        "{status:#}"
    );
}

#[test]
fn map_filter_switch_flow_delivers_each_record_to_its_sink_and_counts_the_filtered() {
    let receiver = Receiver::start();
    let mut config = queue_config(8, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["connector"]["push"] = json!({
        "url": receiver.url(),
        "batch_rows": 10,
        "retry_initial_ms": 50,
        "retry_max_ms": 300,
    });
    config["flows"] = json!([{
        "id": "route",
        "nodes": [
            source_node("in", &format!("ingest/{SOURCE}")),
            {
                "id": "tag", "kind": "map",
                "set": {
                    "payload.site": "plant-3",
                    "payload.ref": "{{key}}-{{payload.order}}",
                    "payload.copy": "{{payload.amt}}",
                    "payload.tags": ["a", 1],
                },
                "rename": { "payload.amt": "payload.amount" },
                "remove": ["payload.debug"],
            },
            {
                "id": "big", "kind": "filter",
                "where": [ { "field": "payload.amount", "op": "gt", "value": 100 } ],
            },
            { "id": "kind", "kind": "switch", "field": "payload.type", "cases": ["payment", "refund"] },
            sink_node("keep", "storage"),
            sink_node("up", "push"),
        ],
        // `kind:else` is left unwired: such a record is dead-lettered.
        "wires": [
            wire("in", "tag"), wire("tag", "big"), wire("big", "kind"),
            wire("kind:0", "keep"), wire("kind:1", "up"),
        ],
    }]);
    let daemon = Daemon::start(config);

    let post = |key: &str, body: Value| ok_id(&daemon.ingest(key, &body.to_string()), key);
    let a = post(
        "kA",
        json!({"order": 1001, "type": "payment", "amt": 150, "debug": "x"}),
    );
    let b = post("kB", json!({"order": 1002, "type": "refund", "amt": 500}));
    let _c = post("kC", json!({"order": 1003, "type": "payment", "amt": 50}));
    // gt, not ge.
    let _d = post("kD", json!({"order": 1004, "type": "refund", "amt": 100}));
    // A string never compares with a number: the condition is false.
    let _f = post(
        "kF",
        json!({"order": 1006, "type": "payment", "amt": "999"}),
    );
    let e = post("kE", json!({"order": 1005, "type": "other", "amt": 200}));

    // kA went to storage, transformed.
    let stored = events(&daemon, &format!("source=ingest/{SOURCE}&limit=100"));
    assert_eq!(stored.len(), 1, "only kA is stored: {stored:#?}");
    assert_eq!(stored[0]["id"], json!(a), "{stored:#?}");
    assert_eq!(stored[0]["key"], json!("kA"), "{stored:#?}");
    assert_eq!(
        stored[0]["payload"],
        json!({
            "order": 1001, "type": "payment", "amount": 150, "site": "plant-3",
            "ref": "kA-1001", "copy": 150, "tags": ["a", 1],
        }),
        "set, rename, remove; a lone template keeps the JSON type"
    );

    // kB went to push and arrives at the receiver, transformed; nothing else does.
    wait_until(POLL_DEADLINE, "kB at the receiver", || {
        receiver.has_all(std::slice::from_ref(&b))
    });
    wait_until(POLL_DEADLINE, "the push queue drained", || {
        u64_at(&daemon.status(), "/push_queue/rows") == 0
    });
    assert_eq!(
        receiver.unique_ids().into_iter().collect::<Vec<_>>(),
        vec![b.clone()],
        "only kB reaches push"
    );
    let pushed = receiver
        .records()
        .into_iter()
        .find(|r| r["id"] == json!(b))
        .expect("kB");
    assert_eq!(
        pushed["payload"],
        json!({
            "order": 1002, "type": "refund", "amount": 500, "site": "plant-3",
            "ref": "kB-1002", "copy": 500, "tags": ["a", 1],
        }),
        "{pushed}"
    );
    assert_eq!(
        pushed["source"],
        json!(format!("ingest/{SOURCE}")),
        "{pushed}"
    );

    // kE reached the unwired else port: dead-lettered at the switch.
    let rows = dead_letter_rows(&daemon, "flow=route");
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["record"]["id"], json!(e), "{rows:#?}");
    assert_eq!(rows[0]["node"], json!("kind"), "{rows:#?}");
    assert_eq!(rows[0]["state"], json!("open"), "{rows:#?}");

    let status = daemon.status();
    let stats = &status["engine"]["stats"];
    assert_eq!(u64_at(stats, "/filtered"), 3, "kC, kD, kF: {stats:#}");
    assert_eq!(u64_at(stats, "/dead_lettered"), 1, "kE: {stats:#}");
    assert_eq!(u64_at(stats, "/unrouted"), 0, "{stats:#}");
    assert_eq!(u64_at(stats, "/backpressured"), 0, "{stats:#}");
    assert_eq!(u64_at(&status, "/storage/rows"), 1, "{status:#}");
}

#[test]
fn configured_source_without_a_matching_flow_is_answered_200_and_counted_unrouted() {
    let mut config = queue_config(1, "block");
    config["ingest"]["sources"] = json!([
        { "name": SOURCE, "token": TOKEN },
        { "name": OTHER, "token": OTHER_TOKEN },
    ]);
    config["flows"] = json!([straight("tele", &format!("ingest/{SOURCE}"), "push")]);
    let daemon = Daemon::start(config);

    ok_id(
        &post_ingest(&daemon, OTHER, OTHER_TOKEN, "r1", r#"{"n":1}"#),
        "record of the unrouted source",
    );
    let status = daemon.status();
    assert_eq!(u64_at(&status, "/engine/stats/unrouted"), 1, "{status:#}");
    assert_eq!(u64_at(&status, "/push_queue/rows"), 0, "{status:#}");

    ok_id(
        &post_ingest(&daemon, OTHER, OTHER_TOKEN, "r2", r#"{"n":2}"#),
        "second record of the unrouted source",
    );
    assert_stored(&daemon.ingest("o1", r#"{"n":3}"#), "the routed source");
    let status = daemon.status();
    assert_eq!(u64_at(&status, "/engine/stats/unrouted"), 2, "{status:#}");
    assert_eq!(u64_at(&status, "/push_queue/rows"), 1, "{status:#}");
}

#[test]
fn subflow_gets_a_copy_and_the_caller_continues_on_port_0() {
    let mut config = queue_config(8, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["flows"] = json!([
        {
            "id": "main",
            "nodes": [
                source_node("in", &format!("ingest/{SOURCE}")),
                { "id": "tail", "kind": "subflow", "flow": "common" },
                sink_node("keep", "storage"),
            ],
            "wires": [ wire("in", "tail"), wire("tail", "keep") ],
        },
        {
            "id": "common",
            "nodes": [ { "id": "entry", "kind": "input" }, sink_node("up", "push") ],
            "wires": [ wire("entry", "up") ],
        },
    ]);
    let daemon = Daemon::start(config);
    let id = assert_stored(&daemon.ingest("s1", r#"{"n":1}"#), "through the subflow");
    assert_eq!(event_ids(&daemon, &format!("ingest/{SOURCE}")), vec![id]);
    let status = daemon.status();
    assert_eq!(u64_at(&status, "/push_queue/rows"), 1, "{status:#}");
    assert_eq!(u64_at(&status, "/storage/rows"), 1, "{status:#}");
}

// validate

/// A valid config with a webhook, two ingest sources and a flow using every node kind.
fn valid_config() -> Value {
    json!({
        "connector": {
            "name": "flows-it",
            "data_dir": "/var/lib/opex-connector",
            "http": { "listen": "127.0.0.1:8080", "admin_token": ADMIN_TOKEN },
            "push_queue": { "enabled": true, "max_quota_mb": 64, "on_full": "block" },
        },
        "ingest": { "sources": [
            { "name": SOURCE, "token": TOKEN },
            { "name": OTHER, "token": OTHER_TOKEN },
        ] },
        "webhooks": [ webhook(HOOK, HOOK_SECRET, "on_done") ],
        "storage": { "max_quota_mb": 16, "retention_days": 7, "on_full": "evict_oldest" },
        "flows": [
            {
                "id": "pay",
                "nodes": [
                    source_node("in", &format!("webhook/{HOOK}")),                               // 0
                    { "id": "tag", "kind": "map", "set": { "payload.site": "plant-3" } },         // 1
                    { "id": "big", "kind": "filter",
                      "where": [ { "field": "payload.amount", "op": "gt", "value": 100 } ] },    // 2
                    { "id": "kind", "kind": "switch", "field": "payload.type",
                      "cases": ["payment", "refund"] },                                           // 3
                    { "id": "tail", "kind": "subflow", "flow": "common" },                        // 4
                    sink_node("keep", "storage"),                                                 // 5
                    sink_node("up", "push"),                                                      // 6
                ],
                "wires": [
                    wire("in", "tag"),          // 0
                    wire("tag", "big"),         // 1
                    wire("big", "kind"),        // 2
                    wire("kind:0", "keep"),     // 3
                    wire("kind:1", "tail"),     // 4
                    wire("kind:else", "up"),    // 5
                    wire("tail", "up"),         // 6
                    wire("tag:error", "keep"),  // 7
                ],
            },
            {
                "id": "common",
                "nodes": [ { "id": "entry", "kind": "input" }, sink_node("up", "push") ],
                "wires": [ wire("entry", "up") ],
            },
        ],
    })
}

fn validate_value(dir: &TempDir, name: &str, config: &Value) -> (Output, String) {
    let path = dir.path().join(format!("{name}.yaml"));
    std::fs::write(&path, to_yaml(config)).expect("write config");
    let out = run_cli(&["validate", path.to_str().expect("utf-8 path")]);
    (out, path.display().to_string())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The stderr lines that are errors (not `warning:` lines).
fn error_lines(stderr: &str) -> impl Iterator<Item = &str> {
    stderr.lines().filter(|l| !l.starts_with("warning:"))
}

/// Whether an error line reports exactly `path` (followed by `:`).
fn error_at(stderr: &str, path: &str) -> bool {
    error_lines(stderr).any(|l| l.contains(&format!("{path}:")))
}

/// Whether an error line reports a cycle in `flow` (a path like `flows[1]...`) and names one
/// of `nodes` (by id or by path).
fn cycle_reported(stderr: &str, flow: &str, nodes: &[&str]) -> bool {
    error_lines(stderr).any(|l| {
        l.contains(flow)
            && l.to_lowercase().contains("cycle")
            && nodes.iter().any(|n| l.contains(n))
    })
}

#[test]
fn validate_accepts_the_valid_flow_config_without_warnings() {
    let dir = TempDir::new().expect("temp dir");
    let (out, path) = validate_value(&dir, "valid", &valid_config());
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    assert_eq!(text(&out.stdout).trim_end(), format!("{path}: ok"));
    assert!(
        !stderr
            .lines()
            .any(|l| l.starts_with("warning:") && l.contains("flows[")),
        "every port of the valid config is wired: {stderr}"
    );
}

/// One change to the valid flow config, and the paths of which at least one must be reported.
type Case = (&'static str, fn(&mut Value), Vec<&'static str>);

/// Problems of single nodes and wires of `flows[0]`, each at a different place.
fn element_cases() -> Vec<Case> {
    vec![
        (
            "unknown node in a wire's from",
            |c| c["flows"][0]["wires"][1]["from"] = json!("tga"),
            vec!["flows[0].wires[1].from"],
        ),
        (
            "unknown node in a wire's to",
            |c| c["flows"][0]["wires"][2]["to"] = json!("knid"),
            vec!["flows[0].wires[2].to"],
        ),
        (
            "unknown port of a switch",
            |c| c["flows"][0]["wires"][4]["from"] = json!("kind:7"),
            vec!["flows[0].wires[4].from"],
        ),
        (
            "a wire into a source node",
            |c| c["flows"][0]["wires"][6]["to"] = json!("in"),
            vec!["flows[0].wires[6].to"],
        ),
        (
            "unknown sink",
            |c| c["flows"][0]["nodes"][6]["sink"] = json!("kafka"),
            vec!["flows[0].nodes[6].sink"],
        ),
        (
            "unknown source",
            |c| c["flows"][0]["nodes"][0]["source"] = json!("ingest/nosuch"),
            vec!["flows[0].nodes[0].source"],
        ),
        (
            "unknown subflow",
            |c| c["flows"][0]["nodes"][4]["flow"] = json!("nosuch"),
            vec!["flows[0].nodes[4].flow"],
        ),
    ]
}

/// `common` (flows[1]) with a cycle loop_a -> loop_b -> loop_a, through port 0 or through
/// loop_b's error port.
fn with_cycle(config: &mut Value, through_error: bool) {
    let (back, out) = if through_error {
        ("loop_b:error", "loop_b")
    } else {
        ("loop_b", "loop_b:error")
    };
    config["flows"][1] = json!({
        "id": "common",
        "nodes": [
            { "id": "entry", "kind": "input" },
            { "id": "loop_a", "kind": "map", "set": { "payload.a": 1 } },
            { "id": "loop_b", "kind": "map", "set": { "payload.b": 1 } },
            sink_node("up", "push"),
        ],
        "wires": [
            wire("entry", "loop_a"),
            wire("loop_a", "loop_b"),
            wire(back, "loop_a"),
            wire("loop_a:error", "up"),
            wire(out, "up"),
        ],
    });
}

/// A third flow whose `orphan` (nodes[2]) nothing wires into.
fn with_unreachable(config: &mut Value) {
    config["flows"].as_array_mut().expect("flows").push(json!({
        "id": "side",
        "nodes": [
            source_node("in", &format!("ingest/{OTHER}")),
            sink_node("up", "push"),
            { "id": "orphan", "kind": "map", "set": { "payload.x": 1 } },
        ],
        "wires": [ wire("in", "up"), wire("orphan", "up") ],
    }));
}

const CYCLE_NODES: [&str; 4] = ["loop_a", "loop_b", "flows[1].nodes[1]", "flows[1].nodes[2]"];
const UNREACHABLE: [&str; 2] = ["flows[2].nodes[2]", "flows[2].nodes[2].id"];

#[test]
fn validate_refuses_each_broken_flow_with_its_path() {
    let dir = TempDir::new().expect("temp dir");
    let mut cases = element_cases();
    cases.push(("unreachable node", with_unreachable, UNREACHABLE.to_vec()));
    let mut failures = Vec::new();
    for (i, (case, change, paths)) in cases.into_iter().enumerate() {
        let mut config = valid_config();
        change(&mut config);
        let (out, _) = validate_value(&dir, &format!("case{i}"), &config);
        let stderr = text(&out.stderr);
        if out.status.code() != Some(1) {
            failures.push(format!(
                "{case}: exit {:?} (want 1); stderr: {stderr}",
                out.status.code()
            ));
        } else if !paths.iter().any(|p| error_at(&stderr, p)) {
            failures.push(format!(
                "{case}: no error line names {paths:?}; stderr: {stderr}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn validate_refuses_cycles_naming_the_flow_and_a_node_on_the_cycle() {
    let dir = TempDir::new().expect("temp dir");
    for (i, through_error) in [false, true].into_iter().enumerate() {
        let mut config = valid_config();
        with_cycle(&mut config, through_error);
        let (out, _) = validate_value(&dir, &format!("cycle{i}"), &config);
        let stderr = text(&out.stderr);
        let case = if through_error {
            "a cycle through an error wire"
        } else {
            "a cycle of port-0 wires"
        };
        assert_eq!(out.status.code(), Some(1), "{case}: stderr: {stderr}");
        assert!(
            cycle_reported(&stderr, "flows[1]", &CYCLE_NODES),
            "{case}: no error line names flows[1], a cycle and loop_a or loop_b: {stderr}"
        );
    }

    // A cycle across subflow references: pay calls common, common calls pay.
    let mut config = valid_config();
    config["flows"][1] = json!({
        "id": "common",
        "nodes": [
            { "id": "entry", "kind": "input" },
            { "id": "back", "kind": "subflow", "flow": "pay" },
            sink_node("up", "push"),
        ],
        "wires": [ wire("entry", "back"), wire("back", "up") ],
    });
    // pay needs an input node to be callable.
    let nodes = config["flows"][0]["nodes"].as_array_mut().expect("nodes");
    nodes.push(json!({ "id": "called", "kind": "input" }));
    let wires = config["flows"][0]["wires"].as_array_mut().expect("wires");
    wires.push(wire("called", "tag"));
    let (out, _) = validate_value(&dir, "cycle-subflow", &config);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "subflow cycle: stderr: {stderr}"
    );
    assert!(
        error_lines(&stderr).any(|l| l.to_lowercase().contains("cycle")),
        "subflow cycle: no error line mentions a cycle: {stderr}"
    );
}

#[test]
fn validate_reports_every_flow_problem_of_one_config_together() {
    let dir = TempDir::new().expect("temp dir");
    let mut config = valid_config();
    let mut want = Vec::new();
    for (case, change, paths) in element_cases() {
        // Its target is the source node that "unknown source" breaks; a node whose own
        // checks failed is left out of the wire checks (one typo, one error).
        if case == "a wire into a source node" {
            continue;
        }
        change(&mut config);
        want.push(paths[0]);
    }
    with_cycle(&mut config, false);
    with_unreachable(&mut config);
    let (out, _) = validate_value(&dir, "all", &config);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    let mut missing: Vec<&str> = want
        .iter()
        .copied()
        .filter(|p| !error_at(&stderr, p))
        .collect();
    if !cycle_reported(&stderr, "flows[1]", &CYCLE_NODES) {
        missing.push("the cycle in flows[1]");
    }
    if !UNREACHABLE.iter().any(|p| error_at(&stderr, p)) {
        missing.push("the unreachable flows[2].nodes[2]");
    }
    assert!(
        missing.is_empty(),
        "not reported: {missing:?}\nstderr:\n{stderr}"
    );
}

#[test]
fn validate_warns_about_an_unwired_output_port_and_still_exits_0() {
    let dir = TempDir::new().expect("temp dir");

    // A map whose port 0 goes nowhere (only its error port is wired): warned at nodes[1].
    let mut config = valid_config();
    config["flows"][0]["nodes"] = json!([
        source_node("in", &format!("webhook/{HOOK}")),
        { "id": "tag", "kind": "map", "set": { "payload.site": "plant-3" } },
        sink_node("up", "push"),
    ]);
    config["flows"][0]["wires"] = json!([wire("in", "tag"), wire("tag:error", "up")]);
    let (out, path) = validate_value(&dir, "unwired-map", &config);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a warning is no error: {stderr}"
    );
    assert_eq!(text(&out.stdout).trim_end(), format!("{path}: ok"));
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("warning: flows[0].nodes[1]: ") && l.contains("port 0")),
        "no `warning: flows[0].nodes[1]: ...port 0...` line: {stderr}"
    );
    assert!(
        !error_at(&stderr, "flows[0].nodes[1]"),
        "reported as an error, not a warning: {stderr}"
    );

    // A subflow's port 0 is optional (the called flow handles the record; the engine parks
    // nothing there), so it is not warned about: `tail` (nodes[4]) keeps its input, port 0
    // goes nowhere.
    let mut config = valid_config();
    config["flows"][0]["wires"]
        .as_array_mut()
        .expect("wires")
        .retain(|w| w["from"] != json!("tail"));
    let (out, path) = validate_value(&dir, "unwired-subflow", &config);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a warning is no error: {stderr}"
    );
    assert_eq!(text(&out.stdout).trim_end(), format!("{path}: ok"));
    assert!(
        !stderr
            .lines()
            .any(|l| l.starts_with("warning: flows[0].nodes[4]: ")),
        "an unwired subflow port 0 is no problem: {stderr:?}"
    );
}
