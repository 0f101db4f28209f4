//! Sinks: where records are delivered. A sink is a named instance of a kind; any number of
//! instances of a kind may exist. Each kind is one folder (`mod.rs`, `config.rs`, the runtime,
//! tests); [`Sink`] (in `sink.rs`) is the one contract the rest of the program uses, and
//! [`Report`] the one thing it reads of a sink. Sinks are reached only through the engine.
//!
//! - [`push`]: a durable LMDB queue (or the volatile buffer) and its HTTP uplink.
//! - [`storage`]: a local event history.
//! - [`clickhouse`], [`postgres`]: database tables, through a bounded memory backlog
//!   ([`backlog`]) that is lost if the process crashes, or through a `queue: disk`.
//! - [`nats`]: publishes to NATS (JetStream with ack, or core + flush); [`mqtt`]: publishes to
//!   an MQTT broker and waits for the PUBACK.
//! - [`sparkplug`]: the connector as a Sparkplug B edge node, behind a disk queue that holds
//!   what the primary host missed.
//! - [`queue`]: the durable queue and its deliverer, in front of push and of any sink with
//!   `queue: disk`.
//! - [`config`]: the `sinks:` list and the top-level sections that each make one sink.
//! - [`report`]: what a sink shows to `/api/status`, `/metrics`, the alert hub and the ledger.
//! - `started.rs`: the sinks while they run, each stopped alone by a reload ([`Started`]).

pub mod backlog;
pub mod clickhouse;
pub mod config;
pub mod mqtt;
pub mod nats;
pub mod postgres;
pub mod push;
pub mod queue;
pub mod report;
mod sink;
pub mod sparkplug;
mod started;
pub mod storage;

pub use config::{SinkConfig, SinkSpec};
pub use report::Report;
pub use sink::{
    queue_file, BuildError, Delivered, DeliveryError, Held, Running, Sink, Sinks, StartContext,
    TOP_LEVEL_DOCUMENTS,
};
pub use started::{End, Started, STOP_WAIT};
