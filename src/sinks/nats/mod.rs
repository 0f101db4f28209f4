//! The `nats` sink: publishes records to a subject template, JetStream with an ack when the
//! subject belongs to a stream, core otherwise (see [`sink`]).

pub mod config;
mod sink;

pub use config::{NatsSinkConfig, RawNatsSink};
pub use sink::{NatsSink, NatsSinkStats};
