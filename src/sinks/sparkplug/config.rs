//! A `sparkplug` sink (a `sinks[]` entry of `type: sparkplug`): raw, validated without I/O.
//!
//! Besides its own keys, the validated config carries the metric definitions of every device
//! of the point catalogue: a point whose type the config fixes has its datatype from the
//! start, so a device's DBIRTH can name it before the first poll answered.

use serde::Deserialize;

use crate::brokers::mqtt::MqttConnectionConfig;
use crate::config::checks::known_source;
use crate::config::Problems;
use crate::sinks::push::preprocess::config::Deadband;
use crate::sinks::queue::config::validate_queue;
use crate::sinks::queue::{DiskQueueConfig, QueueMode};
use crate::sources::catalogue::DataKind;
use crate::sources::devices::DevicesConfig;

use super::proto::datatype;

/// Longest group, edge node, host or device id (the topic holds several of them).
pub const MAX_ID: usize = 128;

/// `sinks[]` entry of `type: sparkplug`.
#[derive(Debug, Default, Deserialize)]
pub struct RawSparkplugSink {
    /// The `mqtt.connections` entry (by name) whose broker the edge node publishes to;
    /// optional when there is exactly one. The node has an MQTT client of its own on it,
    /// `<client_id>-sparkplug-<sink name>`, whose Will is the node's NDEATH.
    pub connection: Option<String>,
    /// The Sparkplug group id: the first level after `spBv1.0/`. Required; any UTF-8 text
    /// of 1 to 128 characters without `+`, `/`, `#` or control characters.
    pub group_id: Option<String>,
    /// The edge node id: this connector's name in the group. Required; the same characters
    /// as `group_id`.
    pub edge_node_id: Option<String>,
    /// The primary host application's id. With it, the node publishes nothing until the host
    /// says it is online on `spBv1.0/STATE/<id>` (or the older `STATE/<id>`); records wait in
    /// the disk queue meanwhile and are sent as historical once it is back. Without it the
    /// node publishes as soon as it is connected.
    pub primary_host_id: Option<String>,
    /// `disk` (the default and the only choice): records wait in a durable queue
    /// (`queue-<name>.db` under the data dir) until the broker, and the primary host, take
    /// them; what waited is published flagged `is_historical`.
    pub queue: Option<String>,
    /// The queue's quota in MiB of logical bytes. Default 1024.
    pub max_quota_mb: Option<u64>,
    /// `evict_oldest` (default) or `block` at the quota, as the push queue's.
    pub on_full: Option<String>,
    /// Report by exception: a value is published when it differs from the last one
    /// published; a rule here widens "differs" for numbers, per source or per point.
    pub deadband: Option<Vec<RawSparkplugDeadband>>,
}

/// `sinks[].deadband[]` of a `sparkplug` sink.
#[derive(Debug, Default, Deserialize)]
pub struct RawSparkplugDeadband {
    /// The source whose records the rule applies to (`modbus/press-1`). Required.
    pub source: Option<String>,
    /// One point of it (a key of the record's payload); without it, every point of the source.
    /// A rule naming the point wins over the source's rule.
    pub point: Option<String>,
    /// A new value within this band of the last one published is not published.
    pub absolute: Option<f64>,
    /// A new value within this percentage of the last one published is not published.
    pub percent: Option<f64>,
}

/// A deadband rule, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadbandRule {
    /// The source.
    pub source: String,
    /// The point, or every point of the source.
    pub point: Option<String>,
    /// The band.
    pub band: Deadband,
}

/// A metric a polled device will publish.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricDef {
    /// `<group>/<point>`.
    pub name: String,
    /// The point's name (its key in the record's payload).
    pub point: String,
    /// Its datatype, when the catalogue knows it before the first read; else it is learned
    /// from the first value.
    pub datatype: Option<u32>,
    /// Its engineering unit.
    pub unit: Option<String>,
}

/// A polled device, as a Sparkplug device.
#[derive(Debug, Clone, PartialEq)]
pub struct PolledDevice {
    /// Its records' source, e.g. `modbus/<name>`.
    pub source: String,
    /// Its name: the Sparkplug device id.
    pub name: String,
    /// Its metrics, in config order.
    pub metrics: Vec<MetricDef>,
}

/// A `sparkplug` sink, validated.
#[derive(Debug, Clone)]
pub struct SparkplugSinkConfig {
    /// Its broker.
    pub connection: MqttConnectionConfig,
    /// The group id.
    pub group_id: String,
    /// The edge node id.
    pub edge_node_id: String,
    /// The primary host application's id, when the node waits for one.
    pub primary_host_id: Option<String>,
    /// The disk queue's bound.
    pub queue: DiskQueueConfig,
    /// Deadband rules.
    pub deadbands: Vec<DeadbandRule>,
    /// Every polled device of the config (the sink takes those whose records reach it).
    pub devices: Vec<PolledDevice>,
}

impl SparkplugSinkConfig {
    /// What waits in front of the broker: always the disk queue.
    pub fn queue_mode(&self) -> QueueMode {
        QueueMode::Disk(self.queue)
    }

    /// Validates a `type: sparkplug` entry at `at` (`connection` was resolved by the caller);
    /// `devices` are the validated devices, `sources` every configured source.
    pub fn validate(
        raw: &RawSparkplugSink,
        connection: Option<MqttConnectionConfig>,
        devices: &DevicesConfig,
        sources: &[String],
        at: &str,
        p: &mut Problems,
    ) -> Option<Self> {
        let group_id = check_id(raw.group_id.as_deref(), &format!("{at}.group_id"), p);
        let edge_node_id = check_id(
            raw.edge_node_id.as_deref(),
            &format!("{at}.edge_node_id"),
            p,
        );
        let primary_host_id = raw
            .primary_host_id
            .as_deref()
            .map(|id| check_id(Some(id), &format!("{at}.primary_host_id"), p));
        if let Some(q) = raw.queue.as_deref().filter(|q| *q != "disk") {
            p.push(
                format!("{at}.queue"),
                format!("{q:?}: a sparkplug sink keeps what waits on disk (store and forward): leave it out or write disk"),
            );
        }
        let queue = match validate_queue(
            Some("disk"),
            raw.max_quota_mb,
            raw.on_full.as_deref(),
            at,
            p,
        ) {
            QueueMode::Disk(q) => q,
            // `Some("disk")` always validates to a disk queue.
            QueueMode::Memory => return None,
        };
        let deadbands = validate_deadbands(raw.deadband.as_deref(), at, sources, p);
        let primary_host_id = match primary_host_id {
            None => None,
            Some(checked) => Some(checked?),
        };
        Some(Self {
            connection: connection?,
            group_id: group_id?,
            edge_node_id: edge_node_id?,
            primary_host_id,
            queue,
            deadbands,
            devices: polled_devices(devices),
        })
    }
}

/// Checks a Sparkplug id at `path`: 1 to [`MAX_ID`] characters, none of `+ / #`, no control
/// characters (MQTT refuses some in topics, and no host shows them well).
pub fn check_id(id: Option<&str>, path: &str, p: &mut Problems) -> Option<String> {
    let Some(id) = id else {
        p.push(path, "is required");
        return None;
    };
    let chars = id.chars().count();
    if chars == 0 || chars > MAX_ID {
        p.push(path, format!("{id:?} must be 1 to {MAX_ID} characters"));
        return None;
    }
    if let Some(c) = id
        .chars()
        .find(|c| matches!(c, '+' | '/' | '#') || c.is_control())
    {
        p.push(
            path,
            format!("{id:?} holds {c:?}: Sparkplug ids may not hold '+', '/', '#' or control characters"),
        );
        return None;
    }
    Some(id.to_string())
}

fn validate_deadbands(
    raw: Option<&[RawSparkplugDeadband]>,
    at: &str,
    sources: &[String],
    p: &mut Problems,
) -> Vec<DeadbandRule> {
    let mut out = Vec::new();
    for (i, r) in raw.unwrap_or_default().iter().enumerate() {
        let at = format!("{at}.deadband[{i}]");
        let source = known_source(r.source.as_deref(), &at, sources, p);
        let band = match (r.absolute, r.percent) {
            (Some(a), None) if a.is_finite() && a >= 0.0 => Some(Deadband::Absolute(a)),
            (None, Some(pc)) if pc.is_finite() && pc >= 0.0 => Some(Deadband::Percent(pc)),
            (Some(_), Some(_)) => {
                p.push(at.clone(), "give absolute or percent, not both");
                None
            }
            (None, None) => {
                p.push(at.clone(), "give absolute or percent");
                None
            }
            _ => {
                p.push(at.clone(), "the band must be a number >= 0");
                None
            }
        };
        if let (Some(source), Some(band)) = (source, band) {
            out.push(DeadbandRule {
                source,
                point: r.point.clone(),
                band,
            });
        }
    }
    out
}

/// The Sparkplug datatype of a catalogue's value type.
pub fn datatype_of(kind: DataKind) -> u32 {
    match kind {
        DataKind::Bool => datatype::BOOLEAN,
        DataKind::U16 => datatype::UINT16,
        DataKind::I16 => datatype::INT16,
        DataKind::U32 => datatype::UINT32,
        DataKind::I32 => datatype::INT32,
        DataKind::U64 => datatype::UINT64,
        DataKind::I64 => datatype::INT64,
        DataKind::F32 => datatype::FLOAT,
        DataKind::F64 => datatype::DOUBLE,
        DataKind::String => datatype::STRING,
    }
}

/// Every device of the point catalogue with its metrics.
fn polled_devices(devices: &DevicesConfig) -> Vec<PolledDevice> {
    devices
        .catalogue()
        .into_iter()
        .map(|d| PolledDevice {
            metrics: d
                .points
                .iter()
                .map(|pt| MetricDef {
                    name: format!("{}/{}", pt.group, pt.name),
                    point: pt.name.clone(),
                    datatype: pt.kind.map(datatype_of),
                    unit: pt.unit.clone(),
                })
                .collect(),
            source: d.source,
            name: d.name,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_refuse_the_reserved_characters_and_say_which() {
        let mut p = Problems::default();
        assert_eq!(
            check_id(Some("plant A"), "g", &mut p).as_deref(),
            Some("plant A")
        );
        assert_eq!(check_id(Some("a/b"), "g", &mut p), None);
        assert_eq!(check_id(Some("a+"), "n", &mut p), None);
        assert_eq!(check_id(Some(""), "n", &mut p), None);
        assert_eq!(check_id(None, "h", &mut p), None);
        assert_eq!(
            check_id(Some(&"é".repeat(128)), "g", &mut p).map(|s| s.chars().count()),
            Some(128)
        );
        assert_eq!(check_id(Some(&"x".repeat(129)), "g", &mut p), None);
        assert_eq!(check_id(Some("a\tb"), "n", &mut p), None);
        let got: Vec<String> = p.0.iter().map(|x| x.to_string()).collect();
        assert_eq!(
            got,
            vec![
                r#"g: "a/b" holds '/': Sparkplug ids may not hold '+', '/', '#' or control characters"#,
                r#"n: "a+" holds '+': Sparkplug ids may not hold '+', '/', '#' or control characters"#,
                r#"n: "" must be 1 to 128 characters"#,
                "h: is required",
                &format!("g: {:?} must be 1 to 128 characters", "x".repeat(129)),
                r#"n: "a\tb" holds '\t': Sparkplug ids may not hold '+', '/', '#' or control characters"#,
            ]
        );
    }

    #[test]
    fn every_problem_of_an_entry_is_reported_with_its_path() {
        let raw = RawSparkplugSink {
            group_id: Some("#".into()),
            edge_node_id: None,
            queue: Some("memory".into()),
            on_full: Some("drop".into()),
            deadband: Some(vec![
                RawSparkplugDeadband {
                    source: Some("modbus/nope".into()),
                    absolute: Some(1.0),
                    ..RawSparkplugDeadband::default()
                },
                RawSparkplugDeadband {
                    source: Some("ingest/a".into()),
                    absolute: Some(1.0),
                    percent: Some(2.0),
                    ..RawSparkplugDeadband::default()
                },
            ]),
            ..RawSparkplugSink::default()
        };
        let mut p = Problems::default();
        let cfg = SparkplugSinkConfig::validate(
            &raw,
            None,
            &DevicesConfig::default(),
            &["ingest/a".to_string()],
            "sinks[1]",
            &mut p,
        );
        assert!(cfg.is_none());
        let got: Vec<String> = p.0.iter().map(|x| x.to_string()).collect();
        assert_eq!(
            got,
            vec![
                r##"sinks[1].group_id: "#" holds '#': Sparkplug ids may not hold '+', '/', '#' or control characters"##,
                "sinks[1].edge_node_id: is required",
                r#"sinks[1].queue: "memory": a sparkplug sink keeps what waits on disk (store and forward): leave it out or write disk"#,
                r#"sinks[1].on_full: expected evict_oldest or block, got "drop""#,
                r#"sinks[1].deadband[0].source: unknown source "modbus/nope" (known: ingest/a)"#,
                "sinks[1].deadband[1]: give absolute or percent, not both",
            ]
        );
    }
}
