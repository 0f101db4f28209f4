//! A reload changes one source at a time while the others go on untouched: ingest sources,
//! schedules and JetStream consumers added, changed and removed by `POST /api/config`, with
//! the unchanged ones' counters and connections (the NATS server's own connection ids) kept.
//! Drives the real binary against a real nats-server.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const ADMIN: &str = ADMIN_TOKEN;
const OTHER: &str = "other";
const OTHER_TOKEN: &str = "other-t0ken-0123456";

fn running(daemon: &Daemon) -> Value {
    let text = std::fs::read_to_string(daemon.config_path()).expect("the config file");
    serde_saphyr::from_str(&text).expect("YAML")
}

fn apply(daemon: &Daemon, config: &Value) -> Value {
    let reply = daemon.post("/api/config", Some(ADMIN), to_yaml(config).as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()
}

fn source(daemon: &Daemon, name: &str) -> Value {
    named(&daemon.status(), "/sources", name).clone()
}

fn schedules(daemon: &Daemon) -> Vec<Value> {
    daemon.status()["schedules"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn ingest_sources_and_schedules_are_added_changed_and_removed_while_the_others_go_on() {
    let daemon = Daemon::start(json!({
        "connector": {
            "http": {"admin_token": ADMIN},
            "push_queue": {"enabled": true, "max_quota_mb": 16},
        },
        "ingest": {"sources": [
            {"name": SOURCE, "token": TOKEN},
            {"name": OTHER, "token": OTHER_TOKEN},
        ]},
    }));
    let other = |key: &str| {
        daemon.request(
            "POST",
            &format!("/api/ingest/{OTHER}/{key}"),
            Some(OTHER_TOKEN),
            &[],
            Some(b"{\"v\": 1}"),
        )
    };
    assert_eq!(other("o-1").status, 200);
    assert_eq!(daemon.ingest("k-1", "{\"v\": 1}").status, 200);

    // A token changed and a schedule added: those two parts, nothing else.
    let mut new = running(&daemon);
    new["ingest"]["sources"][0]["token"] = json!("a-new-t0ken-0123456");
    new["schedules"] = json!([{"name": "ping", "every": "1s"}]);
    let body = apply(&daemon, &new);
    assert_eq!(
        body["changes"]["restart"],
        json!([format!("ingest/{SOURCE}")]),
        "{body}"
    );
    assert_eq!(body["changes"]["start"], json!(["schedule/ping"]), "{body}");
    assert_eq!(body["changes"]["stop"], json!([]), "{body}");

    // The old token is refused, the new one stores; the other source kept its counters.
    assert_eq!(daemon.ingest("k-2", "{\"v\": 2}").status, 401);
    let reply = daemon.request(
        "POST",
        &format!("/api/ingest/{SOURCE}/k-3"),
        Some("a-new-t0ken-0123456"),
        &[],
        Some(b"{\"v\": 3}"),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        u64_at(&source(&daemon, &format!("ingest/{OTHER}")), "/stored"),
        1
    );
    assert_eq!(other("o-2").status, 200);
    assert_eq!(
        u64_at(&source(&daemon, &format!("ingest/{OTHER}")), "/stored"),
        2
    );
    // The restarted one counts from its restart.
    assert_eq!(
        u64_at(&source(&daemon, &format!("ingest/{SOURCE}")), "/stored"),
        1
    );

    // The new schedule ticks into the push queue, by the default plan compiled again.
    wait_until(Duration::from_secs(10), "two ticks", || {
        schedules(&daemon)
            .first()
            .is_some_and(|s| u64_at(s, "/ticks_total") >= 2)
    });

    // Removed: it stops, and nothing else changes.
    let mut gone = running(&daemon);
    gone.as_object_mut().expect("a mapping").remove("schedules");
    let body = apply(&daemon, &gone);
    assert_eq!(body["changes"]["stop"], json!(["schedule/ping"]), "{body}");
    assert_eq!(body["changes"]["restart"], json!([]), "{body}");
    assert!(schedules(&daemon).is_empty());
    assert_eq!(other("o-3").status, 200);
    assert_eq!(daemon.status()["config"]["revision"], json!(3));
}

/// The NATS server's connection id of the client named `name`, if it is connected.
fn cid(server: &NatsServer, name: &str) -> Option<u64> {
    let connz = server.monitor("/connz")?;
    connz["connections"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == json!(name))
        .and_then(|c| c["cid"].as_u64())
}

#[test]
fn a_changed_jetstream_consumer_restarts_alone_and_the_other_keeps_its_connection() {
    let server = NatsServer::start();
    let js = Js::connect(&server.url());
    js.create_stream("A", &["a.>"]);
    js.create_stream("B", &["b.>"]);
    let mut config = json!({
        "connector": {
            "http": {"admin_token": ADMIN},
            "push_queue": {"enabled": true, "max_quota_mb": 16},
        },
        "ingest": {"sources": [{"name": SOURCE, "token": TOKEN}]},
    });
    config["nats"] = json!({
        "connections": [{"name": "js", "servers": [server.url()]}],
        "sources": [
            {"name": "a", "stream": "A", "durable": "edge-a"},
            {"name": "b", "stream": "B", "durable": "edge-b"},
        ],
    });
    let daemon = Daemon::start(config);
    let consuming = |name: &str| source(&daemon, &format!("nats/{name}"))["consuming"] == true;
    wait_until(Duration::from_secs(20), "both consume", || {
        consuming("a") && consuming("b")
    });
    let (a_before, b_before) = (
        cid(&server, "opex-connector nats/a").expect("a connected"),
        cid(&server, "opex-connector nats/b").expect("b connected"),
    );
    js.publish("a.one", b"{\"n\": 1}".to_vec());
    js.publish("b.one", b"{\"n\": 1}".to_vec());
    let acked = |name: &str| u64_at(&source(&daemon, &format!("nats/{name}")), "/acked");
    wait_until(Duration::from_secs(20), "both acked", || {
        acked("a") == 1 && acked("b") == 1
    });

    let mut new = running(&daemon);
    new["nats"]["sources"][1]["nak_backoff_initial_ms"] = json!(300);
    let body = apply(&daemon, &new);
    assert_eq!(body["changes"]["restart"], json!(["nats/b"]), "{body}");

    wait_until(Duration::from_secs(20), "b consumes again", || {
        consuming("b")
    });
    assert_eq!(
        cid(&server, "opex-connector nats/a"),
        Some(a_before),
        "a kept its connection"
    );
    let b_after = cid(&server, "opex-connector nats/b").expect("b connected");
    assert_ne!(b_after, b_before, "b connected anew");
    js.publish("a.two", b"{\"n\": 2}".to_vec());
    js.publish("b.two", b"{\"n\": 2}".to_vec());
    wait_until(Duration::from_secs(20), "both acked again", || {
        acked("a") == 2 && acked("b") == 1
    });
    // Every message stored once: JetStream has nothing pending for either consumer.
    wait_until(Duration::from_secs(20), "nothing pending", || {
        let (pending_a, unacked_a, _) = js.consumer("A", "edge-a");
        let (pending_b, unacked_b, _) = js.consumer("B", "edge-b");
        pending_a + unacked_a + pending_b + unacked_b == 0
    });
    assert_eq!(u64_at(&daemon.status(), "/push_queue/rows"), 4);
}
