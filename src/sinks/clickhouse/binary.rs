//! `RowBinary`: rows in ClickHouse's own binary layout, which the server takes without parsing
//! text. Each column's type is read from the table (`DESCRIBE TABLE`, once, and again after a
//! failed insert); a value is written in binary only when its conversion is exact and the
//! same as the server's reading of the `JSONEachRow` text would be. Anything else (a type
//! this file does not write, a value that does not fit, a field the record lacks, which
//! `JSONEachRow` leaves to the column's default) makes its batch go as `JSONEachRow`, so the
//! server judges it as it always has and a refusal carries the server's own message.
//!
//! Layout (little endian): integers and floats in their width; `String` as a LEB128 length
//! and its bytes; `Nullable(T)` a byte 1 for NULL, else 0 and `T`; `LowCardinality(T)` as `T`.

use serde_json::Value;

use crate::record::Record;
use crate::sinks::backlog::columns::{extract, text};
use crate::sinks::backlog::Column;

/// A column type this sink writes in `RowBinary`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChType {
    /// `UInt8` .. `UInt64`: the width in bytes.
    UInt(u8),
    /// `Int8` .. `Int64`: the width in bytes.
    Int(u8),
    /// `Float32`.
    Float32,
    /// `Float64`.
    Float64,
    /// `String` (and `LowCardinality(String)`).
    String,
    /// `Nullable(T)`.
    Nullable(Box<ChType>),
}

impl ChType {
    /// Reads a type as `DESCRIBE TABLE` prints it; `None` for a type not written in binary.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        if let Some(inner) = wrapped(s, "Nullable") {
            return Self::parse(inner).map(|t| Self::Nullable(Box::new(t)));
        }
        if let Some(inner) = wrapped(s, "LowCardinality") {
            return Self::parse(inner);
        }
        Some(match s {
            "UInt8" => Self::UInt(1),
            "UInt16" => Self::UInt(2),
            "UInt32" => Self::UInt(4),
            "UInt64" => Self::UInt(8),
            "Int8" => Self::Int(1),
            "Int16" => Self::Int(2),
            "Int32" => Self::Int(4),
            "Int64" => Self::Int(8),
            "Float32" => Self::Float32,
            "Float64" => Self::Float64,
            "String" => Self::String,
            _ => return None,
        })
    }
}

fn wrapped<'a>(s: &'a str, name: &str) -> Option<&'a str> {
    s.strip_prefix(name)?.strip_prefix('(')?.strip_suffix(')')
}

/// How the insert's columns are written: their types as the table has them, and which of
/// them take the whole payload as its text (written without parsing the payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    columns: Vec<Column>,
    types: Vec<ChType>,
    /// Per column: the whole payload into a `String`.
    whole: Vec<bool>,
    /// The other columns, whose values come from the column mapping.
    mapped: Vec<Column>,
}

impl Layout {
    /// The layout of `columns` from a `DESCRIBE TABLE` answer (TabSeparated); `None` when a
    /// column is missing or of a type not written in binary (every batch then goes as
    /// `JSONEachRow`).
    pub fn read(describe: &str, columns: &[Column]) -> Option<Self> {
        let found: Vec<(&str, &str)> = describe
            .lines()
            .filter_map(|l| {
                let mut f = l.split('\t');
                Some((f.next()?, f.next()?))
            })
            .collect();
        let types: Vec<ChType> = columns
            .iter()
            .map(|c| {
                let (_, ty) = found.iter().find(|(name, _)| *name == c.name)?;
                ChType::parse(ty)
            })
            .collect::<Option<_>>()?;
        let whole: Vec<bool> = columns
            .iter()
            .zip(&types)
            .map(|(c, ty)| c.field == "/payload" && *ty == ChType::String)
            .collect();
        let mapped = columns
            .iter()
            .zip(&whole)
            .filter(|(_, w)| !**w)
            .map(|(c, _)| c.clone())
            .collect();
        Some(Self {
            columns: columns.to_vec(),
            types,
            whole,
            mapped,
        })
    }

    /// Appends `record`'s row to `out`, or returns false (and leaves `out` as it was) when a
    /// value cannot be written exactly: the batch then goes as `JSONEachRow`.
    pub fn encode(&self, record: &Record, out: &mut Vec<u8>) -> bool {
        let raw = record.payload.get();
        // A payload that is one JSON string goes through the mapping: the column takes the
        // string itself, not its quoted text.
        let structured = raw.starts_with(['{', '[']);
        let values = match (structured, self.mapped.is_empty()) {
            (true, true) => Vec::new(),
            (true, false) => extract(record, &self.mapped),
            (false, _) => extract(record, &self.columns),
        };
        let mut values = values.into_iter();
        let start = out.len();
        for ((c, ty), whole) in self.columns.iter().zip(&self.types).zip(&self.whole) {
            let ok = if *whole && structured {
                string(raw.as_bytes(), out);
                true
            } else {
                // A field the record lacks: JSONEachRow leaves the column to its default.
                values
                    .next()
                    .flatten()
                    .is_some_and(|v| value(record, c, &v, ty, out))
            };
            if !ok {
                out.truncate(start);
                return false;
            }
        }
        true
    }
}

fn value(record: &Record, c: &Column, v: &Value, ty: &ChType, out: &mut Vec<u8>) -> bool {
    match ty {
        ChType::Nullable(inner) => {
            if v.is_null() {
                out.push(1);
                true
            } else {
                out.push(0);
                value(record, c, v, inner, out)
            }
        }
        ChType::UInt(width) => match v.as_u64() {
            Some(n) if *width == 8 || n < 1u64 << (8 * u32::from(*width)) => {
                out.extend_from_slice(&n.to_le_bytes()[..usize::from(*width)]);
                true
            }
            _ => false,
        },
        ChType::Int(width) => {
            let bits = 8 * u32::from(*width);
            match v.as_i64() {
                Some(n)
                    if *width == 8 || (n >= -(1i64 << (bits - 1)) && n < 1i64 << (bits - 1)) =>
                {
                    out.extend_from_slice(&n.to_le_bytes()[..usize::from(*width)]);
                    true
                }
                _ => false,
            }
        }
        ChType::Float64 => match v.as_f64() {
            Some(f) if v.is_number() => {
                out.extend_from_slice(&f.to_le_bytes());
                true
            }
            _ => false,
        },
        ChType::Float32 => match v.as_f64() {
            Some(f) if v.is_number() => {
                out.extend_from_slice(&(f as f32).to_le_bytes());
                true
            }
            _ => false,
        },
        ChType::String => match v {
            Value::String(s) => {
                string(s.as_bytes(), out);
                true
            }
            Value::Object(_) | Value::Array(_) => {
                string(text(record, c, v).as_bytes(), out);
                true
            }
            // JSONEachRow writes these unquoted: the server decides what they mean.
            _ => false,
        },
    }
}

fn string(bytes: &[u8], out: &mut Vec<u8>) {
    let mut n = bytes.len() as u64;
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::sinks::backlog::config::default_columns;

    #[test]
    fn the_types_are_read_as_describe_prints_them() {
        assert_eq!(ChType::parse("UInt64"), Some(ChType::UInt(8)));
        assert_eq!(
            ChType::parse("Nullable(Int16)"),
            Some(ChType::Nullable(Box::new(ChType::Int(2))))
        );
        assert_eq!(
            ChType::parse("LowCardinality(String)"),
            Some(ChType::String)
        );
        assert_eq!(ChType::parse("DateTime"), None);
        assert_eq!(ChType::parse("Decimal(9, 2)"), None);
        let describe = "ts\tUInt64\t\t\nsource\tString\t\t\nkey\tString\t\t\npayload\tString\t\t\n";
        let layout = Layout::read(describe, &default_columns()).unwrap();
        assert_eq!(
            layout.types,
            vec![
                ChType::UInt(8),
                ChType::String,
                ChType::String,
                ChType::String
            ]
        );
        assert_eq!(layout.whole, vec![false, false, false, true]);
        // A column the table lacks, or a type written only as text: JSONEachRow.
        assert_eq!(Layout::read(describe, &[Column::new("nope", "/key")]), None);
        assert_eq!(
            Layout::read("d\tDateTime\n", &[Column::new("d", "/ts")]),
            None
        );
    }

    #[test]
    fn a_row_is_written_in_the_servers_binary_layout() {
        let mut r = Record::from_json("s", "k1", br#"{"a":[1]}"#).unwrap();
        r.ts_ms = 258;
        let describe = "ts\tUInt64\nsource\tString\nkey\tLowCardinality(String)\npayload\tString\n";
        let layout = Layout::read(describe, &default_columns()).unwrap();
        let mut out = Vec::new();
        assert!(layout.encode(&r, &mut out));
        let mut want = vec![2, 1, 0, 0, 0, 0, 0, 0];
        want.extend_from_slice(b"\x01s\x02k1\x09{\"a\":[1]}");
        assert_eq!(out, want);
    }

    #[test]
    fn a_value_that_does_not_fit_exactly_leaves_the_row_to_json_each_row() {
        let r = Record::from_value("s", "k", &json!({"n": 300, "f": 1.5, "t": true, "z": null}));
        let cases = [
            ("/payload/n", ChType::UInt(1)),
            ("/payload/f", ChType::Int(8)),
            ("/payload/t", ChType::UInt(1)),
            ("/payload/n", ChType::String),
            ("/payload/z", ChType::Float64),
            ("/payload/gone", ChType::Nullable(Box::new(ChType::Int(4)))),
        ];
        let layout = |cols: &[Column], types: &[ChType]| Layout {
            columns: cols.to_vec(),
            types: types.to_vec(),
            whole: vec![false; cols.len()],
            mapped: cols.to_vec(),
        };
        for (field, ty) in cases {
            let cols = vec![Column::new("c", field)];
            let mut out = vec![7];
            assert!(
                !layout(&cols, std::slice::from_ref(&ty)).encode(&r, &mut out),
                "{field} into {ty:?}"
            );
            assert_eq!(out, vec![7], "nothing of the row is left behind");
        }
        let cols = vec![
            Column::new("a", "/payload/n"),
            Column::new("b", "/payload/z"),
        ];
        let types = [ChType::Int(2), ChType::Nullable(Box::new(ChType::Float64))];
        let mut out = Vec::new();
        assert!(layout(&cols, &types).encode(&r, &mut out));
        assert_eq!(out, vec![0x2c, 0x01, 1]);
    }

    #[test]
    fn long_strings_carry_a_multi_byte_length() {
        let mut out = Vec::new();
        string(&[b'x'; 300], &mut out);
        assert_eq!(&out[..2], &[0xac, 0x02]);
        assert_eq!(out.len(), 302);
    }

    #[test]
    fn a_payload_that_is_one_string_goes_into_a_string_column_as_the_string() {
        let r = Record::from_json("s", "k", br#""plain""#).unwrap();
        let layout = Layout::read("p\tString\n", &[Column::new("p", "/payload")]).unwrap();
        let mut out = Vec::new();
        assert!(layout.encode(&r, &mut out));
        assert_eq!(out, b"\x05plain");
    }
}
