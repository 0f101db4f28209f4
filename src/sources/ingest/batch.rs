//! A batch body (`POST /api/ingest/{source}`) into records: NDJSON, one
//! `{"id": "<key>", "payload": <any JSON>, "ts": <unix ms>}` a line (`ts` optional), or a JSON
//! array of the same objects.
//!
//! Every line is checked before anything is offered, so that a batch can be refused whole
//! (atomic, the default) with every bad line listed, or stored without its bad lines
//! (`?partial=1`). Pure functions over bytes: no input can panic here, and a batch is never
//! half parsed.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use crate::record::{json_payload, Record};
use crate::sources::backfill::parse::{is_blank, strip_bom};

/// Longest `id` (the record's key) a batch line may carry, in bytes: an order number, a device
/// name, a path, with room to spare; a longer one is a caller's mistake, not a key.
pub const MAX_KEY_BYTES: usize = 256;

/// A line refused, by its 0-based index (the line of an NDJSON body, blank lines included; the
/// element of an array).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejected {
    /// Its 0-based index.
    pub index: usize,
    /// Why.
    pub error: String,
}

/// Why a body is refused whole, before any line is looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// More records than `ingest.max_batch_records` (a `413`).
    TooManyRecords {
        /// The limit.
        max: usize,
    },
    /// Not a batch at all (a `400`): a body declared a JSON array that is not one.
    NotABatch(String),
    /// No record in it (a `400`).
    Empty,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooManyRecords { max } => write!(
                f,
                "batch of more than {max} records (ingest.max_batch_records)"
            ),
            Self::NotABatch(reason) => write!(f, "not a JSON array of records: {reason}"),
            Self::Empty => f.write_str("the batch has no records"),
        }
    }
}

/// The body's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object a line (`application/x-ndjson`).
    Ndjson,
    /// A JSON array of objects (`application/json`).
    Array,
}

impl Format {
    /// The format a `Content-Type` declares: `application/json` (or any `+json`) is an array,
    /// anything else NDJSON; without one, a body starting with `[` is an array.
    pub fn of(content_type: Option<&str>, body: &[u8]) -> Self {
        let Some(ct) = content_type else {
            let first = body.iter().find(|b| !b.is_ascii_whitespace());
            return if first == Some(&b'[') {
                Self::Array
            } else {
                Self::Ndjson
            };
        };
        let mime = ct.split(';').next().unwrap_or_default().trim();
        let mime = mime.to_ascii_lowercase();
        if mime == "application/json" || mime.ends_with("+json") {
            Self::Array
        } else {
            Self::Ndjson
        }
    }
}

/// The parsed batch: its good records with their indexes, and its bad lines.
#[derive(Debug, Default)]
pub struct Parsed {
    /// Good records, in body order, each with its index.
    pub records: Vec<(usize, Record)>,
    /// Bad lines, in body order.
    pub rejected: Vec<Rejected>,
}

/// Parses `body` into records of `source`; `max_payload` bounds each payload
/// (`max_body_kb`), `max_records` the records.
pub fn parse(
    source: &str,
    body: &[u8],
    format: Format,
    max_records: usize,
    max_payload: usize,
) -> Result<Parsed, BodyError> {
    let body = strip_bom(body);
    let mut parsed = Parsed::default();
    let mut add = |index: usize, line: &[u8]| match parse_line(source, line, max_payload) {
        Ok(r) => parsed.records.push((index, r)),
        Err(error) => parsed.rejected.push(Rejected { index, error }),
    };
    match format {
        Format::Ndjson => {
            let mut count = 0;
            for (index, line) in body.split(|b| *b == b'\n').enumerate() {
                if is_blank(line) {
                    continue;
                }
                count += 1;
                if count > max_records {
                    return Err(BodyError::TooManyRecords { max: max_records });
                }
                add(index, line);
            }
        }
        Format::Array => {
            let items: Vec<&RawValue> =
                serde_json::from_slice(body).map_err(|e| BodyError::NotABatch(e.to_string()))?;
            if items.len() > max_records {
                return Err(BodyError::TooManyRecords { max: max_records });
            }
            for (index, item) in items.into_iter().enumerate() {
                add(index, item.get().as_bytes());
            }
        }
    }
    if parsed.records.is_empty() && parsed.rejected.is_empty() {
        return Err(BodyError::Empty);
    }
    Ok(parsed)
}

/// One line as sent.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line<'a> {
    id: Option<String>,
    /// Present (even `null`) or not: a missing payload is an error, `null` is a payload.
    #[serde(default, borrow, deserialize_with = "present")]
    payload: Option<&'a RawValue>,
    ts: Option<u64>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// One line into a record, or the reason it is refused.
fn parse_line(source: &str, text: &[u8], max_payload: usize) -> Result<Record, String> {
    let first = text.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err("not a JSON object".into());
    }
    let line: Line = serde_json::from_slice(text).map_err(|e| e.to_string())?;
    let key = match line.id {
        None => return Err("id is missing".into()),
        Some(id) if id.is_empty() => return Err("id is empty".into()),
        Some(id) if id.len() > MAX_KEY_BYTES => {
            return Err(format!(
                "id is {} bytes, more than {MAX_KEY_BYTES}",
                id.len()
            ))
        }
        Some(id) => id,
    };
    let Some(payload) = line.payload else {
        return Err("payload is missing".into());
    };
    let len = payload.get().len();
    if len > max_payload {
        return Err(format!(
            "payload is {len} bytes, more than max_body_kb ({} KiB)",
            max_payload / 1024
        ));
    }
    // Folded onto one line (an array's payload may be pretty-printed).
    let payload = json_payload(payload.get().as_bytes()).map_err(|e| e.to_string())?;
    let mut record = Record::new(source, key, payload);
    if let Some(ts) = line.ts {
        record.ts_ms = ts;
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1024;

    fn ndjson(body: &str) -> Result<Parsed, BodyError> {
        parse("ingest/t", body.as_bytes(), Format::Ndjson, 10, MAX)
    }

    fn errors(p: &Parsed) -> Vec<(usize, &str)> {
        p.rejected
            .iter()
            .map(|r| (r.index, r.error.as_str()))
            .collect()
    }

    #[test]
    fn ndjson_and_array_bodies_give_the_same_records_in_order() {
        let lines = r#"{"id":"a","payload":{"v":1}}
{"id":"b","payload":[1,2],"ts":1700000000000}
"#;
        let array = r#"[{"id":"a","payload":{"v":1}},
 {"id":"b","payload":[1,2],
 "ts":1700000000000}]"#;
        for (body, format) in [(lines, Format::Ndjson), (array, Format::Array)] {
            let p = parse("ingest/t", body.as_bytes(), format, 10, MAX).unwrap();
            assert!(p.rejected.is_empty(), "{:?}", p.rejected);
            let got: Vec<(usize, &str, &str)> = p
                .records
                .iter()
                .map(|(i, r)| (*i, r.key.as_str(), r.payload.get()))
                .collect();
            assert_eq!(got, [(0, "a", r#"{"v":1}"#), (1, "b", "[1,2]")]);
            assert_eq!(p.records[1].1.ts_ms, 1_700_000_000_000);
            assert_eq!(p.records[0].1.source, "ingest/t");
        }
        // A pretty-printed payload is folded onto one line.
        let body = b"[{\"id\":\"a\",\"payload\":[1,\n2]}]";
        let p = parse("s", body, Format::Array, 10, MAX).unwrap();
        assert_eq!(p.records[0].1.payload.get(), "[1, 2]");
    }

    #[test]
    fn every_bad_line_is_listed_with_its_index_and_reason() {
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        let big = format!("\"{}\"", "x".repeat(MAX));
        let body = [
            r#"{"id":"ok","payload":null}"#.to_string(),
            "not json".into(),
            "[1,2]".into(),
            r#"{"payload":1}"#.into(),
            r#"{"id":"","payload":1}"#.into(),
            format!(r#"{{"id":"{long}","payload":1}}"#),
            r#"{"id":"p"}"#.into(),
            format!(r#"{{"id":"big","payload":{big}}}"#),
            r#"{"id":"t","payload":1,"ts":"noon"}"#.into(),
            r#"{"id":"u","payload":1,"extra":true}"#.into(),
            r#"{"id":"x","payload":{"#.into(),
        ]
        .join("\n");
        let p = parse("ingest/t", body.as_bytes(), Format::Ndjson, 100, MAX).unwrap();
        assert_eq!(p.records.len(), 1);
        assert_eq!(p.records[0].1.payload.get(), "null");
        let e = errors(&p);
        assert_eq!(
            e.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            (1..=10).collect::<Vec<_>>()
        );
        assert_eq!(e[0].1, "not a JSON object");
        assert_eq!(e[1].1, "not a JSON object");
        assert_eq!(e[2].1, "id is missing");
        assert_eq!(e[3].1, "id is empty");
        assert_eq!(e[4].1, "id is 257 bytes, more than 256");
        assert_eq!(e[5].1, "payload is missing");
        assert_eq!(
            e[6].1,
            "payload is 1026 bytes, more than max_body_kb (1 KiB)"
        );
        assert!(e[7].1.contains("invalid type"), "{}", e[7].1);
        assert!(e[8].1.contains("unknown field `extra`"), "{}", e[8].1);
        assert!(e[9].1.contains("EOF"), "{}", e[9].1);
    }

    #[test]
    fn blank_lines_are_skipped_but_keep_the_line_numbers() {
        let p = ndjson("\n{\"id\":\"a\",\"payload\":1}\r\n  \n{\"id\":\"b\"}\n").unwrap();
        assert_eq!(p.records[0].0, 1);
        assert_eq!(errors(&p), [(3, "payload is missing")]);
    }

    #[test]
    fn bodies_that_are_no_batch_too_long_or_empty_are_refused_whole() {
        let line = "{\"id\":\"a\",\"payload\":1}\n";
        assert_eq!(
            ndjson(&line.repeat(11)).unwrap_err(),
            BodyError::TooManyRecords { max: 10 }
        );
        let array = format!("[{}]", [r#"{"id":"a","payload":1}"#; 11].join(","));
        let err = parse("s", array.as_bytes(), Format::Array, 10, MAX).unwrap_err();
        assert_eq!(err, BodyError::TooManyRecords { max: 10 });
        assert!(err.to_string().contains("ingest.max_batch_records"));
        for body in ["{\"id\":\"a\",\"payload\":1}", "[1,", "", "\u{0}\u{ff}"] {
            let err = parse("s", body.as_bytes(), Format::Array, 10, MAX).unwrap_err();
            assert!(matches!(err, BodyError::NotABatch(_)), "{body:?}: {err:?}");
        }
        assert_eq!(ndjson("\n \n").unwrap_err(), BodyError::Empty);
        assert_eq!(
            parse("s", b"[]", Format::Array, 10, MAX).unwrap_err(),
            BodyError::Empty
        );
        // A byte order mark is not part of the first line.
        let p = ndjson("\u{feff}{\"id\":\"a\",\"payload\":1}").unwrap();
        assert_eq!(p.records.len(), 1);
        // Bytes that are not UTF-8 are a bad line, not a panic.
        let p = parse(
            "s",
            b"\xff\xfe{\n{\"id\":\"\xff\"}",
            Format::Ndjson,
            10,
            MAX,
        )
        .unwrap();
        assert_eq!(p.rejected.len(), 2);
    }

    #[test]
    fn the_content_type_chooses_the_format_and_without_one_the_first_byte_does() {
        assert_eq!(Format::of(Some("application/json"), b"x"), Format::Array);
        assert_eq!(
            Format::of(Some("Application/JSON; charset=utf-8"), b"x"),
            Format::Array
        );
        assert_eq!(
            Format::of(Some("application/x-ndjson"), b"["),
            Format::Ndjson
        );
        assert_eq!(Format::of(None, b"  [{}]"), Format::Array);
        assert_eq!(Format::of(None, b"{}"), Format::Ndjson);
    }
}
