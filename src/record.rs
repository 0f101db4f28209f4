//! The unit that flows through the connector, and what its source is told about it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// One record: built by a source, offered to the engine, stored by sinks.
#[derive(Debug, Clone)]
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
    /// The data, as JSON text on one line. Kept as text: most records pass through unchanged,
    /// and parsing them into a tree only to write them out again costs more than the rest of
    /// an ingest request. Nodes that look inside parse it ([`Record::payload_value`]).
    pub payload: Box<RawValue>,
}

impl PartialEq for Record {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && self.source == other.source
            && self.key == other.key
            && self.ts_ms == other.ts_ms
            && self.payload.get() == other.payload.get()
    }
}

#[derive(Serialize)]
struct Line<'a> {
    id: &'a str,
    source: &'a str,
    key: &'a str,
    ts: u64,
    payload: &'a RawValue,
}

impl Record {
    /// A new record with a fresh id, stamped now, from JSON text: checked, and folded onto one
    /// line (a raw line break in valid JSON can only be white space between tokens).
    pub fn from_json(
        source: impl Into<String>,
        key: impl Into<String>,
        json: &[u8],
    ) -> Result<Self, serde_json::Error> {
        let raw: &RawValue = serde_json::from_slice(json)?;
        let text = raw.get();
        // Byte scans (memchr) rather than a char pattern: this runs on every ingested record.
        let bytes = text.as_bytes();
        let payload = if bytes.contains(&b'\n') || bytes.contains(&b'\r') {
            RawValue::from_string(text.replace(['\n', '\r'], " "))?
        } else {
            raw.to_owned()
        };
        Ok(Self::new(source, key, payload))
    }

    /// A new record with a fresh id from a JSON value.
    pub fn from_value(source: impl Into<String>, key: impl Into<String>, value: &Value) -> Self {
        // A `Value` always serializes: its map keys are strings.
        let payload =
            serde_json::value::to_raw_value(value).unwrap_or_else(|_| RawValue::NULL.to_owned());
        Self::new(source, key, payload)
    }

    /// The payload as a JSON tree, for nodes that look inside it.
    pub fn payload_value(&self) -> Value {
        // The payload was checked when the record was built; `Null` cannot happen.
        serde_json::from_str(self.payload.get()).unwrap_or(Value::Null)
    }

    /// A new record with a fresh id, stamped now.
    pub fn new(source: impl Into<String>, key: impl Into<String>, payload: Box<RawValue>) -> Self {
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

#[derive(serde::Deserialize)]
struct OwnedLine {
    id: String,
    source: String,
    key: String,
    ts: u64,
    payload: Box<RawValue>,
}

impl Record {
    /// Reads back a line written by [`Record::to_line`] (dead letters, stores).
    pub fn from_line(line: &[u8]) -> Result<Self, serde_json::Error> {
        let l: OwnedLine = serde_json::from_slice(line)?;
        Ok(Self {
            id: l.id,
            source: l.source,
            key: l.key,
            ts_ms: l.ts,
            payload: l.payload,
        })
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
    /// A node failed and the record was parked in the pipeline dead-letter queue (entry `id`;
    /// `None` when a replay failed again and its old entry stays open). It is stored there,
    /// so the source is acknowledged: retrying would fail the same way.
    DeadLettered {
        /// The dead-letter entry.
        id: Option<u64>,
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
        let a = Record::from_json("ingest/orders", "o-1", b"{\n \"qty\": 2}").unwrap();
        let b = Record::from_value("ingest/orders", "o-1", &serde_json::json!({"qty": 2}));
        assert!(!a.to_line().contains(&b'\n'));
        assert_eq!(a.payload_value(), b.payload_value());
        assert_eq!(Record::from_line(&a.to_line()).unwrap(), a);
        assert_ne!(a.id, b.id);
        let v: Value = serde_json::from_slice(&a.to_line()).unwrap();
        assert_eq!(v["id"], a.id.as_str());
        assert_eq!(v["source"], "ingest/orders");
        assert_eq!(v["key"], "o-1");
        assert_eq!(v["payload"]["qty"], 2);
        assert!(v["ts"].as_u64().unwrap() > 0);
    }
}
