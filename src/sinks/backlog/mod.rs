//! What the database sinks (`clickhouse`, `postgres`) share: the `sink_batch:` and `columns:`
//! config, the bounded memory backlog with its insert thread, the column mapping, and
//! [`TableDestination`], which inserts from a `queue: disk` instead of the backlog.

pub mod columns;
pub mod config;
mod queue;

pub use config::{Column, RawColumn, RawSinkBatch, SinkBatchConfig};
mod table;

pub use queue::{
    Backlog, BacklogCounters, BacklogStatus, InsertError, Inserter, PushError, Row, MEMORY_NOTE,
    RETRY_INITIAL, RETRY_MAX, STOP_DEADLINE,
};
pub use table::TableDestination;

#[cfg(test)]
mod tests;
