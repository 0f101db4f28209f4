//! The push sink: records go into the push queue, and the uplink drains it upstream;
//! [`preprocess`] (deadband, aggregation) runs in front of the queue.

pub mod config;
pub mod preprocess;
mod sink;
mod uplink;
mod volatile;

pub use sink::{Drain, PushSink, QueueStatus};
pub use uplink::{refusal, Uplink, UplinkStatus};
pub use volatile::{VolatileBuffer, VOLATILE_QUOTA};
