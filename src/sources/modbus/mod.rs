//! Modbus TCP and RTU polling: `devices:` entries with `protocol: modbus_tcp` or `modbus_rtu`.
//!
//! - [`config`]: the point list and line settings, validated without I/O.
//! - [`plan`]: request coalescing (at most 125 registers or 2000 bits per request).
//! - [`decode`]: registers → values (types, word and byte order, scale and offset).
//! - [`encode`]: values → registers, the inverse, for commands (with the type's range and the
//!   point's `min` / `max`).
//! - [`write`]: commands: checked all or nothing, written by the line task between polls
//!   (FC 5, 15, 6, 16), at most once.
//! - [`poller`]: the driver of a line ([`crate::sources::driver`]): timeouts, drop-and-reopen,
//!   exceptions as data; the one poll loop runs it (schedule, breaker, commands between polls).

pub mod config;
pub mod decode;
pub mod encode;
pub mod plan;
pub mod poller;
pub mod write;

pub use poller::{lines, ModbusLine};
