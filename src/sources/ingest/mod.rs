//! The HTTP ingest API source.

pub mod config;
mod source;

pub use source::{IngestSource, IngestStats};
