//! `opex-connector run`: [`build`] makes every part from a validated config; [`run`] starts
//! them, serves until SIGTERM or SIGINT (SIGHUP reads the config file again and applies it,
//! [`crate::reload`]), then stops them in order: stop accepting, let requests
//! finish, stop the pollers, the sources and the deliverers, commit or insert what the sinks
//! hold, close the stores.

mod build;

pub use build::{build, Parts};

use std::fmt;
use std::io::Write;
use std::sync::Arc;

use crate::alerts;
use crate::config::Config;
use crate::http::{self, AppState};
use crate::reload::{Leftovers, Loaded, Origin};
use crate::shutdown::Shutdown;
use crate::sinks::{BuildError, StartContext};
use crate::sources::webhook;
use crate::store::StoreError;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Why the daemon could not start or run.
#[derive(Debug)]
pub enum DaemonError {
    /// The data dir or a store could not be opened.
    Store(StoreError),
    /// A sink could not be built (its store, its client's TLS files).
    Sink(BuildError),
    /// The HTTP listener could not be bound.
    Bind(std::io::Error),
    /// The runtime or a thread could not be started.
    Runtime(std::io::Error),
    /// A secret file could not be read, or is readable by every user.
    Secret(String),
    /// The OPC-UA server could not be started (its port taken, ...).
    OpcuaServer(String),
}

impl fmt::Display for DaemonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Store(e) => write!(f, "cannot open a store: {e}"),
            Self::Sink(e) => write!(f, "{e}"),
            Self::Bind(e) => write!(f, "cannot listen: {e}"),
            Self::Runtime(e) => write!(f, "cannot start: {e}"),
            Self::Secret(e) => write!(f, "webhook secret: {e}"),
            Self::OpcuaServer(e) => write!(f, "opcua server: {e}"),
        }
    }
}

impl std::error::Error for DaemonError {}

/// Builds the connector `config` describes and runs it until it is told to stop; `loaded`
/// is its text as read (kept as a config revision).
pub fn run(config: Config, loaded: Loaded) -> Result<(), DaemonError> {
    let Parts {
        state,
        simulator,
        alert_workers,
        pollers,
        opcua_server,
        fleet,
    } = build(config, loaded)?;
    let shutdown = state.shutdown.clone();
    let engine = Arc::clone(&state.engine);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("opex-rt")
        .on_thread_start(crate::priority::background_thread)
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    // The sinks first: their clients and deliverers run before any record arrives.
    let ctx = StartContext {
        engine: Arc::clone(&engine),
        runtime: runtime.handle().clone(),
        shutdown: shutdown.clone(),
        devices: state.devices.clone(),
        commands: Arc::clone(&state.commands),
        health: Arc::clone(&state.health),
    };
    state
        .sinks
        .start_all(engine.sinks().shared_iter(), ctx)
        .map_err(DaemonError::Runtime)?;
    start_opcua_server(opcua_server, &state, &runtime)?;
    // The pollers run on their own thread and runtime, so HTTP or sink load cannot delay them.
    state
        .pollers
        .start(pollers, &engine, &shutdown)
        .map_err(DaemonError::Runtime)?;
    let simulator_stop = Shutdown::new();
    let simulator_tasks = {
        let _entered = runtime.enter();
        // Its own stop signal: the simulated plant stops after the pollers that read it, so
        // they do not see their device vanish at every stop.
        simulator.spawn(simulator_stop.clone())
    };

    let result = runtime.block_on(serve(
        Arc::clone(&state),
        alert_workers,
        fleet,
        shutdown.clone(),
    ));

    // Stop, in order. The poll tasks end on the signal; a sample held at that moment is not
    // offered again.
    shutdown.trigger();
    runtime.block_on(state.pollers.join());
    runtime.block_on(state.opcua_serving.join());
    simulator_stop.trigger();
    let (mut sinks, draining) = state.sinks.take_all();
    runtime.block_on(async {
        for t in simulator_tasks {
            let _ = t.await;
        }
        // The sinks' clients end on the signal, failing what waits so its sources retry.
        for t in std::mem::take(&mut sinks.tasks) {
            let _ = t.await;
        }
    });
    // Deliverers and sweepers end on the signal; their queues keep what is not delivered.
    for t in std::mem::take(&mut sinks.on_signal) {
        if t.join().is_err() {
            log::error!("a sink thread panicked");
        }
    }
    // Tasks still running (webhook flows after an on_receipt 200) stop here; their requests
    // stay in the inbox and run again at the next start.
    drop(runtime);
    // Commit what the writers hold; the database backlogs insert what they hold (bounded by
    // their stop deadline).
    for sink in engine.sinks().iter() {
        sink.close();
    }
    for sink in draining {
        sink.close();
    }
    for t in sinks.on_close {
        if t.join().is_err() {
            log::error!("a database sink thread panicked");
        }
    }
    log::info!("stopped");
    result
}

/// Starts the OPC-UA server of `config`, when there is one, on `runtime`, in
/// `state.opcua_serving` (a reload that changes the devices starts it again).
fn start_opcua_server(
    config: Option<crate::opcua_server::OpcuaServerConfig>,
    state: &Arc<AppState>,
    runtime: &tokio::runtime::Runtime,
) -> Result<(), DaemonError> {
    let (Some(config), Some(stats)) = (config, state.opcua_server.clone()) else {
        return Ok(());
    };
    #[cfg(feature = "opcua-server")]
    {
        let _entered = runtime.enter();
        let s = Arc::clone(state);
        let parts = crate::opcua_server::server::Parts {
            catalogue: state.devices.clone(),
            commands: Arc::clone(&state.commands),
            engine: Arc::clone(&state.engine),
            version: crate::VERSION.to_string(),
            gateway: Arc::new(move || gateway(&s)),
        };
        let name = state.name.clone();
        let start = Box::new(move |config: &_, stop| {
            crate::opcua_server::server::start(
                config,
                &name,
                parts.clone(),
                Arc::clone(&stats),
                stop,
            )
        });
        state
            .opcua_serving
            .start(start, config, &state.shutdown)
            .map_err(DaemonError::OpcuaServer)
    }
    // Validation refuses the section in a build without the server.
    #[cfg(not(feature = "opcua-server"))]
    {
        let _ = (config, stats, runtime);
        Ok(())
    }
}

/// The gateway's health, sinks and queues, as the OPC-UA server serves them.
#[cfg(feature = "opcua-server")]
fn gateway(state: &AppState) -> crate::opcua_server::space::Gateway {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    crate::opcua_server::space::Gateway {
        health: crate::http::problems::assess(state)
            .state
            .as_str()
            .to_string(),
        sinks: state
            .engine
            .sinks()
            .iter()
            .map(|s| (s.name().to_string(), s.report().accepting))
            .collect(),
        queues: state
            .alerts
            .queues_json()
            .iter()
            .map(|q| {
                let fill = q["fill_pct"].as_f64().unwrap_or(0.0);
                (text(&q["name"]), fill, text(&q["level"]))
            })
            .collect(),
    }
}

async fn serve(
    state: Arc<AppState>,
    alert_workers: alerts::channels::Workers,
    fleet: Option<crate::fleet::FleetConfig>,
    shutdown: Shutdown,
) -> Result<(), DaemonError> {
    // SIGHUP is watched before anything says the daemon runs: its default action ends the
    // process.
    let reloads = match signal(SignalKind::hangup()) {
        Ok(hup) => Some(tokio::spawn(reload_on_sighup(
            Arc::clone(&state),
            hup,
            shutdown.clone(),
        ))),
        Err(e) => {
            log::error!("cannot watch SIGHUP, the config is not read again on it: {e}");
            None
        }
    };
    let listener = http::bind(state.http.get().listen)
        .await
        .map_err(DaemonError::Bind)?;
    let addr = listener.local_addr().map_err(DaemonError::Bind)?;
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "opex-connector listening on http://{addr}/");
        let _ = out.flush();
    }
    log::info!(
        "started: name={} version={} http={addr}",
        state.name,
        crate::VERSION
    );
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);

    let unfinished = webhook::unfinished_inbox(&state.engine).await;
    tokio::spawn(webhook::recover_inbox(
        Arc::clone(&state.engine),
        state.sources.webhooks.all(),
        unfinished,
    ));
    let server = tokio::spawn(http::serve(listener, Arc::clone(&state), shutdown.clone()));
    let checker = tokio::spawn(check_alerts(Arc::clone(&state), shutdown.clone()));
    let live = tokio::spawn(http::publish_live_status(
        Arc::clone(&state),
        shutdown.clone(),
    ));
    state
        .command_paths
        .start(&state.commands, &state.engine, &shutdown);
    // The sources' consumers, schedules and backfills; each ends on the shutdown signal.
    state.sources.start(&state.engine, &shutdown);
    // The fleet's configs, applied as the running parts are.
    if let Some(fleet) = fleet {
        crate::fleet::start(&state, fleet);
    }
    state.alerts.start_workers(alert_workers, &shutdown);
    let sampler = tokio::spawn(crate::trends::sampler::run(
        Arc::clone(&state.trends),
        Arc::clone(&state.engine),
        Arc::clone(&state.alerts),
        shutdown.clone(),
    ));

    wait_for_signal().await;
    log::info!("stopping: finishing requests, committing, closing stores");
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    shutdown.trigger();
    let _ = server.await;
    // The command paths stop taking commands and answer the running ones while the pollers
    // that run them still poll (they stop after this returns).
    state.command_paths.join().await;
    let _ = checker.await;
    if let Some(task) = reloads {
        let _ = task.await;
    }
    let _ = live.await;
    let _ = sampler.await;
    http::wait_for_live_sessions(&state, std::time::Duration::from_secs(2)).await;
    state.alerts.join_workers().await;
    // The consumers settle their pipelines; backfills write their last checkpoint before
    // the stores close.
    state.sources.join().await;
    Ok(())
}

/// Applies the file given to `run` again on every SIGHUP (watched by `hup`), until shutdown:
/// as `POST /api/config` applies a config, with origin `sighup`.
async fn reload_on_sighup(state: Arc<AppState>, mut hup: Signal, shutdown: Shutdown) {
    loop {
        tokio::select! {
            _ = hup.recv() => {}
            _ = shutdown.wait() => break,
        }
        let Some(path) = state.config.path().map(std::path::Path::to_path_buf) else {
            log::warn!("config: SIGHUP ignored: the connector runs the embedded demo, not a file");
            continue;
        };
        let state = Arc::clone(&state);
        let _ = tokio::task::spawn_blocking(move || match std::fs::read_to_string(&path) {
            Ok(text) => {
                let _ = state.config.apply(
                    &text,
                    Origin::Sighup,
                    None,
                    None,
                    Leftovers::Refuse,
                    &state.targets(),
                );
            }
            Err(e) => state
                .config
                .note_error(format!("cannot read {}: {e}", path.display())),
        })
        .await;
    }
}

/// Waits for SIGTERM or SIGINT.
pub(crate) async fn wait_for_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            log::error!("cannot watch SIGTERM: {e}");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}

/// Runs the alert hub's checks (every `telemetry.alerts.check_interval_secs`) until shutdown,
/// and feeds the systemd watchdog every [`CHECK_EVERY`](crate::admission::level::CHECK_EVERY) while the connector is healthy
/// (on its own beat, so a long check interval cannot starve `WatchdogSec=30`).
async fn check_alerts(state: Arc<AppState>, shutdown: Shutdown) {
    let hub = tokio::spawn(Arc::clone(&state.alerts).run(shutdown.clone()));
    let mut tick = tokio::time::interval(crate::admission::level::CHECK_EVERY);
    let mut health = crate::alerts::Beat::new(state.alerts.check_interval());
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if http::healthy(&state) {
                    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
                }
                // A sink a reload removed with `drain` stops once it holds nothing.
                if state.sinks.any_draining() {
                    let (s, rt) = (Arc::clone(&state), tokio::runtime::Handle::current());
                    let _ = tokio::task::spawn_blocking(move || s.sinks.finish_drained(&rt)).await;
                }
            },
            // The health model, assessed on the hub's beat: its state for Sparkplug, its
            // lasting problems alerted.
            _ = health.tick(state.alerts.check_interval()) => {
                state.alerts.check_outages(&http::problems::assess(&state));
            },
            _ = shutdown.wait() => break,
        }
    }
    let _ = hub.await;
}
