//! The loss ledger (`GET /api/ledger`) against the real binary: after ingest, webhooks,
//! filters, unrouted records, evictions, uplink delivery, dead letters and restarts, every
//! source balances (`acked = delivered + pending + dead_lettered + losses`). The push queue
//! check (`?verify=1`) is an admin call; the plain ledger is public.

mod common;

use common::*;
use serde_json::{json, Value};

const OTHER: &str = "unwired";
const OTHER_TOKEN: &str = "unwired-t0ken-0123";
const ERP: &str = "erp";
const ERP_SECRET: &str = "whsec_erp_0123456789abcdef";

fn sink_node(id: &str, sink: &str) -> Value {
    json!({ "id": id, "kind": "sink", "sink": sink })
}

fn wire(from: &str, to: &str) -> Value {
    json!({ "from": from, "to": to })
}

/// Ingest `orders`: payments to push, refunds to storage, `skip` filtered, anything else
/// dead-lettered (unwired port); webhooks `stripe` (on_receipt) and `erp` (on_done) to push;
/// the ingest source `unwired` has no flow. A 1 MiB `evict_oldest` push queue drains to
/// `receiver`.
fn config(receiver: &Receiver) -> Value {
    let mut config = queue_config(1, "evict_oldest");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["connector"]["push"] = json!({
        "url": receiver.url(),
        "batch_rows": 50,
        "retry_initial_ms": 50,
        "retry_max_ms": 300,
    });
    config["ingest"]["sources"] = json!([
        { "name": SOURCE, "token": TOKEN },
        { "name": OTHER, "token": OTHER_TOKEN },
    ]);
    config["webhooks"] = json!([
        webhook(HOOK, HOOK_SECRET, "on_receipt"),
        webhook(ERP, ERP_SECRET, "on_done"),
    ]);
    config["flows"] = json!([
        {
            "id": "orders",
            "nodes": [
                { "id": "in", "kind": "source", "source": format!("ingest/{SOURCE}") },
                {
                    "id": "keep", "kind": "filter",
                    "where": [ { "field": "payload.type", "op": "ne", "value": "skip" } ],
                },
                { "id": "kind", "kind": "switch", "field": "payload.type", "cases": ["payment", "refund"] },
                sink_node("up", "push"),
                sink_node("store", "storage"),
            ],
            // `kind:else` is left unwired: such a record is dead-lettered.
            "wires": [
                wire("in", "keep"), wire("keep", "kind"),
                wire("kind:0", "up"), wire("kind:1", "store"),
            ],
        },
        {
            "id": "hooks",
            "nodes": [
                { "id": "stripe", "kind": "source", "source": format!("webhook/{HOOK}") },
                { "id": "erp", "kind": "source", "source": format!("webhook/{ERP}") },
                sink_node("up", "push"),
            ],
            "wires": [ wire("stripe", "up"), wire("erp", "up") ],
        },
    ]);
    config
}

fn post(daemon: &Daemon, key: &str, kind: &str, pad: usize) {
    let body = json!({ "type": kind, "ref": key, "pad": "x".repeat(pad) }).to_string();
    let reply = daemon.ingest(key, &body);
    assert_eq!(reply.status, 200, "{key}: {reply:?}");
}

#[test]
fn every_source_balances_through_ingest_webhooks_eviction_delivery_dead_letters_and_restarts() {
    let receiver = Receiver::start_down();
    receiver.reject_payloads_containing("poison");
    let mut daemon = Daemon::start(config(&receiver));
    let orders = format!("ingest/{SOURCE}");
    let stripe = format!("webhook/{HOOK}");
    let erp = format!("webhook/{ERP}");
    let unwired = format!("ingest/{OTHER}");

    for i in 0..5 {
        post(&daemon, &format!("r{i}"), "refund", 10);
        post(&daemon, &format!("s{i}"), "skip", 10);
        post(&daemon, &format!("o{i}"), "other", 10);
    }
    for i in 0..3 {
        let r = daemon.post(
            &format!("/api/ingest/{OTHER}/u{i}"),
            Some(OTHER_TOKEN),
            b"{\"n\":1}",
        );
        assert_eq!(r.status, 200, "{r:?}");
    }
    for i in 0..10 {
        assert_eq!(
            daemon
                .hook(HOOK, HOOK_SECRET, &format!(r#"{{"h":{i}}}"#))
                .status,
            200
        );
        assert_stored(
            &daemon.hook(ERP, ERP_SECRET, &format!(r#"{{"e":{i}}}"#)),
            "erp",
        );
    }
    post(&daemon, "poison-1", "payment", 10);
    let l = assert_balanced(&ledger(&daemon, true), "before any eviction");
    assert_eq!(source_figure(&l, &orders, "/acked"), 16, "{l:#}");
    assert_eq!(
        source_figure(&l, &orders, "/delivered"),
        5,
        "refunds in storage"
    );
    assert_eq!(source_figure(&l, &orders, "/losses/suppressed"), 5, "{l:#}");
    assert_eq!(source_figure(&l, &orders, "/dead_lettered"), 5, "{l:#}");
    assert_eq!(source_figure(&l, &orders, "/pending"), 1, "{l:#}");
    assert_eq!(source_figure(&l, &unwired, "/losses/unrouted"), 3, "{l:#}");
    wait_until(POLL_DEADLINE, "the on_receipt webhooks settled", || {
        source_figure(&ledger(&daemon, false), &stripe, "/pending") == 10
    });
    assert_eq!(source_figure(&l, &erp, "/pending"), 10, "{l:#}");

    // The receiver is down: 1 KiB payments fill the 1 MiB queue and evict the oldest rows.
    for i in 0..1500 {
        post(&daemon, &format!("p{i:04}"), "payment", 1000);
    }
    let l = assert_balanced(&ledger(&daemon, true), "after evictions");
    let evicted = source_figure(&l, &orders, "/losses/evicted")
        + source_figure(&l, &stripe, "/losses/evicted")
        + source_figure(&l, &erp, "/losses/evicted");
    assert!(evicted > 400, "rows were evicted: {l:#}");
    assert_eq!(
        evicted,
        u64_at(&daemon.status(), "/push_queue/evicted_total"),
        "every eviction is attributed to a source"
    );

    // kill -9 with rows pending: the push queue's part of the ledger comes back with them.
    daemon.kill9();
    daemon.restart();
    let after = assert_balanced(&ledger(&daemon, true), "after kill -9");
    for pointer in ["/pending", "/losses/evicted", "/acked"] {
        assert_eq!(
            after["parts"]["push_queue"][&orders].pointer(pointer),
            l["parts"]["push_queue"][&orders].pointer(pointer),
            "{pointer} of the push queue's part survives kill -9"
        );
    }

    post(&daemon, "poison-2", "payment", 10);
    receiver.up();
    wait_until(POLL_DEADLINE, "the push queue drained", || {
        u64_at(&daemon.status(), "/push_queue/rows") == 0
    });
    let l = assert_balanced(&ledger(&daemon, true), "after delivery");
    for source in [&orders, &stripe, &erp] {
        assert_eq!(source_figure(&l, source, "/pending"), 0, "{source}: {l:#}");
    }
    let push = &l["parts"]["push_queue"][&orders];
    assert!(
        u64_at(push, "/dead_lettered") >= 1,
        "poison-2 went to the push dead letters: {l:#}"
    );
    let delivered = u64_at(push, "/delivered");
    let received = receiver
        .records()
        .iter()
        .filter(|r| r["source"] == json!(orders))
        .map(|r| r["id"].clone())
        .collect::<std::collections::HashSet<_>>()
        .len() as u64;
    assert_eq!(
        delivered, received,
        "delivered = distinct records at the receiver: {l:#}"
    );
    let sink = &l["sinks"]["push"];
    assert_eq!(sink["imbalance"], json!(0), "{l:#}");
    assert_eq!(u64_at(sink, "/pending"), 0, "{l:#}");

    // A clean restart keeps the durable part; the memory part starts again at zero.
    daemon.stop();
    daemon.restart();
    let l2 = assert_balanced(&ledger(&daemon, true), "after a clean restart");
    assert_eq!(
        l2["parts"]["push_queue"], l["parts"]["push_queue"],
        "{l2:#}"
    );
    assert_eq!(
        source_figure(&l2, &unwired, "/acked"),
        0,
        "memory part restarted"
    );
}

/// Regression: `GET /api/ledger?verify=1` scanned the whole push queue for anyone who asked.
#[test]
fn anyone_could_scan_the_push_queue_now_verify_needs_the_admin_token_and_the_plain_ledger_stays_public(
) {
    let receiver = Receiver::start();
    let daemon = Daemon::start(config(&receiver));
    post(&daemon, "k1", "payment", 10);
    for token in [None, Some("wrong-t0ken"), Some(TOKEN)] {
        let reply = daemon.get("/api/ledger?verify=1", token);
        assert_error_reply(&reply, 401, &format!("verify with token {token:?}"));
        assert!(reply.json().get("push_queue_check").is_none());
    }
    let reply = daemon.get("/api/ledger?verify=1", Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "{reply:?}");
    let checked = reply.json();
    assert_eq!(
        checked["push_queue_check"]["checked"],
        json!(true),
        "{checked:#}"
    );
    assert_balanced(&checked, "verified with the admin token");
    let plain = daemon.get("/api/ledger", None);
    assert_eq!(plain.status, 200, "{plain:?}");
    assert!(plain.json().get("push_queue_check").is_none());
    assert_eq!(plain.json()["balanced"], json!(true));
    drop(daemon);

    // Without admin_token configured the check does not exist, like every admin call.
    let mut without = config(&receiver);
    without["connector"]["http"]
        .as_object_mut()
        .expect("http")
        .remove("admin_token");
    let daemon = Daemon::start(without);
    for token in [None, Some(ADMIN_TOKEN)] {
        let reply = daemon.get("/api/ledger?verify=1", token);
        assert_error_reply(
            &reply,
            404,
            &format!("verify without admin_token, token {token:?}"),
        );
    }
    assert_eq!(daemon.get("/api/ledger", None).status, 200);
}
