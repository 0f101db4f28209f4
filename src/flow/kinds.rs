//! The fields of `map`, `filter` and `switch` nodes: paths, templates and conditions, each
//! problem reported at the key it is about (`flows[0].nodes[2].set.payload.ref`).

use serde_json::Value;

use super::config::{Condition, MapSpec, NodeKind, Op, RawCondition, RawNode};
use super::path::{type_name, FieldPath, Template};
use crate::config::Problems;

/// Parses a path at `path`, reporting a bad one.
fn field_path(text: &str, path: &str, p: &mut Problems) -> Option<FieldPath> {
    FieldPath::parse(text).map_err(|e| p.push(path, e)).ok()
}

pub(super) fn check_map(n: &RawNode, path: &str, p: &mut Problems) -> Option<MapSpec> {
    let mut spec = MapSpec::default();
    if let Some(set) = &n.set {
        let Value::Object(entries) = set else {
            p.push(format!("{path}.set"), "expected a map of path: value");
            return None;
        };
        for (k, v) in entries {
            let at = format!("{path}.set.{k}");
            let Some(target) = field_path(k, &at, p) else {
                continue;
            };
            if !target.is_writable() {
                p.push(
                    at,
                    format!("{k} is read-only (a map node writes payload and key)"),
                );
                continue;
            }
            match Template::parse(v) {
                Ok(Template::Literal(Value::Null | Value::Array(_) | Value::Object(_)))
                    if k == "key" =>
                {
                    p.push(at, "key must be text");
                }
                Ok(t) => spec.set.push((target, t)),
                Err(e) => p.push(at, e),
            }
        }
    }
    if let Some(rename) = &n.rename {
        let Value::Object(entries) = rename else {
            p.push(format!("{path}.rename"), "expected a map of from: to paths");
            return None;
        };
        for (from, to) in entries {
            let at = format!("{path}.rename.{from}");
            let Some(from_path) = field_path(from, &at, p) else {
                continue;
            };
            if !from_path.is_removable() {
                p.push(
                    &at,
                    format!("cannot move {from} away (only payload.* can be renamed)"),
                );
            }
            let Value::String(to) = to else {
                p.push(at, format!("expected the path to rename {from} to"));
                continue;
            };
            let Some(to_path) = field_path(to, &at, p) else {
                continue;
            };
            if !to_path.is_writable() {
                p.push(
                    at,
                    format!("{to} is read-only (a map node writes payload and key)"),
                );
                continue;
            }
            spec.rename.push((from_path, to_path));
        }
    }
    for (i, r) in n.remove.iter().flatten().enumerate() {
        let at = format!("{path}.remove[{i}]");
        let Some(target) = field_path(r, &at, p) else {
            continue;
        };
        if target.is_removable() {
            spec.remove.push(target);
        } else {
            p.push(
                at,
                format!("cannot remove {r} (only payload.* can be removed)"),
            );
        }
    }
    if n.set.is_none() && n.rename.is_none() && n.remove.is_none() {
        p.push(path, "a map node needs set, rename or remove");
        return None;
    }
    Some(spec)
}

pub(super) fn check_filter(
    raw: Option<&[RawCondition]>,
    path: &str,
    p: &mut Problems,
) -> Option<Vec<Condition>> {
    let at = format!("{path}.where");
    let raw = match raw {
        None => {
            p.push(at, "is required");
            return None;
        }
        Some([]) => {
            p.push(at, "must list at least one condition");
            return None;
        }
        Some(raw) => raw,
    };
    let mut out = Vec::with_capacity(raw.len());
    for (i, c) in raw.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let field = match c.field.as_deref() {
            Some(f) => field_path(f, &format!("{at}.field"), p),
            None => {
                p.push(format!("{at}.field"), "is required");
                None
            }
        };
        let op = match c.op.as_deref() {
            Some(name) => Op::parse(name).or_else(|| {
                let names: Vec<&str> = Op::ALL.iter().map(|(n, _)| *n).collect();
                let msg = format!("unknown op {name:?} (known: {})", names.join(", "));
                p.push(format!("{at}.op"), msg);
                None
            }),
            None => {
                p.push(format!("{at}.op"), "is required");
                None
            }
        };
        let (Some(field), Some(op)) = (field, op) else {
            continue;
        };
        let name = c.op.as_deref().unwrap_or_default();
        let at = format!("{at}.value");
        let value = match (op, &c.value) {
            (Op::Exists | Op::Missing, None) => Value::Null,
            (Op::Exists | Op::Missing, Some(_)) => {
                p.push(at, format!("is not used by op {name}"));
                continue;
            }
            (_, None) => {
                p.push(at, format!("is required for op {name}"));
                continue;
            }
            (Op::Gt | Op::Ge | Op::Lt | Op::Le, Some(v)) if !(v.is_number() || v.is_string()) => {
                p.push(
                    at,
                    format!(
                        "op {name} compares numbers or strings, got {}",
                        type_name(v)
                    ),
                );
                continue;
            }
            (Op::In, Some(v)) if !v.is_array() => {
                p.push(at, "op in needs a list of values");
                continue;
            }
            (_, Some(v)) => v.clone(),
        };
        out.push(Condition { field, op, value });
    }
    Some(out)
}

pub(super) fn check_switch(n: &RawNode, path: &str, p: &mut Problems) -> Option<NodeKind> {
    let field = match n.field.as_deref() {
        Some(f) => field_path(f, &format!("{path}.field"), p),
        None => {
            p.push(format!("{path}.field"), "is required");
            None
        }
    };
    let cases = match &n.cases {
        Some(Value::Array(cases)) if !cases.is_empty() => Some(cases.clone()),
        Some(_) => {
            p.push(
                format!("{path}.cases"),
                "expected a list of at least one value",
            );
            None
        }
        None => {
            p.push(format!("{path}.cases"), "is required");
            None
        }
    };
    Some(NodeKind::Switch {
        field: field?,
        cases: cases?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::validate::testing::errors;
    use serde_json::json;

    /// One flow: a stripe source into `node`, then into a push sink.
    fn one(node: serde_json::Value) -> serde_json::Value {
        json!([{ "id": "f", "nodes": [
            { "id": "in", "kind": "source", "source": "webhook/stripe" },
            node,
            { "id": "up", "kind": "sink", "sink": "push" },
        ], "wires": [{ "from": "in", "to": "n" }, { "from": "n", "to": "up" }] }])
    }

    #[test]
    fn writing_to_read_only_fields_is_refused() {
        let errs = errors(one(json!({ "id": "n", "kind": "map",
            "set": { "id": "x", "payload.ok": 1, "ts": 0 },
            "rename": { "key": "payload.k", "payload.a": "source" },
            "remove": ["key", "payload"] })));
        assert_eq!(errs, [
            "flows[0].nodes[1].set.id: id is read-only (a map node writes payload and key)",
            "flows[0].nodes[1].set.ts: ts is read-only (a map node writes payload and key)",
            "flows[0].nodes[1].rename.key: cannot move key away (only payload.* can be renamed)",
            "flows[0].nodes[1].rename.payload.a: source is read-only (a map node writes payload and key)",
            "flows[0].nodes[1].remove[0]: cannot remove key (only payload.* can be removed)",
            "flows[0].nodes[1].remove[1]: cannot remove payload (only payload.* can be removed)",
        ]);
    }

    #[test]
    fn bad_paths_templates_and_conditions_are_reported_where_written() {
        let errs = errors(one(json!({ "id": "n", "kind": "map",
            "set": { "payload..a": 1, "payload.b": "{{payload.x", "key": ["a"] } })));
        assert_eq!(
            errs,
            [
                r#"flows[0].nodes[1].set.payload..a: "payload..a" has an empty segment"#,
                r#"flows[0].nodes[1].set.payload.b: "{{payload.x": `{{` without a closing `}}`"#,
                "flows[0].nodes[1].set.key: key must be text",
            ]
        );
        let errs = errors(one(json!({ "id": "n", "kind": "filter", "where": [
            { "field": "payload.a", "op": "gte", "value": 1 },
            { "field": "payload.a", "op": "gt", "value": [1] },
            { "field": "payload.a", "op": "exists", "value": 1 },
            { "field": "payload.a", "op": "in", "value": 1 },
            { "field": "payload.a", "op": "eq" },
            { "op": "missing" }] })));
        assert_eq!(
            errs,
            [
                r#"flows[0].nodes[1].where[0].op: unknown op "gte" (known: eq, ne, gt, ge, lt, le, exists, missing, contains, in)"#,
                "flows[0].nodes[1].where[1].value: op gt compares numbers or strings, got an array",
                "flows[0].nodes[1].where[2].value: is not used by op exists",
                "flows[0].nodes[1].where[3].value: op in needs a list of values",
                "flows[0].nodes[1].where[4].value: is required for op eq",
                "flows[0].nodes[1].where[5].field: is required",
            ]
        );
        let errs = errors(one(
            json!({ "id": "n", "kind": "switch", "field": "id.x", "cases": [] }),
        ));
        assert_eq!(
            errs,
            [
                r#"flows[0].nodes[1].field: "id.x": id has no fields below it"#,
                "flows[0].nodes[1].cases: expected a list of at least one value",
            ]
        );
    }
}
