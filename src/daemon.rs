//! `opex-connector run`: builds every part from a validated config, runs until SIGTERM or
//! SIGINT, then stops in order: stop accepting, let requests finish, stop the uplink, commit
//! what the writer holds, close the stores.

use std::fmt;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use crate::alerts::{self, Hub};
use crate::config::Config;
use crate::engine::{Engine, SinkHandle, Sinks};
use crate::flow::Plan;
use crate::http::{self, AppState, HttpStats};
use crate::shutdown::Shutdown;
use crate::simulator::Simulator;
use crate::sinks::clickhouse::ClickHouseSink;
use crate::sinks::mqtt::MqttSink;
use crate::sinks::nats::NatsSink;
use crate::sinks::postgres::PostgresSink;
use crate::sinks::push::{PushSink, Uplink, UplinkStatus};
use crate::sinks::storage::StorageSink;
use crate::sources::backfill::BackfillSource;
use crate::sources::ingest::IngestSource;
use crate::sources::modbus::ModbusPollers;
use crate::sources::mqtt::MqttSource;
use crate::sources::nats::NatsSource;
use crate::sources::opcua::DeviceStatus;
use crate::sources::pollers::PollerRuntime;
use crate::sources::schedule::ScheduleSource;
use crate::sources::webhook::{self, config::load_secret, WebhookSource};
use crate::store::dead_letters::DeadLetterQueue;
use crate::store::StoreError;

/// Why the daemon could not start or run.
#[derive(Debug)]
pub enum DaemonError {
    /// The data dir or a store could not be opened.
    Store(StoreError),
    /// The HTTP listener could not be bound.
    Bind(std::io::Error),
    /// The runtime or a thread could not be started.
    Runtime(std::io::Error),
    /// A secret file could not be read, or is readable by every user.
    Secret(String),
    /// A NATS or MQTT client could not be set up (e.g. a TLS file).
    Messaging(String),
}

impl fmt::Display for DaemonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Store(e) => write!(f, "cannot open a store: {e}"),
            Self::Bind(e) => write!(f, "cannot listen: {e}"),
            Self::Runtime(e) => write!(f, "cannot start: {e}"),
            Self::Secret(e) => write!(f, "webhook secret: {e}"),
            Self::Messaging(e) => write!(f, "messaging: {e}"),
        }
    }
}

impl std::error::Error for DaemonError {}

/// Runs the daemon until it is told to stop.
pub fn run(config: Config) -> Result<(), DaemonError> {
    let c = &config.connector;
    std::fs::create_dir_all(&c.data_dir).map_err(|e| {
        DaemonError::Store(StoreError::Io(format!("{}: {e}", c.data_dir.display())))
    })?;
    if !c.push_queue.enabled {
        log::warn!(
            "push_queue is not enabled: records wait in a 16 MiB memory buffer that is lost on restart; enable connector.push_queue for anything that matters"
        );
    }
    for w in &config.warnings {
        log::warn!("config: {w}");
    }
    let webhooks = config
        .webhooks
        .iter()
        .map(|w| {
            load_secret(&w.secret)
                .map(|secret| Arc::new(WebhookSource::new(w.clone(), secret)))
                .map_err(DaemonError::Secret)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let push = Arc::new(
        PushSink::open(&c.push_queue, &c.data_dir)
            .map_err(DaemonError::Store)?
            .with_preprocess(c.preprocess.clone()),
    );
    let storage = match &config.storage {
        Some(cfg) => Some(Arc::new(
            StorageSink::open(cfg, &c.data_dir).map_err(DaemonError::Store)?,
        )),
        None => None,
    };
    let dlq = Arc::new(
        DeadLetterQueue::open(&c.data_dir, config.dead_letters_max_rows)
            .map_err(DaemonError::Store)?,
    );
    let mut sinks = Sinks::default();
    sinks.add(SinkHandle::Push(Arc::clone(&push)));
    if let Some(s) = &storage {
        sinks.add(SinkHandle::Storage(Arc::clone(s)));
    }
    let clickhouse = config
        .clickhouse
        .clone()
        .map(|c| Arc::new(ClickHouseSink::new(c)));
    if let Some(c) = &clickhouse {
        sinks.add(SinkHandle::ClickHouse(Arc::clone(c)));
    }
    let postgres = config
        .postgres
        .clone()
        .map(|c| Arc::new(PostgresSink::new(c)));
    if let Some(p) = &postgres {
        sinks.add(SinkHandle::Postgres(Arc::clone(p)));
    }
    let nats_sink = config.nats.sink.clone().map(|c| Arc::new(NatsSink::new(c)));
    if let Some(n) = &nats_sink {
        sinks.add(SinkHandle::Nats(Arc::clone(n)));
    }
    let mqtt_sink = match config.mqtt.sink.clone() {
        Some(c) => Some(Arc::new(MqttSink::new(c).map_err(DaemonError::Messaging)?)),
        None => None,
    };
    if let Some(m) = &mqtt_sink {
        sinks.add(SinkHandle::Mqtt(Arc::clone(m)));
    }
    let plan = if config.flows.is_empty() {
        Plan::direct(&config.source_names(), "push")
    } else {
        Plan::compile(config.flows.clone())
    };
    let engine = Arc::new(Engine::new(plan, sinks, dlq));
    let shutdown = Shutdown::new();
    // The database sinks' threads end when their sink is closed, after the runtime (and with
    // it every task that could still deliver) is gone.
    let mut db_threads = Vec::new();
    if let Some(c) = &clickhouse {
        db_threads.push(c.start(Arc::clone(&engine)).map_err(DaemonError::Runtime)?);
    }
    if let Some(p) = &postgres {
        db_threads.push(p.start(Arc::clone(&engine)).map_err(DaemonError::Runtime)?);
    }
    // Bound before the pollers start, so the demo's first poll finds its device.
    let simulator = Simulator::bind(&config.simulator).map_err(DaemonError::Bind)?;
    if let Some(addr) = simulator.modbus_addr() {
        log::info!("simulator: Modbus TCP plant on {addr}");
    }
    // The pollers run on their own thread and runtime, so HTTP or sink load cannot delay them.
    let pollers = if config.devices.modbus.is_empty() && config.devices.opcua.is_empty() {
        None
    } else {
        Some(PollerRuntime::start().map_err(DaemonError::Runtime)?)
    };
    let modbus = pollers
        .as_ref()
        .map(|rt| ModbusPollers::start(&config.devices.modbus, &engine, rt, &shutdown));
    let sweeper = match &storage {
        Some(s) => Some(
            s.start_sweeper(shutdown.clone())
                .map_err(DaemonError::Runtime)?,
        ),
        None => None,
    };

    let uplink_status = c.push.as_ref().map(|_| Arc::new(UplinkStatus::default()));
    let uplink_thread = match (&c.push, &uplink_status) {
        (Some(cfg), Some(status)) => Some(
            Uplink::new(
                cfg.clone(),
                push.drain(),
                Arc::clone(status),
                shutdown.clone(),
            )
            .spawn()
            .map_err(DaemonError::Runtime)?,
        ),
        _ => None,
    };

    let opcua_status: Vec<Arc<DeviceStatus>> = config
        .devices
        .opcua
        .iter()
        .map(|d| Arc::new(DeviceStatus::new(&d.name, &d.endpoint)))
        .collect();
    #[allow(unused_mut)] // Without the `opcua` feature there is no OPC-UA task to push.
    let mut poll_tasks: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    #[cfg(feature = "opcua")]
    if let Some(rt) = &pollers {
        for (d, status) in config.devices.opcua.iter().zip(&opcua_status) {
            poll_tasks.push(crate::sources::opcua::spawn(
                rt,
                d.clone(),
                &c.data_dir,
                Arc::clone(&engine),
                Arc::clone(status),
                shutdown.clone(),
            ));
        }
    }

    let (channels, alert_workers) = alerts::channels::build(&config.alerts);
    let mut hub = Hub::new(&c.name, config.alerts.check_interval, channels);
    alerts::queues::watch(
        &mut hub,
        &push,
        storage.as_ref(),
        &engine,
        nats_sink.as_ref(),
        mqtt_sink.as_ref(),
    );
    let state = Arc::new(AppState {
        name: c.name.clone(),
        started: Instant::now(),
        previous_version: crate::release::previous_version(),
        http: c.http.clone(),
        data_dir: c.data_dir.clone(),
        shutdown: shutdown.clone(),
        engine: Arc::clone(&engine),
        push: Arc::clone(&push),
        uplink: uplink_status,
        ingest: config
            .ingest
            .sources
            .iter()
            .cloned()
            .map(|s| Arc::new(IngestSource::new(s)))
            .collect(),
        webhooks,
        storage: storage.clone(),
        devices: modbus
            .as_ref()
            .map(|m| m.devices.clone())
            .unwrap_or_default(),
        opcua: opcua_status,
        stats: HttpStats::default(),
        ledger_scan: Default::default(),
        nats_sources: config
            .nats
            .sources
            .iter()
            .cloned()
            .map(|s| Arc::new(NatsSource::new(s)))
            .collect(),
        mqtt_sources: config
            .mqtt
            .sources
            .iter()
            .cloned()
            .map(|s| Arc::new(MqttSource::new(s)))
            .collect(),
        nats_sink,
        mqtt_sink,
        alerts: Arc::new(hub),
        schedules: config
            .schedules
            .iter()
            .cloned()
            .map(|s| Arc::new(ScheduleSource::new(s)))
            .collect(),
        backfills: config
            .backfills
            .iter()
            .cloned()
            .map(|b| Arc::new(BackfillSource::new(b, &c.data_dir)))
            .collect(),
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("opex-rt")
        .on_thread_start(crate::priority::background_thread)
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    let simulator_stop = Shutdown::new();
    let simulator_tasks = {
        let _entered = runtime.enter();
        // Its own stop signal: the simulated plant stops after the pollers that read it, so
        // they do not see their device vanish at every stop.
        simulator.spawn(simulator_stop.clone())
    };
    let result = runtime.block_on(serve(Arc::clone(&state), alert_workers, shutdown.clone()));
    shutdown.trigger();
    // The poll tasks end on the signal; a sample held at that moment is not offered again.
    if let Some(m) = modbus {
        runtime.block_on(m.join());
    }
    if let Some(rt) = pollers {
        // Each OPC-UA device task ends on the shutdown signal (a sample held for a full sink
        // is given up with it); then the pollers' thread is joined, before the stores close.
        let _ = runtime.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(5), async {
                for t in poll_tasks {
                    let _ = t.await;
                }
            })
            .await
        });
        rt.stop();
    }
    simulator_stop.trigger();
    runtime.block_on(async {
        for t in simulator_tasks {
            let _ = t.await;
        }
    });
    if let Some(t) = uplink_thread {
        if t.join().is_err() {
            log::error!("uplink thread panicked");
        }
    }
    if let Some(t) = sweeper {
        if t.join().is_err() {
            log::error!("storage sweeper thread panicked");
        }
    }
    // Tasks still running (webhook flows after an on_receipt 200) stop here; their requests
    // stay in the inbox and run again at the next start.
    drop(runtime);
    // Insert what the database backlogs hold (bounded by their stop deadline).
    if let Some(c) = &clickhouse {
        c.close();
    }
    if let Some(p) = &postgres {
        p.close();
    }
    for t in db_threads {
        if t.join().is_err() {
            log::error!("database sink thread panicked");
        }
    }
    push.close();
    if let Some(s) = &storage {
        s.close();
    }
    log::info!("stopped");
    result
}

async fn serve(
    state: Arc<AppState>,
    alert_workers: alerts::channels::Workers,
    shutdown: Shutdown,
) -> Result<(), DaemonError> {
    let listener = http::bind(state.http.listen)
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

    tokio::spawn(webhook::recover_inbox(Arc::clone(&state.engine)));
    let server = tokio::spawn(http::serve(listener, Arc::clone(&state), shutdown.clone()));
    let checker = tokio::spawn(check_alerts(Arc::clone(&state), shutdown.clone()));
    let live = tokio::spawn(http::publish_live_status(
        Arc::clone(&state),
        shutdown.clone(),
    ));
    let mut messaging = spawn_messaging(&state, &shutdown);
    messaging.extend(alert_workers.spawn(&shutdown));
    let feeds = spawn_feeds(&state, &shutdown);

    wait_for_signal().await;
    log::info!("stopping: finishing requests, committing, closing stores");
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    shutdown.trigger();
    let _ = server.await;
    let _ = checker.await;
    let _ = live.await;
    http::wait_for_live_sessions(&state, std::time::Duration::from_secs(2)).await;
    for task in messaging {
        let _ = task.await;
    }
    // Backfills write their last checkpoint before the stores close.
    for task in feeds {
        let _ = task.await;
    }
    Ok(())
}

/// Starts the schedules and the backfills; each ends on the shutdown signal (a backfill
/// checkpoints where it stands first).
fn spawn_feeds(state: &AppState, shutdown: &Shutdown) -> Vec<tokio::task::JoinHandle<()>> {
    let engine = &state.engine;
    let schedules = state
        .schedules
        .iter()
        .map(|s| tokio::spawn(Arc::clone(s).run(Arc::clone(engine), shutdown.clone())));
    let backfills = state
        .backfills
        .iter()
        .map(|b| tokio::spawn(Arc::clone(b).run(Arc::clone(engine), shutdown.clone())));
    schedules.chain(backfills).collect()
}

/// Starts the NATS and MQTT sinks' publishers and the sources' consumers; each ends on the
/// shutdown signal (a source settles what is in its pipeline first).
fn spawn_messaging(state: &AppState, shutdown: &Shutdown) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    if let Some(n) = &state.nats_sink {
        tasks.push(tokio::spawn(Arc::clone(n).run(shutdown.clone())));
    }
    if let Some(m) = &state.mqtt_sink {
        tasks.push(tokio::spawn(Arc::clone(m).run(shutdown.clone())));
    }
    for s in &state.nats_sources {
        tasks.push(tokio::spawn(
            Arc::clone(s).run(Arc::clone(&state.engine), shutdown.clone()),
        ));
    }
    for s in &state.mqtt_sources {
        tasks.push(tokio::spawn(
            Arc::clone(s).run(Arc::clone(&state.engine), shutdown.clone()),
        ));
    }
    tasks
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
/// and feeds the systemd watchdog every [`alerts::CHECK_EVERY`] while the connector is healthy
/// (on its own beat, so a long check interval cannot starve `WatchdogSec=30`).
async fn check_alerts(state: Arc<AppState>, shutdown: Shutdown) {
    let hub = tokio::spawn(Arc::clone(&state.alerts).run(shutdown.clone()));
    let mut tick = tokio::time::interval(alerts::CHECK_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {},
            _ = shutdown.wait() => break,
        }
        if http::healthy(&state) {
            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
        }
    }
    let _ = hub.await;
}
