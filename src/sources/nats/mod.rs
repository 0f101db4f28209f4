//! NATS JetStream sources: durable pull consumers whose messages are acked only once stored,
//! and nak'd with the consumer backoff when a sink refuses (see [`source`]).

pub mod config;
mod source;

pub use config::{NatsConfig, NatsSourceConfig, RawNats};
pub use source::{nak_delay, NatsSource, NatsSourceStats};
