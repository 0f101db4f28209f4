//! Alerts: every bounded queue and every alerted loss counter feeds one state machine, checked
//! every few seconds; each change goes to the log and to the channels of `telemetry.alerts`.
//!
//! - The state machines (`ok` / `high` / `full` for a queue, `critical` / `ok` for a loss
//!   counter) and their timing live beside the gates whose queues they watch, in
//!   [`crate::admission::level`].
//! - [`alert`]: the alert's JSON and its log line.
//! - [`hub`]: the checker and the open alerts; `report.rs` shows them as the `queues` /
//!   `alerts` / `alert_channels` of `/api/status` and the levels on `/metrics`.
//! - [`outages`]: the problems of [`crate::health`] alerted once they last
//!   `telemetry.alerts.after_secs`, with their recovery.
//! - [`queues`]: what the hub watches in a running connector.
//! - [`config`], [`channels`], [`brokers`]: `telemetry.alerts` and its channels (webhook, MQTT,
//!   NATS), each behind its own bounded queue so that sending never blocks the checker.

pub mod alert;
pub mod brokers;
pub mod channels;
pub mod config;
pub mod hub;
pub mod outages;
pub mod queues;
mod report;

pub use alert::Alert;
pub use channels::ChannelHandle;
pub use config::{AlertsConfig, RawTelemetry};
pub use hub::{
    Beat, Component, ComponentReport, Hub, Queue, QueueKind, QueueReading, QueueReport, Watched,
};

#[cfg(test)]
mod tests;
