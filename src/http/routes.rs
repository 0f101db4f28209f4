//! Request routing and the ingest endpoint's HTTP side.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use super::{auth, status, AppState};
use crate::sources::ingest::IngestOutcome;

type Resp = Response<Full<Bytes>>;

/// Answers one request. Never fails: every problem is an HTTP status with a JSON reason.
pub async fn handle(state: Arc<AppState>, req: Request<Incoming>) -> Result<Resp, Infallible> {
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let method = req.method().clone();
    let resp = match segments.as_slice() {
        ["api", "ingest", source, id] if !source.is_empty() && !id.is_empty() => {
            if method != Method::POST {
                return Ok(not_allowed("POST"));
            }
            ingest(&state, source, id, req).await
        }
        ["api", "status"] => match method {
            Method::GET | Method::HEAD => json_response(StatusCode::OK, &status::status(&state)),
            _ => not_allowed("GET"),
        },
        ["metrics"] => match method {
            Method::GET | Method::HEAD => text(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                status::metrics(&state),
            ),
            _ => not_allowed("GET"),
        },
        ["api", "push", "dead-letters"] => match method {
            Method::GET => push_dead_letters(&state, &req),
            _ => not_allowed("GET"),
        },
        [""] => match method {
            Method::GET | Method::HEAD => text(
                StatusCode::OK,
                "text/html; charset=utf-8",
                status::page(&state),
            ),
            _ => not_allowed("GET"),
        },
        _ => error(StatusCode::NOT_FOUND, "no such endpoint"),
    };
    Ok(resp)
}

async fn ingest(state: &AppState, source: &str, key: &str, req: Request<Incoming>) -> Resp {
    let Some(src) = state.ingest.iter().find(|s| s.name() == source) else {
        return error(
            StatusCode::NOT_FOUND,
            &format!("unknown ingest source {source:?}"),
        );
    };
    if !auth::bearer_ok(req.headers(), src.token()) {
        src.stats
            .unauthorized
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
    }
    src.stats
        .received
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let body = match read_body(state, req).await {
        Ok(b) => b,
        Err(resp) => {
            src.stats
                .rejected
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return resp;
        }
    };
    let key = percent_decode(key);
    match src.ingest(&state.engine, &key, &body).await {
        // The id is hex: no escaping needed, and this is the hot path.
        IngestOutcome::Stored { id } => text(
            StatusCode::OK,
            "application/json",
            format!(r#"{{"ok":true,"result":"stored","id":"{id}"}}"#),
        ),
        IngestOutcome::Retry { sink, after_secs } => {
            let mut r = json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({"ok": false, "result": "retry", "sink": sink, "retry_after_secs": after_secs}),
            );
            r.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(after_secs));
            r
        }
        IngestOutcome::Failed { sink, reason } => {
            let after = crate::admission::RETRY_AFTER.as_secs();
            let mut r = json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({"ok": false, "result": "error", "sink": sink, "error": reason, "retry_after_secs": after}),
            );
            r.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(after));
            r
        }
        IngestOutcome::Malformed { reason } => error(
            StatusCode::BAD_REQUEST,
            &format!("malformed JSON: {reason}"),
        ),
    }
}

/// Reads a body within `max_body_bytes` and the body-read timeout.
async fn read_body(state: &AppState, req: Request<Incoming>) -> Result<Bytes, Resp> {
    let max = state.http.max_body_bytes;
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large(max));
    }
    let limited = Limited::new(req.into_body(), max);
    match tokio::time::timeout(state.http.body_read_timeout, limited.collect()).await {
        Err(_) => Err(error(
            StatusCode::REQUEST_TIMEOUT,
            "body not received in time",
        )),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large(max)),
        Ok(Err(e)) => Err(error(
            StatusCode::BAD_REQUEST,
            &format!("cannot read the body: {e}"),
        )),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

fn push_dead_letters(state: &AppState, req: &Request<Incoming>) -> Resp {
    let Some(token) = state.http.admin_token.as_deref() else {
        return error(StatusCode::NOT_FOUND, "no such endpoint");
    };
    if !auth::bearer_ok(req.headers(), token) {
        return error(StatusCode::UNAUTHORIZED, "missing or wrong admin token");
    }
    let query = req.uri().query().unwrap_or("");
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| v.parse::<u64>().ok())
    };
    let after = param("after");
    let limit = param("limit").unwrap_or(100).clamp(1, 1000) as usize;
    match state.push.dead_letters(after, limit) {
        Ok(rows) => {
            let rows: Vec<serde_json::Value> = rows
                .into_iter()
                .map(|d| {
                    let mut v: serde_json::Value =
                        serde_json::from_slice(&d.json).unwrap_or_default();
                    if let Some(o) = v.as_object_mut() {
                        o.insert("id".into(), d.id.into());
                    }
                    v
                })
                .collect();
            let total = state
                .push
                .counters()
                .dead_rows
                .load(std::sync::atomic::Ordering::Relaxed);
            json_response(StatusCode::OK, &json!({"rows": rows, "total": total}))
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// Decodes `%XX` escapes of a path segment; invalid escapes stay as they are.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn too_large(max: usize) -> Resp {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("body larger than {} KiB", max / 1024),
    )
}

fn not_allowed(allow: &'static str) -> Resp {
    let mut r = error(StatusCode::METHOD_NOT_ALLOWED, &format!("use {allow}"));
    r.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    r
}

fn error(status: StatusCode, message: &str) -> Resp {
    json_response(status, &json!({"ok": false, "error": message}))
}

fn json_response(status: StatusCode, value: &serde_json::Value) -> Resp {
    text(status, "application/json", value.to_string())
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn percent_decoding_never_panics_on_truncated_escapes() {
        assert_eq!(percent_decode("a%20b"), "a b");
        assert_eq!(percent_decode("%"), "%");
        assert_eq!(percent_decode("%4"), "%4");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("x%41"), "xA");
    }
}
