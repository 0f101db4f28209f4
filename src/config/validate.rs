//! Raw config → validated [`Config`]. Pure: no I/O, every problem reported with its path.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::raw::{RawConfig, RawHttp};
use super::{Problem, Problems};
use crate::flow::config::{validate_flows, FlowConfig};
use crate::sinks::push::config::{PushQueueConfig, UplinkConfig};
use crate::sinks::storage::config::StorageConfig;
use crate::sources::devices::{validate_devices, DevicesConfig};
use crate::sources::ingest::config::IngestConfig;
use crate::sources::webhook::config::{validate_webhooks, WebhookConfig};
use crate::store::dead_letters::DEFAULT_MAX_ROWS;

/// The sinks a flow can name.
pub const KNOWN_SINKS: &[&str] = &["push", "storage"];

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
    /// `flows:`; empty when none are configured (every source then goes to `push`).
    pub flows: Vec<FlowConfig>,
    /// `devices:`, by protocol.
    pub devices: DevicesConfig,
    /// Things worth a look that do not stop the connector (e.g. an unwired port).
    pub warnings: Vec<Problem>,
}

impl Config {
    /// Every configured source as flows name it: `ingest/<name>`, `webhook/<name>`,
    /// `opcua/<device>`.
    pub fn source_names(&self) -> Vec<String> {
        source_names(&self.ingest, &self.webhooks, &self.devices)
    }
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
}

/// `connector.http:`, validated.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Largest request body in bytes.
    pub max_body_bytes: usize,
    /// Most connections served at once.
    pub max_connections: usize,
    /// Time to send headers; also the idle keep-alive limit.
    pub header_read_timeout: Duration,
    /// Time to send a body.
    pub body_read_timeout: Duration,
    /// Bearer token of the admin endpoints.
    pub admin_token: Option<String>,
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
    let http = validate_http(c.http.as_ref().unwrap_or(&RawHttp::default()), &mut p);
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
    let mut warnings = Vec::new();
    let flows = validate_flows(
        raw.flows.as_deref(),
        &source_names(&ingest, &webhooks, &devices),
        KNOWN_SINKS,
        &mut p,
        &mut warnings,
    );
    let uses_storage = flows.iter().any(|f| f.uses_sink("storage"));
    let storage = (raw.storage.is_some() || uses_storage).then_some(storage_cfg);

    if p.is_empty() {
        Ok(Config {
            connector: ConnectorConfig {
                name,
                data_dir,
                http,
                push_queue,
                push,
            },
            ingest,
            webhooks,
            storage,
            dead_letters_max_rows,
            flows,
            devices,
            warnings,
        })
    } else {
        Err(p)
    }
}

fn validate_http(raw: &RawHttp, p: &mut Problems) -> HttpConfig {
    let listen = match raw.listen.as_deref() {
        None => SocketAddr::from(([127, 0, 0, 1], 8080)),
        Some(s) => match s.parse::<SocketAddr>() {
            Ok(a) => a,
            Err(_) => {
                p.push(
                    "connector.http.listen",
                    format!("expected an address and port like 127.0.0.1:8080, got {s:?}"),
                );
                SocketAddr::from(([127, 0, 0, 1], 8080))
            }
        },
    };
    let max_body_kb = raw.max_body_kb.unwrap_or(1024);
    if !(1..=1024 * 1024).contains(&max_body_kb) {
        p.push(
            "connector.http.max_body_kb",
            format!("{max_body_kb} is outside 1..=1048576"),
        );
    }
    let max_connections = raw.max_connections.unwrap_or(256);
    if !(1..=65_536).contains(&max_connections) {
        p.push(
            "connector.http.max_connections",
            format!("{max_connections} is outside 1..=65536"),
        );
    }
    let header_secs = raw.header_read_timeout_secs.unwrap_or(10);
    if !(1..=3600).contains(&header_secs) {
        p.push(
            "connector.http.header_read_timeout_secs",
            format!("{header_secs} is outside 1..=3600"),
        );
    }
    let body_secs = raw.body_read_timeout_secs.unwrap_or(30);
    if !(1..=3600).contains(&body_secs) {
        p.push(
            "connector.http.body_read_timeout_secs",
            format!("{body_secs} is outside 1..=3600"),
        );
    }
    if let Some(t) = &raw.admin_token {
        if t.is_empty() {
            p.push(
                "connector.http.admin_token",
                "must not be empty (leave it out to disable the admin endpoints)",
            );
        }
    }
    HttpConfig {
        listen,
        max_body_bytes: (max_body_kb as usize).saturating_mul(1024),
        max_connections: max_connections as usize,
        header_read_timeout: Duration::from_secs(header_secs),
        body_read_timeout: Duration::from_secs(body_secs),
        admin_token: raw.admin_token.clone(),
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
    fn the_demo_config_is_valid() {
        from_yaml(super::super::DEMO_YAML).unwrap();
    }
}
