//! Broker connections shared by sources, sinks and alert channels: [`nats`] and [`mqtt`]
//! (config, validation without I/O, and opening a client), and their [`tls`].

pub mod mqtt;
pub mod nats;
pub mod tls;
