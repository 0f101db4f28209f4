//! Reads `GET /api/ledger` and checks its identity.

use serde_json::Value;

use super::{u64_at, Daemon};

/// The ledger now; with `verify`, the push queue's pending counts are checked row by row
/// (an admin call: the config needs `connector.http.admin_token`).
pub fn ledger(daemon: &Daemon, verify: bool) -> Value {
    let (path, token) = if verify {
        let token = daemon.admin_token().expect(
            "GET /api/ledger?verify=1 needs connector.http.admin_token in the test's config",
        );
        ("/api/ledger?verify=1", Some(token))
    } else {
        ("/api/ledger", None)
    };
    let reply = daemon.get(path, token);
    assert_eq!(reply.status, 200, "GET {path}: {reply:?}");
    reply.json()
}

/// Checks that every source balances (`acked = delivered + pending + dead_lettered + lost`),
/// recomputing the identity from the figures, and (when present) that the push queue's pending
/// counts agree with its rows. Returns the ledger.
pub fn assert_balanced(ledger: &Value, what: &str) -> Value {
    assert_eq!(ledger["balanced"], Value::Bool(true), "{what}: {ledger:#}");
    let sources = ledger["sources"].as_object().expect("sources");
    for (name, c) in sources {
        let acked = u64_at(c, "/acked");
        let right = u64_at(c, "/delivered")
            + u64_at(c, "/pending")
            + u64_at(c, "/dead_lettered")
            + u64_at(c, "/lost");
        assert_eq!(
            acked, right,
            "{what}: source {name} does not balance: {c:#}"
        );
        let losses: u64 = c["losses"]
            .as_object()
            .expect("losses")
            .values()
            .map(|v| v.as_u64().expect("a count"))
            .sum();
        assert_eq!(
            losses,
            u64_at(c, "/lost"),
            "{what}: {name} lost = sum of causes"
        );
    }
    if let Some(check) = ledger.get("push_queue_check") {
        assert_eq!(
            check["agrees"],
            Value::Bool(true),
            "{what}: the push queue's pending counts disagree with its rows: {check:#}"
        );
    }
    ledger.clone()
}

/// One figure of one source (0 when the source is not in the ledger).
pub fn source_figure(ledger: &Value, source: &str, pointer: &str) -> u64 {
    ledger["sources"]
        .get(source)
        .and_then(|c| c.pointer(pointer))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}
