//! Building responses, and reading bodies within their limits.

use std::future::Future;
use std::task::Poll;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Incoming};
use hyper::header::{
    HeaderValue, ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, EXPECT, RETRY_AFTER,
};
use hyper::{Request, Response, StatusCode};
use serde_json::json;

use super::AppState;
use crate::sources::ingest::batch::BodyError;
use crate::sources::ingest::BatchOutcome;
use crate::sources::SourceOutcome;

/// Every response the server sends.
pub type Resp = Response<Full<Bytes>>;

/// Reads a body within `max_body_bytes` and the body-read timeout: 413 and 408 otherwise.
///
/// Those refusals leave the rest of the body unread, so they say `Connection: close`: the
/// connection cannot carry another request.
pub async fn read_body(state: &AppState, req: Request<Incoming>) -> Result<Bytes, Resp> {
    read_body_within(state, req, state.http.get().max_body_bytes, None).await
}

/// [`read_body`] within `max` bytes; the `413` names `limit` when given (a batch's body is
/// bounded by `ingest.max_batch_kb`).
pub async fn read_body_within(
    state: &AppState,
    req: Request<Incoming>,
    max: usize,
    limit: Option<&str>,
) -> Result<Bytes, Resp> {
    let too_large = |max: usize| match limit {
        None => too_large(max),
        Some(limit) => error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("body larger than {} KiB ({limit})", max / 1024),
        ),
    };
    if declared_length(&req).is_some_and(|n| n > max as u64) {
        return Err(closing(too_large(max)));
    }
    let mut collect = std::pin::pin!(Limited::new(req.into_body(), max).collect());
    // A small body usually came in with its head: then it is taken at once, without arming
    // the timer (one per request otherwise); else the timeout bounds the rest of the read.
    let first = std::future::poll_fn(|cx| Poll::Ready(collect.as_mut().poll(cx))).await;
    let read = match first {
        Poll::Ready(read) => Ok(read),
        Poll::Pending => tokio::time::timeout(state.http.get().body_read_timeout, collect).await,
    };
    match read {
        Err(_) => Err(closing(error(
            StatusCode::REQUEST_TIMEOUT,
            "body not received in time",
        ))),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(closing(too_large(max))),
        Ok(Err(e)) => Err(closing(error(
            StatusCode::BAD_REQUEST,
            &format!("cannot read the body: {e}"),
        ))),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

/// Answers `resp` to a request whose body its handler does not want (a token, a route, a
/// method or a host refused before the body was read).
///
/// The body is read and dropped first, within the limits of [`read_body`] (`max_body_kb`,
/// the body-read timeout; one frame in memory at a time), so the keep-alive connection
/// carries the client's next request, and a client still sending its body is not cut off by
/// the reset a socket closed over unread bytes sends. A body that cannot be read within those
/// limits, or that the client holds back until `100 Continue` (`Expect`), is not waited for:
/// the answer then says `Connection: close`.
pub async fn answer_unread(state: &AppState, req: Request<Incoming>, resp: Resp) -> Resp {
    if req.body().is_end_stream() {
        return resp;
    }
    let http = state.http.get();
    let max = http.max_body_bytes;
    if req.headers().contains_key(EXPECT) || declared_length(&req).is_some_and(|n| n > max as u64) {
        return closing(resp);
    }
    let mut body = Limited::new(req.into_body(), max);
    let drain = async {
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                return false;
            }
        }
        true
    };
    match tokio::time::timeout(http.body_read_timeout, drain).await {
        Ok(true) => resp,
        Ok(false) | Err(_) => closing(resp),
    }
}

/// The body length `req` declares (`Content-Length`), if any.
pub(super) fn declared_length<B>(req: &Request<B>) -> Option<u64> {
    req.headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// `resp` with `Connection: close`: the server closes the connection after it.
pub(super) fn closing(mut resp: Resp) -> Resp {
    resp.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// The answer to an HTTP source's caller.
pub fn outcome(outcome: SourceOutcome) -> Resp {
    match outcome {
        // The id is hex: no escaping needed, and this is the hot path: three copies into a
        // buffer of the right size (a `format!` here cost about 800 instructions a request).
        SourceOutcome::Stored {
            id,
            result: "stored",
            ..
        } => {
            const HEAD: &str = r#"{"ok":true,"result":"stored","id":""#;
            let mut body = String::with_capacity(HEAD.len() + id.len() + 2);
            body.push_str(HEAD);
            body.push_str(&id);
            body.push_str(r#""}"#);
            text(StatusCode::OK, "application/json", body)
        }
        SourceOutcome::Stored {
            id,
            result,
            dead_letter_id,
        } => {
            let mut body = json!({"ok": true, "result": result, "id": id});
            if let Some(d) = dead_letter_id {
                body["dead_letter_id"] = d.into();
            }
            json_response(StatusCode::OK, &body)
        }
        SourceOutcome::Accepted { id } => json_response(
            StatusCode::OK,
            &json!({"ok": true, "result": "accepted", "id": id}),
        ),
        SourceOutcome::Retry { sink, after_secs } => {
            let (body, after) = retry_body(sink, None, after_secs);
            retry_later(body, after)
        }
        SourceOutcome::Failed { sink, reason } => {
            let (body, after) = retry_body(sink, Some(reason), RETRY_AFTER_SECS);
            retry_later(body, after)
        }
        SourceOutcome::Malformed { reason } => error(
            StatusCode::BAD_REQUEST,
            &format!("malformed JSON: {reason}"),
        ),
    }
}

/// `409` + `Retry-After`: an identical webhook request is still running.
pub fn in_progress(after_secs: u64) -> Resp {
    with_retry_after(
        json_response(
            StatusCode::CONFLICT,
            &json!({"ok": false, "result": "in_progress", "retry_after_secs": after_secs,
                    "error": "an identical request is still being handled"}),
        ),
        after_secs,
    )
}

/// How long a caller waits after a sink failed (not refused) its record.
const RETRY_AFTER_SECS: u64 = crate::admission::RETRY_AFTER.as_secs();

/// The body of a `503` for `sink`: `retry` when it refused the record at admission, `error`
/// with the `reason` it failed; and the seconds to wait.
fn retry_body(sink: String, reason: Option<String>, after_secs: u64) -> (serde_json::Value, u64) {
    let body = match reason {
        None => {
            json!({"ok": false, "result": "retry", "sink": sink, "retry_after_secs": after_secs})
        }
        Some(reason) => json!({"ok": false, "result": "error", "sink": sink, "error": reason,
                                "retry_after_secs": after_secs}),
    };
    (body, after_secs)
}

/// `503` with `body` and `Retry-After: after_secs`.
fn retry_later(body: serde_json::Value, after_secs: u64) -> Resp {
    with_retry_after(
        json_response(StatusCode::SERVICE_UNAVAILABLE, &body),
        after_secs,
    )
}

fn with_retry_after(mut r: Resp, after_secs: u64) -> Resp {
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(after_secs));
    r
}

/// The answer to a batch's caller (`POST /api/ingest/{source}`).
pub fn batch_outcome(outcome: BatchOutcome) -> Resp {
    match outcome {
        BatchOutcome::Stored {
            ids,
            results,
            rejected,
        } => {
            let first = results.first().copied().unwrap_or("stored");
            let same = results.iter().all(|r| *r == first);
            let mut body = json!({
                "ok": true,
                "result": if same { first } else { "mixed" },
                "count": ids.len(),
                "ids": ids,
            });
            if first != "stored" || !same {
                body["results"] = json!(results);
            }
            if let Some(rejected) = rejected {
                body["rejected"] = json!(rejected);
            }
            json_response(StatusCode::OK, &body)
        }
        BatchOutcome::Rejected(rejected) => json_response(
            StatusCode::BAD_REQUEST,
            &json!({
                "ok": false,
                "error": format!("{} bad lines, nothing stored", rejected.len()),
                "rejected": rejected,
            }),
        ),
        BatchOutcome::Body(e @ BodyError::TooManyRecords { .. }) => {
            error(StatusCode::PAYLOAD_TOO_LARGE, &e.to_string())
        }
        BatchOutcome::Body(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
        BatchOutcome::Retry { outcome, stored } => {
            let (mut body, after) = match outcome {
                SourceOutcome::Retry { sink, after_secs } => retry_body(sink, None, after_secs),
                SourceOutcome::Failed { sink, reason } => {
                    retry_body(sink, Some(reason), RETRY_AFTER_SECS)
                }
                other => return self::outcome(other),
            };
            if !stored.is_empty() {
                body["stored"] = json!(stored);
            }
            retry_later(body, after)
        }
    }
}

/// 413 with the limit.
pub fn too_large(max: usize) -> Resp {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("body larger than {} KiB", max / 1024),
    )
}

/// 405 with `Allow`.
pub fn not_allowed(allow: &'static str) -> Resp {
    let mut r = error(StatusCode::METHOD_NOT_ALLOWED, &format!("use {allow}"));
    r.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    r
}

/// `{"ok":false,"error":message}` with `status`.
pub fn error(status: StatusCode, message: &str) -> Resp {
    json_response(status, &json!({"ok": false, "error": message}))
}

/// A JSON body.
pub fn json_response(status: StatusCode, value: &serde_json::Value) -> Resp {
    text(status, "application/json", value.to_string())
}

/// A text body of `content_type`.
pub fn text(status: StatusCode, content_type: &'static str, body: String) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}
