//! The durable stores: LMDB environments under the data dir. The busy ones (push queue, event
//! history) each have one group-commit writer thread; the dead-letter queue writes directly.
//!
//! - [`push_queue`]: `push_queue.db`, the FIFO the uplink drains, and the push dead-letter
//!   table beside it in the same environment (so moving a row there is one transaction).
//! - [`dead_letters`]: `dead_letters.db`, the pipeline dead-letter queue, the webhook inbox and
//!   the webhooks' replay windows.
//! - [`events`]: `events.db`, the event history of the storage sink, by source and time.
//! - [`file`]: the small files beside them, written whole (checkpoints, sequence numbers,
//!   config revisions).
//!
//! Only [`lmdb`] contains `unsafe` code (opening and resizing a memory map).

pub mod dead_letters;
pub mod events;
pub mod file;
pub mod lmdb;
pub mod queue;
pub mod writer;

pub use dead_letters::{
    DeadLetterEntry, DeadLetterQueue, DlqCounts, DlqFilter, DlqState, NewDeadLetter,
};
pub use events::{EventCounters, EventStore};
pub use queue::{DeadLetter, DurableQueue, QueueCounters, Row};

use std::fmt;

/// An error of a durable store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The memory map is full (`MDB_MAP_FULL`); the map was grown for the next transaction.
    MapFull,
    /// An LMDB or I/O error; the transaction was rolled back and nothing of it is stored.
    Io(String),
    /// The writer's channel is full: the local disk is not keeping up. Nothing was stored.
    Busy,
    /// The writer has stopped because the process is shutting down. Nothing was stored.
    Closed,
}

impl StoreError {
    /// Every store error leaves the record with its source, which may try again later.
    pub fn is_retriable(&self) -> bool {
        true
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MapFull => write!(f, "LMDB map full"),
            Self::Io(e) => write!(f, "write failed: {e}"),
            Self::Busy => write!(f, "writer queue full"),
            Self::Closed => write!(f, "store closed"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<heed::Error> for StoreError {
    fn from(e: heed::Error) -> Self {
        match e {
            heed::Error::Mdb(heed::MdbError::MapFull) => Self::MapFull,
            other => Self::Io(other.to_string()),
        }
    }
}
