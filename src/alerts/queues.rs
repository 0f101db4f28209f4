//! What the hub watches in a running connector: every bounded queue, and the loss counters
//! the spec says are alerted.
//!
//! The sinks report their own (see [`crate::sinks::report`]): for the push sink `push_queue`
//! (or `push_buffer`, the volatile 16 MiB buffer), `push_writer` (its writer channel, 8192),
//! `push_dead_letters`, and the components `push_queue.write_errors` and `push_queue.held`
//! (its receiver refuses the requests); for any other sink with a queue of its own, the same
//! under its name (`<name>`, `<name>_writer`, `<name>_dead_letters`); `storage` (bytes, and
//! `storage.write_errors`); a database sink's memory backlog (rows); a NATS or MQTT sink's
//! channel (messages; `<name>.failed`).
//!
//! The engine's own: the pipeline's `dead_letters` (rows, `dead_letters.max_rows`), and the
//! components `dead_letters.trimmed_open` (open entries deleted at the cap: records lost),
//! `engine.backpressure_lost` (poll samples dropped after the hold), `engine.discarded` (rows
//! of a sink a reload removed with `discard`) and `engine.node_errors` (flow node failures).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::hub::{Component, Hub, Queue, QueueKind, QueueReading, Watched};
use crate::engine::Engine;

/// Watches every bounded queue and alerted loss counter of a connector.
pub fn watch(hub: &mut Hub, engine: &Arc<Engine>) {
    let e = Arc::clone(engine);
    hub.watch(move || {
        let mut w = Watched::default();
        for sink in e.sinks().iter() {
            let r = sink.report();
            w.queues.extend(r.queues);
            w.components.extend(r.components);
        }
        w
    });
    let e = Arc::clone(engine);
    hub.add_queue(Queue::new("dead_letters", Arc::default(), move || {
        let dlq = e.dead_letters();
        let c = dlq.counts();
        QueueReading {
            kind: QueueKind::Disk,
            on_full: "evict_oldest",
            quota: dlq.max_rows(),
            quota_unit: "rows",
            used: c.open + c.resolved,
            blocked_total: 0,
            evicted_total: c.trimmed_total,
            dropped_total: 0,
        }
    }));
    let e = Arc::clone(engine);
    hub.add_component(Component::new(
        "dead_letters.trimmed_open",
        "open dead letters deleted at dead_letters.max_rows before anyone replayed them: records lost; replay or resolve the queue, or raise the cap",
        move || {
            vec![(
                "trimmed_open_total",
                e.dead_letters().counts().trimmed_open_total,
            )]
        },
    ));
    let e = Arc::clone(engine);
    hub.add_component(Component::new(
        "engine.backpressure_lost",
        "poll samples dropped after the hold: a sink they reach is full under block",
        move || {
            vec![(
                "backpressure_lost",
                e.stats.backpressure_lost.load(Ordering::Relaxed),
            )]
        },
    ));
    let e = Arc::clone(engine);
    hub.add_component(Component::new(
        "engine.discarded",
        "rows of a sink removed by a reload with discard=1 were given up: records lost on the operator's word",
        move || vec![("discarded", e.stats.discarded.load(Ordering::Relaxed))],
    ));
    let e = Arc::clone(engine);
    hub.add_component(Component::new(
        "engine.node_errors",
        "flow nodes failed: records went to the error wire or the dead-letter queue",
        move || vec![("node_errors_total", e.stats.node_errors_total())],
    ));
}
