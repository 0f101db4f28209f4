//! Deployed flows: the graphs records run through between their source and their sinks.
//!
//! # The graph model
//!
//! A flow (`flows[]` in the config) is a set of **nodes** joined by **wires**. A record enters a
//! flow at a `source` node (records of that configured source) or at an `input` node (when
//! another flow calls this one through a `subflow` node). Each node runs on the record and
//! *emits* it on one output port: numbered ports `0..n` (one for most kinds; one per case plus
//! `else` for a `switch`; none for a `sink`), or the `error` port every node has. A wire joins
//! one port to one node's entry; a port may fan out to several nodes, each gets its own copy.
//! `sink` nodes hand the record to a sink (`push`, `storage`) and end the path.
//!
//! Rooms:
//! - [`config`]: `flows:` as written (raw structs) and validated ([`FlowConfig`]); the checks
//!   themselves live in `validate` (flow ids, nodes), `kinds` (map/filter/switch fields),
//!   `graph` (wires, warnings) and `shape` (cycles, reachability).
//! - [`plan`]: [`Plan`], the flows compiled for the engine: entries per source, port targets,
//!   the sinks each source can reach.
//! - [`nodes`]: [`run_node`], pure execution of one node on one record.
//! - [`path`]: dotted paths into a record, and (`template`) `{{path}}` templates.
//!
//! # Invariants (checked by [`validate_flows`], relied on by [`Plan`] and the engine)
//! - Flow ids are unique; node ids are unique within their flow and hold no `:`.
//! - Every wire names an existing node and one of its ports, and never enters a `source` or
//!   `input` node. No two wires are the same.
//! - No cycle inside a flow (error wires included), none across subflow calls: a record's walk
//!   through the nodes always ends, and a subflow's copy never re-enters a flow on its path.
//! - Every node is reachable from a `source` or `input` node of its flow.
//! - A subflow node calls an existing flow that has at least one `input` node.
//! - `map` nodes write only `payload`, `payload.*` and `key`; `id`, `source`, `ts` are read-only.
//!
//! An output port left unwired is only a warning: at run time the engine sends a record emitted
//! there to the node's `error` wire, else to the dead-letter queue.
//!
//! [`Plan`] still never panics on flows that break these rules (bad indexes are skipped), but
//! its answers are only meaningful for validated flows.

pub mod config;
mod graph;
mod kinds;
pub mod nodes;
pub mod path;
pub mod plan;
mod shape;
mod template;
mod validate;

pub use config::{
    validate_flows, Condition, FlowConfig, MapSpec, Node, NodeKind, Op, RawCondition, RawFlow,
    RawNode, RawWire, Wire,
};
pub use nodes::run_node;
pub use path::{FieldPath, Template};
pub use plan::{Plan, DIRECT_FLOW};
pub use template::Confine;

/// A node in a [`Plan`]: its flow's index and its index in that flow.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct NodeRef {
    /// Index of the flow in the plan (config order).
    pub flow: usize,
    /// Index of the node in its flow (config order).
    pub node: usize,
}

/// An output port of a node.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Port {
    /// A numbered port: `0` for most kinds; a switch's case `i`, and `else` = number of cases.
    Out(usize),
    /// The `error` port every node has.
    Error,
}

/// What running one node did with a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeOutcome {
    /// Goes on through this port (to its wires; unwired: the engine's error path).
    Emit(Port),
    /// A filter dropped it: a normal end, counted `filtered`, not a failure.
    Filtered,
    /// The node failed; the reason names the field or value at fault.
    Fail(String),
}
