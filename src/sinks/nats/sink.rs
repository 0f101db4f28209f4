//! The `nats` sink: records go through a memory channel of [`CHANNEL`] (4096) to one publisher
//! task, which publishes each to its subject and answers the engine once the server confirmed
//! it: a JetStream publish ack when the subject belongs to a stream, a flush (the server's
//! PONG after the message) for a core subject.
//!
//! Refusals tell the source to retry, nothing is lost silently:
//! - at admission, before any node runs, while the channel is full or the server is not
//!   connected: counted `blocked`;
//! - at delivery, when the channel filled up since admission: counted `dropped` (the spec's
//!   "the call returns failure");
//! - a publish that still fails after `retries` backed-off attempts: counted `failed`, logged
//!   as an alert, and the source is told to retry.
//!
//! Each message carries the record as one JSON line (`{"id",..,"payload"}`) and the header
//! `Nats-Msg-Id: <record id>`, so JetStream's duplicate window drops a record the source
//! delivered twice.
//!
//! A message over the server's `max_payload` (its INFO's, payload and headers as the server
//! counts them) can never be published: the publisher measures each one before it publishes
//! and refuses such a record for good (counted `too_large`), so it goes to the dead letters
//! with its size in the reason instead of being retried at the head of a `queue: disk`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::client::PublishErrorKind;
use async_nats::jetstream;
use async_nats::jetstream::context::PublishErrorKind as JsPublishErrorKind;
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::config::{NatsSinkConfig, CHANNEL};
use crate::admission::{Gate, OnFull, Refused};
use crate::alerts::{ComponentReport, QueueReport};
use crate::alerts::{QueueKind, QueueReading};
use crate::brokers::nats::connect;
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
/// Most records published before their acks are awaited.
const BATCH: usize = 256;
/// How long a subject's stream membership is remembered.
const SUBJECT_TTL: Duration = Duration::from_secs(60);
/// Most subjects remembered; the cache is cleared beyond it.
const SUBJECT_CACHE: usize = 10_000;

/// Counters of the `nats` sink.
#[derive(Debug, Default)]
pub struct NatsSinkStats {
    /// Records the server confirmed.
    pub published: AtomicU64,
    /// Records refused at delivery because the channel was full (the source retries).
    pub dropped: AtomicU64,
    /// Records refused at admission (channel full or not connected; the source retries).
    pub blocked: AtomicU64,
    /// Records that failed after their retries (the source retries).
    pub failed: AtomicU64,
    /// Records refused for good because their message is over the server's `max_payload`
    /// (dead-lettered with the reason).
    pub too_large: AtomicU64,
    /// Publish attempts that were retried.
    pub retries: AtomicU64,
    /// True while the client is connected.
    pub connected: AtomicBool,
    /// The `max_payload` of the server's INFO (0 before the first).
    pub max_payload: AtomicUsize,
    /// The last publish error.
    pub last_error: Mutex<Option<String>>,
}

struct Job {
    subject: String,
    id: String,
    payload: Bytes,
    done: oneshot::Sender<Result<(), DeliveryError>>,
}

/// A `nats` sink.
pub struct NatsSink {
    name: String,
    cfg: NatsSinkConfig,
    tx: mpsc::Sender<Job>,
    rx: Mutex<Option<mpsc::Receiver<Job>>>,
    gate: Arc<Gate>,
    /// Its counters.
    pub stats: NatsSinkStats,
}

impl NatsSink {
    /// Sink `name` from its config; [`Self::start`] starts its publisher.
    pub fn new(name: &str, cfg: NatsSinkConfig) -> Self {
        let (tx, rx) = mpsc::channel(CHANNEL);
        Self {
            name: name.to_string(),
            cfg,
            tx,
            rx: Mutex::new(Some(rx)),
            // The channel is the bound; the gate only hands out (empty) reservations.
            gate: Arc::new(Gate::new(OnFull::EvictOldest, u64::MAX, 0, 0, 0)),
            stats: NatsSinkStats::default(),
        }
    }

    /// Its admission gate (never refuses; the channel does).
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// Records waiting in the channel.
    pub fn queue_depth(&self) -> usize {
        CHANNEL - self.tx.capacity()
    }

    /// Refuses, before any node runs, while the channel is full or the server is down.
    pub fn admit(&self) -> Result<(), Refused> {
        if self.tx.capacity() == 0 || !self.stats.connected.load(Ordering::Relaxed) {
            self.stats.blocked.fetch_add(1, Ordering::Relaxed);
            return Err(Refused { after: RETRY_AFTER });
        }
        Ok(())
    }

    /// The logical bytes of `record` (its line).
    pub fn bytes(&self, record: &Record) -> u64 {
        record.line_len() as u64
    }

    /// Hands `record` to the publisher and waits for the server's confirmation.
    pub async fn deliver(&self, record: &Record) -> Result<Delivered, DeliveryError> {
        let subject = match self.subject(record) {
            Ok(s) => s,
            Err(e) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                return Err(DeliveryError::Rejected(e));
            }
        };
        let (done, answer) = oneshot::channel();
        let job = Job {
            subject,
            id: record.id.clone(),
            payload: Bytes::from(record.to_line()),
            done,
        };
        if self.tx.try_send(job).is_err() {
            let total = self.stats.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if total.is_power_of_two() {
                log::warn!(
                    "nats sink channel full, record refused: sink={} dropped_total={total}",
                    self.name
                );
            }
            return Err(DeliveryError::Refused(Refused { after: RETRY_AFTER }));
        }
        match answer.await {
            Ok(Ok(())) => Ok(Delivered::Stored),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(DeliveryError::Publish("nats sink stopped".into())),
        }
    }

    /// Starts the publisher on the runtime; it ends on the signal, failing what is left so the
    /// sources retry.
    pub fn start(self: &Arc<Self>, ctx: &StartContext) -> std::io::Result<Running> {
        let mut running = Running::default();
        running.tasks.push(
            ctx.runtime
                .spawn(Arc::clone(self).run(ctx.shutdown.clone())),
        );
        Ok(running)
    }

    /// Batch size and back-off of the deliverer of its `queue: disk`: the publisher's.
    pub fn delivery(&self) -> DeliveryConfig {
        DeliveryConfig {
            batch_rows: BATCH,
            max_rows: BATCH,
            retry_initial: self.cfg.retry_initial,
            retry_max: self.cfg.retry_max,
            linger: Duration::ZERO,
        }
    }

    /// The server as the destination of the sink's `queue: disk`.
    pub fn destination(self: &Arc<Self>, ctx: &StartContext) -> Box<dyn Destination> {
        Box::new(Publisher {
            sink: Arc::clone(self),
            runtime: ctx.runtime.clone(),
        })
    }

    fn last_error_class(&self) -> Option<String> {
        self.stats
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|e| Failure::from_detail(e.clone()).class)
    }

    /// The last publish error in full, for the admin endpoint.
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

    /// The subject of `record`: a value spliced into the template (a caller's `X-Opex-Key`,
    /// a payload field) that would add a token, a wildcard or white space is refused, so a
    /// caller cannot publish outside the subjects the template names.
    fn subject(&self, record: &Record) -> Result<String, String> {
        let subject = self
            .cfg
            .subject
            .render_confined(&Fields::read(record), Confine::NatsSubject)?;
        if subject.is_empty() || subject.split('.').any(str::is_empty) {
            return Err(format!("subject {subject:?} has an empty token"));
        }
        Ok(subject)
    }

    /// Everything the rest of the program reads of it (a disk queue's part comes from the
    /// queue).
    pub fn report(&self) -> Report {
        let s = &self.stats;
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let depth = self.queue_depth() as u64;
        let entry = json!({
            "dropped": l(&s.dropped),
            "blocked": l(&s.blocked),
            "failed": l(&s.failed),
            "too_large": l(&s.too_large),
            "published": l(&s.published),
            "retries": l(&s.retries),
            "queue_depth": depth,
            "queue_capacity": CHANNEL,
            "connected": s.connected.load(Ordering::Relaxed),
            "durable": false,
            "last_error": self.last_error_class(),
        });
        let mut r = Report {
            accepting: true,
            ..Report::default()
        };
        if let Value::Object(m) = &entry {
            r.entry = m.clone();
        }
        r.status = entry;
        r.queues = vec![QueueReport {
            name: self.name.clone(),
            tracker: Arc::default(),
            reading: QueueReading {
                kind: QueueKind::Channel,
                on_full: "block",
                quota: CHANNEL as u64,
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
                message: "NATS publishes failed after their retries: sources told to retry",
                counters: vec![("failed", l(&s.failed))],
            },
            ComponentReport {
                name: format!("{}.too_large", self.name),
                message:
                    "records over the NATS server's max_payload refused for good: dead-lettered",
                counters: vec![("too_large", l(&s.too_large))],
            },
        ];
        // A publish that failed after its retries is handed back to the engine (the source
        // retries, or the record is parked): not accepted, not lost here.
        let published = l(&s.published);
        r.ledger = SinkFigures {
            accepted: published + depth,
            delivered: published,
            pending: depth,
            kept: "memory",
            ..SinkFigures::default()
        };
        let mut m = Samples::new(&self.name);
        m.memory_queue(l(&s.dropped), l(&s.blocked), Some(l(&s.failed)), depth);
        m.too_large(l(&s.too_large));
        r.metrics = m.finish();
        r
    }

    /// The publisher: runs until shutdown, then fails what is left so the sources retry.
    async fn run(self: Arc<Self>, shutdown: Shutdown) {
        let Some(mut rx) = self.rx.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let Some(client) = connect(&self.cfg.connection, "opex-connector sink", &shutdown).await
        else {
            fail_all(&mut rx, "shutting down");
            return;
        };
        let mut js = jetstream::new(client.clone());
        js.set_timeout(self.cfg.timeout);
        let mut streams: HashMap<String, (bool, Instant)> = HashMap::new();
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            let first = tokio::select! {
                _ = shutdown.wait() => break,
                _ = tick.tick() => {
                    let up = client.connection_state() == async_nats::connection::State::Connected;
                    self.stats.connected.store(up, Ordering::Relaxed);
                    self.stats
                        .max_payload
                        .store(client.server_info().max_payload, Ordering::Relaxed);
                    continue;
                }
                job = rx.recv() => match job {
                    Some(j) => j,
                    None => break,
                },
            };
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(j) => batch.push(j),
                    Err(_) => break,
                }
            }
            self.publish_batch(&client, &js, &mut streams, batch, &shutdown)
                .await;
        }
        fail_all(&mut rx, "shutting down");
    }

    async fn publish_batch(
        &self,
        client: &async_nats::Client,
        js: &jetstream::Context,
        streams: &mut HashMap<String, (bool, Instant)>,
        batch: Vec<Job>,
        shutdown: &Shutdown,
    ) {
        let mut pending = batch;
        let mut attempt: u32 = 0;
        loop {
            // The INFO of the server connected now (0 before the first: nothing to measure by).
            let max_payload = client.server_info().max_payload;
            let mut failed = Vec::new();
            let mut acks = Vec::new();
            let mut core = Vec::new();
            for job in pending {
                let in_stream = match in_stream(js, streams, &job.subject).await {
                    Ok(b) => b,
                    Err(e) => {
                        failed.push((job, e));
                        continue;
                    }
                };
                let size = message_size(&job.id, job.payload.len(), in_stream);
                if max_payload > 0 && size > max_payload {
                    self.too_large(job, size, max_payload);
                    continue;
                }
                if in_stream {
                    let mut headers = async_nats::HeaderMap::new();
                    headers.insert("Nats-Msg-Id", job.id.as_str());
                    match js
                        .publish_with_headers(job.subject.clone(), headers, job.payload.clone())
                        .await
                    {
                        Ok(ack) => acks.push((job, ack)),
                        // The client's own measure, should it ever differ from ours.
                        Err(e) if e.kind() == JsPublishErrorKind::MaxPayloadExceeded => {
                            self.too_large(job, size, max_payload)
                        }
                        Err(e) => failed.push((job, e.to_string())),
                    }
                } else {
                    match client
                        .publish(job.subject.clone(), job.payload.clone())
                        .await
                    {
                        Ok(()) => core.push(job),
                        Err(e) if e.kind() == PublishErrorKind::MaxPayloadExceeded => {
                            self.too_large(job, size, max_payload)
                        }
                        Err(e) => failed.push((job, e.to_string())),
                    }
                }
            }
            if !core.is_empty() {
                match tokio::time::timeout(self.cfg.timeout, client.flush()).await {
                    Ok(Ok(())) => core.into_iter().for_each(|j| self.published(j)),
                    Ok(Err(e)) => failed.extend(core.into_iter().map(|j| (j, e.to_string()))),
                    Err(_) => {
                        failed.extend(core.into_iter().map(|j| (j, "flush timed out".into())))
                    }
                }
            }
            for (job, ack) in acks {
                match ack.await {
                    Ok(_) => self.published(job),
                    Err(e) => failed.push((job, e.to_string())),
                }
            }
            if failed.is_empty() {
                return;
            }
            let reason = failed.first().map(|(_, e)| e.clone()).unwrap_or_default();
            *self
                .stats
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(reason.clone());
            if attempt >= self.cfg.retries || shutdown.is_triggered() {
                let n = failed.len() as u64;
                let total = self.stats.failed.fetch_add(n, Ordering::Relaxed) + n;
                log::error!(
                    "alert: sink={} message=\"publish failed after its retries, sources told to retry\" records={n} failed_total={total} error=\"{reason}\"",
                    self.name
                );
                for (job, e) in failed {
                    let _ = job.done.send(Err(DeliveryError::Publish(e)));
                }
                return;
            }
            attempt += 1;
            self.stats
                .retries
                .fetch_add(failed.len() as u64, Ordering::Relaxed);
            let wait = self
                .cfg
                .retry_initial
                .saturating_mul(1 << (attempt - 1).min(20))
                .min(self.cfg.retry_max);
            log::warn!(
                "nats sink publish failed, retrying: sink={} records={} attempt={attempt} retry_in_ms={} error=\"{reason}\"",
                self.name,
                failed.len(),
                wait.as_millis()
            );
            tokio::select! {
                _ = tokio::time::sleep(wait) => {},
                _ = shutdown.wait() => {},
            }
            pending = failed.into_iter().map(|(j, _)| j).collect();
        }
    }

    fn published(&self, job: Job) {
        self.stats.published.fetch_add(1, Ordering::Relaxed);
        let _ = job.done.send(Ok(()));
    }

    /// Refuses `job` for good: its message is `size` bytes, over the server's `max_payload`.
    fn too_large(&self, job: Job, size: usize, max_payload: usize) {
        events::sink_record_too_large(
            &self.name,
            &self.stats.too_large,
            &job.id,
            size,
            max_payload,
        );
        let _ = job.done.send(Err(DeliveryError::Rejected(format!(
            "too large: its message would be {size} bytes, over the NATS server's max_payload {max_payload}"
        ))));
    }
}

/// The bytes of a message the server counts against its `max_payload`: the payload, and for a
/// JetStream publish the header block it carries (`NATS/1.0`, `Nats-Msg-Id: <id>`, each line
/// ended by CRLF, and a blank line), as async-nats writes it.
fn message_size(id: &str, payload: usize, in_stream: bool) -> usize {
    if !in_stream {
        return payload;
    }
    "NATS/1.0\r\n".len() + "Nats-Msg-Id: ".len() + id.len() + "\r\n".len() + "\r\n".len() + payload
}

/// Whether `subject` is captured by a JetStream stream (cached for [`SUBJECT_TTL`]).
async fn in_stream(
    js: &jetstream::Context,
    cache: &mut HashMap<String, (bool, Instant)>,
    subject: &str,
) -> Result<bool, String> {
    if let Some((b, at)) = cache.get(subject) {
        if at.elapsed() < SUBJECT_TTL {
            return Ok(*b);
        }
    }
    let found = match js.stream_by_subject(subject).await {
        Ok(_) => true,
        Err(e) if e.kind() == jetstream::context::GetStreamByNameErrorKind::NotFound => false,
        Err(e) => return Err(format!("stream lookup: {e}")),
    };
    if cache.len() >= SUBJECT_CACHE {
        cache.clear();
    }
    cache.insert(subject.to_string(), (found, Instant::now()));
    Ok(found)
}

fn fail_all(rx: &mut mpsc::Receiver<Job>, why: &str) {
    rx.close();
    while let Ok(job) = rx.try_recv() {
        let _ = job.done.send(Err(DeliveryError::Publish(why.to_string())));
    }
}

/// Publishes a disk queue's rows and waits for every confirmation.
struct Publisher {
    sink: Arc<NatsSink>,
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
                error: Failure::new("not connected", "the NATS server is not connected"),
                after: None,
            };
        }
        // A record that may be over the server's max_payload (measured with its JetStream
        // header) refuses its batch before any of it is published: the rows go again one by
        // one, and the publisher refuses only the one that is (it is dead-lettered).
        let max_payload = self.sink.stats.max_payload.load(Ordering::Relaxed);
        if max_payload > 0
            && records.len() > 1
            && records
                .iter()
                .any(|r| message_size(&r.id, r.line_len(), true) > max_payload)
        {
            return Verdict::Refused {
                error: Failure::new(
                    "too large",
                    "a record of the batch may be over the NATS server's max_payload",
                ),
            };
        }
        let sink = &self.sink;
        judge_each(self.runtime.block_on(futures_util::future::join_all(
            records.iter().map(|r| sink.deliver(r)),
        )))
    }
}
