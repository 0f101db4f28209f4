//! Commands down to devices: writes to writable points, **at most once** and **never late**.
//!
//! A write to a machine is the opposite of a record. A record is kept until it is delivered;
//! a command runs once or not at all, and is refused `expired` rather than run after its
//! `expires_ms`. Nothing is writable unless its point says `writable: true`.
//!
//! - [`command`]: a command, its points' results, and the request body every path shares.
//! - [`inbox`]: how a command reaches the task that owns the device's connection, which runs
//!   it between poll cycles.
//! - [`service`]: the devices that take commands and [`Commands::execute`], the one way in
//!   for HTTP, NATS and MQTT; each command becomes a `command/<device>` record.
//! - [`recent`]: each device's recent command ids per path, which answer a repeated command
//!   with its first outcome and refuse an id reused with other content.
//! - [`config`]: `commands:` (token, default expiry, rate limit, NATS and MQTT paths).
//! - [`paths`]: the NATS (request-reply) and MQTT (command topic, MQTT 5) paths in; the HTTP
//!   one is a route of the HTTP server.

pub mod command;
pub mod config;
pub mod inbox;
pub mod paths;
pub mod recent;
pub mod service;

pub use command::{parse_request, Command, DeviceError, Origin, PointResult, Request};
pub use config::{CommandsConfig, RawCommands};
pub use inbox::{channel, CommandReceiver, CommandSender, Pending};
pub use service::{CommandError, CommandStats, Commands, Outcome, WritablePoint};
