//! The column mapping: each column takes the value a JSON pointer finds in the record
//! `{"id","source","key","ts","payload"}` (`ts` in Unix milliseconds).

use serde_json::Value;

use super::config::Column;
use crate::record::Record;

/// The value of each column for `record`, in column order; `None` where the pointer finds
/// nothing. The payload is parsed once, and only when a pointer looks inside it.
pub fn extract(record: &Record, columns: &[Column]) -> Vec<Option<Value>> {
    let mut payload: Option<Value> = None;
    columns
        .iter()
        .map(|c| {
            let f = c.field.as_str();
            if f.is_empty() {
                return Some(whole(record));
            }
            let (head, rest) = match f[1..].find('/') {
                Some(i) => (&f[1..=i], &f[i + 1..]),
                None => (&f[1..], ""),
            };
            match head {
                "id" if rest.is_empty() => Some(Value::from(record.id.as_str())),
                "source" if rest.is_empty() => Some(Value::from(record.source.as_str())),
                "key" if rest.is_empty() => Some(Value::from(record.key.as_str())),
                "ts" if rest.is_empty() => Some(Value::from(record.ts_ms)),
                "payload" => {
                    let p = payload.get_or_insert_with(|| record.payload_value());
                    p.pointer(rest).cloned()
                }
                _ => None,
            }
        })
        .collect()
}

/// The text a text column gets: strings as they are, the whole payload as its original JSON
/// text, other values as JSON text.
pub fn text(record: &Record, column: &Column, value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        _ if column.field == "/payload" => record.payload.get().to_string(),
        other => other.to_string(),
    }
}

fn whole(record: &Record) -> Value {
    serde_json::json!({
        "id": record.id,
        "source": record.source,
        "key": record.key,
        "ts": record.ts_ms,
        "payload": record.payload_value(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::config::default_columns;
    use super::*;

    #[test]
    fn pointers_reach_the_envelope_and_into_the_payload() {
        let mut r = Record::from_value(
            "ingest/line",
            "press-1",
            &json!({"t": 21.5, "a": {"b": [1, 2]}}),
        );
        r.ts_ms = 1_700_000_000_123;
        let cols = vec![
            Column {
                name: "t".into(),
                field: "/payload/t".into(),
            },
            Column {
                name: "b".into(),
                field: "/payload/a/b/1".into(),
            },
            Column {
                name: "ts".into(),
                field: "/ts".into(),
            },
            Column {
                name: "gone".into(),
                field: "/payload/nope".into(),
            },
            Column {
                name: "bad".into(),
                field: "/other".into(),
            },
        ];
        assert_eq!(
            extract(&r, &cols),
            vec![
                Some(json!(21.5)),
                Some(json!(2)),
                Some(json!(1_700_000_000_123u64)),
                None,
                None
            ]
        );
        let d = default_columns();
        let v = extract(&r, &d);
        assert_eq!(v[1], Some(json!("ingest/line")));
        assert_eq!(v[2], Some(json!("press-1")));
        let payload = v[3].clone().unwrap();
        assert_eq!(text(&r, &d[3], &payload), r.payload.get());
    }
}
