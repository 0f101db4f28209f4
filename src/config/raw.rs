//! The config file as written: every field optional, so that [`super::parse`] can report every
//! structural problem and [`super::validate`] every missing or wrong value, each with its path.
//!
//! The doc comment of each field is the user documentation of that key.

use serde::Deserialize;

pub use crate::alerts::config::RawTelemetry;
pub use crate::flow::config::RawFlow;
pub use crate::http::config::RawHttp;
pub use crate::simulator::RawSimulator;
pub use crate::sinks::clickhouse::config::RawClickHouse;
pub use crate::sinks::postgres::config::RawPostgres;
pub use crate::sinks::push::config::{RawPush, RawPushQueue};
pub use crate::sinks::push::preprocess::RawPreprocessRule;
pub use crate::sinks::storage::config::RawStorage;
pub use crate::sources::backfill::RawBackfill;
pub use crate::sources::ingest::config::{RawIngest, RawIngestSource};
pub use crate::sources::mqtt::config::RawMqtt;
pub use crate::sources::nats::config::RawNats;
pub use crate::sources::schedule::RawSchedule;
pub use crate::sources::webhook::config::RawWebhook;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
pub struct RawConfig {
    /// The connector itself: identity, data dir, HTTP server, push queue and its uplink.
    pub connector: Option<RawConnector>,
    /// The HTTP ingest API (`POST /api/ingest/{source}/{id}`) and its sources.
    pub ingest: Option<RawIngest>,
    /// Signed webhooks (`POST /api/hooks/{name}`).
    pub webhooks: Option<Vec<RawWebhook>>,
    /// The storage sink: the local event history (`events.db`).
    pub storage: Option<RawStorage>,
    /// The pipeline dead-letter queue (`dead_letters.db`).
    pub dead_letters: Option<RawDeadLetters>,
    /// The ClickHouse sink: a table fed over HTTP through a bounded memory backlog.
    pub clickhouse: Option<RawClickHouse>,
    /// The Postgres sink: a table fed with binary COPY through a bounded memory backlog.
    pub postgres: Option<RawPostgres>,
    /// Named sinks: any number of each kind. Each entry is `name` (1 to 64 letters, digits,
    /// `-`, `_`: what flows, `/api/status`, metric labels and the ledger call it), `type`
    /// (`push`, `storage`, `clickhouse`, `postgres`, `nats`, `mqtt`, `sparkplug`) and the keys
    /// of that kind, as its top-level section has them (`sparkplug` has no section). A name a section already makes (`push`, `storage`,
    /// `clickhouse`, `postgres`, `nats`, `mqtt`) is an error.
    pub sinks: Option<Vec<serde_json::Value>>,
    /// Commands down to devices: the token of the HTTP path, the default expiry and rate
    /// limit, the NATS and MQTT paths. Only points marked `writable: true` can be written.
    pub commands: Option<crate::commands::RawCommands>,
    /// The deployed flows. Without them every source is wired straight to `push`.
    pub flows: Option<Vec<RawFlow>>,
    /// The field devices the pollers read (Modbus TCP and RTU, OPC-UA, S7). Each entry is
    /// `name`, `protocol` (`modbus_tcp`, `modbus_rtu`, `opcua`, `s7`; here or in its
    /// template), the keys every device has and the keys of its protocol: a key of another
    /// protocol is an unknown key.
    pub devices: Option<Vec<serde_json::Value>>,
    /// Device templates: each entry has a `name` (1 to 64 letters, digits, `-`, `_`, unique)
    /// and any keys of a `devices:` entry; `protocol` may be left to its devices, and when a
    /// template gives it, its keys are checked against that protocol's. A device with `template: NAME` starts from them;
    /// every key it gives replaces the template's, except `points`, `nodes` and `groups`,
    /// merged by name (a device entry with a template entry's name replaces it, others are
    /// added), and `vars`, merged key by key. Problems in a template's keys are reported as
    /// `devices[7] (template press): points[3].register: ...`. `opex-connector overlay FILE`
    /// prints the config with its templates expanded.
    pub templates: Option<Vec<serde_json::Value>>,
    /// The northbound OPC-UA server: every device's points for SCADA, HMI and MES clients.
    /// Absent: no server.
    pub opcua_server: Option<crate::opcua_server::RawOpcuaServer>,
    /// The built-in simulator, started inside the process (the demo polls it).
    pub simulator: Option<RawSimulator>,
    /// The fleet this gateway belongs to: its config follows key `config.<id>` of a JetStream
    /// key-value bucket (signed values only), its state is written to `state.<id>`. Absent:
    /// configured here only. The section itself is local: a config from the fleet keeps it.
    pub fleet: Option<crate::fleet::RawFleet>,
    /// NATS: connections, JetStream sources (`nats/<name>`) and the `nats` sink.
    pub nats: Option<RawNats>,
    /// MQTT: connections, sources (`mqtt/<name>`, acked on receipt) and the `mqtt` sink.
    pub mqtt: Option<RawMqtt>,
    /// Telemetry: where alerts go (`telemetry.alerts`).
    pub telemetry: Option<RawTelemetry>,
    /// Schedules: ticks at an interval or on a cron expression (UTC), as records
    /// `schedule/<name>`. Missed ticks are not replayed.
    pub schedules: Option<Vec<RawSchedule>>,
    /// Backfills: records read from a JSONL or CSV file as `backfill/<name>`, retried until
    /// accepted, resumed from a durable checkpoint after a restart.
    pub backfills: Option<Vec<RawBackfill>>,
}

/// `dead_letters:`
#[derive(Debug, Default, Deserialize)]
pub struct RawDeadLetters {
    /// Most entries kept; beyond it the oldest resolved entries are trimmed first, then the
    /// oldest open ones, each trim logged. Default 100000.
    pub max_rows: Option<u64>,
}

/// `connector:`
#[derive(Debug, Default, Deserialize)]
pub struct RawConnector {
    /// Name shown on the status page and in alerts. Default `opex-connector`.
    pub name: Option<String>,
    /// Folder of the durable stores (`push_queue.db`, ...). Required.
    pub data_dir: Option<String>,
    /// The HTTP server: status, metrics, ingest API.
    pub http: Option<RawHttp>,
    /// The durable LMDB push queue on flash.
    pub push_queue: Option<RawPushQueue>,
    /// The uplink that drains the push queue to an upstream HTTP endpoint.
    pub push: Option<RawPush>,
    /// Rules applied to records on their way into the push queue only: `deadband`,
    /// `aggregate`, `heartbeat`, per source or per point. Storage and the other sinks get
    /// every record.
    pub preprocess: Option<Vec<RawPreprocessRule>>,
    /// `true` only in the demo (`config/demo.yaml`): bearer tokens shorter than 16 characters
    /// are then accepted with a warning, as long as `http.listen` is a loopback address. Leave
    /// it out of a real config. Default `false`.
    pub demo: Option<bool>,
}
