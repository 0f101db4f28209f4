//! OPC-UA devices (`devices[]` with `protocol: opcua`), read with `async-opcua`: batched Read
//! requests per group interval, or subscriptions (`subscribe: true`) with a server-side
//! deadband. Records: source `opcua/<device>`, key the group's name, payload one point per
//! node `{"value":..,"quality":"good"|"bad","status":".."}`.
//!
//! - [`config`]: the OPC-UA keys of a device and their validation.
//! - [`client`]: the runtime (sessions, reconnects, watchdog, polls, subscriptions).
//! - [`status`]: what a device shows in `/api/status` and `/metrics`.
//! - [`values`]: OPC-UA values → JSON.

pub mod client;
pub mod config;
pub mod status;
pub mod values;

pub use client::spawn;
pub use config::OpcuaDeviceConfig;
pub use status::DeviceStatus;
