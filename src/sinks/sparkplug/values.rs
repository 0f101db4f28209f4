//! Values between the records' JSON and Sparkplug metrics: what a payload holds as samples,
//! the datatype a value is learned as, the encoding of each datatype in the payload, and the
//! way back for commands. Pure.
//!
//! Encodings:
//! - Int8/16/32 go into `int_value` as their own width's two's complement (Int16 -5 is
//!   65531); a reader takes the low bits, so the 32-bit sign-extended form some hosts send
//!   (4294967291) reads back the same. Int64 goes into `long_value` as two's complement.
//! - A record's number whose metric has no datatype in the config is learned as Int64 when
//!   it is an integer, UInt64 above Int64's range, Double otherwise; text as String; a list or
//!   an object inside a point as String holding its JSON.

use std::borrow::Cow;

use serde_json::{Map, Number, Value as Json};

use super::proto::{datatype as dt, Value};

/// Longest metric name taken from a record (longer ones are skipped and counted).
pub const MAX_NAME: usize = 200;
/// How deep a record's nested objects are followed to make metric names.
const MAX_DEPTH: usize = 4;
/// Most samples taken from one record.
pub const MAX_SAMPLES: usize = 2000;

/// A metric value, typed.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// No value (`is_null`).
    Null,
    /// Boolean.
    Bool(bool),
    /// Any signed integer type.
    Int(i64),
    /// Any unsigned integer type.
    UInt(u64),
    /// Float or Double.
    Float(f64),
    /// String.
    Text(String),
}

impl Val {
    /// The number, for deadbands.
    pub fn number(&self) -> Option<f64> {
        match self {
            Self::Int(i) => Some(*i as f64),
            Self::UInt(u) => Some(*u as f64),
            Self::Float(f) => Some(*f),
            Self::Null | Self::Bool(_) | Self::Text(_) => None,
        }
    }

    /// The payload's field for datatype `t`; `None` for null.
    pub fn encode(&self, t: u32) -> Option<Value> {
        Some(match (self, t) {
            (Self::Null, _) => return None,
            (Self::Bool(b), _) => Value::BooleanValue(*b),
            (Self::Text(s), _) => Value::StringValue(s.clone()),
            (Self::Int(i), dt::INT8) => Value::IntValue(u32::from(*i as i8 as u8)),
            (Self::Int(i), dt::INT16) => Value::IntValue(u32::from(*i as i16 as u16)),
            (Self::Int(i), dt::INT32) => Value::IntValue(*i as i32 as u32),
            (Self::UInt(u), dt::UINT8 | dt::UINT16 | dt::UINT32) => Value::IntValue(*u as u32),
            (Self::Int(i), dt::FLOAT) => Value::FloatValue(*i as f32),
            (Self::UInt(u), dt::FLOAT) => Value::FloatValue(*u as f32),
            (Self::Float(f), dt::FLOAT) => Value::FloatValue(*f as f32),
            (Self::Int(i), dt::DOUBLE) => Value::DoubleValue(*i as f64),
            (Self::UInt(u), dt::DOUBLE) => Value::DoubleValue(*u as f64),
            (Self::Float(f), _) => Value::DoubleValue(*f),
            (Self::Int(i), _) => Value::LongValue(*i as u64),
            (Self::UInt(u), _) => Value::LongValue(*u),
        })
    }
}

/// `v` as a value of datatype `t`, when it fits (a number in range of the type, a bool, a
/// string); `None` when it does not.
pub fn fit(v: &Json, t: u32) -> Option<Val> {
    let int = |min: i64, max: i64| v.as_i64().filter(|i| (min..=max).contains(i)).map(Val::Int);
    let uint = |max: u64| v.as_u64().filter(|u| *u <= max).map(Val::UInt);
    match t {
        _ if v.is_null() => Some(Val::Null),
        dt::BOOLEAN => v.as_bool().map(Val::Bool),
        dt::STRING | dt::TEXT => Some(Val::Text(match v {
            Json::String(s) => s.clone(),
            other => other.to_string(),
        })),
        dt::INT8 => int(i8::MIN.into(), i8::MAX.into()),
        dt::INT16 => int(i16::MIN.into(), i16::MAX.into()),
        dt::INT32 => int(i32::MIN.into(), i32::MAX.into()),
        dt::INT64 => v.as_i64().map(Val::Int),
        dt::UINT8 => uint(u8::MAX.into()),
        dt::UINT16 => uint(u16::MAX.into()),
        dt::UINT32 => uint(u32::MAX.into()),
        dt::UINT64 | dt::DATETIME => v.as_u64().map(Val::UInt),
        dt::FLOAT | dt::DOUBLE => v.as_f64().map(Val::Float),
        _ => None,
    }
}

/// The datatype a value of a metric without a configured one is learned as, and the value;
/// `None` for null (nothing to learn from).
pub fn learn(v: &Json) -> Option<(u32, Val)> {
    Some(match v {
        Json::Null => return None,
        Json::Bool(b) => (dt::BOOLEAN, Val::Bool(*b)),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                (dt::INT64, Val::Int(i))
            } else if let Some(u) = n.as_u64() {
                (dt::UINT64, Val::UInt(u))
            } else {
                (dt::DOUBLE, Val::Float(n.as_f64().unwrap_or(0.0)))
            }
        }
        Json::String(s) => (dt::STRING, Val::Text(s.clone())),
        other => (dt::STRING, Val::Text(other.to_string())),
    })
}

/// A command's metric value as the JSON the commands service takes, read by its datatype
/// `t` (the birth's, when the command leaves it out); `None` for a value this node cannot
/// write (null, bytes, a data set or template).
pub fn to_json(value: Option<&Value>, t: u32) -> Option<Json> {
    Some(match value? {
        Value::BooleanValue(b) => Json::Bool(*b),
        Value::StringValue(s) => Json::String(s.clone()),
        Value::IntValue(u) => match t {
            // The low bits carry the value, whether or not the sender sign-extended it.
            dt::INT8 => Json::from(i64::from(*u as u8 as i8)),
            dt::INT16 => Json::from(i64::from(*u as u16 as i16)),
            dt::INT32 => Json::from(i64::from(*u as i32)),
            _ => Json::from(*u),
        },
        Value::LongValue(l) => match t {
            dt::INT64 => Json::from(*l as i64),
            _ => Json::from(*l),
        },
        // The shortest text of the f32 (72.5, 0.1), not its widened f64 (0.100000001...).
        Value::FloatValue(f) => Json::Number(
            f.to_string()
                .parse::<f64>()
                .ok()
                .and_then(Number::from_f64)?,
        ),
        Value::DoubleValue(d) => Json::Number(Number::from_f64(*d)?),
        Value::BytesValue(_) => return None,
    })
}

/// One value a record carries.
/// A value of a record, borrowed from its payload (only a new metric copies its parts).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// The metric's name: `<group>/<point>` for a poller's record, the field's path for
    /// others.
    pub name: String,
    /// The payload key it came from (a poller's point name; the path for other records).
    pub point: Cow<'a, str>,
    /// The value.
    pub value: &'a Json,
    /// False when the source says the value is bad (a Modbus exception, a bad OPC-UA status).
    pub good: bool,
    /// The engineering unit the record gives.
    pub unit: Option<&'a str>,
}

/// The samples of a poller's record: `key` is the poll group, the payload maps each point to
/// `{"value", "quality", "unit"?}`. Entries that are not of that shape are taken as plain
/// values.
pub fn polled_samples<'a>(key: &str, payload: &'a Json, skipped: &mut u64) -> Vec<Sample<'a>> {
    let Json::Object(points) = payload else {
        *skipped += 1;
        return Vec::new();
    };
    let points = points
        .iter()
        .map(|(point, entry)| (point.as_str(), Part::Entry(entry)));
    samples_of(key, points, skipped)
}

/// The samples of a poller's record read from its text ([`PolledPayload`]): the same as
/// [`polled_samples`] of its JSON tree.
pub fn polled_samples_of<'a>(
    key: &str,
    payload: &'a PolledPayload<'a>,
    skipped: &mut u64,
) -> Vec<Sample<'a>> {
    let points = payload.points.iter().map(|(point, entry)| {
        let part = match entry {
            Entry::Point { value, good, unit } => Part::Point {
                value,
                good: *good,
                unit: unit.as_deref(),
            },
            Entry::Other(json) => Part::Entry(json),
        };
        (point.as_ref(), part)
    });
    samples_of(key, points, skipped)
}

/// A point of a poller's record on the way to its sample.
enum Part<'a> {
    /// An entry, point-shaped or a plain value.
    Entry(&'a Json),
    /// A point-shaped entry already taken apart.
    Point {
        value: &'a Json,
        good: bool,
        unit: Option<&'a str>,
    },
}

fn samples_of<'a>(
    key: &str,
    points: impl ExactSizeIterator<Item = (&'a str, Part<'a>)>,
    skipped: &mut u64,
) -> Vec<Sample<'a>> {
    let mut out = Vec::with_capacity(points.len().min(MAX_SAMPLES));
    for (point, part) in points {
        if out.len() >= MAX_SAMPLES {
            *skipped += 1;
            continue;
        }
        let name = format!("{key}/{point}");
        if name.len() > MAX_NAME {
            *skipped += 1;
            continue;
        }
        let point = Cow::Borrowed(point);
        out.push(match part {
            Part::Entry(entry) => point_sample(name, point, entry),
            Part::Point { value, good, unit } => Sample {
                name,
                point,
                value,
                good,
                unit,
            },
        });
    }
    out
}

/// A poller's payload read for its samples without a JSON tree of the whole of it (a drain
/// reads one per record): each point with its entry in payload order, point names and units
/// borrowed from the record's text where they hold no escapes. An entry that is not plainly
/// `{"value", "quality"?, "unit"?}` (other keys aside) is kept as its JSON and read as
/// [`polled_samples`] reads it.
pub struct PolledPayload<'a> {
    points: Vec<(Cow<'a, str>, Entry<'a>)>,
}

enum Entry<'a> {
    Point {
        value: Json,
        good: bool,
        unit: Option<Cow<'a, str>>,
    },
    Other(Json),
}

/// The shape of a poller's point; any other keys are passed over.
#[derive(serde::Deserialize)]
struct PointShape<'a> {
    #[serde(default, deserialize_with = "present")]
    value: Option<Json>,
    #[serde(default, borrow)]
    quality: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    unit: Option<Cow<'a, str>>,
}

/// `Some` for a key that is there, `null` included.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Json>, D::Error> {
    serde::Deserialize::deserialize(d).map(Some)
}

/// A key of the payload, borrowed where it has no escapes.
#[derive(serde::Deserialize)]
struct Key<'a>(#[serde(borrow)] Cow<'a, str>);

impl<'a> PolledPayload<'a> {
    /// Reads `text`, a record's payload; `None` when it is not an object of distinct keys
    /// (that payload goes the way of its JSON tree).
    pub fn read(text: &'a str) -> Option<Self> {
        struct Points;
        impl<'de> serde::de::Visitor<'de> for Points {
            type Value = Vec<(Cow<'de, str>, &'de serde_json::value::RawValue)>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(Key(k)) = map.next_key()? {
                    out.push((k, map.next_value()?));
                }
                Ok(out)
            }
        }
        let mut de = serde_json::Deserializer::from_str(text);
        let raw = serde::Deserializer::deserialize_map(&mut de, Points).ok()?;
        de.end().ok()?;
        if has_repeats(raw.iter().map(|(k, _)| k.as_ref())) {
            return None;
        }
        let points = raw
            .into_iter()
            .map(|(k, raw)| {
                let entry = match serde_json::from_str::<PointShape>(raw.get()) {
                    Ok(PointShape {
                        value: Some(value),
                        quality,
                        unit,
                    }) => Entry::Point {
                        value,
                        good: quality.is_none_or(|q| q == "good"),
                        unit,
                    },
                    // Not point-shaped, or a key of it repeated or of another type.
                    _ => Entry::Other(serde_json::from_str(raw.get()).unwrap_or(Json::Null)),
                };
                (k, entry)
            })
            .collect();
        Some(PolledPayload { points })
    }
}

/// True when a key comes twice.
fn has_repeats<'a>(keys: impl ExactSizeIterator<Item = &'a str> + Clone) -> bool {
    if keys.len() <= 32 {
        return keys
            .clone()
            .enumerate()
            .any(|(i, k)| keys.clone().take(i).any(|before| before == k));
    }
    let mut all: Vec<&str> = keys.collect();
    all.sort_unstable();
    all.windows(2).any(|w| w[0] == w[1])
}

/// Null, for a point-shaped object without a value.
static NULL: Json = Json::Null;

fn point_sample<'a>(name: String, point: Cow<'a, str>, entry: &'a Json) -> Sample<'a> {
    match entry {
        Json::Object(o) if o.contains_key("value") => Sample {
            name,
            point,
            value: o.get("value").unwrap_or(&NULL),
            good: o
                .get("quality")
                .and_then(Json::as_str)
                .is_none_or(|q| q == "good"),
            unit: o.get("unit").and_then(Json::as_str),
        },
        other => Sample {
            name,
            point,
            value: other,
            good: true,
            unit: None,
        },
    }
}

/// The samples of any other record: each field of the payload, nested objects as folders
/// (`line/speed`), a point-shaped object (`{"value":..}`) as its value; a payload that is
/// not an object is one metric, `value`.
pub fn record_samples<'a>(payload: &'a Json, skipped: &mut u64) -> Vec<Sample<'a>> {
    let mut out = Vec::new();
    match payload {
        Json::Object(fields) => flatten("", fields, 0, &mut out, skipped),
        other => out.push(Sample {
            name: "value".into(),
            point: Cow::Borrowed("value"),
            value: other,
            good: true,
            unit: None,
        }),
    }
    out
}

fn flatten<'a>(
    prefix: &str,
    fields: &'a Map<String, Json>,
    depth: usize,
    out: &mut Vec<Sample<'a>>,
    skipped: &mut u64,
) {
    for (key, v) in fields {
        let name = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}/{key}")
        };
        if out.len() >= MAX_SAMPLES || name.len() > MAX_NAME || name.is_empty() {
            *skipped += 1;
            continue;
        }
        match v {
            Json::Object(o) if o.contains_key("value") => {
                out.push(point_sample(name, Cow::Borrowed(key.as_str()), v))
            }
            Json::Object(o) if depth < MAX_DEPTH => flatten(&name, o, depth + 1, out, skipped),
            other => out.push(Sample {
                point: Cow::Owned(name.clone()),
                name,
                value: other,
                good: true,
                unit: None,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn signed_integers_are_encoded_in_their_own_width_and_read_back_from_either_form() {
        assert_eq!(Val::Int(-5).encode(dt::INT16), Some(Value::IntValue(65531)));
        assert_eq!(Val::Int(-1).encode(dt::INT8), Some(Value::IntValue(255)));
        assert_eq!(
            Val::Int(-5).encode(dt::INT32),
            Some(Value::IntValue(u32::MAX - 4))
        );
        assert_eq!(
            Val::Int(-5).encode(dt::INT64),
            Some(Value::LongValue(u64::MAX - 4))
        );
        assert_eq!(
            to_json(Some(&Value::IntValue(65531)), dt::INT16),
            Some(json!(-5))
        );
        assert_eq!(
            to_json(Some(&Value::IntValue(u32::MAX - 4)), dt::INT16),
            Some(json!(-5))
        );
        assert_eq!(
            to_json(Some(&Value::LongValue(u64::MAX)), dt::INT64),
            Some(json!(-1))
        );
        assert_eq!(
            to_json(Some(&Value::FloatValue(0.1)), dt::FLOAT),
            Some(json!(0.1))
        );
        assert_eq!(to_json(Some(&Value::BytesValue(vec![1])), dt::FLOAT), None);
        assert_eq!(to_json(None, dt::FLOAT), None);
    }

    #[test]
    fn values_fit_their_declared_type_or_not_at_all() {
        assert_eq!(fit(&json!(65535), dt::UINT16), Some(Val::UInt(65535)));
        assert_eq!(fit(&json!(65536), dt::UINT16), None);
        assert_eq!(fit(&json!(-1234), dt::INT16), Some(Val::Int(-1234)));
        assert_eq!(fit(&json!(21.5), dt::FLOAT), Some(Val::Float(21.5)));
        assert_eq!(fit(&json!(null), dt::FLOAT), Some(Val::Null));
        assert_eq!(fit(&json!("on"), dt::BOOLEAN), None);
        assert_eq!(learn(&json!(3)), Some((dt::INT64, Val::Int(3))));
        assert_eq!(
            learn(&json!(u64::MAX)),
            Some((dt::UINT64, Val::UInt(u64::MAX)))
        );
        assert_eq!(learn(&json!(2.5)), Some((dt::DOUBLE, Val::Float(2.5))));
        assert_eq!(
            learn(&json!([1, 2])),
            Some((dt::STRING, Val::Text("[1,2]".into())))
        );
        assert_eq!(learn(&json!(null)), None);
    }

    #[test]
    fn a_pollers_payload_read_from_its_text_gives_the_samples_its_json_tree_gives() {
        let payloads = [
            r#"{"temp":{"value":21.5,"quality":"good","unit":"\u00b0C"},"p":{"value":null,"quality":"bad","exception":2}}"#,
            r#"{"a":{"value":1},"b":{"value":2,"quality":7},"c":{"value":3,"unit":5},"d":{"value":4,"unit":null,"quality":null}}"#,
            r#"{"plain":5,"text":"x","list":[1,{"value":2}],"obj":{"v":1},"nested":{"value":{"deep":[1,2]},"quality":"good"}}"#,
            r#"{"twice":{"value":1,"value":2},"q":{"value":1,"quality":"good","quality":"bad"}}"#,
            r#"{"a\"b":{"value":true},"\u00e9":{"value":"\u00e9","quality":"uncertain"}}"#,
            r#"{"x":{"value":1},"x":{"value":2}}"#,
            r#"{}"#,
            r#"[1,2]"#,
            r#"7"#,
        ];
        let long = format!(
            r#"{{"{}":{{"value":1}},"ok":{{"value":2}}}}"#,
            "p".repeat(MAX_NAME)
        );
        let points = |name: fn(usize) -> String| {
            let entries: Vec<String> = (0..MAX_SAMPLES + 3)
                .map(|i| format!(r#""{}":{{"value":{i}}}"#, name(i)))
                .collect();
            format!("{{{}}}", entries.join(","))
        };
        // More points than a record gives samples: all distinct, and with two repeated.
        let distinct = points(|i| format!("p{i}"));
        let many = points(|i| format!("p{}", i % (MAX_SAMPLES + 1)));
        for text in payloads
            .iter()
            .copied()
            .chain([&long, &many, &distinct].map(String::as_str))
        {
            let json: Json = serde_json::from_str(text).unwrap();
            let (mut a, mut b) = (0, 0);
            let from_tree = polled_samples("g", &json, &mut a);
            let read = PolledPayload::read(text);
            let from_text = match &read {
                Some(p) => polled_samples_of("g", p, &mut b),
                None => polled_samples("g", &json, &mut b),
            };
            assert_eq!(from_text, from_tree, "{text}");
            assert_eq!(a, b, "{text}");
        }
        // Repeated points and payloads that are not objects go the JSON tree's way.
        assert!(PolledPayload::read(r#"{"x":{"value":1},"x":{"value":2}}"#).is_none());
        assert!(PolledPayload::read(&many).is_none());
        assert!(PolledPayload::read(&distinct).is_some());
        assert!(PolledPayload::read("7").is_none());
        assert!(PolledPayload::read(r#"{"x":{"value":1}}"#).is_some());
    }

    #[test]
    fn a_pollers_record_gives_group_and_point_and_other_records_give_their_field_paths() {
        let mut skipped = 0;
        let payload = json!({"temp": {"value": 21.5, "quality": "good", "unit": "°C"},
                             "press": {"value": null, "quality": "bad", "exception": 2}});
        let polled = polled_samples("fast", &payload, &mut skipped);
        assert_eq!(polled[0].name, "fast/temp");
        assert_eq!(polled[0].unit, Some("°C"));
        assert_eq!(polled[1].name, "fast/press");
        assert!(!polled[1].good);
        let payload = json!({"n": 7, "line": {"speed": 1.5, "state": {"value": "run", "quality": "good"}}, "tags": ["a"]});
        let other = record_samples(&payload, &mut skipped);
        let names: Vec<&str> = other.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["n", "line/speed", "line/state", "tags"]);
        assert_eq!(other[2].value, &json!("run"));
        assert_eq!(record_samples(&json!(5), &mut skipped)[0].name, "value");
        let long = json!({ "x".repeat(MAX_NAME + 1): 1 });
        assert!(record_samples(&long, &mut skipped).is_empty());
        assert_eq!(skipped, 1);
    }
}
