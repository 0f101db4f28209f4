//! Preprocess for push (`connector.preprocess`): deadband, aggregation and heartbeat rules
//! applied to records on their way into the push queue only.

pub mod config;
mod stage;

pub use config::{validate_preprocess, AggFn, Deadband, PreprocessRule, RawPreprocessRule};
pub use stage::{Commit, Output, Preprocess, MAX_POINTS};
