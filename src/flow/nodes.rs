//! Pure node execution: one node, one record, no I/O.
//!
//! A node either emits the record on a port, filters it out (a normal end), or fails with a
//! reason; a failed `map` leaves the record exactly as it came in, so the dead-letter queue
//! keeps what the node was given. Sink nodes are run by the engine, not here.

use std::borrow::Cow;
use std::cmp::Ordering;

use serde_json::value::to_raw_value;
use serde_json::Value;

use super::config::{Condition, MapSpec, NodeKind, Op};
use super::path::Fields;
use super::{NodeOutcome, Port};
use crate::record::Record;

/// Runs one node on a record: `map`, `filter`, `switch`, and the pass-through kinds (`source`,
/// `input`, `subflow`: `Emit(Out(0))`). A `sink` node fails here: the engine runs those.
///
/// Only a `map` writes the record, and a borrowed one is copied first: the engine hands every
/// node the record as its source made it until a map changes it, without a copy per wire.
pub fn run_node(kind: &NodeKind, record: &mut Cow<'_, Record>) -> NodeOutcome {
    match kind {
        NodeKind::Source { .. } | NodeKind::Input | NodeKind::Subflow { .. } => {
            NodeOutcome::Emit(Port::Out(0))
        }
        NodeKind::Map(spec) => match apply_map(spec, record.to_mut()) {
            Ok(()) => NodeOutcome::Emit(Port::Out(0)),
            Err(reason) => NodeOutcome::Fail(reason),
        },
        NodeKind::Filter { conditions } => {
            let fields = Fields::read(record);
            if conditions.iter().all(|c| holds(c, &fields)) {
                NodeOutcome::Emit(Port::Out(0))
            } else {
                NodeOutcome::Filtered
            }
        }
        NodeKind::Switch { field, cases } => {
            let fields = Fields::read(record);
            let value = fields.get(field);
            let port = value
                .and_then(|v| cases.iter().position(|c| equal(&v, c)))
                .unwrap_or(cases.len());
            NodeOutcome::Emit(Port::Out(port))
        }
        NodeKind::Sink { sink } => {
            NodeOutcome::Fail(format!("sink node ({sink}) is run by the engine"))
        }
    }
}

/// Applies set, rename, remove; on failure the record is left unchanged.
fn apply_map(spec: &MapSpec, record: &mut Record) -> Result<(), String> {
    let mut fields = Fields::read(record);
    for (path, template) in &spec.set {
        let value = template.render(&fields)?;
        fields.set(path, value)?;
    }
    for (from, to) in &spec.rename {
        fields.rename(from, to)?;
    }
    for path in &spec.remove {
        fields.remove(path);
    }
    let (key, payload) = fields.into_parts();
    let payload = to_raw_value(&payload).map_err(|e| format!("cannot write the payload: {e}"))?;
    record.key = key;
    record.payload = payload;
    Ok(())
}

/// True when a condition holds for the record's fields.
pub fn holds(c: &Condition, fields: &Fields<'_>) -> bool {
    let Some(v) = fields.get(&c.field) else {
        return c.op == Op::Missing;
    };
    let v = v.as_ref();
    match c.op {
        Op::Exists => true,
        Op::Missing => false,
        Op::Eq => same_type(v, &c.value) && equal(v, &c.value),
        Op::Ne => same_type(v, &c.value) && !equal(v, &c.value),
        Op::Gt => order(v, &c.value) == Some(Ordering::Greater),
        Op::Ge => matches!(
            order(v, &c.value),
            Some(Ordering::Greater | Ordering::Equal)
        ),
        Op::Lt => order(v, &c.value) == Some(Ordering::Less),
        Op::Le => matches!(order(v, &c.value), Some(Ordering::Less | Ordering::Equal)),
        Op::Contains => match (v, &c.value) {
            (Value::String(s), Value::String(needle)) => s.contains(needle.as_str()),
            (Value::Array(items), needle) => items.iter().any(|i| equal(i, needle)),
            _ => false,
        },
        Op::In => match &c.value {
            Value::Array(choices) => choices.iter().any(|c| equal(v, c)),
            _ => false,
        },
    }
}

fn same_type(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// JSON equality, with numbers compared by value (`1` equals `1.0`).
pub fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => order(a, b) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, a)| y.get(k).is_some_and(|b| equal(a, b)))
        }
        _ => a == b,
    }
}

/// Order of two numbers or two strings; `None` for any other pair.
fn order(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                Some(x.cmp(&y))
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                Some(x.cmp(&y))
            } else {
                x.as_f64()?.partial_cmp(&y.as_f64()?)
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::path::{FieldPath, Template};
    use serde_json::json;

    fn path(s: &str) -> FieldPath {
        FieldPath::parse(s).unwrap()
    }

    fn record(payload: Value) -> Cow<'static, Record> {
        Cow::Owned(Record::from_value("webhook/stripe", "k-1", &payload))
    }

    fn map(set: &[(&str, Value)], rename: &[(&str, &str)], remove: &[&str]) -> NodeKind {
        NodeKind::Map(MapSpec {
            set: set
                .iter()
                .map(|(p, v)| (path(p), Template::parse(v).unwrap()))
                .collect(),
            rename: rename.iter().map(|(a, b)| (path(a), path(b))).collect(),
            remove: remove.iter().map(|p| path(p)).collect(),
        })
    }

    fn filter(field: &str, op: Op, value: Value) -> NodeKind {
        let conditions = vec![Condition {
            field: path(field),
            op,
            value,
        }];
        NodeKind::Filter { conditions }
    }

    fn keeps(kind: &NodeKind, payload: Value) -> bool {
        match run_node(kind, &mut record(payload)) {
            NodeOutcome::Emit(Port::Out(0)) => true,
            NodeOutcome::Filtered => false,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn map_sets_then_renames_then_removes_with_templates() {
        let kind = map(
            &[
                ("payload.site", json!("plant-3")),
                ("payload.ref", json!("{{key}}-{{payload.order}}")),
                ("payload.copy", json!("{{payload.amt}}")),
                ("key", json!("{{payload.order}}")),
            ],
            &[("payload.amt", "payload.amount")],
            &["payload.debug", "payload.not-there"],
        );
        let mut r = record(json!({"order": 42, "amt": 12.5, "debug": true}));
        let id = r.id.clone();
        assert_eq!(run_node(&kind, &mut r), NodeOutcome::Emit(Port::Out(0)));
        assert_eq!(
            r.payload_value(),
            json!({"order": 42, "site": "plant-3", "ref": "k-1-42", "copy": 12.5, "amount": 12.5})
        );
        assert_eq!((r.key.as_str(), r.id.as_str()), ("42", id.as_str()));
    }

    #[test]
    fn a_missing_field_fails_the_map_naming_it_and_leaves_the_record_unchanged() {
        let kind = map(
            &[
                ("payload.a", json!(1)),
                ("payload.ref", json!("{{payload.order}}")),
            ],
            &[],
            &[],
        );
        let mut r = record(json!({"x": 1}));
        let before = r.clone();
        let outcome = run_node(&kind, &mut r);
        assert_eq!(
            outcome,
            NodeOutcome::Fail("template field payload.order is missing".into())
        );
        assert_eq!(r, before);
        let kind = map(&[], &[("payload.amt", "payload.amount")], &[]);
        let outcome = run_node(&kind, &mut r);
        assert_eq!(
            outcome,
            NodeOutcome::Fail("rename: field payload.amt is missing".into())
        );
    }

    #[test]
    fn map_writes_into_arrays_by_index() {
        let kind = map(
            &[("payload.list.1.v", json!("{{payload.list.0.v}}"))],
            &[],
            &["payload.list.0"],
        );
        let mut r = record(json!({"list": [{"v": 1}, {"v": 2}]}));
        assert_eq!(run_node(&kind, &mut r), NodeOutcome::Emit(Port::Out(0)));
        assert_eq!(r.payload_value(), json!({"list": [{"v": 1}]}));
    }

    #[test]
    fn comparisons_hold_for_numbers_with_numbers_and_strings_with_strings_only() {
        let p = json!({"n": 5, "f": 2.5, "s": "abc", "b": true, "big": u64::MAX});
        assert!(keeps(&filter("payload.n", Op::Eq, json!(5.0)), p.clone()));
        assert!(keeps(&filter("payload.n", Op::Ne, json!(4)), p.clone()));
        assert!(keeps(&filter("payload.n", Op::Gt, json!(4.5)), p.clone()));
        assert!(keeps(&filter("payload.n", Op::Ge, json!(5)), p.clone()));
        assert!(keeps(&filter("payload.f", Op::Lt, json!(3)), p.clone()));
        assert!(keeps(&filter("payload.f", Op::Le, json!(2.5)), p.clone()));
        assert!(keeps(&filter("payload.big", Op::Gt, json!(-1)), p.clone()));
        assert!(keeps(&filter("payload.s", Op::Gt, json!("abb")), p.clone()));
        assert!(keeps(&filter("payload.b", Op::Eq, json!(true)), p.clone()));
        assert!(!keeps(&filter("payload.n", Op::Gt, json!(5)), p.clone()));
        // Other type pairs never hold, not even `ne`.
        assert!(!keeps(&filter("payload.n", Op::Eq, json!("5")), p.clone()));
        assert!(!keeps(&filter("payload.n", Op::Ne, json!("5")), p.clone()));
        assert!(!keeps(&filter("payload.s", Op::Lt, json!(1)), p.clone()));
        assert!(!keeps(&filter("payload.b", Op::Ge, json!(true)), p.clone()));
        assert!(!keeps(&filter("payload.none", Op::Ne, json!(1)), p));
    }

    #[test]
    fn exists_missing_contains_and_in_test_presence_and_membership() {
        let p = json!({"s": "plant-3", "tags": ["a", 2], "z": null});
        assert!(keeps(
            &filter("payload.z", Op::Exists, Value::Null),
            p.clone()
        ));
        assert!(!keeps(
            &filter("payload.q", Op::Exists, Value::Null),
            p.clone()
        ));
        assert!(keeps(
            &filter("payload.q", Op::Missing, Value::Null),
            p.clone()
        ));
        assert!(!keeps(
            &filter("payload.s", Op::Missing, Value::Null),
            p.clone()
        ));
        assert!(keeps(
            &filter("payload.s", Op::Contains, json!("nt-")),
            p.clone()
        ));
        assert!(keeps(
            &filter("payload.tags", Op::Contains, json!(2.0)),
            p.clone()
        ));
        assert!(!keeps(
            &filter("payload.tags", Op::Contains, json!("b")),
            p.clone()
        ));
        assert!(!keeps(
            &filter("payload.s", Op::Contains, json!(3)),
            p.clone()
        ));
        assert!(keeps(
            &filter("payload.s", Op::In, json!(["x", "plant-3"])),
            p.clone()
        ));
        assert!(!keeps(
            &filter("payload.s", Op::In, json!(["x"])),
            p.clone()
        ));
        assert!(keeps(
            &filter("payload.tags.1", Op::In, json!([1, 2])),
            p.clone()
        ));
        assert!(keeps(&filter("key", Op::Eq, json!("k-1")), p.clone()));
        assert!(keeps(&filter("source", Op::Contains, json!("webhook/")), p));
    }

    #[test]
    fn every_condition_of_a_filter_must_hold() {
        let kind = NodeKind::Filter {
            conditions: vec![
                Condition {
                    field: path("payload.a"),
                    op: Op::Gt,
                    value: json!(1),
                },
                Condition {
                    field: path("payload.b"),
                    op: Op::Eq,
                    value: json!("x"),
                },
            ],
        };
        assert!(keeps(&kind, json!({"a": 2, "b": "x"})));
        assert!(!keeps(&kind, json!({"a": 2, "b": "y"})));
    }

    #[test]
    fn switch_picks_the_first_equal_case_else_the_last_port() {
        let kind = NodeKind::Switch {
            field: path("payload.t"),
            cases: vec![json!("payment"), json!(2), json!("payment")],
        };
        let port = |p: Value| run_node(&kind, &mut record(p));
        assert_eq!(
            port(json!({"t": "payment"})),
            NodeOutcome::Emit(Port::Out(0))
        );
        assert_eq!(port(json!({"t": 2.0})), NodeOutcome::Emit(Port::Out(1)));
        assert_eq!(
            port(json!({"t": "refund"})),
            NodeOutcome::Emit(Port::Out(3))
        );
        assert_eq!(port(json!({})), NodeOutcome::Emit(Port::Out(3)));
    }

    #[test]
    fn pass_through_kinds_emit_on_port_0_and_sinks_are_left_to_the_engine() {
        let mut r = record(json!({}));
        for kind in [NodeKind::Input, NodeKind::Subflow { flow: "f".into() }] {
            assert_eq!(run_node(&kind, &mut r), NodeOutcome::Emit(Port::Out(0)));
        }
        let sink = NodeKind::Sink {
            sink: "push".into(),
        };
        assert!(matches!(run_node(&sink, &mut r), NodeOutcome::Fail(_)));
    }
}
