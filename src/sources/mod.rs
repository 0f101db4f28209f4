//! Sources: where records come from. Each kind is one folder (`mod.rs`, `config.rs`, the
//! runtime, tests). A source talks to the engine through one call, `offer(record)`, and speaks
//! the settlement back in its own protocol.
//!
//! - [`ingest`]: the HTTP ingest API, `POST /api/ingest/{source}/{id}`.

pub mod ingest;
