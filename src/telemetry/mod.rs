//! Counters, gauges and typed internal events.
//!
//! Every counted event is one function in [`events`] that both logs and counts, so the log line
//! and the metric can never disagree. [`prometheus`] renders the text format of `/metrics`.

pub mod events;
pub mod prometheus;
