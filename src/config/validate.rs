//! Raw config → validated [`Config`]. Pure: no I/O, every problem reported with its path.

use std::path::PathBuf;

use super::checks::TokenRule;
use super::raw::RawConfig;
use super::routes::{self, Routed};
use super::{Problem, Problems};
use crate::alerts::AlertsConfig;
use crate::commands::CommandsConfig;
use crate::flow::config::{validate_flows, FlowConfig};
use crate::http::config::HttpConfig;
use crate::opcua_server::OpcuaServerConfig;
use crate::simulator::SimulatorConfig;
use crate::sinks::config::{
    read_entries, sink_names, validate_sinks, with_flows, Context, Sections,
};
use crate::sinks::SinkConfig;
use crate::sources::backfill::{validate_backfills, BackfillConfig};
use crate::sources::devices::{validate_devices, DevicesConfig};
use crate::sources::ingest::config::IngestConfig;
use crate::sources::mqtt::config::MqttConfig;
use crate::sources::nats::config::NatsConfig;
use crate::sources::schedule::{validate_schedules, ScheduleConfig};
use crate::sources::webhook::config::{validate_webhooks, WebhookConfig};
use crate::store::dead_letters::DEFAULT_MAX_ROWS;

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
    /// `dead_letters.max_rows`.
    pub dead_letters_max_rows: u64,
    /// Every sink: those the top-level sections make (`push` always, first), then the
    /// `sinks:` list's, in order.
    pub sinks: Vec<SinkConfig>,
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
    /// `commands:`; `None` when the section is absent (no device takes commands).
    pub commands: Option<CommandsConfig>,
    /// `opcua_server:`; `None` when the section is absent (no server).
    pub opcua_server: Option<OpcuaServerConfig>,
    /// `fleet:`; `None` when the section is absent (configured here only).
    pub fleet: Option<crate::fleet::FleetConfig>,
    /// `schedules:`
    pub schedules: Vec<ScheduleConfig>,
    /// `backfills:`
    pub backfills: Vec<BackfillConfig>,
    /// Things worth a look that do not stop the connector (e.g. an unwired port).
    pub warnings: Vec<Problem>,
}

impl Config {
    /// The flows compiled; without flows, every source to `push` and every polled device
    /// also to the sinks of the kinds that take them all.
    pub fn plan(&self) -> crate::flow::Plan {
        if self.flows.is_empty() {
            let sources = self.source_names();
            let devices = self.devices.source_names();
            let mut routes: Vec<(&str, &[String])> = vec![("push", &sources)];
            for s in self.sinks.iter().filter(|s| s.takes_every_device()) {
                routes.push((&s.name, &devices));
            }
            crate::flow::Plan::direct_to(&routes)
        } else {
            crate::flow::Plan::compile(self.flows.clone())
        }
    }

    /// Every configured source as flows name it: `ingest/<name>`, `webhook/<name>`,
    /// `modbus/<name>`, `nats/<name>`, `mqtt/<name>`, `schedule/<name>`, `backfill/<name>`.
    pub fn source_names(&self) -> Vec<String> {
        let mut names = source_names(&self.ingest, &self.webhooks, &self.devices);
        names.extend(messaging_source_names(&self.nats, &self.mqtt));
        names.extend(feed_source_names(&self.schedules, &self.backfills));
        names.extend(command_source_names(self.commands.as_ref(), &self.devices));
        names
    }
}

/// With `commands:`, every device's commands are records of source `command/<device>`.
fn command_source_names(commands: Option<&CommandsConfig>, devices: &DevicesConfig) -> Vec<String> {
    match commands {
        None => Vec::new(),
        Some(_) => devices
            .catalogue()
            .iter()
            .map(|d| format!("command/{}", d.name))
            .collect(),
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

/// The sources of the devices validation left out for a problem of their own, by the name
/// and protocol written (`modbus/<name>`, `s7/<name>`, ...), and `command/<name>` with
/// `commands:`. An entry without a usable name or protocol has no source to name.
fn left_out_devices(
    raw: Option<&[serde_json::Value]>,
    kept: &DevicesConfig,
    commands: bool,
) -> Vec<String> {
    let kept = kept.source_names();
    let mut out: Vec<String> = Vec::new();
    for d in raw.unwrap_or_default() {
        let field = |key: &str| d.get(key).and_then(serde_json::Value::as_str);
        let (Some(name), Some(protocol)) = (field("name"), field("protocol")) else {
            continue;
        };
        let Some(kind) = crate::sources::devices::family(protocol) else {
            continue;
        };
        let source = format!("{kind}/{name}");
        if name.trim().is_empty() || kept.contains(&source) || out.contains(&source) {
            continue;
        }
        out.push(source);
        if commands {
            out.push(format!("command/{name}"));
        }
    }
    out
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
    let mut warnings = Vec::new();
    let demo = c.demo.unwrap_or(false);
    let http = HttpConfig::validate(
        c.http.as_ref(),
        "connector.http",
        demo,
        &mut p,
        &mut warnings,
    );
    let tokens = TokenRule::new(demo, http.listen);
    let ingest =
        IngestConfig::validate(raw.ingest.as_ref(), "ingest", tokens, &mut p, &mut warnings);
    let webhooks = validate_webhooks(raw.webhooks.as_deref(), "webhooks", &mut p);
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
    let commands = CommandsConfig::validate(
        raw.commands.as_ref(),
        "commands",
        &nats,
        &mqtt,
        tokens,
        &mut p,
        &mut warnings,
    );
    if commands.is_none() {
        for device in devices.with_writable_points() {
            warnings.push(Problem {
                path: "commands".into(),
                message: format!(
                    "is not configured, so nothing can write device {device}'s writable points"
                ),
            });
        }
    }
    let opcua_server = OpcuaServerConfig::validate(
        raw.opcua_server.as_ref(),
        "opcua_server",
        &name,
        &data_dir,
        commands.is_some(),
        &mut p,
        &mut warnings,
    );
    let fleet =
        crate::fleet::FleetConfig::validate(raw.fleet.as_ref(), "fleet", &nats.connections, &mut p);
    let schedules = validate_schedules(raw.schedules.as_deref(), "schedules", &mut p);
    let backfills = validate_backfills(raw.backfills.as_deref(), "backfills", &mut p);
    let mut all_sources = source_names(&ingest, &webhooks, &devices);
    all_sources.extend(messaging_source_names(&nats, &mqtt));
    all_sources.extend(feed_source_names(&schedules, &backfills));
    all_sources.extend(command_source_names(commands.as_ref(), &devices));
    // A device left out for a problem of its own (one bad point) is reported there; the flows,
    // rules and sinks that name it must not report it again as an unknown source.
    all_sources.extend(left_out_devices(
        raw.devices.as_deref(),
        &devices,
        commands.is_some(),
    ));
    let sections = Sections {
        push_queue: c.push_queue.as_ref(),
        push: c.push.as_ref(),
        preprocess: c.preprocess.as_deref(),
        storage: raw.storage.as_ref(),
        clickhouse: raw.clickhouse.as_ref(),
        postgres: raw.postgres.as_ref(),
        nats_sink: raw.nats.as_ref().and_then(|n| n.sink.as_ref()),
        mqtt_sink: raw.mqtt.as_ref().and_then(|m| m.sink.as_ref()),
    };
    let entries = read_entries(raw.sinks.as_deref(), &mut p);
    let names = sink_names(&entries, &sections, &mut p);
    let mut sinks = validate_sinks(
        entries,
        &sections,
        &Context {
            nats: &nats,
            mqtt: &mqtt,
            sources: &all_sources,
            devices: &devices,
        },
        &mut p,
        &mut warnings,
    );
    let known_sinks: Vec<&str> = names.iter().map(String::as_str).collect();
    let flows = validate_flows(
        raw.flows.as_deref(),
        &all_sources,
        &known_sinks,
        &mut p,
        &mut warnings,
    );
    with_flows(&mut sinks, &flows, &mut warnings);
    let routed = Routed {
        sources: &all_sources,
        sinks: &sinks,
        schedules: &schedules,
        backfills: &backfills,
        devices: &devices,
        commands: commands.is_some(),
    };
    routes::check(&flows, &routed, raw, &mut p, &mut warnings);

    if p.is_empty() {
        Ok(Config {
            connector: ConnectorConfig {
                name,
                data_dir,
                http,
            },
            ingest,
            webhooks,
            dead_letters_max_rows,
            sinks,
            flows,
            devices,
            simulator,
            nats,
            mqtt,
            alerts,
            commands,
            opcua_server,
            fleet,
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
    use crate::sinks::SinkSpec;

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
        let base = "connector:\n  data_dir: /d\ningest:\n  sources:\n    - { name: a, token: tokentokentokentoken }\n";
        let errs = paths(&format!("{base}{flow}"));
        assert_eq!(
            errs,
            vec![r#"flows[0].nodes[1].sink: unknown sink "postgres" (known: push, storage)"#]
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
        let pg = cfg.sinks.iter().find(|s| s.name == "postgres").unwrap();
        assert!(matches!(&pg.spec, SinkSpec::Postgres(c) if c.table == ["events"]));
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
        assert!(
            matches!(&ok.sinks[0].spec, SinkSpec::Push(c) if c.preprocess.len() == 1),
            "{:?}",
            ok.sinks[0]
        );
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
    fn writable_points_without_a_commands_section_are_warned_of_by_device() {
        let text = "connector:\n  data_dir: /d\ndevices:\n  - name: press\n    protocol: modbus_tcp\n    host: 127.0.0.1\n    points:\n      - { name: setpoint, register: 12, type: f32, writable: true }\n  - name: oven\n    protocol: modbus_tcp\n    host: 127.0.0.1\n    points:\n      - { name: temp, register: 0 }\n";
        let c = from_yaml(text).unwrap();
        let warned: Vec<String> = c
            .warnings
            .iter()
            .map(|w| format!("{}: {}", w.path, w.message))
            .collect();
        assert_eq!(
            warned,
            ["commands: is not configured, so nothing can write device press's writable points"]
        );
        let with = text.replace(
            "devices:",
            "commands:\n  token: 0123456789abcdef0123\ndevices:",
        );
        assert!(from_yaml(&with).unwrap().warnings.is_empty());
    }

    #[test]
    fn the_demo_config_is_valid_and_warns_of_its_short_token_and_its_open_opcua_endpoint() {
        let demo = from_yaml(super::super::DEMO_YAML).unwrap();
        let warned: Vec<&str> = demo.warnings.iter().map(|w| w.path.as_str()).collect();
        assert_eq!(warned, ["ingest.sources[0].token", "opcua_server.security"]);
    }

    #[test]
    fn short_tokens_are_errors_with_their_paths_unless_the_demo_listens_on_loopback() {
        let text = |demo: &str, listen: &str| {
            format!("connector:\n  data_dir: /d\n{demo}  http:\n    listen: {listen}\n    admin_token: adm1n-t0ken\ningest:\n  sources:\n    - {{ name: a, token: 0123456789abcdef }}\n    - {{ name: b, token: s3cret }}\n")
        };
        let short = |n: usize| format!("is {n} characters, fewer than 16: use a long random token");
        let expected = vec![
            format!("connector.http.admin_token: {}", short(11)),
            format!("ingest.sources[1].token: {}", short(6)),
        ];
        assert_eq!(paths(&text("", "127.0.0.1:8080")), expected);
        // The demo's allowance ends where the network begins.
        assert_eq!(paths(&text("  demo: true\n", "0.0.0.0:8080")), expected);
        assert_eq!(paths(&text("  demo: false\n", "127.0.0.1:8080")), expected);
        let demo = from_yaml(&text("  demo: true\n", "127.0.0.1:8080")).unwrap();
        let warned: Vec<&str> = demo.warnings.iter().map(|w| w.path.as_str()).collect();
        assert_eq!(
            warned,
            ["connector.http.admin_token", "ingest.sources[1].token"]
        );
        assert_eq!(
            demo.connector.http.admin_token.as_deref(),
            Some("adm1n-t0ken")
        );
    }
}
