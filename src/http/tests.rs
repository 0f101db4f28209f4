//! The HTTP server in process, over the parts a real config builds.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::daemon::{build, Parts};
use crate::record::Record;
use crate::shutdown::Shutdown;
use crate::store::dead_letters::NewDeadLetter;

/// Longest a test waits for an answer the server should give at once.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// Sends `request` on a new connection and reads until `complete` says the answer is whole;
/// an error when it is not within [`ANSWER_WITHIN`].
fn exchange(
    addr: SocketAddr,
    request: &str,
    complete: impl Fn(&[u8]) -> bool,
) -> Result<Vec<u8>, String> {
    let mut conn = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    conn.set_read_timeout(Some(ANSWER_WITHIN))
        .map_err(|e| e.to_string())?;
    conn.write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + ANSWER_WITHIN;
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while !complete(&got) {
        if Instant::now() > deadline {
            return Err(format!("no whole answer within {ANSWER_WITHIN:?}"));
        }
        match conn.read(&mut buf) {
            Ok(0) => return Err("the server closed the connection".into()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("no answer within {ANSWER_WITHIN:?}: {e}")),
        }
    }
    Ok(got)
}

fn head_end(got: &[u8]) -> Option<usize> {
    got.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// A whole `Content-Length` answer.
fn whole_answer(got: &[u8]) -> bool {
    let Some(end) = head_end(got) else {
        return false;
    };
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    got.len() >= end + length
}

/// A `101` head and the first frame after it.
fn upgrade_and_first_frame(got: &[u8]) -> bool {
    let Some(end) = head_end(got) else {
        return false;
    };
    let frame = &got[end..];
    let len = match frame.get(1) {
        None => return false,
        Some(126) if frame.len() < 4 => return false,
        Some(126) => 4 + usize::from(u16::from_be_bytes([frame[2], frame[3]])),
        Some(127) => return true,
        Some(n) => 2 + usize::from(*n),
    };
    frame.len() >= len
}

#[test]
fn status_and_the_live_view_are_answered_while_a_dead_letter_commit_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "connector:\n  data_dir: {}\n  http:\n    listen: 127.0.0.1:0\n",
        dir.path().display()
    );
    let config = crate::config::from_yaml(&yaml).expect("valid config");
    let loaded = crate::reload::Loaded {
        text: yaml.clone(),
        path: None,
    };
    let Parts { state, .. } = build(config, loaded).expect("built");
    let shutdown = Shutdown::new();
    // One thread runs the whole server: a handler that waited on the commit would stop it.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(crate::http::bind("127.0.0.1:0".parse().unwrap()))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = {
        let (state, shutdown) = (Arc::clone(&state), shutdown.clone());
        std::thread::spawn(move || {
            runtime.block_on(crate::http::serve(listener, state, shutdown));
        })
    };

    let dlq = Arc::clone(state.engine.dead_letters());
    dlq.commit_hold.arm();
    let parking = {
        let dlq = Arc::clone(&dlq);
        std::thread::spawn(move || {
            let record = Record::from_value("webhook/hook", "k", &serde_json::json!({"n": 1}));
            dlq.park(NewDeadLetter {
                record,
                flow: "f".into(),
                node: "n".into(),
                reason: "held".into(),
                accepted: false,
            })
        })
    };
    assert!(dlq.commit_hold.wait_held(ANSWER_WITHIN), "no commit held");

    let status = exchange(
        addr,
        &format!("GET /api/status HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
        whole_answer,
    );
    let live = exchange(
        addr,
        &format!(
            "GET /api/live HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        ),
        upgrade_and_first_frame,
    );
    dlq.commit_hold.release();
    parking.join().unwrap().expect("parked after the release");
    shutdown.trigger();
    server.join().unwrap();

    let status = String::from_utf8(status.expect("/api/status answered")).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(status.contains(r#""dead_letters""#), "{status}");
    let live = String::from_utf8_lossy(&live.expect("the live view answered")).to_string();
    assert!(live.starts_with("HTTP/1.1 101"), "{live}");
    assert!(live.contains(r#""type":"status""#), "{live}");
    // The count moved with the commit, not before it.
    assert_eq!(dlq.counts().open, 1);
}
