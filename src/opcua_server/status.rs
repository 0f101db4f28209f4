//! The server's figures, for `/api/status` `opcua_server` (always built: a build without the
//! server still validates and shows a config that has one).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::telemetry::prometheus::{Kind, Page};

/// The server's figures, shared by its parts.
#[derive(Debug, Default)]
pub struct Stats {
    /// True while the server listens.
    pub listening: AtomicBool,
    /// Sessions open now.
    pub sessions: AtomicU64,
    /// Subscriptions open now.
    pub subscriptions: AtomicU64,
    /// Monitored items of the devices' variables now, all sessions together.
    pub monitored_items: AtomicU64,
    /// Monitored items refused at `limits.monitored_items`.
    pub monitored_items_refused: AtomicU64,
    /// The open sessions that asked for the devices' variables: `{id, user, application,
    /// application_uri, security, since}`.
    pub open_sessions: Mutex<Vec<Value>>,
    /// The endpoints offered: `{url, policy, mode}`.
    pub endpoints: Mutex<Vec<Value>>,
    /// Logins accepted.
    pub logins: AtomicU64,
    /// Logins refused (an unknown user, a wrong password, anonymous when not allowed).
    pub refused_logins: AtomicU64,
    /// Values of the devices' variables read (each node of a Read request).
    pub reads: AtomicU64,
    /// Writes taken (each node of a Write request that reached the commands path).
    pub writes: AtomicU64,
    /// Of those, written.
    pub writes_good: AtomicU64,
    /// The folder rejected client certificates go to.
    pub rejected_dir: PathBuf,
}

impl Stats {
    /// The figures of a server whose rejected certificates go to `rejected_dir`.
    pub fn new(rejected_dir: PathBuf) -> Arc<Self> {
        Arc::new(Self {
            rejected_dir,
            ..Default::default()
        })
    }

    /// `/api/status` `opcua_server`.
    pub fn to_json(&self) -> Value {
        let rejected = std::fs::read_dir(&self.rejected_dir)
            .map(|d| d.flatten().count())
            .unwrap_or(0);
        let endpoints = self.endpoints.lock().map(|e| e.clone()).unwrap_or_default();
        let open_sessions = self
            .open_sessions
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default();
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        json!({
            "listening": self.listening.load(Ordering::Relaxed),
            "endpoints": endpoints,
            "sessions": n(&self.sessions),
            "open_sessions": open_sessions,
            "subscriptions": n(&self.subscriptions),
            "monitored_items": n(&self.monitored_items),
            "monitored_items_refused": n(&self.monitored_items_refused),
            "logins": n(&self.logins),
            "refused_logins": n(&self.refused_logins),
            "reads": n(&self.reads),
            "writes": n(&self.writes),
            "writes_good": n(&self.writes_good),
            "rejected_certificates": rejected,
        })
    }

    /// The server's families on `/metrics`.
    pub fn write_metrics(&self, p: &mut Page) {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64;
        let up = if self.listening.load(Ordering::Relaxed) {
            1.0
        } else {
            0.0
        };
        p.single(
            "opex_connector_opcua_server_listening",
            Kind::Gauge,
            "1 while the OPC-UA server listens.",
            up,
        );
        p.single(
            "opex_connector_opcua_server_sessions",
            Kind::Gauge,
            "OPC-UA sessions open.",
            n(&self.sessions),
        );
        p.single(
            "opex_connector_opcua_server_subscriptions",
            Kind::Gauge,
            "OPC-UA subscriptions open.",
            n(&self.subscriptions),
        );
        p.single(
            "opex_connector_opcua_server_monitored_items",
            Kind::Gauge,
            "Monitored items of the devices' variables, all sessions together.",
            n(&self.monitored_items),
        );
        p.single(
            "opex_connector_opcua_server_monitored_items_refused_total",
            Kind::Counter,
            "Monitored items refused at limits.monitored_items.",
            n(&self.monitored_items_refused),
        );
        p.single(
            "opex_connector_opcua_server_logins_total",
            Kind::Counter,
            "OPC-UA logins accepted.",
            n(&self.logins),
        );
        p.single(
            "opex_connector_opcua_server_refused_logins_total",
            Kind::Counter,
            "OPC-UA logins refused: an unknown user, a wrong password, anonymous when not allowed.",
            n(&self.refused_logins),
        );
        p.single(
            "opex_connector_opcua_server_reads_total",
            Kind::Counter,
            "Values of the devices' variables read (each node of a Read request).",
            n(&self.reads),
        );
        p.single(
            "opex_connector_opcua_server_writes_total",
            Kind::Counter,
            "Writes to the devices' variables handed to the commands path.",
            n(&self.writes),
        );
        p.single(
            "opex_connector_opcua_server_writes_good_total",
            Kind::Counter,
            "Of those, written.",
            n(&self.writes_good),
        );
    }
}
