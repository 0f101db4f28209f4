//! The engine: every source offers its records here and gets a [`Settlement`] back.
//!
//! A record's life (DESIGN.md):
//! 1. **Admission, before any node runs**: every sink reachable from the record's source node
//!    (precomputed by the [`Plan`]; a subflow on the way makes it every sink of the flow) is
//!    asked to admit it. A refusal under `block` returns `Retry { sink, after }` and nothing else
//!    happens, so the source can retry without any side effect repeating.
//! 2. The record runs through the nodes. A node failure or an output port with no wire sends
//!    it to the node's `error` wire when one is wired, else to the pipeline dead-letter queue.
//! 3. Each sink node hands the record to its sink, which answers only once the record is stored.
//! 4. The settlement goes back to the source, which speaks its own protocol.
//!
//! Without `flows:` every source is wired straight to the push sink.
//!
//! [`Plan`]: crate::flow::Plan
//! [`Settlement`]: crate::record::Settlement

mod batch;
mod offer;
mod stats;

pub use offer::{Admitted, Engine, Mode, Routes};
pub use stats::EngineStats;

/// An engine for the unit tests: one durable `push` sink in `dir` (a 1 MiB queue that blocks
/// when full) and a dead-letter queue beside it, `plan` its routes.
#[cfg(test)]
pub(crate) fn test_engine(dir: &std::path::Path, plan: crate::flow::Plan) -> Engine {
    use crate::admission::OnFull;
    use crate::sinks::push::config::{PushConfig, PushQueueConfig};
    use crate::sinks::{Sink, SinkConfig, SinkSpec, Sinks};
    let cfg = SinkConfig {
        name: "push".into(),
        spec: SinkSpec::Push(PushConfig {
            queue: PushQueueConfig {
                enabled: true,
                quota_bytes: 1 << 20,
                on_full: OnFull::Block,
            },
            uplink: None,
            preprocess: Vec::new(),
        }),
    };
    let push = Sink::build(&cfg, dir).expect("push sink");
    let dlq = std::sync::Arc::new(
        crate::store::dead_letters::DeadLetterQueue::open(dir, 100).expect("dead letters"),
    );
    Engine::new(plan, Sinks::new(vec![push]), dlq)
}
