//! Admin endpoints: dead letters (inspect, correct, replay, resolve) and the event history.
//! Two kinds of dead letters: the pipeline's (`/api/dead-letters`, records a flow could not
//! handle) and each queue's (`/api/sinks/{name}/dead-letters`, and `/api/push/dead-letters`
//! for the sink called `push`: rows the queue's destination refused for good), which can be
//! listed, read, replayed back to the head of their queue, or deleted.
//! They need `connector.http.admin_token` as a bearer token; without one configured they do
//! not exist (404), so a forgotten token never leaves them open. [`refusal`] is that check,
//! also for the admin part of other routes (`GET /api/ledger?verify=1`).

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::{json, Value};

use hyper::header::{HeaderValue, RETRY_AFTER};

use super::respond::{answer_unread, error, json_response, not_allowed, outcome, read_body, Resp};
use super::routes::percent_decode;
use super::{auth, AppState};
use crate::record::Settlement;
use crate::sinks::Sink;
use crate::sources::SourceOutcome;
use crate::store::dead_letters::{DlqFilter, DlqState};
use crate::store::queue::{ReplayError, ReplaySummary};
use crate::store::{DeadLetter, StoreError};

/// Most entries one `POST /api/dead-letters/replay` (or a queue's
/// `POST .../dead-letters/replay`) replays.
const MAX_REPLAY_ALL: usize = 10_000;
/// Most rows one listing returns.
const MAX_PAGE: usize = 1000;

/// The refusal of an admin call, or `None` when it may go on: `404` without `admin_token`
/// configured (the call does not exist), `401` without the right bearer token (counted, and
/// slowed after repeated failures from one address).
pub async fn refusal<B>(state: &AppState, req: &Request<B>) -> Option<Resp> {
    let http = state.http.get();
    let Some(token) = http.admin_token.as_deref() else {
        return Some(error(StatusCode::NOT_FOUND, "no such endpoint"));
    };
    let refused = &state.auth.stats.admin_unauthorized;
    if !state
        .auth
        .check(req.headers(), auth::peer(req), token, "admin", refused)
        .await
    {
        return Some(error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong admin token",
        ));
    }
    None
}

/// Serves an admin path (already known to be one).
pub async fn handle(state: &AppState, segments: &[&str], req: Request<Incoming>) -> Resp {
    if let Some(refused) = refusal(state, &req).await {
        return answer_unread(state, req, refused).await;
    }
    let query = Query::parse(req.uri().query().unwrap_or(""));
    let method = req.method().clone();
    // Only a correction (PUT) reads its body; any other call's body is still read (within the
    // limits) and dropped, so the keep-alive connection can carry the caller's next request.
    if let (["api", "dead-letters", id], &Method::PUT) = (segments, &method) {
        return match parse_id(id) {
            Some(id) => correct(state, id, req).await,
            None => {
                let unknown = error(StatusCode::NOT_FOUND, "no such dead letter");
                answer_unread(state, req, unknown).await
            }
        };
    }
    if let Err(resp) = read_body(state, req).await {
        return resp;
    }
    match (segments, method) {
        (["api", "push", "dead-letters", rest @ ..], m) => {
            queue_verbs(state, "push", rest, m, &query).await
        }
        (["api", "sinks", name, "dead-letters", rest @ ..], m) => {
            queue_verbs(state, name, rest, m, &query).await
        }
        (["api", "sinks", name, "errors"], Method::GET) => sink_errors(state, name),
        (["api", "events"], Method::GET) => events(state, &query).await,
        (["api", "dead-letters"], Method::GET) => list(state, &query).await,
        (["api", "dead-letters", "replay"], Method::POST) => replay_all(state, &query).await,
        (["api", "dead-letters", "replay"], _) => not_allowed("POST"),
        (["api", "dead-letters", id], m) => {
            let Some(id) = parse_id(id) else {
                return error(StatusCode::NOT_FOUND, "no such dead letter");
            };
            match m {
                Method::GET => get(state, id).await,
                Method::DELETE => resolve(state, id).await,
                _ => not_allowed("GET, PUT, DELETE"),
            }
        }
        (["api", "dead-letters", id, "replay"], Method::POST) => match parse_id(id) {
            Some(id) => replay_one(state, id).await,
            None => error(StatusCode::NOT_FOUND, "no such dead letter"),
        },
        (["api", "dead-letters", _, "replay"], _) => not_allowed("POST"),
        _ => not_allowed("GET"),
    }
}

fn parse_id(s: &str) -> Option<u64> {
    s.parse().ok()
}

struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: &str) -> Self {
        Self(
            q.split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (percent_decode(k), percent_decode(&v.replace('+', " "))))
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn number(&self, name: &str) -> Option<u64> {
        self.get(name).and_then(|v| v.parse().ok())
    }
}

/// Runs a blocking store call off the runtime's threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, Resp> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())),
        Err(e) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())),
    }
}

/// The verbs on sink `name`'s queue dead letters; `rest` is the path after `dead-letters`.
async fn queue_verbs(state: &AppState, name: &str, rest: &[&str], m: Method, q: &Query) -> Resp {
    match (rest, m) {
        ([], Method::GET) => queue_dead_letters(state, name, q),
        ([], _) => not_allowed("GET"),
        (["replay"], Method::POST) => queue_replay_all(state, name, q).await,
        (["replay"], _) => not_allowed("POST"),
        ([id], m @ (Method::GET | Method::DELETE)) => match parse_id(id) {
            None => bad_queue_id(id),
            Some(id) if m == Method::GET => queue_get(state, name, id).await,
            Some(id) => queue_delete(state, name, id).await,
        },
        ([_], _) => not_allowed("GET, DELETE"),
        ([id, "replay"], Method::POST) => match parse_id(id) {
            Some(id) => queue_replay(state, name, id).await,
            None => bad_queue_id(id),
        },
        ([_, "replay"], _) => not_allowed("POST"),
        _ => error(StatusCode::NOT_FOUND, "no such endpoint"),
    }
}

/// The answer to a queue dead letter id that is not a whole number.
fn bad_queue_id(s: &str) -> Resp {
    let shown: String = s.chars().take(40).collect();
    error(
        StatusCode::BAD_REQUEST,
        &format!("dead letter id: expected a whole number, got {shown:?}"),
    )
}

/// Why a call on a sink's queue found nothing to act on.
enum NoQueue {
    /// No sink has that name.
    Sink,
    /// The sink has no queue of its own.
    Queue,
}

/// Runs `f` on sink `name` off the runtime's threads (its store calls block); 404 when there
/// is no such sink or it has no queue of its own (`f` answers `None`).
async fn on_sink<T: Send + 'static>(
    state: &AppState,
    name: &str,
    f: impl FnOnce(&Sink) -> Option<T> + Send + 'static,
) -> Result<T, Resp> {
    let engine = Arc::clone(&state.engine);
    let name = name.to_string();
    let run = move || match engine.sinks().get(&name) {
        None => Err(NoQueue::Sink),
        Some(sink) => f(sink).ok_or(NoQueue::Queue),
    };
    match tokio::task::spawn_blocking(run).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(NoQueue::Sink)) => Err(error(StatusCode::NOT_FOUND, "no such sink")),
        Ok(Err(NoQueue::Queue)) => Err(error(
            StatusCode::NOT_FOUND,
            "this sink has no queue of its own",
        )),
        Err(e) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())),
    }
}

/// A queue dead letter as the listing and `GET .../{id}` show it: the stored object and its
/// `id`.
fn queue_entry(d: DeadLetter) -> Value {
    let mut v: Value = serde_json::from_slice(&d.json).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("id".into(), d.id.into());
    }
    v
}

async fn queue_get(state: &AppState, name: &str, id: u64) -> Resp {
    match on_sink(state, name, move |s| s.get_dead_letter(id)).await {
        Ok(Ok(Some(d))) => json_response(StatusCode::OK, &queue_entry(d)),
        Ok(Ok(None)) => error(StatusCode::NOT_FOUND, "no such dead letter"),
        Ok(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        Err(resp) => resp,
    }
}

async fn queue_delete(state: &AppState, name: &str, id: u64) -> Resp {
    match on_sink(state, name, move |s| s.delete_dead_letter(id)).await {
        Ok(Ok(true)) => json_response(
            StatusCode::OK,
            &json!({"ok": true, "result": "deleted", "id": id}),
        ),
        Ok(Ok(false)) => error(StatusCode::NOT_FOUND, "no such dead letter"),
        Ok(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        Err(resp) => resp,
    }
}

/// The answer to a replay that was refused.
fn replay_refused(e: &ReplayError, mut body: Value) -> Resp {
    let status = match e {
        ReplayError::NotFound => StatusCode::NOT_FOUND,
        ReplayError::Full { .. } | ReplayError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        ReplayError::SeqTaken(_) => StatusCode::CONFLICT,
        ReplayError::Damaged(_) => StatusCode::UNPROCESSABLE_ENTITY,
    };
    body["ok"] = false.into();
    body["error"] = e.to_string().into();
    let after = crate::admission::RETRY_AFTER.as_secs();
    if e.is_retriable() {
        body["retry_after_secs"] = after.into();
    }
    let mut r = json_response(status, &body);
    if e.is_retriable() {
        r.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(after));
    }
    r
}

async fn queue_replay(state: &AppState, name: &str, id: u64) -> Resp {
    match on_sink(state, name, move |s| s.replay_dead_letter(id)).await {
        Ok(Ok(seq)) => json_response(
            StatusCode::OK,
            &json!({"ok": true, "result": "replayed", "id": id, "seq": seq}),
        ),
        Ok(Err(e)) => replay_refused(&e, json!({"id": id})),
        Err(resp) => resp,
    }
}

/// `POST .../dead-letters/replay[?limit=N]`: up to `limit` (at most [`MAX_REPLAY_ALL`]) of
/// the oldest dead letters, in seq order; 503 when the queue had room for none of them.
async fn queue_replay_all(state: &AppState, name: &str, q: &Query) -> Resp {
    let max = q
        .number("limit")
        .unwrap_or(MAX_REPLAY_ALL as u64)
        .clamp(1, MAX_REPLAY_ALL as u64) as usize;
    let summary: ReplaySummary =
        match on_sink(state, name, move |s| s.replay_dead_letters(max)).await {
            Ok(Ok(summary)) => summary,
            Ok(Err(e)) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
            Err(resp) => return resp,
        };
    let failed: Vec<Value> = summary
        .failed
        .iter()
        .map(|(id, e)| json!({"id": id, "error": e.to_string()}))
        .collect();
    let body = json!({
        "replayed": summary.replayed.len(),
        "failed": failed,
        "left": summary.left,
        "stopped": summary.stopped.as_ref().map(ToString::to_string),
    });
    match &summary.stopped {
        Some(e) if summary.replayed.is_empty() => replay_refused(e, body),
        Some(_) | None => {
            let mut body = body;
            body["ok"] = true.into();
            json_response(StatusCode::OK, &body)
        }
    }
}

/// The dead letters of sink `name`'s queue: rows its destination refused for good.
fn queue_dead_letters(state: &AppState, name: &str, q: &Query) -> Resp {
    let Some(sink) = state.engine.sinks().get_shared(name) else {
        return error(StatusCode::NOT_FOUND, "no such sink");
    };
    let limit = q.number("limit").unwrap_or(100).clamp(1, MAX_PAGE as u64) as usize;
    match sink.dead_letters(q.number("after"), limit) {
        None => error(StatusCode::NOT_FOUND, "this sink has no queue of its own"),
        Some(Ok((rows, total))) => {
            let rows: Vec<Value> = rows.into_iter().map(queue_entry).collect();
            json_response(StatusCode::OK, &json!({"rows": rows, "total": total}))
        }
        Some(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// The full text of sink `name`'s last errors: the public documents show only their class,
/// because a receiver's answer or a database's message may echo a record.
fn sink_errors(state: &AppState, name: &str) -> Resp {
    match state.engine.sinks().get(name) {
        Some(sink) => json_response(StatusCode::OK, &sink.error_detail()),
        None => error(StatusCode::NOT_FOUND, "no such sink"),
    }
}

async fn events(state: &AppState, q: &Query) -> Resp {
    let name = q.get("sink").unwrap_or("storage");
    let Some(storage) = state
        .engine
        .sinks()
        .get(name)
        .and_then(|s| s.storage())
        .cloned()
    else {
        return error(
            StatusCode::NOT_FOUND,
            &format!("no storage sink named {name:?} is configured"),
        );
    };
    let source = q.get("source").map(str::to_string);
    let since = q.number("since");
    let limit = q.number("limit").unwrap_or(100).clamp(1, MAX_PAGE as u64) as usize;
    match blocking(move || storage.query(source.as_deref(), since, limit)).await {
        Ok(records) => {
            let rows: Vec<Value> = records
                .iter()
                .map(|r| serde_json::from_slice(&r.to_line()).unwrap_or_default())
                .collect();
            json_response(StatusCode::OK, &json!({"rows": rows}))
        }
        Err(resp) => resp,
    }
}

async fn list(state: &AppState, q: &Query) -> Resp {
    let state_filter = match q.get("state") {
        None => None,
        Some("open") => Some(DlqState::Open),
        Some("resolved") => Some(DlqState::Resolved),
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("state: expected open or resolved, got {other:?}"),
            )
        }
    };
    let filter = DlqFilter {
        flow: q.get("flow").map(str::to_string),
        state: state_filter,
        after: q.number("after"),
        limit: q.number("limit").unwrap_or(100).clamp(1, MAX_PAGE as u64) as usize,
    };
    let dlq = Arc::clone(state.engine.dead_letters());
    let counts = dlq.counts();
    match blocking(move || dlq.list(&filter)).await {
        Ok(rows) => json_response(StatusCode::OK, &json!({"rows": rows, "counts": counts})),
        Err(resp) => resp,
    }
}

async fn get(state: &AppState, id: u64) -> Resp {
    let dlq = Arc::clone(state.engine.dead_letters());
    match blocking(move || dlq.get(id)).await {
        Ok(Some(entry)) => json_response(StatusCode::OK, &json!(entry)),
        Ok(None) => error(StatusCode::NOT_FOUND, "no such dead letter"),
        Err(resp) => resp,
    }
}

async fn correct(state: &AppState, id: u64, req: Request<Incoming>) -> Resp {
    let body = match read_body(state, req).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let payload = match serde_json::from_slice::<Box<serde_json::value::RawValue>>(&body) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("malformed JSON: {e}")),
    };
    let dlq = Arc::clone(state.engine.dead_letters());
    match blocking(move || dlq.update_payload(id, payload)).await {
        Ok(true) => json_response(StatusCode::OK, &json!({"ok": true})),
        Ok(false) => error(StatusCode::NOT_FOUND, "no such dead letter"),
        Err(resp) => resp,
    }
}

async fn resolve(state: &AppState, id: u64) -> Resp {
    let dlq = Arc::clone(state.engine.dead_letters());
    match blocking(move || dlq.resolve(id, "deleted")).await {
        Ok(true) => json_response(StatusCode::OK, &json!({"ok": true})),
        Ok(false) => error(StatusCode::NOT_FOUND, "no such dead letter"),
        Err(resp) => resp,
    }
}

/// Replays entry `id`; `Ok(settlement)` once it ran, `Err` with the answer when it could not.
async fn replay(state: &AppState, id: u64) -> Result<Settlement, Resp> {
    let dlq = Arc::clone(state.engine.dead_letters());
    let entry = blocking(move || dlq.get(id)).await?;
    match entry {
        None => return Err(error(StatusCode::NOT_FOUND, "no such dead letter")),
        Some(e) if e.state == DlqState::Resolved => {
            return Err(error(StatusCode::CONFLICT, "dead letter already resolved"))
        }
        Some(_) => {}
    }
    let dlq = Arc::clone(state.engine.dead_letters());
    let Some((record, flow)) = blocking(move || dlq.record(id)).await? else {
        return Err(error(StatusCode::NOT_FOUND, "no such dead letter"));
    };
    let settlement = state.engine.replay(&flow, record).await;
    if matches!(settlement, Settlement::Stored | Settlement::Unrouted) {
        let dlq = Arc::clone(state.engine.dead_letters());
        blocking(move || dlq.resolve(id, "replayed")).await?;
    }
    Ok(settlement)
}

async fn replay_one(state: &AppState, id: u64) -> Resp {
    match replay(state, id).await {
        Ok(Settlement::Stored | Settlement::Unrouted) => {
            json_response(StatusCode::OK, &json!({"ok": true, "result": "stored"}))
        }
        Ok(Settlement::DeadLettered { .. }) => json_response(
            StatusCode::OK,
            &json!({"ok": true, "result": "dead_lettered"}),
        ),
        Ok(other) => outcome(SourceOutcome::from_settlement(String::new(), other)),
        Err(resp) => resp,
    }
}

async fn replay_all(state: &AppState, q: &Query) -> Resp {
    let Some(flow) = q.get("flow").map(str::to_string) else {
        return error(StatusCode::BAD_REQUEST, "flow=<id> is required");
    };
    let (mut replayed, mut failed) = (0u64, 0u64);
    let mut after = None;
    let mut seen = 0;
    while seen < MAX_REPLAY_ALL {
        let filter = DlqFilter {
            flow: Some(flow.clone()),
            state: Some(DlqState::Open),
            after,
            limit: 100,
        };
        let dlq = Arc::clone(state.engine.dead_letters());
        let page = match blocking(move || dlq.list(&filter)).await {
            Ok(p) => p,
            Err(resp) => return resp,
        };
        let Some(last) = page.last() else {
            break;
        };
        after = Some(last.id);
        for entry in page {
            seen += 1;
            match replay(state, entry.id).await {
                Ok(Settlement::Stored | Settlement::Unrouted) => replayed += 1,
                _ => failed += 1,
            }
        }
    }
    json_response(
        StatusCode::OK,
        &json!({"ok": true, "replayed": replayed, "failed": failed}),
    )
}
