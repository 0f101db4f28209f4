//! One configured sink: its name, its kind, and (with `queue: disk`) the durable queue in
//! front of its destination. Everything the rest of the program does with a sink is a method
//! of [`Sink`]; the arms per kind are all in this file, and none is a wildcard, so a new kind
//! is its folder, its [`Kind`] arm here and its config arm in [`super::config`].

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use serde_json::{Map, Value};

use super::backlog::PushError;
use super::clickhouse::ClickHouseSink;
use super::config::{SinkConfig, SinkSpec};
use super::mqtt::MqttSink;
use super::nats::NatsSink;
use super::postgres::PostgresSink;
use super::push::{queue_file as push_queue_file, PushSink};
use super::queue::{Deliverer, DiskQueue, DiskQueueConfig, QueueMode, DISK_FAMILIES};
use super::report::{Report, Samples};
use super::sparkplug::SparkplugSink;
use super::storage::StorageSink;
use crate::admission::{Refused, Reservation};
use crate::commands::Commands;
use crate::engine::Engine;
use crate::ledger::{Book, Counts};
use crate::record::Record;
use crate::shutdown::Shutdown;
use crate::sources::catalogue::Catalogue;
use crate::store::queue::{ReplayError, ReplaySummary};
use crate::store::{DeadLetter, StoreError};

/// The documents of the delivery document that a sink named after its kind shows at the top
/// level of `/api/status`; `null` when no such sink exists.
pub const TOP_LEVEL_DOCUMENTS: &[&str] = &[
    "push_queue",
    "push_status",
    "uplink",
    "storage",
    "clickhouse",
    "postgres",
];

/// The kinds, with their runtime.
enum Kind {
    /// A durable (or volatile) queue and its HTTP uplink.
    Push(Arc<PushSink>),
    /// A local event history.
    Storage(Arc<StorageSink>),
    /// A ClickHouse table.
    ClickHouse(Arc<ClickHouseSink>),
    /// A Postgres table.
    Postgres(Arc<PostgresSink>),
    /// A NATS subject (JetStream with ack, or core + flush).
    Nats(Arc<NatsSink>),
    /// An MQTT topic.
    Mqtt(Arc<MqttSink>),
    /// A Sparkplug B edge node (always behind its disk queue).
    Sparkplug(Arc<SparkplugSink>),
}

/// What a sink did with a record it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// Stored, queued, or confirmed by its destination.
    Stored,
    /// Kept out by design (the push preprocess: deadband, aggregation).
    Suppressed,
    /// Handed over with nothing to confirm it (MQTT QoS 0).
    Unconfirmed,
}

/// Why a delivery failed after admission.
#[derive(Debug)]
pub enum DeliveryError {
    /// The sink refused (it filled up since admission, or the record grew): the source retries.
    Refused(Refused),
    /// The sink could not store it: the source retries.
    Store(StoreError),
    /// The destination did not confirm it (after its retries): the source retries.
    Publish(String),
    /// The record itself cannot be delivered (a topic or subject it would make is not valid):
    /// retrying cannot help, so it goes to the dead-letter queue with the reason.
    Rejected(String),
}

impl std::fmt::Display for DeliveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(_) => write!(f, "refused (full)"),
            Self::Store(e) => write!(f, "{e}"),
            Self::Publish(e) | Self::Rejected(e) => write!(f, "{e}"),
        }
    }
}

impl From<PushError> for DeliveryError {
    fn from(e: PushError) -> Self {
        match e {
            PushError::Refused(r) => Self::Refused(r),
            PushError::Closed => Self::Store(StoreError::Closed),
        }
    }
}

/// Why a sink could not be built.
#[derive(Debug)]
pub enum BuildError {
    /// A store could not be opened.
    Store(String, StoreError),
    /// A client could not be set up (a TLS file, say).
    Client(String, String),
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Store(sink, e) => write!(f, "sink {sink}: cannot open its store: {e}"),
            Self::Client(sink, e) => write!(f, "sink {sink}: {e}"),
        }
    }
}

impl std::error::Error for BuildError {}

/// What a sink needs to start.
#[derive(Clone)]
pub struct StartContext {
    /// The engine (for the dead-letter queue of the memory backlogs).
    pub engine: Arc<Engine>,
    /// The daemon's runtime, for the async clients.
    pub runtime: tokio::runtime::Handle,
    /// The stop signal.
    pub shutdown: Shutdown,
    /// The point catalogue: a Sparkplug node's DBIRTH and DDEATH follow its devices.
    pub devices: Catalogue,
    /// The commands service: a Sparkplug node's DCMDs go through it.
    pub commands: Arc<Commands>,
    /// The health model: a Sparkplug node publishes its state as `Connector/Healthy`.
    pub health: Arc<crate::health::Board>,
}

/// What a started sink leaves running.
#[derive(Default)]
pub struct Running {
    /// Threads that end on the stop signal (deliverers, sweepers): joined before the runtime
    /// stops.
    pub on_signal: Vec<JoinHandle<()>>,
    /// Threads that end once the sink is closed (memory backlogs inserting what is left):
    /// joined after [`Sink::close`].
    pub on_close: Vec<JoinHandle<()>>,
    /// Tasks on the runtime that end on the stop signal (broker clients).
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Adds what `other` runs.
    pub fn extend(&mut self, other: Running) {
        self.on_signal.extend(other.on_signal);
        self.on_close.extend(other.on_close);
        self.tasks.extend(other.tasks);
    }
}

/// What a stopped sink held in memory, taken for its next instance: the rows, then its part
/// of the ledger (which counts them pending).
pub enum Held {
    /// A database sink's backlog (ClickHouse and Postgres keep the records as they are).
    Backlog((Vec<super::backlog::Row<()>>, BTreeMap<String, Counts>)),
    /// A push sink's volatile buffer, with its dead letters.
    Buffer(Box<(super::push::HeldBuffer, BTreeMap<String, Counts>)>),
}

impl Held {
    /// Gives the rows up when no instance can take them (a failed reload whose old instance
    /// could not be built again): their part of the ledger, each pending row counted
    /// `dropped`.
    pub fn give_up(self, sink: &str) -> BTreeMap<String, Counts> {
        let rows = self.rows();
        let mut part = match self {
            Self::Backlog((_, part)) => part,
            Self::Buffer(held) => held.1,
        };
        for c in part.values_mut() {
            c.dropped += std::mem::take(&mut c.pending);
        }
        log::error!("rows held in memory lost: no instance of the sink could take them: sink={sink} rows={rows}");
        part
    }

    /// The rows held.
    pub fn rows(&self) -> usize {
        match self {
            Self::Backlog((rows, _)) => rows.len(),
            Self::Buffer(held) => held.0.rows(),
        }
    }

    /// True when it holds nothing to go on with (no rows, no dead letters).
    fn is_empty(&self) -> bool {
        match self {
            Self::Backlog((rows, _)) => rows.is_empty(),
            Self::Buffer(held) => held.0.is_empty(),
        }
    }
}

/// One sink.
pub struct Sink {
    name: String,
    kind: Kind,
    /// `queue: disk` in front of the destination (push keeps its queue inside).
    queue: Option<Arc<DiskQueue>>,
    /// The file under the data dir its rows wait in, when they wait on disk.
    rows_file: Option<String>,
}

/// The file of sink `name`'s `queue: disk`.
pub fn queue_file(name: &str) -> String {
    format!("queue-{name}.db")
}

impl Sink {
    /// Builds sink `cfg` (opens its stores under `data_dir`, sets up its clients).
    pub fn build(cfg: &SinkConfig, data_dir: &Path) -> Result<Self, BuildError> {
        let name = cfg.name.as_str();
        let store = |e| BuildError::Store(name.to_string(), e);
        let client = |e| BuildError::Client(name.to_string(), e);
        let (kind, mode) = match &cfg.spec {
            SinkSpec::Push(c) => (
                Kind::Push(Arc::new(PushSink::open(name, c, data_dir).map_err(store)?)),
                QueueMode::Memory,
            ),
            SinkSpec::Storage(c) => (
                Kind::Storage(Arc::new(
                    StorageSink::open(name, c, data_dir).map_err(store)?,
                )),
                QueueMode::Memory,
            ),
            SinkSpec::ClickHouse(c) => (
                Kind::ClickHouse(Arc::new(ClickHouseSink::new(name, c.clone()))),
                c.queue,
            ),
            SinkSpec::Postgres(c) => (
                Kind::Postgres(Arc::new(PostgresSink::new(name, c.clone()))),
                c.queue,
            ),
            SinkSpec::Nats(c) => (
                Kind::Nats(Arc::new(NatsSink::new(name, c.clone()))),
                c.queue,
            ),
            SinkSpec::Mqtt(c) => (
                Kind::Mqtt(Arc::new(MqttSink::new(name, c.clone()).map_err(client)?)),
                c.queue,
            ),
            SinkSpec::Sparkplug(c) => (
                Kind::Sparkplug(Arc::new(
                    SparkplugSink::new(name, c.clone(), data_dir).map_err(client)?,
                )),
                c.queue_mode(),
            ),
        };
        let queue = match mode {
            QueueMode::Memory => None,
            QueueMode::Disk(q) => Some(Arc::new(open_queue(name, &q, data_dir).map_err(store)?)),
        };
        Ok(Self {
            name: name.to_string(),
            kind,
            queue,
            rows_file: Self::rows_file_of(cfg),
        })
    }

    /// The file under the data dir where sink `cfg` keeps the rows its destination has not
    /// confirmed, when it keeps them on disk: push's queue, any `queue: disk`.
    pub fn rows_file_of(cfg: &SinkConfig) -> Option<String> {
        let disk = match &cfg.spec {
            SinkSpec::Push(c) => return c.queue.enabled.then(|| push_queue_file(&cfg.name)),
            SinkSpec::Storage(_) => false,
            SinkSpec::ClickHouse(c) => c.queue.is_disk(),
            SinkSpec::Postgres(c) => c.queue.is_disk(),
            SinkSpec::Nats(c) => c.queue.is_disk(),
            SinkSpec::Mqtt(c) => c.queue.is_disk(),
            SinkSpec::Sparkplug(_) => true,
        };
        disk.then(|| queue_file(&cfg.name))
    }

    /// The file its rows wait in, when they wait on disk (see [`Self::rows_file_of`]).
    pub fn rows_file(&self) -> Option<&str> {
        self.rows_file.as_deref()
    }

    /// Checks what building sink `cfg` checks before it opens its store (a Sparkplug node's
    /// client options: a TLS file), for a sink a reload builds only once its other changes
    /// are made.
    pub fn check(cfg: &SinkConfig, data_dir: &Path) -> Result<(), BuildError> {
        match &cfg.spec {
            SinkSpec::Sparkplug(c) => SparkplugSink::new(&cfg.name, c.clone(), data_dir)
                .map(drop)
                .map_err(|e| BuildError::Client(cfg.name.clone(), e)),
            SinkSpec::Push(_)
            | SinkSpec::Storage(_)
            | SinkSpec::ClickHouse(_)
            | SinkSpec::Postgres(_)
            | SinkSpec::Nats(_)
            | SinkSpec::Mqtt(_) => Ok(()),
        }
    }

    /// The name flows, `/api/status`, metric labels and the ledger use.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Rows it holds that its destination has not confirmed yet (its queue or backlog; 0 for
    /// a sink without one): what removing it would leave behind.
    pub fn held_rows(&self) -> u64 {
        // Storage's rows are its history: stored, not waiting for anyone.
        if self.queue.is_none() && matches!(self.kind, Kind::Storage(_)) {
            return 0;
        }
        self.report()
            .entry
            .get("queue_rows")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    }

    /// True when it keeps nothing of its own between two instances (no queue file, no
    /// backlog, no history): a reload starts the new instance before the old one stops. Not
    /// an `mqtt` sink: its session on the broker is its own, under its client id, and two
    /// instances holding it at once would take it from each other.
    pub fn is_stateless(&self) -> bool {
        self.queue.is_none() && matches!(self.kind, Kind::Nats(_))
    }

    /// True when what it holds (its rows, its part of the ledger) is in files of its own: a
    /// new instance opening them goes on from there.
    pub fn is_durable(&self) -> bool {
        self.report().entry.get("durable") == Some(&serde_json::Value::Bool(true))
    }

    /// Its kind: `push`, `storage`, `clickhouse`, `postgres`, `nats`, `mqtt` or `sparkplug`.
    pub fn kind(&self) -> &'static str {
        match &self.kind {
            Kind::Push(_) => "push",
            Kind::Storage(_) => "storage",
            Kind::ClickHouse(_) => "clickhouse",
            Kind::Postgres(_) => "postgres",
            Kind::Nats(_) => "nats",
            Kind::Mqtt(_) => "mqtt",
            Kind::Sparkplug(_) => "sparkplug",
        }
    }

    /// The logical bytes `record` takes in this sink (rows for a database backlog).
    pub fn bytes(&self, record: &Record) -> u64 {
        if self.queue.is_some() {
            return DiskQueue::row_bytes(record.line_len());
        }
        match &self.kind {
            Kind::Push(p) => p.bytes(record),
            Kind::Storage(s) => s.bytes(record),
            // The database backlogs are bounded in rows: their gates count one per record.
            Kind::ClickHouse(_) | Kind::Postgres(_) => 1,
            Kind::Nats(n) => n.bytes(record),
            Kind::Mqtt(m) => m.bytes(record),
            // Never reached: a sparkplug sink always has its disk queue.
            Kind::Sparkplug(_) => DiskQueue::row_bytes(record.line_len()),
        }
    }

    /// Asks the sink to admit `bytes`, before any node runs.
    pub fn admit(&self, bytes: u64) -> Result<Reservation, Refused> {
        if let Some(q) = &self.queue {
            return q.admit(bytes);
        }
        match &self.kind {
            Kind::Push(p) => p.admit(bytes),
            Kind::Storage(s) => s.admit(bytes),
            Kind::ClickHouse(c) => match c.backlog() {
                Some(b) => b.gate().admit(bytes),
                None => Err(Refused {
                    after: crate::admission::RETRY_AFTER,
                }),
            },
            Kind::Postgres(p) => match p.backlog() {
                Some(b) => b.gate().admit(bytes),
                None => Err(Refused {
                    after: crate::admission::RETRY_AFTER,
                }),
            },
            Kind::Nats(n) => {
                n.admit()?;
                n.gate().admit(bytes)
            }
            Kind::Mqtt(m) => {
                m.admit()?;
                m.gate().admit(bytes)
            }
            // Never reached: a sparkplug sink always has its disk queue.
            Kind::Sparkplug(_) => Err(Refused {
                after: crate::admission::RETRY_AFTER,
            }),
        }
    }

    /// True for the sinks that hold a record in a queue before it reaches its destination
    /// (push, the database backlogs, any `queue: disk`): the ledger tracks a record's copy
    /// there until it leaves.
    pub fn is_queue(&self) -> bool {
        if self.queue.is_some() {
            return true;
        }
        match &self.kind {
            Kind::Push(_) | Kind::ClickHouse(_) | Kind::Postgres(_) | Kind::Sparkplug(_) => true,
            Kind::Storage(_) | Kind::Nats(_) | Kind::Mqtt(_) => false,
        }
    }

    /// Hands `record` to the sink; returns once it is stored, queued or confirmed.
    /// `reservation` covers what admission reserved; `tracked`: this copy carries the record in
    /// the ledger's per-source figures.
    pub async fn deliver(
        &self,
        record: &Record,
        reservation: Reservation,
        tracked: bool,
    ) -> Result<Delivered, DeliveryError> {
        if let Some(q) = &self.queue {
            q.store(record, &record.source, tracked, reservation)
                .await?;
            return Ok(Delivered::Stored);
        }
        match &self.kind {
            Kind::Push(p) => p.deliver(record, reservation, tracked).await,
            Kind::Storage(s) => s.deliver(record, reservation).await,
            // Returns once the row is in the memory backlog, not once it is inserted.
            Kind::ClickHouse(c) => c.deliver(record, tracked, reservation),
            Kind::Postgres(p) => p.deliver(record, tracked, reservation),
            Kind::Nats(n) => n.deliver(record).await,
            Kind::Mqtt(m) => m.deliver(record).await,
            // Never reached: a sparkplug sink always has its disk queue.
            Kind::Sparkplug(_) => Err(DeliveryError::Refused(Refused {
                after: crate::admission::RETRY_AFTER,
            })),
        }
    }

    /// Starts what the sink runs: its clients, its insert thread, its deliverer.
    pub fn start(&self, ctx: &StartContext) -> std::io::Result<Running> {
        let mut running = match &self.kind {
            Kind::Push(p) => p.start(ctx)?,
            Kind::Storage(s) => s.start(ctx)?,
            Kind::ClickHouse(c) => c.start(ctx)?,
            Kind::Postgres(p) => p.start(ctx)?,
            Kind::Nats(n) => n.start(ctx)?,
            Kind::Mqtt(m) => m.start(ctx)?,
            Kind::Sparkplug(s) => s.start(ctx, self.queue.clone())?,
        };
        if let Some(q) = &self.queue {
            let destination = match &self.kind {
                // Push's queue is its own, drained by its uplink; storage has no queue.
                Kind::Push(_) | Kind::Storage(_) => None,
                Kind::ClickHouse(c) => Some((c.destination(), c.delivery())),
                Kind::Postgres(p) => Some((p.destination()?, p.delivery())),
                Kind::Nats(n) => Some((n.destination(ctx), n.delivery())),
                Kind::Mqtt(m) => Some((m.destination(ctx), m.delivery())),
                Kind::Sparkplug(s) => Some((s.destination(ctx), s.delivery())),
            };
            if let Some((destination, delivery)) = destination {
                let deliverer = Deliverer::new(
                    &self.name,
                    delivery,
                    q.drain(),
                    destination,
                    Arc::clone(q.delivery()),
                    ctx.shutdown.clone(),
                );
                running.on_signal.push(deliverer.spawn()?);
            }
        }
        Ok(running)
    }

    /// Stops taking records and commits or inserts what is held (database backlogs up to
    /// their stop deadline). Call it after the threads that end on the signal were joined.
    pub fn close(&self) {
        match &self.kind {
            Kind::Push(p) => p.close(),
            Kind::Storage(s) => s.close(),
            Kind::ClickHouse(c) => c.close(),
            Kind::Postgres(p) => p.close(),
            Kind::Nats(_) | Kind::Mqtt(_) | Kind::Sparkplug(_) => {}
        }
        if let Some(q) = &self.queue {
            q.close();
        }
    }

    /// Where it holds rows in memory, as `cfg` would build it: `backlog` (a database sink
    /// without `queue: disk`) or `buffer` (a push sink without a durable queue); `None` for
    /// the others. Rows a running instance holds there go to a new instance of the same.
    pub fn memory_of(cfg: &SinkConfig) -> Option<&'static str> {
        match &cfg.spec {
            SinkSpec::ClickHouse(c) if !c.queue.is_disk() => Some("backlog"),
            SinkSpec::Postgres(c) if !c.queue.is_disk() => Some("backlog"),
            SinkSpec::Push(c) if !c.queue.enabled => Some("buffer"),
            _ => None,
        }
    }

    /// Where this instance holds rows in memory (see [`Self::memory_of`]).
    pub fn memory(&self) -> Option<&'static str> {
        match &self.kind {
            Kind::Push(p) => p.is_volatile().then_some("buffer"),
            Kind::ClickHouse(_)
            | Kind::Postgres(_)
            | Kind::Storage(_)
            | Kind::Nats(_)
            | Kind::Mqtt(_)
            | Kind::Sparkplug(_) => self.backlog().map(|_| "backlog"),
        }
    }

    /// A database sink's memory backlog (none with `queue: disk`).
    fn backlog(&self) -> Option<&super::backlog::Backlog<()>> {
        match &self.kind {
            Kind::ClickHouse(c) => c.backlog(),
            Kind::Postgres(p) => p.backlog(),
            Kind::Push(_)
            | Kind::Storage(_)
            | Kind::Nats(_)
            | Kind::Mqtt(_)
            | Kind::Sparkplug(_) => None,
        }
    }

    /// At a stop that keeps its rows (for its next instance, or to give them up): a memory
    /// backlog stops taking rows and its insert thread ends after the insert in flight,
    /// leaving the rest waiting. After the threads that end on the signal were joined; then
    /// join the closing threads, and [`Self::take_held`] or [`Self::discard`].
    pub fn release(&self) {
        if let Some(b) = self.backlog() {
            b.release();
        }
    }

    /// Gives up every row it holds for its destination (its queue, its backlog or buffer),
    /// each counted `discarded` in its source's ledger: a reload removed it with `discard`.
    /// After [`Self::release`] and its threads ended, before [`Self::close`]; the rows given
    /// up.
    pub fn discard(&self) -> Result<u64, StoreError> {
        if let Some(q) = &self.queue {
            return q.discard();
        }
        match &self.kind {
            Kind::Push(p) => p.discard(),
            Kind::ClickHouse(_)
            | Kind::Postgres(_)
            | Kind::Storage(_)
            | Kind::Nats(_)
            | Kind::Mqtt(_)
            | Kind::Sparkplug(_) => Ok(self.backlog().map_or(0, |b| b.discard())),
        }
    }

    /// The rows (and a volatile buffer's dead letters) it holds in memory with their part of
    /// the ledger, taken for its next instance ([`Self::adopt`]); `None` when it holds none
    /// there. After [`Self::release`]
    /// and its threads ended.
    pub fn take_held(&self) -> Option<Held> {
        let held = match &self.kind {
            Kind::Push(p) => p.take_buffer().map(|b| Held::Buffer(Box::new(b))),
            Kind::ClickHouse(_)
            | Kind::Postgres(_)
            | Kind::Storage(_)
            | Kind::Nats(_)
            | Kind::Mqtt(_)
            | Kind::Sparkplug(_) => self.backlog().map(|b| Held::Backlog(b.take())),
        };
        held.filter(|h| !h.is_empty())
    }

    /// Goes on from what a former instance held in memory ([`Self::take_held`]): its rows
    /// first in line, its part of the ledger. Before [`Self::start`]. `Err` gives `held` back
    /// when this instance keeps no such rows (see [`Self::memory_of`]).
    pub fn adopt(&self, held: Held) -> Result<(), Held> {
        match (held, self.backlog(), &self.kind) {
            (Held::Backlog((rows, part)), Some(b), _) => {
                b.adopt(rows, part);
                Ok(())
            }
            (Held::Buffer(held), _, Kind::Push(p)) if p.is_volatile() => {
                let (rows, part) = *held;
                p.adopt(rows, part);
                Ok(())
            }
            (held, _, _) => Err(held),
        }
    }

    /// Everything the rest of the program reads of it, now.
    pub fn report(&self) -> Report {
        let mut r = match &self.kind {
            Kind::Push(p) => p.report(),
            Kind::Storage(s) => s.report(),
            Kind::ClickHouse(c) => c.report(),
            Kind::Postgres(p) => p.report(),
            Kind::Nats(n) => n.report(),
            Kind::Mqtt(m) => m.report(),
            Kind::Sparkplug(s) => s.report(self.queue.as_deref()),
        };
        if let Some(q) = &self.queue {
            queued_report(&self.name, q, &mut r);
        }
        let mut entry = Map::new();
        entry.insert("name".into(), self.name.clone().into());
        entry.insert("type".into(), self.kind().into());
        entry.extend(std::mem::take(&mut r.entry));
        r.entry = entry;
        if self.name == self.kind() {
            r.documents = match &self.kind {
                Kind::Push(_) => vec![
                    ("push_queue", r.status["queue"].clone()),
                    ("push_status", r.status["queue"].clone()),
                    ("uplink", r.status["uplink"].clone()),
                ],
                Kind::Storage(_) => vec![("storage", r.status.clone())],
                Kind::ClickHouse(_) => vec![("clickhouse", r.status.clone())],
                Kind::Postgres(_) => vec![("postgres", r.status.clone())],
                Kind::Nats(_) | Kind::Mqtt(_) | Kind::Sparkplug(_) => Vec::new(),
            };
        }
        r
    }

    /// The full text of the sink's last errors (they may echo records): the admin endpoint's.
    pub fn error_detail(&self) -> Value {
        let own = match &self.kind {
            Kind::Push(p) => p.error_detail(),
            Kind::Storage(_) => Value::Null,
            Kind::ClickHouse(c) => c.error_detail(),
            Kind::Postgres(p) => p.error_detail(),
            Kind::Nats(n) => n.error_detail(),
            Kind::Mqtt(m) => m.error_detail(),
            Kind::Sparkplug(s) => s.error_detail(),
        };
        serde_json::json!({
            "sink": self.name,
            "type": self.kind(),
            "last_error": own,
            "queue_last_error": self.queue.as_ref().map(|q| q.delivery().detail_json()),
        })
    }

    /// For sinks with a durable queue: its `pending` counts compared with its rows, read one
    /// by one (one pass over the queue). `None` for the others.
    pub fn verify(&self) -> Option<Value> {
        if let Some(q) = &self.queue {
            return Some(q.verify());
        }
        match &self.kind {
            Kind::Push(p) => Some(p.verify()),
            Kind::Storage(_)
            | Kind::ClickHouse(_)
            | Kind::Postgres(_)
            | Kind::Nats(_)
            | Kind::Mqtt(_)
            | Kind::Sparkplug(_) => None,
        }
    }

    /// The dead letters of its queue (after `after`, at most `max`) and how many there are;
    /// `None` for sinks without a queue of their own.
    pub fn dead_letters(
        &self,
        after: Option<u64>,
        max: usize,
    ) -> Option<Result<(Vec<DeadLetter>, u64), StoreError>> {
        if let Some(q) = &self.queue {
            let total = q
                .counters()
                .dead_rows
                .load(std::sync::atomic::Ordering::Relaxed);
            return Some(q.dead_letters(after, max).map(|rows| (rows, total)));
        }
        match &self.kind {
            Kind::Push(p) => Some(p.dead_letters(after, max)),
            Kind::Storage(_)
            | Kind::ClickHouse(_)
            | Kind::Postgres(_)
            | Kind::Nats(_)
            | Kind::Mqtt(_)
            | Kind::Sparkplug(_) => None,
        }
    }

    /// Dead letter `id` of its queue (`Ok(None)`: no such id); `None` for sinks without a
    /// queue of their own.
    pub fn get_dead_letter(&self, id: u64) -> Option<Result<Option<DeadLetter>, StoreError>> {
        if let Some(q) = &self.queue {
            return Some(q.get_dead_letter(id));
        }
        match &self.kind {
            Kind::Push(p) => Some(p.get_dead_letter(id)),
            Kind::Storage(_)
            | Kind::ClickHouse(_)
            | Kind::Postgres(_)
            | Kind::Nats(_)
            | Kind::Mqtt(_)
            | Kind::Sparkplug(_) => None,
        }
    }

    /// Puts dead letter `id` back at the head of its queue, where its deliverer takes it
    /// before the rows behind it; its seq. Blocking. `None` for sinks without a queue of
    /// their own.
    pub fn replay_dead_letter(&self, id: u64) -> Option<Result<u64, ReplayError>> {
        if let Some(q) = &self.queue {
            return Some(q.replay_dead_letter(id));
        }
        match &self.kind {
            Kind::Push(p) => Some(p.replay_dead_letter(id)),
            Kind::Storage(_)
            | Kind::ClickHouse(_)
            | Kind::Postgres(_)
            | Kind::Nats(_)
            | Kind::Mqtt(_)
            | Kind::Sparkplug(_) => None,
        }
    }

    /// Puts back up to `max` dead letters of its queue, in seq order. Blocking. `None` for
    /// sinks without a queue of their own.
    pub fn replay_dead_letters(&self, max: usize) -> Option<Result<ReplaySummary, StoreError>> {
        if let Some(q) = &self.queue {
            return Some(q.replay_dead_letters(max));
        }
        match &self.kind {
            Kind::Push(p) => Some(p.replay_dead_letters(max)),
            Kind::Storage(_)
            | Kind::ClickHouse(_)
            | Kind::Postgres(_)
            | Kind::Nats(_)
            | Kind::Mqtt(_)
            | Kind::Sparkplug(_) => None,
        }
    }

    /// Deletes dead letter `id` of its queue (`Ok(false)`: no such id); the ledger keeps it
    /// counted as dead-lettered. Blocking. `None` for sinks without a queue of their own.
    pub fn delete_dead_letter(&self, id: u64) -> Option<Result<bool, StoreError>> {
        if let Some(q) = &self.queue {
            return Some(q.delete_dead_letter(id));
        }
        match &self.kind {
            Kind::Push(p) => Some(p.delete_dead_letter(id)),
            Kind::Storage(_)
            | Kind::ClickHouse(_)
            | Kind::Postgres(_)
            | Kind::Nats(_)
            | Kind::Mqtt(_)
            | Kind::Sparkplug(_) => None,
        }
    }

    /// What its deliverer drains: its queue (`None` for sinks without one).
    pub fn drain(&self) -> Option<Arc<dyn super::queue::Drain>> {
        if let Some(q) = &self.queue {
            return Some(q.drain());
        }
        match &self.kind {
            Kind::Push(p) => Some(p.drain()),
            Kind::Storage(_)
            | Kind::ClickHouse(_)
            | Kind::Postgres(_)
            | Kind::Nats(_)
            | Kind::Mqtt(_)
            | Kind::Sparkplug(_) => None,
        }
    }

    /// The part of the loss ledger of a database sink's memory backlog: the one sink part that
    /// books rows parked in the pipeline dead-letter queue (`None` for every other sink).
    pub fn backlog_ledger(&self) -> Option<&Book> {
        match &self.kind {
            Kind::ClickHouse(c) => c.backlog().map(|b| b.ledger()),
            Kind::Postgres(p) => p.backlog().map(|b| b.ledger()),
            Kind::Push(_)
            | Kind::Storage(_)
            | Kind::Nats(_)
            | Kind::Mqtt(_)
            | Kind::Sparkplug(_) => None,
        }
    }

    /// The event history, for a storage sink.
    pub fn storage(&self) -> Option<&Arc<StorageSink>> {
        match &self.kind {
            Kind::Storage(s) => Some(s),
            Kind::Push(_)
            | Kind::ClickHouse(_)
            | Kind::Postgres(_)
            | Kind::Nats(_)
            | Kind::Mqtt(_)
            | Kind::Sparkplug(_) => None,
        }
    }
}

fn open_queue(name: &str, cfg: &DiskQueueConfig, data_dir: &Path) -> Result<DiskQueue, StoreError> {
    DiskQueue::open(&data_dir.join(queue_file(name)), name, cfg)
}

/// Adds a `queue: disk`'s part to its sink's report: the queue in the entry and the status,
/// its queues and alerted counters, its ledger part and figures, its samples.
fn queued_report(name: &str, q: &DiskQueue, r: &mut Report) {
    let st = q.status(0);
    r.entry.insert(
        "dropped".into(),
        (st.evicted_total + st.dropped_total).into(),
    );
    r.entry.insert("blocked".into(), st.blocked_total.into());
    r.entry.insert("queue_rows".into(), st.rows.into());
    r.entry.insert("held".into(), q.delivery().held().into());
    r.entry.insert("durable".into(), true.into());
    r.entry.insert(
        "dead_letter_rows".into(),
        q.counters()
            .dead_rows
            .load(std::sync::atomic::Ordering::Relaxed)
            .into(),
    );
    r.entry.insert("backlog".into(), "disk".into());
    r.entry
        .insert("note".into(), super::queue::DISK_NOTE.into());
    r.entry
        .insert("last_error".into(), q.delivery().last_error_class().into());
    // Every kind's status is an object (or nothing, before the queue's part is added).
    let mut status = r.status.as_object().cloned().unwrap_or_default();
    status.insert(
        "queue".into(),
        serde_json::to_value(&st).unwrap_or_default(),
    );
    status.insert("delivery".into(), q.delivery().to_json());
    r.status = Value::Object(status);
    r.queues = q.queue_reports(&st);
    r.components.extend(q.components());
    r.ledger_part = Some((name.to_string(), q.ledger_part()));
    r.ledger = q.figures();
    r.accepting = q.accepting();
    let mut s = Samples::new(name);
    super::queue::write_samples(
        &DISK_FAMILIES,
        &st,
        q.counters(),
        Some(q.delivery()),
        &mut s,
    );
    r.metrics.extend(s.finish());
}

/// The sinks of a connector, in config order. A reload makes another list, sharing the
/// sinks it keeps.
#[derive(Default)]
pub struct Sinks {
    list: Vec<Arc<Sink>>,
}

impl Sinks {
    /// Sinks from a list.
    pub fn new(list: Vec<Sink>) -> Self {
        Self::shared(list.into_iter().map(Arc::new).collect())
    }

    /// Sinks from a list of sinks another list may hold too.
    pub fn shared(list: Vec<Arc<Sink>>) -> Self {
        Self { list }
    }

    /// The sink called `name`.
    pub fn get(&self, name: &str) -> Option<&Sink> {
        self.list.iter().find(|s| s.name() == name).map(|s| &**s)
    }

    /// The sink called `name`, to hold on to.
    pub fn get_shared(&self, name: &str) -> Option<Arc<Sink>> {
        self.list.iter().find(|s| s.name() == name).cloned()
    }

    /// The index of the sink called `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.list.iter().position(|s| s.name() == name)
    }

    /// Every sink.
    pub fn iter(&self) -> impl Iterator<Item = &Sink> {
        self.list.iter().map(|s| &**s)
    }

    /// Every sink, to hold on to.
    pub fn shared_iter(&self) -> impl Iterator<Item = &Arc<Sink>> {
        self.list.iter()
    }
}
