//! `sinks:`: named instances of the sink kinds, and the top-level sections that each make one
//! instance named after its kind (`connector.push_queue` + `connector.push` +
//! `connector.preprocess` → `push`, `storage` → `storage`, `clickhouse`, `postgres`,
//! `nats.sink` → `nats`, `mqtt.sink` → `mqtt`). Raw, then validated without I/O.
//!
//! An entry is `name`, `type` and the keys of that kind, exactly as the kind's section has
//! them. Each entry is read as [`RawSinkKind`], a closed serde enum tagged by `type`, through
//! the same reader as the whole file, so every unknown key and wrong type of every entry is
//! reported with its path (`sinks[2].sink_table: ...`).

use serde::Deserialize;
use serde_json::Value;

use super::clickhouse::config::{ClickHouseConfig, RawClickHouse};
use super::mqtt::config::{MqttSinkConfig, RawMqttSink};
use super::nats::config::{NatsSinkConfig, RawNatsSink};
use super::postgres::config::{PostgresConfig, RawPostgres};
use super::push::config::{
    PushConfig, PushQueueConfig, RawPush, RawPushQueue, RawPushSink, UplinkConfig,
};
use super::push::preprocess::{validate_preprocess, RawPreprocessRule};
use super::queue::QueueMode;
use super::sparkplug::config::{RawSparkplugSink, SparkplugSinkConfig};
use super::storage::config::{RawStorage, StorageConfig};
use crate::admission::OnFull;
use crate::config::checks::checked_name;
use crate::config::{parse_tree, pick_connection, Problem, Problems};
use crate::flow::config::FlowConfig;
use crate::sources::devices::DevicesConfig;
use crate::sources::mqtt::config::MqttConfig;
use crate::sources::nats::config::NatsConfig;

/// The kinds a `sinks[]` entry's `type` may name.
pub const KINDS: &[&str] = &[
    "push",
    "storage",
    "clickhouse",
    "postgres",
    "nats",
    "mqtt",
    "sparkplug",
];

/// A `sinks[]` entry's keys besides `name` and `type`, by `type`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RawSinkKind {
    /// `type: push`: a queue and its HTTP uplink.
    Push(RawPushSink),
    /// `type: storage`: a local event history.
    Storage(RawStorage),
    /// `type: clickhouse`: a ClickHouse table.
    #[serde(rename = "clickhouse")]
    ClickHouse(RawClickHouse),
    /// `type: postgres`: a Postgres table.
    Postgres(RawPostgres),
    /// `type: nats`: a NATS subject.
    Nats(RawNatsSink),
    /// `type: mqtt`: an MQTT topic.
    Mqtt(RawMqttSink),
    /// `type: sparkplug`: a Sparkplug B edge node.
    Sparkplug(RawSparkplugSink),
}

/// One `sinks[]` entry as read: its path, its name and its keys (each `None` when unusable;
/// the problems are reported already).
#[derive(Debug)]
pub struct RawSinkEntry {
    /// `sinks[i]`.
    pub at: String,
    /// `name`.
    pub name: Option<String>,
    /// `type` and the kind's keys.
    pub kind: Option<RawSinkKind>,
}

/// One sink, validated.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// Its name: what flows, `/api/status`, metric labels and the ledger call it.
    pub name: String,
    /// Its kind and that kind's settings.
    pub spec: SinkSpec,
}

/// A sink's kind and settings, validated.
#[derive(Debug, Clone)]
pub enum SinkSpec {
    /// A push sink.
    Push(PushConfig),
    /// A storage sink.
    Storage(StorageConfig),
    /// A ClickHouse sink.
    ClickHouse(ClickHouseConfig),
    /// A Postgres sink.
    Postgres(PostgresConfig),
    /// A NATS sink.
    Nats(NatsSinkConfig),
    /// An MQTT sink.
    Mqtt(MqttSinkConfig),
    /// A Sparkplug sink.
    Sparkplug(SparkplugSinkConfig),
}

impl SinkConfig {
    /// True when it acknowledges records before anything durable holds them, so a crash
    /// loses them (the volatile push buffer, a database's memory backlog).
    pub fn memory_only(&self) -> bool {
        match &self.spec {
            SinkSpec::Push(c) => !c.queue.enabled,
            SinkSpec::ClickHouse(c) => c.queue == QueueMode::Memory,
            SinkSpec::Postgres(c) => c.queue == QueueMode::Memory,
            // Storage commits; NATS and MQTT (QoS 1) wait for the server; Sparkplug has its
            // disk queue.
            SinkSpec::Storage(_)
            | SinkSpec::Nats(_)
            | SinkSpec::Mqtt(_)
            | SinkSpec::Sparkplug(_) => false,
        }
    }

    /// What the daemon says about it at start, when it is worth a look.
    pub fn startup_warning(&self) -> Option<&'static str> {
        match &self.spec {
            SinkSpec::Push(c) if !c.queue.enabled => Some(
                "its queue is not durable: records wait in a 16 MiB memory buffer that is lost on restart; enable connector.push_queue (or queue: disk) for anything that matters",
            ),
            SinkSpec::Push(_)
            | SinkSpec::Storage(_)
            | SinkSpec::ClickHouse(_)
            | SinkSpec::Postgres(_)
            | SinkSpec::Nats(_)
            | SinkSpec::Mqtt(_)
            | SinkSpec::Sparkplug(_) => None,
        }
    }

    /// True when it refuses new records at its bound (`on_full: block`).
    pub fn blocks(&self) -> bool {
        let disk = |q: &QueueMode| matches!(q, QueueMode::Disk(d) if d.on_full == OnFull::Block);
        match &self.spec {
            SinkSpec::Push(c) => c.queue.on_full == OnFull::Block,
            SinkSpec::Storage(c) => c.on_full == OnFull::Block,
            SinkSpec::ClickHouse(c) => disk(&c.queue) || c.batch.on_full == OnFull::Block,
            SinkSpec::Postgres(c) => disk(&c.queue) || c.batch.on_full == OnFull::Block,
            SinkSpec::Nats(c) => disk(&c.queue),
            SinkSpec::Mqtt(c) => disk(&c.queue),
            SinkSpec::Sparkplug(c) => disk(&c.queue_mode()),
        }
    }

    /// True for the kinds that, without `flows:`, take the records of every polled device
    /// (besides `push`, which takes every source's).
    pub fn takes_every_device(&self) -> bool {
        match &self.spec {
            SinkSpec::Sparkplug(_) => true,
            SinkSpec::Push(_)
            | SinkSpec::Storage(_)
            | SinkSpec::ClickHouse(_)
            | SinkSpec::Postgres(_)
            | SinkSpec::Nats(_)
            | SinkSpec::Mqtt(_) => false,
        }
    }
}

/// Reads the `sinks:` list: each entry's name, and its `type` and keys as [`RawSinkKind`].
/// Pure: problems go to `p`.
pub fn read_entries(raw: Option<&[Value]>, p: &mut Problems) -> Vec<RawSinkEntry> {
    let mut out: Vec<RawSinkEntry> = Vec::new();
    for (i, v) in raw.unwrap_or_default().iter().enumerate() {
        let at = format!("sinks[{i}]");
        let Value::Object(map) = v else {
            p.push(at, "expected a mapping with name, type and the kind's keys");
            continue;
        };
        let mut map = map.clone();
        let name = match map.remove("name") {
            Some(Value::String(n)) => checked_name(
                Some(&n),
                &at,
                |n| out.iter().any(|o| o.name.as_deref() == Some(n)),
                p,
            ),
            Some(other) => {
                p.push(
                    format!("{at}.name"),
                    format!("expected a string, got {other}"),
                );
                None
            }
            None => checked_name(None, &at, |_| false, p),
        };
        let kind = match map.remove("type") {
            Some(Value::String(t)) if KINDS.contains(&t.as_str()) => {
                let tree = Value::Object([(t, Value::Object(map))].into_iter().collect());
                let (kind, problems) = parse_tree::<RawSinkKind>(tree, &at, true);
                p.0.extend(problems.0);
                kind
            }
            Some(other) => {
                p.push(
                    format!("{at}.type"),
                    format!("expected one of {}, got {other}", KINDS.join(", ")),
                );
                None
            }
            None => {
                p.push(
                    format!("{at}.type"),
                    format!("is required ({})", KINDS.join(", ")),
                );
                None
            }
        };
        out.push(RawSinkEntry { at, name, kind });
    }
    out
}

/// The top-level sections that make one sink each, as written.
pub struct Sections<'a> {
    /// `connector.push_queue`.
    pub push_queue: Option<&'a RawPushQueue>,
    /// `connector.push`.
    pub push: Option<&'a RawPush>,
    /// `connector.preprocess`.
    pub preprocess: Option<&'a [RawPreprocessRule]>,
    /// `storage:`.
    pub storage: Option<&'a RawStorage>,
    /// `clickhouse:`.
    pub clickhouse: Option<&'a RawClickHouse>,
    /// `postgres:`.
    pub postgres: Option<&'a RawPostgres>,
    /// `nats.sink`.
    pub nats_sink: Option<&'a RawNatsSink>,
    /// `mqtt.sink`.
    pub mqtt_sink: Option<&'a RawMqttSink>,
}

impl Sections<'_> {
    /// The sinks the sections make, by name, with the section that makes each.
    fn named(&self) -> Vec<(&'static str, &'static str)> {
        [
            (
                self.push_queue.is_some() || self.push.is_some() || self.preprocess.is_some(),
                "push",
                "connector.push_queue / connector.push / connector.preprocess",
            ),
            (self.storage.is_some(), "storage", "storage:"),
            (self.clickhouse.is_some(), "clickhouse", "clickhouse:"),
            (self.postgres.is_some(), "postgres", "postgres:"),
            (self.nats_sink.is_some(), "nats", "nats.sink"),
            (self.mqtt_sink.is_some(), "mqtt", "mqtt.sink"),
        ]
        .into_iter()
        .filter(|(given, _, _)| *given)
        .map(|(_, name, section)| (name, section))
        .collect()
    }
}

/// The name of every sink a flow may deliver to: the sections', the list's, `push` (always
/// there) and `storage` (made with its defaults when a flow names it). A name used by a section
/// and by the list is reported.
pub fn sink_names(
    entries: &[RawSinkEntry],
    sections: &Sections<'_>,
    p: &mut Problems,
) -> Vec<String> {
    let named = sections.named();
    let mut names: Vec<String> = vec!["push".into(), "storage".into()];
    for (name, _) in &named {
        if !names.iter().any(|n| n == name) {
            names.push((*name).to_string());
        }
    }
    for e in entries {
        let Some(name) = &e.name else { continue };
        if let Some((_, section)) = named.iter().find(|(n, _)| n == name) {
            p.push(
                format!("{}.name", e.at),
                format!("{name:?} is also the sink that {section} makes: use one form"),
            );
        }
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

/// What validating the sinks needs besides their own keys.
pub struct Context<'a> {
    /// `nats:`, validated: its connections.
    pub nats: &'a NatsConfig,
    /// `mqtt:`, validated.
    pub mqtt: &'a MqttConfig,
    /// Every configured source, for the preprocess and deadband rules.
    pub sources: &'a [String],
    /// `devices:`, validated: a Sparkplug node's metrics.
    pub devices: &'a DevicesConfig,
}

/// Validates every sink: the sections' first (`push` always, made with the defaults when not
/// configured), then the list's in order. [`with_flows`] completes them once the flows are
/// validated.
pub fn validate_sinks(
    entries: Vec<RawSinkEntry>,
    sections: &Sections<'_>,
    cx: &Context<'_>,
    p: &mut Problems,
    warnings: &mut Vec<Problem>,
) -> Vec<SinkConfig> {
    let in_list = |name: &str| entries.iter().any(|e| e.name.as_deref() == Some(name));
    let mut out = Vec::new();
    if !in_list("push") || sections.named().iter().any(|(n, _)| *n == "push") {
        out.push(SinkConfig {
            name: "push".into(),
            spec: SinkSpec::Push(PushConfig {
                queue: PushQueueConfig::validate(sections.push_queue, "connector.push_queue", p),
                uplink: sections
                    .push
                    .and_then(|raw| UplinkConfig::validate(raw, "connector.push", p)),
                preprocess: validate_preprocess(
                    sections.preprocess,
                    "connector.preprocess",
                    cx.sources,
                    p,
                    warnings,
                ),
            }),
        });
    }
    if sections.storage.is_some() {
        out.push(SinkConfig {
            name: "storage".into(),
            spec: SinkSpec::Storage(StorageConfig::validate(sections.storage, "storage", p)),
        });
    }
    if let Some(raw) = sections.clickhouse {
        out.push(SinkConfig {
            name: "clickhouse".into(),
            spec: SinkSpec::ClickHouse(ClickHouseConfig::validate(raw, "clickhouse", p)),
        });
    }
    if let Some(raw) = sections.postgres {
        out.push(SinkConfig {
            name: "postgres".into(),
            spec: SinkSpec::Postgres(PostgresConfig::validate(raw, "postgres", p)),
        });
    }
    let legacy = [
        sections
            .nats_sink
            .map(|s| ("nats", "nats.sink", RawSinkRef::Nats(s))),
        sections
            .mqtt_sink
            .map(|s| ("mqtt", "mqtt.sink", RawSinkRef::Mqtt(s))),
    ];
    for (name, at, raw) in legacy.into_iter().flatten() {
        if let Some(spec) = messaging(raw, at, cx, p, warnings) {
            out.push(SinkConfig {
                name: name.into(),
                spec,
            });
        }
    }
    // (where, (group_id, edge_node_id)) of each sparkplug entry so far.
    let mut edge_nodes: Vec<(String, (String, String))> = Vec::new();
    for e in entries {
        let (Some(name), Some(kind)) = (e.name, e.kind) else {
            continue;
        };
        let at = e.at.as_str();
        let spec = match kind {
            RawSinkKind::Push(raw) => Some(SinkSpec::Push(PushConfig {
                queue: PushQueueConfig::validate_entry(&raw, at, p),
                uplink: raw
                    .uplink
                    .as_ref()
                    .and_then(|u| UplinkConfig::validate(u, &format!("{at}.uplink"), p)),
                preprocess: validate_preprocess(
                    raw.preprocess.as_deref(),
                    &format!("{at}.preprocess"),
                    cx.sources,
                    p,
                    warnings,
                ),
            })),
            RawSinkKind::Storage(raw) => Some(SinkSpec::Storage(StorageConfig::validate(
                Some(&raw),
                at,
                p,
            ))),
            RawSinkKind::ClickHouse(raw) => Some(SinkSpec::ClickHouse(ClickHouseConfig::validate(
                &raw, at, p,
            ))),
            RawSinkKind::Postgres(raw) => {
                Some(SinkSpec::Postgres(PostgresConfig::validate(&raw, at, p)))
            }
            RawSinkKind::Nats(raw) => messaging(RawSinkRef::Nats(&raw), at, cx, p, warnings),
            RawSinkKind::Mqtt(raw) => messaging(RawSinkRef::Mqtt(&raw), at, cx, p, warnings),
            RawSinkKind::Sparkplug(raw) => {
                let connection = pick_connection(
                    &cx.mqtt.connections,
                    |c| &c.name,
                    raw.connection.as_deref(),
                    "mqtt.connections",
                    at,
                    p,
                );
                let c =
                    SparkplugSinkConfig::validate(&raw, connection, cx.devices, cx.sources, at, p);
                if let Some(c) = &c {
                    // Two nodes of one id would take each other's sessions and commands.
                    let id = (c.group_id.clone(), c.edge_node_id.clone());
                    if let Some((first, _)) = edge_nodes.iter().find(|(_, o)| *o == id) {
                        p.push(
                            format!("{at}.edge_node_id"),
                            format!(
                                "{:?} of group {:?} is also the edge node of {first}: each node needs its own id",
                                id.1, id.0
                            ),
                        );
                    }
                    edge_nodes.push((at.to_string(), id));
                }
                c.map(SinkSpec::Sparkplug)
            }
        };
        if let Some(spec) = spec {
            out.push(SinkConfig { name, spec });
        }
    }
    out
}

/// Completes the sinks once the flows are validated: `storage` made with its defaults when a
/// flow names it and nothing configures it, and the warnings about what the flows combine.
pub fn with_flows(sinks: &mut Vec<SinkConfig>, flows: &[FlowConfig], warnings: &mut Vec<Problem>) {
    let uses_storage = flows.iter().any(|f| f.uses_sink("storage"));
    if uses_storage && !sinks.iter().any(|s| s.name == "storage") {
        let mut p = Problems::default();
        sinks.push(SinkConfig {
            name: "storage".into(),
            spec: SinkSpec::Storage(StorageConfig::validate(None, "storage", &mut p)),
        });
    }
    memory_warnings(sinks, flows, warnings);
}

/// A NATS or MQTT sink's raw keys.
enum RawSinkRef<'a> {
    Nats(&'a RawNatsSink),
    Mqtt(&'a RawMqttSink),
}

/// Validates a NATS or MQTT sink at `at`, with the connection it names.
fn messaging(
    raw: RawSinkRef<'_>,
    at: &str,
    cx: &Context<'_>,
    p: &mut Problems,
    warnings: &mut Vec<Problem>,
) -> Option<SinkSpec> {
    match raw {
        RawSinkRef::Nats(raw) => {
            let connection = pick_connection(
                &cx.nats.connections,
                |c| &c.name,
                raw.connection.as_deref(),
                "nats.connections",
                at,
                p,
            );
            NatsSinkConfig::validate(raw, connection, at, p).map(SinkSpec::Nats)
        }
        RawSinkRef::Mqtt(raw) => {
            let connection = pick_connection(
                &cx.mqtt.connections,
                |c| &c.name,
                raw.connection.as_deref(),
                "mqtt.connections",
                at,
                p,
            );
            MqttSinkConfig::validate(raw, connection, at, p).map(|c| {
                qos0_warning(&c, at, warnings);
                SinkSpec::Mqtt(c)
            })
        }
    }
}

fn qos0_warning(c: &MqttSinkConfig, at: &str, warnings: &mut Vec<Problem>) {
    if c.qos == 0 {
        warnings.push(Problem {
            path: format!("{at}.qos"),
            message: "0: nothing confirms a publish, so a record is settled once written and counted unconfirmed in the ledger; use 1 for data that must arrive".into(),
        });
    }
}

/// A flow that delivers to a sink under `block` and to one that keeps records in memory:
/// `block` makes the record survive a full queue, not a crash.
fn memory_warnings(sinks: &[SinkConfig], flows: &[FlowConfig], warnings: &mut Vec<Problem>) {
    for (i, f) in flows.iter().enumerate() {
        let used: Vec<&SinkConfig> = sinks.iter().filter(|s| f.uses_sink(&s.name)).collect();
        let blocking: Vec<&str> = used
            .iter()
            .filter(|s| s.blocks())
            .map(|s| s.name.as_str())
            .collect();
        let memory: Vec<&str> = used
            .iter()
            .filter(|s| s.memory_only())
            .map(|s| s.name.as_str())
            .collect();
        if blocking.is_empty() || memory.is_empty() {
            continue;
        }
        let message = if blocking == memory {
            format!(
                "delivers to {} under block with a memory backlog: a record survives a full backlog but not a crash; give it queue: disk",
                memory.join(", ")
            )
        } else {
            format!(
                "delivers under block ({}) and to sinks that keep records in memory ({}): a record survives a full queue but not a crash; give them queue: disk",
                blocking.join(", "),
                memory.join(", ")
            )
        };
        warnings.push(Problem {
            path: format!("flows[{i}]"),
            message,
        });
    }
}
