//! The sources that a reload changes one at a time ([`crate::reload`]): the ingest API's
//! sources, the NATS and MQTT consumers, the schedules and the backfills. Each runs with a
//! stop signal of its own, which the connector's stop also triggers, so that a reload stops,
//! starts or replaces one while the others go on untouched: their connections, their
//! schedules, their counters.
//!
//! A part stopped alone ends as it ends at the connector's stop: a NATS consumer settles
//! what is in its pipeline, a backfill writes its checkpoint (its replacement resumes from
//! it), a schedule's next tick is not fired.

use std::sync::{Arc, RwLock};

use tokio::task::JoinHandle;

use crate::config::Config;
use crate::engine::Engine;
use crate::shutdown::Shutdown;

use super::backfill::BackfillSource;
use super::ingest::IngestSource;
use super::mqtt::MqttSource;
use super::nats::NatsSource;
use super::schedule::ScheduleSource;

/// A kind of source a reload replaces one at a time.
pub trait Part: Send + Sync + 'static {
    /// Its name in flows and among a reload's parts: `schedule/<name>`.
    fn part(&self) -> &str;
    /// Starts its task, which ends on `stop`; `None` for a source without one (the ingest
    /// API's sources answer requests).
    fn spawn(self: &Arc<Self>, engine: Arc<Engine>, stop: Shutdown) -> Option<JoinHandle<()>>;
}

/// One running source.
struct Running<T> {
    source: Arc<T>,
    stop: Shutdown,
    task: Option<JoinHandle<()>>,
}

/// The running sources of one kind, in config order.
pub struct Live<T> {
    running: RwLock<Vec<Running<T>>>,
}

impl<T: Part> Live<T> {
    /// `sources`, not yet started.
    pub fn new(sources: Vec<T>) -> Self {
        let running = sources
            .into_iter()
            .map(|s| Running {
                source: Arc::new(s),
                stop: Shutdown::new(),
                task: None,
            })
            .collect();
        Self {
            running: RwLock::new(running),
        }
    }

    /// Every source, in config order.
    pub fn all(&self) -> Vec<Arc<T>> {
        self.read(|r| r.iter().map(|r| Arc::clone(&r.source)).collect())
    }

    /// The first source that `wanted`.
    pub fn find(&self, wanted: impl Fn(&T) -> bool) -> Option<Arc<T>> {
        self.read(|r| {
            r.iter()
                .find(|r| wanted(&r.source))
                .map(|r| Arc::clone(&r.source))
        })
    }

    /// Starts every source, each stopped by `shutdown` too. Needs the runtime.
    pub fn start(&self, engine: &Arc<Engine>, shutdown: &Shutdown) {
        let mut running = self.running.write().unwrap_or_else(|p| p.into_inner());
        for r in running.iter_mut() {
            r.stop = shutdown.child();
            r.task = r.source.spawn(Arc::clone(engine), r.stop.clone());
        }
    }

    /// Stops the source named `part` and waits until its task ended; leaves it out, but for
    /// a source without a task that is `restarted`: that one answers until its replacement
    /// takes its place ([`Live::add`]), so that no request finds it missing. Needs the
    /// runtime.
    pub async fn stop(&self, part: &str, restarted: bool) {
        let gone = {
            let mut running = self.running.write().unwrap_or_else(|p| p.into_inner());
            running
                .iter()
                .position(|r| r.source.part() == part && !(restarted && r.task.is_none()))
                .map(|i| running.remove(i))
        };
        if let Some(r) = gone {
            r.stop.trigger();
            if let Some(task) = r.task {
                let _ = task.await;
            }
        }
    }

    /// Starts each of `built` that `parts` names (stopped by `shutdown` too), in the place
    /// of the one of its name still there, else at its place in the new config's order.
    /// Needs the runtime.
    pub fn add(&self, built: Vec<T>, parts: &[&str], engine: &Arc<Engine>, shutdown: &Shutdown) {
        for (index, source) in built.into_iter().enumerate() {
            if !parts.contains(&source.part()) {
                continue;
            }
            let source = Arc::new(source);
            let stop = shutdown.child();
            let task = source.spawn(Arc::clone(engine), stop.clone());
            let new = Running { source, stop, task };
            let mut running = self.running.write().unwrap_or_else(|p| p.into_inner());
            match running
                .iter()
                .position(|r| r.source.part() == new.source.part())
            {
                Some(i) => std::mem::replace(&mut running[i], new).stop.trigger(),
                None => {
                    let index = index.min(running.len());
                    running.insert(index, new);
                }
            }
        }
    }

    /// Waits until every started source ended (after the connector's stop).
    pub async fn join(&self) {
        let tasks: Vec<JoinHandle<()>> = {
            let mut running = self.running.write().unwrap_or_else(|p| p.into_inner());
            running.iter_mut().filter_map(|r| r.task.take()).collect()
        };
        for task in tasks {
            let _ = task.await;
        }
    }

    fn read<R>(&self, f: impl FnOnce(&[Running<T>]) -> R) -> R {
        // Every write replaces whole entries: a panic under the lock leaves none half made.
        match self.running.read() {
            Ok(r) => f(&r),
            Err(poisoned) => f(&poisoned.into_inner()),
        }
    }
}

/// The sources of a config, built, not running.
pub struct Built {
    ingest: Vec<IngestSource>,
    nats: Vec<NatsSource>,
    mqtt: Vec<MqttSource>,
    schedules: Vec<ScheduleSource>,
    backfills: Vec<BackfillSource>,
}

impl Built {
    /// The sources of `config`.
    pub fn new(config: &Config) -> Self {
        let data_dir = &config.connector.data_dir;
        Self {
            ingest: config
                .ingest
                .sources
                .iter()
                .cloned()
                .map(IngestSource::new)
                .collect(),
            nats: config
                .nats
                .sources
                .iter()
                .cloned()
                .map(NatsSource::new)
                .collect(),
            mqtt: config
                .mqtt
                .sources
                .iter()
                .cloned()
                .map(MqttSource::new)
                .collect(),
            schedules: config
                .schedules
                .iter()
                .cloned()
                .map(ScheduleSource::new)
                .collect(),
            backfills: config
                .backfills
                .iter()
                .cloned()
                .map(|b| BackfillSource::new(b, data_dir))
                .collect(),
        }
    }
}

/// Every source a reload changes one at a time.
pub struct Sources {
    /// `ingest.sources`.
    pub ingest: Live<IngestSource>,
    /// `nats.sources`.
    pub nats: Live<NatsSource>,
    /// `mqtt.sources`.
    pub mqtt: Live<MqttSource>,
    /// `schedules`.
    pub schedules: Live<ScheduleSource>,
    /// `backfills`.
    pub backfills: Live<BackfillSource>,
}

/// The prefixes of these sources' part names: the parts a reload changes live.
pub const PREFIXES: [&str; 5] = ["ingest/", "nats/", "mqtt/", "schedule/", "backfill/"];

impl Sources {
    /// `built`, not yet started.
    pub fn new(built: Built) -> Self {
        Self {
            ingest: Live::new(built.ingest),
            nats: Live::new(built.nats),
            mqtt: Live::new(built.mqtt),
            schedules: Live::new(built.schedules),
            backfills: Live::new(built.backfills),
        }
    }

    /// Starts them all: the messaging consumers, then the schedules and the backfills.
    pub fn start(&self, engine: &Arc<Engine>, shutdown: &Shutdown) {
        self.nats.start(engine, shutdown);
        self.mqtt.start(engine, shutdown);
        self.schedules.start(engine, shutdown);
        self.backfills.start(engine, shutdown);
    }

    /// After the connector's stop: waits for the consumers (each settles its pipeline), then
    /// for the schedules and the backfills (each backfill writes its last checkpoint).
    pub async fn join(&self) {
        self.nats.join().await;
        self.mqtt.join().await;
        self.schedules.join().await;
        self.backfills.join().await;
    }

    /// Stops each of `parts` that is one of these sources and waits until it ended (see
    /// [`Live::stop`] for those `restarted`).
    pub async fn stop(&self, parts: &[&str], restarted: bool) {
        for part in parts {
            match part.split_once('/').map(|(kind, _)| kind) {
                Some("ingest") => self.ingest.stop(part, restarted).await,
                Some("nats") => self.nats.stop(part, restarted).await,
                Some("mqtt") => self.mqtt.stop(part, restarted).await,
                Some("schedule") => self.schedules.stop(part, restarted).await,
                Some("backfill") => self.backfills.stop(part, restarted).await,
                _ => {}
            }
        }
    }

    /// Starts each of `parts` that is one of the sources `built`.
    pub fn add(&self, built: Built, parts: &[&str], engine: &Arc<Engine>, shutdown: &Shutdown) {
        self.ingest.add(built.ingest, parts, engine, shutdown);
        self.nats.add(built.nats, parts, engine, shutdown);
        self.mqtt.add(built.mqtt, parts, engine, shutdown);
        self.schedules.add(built.schedules, parts, engine, shutdown);
        self.backfills.add(built.backfills, parts, engine, shutdown);
    }
}

impl Part for IngestSource {
    fn part(&self) -> &str {
        self.source()
    }

    fn spawn(self: &Arc<Self>, _engine: Arc<Engine>, _stop: Shutdown) -> Option<JoinHandle<()>> {
        None
    }
}

impl Part for NatsSource {
    fn part(&self) -> &str {
        self.source()
    }

    fn spawn(self: &Arc<Self>, engine: Arc<Engine>, stop: Shutdown) -> Option<JoinHandle<()>> {
        Some(tokio::spawn(Arc::clone(self).run(engine, stop)))
    }
}

impl Part for MqttSource {
    fn part(&self) -> &str {
        self.source()
    }

    fn spawn(self: &Arc<Self>, engine: Arc<Engine>, stop: Shutdown) -> Option<JoinHandle<()>> {
        Some(tokio::spawn(Arc::clone(self).run(engine, stop)))
    }
}

impl Part for ScheduleSource {
    fn part(&self) -> &str {
        self.source()
    }

    fn spawn(self: &Arc<Self>, engine: Arc<Engine>, stop: Shutdown) -> Option<JoinHandle<()>> {
        Some(tokio::spawn(Arc::clone(self).run(engine, stop)))
    }
}

impl Part for BackfillSource {
    fn part(&self) -> &str {
        self.source()
    }

    fn spawn(self: &Arc<Self>, engine: Arc<Engine>, stop: Shutdown) -> Option<JoinHandle<()>> {
        Some(tokio::spawn(Arc::clone(self).run(engine, stop)))
    }
}
