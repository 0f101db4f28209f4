//! What a sink tells the rest of the program, in one [`Report`]: its `sinks[]` entry and status
//! object for `/api/status`, its bounded queues and alerted counters for the alert hub, its
//! part of the loss ledger, and its metric samples. `/api/status`, `/metrics`, the alert hub
//! and the ledger read sinks only through it, so none of them names a kind.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::alerts::{ComponentReport, QueueReport};
use crate::ledger::Counts;
use crate::telemetry::prometheus::Kind as MetricKind;

/// Everything one sink shows, read at one moment.
#[derive(Default)]
pub struct Report {
    /// Its entry in `sinks[]` of `/api/status` (`name`, `type`, `dropped`, `blocked`, ...).
    pub entry: Map<String, Value>,
    /// Its status object: `sink_status.<name>` of `/api/status`.
    pub status: Value,
    /// Documents shown at the top level of `/api/status` under the names the delivery
    /// document gives them (`push_queue`, `push_status`, `uplink`, `storage`, `clickhouse`,
    /// `postgres`): only the sink that carries the name of its kind has them.
    pub documents: Vec<(&'static str, Value)>,
    /// Its bounded queues, for the alert hub and `queues` of `/api/status`.
    pub queues: Vec<QueueReport>,
    /// Its loss counters that are alerted while they grow.
    pub components: Vec<ComponentReport>,
    /// Its part of the loss ledger by source, under the part's name: only sinks that hold the
    /// copy of a record the ledger tracks (queues, backlogs) have one.
    pub ledger_part: Option<(String, BTreeMap<String, Counts>)>,
    /// Its figures in `sinks` of `GET /api/ledger`.
    pub ledger: SinkFigures,
    /// Its samples on `/metrics`.
    pub metrics: Vec<Sample>,
    /// True while it takes records (its writers run); the connector is healthy while every
    /// sink is.
    pub accepting: bool,
}

/// A sink's figures in the ledger: `accepted = delivered + pending + dead_lettered + lost`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkFigures {
    /// Copies it took.
    pub accepted: u64,
    /// Copies its destination confirmed.
    pub delivered: u64,
    /// Copies waiting in it.
    pub pending: u64,
    /// Copies in a dead-letter table or queue.
    pub dead_lettered: u64,
    /// Copies lost in it (evicted at a quota, dropped, lost at a stop).
    pub lost: u64,
    /// Copies handed over without a confirmation (MQTT QoS 0).
    pub unconfirmed: u64,
    /// Where its copies wait: `disk`, `memory` or `none`.
    pub kept: &'static str,
}

impl SinkFigures {
    /// The figures as `GET /api/ledger` shows them, with the check.
    pub fn to_json(&self) -> Value {
        let out = self.delivered + self.pending + self.dead_lettered + self.lost + self.unconfirmed;
        json!({
            "accepted": self.accepted,
            "delivered": self.delivered,
            "pending": self.pending,
            "dead_lettered": self.dead_lettered,
            "lost": self.lost,
            "unconfirmed": self.unconfirmed,
            "imbalance": self.accepted as i64 - out as i64,
            "kept": self.kept,
        })
    }
}

/// One metric sample.
pub struct Sample {
    /// The family (`opex_connector_push_queue_rows`).
    pub family: &'static str,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// The family's help text.
    pub help: &'static str,
    /// Its labels; every sink's samples carry `sink="<name>"`.
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: f64,
}

/// Collects a sink's samples, each labelled with the sink's name.
pub struct Samples {
    sink: String,
    out: Vec<Sample>,
}

impl Samples {
    /// Samples of sink `sink`.
    pub fn new(sink: &str) -> Self {
        Self {
            sink: sink.to_string(),
            out: Vec::new(),
        }
    }

    /// A counter sample.
    pub fn counter(&mut self, family: &'static str, help: &'static str, value: u64) {
        self.push(family, MetricKind::Counter, help, value as f64);
    }

    /// A counter of seconds, kept in nanoseconds.
    pub fn seconds(&mut self, family: &'static str, help: &'static str, nanos: u64) {
        self.push(family, MetricKind::Counter, help, nanos as f64 / 1e9);
    }

    /// A gauge sample.
    pub fn gauge(&mut self, family: &'static str, help: &'static str, value: f64) {
        self.push(family, MetricKind::Gauge, help, value);
    }

    fn push(&mut self, family: &'static str, kind: MetricKind, help: &'static str, value: f64) {
        self.out.push(Sample {
            family,
            kind,
            help,
            labels: vec![("sink", self.sink.clone())],
            value,
        });
    }

    /// The families of a sink with a memory queue (a database backlog, a broker client's
    /// queue): what it dropped, what it refused at admission, what it failed to publish
    /// (`None` for sinks that do not publish), and what waits in it now.
    pub fn memory_queue(&mut self, dropped: u64, blocked: u64, failed: Option<u64>, depth: u64) {
        self.counter(
            "opex_connector_sink_dropped_total",
            "Records a sink with a memory queue lost (database backlog at its bound under evict_oldest) or refused at delivery (messaging queue full; the source retries).",
            dropped,
        );
        self.counter(
            "opex_connector_sink_blocked_total",
            "Records a sink refused at admission (full under block, or not connected); their sources retry.",
            blocked,
        );
        if let Some(failed) = failed {
            self.counter(
                "opex_connector_sink_failed_total",
                "Records a messaging sink failed to publish (after its retries, or unconfirmed).",
                failed,
            );
        }
        self.gauge(
            "opex_connector_sink_queue_depth",
            "Records waiting in a sink's memory queue or backlog.",
            depth as f64,
        );
    }

    /// The family of a broker sink's records refused for good because their message is over
    /// what the connection takes (each is dead-lettered with the reason).
    pub fn too_large(&mut self, refused: u64) {
        self.counter(
            "opex_connector_sink_too_large_total",
            "Records a broker sink refused for good because their message is over what the connection takes (MQTT packet cap, NATS max_payload); each is dead-lettered with the reason.",
            refused,
        );
    }

    /// The samples.
    pub fn finish(self) -> Vec<Sample> {
        self.out
    }
}

/// `used / quota` in percent, two decimals (0 for a quota of 0).
pub fn fill_pct(used: u64, quota: u64) -> f64 {
    if quota == 0 {
        return 0.0;
    }
    (used as f64 * 10_000.0 / quota as f64).round() / 100.0
}
