//! Sinks: where records are delivered. Each kind is one folder (`mod.rs`, `config.rs`, the
//! runtime, tests). Sinks are reached only through the engine.
//!
//! - [`push`]: the durable LMDB push queue (or the volatile buffer) and its HTTP uplink.
//! - [`nats`]: publishes to NATS (JetStream with ack, or core + flush); [`mqtt`]: publishes to
//!   an MQTT broker through a bounded client queue.

pub mod mqtt;
pub mod nats;
pub mod push;
pub mod storage;
