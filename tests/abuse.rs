//! Hostile clients against the real binary: thousands of idle connections, slow bodies,
//! oversize bodies, wrong methods, path traversal, bad and replayed webhook signatures, admin
//! calls without the admin token, and a client trying token after token. Each gets the right
//! status, memory stays bounded, and nothing is stored or changed (push queue rows, dead
//! letters, webhook acceptances).

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// Flow `orders` (ingest/orders -> map that needs `payload.order` -> push) and flow `hooks`
/// (webhook/stripe -> push), an admin token, small body and connection limits.
fn abuse_config() -> Value {
    let mut cfg = queue_config(8, "block");
    cfg["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    cfg["connector"]["http"]["max_body_kb"] = json!(1);
    cfg["connector"]["http"]["header_read_timeout_secs"] = json!(1);
    cfg["connector"]["http"]["body_read_timeout_secs"] = json!(1);
    cfg["webhooks"] = json!([webhook(HOOK, HOOK_SECRET, "on_done")]);
    cfg["flows"] = json!([
        {
            "id": "orders",
            "nodes": [
                { "id": "in", "kind": "source", "source": format!("ingest/{SOURCE}") },
                { "id": "tag", "kind": "map", "set": { "payload.ref": "{{payload.order}}" } },
                { "id": "out", "kind": "sink", "sink": "push" },
            ],
            "wires": [ { "from": "in", "to": "tag" }, { "from": "tag", "to": "out" } ],
        },
        {
            "id": "hooks",
            "nodes": [
                { "id": "in", "kind": "source", "source": format!("webhook/{HOOK}") },
                { "id": "out", "kind": "sink", "sink": "push" },
            ],
            "wires": [ { "from": "in", "to": "out" } ],
        },
    ]);
    cfg
}

/// What must not change under abuse: queue rows, dead-letter counts, webhook acceptances.
fn stored(daemon: &Daemon) -> Value {
    let s = daemon.status();
    json!({
        "rows": s["push_queue"]["rows"],
        "dead_letters": s["dead_letters"],
        "webhooks": s["engine"]["webhooks"],
    })
}

/// After a scenario the ledger balances (the push queue's pending counts checked against its
/// rows) and no source lost anything.
fn assert_ledger_balanced(daemon: &Daemon, what: &str) {
    let l = assert_balanced(&ledger(daemon, true), what);
    for (source, c) in l["sources"].as_object().into_iter().flatten() {
        assert_eq!(
            u64_at(c, "/lost"),
            0,
            "{what}: {source} lost records: {l:#}"
        );
    }
}

fn socket(daemon: &Daemon) -> SocketAddr {
    daemon
        .base()
        .trim_start_matches("http://")
        .parse()
        .expect("daemon address")
}

/// Sends `raw` on a fresh connection and returns (status, whole answer) once the server has
/// answered and closed (every request here says `Connection: close`).
fn raw_request(daemon: &Daemon, raw: &[u8]) -> (u16, String) {
    raw_request_on(TcpStream::connect(socket(daemon)).expect("connect"), raw)
}

/// A connection to the daemon from the loopback address `from` (any of 127.0.0.0/8 on Linux),
/// so a test can be several clients. Std cannot bind before connecting; tokio's socket can.
fn connect_from(daemon: &Daemon, from: Ipv4Addr) -> TcpStream {
    let to = socket(daemon);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4()?;
        s.bind(SocketAddr::from((from, 0)))?;
        let stream = s.connect(to).await?;
        let stream = stream.into_std()?;
        stream.set_nonblocking(false)?;
        Ok::<_, std::io::Error>(stream)
    })
    .unwrap_or_else(|e| panic!("connect from {from}: {e}"))
}

/// `method path` from the address `from`, with `Authorization: <authorization>` when given
/// and a JSON body; (status, whole answer).
fn request_from(
    daemon: &Daemon,
    from: Ipv4Addr,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: &[u8],
) -> (u16, String) {
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let mut raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        socket(daemon),
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    raw_request_on(connect_from(daemon, from), &raw)
}

fn raw_request_on(mut s: TcpStream, raw: &[u8]) -> (u16, String) {
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    // The server may answer and close before a large request is fully sent.
    let _ = s.write_all(raw);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn vm_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The soft limit on open files of this process (the daemon inherits it).
fn nofile_limit() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

#[test]
fn two_thousand_idle_connections_leave_memory_and_open_files_bounded() {
    let mut cfg = abuse_config();
    cfg["connector"]["http"]["max_connections"] = json!(256);
    let daemon = Daemon::start(cfg);
    let pid = daemon.pid();
    let addr = socket(&daemon);
    let before = stored(&daemon);
    let rss_before = vm_rss_kb(pid);
    // Leave room for the test's own files under the inherited limit.
    let wanted = 2000.min(nofile_limit().saturating_sub(200));
    let started = Instant::now();
    let mut idle = Vec::with_capacity(wanted);
    let mut peak_fds = 0;
    for i in 0..wanted {
        // Past the cap and the kernel's accept backlog a connect may wait: that is the cap
        // working, not a failure. Give up on the rest once connects stall.
        match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            Ok(s) => idle.push(s),
            Err(_) if started.elapsed() > Duration::from_secs(10) => break,
            Err(_) => continue,
        }
        if i % 100 == 0 {
            peak_fds = peak_fds.max(open_fds(pid));
        }
    }
    peak_fds = peak_fds.max(open_fds(pid));
    let opened = idle.len();
    assert!(opened >= 500, "only {opened} connections could be opened");
    // The connection cap holds: the daemon never holds many more sockets than the cap.
    assert!(
        peak_fds < 256 + 200,
        "{peak_fds} open files with {opened} idle clients and max_connections 256"
    );
    // Idle clients are cut after the header-read timeout, so a real client gets through.
    wait_until(
        Duration::from_secs(60),
        "a status request past the idle connections",
        || {
            daemon
                .client()
                .get(&daemon.url("/api/status"), None)
                .is_ok()
        },
    );
    let rss_peak = vm_rss_kb(pid);
    drop(idle);
    let rss_growth_mb = rss_peak.saturating_sub(rss_before) / 1024;
    eprintln!(
        "abuse: idle_connections={opened} rss_before_kb={rss_before} rss_after_kb={rss_peak} peak_fds={peak_fds}"
    );
    assert!(
        rss_growth_mb < 64,
        "RSS grew by {rss_growth_mb} MiB with {opened} idle connections"
    );
    assert_eq!(stored(&daemon), before, "idle connections stored something");
    assert_ledger_balanced(
        &daemon,
        "two thousand idle connections leave memory and open files bounded",
    );
}

#[test]
fn a_client_that_stops_sending_its_body_gets_408_and_nothing_is_stored() {
    let daemon = Daemon::start(abuse_config());
    let before = stored(&daemon);
    let mut s = TcpStream::connect(socket(&daemon)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15))).ok();
    let head = format!(
        "POST /api/ingest/{SOURCE}/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{{\"order\":"
    );
    s.write_all(head.as_bytes()).expect("send head");
    let started = Instant::now();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.is_empty() || text.starts_with("HTTP/1.1 408"),
        "a stalled body got {text:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "held for {:?}",
        started.elapsed()
    );
    assert_eq!(stored(&daemon), before);
    assert_ledger_balanced(
        &daemon,
        "a client that stops sending its body gets 408 and nothing is stored",
    );
}

#[test]
fn oversize_bodies_get_413_and_nothing_is_stored() {
    let daemon = Daemon::start(abuse_config());
    let before = stored(&daemon);
    let big = format!(r#"{{"order":"o-1","pad":"{}"}}"#, "x".repeat(4096));
    let r = daemon.post(
        &format!("/api/ingest/{SOURCE}/big"),
        Some(TOKEN),
        big.as_bytes(),
    );
    assert_eq!(r.status, 413, "{r:?}");
    // A signed webhook too large: refused before anything runs.
    let r = daemon.hook(HOOK, HOOK_SECRET, &big);
    assert_eq!(r.status, 413, "{r:?}");
    // Chunked, so no Content-Length announces the size: cut at the limit all the same.
    let chunk = "x".repeat(1000);
    let mut raw = format!(
        "POST /api/ingest/{SOURCE}/chunked HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    for _ in 0..4 {
        raw.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
    }
    raw.push_str("0\r\n\r\n");
    let (status, text) = raw_request(&daemon, raw.as_bytes());
    assert_eq!(status, 413, "{text}");
    assert_eq!(stored(&daemon), before);
    assert_ledger_balanced(&daemon, "oversize bodies get 413 and nothing is stored");
}

/// Regression: hyper's read-buffer bound alone let a 100 KB head through when it arrived in
/// one read; the head limit is now explicit.
#[test]
fn a_request_head_over_64_kib_is_refused_with_431_even_when_sent_in_one_write() {
    let daemon = Daemon::start(abuse_config());
    let before = stored(&daemon);
    for size in [70_000, 100_000, 1_000_000] {
        let raw = format!(
            "POST /api/ingest/{SOURCE}/big HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nX-Big: {}\r\nContent-Length: 15\r\nConnection: close\r\n\r\n{{\"order\":\"o1\"}}",
            "y".repeat(size)
        );
        let (status, text) = raw_request(&daemon, raw.as_bytes());
        assert!(
            matches!(status, 0 | 431),
            "a {size} byte header got {status}: {}",
            truncate(&text, 300)
        );
    }
    // A head just under the limit still works.
    let ok = format!(
        "GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "y".repeat(60_000)
    );
    assert_eq!(raw_request(&daemon, ok.as_bytes()).0, 200);
    assert_eq!(stored(&daemon), before);
    assert_ledger_balanced(
        &daemon,
        "a request head over 64 kib is refused with 431 even when sent in one write",
    );
}

#[test]
fn wrong_methods_get_405_with_allow_and_nothing_is_stored() {
    let daemon = Daemon::start(abuse_config());
    let before = stored(&daemon);
    let body = br#"{"order":"o-1"}"#;
    for (method, path) in [
        ("GET", format!("/api/ingest/{SOURCE}/k")),
        ("PUT", format!("/api/ingest/{SOURCE}/k")),
        ("DELETE", format!("/api/ingest/{SOURCE}/k")),
        ("PATCH", format!("/api/ingest/{SOURCE}/k")),
        ("GET", format!("/api/hooks/{HOOK}")),
        ("PUT", format!("/api/hooks/{HOOK}")),
        ("POST", "/api/status".to_string()),
        ("DELETE", "/metrics".to_string()),
        ("POST", "/".to_string()),
    ] {
        let r = daemon.request(method, &path, Some(TOKEN), &[], Some(body));
        assert_eq!(r.status, 405, "{method} {path}: {r:?}");
        assert!(r.header("allow").is_some(), "{method} {path}: no Allow");
    }
    assert_eq!(stored(&daemon), before);
    assert_ledger_balanced(
        &daemon,
        "wrong methods get 405 with allow and nothing is stored",
    );
}

#[test]
fn path_traversal_attempts_never_serve_a_file() {
    let daemon = Daemon::start(abuse_config());
    let before = stored(&daemon);
    for path in [
        "/../../etc/passwd",
        "/../../../../../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
        "/..%2f..%2f..%2fetc%2fpasswd",
        "/..%5c..%5cetc%5cpasswd",
        "/api/../",
        "/api/../../etc/passwd",
        "/api/status/../../etc/passwd",
        "/static/../../etc/passwd",
        "//etc/passwd",
        "/etc/passwd",
        "/./api/status",
        "/api/%2e%2e/%2e%2e/etc/passwd",
        "/%00../etc/passwd",
        "/config.yaml",
        "/data/push_queue.db/data.mdb",
    ] {
        for token in [None, Some(ADMIN_TOKEN)] {
            let auth = token
                .map(|t| format!("Authorization: Bearer {t}\r\n"))
                .unwrap_or_default();
            let raw = format!(
                "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n"
            );
            let (status, text) = raw_request(&daemon, raw.as_bytes());
            assert!(
                matches!(status, 400 | 404),
                "GET {path} (token {token:?}) answered {status}: {text}"
            );
            assert!(!text.contains("root:"), "GET {path} served a file: {text}");
        }
    }
    assert_eq!(stored(&daemon), before);
    assert_ledger_balanced(&daemon, "path traversal attempts never serve a file");
}

#[test]
fn bad_and_replayed_webhook_signatures_get_401_or_the_first_answer_and_store_nothing_more() {
    let daemon = Daemon::start(abuse_config());
    let body = br#"{"order":"o-1"}"#;
    let now = unix_secs();
    let good = signature(HOOK_SECRET, now, body);
    let r = daemon.hook_raw(HOOK, &[("X-Opex-Signature", &good)], body);
    let first = assert_stored(&r, "the one good request");
    let before = stored(&daemon);
    // A replay of the good request is answered as it was, and stores nothing.
    let r = daemon.hook_raw(HOOK, &[("X-Opex-Signature", &good)], body);
    assert_eq!(assert_stored(&r, "a replay"), first);
    let wrong_secret = signature("whsec_wrong_0123456789", now, body);
    let stale = signature(HOOK_SECRET, now - 3600, body);
    let future = signature(HOOK_SECRET, now + 3600, body);
    let other_body = signature(HOOK_SECRET, now, br#"{"order":"o-2"}"#);
    let huge_t = signature(HOOK_SECRET, i64::MIN, body);
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("no signature", vec![]),
        ("empty", vec![("X-Opex-Signature", "")]),
        ("malformed", vec![("X-Opex-Signature", "t=abc,v1=zz")]),
        ("wrong secret", vec![("X-Opex-Signature", &wrong_secret)]),
        ("stale", vec![("X-Opex-Signature", &stale)]),
        ("from the future", vec![("X-Opex-Signature", &future)]),
        ("another body's", vec![("X-Opex-Signature", &other_body)]),
        ("t at i64::MIN", vec![("X-Opex-Signature", &huge_t)]),
        (
            "replay with a new key",
            vec![("X-Opex-Signature", &good), ("X-Opex-Key", "other")],
        ),
    ];
    for (what, headers) in cases {
        let r = daemon.hook_raw(HOOK, &headers, body);
        assert_error_reply(&r, 401, what);
    }
    let mut after = stored(&daemon);
    // Only the rejection counter moves, and the replay's (received, repeated).
    for hook in after["webhooks"].as_array_mut().into_iter().flatten() {
        for counter in ["rejected_signature", "received", "repeated"] {
            hook[counter] = json!(0);
        }
    }
    let mut expected = before;
    for hook in expected["webhooks"].as_array_mut().into_iter().flatten() {
        for counter in ["rejected_signature", "received", "repeated"] {
            hook[counter] = json!(0);
        }
    }
    assert_eq!(after, expected);
    assert_ledger_balanced(
        &daemon,
        "bad and replayed webhook signatures get 401 or the first answer and store nothing more",
    );
}

#[test]
fn admin_endpoints_refuse_missing_and_wrong_tokens_and_change_nothing() {
    let daemon = Daemon::start(abuse_config());
    // One dead letter to try to change: a record without `order` fails the map node.
    let r = daemon.post(
        &format!("/api/ingest/{SOURCE}/bad"),
        Some(TOKEN),
        b"{\"x\":1}",
    );
    assert_eq!(r.status, 200, "{r:?}");
    let id = dead_letter_ids(&daemon, "")[0];
    let entry = dead_letter(&daemon, id);
    let before = stored(&daemon);
    let item = format!("/api/dead-letters/{id}");
    let replay = format!("/api/dead-letters/{id}/replay");
    let calls: Vec<(&str, &str)> = vec![
        ("GET", "/api/dead-letters"),
        ("GET", &item),
        ("PUT", &item),
        ("DELETE", &item),
        ("POST", &replay),
        ("POST", "/api/dead-letters/replay?flow=orders"),
        ("GET", "/api/events"),
        ("GET", "/api/push/dead-letters"),
    ];
    let bearer = |t: &str| format!("Bearer {t}");
    let lower = bearer(&ADMIN_TOKEN.to_uppercase());
    let prefix = bearer(&ADMIN_TOKEN[..ADMIN_TOKEN.len() - 1]);
    let longer = bearer(&format!("{ADMIN_TOKEN}x"));
    let ingest = bearer(TOKEN);
    let basic = format!("Basic {ADMIN_TOKEN}");
    // (what, `Authorization` header)
    let attempts: Vec<(&str, Option<&str>)> = vec![
        ("no token", None),
        ("the ingest token", Some(&ingest)),
        ("wrong case", Some(&lower)),
        ("a prefix", Some(&prefix)),
        ("a longer token", Some(&longer)),
        ("Basic scheme", Some(&basic)),
    ];
    // Each kind of attempt from its own address, so that none makes more than the free
    // failures and every 401 comes at once (the slowdown has its own test).
    for (i, (what, authorization)) in attempts.iter().enumerate() {
        let from = Ipv4Addr::new(127, 0, 1, 1 + i as u8);
        for (method, path) in &calls {
            let (status, text) = request_from(
                &daemon,
                from,
                method,
                path,
                *authorization,
                br#"{"order":"x"}"#,
            );
            assert_eq!(status, 401, "{method} {path} with {what}: {text}");
        }
    }
    let status = daemon.status();
    assert_eq!(
        u64_at(&status, "/auth/admin_unauthorized"),
        (calls.len() * attempts.len()) as u64,
        "{status:#}"
    );
    assert_eq!(u64_at(&status, "/auth/delayed_total"), 0, "{status:#}");
    assert_eq!(stored(&daemon), before);
    assert_eq!(dead_letter(&daemon, id), entry, "the dead letter changed");
    assert_ledger_balanced(
        &daemon,
        "admin endpoints refuse missing and wrong tokens and change nothing",
    );
}

/// The failed token checks an address may make before its 401s are delayed (10), and the
/// delay (1 s), as the book documents them (`docs/src/getting-started/http-api.md`, "Failed
/// tokens").
const FREE_FAILURES: usize = opex_connector::http::FREE_FAILURES as usize;
const FAILURE_DELAY: Duration = opex_connector::http::FAILURE_DELAY;

fn ingest_unauthorized(daemon: &Daemon) -> u64 {
    let status = daemon.status();
    let source = status["sources"]
        .as_array()
        .and_then(|s| {
            s.iter()
                .find(|s| s["name"] == json!(format!("ingest/{SOURCE}")))
        })
        .cloned()
        .unwrap_or_else(|| panic!("no ingest/{SOURCE} in {status:#}"));
    u64_at(&source, "/unauthorized")
}

#[test]
fn repeated_wrong_tokens_from_one_address_get_slower_401s_while_a_correct_token_from_another_client_is_served_at_once(
) {
    let daemon = Daemon::start(abuse_config());
    let guesser = Ipv4Addr::new(127, 0, 0, 2);
    let ingest_path = format!("/api/ingest/{SOURCE}/guess");
    let body = br#"{"order":"o-1"}"#;
    for i in 0..FREE_FAILURES {
        let wrong = format!("Bearer guess-{i:04}-0123456789");
        let (status, text) =
            request_from(&daemon, guesser, "POST", &ingest_path, Some(&wrong), body);
        assert_eq!(status, 401, "guess {i}: {text}");
    }
    let status = daemon.status();
    assert_eq!(
        u64_at(&status, "/auth/delayed_total"),
        0,
        "the free failures: {status:#}"
    );
    assert_eq!(ingest_unauthorized(&daemon), FREE_FAILURES as u64);

    // The next guess (at the admin endpoints: the count is per address, not per endpoint)
    // waits; while it does, other clients are served.
    let (tx, rx) = mpsc::channel();
    let slow = std::thread::scope(|scope| {
        let daemon = &daemon;
        let guess = scope.spawn(move || {
            let started = Instant::now();
            let answer = request_from(
                daemon,
                guesser,
                "GET",
                "/api/dead-letters",
                Some("Bearer guess-admin-0123456789"),
                b"",
            );
            tx.send(()).expect("main thread waits");
            (answer, started.elapsed())
        });
        wait_until(POLL_DEADLINE, "the guess to be held back", || {
            u64_at(&daemon.status(), "/auth/delayed_total") == 1
        });
        // The right tokens from another address (127.0.0.1): answered while the guess waits.
        let stored_id = assert_stored(&daemon.ingest("served-1", r#"{"order":"o-2"}"#), "ingest");
        let admin = daemon.get("/api/dead-letters", Some(ADMIN_TOKEN));
        assert_eq!(admin.status, 200, "{admin:?}");
        // A third client's first wrong token is answered without a delay.
        let (status, text) = request_from(
            daemon,
            Ipv4Addr::new(127, 0, 0, 3),
            "POST",
            &ingest_path,
            Some("Bearer not-the-token-0123456"),
            body,
        );
        assert_eq!(status, 401, "{text}");
        assert_eq!(
            rx.try_recv(),
            Err(mpsc::TryRecvError::Empty),
            "the held-back guess was answered before the other clients"
        );
        assert!(!stored_id.is_empty());
        guess.join().expect("guess thread")
    });
    let ((status, text), waited) = slow;
    assert_eq!(status, 401, "{text}");
    // Generous: the client saw at least most of the server's delay.
    assert!(
        waited >= FAILURE_DELAY.mul_f64(0.9),
        "the guess was answered after {waited:?}, not after the {FAILURE_DELAY:?} delay"
    );

    // The guesser's right token is not delayed: nothing more is counted as held back.
    let (status, text) = request_from(
        &daemon,
        guesser,
        "POST",
        &format!("/api/ingest/{SOURCE}/right"),
        Some(&format!("Bearer {TOKEN}")),
        body,
    );
    assert_eq!(status, 200, "{text}");
    let status = daemon.status();
    assert_eq!(u64_at(&status, "/auth/delayed_total"), 1, "{status:#}");
    assert_eq!(u64_at(&status, "/auth/admin_unauthorized"), 1, "{status:#}");
    assert_eq!(ingest_unauthorized(&daemon), FREE_FAILURES as u64 + 1);
    let metrics = daemon.metrics();
    assert_eq!(
        metric(&metrics, "opex_connector_admin_unauthorized_total"),
        Some(1.0)
    );
    assert_eq!(
        metric(&metrics, "opex_connector_auth_delayed_total"),
        Some(1.0)
    );
    assert_eq!(
        metric(&metrics, "opex_connector_ingest_unauthorized_total"),
        Some(FREE_FAILURES as f64 + 1.0)
    );
    assert_ledger_balanced(
        &daemon,
        "repeated wrong tokens from one address get slower 401s",
    );
}

/// Sets its flag when dropped, on a panic too.
struct Release<'a>(&'a AtomicBool);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Bytes waiting in the kernel on established loopback connections to or from `port`: sent
/// and not yet taken by the other side, received and not yet read.
fn unread_bytes(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let port_of = |addr: &str| {
        addr.rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (local, remote, state, queues) = (f.get(1)?, f.get(2)?, f.get(3)?, f.get(4)?);
            let ours = port_of(local) == Some(port) || port_of(remote) == Some(port);
            if !ours || *state != "01" {
                return None;
            }
            let (tx, rx) = queues.split_once(':')?;
            Some(u64::from_str_radix(tx, 16).ok()? + u64::from_str_radix(rx, 16).ok()?)
        })
        .sum()
}

/// The peak resident memory of `pid` (`VmHWM`), in KiB.
fn vm_hwm_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn two_hundred_fifty_six_slow_unsigned_one_mib_bodies_stay_within_the_body_budget_and_a_signed_request_is_still_served(
) {
    const SENDERS: usize = 256;
    const BODY: usize = 1024 * 1024;
    let mut cfg = abuse_config();
    cfg["connector"]["http"]["max_body_kb"] = json!(1024);
    cfg["connector"]["http"]["max_connections"] = json!(SENDERS + 64);
    cfg["connector"]["http"]["body_read_timeout_secs"] = json!(20);
    let daemon = Daemon::start(cfg);
    let pid = daemon.pid();
    let addr = socket(&daemon);
    let rss_before = vm_rss_kb(pid);
    let head = format!(
        "POST /api/hooks/{HOOK} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nX-Opex-Signature: t={},v1={}\r\nContent-Length: {BODY}\r\n\r\n",
        unix_secs(),
        "ab".repeat(32)
    );
    let chunk = vec![b' '; 64 * 1024];
    let release = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        // The scope waits for every sender: they are released however this closure ends.
        let _release = Release(&release);
        for _ in 0..SENDERS {
            let (tx, head, chunk, release) = (tx.clone(), &head, &chunk, &release);
            scope.spawn(move || {
                // All of the body but its last byte, then nothing until released: each one
                // holds whatever the daemon read of it. A refused one is answered and closed.
                let sent = TcpStream::connect(addr).and_then(|mut s| {
                    s.set_write_timeout(Some(Duration::from_secs(20)))?;
                    s.write_all(head.as_bytes())?;
                    let mut left = BODY - 1;
                    while left > 0 {
                        let n = left.min(chunk.len());
                        s.write_all(&chunk[..n])?;
                        left -= n;
                    }
                    Ok(s)
                });
                let _ = tx.send(());
                while !release.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                drop(sent);
            });
        }
        drop(tx);
        let deadline = Instant::now() + Duration::from_secs(30);
        for i in 0..SENDERS {
            let left = deadline.saturating_duration_since(Instant::now());
            rx.recv_timeout(left)
                .unwrap_or_else(|_| panic!("only {i} of {SENDERS} senders got their body out"));
        }
        // Written is not read: wait until no byte to or from the daemon waits in a socket.
        wait_until(
            Duration::from_secs(30),
            "the daemon to read what it takes",
            || unread_bytes(addr.port()) == 0,
        );
        let hwm = vm_hwm_kb(pid);
        let growth_mib = hwm.saturating_sub(rss_before) / 1024;
        eprintln!("abuse: slow_bodies={SENDERS} rss_before_kb={rss_before} hwm_kb={hwm}");
        // The budget (32 MiB) plus the first 64 KiB each connection reads free, and slack.
        assert!(
            growth_mib < 96,
            "peak memory grew by {growth_mib} MiB with {SENDERS} unsigned 1 MiB bodies in flight"
        );
        // A sender with the secret is served meanwhile.
        assert_stored(
            &daemon.hook(HOOK, HOOK_SECRET, r#"{"order":"signed-1"}"#),
            "a signed request during the slow bodies",
        );
    });
    // The senders are gone: the budget is whole again, a signed body of 900 KiB is served.
    let big = format!(
        r#"{{"order":"signed-2","pad":"{}"}}"#,
        "x".repeat(900 * 1024)
    );
    wait_until(
        Duration::from_secs(20),
        "a large signed body served",
        || daemon.hook(HOOK, HOOK_SECRET, &big).status == 200,
    );
    let metrics = daemon.metrics();
    let refused = metric(&metrics, "opex_connector_http_body_budget_refused_total").unwrap_or(0.0);
    assert!(
        refused >= (SENDERS / 2) as f64,
        "refusals at the body budget: {refused}"
    );
}
