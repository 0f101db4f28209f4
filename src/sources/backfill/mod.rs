//! Backfills: records read from a file (JSONL, or CSV with a header row) into the flows as
//! source `backfill/<name>`, retried until accepted, with a durable checkpoint so a restart
//! resumes where the last one stopped.

pub mod checkpoint;
pub mod config;
pub mod parse;
mod reader;
mod source;

pub use config::{validate_backfills, BackfillConfig, Format, RawBackfill};
pub use source::{BackfillSource, BackfillStats};
