//! The configs the connector has run, kept in the data dir: `config-revisions/<N>.yaml`, the
//! text of revision `N` as it was applied, and `config-revisions/index.json`, the list of the
//! kept revisions (newest first, at most [`KEPT`]) with when, where from and the hash of each.
//! Each file is written whole and renamed into place after an fsync, the index last, so a
//! crash leaves the previous index or the new one.
//!
//! A revision is a whole number that grows by one with every config applied. A start with the
//! config of the newest revision keeps its number; a start with another config is a new
//! revision of origin `start`.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// [`crate::store::file::write_whole`], its error with the file's path.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), String> {
    crate::store::file::write_whole(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// How many revisions are kept.
pub const KEPT: usize = 50;

/// The folder under the data dir.
pub const DIR: &str = "config-revisions";

/// Where a config came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The file given to `run`, read at start.
    Start,
    /// The file given to `run`, read again on `SIGHUP`.
    Sighup,
    /// `POST /api/config` (or a rollback).
    Api,
    /// A fleet's key-value bucket.
    Fleet,
}

impl Origin {
    const ALL: [Origin; 4] = [Origin::Start, Origin::Sighup, Origin::Api, Origin::Fleet];

    /// Its name: `start`, `sighup`, `api`, `fleet`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Sighup => "sighup",
            Self::Api => "api",
            Self::Fleet => "fleet",
        }
    }
}

/// One kept revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    /// Its number.
    pub revision: u64,
    /// When it was applied (RFC 3339, UTC).
    pub at: String,
    /// Where it came from.
    pub origin: Origin,
    /// Who applied it: `admin` for the admin token, a fleet key's id; absent at a start.
    pub by: Option<String>,
    /// The SHA-256 of its text, hex.
    pub hash: String,
}

impl Revision {
    /// As `GET /api/config/revisions` and the index show it (`by` only when known).
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "revision": self.revision,
            "at": self.at,
            "origin": self.origin.as_str(),
            "hash": self.hash,
        });
        if let Some(by) = &self.by {
            v["by"] = Value::String(by.clone());
        }
        v
    }

    /// Read back from [`Revision::to_json`]; `None` when a field is missing or wrong.
    fn from_json(v: &Value) -> Option<Self> {
        let text = |key: &str| v.get(key)?.as_str().map(str::to_string);
        let origin = text("origin")?;
        Some(Self {
            revision: v.get("revision")?.as_u64()?,
            at: text("at")?,
            origin: Origin::ALL.into_iter().find(|o| o.as_str() == origin)?,
            by: text("by"),
            hash: text("hash")?,
        })
    }
}

/// The index's text: `{"revisions":[...]}`, newest first.
pub fn index_json(revisions: &[Revision]) -> Value {
    json!({ "revisions": revisions.iter().map(Revision::to_json).collect::<Vec<_>>() })
}

/// The kept revisions of one data dir.
pub struct Revisions {
    dir: PathBuf,
    index: Vec<Revision>,
}

/// The SHA-256 of a config's text, hex: the `hash` of its revision.
pub fn hash(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Revisions {
    /// The revisions kept under `data_dir` (none yet: an empty list). An index that cannot be
    /// read is started again, numbered after the newest text still there, with a warning.
    pub fn open(data_dir: &Path) -> Result<Self, String> {
        let dir = data_dir.join(DIR);
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join("index.json");
        let index = match fs::read(&path) {
            Ok(bytes) => {
                let read = serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| {
                    v.get("revisions")?
                        .as_array()?
                        .iter()
                        .map(Revision::from_json)
                        .collect::<Option<Vec<_>>>()
                });
                read.unwrap_or_else(|| {
                    log::warn!(
                        "config revisions: cannot read {}, starting the list again",
                        path.display()
                    );
                    Vec::new()
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        Ok(Self { dir, index })
    }

    /// No revisions, for a data dir whose revisions cannot be read.
    pub fn none(data_dir: &Path) -> Self {
        Self {
            dir: data_dir.join(DIR),
            index: Vec::new(),
        }
    }

    /// The newest revision, if any.
    pub fn latest(&self) -> Option<&Revision> {
        self.index.first()
    }

    /// The kept revisions, newest first.
    pub fn list(&self) -> &[Revision] {
        &self.index
    }

    /// The text of kept revision `n`.
    pub fn text(&self, n: u64) -> Option<String> {
        if !self.index.iter().any(|r| r.revision == n) {
            return None;
        }
        fs::read_to_string(self.dir.join(format!("{n}.yaml"))).ok()
    }

    /// Keeps `text` as the next revision, applied at `at` from `origin` by `by`; at a start
    /// with the newest revision's own text, that revision is kept as it is and returned.
    pub fn record(
        &mut self,
        text: &str,
        origin: Origin,
        by: Option<&str>,
        at: String,
    ) -> Result<Revision, String> {
        let hash = hash(text);
        if let Some(latest) = self.latest() {
            if origin == Origin::Start && latest.hash == hash {
                return Ok(latest.clone());
            }
        }
        let revision = Revision {
            revision: self.next_number(),
            at,
            origin,
            by: by.map(str::to_string),
            hash,
        };
        write_whole(
            &self.dir.join(format!("{}.yaml", revision.revision)),
            text.as_bytes(),
        )?;
        let mut index = vec![revision.clone()];
        index.extend(self.index.iter().take(KEPT - 1).cloned());
        let json = index_json(&index).to_string();
        write_whole(&self.dir.join("index.json"), json.as_bytes())?;
        for gone in self.index.iter().skip(KEPT - 1) {
            let _ = fs::remove_file(self.dir.join(format!("{}.yaml", gone.revision)));
        }
        self.index = index;
        Ok(revision)
    }

    /// One after the newest kept revision, or after the newest text left in the folder when
    /// the index was lost.
    fn next_number(&self) -> u64 {
        let listed = self.latest().map_or(0, |r| r.revision);
        let files = fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_suffix(".yaml")?.parse::<u64>().ok()
            })
            .max()
            .unwrap_or(0);
        listed.max(files) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(n: u64) -> String {
        format!("2026-12-06T00:00:{n:02}Z")
    }

    #[test]
    fn a_start_with_the_same_text_keeps_the_revision_and_another_text_is_the_next() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut r = Revisions::open(dir.path()).expect("open");
        let first = r
            .record("a: 1\n", Origin::Start, None, at(0))
            .expect("record");
        assert_eq!(first.revision, 1);
        let again = Revisions::open(dir.path())
            .expect("open")
            .record("a: 1\n", Origin::Start, None, at(1))
            .expect("record");
        assert_eq!(again, first);
        let mut r = Revisions::open(dir.path()).expect("open");
        let api = r
            .record("a: 2\n", Origin::Api, Some("admin"), at(2))
            .expect("record");
        assert_eq!(api.revision, 2);
        assert_eq!(r.text(1).as_deref(), Some("a: 1\n"));
        assert_eq!(r.list()[0].by.as_deref(), Some("admin"));
        // The same text by the API is a revision of its own: it was applied again.
        let same = r
            .record("a: 2\n", Origin::Api, None, at(3))
            .expect("record");
        assert_eq!(same.revision, 3);
    }

    #[test]
    fn only_the_last_fifty_are_kept_and_the_numbers_go_on() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut r = Revisions::open(dir.path()).expect("open");
        for n in 0..(KEPT as u64 + 5) {
            r.record(&format!("n: {n}\n"), Origin::Api, None, at(n % 60))
                .expect("record");
        }
        let r = Revisions::open(dir.path()).expect("open");
        assert_eq!(r.list().len(), KEPT);
        assert_eq!(r.latest().map(|l| l.revision), Some(KEPT as u64 + 5));
        assert_eq!(r.list().last().map(|l| l.revision), Some(6));
        assert!(r.text(5).is_none());
        assert!(!dir.path().join(DIR).join("5.yaml").exists());
    }

    #[test]
    fn a_lost_index_starts_again_after_the_newest_text() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut r = Revisions::open(dir.path()).expect("open");
        r.record("a: 1\n", Origin::Start, None, at(0))
            .expect("record");
        r.record("a: 2\n", Origin::Sighup, None, at(1))
            .expect("record");
        fs::write(dir.path().join(DIR).join("index.json"), b"{not json").expect("write");
        let mut r = Revisions::open(dir.path()).expect("open");
        assert!(r.list().is_empty());
        let next = r
            .record("a: 3\n", Origin::Start, None, at(2))
            .expect("record");
        assert_eq!(next.revision, 3);
    }

    #[test]
    fn the_hash_is_the_sha256_of_the_text() {
        assert_eq!(
            hash(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
