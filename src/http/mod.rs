//! The HTTP server (hyper, HTTP/1.1): ingest API, status, metrics, the ledger (`ledger.rs`),
//! commands to devices (`commands.rs`), admin endpoints, the status page (`page.rs`, its files
//! in `page/`), its trends (`trends.rs`) and its live view (`live.rs`, a WebSocket of `ws.rs`'s
//! framing). Its config is `config.rs`.
//!
//! Bounded on every side, because the plant network is not a friendly place: a cap on
//! connections (further ones wait in the kernel backlog), a header-read timeout that also ends
//! idle keep-alive connections, a body-read timeout and a body size limit, and a byte budget for
//! the bodies read before their check (`budget.rs`). A request waits only
//! on its own settlement. Before any route runs, the request's `Host` must be one of the
//! connector's own (`hosts.rs`), which stops DNS-rebinding pages.
//!
//! Beside the server, the connector's own small HTTP client (`client.rs`), blocking, for its
//! outgoing requests: the push uplink, ClickHouse and alert webhooks.

mod admin;
mod auth;
mod budget;
pub mod client;
mod commands;
pub mod config;
mod config_api;
mod hosts;
mod ledger;
mod live;
mod page;
pub mod problems;
mod respond;
mod routes;
mod server;
mod status;
mod trends;
mod ws;

pub use live::{
    publish_status as publish_live_status, wait_for_sessions as wait_for_live_sessions,
};

pub use self::config::Settings;
pub use auth::{
    bearer_ok, ct_eq, AuthGuard, AuthStats, FAILURE_DELAY, FORGET_AFTER, FREE_FAILURES, TABLE_SIZE,
};
pub use budget::{BodyBudget, BODY_BUDGET_BYTES, FREE_BYTES as BODY_FREE_BYTES};
pub use hosts::{Authority, AuthorityError, HostName};
pub use ledger::{LedgerScan, ScanPermit};
pub use routes::percent_decode;
pub use server::{bind, serve, HttpStats};
pub use status::healthy;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::alerts::Hub;
use crate::engine::Engine;
use crate::shutdown::Shutdown;
use crate::sources::catalogue::Catalogue;
use crate::sources::live::Sources;

/// Everything a request handler may look at.
pub struct AppState {
    /// `connector.name`.
    pub name: String,
    /// The health model's memory: since when each problem lasts, the last state.
    pub health: Arc<crate::health::Board>,
    /// When the daemon started.
    pub started: Instant,
    /// The version an over-the-air update replaced, when installed that way.
    pub previous_version: Option<String>,
    /// The server's settings, with the hosts it answers (a reload replaces them).
    pub http: Settings,
    /// `connector.data_dir`, whose free space the status shows.
    pub data_dir: PathBuf,
    /// `telemetry.alerts.disk_free_pct`: under this percent free, the disk is a problem (a
    /// reload changes it).
    pub disk_free_pct: std::sync::atomic::AtomicU64,
    /// The stop signal (live view sessions close on it).
    pub shutdown: Shutdown,
    /// The engine every source offers to; it holds the sinks.
    pub engine: Arc<Engine>,
    /// The ingest API's sources, the webhooks, the NATS and MQTT consumers, the schedules
    /// and the backfills, each changed alone by a reload.
    pub sources: Sources,
    /// Every device with its figures, points and live values, in config order.
    pub devices: Catalogue,
    /// The sinks while they run, each stopped alone by a reload.
    pub sinks: crate::sinks::Started,
    /// Every device's poll loop, each stopped and started alone by a reload.
    pub pollers: crate::sources::pollers::Pollers,
    /// Server counters.
    pub stats: HttpStats,
    /// The bearer token checks: failed attempts per client address, their counters.
    pub auth: AuthGuard,
    /// The one push queue check (`GET /api/ledger?verify=1`) allowed at a time.
    pub ledger_scan: LedgerScan,
    /// The devices that take commands, and the way to send them one.
    pub commands: Arc<crate::commands::Commands>,
    /// The NATS and MQTT paths commands come in by.
    pub command_paths: crate::commands::paths::CommandPaths,
    /// The alert hub: queue levels, open alerts, channels.
    pub alerts: Arc<Hub>,
    /// The last hour of every point, queue and rate (`GET /api/trends`).
    pub trends: Arc<crate::trends::Trends>,
    /// The bytes webhook bodies may hold before their signature is checked (`budget.rs`).
    pub body_budget: BodyBudget,
    /// The northbound OPC-UA server's figures, when `opcua_server:` is configured.
    pub opcua_server: Option<Arc<crate::opcua_server::Stats>>,
    /// The northbound OPC-UA server while it runs (a reload that changes the devices starts
    /// it again).
    pub opcua_serving: crate::opcua_server::Serving,
    /// The running config: its text, revision and the kept revisions.
    pub config: Arc<crate::reload::Running>,
}

impl AppState {
    /// What a reload changes while the connector runs.
    pub fn targets(&self) -> crate::reload::Targets<'_> {
        crate::reload::Targets {
            engine: &self.engine,
            sources: &self.sources,
            alerts: &self.alerts,
            disk_free_pct: &self.disk_free_pct,
            shutdown: &self.shutdown,
            pollers: &self.pollers,
            catalogue: &self.devices,
            commands: &self.commands,
            command_paths: &self.command_paths,
            sinks: &self.sinks,
            trends: &self.trends,
            data_dir: &self.data_dir,
            opcua_server: &self.opcua_serving,
            http: &self.http,
            body_budget: &self.body_budget,
        }
    }
}

#[cfg(test)]
mod tests;
