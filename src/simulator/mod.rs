//! The built-in simulator: a small plant whose values change over time, served over the
//! protocols the pollers speak, for the demo and for trying a config without a machine.
//!
//! - [`opcua`]: an OPC-UA server (security None, anonymous).

pub mod opcua;
