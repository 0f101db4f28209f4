//! The config API (admin token): `GET /api/config` (the running config, secrets redacted,
//! with its revision and hash), `GET /api/config/revisions` (the kept revisions, newest
//! first), `POST /api/config?dry_run=1` (a whole config as YAML, validated, then compared
//! part by part with the running one: which parts would start, stop, restart or stay, and
//! which settings need a restart) and `POST /api/config` (the same, then applied as
//! [`crate::reload::Running::apply`] says; `If-Match: <revision>` refuses a change made on
//! top of another revision with `412`), and `POST /api/config/rollback/{revision}` (a kept
//! revision's text applied again, as the next revision).

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::{json, Value};

use super::admin::refusal;
use super::respond::{answer_unread, error, json_response, not_allowed, read_body_within, Resp};
use super::AppState;
use crate::config::Problems;
use crate::reload::{self, Leftovers, Origin, Refused};

/// The largest config a `POST /api/config` takes: 4 MiB.
pub const MAX_CONFIG_BYTES: usize = 4 << 20;

/// Serves `/api/config` and `/api/config/revisions` (`rest` is the path after `config`).
pub async fn handle(state: &Arc<AppState>, rest: &[&str], req: Request<Incoming>) -> Resp {
    if let Some(refused) = refusal(state, &req).await {
        return answer_unread(state, req, refused).await;
    }
    let method = req.method().clone();
    match (rest, method) {
        ([], Method::GET) => json_response(StatusCode::OK, &state.config.shown()),
        ([], Method::POST) => post(state, req).await,
        ([], _) => answer_unread(state, req, not_allowed("GET, POST")).await,
        (["revisions"], Method::GET) => json_response(StatusCode::OK, &state.config.revisions()),
        (["revisions"], _) => answer_unread(state, req, not_allowed("GET")).await,
        (["rollback", n], Method::POST) => rollback(state, n, req).await,
        (["rollback", _], _) => answer_unread(state, req, not_allowed("POST")).await,
        _ => {
            let unknown = error(StatusCode::NOT_FOUND, "no such endpoint");
            answer_unread(state, req, unknown).await
        }
    }
}

/// `POST /api/config`: with `dry_run=1`, what the body would change.
async fn post(state: &Arc<AppState>, req: Request<Incoming>) -> Resp {
    let flag = |name: &str| {
        req.uri().query().unwrap_or("").split('&').any(|kv| {
            kv == name
                || kv
                    .strip_prefix(name)
                    .is_some_and(|v| v == "=1" || v == "=true")
        })
    };
    let dry_run = flag("dry_run");
    let leftovers = match Leftovers::from_flags(flag("drain"), flag("discard")) {
        Some(l) => l,
        None => {
            let both = error(
                StatusCode::BAD_REQUEST,
                "drain and discard exclude each other: a removed sink's rows are either delivered first or given up",
            );
            return answer_unread(state, req, both).await;
        }
    };
    let if_match = match if_match(&req) {
        Ok(r) => r,
        Err(bad) => return answer_unread(state, req, bad.answer()).await,
    };
    let body = match read_body_within(state, req, MAX_CONFIG_BYTES, Some("a config")).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not UTF-8 text");
    };
    if !dry_run {
        return apply(state, text.to_string(), if_match, leftovers).await;
    }
    let config = match crate::config::from_yaml(text) {
        Ok(c) => c,
        Err(problems) => return invalid(&problems),
    };
    let tree = match crate::config::expanded_tree(text) {
        Ok(t) => t,
        Err(problems) => return invalid(&problems),
    };
    let diff = reload::diff(&state.config.tree(), &tree);
    let answer = json!({
        "ok": true,
        "dry_run": true,
        "revision": state.config.revision(),
        "hash": reload::revisions::hash(text),
        "changes": diff.to_json(),
        "needs_restart": diff.needs_restart,
        "warnings": config.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
    });
    json_response(StatusCode::OK, &answer)
}

/// The revision of `If-Match`, if given; `Err` (the `400`) when it is not a whole number.
fn if_match<B>(req: &Request<B>) -> Result<Option<u64>, NotARevision> {
    let Some(value) = req.headers().get(hyper::header::IF_MATCH) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|s| s.trim().trim_matches('"').parse::<u64>().ok())
        .map(Some)
        .ok_or(NotARevision)
}

/// An `If-Match` that names no revision.
struct NotARevision;

impl NotARevision {
    fn answer(self) -> Resp {
        error(
            StatusCode::BAD_REQUEST,
            "If-Match: expected a config revision, a whole number",
        )
    }
}

/// `POST /api/config/rollback/{n}`: kept revision `n` applied again, as the next revision
/// (`404` when it is not kept).
async fn rollback(state: &Arc<AppState>, n: &str, req: Request<Incoming>) -> Resp {
    // The kept text is a file: read off the runtime's threads.
    let found = match n.parse::<u64>() {
        Ok(n) => {
            let shared = Arc::clone(state);
            tokio::task::spawn_blocking(move || shared.config.text_of(n))
                .await
                .ok()
                .flatten()
        }
        Err(_) => None,
    };
    let answer = match (found, if_match(&req)) {
        (_, Err(bad)) => bad.answer(),
        (None, _) => error(
            StatusCode::NOT_FOUND,
            &format!("revision {n} is not kept (GET /api/config/revisions lists those that are)"),
        ),
        (Some(text), Ok(if_match)) => apply(state, text, if_match, Leftovers::Refuse).await,
    };
    // Whatever body came is read and dropped, so that the connection can go on.
    answer_unread(state, req, answer).await
}

/// `POST /api/config`: applies `text` (off the runtime's threads: it writes and syncs files);
/// `leftovers` says what becomes of the rows a removed sink holds.
async fn apply(
    state: &Arc<AppState>,
    text: String,
    if_match: Option<u64>,
    leftovers: Leftovers,
) -> Resp {
    let hash = reload::revisions::hash(&text);
    let shared = Arc::clone(state);
    let applied = tokio::task::spawn_blocking(move || {
        let targets = shared.targets();
        shared.config.apply(
            &text,
            Origin::Api,
            Some("admin"),
            if_match,
            leftovers,
            &targets,
        )
    })
    .await;
    let refused = match applied {
        Ok(Ok(a)) => {
            return json_response(
                StatusCode::OK,
                &json!({
                    "ok": true,
                    "dry_run": false,
                    "revision": a.revision.revision,
                    "hash": a.revision.hash,
                    "changes": a.diff.to_json(),
                    "needs_restart": a.diff.needs_restart,
                }),
            )
        }
        Ok(Err(refused)) => refused,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let message = refused.to_string();
    match refused {
        Refused::Invalid(problems) => invalid(&problems),
        Refused::Conflict { running } => json_response(
            StatusCode::PRECONDITION_FAILED,
            &json!({"ok": false, "error": message, "revision": running}),
        ),
        // Both say what the config would change, as every config answer does, and why not.
        Refused::NotLive { diff, parts } => {
            let mut names: Vec<&str> = parts.iter().map(|(p, _)| p.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            conflict(state, &message, &hash, &diff, "not_live", json!(names))
        }
        Refused::Failed { diff, part, reason } => {
            let failed = json!({"part": part, "reason": reason});
            conflict(state, &message, &hash, &diff, "failed", failed)
        }
        Refused::Io(_) => error(StatusCode::INTERNAL_SERVER_ERROR, &message),
    }
}

/// `409`: a config not applied, what it would change (`diff`), and why not under `why`.
fn conflict(
    state: &AppState,
    message: &str,
    hash: &str,
    diff: &reload::Diff,
    why: &str,
    detail: Value,
) -> Resp {
    let mut answer = json!({
        "ok": false,
        "dry_run": false,
        "error": message,
        "revision": state.config.revision(),
        "hash": hash,
        "changes": diff.to_json(),
        "needs_restart": diff.needs_restart,
    });
    answer[why] = detail;
    json_response(StatusCode::CONFLICT, &answer)
}

/// `400` with every problem of a config and its path.
fn invalid(problems: &Problems) -> Resp {
    let list: Vec<Value> = problems
        .0
        .iter()
        .map(|p| json!({"path": p.path, "message": p.message}))
        .collect();
    json_response(
        StatusCode::BAD_REQUEST,
        &json!({
            "ok": false,
            "error": format!("the config has {} problem(s); nothing was changed", list.len()),
            "problems": list,
        }),
    )
}
