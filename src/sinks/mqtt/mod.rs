//! The `mqtt` sink: publishes records to a topic template with a QoS and retain flag through a
//! client queue of 1024 that refuses when full (see [`sink`]).

pub mod config;
mod sink;

pub use config::{MqttSinkConfig, RawMqttSink};
pub use sink::{MqttSink, MqttSinkStats};
