//! The `sparkplug` sink: the connector as a Sparkplug B 3.0 edge node, its polled devices as
//! Sparkplug devices, stored and forwarded.
//!
//! Records reach it through a disk queue (always): it publishes only while it is connected
//! and, with a `primary_host_id`, while that host is online; meanwhile records wait on disk,
//! and once the host is back the births go out first, then what waited, in order, flagged
//! historical, then live data. Rows leave the queue only once the broker has the messages.
//!
//! - [`config`]: the entry's keys (`group_id`, `edge_node_id`, `primary_host_id`, the
//!   queue, deadbands) and the polled devices' metric definitions, validated without I/O.
//! - [`proto`]: the Sparkplug B protobuf payload, written out with prost's derive macros.
//! - [`values`]: JSON values to metric values and datatypes, and back for commands.
//! - [`node`]: the node's state without I/O: devices, metrics, aliases, seq, the messages of
//!   births, records, device deaths and commands.
//! - [`bdseq`]: the `bdSeq` file, stored before every connection.
//! - [`session`]: the MQTT sessions: Will, STATE, births, batches, rebirth, DCMD.
//! - `sink.rs`: [`SparkplugSink`], its counters and its report.

pub mod bdseq;
pub mod config;
pub mod node;
pub mod proto;
pub mod session;
mod sink;
pub mod values;

pub use config::{RawSparkplugSink, SparkplugSinkConfig};
pub use sink::{SparkplugSink, SparkplugStats};
