//! `POST /api/devices/{device}/write`: a command over HTTP.
//!
//! The body is the one every path shares (`commands::parse_request`):
//! `{"id":"cmd-17","points":{"setpoint":72.5,"pump_on":true},"expires_ms":3000,"verify":false}`,
//! with `Authorization: Bearer <commands.token>`. The checks, in order:
//!
//! | status | when |
//! | --- | --- |
//! | `404` | `commands.token` is not configured: the path does not exist, so a forgotten token never leaves devices writable |
//! | `401` | the bearer token is missing or wrong (constant-time compare; counted in `auth.commands_unauthorized`, slowed after repeated failures like every token) |
//! | `413` / `408` | the body is larger than `connector.http.max_body_kb`, or too slow |
//! | `400` | the body is malformed; the reason says what is wrong |
//! | `404` | no device of that name takes commands |
//! | `409` | the id is a recent HTTP command's with other points or values: nothing is sent; the body is the outcome with `"result":"refused","reason":"id reused with other content"` and every point `refused`, and the command is on record (`commands::service`) |
//! | `200` | the command ran: `Outcome::to_json`, a result per point |
//!
//! The answer is `200` whether or not every point was written: the command was taken and
//! each point's fate is in the body (`ok` is true only when every point was `written`). A
//! caller must read `ok` and the per-point results, never the status alone.
//!
//! A command runs in a task of its own: a caller that hangs up while its command waits for
//! the device does not cancel it (the device may be writing it already); it runs to its end,
//! is counted and leaves its `command/<device>` record.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::respond::{answer_unread, error, json_response, read_body, Resp};
use super::routes::percent_decode;
use super::{auth, AppState};
use crate::commands::{parse_request, Origin};

/// The name the commands token goes by in a command's origin (there is one such token).
pub const TOKEN_NAME: &str = "commands";

/// Runs the command of `req` on `device` (still percent-encoded, as the path holds it).
pub async fn write(state: &AppState, device: &str, req: Request<Incoming>) -> Resp {
    let config = state.commands.config();
    let Some(token) = config.token.as_deref() else {
        let off = error(
            StatusCode::NOT_FOUND,
            "commands over HTTP are off: commands.token is not configured",
        );
        return answer_unread(state, req, off).await;
    };
    let refused = &state.auth.stats.commands_unauthorized;
    if !state
        .auth
        .check(req.headers(), auth::peer(&req), token, TOKEN_NAME, refused)
        .await
    {
        let refused = error(StatusCode::UNAUTHORIZED, "missing or wrong commands token");
        // The body is read (and dropped) before the answer, so the keep-alive connection
        // carries the caller's next request.
        return answer_unread(state, req, refused).await;
    }
    // Read (within the limits) before any further answer, so the keep-alive connection can
    // carry the caller's next request.
    let body = match read_body(state, req).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let request = match parse_request(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let device = percent_decode(device);
    if !state.commands.takes(&device) {
        return error(
            StatusCode::NOT_FOUND,
            &format!("no device {device:?} takes commands"),
        );
    }
    let origin = Origin::Http {
        token: TOKEN_NAME.to_string(),
    };
    // Its own task: a caller that hangs up does not cancel a command already handed to the
    // device; it still finishes, is counted and leaves its record.
    let commands = Arc::clone(&state.commands);
    let engine = Arc::clone(&state.engine);
    let run =
        tokio::spawn(async move { commands.execute(&engine, &device, request, origin).await });
    match run.await {
        Ok(Ok(outcome)) if outcome.refused.is_some() => {
            json_response(StatusCode::CONFLICT, &outcome.to_json())
        }
        Ok(Ok(outcome)) => json_response(StatusCode::OK, &outcome.to_json()),
        Ok(Err(e)) => error(StatusCode::NOT_FOUND, &e.to_string()),
        Err(e) => {
            log::error!("a command's task failed: error=\"{e}\"");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the command's task failed; its outcome is not known",
            )
        }
    }
}
