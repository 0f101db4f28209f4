//! The edge node's MQTT sessions: one task that owns the node's client, connects with the
//! NDEATH as its Will, follows the primary host's STATE, publishes the births, takes the
//! disk queue's batches when it may publish, answers rebirth requests and hands DCMDs to
//! the commands service.
//!
//! A connection goes:
//! 1. The next `bdSeq` is stored ([`super::bdseq`]); a new client connects (clean session)
//!    with the NDEATH of that `bdSeq` as its Will (QoS 1, not retained).
//! 2. On CONNACK it subscribes to NCMD, DCMD (QoS 1) and, with a primary host, to its STATE
//!    (both the 3.0 topic and the 2.2 one). An NCMD or DCMD that comes flagged retained is
//!    never a command (the broker hands it to every new subscription, so it would run again
//!    at each reconnect): counted in `commands.retained`, logged, nothing run. Without a primary host it publishes its births at
//!    once; with one, once the host's STATE says online (a STATE older than the last one
//!    seen is ignored).
//! 3. Then it takes batches from the queue's deliverer: each record makes its messages
//!    ([`super::node`]), all at QoS 0 as the specification wants, and the batch is settled
//!    once the broker answered an UNSUBSCRIBE sent after them (of a topic never subscribed,
//!    which every broker answers in order). So the rows leave the disk queue only after the
//!    broker has them. It takes the next batch while the broker's answer to the ones before
//!    is on its way (up to [`IN_FLIGHT`] unsettled); the answers settle them in order.
//! 4. It ends when the connection is lost (the broker sends the Will), when the primary host
//!    goes offline (it publishes the NDEATH, disconnects and starts over with the next
//!    `bdSeq`), or at the stop signal (NDEATH, DISCONNECT).
//!
//! A batch holding a record whose message would be over the client's packet cap
//! ([`MAX_PACKET_BYTES`]) is refused before anything of it goes out or changes the node
//! ([`Node::too_large`]): rumqttc would fail to encode the message and drop the connection, and
//! the next session's births would carry the record's values again. The deliverer sends the
//! batch's rows again one at a time; that record, refused alone, goes to the dead letters with
//! its size in the reason (counted `records_too_large`), and the rows behind it go on.
//!
//! The batches it holds when a session ends are answered "retry": their rows stay queued and
//! go out in the next session, flagged historical (some may then arrive twice, as at least once
//! allows). So that they go out in order, the batches of the same round of the deliverer
//! (handed before it learnt of the failure) are answered "retry" too, unpublished; the
//! deliverer hands them again in its next round.
//!
//! Each connection has a new client: a client's queue may still hold messages of the old
//! session (with its seq), which must never be sent after the next NBIRTH.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rumqttc::{AsyncClient, Event, EventLoop, Incoming, LastWill, Outgoing, QoS};
use serde_json::Value as Json;
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::bdseq::BdSeqFile;
use super::config::SparkplugSinkConfig;
use super::node::{Inbound, Kind, Msg, Node, NodeFigures, Plant};
use super::sink::SparkplugStats;
use crate::brokers::mqtt::{options, reconnect_delay, CLIENT_QUEUE, MAX_PACKET_BYTES};
use crate::commands::{Commands, Origin, Request};
use crate::engine::Engine;
use crate::record::{now_ms, Record};
use crate::shutdown::Shutdown;
use crate::sinks::queue::{DiskQueue, Failure, Verdict, IN_FLIGHT};
use crate::sources::catalogue::Catalogue;
use crate::sources::status::ConnState;
use crate::telemetry::events;

/// How often the pollers' states are looked at (DDEATH / DBIRTH).
const WATCH_EVERY: Duration = Duration::from_millis(250);
/// How often the node's own metrics are compared with what was published (NDATA).
const NODE_DATA_EVERY: Duration = Duration::from_secs(5);
/// Events waiting for the session (the event loop's channel to it).
const EVENTS_CAP: usize = 1024;
/// Room in that channel kept for the events that must not be dropped: an incoming message
/// (a command, a STATE) that finds less than this is dropped and counted.
const EVENTS_RESERVED: usize = 8;
// The events that are never dropped fit in the room kept for them: one CONNACK, a fence per
// batch in flight, one DISCONNECT.
const _: () = assert!(EVENTS_RESERVED >= IN_FLIGHT + 2);
/// DCMDs executing at once; more are refused (counted).
pub const COMMANDS_AT_ONCE: usize = 16;
/// The UNSUBSCRIBE that settles a batch: a filter nobody subscribes to.
const FENCE: &str = "opex-connector/sparkplug-fence";
/// Longest wait for the DISCONNECT to go out at a stop.
const GOODBYE: Duration = Duration::from_secs(2);

/// A batch of the disk queue, and where its verdict goes.
pub struct Batch {
    /// The records, oldest first.
    pub records: Vec<Record>,
    /// The deliverer's round: once a batch failed, the ones after it of the same round are
    /// not published (the deliverer hands them again, in order, in its next round).
    pub round: u64,
    /// The verdict: delivered once the broker has every message of the batch.
    pub reply: oneshot::Sender<Verdict>,
}

/// The point catalogue: the devices a node serves, by source.
#[derive(Default, Clone)]
pub struct DevicePlant {
    devices: Catalogue,
}

impl DevicePlant {
    /// The plant of every device of `devices`.
    pub fn new(devices: Catalogue) -> Self {
        Self { devices }
    }
}

impl Plant for DevicePlant {
    fn up(&self, source: &str) -> bool {
        self.devices
            .by_source(source)
            .is_some_and(|s| s.state() == ConnState::Connected)
    }

    fn current(&self, source: &str) -> Option<(u64, Json)> {
        let s = self.devices.by_source(source)?;
        let ts = s.last_poll_ms.load(Ordering::Relaxed);
        Some((ts, Json::Object(s.values())))
    }
}

/// A DCMD the commands service answered: the points whose next value the node reports.
struct Answered {
    device: String,
    points: Vec<String>,
    /// When the answer came (Unix ms).
    at: u64,
}

/// The primary host application's state, as its STATE messages said.
#[derive(Debug, Default)]
struct Host {
    online: Option<bool>,
    last_ts: Option<u64>,
}

impl Host {
    /// Takes a STATE message; returns the new state, or `None` for one older than the last
    /// one seen (a death certificate of an older host session).
    fn update(&mut self, online: bool, ts: Option<u64>) -> Option<bool> {
        if let (Some(ts), Some(last)) = (ts, self.last_ts) {
            if ts < last {
                return None;
            }
        }
        if ts.is_some() {
            self.last_ts = ts;
        }
        self.online = Some(online);
        Some(online)
    }
}

/// Reads a STATE payload: the 3.0 JSON `{"online":..,"timestamp":..}` or the 2.2 text
/// `ONLINE` / `OFFLINE`.
fn parse_state(payload: &[u8]) -> Option<(bool, Option<u64>)> {
    if let Ok(v) = serde_json::from_slice::<Json>(payload) {
        let online = v.get("online")?.as_bool()?;
        return Some((online, v.get("timestamp").and_then(Json::as_u64)));
    }
    match std::str::from_utf8(payload).ok()?.trim() {
        "ONLINE" => Some((true, None)),
        "OFFLINE" => Some((false, None)),
        _ => None,
    }
}

/// Why a connection ended.
enum End {
    /// The stop signal.
    Shutdown,
    /// The primary host went offline.
    HostOffline,
    /// The connection was lost or refused.
    Lost(String),
}

/// A client, and its event loop on a task of its own ([`drive`]). Nothing ever cancels the
/// loop's poll: a poll cut short (by a timer of the session's `select!`) can lose the request
/// it had just taken from the client's queue, and a lost fence would hold the queue's batch
/// unsettled for the rest of the session. The session's requests wait for room in the
/// client's queue; the loop never waits for the session (see [`EVENTS_CAP`]).
struct Conn {
    client: AsyncClient,
    events: mpsc::Receiver<Result<Event, String>>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Conn {
    async fn next(&mut self) -> Result<Event, String> {
        match self.events.recv().await {
            Some(event) => event,
            None => Err("the MQTT event loop stopped".into()),
        }
    }

    async fn publish(&self, topic: String, payload: Vec<u8>, qos: QoS) -> Result<(), String> {
        // A topic with a wildcard is refused by the client; say which.
        if topic.contains(['+', '#']) {
            return Err(format!("{topic:?} is not a topic to publish to"));
        }
        self.client
            .publish(topic, qos, false, payload)
            .await
            .map_err(|e| e.to_string())
    }
}

/// Runs a connection's event loop: counts the publishes written, hands the session the events
/// it acts on, and ends at the first error (the session makes a new client for the next
/// connection), which drops the loop and so fails any request the session waits to queue.
async fn drive(
    mut eventloop: EventLoop,
    events: mpsc::Sender<Result<Event, String>>,
    stats: Arc<SparkplugStats>,
) {
    loop {
        let event = match eventloop.poll().await {
            Ok(event) => event,
            Err(e) => {
                let _ = events.try_send(Err(e.to_string()));
                return;
            }
        };
        match &event {
            Event::Outgoing(Outgoing::Publish(_)) => {
                stats.written.fetch_add(1, Ordering::Relaxed);
            }
            // Commands and STATE: dropped (counted) rather than wait while the session is
            // behind, keeping room for the few events below.
            Event::Incoming(Incoming::Publish(_)) => {
                if events.capacity() <= EVENTS_RESERVED || events.try_send(Ok(event)).is_err() {
                    stats.incoming_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            // At most a few of these wait at once (one CONNACK, the fences of the batches in
            // flight, one DISCONNECT): fewer than `EVENTS_RESERVED`.
            Event::Incoming(Incoming::ConnAck(_) | Incoming::UnsubAck(_))
            | Event::Outgoing(Outgoing::Disconnect) => {
                if let Err(mpsc::error::TrySendError::Full(event)) = events.try_send(Ok(event)) {
                    if events.send(event).await.is_err() {
                        return;
                    }
                }
            }
            Event::Incoming(_) | Event::Outgoing(_) => {}
        }
    }
}

/// What the session needs besides its config.
pub struct Parts {
    /// The sink's name.
    pub name: String,
    /// The node.
    pub node: Node,
    /// The pollers.
    pub plant: DevicePlant,
    /// Where DCMDs go.
    pub commands: Arc<Commands>,
    /// The engine (the commands' records).
    pub engine: Arc<Engine>,
    /// The `bdSeq` file.
    pub bdseq: BdSeqFile,
    /// The counters.
    pub stats: Arc<SparkplugStats>,
    /// The deliverer's batches.
    pub batches: mpsc::Receiver<Batch>,
    /// The sink's disk queue (its fill is a node metric).
    pub queue: Option<Arc<DiskQueue>>,
    /// The stop signal.
    pub shutdown: Shutdown,
    /// The health model, published as `Connector/Healthy`.
    pub health: Arc<crate::health::Board>,
}

/// The session task's state.
pub struct Session {
    cfg: SparkplugSinkConfig,
    p: Parts,
    host: Host,
    /// The rounds and replies of the batches whose messages went out (or are going out),
    /// oldest first, each waiting for its fence's UNSUBACK.
    pending: VecDeque<(u64, oneshot::Sender<Verdict>)>,
    /// The last round of the deliverer a batch of which failed.
    failed_round: Option<u64>,
    bd_seq: u64,
    commands_at_once: Arc<Semaphore>,
    /// The DCMD tasks' answers (at most [`COMMANDS_AT_ONCE`] tasks, each sends once).
    answered: (mpsc::Sender<Answered>, mpsc::Receiver<Answered>),
}

impl Session {
    /// A session task of `cfg` over `parts`; [`Session::run`] drives it.
    pub fn new(cfg: SparkplugSinkConfig, parts: Parts) -> Self {
        Self {
            cfg,
            p: parts,
            host: Host::default(),
            pending: VecDeque::with_capacity(IN_FLIGHT),
            failed_round: None,
            bd_seq: 0,
            commands_at_once: Arc::new(Semaphore::new(COMMANDS_AT_ONCE)),
            answered: mpsc::channel(COMMANDS_AT_ONCE),
        }
    }

    /// Connects, publishes and reconnects until the stop signal.
    pub async fn run(mut self) {
        let mut failures = 0u32;
        let shutdown = self.p.shutdown.clone();
        while !shutdown.is_triggered() {
            let end = match self.connect().await {
                Ok(mut conn) => {
                    let end = self.connection(&mut conn, &mut failures).await;
                    let connected = self.p.stats.connected.load(Ordering::Relaxed);
                    self.end_session();
                    if connected && !matches!(end, End::Lost(_)) {
                        self.goodbye(&mut conn).await;
                    }
                    end
                }
                Err(e) => End::Lost(e),
            };
            match end {
                End::Shutdown => break,
                End::HostOffline => {
                    log::info!(
                        "sparkplug primary host offline: NDEATH published, reconnecting: sink={}",
                        self.p.name
                    );
                }
                End::Lost(e) => {
                    failures += 1;
                    let wait = reconnect_delay(failures, self.cfg.connection.reconnect_max);
                    if failures == 1 || failures.is_power_of_two() {
                        log::warn!(
                            "sparkplug node disconnected, reconnecting: sink={} attempt={failures} retry_in_ms={} error=\"{e}\"",
                            self.p.name,
                            wait.as_millis()
                        );
                    }
                    self.p.stats.set_error(&e);
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = shutdown.wait() => break,
                    }
                }
            }
        }
        self.end_session();
    }

    /// Stores the next `bdSeq` and makes the client whose Will is its NDEATH. The store syncs
    /// the file, so it runs on a blocking thread, not on the runtime's workers.
    async fn connect(&mut self) -> Result<Conn, String> {
        let bdseq = self.p.bdseq.clone();
        let bd_seq = tokio::task::spawn_blocking(move || bdseq.next())
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        self.bd_seq = bd_seq;
        self.p.stats.bd_seq.store(bd_seq, Ordering::Relaxed);
        let mut opts = options(&self.cfg.connection, &format!("sparkplug-{}", self.p.name))?;
        let will = Node::ndeath(bd_seq, now_ms()).encode();
        opts.set_clean_session(true)
            .set_manual_acks(false)
            .set_last_will(LastWill::new(
                self.p.node.topic("NDEATH", None),
                will,
                QoS::AtLeastOnce,
                false,
            ));
        let (client, mut eventloop) = AsyncClient::new(opts, CLIENT_QUEUE);
        // The fence is a small packet after many: with Nagle's algorithm it waits for the
        // broker's delayed ACK, tens of milliseconds per batch.
        let mut network = eventloop.network_options();
        network.set_tcp_nodelay(true);
        eventloop.set_network_options(network);
        let (tx, events) = mpsc::channel(EVENTS_CAP);
        let driver = tokio::spawn(drive(eventloop, tx, Arc::clone(&self.p.stats)));
        Ok(Conn {
            client,
            events,
            driver,
        })
    }

    fn end_session(&mut self) {
        self.p.node.end_session();
        self.p.stats.connected.store(false, Ordering::Relaxed);
        self.p.stats.born.store(false, Ordering::Relaxed);
        for (round, reply) in self.pending.drain(..) {
            self.failed_round = Some(round);
            let _ = reply.send(Verdict::Retry {
                error: Failure::new(
                    "session ended",
                    "the Sparkplug session ended before the broker confirmed the batch",
                ),
                after: None,
            });
        }
    }

    async fn connection(&mut self, conn: &mut Conn, failures: &mut u32) -> End {
        let shutdown = self.p.shutdown.clone();
        let mut watch = tokio::time::interval(WATCH_EVERY);
        watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut node_data = tokio::time::interval(NODE_DATA_EVERY);
        node_data.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let take = self.p.node.is_born() && self.pending.len() < IN_FLIGHT;
            let result = tokio::select! {
                biased;
                _ = shutdown.wait() => return End::Shutdown,
                event = conn.next() => match event {
                    Ok(event) => self.event(conn, event, failures).await,
                    Err(e) => Err(End::Lost(e)),
                },
                batch = self.p.batches.recv(), if take => match batch {
                    Some(batch) => self.batch(conn, batch).await.map_err(End::Lost),
                    None => Err(End::Shutdown),
                },
                answered = self.answered.1.recv() => {
                    if let Some(a) = answered {
                        self.p.node.report_next(&a.device, &a.points, a.at);
                    }
                    Ok(())
                }
                _ = watch.tick() => self.watch(conn).await.map_err(End::Lost),
                _ = node_data.tick() => self.node_data(conn).await.map_err(End::Lost),
            };
            if let Err(end) = result {
                return end;
            }
        }
    }

    async fn event(
        &mut self,
        conn: &mut Conn,
        event: Event,
        failures: &mut u32,
    ) -> Result<(), End> {
        match event {
            Event::Incoming(Incoming::ConnAck(_)) => {
                *failures = 0;
                let s = &self.p.stats;
                s.connected.store(true, Ordering::Relaxed);
                s.sessions.fetch_add(1, Ordering::Relaxed);
                log::info!(
                    "sparkplug node connected: sink={} group={} node={} bdSeq={}",
                    self.p.name,
                    self.cfg.group_id,
                    self.cfg.edge_node_id,
                    self.bd_seq
                );
                let mut filters = vec![
                    self.p.node.topic("NCMD", None),
                    self.p.node.topic("DCMD", Some("+")),
                ];
                if let Some(host) = &self.cfg.primary_host_id {
                    filters.push(format!("spBv1.0/STATE/{host}"));
                    filters.push(format!("STATE/{host}"));
                }
                for f in filters {
                    conn.client
                        .subscribe(f, QoS::AtLeastOnce)
                        .await
                        .map_err(|e| End::Lost(e.to_string()))?;
                }
                if self.cfg.primary_host_id.is_none() {
                    self.births(conn).await.map_err(End::Lost)?;
                }
                Ok(())
            }
            Event::Incoming(Incoming::Publish(p)) => {
                self.incoming(conn, &p.topic, &p.payload, p.retain).await
            }
            Event::Incoming(Incoming::UnsubAck(_)) => {
                // The broker answers in order: this is the fence of the oldest batch.
                if let Some((_, reply)) = self.pending.pop_front() {
                    let _ = reply.send(Verdict::Delivered);
                }
                Ok(())
            }
            Event::Incoming(_) | Event::Outgoing(_) => Ok(()),
        }
    }

    /// A message on a subscribed topic: a STATE of the primary host (retained, as the
    /// specification wants), or an NCMD or DCMD, which is never run when it comes `retained`.
    async fn incoming(
        &mut self,
        conn: &mut Conn,
        topic: &str,
        payload: &[u8],
        retained: bool,
    ) -> Result<(), End> {
        if let Some(host) = &self.cfg.primary_host_id {
            if topic == format!("spBv1.0/STATE/{host}") || topic == format!("STATE/{host}") {
                let Some((online, ts)) = parse_state(payload) else {
                    log::warn!(
                        "sparkplug STATE message not understood, ignored: sink={} topic={topic}",
                        self.p.name
                    );
                    return Ok(());
                };
                let Some(online) = self.host.update(online, ts) else {
                    log::info!(
                        "sparkplug STATE older than the last one, ignored: sink={} topic={topic}",
                        self.p.name
                    );
                    return Ok(());
                };
                self.p
                    .stats
                    .host_online
                    .store(if online { 1 } else { 2 }, Ordering::Relaxed);
                log::info!(
                    "sparkplug primary host state: sink={} host={host} online={online}",
                    self.p.name
                );
                return match (online, self.p.node.is_born()) {
                    (true, false) => self.births(conn).await.map_err(End::Lost),
                    (false, true) => Err(End::HostOffline),
                    _ => Ok(()),
                };
            }
        }
        self.p
            .stats
            .commands_received
            .fetch_add(1, Ordering::Relaxed);
        if retained {
            // The broker hands a retained command to every new subscription: run, it would
            // write again at each reconnect and rebirth.
            events::sparkplug_command_retained(
                &self.p.name,
                topic,
                &self.p.stats.commands_retained,
            );
            return Ok(());
        }
        match self.p.node.inbound(topic, payload) {
            Inbound::Rebirth => {
                self.p.stats.rebirths.fetch_add(1, Ordering::Relaxed);
                log::info!("sparkplug rebirth requested: sink={}", self.p.name);
                if self.p.node.is_born() {
                    self.births(conn).await.map_err(End::Lost)?;
                }
                Ok(())
            }
            Inbound::Write { device, points } => {
                self.write(topic, device, points);
                Ok(())
            }
            Inbound::Ignored(why) => {
                self.p
                    .stats
                    .commands_ignored
                    .fetch_add(1, Ordering::Relaxed);
                log::info!(
                    "sparkplug command ignored: sink={} reason=\"{why}\"",
                    self.p.name
                );
                Ok(())
            }
        }
    }

    /// Hands a DCMD to the commands service, on a task of its own (it waits for the write).
    fn write(&self, topic: &str, device: String, points: Vec<(String, Json)>) {
        let Ok(permit) = Arc::clone(&self.commands_at_once).try_acquire_owned() else {
            self.p
                .stats
                .commands_dropped
                .fetch_add(1, Ordering::Relaxed);
            log::warn!(
                "sparkplug DCMD refused, {COMMANDS_AT_ONCE} commands are executing: sink={} device={device}",
                self.p.name
            );
            return;
        };
        let commands = Arc::clone(&self.p.commands);
        let engine = Arc::clone(&self.p.engine);
        let stats = Arc::clone(&self.p.stats);
        let sink = self.p.name.clone();
        let origin = Origin::Sparkplug {
            topic: topic.to_string(),
        };
        let answered = self.answered.0.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let names: Vec<String> = points.iter().map(|(p, _)| p.clone()).collect();
            let request = Request {
                id: None,
                points,
                expires: None,
                verify: false,
            };
            match commands.execute(&engine, &device, request, origin).await {
                Ok(outcome) => {
                    stats.commands_executed.fetch_add(1, Ordering::Relaxed);
                    // Full only while the session is between connections: the next births
                    // carry the values then, nothing is lost by skipping it.
                    let _ = answered.try_send(Answered {
                        device: device.clone(),
                        points: names,
                        at: now_ms(),
                    });
                    log::info!(
                        "sparkplug DCMD executed: sink={sink} device={device} id={} ok={} result={}",
                        outcome.id,
                        outcome.ok(),
                        outcome.to_json()["points"]
                    );
                }
                Err(e) => {
                    stats.commands_ignored.fetch_add(1, Ordering::Relaxed);
                    log::warn!("sparkplug DCMD refused: sink={sink} device={device} error=\"{e}\"");
                }
            }
        });
    }

    fn figures(&self) -> NodeFigures {
        let (fill, rows) = self.p.queue.as_ref().map_or((0.0, 0), |q| {
            let st = q.status(0);
            (st.fill_pct, st.rows)
        });
        NodeFigures {
            // The one health model's, so that the node and `/api/status` agree.
            healthy: self.p.health.healthy(),
            queue_fill_pct: fill,
            queue_rows: rows,
            devices_online: self.p.node.devices_online(),
        }
    }

    async fn births(&mut self, conn: &mut Conn) -> Result<(), String> {
        let first = !self.p.node.is_born();
        let figures = self.figures();
        let msgs = self
            .p
            .node
            .births(self.bd_seq, now_ms(), &self.p.plant, &figures);
        if first {
            let waiting = self.p.queue.as_ref().map_or(0, |q| q.status(0).rows);
            let s = &self.p.stats;
            s.waiting_at_birth.store(waiting, Ordering::Relaxed);
            s.historical_since_birth.store(0, Ordering::Relaxed);
            s.born.store(true, Ordering::Relaxed);
        }
        self.send(conn, msgs).await
    }

    async fn watch(&mut self, conn: &mut Conn) -> Result<(), String> {
        let msgs = self.p.node.watch(now_ms(), &self.p.plant);
        self.send(conn, msgs).await
    }

    async fn node_data(&mut self, conn: &mut Conn) -> Result<(), String> {
        if !self.p.node.is_born() {
            return Ok(());
        }
        let figures = self.figures();
        let msg = self.p.node.node_data(now_ms(), &figures);
        self.send(conn, msg.into_iter().collect()).await
    }

    async fn batch(&mut self, conn: &mut Conn, batch: Batch) -> Result<(), String> {
        let Batch {
            records,
            round,
            reply,
        } = batch;
        if self.failed_round.is_some_and(|failed| round <= failed) {
            let _ = reply.send(Verdict::Retry {
                error: Failure::new(
                    "earlier batch failed",
                    "a batch before this one was not delivered; this one waits for it",
                ),
                after: None,
            });
            return Ok(());
        }
        if let Some(refused) = self.too_large(&records) {
            // As a failed batch: the ones after it of its round are not published.
            self.failed_round = Some(round);
            let _ = reply.send(refused);
            return Ok(());
        }
        // Pending before anything goes out: a session that ends meanwhile answers it, and
        // the batches after it of its round.
        self.pending.push_back((round, reply));
        // The devices' states first, so a record finds its device's DBIRTH or DDEATH out.
        self.watch(conn).await?;
        let now = now_ms();
        let start = self.p.node.session_start().unwrap_or(now);
        let mut msgs = Vec::new();
        let mut historical = 0;
        for r in &records {
            if r.ts_ms < start {
                historical += 1;
            }
            msgs.extend(self.p.node.record(r, now, &self.p.plant));
        }
        let tally = self.p.node.take_tally();
        let s = &self.p.stats;
        s.records.fetch_add(records.len() as u64, Ordering::Relaxed);
        s.historical_sent.fetch_add(historical, Ordering::Relaxed);
        s.historical_since_birth
            .fetch_add(historical, Ordering::Relaxed);
        s.records_unchanged
            .fetch_add(tally.unchanged, Ordering::Relaxed);
        s.values_skipped.fetch_add(tally.skipped, Ordering::Relaxed);
        s.records_without_device
            .fetch_add(tally.no_device, Ordering::Relaxed);
        if msgs.is_empty() && self.pending.len() == 1 {
            // Nothing to publish and nothing before it unsettled.
            if let Some((_, reply)) = self.pending.pop_back() {
                let _ = reply.send(Verdict::Delivered);
            }
            return Ok(());
        }
        // Made first, then sent in one go: the event loop writes them without waking for
        // each one.
        self.send(conn, msgs).await?;
        conn.client
            .unsubscribe(FENCE)
            .await
            .map_err(|e| e.to_string())
    }

    /// The verdict on a batch holding a record whose message would be over the packet cap:
    /// refused, so the deliverer sends the rows again one at a time. Such a record refused
    /// alone is counted (it goes to the dead letters).
    fn too_large(&self, records: &[Record]) -> Option<Verdict> {
        records.iter().find_map(|r| {
            let size = self.p.node.too_large(r, MAX_PACKET_BYTES)?;
            if records.len() == 1 {
                events::sink_record_too_large(
                    &self.p.name,
                    &self.p.stats.records_too_large,
                    &r.id,
                    size,
                    MAX_PACKET_BYTES,
                );
            }
            Some(Verdict::Refused {
                error: Failure::new(
                    "too large",
                    format!(
                        "record {} would make a Sparkplug message of {size} bytes, over the MQTT packet cap of {MAX_PACKET_BYTES} bytes",
                        r.id
                    ),
                ),
            })
        })
    }

    async fn send(&mut self, conn: &mut Conn, msgs: Vec<Msg>) -> Result<(), String> {
        let s = &self.p.stats;
        for m in msgs {
            let counter = match m.kind {
                Kind::NBirth | Kind::DBirth => &s.births,
                Kind::DDeath => &s.deaths,
                Kind::NData | Kind::DData => &s.data_messages,
                Kind::Historical => &s.historical_messages,
            };
            let seq = m.payload.seq.unwrap_or(0);
            conn.publish(m.topic, m.payload.encode(), QoS::AtMostOnce)
                .await?;
            counter.fetch_add(1, Ordering::Relaxed);
            s.seq.store(seq, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Publishes the NDEATH and disconnects: an intentional end (a stop, the host gone).
    async fn goodbye(&mut self, conn: &mut Conn) {
        let ndeath = Node::ndeath(self.bd_seq, now_ms()).encode();
        let topic = self.p.node.topic("NDEATH", None);
        let sent = async {
            conn.publish(topic, ndeath, QoS::AtLeastOnce).await?;
            conn.client.disconnect().await.map_err(|e| e.to_string())?;
            loop {
                if let Event::Outgoing(Outgoing::Disconnect) = conn.next().await? {
                    return Ok::<(), String>(());
                }
            }
        };
        match tokio::time::timeout(GOODBYE, sent).await {
            Ok(Ok(())) => {
                self.p.stats.ndeaths.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(e)) => log::warn!(
                "sparkplug NDEATH not sent, the broker sends the Will: sink={} error=\"{e}\"",
                self.p.name
            ),
            Err(_) => log::warn!(
                "sparkplug NDEATH not sent within {}s, the broker sends the Will: sink={}",
                GOODBYE.as_secs(),
                self.p.name
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_messages_of_both_versions_are_read_and_stale_ones_ignored() {
        assert_eq!(
            parse_state(br#"{"online":true,"timestamp":5}"#),
            Some((true, Some(5)))
        );
        assert_eq!(parse_state(b"OFFLINE"), Some((false, None)));
        assert_eq!(parse_state(b"maybe"), None);
        let mut h = Host::default();
        assert_eq!(h.update(true, Some(10)), Some(true));
        // The death certificate of the host's previous session arrives late.
        assert_eq!(h.update(false, Some(9)), None);
        assert_eq!(h.update(false, Some(10)), Some(false));
        assert_eq!(h.update(true, None), Some(true));
    }
}
