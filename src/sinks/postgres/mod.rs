//! The Postgres sink: rows batched in a bounded memory backlog and written with binary `COPY`
//! (`tokio-postgres`) from the sink's own thread and runtime; TLS through rustls (ring) when the
//! URL says `sslmode=require`.

pub mod config;
mod encode;
mod sink;

pub use config::{PostgresConfig, RawPostgres};
pub use sink::PostgresSink;
