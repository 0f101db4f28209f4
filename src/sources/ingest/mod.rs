//! The HTTP ingest API source.

pub mod config;
mod ingest;

pub use ingest::{IngestOutcome, IngestSource, IngestStats};
