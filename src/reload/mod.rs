//! The running config and its revisions: what `GET /api/config` shows (secrets redacted,
//! `redact.rs`), what a new config would change part by part (`POST /api/config?dry_run=1`,
//! [`parts`]), the applied configs kept in the data dir ([`revisions`]), and applying a new
//! config while the connector runs (`apply.rs`, [`Running::apply`]: `POST /api/config`,
//! `SIGHUP`, a kept revision rolled back to), and `opex-connector reload` asking the daemon
//! for it ([`ask`]).
//!
//! What this version applies live ([`LIVE_PARTS`]): the flows (the engine's plan swapped
//! whole, at once, with the sinks it routes to); the devices (each connection's poll loop
//! stopped and started alone, [`crate::sources::pollers`]); the sinks (a new one started; a
//! changed one replaced: a stateless one as its new instance starts, one with files of its
//! own stopped first and its files opened again, one holding rows in memory stopped first
//! and its rows handed to the new instance, a Sparkplug node born again once the devices and
//! routes are in place; a removed one stopped, drained, or its rows discarded on request);
//! the sources of
//! [`crate::sources::live`] (each stopped, started or replaced alone); the alerts
//! (`telemetry:`: the channels replaced, the checks' settings changed); the commands (their
//! settings, their NATS and MQTT paths restarted); the HTTP server's settings (read by the
//! next request); the ingest limits and the dead-letter cap. The NATS and MQTT connections
//! only they use restart with them, and the OPC-UA server with the devices or its own
//! settings.
//! A config that changes any other part, or a setting of [`NEEDS_RESTART`], is refused with
//! the parts named, and nothing changes: the operator restarts with it.
//!
//! [`Running`] is the one place that knows which config runs: its text (its tree, templates
//! expanded, is made again when asked: a config of 10 000 points is some megabytes as a tree
//! and half a megabyte as text), its revision and hash, when it was loaded, how many reloads
//! since the start and the last reload's error. `/api/status` (`config`) and `/metrics` read
//! it.

mod apply;
pub mod ask;
pub mod parts;
mod redact;
pub mod revisions;

use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::{json, Value};

pub use apply::{Applied, Leftovers, Refused, Targets, LIVE_PARTS};
pub use parts::{diff, Change, Diff, NEEDS_RESTART};
pub use redact::{redact, redacted_yaml, REDACTED};
pub use revisions::{Origin, Revision, Revisions};

/// Where the running config was read from.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The text as read.
    pub text: String,
    /// The file given to `run`; `None` for the embedded demo.
    pub path: Option<PathBuf>,
}

/// The running config.
pub struct Running {
    path: Option<PathBuf>,
    current: Mutex<Current>,
    revisions: Mutex<Revisions>,
    /// Held by the one apply at a time.
    applying: Mutex<()>,
}

struct Current {
    text: String,
    revision: Revision,
    loaded_at_ms: u64,
    reloads: u64,
    last_error: Option<String>,
    /// Why the file given to `run` does not hold the running config (its rename failed),
    /// until an apply writes it or `SIGHUP` reads it.
    file_error: Option<String>,
}

impl Running {
    /// The config `loaded` at the start, kept as a revision in `data_dir` (the newest one
    /// when it has the same text). When it cannot be kept (a full or read-only disk), it runs
    /// all the same, as revision 0, with a warning: the revisions are the operator's record,
    /// not a reason to stop the line.
    pub fn start(loaded: Loaded, data_dir: &std::path::Path) -> Self {
        let now = crate::record::now_ms();
        let at = crate::time::rfc3339(now);
        let kept = Revisions::open(data_dir).and_then(|mut revisions| {
            let revision = revisions.record(&loaded.text, Origin::Start, None, at.clone())?;
            Ok((revisions, revision))
        });
        let (revisions, revision) = match kept {
            Ok(kept) => kept,
            Err(e) => {
                log::warn!(
                    "config revisions: cannot keep the running config, it runs as revision 0: {e}"
                );
                let revision = Revision {
                    revision: 0,
                    at,
                    origin: Origin::Start,
                    by: None,
                    hash: revisions::hash(&loaded.text),
                };
                (Revisions::none(data_dir), revision)
            }
        };
        log::info!(
            "config: revision={} origin=start hash={}",
            revision.revision,
            revision.hash
        );
        Self {
            path: loaded.path,
            current: Mutex::new(Current {
                text: loaded.text,
                revision,
                loaded_at_ms: now,
                reloads: 0,
                last_error: None,
                file_error: None,
            }),
            revisions: Mutex::new(revisions),
            applying: Mutex::new(()),
        }
    }

    /// The file given to `run`, if any.
    pub fn path(&self) -> Option<&std::path::Path> {
        self.path.as_deref()
    }

    /// The running revision's number.
    pub fn revision(&self) -> u64 {
        self.with(|c| c.revision.revision)
    }

    /// The running config's hash (of its text as applied).
    pub fn hash(&self) -> String {
        self.with(|c| c.revision.hash.clone())
    }

    /// Configs applied since the start.
    pub fn reloads(&self) -> u64 {
        self.with(|c| c.reloads)
    }

    /// The running config's tree, templates expanded (`Null` if its text no longer reads,
    /// which a validated text cannot do).
    pub fn tree(&self) -> Value {
        let text = self.with(|c| c.text.clone());
        crate::config::expanded_tree(&text).unwrap_or(Value::Null)
    }

    /// `GET /api/config`: the running config with its secrets redacted, its revision and hash.
    pub fn shown(&self) -> Value {
        self.with(|c| {
            json!({
                "revision": c.revision.revision,
                "hash": c.revision.hash,
                "origin": c.revision.origin.as_str(),
                "at": c.revision.at,
                "config": redacted_yaml(&c.text),
            })
        })
    }

    /// `/api/status`'s `config`: revision, hash, when it was loaded, reloads since the start,
    /// the last reload's error, why the file given to `run` does not hold it.
    pub fn status(&self) -> Value {
        self.with(|c| {
            json!({
                "revision": c.revision.revision,
                "hash": c.revision.hash,
                "loaded_at": crate::time::rfc3339(c.loaded_at_ms),
                "reloads": c.reloads,
                "last_error": c.last_error,
                "file_error": c.file_error,
            })
        })
    }

    /// Why the file given to `run` does not hold the running config, and the running
    /// revision, when it does not.
    pub fn file_error(&self) -> Option<(String, u64)> {
        self.with(|c| Some((c.file_error.clone()?, c.revision.revision)))
    }

    /// The text of kept revision `n` (`POST /api/config/rollback/{n}`).
    pub fn text_of(&self, n: u64) -> Option<String> {
        self.revisions.lock().ok()?.text(n)
    }

    /// `GET /api/config/revisions`: the kept revisions, newest first.
    pub fn revisions(&self) -> Value {
        match self.revisions.lock() {
            Ok(r) => revisions::index_json(r.list()),
            Err(_) => json!({ "revisions": [] }),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&Current) -> T) -> T {
        // A panic while the lock was held cannot leave `Current` half written: every write
        // replaces whole fields.
        match self.current.lock() {
            Ok(c) => f(&c),
            Err(poisoned) => f(&poisoned.into_inner()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_that_cannot_be_kept_runs_as_revision_zero() {
        let dir = tempfile::tempdir().expect("tmp");
        // The data dir is a file: no folder can be made in it.
        let data_dir = dir.path().join("data");
        std::fs::write(&data_dir, b"").expect("write");
        let loaded = Loaded {
            text: "connector:\n  data_dir: /d\n".into(),
            path: None,
        };
        let running = Running::start(loaded, &data_dir);
        assert_eq!(running.revision(), 0);
        assert_eq!(running.status()["revision"], 0);
        assert_eq!(running.revisions()["revisions"], json!([]));
    }
}
