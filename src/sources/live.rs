//! The sources that a reload changes one at a time ([`crate::reload`]): the ingest API's
//! sources, the webhooks, the NATS and MQTT consumers, the schedules and the backfills. Each
//! runs with a stop signal of its own, which the connector's stop also triggers, so that a
//! reload stops, starts or replaces one while the others go on untouched: their connections,
//! their schedules, their counters.
//!
//! A part stopped alone ends as it ends at the connector's stop: a NATS consumer settles
//! what is in its pipeline, a backfill writes its checkpoint (its replacement resumes from
//! it), a schedule's next tick is not fired.

use std::sync::{Arc, RwLock};

use tokio::task::JoinHandle;

use crate::config::Config;
use crate::engine::Engine;
use crate::shutdown::Shutdown;
use crate::store::dead_letters::DeadLetterQueue;

use super::backfill::BackfillSource;
use super::ingest::IngestSource;
use super::mqtt::MqttSource;
use super::nats::NatsSource;
use super::schedule::ScheduleSource;
use super::webhook::{config::load_secret, WebhookSource};

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

    /// Starts each of `built` (with its place in the new config's order), stopped by
    /// `shutdown` too, in the place of the one of its name still there, else at its place.
    /// Needs the runtime.
    pub fn add(&self, built: Vec<(usize, T)>, engine: &Arc<Engine>, shutdown: &Shutdown) {
        for (index, source) in built {
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

/// Sources of a config, built, not running, each with its place in the config's order.
pub struct Built {
    ingest: Vec<(usize, IngestSource)>,
    webhooks: Vec<(usize, WebhookSource)>,
    nats: Vec<(usize, NatsSource)>,
    mqtt: Vec<(usize, MqttSource)>,
    schedules: Vec<(usize, ScheduleSource)>,
    backfills: Vec<(usize, BackfillSource)>,
}

/// The part a source could not be built for, and why.
pub type Failed = (String, String);

impl Built {
    /// The sources of `config` that `wanted` names (by part name: `webhook/<name>`); a
    /// webhook's secret read (from its file) and its replay window restored from `dlq`.
    /// `Err` with the first that cannot be built.
    pub fn new(
        config: &Config,
        wanted: impl Fn(&str) -> bool,
        dlq: &DeadLetterQueue,
    ) -> Result<Self, Failed> {
        fn pick<C: Clone, T>(
            list: &[C],
            part: impl Fn(&C) -> String,
            wanted: &impl Fn(&str) -> bool,
            build: impl Fn(C) -> Result<T, String>,
        ) -> Result<Vec<(usize, T)>, Failed> {
            let mut out = Vec::new();
            for (index, c) in list.iter().enumerate() {
                let name = part(c);
                if wanted(&name) {
                    out.push((index, build(c.clone()).map_err(|e| (name, e))?));
                }
            }
            Ok(out)
        }
        let data_dir = &config.connector.data_dir;
        let now = crate::record::now_ms() as i64 / 1000;
        Ok(Self {
            ingest: pick(
                &config.ingest.sources,
                |s| format!("ingest/{}", s.name),
                &wanted,
                |s| Ok(IngestSource::new(s)),
            )?,
            webhooks: pick(
                &config.webhooks,
                |w| format!("webhook/{}", w.name),
                &wanted,
                |w| {
                    let secret = load_secret(&w.secret)?;
                    let hook = WebhookSource::new(w, secret);
                    // The requests it answered before, still within its window.
                    hook.restore_window(dlq, now);
                    Ok(hook)
                },
            )?,
            nats: pick(
                &config.nats.sources,
                |s| format!("nats/{}", s.name),
                &wanted,
                |s| Ok(NatsSource::new(s)),
            )?,
            mqtt: pick(
                &config.mqtt.sources,
                |s| format!("mqtt/{}", s.name),
                &wanted,
                |s| Ok(MqttSource::new(s)),
            )?,
            schedules: pick(
                &config.schedules,
                |s| format!("schedule/{}", s.name),
                &wanted,
                |s| Ok(ScheduleSource::new(s)),
            )?,
            backfills: pick(
                &config.backfills,
                |b| format!("backfill/{}", b.name),
                &wanted,
                |b| Ok(BackfillSource::new(b, data_dir)),
            )?,
        })
    }
}

/// Every source a reload changes one at a time.
pub struct Sources {
    /// `ingest.sources`.
    pub ingest: Live<IngestSource>,
    /// `webhooks`.
    pub webhooks: Live<WebhookSource>,
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
pub const PREFIXES: [&str; 6] = [
    "ingest/",
    "webhook/",
    "nats/",
    "mqtt/",
    "schedule/",
    "backfill/",
];

impl Sources {
    /// `built`, not yet started.
    pub fn new(built: Built) -> Self {
        fn live<T: Part>(built: Vec<(usize, T)>) -> Live<T> {
            Live::new(built.into_iter().map(|(_, s)| s).collect())
        }
        Self {
            ingest: live(built.ingest),
            webhooks: live(built.webhooks),
            nats: live(built.nats),
            mqtt: live(built.mqtt),
            schedules: live(built.schedules),
            backfills: live(built.backfills),
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
                Some("webhook") => self.webhooks.stop(part, restarted).await,
                Some("nats") => self.nats.stop(part, restarted).await,
                Some("mqtt") => self.mqtt.stop(part, restarted).await,
                Some("schedule") => self.schedules.stop(part, restarted).await,
                Some("backfill") => self.backfills.stop(part, restarted).await,
                _ => {}
            }
        }
    }

    /// Starts every source of `built`.
    pub fn add(&self, built: Built, engine: &Arc<Engine>, shutdown: &Shutdown) {
        self.ingest.add(built.ingest, engine, shutdown);
        self.webhooks.add(built.webhooks, engine, shutdown);
        self.nats.add(built.nats, engine, shutdown);
        self.mqtt.add(built.mqtt, engine, shutdown);
        self.schedules.add(built.schedules, engine, shutdown);
        self.backfills.add(built.backfills, engine, shutdown);
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

impl Part for WebhookSource {
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
