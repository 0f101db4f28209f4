//! The push sink: records go into the push queue, and the uplink drains it upstream.

pub mod config;
mod sink;
mod uplink;
mod volatile;

pub use sink::{Drain, PushSink, QueueStatus};
pub use uplink::{Uplink, UplinkStatus};
pub use volatile::{VolatileBuffer, VOLATILE_QUOTA};
