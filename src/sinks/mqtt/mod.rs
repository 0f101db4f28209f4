//! The `mqtt` sink: publishes records to a topic template with a QoS and retain flag through a
//! client queue of 1024 that refuses when full, and settles a QoS 1 record only after the
//! broker's PUBACK (see [`sink`], and [`acks`] for how a PUBACK finds its publish).

pub mod acks;
pub mod config;
mod sink;

pub use config::{MqttSinkConfig, RawMqttSink};
pub use sink::{MqttSink, MqttSinkStats};
