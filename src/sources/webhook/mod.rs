//! The signed webhook source: `POST /api/hooks/{name}`.

pub mod config;
mod inbox;
mod replay;
mod request;
pub mod signature;
mod source;

pub use inbox::{recover_inbox, unfinished_inbox};
pub use request::{InProgress, WAIT_FOR_COPY};
pub use source::{Verified, WebhookSource, WebhookStats};
