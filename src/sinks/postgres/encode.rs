//! Rows for binary `COPY`: each column's JSON value converted to the column's type, as the
//! table says it is (read once per connection), written straight into the `COPY` stream. A
//! value that does not fit its column is an error naming both, and the batch goes to the
//! dead-letter queue like a server refusal.
//!
//! The whole payload into a `jsonb` or text column is written from the record's own JSON text,
//! never parsed and printed again: `jsonb` is a version byte and that text (the server parses
//! it either way), and a text column takes the original text anyway. Other columns take their
//! value from the column mapping, which parses the payload only when a pointer looks inside it.

use std::error::Error;
use std::time::{Duration, UNIX_EPOCH};

use bytes::{BufMut, BytesMut};
use serde_json::Value;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};

use crate::record::Record;
use crate::sinks::backlog::columns::{extract, text};
use crate::sinks::backlog::Column;

/// The binary `COPY` header: signature, flags, no header extension.
pub const COPY_HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// The binary `COPY` trailer: a field count of -1.
pub const COPY_TRAILER: &[u8] = &[0xff, 0xff];

/// How each column of a table is written, decided once per connection from its type.
#[derive(Debug, Clone)]
pub struct RowPlan {
    columns: Vec<Column>,
    types: Vec<Type>,
    /// Per column: written from the payload's text (`Some(jsonb)`), or from the mapping.
    whole_payload: Vec<Option<bool>>,
    /// The columns taken from the mapping, in order (the payload parsed only for these).
    mapped: Vec<Column>,
}

impl RowPlan {
    /// The plan for `columns` of types `types` (the same length and order).
    pub fn new(columns: &[Column], types: &[Type]) -> Self {
        let whole_payload: Vec<Option<bool>> = columns
            .iter()
            .zip(types)
            .map(|(c, ty)| match *ty {
                _ if c.field != "/payload" => None,
                Type::JSONB => Some(true),
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => Some(false),
                _ => None,
            })
            .collect();
        let mapped = columns
            .iter()
            .zip(&whole_payload)
            .filter(|(_, w)| w.is_none())
            .map(|(c, _)| c.clone())
            .collect();
        Self {
            columns: columns.to_vec(),
            types: types.to_vec(),
            whole_payload,
            mapped,
        }
    }

    /// Appends `record` as one binary `COPY` row to `out`, or says which value does not fit.
    pub fn write(&self, record: &Record, out: &mut BytesMut) -> Result<(), String> {
        // A payload that is one JSON string goes through the mapping: a text column takes
        // the string itself, not its quoted text.
        let raw = record.payload.get();
        let structured = raw.starts_with(['{', '[']);
        let values = if self.mapped.is_empty() && structured {
            Vec::new()
        } else if structured {
            extract(record, &self.mapped)
        } else {
            extract(record, &self.columns)
        };
        let mut values = values.into_iter();
        out.put_i16(self.columns.len() as i16);
        for ((c, ty), whole) in self
            .columns
            .iter()
            .zip(&self.types)
            .zip(&self.whole_payload)
        {
            let at = out.len();
            out.put_i32(0);
            let null = match whole {
                Some(jsonb) if structured => {
                    if *jsonb {
                        out.put_u8(1);
                    }
                    out.put_slice(raw.as_bytes());
                    false
                }
                _ => {
                    let v = values.next().flatten();
                    let cell = cell(record, c, v.as_ref(), ty)?;
                    match cell.to_sql(ty, out) {
                        Ok(IsNull::Yes) => true,
                        Ok(IsNull::No) => false,
                        Err(e) => return Err(format!("column {:?}: {e}", c.name)),
                    }
                }
            };
            let len = if null {
                -1
            } else {
                i32::try_from(out.len() - at - 4)
                    .map_err(|_| format!("column {:?}: a value over 2 GiB", c.name))?
            };
            out[at..at + 4].copy_from_slice(&len.to_be_bytes());
        }
        Ok(())
    }
}

/// One value, ready for its column.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// NULL.
    Null,
    /// `bool`.
    Bool(bool),
    /// `int2`.
    I16(i16),
    /// `int4`.
    I32(i32),
    /// `int8`.
    I64(i64),
    /// `float4`.
    F32(f32),
    /// `float8`.
    F64(f64),
    /// `text`, `varchar`, `bpchar`, `name`.
    Text(String),
    /// `json`, `jsonb`.
    Json(Value),
    /// `timestamp`, `timestamptz`: Unix milliseconds.
    Time(std::time::SystemTime),
}

impl ToSql for Cell {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match self {
            Self::Null => Ok(IsNull::Yes),
            Self::Bool(v) => v.to_sql(ty, out),
            Self::I16(v) => v.to_sql(ty, out),
            Self::I32(v) => v.to_sql(ty, out),
            Self::I64(v) => v.to_sql(ty, out),
            Self::F32(v) => v.to_sql(ty, out),
            Self::F64(v) => v.to_sql(ty, out),
            Self::Text(v) => v.to_sql(ty, out),
            Self::Json(v) => v.to_sql(ty, out),
            Self::Time(v) => v.to_sql(ty, out),
        }
    }

    // Every cell was made for its column's type by [`cell`].
    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// Converts one column's value (`None`: the pointer found nothing) for a column of type `ty`.
pub fn cell(
    record: &Record,
    column: &Column,
    value: Option<&Value>,
    ty: &Type,
) -> Result<Cell, String> {
    let Some(v) = value else {
        return Ok(Cell::Null);
    };
    if v.is_null() {
        return Ok(Cell::Null);
    }
    let wrong = || {
        format!(
            "column {:?} ({}) cannot take {} from {} of record {}",
            column.name,
            ty.name(),
            short(v),
            column.field,
            record.id
        )
    };
    let int = |lo: i64, hi: i64| v.as_i64().filter(|n| (lo..=hi).contains(n));
    Ok(match *ty {
        Type::BOOL => Cell::Bool(v.as_bool().ok_or_else(wrong)?),
        Type::INT2 => Cell::I16(int(i16::MIN.into(), i16::MAX.into()).ok_or_else(wrong)? as i16),
        Type::INT4 => Cell::I32(int(i32::MIN.into(), i32::MAX.into()).ok_or_else(wrong)? as i32),
        Type::INT8 => Cell::I64(v.as_i64().ok_or_else(wrong)?),
        Type::FLOAT4 => Cell::F32(v.as_f64().ok_or_else(wrong)? as f32),
        Type::FLOAT8 => Cell::F64(v.as_f64().ok_or_else(wrong)?),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            Cell::Text(text(record, column, v))
        }
        Type::JSON | Type::JSONB => Cell::Json(v.clone()),
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let ms = v.as_u64().ok_or_else(wrong)?;
            Cell::Time(UNIX_EPOCH + Duration::from_millis(ms))
        }
        _ => {
            return Err(format!(
                "column {:?} has type {}, which this sink does not write (use bool, int2/4/8, float4/8, text, varchar, json, jsonb, timestamp or timestamptz)",
                column.name,
                ty.name()
            ))
        }
    })
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() <= 60 {
        return s;
    }
    let mut end = 60;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::sinks::backlog::config::default_columns;

    #[test]
    fn values_are_converted_by_the_column_type() {
        let r = Record::from_value("s", "k", &json!({"n": 7}));
        let c = Column::new("n", "/payload/n");
        assert_eq!(cell(&r, &c, Some(&json!(7)), &Type::INT4), Ok(Cell::I32(7)));
        assert_eq!(
            cell(&r, &c, Some(&json!(7)), &Type::TEXT),
            Ok(Cell::Text("7".into()))
        );
        assert_eq!(cell(&r, &c, None, &Type::INT4), Ok(Cell::Null));
        assert_eq!(
            cell(&r, &c, Some(&json!(1000)), &Type::TIMESTAMPTZ),
            Ok(Cell::Time(UNIX_EPOCH + Duration::from_secs(1)))
        );
        let payload = Column::new("payload", "/payload");
        assert_eq!(
            cell(&r, &payload, Some(&json!({"n": 7})), &Type::TEXT),
            Ok(Cell::Text(r#"{"n":7}"#.into()))
        );
    }

    #[test]
    fn a_value_that_does_not_fit_names_the_column_and_the_record() {
        let r = Record::from_value("s", "k", &json!({}));
        let c = Column::new("n", "/payload/n");
        let e = cell(&r, &c, Some(&json!("abc")), &Type::INT4).unwrap_err();
        assert!(e.contains("\"n\" (int4) cannot take \"abc\""), "{e}");
        assert!(cell(&r, &c, Some(&json!(70000)), &Type::INT2).is_err());
        assert!(cell(&r, &c, Some(&json!(1)), &Type::NUMERIC)
            .unwrap_err()
            .contains("numeric"));
    }

    #[test]
    fn a_row_is_written_as_binary_copy_with_the_payload_text_as_it_came() {
        let mut r = Record::from_json("s", "k", br#"{"b":1, "a":"x"}"#).unwrap();
        r.ts_ms = 0;
        let types = [Type::TIMESTAMPTZ, Type::TEXT, Type::VARCHAR, Type::JSONB];
        let plan = RowPlan::new(&default_columns(), &types);
        let mut out = BytesMut::new();
        plan.write(&r, &mut out).unwrap();
        let mut want = BytesMut::new();
        want.put_i16(4);
        // 1970-01-01 is -946684800 s before the Postgres epoch, in microseconds.
        want.put_i32(8);
        want.put_i64(-946_684_800_000_000);
        want.put_i32(1);
        want.put_slice(b"s");
        want.put_i32(1);
        want.put_slice(b"k");
        let payload = br#"{"b":1, "a":"x"}"#;
        want.put_i32(payload.len() as i32 + 1);
        want.put_u8(1);
        want.put_slice(payload);
        assert_eq!(out, want);
    }

    #[test]
    fn a_null_and_a_value_that_does_not_fit_are_written_as_before() {
        let r = Record::from_value("s", "k", &json!({"n": "abc"}));
        let cols = vec![
            Column::new("gone", "/payload/gone"),
            Column::new("n", "/payload/n"),
        ];
        let plan = RowPlan::new(&cols[..1], &[Type::INT4]);
        let mut out = BytesMut::new();
        plan.write(&r, &mut out).unwrap();
        assert_eq!(&out[..], &[0, 1, 0xff, 0xff, 0xff, 0xff]);
        let plan = RowPlan::new(&cols, &[Type::INT4, Type::INT4]);
        let e = plan.write(&r, &mut BytesMut::new()).unwrap_err();
        assert!(e.contains("\"n\" (int4) cannot take \"abc\""), "{e}");
    }

    #[test]
    fn a_payload_that_is_one_string_goes_into_text_as_the_string() {
        let r = Record::from_json("s", "k", br#""plain""#).unwrap();
        let cols = vec![Column::new("p", "/payload")];
        let plan = RowPlan::new(&cols, &[Type::TEXT]);
        let mut out = BytesMut::new();
        plan.write(&r, &mut out).unwrap();
        assert_eq!(&out[..], b"\0\x01\0\0\0\x05plain");
    }
}
