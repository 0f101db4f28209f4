//! `GET /api/live`: the status page's live view, a WebSocket fed by the [`DataHub`].
//!
//! Each client gets, as JSON text frames:
//! - at once, and then every [`STATUS_EVERY`] while any client is connected, a `status`
//!   message: the `/api/status` document without its duplicate and per-database details;
//! - a `value` message for each record a source offers, with its settlement.
//!
//! The session only writes what the hub gives it: a client that reads slowly falls behind
//! in its own receiver and skips (counted), it never slows a source. A write that does not
//! finish within [`WRITE_TIMEOUT`] ends the session. At shutdown each client gets a close
//! frame (1001).
//!
//! [`DataHub`]: crate::hub::DataHub

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, RETRY_AFTER, UPGRADE};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::hosts::{origin_allowed, AdmittedHost};
use super::respond::{error, Resp};
use super::ws::{self, Opcode};
use super::{status, AppState};
use crate::hub::{Subscription, MAX_CLIENTS};
use crate::shutdown::Shutdown;

/// How often a status message goes out while a client watches.
pub const STATUS_EVERY: Duration = Duration::from_secs(2);
/// Longest a frame may take to reach a client before its session ends.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Keys of `/api/status` the live status message leaves out: duplicates (`push_status`) and
/// details the page does not draw (the per-database blocks are summarised in `sinks`).
const LEFT_OUT: [&str; 5] = [
    "push_status",
    "storage",
    "clickhouse",
    "postgres",
    "sink_status",
];

/// Answers the upgrade request: 101 and a session task, or why not.
pub fn upgrade(state: Arc<AppState>, mut req: Request<Incoming>) -> Resp {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let lists = |value: &str, token: &str| {
        value
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    if !lists(&header("connection"), "upgrade") || !lists(&header("upgrade"), "websocket") {
        let mut r = error(
            StatusCode::UPGRADE_REQUIRED,
            "/api/live is a WebSocket: send Connection: Upgrade and Upgrade: websocket",
        );
        r.headers_mut()
            .insert(UPGRADE, HeaderValue::from_static("websocket"));
        return r;
    }
    if header("sec-websocket-version").trim() != "13" {
        let mut r = error(
            StatusCode::UPGRADE_REQUIRED,
            "only WebSocket version 13 is spoken",
        );
        r.headers_mut()
            .insert("sec-websocket-version", HeaderValue::from_static("13"));
        return r;
    }
    // Browsers do not apply CORS to WebSockets: without this check any web site open in the
    // technician's browser could read the live view. The page must be the connector's own
    // (its origin is the `Host` the server admitted, see `hosts.rs`) or come through a listed
    // host. Clients that send no Origin (tools, scripts) are not browsers and pass.
    let origin = header("origin");
    let admitted = req.extensions().get::<AdmittedHost>().map(|h| &h.0);
    if !origin.is_empty() && !origin_allowed(&origin, admitted, &state.http.get().allowed_hosts) {
        log::warn!("live client refused: origin={origin:?} is not this connector");
        return error(
            StatusCode::FORBIDDEN,
            "the live view is served to this connector's own page only",
        );
    }
    let key = header("sec-websocket-key");
    if !ws::key_is_valid(&key) {
        return error(
            StatusCode::BAD_REQUEST,
            "Sec-WebSocket-Key must be 16 bytes in base64",
        );
    }
    let Some(sub) = state.engine.hub().subscribe() else {
        log::warn!("live client refused: clients={MAX_CLIENTS} (the most at once)");
        let mut r = error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("{MAX_CLIENTS} live clients are connected already"),
        );
        r.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("10"));
        return r;
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let accept = ws::accept_key(&key);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let shutdown = state.shutdown.clone();
                session(&state, TokioIo::new(upgraded), sub, &shutdown).await;
            }
            Err(e) => log::debug!("live upgrade failed: error=\"{e}\""),
        }
    });
    let mut r = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert("sec-websocket-accept", v);
    }
    r
}

/// Waits (at most `limit`) until every live session has sent its close frame and ended: the
/// sessions are tasks of their own, which the runtime would otherwise drop mid-write at stop.
pub async fn wait_for_sessions(state: &AppState, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    while state.engine.hub().clients() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The live status message: `{"type":"status","time_ms":..,"status":{..}}`.
pub fn status_message(state: &AppState) -> String {
    let mut doc = status::status(state);
    if let Value::Object(map) = &mut doc {
        for key in LEFT_OUT {
            map.remove(key);
        }
    }
    json!({"type": "status", "time_ms": crate::record::now_ms(), "status": doc}).to_string()
}

/// Publishes a status message every [`STATUS_EVERY`] while a client watches, until shutdown.
pub async fn publish_status(state: Arc<AppState>, shutdown: Shutdown) {
    let mut tick = tokio::time::interval(STATUS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {},
            _ = shutdown.wait() => return,
        }
        let hub = state.engine.hub();
        if hub.watched() {
            hub.publish(status_message(&state).into());
        }
    }
}

/// One client's session on an upgraded connection.
async fn session<S>(state: &AppState, io: S, mut sub: Subscription, shutdown: &Shutdown)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut rd, mut wr) = tokio::io::split(io);
    log::info!(
        "live client connected: clients={}",
        state.engine.hub().clients()
    );
    // The first status at once, so the page draws without waiting for the next tick.
    let first = status_message(state);
    if send(&mut wr, &ws::encode(Opcode::Text, first.as_bytes()))
        .await
        .is_ok()
    {
        run(&mut rd, &mut wr, &mut sub, shutdown).await;
    }
    log::info!("live client left");
}

async fn run<R, W>(rd: &mut R, wr: &mut W, sub: &mut Subscription, shutdown: &Shutdown)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // Holds at most one partial frame: a frame is refused from its header once it is larger
    // than `ws::MAX_IN_PAYLOAD`, so this stays under twice that plus a header.
    let mut buf: Vec<u8> = Vec::with_capacity(2 * ws::MAX_IN_PAYLOAD);
    let mut chunk = [0u8; ws::MAX_IN_PAYLOAD];
    loop {
        tokio::select! {
            m = sub.next() => {
                let Some(m) = m else {
                    let _ = send(wr, &ws::close_frame(1001, "going away")).await;
                    return;
                };
                if send(wr, &ws::encode(Opcode::Text, m.as_bytes())).await.is_err() {
                    return;
                }
            }
            n = rd.read(&mut chunk) => {
                let n = match n {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                buf.extend_from_slice(&chunk[..n]);
                loop {
                    match ws::parse(&buf) {
                        Ok(None) => break,
                        Ok(Some((frame, used))) => {
                            buf.drain(..used);
                            match frame.opcode {
                                Opcode::Ping => {
                                    let pong = ws::encode(Opcode::Pong, &frame.payload);
                                    if send(wr, &pong).await.is_err() {
                                        return;
                                    }
                                }
                                Opcode::Close => {
                                    let _ = send(wr, &ws::close_frame(1000, "")).await;
                                    return;
                                }
                                // The page sends nothing else; anything it might is ignored.
                                Opcode::Pong | Opcode::Text | Opcode::Binary => {}
                            }
                        }
                        Err(e) => {
                            log::debug!("live client sent a bad frame: error={e:?}");
                            let _ = send(wr, &ws::close_frame(e.close_code(), "bad frame")).await;
                            return;
                        }
                    }
                }
            }
            _ = shutdown.wait() => {
                let _ = send(wr, &ws::close_frame(1001, "going away")).await;
                return;
            }
        }
    }
}

/// Writes one frame within [`WRITE_TIMEOUT`].
async fn send<W: AsyncWrite + Unpin>(wr: &mut W, frame: &[u8]) -> Result<(), ()> {
    match tokio::time::timeout(WRITE_TIMEOUT, async {
        wr.write_all(frame).await?;
        wr.flush().await
    })
    .await
    {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(()),
        Err(_) => {
            log::debug!("live client too slow to take a frame: timeout={WRITE_TIMEOUT:?}");
            Err(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::{DataHub, CAPACITY};
    use std::sync::atomic::Ordering;

    /// A masked client frame.
    fn client_frame(first: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [7, 1, 3, 9];
        let mut f = vec![first, 0x80 | payload.len() as u8];
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    }

    /// Reads one unmasked server frame.
    async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> (u8, Vec<u8>) {
        let mut h = [0u8; 2];
        r.read_exact(&mut h).await.unwrap();
        let len = match h[1] {
            126 => {
                let mut b = [0u8; 2];
                r.read_exact(&mut b).await.unwrap();
                usize::from(u16::from_be_bytes(b))
            }
            n => usize::from(n),
        };
        let mut p = vec![0u8; len];
        r.read_exact(&mut p).await.unwrap();
        (h[0] & 0x0F, p)
    }

    #[tokio::test]
    async fn a_client_that_does_not_read_never_holds_up_publishing_and_skips_what_it_missed() {
        let hub = DataHub::new();
        let sub = hub.subscribe().unwrap();
        // A 64-byte pipe: the session's writes block as soon as the client stops reading.
        let (server, mut client) = tokio::io::duplex(64);
        let shutdown = Shutdown::new();
        let session = {
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let (mut rd, mut wr) = tokio::io::split(server);
                let mut sub = sub;
                run(&mut rd, &mut wr, &mut sub, &shutdown).await;
            })
        };
        let total = CAPACITY + 100;
        // Every publish returns at once, although the client reads nothing.
        for i in 0..total {
            hub.publish(format!("message {i:04} {}", "x".repeat(40)).into());
        }
        assert_eq!(
            hub.stats.published_total.load(Ordering::Relaxed),
            total as u64
        );
        // Now the client reads: the first messages, a gap, then the newest.
        let mut got = Vec::new();
        while got
            .last()
            .is_none_or(|m: &String| !m.contains(&format!("{:04}", total - 1)))
        {
            let (op, p) = read_frame(&mut client).await;
            assert_eq!(op, 1);
            got.push(String::from_utf8(p).unwrap());
        }
        let skipped = hub.stats.skipped_total.load(Ordering::Relaxed);
        assert!(skipped >= 100, "skipped {skipped}");
        assert_eq!(got.len() as u64 + skipped, total as u64);
        // A ping is answered, then a close ends the session with a close.
        client.write_all(&client_frame(0x89, b"p")).await.unwrap();
        assert_eq!(read_frame(&mut client).await, (0xA, b"p".to_vec()));
        client
            .write_all(&client_frame(0x88, &1000u16.to_be_bytes()))
            .await
            .unwrap();
        assert_eq!(read_frame(&mut client).await.0, 0x8);
        session.await.unwrap();
    }

    #[tokio::test]
    async fn an_unmasked_frame_closes_the_session_with_1002_and_shutdown_with_1001() {
        for (bad, code) in [(true, 1002u16), (false, 1001)] {
            let hub = DataHub::new();
            let mut sub = hub.subscribe().unwrap();
            let (server, mut client) = tokio::io::duplex(1024);
            let shutdown = Shutdown::new();
            let stop = shutdown.clone();
            let session = tokio::spawn(async move {
                let (mut rd, mut wr) = tokio::io::split(server);
                run(&mut rd, &mut wr, &mut sub, &stop).await;
            });
            if bad {
                client.write_all(b"\x81\x02hi").await.unwrap();
            } else {
                shutdown.trigger();
            }
            let (op, payload) = read_frame(&mut client).await;
            assert_eq!(op, 0x8);
            assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), code);
            session.await.unwrap();
        }
    }
}
