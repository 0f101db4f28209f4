//! The wires of a flow: each resolved to a node, one of its ports, and a node it may enter;
//! then the flow's shape is checked (`shape`), and each output port left unwired is a warning.
//!
//! A node whose own checks failed still takes part (by its id), so one typo gives one error,
//! not a cascade; the reachability check is skipped in a flow with unresolved wires or wrong
//! nodes for the same reason.

use std::collections::HashMap;

use super::config::{NodeKind, RawFlow, Wire};
use super::shape::{check_cycles, check_reachable};
use super::validate::Checked;
use super::Port;
use crate::config::{Problem, Problems};

/// Resolves and checks the wires of one flow, then its graph.
pub(super) fn check_flow(
    f: &RawFlow,
    flow_id: &str,
    nodes: &[Checked],
    path: &str,
    p: &mut Problems,
    warnings: &mut Vec<Problem>,
) -> Vec<Wire> {
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (j, n) in nodes.iter().enumerate() {
        if let Some(id) = n.id.as_deref() {
            index.entry(id).or_insert(j);
        }
    }
    let mut wires: Vec<(usize, Wire)> = Vec::new();
    let mut complete = nodes.iter().all(|n| n.id.is_some() && n.kind.is_some());
    for (w, raw) in f.wires.iter().flatten().enumerate() {
        let at = format!("{path}.wires[{w}]");
        let from = resolve_from(raw.from.as_deref(), &index, nodes, &at, p);
        let to = resolve_to(raw.to.as_deref(), &index, nodes, &at, p);
        let (Some((from, port)), Some(to)) = (from, to) else {
            complete = false;
            continue;
        };
        let wire = Wire { from, port, to };
        if let Some((first, _)) = wires.iter().find(|(_, x)| *x == wire) {
            p.push(at, format!("same wire as wires[{first}]"));
            continue;
        }
        wires.push((w, wire));
    }
    check_cycles(flow_id, nodes, &wires, path, p);
    if complete {
        check_reachable(flow_id, nodes, &wires, path, p);
    }
    for (j, n) in nodes.iter().enumerate() {
        let Some(kind) = &n.kind else { continue };
        // A subflow's port 0 is optional: the called flow already handles the record.
        if matches!(kind, NodeKind::Subflow { .. }) {
            continue;
        }
        for port in (0..kind.out_ports()).map(Port::Out) {
            if !wires.iter().any(|(_, x)| x.from == j && x.port == port) {
                warnings.push(Problem {
                    path: format!("{path}.nodes[{j}]"),
                    message: format!("output port {} is not wired", kind.port_name(port)),
                });
            }
        }
    }
    wires.into_iter().map(|(_, wire)| wire).collect()
}

fn resolve_from(
    from: Option<&str>,
    index: &HashMap<&str, usize>,
    nodes: &[Checked],
    at: &str,
    p: &mut Problems,
) -> Option<(usize, Port)> {
    let at = format!("{at}.from");
    let Some(from) = from else {
        p.push(at, "is required");
        return None;
    };
    let (name, port) = match from.split_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (from, None),
    };
    let Some(&j) = index.get(name) else {
        p.push(at, format!("unknown node {name:?}"));
        return None;
    };
    // A node whose own checks failed has no known ports: its own error is reported.
    let kind = nodes.get(j)?.kind.as_ref()?;
    let port = match (kind, port) {
        (_, Some("error")) => Some(Port::Error),
        (NodeKind::Switch { cases, .. }, Some("else")) => Some(Port::Out(cases.len())),
        (NodeKind::Sink { .. }, None) => None,
        (_, None) => Some(Port::Out(0)),
        (NodeKind::Switch { cases, .. }, Some(n)) => n
            .parse::<usize>()
            .ok()
            .filter(|n| *n < cases.len())
            .map(Port::Out),
        (_, Some("0")) if kind.out_ports() > 0 => Some(Port::Out(0)),
        _ => None,
    };
    if port.is_none() {
        let ports = match kind {
            NodeKind::Switch { cases, .. } if cases.len() > 1 => {
                format!("0..{}, else, error", cases.len() - 1)
            }
            NodeKind::Switch { .. } => "0, else, error".to_string(),
            NodeKind::Sink { .. } => "error".to_string(),
            _ => "0, error".to_string(),
        };
        let shown = port_text(from);
        p.push(
            at,
            format!(
                "unknown port {shown} of {} node {name:?} (ports: {ports})",
                kind.name()
            ),
        );
    }
    port.map(|port| (j, port))
}

fn port_text(from: &str) -> String {
    match from.split_once(':') {
        Some((_, port)) => format!("{port:?}"),
        None => "0".to_string(),
    }
}

fn resolve_to(
    to: Option<&str>,
    index: &HashMap<&str, usize>,
    nodes: &[Checked],
    at: &str,
    p: &mut Problems,
) -> Option<usize> {
    let at = format!("{at}.to");
    let Some(to) = to else {
        p.push(at, "is required");
        return None;
    };
    if to.contains(':') {
        p.push(at, format!("{to:?}: a wire enters a node, not a port"));
        return None;
    }
    let Some(&j) = index.get(to) else {
        p.push(at, format!("unknown node {to:?}"));
        return None;
    };
    if let Some(kind) = nodes.get(j).and_then(|n| n.kind.as_ref()) {
        if kind.is_entry() {
            let msg = format!("{to:?} is {} node: no wire may enter it", article(kind));
            p.push(at, msg);
            return None;
        }
    }
    Some(j)
}

fn article(kind: &NodeKind) -> &'static str {
    match kind {
        NodeKind::Input => "an input",
        _ => "a source",
    }
}

pub(super) fn node_name(nodes: &[Checked], j: usize) -> &str {
    nodes.get(j).and_then(|n| n.id.as_deref()).unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::super::validate::testing::{check, errors};
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
    fn unknown_nodes_in_wires_are_refused_without_a_cascade() {
        let errs = errors(flow(
            basic_nodes(),
            json!([
                { "from": "in", "to": "tga" },
                { "from": "tga", "to": "kind" },
                { "from": "kind", "to": "up" },
                { "to": "up" },
                { "from": "kind:1", "to": "up:error" }
            ]),
        ));
        assert_eq!(
            errs,
            [
                r#"flows[0].wires[0].to: unknown node "tga""#,
                r#"flows[0].wires[1].from: unknown node "tga""#,
                "flows[0].wires[3].from: is required",
                r#"flows[0].wires[4].to: "up:error": a wire enters a node, not a port"#,
            ]
        );
    }

    #[test]
    fn unknown_ports_name_the_ports_of_the_node() {
        let errs = errors(flow(
            basic_nodes(),
            json!([
                { "from": "in", "to": "tag" },
                { "from": "tag:1", "to": "kind" },
                { "from": "tag:else", "to": "kind" },
                { "from": "kind:2", "to": "up" },
                { "from": "up", "to": "kind" },
                { "from": "up:0", "to": "kind" },
                { "from": "tag", "to": "in" },
                { "from": "tag", "to": "kind" },
                { "from": "kind:0", "to": "up" },
                { "from": "kind:0", "to": "up" }
            ]),
        ));
        assert_eq!(
            errs,
            [
                r#"flows[0].wires[1].from: unknown port "1" of map node "tag" (ports: 0, error)"#,
                r#"flows[0].wires[2].from: unknown port "else" of map node "tag" (ports: 0, error)"#,
                r#"flows[0].wires[3].from: unknown port "2" of switch node "kind" (ports: 0..1, else, error)"#,
                r#"flows[0].wires[4].from: unknown port 0 of sink node "up" (ports: error)"#,
                r#"flows[0].wires[5].from: unknown port "0" of sink node "up" (ports: error)"#,
                r#"flows[0].wires[6].to: "in" is a source node: no wire may enter it"#,
                "flows[0].wires[9]: same wire as wires[8]",
            ]
        );
    }

    #[test]
    fn every_unwired_output_port_is_a_warning_not_an_error() {
        let (errs, warns, flows) = check(flow(
            basic_nodes(),
            json!([
                { "from": "in", "to": "tag" },
                { "from": "tag", "to": "kind" },
                { "from": "kind:1", "to": "up" },
                { "from": "kind:error", "to": "up" }
            ]),
        ));
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(flows.len(), 1);
        assert_eq!(
            warns,
            [
                "flows[0].nodes[2]: output port 0 is not wired",
                "flows[0].nodes[2]: output port else is not wired",
            ]
        );
    }
}
