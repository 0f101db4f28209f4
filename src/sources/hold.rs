//! Hold-then-drop, for sources that cannot be re-read (polled devices).
//!
//! A poll's sample is offered to the engine. While a sink it reaches refuses (`block` at its
//! quota) or fails, the poll task is held, offering the sample again every
//! [`RETRY_EVERY`], for up to the hold (10 s by default, the spec's figure). Then the sample
//! is dropped, counted in `engine.stats.backpressure_lost`, and logged as an alert. The sample
//! keeps its source timestamp throughout.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::engine::Engine;
use crate::record::{Record, Settlement};

/// How long a poller is held by default before a sample is dropped.
pub const DEFAULT_HOLD: Duration = Duration::from_secs(10);
/// How often a held sample is offered again.
pub const RETRY_EVERY: Duration = Duration::from_millis(100);

/// How a held offer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// Stored by every sink it reached (or parked in the dead-letter queue, or unrouted).
    Stored,
    /// Still refused when the hold ran out: dropped and counted.
    Lost {
        /// The last refusing or failing sink.
        sink: String,
    },
}

/// Offers `record`, holding the caller up to `hold` while a sink refuses it.
pub async fn offer_with_hold(engine: &Engine, record: Record, hold: Duration) -> Held {
    let started = tokio::time::Instant::now();
    loop {
        let sink = match engine.offer(record.clone()).await {
            Settlement::Stored | Settlement::Unrouted | Settlement::DeadLettered { .. } => {
                return Held::Stored
            }
            Settlement::Retry { sink, .. } | Settlement::Failed { sink, .. } => sink,
        };
        if started.elapsed() + RETRY_EVERY > hold {
            let total = engine
                .stats
                .backpressure_lost
                .fetch_add(1, Ordering::Relaxed)
                + 1;
            engine
                .ledger
                .lost(&record.source, crate::ledger::Cause::BackpressureLost);
            log::error!(
                "alert: sample dropped after the poller's hold: source={} key={} sink={sink} held_ms={} backpressure_lost={total}",
                record.source,
                record.key,
                started.elapsed().as_millis()
            );
            return Held::Lost { sink };
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::flow::Plan;
    use crate::sinks::queue::Drain;

    fn engine(dir: &std::path::Path) -> (Engine, Arc<dyn Drain>) {
        let plan = Plan::direct(&["modbus/press".to_string()], "push");
        let engine = crate::engine::test_engine(dir, plan);
        let drain = engine.sinks().get("push").and_then(|s| s.drain()).unwrap();
        (engine, drain)
    }

    fn sample(bytes: usize) -> Record {
        let v = serde_json::json!({"temp": 21.5, "pad": "x".repeat(bytes)});
        Record::from_value("modbus/press", "temp", &v)
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_sample_is_held_for_the_hold_then_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, _push) = engine(dir.path());
        // One record larger than the whole quota fills the empty queue.
        assert_eq!(
            offer_with_hold(&engine, sample(2 << 20), DEFAULT_HOLD).await,
            Held::Stored
        );
        let started = tokio::time::Instant::now();
        let held = offer_with_hold(&engine, sample(10), DEFAULT_HOLD).await;
        assert_eq!(
            held,
            Held::Lost {
                sink: "push".into()
            }
        );
        let waited = started.elapsed();
        assert!(
            waited >= DEFAULT_HOLD - RETRY_EVERY && waited <= DEFAULT_HOLD,
            "{waited:?}"
        );
        assert_eq!(engine.stats.backpressure_lost.load(Ordering::Relaxed), 1);
        let c = engine.ledger.snapshot()["modbus/press"];
        assert_eq!((c.acked, c.backpressure_lost), (1, 1), "{c:?}");
        assert!(
            c.refused > 1,
            "every offer during the hold was refused: {c:?}"
        );
        assert_eq!(c.imbalance(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_sample_is_stored_once_the_queue_drains_within_the_hold() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, drain) = engine(dir.path());
        assert_eq!(
            offer_with_hold(&engine, sample(2 << 20), DEFAULT_HOLD).await,
            Held::Stored
        );
        let uplink = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            // The uplink delivers what it read, and deletes exactly those rows.
            tokio::task::spawn_blocking(move || {
                let seqs: Vec<u64> = drain.peek(usize::MAX)?.iter().map(|r| r.seq).collect();
                drain.remove_delivered(&seqs)
            })
            .await
            .unwrap()
            .unwrap();
        });
        assert_eq!(
            offer_with_hold(&engine, sample(10), DEFAULT_HOLD).await,
            Held::Stored
        );
        uplink.await.unwrap();
        assert_eq!(engine.stats.backpressure_lost.load(Ordering::Relaxed), 0);
    }
}
