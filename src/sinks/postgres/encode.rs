//! Values for binary `COPY`: each column's JSON value converted to the column's type, as the
//! table says it is (read once per connection). A value that does not fit its column is an
//! error naming both, and the batch goes to the dead-letter queue like a server refusal.

use std::error::Error;
use std::time::{Duration, UNIX_EPOCH};

use bytes::BytesMut;
use serde_json::Value;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};

use crate::record::Record;
use crate::sinks::backlog::columns::text;
use crate::sinks::backlog::Column;

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

    fn col(name: &str, field: &str) -> Column {
        Column {
            name: name.into(),
            field: field.into(),
        }
    }

    #[test]
    fn values_are_converted_by_the_column_type() {
        let r = Record::from_value("s", "k", &json!({"n": 7}));
        let c = col("n", "/payload/n");
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
        let payload = col("payload", "/payload");
        assert_eq!(
            cell(&r, &payload, Some(&json!({"n": 7})), &Type::TEXT),
            Ok(Cell::Text(r#"{"n":7}"#.into()))
        );
    }

    #[test]
    fn a_value_that_does_not_fit_names_the_column_and_the_record() {
        let r = Record::from_value("s", "k", &json!({}));
        let c = col("n", "/payload/n");
        let e = cell(&r, &c, Some(&json!("abc")), &Type::INT4).unwrap_err();
        assert!(e.contains("\"n\" (int4) cannot take \"abc\""), "{e}");
        assert!(cell(&r, &c, Some(&json!(70000)), &Type::INT2).is_err());
        assert!(cell(&r, &c, Some(&json!(1)), &Type::NUMERIC)
            .unwrap_err()
            .contains("numeric"));
    }
}
