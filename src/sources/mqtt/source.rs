//! One MQTT source: a client with its subscriptions, per-subscription buffers, and a worker
//! that offers the buffered messages to the engine.
//!
//! MQTT is **acked on receipt**, as the delivery promise says: a QoS 1 message is acked once it
//! is in the connector's buffer, before the engine has seen it. So what happens after is
//! counted, never told to the broker:
//! - a subscription's buffer holds [`SUBSCRIPTION_BUFFER`] (1024) messages; at the cap the
//!   oldest is dropped (counted `dropped`, logged);
//! - a sink that refuses (full under `block`) loses the record: counted here (`refused`) and in
//!   `engine.stats.backpressured`, logged.
//!
//! Use NATS JetStream when MQTT data must not be lost.
//!
//! The event loop and the worker are separate tasks, so a slow pipeline never keeps the client
//! from answering the broker (keep-alive, acks).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::stream::{FuturesUnordered, StreamExt};
use rumqttc::{AsyncClient, Event, Packet, Publish, QoS, SubscribeFilter};
use serde_json::{json, Value};
use tokio::sync::Notify;

use super::config::{matches, MqttSourceConfig, SUBSCRIPTION_BUFFER};
use crate::brokers::mqtt::{options, reconnect_delay, CLIENT_QUEUE};
use crate::engine::Engine;
use crate::ledger::Cause;
use crate::record::{Record, Settlement};
use crate::shutdown::Shutdown;
use crate::sources::buffers::{DeviceBuffers, Pushed};

/// Records offered to the engine at once.
const MAX_IN_FLIGHT: usize = 64;

/// Counters of one MQTT source, shown in `/api/status` `sources[]`.
#[derive(Debug, Default)]
pub struct MqttSourceStats {
    /// Messages received.
    pub received: AtomicU64,
    /// Records stored (or parked, or taken by no flow).
    pub stored: AtomicU64,
    /// Records a full sink refused: lost (MQTT acked them on receipt).
    pub refused: AtomicU64,
    /// Records a sink failed to store: lost.
    pub failed: AtomicU64,
    /// Messages dropped because their subscription's buffer was full.
    pub dropped: AtomicU64,
    /// Payloads that were not JSON, kept as a JSON string.
    pub not_json: AtomicU64,
    /// Acks that could not be queued (the broker sends the message again).
    pub ack_errors: AtomicU64,
    /// Messages waiting in the buffers.
    pub buffered: AtomicU64,
    /// True while connected.
    pub connected: AtomicBool,
    /// The last connection error.
    pub last_error: Mutex<Option<String>>,
}

/// One configured MQTT source.
#[derive(Debug)]
pub struct MqttSource {
    cfg: MqttSourceConfig,
    source: String,
    buffers: Mutex<DeviceBuffers<Publish>>,
    ready: Notify,
    /// Its counters.
    pub stats: MqttSourceStats,
}

fn qos(q: u8) -> QoS {
    if q == 0 {
        QoS::AtMostOnce
    } else {
        QoS::AtLeastOnce
    }
}

impl MqttSource {
    /// A source from its config.
    pub fn new(cfg: MqttSourceConfig) -> Self {
        Self {
            source: format!("mqtt/{}", cfg.name),
            cfg,
            buffers: Mutex::new(DeviceBuffers::new(SUBSCRIPTION_BUFFER, false)),
            ready: Notify::new(),
            stats: MqttSourceStats::default(),
        }
    }

    /// Its name in flows and records: `mqtt/<name>`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// `sources[]` entry of `/api/status`.
    pub fn status(&self) -> Value {
        let s = &self.stats;
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        json!({
            "name": self.source,
            "kind": "mqtt",
            "connected": s.connected.load(Ordering::Relaxed),
            "received": l(&s.received),
            "stored": l(&s.stored),
            "refused": l(&s.refused),
            "failed": l(&s.failed),
            "dropped": l(&s.dropped),
            "not_json": l(&s.not_json),
            "ack_errors": l(&s.ack_errors),
            "buffered": l(&s.buffered),
            "acked_on_receipt": true,
            "note": "MQTT is acked on receipt: use NATS JetStream when data must not be lost",
            "last_error": *s.last_error.lock().unwrap_or_else(|e| e.into_inner()),
        })
    }

    fn buffers(&self) -> std::sync::MutexGuard<'_, DeviceBuffers<Publish>> {
        // Plain queues; a panic elsewhere cannot leave them half-changed in a harmful way.
        self.buffers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs the client and the worker until shutdown.
    pub async fn run(self: Arc<Self>, engine: Arc<Engine>, shutdown: Shutdown) {
        let worker = tokio::spawn(Arc::clone(&self).work(Arc::clone(&engine), shutdown.clone()));
        self.client(&shutdown, Some(&engine)).await;
        let _ = worker.await;
    }

    /// Runs the client alone: messages are received, acked and buffered, but nothing offers
    /// them (the state of a source whose pipeline is stalled). For tests of the buffer cap.
    pub async fn receive_only(&self, shutdown: Shutdown) {
        self.client(&shutdown, None).await;
    }

    /// `engine` takes the ledger's count of the messages the buffers drop.
    async fn client(&self, shutdown: &Shutdown, engine: Option<&Engine>) {
        let opts = match options(&self.cfg.connection, &self.cfg.name) {
            Ok(o) => o,
            Err(e) => {
                log::error!(
                    "mqtt source cannot start: source={} error=\"{e}\"",
                    self.source
                );
                *self
                    .stats
                    .last_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(e);
                return;
            }
        };
        let (client, mut eventloop) = AsyncClient::new(opts, CLIENT_QUEUE);
        let mut failures = 0u32;
        loop {
            let event = tokio::select! {
                e = eventloop.poll() => e,
                _ = shutdown.wait() => break,
            };
            match event {
                Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                    failures = 0;
                    self.stats.connected.store(true, Ordering::Relaxed);
                    *self
                        .stats
                        .last_error
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = None;
                    log::info!(
                        "mqtt source connected: source={} session_present={}",
                        self.source,
                        ack.session_present
                    );
                    let filters = self
                        .cfg
                        .subscriptions
                        .iter()
                        .map(|s| SubscribeFilter::new(s.topic.clone(), qos(s.qos)));
                    if let Err(e) = client.try_subscribe_many(filters) {
                        log::error!(
                            "mqtt subscribe failed: source={} error=\"{e}\"",
                            self.source
                        );
                    }
                }
                Ok(Event::Incoming(Packet::Publish(p))) => self.receive(&client, p, engine),
                Ok(_) => {}
                Err(e) => {
                    failures += 1;
                    self.stats.connected.store(false, Ordering::Relaxed);
                    let wait = reconnect_delay(failures, self.cfg.connection.reconnect_max);
                    if failures == 1 || failures.is_power_of_two() {
                        log::warn!(
                            "mqtt source disconnected, reconnecting: source={} attempt={failures} retry_in_ms={} error=\"{e}\"",
                            self.source,
                            wait.as_millis()
                        );
                    }
                    *self
                        .stats
                        .last_error
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {},
                        _ = shutdown.wait() => break,
                    }
                }
            }
        }
        self.stats.connected.store(false, Ordering::Relaxed);
        // The session stays with the broker (clean_session: false): what it sends meanwhile
        // waits there for the next start.
        let _ = client.try_disconnect();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), eventloop.poll()).await;
    }

    /// Buffers a message, then acks it (acked on receipt).
    fn receive(&self, client: &AsyncClient, p: Publish, engine: Option<&Engine>) {
        self.stats.received.fetch_add(1, Ordering::Relaxed);
        let index = self
            .cfg
            .subscriptions
            .iter()
            .position(|s| matches(&s.topic, &p.topic))
            .unwrap_or(0);
        let device = self
            .cfg
            .subscriptions
            .get(index)
            .map(|s| s.topic.clone())
            .unwrap_or_default();
        if let Err(e) = client.try_ack(&p) {
            self.stats.ack_errors.fetch_add(1, Ordering::Relaxed);
            log::warn!("mqtt ack not queued: source={} error=\"{e}\"", self.source);
        }
        let pushed = {
            let mut b = self.buffers();
            let pushed = b.push(&device, p);
            self.stats.buffered.store(b.len() as u64, Ordering::Relaxed);
            pushed
        };
        if let Pushed::Overflowed(_) | Pushed::Replaced(_) = pushed {
            // Acked on receipt and now dropped: a loss of this source.
            if let Some(engine) = engine {
                engine.ledger.lost(&self.source, Cause::Dropped);
            }
            let total = self.stats.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if total.is_power_of_two() {
                log::warn!(
                    "mqtt source buffer full, oldest message dropped: source={} subscription={device} dropped_total={total}",
                    self.source
                );
            }
        }
        self.ready.notify_one();
    }

    async fn work(self: Arc<Self>, engine: Arc<Engine>, shutdown: Shutdown) {
        let mut in_flight = FuturesUnordered::new();
        loop {
            while in_flight.len() < MAX_IN_FLIGHT {
                let next = {
                    let mut b = self.buffers();
                    let next = b.pop();
                    self.stats.buffered.store(b.len() as u64, Ordering::Relaxed);
                    next
                };
                let Some((_, p)) = next else {
                    break;
                };
                in_flight.push(self.offer(&engine, p));
            }
            tokio::select! {
                _ = shutdown.wait() => break,
                _ = self.ready.notified() => {},
                Some(()) = in_flight.next(), if !in_flight.is_empty() => {},
            }
        }
        while in_flight.next().await.is_some() {}
        let left = self.buffers().drain().len();
        if left > 0 {
            log::warn!(
                "mqtt source stopped with buffered messages, lost: source={} messages={left}",
                self.source
            );
        }
    }

    async fn offer(&self, engine: &Engine, p: Publish) {
        let record = match Record::from_json(self.source.clone(), p.topic.clone(), &p.payload) {
            Ok(r) => r,
            Err(_) => {
                self.stats.not_json.fetch_add(1, Ordering::Relaxed);
                let text = String::from_utf8_lossy(&p.payload).into_owned();
                Record::from_value(self.source.clone(), p.topic.clone(), &Value::String(text))
            }
        };
        match engine.offer(record).await {
            Settlement::Stored | Settlement::Unrouted | Settlement::DeadLettered { .. } => {
                self.stats.stored.fetch_add(1, Ordering::Relaxed);
            }
            Settlement::Retry { sink, .. } => {
                // MQTT acked it on receipt: the refusal is a loss.
                engine.ledger.lost(&self.source, Cause::Dropped);
                let total = self.stats.refused.fetch_add(1, Ordering::Relaxed) + 1;
                if total.is_power_of_two() {
                    log::error!(
                        "alert: source={} message=\"a full sink refused MQTT records, lost (MQTT acks on receipt; use NATS JetStream for no-loss)\" sink={sink} refused_total={total}",
                        self.source
                    );
                }
            }
            Settlement::Failed { sink, reason } => {
                engine.ledger.lost(&self.source, Cause::Failed);
                let total = self.stats.failed.fetch_add(1, Ordering::Relaxed) + 1;
                log::error!(
                    "mqtt record lost, a sink failed: source={} sink={sink} reason=\"{reason}\" failed_total={total}",
                    self.source
                );
            }
        }
    }
}
