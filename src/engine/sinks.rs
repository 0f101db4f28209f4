//! The sinks a flow can name, as one closed enum.

use std::sync::Arc;

use crate::admission::{Gate, Refused, Reservation};
use crate::record::Record;
use crate::sinks::backlog::PushError;
use crate::sinks::clickhouse::ClickHouseSink;
use crate::sinks::mqtt::MqttSink;
use crate::sinks::nats::{NatsSink, SinkError};
use crate::sinks::postgres::PostgresSink;
use crate::sinks::push::preprocess::Output;
use crate::sinks::push::PushSink;
use crate::sinks::storage::StorageSink;
use crate::store::events::EventStore;
use crate::store::push_queue::{row_bytes, Tag};
use crate::store::StoreError;

/// One sink the engine delivers to.
#[derive(Clone)]
pub enum SinkHandle {
    /// The push queue and its uplink.
    Push(Arc<PushSink>),
    /// The local event history.
    Storage(Arc<StorageSink>),
    /// A ClickHouse table, through a memory backlog bounded in rows.
    ClickHouse(Arc<ClickHouseSink>),
    /// A Postgres table, through a memory backlog bounded in rows.
    Postgres(Arc<PostgresSink>),
    /// Publishes to NATS.
    Nats(Arc<NatsSink>),
    /// Publishes to an MQTT broker.
    Mqtt(Arc<MqttSink>),
}

/// What a sink did with a record it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// Stored, queued or handed over.
    Stored,
    /// Kept out of the push queue by the preprocess stage (deadband, aggregation), by design.
    Suppressed,
}

impl SinkHandle {
    /// The name flows use.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Push(_) => "push",
            Self::Storage(_) => "storage",
            Self::ClickHouse(_) => "clickhouse",
            Self::Postgres(_) => "postgres",
            Self::Nats(_) => "nats",
            Self::Mqtt(_) => "mqtt",
        }
    }

    /// The logical bytes `record` takes in this sink.
    pub fn bytes(&self, record: &Record) -> u64 {
        match self {
            Self::Push(_) => row_bytes(record.to_line().len()),
            Self::Storage(_) => EventStore::row_bytes(record),
            // The database backlogs are bounded in rows: their gates count one per record.
            Self::ClickHouse(_) | Self::Postgres(_) => 1,
            Self::Nats(_) | Self::Mqtt(_) => record.to_line().len() as u64,
        }
    }

    fn gate(&self) -> &Arc<Gate> {
        match self {
            Self::Push(p) => p.gate(),
            Self::Storage(s) => s.gate(),
            Self::ClickHouse(c) => c.gate(),
            Self::Postgres(p) => p.gate(),
            Self::Nats(n) => n.gate(),
            Self::Mqtt(m) => m.gate(),
        }
    }

    /// Asks the sink's gate to admit `bytes`.
    pub fn admit(&self, bytes: u64) -> Result<Reservation, Refused> {
        match self {
            Self::Nats(n) => n.admit()?,
            Self::Mqtt(m) => m.admit()?,
            Self::Push(_) | Self::Storage(_) | Self::ClickHouse(_) | Self::Postgres(_) => {}
        }
        self.gate().admit(bytes)
    }

    /// True for the sinks that hold a record in a queue before it reaches its destination
    /// (push, ClickHouse, Postgres): the ledger tracks a record's copy there until it leaves.
    pub fn is_queue(&self) -> bool {
        matches!(
            self,
            Self::Push(_) | Self::ClickHouse(_) | Self::Postgres(_)
        )
    }

    /// Stores `record`; `reservation` covers what admission reserved. When the record grew on
    /// its way through the nodes, the difference is admitted now (and may be refused).
    /// `tracked`: this copy carries the record in the ledger's per-source figures.
    /// [`Delivered::Suppressed`]: the push preprocess kept it out by design, so no copy (and no
    /// ledger entry) was written.
    pub async fn deliver(
        &self,
        record: &Record,
        mut reservation: Reservation,
        tracked: bool,
    ) -> Result<Delivered, DeliveryError> {
        match self {
            Self::Push(p) => {
                // The preprocess stage (deadband, aggregation) acts on the push queue only.
                let (line, commit) = match p.preprocess().map(|pre| pre.apply(record)) {
                    None => (record.to_line(), None),
                    Some((Output::Suppressed, commit)) => {
                        // Kept out by design: acknowledged, counted; the reservation is freed.
                        if let Some(pre) = p.preprocess() {
                            pre.commit(commit);
                        }
                        return Ok(Delivered::Suppressed);
                    }
                    Some((Output::Unchanged, commit)) => (record.to_line(), Some(commit)),
                    Some((Output::Changed(r), commit)) => (r.to_line(), Some(commit)),
                };
                self.top_up(&mut reservation, row_bytes(line.len()))?;
                let tag = Tag {
                    source: record.source.clone(),
                    tracked,
                };
                p.store(line, &tag, reservation)
                    .await
                    .map_err(DeliveryError::Store)?;
                if let (Some(pre), Some(c)) = (p.preprocess(), commit) {
                    pre.commit(c);
                }
                Ok(Delivered::Stored)
            }
            Self::Storage(s) => {
                self.top_up(&mut reservation, EventStore::row_bytes(record))?;
                s.store(record, reservation)
                    .await
                    .map_err(DeliveryError::Store)?;
                Ok(Delivered::Stored)
            }
            // Returns once the row is in the memory backlog, not once it is inserted.
            Self::ClickHouse(c) => c
                .deliver(record, tracked, reservation)
                .map_err(DeliveryError::from)
                .map(|()| Delivered::Stored),
            Self::Postgres(p) => p
                .deliver(record, tracked, reservation)
                .map_err(DeliveryError::from)
                .map(|()| Delivered::Stored),
            Self::Nats(n) => n
                .deliver(record)
                .await
                .map_err(DeliveryError::from)
                .map(|()| Delivered::Stored),
            Self::Mqtt(m) => m
                .deliver(record)
                .await
                .map_err(DeliveryError::from)
                .map(|()| Delivered::Stored),
        }
    }

    fn top_up(&self, reservation: &mut Reservation, needed: u64) -> Result<(), DeliveryError> {
        let have = reservation.bytes();
        if needed > have && reservation.is_counted() {
            let extra = self
                .gate()
                .admit(needed - have)
                .map_err(DeliveryError::Refused)?;
            reservation.absorb(extra);
        }
        Ok(())
    }
}

/// Why a delivery failed after admission.
#[derive(Debug)]
pub enum DeliveryError {
    /// The sink refused (it filled up since admission, or the record grew).
    Refused(Refused),
    /// The sink could not store it.
    Store(StoreError),
    /// A messaging sink could not publish it (after its retries).
    Publish(String),
}

impl From<SinkError> for DeliveryError {
    fn from(e: SinkError) -> Self {
        match e {
            SinkError::Refused(r) => Self::Refused(r),
            SinkError::Failed(reason) => Self::Publish(reason),
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

/// The sinks of this connector, by name.
#[derive(Clone, Default)]
pub struct Sinks {
    list: Vec<SinkHandle>,
}

impl Sinks {
    /// Adds one.
    pub fn add(&mut self, sink: SinkHandle) {
        self.list.push(sink);
    }

    /// The sink called `name`.
    pub fn get(&self, name: &str) -> Option<&SinkHandle> {
        self.list.iter().find(|s| s.name() == name)
    }

    /// Every sink.
    pub fn iter(&self) -> impl Iterator<Item = &SinkHandle> {
        self.list.iter()
    }
}
