//! The unit that flows through the connector, and what its source is told about it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

/// One record: built by a source, offered to the engine, stored by sinks.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Unique, stable id: given once at the source and stored with the record, so a receiver
    /// can drop the duplicates that at-least-once delivery allows.
    pub id: String,
    /// Where it came from, as flows name sources: `ingest/orders`, `modbus/press-1`, ...
    pub source: String,
    /// The source's own key for it (device, order number, ...).
    pub key: String,
    /// When the source produced it, in Unix milliseconds.
    pub ts_ms: u64,
    /// The data.
    pub payload: Value,
}

#[derive(Serialize)]
struct Line<'a> {
    id: &'a str,
    source: &'a str,
    key: &'a str,
    ts: u64,
    payload: &'a Value,
}

impl Record {
    /// A new record with a fresh id, stamped now.
    pub fn new(source: impl Into<String>, key: impl Into<String>, payload: Value) -> Self {
        Self {
            id: new_id(),
            source: source.into(),
            key: key.into(),
            ts_ms: now_ms(),
            payload,
        }
    }

    /// The record as one compact JSON object, the line the uplink sends:
    /// `{"id":..,"source":..,"key":..,"ts":..,"payload":..}`.
    pub fn to_line(&self) -> Vec<u8> {
        let line = Line {
            id: &self.id,
            source: &self.source,
            key: &self.key,
            ts: self.ts_ms,
            payload: &self.payload,
        };
        // Serializing a `Value` and strings into a Vec cannot fail: no I/O, no maps with
        // non-string keys.
        serde_json::to_vec(&line).unwrap_or_default()
    }
}

/// What the engine tells a source about a record it offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// Stored by every sink it reaches: acknowledge it.
    Stored,
    /// No flow takes records of this source: acknowledged and counted (`unrouted`), by design.
    Unrouted,
    /// A sink it reaches is full under `block`: nothing happened; the source keeps the record
    /// and tries again after `after`.
    Retry {
        /// The refusing sink.
        sink: String,
        /// How long to wait.
        after: Duration,
    },
    /// A sink failed to store it (write error, writer busy); nothing is acknowledged, the
    /// source keeps the record and tries again.
    Failed {
        /// The failing sink.
        sink: String,
        /// Why.
        reason: String,
    },
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A new unique id: 64 random bits drawn once per process, then a counter. Unique across
/// restarts (a new random prefix each start) without a system call per record.
pub fn new_id() -> String {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| {
        let mut bytes = [0u8; 8];
        if getrandom::fill(&mut bytes).is_err() {
            // No entropy source: fall back to the clock, still unique per start in practice.
            return SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
        }
        u64::from_le_bytes(bytes)
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix:016x}{n:012x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_lines_carry_every_field() {
        let a = Record::new("ingest/orders", "o-1", serde_json::json!({"qty": 2}));
        let b = Record::new("ingest/orders", "o-1", serde_json::json!({"qty": 2}));
        assert_ne!(a.id, b.id);
        let v: Value = serde_json::from_slice(&a.to_line()).unwrap();
        assert_eq!(v["id"], a.id.as_str());
        assert_eq!(v["source"], "ingest/orders");
        assert_eq!(v["key"], "o-1");
        assert_eq!(v["payload"]["qty"], 2);
        assert!(v["ts"].as_u64().unwrap() > 0);
    }
}
