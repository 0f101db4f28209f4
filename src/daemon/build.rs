//! Building a connector from its validated config: every store opened, every client set up,
//! every secret read. Nothing runs yet; [`super::run`] starts and stops the parts.

use std::sync::Arc;
use std::time::Instant;

use super::DaemonError;
use crate::alerts::{self, Hub};
use crate::commands::paths::CommandPaths;
use crate::commands::Commands;
use crate::config::Config;
use crate::engine::Engine;
use crate::http::{AppState, HttpStats};
use crate::reload::{Loaded, Running};
use crate::shutdown::Shutdown;
use crate::simulator::Simulator;
use crate::sinks::{Sink, Sinks};
use crate::sources::catalogue::Catalogue;
use crate::sources::live::{Built, Sources};
use crate::sources::pollers::{Pollers, Ready};
use crate::sources::status::DeviceStatus;
use crate::store::dead_letters::DeadLetterQueue;
use crate::store::StoreError;
use crate::trends::Trends;

/// A connector built and not yet running.
pub struct Parts {
    /// What request handlers see; holds the engine and every source.
    pub state: Arc<AppState>,
    /// The simulated plant, bound (the demo's first poll finds it).
    pub simulator: Simulator,
    /// The alert channels' workers, started with the runtime.
    pub alert_workers: alerts::channels::Workers,
    /// Every device's poll loop, not yet polling.
    pub pollers: Vec<Ready>,
    /// `opcua_server:`, to start once the runtime runs.
    pub opcua_server: Option<crate::opcua_server::OpcuaServerConfig>,
    /// `fleet:`, to follow once the connector runs.
    pub fleet: Option<crate::fleet::FleetConfig>,
}

/// Builds every part of the connector `config` describes; `loaded` is its text as read.
pub fn build(config: Config, loaded: Loaded) -> Result<Parts, DaemonError> {
    let c = &config.connector;
    std::fs::create_dir_all(&c.data_dir).map_err(|e| {
        DaemonError::Store(StoreError::Io(format!("{}: {e}", c.data_dir.display())))
    })?;
    let running = Running::start(loaded, &c.data_dir);
    for w in &config.warnings {
        log::warn!("config: {w}");
    }
    for s in &config.sinks {
        if let Some(w) = s.startup_warning() {
            log::warn!("sink {}: {w}", s.name);
        }
    }
    let sinks = config
        .sinks
        .iter()
        .map(|s| Sink::build(s, &c.data_dir))
        .collect::<Result<Vec<_>, _>>()
        .map_err(DaemonError::Sink)?;
    let dlq = Arc::new(
        DeadLetterQueue::open(&c.data_dir, config.dead_letters_max_rows)
            .map_err(DaemonError::Store)?,
    );
    let plan = config.plan();
    // Every source; each webhook's secret read and the requests it answered before the last
    // stop, still within its window, restored.
    let sources = Built::new(&config, |_| true, &dlq).map_err(|(_, e)| DaemonError::Secret(e))?;
    let engine = Arc::new(Engine::new(plan, Sinks::new(sinks), dlq));
    // Bound before the pollers start, so the demo's first poll finds its device.
    let simulator = Simulator::bind(&config.simulator).map_err(DaemonError::Bind)?;
    if let Some(addr) = simulator.modbus_addr() {
        log::info!("simulator: Modbus TCP plant on {addr}");
    }
    let trends = Arc::new(Trends::default());
    let devices = Catalogue::new(
        config
            .devices
            .catalogue()
            .into_iter()
            .map(|d| Arc::new(DeviceStatus::new(d).with_trends(Arc::clone(&trends))))
            .collect(),
    );
    let commands = Commands::new(config.commands.clone().unwrap_or_default());
    // Each device's task reads its own inbox.
    let pollers = Pollers::build(
        &config.devices,
        |_| true,
        &devices,
        config.commands.is_some().then_some(&commands),
        &c.data_dir,
    );
    let (channels, alert_workers) = alerts::channels::build(&config.alerts);
    let mut hub = Hub::new(&c.name, config.alerts.check_interval, channels)
        .with_outages_after(config.alerts.after);
    alerts::queues::watch(&mut hub, &engine);
    let state = Arc::new(AppState {
        name: c.name.clone(),
        health: Arc::default(),
        started: Instant::now(),
        previous_version: crate::release::previous_version(),
        http: crate::http::Settings::new(c.http.clone()),
        data_dir: c.data_dir.clone(),
        disk_free_pct: config.alerts.disk_free_pct.into(),
        shutdown: Shutdown::new(),
        engine,
        sources: Sources::new(sources),
        devices,
        pollers: Pollers::default(),
        sinks: Default::default(),
        stats: HttpStats::default(),
        auth: Default::default(),
        ledger_scan: Default::default(),
        commands: Arc::new(commands),
        command_paths: CommandPaths::new(config.commands.as_ref()),
        alerts: Arc::new(hub),
        trends,
        body_budget: crate::http::BodyBudget::new(c.http.max_body_bytes),
        opcua_server: config
            .opcua_server
            .as_ref()
            .map(|s| crate::opcua_server::Stats::new(s.pki_dir.join("rejected"))),
        opcua_serving: Default::default(),
        config: Arc::new(running),
    });
    Ok(Parts {
        state,
        simulator,
        alert_workers,
        pollers,
        opcua_server: config.opcua_server.clone(),
        fleet: config.fleet.clone(),
    })
}
