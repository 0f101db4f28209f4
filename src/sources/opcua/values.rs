//! OPC-UA values → the JSON of a record's points: `{"value":..,"quality":"good"|"bad",
//! "status":".."}`. A value that JSON cannot carry as a number or a string (a structure, a
//! matrix) becomes its text form, so a point is never lost for its type.

use opcua::types::{DataValue, DateTime, StatusCode, Variant};
use serde_json::{json, Value};

/// Unix milliseconds of an OPC-UA timestamp; `None` for the null date (before 1970).
pub fn unix_ms(t: &DateTime) -> Option<u64> {
    u64::try_from(t.as_chrono().timestamp_millis())
        .ok()
        .filter(|ms| *ms > 0)
}

/// The JSON form of a value.
pub fn variant_json(v: &Variant) -> Value {
    match v {
        Variant::Empty => Value::Null,
        Variant::Boolean(b) => json!(b),
        Variant::SByte(n) => json!(n),
        Variant::Byte(n) => json!(n),
        Variant::Int16(n) => json!(n),
        Variant::UInt16(n) => json!(n),
        Variant::Int32(n) => json!(n),
        Variant::UInt32(n) => json!(n),
        Variant::Int64(n) => json!(n),
        Variant::UInt64(n) => json!(n),
        // NaN and infinities have no JSON form: null.
        Variant::Float(n) => json!(f64::from(*n)),
        Variant::Double(n) => json!(n),
        Variant::String(s) => match s.value() {
            Some(s) => json!(s),
            None => Value::Null,
        },
        Variant::DateTime(t) => match unix_ms(t) {
            Some(ms) => json!(ms),
            None => Value::Null,
        },
        Variant::StatusCode(c) => json!(c.to_string()),
        Variant::ByteString(b) => json!(b.as_base64()),
        Variant::LocalizedText(t) => json!(t.text.value().clone().unwrap_or_default()),
        Variant::QualifiedName(q) => json!(q.to_string()),
        Variant::NodeId(n) => json!(n.to_string()),
        Variant::Guid(g) => json!(g.to_string()),
        Variant::Variant(inner) => variant_json(inner),
        Variant::DataValue(dv) => dv.value.as_ref().map(variant_json).unwrap_or(Value::Null),
        Variant::Array(a) if a.dimensions.as_ref().is_none_or(|d| d.len() <= 1) => {
            Value::Array(a.values.iter().map(variant_json).collect())
        }
        other => json!(format!("{other:?}")),
    }
}

/// One point: its value, quality and status text.
pub fn point_json(dv: &DataValue) -> Value {
    let status = dv.status.unwrap_or(StatusCode::Good);
    if status.is_good() {
        json!({
            "value": dv.value.as_ref().map(variant_json).unwrap_or(Value::Null),
            "quality": "good",
            "status": status.to_string(),
        })
    } else {
        bad_point(status)
    }
}

/// A point without a value: the node is unknown, unreadable, or its status is not good.
pub fn bad_point(status: StatusCode) -> Value {
    json!({"value": Value::Null, "quality": "bad", "status": status.to_string()})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_become_json_numbers_strings_and_booleans() {
        assert_eq!(variant_json(&Variant::Double(21.5)), json!(21.5));
        assert_eq!(variant_json(&Variant::Int32(-3)), json!(-3));
        assert_eq!(variant_json(&Variant::UInt64(u64::MAX)), json!(u64::MAX));
        assert_eq!(variant_json(&Variant::Boolean(true)), json!(true));
        assert_eq!(variant_json(&Variant::from("on")), json!("on"));
        assert_eq!(variant_json(&Variant::Float(f32::NAN)), Value::Null);
        assert_eq!(
            variant_json(&Variant::from(vec![1i32, 2, 3])),
            json!([1, 2, 3])
        );
    }

    #[test]
    fn an_unknown_node_is_a_bad_point_with_the_status_name() {
        let dv = DataValue {
            status: Some(StatusCode::BadNodeIdUnknown),
            ..Default::default()
        };
        assert_eq!(
            point_json(&dv),
            json!({"value": null, "quality": "bad", "status": "BadNodeIdUnknown"})
        );
        let good = DataValue::new_now(Variant::Double(1.0));
        assert_eq!(point_json(&good)["quality"], json!("good"));
        assert_eq!(point_json(&good)["status"], json!("Good"));
    }
}
