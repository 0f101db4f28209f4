//! OPC-UA values → the JSON of a record's points: `{"value":..,"quality":"good"|"bad",
//! "status":".."}`. A value that JSON cannot carry as a number or a string (a structure, a
//! matrix) becomes its text form, so a point is never lost for its type.
//!
//! And the other way, for commands: a JSON value → the [`Variant`] of exactly the node's data
//! type ([`to_variant`]), never a lossy conversion: a number with a fraction for an integer
//! node, or outside the type's range, or with more digits than a Float keeps, is
//! `out_of_range`; a value of the wrong kind (a string for a Double) is refused.

use opcua::types::{DataValue, DateTime, StatusCode, Variant};
use serde_json::{json, Number, Value};

use super::config::NodeType;

/// Largest integer every integer below which a Double holds exactly (2^53).
const EXACT_IN_DOUBLE: f64 = 9_007_199_254_740_992.0;

/// Why a JSON value cannot be written to a node of some type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    /// The value is of the wrong kind (a string for a number, a number for a Boolean).
    Refused(String),
    /// A number the type cannot hold exactly.
    OutOfRange(String),
}

/// The value a command writes to a node of type `t`, as exactly that type.
pub fn to_variant(value: &Value, t: NodeType) -> Result<Variant, Unfit> {
    let wrong_kind = || {
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "true or false",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "a list",
            Value::Object(_) => "an object",
        };
        let wanted = match t {
            NodeType::Boolean => "true or false",
            NodeType::String => "a string",
            _ => "a number",
        };
        Unfit::Refused(format!("{} takes {wanted}, got {kind}", a_node(t)))
    };
    match (t, value) {
        (NodeType::Boolean, Value::Bool(b)) => Ok(Variant::Boolean(*b)),
        (NodeType::String, Value::String(s)) => Ok(Variant::from(s.as_str())),
        (NodeType::Double, Value::Number(n)) => double(n).map(Variant::Double),
        (NodeType::Float, Value::Number(n)) => float(n).map(Variant::Float),
        (_, Value::Number(n)) if t.is_numeric() => {
            let i = integer(n, t)?;
            let out = || Unfit::OutOfRange(format!("{n} is outside the range of {}", a_node(t)));
            Ok(match t {
                NodeType::SByte => Variant::SByte(i8::try_from(i).map_err(|_| out())?),
                NodeType::Byte => Variant::Byte(u8::try_from(i).map_err(|_| out())?),
                NodeType::Int16 => Variant::Int16(i16::try_from(i).map_err(|_| out())?),
                NodeType::UInt16 => Variant::UInt16(u16::try_from(i).map_err(|_| out())?),
                NodeType::Int32 => Variant::Int32(i32::try_from(i).map_err(|_| out())?),
                NodeType::UInt32 => Variant::UInt32(u32::try_from(i).map_err(|_| out())?),
                NodeType::Int64 => Variant::Int64(i64::try_from(i).map_err(|_| out())?),
                NodeType::UInt64 => Variant::UInt64(u64::try_from(i).map_err(|_| out())?),
                _ => return Err(wrong_kind()),
            })
        }
        _ => Err(wrong_kind()),
    }
}

/// "a Double node", "an Int32 node".
pub fn a_node(t: NodeType) -> String {
    let article = if t.as_str().starts_with(['I', 'U']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {t} node")
}

/// A whole number, exactly: an integer literal, or a float literal without a fraction that a
/// Double holds exactly (`72.0`, `3e9`).
fn integer(n: &Number, t: NodeType) -> Result<i128, Unfit> {
    if let Some(i) = n.as_i64() {
        return Ok(i128::from(i));
    }
    if let Some(u) = n.as_u64() {
        return Ok(i128::from(u));
    }
    let f = n.as_f64().unwrap_or(f64::NAN);
    if f.fract() != 0.0 || !f.is_finite() {
        return Err(Unfit::OutOfRange(format!(
            "{n} is not a whole number, and {} takes only whole numbers",
            a_node(t)
        )));
    }
    if f.abs() > EXACT_IN_DOUBLE {
        return Err(Unfit::OutOfRange(format!(
            "{n} is outside the range of {}, or not exact: write large integers without a decimal point or exponent",
            a_node(t)
        )));
    }
    // Whole and within ±2^53: the cast is exact.
    Ok(f as i128)
}

/// A Double: any JSON float, or an integer a Double holds exactly.
fn double(n: &Number) -> Result<f64, Unfit> {
    if let Some(i) = n.as_i64() {
        if (i as f64) as i128 != i128::from(i) {
            return Err(Unfit::OutOfRange(format!(
                "{n} has more digits than a Double node keeps exactly"
            )));
        }
        return Ok(i as f64);
    }
    if let Some(u) = n.as_u64() {
        if (u as f64) as i128 != i128::from(u) {
            return Err(Unfit::OutOfRange(format!(
                "{n} has more digits than a Double node keeps exactly"
            )));
        }
        return Ok(u as f64);
    }
    n.as_f64()
        .filter(|f| f.is_finite())
        .ok_or_else(|| Unfit::OutOfRange(format!("{n} is not a finite number")))
}

/// A Float: a number whose shortest decimal form a Float keeps (`72.5`, `0.1`; not
/// `0.123456789`, not `1e39`).
fn float(n: &Number) -> Result<f32, Unfit> {
    let d = double(n)
        .map_err(|_| Unfit::OutOfRange(format!("{n} has more digits than a Float node keeps")))?;
    if d.abs() > f64::from(f32::MAX) {
        return Err(Unfit::OutOfRange(format!(
            "{n} is outside the range of a Float node"
        )));
    }
    let f = d as f32;
    // The Float's own shortest decimal form, read back as a Double, is the value asked for
    // exactly when no digit was lost.
    if f.to_string().parse::<f64>().ok() != Some(d) {
        return Err(Unfit::OutOfRange(format!(
            "{n} has more digits than a Float node keeps (the nearest Float is {f})"
        )));
    }
    Ok(f)
}

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
    fn values_are_converted_to_exactly_the_nodes_type() {
        let v = |text: &str, t: NodeType| to_variant(&serde_json::from_str(text).unwrap(), t);
        assert_eq!(v("72.5", NodeType::Double), Ok(Variant::Double(72.5)));
        assert_eq!(v("72", NodeType::Double), Ok(Variant::Double(72.0)));
        assert_eq!(v("72.5", NodeType::Float), Ok(Variant::Float(72.5)));
        assert_eq!(v("0.1", NodeType::Float), Ok(Variant::Float(0.1)));
        assert_eq!(v("-7", NodeType::Int32), Ok(Variant::Int32(-7)));
        assert_eq!(v("72.0", NodeType::Int32), Ok(Variant::Int32(72)));
        assert_eq!(v("255", NodeType::Byte), Ok(Variant::Byte(255)));
        assert_eq!(v("-128", NodeType::SByte), Ok(Variant::SByte(-128)));
        assert_eq!(v("65535", NodeType::UInt16), Ok(Variant::UInt16(65535)));
        assert_eq!(v("-32768", NodeType::Int16), Ok(Variant::Int16(-32768)));
        assert_eq!(
            v("4294967295", NodeType::UInt32),
            Ok(Variant::UInt32(u32::MAX))
        );
        assert_eq!(
            v("-9223372036854775808", NodeType::Int64),
            Ok(Variant::Int64(i64::MIN))
        );
        assert_eq!(
            v("18446744073709551615", NodeType::UInt64),
            Ok(Variant::UInt64(u64::MAX))
        );
        assert_eq!(v("true", NodeType::Boolean), Ok(Variant::Boolean(true)));
        assert_eq!(v("\"auto\"", NodeType::String), Ok(Variant::from("auto")));
    }

    #[test]
    fn a_lossy_value_is_out_of_range_and_a_wrong_kind_is_refused() {
        let v = |text: &str, t: NodeType| to_variant(&serde_json::from_str(text).unwrap(), t);
        let out = |r: Result<Variant, Unfit>| matches!(r, Err(Unfit::OutOfRange(_)));
        let refused = |r: Result<Variant, Unfit>| matches!(r, Err(Unfit::Refused(_)));
        assert!(out(v("72.5", NodeType::Int32)));
        assert!(out(v("3e9", NodeType::Int32)));
        assert!(out(v("3000000000", NodeType::Int32)));
        assert!(out(v("256", NodeType::Byte)));
        assert!(out(v("-1", NodeType::UInt64)));
        assert!(out(v("1e19", NodeType::Int64)));
        assert!(out(v("1e300", NodeType::UInt64)));
        assert!(out(v("9007199254740993", NodeType::Double)));
        assert!(out(v("0.123456789", NodeType::Float)));
        assert!(out(v("1e39", NodeType::Float)));
        assert!(refused(v("\"72.5\"", NodeType::Double)));
        assert!(refused(v("1", NodeType::Boolean)));
        assert!(refused(v("true", NodeType::Int16)));
        assert!(refused(v("5", NodeType::String)));
        assert!(refused(v("null", NodeType::Double)));
        assert!(refused(v("[1]", NodeType::Int32)));
        assert_eq!(
            v("\"hot\"", NodeType::Double),
            Err(Unfit::Refused(
                "a Double node takes a number, got a string".into()
            ))
        );
        assert_eq!(
            v("72.5", NodeType::Int32),
            Err(Unfit::OutOfRange(
                "72.5 is not a whole number, and an Int32 node takes only whole numbers".into()
            ))
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
