//! The real peers the tests run against, one file each, all of the same shape:
//!
//! - `X::start()` starts it on a free loopback port ([`super::free_port`]) in a temp dir of
//!   its own and returns once it is ready, found by polling with a deadline (never a fixed
//!   sleep). A missing program fails the test with what to install (`scripts/test.sh`).
//! - `stop()` stops it cleanly (SIGTERM, or `pg_ctl -m fast`), `kill9()` as a crash would;
//!   `restart()` then starts it again **on the same port and data dir** (the outage tests)
//!   and waits until it is ready. Dropping it stops it; when a test fails, its log's tail is
//!   printed.
//!
//! | peer | type | file |
//! |---|---|---|
//! | `nats-server` with JetStream | [`NatsServer`] (client: [`Js`]) | `nats.rs` |
//! | three-node JetStream cluster | [`NatsCluster`] | `nats_cluster.rs` |
//! | nats-py as a fleet's controller (key-value bucket) | [`FleetController`] | `fleet_controller.rs` |
//! | `mosquitto` | [`Mosquitto`] (client: [`MqttClient`]) | `mosquitto.rs` |
//! | PostgreSQL | [`Postgres`] (`start_tls` for TLS) | `postgres.rs` |
//! | ClickHouse | [`ClickHouse`] | `clickhouse.rs` |
//! | pymodbus over TCP / over RTU on a socat pty pair | [`ModbusTcp`] / [`ModbusRtu`] | `modbus.rs` |
//! | asyncua OPC-UA server | [`OpcuaServer`] (`start_secure` for Basic256Sha256) | `opcua.rs` |
//! | the built-in simulator's OPC-UA plant, in process | `SimulatorPlant` | `opcua.rs` |
//! | asyncua OPC-UA client, driven by JSON lines | [`OpcuaClient`] ([`ClientOptions`]) | `opcua_client.rs` |
//! | node-opcua OPC-UA client, one read per run | [`node_opcua_read`] | `node_opcua.rs` |
//! | python-snap7 S7 PLC (areas and bytes given by the test) | [`S7Plc`] | `s7.rs` |
//! | the built-in simulator's S7 CPU, as the real binary | [`SimulatedCpu`] | `s7.rs` |
//!
//! The OPC-UA clients test the connector's own OPC-UA server: they are started by the test,
//! not waited for on a port, and [`OpcuaClient`] answers requests sent on its standard input.
//!
//! The peers' scripts (`modbus_device.py`, `opcua_server.py`, `opcua_client.py`, `s7_plc.py`, `fleet_controller.py`,
//! `node_opcua_client.js`) live beside the file that starts them. `process.rs` holds what
//! they share: finding a program, the child with its log, readiness polling, SIGTERM with a
//! deadline.

mod clickhouse;
mod fleet_controller;
mod modbus;
mod mosquitto;
mod nats;
mod nats_cluster;
mod node_opcua;
mod opcua;
mod opcua_client;
mod postgres;
mod process;
mod s7;

// Each test binary uses a subset of these.
#[allow(unused_imports)]
pub use self::{
    clickhouse::*, fleet_controller::*, modbus::*, mosquitto::*, nats::*, nats_cluster::*,
    node_opcua::*, opcua::*, opcua_client::*, postgres::*, process::PEER_START_DEADLINE, s7::*,
};
