//! The `mqtt` sink: records are published through the client's queue ([`CLIENT_QUEUE`], 1024)
//! by its event loop, and a QoS 1 record is settled only once the broker acknowledged it
//! (PUBACK, matched to its publish by [`super::acks`]). While the broker is not connected, or
//! the queue is full, the source is told to retry: at admission (before any node runs) counted
//! `blocked`, at delivery counted `dropped`. A PUBACK that does not come within `ack_timeout_secs`, or a broker that lost the
//! session, fails the record: its source retries (the record may arrive twice).
//!
//! A record whose PUBLISH would be over the client's packet cap
//! ([`MAX_PACKET_BYTES`]) is never handed to the client: rumqttc would write it down as in
//! flight, fail to encode it, drop the connection and send it first again at every reconnect,
//! and nothing behind it would go out. It is refused for good (counted `too_large`), and goes to
//! the dead letters with its size in the reason.
//!
//! With QoS 0 nothing confirms a publish: such records settle once written and are counted
//! `unconfirmed`. With `queue: disk` a durable queue waits in front of the broker, so records
//! survive a crash and an outage longer than the client's queue.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rumqttc::{AsyncClient, Event, EventLoop, Incoming, Outgoing, QoS};
use serde_json::{json, Value};

use super::acks::{Ack, Acks};
use super::config::MqttSinkConfig;
use crate::admission::{Gate, OnFull, Refused};
use crate::alerts::ComponentReport;
use crate::brokers::mqtt::{
    options, publish_size, reconnect_delay, CLIENT_QUEUE, MAX_PACKET_BYTES,
};
use crate::flow::path::Fields;
use crate::flow::Confine;
use crate::record::Record;
use crate::shutdown::Shutdown;
use crate::sinks::queue::{judge_each, records_of, DeliveryConfig, Destination, Failure, Verdict};
use crate::sinks::report::{Report, Samples, SinkFigures};
use crate::sinks::{Delivered, DeliveryError, Running, StartContext};
use crate::store::Row;
use crate::telemetry::events;

/// How long a refused source is told to wait.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long a stop waits for the session's DISCONNECT to be written.
const GOODBYE: Duration = Duration::from_secs(1);

/// Counters of an `mqtt` sink.
#[derive(Debug, Default)]
pub struct MqttSinkStats {
    /// Records queued for publishing.
    pub queued: AtomicU64,
    /// Publishes the event loop wrote (retransmissions included).
    pub sent: AtomicU64,
    /// QoS 1 publishes the broker acknowledged.
    pub acked: AtomicU64,
    /// QoS 0 publishes written with nothing to confirm them.
    pub unconfirmed: AtomicU64,
    /// Records refused at delivery because the queue was full (the source retries).
    pub dropped: AtomicU64,
    /// Records refused at admission because the queue was full (the source retries).
    pub blocked: AtomicU64,
    /// Records whose publish was not confirmed (timeout, lost session, bad topic): the
    /// source was told to retry, or the record was parked.
    pub failed: AtomicU64,
    /// Records refused for good because their PUBLISH would be over the client's packet cap
    /// (dead-lettered with the reason).
    pub too_large: AtomicU64,
    /// True while connected.
    pub connected: AtomicBool,
    /// The last error, in full (admin only).
    pub last_error: Mutex<Option<String>>,
}

/// An `mqtt` sink.
pub struct MqttSink {
    name: String,
    cfg: MqttSinkConfig,
    client: AsyncClient,
    eventloop: Mutex<Option<EventLoop>>,
    acks: Mutex<Acks>,
    gate: Arc<Gate>,
    /// Its counters.
    pub stats: MqttSinkStats,
}

impl MqttSink {
    /// Sink `name` from its config; [`Self::start`] drives its event loop.
    pub fn new(name: &str, cfg: MqttSinkConfig) -> Result<Self, String> {
        let opts = options(&cfg.connection, &format!("sink-{name}"))?;
        let (client, eventloop) = AsyncClient::new(opts, CLIENT_QUEUE);
        Ok(Self {
            name: name.to_string(),
            cfg,
            client,
            eventloop: Mutex::new(Some(eventloop)),
            acks: Mutex::default(),
            gate: Arc::new(Gate::new(OnFull::EvictOldest, u64::MAX, 0, 0, 0)),
            stats: MqttSinkStats::default(),
        })
    }

    fn acks(&self) -> MutexGuard<'_, Acks> {
        // The waiters are plain data, consistent after every call.
        self.acks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its admission gate (never refuses; the queue does).
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// The logical bytes of `record` (its line).
    pub fn bytes(&self, record: &Record) -> u64 {
        record.line_len() as u64
    }

    /// Publishes queued and not yet settled.
    pub fn queue_depth(&self) -> u64 {
        self.acks().depth() as u64
    }

    /// Refuses, before any node runs, while the broker is not connected (nothing could
    /// confirm the record) or the queue is full.
    pub fn admit(&self) -> Result<(), Refused> {
        if !self.stats.connected.load(Ordering::Relaxed)
            || self.queue_depth() >= CLIENT_QUEUE as u64
        {
            self.stats.blocked.fetch_add(1, Ordering::Relaxed);
            return Err(Refused { after: RETRY_AFTER });
        }
        Ok(())
    }

    /// The topic of `record`: a value spliced into the template (a caller's `X-Opex-Key`, a
    /// payload field) that would add a level or a wildcard is refused, so a caller cannot
    /// publish outside the topics the template names.
    fn topic(&self, record: &Record) -> Result<String, String> {
        let topic = self
            .cfg
            .topic
            .render_confined(&Fields::read(record), Confine::MqttTopic)?;
        if topic.is_empty() {
            return Err("the topic is empty".into());
        }
        Ok(topic)
    }

    fn qos(&self) -> QoS {
        if self.cfg.qos == 0 {
            QoS::AtMostOnce
        } else {
            QoS::AtLeastOnce
        }
    }

    /// True when the PUBLISH of `record` would be over the client's packet cap.
    fn over_the_cap(&self, record: &Record) -> bool {
        self.topic(record).is_ok_and(|topic| {
            publish_size(&topic, self.qos(), record.line_len()) > MAX_PACKET_BYTES
        })
    }

    /// Publishes `record` and waits for the broker's PUBACK (QoS 1) or the write (QoS 0).
    pub async fn deliver(&self, record: &Record) -> Result<Delivered, DeliveryError> {
        let topic = match self.topic(record) {
            Ok(t) => t,
            Err(e) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                return Err(DeliveryError::Rejected(e));
            }
        };
        let qos = self.qos();
        let line = record.to_line();
        let size = publish_size(&topic, qos, line.len());
        if size > MAX_PACKET_BYTES {
            events::sink_record_too_large(
                &self.name,
                &self.stats.too_large,
                &record.id,
                size,
                MAX_PACKET_BYTES,
            );
            return Err(DeliveryError::Rejected(format!(
                "too large: its PUBLISH would be {size} bytes, over the MQTT packet cap of {MAX_PACKET_BYTES} bytes"
            )));
        }
        let answer = {
            // Queued under the lock, so the waiters are in the order of the publishes.
            let mut acks = self.acks();
            if acks.depth() >= CLIENT_QUEUE {
                drop(acks);
                return Err(self.queue_full());
            }
            let (id, answer) = acks.add();
            if self
                .client
                .try_publish(topic, qos, self.cfg.retain, line)
                .is_err()
            {
                acks.cancel(id);
                drop(acks);
                return Err(self.queue_full());
            }
            answer
        };
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        let failed = |why: String| {
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
            self.set_error(&why);
            DeliveryError::Publish(why)
        };
        match tokio::time::timeout(self.cfg.ack_timeout, answer).await {
            Ok(Ok(Ok(Ack::Confirmed))) => Ok(Delivered::Stored),
            Ok(Ok(Ok(Ack::Unconfirmed))) => Ok(Delivered::Unconfirmed),
            Ok(Ok(Err(why))) => Err(failed(why)),
            Ok(Err(_)) => Err(failed("the mqtt sink stopped".into())),
            Err(_) => Err(failed(format!(
                "no PUBACK within {}s",
                self.cfg.ack_timeout.as_secs()
            ))),
        }
    }

    fn queue_full(&self) -> DeliveryError {
        let total = self.stats.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if total.is_power_of_two() {
            log::warn!(
                "mqtt sink queue full, record refused: sink={} dropped_total={total}",
                self.name
            );
        }
        DeliveryError::Refused(Refused { after: RETRY_AFTER })
    }

    fn set_error(&self, e: &str) {
        *self
            .stats
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
    }

    fn last_error_class(&self) -> Option<String> {
        self.stats
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|e| Failure::from_detail(e.clone()).class)
    }

    /// Starts the event loop on the runtime; it ends on the signal, failing what waits.
    pub fn start(self: &Arc<Self>, ctx: &StartContext) -> std::io::Result<Running> {
        let mut running = Running::default();
        let sink = Arc::clone(self);
        running
            .tasks
            .push(ctx.runtime.spawn(sink.run(ctx.shutdown.clone())));
        Ok(running)
    }

    /// Batch size and back-off of the deliverer of its `queue: disk`: a batch fits the
    /// client's queue.
    pub fn delivery(&self) -> DeliveryConfig {
        DeliveryConfig {
            batch_rows: 256,
            max_rows: 256,
            retry_initial: Duration::from_millis(200),
            retry_max: self.cfg.connection.reconnect_max,
            linger: Duration::ZERO,
        }
    }

    /// The broker as the destination of the sink's `queue: disk`.
    pub fn destination(self: &Arc<Self>, ctx: &StartContext) -> Box<dyn Destination> {
        Box::new(Publisher {
            sink: Arc::clone(self),
            runtime: ctx.runtime.clone(),
        })
    }

    /// Everything the rest of the program reads of it (a disk queue's part comes from the
    /// queue).
    pub fn report(&self) -> Report {
        let s = &self.stats;
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let depth = self.queue_depth();
        let mut r = Report {
            accepting: true,
            ..Report::default()
        };
        let entry = json!({
            "dropped": l(&s.dropped),
            "blocked": l(&s.blocked),
            "failed": l(&s.failed),
            "too_large": l(&s.too_large),
            "queued": l(&s.queued),
            "sent": l(&s.sent),
            "acked": l(&s.acked),
            "unconfirmed": l(&s.unconfirmed),
            "qos": self.cfg.qos,
            "queue_depth": depth,
            "queue_capacity": CLIENT_QUEUE,
            "connected": s.connected.load(Ordering::Relaxed),
            "durable": false,
            "last_error": self.last_error_class(),
        });
        if let Value::Object(m) = &entry {
            r.entry = m.clone();
        }
        r.status = entry;
        r.queues = vec![crate::alerts::QueueReport {
            name: self.name.clone(),
            tracker: Arc::default(),
            reading: crate::alerts::QueueReading {
                kind: crate::alerts::QueueKind::Channel,
                on_full: "block",
                quota: CLIENT_QUEUE as u64,
                quota_unit: "messages",
                used: depth,
                blocked_total: l(&s.blocked),
                evicted_total: 0,
                dropped_total: l(&s.dropped),
            },
        }];
        r.components = vec![
            ComponentReport {
                name: format!("{}.failed", self.name),
                message:
                    "MQTT publishes not confirmed (timeout, lost session): sources told to retry",
                counters: vec![("failed", l(&s.failed))],
            },
            ComponentReport {
                name: format!("{}.too_large", self.name),
                message: "records over the MQTT packet cap refused for good: dead-lettered",
                counters: vec![("too_large", l(&s.too_large))],
            },
        ];
        let (acked, unconfirmed) = (l(&s.acked), l(&s.unconfirmed));
        r.ledger = SinkFigures {
            accepted: acked + unconfirmed + depth,
            delivered: acked,
            pending: depth,
            unconfirmed,
            kept: "memory",
            ..SinkFigures::default()
        };
        let mut m = Samples::new(&self.name);
        m.memory_queue(l(&s.dropped), l(&s.blocked), Some(l(&s.failed)), depth);
        m.counter(
            "opex_connector_sink_unconfirmed_total",
            "Records an MQTT sink published with QoS 0: written, never confirmed.",
            unconfirmed,
        );
        m.too_large(l(&s.too_large));
        r.metrics = m.finish();
        r
    }

    /// The last error in full, for the admin endpoint.
    pub fn error_detail(&self) -> Value {
        match &*self
            .stats
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
        {
            Some(e) => json!({"class": Failure::from_detail(e.clone()).class, "detail": e}),
            None => Value::Null,
        }
    }

    /// Drives the event loop until shutdown, reconnecting with back-off.
    async fn run(self: Arc<Self>, shutdown: Shutdown) {
        let Some(mut eventloop) = self
            .eventloop
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return;
        };
        let mut failures = 0u32;
        loop {
            let event = tokio::select! {
                e = eventloop.poll() => e,
                _ = shutdown.wait() => break,
            };
            match event {
                Ok(event) => {
                    if matches!(event, Event::Incoming(Incoming::ConnAck(_))) {
                        failures = 0;
                    }
                    self.on_event(event);
                }
                Err(e) => {
                    failures += 1;
                    self.stats.connected.store(false, Ordering::Relaxed);
                    self.acks().disconnected();
                    let wait = reconnect_delay(failures, self.cfg.connection.reconnect_max);
                    if failures == 1 || failures.is_power_of_two() {
                        log::warn!(
                            "mqtt sink disconnected, reconnecting: sink={} attempt={failures} retry_in_ms={} error=\"{e}\"",
                            self.name,
                            wait.as_millis()
                        );
                    }
                    self.set_error(&e.to_string());
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {},
                        _ = shutdown.wait() => break,
                    }
                }
            }
        }
        if self.stats.connected.load(Ordering::Relaxed) {
            self.goodbye(&mut eventloop).await;
        }
        self.stats.connected.store(false, Ordering::Relaxed);
        let depth = self.queue_depth();
        if depth > 0 {
            log::warn!(
                "mqtt sink stopped with unconfirmed publishes, their sources retry: sink={} records={depth}",
                self.name
            );
        }
        self.acks().fail_all("the mqtt sink stopped");
    }

    /// What an event of the client's event loop changes: the connection, and which records
    /// the broker confirmed.
    fn on_event(&self, event: Event) {
        match event {
            Event::Incoming(Incoming::ConnAck(ack)) => {
                self.stats.connected.store(true, Ordering::Relaxed);
                self.acks().connected(ack.session_present);
                log::info!(
                    "mqtt sink connected: sink={} session_present={}",
                    self.name,
                    ack.session_present
                );
            }
            Event::Incoming(Incoming::PubAck(ack)) if self.acks().acked(ack.pkid) => {
                self.stats.acked.fetch_add(1, Ordering::Relaxed);
            }
            Event::Outgoing(Outgoing::Publish(pkid)) => {
                self.stats.sent.fetch_add(1, Ordering::Relaxed);
                if pkid == 0 {
                    self.stats.unconfirmed.fetch_add(1, Ordering::Relaxed);
                }
                self.acks().written(pkid);
            }
            Event::Outgoing(Outgoing::AwaitAck(pkid)) => self.acks().held_back(pkid),
            _ => {}
        }
    }

    /// Ends the session with a DISCONNECT at a stop, so that the broker has closed it before
    /// a new instance (a reload's) connects with the same client id: without it, the broker
    /// would see the new session take over one it still held. At most [`GOODBYE`].
    async fn goodbye(&self, eventloop: &mut EventLoop) {
        if self.client.try_disconnect().is_err() {
            return;
        }
        let sent = async {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Outgoing(Outgoing::Disconnect)) | Err(_) => return,
                    // Publishes still queued go out first; their confirmations count.
                    Ok(event) => self.on_event(event),
                }
            }
        };
        if tokio::time::timeout(GOODBYE, sent).await.is_err() {
            log::warn!(
                "mqtt sink stopped without its DISCONNECT within {} ms: sink={}",
                GOODBYE.as_millis(),
                self.name
            );
        }
    }
}

/// Publishes a disk queue's rows and waits for every confirmation.
struct Publisher {
    sink: Arc<MqttSink>,
    runtime: tokio::runtime::Handle,
}

impl Destination for Publisher {
    fn send(&mut self, rows: &[Row]) -> Verdict {
        let records = match records_of(rows) {
            Ok(r) => r,
            Err(verdict) => return verdict,
        };
        if !self.sink.stats.connected.load(Ordering::Relaxed) {
            return Verdict::Retry {
                error: Failure::new("not connected", "the MQTT broker is not connected"),
                after: None,
            };
        }
        // A record over the packet cap refuses its batch before any of it is published: the
        // rows go again one by one, and only that one is refused (and dead-lettered).
        if records.len() > 1 && records.iter().any(|r| self.sink.over_the_cap(r)) {
            return Verdict::Refused {
                error: Failure::new(
                    "too large",
                    "a record of the batch is over the MQTT packet cap",
                ),
            };
        }
        let sink = &self.sink;
        judge_each(self.runtime.block_on(futures_util::future::join_all(
            records.iter().map(|r| sink.deliver(r)),
        )))
    }
}
