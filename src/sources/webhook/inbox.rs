//! The inbox of `respond: on_receipt`: a request answered `200` is in `dead_letters.db`
//! until its flow has run. What is left at start was answered but not handled, and runs then.

use std::sync::Arc;

use super::source::{WebhookSource, WebhookStats};
use crate::engine::{Engine, Mode};
use crate::record::{Record, Settlement};
use crate::telemetry::events;

/// Ends the inbox entry of a request the flow ran for, answered `200` before: removed once
/// its record was stored, dead-lettered or taken by no flow. A settlement that says the record
/// is nowhere (in `Accepted` mode, only a park that failed) keeps the entry for the next start:
/// a duplicate then, never a loss.
pub(super) async fn settle_inbox(
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

/// The requests answered 200 (`on_receipt`) but not finished before the process stopped.
/// Read before the HTTP server takes requests: a request accepted after it is run by its own
/// handler, never a second time by [`recover_inbox`].
pub async fn unfinished_inbox(engine: &Arc<Engine>) -> Vec<(u64, Vec<u8>)> {
    let dlq = Arc::clone(engine.dead_letters());
    match tokio::task::spawn_blocking(move || dlq.inbox_all()).await {
        Ok(Ok(entries)) => entries,
        Ok(Err(e)) => {
            log::error!("webhook inbox unreadable at start: error=\"{e}\"");
            Vec::new()
        }
        Err(_) => Vec::new(),
    }
}

/// At start: runs the requests [`unfinished_inbox`] found. A record whose sinks are full now
/// is parked in the dead-letter queue as "accepted (200) but not handled": its sender cannot
/// be told to retry any more. A record that can be neither stored nor parked stays in the
/// inbox for the start after.
pub async fn recover_inbox(
    engine: Arc<Engine>,
    webhooks: Vec<Arc<WebhookSource>>,
    entries: Vec<(u64, Vec<u8>)>,
) {
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
            Ok(Some(admitted)) => engine.run_admitted(record, admitted, Mode::Accepted).await,
            Ok(None) => engine.unrouted(&record.source),
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
