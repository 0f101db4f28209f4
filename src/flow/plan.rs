//! [`Plan`]: the validated flows compiled for the engine.
//!
//! Everything the engine asks per record is precomputed here: the entry nodes of each source,
//! the sinks each source can reach (admission runs before any node), and each port's targets.
//!
//! Reachable sinks follow every wire from the source's nodes, `error` wires included. A
//! `subflow` node on the way makes the answer conservative, as the spec says: every sink of that
//! flow, and every sink of each flow it calls, transitively.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::config::{FlowConfig, Node, NodeKind, Wire};
use super::{NodeRef, Port};

/// A node's kind for a [`NodeRef`] that is not from this plan.
static NO_KIND: NodeKind = NodeKind::Input;

/// The compiled flows.
#[derive(Debug, Default)]
pub struct Plan {
    flows: Vec<FlowPlan>,
    entries: HashMap<String, Vec<NodeRef>>,
    sinks: HashMap<String, Vec<String>>,
}

#[derive(Debug)]
struct FlowPlan {
    id: String,
    nodes: Vec<NodePlan>,
}

#[derive(Debug)]
struct NodePlan {
    id: String,
    kind: NodeKind,
    /// Targets of each numbered output port.
    outs: Vec<Vec<NodeRef>>,
    /// Targets of the `error` port.
    error: Vec<NodeRef>,
    /// For a subflow node: the called flow's input nodes.
    subflow_inputs: Vec<NodeRef>,
    /// For a subflow node: the called flow's index.
    calls: Option<usize>,
}

impl Plan {
    /// Compiles validated flows ([`super::validate_flows`]). Wires or subflow calls that do not
    /// resolve (impossible after validation) are left out rather than panicking.
    pub fn compile(flows: Vec<FlowConfig>) -> Plan {
        let index: HashMap<String, usize> = flows
            .iter()
            .enumerate()
            .rev()
            .map(|(i, f)| (f.id.clone(), i))
            .collect();
        let inputs: Vec<Vec<NodeRef>> = flows
            .iter()
            .enumerate()
            .map(|(fi, f)| {
                f.nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| matches!(n.kind, NodeKind::Input))
                    .map(|(node, _)| NodeRef { flow: fi, node })
                    .collect()
            })
            .collect();
        let mut plan = Plan::default();
        for (fi, f) in flows.into_iter().enumerate() {
            let FlowConfig { id, nodes, wires } = f;
            let count = nodes.len();
            let mut compiled: Vec<NodePlan> = nodes
                .into_iter()
                .map(|Node { id, kind }| {
                    let calls = match &kind {
                        NodeKind::Subflow { flow } => index.get(flow).copied(),
                        _ => None,
                    };
                    let subflow_inputs = calls
                        .and_then(|t| inputs.get(t))
                        .cloned()
                        .unwrap_or_default();
                    NodePlan {
                        outs: vec![Vec::new(); kind.out_ports()],
                        id,
                        kind,
                        error: Vec::new(),
                        subflow_inputs,
                        calls,
                    }
                })
                .collect();
            for Wire { from, port, to } in wires {
                if to >= count {
                    continue;
                }
                let target = NodeRef { flow: fi, node: to };
                let Some(n) = compiled.get_mut(from) else {
                    continue;
                };
                let list = match port {
                    Port::Error => Some(&mut n.error),
                    Port::Out(i) => n.outs.get_mut(i),
                };
                if let Some(list) = list {
                    list.push(target);
                }
            }
            for (node, n) in compiled.iter().enumerate() {
                if let NodeKind::Source { source } = &n.kind {
                    let r = NodeRef { flow: fi, node };
                    plan.entries.entry(source.clone()).or_default().push(r);
                }
            }
            plan.flows.push(FlowPlan {
                id,
                nodes: compiled,
            });
        }
        let sources: Vec<String> = plan.entries.keys().cloned().collect();
        for source in sources {
            let sinks = plan.compute_sinks(&source);
            plan.sinks.insert(source, sinks);
        }
        plan
    }

    /// Without `flows:`: each source wired straight to one sink node, in one flow `default`
    /// whose source nodes are named after their sources and whose sink node after the sink.
    pub fn direct(sources: &[String], sink: &str) -> Plan {
        Self::direct_to(&[(sink, sources)])
    }

    /// Without `flows:`, for several sinks: each sink of `routes` wired straight to the
    /// sources listed with it, in one flow `default` (source nodes named after their
    /// sources, sink nodes after their sinks; a source taken by several sinks goes to each).
    pub fn direct_to(routes: &[(&str, &[String])]) -> Plan {
        let mut nodes: Vec<Node> = routes
            .iter()
            .map(|(sink, _)| Node {
                id: (*sink).to_string(),
                kind: NodeKind::Sink {
                    sink: (*sink).to_string(),
                },
            })
            .collect();
        let sinks = nodes.len();
        let mut wires = Vec::new();
        for (to, (_, sources)) in routes.iter().enumerate() {
            for source in sources.iter() {
                let from = match nodes.iter().skip(sinks).position(|n| n.id == *source) {
                    Some(i) => sinks + i,
                    None => {
                        nodes.push(Node {
                            id: source.clone(),
                            kind: NodeKind::Source {
                                source: source.clone(),
                            },
                        });
                        nodes.len() - 1
                    }
                };
                if !wires.iter().any(|w: &Wire| w.from == from && w.to == to) {
                    wires.push(Wire {
                        from,
                        port: Port::Out(0),
                        to,
                    });
                }
            }
        }
        Plan::compile(vec![FlowConfig {
            id: DIRECT_FLOW.to_string(),
            nodes,
            wires,
        }])
    }

    /// The source nodes of `source`, in every flow; empty when no flow takes it (unrouted).
    pub fn entries(&self, source: &str) -> &[NodeRef] {
        self.entries.get(source).map_or(&[], Vec::as_slice)
    }

    /// The sinks records of `source` can reach: sorted, unique.
    pub fn reachable_sinks(&self, source: &str) -> &[String] {
        self.sinks.get(source).map_or(&[], Vec::as_slice)
    }

    /// The id of the node's flow ("" for a ref not from this plan).
    pub fn flow_id(&self, r: NodeRef) -> &str {
        self.flows.get(r.flow).map_or("", |f| f.id.as_str())
    }

    /// The node's id ("" for a ref not from this plan).
    pub fn node_id(&self, r: NodeRef) -> &str {
        self.node(r).map_or("", |n| n.id.as_str())
    }

    /// The node's kind (`Input` for a ref not from this plan: it only passes records on).
    pub fn kind(&self, r: NodeRef) -> &NodeKind {
        self.node(r).map_or(&NO_KIND, |n| &n.kind)
    }

    /// The nodes wired to a port; empty when it is unwired (or does not exist).
    pub fn targets(&self, r: NodeRef, port: Port) -> &[NodeRef] {
        let Some(n) = self.node(r) else { return &[] };
        match port {
            Port::Error => &n.error,
            Port::Out(i) => n.outs.get(i).map_or(&[], Vec::as_slice),
        }
    }

    /// For a subflow node: the input nodes of the flow it calls; empty for other nodes.
    pub fn subflow_inputs(&self, r: NodeRef) -> &[NodeRef] {
        self.node(r).map_or(&[], |n| n.subflow_inputs.as_slice())
    }

    /// The source nodes of `source` in one flow (dead-letter replay).
    pub fn flow_entries(&self, flow_id: &str, source: &str) -> Vec<NodeRef> {
        self.entries(source)
            .iter()
            .filter(|r| self.flow_id(**r) == flow_id)
            .copied()
            .collect()
    }

    /// The index of a flow by id.
    pub fn flow_index(&self, flow_id: &str) -> Option<usize> {
        self.flows.iter().position(|f| f.id == flow_id)
    }

    /// The number of flows.
    pub fn flow_count(&self) -> usize {
        self.flows.len()
    }

    fn node(&self, r: NodeRef) -> Option<&NodePlan> {
        self.flows.get(r.flow)?.nodes.get(r.node)
    }

    /// Sinks reached from every source node of `source` (see the module doc).
    fn compute_sinks(&self, source: &str) -> Vec<String> {
        let mut sinks = BTreeSet::new();
        let mut seen = HashSet::new();
        let mut todo: Vec<NodeRef> = self.entries(source).to_vec();
        let mut whole_flows: Vec<usize> = Vec::new();
        while let Some(r) = todo.pop() {
            if !seen.insert(r) {
                continue;
            }
            let Some(n) = self.node(r) else { continue };
            match &n.kind {
                NodeKind::Sink { sink } => {
                    sinks.insert(sink.clone());
                }
                NodeKind::Subflow { .. } => whole_flows.push(r.flow),
                _ => {}
            }
            todo.extend(n.outs.iter().flatten().chain(&n.error).copied());
        }
        let mut done = BTreeSet::new();
        while let Some(fi) = whole_flows.pop() {
            if !done.insert(fi) {
                continue;
            }
            for n in self.flows.get(fi).map_or(&[][..], |f| f.nodes.as_slice()) {
                if let NodeKind::Sink { sink } = &n.kind {
                    sinks.insert(sink.clone());
                }
                whole_flows.extend(n.calls);
            }
        }
        sinks.into_iter().collect()
    }
}

/// The id of the one flow of [`Plan::direct`].
pub const DIRECT_FLOW: &str = "default";

#[cfg(test)]
mod tests {
    use super::super::validate::testing::check;
    use super::*;
    use serde_json::{json, Value};

    fn compile(flows: Value) -> Plan {
        let (errs, _, flows) = check(flows);
        assert!(errs.is_empty(), "{errs:?}");
        Plan::compile(flows)
    }

    /// stripe → switch: case 0 → storage, else → push; orders → push.
    fn two_sources() -> Plan {
        compile(json!([
            { "id": "pay", "nodes": [
                { "id": "in", "kind": "source", "source": "webhook/stripe" },
                { "id": "sw", "kind": "switch", "field": "payload.t", "cases": ["a"] },
                { "id": "keep", "kind": "sink", "sink": "storage" },
                { "id": "up", "kind": "sink", "sink": "push" }],
              "wires": [
                { "from": "in", "to": "sw" }, { "from": "sw:0", "to": "keep" },
                { "from": "sw:else", "to": "keep" }, { "from": "sw:error", "to": "up" }] },
            { "id": "tele", "nodes": [
                { "id": "in", "kind": "source", "source": "ingest/orders" },
                { "id": "up", "kind": "sink", "sink": "push" }],
              "wires": [{ "from": "in", "to": "up" }] }
        ]))
    }

    #[test]
    fn reachable_sinks_follow_the_wires_of_each_source_error_wires_included() {
        let plan = two_sources();
        assert_eq!(plan.reachable_sinks("webhook/stripe"), ["push", "storage"]);
        assert_eq!(plan.reachable_sinks("ingest/orders"), ["push"]);
        assert!(plan.reachable_sinks("ingest/other").is_empty());
        assert!(plan.entries("ingest/other").is_empty());
    }

    #[test]
    fn a_source_reaches_only_its_own_sinks_without_subflows() {
        let plan = compile(json!([{ "id": "f", "nodes": [
            { "id": "a", "kind": "source", "source": "webhook/stripe" },
            { "id": "b", "kind": "source", "source": "ingest/orders" },
            { "id": "keep", "kind": "sink", "sink": "storage" },
            { "id": "up", "kind": "sink", "sink": "push" }],
            "wires": [{ "from": "a", "to": "keep" }, { "from": "b", "to": "up" }] }]));
        assert_eq!(plan.reachable_sinks("webhook/stripe"), ["storage"]);
        assert_eq!(plan.reachable_sinks("ingest/orders"), ["push"]);
    }

    #[test]
    fn a_subflow_on_the_way_reaches_every_sink_of_the_flow_and_of_the_called_flows() {
        let plan = compile(json!([
            { "id": "main", "nodes": [
                { "id": "in", "kind": "source", "source": "webhook/stripe" },
                { "id": "call", "kind": "subflow", "flow": "mid" },
                { "id": "keep", "kind": "sink", "sink": "storage" },
                { "id": "other", "kind": "source", "source": "ingest/orders" },
                { "id": "up", "kind": "sink", "sink": "push" }],
              "wires": [
                { "from": "in", "to": "call" }, { "from": "call", "to": "keep" },
                { "from": "other", "to": "up" }] },
            { "id": "mid", "nodes": [
                { "id": "entry", "kind": "input" },
                { "id": "deeper", "kind": "subflow", "flow": "last" }],
              "wires": [{ "from": "entry", "to": "deeper" }] },
            { "id": "last", "nodes": [
                { "id": "entry", "kind": "input" },
                { "id": "out", "kind": "sink", "sink": "push" }],
              "wires": [{ "from": "entry", "to": "out" }] }
        ]));
        // `up` is not on stripe's path, but the subflow makes the answer the whole flow's.
        assert_eq!(plan.reachable_sinks("webhook/stripe"), ["push", "storage"]);
        assert_eq!(plan.reachable_sinks("ingest/orders"), ["push"]);
        let call = NodeRef { flow: 0, node: 1 };
        assert_eq!(plan.subflow_inputs(call), [NodeRef { flow: 1, node: 0 }]);
        assert!(plan.subflow_inputs(NodeRef { flow: 0, node: 0 }).is_empty());
        assert_eq!(
            plan.targets(call, Port::Out(0)),
            [NodeRef { flow: 0, node: 2 }]
        );
    }

    #[test]
    fn the_direct_plan_wires_each_source_to_the_one_sink() {
        let sources = [
            "ingest/a".to_string(),
            "webhook/b".into(),
            "ingest/a".into(),
        ];
        let plan = Plan::direct(&sources, "push");
        assert_eq!(plan.flow_count(), 1);
        for source in ["ingest/a", "webhook/b"] {
            let entries = plan.entries(source);
            assert_eq!(entries.len(), 1);
            assert_eq!(plan.flow_id(entries[0]), DIRECT_FLOW);
            assert_eq!(plan.node_id(entries[0]), source);
            assert_eq!(plan.reachable_sinks(source), ["push"]);
            let to = plan.targets(entries[0], Port::Out(0));
            assert!(matches!(plan.kind(to[0]), NodeKind::Sink { sink } if sink == "push"));
            assert_eq!(plan.flow_entries(DIRECT_FLOW, source), entries);
        }
        assert!(Plan::direct(&[], "push").entries("ingest/a").is_empty());
    }

    #[test]
    fn lookups_answer_per_flow_and_never_panic_on_foreign_refs() {
        let plan = two_sources();
        let sw = NodeRef { flow: 0, node: 1 };
        assert_eq!(plan.flow_id(sw), "pay");
        assert_eq!(plan.node_id(sw), "sw");
        assert_eq!(
            plan.targets(sw, Port::Out(0)),
            [NodeRef { flow: 0, node: 2 }]
        );
        assert_eq!(
            plan.targets(sw, Port::Out(1)),
            [NodeRef { flow: 0, node: 2 }]
        );
        assert_eq!(
            plan.targets(sw, Port::Error),
            [NodeRef { flow: 0, node: 3 }]
        );
        assert!(plan.targets(sw, Port::Out(2)).is_empty());
        assert_eq!(
            plan.flow_entries("tele", "ingest/orders"),
            [NodeRef { flow: 1, node: 0 }]
        );
        assert!(plan.flow_entries("pay", "ingest/orders").is_empty());
        assert_eq!(plan.flow_index("tele"), Some(1));
        assert_eq!(plan.flow_index("nope"), None);
        let foreign = NodeRef { flow: 9, node: 9 };
        assert_eq!((plan.flow_id(foreign), plan.node_id(foreign)), ("", ""));
        assert!(plan.targets(foreign, Port::Error).is_empty());
        assert!(plan.subflow_inputs(foreign).is_empty());
        assert!(matches!(plan.kind(foreign), NodeKind::Input));
    }
}
