//! The HTTP server is bounded: a client dribbling its headers is cut off after the header-read
//! timeout, idle keep-alive connections are closed, and at `max_connections` new clients wait
//! until slots free up instead of the server growing without bound. An answer given before a
//! request's body was needed (a token, a route, a method or a host refused) reads the body
//! first, so the keep-alive connection carries the next request; a body over the limit is
//! refused unread, with `Connection: close`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

fn limited_config() -> serde_json::Value {
    let mut cfg = queue_config(4, "evict_oldest");
    cfg["connector"]["http"]["header_read_timeout_secs"] = 1.into();
    cfg["connector"]["http"]["max_connections"] = 4.into();
    cfg
}

fn addr(daemon: &Daemon) -> String {
    daemon
        .base()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}

/// True once the server closed `stream` (read returns 0 or an error).
fn closed_by_server(stream: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = [0u8; 1024];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                continue
            }
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn a_client_dribbling_headers_is_cut_off_after_the_header_read_timeout() {
    let daemon = Daemon::start(limited_config());
    let mut slow = TcpStream::connect(addr(&daemon)).unwrap();
    slow.write_all(b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    // One more header line, then nothing: the request head never completes.
    slow.write_all(b"X-Slow: 1\r\n").unwrap();
    assert!(
        closed_by_server(&mut slow, Duration::from_secs(15)),
        "the server kept a half-sent request open"
    );
    assert_eq!(daemon.get("/api/status", None).status, 200);
}

#[test]
fn idle_and_slow_connections_at_the_cap_do_not_lock_out_new_clients_for_long() {
    let daemon = Daemon::start(limited_config());
    // Fill every slot with clients that never finish a request.
    let mut hogs: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(addr(&daemon)).unwrap();
            s.write_all(b"POST /api/ingest/orders/x HTTP/1.1\r\n")
                .unwrap();
            s
        })
        .collect();
    // A well-behaved client gets through once the header timeout frees the slots.
    let started = Instant::now();
    let reply = daemon.get("/api/status", None);
    assert_eq!(reply.status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a new client waited {:?}",
        started.elapsed()
    );
    for hog in &mut hogs {
        assert!(closed_by_server(hog, Duration::from_secs(15)));
    }
    let metrics = daemon.metrics();
    assert!(metric(&metrics, "opex_connector_http_at_capacity_total").unwrap_or(0.0) >= 1.0);
    assert_eq!(
        u64_at(&daemon.status(), "/push_queue/rows"),
        0,
        "nothing was stored"
    );
}

#[test]
fn an_idle_keep_alive_connection_is_closed() {
    let daemon = Daemon::start(limited_config());
    let mut s = TcpStream::connect(addr(&daemon)).unwrap();
    s.write_all(b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    // The response arrives, then the connection sits idle until the server closes it.
    assert!(closed_by_server(&mut s, Duration::from_secs(15)));
}

/// Regression: refusals given before the body was read (a wrong token, an unknown route or
/// source, a wrong method, a foreign host) closed the connection over the unread body, so a
/// keep-alive client met a broken pipe or a reset on its next request.
#[test]
fn every_refusal_before_the_body_reads_it_and_the_keep_alive_connection_serves_the_next_request() {
    let mut cfg = queue_config(4, "evict_oldest");
    cfg["connector"]["http"]["admin_token"] = ADMIN_TOKEN.into();
    cfg["connector"]["http"]["max_body_kb"] = 4.into();
    let daemon = Daemon::start(cfg);
    let body = br#"{"order":"o-1","qty":3}"#;
    let json = "Content-Type: application/json";
    let wrong = "Authorization: Bearer wrong-t0ken-0123456789";
    let ingest = format!("/api/ingest/{SOURCE}/o-1");
    let refusals: [(&str, &str, &[&str], u16); 8] = [
        ("POST", &ingest, &[json], 401),
        ("POST", &ingest, &[json, wrong], 401),
        ("PUT", &ingest, &[json], 405),
        ("POST", "/api/ingest/nobody/o-1", &[json], 404),
        ("POST", "/api/hooks/nobody", &[json], 404),
        ("POST", "/api/status", &[json], 405),
        ("POST", "/api/dead-letters/replay", &[json, wrong], 401),
        ("POST", "/no/such/path", &[json], 404),
    ];
    let mut conn = daemon.keep_alive();
    for (method, path, headers, status) in refusals {
        let r = conn
            .send(method, path, headers, body)
            .unwrap_or_else(|e| panic!("{method} {path} on the keep-alive connection: {e}"));
        assert_eq!(r.status, status, "{method} {path}: {}", r.body);
        assert_eq!(
            r.header("connection"),
            None,
            "{method} {path}: {:?}",
            r.headers
        );
        let next = conn
            .send("GET", "/api/status", &[], b"")
            .unwrap_or_else(|e| panic!("the request after {method} {path}: {e}"));
        assert_eq!(next.status, 200, "after {method} {path}: {}", next.body);
    }
    // A foreign Host is refused after its body too.
    let mut conn = daemon.keep_alive();
    let r = conn
        .send("POST", &ingest, &[json, "Host: evil.example"], body)
        .expect("the host refusal");
    assert_eq!(r.status, 421, "{}", r.body);
    assert_eq!(r.header("connection"), None, "{:?}", r.headers);
    let r = conn.send("GET", "/api/status", &[], b"").expect("the next");
    assert_eq!(r.status, 200, "{}", r.body);

    // Over max_body_kb (4 KiB) the body is not read: the answer says the connection ends.
    let big = vec![b'x'; 8 * 1024];
    let mut conn = daemon.keep_alive();
    let auth = format!("Authorization: Bearer {TOKEN}");
    let r = conn
        .send("POST", &ingest, &[json, &auth], &big)
        .expect("the 413");
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(r.header("connection"), Some("close"), "{:?}", r.headers);
    assert_eq!(
        u64_at(&daemon.status(), "/push_queue/rows"),
        0,
        "nothing stored"
    );
}
