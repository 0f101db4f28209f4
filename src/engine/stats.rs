//! `engine.stats` in `/api/status`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde_json::{json, Value};

/// Counters of the engine.
#[derive(Debug, Default)]
pub struct EngineStats {
    /// Records no flow takes: acknowledged by design.
    pub unrouted: AtomicU64,
    /// Records refused by a full sink under `block`; their sources retry (or, for sources
    /// that cannot, count the loss themselves).
    pub backpressured: AtomicU64,
    /// Samples dropped after the pollers' hold (sources that cannot be re-read).
    pub backpressure_lost: AtomicU64,
    /// Records parked in the pipeline dead-letter queue.
    pub dead_lettered: AtomicU64,
    /// Records a filter node let through no further, by design.
    pub filtered: AtomicU64,
    /// Deliveries a sink failed after admission; their sources were told to retry.
    pub failed: AtomicU64,
    /// Rows held by sinks a reload removed with `discard`: given up by the operator.
    pub discarded: AtomicU64,
    /// Failures per `<flow>/<node>`.
    node_errors: Mutex<BTreeMap<String, u64>>,
}

impl EngineStats {
    /// Counts a failure of one node.
    pub fn node_error(&self, flow: &str, node: &str) {
        let mut m = self.node_errors.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry(format!("{flow}/{node}")).or_default() += 1;
    }

    /// Failures of every node together.
    pub fn node_errors_total(&self) -> u64 {
        let m = self.node_errors.lock().unwrap_or_else(|e| e.into_inner());
        m.values().sum()
    }

    /// The JSON of `engine.stats`.
    pub fn to_json(&self) -> Value {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let errors = self
            .node_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        json!({
            "unrouted": l(&self.unrouted),
            "backpressured": l(&self.backpressured),
            "backpressure_lost": l(&self.backpressure_lost),
            "dead_lettered": l(&self.dead_lettered),
            "filtered": l(&self.filtered),
            "failed": l(&self.failed),
            "discarded": l(&self.discarded),
            "node_errors": errors,
        })
    }
}
