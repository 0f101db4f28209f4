//! Request routing: one match over method and path, every answer JSON except the page's files,
//! the metrics and the live view's WebSocket.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::{Method, Request, StatusCode};

use super::budget::{read_unchecked, Unchecked};
use super::respond::{
    answer_unread, batch_outcome, error, in_progress, json_response, not_allowed, outcome,
    read_body, read_body_within, text, Resp,
};
use super::{admin, auth, commands, config_api, ledger, live, page, status, trends, AppState};
use crate::sources::ingest::batch::Format;
use crate::sources::ingest::IngestSource;

/// Answers one request. Never fails: every problem is an HTTP status with a JSON reason.
pub async fn handle(state: Arc<AppState>, req: Request<Incoming>) -> Result<Resp, Infallible> {
    // A copy of the path, not of the Uri: a cloned Uri would hold hyper's read buffer until
    // the answer leaves.
    let path = req.uri().path().to_string();
    let mut parts = [""; MAX_SEGMENTS];
    let segments = split_path(&path, &mut parts);
    let method = req.method().clone();
    let get = matches!(method, Method::GET | Method::HEAD);
    // The routes that take the request answer themselves; the others only look at it, and
    // their answer goes out after its body (if any) is read and dropped.
    let resp = match segments {
        ["api", "ingest", source, id] if !source.is_empty() && !id.is_empty() => {
            if method != Method::POST {
                not_allowed("POST")
            } else {
                return Ok(ingest(&state, source, id, req).await);
            }
        }
        ["api", "ingest", source] if !source.is_empty() => {
            if method != Method::POST {
                not_allowed("POST")
            } else {
                return Ok(ingest_batch(&state, source, req).await);
            }
        }
        ["api", "hooks", name] if !name.is_empty() => {
            if method != Method::POST {
                not_allowed("POST")
            } else {
                return Ok(hook(&state, name, req).await);
            }
        }
        ["api", "devices", device, "write"] if !device.is_empty() => {
            if method != Method::POST {
                not_allowed("POST")
            } else {
                return Ok(commands::write(&state, device, req).await);
            }
        }
        ["api", "status"] if get => json_response(StatusCode::OK, &status::status(&state)),
        ["metrics"] if get => text(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            status::metrics(&state),
        ),
        ["api", "schedules"] if get => json_response(
            StatusCode::OK,
            &serde_json::json!({ "schedules": status::schedules(&state) }),
        ),
        ["api", "ledger"] if get => ledger::handle(&state, &req).await,
        ["api", "trends"] if get => trends::handle(&state, req.uri().query()),
        [""] if get => page::serve(&page::INDEX, req.headers()),
        ["page.js"] if get => page::serve(&page::SCRIPT, req.headers()),
        ["page.css"] if get => page::serve(&page::STYLE, req.headers()),
        ["api", "openapi.json"] if get => page::serve(&page::OPENAPI, req.headers()),
        ["api", "live"] if method == Method::GET => {
            return Ok(live::upgrade(Arc::clone(&state), req))
        }
        ["api", "status"]
        | ["api", "ledger"]
        | ["api", "schedules"]
        | ["api", "trends"]
        | ["metrics"]
        | [""]
        | ["page.js"]
        | ["page.css"]
        | ["api", "openapi.json"]
        | ["api", "live"] => not_allowed("GET"),
        ["api", "push", "dead-letters", ..]
        | ["api", "sinks", _, "dead-letters", ..]
        | ["api", "sinks", _, "errors"]
        | ["api", "dead-letters", ..]
        | ["api", "events"] => return Ok(admin::handle(&state, segments, req).await),
        ["api", "config", rest @ ..] => return Ok(config_api::handle(&state, rest, req).await),
        _ => error(StatusCode::NOT_FOUND, "no such endpoint"),
    };
    Ok(answer_unread(&state, req, resp).await)
}

/// More path segments than the longest endpoint has (`/api/sinks/{name}/dead-letters/{id}/replay`
/// has six).
const MAX_SEGMENTS: usize = 8;

/// Splits `path` into its segments in `parts`, without a heap allocation per request. A path
/// of more than [`MAX_SEGMENTS`] segments names no endpoint: it splits into none, a 404.
fn split_path<'a, 'p>(path: &'p str, parts: &'a mut [&'p str; MAX_SEGMENTS]) -> &'a [&'p str] {
    let mut n = 0;
    for segment in path.trim_start_matches('/').split('/') {
        let Some(slot) = parts.get_mut(n) else {
            return &[];
        };
        *slot = segment;
        n += 1;
    }
    parts.get(..n).unwrap_or_default()
}

/// The ingest source `source` once the caller's token is checked, with the request; else the
/// answer (`404`, `401`), given after the body is read and dropped.
async fn ingest_source(
    state: &AppState,
    source: &str,
    req: Request<Incoming>,
) -> Result<(Arc<IngestSource>, Request<Incoming>), Resp> {
    let Some(src) = state.sources.ingest.find(|s| s.name() == source) else {
        let unknown = error(
            StatusCode::NOT_FOUND,
            &format!("unknown ingest source {source:?}"),
        );
        return Err(answer_unread(state, req, unknown).await);
    };
    let peer = auth::peer(&req);
    let refused = &src.stats.unauthorized;
    if !state
        .auth
        .check(req.headers(), peer, src.token(), src.source(), refused)
        .await
    {
        let refused = error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
        return Err(answer_unread(state, req, refused).await);
    }
    src.stats.received.fetch_add(1, Ordering::Relaxed);
    Ok((src, req))
}

async fn ingest(state: &AppState, source: &str, key: &str, req: Request<Incoming>) -> Resp {
    let (src, req) = match ingest_source(state, source, req).await {
        Ok(found) => found,
        Err(resp) => return resp,
    };
    let body = match read_body(state, req).await {
        Ok(b) => b,
        Err(resp) => {
            src.stats.rejected.fetch_add(1, Ordering::Relaxed);
            return resp;
        }
    };
    outcome(src.ingest(&state.engine, percent_decode(key), body).await)
}

/// `POST /api/ingest/{source}`: a batch, NDJSON or a JSON array; `?partial=1` stores the good
/// lines of a batch with bad ones.
async fn ingest_batch(state: &AppState, source: &str, req: Request<Incoming>) -> Resp {
    let (src, req) = match ingest_source(state, source, req).await {
        Ok(found) => found,
        Err(resp) => return resp,
    };
    let partial = req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|pair| pair == "partial=1" || pair == "partial=true")
    });
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let limit = Some("ingest.max_batch_kb");
    let body = match read_body_within(state, req, src.batch_limits().max_bytes, limit).await {
        Ok(b) => b,
        Err(resp) => {
            src.stats.rejected.fetch_add(1, Ordering::Relaxed);
            return resp;
        }
    };
    let format = Format::of(content_type.as_deref(), &body);
    let max_payload = state.http.get().max_body_bytes;
    batch_outcome(
        src.ingest_batch(&state.engine, body, format, partial, max_payload)
            .await,
    )
}

async fn hook(state: &AppState, name: &str, req: Request<Incoming>) -> Resp {
    let Some(hook) = state.sources.webhooks.find(|w| w.name() == name) else {
        let unknown = error(StatusCode::NOT_FOUND, &format!("unknown webhook {name:?}"));
        return answer_unread(state, req, unknown).await;
    };
    let header = |h: &str| {
        req.headers()
            .get(h)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let signature = header("x-opex-signature");
    let key = header("x-opex-key");
    let now = crate::record::now_ms() as i64 / 1000;
    // The body is read (within its limits and the budget of unchecked bodies) before the
    // check: the signature covers it, and a client still sending its body when the answer
    // comes would see the connection reset.
    let Unchecked { body, reservation } = match read_unchecked(state, req).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let checked = hook.verify(signature.as_deref(), key.as_deref(), &body, now);
    // Checked: the body no longer counts against the budget.
    drop(reservation);
    let verified = match checked {
        Ok(v) => v,
        Err(e) => return error(StatusCode::UNAUTHORIZED, &e.to_string()),
    };
    match hook.handle(&state.engine, verified, key, body).await {
        Ok(o) => outcome(o),
        Err(busy) => in_progress(busy.after_secs),
    }
}

/// Decodes `%XX` escapes of a path segment; invalid escapes stay as they are.
pub fn percent_decode(s: &str) -> String {
    if !s.contains('%') {
        return s.to_string();
    }
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
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::{percent_decode, split_path, MAX_SEGMENTS};

    #[test]
    fn a_path_splits_into_its_segments_and_a_longer_one_than_any_endpoint_into_none() {
        let split = |path: &str| {
            let mut parts = [""; MAX_SEGMENTS];
            split_path(path, &mut parts)
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(split("/"), [""]);
        assert_eq!(split("/api/status"), ["api", "status"]);
        assert_eq!(split("/api/ingest/line/"), ["api", "ingest", "line", ""]);
        assert_eq!(
            split("/api/sinks/db/dead-letters/7/replay"),
            ["api", "sinks", "db", "dead-letters", "7", "replay"]
        );
        assert_eq!(split("/a/b/c/d/e/f/g/h").len(), MAX_SEGMENTS);
        assert!(split("/a/b/c/d/e/f/g/h/i").is_empty());
    }

    #[test]
    fn percent_decoding_never_panics_on_truncated_escapes() {
        assert_eq!(percent_decode("a%20b"), "a b");
        assert_eq!(percent_decode("%"), "%");
        assert_eq!(percent_decode("%4"), "%4");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("x%41"), "xA");
        assert_eq!(percent_decode("plain-key"), "plain-key");
        assert_eq!(percent_decode("a%ffb"), "a\u{fffd}b");
    }
}
