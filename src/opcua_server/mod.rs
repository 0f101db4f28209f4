//! The northbound OPC-UA server (`opcua_server:`): every device's points for the SCADA, HMI
//! and MES systems of the plant, which read machine data as OPC-UA clients. Browse, read and
//! subscribe; writes to writable points go through the commands path with all its rules.
//!
//! - [`config`]: the section's keys and their validation (always built, so that `validate`
//!   can say a build has no server).
//! - `space`: the address space made from the point catalogue, and values as OPC-UA holds
//!   them.
//! - `base`: the standard namespace's nodes that clients browse from and read on connecting
//!   (folders, the `Server` object, the types the points refer to).
//! - `users`: who may log in (Argon2id hashes), and what each may do.
//! - [`status`]: its figures for `/api/status`.
//! - `browse`: the node manager the stack is given: `points` in the stack's in-memory
//!   manager, with Browse and TranslateBrowsePaths over the kept and the made references.
//! - `points`: the server's one node manager: the devices' points (reads, monitored items,
//!   writes as commands), the standard nodes' requests handed to `base`.
//! - `sessions`: the open sessions the status page lists, with their users and client
//!   applications.
//! - `server`: the server and the task that keeps the values current.
//! - [`serving`]: the server while it runs, restarted whole by a reload that changes the
//!   devices.
//!
//! The server needs the `opcua-server` cargo feature (on by default).

#[cfg(feature = "opcua-server")]
pub mod base;
#[cfg(feature = "opcua-server")]
pub mod browse;
pub mod config;
#[cfg(feature = "opcua-server")]
pub mod points;
#[cfg(feature = "opcua-server")]
pub mod server;
pub mod serving;
#[cfg(feature = "opcua-server")]
pub mod sessions;
#[cfg(feature = "opcua-server")]
pub mod space;
pub mod status;
#[cfg(feature = "opcua-server")]
pub mod users;

pub use config::{OpcuaServerConfig, RawOpcuaServer};
pub use serving::Serving;
pub use status::Stats;
