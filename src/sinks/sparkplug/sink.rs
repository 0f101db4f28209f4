//! The `sparkplug` sink: a disk queue (always) in front of the edge node's session. The
//! queue's deliverer hands its batches to the session task ([`super::session`]), which
//! takes them only while it may publish (connected and, with a primary host, the host
//! online), and answers once the broker has the batch's messages; until then the rows stay
//! on disk. The deliverer does not wait for that answer to hand the next batch (up to
//! [`IN_FLIGHT`](crate::sinks::queue::IN_FLIGHT) unanswered): decoding a batch overlaps the
//! broker's answer to the one before and the commit that deletes it. What the rest of the program sees of it is its [`Report`]: the queue's part
//! (from the queue) and the `sparkplug` object of its `sinks[]` entry.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::bdseq::BdSeqFile;
use super::config::SparkplugSinkConfig;
use super::node::Node;
use super::session::{Batch, DevicePlant, Parts, Session};
use crate::alerts::ComponentReport;
use crate::shutdown::Shutdown;
use crate::sinks::queue::{
    records_of, DeliveryConfig, Destination, DiskQueue, Failure, Handed, Pending, Verdict,
};
use crate::sinks::report::{Report, Samples};
use crate::sinks::{Running, StartContext};
use crate::store::Row;

/// Rows of the disk queue per batch: at most this many records (a few MB decoded) of a batch
/// wait in memory for the session to take them; their messages go through the client's
/// bounded queue.
pub const BATCH_ROWS: usize = 2048;

/// Counters of a `sparkplug` sink.
#[derive(Debug, Default)]
pub struct SparkplugStats {
    /// True while connected to the broker.
    pub connected: AtomicBool,
    /// True between the session's first NBIRTH and its end.
    pub born: AtomicBool,
    /// The primary host: 0 not heard of yet, 1 online, 2 offline.
    pub host_online: AtomicU8,
    /// The `bdSeq` of the current (or last) session.
    pub bd_seq: AtomicU64,
    /// The seq of the last message published.
    pub seq: AtomicU64,
    /// Sessions the broker accepted.
    pub sessions: AtomicU64,
    /// NBIRTH and DBIRTH messages.
    pub births: AtomicU64,
    /// DDEATH messages.
    pub deaths: AtomicU64,
    /// NDEATH messages published by the node itself (clean stop, host offline).
    pub ndeaths: AtomicU64,
    /// DDATA and NDATA messages of live values.
    pub data_messages: AtomicU64,
    /// DDATA messages of historical values.
    pub historical_messages: AtomicU64,
    /// Publishes the client wrote to the broker.
    pub written: AtomicU64,
    /// Records taken from the queue.
    pub records: AtomicU64,
    /// Records sent as historical (taken before the session's births).
    pub historical_sent: AtomicU64,
    /// Rows in the queue when the session's first NBIRTH went out.
    pub waiting_at_birth: AtomicU64,
    /// Historical records sent since then.
    pub historical_since_birth: AtomicU64,
    /// Live records that published nothing (no value changed beyond its deadband).
    pub records_unchanged: AtomicU64,
    /// Values that could not be metrics (a name too long, too many metrics).
    pub values_skipped: AtomicU64,
    /// Records whose device could not be made (too many devices).
    pub records_without_device: AtomicU64,
    /// Records refused for good because a message of theirs would be over the MQTT packet
    /// cap (dead-lettered with the reason).
    pub records_too_large: AtomicU64,
    /// NCMD and DCMD messages received.
    pub commands_received: AtomicU64,
    /// DCMDs the commands service answered.
    pub commands_executed: AtomicU64,
    /// Commands not executed: not understood, not for a polled device, no such device.
    pub commands_ignored: AtomicU64,
    /// DCMDs refused because too many were executing.
    pub commands_dropped: AtomicU64,
    /// NCMDs and DCMDs that came flagged retained: never run.
    pub commands_retained: AtomicU64,
    /// Rebirth requests.
    pub rebirths: AtomicU64,
    /// Incoming messages dropped while the node waited for room to publish.
    pub incoming_dropped: AtomicU64,
    /// The last error, in full (admin only).
    pub last_error: Mutex<Option<String>>,
}

impl SparkplugStats {
    /// Remembers `e` as the last error.
    pub fn set_error(&self, e: &str) {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
    }

    fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A `sparkplug` sink.
pub struct SparkplugSink {
    name: String,
    cfg: SparkplugSinkConfig,
    bdseq: BdSeqFile,
    batches: mpsc::Sender<Batch>,
    receiver: Mutex<Option<mpsc::Receiver<Batch>>>,
    /// Its counters.
    pub stats: Arc<SparkplugStats>,
}

impl SparkplugSink {
    /// Sink `name` from its config, keeping its `bdSeq` under `data_dir`; [`Self::start`]
    /// runs its session.
    pub fn new(name: &str, cfg: SparkplugSinkConfig, data_dir: &Path) -> Result<Self, String> {
        // The client's options are made at every connection; check them once here so a bad
        // TLS file stops the start instead of failing every attempt.
        crate::brokers::mqtt::options(&cfg.connection, &format!("sparkplug-{name}"))?;
        let (batches, receiver) = mpsc::channel(1);
        Ok(Self {
            name: name.to_string(),
            bdseq: BdSeqFile::new(data_dir, name),
            cfg,
            batches,
            receiver: Mutex::new(Some(receiver)),
            stats: Arc::default(),
        })
    }

    /// The config.
    pub fn config(&self) -> &SparkplugSinkConfig {
        &self.cfg
    }

    /// Starts the session task; `queue` is the sink's disk queue (its fill is a node metric).
    pub fn start(
        &self,
        ctx: &StartContext,
        queue: Option<Arc<DiskQueue>>,
    ) -> std::io::Result<Running> {
        let mut running = Running::default();
        let Some(batches) = self
            .receiver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return Ok(running);
        };
        // The polled devices whose records reach this sink.
        let plan = ctx.engine.plan();
        let polled: Vec<_> = self
            .cfg
            .devices
            .iter()
            .filter(|d| plan.reachable_sinks(&d.source).contains(&self.name))
            .cloned()
            .collect();
        let node = Node::new(
            &self.cfg.group_id,
            &self.cfg.edge_node_id,
            &polled,
            self.cfg.deadbands.clone(),
        );
        let session = Session::new(
            self.cfg.clone(),
            Parts {
                name: self.name.clone(),
                node,
                plant: DevicePlant::new(ctx.devices.clone()),
                commands: Arc::clone(&ctx.commands),
                engine: Arc::clone(&ctx.engine),
                bdseq: self.bdseq.clone(),
                stats: Arc::clone(&self.stats),
                batches,
                queue,
                shutdown: ctx.shutdown.clone(),
                health: Arc::clone(&ctx.health),
            },
        );
        running.tasks.push(ctx.runtime.spawn(session.run()));
        Ok(running)
    }

    /// Batch size and back-off of the deliverer of its queue. A batch is settled by one
    /// round trip to the broker and one commit, so it is large: [`BATCH_ROWS`].
    pub fn delivery(&self) -> DeliveryConfig {
        DeliveryConfig {
            batch_rows: BATCH_ROWS,
            max_rows: BATCH_ROWS,
            retry_initial: Duration::from_millis(200),
            retry_max: self.cfg.connection.reconnect_max,
            linger: Duration::ZERO,
        }
    }

    /// The session as the destination of the queue.
    pub fn destination(&self, ctx: &StartContext) -> Box<dyn Destination> {
        Box::new(Forwarder {
            batches: self.batches.clone(),
            round: 0,
            runtime: ctx.runtime.clone(),
            shutdown: ctx.shutdown.clone(),
        })
    }

    /// Everything the rest of the program reads of it (the queue's part comes from the
    /// queue, `queue`).
    pub fn report(&self, queue: Option<&DiskQueue>) -> Report {
        let s = &self.stats;
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let born = s.born.load(Ordering::Relaxed);
        let waiting = historical_waiting(
            born,
            l(&s.waiting_at_birth),
            l(&s.historical_since_birth),
            queue.map(|q| q.status(0).rows),
        );
        let host = self.cfg.primary_host_id.as_ref().map(|id| {
            json!({
                "id": id,
                "state": match s.host_online.load(Ordering::Relaxed) {
                    1 => "online",
                    2 => "offline",
                    _ => "unknown",
                },
            })
        });
        let connected = s.connected.load(Ordering::Relaxed);
        let sparkplug = json!({
            "group_id": self.cfg.group_id,
            "edge_node_id": self.cfg.edge_node_id,
            "connected": connected,
            "publishing": born,
            "primary_host": host,
            "bdSeq": l(&s.bd_seq),
            "seq": l(&s.seq),
            "sessions": l(&s.sessions),
            "births": l(&s.births),
            "deaths": l(&s.deaths),
            "data_messages": l(&s.data_messages),
            "records": l(&s.records),
            "records_unchanged": l(&s.records_unchanged),
            "commands": {
                "received": l(&s.commands_received),
                "executed": l(&s.commands_executed),
                "ignored": l(&s.commands_ignored),
                "dropped": l(&s.commands_dropped),
                "retained": l(&s.commands_retained),
                "rebirths": l(&s.rebirths),
            },
            "historical": {
                "waiting": waiting,
                "sent": l(&s.historical_sent),
                "messages": l(&s.historical_messages),
            },
            "values_skipped": l(&s.values_skipped),
            "records_without_device": l(&s.records_without_device),
            "records_too_large": l(&s.records_too_large),
            "last_error": s.last_error().map(|e| Failure::from_detail(e).class),
        });
        let mut r = Report {
            accepting: true,
            ..Report::default()
        };
        r.entry.insert("connected".into(), connected.into());
        r.entry.insert("sparkplug".into(), sparkplug.clone());
        r.status = json!({ "sparkplug": sparkplug });
        r.components = vec![
            ComponentReport {
                name: format!("{}.skipped", self.name),
                message: "Sparkplug values or records that could not be metrics (names too long, too many metrics or devices)",
                counters: vec![
                    ("values_skipped", l(&s.values_skipped)),
                    ("records_without_device", l(&s.records_without_device)),
                    ("incoming_dropped", l(&s.incoming_dropped)),
                ],
            },
            ComponentReport {
                name: format!("{}.too_large", self.name),
                message: "records over the MQTT packet cap refused for good: dead-lettered",
                counters: vec![("too_large", l(&s.records_too_large))],
            },
        ];
        let mut m = Samples::new(&self.name);
        m.gauge(
            "opex_connector_sparkplug_connected",
            "1 while a Sparkplug sink's node is connected to its broker.",
            f64::from(u8::from(connected)),
        );
        m.gauge(
            "opex_connector_sparkplug_publishing",
            "1 while a Sparkplug sink's node is born and publishes (its primary host online).",
            f64::from(u8::from(born)),
        );
        m.gauge(
            "opex_connector_sparkplug_bdseq",
            "The bdSeq of a Sparkplug sink's current session.",
            l(&s.bd_seq) as f64,
        );
        m.counter(
            "opex_connector_sparkplug_births_total",
            "NBIRTH and DBIRTH messages a Sparkplug sink published.",
            l(&s.births),
        );
        m.counter(
            "opex_connector_sparkplug_deaths_total",
            "DDEATH messages a Sparkplug sink published.",
            l(&s.deaths),
        );
        m.counter(
            "opex_connector_sparkplug_data_messages_total",
            "DDATA and NDATA messages of live values a Sparkplug sink published.",
            l(&s.data_messages),
        );
        m.counter(
            "opex_connector_sparkplug_historical_records_total",
            "Records a Sparkplug sink published as historical (they waited for the broker or the primary host).",
            l(&s.historical_sent),
        );
        m.gauge(
            "opex_connector_sparkplug_historical_waiting",
            "Records a Sparkplug sink holds that will go out as historical (taken while the broker or the primary host was away).",
            waiting as f64,
        );
        m.counter(
            "opex_connector_sparkplug_commands_total",
            "NCMD and DCMD messages a Sparkplug sink received.",
            l(&s.commands_received),
        );
        m.counter(
            "opex_connector_sparkplug_commands_retained_total",
            "NCMD and DCMD messages a Sparkplug sink received flagged retained: never run.",
            l(&s.commands_retained),
        );
        m.counter(
            "opex_connector_sparkplug_sessions_total",
            "MQTT sessions of a Sparkplug sink's node (each with a new bdSeq).",
            l(&s.sessions),
        );
        m.too_large(l(&s.records_too_large));
        r.metrics = m.finish();
        r
    }

    /// The last error in full, for the admin endpoint.
    pub fn error_detail(&self) -> Value {
        match self.stats.last_error() {
            Some(e) => json!({"class": Failure::from_detail(e.clone()).class, "detail": e}),
            None => Value::Null,
        }
    }
}

/// Hands the deliverer's batches to the session; their verdicts come later.
struct Forwarder {
    batches: mpsc::Sender<Batch>,
    /// The deliverer's round (see [`Batch::round`]).
    round: u64,
    runtime: tokio::runtime::Handle,
    shutdown: Shutdown,
}

fn stopped() -> Verdict {
    Verdict::Retry {
        error: Failure::new("stopped", "the Sparkplug session stopped"),
        after: None,
    }
}

impl Destination for Forwarder {
    fn send(&mut self, rows: &[Row]) -> Verdict {
        match self.hand(rows) {
            Handed::Judged(verdict) => verdict,
            Handed::Pending(pending) => self.settle(pending),
        }
    }

    fn hand(&mut self, rows: &[Row]) -> Handed {
        let records = match records_of(rows) {
            Ok(r) => r,
            Err(verdict) => return Handed::Judged(verdict),
        };
        let (reply, answer) = oneshot::channel();
        let batch = Batch {
            records,
            round: self.round,
            reply,
        };
        let shutdown = self.shutdown.clone();
        let batches = self.batches.clone();
        // The session takes a batch only while it may publish: until then this waits, and
        // the rows wait on disk.
        self.runtime.block_on(async move {
            tokio::select! {
                sent = batches.send(batch) => match sent {
                    Ok(()) => Handed::Pending(Pending::new(answer)),
                    Err(_) => Handed::Judged(stopped()),
                },
                _ = shutdown.wait() => Handed::Judged(stopped()),
            }
        })
    }

    fn settle(&mut self, pending: Pending) -> Verdict {
        let shutdown = self.shutdown.clone();
        self.runtime.block_on(async move {
            tokio::select! {
                verdict = pending.verdict() => verdict,
                _ = shutdown.wait() => stopped(),
            }
        })
    }

    fn start_over(&mut self) {
        self.round += 1;
    }
}

/// The rows still to go out as historical: those the queue held at the birth less those sent
/// since, never more than the queue holds now. A batch the last session published and the
/// broker confirmed late is deleted after the birth counted it, and never goes out again.
/// Before the birth nothing goes out: every queued row waits for the next session, where it
/// is historical.
fn historical_waiting(born: bool, at_birth: u64, sent_since: u64, queued: Option<u64>) -> u64 {
    if !born {
        return queued.unwrap_or(0);
    }
    let left = at_birth.saturating_sub(sent_since);
    queued.map_or(left, |rows| left.min(rows))
}

#[cfg(test)]
mod tests {
    use super::historical_waiting;

    #[test]
    fn historical_waiting_counts_down_from_the_birth_and_never_exceeds_the_queue() {
        assert_eq!(historical_waiting(false, 0, 0, Some(40)), 40);
        assert_eq!(historical_waiting(false, 9, 9, None), 0);
        assert_eq!(historical_waiting(true, 100, 30, Some(70)), 70);
        // Rows of the last session deleted after the birth counted them: they are not waiting.
        assert_eq!(historical_waiting(true, 100, 60, Some(0)), 0);
        assert_eq!(historical_waiting(true, 100, 60, Some(25)), 25);
        assert_eq!(historical_waiting(true, 10, 30, Some(5)), 0);
        assert_eq!(historical_waiting(true, 100, 30, None), 70);
    }
}
