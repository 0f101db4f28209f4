//! Accept loop and connection handling.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::{auth, respond, routes, AppState};
use crate::shutdown::Shutdown;

/// Largest request head (request line and headers); larger ones get `431`. Set both as
/// hyper's head limit and as its read buffer bound: the buffer bound alone is approximate
/// (one read can fill more than it, and a head that arrived whole was accepted).
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// How long open connections get to finish their request at shutdown.
const DRAIN_AT_SHUTDOWN: Duration = Duration::from_secs(10);

/// Server counters.
#[derive(Debug, Default)]
pub struct HttpStats {
    /// Connections accepted.
    pub connections_total: AtomicU64,
    /// Times the accept loop waited because `max_connections` were open.
    pub at_capacity_total: AtomicU64,
    /// Connections that ended with an error (timeout, bad request head, reset).
    pub connection_errors_total: AtomicU64,
    /// Requests refused for their `Host`: not one of the connector's (`421`), or missing or
    /// malformed (`400`).
    pub host_refused_total: AtomicU64,
}

/// Binds the listening socket.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves until `shutdown`, then lets open connections finish (bounded) and returns.
pub async fn serve(listener: TcpListener, state: Arc<AppState>, shutdown: Shutdown) {
    let permits = Arc::new(Semaphore::new(state.http.get().max_connections));
    let mut connections = JoinSet::new();
    loop {
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                state
                    .stats
                    .at_capacity_total
                    .fetch_add(1, Ordering::Relaxed);
                tokio::select! {
                    p = Arc::clone(&permits).acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                    _ = shutdown.wait() => break,
                }
            }
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    // Out of file descriptors or similar: back off instead of spinning.
                    log::warn!("http accept failed: error=\"{e}\"");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.wait() => break,
        };
        state
            .stats
            .connections_total
            .fetch_add(1, Ordering::Relaxed);
        let _ = stream.set_nodelay(true);
        let state = Arc::clone(&state);
        let hosts = state.http.hosts();
        let shutdown = shutdown.clone();
        // Reap finished connection tasks so the set stays small.
        while connections.try_join_next().is_some() {}
        connections.spawn(async move {
            let service_state = Arc::clone(&state);
            // The client's address rides along with each request, for the token checks; every
            // route, the live view's upgrade included, runs only for an allowed `Host`.
            let service = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(auth::Peer(peer));
                let state = Arc::clone(&service_state);
                let refused = hosts.refusal(&mut req, &state.stats);
                async move {
                    // Every answer given before a body was read reads it first (bounded) or
                    // says `Connection: close` (`respond::answer_unread`).
                    let resp = match refused {
                        None => routes::handle(state, req).await?,
                        Some(refused) => respond::answer_unread(&state, req, refused).await,
                    };
                    Ok::<_, std::convert::Infallible>(resp)
                }
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(state.http.get().header_read_timeout)
                .max_header_size(MAX_HEAD_BYTES)
                .max_buf_size(MAX_HEAD_BYTES);
            // Upgrades: the live view's WebSocket (`/api/live`) takes the connection over.
            let conn = builder
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = shutdown.wait() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                state
                    .stats
                    .connection_errors_total
                    .fetch_add(1, Ordering::Relaxed);
                log::debug!("http connection ended with an error: error=\"{e}\"");
            }
            drop(permit);
        });
    }
    drop(listener);
    let drained = tokio::time::timeout(DRAIN_AT_SHUTDOWN, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        log::warn!("http connections still open at shutdown were closed");
        connections.abort_all();
    }
}
