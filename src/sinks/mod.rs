//! Sinks: where records are delivered. Each kind is one folder (`mod.rs`, `config.rs`, the
//! runtime, tests). Sinks are reached only through the engine.
//!
//! - [`push`]: the durable LMDB push queue (or the volatile buffer) and its HTTP uplink.
//! - [`storage`]: the local event history.
//! - [`clickhouse`], [`postgres`]: database tables, through a bounded memory backlog
//!   ([`backlog`]) that is lost if the process crashes.
//! - [`nats`]: publishes to NATS (JetStream with ack, or core + flush); [`mqtt`]: publishes to
//!   an MQTT broker through a bounded client queue.

pub mod backlog;
pub mod clickhouse;
pub mod mqtt;
pub mod nats;
pub mod postgres;
pub mod push;
pub mod storage;
