//! The push sink: records go into its queue (durable, or the volatile buffer), and the uplink
//! drains it to an HTTP receiver; [`preprocess`] (deadband, aggregation) runs in front of the
//! queue.

pub mod config;
pub mod preprocess;
mod sink;
mod uplink;
mod volatile;

pub use sink::{queue_file, PushSink};
pub use uplink::{judge, HttpUplink, Refusal};
pub use volatile::{Inner as HeldBuffer, VolatileBuffer, VOLATILE_QUOTA};
