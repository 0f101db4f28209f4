//! One signed webhook: signature first, then the replay window (`request.rs`), then admission,
//! then the flow, answered by `respond`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::config::{Respond, WebhookConfig};
use super::inbox::settle_inbox;
use super::replay::{Answer, ReplayWindow};
use super::signature::{self, SigError};
use crate::engine::{Engine, Mode};
use crate::record::{Record, Settlement};
use crate::sources::SourceOutcome;
use crate::store::dead_letters::{DeadLetterQueue, WindowRow};
use crate::store::StoreError;
use crate::telemetry::events;

/// `engine.webhooks[]` in `/api/status`.
#[derive(Debug, Default)]
pub struct WebhookStats {
    /// Requests with a valid signature.
    pub received: AtomicU64,
    /// Requests answered 200 for a new record.
    pub accepted: AtomicU64,
    /// Requests refused with 503 because a sink they reach is full (`block`).
    pub backpressured: AtomicU64,
    /// Requests refused with 401: missing, malformed, stale or wrong signature.
    pub rejected_signature: AtomicU64,
    /// Requests with a valid signature but a body that is not JSON (400).
    pub rejected_body: AtomicU64,
    /// Requests answered 503 because storing failed.
    pub failed: AtomicU64,
    /// Requests answered 200 (`on_receipt`) whose record could not be stored or parked after
    /// the answer: kept in the inbox, they run again at the next start.
    pub kept_in_inbox: AtomicU64,
    /// Identical copies of a request answered 200 before, answered the same again; nothing
    /// was stored for them.
    pub repeated: AtomicU64,
    /// Identical copies of a request still running after the wait, answered 409 +
    /// `Retry-After`.
    pub in_progress: AtomicU64,
}

/// A request whose signature passed: what the replay window knows it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    /// The MAC the connector computed over what is signed.
    pub mac: [u8; 32],
    /// The signed timestamp, Unix seconds.
    pub t: i64,
}

/// A configured webhook.
pub struct WebhookSource {
    pub(super) cfg: WebhookConfig,
    secret: Vec<u8>,
    source: String,
    replay: Mutex<ReplayWindow>,
    /// Its counters.
    pub stats: Arc<WebhookStats>,
}

impl WebhookSource {
    /// A webhook with its secret already loaded.
    pub fn new(cfg: WebhookConfig, secret: Vec<u8>) -> Self {
        Self {
            source: format!("webhook/{}", cfg.name),
            cfg,
            secret,
            replay: Mutex::new(ReplayWindow::default()),
            stats: Arc::default(),
        }
    }

    /// Its name in the path.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// Its name in flows and records: `webhook/<name>`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// When it answers.
    pub fn respond(&self) -> Respond {
        self.cfg.respond
    }

    /// The tolerance, in seconds.
    pub(super) fn tolerance(&self) -> i64 {
        self.cfg.tolerance.as_secs() as i64
    }

    pub(super) fn window(&self) -> std::sync::MutexGuard<'_, ReplayWindow> {
        // Plain data, consistent after every call.
        self.replay.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Entries of the replay window forgotten at its cap before their time.
    pub fn window_forgotten_total(&self) -> u64 {
        self.window().forgotten_total
    }

    /// Checks the signature header against `key` (the `X-Opex-Key` header, when present) and
    /// the raw body at `now` (Unix seconds). Whether the request was seen before is for
    /// [`handle`](Self::handle) to say.
    pub fn verify(
        &self,
        header: Option<&str>,
        key: Option<&str>,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SigError> {
        let result = (|| {
            let header = header.ok_or(SigError::Missing)?;
            let sig = signature::parse(header)?;
            // The MAC the connector computed identifies the request, not a `v1` of the header:
            // a replay with other entries added or reordered computes the same MAC.
            let mac = signature::verify(&sig, &self.secret, key, body, now, self.tolerance())?;
            Ok(Verified { mac, t: sig.t })
        })();
        if result.is_err() {
            self.stats
                .rejected_signature
                .fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Puts back the replay window written before the last stop. Blocking; called at start.
    pub fn restore_window(&self, dlq: &DeadLetterQueue, now: i64) {
        let oldest = now.saturating_sub(self.tolerance());
        let entries = match dlq.window_load(self.name(), oldest) {
            Ok(entries) => entries,
            Err(e) => return events::webhook_window_unreadable(self.name(), &e),
        };
        let mut window = self.window();
        for e in entries {
            if let Ok(answer) = serde_json::from_slice::<Answer>(&e.answer) {
                window.restore(e.t, e.mac, answer, oldest);
            }
        }
        log::debug!(
            "webhook replay window restored: webhook={} entries={}",
            self.name(),
            window.len()
        );
    }

    /// The window row of request `req` answered `answer`, with the rows to delete beside it.
    pub(super) fn window_row(&self, req: Verified, answer: &Answer) -> WindowRow {
        WindowRow {
            hook: self.name().to_string(),
            mac: req.mac,
            t: req.t,
            answer: serde_json::to_vec(answer).unwrap_or_default(),
            gone: self.window().take_gone(),
        }
    }

    /// Runs a new request: parses the body, then runs it as `respond` says. True with the
    /// outcome when its window row was written with it (in the inbox's transaction).
    pub(super) async fn run(
        &self,
        engine: &Arc<Engine>,
        req: Verified,
        key: Option<&str>,
        body: &[u8],
    ) -> (SourceOutcome, bool) {
        let mut record = match Record::from_json(self.source.as_str(), "", body) {
            Ok(r) => r,
            Err(e) => {
                let reason = e.to_string();
                return (SourceOutcome::Malformed { reason }, false);
            }
        };
        record.key = key.map_or_else(|| record.id.clone(), str::to_string);
        let id = record.id.clone();
        let admitted = match self.cfg.respond {
            Respond::OnDone => {
                let settlement = engine.offer(record).await;
                return (SourceOutcome::from_settlement(id, settlement), false);
            }
            Respond::OnReceipt => match engine.admit(&record) {
                Err(settlement) => return (SourceOutcome::from_settlement(id, settlement), false),
                Ok(None) => {
                    engine.unrouted(&record.source);
                    return (SourceOutcome::Accepted { id }, false);
                }
                Ok(Some(a)) => a,
            },
        };
        // Durable before the 200, with the window row: a crash after it is recovered from the
        // inbox, and the sender's copy after the restart is answered the same.
        let row = self.window_row(
            req,
            &Answer {
                result: "accepted".into(),
                id: id.clone(),
                dead_letter_id: None,
            },
        );
        let dlq = Arc::clone(engine.dead_letters());
        let line = record.to_line();
        let put = tokio::task::spawn_blocking(move || dlq.inbox_put(&line, Some(&row)))
            .await
            .unwrap_or_else(|e| Err(StoreError::Io(e.to_string())));
        let inbox_id = match put {
            Ok(i) => i,
            Err(e) => {
                engine.ledger.refused(&record.source);
                let failed = Settlement::Failed {
                    sink: "inbox".into(),
                    reason: e.to_string(),
                };
                return (SourceOutcome::from_settlement(id, failed), false);
            }
        };
        let engine = Arc::clone(engine);
        let stats = Arc::clone(&self.stats);
        tokio::spawn(async move {
            let source = record.source.clone();
            let settlement = engine.run_admitted(record, admitted, Mode::Accepted).await;
            settle_inbox(&engine, &stats, &source, inbox_id, &settlement).await;
        });
        (SourceOutcome::Accepted { id }, true)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::sources::webhook::config::Secret;
    use crate::sources::webhook::signature::sign;

    fn hook() -> WebhookSource {
        let cfg = WebhookConfig {
            name: "pay".into(),
            secret: Secret::Inline("whsec".into()),
            respond: Respond::OnDone,
            tolerance: Duration::from_secs(300),
        };
        WebhookSource::new(cfg, b"whsec".to_vec())
    }

    #[test]
    fn a_replay_with_an_extra_v1_entry_is_the_same_request() {
        let hook = hook();
        let body = br#"{"amount":5}"#;
        let good = sign(b"whsec", 1000, None, body);
        let good_v1 = good.split_once(",v1=").map(|(_, v)| v).unwrap();
        let first = hook.verify(Some(&good), None, body, 1000).unwrap();
        let random = "5a".repeat(32);
        for replay in [
            good.clone(),
            format!("t=1000,v1={random},v1={good_v1}"),
            format!("t=1000,v1={good_v1},v1={random}"),
            format!("v1={good_v1},t=1000"),
            format!("t=1000,v1={good_v1},v1={good_v1}"),
            format!("t=1000,v1={random},v1={}", "00".repeat(32)) + &format!(",v1={good_v1}"),
        ] {
            assert_eq!(
                hook.verify(Some(&replay), None, body, 1001),
                Ok(first),
                "{replay}"
            );
        }
        assert_eq!(hook.stats.rejected_signature.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_key_is_part_of_the_request_and_a_changed_key_is_refused() {
        let hook = hook();
        let body = br#"{"amount":5}"#;
        let keyed = sign(b"whsec", 1000, Some("order-7"), body);
        assert_eq!(
            hook.verify(Some(&keyed), Some("order-8"), body, 1000),
            Err(SigError::Mismatch)
        );
        assert_eq!(
            hook.verify(Some(&keyed), None, body, 1000),
            Err(SigError::Mismatch)
        );
        assert!(hook
            .verify(Some(&keyed), Some("order-7"), body, 1000)
            .is_ok());
        let keyless = sign(b"whsec", 1000, None, body);
        assert!(hook.verify(Some(&keyless), None, body, 1000).is_ok());
    }
}
