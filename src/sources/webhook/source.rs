//! One signed webhook: signature first, then admission, then the flow, answered by `respond`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::config::{Respond, WebhookConfig};
use super::replay::ReplayWindow;
use super::signature::{self, SigError};
use crate::engine::{Engine, Mode};
use crate::record::{Record, Settlement};
use crate::sources::SourceOutcome;
use crate::telemetry::events;

/// `engine.webhooks[]` in `/api/status`.
#[derive(Debug, Default)]
pub struct WebhookStats {
    /// Requests with a valid signature.
    pub received: AtomicU64,
    /// Requests answered 200.
    pub accepted: AtomicU64,
    /// Requests refused with 503 because a sink they reach is full (`block`).
    pub backpressured: AtomicU64,
    /// Requests refused with 401: missing, malformed, stale, wrong or replayed signature.
    pub rejected_signature: AtomicU64,
    /// Requests with a valid signature but a body that is not JSON (400).
    pub rejected_body: AtomicU64,
    /// Requests answered 503 because storing failed.
    pub failed: AtomicU64,
    /// Requests answered 200 (`on_receipt`) whose record could not be stored or parked after
    /// the answer: kept in the inbox, they run again at the next start.
    pub kept_in_inbox: AtomicU64,
}

/// A configured webhook.
pub struct WebhookSource {
    cfg: WebhookConfig,
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

    fn window(&self) -> std::sync::MutexGuard<'_, ReplayWindow> {
        // Plain data, consistent after every call.
        self.replay.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Checks the signature header against `key` (the `X-Opex-Key` header, when present) and
    /// the raw body at `now` (Unix seconds), and reserves the request in the replay window.
    /// Returns the MAC to [`forget`](Self::handle) if the request is not accepted after all.
    pub fn verify(
        &self,
        header: Option<&str>,
        key: Option<&str>,
        body: &[u8],
        now: i64,
    ) -> Result<[u8; 32], SigError> {
        let result = (|| {
            let header = header.ok_or(SigError::Missing)?;
            let sig = signature::parse(header)?;
            let tolerance = self.cfg.tolerance.as_secs() as i64;
            // The MAC the connector computed identifies the request, not a `v1` of the header:
            // a replay with other entries added or reordered computes the same MAC.
            let mac = signature::verify(&sig, &self.secret, key, body, now, tolerance)?;
            if !self.window().admit(sig.t, mac, now, tolerance) {
                return Err(SigError::Replayed);
            }
            Ok(mac)
        })();
        if result.is_err() {
            self.stats
                .rejected_signature
                .fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Handles a request whose signature passed: parses the body, then runs it as `respond`
    /// says. `mac` is forgotten again unless the answer is a 200.
    pub async fn handle(
        &self,
        engine: &Arc<Engine>,
        mac: [u8; 32],
        key: Option<&str>,
        body: &[u8],
    ) -> SourceOutcome {
        self.stats.received.fetch_add(1, Ordering::Relaxed);
        let outcome = self.run(engine, key, body).await;
        match &outcome {
            SourceOutcome::Stored { .. } | SourceOutcome::Accepted { .. } => {
                self.stats.accepted.fetch_add(1, Ordering::Relaxed);
            }
            other => {
                self.window().forget(&mac);
                match other {
                    SourceOutcome::Retry { .. } => &self.stats.backpressured,
                    SourceOutcome::Malformed { .. } => &self.stats.rejected_body,
                    _ => &self.stats.failed,
                }
                .fetch_add(1, Ordering::Relaxed);
            }
        }
        outcome
    }

    async fn run(&self, engine: &Arc<Engine>, key: Option<&str>, body: &[u8]) -> SourceOutcome {
        let mut record = match Record::from_json(self.source.as_str(), "", body) {
            Ok(r) => r,
            Err(e) => {
                return SourceOutcome::Malformed {
                    reason: e.to_string(),
                }
            }
        };
        record.key = key.map_or_else(|| record.id.clone(), str::to_string);
        let id = record.id.clone();
        match self.cfg.respond {
            Respond::OnDone => SourceOutcome::from_settlement(id, engine.offer(record).await),
            Respond::OnReceipt => {
                let admitted = match engine.admit(&record) {
                    Err(settlement) => return SourceOutcome::from_settlement(id, settlement),
                    Ok(None) => {
                        engine.unrouted(&record.source);
                        return SourceOutcome::Accepted { id };
                    }
                    Ok(Some(a)) => a,
                };
                // Durable before the 200: a crash after it is recovered from the inbox.
                let dlq = Arc::clone(engine.dead_letters());
                let line = record.to_line();
                let inbox_id = match tokio::task::spawn_blocking(move || dlq.inbox_put(&line)).await
                {
                    Ok(Ok(i)) => i,
                    Ok(Err(e)) => {
                        engine.ledger.refused(&record.source);
                        return SourceOutcome::from_settlement(
                            id,
                            Settlement::Failed {
                                sink: "inbox".into(),
                                reason: e.to_string(),
                            },
                        );
                    }
                    Err(e) => {
                        engine.ledger.refused(&record.source);
                        return SourceOutcome::from_settlement(
                            id,
                            Settlement::Failed {
                                sink: "inbox".into(),
                                reason: e.to_string(),
                            },
                        );
                    }
                };
                let engine = Arc::clone(engine);
                let stats = Arc::clone(&self.stats);
                tokio::spawn(async move {
                    let source = record.source.clone();
                    let settlement = engine.run_admitted(record, admitted, Mode::Accepted).await;
                    settle_inbox(&engine, &stats, &source, inbox_id, &settlement).await;
                });
                SourceOutcome::Accepted { id }
            }
        }
    }
}

/// Ends the inbox entry of a request the flow ran for, answered `200` before: removed once
/// its record was stored, dead-lettered or taken by no flow. A settlement that says the record
/// is nowhere (in `Accepted` mode, only a park that failed) keeps the entry for the next start:
/// a duplicate then, never a loss.
async fn settle_inbox(
    engine: &Arc<Engine>,
    stats: &WebhookStats,
    source: &str,
    inbox_id: u64,
    settlement: &Settlement,
) {
    match settlement {
        Settlement::Retry { .. } | Settlement::Failed { .. } => {
            events::webhook_inbox_kept(&stats.kept_in_inbox, source, inbox_id, settlement)
        }
        Settlement::Stored | Settlement::DeadLettered { .. } | Settlement::Unrouted => {
            finish_inbox(engine, inbox_id).await
        }
    }
}

/// Removes a handled request from the inbox.
async fn finish_inbox(engine: &Arc<Engine>, inbox_id: u64) {
    let dlq = Arc::clone(engine.dead_letters());
    match tokio::task::spawn_blocking(move || dlq.inbox_remove(inbox_id)).await {
        Ok(Ok(())) => {}
        // It stays in the inbox and runs again at the next start: a duplicate, not a loss.
        Ok(Err(e)) => {
            log::error!("webhook inbox entry not removed: inbox_id={inbox_id} error=\"{e}\"")
        }
        Err(e) => log::error!("webhook inbox entry not removed: inbox_id={inbox_id} error=\"{e}\""),
    }
}

/// At start: runs every request that was answered 200 (`on_receipt`) but not finished before
/// the process stopped. A record whose sinks are full now is parked in the dead-letter queue as
/// "accepted (200) but not handled": its sender cannot be told to retry any more. A record
/// that can be neither stored nor parked stays in the inbox for the start after.
pub async fn recover_inbox(engine: Arc<Engine>, webhooks: Vec<Arc<WebhookSource>>) {
    let dlq = Arc::clone(engine.dead_letters());
    let entries = match tokio::task::spawn_blocking(move || dlq.inbox_all()).await {
        Ok(Ok(e)) => e,
        Ok(Err(e)) => {
            log::error!("webhook inbox unreadable at start: error=\"{e}\"");
            return;
        }
        Err(_) => return,
    };
    if !entries.is_empty() {
        log::warn!(
            "webhook inbox: resuming {} accepted requests",
            entries.len()
        );
    }
    for (inbox_id, line) in entries {
        let Ok(record) = Record::from_line(&line) else {
            log::error!("webhook inbox entry unreadable, kept: inbox_id={inbox_id}");
            continue;
        };
        let source = record.source.clone();
        let settlement = match engine.admit(&record) {
            Ok(admitted) => {
                engine
                    .run_admitted(record, admitted.unwrap_or_default(), Mode::Accepted)
                    .await
            }
            Err(refused) => engine.park_unhandled(record, &refused).await,
        };
        // A webhook removed from the config since has no counters left.
        let stats = webhooks
            .iter()
            .find(|w| w.source() == source)
            .map_or_else(Arc::default, |w| Arc::clone(&w.stats));
        settle_inbox(&engine, &stats, &source, inbox_id, &settlement).await;
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
    fn a_replay_with_an_extra_v1_entry_is_refused() {
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
                Err(SigError::Replayed),
                "{replay}"
            );
        }
        // Forgotten (the request was not accepted after all), the same MAC passes once more.
        hook.window().forget(&first);
        let again = format!("t=1000,v1={random},v1={good_v1}");
        assert_eq!(hook.verify(Some(&again), None, body, 1002), Ok(first));
        assert_eq!(hook.stats.rejected_signature.load(Ordering::Relaxed), 6);
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
