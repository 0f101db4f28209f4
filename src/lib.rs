//! opex-connector: an edge gateway for industrial boxes. It takes records from machines and
//! callers, and delivers them **at least once**: a record is acknowledged to its source only
//! after it is stored, and when it cannot be stored the source is told to retry in its own
//! protocol. Every loss the design allows is counted, logged and alerted.
//!
//! # Layout
//!
//! The rooms mirror the path a record takes:
//!
//! | room | owns |
//! | --- | --- |
//! | `main.rs` | the command line: `run`, `reload`, `validate`, `demo-config`, `overlay`, `simulate`, `browse`, `read` (Modbus, OPC-UA, S7), `scan`, `--version`, release tooling; parses with [`cli`] and dispatches, no behaviour of its own |
//! | [`cli`] | the command table: every command's arguments, options, exit status and examples, and what is written from it (the parser's checks, `--help`, shell completions, the man page, the book's command-line page) |
//! | [`config`] | YAML → raw structs → pure validation with every problem's path → [`config::Config`]; [`config::schema`], the JSON Schema and reference page `build.rs` writes from the raw structs |
//! | [`record`] | [`record::Record`] (id, source, key, timestamp, payload) and [`record::Settlement`] |
//! | [`sources`] | where records come from: [`sources::ingest`] (HTTP ingest API), [`sources::webhook`], [`sources::nats`] (JetStream), [`sources::mqtt`], the devices of [`sources::devices`] on the pollers' own runtime ([`sources::pollers`], their one start path, each connection's loop stopped and started alone by a reload): each protocol a driver behind one contract ([`sources::driver`]) run by one poll loop ([`sources::poll_loop`]: schedule, breaker, hold-then-drop, commands between polls), every device's figures in one [`sources::status::DeviceStatus`] and its points in the protocol-neutral [`sources::catalogue`]; the protocols [`sources::modbus`], [`sources::opcua`] (polls and subscriptions, the subscriptions pushed to the loop), [`sources::s7`] (Siemens S7comm over ISO-on-TCP: connection, planner, types), with the device templates of [`sources::templates`] expanded into `devices:` before parsing and [`sources::hints`] saying what a device's error means, [`sources::schedule`] (ticks), [`sources::backfill`] (files); [`sources::live`], the ingest, webhook, NATS, MQTT, schedule and backfill sources each with a stop of its own, which a reload stops, starts or replaces alone |
//! | [`flow`] | the deployed flows: nodes, wires, error ports, templates; validated, then compiled to a [`flow::Plan`] (per source, its entry nodes and every sink it can reach) |
//! | [`engine`] | `offer(record) -> Settlement`: admission before anything runs, the nodes of the plan, then the sinks; `offer_batch` for a batch of one source (admitted whole, its rows committed together by [`store::queue::in_one_commit`]) |
//! | [`admission`] | per-sink gates: quota, `on_full`, byte reservations; and [`admission::level`], the alert level of each bounded queue |
//! | [`health`] | the one health model: since when each problem the parts report lasts, and the connector's `state` (`ok` / `degraded` / `failing`) that `/api/status`, the outage alerts and Sparkplug's `Connector/Healthy` all read; the findings are read in `http/problems.rs` |
//! | [`hub`] | the DataHub: offered records and status changes broadcast to the live view (256 messages; slow clients skip, counted); not a delivery path |
//! | [`sinks`] | where records go: named instances of kinds behind one contract, [`sinks::Sink`], whose [`sinks::Report`] is all the rest of the program reads of a sink; the kinds [`sinks::push`] (queue + HTTP uplink, with [`sinks::push::preprocess`]: deadband, aggregation), [`sinks::storage`] (event history), [`sinks::clickhouse`] and [`sinks::postgres`] (tables, through the bounded memory [`sinks::backlog`]), [`sinks::nats`], [`sinks::mqtt`], [`sinks::sparkplug`] (a Sparkplug B edge node behind a disk queue); [`sinks::queue`], the durable queue and its deliverer in front of push and any `queue: disk`; [`sinks::config`], the `sinks:` list and the sections that each make one sink; [`sinks::Started`], the sinks while they run, each stopped alone by a reload |
//! | [`brokers`] | NATS and MQTT connections and their TLS, shared by sources, sinks and alert channels |
//! | [`store`] | the LMDB environments and their writer threads (the only `unsafe` code) |
//! | [`alerts`] | the alert hub: every bounded queue's level (`ok` / `high` / `full`) and the alerted loss counters, checked every few seconds and sent to the log and the `telemetry.alerts` channels (webhook, MQTT, NATS) |
//! | [`ledger`] | the loss ledger: per source received, acked, refused, delivered, pending, dead-lettered and lost by cause; per sink accepted, delivered, pending; the check `acked = delivered + pending + dead_lettered + losses` (`GET /api/ledger`) |
//! | [`commission`] | the commissioning tools run from the shell: `browse` (an OPC-UA server's address space, as a tree or a ready `nodes:` list), `read` (one point, as a config reads it; Modbus, OPC-UA, S7), `scan` (which Modbus addresses exist); read only, in the config's own words and through the pollers' own code |
//! | [`commands`] | writes down to devices, at most once and never late: the commands service, the devices' inboxes their poller tasks read between polls, and the `command/<device>` records |
//! | [`opcua_server`] | the northbound OPC-UA server (`opcua_server:`): every device's points of the catalogue as one address space for SCADA, HMI and MES clients, with the gateway's own figures; users with Argon2id hashes; writes handed to the commands service; its figures for `/api/status` and `/metrics`; [`opcua_server::Serving`], the server while it runs, started again by a reload that changes the devices |
//! | [`http`] | the HTTP server and its config (`http/config.rs`): the `Host` check every request passes first (`http/hosts.rs`, against DNS rebinding), ingest API, commands to devices (`POST /api/devices/{device}/write`, `http/commands.rs`), `/api/status`, `/metrics`, `/api/ledger` (`http/ledger.rs`), admin endpoints, the config API (`GET /api/config`, its revisions, `POST /api/config?dry_run=1`, `http/config_api.rs`), the status page (static files in `http/page/`, gzip-compressed by `build.rs`), `GET /api/openapi.json` (the book's `docs/src/reference/openapi.json`, the OpenAPI 3.1 description of every route, served like the page's files) and its WebSocket live view (`http/live.rs`, framing in `http/ws.rs`); the connector's own blocking HTTP client for the push uplink, ClickHouse and alert webhooks (`http/client.rs`) |
//! | [`trends`] | the status page's last hour, in memory: every device point, every queue's fill, records/s in per source and out per sink, as 360 buckets of 10 s (min, max, mean, last) per series, at most 2 000 series; fed by the pollers and a sampler, read by `GET /api/trends` |
//! | [`telemetry`] | typed events that log and count; the Prometheus text format |
//! | [`simulator`] | a small plant served over Modbus TCP, as a Siemens S7 CPU ([`simulator::s7`]) (`opex-connector simulate`, the demo) and, with the `simulator` feature, OPC-UA ([`simulator::opcua`]) |
//! | [`shutdown`] | the one stop signal every task and thread waits on |
//! | [`priority`] | thread priorities: the pollers first, every other busy thread after them |
//! | [`gzip`] | inflating the gzip members `build.rs` wrote (the status page's files, the config schema) |
//! | [`time`] | UTC calendar arithmetic: config durations, RFC 3339, civil dates for cron |
//! | [`reload`] | the running config and its revisions: its text, revision and hash (`/api/status` `config`, `/metrics`), the applied configs kept in the data dir ([`reload::revisions`], the last 50), secrets redacted for `GET /api/config`, and what a new config changes part by part ([`reload::parts`]: each device, sink and source, the flows, the sections; what needs a restart); applying one while running (`POST /api/config`, `SIGHUP`, a rollback to a kept revision, `opex-connector reload` through [`reload::ask`]): the flows and sinks swapped together in the engine ([`engine::Routes`]), each device's poll loop and each sink stopped and started alone, the sources of [`sources::live`] one at a time, the alert channels and checks, the commands, the HTTP settings, the ingest limits and the dead-letter cap; what cannot change live is refused with the reason |
//! | [`fleet`] | a fleet's configs from a JetStream key-value bucket (`fleet:`): the signed value of key `config.<id>` applied as a reload, the outcome written to `state.<id>`; `sign-config` makes a value |
//! | [`daemon`] | builds every part from a config ([`daemon::build`]), then runs them and stops them in order |
//! | [`release`] | release artifacts: signed manifests (version, target, sha256, expiry) and their checks, semantic-version order, the health check of an update, the previous version of an OTA install |
//!
//! A module never reaches into a sibling's internals: sources talk to the engine through
//! [`engine::Engine::offer`], and sinks are reached only through the engine.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod admission;
pub mod alerts;
pub mod brokers;
pub mod cli;
pub mod commands;
pub mod commission;
pub mod config;
pub mod daemon;
pub mod engine;
pub mod fleet;
pub mod flow;
pub mod gzip;
pub mod health;
pub mod http;
pub mod hub;
pub mod ledger;
pub mod opcua_server;
pub mod priority;
pub mod record;
pub mod release;
pub mod reload;
pub mod shutdown;
pub mod simulator;
pub mod sinks;
pub mod sources;
pub mod store;
pub mod telemetry;
pub mod time;
pub mod trends;

/// The version of this build.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
