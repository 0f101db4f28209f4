//! Reading a backfill file: bounded lines, CSV records, and turning one into a [`Record`].
//!
//! Pure functions over bytes, so every rule is tested without a file:
//! - a line (or a CSV record, which may span lines inside quotes) longer than [`MAX_LINE`] is
//!   malformed, and skipped without being held in memory;
//! - blank lines are skipped and not counted;
//! - CSV values: an **unquoted** field that is a JSON number becomes a number (an integer
//!   beyond 64 bits stays text, so no digit is lost), `true`/`false` become booleans, an empty
//!   unquoted field becomes `null`; every other field, and **every quoted field**, is a string
//!   (quote a field to keep `007` or `true` as text).

use std::io::{self, BufRead};

use serde_json::{Map, Number, Value};

use super::config::Format;
use crate::record::{now_ms, Record};
use crate::time::parse_rfc3339;

/// Longest line or CSV record read, in bytes; a longer one is malformed.
pub const MAX_LINE: usize = 1024 * 1024;

/// One line read: its bytes (without the line end), and what it cost in the file.
#[derive(Debug, Default)]
pub struct Line {
    /// Its text, line end removed; empty when too long.
    pub bytes: Vec<u8>,
    /// Bytes consumed from the file, line end included.
    pub consumed: u64,
    /// Longer than [`MAX_LINE`]: its text was dropped.
    pub too_long: bool,
}

/// Reads the next line into `line`; false at the end of the file. Never holds more than
/// [`MAX_LINE`] bytes of one line.
pub fn read_line(r: &mut impl BufRead, line: &mut Line, max: usize) -> io::Result<bool> {
    line.bytes.clear();
    line.consumed = 0;
    line.too_long = false;
    loop {
        let avail = r.fill_buf()?;
        if avail.is_empty() {
            return Ok(line.consumed > 0);
        }
        let (take, done) = match avail.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (avail.len(), false),
        };
        if !line.too_long {
            if line.bytes.len() + take > max + 2 {
                line.too_long = true;
                line.bytes = Vec::new();
            } else {
                line.bytes.extend_from_slice(&avail[..take]);
            }
        }
        r.consume(take);
        line.consumed += take as u64;
        if done {
            break;
        }
    }
    while matches!(line.bytes.last(), Some(b'\n' | b'\r')) {
        line.bytes.pop();
    }
    Ok(true)
}

/// Reads the next CSV record: lines joined while a quoted field is open. False at the end.
pub fn read_csv_record(r: &mut impl BufRead, rec: &mut Line, max: usize) -> io::Result<bool> {
    let mut part = Line::default();
    if !read_line(r, rec, max)? {
        return Ok(false);
    }
    let mut quotes = rec.bytes.iter().filter(|b| **b == b'"').count();
    while quotes % 2 == 1 && !rec.too_long {
        if !read_line(r, &mut part, max)? {
            break;
        }
        rec.consumed += part.consumed;
        if part.too_long || rec.bytes.len() + part.bytes.len() + 1 > max {
            rec.too_long = true;
            rec.bytes = Vec::new();
            break;
        }
        rec.bytes.push(b'\n');
        rec.bytes.extend_from_slice(&part.bytes);
        quotes += part.bytes.iter().filter(|b| **b == b'"').count();
    }
    // A record left too long still has to be skipped to its real end.
    while rec.too_long && quotes % 2 == 1 {
        if !read_line(r, &mut part, max)? {
            break;
        }
        rec.consumed += part.consumed;
        quotes += part.bytes.iter().filter(|b| **b == b'"').count();
    }
    Ok(true)
}

/// True for a line of white space only (skipped, not counted).
pub fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
}

/// Strips a UTF-8 byte order mark.
pub fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)
}

/// Splits one CSV record into fields, each with whether it was quoted.
pub fn split_csv(text: &str) -> Result<Vec<(String, bool)>, String> {
    let mut fields = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        let mut field = String::new();
        let quoted = chars.peek() == Some(&'"');
        if quoted {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("a quoted field is not closed".into()),
                }
            }
            match chars.next() {
                None => {
                    fields.push((field, true));
                    return Ok(fields);
                }
                Some(',') => fields.push((field, true)),
                Some(c) => return Err(format!("{c:?} after a closing quote")),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push((field, false));
                        return Ok(fields);
                    }
                    Some(',') => break,
                    Some(c) => field.push(c),
                }
            }
            fields.push((field, false));
        }
    }
}

/// The JSON value of one CSV field (see the module doc).
pub fn csv_value(text: &str, quoted: bool) -> Value {
    if quoted {
        return Value::String(text.to_string());
    }
    match text {
        "" => return Value::Null,
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    let numeric_start = text
        .bytes()
        .next()
        .is_some_and(|b| b == b'-' || b.is_ascii_digit());
    if numeric_start && !text.bytes().any(|b| b.is_ascii_whitespace()) {
        if let Ok(n) = serde_json::from_str::<Number>(text) {
            let integer = !text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'));
            if !integer || n.is_i64() || n.is_u64() {
                return Value::Number(n);
            }
        }
    }
    Value::String(text.to_string())
}

/// The header row's field names; an error for an empty or repeated name.
pub fn csv_header(bytes: &[u8]) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(strip_bom(bytes)).map_err(|_| "header is not UTF-8")?;
    let names: Vec<String> = split_csv(text)
        .map_err(|e| format!("header: {e}"))?
        .into_iter()
        .map(|(n, _)| n.trim().to_string())
        .collect();
    for (i, n) in names.iter().enumerate() {
        if n.is_empty() {
            return Err(format!("header column {} has no name", i + 1));
        }
        if names[..i].contains(n) {
            return Err(format!("header names {n:?} twice"));
        }
    }
    Ok(names)
}

/// Makes records of one backfill.
#[derive(Debug, Clone)]
pub struct Maker {
    /// `backfill/<name>`.
    pub source: String,
    /// The backfill's name: the default key.
    pub name: String,
    /// Short fingerprint of the file, part of each record id.
    pub fingerprint: String,
    /// The format.
    pub format: Format,
    /// CSV: the header's names.
    pub header: Vec<String>,
    /// The key field.
    pub key_field: Option<String>,
    /// The timestamp field.
    pub timestamp_field: Option<String>,
}

impl Maker {
    /// The record of data record number `n` (1-based) with text `bytes`, or why it is
    /// malformed. Its id, `bf-<name>-<fingerprint>-<n>`, is the same at every read of the same
    /// file, so a record sent again after a crash carries the id it had.
    pub fn make(&self, n: u64, bytes: &[u8]) -> Result<Record, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
        let value = match self.format {
            Format::Jsonl => serde_json::from_str::<Value>(text.trim_start_matches('\u{feff}'))
                .map_err(|e| format!("not JSON: {e}"))?,
            Format::Csv => {
                let fields = split_csv(text)?;
                if fields.len() != self.header.len() {
                    return Err(format!(
                        "{} fields, the header has {}",
                        fields.len(),
                        self.header.len()
                    ));
                }
                let mut map = Map::new();
                for (name, (f, quoted)) in self.header.iter().zip(fields) {
                    map.insert(name.clone(), csv_value(&f, quoted));
                }
                Value::Object(map)
            }
        };
        let key = match &self.key_field {
            None => self.name.clone(),
            Some(k) => match value.get(k) {
                Some(Value::String(s)) => s.clone(),
                Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
                _ => return Err(format!("no key field {k:?} (a string, number or boolean)")),
            },
        };
        let ts_ms = match &self.timestamp_field {
            None => now_ms(),
            Some(t) => match value.get(t) {
                Some(Value::Number(n)) => n
                    .as_u64()
                    .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
                    .ok_or_else(|| format!("timestamp field {t:?} is negative"))?,
                Some(Value::String(s)) => parse_rfc3339(s)
                    .ok_or_else(|| format!("timestamp field {t:?}: {s:?} is not RFC 3339"))?,
                _ => {
                    return Err(format!(
                        "no timestamp field {t:?} (Unix ms or RFC 3339 text)"
                    ))
                }
            },
        };
        let mut record = Record::from_value(self.source.clone(), key, &value);
        record.id = format!("bf-{}-{}-{n}", self.name, self.fingerprint);
        record.ts_ms = ts_ms;
        Ok(record)
    }
}

/// Counts the data records of a file read from `r` (blank lines skipped; CSV: records, not
/// lines, and not the header).
pub fn count_records(r: &mut impl BufRead, format: Format) -> io::Result<u64> {
    let mut line = Line::default();
    let mut n = 0u64;
    loop {
        let more = match format {
            Format::Jsonl => read_line(r, &mut line, MAX_LINE)?,
            Format::Csv => read_csv_record(r, &mut line, MAX_LINE)?,
        };
        if !more {
            break;
        }
        if line.too_long || !is_blank(&line.bytes) {
            n += 1;
        }
    }
    Ok(match format {
        Format::Jsonl => n,
        Format::Csv => n.saturating_sub(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lines(text: &str, csv: bool, max: usize) -> Vec<(String, u64, bool)> {
        let mut r = io::BufReader::with_capacity(4, text.as_bytes());
        let mut out = Vec::new();
        let mut l = Line::default();
        loop {
            let more = if csv {
                read_csv_record(&mut r, &mut l, max).unwrap()
            } else {
                read_line(&mut r, &mut l, max).unwrap()
            };
            if !more {
                return out;
            }
            out.push((
                String::from_utf8(l.bytes.clone()).unwrap(),
                l.consumed,
                l.too_long,
            ));
        }
    }

    #[test]
    fn lines_are_bounded_and_count_their_bytes() {
        assert_eq!(
            lines("a\r\nbb\n\nccc", false, 10),
            vec![
                ("a".into(), 3, false),
                ("bb".into(), 3, false),
                ("".into(), 1, false),
                ("ccc".into(), 3, false)
            ]
        );
        assert_eq!(
            lines("0123456789abcdef\nok\n", false, 8),
            vec![("".into(), 17, true), ("ok".into(), 3, false)]
        );
    }

    #[test]
    fn csv_records_span_lines_inside_quotes() {
        assert_eq!(
            lines("a,b\n1,\"x\ny\"\n2,z\n", true, 100),
            vec![
                ("a,b".into(), 4, false),
                ("1,\"x\ny\"".into(), 8, false),
                ("2,z".into(), 4, false)
            ]
        );
        assert_eq!(
            split_csv(r#"1,"a ""q"", b",,x"#).unwrap(),
            vec![
                ("1".into(), false),
                ("a \"q\", b".into(), true),
                ("".into(), false),
                ("x".into(), false)
            ]
        );
        assert!(split_csv(r#""open"#).is_err());
        assert!(split_csv(r#""a"b"#).is_err());
    }

    #[test]
    fn csv_values_are_typed_only_when_unquoted() {
        assert_eq!(csv_value("12", false), json!(12));
        assert_eq!(csv_value("-3.5e2", false), json!(-350.0));
        assert_eq!(csv_value("12", true), json!("12"));
        assert_eq!(csv_value("007", false), json!("007"));
        assert_eq!(csv_value("true", false), json!(true));
        assert_eq!(csv_value("", false), Value::Null);
        assert_eq!(csv_value("", true), json!(""));
        assert_eq!(csv_value("1 2", false), json!("1 2"));
        assert_eq!(
            csv_value("123456789012345678901234", false),
            json!("123456789012345678901234")
        );
        assert_eq!(csv_value("NaN", false), json!("NaN"));
    }

    #[test]
    fn records_take_their_key_and_time_from_the_named_fields() {
        let maker = Maker {
            source: "backfill/orders".into(),
            name: "orders".into(),
            fingerprint: "ab12".into(),
            format: Format::Csv,
            header: csv_header(b"\xEF\xBB\xBFid,at,qty").unwrap(),
            key_field: Some("id".into()),
            timestamp_field: Some("at".into()),
        };
        let r = maker.make(7, b"A-1,2024-05-01T12:00:00Z,3").unwrap();
        assert_eq!(r.id, "bf-orders-ab12-7");
        assert_eq!(r.key, "A-1");
        assert_eq!(r.ts_ms, 1_714_564_800_000);
        assert_eq!(
            r.payload_value(),
            json!({"id": "A-1", "at": "2024-05-01T12:00:00Z", "qty": 3})
        );
        assert_eq!(
            maker.make(8, b"A-2,x").unwrap_err(),
            "2 fields, the header has 3"
        );
        assert!(maker
            .make(9, b"A-3,yesterday,1")
            .unwrap_err()
            .contains("not RFC 3339"));
        assert!(maker
            .make(9, b",1714564800000,1")
            .unwrap_err()
            .contains("no key field"));
        let jsonl = Maker {
            format: Format::Jsonl,
            header: vec![],
            ..maker
        };
        let r = jsonl.make(1, br#"{"id": 5, "at": 1714564800000}"#).unwrap();
        assert_eq!((r.key.as_str(), r.ts_ms), ("5", 1_714_564_800_000));
        assert!(jsonl.make(2, b"{oops").unwrap_err().starts_with("not JSON"));
        assert_eq!(
            csv_header(b"a,,b").unwrap_err(),
            "header column 2 has no name"
        );
        assert_eq!(
            csv_header(b"a,b,a").unwrap_err(),
            "header names \"a\" twice"
        );
    }

    #[test]
    fn counting_skips_blank_lines_and_the_header() {
        let count = |t: &str, f| count_records(&mut io::BufReader::new(t.as_bytes()), f).unwrap();
        assert_eq!(count("{}\n\n  \n{}\n{}", Format::Jsonl), 3);
        assert_eq!(count("a,b\n1,\"x\ny\"\n\n2,z\n", Format::Csv), 2);
        assert_eq!(count("", Format::Csv), 0);
    }
}
