//! The loss ledger: for every source, what it offered, what it was released from, and where
//! each of those records is now; for every sink, what it took, delivered and still holds.
//!
//! The per-source identity is `acked = delivered + pending + dead_lettered + losses`, where
//! the losses are the causes of the delivery promise's audit table. The ledger is kept in
//! parts, each of which balances on its own, and `GET /api/ledger` adds them up:
//!
//! | part | kept | counts |
//! | --- | --- | --- |
//! | engine | memory | offers, refusals, records acked without a queue copy: delivered at once (storage, NATS, MQTT with QoS 1), unconfirmed (MQTT QoS 0), dead-lettered, unrouted, suppressed, lost after a refusal |
//! | each durable queue (`push_queue` for the sink `push`, else the sink's name) | its file, in the transaction that changes the rows | records acked into the queue: pending until its deliverer delivers, evicts or dead-letters them |
//! | a volatile push buffer (`push_volatile` for the sink `push`) | memory | the same, lost with the rows on restart |
//! | each database memory backlog (the sink's name) | memory | records acked into the backlog: pending until inserted, parked, evicted or given up at a stop |
//!
//! An open entry of the pipeline dead-letter queue trimmed at its cap moves from
//! `dead_lettered` to the loss `trimmed` in the part that parked it (`trimmed.rs`).
//!
//! Each part comes from its sink's report ([`crate::sinks::Report`]), so the ledger names no
//! kind. One copy per record is tracked: when a record fans out to several sinks, the first
//! queue it reaches carries it in the per-source figures, and the other copies show only in
//! the per-sink figures. A memory part starts at zero with the process;
//! a crash loses its figures together with the memory rows they describe, so the sum still
//! balances.

mod book;
mod report;
mod trimmed;

pub use book::{Book, Cause, Counts, Left, MAX_SOURCES, OTHER_SOURCES};
pub use report::{check, report, Check};
pub use trimmed::book_trimmed_dead_letters;
