//! The config API (admin token): `GET /api/config` (the running config, secrets redacted,
//! with its revision and hash), `GET /api/config/revisions` (the kept revisions, newest
//! first) and `POST /api/config?dry_run=1` (a whole config as YAML, validated, then compared
//! part by part with the running one: which parts would start, stop, restart or stay, and
//! which settings need a restart). Applying a config while the connector runs is not in this
//! version: a `POST` without `dry_run` is refused with that reason and changes nothing.

use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::{json, Value};

use super::admin::refusal;
use super::respond::{answer_unread, error, json_response, not_allowed, read_body_within, Resp};
use super::AppState;
use crate::config::Problems;
use crate::reload;

/// The largest config a `POST /api/config` takes: 4 MiB.
pub const MAX_CONFIG_BYTES: usize = 4 << 20;

/// Serves `/api/config` and `/api/config/revisions` (`rest` is the path after `config`).
pub async fn handle(state: &AppState, rest: &[&str], req: Request<Incoming>) -> Resp {
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
        _ => {
            let unknown = error(StatusCode::NOT_FOUND, "no such endpoint");
            answer_unread(state, req, unknown).await
        }
    }
}

/// `POST /api/config`: with `dry_run=1`, what the body would change.
async fn post(state: &AppState, req: Request<Incoming>) -> Resp {
    let dry_run = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .any(|kv| matches!(kv, "dry_run=1" | "dry_run=true" | "dry_run"));
    let body = match read_body_within(state, req, MAX_CONFIG_BYTES, Some("a config")).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not UTF-8 text");
    };
    let config = match crate::config::from_yaml(text) {
        Ok(c) => c,
        Err(problems) => return invalid(&problems),
    };
    let tree = match crate::config::expanded_tree(text) {
        Ok(t) => t,
        Err(problems) => return invalid(&problems),
    };
    let diff = reload::diff(&state.config.tree(), &tree);
    let mut answer = json!({
        "ok": true,
        "dry_run": dry_run,
        "revision": state.config.revision(),
        "hash": reload::revisions::hash(text),
        "changes": diff.to_json(),
        "needs_restart": diff.needs_restart,
        "warnings": config.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
    });
    if dry_run {
        return json_response(StatusCode::OK, &answer);
    }
    answer["ok"] = Value::Bool(false);
    answer["error"] = Value::String(
        "this version does not apply a config while it runs: nothing was changed; put the config in the file given to run and restart (POST with ?dry_run=1 shows what it would change)"
            .into(),
    );
    json_response(StatusCode::NOT_IMPLEMENTED, &answer)
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
