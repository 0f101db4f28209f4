//! The HTTP ingest API source: one record a request (`source.rs`) or a batch (`batch.rs`).

pub mod batch;
pub mod config;
mod source;

pub use source::{BatchOutcome, IngestSource, IngestStats};
