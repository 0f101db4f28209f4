//! The shape of a flow graph: no cycle inside a flow (error wires included) nor across
//! subflow calls, and every node reachable from an entry node of its flow. Both walks are
//! iterative: no config can make them overflow the stack.

use std::collections::{HashMap, HashSet};

use super::config::{NodeKind, Wire};
use super::graph::node_name;
use super::validate::Checked;
use crate::config::Problems;

/// Every wire that closes a cycle is an error at that wire, naming a node on the cycle.
pub(super) fn check_cycles(
    flow_id: &str,
    nodes: &[Checked],
    wires: &[(usize, Wire)],
    path: &str,
    p: &mut Problems,
) {
    let mut edges: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nodes.len()];
    for (w, wire) in wires {
        if let Some(out) = edges.get_mut(wire.from) {
            out.push((*w, wire.to));
        }
    }
    back_edges(&edges, |_, w, to| {
        p.push(
            format!("{path}.wires[{w}]"),
            format!(
                "closes a cycle in flow {flow_id:?} through node {:?}",
                node_name(nodes, to)
            ),
        )
    });
}

pub(super) fn check_reachable(
    flow_id: &str,
    nodes: &[Checked],
    wires: &[(usize, Wire)],
    path: &str,
    p: &mut Problems,
) {
    let is_entry = |n: &Checked| n.kind.as_ref().is_some_and(NodeKind::is_entry);
    let mut todo: Vec<usize> = (0..nodes.len())
        .filter(|&j| nodes.get(j).is_some_and(is_entry))
        .collect();
    if todo.is_empty() {
        let msg = format!("flow {flow_id:?} has no source or input node");
        p.push(format!("{path}.nodes"), msg);
        return;
    }
    let mut seen: HashSet<usize> = todo.iter().copied().collect();
    while let Some(j) = todo.pop() {
        for (_, wire) in wires.iter().filter(|(_, w)| w.from == j) {
            if seen.insert(wire.to) {
                todo.push(wire.to);
            }
        }
    }
    for j in (0..nodes.len()).filter(|j| !seen.contains(j)) {
        let msg = format!(
            "node {:?} is not reachable from any source or input node of flow {flow_id:?}",
            node_name(nodes, j)
        );
        p.push(format!("{path}.nodes[{j}]"), msg);
    }
}

/// Flow A calls flow B when A has a subflow node naming B; a cycle of calls is an error at
/// the subflow node that closes it.
pub(super) fn check_subflow_cycles(flows: &[(String, Vec<Checked>, Vec<Wire>)], p: &mut Problems) {
    let index: HashMap<&str, usize> = flows
        .iter()
        .enumerate()
        .filter(|(_, (id, _, _))| !id.is_empty())
        .map(|(i, (id, _, _))| (id.as_str(), i))
        .collect();
    // calls[i] = (node index, called flow index)
    let calls: Vec<Vec<(usize, usize)>> = flows
        .iter()
        .map(|(_, nodes, _)| {
            nodes
                .iter()
                .enumerate()
                .filter_map(|(j, n)| match &n.kind {
                    Some(NodeKind::Subflow { flow }) => Some((j, *index.get(flow.as_str())?)),
                    _ => None,
                })
                .collect()
        })
        .collect();
    back_edges(&calls, |on_path, node, to| {
        let Some(&flow) = on_path.last() else { return };
        let first = on_path.iter().position(|f| *f == to).unwrap_or(0);
        let name = |f: usize| flows.get(f).map_or("?", |x| x.0.as_str());
        let mut chain: Vec<&str> = on_path.iter().skip(first).map(|f| name(*f)).collect();
        chain.push(name(to));
        let node_id = flows.get(flow).map_or("?", |x| node_name(&x.1, node));
        p.push(
            format!("flows[{flow}].nodes[{node}].flow"),
            format!(
                "subflow cycle through flow {:?}, node {node_id:?}: {}",
                name(flow),
                chain.join(" → ")
            ),
        );
    });
}

/// An iterative depth-first search over `edges` (`edges[v]` lists `(label, target)`): calls
/// `found(path, label, target)` for every edge that closes a cycle, `path` being the vertices
/// from the search's start to the edge's source. Iterative, so no config overflows the stack.
fn back_edges(edges: &[Vec<(usize, usize)>], mut found: impl FnMut(&[usize], usize, usize)) {
    #[derive(Clone, Copy, PartialEq)]
    enum Seen {
        No,
        OnPath,
        Done,
    }
    let mut seen = vec![Seen::No; edges.len()];
    let mark = |seen: &mut [Seen], v: usize, s: Seen| {
        if let Some(x) = seen.get_mut(v) {
            *x = s;
        }
    };
    for start in 0..edges.len() {
        if seen.get(start) != Some(&Seen::No) {
            continue;
        }
        mark(&mut seen, start, Seen::OnPath);
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        while let Some(&mut (v, ref mut next)) = stack.last_mut() {
            let Some(&(label, to)) = edges.get(v).and_then(|e| e.get(*next)) else {
                mark(&mut seen, v, Seen::Done);
                stack.pop();
                continue;
            };
            *next += 1;
            match seen.get(to) {
                Some(Seen::No) => {
                    mark(&mut seen, to, Seen::OnPath);
                    stack.push((to, 0));
                }
                Some(Seen::OnPath) => {
                    let path: Vec<usize> = stack.iter().map(|(v, _)| *v).collect();
                    found(&path, label, to);
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::validate::testing::{check, errors};
    use crate::flow::{run_node, NodeRef, Plan, Port};
    use crate::record::Record;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn flow(nodes: Value, wires: Value) -> Value {
        json!([{ "id": "f", "nodes": nodes, "wires": wires }])
    }

    fn basic_nodes() -> Value {
        json!([
            { "id": "in", "kind": "source", "source": "webhook/stripe" },
            { "id": "tag", "kind": "map", "set": { "payload.a": 1 } },
            { "id": "kind", "kind": "switch", "field": "payload.t", "cases": ["a", "b"] },
            { "id": "up", "kind": "sink", "sink": "push" }
        ])
    }

    #[test]
    fn a_cycle_through_an_error_wire_is_refused_naming_flow_and_node() {
        let errs = errors(flow(
            basic_nodes(),
            json!([
                { "from": "in", "to": "tag" },
                { "from": "tag", "to": "kind" },
                { "from": "kind:0", "to": "up" },
                { "from": "kind:1", "to": "up" },
                { "from": "kind:else", "to": "up" },
                { "from": "up:error", "to": "tag" }
            ]),
        ));
        assert_eq!(
            errs,
            [r#"flows[0].wires[5]: closes a cycle in flow "f" through node "tag""#]
        );
    }

    #[test]
    fn a_cycle_across_subflows_is_refused_naming_flow_and_node() {
        let errs = errors(json!([
            { "id": "a", "nodes": [
                { "id": "in", "kind": "source", "source": "ingest/orders" },
                { "id": "to-b", "kind": "subflow", "flow": "b" }],
              "wires": [{ "from": "in", "to": "to-b" }] },
            { "id": "b", "nodes": [
                { "id": "entry", "kind": "input" },
                { "id": "to-c", "kind": "subflow", "flow": "c" }],
              "wires": [{ "from": "entry", "to": "to-c" }] },
            { "id": "c", "nodes": [
                { "id": "entry", "kind": "input" },
                { "id": "back", "kind": "subflow", "flow": "b" }],
              "wires": [{ "from": "entry", "to": "back" }] }
        ]));
        assert_eq!(
            errs,
            [r#"flows[2].nodes[1].flow: subflow cycle through flow "c", node "back": b → c → b"#]
        );
        let errs = errors(json!([{ "id": "a", "nodes": [
            { "id": "entry", "kind": "input" },
            { "id": "self", "kind": "subflow", "flow": "a" }],
            "wires": [{ "from": "entry", "to": "self" }] }]));
        assert_eq!(
            errs,
            [r#"flows[0].nodes[1].flow: subflow cycle through flow "a", node "self": a → a"#]
        );
    }

    #[test]
    fn nodes_unreachable_from_an_entry_node_are_refused() {
        let errs = errors(flow(
            basic_nodes(),
            json!([{ "from": "in", "to": "up" }, { "from": "tag", "to": "kind" }]),
        ));
        assert_eq!(
            errs,
            [
                r#"flows[0].nodes[1]: node "tag" is not reachable from any source or input node of flow "f""#,
                r#"flows[0].nodes[2]: node "kind" is not reachable from any source or input node of flow "f""#,
            ]
        );
        let errs = errors(flow(
            json!([{ "id": "up", "kind": "sink", "sink": "push" }]),
            json!([]),
        ));
        assert_eq!(
            errs,
            [r#"flows[0].nodes: flow "f" has no source or input node"#]
        );
    }

    /// Any flows built from these parts: ids that repeat, kinds and wires that may be wrong.
    fn any_flows() -> impl Strategy<Value = Value> {
        let node = (0..5usize, 0..9usize, 0..4usize).prop_map(|(id, kind, pick)| {
            let ids = ["a", "b", "c", "d", ""];
            let mut n = json!({ "id": Value::from(ids[id]) });
            let (kind, field, value) = match kind {
                0 => (
                    "source",
                    "source",
                    Value::from(["webhook/stripe", "ingest/orders", "x/y", "webhook/stripe"][pick]),
                ),
                1 => ("input", "", Value::Null),
                2 => (
                    "map",
                    "set",
                    json!({ "payload.a": "{{payload.b}}", "key": "{{payload.c.0}}" }),
                ),
                3 => (
                    "filter",
                    "where",
                    json!([{ "field": "payload.a", "op": "gt", "value": 1 }]),
                ),
                4 => (
                    "switch",
                    "cases",
                    Value::from(
                        json!(["x", 1, null, []])
                            .as_array()
                            .map_or(vec![], |c| c[..pick].to_vec()),
                    ),
                ),
                5 => ("subflow", "flow", Value::from(["f", "g", "h", ""][pick])),
                6 => (
                    "sink",
                    "sink",
                    Value::from(["push", "storage", "kafka", "push"][pick]),
                ),
                7 => ("delay", "", Value::Null),
                _ => ("map", "rename", json!({ "payload.b": "payload.z" })),
            };
            n["kind"] = json!(kind);
            if !field.is_empty() {
                n[field] = value;
            }
            if kind == "switch" {
                n["field"] = json!("payload.a");
            }
            n
        });
        let ends = [
            "a", "b", "c", "d", "a:error", "b:0", "c:1", "d:else", "x", "a:9",
        ];
        let wire = (0..ends.len(), 0..ends.len())
            .prop_map(move |(f, t)| json!({ "from": ends[f], "to": ends[t] }));
        let flow = (0..3usize, vec(node, 0..6), vec(wire, 0..8))
            .prop_map(|(id, nodes, wires)| json!({ "id": Value::from(["f", "g", "h"][id]), "nodes": nodes, "wires": wires }));
        vec(flow, 0..4).prop_map(Value::Array)
    }

    /// Mostly valid flows: a chain `source → middle nodes → sink` in `f`, calling `g`
    /// (`input → sink`), with extra error wires that may go back and close a cycle.
    fn chain_flows() -> impl Strategy<Value = Value> {
        let extra = vec((0..6usize, 0..6usize), 0..3);
        (vec(0..4usize, 0..5), extra).prop_map(|(kinds, extra)| {
            let mut nodes = vec![json!({ "id": "n0", "kind": "source", "source": "webhook/stripe" })];
            let mut wires = Vec::new();
            for (i, k) in kinds.iter().enumerate() {
                let id = format!("n{}", i + 1);
                nodes.push(match k {
                    0 => json!({ "id": id, "kind": "map", "set": { "payload.t": "{{payload.b.0}}" } }),
                    1 => json!({ "id": id, "kind": "filter", "where": [{ "field": "payload.t", "op": "exists" }] }),
                    2 => json!({ "id": id, "kind": "switch", "field": "payload.t", "cases": [1] }),
                    _ => json!({ "id": id, "kind": "subflow", "flow": "g" }),
                });
            }
            let last = nodes.len();
            nodes.push(json!({ "id": format!("n{last}"), "kind": "sink", "sink": "storage" }));
            for i in 0..last {
                let (from, to) = (format!("n{i}"), format!("n{}", i + 1));
                wires.push(json!({ "from": from.clone(), "to": to.clone() }));
                if i > 0 && kinds.get(i - 1) == Some(&2) {
                    wires.push(json!({ "from": format!("{from}:else"), "to": to }));
                }
            }
            for (a, b) in extra {
                if a.max(b) <= last && a != 0 && b != 0 {
                    wires.push(json!({ "from": format!("n{a}:error"), "to": format!("n{b}") }));
                }
            }
            json!([
                { "id": "f", "nodes": nodes, "wires": wires },
                { "id": "g", "nodes": [
                    { "id": "in", "kind": "input" }, { "id": "up", "kind": "sink", "sink": "push" }],
                  "wires": [{ "from": "in", "to": "up" }] }
            ])
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn validation_compilation_and_nodes_never_panic_on_any_flows(
            flows in prop_oneof![any_flows(), chain_flows()]
        ) {
            let (errs, _, valid) = check(flows);
            if !errs.is_empty() {
                prop_assert!(valid.is_empty());
            }
            let plan = Plan::compile(valid.clone());
            for source in ["webhook/stripe", "ingest/orders"] {
                for r in plan.entries(source) {
                    prop_assert_eq!(plan.kind(*r).name(), "source");
                    prop_assert!(!plan.flow_entries(plan.flow_id(*r), source).is_empty());
                }
                let sinks = plan.reachable_sinks(source);
                prop_assert!(sinks.windows(2).all(|w| w[0] < w[1]));
            }
            for (fi, f) in valid.iter().enumerate() {
                for (ni, n) in f.nodes.iter().enumerate() {
                    let r = NodeRef { flow: fi, node: ni };
                    for port in (0..n.kind.out_ports() + 1).map(Port::Out).chain([Port::Error]) {
                        for t in plan.targets(r, port) {
                            prop_assert!(!plan.kind(*t).is_entry());
                        }
                    }
                    let rec = Record::from_value("webhook/stripe", "k", &json!({"b": [1], "c": "x"}));
                    let _ = run_node(&n.kind, &mut std::borrow::Cow::Owned(rec));
                }
            }
        }
    }
}
