//! The storage sink: the local event history (`events.db`), by source and time, bounded by a
//! quota and a retention. Records are acknowledged after their commit; the API reads them back.

pub mod config;
mod sink;

pub use config::{RawStorage, StorageConfig};
pub use sink::{StorageSink, StorageStatus, SWEEP_EVERY};
