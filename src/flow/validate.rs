//! `flows:` → [`FlowConfig`]s. Pure: every problem reported with its path, warnings apart.
//!
//! Four steps, one file each:
//! - here: flow ids, and each node on its own (kind, the fields the kind needs and no others,
//!   known sources, sinks and flows);
//! - `kinds`: the fields of `map`, `filter` and `switch` nodes (paths, templates, conditions);
//! - `graph`: wires resolved to nodes and ports, and the unwired-port warnings;
//! - `shape`: cycles (inside a flow and across subflows) and reachability.

use std::collections::HashMap;

use super::config::{FlowConfig, NodeKind, RawFlow, RawNode};
use super::kinds::{check_filter, check_map, check_switch};
use super::{graph, shape};
use crate::config::{Problem, Problems};

/// A node after its own checks: `kind` is `None` when the node is wrong.
pub(super) struct Checked {
    pub id: Option<String>,
    pub kind: Option<NodeKind>,
}

/// What every node check may need to know.
struct Known<'a> {
    sources: &'a [String],
    sinks: &'a [&'a str],
    /// Flow id → whether it has an `input` node.
    flows: HashMap<&'a str, bool>,
}

/// Checks `flows:`; returns the validated flows, or nothing when any problem was found.
///
/// `known_sources` are the configured sources by flow name (`webhook/stripe`, `ingest/orders`),
/// `known_sinks` the sink names (`push`, `storage`). Without `flows:` (or with an empty list)
/// the result is empty: the caller then builds [`super::Plan::direct`].
pub fn validate_flows(
    raw: Option<&[RawFlow]>,
    known_sources: &[String],
    known_sinks: &[&str],
    p: &mut Problems,
    warnings: &mut Vec<Problem>,
) -> Vec<FlowConfig> {
    let Some(raw) = raw else {
        return Vec::new();
    };
    let errors_before = p.0.len();
    let ids = flow_ids(raw, p);
    let mut flows_known = HashMap::new();
    for (id, f) in ids.iter().zip(raw) {
        if let Some(id) = id {
            let has_input = f
                .nodes
                .iter()
                .flatten()
                .any(|n| n.kind.as_deref() == Some("input"));
            flows_known.entry(id.as_str()).or_insert(has_input);
        }
    }
    let known = Known {
        sources: known_sources,
        sinks: known_sinks,
        flows: flows_known,
    };
    let mut checked = Vec::with_capacity(raw.len());
    for (i, f) in raw.iter().enumerate() {
        let path = format!("flows[{i}]");
        let nodes = check_nodes(f.nodes.as_deref(), &path, &known, p);
        let flow_id = ids.get(i).cloned().flatten().unwrap_or_default();
        let wires = graph::check_flow(f, &flow_id, &nodes, &path, p, warnings);
        checked.push((flow_id, nodes, wires));
    }
    shape::check_subflow_cycles(&checked, p);
    if p.0.len() > errors_before {
        return Vec::new();
    }
    checked
        .into_iter()
        .map(|(id, nodes, wires)| FlowConfig {
            id,
            nodes: nodes
                .into_iter()
                .filter_map(|n| {
                    Some(super::config::Node {
                        id: n.id?,
                        kind: n.kind?,
                    })
                })
                .collect(),
            wires,
        })
        .collect()
}

/// Each flow's id when it is set, non-empty and the first of its name.
fn flow_ids(raw: &[RawFlow], p: &mut Problems) -> Vec<Option<String>> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut ids = Vec::with_capacity(raw.len());
    for (i, f) in raw.iter().enumerate() {
        let path = format!("flows[{i}].id");
        ids.push(match f.id.as_deref() {
            None => {
                p.push(path, "is required");
                None
            }
            Some(id) if id.trim().is_empty() => {
                p.push(path, "must not be empty");
                None
            }
            Some(id) => match seen.get(id) {
                Some(first) => {
                    p.push(
                        path,
                        format!("duplicate flow id {id:?} (also flows[{first}])"),
                    );
                    None
                }
                None => {
                    seen.insert(id, i);
                    Some(id.to_string())
                }
            },
        });
    }
    ids
}

fn check_nodes(
    raw: Option<&[RawNode]>,
    flow_path: &str,
    known: &Known<'_>,
    p: &mut Problems,
) -> Vec<Checked> {
    let raw = match raw {
        Some(nodes) if !nodes.is_empty() => nodes,
        _ => {
            p.push(format!("{flow_path}.nodes"), "must list at least one node");
            return Vec::new();
        }
    };
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut out = Vec::with_capacity(raw.len());
    for (j, n) in raw.iter().enumerate() {
        let path = format!("{flow_path}.nodes[{j}]");
        let id = match n.id.as_deref() {
            None => {
                p.push(format!("{path}.id"), "is required");
                None
            }
            Some(id) if id.trim().is_empty() => {
                p.push(format!("{path}.id"), "must not be empty");
                None
            }
            Some(id) if id.contains(':') => {
                p.push(
                    format!("{path}.id"),
                    format!("{id:?}: a node id has no `:`"),
                );
                None
            }
            Some(id) => match seen.get(id) {
                Some(first) => {
                    let msg = format!("duplicate node id {id:?} (also nodes[{first}])");
                    p.push(format!("{path}.id"), msg);
                    None
                }
                None => {
                    seen.insert(id, j);
                    Some(id.to_string())
                }
            },
        };
        let kind = check_kind(n, &path, known, p);
        out.push(Checked { id, kind });
    }
    out
}

/// The node's kind with its fields, or `None` after reporting what is wrong.
fn check_kind(n: &RawNode, path: &str, known: &Known<'_>, p: &mut Problems) -> Option<NodeKind> {
    const KINDS: &str = "source, input, map, filter, switch, subflow, sink";
    let Some(kind) = n.kind.as_deref() else {
        p.push(
            format!("{path}.kind"),
            format!("is required (one of {KINDS})"),
        );
        return None;
    };
    let allowed: &[&str] = match kind {
        "source" => &["source"],
        "input" => &[],
        "map" => &["set", "rename", "remove"],
        "filter" => &["where"],
        "switch" => &["field", "cases"],
        "subflow" => &["flow"],
        "sink" => &["sink"],
        other => {
            p.push(
                format!("{path}.kind"),
                format!("unknown kind {other:?} (known: {KINDS})"),
            );
            return None;
        }
    };
    let present = [
        ("source", n.source.is_some()),
        ("flow", n.flow.is_some()),
        ("sink", n.sink.is_some()),
        ("set", n.set.is_some()),
        ("rename", n.rename.is_some()),
        ("remove", n.remove.is_some()),
        ("where", n.conditions.is_some()),
        ("field", n.field.is_some()),
        ("cases", n.cases.is_some()),
    ];
    let before = p.0.len();
    for (field, _) in present
        .iter()
        .filter(|(f, there)| *there && !allowed.contains(f))
    {
        let a = if kind == "input" { "an" } else { "a" };
        p.push(
            format!("{path}.{field}"),
            format!("is not a field of {a} {kind} node"),
        );
    }
    let built = match kind {
        "source" => named(&n.source, "source", known.sources, path, p)
            .map(|source| NodeKind::Source { source }),
        "input" => Some(NodeKind::Input),
        "map" => check_map(n, path, p).map(NodeKind::Map),
        "filter" => check_filter(n.conditions.as_deref(), path, p)
            .map(|conditions| NodeKind::Filter { conditions }),
        "switch" => check_switch(n, path, p),
        "subflow" => check_subflow(n.flow.as_deref(), path, known, p),
        _ => named(&n.sink, "sink", known.sinks, path, p).map(|sink| NodeKind::Sink { sink }),
    };
    built.filter(|_| p.0.len() == before)
}

/// A `source` or `sink` name that must be one of `known`.
fn named<S: AsRef<str>>(
    value: &Option<String>,
    field: &str,
    known: &[S],
    path: &str,
    p: &mut Problems,
) -> Option<String> {
    let path = format!("{path}.{field}");
    let Some(name) = value.as_deref() else {
        p.push(path, "is required");
        return None;
    };
    if known.iter().any(|k| k.as_ref() == name) {
        return Some(name.to_string());
    }
    let list: Vec<&str> = known.iter().map(AsRef::as_ref).collect();
    let list = if list.is_empty() {
        "none configured".to_string()
    } else {
        list.join(", ")
    };
    p.push(path, format!("unknown {field} {name:?} (known: {list})"));
    None
}

fn check_subflow(
    flow: Option<&str>,
    path: &str,
    known: &Known<'_>,
    p: &mut Problems,
) -> Option<NodeKind> {
    let path = format!("{path}.flow");
    let Some(flow) = flow else {
        p.push(path, "is required");
        return None;
    };
    match known.flows.get(flow) {
        Some(true) => Some(NodeKind::Subflow {
            flow: flow.to_string(),
        }),
        Some(false) => {
            let msg = format!("flow {flow:?} has no input node, so it cannot be called");
            p.push(path, msg);
            None
        }
        None => {
            let mut ids: Vec<&str> = known.flows.keys().copied().collect();
            ids.sort_unstable();
            p.push(
                path,
                format!("unknown flow {flow:?} (known: {})", ids.join(", ")),
            );
            None
        }
    }
}

/// Shared by the tests of the flow room: validates `flows:` given as JSON.
#[cfg(test)]
pub(super) mod testing {
    use super::*;
    use serde_json::Value;

    /// Sources every test config knows.
    pub const SOURCES: [&str; 2] = ["webhook/stripe", "ingest/orders"];

    /// Errors and warnings as `path: message` lines, and the validated flows.
    pub fn check(flows: Value) -> (Vec<String>, Vec<String>, Vec<FlowConfig>) {
        let raw: Vec<RawFlow> = serde_json::from_value(flows).unwrap();
        let sources: Vec<String> = SOURCES.iter().map(|s| s.to_string()).collect();
        let mut p = Problems::default();
        let mut w = Vec::new();
        let out = validate_flows(Some(&raw), &sources, &["push", "storage"], &mut p, &mut w);
        let errors = p.0.iter().map(ToString::to_string).collect();
        (errors, w.iter().map(ToString::to_string).collect(), out)
    }

    /// Only the errors; panics when there are none.
    pub fn errors(flows: Value) -> Vec<String> {
        let (errors, _, out) = check(flows);
        assert!(!errors.is_empty() && out.is_empty());
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{check, errors};
    use serde_json::json;

    #[test]
    fn the_example_of_the_contract_validates_with_its_unwired_port_warnings() {
        let (errs, warns, flows) = check(json!([
            { "id": "payments", "nodes": [
                { "id": "in", "kind": "source", "source": "webhook/stripe" },
                { "id": "tag", "kind": "map",
                  "set": { "payload.site": "plant-3", "payload.ref": "{{key}}-{{payload.order}}" },
                  "rename": { "payload.amt": "payload.amount" }, "remove": ["payload.debug"] },
                { "id": "big", "kind": "filter",
                  "where": [{ "field": "payload.amount", "op": "gt", "value": 100 }] },
                { "id": "kind", "kind": "switch", "field": "payload.type", "cases": ["payment", "refund"] },
                { "id": "tail", "kind": "subflow", "flow": "common" },
                { "id": "keep", "kind": "sink", "sink": "storage" },
                { "id": "up", "kind": "sink", "sink": "push" }],
              "wires": [
                { "from": "in", "to": "tag" }, { "from": "tag", "to": "big" },
                { "from": "big", "to": "kind" }, { "from": "kind:0", "to": "keep" },
                { "from": "kind:1", "to": "up" }, { "from": "tag:error", "to": "keep" },
                { "from": "kind:else", "to": "tail" }] },
            { "id": "common", "nodes": [
                { "id": "entry", "kind": "input" }, { "id": "up", "kind": "sink", "sink": "push" }],
              "wires": [{ "from": "entry", "to": "up" }] }
        ]));
        assert!(errs.is_empty(), "{errs:?}");
        assert!(
            warns.is_empty(),
            "an unwired subflow port is fine: {warns:?}"
        );
        assert_eq!(flows.len(), 2);
        assert_eq!(flows[0].nodes.len(), 7);
        assert!(flows[0].uses_sink("storage") && !flows[1].uses_sink("storage"));
    }

    #[test]
    fn duplicate_flow_and_node_ids_are_refused_naming_the_first() {
        let errs = errors(json!([
            { "id": "a", "nodes": [
                { "id": "in", "kind": "source", "source": "webhook/stripe" },
                { "id": "in", "kind": "sink", "sink": "push" }],
              "wires": [{ "from": "in", "to": "in" }] },
            { "id": "a", "nodes": [{ "id": "x", "kind": "input" }] },
            { "id": "", "nodes": [{ "id": "x", "kind": "input" }] }
        ]));
        assert!(errs.contains(&r#"flows[1].id: duplicate flow id "a" (also flows[0])"#.to_string()));
        assert!(
            errs.contains(&"flows[2].id: must not be empty".to_string()),
            "{errs:?}"
        );
        assert!(errs.contains(
            &r#"flows[0].nodes[1].id: duplicate node id "in" (also nodes[0])"#.to_string()
        ));
    }

    #[test]
    fn unknown_sources_sinks_kinds_and_flows_name_the_known_ones() {
        let errs = errors(json!([{ "id": "f", "nodes": [
            { "id": "in", "kind": "source", "source": "webhook/strip" },
            { "id": "k", "kind": "sink", "sink": "kafka" },
            { "id": "x", "kind": "delay" },
            { "id": "s", "kind": "subflow", "flow": "nope" }] }]));
        assert_eq!(
            errs,
            [
                r#"flows[0].nodes[0].source: unknown source "webhook/strip" (known: webhook/stripe, ingest/orders)"#,
                r#"flows[0].nodes[1].sink: unknown sink "kafka" (known: push, storage)"#,
                r#"flows[0].nodes[2].kind: unknown kind "delay" (known: source, input, map, filter, switch, subflow, sink)"#,
                r#"flows[0].nodes[3].flow: unknown flow "nope" (known: f)"#,
            ]
        );
    }

    #[test]
    fn each_kind_needs_its_fields_and_no_fields_of_another_kind() {
        let errs = errors(json!([{ "id": "f", "nodes": [
            { "id": "a", "kind": "source" },
            { "id": "b", "kind": "sink" },
            { "id": "c", "kind": "subflow" },
            { "id": "d", "kind": "map" },
            { "id": "e", "kind": "filter" },
            { "id": "g", "kind": "switch" },
            { "id": "h", "kind": "input", "sink": "push", "cases": [1] },
            { "kind": "input" }] }]));
        assert_eq!(
            errs,
            [
                "flows[0].nodes[0].source: is required",
                "flows[0].nodes[1].sink: is required",
                "flows[0].nodes[2].flow: is required",
                "flows[0].nodes[3]: a map node needs set, rename or remove",
                "flows[0].nodes[4].where: is required",
                "flows[0].nodes[5].field: is required",
                "flows[0].nodes[5].cases: is required",
                "flows[0].nodes[6].sink: is not a field of an input node",
                "flows[0].nodes[6].cases: is not a field of an input node",
                "flows[0].nodes[7].id: is required",
            ]
        );
    }

    #[test]
    fn a_subflow_must_call_a_flow_with_an_input_node() {
        let errs = errors(json!([
            { "id": "a", "nodes": [
                { "id": "in", "kind": "source", "source": "ingest/orders" },
                { "id": "call", "kind": "subflow", "flow": "b" }],
              "wires": [{ "from": "in", "to": "call" }] },
            { "id": "b", "nodes": [{ "id": "in", "kind": "source", "source": "ingest/orders" }] }
        ]));
        assert_eq!(
            errs,
            [r#"flows[0].nodes[1].flow: flow "b" has no input node, so it cannot be called"#]
        );
    }

    #[test]
    fn no_flows_gives_no_flows_and_no_problems() {
        let mut p = crate::config::Problems::default();
        let mut w = Vec::new();
        assert!(super::validate_flows(None, &[], &["push"], &mut p, &mut w).is_empty());
        assert!(p.is_empty() && w.is_empty());
    }
}
