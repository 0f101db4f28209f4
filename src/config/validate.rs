//! Raw config → validated [`Config`]. Pure: no I/O, every problem reported with its path.

use std::path::PathBuf;

use super::raw::RawConfig;
use super::{Problem, Problems};
use crate::alerts::AlertsConfig;
use crate::flow::config::{validate_flows, FlowConfig, NodeKind};
use crate::http::config::HttpConfig;
use crate::simulator::SimulatorConfig;
use crate::sinks::clickhouse::config::ClickHouseConfig;
use crate::sinks::postgres::config::PostgresConfig;
use crate::sinks::push::config::{PushQueueConfig, UplinkConfig};
use crate::sinks::push::preprocess::{validate_preprocess, PreprocessRule};
use crate::sinks::storage::config::StorageConfig;
use crate::sources::backfill::{validate_backfills, BackfillConfig};
use crate::sources::devices::{validate_devices, DevicesConfig};
use crate::sources::ingest::config::IngestConfig;
use crate::sources::mqtt::config::MqttConfig;
use crate::sources::nats::config::NatsConfig;
use crate::sources::schedule::{validate_schedules, ScheduleConfig};
use crate::sources::webhook::config::{validate_webhooks, WebhookConfig};
use crate::store::dead_letters::DEFAULT_MAX_ROWS;

/// The sinks a flow can name.
pub const KNOWN_SINKS: &[&str] = &["push", "storage", "clickhouse", "postgres", "nats", "mqtt"];

/// Name of a connector whose config names none.
pub const DEFAULT_NAME: &str = "opex-connector";

/// A config that passed validation.
#[derive(Debug, Clone)]
pub struct Config {
    /// `connector:`
    pub connector: ConnectorConfig,
    /// `ingest:`
    pub ingest: IngestConfig,
    /// `webhooks:`
    pub webhooks: Vec<WebhookConfig>,
    /// `storage:`; `None` when neither configured nor named by a flow.
    pub storage: Option<StorageConfig>,
    /// `dead_letters.max_rows`.
    pub dead_letters_max_rows: u64,
    /// `clickhouse:`; `None` when not configured.
    pub clickhouse: Option<ClickHouseConfig>,
    /// `postgres:`; `None` when not configured.
    pub postgres: Option<PostgresConfig>,
    /// `flows:`; empty when none are configured (every source then goes to `push`).
    pub flows: Vec<FlowConfig>,
    /// `devices:`, by protocol.
    pub devices: DevicesConfig,
    /// `simulator:`
    pub simulator: SimulatorConfig,
    /// `nats:`
    pub nats: NatsConfig,
    /// `mqtt:`
    pub mqtt: MqttConfig,
    /// `telemetry.alerts:`
    pub alerts: AlertsConfig,
    /// `schedules:`
    pub schedules: Vec<ScheduleConfig>,
    /// `backfills:`
    pub backfills: Vec<BackfillConfig>,
    /// Things worth a look that do not stop the connector (e.g. an unwired port).
    pub warnings: Vec<Problem>,
}

impl Config {
    /// Every configured source as flows name it: `ingest/<name>`, `webhook/<name>`,
    /// `modbus/<name>`, `nats/<name>`, `mqtt/<name>`, `schedule/<name>`, `backfill/<name>`.
    pub fn source_names(&self) -> Vec<String> {
        let mut names = source_names(&self.ingest, &self.webhooks, &self.devices);
        names.extend(messaging_source_names(&self.nats, &self.mqtt));
        names.extend(feed_source_names(&self.schedules, &self.backfills));
        names
    }
}

fn feed_source_names(schedules: &[ScheduleConfig], backfills: &[BackfillConfig]) -> Vec<String> {
    schedules
        .iter()
        .map(|s| format!("schedule/{}", s.name))
        .chain(backfills.iter().map(|b| format!("backfill/{}", b.name)))
        .collect()
}

fn source_names(
    ingest: &IngestConfig,
    webhooks: &[WebhookConfig],
    devices: &DevicesConfig,
) -> Vec<String> {
    ingest
        .sources
        .iter()
        .map(|s| format!("ingest/{}", s.name))
        .chain(webhooks.iter().map(|w| format!("webhook/{}", w.name)))
        .chain(devices.source_names())
        .collect()
}

fn messaging_source_names(nats: &NatsConfig, mqtt: &MqttConfig) -> Vec<String> {
    nats.sources
        .iter()
        .map(|s| format!("nats/{}", s.name))
        .chain(mqtt.sources.iter().map(|s| format!("mqtt/{}", s.name)))
        .collect()
}

/// `connector:`, validated.
#[derive(Debug, Clone)]
pub struct ConnectorConfig {
    /// Shown on the status page and in alerts.
    pub name: String,
    /// Folder of the durable stores.
    pub data_dir: PathBuf,
    /// The HTTP server.
    pub http: HttpConfig,
    /// The push queue.
    pub push_queue: PushQueueConfig,
    /// The uplink; `None` when not configured (the queue then only fills).
    pub push: Option<UplinkConfig>,
    /// `connector.preprocess`: rules in front of the push queue; empty when none.
    pub preprocess: Vec<PreprocessRule>,
}

/// Checks a raw config and builds the validated one, or returns every problem found.
pub fn validate(raw: &RawConfig) -> Result<Config, Problems> {
    let mut p = Problems::default();
    let default_connector = Default::default();
    let c = raw.connector.as_ref().unwrap_or(&default_connector);

    let name = match &c.name {
        Some(n) if n.trim().is_empty() => {
            p.push("connector.name", "must not be empty");
            String::new()
        }
        Some(n) => n.clone(),
        None => DEFAULT_NAME.to_string(),
    };
    let data_dir = match &c.data_dir {
        Some(d) if !d.trim().is_empty() => PathBuf::from(d),
        Some(_) => {
            p.push("connector.data_dir", "must not be empty");
            PathBuf::new()
        }
        None => {
            p.push("connector.data_dir", "is required");
            PathBuf::new()
        }
    };
    let http = HttpConfig::validate(c.http.as_ref(), "connector.http", &mut p);
    let push_queue =
        PushQueueConfig::validate(c.push_queue.as_ref(), "connector.push_queue", &mut p);
    let push = c
        .push
        .as_ref()
        .and_then(|raw| UplinkConfig::validate(raw, "connector.push", &mut p));
    let ingest = IngestConfig::validate(raw.ingest.as_ref(), "ingest", &mut p);
    let webhooks = validate_webhooks(raw.webhooks.as_deref(), "webhooks", &mut p);
    let storage_cfg = StorageConfig::validate(raw.storage.as_ref(), "storage", &mut p);
    let dead_letters_max_rows = raw
        .dead_letters
        .as_ref()
        .and_then(|d| d.max_rows)
        .unwrap_or(DEFAULT_MAX_ROWS);
    if !(1..=10_000_000).contains(&dead_letters_max_rows) {
        p.push(
            "dead_letters.max_rows",
            format!("{dead_letters_max_rows} is outside 1..=10000000"),
        );
    }
    let devices = validate_devices(raw.devices.as_deref(), "devices", &mut p);
    let simulator = SimulatorConfig::validate(raw.simulator.as_ref(), "simulator", &mut p);
    let nats = NatsConfig::validate(raw.nats.as_ref(), "nats", &mut p);
    let mqtt = MqttConfig::validate(raw.mqtt.as_ref(), "mqtt", &mut p);
    let alerts = AlertsConfig::validate(raw.telemetry.as_ref(), &mqtt, &nats, "telemetry", &mut p);
    let schedules = validate_schedules(raw.schedules.as_deref(), "schedules", &mut p);
    let backfills = validate_backfills(raw.backfills.as_deref(), "backfills", &mut p);
    let mut warnings = Vec::new();
    let mut all_sources = source_names(&ingest, &webhooks, &devices);
    all_sources.extend(messaging_source_names(&nats, &mqtt));
    all_sources.extend(feed_source_names(&schedules, &backfills));
    let preprocess = validate_preprocess(
        c.preprocess.as_deref(),
        "connector.preprocess",
        &all_sources,
        &mut p,
        &mut warnings,
    );
    let flows = validate_flows(
        raw.flows.as_deref(),
        &all_sources,
        KNOWN_SINKS,
        &mut p,
        &mut warnings,
    );
    let clickhouse = raw
        .clickhouse
        .as_ref()
        .map(|c| ClickHouseConfig::validate(c, "clickhouse", &mut p));
    let postgres = raw
        .postgres
        .as_ref()
        .map(|c| PostgresConfig::validate(c, "postgres", &mut p));
    for (name, configured) in [
        ("clickhouse", clickhouse.is_some()),
        ("postgres", postgres.is_some()),
    ] {
        if let Some(i) = flows.iter().position(|f| f.uses_sink(name)) {
            if !configured {
                p.push(
                    format!("flows[{i}]"),
                    format!("a sink node names {name}, but there is no {name}: section"),
                );
            }
        }
    }
    // With flows, a source no flow takes is acknowledged as unrouted: a backfill would run
    // through its whole file and deliver nothing, so that is an error; a schedule, a warning.
    if !flows.is_empty() {
        let taken = |source: &str| {
            flows.iter().any(|f| {
                f.nodes
                    .iter()
                    .any(|n| matches!(&n.kind, NodeKind::Source { source: s } if s == source))
            })
        };
        for (i, b) in backfills.iter().enumerate() {
            if !taken(&format!("backfill/{}", b.name)) {
                p.push(
                    format!("backfills[{i}]"),
                    format!("no flow has a source node for backfill/{}: its records would be dropped as unrouted", b.name),
                );
            }
        }
        for (i, s) in schedules.iter().enumerate() {
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
    }
    let uses_storage = flows.iter().any(|f| f.uses_sink("storage"));
    let storage = (raw.storage.is_some() || uses_storage).then_some(storage_cfg);
    if flows.iter().any(|f| f.uses_sink("nats")) && nats.sink.is_none() {
        p.push(
            "nats.sink",
            "a flow delivers to sink nats: configure nats.sink",
        );
    }
    if flows.iter().any(|f| f.uses_sink("mqtt")) && mqtt.sink.is_none() {
        p.push(
            "mqtt.sink",
            "a flow delivers to sink mqtt: configure mqtt.sink",
        );
    }

    if p.is_empty() {
        Ok(Config {
            connector: ConnectorConfig {
                name,
                data_dir,
                http,
                push_queue,
                push,
                preprocess,
            },
            ingest,
            webhooks,
            storage,
            dead_letters_max_rows,
            clickhouse,
            postgres,
            flows,
            devices,
            simulator,
            nats,
            mqtt,
            alerts,
            schedules,
            backfills,
            warnings,
        })
    } else {
        Err(p)
    }
}

#[cfg(test)]
mod tests {
    use super::super::from_yaml;

    fn paths(text: &str) -> Vec<String> {
        from_yaml(text)
            .unwrap_err()
            .0
            .into_iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn block_without_enabled_queue_and_quota_is_refused_with_every_reason() {
        let errs = paths(
            "connector:\n  data_dir: /d\n  push_queue:\n    enabled: false\n    max_quota_mb: 0\n    on_full: block\n",
        );
        assert!(
            errs.iter().any(|e| e
                .starts_with("connector.push_queue.on_full: block needs push_queue.enabled: true")),
            "{errs:?}"
        );
        assert!(
            errs.iter().any(|e| e.contains("max_quota_mb > 0")),
            "{errs:?}"
        );
    }

    #[test]
    fn on_full_names_the_allowed_values() {
        let errs = paths("connector:\n  data_dir: /d\n  push_queue:\n    on_full: drop\n");
        assert_eq!(
            errs,
            vec![r#"connector.push_queue.on_full: expected evict_oldest or block, got "drop""#]
        );
    }

    #[test]
    fn missing_data_dir_and_bad_listen_are_both_reported() {
        let errs = paths("connector:\n  http:\n    listen: nowhere\n");
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].starts_with("connector.data_dir"));
        assert!(errs[1].starts_with("connector.http.listen"));
    }

    #[test]
    fn a_flow_naming_a_database_sink_needs_its_section_and_the_section_is_checked() {
        let flow = "flows:\n  - id: f\n    nodes:\n      - { id: in, kind: source, source: ingest/a }\n      - { id: db, kind: sink, sink: postgres }\n    wires:\n      - { from: in, to: db }\n";
        let base = "connector:\n  data_dir: /d\ningest:\n  sources:\n    - { name: a, token: tokentoken }\n";
        let errs = paths(&format!("{base}{flow}"));
        assert_eq!(
            errs,
            vec!["flows[0]: a sink node names postgres, but there is no postgres: section"]
        );
        let errs = paths(&format!(
            "{base}{flow}postgres:\n  url: postgres://u@127.0.0.1/db\n  sink_batch: {{ on_full: later }}\n"
        ));
        assert_eq!(
            errs,
            vec![
                "postgres.sink_table: is required",
                r#"postgres.sink_batch.on_full: expected evict_oldest or block, got "later""#,
            ]
        );
        let ok = format!(
            "{base}{flow}postgres:\n  url: postgres://u@127.0.0.1/db\n  sink_table: events\n"
        );
        let cfg = super::super::from_yaml(&ok).unwrap();
        assert_eq!(cfg.postgres.unwrap().table, ["events"]);
    }

    #[test]
    fn schedules_backfills_and_preprocess_report_every_problem_at_once() {
        let errs = paths(
            r#"
connector:
  data_dir: /d
  preprocess:
    - { source: schedule/tick, deadband: { absolute: 1, percent: 5 } }
    - { source: backfill/old, aggregate: { fn: avg, window: 0s } }
    - { source: ingest/nope, deadband: { absolute: 1 } }
schedules:
  - { name: tick, every: 30s }
  - { name: bad, every: 30x }
  - { name: nightly, cron: "0 2 * 13 *" }
backfills:
  - { name: old, file: /data/old.csv, format: csv }
  - { name: new, file: /data/new.csv, format: xlsx }
flows:
  - id: f
    nodes:
      - { id: a, kind: source, source: schedule/tick }
      - { id: b, kind: source, source: backfill/missing }
      - { id: up, kind: sink, sink: push }
    wires:
      - { from: a, to: up }
      - { from: b, to: up }
"#,
        );
        let known = "(known: schedule/tick, backfill/old)";
        assert_eq!(
            errs,
            vec![
                r#"schedules[1].every: "30x": expected a whole number and a unit (ms, s, m, h, d), e.g. 30s"#.to_string(),
                "schedules[2].cron: field 4 (month): 13 is outside 1..=12".to_string(),
                r#"backfills[1].format: expected jsonl or csv, got "xlsx""#.to_string(),
                "connector.preprocess[0].deadband: give absolute or percent, not both".to_string(),
                "connector.preprocess[1].aggregate.window: must be at least 1s".to_string(),
                format!("connector.preprocess[2].source: unknown source \"ingest/nope\" {known}"),
                format!("flows[0].nodes[1].source: unknown source \"backfill/missing\" {known}"),
            ]
        );
        let ok = from_yaml(
            "connector:\n  data_dir: /d\n  preprocess:\n    - { source: schedule/tick, point: temp, deadband: { percent: 5 }, heartbeat: 10m }\nschedules:\n  - { name: tick, every: 30s }\nbackfills:\n  - { name: old, file: /data/old.csv, format: csv }\n",
        )
        .unwrap();
        assert_eq!(
            ok.source_names(),
            vec!["schedule/tick".to_string(), "backfill/old".to_string()]
        );
        assert_eq!(ok.connector.preprocess.len(), 1);
    }

    #[test]
    fn a_backfill_no_flow_takes_is_refused_and_an_untaken_schedule_warned() {
        let text = "connector:\n  data_dir: /d\nschedules:\n  - { name: tick, every: 30s }\nbackfills:\n  - { name: old, file: /data/old.jsonl, format: jsonl }\n  - { name: new, file: /data/new.jsonl, format: jsonl }\nflows:\n  - id: f\n    nodes:\n      - { id: a, kind: source, source: backfill/new }\n      - { id: up, kind: sink, sink: push }\n    wires:\n      - { from: a, to: up }\n";
        assert_eq!(
            paths(text),
            vec!["backfills[0]: no flow has a source node for backfill/old: its records would be dropped as unrouted"]
        );
        let ok = from_yaml(
            &text
                .replace(
                    "backfill/new }",
                    "backfill/new }\n      - { id: b, kind: source, source: backfill/old }\n",
                )
                .replace(
                    "- { from: a, to: up }",
                    "- { from: a, to: up }\n      - { from: b, to: up }",
                ),
        )
        .unwrap();
        assert_eq!(ok.warnings.len(), 1, "{:?}", ok.warnings);
        assert_eq!(ok.warnings[0].path, "schedules[0]");
    }

    #[test]
    fn the_demo_config_is_valid() {
        from_yaml(super::super::DEMO_YAML).unwrap();
    }
}
