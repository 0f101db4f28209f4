//! MQTT sources: subscriptions whose messages are acked on receipt and offered to the engine;
//! losses after the ack are counted (see [`source`]). Use NATS JetStream for no-loss.

pub mod config;
mod source;

pub use config::{MqttConfig, MqttSourceConfig, RawMqtt};
pub use source::{MqttSource, MqttSourceStats};
