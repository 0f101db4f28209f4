//! The memory held by request bodies read before their check, in total.
//!
//! A webhook's body is read before its signature can be checked (the signature covers it),
//! and webhook names are public (`/api/status`): without a bound, 256 connections each
//! sending 1 MiB unsigned would pin 256 MiB of a 512 MiB board. So such bodies are read
//! against one byte budget for the whole server, [`BODY_BUDGET_BYTES`] (32 MiB, or one
//! `max_body_kb` when that is larger). The first [`FREE_BYTES`] (64 KiB) of each body are
//! free (bounded by `max_connections`, like hyper's own read buffers, and every real webhook
//! fits in them); the rest of a body is reserved from the budget, its whole `Content-Length`
//! at once, or as a chunked body grows. A body that does not fit is answered `503` +
//! `Retry-After` with `Connection: close` before more of it is read, and counted
//! (`opex_connector_http_body_budget_refused_total`). The reservation is a semaphore permit
//! held with the body: it goes back when the check is done, and on every other path (a
//! refusal, a timeout, a client that disconnects mid-body) when the handler drops it.
//!
//! Memory for unchecked bodies is therefore at most `32 MiB + max_connections x 64 KiB`
//! (48 MiB at the default 256 connections).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, RETRY_AFTER};
use hyper::{Request, StatusCode};
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::respond::{closing, declared_length, error, json_response, too_large, Resp};
use super::AppState;

/// Bytes of unchecked bodies held at once beyond each body's free part.
pub const BODY_BUDGET_BYTES: usize = 32 << 20;
/// The first bytes of each body, read without the budget.
pub const FREE_BYTES: usize = 64 << 10;

/// The budget, shared by every connection.
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    /// Bytes the budget holds in all.
    size: std::sync::Mutex<usize>,
    /// Bodies refused because the budget was spent.
    pub refused_total: AtomicU64,
}

impl BodyBudget {
    /// The budget of a server whose bodies are at most `max_body_bytes`: [`BODY_BUDGET_BYTES`],
    /// or one whole body when `max_body_kb` is larger, so that any body the limit admits can
    /// be received when no other is.
    pub fn new(max_body_bytes: usize) -> Self {
        let size = BODY_BUDGET_BYTES.max(max_body_bytes);
        Self {
            permits: Arc::new(Semaphore::new(size)),
            size: std::sync::Mutex::new(size),
            refused_total: AtomicU64::new(0),
        }
    }

    /// Grows the budget to one whole body of `max_body_bytes` when a reload raised
    /// `max_body_kb` above it (it never shrinks while bodies hold part of it).
    pub fn fit(&self, max_body_bytes: usize) {
        let mut size = self.size.lock().unwrap_or_else(|e| e.into_inner());
        if max_body_bytes > *size {
            self.permits.add_permits(max_body_bytes - *size);
            *size = max_body_bytes;
        }
    }

    /// Bytes of the budget free now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

/// A body read against the budget, and its reservation: drop it once the body is checked.
pub struct Unchecked {
    /// The body.
    pub body: Bytes,
    /// Its reservation, `None` for a body within [`FREE_BYTES`].
    pub reservation: Option<OwnedSemaphorePermit>,
}

/// Reads `req`'s body as [`super::respond::read_body`] does (`max_body_bytes`, the body-read
/// timeout), holding what is beyond [`FREE_BYTES`] against the budget; `503` when it is spent.
pub async fn read_unchecked(state: &AppState, req: Request<Incoming>) -> Result<Unchecked, Resp> {
    let http = state.http.get();
    let max = http.max_body_bytes;
    let declared = declared_length(&req);
    if declared.is_some_and(|n| n > max as u64) {
        return Err(closing(too_large(max)));
    }
    let mut reserved: Option<OwnedSemaphorePermit> = None;
    let mut buf: Vec<u8> = Vec::new();
    if let Some(n) = declared {
        // At most `max`, checked above.
        let n = n as usize;
        reserve(state, &mut reserved, n).map_err(|Spent| spent())?;
        buf.reserve_exact(n);
    }
    let mut body = req.into_body();
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                closing(error(
                    StatusCode::BAD_REQUEST,
                    &format!("cannot read the body: {e}"),
                ))
            })?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let len = buf.len() + data.len();
            if len > max {
                return Err(closing(too_large(max)));
            }
            if len > buf.capacity() {
                // A chunked body (or one longer than it said, which hyper refuses): grow by
                // doubling, the capacity reserved before it is taken.
                let cap = len.max(buf.capacity() * 2).min(max);
                reserve(state, &mut reserved, cap).map_err(|Spent| spent())?;
                buf.reserve_exact(cap - buf.len());
            }
            buf.extend_from_slice(&data);
        }
        Ok(())
    };
    match tokio::time::timeout(http.body_read_timeout, read).await {
        Err(_) => Err(closing(error(
            StatusCode::REQUEST_TIMEOUT,
            "body not received in time",
        ))),
        Ok(Err(resp)) => Err(resp),
        Ok(Ok(())) => Ok(Unchecked {
            body: Bytes::from(buf),
            reservation: reserved,
        }),
    }
}

/// The budget could not cover a body: it is answered [`spent`].
struct Spent;

/// Makes `reserved` cover a body of `size` bytes (beyond the free part); counts a refusal.
fn reserve(
    state: &AppState,
    reserved: &mut Option<OwnedSemaphorePermit>,
    size: usize,
) -> Result<(), Spent> {
    let held = reserved.as_ref().map_or(0, |p| p.num_permits());
    let wanted = size.saturating_sub(FREE_BYTES);
    if wanted <= held {
        return Ok(());
    }
    let more = u32::try_from(wanted - held).unwrap_or(u32::MAX);
    let budget = &state.body_budget;
    let permit = Arc::clone(&budget.permits)
        .try_acquire_many_owned(more)
        .map_err(|_| {
            let available = budget.available();
            crate::telemetry::events::http_body_budget_refused(
                &budget.refused_total,
                size,
                available,
            );
            Spent
        })?;
    match reserved {
        Some(r) => r.merge(permit),
        None => *reserved = Some(permit),
    }
    Ok(())
}

/// `503` + `Retry-After`, closing the connection: the rest of the body is not read.
fn spent() -> Resp {
    let after = crate::admission::RETRY_AFTER.as_secs();
    let mut resp = json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({"ok": false, "retry_after_secs": after,
                "error": "too many request bodies being received, retry later"}),
    );
    resp.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(after));
    closing(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_and_free_part_fit_a_512_mib_board() {
        // 32 MiB plus 64 KiB for each of the default 256 connections: 48 MiB.
        assert_eq!(BODY_BUDGET_BYTES + 256 * FREE_BYTES, 48 << 20);
    }
}
