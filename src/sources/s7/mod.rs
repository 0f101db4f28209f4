//! Siemens S7 PLCs (S7-300/400/1200/1500 and CPs) over S7comm on ISO-on-TCP (RFC 1006,
//! port 102): the protocol in our own code over tokio.
//!
//! Why not a library: Snap7 is C (no C in the field build), and `rust7` (MIT, by Snap7's
//! author) is blocking, so each connection would need a thread of its own beside the
//! runtime, with its timeouts outside tokio's control. The part of S7comm a gateway needs
//! (ISO connect, setup communication, ReadVar, WriteVar) is small; here it is async, every
//! request has a timeout, and every answer is parsed without trusting one length in it.
//!
//! What a driver uses, in the order of a poll:
//! - [`Endpoint`]: host, port, TSAPs (from rack/slot or as TIA Portal writes them), the PDU
//!   size asked for, the timeout ([`endpoint`]).
//! - [`Item`]: a point's [`Address`] ([`address`], `DB10.DBD4`, `M0.1`, ...) and
//!   [`DataType`] ([`types`], [`clock`] for the time types), checked to fit each other.
//! - [`Connection::open`] → [`Connection::pdu_size`], the negotiated PDU; [`plan`] packs a
//!   group into the fewest ReadVar requests that PDU allows ([`plan`](mod@plan)); an item
//!   larger than one answer is read alone in parts.
//! - [`Connection::read`]: each item's [`Value`] or its own [`ItemError`] in words, and
//!   [`Connection::write`]: each item's result; an [`Error`] ends the connection.
//!
//! As a device (`protocol: s7` in `devices:`): [`config`] validates its entry, and
//! [`driver`] is its driver on the one poll loop, reads and commands alike.
//!
//! The client and the driver need the `s7` cargo feature (on by default, in the field build
//! too); without it the addresses, types and config remain, and `validate` refuses every S7
//! device.
//!
//! Bits are read through their byte (one item per point, the bit taken here) and written
//! as a WriteVar item of transport size BIT at byte × 8 + bit, never as a read-modify-write
//! of the byte: the PLC program may change the other bits at any time.

pub mod address;
#[cfg(feature = "s7")]
pub mod client;
pub mod clock;
pub mod config;
#[cfg(feature = "s7")]
pub mod driver;
pub mod endpoint;
pub mod error;
pub mod frame;
pub mod plan;
pub mod types;

pub use address::{Address, Area, Width};
#[cfg(feature = "s7")]
pub use client::{Connection, Values};
pub use config::S7DeviceConfig;
pub use endpoint::Endpoint;
pub use error::{Error, ItemError, WriteError};
pub use plan::{minimum_requests, plan, Item, Plan};
pub use types::{DataType, Value};
