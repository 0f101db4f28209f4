//! Sources: where records come from. Each kind is one folder (`mod.rs`, `config.rs`, the
//! runtime, tests). A source talks to the engine through one call, `offer(record)`, and speaks
//! the settlement back in its own protocol.
//!
//! - [`ingest`]: the HTTP ingest API, `POST /api/ingest/{source}/{id}` (one record) and
//!   `POST /api/ingest/{source}` (a batch).
//! - [`webhook`]: signed webhooks, `POST /api/hooks/{name}`.
//! - [`devices`]: the `devices:` list shared by the polled protocols, and [`templates`]: the
//!   device templates expanded into it; [`catalogue`]: every device's points and their live
//!   values, whatever the protocol; [`status`]: what every device shows, one type for all; [`modbus`]: Modbus TCP and RTU polling; [`opcua`]:
//!   OPC-UA reads and subscriptions; [`hints`]: what a device's error means and what to try,
//!   in a technician's words.
//! - [`nats`]: NATS JetStream consumers (ack once stored, nak with backoff when refused).
//! - [`mqtt`]: MQTT subscriptions (acked on receipt; losses counted).
//! - [`buffers`]: the per-device buffers of the message sources.
//! - [`hold`]: hold-then-drop for polled sources; [`pollers`]: their own thread and runtime.
//! - [`devices`]: the `devices:` list of every protocol; [`opcua`]: OPC-UA devices, read by
//!   batched Read requests or subscriptions.
//! - [`schedule`]: ticks at an interval or on a cron expression (missed ticks not replayed).
//! - [`backfill`]: records from a JSONL or CSV file, retried until accepted, resumed from a
//!   durable checkpoint.
//! - [`live`]: the ingest, webhook, NATS, MQTT, schedule and backfill sources as a reload
//!   sees them: each started, stopped or replaced alone.

pub mod backfill;
pub mod buffers;
pub mod catalogue;
pub mod devices;
pub mod driver;
pub mod hints;
pub mod hold;
pub mod ingest;
pub mod live;
pub mod modbus;
pub mod mqtt;
pub mod nats;
pub mod opcua;
pub mod poll_loop;
pub mod pollers;
pub mod s7;
pub mod schedule;
pub mod status;
pub mod templates;
pub mod webhook;

use crate::record::Settlement;

/// What an HTTP source (ingest API, webhook) tells its caller; the HTTP layer turns it into a
/// status code and a JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceOutcome {
    /// 200: stored by every sink it reached (or parked in the dead-letter queue, or taken by
    /// no flow).
    Stored {
        /// The record id.
        id: String,
        /// `stored`, `dead_lettered` or `unrouted`.
        result: &'static str,
        /// The dead-letter entry, when one was made.
        dead_letter_id: Option<u64>,
    },
    /// 200: durably received; the flow runs after the answer (webhook `on_receipt`).
    Accepted {
        /// The record id.
        id: String,
    },
    /// 503 + `Retry-After`: a sink it reaches is full under `block`; nothing happened.
    Retry {
        /// The refusing sink.
        sink: String,
        /// Seconds to wait.
        after_secs: u64,
    },
    /// 503: storing failed; nothing is acknowledged, retry later.
    Failed {
        /// The failing sink.
        sink: String,
        /// Why.
        reason: String,
    },
    /// 400: the body is not JSON.
    Malformed {
        /// The parser's reason.
        reason: String,
    },
}

impl SourceOutcome {
    /// The outcome for a settlement of record `id`.
    pub fn from_settlement(id: String, settlement: Settlement) -> Self {
        match settlement {
            Settlement::Stored => Self::Stored {
                id,
                result: "stored",
                dead_letter_id: None,
            },
            Settlement::Unrouted => Self::Stored {
                id,
                result: "unrouted",
                dead_letter_id: None,
            },
            Settlement::DeadLettered { id: entry } => Self::Stored {
                id,
                result: "dead_lettered",
                dead_letter_id: entry,
            },
            Settlement::Retry { sink, after } => Self::Retry {
                sink,
                after_secs: after.as_secs().max(1),
            },
            Settlement::Failed { sink, reason } => Self::Failed { sink, reason },
        }
    }
}
