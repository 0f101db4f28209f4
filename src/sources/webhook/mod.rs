//! The signed webhook source: `POST /api/hooks/{name}`.

pub mod config;
mod replay;
pub mod signature;
mod source;

pub use source::{recover_inbox, WebhookSource, WebhookStats};
