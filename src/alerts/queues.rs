//! What the hub watches in a running connector: every bounded queue, and the loss counters
//! the spec says are alerted.
//!
//! | queue | kind | quota | full when |
//! | --- | --- | --- | --- |
//! | `push_queue` (or `push_buffer`, the volatile 16 MiB buffer without `push_queue`) | disk (memory) | bytes | at the quota, or a record refused (`block`) or evicted since the last check |
//! | `push_writer` | channel, 8192 | messages | a record refused because the channel was full (`dropped_total`) |
//! | `storage` | disk | bytes | as the push queue; its writer channel's drops count too |
//! | `clickhouse`, `postgres` | memory backlog | rows | at the bound, or a row refused or dropped |
//! | `nats`, `mqtt` | channel, 4096 / 1024 | messages | a record refused at admission (`blocked`, also while disconnected) or delivery (`dropped`) |
//! | `dead_letters` | disk | rows (`dead_letters.max_rows`) | at the cap, or an entry trimmed |
//! | `push_dead_letters` | disk (memory) | rows (50000; 1000 volatile) | at the cap, or a row trimmed |
//!
//! Components, `critical` while their counter grows: `engine.backpressure_lost` (poll samples
//! dropped after the hold), `push_queue.write_errors`, `storage.write_errors`, `nats.failed`
//! (publishes that failed after their retries), `engine.node_errors` (flow node failures).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::hub::{Component, Hub, Queue, QueueKind, QueueReading};
use crate::admission::level::LevelTracker;
use crate::brokers::mqtt::CLIENT_QUEUE;
use crate::engine::{Engine, SinkHandle};
use crate::sinks::mqtt::MqttSink;
use crate::sinks::nats::NatsSink;
use crate::sinks::push::PushSink;
use crate::sinks::storage::StorageSink;
use crate::store::push_queue::WRITER_CHANNEL;

fn l(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// Watches every bounded queue and alerted loss counter of a connector.
pub fn watch(
    hub: &mut Hub,
    push: &Arc<PushSink>,
    storage: Option<&Arc<StorageSink>>,
    engine: &Arc<Engine>,
    nats_sink: Option<&Arc<NatsSink>>,
    mqtt_sink: Option<&Arc<MqttSink>>,
) {
    let durable = push.durable();
    let p = Arc::clone(push);
    let name = if durable { "push_queue" } else { "push_buffer" };
    hub.add_queue(Queue::new(name, Arc::clone(push.level()), move || {
        let s = p.status();
        QueueReading {
            kind: if s.durable {
                QueueKind::Disk
            } else {
                QueueKind::Memory
            },
            on_full: s.on_full,
            quota: s.quota_bytes,
            quota_unit: "bytes",
            used: s.used_bytes,
            // A failed write (a full disk) refused its records, as a full `block` queue does.
            blocked_total: s.blocked_total + s.write_errors_total,
            evicted_total: s.evicted_total,
            dropped_total: 0,
        }
    }));
    if durable {
        let p = Arc::clone(push);
        hub.add_queue(Queue::new("push_writer", Arc::default(), move || {
            let c = p.counters();
            QueueReading {
                kind: QueueKind::Channel,
                on_full: "block",
                quota: WRITER_CHANNEL as u64,
                quota_unit: "messages",
                used: l(&c.writer_queued),
                blocked_total: 0,
                evicted_total: 0,
                dropped_total: l(&c.dropped_total),
            }
        }));
    }
    if let Some(st) = storage {
        let s = Arc::clone(st);
        hub.add_queue(Queue::new("storage", Arc::clone(st.level()), move || {
            let s = s.status();
            QueueReading {
                kind: QueueKind::Disk,
                on_full: s.on_full,
                quota: s.quota_bytes,
                quota_unit: "bytes",
                used: s.used_bytes,
                blocked_total: s.blocked_total,
                evicted_total: s.evicted_total,
                dropped_total: s.dropped_total,
            }
        }));
    }
    for sink in engine.sinks().iter() {
        let (tracker, read): (Arc<LevelTracker>, Box<dyn Fn() -> _ + Send + Sync>) = match sink {
            SinkHandle::ClickHouse(c) => {
                let c2 = Arc::clone(c);
                (Arc::clone(c.level()), Box::new(move || c2.status()))
            }
            SinkHandle::Postgres(pg) => {
                let p2 = Arc::clone(pg);
                (Arc::clone(pg.level()), Box::new(move || p2.status()))
            }
            _ => continue,
        };
        hub.add_queue(Queue::new(sink.name(), tracker, move || {
            let s = read();
            QueueReading {
                kind: QueueKind::Memory,
                on_full: s.on_full,
                quota: s.max_backlog_rows,
                quota_unit: "rows",
                used: s.backlog_rows,
                blocked_total: s.blocked_total,
                evicted_total: 0,
                dropped_total: s.dropped_total,
            }
        }));
    }
    if let Some(n) = nats_sink {
        let n = Arc::clone(n);
        hub.add_queue(Queue::new("nats", Arc::default(), move || QueueReading {
            kind: QueueKind::Channel,
            on_full: "block",
            quota: crate::sinks::nats::config::CHANNEL as u64,
            quota_unit: "messages",
            used: n.queue_depth() as u64,
            blocked_total: l(&n.stats.blocked),
            evicted_total: 0,
            dropped_total: l(&n.stats.dropped),
        }));
    }
    if let Some(m) = mqtt_sink {
        let m = Arc::clone(m);
        hub.add_queue(Queue::new("mqtt", Arc::default(), move || QueueReading {
            kind: QueueKind::Channel,
            on_full: "block",
            quota: CLIENT_QUEUE as u64,
            quota_unit: "messages",
            used: m.queue_depth(),
            blocked_total: l(&m.stats.blocked),
            evicted_total: 0,
            dropped_total: l(&m.stats.dropped),
        }));
    }
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
    let p = Arc::clone(push);
    hub.add_queue(Queue::new("push_dead_letters", Arc::default(), move || {
        let c = p.counters();
        QueueReading {
            kind: if p.durable() {
                QueueKind::Disk
            } else {
                QueueKind::Memory
            },
            on_full: "evict_oldest",
            quota: p.dead_letter_cap(),
            quota_unit: "rows",
            used: l(&c.dead_rows),
            blocked_total: 0,
            evicted_total: l(&c.dead_trimmed_total),
            dropped_total: 0,
        }
    }));
    components(hub, push, storage, engine, nats_sink);
}

fn components(
    hub: &mut Hub,
    push: &Arc<PushSink>,
    storage: Option<&Arc<StorageSink>>,
    engine: &Arc<Engine>,
    nats_sink: Option<&Arc<NatsSink>>,
) {
    let e = Arc::clone(engine);
    hub.add_component(Component::new(
        "engine.backpressure_lost",
        "poll samples dropped after the hold: a sink they reach is full under block",
        move || vec![("backpressure_lost", l(&e.stats.backpressure_lost))],
    ));
    let e = Arc::clone(engine);
    hub.add_component(Component::new(
        "engine.node_errors",
        "flow nodes failed: records went to the error wire or the dead-letter queue",
        move || vec![("node_errors_total", e.stats.node_errors_total())],
    ));
    let p = Arc::clone(push);
    hub.add_component(Component::new(
        "push_queue.write_errors",
        "push queue writes failed: their callers got the error",
        move || vec![("write_errors_total", l(&p.counters().write_errors_total))],
    ));
    if let Some(st) = storage {
        let s = Arc::clone(st);
        hub.add_component(Component::new(
            "storage.write_errors",
            "storage writes failed: their callers got the error",
            move || vec![("write_errors_total", l(&s.counters().write_errors_total))],
        ));
    }
    if let Some(n) = nats_sink {
        let n = Arc::clone(n);
        hub.add_component(Component::new(
            "nats.failed",
            "NATS publishes failed after their retries: sources told to retry",
            move || vec![("failed", l(&n.stats.failed))],
        ));
    }
}
