//! Helpers for the flow-era API: webhooks, dead letters, events, the per-sink refusal, and
//! the parts of `/api/status` the engine adds.

use serde_json::{json, Value};

use super::{padded_payload, u64_at, Daemon, Reply};

/// The admin bearer token of the tests that configure one.
pub const ADMIN_TOKEN: &str = "adm1n-t0ken-it-0123";
/// The webhook most tests declare, and its secret.
pub const HOOK: &str = "stripe";
pub const HOOK_SECRET: &str = "whsec_it_0123456789abcdef";

/// A `webhooks:` entry.
pub fn webhook(name: &str, secret: &str, respond: &str) -> Value {
    json!({ "name": name, "secret": secret, "respond": respond, "tolerance_secs": 300 })
}

/// The exact body of a refusal by `sink` under `block`.
pub fn retry_body_of(sink: &str, n: u64) -> String {
    format!(r#"{{"ok":false,"result":"retry","sink":"{sink}","retry_after_secs":{n}}}"#)
}

/// Checks a refusal under `block`: 503, an integer `Retry-After: N` and exactly the retry
/// body naming `sink` with the same N. Returns N.
pub fn assert_retry(reply: &Reply, sink: &str, what: &str) -> u64 {
    assert_eq!(reply.status, 503, "{what}: expected 503, got {reply:?}");
    let n: u64 = reply
        .header("retry-after")
        .unwrap_or("")
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{what}: 503 without an integer Retry-After: {reply:?}"));
    assert_eq!(reply.body, retry_body_of(sink, n), "{what}: the 503 body");
    n
}

/// Checks `200 {"ok":true,"result":"stored","id":"<id>"}` (no other field) and returns the id.
pub fn assert_stored(reply: &Reply, what: &str) -> String {
    assert_eq!(reply.status, 200, "{what}: expected 200, got {reply:?}");
    let body = reply.json();
    assert_eq!(body["ok"], json!(true), "{what}: {}", reply.body);
    assert_eq!(body["result"], json!("stored"), "{what}: {}", reply.body);
    let id = body["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no string id in {}", reply.body));
    assert!(!id.is_empty(), "{what}: empty id in {}", reply.body);
    assert_eq!(
        body.as_object().map(|o| o.len()),
        Some(3),
        "{what}: extra fields in {}",
        reply.body
    );
    id.to_string()
}

/// Checks `{"ok":false,"error":"<non-empty>"}` with `status`; returns the error text.
pub fn assert_error_reply(reply: &Reply, status: u16, what: &str) -> String {
    assert_eq!(reply.status, status, "{what}: got {reply:?}");
    let body = reply.json();
    assert_eq!(body["ok"], json!(false), "{what}: {}", reply.body);
    let error = body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no string `error` in {}", reply.body));
    assert!(!error.is_empty(), "{what}: empty error in {}", reply.body);
    error.to_string()
}

/// `GET /api/events?{query}` with the admin token (must answer 200): its rows.
pub fn events(daemon: &Daemon, query: &str) -> Vec<Value> {
    let reply = daemon.get(&format!("/api/events?{query}"), Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "GET /api/events?{query}: {reply:?}");
    let body = reply.json();
    body["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("/api/events?{query} has no rows array: {body:#}"))
        .clone()
}

/// Ids of the stored events of `source` (up to 10000), oldest first.
pub fn event_ids(daemon: &Daemon, source: &str) -> Vec<String> {
    events(daemon, &format!("source={source}&limit=10000"))
        .iter()
        .map(|r| {
            r["id"]
                .as_str()
                .unwrap_or_else(|| panic!("event without a string id: {r}"))
                .to_string()
        })
        .collect()
}

/// `GET /api/dead-letters?{query}` with the admin token (must answer 200).
pub fn dead_letters(daemon: &Daemon, query: &str) -> Value {
    let reply = daemon.get(&format!("/api/dead-letters?{query}"), Some(ADMIN_TOKEN));
    assert_eq!(
        reply.status, 200,
        "GET /api/dead-letters?{query}: {reply:?}"
    );
    let body = reply.json();
    assert!(body["rows"].is_array(), "no rows array: {body:#}");
    assert!(body["counts"].is_object(), "no counts object: {body:#}");
    body
}

/// The rows of [`dead_letters`].
pub fn dead_letter_rows(daemon: &Daemon, query: &str) -> Vec<Value> {
    dead_letters(daemon, query)["rows"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Ids of the rows of [`dead_letters`], in the order listed.
pub fn dead_letter_ids(daemon: &Daemon, query: &str) -> Vec<u64> {
    dead_letter_rows(daemon, query)
        .iter()
        .map(|r| u64_at(r, "/id"))
        .collect()
}

/// `GET /api/dead-letters/{id}` with the admin token (must answer 200).
pub fn dead_letter(daemon: &Daemon, id: u64) -> Value {
    let reply = daemon.get(&format!("/api/dead-letters/{id}"), Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "GET /api/dead-letters/{id}: {reply:?}");
    reply.json()
}

/// The element of the array at `pointer` whose `name` is `name`.
pub fn named<'a>(status: &'a Value, pointer: &str, name: &str) -> &'a Value {
    status
        .pointer(pointer)
        .and_then(Value::as_array)
        .and_then(|items| items.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no {pointer}[] named {name:?} in {status:#}"))
}

/// `engine.webhooks[]` of `name`.
pub fn webhook_stats(status: &Value, name: &str) -> Value {
    named(status, "/engine/webhooks", name).clone()
}

/// Posts 1 KB records to the ingest test source until the first refusal (at most 2048 posts,
/// every other reply must be 200). Returns the number stored and the refusal.
pub fn fill_until_refused(daemon: &Daemon, prefix: &str) -> (u64, Reply) {
    let mut stored = 0u64;
    loop {
        assert!(
            stored < 2048,
            "no 503 after {stored} records of 1 KB: is the source wired to a full block sink?"
        );
        let key = format!("{prefix}{stored:05}");
        let reply = daemon.ingest(&key, &padded_payload(&key, 1024));
        match reply.status {
            200 => stored += 1,
            503 => return (stored, reply),
            _ => panic!("filling, record {key}: expected 200 or 503, got {reply:?}"),
        }
    }
}
