//! The running config and its revisions: what `GET /api/config` shows (secrets redacted),
//! what a new config would change part by part (`POST /api/config?dry_run=1`, [`parts`]),
//! and the applied configs kept in the data dir ([`revisions`]).
//!
//! [`Running`] is the one place that knows which config runs: its text, its tree (templates
//! expanded), its revision and hash, when it was loaded, how many reloads since the start
//! and the last reload's error. `/api/status` (`config`) and `/metrics` read it.

pub mod parts;
pub mod revisions;

use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::{json, Value};

pub use parts::{diff, Change, Diff, NEEDS_RESTART};
pub use revisions::{Origin, Revision, Revisions};

/// What replaces a secret in a config shown.
pub const REDACTED: &str = "<redacted>";

/// The keys whose values are secrets, wherever they are in a config.
const SECRET_KEYS: [&str; 5] = [
    "token",
    "admin_token",
    "password",
    "password_hash",
    "secret",
];

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
}

struct Current {
    text: String,
    tree: Value,
    revision: Revision,
    loaded_at_ms: u64,
    reloads: u64,
    last_error: Option<String>,
}

impl Running {
    /// The config `loaded` at the start, kept as a revision in `data_dir` (the newest one
    /// when it has the same text). When it cannot be kept (a full or read-only disk), it runs
    /// all the same, as revision 0, with a warning: the revisions are the operator's record,
    /// not a reason to stop the line.
    pub fn start(loaded: Loaded, data_dir: &std::path::Path) -> Result<Self, String> {
        let tree = crate::config::expanded_tree(&loaded.text).map_err(|p| p.to_string())?;
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
        Ok(Self {
            path: loaded.path,
            current: Mutex::new(Current {
                text: loaded.text,
                tree,
                revision,
                loaded_at_ms: now,
                reloads: 0,
                last_error: None,
            }),
            revisions: Mutex::new(revisions),
        })
    }

    /// The file given to `run`, if any.
    pub fn path(&self) -> Option<&std::path::Path> {
        self.path.as_deref()
    }

    /// The running revision's number.
    pub fn revision(&self) -> u64 {
        self.with(|c| c.revision.revision)
    }

    /// Configs applied since the start.
    pub fn reloads(&self) -> u64 {
        self.with(|c| c.reloads)
    }

    /// The running config's tree, templates expanded.
    pub fn tree(&self) -> Value {
        self.with(|c| c.tree.clone())
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
    /// the last reload's error.
    pub fn status(&self) -> Value {
        self.with(|c| {
            json!({
                "revision": c.revision.revision,
                "hash": c.revision.hash,
                "loaded_at": crate::time::rfc3339(c.loaded_at_ms),
                "reloads": c.reloads,
                "last_error": c.last_error,
            })
        })
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

/// `text` (a config) as YAML with every secret replaced by [`REDACTED`]: the values of the
/// keys of [`SECRET_KEYS`] and the password of a URL's `user:password@`. Written from the
/// parsed tree: the text's comments and key order are not kept.
pub fn redacted_yaml(text: &str) -> String {
    let mut tree: Value = match serde_saphyr::from_str(text) {
        Ok(v) => v,
        Err(_) => return String::new(),
    };
    redact(&mut tree);
    serde_saphyr::to_string(&tree).unwrap_or_default()
}

/// Replaces the secrets in `value`, as [`redacted_yaml`] says.
pub fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if SECRET_KEYS.contains(&key.as_str()) && !v.is_null() {
                    *v = Value::String(REDACTED.into());
                } else {
                    redact(v);
                }
            }
        }
        Value::Array(list) => list.iter_mut().for_each(redact),
        Value::String(s) => {
            if let Some(hidden) = url_without_password(s) {
                *s = hidden;
            }
        }
        _ => {}
    }
}

/// `url` with the password of its `user:password@` replaced, when it has one.
fn url_without_password(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let (userinfo, host) = authority.rsplit_once('@')?;
    let (user, _password) = userinfo.split_once(':')?;
    Some(format!("{scheme}://{user}:{REDACTED}@{host}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_wherever_they_are() {
        let text = "connector:\n  data_dir: /d\n  http: {admin_token: admin-token-0123}\ningest:\n  sources: [{name: line, token: tok-0123456789ab}]\nwebhooks:\n  - {name: pay, secret: s3cret}\npostgres:\n  url: 'postgres://opex:hunter2@127.0.0.1:5432/plant'\n  table: events\nopcua_server:\n  users: [{name: scada, password_hash: '$argon2id$v=19$x', role: read}]\n";
        let shown = redacted_yaml(text);
        for secret in [
            "admin-token-0123",
            "tok-0123456789ab",
            "s3cret",
            "hunter2",
            "argon2id",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(
            shown.contains("postgres://opex:<redacted>@127.0.0.1:5432/plant"),
            "{shown}"
        );
        assert!(shown.contains("name: line"), "{shown}");
        let tree: Value = serde_saphyr::from_str(&shown).expect("YAML");
        assert_eq!(tree["ingest"]["sources"][0]["token"], REDACTED);
    }

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
        let running = Running::start(loaded, &data_dir).expect("runs");
        assert_eq!(running.revision(), 0);
        assert_eq!(running.status()["revision"], 0);
        assert_eq!(running.revisions()["revisions"], json!([]));
    }

    #[test]
    fn a_url_without_a_password_is_left_as_it_is() {
        assert_eq!(url_without_password("nats://127.0.0.1:4222"), None);
        assert_eq!(url_without_password("http://user@host/x"), None);
        assert_eq!(
            url_without_password("mqtt://u:p@h:1883").as_deref(),
            Some("mqtt://u:<redacted>@h:1883")
        );
    }
}
