//! The ClickHouse sink: rows batched in a bounded memory backlog and inserted over the HTTP
//! interface (`INSERT INTO <table> (<columns>) FORMAT RowBinary`, or `JSONEachRow` for a batch
//! with a value that is not written in binary; Basic auth) by a blocking client on the sink's
//! own thread. Works with ClickHouse 18.16 (Debian 12) and current ones.

mod binary;
pub mod config;
mod sink;

pub use config::{ClickHouseConfig, RawClickHouse};
pub use sink::{encode_row, ClickHouseSink};
