//! The unit that flows through the connector, and what its source is told about it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

impl Record {
    /// A new record with a fresh id, stamped now, from JSON text: checked, and folded onto one
    /// line (a raw line break in valid JSON can only be white space between tokens).
    pub fn from_json(
        source: impl Into<String>,
        key: impl Into<String>,
        json: &[u8],
    ) -> Result<Self, serde_json::Error> {
        Ok(Self::new(source, key, json_payload(json)?))
    }

    /// A new record with a fresh id from a JSON value.
    pub fn from_value(source: impl Into<String>, key: impl Into<String>, value: &Value) -> Self {
        Self::new(source, key, value_payload(value))
    }

    /// The payload as a JSON tree, for nodes that look inside it.
    pub fn payload_value(&self) -> Value {
        // The payload was checked when the record was built; `Null` cannot happen.
        serde_json::from_str(self.payload.get()).unwrap_or(Value::Null)
    }

    /// A new record with a fresh id, stamped now.
    pub fn new(source: impl Into<String>, key: impl Into<String>, payload: Box<RawValue>) -> Self {
        Self::with_id(new_id(), source, key, payload)
    }

    /// A new record stamped now, with the id its source gives it (a stream's own sequence,
    /// so that a redelivered duplicate carries the same id).
    pub fn with_id(
        id: String,
        source: impl Into<String>,
        key: impl Into<String>,
        payload: Box<RawValue>,
    ) -> Self {
        Self {
            id,
            source: source.into(),
            key: key.into(),
            ts_ms: now_ms(),
            payload,
        }
    }

    /// The record as one compact JSON object, the line the uplink sends:
    /// `{"id":..,"source":..,"key":..,"ts":..,"payload":..}`.
    ///
    /// Written field by field into a buffer of exactly [`Record::line_len`] bytes: this runs
    /// once for every record a queue stores.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = Vec::with_capacity(self.line_len());
        self.write_line(&mut line);
        line
    }

    /// Appends [`Record::to_line`] to `line` (a queue row writes its header first).
    pub fn write_line(&self, line: &mut Vec<u8>) {
        line.extend_from_slice(br#"{"id":"#);
        push_json_str(line, &self.id);
        line.extend_from_slice(br#","source":"#);
        push_json_str(line, &self.source);
        line.extend_from_slice(br#","key":"#);
        push_json_str(line, &self.key);
        line.extend_from_slice(br#","ts":"#);
        push_decimal(line, self.ts_ms);
        line.extend_from_slice(br#","payload":"#);
        line.extend_from_slice(self.payload.get().as_bytes());
        line.push(b'}');
    }

    /// The length of [`Record::to_line`], without writing it (admission counts a record's
    /// bytes before it is stored).
    pub fn line_len(&self) -> usize {
        const FIXED: usize = r#"{"id":,"source":,"key":,"ts":,"payload":}"#.len();
        FIXED
            + json_str_len(&self.id)
            + json_str_len(&self.source)
            + json_str_len(&self.key)
            + decimal_len(self.ts_ms)
            + self.payload.get().len()
    }
}

/// How JSON writes byte `b` of a string (serde_json's escapes): `None` as itself, else the
/// length of its escape (`\"`, `\\`, `\n` and the other short ones, `\u00XX`).
fn escape_len(b: u8) -> Option<usize> {
    match b {
        b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => Some(2),
        0x00..=0x1f => Some(6),
        _ => None,
    }
}

/// True when JSON escapes byte `b` of a string: the same bytes as [`escape_len`], in a test
/// the compiler turns into a few comparisons (the strings of almost every record have none).
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// True when JSON escapes some byte of `s`: [`needs_escape`] over its bytes, eight at a time,
/// the last eight of a longer string read once more where they overlap the words before.
/// Three strings of every line a queue stores are tested three times (its length at admission,
/// its length again when the queue stores it, then the line), so a word-wide test is worth its
/// lines.
fn has_escape(s: &[u8]) -> bool {
    let Some(&last) = s.last_chunk::<8>() else {
        return s.iter().copied().any(needs_escape);
    };
    let chunks = s.chunks_exact(8);
    let tail = !chunks.remainder().is_empty() && word_has_escape(last);
    tail || chunks
        .into_iter()
        .any(|c| <[u8; 8]>::try_from(c).is_ok_and(word_has_escape))
}

/// [`has_escape`] of one word.
fn word_has_escape(bytes: [u8; 8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // Non-zero exactly when some byte of `v` is below `n` (at most 0x80): a borrow only starts
    // at such a byte.
    let below = |v: u64, n: u8| v.wrapping_sub(ONES * u64::from(n)) & !v & HIGHS;
    let x = u64::from_ne_bytes(bytes);
    below(x, 0x20)
        | below(x ^ (ONES * u64::from(b'"')), 1)
        | below(x ^ (ONES * u64::from(b'\\')), 1)
        != 0
}

/// Bytes of `s` as a JSON string, quotes included.
fn json_str_len(s: &str) -> usize {
    if !has_escape(s.as_bytes()) {
        return 2 + s.len();
    }
    2 + s.bytes().map(|b| escape_len(b).unwrap_or(1)).sum::<usize>()
}

/// Appends `s` as a JSON string.
fn push_json_str(out: &mut Vec<u8>, s: &str) {
    if !has_escape(s.as_bytes()) {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        return;
    }
    // Writing a string into a Vec cannot fail: no I/O.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Digits of `n` in decimal.
fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Appends `n` in decimal, without a formatter or a temporary string (once per stored line).
fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// A JSON value as a record's payload.
pub fn value_payload(value: &Value) -> Box<RawValue> {
    // A `Value` always serializes: its map keys are strings.
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// JSON text checked and folded onto one line: a record's payload. A raw line break in valid
/// JSON can only be white space between tokens, so it becomes a space.
pub fn json_payload(json: &[u8]) -> Result<Box<RawValue>, serde_json::Error> {
    let raw: &RawValue = serde_json::from_slice(json)?;
    let text = raw.get();
    // One vector scan for both bytes rather than a char pattern or two word-at-a-time passes
    // of `contains`: this runs on every ingested record (2 400 instructions for a 1 KB body
    // with `contains` twice).
    if memchr::memchr2(b'\n', b'\r', text.as_bytes()).is_some() {
        RawValue::from_string(text.replace(['\n', '\r'], " "))
    } else {
        Ok(raw.to_owned())
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
    // The prefix's 16 hex digits, written once.
    static PREFIX: OnceLock<String> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(|| {
        let mut bytes = [0u8; 8];
        let bits = if getrandom::fill(&mut bytes).is_ok() {
            u64::from_le_bytes(bytes)
        } else {
            // No entropy source: fall back to the clock, still unique per start in practice.
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        };
        let mut prefix = String::with_capacity(16);
        push_hex(&mut prefix, bits, 16);
        prefix
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // Then the counter's low 48 bits in 12 digits (2^48 records: 89 years at 100 000 a
    // second). Written by hand: a formatter costs more than the rest of the id, and this runs
    // once per record.
    let mut id = String::with_capacity(28);
    id.push_str(prefix);
    push_hex(&mut id, n, 12);
    id
}

/// Appends the low `digits` hex digits of `n` (lowercase, the highest first).
fn push_hex(out: &mut String, n: u64, digits: u32) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for i in (0..digits).rev() {
        out.push(char::from(HEX[(n >> (4 * i) & 0xf) as usize]));
    }
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

    #[test]
    fn an_id_is_the_start_prefix_then_the_counter_in_28_lowercase_hex_digits() {
        let (a, b) = (new_id(), new_id());
        for id in [&a, &b] {
            assert_eq!(id.len(), 28, "{id}");
            assert!(
                id.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')),
                "{id}"
            );
        }
        assert_eq!(a[..16], b[..16], "one prefix per start");
        let counter = |id: &str| u64::from_str_radix(&id[16..], 16).unwrap();
        // Other tests draw ids meanwhile: later, not necessarily next.
        assert!(counter(&b) > counter(&a), "{a} {b}");
    }

    #[test]
    fn a_line_is_exactly_as_long_as_its_counted_length_whatever_its_strings_hold() {
        let keys = [
            "",
            "o-1",
            "quote\" back\\slash",
            "tab\t nl\n cr\r bs\u{8} ff\u{c}",
            "nul\u{0} us\u{1f} del\u{7f}",
            "ünï\u{2028}cödé ✓",
        ];
        for (i, key) in keys.iter().enumerate() {
            let mut r = Record::from_json("ingest/o\"rders", *key, b"{\"a\":[1,\"\\n\"]}").unwrap();
            r.ts_ms = [0, 9, 10, 99, 1_764_547_200_000, u64::MAX][i];
            let line = r.to_line();
            assert_eq!(line.len(), r.line_len(), "key {key:?}");
            assert_eq!(Record::from_line(&line).unwrap(), r, "key {key:?}");
            let v: Value = serde_json::from_slice(&line).unwrap();
            let fields: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(fields.len(), 5);
        }
        let r = Record::from_json("ingest/orders", "o-1", b"{\"qty\":2}").unwrap();
        let expected = format!(
            r#"{{"id":"{}","source":"ingest/orders","key":"o-1","ts":{},"payload":{{"qty":2}}}}"#,
            r.id, r.ts_ms
        );
        assert_eq!(String::from_utf8(r.to_line()).unwrap(), expected);
    }

    #[test]
    fn hex_digits_are_the_low_ones_highest_first_with_leading_zeros() {
        let mut s = String::new();
        push_hex(&mut s, 0x0123_4567_89ab_cdef, 16);
        // The top four digits (`dead`) are cut; the zeros under them are kept.
        push_hex(&mut s, 0xdead_0000_0000_0abc, 12);
        assert_eq!(s, "0123456789abcdef000000000abc");
    }

    #[test]
    fn the_word_wide_escape_test_agrees_with_the_bytewise_one_for_every_byte_at_every_place() {
        for len in 0..=20 {
            let mut s = vec![b'a'; len];
            for at in 0..len {
                for b in 0..=255u8 {
                    s[at] = b;
                    assert_eq!(
                        has_escape(&s),
                        s.iter().copied().any(needs_escape),
                        "byte {b:#04x} at {at} of {len}"
                    );
                }
                s[at] = b'a';
            }
            assert!(!has_escape(&s));
        }
        // Multibyte characters have their high bits set: never an escape, wherever they fall.
        assert!(!has_escape("zählerstand-µ-温度-€".as_bytes()));
        assert!(has_escape("zählerstand-µ-温度-€\"n".as_bytes()));
        // Neighbours of the tested values in every byte of a word.
        for b in [
            0x1fu8, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0xa0, 0xdc,
        ] {
            let word = [b; 8];
            assert_eq!(has_escape(&word), needs_escape(b), "byte {b:#04x}");
        }
    }

    #[test]
    fn the_quick_escape_test_picks_the_bytes_serde_json_escapes() {
        for b in 0..=255u8 {
            assert_eq!(needs_escape(b), escape_len(b).is_some(), "byte {b:#04x}");
            if b.is_ascii() {
                let written = serde_json::to_string(&char::from(b).to_string()).unwrap();
                assert_eq!(
                    written.len() - 2,
                    escape_len(b).unwrap_or(1),
                    "byte {b:#04x}"
                );
            }
        }
    }
}
