//! One JetStream source: a durable pull consumer, per-subject buffers, and the settlement
//! spoken as JetStream acks.
//!
//! The ack rule: a message is acked only after its settlement is stored (`Stored`, parked in
//! the dead-letter queue, or taken by no flow). When a sink it reaches refuses at admission,
//! it is **nak'd before any node runs**, with the consumer backoff: `nak_backoff_initial`
//! (2 s) doubled per delivery, as counted by JetStream in the message metadata, up to
//! `nak_backoff_max` (60 s). A sink that fails after admission gets the same nak. No
//! `max_deliver` is set, so JetStream redelivers until the record is stored.
//!
//! Messages wait in per-subject buffers of [`DEVICE_BUFFER`] (1024); a full buffer returns its
//! oldest message to JetStream with a nak (counted `returned`), nothing is dropped. The
//! consumer's `max_ack_pending` bounds what all buffers hold together. In `latest` mode a
//! subject keeps only its newest message while its previous one is in the pipeline; the
//! replaced ones are acked and counted (`replaced`), by design.
//!
//! Up to `max_in_flight` (default 1024) messages are in the pipeline at once, so the push
//! queue's writer can store many of them in one group commit. Their answers are gathered: when
//! one settles, every other one that the same commit settled is taken too, and the acks (and
//! naks) leave together, one burst of small publishes written to the socket at once. Each of
//! them is sent only after its own record's settlement: an ack never leaves before the commit
//! that stored its record.
//!
//! The client reconnects forever; the consumer is durable, so after a reconnect or a restart
//! the source resumes where JetStream's ack floor stands.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, AckKind};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use serde_json::{json, Value};

use super::config::{NatsMode, NatsSourceConfig, DEVICE_BUFFER};
use crate::brokers::nats::{connect, reconnect_delay};
use crate::engine::{Engine, Mode};
use crate::record::{json_payload, new_id, value_payload, Record, Settlement};
use crate::shutdown::Shutdown;
use crate::sources::buffers::{DeviceBuffers, Pushed};

/// Messages asked for per pull request (at least; `max_in_flight` when that is more, at
/// most `max_ack_pending`).
const PULL_BATCH: usize = 256;

/// Counters of one JetStream source, shown in `/api/status` `sources[]`.
#[derive(Debug, Default)]
pub struct NatsSourceStats {
    /// Messages received from JetStream (redeliveries included).
    pub received: AtomicU64,
    /// Messages acked after their settlement was stored.
    pub acked: AtomicU64,
    /// Messages nak'd because a sink refused at admission, before any node ran.
    pub refused: AtomicU64,
    /// Messages nak'd because a sink failed after admission.
    pub failed: AtomicU64,
    /// Messages returned to JetStream (nak) because their subject's buffer was full.
    pub returned: AtomicU64,
    /// `latest` mode: messages replaced by a newer one on the same subject, acked by design.
    pub replaced: AtomicU64,
    /// Messages received that JetStream had delivered before.
    pub redelivered: AtomicU64,
    /// Payloads that were not JSON, kept as a JSON string.
    pub not_json: AtomicU64,
    /// The highest delivery count seen.
    pub max_delivered: AtomicU64,
    /// The last nak delay, in milliseconds.
    pub last_nak_delay_ms: AtomicU64,
    /// Acks or naks the server did not take (the message comes back after `ack_wait`).
    pub ack_errors: AtomicU64,
    /// Messages waiting in the buffers.
    pub buffered: AtomicU64,
    /// Messages in the pipeline (offered, not yet settled), at most `max_in_flight`.
    pub in_flight: AtomicU64,
    /// True while the consumer is pulling.
    pub consuming: AtomicBool,
    /// The last error, until the consumer runs again.
    pub last_error: Mutex<Option<String>>,
}

/// What a settled message is answered with: its ack or its nak.
type Answer = (jetstream::Message, AckKind);

/// A message with what its metadata says, read once when it arrives.
struct Delivery {
    msg: jetstream::Message,
    /// Times JetStream delivered it (1 the first time).
    delivered: i64,
    /// Its stream sequence; `None` without JetStream metadata.
    sequence: Option<u64>,
}

/// One configured JetStream source.
#[derive(Debug)]
pub struct NatsSource {
    cfg: NatsSourceConfig,
    source: String,
    /// Its counters.
    pub stats: NatsSourceStats,
}

/// The nak delay for a message delivered `delivered` times: `initial` doubled per earlier
/// delivery, capped at `max`.
pub fn nak_delay(delivered: i64, initial: Duration, max: Duration) -> Duration {
    let shift = (delivered.max(1) - 1).min(30) as u32;
    initial.saturating_mul(1u32 << shift).min(max)
}

impl NatsSource {
    /// A source from its config.
    pub fn new(cfg: NatsSourceConfig) -> Self {
        Self {
            source: format!("nats/{}", cfg.name),
            cfg,
            stats: NatsSourceStats::default(),
        }
    }

    /// Its name in flows and records: `nats/<name>`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// `sources[]` entry of `/api/status`.
    pub fn status(&self) -> Value {
        let s = &self.stats;
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        json!({
            "name": self.source,
            "kind": "nats",
            "stream": self.cfg.stream,
            "durable": self.cfg.durable,
            "mode": match self.cfg.mode { NatsMode::All => "all", NatsMode::Latest => "latest" },
            "consuming": s.consuming.load(Ordering::Relaxed),
            "received": l(&s.received),
            "acked": l(&s.acked),
            "stored": l(&s.acked),
            "refused": l(&s.refused),
            "failed": l(&s.failed),
            "returned": l(&s.returned),
            "replaced": l(&s.replaced),
            "redelivered": l(&s.redelivered),
            "not_json": l(&s.not_json),
            "max_delivered": l(&s.max_delivered),
            "last_nak_delay_ms": l(&s.last_nak_delay_ms),
            "ack_errors": l(&s.ack_errors),
            "buffered": l(&s.buffered),
            "in_flight": l(&s.in_flight),
            "max_in_flight": self.cfg.max_in_flight,
            "last_error": *s.last_error.lock().unwrap_or_else(|e| e.into_inner()),
        })
    }

    fn set_error(&self, e: Option<String>) {
        *self
            .stats
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = e;
    }

    /// Runs until shutdown: connects, binds the durable consumer, pulls, offers, settles.
    /// Every failure is retried with back-off; nothing here ends the process.
    pub async fn run(self: Arc<Self>, engine: Arc<Engine>, shutdown: Shutdown) {
        let name = format!("opex-connector {}", self.source);
        let Some(client) = connect(&self.cfg.connection, &name, &shutdown).await else {
            return;
        };
        let js = jetstream::new(client);
        let mut attempt = 0usize;
        while !shutdown.is_triggered() {
            attempt += 1;
            match self.consume(&js, &engine, &shutdown).await {
                Ok(()) => attempt = 0,
                Err(e) => {
                    // A consumer that ran before failed: start the back-off over.
                    if self.stats.consuming.swap(false, Ordering::Relaxed) {
                        attempt = 1;
                    }
                    let wait = reconnect_delay(attempt, self.cfg.connection.reconnect_max);
                    log::warn!(
                        "nats source paused, retrying: source={} stream={} retry_in_ms={} error=\"{e}\"",
                        self.source,
                        self.cfg.stream,
                        wait.as_millis()
                    );
                    self.set_error(Some(e));
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {},
                        _ = shutdown.wait() => break,
                    }
                }
            }
        }
        self.stats.consuming.store(false, Ordering::Relaxed);
    }

    fn consumer_config(&self) -> pull::Config {
        let mut c = pull::Config {
            durable_name: Some(self.cfg.durable.clone()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            deliver_policy: jetstream::consumer::DeliverPolicy::All,
            ack_wait: self.cfg.ack_wait,
            max_ack_pending: self.cfg.max_ack_pending as i64,
            // No max_deliver: JetStream redelivers until the record is stored.
            ..Default::default()
        };
        match self.cfg.filter_subjects.as_slice() {
            [] => {}
            [one] => c.filter_subject = one.clone(),
            many => c.filter_subjects = many.to_vec(),
        }
        c
    }

    /// One life of the consumer: returns `Ok` at shutdown, `Err` when it must be bound again.
    async fn consume(
        &self,
        js: &jetstream::Context,
        engine: &Engine,
        shutdown: &Shutdown,
    ) -> Result<(), String> {
        let stream = js
            .get_stream(&self.cfg.stream)
            .await
            .map_err(|e| format!("stream {}: {e}", self.cfg.stream))?;
        let consumer = stream
            .get_or_create_consumer(&self.cfg.durable, self.consumer_config())
            .await
            .map_err(|e| format!("consumer {}: {e}", self.cfg.durable))?;
        let pull_batch = PULL_BATCH
            .max(self.cfg.max_in_flight)
            .min(self.cfg.max_ack_pending as usize)
            .max(1);
        let mut messages = consumer
            .stream()
            .max_messages_per_batch(pull_batch)
            .heartbeat(Duration::from_secs(5))
            .expires(Duration::from_secs(30))
            .messages()
            .await
            .map_err(|e| format!("pull: {e}"))?;
        self.stats.consuming.store(true, Ordering::Relaxed);
        self.set_error(None);
        log::info!(
            "nats source consuming: source={} stream={} durable={}",
            self.source,
            self.cfg.stream,
            self.cfg.durable
        );
        let latest = self.cfg.mode == NatsMode::Latest;
        let mut buffers: DeviceBuffers<Delivery> = DeviceBuffers::new(DEVICE_BUFFER, latest);
        let mut in_flight = FuturesUnordered::new();
        // Answers waiting to be sent: filled by settlements and by the buffers, sent together.
        let mut answers: Vec<Answer> = Vec::new();
        let result = loop {
            while in_flight.len() < self.cfg.max_in_flight {
                let Some((subject, delivery)) = buffers.pop() else {
                    break;
                };
                // Only `latest` mode needs the subject back, to let its next message go.
                let busy = latest.then(|| subject.clone());
                in_flight.push(async move { (busy, self.settle(engine, subject, delivery).await) });
            }
            self.stats
                .buffered
                .store(buffers.len() as u64, Ordering::Relaxed);
            self.stats
                .in_flight
                .store(in_flight.len() as u64, Ordering::Relaxed);
            tokio::select! {
                _ = shutdown.wait() => break Ok(()),
                Some((busy, answer)) = in_flight.next(), if !in_flight.is_empty() => {
                    if let Some(subject) = busy {
                        buffers.done(&subject);
                    }
                    answers.push(answer);
                    // The others that the same commit settled are ready now: take them too,
                    // without waiting, so their acks leave in one burst.
                    while let Some(Some((busy, answer))) = in_flight.next().now_or_never() {
                        if let Some(subject) = busy {
                            buffers.done(&subject);
                        }
                        answers.push(answer);
                    }
                }
                item = messages.next() => match item {
                    Some(Ok(msg)) => self.receive(engine, msg, &mut buffers, &mut answers),
                    Some(Err(e)) => {
                        use async_nats::jetstream::consumer::pull::MessagesErrorKind as K;
                        match e.kind() {
                            K::MissingHeartbeat | K::Pull | K::Other | K::NoResponders => {
                                log::debug!("nats source pull hiccup: source={} error=\"{e}\"", self.source);
                                self.set_error(Some(e.to_string()));
                            }
                            _ => break Err(e.to_string()),
                        }
                    }
                    None => break Err("the message stream ended".into()),
                },
            }
            self.answer(&mut answers).await;
        };
        // Let what is in the pipeline settle, then hand the waiting messages back at once so
        // they are redelivered promptly (to this consumer after a restart).
        while let Some((_, answer)) = in_flight.next().await {
            answers.push(answer);
        }
        answers.extend(
            buffers
                .drain()
                .into_iter()
                .map(|d| (d.msg, AckKind::Nak(None))),
        );
        self.answer(&mut answers).await;
        self.stats.buffered.store(0, Ordering::Relaxed);
        self.stats.in_flight.store(0, Ordering::Relaxed);
        result
    }

    fn receive(
        &self,
        engine: &Engine,
        msg: jetstream::Message,
        buffers: &mut DeviceBuffers<Delivery>,
        answers: &mut Vec<Answer>,
    ) {
        self.stats.received.fetch_add(1, Ordering::Relaxed);
        let (delivered, sequence) = match msg.info() {
            Ok(info) => (info.delivered, Some(info.stream_sequence)),
            Err(_) => (1, None),
        };
        if delivered > 1 {
            self.stats.redelivered.fetch_add(1, Ordering::Relaxed);
        }
        self.stats
            .max_delivered
            .fetch_max(delivered.max(0) as u64, Ordering::Relaxed);
        let subject = msg.message.subject.to_string();
        let delivery = Delivery {
            msg,
            delivered,
            sequence,
        };
        match buffers.push(&subject, delivery) {
            Pushed::Queued => {}
            Pushed::Overflowed(old) => {
                let total = self.stats.returned.fetch_add(1, Ordering::Relaxed) + 1;
                if total.is_power_of_two() {
                    log::warn!(
                        "nats source buffer full, oldest message returned to JetStream: source={} subject={subject} returned_total={total}",
                        self.source
                    );
                }
                answers.push(self.nak(old));
            }
            Pushed::Replaced(old) => {
                // `latest` mode: replaced by a newer value and acked, by design.
                engine
                    .ledger
                    .lost(&self.source, crate::ledger::Cause::Suppressed);
                self.stats.replaced.fetch_add(1, Ordering::Relaxed);
                answers.push((old.msg, AckKind::Ack));
            }
        }
    }

    /// Offers one message as a record keyed by its `subject` and returns its answer: the ack
    /// once its settlement is stored, the nak (with the backoff) when it was refused or failed.
    async fn settle(&self, engine: &Engine, subject: String, delivery: Delivery) -> Answer {
        let payload = &delivery.msg.message.payload;
        let (payload, subject) = match json_payload(payload) {
            Ok(p) => (p, subject),
            Err(_) => {
                self.stats.not_json.fetch_add(1, Ordering::Relaxed);
                let text = String::from_utf8_lossy(payload).into_owned();
                (
                    value_payload(&Value::String(text)),
                    delivery.msg.message.subject.to_string(),
                )
            }
        };
        // A stable id per stream message (the consumer's stream is this source's): a
        // redelivered duplicate carries the same id, so a receiver can drop it.
        let id = match delivery.sequence {
            Some(sequence) => format!("nats-{}-{sequence}", self.cfg.stream),
            None => new_id(),
        };
        let record = Record::with_id(id, self.source.clone(), subject, payload);
        let settlement = match engine.admit(&record) {
            Err(refused) => {
                self.stats.refused.fetch_add(1, Ordering::Relaxed);
                log::debug!(
                    "nats message refused before any node ran, nak: source={} settlement={refused:?}",
                    self.source
                );
                return self.nak(delivery);
            }
            Ok(None) => engine.unrouted(&record.source),
            Ok(Some(admitted)) => engine.run_admitted(record, admitted, Mode::Normal).await,
        };
        match settlement {
            Settlement::Stored | Settlement::Unrouted | Settlement::DeadLettered { .. } => {
                self.stats.acked.fetch_add(1, Ordering::Relaxed);
                (delivery.msg, AckKind::Ack)
            }
            Settlement::Retry { .. } | Settlement::Failed { .. } => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                log::warn!(
                    "nats message not stored, nak: source={} settlement={settlement:?}",
                    self.source
                );
                self.nak(delivery)
            }
        }
    }

    /// Sends every waiting answer, back to back: the client writes them to the socket
    /// together. An answer the server does not take is counted; its message comes back after
    /// `ack_wait`.
    async fn answer(&self, answers: &mut Vec<Answer>) {
        for (msg, kind) in answers.drain(..) {
            let what = match kind {
                AckKind::Ack => "ack",
                _ => "nak",
            };
            if let Err(e) = msg.ack_with(kind).await {
                let total = self.stats.ack_errors.fetch_add(1, Ordering::Relaxed) + 1;
                if total.is_power_of_two() {
                    log::warn!(
                        "nats {what} failed: source={} ack_errors_total={total} error=\"{e}\"",
                        self.source
                    );
                }
            }
        }
    }

    /// The nak of a message, with the backoff for its delivery count.
    fn nak(&self, delivery: Delivery) -> Answer {
        let delay = nak_delay(
            delivery.delivered,
            self.cfg.nak_backoff_initial,
            self.cfg.nak_backoff_max,
        );
        self.stats
            .last_nak_delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
        (delivery.msg, AckKind::Nak(Some(delay)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nak_delay_doubles_per_delivery_from_two_to_sixty_seconds() {
        let (i, m) = (Duration::from_secs(2), Duration::from_secs(60));
        let secs: Vec<u64> = (1..=8).map(|d| nak_delay(d, i, m).as_secs()).collect();
        assert_eq!(secs, vec![2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(nak_delay(0, i, m), i);
        assert_eq!(nak_delay(i64::MAX, i, m), m);
    }
}
