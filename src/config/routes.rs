//! What the flows leave out. Without `flows:` every source goes to `push`; with them, a source
//! no flow takes is acknowledged as unrouted (counted in `engine.stats.unrouted`, then gone),
//! and a sink no flow reaches gets nothing. Each is a mistake a new site makes once flows are
//! written, so validation says so before the first record is lost: an error where a whole
//! file would be read and dropped (a backfill), a warning elsewhere.

use super::raw::RawConfig;
use super::{Problem, Problems};
use crate::flow::config::{FlowConfig, NodeKind};
use crate::flow::Plan;
use crate::sinks::SinkConfig;
use crate::sources::backfill::BackfillConfig;
use crate::sources::devices::DevicesConfig;
use crate::sources::schedule::ScheduleConfig;

/// The sources and sinks the flows are checked against, validated.
pub struct Routed<'a> {
    /// Every configured source by flow name.
    pub sources: &'a [String],
    /// Every sink, as validation made them.
    pub sinks: &'a [SinkConfig],
    /// `schedules:`
    pub schedules: &'a [ScheduleConfig],
    /// `backfills:`
    pub backfills: &'a [BackfillConfig],
    /// `devices:`; with `commands:` their commands are records `command/<device>`.
    pub devices: &'a DevicesConfig,
    /// Whether `commands:` is configured.
    pub commands: bool,
}

/// Checks what `flows` leave out; nothing to check without flows.
pub fn check(
    flows: &[FlowConfig],
    r: &Routed<'_>,
    raw: &RawConfig,
    p: &mut Problems,
    warnings: &mut Vec<Problem>,
) {
    if flows.is_empty() {
        return;
    }
    let taken = |source: &str| {
        flows.iter().any(|f| {
            f.nodes
                .iter()
                .any(|n| matches!(&n.kind, NodeKind::Source { source: s } if s == source))
        })
    };
    // A backfill would run through its whole file and deliver nothing: an error.
    for (i, b) in r.backfills.iter().enumerate() {
        if !taken(&format!("backfill/{}", b.name)) {
            p.push(
                format!("backfills[{i}]"),
                format!("no flow has a source node for backfill/{}: its records would be dropped as unrouted", b.name),
            );
        }
    }
    for (i, s) in r.schedules.iter().enumerate() {
        if !taken(&format!("schedule/{}", s.name)) {
            warnings.push(Problem {
                path: format!("schedules[{i}]"),
                message: format!(
                    "no flow has a source node for schedule/{}: its ticks are unrouted",
                    s.name
                ),
            });
        }
    }
    // Only a device with writable points takes commands, so only its records can be lost.
    if r.commands {
        for device in r.devices.with_writable_points() {
            if !taken(&format!("command/{device}")) {
                warnings.push(Problem {
                    path: "commands".into(),
                    message: format!(
                        "no flow has a source node for command/{device}: the records of device \
                         {device}'s commands would be booked unrouted and lost"
                    ),
                });
            }
        }
    }
    unreached_sinks(flows, r, raw, warnings);
}

/// A sink no source reaches through the flows: storage that would stay empty, an uplink
/// that would send nothing. `push` without an uplink (`connector.push`) is left alone: it
/// is there in every config, and keeps records on the box.
fn unreached_sinks(
    flows: &[FlowConfig],
    r: &Routed<'_>,
    raw: &RawConfig,
    warnings: &mut Vec<Problem>,
) {
    // The plan's reach is the engine's own: a subflow on the way counts every sink of it.
    let plan = Plan::compile(flows.to_vec());
    let reached = |sink: &str| {
        r.sources
            .iter()
            .any(|s| plan.reachable_sinks(s).iter().any(|n| n == sink))
    };
    let uplink = raw.connector.as_ref().is_some_and(|c| c.push.is_some());
    for sink in r.sinks {
        if reached(&sink.name) {
            continue;
        }
        let listed = raw
            .sinks
            .iter()
            .flatten()
            .position(|e| e.get("name").and_then(|n| n.as_str()) == Some(sink.name.as_str()));
        let path = match (listed, sink.name.as_str()) {
            (Some(i), _) => format!("sinks[{i}]"),
            (None, "push") if !uplink => continue,
            (None, "push") => "connector.push".to_string(),
            (None, "nats") => "nats.sink".to_string(),
            (None, "mqtt") => "mqtt.sink".to_string(),
            (None, section) => section.to_string(),
        };
        warnings.push(Problem {
            path,
            message: format!(
                "no flow reaches sink {}: it would get nothing (wire a sink node `sink: {}` \
                 from a source, or remove it)",
                sink.name, sink.name
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::config::from_yaml;

    const BASE: &str = "connector:\n  data_dir: /d\ningest:\n  sources:\n    - { name: a, token: tokentokentokentoken }\n";

    /// A flow from `ingest/a` to the sink `to`.
    fn flow(to: &str) -> String {
        format!("flows:\n  - id: f\n    nodes:\n      - {{ id: in, kind: source, source: ingest/a }}\n      - {{ id: out, kind: sink, sink: {to} }}\n    wires:\n      - {{ from: in, to: out }}\n")
    }

    fn warned(text: &str) -> Vec<String> {
        match from_yaml(text) {
            Ok(c) => c.warnings.iter().map(|w| w.to_string()).collect(),
            Err(p) => panic!("{p}"),
        }
    }

    #[test]
    fn a_sink_no_flow_reaches_is_warned_of_and_push_without_an_uplink_is_not() {
        assert_eq!(
            warned(&format!("{BASE}storage: {{}}\n{}", flow("push"))),
            ["storage: no flow reaches sink storage: it would get nothing (wire a sink node `sink: storage` from a source, or remove it)"]
        );
        let uplink = BASE.replacen(
            "ingest:",
            "  push:\n    url: http://127.0.0.1:9000/ingest\ningest:",
            1,
        );
        assert_eq!(
            warned(&format!("{uplink}{}", flow("storage"))),
            ["connector.push: no flow reaches sink push: it would get nothing (wire a sink node `sink: push` from a source, or remove it)"]
        );
        assert!(warned(&format!("{BASE}{}", flow("storage"))).is_empty());
        // Without flows every source goes to push: nothing to warn of.
        assert!(warned(&format!("{BASE}storage: {{}}\n")).is_empty());
    }

    #[test]
    fn command_records_no_flow_routes_are_warned_of_by_device() {
        let text = format!("{BASE}commands:\n  token: 0123456789abcdef0123\ndevices:\n  - name: press\n    protocol: modbus_tcp\n    host: 127.0.0.1\n    points:\n      - {{ name: setpoint, register: 12, writable: true }}\n  - name: oven\n    protocol: modbus_tcp\n    host: 127.0.0.1\n    points:\n      - {{ name: temp, register: 0 }}\n{}", flow("push"));
        let warnings = warned(&text);
        assert_eq!(
            warnings,
            ["commands: no flow has a source node for command/press: the records of device press's commands would be booked unrouted and lost"],
            "{warnings:?}"
        );
        let routed = text.replace(
            "      - { id: out, kind: sink, sink: push }",
            "      - { id: out, kind: sink, sink: push }\n      - { id: cmd, kind: source, source: command/press }",
        ).replace("      - { from: in, to: out }", "      - { from: in, to: out }\n      - { from: cmd, to: out }");
        assert!(warned(&routed).is_empty(), "{:?}", warned(&routed));
    }

    #[test]
    fn one_bad_point_is_one_error_not_also_an_unknown_source() {
        let text = format!("{BASE}commands:\n  token: 0123456789abcdef0123\ndevices:\n  - name: press-1\n    protocol: modbus_tcp\n    host: 127.0.0.1\n    points:\n      - {{ name: setpoint, register: 70000, writable: true }}\nflows:\n  - id: f\n    nodes:\n      - {{ id: in, kind: source, source: modbus/press-1 }}\n      - {{ id: cmd, kind: source, source: command/press-1 }}\n      - {{ id: out, kind: sink, sink: push }}\n    wires:\n      - {{ from: in, to: out }}\n      - {{ from: cmd, to: out }}\n");
        let errors: Vec<String> = match from_yaml(&text) {
            Ok(_) => panic!("a register of 70000 is refused"),
            Err(p) => p.0.iter().map(|e| e.to_string()).collect(),
        };
        assert_eq!(
            errors,
            ["devices[0].points[0].register: 70000 is outside 0..=65535"],
            "{errors:?}"
        );
    }
}
