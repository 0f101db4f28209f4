//! The server's figures, for `/api/status` `opcua_server` (always built: a build without the
//! server still validates and shows a config that has one).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

/// The server's figures, shared by its parts.
#[derive(Debug, Default)]
pub struct Stats {
    /// True while the server listens.
    pub listening: AtomicBool,
    /// The endpoints offered: `{url, policy, mode}`.
    pub endpoints: Mutex<Vec<Value>>,
    /// Logins accepted.
    pub logins: AtomicU64,
    /// Logins refused (an unknown user, a wrong password, anonymous when not allowed).
    pub refused_logins: AtomicU64,
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
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        json!({
            "listening": self.listening.load(Ordering::Relaxed),
            "endpoints": endpoints,
            "logins": n(&self.logins),
            "refused_logins": n(&self.refused_logins),
            "writes": n(&self.writes),
            "writes_good": n(&self.writes_good),
            "rejected_certificates": rejected,
        })
    }
}
