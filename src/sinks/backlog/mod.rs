//! What the database sinks (`clickhouse`, `postgres`) share: the `sink_batch:` and `columns:`
//! config, the bounded memory backlog with its insert thread, and the column mapping.

pub mod columns;
pub mod config;
mod queue;

pub use config::{Column, RawColumn, RawSinkBatch, SinkBatchConfig};
pub use queue::{
    Backlog, BacklogCounters, BacklogStatus, InsertError, Inserter, PushError, Row, MEMORY_NOTE,
    RETRY_INITIAL, RETRY_MAX, STOP_DEADLINE,
};

#[cfg(test)]
mod tests;
