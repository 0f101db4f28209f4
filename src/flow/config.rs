//! `flows:` as written (raw structs, every field optional) and as validated ([`FlowConfig`]).
//!
//! The doc comment of each raw field is the user documentation of that key. Unknown keys are
//! reported by the config parser; [`validate_flows`] checks everything else.

use serde::Deserialize;
use serde_json::Value;

use super::path::{FieldPath, Template};
use super::Port;

pub use super::validate::validate_flows;

/// One entry of `flows:`: a graph of nodes joined by wires.
#[derive(Debug, Default, Deserialize)]
pub struct RawFlow {
    /// Unique name of the flow; `subflow` nodes and the dead-letter queue name flows by it.
    pub id: Option<String>,
    /// The nodes; each has an `id` unique in the flow and a `kind`.
    pub nodes: Option<Vec<RawNode>>,
    /// The wires: `{from: "node" | "node:port", to: "node"}`. `node` alone is port 0; every
    /// node has an `error` port; a switch has ports `0`..`n-1` (one per case) and `else`.
    pub wires: Option<Vec<RawWire>>,
}

/// One node of a flow. Which fields apply depends on `kind`.
#[derive(Debug, Default, Deserialize)]
pub struct RawNode {
    /// Name of the node, unique in its flow; wires and dead letters name it. No `:` in it.
    pub id: Option<String>,
    /// `source`, `input`, `map`, `filter`, `switch`, `subflow` or `sink`.
    pub kind: Option<String>,
    /// `source` nodes: the configured source whose records enter here, e.g. `webhook/stripe`,
    /// `ingest/orders`.
    pub source: Option<String>,
    /// `subflow` nodes: the id of the flow the record (a copy) enters, through that flow's
    /// `input` nodes. The subflow node also passes the record on, unchanged, on its port 0.
    pub flow: Option<String>,
    /// `sink` nodes: where the record is handed over: `push` or `storage`.
    pub sink: Option<String>,
    /// `map` nodes: `path: value` to write, in the order written. Paths: `payload`,
    /// `payload.a.b`, `payload.list.0`, `key`. A string value may hold `{{path}}` references to
    /// the record (rendered to text); a string that is exactly one `{{path}}` keeps the
    /// referenced value's type. A missing referenced field fails the node.
    pub set: Option<Value>,
    /// `map` nodes: `from: to` paths to move, after `set`, in the order written. A missing
    /// `from` fails the node.
    pub rename: Option<Value>,
    /// `map` nodes: paths to delete, after `rename`. A missing one is not an error.
    pub remove: Option<Vec<String>>,
    /// `filter` nodes: conditions that must all hold for the record to go on (port 0);
    /// otherwise it is filtered out (counted, not an error).
    #[serde(rename = "where")]
    pub conditions: Option<Vec<RawCondition>>,
    /// `switch` nodes: the path whose value picks the port.
    pub field: Option<String>,
    /// `switch` nodes: list of values; the record leaves on the port of the first case equal to
    /// `field` (`0`, `1`, ...), or on `else` when none is.
    pub cases: Option<Value>,
}

/// One wire of a flow.
#[derive(Debug, Default, Deserialize)]
pub struct RawWire {
    /// The node and port the record leaves: `node` (port 0), `node:1`, `node:else`,
    /// `node:error`.
    pub from: Option<String>,
    /// The node the record enters. Not a `source` or `input` node.
    pub to: Option<String>,
}

/// One condition of a `filter` node.
#[derive(Debug, Default, Deserialize)]
pub struct RawCondition {
    /// The path to test, e.g. `payload.amount`.
    pub field: Option<String>,
    /// `eq`, `ne`, `gt`, `ge`, `lt`, `le` (numbers with numbers, strings with strings; any
    /// other pair does not hold), `exists`, `missing`, `contains` (text contains text, or a
    /// list contains the value), `in` (the field equals one value of a list).
    pub op: Option<String>,
    /// What the field is compared with; not given for `exists` and `missing`; a list for `in`.
    pub value: Option<Value>,
}

/// A validated flow; node and wire indexes are those of the config.
#[derive(Debug, Clone)]
pub struct FlowConfig {
    /// The flow's id.
    pub id: String,
    /// The nodes, in config order.
    pub nodes: Vec<Node>,
    /// The wires, in config order, resolved to node indexes.
    pub wires: Vec<Wire>,
}

impl FlowConfig {
    /// True when a `sink` node of this flow names `sink`.
    pub fn uses_sink(&self, sink: &str) -> bool {
        self.nodes
            .iter()
            .any(|n| matches!(&n.kind, NodeKind::Sink { sink: s } if s == sink))
    }
}

/// A validated node.
#[derive(Debug, Clone)]
pub struct Node {
    /// Its id, unique in the flow.
    pub id: String,
    /// What it does.
    pub kind: NodeKind,
}

/// A validated wire: `nodes[from]` port `port` → `nodes[to]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wire {
    /// Index of the node the record leaves.
    pub from: usize,
    /// The port it leaves on.
    pub port: Port,
    /// Index of the node it enters.
    pub to: usize,
}

/// What a node does.
#[derive(Debug, Clone)]
pub enum NodeKind {
    /// Records of this source enter the flow here.
    Source {
        /// The source's name, e.g. `webhook/stripe`.
        source: String,
    },
    /// Records enter here when another flow calls this one as a subflow.
    Input,
    /// Writes, renames and removes fields.
    Map(MapSpec),
    /// Keeps records for which every condition holds.
    Filter {
        /// All must hold.
        conditions: Vec<Condition>,
    },
    /// Picks an output port by a field's value.
    Switch {
        /// The field tested.
        field: FieldPath,
        /// Port `i` for the first case equal to the field; port `cases.len()` is `else`.
        cases: Vec<Value>,
    },
    /// Hands a copy to another flow's input nodes, and passes the record on at port 0.
    Subflow {
        /// The called flow's id.
        flow: String,
    },
    /// Hands the record to a sink; run by the engine.
    Sink {
        /// The sink's name: `push`, `storage`.
        sink: String,
    },
}

impl NodeKind {
    /// The kind's name as configured.
    pub fn name(&self) -> &'static str {
        match self {
            NodeKind::Source { .. } => "source",
            NodeKind::Input => "input",
            NodeKind::Map(_) => "map",
            NodeKind::Filter { .. } => "filter",
            NodeKind::Switch { .. } => "switch",
            NodeKind::Subflow { .. } => "subflow",
            NodeKind::Sink { .. } => "sink",
        }
    }

    /// How many numbered output ports the node has (besides `error`): a switch has one per
    /// case plus `else`, a sink none, every other kind one.
    pub fn out_ports(&self) -> usize {
        match self {
            NodeKind::Switch { cases, .. } => cases.len() + 1,
            NodeKind::Sink { .. } => 0,
            _ => 1,
        }
    }

    /// The name of an output port as a wire writes it: `0`, `else`, `error`.
    pub fn port_name(&self, port: Port) -> String {
        match (self, port) {
            (_, Port::Error) => "error".to_string(),
            (NodeKind::Switch { cases, .. }, Port::Out(n)) if n == cases.len() => "else".into(),
            (_, Port::Out(n)) => n.to_string(),
        }
    }

    /// True for the nodes records enter a flow by: `source` and `input`.
    pub fn is_entry(&self) -> bool {
        matches!(self, NodeKind::Source { .. } | NodeKind::Input)
    }
}

/// What a `map` node does, applied in this order: set, rename, remove.
#[derive(Debug, Clone, Default)]
pub struct MapSpec {
    /// Paths to write, in the order written.
    pub set: Vec<(FieldPath, Template)>,
    /// `(from, to)` moves, in order.
    pub rename: Vec<(FieldPath, FieldPath)>,
    /// Paths to delete, in order.
    pub remove: Vec<FieldPath>,
}

/// One condition of a filter.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// The field tested.
    pub field: FieldPath,
    /// The comparison.
    pub op: Op,
    /// The value compared with (`Null` for `exists` / `missing`, a list for `in`).
    pub value: Value,
}

/// A filter comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Equal (same JSON type; numbers by value).
    Eq,
    /// Not equal (same JSON type).
    Ne,
    /// Greater than (numbers or strings).
    Gt,
    /// Greater or equal.
    Ge,
    /// Less than.
    Lt,
    /// Less or equal.
    Le,
    /// The field is there (`null` counts as there).
    Exists,
    /// The field is not there.
    Missing,
    /// Text contains text, or a list contains an equal element.
    Contains,
    /// The field equals one element of the list `value`.
    In,
}

impl Op {
    /// Every op with its configured name.
    pub const ALL: [(&'static str, Op); 10] = [
        ("eq", Op::Eq),
        ("ne", Op::Ne),
        ("gt", Op::Gt),
        ("ge", Op::Ge),
        ("lt", Op::Lt),
        ("le", Op::Le),
        ("exists", Op::Exists),
        ("missing", Op::Missing),
        ("contains", Op::Contains),
        ("in", Op::In),
    ];

    /// The op of a configured name.
    pub fn parse(name: &str) -> Option<Op> {
        Op::ALL.iter().find(|(n, _)| *n == name).map(|(_, op)| *op)
    }
}
