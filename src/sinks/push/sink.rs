//! The push sink: the preprocess stage, then a durable (or volatile) append to its queue; the
//! uplink drains the queue upstream.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use super::config::{PushConfig, UplinkConfig};
use super::preprocess::{Output, Preprocess};
use super::uplink::HttpUplink;
use super::volatile::{Inner as Held, VolatileBuffer, DEAD_CAP};
use crate::admission::level::LevelTracker;
use crate::admission::{Gate, Refused, Reservation};
use crate::alerts::{ComponentReport, QueueReport};
use crate::alerts::{QueueKind, QueueReading};
use crate::ledger::Counts;
use crate::record::Record;
use crate::sinks::queue::{
    dead_lettered_now, write_samples, Deliverer, DeliveryStatus, DiskQueue, Drain, QueueStatus,
    PUSH_FAMILIES,
};
use crate::sinks::report::{Report, Samples, SinkFigures};
use crate::sinks::{Delivered, DeliveryError, Running, StartContext};
use crate::store::queue::{record_row, row_bytes, ReplayError, ReplaySummary};
use crate::store::{DeadLetter, QueueCounters, StoreError};

enum Buffer {
    Durable(DiskQueue),
    Volatile {
        buffer: Arc<VolatileBuffer>,
        counters: Arc<QueueCounters>,
        level: Arc<LevelTracker>,
        dead_level: Arc<LevelTracker>,
        delivery: Arc<DeliveryStatus>,
    },
}

/// A push sink: its queue, its uplink, its preprocess stage.
pub struct PushSink {
    name: String,
    buffer: Buffer,
    uplink: Option<UplinkConfig>,
    preprocess: Option<Preprocess>,
}

/// The queue file of push sink `name`: `push_queue.db` for the sink called `push` (the name
/// the delivery document gives it), `push-<name>.db` for the others.
pub fn queue_file(name: &str) -> String {
    if name == "push" {
        "push_queue.db".to_string()
    } else {
        format!("push-{name}.db")
    }
}

impl PushSink {
    /// Opens push sink `name`'s queue under `data_dir`, or its volatile buffer when the queue
    /// is not durable.
    pub fn open(name: &str, cfg: &PushConfig, data_dir: &Path) -> Result<Self, StoreError> {
        let buffer = if cfg.queue.enabled {
            Buffer::Durable(DiskQueue::open(
                &data_dir.join(queue_file(name)),
                name,
                &crate::sinks::queue::DiskQueueConfig {
                    quota_bytes: cfg.queue.quota_bytes,
                    on_full: cfg.queue.on_full,
                },
            )?)
        } else {
            let counters = Arc::new(QueueCounters::default());
            Buffer::Volatile {
                buffer: Arc::new(VolatileBuffer::new(name, Arc::clone(&counters))),
                counters,
                level: Arc::default(),
                dead_level: Arc::default(),
                delivery: Arc::default(),
            }
        };
        Ok(Self {
            name: name.to_string(),
            buffer,
            uplink: cfg.uplink.clone(),
            preprocess: (!cfg.preprocess.is_empty())
                .then(|| Preprocess::new(cfg.preprocess.clone())),
        })
    }

    /// True when its queue is the volatile buffer (memory only).
    pub fn is_volatile(&self) -> bool {
        matches!(self.buffer, Buffer::Volatile { .. })
    }

    /// The admission gate (logical bytes).
    pub fn gate(&self) -> &Arc<Gate> {
        match &self.buffer {
            Buffer::Durable(q) => q.gate(),
            Buffer::Volatile { buffer, .. } => buffer.gate(),
        }
    }

    /// The logical bytes `record` takes in the queue (counted, not written: the line is
    /// written once, by [`deliver`](Self::deliver)).
    pub fn bytes(&self, record: &Record) -> u64 {
        row_bytes(record.line_len())
    }

    /// Asks the gate to admit `bytes`.
    pub fn admit(&self, bytes: u64) -> Result<Reservation, Refused> {
        self.gate().admit(bytes)
    }

    /// Runs the preprocess stage, then stores the line; returns once it is committed
    /// (durable) or buffered (volatile). [`Delivered::Suppressed`]: the stage kept it out by
    /// design, so no copy (and no ledger entry) was written.
    pub async fn deliver(
        &self,
        record: &Record,
        reservation: Reservation,
        tracked: bool,
    ) -> Result<Delivered, DeliveryError> {
        let (stored, commit) = match self.preprocess.as_ref().map(|pre| pre.apply(record)) {
            None => (Cow::Borrowed(record), None),
            Some((Output::Suppressed, commit)) => {
                // Kept out by design: acknowledged, counted; the reservation is freed.
                if let Some(pre) = &self.preprocess {
                    pre.commit(commit);
                }
                return Ok(Delivered::Suppressed);
            }
            Some((Output::Unchanged, commit)) => (Cow::Borrowed(record), Some(commit)),
            Some((Output::Changed(r), commit)) => (Cow::Owned(r), Some(commit)),
        };
        match &self.buffer {
            Buffer::Durable(q) => {
                q.store(&stored, &record.source, tracked, reservation)
                    .await?;
            }
            Buffer::Volatile { buffer, .. } => {
                // Never refuses (evict_oldest): no reservation to grow. Closed only at the stop.
                buffer
                    .append(record_row(
                        &record.source,
                        tracked,
                        &stored,
                        stored.line_len(),
                    ))
                    .map_err(DeliveryError::Store)?;
            }
        }
        if let (Some(pre), Some(c)) = (&self.preprocess, commit) {
            pre.commit(c);
        }
        Ok(Delivered::Stored)
    }

    /// What its uplink drains.
    pub fn drain(&self) -> Arc<dyn Drain> {
        match &self.buffer {
            Buffer::Durable(q) => q.drain(),
            Buffer::Volatile { buffer, .. } => Arc::clone(buffer) as Arc<dyn Drain>,
        }
    }

    fn delivery(&self) -> &Arc<DeliveryStatus> {
        match &self.buffer {
            Buffer::Durable(q) => q.delivery(),
            Buffer::Volatile { delivery, .. } => delivery,
        }
    }

    fn counters(&self) -> &QueueCounters {
        match &self.buffer {
            Buffer::Durable(q) => q.counters(),
            Buffer::Volatile { counters, .. } => counters,
        }
    }

    /// Starts the uplink, when configured: a deliverer thread that stops on the signal.
    pub fn start(&self, ctx: &StartContext) -> std::io::Result<Running> {
        let mut running = Running::default();
        if let Some(cfg) = &self.uplink {
            let deliverer = Deliverer::new(
                &self.name,
                cfg.delivery(),
                self.drain(),
                Box::new(HttpUplink::new(cfg.clone())),
                Arc::clone(self.delivery()),
                ctx.shutdown.clone(),
            );
            running.on_signal.push(deliverer.spawn()?);
        }
        Ok(running)
    }

    /// The queue now.
    pub fn status(&self) -> QueueStatus {
        let suppressed = self
            .preprocess
            .as_ref()
            .map_or(0, |p| p.suppressed_total.load(Ordering::Relaxed));
        match &self.buffer {
            Buffer::Durable(q) => q.status(suppressed),
            Buffer::Volatile {
                buffer,
                counters,
                level,
                ..
            } => QueueStatus::read(buffer.gate(), counters, level, false, suppressed),
        }
    }

    /// The uplink's part of the status (no caller data: errors by class only).
    fn uplink_json(&self) -> Value {
        let c = self.counters();
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut v = json!({
            "enabled": self.uplink.is_some(),
            "sent_total": l(&c.sent_total),
            "dead_lettered_total": l(&c.dead_lettered_total),
            "dead_letter_rows": l(&c.dead_rows),
            "dead_trimmed_total": l(&c.dead_trimmed_total),
            "dead_replayed_total": l(&c.dead_replayed_total),
            "dead_deleted_total": l(&c.dead_deleted_total),
            "last_error": null,
        });
        if self.uplink.is_some() {
            if let (Some(o), Value::Object(d)) = (v.as_object_mut(), self.delivery().to_json()) {
                o.extend(d);
            }
        }
        v
    }

    /// Everything the rest of the program reads of it.
    pub fn report(&self) -> Report {
        let q = self.status();
        let c = self.counters();
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut r = Report {
            accepting: self.accepting(),
            ..Report::default()
        };
        let lost_at_stop = l(&c.lost_at_stop_total);
        r.entry.insert(
            "dropped".into(),
            (q.evicted_total + q.dropped_total + lost_at_stop).into(),
        );
        r.entry.insert("blocked".into(), q.blocked_total.into());
        r.entry.insert("queue_rows".into(), q.rows.into());
        r.entry.insert("durable".into(), q.durable.into());
        r.entry
            .insert("dead_letter_rows".into(), l(&c.dead_rows).into());
        let queue = serde_json::to_value(&q).unwrap_or_default();
        let uplink = self.uplink_json();
        r.status = json!({"queue": queue, "uplink": uplink});
        if self.name == "push" {
            r.documents = vec![
                ("push_queue", queue.clone()),
                ("push_status", queue),
                ("uplink", uplink),
            ];
        }
        let (_, rows, _) = self.gate().usage();
        match &self.buffer {
            Buffer::Durable(disk) => {
                r.queues = disk.queue_reports(&q);
                r.components = disk.components();
                let part = if self.name == "push" {
                    "push_queue".to_string()
                } else {
                    self.name.clone()
                };
                r.ledger_part = Some((part, disk.ledger_part()));
                r.ledger = disk.figures();
            }
            Buffer::Volatile {
                buffer,
                level,
                dead_level,
                delivery,
                ..
            } => {
                let (main, dead) = if self.name == "push" {
                    ("push_buffer".to_string(), "push_dead_letters".to_string())
                } else {
                    (self.name.clone(), format!("{}_dead_letters", self.name))
                };
                r.queues = vec![
                    QueueReport {
                        name: main.clone(),
                        tracker: Arc::clone(level),
                        reading: q.reading(),
                    },
                    QueueReport {
                        name: dead,
                        tracker: Arc::clone(dead_level),
                        reading: QueueReading {
                            kind: QueueKind::Memory,
                            on_full: "evict_oldest",
                            quota: DEAD_CAP as u64,
                            quota_unit: "rows",
                            used: l(&c.dead_rows),
                            blocked_total: 0,
                            evicted_total: l(&c.dead_trimmed_total),
                            dropped_total: 0,
                        },
                    },
                ];
                r.components = vec![ComponentReport {
                    name: format!("{main}.held"),
                    message: "the receiver refuses the requests or every record: rows kept and retried, none dead-lettered; check its address and credentials",
                    counters: vec![("held_ms_total", delivery.held_ms_total())],
                }];
                let part = if self.name == "push" {
                    "push_volatile".to_string()
                } else {
                    self.name.clone()
                };
                r.ledger_part = Some((part, buffer.ledger().snapshot()));
                r.ledger = SinkFigures {
                    accepted: buffer.appended_total(),
                    delivered: l(&c.sent_total),
                    pending: rows,
                    dead_lettered: dead_lettered_now(c),
                    lost: l(&c.evicted_total) + lost_at_stop,
                    unconfirmed: 0,
                    kept: "memory",
                };
            }
        }
        let mut s = Samples::new(&self.name);
        write_samples(
            &PUSH_FAMILIES,
            &q,
            c,
            self.uplink.as_ref().map(|_| &**self.delivery()),
            &mut s,
        );
        let pre = self.preprocess.as_ref();
        let load = |c: Option<&AtomicU64>| c.map_or(0, |c| c.load(Ordering::Relaxed));
        s.counter(
            "opex_connector_push_suppressed_total",
            "Values the preprocess stage kept out of the push queue (deadband, aggregation), by design.",
            load(pre.map(|x| &x.suppressed_total)),
        );
        s.counter(
            "opex_connector_push_aggregates_total",
            "Window results the preprocess stage sent in place of values.",
            load(pre.map(|x| &x.aggregates_total)),
        );
        r.metrics = s.finish();
        r
    }

    /// The uplink's last failure in full, for the admin endpoint.
    pub fn error_detail(&self) -> Value {
        self.delivery().detail_json()
    }

    /// For the durable queue: its `pending` counts compared with its rows.
    pub fn verify(&self) -> Value {
        match &self.buffer {
            Buffer::Durable(q) => q.verify(),
            Buffer::Volatile { .. } => {
                json!({"checked": false, "reason": "the push buffer is volatile"})
            }
        }
    }

    /// Up to `max` dead letters after `after`, and how many there are.
    pub fn dead_letters(
        &self,
        after: Option<u64>,
        max: usize,
    ) -> Result<(Vec<DeadLetter>, u64), StoreError> {
        let rows = match &self.buffer {
            Buffer::Durable(q) => q.dead_letters(after, max)?,
            Buffer::Volatile { buffer, .. } => buffer.dead_letters(after, max),
        };
        Ok((rows, self.counters().dead_rows.load(Ordering::Relaxed)))
    }

    /// Dead letter `id`, when it is kept.
    pub fn get_dead_letter(&self, id: u64) -> Result<Option<DeadLetter>, StoreError> {
        match &self.buffer {
            Buffer::Durable(q) => q.get_dead_letter(id),
            Buffer::Volatile { buffer, .. } => Ok(buffer.get_dead_letter(id)),
        }
    }

    /// Puts dead letter `id` back at the head of the queue; its seq. Blocking.
    pub fn replay_dead_letter(&self, id: u64) -> Result<u64, ReplayError> {
        match &self.buffer {
            Buffer::Durable(q) => q.replay_dead_letter(id),
            Buffer::Volatile { buffer, .. } => buffer.replay_dead_letter(id),
        }
    }

    /// Puts back up to `max` dead letters in seq order. Blocking.
    pub fn replay_dead_letters(&self, max: usize) -> Result<ReplaySummary, StoreError> {
        match &self.buffer {
            Buffer::Durable(q) => q.replay_dead_letters(max),
            Buffer::Volatile { buffer, .. } => Ok(buffer.replay_dead_letters(max)),
        }
    }

    /// Deletes dead letter `id`; false when there was none. Blocking.
    pub fn delete_dead_letter(&self, id: u64) -> Result<bool, StoreError> {
        match &self.buffer {
            Buffer::Durable(q) => q.delete_dead_letter(id),
            Buffer::Volatile { buffer, .. } => Ok(buffer.delete_dead_letter(id)),
        }
    }

    /// True while records can be stored (the durable writer runs; the volatile buffer until
    /// the stop).
    pub fn accepting(&self) -> bool {
        match &self.buffer {
            Buffer::Durable(q) => q.accepting(),
            Buffer::Volatile { buffer, .. } => !buffer.closed(),
        }
    }

    /// Gives up every row its queue holds, counted `discarded` (the sink was removed with
    /// `discard`); the rows given up. After the uplink stopped, before [`Self::close`].
    pub fn discard(&self) -> Result<u64, StoreError> {
        match &self.buffer {
            Buffer::Durable(q) => q.discard(),
            Buffer::Volatile { buffer, .. } => Ok(buffer.discard()),
        }
    }

    /// The rows and dead letters of its volatile buffer, with their part of the ledger, for the
    /// sink's next instance ([`Self::adopt`]); `None` with a durable queue. After the uplink
    /// stopped.
    pub fn take_buffer(&self) -> Option<(Held, BTreeMap<String, Counts>)> {
        match &self.buffer {
            Buffer::Durable(_) => None,
            Buffer::Volatile { buffer, .. } => Some(buffer.take()),
        }
    }

    /// Goes on from a former instance's volatile buffer (see [`Self::take_buffer`]), before
    /// the uplink starts; nothing with a durable queue (see [`Self::is_volatile`]).
    pub fn adopt(&self, held: Held, part: BTreeMap<String, Counts>) {
        if let Buffer::Volatile { buffer, .. } = &self.buffer {
            buffer.adopt(held, part);
        }
    }

    /// At the stop, after the uplink stopped: the durable writer commits what it holds; the
    /// volatile buffer counts and logs the rows it still holds as lost. Idempotent.
    pub fn close(&self) {
        match &self.buffer {
            Buffer::Durable(q) => q.close(),
            Buffer::Volatile { buffer, .. } => buffer.close(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::OnFull;
    use crate::sinks::push::config::PushQueueConfig;
    use crate::sinks::push::volatile::VOLATILE_QUOTA;

    #[test]
    fn a_clean_stop_books_the_rows_left_in_the_volatile_buffer_as_lost_and_the_ledger_balances() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = PushConfig {
            queue: PushQueueConfig {
                enabled: false,
                quota_bytes: VOLATILE_QUOTA,
                on_full: OnFull::EvictOldest,
            },
            uplink: None,
            preprocess: Vec::new(),
        };
        let sink = PushSink::open("push", &cfg, dir.path()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        // Three tracked records and one untracked copy, none delivered.
        for (i, tracked) in [(0, true), (1, true), (2, true), (3, false)] {
            let record = Record::from_value("ingest/a", "k", &json!({"i": i}));
            let reservation = sink.admit(sink.bytes(&record)).unwrap();
            rt.block_on(sink.deliver(&record, reservation, tracked))
                .unwrap();
        }
        assert_eq!(sink.report().ledger.pending, 4);
        sink.close();
        let r = sink.report();
        assert_eq!(
            (r.ledger.pending, r.ledger.lost),
            (0, 4),
            "every copy left is lost"
        );
        assert_eq!(sink.status().rows, 0);
        assert!(!r.accepting, "a closed buffer takes no more records");
        let (_, part) = r.ledger_part.expect("the volatile buffer's ledger part");
        let c = part["ingest/a"];
        assert_eq!((c.pending, c.dropped, c.imbalance()), (0, 3, 0), "{c:?}");
        // Closing again books nothing twice.
        sink.close();
        assert_eq!(sink.report().ledger.lost, 4);
    }
}
