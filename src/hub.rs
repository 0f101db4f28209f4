//! The DataHub: a broadcast of new values and status changes for the status page's live view.
//!
//! It is **not a delivery path** (spec: "DataHub broadcast (256) | slow WebSocket clients skip
//! messages | live view only"). Its rules:
//! - Publishing never waits and costs nothing while nobody watches: a message is built only
//!   when a receiver exists, and a tokio broadcast send never blocks.
//! - The channel holds [`CAPACITY`] messages. A client that falls behind by more skips the
//!   oldest ones; the skip is counted (`opex_connector_live_skipped_total`) and the client
//!   carries on with the newest.
//! - At most [`MAX_CLIENTS`] watch at once; further ones are refused and counted.
//! - A value's key and payload are shown only for device polls and schedule ticks, the
//!   payload only up to [`MAX_PAYLOAD_BYTES`]: records from callers (webhooks, ingest, NATS,
//!   MQTT) may carry business data in both (an order number as the key), which stays behind
//!   the admin token (`/api/events`); their messages carry the payload's size instead.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, OwnedSemaphorePermit, Semaphore};

use crate::record::{Record, Settlement};

/// Messages the broadcast channel holds for its slowest receiver (the spec's 256).
pub const CAPACITY: usize = 256;
/// Most live clients at once.
pub const MAX_CLIENTS: usize = 16;
/// Largest payload a value message carries; a larger one is replaced by its size.
pub const MAX_PAYLOAD_BYTES: usize = 4096;

/// Sources whose payloads the live view shows: machine values (every device's, and the
/// schedules' ticks), not callers' data.
fn is_public(source: &str) -> bool {
    crate::sources::devices::is_device_source(source) || source.starts_with("schedule/")
}

/// The hub's counters.
#[derive(Debug, Default)]
pub struct HubStats {
    /// Messages published (sent while at least one client watched).
    pub published_total: AtomicU64,
    /// Messages lagging clients skipped, summed over clients.
    pub skipped_total: AtomicU64,
    /// Clients refused because [`MAX_CLIENTS`] were connected.
    pub refused_clients_total: AtomicU64,
}

/// The broadcast of live messages (JSON text, shared between receivers).
pub struct DataHub {
    tx: broadcast::Sender<Arc<str>>,
    clients: Arc<Semaphore>,
    /// Its counters.
    pub stats: Arc<HubStats>,
}

impl Default for DataHub {
    fn default() -> Self {
        Self::new()
    }
}

/// A record seen on its way in, kept (only while someone watches) until its settlement is
/// known.
pub struct Watched {
    source: String,
    /// `None` for callers' records: their keys are their data.
    key: Option<String>,
    ts_ms: u64,
    payload: Option<Box<RawValue>>,
    payload_bytes: usize,
}

#[derive(Serialize)]
struct ValueMessage<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    source: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    time_ms: u64,
    result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a RawValue>,
    payload_bytes: usize,
}

impl DataHub {
    /// A hub with nobody watching.
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(CAPACITY);
        Self {
            tx,
            clients: Arc::new(Semaphore::new(MAX_CLIENTS)),
            stats: Arc::new(HubStats::default()),
        }
    }

    /// True while at least one client watches.
    pub fn watched(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    /// Clients watching now.
    pub fn clients(&self) -> usize {
        MAX_CLIENTS - self.clients.available_permits()
    }

    /// Sends one message to every client; does nothing while nobody watches. Never waits.
    pub fn publish(&self, message: Arc<str>) {
        if !self.watched() {
            return;
        }
        // An error means the last receiver left meanwhile: nothing to do.
        if self.tx.send(message).is_ok() {
            self.stats.published_total.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Notes a record a source offers, when someone watches (else `None`, at no cost beyond
    /// one atomic load).
    pub fn watch(&self, record: &Record) -> Option<Watched> {
        if !self.watched() {
            return None;
        }
        let text = record.payload.get();
        let public = is_public(&record.source);
        Some(Watched {
            source: record.source.clone(),
            key: public.then(|| record.key.clone()),
            ts_ms: record.ts_ms,
            payload: (public && text.len() <= MAX_PAYLOAD_BYTES).then(|| record.payload.clone()),
            payload_bytes: text.len(),
        })
    }

    /// Publishes a watched record with how it was settled.
    pub fn publish_value(&self, w: Watched, settlement: &Settlement) {
        let result = match settlement {
            Settlement::Stored => "stored",
            Settlement::Unrouted => "unrouted",
            Settlement::Retry { .. } => "retry",
            Settlement::DeadLettered { .. } => "dead_lettered",
            Settlement::Failed { .. } => "failed",
        };
        let message = ValueMessage {
            kind: "value",
            source: &w.source,
            key: w.key.as_deref(),
            time_ms: w.ts_ms,
            result,
            payload: w.payload.as_deref(),
            payload_bytes: w.payload_bytes,
        };
        if let Ok(text) = serde_json::to_string(&message) {
            self.publish(text.into());
        }
    }

    /// A new client's subscription, or `None` (counted) when [`MAX_CLIENTS`] watch already.
    pub fn subscribe(&self) -> Option<Subscription> {
        let Ok(permit) = Arc::clone(&self.clients).try_acquire_owned() else {
            self.stats
                .refused_clients_total
                .fetch_add(1, Ordering::Relaxed);
            return None;
        };
        Some(Subscription {
            rx: self.tx.subscribe(),
            stats: Arc::clone(&self.stats),
            _permit: permit,
        })
    }
}

/// One client's view of the hub; its slot is freed when dropped.
pub struct Subscription {
    rx: broadcast::Receiver<Arc<str>>,
    stats: Arc<HubStats>,
    _permit: OwnedSemaphorePermit,
}

impl Subscription {
    /// The next message; a lag skips to the oldest message still held and counts the skip.
    /// `None` once the hub is gone.
    pub async fn next(&mut self) -> Option<Arc<str>> {
        loop {
            match self.rx.recv().await {
                Ok(m) => return Some(m),
                Err(RecvError::Lagged(n)) => {
                    self.stats.skipped_total.fetch_add(n, Ordering::Relaxed);
                    log::debug!("live client lagged behind: skipped={n}");
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn record(source: &str, payload: &Value) -> Record {
        Record::from_value(source, "k", payload)
    }

    #[test]
    fn nothing_is_built_or_sent_while_nobody_watches() {
        let hub = DataHub::new();
        assert!(hub.watch(&record("modbus/a", &json!(1))).is_none());
        hub.publish("x".into());
        assert_eq!(hub.stats.published_total.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_lagging_client_skips_the_oldest_messages_and_the_skip_is_counted() {
        let hub = DataHub::new();
        let mut slow = hub.subscribe().expect("a slot");
        let mut fast = hub.subscribe().expect("a slot");
        let total = CAPACITY + 44;
        for i in 0..total {
            hub.publish(i.to_string().into());
            // The fast client keeps up.
            assert_eq!(fast.next().await.as_deref(), Some(i.to_string().as_str()));
        }
        // The slow client read nothing: it skips the 44 oldest and goes on with the rest.
        assert_eq!(slow.next().await.as_deref(), Some("44"));
        assert_eq!(hub.stats.skipped_total.load(Ordering::Relaxed), 44);
        for i in 45..total {
            assert_eq!(slow.next().await.as_deref(), Some(i.to_string().as_str()));
        }
        assert_eq!(
            hub.stats.published_total.load(Ordering::Relaxed),
            total as u64
        );
    }

    #[test]
    fn clients_beyond_the_cap_are_refused_and_counted() {
        let hub = DataHub::new();
        let held: Vec<Subscription> = (0..MAX_CLIENTS).filter_map(|_| hub.subscribe()).collect();
        assert_eq!(held.len(), MAX_CLIENTS);
        assert_eq!(hub.clients(), MAX_CLIENTS);
        assert!(hub.subscribe().is_none());
        assert_eq!(hub.stats.refused_clients_total.load(Ordering::Relaxed), 1);
        drop(held);
        assert_eq!(hub.clients(), 0);
        assert!(hub.subscribe().is_some());
    }

    #[tokio::test]
    async fn device_payloads_are_shown_and_callers_keys_and_payloads_are_not() {
        let hub = DataHub::new();
        let mut sub = hub.subscribe().expect("a slot");
        let device = record("modbus/press-1", &json!({"temp": 21.5}));
        let w = hub.watch(&device).expect("watched");
        hub.publish_value(w, &Settlement::Stored);
        let m: Value = serde_json::from_str(&sub.next().await.expect("a message")).unwrap();
        assert_eq!(m["type"], "value");
        assert_eq!(m["source"], "modbus/press-1");
        assert_eq!(m["result"], "stored");
        assert_eq!(m["payload"]["temp"], 21.5);

        let order = record("ingest/orders", &json!({"card": "4111"}));
        let w = hub.watch(&order).expect("watched");
        hub.publish_value(
            w,
            &Settlement::Retry {
                sink: "push".into(),
                after: std::time::Duration::from_secs(1),
            },
        );
        let m: Value = serde_json::from_str(&sub.next().await.expect("a message")).unwrap();
        assert_eq!(m["result"], "retry");
        assert!(m.get("payload").is_none(), "{m}");
        assert!(m.get("key").is_none(), "a caller's key is its data: {m}");
        assert_eq!(m["payload_bytes"], 15);

        let big = record(
            "modbus/press-1",
            &json!({"pad": "x".repeat(MAX_PAYLOAD_BYTES)}),
        );
        let w = hub.watch(&big).expect("watched");
        hub.publish_value(w, &Settlement::Stored);
        let m: Value = serde_json::from_str(&sub.next().await.expect("a message")).unwrap();
        assert!(
            m.get("payload").is_none(),
            "a large payload is replaced by its size"
        );
    }
}
