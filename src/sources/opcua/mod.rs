//! OPC-UA devices (`devices[]` with `protocol: opcua`), read with `async-opcua`: batched Read
//! requests per group interval, or subscriptions (`subscribe: true`) with a server-side
//! deadband. Records: source `opcua/<device>`, key the group's name, payload one point per
//! node `{"value":..,"quality":"good"|"bad","status":".."}`.
//!
//! - [`config`]: the OPC-UA keys of a device and their validation.
//! - `client`: the client as a device's config makes it, and a session opened on the
//!   endpoint with the device's security (also for the commissioning tools).
//! - `driver`: the device's driver on the one poll loop (sessions, polls, subscriptions,
//!   watchdog, commands).
//! - `server_cert`: the client's own checks of a server certificate (validity, host name and
//!   application URI over every subject alternative name).
//! - `values`: OPC-UA values → JSON, and JSON → the exact type of a node a command writes.
//! - `write`: commands, run by the driver on its session (data types read once per
//!   session, all or nothing before sending, one Write request, the status per node).
//!
//! The client and its values need the `opcua` cargo feature (on by default); without it the
//! config and status parts remain, and `validate` refuses every OPC-UA device.

#[cfg(feature = "opcua")]
pub mod client;
pub mod config;
#[cfg(feature = "opcua")]
pub mod driver;
#[cfg(feature = "opcua")]
pub mod server_cert;
#[cfg(feature = "opcua")]
pub mod values;
#[cfg(feature = "opcua")]
pub mod write;

pub use config::OpcuaDeviceConfig;
