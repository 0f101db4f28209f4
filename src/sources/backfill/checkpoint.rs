//! A backfill's durable position: `<data_dir>/backfills/<name>.checkpoint.json`.
//!
//! Written atomically: the new text goes to a temporary file, which is synced, renamed over
//! the old one, and the folder is synced, so after a crash the file holds either the old or
//! the new position, never a torn one. The checkpoint names the file it belongs to by a
//! fingerprint (SHA-256 of its first bytes): a different file at the same path is refused
//! rather than read from a wrong position.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bytes of the file's start that its fingerprint covers.
pub const FINGERPRINT_BYTES: u64 = 4096;

/// Where a backfill stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Fingerprint of the file's first `fingerprint_len` bytes (hex).
    pub fingerprint: String,
    /// How many bytes the fingerprint covers.
    pub fingerprint_len: u64,
    /// Byte offset just after the last settled record: reading resumes here.
    pub offset: u64,
    /// Data records settled (acknowledged or malformed) before `offset`.
    pub records: u64,
    /// Of them, malformed and skipped.
    pub malformed: u64,
}

/// The checkpoint file of backfill `name`.
pub fn path(data_dir: &Path, name: &str) -> PathBuf {
    data_dir
        .join("backfills")
        .join(format!("{name}.checkpoint.json"))
}

/// Reads a checkpoint; `Ok(None)` when there is none yet.
pub fn load(path: &Path) -> Result<Option<Checkpoint>, String> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            format!(
                "checkpoint {} is unreadable ({e}); delete it to start the backfill over",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read checkpoint {}: {e}", path.display())),
    }
}

/// Writes a checkpoint atomically and durably.
pub fn save(path: &Path, cp: &Checkpoint) -> Result<(), String> {
    let fail =
        |what: &str, e: std::io::Error| format!("checkpoint {}: {what}: {e}", path.display());
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| fail("create folder", e))?;
    // Serializing plain numbers and strings cannot fail.
    let text = serde_json::to_vec(cp).unwrap_or_default();
    crate::store::file::write_whole(path, &text)
        .map_err(|e| format!("checkpoint {}: {e}", path.display()))
}

/// Fingerprint of the first `len` bytes of `file` (fewer when the file is shorter) and how
/// many bytes it covered.
pub fn fingerprint(file: &mut File, len: u64) -> std::io::Result<(String, u64)> {
    let mut buf = Vec::new();
    Read::by_ref(file).take(len).read_to_end(&mut buf)?;
    let digest = Sha256::digest(&buf);
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok((hex, buf.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Seek;

    #[test]
    fn a_checkpoint_survives_a_rewrite_and_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "orders");
        assert_eq!(load(&p).unwrap(), None);
        let cp = Checkpoint {
            fingerprint: "ab".into(),
            fingerprint_len: 3,
            offset: 120,
            records: 10,
            malformed: 1,
        };
        save(&p, &cp).unwrap();
        save(
            &p,
            &Checkpoint {
                offset: 240,
                ..cp.clone()
            },
        )
        .unwrap();
        assert_eq!(load(&p).unwrap().unwrap().offset, 240);
        assert!(!p.with_extension("json.tmp").exists());
        fs::write(&p, b"{torn").unwrap();
        assert!(load(&p).unwrap_err().contains("delete it"));

        let data = dir.path().join("d.jsonl");
        fs::write(&data, b"{}\n{}\n").unwrap();
        let mut f = File::open(&data).unwrap();
        let (a, n) = fingerprint(&mut f, FINGERPRINT_BYTES).unwrap();
        assert_eq!(n, 6);
        f.rewind().unwrap();
        assert_eq!(fingerprint(&mut f, 3).unwrap().1, 3);
        fs::write(&data, b"{}\n{}\n{}\n").unwrap();
        let mut f = File::open(&data).unwrap();
        assert_eq!(
            fingerprint(&mut f, n).unwrap().0,
            a,
            "appending keeps the fingerprint"
        );
    }
}
