//! A config's parts, and what becomes of each between two configs. Pure: the trees are the
//! configs as written with their templates expanded ([`crate::config::expanded_tree`]), both
//! already valid.
//!
//! A part is what runs on its own: each device (`device/<name>`), each sink (`sink/<name>`,
//! whether a top-level section or a `sinks:` entry makes it), each source by the name flows
//! give it (`ingest/<name>`, `webhook/<name>`, `nats/<name>`, `mqtt/<name>`,
//! `schedule/<name>`, `backfill/<name>`), each broker connection (`nats-connection/<name>`,
//! `mqtt-connection/<name>`), and the sections that are one part each: `flows`,
//! `commands`, `alerts` (`telemetry:`), `opcua_server`, `simulator`, `http` (the HTTP server's
//! settings but its address), `ingest` (its limits), `dead_letters`, `connector` (its name).
//!
//! A part changed when its settings as written changed, or when a NATS or MQTT connection it
//! names (`connection: <name>`, anywhere in it) changed. The Modbus RTU devices of one serial
//! line (one `port`) are polled by one loop: a changed, new or removed one restarts the others.
//! The OPC-UA server serves every device's points: a change of the devices restarts it. The
//! ingest sources take their batch limits from the `ingest` part: they restart with it. A
//! device takes commands only while `commands:` exists: every device restarts when the
//! section comes or goes. A value written out that equals its
//! default counts as a change: it restarts the part, which is safe.
//!
//! Five settings cannot change while the connector runs ([`NEEDS_RESTART`]): the data dir,
//! the HTTP server's address and its connection slots, the push queue's `on_full`, the
//! OPC-UA server's PKI folder.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// The settings a reload cannot apply, as paths into the config.
pub const NEEDS_RESTART: [&str; 5] = [
    "connector.data_dir",
    "connector.http.listen",
    "connector.http.max_connections",
    "connector.push_queue.on_full",
    "opcua_server.pki_dir",
];

/// What a reload does to one part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// New: built and started.
    Start,
    /// Gone: stopped.
    Stop,
    /// Changed: stopped and started again alone.
    Restart,
    /// Unchanged: keeps running untouched.
    Keep,
}

impl Change {
    /// Its name in answers: `start`, `stop`, `restart`, `keep`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Stop => "stop",
            Self::Restart => "restart",
            Self::Keep => "keep",
        }
    }
}

/// What a reload from one config to another does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Diff {
    /// Every part of either config with its change, by part name.
    pub parts: BTreeMap<String, Change>,
    /// The settings of [`NEEDS_RESTART`] that differ.
    pub needs_restart: Vec<String>,
}

impl Diff {
    /// The parts of one kind of change, in name order.
    pub fn with(&self, change: Change) -> Vec<&str> {
        self.parts
            .iter()
            .filter(|(_, c)| **c == change)
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// Whether anything would start, stop or restart.
    pub fn changes_anything(&self) -> bool {
        self.parts.values().any(|c| *c != Change::Keep)
    }

    /// The answer's `changes` object: `{"start":[...],"stop":[...],"restart":[...],"keep":[...]}`.
    pub fn to_json(&self) -> Value {
        let mut out = serde_json::Map::new();
        for c in [Change::Start, Change::Stop, Change::Restart, Change::Keep] {
            out.insert(c.as_str().into(), self.with(c).into());
        }
        Value::Object(out)
    }
}

/// What a reload from `old` to `new` does, part by part.
pub fn diff(old: &Value, new: &Value) -> Diff {
    let before = parts(old);
    let after = parts(new);
    let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let mut parts: BTreeMap<String, Change> = names
        .into_iter()
        .map(|name| {
            let change = match (before.get(name), after.get(name)) {
                (None, _) => Change::Start,
                (_, None) => Change::Stop,
                (Some(a), Some(b)) if a != b => Change::Restart,
                _ => Change::Keep,
            };
            (name.clone(), change)
        })
        .collect();
    // What names a changed connection restarts with it.
    let changed: BTreeSet<String> = parts
        .iter()
        .filter(|(_, c)| **c != Change::Keep)
        .filter_map(|(name, _)| {
            name.strip_prefix("nats-connection/")
                .or_else(|| name.strip_prefix("mqtt-connection/"))
        })
        .map(str::to_string)
        .collect();
    restart_kept(&mut parts, &after, |_, v| names_any(v, &changed));
    // A part that leaves out `connection:` uses the only connection of its family.
    for family in ["nats", "mqtt"] {
        let list = new[family]["connections"].as_array();
        let only = match list.map(Vec::as_slice) {
            Some([c]) => c["name"].as_str(),
            _ => None,
        };
        let Some(only) = only else { continue };
        if parts.get(&format!("{family}-connection/{only}")) == Some(&Change::Keep) {
            continue;
        }
        restart_kept(&mut parts, &after, |name, v| {
            uses_implicitly(name, v, family)
        });
    }
    // The devices of a serial line are polled by one loop: they restart with a changed one.
    let lines: BTreeSet<&str> = parts
        .iter()
        .filter(|(name, c)| **c != Change::Keep && name.starts_with("device/"))
        .flat_map(|(name, _)| [before.get(name), after.get(name)])
        .flatten()
        .filter_map(serial_line)
        .collect();
    restart_kept(&mut parts, &after, |_, v| {
        serial_line(v).is_some_and(|l| lines.contains(l))
    });
    // A device takes commands only while `commands:` exists: every device restarts when the
    // section comes or goes.
    if old["commands"].is_null() != new["commands"].is_null() {
        restart_kept(&mut parts, &after, |name, _| name.starts_with("device/"));
    }
    // The ingest sources take their batch limits from `ingest:`: they restart with it.
    if parts.get("ingest") == Some(&Change::Restart) {
        restart_kept(&mut parts, &after, |name, _| name.starts_with("ingest/"));
    }
    // The OPC-UA server's address space lists every device's points: it restarts with them.
    let devices = parts
        .iter()
        .any(|(name, c)| *c != Change::Keep && name.starts_with("device/"));
    if devices && !new["opcua_server"].is_null() {
        parts.insert("opcua_server".into(), Change::Restart);
    }
    // A Sparkplug node's births list the devices' points and the devices the flows route to
    // it: it is born again with them (a new session).
    let flows = parts.get("flows").is_some_and(|c| *c != Change::Keep);
    if devices || flows {
        restart_kept(&mut parts, &after, |name, v| {
            name.starts_with("sink/") && v["type"] == "sparkplug"
        });
    }
    let needs_restart = NEEDS_RESTART
        .iter()
        .filter(|path| at(old, path) != at(new, path))
        .map(|path| path.to_string())
        .collect();
    Diff {
        parts,
        needs_restart,
    }
}

/// Restarts every part `parts` keeps whose name and settings (as `after` has them) `with`
/// says restart with something that changed.
fn restart_kept(
    parts: &mut BTreeMap<String, Change>,
    after: &BTreeMap<String, Value>,
    with: impl Fn(&str, &Value) -> bool,
) {
    for (name, settings) in after {
        if let Some(change @ Change::Keep) = parts.get_mut(name) {
            if with(name, settings) {
                *change = Change::Restart;
            }
        }
    }
}

/// The value at dotted `path` of `tree`, `Null` when absent.
fn at<'a>(tree: &'a Value, path: &str) -> &'a Value {
    path.split('.')
        .fold(tree, |v, key| v.get(key).unwrap_or(&Value::Null))
}

/// Every part of `tree` by name, with its settings.
pub fn parts(tree: &Value) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut named = |prefix: &str, list: &Value| {
        for entry in list.as_array().into_iter().flatten() {
            if let Some(name) = entry.get("name").and_then(Value::as_str) {
                out.insert(format!("{prefix}/{name}"), entry.clone());
            }
        }
    };
    named("device", &tree["devices"]);
    named("sink", &tree["sinks"]);
    named("ingest", &tree["ingest"]["sources"]);
    named("webhook", &tree["webhooks"]);
    named("nats", &tree["nats"]["sources"]);
    named("mqtt", &tree["mqtt"]["sources"]);
    named("schedule", &tree["schedules"]);
    named("backfill", &tree["backfills"]);
    named("nats-connection", &tree["nats"]["connections"]);
    named("mqtt-connection", &tree["mqtt"]["connections"]);
    let connector = &tree["connector"];
    // The sinks the top-level sections make. `push` always exists (its queue and uplink).
    let push = serde_json::json!({
        "push_queue": connector["push_queue"],
        "push": connector["push"],
        "preprocess": connector["preprocess"],
    });
    out.insert("sink/push".into(), push);
    for (section, sink) in [
        (&tree["storage"], "storage"),
        (&tree["clickhouse"], "clickhouse"),
        (&tree["postgres"], "postgres"),
        (&tree["nats"]["sink"], "nats"),
        (&tree["mqtt"]["sink"], "mqtt"),
    ] {
        if !section.is_null() {
            out.insert(format!("sink/{sink}"), section.clone());
        }
    }
    let mut http = connector["http"].clone();
    if let Some(map) = http.as_object_mut() {
        map.remove("listen");
        map.remove("max_connections");
    }
    let mut ingest = tree["ingest"].clone();
    if let Some(map) = ingest.as_object_mut() {
        map.remove("sources");
    }
    for (part, value) in [
        ("flows", tree["flows"].clone()),
        ("commands", tree["commands"].clone()),
        ("alerts", tree["telemetry"].clone()),
        ("opcua_server", tree["opcua_server"].clone()),
        ("fleet", tree["fleet"].clone()),
        ("simulator", tree["simulator"].clone()),
        ("dead_letters", tree["dead_letters"].clone()),
        ("http", http),
        ("ingest", ingest),
        ("connector", connector["name"].clone()),
    ] {
        out.insert(part.into(), value);
    }
    out
}

/// Whether part `name` (its settings `value`) uses a connection of `family` (`nats`, `mqtt`)
/// without naming it: a consumer, a sink, the commands' path or the alerts' channel of that
/// family written without `connection:`.
fn uses_implicitly(name: &str, value: &Value, family: &str) -> bool {
    let unnamed = |v: &Value| v.is_object() && v.get("connection").is_none();
    let sink = name.strip_prefix("sink/");
    let kind = value["type"].as_str();
    match name {
        "commands" => unnamed(&value[family]),
        "alerts" => unnamed(&value["alerts"][family]),
        _ if name
            .strip_prefix(family)
            .is_some_and(|n| n.starts_with('/')) =>
        {
            unnamed(value)
        }
        _ if sink == Some(family) && kind.is_none() => unnamed(value),
        _ if sink.is_some() => {
            let of_family = kind == Some(family) || (family == "mqtt" && kind == Some("sparkplug"));
            of_family && unnamed(value)
        }
        _ => false,
    }
}

/// The serial device a Modbus RTU device's settings name (`port`).
fn serial_line(device: &Value) -> Option<&str> {
    (device["protocol"] == "modbus_rtu")
        .then(|| device["port"].as_str())
        .flatten()
}

/// Whether `value` names one of `connections` as `connection: <name>` anywhere in it.
fn names_any(value: &Value, connections: &BTreeSet<String>) -> bool {
    if connections.is_empty() {
        return false;
    }
    match value {
        Value::Object(map) => map.iter().any(|(k, v)| {
            (k == "connection" && v.as_str().is_some_and(|n| connections.contains(n)))
                || names_any(v, connections)
        }),
        Value::Array(list) => list.iter().any(|v| names_any(v, connections)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(yaml: &str) -> Value {
        crate::config::expanded_tree(yaml).expect("a tree")
    }

    const BASE: &str = "
connector:
  data_dir: /d
  http: {listen: 127.0.0.1:8080, max_body_kb: 64}
ingest:
  sources: [{name: line, token: token-0123456789ab}]
devices:
  - {name: press-1, protocol: modbus_tcp, host: 127.0.0.1, port: 502, points: [{name: a, register: 0, type: u16}]}
  - {name: press-2, protocol: modbus_tcp, host: 127.0.0.1, port: 502, points: [{name: a, register: 0, type: u16}]}
nats:
  connections: [{name: site, url: 'nats://127.0.0.1:4222'}]
  sources: [{name: orders, connection: site, stream: ORDERS, durable: gw}]
";

    #[test]
    fn the_same_config_keeps_every_part() {
        let d = diff(&tree(BASE), &tree(BASE));
        assert!(!d.changes_anything());
        assert!(d.needs_restart.is_empty());
        for part in [
            "device/press-1",
            "device/press-2",
            "ingest/line",
            "nats/orders",
            "sink/push",
            "http",
            "flows",
        ] {
            assert_eq!(d.parts.get(part), Some(&Change::Keep), "{part}");
        }
    }

    #[test]
    fn a_changed_point_restarts_its_device_alone() {
        let new = BASE.replacen(
            "points: [{name: a, register: 0",
            "points: [{name: a, register: 1",
            1,
        );
        let d = diff(&tree(BASE), &tree(&new));
        assert_eq!(d.with(Change::Restart), ["device/press-1"]);
        assert_eq!(d.parts["device/press-2"], Change::Keep);
        // The OPC-UA server serves every device's points: it restarts with them.
        let served = |c: &str| format!("{c}opcua_server: {{listen: 127.0.0.1:4840}}\n");
        let d = diff(&tree(&served(BASE)), &tree(&served(&new)));
        assert_eq!(d.with(Change::Restart), ["device/press-1", "opcua_server"]);
        let d = diff(&tree(&served(BASE)), &tree(&served(BASE)));
        assert_eq!(d.parts["opcua_server"], Change::Keep);
    }

    #[test]
    fn added_and_removed_parts_start_and_stop() {
        let new = BASE
            .replace("sources: [{name: line,", "sources: [{name: cell,")
            .replace("connector:\n", "storage: {max_quota_mb: 64}\nconnector:\n");
        let d = diff(&tree(BASE), &tree(&new));
        assert_eq!(d.with(Change::Start), ["ingest/cell", "sink/storage"]);
        assert_eq!(d.with(Change::Stop), ["ingest/line"]);
    }

    #[test]
    fn commands_added_restart_every_device_and_a_new_token_none() {
        let with = |token: &str| format!("{BASE}commands: {{token: {token}}}\n");
        let d = diff(&tree(BASE), &tree(&with("t0ken-0123456789ab")));
        assert_eq!(
            d.with(Change::Restart),
            ["commands", "device/press-1", "device/press-2"]
        );
        let d = diff(
            &tree(&with("t0ken-0123456789ab")),
            &tree(&with("t0ken-0123456789cd")),
        );
        assert_eq!(d.with(Change::Restart), ["commands"]);
    }

    #[test]
    fn new_batch_limits_restart_every_ingest_source() {
        let new = BASE.replace("ingest:\n", "ingest:\n  max_batch_records: 10\n");
        let d = diff(&tree(BASE), &tree(&new));
        assert_eq!(d.with(Change::Restart), ["ingest", "ingest/line"]);
    }

    #[test]
    fn a_changed_connection_restarts_what_names_it() {
        let new = BASE.replace("nats://127.0.0.1:4222", "nats://127.0.0.1:4223");
        let d = diff(&tree(BASE), &tree(&new));
        assert_eq!(
            d.with(Change::Restart),
            ["nats-connection/site", "nats/orders"]
        );
    }

    #[test]
    fn the_only_connection_changed_restarts_what_uses_it_without_naming_it() {
        let implicit = BASE.replace(", connection: site,", ",");
        let changed = implicit.replace("nats://127.0.0.1:4222", "nats://127.0.0.1:4223");
        let with = |c: &str| {
            format!(
                "{c}commands: {{token: t0ken-0123456789ab, nats: {{subject: 'cmd.{{device}}'}}}}\n"
            )
        };
        let d = diff(&tree(&with(&implicit)), &tree(&with(&changed)));
        assert_eq!(
            d.with(Change::Restart),
            ["commands", "nats-connection/site", "nats/orders"]
        );
    }

    #[test]
    fn the_data_dir_and_the_listen_address_need_a_restart_and_are_no_part() {
        let new = BASE
            .replace("data_dir: /d", "data_dir: /e")
            .replace("listen: 127.0.0.1:8080", "listen: 127.0.0.1:8081");
        let d = diff(&tree(BASE), &tree(&new));
        assert_eq!(
            d.needs_restart,
            ["connector.data_dir", "connector.http.listen"]
        );
        assert!(!d.changes_anything());
        let other = BASE.replace("max_body_kb: 64", "max_body_kb: 128");
        let d = diff(&tree(BASE), &tree(&other));
        assert_eq!(d.with(Change::Restart), ["http"]);
        assert!(d.needs_restart.is_empty());
    }

    #[test]
    fn a_changed_device_on_a_serial_line_restarts_the_line_and_no_other_device() {
        let rtu = |unit: u32, register: u32| {
            format!("  - {{name: u{unit}, protocol: modbus_rtu, port: /dev/ttyUSB0, unit: {unit}, points: [{{name: a, register: {register}, type: u16}}]}}\n")
        };
        let with = |register: u32| {
            format!(
                "connector: {{data_dir: /d}}\ndevices:\n{}{}  - {{name: tcp, protocol: modbus_tcp, host: 127.0.0.1, points: [{{name: a, register: 0, type: u16}}]}}\n  - {{name: other-line, protocol: modbus_rtu, port: /dev/ttyUSB1, unit: 1, points: [{{name: a, register: 0, type: u16}}]}}\n",
                rtu(1, register),
                rtu(2, 0)
            )
        };
        let d = diff(&tree(&with(0)), &tree(&with(3)));
        assert_eq!(d.with(Change::Restart), ["device/u1", "device/u2"]);
        assert_eq!(d.parts["device/tcp"], Change::Keep);
        assert_eq!(d.parts["device/other-line"], Change::Keep);
        // A device removed from the line restarts the ones left on it.
        let without = with(0).replace(&rtu(1, 0), "");
        let d = diff(&tree(&with(0)), &tree(&without));
        assert_eq!(d.with(Change::Stop), ["device/u1"]);
        assert_eq!(d.with(Change::Restart), ["device/u2"]);
    }

    #[test]
    fn a_template_change_restarts_the_devices_made_from_it() {
        let with = |register: u32| {
            format!(
                "connector: {{data_dir: /d}}\ntemplates:\n  - {{name: press, protocol: modbus_tcp, host: 127.0.0.1, points: [{{name: a, register: {register}, type: u16}}]}}\ndevices:\n  - {{name: p1, template: press}}\n  - {{name: other, protocol: modbus_tcp, host: 127.0.0.1, points: [{{name: a, register: 0, type: u16}}]}}\n"
            )
        };
        let d = diff(&tree(&with(0)), &tree(&with(5)));
        assert_eq!(d.with(Change::Restart), ["device/p1"]);
        assert_eq!(d.parts["device/other"], Change::Keep);
    }
}
