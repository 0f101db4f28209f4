//! Dotted paths into a record, and templates that read them.
//!
//! A path is rooted at the record: `payload` (the whole payload), `payload.a.b` (a field),
//! `payload.list.0` (an array element), `key`, and the read-only `id`, `source` and `ts`.
//! A segment addresses an object's key, or, on an array, an element by its decimal index.
//! Keys that contain a dot cannot be addressed. A path is *missing* on a record when it does
//! not resolve there; `null` is a value, not a missing field.
//!
//! Nodes never touch the payload text: [`Fields::read`] parses it once, the node works on the
//! tree, and [`Fields::into_parts`] hands back what the node may change (key and payload).

use std::borrow::Cow;
use std::fmt;

use serde_json::{Map, Value};

use crate::record::Record;

pub use super::template::Template;

/// Where a path starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Root {
    /// The payload; the only root with fields below it.
    Payload,
    /// The record's key (text); writable.
    Key,
    /// The record's id; read-only.
    Id,
    /// The record's source name; read-only.
    Source,
    /// The record's timestamp in Unix milliseconds; read-only.
    Ts,
}

/// A checked dotted path, e.g. `payload.items.0.sku`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    root: Root,
    segs: Vec<String>,
    text: String,
}

impl FieldPath {
    /// Parses a path; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = text.split('.');
        let first = parts.next().unwrap_or_default();
        let root = match first {
            "payload" => Root::Payload,
            "key" => Root::Key,
            "id" => Root::Id,
            "source" => Root::Source,
            "ts" => Root::Ts,
            "" if text.is_empty() => return Err("empty path".into()),
            other => {
                return Err(format!(
                "{text:?} starts with {other:?}; a path starts with payload, key, id, source or ts"
            ))
            }
        };
        let segs: Vec<String> = parts.map(str::to_string).collect();
        if segs.iter().any(String::is_empty) {
            return Err(format!("{text:?} has an empty segment"));
        }
        if root != Root::Payload && !segs.is_empty() {
            return Err(format!("{text:?}: {first} has no fields below it"));
        }
        Ok(Self {
            root,
            segs,
            text: text.to_string(),
        })
    }

    /// Where the path starts.
    pub fn root(&self) -> Root {
        self.root
    }

    /// The segments below the root (only `payload` has any).
    pub fn segments(&self) -> &[String] {
        &self.segs
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True for the paths a `map` node may write: `payload`, `payload.*` and `key`.
    pub fn is_writable(&self) -> bool {
        matches!(self.root, Root::Payload | Root::Key)
    }

    /// True for the paths a `map` node may remove or rename away: `payload.*` (not the whole
    /// payload, not `key`: a record always has both).
    pub fn is_removable(&self) -> bool {
        self.root == Root::Payload && !self.segs.is_empty()
    }

    /// Text of the first `n` segments below the root, for messages.
    fn prefix(&self, n: usize) -> String {
        let mut s = String::from("payload");
        for seg in self.segs.iter().take(n) {
            s.push('.');
            s.push_str(seg);
        }
        s
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The fields of one record, opened for a node: the payload parsed into a tree.
#[derive(Debug)]
pub struct Fields<'r> {
    id: &'r str,
    source: &'r str,
    ts_ms: u64,
    /// The key, as the node leaves it.
    pub key: String,
    /// The payload tree, as the node leaves it.
    pub payload: Value,
}

impl<'r> Fields<'r> {
    /// Opens a record: parses its payload once.
    pub fn read(record: &'r Record) -> Self {
        Self {
            id: &record.id,
            source: &record.source,
            ts_ms: record.ts_ms,
            key: record.key.clone(),
            payload: record.payload_value(),
        }
    }

    /// The key and payload, to write back into the record.
    pub fn into_parts(self) -> (String, Value) {
        (self.key, self.payload)
    }

    /// The value at `path`, or `None` when it is missing.
    pub fn get(&self, path: &FieldPath) -> Option<Cow<'_, Value>> {
        match path.root {
            Root::Id => Some(Cow::Owned(Value::from(self.id))),
            Root::Source => Some(Cow::Owned(Value::from(self.source))),
            Root::Key => Some(Cow::Owned(Value::from(self.key.as_str()))),
            Root::Ts => Some(Cow::Owned(Value::from(self.ts_ms))),
            Root::Payload => {
                let mut node = &self.payload;
                for seg in &path.segs {
                    node = child(node, seg)?;
                }
                Some(Cow::Borrowed(node))
            }
        }
    }

    /// Writes `value` at `path`, creating missing objects on the way. An array element is
    /// replaced, or appended when its index is the array's length. Fails, naming the field, on
    /// a read-only path, on a path through a scalar, or on an index past the end.
    pub fn set(&mut self, path: &FieldPath, value: Value) -> Result<(), String> {
        match path.root {
            Root::Key => {
                self.key = match value {
                    Value::String(s) => s,
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    other => return Err(format!("key must be text, got {}", type_name(&other))),
                };
                Ok(())
            }
            Root::Id | Root::Source | Root::Ts => Err(format!("{path} is read-only")),
            Root::Payload => {
                let mut node = &mut self.payload;
                for (i, seg) in path.segs.iter().enumerate() {
                    if node.is_null() {
                        *node = Value::Object(Map::new());
                    }
                    let last = i + 1 == path.segs.len();
                    node = match node {
                        Value::Object(m) => m.entry(seg.as_str()).or_insert(Value::Null),
                        Value::Array(a) => {
                            let len = a.len();
                            match seg.parse::<usize>() {
                                Ok(idx) if idx == len && last => {
                                    a.push(Value::Null);
                                    match a.last_mut() {
                                        Some(v) => v,
                                        None => return Err(format!("cannot set {path}")),
                                    }
                                }
                                Ok(idx) if idx < len => match a.get_mut(idx) {
                                    Some(v) => v,
                                    None => return Err(format!("cannot set {path}")),
                                },
                                _ => {
                                    return Err(format!(
                                        "cannot set {path}: {} is an array of {len} and {seg:?} is not an index in it",
                                        path.prefix(i)
                                    ))
                                }
                            }
                        }
                        other => {
                            return Err(format!(
                                "cannot set {path}: {} is {}",
                                path.prefix(i),
                                type_name(other)
                            ))
                        }
                    };
                }
                *node = value;
                Ok(())
            }
        }
    }

    /// Removes and returns the value at a removable path (`payload.*`); `None` when missing.
    pub fn remove(&mut self, path: &FieldPath) -> Option<Value> {
        let (last, parents) = match path.root {
            Root::Payload => path.segs.split_last()?,
            _ => return None,
        };
        let mut node = &mut self.payload;
        for seg in parents {
            node = child_mut(node, seg)?;
        }
        match node {
            Value::Object(m) => m.shift_remove(last.as_str()),
            Value::Array(a) => match last.parse::<usize>() {
                Ok(i) if i < a.len() => Some(a.remove(i)),
                _ => None,
            },
            _ => None,
        }
    }

    /// Moves the value at `from` to `to`. Fails, naming the field, when `from` is missing.
    pub fn rename(&mut self, from: &FieldPath, to: &FieldPath) -> Result<(), String> {
        let value = self
            .remove(from)
            .ok_or_else(|| format!("rename: field {from} is missing"))?;
        self.set(to, value)
    }
}

fn child<'v>(node: &'v Value, seg: &str) -> Option<&'v Value> {
    match node {
        Value::Object(m) => m.get(seg),
        Value::Array(a) => a.get(seg.parse::<usize>().ok()?),
        _ => None,
    }
}

fn child_mut<'v>(node: &'v mut Value, seg: &str) -> Option<&'v mut Value> {
    match node {
        Value::Object(m) => m.get_mut(seg),
        Value::Array(a) => a.get_mut(seg.parse::<usize>().ok()?),
        _ => None,
    }
}

/// The JSON type of a value, with its article, for messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(s: &str) -> FieldPath {
        FieldPath::parse(s).unwrap()
    }

    fn record() -> Record {
        Record::from_value(
            "ingest/orders",
            "o-1",
            &json!({"a": {"b": 1}, "list": [10, {"x": "y"}], "n": 5}),
        )
    }

    #[test]
    fn paths_are_checked_when_parsed() {
        assert!(FieldPath::parse("payload.a.b").is_ok());
        assert!(FieldPath::parse("payload").is_ok());
        assert!(FieldPath::parse("").is_err());
        assert!(FieldPath::parse("payload..a").is_err());
        assert!(FieldPath::parse("payload.").is_err());
        assert!(FieldPath::parse("body.a")
            .unwrap_err()
            .contains("starts with"));
        assert!(FieldPath::parse("key.a").unwrap_err().contains("no fields"));
        assert!(p("key").is_writable() && !p("key").is_removable());
        assert!(!p("id").is_writable() && !p("ts").is_writable());
        assert!(!p("payload").is_removable() && p("payload.a").is_removable());
    }

    #[test]
    fn get_reads_fields_array_elements_and_record_attributes() {
        let r = record();
        let f = Fields::read(&r);
        assert_eq!(*f.get(&p("payload.a.b")).unwrap(), json!(1));
        assert_eq!(*f.get(&p("payload.list.0")).unwrap(), json!(10));
        assert_eq!(*f.get(&p("payload.list.1.x")).unwrap(), json!("y"));
        assert!(f.get(&p("payload.list.2")).is_none());
        assert!(f.get(&p("payload.list.x")).is_none());
        assert!(f.get(&p("payload.n.deeper")).is_none());
        assert_eq!(*f.get(&p("key")).unwrap(), json!("o-1"));
        assert_eq!(*f.get(&p("source")).unwrap(), json!("ingest/orders"));
        assert_eq!(*f.get(&p("id")).unwrap(), json!(r.id));
        assert_eq!(*f.get(&p("ts")).unwrap(), json!(r.ts_ms));
    }

    #[test]
    fn set_creates_objects_replaces_or_appends_elements_and_refuses_scalars() {
        let r = record();
        let mut f = Fields::read(&r);
        f.set(&p("payload.new.deep"), json!(true)).unwrap();
        f.set(&p("payload.list.0"), json!(11)).unwrap();
        f.set(&p("payload.list.2"), json!(12)).unwrap();
        f.set(&p("payload.list.1.x"), json!("z")).unwrap();
        assert_eq!(f.payload["new"]["deep"], json!(true));
        assert_eq!(f.payload["list"], json!([11, {"x": "z"}, 12]));
        let err = f.set(&p("payload.list.9"), json!(0)).unwrap_err();
        assert!(err.contains("payload.list is an array of 3"), "{err}");
        let err = f.set(&p("payload.n.x"), json!(0)).unwrap_err();
        assert_eq!(err, "cannot set payload.n.x: payload.n is a number");
        assert!(f
            .set(&p("id"), json!("x"))
            .unwrap_err()
            .contains("read-only"));
        f.set(&p("key"), json!(42)).unwrap();
        assert_eq!(f.key, "42");
        assert!(f.set(&p("key"), json!({})).is_err());
    }

    #[test]
    fn remove_and_rename_keep_the_other_keys_in_order() {
        let r = record();
        let mut f = Fields::read(&r);
        assert_eq!(f.remove(&p("payload.list.0")), Some(json!(10)));
        assert_eq!(f.remove(&p("payload.list.5")), None);
        assert_eq!(f.remove(&p("payload.missing.x")), None);
        f.rename(&p("payload.a"), &p("payload.z")).unwrap();
        let keys: Vec<&String> = f.payload.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["list", "n", "z"]);
        let err = f.rename(&p("payload.a"), &p("payload.b")).unwrap_err();
        assert_eq!(err, "rename: field payload.a is missing");
    }

    #[test]
    fn setting_below_a_scalar_payload_fails_and_a_null_payload_becomes_an_object() {
        let r = Record::from_value("s", "k", &json!(3));
        let mut f = Fields::read(&r);
        assert!(f.set(&p("payload.a"), json!(1)).is_err());
        let r = Record::from_value("s", "k", &Value::Null);
        let mut f = Fields::read(&r);
        f.set(&p("payload.a"), json!(1)).unwrap();
        assert_eq!(f.payload, json!({"a": 1}));
    }

    proptest::proptest! {
        #[test]
        fn path_operations_never_panic_on_any_path_or_payload(
            text in "(payload|key|id|ts|x)?(\\.(a|b|0|1|2|9|))*",
            to in "payload(\\.(a|0|1))*",
            pick in 0..4usize,
        ) {
            let payloads = [json!({"a": [1, {"b": 2}], "0": null}), json!([[0], 1]), json!(7), Value::Null];
            let r = Record::from_value("s", "k", &payloads[pick]);
            let mut f = Fields::read(&r);
            if let (Ok(path), Ok(to)) = (FieldPath::parse(&text), FieldPath::parse(&to)) {
                let _ = f.get(&path).map(|v| v.into_owned());
                let _ = f.set(&path, json!({"n": 1}));
                let _ = f.rename(&path, &to);
                let _ = f.remove(&path);
                let _ = Template::parse(&json!(format!("x{{{{{text}}}}}y"))).map(|t| t.render(&f));
            }
        }
    }
}
