//! One verified request through the replay window: a new request runs, an identical copy of a
//! running one waits for it, a copy of one answered `200` gets the same answer.
//!
//! A new request runs in a task of its own, not in the HTTP handler: hyper drops the handler
//! when the client disconnects, and a flow cut off there could have stored its record without
//! the window knowing. The task always settles, so the sender's retry (the same request, once
//! its client timed out) gets the real outcome: it waits for the running copy, up to
//! [`WAIT_FOR_COPY`], then `409` + `Retry-After`; a copy answered `200` is answered the same,
//! and nothing is stored twice. Only a copy dropped before it settled (the task itself gone,
//! which a panic or the runtime's end does) leaves the window, so its retry is a new request.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use super::replay::{Answer, Claim};
use super::source::{Verified, WebhookSource};
use crate::engine::Engine;
use crate::record::now_ms;
use crate::sources::SourceOutcome;
use crate::telemetry::events;

/// Longest an identical copy waits for the running one before it gets `409`.
pub const WAIT_FOR_COPY: Duration = Duration::from_secs(10);

/// `409` + `Retry-After`: an identical request is still running after [`WAIT_FOR_COPY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InProgress {
    /// Seconds to wait before sending it again.
    pub after_secs: u64,
}

/// A request recorded as running in the window: forgotten again when dropped before it
/// settled. Dropping it (and its sender) wakes the identical copies waiting for it.
struct Running {
    hook: Arc<WebhookSource>,
    mac: [u8; 32],
    settled: bool,
    _done: watch::Sender<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.settled {
            self.hook.window().forget(&self.mac);
        }
    }
}

impl WebhookSource {
    /// Handles a request whose signature passed, as the replay window says (module doc).
    pub async fn handle(
        self: &Arc<Self>,
        engine: &Arc<Engine>,
        req: Verified,
        key: Option<String>,
        body: Bytes,
    ) -> Result<SourceOutcome, InProgress> {
        self.stats.received.fetch_add(1, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + WAIT_FOR_COPY;
        loop {
            let now = now_ms() as i64 / 1000;
            let claim = self.window().claim(req.t, req.mac, now, self.tolerance());
            match claim {
                Claim::Settled(answer) => match answer.outcome() {
                    Some(outcome) => {
                        events::webhook_request_repeated(&self.stats.repeated, self.name());
                        return Ok(outcome);
                    }
                    // Unreadable: forgotten, the request runs as a new one.
                    None => self.window().forget(&req.mac),
                },
                Claim::Running(mut done) => {
                    if tokio::time::timeout_at(deadline, done.changed())
                        .await
                        .is_err()
                    {
                        let after_secs = crate::admission::RETRY_AFTER.as_secs();
                        events::webhook_request_in_progress(&self.stats.in_progress, self.name());
                        return Err(InProgress { after_secs });
                    }
                }
                Claim::New(done) => {
                    let running = Running {
                        hook: Arc::clone(self),
                        mac: req.mac,
                        settled: false,
                        _done: done,
                    };
                    let task = tokio::spawn(run(running, Arc::clone(engine), req, key, body));
                    return Ok(task.await.unwrap_or_else(|e| SourceOutcome::Failed {
                        sink: "webhook".into(),
                        reason: e.to_string(),
                    }));
                }
            }
        }
    }
}

/// Runs a new request to its outcome, counts it, and settles or forgets it in the window.
async fn run(
    mut running: Running,
    engine: Arc<Engine>,
    req: Verified,
    key: Option<String>,
    body: Bytes,
) -> SourceOutcome {
    let hook = Arc::clone(&running.hook);
    let (outcome, written) = hook.run(&engine, req, key.as_deref(), &body).await;
    let Some(answer) = Answer::of(&outcome) else {
        match &outcome {
            SourceOutcome::Retry { .. } => &hook.stats.backpressured,
            SourceOutcome::Malformed { .. } => &hook.stats.rejected_body,
            _ => &hook.stats.failed,
        }
        .fetch_add(1, Ordering::Relaxed);
        // `running` drops: the request leaves the window, the sender's retry is new.
        return outcome;
    };
    hook.stats.accepted.fetch_add(1, Ordering::Relaxed);
    if !written {
        let row = hook.window_row(req, &answer);
        let dlq = Arc::clone(engine.dead_letters());
        let put = tokio::task::spawn_blocking(move || dlq.window_put(&row)).await;
        // The record is stored: the answer stands, only a restart would forget the request.
        match put {
            Ok(Ok(())) => {}
            Ok(Err(e)) => events::webhook_window_write_failed(hook.name(), &e.to_string()),
            Err(e) => events::webhook_window_write_failed(hook.name(), &e.to_string()),
        }
    }
    hook.window().settle(&req.mac, answer);
    running.settled = true;
    outcome
}
