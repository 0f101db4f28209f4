//! The `mqtt` sink: records are queued in the client's queue ([`CLIENT_QUEUE`], 1024) and
//! published by its event loop. A full queue refuses, and the source is told to retry:
//! at admission (before any node runs) counted `blocked`, at delivery counted `dropped`.
//!
//! The client has a stable id and `clean_session: false`, so QoS 1 messages in flight are
//! sent again after a reconnect or a broker restart. The queue is memory: records in it are
//! lost if the process dies (deliver through NATS JetStream or the push queue for that).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rumqttc::{AsyncClient, Event, EventLoop, Incoming, Outgoing, QoS};
use serde_json::{json, Value};

use super::config::MqttSinkConfig;
use crate::admission::{Gate, OnFull, Refused};
use crate::brokers::mqtt::{options, reconnect_delay, CLIENT_QUEUE};
use crate::flow::path::Fields;
use crate::record::Record;
use crate::shutdown::Shutdown;
use crate::sinks::nats::SinkError;

/// How long a refused source is told to wait.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Counters of the `mqtt` sink.
#[derive(Debug, Default)]
pub struct MqttSinkStats {
    /// Records queued for publishing.
    pub queued: AtomicU64,
    /// Publishes the event loop sent (retransmissions included).
    pub sent: AtomicU64,
    /// QoS 1 publishes the broker acknowledged.
    pub acked: AtomicU64,
    /// Records refused at delivery because the queue was full (the source retries).
    pub dropped: AtomicU64,
    /// Records refused at admission because the queue was full (the source retries).
    pub blocked: AtomicU64,
    /// Records that could not be published (bad topic): the source was told to retry.
    pub failed: AtomicU64,
    /// True while connected.
    pub connected: AtomicBool,
    /// The last error.
    pub last_error: Mutex<Option<String>>,
}

/// The `mqtt` sink.
pub struct MqttSink {
    cfg: MqttSinkConfig,
    client: AsyncClient,
    eventloop: Mutex<Option<EventLoop>>,
    gate: Arc<Gate>,
    /// Its counters.
    pub stats: MqttSinkStats,
}

impl MqttSink {
    /// A sink from its config; [`MqttSink::run`] drives its event loop.
    pub fn new(cfg: MqttSinkConfig) -> Result<Self, String> {
        let opts = options(&cfg.connection, "sink")?;
        let (client, eventloop) = AsyncClient::new(opts, CLIENT_QUEUE);
        Ok(Self {
            cfg,
            client,
            eventloop: Mutex::new(Some(eventloop)),
            gate: Arc::new(Gate::new(OnFull::EvictOldest, u64::MAX, 0, 0, 0)),
            stats: MqttSinkStats::default(),
        })
    }

    /// Its admission gate (never refuses; the queue does).
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// Records queued and not yet sent (an estimate from the event loop's events).
    pub fn queue_depth(&self) -> u64 {
        let q = self.stats.queued.load(Ordering::Relaxed);
        let s = self.stats.sent.load(Ordering::Relaxed);
        q.saturating_sub(s)
    }

    /// Refuses, before any node runs, while the queue is full.
    pub fn admit(&self) -> Result<(), Refused> {
        if self.queue_depth() >= CLIENT_QUEUE as u64 {
            self.stats.blocked.fetch_add(1, Ordering::Relaxed);
            return Err(Refused { after: RETRY_AFTER });
        }
        Ok(())
    }

    /// Queues `record` for publishing.
    pub async fn deliver(&self, record: &Record) -> Result<(), SinkError> {
        let topic = match self.cfg.topic.render(&Fields::read(record)) {
            Ok(Value::String(s)) => s,
            Ok(other) => other.to_string(),
            Err(e) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                return Err(SinkError::Failed(e));
            }
        };
        if topic.is_empty() || topic.contains(['+', '#']) {
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
            return Err(SinkError::Failed(format!("topic {topic:?} is not valid")));
        }
        let qos = if self.cfg.qos == 0 {
            QoS::AtMostOnce
        } else {
            QoS::AtLeastOnce
        };
        match self
            .client
            .try_publish(topic, qos, self.cfg.retain, record.to_line())
        {
            Ok(()) => {
                self.stats.queued.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(_) => {
                let total = self.stats.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if total.is_power_of_two() {
                    log::warn!("mqtt sink queue full, record refused: dropped_total={total}");
                }
                Err(SinkError::Refused(Refused { after: RETRY_AFTER }))
            }
        }
    }

    /// `sinks[]` entry of `/api/status`.
    pub fn status(&self) -> Value {
        let s = &self.stats;
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        json!({
            "name": "mqtt",
            "dropped": l(&s.dropped),
            "blocked": l(&s.blocked),
            "failed": l(&s.failed),
            "queued": l(&s.queued),
            "sent": l(&s.sent),
            "acked": l(&s.acked),
            "queue_depth": self.queue_depth(),
            "queue_capacity": CLIENT_QUEUE,
            "connected": s.connected.load(Ordering::Relaxed),
            "durable": false,
            "last_error": *s.last_error.lock().unwrap_or_else(|e| e.into_inner()),
        })
    }

    /// Drives the event loop until shutdown, reconnecting with back-off.
    pub async fn run(self: Arc<Self>, shutdown: Shutdown) {
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
                Ok(Event::Incoming(Incoming::ConnAck(ack))) => {
                    failures = 0;
                    self.stats.connected.store(true, Ordering::Relaxed);
                    *self
                        .stats
                        .last_error
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = None;
                    log::info!(
                        "mqtt sink connected: session_present={}",
                        ack.session_present
                    );
                }
                Ok(Event::Incoming(Incoming::PubAck(_))) => {
                    self.stats.acked.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Event::Outgoing(Outgoing::Publish(_))) => {
                    self.stats.sent.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {}
                Err(e) => {
                    failures += 1;
                    self.stats.connected.store(false, Ordering::Relaxed);
                    let wait = reconnect_delay(failures, self.cfg.connection.reconnect_max);
                    if failures == 1 || failures.is_power_of_two() {
                        log::warn!(
                            "mqtt sink disconnected, reconnecting: attempt={failures} retry_in_ms={} error=\"{e}\"",
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
        let depth = self.queue_depth();
        if depth > 0 {
            log::warn!("mqtt sink stopped with queued records: records={depth}");
        }
    }
}
